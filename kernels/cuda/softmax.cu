// Row-wise softmax with a fused scale: out = softmax(scale * x) over the last dimension, the
// row maximum subtracted before exp (numerically stable), as the CPU twin and Triton's
// fused-softmax tutorial: the row is read once and written once.
//
// The block layout is layernorm's: a group of 32 * GROUP_WARPS threads per row, ROWS groups
// per block; one warp per row for rows up to 256 vectors (attention rows of 197 are the ViT
// case: 151,296 rows of 197 at batch 64), so the reductions are register shuffles only. With
// CACHED > 0 the row stays in registers between the max, the sum and the store; masked slots
// hold -inf, whose exp is 0. With CACHED == 0 (long rows) one online pass keeps a running
// maximum and a running sum rescaled whenever the maximum grows, and a second pass writes.
//
// VEC elements per access: 16 bytes when cols is a multiple of VEC and x and out are 16-byte
// aligned, else 1 (an odd row length such as 197 starts rows at odd addresses).
#include "common.cuh"

template <typename T, int VEC, int GROUP_WARPS, int ROWS, int CACHED>
__device__ __forceinline__ void softmax_rows(const T* x, T* out, int rows, int cols, float scale) {
    static_assert(GROUP_WARPS == 1 || ROWS == 1, "a block holds several rows only with one warp per row");
    constexpr int GROUP = 32 * GROUP_WARPS;
    __shared__ float scratch[GROUP_WARPS * ROWS];

    const int rank = threadIdx.x % GROUP;
    const int vectors = cols / VEC;
    // Each group walks rows gridDim.x * ROWS apart, as in layernorm.
    const long long row_stride = (long long)gridDim.x * ROWS;
    for (long long row = blockIdx.x * ROWS + threadIdx.x / GROUP; row < rows; row += row_stride) {
        const T* x_row = x + row * cols;
        T* out_row = out + row * cols;

        if (CACHED > 0) {
            float v[CACHED > 0 ? CACHED : 1][VEC];
            float max = -infinity();
#pragma unroll
            for (int c = 0; c < CACHED; ++c) {
                const int i = rank + c * GROUP;
                if (i < vectors) {
                    const Vec<T, VEC> loaded = load_vec<T, VEC>(x_row + i * VEC);
#pragma unroll
                    for (int j = 0; j < VEC; ++j) {
                        v[c][j] = scale * to_float(loaded.v[j]);
                        max = fmaxf(max, v[c][j]);
                    }
                } else {
#pragma unroll
                    for (int j = 0; j < VEC; ++j) v[c][j] = -infinity();
                }
            }
            max = group_reduce<MaxOp, GROUP_WARPS>(max, scratch);
            float sum = 0.0f;
#pragma unroll
            for (int c = 0; c < CACHED; ++c) {
                const bool valid = rank + c * GROUP < vectors;
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    v[c][j] = valid ? expf(v[c][j] - max) : 0.0f;
                    sum += v[c][j];
                }
            }
            const float inv_sum = 1.0f / group_reduce<SumOp, GROUP_WARPS>(sum, scratch);
#pragma unroll
            for (int c = 0; c < CACHED; ++c) {
                const int i = rank + c * GROUP;
                if (i < vectors) {
                    Vec<T, VEC> r;
#pragma unroll
                    for (int j = 0; j < VEC; ++j) r.v[j] = from_float<T>(v[c][j] * inv_sum);
                    store_vec<T, VEC>(out_row + i * VEC, r);
                }
            }
        } else {
            // Online pass: `sum` is the sum of exp(v - max) for the running `max`.
            float max = -infinity();
            float sum = 0.0f;
            for (int i = rank; i < vectors; i += GROUP) {
                const Vec<T, VEC> loaded = load_vec<T, VEC>(x_row + i * VEC);
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    const float v = scale * to_float(loaded.v[j]);
                    if (v > max) {
                        sum = sum * expf(max - v) + 1.0f;
                        max = v;
                    } else if (v != -infinity()) {
                        sum += expf(v - max);
                    }
                }
            }
            const float row_max = group_reduce<MaxOp, GROUP_WARPS>(max, scratch);
            const float mine = max == -infinity() ? 0.0f : sum * expf(max - row_max);
            const float inv_sum = 1.0f / group_reduce<SumOp, GROUP_WARPS>(mine, scratch);
            for (int i = rank; i < vectors; i += GROUP) {
                const Vec<T, VEC> loaded = load_vec<T, VEC>(x_row + i * VEC);
                Vec<T, VEC> r;
#pragma unroll
                for (int j = 0; j < VEC; ++j)
                    r.v[j] = from_float<T>(expf(scale * to_float(loaded.v[j]) - row_max) * inv_sum);
                store_vec<T, VEC>(out_row + i * VEC, r);
            }
        }
    }
}

// RMSNorm over the last dimension: out = x * rsqrt(mean(x²) + eps) * weight, as transformers'
// Aimv2RMSNorm (T5's LayerNorm): no mean subtracted, no bias. The mean of squares in fp32, as
// the CPU twin; the row is scaled in fp32 and only the result is rounded to the output type.
//
// transformers computes `weight * (x * rsqrt(var + eps)).to(input_dtype)`: in a half-precision
// model the normalised row is rounded before the weight multiplies it. vitrt keeps the residual
// stream in f32 and the weight in f32 (as layernorm's gamma, layernorm.cu says why), so it
// rounds once, after the weight: the error is at most that of transformers' order, never more.
//
// Memory-bound, one pass over x and one over out: the row layout is layernorm.cu's (a group of
// 32 * GROUP_WARPS threads per row, ROWS groups a block, CACHED vectors of the row held in
// registers between the reduction and the scaling, VEC elements per 16-byte access), chosen by
// the launcher with crate::rows. With CACHED == 0 (rows too long for registers) the scaling
// pass reads the row again, mostly from L2.
#include "common.cuh"

// VEC f32 values from p, as 16-byte loads when VEC is a multiple of 4 (the launcher checks
// that p is 16-byte aligned then).
template <int VEC> __device__ __forceinline__ Vec<float, VEC> load_weights(const float* p) {
    Vec<float, VEC> r;
    if constexpr (VEC % 4 == 0) {
#pragma unroll
        for (int q = 0; q < VEC / 4; ++q) {
            const Vec<float, 4> part = load_vec<float, 4>(p + 4 * q);
#pragma unroll
            for (int j = 0; j < 4; ++j) r.v[4 * q + j] = part.v[j];
        }
    } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) r.v[j] = p[j];
    }
    return r;
}

template <typename TI, typename T, int VEC, int GROUP_WARPS, int ROWS, int CACHED>
__device__ __forceinline__ void rmsnorm_rows(const TI* x, const float* weight, T* out, int rows, int cols,
                                             float eps) {
    static_assert(GROUP_WARPS == 1 || ROWS == 1, "a block holds several rows only with one warp per row");
    constexpr int GROUP = 32 * GROUP_WARPS;
    __shared__ float scratch[GROUP_WARPS * ROWS];

    const int rank = threadIdx.x % GROUP;
    const int vectors = cols / VEC;
    const float inv_cols = 1.0f / (float)cols;

    // With the row in registers a thread's weights are loaded once, before its first row, and
    // kept for every row it normalises (as layernorm.cu keeps gamma and beta); past 32 columns
    // a thread they would crowd the row out of registers, and are loaded in every row.
    constexpr bool kHeldWeights = CACHED > 0 && CACHED * VEC <= 32;
    constexpr int kHeld = kHeldWeights ? CACHED : 1;
    Vec<float, VEC> w[kHeld];
    if constexpr (kHeldWeights) {
#pragma unroll
        for (int c = 0; c < CACHED; ++c) {
            const int i = rank + c * GROUP;
            if (i < vectors) w[c] = load_weights<VEC>(weight + i * VEC);
        }
    }

    // Each group walks rows gridDim.x * ROWS apart (the launcher caps the grid at what the GPU
    // holds at once); with several warps per row (ROWS == 1) the whole block walks the same
    // rows, so its barriers stay uniform.
    const long long row_stride = (long long)gridDim.x * ROWS;
    for (long long row = blockIdx.x * ROWS + threadIdx.x / GROUP; row < rows; row += row_stride) {
        const TI* x_row = x + row * cols;
        T* out_row = out + row * cols;

        if (CACHED > 0) {
            float v[CACHED > 0 ? CACHED : 1][VEC];
            float squares = 0.0f;
#pragma unroll
            for (int c = 0; c < CACHED; ++c) {
                const int i = rank + c * GROUP;
                if (i < vectors) {
                    const Vec<TI, VEC> loaded = load_vec<TI, VEC>(x_row + i * VEC);
#pragma unroll
                    for (int j = 0; j < VEC; ++j) {
                        v[c][j] = to_float(loaded.v[j]);
                        squares += v[c][j] * v[c][j];
                    }
                }
            }
            const float mean_square = group_reduce<SumOp, GROUP_WARPS>(squares, scratch) * inv_cols;
            const float inv_rms = 1.0f / sqrtf(mean_square + eps);
#pragma unroll
            for (int c = 0; c < CACHED; ++c) {
                const int i = rank + c * GROUP;
                if (i < vectors) {
                    Vec<float, VEC> wc;
                    if constexpr (kHeldWeights) {
                        wc = w[c];
                    } else {
                        wc = load_weights<VEC>(weight + i * VEC);
                    }
                    Vec<T, VEC> r;
#pragma unroll
                    for (int j = 0; j < VEC; ++j) r.v[j] = from_float<T>(v[c][j] * inv_rms * wc.v[j]);
                    store_vec<T, VEC>(out_row + i * VEC, r);
                }
            }
        } else {
            float squares = 0.0f;
            for (int i = rank; i < vectors; i += GROUP) {
                const Vec<TI, VEC> loaded = load_vec<TI, VEC>(x_row + i * VEC);
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    const float f = to_float(loaded.v[j]);
                    squares += f * f;
                }
            }
            const float mean_square = group_reduce<SumOp, GROUP_WARPS>(squares, scratch) * inv_cols;
            const float inv_rms = 1.0f / sqrtf(mean_square + eps);
            for (int i = rank; i < vectors; i += GROUP) {
                const Vec<TI, VEC> loaded = load_vec<TI, VEC>(x_row + i * VEC);
                const Vec<float, VEC> wc = load_weights<VEC>(weight + i * VEC);
                Vec<T, VEC> r;
#pragma unroll
                for (int j = 0; j < VEC; ++j) r.v[j] = from_float<T>(to_float(loaded.v[j]) * inv_rms * wc.v[j]);
                store_vec<T, VEC>(out_row + i * VEC, r);
            }
        }
    }
}

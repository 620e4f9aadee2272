// Quantisation of a matrix [rows, cols] of f32, f16 or bf16 values into e4m3 codes [rows, cols],
// the FP8 matmul's A (e4m3.cuh has the formulas, shared with the CPU twin):
//
// - quantize_rows_dynamic: one scale a row, max(amax / 448, 1e-12), written to scales[row]
//   (per-token dynamic quantisation). The row layout of crate::rows, as layernorm.cu's: a group
//   of 32 * GROUP_WARPS threads owns a row, a block holds ROWS groups, and with CACHED > 0 each
//   thread keeps its CACHED vectors of the row in registers between amax and the codes, so the
//   row is read from memory once; with CACHED == 0 (rows too long for registers) it is read
//   twice, the second time mostly from L2. The group walks rows gridDim.x * ROWS apart.
// - quantize_static: one scale for the whole tensor, read from the device (a calibrated static
//   scale): element-wise, a vector a thread.
//
// VEC elements per access: 16 bytes of TI when x and the codes are 16-byte aligned (and cols a
// multiple of VEC: then every row starts aligned too), else 1. Memory-bound: x read once, the
// codes (a quarter or half of x's bytes) written once.
#include "common.cuh"
#include "e4m3.cuh"

template <typename TI, int VEC, int GROUP_WARPS, int ROWS, int CACHED>
__device__ __forceinline__ void quantize_rows_dynamic(const TI* x, unsigned char* codes, float* scales, int rows,
                                                      int cols) {
    static_assert(GROUP_WARPS == 1 || ROWS == 1, "a block holds several rows only with one warp per row");
    constexpr int GROUP = 32 * GROUP_WARPS;
    __shared__ float scratch[GROUP_WARPS * ROWS];

    const int rank = threadIdx.x % GROUP;
    const int vectors = cols / VEC;
    // With several warps per row (then ROWS == 1) the whole block walks the same rows, so its
    // barriers (group_reduce) stay uniform.
    const long long row_stride = (long long)gridDim.x * ROWS;
    for (long long row = blockIdx.x * ROWS + threadIdx.x / GROUP; row < rows; row += row_stride) {
        const TI* x_row = x + row * cols;
        unsigned char* codes_row = codes + row * cols;
        if constexpr (CACHED > 0) {
            float v[CACHED][VEC];
#pragma unroll
            for (int c = 0; c < CACHED; ++c) {
                const int i = rank + c * GROUP;
                if (i < vectors) {
                    const Vec<TI, VEC> loaded = load_vec<TI, VEC>(x_row + i * VEC);
#pragma unroll
                    for (int j = 0; j < VEC; ++j) v[c][j] = to_float(loaded.v[j]);
                }
            }
            quantise_held_row<VEC, GROUP_WARPS, CACHED>(v, rank, vectors, codes_row, scales + row, scratch);
        } else {
            const auto values = [&](int i, float (&y)[VEC]) {
                const Vec<TI, VEC> loaded = load_vec<TI, VEC>(x_row + i * VEC);
#pragma unroll
                for (int j = 0; j < VEC; ++j) y[j] = to_float(loaded.v[j]);
            };
            quantise_streamed_row<VEC, GROUP_WARPS>(values, rank, vectors, codes_row, scales + row, scratch);
        }
    }
}

template <typename TI, int VEC>
__device__ __forceinline__ void quantize_static(const TI* x, unsigned char* codes, const float* scale,
                                                long long elements) {
    const float inverse = e4m3_inverse_scale(*scale);
    const long long vectors = elements / VEC;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += stride) {
        const Vec<TI, VEC> loaded = load_vec<TI, VEC>(x + i * VEC);
        float y[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) y[j] = to_float(loaded.v[j]);
        store_e4m3<VEC>(codes + i * VEC, y, inverse);
    }
}

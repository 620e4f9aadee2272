// LayerNorm over the last dimension: out = (x - mean) / sqrt(var + eps) * gamma + beta, with
// the biased variance, as torch.nn.LayerNorm. Statistics in fp32, two passes (mean, then the
// mean of squared deviations), as the CPU twin: no precision lost to a large mean.
//
// Memory-bound: x is read once and out written once (gamma and beta stay in L1/L2). A group
// of 32 * GROUP_WARPS threads owns one row; a block holds ROWS groups. With CACHED > 0 each
// thread keeps its CACHED vectors of the row in registers between the passes, so the row is
// read from memory once; the launcher picks CACHED (crate::rows) so the row fits. With
// CACHED == 0 (rows too long for registers) the passes re-read the row, mostly from L2.
//
// VEC elements per access: 16 bytes of the wider of x's and out's types when cols is a multiple
// of VEC and every pointer is 16-byte aligned (then every row start is too), else 1.
//
// x is stored as TI and out as T: a half-precision run keeps its residual stream (the
// layernorm's input) in f32 and normalises it into the f16/bf16 operand of the next matmul.
// gamma and beta are f32 in every run: rounded to bf16 they would add an error of the size of a
// weight matrix's rounding to every block (benchmarks/NOTES.md, 2026-11-25 "layernorm
// parameters in f32").
//
// Three entry points share the program: layernorm_rows stores y in T; layernorm_rows_e4m3 stores
// e4m3 codes of y and one scale a row (the FP8 matmul's A, quantised as quantize.cu's per-row
// mode, e4m3.cuh), amax taken over y in f32; layernorm_rows_e4m3_static stores e4m3 codes of y
// with one calibrated scale for the whole tensor, read from the device (no amax, so each vector
// is stored as soon as it is normalised). The e4m3 output must match its CPU twin bit for
// bit, so every rounding of y is spelled out (RowMath: nothing left to the compiler's
// contraction) and the twin adds in this program's order (layernorm/cpu.rs, `layernorm_e4m3`):
// each thread its elements in turn, then warp_sum's butterfly, then the warps in order.
#include "common.cuh"
#include "e4m3.cuh"

// VEC f32 values from p, as 16-byte loads when VEC is a multiple of 4 (the launcher checks
// that p is 16-byte aligned then).
template <int VEC> __device__ __forceinline__ Vec<float, VEC> load_params(const float* p) {
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

// The row's arithmetic. The e4m3 output (EXACT) must match its twin bit for bit, so there each
// operation is rounded on its own or fused as written: the _rn intrinsics are never contracted
// into a multiply-add (nvcc contracts across statements, e.g. mean = sum · inv_cols into
// v - mean, or var = squares · inv_cols into var + eps), and the fused ones are explicit fmaf.
// The 16-bit output keeps the spelling it was tuned with and leaves the contraction to the
// compiler (spelled out, ptxas allocated its programs' registers differently: 22 became 28 in
// the narrowest).
template <bool EXACT>
struct RowMath {
    static __device__ __forceinline__ float mul(float a, float b) {
        if constexpr (EXACT) return __fmul_rn(a, b);
        return a * b;
    }
    static __device__ __forceinline__ float add(float a, float b) {
        if constexpr (EXACT) return __fadd_rn(a, b);
        return a + b;
    }
    static __device__ __forceinline__ float sub(float a, float b) {
        if constexpr (EXACT) return __fsub_rn(a, b);
        return a - b;
    }
    // 1 / sqrt(x), each correctly rounded (as NVRTC compiles `/` and sqrtf without fast math).
    static __device__ __forceinline__ float inverse_sqrt(float x) {
        if constexpr (EXACT) return __fdiv_rn(1.0f, __fsqrt_rn(x));
        return 1.0f / sqrtf(x);
    }
    // squares + d², one fused multiply-add.
    static __device__ __forceinline__ float add_square(float squares, float d) {
        if constexpr (EXACT) return fmaf(d, d, squares);
        return squares + d * d;
    }
    // One normalised value, (v - mean) · inv_std · g + b, the last two as one fused multiply-add.
    static __device__ __forceinline__ float normalise(float v, float mean, float inv_std, float g, float b) {
        if constexpr (EXACT) return fmaf(__fmul_rn(__fsub_rn(v, mean), inv_std), g, b);
        return (v - mean) * inv_std * g + b;
    }
};

// The program of every entry point: with E4M3, `out` holds e4m3 codes (T is unsigned char) and
// `scales` one f32 a row, written, or with STATIC_SCALE one f32 for all rows, read; without
// E4M3, `out` holds T and `scales` is unused.
template <typename TI, typename T, bool E4M3, bool STATIC_SCALE, int VEC, int GROUP_WARPS, int ROWS, int CACHED>
__device__ __forceinline__ void layernorm_program(const TI* x, const float* gamma, const float* beta, T* out,
                                                  float* scales, int rows, int cols, float eps) {
    static_assert(E4M3 || !STATIC_SCALE, "a static scale is an e4m3 output's");
    static_assert(GROUP_WARPS == 1 || ROWS == 1, "a block holds several rows only with one warp per row");
    constexpr int GROUP = 32 * GROUP_WARPS;
    __shared__ float scratch[GROUP_WARPS * ROWS];

    const int rank = threadIdx.x % GROUP;
    const int vectors = cols / VEC;
    const float inv_cols = 1.0f / (float)cols;
    using Math = RowMath<E4M3>;
    float static_inverse = 0.0f;
    if constexpr (STATIC_SCALE) static_inverse = e4m3_inverse_scale(*scales);

    // A thread's columns are the same in every row it normalises, so with the row held in
    // registers (CACHED > 0) it loads its gamma and beta once, before its first row, and keeps
    // them: f32, they are twice a 16-bit row's bytes, and loaded again for every row they cost
    // a fifth of the kernel's speed in L2 traffic (benchmarks/NOTES.md, 2026-11-25 "layernorm
    // parameters in f32"). Loaded with x, not after the two reductions: at batch 1 the kernel
    // is a chain of memory latencies, and this takes one out of it (2026-11-22 "Layernorm").
    // Past 32 columns a thread they would crowd the row out of registers: then they are loaded
    // after the reductions, in every row.
    constexpr bool kHeldParams = CACHED > 0 && CACHED * VEC <= 32;
    constexpr int kHeld = kHeldParams ? CACHED : 1;
    Vec<float, VEC> g[kHeld], b[kHeld];
    if constexpr (kHeldParams) {
#pragma unroll
        for (int c = 0; c < CACHED; ++c) {
            const int i = rank + c * GROUP;
            if (i < vectors) {
                g[c] = load_params<VEC>(gamma + i * VEC);
                b[c] = load_params<VEC>(beta + i * VEC);
            }
        }
    }

    // Each group walks rows gridDim.x * ROWS apart: the launcher caps the grid at what the GPU
    // holds at once, so a group normalises several rows of a large batch with the parameters
    // it loaded. With several warps per row (then ROWS == 1) the whole block walks the same
    // rows, so its barriers stay uniform.
    const long long row_stride = (long long)gridDim.x * ROWS;
    for (long long row = blockIdx.x * ROWS + threadIdx.x / GROUP; row < rows; row += row_stride) {
        const TI* x_row = x + row * cols;
        T* out_row = out + row * cols;

        if constexpr (CACHED > 0) {
            float v[CACHED > 0 ? CACHED : 1][VEC];
            float sum = 0.0f;
#pragma unroll
            for (int c = 0; c < CACHED; ++c) {
                const int i = rank + c * GROUP;
                if (i < vectors) {
                    const Vec<TI, VEC> loaded = load_vec<TI, VEC>(x_row + i * VEC);
#pragma unroll
                    for (int j = 0; j < VEC; ++j) {
                        v[c][j] = to_float(loaded.v[j]);
                        sum += v[c][j];
                    }
                }
            }
            const float mean = Math::mul(group_reduce<SumOp, GROUP_WARPS>(sum, scratch), inv_cols);
            float squares = 0.0f;
#pragma unroll
            for (int c = 0; c < CACHED; ++c) {
                if (rank + c * GROUP < vectors) {
#pragma unroll
                    for (int j = 0; j < VEC; ++j) {
                        const float d = Math::sub(v[c][j], mean);
                        squares = Math::add_square(squares, d);
                    }
                }
            }
            const float var = Math::mul(group_reduce<SumOp, GROUP_WARPS>(squares, scratch), inv_cols);
            const float inv_std = Math::inverse_sqrt(Math::add(var, eps));
#pragma unroll
            for (int c = 0; c < CACHED; ++c) {
                const int i = rank + c * GROUP;
                if (i < vectors) {
                    Vec<float, VEC> gc, bc;
                    if constexpr (kHeldParams) {
                        gc = g[c];
                        bc = b[c];
                    } else {
                        gc = load_params<VEC>(gamma + i * VEC);
                        bc = load_params<VEC>(beta + i * VEC);
                    }
                    if constexpr (E4M3) {
                        // y in place of x: the codes need the whole row's amax first.
#pragma unroll
                        for (int j = 0; j < VEC; ++j)
                            v[c][j] = Math::normalise(v[c][j], mean, inv_std, gc.v[j], bc.v[j]);
                    } else {
                        Vec<T, VEC> r;
#pragma unroll
                        for (int j = 0; j < VEC; ++j)
                            r.v[j] = from_float<T>(Math::normalise(v[c][j], mean, inv_std, gc.v[j], bc.v[j]));
                        store_vec<T, VEC>(out_row + i * VEC, r);
                    }
                }
            }
            if constexpr (STATIC_SCALE) {
#pragma unroll
                for (int c = 0; c < CACHED; ++c) {
                    const int i = rank + c * GROUP;
                    if (i < vectors) store_e4m3<VEC>(out_row + i * VEC, v[c], static_inverse);
                }
            } else if constexpr (E4M3) {
                quantise_held_row<VEC, GROUP_WARPS, CACHED>(v, rank, vectors, out_row, scales + row, scratch);
            }
        } else {
            float sum = 0.0f;
            for (int i = rank; i < vectors; i += GROUP) {
                const Vec<TI, VEC> loaded = load_vec<TI, VEC>(x_row + i * VEC);
#pragma unroll
                for (int j = 0; j < VEC; ++j) sum += to_float(loaded.v[j]);
            }
            const float mean = Math::mul(group_reduce<SumOp, GROUP_WARPS>(sum, scratch), inv_cols);
            float squares = 0.0f;
            for (int i = rank; i < vectors; i += GROUP) {
                const Vec<TI, VEC> loaded = load_vec<TI, VEC>(x_row + i * VEC);
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    const float d = Math::sub(to_float(loaded.v[j]), mean);
                    squares = Math::add_square(squares, d);
                }
            }
            const float var = Math::mul(group_reduce<SumOp, GROUP_WARPS>(squares, scratch), inv_cols);
            const float inv_std = Math::inverse_sqrt(Math::add(var, eps));
            if constexpr (E4M3) {
                // Vector i of y, from the row and the parameters read again (twice: for amax,
                // then for the codes).
                const auto normalised = [&](int i, float (&y)[VEC]) {
                    const Vec<TI, VEC> loaded = load_vec<TI, VEC>(x_row + i * VEC);
                    const Vec<float, VEC> g = load_params<VEC>(gamma + i * VEC);
                    const Vec<float, VEC> b = load_params<VEC>(beta + i * VEC);
#pragma unroll
                    for (int j = 0; j < VEC; ++j)
                        y[j] = Math::normalise(to_float(loaded.v[j]), mean, inv_std, g.v[j], b.v[j]);
                };
                if constexpr (STATIC_SCALE) {
                    for (int i = rank; i < vectors; i += GROUP) {
                        float y[VEC];
                        normalised(i, y);
                        store_e4m3<VEC>(out_row + i * VEC, y, static_inverse);
                    }
                } else {
                    quantise_streamed_row<VEC, GROUP_WARPS>(normalised, rank, vectors, out_row, scales + row,
                                                            scratch);
                }
            } else {
                for (int i = rank; i < vectors; i += GROUP) {
                    const Vec<TI, VEC> loaded = load_vec<TI, VEC>(x_row + i * VEC);
                    const Vec<float, VEC> g = load_params<VEC>(gamma + i * VEC);
                    const Vec<float, VEC> b = load_params<VEC>(beta + i * VEC);
                    Vec<T, VEC> r;
#pragma unroll
                    for (int j = 0; j < VEC; ++j)
                        r.v[j] = from_float<T>(Math::normalise(to_float(loaded.v[j]), mean, inv_std, g.v[j], b.v[j]));
                    store_vec<T, VEC>(out_row + i * VEC, r);
                }
            }
        }
    }
}

// y = layernorm(x) stored as T.
template <typename TI, typename T, int VEC, int GROUP_WARPS, int ROWS, int CACHED>
__device__ __forceinline__ void layernorm_rows(const TI* x, const float* gamma, const float* beta, T* out,
                                               int rows, int cols, float eps) {
    layernorm_program<TI, T, false, false, VEC, GROUP_WARPS, ROWS, CACHED>(x, gamma, beta, out, nullptr, rows, cols,
                                                                          eps);
}

// y = layernorm(x) as e4m3 codes and a scale a row (e4m3.cuh), the FP8 matmul's A.
template <typename TI, int VEC, int GROUP_WARPS, int ROWS, int CACHED>
__device__ __forceinline__ void layernorm_rows_e4m3(const TI* x, const float* gamma, const float* beta,
                                                    unsigned char* codes, float* scales, int rows, int cols,
                                                    float eps) {
    layernorm_program<TI, unsigned char, true, false, VEC, GROUP_WARPS, ROWS, CACHED>(x, gamma, beta, codes, scales,
                                                                                     rows, cols, eps);
}

// y = layernorm(x) as e4m3 codes of y / scale, one calibrated scale for every row, read from the
// device (the FP8 matmul's A with a per-tensor activation scale).
template <typename TI, int VEC, int GROUP_WARPS, int ROWS, int CACHED>
__device__ __forceinline__ void layernorm_rows_e4m3_static(const TI* x, const float* gamma, const float* beta,
                                                           unsigned char* codes, const float* scale, int rows,
                                                           int cols, float eps) {
    layernorm_program<TI, unsigned char, true, true, VEC, GROUP_WARPS, ROWS, CACHED>(
        x, gamma, beta, codes, const_cast<float*>(scale), rows, cols, eps);
}

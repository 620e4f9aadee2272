// Activations as passes of their own: a standalone activation (for graphs run without epilogue
// fusion) and a bias plus activation (what a GEMM without a fused epilogue leaves to do). Both
// apply common.cuh's `activate` in its exact form (erff, expf), as kernels::Activation::apply.
#include "common.cuh"

// out[i] = act(x[i]); a grid-stride loop, one element per step (memory-bound, rarely used:
// the fused graph folds activations into matmul epilogues).
template <typename T, Act ACT>
__device__ __forceinline__ void activation_program(const T* x, T* out, long long n) {
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        out[i] = from_float<T>(activate<ACT>(to_float(x[i])));
}

// out[r, c] = act(x[r, c] + bias[c]) for r < rows, c < cols: the bias and activation a GEMM
// without a fused epilogue leaves to a separate pass (the benchmarks time cuBLAS plus this, to
// compare with our fused epilogue). `out` may be `x`.
//
// Memory-bound, so it moves VEC-element vectors (16 bytes when cols is a multiple of VEC and
// every pointer is 16-byte aligned, else VEC = 1) in a grid-stride loop. Each thread tracks its
// (row, vector column) and advances both by the grid stride with one carry, instead of paying
// a 64-bit division per vector to find the bias column.
template <typename T, Act ACT, int VEC>
__device__ __forceinline__ void bias_activation_program(const T* x, const T* bias, T* out, int rows,
                                                        int cols) {
    const int vecs_per_row = cols / VEC;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long step = (long long)gridDim.x * blockDim.x;
    long long r = first / vecs_per_row;
    int c = (int)(first % vecs_per_row);
    const long long step_rows = step / vecs_per_row;
    const int step_cols = (int)(step % vecs_per_row);
    while (r < rows) {
        const long long i = r * cols + (long long)c * VEC;
        const Vec<T, VEC> xv = load_vec<T, VEC>(x + i);
        const Vec<T, VEC> bv = load_vec<T, VEC>(bias + (long long)c * VEC);
        Vec<T, VEC> o;
#pragma unroll
        for (int j = 0; j < VEC; ++j)
            o.v[j] = from_float<T>(activate<ACT>(to_float(xv.v[j]) + to_float(bv.v[j])));
        store_vec<T, VEC>(out + i, o);
        c += step_cols;
        r += step_rows;
        if (c >= vecs_per_row) {
            c -= vecs_per_row;
            ++r;
        }
    }
}

// SwiGLU's gate, as DINOv2-giant's MLP applies it between its two matmuls: x [rows, 2·cols]
// holds the two halves the first matmul wrote side by side; out[r, c] = silu(x[r, c]) ·
// x[r, cols + c] (torch's `x1, x2 = x.chunk(2, -1); silu(x1) * x2`). A grid-stride loop, one
// element per step: memory-bound and one op per MLP.
template <typename T>
__device__ __forceinline__ void swiglu_program(const T* x, T* out, long long rows, int cols) {
    const long long n = rows * cols;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const long long r = i / cols;
        const long long c = i - r * cols;
        const float gate = to_float(x[r * 2 * cols + c]);
        const float up = to_float(x[r * 2 * cols + cols + c]);
        out[i] = from_float<T>(activate<Act::Silu>(gate) * up);
    }
}

// Shared by every matmul program (NVRTC receives it in memory as "epilogue.cuh"): 16-bit pair
// loads and stores, the tile order and operand views, and the epilogue that adds bias,
// activation (common.cuh's `activate`) and residual to an fp32 tile staged in shared memory:
//
//     C[m, n] = act(alpha * acc[m, n] + bias[n]) + residual[m, n]
//
// Bias and residual are run-time choices (null when absent), not template flags: the epilogue
// runs once per tile, where a uniform branch costs nothing measurable, while two more flags
// would quadruple the instantiations NVRTC has to build.

#pragma once

#include "common.cuh"

namespace vitrt_matmul {
// ---------------------------------------------------------------------------------------------
// Small device helpers

// Two adjacent 16-bit elements as one 4-byte access (the caller proves 4-byte alignment).
template <typename T>
__device__ __forceinline__ float2 load_pair_as_float(const T* p);
template <>
__device__ __forceinline__ float2 load_pair_as_float<__half>(const __half* p) {
    return __half22float2(*reinterpret_cast<const __half2*>(p));
}
template <>
__device__ __forceinline__ float2 load_pair_as_float<__nv_bfloat16>(const __nv_bfloat16* p) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

template <typename T>
__device__ __forceinline__ void store_pair_from_float(T* p, float x, float y);
template <>
__device__ __forceinline__ void store_pair_from_float<__half>(__half* p, float x, float y) {
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(x, y);
}
template <>
__device__ __forceinline__ void store_pair_from_float<__nv_bfloat16>(__nv_bfloat16* p, float x, float y) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
}

template <typename T>
struct is_f32 {
    static constexpr bool value = false;
};
template <>
struct is_f32<float> {
    static constexpr bool value = true;
};

// A strided view of one operand, in elements (kernels::Operand).
struct View {
    long long offset, row_stride, batch_stride, head_stride;
    __device__ __forceinline__ long long matrix_base(int batch, int head) const {
        return offset + (long long)batch * batch_stride + (long long)head * head_stride;
    }
};

// The tile this program owns, in Triton's grouped order, and the (batch, head) matrix.
struct TileCoords {
    int batch, head, tile_m, tile_n;
};

template <int GROUP_M>
__device__ __forceinline__ TileCoords tile_of_program(int heads, int tiles_m, int tiles_n, int pid = blockIdx.x) {
    const int per_matrix = tiles_m * tiles_n;
    const int matrix = pid / per_matrix;
    const int local = pid - matrix * per_matrix;
    const int programs_in_group = GROUP_M * tiles_n;
    const int group = local / programs_in_group;
    const int first_m = group * GROUP_M;
    const int group_size = min(tiles_m - first_m, GROUP_M);
    const int in_group = local - group * programs_in_group;
    TileCoords t;
    t.batch = matrix / heads;
    t.head = matrix - t.batch * heads;
    t.tile_m = first_m + in_group % group_size;
    t.tile_n = in_group / group_size;
    return t;
}

// A BYTES-long (4, 8 or 16) global→shared copy through L1.
template <int BYTES>
__device__ __forceinline__ void cp_async_ca(unsigned dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(src), "n"(BYTES));
}

// Four adjacent elements as one access (the caller proves alignment to four elements).
__device__ __forceinline__ void load_run(const float* p, float (&v)[4]) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
}
template <typename T>
__device__ __forceinline__ void load_run(const T* p, float (&v)[4]) {
    const uint2 x = *reinterpret_cast<const uint2*>(p);
    const float2 lo = load_pair_as_float(reinterpret_cast<const T*>(&x.x));
    const float2 hi = load_pair_as_float(reinterpret_cast<const T*>(&x.y));
    v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
}
__device__ __forceinline__ void store_run(float* p, const float (&v)[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
template <typename T>
__device__ __forceinline__ void store_run(T* p, const float (&v)[4]) {
    uint2 x;
    store_pair_from_float(reinterpret_cast<T*>(&x.x), v[0], v[1]);
    store_pair_from_float(reinterpret_cast<T*>(&x.y), v[2], v[3]);
    *reinterpret_cast<uint2*>(p) = x;
}

// Residual runs (four columns) go through shared memory: each thread issues its cp.async for
// them before staging the accumulators, so one memory latency per tile overlaps the staging
// instead of one per run stalling the epilogue loop. Only whole runs on rows inside M, and
// only when `vector_epilogue` allows run-wide accesses; the rest are read element by element.
// `tile` is BM x BN elements of T in shared memory, row pitch BN.
template <typename T, int BM, int BN, int THREADS>
__device__ __forceinline__ void stage_residual_runs(T* tile, const T* residual, long long r_row_stride, int m, int n,
                                                    int m0, int n0) {
    constexpr int kRunsPerRow = BN / 4;
    constexpr int kRunsPerThread = BM * kRunsPerRow / THREADS;
    const unsigned base = shared_address(tile);
#pragma unroll 4
    for (int run = 0; run < kRunsPerThread; ++run) {
        const int idx = threadIdx.x + run * THREADS;
        const int row_in_tile = idx / kRunsPerRow;
        const int col_in_tile = (idx % kRunsPerRow) * 4;
        const int row = m0 + row_in_tile, col = n0 + col_in_tile;
        if (row < m && col + 4 <= n) {
            cp_async_ca<4 * sizeof(T)>(base + (row_in_tile * BN + col_in_tile) * sizeof(T),
                                       residual + (long long)row * r_row_stride + col);
        }
    }
}

// The shared epilogue: the tile's fp32 accumulators sit in shared memory (row pitch PITCH);
// each thread takes runs of four columns, applies the epilogue and stores them. A run is one
// vector access when `vector_epilogue` says C, R and the bias are aligned to four elements and
// the run lies inside N; otherwise it goes element by element. The loop over runs is unrolled
// four times, not fully: the activation is inlined 16 times rather than once per accumulator,
// which keeps NVRTC compile times short. `residual_tile` holds the residual runs that
// stage_residual_runs fetched (null: read R from global memory).
// A residual may alias C element for element (in-place `x += f(x)`): each element is read
// before the same thread writes it.
template <typename T, typename TR, typename TC, int BM, int BN, int PITCH, int THREADS, Act ACT>
__device__ __forceinline__ void store_staged_tile(const float* staged, const TR* residual_tile, const T* bias,
                                                  const TR* residual, TC* c, int m, int n, int m0, int n0,
                                                  long long c_base, long long r_base, long long c_row_stride,
                                                  long long r_row_stride, float alpha, int vector_epilogue) {
    constexpr int kRunsPerRow = BN / 4;
    constexpr int kRunsPerThread = BM * kRunsPerRow / THREADS;
    static_assert(BM * kRunsPerRow % THREADS == 0 && kRunsPerThread % 4 == 0, "runs split evenly over threads");
    // When the block is a whole number of rows of runs, a thread's runs share their columns:
    // its bias run is read once.
    constexpr bool kFixedColumns = THREADS % kRunsPerRow == 0;
    auto bias_run = [&](int col, int count, float (&add)[4]) {
        if (bias == nullptr) return;
        if (vector_epilogue && count == 4) {
            load_run(bias + col, add);
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (e < count) add[e] = to_float(bias[col + e]);
        }
    };
    float fixed_bias[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if constexpr (kFixedColumns) {
        const int col = n0 + (threadIdx.x % kRunsPerRow) * 4;
        if (col < n) bias_run(col, min(4, n - col), fixed_bias);
    }
    // Four runs in flight per thread hide the shared and global latencies of each.
#pragma unroll 4
    for (int run = 0; run < kRunsPerThread; ++run) {
        const int idx = threadIdx.x + run * THREADS;
        const int row_in_tile = idx / kRunsPerRow;
        const int col_in_tile = (idx % kRunsPerRow) * 4;
        const int row = m0 + row_in_tile, col = n0 + col_in_tile;
        if (row >= m || col >= n) continue;
        const int count = min(4, n - col);
        const bool whole_vector = vector_epilogue && count == 4;
        float v[4];
        load_run(staged + row_in_tile * PITCH + col_in_tile, v);
        float add[4] = {fixed_bias[0], fixed_bias[1], fixed_bias[2], fixed_bias[3]};  // added before the activation
        if constexpr (!kFixedColumns) bias_run(col, count, add);
        float res[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (residual != nullptr) {
            if (residual_tile != nullptr && whole_vector) {
                load_run(residual_tile + row_in_tile * BN + col_in_tile, res);
            } else if (whole_vector) {
                load_run(residual + r_base + (long long)row * r_row_stride + col, res);
            } else {
                const TR* r_ptr = residual + r_base + (long long)row * r_row_stride + col;
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (e < count) res[e] = to_float(r_ptr[e]);
            }
        }
        // As Epilogue::apply: act(alpha * acc + bias) + residual, with 0 for what is absent.
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = activate<ACT, !is_f32<TC>::value>(alpha * v[e] + add[e]) + res[e];
        TC* c_ptr = c + c_base + (long long)row * c_row_stride + col;
        if (whole_vector) {
            store_run(c_ptr, v);
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (e < count) c_ptr[e] = from_float<TC>(v[e]);
        }
    }
}

}  // namespace vitrt_matmul

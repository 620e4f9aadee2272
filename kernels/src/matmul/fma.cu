// The FMA program (f32 storage, any arch): C = epilogue(A · B) on CUDA cores, fp32 throughout.
// No TF32: f32 results must match PyTorch's fp32 (TF32 off) to 1e-4. Same frame as the
// mma.sync program (mma_sync.cu): grouped tile order, strided views, masked edges, and the
// staged epilogue of epilogue.cuh; its entry point has the same name and parameters.

#include "params.cuh"

namespace vitrt_matmul {

// ---------------------------------------------------------------------------------------------
// f32 path: CUDA-core FMA, fp32 throughout (no TF32)
//
// 256 threads as a 16x16 grid; thread (ty, tx) owns rows ty + 16·i and columns tx + 16·j of the
// tile, so a warp's shared reads are conflict-free or broadcast. Both operands sit in shared
// memory k-major ([BK][BM], [BK][BN]); the next tile is fetched into registers while the
// current one is multiplied (two buffers, one barrier per step).
//
// Dynamic shared memory: max(2·BK·(BM + 1 + BN + 1), BM·(BN + 16) + BM·BN) floats.

template <int BM, int BN, int BK, int GROUP_M, Act ACT, bool B_KN>
__device__ __forceinline__ void matmul_fma_f32(const float* __restrict__ a, const float* __restrict__ b,
                                               const float* bias, const float* residual, float* c, int heads, int m,
                                               int n, int k, View av, View bv, View cv, View rv, float alpha,
                                               int vector_epilogue) {
    constexpr int kThreads = 256;
    constexpr int kRowsPerThread = BM / 16;
    constexpr int kColsPerThread = BN / 16;
    constexpr int kLoadsA = BM * BK / kThreads;
    constexpr int kLoadsB = BN * BK / kThreads;
    static_assert(BM % 16 == 0 && BN % 32 == 0 && (BM * BK) % kThreads == 0 && (BN * BK) % kThreads == 0,
                  "f32 tiles split evenly over 256 threads");
    // One float of padding per row keeps the transposing stores from piling onto one bank.
    constexpr int kPitchA = BM + 1, kPitchB = BN + 1;
    extern __shared__ __align__(128) unsigned char shared_tiles[];
    float* a_tiles = reinterpret_cast<float*>(shared_tiles);  // [2][BK][kPitchA]
    float* b_tiles = a_tiles + 2 * BK * kPitchA;              // [2][BK][kPitchB]

    const int tiles_m = (m + BM - 1) / BM;
    const int tiles_n = (n + BN - 1) / BN;
    const TileCoords tile = tile_of_program<GROUP_M>(heads, tiles_m, tiles_n);
    const int m0 = tile.tile_m * BM;
    const int n0 = tile.tile_n * BN;
    const float* a_matrix = a + av.matrix_base(tile.batch, tile.head);
    const float* b_matrix = b + bv.matrix_base(tile.batch, tile.head);
    const int tid = threadIdx.x;
    const int tx = tid % 16, ty = tid / 16;

    float a_next[kLoadsA], b_next[kLoadsB];
    // Element e of the tile: A and NK-B walk k fastest (coalesced along rows); KN-B walks n.
    auto fetch = [&](int k0) {
#pragma unroll
        for (int i = 0; i < kLoadsA; ++i) {
            const int e = tid + i * kThreads;
            const int row = e / BK, kk = e % BK;
            const bool inside = m0 + row < m && k0 + kk < k;
            a_next[i] = inside ? __ldg(a_matrix + (long long)(m0 + row) * av.row_stride + k0 + kk) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < kLoadsB; ++i) {
            const int e = tid + i * kThreads;
            if constexpr (B_KN) {
                const int kk = e / BN, col = e % BN;
                const bool inside = k0 + kk < k && n0 + col < n;
                b_next[i] = inside ? __ldg(b_matrix + (long long)(k0 + kk) * bv.row_stride + n0 + col) : 0.0f;
            } else {
                const int col = e / BK, kk = e % BK;
                const bool inside = n0 + col < n && k0 + kk < k;
                b_next[i] = inside ? __ldg(b_matrix + (long long)(n0 + col) * bv.row_stride + k0 + kk) : 0.0f;
            }
        }
    };
    auto stash = [&](int buffer) {
        float* a_tile = a_tiles + buffer * BK * kPitchA;
        float* b_tile = b_tiles + buffer * BK * kPitchB;
#pragma unroll
        for (int i = 0; i < kLoadsA; ++i) {
            const int e = tid + i * kThreads;
            a_tile[(e % BK) * kPitchA + e / BK] = a_next[i];
        }
#pragma unroll
        for (int i = 0; i < kLoadsB; ++i) {
            const int e = tid + i * kThreads;
            if constexpr (B_KN) {
                b_tile[(e / BN) * kPitchB + e % BN] = b_next[i];
            } else {
                b_tile[(e % BK) * kPitchB + e / BK] = b_next[i];
            }
        }
    };

    float acc[kRowsPerThread][kColsPerThread];
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
        for (int j = 0; j < kColsPerThread; ++j) acc[i][j] = 0.0f;

    const int k_tiles = (k + BK - 1) / BK;
    if (k_tiles > 0) {
        fetch(0);
        stash(0);
        __syncthreads();
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
        const int buffer = kt & 1;
        const bool more = kt + 1 < k_tiles;
        if (more) fetch((kt + 1) * BK);
        const float* a_tile = a_tiles + buffer * BK * kPitchA;
        const float* b_tile = b_tiles + buffer * BK * kPitchB;
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a_col[kRowsPerThread], b_row[kColsPerThread];
#pragma unroll
            for (int i = 0; i < kRowsPerThread; ++i) a_col[i] = a_tile[kk * kPitchA + ty + 16 * i];
#pragma unroll
            for (int j = 0; j < kColsPerThread; ++j) b_row[j] = b_tile[kk * kPitchB + tx + 16 * j];
#pragma unroll
            for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
                for (int j = 0; j < kColsPerThread; ++j) acc[i][j] = fmaf(a_col[i], b_row[j], acc[i][j]);
        }
        // The other buffer was last read in the previous iteration, before its closing barrier.
        if (more) stash(buffer ^ 1);
        __syncthreads();
    }

    // The last barrier above (or none, when K = 0) freed the operand tiles. Shared memory from
    // here on: the fp32 tile, then the residual tile. A warp writes two rows of 16 consecutive
    // floats; a pitch of BN + 16 puts them in different banks.
    constexpr int kPitch = BN + 16;
    float* staged = reinterpret_cast<float*>(shared_tiles);
    float* residual_tile = staged + BM * kPitch;
    const long long r_base = rv.matrix_base(tile.batch, tile.head);
    const bool stage_residual = residual != nullptr && vector_epilogue;
    if (stage_residual)
        stage_residual_runs<float, BM, BN, kThreads>(residual_tile, residual + r_base, rv.row_stride, m, n, m0, n0);
    cp_async_commit();
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
        for (int j = 0; j < kColsPerThread; ++j) staged[(ty + 16 * i) * kPitch + tx + 16 * j] = acc[i][j];
    cp_async_wait<0>();
    __syncthreads();
    store_staged_tile<float, float, float, BM, BN, kPitch, kThreads, ACT>(
        staged, stage_residual ? residual_tile : nullptr, bias, residual, c, m, n, m0, n0,
        cv.matrix_base(tile.batch, tile.head), r_base, cv.row_stride, rv.row_stride, alpha, vector_epilogue);
}

}  // namespace vitrt_matmul

// The entry point every generated wrapper of an f32 matmul calls: the same template
// parameters as mma_sync.cu's `matmul_block` (documented there) and the same MatmulParams. The
// f32 body fixes 2 register-staged buffers, 8 warps and element loads, and never splits K.
template <typename T, typename TR, typename TC, int BM, int BN, int BK, int GROUP_M, int STAGES, int WARPS_M,
          int WARPS_N, Act ACT, bool B_KN, bool VEC16>
__device__ __forceinline__ void matmul_block(const vitrt_matmul::MatmulParams& p) {
    using namespace vitrt_matmul;
    static_assert(STAGES == 2 && WARPS_M * WARPS_N == 8 && !VEC16, "the f32 body is fixed at 2 stages, 8 warps");
    static_assert(is_f32<TR>::value && is_f32<TC>::value, "an f32 matmul keeps every operand in f32");
    const Operands<T, TR, TC> o(p);
    matmul_fma_f32<BM, BN, BK, GROUP_M, ACT, B_KN>(o.a, o.b, o.bias, o.residual, o.c, p.heads, p.m, p.n, p.k,
                                                   p.a_view, p.b_view, p.c_view, p.r_view, p.alpha,
                                                   p.vector_epilogue);
}

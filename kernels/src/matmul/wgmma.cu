// The wgmma program (f16, bf16 on sm_90a): warpgroup MMA (`wgmma.mma_async`) straight from
// shared memory. With mma.sync every fragment goes through registers by ldmatrix, and a warp's
// 64x64 tile needs ~246 registers (measured: benchmarks/NOTES.md, 2026-11-22 "wgmma matmul").
// wgmma lets a warpgroup (4 warps, 128 threads) multiply a 64xBN block by reading both operands
// from shared memory through matrix descriptors, asynchronously, with only the accumulators in
// registers. The copy side stays the cp.async pipeline of the mma.sync program, so edges are
// masked the same way (zero-filled chunks); what changes is the shared layout, which must be
// the one wgmma reads:
// - BK = 64 elements = 128-byte rows, in the 128-byte swizzle: inside each 1024-byte block of 8
//   rows, 16-byte chunk c of row r sits at chunk c ^ (r % 8) (what swizzled_chunk<8> computes),
//   and every tile starts on a 1024-byte boundary;
// - descriptors: start address, leading byte offset unused for swizzled K-major operands,
//   stride byte offset 1024 (from one 8-row block to the next), swizzle mode 128B. Stepping k
//   by 16 elements adds 32 bytes to the start address; the hardware applies the XOR.
// Both A ([BM][BK]) and B ([BN][BK], weights as [N, K]) are K-major: no transposes. The CTA has
// BM / 64 warpgroups, each owning 64 rows of the tile and every column.
//
// Pipeline: a k-tile's copies are issued STAGES - 2 k-tiles ahead, so two wgmma groups may be
// in flight while the copies run: the stage a copy overwrites was read by the group before
// last, which `wgmma.wait_group 1` (then the barrier, for the other warpgroups) has retired.

#include "copy.cuh"
#include "wgmma.cuh"
#include "params.cuh"

namespace vitrt_matmul {

template <typename T, typename TR, typename TC, int BM, int BN, int BK, int GROUP_M, int STAGES, Act ACT>
__device__ __forceinline__ void matmul_wgmma(const T* __restrict__ a, const T* __restrict__ b, const T* bias,
                                             const TR* residual, TC* c, int heads, int m, int n, int k, View av,
                                             View bv, View cv, View rv, float alpha, int vector_epilogue) {
    constexpr int kWarpgroups = BM / 64;
    constexpr int kThreads = kWarpgroups * 128;
    constexpr int kAccumulators = BN / 2;  // per thread: 64 x BN over a warpgroup's 128 threads
    constexpr int kChunks = BK / 8;        // 16-byte chunks per row
    constexpr int kBytesA = BM * BK * 2;
    constexpr int kBytesB = BN * BK * 2;
    constexpr int kStageBytes = kBytesA + kBytesB;
    constexpr int kLoadsA = BM * kChunks / kThreads;
    constexpr int kLoadsB = BN * kChunks / kThreads;
    constexpr int kAhead = STAGES - 2;  // k-tiles whose copies are in flight ahead of the one in use
    static_assert(BK == 64, "the 128-byte swizzle wants 128-byte rows: BK = 64 two-byte elements");
    static_assert(BM % 64 == 0 && BN % 8 == 0 && STAGES >= 3, "wgmma tile shape");
    static_assert(BM * kChunks % kThreads == 0 && BN * kChunks % kThreads == 0, "tiles split evenly over threads");

    // The launcher asks for 1024 bytes more than the stages need, so the stages can start on
    // the 1024-byte boundary the swizzle is anchored to, wherever dynamic shared memory starts.
    extern __shared__ __align__(128) unsigned char shared_tiles[];
    const unsigned smem_unaligned = shared_address(shared_tiles);
    const unsigned smem = (smem_unaligned + 1023) & ~1023u;

    const int tiles_m = (m + BM - 1) / BM;
    const int tiles_n = (n + BN - 1) / BN;
    const TileCoords tile = tile_of_program<GROUP_M>(heads, tiles_m, tiles_n);
    const int m0 = tile.tile_m * BM;
    const int n0 = tile.tile_n * BN;
    const T* a_matrix = a + av.matrix_base(tile.batch, tile.head);
    const T* b_matrix = b + bv.matrix_base(tile.batch, tile.head);
    const int tid = threadIdx.x;

    // The copy plan, as in the mma.sync path: rows past M or N read nothing (zero-filled).
    const T* a_src[kLoadsA];
    int a_dst[kLoadsA], a_bytes[kLoadsA], a_k[kLoadsA];
#pragma unroll
    for (int i = 0; i < kLoadsA; ++i) {
        const int id = tid + i * kThreads;
        const int row = id / kChunks, chunk = id % kChunks;
        const bool row_inside = m0 + row < m;
        a_src[i] = a_matrix + (row_inside ? (long long)(m0 + row) * av.row_stride : 0) + chunk * 8;
        a_bytes[i] = row_inside ? 16 : 0;
        a_k[i] = chunk * 8;
        a_dst[i] = swizzled_chunk<kChunks>(row, chunk) * 16;
    }
    const T* b_src[kLoadsB];
    int b_dst[kLoadsB], b_bytes[kLoadsB], b_k[kLoadsB];
#pragma unroll
    for (int i = 0; i < kLoadsB; ++i) {
        const int id = tid + i * kThreads;
        const int row = id / kChunks, chunk = id % kChunks;
        const bool row_inside = n0 + row < n;
        b_src[i] = b_matrix + (row_inside ? (long long)(n0 + row) * bv.row_stride : 0) + chunk * 8;
        b_bytes[i] = row_inside ? 16 : 0;
        b_k[i] = chunk * 8;
        b_dst[i] = swizzled_chunk<kChunks>(row, chunk) * 16;
    }

    const int k_tiles = (k + BK - 1) / BK;
    auto load_stage = [&](int stage, int k0) {
        const unsigned stage_a = smem + stage * kStageBytes;
        const unsigned stage_b = stage_a + kBytesA;
        if (k0 + BK <= k) {
#pragma unroll
            for (int i = 0; i < kLoadsA; ++i) cp_async_16(stage_a + a_dst[i], a_src[i] + k0, a_bytes[i]);
#pragma unroll
            for (int i = 0; i < kLoadsB; ++i) cp_async_16(stage_b + b_dst[i], b_src[i] + k0, b_bytes[i]);
        } else {
#pragma unroll
            for (int i = 0; i < kLoadsA; ++i)
                cp_async_16(stage_a + a_dst[i], a_src[i] + k0, min(a_bytes[i], max(0, k - k0 - a_k[i]) * 2));
#pragma unroll
            for (int i = 0; i < kLoadsB; ++i)
                cp_async_16(stage_b + b_dst[i], b_src[i] + k0, min(b_bytes[i], max(0, k - k0 - b_k[i]) * 2));
        }
    };

    float acc[kAccumulators];
#pragma unroll
    for (int i = 0; i < kAccumulators; ++i) acc[i] = 0.0f;

    const int warpgroup = tid / 128;
#pragma unroll
    for (int s = 0; s < kAhead; ++s) {
        if (s < k_tiles) load_stage(s, s * BK);
        cp_async_commit();
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<kAhead - 1>();  // this thread's copies of k-tile kt have landed
        fence_proxy_async_shared();
        wgmma_wait<1>();  // this warpgroup's group for k-tile kt - 2 has retired ...
        __syncthreads();  // ... and every warpgroup's: its stage may be refilled

        const unsigned stage_a = smem + (kt % STAGES) * kStageBytes + warpgroup * 64 * BK * 2;
        const unsigned stage_b = smem + (kt % STAGES) * kStageBytes + kBytesA;
        fence_accumulators(acc);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < BK / 16; ++ks) {
            wgmma_m64k16<T, BN>(acc, wgmma_descriptor(stage_a + ks * 32), wgmma_descriptor(stage_b + ks * 32));
        }
        wgmma_commit();
        fence_accumulators(acc);

        const int next = kt + kAhead;
        if (next < k_tiles) load_stage(next % STAGES, next * BK);
        cp_async_commit();
    }
    wgmma_wait<0>();
    fence_accumulators(acc);
    cp_async_wait<0>();
    __syncthreads();  // every warpgroup is done reading the stages: their memory now stages C

    // The epilogue is the mma.sync path's: the fp32 tile in shared memory (row pitch BN + 8),
    // then runs of four columns. The staged tile starts at the unaligned base: the launcher's
    // shared_bytes covers it from there.
    constexpr int kPitch = BN + 8;
    constexpr int kStagedBytes = BM * kPitch * 4;
    // The residual tile is staged only where it costs at most 8 KB more shared memory than
    // the pipeline already takes (the launcher's MatmulConfig::stages_residual says the same),
    // so that it never costs an SM a CTA.
    constexpr int kPipelineBytes = 1024 + STAGES * kStageBytes;
    constexpr bool kStageResidual = kStagedBytes + BM * BN * (int)sizeof(TR) <= kPipelineBytes + 8192;
    float* staged = reinterpret_cast<float*>(shared_tiles);
    TR* residual_tile = reinterpret_cast<TR*>(shared_tiles + kStagedBytes);
    const long long r_base = rv.matrix_base(tile.batch, tile.head);
    const bool stage_residual = kStageResidual && residual != nullptr && vector_epilogue;
    if (stage_residual)
        stage_residual_runs<TR, BM, BN, kThreads>(residual_tile, residual + r_base, rv.row_stride, m, n, m0, n0);
    cp_async_commit();

    // The m64nN accumulator layout: warp w of the warpgroup holds rows 16w + g and 16w + g + 8
    // (g = lane / 4); for each 8-column block j, columns 8j + 2q and 8j + 2q + 1 (q = lane % 4):
    // acc[4j], acc[4j + 1] on the first row, acc[4j + 2], acc[4j + 3] on the second.
    const int lane = tid & 31;
    const int row = warpgroup * 64 + ((tid / 32) % 4) * 16 + (lane >> 2);
    const int pair_col = (lane & 3) * 2;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const int col = j * 8 + pair_col;
        *reinterpret_cast<float2*>(staged + row * kPitch + col) = make_float2(acc[4 * j], acc[4 * j + 1]);
        *reinterpret_cast<float2*>(staged + (row + 8) * kPitch + col) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
    cp_async_wait<0>();
    __syncthreads();
    store_staged_tile<T, TR, TC, BM, BN, kPitch, kThreads, ACT>(
        staged, stage_residual ? residual_tile : nullptr, bias, residual, c, m, n, m0, n0,
        cv.matrix_base(tile.batch, tile.head), r_base, cv.row_stride, rv.row_stride, alpha, vector_epilogue);
}

}  // namespace vitrt_matmul

// The entry point of the Hopper instantiations (sm_90a only): the same parameters as
// matmul_block, for f16/bf16 operands with B as [N, K] weights and 16-byte aligned rows (the
// launcher sends everything else to matmul_block). Template arguments: T, TR, TC, BLOCK_M (64
// per warpgroup), BLOCK_N (128, 192 or 256), BLOCK_K (64), GROUP_M, STAGES (at least 3),
// activation.
template <typename T, typename TR, typename TC, int BM, int BN, int BK, int GROUP_M, int STAGES, Act ACT>
__device__ __forceinline__ void matmul_block_wgmma(const vitrt_matmul::MatmulParams& p) {
    using namespace vitrt_matmul;
    static_assert(!is_f32<T>::value, "wgmma instantiations are f16 or bf16");
#if VITRT_HAS_WGMMA
    const Operands<T, TR, TC> o(p);
    matmul_wgmma<T, TR, TC, BM, BN, BK, GROUP_M, STAGES, ACT>(o.a, o.b, o.bias, o.residual, o.c, p.heads, p.m, p.n,
                                                               p.k, p.a_view, p.b_view, p.c_view, p.r_view, p.alpha,
                                                               p.vector_epilogue);
#else
    // Compiled for a target without wgmma: the launcher never picks this instantiation there.
    __trap();
#endif
}

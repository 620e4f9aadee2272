// The TMA cooperative program (f16, bf16 on sm_90a): warp-specialised, TMA copies on mbarriers,
// persistent tiles. The wgmma program fills its pipeline with cp.async issued by every thread,
// one tile per CTA: every CTA of a wave fills its stages at the same moment and writes its tile
// at the same moment, which at K = 768 cost as much as the main loop (measured:
// benchmarks/NOTES.md, 2026-11-22 "warp-specialised TMA matmul"). Here a
// producer warp issues one TMA copy per operand and stage (the tensor map does the addressing,
// the 128-byte swizzle and the zero fill past M, N and K), two consumer warpgroups multiply,
// and the grid is persistent: while the consumers run one tile's epilogue (staged through
// shared memory of their own, see store_block_staged), the producer is already loading the
// next tile's stages. Stages are handed over with two mbarriers each:
// `full` (the producer's expect-tx arrival plus the copies' bytes) and `empty` (one arrival
// per consumer warp once its wgmma has read the stage). For single matrices (batch and heads
// 1) with 16-byte aligned rows, as every linear layer is; the launcher sends the rest to the
// wgmma and mma.sync programs.

#include "tma.cuh"

namespace vitrt_matmul {

template <typename T, typename TR, typename TC, int BN, int STAGES, int GROUP_M, Act ACT>
__device__ __forceinline__ void matmul_tma(const TmaDescriptor& a_map, const TmaDescriptor& b_map, const T* bias,
                                           const TR* residual, TC* c, int m, int n, int k, View cv, View rv,
                                           float alpha, int vector_epilogue) {
    constexpr int BM = 128, BK = 64;
    constexpr int kAccumulators = BN / 2;
    constexpr int kBytesA = BM * BK * 2;
    constexpr int kBytesB = BN * BK * 2;
    constexpr int kStageBytes = kBytesA + kBytesB;
    constexpr unsigned kConsumerWarps = 8;
    static_assert(BN % 64 == 0 && BN <= 256, "B boxes are at most 256 rows, in batches of 64 columns");

    extern __shared__ __align__(128) unsigned char shared_tiles[];
    __shared__ __align__(8) unsigned long long barriers[2 * STAGES];  // full[s], then empty[s]
    const unsigned smem = (shared_address(shared_tiles) + 1023) & ~1023u;
    const unsigned full_bar = shared_address(barriers);
    const unsigned empty_bar = full_bar + STAGES * 8;

    const int tiles_m = (m + BM - 1) / BM;
    const int tiles_n = (n + BN - 1) / BN;
    const int tiles = tiles_m * tiles_n;
    const int k_tiles = (k + BK - 1) / BK;
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(full_bar + s * 8, 1);
            mbarrier_init(empty_bar + s * 8, kConsumerWarps);
        }
        // Makes the initialised barriers visible to the async proxy (the TMA unit).
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warpgroup == 0) {
        // Producer: one thread issues every copy; the warpgroup's registers go to the consumers.
#if VITRT_HAS_WGMMA
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
#endif
        if (threadIdx.x == 0 && k_tiles > 0)
            load_stages<BN, STAGES, GROUP_M>(a_map, b_map, smem, full_bar, empty_bar, tiles_m, tiles_n, k_tiles);
        return;
    }

    // Consumers: warpgroup 1 takes the tile's rows 0-63, warpgroup 2 rows 64-127.
#if VITRT_HAS_WGMMA
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
#endif
    const int consumer = warpgroup - 1;
    // Each consumer's 64 x 64 fp32 epilogue buffer (row pitch 68) follows the stages.
    float* epilogue_buffer =
        reinterpret_cast<float*>(shared_tiles + (smem - shared_address(shared_tiles)) + STAGES * kStageBytes) +
        consumer * 64 * 68;
    const int lane = threadIdx.x & 31;
    float acc[kAccumulators];
#pragma unroll
    for (int i = 0; i < kAccumulators; ++i) acc[i] = 0.0f;
    int step = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const TileCoords t = tile_of_program<GROUP_M>(1, tiles_m, tiles_n, tile);
        for (int kt = 0; kt < k_tiles; ++kt, ++step) {
            const int s = step % STAGES;
            mbarrier_wait(full_bar + s * 8, (step / STAGES) & 1);
            const unsigned stage_a = smem + s * kStageBytes + consumer * 64 * BK * 2;
            const unsigned stage_b = smem + s * kStageBytes + kBytesA;
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < BK / 16; ++ks) {
                wgmma_m64k16<T, BN>(acc, wgmma_descriptor(stage_a + ks * 32), wgmma_descriptor(stage_b + ks * 32),
                                    kt > 0 || ks > 0);
            }
            wgmma_commit();
            // The previous step's group has retired once at most one is pending: its stage is free.
            wgmma_wait<1>();
            if (kt > 0 && lane == 0) mbarrier_arrive(empty_bar + ((step - 1) % STAGES) * 8);
        }
        if (k_tiles > 0) {
            wgmma_wait<0>();
            if (lane == 0) mbarrier_arrive(empty_bar + ((step - 1) % STAGES) * 8);
        }
        fence_accumulators(acc);
        store_block_staged<T, TR, TC, BN, ACT>(acc, epilogue_buffer, 1 + consumer, bias, residual, c, m, n,
                                               t.tile_m * BM + consumer * 64, t.tile_n * BN, cv.offset, rv.offset,
                                               cv.row_stride, rv.row_stride, alpha, vector_epilogue);
    }
}

}  // namespace vitrt_matmul

// The entry point of the warp-specialised Hopper instantiations (sm_90a only): A and B as TMA
// tensor maps ([M, K] and [N, K], 128-byte swizzled boxes of 64 x 128 and 64 x BLOCK_N), one
// matrix (the launcher checks batch and heads are 1), C and the residual as matmul_block's
// views. Template arguments: T, TR, TC, BLOCK_N, STAGES, GROUP_M, activation. 384 threads: a
// producer warpgroup and two consumer warpgroups.
template <typename T, typename TR, typename TC, int BN, int STAGES, int GROUP_M, Act ACT>
__device__ __forceinline__ void matmul_block_tma(const TmaDescriptor& a_map, const TmaDescriptor& b_map,
                                                 const T* bias, const TR* residual, TC* c, int m, int n, int k,
                                                 long long c_offset, long long c_row_stride,
                                                 long long r_offset, long long r_row_stride, float alpha,
                                                 int vector_epilogue) {
    using namespace vitrt_matmul;
    static_assert(!is_f32<T>::value, "TMA instantiations are f16 or bf16");
#if VITRT_HAS_WGMMA
    const View cv{c_offset, c_row_stride, 0, 0};
    const View rv{r_offset, r_row_stride, 0, 0};
    matmul_tma<T, TR, TC, BN, STAGES, GROUP_M, ACT>(a_map, b_map, bias, residual, c, m, n, k, cv, rv, alpha,
                                                    vector_epilogue);
#else
    __trap();
#endif
}

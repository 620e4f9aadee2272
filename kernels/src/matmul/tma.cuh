// TMA on sm_90a (NVRTC receives it in memory as "tma.cuh"): 2-D TMA loads of the pipeline's
// stages and the staged epilogue of one consumer warpgroup's block; used by both TMA programs.
// The tensor-map parameter and the mbarriers are in common.cuh (attention uses them too).

#pragma once

#include "wgmma.cuh"

namespace vitrt_matmul {

// One box of a 2-D tensor map (inner coordinate first) into shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDescriptor* map, int inner, int outer,
                                            unsigned bar) {
#if VITRT_HAS_WGMMA
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
            "r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(inner), "r"(outer), "r"(bar)
        : "memory");
#endif
}

// A multicast load: one box of a 2-D tensor map into the shared memory of every CTA of the
// cluster named in `cta_mask`, at the same offset `dst` in each, completing on the mbarrier at
// offset `bar` in each.
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TmaDescriptor* map, int inner, int outer,
                                                      unsigned bar, unsigned short cta_mask) {
#if VITRT_HAS_WGMMA
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(inner), "r"(outer), "r"(bar), "h"(cta_mask)
        : "memory");
#endif
}

// One arrival on the mbarrier at offset `bar` in the shared memory of cluster CTA `cta`. Its
// release is the default, CTA scope, as CUTLASS's cluster barriers arrive: what it orders is
// this warp's wgmma reads of a stage before the other CTA's TMA writes into it, and a
// cluster-scope release here cost the main loop more than the multicast saved (measured:
// benchmarks/NOTES.md, 2026-11-25 "A multicast across a cluster of two").
__device__ __forceinline__ void mbarrier_arrive_in_cta(unsigned bar, unsigned cta) {
#if VITRT_HAS_WGMMA
    asm volatile(
        "{\n"
        ".reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
        "}\n" ::"r"(bar),
        "r"(cta)
        : "memory");
#endif
}

// Every thread of every CTA of the cluster meets here; what each wrote before (its mbarriers'
// initialisation) is visible to the others after.
__device__ __forceinline__ void cluster_sync() {
#if VITRT_HAS_WGMMA
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

// The tiles of a persistent CTA's walk, in order. CLUSTER 1: tiles blockIdx.x, + gridDim.x, ...
// of the grouped order. CLUSTER 2: the CTAs of a cluster (blockIdx.x 2c and 2c + 1) walk
// together over pairs of adjacent n-tiles (same rows of A), the pairs in the grouped order, and
// take one tile of each pair: A's box is loaded once for both, half by each CTA, multicast to
// the two (see load_stages). A pair whose second tile lies past N still has both CTAs walk it:
// the tensor maps zero-fill B and clip C there.
// Split-K (CLUSTER 1 only): the walk covers `splits` copies of the tiles, split-major, and a
// tile's `batch` is its split, whose k-tiles are [batch · k_tiles, (batch + 1) · k_tiles) for
// the split's `k_tiles` (see split_k_partial_sum in tma_pingpong.cu).
template <int GROUP_M, int CLUSTER>
struct CtaTiles {
    static_assert(CLUSTER == 1 || CLUSTER == 2, "clusters of one or two CTAs");
    int tiles_m, tiles_n;
    int splits = 1;

    // The walk's i-th tile, false past the last.
    __device__ __forceinline__ bool at(int i, TileCoords& t) const {
        if constexpr (CLUSTER == 1) {
            const int tile = blockIdx.x + i * gridDim.x;
            if (tile >= tiles_m * tiles_n * splits) return false;
            t = tile_of_program<GROUP_M>(1, tiles_m, tiles_n, tile);
        } else {
            const int pairs_n = (tiles_n + 1) / 2;
            const int pair = blockIdx.x / 2 + i * (gridDim.x / 2);
            if (pair >= tiles_m * pairs_n) return false;
            t = tile_of_program<GROUP_M>(1, tiles_m, pairs_n, pair);
            t.tile_n = 2 * t.tile_n + (blockIdx.x & 1);
        }
        return true;
    }
};

// A consumer warp's release of a stage (lane 0): on this CTA's `empty` barrier, and with
// CLUSTER 2 on the other CTA's too, whose producer writes half of A into this CTA's stage.
template <int CLUSTER>
__device__ __forceinline__ void release_stage(unsigned empty) {
    static_assert(CLUSTER == 1 || CLUSTER == 2, "clusters of one or two CTAs");
    mbarrier_arrive(empty);
    if constexpr (CLUSTER == 2) mbarrier_arrive_in_cta(empty, (blockIdx.x & 1) ^ 1);
}

// The producer of the warp-specialised bodies, one thread (K > 0): every k-tile of the CTA's
// tiles in order (`k_tiles` a tile, from its split's first with split-K), A's 128 x BK box
// and B's BN x BK box per stage, each stage once its consumers have released it. CLUSTER 2: the two CTAs share A's box (their tiles have the same
// rows); each loads half of it (64 rows, `a_map`'s box) into both CTAs' stage, so the stage
// completes on 32 KB as before, and a stage is free only once the consumers of both CTAs have
// released it (`empty` counts both). It then waits for the last release of every stage: the
// other CTA's consumers arrive on this CTA's barriers, which must outlive their arrivals.
// BK: the k-tile's elements, 64 of a 16-bit operand or 128 of an 8-bit one (the FP8 ping-pong
// program); either way a box row is one 128-byte swizzle row.
template <int BN, int STAGES, int GROUP_M, int CLUSTER = 1, int BK = 64>
__device__ __forceinline__ void load_stages(const TmaDescriptor& a_map, const TmaDescriptor& b_map, unsigned smem,
                                            unsigned full_bar, unsigned empty_bar, int tiles_m, int tiles_n,
                                            int k_tiles, int splits = 1) {
    constexpr int BM = 128, kRowBytes = 128;
    static_assert(BK == 64 || BK == 128, "a k-tile row is 128 bytes of a 16- or 8-bit operand");
    constexpr int kBytesA = BM * kRowBytes;
    constexpr int kStageBytes = kBytesA + BN * kRowBytes;
    const CtaTiles<GROUP_M, CLUSTER> walk{tiles_m, tiles_n, splits};
    const int rank = CLUSTER == 1 ? 0 : (int)(blockIdx.x & 1);
    int step = 0;
    TileCoords t;
    for (int i = 0; walk.at(i, t); ++i) {
        for (int kt = t.batch * k_tiles; kt < (t.batch + 1) * k_tiles; ++kt, ++step) {
            const int s = step % STAGES;
            // Stage s was last used by step - STAGES: its consumers' release is completion
            // number step / STAGES - 1 of empty[s].
            if (step >= STAGES) mbarrier_wait(empty_bar + s * 8, ((step / STAGES) + 1) & 1);
            const unsigned stage_a = smem + s * kStageBytes;
            mbarrier_arrive_expect_tx(full_bar + s * 8, kStageBytes);
            if constexpr (CLUSTER == 1) {
                tma_load_2d(stage_a, &a_map, kt * BK, t.tile_m * BM, full_bar + s * 8);
            } else {
                // Rows 64·rank .. 64·rank + 63 of the box: 64 rows of 128 bytes, whole periods
                // of the 128-byte swizzle.
                tma_load_2d_multicast(stage_a + rank * (BM / 2) * 128, &a_map, kt * BK, t.tile_m * BM + rank * (BM / 2),
                                      full_bar + s * 8, 0x3);
            }
            tma_load_2d(stage_a + kBytesA, &b_map, kt * BK, t.tile_n * BN, full_bar + s * 8);
        }
    }
    if constexpr (CLUSTER > 1) {
        for (int last = step - 1; last >= 0 && last >= step - STAGES; --last)
            mbarrier_wait(empty_bar + (last % STAGES) * 8, (last / STAGES) & 1);
    }
}

// The epilogue of one consumer warpgroup's 64 x BN block, through shared memory in chunks of
// 64 columns: the accumulators go to a 64 x 64 fp32 buffer (row pitch 68 floats, so the
// 8-byte stores of a warp's rows spread over the banks), then each thread takes runs of four
// columns, as the cp.async bodies' store_staged_tile does: bias, residual and C are read and
// written as 8- or 16-byte accesses whose warp covers whole rows (the register epilogue's
// 4-byte pairs left C's writes scattered). A chunk's residual runs are all loaded before its
// first store: a residual may alias C, so the compiler may not hoist a load over a store.
// The bias likewise: a thread's runs in a chunk share its four columns, so their bias is
// loaded once per chunk, with its residual runs (after the staging, when the chunk's
// accumulators are no longer held: loaded before it, 128 x 256 spilled). Loaded per run, each
// load waited behind the previous run's store: a chain of 24 L2 latencies per 128 x 192
// tile, which made the GELU epilogue of the batch-64 fc1 cost half as much as its MMAs.
// Each loop below computes its column itself: one column variable for the whole chunk, the
// same arithmetic, compiled to slower code (measured: benchmarks/NOTES.md, 2026-11-22 "the TMA
// epilogue's bias").
// `bar_id` names the warpgroup's own barrier (1 or 2; 0 is __syncthreads).
template <typename T, typename TR, typename TC, int BN, Act ACT>
__device__ __forceinline__ void store_block_staged(const float (&acc)[BN / 2], float* buffer, int bar_id,
                                                   const T* bias, const TR* residual, TC* c, int m, int n,
                                                   int row0, int col0, long long c_base, long long r_base,
                                                   long long c_row_stride, long long r_row_stride, float alpha,
                                                   int vector_epilogue) {
    constexpr int kPitch = 68;
    constexpr int kRuns = 64 * 64 / 4 / 128;  // runs of four per thread per chunk
    const int tid = threadIdx.x % 128;
    const int lane = tid & 31;
    const int frag_row = (tid / 32) * 16 + (lane >> 2);
    const int frag_col = (lane & 3) * 2;
    // Run r of a chunk is idx = tid + 128 r: row idx / 16, columns (idx % 16) * 4, the same
    // for every r (128 is a multiple of 16).
    static_assert(128 % 16 == 0, "a thread's runs share their columns");
    const int run_col = (tid % 16) * 4;
#pragma unroll
    for (int chunk = 0; chunk < BN / 64; ++chunk) {
        // The previous chunk's runs have been read by every thread of the warpgroup.
        asm volatile("bar.sync %0, 128;\n" ::"r"(bar_id) : "memory");
#pragma unroll
        for (int jb = 0; jb < 8; ++jb) {
            const int j = chunk * 8 + jb;
            const int col = jb * 8 + frag_col;
            *reinterpret_cast<float2*>(buffer + frag_row * kPitch + col) = make_float2(acc[4 * j], acc[4 * j + 1]);
            *reinterpret_cast<float2*>(buffer + (frag_row + 8) * kPitch + col) =
                make_float2(acc[4 * j + 2], acc[4 * j + 3]);
        }
        asm volatile("bar.sync %0, 128;\n" ::"r"(bar_id) : "memory");
        float add[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const int bias_col = col0 + chunk * 64 + run_col;
        if (bias != nullptr && bias_col < n) {
            if (vector_epilogue && bias_col + 4 <= n) {
                load_run(bias + bias_col, add);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (bias_col + e < n) add[e] = to_float(bias[bias_col + e]);
            }
        }
        float res[kRuns][4];
#pragma unroll
        for (int r = 0; r < kRuns; ++r) {
            const int idx = tid + r * 128;
            const int row = row0 + idx / 16;
            const int col = col0 + chunk * 64 + (idx % 16) * 4;
            res[r][0] = res[r][1] = res[r][2] = res[r][3] = 0.0f;
            if (residual == nullptr || row >= m || col >= n) continue;
            const TR* r_ptr = residual + r_base + (long long)row * r_row_stride + col;
            if (vector_epilogue && col + 4 <= n) {
                load_run(r_ptr, res[r]);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (col + e < n) res[r][e] = to_float(r_ptr[e]);
            }
        }
#pragma unroll
        for (int r = 0; r < kRuns; ++r) {
            const int idx = tid + r * 128;
            const int row = row0 + idx / 16;
            const int col = col0 + chunk * 64 + run_col;
            if (row >= m || col >= n) continue;
            const bool whole = vector_epilogue && col + 4 <= n;
            float v[4];
            load_run(buffer + (idx / 16) * kPitch + run_col, v);
#pragma unroll
            for (int e = 0; e < 4; ++e) v[e] = activate<ACT, !is_f32<TC>::value>(alpha * v[e] + add[e]) + res[r][e];
            TC* c_ptr = c + c_base + (long long)row * c_row_stride + col;
            if (whole) {
                store_run(c_ptr, v);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (col + e < n) c_ptr[e] = from_float<TC>(v[e]);
            }
        }
    }
}

}  // namespace vitrt_matmul

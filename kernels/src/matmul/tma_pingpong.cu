// The TMA ping-pong programs (f16 / bf16, and e4m3 operands with f16 / bf16 or e4m3 C, sm_90a):
// the warp-specialised program of tma_cooperative.cu with its two consumer warpgroups on
// alternate tiles, so one warpgroup's epilogue runs under the other's MMAs; C, and the
// residual of its residual variants, through tensor maps. A layernorm entry folds the
// layernorm of A's rows into the 16-bit product (matmul_block_tma_pingpong_layernorm), from
// per-row partial statistics that the 16-bit-stream residual entry writes beside the stream
// (matmul_block_tma_pingpong_stream16_stats): the producer of x computes them, the consumer
// only combines them.

#include "tma.cuh"

namespace vitrt_matmul {

// A TMA store of one box (64 columns x its rows) of shared memory to global memory, in the
// bulk-async group of the issuing thread; the tensor map clips what lies past M and N.
__device__ __forceinline__ void tma_store_2d(const TmaDescriptor* map, unsigned src, int inner, int outer) {
#if VITRT_HAS_WGMMA
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                     reinterpret_cast<unsigned long long>(map)),
                 "r"(src), "r"(inner), "r"(outer)
                 : "memory");
#endif
}

// An e4m3 C's element: one byte, the code `cvt.rn.satfinite.e4m3x2.f32` writes (the FP8
// entry points' TC for an e4m3 output).
struct E4m3 {
    unsigned char code;
};
template <typename T>
struct is_e4m3 {
    static constexpr bool value = false;
};
template <>
struct is_e4m3<E4m3> {
    static constexpr bool value = true;
};

// The FP8 program's scales (see matmul_block_tma_pingpong_fp8): the activations' (`a`, one f32
// a row `a_stride` apart: 1 per row, 0 one for the tensor), the weights' (`b`, one a column)
// and an e4m3 C's (`out`, one value; C stores v · (1 / out)). Unused by the 16-bit programs.
struct Fp8Scales {
    const float* a = nullptr;
    int a_stride = 0;
    const float* b = nullptr;
    const float* out = nullptr;
};

// The layernorm entry's operands (see matmul_block_tma_pingpong_layernorm): the weights'
// column sums (f32, N values), the partial statistics of A's rows ([K / 64][M] float2, as
// matmul_block_tma_pingpong_stream16_stats writes them) and the layernorm's epsilon. Unused by
// the other programs.
struct LayernormArgs {
    const float* column_sums = nullptr;
    const float2* row_stats = nullptr;
    float eps = 0.0f;
};

// The width of a row statistics block: the producer's partials cover 64 columns each.
constexpr int kRowStatsBlock = 64;

// The row of the tile whose statistics consumer thread `tid` (0-127) combines (LAYERNORM):
// lanes 0-15 of warp q take rows 16q .. 16q + 15, lanes 16-31 rows 64 + 16q .. 64 + 16q + 15,
// the 32 rows of the accumulator fragments of warp q (frag_row, + 8, + 64, + 72), so the
// epilogue fetches every row's mean and rstd with warp shuffles (see row_statistics_lane).
__device__ __forceinline__ int statistics_row(int tid) {
    const int lane = tid & 31;
    return (tid / 32) * 16 + (lane & 15) + (lane >> 4) * 64;
}

// The lane of this warp holding row frag_row + (r & 1) · 8 + (r >> 1) · 64's statistics, for
// the fragment row frag_row = 16q + lane / 4 of a thread's lane (the inverse of statistics_row).
__device__ __forceinline__ int row_statistics_lane(int lane, int r) {
    return (lane >> 2) + (r & 1) * 8 + (r >> 1) * 16;
}

// ROW_STATS: the partial statistics of one 64-column block of row `row` of a 16-bit output
// tile (the box at `box`: 128-byte rows, chunk c of row r at byte (c ^ (r % 8)) · 16), the
// values as stored (rounded to T): mean = (Σ x) / 64 and m2 = Σ (x - mean)², in f32, each sum
// over four partial sums (value i into sum i % 4, in column order) added as (s0 + s1) + (s2 +
// s3), the order of the twin (LayernormMatmulProblem's block_statistics). The second pass
// reads the row from shared memory again: the accumulators stay live across the epilogue
// (ptxas cannot tell that the next tile's first wgmma overwrites them), which leaves no room
// for the row's 32 words in registers. A warp's eight-row groups read eight different chunks:
// no bank conflicts.
template <typename T>
__device__ __forceinline__ void read_output_chunk(unsigned box, int row, int c, float (&v)[8]) {
    unsigned words[4];
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(words[0]), "=r"(words[1]), "=r"(words[2]), "=r"(words[3])
                 : "r"(box + row * 128 + ((c ^ (row & 7)) << 4))
                 : "memory");
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        const float2 pair = load_pair_as_float(reinterpret_cast<const T*>(&words[w]));
        v[2 * w] = pair.x;
        v[2 * w + 1] = pair.y;
    }
}

template <typename T>
__device__ __forceinline__ float2 output_block_statistics(unsigned box, int row) {
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 2
    for (int c = 0; c < 8; ++c) {
        float v[8];
        read_output_chunk<T>(box, row, c, v);
#pragma unroll
        for (int i = 0; i < 8; ++i) s[i % 4] += v[i];
    }
    const float mean = ((s[0] + s[1]) + (s[2] + s[3])) * (1.0f / kRowStatsBlock);
    float q[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 2
    for (int c = 0; c < 8; ++c) {
        float v[8];
        read_output_chunk<T>(box, row, c, v);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float d = v[i] - mean;
            q[i % 4] = fmaf(d, d, q[i % 4]);
        }
    }
    return make_float2(mean, (q[0] + q[1]) + (q[2] + q[3]));
}

// LAYERNORM: one row's (-mean, rstd) from its K / 64 partials (mean_b, m2_b) at
// `stats[b · m]`, combined by Chan's formula for blocks of equal counts: mean = (Σ_b mean_b) / B,
// m2 = Σ_b m2_b + 64 · Σ_b (mean_b - mean)², var = m2 / K, rstd = rsqrt(var + eps); each sum in
// block order (LayernormMatmulProblem::combine_statistics is the twin's). The second pass
// reads the means again (L1 hits) rather than holding B of them in registers.
__device__ __forceinline__ float2 combine_row_statistics(const float2* stats, long long m, int k, float eps) {
    const int blocks = k / kRowStatsBlock;
    float sum_mean = 0.0f, sum_m2 = 0.0f;
#pragma unroll 4
    for (int b = 0; b < blocks; ++b) {
        const float2 partial = __ldg(stats + b * m);
        sum_mean += partial.x;
        sum_m2 += partial.y;
    }
    const float mean = sum_mean / (float)blocks;
    float spread = 0.0f;
#pragma unroll 4
    for (int b = 0; b < blocks; ++b) {
        const float d = __ldg(&stats[b * m].x) - mean;
        spread = fmaf(d, d, spread);
    }
    const float m2 = fmaf((float)kRowStatsBlock, spread, sum_m2);
    return make_float2(-mean, rsqrtf(m2 / (float)k + eps));
}

// Two adjacent outputs of the layernorm epilogue: act(fma(rstd, fma(-mean, column_sum, acc),
// bias)) per value, in the twin's order (cpu::matmul_layernorm), stored as one 16-bit pair.
template <typename T, Act ACT>
__device__ __forceinline__ void store_normalised_pair(unsigned address, float x, float y, float neg_mean, float rstd,
                                                      float2 column_sum, float2 bias) {
    const float vx = activate<ACT, true>(fmaf(rstd, fmaf(neg_mean, column_sum.x, x), bias.x));
    const float vy = activate<ACT, true>(fmaf(rstd, fmaf(neg_mean, column_sum.y, y), bias.y));
    const T pair[2] = {from_float<T>(vx), from_float<T>(vy)};
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(*reinterpret_cast<const unsigned*>(pair))
                 : "memory");
}

// Four column scales (columns col .. col + 3) into shared memory at `dst`, zero past N: one
// 16-byte cp.async where the scales allow it, element loads at the edge (as stage_bias_chunk).
__device__ __forceinline__ void stage_scale_chunk(unsigned dst, const float* scale, int col, int n) {
    if (col + 4 <= n && (reinterpret_cast<unsigned long long>(scale + col) & 15) == 0) {
        cp_async_ca<16>(dst, scale + col);
        return;
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float value = col + e < n ? scale[col + e] : 0.0f;
        asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(dst + 4 * e), "f"(value) : "memory");
    }
}

// Two adjacent outputs of the FP8 epilogue: fma(acc, a_scale · b_scale, bias), activated, plus
// the 16-bit residual pair already in place (ADD_RESIDUAL, as store_output_pair), stored as a
// 16-bit pair or, for an e4m3 C, as two codes of v · inverse_out_scale rounded to nearest even
// and saturated to ±448 (NaN stays NaN). The order of operations is Fp8Problem::store's.
template <typename T, typename TC, Act ACT, bool ADD_RESIDUAL>
__device__ __forceinline__ void store_scaled_pair(unsigned address, float x, float y, float scale_x, float scale_y,
                                                  float bias_x, float bias_y, float inverse_out_scale) {
    float vx = activate<ACT, true>(fmaf(x, scale_x, bias_x)), vy = activate<ACT, true>(fmaf(y, scale_y, bias_y));
    if constexpr (ADD_RESIDUAL) {
        unsigned bits;
        asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(bits) : "r"(address) : "memory");
        const T* residual = reinterpret_cast<const T*>(&bits);
        vx += to_float(residual[0]);
        vy += to_float(residual[1]);
    }
    if constexpr (is_e4m3<TC>::value) {
        // The first source goes to the upper byte: y's code above x's, x at the lower address.
        unsigned short codes;
        asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n"
            : "=h"(codes)
            : "f"(vy * inverse_out_scale), "f"(vx * inverse_out_scale));
        asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(address), "h"(codes) : "memory");
    } else {
        const T pair[2] = {from_float<T>(vx), from_float<T>(vy)};
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(*reinterpret_cast<const unsigned*>(pair))
                     : "memory");
    }
}

// The byte offset in an e4m3 output tile (128 rows of BN bytes, the swizzle of C's tensor
// map: 128-byte rows swizzled over 128 bytes, 64-byte rows over 64) of columns
// jb · 8 + col_in_group and the next one, of `row`. A swizzle permutes a row's 16-byte chunks:
// chunk c of row r lands at c ^ (r % 8) for 128 bytes, c ^ ((r / 2) % 4) for 64 (bits 4-6 of
// the address XORed with bits 7-9, bits 4-5 with 7-8), so that the eight rows a warp stores
// at once fall on different banks.
template <int BN>
__device__ __forceinline__ unsigned e4m3_output_offset(int row, int jb, int col_in_group) {
    static_assert(BN == 64 || BN == 128, "e4m3 output tiles are 64 or 128 bytes wide");
    const int chunk = jb / 2;
    const int swizzled = BN == 128 ? chunk ^ (row % 8) : chunk ^ ((row / 2) % 4);
    return row * BN + swizzled * 16 + (jb % 2) * 8 + col_in_group;
}

// Two adjacent outputs of the register epilogue, activated and stored as one 16-bit pair.
// ADD_RESIDUAL (a 16-bit stream): the pair already there is R's (TMA put R in C's layout),
// added to the activated pair in place.
template <typename T, Act ACT, bool ADD_RESIDUAL = false>
__device__ __forceinline__ void store_output_pair(unsigned address, float x, float y, float alpha, float bias_x,
                                                  float bias_y) {
    float vx = activate<ACT, true>(alpha * x + bias_x), vy = activate<ACT, true>(alpha * y + bias_y);
    if constexpr (ADD_RESIDUAL) {
        unsigned bits;
        asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(bits) : "r"(address) : "memory");
        const T* residual = reinterpret_cast<const T*>(&bits);
        vx += to_float(residual[0]);
        vy += to_float(residual[1]);
    }
    const T pair[2] = {from_float<T>(vx), from_float<T>(vy)};
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(*reinterpret_cast<const unsigned*>(pair))
                 : "memory");
}

// Eight bias values (columns col .. col + 7) into shared memory at `dst`, zero past N: one
// 16-byte cp.async where the bias allows it, element loads at the edge. The ping-pong epilogue
// reads its tile's bias from there: loaded from global memory per column pair, its 16 dependent
// L2 round trips a tile made the epilogue outlast the other warpgroup's main loop (measured:
// benchmarks/NOTES.md, 2026-11-22 "the epilogue's bias in shared memory").
template <typename T>
__device__ __forceinline__ void stage_bias_chunk(unsigned dst, const T* bias, int col, int n) {
    if (col + 8 <= n && (reinterpret_cast<unsigned long long>(bias + col) & 15) == 0) {
        cp_async_ca<16>(dst, bias + col);
        return;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        const T value = col + e < n ? bias[col + e] : from_float<T>(0.0f);
        asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(dst + 2 * e), "h"(*reinterpret_cast<const unsigned short*>(&value))
                     : "memory");
    }
}

// The residual loader of the ping-pong body (one thread of the second producer warp). Each
// consumer warpgroup has a 32 KB shared buffer: half a tile's f32 residual (128 rows x BN / 2
// columns, as 128-byte swizzled boxes of 32 columns), or a whole tile of a 16-bit one (boxes
// of 64 columns). For f32 the loader fills it with the first half of the warpgroup's next
// tile while that tile's main loop runs, and with the second half once the epilogue has added
// the first; a 16-bit tile is one use. A whole tile a warpgroup would leave room for three
// stages only, which starved the main loop (measured: benchmarks/NOTES.md, 2026-11-22
// "residual stream on the ping-pong tile"); the epilogue has time to wait for the second half, since the other
// warpgroup's main loop is what it must hide behind. Its own thread, not the stage producer's:
// waiting there for an epilogue would stall the next tile's main-loop copies behind it.
// Buffer w's use u (tile 2q + w of the CTA, part h: u = kUses·q + h) completes phase u of
// full[w] and is released by phase u of empty[w].
// With split-K every split's tile loads R (only the last split's epilogue adds it; the others
// release it unread, see release_residual_unread), so the buffers' phases stay those of the walk.
template <typename TR, int BN, int GROUP_M, int CLUSTER>
__device__ __forceinline__ void load_residual_parts(const TmaDescriptor& r_map, unsigned buffers,
                                                    unsigned full_bar, unsigned empty_bar, int tiles_m,
                                                    int tiles_n, int splits) {
    constexpr int BM = 128;
    // f32: two uses a tile of BN / 2 columns (boxes of 32); 16-bit: one of BN (boxes of 64).
    constexpr int kUses = (int)sizeof(TR) / 2;
    constexpr int kUseBytes = BM * BN * (int)sizeof(TR) / kUses;
    constexpr int kBoxColumns = 128 / (int)sizeof(TR);
    const CtaTiles<GROUP_M, CLUSTER> walk{tiles_m, tiles_n, splits};
    TileCoords t;
    for (int i = 0; walk.at(i, t); ++i) {
        const int w = i & 1;
        for (int part = 0; part < kUses; ++part) {
            const int use = (i >> 1) * kUses + part;
            if (use > 0) mbarrier_wait(empty_bar + w * 8, (use - 1) & 1);
            const unsigned dst = buffers + w * kUseBytes;
            mbarrier_arrive_expect_tx(full_bar + w * 8, kUseBytes);
#pragma unroll
            for (int box = 0; box < BN / 64; ++box)
                tma_load_2d(dst + box * (BM * 128), &r_map, t.tile_n * BN + part * (BN / kUses) + box * kBoxColumns,
                            t.tile_m * BM, full_bar + w * 8);
        }
    }
}

// Two adjacent outputs of the residual epilogue: activated, plus their residual pair from the
// shared tile, stored to C as one 8-byte access (a warp's store covers whole 32-byte sectors
// of eight rows, so C goes straight from registers to global memory).
template <Act ACT>
__device__ __forceinline__ void add_residual_pair(float* c, long long c_row_stride, const float* residual, int row,
                                                  int col, int m, int n, float x, float y, float alpha,
                                                  float bias_x, float bias_y) {
    const float2 r = *reinterpret_cast<const float2*>(residual);
    const float2 v = make_float2(activate<ACT>(alpha * x + bias_x) + r.x, activate<ACT>(alpha * y + bias_y) + r.y);
    if (row >= m) return;
    float* p = c + (long long)row * c_row_stride + col;
    if (col + 1 < n) {
        *reinterpret_cast<float2*>(p) = v;
    } else if (col < n) {
        p[0] = v.x;
    }
}

// Split-K of the ping-pong tile (SPLIT_K, for products whose tiles leave most SMs idle: batch
// 1's fc2 makes 24 narrow tiles on 132 SMs, each a chain of 48 k-steps). Every split's
// warpgroup stores its fp32 accumulators as they lie in its registers, float4 i of thread t at
// [tile][split][i][t] in `partials`, and counts itself in `counters[tile]`; the one that counts
// last loads every split's partial in split order into its accumulators (so the sum does not
// depend on which finished last), resets the counter for the next launch and runs the
// epilogue. Returns whether this warpgroup is that last one. `last` is the warpgroup's flag in
// shared memory; `bar_id` its named barrier.
template <int N>
__device__ __forceinline__ bool split_k_partial_sum(float (&top)[N], float (&bottom)[N], float* partials,
                                                    unsigned* counters, int tile, int split, int splits,
                                                    volatile int* last, int bar_id) {
    constexpr int kVectors = 2 * N / 4;  // float4s a thread
    const int tid = threadIdx.x % 128;
    float4* tile_partials = reinterpret_cast<float4*>(partials) + (long long)tile * splits * kVectors * 128 + tid;
    float4* mine = tile_partials + (long long)split * kVectors * 128;
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
        __stcg(mine + i * 128, make_float4(top[4 * i], top[4 * i + 1], top[4 * i + 2], top[4 * i + 3]));
        __stcg(mine + (N / 4 + i) * 128,
               make_float4(bottom[4 * i], bottom[4 * i + 1], bottom[4 * i + 2], bottom[4 * i + 3]));
    }
    // Release: this split's partial is visible GPU-wide before its count is.
    __threadfence();
    asm volatile("bar.sync %0, 128;\n" ::"r"(bar_id) : "memory");
    if (tid == 0) *last = atomicAdd(counters + tile, 1u) == (unsigned)splits - 1;
    asm volatile("bar.sync %0, 128;\n" ::"r"(bar_id) : "memory");
    if (!*last) return false;
    // Acquire: the other splits' partials are visible (read around L1, which may be stale).
    __threadfence();
    if (tid == 0) counters[tile] = 0;
    for (int s = 0; s < splits; ++s) {
        const float4* partial = tile_partials + (long long)s * kVectors * 128;
        float4 v[kVectors];
#pragma unroll
        for (int i = 0; i < kVectors; ++i) v[i] = __ldcg(partial + i * 128);
#pragma unroll
        for (int i = 0; i < N / 4; ++i) {
            const float4 x = v[i], y = v[N / 4 + i];
            if (s == 0) {
                top[4 * i] = x.x, top[4 * i + 1] = x.y, top[4 * i + 2] = x.z, top[4 * i + 3] = x.w;
                bottom[4 * i] = y.x, bottom[4 * i + 1] = y.y, bottom[4 * i + 2] = y.z, bottom[4 * i + 3] = y.w;
            } else {
                top[4 * i] += x.x, top[4 * i + 1] += x.y, top[4 * i + 2] += x.z, top[4 * i + 3] += x.w;
                bottom[4 * i] += y.x, bottom[4 * i + 1] += y.y, bottom[4 * i + 2] += y.z, bottom[4 * i + 3] += y.w;
            }
        }
    }
    return true;
}

// A split whose partial another split's epilogue adds: what its epilogue would have done with
// the warpgroup's residual buffer, without reading it (the loader waits for those releases).
// f32: both halves, each released by every warp; 16-bit: the one use, released by the leader.
template <typename TC>
__device__ __forceinline__ void release_residual_unread(unsigned full_bar, unsigned empty_bar, int j) {
    if constexpr (is_f32<TC>::value) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            mbarrier_wait(full_bar, half);
            __syncwarp();
            if ((threadIdx.x & 31) == 0) mbarrier_arrive(empty_bar);
        }
    } else {
        mbarrier_wait(full_bar, (j >> 1) & 1);
        if (threadIdx.x % 128 == 0) mbarrier_arrive(empty_bar);
    }
}

// The ping-pong variant: the two consumer warpgroups take alternate tiles of the CTA's
// sequence, each a whole 128 x BN tile (two m64 wgmmas a k-step, BN accumulators a thread), so
// that one warpgroup's epilogue runs while the other's MMAs keep the tensor cores busy. In the
// cooperative program (tma_cooperative.cu) both warpgroups stage, activate and store at once
// and the tensor cores wait: at K = 768 (qkv, fc1) that costs a third of the main loop
// (measured: benchmarks/NOTES.md, 2026-11-22 "a ping-pong TMA tile").
// - 128 x 128 per warpgroup (128 accumulators a thread) is the largest that fits the entry
//   cap of 168 registers (288 or 384 threads). 128 wide, the producer is a whole warpgroup
//   that gives the consumers its registers with setmaxnreg (ptxas allocates what it grants to
//   the code after it): 232 a consumer thread (kProducerWarpgroup below).
// - The epilogue works on the accumulators where they are: bias, alpha and the activation per
//   register, a 16-bit pair per store into a 128 x BN tile of shared memory laid out as the
//   128-byte swizzled boxes of C's tensor map, then one thread stores it with TMA and the
//   warpgroup goes on to its next tile. (With store_block_staged's fp32 staging, one warp per
//   scheduler could not hide its latencies, and the tile was slower than the cooperative one.)
//   Hence C in the operands'
//   type with 16-byte aligned rows, or the f32 residual stream (below); the launcher sends the
//   rest to the cooperative tile.
// - The main loops take turns (`turn[w]`, one arrival by the other warpgroup once it has
//   issued its tile's last wgmma), as CUTLASS's ping-pong kernels order theirs: the tile that
//   started first finishes first, and a warpgroup never waits on a `full` barrier more than one
//   phase ahead of what the other has consumed (a parity wait cannot tell phase p from p + 2).
// - Stage s of step t is consumed by one warpgroup: `empty` counts its four warps, and with
//   CLUSTER 2 those of the other CTA too, whose producer writes half of A into the stage.
// - CLUSTER 2: the CTA is one of a cluster of two that walk pairs of adjacent n-tiles
//   together and share A's loads by TMA multicast (CtaTiles and load_stages in tma.cuh); the
//   barriers are initialised before a cluster barrier, and the producer's last waits keep the
//   CTA alive until the other's consumers have made their last arrivals on it.
// - RESIDUAL: C = act(alpha·A·B + bias) + R with R and C of type TC, f32 (the residual
//   stream, as proj and fc2 run it, usually in place) or the operands' type (a 16-bit
//   stream): `out_map` then describes R, which a second producer warp (thread 288) loads by
//   TMA into a shared buffer per warpgroup (see load_residual_parts). The f32 epilogue adds it
//   from there and writes C from registers (`c`); the 16-bit one adds it in place in the
//   output tile and stores C through `c_map`, as the plain variant does, whose `out_map` and
//   `c_map` are both C's.
// - SPLIT_K: `splits` > 1 walks that many copies of the tiles, each over `split_k_tiles`
//   k-tiles, summed through `partials` and `counters` (see split_k_partial_sum); 1 runs every
//   k-tile of each tile, as without it.
// - FP8: A and B are e4m3 codes, k-tiles of 128 of them (the same 128-byte rows, boxes and
//   stages as 16-bit k-tiles of 64), multiplied by k32 e4m3 wgmmas. The epilogue computes
//   fma(acc, a_scale[row] · b_scale[col], bias): the weights' column scales arrive in shared
//   memory beside the bias tile (stage_scale_chunk), the four activation scales of a thread's
//   rows from global memory at the epilogue; C is T, T plus a residual in place (RESIDUAL), or
//   e4m3 (TC = E4m3: one box of BN bytes a row, see e4m3_output_offset). See
//   matmul_block_tma_pingpong_fp8.
// - LAYERNORM: C = act(rstd · (acc - mean · column_sum) + bias), the layernorm of A's rows
//   folded into the product (see matmul_block_tma_pingpong_layernorm). The rows' statistics
//   are not gathered here: A's producer (ROW_STATS below) wrote partial statistics of every
//   64-column block of each row, and the epilogue combines a row's K / 64 partials
//   (combine_row_statistics, one row a thread, after the tile's last stage is released) and
//   fetches its fragment rows' mean and rstd by warp shuffles; the column sums arrive in
//   shared memory beside the bias tile as the FP8 column scales do. 16-bit A, B and C, no
//   residual, no split-K, single CTAs; K a multiple of 64. (Gathering the sums from the A
//   tiles under the MMAs took 1.4-1.5x the plain matmul's time on an H200: benchmarks/NOTES.md,
//   2026-11-28 "Layernorms folded into the matmul".)
// - ROW_STATS (16-bit stream only: RESIDUAL, TC == T, no FP8): once the warpgroup's output tile
//   (bias, activation and residual added, rounded to T) is in shared memory and its TMA store
//   issued, thread tid takes row tid of the tile and, for each 64-column block inside N, writes
//   float2(mean_b, m2_b) of the row's stored values (output_block_statistics) to
//   `row_stats[(col0 / 64 + b) · m + row]` for rows inside M; a named barrier then keeps the
//   tile (the residual buffer) until every thread has read it. It runs in the epilogue, under
//   the other warpgroup's main loop; with split-K only the last split's epilogue writes them.
//   N a multiple of 64 (a block clipped by the tensor map would be wrong).
template <typename T, typename TC, bool RESIDUAL, int BN, int STAGES, int GROUP_M, Act ACT, int CLUSTER,
          bool SPLIT_K, bool FP8 = false, bool LAYERNORM = false, bool ROW_STATS = false>
__device__ __forceinline__ void matmul_tma_pingpong(const TmaDescriptor& a_map, const TmaDescriptor& b_map,
                                                    const TmaDescriptor& out_map, const TmaDescriptor& c_map,
                                                    const T* bias, TC* c, long long c_row_stride, int m, int n, int k,
                                                    float alpha, int splits, int split_k_tiles, float* partials,
                                                    unsigned* counters, const Fp8Scales& scales = Fp8Scales{},
                                                    const LayernormArgs& layernorm = LayernormArgs{},
                                                    float2* row_stats = nullptr) {
    constexpr bool kResidual = RESIDUAL;
    // A k-tile row is 128 bytes (one swizzle row): 64 16-bit values or 128 e4m3 ones.
    constexpr int BM = 128, BK = FP8 ? 128 : 64, kRowBytes = 128;
    constexpr int kAccumulators = BN / 2;
    constexpr int kBytesA = BM * kRowBytes;
    constexpr int kBytesB = BN * kRowBytes;
    constexpr int kStageBytes = kBytesA + kBytesB;
    // 16-bit C: BN / 64 boxes of 128 rows x 128 bytes; half an f32 residual tile: BN / 64 too;
    // an e4m3 C: one box of 128 rows x BN bytes.
    constexpr int kOutputBytes = BM * BN * (is_e4m3<TC>::value ? 1 : 2);
    constexpr int kResidualBarriers = kResidual ? 4 : 0;
    // 128 wide: a producer warpgroup (384 threads) that gives the consumers its registers, 1.04-
    // 1.06x at batches 64 and 256; 64 wide (batch 1): a producer warp (288 threads; 320 with the
    // residual loader), the warpgroup measured 1-2% slower there. benchmarks/NOTES.md, 2026-11-29
    // "The ping-pong matmul's producer gives its registers"; MatmulTile::pingpong_producer_warpgroup.
    constexpr bool kProducerWarpgroup = BN == 128;
    static_assert(BN % 64 == 0 && BN <= 128, "two 64 x BN halves of accumulators must fit 168 registers");
    static_assert(is_same_type<T, TC>::value || (kResidual && is_f32<TC>::value) ||
                      (FP8 && !kResidual && is_e4m3<TC>::value),
                  "C is in the operands' type, the f32 stream or (FP8, no residual) e4m3");
    static_assert(!FP8 || !is_f32<TC>::value, "the FP8 program writes 16-bit or e4m3 C");
    static_assert(!LAYERNORM || (!kResidual && !FP8 && !SPLIT_K && CLUSTER == 1 && is_same_type<T, TC>::value),
                  "the layernorm entry takes 16-bit C, no residual, FP8, split-K or cluster");
    static_assert(!ROW_STATS || (kResidual && !FP8 && !LAYERNORM && is_same_type<T, TC>::value),
                  "row statistics are written by the 16-bit-stream residual entry only");

    extern __shared__ __align__(128) unsigned char shared_tiles[];
    // full[s], then empty[s], then turn[0], turn[1], then (f32 residual) residual_full[b] and
    // residual_empty[b].
    __shared__ __align__(8) unsigned long long barriers[2 * STAGES + 2 + kResidualBarriers];
    const unsigned smem = (shared_address(shared_tiles) + 1023) & ~1023u;
    const unsigned full_bar = shared_address(barriers);
    const unsigned empty_bar = full_bar + STAGES * 8;
    const unsigned turn_bar = empty_bar + STAGES * 8;
    const unsigned residual_full_bar = turn_bar + 16;
    const unsigned residual_empty_bar = residual_full_bar + 16;

    static_assert(!SPLIT_K || CLUSTER == 1, "split-K walks single CTAs");
    const int tiles_m = (m + BM - 1) / BM;
    const int tiles_n = (n + BN - 1) / BN;
    if constexpr (!SPLIT_K) splits = 1;
    // k-tiles a tile (a split's with split-K).
    const int k_tiles = splits > 1 ? split_k_tiles : (k + BK - 1) / BK;
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(full_bar + s * 8, 1);
            // Each consumer warp of every CTA whose producer writes into the stage.
            mbarrier_init(empty_bar + s * 8, 4 * CLUSTER);
        }
        mbarrier_init(turn_bar, 1);
        mbarrier_init(turn_bar + 8, 1);
        if constexpr (kResidual) {
            for (int b = 0; b < 2; ++b) {
                mbarrier_init(residual_full_bar + b * 8, 1);
                // f32: each consumer warp once it has read its part; 16-bit: the store's issuer.
                mbarrier_init(residual_empty_bar + b * 8, is_f32<TC>::value ? 4 : 1);
            }
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    // A cluster's CTAs load into each other's stages and arrive on each other's barriers: all
    // must be initialised first.
    if constexpr (CLUSTER > 1) {
        cluster_sync();
    } else {
        __syncthreads();
    }

    if (warpgroup == 2) {
        // 128 wide, the producer warpgroup keeps 40 registers a thread and leaves the rest to
        // the consumers (the wrapper's __launch_bounds__(384, 1) makes ptxas honour it).
        if constexpr (kProducerWarpgroup) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        // Producer (warp 8): the CTA's tiles in order, every k-tile of each.
        if (threadIdx.x == 256 && k_tiles > 0)
            load_stages<BN, STAGES, GROUP_M, CLUSTER, BK>(a_map, b_map, smem, full_bar, empty_bar, tiles_m,
                                                          tiles_n, k_tiles, splits);
        // Residual loader (warp 9).
        if constexpr (kResidual) {
            if (threadIdx.x == 288)
                load_residual_parts<TC, BN, GROUP_M, CLUSTER>(out_map, smem + STAGES * kStageBytes, residual_full_bar,
                                                     residual_empty_bar, tiles_m, tiles_n, splits);
        }
        return;
    }

    // The consumers take the producer warpgroup's registers: 2 x 128 x 232 + 128 x 40 fit the
    // SM's 65,536.
    if constexpr (kProducerWarpgroup) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    // Consumer warpgroup w takes the CTA's tiles j = w, w + 2, w + 4, ... Its loop bounds depend
    // on w: read through a shuffle, w is warp-uniform to ptxas, which otherwise treats the loop
    // as divergent and serialises every wgmma in it (C7518, "WG.DP in divergent path").
    const int w = __shfl_sync(0xffffffffu, warpgroup, 0);
    const unsigned output_tile = smem + STAGES * kStageBytes + w * kOutputBytes;
    // This warpgroup's tile of bias (BN values), after both output tiles.
    const unsigned bias_tile = smem + STAGES * kStageBytes + 2 * kOutputBytes + w * BN * 2;
    const T* bias_values = reinterpret_cast<const T*>(shared_tiles + (bias_tile - shared_address(shared_tiles)));
    // FP8: this warpgroup's tile of weight scales (BN f32), after both bias tiles, and the
    // reciprocal of an e4m3 C's scale (an IEEE division, as the twin's). LAYERNORM: its tile
    // of column sums there.
    const unsigned scale_tile = smem + STAGES * kStageBytes + 2 * kOutputBytes + 2 * BN * 2 + w * BN * 4;
    const float* column_scales =
        reinterpret_cast<const float*>(shared_tiles + (scale_tile - shared_address(shared_tiles)));
    float inverse_out_scale = 1.0f;
    if constexpr (FP8 && is_e4m3<TC>::value) inverse_out_scale = 1.0f / *scales.out;
    const int tid = threadIdx.x % 128;
    const int lane = threadIdx.x & 31;
    const bool leader = tid == 0;
    // This thread's accumulator rows (and rows + 8) in each 64-row half, and its first column.
    const int frag_row = (tid / 32) * 16 + (lane >> 2);
    const int frag_col = (lane & 3) * 2;
    // LAYERNORM: the row of the tile whose statistics this thread combines.
    const int statistics_row_index = statistics_row(tid);
    // Rows 0-63 and 64-127 of the tile.
    float acc_top[kAccumulators], acc_bottom[kAccumulators];
#pragma unroll
    for (int i = 0; i < kAccumulators; ++i) acc_top[i] = acc_bottom[i] = 0.0f;
    const CtaTiles<GROUP_M, CLUSTER> walk{tiles_m, tiles_n, splits};
    // Each warpgroup's split-K flag (see split_k_partial_sum).
    __shared__ int split_is_last[2];
    TileCoords t;
    for (int j = w; walk.at(j, t); j += 2) {
        // The tile's bias, fetched while its main loop runs (the previous epilogue's last barrier
        // has seen every read of the buffer); waited for at the epilogue.
        if (bias != nullptr && tid < BN / 8) stage_bias_chunk(bias_tile + tid * 16, bias, t.tile_n * BN + tid * 8, n);
        if constexpr (FP8) {
            if (tid < BN / 4) stage_scale_chunk(scale_tile + tid * 16, scales.b, t.tile_n * BN + tid * 4, n);
        }
        if constexpr (LAYERNORM) {
            if (tid < BN / 4)
                stage_scale_chunk(scale_tile + tid * 16, layernorm.column_sums, t.tile_n * BN + tid * 4, n);
        }
        cp_async_commit();
        // Tile j = 2i + w waits for completion i - 1 + w of turn[w] (the other's tile j - 1).
        if (j > 0) mbarrier_wait(turn_bar + w * 8, ((j >> 1) + w + 1) & 1);
        int step = j * k_tiles;
        for (int kt = 0; kt < k_tiles; ++kt, ++step) {
            const int s = step % STAGES;
            mbarrier_wait(full_bar + s * 8, (step / STAGES) & 1);
            const unsigned stage_a = smem + s * kStageBytes;
            const unsigned stage_b = stage_a + kBytesA;
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < kRowBytes / 32; ++ks) {
                // 32 bytes of K a step: k16 of a 16-bit operand, k32 of an e4m3 one.
                const unsigned long long b_desc = wgmma_descriptor(stage_b + ks * 32);
                if constexpr (FP8) {
                    wgmma_m64k32_e4m3<BN>(acc_top, wgmma_descriptor(stage_a + ks * 32), b_desc, kt > 0 || ks > 0);
                    wgmma_m64k32_e4m3<BN>(acc_bottom, wgmma_descriptor(stage_a + 64 * kRowBytes + ks * 32), b_desc,
                                          kt > 0 || ks > 0);
                } else {
                    wgmma_m64k16<T, BN>(acc_top, wgmma_descriptor(stage_a + ks * 32), b_desc, kt > 0 || ks > 0);
                    wgmma_m64k16<T, BN>(acc_bottom, wgmma_descriptor(stage_a + 64 * kRowBytes + ks * 32), b_desc,
                                        kt > 0 || ks > 0);
                }
            }
            wgmma_commit();
            // The previous step's group has retired once at most one is pending: its stage is free.
            wgmma_wait<1>();
            if (kt > 0 && lane == 0) release_stage<CLUSTER>(empty_bar + ((step - 1) % STAGES) * 8);
            // The other warpgroup's next tile may queue its MMAs behind this tile's last ones.
            if (kt == k_tiles - 1 && leader) mbarrier_arrive(turn_bar + (1 - w) * 8);
        }
        // Unconditional: ptxas cannot tell that the k-loop ran iff k_tiles > 0, and a path on which
        // the epilogue might read accumulators of a pending wgmma makes it serialise them all.
        wgmma_wait<0>();
        if (k_tiles > 0 && lane == 0) release_stage<CLUSTER>(empty_bar + ((step - 1) % STAGES) * 8);
        if (k_tiles == 0 && leader) mbarrier_arrive(turn_bar + (1 - w) * 8);
        // LAYERNORM: this thread's row's (-mean, rstd) from the producer's partials (rows past M:
        // zeros, their outputs are clipped). After the last stage's release: waiting for these
        // loads before it held the stage from the producer, whose in-order refills then starved
        // the other warpgroup's main loop (qkv at batch 256 ran 1.3x the plain tile's time;
        // benchmarks/NOTES.md, 2026-11-28 "Layernorms folded into the matmul").
        float2 own_statistics = make_float2(0.0f, 0.0f);
        if constexpr (LAYERNORM) {
            const int row = t.tile_m * BM + statistics_row_index;
            if (row < m) own_statistics = combine_row_statistics(layernorm.row_stats + row, m, k, layernorm.eps);
        }
        fence_accumulators(acc_top);
        fence_accumulators(acc_bottom);

        if constexpr (SPLIT_K) {
            if (splits > 1 && !split_k_partial_sum(acc_top, acc_bottom, partials, counters,
                                                    t.tile_m * tiles_n + t.tile_n, t.batch, splits,
                                                    split_is_last + w, 1 + w)) {
                if constexpr (kResidual) release_residual_unread<TC>(residual_full_bar + w * 8,
                                                                     residual_empty_bar + w * 8, j);
                cp_async_wait<0>();
                continue;
            }
        }

        if constexpr (kResidual && is_f32<TC>::value) {
            const int col0 = t.tile_n * BN;
            const float* residual =
                reinterpret_cast<const float*>(shared_tiles + (output_tile - shared_address(shared_tiles)));
            const int row0 = t.tile_m * BM;
            cp_async_wait<0>();
            asm volatile("bar.sync %0, 128;\n" ::"r"(1 + w) : "memory");
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                // Uses 2q and 2q + 1 of this warpgroup's buffer (see load_residual_parts).
                mbarrier_wait(residual_full_bar + w * 8, half);
#pragma unroll
                for (int jh = 0; jh < BN / 16; ++jh) {
                    const int jb = half * (BN / 16) + jh;
                    const int col = col0 + jb * 8 + frag_col;
                    float2 bias_pair = make_float2(0.0f, 0.0f);
                    if (bias != nullptr) bias_pair = load_pair_as_float(bias_values + jb * 8 + frag_col);
                    const float bias0 = bias_pair.x, bias1 = bias_pair.y;
                    // Box jh / 4 (32 columns), 16-byte chunk (jh % 4) * 2 + frag_col / 4 of each
                    // 128-byte row, XOR-swizzled by the row; the pair's offset in its chunk.
                    const float* box = residual + (jh / 4) * (BM * 32) + frag_col % 4;
                    const int swizzle = (((jh % 4) * 2 + frag_col / 4) ^ (frag_row % 8)) * 4;
                    add_residual_pair<ACT>(c, c_row_stride, box + frag_row * 32 + swizzle, row0 + frag_row, col, m,
                                           n, acc_top[4 * jb], acc_top[4 * jb + 1], alpha, bias0, bias1);
                    add_residual_pair<ACT>(c, c_row_stride, box + (frag_row + 8) * 32 + swizzle,
                                           row0 + frag_row + 8, col, m, n, acc_top[4 * jb + 2], acc_top[4 * jb + 3],
                                           alpha, bias0, bias1);
                    add_residual_pair<ACT>(c, c_row_stride, box + (frag_row + 64) * 32 + swizzle,
                                           row0 + frag_row + 64, col, m, n, acc_bottom[4 * jb],
                                           acc_bottom[4 * jb + 1], alpha, bias0, bias1);
                    add_residual_pair<ACT>(c, c_row_stride, box + (frag_row + 72) * 32 + swizzle,
                                           row0 + frag_row + 72, col, m, n, acc_bottom[4 * jb + 2],
                                           acc_bottom[4 * jb + 3], alpha, bias0, bias1);
                }
                // This warp has read its part of the half.
                __syncwarp();
                if (lane == 0) mbarrier_arrive(residual_empty_bar + w * 8);
            }
            // Every thread has read the bias tile before the next one is fetched into it.
            asm volatile("bar.sync %0, 128;\n" ::"r"(1 + w) : "memory");
            continue;
        }
        // FP8: the activations' scales of this thread's four rows (0 past M), read from global
        // memory while the waits below run.
        float row_scales[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if constexpr (FP8) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int row = t.tile_m * BM + frag_row + (r & 1) * 8 + (r >> 1) * 64;
                if (row < m) row_scales[r] = scales.a[(long long)row * scales.a_stride];
            }
        }
        // LAYERNORM: the mean and rstd of the thread's four fragment rows, from the lanes of
        // this warp that combined them.
        float row_neg_mean[4] = {0.0f, 0.0f, 0.0f, 0.0f}, row_rstd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if constexpr (LAYERNORM) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                row_neg_mean[r] = __shfl_sync(0xffffffffu, own_statistics.x, row_statistics_lane(lane, r));
                row_rstd[r] = __shfl_sync(0xffffffffu, own_statistics.y, row_statistics_lane(lane, r));
            }
        }
        // The previous tile's TMA store has read the output tile (issued a main loop ago), and
        // the bias tile has landed. A 16-bit stream (kResidual here): R arrives by TMA in the
        // layout of C's output tile, so each thread adds its pairs in place there and the tile
        // goes out by TMA store as without residual: whole lines, and no 64-bit address
        // arithmetic in registers (storing C pairs from registers, 4 bytes a thread, spilled
        // and ran proj slower than the f32 stream). The buffer is released
        // for the next tile's R once the store has read it.
        if (leader) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
        cp_async_wait<0>();
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + w) : "memory");
        // Use q of this warpgroup's residual buffer (see load_residual_parts).
        if constexpr (kResidual) mbarrier_wait(residual_full_bar + w * 8, (j >> 1) & 1);
        const int col0 = t.tile_n * BN;
        if constexpr (FP8) {
#pragma unroll
            for (int jb = 0; jb < BN / 8; ++jb) {
                float2 bias_pair = make_float2(0.0f, 0.0f);
                if (bias != nullptr) bias_pair = load_pair_as_float(bias_values + jb * 8 + frag_col);
                const float2 column_scale = *reinterpret_cast<const float2*>(column_scales + jb * 8 + frag_col);
                // Rows frag_row and frag_row + 8 of the top half, then of the bottom half.
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int row = frag_row + (r & 1) * 8 + (r >> 1) * 64;
                    const float* acc = r < 2 ? acc_top : acc_bottom;
                    unsigned address;
                    if constexpr (is_e4m3<TC>::value) {
                        address = output_tile + e4m3_output_offset<BN>(row, jb, frag_col);
                    } else {
                        address = output_tile + (jb / 8) * (BM * 128) + frag_col * 2 + row * 128 +
                                  ((jb % 8) ^ (row % 8)) * 16;
                    }
                    store_scaled_pair<T, TC, ACT, kResidual>(
                        address, acc[4 * jb + (r & 1) * 2], acc[4 * jb + (r & 1) * 2 + 1],
                        row_scales[r] * column_scale.x, row_scales[r] * column_scale.y, bias_pair.x, bias_pair.y,
                        inverse_out_scale);
                }
            }
        } else if constexpr (LAYERNORM) {
#pragma unroll
            for (int jb = 0; jb < BN / 8; ++jb) {
                float2 bias_pair = make_float2(0.0f, 0.0f);
                if (bias != nullptr) bias_pair = load_pair_as_float(bias_values + jb * 8 + frag_col);
                const float2 column_sum = *reinterpret_cast<const float2*>(column_scales + jb * 8 + frag_col);
                const unsigned box = output_tile + (jb / 8) * (BM * 128) + frag_col * 2;
                const int swizzle = ((jb % 8) ^ (frag_row % 8)) * 16;  // (row + 8) % 8 == row % 8
                // Rows frag_row and frag_row + 8 of the top half, then of the bottom half.
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int row = frag_row + (r & 1) * 8 + (r >> 1) * 64;
                    const float* acc = r < 2 ? acc_top : acc_bottom;
                    store_normalised_pair<T, ACT>(box + row * 128 + swizzle, acc[4 * jb + (r & 1) * 2],
                                                  acc[4 * jb + (r & 1) * 2 + 1], row_neg_mean[r], row_rstd[r],
                                                  column_sum, bias_pair);
                }
            }
        } else {
#pragma unroll
            for (int jb = 0; jb < BN / 8; ++jb) {
                // Columns jb * 8 + frag_col and the one after it, for rows frag_row (+ 8) of each half.
                float2 bias_pair = make_float2(0.0f, 0.0f);
                if (bias != nullptr) bias_pair = load_pair_as_float(bias_values + jb * 8 + frag_col);
                const float bias0 = bias_pair.x, bias1 = bias_pair.y;
                // Box jb / 8, 16-byte chunk jb % 8 of each 128-byte row, XOR-swizzled by the row.
                const unsigned box = output_tile + (jb / 8) * (BM * 128) + frag_col * 2;
                // Rows frag_row and frag_row + 8 of the top half, then of the bottom half.
                const int swizzle = ((jb % 8) ^ (frag_row % 8)) * 16;  // (row + 8) % 8 == row % 8
                store_output_pair<T, ACT, kResidual>(box + frag_row * 128 + swizzle, acc_top[4 * jb],
                                                     acc_top[4 * jb + 1], alpha, bias0, bias1);
                store_output_pair<T, ACT, kResidual>(box + (frag_row + 8) * 128 + swizzle, acc_top[4 * jb + 2],
                                                     acc_top[4 * jb + 3], alpha, bias0, bias1);
                store_output_pair<T, ACT, kResidual>(box + (frag_row + 64) * 128 + swizzle, acc_bottom[4 * jb],
                                                     acc_bottom[4 * jb + 1], alpha, bias0, bias1);
                store_output_pair<T, ACT, kResidual>(box + (frag_row + 72) * 128 + swizzle, acc_bottom[4 * jb + 2],
                                                     acc_bottom[4 * jb + 3], alpha, bias0, bias1);
            }
        }
        // Makes the generic-proxy writes visible to the TMA unit, then one thread stores.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + w) : "memory");
        if (leader) {
            if constexpr (is_e4m3<TC>::value) {
                tma_store_2d(&c_map, output_tile, col0, t.tile_m * BM);
            } else {
#pragma unroll
                for (int box = 0; box < BN / 64; ++box)
                    tma_store_2d(&c_map, output_tile + box * (BM * 128), col0 + box * 64, t.tile_m * BM);
            }
            asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
        }
        // ROW_STATS: row tid's statistics of each 64-column block inside N, read from the tile
        // while the TMA store reads it too, then a barrier: every read is done before the
        // leader releases the buffer to the residual loader (the next tile's R lands there).
        if constexpr (ROW_STATS) {
            const int row = t.tile_m * BM + tid;
#pragma unroll 1
            for (int box = 0; box < BN / 64; ++box) {
                if (col0 + box * 64 < n) {
                    const float2 stats = output_block_statistics<T>(output_tile + box * (BM * 128), tid);
                    if (row < m) row_stats[(long long)(col0 / 64 + box) * m + row] = stats;
                }
            }
            asm volatile("bar.sync %0, 128;\n" ::"r"(1 + w) : "memory");
        }
        if (leader) {
            if constexpr (kResidual) {
                asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
                mbarrier_arrive(residual_empty_bar + w * 8);
            }
        }
    }
    // C is written before the grid counts as done.
    if (!is_f32<TC>::value && leader) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

}  // namespace vitrt_matmul

// The entry point of the ping-pong Hopper instantiations (sm_90a only): A, B and C as TMA
// tensor maps (C: 128-byte swizzled boxes of 64 x 128, in the operands' type), one matrix, no
// residual. Template arguments: T, BLOCK_N (64 or 128), STAGES, GROUP_M, activation, CLUSTER (1,
// or 2: launched in clusters of two CTAs that share A's boxes, A's tensor map in boxes of 64
// rows; see CtaTiles in tma.cuh), SPLIT_K (the narrow tile's: `splits`, `split_k_tiles`,
// `partials` and `counters` as matmul_tma_pingpong says; ignored without it). Two consumer
// warpgroups, then the producer warpgroup (BLOCK_N 128: 384 threads) or warp (64: 288).
template <typename T, int BN, int STAGES, int GROUP_M, Act ACT, int CLUSTER, bool SPLIT_K>
__device__ __forceinline__ void matmul_block_tma_pingpong(const TmaDescriptor& a_map, const TmaDescriptor& b_map,
                                                          const TmaDescriptor& c_map, const T* bias, int m, int n,
                                                          int k, float alpha, int splits, int split_k_tiles,
                                                          float* partials, unsigned* counters) {
    using namespace vitrt_matmul;
    static_assert(!is_f32<T>::value, "TMA instantiations are f16 or bf16");
#if VITRT_HAS_WGMMA
    matmul_tma_pingpong<T, T, false, BN, STAGES, GROUP_M, ACT, CLUSTER, SPLIT_K>(
        a_map, b_map, c_map, c_map, bias, static_cast<T*>(nullptr), 0, m, n, k, alpha, splits, split_k_tiles,
        partials, counters);
#else
    __trap();
#endif
}

// The ping-pong entry for the f32 residual stream: C = act(alpha·A·B + bias) + R with R and C
// f32 (C may be R), R as a tensor map (128-byte swizzled boxes of 32 x 128), C as a pointer to
// its first element and a row stride with 16-byte aligned rows. Template arguments: T,
// BLOCK_N, STAGES, GROUP_M, activation, CLUSTER, SPLIT_K. Two consumer warpgroups, the stage
// producer warp, the residual loader warp: 320 threads, or 384 at BLOCK_N 128 (the producer
// warpgroup's first two warps).
template <typename T, int BN, int STAGES, int GROUP_M, Act ACT, int CLUSTER, bool SPLIT_K>
__device__ __forceinline__ void matmul_block_tma_pingpong_residual(
    const TmaDescriptor& a_map, const TmaDescriptor& b_map, const TmaDescriptor& r_map, const T* bias, float* c,
    long long c_row_stride, int m, int n, int k, float alpha, int splits, int split_k_tiles, float* partials,
    unsigned* counters) {
    using namespace vitrt_matmul;
    static_assert(!is_f32<T>::value, "TMA instantiations are f16 or bf16");
#if VITRT_HAS_WGMMA
    matmul_tma_pingpong<T, float, true, BN, STAGES, GROUP_M, ACT, CLUSTER, SPLIT_K>(
        a_map, b_map, r_map, r_map, bias, c, c_row_stride, m, n, k, alpha, splits, split_k_tiles, partials,
        counters);
#else
    __trap();
#endif
}

// The ping-pong entry for a 16-bit stream: C = act(alpha·A·B + bias) + R with R and C in the
// operands' type (C may be R), both as tensor maps (128-byte swizzled boxes of 64 x 128).
// Template arguments: T, BLOCK_N, STAGES, GROUP_M, activation, CLUSTER, SPLIT_K. Threads as
// above.
template <typename T, int BN, int STAGES, int GROUP_M, Act ACT, int CLUSTER, bool SPLIT_K>
__device__ __forceinline__ void matmul_block_tma_pingpong_stream16(
    const TmaDescriptor& a_map, const TmaDescriptor& b_map, const TmaDescriptor& r_map, const TmaDescriptor& c_map,
    const T* bias, int m, int n, int k, float alpha, int splits, int split_k_tiles, float* partials,
    unsigned* counters) {
    using namespace vitrt_matmul;
    static_assert(!is_f32<T>::value, "TMA instantiations are f16 or bf16");
#if VITRT_HAS_WGMMA
    matmul_tma_pingpong<T, T, true, BN, STAGES, GROUP_M, ACT, CLUSTER, SPLIT_K>(
        a_map, b_map, r_map, c_map, bias, static_cast<T*>(nullptr), 0, m, n, k, alpha, splits, split_k_tiles,
        partials, counters);
#else
    __trap();
#endif
}

// The 16-bit-stream entry that also writes the per-row partial statistics a following
// layernorm-folded matmul combines (matmul_block_tma_pingpong_layernorm): C as
// matmul_block_tma_pingpong_stream16 writes it, bit for bit, and for every row r < M and every
// 64-column block b of C, row_stats[b · M + r] = float2(mean_b, m2_b) (f32 pairs, 8-byte aligned) of C's stored values in
// that block (ROW_STATS in matmul_tma_pingpong). N a multiple of 64. Template arguments: T,
// BLOCK_N, STAGES, GROUP_M, activation, CLUSTER, SPLIT_K. Threads as above.
template <typename T, int BN, int STAGES, int GROUP_M, Act ACT, int CLUSTER, bool SPLIT_K>
__device__ __forceinline__ void matmul_block_tma_pingpong_stream16_stats(
    const TmaDescriptor& a_map, const TmaDescriptor& b_map, const TmaDescriptor& r_map, const TmaDescriptor& c_map,
    const T* bias, float* row_stats, int m, int n, int k, float alpha, int splits, int split_k_tiles,
    float* partials, unsigned* counters) {
    using namespace vitrt_matmul;
    static_assert(!is_f32<T>::value, "TMA instantiations are f16 or bf16");
#if VITRT_HAS_WGMMA
    matmul_tma_pingpong<T, T, true, BN, STAGES, GROUP_M, ACT, CLUSTER, SPLIT_K, false, false, true>(
        a_map, b_map, r_map, c_map, bias, static_cast<T*>(nullptr), 0, m, n, k, alpha, splits, split_k_tiles,
        partials, counters, Fp8Scales{}, LayernormArgs{}, reinterpret_cast<float2*>(row_stats));
#else
    __trap();
#endif
}

// The FP8 entry of the ping-pong program (sm_90a): C = act(acc · (a_scale[m] · b_scale[n]) +
// bias) for e4m3 A [M, K] and B [N, K] (both K-major, as the FP8 wgmma must read them) through
// tensor maps of 8-bit elements in 128-byte swizzled boxes of 128 x rows, so a stage holds the
// same bytes as the 16-bit program's (k-tiles of 128), and the main loop is that program's with
// k32 e4m3 wgmmas in place of k16 ones. C through a tensor map: in T (f16 or bf16, boxes of 64
// x 128) or, TC = E4m3, as e4m3 codes of v / out_scale (one box of BN bytes x 128, swizzled
// over 128 or 64 bytes); the bias is in T. `a_scale_stride` 1 reads one activation scale a row,
// 0 one for the tensor. Template arguments: T, TC (T or vitrt_matmul::E4m3), BLOCK_N (64 or
// 128), STAGES, GROUP_M, activation, SPLIT_K (as matmul_block_tma_pingpong's). Threads as
// matmul_block_tma_pingpong's.
// Accumulation: the tensor core's FP8 sums keep fewer mantissa bits than fp32 (about 13 on the
// H100), over the whole of K; promoting them into fp32 registers every few k-tiles, as
// CUTLASS's non-"fast-accumulation" FP8 kernels do, would need a second set of 128 accumulators
// a thread that the 168-register cap leaves no room for.
template <typename T, typename TC, int BN, int STAGES, int GROUP_M, Act ACT, bool SPLIT_K>
__device__ __forceinline__ void matmul_block_tma_pingpong_fp8(const TmaDescriptor& a_map, const TmaDescriptor& b_map,
                                                              const TmaDescriptor& c_map, const T* bias,
                                                              const float* a_scale, int a_scale_stride,
                                                              const float* b_scale, const float* out_scale, int m,
                                                              int n, int k, int splits, int split_k_tiles,
                                                              float* partials, unsigned* counters) {
    using namespace vitrt_matmul;
    static_assert(!is_f32<T>::value, "the FP8 program's bias and 16-bit C are f16 or bf16");
#if VITRT_HAS_WGMMA
    Fp8Scales scales;
    scales.a = a_scale;
    scales.a_stride = a_scale_stride;
    scales.b = b_scale;
    scales.out = out_scale;
    matmul_tma_pingpong<T, TC, false, BN, STAGES, GROUP_M, ACT, 1, SPLIT_K, true>(
        a_map, b_map, c_map, c_map, bias, static_cast<TC*>(nullptr), 0, m, n, k, 1.0f, splits, split_k_tiles,
        partials, counters, scales);
#else
    __trap();
#endif
}

// The FP8 entry with a residual in T (a 16-bit stream): C = act(acc · scales + bias) + R, R and
// C (which may be R) through tensor maps of T, as matmul_block_tma_pingpong_stream16's. Template
// arguments: T, BLOCK_N, STAGES, GROUP_M, activation, SPLIT_K. Two consumer warpgroups, the
// stage producer warp, the residual loader warp (320 threads; 384 at BLOCK_N 128).
template <typename T, int BN, int STAGES, int GROUP_M, Act ACT, bool SPLIT_K>
__device__ __forceinline__ void matmul_block_tma_pingpong_fp8_residual(
    const TmaDescriptor& a_map, const TmaDescriptor& b_map, const TmaDescriptor& r_map, const TmaDescriptor& c_map,
    const T* bias, const float* a_scale, int a_scale_stride, const float* b_scale, int m, int n, int k, int splits,
    int split_k_tiles, float* partials, unsigned* counters) {
    using namespace vitrt_matmul;
    static_assert(!is_f32<T>::value, "the FP8 program's bias and 16-bit C are f16 or bf16");
#if VITRT_HAS_WGMMA
    Fp8Scales scales;
    scales.a = a_scale;
    scales.a_stride = a_scale_stride;
    scales.b = b_scale;
    matmul_tma_pingpong<T, T, true, BN, STAGES, GROUP_M, ACT, 1, SPLIT_K, true>(
        a_map, b_map, r_map, c_map, bias, static_cast<T*>(nullptr), 0, m, n, k, 1.0f, splits, split_k_tiles,
        partials, counters, scales);
#else
    __trap();
#endif
}

// The layernorm entry of the ping-pong program (sm_90a): C = act(LayerNorm(A) · Wᵀ + b) with
// the layernorm's gamma and beta folded into the operands, for A [M, K] the raw rows and
// B = W' [N, K] (K-major), both T (f16 or bf16) through the 16-bit program's tensor maps:
//
//     C[r, n] = act(fma(rstd_r, fma(-mean_r, column_sums[n], acc[r, n]), bias[n]))
//
// acc = A · Bᵀ (fp32 accumulation), column_sums[n] = Σ_k B[n, k] (f32), bias in T. The rows'
// statistics come from `row_stats` ([K / 64][M] float2 as f32 pairs, 8-byte aligned: mean_b and m2_b of each 64-column
// block b of each row, as A's producer matmul_block_tma_pingpong_stream16_stats wrote them):
// mean_r = (Σ_b mean_b) / B, m2 = Σ_b m2_b + 64 · Σ_b (mean_b - mean_r)², rstd_r =
// rsqrt(m2 / K + eps) (combine_row_statistics). K a multiple of 64. C through a tensor map
// (boxes of 64 x 128) in T. Template arguments: T, BLOCK_N (64 or 128), STAGES, GROUP_M,
// activation. Threads as matmul_block_tma_pingpong's.
template <typename T, int BN, int STAGES, int GROUP_M, Act ACT>
__device__ __forceinline__ void matmul_block_tma_pingpong_layernorm(const TmaDescriptor& a_map,
                                                                    const TmaDescriptor& b_map,
                                                                    const TmaDescriptor& c_map, const T* bias,
                                                                    const float* column_sums,
                                                                    const float* row_stats, int m, int n, int k,
                                                                    float eps) {
    using namespace vitrt_matmul;
    static_assert(!is_f32<T>::value, "the layernorm entry's operands are f16 or bf16");
#if VITRT_HAS_WGMMA
    LayernormArgs layernorm;
    layernorm.column_sums = column_sums;
    layernorm.row_stats = reinterpret_cast<const float2*>(row_stats);
    layernorm.eps = eps;
    matmul_tma_pingpong<T, T, false, BN, STAGES, GROUP_M, ACT, 1, false, false, true>(
        a_map, b_map, c_map, c_map, bias, static_cast<T*>(nullptr), 0, m, n, k, 1.0f, 1, 0, nullptr, nullptr,
        Fp8Scales{}, layernorm);
#else
    __trap();
#endif
}

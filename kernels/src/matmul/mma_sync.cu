// The mma.sync program (f16 / bf16, sm_80 and later): C = epilogue(A · B) for one (batch,
// head) matrix per group of programs. One CTA owns a BLOCK_M x BLOCK_N tile of C; program ids
// are remapped in groups of GROUP_M tile rows (Triton's matmul tutorial), so CTAs that run at
// the same time read the same few rows of A and sweep the columns of B, and both stay in L2.
// Tensor cores through `mma.sync.m16n8k16` with fp32 accumulators, fed by `ldmatrix` from
// XOR-swizzled shared memory, which a STAGES-deep `cp.async` pipeline fills from global memory.
// The epilogue (epilogue.cuh) runs in fp32 on the accumulators staged in shared memory and casts
// once at the store.
//
// Every operand is a strided view (offset, row, batch and head strides in elements; columns
// contiguous), so attention reads Q, K and V heads in place. Edges are masked for any M, N, K.
// 16-byte copies need 16-byte aligned rows; the launcher proves that from the actual pointers
// and strides and otherwise picks the instantiation with VEC16 = false, which loads element
// by element with the same masks.
// The tile shapes and what they measured: selection.rs.

#include "copy.cuh"
#include "params.cuh"

namespace vitrt_matmul {

// Split-K (SplitK in params.cuh), for problems whose tiles leave most SMs idle (batch 1:
// M = 197 makes 48 tiles of 64 x 64 for N = 768, and fc2's K = 3072 then streams its weights
// through a third of the GPU). Each split writes its fp32 partial tile to `partials`
// ([program][split][BM x BN]) and counts itself in `counters[program]`; the CTA that counts
// last adds the partials in split order (so the sum does not depend on which CTA finishes
// last) and runs the epilogue. It also resets the counter, which is how the next launch finds
// it zero.

// Run `run` (four columns) of the staged tile, whose rows are kPitch floats apart. A partial
// tile in the scratch is the same runs packed: run r is its r-th float4.
template <int BN, int kPitch>
__device__ __forceinline__ float4* staged_run(float* staged, int run) {
    return reinterpret_cast<float4*>(staged + (run / (BN / 4)) * kPitch + (run % (BN / 4)) * 4);
}

// Called by every thread once the accumulators are staged (after a barrier): publishes this
// split's partial and returns whether this CTA is the tile's last, which runs the epilogue.
template <int BM, int BN, int kPitch, int kThreads>
__device__ __forceinline__ bool split_k_is_last(float* staged, const SplitK& split_k, int program, int split) {
    constexpr int kRuns = BM * BN / 4;
    float4* mine = reinterpret_cast<float4*>(split_k.partials) + ((long long)program * split_k.splits + split) * kRuns;
    for (int run = threadIdx.x; run < kRuns; run += kThreads) __stcg(mine + run, *staged_run<BN, kPitch>(staged, run));
    // Release: this CTA's partial is visible GPU-wide before its count is.
    __threadfence();
    __syncthreads();
    __shared__ int last;
    if (threadIdx.x == 0) last = atomicAdd(split_k.counters + program, 1u) == (unsigned)split_k.splits - 1;
    __syncthreads();
    if (!last) return false;
    // Acquire: the other splits' partials are visible (and read around L1, which may be stale).
    __threadfence();
    if (threadIdx.x == 0) split_k.counters[program] = 0;
    return true;
}

// The last CTA's sum of every split's partial, in split order, staged in place of its own.
// Each thread sums its runs side by side, two splits at a time, so that many loads are in
// flight together: the reduction is a chain of L2 latencies, one per step.
template <int BM, int BN, int kPitch, int kThreads>
__device__ __forceinline__ void sum_split_k_partials(float* staged, const SplitK& split_k, int program) {
    constexpr int kRuns = BM * BN / 4;
    constexpr int kRunsPerThread = kRuns / kThreads;
    static_assert(kRuns % kThreads == 0, "the tile's runs split evenly over the threads");
    const float4* first = reinterpret_cast<const float4*>(split_k.partials) +
                          (long long)program * split_k.splits * kRuns + threadIdx.x;
    auto add = [](float4& sum, const float4& x) { sum.x += x.x, sum.y += x.y, sum.z += x.z, sum.w += x.w; };
    float4 sum[kRunsPerThread];
#pragma unroll
    for (int r = 0; r < kRunsPerThread; ++r) sum[r] = __ldcg(first + r * kThreads);
    int s = 1;
    for (; s + 1 < split_k.splits; s += 2) {
        float4 x[kRunsPerThread], y[kRunsPerThread];
#pragma unroll
        for (int r = 0; r < kRunsPerThread; ++r) {
            x[r] = __ldcg(first + (long long)s * kRuns + r * kThreads);
            y[r] = __ldcg(first + (long long)(s + 1) * kRuns + r * kThreads);
        }
#pragma unroll
        for (int r = 0; r < kRunsPerThread; ++r) add(sum[r], x[r]), add(sum[r], y[r]);
    }
    if (s < split_k.splits) {
#pragma unroll
        for (int r = 0; r < kRunsPerThread; ++r) add(sum[r], __ldcg(first + (long long)s * kRuns + r * kThreads));
    }
#pragma unroll
    for (int r = 0; r < kRunsPerThread; ++r) *staged_run<BN, kPitch>(staged, threadIdx.x + r * kThreads) = sum[r];
}

template <typename T, typename TR, typename TC, int BM, int BN, int BK, int GROUP_M, int STAGES, int WARPS_M,
          int WARPS_N, Act ACT, bool B_KN, bool VEC16>
__device__ __forceinline__ void matmul_tensor_core(const T* __restrict__ a, const T* __restrict__ b,
                                                   const T* bias, const TR* residual, TC* c, int heads, int m, int n,
                                                   int k_total, View av, View bv, View cv, View rv, float alpha,
                                                   int vector_epilogue, SplitK split_k) {
    constexpr int kThreads = WARPS_M * WARPS_N * 32;
    constexpr int kWarpM = BM / WARPS_M;  // rows of C per warp
    constexpr int kWarpN = BN / WARPS_N;  // columns of C per warp
    constexpr int kFragsM = kWarpM / 16;  // m16 fragments per warp
    constexpr int kFragsN = kWarpN / 8;   // n8 fragments per warp
    static_assert(BK % 16 == 0 && BK / 8 <= 8, "BK is a multiple of 16, at most 64");
    static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "warp tiles are multiples of 16x16");

    // Shared tiles: A is [BM][BK]; B is [BN][BK] (NK) or [BK][BN] (KN), k or n contiguous.
    constexpr int kChunksA = BK / 8;
    constexpr int kChunksB = B_KN ? BN / 8 : BK / 8;
    constexpr int kBytesA = BM * BK * 2;
    constexpr int kBytesB = BN * BK * 2;
    constexpr int kStageBytes = kBytesA + kBytesB;
    constexpr int kLoadsA = BM * kChunksA / kThreads;
    constexpr int kLoadsB = BN * BK / 8 / kThreads;
    static_assert(BM * kChunksA % kThreads == 0 && BN * BK / 8 % kThreads == 0, "tiles split evenly over threads");

    extern __shared__ __align__(128) unsigned char shared_tiles[];
    const unsigned smem = shared_address(shared_tiles);

    const int tiles_m = (m + BM - 1) / BM;
    const int tiles_n = (n + BN - 1) / BN;
    // Split-K: the grid is `splits` copies of the tiles, split-major; split s multiplies
    // k-columns [s · split_k.k, (s + 1) · split_k.k) of A and B.
    const int programs = gridDim.x / split_k.splits;
    const int split = blockIdx.x / programs;
    const int program = blockIdx.x - split * programs;
    const TileCoords tile = tile_of_program<GROUP_M>(heads, tiles_m, tiles_n, program);
    const int m0 = tile.tile_m * BM;
    const int n0 = tile.tile_n * BN;
    const int k_begin = split * split_k.k;
    const int k = split_k.splits > 1 ? min(k_total - k_begin, split_k.k) : k_total;
    const T* a_matrix = a + av.matrix_base(tile.batch, tile.head) + k_begin;
    const T* b_matrix = b + bv.matrix_base(tile.batch, tile.head) + (B_KN ? k_begin * bv.row_stride : k_begin);

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int warp_m = warp / WARPS_N;
    const int warp_n = warp % WARPS_N;

    // The copy plan: each thread copies the same chunks of every stage, only k moves. `*_src`
    // point at the chunk for k = 0; `*_bytes` is what a k-tile lying wholly inside K reads of
    // the chunk: 16, or 0 for rows past M or N (whose pointers stay at row 0: cp.async reads
    // nothing then, but wants an address), or less where N ends inside a KN chunk.
    const T* a_src[kLoadsA];
    int a_dst[kLoadsA], a_bytes[kLoadsA], a_k[kLoadsA];
#pragma unroll
    for (int i = 0; i < kLoadsA; ++i) {
        const int id = tid + i * kThreads;
        const int row = id / kChunksA, chunk = id % kChunksA;
        const bool row_inside = m0 + row < m;
        a_src[i] = a_matrix + (row_inside ? (long long)(m0 + row) * av.row_stride : 0) + chunk * 8;
        a_bytes[i] = row_inside ? 16 : 0;
        a_k[i] = chunk * 8;
        a_dst[i] = swizzled_chunk<kChunksA>(row, chunk) * 16;
    }
    const T* b_src[kLoadsB];
    int b_dst[kLoadsB], b_bytes[kLoadsB], b_k[kLoadsB];
#pragma unroll
    for (int i = 0; i < kLoadsB; ++i) {
        const int id = tid + i * kThreads;
        const int row = id / kChunksB, chunk = id % kChunksB;
        if constexpr (B_KN) {  // row = k, chunk along n
            const int col = n0 + chunk * 8;
            b_src[i] = b_matrix + (long long)row * bv.row_stride + (col < n ? col : 0);
            b_bytes[i] = col < n ? min(8, n - col) * 2 : 0;
            b_k[i] = row;
        } else {  // row = n, chunk along k
            const bool row_inside = n0 + row < n;
            b_src[i] = b_matrix + (row_inside ? (long long)(n0 + row) * bv.row_stride : 0) + chunk * 8;
            b_bytes[i] = row_inside ? 16 : 0;
            b_k[i] = chunk * 8;
        }
        b_dst[i] = swizzled_chunk<kChunksB>(row, chunk) * 16;
    }

    const int k_tiles = (k + BK - 1) / BK;

    // Copies the k-tile starting at k0 into `stage`. A tile wholly inside K (all but maybe the
    // last) takes the short path: per chunk one address, one copy; it runs once per k-tile
    // between the tensor-core instructions, so every instruction here costs.
    auto load_stage = [&](int stage, int k0) {
        const unsigned stage_a = smem + stage * kStageBytes;
        const unsigned stage_b = stage_a + kBytesA;
        const long long b_k0 = B_KN ? (long long)k0 * bv.row_stride : k0;
        if (k0 + BK <= k) {
#pragma unroll
            for (int i = 0; i < kLoadsA; ++i) copy_chunk<T, VEC16>(stage_a + a_dst[i], a_src[i] + k0, a_bytes[i]);
#pragma unroll
            for (int i = 0; i < kLoadsB; ++i) copy_chunk<T, VEC16>(stage_b + b_dst[i], b_src[i] + b_k0, b_bytes[i]);
        } else {
#pragma unroll
            for (int i = 0; i < kLoadsA; ++i) {
                const int bytes = min(a_bytes[i], max(0, k - k0 - a_k[i]) * 2);
                copy_chunk<T, VEC16>(stage_a + a_dst[i], a_src[i] + k0, bytes);
            }
#pragma unroll
            for (int i = 0; i < kLoadsB; ++i) {
                const int bytes = B_KN ? (k0 + b_k[i] < k ? b_bytes[i] : 0)
                                       : min(b_bytes[i], max(0, k - k0 - b_k[i]) * 2);
                copy_chunk<T, VEC16>(stage_b + b_dst[i], b_src[i] + b_k0, bytes);
            }
        }
    };

    float acc[kFragsM][kFragsN][4];
#pragma unroll
    for (int i = 0; i < kFragsM; ++i)
#pragma unroll
        for (int j = 0; j < kFragsN; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    // Pipeline: STAGES - 1 tiles in flight before the first use; each iteration waits for the
    // oldest, then refills the stage that the previous iteration finished reading (every warp
    // is past the barrier, so done with it).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) load_stage(s, s * BK);
        cp_async_commit();
    }

    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();

        const unsigned stage_a = smem + (kt % STAGES) * kStageBytes;
        const unsigned stage_b = stage_a + kBytesA;
#pragma unroll
        for (int ks = 0; ks < BK / 16; ++ks) {
            unsigned a_frag[kFragsM][4];
            unsigned b_frag[kFragsN][2];
#pragma unroll
            for (int i = 0; i < kFragsM; ++i) {
                // Matrices: rows 0-7 / 8-15 of the fragment x k-chunks 0 / 1, in a0..a3 order.
                const int row = warp_m * kWarpM + i * 16 + (lane & 15);
                const int chunk = ks * 2 + (lane >> 4);
                ldmatrix_x4(a_frag[i], stage_a + swizzled_chunk<kChunksA>(row, chunk) * 16);
            }
#pragma unroll
            for (int j = 0; j < kFragsN; j += 2) {
                unsigned r[4];
                if constexpr (B_KN) {
                    // Rows are k; the transposing load turns [k][n] 8x8 blocks into col-major B.
                    const int row = ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                    const int chunk = (warp_n * kWarpN + j * 8) / 8 + (lane >> 4);
                    ldmatrix_x4_trans(r, stage_b + swizzled_chunk<kChunksB>(row, chunk) * 16);
                } else {
                    const int row = warp_n * kWarpN + j * 8 + (lane & 7) + ((lane >> 4) << 3);
                    const int chunk = ks * 2 + ((lane >> 3) & 1);
                    ldmatrix_x4(r, stage_b + swizzled_chunk<kChunksB>(row, chunk) * 16);
                }
                b_frag[j][0] = r[0];
                b_frag[j][1] = r[1];
                b_frag[j + 1][0] = r[2];
                b_frag[j + 1][1] = r[3];
            }
            if (ks == 0) {
                // Refill the stage the previous iteration finished with. Issued after the first
                // fragments' ldmatrix, so the tensor cores start as soon as those arrive.
                const int next = kt + STAGES - 1;
                if (next < k_tiles) load_stage(next % STAGES, next * BK);
                cp_async_commit();
            }
#pragma unroll
            for (int i = 0; i < kFragsM; ++i)
#pragma unroll
                for (int j = 0; j < kFragsN; ++j) mma_16816<T>(acc[i][j], a_frag[i], b_frag[j][0], b_frag[j][1]);
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done reading the stages: their memory now stages C

    // Shared memory from here on: the fp32 tile, then the residual tile (see the launcher's
    // shared_bytes). The row pitch of BN + 8 floats puts the four rows a half-warp writes in
    // different banks.
    constexpr int kPitch = BN + 8;
    float* staged = reinterpret_cast<float*>(shared_tiles);
    TR* residual_tile = reinterpret_cast<TR*>(shared_tiles + BM * kPitch * sizeof(float));
    const long long r_base = rv.matrix_base(tile.batch, tile.head);
    // An f32 residual tile next to a large staged tile would take the shared memory of the
    // SM's second CTA: such residuals are read straight from global memory instead.
    // (With split-K only the tile's last CTA fetches it, below.)
    constexpr bool kStageResidual = sizeof(TR) == sizeof(T) || BM * BN <= 64 * 64;
    const bool stage_residual = kStageResidual && residual != nullptr && vector_epilogue;
    if (stage_residual && split_k.splits == 1)
        stage_residual_runs<TR, BM, BN, kThreads>(residual_tile, residual + r_base, rv.row_stride, m, n, m0, n0);
    cp_async_commit();

    // Thread (g, q) of a warp holds rows g and g + 8, columns 2q and 2q + 1 of every m16n8
    // fragment.
    const int group_row = lane >> 2;
    const int pair_col = (lane & 3) * 2;
#pragma unroll
    for (int i = 0; i < kFragsM; ++i) {
#pragma unroll
        for (int j = 0; j < kFragsN; ++j) {
            const int row = warp_m * kWarpM + i * 16 + group_row;
            const int col = warp_n * kWarpN + j * 8 + pair_col;
            *reinterpret_cast<float2*>(staged + row * kPitch + col) = make_float2(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<float2*>(staged + (row + 8) * kPitch + col) = make_float2(acc[i][j][2], acc[i][j][3]);
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    if (split_k.splits > 1) {
        if (!split_k_is_last<BM, BN, kPitch, kThreads>(staged, split_k, program, split)) return;
        // The residual's copies run while the partials are summed. (Read run by run instead,
        // an in-place residual costs a memory latency per run: C's store may alias the next
        // run's residual, so no load can move above it.)
        if (stage_residual)
            stage_residual_runs<TR, BM, BN, kThreads>(residual_tile, residual + r_base, rv.row_stride, m, n, m0, n0);
        cp_async_commit();
        sum_split_k_partials<BM, BN, kPitch, kThreads>(staged, split_k, program);
        cp_async_wait<0>();
        __syncthreads();
    }
    store_staged_tile<T, TR, TC, BM, BN, kPitch, kThreads, ACT>(
        staged, stage_residual ? residual_tile : nullptr, bias, residual, c, m, n, m0, n0,
        cv.matrix_base(tile.batch, tile.head), r_base, cv.row_stride, rv.row_stride, alpha, vector_epilogue);
}

}  // namespace vitrt_matmul

// The entry point every generated wrapper calls, with the launch's parameters (params.cuh).
// Template arguments, in order: the storage type of A, B and the bias; the residual's; C's
// (f32 for a residual stream kept in f32 while the operands are f16/bf16: the epilogue
// converts once, at the load and the store); BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES,
// WARPS_M, WARPS_N, activation, B layout is KN, 16-byte loads. f32 instantiations are the FMA
// program (fma.cu), whose entry point has the same name and parameters.
//
// Bias and residual are run-time choices (null when absent), not template flags: the epilogue
// is a loop that runs once per tile, where a uniform branch costs nothing measurable, while
// two more flags would quadruple the instantiations NVRTC has to build.
template <typename T, typename TR, typename TC, int BM, int BN, int BK, int GROUP_M, int STAGES, int WARPS_M,
          int WARPS_N, Act ACT, bool B_KN, bool VEC16>
__device__ __forceinline__ void matmul_block(const vitrt_matmul::MatmulParams& p) {
    using namespace vitrt_matmul;
    static_assert(!is_f32<T>::value, "f32 instantiations are the FMA program (fma.cu)");
    const Operands<T, TR, TC> o(p);
    matmul_tensor_core<T, TR, TC, BM, BN, BK, GROUP_M, STAGES, WARPS_M, WARPS_N, ACT, B_KN, VEC16>(
        o.a, o.b, o.bias, o.residual, o.c, p.heads, p.m, p.n, p.k, p.a_view, p.b_view, p.c_view, p.r_view, p.alpha,
        p.vector_epilogue, p.split);
}

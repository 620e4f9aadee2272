// Block-program matmul: C = epilogue(A · B) for one (batch, head) matrix per group of programs.
//
// One CTA owns a BLOCK_M x BLOCK_N tile of C. Program ids are remapped in groups of GROUP_M
// tile rows (Triton's matmul tutorial): CTAs that run at the same time read the same few rows of
// A and sweep the columns of B, so both stay in L2. The epilogue runs in fp32 on the
// accumulators and casts once at the store:
//
//     C[m, n] = act(alpha * acc[m, n] + bias[n]) + residual[m, n]
//
// Two bodies share that frame:
// - f16 / bf16 storage: tensor cores through `mma.sync.m16n8k16` with fp32 accumulators, fed by
//   `ldmatrix` from XOR-swizzled shared memory, which a STAGES-deep `cp.async` pipeline fills
//   from global memory.
// - f32 storage: CUDA-core FMA on 4x4..8x8 register tiles per thread, with a register-staged
//   double buffer. No TF32: f32 results must match PyTorch's fp32 (TF32 off) to 1e-4.
//
// Every operand is a strided view (offset, row, batch and head strides in elements; columns
// contiguous), so attention reads Q, K and V heads in place. Edges are masked for any M, N, K.
// 16-byte copies need 16-byte aligned rows; the launcher proves that from the actual pointers
// and strides and otherwise picks the instantiation with VEC16 = false, which loads element
// by element with the same masks.
//
// The epilogue goes through shared memory: the accumulators are staged as an fp32 tile, and
// threads then walk it in runs of four columns, so bias, residual and C are read and written
// coalesced (and vectorised where aligned), and the activation is inlined a few times rather
// than once per accumulator register.
//
// What the measurements said (f16, H100, ViT-B/16 batch 64, TFLOP/s for qkv / proj / fc1 /
// fc2 without epilogue; fc1 with bias+GELU; proj with bias+residual):
// - first version: 270 / 115 / 285 / 291; 177; 129. ncu: tensor pipe 47% busy, two warps per
//   scheduler, a warp issuing every 4.4 cycles, ~100 instructions of copy bookkeeping per
//   k-tile between the HMMAs.
// - k-tiles wholly inside K take a short copy path (one address and one cp.async per chunk;
//   only the last k-tile computes masks), the first fragments' ldmatrix is issued before the
//   next stage's copies, residual runs are fetched into shared memory with cp.async before the
//   accumulators are staged (one memory latency per tile instead of one per run), and GELU
//   multiplies by 1/sqrt(2) instead of dividing by sqrt(2) (an IEEE division per element cost
//   more than the erff): 309 / 249 / 317 / 333; 261; 214. Tensor pipe 52% busy.
// - What is left is structural: 64x64 warp tiles need ~246 registers, so an SM holds 8 warps
//   and each tile's pipeline fill and epilogue are hidden only by the other CTA on the SM.
//   The next steps are a persistent kernel that overlaps one tile's epilogue with the next
//   tile's loads, and wgmma/TMA on sm_90a.

#include "common.cuh"

// The 128 opaque bytes of a CUtensorMap, passed by value as a __grid_constant__ parameter.
struct alignas(64) TmaDescriptor {
    unsigned long long opaque[16];
};

// The activations kernels::Activation names (its `cuda_name` spells these).
enum class Act { None, Gelu, GeluTanh, QuickGelu, Relu, Silu };

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

// GELU(x) = x·Φ(x) for outputs stored in 16 bits, with erf to within 3e-7 absolute
// (Abramowitz and Stegun 7.1.26, 1.5e-7, plus the approximate reciprocal and exponential):
// 14 instructions and two MUFU operations a value where erff takes about 30. The rounding of
// a 16-bit output (2^-11 and 2^-8 of the value) dwarfs the error. In the batch-64 fc1 of
// ViT-B/16 the GELU epilogue is what the tensor cores wait for (ncu: ~24 instructions a value
// with the earlier __expf/__fdividef form, issued by one warp a scheduler), so every
// instruction counts:
// - with z = x/√2 folded into the constants, erf(z) = sign(x)·(1 - q), q = poly(t)·e^(-x²/2),
//   t = 1/(1 + p·|z|), so GELU = x/2·(1 + erf) is max(x, 0) - |x|·q/2: the sign costs no
//   compare or select (|x| is a free operand modifier), and the 1/2 is folded into poly;
// - the MUFU operations without denormal handling (exp2_approx_ftz, rcp_approx_ftz);
// - |x| is capped at 2^15 in the product so that x = +inf gives inf, not inf·0; no 16-bit
//   output tells 2^15 from more, and q is 0 there. NaN still propagates through q.
__device__ __forceinline__ float gelu_for_half_outputs(float x) {
    const float t = rcp_approx_ftz(fmaf(0.3275911f * 0.70710678118654752f, fabsf(x), 1.0f));
    const float half_poly =
        t * fmaf(t,
                 fmaf(t, fmaf(t, fmaf(t, 0.5f * 1.061405429f, 0.5f * -1.453152027f), 0.5f * 1.421413741f),
                      0.5f * -0.284496736f),
                 0.5f * 0.254829592f);
    // e^(-x²/2) = 2^(-x² · log2(e) / 2)
    const float half_q = half_poly * exp2_approx_ftz(x * x * -0.72134752044448170f);
    return fmaf(-fminf(fabsf(x), 32768.0f), half_q, fmaxf(x, 0.0f));
}

// The activations as kernels::Activation::apply writes them, in the same operation order
// (erff for the exact GELU). HALF_OUTPUT: the result is stored in f16 or bf16, which allows
// the cheaper GELU above and approximate MUFU operations.
template <Act ACT, bool HALF_OUTPUT = false>
__device__ __forceinline__ float activate(float x) {
    if constexpr (ACT == Act::None) {
        return x;
    } else if constexpr (ACT == Act::Gelu) {
        // x · (1/√2) rather than x / √2: as PyTorch computes it, and an IEEE division per
        // element would cost more than the erff (the twin's division differs by < 1 ulp).
        if constexpr (HALF_OUTPUT) return gelu_for_half_outputs(x);
        const float scaled = x * 0.707106781186547524f;
        return 0.5f * x * (1.0f + erff(scaled));
    } else if constexpr (ACT == Act::GeluTanh) {
        const float inner = 0.7978846f * (x + 0.044715f * x * x * x);
        return 0.5f * x * (1.0f + tanhf(inner));
    } else if constexpr (ACT == Act::QuickGelu || ACT == Act::Silu) {
        const float e = ACT == Act::Silu ? -x : -1.702f * x;
        // For 16-bit outputs the approximate exponential (of e·log2(e)) and reciprocal (a few
        // ulp; a huge denominator gives 0, the limit): fewer instructions and registers, and
        // no spills in the 128 x 256 TMA tile's epilogue.
        return HALF_OUTPUT ? x * rcp_approx_ftz(1.0f + exp2_approx_ftz(e * 1.4426950408889634f))
                           : x / (1.0f + expf(e));
    } else {
        static_assert(ACT == Act::Relu, "unhandled activation");
        return fmaxf(x, 0.0f);
    }
}

template <typename T>
struct is_f32 {
    static constexpr bool value = false;
};
template <>
struct is_f32<float> {
    static constexpr bool value = true;
};

template <typename A, typename B>
struct is_same_type {
    static constexpr bool value = false;
};
template <typename A>
struct is_same_type<A, A> {
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

// ---------------------------------------------------------------------------------------------
// Tensor-core path (f16, bf16)

__device__ __forceinline__ void store_shared_16(unsigned dst, uint4 v) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

// Shared-memory tiles are rows of CHUNKS 16-byte chunks. ldmatrix reads one 16-byte chunk from
// each of 8 consecutive rows per phase; XOR-ing the chunk index with bits of the row spreads
// those 8 chunks over all 32 banks (and keeps the 16-byte cp.async stores conflict-free too).
// Rows shorter than 128 bytes share a 128-byte line, so the XOR uses the row's line index.
template <int CHUNKS>
__device__ __forceinline__ int swizzled_chunk(int row, int chunk) {
    constexpr int kXorRange = CHUNKS < 8 ? CHUNKS : 8;
    constexpr int kRowsPerLine = CHUNKS < 8 ? 8 / CHUNKS : 1;
    return row * CHUNKS + (chunk ^ ((row / kRowsPerLine) % kXorRange));
}

// Eight elements starting at `src`, of which the first `count` (0..8) are real; the rest are 0.
template <typename T>
__device__ __forceinline__ uint4 load_8_masked(const T* src, int count) {
    unsigned short bits[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        bits[e] = e < count ? __ldg(reinterpret_cast<const unsigned short*>(src) + e) : (unsigned short)0;
    }
    uint4 v;
    v.x = bits[0] | (unsigned(bits[1]) << 16);
    v.y = bits[2] | (unsigned(bits[3]) << 16);
    v.z = bits[4] | (unsigned(bits[5]) << 16);
    v.w = bits[6] | (unsigned(bits[7]) << 16);
    return v;
}

// Copies one 16-byte chunk (8 elements) of global memory to shared memory, reading only its
// first `bytes` and zero-filling the rest (with 0, nothing is read).
template <typename T, bool VEC16>
__device__ __forceinline__ void copy_chunk(unsigned dst, const T* src, int bytes) {
    if constexpr (VEC16) {
        cp_async_16(dst, src, bytes);
    } else {
        store_shared_16(dst, load_8_masked(src, bytes / 2));
    }
}

// Split-K, for problems whose tiles leave most SMs idle (batch 1: M = 197 makes 48 tiles of
// 64 x 64 for N = 768, and fc2's K = 3072 then streams its weights through a third of the
// GPU). Each split writes its fp32 partial tile to `partials` ([program][split][BM x BN]) and
// counts itself in `counters[program]`; the CTA that counts last adds the partials in split
// order (so the sum does not depend on which CTA finishes last) and runs the epilogue. It also
// resets the counter, which is how the next launch finds it zero.
struct SplitK {
    int splits;  // 1: no split, and the other fields are unused
    int k;       // k-columns per split, a multiple of BLOCK_K
    float* partials;
    unsigned* counters;
};

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

// ---------------------------------------------------------------------------------------------
// Hopper path (f16, bf16 on sm_90a): warpgroup MMA (`wgmma.mma_async`) straight from shared memory
//
// mma.sync tops out near 300 TFLOP/s on these shapes (see the measurements above): every
// fragment goes through registers by ldmatrix, and a warp's 64x64 tile needs ~246 registers.
// wgmma lets a warpgroup (4 warps, 128 threads) multiply a 64xBN block by reading both operands
// from shared memory through matrix descriptors, asynchronously, with only the accumulators in
// registers. The copy side stays the cp.async pipeline of the mma.sync path, so edges are
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

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define VITRT_HAS_WGMMA 1
#else
#define VITRT_HAS_WGMMA 0
#endif

// Register lists for one m64nNk16 wgmma: N/2 fp32 accumulators per thread.
#define VITRT_WGMMA_D64 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define VITRT_WGMMA_OUT64(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define VITRT_WGMMA_D96 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63," \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79," \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}"
#define VITRT_WGMMA_OUT96(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define VITRT_WGMMA_D128 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63," \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79," \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95," \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111," \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define VITRT_WGMMA_OUT128(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// A shared-memory matrix descriptor for a K-major, 128-byte-swizzled tile starting at `addr`
// (1024-byte aligned, or offset from such a base by k-steps of 32 bytes).
__device__ __forceinline__ unsigned long long wgmma_descriptor(unsigned addr) {
    const unsigned long long start = (addr & 0x3FFFF) >> 4;
    const unsigned long long leading = 16 >> 4;    // unused for swizzled K-major layouts
    const unsigned long long stride = 1024 >> 4;  // from one 8-row block to the next
    const unsigned long long swizzle_128b = 1;
    return start | (leading << 16) | (stride << 32) | (swizzle_128b << 62);
}

__device__ __forceinline__ void wgmma_fence() {
#if VITRT_HAS_WGMMA
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if VITRT_HAS_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
#if VITRT_HAS_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
#endif
}
// Makes this thread's generic-proxy writes to shared memory (the cp.async copies) visible to
// the async proxy that wgmma reads through.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if VITRT_HAS_WGMMA
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// Keeps the compiler from moving reads or writes of the accumulators across a wgmma that is
// still running (the registers are the wgmma's until wgmma.wait_group retires it).
template <int N>
__device__ __forceinline__ void fence_accumulators(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d (64 x BN: this thread's BN / 2 accumulators) = A (64 x 16) · B (BN x 16)ᵀ + (accumulate ? d : 0),
// both operands K-major in shared memory.
template <typename T, int BN>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[BN / 2], unsigned long long a_desc,
                                             unsigned long long b_desc, int accumulate = 1) {
#if VITRT_HAS_WGMMA
    if constexpr (false) {
    } else if constexpr (BN == 128 && is_same_type<T, __half>::value) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " VITRT_WGMMA_D64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
            : VITRT_WGMMA_OUT64(d)
            : "l"(a_desc), "l"(b_desc), "r"(accumulate));
    } else if constexpr (BN == 128 && is_same_type<T, __nv_bfloat16>::value) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " VITRT_WGMMA_D64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
            : VITRT_WGMMA_OUT64(d)
            : "l"(a_desc), "l"(b_desc), "r"(accumulate));
    } else if constexpr (BN == 192 && is_same_type<T, __half>::value) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 " VITRT_WGMMA_D96 ", %96, %97, p, 1, 1, 0, 0;\n}\n"
            : VITRT_WGMMA_OUT96(d)
            : "l"(a_desc), "l"(b_desc), "r"(accumulate));
    } else if constexpr (BN == 192 && is_same_type<T, __nv_bfloat16>::value) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 " VITRT_WGMMA_D96 ", %96, %97, p, 1, 1, 0, 0;\n}\n"
            : VITRT_WGMMA_OUT96(d)
            : "l"(a_desc), "l"(b_desc), "r"(accumulate));
    } else if constexpr (BN == 256 && is_same_type<T, __half>::value) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " VITRT_WGMMA_D128 ", %128, %129, p, 1, 1, 0, 0;\n}\n"
            : VITRT_WGMMA_OUT128(d)
            : "l"(a_desc), "l"(b_desc), "r"(accumulate));
    } else if constexpr (BN == 256 && is_same_type<T, __nv_bfloat16>::value) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " VITRT_WGMMA_D128 ", %128, %129, p, 1, 1, 0, 0;\n}\n"
            : VITRT_WGMMA_OUT128(d)
            : "l"(a_desc), "l"(b_desc), "r"(accumulate));
    } else {
        static_assert(BN == 128 || BN == 192 || BN == 256, "wgmma tiles are 128, 192 or 256 columns wide");
    }
#endif
}

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

// ---------------------------------------------------------------------------------------------
// Hopper path, warp-specialised (sm_90a): TMA copies on mbarriers, persistent tiles
//
// The wgmma body above fills its pipeline with cp.async issued by every thread, one tile per
// CTA: every CTA of a wave fills its stages at the same moment and writes its tile at the same
// moment, which at K = 768 cost as much as the main loop (see benchmarks/NOTES.md). Here a
// producer warp issues one TMA copy per operand and stage (the tensor map does the addressing,
// the 128-byte swizzle and the zero fill past M, N and K), two consumer warpgroups multiply,
// and the grid is persistent: while the consumers run one tile's epilogue (staged through
// shared memory of their own, see store_block_staged), the producer is already loading the
// next tile's stages. Stages are handed over with two mbarriers each:
// `full` (the producer's expect-tx arrival plus the copies' bytes) and `empty` (one arrival
// per consumer warp once its wgmma has read the stage). For single matrices (batch and heads
// 1) with 16-byte aligned rows, as every linear layer is; the launcher sends the rest to the
// bodies above.

__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned count) {
#if VITRT_HAS_WGMMA
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned bar, unsigned bytes) {
#if VITRT_HAS_WGMMA
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
#if VITRT_HAS_WGMMA
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}
// Waits until the barrier's phase with this parity has completed.
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
#if VITRT_HAS_WGMMA
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "wait_again:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait_again;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
#endif
}
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

// The producer of the warp-specialised bodies, one thread (K > 0): every k-tile of the CTA's tiles in
// order, A's 128 x 64 box and B's BN x 64 box per stage, each stage once its consumers have
// released it.
template <int BN, int STAGES, int GROUP_M>
__device__ __forceinline__ void load_stages(const TmaDescriptor& a_map, const TmaDescriptor& b_map, unsigned smem,
                                            unsigned full_bar, unsigned empty_bar, int tiles_m, int tiles_n,
                                            int k_tiles) {
    constexpr int BM = 128, BK = 64;
    constexpr int kBytesA = BM * BK * 2;
    constexpr int kStageBytes = kBytesA + BN * BK * 2;
    const int tiles = tiles_m * tiles_n;
    int step = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const TileCoords t = tile_of_program<GROUP_M>(1, tiles_m, tiles_n, tile);
        for (int kt = 0; kt < k_tiles; ++kt, ++step) {
            const int s = step % STAGES;
            // Stage s was last used by step - STAGES: its consumers' release is completion
            // number step / STAGES - 1 of empty[s].
            if (step >= STAGES) mbarrier_wait(empty_bar + s * 8, ((step / STAGES) + 1) & 1);
            const unsigned stage_a = smem + s * kStageBytes;
            mbarrier_arrive_expect_tx(full_bar + s * 8, kStageBytes);
            tma_load_2d(stage_a, &a_map, kt * BK, t.tile_m * BM, full_bar + s * 8);
            tma_load_2d(stage_a + kBytesA, &b_map, kt * BK, t.tile_n * BN, full_bar + s * 8);
        }
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
// same arithmetic, compiled to code 10% slower on the batch-64 qkv and fc1 (H200, session 5).
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
// reads its tile's bias from there: loaded from global memory per column pair, as before, its
// 16 dependent L2 round trips a tile made the epilogue outlast the other warpgroup's main loop
// (batch-64 fc1 with bias+GELU 0.146 ms against 0.100 without epilogue, H200).
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
// stages only, which starved the main loop (batch-64 fc2 0.146 ms against 0.107 on the
// cooperative tile, H200); the epilogue has time to wait for the second half, since the other
// warpgroup's main loop is what it must hide behind. Its own thread, not the stage producer's:
// waiting there for an epilogue would stall the next tile's main-loop copies behind it.
// Buffer w's use u (tile 2q + w of the CTA, part h: u = kUses·q + h) completes phase u of
// full[w] and is released by phase u of empty[w].
template <typename TR, int BN, int GROUP_M>
__device__ __forceinline__ void load_residual_parts(const TmaDescriptor& r_map, unsigned buffers,
                                                    unsigned full_bar, unsigned empty_bar, int tiles_m,
                                                    int tiles_n) {
    constexpr int BM = 128;
    // f32: two uses a tile of BN / 2 columns (boxes of 32); 16-bit: one of BN (boxes of 64).
    constexpr int kUses = (int)sizeof(TR) / 2;
    constexpr int kUseBytes = BM * BN * (int)sizeof(TR) / kUses;
    constexpr int kBoxColumns = 128 / (int)sizeof(TR);
    const int tiles = tiles_m * tiles_n;
    int i = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++i) {
        const TileCoords t = tile_of_program<GROUP_M>(1, tiles_m, tiles_n, tile);
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

// The ping-pong variant: the two consumer warpgroups take alternate tiles of the CTA's
// sequence, each a whole 128 x BN tile (two m64 wgmmas a k-step, BN accumulators a thread), so
// that one warpgroup's epilogue runs while the other's MMAs keep the tensor cores busy. In the
// cooperative body above both warpgroups stage, activate and store at once and the tensor cores
// wait: at K = 768 (qkv, fc1) that costs a third of the main loop (0.78 of cuBLAS against 0.90
// at K = 3072 with the same tile, H200, session 5).
// - 128 x 128 per warpgroup (128 accumulators a thread) is the largest that fits: ptxas
//   compiles every warp to the entry cap whatever setmaxnreg grants later, and the cap is 168
//   whether the producer is a warpgroup (384 threads) or, as here, one warp (288 threads: some
//   SM sub-partition still holds three warps).
// - The epilogue works on the accumulators where they are: bias, alpha and the activation per
//   register, a 16-bit pair per store into a 128 x BN tile of shared memory laid out as the
//   128-byte swizzled boxes of C's tensor map, then one thread stores it with TMA and the
//   warpgroup goes on to its next tile. (With store_block_staged's fp32 staging, one warp per
//   scheduler could not hide its latencies: the batch-64 fc1 with GELU ran 0.173 ms against
//   0.112 ms without epilogue, slower than the cooperative tile.) Hence C in the operands'
//   type with 16-byte aligned rows, or the f32 residual stream (below); the launcher sends the
//   rest to the cooperative tile.
// - The main loops take turns (`turn[w]`, one arrival by the other warpgroup once it has
//   issued its tile's last wgmma), as CUTLASS's ping-pong kernels order theirs: the tile that
//   started first finishes first, and a warpgroup never waits on a `full` barrier more than one
//   phase ahead of what the other has consumed (a parity wait cannot tell phase p from p + 2).
// - Stage s of step t is consumed by one warpgroup: `empty` counts its four warps.
// - RESIDUAL: C = act(alpha·A·B + bias) + R with R and C of type TC, f32 (the residual
//   stream, as proj and fc2 run it, usually in place) or the operands' type (a 16-bit
//   stream): `out_map` then describes R, which a second producer warp (320 threads) loads by
//   TMA into a shared buffer per warpgroup (see load_residual_parts). The f32 epilogue adds it
//   from there and writes C from registers (`c`); the 16-bit one adds it in place in the
//   output tile and stores C through `c_map`, as the plain variant does, whose `out_map` and
//   `c_map` are both C's.
template <typename T, typename TC, bool RESIDUAL, int BN, int STAGES, int GROUP_M, Act ACT>
__device__ __forceinline__ void matmul_tma_pingpong(const TmaDescriptor& a_map, const TmaDescriptor& b_map,
                                                    const TmaDescriptor& out_map, const TmaDescriptor& c_map,
                                                    const T* bias, TC* c, long long c_row_stride, int m, int n, int k,
                                                    float alpha) {
    constexpr bool kResidual = RESIDUAL;
    constexpr int BM = 128, BK = 64;
    constexpr int kAccumulators = BN / 2;
    constexpr int kBytesA = BM * BK * 2;
    constexpr int kBytesB = BN * BK * 2;
    constexpr int kStageBytes = kBytesA + kBytesB;
    // 16-bit C: BN / 64 boxes of 128 rows x 128 bytes; half an f32 residual tile: BN / 64 too.
    constexpr int kOutputBytes = BM * BN * 2;
    constexpr int kResidualBarriers = kResidual ? 4 : 0;
    static_assert(BN % 64 == 0 && BN <= 128, "two 64 x BN halves of accumulators must fit 168 registers");
    static_assert(is_same_type<T, TC>::value || (kResidual && is_f32<TC>::value),
                  "C is in the operands' type or the f32 stream");

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

    const int tiles_m = (m + BM - 1) / BM;
    const int tiles_n = (n + BN - 1) / BN;
    const int tiles = tiles_m * tiles_n;
    const int k_tiles = (k + BK - 1) / BK;
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(full_bar + s * 8, 1);
            mbarrier_init(empty_bar + s * 8, 4);
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
    __syncthreads();

    if (warpgroup == 2) {
        // Producer (warp 8): the CTA's tiles in order, every k-tile of each.
        if (threadIdx.x == 256 && k_tiles > 0)
            load_stages<BN, STAGES, GROUP_M>(a_map, b_map, smem, full_bar, empty_bar, tiles_m, tiles_n, k_tiles);
        // Residual loader (warp 9).
        if constexpr (kResidual) {
            if (threadIdx.x == 288)
                load_residual_parts<TC, BN, GROUP_M>(out_map, smem + STAGES * kStageBytes, residual_full_bar,
                                                     residual_empty_bar, tiles_m, tiles_n);
        }
        return;
    }

    // Consumer warpgroup w takes the CTA's tiles j = w, w + 2, w + 4, ... Its loop bounds depend
    // on w: read through a shuffle, w is warp-uniform to ptxas, which otherwise treats the loop
    // as divergent and serialises every wgmma in it (C7518, "WG.DP in divergent path").
    const int w = __shfl_sync(0xffffffffu, warpgroup, 0);
    const unsigned output_tile = smem + STAGES * kStageBytes + w * kOutputBytes;
    // This warpgroup's tile of bias (BN values), after both output tiles.
    const unsigned bias_tile = smem + STAGES * kStageBytes + 2 * kOutputBytes + w * BN * 2;
    const T* bias_values = reinterpret_cast<const T*>(shared_tiles + (bias_tile - shared_address(shared_tiles)));
    const int tid = threadIdx.x % 128;
    const int lane = threadIdx.x & 31;
    const bool leader = tid == 0;
    // This thread's accumulator rows (and rows + 8) in each 64-row half, and its first column.
    const int frag_row = (tid / 32) * 16 + (lane >> 2);
    const int frag_col = (lane & 3) * 2;
    // Rows 0-63 and 64-127 of the tile.
    float acc_top[kAccumulators], acc_bottom[kAccumulators];
#pragma unroll
    for (int i = 0; i < kAccumulators; ++i) acc_top[i] = acc_bottom[i] = 0.0f;
    for (int j = w, tile = blockIdx.x + w * gridDim.x; tile < tiles; j += 2, tile += 2 * gridDim.x) {
        const TileCoords t = tile_of_program<GROUP_M>(1, tiles_m, tiles_n, tile);
        // The tile's bias, fetched while its main loop runs (the previous epilogue's last barrier
        // has seen every read of the buffer); waited for at the epilogue.
        if (bias != nullptr && tid < BN / 8) stage_bias_chunk(bias_tile + tid * 16, bias, t.tile_n * BN + tid * 8, n);
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
            for (int ks = 0; ks < BK / 16; ++ks) {
                const unsigned long long b_desc = wgmma_descriptor(stage_b + ks * 32);
                wgmma_m64k16<T, BN>(acc_top, wgmma_descriptor(stage_a + ks * 32), b_desc, kt > 0 || ks > 0);
                wgmma_m64k16<T, BN>(acc_bottom, wgmma_descriptor(stage_a + 64 * BK * 2 + ks * 32), b_desc,
                                    kt > 0 || ks > 0);
            }
            wgmma_commit();
            // The previous step's group has retired once at most one is pending: its stage is free.
            wgmma_wait<1>();
            if (kt > 0 && lane == 0) mbarrier_arrive(empty_bar + ((step - 1) % STAGES) * 8);
            // The other warpgroup's next tile may queue its MMAs behind this tile's last ones.
            if (kt == k_tiles - 1 && leader) mbarrier_arrive(turn_bar + (1 - w) * 8);
        }
        // Unconditional: ptxas cannot tell that the k-loop ran iff k_tiles > 0, and a path on which
        // the epilogue might read accumulators of a pending wgmma makes it serialise them all.
        wgmma_wait<0>();
        if (k_tiles > 0 && lane == 0) mbarrier_arrive(empty_bar + ((step - 1) % STAGES) * 8);
        if (k_tiles == 0 && leader) mbarrier_arrive(turn_bar + (1 - w) * 8);
        fence_accumulators(acc_top);
        fence_accumulators(acc_bottom);

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
        // The previous tile's TMA store has read the output tile (issued a main loop ago), and
        // the bias tile has landed. A 16-bit stream (kResidual here): R arrives by TMA in the
        // layout of C's output tile, so each thread adds its pairs in place there and the tile
        // goes out by TMA store as without residual: whole lines, and no 64-bit address
        // arithmetic in registers (storing C pairs from registers, 4 bytes a thread, spilled
        // 48-92 bytes and ran proj slower than the f32 stream, H200). The buffer is released
        // for the next tile's R once the store has read it.
        if (leader) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
        cp_async_wait<0>();
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + w) : "memory");
        // Use q of this warpgroup's residual buffer (see load_residual_parts).
        if constexpr (kResidual) mbarrier_wait(residual_full_bar + w * 8, (j >> 1) & 1);
        const int col0 = t.tile_n * BN;
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
        // Makes the generic-proxy writes visible to the TMA unit, then one thread stores.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + w) : "memory");
        if (leader) {
#pragma unroll
            for (int box = 0; box < BN / 64; ++box)
                tma_store_2d(&c_map, output_tile + box * (BM * 128), col0 + box * 64, t.tile_m * BM);
            asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
            if constexpr (kResidual) {
                asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
                mbarrier_arrive(residual_empty_bar + w * 8);
            }
        }
    }
    // C is written before the grid counts as done.
    if (!is_f32<TC>::value && leader) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

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

// The entry point every generated wrapper calls. Template arguments, in order: the storage
// type of A, B and the bias; the residual's; C's (f32 for a residual stream kept in f32 while
// the operands are f16/bf16: the epilogue converts once, at the load and the store); BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, WARPS_M, WARPS_N, activation, B layout is KN,
// 16-byte loads. f32 instantiations use the FMA body (which fixes 8 warps, two register-staged
// buffers and element loads; their STAGES/WARPS/VEC16 arguments must say so).
//
// Bias and residual are run-time choices (null when absent), not template flags: the epilogue
// is a loop that runs once per tile, where a uniform branch costs nothing measurable, while
// two more flags would quadruple the instantiations NVRTC has to build.
// `vector_epilogue`: C (and R and the bias, when present) rows start on four-element
// boundaries, so runs of four columns can be read and written as one access.
// `splits` > 1 (tensor-core bodies only, single matrices): split-K, see SplitK; `split_k` is
// the k-columns per split, `split_partials` and `split_counters` the launcher's scratch.
template <typename T, typename TR, typename TC, int BM, int BN, int BK, int GROUP_M, int STAGES, int WARPS_M,
          int WARPS_N, Act ACT, bool B_KN, bool VEC16>
__device__ __forceinline__ void matmul_block(const T* __restrict__ a, const T* __restrict__ b, const T* bias,
                                             const TR* residual, TC* c, int heads, int m, int n, int k,
                                             long long a_offset, long long a_row_stride, long long a_batch_stride,
                                             long long a_head_stride, long long b_offset, long long b_row_stride,
                                             long long b_batch_stride, long long b_head_stride, long long c_offset,
                                             long long c_row_stride, long long c_batch_stride,
                                             long long c_head_stride, long long r_offset, long long r_row_stride,
                                             long long r_batch_stride, long long r_head_stride, float alpha,
                                             int vector_epilogue, int splits, int split_k, float* split_partials,
                                             unsigned* split_counters) {
    using namespace vitrt_matmul;
    const View av{a_offset, a_row_stride, a_batch_stride, a_head_stride};
    const View bv{b_offset, b_row_stride, b_batch_stride, b_head_stride};
    const View cv{c_offset, c_row_stride, c_batch_stride, c_head_stride};
    const View rv{r_offset, r_row_stride, r_batch_stride, r_head_stride};
    if constexpr (is_f32<T>::value) {
        static_assert(STAGES == 2 && WARPS_M * WARPS_N == 8 && !VEC16, "the f32 body is fixed at 2 stages, 8 warps");
        static_assert(is_f32<TR>::value && is_f32<TC>::value, "an f32 matmul keeps every operand in f32");
        matmul_fma_f32<BM, BN, BK, GROUP_M, ACT, B_KN>(a, b, bias, residual, c, heads, m, n,
                                                                              k, av, bv, cv, rv, alpha, vector_epilogue);
    } else {
        matmul_tensor_core<T, TR, TC, BM, BN, BK, GROUP_M, STAGES, WARPS_M, WARPS_N, ACT, B_KN, VEC16>(
            a, b, bias, residual, c, heads, m, n, k, av, bv, cv, rv, alpha, vector_epilogue,
            SplitK{splits, split_k, split_partials, split_counters});
    }
}

// The entry point of the Hopper instantiations (sm_90a only): the same parameters as
// matmul_block, for f16/bf16 operands with B as [N, K] weights and 16-byte aligned rows (the
// launcher sends everything else to matmul_block). Template arguments: T, TR, TC, BLOCK_M (64
// per warpgroup), BLOCK_N (128, 192 or 256), BLOCK_K (64), GROUP_M, STAGES (at least 3),
// activation.
template <typename T, typename TR, typename TC, int BM, int BN, int BK, int GROUP_M, int STAGES, Act ACT>
__device__ __forceinline__ void matmul_block_wgmma(const T* __restrict__ a, const T* __restrict__ b, const T* bias,
                                                   const TR* residual, TC* c, int heads, int m, int n, int k,
                                                   long long a_offset, long long a_row_stride,
                                                   long long a_batch_stride, long long a_head_stride,
                                                   long long b_offset, long long b_row_stride,
                                                   long long b_batch_stride, long long b_head_stride,
                                                   long long c_offset, long long c_row_stride,
                                                   long long c_batch_stride, long long c_head_stride,
                                                   long long r_offset, long long r_row_stride,
                                                   long long r_batch_stride, long long r_head_stride, float alpha,
                                                   int vector_epilogue) {
    using namespace vitrt_matmul;
    static_assert(!is_f32<T>::value, "wgmma instantiations are f16 or bf16");
#if VITRT_HAS_WGMMA
    const View av{a_offset, a_row_stride, a_batch_stride, a_head_stride};
    const View bv{b_offset, b_row_stride, b_batch_stride, b_head_stride};
    const View cv{c_offset, c_row_stride, c_batch_stride, c_head_stride};
    const View rv{r_offset, r_row_stride, r_batch_stride, r_head_stride};
    matmul_wgmma<T, TR, TC, BM, BN, BK, GROUP_M, STAGES, ACT>(a, b, bias, residual, c, heads, m, n, k, av, bv, cv,
                                                               rv, alpha, vector_epilogue);
#else
    // Compiled for a target without wgmma: the launcher never picks this instantiation there.
    __trap();
#endif
}

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

// The entry point of the ping-pong Hopper instantiations (sm_90a only): A, B and C as TMA
// tensor maps (C: 128-byte swizzled boxes of 64 x 128, in the operands' type), one matrix, no
// residual. Template arguments: T, BLOCK_N (128), STAGES, GROUP_M, activation. 288 threads: two
// consumer warpgroups, then the producer warp.
template <typename T, int BN, int STAGES, int GROUP_M, Act ACT>
__device__ __forceinline__ void matmul_block_tma_pingpong(const TmaDescriptor& a_map, const TmaDescriptor& b_map,
                                                          const TmaDescriptor& c_map, const T* bias, int m, int n,
                                                          int k, float alpha) {
    using namespace vitrt_matmul;
    static_assert(!is_f32<T>::value, "TMA instantiations are f16 or bf16");
#if VITRT_HAS_WGMMA
    matmul_tma_pingpong<T, T, false, BN, STAGES, GROUP_M, ACT>(a_map, b_map, c_map, c_map, bias,
                                                               static_cast<T*>(nullptr), 0, m, n, k, alpha);
#else
    __trap();
#endif
}

// The ping-pong entry for the f32 residual stream: C = act(alpha·A·B + bias) + R with R and C
// f32 (C may be R), R as a tensor map (128-byte swizzled boxes of 32 x 128), C as a pointer to
// its first element and a row stride with 16-byte aligned rows. Template arguments: T,
// BLOCK_N (128), STAGES, GROUP_M, activation. 320 threads: two consumer warpgroups, the stage
// producer warp, the residual loader warp.
template <typename T, int BN, int STAGES, int GROUP_M, Act ACT>
__device__ __forceinline__ void matmul_block_tma_pingpong_residual(const TmaDescriptor& a_map,
                                                                   const TmaDescriptor& b_map,
                                                                   const TmaDescriptor& r_map, const T* bias,
                                                                   float* c, long long c_row_stride, int m, int n,
                                                                   int k, float alpha) {
    using namespace vitrt_matmul;
    static_assert(!is_f32<T>::value, "TMA instantiations are f16 or bf16");
#if VITRT_HAS_WGMMA
    matmul_tma_pingpong<T, float, true, BN, STAGES, GROUP_M, ACT>(a_map, b_map, r_map, r_map, bias, c, c_row_stride,
                                                                  m, n, k, alpha);
#else
    __trap();
#endif
}

// The ping-pong entry for a 16-bit stream: C = act(alpha·A·B + bias) + R with R and C in the
// operands' type (C may be R), both as tensor maps (128-byte swizzled boxes of 64 x 128).
// Template arguments: T, BLOCK_N (128), STAGES, GROUP_M, activation. 320 threads, as above.
template <typename T, int BN, int STAGES, int GROUP_M, Act ACT>
__device__ __forceinline__ void matmul_block_tma_pingpong_stream16(const TmaDescriptor& a_map,
                                                                   const TmaDescriptor& b_map,
                                                                   const TmaDescriptor& r_map,
                                                                   const TmaDescriptor& c_map, const T* bias, int m,
                                                                   int n, int k, float alpha) {
    using namespace vitrt_matmul;
    static_assert(!is_f32<T>::value, "TMA instantiations are f16 or bf16");
#if VITRT_HAS_WGMMA
    matmul_tma_pingpong<T, T, true, BN, STAGES, GROUP_M, ACT>(a_map, b_map, r_map, c_map, bias,
                                                              static_cast<T*>(nullptr), 0, m, n, k, alpha);
#else
    __trap();
#endif
}

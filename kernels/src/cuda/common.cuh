// Shared by every kernel family: storage-type conversions, 16-byte vector access, warp /
// block reductions, and the cp.async / ldmatrix / mma.sync wrappers of the tile programs.
// NVRTC receives this file in memory as "common.cuh".
//
// Storage types are float, __half and __nv_bfloat16; all arithmetic is in float.
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>

// ---------------------------------------------------------------------------------------------
// Conversions: load as float, compute in float, convert once at the store.

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
// Round to nearest even, as torch's .to(float16) and half::f16::from_f32 do.
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// Whether A and B are the same type (for `if constexpr` over the storage types).
template <typename A, typename B>
struct is_same_type {
    static constexpr bool value = false;
};
template <typename A>
struct is_same_type<A, A> {
    static constexpr bool value = true;
};

// NVRTC has no <cmath>, hence no INFINITY.
__device__ __forceinline__ float infinity() { return __int_as_float(0x7f800000); }

// The MUFU approximations without their denormal handling. exp2f and __expf compile to
// ex2.approx.f32, which brackets the MUFU.EX2 with a compare and two multiplies so that
// results below 2^-126 stay denormal, and __fdividef does the same around MUFU.RCP; the .ftz
// forms are the single MUFU instruction (the GELU epilogue of the batch-64 fc1 spent 6 of its
// ~24 instructions a value on that handling). For what they feed, a result below 2^-126
// flushed to 0 changes nothing: probabilities, exp terms and 16-bit outputs all round it to 0
// anyway. ex2: 2 ulp over the full range; rcp: 1 ulp (PTX ISA).
__device__ __forceinline__ float exp2_approx_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float rcp_approx_ftz(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// ---------------------------------------------------------------------------------------------
// Vectors of N elements, aligned to their size, so that a 16-byte vector is one LDG.128/STG.128.
// Callers use them only where the address is aligned (launchers check at launch time).

template <typename T, int N> struct alignas(sizeof(T) * N) Vec {
    T v[N];
};

template <typename T, int N> __device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
    return *reinterpret_cast<const Vec<T, N>*>(p);
}

template <typename T, int N> __device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& v) {
    *reinterpret_cast<Vec<T, N>*>(p) = v;
}

// ---------------------------------------------------------------------------------------------
// Reductions. A "group" is GROUP_THREADS consecutive threads (a whole number of warps, or one
// warp) that cooperate on one row; several groups may share a block.

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

struct SumOp {
    __device__ __forceinline__ static float warp(float v) { return warp_sum(v); }
    __device__ __forceinline__ static float combine(float a, float b) { return a + b; }
};

struct MaxOp {
    __device__ __forceinline__ static float warp(float v) { return warp_max(v); }
    __device__ __forceinline__ static float combine(float a, float b) { return fmaxf(a, b); }
};

// Reduces `v` over the GROUP_WARPS warps of the calling thread's group; every thread of the
// group gets the result. `scratch` holds GROUP_WARPS floats per group in the block (shared
// memory), and every thread of the block must call this the same number of times (it
// synchronises the block when a group spans several warps).
template <typename Op, int GROUP_WARPS>
__device__ __forceinline__ float group_reduce(float v, float* scratch) {
    v = Op::warp(v);
    if (GROUP_WARPS == 1) return v;
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int group_first_warp = warp - warp % GROUP_WARPS;
    __syncthreads();  // scratch may still be read by the previous reduction
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float r = scratch[group_first_warp];
#pragma unroll
    for (int w = 1; w < GROUP_WARPS; ++w) r = Op::combine(r, scratch[group_first_warp + w]);
    return r;
}

// ---------------------------------------------------------------------------------------------
// Shared memory, asynchronous copies and tensor-core fragments (sm_80 and later), for the
// matmul and attention block programs.

__device__ __forceinline__ unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// A 16-byte global→shared copy that reads `src_bytes` (0..16) and zero-fills the rest.
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// ---------------------------------------------------------------------------------------------
// Warpgroup MMA (sm_90a): the fences and waits around `wgmma.mma_async`, for the matmul's Hopper
// programs and the Hopper attention. VITRT_HAS_WGMMA is 0 when compiling for a target without
// wgmma, where these are empty and the programs that need them trap.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define VITRT_HAS_WGMMA 1
#else
#define VITRT_HAS_WGMMA 0
#endif

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

// TMA and mbarriers (sm_90a), for the matmul's TMA programs and the Hopper attention.

// The 128 opaque bytes of a CUtensorMap, passed by value as a __grid_constant__ parameter.
struct alignas(64) TmaDescriptor {
    unsigned long long opaque[16];
};

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
// One box of a 4-D tensor map (coordinates innermost first) into shared memory, completing on
// `bar`.
__device__ __forceinline__ void tma_load_4d(unsigned dst, const TmaDescriptor* map, int c0, int c1, int c2, int c3,
                                            unsigned bar) {
#if VITRT_HAS_WGMMA
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
        "[%6];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
#endif
}

// Two fp32 values as one register of two storage-type elements, `lo` in the low half (the
// lower column): what the tensor-core operands and 4-byte stores of a pair expect.
template <typename T>
__device__ __forceinline__ unsigned pack_pair(float lo, float hi);
template <>
__device__ __forceinline__ unsigned pack_pair<__half>(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&h);
}
template <>
__device__ __forceinline__ unsigned pack_pair<__nv_bfloat16>(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&h);
}

// d += a · b for one m16n8k16 fragment, fp32 accumulators.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                                         unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---------------------------------------------------------------------------------------------
// Activations: the one CUDA spelling of kernels::Activation, shared by the matmul epilogue and
// the activation passes.

// The activations kernels::Activation names (its `cuda_name` spells these).
enum class Act { None, Gelu, GeluTanh, QuickGelu, Relu, Silu, Tanh, Sigmoid };

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
    } else if constexpr (ACT == Act::Tanh) {
        return tanhf(x);
    } else if constexpr (ACT == Act::Sigmoid) {
        return 1.0f / (1.0f + expf(-x));
    } else {
        static_assert(ACT == Act::Relu, "unhandled activation");
        return fmaxf(x, 0.0f);
    }
}

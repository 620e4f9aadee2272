// Warpgroup MMA on sm_90a (NVRTC receives it in memory as "wgmma.cuh"): the 128-byte-swizzled
// matrix descriptor and one m64nNk16 wgmma from shared memory; used by the wgmma and both TMA
// programs. The fences and waits, and VITRT_HAS_WGMMA, are in common.cuh (attention uses them too).

#pragma once

#include "epilogue.cuh"

namespace vitrt_matmul {

// Register lists for one m64nNk16 wgmma: N/2 fp32 accumulators per thread.
#define VITRT_WGMMA_D32 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define VITRT_WGMMA_OUT32(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
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

// d (64 x BN: this thread's BN / 2 accumulators) = A (64 x 16) · B (BN x 16)ᵀ + (accumulate ? d : 0),
// both operands K-major in shared memory.
template <typename T, int BN>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[BN / 2], unsigned long long a_desc,
                                             unsigned long long b_desc, int accumulate = 1) {
#if VITRT_HAS_WGMMA
    if constexpr (false) {
    } else if constexpr (BN == 64 && is_same_type<T, __half>::value) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " VITRT_WGMMA_D32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
            : VITRT_WGMMA_OUT32(d)
            : "l"(a_desc), "l"(b_desc), "r"(accumulate));
    } else if constexpr (BN == 64 && is_same_type<T, __nv_bfloat16>::value) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " VITRT_WGMMA_D32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
            : VITRT_WGMMA_OUT32(d)
            : "l"(a_desc), "l"(b_desc), "r"(accumulate));
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
        static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256, "wgmma tiles are 64, 128, 192 or 256 columns wide");
    }
#endif
}

// d (64 x BN) = A (64 x 32) · B (BN x 32)ᵀ + (accumulate ? d : 0) for e4m3 operands, both
// K-major in shared memory (an 8-bit wgmma has no transpose: its operands are always K-major);
// 32 e4m3 values are the 32 bytes of one k16 step of a 16-bit operand, so the descriptors and
// the accumulators' layout are those of wgmma_m64k16. The sum is accumulated in the tensor
// core at fp32 range with fewer mantissa bits (the H100's FP8 path keeps about 13; see
// tma_pingpong.cu's FP8 notes).
template <int BN>
__device__ __forceinline__ void wgmma_m64k32_e4m3(float (&d)[BN / 2], unsigned long long a_desc,
                                                  unsigned long long b_desc, int accumulate = 1) {
#if VITRT_HAS_WGMMA
    if constexpr (BN == 64) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " VITRT_WGMMA_D32 ", %32, %33, p, 1, 1;\n}\n"
            : VITRT_WGMMA_OUT32(d)
            : "l"(a_desc), "l"(b_desc), "r"(accumulate));
    } else if constexpr (BN == 128) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " VITRT_WGMMA_D64 ", %64, %65, p, 1, 1;\n}\n"
            : VITRT_WGMMA_OUT64(d)
            : "l"(a_desc), "l"(b_desc), "r"(accumulate));
    } else {
        static_assert(BN == 64 || BN == 128, "the FP8 tiles are 64 or 128 columns wide");
    }
#endif
}

}  // namespace vitrt_matmul

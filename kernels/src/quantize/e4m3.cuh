// E4M3 quantisation on the device, shared by quantize.cu and layernorm.cu's e4m3 entry point:
// the codes of f32 values times a reciprocal scale, and the per-row scale of dynamic
// quantisation, each exactly as the CPU twins compute them (crate::quantize: `row_scale`,
// `inverse_scale`, `crate::e4m3::encode`), so that the codes and scales agree bit for bit:
//
//     scale   = max(amax / 448, 1e-12)       amax: the row's largest |value|, in f32
//     inverse = 1 / scale                    (both IEEE divisions, once a row)
//     code    = e4m3(value · inverse)        round to nearest even, saturated to ±448
//
// A multiply by the reciprocal, not a division per value: the FP8 matmul's e4m3 output
// scales the same way (tma_pingpong.cu), and a division per element would cost more than the
// rest of the conversion. The two can differ in the last code (x / s on a rounding midpoint,
// x · (1/s) a hair past it), so the twins multiply too.
//
// `cvt.rn.satfinite.e4m3x2.f32` is the conversion (sm_89 and later): NaN gives the NaN code
// 0x7F and an infinity or a value past 448 saturates, as crate::e4m3::encode. amax is taken
// with fmaxf, which drops NaN (as the twins' f32::max): a row's NaN values leave its scale to
// the others and are stored as NaN codes.
#pragma once

#include "common.cuh"

// The scale of a row whose largest magnitude is `amax`: the smallest scale keeps a row of
// zeros from dividing by zero (its codes are then all zero).
__device__ __forceinline__ float e4m3_row_scale(float amax) { return fmaxf(__fdiv_rn(amax, 448.0f), 1e-12f); }

// What values are multiplied by before their conversion.
__device__ __forceinline__ float e4m3_inverse_scale(float scale) { return __fdiv_rn(1.0f, scale); }

// The codes of `lo` (low byte) and `hi` (high byte). The instruction's first source goes to
// the upper byte. Before sm_89 (where layernorm.cu's 16-bit entry point, which includes this
// header, also compiles) there is no such instruction and nothing calls this: it traps.
__device__ __forceinline__ unsigned e4m3x2(float lo, float hi) {
    unsigned short codes;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
    __trap();
    codes = 0;
#else
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(codes) : "f"(hi), "f"(lo));
#endif
    return codes;
}

// The VEC codes of y[j] · inverse at `codes` (VEC bytes, aligned to VEC): one 4- or 8-byte
// store for VEC 4 or 8, a byte for VEC 1. __fmul_rn: the product is rounded on its own, as
// the twin's, whatever the compiler would contract.
template <int VEC>
__device__ __forceinline__ void store_e4m3(unsigned char* codes, const float (&y)[VEC], float inverse) {
    if constexpr (VEC == 1) {
        *codes = static_cast<unsigned char>(e4m3x2(__fmul_rn(y[0], inverse), 0.0f) & 0xFF);
    } else {
        static_assert(VEC % 4 == 0, "e4m3 stores are of 1, 4 or 8 codes");
        Vec<unsigned, VEC / 4> words;
#pragma unroll
        for (int q = 0; q < VEC / 4; ++q) {
            const unsigned low = e4m3x2(__fmul_rn(y[4 * q], inverse), __fmul_rn(y[4 * q + 1], inverse));
            const unsigned high = e4m3x2(__fmul_rn(y[4 * q + 2], inverse), __fmul_rn(y[4 * q + 3], inverse));
            words.v[q] = low | (high << 16);
        }
        store_vec<unsigned, VEC / 4>(reinterpret_cast<unsigned*>(codes), words);
    }
}

// Dynamic quantisation of one row held in registers, as the row programs hold it (crate::rows):
// the thread of `rank` in its group of 32 · GROUP_WARPS threads holds the row's vectors
// rank + c · GROUP for c < CACHED (those below `vectors`). Writes the row's codes at
// `codes_row` and, from the group's first thread, its scale at `scale`. Every thread of the
// block must call it (a group of several warps synchronises the block).
template <int VEC, int GROUP_WARPS, int CACHED>
__device__ __forceinline__ void quantise_held_row(const float (&y)[CACHED][VEC], int rank, int vectors,
                                                  unsigned char* codes_row, float* scale, float* scratch) {
    constexpr int GROUP = 32 * GROUP_WARPS;
    float amax = 0.0f;
#pragma unroll
    for (int c = 0; c < CACHED; ++c) {
        if (rank + c * GROUP < vectors) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) amax = fmaxf(amax, fabsf(y[c][j]));
        }
    }
    const float row_scale = e4m3_row_scale(group_reduce<MaxOp, GROUP_WARPS>(amax, scratch));
    if (rank == 0) *scale = row_scale;
    const float inverse = e4m3_inverse_scale(row_scale);
#pragma unroll
    for (int c = 0; c < CACHED; ++c) {
        const int i = rank + c * GROUP;
        if (i < vectors) store_e4m3<VEC>(codes_row + i * VEC, y[c], inverse);
    }
}

// Dynamic quantisation of a row too long for registers: `values(i, y)` writes the row's
// vector i into y, and is called twice a vector (for amax, then for the codes), so it must
// give the same values both times. Otherwise as quantise_held_row, the thread's vectors being
// rank, rank + GROUP, ...
template <int VEC, int GROUP_WARPS, typename Values>
__device__ __forceinline__ void quantise_streamed_row(const Values& values, int rank, int vectors,
                                                      unsigned char* codes_row, float* scale, float* scratch) {
    constexpr int GROUP = 32 * GROUP_WARPS;
    float amax = 0.0f;
    for (int i = rank; i < vectors; i += GROUP) {
        float y[VEC];
        values(i, y);
#pragma unroll
        for (int j = 0; j < VEC; ++j) amax = fmaxf(amax, fabsf(y[j]));
    }
    const float row_scale = e4m3_row_scale(group_reduce<MaxOp, GROUP_WARPS>(amax, scratch));
    if (rank == 0) *scale = row_scale;
    const float inverse = e4m3_inverse_scale(row_scale);
    for (int i = rank; i < vectors; i += GROUP) {
        float y[VEC];
        values(i, y);
        store_e4m3<VEC>(codes_row + i * VEC, y, inverse);
    }
}

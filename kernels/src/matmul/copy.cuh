// The cp.async copies of the mma.sync and wgmma programs (NVRTC receives it in memory as
// "copy.cuh"): 16-byte chunks, or masked element loads where rows are not 16-byte aligned,
// into XOR-swizzled shared memory.

#pragma once

#include "epilogue.cuh"

namespace vitrt_matmul {

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

}  // namespace vitrt_matmul

// Element-wise ops. Memory-bound: the goal is the fewest, widest, coalesced accesses.
#include "common.cuh"

// out[i] = a[i] + b[i] for i < n; `out` may alias `a` or `b` (each element is read before it
// is written, by the same thread).
//
// One block covers THREADS * VEC * UNROLL consecutive elements. Thread t handles the VEC
// elements at t * VEC + u * THREADS * VEC for u < UNROLL: a warp's accesses are consecutive
// 16-byte vectors (fully coalesced), and each thread has UNROLL independent loads of each input
// in flight before its first add. VEC * sizeof(T) is 16 bytes when every pointer is 16-byte
// aligned, else VEC is 1. Only the block holding the end of the array takes the masked path.
template <typename T, int VEC, int THREADS, int UNROLL>
__device__ __forceinline__ void add_program(const T* a, const T* b, T* out, long long n) {
    const long long stride = (long long)THREADS * VEC;
    const long long base = (long long)blockIdx.x * stride * UNROLL + (long long)threadIdx.x * VEC;
    if ((long long)(blockIdx.x + 1) * stride * UNROLL <= n) {
        Vec<T, VEC> va[UNROLL], vb[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            va[u] = load_vec<T, VEC>(a + base + u * stride);
            vb[u] = load_vec<T, VEC>(b + base + u * stride);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            Vec<T, VEC> r;
#pragma unroll
            for (int j = 0; j < VEC; ++j) r.v[j] = from_float<T>(to_float(va[u].v[j]) + to_float(vb[u].v[j]));
            store_vec<T, VEC>(out + base + u * stride, r);
        }
    } else {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const long long i = base + u * stride + j;
                if (i < n) out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
            }
        }
    }
}

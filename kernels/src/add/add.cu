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
//
// TA, TB and TO are the storage types of a, b and out: one type, or f32 for the residual stream
// of a half-precision run plus a half-precision branch (then VEC spans 16 bytes of f32).
template <typename TA, typename TB, typename TO, int VEC, int THREADS, int UNROLL>
__device__ __forceinline__ void add_program(const TA* a, const TB* b, TO* out, long long n) {
    const long long stride = (long long)THREADS * VEC;
    const long long base = (long long)blockIdx.x * stride * UNROLL + (long long)threadIdx.x * VEC;
    if ((long long)(blockIdx.x + 1) * stride * UNROLL <= n) {
        Vec<TA, VEC> va[UNROLL];
        Vec<TB, VEC> vb[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            va[u] = load_vec<TA, VEC>(a + base + u * stride);
            vb[u] = load_vec<TB, VEC>(b + base + u * stride);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            Vec<TO, VEC> r;
#pragma unroll
            for (int j = 0; j < VEC; ++j) r.v[j] = from_float<TO>(to_float(va[u].v[j]) + to_float(vb[u].v[j]));
            store_vec<TO, VEC>(out + base + u * stride, r);
        }
    } else {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const long long i = base + u * stride + j;
                if (i < n) out[i] = from_float<TO>(to_float(a[i]) + to_float(b[i]));
            }
        }
    }
}

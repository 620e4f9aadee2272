// The parameters of the block programs (mma_sync.cu, fma.cu, wgmma.cu): one struct, which the
// generated wrapper takes by value as `__grid_constant__` (read in place from the parameter
// space, never copied) and hands to the program's entry point. Its host-side mirror is
// `MatmulParams` in matmul/params.rs, field for field: a field added on one side only fails
// the size check on both.

#pragma once

#include "epilogue.cuh"

namespace vitrt_matmul {

// Split-K (tensor-core bodies only, single matrices; see mma_sync.cu): `splits` > 1 runs each
// output tile as that many CTAs over `k` k-columns each, summed through the launcher's scratch.
struct SplitK {
    int splits;  // 1: no split, and the other fields are unused
    int k;       // k-columns per split, a multiple of BLOCK_K
    float* partials;
    unsigned* counters;
};

// C = epilogue(alpha · A · B) for every (batch, head) matrix. The pointers hold the program's
// types (its T, TR, TC template arguments; `operands` below gives them back): A, B and the
// bias T, the residual TR, C TC. The bias and residual are null when absent.
// `vector_epilogue`: C (and R and the bias, when present) rows start on four-element
// boundaries, so runs of four columns can be read and written as one access.
struct MatmulParams {
    const void* a;
    const void* b;
    const void* bias;
    const void* residual;
    void* c;
    int heads, m, n, k;
    View a_view, b_view, c_view, r_view;
    float alpha;
    int vector_epilogue;
    SplitK split;  // wgmma.cu never splits and ignores it
};

// NVRTC has no offsetof: the size is pinned here, the offsets in params.rs, and the GPU tests
// run every program through this struct.
static_assert(sizeof(MatmulParams) == 216, "MatmulParams's size, as matmul/params.rs has it");

// The operand pointers with the program's types.
template <typename T, typename TR, typename TC>
struct Operands {
    const T* a;
    const T* b;
    const T* bias;
    const TR* residual;
    TC* c;

    __device__ __forceinline__ explicit Operands(const MatmulParams& p)
        : a(static_cast<const T*>(p.a)),
          b(static_cast<const T*>(p.b)),
          bias(static_cast<const T*>(p.bias)),
          residual(static_cast<const TR*>(p.residual)),
          c(static_cast<TC*>(p.c)) {}
};

}  // namespace vitrt_matmul

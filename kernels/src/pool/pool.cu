// The mean of token rows start..tokens of every sequence of x [B, tokens, cols]: out[b, c], in
// the output's type TO (the run's dtype) whatever x's TI (a residual stream kept in f32). One
// thread per (image, column), walking the tokens in order with an f32 sum, then one division
// (as torch's mean: sum, then divide by the count). Neighbouring threads read neighbouring
// columns, so every token row is read coalesced. A pooling op reads each value once: there is
// nothing to tile.
#include "common.cuh"

template <typename TI, typename TO>
__device__ __forceinline__ void token_mean_program(const TI* x, TO* out, int tokens, int start, int cols) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    const long long b = blockIdx.y;
    const TI* image = x + b * tokens * cols + c;
    float sum = 0.0f;
    for (int t = start; t < tokens; ++t) sum += to_float(image[(long long)t * cols]);
    out[b * cols + c] = from_float<TO>(sum / (float)(tokens - start));
}

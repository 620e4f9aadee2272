// Rotary position embeddings on a grid of patches (DINOv3): the formulas are in mod.rs. One CTA
// a row (one token of one image) at a time, in a grid-stride loop: a prefix token's row is
// copied; a patch token's HEAD_DIM / 2 angles are made once, their cosines and sines kept in
// shared memory, and every head's pairs (d, d + D/2) rotated with them. The angles depend on
// the patch and the dimension only, so the heads share them: ViT-B's 12 heads take 12 times
// fewer powf and sincosf than one thread a pair making its own (benchmarks/NOTES.md,
// 2026-11-28 "Rotary embeddings as a pass of their own").

#include "common.cuh"

// Pairs a head at most: head dims up to 256 (the launcher checks).
#define VITRT_ROPE_MAX_HALF 128

template <typename T>
__device__ __forceinline__ void rope_program(const T* x, T* out, long long rows, int tokens, int heads, int head_dim,
                                             int prefix_tokens, int grid_rows, int grid_cols, float theta) {
    __shared__ float cos_s[VITRT_ROPE_MAX_HALF];
    __shared__ float sin_s[VITRT_ROPE_MAX_HALF];
    const int half = head_dim / 2;
    const int quarter = head_dim / 4;
    const int width = heads * head_dim;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* src = x + row * width;
        T* dst = out + row * width;
        const int token = (int)(row % tokens);
        if (token < prefix_tokens) {
            for (int i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
            continue;
        }
        const int patch = token - prefix_tokens;
        // The previous row's rotations have read the tables before they are rewritten.
        __syncthreads();
        for (int d = threadIdx.x; d < half; d += blockDim.x) {
            // As RopeGrid::angle: f32 throughout, in transformers' order.
            const int axis = d / quarter, f = d - axis * quarter;
            const int index = axis == 0 ? patch / grid_cols : patch % grid_cols;
            const int extent = axis == 0 ? grid_rows : grid_cols;
            const float centre = ((float)index + 0.5f) / (float)extent;
            const float coordinate = 2.0f * centre - 1.0f;
            const float exponent = (float)((double)f * (4.0 / (double)head_dim));
            const float inv_freq = 1.0f / powf(theta, exponent);
            const float angle = (6.28318530717958647692f * coordinate) * inv_freq;
            sincosf(angle, &sin_s[d], &cos_s[d]);
        }
        __syncthreads();
        for (int p = threadIdx.x; p < heads * half; p += blockDim.x) {
            const int head = p / half, d = p - head * half;
            const int at = head * head_dim + d;
            const float a = to_float(src[at]), b = to_float(src[at + half]);
            const float c = cos_s[d], s = sin_s[d];
            dst[at] = from_float<T>(a * c - b * s);
            dst[at + half] = from_float<T>(b * c + a * s);
        }
    }
}

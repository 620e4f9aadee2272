// Rotary position embeddings on a grid of patches (DINOv3): the formulas are in mod.rs. One
// thread a rotated pair (d, d + D/2) of one head of one patch token; prefix tokens are copied.
// A grid-stride loop: memory-bound, one pass over Q (or K) a layer.

#include "common.cuh"

template <typename T>
__device__ __forceinline__ void rope_program(const T* x, T* out, long long rows, int tokens, int heads, int head_dim,
                                             int prefix_tokens, int grid_rows, int grid_cols, float theta) {
    const int half = head_dim / 2;
    const int quarter = head_dim / 4;
    const long long pairs = rows * heads * half;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < pairs; i += step) {
        const long long row = i / (heads * half);
        const int within = (int)(i - row * heads * half);
        const int head = within / half, d = within - head * half;
        const long long at = row * heads * head_dim + head * head_dim + d;
        const int token = (int)(row % tokens);
        const float a = to_float(x[at]), b = to_float(x[at + half]);
        if (token < prefix_tokens) {
            out[at] = x[at];
            out[at + half] = x[at + half];
            continue;
        }
        const int patch = token - prefix_tokens;
        // As RopeGrid::angle: f32 throughout, in transformers' order.
        const int axis = d / quarter, f = d - axis * quarter;
        const int index = axis == 0 ? patch / grid_cols : patch % grid_cols;
        const int extent = axis == 0 ? grid_rows : grid_cols;
        const float centre = ((float)index + 0.5f) / (float)extent;
        const float coordinate = 2.0f * centre - 1.0f;
        const float exponent = (float)((double)f * (4.0 / (double)head_dim));
        const float inv_freq = 1.0f / powf(theta, exponent);
        const float angle = (6.28318530717958647692f * coordinate) * inv_freq;
        float sin_angle, cos_angle;
        sincosf(angle, &sin_angle, &cos_angle);
        out[at] = from_float<T>(a * cos_angle - b * sin_angle);
        out[at + half] = from_float<T>(b * cos_angle + a * sin_angle);
    }
}

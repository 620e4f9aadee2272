// Patch embedding, the part before the projection matmul: cut f32 NCHW pixels into patch rows
// [B * N, C * P * P] in the storage dtype, each row in (channel, y, x) order (the order of a
// Conv2d weight [hidden, C, P, P] flattened), and write the CLS row of every image of the
// token tensor [B, T, hidden]: tokens[b, 0, :] = cls + pos[0, :]. The projection matmul then
// writes token rows 1..N with pos[1..N] as its residual.
//
// blockIdx.y == 0 copies patches, blockIdx.y == 1 writes CLS rows; both walk their elements
// with a grid-stride loop. The token tensor is stored as TT: the run's dtype T, or f32 when a
// half-precision run keeps its residual stream in f32. A patch row's P pixels along x are contiguous in the image and in
// the output, so with VEC = 4 (P and W multiples of 4, pointers aligned) each thread moves one
// 16-byte vector of pixels; otherwise VEC = 1. Integer division decodes the indices: this
// kernel moves about 0.6 MB per 224x224 image, far from any bound that would make it matter.
#include "common.cuh"

template <typename T, typename TT, int VEC, int THREADS>
__device__ __forceinline__ void patchify_with_cls(const float* pixels, int batch, int channels, int height,
                                                  int width, int patch, const T* cls, const T* pos, int hidden,
                                                  int tokens_per_image, T* patches, TT* tokens) {
    const long long stride = (long long)gridDim.x * THREADS;
    const long long first = (long long)blockIdx.x * THREADS + threadIdx.x;
    if (blockIdx.y == 0) {
        const int grid_h = height / patch;
        const int grid_w = width / patch;
        const int patch_area = patch * patch;
        const long long row_len = (long long)channels * patch_area;
        const long long vectors = (long long)batch * grid_h * grid_w * row_len / VEC;
        for (long long i = first; i < vectors; i += stride) {
            const long long e = i * VEC;
            const long long r = e / row_len;
            const int k = (int)(e - r * row_len);
            const int c = k / patch_area;
            const int y = (k / patch) % patch;
            const int x = k % patch;
            const int b = (int)(r / ((long long)grid_h * grid_w));
            const int cell = (int)(r % ((long long)grid_h * grid_w));
            const int py = cell / grid_w;
            const int px = cell % grid_w;
            const long long src = (((long long)b * channels + c) * height + (long long)py * patch + y) * width +
                                  (long long)px * patch + x;
            const Vec<float, VEC> v = load_vec<float, VEC>(pixels + src);
            Vec<T, VEC> o;
#pragma unroll
            for (int j = 0; j < VEC; ++j) o.v[j] = from_float<T>(v.v[j]);
            store_vec<T, VEC>(patches + e, o);
        }
    } else {
        const long long elements = (long long)batch * hidden;
        for (long long i = first; i < elements; i += stride) {
            const int b = (int)(i / hidden);
            const int h = (int)(i % hidden);
            tokens[(long long)b * tokens_per_image * hidden + h] = from_float<TT>(to_float(cls[h]) + to_float(pos[h]));
        }
    }
}

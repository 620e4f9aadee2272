// Patch embedding, the part before the projection matmul: cut f32 NCHW pixels into patch rows
// [B * N, C * P * P] in the storage dtype, each row in (channel, y, x) order (the order of a
// Conv2d weight [hidden, C, P, P] flattened), and write the S prefix rows of every image of the
// token tensor [B, T, hidden] (T = S + N): tokens[b, j, :] = prefix[j, :] + pos[j, :] for
// j < S (the CLS token, DeiT's distillation token, DINOv2's registers with zero positions; S
// may be 0, as in SigLIP). The projection matmul then writes token rows S..T with pos[S..T]
// as its residual.
//
// blockIdx.y == 0 copies patches, blockIdx.y == 1 writes prefix rows. The token tensor is stored
// as TT: the run's dtype T, or f32 when a half-precision run keeps its residual stream in f32.
// A patch row's P pixels along x are contiguous in the image and in the output, so with
// VEC = 4 (P and W multiples of 4, pointers aligned) each thread moves one 16-byte vector of
// pixels; otherwise VEC = 1.
//
// Each thread of a copying block owns one vector slot of a patch row (its channel, y and x,
// decoded once) and walks the rows gridDim.x apart, decoding each row's image and cell with
// two 32-bit divisions (the launcher keeps the row count below 2^31): walking the flat element
// index with 64-bit divisions per vector made the divisions, not the bytes, set the time.
// Measured: benchmarks/NOTES.md, 2026-11-24 "Patchify".
#include "common.cuh"

template <typename T, typename TT, int VEC, int THREADS>
__device__ __forceinline__ void patchify_with_prefix(const float* pixels, int batch, int channels, int height,
                                                     int width, int patch, const T* prefix, int prefix_rows,
                                                     const T* pos, int hidden, int tokens_per_image, T* patches,
                                                     TT* tokens) {
    if (blockIdx.y == 0) {
        const unsigned grid_w = (unsigned)(width / patch);
        const unsigned cells = (unsigned)(height / patch) * grid_w;
        const int patch_area = patch * patch;
        const int row_len = channels * patch_area;
        const unsigned rows = (unsigned)batch * cells;
        for (int slot = threadIdx.x; slot * VEC < row_len; slot += THREADS) {
            const int k = slot * VEC;
            const int c = k / patch_area;
            const int y = (k - c * patch_area) / patch;
            const int x = k - c * patch_area - y * patch;
            // The slot's pixel in the image's top-left patch.
            const long long slot_offset = ((long long)c * height + y) * width + x;
            for (unsigned r = blockIdx.x; r < rows; r += gridDim.x) {
                const unsigned b = r / cells;
                const unsigned cell = r - b * cells;
                const unsigned py = cell / grid_w;
                const unsigned px = cell - py * grid_w;
                const long long src = ((long long)b * channels * height + (long long)py * patch) * width +
                                      (long long)px * patch + slot_offset;
                const Vec<float, VEC> v = load_vec<float, VEC>(pixels + src);
                Vec<T, VEC> o;
#pragma unroll
                for (int j = 0; j < VEC; ++j) o.v[j] = from_float<T>(v.v[j]);
                store_vec<T, VEC>(patches + (long long)r * row_len + k, o);
            }
        }
    } else {
        const long long stride = (long long)gridDim.x * THREADS;
        const long long per_image = (long long)prefix_rows * hidden;
        const long long elements = (long long)batch * per_image;
        for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x; i < elements; i += stride) {
            const long long b = i / per_image;
            const long long j = i - b * per_image;  // row * hidden + column within the prefix
            tokens[b * tokens_per_image * hidden + j] = from_float<TT>(to_float(prefix[j]) + to_float(pos[j]));
        }
    }
}

// Each row divided by its Euclidean norm, out[r, :] = x[r, :] / ||x[r, :]||, as CLIP and SigLIP
// normalise image and text embeddings before their cosine similarities. One warp per row: the
// rows are embeddings (a few hundred to a thousand columns, one row per image or label), so a
// warp strides across the row, sums the squares in fp32, reduces them with shuffles, and
// divides each value by the norm (a division, as torch's x / x.norm(): no reciprocal rounding).
// A row of zeros gives NaN, as it does in torch.
#include "common.cuh"

template <typename TI, typename TO>
__device__ __forceinline__ void l2_normalize_rows(const TI* x, TO* out, int rows, int cols) {
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;
    const TI* in = x + row * cols;
    TO* o = out + row * cols;
    float sum = 0.0f;
    for (int c = lane; c < cols; c += 32) {
        const float v = to_float(in[c]);
        sum = fmaf(v, v, sum);
    }
    const float norm = sqrtf(warp_sum(sum));
    for (int c = lane; c < cols; c += 32) o[c] = from_float<TO>(to_float(in[c]) / norm);
}

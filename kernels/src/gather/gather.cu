// A strided row gather: the CLS token of every sequence, ahead of the classifier.
#include "common.cuh"

// out[r, c] = src[r * src_row_stride + src_offset + c] for r < rows, c < cols: one block per
// row, threads striding across its columns.
template <typename T>
__device__ __forceinline__ void gather_rows_program(const T* src, T* out, long long src_row_stride,
                                                    long long src_offset, int cols) {
    const long long r = blockIdx.x;
    const T* in = src + r * src_row_stride + src_offset;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[r * cols + c] = in[c];
}

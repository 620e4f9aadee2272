// Row gathers: the CLS token of every sequence ahead of the classifier (gather_rows); a text
// tower's token embedding (token_embedding) and its pooled end-of-text token (end_token_rows).
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

// ---------------------------------------------------------------------------------------------
// Text towers (CLIP, SigLIP): the token embedding at the start, and the pooled (end-of-text)
// token at the end.

// NVRTC has no <cmath>, hence no NAN.
__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fffffff); }

// out[r, :] = table[ids[r], :] + positions[r % tokens, :], summed in f32 and rounded once to
// TO (the table's type, or f32: a residual stream kept in f32). One block per row, threads
// striding across its columns (neighbouring threads, neighbouring columns: coalesced). Ids
// come as f32 (the runtime's graph inputs are f32; every integer below 2^24 is exact there).
// An id that is not an integer in [0, vocab) (NaN, ±inf, 3.5, -1, vocab) reads nothing: its
// row is written as NaN, so bad input never passes for a valid embedding.
template <typename TT, typename TO>
__device__ __forceinline__ void token_embedding_program(const float* ids, const TT* table, const TT* positions,
                                                        TO* out, int tokens, int dim, int vocab) {
    const long long r = blockIdx.x;
    const float id = ids[r];
    // NaN fails every comparison; floorf(±inf) == ±inf, which fails the range test.
    const bool valid = id >= 0.0f && id < (float)vocab && floorf(id) == id;
    TO* out_row = out + r * dim;
    if (!valid) {
        for (int c = threadIdx.x; c < dim; c += blockDim.x) out_row[c] = from_float<TO>(quiet_nan());
        return;
    }
    const TT* word = table + (long long)id * dim;
    const TT* position = positions + (r % tokens) * dim;
    for (int c = threadIdx.x; c < dim; c += blockDim.x)
        out_row[c] = from_float<TO>(to_float(word[c]) + to_float(position[c]));
}

// The pooled token of every sequence: p = the first position of the largest id (HIGHEST_ID,
// torch's argmax over the ids: CLIP's end-of-text token has the largest id of its vocabulary)
// or the first position whose id is end_id (else the first position whose (id == end_id) is
// largest: position 0 when none matches, as torch's argmax of an all-false row); then
// out[b, :] = hidden[b, p, :]. Both rules are one argmax, of the id or of the match: each
// thread keeps the first position of its largest key over the positions it strides, the block
// reduces (warp shuffles, then one value a warp through shared memory), ties to the lower
// position. A NaN id never wins (torch would count it as the largest); a sequence of NaN ids
// picks position 0. One block per sequence: T is short (77, 64), and the copy is one row.
struct Candidate {
    float key;
    int position;  // `tokens` (past every position) until a key is seen
};

__device__ __forceinline__ Candidate better(Candidate a, Candidate b) {
    return b.key > a.key || (b.key == a.key && b.position < a.position) ? b : a;
}

template <typename T, bool HIGHEST_ID>
__device__ __forceinline__ void end_token_rows_program(const T* hidden, const float* ids, T* out, int tokens,
                                                       int dim, float end_id) {
    __shared__ Candidate warp_best[32];
    __shared__ int chosen;
    const long long b = blockIdx.x;
    const float* sequence = ids + b * tokens;

    Candidate best{-infinity(), tokens};
    for (int p = threadIdx.x; p < tokens; p += blockDim.x) {
        const float id = sequence[p];
        const float key = HIGHEST_ID ? id : (id == end_id ? 1.0f : 0.0f);
        // Positions rise: a later equal key never replaces an earlier one. A NaN key never
        // compares true.
        if (key > best.key || (key == best.key && best.position == tokens)) best = Candidate{key, p};
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        const Candidate other{__shfl_xor_sync(0xffffffffu, best.key, offset),
                              __shfl_xor_sync(0xffffffffu, best.position, offset)};
        best = better(best, other);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_best[warp] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
        Candidate block_best = warp_best[0];
        for (int w = 1; w < (int)(blockDim.x + 31) / 32; ++w) block_best = better(block_best, warp_best[w]);
        chosen = block_best.position < tokens ? block_best.position : 0;
    }
    __syncthreads();
    const T* row = hidden + (b * tokens + chosen) * dim;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) out[b * dim + c] = row[c];
}

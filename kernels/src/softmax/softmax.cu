// Row-wise softmax with a fused scale: out = softmax(scale * x) over the last dimension, the
// row maximum subtracted before exp (numerically stable), as the CPU twin and Triton's
// fused-softmax tutorial: the row is read once and written once. All arithmetic is fp32:
// scale * x, minus the row maximum, exp, an fp32 sum, times 1 / sum, rounded once to T.
// Two programs share that arithmetic and differ in how they move the rows.
//
// softmax_rows (any shape): the block layout is layernorm's: a group of 32 * GROUP_WARPS
// threads per row, ROWS groups per block; one warp per row for rows up to 256 vectors, so the
// reductions are register shuffles only. With CACHED > 0 the row stays in registers between
// the max, the sum and the store; masked slots hold -inf, whose exp is 0. With CACHED == 0
// (long rows) one online pass keeps a running maximum and a running sum rescaled whenever the
// maximum grows, and a second pass writes. VEC elements per access: 16 bytes when cols is a
// multiple of VEC and x and out are 16-byte aligned, else 1. x may be stored as f32 where out is
// f16 or bf16 (TI): a bf16 run keeps the unfused attention's scores in f32 (runtime/src/plan.rs).
//
// softmax_spans (rows of up to 512 whose length is no multiple of 16 bytes, sm_80+). Such rows
// (the ViT attention softmax's 197 columns) start at odd addresses, so softmax_rows takes them
// with VEC = 1: every lane moves 2 bytes per access, 8x the load/store instructions of 16-byte
// ones. A warp here owns a span of G = 16 / sizeof(T) consecutive rows: G * cols elements, exactly cols 16-byte vectors, 16-byte aligned whatever cols is
// when x and out are and the span starts at a multiple of G rows. The warp
//   1. copies the span to shared memory with 16-byte cp.async, every copy in flight before the
//      first wait (3 KB a warp at 197 halves),
//   2. computes its G rows one after the other, the whole warp on each row as in softmax_rows
//      (lane i holds elements i, i + 32, ...: conflict-free, shuffle reductions), and writes
//      the probabilities back to shared memory in T,
//   3. stores the span with 16-byte vector stores.
// A last span of fewer than G rows is copied element by element (one warp per launch). exp is
// one ex2 with log2(e) folded into the scale; the rounding of scale * log2(e) * x moves an
// output by at most |scale * x| * 2^-24 relative (2e-5 at |scale * x| = 400), as the rounding
// of scale * x does in the twin. Each warp's load, compute and store run in turn; up to 64
// resident warps an SM (16 blocks of 12.6 KB at 197 columns) overlap them.
// Measured: benchmarks/NOTES.md, 2026-11-24 "Softmax over spans".
//
// Causal (CAUSAL = true, the unfused attention of a text tower): rows are the scores of
// [batch, heads, queries] flattened, so row r holds query q = r % queries, and only its
// columns 0..=q (its live columns) take part: the others are -inf before the maximum (exp
// gives exactly 0, so they add nothing to the sum), and are written as exactly 0 whatever x
// holds there. The launcher passes `queries` as an extra argument; CAUSAL = false never reads
// it and removes every added test at compile time, so the non-causal programs are unchanged.
#include "common.cuh"

// Columns 0..=q of a row of query q (all `cols` when not causal): 1 to cols.
template <bool CAUSAL>
__device__ __forceinline__ int live_columns(long long row, int cols, int queries) {
    if (!CAUSAL) return cols;
    const int q = (int)(row % queries);
    return q + 1 < cols ? q + 1 : cols;
}

template <typename TI, typename T, int VEC, int GROUP_WARPS, int ROWS, int CACHED, bool CAUSAL>
__device__ __forceinline__ void softmax_rows(const TI* x, T* out, int rows, int cols, float scale,
                                             int queries = 1) {
    static_assert(GROUP_WARPS == 1 || ROWS == 1, "a block holds several rows only with one warp per row");
    constexpr int GROUP = 32 * GROUP_WARPS;
    __shared__ float scratch[GROUP_WARPS * ROWS];

    const int rank = threadIdx.x % GROUP;
    const int vectors = cols / VEC;
    // Each group walks rows gridDim.x * ROWS apart, as in layernorm.
    const long long row_stride = (long long)gridDim.x * ROWS;
    for (long long row = blockIdx.x * ROWS + threadIdx.x / GROUP; row < rows; row += row_stride) {
        const TI* x_row = x + row * cols;
        T* out_row = out + row * cols;
        // Causal: the live columns, and the vectors that hold any of them (the rest of the row
        // is written as 0 without being read).
        const int live = live_columns<CAUSAL>(row, cols, queries);
        const int live_vectors = CAUSAL ? (live + VEC - 1) / VEC : vectors;

        if (CACHED > 0) {
            float v[CACHED > 0 ? CACHED : 1][VEC];
            float max = -infinity();
#pragma unroll
            for (int c = 0; c < CACHED; ++c) {
                const int i = rank + c * GROUP;
                if (i < live_vectors) {
                    const Vec<TI, VEC> loaded = load_vec<TI, VEC>(x_row + i * VEC);
#pragma unroll
                    for (int j = 0; j < VEC; ++j) {
                        v[c][j] = CAUSAL && i * VEC + j >= live ? -infinity() : scale * to_float(loaded.v[j]);
                        max = fmaxf(max, v[c][j]);
                    }
                } else {
#pragma unroll
                    for (int j = 0; j < VEC; ++j) v[c][j] = -infinity();
                }
            }
            max = group_reduce<MaxOp, GROUP_WARPS>(max, scratch);
            // Causal: masked columns hold -inf, whose exp is exactly 0.
            float sum = 0.0f;
#pragma unroll
            for (int c = 0; c < CACHED; ++c) {
                const bool valid = rank + c * GROUP < vectors;
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    v[c][j] = valid ? expf(v[c][j] - max) : 0.0f;
                    sum += v[c][j];
                }
            }
            const float inv_sum = 1.0f / group_reduce<SumOp, GROUP_WARPS>(sum, scratch);
#pragma unroll
            for (int c = 0; c < CACHED; ++c) {
                const int i = rank + c * GROUP;
                if (i < vectors) {
                    Vec<T, VEC> r;
#pragma unroll
                    for (int j = 0; j < VEC; ++j) r.v[j] = from_float<T>(v[c][j] * inv_sum);
                    store_vec<T, VEC>(out_row + i * VEC, r);
                }
            }
        } else {
            // Online pass: `sum` is the sum of exp(v - max) for the running `max`.
            float max = -infinity();
            float sum = 0.0f;
            for (int i = rank; i < live_vectors; i += GROUP) {
                const Vec<TI, VEC> loaded = load_vec<TI, VEC>(x_row + i * VEC);
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    const float v = CAUSAL && i * VEC + j >= live ? -infinity() : scale * to_float(loaded.v[j]);
                    if (v > max) {
                        sum = sum * expf(max - v) + 1.0f;
                        max = v;
                    } else if (v != -infinity()) {
                        sum += expf(v - max);
                    }
                }
            }
            const float row_max = group_reduce<MaxOp, GROUP_WARPS>(max, scratch);
            const float mine = max == -infinity() ? 0.0f : sum * expf(max - row_max);
            const float inv_sum = 1.0f / group_reduce<SumOp, GROUP_WARPS>(mine, scratch);
            for (int i = rank; i < live_vectors; i += GROUP) {
                const Vec<TI, VEC> loaded = load_vec<TI, VEC>(x_row + i * VEC);
                Vec<T, VEC> r;
#pragma unroll
                for (int j = 0; j < VEC; ++j)
                    r.v[j] = CAUSAL && i * VEC + j >= live
                                 ? from_float<T>(0.0f)
                                 : from_float<T>(expf(scale * to_float(loaded.v[j]) - row_max) * inv_sum);
                store_vec<T, VEC>(out_row + i * VEC, r);
            }
            if (CAUSAL) {
                Vec<T, VEC> zeros;
#pragma unroll
                for (int j = 0; j < VEC; ++j) zeros.v[j] = from_float<T>(0.0f);
                for (int i = live_vectors + rank; i < vectors; i += GROUP) store_vec<T, VEC>(out_row + i * VEC, zeros);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Spans of G rows per warp (see the top of the file). PER_LANE = ceil(cols / 32) exactly (the
// launcher picks it so): the 16-byte vectors of a span a lane copies, and the elements of a
// row a lane holds. Only the last of those slots can fall past the row, so one predicate per
// lane covers every mask. WARPS warps per block, one span each; dynamic shared memory:
// WARPS * cols 16-byte vectors.
//
// One span per warp rather than a persistent grid-stride loop: at the ViT shape a persistent
// grid of every resident warp (132 SMs x 64) would give each warp 2.24 spans, three rounds for
// 2.24 rounds' work with most warps idle in the last, while the hardware scheduler keeps
// handing small blocks to whichever SM has room. Nor would a persistent warp overlap its own
// copies and arithmetic without a second span buffer, which halves the resident warps.
//
// Causal: the span is copied and stored whole as before; each row masks its columns past its
// query (-inf before the maximum, written as exactly 0).
template <typename T, int PER_LANE, int WARPS, bool CAUSAL>
__device__ __forceinline__ void softmax_spans(const T* x, T* out, int rows, int cols, float scale,
                                              int queries = 1) {
    static_assert(16 % sizeof(T) == 0, "a 16-byte vector holds whole elements");
    constexpr int G = 16 / sizeof(T);
    extern __shared__ __align__(16) unsigned char span_shared[];

    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    const long long first_row = ((long long)blockIdx.x * WARPS + warp) * G;
    if (first_row >= rows) return;  // whole warps only: nothing below synchronises the block
    const int span_rows = rows - first_row < G ? (int)(rows - first_row) : G;
    const bool full = span_rows == G;
    T* span = reinterpret_cast<T*>(span_shared) + warp * G * cols;
    const unsigned span_address = shared_address(span);
    const T* x_span = x + first_row * cols;
    T* out_span = out + first_row * cols;
    // Slot c of this lane is element (or vector) lane + 32c: always inside the row (or span)
    // but for the last slot.
    const bool last_slot_inside = lane + 32 * (PER_LANE - 1) < cols;
    auto inside = [&](int c) { return c < PER_LANE - 1 || last_slot_inside; };

    if (full) {
#pragma unroll
        for (int c = 0; c < PER_LANE; ++c) {
            const int i = lane + c * 32;
            if (inside(c)) cp_async_16(span_address + i * 16, x_span + i * G, 16);
        }
        cp_async_commit();
        cp_async_wait<0>();
    } else {
        for (int i = lane; i < span_rows * cols; i += 32) span[i] = x_span[i];
    }
    __syncwarp();

    // Rows one at a time: two rows interleaved would hide the shuffle latency within the warp,
    // but the other warps on the SM (up to 64 at 197 columns) hide it as well, at no registers.
    const float scale_log2 = scale * 1.4426950408889634f;
#pragma unroll 1
    for (int r = 0; r < span_rows; ++r) {
        T* row = span + r * cols;
        const int live = live_columns<CAUSAL>(first_row + r, cols, queries);
        float v[PER_LANE];
        float max = -infinity();
#pragma unroll
        for (int c = 0; c < PER_LANE; ++c) {
            const bool masked = CAUSAL && lane + c * 32 >= live;
            v[c] = inside(c) && !masked ? scale_log2 * to_float(row[lane + c * 32]) : -infinity();
            max = fmaxf(max, v[c]);
        }
        max = warp_max(max);
        float sum = 0.0f;
#pragma unroll
        for (int c = 0; c < PER_LANE; ++c) {
            v[c] = exp2_approx_ftz(v[c] - max);  // a slot past the row (or masked) holds -inf: exactly 0
            sum += v[c];
        }
        const float inv_sum = 1.0f / warp_sum(sum);
#pragma unroll
        for (int c = 0; c < PER_LANE; ++c)
            if (inside(c)) row[lane + c * 32] = from_float<T>(v[c] * inv_sum);
    }
    __syncwarp();

    if (full) {
#pragma unroll
        for (int c = 0; c < PER_LANE; ++c) {
            const int i = lane + c * 32;
            if (inside(c)) store_vec<T, G>(out_span + i * G, load_vec<T, G>(span + i * G));
        }
    } else {
        for (int i = lane; i < span_rows * cols; i += 32) out_span[i] = span[i];
    }
}

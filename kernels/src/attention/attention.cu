// Fused attention, FlashAttention-2 style: O = softmax(scale · Q·Kᵀ) · V for one (batch, head)
// and one block of query rows per CTA, without writing the T x T scores anywhere.
//
// Unfused, attention is three kernels (scores matmul, softmax, context matmul) and the
// [B, heads, T, T] scores are written, read, written and read again in the storage type: at
// ViT-B/16 batch 64 that is 4 x 60 MB against 58 MB of Q, K, V and O. Here each CTA keeps its
// BLOCK_M x BLOCK_N block of scores in registers, and the softmax is computed online
// (Milakov & Gimelshein; Dao, FlashAttention-2): a running maximum and a running sum per row,
// the output accumulator rescaled whenever the maximum grows, one division at the end. The
// global traffic is Q read once per CTA, K and V once per query block, O written once.
//
// One CTA = WARPS warps; warp w owns ROW_GROUPS groups of 16 query rows of the block, so the
// whole softmax of a row lives in one quad of one warp (no shared-memory reductions):
// - Q tile [BLOCK_M][HEAD_DIM]: copied once, then each warp holds its rows' A fragments in
//   registers for the whole key loop.
// - K and V tiles [BLOCK_N][HEAD_DIM]: streamed through shared memory, two buffers, filled by
//   cp.async one key block ahead of the block being multiplied.
// - S = Q·Kᵀ: mma.sync m16n8k16, fp32 accumulators; K rows are the B operand's columns, read
//   with ldmatrix (no transpose: K is stored [key][dim], which is B "col-major").
// - online softmax on the S registers in fp32; exp2 (ex2.approx.ftz, one MUFU operation) with
//   scale·log2(e) folded into the scores; key columns past T set to -inf (exp2 gives 0),
//   which a partial last block needs.
// - work wholly past T is skipped: a partial last key block multiplies only its 16-key steps
//   that hold a key below T, and a warp whose query rows all lie past T only copies. At
//   T = 197, BLOCK_N = 64 and 32 rows a warp that is 208 of 256 keys and 224 of 256 rows.
// - P·V: P converted to the storage type in registers, and the accumulator layout of two
//   adjacent n8 blocks of S is exactly the A-operand layout of one k16 block of P (thread
//   (g, q) holds rows g, g + 8 and columns 2q, 2q + 1 of each n8 block, which are the k
//   columns 2q, 2q + 1 and 2q + 8, 2q + 9 of the k16 block), so P never leaves registers. V
//   ([key][dim] = B as [k][n]) is read with ldmatrix .trans.
// - the end: the row sums are reduced over the quad, O scaled by 1/sum in fp32, cast once,
//   staged through the warp's own rows of the Q tile and stored in 16-byte runs.
//
// Shared-memory rows are HEAD_DIM + 8 elements apart (one 16-byte chunk of padding), not
// XOR-swizzled as in matmul.cu: an XOR swizzle keeps rows conflict-free only when a row is a
// power-of-two number of 16-byte chunks, and head dims 48, 80 and 112 are 6, 10 and 14 chunks.
// With a pitch of an odd number of chunks (HEAD_DIM / 8 is even for every HEAD_DIM that is a
// multiple of 16) the 8 rows one ldmatrix phase reads start in 8 different 16-byte bank
// groups of the 128-byte line: conflict-free for the plain and the transposing loads, and for
// the 4-byte stores of the output staging.
//
// Causal (CAUSAL = true, CLIP's and SigLIP's text towers): query row i attends to keys 0..=i
// only. Key blocks wholly after the CTA's last query row are neither loaded nor computed (the
// key loop ends at the block holding key min(m0 + BLOCK_M, T) - 1), and within the CTA a warp
// skips the key blocks wholly after its own last row (it still copies and waits with the
// others). A block that crosses the warp's diagonal (or runs past T) is a masked block: scores
// of keys past the row are set to -inf (for every stored row, row < T, that masks every key
// past T too; a row past T, never stored, keeps finite scores: Q, K and V rows past T are
// zero-filled), and its 16-key steps wholly past the warp's last row (or T) are skipped, as a
// partial last block's are. A block the warp computes
// always starts at or before its first row (blocks start at multiples of BLOCK_N, warps at
// multiples of 16 · ROW_GROUPS, which divides BLOCK_N), so no row of a computed block is
// wholly masked; and block 0 holds key 0 <= every row, so every row's running maximum is
// finite from the first block on. Were a later block wholly masked for a row, its block
// maximum would be -inf, the new maximum the old (finite) one, the correction exp2(0) = 1 and
// every weight exp2(-inf) = 0: the online softmax is unchanged. CAUSAL = false removes every
// test at compile time: the non-causal programs are the code they were.
//
// Key padding (key_lengths not null: SigLIP 2's NaFlex sequences, padded at the end): batch
// item b attends to its first len = key_lengths[b] keys (clamped to 1..=T), read once per CTA
// from device memory. The key side then runs as if T were len: the key loop ends at the block
// holding key len - 1 (a short item's CTAs skip the rest: that is the point), K and V rows
// past len are zero-filled, and the block holding len - 1 is the partial block whose scores
// past len are -inf. Query rows stay T: padded query rows attend to the valid keys and are
// stored, finite, as transformers' masked attention gives them. Not with CAUSAL (the launcher
// refuses the pair). A null pointer is the unmasked program: keys = T.
//
// Rows past T: Q, K and V rows past T are zero-filled by cp.async (0 source bytes), so their
// products are finite (0 · V = 0 needs V finite too); query rows past T are never stored.
// Every Q, K, V and O row must start on a 16-byte boundary (the launcher checks the pointers
// and strides).

#include "common.cuh"

namespace vitrt_attention {

// A strided view of Q, K, V or O, in elements (kernels::Operand): row r of head h of batch b
// starts at offset + b·batch_stride + h·head_stride + r·row_stride.
struct View {
    long long offset, row_stride, batch_stride, head_stride;
    __device__ __forceinline__ long long head_base(int batch, int head) const {
        return offset + (long long)batch * batch_stride + (long long)head * head_stride;
    }
};

// Copies `rows` rows of HEAD_DIM elements starting at row `first` of a head into a shared
// tile of ROWS rows (pitch PITCH elements); rows at or past `tokens` are zero-filled. Every
// thread copies the same chunks of every tile: THREADS divides ROWS · HEAD_DIM / 8.
template <typename T, int HEAD_DIM, int ROWS, int PITCH, int THREADS>
__device__ __forceinline__ void copy_tile(unsigned tile, const T* head, long long row_stride, int first,
                                          int tokens) {
    constexpr int kChunks = HEAD_DIM / 8;
    constexpr int kPerThread = ROWS * kChunks / THREADS;
    static_assert(ROWS * kChunks % THREADS == 0, "tiles split evenly over the threads");
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
        const int id = threadIdx.x + i * THREADS;
        const int row = id / kChunks, chunk = id % kChunks;
        const int token = first + row;
        const bool inside = token < tokens;
        // A row past T reads nothing, but cp.async still wants a valid address: row 0's.
        const T* src = head + (inside ? (long long)token * row_stride : 0) + chunk * 8;
        cp_async_16(tile + (row * PITCH + chunk * 8) * (int)sizeof(T), src, inside ? 16 : 0);
    }
}

}  // namespace vitrt_attention

// The entry point every generated wrapper calls. Template arguments: the storage type (f16 or
// bf16), HEAD_DIM (a multiple of 16, at most 128), BLOCK_N (keys per tile, a multiple of 16),
// WARPS and ROW_GROUPS (each warp owns ROW_GROUPS groups of 16 query rows: BLOCK_M = 16 ·
// ROW_GROUPS · WARPS). One program per (batch, head, block of BLOCK_M query rows), in that
// order from the slowest: the CTAs of one head, which read the same K and V, run side by side
// and share them in L2.
//
// ROW_GROUPS = 2 is FlashAttention-2's shape: every K and V fragment a warp loads from shared
// memory feeds two MMAs instead of one, which halves the shared-memory traffic per MMA, and
// the two row groups' MMA, max and exp chains are independent, so a warp has work to issue
// while one of them waits.
//
// CAUSAL: query row i attends to keys 0..=i only (see the note at the top).
//
// Dynamic shared memory: (BLOCK_M + 4 · BLOCK_N) · (HEAD_DIM + 8) elements (Q, then two K and
// two V buffers).
template <typename T, int HEAD_DIM, int BLOCK_N, int WARPS, int ROW_GROUPS, bool CAUSAL>
__device__ __forceinline__ void attention_block(const T* q, const T* k, const T* v, T* o, int heads, int tokens,
                                                long long q_offset, long long q_row_stride,
                                                long long q_batch_stride, long long q_head_stride,
                                                long long k_offset, long long k_row_stride,
                                                long long k_batch_stride, long long k_head_stride,
                                                long long v_offset, long long v_row_stride,
                                                long long v_batch_stride, long long v_head_stride,
                                                long long o_offset, long long o_row_stride,
                                                long long o_batch_stride, long long o_head_stride, float scale,
                                                const int* key_lengths) {
    using namespace vitrt_attention;
    static_assert(HEAD_DIM % 16 == 0 && HEAD_DIM >= 16 && HEAD_DIM <= 256, "HEAD_DIM is a multiple of 16");
    static_assert(BLOCK_N % 16 == 0, "BLOCK_N is a multiple of 16");
    static_assert(ROW_GROUPS == 1 || ROW_GROUPS == 2, "one or two groups of 16 rows a warp");
    static_assert(!CAUSAL || BLOCK_N % (16 * ROW_GROUPS) == 0,
                  "causal: a key block the warp computes starts at or before its first row");
    constexpr int G = ROW_GROUPS;
    constexpr int kThreads = WARPS * 32;
    constexpr int kWarpRows = 16 * G;
    constexpr int kBlockM = WARPS * kWarpRows;
    constexpr int kPitch = HEAD_DIM + 8;            // elements; see the note on padding above
    constexpr int kDimFrags = HEAD_DIM / 8;         // n8 blocks of O, 16-byte chunks of a row
    constexpr int kDimSteps = HEAD_DIM / 16;        // k16 steps of Q·Kᵀ
    constexpr int kKeyFrags = BLOCK_N / 8;          // n8 blocks of S
    constexpr int kKeySteps = BLOCK_N / 16;         // k16 steps of P·V
    constexpr int kTileBytesQ = kBlockM * kPitch * (int)sizeof(T);
    constexpr int kTileBytesKV = BLOCK_N * kPitch * (int)sizeof(T);
    // scale · log2(e): exp(scale · s - m) = exp2(s · scale·log2(e) - m'), one FFMA and one ex2.
    const float scale_log2 = scale * 1.4426950408889634f;

    extern __shared__ __align__(128) unsigned char shared_tiles[];
    const unsigned q_tile = shared_address(shared_tiles);
    const unsigned k_tiles = q_tile + kTileBytesQ;              // [2] buffers
    const unsigned v_tiles = k_tiles + 2 * kTileBytesKV;        // [2] buffers

    const int query_blocks = (tokens + kBlockM - 1) / kBlockM;
    const int program = blockIdx.x;
    const int matrix = program / query_blocks;
    const int m0 = (program - matrix * query_blocks) * kBlockM;
    const int batch = matrix / heads;
    const int head = matrix - batch * heads;

    const View qv{q_offset, q_row_stride, q_batch_stride, q_head_stride};
    const View kv{k_offset, k_row_stride, k_batch_stride, k_head_stride};
    const View vv{v_offset, v_row_stride, v_batch_stride, v_head_stride};
    const View ov{o_offset, o_row_stride, o_batch_stride, o_head_stride};
    const T* q_head = q + qv.head_base(batch, head);
    const T* k_head = k + kv.head_base(batch, head);
    const T* v_head = v + vv.head_base(batch, head);

    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int quad_row = lane >> 2;        // g: rows g and g + 8 of a group's 16
    const int quad_col = (lane & 3) * 2;   // 2q: columns 2q, 2q + 1 of every n8 block
    const int warp_row0 = warp * kWarpRows;  // the warp's first row in the block

    // The keys this item attends to: its length clamped to 1..=T, or every key.
    const int keys = key_lengths == nullptr ? tokens : min(max(key_lengths[batch], 1), tokens);
    int key_blocks = (keys + BLOCK_N - 1) / BLOCK_N;
    // Causal: no key after the CTA's last query row (below T) is needed.
    if (CAUSAL) key_blocks = (min(m0 + kBlockM, tokens) - 1) / BLOCK_N + 1;
    // Causal: the warp's first and last query rows, T - 1 at most (rows past T are never
    // stored, and keys past T are masked for every stored row).
    const int warp_first_row = min(m0 + warp_row0, tokens - 1);
    const int warp_last_row = min(m0 + warp_row0 + kWarpRows - 1, tokens - 1);
    // A warp whose query rows all lie past T (the last query block of a T that is not a
    // multiple of BLOCK_M) only helps with the copies.
    const bool warp_has_rows = m0 + warp_row0 < tokens;
    auto load_keys_values = [&](int block, int buffer) {
        const int n0 = block * BLOCK_N;
        copy_tile<T, HEAD_DIM, BLOCK_N, kPitch, kThreads>(k_tiles + buffer * kTileBytesKV, k_head, kv.row_stride, n0,
                                                          keys);
        copy_tile<T, HEAD_DIM, BLOCK_N, kPitch, kThreads>(v_tiles + buffer * kTileBytesKV, v_head, vv.row_stride, n0,
                                                          keys);
    };

    // Group 0: the Q tile and the first key block.
    copy_tile<T, HEAD_DIM, kBlockM, kPitch, kThreads>(q_tile, q_head, qv.row_stride, m0, tokens);
    load_keys_values(0, 0);
    cp_async_commit();

    unsigned q_frag[G][kDimSteps][4];
    float acc[G][kDimFrags][4];  // O, unnormalised
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
        for (int j = 0; j < kDimFrags; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[g][j][e] = 0.0f;
    // Per group and row slot (0: row g, 1: row g + 8): the running maximum of the scaled
    // scores, and this thread's share of the running sum (its two columns of every n8 block;
    // the quad's four shares are added at the end: they are all rescaled by the same factors).
    float row_max[G][2];
    float row_sum[G][2];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        row_max[g][0] = row_max[g][1] = -infinity();
        row_sum[g][0] = row_sum[g][1] = 0.0f;
    }

    // One key block for the warp's rows. kPartial (a constant at each of the two calls, which
    // inlining turns into two copies of the body): the block runs past T, so scores past T are
    // masked, and the 16-key steps wholly past T are skipped (at T = 197 the last block holds
    // 5 keys: computing all 64 would be 23% more MMA and exp work for the head). Full blocks
    // get the same code without a single test: branches between the unrolled MMAs cost the
    // scheduler its interleaving (measured: benchmarks/NOTES.md, 2026-11-24 "Attention, work
    // past T"). Causal: kPartial also marks a block that crosses the warp's diagonal; the keys
    // past the warp's last row (or T) are skipped, and each row's keys past the row masked.
    auto key_block = [&](const bool kPartial, int block, unsigned k_tile, unsigned v_tile) {
        const int n0 = block * BLOCK_N;
        const int live_keys = !kPartial ? BLOCK_N : CAUSAL ? warp_last_row + 1 - n0 : keys - n0;

        // S = Q·Kᵀ for the warp's rows and the block's BLOCK_N keys; each K fragment feeds
        // every row group.
        float s[G][kKeyFrags][4];
#pragma unroll
        for (int g = 0; g < G; ++g)
#pragma unroll
            for (int j = 0; j < kKeyFrags; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[g][j][e] = 0.0f;
#pragma unroll
        for (int j = 0; j < kKeyFrags; j += 2) {
            if (kPartial && j * 8 >= live_keys) break;
#pragma unroll
            for (int step = 0; step < kDimSteps; ++step) {
                // Matrices: keys 0-7 x dims 0-7, keys 0-7 x dims 8-15, keys 8-15 x dims 0-7,
                // keys 8-15 x dims 8-15 of this pair of n8 blocks: b0, b1 of block j, then of
                // block j + 1.
                const int row = j * 8 + (lane & 7) + ((lane >> 4) << 3);
                const int chunk = step * 2 + ((lane >> 3) & 1);
                unsigned b[4];
                ldmatrix_x4(b, k_tile + (row * kPitch + chunk * 8) * (int)sizeof(T));
#pragma unroll
                for (int g = 0; g < G; ++g) {
                    mma_16816<T>(s[g][j], q_frag[g][step], b[0], b[1]);
                    mma_16816<T>(s[g][j + 1], q_frag[g][step], b[2], b[3]);
                }
            }
        }

        // Scale into the exp2 domain and mask the keys past T (only a partial block has any);
        // causal: the keys past each row. Score e of n8 block j is key n0 + j·8 + 2q + (e & 1)
        // against row m0 + warp_row0 + g·16 + quad_row + 8·(e >> 1); moving everything but the
        // constants to the right, each score is one compare of a constant with `diagonal`.
        float block_max[G][2];
#pragma unroll
        for (int g = 0; g < G; ++g) {
            block_max[g][0] = block_max[g][1] = -infinity();
            const int diagonal = m0 + warp_row0 + g * 16 + quad_row - n0 - quad_col;
#pragma unroll
            for (int j = 0; j < kKeyFrags; ++j) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float x = s[g][j][e] * scale_log2;
                    if (CAUSAL) {
                        if (kPartial && j * 8 + (e & 1) - 8 * (e >> 1) > diagonal) x = -infinity();
                    } else {
                        if (kPartial && j * 8 + quad_col + (e & 1) >= live_keys) x = -infinity();
                    }
                    s[g][j][e] = x;
                    block_max[g][e >> 1] = fmaxf(block_max[g][e >> 1], x);
                }
            }
        }
        // The quad (lanes 4g .. 4g + 3) holds a row's BLOCK_N columns between its four threads.
#pragma unroll
        for (int g = 0; g < G; ++g) {
            float correction[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                float m = block_max[g][r];
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
                // Every block holds at least one key below T, so m (and the new maximum) is
                // finite; on the first block the old maximum is -inf and the correction 0.
                const float new_max = fmaxf(row_max[g][r], m);
                correction[r] = exp2_approx_ftz(row_max[g][r] - new_max);
                row_max[g][r] = new_max;
                row_sum[g][r] *= correction[r];
            }
#pragma unroll
            for (int j = 0; j < kDimFrags; ++j) {
                acc[g][j][0] *= correction[0];
                acc[g][j][1] *= correction[0];
                acc[g][j][2] *= correction[1];
                acc[g][j][3] *= correction[1];
            }
        }

        // P = exp2(S - max) in fp32 (masked columns give exp2(-inf) = 0), summed in fp32,
        // then packed to the storage type as the A operand of P·V: k16 step t of P is n8
        // blocks 2t and 2t + 1 of S, so its a0..a3 are (row g, block 2t), (row g + 8, block
        // 2t), (row g, block 2t + 1), (row g + 8, block 2t + 1).
        unsigned p_frag[G][kKeySteps][4];
#pragma unroll
        for (int g = 0; g < G; ++g) {
#pragma unroll
            for (int t = 0; t < kKeySteps; ++t) {
                if (kPartial && t * 16 >= live_keys) break;
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int j = 2 * t + half;
                    const float p0 = exp2_approx_ftz(s[g][j][0] - row_max[g][0]);
                    const float p1 = exp2_approx_ftz(s[g][j][1] - row_max[g][0]);
                    const float p2 = exp2_approx_ftz(s[g][j][2] - row_max[g][1]);
                    const float p3 = exp2_approx_ftz(s[g][j][3] - row_max[g][1]);
                    row_sum[g][0] += p0 + p1;
                    row_sum[g][1] += p2 + p3;
                    p_frag[g][t][2 * half] = pack_pair<T>(p0, p1);
                    p_frag[g][t][2 * half + 1] = pack_pair<T>(p2, p3);
                }
            }
        }

        // O += P·V. Matrices (transposing loads of V stored [key][dim]): keys 0-7 x dims of
        // block j, keys 8-15 x block j, keys 0-7 x block j + 1, keys 8-15 x block j + 1:
        // b0, b1 of block j, then of block j + 1; each V fragment feeds every row group.
#pragma unroll
        for (int t = 0; t < kKeySteps; ++t) {
            if (kPartial && t * 16 >= live_keys) break;
#pragma unroll
            for (int j = 0; j < kDimFrags; j += 2) {
                const int row = t * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                const int chunk = j + (lane >> 4);
                unsigned b[4];
                ldmatrix_x4_trans(b, v_tile + (row * kPitch + chunk * 8) * (int)sizeof(T));
#pragma unroll
                for (int g = 0; g < G; ++g) {
                    mma_16816<T>(acc[g][j], p_frag[g][t], b[0], b[1]);
                    mma_16816<T>(acc[g][j + 1], p_frag[g][t], b[2], b[3]);
                }
            }
        }
    };

    for (int block = 0; block < key_blocks; ++block) {
        const int buffer = block & 1;
        // Prefetch the next key block into the other buffer: every warp finished reading it
        // before the barrier that closed the previous iteration. An empty group is committed
        // on the last block so that wait_group<1> always means "this block has landed".
        if (block + 1 < key_blocks) load_keys_values(block + 1, buffer ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();

        if (warp_has_rows) {
            if (block == 0) {
                // Matrices: rows 0-7 / 8-15 of a group's rows x dims 0-7 / 8-15 of the k16
                // step, in a0..a3 order (lanes 0-15 address rows 0-15 at chunk 2s, lanes
                // 16-31 at 2s + 1).
#pragma unroll
                for (int g = 0; g < G; ++g)
#pragma unroll
                    for (int s = 0; s < kDimSteps; ++s) {
                        const int row = warp_row0 + g * 16 + (lane & 15);
                        const int chunk = s * 2 + (lane >> 4);
                        ldmatrix_x4(q_frag[g][s], q_tile + (row * kPitch + chunk * 8) * (int)sizeof(T));
                    }
            }
            const unsigned k_tile = k_tiles + buffer * kTileBytesKV;
            const unsigned v_tile = v_tiles + buffer * kTileBytesKV;
            if (CAUSAL) {
                // Nothing for a warp whose rows all precede the block; a block that reaches
                // past the warp's first row (or past T) is masked.
                const int n0 = block * BLOCK_N;
                if (n0 <= warp_last_row) {
                    if (n0 + BLOCK_N - 1 > warp_first_row) {
                        key_block(true, block, k_tile, v_tile);
                    } else {
                        key_block(false, block, k_tile, v_tile);
                    }
                }
            } else if ((block + 1) * BLOCK_N > keys) {
                key_block(true, block, k_tile, v_tile);
            } else {
                key_block(false, block, k_tile, v_tile);
            }
        }
        // Every warp is done with this buffer before the next iteration refills it.
        __syncthreads();
    }
    cp_async_wait<0>();  // only empty groups can be left; nothing may be in flight at exit
    if (!warp_has_rows) return;

    // Stage the warp's output rows in its own rows of the Q tile (no other warp reads them,
    // and the warp read its Q fragments before the first key block), then store them in
    // 16-byte runs: each row of HEAD_DIM elements is contiguous in O. 1/sum in fp32 and one
    // cast per element; the row sums are first reduced over the quad.
    unsigned char* staged_rows = shared_tiles + warp_row0 * kPitch * (int)sizeof(T);
#pragma unroll
    for (int g = 0; g < G; ++g) {
        float inv_sum[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float sum = row_sum[g][r];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            inv_sum[r] = 1.0f / sum;
        }
        unsigned char* group_rows = staged_rows + g * 16 * kPitch * (int)sizeof(T);
#pragma unroll
        for (int j = 0; j < kDimFrags; ++j) {
            const int col = j * 8 + quad_col;
            *reinterpret_cast<unsigned*>(group_rows + (quad_row * kPitch + col) * (int)sizeof(T)) =
                pack_pair<T>(acc[g][j][0] * inv_sum[0], acc[g][j][1] * inv_sum[0]);
            *reinterpret_cast<unsigned*>(group_rows + ((quad_row + 8) * kPitch + col) * (int)sizeof(T)) =
                pack_pair<T>(acc[g][j][2] * inv_sum[1], acc[g][j][3] * inv_sum[1]);
        }
    }
    __syncwarp();
    T* o_head = o + ov.head_base(batch, head);
#pragma unroll
    for (int id = lane; id < kWarpRows * kDimFrags; id += 32) {
        const int row = id / kDimFrags, chunk = id % kDimFrags;
        const int token = m0 + warp_row0 + row;
        if (token < tokens) {
            const uint4 run = *reinterpret_cast<const uint4*>(staged_rows + (row * kPitch + chunk * 8) * (int)sizeof(T));
            *reinterpret_cast<uint4*>(o_head + (long long)token * ov.row_stride + chunk * 8) = run;
        }
    }
}

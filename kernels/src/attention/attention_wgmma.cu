// Fused attention on Hopper (sm_90a), FlashAttention-3's structure: O = softmax(scale ·
// Q·Kᵀ) · V for one (batch, head) and PASSES blocks of 64 · WARPGROUPS query rows per CTA,
// both products on warpgroup MMAs (`wgmma.mma_async`), the tiles loaded by TMA.
//
// A warpgroup (4 warps, 128 threads) owns 64 query rows and every key:
// - S = Q·Kᵀ: m64nNk16 wgmmas, A (Q) and B (K, [key][dim]: K-major, no transpose) read from
//   shared memory through matrix descriptors; fp32 accumulators, HEAD_DIM / 16 k-steps.
// - the online softmax on the accumulators, as attention.cu: warp w of the warpgroup holds rows
//   16w..16w+15, thread (g, q) of a warp rows g and g + 8 and columns 2q, 2q + 1 of every n8
//   block, exactly the mma.sync m16n8 layout, so a row's maximum and sum are reduced over a quad.
// - O += P·V: P never leaves registers. The accumulator layout of two adjacent n8 blocks of S
//   is the register layout of one k16 block of wgmma's A operand (as for mma.sync), so P is
//   packed to the storage type and fed as A from registers; B (V, [key][dim]: N-major) is read
//   from shared memory with the transpose bit.
// - overlap inside the warpgroup (FlashAttention-3's order): a block's P·V is issued right
//   after the next block's S, and that S's softmax runs while the P·V does, so the tensor
//   cores work during the exp2s.
//   The warpgroups of a CTA run independently (no CTA-wide barrier in the key loop), and two
//   CTAs share an SM.
//
// Loads: TMA copies (4-D tensor maps over [batch][head][token][dim], boxes of 64 rows x 16
// columns; rows past T read as zeros) into a ring of STAGES K/V buffers. Thread 0 issues Q's
// and the first STAGES blocks'. A stage's `full` mbarrier completes when its bytes have
// landed, its `empty` one when every warpgroup with rows has finished the P·V that read it;
// the stage is then refilled with the block STAGES later. With the next block's S issued
// early, three blocks are in use at once: STAGES is at least 3. Who refills:
// - two CTAs an SM (four stages; head dims up to 80): thread 0, a block after the release, so
//   that a warpgroup a little behind the first does not hold it up; the block refilled is
//   needed a block later still. A producer warp there costs the registers of the second CTA
//   (127 a thread at d64; bounded to 2 x 288 threads, ptxas spills and serialises the wgmmas);
// - one CTA an SM (PRODUCER_WARP; head dims 96 to 128, three stages): a producer warp of its
//   own (the CTA's last 32 threads), at once. Thread 0's late refill left the load no slack
//   there (each refilled block was the next one waited for).
// benchmarks/NOTES.md, 2026-11-28 "A producer warp for the Hopper attention".
//
// Passes: with PASSES 2 the CTA takes two consecutive query blocks of its (batch, head), one
// after the other, against the same keys, which must all fit its stages (ViT-B/16's 197 keys
// in four stages of 64; the launcher checks): K and V are loaded once for both, and every Q
// tile at the start, so no stage is ever refilled. One CTA then does the work of two, with
// half the K/V traffic from L2 and one prologue (benchmarks/NOTES.md, 2026-11-28 "Two query
// blocks a CTA").
//
// Persistent (PERSISTENT, with the producer warp only): one CTA an SM takes every gridDim.x-th
// tile of the grid's numbering from blockIdx.x. The producer warp loads every tile's Q and
// blocks; the K/V stages run on as one ring over the CTA's tiles (its g-th block in stage
// g % STAGES), so the next tile's first blocks load while this one's last run. Q has two
// buffers, a tile's in buffer `round & 1`, each refilled once every warpgroup has written out
// the O it staged there two tiles before (`q_empty`), so the next tile's Q loads while this
// one runs. A warpgroup with no row in a tile (T's last query block) only releases its stages
// and its Q buffer. The producer is then a whole warpgroup that gives the consumers its
// registers. Taken at head dims 96 to 128 (program.rs, WGMMA_PERSISTENT_HEAD_DIMS;
// benchmarks/NOTES.md, 2026-11-28 "A persistent grid for the Hopper attention" and 2026-11-29
// "The persistent attention's producer gives its registers").
//
// Shared layout: every tile (Q, K, V) is stored as HEAD_DIM / 16 panels of 16 columns, each
// panel [rows][16 elements] = 32-byte rows in the 32-byte swizzle (16-byte chunk c of row r at
// chunk c ^ ((r >> 2) & 1): what TMA writes with CU_TENSOR_MAP_SWIZZLE_32B into a 256-byte
// aligned box). One layout serves both operand majors: as a K-major operand (Q, K) a panel is
// one k16 step (stride byte offset 256, from one 8-row group to the next); as an N-major operand
// (V) a k16 step is 16 rows of every panel (leading byte offset: one panel to the next; stride
// byte offset 256: the next 8 keys). It takes any HEAD_DIM that is a multiple of 16 (80, 112:
// 10 and 14 chunks a row, which a 128-byte swizzle cannot hold).
//
// Work past T: the last key block multiplies only its 16-key pieces that hold a key below T
// (n16 wgmmas; full blocks take m64n64 ones) and masks the columns past T to -inf. A
// warpgroup whose rows all lie past T (the last query block) does nothing.
// Measured: benchmarks/NOTES.md, 2026-11-25 "Hopper attention".
//
// Key padding (key_lengths not null): batch item b attends to its first len = key_lengths[b]
// keys (clamped to 1..=T), as attention.cu: the key side runs as if T were len (blocks past
// the one holding key len - 1 are neither loaded nor computed; that block is the partial one,
// its scores past len -inf), the query side stays T, so padded query rows are stored, finite.

#include "common.cuh"

namespace vitrt_attention_wgmma {

// A matrix descriptor in the 32-byte swizzle: start address, leading byte offset (N-major
// operands: from one 16-column panel to the next; unused for K-major), stride byte offset 256
// (from one group of 8 rows, or 8 keys, to the next).
__device__ __forceinline__ unsigned long long descriptor_sw32(unsigned addr, unsigned leading_bytes) {
    const unsigned long long start = (addr & 0x3FFFF) >> 4;
    const unsigned long long leading = (leading_bytes & 0x3FFFF) >> 4;
    const unsigned long long stride = 256 >> 4;
    const unsigned long long swizzle_32b = 3;
    return start | (leading << 16) | (stride << 32) | (swizzle_32b << 62);
}

// d (64 x N: this thread's N / 2 accumulators) = A (64 x 16) · B (N x 16)ᵀ (+ d with ACCUMULATE),
// both from shared memory, K-major. Without ACCUMULATE the accumulators are outputs only: their
// old values are no input of the wgmma (a `+f` operand would make the compiler keep them alive,
// and a copy of them read while the wgmma runs serialises the pipeline: C7514). scale-d is a
// predicate, set from a register.
template <typename T, int N, bool ACCUMULATE>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], unsigned long long a_desc, unsigned long long b_desc) {
#if VITRT_HAS_WGMMA
    if constexpr (false) {
    } else if constexpr (N == 16 && ACCUMULATE == true && is_same_type<T, __half>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                     : "l"(a_desc), "l"(b_desc), "r"(1));
    } else if constexpr (N == 16 && ACCUMULATE == false && is_same_type<T, __half>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7])
                     : "l"(a_desc), "l"(b_desc), "r"(0));
    } else if constexpr (N == 16 && ACCUMULATE == true && is_same_type<T, __nv_bfloat16>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                     : "l"(a_desc), "l"(b_desc), "r"(1));
    } else if constexpr (N == 16 && ACCUMULATE == false && is_same_type<T, __nv_bfloat16>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7])
                     : "l"(a_desc), "l"(b_desc), "r"(0));
    } else if constexpr (N == 64 && ACCUMULATE == true && is_same_type<T, __half>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                     : "l"(a_desc), "l"(b_desc), "r"(1));
    } else if constexpr (N == 64 && ACCUMULATE == false && is_same_type<T, __half>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
                     : "l"(a_desc), "l"(b_desc), "r"(0));
    } else if constexpr (N == 64 && ACCUMULATE == true && is_same_type<T, __nv_bfloat16>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                     : "l"(a_desc), "l"(b_desc), "r"(1));
    } else if constexpr (N == 64 && ACCUMULATE == false && is_same_type<T, __nv_bfloat16>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
                     : "l"(a_desc), "l"(b_desc), "r"(0));
    } else {
        static_assert(N == 0, "no such wgmma shape here");
    }
#endif
}

// d (64 x N) += A (64 x 16, this thread's 4 registers of the m16n8k16 A layout for its warp's
// 16 rows) · B (16 x N, N-major in shared memory: the transpose bit). N is the head dim: one
// wgmma covers it whole (several narrower ones over parts of the accumulators, each with the
// same A registers, made ptxas serialise the pipeline: C7519).
template <typename T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long b_desc) {
#if VITRT_HAS_WGMMA
    if constexpr (false) {
    } else if constexpr (N == 16 && is_same_type<T, __half>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7}, "
                     "{%8, %9, %10, %11}, %12, p, 1, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
    } else if constexpr (N == 16 && is_same_type<T, __nv_bfloat16>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7}, "
                     "{%8, %9, %10, %11}, %12, p, 1, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
    } else if constexpr (N == 32 && is_same_type<T, __half>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
                     "{%16, %17, %18, %19}, %20, p, 1, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
    } else if constexpr (N == 32 && is_same_type<T, __nv_bfloat16>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
                     "{%16, %17, %18, %19}, %20, p, 1, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
    } else if constexpr (N == 48 && is_same_type<T, __half>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %29, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n48k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}, "
                     "{%24, %25, %26, %27}, %28, p, 1, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
    } else if constexpr (N == 48 && is_same_type<T, __nv_bfloat16>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %29, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n48k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}, "
                     "{%24, %25, %26, %27}, %28, p, 1, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
    } else if constexpr (N == 64 && is_same_type<T, __half>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                     "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
    } else if constexpr (N == 64 && is_same_type<T, __nv_bfloat16>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                     "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
    } else if constexpr (N == 80 && is_same_type<T, __half>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %45, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n80k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}, "
                     "{%40, %41, %42, %43}, %44, p, 1, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
    } else if constexpr (N == 80 && is_same_type<T, __nv_bfloat16>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %45, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}, "
                     "{%40, %41, %42, %43}, %44, p, 1, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
    } else if constexpr (N == 96 && is_same_type<T, __half>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %53, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, "
                     "{%48, %49, %50, %51}, %52, p, 1, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
    } else if constexpr (N == 96 && is_same_type<T, __nv_bfloat16>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %53, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, "
                     "{%48, %49, %50, %51}, %52, p, 1, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
    } else if constexpr (N == 112 && is_same_type<T, __half>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %61, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n112k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55}, "
                     "{%56, %57, %58, %59}, %60, p, 1, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
    } else if constexpr (N == 112 && is_same_type<T, __nv_bfloat16>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %61, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n112k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55}, "
                     "{%56, %57, %58, %59}, %60, p, 1, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
    } else if constexpr (N == 128 && is_same_type<T, __half>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                     "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
    } else if constexpr (N == 128 && is_same_type<T, __nv_bfloat16>::value) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                     "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
    } else {
        static_assert(N == 0, "no such wgmma shape here");
    }
#endif
}

// The N accumulators (N / 2 a thread) of columns [first, first + N) of a wider accumulator
// array: an m64nN wgmma's register block inside a larger one (the layouts nest by n8 block).
template <int N, int WIDE>
__device__ __forceinline__ float (&columns(float (&d)[WIDE], int first))[N / 2] {
    return *reinterpret_cast<float(*)[N / 2]>(&d[first / 2]);
}


// Issues S (64 x BLOCK_N: this thread's BLOCK_N / 2 accumulators) = Q·Kᵀ over the first
// PARTS · WIDTH keys of the tile, in m64nWIDTH wgmmas, as one wgmma group; with WAIT, waits
// for it too (else the caller does).
// Q's panels hold 64 rows, K's BLOCK_N. Columns past PARTS · WIDTH are left as they were. Every
// wgmma of one call is straight-line code: a test between them would make ptxas serialise them
// (C7514, C7511).
template <typename T, int HEAD_DIM, int BLOCK_N, int WIDTH, int PARTS, bool WAIT>
__device__ __forceinline__ void issue_scores(float (&s)[BLOCK_N / 2], unsigned q_tile, unsigned k_tile) {
    wgmma_fence();
#pragma unroll
    for (int part = 0; part < PARTS; ++part)
#pragma unroll
        for (int step = 0; step < HEAD_DIM / 16; ++step) {
            const unsigned long long a = descriptor_sw32(q_tile + step * 64 * 32, 0);
            const unsigned long long b = descriptor_sw32(k_tile + step * BLOCK_N * 32 + part * WIDTH * 32, 0);
            if (step == 0) {
                wgmma_ss<T, WIDTH, false>(columns<WIDTH>(s, part * WIDTH), a, b);
            } else {
                wgmma_ss<T, WIDTH, true>(columns<WIDTH>(s, part * WIDTH), a, b);
            }
        }
    wgmma_commit();
    if constexpr (WAIT) wgmma_wait<0>();
}

// S over the first `live_pieces` 16-key pieces of the tile (1 <= live_pieces <= PIECES),
// waited for: one straight-line `issue_scores` per count, chosen by a chain of tests before any
// wgmma is issued, each path waiting before the paths join (registers a wgmma still owns where
// paths join make ptxas serialise: C7517). The caller zeroes `s` first (registers a path
// leaves unwritten would too).
template <typename T, int HEAD_DIM, int BLOCK_N, int PIECES = BLOCK_N / 16>
__device__ __forceinline__ void scores_of_live_pieces(float (&s)[BLOCK_N / 2], unsigned q_tile, unsigned k_tile,
                                                      int live_pieces) {
    if constexpr (PIECES > 1) {
        if (live_pieces < PIECES) {
            scores_of_live_pieces<T, HEAD_DIM, BLOCK_N, PIECES - 1>(s, q_tile, k_tile, live_pieces);
            return;
        }
    }
    issue_scores<T, HEAD_DIM, BLOCK_N, 16, PIECES, true>(s, q_tile, k_tile);
}

// Issues O (64 x HEAD_DIM: this thread's HEAD_DIM / 2 accumulators) += P·V over the first
// STEPS k16 steps (16 keys each) of the V tile, as one wgmma group; with WAIT, waits for it
// too. P comes as wgmma's A from registers, one k16 step a row of `p`; B spans every 16-column
// panel of V (leading byte offset: one panel to the next).
template <typename T, int HEAD_DIM, int BLOCK_N, int STEPS, bool WAIT>
__device__ __forceinline__ void issue_context(float (&acc)[HEAD_DIM / 2], const unsigned (&p)[BLOCK_N / 16][4],
                                              unsigned v_tile) {
    constexpr unsigned kPanelBytes = BLOCK_N * 32;
    wgmma_fence();
#pragma unroll
    for (int t = 0; t < STEPS; ++t)
        wgmma_rs<T, HEAD_DIM>(acc, p[t], descriptor_sw32(v_tile + t * 16 * 32, kPanelBytes));
    wgmma_commit();
    if constexpr (WAIT) wgmma_wait<0>();
}

// P·V over the first `live_steps` k16 steps (1 <= live_steps <= STEPS), waited for: one
// straight-line `issue_context` per count, as `scores_of_live_pieces` (a test between wgmmas
// makes ptxas serialise them: C7519).
template <typename T, int HEAD_DIM, int BLOCK_N, int STEPS = BLOCK_N / 16>
__device__ __forceinline__ void context_of_live_steps(float (&acc)[HEAD_DIM / 2], const unsigned (&p)[BLOCK_N / 16][4],
                                                      unsigned v_tile, int live_steps) {
    if constexpr (STEPS > 1) {
        if (live_steps < STEPS) {
            context_of_live_steps<T, HEAD_DIM, BLOCK_N, STEPS - 1>(acc, p, v_tile, live_steps);
            return;
        }
    }
    issue_context<T, HEAD_DIM, BLOCK_N, STEPS, true>(acc, p, v_tile);
}

}  // namespace vitrt_attention_wgmma

// The entry point every generated wrapper calls. Template arguments: the storage type (f16 or
// bf16), HEAD_DIM (a multiple of 16, at most 128), BLOCK_N (keys per tile: 64 or 128; the
// launcher instantiates 64, which was faster at every measured shape),
// WARPGROUPS (BLOCK_M = 64 · WARPGROUPS query rows a CTA), STAGES (K/V buffers, at least 3),
// PASSES, PRODUCER_WARP and PERSISTENT (above).
// One program per (batch, head, block of BLOCK_M query rows), in that order from the slowest,
// as attention.cu; persistent, that numbering of tiles over a grid of at most one CTA an SM.
// Not causal (the text towers' causal attention runs attention.cu). Q, K and V come as tensor
// maps (kernels/src/attention/gpu.rs, `view_tensor_map`), O as a pointer and a strided view.
//
// Dynamic shared memory: (BLOCK_M + 2 · STAGES · BLOCK_N) · HEAD_DIM elements (Q, then STAGES
// K and STAGES V buffers; persistent, two Q buffers), 8 · (1 + 2 · STAGES) bytes of mbarriers
// (persistent: three more), and 256 bytes to align the tiles to the swizzle's period.
template <typename T, int HEAD_DIM, int BLOCK_N, int WARPGROUPS, int STAGES, int PASSES, bool PRODUCER_WARP,
          bool PERSISTENT>
__device__ __forceinline__ void attention_wgmma_block(const TmaDescriptor& q_map, const TmaDescriptor& k_map,
                                                      const TmaDescriptor& v_map, T* o, int batches, int heads,
                                                      int tokens, long long o_offset, long long o_row_stride,
                                                      long long o_batch_stride, long long o_head_stride, float scale,
                                                      const int* key_lengths) {
    using namespace vitrt_attention_wgmma;
    static_assert(HEAD_DIM % 16 == 0 && HEAD_DIM >= 16 && HEAD_DIM <= 128, "HEAD_DIM is a multiple of 16 up to 128");
    static_assert(BLOCK_N == 64 || BLOCK_N == 128, "full key blocks take m64n64 wgmmas, and boxes are 64 rows");
    static_assert(STAGES >= 3, "three key blocks are in use at once");
    static_assert(PASSES == 1 || PASSES == 2, "one or two query blocks a CTA");
    static_assert(!PERSISTENT || (PRODUCER_WARP && PASSES == 1), "a persistent CTA loads through its producer warp");
#if !VITRT_HAS_WGMMA
    __trap();
#else
    constexpr int kBlockM = 64 * WARPGROUPS;    // query rows a pass
    constexpr int kCtaRows = kBlockM * PASSES;  // query rows a CTA
    constexpr int kDimSteps = HEAD_DIM / 16;      // k16 steps of Q·Kᵀ, 16-column panels
    constexpr int kDimFrags = HEAD_DIM / 8;       // n8 blocks of O
    constexpr int kKeySteps = BLOCK_N / 16;       // k16 steps of P·V, n16 pieces of S
    constexpr int kKeyFrags = BLOCK_N / 8;        // n8 blocks of S
    constexpr int kBoxBytes = 64 * 32;            // one TMA box: 64 rows of one panel
    constexpr int kTileBytesQ = 64 * HEAD_DIM * 2;        // a warpgroup's Q rows
    constexpr int kTileBytesKV = BLOCK_N * HEAD_DIM * 2;  // one K (or V) buffer
    constexpr unsigned kPanelBytesKV = BLOCK_N * 32;
    // scale · log2(e): exp(scale · s - m) = exp2(s · scale·log2(e) - m'), one FFMA and one ex2.
    const float scale_log2 = scale * 1.4426950408889634f;
    // How far (log2 units) a block's maximum may exceed the running one before O is rescaled.
    constexpr float kRescaleSlack = 8.0f;

    extern __shared__ __align__(128) unsigned char shared_raw[];
    const unsigned smem = (shared_address(shared_raw) + 255) & ~255u;
    constexpr int kQueryBuffers = PERSISTENT ? 2 : 1;
    const unsigned q_tiles = smem;  // [kQueryBuffers][PASSES][WARPGROUPS]
    const unsigned k_stages = q_tiles + kQueryBuffers * PASSES * WARPGROUPS * kTileBytesQ;  // [STAGES]
    const unsigned v_stages = k_stages + STAGES * kTileBytesKV;      // [STAGES]
    const unsigned q_full = v_stages + STAGES * kTileBytesKV;        // [kQueryBuffers]
    const unsigned full = q_full + 8 * kQueryBuffers;                // [STAGES]
    const unsigned empty = full + 8 * STAGES;                        // [STAGES]
    const unsigned q_empty = empty + 8 * STAGES;                     // [kQueryBuffers], persistent only

    // One work tile: a (batch, head, block of kCtaRows query rows), numbered as the grid's
    // programs are without PERSISTENT (from the slowest: batch, head, query block).
    const int query_blocks = (tokens + kCtaRows - 1) / kCtaRows;
    const int tiles = PERSISTENT ? batches * heads * query_blocks : blockIdx.x + 1;
    struct Tile {
        int batch, head, m0, keys, key_blocks;
    };
    auto tile_at = [&](int program) {
        Tile t;
        const int matrix = program / query_blocks;
        t.m0 = (program - matrix * query_blocks) * kCtaRows;
        t.batch = matrix / heads;
        t.head = matrix - t.batch * heads;
        // The keys this item attends to: its length clamped to 1..=T, or every key.
        t.keys = key_lengths == nullptr ? tokens : min(max(key_lengths[t.batch], 1), tokens);
        t.key_blocks = (t.keys + BLOCK_N - 1) / BLOCK_N;
        return t;
    };
    const Tile first = tile_at(blockIdx.x);
    // Two passes keep every key resident: no stage is ever refilled (the launcher checks).
    if (PASSES > 1 && first.key_blocks > STAGES) __trap();
    // Warpgroups with at least one row below T: the ones that run, and release stages (a
    // persistent CTA's warpgroups all release every stage: the tiles' live counts differ).
    const int live_groups = PERSISTENT ? WARPGROUPS : min(WARPGROUPS, (tokens - first.m0 + 63) / 64);

    // Block `block` of tile `t`'s K and V into stage `stage`: HEAD_DIM / 16 panels of
    // BLOCK_N / 64 boxes each. Thread 0, or the producer warp.
    auto load_block_of = [&](const Tile& t, int block, int stage) {
        const unsigned bar = full + 8 * stage;
        mbarrier_arrive_expect_tx(bar, 2 * kTileBytesKV);
#pragma unroll
        for (int panel = 0; panel < kDimSteps; ++panel)
#pragma unroll
            for (int part = 0; part < BLOCK_N / 64; ++part) {
                const unsigned offset = stage * kTileBytesKV + panel * kPanelBytesKV + part * kBoxBytes;
                const int row = block * BLOCK_N + part * 64;
                tma_load_4d(k_stages + offset, &k_map, panel * 16, row, t.head, t.batch, bar);
                tma_load_4d(v_stages + offset, &v_map, panel * 16, row, t.head, t.batch, bar);
            }
    };
    // Every pass's Q tiles of tile `t` with a row below T, at once, into Q buffer `buffer`.
    auto load_queries = [&](const Tile& t, int buffer) {
        const int q_tile_count = min(PASSES * WARPGROUPS, (tokens - t.m0 + 63) / 64);
        const unsigned bar = q_full + 8 * buffer;
        const unsigned tiles_at = q_tiles + buffer * PASSES * WARPGROUPS * kTileBytesQ;
        mbarrier_arrive_expect_tx(bar, q_tile_count * kTileBytesQ);
        for (int tile = 0; tile < q_tile_count; ++tile)
#pragma unroll
            for (int panel = 0; panel < kDimSteps; ++panel)
                tma_load_4d(tiles_at + tile * kTileBytesQ + panel * kBoxBytes, &q_map, panel * 16, t.m0 + tile * 64,
                            t.head, t.batch, bar);
    };
    if (threadIdx.x == 0) {
#pragma unroll
        for (int buffer = 0; buffer < kQueryBuffers; ++buffer) {
            mbarrier_init(q_full + 8 * buffer, 1);
            if (PERSISTENT) mbarrier_init(q_empty + 8 * buffer, WARPGROUPS);
        }
#pragma unroll
        for (int stage = 0; stage < STAGES; ++stage) {
            mbarrier_init(full + 8 * stage, 1);
            mbarrier_init(empty + 8 * stage, live_groups);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        if (!PERSISTENT) {
            load_queries(first, 0);
            for (int block = 0; block < min(STAGES, first.key_blocks); ++block) load_block_of(first, block, block);
        }
    }
    __syncthreads();  // the barriers are initialised before anyone waits on them

    const int warpgroup = threadIdx.x >> 7;
    constexpr bool kProducerWarp = PRODUCER_WARP;
    if (kProducerWarp && warpgroup == WARPGROUPS) {
        // Persistent, the producer is a whole warpgroup that keeps 40 registers a thread and
        // leaves the rest to the consumers (`setmaxnreg`; the wrapper's __launch_bounds__(N, 1)
        // makes ptxas honour it): no spill at 96-128, where 288 threads capped at 168 spilled.
        if constexpr (PERSISTENT) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        // The producer warp: each block into its stage once every warpgroup has released the
        // block STAGES earlier (with PASSES 2 there is none: every key is resident). Without
        // PERSISTENT, thread 0 loaded Q and the first STAGES blocks; persistent, it loads every
        // tile's: the stages run on as one ring over the CTA's tiles (block g of the CTA in stage
        // g % STAGES), and a tile's Q into its buffer once that buffer's previous O is out.
        if (threadIdx.x == WARPGROUPS * 128) {
            int g = PERSISTENT ? 0 : STAGES;
            for (int program = blockIdx.x, round = 0; program < tiles; program += gridDim.x, ++round) {
                const Tile t = PERSISTENT ? tile_at(program) : first;
                if (PERSISTENT) {
                    // Buffer round & 1 held the Q of round - 2, whose O was staged there too.
                    const int buffer = round & 1;
                    if (round >= 2) mbarrier_wait(q_empty + 8 * buffer, ((round >> 1) - 1) & 1);
                    load_queries(t, buffer);
                }
                for (int block = PERSISTENT ? 0 : STAGES; block < t.key_blocks; ++block, ++g) {
                    if (g >= STAGES) mbarrier_wait(empty + 8 * (g % STAGES), ((g / STAGES) - 1) & 1);
                    load_block_of(t, block, g % STAGES);
                }
            }
        }
        return;
    }
    // The consumers take the producer warpgroup's registers: 2 x 128 x 232 + 128 x 40 fit
    // the SM's 65,536.
    if constexpr (PERSISTENT) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    if (warpgroup >= live_groups) return;
    const int warp = (threadIdx.x >> 5) & 3;  // within the warpgroup: rows 16·warp ..
    const int lane = threadIdx.x & 31;
    const int quad_row = lane >> 2;           // g: rows g and g + 8 of the warp's 16
    const int quad_col = (lane & 3) * 2;      // 2q: columns 2q, 2q + 1 of every n8 block
    // This pass's Q tile (its rows: pass · kBlockM + 64 · warpgroup onwards), set by the pass loop.
    unsigned q_tile = q_tiles + warpgroup * kTileBytesQ;
    // The round's Q buffer and the parity its barriers complete with.
    int buffer = 0, buffer_parity = 0;
    // The CTA's blocks before this tile's (persistent: the K/V ring runs on over the tiles), and
    // where block `block` of this tile lies in it.
    int g0 = 0;
    auto stage_of = [&](int block) { return ((PERSISTENT ? g0 : 0) + block) % STAGES; };
    auto parity_of = [&](int block) { return (((PERSISTENT ? g0 : 0) + block) / STAGES) & 1; };

    float acc[HEAD_DIM / 2];  // O, unnormalised: n8 block j holds acc[4j .. 4j + 3]
    // Rows g and g + 8: the running maximum of the scaled scores and this thread's share of
    // the running sum (the quad's four shares are added at the end).
    float row_max[2];
    float row_sum[2];

    // Issues a full block's S into `s` (one wgmma group; the caller waits).
    auto issue_full_scores = [&](float (&s)[BLOCK_N / 2], int block) {
        issue_scores<T, HEAD_DIM, BLOCK_N, 64, BLOCK_N / 64, false>(s, q_tile,
                                                                    k_stages + stage_of(block) * kTileBytesKV);
    };

    // The softmax of one block's S, in place (with kPartial, columns past `live_keys` masked):
    // the running maximum (in the exp2 domain) and sum moved, `correction` set to the factor O
    // must be rescaled by, and S replaced by P = exp2(S · scale·log2(e) - max) in fp32.
    auto softmax = [&](const bool kPartial, float (&s)[BLOCK_N / 2], int live_keys, float (&correction)[2]) {
        float block_max[2] = {-infinity(), -infinity()};
#pragma unroll
        for (int j = 0; j < kKeyFrags; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                // The maximum of the raw scores: the scale (positive: the launcher checks) is
                // applied to it once, and to each score inside P's one FFMA below.
                if (kPartial && j * 8 + quad_col + (e & 1) >= live_keys) s[4 * j + e] = -infinity();
                block_max[e >> 1] = fmaxf(block_max[e >> 1], s[4 * j + e]);
            }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float m = block_max[r];
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
            m *= scale_log2;
            // Every block holds a key below T, so m is finite; the first block's correction is 0.
            // The running maximum moves only when the block's exceeds it by more than
            // kRescaleSlack (FlashAttention-4's lazy rescaling): until then P = exp2(S - max)
            // stays below 2^kRescaleSlack, well inside fp32 and the 16-bit P's range, O and
            // the sum carry the same stale maximum, and O / sum is unchanged. Past the first
            // blocks the maximum rarely moves that far, so O is seldom rescaled: 12.5% fewer
            // instructions at d128 (benchmarks/NOTES.md, 2026-11-28 "Lazy rescaling in the
            // Hopper attention").
            if (m > row_max[r] + kRescaleSlack) {
                correction[r] = exp2_approx_ftz(row_max[r] - m);
                row_max[r] = m;
                row_sum[r] *= correction[r];
            } else {
                correction[r] = 1.0f;
            }
        }
        // Whole k16 steps, as P·V takes them: a step's masked columns become exp2(-inf) = 0.
#pragma unroll
        for (int j = 0; j < kKeyFrags; ++j) {
            if (kPartial && (j / 2) * 16 >= live_keys) break;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[4 * j + e] = exp2_approx_ftz(fmaf(s[4 * j + e], scale_log2, -row_max[e >> 1]));
                row_sum[e >> 1] += s[4 * j + e];
            }
        }
    };

    // P packed to the storage type as wgmma's A from registers: k16 step t is n8 blocks 2t and
    // 2t + 1, a0..a3 = (row g, block 2t), (row g + 8, block 2t), (row g, block 2t + 1), (row
    // g + 8, block 2t + 1). With kPartial, steps past `live_keys` are left: P·V skips them.
    auto pack = [&](const bool kPartial, const float (&s)[BLOCK_N / 2], int live_keys,
                    unsigned (&p)[kKeySteps][4]) {
#pragma unroll
        for (int t = 0; t < kKeySteps; ++t) {
            if (kPartial && t * 16 >= live_keys) break;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int j = 2 * t + half;
                p[t][2 * half] = pack_pair<T>(s[4 * j], s[4 * j + 1]);
                p[t][2 * half + 1] = pack_pair<T>(s[4 * j + 2], s[4 * j + 3]);
            }
        }
    };

    // Issues O += P·V for a full block (one wgmma group; the caller waits).
    auto issue_full_context = [&](const unsigned (&p)[kKeySteps][4], int block) {
        issue_context<T, HEAD_DIM, BLOCK_N, kKeySteps, false>(acc, p, v_stages + stage_of(block) * kTileBytesKV);
    };

    // O rescaled by the rows' corrections, skipped by a warp none of whose rows moved its
    // maximum (the usual case: see kRescaleSlack).
    auto rescale = [&](const float (&correction)[2]) {
        if (!__any_sync(0xffffffffu, correction[0] != 1.0f || correction[1] != 1.0f)) return;
#pragma unroll
        for (int j = 0; j < kDimFrags; ++j) {
            acc[4 * j] *= correction[0];
            acc[4 * j + 1] *= correction[0];
            acc[4 * j + 2] *= correction[1];
            acc[4 * j + 3] *= correction[1];
        }
    };

    // Block `done`'s P·V has finished: the warpgroup releases its stage (two passes never
    // refill one).
    auto release = [&](int done) {
        if (PASSES == 1 && (threadIdx.x & 127) == 0) mbarrier_arrive(empty + 8 * stage_of(done));
    };
    // Without a producer warp, thread 0 refills block `done`'s stage with the block STAGES
    // later once every warpgroup has released it (called a block after the release; never
    // persistent, so the CTA's one tile is `first` and g0 is 0).
    auto refill = [&](int done) {
        if (!kProducerWarp && threadIdx.x == 0 && done + STAGES < first.key_blocks) {
            mbarrier_wait(empty + 8 * (done % STAGES), (done / STAGES) & 1);
            load_block_of(first, done + STAGES, done % STAGES);
        }
    };

    // The full blocks, FlashAttention-3's order: with block j's P packed, the next block's S is
    // issued, O rescaled and block j's P·V issued; the next S's softmax runs while P·V does.
    // Every iteration ends with nothing in flight and P packed, so the loop's body is the same
    // code on entry and on its back edge, without a test around a wait (either makes ptxas
    // serialise the wgmmas: C7514, C7517); P is repacked only once its P·V has finished (a
    // wgmma's A registers are its own until then). Then the partial last block, if T is not a
    // multiple of BLOCK_N, on its own (its S is issued as its live pieces only).
    float s[BLOCK_N / 2];
    float correction[2];
    unsigned p[kKeySteps][4];
    // One tile without PERSISTENT (a loop the compiler sees run once); persistent, every
    // gridDim.x-th from blockIdx.x.
#pragma unroll 1
    for (int program = blockIdx.x, round = 0; PERSISTENT ? program < tiles : round < 1;
         program += gridDim.x, ++round) {
        const Tile tile = PERSISTENT ? tile_at(program) : first;
        const int m0 = tile.m0, batch = tile.batch, head = tile.head, keys = tile.keys, key_blocks = tile.key_blocks;
        const int full_blocks = keys / BLOCK_N;
        buffer = PERSISTENT ? round & 1 : 0;
        buffer_parity = PERSISTENT ? (round >> 1) & 1 : 0;
        if (PERSISTENT && m0 + warpgroup * 64 >= tokens) {
            // No row of this tile is the warpgroup's: it releases each stage once loaded, and Q.
            mbarrier_wait(q_full + 8 * buffer, buffer_parity);
            for (int block = 0; block < key_blocks; ++block) {
                mbarrier_wait(full + 8 * stage_of(block), parity_of(block));
                release(block);
            }
            if ((threadIdx.x & 127) == 0) mbarrier_arrive(q_empty + 8 * buffer);
            g0 += key_blocks;
            continue;
        }
        mbarrier_wait(q_full + 8 * buffer, buffer_parity);
        // Each pass takes the next kBlockM query rows against the same resident keys; it ends with
        // nothing in flight, as the key loop does.
#pragma unroll 1
        for (int pass = 0; pass < PASSES; ++pass) {
            const int first_row = m0 + pass * kBlockM + warpgroup * 64;
            if (first_row >= tokens) break;
            q_tile = q_tiles + ((buffer * PASSES + pass) * WARPGROUPS + warpgroup) * kTileBytesQ;
#pragma unroll
            for (int i = 0; i < HEAD_DIM / 2; ++i) acc[i] = 0.0f;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                row_max[r] = -infinity();
                row_sum[r] = 0.0f;
            }
            if (full_blocks > 0) {
                mbarrier_wait(full + 8 * stage_of(0), parity_of(0));
                issue_full_scores(s, 0);
                wgmma_wait<0>();
                fence_accumulators(s);
                softmax(false, s, BLOCK_N, correction);
                pack(false, s, BLOCK_N, p);
                int block = 0;
                for (; block + 1 < full_blocks; ++block) {
                    const int next = block + 1;
                    mbarrier_wait(full + 8 * stage_of(next), parity_of(next));
                    issue_full_scores(s, next);
                    rescale(correction);
                    issue_full_context(p, block);
                    wgmma_wait<1>();  // the next S has finished; this block's P·V may still run
                    fence_accumulators(s);
                    softmax(false, s, BLOCK_N, correction);
                    wgmma_wait<0>();
                    fence_accumulators(acc);
                    release(block);
                    if (block > 0) refill(block - 1);
                    pack(false, s, BLOCK_N, p);
                }
                // The last full block (persistent, its stage is released too: the ring runs on).
                rescale(correction);
                issue_full_context(p, block);
                wgmma_wait<0>();
                fence_accumulators(acc);
                if (PERSISTENT) release(block);
            }
            if (full_blocks < key_blocks) {
                // The partial last block (without PERSISTENT nothing waits on its stage: every
                // refill came before it).
                const int last = full_blocks;
                const int live_keys = keys - last * BLOCK_N;
                mbarrier_wait(full + 8 * stage_of(last), parity_of(last));
#pragma unroll
                for (int i = 0; i < BLOCK_N / 2; ++i) s[i] = 0.0f;
                scores_of_live_pieces<T, HEAD_DIM, BLOCK_N>(s, q_tile, k_stages + stage_of(last) * kTileBytesKV,
                                                            (live_keys + 15) / 16);
                fence_accumulators(s);
                softmax(true, s, live_keys, correction);
                pack(true, s, live_keys, p);
                rescale(correction);
                context_of_live_steps<T, HEAD_DIM, BLOCK_N>(acc, p, v_stages + stage_of(last) * kTileBytesKV,
                                                            (live_keys + 15) / 16);
                fence_accumulators(acc);
                if (PERSISTENT) release(last);
            }

            // O = acc / sum, cast once. The row sums are first reduced over the quad. The warpgroup's
            // Q tile is free (its last S has finished): O is staged there as [64 rows][HEAD_DIM]
            // (4-byte stores straight from the registers kept L1 busy: benchmarks/NOTES.md,
            // 2026-11-27 "O written in 16-byte stores"),
            // each row's 16-byte chunks rotated by the row (chunk c of row r at (c + r) % kChunks, so
            // the 8 rows a warp writes at once fall in different banks), then written out in 16-byte
            // stores, a row's chunks by consecutive threads. Rows past T are not written.
            float inv_sum[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                float sum = row_sum[r];
                sum += __shfl_xor_sync(0xffffffffu, sum, 1);
                sum += __shfl_xor_sync(0xffffffffu, sum, 2);
                inv_sum[r] = 1.0f / sum;
            }
            constexpr int kChunks = HEAD_DIM / 8;  // 16-byte chunks a row
            const int warpgroup_thread = threadIdx.x & 127;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = warp * 16 + quad_row + 8 * r;
#pragma unroll
                for (int j = 0; j < kDimFrags; ++j) {
                    const unsigned at = q_tile + row * HEAD_DIM * 2 + ((j + row) % kChunks) * 16 + quad_col * 2;
                    const unsigned packed =
                        pack_pair<T>(acc[4 * j + 2 * r] * inv_sum[r], acc[4 * j + 2 * r + 1] * inv_sum[r]);
                    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(packed) : "memory");
                }
            }
            // The warpgroup's own named barrier (1 or 2; 0 is __syncthreads): immediates, so that
            // ptxas reserves two barriers, not all sixteen.
            static_assert(WARPGROUPS <= 2, "a named barrier each for at most two warpgroups");
            if (warpgroup == 0) {
                asm volatile("bar.sync 1, 128;\n" ::: "memory");
            } else {
                asm volatile("bar.sync 2, 128;\n" ::: "memory");
            }
            T* o_head = o + o_offset + (long long)batch * o_batch_stride + (long long)head * o_head_stride;
#pragma unroll
            for (int i = warpgroup_thread; i < 64 * kChunks; i += 128) {
                const int row = i / kChunks, chunk = i % kChunks;
                if (first_row + row < tokens) {
                    const unsigned at = q_tile + row * HEAD_DIM * 2 + ((chunk + row) % kChunks) * 16;
                    uint4 value;
                    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                                 : "=r"(value.x), "=r"(value.y), "=r"(value.z), "=r"(value.w)
                                 : "r"(at));
                    *reinterpret_cast<uint4*>(o_head + (long long)(first_row + row) * o_row_stride + chunk * 8) = value;
                }
            }
            // Persistent: once every thread has read its O back, the Q buffer may take the
            // tile two rounds on.
            if (PERSISTENT) {
                if (warpgroup == 0) {
                    asm volatile("bar.sync 1, 128;\n" ::: "memory");
                } else {
                    asm volatile("bar.sync 2, 128;\n" ::: "memory");
                }
                if ((threadIdx.x & 127) == 0) mbarrier_arrive(q_empty + 8 * buffer);
            }
        }
        g0 += key_blocks;
    }
#endif
}

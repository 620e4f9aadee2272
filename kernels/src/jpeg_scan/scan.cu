// Baseline JPEG entropy decoding, in parallel within each image: Huffman-coded scan data into
// quantised DCT coefficients, the same coefficients libjpeg-turbo's jdhuff.c gives, written
// where jpeg.cu's IDCT reads them. The host has taken the stuffed zero bytes out of the scan,
// split it at its restart markers (segments) and checked its markers; it has not decoded a bit.
//
// One CTA an image. The image's stream is cut into chunks of SCAN_CHUNK_BYTES (restarting at
// each segment), and each thread owns a run of consecutive chunks. A chunk is decoded from the
// state its predecessor ends in (bit position, block of the MCU, coefficient index); the
// thread at the start of a run does not know that state, so it guesses, and Huffman codes
// resynchronise within a few code words (Weissenberger and Schmidt, "Massively Parallel
// Huffman Decoding on GPUs", ICPP 2018):
// 1. Each thread decodes its run from a guess at its first chunk, recording each chunk's exit
//    state and what it holds (blocks begun, the sum of DC differences per component).
// 2. Rounds until nothing changes: each thread whose entry state (its predecessor's last exit)
//    differs from the one it used decodes again, chunk by chunk, until a chunk exits as it did
//    before; the states after that are already right. Round r fixes at least thread r, so
//    the rounds end, with every state the one a sequential decoder passes through.
// 3. A segmented scan over the chunks gives each its first block's index and the DC
//    predictors at its entry (libjpeg resets them at each restart marker).
// 4. Each thread decodes its chunks once more, writing the coefficients, and the thread that
//    meets a problem a sequential libjpeg would warn about (a code no table holds, a segment
//    that ends before its MCUs do) marks the image's status word: the host decodes it again.
#include "common.cuh"
#include "jpeg_records.cuh"

struct ScanImage {
    long long stream_at;       // byte offset of the destuffed stream in `data` (4-aligned)
    long long tables_at;       // byte offset of its Huffman tables in `data` (272 bytes each)
    int first_chunk, chunks;   // its chunks in the chunk table and the state scratch
    int first_segment, segments;
    int components[3];         // jpeg.cu's component records, in scan order
    int component_count;
    int blocks_in_mcu;
    int mcus_per_row;
    int image;                 // its status word
    int table_count;
    unsigned char mcu[10];     // per block of the MCU: slot | dx << 2 | dy << 4
    unsigned char tables_of[3];// per slot: DC table | AC table << 4
    unsigned char sampling[3]; // per slot: h | v << 4 (blocks of the MCU)
};

struct ScanSegment { unsigned start, end, first_mcu, mcus; };  // bytes of the stream; MCUs
struct ScanChunk { unsigned start, segment; };  // segment | SCAN_FIRST if it starts one

// One chunk's decoding: the state after its last symbol, and what it decoded.
struct ChunkState {
    unsigned exit_pos;  // bit position
    unsigned exit_bk;   // block of the MCU | coefficient index << 8
    int blocks;         // blocks begun (DC symbols); after phase 3, blocks of the segment before it
    int dc[3];          // DC differences per slot; after phase 3, the predictors at its entry
    unsigned flags;
    unsigned reserved;
};

#define SCAN_FIRST 0x80000000u
#define SCAN_CHUNK_BYTES 128
#define SCAN_LOOKAHEAD 9

// A Huffman table as jdhuff.c's jpeg_make_d_derived_tbl derives it, with a lookup of the
// first SCAN_LOOKAHEAD bits: (length << 8) | symbol, 0 for longer codes.
struct HuffTable {
    int maxcode[18];
    int valoffset[18];
    unsigned short lookup[1 << SCAN_LOOKAHEAD];
    unsigned char values[256];
};

// jpeg_natural_order with jdhuff.c's 16 extra entries: a corrupt run past 63 stores at 63.
__constant__ unsigned char scan_natural_order[80] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33,
    40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36,
    29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54,
    47, 55, 62, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};

__device__ void scan_build_table(HuffTable& t, const unsigned char* src) {
    for (int i = 0; i < 256; ++i) t.values[i] = src[16 + i];
    for (int i = 0; i < (1 << SCAN_LOOKAHEAD); ++i) t.lookup[i] = 0;
    int p = 0, code = 0;
    for (int l = 1; l <= 16; ++l) {
        const int n = src[l - 1];
        if (n) {
            t.valoffset[l] = p - code;
            for (int i = 0; i < n; ++i, ++p, ++code) {
                if (l <= SCAN_LOOKAHEAD) {
                    const int first = code << (SCAN_LOOKAHEAD - l);
                    for (int f = 0; f < (1 << (SCAN_LOOKAHEAD - l)); ++f)
                        t.lookup[first + f] = (unsigned short)((l << 8) | src[16 + (p & 255)]);
                }
            }
            t.maxcode[l] = code - 1;
        } else {
            t.valoffset[l] = 0;
            t.maxcode[l] = -1;
        }
        code <<= 1;
    }
    t.maxcode[17] = 0xFFFFF;
    t.valoffset[17] = 0;
}

__device__ __forceinline__ unsigned scan_swap(unsigned x) { return __byte_perm(x, 0, 0x0123); }

// The 32 bits of the stream from bit `pos`, those at or past `end` (the segment's end) zero,
// as libjpeg reads zeros once it meets a marker.
__device__ __forceinline__ unsigned scan_peek(const unsigned* words, unsigned pos, unsigned end) {
    const unsigned q = pos >> 5, r = pos & 31;
    const unsigned long long w = ((unsigned long long)scan_swap(words[q]) << 32) | scan_swap(words[q + 1]);
    unsigned v = (unsigned)((w << r) >> 32);
    if (pos + 32 > end) {
        const unsigned valid = end > pos ? end - pos : 0;
        v = valid == 0 ? 0u : v & (0xFFFFFFFFu << (32 - valid));
    }
    return v;
}

// The symbol the next code of `bits` (MSB first) stands for, and its length; -1 for a code no
// table entry holds (libjpeg warns, JWRN_HUFF_BAD_CODE).
__device__ __forceinline__ int scan_symbol(const HuffTable& t, unsigned bits, int& len) {
    const unsigned e = t.lookup[bits >> (32 - SCAN_LOOKAHEAD)];
    if (e) {
        len = e >> 8;
        return e & 255;
    }
    for (int l = SCAN_LOOKAHEAD + 1; l <= 16; ++l) {
        const int code = (int)(bits >> (32 - l));
        if (code <= t.maxcode[l]) {
            len = l;
            return t.values[(code + t.valoffset[l]) & 255];
        }
    }
    len = 16;
    return -1;
}

// jdhuff.c's HUFF_EXTEND: `s` bits `x` as a signed value.
__device__ __forceinline__ int scan_extend(unsigned x, int s) {
    return s == 0 ? 0 : ((int)x < (1 << (s - 1)) ? (int)x - (1 << s) + 1 : (int)x);
}

template <int THREADS>
struct ScanShared {
    HuffTable tables[4];
    ScanImage image;
    // Per thread, for phase 3's scan: blocks, three DC sums, and whether its run starts a segment.
    int totals[4][THREADS];
    int starts[THREADS];
};

// Where one decoding of a chunk writes (phase 4 only).
struct ScanWriter {
    short* coefs;
    const JpegComponent* components;
    int next_block;   // index within the segment of the next block to begin
    int end_block;    // blocks of the segment
    int first_block;  // index of the segment's first block in the scan
    int pred[3];      // DC predictors
    short* block;     // the block being filled, or null (a padding block past the component)
    bool bad;
};

__device__ __forceinline__ short* scan_block_at(const ScanImage& im, const ScanWriter& w, int block_in_scan) {
    const int m = block_in_scan / im.blocks_in_mcu, b = block_in_scan % im.blocks_in_mcu;
    const int code = im.mcu[b];
    const int slot = code & 3, dx = (code >> 2) & 3, dy = (code >> 4) & 3;
    const int h = im.sampling[slot] & 15, v = im.sampling[slot] >> 4;
    const JpegComponent& c = w.components[im.components[slot]];
    const long long row = (long long)(m / im.mcus_per_row) * v + dy;
    const long long col = (long long)(m % im.mcus_per_row) * h + dx;
    if (row >= c.blocks_high || col >= c.blocks_wide) return nullptr;
    return w.coefs + c.coef_offset + (row * c.blocks_wide + col) * 64;
}

// Decodes from state (pos, b, k) while symbols start before `end` (bits), counting into `out`;
// with WRITE, stores coefficients through `w` and stops after the segment's last block.
template <bool WRITE>
__device__ void scan_chunk(const HuffTable* tables, const ScanImage& im, const unsigned* words, unsigned seg_end,
                           unsigned end, unsigned& pos, int& b, int& k, ChunkState& out, ScanWriter* w) {
    while (pos < end) {
        const int code = im.mcu[b];
        const int slot = code & 3;
        const unsigned bits = scan_peek(words, pos, seg_end);
        int len;
        if (k == 0) {
            if (WRITE) {
                if (w->next_block >= w->end_block) return;  // past the segment's last block
                w->block = scan_block_at(im, *w, w->first_block + w->next_block);
                w->next_block++;
            }
            int s = scan_symbol(tables[im.tables_of[slot] & 15], bits, len);
            if (s < 0) {
                out.flags |= JPEG_STATUS_ENTROPY;
                s = 0;
            }
            const int diff = scan_extend(s ? (bits << len) >> (32 - s) : 0u, s);
            pos += len + s;
            out.blocks++;
            out.dc[slot] = (int)((unsigned)out.dc[slot] + (unsigned)diff);
            if (WRITE) {
                w->pred[slot] = (int)((unsigned)w->pred[slot] + (unsigned)diff);
                if (w->block) w->block[0] = (short)w->pred[slot];
            }
            k = 1;
        } else {
            int rs = scan_symbol(tables[im.tables_of[slot] >> 4], bits, len);
            if (rs < 0) {
                out.flags |= JPEG_STATUS_ENTROPY;
                rs = 0;
            }
            const int r = rs >> 4, s = rs & 15;
            if (s) {
                k += r;
                const int value = scan_extend((bits << len) >> (32 - s), s);
                if (WRITE && w->block) w->block[scan_natural_order[k]] = (short)value;
                pos += len + s;
                k += 1;
            } else if (r == 15) {
                pos += len;
                k += 16;
            } else {
                pos += len;
                k = 64;
            }
        }
        if (WRITE && pos > seg_end) out.flags |= JPEG_STATUS_ENTROPY;  // the block needed bits past the data
        if (k >= 64) {
            k = 0;
            b = b + 1 == im.blocks_in_mcu ? 0 : b + 1;
        }
    }
}

template <int THREADS>
__device__ __forceinline__ void jpeg_scan(const unsigned char* image_table, const unsigned char* segment_table,
                                          const unsigned char* chunk_table, const unsigned char* component_table,
                                          const unsigned char* data, unsigned char* state_bytes, unsigned char* coef_bytes,
                                          unsigned int* status) {
    __shared__ ScanShared<THREADS> sh;
    const int t = threadIdx.x;
    if (t == 0) sh.image = reinterpret_cast<const ScanImage*>(image_table)[blockIdx.x];
    __syncthreads();
    const ScanImage& im = sh.image;
    const ScanSegment* segments = reinterpret_cast<const ScanSegment*>(segment_table);
    const ScanChunk* chunks = reinterpret_cast<const ScanChunk*>(chunk_table) + im.first_chunk;
    ChunkState* states = reinterpret_cast<ChunkState*>(state_bytes) + im.first_chunk;
    const JpegComponent* components = reinterpret_cast<const JpegComponent*>(component_table);
    const unsigned* words = reinterpret_cast<const unsigned*>(data + im.stream_at);
    short* coefs = reinterpret_cast<short*>(coef_bytes);

    // Phase 0: the tables, and the image's coefficients zeroed (the scan writes only non-zero
    // ones). Coefficient regions are 16-byte aligned (batch.rs).
    if (t < im.table_count) scan_build_table(sh.tables[t], data + im.tables_at + t * 272);
    for (int slot = 0; slot < im.component_count; ++slot) {
        const JpegComponent& c = components[im.components[slot]];
        uint4* region = reinterpret_cast<uint4*>(coefs + c.coef_offset);
        const long long n = (long long)c.blocks_wide * c.blocks_high * 8;  // 16-byte units
        for (long long i = t; i < n; i += THREADS) region[i] = make_uint4(0, 0, 0, 0);
    }
    __syncthreads();

    const int n = im.chunks;
    const int per = (n + THREADS - 1) / THREADS;
    const int lo = min(t * per, n), hi = min(lo + per, n);
    auto first_of_segment = [&](int j) { return (chunks[j].segment & SCAN_FIRST) != 0; };
    auto segment_of = [&](int j) { return segments[chunks[j].segment & ~SCAN_FIRST]; };
    auto chunk_end = [&](int j) {
        const ScanSegment s = segment_of(j);
        return min(chunks[j].start + SCAN_CHUNK_BYTES, s.end) * 8u;
    };

    // Phase 1: each run from a guess at its first chunk (a segment's first chunk is known).
    {
        unsigned pos = chunks[lo < n ? lo : 0].start * 8u;
        int b = 0, k = 0;
        for (int j = lo; j < hi; ++j) {
            if (first_of_segment(j)) {
                pos = chunks[j].start * 8u;
                b = 0;
                k = 0;
            }
            ChunkState s = {};
            scan_chunk<false>(sh.tables, im, words, segment_of(j).end * 8u, chunk_end(j), pos, b, k, s, nullptr);
            s.exit_pos = pos;
            s.exit_bk = (unsigned)b | ((unsigned)k << 8);
            states[j] = s;
        }
    }
    __syncthreads();

    // Phase 2: rounds until every run's entry is its predecessor's exit.
    const bool fixed_entry = lo >= hi || first_of_segment(lo);
    unsigned used_pos = lo < n ? chunks[lo].start * 8u : 0, used_bk = 0;
    while (true) {
        unsigned entry_pos = 0, entry_bk = 0;
        if (!fixed_entry) {
            entry_pos = states[lo - 1].exit_pos;
            entry_bk = states[lo - 1].exit_bk;
        }
        __syncthreads();
        bool changed = false;
        if (!fixed_entry && (entry_pos != used_pos || entry_bk != used_bk)) {
            used_pos = entry_pos;
            used_bk = entry_bk;
            unsigned pos = entry_pos;
            int b = entry_bk & 255, k = entry_bk >> 8;
            for (int j = lo; j < hi; ++j) {
                if (first_of_segment(j)) break;  // the rest of the run starts from a known state
                ChunkState s = {};
                scan_chunk<false>(sh.tables, im, words, segment_of(j).end * 8u, chunk_end(j), pos, b, k, s, nullptr);
                s.exit_pos = pos;
                s.exit_bk = (unsigned)b | ((unsigned)k << 8);
                const bool same = s.exit_pos == states[j].exit_pos && s.exit_bk == states[j].exit_bk;
                states[j] = s;
                if (same) break;
                if (j == hi - 1) changed = true;
            }
        }
        if (!__syncthreads_or(changed)) break;
    }

    // Phase 3: blocks before each chunk within its segment, and the DC predictors at its entry.
    {
        int run[4] = {0, 0, 0, 0};
        int starts = 0;
        for (int j = lo; j < hi; ++j) {
            if (first_of_segment(j)) {
                run[0] = run[1] = run[2] = run[3] = 0;
                starts = 1;
            }
            run[0] += states[j].blocks;
            for (int c = 0; c < 3; ++c) run[1 + c] = (int)((unsigned)run[1 + c] + (unsigned)states[j].dc[c]);
        }
        for (int v = 0; v < 4; ++v) sh.totals[v][t] = run[v];
        sh.starts[t] = starts;
        __syncthreads();
        // Inclusive segmented scan over the threads: (a, fa) then (b, fb) is (fb ? b : a + b, fa | fb).
        for (int offset = 1; offset < THREADS; offset <<= 1) {
            int before[4] = {0, 0, 0, 0}, before_start = 1;
            if (t >= offset) {
                for (int v = 0; v < 4; ++v) before[v] = sh.totals[v][t - offset];
                before_start = sh.starts[t - offset];
            }
            __syncthreads();
            if (t >= offset && !sh.starts[t]) {
                for (int v = 0; v < 4; ++v) sh.totals[v][t] = (int)((unsigned)sh.totals[v][t] + (unsigned)before[v]);
                sh.starts[t] = before_start;
            }
            __syncthreads();
        }
        int carry[4] = {0, 0, 0, 0};
        if (t > 0)
            for (int v = 0; v < 4; ++v) carry[v] = sh.totals[v][t - 1];
        for (int j = lo; j < hi; ++j) {
            if (first_of_segment(j)) carry[0] = carry[1] = carry[2] = carry[3] = 0;
            ChunkState& s = states[j];
            const int counts[4] = {s.blocks, s.dc[0], s.dc[1], s.dc[2]};
            s.blocks = carry[0];
            for (int c = 0; c < 3; ++c) s.dc[c] = carry[1 + c];
            for (int v = 0; v < 4; ++v) carry[v] = (int)((unsigned)carry[v] + (unsigned)counts[v]);
            // A segment's last chunk: did its blocks all begin?
            if (j + 1 == n || first_of_segment(j + 1)) {
                const ScanSegment seg = segment_of(j);
                if ((long long)carry[0] < (long long)seg.mcus * im.blocks_in_mcu)
                    atomicOr(status + im.image, JPEG_STATUS_ENTROPY);
            }
        }
    }
    __syncthreads();

    // Phase 4: decode again from the settled states, writing the coefficients.
    bool bad = false;
    for (int j = lo; j < hi; ++j) {
        const ScanSegment seg = segment_of(j);
        unsigned pos;
        int b, k;
        if (first_of_segment(j)) {
            pos = chunks[j].start * 8u;
            b = 0;
            k = 0;
        } else {
            pos = states[j - 1].exit_pos;
            b = states[j - 1].exit_bk & 255;
            k = states[j - 1].exit_bk >> 8;
        }
        ScanWriter w;
        w.coefs = coefs;
        w.components = components;
        w.next_block = states[j].blocks;
        w.end_block = (int)(seg.mcus * (unsigned)im.blocks_in_mcu);
        w.first_block = (int)(seg.first_mcu * (unsigned)im.blocks_in_mcu);
        for (int c = 0; c < 3; ++c) w.pred[c] = states[j].dc[c];
        w.block = nullptr;
        // Entering inside a block begun in the chunk before: that block, unless it is past the end.
        if (k != 0) {
            if (w.next_block > w.end_block) continue;
            w.block = scan_block_at(im, w, w.first_block + w.next_block - 1);
        }
        ChunkState s = {};
        scan_chunk<true>(sh.tables, im, words, seg.end * 8u, chunk_end(j), pos, b, k, s, &w);
        bad |= s.flags != 0;
        // The segment's data ended inside one of its blocks (libjpeg would read zeros, and warn).
        const bool last_of_segment = j + 1 == n || first_of_segment(j + 1);
        bad |= last_of_segment && k != 0 && w.next_block <= w.end_block;
    }
    if (bad) atomicOr(status + im.image, JPEG_STATUS_ENTROPY);
}

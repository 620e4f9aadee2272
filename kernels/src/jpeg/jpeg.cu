// JPEG decoding from quantised DCT coefficients, bit for bit as libjpeg-turbo's decompressor
// (the one Pillow uses) with its default settings: the accurate integer IDCT (jidctint.c,
// "islow"), the fancy triangle upsampling of jdsample.c where libjpeg-turbo chooses it and
// replication elsewhere, and jdcolor.c's fixed-point YCbCr to RGB. The host has done the
// entropy decoding (Huffman or arithmetic, baseline or progressive) and the checks that make
// this path exact (see mod.rs).
//
// Two block programs over a batch of images, driven by descriptor tables the host writes
// (layouts in batch.rs, mirrored by the structs below):
// - jpeg_idct: one 8x8 block per 8 threads. Each thread dequantises and transforms one column
//   (pass 1), the block's 8 threads swap through shared memory, and each transforms one row
//   (pass 2) and stores its 8 samples with one 8-byte store into the component's plane.
//   blockIdx.y is the component (of all the batch's images), blockIdx.x strides over its
//   blocks.
// - jpeg_colour: one output pixel per thread, in the upright (EXIF-oriented) image: finds the
//   stored pixel it shows, upsamples each component there, converts to RGB and stores 3 bytes.
//   blockIdx.y is the image, blockIdx.x strides over its pixels.
#include "common.cuh"

#include "jpeg_records.cuh"

enum JpegUpsample { FULL = 0, REPLICATE = 1, FANCY_H2V1 = 2, FANCY_H1V2 = 3, FANCY_H2V2 = 4 };
enum JpegColour { GREY = 0, YCBCR = 1, RGB = 2 };

// jidctint.c's fixed-point constants: round(x * 2^13).
#define JPEG_CONST_BITS 13
#define JPEG_PASS1_BITS 2
#define FIX_0_298631336 2446
#define FIX_0_390180644 3196
#define FIX_0_541196100 4433
#define FIX_0_765366865 6270
#define FIX_0_899976223 7373
#define FIX_1_175875602 9633
#define FIX_1_501321110 12299
#define FIX_1_847759065 15137
#define FIX_1_961570560 16069
#define FIX_2_053119869 16819
#define FIX_2_562915447 20995
#define FIX_3_072711026 25172

// One 8-point pass of the islow IDCT on in[0..8] (already dequantised in pass 1), returning the
// eight sums before descaling, in output order. The host has bounded every block so that these
// fit in 32 bits (mod.rs: the exactness guard).
__device__ __forceinline__ void islow_8(const int in[8], int out[8]) {
    int z2 = in[2], z3 = in[6];
    int z1 = (z2 + z3) * FIX_0_541196100;
    int tmp2 = z1 + z3 * -FIX_1_847759065;
    int tmp3 = z1 + z2 * FIX_0_765366865;
    int tmp0 = (in[0] + in[4]) * (1 << JPEG_CONST_BITS);
    int tmp1 = (in[0] - in[4]) * (1 << JPEG_CONST_BITS);
    int tmp10 = tmp0 + tmp3, tmp13 = tmp0 - tmp3;
    int tmp11 = tmp1 + tmp2, tmp12 = tmp1 - tmp2;

    tmp0 = in[7];
    tmp1 = in[5];
    tmp2 = in[3];
    tmp3 = in[1];
    z1 = tmp0 + tmp3;
    z2 = tmp1 + tmp2;
    z3 = tmp0 + tmp2;
    int z4 = tmp1 + tmp3;
    int z5 = (z3 + z4) * FIX_1_175875602;
    tmp0 *= FIX_0_298631336;
    tmp1 *= FIX_2_053119869;
    tmp2 *= FIX_3_072711026;
    tmp3 *= FIX_1_501321110;
    z1 *= -FIX_0_899976223;
    z2 *= -FIX_2_562915447;
    z3 = z3 * -FIX_1_961570560 + z5;
    z4 = z4 * -FIX_0_390180644 + z5;
    tmp0 += z1 + z3;
    tmp1 += z2 + z4;
    tmp2 += z2 + z3;
    tmp3 += z1 + z4;

    out[0] = tmp10 + tmp3;
    out[7] = tmp10 - tmp3;
    out[1] = tmp11 + tmp2;
    out[6] = tmp11 - tmp2;
    out[2] = tmp12 + tmp1;
    out[5] = tmp12 - tmp1;
    out[3] = tmp13 + tmp0;
    out[4] = tmp13 - tmp0;
}

__device__ __forceinline__ int descale(int x, int n) { return (x + (1 << (n - 1))) >> n; }

// The exactness guard's bounds (cpu.rs): within them the 32-bit sums equal libjpeg's.
#define JPEG_MAX_DEQUANTISED 4095
#define JPEG_MAX_BETWEEN_PASSES 8191

template <int THREADS>
__device__ __forceinline__ void jpeg_idct(const unsigned char* component_table, const unsigned char* coef_bytes,
                                          const unsigned char* quant_bytes, unsigned char* planes,
                                          unsigned int* status) {
    constexpr int BLOCKS = THREADS / 8;
    __shared__ int workspace[BLOCKS][8][9];  // [block][row][column], padded against bank conflicts
    const JpegComponent c = reinterpret_cast<const JpegComponent*>(component_table)[blockIdx.y];
    const short* coefs = reinterpret_cast<const short*>(coef_bytes) + c.coef_offset;
    const int* quant = reinterpret_cast<const int*>(quant_bytes) + c.quant_offset;
    unsigned char* plane = planes + c.plane_offset;
    const long long stride = (long long)c.blocks_wide * 8;
    const long long blocks = (long long)c.blocks_wide * c.blocks_high;
    const int local = threadIdx.x / 8, lane = threadIdx.x % 8;
    int column_quant[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) column_quant[k] = quant[k * 8 + lane];

    // Whether a block this thread transformed left the exactness guard's bounds (cpu.rs's
    // block_is_exact, checked on the values themselves): its image is decoded again by the
    // host. Images the host entropy-decoded were checked before; this catches the others.
    bool outside = false;
    for (long long first = (long long)blockIdx.x * BLOCKS; first < blocks; first += (long long)gridDim.x * BLOCKS) {
        const long long block = first + local;
        const bool live = block < blocks;
        if (live) {
            // Pass 1: column `lane`, dequantised, scaled up by 2^PASS1_BITS.
            const short* in = coefs + block * 64;
            int column[8], sums[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                column[k] = (int)in[k * 8 + lane] * column_quant[k];
                outside |= abs(column[k]) > JPEG_MAX_DEQUANTISED;
            }
            islow_8(column, sums);
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int v = descale(sums[k], JPEG_CONST_BITS - JPEG_PASS1_BITS);
                outside |= abs(v) > JPEG_MAX_BETWEEN_PASSES;
                workspace[local][k][lane] = v;
            }
        }
        __syncwarp();
        if (live) {
            // Pass 2: row `lane`, descaled by 2^(CONST_BITS + PASS1_BITS + 3), shifted by 128 and
            // clamped (the guard keeps every value where libjpeg's range-limit table clamps).
            int row[8], sums[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) row[k] = workspace[local][lane][k];
            islow_8(row, sums);
            unsigned long long packed = 0;
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int centred = descale(sums[k], JPEG_CONST_BITS + JPEG_PASS1_BITS + 3);
                outside |= centred < -512 || centred > 511;
                const int v = min(max(centred + 128, 0), 255);
                packed |= (unsigned long long)v << (8 * k);
            }
            const long long by = block / c.blocks_wide, bx = block % c.blocks_wide;
            *reinterpret_cast<unsigned long long*>(plane + (by * 8 + lane) * stride + bx * 8) = packed;
        }
        __syncwarp();
    }
    if (outside) atomicOr(status + c.image, JPEG_STATUS_GUARD);
}

// The sample of component `c` at stored pixel (x, y), upsampled as jdsample.c does it.
__device__ __forceinline__ int upsampled(const JpegComponent& c, const unsigned char* planes, int x, int y) {
    const unsigned char* p = planes + c.plane_offset;
    const long long stride = (long long)c.blocks_wide * 8;
    const int last_x = c.downsampled_width - 1, last_y = c.downsampled_height - 1;
    switch (c.upsample) {
        case FULL:
            return p[y * stride + x];
        case REPLICATE:
            return p[(y / c.v_expand) * stride + x / c.h_expand];
        case FANCY_H2V1: {
            // 3/4 of the nearer sample, 1/4 of the next one out (the edge sample repeated);
            // rounding biases 1 and 2 alternate, as libjpeg's ordered dither.
            const int i = x >> 1, odd = x & 1;
            const int far = odd ? min(i + 1, last_x) : max(i - 1, 0);
            return (3 * p[y * stride + i] + p[y * stride + far] + 1 + odd) >> 2;
        }
        case FANCY_H1V2: {
            const int r = y >> 1, odd = y & 1;
            const int far = odd ? min(r + 1, last_y) : max(r - 1, 0);
            return (3 * p[r * stride + x] + p[far * stride + x] + 1 + odd) >> 2;
        }
        default: {  // FANCY_H2V2: vertical 3:1 column sums first, then 3:1 across them
            const int r = y >> 1, fr = (y & 1) ? min(r + 1, last_y) : max(r - 1, 0);
            const int i = x >> 1, odd = x & 1;
            const int fi = odd ? min(i + 1, last_x) : max(i - 1, 0);
            const int near_sum = 3 * p[r * stride + i] + p[fr * stride + i];
            const int far_sum = 3 * p[r * stride + fi] + p[fr * stride + fi];
            return (3 * near_sum + far_sum + 8 - odd) >> 4;
        }
    }
}

__device__ __forceinline__ unsigned char clamp_sample(int v) { return (unsigned char)min(max(v, 0), 255); }

template <int THREADS>
__device__ __forceinline__ void jpeg_colour(const unsigned char* image_table, const unsigned char* component_table,
                                            const unsigned char* planes, unsigned char* rgb) {
    const JpegImage image = reinterpret_cast<const JpegImage*>(image_table)[blockIdx.y];
    const JpegComponent* components = reinterpret_cast<const JpegComponent*>(component_table);
    const int w = image.width, h = image.height;
    // Orientations 5 to 8 swap the axes.
    const bool swaps = image.orientation >= 5;
    const int out_w = swaps ? h : w;
    const long long pixels = (long long)w * h;
    unsigned char* out = rgb + image.rgb_offset;
    for (long long p = (long long)blockIdx.x * THREADS + threadIdx.x; p < pixels; p += (long long)gridDim.x * THREADS) {
        const int oy = (int)(p / out_w), ox = (int)(p % out_w);
        // The stored pixel (x, y) that upright pixel (ox, oy) shows, as PIL's exif_transpose.
        int x, y;
        switch (image.orientation) {
            case 2: x = w - 1 - ox; y = oy; break;
            case 3: x = w - 1 - ox; y = h - 1 - oy; break;
            case 4: x = ox; y = h - 1 - oy; break;
            case 5: x = oy; y = ox; break;
            case 6: x = oy; y = h - 1 - ox; break;
            case 7: x = w - 1 - oy; y = h - 1 - ox; break;
            case 8: x = w - 1 - oy; y = ox; break;
            default: x = ox; y = oy; break;
        }
        unsigned char r, g, b;
        const int s0 = upsampled(components[image.components[0]], planes, x, y);
        if (image.colour == GREY) {
            r = g = b = (unsigned char)s0;
        } else {
            const int s1 = upsampled(components[image.components[1]], planes, x, y);
            const int s2 = upsampled(components[image.components[2]], planes, x, y);
            if (image.colour == RGB) {
                r = (unsigned char)s0;
                g = (unsigned char)s1;
                b = (unsigned char)s2;
            } else {
                // jdcolor.c's tables, computed: 16-bit fixed point, FIX(x) = round(x * 2^16).
                const int cb = s1 - 128, cr = s2 - 128;
                r = clamp_sample(s0 + ((91881 * cr + 32768) >> 16));
                g = clamp_sample(s0 + ((-22554 * cb + 32768 - 46802 * cr) >> 16));
                b = clamp_sample(s0 + ((116130 * cb + 32768) >> 16));
            }
        }
        out[p * 3 + 0] = r;
        out[p * 3 + 1] = g;
        out[p * 3 + 2] = b;
    }
}

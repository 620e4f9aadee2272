// PIL's Image.resize for 8-bit images, then HF's center crop, over a batch of images on the
// GPU: the same fixed-point taps as the host (model/src/preprocess/resize.rs builds them and
// the host writes them into `taps`), each pass rounded and clipped to 8 bits, the passes in
// Pillow's order. A pass whose size does not change gets identity taps (one tap of weight 1.0),
// which gives what skipping it gives.
//
// Two block programs; blockIdx.y is the image, blockIdx.x strides over its output values (one
// channel of one pixel per thread, so neighbouring threads read neighbouring bytes):
// - resample_first: the whole first pass into the intermediate `mid`.
// - resample_second: the second pass, only inside the crop window, written HWC into `dst`;
//   the window's part outside the resized image is zeros, as HF pads.
// Sums are 64-bit: PIL sums in a C int, the host in i32 where that cannot overflow and i64
// elsewhere, and all agree wherever i32 does not overflow.
#include "common.cuh"

struct ResampleImage {
    long long src_offset;  // first byte of the upright HWC image in `src`
    long long mid_offset;  // first byte of the intermediate in `mid`
    long long dst_offset;  // first byte of the cropped output in `dst`
    int in_height, in_width;
    int out_height, out_width;  // the resized size
    int crop_height, crop_width;
    int crop_top, crop_left;  // the window's start in the resized image (negative: padding)
    int vertical_first;
    int first_taps, second_taps;  // tap tables' offsets in `taps`
    int channels;
    int reserved[2];
};

// A tap table at `taps + at`: [outputs, slots, first[outputs], count[outputs], weights[outputs * slots]].
#define RESAMPLE_PRECISION_BITS 22

__device__ __forceinline__ unsigned char resample_one(const int* table, int out_index, const unsigned char* src,
                                                      long long step) {
    const int outputs = table[0], slots = table[1];
    const int first = table[2 + out_index];
    const int count = table[2 + outputs + out_index];
    const int* weights = table + 2 + 2 * outputs + (long long)out_index * slots;
    long long sum = 1 << (RESAMPLE_PRECISION_BITS - 1);
    const unsigned char* at = src + first * step;
    for (int k = 0; k < count; ++k) sum += (long long)at[k * step] * weights[k];
    return (unsigned char)min(max(sum >> RESAMPLE_PRECISION_BITS, 0LL), 255LL);
}

template <int THREADS>
__device__ __forceinline__ void resample_first(const unsigned char* image_table, const unsigned char* tap_bytes,
                                               const unsigned char* src, unsigned char* mid) {
    const ResampleImage im = reinterpret_cast<const ResampleImage*>(image_table)[blockIdx.y];
    const int* table = reinterpret_cast<const int*>(tap_bytes) + im.first_taps;
    const int c = im.channels;
    // Vertical first: out_height rows of in_width; else in_height rows of out_width.
    const int rows = im.vertical_first ? im.out_height : im.in_height;
    const int cols = im.vertical_first ? im.in_width : im.out_width;
    const long long values = (long long)rows * cols * c;
    const unsigned char* in = src + im.src_offset;
    unsigned char* out = mid + im.mid_offset;
    for (long long v = (long long)blockIdx.x * THREADS + threadIdx.x; v < values; v += (long long)gridDim.x * THREADS) {
        const int channel = (int)(v % c);
        const long long pixel = v / c;
        const int y = (int)(pixel / cols), x = (int)(pixel % cols);
        out[v] = im.vertical_first
                     ? resample_one(table, y, in + (long long)x * c + channel, (long long)im.in_width * c)
                     : resample_one(table, x, in + (long long)y * im.in_width * c + channel, c);
    }
}

template <int THREADS>
__device__ __forceinline__ void resample_second(const unsigned char* image_table, const unsigned char* tap_bytes,
                                                const unsigned char* mid, unsigned char* dst) {
    const ResampleImage im = reinterpret_cast<const ResampleImage*>(image_table)[blockIdx.y];
    const int* table = reinterpret_cast<const int*>(tap_bytes) + im.second_taps;
    const int c = im.channels;
    const long long values = (long long)im.crop_height * im.crop_width * c;
    const unsigned char* in = mid + im.mid_offset;
    unsigned char* out = dst + im.dst_offset;
    for (long long v = (long long)blockIdx.x * THREADS + threadIdx.x; v < values; v += (long long)gridDim.x * THREADS) {
        const int channel = (int)(v % c);
        const long long pixel = v / c;
        const int y = (int)(pixel / im.crop_width) + im.crop_top;
        const int x = (int)(pixel % im.crop_width) + im.crop_left;
        unsigned char value = 0;
        if (y >= 0 && y < im.out_height && x >= 0 && x < im.out_width) {
            // Vertical first: the intermediate is out_height x in_width, resampled along x;
            // else in_height x out_width, resampled along y.
            value = im.vertical_first
                        ? resample_one(table, x, in + (long long)y * im.in_width * c + channel, c)
                        : resample_one(table, y, in + (long long)x * c + channel, (long long)im.out_width * c);
        }
        out[v] = value;
    }
}

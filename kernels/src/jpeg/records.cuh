// The JPEG kernels' descriptor records (layouts written by batch.rs), shared by jpeg.cu and
// jpeg_scan/scan.cu.
#pragma once

struct JpegComponent {
    long long coef_offset;   // first coefficient (i16) of the component in `coefs`
    long long plane_offset;  // first sample byte of its plane in `planes`
    int blocks_wide;         // blocks per row; the plane is blocks_wide * 8 bytes wide
    int blocks_high;
    int quant_offset;        // first of its 64 dequantisation multipliers in `quant`
    int downsampled_width;   // samples that hold image data, as libjpeg counts them
    int downsampled_height;
    int upsample;            // jpeg.cu's JpegUpsample
    int h_expand;            // replication factors (upsample == REPLICATE)
    int v_expand;
    int image;               // its image's index in the batch: the status word a block outside
                             // the exactness guard marks
    int reserved[3];
};

struct JpegImage {
    int components[3];       // indices into the component table; only [0] for grey
    int colour;              // jpeg.cu's JpegColour
    int width;               // as stored in the file
    int height;
    int orientation;         // EXIF 1..8
    int reserved;
    long long rgb_offset;    // first byte of the upright HWC RGB image in `rgb`
    long long reserved2;
};

// Bits of an image's status word, which the kernels set and the host reads after the batch:
// an image with any bit set was decoded wrongly and must be decoded again by the host.
#define JPEG_STATUS_ENTROPY 1u  // entropy-coded data libjpeg would warn about (scan.cu)
#define JPEG_STATUS_GUARD 2u    // a block outside the exactness guard (jpeg.cu)

//! A batch of JPEG images as quantised coefficients, and the descriptor tables the kernels
//! read: the Rust side of the structs at the top of jpeg.cu, written byte for byte.

/// How a component's samples become one per pixel, as libjpeg-turbo's `jinit_upsampler`
/// chooses for it (with fancy upsampling on, its default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upsample {
    /// Full size: one sample per pixel.
    Full,
    /// Each sample repeated `h` times across and `v` times down (libjpeg's `int_upsample`,
    /// `h2v1_upsample`, `h2v2_upsample`).
    Replicate { h: u32, v: u32 },
    /// 2:1 across, the triangle filter (`h2v1_fancy_upsample`).
    FancyH2V1,
    /// 2:1 down, the triangle filter (`h1v2_fancy_upsample`).
    FancyH1V2,
    /// 2:1 both ways, the triangle filter (`h2v2_fancy_upsample`).
    FancyH2V2,
}

impl Upsample {
    /// libjpeg-turbo's choice for a component of sampling factors (`h`, `v`) in an image whose
    /// largest are (`max_h`, `max_v`), with `downsampled_width` samples across; `None` where
    /// libjpeg refuses the ratio (`JERR_FRACT_SAMPLE_NOTIMPL`).
    pub fn choose(h: u32, v: u32, max_h: u32, max_v: u32, downsampled_width: u32) -> Option<Self> {
        if h == 0 || v == 0 {
            return None;
        }
        let wide_enough = downsampled_width > 2;
        Some(if (h, v) == (max_h, max_v) {
            Upsample::Full
        } else if h * 2 == max_h && v == max_v {
            if wide_enough {
                Upsample::FancyH2V1
            } else {
                Upsample::Replicate { h: 2, v: 1 }
            }
        } else if h == max_h && v * 2 == max_v {
            Upsample::FancyH1V2
        } else if h * 2 == max_h && v * 2 == max_v {
            if wide_enough {
                Upsample::FancyH2V2
            } else {
                Upsample::Replicate { h: 2, v: 2 }
            }
        } else if max_h.is_multiple_of(h) && max_v.is_multiple_of(v) {
            Upsample::Replicate {
                h: max_h / h,
                v: max_v / v,
            }
        } else {
            return None;
        })
    }

    fn code(self) -> (i32, u32, u32) {
        match self {
            Upsample::Full => (0, 1, 1),
            Upsample::Replicate { h, v } => (1, h, v),
            Upsample::FancyH2V1 => (2, 1, 1),
            Upsample::FancyH1V2 => (3, 1, 1),
            Upsample::FancyH2V2 => (4, 1, 1),
        }
    }
}

/// One component of one image: its coefficient blocks, its dequantisation multipliers, and
/// where its samples go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JpegComponent {
    /// The first of its `blocks_wide * blocks_high * 64` coefficients in the batch's `coefs`,
    /// block after block in row order, each in natural (not zigzag) order, as libjpeg keeps
    /// them.
    pub coef_offset: usize,
    /// The first byte of its plane of samples, `blocks_wide * 8` bytes wide and `blocks_high
    /// * 8` high, in the planes buffer.
    pub plane_offset: usize,
    pub blocks_wide: u32,
    pub blocks_high: u32,
    /// The first of its 64 multipliers in the batch's `quant` (natural order).
    pub quant_offset: usize,
    /// The samples that hold image data: `ceil(image_width * h / max_h)` across and likewise
    /// down, as libjpeg's `downsampled_width` and `downsampled_height`.
    pub downsampled_width: u32,
    pub downsampled_height: u32,
    pub upsample: Upsample,
    /// Its image's index in the batch's image list: the status word a block outside the
    /// exactness guard marks ([`STATUS_GUARD`]).
    pub image: usize,
}

impl JpegComponent {
    pub fn blocks(&self) -> usize {
        self.blocks_wide as usize * self.blocks_high as usize
    }

    pub fn plane_len(&self) -> usize {
        self.blocks() * 64
    }

    pub fn plane_stride(&self) -> usize {
        self.blocks_wide as usize * 8
    }
}

/// The colour of a JPEG's samples, as libjpeg's `jpeg_color_space` after the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JpegColour {
    /// One component, replicated into R, G and B (libjpeg's gray_rgb_convert).
    Grey,
    /// Y, Cb, Cr converted by jdcolor.c's fixed-point tables.
    YCbCr,
    /// R, G, B stored as they are (Adobe transform 0).
    Rgb,
}

/// One image: its components (indices into the batch's component list), its size as stored,
/// the EXIF orientation to apply (1 to 8), and where its upright HWC RGB pixels go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JpegImage {
    /// One index for grey images, three otherwise.
    pub components: Vec<usize>,
    pub colour: JpegColour,
    pub width: u32,
    pub height: u32,
    pub orientation: u8,
    pub rgb_offset: usize,
}

impl JpegImage {
    /// (height, width) once upright.
    pub fn upright_size(&self) -> (usize, usize) {
        upright_size(self.width, self.height, self.orientation)
    }

    pub fn rgb_len(&self) -> usize {
        self.width as usize * self.height as usize * 3
    }
}

/// A bit of an image's status word (one `u32` an image, zeroed before the batch): its
/// entropy-coded data is something libjpeg would warn about (jpeg_scan's program).
pub const STATUS_ENTROPY: u32 = 1;
/// A bit of an image's status word: one of its blocks is outside the exactness guard
/// (`jpeg_idct`). An image with any bit set was decoded wrongly; the host decodes it again.
pub const STATUS_GUARD: u32 = 2;

/// Bytes of one `JpegComponent` in the table jpeg.cu reads.
pub const COMPONENT_RECORD_BYTES: usize = 64;
/// Bytes of one `JpegImage` in the table jpeg.cu reads.
pub const IMAGE_RECORD_BYTES: usize = 48;

/// A batch's descriptors: every image and every component, whose offsets address a batch's
/// coefficients (i16) and multipliers (i32, 64 a table, as libjpeg's islow `dct_table` holds
/// them: the quantisation table's values as 16-bit signed integers) kept apart from it, in
/// host memory for the twins or in one device buffer for the kernels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JpegBatch {
    pub components: Vec<JpegComponent>,
    pub images: Vec<JpegImage>,
}

/// Coefficients and multipliers in host memory, addressed by a [`JpegBatch`]'s offsets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JpegData {
    pub coefs: Vec<i16>,
    pub quant: Vec<i32>,
}

impl JpegData {
    /// One byte buffer holding both, little-endian, as the kernels read it: coefficient `i` at
    /// byte `2 i`, multiplier `j` at byte `4 j`.
    pub fn from_le_bytes(bytes: &[u8]) -> Self {
        Self {
            coefs: bytes
                .chunks_exact(2)
                .map(|b| i16::from_le_bytes([b[0], b[1]]))
                .collect(),
            quant: bytes
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        }
    }
}

/// (height, width) of a `width` x `height` image once upright: EXIF orientations 5 to 8 swap
/// the axes.
pub fn upright_size(width: u32, height: u32, orientation: u8) -> (usize, usize) {
    let (h, w) = (height as usize, width as usize);
    if orientation >= 5 {
        (w, h)
    } else {
        (h, w)
    }
}

impl JpegBatch {
    /// Bytes of the planes buffer the components' offsets address.
    pub fn planes_len(&self) -> usize {
        self.components
            .iter()
            .map(|c| c.plane_offset + c.plane_len())
            .max()
            .unwrap_or(0)
    }

    /// Bytes of the RGB buffer the images' offsets address.
    pub fn rgb_len(&self) -> usize {
        self.images
            .iter()
            .map(|i| i.rgb_offset + i.rgb_len())
            .max()
            .unwrap_or(0)
    }

    /// The component table as jpeg.cu's `JpegComponent` structs.
    pub fn component_table(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.components.len() * COMPONENT_RECORD_BYTES);
        for c in &self.components {
            let (method, h, v) = c.upsample.code();
            put_i64(&mut out, c.coef_offset as i64);
            put_i64(&mut out, c.plane_offset as i64);
            for field in [
                c.blocks_wide as i32,
                c.blocks_high as i32,
                c.quant_offset as i32,
                c.downsampled_width as i32,
                c.downsampled_height as i32,
                method,
                h as i32,
                v as i32,
                c.image as i32,
                0,
                0,
                0,
            ] {
                put_i32(&mut out, field);
            }
        }
        out
    }

    /// The image table as jpeg.cu's `JpegImage` structs.
    pub fn image_table(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.images.len() * IMAGE_RECORD_BYTES);
        for image in &self.images {
            let component = |i: usize| image.components.get(i).map_or(0, |&c| c as i32);
            let colour = match image.colour {
                JpegColour::Grey => 0,
                JpegColour::YCbCr => 1,
                JpegColour::Rgb => 2,
            };
            for field in [
                component(0),
                component(1),
                component(2),
                colour,
                image.width as i32,
                image.height as i32,
                i32::from(image.orientation),
                0,
            ] {
                put_i32(&mut out, field);
            }
            put_i64(&mut out, image.rgb_offset as i64);
            put_i64(&mut out, 0);
        }
        out
    }

    /// Checks every offset and size against `coefs` coefficients and `quant` multipliers and
    /// the planes and RGB buffers the batch implies, so a kernel never reads or writes outside
    /// them: a description of the first problem.
    pub fn validate(&self, coefs: usize, quant: usize) -> Result<(), String> {
        for (i, c) in self.components.iter().enumerate() {
            let coef_end = c.coef_offset.checked_add(c.blocks() * 64);
            if coef_end.is_none_or(|end| end > coefs) {
                return Err(format!("component {i}'s coefficients run past the batch's"));
            }
            if c.quant_offset + 64 > quant {
                return Err(format!("component {i}'s multipliers run past the batch's"));
            }
            if !c.plane_offset.is_multiple_of(8) {
                return Err(format!("component {i}'s plane is not 8-byte aligned"));
            }
            let fits = c.downsampled_width >= 1
                && c.downsampled_height >= 1
                && c.downsampled_width <= c.blocks_wide * 8
                && c.downsampled_height <= c.blocks_high * 8;
            if !fits {
                return Err(format!("component {i}'s samples do not fit its blocks"));
            }
            if c.blocks_wide as usize * 8 > i32::MAX as usize || c.blocks() > i32::MAX as usize {
                return Err(format!("component {i} is too large"));
            }
            if c.image >= self.images.len() {
                return Err(format!(
                    "component {i} names image {}, past the table",
                    c.image
                ));
            }
        }
        for (n, image) in self.images.iter().enumerate() {
            let expected = if image.colour == JpegColour::Grey {
                1
            } else {
                3
            };
            if image.components.len() != expected {
                return Err(format!(
                    "image {n} has {} components",
                    image.components.len()
                ));
            }
            if !(1..=8).contains(&image.orientation) {
                return Err(format!("image {n} has orientation {}", image.orientation));
            }
            if image.width == 0 || image.height == 0 {
                return Err(format!("image {n} has no pixels"));
            }
            for &ci in &image.components {
                let Some(c) = self.components.get(ci) else {
                    return Err(format!("image {n} names component {ci}, past the table"));
                };
                // Every pixel must find its samples inside the component's data.
                let covers = |size: u32, samples: u32, expand: u32| {
                    u64::from(size) <= u64::from(samples) * u64::from(expand)
                };
                let (h, v) = match c.upsample {
                    Upsample::Full => (1, 1),
                    Upsample::Replicate { h, v } => (h, v),
                    Upsample::FancyH2V1 => (2, 1),
                    Upsample::FancyH1V2 => (1, 2),
                    Upsample::FancyH2V2 => (2, 2),
                };
                if h == 0
                    || v == 0
                    || !covers(image.width, c.downsampled_width, h)
                    || !covers(image.height, c.downsampled_height, v)
                {
                    return Err(format!("image {n}'s component {ci} does not cover it"));
                }
            }
        }
        Ok(())
    }
}

fn put_i32(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upsampling_is_chosen_as_libjpeg_chooses_it() {
        // 4:2:0 chroma, 4:2:2, 4:4:0, 4:1:1, and narrow images.
        assert_eq!(Upsample::choose(1, 1, 2, 2, 100), Some(Upsample::FancyH2V2));
        assert_eq!(Upsample::choose(1, 1, 2, 1, 100), Some(Upsample::FancyH2V1));
        assert_eq!(Upsample::choose(1, 1, 1, 2, 1), Some(Upsample::FancyH1V2));
        assert_eq!(
            Upsample::choose(1, 1, 4, 1, 100),
            Some(Upsample::Replicate { h: 4, v: 1 })
        );
        assert_eq!(
            Upsample::choose(1, 1, 2, 2, 2),
            Some(Upsample::Replicate { h: 2, v: 2 })
        );
        assert_eq!(Upsample::choose(2, 2, 2, 2, 1), Some(Upsample::Full));
        assert_eq!(Upsample::choose(2, 1, 3, 1, 100), None);
    }

    #[test]
    fn records_have_the_cuda_structs_sizes() {
        let batch = JpegBatch {
            components: vec![JpegComponent {
                coef_offset: 0,
                plane_offset: 0,
                blocks_wide: 1,
                blocks_high: 1,
                quant_offset: 0,
                downsampled_width: 8,
                downsampled_height: 8,
                upsample: Upsample::Full,
                image: 0,
            }],
            images: vec![JpegImage {
                components: vec![0],
                colour: JpegColour::Grey,
                width: 8,
                height: 8,
                orientation: 1,
                rgb_offset: 0,
            }],
        };
        assert_eq!(batch.component_table().len(), COMPONENT_RECORD_BYTES);
        assert_eq!(batch.image_table().len(), IMAGE_RECORD_BYTES);
        assert_eq!(batch.validate(64, 64), Ok(()));
        let mut wide = batch.clone();
        wide.images[0].width = 9;
        assert!(wide.validate(64, 64).is_err(), "a pixel past the samples");
        assert!(
            batch.validate(63, 64).is_err(),
            "a coefficient past the data"
        );
    }
}

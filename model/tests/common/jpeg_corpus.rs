//! JPEGs made on the spot with libjpeg's encoder (mozjpeg) for the coefficient path's tests:
//! every sampling libjpeg upsamples, grey and Adobe RGB, any size, quality, baseline or
//! progressive, and an EXIF orientation; and the host decoder's and the twins' pixels of them.

use mozjpeg::{ColorSpace, Compress};
use vitrt_kernels::jpeg::cpu as jpeg_twin;
use vitrt_model::preprocess::device_batch::jpeg_batch;
use vitrt_model::preprocess::jpeg_coefficients::ReadJpeg;
use vitrt_model::preprocess::{ImageLimits, ImageLoader, PreprocessConfig};

/// A deterministic generator (xorshift) for the pictures' texture.
pub struct Xorshift(pub u64);

impl Xorshift {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A photo-like RGB picture: gradients, a few edges and mild noise.
pub fn picture(width: usize, height: usize, seed: u64) -> Vec<u8> {
    let mut rng = Xorshift(seed | 1);
    let mut out = Vec::with_capacity(width * height * 3);
    for y in 0..height {
        for x in 0..width {
            let edge = if (x * 7 + y * 3) % 23 < 11 { 40 } else { 0 };
            for c in 0..3 {
                let base =
                    (x * (60 + 40 * c) / width.max(1) + y * (150 - 30 * c) / height.max(1)) as u64;
                let noise = rng.next() % 24;
                out.push((base + edge + noise).min(255) as u8);
            }
        }
    }
    out
}

#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Ycc { cb: (u8, u8), cr: (u8, u8) },
    Grey,
    Rgb,
}

/// An EXIF APP1 payload holding only an orientation (big-endian TIFF, one IFD entry).
pub fn exif_orientation(value: u16) -> Vec<u8> {
    let mut exif = b"Exif\0\0MM\0\x2a\0\0\0\x08\0\x01".to_vec();
    exif.extend_from_slice(&[0x01, 0x12, 0, 3, 0, 0, 0, 1]);
    exif.extend_from_slice(&value.to_be_bytes());
    exif.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    exif
}

pub fn encode(
    kind: Kind,
    (width, height): (usize, usize),
    quality: f32,
    progressive: bool,
    orientation: u16,
) -> Vec<u8> {
    let rgb = picture(
        width,
        height,
        (width * 31 + height * 17) as u64 + quality as u64,
    );
    let (input, space, pixels) = match kind {
        Kind::Grey => (
            ColorSpace::JCS_GRAYSCALE,
            ColorSpace::JCS_GRAYSCALE,
            rgb.chunks_exact(3).map(|p| p[1]).collect::<Vec<u8>>(),
        ),
        Kind::Rgb => (ColorSpace::JCS_RGB, ColorSpace::JCS_RGB, rgb),
        Kind::Ycc { .. } => (ColorSpace::JCS_RGB, ColorSpace::JCS_YCbCr, rgb),
    };
    std::panic::catch_unwind(|| {
        let mut compress = Compress::new(input);
        compress.set_fastest_defaults();
        compress.set_color_space(space);
        compress.set_size(width, height);
        compress.set_quality(quality);
        if let Kind::Ycc { cb, cr } = kind {
            compress.set_chroma_sampling_pixel_sizes(cb, cr);
        }
        if progressive {
            compress.set_progressive_mode();
        }
        let mut started = compress.start_compress(Vec::new()).unwrap();
        if orientation != 1 {
            started.write_marker(mozjpeg::Marker::APP(1), &exif_orientation(orientation));
        }
        started.write_scanlines(&pixels).unwrap();
        started.finish().unwrap()
    })
    .expect("the encoder takes every case here")
}

pub fn config(json: &str) -> PreprocessConfig {
    PreprocessConfig::from_json_str_for_channels(json, 3).unwrap()
}

/// The host decoder's upright RGB for an image of upright size (height, width).
pub fn host_pixels(bytes: &[u8], (height, width): (usize, usize)) -> Vec<u8> {
    let cfg = config(&format!(
        r#"{{"image_processor_type": "ViTImageProcessor", "do_resize": false,
            "size": {{"height": {height}, "width": {width}}}}}"#
    ));
    let mut loader = ImageLoader::new(&cfg, ImageLimits::default());
    let mut out = vec![0; height * width * 3];
    loader
        .load_bytes_into(bytes, "generated.jpg", &mut out)
        .unwrap();
    out
}

/// The twins' upright RGB for coefficients read from a file.
pub fn twin_pixels(image: &ReadJpeg) -> Vec<u8> {
    let (batch, data) = jpeg_batch(&[image]);
    let mut planes = vec![0; batch.planes_len()];
    let mut rgb = vec![0; batch.rgb_len()];
    jpeg_twin::idct(&batch, &data, &mut planes);
    jpeg_twin::colour(&batch, &planes, &mut rgb);
    rgb
}

/// The samplings the corpus covers (Cb's and Cr's pixel sizes), then grey and Adobe RGB.
pub const KINDS: [Kind; 8] = [
    Kind::Ycc {
        cb: (1, 1),
        cr: (1, 1),
    },
    Kind::Ycc {
        cb: (2, 1),
        cr: (2, 1),
    },
    Kind::Ycc {
        cb: (2, 2),
        cr: (2, 2),
    },
    Kind::Ycc {
        cb: (1, 2),
        cr: (1, 2),
    },
    Kind::Ycc {
        cb: (4, 1),
        cr: (4, 1),
    },
    Kind::Ycc {
        cb: (2, 2),
        cr: (1, 1),
    },
    Kind::Grey,
    Kind::Rgb,
];

/// (width, height): from one pixel to odd sizes past several MCUs.
pub const SIZES: [(usize, usize); 9] = [
    (1, 1),
    (2, 3),
    (5, 7),
    (8, 8),
    (17, 9),
    (9, 17),
    (31, 33),
    (65, 127),
    (181, 250),
];

pub const QUALITIES: [f32; 4] = [5.0, 50.0, 90.0, 100.0];

/// One corpus file: what it is (for messages), its EXIF orientation and its bytes.
pub struct CorpusFile {
    pub what: String,
    pub orientation: u16,
    pub bytes: Vec<u8>,
}

/// Every combination of [`KINDS`], [`SIZES`], [`QUALITIES`] and baseline/progressive, with
/// orientations 1 to 8 in turn.
pub fn corpus() -> Vec<CorpusFile> {
    let mut files = Vec::new();
    let mut case = 0u16;
    for kind in KINDS {
        for size in SIZES {
            for quality in QUALITIES {
                for progressive in [false, true] {
                    case += 1;
                    let orientation = 1 + case % 8;
                    files.push(CorpusFile {
                        what: format!(
                            "{kind:?} {size:?} q{quality} progressive {progressive} orientation {orientation}"
                        ),
                        orientation,
                        bytes: encode(kind, size, quality, progressive, orientation),
                    });
                }
            }
        }
    }
    files
}

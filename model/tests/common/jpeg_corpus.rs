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

/// The twins' upright RGB for a file read into coefficients or a scan (entropy-decoded by
/// the twin first), or the image's status word where the twins marked it for the host.
pub fn twin_pixels(image: &ReadJpeg) -> Result<Vec<u8>, u32> {
    let batch = jpeg_batch(&[image]);
    let (data, mut status) = batch.decoded();
    let batch = batch.jpeg;
    let mut planes = vec![0; batch.planes_len()];
    let mut rgb = vec![0; batch.rgb_len()];
    jpeg_twin::idct(&batch, &data, &mut planes, &mut status);
    jpeg_twin::colour(&batch, &planes, &mut rgb);
    match status[0] {
        0 => Ok(rgb),
        marked => Err(marked),
    }
}

/// How a baseline file of the restart corpus is cut into restart intervals.
#[derive(Clone, Copy, Debug)]
pub enum Restarts {
    None,
    /// Every this many MCUs.
    Mcus(u32),
    /// Every this many MCU rows.
    Rows(i32),
}

/// A baseline JPEG from libjpeg's encoder called directly (the `mozjpeg` crate sets neither
/// restart intervals nor optimised tables): `kind` with Y at `luma` sampling factors (chroma
/// at 1x1), restart markers as `restarts` says, and Huffman tables optimised for the picture
/// or libjpeg's standard ones.
pub fn encode_baseline(
    kind: Kind,
    luma: (i32, i32),
    (width, height): (usize, usize),
    quality: i32,
    restarts: Restarts,
    optimize: bool,
) -> Vec<u8> {
    use mozjpeg_sys as ffi;
    unsafe extern "C-unwind" fn fail(_: &mut ffi::jpeg_common_struct) {
        panic!("libjpeg's encoder refused a test case");
    }
    let rgb = picture(
        width,
        height,
        (width * 13 + height * 7) as u64 + quality as u64,
    );
    let grey = matches!(kind, Kind::Grey);
    let samples: Vec<u8> = if grey {
        rgb.chunks_exact(3).map(|p| p[1]).collect()
    } else {
        rgb
    };
    let channels = if grey { 1 } else { 3 };
    // SAFETY: one compressor, set up, used and destroyed here; its error manager panics.
    unsafe {
        let mut err: ffi::jpeg_error_mgr = std::mem::zeroed();
        let mut c: ffi::jpeg_compress_struct = std::mem::zeroed();
        c.common.err = ffi::jpeg_std_error(&mut err);
        (*c.common.err).error_exit = Some(fail);
        ffi::jpeg_create_compress(&mut c);
        let mut buffer: *mut u8 = std::ptr::null_mut();
        let mut size: std::os::raw::c_ulong = 0;
        ffi::jpeg_mem_dest(&mut c, &mut buffer, &mut size);
        c.image_width = width as u32;
        c.image_height = height as u32;
        c.input_components = channels;
        c.in_color_space = if grey {
            ffi::J_COLOR_SPACE::JCS_GRAYSCALE
        } else {
            ffi::J_COLOR_SPACE::JCS_RGB
        };
        ffi::jpeg_c_set_int_param(
            &mut c,
            ffi::J_INT_PARAM::JINT_COMPRESS_PROFILE,
            ffi::JINT_COMPRESS_PROFILE_VALUE::JCP_FASTEST as i32,
        );
        ffi::jpeg_set_defaults(&mut c);
        ffi::jpeg_set_colorspace(
            &mut c,
            match kind {
                Kind::Grey => ffi::J_COLOR_SPACE::JCS_GRAYSCALE,
                Kind::Rgb => ffi::J_COLOR_SPACE::JCS_RGB,
                Kind::Ycc { .. } => ffi::J_COLOR_SPACE::JCS_YCbCr,
            },
        );
        let components = std::slice::from_raw_parts_mut(c.comp_info, c.num_components as usize);
        for (i, info) in components.iter_mut().enumerate() {
            (info.h_samp_factor, info.v_samp_factor) = if i == 0 { luma } else { (1, 1) };
        }
        ffi::jpeg_set_quality(&mut c, quality, 1);
        c.optimize_coding = i32::from(optimize) as ffi::boolean;
        match restarts {
            Restarts::None => {}
            Restarts::Mcus(n) => c.restart_interval = n,
            Restarts::Rows(n) => c.restart_in_rows = n,
        }
        ffi::jpeg_start_compress(&mut c, 1);
        let stride = width * channels as usize;
        for row in samples.chunks_exact(stride) {
            let pointer = row.as_ptr();
            ffi::jpeg_write_scanlines(&mut c, &pointer, 1);
        }
        ffi::jpeg_finish_compress(&mut c);
        let out = std::slice::from_raw_parts(buffer, size as usize).to_vec();
        ffi::jpeg_destroy_compress(&mut c);
        libc::free(buffer.cast());
        out
    }
}

/// Baseline files with restart intervals (every MCU, every few MCUs, every MCU row, intervals
/// that do not divide the image), optimised and standard Huffman tables, in 4:4:4, 4:2:2,
/// 4:2:0 and grey, sizes from one MCU to several hundred, qualities 5 to 100.
pub fn restart_corpus() -> Vec<CorpusFile> {
    let kinds = [
        (
            Kind::Ycc {
                cb: (1, 1),
                cr: (1, 1),
            },
            (1, 1),
        ),
        (
            Kind::Ycc {
                cb: (2, 1),
                cr: (2, 1),
            },
            (2, 1),
        ),
        (
            Kind::Ycc {
                cb: (2, 2),
                cr: (2, 2),
            },
            (2, 2),
        ),
        (Kind::Grey, (1, 1)),
    ];
    let restarts = [
        Restarts::None,
        Restarts::Mcus(1),
        Restarts::Mcus(7),
        Restarts::Rows(1),
    ];
    let mut files = Vec::new();
    for (kind, luma) in kinds {
        for (i, size) in [(8, 8), (17, 9), (250, 190), (33, 301)]
            .into_iter()
            .enumerate()
        {
            for (j, restart) in restarts.into_iter().enumerate() {
                let quality = [5, 50, 90, 100][(i + j) % 4];
                let optimize = (i + j) % 2 == 0;
                files.push(CorpusFile {
                    what: format!("{kind:?} {size:?} q{quality} {restart:?} optimized {optimize}"),
                    orientation: 1,
                    bytes: encode_baseline(kind, luma, size, quality, restart, optimize),
                });
            }
        }
    }
    files
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

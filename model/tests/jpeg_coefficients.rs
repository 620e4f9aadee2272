//! The coefficient path against the host decoder, without a GPU: JPEGs generated here in every
//! sampling libjpeg upsamples (4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1 and mixed), grey and Adobe
//! RGB, sizes from 1x1 to odd ones past several MCUs, qualities 5 to 100, baseline and
//! progressive, EXIF orientations 1 to 8; each read into coefficients and finished by the
//! image kernels' CPU twins (IDCT, upsampling, colour, orientation, then PIL's resize and the
//! center crop) must give the host decoder's bytes exactly. Files the coefficient path leaves
//! to the host are counted, and must be few.

use mozjpeg::{ColorSpace, Compress};
use vitrt_kernels::jpeg::cpu as jpeg_twin;
use vitrt_kernels::resample::cpu as resample_twin;
use vitrt_model::preprocess::device_batch::{jpeg_batch, resample_batch, resample_plan};
use vitrt_model::preprocess::jpeg_coefficients::{read_jpeg_coefficients, HostReason};
use vitrt_model::preprocess::{ImageLimits, ImageLoader, PreprocessConfig};

/// A deterministic generator (xorshift) for the pictures' texture.
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A photo-like RGB picture: gradients, a few edges and mild noise.
fn picture(width: usize, height: usize, seed: u64) -> Vec<u8> {
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
enum Kind {
    Ycc { cb: (u8, u8), cr: (u8, u8) },
    Grey,
    Rgb,
}

/// An EXIF APP1 payload holding only an orientation (big-endian TIFF, one IFD entry).
fn exif_orientation(value: u16) -> Vec<u8> {
    let mut exif = b"Exif\0\0MM\0\x2a\0\0\0\x08\0\x01".to_vec();
    exif.extend_from_slice(&[0x01, 0x12, 0, 3, 0, 0, 0, 1]);
    exif.extend_from_slice(&value.to_be_bytes());
    exif.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    exif
}

fn encode(
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

fn config(json: &str) -> PreprocessConfig {
    PreprocessConfig::from_json_str_for_channels(json, 3).unwrap()
}

/// The host decoder's upright RGB for an image of upright size (height, width).
fn host_pixels(bytes: &[u8], (height, width): (usize, usize)) -> Vec<u8> {
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

/// The configs whose resize and crop the twins must match: a fixed bilinear resize, CLIP's
/// shortest edge and crop in bicubic, and a crop larger than the image (zero padding).
const RESIZES: [&str; 3] = [
    r#"{"image_processor_type": "ViTImageProcessor", "size": {"height": 12, "width": 14}}"#,
    r#"{"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 11},
        "crop_size": {"height": 9, "width": 9}, "resample": 3}"#,
    r#"{"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 40},
        "crop_size": {"height": 48, "width": 44}, "resample": 2}"#,
];

#[test]
fn coefficients_finished_by_the_twins_give_the_host_decoders_pixels() {
    let kinds = [
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
    let sizes = [
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
    let qualities = [5.0, 50.0, 90.0, 100.0];
    let limits = ImageLimits::default();
    let resizes: Vec<PreprocessConfig> = RESIZES.iter().map(|j| config(j)).collect();
    let (mut taken, mut left) = (0usize, Vec::new());
    let mut case = 0u16;
    for kind in kinds {
        for size in sizes {
            for quality in qualities {
                for progressive in [false, true] {
                    case += 1;
                    let orientation = 1 + case % 8;
                    let bytes = encode(kind, size, quality, progressive, orientation);
                    let what = format!("{kind:?} {size:?} q{quality} progressive {progressive} orientation {orientation}");
                    let image = match read_jpeg_coefficients(&bytes, &limits) {
                        Ok(image) => image,
                        Err(reason) => {
                            left.push((what, reason));
                            continue;
                        }
                    };
                    taken += 1;
                    assert_eq!(image.orientation as u16, orientation, "{what}");
                    let upright = image.upright_size();
                    jpeg_batch(&[&image]).validate().unwrap();
                    let rgb = twin_pixels(&image);
                    let host = host_pixels(&bytes, upright);
                    if let Some(i) = (0..rgb.len()).find(|&i| rgb[i] != host[i]) {
                        panic!(
                            "{what}: byte {i} of {}: twins {} host {}",
                            rgb.len(),
                            rgb[i],
                            host[i]
                        );
                    }
                    for cfg in &resizes {
                        let (h, w) = cfg.output_size();
                        let mut expected = vec![0; h * w * 3];
                        ImageLoader::new(cfg, limits)
                            .load_bytes_into(&bytes, "generated.jpg", &mut expected)
                            .unwrap();
                        let plan = resample_plan(cfg, limits.max_pixels, upright).unwrap();
                        let resample = resample_batch(vec![plan], &[0], h * w * 3);
                        resample.validate().unwrap();
                        let mut mid = vec![0; resample.intermediate_len()];
                        let mut out = vec![0; resample.output_len()];
                        resample_twin::resample(&resample, &rgb, &mut mid, &mut out);
                        assert_eq!(out, expected, "{what}, resized by {cfg:?}");
                    }
                }
            }
        }
    }
    // Noise at quality 100 may leave a block outside the guard; these pictures are smooth
    // enough that nothing should be left but that.
    assert!(
        left.iter().all(|(_, reason)| *reason == HostReason::Guard),
        "left to the host: {left:?}"
    );
    assert!(
        taken * 20 >= (taken + left.len()) * 19,
        "only {taken} of {} taken: {left:?}",
        taken + left.len()
    );
    eprintln!("{taken} taken, {} left to the host", left.len());
}

/// The twins' upright RGB for coefficients read from a file.
fn twin_pixels(image: &vitrt_model::preprocess::jpeg_coefficients::JpegCoefficients) -> Vec<u8> {
    let batch = jpeg_batch(&[image]);
    let mut planes = vec![0; batch.planes_len()];
    let mut rgb = vec![0; batch.rgb_len()];
    jpeg_twin::idct(&batch, &mut planes);
    jpeg_twin::colour(&batch, &planes, &mut rgb);
    rgb
}

#[test]
fn truncated_and_foreign_files_are_left_to_the_host_decoder() {
    let limits = ImageLimits::default();
    let good = encode(
        Kind::Ycc {
            cb: (2, 2),
            cr: (2, 2),
        },
        (40, 30),
        80.0,
        false,
        1,
    );
    assert!(read_jpeg_coefficients(&good, &limits).is_ok());
    for cut in [good.len() - 2, good.len() / 2, 300, 20, 2] {
        assert_eq!(
            read_jpeg_coefficients(&good[..cut], &limits),
            Err(HostReason::LibjpegObjected),
            "cut to {cut} bytes"
        );
    }
    assert_eq!(
        read_jpeg_coefficients(b"not a jpeg at all", &limits),
        Err(HostReason::LibjpegObjected)
    );
    let small = ImageLimits {
        max_pixels: 100,
        ..limits
    };
    assert_eq!(
        read_jpeg_coefficients(&good, &small),
        Err(HostReason::Limits)
    );
}

/// Corrupt files: wherever the coefficient path takes one, the host decoder takes it too and
/// gives the same pixels (never other pixels); everything else is the host's to refuse.
#[test]
fn a_corrupt_file_the_coefficient_path_takes_gives_the_host_decoders_pixels() {
    let limits = ImageLimits::default();
    let mut rng = Xorshift(0x5eed);
    let (mut taken, mut left) = (0, 0);
    for (n, progressive) in [(0, false), (1, true)] {
        let good = encode(
            Kind::Ycc {
                cb: (2, 1),
                cr: (2, 1),
            },
            (48, 40),
            85.0,
            progressive,
            1,
        );
        for trial in 0..150 {
            let mut bytes = good.clone();
            for _ in 0..1 + trial % 4 {
                let at = 100 + (rng.next() as usize) % (bytes.len() - 100);
                bytes[at] ^= 1 << (rng.next() % 8);
            }
            match read_jpeg_coefficients(&bytes, &limits) {
                Ok(image) => {
                    taken += 1;
                    let host = host_pixels(&bytes, image.upright_size());
                    assert!(twin_pixels(&image) == host, "case {n}/{trial}");
                }
                Err(_) => left += 1,
            }
        }
    }
    assert!(taken > 0 && left > 0, "{taken} taken, {left} left");
}

//! The coefficient path against the host decoder, without a GPU: JPEGs generated here in every
//! sampling libjpeg upsamples (4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1 and mixed), grey and Adobe
//! RGB, sizes from 1x1 to odd ones past several MCUs, qualities 5 to 100, baseline and
//! progressive, EXIF orientations 1 to 8; each read into coefficients and finished by the
//! image kernels' CPU twins (IDCT, upsampling, colour, orientation, then PIL's resize and the
//! center crop) must give the host decoder's bytes exactly. Files the coefficient path leaves
//! to the host are counted, and must be few.

mod common;

use common::jpeg_corpus::{config, corpus, encode, host_pixels, twin_pixels, Kind, Xorshift};
use vitrt_kernels::resample::cpu as resample_twin;
use vitrt_model::preprocess::device_batch::{jpeg_batch, resample_batch, resample_plan};
use vitrt_model::preprocess::jpeg_coefficients::{read_jpeg_coefficients, HostReason};
use vitrt_model::preprocess::{ImageLimits, ImageLoader, PreprocessConfig};

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
    let limits = ImageLimits::default();
    let resizes: Vec<PreprocessConfig> = RESIZES.iter().map(|j| config(j)).collect();
    let (mut taken, mut left) = (0usize, Vec::new());
    for file in corpus() {
        let (what, bytes) = (&file.what, &file.bytes);
        let image = match read_jpeg_coefficients(bytes, &limits) {
            Ok(image) => image,
            Err(reason) => {
                left.push((what.clone(), reason));
                continue;
            }
        };
        taken += 1;
        assert_eq!(image.image.orientation as u16, file.orientation, "{what}");
        let upright = image.image.upright_size();
        let (batch, data) = jpeg_batch(&[&image]);
        batch.validate(data.coefs.len(), data.quant.len()).unwrap();
        let rgb = twin_pixels(&image);
        let host = host_pixels(bytes, upright);
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
                .load_bytes_into(bytes, "generated.jpg", &mut expected)
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
                    let host = host_pixels(&bytes, image.image.upright_size());
                    assert!(twin_pixels(&image) == host, "case {n}/{trial}");
                }
                Err(_) => left += 1,
            }
        }
    }
    assert!(taken > 0 && left > 0, "{taken} taken, {left} left");
}

//! DINOv3's image processor against transformers: every (config, image) pair in
//! tests/fixtures/images/dinov3/reference_pixel_values.safetensors (made by
//! scripts/fixtures/make_dinov3_image_fixtures.py with `DINOv3ViTImageProcessor`, torch's
//! float resize) is run through `preprocess_file` and compared value by value; then the
//! configs it refuses.

use std::path::{Path, PathBuf};

use safetensors::SafeTensors;
use vitrt_model::preprocess::{preprocess_file, PixelArithmetic, PreprocessConfig};

/// Largest |ours - reference| allowed, in normalised units (ImageNet's std, so about 4.4
/// times the rescaled [0, 1] values; the normalised values lie within [-2.2, 2.7], where one
/// f32 ulp is at most 2.4e-7).
///
/// The tap weights are ATen's bit for bit and the rescale and normalise are torch's f32
/// arithmetic exactly, so upscales, unresized images and filters of up to four taps match bit
/// for bit. ATen's CPU kernel rounds the sums of wider filters (downscales by more than two,
/// and bicubic) differently from a fused multiply-add per tap in tap order, by an ulp or two
/// of the [0, 1] value per pass; after two passes and the division by the std that is a few
/// ulps of the normalised value. Measured (transformers 5.17, torch 2.11 on x86-64): 0 on the
/// upscale to 224 and the unresized image, at most 8.4e-7 on the bilinear downscales (62-85%
/// of the values bit for bit), at most 1.7e-6 on the bicubic ones (31-39%). One 8-bit level
/// would be 0.017: the bound is four orders of magnitude below what PIL's 8-bit resize gives.
const MAX_ABS_DIFF: f32 = 4e-6;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/images")
}

#[test]
fn every_dinov3_fixture_matches_transformers() {
    let dir = fixtures();
    let bytes = std::fs::read(dir.join("dinov3/reference_pixel_values.safetensors")).expect(
        "dinov3/reference_pixel_values.safetensors: run scripts/fixtures/make_dinov3_image_fixtures.py",
    );
    let references = SafeTensors::deserialize(&bytes).expect("readable safetensors");
    let mut keys: Vec<String> = references.names().into_iter().map(String::from).collect();
    keys.sort();
    assert!(keys.len() >= 17, "only {} references", keys.len());
    let mut failures = Vec::new();
    for key in keys {
        let (config_name, image_name) = key.split_once('/').expect("<config>/<image>");
        let config_path = dir.join(format!("dinov3/configs/{config_name}.json"));
        let config =
            PreprocessConfig::from_json_file(&config_path).unwrap_or_else(|e| panic!("{key}: {e}"));
        assert_eq!(
            config.arithmetic(),
            PixelArithmetic::TorchvisionFloat,
            "{key}"
        );
        let reference = references.tensor(&key).unwrap();
        let expected: Vec<f32> = reference
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let (height, width) = config.output_size();
        assert_eq!(reference.shape(), [3, height, width], "{key}");
        let ours = preprocess_file(&dir.join(image_name), &config)
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        assert_eq!(ours.len(), expected.len(), "{key}");
        let max_abs_diff = ours
            .iter()
            .zip(&expected)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        let exact = ours
            .iter()
            .zip(&expected)
            .filter(|(a, b)| a.to_bits() == b.to_bits())
            .count();
        println!(
            "{key:58} max |ours - HF| = {max_abs_diff:e}, {:.1}% bit for bit",
            100.0 * exact as f64 / ours.len() as f64
        );
        if max_abs_diff > MAX_ABS_DIFF || max_abs_diff.is_nan() {
            failures.push(format!("{key}: {max_abs_diff}"));
        }
        // Upscales (cat.jpg is 240 x 160) and unresized images take two taps a side or none:
        // bit for bit.
        if config_name == "dinov3_hub_224" || config_name == "dinov3_no_resize_16" {
            assert_eq!(max_abs_diff, 0.0, "{key}");
        }
    }
    assert!(failures.is_empty(), "over {MAX_ABS_DIFF}: {failures:#?}");
}

#[test]
fn dinov3_configs_vitrt_does_not_reproduce_are_refused() {
    let refused = |json: &str, needle: &str| {
        let err = PreprocessConfig::from_json_str(json)
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{json}: {err}");
    };
    refused(
        r#"{"image_processor_type": "DINOv3ViTImageProcessorFast", "do_rescale": false}"#,
        "do_rescale false",
    );
    for resample in [0, 1, 4, 5] {
        refused(
            &format!(
                r#"{{"image_processor_type": "DINOv3ViTImageProcessor", "resample": {resample}}}"#
            ),
            "DINOv3ViTImageProcessor",
        );
    }
    // Without a resize the filter does not matter.
    PreprocessConfig::from_json_str(
        r#"{"image_processor_type": "DINOv3ViTImageProcessor", "do_resize": false, "resample": 0}"#,
    )
    .unwrap();
}

#[test]
fn dinov3_images_stay_on_the_host_and_stage_floats() {
    let config = PreprocessConfig::from_json_str(
        r#"{"image_processor_type": "DINOv3ViTImageProcessorFast"}"#,
    )
    .unwrap();
    assert_eq!(config.output_size(), (224, 224));
    let why = config.device_decode_refusal().expect("refused on the GPU");
    assert!(why.contains("DINOv3"), "{why}");
    let loader = vitrt_model::preprocess::ImageLoader::new(&config, Default::default());
    assert_eq!(loader.output_bytes(), 3 * 224 * 224 * 4);
}

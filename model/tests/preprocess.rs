//! Preprocessing against Hugging Face and timm: every (config, image) pair in
//! tests/fixtures/images/reference_pixel_values.safetensors (made by
//! scripts/fixtures/make_image_fixtures.py with the slow image processors of transformers, each
//! config through the class its image_processor_type names (ViT's by default), with timm's eval
//! transform for the timm_* configs, and Pillow 13) is run through `preprocess_file` and
//! compared value by value; then the class defaults, the timm configs' reading, and the errors.

use std::path::{Path, PathBuf};

use safetensors::SafeTensors;
use vitrt_model::preprocess::{
    decode_image, preprocess_bytes, preprocess_file, CenterCropRounding, ImageLimits,
    PreprocessConfig, PreprocessError, Resample, ResizeTarget,
};

/// Largest |ours - reference| allowed, in normalised units. Measured: 0 on every pair
/// (decoding, colour conversion, resizing, cropping and the f32 arithmetic all reproduce PIL,
/// numpy and, for timm's transform, torchvision and torch exactly), so any difference at all is
/// a regression. One uint8 level would be about 0.008 with the
/// default mean/std of 0.5, and 0.017 with ImageNet's.
const MAX_ABS_DIFF: f32 = 0.0;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/images")
}

struct Comparison {
    key: String,
    max_abs_diff: f32,
}

/// The preprocessing of a timm checkpoint whose config.json is at `path`, from its
/// `pretrained_cfg`.
fn timm_config(path: &Path) -> Result<PreprocessConfig, PreprocessError> {
    let text = std::fs::read_to_string(path).unwrap();
    let config_json: serde_json::Value = serde_json::from_str(&text).unwrap();
    PreprocessConfig::from_timm_pretrained_cfg(&config_json["pretrained_cfg"])
}

fn compare_with_hf() -> Vec<Comparison> {
    let dir = fixtures();
    let bytes = std::fs::read(dir.join("reference_pixel_values.safetensors"))
        .expect("reference_pixel_values.safetensors: run scripts/fixtures/make_image_fixtures.py");
    let references = SafeTensors::deserialize(&bytes).expect("readable safetensors");
    let mut keys: Vec<String> = references.names().into_iter().map(String::from).collect();
    keys.sort();
    assert!(keys.len() >= 119, "only {} references", keys.len());

    keys.into_iter()
        .map(|key| {
            let (config_name, image_name) = key.split_once('/').expect("<config>/<image>");
            let (config_name, channels) = match config_name.strip_suffix("@1ch") {
                Some(name) => (name, 1),
                None => (config_name, 3),
            };
            let config_path = dir.join("configs").join(format!("{config_name}.json"));
            let config = if config_name.starts_with("timm_") {
                timm_config(&config_path)
            } else {
                PreprocessConfig::from_json_file_for_channels(&config_path, channels)
            }
            .unwrap_or_else(|e| panic!("{key}: {e}"));

            let reference = references.tensor(&key).unwrap();
            assert_eq!(reference.dtype(), safetensors::Dtype::F32, "{key}");
            let expected: Vec<f32> = reference
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            let (height, width) = config.output_size();
            assert_eq!(reference.shape(), [channels, height, width], "{key}");

            let ours = preprocess_file(&dir.join(image_name), &config)
                .unwrap_or_else(|e| panic!("{key}: {e}"));
            assert_eq!(ours.len(), expected.len(), "{key}");
            let max_abs_diff = ours
                .iter()
                .zip(&expected)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            Comparison { key, max_abs_diff }
        })
        .collect()
}

#[test]
fn every_fixture_matches_hugging_face() {
    let comparisons = compare_with_hf();
    for c in &comparisons {
        println!("{:55} max |ours - HF| = {}", c.key, c.max_abs_diff);
    }
    let failures: Vec<String> = comparisons
        .iter()
        .filter(|c| c.max_abs_diff > MAX_ABS_DIFF || c.max_abs_diff.is_nan())
        .map(|c| format!("{}: {}", c.key, c.max_abs_diff))
        .collect();
    assert!(failures.is_empty(), "over {MAX_ABS_DIFF}: {failures:#?}");
}

#[test]
fn an_empty_config_is_hf_default() {
    let empty = PreprocessConfig::from_json_str("{}").unwrap();
    assert_eq!(empty, PreprocessConfig::hf_default(224, 3));
    assert_eq!(empty.output_size(), (224, 224));
    assert_eq!(empty.resample(), Resample::Bilinear);
    assert_eq!(empty.rescale_factor(), Some(1.0 / 255.0));
    assert_eq!(
        empty.normalization(),
        Some((&[0.5f32; 3][..], &[0.5f32; 3][..]))
    );
    let one_channel = PreprocessConfig::hf_default(32, 1);
    assert_eq!(one_channel.output_size(), (32, 32));
    assert_eq!(one_channel.normalization().unwrap().0, &[0.5]);
}

#[test]
fn a_typical_hub_config_parses() {
    // google/vit-base-patch16-224's preprocessor_config.json.
    let config = PreprocessConfig::from_json_str(
        r#"{"do_normalize": true, "do_resize": true, "feature_extractor_type": "ViTFeatureExtractor",
            "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "resample": 2, "size": 224}"#,
    )
    .unwrap();
    assert_eq!(config, PreprocessConfig::hf_default(224, 3));
    let scalar_mean = PreprocessConfig::from_json_str(
        r#"{"image_mean": 0.25, "image_std": 2, "size": [32, 48], "resample": null}"#,
    )
    .unwrap();
    assert_eq!(scalar_mean.output_size(), (32, 48));
    assert_eq!(scalar_mean.resample(), Resample::Bilinear);
    assert_eq!(
        scalar_mean.normalization(),
        Some((&[0.25f32; 3][..], &[2.0f32; 3][..]))
    );
}

#[test]
fn center_crop_configs_parse() {
    // facebook/deit-base-distilled-patch16-224's preprocessor_config.json.
    let deit = PreprocessConfig::from_json_str(
        r#"{"crop_size": 224, "do_center_crop": true, "do_normalize": true, "do_resize": true,
            "feature_extractor_type": "DeiTFeatureExtractor", "image_mean": [0.485, 0.456, 0.406],
            "image_std": [0.229, 0.224, 0.225], "resample": 3, "size": 256}"#,
    )
    .unwrap();
    assert_eq!(
        deit.resize_target(),
        ResizeTarget::Fixed {
            height: 256,
            width: 256
        }
    );
    assert_eq!(deit.crop_size(), Some((224, 224)));
    assert_eq!(deit.output_size(), (224, 224));
    // openai/clip-vit-base-patch32's: an integer size is the shortest edge for CLIP.
    let clip = PreprocessConfig::from_json_str(
        r#"{"crop_size": 224, "do_center_crop": true, "do_normalize": true, "do_resize": true,
            "feature_extractor_type": "CLIPFeatureExtractor",
            "image_mean": [0.48145466, 0.4578275, 0.40821073],
            "image_std": [0.26862954, 0.26130258, 0.27577711], "resample": 3, "size": 224}"#,
    )
    .unwrap();
    assert_eq!(clip.resize_target(), ResizeTarget::ShortestEdge(224));
    assert_eq!(clip.output_size(), (224, 224));
    // facebook/dinov2-small's (BitImageProcessor).
    let dinov2 = PreprocessConfig::from_json_str(
        r#"{"crop_size": {"height": 224, "width": 224}, "do_center_crop": true,
            "do_convert_rgb": true, "image_processor_type": "BitImageProcessor", "resample": 3,
            "size": {"shortest_edge": 256}}"#,
    )
    .unwrap();
    assert_eq!(dinov2.resize_target(), ResizeTarget::ShortestEdge(256));
    assert_eq!(dinov2.output_size(), (224, 224));
    // crop_size is read only when do_center_crop is on, as HF does.
    let no_crop = PreprocessConfig::from_json_str(
        r#"{"do_center_crop": false, "crop_size": 16, "size": 32}"#,
    )
    .unwrap();
    assert_eq!(no_crop.crop_size(), None);
    assert_eq!(no_crop.output_size(), (32, 32));
    // Without a resize, the crop alone sets the output size, and size is not used.
    let crop_only = PreprocessConfig::from_json_str(
        r#"{"do_resize": false, "size": {"shortest_edge": 9}, "do_center_crop": true, "crop_size": [20, 30]}"#,
    )
    .unwrap();
    assert_eq!(crop_only.output_size(), (20, 30));
}

#[test]
fn bad_config_values_are_errors() {
    let cases = [
        (r#"{"resample": 9}"#, "unknown resample filter 9"),
        (r#"{"resample": 6}"#, "MKS2013"),
        (r#"{"resample": "bilinear"}"#, "resample must be an integer"),
        (
            r#"{"size": {"height": -3, "width": 30}}"#,
            "positive integer",
        ),
        (r#"{"size": 0}"#, "positive integer"),
        (r#"{"size": 224.5}"#, "positive integer"),
        (r#"{"size": [1, 2, 3]}"#, "size must be"),
        (r#"{"size": {"height": 224}}"#, "exactly the keys"),
        (
            r#"{"size": {"height": 224, "width": 224, "depth": 3}}"#,
            "exactly the keys",
        ),
        (
            r#"{"size": {"shortest_edge": 224}}"#,
            "size {\"shortest_edge\": 224} without do_center_crop makes the output size depend",
        ),
        (
            r#"{"size": {"shortest_edge": 224, "longest_edge": 300}, "do_center_crop": true, "crop_size": 224}"#,
            "depend on the image",
        ),
        (
            r#"{"size": {"max_height": 224, "max_width": 224}}"#,
            "depend on the image",
        ),
        (
            r#"{"size": {"shortest_edge": 0}, "do_center_crop": true, "crop_size": 224}"#,
            "size shortest_edge must be a positive integer",
        ),
        (
            r#"{"image_processor_type": "CLIPImageProcessor", "size": 224, "do_center_crop": false}"#,
            "without do_center_crop",
        ),
        (r#"{"size": 100000}"#, "between 1 and"),
        (r#"{"image_mean": [0.1, 0.2]}"#, "image_mean has 2 values"),
        (
            r#"{"image_std": [0.5, 0.5, 0.5, 0.5]}"#,
            "image_std has 4 values",
        ),
        (r#"{"image_std": [0.5, 0, 0.5]}"#, "must not be 0"),
        (r#"{"image_mean": ["a", 0, 0]}"#, "must hold numbers"),
        (r#"{"image_mean": {"r": 1}}"#, "number or a list"),
        (r#"{"rescale_factor": -1}"#, "positive number"),
        (r#"{"rescale_factor": "1/255"}"#, "must be a number"),
        (r#"{"do_resize": "yes"}"#, "do_resize must be true or false"),
        (
            r#"{"do_convert_rgb": 1}"#,
            "do_convert_rgb must be true or false",
        ),
        (
            r#"{"do_center_crop": true}"#,
            "do_center_crop is true but crop_size is missing",
        ),
        (
            r#"{"do_center_crop": true, "crop_size": null}"#,
            "crop_size is missing",
        ),
        (
            r#"{"do_center_crop": true, "crop_size": {"shortest_edge": 224}}"#,
            "crop_size {\"shortest_edge\":224} must have exactly the keys",
        ),
        (
            r#"{"do_center_crop": true, "crop_size": -1}"#,
            "crop_size must be a positive integer",
        ),
        (
            r#"{"do_center_crop": true, "crop_size": [224, 0]}"#,
            "crop_size [1] must be a positive integer",
        ),
        (
            r#"{"do_center_crop": true, "crop_size": 20000}"#,
            "crop_size height must be between 1 and",
        ),
        (
            r#"{"do_center_crop": "yes", "crop_size": 224}"#,
            "do_center_crop must be true or false",
        ),
        (r#"{"do_pad": true}"#, "do_pad"),
        (r#"[1, 2]"#, "JSON object"),
        (r#"{"size": 224,"#, "not valid JSON"),
    ];
    for (json, expected) in cases {
        match PreprocessConfig::from_json_str(json) {
            Err(e @ PreprocessError::InvalidConfig { .. }) => {
                let message = e.to_string();
                assert!(message.contains(expected), "{json}: {message}");
            }
            other => panic!("{json}: expected an InvalidConfig error, got {other:?}"),
        }
    }
    // A one-channel model needs one mean and one std; three are an error.
    let three = r#"{"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}"#;
    let error = PreprocessConfig::from_json_str_for_channels(three, 1).unwrap_err();
    assert!(error.to_string().contains("1-channel"), "{error}");
    let error = PreprocessConfig::from_json_str_for_channels("{}", 4).unwrap_err();
    assert!(error.to_string().contains("4 input channels"), "{error}");
}

#[test]
fn a_config_file_error_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("preprocessor_config.json");
    std::fs::write(&path, r#"{"resample": 9}"#).unwrap();
    let error = PreprocessConfig::from_json_file(&path).unwrap_err();
    assert!(
        error.to_string().contains(&path.display().to_string()),
        "{error}"
    );
    let missing = dir.path().join("absent.json");
    assert!(matches!(
        PreprocessConfig::from_json_file(&missing),
        Err(PreprocessError::ConfigRead { .. })
    ));
}

#[test]
fn a_config_that_cannot_serve_is_refused_at_preprocessing() {
    let image = fixtures().join("coffee.png");
    for config in [
        PreprocessConfig::hf_default(0, 3),
        PreprocessConfig::hf_default(224, 2),
    ] {
        assert!(matches!(
            preprocess_file(&image, &config),
            Err(PreprocessError::InvalidConfig { .. })
        ));
    }
}

fn error_for_bytes(bytes: &[u8]) -> PreprocessError {
    preprocess_bytes(bytes, &PreprocessConfig::hf_default(32, 3)).unwrap_err()
}

#[test]
fn a_missing_file_is_an_error() {
    let path = fixtures().join("no_such_image.jpg");
    let error = preprocess_file(&path, &PreprocessConfig::hf_default(32, 3)).unwrap_err();
    assert!(
        matches!(error, PreprocessError::FileNotFound { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("no_such_image.jpg"), "{error}");
}

#[test]
fn an_empty_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.png");
    std::fs::write(&path, b"").unwrap();
    let error = preprocess_file(&path, &PreprocessConfig::hf_default(32, 3)).unwrap_err();
    assert!(
        matches!(error, PreprocessError::EmptyImage { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("empty.png"), "{error}");
}

#[test]
fn a_file_that_is_not_an_image_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.jpg");
    std::fs::write(&path, "these are not pixels\n").unwrap();
    let error = preprocess_file(&path, &PreprocessConfig::hf_default(32, 3)).unwrap_err();
    assert!(
        matches!(error, PreprocessError::NotAnImage { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains(&path.display().to_string()),
        "{error}"
    );
}

#[test]
fn an_unsupported_format_is_an_error() {
    let gif = b"GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;";
    let error = error_for_bytes(gif);
    assert!(
        matches!(error, PreprocessError::UnsupportedFormat { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("Gif"), "{error}");
}

#[test]
fn corrupt_images_are_errors_not_panics() {
    let dir = fixtures();
    let jpeg = std::fs::read(dir.join("cat.jpg")).unwrap();
    let png = std::fs::read(dir.join("coffee.png")).unwrap();
    let webp = std::fs::read(dir.join("astronaut.webp")).unwrap();
    let mut jpeg_garbage_after_header = jpeg[..200].to_vec();
    jpeg_garbage_after_header.extend(std::iter::repeat_n(0x5a, 300));
    let corrupt_inputs: [(&str, Vec<u8>); 6] = [
        ("truncated JPEG", jpeg[..jpeg.len() / 2].to_vec()),
        ("JPEG with garbage", jpeg_garbage_after_header),
        ("JPEG signature only", vec![0xff, 0xd8, 0xff]),
        ("truncated PNG", png[..png.len() / 2].to_vec()),
        ("PNG signature only", png[..8].to_vec()),
        ("truncated WebP", webp[..webp.len() / 2].to_vec()),
    ];
    for (what, bytes) in corrupt_inputs {
        let error = error_for_bytes(&bytes);
        assert!(
            matches!(error, PreprocessError::CorruptImage { .. }),
            "{what}: {error:?}"
        );
    }
}

#[test]
fn do_resize_false_requires_the_configured_size() {
    let config = PreprocessConfig::from_json_str(r#"{"do_resize": false, "size": 224}"#).unwrap();
    let error = preprocess_file(&fixtures().join("coffee.png"), &config).unwrap_err();
    assert!(
        matches!(error, PreprocessError::SizeMismatch { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("100x150"), "{error}");
}

fn encode_png(image: image::DynamicImage) -> Vec<u8> {
    let mut bytes = std::io::Cursor::new(Vec::new());
    image.write_to(&mut bytes, image::ImageFormat::Png).unwrap();
    bytes.into_inner()
}

#[test]
fn sixteen_bit_rgb_keeps_the_high_byte_as_pil_does() {
    let (width, height) = (5u32, 4u32);
    let eight_bit = image::RgbImage::from_fn(width, height, |x, y| {
        image::Rgb([(x * 50) as u8, (y * 60) as u8, (x * y * 9) as u8])
    });
    // Low bytes of 0xff would round the sample up under a /257 conversion; PIL ignores them.
    let sixteen_bit =
        image::ImageBuffer::<image::Rgb<u16>, Vec<u16>>::from_fn(width, height, |x, y| {
            let p = eight_bit.get_pixel(x, y).0;
            image::Rgb(p.map(|v| (u16::from(v) << 8) | 0xff))
        });
    let config = PreprocessConfig::hf_default(7, 3);
    let from_8 = preprocess_bytes(&encode_png(eight_bit.into()), &config).unwrap();
    let from_16 = preprocess_bytes(&encode_png(sixteen_bit.into()), &config).unwrap();
    assert_eq!(from_8, from_16);
}

#[test]
fn sixteen_bit_greyscale_clips_to_255_as_pil_does() {
    // PIL opens 16-bit grey as "I;16", whose convert("RGB") keeps values up to 255 and turns
    // the rest white; a tRNS chunk (an alpha channel to the decoder) changes nothing.
    let values = [0u16, 7, 255, 256, 40000];
    let grey = image::ImageBuffer::<image::Luma<u16>, Vec<u16>>::from_fn(5, 1, |x, _| {
        image::Luma([values[x as usize]])
    });
    let bytes = encode_png(grey.into());
    let decoded = decode_image(&bytes, "grey16", 3, false, &ImageLimits::default()).unwrap();
    let expected: Vec<u8> = [0u8, 7, 255, 255, 255]
        .iter()
        .flat_map(|&v| [v; 3])
        .collect();
    assert_eq!((decoded.height, decoded.width), (1, 5));
    assert_eq!(decoded.pixels, expected);
    // The same image with a tRNS chunk naming grey 7, inserted before IDAT.
    let idat = bytes.windows(4).position(|w| w == b"IDAT").unwrap() - 4;
    let mut with_trns = bytes[..idat].to_vec();
    with_trns.extend_from_slice(&[0, 0, 0, 2, b't', b'R', b'N', b'S', 0, 7]);
    let crc = crc32fast::hash(b"tRNS\0\x07");
    with_trns.extend_from_slice(&crc.to_be_bytes());
    with_trns.extend_from_slice(&bytes[idat..]);
    let decoded = decode_image(&with_trns, "grey16_trns", 3, false, &ImageLimits::default());
    assert_eq!(decoded.unwrap().pixels, expected);
}

#[test]
fn output_is_channel_major_and_sized_by_the_config() {
    let config = PreprocessConfig::from_json_str(
        r#"{"size": {"height": 3, "width": 5}, "do_normalize": false, "do_rescale": false}"#,
    )
    .unwrap();
    let red = image::RgbImage::from_pixel(9, 9, image::Rgb([200, 10, 0]));
    let values = preprocess_bytes(&encode_png(red.into()), &config).unwrap();
    assert_eq!(values.len(), 3 * 3 * 5);
    assert!(values[..15].iter().all(|&v| v == 200.0));
    assert!(values[15..30].iter().all(|&v| v == 10.0));
    assert!(values[30..].iter().all(|&v| v == 0.0));
}

/// CLIP's mean and std as transformers has them (Python floats), rounded to f32 as numpy does.
const CLIP_MEAN_F64: [f64; 3] = [0.48145466, 0.4578275, 0.40821073];
const CLIP_STD_F64: [f64; 3] = [0.26862954, 0.26130258, 0.27577711];
const CLIP_MEAN: [f32; 3] = [
    CLIP_MEAN_F64[0] as f32,
    CLIP_MEAN_F64[1] as f32,
    CLIP_MEAN_F64[2] as f32,
];
const CLIP_STD: [f32; 3] = [
    CLIP_STD_F64[0] as f32,
    CLIP_STD_F64[1] as f32,
    CLIP_STD_F64[2] as f32,
];
const HALF: [f32; 3] = [0.5; 3];
const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// What a config is expected to resolve to.
struct Expected {
    size: ResizeTarget,
    crop: Option<(usize, usize)>,
    resample: Resample,
    mean: [f32; 3],
    std: [f32; 3],
    do_convert_rgb: bool,
}

fn assert_resolves_to(config: &PreprocessConfig, expected: &Expected, what: &str) {
    assert_eq!(config.resize_target(), expected.size, "{what}");
    assert_eq!(config.crop_size(), expected.crop, "{what}");
    assert_eq!(config.resample(), expected.resample, "{what}");
    assert_eq!(config.rescale_factor(), Some(1.0 / 255.0), "{what}");
    assert_eq!(
        config.normalization(),
        Some((&expected.mean[..], &expected.std[..])),
        "{what}"
    );
    assert_eq!(config.do_convert_rgb(), expected.do_convert_rgb, "{what}");
}

#[test]
fn a_config_with_only_image_processor_type_takes_the_class_defaults() {
    // The class attributes of transformers 5.24's image processors (PIL and torchvision
    // backends alike), written out here rather than taken from vitrt's table.
    let square = |side| ResizeTarget::Fixed {
        height: side,
        width: side,
    };
    let clip_like = Expected {
        size: ResizeTarget::ShortestEdge(224),
        crop: Some((224, 224)),
        resample: Resample::Bicubic,
        mean: CLIP_MEAN,
        std: CLIP_STD,
        do_convert_rgb: true,
    };
    let cases = [
        (
            "ViT",
            Expected {
                size: square(224),
                crop: None,
                resample: Resample::Bilinear,
                mean: HALF,
                std: HALF,
                do_convert_rgb: false,
            },
        ),
        (
            "DeiT",
            Expected {
                size: square(256),
                crop: Some((224, 224)),
                resample: Resample::Bicubic,
                mean: HALF,
                std: HALF,
                do_convert_rgb: false,
            },
        ),
        (
            "Beit",
            Expected {
                size: square(224),
                crop: None,
                resample: Resample::Bicubic,
                mean: HALF,
                std: HALF,
                do_convert_rgb: false,
            },
        ),
        ("CLIP", clip_like),
        ("ChineseCLIP", clip_like_again()),
        ("Bit", clip_like_again()),
        (
            "Siglip",
            Expected {
                size: square(224),
                crop: None,
                resample: Resample::Bicubic,
                mean: HALF,
                std: HALF,
                do_convert_rgb: true,
            },
        ),
        // ConvNeXT's default size, 384, is at or above the size from which it warps to a
        // square instead of cropping by crop_pct.
        (
            "ConvNext",
            Expected {
                size: square(384),
                crop: None,
                resample: Resample::Bicubic,
                mean: HALF,
                std: HALF,
                do_convert_rgb: false,
            },
        ),
    ];
    for (family, expected) in &cases {
        for suffix in ["ImageProcessor", "ImageProcessorFast", "ImageProcessorPil"] {
            let name = format!("{family}{suffix}");
            let json = format!(r#"{{"image_processor_type": "{name}"}}"#);
            let config = PreprocessConfig::from_json_str(&json).unwrap_or_else(|e| panic!("{e}"));
            assert_resolves_to(&config, expected, &name);
        }
        // transformers 4's name for the same class.
        let json = format!(r#"{{"feature_extractor_type": "{family}FeatureExtractor"}}"#);
        let config = PreprocessConfig::from_json_str(&json).unwrap();
        assert_resolves_to(&config, expected, &json);
    }
    // A ViT config that names its class is the empty config.
    let dir = fixtures().join("configs");
    assert_eq!(
        PreprocessConfig::from_json_file(&dir.join("vit_type_only.json")).unwrap(),
        PreprocessConfig::from_json_file(&dir.join("vit_default.json")).unwrap()
    );
    // A field the config gives wins over the class's default; the others stay the class's.
    let clip = PreprocessConfig::from_json_str(
        r#"{"image_processor_type": "CLIPImageProcessor", "resample": 2, "do_convert_rgb": false}"#,
    )
    .unwrap();
    assert_eq!(clip.resample(), Resample::Bilinear);
    assert!(!clip.do_convert_rgb());
    assert_eq!(clip.crop_size(), Some((224, 224)));
    assert_eq!(clip.normalization().unwrap().0, &CLIP_MEAN);
}

fn clip_like_again() -> Expected {
    Expected {
        size: ResizeTarget::ShortestEdge(224),
        crop: Some((224, 224)),
        resample: Resample::Bicubic,
        mean: CLIP_MEAN,
        std: CLIP_STD,
        do_convert_rgb: true,
    }
}

#[test]
fn hub_configs_of_each_class_parse() {
    // openai/clip-vit-base-patch16's.
    let clip = PreprocessConfig::from_json_str(
        r#"{"crop_size": 224, "do_center_crop": true, "do_normalize": true, "do_resize": true,
            "feature_extractor_type": "CLIPFeatureExtractor",
            "image_mean": [0.48145466, 0.4578275, 0.40821073],
            "image_std": [0.26862954, 0.26130258, 0.27577711], "resample": 3, "size": 224}"#,
    )
    .unwrap();
    assert_resolves_to(&clip, &clip_like_again(), "CLIP ViT-B/16");
    // facebook/dinov2-base's.
    let dinov2 = PreprocessConfig::from_json_str(
        r#"{"crop_size": {"height": 224, "width": 224}, "do_center_crop": true,
            "do_convert_rgb": true, "do_normalize": true, "do_rescale": true, "do_resize": true,
            "image_mean": [0.485, 0.456, 0.406], "image_processor_type": "BitImageProcessor",
            "image_std": [0.229, 0.224, 0.225], "resample": 3,
            "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 256}}"#,
    )
    .unwrap();
    let expected = Expected {
        size: ResizeTarget::ShortestEdge(256),
        mean: IMAGENET_MEAN,
        std: IMAGENET_STD,
        ..clip_like_again()
    };
    assert_resolves_to(&dinov2, &expected, "DINOv2");
    // google/siglip-base-patch16-224's.
    let siglip = PreprocessConfig::from_json_str(
        r#"{"do_normalize": true, "do_rescale": true, "do_resize": true,
            "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "SiglipImageProcessor",
            "image_std": [0.5, 0.5, 0.5], "processor_class": "SiglipProcessor", "resample": 3,
            "rescale_factor": 0.00392156862745098, "size": {"height": 224, "width": 224}}"#,
    )
    .unwrap();
    assert_eq!(siglip.output_size(), (224, 224));
    assert_eq!(siglip.crop_size(), None);
    assert!(siglip.do_convert_rgb());
    // facebook/convnext-tiny-224's: crop_pct 0.875 below 384 resizes the shortest edge to
    // int(224 / 0.875) = 256 and crops 224.
    let convnext = PreprocessConfig::from_json_str(
        r#"{"crop_pct": 0.875, "do_normalize": true, "do_resize": true,
            "feature_extractor_type": "ConvNextFeatureExtractor",
            "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225],
            "resample": 3, "size": 224}"#,
    )
    .unwrap();
    assert_eq!(convnext.resize_target(), ResizeTarget::ShortestEdge(256));
    assert_eq!(convnext.crop_size(), Some((224, 224)));
}

#[test]
fn unknown_and_unsupported_processor_classes() {
    // An unknown class keeps ViT's defaults, as vitrt always did.
    let unknown =
        PreprocessConfig::from_json_str(r#"{"image_processor_type": "MyOwnImageProcessor"}"#)
            .unwrap();
    assert_eq!(unknown, PreprocessConfig::hf_default(224, 3));
    let cases = [
        (
            r#"{"image_processor_type": "DetrImageProcessor"}"#,
            "object detection",
        ),
        (
            r#"{"image_processor_type": "SegformerImageProcessorFast"}"#,
            "segmentation",
        ),
        (
            r#"{"image_processor_type": "Siglip2ImageProcessor"}"#,
            "NaFlex",
        ),
        (
            r#"{"image_processor_type": "Qwen2VLImageProcessor"}"#,
            "vision-language",
        ),
        (
            r#"{"feature_extractor_type": "LayoutLMv3FeatureExtractor"}"#,
            "OCR",
        ),
        (
            r#"{"image_processor_type": "PoolFormerImageProcessor"}"#,
            "crop_pct",
        ),
        (
            r#"{"image_processor_type": "TimmWrapperImageProcessor"}"#,
            "from_timm_pretrained_cfg",
        ),
        (r#"{"image_processor_type": 3}"#, "must be a string"),
        (
            r#"{"image_processor_type": "ViTImageProcessor", "do_center_crop": true}"#,
            "ViTImageProcessor has no default crop size",
        ),
        (
            r#"{"image_processor_type": "ConvNextImageProcessor", "do_center_crop": true, "crop_size": 200}"#,
            "crops twice",
        ),
        (
            r#"{"image_processor_type": "ConvNextImageProcessor", "size": {"height": 224, "width": 224}}"#,
            "shortest_edge",
        ),
        (
            r#"{"image_processor_type": "ConvNextImageProcessor", "size": 224, "crop_pct": 0}"#,
            "crop_pct must be a positive number",
        ),
    ];
    for (json, expected) in cases {
        let message = PreprocessConfig::from_json_str(json)
            .expect_err(json)
            .to_string();
        assert!(message.contains(expected), "{json}: {message}");
    }
    // A one-channel model takes a class's default mean and std only where its three values are
    // one value.
    let deit = PreprocessConfig::from_json_str_for_channels(
        r#"{"image_processor_type": "DeiTImageProcessor"}"#,
        1,
    )
    .unwrap();
    assert_eq!(deit.normalization(), Some((&[0.5f32][..], &[0.5f32][..])));
    let error = PreprocessConfig::from_json_str_for_channels(
        r#"{"image_processor_type": "CLIPImageProcessor"}"#,
        1,
    )
    .unwrap_err();
    assert!(
        error.to_string().contains("image_mean has 3 values"),
        "{error}"
    );
}

fn timm(json: &str) -> Result<PreprocessConfig, PreprocessError> {
    PreprocessConfig::from_timm_pretrained_cfg(&serde_json::from_str(json).unwrap())
}

#[test]
fn timm_pretrained_cfgs_resolve_as_timm_does() {
    // Nothing given: timm's defaults, 224 at crop_pct 0.875 (Resize(256)), bicubic, ImageNet's
    // mean and std.
    let defaults = timm("{}").unwrap();
    let expected = Expected {
        size: ResizeTarget::ShortestEdge(256),
        crop: Some((224, 224)),
        resample: Resample::Bicubic,
        mean: IMAGENET_MEAN,
        std: IMAGENET_STD,
        do_convert_rgb: false,
    };
    assert_resolves_to(&defaults, &expected, "{}");
    assert_eq!(defaults.crop_rounding(), CenterCropRounding::Torchvision);
    assert_eq!(defaults.num_channels(), 3);
    // Falsy values are the defaults too, as resolve_data_config reads them.
    assert_eq!(
        timm(r#"{"crop_pct": null, "crop_mode": "", "interpolation": "", "mean": null}"#).unwrap(),
        defaults
    );
    // vit_base_patch16_224.augreg2_in21k_ft_in1k's: floor(224 / 0.9) = 248.
    let augreg2 = timm(
        r#"{"tag": "augreg2_in21k_ft_in1k", "custom_load": false, "input_size": [3, 224, 224],
            "fixed_input_size": true, "interpolation": "bicubic", "crop_pct": 0.9,
            "crop_mode": "center", "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5],
            "num_classes": 1000, "pool_size": null, "first_conv": "patch_embed.proj",
            "classifier": "head"}"#,
    )
    .unwrap();
    let expected = Expected {
        size: ResizeTarget::ShortestEdge(248),
        mean: HALF,
        std: HALF,
        ..expected
    };
    assert_resolves_to(&augreg2, &expected, "augreg2");
    // Squash: both sides to floor(side / crop_pct), then the crop.
    let squash = timm(
        r#"{"input_size": [3, 384, 384], "interpolation": "bilinear", "crop_pct": 1.0,
            "crop_mode": "squash"}"#,
    )
    .unwrap();
    assert_eq!(
        squash.resize_target(),
        ResizeTarget::Fixed {
            height: 384,
            width: 384
        }
    );
    assert_eq!(squash.output_size(), (384, 384));
    assert_eq!(squash.resample(), Resample::Bilinear);
    // One mean or std value stands for every channel; input_size sets the channels.
    let grey = timm(r#"{"input_size": [1, 32, 32], "mean": [0.4], "std": [0.2]}"#).unwrap();
    assert_eq!(grey.num_channels(), 1);
    assert_eq!(grey.normalization(), Some((&[0.4f32][..], &[0.2f32][..])));
    let one_value = timm(r#"{"mean": [0.4], "std": [0.2]}"#).unwrap();
    assert_eq!(one_value.normalization().unwrap().0, &[0.4f32; 3]);
}

#[test]
fn timm_pretrained_cfgs_vitrt_cannot_reproduce_are_errors() {
    let cases = [
        (r#"{"crop_mode": "border"}"#, "\"border\""),
        (r#"{"crop_mode": "middle"}"#, "not one of timm's"),
        (r#"{"crop_mode": 1}"#, "crop_mode must be a string"),
        (
            r#"{"input_size": [3, 224, 256], "crop_pct": 0.9}"#,
            "ResizeKeepRatio",
        ),
        (r#"{"interpolation": "random"}"#, "interpolation \"random\""),
        (r#"{"interpolation": 3}"#, "interpolation must be a string"),
        (
            r#"{"input_size": [224, 224]}"#,
            "input_size must be [channels",
        ),
        (r#"{"input_size": [3, -1, 224]}"#, "input_size [1] (height)"),
        (
            r#"{"input_size": [4, 224, 224]}"#,
            "default has 3 values, but input_size has 4",
        ),
        (r#"{"input_size": [1, 224, 224]}"#, "mean is missing"),
        (r#"{"mean": [0.5, 0.5]}"#, "mean has 2 values"),
        (r#"{"std": "0.5"}"#, "std must be a list"),
        (r#"{"std": [0.5, 0, 0.5]}"#, "must not be 0"),
        (
            r#"{"crop_pct": -0.9}"#,
            "crop_pct must be a positive number",
        ),
        (r#"{"crop_pct": 1e-12}"#, "makes a resize of"),
        (r#"{"input_size": [3, 100000, 100000]}"#, "between 1 and"),
        (r#"[1, 2]"#, "must be a JSON object"),
    ];
    for (json, expected) in cases {
        match timm(json) {
            Err(e @ PreprocessError::InvalidConfig { .. }) => {
                let message = e.to_string();
                assert!(message.contains(expected), "{json}: {message}");
                assert!(message.contains("timm pretrained_cfg"), "{json}: {message}");
            }
            other => panic!("{json}: expected an InvalidConfig error, got {other:?}"),
        }
    }
}

#[test]
fn every_timm_fixture_checkpoint_is_preprocessed_to_its_models_input_size() {
    // The timm fixtures' config.json (made by timm's save_for_hf) hold the pretrained_cfg the
    // checkpoint is preprocessed by: center and squash crops, bicubic and bilinear.
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models");
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(&models).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("timm-") {
            continue;
        }
        let model = vitrt_model::ModelConfig::from_file(&dir.join("config.json"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let pre = PreprocessConfig::of_checkpoint(&dir, model.num_channels)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .unwrap_or_else(|| panic!("{name}: no pretrained_cfg"));
        assert_eq!(pre.output_size(), model.image_size, "{name}");
        seen.push((name, pre.resample()));
    }
    assert!(seen.len() >= 7, "{seen:?}");
    assert!(
        seen.iter().any(|(_, r)| *r == Resample::Bilinear),
        "{seen:?}"
    );
}

/// open_clip's eval transform (the one `create_model_and_transforms` returns for each
/// open_clip fixture, recorded in its preprocess-reference.safetensors by
/// scripts/fixtures/make_open_clip_fixtures.py) against vitrt's reading of the fixture's
/// open_clip_config.json: torchvision's shortest-edge `Resize` and `CenterCrop` (bicubic) in
/// one, `Resize((size, size))` (bilinear, squash) in the other, on PIL images.
#[test]
fn open_clip_configs_preprocess_as_open_clips_transform() {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models");
    for name in ["open-clip-vit", "open-clip-quickgelu-avg"] {
        let dir = models.join(name);
        let config = PreprocessConfig::of_checkpoint(&dir, 3)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .unwrap_or_else(|| panic!("{name}: no preprocessing found"));
        let bytes = std::fs::read(dir.join("preprocess-reference.safetensors")).unwrap();
        let references = SafeTensors::deserialize(&bytes).unwrap();
        let mut images: Vec<String> = references.names().into_iter().map(String::from).collect();
        images.sort();
        assert_eq!(images.len(), 3, "{name}");
        for image in images {
            let reference = references.tensor(&image).unwrap();
            let (height, width) = config.output_size();
            assert_eq!(reference.shape(), [3, height, width], "{name}/{image}");
            let expected: Vec<f32> = reference
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            let ours = preprocess_file(&fixtures().join(&image), &config)
                .unwrap_or_else(|e| panic!("{name}/{image}: {e}"));
            let max_abs_diff = ours
                .iter()
                .zip(&expected)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            println!("{name}/{image}: max |ours - open_clip| = {max_abs_diff}");
            assert!(
                max_abs_diff <= MAX_ABS_DIFF,
                "{name}/{image}: max |ours - open_clip| = {max_abs_diff}"
            );
        }
    }
}

/// A processor config that names no class takes the defaults of the class transformers'
/// `AutoImageProcessor` maps config.json's `model_type` to (CLIP's for AIMv2, BiT's for
/// DINOv2); a model type it maps to no class of ours keeps ViT's defaults.
#[test]
fn a_config_without_a_class_takes_the_model_types() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("preprocessor_config.json"),
        r#"{"size": 224}"#,
    )
    .unwrap();
    let with_model_type = |model_type: Option<&str>| {
        let config = match model_type {
            Some(t) => format!(r#"{{"model_type": "{t}"}}"#),
            None => "{}".to_string(),
        };
        std::fs::write(dir.path().join("config.json"), config).unwrap();
        PreprocessConfig::of_checkpoint(dir.path(), 3)
            .unwrap()
            .unwrap()
    };
    let aimv2 = with_model_type(Some("aimv2_vision_model"));
    assert_eq!(aimv2.resize_target(), ResizeTarget::ShortestEdge(224));
    assert_eq!(aimv2.crop_size(), Some((224, 224)));
    assert_eq!(aimv2.resample(), Resample::Bicubic);
    assert_eq!(
        aimv2.normalization().unwrap().0,
        &[0.48145466f32, 0.4578275, 0.40821073][..]
    );
    let bit = PreprocessConfig::from_json_str(
        r#"{"size": 224, "image_processor_type": "BitImageProcessor"}"#,
    )
    .unwrap();
    assert_eq!(with_model_type(Some("dinov2")), bit);
    let vit = PreprocessConfig::hf_default(224, 3);
    assert_eq!(with_model_type(Some("vit")), vit);
    assert_eq!(with_model_type(Some("an_unknown_type")), vit);
    assert_eq!(with_model_type(None), vit);
    // A class the config names wins over the model type's.
    std::fs::write(
        dir.path().join("preprocessor_config.json"),
        r#"{"size": 224, "image_processor_type": "ViTImageProcessor"}"#,
    )
    .unwrap();
    assert_eq!(with_model_type(Some("aimv2_vision_model")), vit);
}

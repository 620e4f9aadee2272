//! The checks the fuzz targets run, one per target, shared with the stable-toolchain replay
//! test (`model/tests/fuzz_replay.rs`), which includes this file through `#[path]`.
//!
//! Each check feeds arbitrary bytes to one public entry point and requires only that it
//! returns (an `Ok` or an `Err`): a panic, a hang or an unbounded allocation is a failure.
//! On success, the accessors callers use next are exercised too, so that values the parser
//! accepted cannot make them panic later.

#![allow(dead_code)]

use std::cell::RefCell;
use std::path::PathBuf;

use vitrt_model::preprocess::{
    normalization_table, preprocess_bytes, ImageLimits, ImageLoader, PreprocessConfig,
};
use vitrt_model::ModelConfig;

/// The targets, by name: the folders of `fuzz/corpus/` and the files of `fuzz/fuzz_targets/`.
pub const TARGETS: [&str; 4] = [
    "safetensors_header",
    "vit_config",
    "preprocessor_config",
    "image_decode",
];

/// Runs the check of the target called `name`.
pub fn check(name: &str, data: &[u8]) {
    match name {
        "safetensors_header" => check_safetensors(data),
        "vit_config" => check_vit_config(data),
        "preprocessor_config" => check_preprocessor_config(data),
        "image_decode" => check_image_decode(data),
        other => panic!("no fuzz target named {other}"),
    }
}

thread_local! {
    /// One scratch folder per thread; the checkpoint reader takes a path, so each input is
    /// written to the same file in it.
    static SCRATCH: RefCell<Option<(tempfile::TempDir, PathBuf)>> = const { RefCell::new(None) };
}

/// The bytes as a `.safetensors` file: opened (header parsed and checked against the file
/// size), then every tensor read, as `vitrt_weights::read_f32_tensors` does.
pub fn check_safetensors(data: &[u8]) {
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        let (_, path) = scratch.get_or_insert_with(|| {
            let dir = tempfile::tempdir().expect("a scratch folder");
            let path = dir.path().join("input.safetensors");
            (dir, path)
        });
        std::fs::write(&*path, data).expect("the scratch file is writable");
        let Ok(checkpoint) = vitrt_weights::Checkpoint::open(path) else {
            return;
        };
        for name in checkpoint.names() {
            let _ = checkpoint.shape(name);
            let _ = checkpoint.dtype(name);
            let _ = checkpoint.stored_dtype_name(name);
            let _ = checkpoint.stored_bytes(name);
            let _ = checkpoint.load_f32(name);
        }
        let _ = vitrt_weights::read_f32_tensors(path);
    });
}

/// The bytes as `config.json` text; on success, the derived sizes the graph builder uses.
pub fn check_vit_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = ModelConfig::from_json_str(text) else {
        return;
    };
    let _ = config.head_dim();
    let _ = config.num_patches();
    let _ = config.tokens();
    let _ = config.flops_per_image();
    let _ = config.label(0);
    let _ = config.label(usize::MAX);
}

/// A small image every accepted preprocessor config is run on, when its output is small.
const PROBE_IMAGE: &[u8] = include_bytes!("../tests/fixtures/images/orientation/exif_3.png");

/// The bytes as `preprocessor_config.json` text, for RGB and for one-channel models, and as a
/// timm `pretrained_cfg` (the whole JSON value, and its `pretrained_cfg` key as in a timm
/// config.json); on success, the config is applied to a small image when its output is small
/// (the size may legitimately be up to 16384 on a side, too slow to run for every input).
pub fn check_preprocessor_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let run = |config: PreprocessConfig| {
        let _ = normalization_table(&config);
        let (height, width) = config.output_size();
        if height * width <= 64 * 64 {
            let _ = preprocess_bytes(PROBE_IMAGE, &config);
        }
    };
    for channels in [3, 1] {
        if let Ok(config) = PreprocessConfig::from_json_str_for_channels(text, channels) {
            run(config);
        }
    }
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(text) {
        for cfg in [&value, &value["pretrained_cfg"]] {
            if let Ok(config) = PreprocessConfig::from_timm_pretrained_cfg(cfg) {
                run(config);
            }
        }
    }
}

/// Configs the image target decodes with, chosen by the input's length so that the corpus
/// holds plain image files: several filters, output sizes and channel counts.
const IMAGE_CONFIGS: [(&str, usize); 4] = [
    // do_convert_rgb reads a PNG's tRNS chunk.
    (r#"{"size": 8, "do_convert_rgb": true}"#, 3),
    (r#"{"size": {"height": 5, "width": 9}, "resample": 3}"#, 3),
    (r#"{"size": 7, "resample": 0, "do_normalize": false}"#, 1),
    (
        r#"{"size": [6, 4], "resample": 1, "image_mean": [0.1], "image_std": [0.2]}"#,
        1,
    ),
];

/// Limits far below the defaults, so that the fuzzer's memory limit is never what stops an
/// image that claims a large size: every decoder must refuse it from its header.
pub const FUZZ_IMAGE_LIMITS: ImageLimits = ImageLimits {
    max_pixels: 1 << 20,
    max_decoded_bytes: 16 << 20,
    max_file_bytes: 1 << 20,
};

/// The bytes as an image file (PNG, JPEG or WebP, told apart by content): decoded, oriented,
/// converted and resized into a small output, under [`FUZZ_IMAGE_LIMITS`].
pub fn check_image_decode(data: &[u8]) {
    let (json, channels) = IMAGE_CONFIGS[data.len() % IMAGE_CONFIGS.len()];
    let config = PreprocessConfig::from_json_str_for_channels(json, channels)
        .expect("the image target's configs are valid");
    let mut loader = ImageLoader::new(&config, FUZZ_IMAGE_LIMITS);
    let mut out = vec![0u8; loader.output_bytes()];
    let _ = loader.load_bytes_into(data, "(fuzz input)", &mut out);
}

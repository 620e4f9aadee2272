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

use vitrt_model::preprocess::device_batch::jpeg_batch;
use vitrt_model::preprocess::jpeg_coefficients::{read_jpeg, EntropyOn};
use vitrt_model::preprocess::{
    normalization_table, preprocess_bytes, ImageLimits, ImageLoader, PreprocessConfig,
};
use vitrt_model::text::labels::{labels_from_lines, DEFAULT_TEMPLATE};
use vitrt_model::text::TextTokenizer;
use vitrt_model::{ModelConfig, TextFamily};

/// The targets, by name: the folders of `fuzz/corpus/` and the files of `fuzz/fuzz_targets/`.
pub const TARGETS: [&str; 6] = [
    "safetensors_header",
    "vit_config",
    "preprocessor_config",
    "image_decode",
    "sharded_index",
    "labels_file",
];

/// Runs the check of the target called `name`.
pub fn check(name: &str, data: &[u8]) {
    match name {
        "safetensors_header" => check_safetensors(data),
        "vit_config" => check_vit_config(data),
        "preprocessor_config" => check_preprocessor_config(data),
        "image_decode" => check_image_decode(data),
        "sharded_index" => check_sharded_index(data),
        "labels_file" => check_labels_file(data),
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
    // The GPU path's host half: a JPEG read as a scan for the device's entropy decoding, then
    // entropy-decoded by the kernel's CPU twin (whatever it marks).
    if let Ok(read) = read_jpeg(data, &FUZZ_IMAGE_LIMITS, EntropyOn::Device) {
        let _ = jpeg_batch(&[&read]).decoded();
    }
}

thread_local! {
    /// One folder per thread holding two small shards, `model-00001-of-00002.safetensors`
    /// (tensors `a` and `c`) and `model-00002-of-00002.safetensors` (`b`), beside which each
    /// input is written as `model.safetensors.index.json`.
    static SHARDS: RefCell<Option<tempfile::TempDir>> = const { RefCell::new(None) };
}

/// The bytes as a sharded checkpoint's `model.safetensors.index.json`, beside two real
/// shards: opened (the weight map read, each shard it names checked and mapped), then every
/// tensor read.
pub fn check_sharded_index(data: &[u8]) {
    SHARDS.with(|shards| {
        let mut shards = shards.borrow_mut();
        let dir = shards.get_or_insert_with(|| {
            let dir = tempfile::tempdir().expect("a scratch folder");
            let first: Vec<vitrt_weights::NamedTensor> = vec![
                ("a".into(), vec![2], vec![1.0, 2.0]),
                ("c".into(), vec![], vec![3.0]),
            ];
            let second: Vec<vitrt_weights::NamedTensor> = vec![("b".into(), vec![1], vec![4.0])];
            for (name, tensors) in [
                ("model-00001-of-00002.safetensors", first),
                ("model-00002-of-00002.safetensors", second),
            ] {
                vitrt_weights::write_f32_tensors(&dir.path().join(name), &tensors)
                    .expect("a shard is writable");
            }
            dir
        });
        let index = dir.path().join("model.safetensors.index.json");
        std::fs::write(&index, data).expect("the scratch index is writable");
        let Ok(checkpoint) = vitrt_weights::Checkpoint::open(dir.path()) else {
            return;
        };
        let _ = checkpoint.files();
        for name in checkpoint.names() {
            let _ = checkpoint.shape(name);
            let _ = checkpoint.load_f32(name);
        }
    });
}

/// The tiny CLIP fixture's tokenizer files, which the labels target tokenizes with.
const CLIP_TOKENIZER: &[u8] =
    include_bytes!("../tests/fixtures/models/clip-zero-shot/tokenizer.json");
const CLIP_TOKENIZER_CONFIG: &[u8] =
    include_bytes!("../tests/fixtures/models/clip-zero-shot/tokenizer_config.json");

thread_local! {
    /// The CLIP tokenizer at its context of 77, loaded once per thread.
    static TOKENIZER: TextTokenizer = {
        let dir = tempfile::tempdir().expect("a scratch folder");
        std::fs::write(dir.path().join("tokenizer.json"), CLIP_TOKENIZER).expect("writable");
        std::fs::write(dir.path().join("tokenizer_config.json"), CLIP_TOKENIZER_CONFIG)
            .expect("writable");
        TextTokenizer::from_checkpoint(dir.path(), 77, TextFamily::Clip)
            .expect("the fixture's tokenizer loads")
    };
}

/// The bytes as a `--labels-file` (UTF-8 text, a label a line): read and checked as `vitrt
/// zero-shot` reads it; on success, every label put into the default template and tokenized
/// with a CLIP tokenizer, as the labels are before the text tower encodes them.
pub fn check_labels_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(labels) = labels_from_lines(text) else {
        return;
    };
    let texts: Vec<String> = labels
        .iter()
        .map(|label| DEFAULT_TEMPLATE.replacen("{}", label, 1))
        .collect();
    TOKENIZER.with(|tokenizer| {
        let _ = tokenizer.encode(&texts);
    });
}

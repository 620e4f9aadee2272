//! Opening checkpoints (single file, folder, sharded) and every way a file can be broken.

mod common;

use std::path::Path;

use common::*;
use vitrt_weights::{Checkpoint, StoredDType, WeightsError};

fn open_err(path: &Path) -> WeightsError {
    match Checkpoint::open(path) {
        Ok(checkpoint) => panic!(
            "expected {} to fail, opened {:?}",
            path.display(),
            checkpoint.names()
        ),
        Err(e) => e,
    }
}

fn assert_mentions(error: &WeightsError, needles: &[&str]) {
    let text = error.to_string();
    for needle in needles {
        assert!(text.contains(needle), "`{needle}` missing from: {text}");
    }
}

#[test]
fn loads_f32_f16_bf16_from_unaligned_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    let f32_values = ramp(6, 0.37, -1.0);
    let half_values = [0.5f32, -2.0, 1024.0, 0.125];
    for padding in [0, 1, 3] {
        let bytes = safetensors_bytes(
            &[
                f32_tensor("layer.weight", &[2, 3], &f32_values),
                f16_tensor("layer.bias", &[4], &half_values),
                bf16_tensor("a.scale", &[2, 2], &half_values),
            ],
            padding,
        );
        write_file(&path, &bytes);
        let checkpoint = Checkpoint::open(&path).unwrap();
        assert_eq!(
            checkpoint.names(),
            ["a.scale", "layer.bias", "layer.weight"]
        );
        assert!(checkpoint.contains("layer.bias"));
        assert!(!checkpoint.contains("layer"));
        assert_eq!(checkpoint.shape("layer.weight"), Some(&[2usize, 3][..]));
        assert_eq!(checkpoint.shape("missing"), None);
        assert_eq!(checkpoint.dtype("layer.weight"), Some(StoredDType::F32));
        assert_eq!(checkpoint.dtype("layer.bias"), Some(StoredDType::F16));
        assert_eq!(checkpoint.dtype("a.scale"), Some(StoredDType::BF16));
        assert_eq!(checkpoint.load_f32("layer.weight").unwrap(), f32_values);
        assert_eq!(checkpoint.load_f32("layer.bias").unwrap(), half_values);
        assert_eq!(checkpoint.load_f32("a.scale").unwrap(), half_values);
        assert_eq!(
            checkpoint.load_f32_shaped("layer.weight", &[2, 3]).unwrap(),
            f32_values
        );
        assert_eq!(checkpoint.stored_bytes("layer.bias").unwrap().len(), 8);
    }
}

#[test]
fn a_folder_opens_its_model_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    write_file(
        &dir.path().join("model.safetensors"),
        &safetensors_bytes(&[f32_tensor("x", &[2], &[1.0, 2.0])], 0),
    );
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(checkpoint.load_f32("x").unwrap(), [1.0, 2.0]);
    assert_eq!(checkpoint.location(), dir.path());
    assert_eq!(checkpoint.files(), [dir.path().join("model.safetensors")]);
}

#[test]
fn a_folder_opens_open_clips_safetensors_and_refuses_its_pickle_by_name() {
    let dir = tempfile::tempdir().unwrap();
    write_file(&dir.path().join("open_clip_pytorch_model.bin"), b"pickle");
    let error = Checkpoint::open(dir.path()).unwrap_err().to_string();
    assert!(
        error.contains("only open_clip_pytorch_model.bin")
            && error.contains("open_clip_model.safetensors"),
        "{error}"
    );
    write_file(
        &dir.path().join("open_clip_model.safetensors"),
        &safetensors_bytes(&[f32_tensor("logit_scale", &[], &[4.6])], 0),
    );
    let checkpoint = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(checkpoint.load_f32("logit_scale").unwrap(), [4.6]);
    assert_eq!(
        checkpoint.files(),
        [dir.path().join("open_clip_model.safetensors")]
    );
}

#[test]
fn scalars_and_empty_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    write_file(
        &path,
        &safetensors_bytes(
            &[
                f32_tensor("scalar", &[], &[7.5]),
                f32_tensor("empty", &[0, 4], &[]),
            ],
            0,
        ),
    );
    let checkpoint = Checkpoint::open(&path).unwrap();
    assert_eq!(checkpoint.load_f32("scalar").unwrap(), [7.5]);
    assert_eq!(
        checkpoint.load_f32_shaped("empty", &[0, 4]).unwrap(),
        Vec::<f32>::new()
    );
}

fn write_two_shards(dir: &Path) {
    write_file(
        &dir.join("model-00001-of-00002.safetensors"),
        &safetensors_bytes(
            &[
                f32_tensor("embed.weight", &[2, 2], &[1.0, 2.0, 3.0, 4.0]),
                f16_tensor("embed.bias", &[2], &[0.5, -0.5]),
            ],
            1,
        ),
    );
    write_file(
        &dir.join("model-00002-of-00002.safetensors"),
        &safetensors_bytes(&[bf16_tensor("head.weight", &[3], &[1.0, 2.0, 4.0])], 0),
    );
    write_file(
        &dir.join("model.safetensors.index.json"),
        index_json(&[
            ("embed.weight", "model-00001-of-00002.safetensors"),
            ("embed.bias", "model-00001-of-00002.safetensors"),
            ("head.weight", "model-00002-of-00002.safetensors"),
        ])
        .as_bytes(),
    );
}

#[test]
fn sharded_checkpoint_through_folder_or_index() {
    let dir = tempfile::tempdir().unwrap();
    write_two_shards(dir.path());
    for path in [
        dir.path().to_path_buf(),
        dir.path().join("model.safetensors.index.json"),
    ] {
        let checkpoint = Checkpoint::open(&path).unwrap();
        assert_eq!(
            checkpoint.names(),
            ["embed.bias", "embed.weight", "head.weight"]
        );
        assert_eq!(checkpoint.len(), 3);
        assert_eq!(
            checkpoint.load_f32("embed.weight").unwrap(),
            [1.0, 2.0, 3.0, 4.0]
        );
        assert_eq!(checkpoint.load_f32("embed.bias").unwrap(), [0.5, -0.5]);
        assert_eq!(
            checkpoint.load_f32_shaped("head.weight", &[3]).unwrap(),
            [1.0, 2.0, 4.0]
        );
        assert_eq!(
            checkpoint.file_of("head.weight").unwrap(),
            dir.path().join("model-00002-of-00002.safetensors")
        );
        assert_eq!(checkpoint.files().len(), 2);
    }
}

#[test]
fn model_safetensors_wins_over_an_index_in_the_same_folder() {
    let dir = tempfile::tempdir().unwrap();
    write_two_shards(dir.path());
    write_file(
        &dir.path().join("model.safetensors"),
        &safetensors_bytes(&[f32_tensor("only", &[1], &[9.0])], 0),
    );
    assert_eq!(Checkpoint::open(dir.path()).unwrap().names(), ["only"]);
}

#[test]
fn missing_file_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.safetensors");
    let error = open_err(&path);
    assert!(matches!(error, WeightsError::NotFound { .. }), "{error:?}");
    assert_mentions(&error, &["absent.safetensors"]);
}

#[test]
fn folder_without_weights_says_what_it_expected() {
    let dir = tempfile::tempdir().unwrap();
    let error = open_err(dir.path());
    assert!(
        matches!(error, WeightsError::NoSafetensorsWeights { .. }),
        "{error:?}"
    );
    assert_mentions(
        &error,
        &["model.safetensors", "model.safetensors.index.json"],
    );

    write_file(&dir.path().join("pytorch_model.bin"), b"not loaded");
    let error = open_err(dir.path());
    assert_mentions(
        &error,
        &["pytorch_model.bin", "safetensors weights are needed"],
    );
}

fn corrupt_file_error(name: &str, bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    write_file(&path, bytes);
    let error = open_err(&path);
    assert!(
        matches!(error, WeightsError::CorruptFile { .. }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains(name),
        "the message must name the file: {text}"
    );
    text
}

#[test]
fn empty_and_tiny_files_are_corrupt() {
    let text = corrupt_file_error("empty.safetensors", b"");
    assert!(text.contains("too short"), "{text}");
    let text = corrupt_file_error("tiny.safetensors", &[1, 0, 0]);
    assert!(text.contains("too short"), "{text}");
}

#[test]
fn header_length_beyond_the_file_is_corrupt() {
    let mut bytes = safetensors_bytes(&[f32_tensor("x", &[1], &[1.0])], 0);
    bytes[..8].copy_from_slice(&10_000u64.to_le_bytes());
    let text = corrupt_file_error("long_header.safetensors", &bytes);
    assert!(
        text.contains("header length 10000 goes beyond the end"),
        "{text}"
    );
}

#[test]
fn truncated_data_is_corrupt_and_names_the_tensor() {
    let bytes = safetensors_bytes(&[f32_tensor("x", &[4], &[1.0, 2.0, 3.0, 4.0])], 0);
    let text = corrupt_file_error("cut.safetensors", &bytes[..bytes.len() - 3]);
    assert!(text.contains("`x`") && text.contains("truncated"), "{text}");
}

#[test]
fn invalid_json_header_is_corrupt() {
    let text = corrupt_file_error("bad_json.safetensors", &with_header("{\"x\": [1, 2", &[]));
    assert!(text.contains("not a JSON object"), "{text}");
    let mut bytes = with_header("{\"x\":1}", &[]);
    bytes[9] = 0xFF; // inside the JSON text
    let text = corrupt_file_error("bad_utf8.safetensors", &bytes);
    assert!(text.contains("not UTF-8"), "{text}");
}

#[test]
fn malformed_tensor_entry_is_corrupt_and_names_the_tensor() {
    let header = r#"{"w":{"dtype":"F32","shape":"two","data_offsets":[0,8]}}"#;
    let text = corrupt_file_error("entry.safetensors", &with_header(header, &[0; 8]));
    assert!(text.contains("`w`") && text.contains("malformed"), "{text}");
}

#[test]
fn overlapping_tensors_are_corrupt() {
    let header = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                     "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
    let text = corrupt_file_error("overlap.safetensors", &with_header(header, &[0; 12]));
    assert!(
        text.contains("`a`") && text.contains("`b`") && text.contains("overlap"),
        "{text}"
    );
}

#[test]
fn byte_length_disagreeing_with_shape_is_corrupt() {
    let header = r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#;
    let text = corrupt_file_error("size.safetensors", &with_header(header, &[0; 8]));
    assert!(
        text.contains("`a` spans 8 bytes") && text.contains("needs 12 bytes"),
        "{text}"
    );
}

#[test]
fn end_before_start_is_corrupt() {
    let header = r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}}"#;
    let text = corrupt_file_error("reversed.safetensors", &with_header(header, &[0; 8]));
    assert!(text.contains("end comes before the start"), "{text}");
}

#[test]
fn other_dtypes_open_but_do_not_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.safetensors");
    write_file(
        &path,
        &safetensors_bytes(
            &[
                f32_tensor("w", &[1], &[3.0]),
                raw_tensor("ids", "I64", &[2], vec![0; 16]),
                raw_tensor("q", "I8", &[3], vec![1, 2, 3]),
                raw_tensor("d", "F64", &[1], 1.0f64.to_le_bytes().to_vec()),
                raw_tensor("odd", "Q4_K", &[8], vec![0; 5]),
            ],
            0,
        ),
    );
    let checkpoint = Checkpoint::open(&path).unwrap();
    assert_eq!(checkpoint.load_f32("w").unwrap(), [3.0]);
    for (tensor, dtype) in [("ids", "I64"), ("q", "I8"), ("d", "F64"), ("odd", "Q4_K")] {
        assert_eq!(checkpoint.dtype(tensor), None);
        assert_eq!(checkpoint.stored_dtype_name(tensor), Some(dtype));
        let error = checkpoint.load_f32(tensor).unwrap_err();
        assert!(
            matches!(error, WeightsError::UnsupportedDType { .. }),
            "{error:?}"
        );
        assert_mentions(
            &error,
            &[&format!("`{tensor}`"), dtype, "mixed.safetensors"],
        );
    }
}

#[test]
fn missing_tensor_and_shape_mismatch_name_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    write_file(
        &path,
        &safetensors_bytes(&[f32_tensor("w", &[2, 3], &[0.0; 6])], 0),
    );
    let checkpoint = Checkpoint::open(&path).unwrap();

    let error = checkpoint.load_f32("nope").unwrap_err();
    assert!(
        matches!(error, WeightsError::TensorNotFound { .. }),
        "{error:?}"
    );
    assert_mentions(&error, &["`nope`", "w.safetensors"]);
    assert!(checkpoint.load_f32_shaped("nope", &[1]).is_err());

    let error = checkpoint.load_f32_shaped("w", &[3, 2]).unwrap_err();
    assert!(
        matches!(error, WeightsError::ShapeMismatch { .. }),
        "{error:?}"
    );
    assert_mentions(&error, &["`w`", "[3, 2]", "[2, 3]"]);
}

fn index_error(index_text: &str) -> WeightsError {
    let dir = tempfile::tempdir().unwrap();
    write_two_shards(dir.path());
    write_file(
        &dir.path().join("model.safetensors.index.json"),
        index_text.as_bytes(),
    );
    open_err(dir.path())
}

#[test]
fn broken_index_files() {
    for (text, expected) in [
        ("{not json", "expected a JSON object"),
        (r#"{"metadata": {}}"#, "weight_map"),
        (r#"{"weight_map": {"a": 3}}"#, "expected a JSON object"),
        (r#"{"weight_map": {}}"#, "lists no tensors"),
        (
            r#"{"weight_map": {"a": "../escape.safetensors"}}"#,
            "not a plain file name",
        ),
        (
            r#"{"weight_map": {"a": "/etc/hosts"}}"#,
            "not a plain file name",
        ),
    ] {
        let error = index_error(text);
        assert!(
            matches!(error, WeightsError::BrokenIndex { .. }),
            "{text}: {error:?}"
        );
        assert_mentions(&error, &["model.safetensors.index.json", expected]);
    }
}

#[test]
fn shard_listed_but_absent() {
    let dir = tempfile::tempdir().unwrap();
    write_two_shards(dir.path());
    std::fs::remove_file(dir.path().join("model-00002-of-00002.safetensors")).unwrap();
    let error = open_err(dir.path());
    assert!(
        matches!(error, WeightsError::ShardMissing { .. }),
        "{error:?}"
    );
    assert_mentions(
        &error,
        &[
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
        ],
    );
}

#[test]
fn tensor_listed_in_a_shard_that_lacks_it() {
    let error = index_error(&index_json(&[
        ("embed.weight", "model-00001-of-00002.safetensors"),
        ("head.weight", "model-00001-of-00002.safetensors"),
    ]));
    assert!(
        matches!(error, WeightsError::TensorNotInShard { .. }),
        "{error:?}"
    );
    assert_mentions(
        &error,
        &["`head.weight`", "model-00001-of-00002.safetensors"],
    );
}

#[test]
fn corrupt_shard_names_the_shard() {
    let dir = tempfile::tempdir().unwrap();
    write_two_shards(dir.path());
    write_file(
        &dir.path().join("model-00002-of-00002.safetensors"),
        b"garbage!garbage",
    );
    let error = open_err(dir.path());
    assert!(
        matches!(error, WeightsError::CorruptFile { .. }),
        "{error:?}"
    );
    assert_mentions(&error, &["model-00002-of-00002.safetensors"]);
}

/// Every truncation and many single-byte corruptions of a valid file: each must give an error
/// or a checkpoint whose every tensor loads, never a panic.
#[test]
fn no_panic_on_truncated_or_mutated_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fuzz.safetensors");
    let valid = safetensors_bytes(
        &[
            f32_tensor("a", &[3], &[1.0, 2.0, 3.0]),
            f16_tensor("b", &[2], &[1.0, 2.0]),
            raw_tensor("c", "I8", &[2], vec![1, 2]),
        ],
        1,
    );
    let try_open = |bytes: &[u8]| {
        write_file(&path, bytes);
        if let Ok(checkpoint) = Checkpoint::open(&path) {
            for name in checkpoint.names() {
                let _ = checkpoint.load_f32(name);
                let _ = checkpoint.load_f32_shaped(name, &[2]);
            }
        }
    };
    for len in 0..valid.len() {
        write_file(&path, &valid[..len]);
        assert!(
            Checkpoint::open(&path).is_err(),
            "truncated to {len} bytes but opened"
        );
    }
    let replacements = [b'0', b'9', b'[', b']', b'"', b',', b'-', 0xFF, 0x00];
    for position in 0..valid.len() {
        for &replacement in &replacements {
            let mut bytes = valid.clone();
            bytes[position] = replacement;
            try_open(&bytes);
        }
    }
}

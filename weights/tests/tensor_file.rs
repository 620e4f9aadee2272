//! `write_f32_tensors` / `read_f32_tensors`: round trips, bad input, atomic replacement.

mod common;

use std::path::Path;

use common::*;
use vitrt_weights::{read_f32_tensors, write_f32_tensors, Checkpoint, WeightsError};

fn folder_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn write_then_read_round_trips_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.safetensors");
    let tensors = vec![
        ("logits".to_string(), vec![2, 5], ramp(10, -0.3, 1.7)),
        (
            "hidden.0".to_string(),
            vec![1, 2, 3],
            vec![f32::MIN_POSITIVE, -0.0, 1e30, 2.5, -7.0, 0.1],
        ),
        ("scalar".to_string(), vec![], vec![42.0]),
        ("empty".to_string(), vec![0, 3], vec![]),
    ];
    write_f32_tensors(&path, &tensors).unwrap();

    let mut expected = tensors.clone();
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    let read = read_f32_tensors(&path).unwrap();
    assert_eq!(read.len(), expected.len());
    for (got, want) in read.iter().zip(&expected) {
        assert_eq!(got.0, want.0);
        assert_eq!(got.1, want.1);
        // Bitwise, so -0.0 and every last bit are checked.
        let got_bits: Vec<u32> = got.2.iter().map(|v| v.to_bits()).collect();
        let want_bits: Vec<u32> = want.2.iter().map(|v| v.to_bits()).collect();
        assert_eq!(got_bits, want_bits, "{}", got.0);
    }
    assert_eq!(
        folder_entries(dir.path()),
        ["out.safetensors"],
        "no temporary file may remain"
    );
}

#[test]
fn written_files_are_valid_for_the_reference_reader() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.safetensors");
    let values = ramp(6, 0.5, -1.0);
    write_f32_tensors(&path, &[("x".to_string(), vec![3, 2], values.clone())]).unwrap();

    let bytes = std::fs::read(&path).unwrap();
    let reference = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let view = reference.tensor("x").unwrap();
    assert_eq!(view.dtype(), safetensors::Dtype::F32);
    assert_eq!(view.shape(), [3, 2]);
    let decoded: Vec<f32> = view
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(decoded, values);
}

#[test]
fn read_converts_half_precision_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("half.safetensors");
    write_file(
        &path,
        &safetensors_bytes(
            &[
                f16_tensor("h", &[2], &[1.5, -3.0]),
                bf16_tensor("b", &[1], &[0.25]),
            ],
            3,
        ),
    );
    let read = read_f32_tensors(&path).unwrap();
    assert_eq!(
        read,
        vec![
            ("b".to_string(), vec![1], vec![0.25]),
            ("h".to_string(), vec![2], vec![1.5, -3.0]),
        ]
    );
}

#[test]
fn read_refuses_other_dtypes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ints.safetensors");
    write_file(
        &path,
        &safetensors_bytes(&[raw_tensor("i", "I32", &[1], vec![0; 4])], 0),
    );
    let error = read_f32_tensors(&path).unwrap_err();
    assert!(
        matches!(error, WeightsError::UnsupportedDType { .. }),
        "{error:?}"
    );
}

#[test]
fn bad_input_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.safetensors");
    let cases = [
        (
            vec![("a".to_string(), vec![2, 2], vec![1.0; 3])],
            "shape [2, 2] but 3 values",
        ),
        (
            vec![
                ("a".to_string(), vec![1], vec![1.0]),
                ("a".to_string(), vec![1], vec![2.0]),
            ],
            "appears twice",
        ),
        (vec![(String::new(), vec![1], vec![1.0])], "empty name"),
        (
            vec![("__metadata__".to_string(), vec![1], vec![1.0])],
            "reserved",
        ),
        (
            vec![("huge".to_string(), vec![usize::MAX, 2], vec![])],
            "but 0 values",
        ),
    ];
    for (tensors, expected) in cases {
        let error = write_f32_tensors(&path, &tensors).unwrap_err();
        assert!(
            matches!(error, WeightsError::InvalidTensorData { .. }),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(
            text.contains(expected) && text.contains("out.safetensors"),
            "{text}"
        );
        assert!(
            folder_entries(dir.path()).is_empty(),
            "nothing may be written"
        );
    }
}

#[test]
fn a_failed_write_leaves_the_previous_file_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.safetensors");
    write_f32_tensors(&path, &[("old".to_string(), vec![1], vec![1.0])]).unwrap();

    // A folder in the way of the rename: the temporary file is written, the rename fails.
    let blocked = dir.path().join("blocked");
    std::fs::create_dir(&blocked).unwrap();
    std::fs::write(blocked.join("keep"), b"x").unwrap();
    let error =
        write_f32_tensors(&blocked, &[("new".to_string(), vec![1], vec![2.0])]).unwrap_err();
    assert!(matches!(error, WeightsError::Write { .. }), "{error:?}");
    assert!(error.to_string().contains("blocked"), "{error}");
    // The cause is in the message and nowhere else, so a printed chain says it once.
    assert!(error.to_string().contains("os error"), "{error}");
    assert!(std::error::Error::source(&error).is_none(), "{error:?}");
    assert_eq!(
        folder_entries(dir.path()),
        ["blocked", "out.safetensors"],
        "temporary file left behind"
    );

    // Into a folder that does not exist: nothing is created.
    let error = write_f32_tensors(
        &dir.path().join("no_such_folder").join("x.safetensors"),
        &[("new".to_string(), vec![1], vec![2.0])],
    )
    .unwrap_err();
    assert!(matches!(error, WeightsError::Write { .. }), "{error:?}");

    let kept = Checkpoint::open(&path).unwrap();
    assert_eq!(kept.names(), ["old"]);
}

#[test]
fn overwriting_replaces_the_whole_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.safetensors");
    write_f32_tensors(&path, &[("big".to_string(), vec![1000], vec![1.0; 1000])]).unwrap();
    write_f32_tensors(&path, &[("small".to_string(), vec![1], vec![2.0])]).unwrap();
    assert_eq!(
        read_f32_tensors(&path).unwrap(),
        vec![("small".to_string(), vec![1], vec![2.0])]
    );
    assert_eq!(folder_entries(dir.path()), ["out.safetensors"]);
}

//! The dataset readers without a model: webdataset tars (samples grouped by key in order, the
//! image member by extension, sidecars, a sample without an image, a truncated tar, patterns)
//! and Parquet files (both layouts, keys, row groups, a null image), down to the bytes each
//! worker reads.

use parquet::data_type::{ByteArray, ByteArrayType};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vitrt_engine::pipeline::datasets::{ImageAt, RowGroupCache, SampleReader, SidecarReader};
use vitrt_engine::pipeline::{collect_inputs, collect_inputs_with, DatasetOptions, InputList};

fn write_tar(path: &Path, members: &[(&str, &[u8])]) {
    let mut tar = tar::Builder::new(std::fs::File::create(path).unwrap());
    for (name, bytes) in members {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, name, *bytes).unwrap();
    }
    tar.finish().unwrap();
}

/// Every input's image bytes as a worker reads them (or why not).
fn read_all(inputs: &InputList) -> Vec<Result<Vec<u8>, String>> {
    let groups = RowGroupCache::default();
    let mut reader = SampleReader::new(&inputs.shards, &groups, u64::MAX);
    (0..inputs.len())
        .map(|i| {
            let mut bytes = Vec::new();
            reader
                .read(inputs.sample(i).unwrap(), false, &mut bytes)
                .map(|()| bytes)
        })
        .collect()
}

fn keys(inputs: &InputList) -> Vec<String> {
    (0..inputs.len())
        .map(|i| inputs.sample(i).unwrap().key.clone())
        .collect()
}

#[test]
fn tar_members_are_grouped_by_key_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.tar");
    write_tar(
        &path,
        &[
            ("s/002.json", b"{\"x\": 1}"),
            ("s/002.JPG", b"jpeg of 002"),
            ("s/002.txt", b"caption"),
            ("s/001.png", b"png of 001"),
            ("s/001.webp", b"webp of 001"),
            ("caption-only.txt", b"nothing else"),
            ("noextension", b"ignored"),
            ("d.e/003.seg.png", b"a segmentation"),
            ("d.e/003.jpeg", b"jpeg of 003"),
        ],
    );
    let inputs = collect_inputs(std::slice::from_ref(&path), None).unwrap();
    // Tar order, not name order: webdataset's.
    assert_eq!(keys(&inputs), ["s/002", "s/001", "caption-only", "d.e/003"]);
    assert_eq!(inputs.paths, vec![path.clone(); 4]);
    assert_eq!(inputs.name(0), format!("{}/s/002", path.display()));
    let first = inputs.sample(0).unwrap();
    let mut sidecars = SidecarReader::new(&inputs.shards);
    assert_eq!(sidecars.read(first, "json").as_deref(), Some("{\"x\": 1}"));
    assert_eq!(sidecars.read(first, "txt").as_deref(), Some("caption"));
    assert_eq!(sidecars.read(inputs.sample(1).unwrap(), "txt"), None);
    assert_eq!(
        sidecars.read(inputs.sample(2).unwrap(), "txt").as_deref(),
        Some("nothing else")
    );
    let bytes = read_all(&inputs);
    assert_eq!(bytes[0].as_deref().unwrap(), b"jpeg of 002");
    // .png comes before .webp in the order of preference.
    assert_eq!(bytes[1].as_deref().unwrap(), b"png of 001");
    assert!(
        bytes[2].as_ref().unwrap_err().contains("no image member"),
        "{:?}",
        bytes[2]
    );
    // `seg.png` is not `png`.
    assert_eq!(bytes[3].as_deref().unwrap(), b"jpeg of 003");
    assert!(inputs.shards[0].problem.is_none());
}

#[test]
fn a_truncated_tar_keeps_its_whole_samples_and_says_how_far_it_was_read() {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole.tar");
    let big = vec![7u8; 3000];
    write_tar(
        &whole,
        &[("0.jpg", b"zero"), ("1.jpg", &big), ("2.jpg", b"two")],
    );
    let bytes = std::fs::read(&whole).unwrap();
    let cut = dir.path().join("cut.tar");
    // Two headers, the first member's block, and part of the second's data.
    std::fs::write(&cut, &bytes[..512 + 512 + 512 + 1000]).unwrap();
    let other = dir.path().join("other.tar");
    write_tar(&other, &[("9.png", b"nine")]);
    let inputs = collect_inputs(&[cut.clone(), other], None).unwrap();
    // Sample 0, then the record of where the reading stopped, then the next shard.
    assert_eq!(keys(&inputs), ["0", "", "9"]);
    let problem = inputs.shards[0].problem.clone().unwrap();
    assert!(
        problem.contains("read 1536 of its 2536 bytes, 1 whole samples"),
        "{problem}"
    );
    let read = read_all(&inputs);
    assert_eq!(read[0].as_deref().unwrap(), b"zero");
    assert!(read[1].as_ref().unwrap_err().contains("ends early"));
    assert_eq!(read[2].as_deref().unwrap(), b"nine");
}

#[test]
fn a_shard_that_is_not_there_is_one_failed_record() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = collect_inputs(&[dir.path().join("missing.tar")], None).unwrap();
    assert_eq!(inputs.len(), 1);
    assert!(matches!(
        inputs.sample(0).unwrap().image,
        ImageAt::Missing(_)
    ));
}

#[test]
fn brace_ranges_and_globs_expand_in_order() {
    let dir = tempfile::tempdir().unwrap();
    for i in [0, 1, 2, 10] {
        write_tar(&dir.path().join(format!("{i:03}.tar")), &[("k.jpg", b"x")]);
    }
    let root = dir.path().display();
    let inputs =
        collect_inputs(&[PathBuf::from(format!("{root}/{{000..002}}.tar"))], None).unwrap();
    let shards: Vec<String> = inputs
        .shards
        .iter()
        .map(|s| s.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(shards, ["000.tar", "001.tar", "002.tar"]);
    let inputs = collect_inputs(&[PathBuf::from(format!("{root}/0*.tar"))], None).unwrap();
    assert_eq!(inputs.shards.len(), 4);
    assert!(inputs.shards[3].path.ends_with("010.tar"));
    let error = collect_inputs(&[PathBuf::from(format!("{root}/x{{0..1}}-*.tar"))], None)
        .unwrap_err()
        .to_string();
    assert!(error.contains("matches no file"), "{error}");
}

/// A Parquet file in the Hugging Face `datasets` layout: `image` {bytes, path}, rows in
/// groups of `per_group`, `None` a null image.
fn write_hf_parquet(path: &Path, images: &[Option<&[u8]>], per_group: usize) {
    let schema = parse_message_type(
        "message schema {
            optional binary caption (STRING);
            optional group image { optional binary bytes; optional binary path (STRING); }
        }",
    )
    .unwrap();
    let mut writer = SerializedFileWriter::new(
        std::fs::File::create(path).unwrap(),
        Arc::new(schema),
        Arc::new(WriterProperties::builder().build()),
    )
    .unwrap();
    for chunk in images.chunks(per_group) {
        let mut group = writer.next_row_group().unwrap();
        let captions: Vec<ByteArray> = chunk.iter().map(|_| ByteArray::from("c")).collect();
        let ones = vec![1i16; chunk.len()];
        let defs: Vec<i16> = chunk
            .iter()
            .map(|b| if b.is_some() { 2 } else { 0 })
            .collect();
        let bytes: Vec<ByteArray> = chunk
            .iter()
            .flatten()
            .map(|b| ByteArray::from(b.to_vec()))
            .collect();
        let names: Vec<ByteArray> = chunk
            .iter()
            .flatten()
            .map(|_| ByteArray::from("x.png"))
            .collect();
        for (values, levels) in [(&captions, &ones), (&bytes, &defs), (&names, &defs)] {
            let mut column = group.next_column().unwrap().unwrap();
            column
                .typed::<ByteArrayType>()
                .write_batch(values, Some(levels), None)
                .unwrap();
            column.close().unwrap();
        }
        group.close().unwrap();
    }
    writer.close().unwrap();
}

#[test]
fn parquet_rows_are_read_by_row_group_with_null_images_as_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("train-0.parquet");
    let images: Vec<Option<&[u8]>> = vec![Some(b"a"), Some(b"b"), None, Some(b"d"), Some(b"e")];
    write_hf_parquet(&path, &images, 2);
    let inputs = collect_inputs(std::slice::from_ref(&path), None).unwrap();
    assert_eq!(
        keys(&inputs),
        [
            "train-0/0",
            "train-0/1",
            "train-0/2",
            "train-0/3",
            "train-0/4"
        ]
    );
    assert_eq!(
        inputs.sample(3).unwrap().image,
        ImageAt::Parquet { group: 1, row: 1 }
    );
    let read = read_all(&inputs);
    assert_eq!(read[0].as_deref().unwrap(), b"a");
    assert_eq!(read[1].as_deref().unwrap(), b"b");
    assert_eq!(read[2].as_ref().unwrap_err(), "the image is null");
    assert_eq!(read[3].as_deref().unwrap(), b"d");
    assert_eq!(read[4].as_deref().unwrap(), b"e");
    // Read again (a batch decoded again on the host) after every row was taken once.
    let groups = RowGroupCache::default();
    let mut reader = SampleReader::new(&inputs.shards, &groups, u64::MAX);
    let mut bytes = Vec::new();
    for i in 0..inputs.len() {
        let _ = reader.read(inputs.sample(i).unwrap(), false, &mut bytes);
    }
    for (i, want) in [(3, b"d"), (0, b"a"), (4, b"e")] {
        reader
            .read(inputs.sample(i).unwrap(), true, &mut bytes)
            .unwrap();
        assert_eq!(&bytes, want);
    }

    // The caption column is text, not images: naming it is refused, naming the struct works.
    let named = |column: &str| {
        collect_inputs_with(
            std::slice::from_ref(&path),
            None,
            &DatasetOptions {
                image_column: Some(column.to_string()),
            },
        )
        .unwrap()
    };
    let refused = named("caption");
    assert!(
        refused.shards[0]
            .problem
            .as_deref()
            .unwrap()
            .contains("--image-column caption: no such column"),
        "{:?}",
        refused.shards[0].problem
    );
    assert_eq!(read_all(&named("image"))[4].as_deref().unwrap(), b"e");
}

//! Dataset inputs and sharded, resumable output, end to end on the CPU with the demo model:
//! webdataset tar shards (by brace range; a sample without an image, a member that is no
//! image, a truncated tar) and Parquet files (the Hugging Face `datasets` and img2dataset
//! layouts, a null image) in, `embed --output-dir` out; each sample's embedding equals the one
//! of the same image as a file; a killed run (a shard pair deleted, a temporary file left
//! behind) resumed to the same bytes; other options refused.

mod common;

use common::*;
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::record::{ListAccessor, RowAccessor};
use parquet::schema::parser::parse_message_type;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn model() -> PathBuf {
    root().join("examples/digits-vit")
}

fn run(args: &[String], home: &Path) -> std::process::Output {
    // The command, then the model and device, then its own flags and inputs.
    let mut all: Vec<String> = vec![
        args[0].clone(),
        "--device".into(),
        "cpu".into(),
        "--model".into(),
        model().display().to_string(),
        "--quiet".into(),
    ];
    all.extend(args[1..].iter().cloned());
    vitrt_command(&all, home).output().expect("vitrt runs")
}

/// Appends a member to a tar.
fn member(tar: &mut tar::Builder<std::fs::File>, name: &str, bytes: &[u8]) {
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    tar.append_data(&mut header, name, bytes).unwrap();
}

/// Two shards of digits: `shard-0.tar` (samples 0000..0004, each with .json and .txt, and
/// `no-image` with a .txt alone) and `shard-1.tar` (samples 0005..0007, and `not-an-image`
/// whose .png is text), then `shard-2.tar`, a copy of shard-1 cut in its third member's data.
fn write_shards(dir: &Path) -> Vec<PathBuf> {
    let digits = digits();
    let mut paths = Vec::new();
    for shard in 0..2 {
        let path = dir.join(format!("shard-{shard}.tar"));
        let mut tar = tar::Builder::new(std::fs::File::create(&path).unwrap());
        let range = if shard == 0 { 0..5 } else { 5..8 };
        for i in range {
            let key = format!("{i:04}");
            if shard == 0 {
                member(
                    &mut tar,
                    &format!("{key}.json"),
                    format!("{{\"i\": {i}}}").as_bytes(),
                );
            }
            member(
                &mut tar,
                &format!("{key}.png"),
                &std::fs::read(&digits[i]).unwrap(),
            );
            if shard == 0 {
                member(
                    &mut tar,
                    &format!("{key}.txt"),
                    format!("digit {i}").as_bytes(),
                );
            }
        }
        if shard == 0 {
            member(&mut tar, "no-image.txt", b"a caption without its image");
        } else {
            member(&mut tar, "not-an-image.png", b"this is text");
        }
        tar.finish().unwrap();
        paths.push(path);
    }
    let whole = std::fs::read(&paths[1]).unwrap();
    // Headers of 512 bytes; the third member's data starts after two members.
    let cut = dir.join("shard-2.tar");
    let first = std::fs::read(&digits[5])
        .unwrap()
        .len()
        .next_multiple_of(512);
    let second = std::fs::read(&digits[6])
        .unwrap()
        .len()
        .next_multiple_of(512);
    std::fs::write(&cut, &whole[..512 + first + 512 + second + 512 + 100]).unwrap();
    paths.push(cut);
    paths
}

/// The embeddings of `images` as plain files, through `embed -o X.npy`.
fn file_embeddings(images: &[PathBuf], home: &Path) -> Vec<Vec<f32>> {
    let out = home.join("files.npy");
    let mut args = vec!["embed".to_string(), "-o".into(), out.display().to_string()];
    args.extend(images.iter().map(|p| p.display().to_string()));
    let o = run(&args, home);
    assert!(o.status.success(), "{}", stderr(&o));
    read_npy(&out)
}

fn read_npy(path: &Path) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
    let shape = header.split("'shape': (").nth(1).unwrap();
    let dims: Vec<usize> = shape
        .split(')')
        .next()
        .unwrap()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    let data: Vec<f32> = bytes[10 + header_len..]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(data.len(), dims[0] * dims[1]);
    if dims[1] == 0 {
        return vec![Vec::new(); dims[0]];
    }
    data.chunks(dims[1]).map(<[f32]>::to_vec).collect()
}

/// Per row of a metadata Parquet: key, source, error, json, txt.
type Meta = (
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
);

fn read_meta(path: &Path) -> Vec<Meta> {
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let text = |row: &parquet::record::Row, i: usize| row.get_string(i).ok().cloned();
    reader
        .get_row_iter(None)
        .unwrap()
        .map(|row| {
            let row = row.unwrap();
            (
                text(&row, 0).unwrap(),
                text(&row, 1).unwrap(),
                text(&row, 2),
                text(&row, 3),
                text(&row, 4),
            )
        })
        .collect()
}

/// Every file of `dir` by name, with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn embed_dir(out: &Path, inputs: &[String], extra: &[&str], home: &Path) -> std::process::Output {
    let mut args = vec![
        "embed".to_string(),
        "--output-dir".into(),
        out.display().to_string(),
        "--batch-size".into(),
        "3".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(inputs.iter().cloned());
    run(&args, home)
}

#[test]
fn tar_shards_embed_to_shards_and_resume_to_the_same_bytes() {
    let home = temp();
    let dir = temp();
    write_shards(dir.path());
    let pattern = format!("{}/shard-{{0..2}}.tar", dir.path().display());
    let out = dir.path().join("out");
    let o = embed_dir(&out, std::slice::from_ref(&pattern), &[], home.path());
    // Three samples fail (no image, not an image, the truncated tar's record): reported, the
    // run goes on, and the exit says so.
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("no-image"), "{err}");
    assert!(err.contains("the tar ends early"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let first = snapshot(&out);
    let names: Vec<&String> = first.keys().collect();
    assert_eq!(
        names,
        [
            ".vitrt.lock",
            "00000-shard-0.npy",
            "00000-shard-0.parquet",
            "00001-shard-1.npy",
            "00001-shard-1.parquet",
            "00002-shard-2.npy",
            "00002-shard-2.parquet",
            "manifest.json"
        ]
    );

    // Each sample's embedding is its image's as a file; failed rows are zeros.
    let digits = digits();
    let want = file_embeddings(&digits[..8], home.path());
    let rows0 = read_npy(&out.join("00000-shard-0.npy"));
    let meta0 = read_meta(&out.join("00000-shard-0.parquet"));
    assert_eq!(rows0.len(), 6);
    assert_eq!(&rows0[..5], &want[..5]);
    assert!(rows0[5].iter().all(|&v| v == 0.0));
    let keys: Vec<&str> = meta0.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(keys, ["0000", "0001", "0002", "0003", "0004", "no-image"]);
    assert!(meta0[0].1.ends_with("shard-0.tar"), "{:?}", meta0[0]);
    assert_eq!(meta0[2].3.as_deref(), Some("{\"i\": 2}"));
    assert_eq!(meta0[2].4.as_deref(), Some("digit 2"));
    assert_eq!(meta0[2].2, None);
    assert!(
        meta0[5].2.as_deref().unwrap().contains("no image member"),
        "{:?}",
        meta0[5]
    );
    let rows1 = read_npy(&out.join("00001-shard-1.npy"));
    let meta1 = read_meta(&out.join("00001-shard-1.parquet"));
    assert_eq!(&rows1[..3], &want[5..8]);
    assert_eq!(meta1[3].0, "not-an-image");
    assert!(meta1[3].2.is_some(), "{:?}", meta1[3]);
    // The truncated copy: its two whole samples, then the record of where it stopped.
    let rows2 = read_npy(&out.join("00002-shard-2.npy"));
    let meta2 = read_meta(&out.join("00002-shard-2.parquet"));
    assert_eq!(&rows2[..2], &want[5..7]);
    assert_eq!(meta2.len(), 3);
    assert!(
        meta2[2].2.as_deref().unwrap().contains("2 whole samples"),
        "{:?}",
        meta2[2]
    );

    // Nothing to do the second time.
    let o = embed_dir(&out, std::slice::from_ref(&pattern), &[], home.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing to do"), "{}", stderr(&o));
    assert_eq!(snapshot(&out), first);

    // A killed run: one shard pair gone, another shard's .npy gone with a temporary file
    // left behind. The same command redoes those two alone, to the same bytes.
    std::fs::remove_file(out.join("00000-shard-0.npy")).unwrap();
    std::fs::remove_file(out.join("00000-shard-0.parquet")).unwrap();
    std::fs::remove_file(out.join("00002-shard-2.npy")).unwrap();
    std::fs::write(out.join(".00002-shard-2.npy.tmp"), b"half a file").unwrap();
    let o = embed_dir(&out, std::slice::from_ref(&pattern), &[], home.path());
    let err = stderr(&o);
    assert!(err.contains("1 of 3 shards already written"), "{err}");
    assert!(err.contains("wrote 2 shards"), "{err}");
    let mut again = snapshot(&out);
    // The temporary file was written over and renamed: none is left.
    assert!(
        again.keys().all(|n| !n.ends_with(".tmp")),
        "{:?}",
        again.keys()
    );
    again.retain(|n, _| !n.ends_with(".tmp"));
    assert_eq!(again, first);

    // Other options are refused, naming them.
    let o = embed_dir(
        &out,
        std::slice::from_ref(&pattern),
        &["--normalize"],
        home.path(),
    );
    assert_clean_failure(&o, "--normalize (false then, true now)");
    let o = embed_dir(
        &out,
        &[format!("{}/shard-{{0..1}}.tar", dir.path().display())],
        &[],
        home.path(),
    );
    assert_clean_failure(&o, "the inputs");
}

#[test]
fn a_pattern_that_matches_nothing_and_a_lone_shard_size_are_errors() {
    let home = temp();
    let dir = temp();
    let o = run(
        &[
            "embed".to_string(),
            "--output-dir".into(),
            dir.path().join("out").display().to_string(),
            format!("{}/none-*.tar", dir.path().display()),
        ],
        home.path(),
    );
    assert_clean_failure(&o, "matches no file");
    let o = run(
        &[
            "embed".to_string(),
            "--shard-size".into(),
            "3".into(),
            "-o".into(),
            dir.path().join("x.jsonl").display().to_string(),
            digits()[0].display().to_string(),
        ],
        home.path(),
    );
    assert_clean_failure(&o, "--shard-size is for --output-dir");
}

/// A Parquet file of `images` (None: a null image) in row groups of `per_group` rows: the
/// Hugging Face `datasets` layout (`image` struct of `bytes` and `path`, and a `label`), or
/// img2dataset's (`key`, a binary `jpg` column).
fn write_parquet(path: &Path, images: &[Option<Vec<u8>>], per_group: usize, hf: bool) {
    let schema = if hf {
        "message schema {
            optional group image { optional binary bytes; optional binary path (STRING); }
            optional int64 label;
        }"
    } else {
        "message schema {
            optional binary key (STRING);
            optional binary caption (STRING);
            optional binary jpg;
        }"
    };
    let schema = Arc::new(parse_message_type(schema).unwrap());
    let mut writer = SerializedFileWriter::new(
        std::fs::File::create(path).unwrap(),
        schema,
        Arc::new(WriterProperties::builder().build()),
    )
    .unwrap();
    for (g, chunk) in images.chunks(per_group).enumerate() {
        let mut group = writer.next_row_group().unwrap();
        let present: Vec<ByteArray> = chunk
            .iter()
            .flatten()
            .map(|b| ByteArray::from(b.clone()))
            .collect();
        let max = if hf { 2 } else { 1 };
        let defs: Vec<i16> = chunk
            .iter()
            .map(|b| if b.is_some() { max } else { 0 })
            .collect();
        let texts = |f: &dyn Fn(usize) -> String| -> Vec<ByteArray> {
            (0..chunk.len())
                .map(|i| ByteArray::from(f(g * per_group + i).as_bytes().to_vec()))
                .collect()
        };
        let all = vec![1i16; chunk.len()];
        if hf {
            let mut c = group.next_column().unwrap().unwrap();
            c.typed::<ByteArrayType>()
                .write_batch(&present, Some(&defs), None)
                .unwrap();
            c.close().unwrap();
            let names: Vec<ByteArray> = chunk
                .iter()
                .enumerate()
                .filter(|(_, b)| b.is_some())
                .map(|(i, _)| ByteArray::from(format!("{i}.png").as_bytes().to_vec()))
                .collect();
            let mut c = group.next_column().unwrap().unwrap();
            c.typed::<ByteArrayType>()
                .write_batch(&names, Some(&defs), None)
                .unwrap();
            c.close().unwrap();
            let labels: Vec<i64> = (0..chunk.len() as i64).collect();
            let mut c = group.next_column().unwrap().unwrap();
            c.typed::<Int64Type>()
                .write_batch(&labels, Some(&all), None)
                .unwrap();
            c.close().unwrap();
        } else {
            for values in [
                texts(&|r| format!("k{r:03}")),
                texts(&|r| format!("caption {r}")),
            ] {
                let mut c = group.next_column().unwrap().unwrap();
                c.typed::<ByteArrayType>()
                    .write_batch(&values, Some(&all), None)
                    .unwrap();
                c.close().unwrap();
            }
            let mut c = group.next_column().unwrap().unwrap();
            c.typed::<ByteArrayType>()
                .write_batch(&present, Some(&defs), None)
                .unwrap();
            c.close().unwrap();
        }
        group.close().unwrap();
    }
    writer.close().unwrap();
}

#[test]
fn parquet_files_of_both_layouts_embed_by_row_with_null_images_as_errors() {
    let home = temp();
    let dir = temp();
    let digits = digits();
    let images: Vec<Option<Vec<u8>>> = (0..7)
        .map(|i| (i != 4).then(|| std::fs::read(&digits[i]).unwrap()))
        .collect();
    let hf = dir.path().join("train-00000.parquet");
    write_parquet(&hf, &images, 3, true);
    let img2dataset = dir.path().join("part.parquet");
    write_parquet(&img2dataset, &images[..3], 2, false);
    let want = file_embeddings(&digits[..7], home.path());

    let out = dir.path().join("out");
    let o = embed_dir(
        &out,
        &[hf.display().to_string(), img2dataset.display().to_string()],
        &[],
        home.path(),
    );
    assert!(!o.status.success(), "the null image fails the run");
    assert!(stderr(&o).contains("the image is null"), "{}", stderr(&o));
    let rows = read_npy(&out.join("00000-train-00000.npy"));
    let meta = read_meta(&out.join("00000-train-00000.parquet"));
    let keys: Vec<&str> = meta.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(
        keys,
        (0..7)
            .map(|r| format!("train-00000/{r}"))
            .collect::<Vec<_>>()
    );
    for (r, row) in rows.iter().enumerate() {
        if r == 4 {
            assert!(
                meta[4].2.as_deref().unwrap().contains("null"),
                "{:?}",
                meta[4]
            );
            assert!(row.iter().all(|&v| v == 0.0));
        } else {
            assert_eq!(row, &want[r], "row {r}");
            assert_eq!(meta[r].2, None);
        }
    }
    let rows = read_npy(&out.join("00001-part.npy"));
    let meta = read_meta(&out.join("00001-part.parquet"));
    let keys: Vec<&str> = meta.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(keys, ["k000", "k001", "k002"]);
    assert_eq!(&rows[..], &want[..3]);

    // A column that holds no images is refused by name, and the run goes on without it.
    let o = run(
        &[
            "embed".to_string(),
            "-o".into(),
            dir.path().join("x.jsonl").display().to_string(),
            "--image-column".into(),
            "caption".into(),
            img2dataset.display().to_string(),
        ],
        home.path(),
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--image-column caption: no such column of image bytes"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn classify_names_samples_by_shard_and_key() {
    let home = temp();
    let dir = temp();
    let shards = write_shards(dir.path());
    let o = run(
        &[
            "classify".to_string(),
            "--format".into(),
            "jsonl".into(),
            shards[0].display().to_string(),
        ],
        home.path(),
    );
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 6, "{text}");
    let shown = shards[0].display().to_string();
    assert_eq!(lines[0]["image"], format!("{shown}/0000"));
    assert_eq!(lines[5]["image"], format!("{shown}/no-image"));
    assert!(lines[5]["error"]
        .as_str()
        .unwrap()
        .contains("no image member"));

    // With --output-dir: a Parquet per shard, the top-k labels and probabilities per row,
    // as the JSON Lines give them; empty lists and the error for the failed sample.
    let out = dir.path().join("labels");
    let o = run(
        &[
            "classify".to_string(),
            "--output-dir".into(),
            out.display().to_string(),
            shards[0].display().to_string(),
        ],
        home.path(),
    );
    assert!(
        !o.status.success(),
        "the sample without an image fails the run"
    );
    let reader =
        SerializedFileReader::new(std::fs::File::open(out.join("00000-shard-0.parquet")).unwrap())
            .unwrap();
    let rows: Vec<parquet::record::Row> = reader
        .get_row_iter(None)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), 6);
    for (row, line) in rows.iter().zip(&lines) {
        let labels = row.get_list(5).unwrap();
        let probabilities = row.get_list(6).unwrap();
        let want = line["predictions"].as_array().cloned().unwrap_or_default();
        assert_eq!(labels.len(), want.len(), "{line}");
        for (k, prediction) in want.iter().enumerate() {
            assert_eq!(labels.get_string(k).unwrap(), &prediction["label"]);
            let p = probabilities.get_float(k).unwrap();
            assert!((f64::from(p) - prediction["probability"].as_f64().unwrap()).abs() < 1e-6);
        }
    }
    assert!(rows[5].get_string(2).unwrap().contains("no image member"));
}

#[test]
fn zero_shot_writes_label_probabilities_per_shard_and_refuses_other_labels() {
    let home = temp();
    let dir = temp();
    let images: Vec<Option<Vec<u8>>> = ["cat.jpg", "coffee.png", "astronaut.webp"]
        .iter()
        .map(|name| Some(std::fs::read(root().join("tests/fixtures/images").join(name)).unwrap()))
        .collect();
    let shard = dir.path().join("photos.parquet");
    write_parquet(&shard, &images, 2, false);
    let out = dir.path().join("out");
    let zero_shot = |labels: &str, extra: &[&str]| {
        let clip = fixture("clip-zero-shot");
        let mut args = vec![
            "zero-shot",
            "--device",
            "cpu",
            "--model",
            clip.to_str().unwrap(),
            "--labels",
            labels,
            "--top-k",
            "2",
        ];
        args.extend_from_slice(extra);
        args.push(shard.to_str().unwrap());
        vitrt(&args, home.path())
    };
    let o = zero_shot("cat,dog,cup of coffee", &["--format", "jsonl"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let o = zero_shot(
        "cat,dog,cup of coffee",
        &["--output-dir", out.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let reader =
        SerializedFileReader::new(std::fs::File::open(out.join("00000-photos.parquet")).unwrap())
            .unwrap();
    let rows: Vec<parquet::record::Row> = reader
        .get_row_iter(None)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), 3);
    for (row, line) in rows.iter().zip(&lines) {
        assert_eq!(
            line["image"],
            format!("{}/{}", shard.display(), row.get_string(0).unwrap())
        );
        let labels = row.get_list(5).unwrap();
        let probabilities = row.get_list(6).unwrap();
        assert_eq!(labels.len(), 2);
        for k in 0..2 {
            let want = &line["predictions"][k];
            assert_eq!(labels.get_string(k).unwrap(), &want["label"]);
            let p = f64::from(probabilities.get_float(k).unwrap());
            assert!((p - want["probability"].as_f64().unwrap()).abs() < 1e-6);
        }
    }
    let manifest = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    assert!(
        manifest.contains("\"command\": \"zero-shot\""),
        "{manifest}"
    );
    // Done: the same command again loads no model.
    let o = zero_shot(
        "cat,dog,cup of coffee",
        &["--output-dir", out.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing to do"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("encoded"), "{}", stderr(&o));
    let o = zero_shot("cat,dog", &["--output-dir", out.to_str().unwrap()]);
    assert_clean_failure(
        &o,
        r#"--labels (["cat","dog","cup of coffee"] then, ["cat","dog"] now)"#,
    );
}

/// The SigLIP 2 NaFlex fixture with a pooling head and a text tower (patch 4, at most 24
/// patches), and its four images of different aspect ratios.
fn naflex() -> (PathBuf, Vec<PathBuf>) {
    let dir = root().join("tests/fixtures/naflex/siglip2-naflex-zero-shot");
    let images = (0..4)
        .map(|i| dir.join(format!("images/{i}.png")))
        .collect();
    (dir, images)
}

/// `vitrt COMMAND` on the NaFlex fixture on the CPU, then `args`.
fn naflex_run(command: &str, args: &[String], home: &Path) -> std::process::Output {
    let mut all: Vec<String> = vec![
        command.into(),
        "--device".into(),
        "cpu".into(),
        "--model".into(),
        naflex().0.display().to_string(),
        "--quiet".into(),
    ];
    all.extend(args.iter().cloned());
    vitrt_command(&all, home).output().expect("vitrt runs")
}

/// Rows of a JSON Lines output of `vitrt embed`: each image's embedding, None for an error.
fn jsonl_rows(path: &Path) -> Vec<Option<Vec<f32>>> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            v["embedding"]
                .as_array()
                .map(|values| values.iter().map(|x| x.as_f64().unwrap() as f32).collect())
        })
        .collect()
}

#[test]
fn naflex_embeds_files_and_tar_samples_to_shards_and_resumes_to_the_same_bytes() {
    let home = temp();
    let dir = temp();
    let (_, images) = naflex();
    // Files: the four images, a file that is no image among them, then two digits.
    let broken = dir.path().join("broken.png");
    std::fs::write(&broken, b"this is text").unwrap();
    let digits = digits();
    let mut files = images.clone();
    files.insert(2, broken.clone());
    files.extend(digits[..2].iter().cloned());
    let files: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();

    // The embeddings as `vitrt embed -o X.jsonl` writes them, one run over every file.
    let plain = dir.path().join("plain.jsonl");
    let mut args = vec!["-o".to_string(), plain.display().to_string()];
    args.extend(files.iter().cloned());
    let o = naflex_run("embed", &args, home.path());
    assert!(!o.status.success(), "the broken file fails the run");
    let want = jsonl_rows(&plain);
    assert_eq!(want.len(), 7);
    assert!(want[2].is_none() && want.iter().filter(|r| r.is_none()).count() == 1);

    let out = dir.path().join("out");
    let sharded = |extra: &[&str]| {
        let mut args = vec![
            "--output-dir".to_string(),
            out.display().to_string(),
            "--shard-size".into(),
            "3".into(),
            "--batch-size".into(),
            "2".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(files.iter().cloned());
        naflex_run("embed", &args, home.path())
    };
    let o = sharded(&[]);
    // The broken file is reported, the others are embedded, and the exit says so.
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("broken.png"), "{err}");
    assert!(err.contains("1 of 7 images could not be embedded"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let first = snapshot(&out);
    let names: Vec<&String> = first.keys().collect();
    assert_eq!(
        names,
        [
            ".vitrt.lock",
            "00000-files.npy",
            "00000-files.parquet",
            "00001-files.npy",
            "00001-files.parquet",
            "00002-files.npy",
            "00002-files.parquet",
            "manifest.json"
        ]
    );
    let rows: Vec<Vec<f32>> = ["00000", "00001", "00002"]
        .iter()
        .flat_map(|stem| read_npy(&out.join(format!("{stem}-files.npy"))))
        .collect();
    assert_eq!(rows.len(), 7);
    for (k, (row, want)) in rows.iter().zip(&want).enumerate() {
        match want {
            Some(want) => {
                assert_eq!(row.len(), want.len(), "row {k}");
                for (a, b) in row.iter().zip(want) {
                    assert!(
                        (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                        "row {k}: {a} vs {b}"
                    );
                }
            }
            None => assert!(
                row.iter().all(|&v| v == 0.0),
                "row {k}: a failed row is zeros"
            ),
        }
    }
    let meta = read_meta(&out.join("00000-files.parquet"));
    assert_eq!(meta[2].0, broken.display().to_string());
    assert!(meta[2].2.is_some(), "{:?}", meta[2]);
    assert!(meta[0].2.is_none() && meta[1].2.is_none(), "{meta:?}");
    let manifest = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    assert!(manifest.contains("\"command\": \"embed\""), "{manifest}");

    // Nothing to do the second time; a killed run (a shard pair gone) is redone alone, to
    // the same bytes.
    let o = sharded(&[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing to do"), "{}", stderr(&o));
    std::fs::remove_file(out.join("00001-files.npy")).unwrap();
    std::fs::remove_file(out.join("00001-files.parquet")).unwrap();
    let o = sharded(&[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("2 of 3 shards already written"), "{err}");
    assert!(err.contains("wrote 1 shards"), "{err}");
    assert_eq!(snapshot(&out), first);
    // Other options are refused, naming them.
    let o = sharded(&["--pool", "mean"]);
    assert_clean_failure(&o, "--pool (default then, mean now)");

    // The same images as samples of a tar shard: the same embeddings.
    let tar_path = dir.path().join("naflex.tar");
    let mut tar = tar::Builder::new(std::fs::File::create(&tar_path).unwrap());
    for (i, image) in images.iter().enumerate() {
        member(
            &mut tar,
            &format!("{i:04}.png"),
            &std::fs::read(image).unwrap(),
        );
    }
    tar.finish().unwrap();
    let from_tar = dir.path().join("tar-out");
    let o = naflex_run(
        "embed",
        &[
            "--output-dir".into(),
            from_tar.display().to_string(),
            tar_path.display().to_string(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let tar_rows = read_npy(&from_tar.join("00000-naflex.npy"));
    let file_rows: Vec<&Vec<f32>> = want.iter().flatten().take(4).collect();
    assert_eq!(tar_rows.len(), 4);
    for (k, (row, want)) in tar_rows.iter().zip(file_rows).enumerate() {
        for (a, b) in row.iter().zip(want) {
            assert!(
                (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                "sample {k}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn naflex_zero_shot_writes_label_probabilities_per_shard() {
    let home = temp();
    let dir = temp();
    let (_, images) = naflex();
    let broken = dir.path().join("broken.png");
    std::fs::write(&broken, b"this is text").unwrap();
    let mut files: Vec<String> = images.iter().map(|p| p.display().to_string()).collect();
    files.push(broken.display().to_string());
    let labels = [
        "--labels".to_string(),
        "a photo of a cat.,a photo of a dog.,a photo of a bird.".into(),
        "--template".into(),
        "{}".into(),
        "--top-k".into(),
        "2".into(),
    ];
    let mut args = labels.to_vec();
    args.extend(["--format".to_string(), "jsonl".into()]);
    args.extend(files.iter().cloned());
    let o = naflex_run("zero-shot", &args, home.path());
    assert!(!o.status.success(), "the broken file fails the run");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5);

    let out = dir.path().join("out");
    let mut args = labels.to_vec();
    args.extend(["--output-dir".to_string(), out.display().to_string()]);
    args.extend(files.iter().cloned());
    let o = naflex_run("zero-shot", &args, home.path());
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("broken.png"), "{err}");
    assert!(
        err.contains("1 of 5 images could not be classified"),
        "{err}"
    );
    let reader =
        SerializedFileReader::new(std::fs::File::open(out.join("00000-files.parquet")).unwrap())
            .unwrap();
    let rows: Vec<parquet::record::Row> = reader
        .get_row_iter(None)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), 5);
    for (row, line) in rows.iter().zip(&lines) {
        assert_eq!(line["image"], row.get_string(0).unwrap().as_str());
        let labels = row.get_list(5).unwrap();
        let probabilities = row.get_list(6).unwrap();
        let want = line["predictions"].as_array().cloned().unwrap_or_default();
        assert_eq!(labels.len(), want.len(), "{line}");
        for (k, prediction) in want.iter().enumerate() {
            assert_eq!(labels.get_string(k).unwrap(), &prediction["label"]);
            let p = f64::from(probabilities.get_float(k).unwrap());
            assert!((p - prediction["probability"].as_f64().unwrap()).abs() < 1e-6);
        }
    }
    assert_eq!(
        rows.iter()
            .filter(|r| r.get_list(5).unwrap().len() == 2)
            .count(),
        4
    );
    assert!(rows[4].get_string(2).is_ok(), "the broken file's error");
    // Done: the same command again loads no model.
    let o = naflex_run("zero-shot", &args, home.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing to do"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("encoded"), "{}", stderr(&o));
}

/// `classify --output-dir` with a checkpoint that has no classifier is refused after the
/// directory was opened (the model is loaded after it): the run takes back what it wrote, so
/// the directory is not left holding a manifest of options that wrote no result.
#[test]
fn classify_into_a_directory_with_a_model_without_a_classifier_leaves_nothing() {
    let home = temp();
    let dir = temp();
    let out = dir.path().join("out");
    let image = root().join("tests/fixtures/images").join("cat.jpg");
    let args = [
        "classify".to_string(),
        "--device".into(),
        "cpu".into(),
        "--model".into(),
        fixture("deit-model-pooler").display().to_string(),
        "--quiet".into(),
        "--output-dir".into(),
        out.display().to_string(),
        image.display().to_string(),
    ];
    let o = vitrt_command(&args, home.path())
        .output()
        .expect("vitrt runs");
    assert_clean_failure(&o, "without a classification head");
    assert!(
        !out.exists(),
        "left behind: {:?}",
        std::fs::read_dir(&out).map(|d| d.count())
    );
    // The corrected command then runs into the same directory.
    let o = run(
        &[
            "classify".to_string(),
            "--output-dir".into(),
            out.display().to_string(),
            image.display().to_string(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.join("manifest.json").is_file());
}

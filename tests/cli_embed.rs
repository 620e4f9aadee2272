//! `vitrt embed` end to end on the CPU: each family's default vector equals what the library
//! computes for the same images, in every output format; `--normalize`; a broken image among
//! good ones; pools a checkpoint lacks; output paths refused before any work.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use vitrt_model::preprocess::{preprocess_file, PreprocessConfig};
use vitrt_model::{Output, OutputSet, Runner, VisionModel};
use vitrt_runtime::backend::Device;
use vitrt_runtime::passes::Fusion;
use vitrt_runtime::DType;

const TOLERANCE: f32 = 1e-5;

fn image(name: &str) -> PathBuf {
    root().join("tests/fixtures/images").join(name)
}

fn two_images() -> Vec<PathBuf> {
    vec![image("cat.jpg"), image("coffee.png")]
}

/// The embeddings the library gives `images` ([N, D] rows): the preprocessing classify uses
/// for a checkpoint without preprocessor_config.json, then a CPU runner outputting `output`.
fn library_embeddings(model_dir: &Path, images: &[PathBuf], output: Output) -> Vec<Vec<f32>> {
    assert!(
        !model_dir.join("preprocessor_config.json").exists(),
        "the reference assumes the default preprocessing"
    );
    let model = VisionModel::load(model_dir).unwrap();
    let (h, w) = model.input_size();
    let pre = PreprocessConfig::hf_default_sized(h, w, model.config.num_channels);
    let backend = vitrt_runtime::backend::open(Device::Cpu, DType::F32).unwrap();
    let mut runner = Runner::new(model, backend, Fusion::ALL);
    runner.set_outputs(OutputSet::of(&[output]));
    let pixels: Vec<f32> = images
        .iter()
        .flat_map(|p| preprocess_file(p, &pre).unwrap())
        .collect();
    let outputs = runner.run(&pixels, images.len(), false).unwrap();
    let tensor = outputs
        .into_iter()
        .find(|t| t.name == output.name())
        .unwrap();
    assert_eq!(tensor.shape.len(), 2, "{:?}", tensor.shape);
    assert_eq!(tensor.shape[0], images.len());
    tensor
        .data
        .chunks(tensor.shape[1])
        .map(<[f32]>::to_vec)
        .collect()
}

fn unit(row: &[f32]) -> Vec<f32> {
    let norm = row
        .iter()
        .map(|&v| f64::from(v) * f64::from(v))
        .sum::<f64>()
        .sqrt();
    row.iter().map(|&v| (f64::from(v) / norm) as f32).collect()
}

fn assert_rows_close(ours: &[Vec<f32>], want: &[Vec<f32>], what: &str) {
    assert_eq!(ours.len(), want.len(), "{what}: rows");
    for (i, (a, b)) in ours.iter().zip(want).enumerate() {
        assert_eq!(a.len(), b.len(), "{what}: row {i} length");
        for (j, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= TOLERANCE,
                "{what}: row {i} [{j}]: {x} vs the library's {y}"
            );
        }
    }
}

/// Runs `vitrt embed --device cpu --model MODEL EXTRA... IMAGES...`.
fn embed(model: &Path, extra: &[&str], images: &[PathBuf], home: &Path) -> std::process::Output {
    let mut args: Vec<String> = vec![
        "embed".into(),
        "--device".into(),
        "cpu".into(),
        "--model".into(),
        model.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(images.iter().map(|p| p.display().to_string()));
    vitrt_command(&args, home).output().expect("vitrt runs")
}

/// The safetensors file: its rows, and its metadata.
fn read_safetensors(path: &Path) -> (Vec<Vec<f32>>, std::collections::HashMap<String, String>) {
    let tensors = vitrt_weights::read_f32_tensors(path).unwrap();
    assert_eq!(tensors.len(), 1, "one tensor");
    let (name, shape, data) = &tensors[0];
    assert_eq!(name, "embeddings");
    assert_eq!(shape.len(), 2, "{shape:?}");
    let rows = data
        .chunks(shape[1])
        .map(<[f32]>::to_vec)
        .collect::<Vec<_>>();
    assert_eq!(rows.len(), shape[0]);
    let bytes = std::fs::read(path).unwrap();
    let (_, metadata) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    (rows, metadata.metadata().clone().unwrap_or_default())
}

/// The NPY file's rows, checking its header as numpy reads it.
fn read_npy(path: &Path) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00", "magic and version 1.0");
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    assert_eq!((10 + header_len) % 16, 0, "the data is aligned");
    let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
    assert!(header.ends_with('\n'), "{header:?}");
    assert!(header.contains("'descr': '<f4'"), "{header}");
    assert!(header.contains("'fortran_order': False"), "{header}");
    let shape = header
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap();
    let dims: Vec<usize> = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(dims.len(), 2, "{header}");
    let data: Vec<f32> = bytes[10 + header_len..]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(data.len(), dims[0] * dims[1], "{header}");
    data.chunks(dims[1]).map(<[f32]>::to_vec).collect()
}

/// JSON Lines: per line, the image and its embedding or its error.
fn read_jsonl(text: &[u8]) -> Vec<(String, Result<Vec<f32>, String>)> {
    std::str::from_utf8(text)
        .unwrap()
        .lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            let image = value["image"].as_str().unwrap().to_string();
            let outcome = match value.get("embedding") {
                Some(e) => Ok(e
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap() as f32)
                    .collect()),
                None => Err(value["error"].as_str().unwrap().to_string()),
            };
            (image, outcome)
        })
        .collect()
}

fn display(paths: &[PathBuf]) -> Vec<String> {
    paths.iter().map(|p| p.display().to_string()).collect()
}

/// Every family's default vector, in every format, equals the library's for the same
/// images; `--normalize` gives the library's rows scaled to unit length.
#[test]
fn embeddings_equal_the_library_in_every_format() {
    let dir = temp();
    let images = two_images();
    for (fixture_name, pool, output) in [
        ("clip-vision-projection", "projected", Output::ImageEmbeds),
        ("siglip-vision-head", "projected", Output::ImageEmbeds),
        ("dinov2-registers-swiglu", "pooler", Output::PoolerOutput),
        ("tiny-gelu", "cls", Output::ClassToken),
    ] {
        let model = fixture(fixture_name);
        let want = library_embeddings(&model, &images, output);
        let what = |format: &str| format!("{fixture_name} {format}");

        let st = dir.path().join(format!("{fixture_name}.safetensors"));
        let o = embed(
            &model,
            &["--output", st.to_str().unwrap()],
            &images,
            dir.path(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let (rows, metadata) = read_safetensors(&st);
        assert_rows_close(&rows, &want, &what("safetensors"));
        assert_eq!(metadata["pool"], pool, "{fixture_name}: the default pool");
        assert_eq!(metadata["normalized"], "false");
        assert_eq!(metadata["model"], model.display().to_string());
        let listed: Vec<String> = serde_json::from_str(&metadata["images"]).unwrap();
        assert_eq!(listed, display(&images));

        let npy = dir.path().join(format!("{fixture_name}.npy"));
        let o = embed(
            &model,
            &["--output", npy.to_str().unwrap()],
            &images,
            dir.path(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        assert_rows_close(&read_npy(&npy), &want, &what("npy"));
        let sidecar =
            std::fs::read_to_string(dir.path().join(format!("{fixture_name}.npy.images.txt")))
                .unwrap();
        assert_eq!(
            sidecar.lines().collect::<Vec<_>>(),
            display(&images),
            "{fixture_name}: the paths file"
        );

        // JSON Lines on stdout, normalised.
        let o = embed(
            &model,
            &["--output", "-", "--normalize", "--pool", pool],
            &images,
            dir.path(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let lines = read_jsonl(&o.stdout);
        let names: Vec<String> = lines.iter().map(|(image, _)| image.clone()).collect();
        assert_eq!(names, display(&images));
        let rows: Vec<Vec<f32>> = lines
            .into_iter()
            .map(|(image, outcome)| outcome.unwrap_or_else(|e| panic!("{image}: {e}")))
            .collect();
        for row in &rows {
            let norm = row
                .iter()
                .map(|&v| f64::from(v).powi(2))
                .sum::<f64>()
                .sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "{fixture_name}: norm {norm}");
        }
        let want_unit: Vec<Vec<f32>> = want.iter().map(|r| unit(r)).collect();
        assert_rows_close(&rows, &want_unit, &what("jsonl --normalize"));
    }
}

/// A broken image between two good ones: reported on stderr (and in JSON Lines), the others
/// embedded as the library embeds them, exit 1 with the count.
#[test]
fn a_broken_image_is_reported_and_the_rest_embedded() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let broken = dir.path().join("broken.png");
    std::fs::write(&broken, b"\x89PNG\r\n\x1a\nnot really").unwrap();
    let good = two_images();
    let images = vec![good[0].clone(), broken.clone(), good[1].clone()];
    let want = library_embeddings(&model, &good, Output::ClassToken);

    let jsonl = dir.path().join("out.jsonl");
    let o = embed(
        &model,
        &["--output", jsonl.to_str().unwrap(), "--batch-size", "3"],
        &images,
        dir.path(),
    );
    assert_clean_failure(&o, "1 of 3 images could not be embedded");
    assert!(stderr(&o).contains("broken.png"), "{}", stderr(&o));
    let lines = read_jsonl(&std::fs::read(&jsonl).unwrap());
    assert_eq!(
        lines.iter().map(|(i, _)| i.clone()).collect::<Vec<_>>(),
        display(&images)
    );
    let error = lines[1].1.as_ref().unwrap_err();
    assert!(error.contains("broken.png"), "{error}");
    let rows = [&lines[0].1, &lines[2].1].map(|r| r.clone().unwrap());
    assert_rows_close(&rows, &want, "jsonl around a broken image");

    for name in ["out.safetensors", "out.npy"] {
        let path = dir.path().join(name);
        let o = embed(
            &model,
            &["--output", path.to_str().unwrap(), "--batch-size", "2"],
            &images,
            dir.path(),
        );
        assert_clean_failure(&o, "1 of 3 images could not be embedded");
        if name.ends_with(".npy") {
            assert_rows_close(&read_npy(&path), &want, name);
            let listed = std::fs::read_to_string(dir.path().join("out.npy.images.txt")).unwrap();
            assert_eq!(listed.lines().collect::<Vec<_>>(), display(&good));
        } else {
            let (rows, metadata) = read_safetensors(&path);
            assert_rows_close(&rows, &want, name);
            let listed: Vec<String> = serde_json::from_str(&metadata["images"]).unwrap();
            assert_eq!(listed, display(&good));
        }
    }
}

/// A pool the checkpoint lacks is an error naming what it has.
#[test]
fn an_unavailable_pool_is_a_clear_error() {
    let dir = temp();
    let out = dir.path().join("out.safetensors");
    for (fixture_name, pool, needle) in [
        (
            "tiny-gelu",
            "projected",
            "has no image_embeds; it has --pool cls, mean",
        ),
        (
            "tiny-gelu",
            "pooler",
            "has no pooler_output; it has --pool cls, mean",
        ),
        (
            "dinov2-registers-swiglu",
            "projected",
            "has no image_embeds; it has --pool pooler, cls, mean",
        ),
    ] {
        let o = embed(
            &fixture(fixture_name),
            &["--pool", pool, "--output", out.to_str().unwrap()],
            &two_images(),
            dir.path(),
        );
        assert_clean_failure(&o, needle);
        assert!(!out.exists(), "nothing written");
    }
}

/// Output paths that cannot be written are refused before the model is even looked for (the
/// model named here does not exist).
#[test]
fn a_bad_output_path_fails_before_any_work() {
    let dir = temp();
    let home = temp();
    let no_model = dir.path().join("no-such-model");
    let folder = dir.path().join("folder.safetensors");
    std::fs::create_dir(&folder).unwrap();
    let missing = dir.path().join("missing/out.npy");
    let unknown = dir.path().join("out.bin");
    // By extension, and by --format.
    for (output, format, needle) in [
        (folder.as_path(), None, "it is a folder"),
        (&missing, None, "is not a folder (it does not exist)"),
        (&unknown, None, "cannot tell the format"),
        (&folder, Some("jsonl"), "it is a folder"),
        (
            &missing,
            Some("safetensors"),
            "is not a folder (it does not exist)",
        ),
        (Path::new("/dev/null"), Some("npy"), "is a device"),
    ] {
        let mut args = vec!["--output", output.to_str().unwrap()];
        args.extend(format.iter().flat_map(|f| ["--format", *f]));
        let o = embed(&no_model, &args, &two_images(), home.path());
        assert_clean_failure(&o, needle);
        assert!(!stderr(&o).contains("no-such-model"), "{}", stderr(&o));
    }
    let o = embed(
        &no_model,
        &["--output", "-", "--format", "npy"],
        &two_images(),
        home.path(),
    );
    assert_clean_failure(&o, "cannot go to `-`");
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "only the folder made here: {names:?}");
}

/// `--fail-fast`: nothing after the first broken image (in input order) is embedded; what came
/// before it is kept.
#[test]
fn fail_fast_stops_at_the_first_broken_image() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let broken = dir.path().join("broken.png");
    std::fs::write(&broken, b"not an image").unwrap();
    let good = two_images();
    let images = vec![good[0].clone(), broken, good[1].clone()];
    let jsonl = dir.path().join("out.jsonl");
    let o = embed(
        &model,
        &["--output", jsonl.to_str().unwrap(), "--fail-fast"],
        &images,
        dir.path(),
    );
    assert_clean_failure(&o, "stopped at the first image that failed (--fail-fast)");
    let lines = read_jsonl(&std::fs::read(&jsonl).unwrap());
    assert_eq!(lines.len(), 2, "the good image, then the broken one");
    assert!(lines[0].1.is_ok() && lines[1].1.is_err(), "{lines:?}");

    let st = dir.path().join("out.safetensors");
    let o = embed(
        &model,
        &["--output", st.to_str().unwrap(), "--fail-fast"],
        &images,
        dir.path(),
    );
    assert_clean_failure(&o, "--fail-fast");
    let (rows, metadata) = read_safetensors(&st);
    let listed: Vec<String> = serde_json::from_str(&metadata["images"]).unwrap();
    assert_eq!(listed, display(&good[..1]));
    let want = library_embeddings(&model, &good[..1], Output::ClassToken);
    assert_rows_close(&rows, &want, "before --fail-fast stopped");
}

/// JSON Lines to a standard output whose reader has gone: the run ends quietly, status 0.
#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    let dir = temp();
    let images: Vec<PathBuf> = two_images().into_iter().cycle().take(40).collect();
    let mut args: Vec<String> = [
        "embed",
        "--device",
        "cpu",
        "--batch-size",
        "2",
        "--output",
        "-",
    ]
    .map(String::from)
    .to_vec();
    args.extend(["--model".into(), fixture("tiny-gelu").display().to_string()]);
    args.extend(display(&images));
    let mut child = vitrt_command(&args, dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(o.status.code(), Some(0), "{err}");
}

/// Each pool asked for by name is the output the library gives for it.
#[test]
fn each_pool_is_the_matching_library_output() {
    let dir = temp();
    let images = two_images();
    let model = fixture("clip-vision-projection");
    for (pool, output) in [
        ("projected", Output::ImageEmbeds),
        ("pooler", Output::PoolerOutput),
        ("cls", Output::ClassToken),
        ("mean", Output::PatchMean),
    ] {
        let o = embed(
            &model,
            &["--pool", pool, "--output", "-"],
            &images,
            dir.path(),
        );
        assert!(o.status.success(), "{pool}: {}", stderr(&o));
        let rows: Vec<Vec<f32>> = read_jsonl(&o.stdout)
            .into_iter()
            .map(|(image, outcome)| outcome.unwrap_or_else(|e| panic!("{image}: {e}")))
            .collect();
        let want = library_embeddings(&model, &images, output);
        assert_rows_close(&rows, &want, pool);
    }
}

/// DINOv3 from image files: the fixture's preprocessor_config.json names
/// `DINOv3ViTImageProcessorFast` (float resize, staged as f32 values rather than bytes), and
/// `vitrt embed` gives what the library gives for `preprocess_file` under that config, over
/// batches of two (the last one short). Images of other sizes and kinds are in the batch:
/// a JPEG, a PNG, a palette PNG and a grey one.
#[test]
fn dinov3_embeds_image_files_with_its_own_float_preprocessing() {
    let dir = temp();
    let model_dir = fixture("dinov3-registers-rope");
    let pre = PreprocessConfig::of_checkpoint(&model_dir, 3)
        .unwrap()
        .expect("the fixture's preprocessor_config.json");
    assert_eq!(
        pre.arithmetic(),
        vitrt_model::preprocess::PixelArithmetic::TorchvisionFloat
    );
    let images = vec![
        image("cat.jpg"),
        image("coffee.png"),
        image("cat_palette.png"),
        image("camera_gray.png"),
        image("astronaut.webp"),
    ];
    let model = VisionModel::load(&model_dir).unwrap();
    let backend = vitrt_runtime::backend::open(Device::Cpu, DType::F32).unwrap();
    let mut runner = Runner::new(model, backend, Fusion::ALL);
    runner.set_outputs(OutputSet::of(&[Output::PoolerOutput]));
    let pixels: Vec<f32> = images
        .iter()
        .flat_map(|p| preprocess_file(p, &pre).unwrap())
        .collect();
    let outputs = runner.run(&pixels, images.len(), false).unwrap();
    let want: Vec<Vec<f32>> = outputs[0]
        .data
        .chunks(outputs[0].shape[1])
        .map(<[f32]>::to_vec)
        .collect();

    let st = dir.path().join("dinov3.safetensors");
    let o = embed(
        &model_dir,
        &[
            "--output",
            st.to_str().unwrap(),
            "--pool",
            "pooler",
            "--batch-size",
            "2",
        ],
        &images,
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let (rows, _) = read_safetensors(&st);
    assert_rows_close(&rows, &want, "dinov3 from files");
}

/// AIMv2 from image files: the fixture's preprocessor_config.json names CLIPImageProcessor (as
/// apple/aimv2-large-patch14-224's does), and `vitrt embed`'s default vector is the
/// attention-pooling head's `pooler_output`, equal to the library's under that preprocessing.
/// The checkpoint without the head embeds its token mean by default.
#[test]
fn aimv2_embeds_image_files_through_clip_preprocessing() {
    let dir = temp();
    let images = two_images();
    let model_dir = fixture("aimv2-vision-head");
    let pre = PreprocessConfig::of_checkpoint(&model_dir, 3)
        .unwrap()
        .expect("the fixture's preprocessor_config.json");
    let model = VisionModel::load(&model_dir).unwrap();
    let backend = vitrt_runtime::backend::open(Device::Cpu, DType::F32).unwrap();
    let mut runner = Runner::new(model, backend, Fusion::ALL);
    runner.set_outputs(OutputSet::of(&[Output::PoolerOutput]));
    let pixels: Vec<f32> = images
        .iter()
        .flat_map(|p| preprocess_file(p, &pre).unwrap())
        .collect();
    let outputs = runner.run(&pixels, images.len(), false).unwrap();
    let want: Vec<Vec<f32>> = outputs[0]
        .data
        .chunks(outputs[0].shape[1])
        .map(<[f32]>::to_vec)
        .collect();
    let st = dir.path().join("aimv2.safetensors");
    let o = embed(
        &model_dir,
        &["--output", st.to_str().unwrap()],
        &images,
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let (rows, metadata) = read_safetensors(&st);
    assert_eq!(metadata["pool"], "pooler", "the head is the default vector");
    assert_rows_close(&rows, &want, "aimv2 from files");

    let headless = fixture("aimv2-native-biases");
    let want = library_embeddings(&headless, &images, Output::PatchMean);
    let st = dir.path().join("aimv2-native.safetensors");
    let o = embed(
        &headless,
        &["--output", st.to_str().unwrap()],
        &images,
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let (rows, metadata) = read_safetensors(&st);
    assert_eq!(metadata["pool"], "mean", "no head, no CLS token");
    assert_rows_close(&rows, &want, "aimv2 native from files");
    let o = embed(
        &headless,
        &["--pool", "pooler", "--output", "-"],
        &images,
        dir.path(),
    );
    assert!(!o.status.success(), "a pooler the checkpoint lacks");
    assert!(stderr(&o).contains("mean"), "{}", stderr(&o));
}

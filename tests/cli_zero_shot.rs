//! `vitrt zero-shot` and `vitrt embed-text` end to end on the CPU, with the tiny CLIP and
//! SigLIP fixtures (tests/fixtures/models/ZERO-SHOT.md) and open_clip's
//! (tests/fixtures/models/OPEN-CLIP.md): the labels' probabilities equal what
//! the library computes from the same files (tokenizer, text tower, the vision graph's
//! scores), templates are averaged, text embeddings match PyTorch's reference, and bad labels,
//! templates and checkpoints are clear errors.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use vitrt_model::preprocess::{preprocess_file, PreprocessConfig};
use vitrt_model::text::{TextEncoder, TextModel, TextTokenizer};
use vitrt_model::{Output, OutputSet, Runner, VisionModel, ZeroShotLabels};
use vitrt_runtime::passes::Fusion;
use vitrt_runtime::CpuBackend;

fn images() -> Vec<PathBuf> {
    let dir = root().join("tests/fixtures/images");
    vec![dir.join("cat.jpg"), dir.join("coffee.png")]
}

/// The library's probabilities of `labels` (one template) for `images`, [image][label].
fn library_probs(dir: &Path, labels: &[&str], template: &str, images: &[PathBuf]) -> Vec<Vec<f32>> {
    let text = TextModel::load(dir).unwrap();
    let rule = text.score_rule().unwrap();
    let tokenizer =
        TextTokenizer::from_checkpoint(dir, text.context(), text.config.family).unwrap();
    let texts: Vec<String> = labels
        .iter()
        .map(|l| template.replacen("{}", l, 1))
        .collect();
    let ids = tokenizer.encode(&texts).unwrap().ids;
    let mut encoder = TextEncoder::new(text, Box::new(CpuBackend::new()), Fusion::ALL);
    let text_embeds = encoder.embed(&ids, texts.len(), true).unwrap();
    let mut model = VisionModel::load(dir).unwrap();
    let pre = PreprocessConfig::of_checkpoint(dir, 3).unwrap().unwrap();
    model.set_input_size(pre.output_size()).unwrap();
    model
        .set_zero_shot(ZeroShotLabels {
            text_embeds,
            labels: labels.len(),
            rule,
        })
        .unwrap();
    let mut runner = Runner::new(model, Box::new(CpuBackend::new()), Fusion::ALL)
        .with_outputs(OutputSet::of(&[Output::ZeroShotProbs]));
    let pixels: Vec<f32> = images
        .iter()
        .flat_map(|p| preprocess_file(p, &pre).unwrap())
        .collect();
    let probs = runner.run(&pixels, images.len(), false).unwrap().remove(0);
    probs
        .data
        .chunks(labels.len())
        .map(<[f32]>::to_vec)
        .collect()
}

/// `{label: probability}` of each image of a `--format json` run, in input order.
fn cli_probs(stdout: &[u8], labels: &[&str]) -> Vec<Vec<f32>> {
    let doc: serde_json::Value = serde_json::from_slice(stdout).unwrap();
    doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|result| {
            let predictions = result["predictions"].as_array().unwrap();
            labels
                .iter()
                .map(|label| {
                    let p = predictions
                        .iter()
                        .find(|p| p["label"] == *label)
                        .unwrap_or_else(|| panic!("no {label} in {result}"));
                    p["probability"].as_f64().unwrap() as f32
                })
                .collect()
        })
        .collect()
}

fn zero_shot(model: &Path, extra: &[&str], home: &Path) -> std::process::Output {
    let mut args = vec![
        "zero-shot",
        "--model",
        model.to_str().unwrap(),
        "--device",
        "cpu",
    ];
    args.extend_from_slice(extra);
    let images = images();
    args.extend(images.iter().map(|p| p.to_str().unwrap()));
    vitrt(&args, home)
}

#[test]
fn zero_shot_probabilities_are_the_librarys() {
    let home = temp();
    let labels = ["cat", "dog", "cup of coffee"];
    for name in [
        "clip-zero-shot",
        "siglip-zero-shot",
        "siglip2-zero-shot",
        "open-clip-vit",
        "open-clip-quickgelu-avg",
    ] {
        let dir = fixture(name);
        let o = zero_shot(
            &dir,
            &[
                "--labels",
                "cat, dog,cup of coffee",
                "--template",
                "a photo of a {}.",
                "--top-k",
                "3",
                "--json",
            ],
            home.path(),
        );
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let ours = cli_probs(&o.stdout, &labels);
        let want = library_probs(&dir, &labels, "a photo of a {}.", &images());
        for (image, (a, b)) in ours.iter().zip(&want).enumerate() {
            for (x, y) in a.iter().zip(b) {
                assert!(
                    (x - y).abs() < 1e-6,
                    "{name} image {image}: {a:?} against {b:?}"
                );
            }
        }
        if !name.starts_with("siglip") {
            for row in &ours {
                let sum: f32 = row.iter().sum();
                assert!(
                    (sum - 1.0).abs() < 1e-5,
                    "{name}: CLIP's softmax over the labels: {sum}"
                );
            }
        }
    }
}

#[test]
fn several_templates_are_averaged() {
    let home = temp();
    let dir = fixture("clip-zero-shot");
    let run = |templates: &[&str]| {
        let mut args = vec!["--labels", "cat,dog", "--json"];
        for t in templates {
            args.extend(["--template", t]);
        }
        let o = zero_shot(&dir, &args, home.path());
        assert!(o.status.success(), "{}", stderr(&o));
        cli_probs(&o.stdout, &["cat", "dog"])
    };
    let one = run(&["a photo of a {}."]);
    let two = run(&["a photo of a {}.", "a drawing of a {}."]);
    let again = run(&["a photo of a {}.", "a drawing of a {}."]);
    assert_ne!(one, two, "a second template changes the label embeddings");
    assert_eq!(two, again, "runs are deterministic");
}

#[test]
fn bad_labels_templates_and_checkpoints_are_clear_errors() {
    let home = temp();
    let clip = fixture("clip-zero-shot");
    let o = zero_shot(&clip, &["--labels", "cat,,dog"], home.path());
    assert_clean_failure(&o, "label 2 is empty");
    let o = zero_shot(&clip, &["--labels", "cat,dog,cat"], home.path());
    assert_clean_failure(&o, "named twice");
    let o = zero_shot(
        &clip,
        &["--labels", "cat", "--template", "a photo"],
        home.path(),
    );
    assert_clean_failure(&o, "has no {} to put the label in");
    let work = temp();
    let empty = work.path().join("labels.txt");
    std::fs::write(&empty, "\n  \n").unwrap();
    let o = zero_shot(
        &clip,
        &["--labels-file", empty.to_str().unwrap()],
        home.path(),
    );
    assert_clean_failure(&o, "the label list is empty");
    // A vision-only checkpoint, and a dual tower without its tokenizer.json.
    let o = zero_shot(&fixture("vitmodel-relu"), &["--labels", "cat"], home.path());
    assert_clean_failure(&o, "without image embeddings");
    let o = zero_shot(
        &fixture("clip-dual-tower"),
        &["--labels", "cat"],
        home.path(),
    );
    assert_clean_failure(&o, "tokenizer.json");
}

#[test]
fn embed_text_matches_pytorch_and_normalizes() {
    let home = temp();
    let work = temp();
    for name in [
        "clip-zero-shot",
        "siglip-zero-shot",
        "siglip2-zero-shot",
        "open-clip-vit",
        "open-clip-quickgelu-avg",
    ] {
        let dir = fixture(name);
        // The reference's first three prompts and their text embeddings.
        let bytes = std::fs::read(dir.join("text-reference.safetensors")).unwrap();
        let (_, metadata) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        let prompts: Vec<String> =
            serde_json::from_str(&metadata.metadata().as_ref().unwrap()["prompts"]).unwrap();
        let reference = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let embeds = reference.tensor("text_embeds").unwrap();
        let width = embeds.shape()[1];
        let want: Vec<f32> = embeds
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        for normalize in [false, true] {
            let out = work.path().join(format!("{name}-{normalize}.jsonl"));
            let mut args = vec![
                "embed-text",
                "--model",
                dir.to_str().unwrap(),
                "--device",
                "cpu",
                "--output",
                out.to_str().unwrap(),
            ];
            for p in &prompts[..3] {
                args.extend(["--text", p.as_str()]);
            }
            if normalize {
                args.push("--normalize");
            }
            let o = vitrt(&args, home.path());
            assert!(o.status.success(), "{name}: {}", stderr(&o));
            let text = std::fs::read_to_string(&out).unwrap();
            for (i, line) in text.lines().enumerate() {
                let row: serde_json::Value = serde_json::from_str(line).unwrap();
                assert_eq!(row["text"], prompts[i].as_str());
                let ours: Vec<f32> = row["embedding"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap() as f32)
                    .collect();
                let mut theirs = want[i * width..(i + 1) * width].to_vec();
                if normalize {
                    let norm = theirs.iter().map(|v| v * v).sum::<f32>().sqrt();
                    theirs.iter_mut().for_each(|v| *v /= norm);
                }
                let scale = theirs.iter().fold(0f32, |m, v| m.max(v.abs()));
                for (a, b) in ours.iter().zip(&theirs) {
                    assert!(
                        (a - b).abs() <= 1e-4 * scale,
                        "{name} text {i}: {a} against {b}"
                    );
                }
            }
        }
    }
    let o = vitrt(
        &[
            "embed-text",
            "--model",
            fixture("clip-zero-shot").to_str().unwrap(),
            "--device",
            "cpu",
            "--output",
            "-",
        ],
        home.path(),
    );
    assert_clean_failure(&o, "no texts given");
}

/// SigLIP 2 NaFlex from image files (tests/fixtures/naflex/siglip2-naflex-zero-shot): four
/// images of different aspect ratios, each preprocessed to its own patch grid. `vitrt
/// zero-shot` gives transformers' Siglip2Model probabilities for the prompts its reference
/// scored, and `vitrt embed` its image_embeds.
#[test]
fn naflex_zero_shot_and_embed_from_image_files_are_transformers() {
    let home = temp();
    let dir = fixture("tiny-gelu").join("../../naflex/siglip2-naflex-zero-shot");
    let images: Vec<String> = (0..4)
        .map(|i| dir.join(format!("images/{i}.png")).display().to_string())
        .collect();
    let reference = vitrt_weights::read_f32_tensors(&dir.join("reference.safetensors")).unwrap();
    let tensor = |name: &str| reference.iter().find(|t| t.0 == name).unwrap().2.clone();
    // The reference's prompts: "a photo of a cat." and its kin, put in as they are.
    let prompts = [
        "a photo of a cat.",
        "a photo of a dog.",
        "a photo of a bird.",
    ];
    let mut args = vec![
        "zero-shot",
        "--model",
        dir.to_str().unwrap(),
        "--device",
        "cpu",
        "--labels",
        "a photo of a cat.,a photo of a dog.,a photo of a bird.",
        "--template",
        "{}",
        "--top-k",
        "3",
        "--json",
        "--batch-size",
        "3",
    ];
    args.extend(images.iter().map(String::as_str));
    let o = vitrt(&args, home.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let ours = cli_probs(&o.stdout, &prompts);
    let want = tensor("probs");
    assert_eq!(ours.len(), 4);
    for (image, row) in ours.iter().enumerate() {
        for (label, p) in row.iter().enumerate() {
            let w = want[image * 4 + label];
            assert!(
                (p - w).abs() < 1e-5,
                "image {image} label {label}: {p} vs {w}"
            );
        }
    }

    let out = home.path().join("naflex.jsonl");
    let mut args = vec![
        "embed",
        "--model",
        dir.to_str().unwrap(),
        "--device",
        "cpu",
        "--output",
        out.to_str().unwrap(),
    ];
    args.extend(images.iter().map(String::as_str));
    let o = vitrt(&args, home.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let want = tensor("image_embeds");
    let text = std::fs::read_to_string(&out).unwrap();
    let rows: Vec<Vec<f32>> = text
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            v["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 4);
    let width = rows[0].len();
    for (image, row) in rows.iter().enumerate() {
        for (a, b) in row.iter().zip(&want[image * width..]) {
            assert!((a - b).abs() < 1e-4, "image {image}: {a} vs {b}");
        }
    }
    // --pool mean: each image's mean of last_hidden_state over its own patches
    // (model/tests/naflex_parity.rs checks its values against transformers').
    let means = home.path().join("naflex-mean.jsonl");
    let mut args = vec![
        "embed",
        "--model",
        dir.to_str().unwrap(),
        "--device",
        "cpu",
        "--pool",
        "mean",
        "--output",
        means.to_str().unwrap(),
    ];
    args.extend(images.iter().map(String::as_str));
    let o = vitrt(&args, home.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&means).unwrap();
    let mean_rows: Vec<Vec<f64>> = text
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            v["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(mean_rows.len(), 4);
    assert!(mean_rows
        .iter()
        .all(|row| row.len() == width && row.iter().all(|v| v.is_finite())));
    assert!(
        (mean_rows[0][0] as f32 - rows[0][0]).abs() > 1e-6,
        "the mean is not the pooling head's vector"
    );
    // What is not built for it is refused by name.
    let mut args = vec![
        "embed",
        "--model",
        dir.to_str().unwrap(),
        "--device",
        "cpu",
        "--pool",
        "cls",
        "--output",
        out.to_str().unwrap(),
        "--force",
    ];
    args.extend(images.iter().map(String::as_str));
    let o = vitrt(&args, home.path());
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("SigLIP 2 NaFlex) has no"),
        "{}",
        stderr(&o)
    );
}

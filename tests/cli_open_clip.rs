//! open_clip's own checkpoint folders (open_clip_config.json beside
//! open_clip_model.safetensors; tests/fixtures/models/OPEN-CLIP.md) through the commands that
//! load a model from a folder, on the CPU: `parity` against open_clip's float64 reference,
//! `embed` of the projected image embeddings, `infer`'s outputs; and the folders vitrt refuses,
//! each with a one-line error naming why: only open_clip's PyTorch pickle, a pool vitrt does
//! not run, a SigLIP-style bias. (`zero-shot` and `embed-text` are in cli_zero_shot.rs.)

mod common;

use common::*;
use std::path::Path;

const FIXTURES: [&str; 2] = ["open-clip-vit", "open-clip-quickgelu-avg"];

#[test]
fn parity_against_open_clips_reference_passes_in_f32_and_f16() {
    let home = temp();
    for name in FIXTURES {
        let dir = fixture(name);
        for dtype in ["f32", "f16"] {
            let o = vitrt(
                &[
                    "parity",
                    "--model",
                    dir.to_str().unwrap(),
                    "--reference",
                    dir.join("reference.safetensors").to_str().unwrap(),
                    "--device",
                    "cpu",
                    "--dtype",
                    dtype,
                ],
                home.path(),
            );
            assert!(o.status.success(), "{name} {dtype}: {}", stderr(&o));
            let report = String::from_utf8_lossy(&o.stdout);
            for tensor in ["hidden_states.2", "pooler_output", "image_embeds"] {
                assert!(report.contains(tensor), "{name} {dtype}: {report}");
            }
        }
    }
}

#[test]
fn embed_writes_the_projected_embeddings_of_open_clips_preprocessing() {
    let home = temp();
    let work = temp();
    let images = root().join("tests/fixtures/images");
    for name in FIXTURES {
        let dir = fixture(name);
        let out = work.path().join(format!("{name}.jsonl"));
        let o = vitrt(
            &[
                "embed",
                "--model",
                dir.to_str().unwrap(),
                "--device",
                "cpu",
                "--output",
                out.to_str().unwrap(),
                images.join("cat.jpg").to_str().unwrap(),
                images.join("coffee.png").to_str().unwrap(),
            ],
            home.path(),
        );
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let text = std::fs::read_to_string(&out).unwrap();
        let rows: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 2, "{name}");
        for row in rows {
            // `projected` is the default where there is one: open_clip's embed_dim, 24.
            assert_eq!(row["embedding"].as_array().unwrap().len(), 24, "{name}");
        }
    }
}

#[test]
fn infer_writes_open_clips_outputs() {
    let home = temp();
    let work = temp();
    let dir = fixture("open-clip-vit");
    let out = work.path().join("out.safetensors");
    let o = vitrt(
        &[
            "infer",
            "--model",
            dir.to_str().unwrap(),
            "--device",
            "cpu",
            "--input",
            dir.join("reference.safetensors").to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let names: Vec<String> = vitrt_weights::read_f32_tensors(&out)
        .unwrap()
        .into_iter()
        .map(|(name, _, _)| name)
        .collect();
    for want in ["last_hidden_state", "pooler_output", "image_embeds"] {
        assert!(names.iter().any(|n| n == want), "{names:?}");
    }
}

/// A copy of `open-clip-vit` with `edit` applied to its folder.
fn edited_copy(work: &Path, edit: impl Fn(&Path)) -> std::path::PathBuf {
    let from = fixture("open-clip-vit");
    let dir = work.join("edited");
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    edit(&dir);
    dir
}

fn classify(dir: &Path, home: &Path) -> std::process::Output {
    let image = root().join("tests/fixtures/images/cat.jpg");
    vitrt(
        &[
            "embed",
            "--model",
            dir.to_str().unwrap(),
            "--device",
            "cpu",
            "--output",
            "-",
            image.to_str().unwrap(),
        ],
        home,
    )
}

#[test]
fn folders_vitrt_cannot_run_are_refused_by_name() {
    let home = temp();
    // open_clip's PyTorch pickle alone.
    let work = temp();
    let pickle = edited_copy(work.path(), |dir| {
        std::fs::rename(
            dir.join("open_clip_model.safetensors"),
            dir.join("open_clip_pytorch_model.bin"),
        )
        .unwrap();
    });
    let o = classify(&pickle, home.path());
    assert_clean_failure(&o, "only open_clip_pytorch_model.bin");
    assert!(
        stderr(&o).contains("open_clip_model.safetensors"),
        "{}",
        stderr(&o)
    );

    // A pool and a score vitrt does not run.
    for (setting, value, want) in [
        ("pool_type", "\"none\"", "vision_cfg.pool_type = \"none\""),
        (
            "attentional_pool",
            "true",
            "vision_cfg.attentional_pool = true",
        ),
    ] {
        let work = temp();
        let dir = edited_copy(work.path(), |dir| {
            let path = dir.join("open_clip_config.json");
            let mut config: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            config["model_cfg"]["vision_cfg"][setting] = serde_json::from_str(value).unwrap();
            std::fs::write(&path, config.to_string()).unwrap();
        });
        assert_clean_failure(&classify(&dir, home.path()), want);
    }
    let work = temp();
    let biased = edited_copy(work.path(), |dir| {
        let path = dir.join("open_clip_config.json");
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        config["model_cfg"]["init_logit_bias"] = serde_json::json!(-10.0);
        std::fs::write(&path, config.to_string()).unwrap();
    });
    let image = root().join("tests/fixtures/images/cat.jpg");
    let o = vitrt(
        &[
            "zero-shot",
            "--model",
            biased.to_str().unwrap(),
            "--device",
            "cpu",
            "--labels",
            "cat,dog",
            image.to_str().unwrap(),
        ],
        home.path(),
    );
    assert_clean_failure(&o, "model_cfg.init_logit_bias = -10.0");
}

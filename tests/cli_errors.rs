//! Errors common to every `vitrt` command: broken models, uncached hub ids offline, bad
//! devices and dtypes, each cause said once, a closed stdout; and `--cuda-graphs` everywhere.

mod common;

use common::*;
use std::path::{Path, PathBuf};

#[test]
fn broken_models_are_clear_errors() {
    let dir = temp();
    let good = fixture("tiny-gelu");
    let make = |name: &str, edit: &dyn Fn(&Path)| -> PathBuf {
        let m = dir.path().join(name);
        std::fs::create_dir_all(&m).unwrap();
        for f in ["config.json", "model.safetensors"] {
            std::fs::copy(good.join(f), m.join(f)).unwrap();
        }
        edit(&m);
        m
    };
    let set_config = |m: &Path, key: &str, value: serde_json::Value| {
        let mut c: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(m.join("config.json")).unwrap()).unwrap();
        c[key] = value;
        std::fs::write(m.join("config.json"), c.to_string()).unwrap();
    };
    let cases: Vec<(PathBuf, &str)> = vec![
        (dir.path().join("does-not-exist"), "does-not-exist"),
        (
            make("no-config", &|m| {
                std::fs::remove_file(m.join("config.json")).unwrap()
            }),
            "config.json",
        ),
        (
            make("bad-json", &|m| {
                std::fs::write(m.join("config.json"), "{ not json").unwrap()
            }),
            "config.json",
        ),
        (
            make("mish", &|m| set_config(m, "hidden_act", "mish".into())),
            "unknown hidden_act \"mish\"",
        ),
        (
            make("heads", &|m| set_config(m, "num_attention_heads", 5.into())),
            "not divisible by num_attention_heads",
        ),
        (
            make("wider", &|m| set_config(m, "intermediate_size", 256.into())),
            "tensor vit.encoder.layer.0.intermediate.dense.weight has shape [128, 64], expected [256, 64]",
        ),
        (
            make("truncated", &|m| {
                let bytes = std::fs::read(m.join("model.safetensors")).unwrap();
                std::fs::write(m.join("model.safetensors"), &bytes[..bytes.len() / 2]).unwrap();
            }),
            "model.safetensors",
        ),
        (
            make("garbage", &|m| {
                std::fs::write(
                    m.join("model.safetensors"),
                    b"\xff\xff\xff\xff\xff\xff\xff\x7fjunk",
                )
                .unwrap()
            }),
            "model.safetensors",
        ),
        (
            make("more-layers", &|m| {
                set_config(m, "num_hidden_layers", 3.into())
            }),
            "missing tensor vit.encoder.layer.2",
        ),
    ];
    let reference = good.join("reference.safetensors");
    for (model, needle) in cases {
        let o = vitrt(
            &[
                "parity",
                "--model",
                model.to_str().unwrap(),
                "--reference",
                reference.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert_clean_failure(&o, needle);
    }
}

#[test]
fn hub_ids_not_cached_fail_at_once_offline() {
    let dir = temp();
    let img = root().join("tests/fixtures/images");
    let any_image = std::fs::read_dir(&img)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "png"))
        .unwrap();
    let o = vitrt(
        &[
            "classify",
            "--model",
            "google/vit-base-patch16-224",
            "--offline",
            any_image.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "google/vit-base-patch16-224");
}

#[test]
fn device_and_dtype_errors_are_clear() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let reference = model.join("reference.safetensors");
    let m = model.to_str().unwrap();
    let r = reference.to_str().unwrap();
    let o = vitrt(
        &[
            "parity",
            "--model",
            m,
            "--reference",
            r,
            "--residual-dtype",
            "bf16",
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "stored as f32 or as the run's dtype (f32), not bf16");
    let o = vitrt(
        &["parity", "--model", m, "--reference", r, "--device", "tpu"],
        dir.path(),
    );
    assert_clean_failure(&o, "unknown device \"tpu\"");
    let o = vitrt(
        &[
            "parity",
            "--model",
            m,
            "--reference",
            r,
            "--device",
            "cuda:7",
        ],
        dir.path(),
    );
    // Without a GPU: no driver; with one: no device 7 (or NVRTC missing). Never a panic.
    assert_clean_failure(&o, "");
    assert!(
        stderr(&o).contains("CUDA") || stderr(&o).contains("NVRTC"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn several_devices_are_checked_before_anything_runs() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let image = root().join("examples/digits/digit-0003-label-3.png");
    let (m, i) = (model.to_str().unwrap(), image.to_str().unwrap());
    for (device, said) in [
        ("cuda:0,0", "cuda:0 is named twice"),
        ("cuda:0,x", "unknown device"),
    ] {
        let o = vitrt(
            &["classify", "--model", m, "--device", device, i],
            dir.path(),
        );
        assert_clean_failure(&o, said);
    }
    // Without a GPU: no driver to count devices with (or, with GPUs, a run on all of them
    // that this model and image allow). Never a panic.
    let o = vitrt(
        &["embed", "--model", m, "--device", "cuda:all", "-o", "-", i],
        dir.path(),
    );
    if !o.status.success() {
        assert_clean_failure(&o, "");
        assert!(stderr(&o).contains("cuda"), "{}", stderr(&o));
    }
}

#[test]
fn cuda_graphs_switch_is_accepted_everywhere_and_changes_nothing_on_the_cpu() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let m = model.to_str().unwrap();
    let reference = model.join("reference.safetensors");
    let mut outputs = Vec::new();
    for switch in ["on", "off"] {
        let out = dir.path().join(format!("out-{switch}.safetensors"));
        let o = vitrt(
            &[
                "infer",
                "--model",
                m,
                "--input",
                reference.to_str().unwrap(),
                "--output",
                out.to_str().unwrap(),
                "--cuda-graphs",
                switch,
            ],
            dir.path(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(
            !stderr(&o).contains("graph"),
            "the CPU says nothing of graphs: {}",
            stderr(&o)
        );
        outputs.push(std::fs::read(&out).unwrap());
    }
    assert_eq!(outputs[0], outputs[1]);
    let o = vitrt(
        &[
            "parity",
            "--model",
            m,
            "--reference",
            reference.to_str().unwrap(),
            "--cuda-graphs",
            "off",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = vitrt(
        &[
            "bench",
            "model",
            "--model",
            m,
            "--batch-sizes",
            "1",
            "--reps",
            "5",
            "--cuda-graphs",
            "on",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = vitrt(
        &["infer", "--model", m, "--cuda-graphs", "sometimes"],
        dir.path(),
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--cuda-graphs"), "{}", stderr(&o));
}

#[test]
fn errors_say_each_cause_once() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let out = dir.path().join("out.safetensors");
    // --model naming a file.
    let o = vitrt(
        &[
            "infer",
            "--model",
            model.join("config.json").to_str().unwrap(),
            "--input",
            model.join("reference.safetensors").to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "config.json");
    assert_each_cause_once(&o);
    // An input that exists but cannot be read as a file: an I/O error with its cause.
    #[cfg(target_os = "linux")]
    {
        let o = vitrt(
            &[
                "infer",
                "--model",
                model.to_str().unwrap(),
                "--input",
                "/proc/self/status",
                "--output",
                out.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert_clean_failure(&o, "cannot read /proc/self/status: ");
        assert_each_cause_once(&o);
    }
    // An output folder that is a file.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let o = infer_tiny(
        &["--output", file.join("out.safetensors").to_str().unwrap()],
        dir.path(),
    );
    assert_clean_failure(&o, "is not a folder");
    assert_each_cause_once(&o);
}

/// Every command's output: a reader that has gone (`| head` after its lines, here a pipe
/// closed before the first line) ends the run quietly with status 0, never a panic.
#[test]
fn a_closed_stdout_ends_any_command_quietly() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let reference = model.join("reference.safetensors");
    let digits = root().join("examples/digits");
    let demo = root().join("examples/digits-vit");
    let commands: [Vec<&str>; 3] = [
        vec![
            "parity",
            "--model",
            model.to_str().unwrap(),
            "--reference",
            reference.to_str().unwrap(),
        ],
        vec![
            "bench",
            "model",
            "--model",
            model.to_str().unwrap(),
            "--device",
            "cpu",
            "--batch-sizes",
            "1",
            "--reps",
            "5",
        ],
        vec![
            "classify",
            "--model",
            demo.to_str().unwrap(),
            digits.to_str().unwrap(),
        ],
    ];
    for args in commands {
        let mut child = vitrt_command(&args, dir.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = stderr(&o);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
    }
}

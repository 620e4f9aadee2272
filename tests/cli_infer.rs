//! `vitrt infer` and `vitrt parity` end to end: logits and parity against PyTorch's, the
//! output file (stdout, links, read-only files, full disks, devices) and bad pixels.

mod common;

use common::*;
use std::process::Command;

#[test]
fn infer_writes_logits_matching_pytorch() {
    let dir = temp();
    let out = dir.path().join("out.safetensors");
    let model = fixture("tiny-gelu");
    let reference = model.join("reference.safetensors");
    let o = vitrt(
        &[
            "infer",
            "--model",
            model.to_str().unwrap(),
            "--input",
            reference.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--dump-activations",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let ours = vitrt_weights::read_f32_tensors(&out).unwrap();
    let refs = vitrt_weights::read_f32_tensors(&reference).unwrap();
    let names: Vec<&str> = ours.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "hidden_states.0",
            "hidden_states.1",
            "hidden_states.2",
            "logits"
        ]
    );
    let (_, shape, logits) = ours.iter().find(|t| t.0 == "logits").unwrap();
    let (_, _, want) = refs.iter().find(|t| t.0 == "logits").unwrap();
    assert_eq!(shape, &vec![2, 10]);
    for (a, b) in logits.iter().zip(want) {
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }
}

#[test]
fn parity_passes_on_every_fixture_and_names_each_tensor() {
    let dir = temp();
    // ViT, and one checkpoint of each other family: their pooled outputs and image
    // embeddings are compared too, and inputs of another size than the config's resample the
    // positions.
    for (name, outputs) in [
        ("tiny-gelu", &["logits"][..]),
        ("vitmodel-relu", &["last_hidden_state", "pooler_output"]),
        ("sharded", &["logits"]),
        ("headdim80-silu-1ch", &["logits"]),
        ("deit-distilled", &["logits"]),
        (
            "dinov2-registers-swiglu",
            &["last_hidden_state", "pooler_output"],
        ),
        ("clip-dual-tower", &["pooler_output", "image_embeds"]),
        ("siglip-vision-head", &["pooler_output", "image_embeds"]),
    ] {
        let model = fixture(name);
        let reference = model.join("reference.safetensors");
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
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{name}: {}{}", stdout, stderr(&o));
        assert!(
            stdout.contains("hidden_states.0") && stdout.contains("parity: ok"),
            "{stdout}"
        );
        for output in outputs {
            assert!(
                stdout
                    .lines()
                    .any(|l| l.starts_with(output) && l.contains("  ok")),
                "{name}: {output} compared: {stdout}"
            );
        }
    }
}

#[test]
fn parity_fails_when_the_model_differs_from_the_reference() {
    // The reference of one model against the weights of another with the same shapes.
    let dir = temp();
    let model = fixture("sharded");
    let reference = fixture("tiny-gelu").join("reference.safetensors");
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
    assert!(!o.status.success());
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("FAIL"), "{stdout}");
    assert!(
        stderr(&o).contains("parity failed for hidden_states.0"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn infer_refuses_pixels_of_the_wrong_shape_and_writes_nothing() {
    // Another height and width is a size the model can take (its positions resampled) if it
    // holds a patch; the channels must be the model's.
    let dir = temp();
    let out = dir.path().join("out.safetensors");
    let model = fixture("tiny-gelu");
    for (shape, want) in [
        (
            vec![1, 3, 4, 20],
            "pixel_values of 4x20: images of 4x20 hold no 8x8 patch",
        ),
        (
            vec![1, 1, 16, 16],
            "pixel_values has shape [1, 1, 16, 16]; this model takes [B, 3, 16, 16]",
        ),
    ] {
        let input = dir.path().join("in.safetensors");
        let len = shape.iter().product();
        vitrt_weights::write_f32_tensors(&input, &[("pixel_values".into(), shape, vec![0.5; len])])
            .unwrap();
        let o = vitrt(
            &[
                "infer",
                "--model",
                model.to_str().unwrap(),
                "--input",
                input.to_str().unwrap(),
                "--output",
                out.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert_clean_failure(&o, want);
    }
    assert!(!out.exists(), "nothing half-written");
}

#[test]
fn infer_output_dash_and_dev_stdout_write_safetensors_to_stdout() {
    let dir = temp();
    let o = infer_tiny(&["--output", "-"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("wrote stdout (logits)"),
        "{}",
        stderr(&o)
    );
    let logits = logits_of(&o.stdout, dir.path());

    let link_before = std::fs::symlink_metadata("/dev/stdout").ok();
    let o = infer_tiny(&["--output", "/dev/stdout"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(logits_of(&o.stdout, dir.path()), logits);
    if let Some(before) = link_before {
        let after = std::fs::symlink_metadata("/dev/stdout").unwrap();
        assert_eq!(
            before.file_type().is_symlink(),
            after.file_type().is_symlink(),
            "/dev/stdout itself is left alone"
        );
    }
}

#[cfg(target_os = "linux")]
#[test]
fn infer_output_to_a_full_disk_is_a_one_line_error() {
    let dir = temp();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let model = fixture("tiny-gelu");
    let reference = model.join("reference.safetensors");
    let o = vitrt_command(
        &[
            "infer",
            "--model",
            model.to_str().unwrap(),
            "--input",
            reference.to_str().unwrap(),
            "--output",
            "-",
        ],
        dir.path(),
    )
    .stdout(full)
    .output()
    .unwrap();
    assert_clean_failure(&o, "No space left on device");
    assert_each_cause_once(&o);
}

#[cfg(unix)]
#[test]
fn infer_refuses_devices_folders_and_fifos_before_running() {
    let dir = temp();
    // A model that does not exist: the output is refused before the model is looked at.
    let missing_model = dir.path().join("no-model");
    let refuse = |output: &str, needle: &str| {
        let o = vitrt(
            &[
                "infer",
                "--model",
                missing_model.to_str().unwrap(),
                "--input",
                "in.safetensors",
                "--output",
                output,
            ],
            dir.path(),
        );
        assert_clean_failure(&o, needle);
        assert!(!stderr(&o).contains("no-model"), "{}", stderr(&o));
    };
    refuse("/dev/full", "/dev/full: it is a device, not a regular file");
    let full = std::fs::metadata("/dev/full").unwrap();
    assert!(!full.file_type().is_file(), "/dev/full is still a device");
    refuse(dir.path().to_str().unwrap(), "it is a folder");
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        refuse(fifo.to_str().unwrap(), "it is a fifo, not a regular file");
    }
    let nested = dir.path().join("no/such/out.safetensors");
    refuse(
        nested.to_str().unwrap(),
        "is not a folder (it does not exist)",
    );
}

#[cfg(unix)]
#[test]
fn infer_writes_through_links_and_replaces_read_only_files_only_with_force() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp();
    let real = dir.path().join("real.safetensors");
    std::fs::write(&real, "old").unwrap();
    let link = dir.path().join("link.safetensors");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let o = infer_tiny(&["--output", link.to_str().unwrap()], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let written = std::fs::read(&real).unwrap();
    assert_eq!(logits_of(&written, dir.path()).len(), 20);

    std::fs::write(&real, "keep").unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o444)).unwrap();
    let o = infer_tiny(&["--output", link.to_str().unwrap()], dir.path());
    assert_clean_failure(&o, "the file is read-only (--force replaces it)");
    assert_eq!(std::fs::read(&real).unwrap(), b"keep");
    let o = infer_tiny(&["--output", link.to_str().unwrap(), "--force"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        logits_of(&std::fs::read(&real).unwrap(), dir.path()).len(),
        20
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn infer_and_parity_refuse_non_finite_pixels_naming_the_first() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let reference = model.join("reference.safetensors");
    let tensors = vitrt_weights::read_f32_tensors(&reference).unwrap();
    for (value, shown) in [
        (f32::NAN, "NaN"),
        (f32::INFINITY, "inf"),
        (f32::NEG_INFINITY, "-inf"),
    ] {
        let mut edited = tensors.clone();
        let (_, shape, pixels) = edited.iter_mut().find(|t| t.0 == "pixel_values").unwrap();
        assert_eq!(shape, &vec![2, 3, 32, 32]);
        // Image 1, channel 2, row 5, column 7; and a later one that must not be named.
        pixels[((3 + 2) * 32 + 5) * 32 + 7] = value;
        pixels[((3 + 2) * 32 + 9) * 32] = value;
        let input = dir.path().join("bad.safetensors");
        vitrt_weights::write_f32_tensors(&input, &edited).unwrap();
        let out = dir.path().join("out.safetensors");
        let needle = format!("pixel_values[1, 2, 5, 7] (as [b, c, y, x]) is {shown}");
        let o = vitrt(
            &[
                "infer",
                "--model",
                model.to_str().unwrap(),
                "--input",
                input.to_str().unwrap(),
                "--output",
                out.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert_clean_failure(&o, &needle);
        assert!(!out.exists(), "nothing written");
        let o = vitrt(
            &[
                "parity",
                "--model",
                model.to_str().unwrap(),
                "--reference",
                input.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert_clean_failure(&o, &needle);
    }
}

/// A NaN weight gives no output and names the first tensor where a non-finite value appears.
#[test]
fn infer_traces_a_non_finite_result_to_its_first_layer() {
    let dir = temp();
    let model = dir.path().join("nan-model");
    std::fs::create_dir_all(&model).unwrap();
    let source = fixture("tiny-gelu");
    std::fs::copy(source.join("config.json"), model.join("config.json")).unwrap();
    let mut tensors = vitrt_weights::read_f32_tensors(&source.join("model.safetensors")).unwrap();
    let (_, _, bias) = tensors
        .iter_mut()
        .find(|(name, _, _)| name == "vit.encoder.layer.1.intermediate.dense.bias")
        .unwrap();
    bias[3] = f32::NAN;
    let weights = model.join("model.safetensors");
    std::fs::write(
        &weights,
        vitrt_weights::f32_tensors_bytes(&weights, &tensors).unwrap(),
    )
    .unwrap();
    let out = dir.path().join("out.safetensors");
    let reference = source.join("reference.safetensors");
    let o = vitrt(
        &[
            "infer",
            "--model",
            model.to_str().unwrap(),
            "--input",
            reference.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_clean_failure(
        &o,
        "hidden_states.2 (the output of encoder layer 1 (0-based))",
    );
    assert!(
        stderr(&o).contains("logits is NaN at [0, "),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists(), "nothing is written");
}

fn naflex_fixture() -> std::path::PathBuf {
    fixture("tiny-gelu").join("../../naflex/siglip2-naflex")
}

#[test]
fn naflex_parity_and_infer_take_patch_rows_with_their_mask() {
    // Four images of different aspect ratios padded to 24 patches (lengths 24, 20, 16, 21).
    let dir = temp();
    let model = naflex_fixture();
    let reference = model.join("reference.safetensors");
    let o = vitrt(
        &[
            "parity",
            "--model",
            model.to_str().unwrap(),
            "--reference",
            reference.to_str().unwrap(),
            "--device",
            "cpu",
        ],
        dir.path(),
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", stderr(&o));
    for tensor in ["hidden_states.0", "last_hidden_state", "pooler_output"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(tensor) && l.contains("  ok")),
            "{tensor} compared: {stdout}"
        );
    }
    let out = dir.path().join("out.safetensors");
    let o = vitrt(
        &[
            "infer",
            "--model",
            model.to_str().unwrap(),
            "--input",
            reference.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--device",
            "cpu",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let ours = vitrt_weights::read_f32_tensors(&out).unwrap();
    let refs = vitrt_weights::read_f32_tensors(&reference).unwrap();
    let names: Vec<&str> = ours.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["last_hidden_state", "pooler_output"]);
    for (name, shape, data) in &ours {
        let (_, want_shape, want) = refs.iter().find(|t| &t.0 == name).unwrap();
        assert_eq!(shape, want_shape, "{name}");
        for (a, b) in data.iter().zip(want) {
            assert!((a - b).abs() < 1e-4, "{name}: {a} vs {b}");
        }
    }
}

#[test]
fn naflex_refuses_inputs_without_their_mask_and_image_files() {
    let dir = temp();
    let model = naflex_fixture();
    // An image model's reference: pixel_values [B, C, H, W] and no mask.
    let reference = fixture("tiny-gelu").join("reference.safetensors");
    let out = dir.path().join("out.safetensors");
    let o = vitrt(
        &[
            "infer",
            "--model",
            model.to_str().unwrap(),
            "--input",
            reference.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--device",
            "cpu",
        ],
        dir.path(),
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no tensor named pixel_attention_mask"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists(), "nothing is written");
    // classify reads image files, which NaFlex's preprocessing would turn into patch rows:
    // refused by name.
    let image = dir.path().join("x.png");
    std::fs::write(&image, b"not read").unwrap();
    let o = vitrt(
        &[
            "classify",
            "--model",
            model.to_str().unwrap(),
            "--device",
            "cpu",
            image.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("SigLIP 2's NaFlex"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    // infer runs one runner: several devices are refused, naming the commands that take them.
    let o = vitrt(
        &[
            "infer",
            "--model",
            model.to_str().unwrap(),
            "--input",
            reference.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--device",
            "cuda:0,1",
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "runs SigLIP 2 NaFlex on one device");
    assert!(stderr(&o).contains("`vitrt embed`"), "{}", stderr(&o));
}

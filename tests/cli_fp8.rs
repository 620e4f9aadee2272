//! FP8 from the command line, on the CPU's emulation: `vitrt quantize-report` on the shipped
//! digits model, its choice read back by `--dtype fp8 --fp8-layers`, and the refusals.

mod common;

use common::*;

fn classify_json(extra: &[&str], dir: &std::path::Path) -> Vec<serde_json::Value> {
    let model = root().join("examples/digits-vit");
    let mut args = vec![
        "classify",
        "--model",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        "--format",
        "jsonl",
    ];
    args.extend_from_slice(extra);
    let images = digits();
    args.extend(images.iter().map(|p| p.to_str().unwrap()));
    let o = vitrt(&args, dir);
    assert!(o.status.success(), "{}", stderr(&o));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn top1(rows: &[serde_json::Value]) -> Vec<String> {
    rows.iter()
        .map(|r| r["predictions"][0]["label"].as_str().unwrap().to_string())
        .collect()
}

/// The top-1 labels of `rows` on the images where `reference`'s two most probable classes are
/// at least 0.1 apart.
fn confident_top1(rows: &[serde_json::Value], reference: &[serde_json::Value]) -> Vec<String> {
    let p = |r: &serde_json::Value, i: usize| r["predictions"][i]["probability"].as_f64().unwrap();
    top1(rows)
        .into_iter()
        .zip(reference)
        .filter(|(_, r)| p(r, 0) - p(r, 1) >= 0.1)
        .map(|(label, _)| label)
        .collect()
}

#[test]
fn the_report_chooses_layers_that_classify_then_reads() {
    let dir = temp();
    let choice = dir.path().join("fp8.json");
    let model = root().join("examples/digits-vit");
    let digits = root().join("examples/digits");
    let o = vitrt(
        &[
            "quantize-report",
            "--model",
            model.to_str().unwrap(),
            "--device",
            "cpu",
            "--max-cosine-drop",
            "0.001",
            "--output",
            choice.to_str().unwrap(),
            digits.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let table = String::from_utf8(o.stdout).unwrap();
    // The four blocks' QKV and first MLP layers (read from a layernorm) have a row each, and
    // the three runs a summary line.
    assert_eq!(table.matches("layer.").count(), 8, "{table}");
    assert!(table.contains("layer.3.intermediate+activation"), "{table}");
    for run in ["f16", "every candidate fp8 (8)", "chosen ("] {
        assert!(table.contains(run), "{table}");
    }
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&choice).unwrap()).unwrap();
    assert_eq!(file["format"], "vitrt-fp8-layers");
    let (keep, fp8) = (
        file["keep"].as_array().unwrap(),
        file["fp8"].as_array().unwrap(),
    );
    assert_eq!(keep.len() + fp8.len(), 8);
    assert!(file["measured"]["mean_cosine"].as_f64().unwrap() >= 0.999);
    assert_eq!(file["measured"]["images"], 40);

    // The choice classifies the digits as f16 does.
    let half = classify_json(&["--dtype", "f16"], dir.path());
    let chosen = classify_json(
        &["--dtype", "fp8", "--fp8-layers", choice.to_str().unwrap()],
        dir.path(),
    );
    let default = classify_json(&["--dtype", "fp8"], dir.path());
    assert_eq!(top1(&chosen), top1(&half));
    assert_eq!(top1(&default), top1(&half));
    // FP8 rounds: the probabilities are not f16's.
    assert_ne!(chosen, half);
}

#[test]
fn fp8_flags_refuse_what_they_cannot_do() {
    let dir = temp();
    let model = root().join("examples/digits-vit");
    let image = &digits()[0];
    let classify = |extra: &[&str]| {
        let mut args = vec![
            "classify",
            "--model",
            model.to_str().unwrap(),
            "--device",
            "cpu",
        ];
        args.extend_from_slice(extra);
        args.push(image.to_str().unwrap());
        vitrt(&args, dir.path())
    };
    let choice = dir.path().join("choice.json");
    std::fs::write(&choice, "{}").unwrap();
    let path = choice.to_str().unwrap();
    assert_clean_failure(
        &classify(&["--dtype", "f16", "--fp8-layers", path]),
        "--fp8-layers goes with --dtype fp8",
    );
    assert_clean_failure(
        &classify(&["--dtype", "fp8", "--fp8-layers", path]),
        "not an FP8 choice",
    );
    // A choice naming a layer this model does not have (made for another model).
    std::fs::write(
        &choice,
        r#"{"format": "vitrt-fp8-layers", "version": 1, "model": "other",
            "keep": [], "fp8": ["encoder.layer.30.output+add"], "max_cosine_drop": 0.002,
            "measured": {"images": 1, "mean_cosine": 1.0, "worst_cosine": 1.0, "same_top1": 1}}"#,
    )
    .unwrap();
    assert_clean_failure(
        &classify(&["--dtype", "fp8", "--fp8-layers", path]),
        "encoder.layer.30.output+add",
    );
    assert_clean_failure(
        &classify(&["--dtype", "fp8", "--residual-dtype", "f32"]),
        "residual stream",
    );
    assert_usage_error(&classify(&["--dtype", "fp4"]), "fp8");
}

/// An FP8 choice file naming `fp8` as its FP8 layers.
fn choice_json(fp8: &[&str]) -> String {
    serde_json::json!({
        "format": "vitrt-fp8-layers", "version": 1, "model": "digits", "keep": [], "fp8": fp8,
        "max_cosine_drop": 0.002,
        "measured": {"images": 1, "mean_cosine": 1.0, "worst_cosine": 1.0, "same_top1": 1},
    })
    .to_string()
}

/// `classify_json` in FP8 with the static `scales` and a choice file naming `fp8` as its FP8
/// layers (written in `dir`).
fn classify_with_choice(
    scales: &str,
    fp8: &[&str],
    dir: &std::path::Path,
) -> Vec<serde_json::Value> {
    let choice = dir.join("named-choice.json");
    std::fs::write(&choice, choice_json(fp8)).unwrap();
    classify_json(
        &[
            "--dtype",
            "fp8",
            "--fp8-scales",
            scales,
            "--fp8-layers",
            choice.to_str().unwrap(),
        ],
        dir,
    )
}

/// `vitrt calibrate` on `images` for `model`, writing the scales to `out`.
fn calibrate(
    model: &std::path::Path,
    out: &std::path::Path,
    images: &[&std::path::Path],
    dir: &std::path::Path,
) -> std::process::Output {
    calibrate_with(model, out, images, &[], dir)
}

/// `vitrt calibrate` with `extra` flags.
fn calibrate_with(
    model: &std::path::Path,
    out: &std::path::Path,
    images: &[&std::path::Path],
    extra: &[&str],
    dir: &std::path::Path,
) -> std::process::Output {
    let mut args = extra.to_vec();
    args.splice(
        0..0,
        [
            "calibrate",
            "--model",
            model.to_str().unwrap(),
            "--device",
            "cpu",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    args.push("--images");
    args.extend(images.iter().map(|p| p.to_str().unwrap()));
    vitrt(&args, dir)
}

#[test]
fn calibrate_saves_a_choice_that_runs_with_the_scales_follow() {
    let dir = temp();
    let model = root().join("examples/digits-vit");
    let digits = root().join("examples/digits");
    let scales = dir.path().join("scales.json");
    let o = calibrate_with(
        &model,
        &scales,
        &[&digits],
        &["--max-cosine-drop", "0.0005"],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let table = String::from_utf8(o.stdout).unwrap();
    // The scales' rows, then the choice's: every linear layer of the blocks weighed.
    assert!(table.contains("scale"), "{table}");
    assert!(table.contains("every candidate fp8 (16)"), "{table}");
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&scales).unwrap()).unwrap();
    let choice = &file["choice"];
    let fp8: Vec<&str> = choice["fp8"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(fp8.len() + choice["keep"].as_array().unwrap().len(), 16);
    assert!(!fp8.is_empty(), "{file}");
    assert!(choice["measured"]["mean_cosine"].as_f64().unwrap() >= 1.0 - 0.0005);
    assert_eq!(choice["max_cosine_drop"], 0.0005);

    // A run given the scales alone follows the saved choice: the bits of that choice named.
    let path = scales.to_str().unwrap();
    let followed = classify_json(&["--dtype", "fp8", "--fp8-scales", path], dir.path());
    let named = classify_with_choice(path, &fp8, dir.path());
    assert_eq!(followed, named);

    // A budget that is no cosine drop is refused before anything runs.
    let o = calibrate_with(
        &model,
        &scales,
        &[&digits],
        &["--max-cosine-drop", "2"],
        dir.path(),
    );
    assert_clean_failure(&o, "not a drop of a cosine similarity");
}

#[test]
fn calibrated_scales_classify_as_f16_does() {
    let dir = temp();
    let model = root().join("examples/digits-vit");
    // The shipped digits and a file that is no image, which is reported and skipped.
    let images = dir.path().join("images");
    std::fs::create_dir(&images).unwrap();
    for digit in digits() {
        std::fs::copy(&digit, images.join(digit.file_name().unwrap())).unwrap();
    }
    std::fs::write(images.join("broken.png"), b"not a png").unwrap();
    let scales = dir.path().join("scales.json");
    let o = calibrate(&model, &scales, &[&images], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("skipping"), "{}", stderr(&o));
    assert!(stderr(&o).contains("broken.png"), "{}", stderr(&o));
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&scales).unwrap()).unwrap();
    assert_eq!(file["format"], "vitrt-fp8-scales");
    assert_eq!(file["images"], 40);
    // Every linear layer of the four blocks: QKV, attention output, both MLP layers.
    let layers = file["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 16);
    for layer in layers {
        let (amax, scale) = (
            layer["input_amax"].as_f64().unwrap(),
            layer["scale"].as_f64().unwrap(),
        );
        assert!(amax > 0.0, "{layer}");
        assert!(
            (scale - 2.0 * amax / 448.0).abs() <= 1e-6 * scale,
            "{layer}"
        );
    }

    let half = classify_json(&["--dtype", "f16"], dir.path());
    let path = scales.to_str().unwrap();
    let fixed = classify_json(&["--dtype", "fp8", "--fp8-scales", path], dir.path());
    let dynamic = classify_json(&["--dtype", "fp8"], dir.path());
    // The same class wherever f16 is not torn between two (digit-0106, a 6 that f16 calls a 1
    // at 0.51 against 0.47, goes to 6 with the default layers).
    assert_eq!(confident_top1(&fixed, &half), confident_top1(&half, &half));
    // Static scales round otherwise than per-row ones, and more layers are in FP8.
    assert_ne!(fixed, half);
    assert_ne!(fixed, dynamic);
    // Without a choice, every layer but the attention outputs is in FP8: the same bits as
    // that choice named.
    let names: Vec<&str> = layers
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .filter(|name| !name.contains("attention.output"))
        .collect();
    assert_eq!(names.len(), 12);
    let named = classify_with_choice(path, &names, dir.path());
    assert_eq!(fixed, named);

    // A choice file and the scales together: only the chosen layers in FP8.
    let choice = dir.path().join("choice.json");
    std::fs::write(
        &choice,
        r#"{"format": "vitrt-fp8-layers", "version": 1, "model": "digits",
            "keep": [], "fp8": ["layer.0.intermediate+activation", "layer.0.output+add"],
            "max_cosine_drop": 0.002,
            "measured": {"images": 1, "mean_cosine": 1.0, "worst_cosine": 1.0, "same_top1": 1}}"#,
    )
    .unwrap();
    let chosen = classify_json(
        &[
            "--dtype",
            "fp8",
            "--fp8-layers",
            choice.to_str().unwrap(),
            "--fp8-scales",
            path,
        ],
        dir.path(),
    );
    assert_eq!(top1(&chosen), top1(&half));
}

#[test]
fn scales_for_another_model_or_malformed_are_refused() {
    let dir = temp();
    let digits_model = root().join("examples/digits-vit");
    let other = fixture("tiny-gelu");
    let other_images = root().join("tests/fixtures/images");
    let scales = dir.path().join("other.json");
    let o = calibrate(&other, &scales, &[&other_images], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let image = &digits()[0];
    let classify = |scales: &std::path::Path, extra: &[&str]| {
        let mut args = vec![
            "classify",
            "--model",
            digits_model.to_str().unwrap(),
            "--device",
            "cpu",
            "--fp8-scales",
            scales.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        args.push(image.to_str().unwrap());
        vitrt(&args, dir.path())
    };
    assert_clean_failure(
        &classify(&scales, &["--dtype", "fp8"]),
        "calibrated for another model",
    );
    assert_clean_failure(
        &classify(&scales, &["--dtype", "f16"]),
        "--fp8-scales goes with --dtype fp8",
    );

    // The digits' own file with one layer taken out.
    let own = dir.path().join("own.json");
    let o = calibrate(&digits_model, &own, &[image.as_path()], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let mut file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&own).unwrap()).unwrap();
    file["layers"].as_array_mut().unwrap().remove(3);
    let missing = dir.path().join("missing.json");
    std::fs::write(&missing, file.to_string()).unwrap();
    assert_clean_failure(
        &classify(&missing, &["--dtype", "fp8"]),
        "no scale for this model's layer \"layer.0.output+add\"",
    );

    let malformed = dir.path().join("malformed.json");
    std::fs::write(&malformed, "{\"format\": \"vitrt-fp8-scales\"").unwrap();
    assert_clean_failure(
        &classify(&malformed, &["--dtype", "fp8"]),
        "not an FP8 scales file",
    );
    let future_version = dir.path().join("choice.json");
    std::fs::write(
        &future_version,
        r#"{"format": "vitrt-fp8-scales", "version": 2, "model": "m", "images": 1, "margin": 2.0, "layers": []}"#,
    )
    .unwrap();
    assert_clean_failure(&classify(&future_version, &["--dtype", "fp8"]), "version 2");

    // calibrate's own refusals.
    let nothing = dir.path().join("nothing");
    std::fs::create_dir(&nothing).unwrap();
    std::fs::write(nothing.join("broken.png"), b"no").unwrap();
    assert_clean_failure(
        &calibrate(
            &digits_model,
            &dir.path().join("x.json"),
            &[&nothing],
            dir.path(),
        ),
        "read no image",
    );
    let o = vitrt(
        &[
            "calibrate",
            "--model",
            digits_model.to_str().unwrap(),
            "--device",
            "cpu",
            "--dtype",
            "f16",
            "--out",
            "x.json",
            "--images",
            image.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "runs the model in f32");
}

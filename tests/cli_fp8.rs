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

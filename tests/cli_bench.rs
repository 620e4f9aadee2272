//! `vitrt bench`, `vitrt profile` and `vitrt tune` end to end: what they report on the CPU
//! (or say they cannot do), and their report files checked before the work.

mod common;

use common::*;

#[test]
fn bench_kernels_explains_what_it_cannot_do() {
    let dir = temp();
    let bench = |extra: &[&str]| {
        let mut args = vec!["bench", "kernels"];
        args.extend_from_slice(extra);
        vitrt(&args, dir.path())
    };
    let o = bench(&["--device", "cpu"]);
    assert_clean_failure(&o, "use --device cuda or cuda:N");
    assert_eq!(stderr(&o).lines().count(), 1, "one line: {}", stderr(&o));
    assert_clean_failure(&bench(&["--device", "tpu"]), "unknown device \"tpu\"");
    assert_clean_failure(&bench(&["--dtype", "f64"]), "unknown dtype \"f64\"");
    assert_clean_failure(&bench(&["--reps", "5"]), "at least 20");
    assert_clean_failure(&bench(&["--filter", "no such case"]), "no case matches");
    let missing = dir.path().join("no/such/folder/out.json");
    assert_clean_failure(
        &bench(&["--json", missing.to_str().unwrap()]),
        "is not a folder",
    );
    // Without a GPU: no driver; with one: no device 7 (or NVRTC missing). Never a panic.
    let o = bench(&["--device", "cuda:7", "--filter", "add/vit-b16/b1"]);
    assert_clean_failure(&o, "cuda:7");
    assert!(
        stderr(&o).contains("CUDA") || stderr(&o).contains("NVRTC"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn profile_times_every_node_and_writes_json_and_a_trace() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let (json, trace) = (dir.path().join("p.json"), dir.path().join("t.json"));
    let o = vitrt(
        &[
            "profile",
            "--model",
            model.to_str().unwrap(),
            "--batch-size",
            "2",
            "--reps",
            "5",
            "--json",
            json.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
        ],
        dir.path(),
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", stderr(&o));
    assert!(
        stdout.contains("layer.0.attention.qkv") && stdout.contains("share"),
        "{stdout}"
    );
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let nodes = profile["nodes"].as_array().unwrap();
    assert!(nodes.len() > 10);
    let shares: f64 = nodes.iter().map(|n| n["share"].as_f64().unwrap()).sum();
    assert!((shares - 1.0).abs() < 1e-6, "shares add up to {shares}");
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    assert_eq!(trace["traceEvents"].as_array().unwrap().len(), nodes.len());

    let o = vitrt(
        &[
            "profile",
            "--model",
            model.to_str().unwrap(),
            "--batch-size",
            "0",
        ],
        dir.path(),
    );
    assert_usage_error(&o, "is not a batch size: use 1 to 65536 images");
}

#[test]
fn bench_model_reports_each_batch_size() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let json = dir.path().join("m.json");
    let o = vitrt(
        &[
            "bench",
            "model",
            "--model",
            model.to_str().unwrap(),
            "--batch-sizes",
            "1,3",
            "--reps",
            "5",
            "--json",
            json.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["schema"], "vitrt-bench/1");
    let rows = report["models"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (row, batch) in rows.iter().zip([1, 3]) {
        assert_eq!(row["batch"], batch);
        let median = row["median_ms"].as_f64().unwrap();
        let ips = row["images_per_s"].as_f64().unwrap();
        assert!((ips - batch as f64 / (median * 1e-3)).abs() < 1e-6 * ips);
        // The memory account: weights, the plan's arena inside the one the backend holds, and
        // the total of its parts; the driver's figures only where the run had a device.
        let memory = &row["memory"];
        let bytes = |key: &str| {
            memory[key]
                .as_u64()
                .unwrap_or_else(|| panic!("{key}: {row}"))
        };
        assert!(bytes("weights_bytes") > 0, "{row}");
        assert!(bytes("arena_plan_bytes") > 0, "{row}");
        assert!(
            bytes("arena_plan_bytes") <= bytes("arena_unshared_bytes"),
            "{row}"
        );
        assert!(
            bytes("arena_plan_bytes") <= bytes("arena_reserved_bytes"),
            "{row}"
        );
        assert_eq!(
            bytes("allocated_bytes"),
            bytes("weights_bytes")
                + bytes("arena_reserved_bytes")
                + bytes("workspace_bytes")
                + bytes("staging_bytes"),
            "{row}"
        );
        // Clocks are read through NVML on a GPU only: the key is there, null on the CPU.
        if memory["device"].is_null() {
            assert!(row.get("clocks").is_some_and(|c| c.is_null()), "{row}");
        }
        if !memory["device"].is_null() {
            assert!(memory["device"]["peak_bytes"].is_i64(), "{row}");
            assert!(
                bytes("allocated_peak_bytes") >= bytes("allocated_bytes"),
                "{row}"
            );
        }
    }
    let arena = |i: usize| rows[i]["memory"]["arena_plan_bytes"].as_u64().unwrap();
    assert!(arena(1) > arena(0), "3 images need more than 1");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("arena plan"), "{stdout}");
    let o = vitrt(
        &[
            "bench",
            "model",
            "--model",
            model.to_str().unwrap(),
            "--batch-sizes",
            "0",
        ],
        dir.path(),
    );
    assert_usage_error(&o, "is not a batch size: use 1 to 65536 images");
}

/// SigLIP 2 NaFlex (the fixture: patch 4, max_num_patches 24): batches of the mix of aspect
/// ratios, each image's grid within 24 patches, the time per image in every row.
#[test]
fn bench_model_times_naflex_batches_of_mixed_aspect_ratios() {
    let dir = temp();
    let model = fixture("tiny-gelu").join("../../naflex/siglip2-naflex");
    let json = dir.path().join("naflex.json");
    let o = vitrt(
        &[
            "bench",
            "model",
            "--model",
            model.to_str().unwrap(),
            "--batch-sizes",
            "1,4",
            "--reps",
            "5",
            "--json",
            json.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = report["models"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (row, batch) in rows.iter().zip([1, 4]) {
        assert_eq!(row["batch"], batch);
        let median = row["median_ms"].as_f64().unwrap();
        let per_image = row["per_image_ms"].as_f64().unwrap();
        assert!(
            (per_image - median / batch as f64).abs() < 1e-9 * median,
            "{row}"
        );
        assert_eq!(row["naflex"]["max_num_patches"], 24);
        let grids = row["naflex"]["grids"].as_array().unwrap();
        assert_eq!(grids.len(), batch);
        for grid in grids {
            let patches = grid[0].as_u64().unwrap() * grid[1].as_u64().unwrap();
            assert!((1..=24).contains(&patches), "{row}");
        }
    }
    // Images of different aspect ratios take different grids.
    assert_ne!(rows[1]["naflex"]["grids"][0], rows[1]["naflex"]["grids"][2]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("ms/image"), "{stdout}");
}

/// `vitrt profile` on SigLIP 2 NaFlex: `bench model`'s batch of mixed aspect ratios, timed node
/// by node; its nodes are the fixed-resolution SigLIP 2's of the same size, by name and in
/// order (the patch embedding a linear layer over patch rows instead), so the two tables can
/// be put side by side.
#[test]
fn profile_times_naflex_node_by_node_as_the_fixed_model() {
    let dir = temp();
    let naflex = fixture("tiny-gelu").join("../../naflex/siglip2-naflex-zero-shot");
    let fixed = fixture("siglip2-zero-shot");
    let profile = |model: &std::path::Path, name: &str| {
        let json = dir.path().join(name);
        let o = vitrt(
            &[
                "profile",
                "--model",
                model.to_str().unwrap(),
                "--device",
                "cpu",
                "--batch-size",
                "4",
                "--reps",
                "5",
                "--json",
                json.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        (report, String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let (ours, stdout) = profile(&naflex, "naflex.json");
    assert!(
        stdout.contains("each image at its own patch grid") && stdout.contains("padded to 24"),
        "{stdout}"
    );
    assert_eq!(ours["naflex"]["max_num_patches"], 24);
    // Clocks are read through NVML on a GPU only: the key is there, null on the CPU.
    assert!(ours.get("clocks").is_some_and(|c| c.is_null()), "{ours}");
    let grids = ours["naflex"]["grids"].as_array().unwrap();
    assert_eq!(grids.len(), 4);
    assert_ne!(grids[0], grids[2], "images of different aspect ratios");
    let nodes = ours["nodes"].as_array().unwrap();
    let shares: f64 = nodes.iter().map(|n| n["share"].as_f64().unwrap()).sum();
    assert!((shares - 1.0).abs() < 1e-6, "shares add up to {shares}");
    assert!(nodes
        .iter()
        .all(|n| n["median_ms"].as_f64().unwrap() >= 0.0));

    let (theirs, _) = profile(&fixed, "fixed.json");
    let named = |report: &serde_json::Value| -> Vec<(String, String)> {
        report["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| {
                (
                    n["node"].as_str().unwrap().to_string(),
                    n["op"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let (ours, theirs) = (named(&ours), named(&theirs));
    assert_eq!(
        ours.iter().map(|n| &n.0).collect::<Vec<_>>(),
        theirs.iter().map(|n| &n.0).collect::<Vec<_>>()
    );
    for (a, b) in ours.iter().zip(&theirs) {
        if a.0 == "embeddings" {
            assert_eq!((a.1.as_str(), b.1.as_str()), ("linear", "patch_embed"));
        } else {
            assert_eq!(a, b);
        }
    }
}

#[test]
fn tune_explains_what_it_cannot_do() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let tune = |extra: &[&str]| {
        let mut args = vec!["tune", "--model", model.to_str().unwrap()];
        args.extend_from_slice(extra);
        vitrt(&args, dir.path())
    };
    assert_usage_error(&tune(&["--batch-sizes", "1,0"]), "is not a batch size");
    assert_clean_failure(&tune(&["--reps", "2"]), "at least 5");
    let o = tune(&["--device", "cpu"]);
    assert_clean_failure(&o, "use --device cuda or cuda:N");
    assert_eq!(stderr(&o).lines().count(), 1, "one line: {}", stderr(&o));
    assert_clean_failure(&tune(&["--device", "tpu"]), "unknown device \"tpu\"");
    assert_clean_failure(
        &tune(&["--dtype", "f16", "--residual-dtype", "bf16"]),
        "not bf16",
    );
    let missing = dir.path().join("no/such/folder/tune.json");
    assert_clean_failure(
        &tune(&["--json", missing.to_str().unwrap()]),
        "is not a folder",
    );
    let o = vitrt(
        &[
            "tune",
            "--model",
            dir.path().join("nothing").to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "nothing");
    // Without a GPU: no driver; with one: no device 7 (or NVRTC missing). Never a panic.
    let o = tune(&["--device", "cuda:7"]);
    assert_clean_failure(&o, "cuda:7");
    assert!(
        stderr(&o).contains("CUDA") || stderr(&o).contains("NVRTC"),
        "{}",
        stderr(&o)
    );
    // A value clap cannot parse is a usage error (exit 2, as for every subcommand).
    let o = tune(&["--dtype", "f64"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("unknown dtype \"f64\""),
        "{}",
        stderr(&o)
    );
}

#[test]
fn report_files_are_checked_before_the_work() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let read_only = dir.path().join("ro.json");
    std::fs::write(&read_only, "keep").unwrap();
    let mut permissions = std::fs::metadata(&read_only).unwrap().permissions();
    permissions.set_readonly(true);
    std::fs::set_permissions(&read_only, permissions).unwrap();
    for flag in ["--json", "--trace"] {
        let o = vitrt(
            &[
                "profile",
                "--model",
                model.to_str().unwrap(),
                "--batch-size",
                "1",
                "--reps",
                "5",
                flag,
                read_only.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert_clean_failure(&o, "read-only (--force replaces it)");
        assert!(!String::from_utf8_lossy(&o.stdout).contains("forward"));
    }
    assert_eq!(std::fs::read(&read_only).unwrap(), b"keep");
    let o = vitrt(
        &[
            "bench",
            "model",
            "--model",
            model.to_str().unwrap(),
            "--json",
            "-",
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "cannot write to `-` here");
    let o = vitrt(
        &["bench", "kernels", "--json", dir.path().to_str().unwrap()],
        dir.path(),
    );
    assert_clean_failure(&o, "it is a folder");
}

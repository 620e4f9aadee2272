//! Model resolution without the network: local folders, and hub ids from a fake hub cache laid
//! out as hf-hub and the Python tools write it. Every test passes its cache folder explicitly
//! (no process-wide environment changes), and points the endpoint at a closed local port, so a
//! request that should not happen shows up as a `Hub` error instead of reaching the internet.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use vitrt_weights::{
    resolve_model, resolve_model_with, Checkpoint, HubSettings, ModelOrigin, ResolveOptions,
    WeightsError,
};

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
const OTHER_COMMIT: &str = "fedcba9876543210fedcba9876543210fedcba98";

fn settings(cache_dir: &Path, offline: bool) -> HubSettings {
    HubSettings {
        cache_dir: cache_dir.to_path_buf(),
        // Port 9 (discard) on loopback: nothing listens, so any request fails at once.
        endpoint: "http://127.0.0.1:9".to_string(),
        token: None,
        offline,
        progress: false,
    }
}

fn offline() -> ResolveOptions {
    ResolveOptions {
        revision: None,
        offline: true,
    }
}

/// Creates `hub/models--org--name/refs/<revision>` -> commit and returns the snapshot folder.
fn cached_repo(hub: &Path, repo_id: &str, revision: &str, commit: &str) -> PathBuf {
    let repo_dir = hub.join(format!("models--{}", repo_id.replace('/', "--")));
    write_file(&repo_dir.join("refs").join(revision), commit.as_bytes());
    let snapshot = repo_dir.join("snapshots").join(commit);
    std::fs::create_dir_all(&snapshot).unwrap();
    snapshot
}

fn small_model_bytes() -> Vec<u8> {
    safetensors_bytes(&[f32_tensor("vit.w", &[2], &[1.0, -1.0])], 0)
}

fn fill_single_file_model(snapshot: &Path) {
    write_file(&snapshot.join("config.json"), br#"{"model_type":"vit"}"#);
    write_file(&snapshot.join("preprocessor_config.json"), b"{}");
    write_file(&snapshot.join("model.safetensors"), &small_model_bytes());
}

fn resolve_err(model: &str, opts: &ResolveOptions, settings: &HubSettings) -> WeightsError {
    match resolve_model_with(model, opts, settings) {
        Ok(files) => panic!("expected `{model}` to fail, resolved {files:?}"),
        Err(e) => e,
    }
}

fn assert_mentions(error: &WeightsError, needles: &[&str]) {
    let text = error.to_string();
    for needle in needles {
        assert!(text.contains(needle), "`{needle}` missing from: {text}");
    }
}

#[test]
fn offline_finds_a_cached_single_file_model() {
    let hub = tempfile::tempdir().unwrap();
    let snapshot = cached_repo(hub.path(), "google/vit-tiny", "main", COMMIT);
    fill_single_file_model(&snapshot);

    let files =
        resolve_model_with("google/vit-tiny", &offline(), &settings(hub.path(), false)).unwrap();
    assert_eq!(files.dir, snapshot);
    assert_eq!(files.config, snapshot.join("config.json"));
    assert_eq!(
        files.preprocessor_config,
        Some(snapshot.join("preprocessor_config.json"))
    );
    assert_eq!(files.weights, snapshot.join("model.safetensors"));
    assert_eq!(
        files.origin,
        ModelOrigin::Hub {
            repo: "google/vit-tiny".into(),
            revision: "main".into(),
            commit: COMMIT.into()
        }
    );
    let checkpoint = Checkpoint::open(&files.dir).unwrap();
    assert_eq!(checkpoint.load_f32("vit.w").unwrap(), [1.0, -1.0]);
}

#[test]
fn offline_mode_from_the_settings_alone() {
    // HubSettings::offline is what HF_HUB_OFFLINE=1 sets; the options say online.
    let hub = tempfile::tempdir().unwrap();
    let snapshot = cached_repo(hub.path(), "org/m", "main", COMMIT);
    fill_single_file_model(&snapshot);
    let files = resolve_model_with(
        "org/m",
        &ResolveOptions::default(),
        &settings(hub.path(), true),
    )
    .unwrap();
    assert_eq!(files.dir, snapshot);
}

#[test]
fn ref_files_with_a_trailing_newline_still_resolve() {
    let hub = tempfile::tempdir().unwrap();
    let snapshot = cached_repo(hub.path(), "org/m", "main", &format!("{COMMIT}\n"));
    // The snapshot is named by the trimmed hash.
    let snapshot = snapshot.parent().unwrap().join(COMMIT);
    fill_single_file_model(&snapshot);
    let files = resolve_model_with("org/m", &offline(), &settings(hub.path(), false)).unwrap();
    assert_eq!(files.dir, snapshot);
}

#[cfg(unix)]
#[test]
fn snapshot_links_into_blobs_as_the_real_cache_does() {
    let hub = tempfile::tempdir().unwrap();
    let snapshot = cached_repo(hub.path(), "org/linked", "main", COMMIT);
    let blobs = snapshot.parent().unwrap().parent().unwrap().join("blobs");
    write_file(&blobs.join("aaa"), br#"{"model_type":"vit"}"#);
    write_file(&blobs.join("bbb"), &small_model_bytes());
    std::os::unix::fs::symlink("../../blobs/aaa", snapshot.join("config.json")).unwrap();
    std::os::unix::fs::symlink("../../blobs/bbb", snapshot.join("model.safetensors")).unwrap();

    let files = resolve_model_with("org/linked", &offline(), &settings(hub.path(), false)).unwrap();
    assert_eq!(
        files.preprocessor_config, None,
        "the optional file may be absent"
    );
    assert_eq!(
        Checkpoint::open(&files.weights)
            .unwrap()
            .load_f32("vit.w")
            .unwrap(),
        [1.0, -1.0]
    );

    // A dangling link counts as not cached.
    std::fs::remove_file(blobs.join("bbb")).unwrap();
    let error = resolve_err("org/linked", &offline(), &settings(hub.path(), false));
    assert_mentions(&error, &["model.safetensors", "org/linked"]);
}

#[test]
fn offline_finds_a_cached_sharded_model() {
    let hub = tempfile::tempdir().unwrap();
    let snapshot = cached_repo(hub.path(), "org/big", "main", COMMIT);
    write_file(&snapshot.join("config.json"), b"{}");
    write_file(
        &snapshot.join("model.safetensors.index.json"),
        index_json(&[("a", "s1.safetensors"), ("b", "s2.safetensors")]).as_bytes(),
    );
    write_file(
        &snapshot.join("s1.safetensors"),
        &safetensors_bytes(&[f32_tensor("a", &[1], &[1.0])], 0),
    );
    write_file(
        &snapshot.join("s2.safetensors"),
        &safetensors_bytes(&[f32_tensor("b", &[1], &[2.0])], 0),
    );

    let files = resolve_model_with("org/big", &offline(), &settings(hub.path(), false)).unwrap();
    assert_eq!(files.weights, snapshot.join("model.safetensors.index.json"));
    assert_eq!(Checkpoint::open(&files.dir).unwrap().names(), ["a", "b"]);

    std::fs::remove_file(snapshot.join("s2.safetensors")).unwrap();
    let error = resolve_err("org/big", &offline(), &settings(hub.path(), false));
    assert!(matches!(error, WeightsError::NotCached { .. }), "{error:?}");
    assert_mentions(&error, &["s2.safetensors", "`org/big`", "`main`"]);
}

#[test]
fn offline_missing_weights_names_the_file_repo_and_revision() {
    let hub = tempfile::tempdir().unwrap();
    let snapshot = cached_repo(hub.path(), "org/partial", "v2", COMMIT);
    write_file(&snapshot.join("config.json"), b"{}");
    let opts = ResolveOptions {
        revision: Some("v2".into()),
        offline: true,
    };
    let error = resolve_err("org/partial", &opts, &settings(hub.path(), false));
    assert!(matches!(error, WeightsError::NotCached { .. }), "{error:?}");
    assert_mentions(
        &error,
        &["model.safetensors", "`org/partial`", "`v2`", "offline"],
    );

    // Only a PyTorch file cached: the message says safetensors are needed.
    write_file(&snapshot.join("pytorch_model.bin"), b"pickle");
    let error = resolve_err("org/partial", &opts, &settings(hub.path(), false));
    assert_mentions(
        &error,
        &["pytorch_model.bin", "safetensors weights are needed"],
    );
}

#[test]
fn offline_missing_config_is_named() {
    let hub = tempfile::tempdir().unwrap();
    let snapshot = cached_repo(hub.path(), "org/noconf", "main", COMMIT);
    write_file(&snapshot.join("model.safetensors"), &small_model_bytes());
    let error = resolve_err("org/noconf", &offline(), &settings(hub.path(), false));
    assert!(matches!(error, WeightsError::NotCached { .. }), "{error:?}");
    assert_mentions(&error, &["config.json", "`org/noconf`"]);
}

#[test]
fn offline_not_cached_fails_at_once_without_the_network() {
    let hub = tempfile::tempdir().unwrap();
    // Another model is cached; the asked one is not.
    fill_single_file_model(&cached_repo(hub.path(), "org/other", "main", COMMIT));
    let started = std::time::Instant::now();
    let error = resolve_err(
        "google/vit-base-patch16-224",
        &offline(),
        &settings(hub.path(), false),
    );
    // A request would have produced a `Hub` error (the endpoint is a closed port).
    assert!(matches!(error, WeightsError::NotCached { .. }), "{error:?}");
    assert_mentions(
        &error,
        &["`google/vit-base-patch16-224`", "`main`", "config.json"],
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(2));

    // A revision other than the cached one is not cached either.
    let opts = ResolveOptions {
        revision: Some("dev".into()),
        offline: true,
    };
    let error = resolve_err("org/other", &opts, &settings(hub.path(), false));
    assert!(matches!(error, WeightsError::NotCached { .. }), "{error:?}");
    assert_mentions(&error, &["`dev`"]);
}

#[test]
fn online_attempt_is_visible_as_a_hub_error() {
    // The counterpart of the test above: with offline off, the closed endpoint is contacted
    // and fails, proving the offline tests would notice a request.
    let hub = tempfile::tempdir().unwrap();
    let error = resolve_err(
        "org/x",
        &ResolveOptions::default(),
        &settings(hub.path(), false),
    );
    assert!(matches!(error, WeightsError::Hub { .. }), "{error:?}");
    assert_mentions(&error, &["`org/x`", "HF_HUB_OFFLINE"]);
}

#[test]
fn a_commit_hash_revision_finds_its_snapshot_without_a_ref() {
    let hub = tempfile::tempdir().unwrap();
    let main_snapshot = cached_repo(hub.path(), "org/m", "main", COMMIT);
    fill_single_file_model(&main_snapshot);
    let old_snapshot = main_snapshot.parent().unwrap().join(OTHER_COMMIT);
    fill_single_file_model(&old_snapshot);

    let opts = ResolveOptions {
        revision: Some(OTHER_COMMIT.into()),
        offline: true,
    };
    let files = resolve_model_with("org/m", &opts, &settings(hub.path(), false)).unwrap();
    assert_eq!(files.dir, old_snapshot);
    let files = resolve_model_with("org/m", &offline(), &settings(hub.path(), false)).unwrap();
    assert_eq!(files.dir, main_snapshot);
}

#[test]
fn a_corrupt_ref_is_an_error_not_a_path() {
    let hub = tempfile::tempdir().unwrap();
    write_file(&hub.path().join("models--org--m/refs/main"), b"../../x");
    let error = resolve_err("org/m", &offline(), &settings(hub.path(), false));
    assert!(
        matches!(error, WeightsError::CorruptFile { .. }),
        "{error:?}"
    );
}

#[test]
fn bad_model_arguments_are_refused_before_any_lookup() {
    let hub = tempfile::tempdir().unwrap();
    let online = settings(hub.path(), false);
    for model in ["./nope", "a/b/c", "", "../x", "org/na me"] {
        let error = resolve_err(model, &ResolveOptions::default(), &online);
        assert!(
            matches!(error, WeightsError::InvalidModelSource { .. }),
            "{model}: {error:?}"
        );
        assert_mentions(
            &error,
            &["neither an existing folder nor a valid hub model id"],
        );
    }
    let error = resolve_model("a/b/c", &ResolveOptions::default()).unwrap_err();
    assert!(
        matches!(error, WeightsError::InvalidModelSource { .. }),
        "{error:?}"
    );

    let bad_revision = ResolveOptions {
        revision: Some("../../x".into()),
        offline: true,
    };
    let error = resolve_err("org/m", &bad_revision, &online);
    assert!(
        matches!(error, WeightsError::InvalidRevision { .. }),
        "{error:?}"
    );
}

#[test]
fn a_file_is_not_a_model_folder() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("model.safetensors");
    write_file(&file, &small_model_bytes());
    let error = resolve_model(file.to_str().unwrap(), &ResolveOptions::default()).unwrap_err();
    assert!(
        matches!(error, WeightsError::InvalidModelSource { .. }),
        "{error:?}"
    );
    assert_mentions(&error, &["is a file"]);
}

#[test]
fn local_folders_are_used_as_is() {
    let dir = tempfile::tempdir().unwrap();
    fill_single_file_model(dir.path());
    let model = dir.path().to_str().unwrap();
    // Offline or not, a folder never involves the hub.
    for opts in [ResolveOptions::default(), offline()] {
        let files = resolve_model(model, &opts).unwrap();
        assert_eq!(files.dir, dir.path());
        assert_eq!(files.origin, ModelOrigin::LocalFolder);
        assert_eq!(files.weights, dir.path().join("model.safetensors"));
        assert_eq!(
            files.preprocessor_config,
            Some(dir.path().join("preprocessor_config.json"))
        );
    }
}

#[test]
fn local_folder_errors() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().to_str().unwrap();
    write_file(&dir.path().join("model.safetensors"), &small_model_bytes());
    let error = resolve_model(model, &ResolveOptions::default()).unwrap_err();
    assert!(
        matches!(error, WeightsError::MissingConfig { .. }),
        "{error:?}"
    );
    assert_mentions(&error, &["config.json", model]);

    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    write_file(&dir.path().join("config.json"), b"{}");
    write_file(&dir.path().join("pytorch_model.bin"), b"pickle");
    let error = resolve_model(model, &ResolveOptions::default()).unwrap_err();
    assert!(
        matches!(error, WeightsError::NoSafetensorsWeights { .. }),
        "{error:?}"
    );
    assert_mentions(&error, &["safetensors weights are needed"]);

    write_file(
        &dir.path().join("model.safetensors.index.json"),
        index_json(&[("a", "s1.safetensors")]).as_bytes(),
    );
    let error = resolve_model(model, &ResolveOptions::default()).unwrap_err();
    assert!(
        matches!(error, WeightsError::ShardMissing { .. }),
        "{error:?}"
    );
    assert_mentions(&error, &["s1.safetensors"]);

    write_file(&dir.path().join("model.safetensors.index.json"), b"[]");
    let error = resolve_model(model, &ResolveOptions::default()).unwrap_err();
    assert!(
        matches!(error, WeightsError::BrokenIndex { .. }),
        "{error:?}"
    );
}

//! Every family's fixture as a hub id from the Hugging Face cache, offline: the cache laid out
//! as the Python tools write it (`hub/models--ORG--NAME/refs/main` naming a snapshot under
//! `snapshots/`), and `vitrt infer --model ORG/NAME --offline` giving the same outputs as the
//! local folder.

mod common;

use common::*;
use std::path::Path;

/// Copies `fixture`'s files into a cache snapshot of `repo` under `hf_home`.
fn cache_fixture(fixture: &str, repo: &str, hf_home: &Path) {
    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
    let repo_dir = hf_home
        .join("hub")
        .join(format!("models--{}", repo.replace('/', "--")));
    let snapshot = repo_dir.join("snapshots").join(COMMIT);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo_dir.join("refs")).unwrap();
    std::fs::write(repo_dir.join("refs/main"), COMMIT).unwrap();
    for entry in std::fs::read_dir(common::fixture(fixture)).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap();
        // The reference is the test's, not the checkpoint's.
        if name.to_string_lossy().contains("reference") {
            continue;
        }
        std::fs::copy(&path, snapshot.join(name)).unwrap();
    }
}

#[test]
fn every_family_loads_from_the_hub_cache_offline() {
    let home = temp();
    let work = temp();
    for family in [
        "deit-distilled",
        "dinov2-registers-swiglu",
        "clip-dual-tower",
        "siglip-vision-head",
        "timm-vit-layerscale",
    ] {
        let repo = format!("vitrt-test/{family}");
        cache_fixture(family, &repo, home.path());
        let input = common::fixture(family).join("reference.safetensors");
        let mut outputs = Vec::new();
        for (model, name) in [
            (repo.clone(), "hub"),
            (common::fixture(family).display().to_string(), "dir"),
        ] {
            let out = work.path().join(format!("{family}-{name}.safetensors"));
            let o = vitrt(
                &[
                    "infer",
                    "--model",
                    &model,
                    "--offline",
                    "--device",
                    "cpu",
                    "--input",
                    input.to_str().unwrap(),
                    "--output",
                    out.to_str().unwrap(),
                ],
                home.path(),
            );
            assert!(o.status.success(), "{family} from {name}: {}", stderr(&o));
            outputs.push(vitrt_weights::read_f32_tensors(&out).unwrap());
        }
        assert_eq!(
            outputs[0], outputs[1],
            "{family}: the cached copy gives other outputs"
        );
    }
}

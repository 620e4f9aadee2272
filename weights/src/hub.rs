//! Finding a model's files: a local folder as is, or a Hugging Face hub repository through
//! hf-hub's cache (the layout the Python tools share, so a model downloaded by either is found
//! by both).
//!
//! Cache layout, under the hub cache folder (`$HF_HOME/hub`):
//! `models--org--name/refs/<revision>` holds a commit hash, and
//! `models--org--name/snapshots/<commit>/<file>` holds (a link to) each file of that commit.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use hf_hub::api::sync::{ApiBuilder, ApiError, ApiRepo};
use hf_hub::{Cache, Repo, RepoType};

use crate::checkpoint::{
    no_safetensors_in, read_shard_names, INDEX_FILE_NAME, OPEN_CLIP_FILE_NAME,
    OPEN_CLIP_PYTORCH_FILE_NAME, PYTORCH_FILE_NAME, SINGLE_FILE_NAME,
};
use crate::error::WeightsError;

pub const CONFIG_FILE_NAME: &str = "config.json";
pub const PREPROCESSOR_CONFIG_FILE_NAME: &str = "preprocessor_config.json";
/// The config of open_clip's own checkpoints (`save_for_hf`'s `HF_CONFIG_NAME`), read where a
/// folder has no `config.json`.
pub const OPEN_CLIP_CONFIG_FILE_NAME: &str = "open_clip_config.json";
/// The text tokenizer's files of CLIP and SigLIP checkpoints (zero-shot labels, text
/// embeddings), fetched with the model when the repository has them: the fast tokenizer's
/// `tokenizer.json`, SentencePiece's `spiece.model` (SigLIP's only tokenizer file), and the
/// configs that name the special tokens. A few MB, next to hundreds of weights.
pub const TOKENIZER_FILE_NAMES: [&str; 4] = [
    "tokenizer.json",
    "spiece.model",
    "tokenizer_config.json",
    "special_tokens_map.json",
];
const DEFAULT_REVISION: &str = "main";
const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
// Hub ids are at most 96 characters (the limit the hub itself enforces).
const MAX_REPO_ID_LEN: usize = 96;

/// How to resolve a hub id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolveOptions {
    /// Branch, tag or commit hash; `main` when `None`.
    pub revision: Option<String>,
    /// Use the local cache only, never the network (also turned on by `HF_HUB_OFFLINE=1`).
    pub offline: bool,
}

/// Where a model's files came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelOrigin {
    LocalFolder,
    Hub {
        repo: String,
        revision: String,
        /// The commit the revision resolved to; the snapshot folder is named after it.
        commit: String,
    },
}

/// The files of one model, all in one folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFiles {
    /// The folder holding `config.json` and the weights (for the hub: the snapshot folder).
    pub dir: PathBuf,
    pub config: PathBuf,
    /// `preprocessor_config.json`, when the model has one.
    pub preprocessor_config: Option<PathBuf>,
    /// `model.safetensors`, or `model.safetensors.index.json` whose shards are all present in
    /// `dir`; either can be given to [`crate::Checkpoint::open`] (as can `dir`).
    pub weights: PathBuf,
    pub origin: ModelOrigin,
}

/// Where and how to reach the hub. [`HubSettings::from_env`] reads the standard variables;
/// tests build one by hand to point at a temporary cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSettings {
    /// The hub cache folder (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
    /// `~/.cache/huggingface/hub`). A token file, if any, is read from `../token` next to it.
    pub cache_dir: PathBuf,
    /// `$HF_ENDPOINT`, else `https://huggingface.co`.
    pub endpoint: String,
    /// `$HF_TOKEN`; when `None`, hf-hub reads the token file next to the cache, if there is one.
    pub token: Option<String>,
    /// `$HF_HUB_OFFLINE` set to 1/true/yes/on.
    pub offline: bool,
    /// Draw download progress bars (on stderr, only when it is a terminal).
    pub progress: bool,
}

impl HubSettings {
    pub fn from_env() -> Result<HubSettings, WeightsError> {
        let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        Ok(HubSettings {
            cache_dir: hub_cache_dir(var)?,
            endpoint: var("HF_ENDPOINT")
                .map(|endpoint| endpoint.trim_end_matches('/').to_string())
                .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string()),
            token: var("HF_TOKEN"),
            offline: is_truthy(var("HF_HUB_OFFLINE").as_deref()),
            progress: true,
        })
    }
}

/// Resolves `model`: an existing folder is used as is; anything else must be a hub id
/// (`org/name`) whose files are found in, or downloaded into, the standard hub cache.
pub fn resolve_model(model: &str, opts: &ResolveOptions) -> Result<ModelFiles, WeightsError> {
    // A local folder or a bad argument needs no cache, so a missing home directory must not
    // hide the real answer.
    let path = Path::new(model);
    if path.is_dir() {
        return resolve_local_folder(path);
    }
    check_model_argument(model)?;
    resolve_model_with(model, opts, &HubSettings::from_env()?)
}

/// [`resolve_model`] with explicit hub settings instead of the environment's.
pub fn resolve_model_with(
    model: &str,
    opts: &ResolveOptions,
    settings: &HubSettings,
) -> Result<ModelFiles, WeightsError> {
    let path = Path::new(model);
    if path.is_dir() {
        return resolve_local_folder(path);
    }
    check_model_argument(model)?;
    let revision = opts.revision.as_deref().unwrap_or(DEFAULT_REVISION);
    check_revision(revision)?;
    if opts.offline || settings.offline {
        resolve_from_cache(model, revision, &settings.cache_dir)
    } else {
        resolve_from_hub(model, revision, settings)
    }
}

/// Refuses a `model` argument that is not a folder and cannot be a hub id.
fn check_model_argument(model: &str) -> Result<(), WeightsError> {
    let invalid = |reason: String| WeightsError::InvalidModelSource {
        model: model.to_string(),
        reason,
    };
    if Path::new(model).exists() {
        return Err(invalid(
            "it is a file; give the folder holding config.json and the weights".to_string(),
        ));
    }
    check_repo_id(model)
        .map_err(|reason| invalid(format!("no such folder, and as a hub id: {reason}")))
}

fn resolve_local_folder(dir: &Path) -> Result<ModelFiles, WeightsError> {
    match locate_model_files(dir) {
        Ok(located) => Ok(located.into_model_files(dir, ModelOrigin::LocalFolder)),
        Err(LocateFailure::NoConfig) => Err(WeightsError::MissingConfig {
            dir: dir.to_path_buf(),
        }),
        Err(LocateFailure::NoWeights) => Err(no_safetensors_in(dir)),
        Err(LocateFailure::MissingShard { shard, index }) => Err(WeightsError::ShardMissing {
            shard: dir.join(shard),
            index,
        }),
        Err(LocateFailure::Broken(error)) => Err(error),
    }
}

/// Offline resolution: the cache alone, failing at the first file it lacks.
fn resolve_from_cache(
    repo_id: &str,
    revision: &str,
    cache_dir: &Path,
) -> Result<ModelFiles, WeightsError> {
    let not_cached = |file: &str| WeightsError::NotCached {
        repo: repo_id.to_string(),
        revision: revision.to_string(),
        file: file.to_string(),
        cache_dir: cache_dir.to_path_buf(),
    };
    let repo_dir = cache_dir.join(repo_folder_name(repo_id));
    let commit = match std::fs::read_to_string(repo_dir.join("refs").join(revision)) {
        Ok(text) => text.trim().to_string(),
        // A revision given as a commit hash has a snapshot but, as the Python tools write the
        // cache, no ref.
        Err(_) if is_commit_hash(revision) => revision.to_string(),
        Err(_) => {
            return Err(not_cached(&format!(
                "{CONFIG_FILE_NAME} (nothing of this revision was ever downloaded)"
            )))
        }
    };
    if !is_plain_commit(&commit) {
        return Err(WeightsError::CorruptFile {
            path: repo_dir.join("refs").join(revision),
            reason: format!("the ref holds `{commit}`, not a commit hash"),
        });
    }
    let snapshot = repo_dir.join("snapshots").join(&commit);
    let origin = ModelOrigin::Hub {
        repo: repo_id.to_string(),
        revision: revision.to_string(),
        commit,
    };
    match locate_model_files(&snapshot) {
        Ok(located) => Ok(located.into_model_files(&snapshot, origin)),
        Err(LocateFailure::NoConfig) => Err(not_cached(CONFIG_FILE_NAME)),
        Err(LocateFailure::NoWeights) => {
            if snapshot.join(PYTORCH_FILE_NAME).is_file() {
                Err(not_cached(&format!(
                    "{SINGLE_FILE_NAME} (only {PYTORCH_FILE_NAME} is cached, and safetensors \
                     weights are needed)"
                )))
            } else {
                Err(not_cached(&format!(
                    "{SINGLE_FILE_NAME} (or {INDEX_FILE_NAME})"
                )))
            }
        }
        Err(LocateFailure::MissingShard { shard, .. }) => Err(not_cached(&shard)),
        Err(LocateFailure::Broken(error)) => Err(error),
    }
}

/// Online resolution: ask the hub which files the revision holds and at which commit, fetch
/// what the cache lacks into that commit's snapshot, then read the snapshot like the offline path.
fn resolve_from_hub(
    repo_id: &str,
    revision: &str,
    settings: &HubSettings,
) -> Result<ModelFiles, WeightsError> {
    let hub_error = |what: String, error: ApiError| {
        let mut message = error.to_string();
        if message.contains("status code 401") || message.contains("status code 403") {
            message.push_str(" (private or gated repositories need a token: set HF_TOKEN)");
        }
        WeightsError::Hub {
            repo: repo_id.to_string(),
            revision: revision.to_string(),
            what,
            message,
        }
    };
    let unusable = |reason: String| WeightsError::UnusableRepo {
        repo: repo_id.to_string(),
        revision: revision.to_string(),
        reason,
    };

    let cache = Cache::new(settings.cache_dir.clone());
    let mut builder = ApiBuilder::from_cache(cache.clone())
        .with_endpoint(settings.endpoint.clone())
        .with_progress(settings.progress)
        .with_retries(3);
    if settings.token.is_some() {
        builder = builder.with_token(settings.token.clone());
    }
    let api = builder
        .build()
        .map_err(|e| hub_error("creating the client".to_string(), e))?;
    let model_repo =
        |rev: &str| Repo::with_revision(repo_id.to_string(), RepoType::Model, rev.to_string());

    let info = api
        .repo(model_repo(revision))
        .info()
        .map_err(|e| hub_error("listing the repository's files".to_string(), e))?;
    let commit = info.sha;
    if !is_plain_commit(&commit) {
        return Err(unusable(format!(
            "the hub answered commit `{commit}`, not a commit hash"
        )));
    }
    let available: HashSet<&str> = info.siblings.iter().map(|s| s.rfilename.as_str()).collect();
    // transformers' and timm's config.json, else open_clip's own config.
    let config_file = if available.contains(CONFIG_FILE_NAME) {
        CONFIG_FILE_NAME
    } else if available.contains(OPEN_CLIP_CONFIG_FILE_NAME) {
        OPEN_CLIP_CONFIG_FILE_NAME
    } else {
        return Err(unusable(format!(
            "the repository has no {CONFIG_FILE_NAME} (nor open_clip's \
             {OPEN_CLIP_CONFIG_FILE_NAME})"
        )));
    };

    // Downloads are pinned to the commit, so every file lands in the same snapshot even if the
    // branch moves while we fetch.
    let pinned = api.repo(model_repo(&commit));
    let snapshot = settings
        .cache_dir
        .join(repo_folder_name(repo_id))
        .join("snapshots")
        .join(&commit);
    let fetch = |file: &str| -> Result<(), WeightsError> {
        fetch_into_snapshot(&pinned, &snapshot, file)
            .map_err(|e| hub_error(format!("downloading {file}"), e))?;
        if snapshot.join(file).is_file() {
            Ok(())
        } else {
            Err(unusable(format!(
                "{file} was downloaded but is not in the snapshot folder {}",
                snapshot.display()
            )))
        }
    };

    // Decide on the weights before downloading anything, so an unusable repository costs no
    // download.
    let open_clip = config_file == OPEN_CLIP_CONFIG_FILE_NAME;
    let single_file = if open_clip {
        OPEN_CLIP_FILE_NAME
    } else {
        SINGLE_FILE_NAME
    };
    let sharded = if available.contains(single_file) {
        false
    } else if !open_clip && available.contains(INDEX_FILE_NAME) {
        true
    } else if open_clip {
        let only_pickle = if available.contains(OPEN_CLIP_PYTORCH_FILE_NAME) {
            format!("it holds only {OPEN_CLIP_PYTORCH_FILE_NAME}, open_clip's PyTorch pickle; ")
        } else {
            String::new()
        };
        return Err(unusable(format!(
            "{only_pickle}open_clip's safetensors weights ({OPEN_CLIP_FILE_NAME}) are needed"
        )));
    } else if available.contains(PYTORCH_FILE_NAME) {
        return Err(unusable(format!(
            "it holds only {PYTORCH_FILE_NAME}; safetensors weights are needed \
             ({SINGLE_FILE_NAME} or {INDEX_FILE_NAME} with its shards)"
        )));
    } else {
        return Err(unusable(format!(
            "it holds neither {SINGLE_FILE_NAME} nor {INDEX_FILE_NAME}"
        )));
    };

    fetch(config_file)?;
    if available.contains(PREPROCESSOR_CONFIG_FILE_NAME) {
        fetch(PREPROCESSOR_CONFIG_FILE_NAME)?;
    }
    for file in TOKENIZER_FILE_NAMES {
        if available.contains(file) {
            fetch(file)?;
        }
    }
    if sharded {
        fetch(INDEX_FILE_NAME)?;
        let shards = read_shard_names(&snapshot.join(INDEX_FILE_NAME))?;
        if let Some(absent) = shards
            .iter()
            .find(|shard| !available.contains(shard.as_str()))
        {
            return Err(unusable(format!(
                "{INDEX_FILE_NAME} lists shard {absent}, which the repository does not hold"
            )));
        }
        for shard in &shards {
            fetch(shard)?;
        }
    } else {
        fetch(single_file)?;
    }

    // Downloading by commit records only the commit as a ref; point the asked revision at it
    // too, so that a later offline run of the same command finds the snapshot.
    if revision != commit {
        cache
            .repo(model_repo(revision))
            .create_ref(&commit)
            .map_err(|cause| WeightsError::Write {
                path: settings
                    .cache_dir
                    .join(repo_folder_name(repo_id))
                    .join("refs")
                    .join(revision),
                cause,
            })?;
    }
    resolve_from_cache(repo_id, &commit, &settings.cache_dir).map(|mut files| {
        files.origin = ModelOrigin::Hub {
            repo: repo_id.to_string(),
            revision: revision.to_string(),
            commit: commit.clone(),
        };
        files
    })
}

fn fetch_into_snapshot(repo: &ApiRepo, snapshot: &Path, file: &str) -> Result<(), ApiError> {
    if snapshot.join(file).is_file() {
        return Ok(());
    }
    repo.download(file).map(|_| ())
}

/// The files found in a model folder.
struct LocatedFiles {
    config: PathBuf,
    preprocessor_config: Option<PathBuf>,
    weights: PathBuf,
}

enum LocateFailure {
    NoConfig,
    NoWeights,
    MissingShard { shard: String, index: PathBuf },
    Broken(WeightsError),
}

impl LocatedFiles {
    fn into_model_files(self, dir: &Path, origin: ModelOrigin) -> ModelFiles {
        ModelFiles {
            dir: dir.to_path_buf(),
            config: self.config,
            preprocessor_config: self.preprocessor_config,
            weights: self.weights,
            origin,
        }
    }
}

/// The config (`config.json`, else open_clip's `open_clip_config.json`) and the weights
/// (`model.safetensors`, the index and its shards, else open_clip's
/// `open_clip_model.safetensors`) of a model folder.
fn locate_model_files(dir: &Path) -> Result<LocatedFiles, LocateFailure> {
    let config = [CONFIG_FILE_NAME, OPEN_CLIP_CONFIG_FILE_NAME]
        .into_iter()
        .map(|name| dir.join(name))
        .find(|path| path.is_file())
        .ok_or(LocateFailure::NoConfig)?;
    let preprocessor_config = Some(dir.join(PREPROCESSOR_CONFIG_FILE_NAME)).filter(|p| p.is_file());
    let single = dir.join(SINGLE_FILE_NAME);
    let index = dir.join(INDEX_FILE_NAME);
    let open_clip = dir.join(OPEN_CLIP_FILE_NAME);
    let weights = if single.is_file() {
        single
    } else if index.is_file() {
        let shards = read_shard_names(&index).map_err(LocateFailure::Broken)?;
        if let Some(shard) = shards.into_iter().find(|shard| !dir.join(shard).is_file()) {
            return Err(LocateFailure::MissingShard { shard, index });
        }
        index
    } else if open_clip.is_file() {
        open_clip
    } else {
        return Err(LocateFailure::NoWeights);
    };
    Ok(LocatedFiles {
        config,
        preprocessor_config,
        weights,
    })
}

/// `models--org--name`, the cache folder of a model repository.
fn repo_folder_name(repo_id: &str) -> String {
    format!("models--{}", repo_id.replace('/', "--"))
}

/// Checks the shape of a hub id: `name` or `org/name`, each part of letters, digits, `-`, `_`
/// and `.`, neither starting nor ending with `-` or `.`, without `--` or `..`.
fn check_repo_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("it is empty".to_string());
    }
    if id.len() > MAX_REPO_ID_LEN {
        return Err(format!("it is longer than {MAX_REPO_ID_LEN} characters"));
    }
    let parts: Vec<&str> = id.split('/').collect();
    if parts.len() > 2 {
        return Err("a hub id has at most one `/` (`org/name`)".to_string());
    }
    for part in parts {
        if part.is_empty() {
            return Err("expected `org/name`, with both parts non-empty".to_string());
        }
        if let Some(bad) = part
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        {
            return Err(format!("`{bad}` is not allowed in a hub id (`org/name`)"));
        }
        if part.starts_with(['-', '.']) || part.ends_with(['-', '.']) {
            return Err(format!("`{part}` may not start or end with `-` or `.`"));
        }
        if part.contains("--") || part.contains("..") {
            return Err(format!("`{part}` may not contain `--` or `..`"));
        }
    }
    Ok(())
}

/// A revision becomes a path under `refs/`, so it must not be able to leave that folder.
fn check_revision(revision: &str) -> Result<(), WeightsError> {
    let invalid = |reason: &str| WeightsError::InvalidRevision {
        revision: revision.to_string(),
        reason: reason.to_string(),
    };
    if revision.is_empty() {
        return Err(invalid("it is empty"));
    }
    if revision.chars().any(|c| c.is_control() || c == '\\') {
        return Err(invalid("it holds a control character or a backslash"));
    }
    if revision
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(invalid(
            "each `/`-separated part must be a non-empty name other than `.` and `..`",
        ));
    }
    Ok(())
}

fn is_commit_hash(revision: &str) -> bool {
    revision.len() == 40 && revision.chars().all(|c| c.is_ascii_hexdigit())
}

/// A commit name safe to use as a folder name.
fn is_plain_commit(commit: &str) -> bool {
    !commit.is_empty() && commit.chars().all(|c| c.is_ascii_alphanumeric())
}

fn is_truthy(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

/// The hub cache folder, from environment variables read through `var` (unset or empty: `None`).
fn hub_cache_dir(var: impl Fn(&str) -> Option<String>) -> Result<PathBuf, WeightsError> {
    if let Some(hub_cache) = var("HF_HUB_CACHE") {
        return Ok(PathBuf::from(hub_cache));
    }
    if let Some(hf_home) = var("HF_HOME") {
        return Ok(PathBuf::from(hf_home).join("hub"));
    }
    if let Some(xdg_cache) = var("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(xdg_cache).join("huggingface").join("hub"));
    }
    match var("HOME").or_else(|| var("USERPROFILE")) {
        Some(home) => Ok(PathBuf::from(home)
            .join(".cache")
            .join("huggingface")
            .join("hub")),
        None => Err(WeightsError::NoHubCache {
            reason: "none of HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME or HOME is set".to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn repo_ids_follow_the_hub_rules() {
        for good in [
            "google/vit-base-patch16-224",
            "gpt2",
            "a.b_c/d-e.f",
            "Org1/Model_2",
        ] {
            assert_eq!(check_repo_id(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "./nope",
            "a/b/c",
            "/abs",
            "org/",
            "/name",
            "org/-x",
            "org/x.",
            "a--b/c",
            "a/b..c",
            "org name/x",
            "org/x~",
            "c:\\models",
        ] {
            assert!(check_repo_id(bad).is_err(), "{bad} should be rejected");
        }
        assert!(check_repo_id(&"a".repeat(97)).is_err());
    }

    #[test]
    fn revisions_cannot_escape_the_refs_folder() {
        for good in [
            "main",
            "v1.0",
            "refs/pr/1",
            "0123456789abcdef0123456789abcdef01234567",
        ] {
            assert!(check_revision(good).is_ok(), "{good}");
        }
        for bad in [
            "", "..", "../main", "a//b", "/main", "main/", "a\\b", "a\nb", "x/./y",
        ] {
            assert!(check_revision(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn offline_flag_values() {
        for on in ["1", "true", "TRUE", "yes", "on", " 1 "] {
            assert!(is_truthy(Some(on)), "{on}");
        }
        for off in ["0", "false", "no", "", "2"] {
            assert!(!is_truthy(Some(off)), "{off}");
        }
        assert!(!is_truthy(None));
    }

    #[test]
    fn cache_dir_follows_the_python_precedence() {
        let env = |pairs: &[(&str, &str)]| {
            let map: HashMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            move |name: &str| map.get(name).cloned()
        };
        let all = [
            ("HF_HUB_CACHE", "/c"),
            ("HF_HOME", "/h"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/home/u"),
        ];
        assert_eq!(hub_cache_dir(env(&all)).unwrap(), PathBuf::from("/c"));
        assert_eq!(
            hub_cache_dir(env(&all[1..])).unwrap(),
            PathBuf::from("/h/hub")
        );
        assert_eq!(
            hub_cache_dir(env(&all[2..])).unwrap(),
            PathBuf::from("/x/huggingface/hub")
        );
        assert_eq!(
            hub_cache_dir(env(&all[3..])).unwrap(),
            PathBuf::from("/home/u/.cache/huggingface/hub")
        );
        assert!(matches!(
            hub_cache_dir(env(&[])),
            Err(WeightsError::NoHubCache { .. })
        ));
    }

    #[test]
    fn cache_folder_names_match_hf_hub() {
        let repo = Repo::with_revision("google/vit".into(), RepoType::Model, "main".into());
        assert_eq!(repo_folder_name("google/vit"), repo.folder_name());
        assert_eq!(repo_folder_name("gpt2"), "models--gpt2");
    }
}

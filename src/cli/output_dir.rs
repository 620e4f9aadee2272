//! `--output-dir DIR`: results written as numbered shards, each complete or absent, so that a
//! run that was killed is resumed by running the same command again.
//!
//! The inputs are cut into output shards deterministically: one per dataset shard (a tar or
//! Parquet file, named after it), and for plain files runs of `--shard-size` consecutive
//! files. A shard is a pair of files with one stem (`00003-train-0003.npy` and
//! `00003-train-0003.parquet` for `embed`; the Parquet alone for the other commands), each
//! written under a temporary name (`.STEM.npy.tmp`) and renamed when whole; a shard counts as
//! done when all its files are there. `manifest.json` records the command, the options that
//! decide the results, and a digest of the input list; a run against a DIR whose manifest
//! differs is refused, naming what differs. A run then does only the shards not yet done, and
//! since the shards' contents depend on the inputs and options alone, the files are the same
//! bytes as an uninterrupted run's: the commands open the model with `--batch-invariant` for
//! `--output-dir` (see `ModelArgs::batch_invariant`), so an image's results do not depend on
//! the batch it falls in (the CPU is invariant anyway).

use anyhow::{bail, Context, Result};
use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, FloatType};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vitrt_engine::pipeline::datasets::SidecarReader;
use vitrt_engine::pipeline::{shown_path, InputList};

/// Output shards of plain files hold this many by default (`--shard-size`).
pub const DEFAULT_SHARD_SIZE: usize = 10_000;

/// One output shard: its file stem and the inputs it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputShard {
    pub stem: String,
    pub inputs: Range<usize>,
}

/// A name made safe as a file stem: letters, digits, `.`, `-` and `_` kept, the rest `_`.
fn safe_stem(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The output shards of `inputs`, in order: one per dataset shard (`NNNNN-<its file stem>`),
/// and runs of up to `shard_size` consecutive plain files (`NNNNN-files`).
pub fn plan(inputs: &InputList, shard_size: usize) -> Vec<OutputShard> {
    let mut shards: Vec<OutputShard> = Vec::new();
    let mut start = 0;
    while start < inputs.len() {
        let (end, name) = match inputs.sample(start) {
            Some(sample) => {
                let end = (start..inputs.len())
                    .find(|&i| inputs.sample(i).is_none_or(|s| s.shard != sample.shard))
                    .unwrap_or(inputs.len());
                let path = &inputs.shards[sample.shard].path;
                let stem = path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                (end, safe_stem(&stem))
            }
            None => {
                let end = (start..inputs.len().min(start + shard_size))
                    .find(|&i| inputs.sample(i).is_some())
                    .unwrap_or(inputs.len().min(start + shard_size));
                (end, "files".to_string())
            }
        };
        shards.push(OutputShard {
            stem: format!("{:05}-{name}", shards.len()),
            inputs: start..end,
        });
        start = end;
    }
    shards
}

/// What `manifest.json` holds.
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
struct Manifest {
    /// The format of this directory.
    vitrt_output_dir: u32,
    command: String,
    /// The options that decide the results, by flag name.
    options: BTreeMap<String, String>,
    /// The inputs: how many, and the SHA-256 of their names (one a line, in order).
    inputs: usize,
    inputs_sha256: String,
    /// The output shards' stems, in order.
    shards: Vec<String>,
    /// The files of each shard, by extension.
    files: Vec<String>,
}

/// An output directory being filled.
pub struct OutputDir {
    dir: PathBuf,
    /// The extensions of each shard's files (`npy`, `parquet`).
    extensions: &'static [&'static str],
    pub shards: Vec<OutputShard>,
    /// What this run created: the manifest, and the directory itself (see the `Drop`).
    created: Created,
    /// Held for the run: a second run on the directory is refused while this one writes it.
    _lock: fs::File,
}

#[derive(Clone, Copy, Debug, Default)]
struct Created {
    manifest: bool,
    dir: bool,
}

/// A run that wrote the manifest and ends with no shard written (the model failed to load,
/// or has no classifier for `classify`) takes the manifest back, with its lock and temporary
/// files, and the directory if it made it: a corrected command then starts afresh instead of
/// being refused for options that never wrote a result.
impl Drop for OutputDir {
    fn drop(&mut self) {
        if !self.created.manifest {
            return;
        }
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        let names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let ours = |name: &String| {
            name == "manifest.json"
                || name == LOCK_FILE
                || name.starts_with('.') && name.ends_with(".tmp")
        };
        if !names.iter().all(ours) {
            return;
        }
        for name in &names {
            let _ = fs::remove_file(self.dir.join(name));
        }
        if self.created.dir {
            let _ = fs::remove_dir(&self.dir);
        }
    }
}

/// The lock file a run holds on its directory (released by the system when the process ends,
/// however it ends).
const LOCK_FILE: &str = ".vitrt.lock";

/// Whether `dir` holds anything but our lock and temporary files (a run killed while writing
/// the manifest leaves one).
fn holds_other_files(dir: &Path) -> Result<bool> {
    Ok(fs::read_dir(dir)
        .with_context(|| format!("cannot list --output-dir {}", dir.display()))?
        .filter_map(|e| e.ok())
        .any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            !(name == LOCK_FILE || name.starts_with('.') && name.ends_with(".tmp"))
        }))
}

/// Takes `dir`'s lock, or says that another run holds it.
fn lock_dir(dir: &Path) -> Result<fs::File> {
    let path = dir.join(LOCK_FILE);
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(fs::TryLockError::WouldBlock) => bail!(
            "another vitrt run is writing --output-dir {} (it holds {}): wait for it to end",
            dir.display(),
            path.display()
        ),
        Err(fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn digest_of(inputs: &InputList) -> String {
    let mut hasher = sha2::Sha256::new();
    for index in 0..inputs.len() {
        hasher.update(inputs.name(index).as_bytes());
        hasher.update(b"\n");
    }
    hex(&hasher.finalize())
}

/// The SHA-256 of a file's bytes in hex, as the manifest records a file an option names, or
/// why it could not be read (the run then fails reading it, with the reason).
pub fn file_sha256(path: &Path) -> String {
    match fs::read(path) {
        Ok(bytes) => hex(&sha2::Sha256::digest(&bytes)),
        Err(e) => format!("unreadable: {e}"),
    }
}

impl OutputDir {
    /// Opens (or creates) `dir` for `command`'s results over `inputs`: checks its manifest
    /// against this run's (refusing one that differs, naming what) or writes it.
    pub fn open(
        dir: &Path,
        command: &str,
        options: &[(&str, String)],
        inputs: &InputList,
        shard_size: usize,
        extensions: &'static [&'static str],
    ) -> Result<OutputDir> {
        let shards = plan(inputs, shard_size);
        let manifest = Manifest {
            vitrt_output_dir: 1,
            command: command.to_string(),
            options: options
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            inputs: inputs.len(),
            inputs_sha256: digest_of(inputs),
            shards: shards.iter().map(|s| s.stem.clone()).collect(),
            files: extensions.iter().map(|e| e.to_string()).collect(),
        };
        let mut created = Created {
            dir: !dir.exists(),
            ..Created::default()
        };
        fs::create_dir_all(dir)
            .with_context(|| format!("cannot create --output-dir {}", dir.display()))?;
        let path = dir.join("manifest.json");
        if !path.exists() && holds_other_files(dir)? {
            bail!(
                "--output-dir {} holds files but no manifest.json: name a new or empty \
                 directory",
                dir.display()
            );
        }
        let lock = lock_dir(dir)?;
        match fs::read(&path) {
            Ok(bytes) => {
                let before: Manifest = serde_json::from_slice(&bytes).with_context(|| {
                    format!(
                        "{} is not a vitrt manifest: --output-dir must be a new directory or \
                         one a vitrt run wrote",
                        path.display()
                    )
                })?;
                check_same(&before, &manifest, dir)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Empty (checked above) but for our lock and temporary files.
                let mut json = serde_json::to_vec_pretty(&manifest)?;
                json.push(b'\n');
                write_atomically(&path, &json)?;
                created.manifest = true;
            }
            Err(e) => {
                return Err(e).with_context(|| format!("cannot read {}", path.display()));
            }
        }
        Ok(OutputDir {
            dir: dir.to_path_buf(),
            extensions,
            shards,
            created,
            _lock: lock,
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn file(&self, stem: &str, extension: &str) -> PathBuf {
        self.dir.join(format!("{stem}.{extension}"))
    }

    /// Whether every file of `shard` is there.
    pub fn is_done(&self, shard: &OutputShard) -> bool {
        self.extensions
            .iter()
            .all(|e| self.file(&shard.stem, e).is_file())
    }

    /// The shards not yet done, in order.
    pub fn to_do(&self) -> Vec<OutputShard> {
        self.shards
            .iter()
            .filter(|s| !self.is_done(s))
            .cloned()
            .collect()
    }

    /// Says on stderr how many shards are written already; whether any is left to do.
    pub fn announce(&self) -> bool {
        let to_do = self.to_do().len();
        let done = self.shards.len() - to_do;
        if to_do == 0 {
            eprintln!(
                "vitrt: {}: all {} shards are written; nothing to do",
                self.dir.display(),
                self.shards.len()
            );
        } else if done > 0 {
            eprintln!(
                "vitrt: {}: {done} of {} shards already written; doing the other {to_do}",
                self.dir.display(),
                self.shards.len()
            );
        }
        to_do > 0
    }

    /// Writes one shard's files (each under a temporary name, then renamed), in the order of
    /// the extensions given to [`OutputDir::open`].
    pub fn write_shard(&self, shard: &OutputShard, files: &[Vec<u8>]) -> Result<()> {
        for (extension, bytes) in self.extensions.iter().zip(files) {
            write_atomically(&self.file(&shard.stem, extension), bytes)?;
        }
        Ok(())
    }
}

/// Refuses a manifest that differs from this run's, naming the options that differ.
fn check_same(before: &Manifest, now: &Manifest, dir: &Path) -> Result<()> {
    if before == now {
        return Ok(());
    }
    let mut differences = Vec::new();
    if before.command != now.command {
        differences.push(format!(
            "the command (`{}` then, `{}` now)",
            before.command, now.command
        ));
    }
    let names: std::collections::BTreeSet<&String> =
        before.options.keys().chain(now.options.keys()).collect();
    for name in names {
        let (then, here) = (before.options.get(name), now.options.get(name));
        if then != here {
            let shown = |v: Option<&String>| v.map_or("(none)".to_string(), |v| v.clone());
            differences.push(format!(
                "--{name} ({} then, {} now)",
                shown(then),
                shown(here)
            ));
        }
    }
    if before.inputs != now.inputs || before.inputs_sha256 != now.inputs_sha256 {
        differences.push(format!(
            "the inputs ({} then, {} now{})",
            before.inputs,
            now.inputs,
            if before.inputs == now.inputs {
                ", other names"
            } else {
                ""
            }
        ));
    } else if before.shards != now.shards {
        differences.push("the output shards (--shard-size)".to_string());
    }
    if before.files != now.files || before.vitrt_output_dir != now.vitrt_output_dir {
        differences.push("the files of each shard".to_string());
    }
    bail!(
        "--output-dir {} was written by a run with other options: {}; use the same options to \
         resume it, or name another directory",
        dir.display(),
        differences.join(", ")
    )
}

/// Writes `bytes` to `path` through a temporary file beside it (`.NAME.tmp`), flushed to disk
/// and renamed over it: a reader, or a later run, sees the whole file or none.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let temporary = path.with_file_name(format!(".{}.tmp", name.unwrap_or_default()));
    let written = (|| -> std::io::Result<()> {
        let mut file = fs::File::create(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temporary, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&temporary);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(())
}

/// `--output-dir` and `--shard-size`, as `classify`, `zero-shot` and `embed` take them.
#[derive(clap::Args, Debug, Clone)]
pub struct OutputDirArgs {
    /// Write the results as shards in this directory, resumably: one per input tar or Parquet
    /// file, and one per --shard-size plain files, each written whole or not at all, with
    /// manifest.json recording the options. The same command again does only the shards not
    /// yet written; other options against the directory are refused. Runs batch-invariant
    /// (--batch-invariant), so that a resumed run writes the bytes an uninterrupted one does.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// With --output-dir: plain image files per output shard [default: 10000].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    shard_size: Option<u64>,
}

impl OutputDirArgs {
    /// The directory, if one is named; an error for `--shard-size` without it.
    pub fn dir(&self) -> Result<Option<&Path>> {
        if self.output_dir.is_none() && self.shard_size.is_some() {
            bail!("--shard-size is for --output-dir: name the directory, or leave it out");
        }
        Ok(self.output_dir.as_deref())
    }

    /// Plain image files per output shard.
    pub fn shard_size(&self) -> usize {
        self.shard_size.map_or(DEFAULT_SHARD_SIZE, |n| n as usize)
    }
}

/// Gathers the rows of the output shards being done, in order, and hands each shard over
/// once its last row is in.
pub struct ShardRows<T> {
    /// The shards to do, in order; their inputs are consecutive in the run.
    shards: Vec<OutputShard>,
    current: usize,
    meta: Vec<RowMeta>,
    rows: Vec<T>,
    /// Rows with an error so far.
    pub failed: usize,
}

/// A shard whose rows are all in.
pub type FullShard<T> = (OutputShard, Vec<RowMeta>, Vec<T>);

impl<T> ShardRows<T> {
    pub fn new(shards: Vec<OutputShard>) -> Self {
        ShardRows {
            shards,
            current: 0,
            meta: Vec::new(),
            rows: Vec::new(),
            failed: 0,
        }
    }

    /// "N of M shards written": `total` is the whole dataset's, those written by earlier runs
    /// counted.
    pub fn progress_note(&self, total: usize) -> String {
        let written = total - (self.shards.len() - self.current);
        format!("{written} of {total} shards written")
    }

    /// Adds the next row; the shard it completes, if it does.
    pub fn push(&mut self, meta: RowMeta, row: T) -> Option<FullShard<T>> {
        self.failed += usize::from(meta.error.is_some());
        self.meta.push(meta);
        self.rows.push(row);
        let shard = self.shards.get(self.current)?;
        if self.rows.len() < shard.inputs.len() {
            return None;
        }
        self.current += 1;
        Some((
            shard.clone(),
            std::mem::take(&mut self.meta),
            std::mem::take(&mut self.rows),
        ))
    }
}

/// One row of a shard's metadata.
#[derive(Clone, Debug, Default)]
pub struct RowMeta {
    /// The sample's key, or the file's path.
    pub key: String,
    /// The shard or file it came from.
    pub source: String,
    /// Why it has no result.
    pub error: Option<String>,
    /// A webdataset sample's `.json` and `.txt` members.
    pub json: Option<String>,
    pub txt: Option<String>,
}

impl RowMeta {
    /// Input `index`'s key, source and sidecars (read through `sidecars`).
    pub fn of(inputs: &InputList, index: usize, sidecars: &mut SidecarReader<'_>) -> RowMeta {
        let source = shown_path(&inputs.paths[index]);
        match inputs.sample(index) {
            Some(sample) => RowMeta {
                key: sample.key.clone(),
                source,
                error: None,
                json: sidecars.read(sample, "json"),
                txt: sidecars.read(sample, "txt"),
            },
            None => RowMeta {
                key: source.clone(),
                source,
                ..RowMeta::default()
            },
        }
    }
}

/// A column of the results beside the metadata.
pub enum ResultColumn {
    /// A list of numbers per row (empty where absent).
    Floats(Vec<Vec<f32>>),
    /// A list of texts per row (empty where absent).
    Texts(Vec<Vec<String>>),
}

/// A Parquet file of the rows' metadata (`key`, `source`, `error`, `json`, `txt`) and then the
/// `extra` columns, one row group, Snappy-compressed. The same rows give the same bytes.
pub fn metadata_parquet(rows: &[RowMeta], extra: &[(&str, ResultColumn)]) -> Result<Vec<u8>> {
    let mut schema = String::from(
        "message results {
            required binary key (STRING);
            required binary source (STRING);
            optional binary error (STRING);
            optional binary json (STRING);
            optional binary txt (STRING);\n",
    );
    for (name, column) in extra {
        schema.push_str(&match column {
            ResultColumn::Floats(_) => format!(
                "required group {name} (LIST) {{ repeated group list {{ required float element; }} }}\n"
            ),
            ResultColumn::Texts(_) => format!(
                "required group {name} (LIST) {{ repeated group list {{ required binary element (STRING); }} }}\n"
            ),
        });
    }
    schema.push('}');
    let schema = Arc::new(parse_message_type(&schema).context("the results' Parquet schema")?);
    let properties = Arc::new(
        WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build(),
    );
    let mut writer = SerializedFileWriter::new(Vec::new(), schema, properties)?;
    let mut group = writer.next_row_group()?;
    let text = |v: &str| ByteArray::from(v.as_bytes().to_vec());
    let required: [Vec<ByteArray>; 2] = [
        rows.iter().map(|r| text(&r.key)).collect(),
        rows.iter().map(|r| text(&r.source)).collect(),
    ];
    for values in &required {
        let mut column = group.next_column()?.context("a key/source column")?;
        column
            .typed::<ByteArrayType>()
            .write_batch(values, None, None)?;
        column.close()?;
    }
    let optional: [Vec<Option<&str>>; 3] = [
        rows.iter().map(|r| r.error.as_deref()).collect(),
        rows.iter().map(|r| r.json.as_deref()).collect(),
        rows.iter().map(|r| r.txt.as_deref()).collect(),
    ];
    for values in &optional {
        write_optional_texts(&mut group, values)?;
    }
    for (_, column) in extra {
        match column {
            ResultColumn::Floats(lists) => {
                let (values, defs, reps) = list_levels(lists, |&v| v);
                let mut column = group.next_column()?.context("a list column")?;
                column
                    .typed::<FloatType>()
                    .write_batch(&values, Some(&defs), Some(&reps))?;
                column.close()?;
            }
            ResultColumn::Texts(lists) => {
                let (values, defs, reps) = list_levels(lists, |v| text(v));
                let mut column = group.next_column()?.context("a list column")?;
                column
                    .typed::<ByteArrayType>()
                    .write_batch(&values, Some(&defs), Some(&reps))?;
                column.close()?;
            }
        }
    }
    group.close()?;
    Ok(writer.into_inner()?)
}

fn write_optional_texts<W: Write + Send>(
    group: &mut parquet::file::writer::SerializedRowGroupWriter<'_, W>,
    values: &[Option<&str>],
) -> Result<()> {
    let defs: Vec<i16> = values.iter().map(|v| i16::from(v.is_some())).collect();
    let present: Vec<ByteArray> = values
        .iter()
        .flatten()
        .map(|v| ByteArray::from(v.as_bytes().to_vec()))
        .collect();
    let mut column = group.next_column()?.context("a text column")?;
    column
        .typed::<ByteArrayType>()
        .write_batch(&present, Some(&defs), None)?;
    column.close()?;
    Ok(())
}

/// The values and levels of a required list of required elements: definition level 1 for an
/// element, 0 for an empty list; repetition level 0 at a row's first entry, 1 after.
fn list_levels<T, V>(lists: &[Vec<T>], value: impl Fn(&T) -> V) -> (Vec<V>, Vec<i16>, Vec<i16>) {
    let (mut values, mut defs, mut reps) = (Vec::new(), Vec::new(), Vec::new());
    for list in lists {
        if list.is_empty() {
            defs.push(0);
            reps.push(0);
        }
        for (i, v) in list.iter().enumerate() {
            values.push(value(v));
            defs.push(1);
            reps.push(i16::from(i > 0));
        }
    }
    (values, defs, reps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(n: usize) -> InputList {
        InputList {
            paths: (0..n)
                .map(|i| PathBuf::from(format!("img-{i}.png")))
                .collect(),
            ..InputList::default()
        }
    }

    #[test]
    fn plain_files_are_cut_every_shard_size() {
        let shards = plan(&files(25), 10);
        let ranges: Vec<_> = shards.iter().map(|s| s.inputs.clone()).collect();
        assert_eq!(ranges, [0..10, 10..20, 20..25]);
        assert_eq!(shards[2].stem, "00002-files");
        assert!(plan(&files(0), 10).is_empty());
    }

    #[test]
    fn the_progress_note_counts_the_shards_of_earlier_runs() {
        // Shards 3 and 4 of five are left to do, of two files each.
        let shards = plan(&files(10), 2);
        let mut rows = ShardRows::new(shards[3..].to_vec());
        assert_eq!(rows.progress_note(5), "3 of 5 shards written");
        assert!(rows.push(RowMeta::default(), ()).is_none());
        assert_eq!(rows.progress_note(5), "3 of 5 shards written");
        assert!(rows.push(RowMeta::default(), ()).is_some());
        assert_eq!(rows.progress_note(5), "4 of 5 shards written");
        rows.push(RowMeta::default(), ());
        rows.push(RowMeta::default(), ());
        assert_eq!(rows.progress_note(5), "5 of 5 shards written");
    }

    #[test]
    fn a_manifest_that_differs_is_refused_naming_what() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let inputs = files(3);
        let options = [("model", "m".to_string()), ("pool", "cls".to_string())];
        let first =
            OutputDir::open(&out, "embed", &options, &inputs, 10, &["npy", "parquet"]).unwrap();
        first
            .write_shard(&first.shards[0].clone(), &[vec![0], vec![0]])
            .unwrap();
        drop(first);
        // The same again is fine.
        OutputDir::open(&out, "embed", &options, &inputs, 10, &["npy", "parquet"]).unwrap();
        let other = [("model", "m".to_string()), ("pool", "mean".to_string())];
        let error = OutputDir::open(&out, "embed", &other, &inputs, 10, &["npy", "parquet"])
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("--pool (cls then, mean now)"), "{error}");
        let error = OutputDir::open(&out, "embed", &options, &files(4), 10, &["npy", "parquet"])
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("the inputs (3 then, 4 now)"), "{error}");
        let error = OutputDir::open(&out, "embed", &options, &inputs, 2, &["npy", "parquet"])
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("--shard-size"), "{error}");
    }

    #[test]
    fn a_directory_of_other_files_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("notes.txt"), "x").unwrap();
        let error = OutputDir::open(dir.path(), "embed", &[], &files(1), 10, &["npy"])
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("no manifest.json"), "{error}");
        // A manifest half written by a killed run is no obstacle.
        let killed = tempfile::tempdir().unwrap();
        fs::write(killed.path().join(".manifest.json.tmp"), "{").unwrap();
        let out = OutputDir::open(killed.path(), "embed", &[], &files(1), 10, &["npy"]).unwrap();
        assert!(killed.path().join("manifest.json").is_file());
        drop(out);
    }

    #[test]
    fn a_second_run_on_a_directory_being_written_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let first = OutputDir::open(dir.path(), "embed", &[], &files(2), 10, &["npy"]).unwrap();
        let error = OutputDir::open(dir.path(), "embed", &[], &files(2), 10, &["npy"])
            .err()
            .expect("refused while the first holds the directory")
            .to_string();
        assert!(error.contains("another vitrt run"), "{error}");
        // Once the first run is over (its lock released), the directory opens again.
        drop(first);
        OutputDir::open(dir.path(), "embed", &[], &files(2), 10, &["npy"]).unwrap();
    }

    #[test]
    fn a_shard_is_done_only_when_all_its_files_are_there() {
        let dir = tempfile::tempdir().unwrap();
        let out =
            OutputDir::open(dir.path(), "embed", &[], &files(3), 2, &["npy", "parquet"]).unwrap();
        let first = out.shards[0].clone();
        assert!(!out.is_done(&first));
        out.write_shard(&first, &[b"a".to_vec(), b"b".to_vec()])
            .unwrap();
        assert!(out.is_done(&first));
        assert_eq!(out.to_do(), [out.shards[1].clone()]);
        // No temporary file is left.
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
        fs::remove_file(dir.path().join("00000-files.parquet")).unwrap();
        assert!(!out.is_done(&first));
    }

    #[test]
    fn metadata_parquet_is_the_same_bytes_for_the_same_rows() {
        let rows = vec![
            RowMeta {
                key: "a".into(),
                source: "s.tar".into(),
                json: Some("{}".into()),
                ..RowMeta::default()
            },
            RowMeta {
                key: "b".into(),
                source: "s.tar".into(),
                error: Some("no image".into()),
                ..RowMeta::default()
            },
        ];
        let extra = || {
            [(
                "scores",
                ResultColumn::Floats(vec![vec![0.5, 0.25], Vec::new()]),
            )]
        };
        let one = metadata_parquet(&rows, &extra()).unwrap();
        let two = metadata_parquet(&rows, &extra()).unwrap();
        assert_eq!(one, two);
        assert_eq!(&one[..4], b"PAR1");
    }

    #[test]
    fn a_run_that_writes_no_shard_takes_its_manifest_back() {
        let parent = tempfile::tempdir().unwrap();
        let out = parent.path().join("out");
        let options = [("model", "typo".to_string())];
        // A fresh directory, made by the run: gone again with nothing written.
        let run = OutputDir::open(&out, "classify", &options, &files(3), 2, &["parquet"]).unwrap();
        assert!(out.join("manifest.json").is_file());
        drop(run);
        assert!(!out.exists(), "the directory this run made is removed");
        // So the corrected command is not refused for the options that wrote nothing.
        let fixed = [("model", "right".to_string())];
        let run = OutputDir::open(&out, "classify", &fixed, &files(3), 2, &["parquet"]).unwrap();
        run.write_shard(&run.shards[0].clone(), &[vec![1]]).unwrap();
        drop(run);
        // A run that wrote a shard keeps its manifest, and so does a resumed run that writes none.
        assert!(out.join("manifest.json").is_file());
        let resumed =
            OutputDir::open(&out, "classify", &fixed, &files(3), 2, &["parquet"]).unwrap();
        drop(resumed);
        assert!(out.join("manifest.json").is_file());
        let error = OutputDir::open(&out, "classify", &options, &files(3), 2, &["parquet"])
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("--model (right then, typo now)"), "{error}");
        // An empty directory the user made stays, emptied of what the run wrote.
        let made = tempfile::tempdir().unwrap();
        drop(
            OutputDir::open(
                made.path(),
                "classify",
                &options,
                &files(1),
                2,
                &["parquet"],
            )
            .unwrap(),
        );
        assert!(made.path().is_dir());
        assert_eq!(fs::read_dir(made.path()).unwrap().count(), 0);
    }
}

//! Dataset shards as inputs: webdataset tar files (`webdataset.rs`) and Parquet files of image
//! bytes (`parquet_images.rs`), named by path, glob (`shards/*.tar`) or brace range
//! (`shards/{00000..00099}.tar`, `braces.rs`).
//!
//! Each shard is scanned when the inputs are listed: its samples (key, where the image bytes
//! and the small sidecars are) join the input list in shard order, so a run knows its length,
//! its order and its output shards before the first image is decoded. The decoding workers
//! then fetch each sample's bytes themselves ([`SampleReader`]): a tar member by its offset
//! (positional reads, in input order, so a shard is read front to back), a Parquet row from its
//! row group, read once and shared. A shard that cannot be scanned, or a tar that ends early,
//! is reported and the run goes on with the other shards; a sample without an image, a null
//! image or bytes that do not decode is one failed image, in its place.

mod braces;
mod parquet_images;
mod webdataset;

pub use braces::expand as expand_braces;
pub use parquet_images::{ImageColumn, RowGroupCache};
pub use webdataset::key_and_extension;

/// The extensions of the formats the preprocessing reads, compared without case: a folder's
/// images and a tar's image members alike.
pub const IMAGE_EXTENSIONS: [&str; 4] = ["jpg", "jpeg", "png", "webp"];

use std::fs::File;
use std::path::{Path, PathBuf};

/// The kinds of dataset shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardKind {
    /// A webdataset tar.
    Tar,
    /// A Parquet file: its image column and rows per row group.
    Parquet {
        column: ImageColumn,
        row_groups: Vec<usize>,
    },
}

/// One dataset shard of the run.
#[derive(Clone, Debug)]
pub struct Shard {
    pub path: PathBuf,
    pub kind: ShardKind,
    /// Why it was read only in part or not at all (reported when the inputs are listed).
    pub problem: Option<String>,
}

/// Where a sample's image bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageAt {
    /// A tar member's data: `size` bytes from `offset`.
    Tar { offset: u64, size: u64 },
    /// Row `row` of row group `group` of a Parquet file.
    Parquet { group: usize, row: usize },
    /// The sample has no image: why.
    Missing(String),
}

/// One sample of a dataset shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Its shard's index in the run's shards.
    pub shard: usize,
    /// Its key: the tar member path up to the first dot of the file name; the Parquet `key`
    /// column or `<file stem>/<row>`.
    pub key: String,
    pub image: ImageAt,
    /// Where the sample's small text members (`json`, `txt`) are, in member order.
    pub sidecars: Vec<Sidecar>,
}

/// A webdataset sample's text member: `size` bytes from `offset` of its tar.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sidecar {
    /// `json` or `txt`.
    pub extension: String,
    pub offset: u64,
    pub size: u64,
}

/// Reads samples' sidecars (for the metadata of `--output-dir`), keeping the tar it read last
/// open.
pub struct SidecarReader<'a> {
    shards: &'a [Shard],
    open_tar: Option<(usize, File)>,
}

impl<'a> SidecarReader<'a> {
    pub fn new(shards: &'a [Shard]) -> Self {
        SidecarReader {
            shards,
            open_tar: None,
        }
    }

    /// The text of `sample`'s sidecar of `extension` (as UTF-8, invalid bytes replaced), if
    /// it has one and it can be read.
    pub fn read(&mut self, sample: &Sample, extension: &str) -> Option<String> {
        let sidecar = sample.sidecars.iter().find(|s| s.extension == extension)?;
        if self
            .open_tar
            .as_ref()
            .is_none_or(|(open, _)| *open != sample.shard)
        {
            let file = File::open(&self.shards.get(sample.shard)?.path).ok()?;
            self.open_tar = Some((sample.shard, file));
        }
        let (_, file) = self.open_tar.as_ref()?;
        let mut bytes = vec![0; sidecar.size as usize];
        read_exact_at(file, &mut bytes, sidecar.offset).ok()?;
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// What a path names as an input, by its extension.
pub fn shard_kind_of(path: &Path) -> Option<&'static str> {
    let extension = path.extension()?.to_str()?.to_ascii_lowercase();
    match extension.as_str() {
        "tar" => Some("tar"),
        "parquet" => Some("parquet"),
        _ => None,
    }
}

/// Whether an argument is a pattern to expand (braces or glob characters) rather than a path.
pub fn is_pattern(arg: &str) -> bool {
    arg.contains(['{', '*', '?', '['])
}

/// The paths a pattern names: its brace expansions, each globbed (in name order) when it holds
/// glob characters. An error for a malformed pattern, or one that matches nothing.
pub fn expand_pattern(pattern: &str) -> Result<Vec<PathBuf>, String> {
    let mut paths = Vec::new();
    for name in braces::expand(pattern)? {
        if !name.contains(['*', '?', '[']) {
            paths.push(PathBuf::from(name));
            continue;
        }
        let matches = glob::glob(&name).map_err(|e| format!("\"{name}\": {e}"))?;
        let mut found: Vec<PathBuf> = matches
            .map(|m| m.map_err(|e| format!("\"{name}\": {e}")))
            .collect::<Result<_, _>>()?;
        found.sort();
        paths.extend(found);
    }
    if paths.is_empty() {
        return Err(format!("\"{pattern}\" matches no file"));
    }
    Ok(paths)
}

/// Scans the shard at `path` (number `index` of the run): its description and samples. A shard
/// that cannot be read at all has no samples and says why.
pub fn scan_shard(path: &Path, index: usize, image_column: Option<&str>) -> (Shard, Vec<Sample>) {
    let shard = |kind, problem| Shard {
        path: path.to_path_buf(),
        kind,
        problem,
    };
    if shard_kind_of(path) == Some("parquet") {
        match parquet_images::scan(path, index, image_column) {
            Ok(scan) => (
                shard(
                    ShardKind::Parquet {
                        column: scan.column,
                        row_groups: scan.row_groups,
                    },
                    None,
                ),
                scan.samples,
            ),
            Err(why) => (
                shard(
                    ShardKind::Parquet {
                        column: ImageColumn {
                            leaf: 0,
                            max_def_level: 0,
                        },
                        row_groups: Vec::new(),
                    },
                    Some(why),
                ),
                Vec::new(),
            ),
        }
    } else {
        match webdataset::scan(path, index) {
            Ok(scan) => (
                shard(
                    ShardKind::Tar,
                    scan.truncated.map(|t| format!("{}: {t}", path.display())),
                ),
                scan.samples,
            ),
            Err(why) => (shard(ShardKind::Tar, Some(why)), Vec::new()),
        }
    }
}

/// Reads samples' image bytes for one decoding worker: keeps the tar it read last open, and
/// shares the Parquet row groups with the other workers through `groups`.
pub struct SampleReader<'a> {
    shards: &'a [Shard],
    groups: &'a RowGroupCache,
    open_tar: Option<(usize, File)>,
    /// The most bytes an image may have (`--max-file-size`).
    max_bytes: u64,
}

impl<'a> SampleReader<'a> {
    pub fn new(shards: &'a [Shard], groups: &'a RowGroupCache, max_bytes: u64) -> Self {
        SampleReader {
            shards,
            groups,
            open_tar: None,
            max_bytes,
        }
    }

    /// Reads `sample`'s image bytes into `out`; `again`: it was read before in this run. The
    /// error says why without naming the sample (the caller does).
    pub fn read(&mut self, sample: &Sample, again: bool, out: &mut Vec<u8>) -> Result<(), String> {
        let shard = &self.shards[sample.shard];
        match (&sample.image, &shard.kind) {
            (ImageAt::Missing(why), _) => Err(why.clone()),
            (ImageAt::Tar { offset, size }, _) => {
                if *size > self.max_bytes {
                    return Err(format!(
                        "the image member has {size} bytes, more than --max-file-size {}",
                        self.max_bytes
                    ));
                }
                if self
                    .open_tar
                    .as_ref()
                    .is_none_or(|(open, _)| *open != sample.shard)
                {
                    let file = File::open(&shard.path).map_err(|e| e.to_string())?;
                    self.open_tar = Some((sample.shard, file));
                }
                let Some((_, file)) = &self.open_tar else {
                    unreachable!("opened above")
                };
                out.clear();
                out.resize(*size as usize, 0);
                read_exact_at(file, out, *offset)
                    .map_err(|e| format!("reading the image member: {e}"))
            }
            (ImageAt::Parquet { group, row }, ShardKind::Parquet { column, row_groups }) => {
                let rows = row_groups.get(*group).copied().unwrap_or(0);
                let next_rows = row_groups.get(group + 1).copied();
                self.groups.read(
                    (sample.shard, &shard.path),
                    column,
                    (*group, *row, rows, next_rows),
                    again,
                    out,
                )?;
                if out.len() as u64 > self.max_bytes {
                    return Err(format!(
                        "the image has {} bytes, more than --max-file-size {}",
                        out.len(),
                        self.max_bytes
                    ));
                }
                Ok(())
            }
            (ImageAt::Parquet { .. }, ShardKind::Tar) => {
                Err("a Parquet row in a tar shard".to_string())
            }
        }
    }
}

#[cfg(unix)]
fn read_exact_at(file: &File, out: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, out, offset)
}

#[cfg(not(unix))]
fn read_exact_at(file: &File, out: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = file;
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(out)
}

//! What to classify: files, directories (walked recursively, images by extension, each
//! directory's entries sorted by name so the order is the same on every run), lists of
//! paths (`--files-from`, a path a line, `-` for standard input; any bytes but a line break
//! make a path), and dataset shards (`.tar` webdataset shards and `.parquet` files, by path,
//! glob or brace range; see `datasets/`), whose samples join the list in shard order.

use super::datasets::{self, ImageAt, Sample, Shard};
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::io::BufRead;
use std::ops::Range;
use std::path::{Path, PathBuf};

pub use super::datasets::IMAGE_EXTENSIONS;

/// The inputs in order. An entry of a folder that could not be listed (an unreadable folder,
/// a dangling link, a loop) keeps its place among them, and `unlisted` says why: it fails as
/// an image that cannot be read would, in input order.
#[derive(Debug, Default, Clone)]
pub struct InputList {
    /// Per input: the image file, or the shard that holds the sample.
    pub paths: Vec<PathBuf>,
    pub unlisted: HashMap<PathBuf, String>,
    /// Per input, its sample when it comes from a dataset shard; empty when every input is a
    /// file.
    pub samples: Vec<Option<Sample>>,
    /// The dataset shards named, in order (their samples refer to them by index).
    pub shards: Vec<Shard>,
}

/// How dataset shards are read.
#[derive(Clone, Debug, Default)]
pub struct DatasetOptions {
    /// The Parquet column of the images (`--image-column`); default: the first that holds
    /// image bytes.
    pub image_column: Option<String>,
}

impl InputList {
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Input `index`'s sample, when it comes from a dataset shard.
    pub fn sample(&self, index: usize) -> Option<&Sample> {
        self.samples.get(index).and_then(Option::as_ref)
    }

    /// Input `index` as outputs name it: a file's path (see [`shown_path`]), a sample's shard
    /// and key (`shards/00001.tar/000123`).
    pub fn name(&self, index: usize) -> String {
        let shown = shown_path(&self.paths[index]);
        match self.sample(index) {
            Some(sample) if !sample.key.is_empty() => format!("{shown}/{}", sample.key),
            _ => shown,
        }
    }

    /// The inputs of `ranges` (in order, not overlapping), with the same shards.
    pub fn select(&self, ranges: &[Range<usize>]) -> InputList {
        let mut list = InputList {
            shards: self.shards.clone(),
            ..InputList::default()
        };
        for range in ranges {
            list.paths.extend_from_slice(&self.paths[range.clone()]);
            if !self.samples.is_empty() {
                list.samples.extend_from_slice(&self.samples[range.clone()]);
            }
            for path in &self.paths[range.clone()] {
                if let Some(why) = self.unlisted.get(path) {
                    list.unlisted.insert(path.clone(), why.clone());
                }
            }
        }
        list
    }

    fn push_file(&mut self, path: PathBuf) {
        if !self.samples.is_empty() {
            self.samples.push(None);
        }
        self.paths.push(path);
    }

    fn push_sample(&mut self, path: &Path, sample: Sample) {
        if self.samples.is_empty() {
            self.samples.resize(self.paths.len(), None);
        }
        self.paths.push(path.to_path_buf());
        self.samples.push(Some(sample));
    }

    /// Scans the shard at `path` and adds its samples; a shard that cannot be read, or a tar
    /// that ends early, adds an error record (an empty key) where its reading stopped, and is
    /// reported on stderr.
    fn add_shard(&mut self, path: &Path, options: &DatasetOptions) {
        let index = self.shards.len();
        let (shard, samples) = datasets::scan_shard(path, index, options.image_column.as_deref());
        for sample in samples {
            self.push_sample(path, sample);
        }
        if let Some(problem) = &shard.problem {
            eprintln!("vitrt: {problem}");
            self.push_sample(
                path,
                Sample {
                    shard: index,
                    key: String::new(),
                    image: ImageAt::Missing(problem.clone()),
                    sidecars: Vec::new(),
                },
            );
        }
        self.shards.push(shard);
    }
}

/// A path as outputs show it: as it is when it is UTF-8, else with each byte that is not
/// escaped as `\xNN`, and every backslash as `\\`, so that two different paths never show the
/// same (a lossy conversion would turn both `a<FF>` and `a<FE>` into `a<U+FFFD>`).
pub fn shown_path(path: &Path) -> String {
    let bytes = path.as_os_str().as_encoded_bytes();
    let mut shown = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                shown.push_str("\\\\");
            } else {
                shown.push(c);
            }
        }
        for byte in chunk.invalid() {
            shown.push_str(&format!("\\x{byte:02X}"));
        }
    }
    shown
}

/// Whether a walked file is taken as an image: by its extension.
pub fn is_image_path(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| IMAGE_EXTENSIONS.iter().any(|x| e.eq_ignore_ascii_case(x)))
}

/// The images named by `args` (in order), then those listed in `files_from` (`-`: standard
/// input). A named file is taken whatever its extension (a file that is no image fails when
/// it is decoded); a directory contributes the images under it.
pub fn collect_inputs(args: &[PathBuf], files_from: Option<&Path>) -> Result<InputList> {
    collect_inputs_with(args, files_from, &DatasetOptions::default())
}

/// As [`collect_inputs`], with dataset shards read as `options` say. An argument that is not a
/// path and holds braces or glob characters is a pattern (`shards/{00000..00099}.tar`,
/// `data/*.parquet`); a malformed pattern, or one that matches nothing, is an error.
pub fn collect_inputs_with(
    args: &[PathBuf],
    files_from: Option<&Path>,
    options: &DatasetOptions,
) -> Result<InputList> {
    let mut list = InputList::default();
    for arg in args {
        match arg.to_str() {
            Some(pattern) if !arg.exists() && datasets::is_pattern(pattern) => {
                let paths = datasets::expand_pattern(pattern).map_err(anyhow::Error::msg)?;
                for path in paths {
                    add(&mut list, &path, options);
                }
            }
            _ => add(&mut list, arg, options),
        }
    }
    if let Some(source) = files_from {
        let reader: Box<dyn BufRead> = if source == Path::new("-") {
            Box::new(std::io::stdin().lock())
        } else {
            Box::new(std::io::BufReader::new(
                std::fs::File::open(source)
                    .with_context(|| format!("cannot open --files-from {}", source.display()))?,
            ))
        };
        // Lines of bytes: a file name need not be UTF-8.
        for line in reader.split(b'\n') {
            let line =
                line.with_context(|| format!("reading --files-from {}", source.display()))?;
            let line = line.strip_suffix(b"\r").unwrap_or(&line);
            if !line.iter().all(u8::is_ascii_whitespace) {
                add(&mut list, &path_of_bytes(line), options);
            }
        }
    }
    Ok(list)
}

/// A path from a line's bytes (as they are on Unix; elsewhere, lossily as UTF-8).
fn path_of_bytes(bytes: &[u8]) -> PathBuf {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
    }
    #[cfg(not(unix))]
    {
        PathBuf::from(String::from_utf8_lossy(bytes).into_owned())
    }
}

fn add(list: &mut InputList, path: &Path, options: &DatasetOptions) {
    if datasets::shard_kind_of(path).is_some() && !path.is_dir() {
        list.add_shard(path, options);
        return;
    }
    if !path.is_dir() {
        list.push_file(path.to_path_buf());
        return;
    }
    for entry in walkdir::WalkDir::new(path)
        .follow_links(true)
        .sort_by_file_name()
    {
        match entry {
            Ok(entry) if entry.file_type().is_file() && is_image_path(entry.path()) => {
                list.push_file(entry.into_path());
            }
            Ok(_) => {}
            // In its place among the others, so that it is reported in name order and a
            // --fail-fast run stops there, not before the images listed ahead of it.
            Err(error) => {
                let at = error.path().unwrap_or(path).to_path_buf();
                let reason = match error.io_error() {
                    Some(io) => io.to_string(),
                    None => error.to_string(),
                };
                list.push_file(at.clone());
                list.unlisted.insert(at, format!("cannot list: {reason}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"x").unwrap();
    }

    #[test]
    fn directories_are_walked_recursively_in_name_order_keeping_images() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for name in [
            "b.png",
            "a.JPG",
            "notes.txt",
            "sub/z.webp",
            "sub/deeper/y.jpeg",
            "sub/c.gif",
            "A-first.png",
        ] {
            touch(&root.join(name));
        }
        let list = collect_inputs(&[root.to_path_buf()], None).unwrap();
        let names: Vec<String> = list
            .paths
            .iter()
            .map(|p| {
                p.strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/")
            })
            .collect();
        assert_eq!(
            names,
            [
                "A-first.png",
                "a.JPG",
                "b.png",
                "sub/deeper/y.jpeg",
                "sub/z.webp"
            ]
        );
        assert!(list.unlisted.is_empty());
        // Twice the same answer.
        let again = collect_inputs(&[root.to_path_buf()], None).unwrap();
        assert_eq!(again.paths, list.paths);
    }

    #[test]
    fn named_files_are_kept_whatever_their_extension_and_in_argument_order() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.txt");
        let b = dir.path().join("missing.png");
        touch(&a);
        let list = collect_inputs(&[b.clone(), a.clone()], None).unwrap();
        assert_eq!(list.paths, [b, a]);
    }

    #[test]
    fn files_from_reads_a_path_a_line() {
        let dir = tempfile::tempdir().unwrap();
        let x = dir.path().join("x.png");
        let sub = dir.path().join("sub");
        touch(&sub.join("y.png"));
        let listing = dir.path().join("list.txt");
        std::fs::write(
            &listing,
            format!("{}\r\n\n   \n{}\n", x.display(), sub.display()),
        )
        .unwrap();
        let list = collect_inputs(&[], Some(&listing)).unwrap();
        assert_eq!(list.paths, [x, sub.join("y.png")]);
        let error = collect_inputs(&[], Some(&dir.path().join("nope.txt"))).unwrap_err();
        assert!(format!("{error:#}").contains("nope.txt"), "{error:#}");
    }

    #[cfg(unix)]
    #[test]
    fn entries_that_cannot_be_listed_keep_their_place_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        touch(&root.join("a.png"));
        std::os::unix::fs::symlink(root.join("nowhere.png"), root.join("b-dangling.png")).unwrap();
        touch(&root.join("c.png"));
        let list = collect_inputs(&[root.to_path_buf()], None).unwrap();
        let dangling = root.join("b-dangling.png");
        assert_eq!(
            list.paths,
            [root.join("a.png"), dangling.clone(), root.join("c.png")]
        );
        assert!(
            list.unlisted[&dangling].starts_with("cannot list: "),
            "{:?}",
            list.unlisted
        );
    }

    #[cfg(unix)]
    #[test]
    fn names_that_are_not_utf8_are_read_and_shown_apart() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let ff = dir.path().join(std::ffi::OsStr::from_bytes(b"a\xff.png"));
        let fe = dir.path().join(std::ffi::OsStr::from_bytes(b"a\xfe.png"));
        let listing = dir.path().join("list.txt");
        let mut bytes = ff.as_os_str().as_bytes().to_vec();
        bytes.push(b'\n');
        bytes.extend_from_slice(fe.as_os_str().as_bytes());
        bytes.push(b'\n');
        std::fs::write(&listing, bytes).unwrap();
        let list = collect_inputs(&[], Some(&listing)).unwrap();
        assert_eq!(list.paths, [ff.clone(), fe.clone()]);
        let (shown_ff, shown_fe) = (shown_path(&ff), shown_path(&fe));
        assert!(shown_ff.ends_with(r"a\xFF.png"), "{shown_ff}");
        assert!(shown_fe.ends_with(r"a\xFE.png"), "{shown_fe}");
        // A UTF-8 name that spells an escape is not taken for one.
        assert_eq!(shown_path(Path::new(r"a\xFF.png")), r"a\\xFF.png");
        assert_eq!(shown_path(Path::new("plain/é.png")), "plain/é.png");
    }
}

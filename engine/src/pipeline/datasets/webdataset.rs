//! Webdataset tar shards: the members of a tar grouped into samples as webdataset groups them.
//! A member's key is its path up to the first dot of its file name, its extension the rest,
//! lowercased (`a/b/000123.seg.png`: key `a/b/000123`, extension `seg.png`); consecutive
//! members with the same key make one sample. The shard is scanned once, header by header
//! (the data is skipped by seeking), to learn its samples and where each image's bytes and
//! each small `.json`/`.txt` sidecar lie; the decoding workers then read each image's bytes
//! at its offset, and the writers of `--output-dir` the sidecars (so that the run does not
//! hold every sample's text in memory).

use super::{ImageAt, Sample, Sidecar, IMAGE_EXTENSIONS};
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

/// Sidecars larger than this are not kept (a caption or a metadata record is far smaller).
const MAX_SIDECAR_BYTES: u64 = 1 << 20;

/// What a scan of one tar found: its samples in order and, when the tar ends early or a header
/// cannot be read, how far it was read.
#[derive(Debug, Default)]
pub struct TarScan {
    pub samples: Vec<Sample>,
    /// Why the scan stopped before the end of the archive.
    pub truncated: Option<String>,
}

/// A member's key and extension as webdataset splits its path; `None` for a member it ignores
/// (no dot in the file name, or a hidden file).
pub fn key_and_extension(path: &str) -> Option<(&str, String)> {
    let name_at = path.rfind('/').map_or(0, |slash| slash + 1);
    let name = &path[name_at..];
    if name.starts_with('.') {
        return None;
    }
    let dot = name.find('.')?;
    let key = &path[..name_at + dot];
    Some((key, name[dot + 1..].to_ascii_lowercase()))
}

/// One member of the current sample.
struct Member {
    extension: String,
    offset: u64,
    size: u64,
}

/// Scans the tar at `path` (shard number `shard` of the run). An error only when the file
/// cannot be opened at all; a tar that ends early gives the samples read before it.
pub fn scan(path: &Path, shard: usize) -> Result<TarScan, String> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let length = file
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    let mut archive = tar::Archive::new(BufReader::new(file));
    let entries = archive
        .entries_with_seek()
        .map_err(|e| format!("{}: not a tar: {e}", path.display()))?;
    let mut scan = TarScan::default();
    let mut key: Option<String> = None;
    let mut members: Vec<Member> = Vec::new();
    let mut sidecars: Vec<Sidecar> = Vec::new();
    let mut read_to = 0u64;
    // Where the reading stopped early, and why.
    let mut stopped: Option<(u64, String)> = None;
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(error) => {
                stopped = Some((read_to, error.to_string()));
                break;
            }
        };
        let offset = entry.raw_file_position();
        let size = entry.size();
        if offset.saturating_add(size) > length {
            let why = format!("a member's data would end at byte {}", offset + size);
            stopped = Some((offset, why));
            break;
        }
        read_to = offset + size.next_multiple_of(512);
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let member_path = match entry.path() {
            Ok(p) => p.to_string_lossy().into_owned(),
            Err(_) => continue,
        };
        let Some((member_key, extension)) = key_and_extension(&member_path) else {
            continue;
        };
        if key.as_deref() != Some(member_key) {
            if let Some(done) = key.take() {
                scan.samples
                    .push(sample(shard, done, &members, std::mem::take(&mut sidecars)));
            }
            members.clear();
            key = Some(member_key.to_string());
        }
        if matches!(extension.as_str(), "json" | "txt") && size <= MAX_SIDECAR_BYTES {
            sidecars.push(Sidecar {
                extension: extension.clone(),
                offset,
                size,
            });
        }
        members.push(Member {
            extension,
            offset,
            size,
        });
    }
    if let Some(done) = key {
        scan.samples.push(sample(shard, done, &members, sidecars));
    }
    if let Some((at, why)) = stopped {
        scan.truncated = Some(format!(
            "the tar ends early: read {at} of its {length} bytes, {} whole samples ({why})",
            scan.samples.len()
        ));
    }
    Ok(scan)
}

/// The sample of `members`: its image is the first member with an image extension (in the
/// order of [`IMAGE_EXTENSIONS`]); a sample with none, or with two members of one extension, is
/// an error record.
fn sample(shard: usize, key: String, members: &[Member], sidecars: Vec<Sidecar>) -> Sample {
    let mut image = None;
    for wanted in IMAGE_EXTENSIONS {
        if let Some(m) = members.iter().find(|m| m.extension == wanted) {
            image = Some(m);
            break;
        }
    }
    let duplicate = members
        .iter()
        .enumerate()
        .find(|(i, m)| members[..*i].iter().any(|o| o.extension == m.extension));
    let image = match (image, duplicate) {
        (_, Some((_, m))) => ImageAt::Missing(format!(
            "two members with the extension .{} under one key",
            m.extension
        )),
        (Some(m), None) => ImageAt::Tar {
            offset: m.offset,
            size: m.size,
        },
        (None, None) => {
            let has: Vec<&str> = members.iter().map(|m| m.extension.as_str()).collect();
            ImageAt::Missing(format!(
                "no image member (.jpg, .jpeg, .png, .webp); it has .{}",
                has.join(", .")
            ))
        }
    };
    Sample {
        shard,
        key,
        image,
        sidecars,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_at_the_first_dot_of_the_file_name() {
        assert_eq!(
            key_and_extension("a/b.c/000123.seg.PNG"),
            Some(("a/b.c/000123", "seg.png".to_string()))
        );
        assert_eq!(key_and_extension("x.jpg"), Some(("x", "jpg".to_string())));
        assert_eq!(key_and_extension("dir/noextension"), None);
        assert_eq!(key_and_extension("dir/._x.jpg"), None);
    }
}

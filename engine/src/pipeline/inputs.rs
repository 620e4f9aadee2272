//! What to classify: files, directories (walked recursively, images by extension, each
//! directory's entries sorted by name so the order is the same on every run) and lists of
//! paths (`--files-from`, a path a line, `-` for standard input; any bytes but a line break
//! make a path).

use anyhow::{Context, Result};
use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// The extensions of the formats the preprocessing reads, compared without case.
pub const IMAGE_EXTENSIONS: [&str; 4] = ["jpg", "jpeg", "png", "webp"];

/// The inputs in order. An entry of a folder that could not be listed (an unreadable folder,
/// a dangling link, a loop) keeps its place among them, and `unlisted` says why: it fails as
/// an image that cannot be read would, in input order.
#[derive(Debug, Default)]
pub struct InputList {
    pub paths: Vec<PathBuf>,
    pub unlisted: HashMap<PathBuf, String>,
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
    let mut list = InputList::default();
    for arg in args {
        add(&mut list, arg);
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
                add(&mut list, &path_of_bytes(line));
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

fn add(list: &mut InputList, path: &Path) {
    if !path.is_dir() {
        list.paths.push(path.to_path_buf());
        return;
    }
    for entry in walkdir::WalkDir::new(path)
        .follow_links(true)
        .sort_by_file_name()
    {
        match entry {
            Ok(entry) if entry.file_type().is_file() && is_image_path(entry.path()) => {
                list.paths.push(entry.into_path());
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
                list.paths.push(at.clone());
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

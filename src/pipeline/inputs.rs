//! What to classify: files, directories (walked recursively, images by extension, each
//! directory's entries sorted by name so the order is the same on every run) and lists of
//! paths (`--files-from`, a path a line, `-` for standard input).

use anyhow::{Context, Result};
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// The extensions of the formats the preprocessing reads, compared without case.
pub const IMAGE_EXTENSIONS: [&str; 4] = ["jpg", "jpeg", "png", "webp"];

/// The inputs in order, and the entries that could not be listed (an unreadable directory),
/// each with why: those count as failed images.
#[derive(Debug, Default)]
pub struct InputList {
    pub paths: Vec<PathBuf>,
    pub unlisted: Vec<(PathBuf, String)>,
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
        for line in reader.lines() {
            let line =
                line.with_context(|| format!("reading --files-from {}", source.display()))?;
            let line = line.trim_end_matches('\r');
            if !line.trim().is_empty() {
                add(&mut list, Path::new(line));
            }
        }
    }
    Ok(list)
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
            Err(error) => {
                let at = error.path().unwrap_or(path).to_path_buf();
                let reason = match error.io_error() {
                    Some(io) => io.to_string(),
                    None => error.to_string(),
                };
                list.unlisted.push((at, format!("cannot list: {reason}")));
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
}

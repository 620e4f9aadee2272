//! Files the CLI writes (`infer --output`, `embed --output`, `bench --json/--plot`,
//! `profile --json/--trace`, `tune --json`), checked before any work and written whole or not
//! at all (except `embed`'s JSON Lines, streamed through [`OutputFile::open_streaming`]).
//!
//! - [`OutputFile::check`] runs first: the folder must exist and take a new file (probed by
//!   creating and removing one), a symbolic link is followed to its final target, and a
//!   target that exists must be a regular file (not a folder, a device or a fifo) and, unless
//!   `--force`, writable.
//! - [`OutputFile::write`] writes a temporary file beside the (resolved) target, syncs it,
//!   renames it over the target and syncs the folder, so that a failure (a full disk, a kill)
//!   leaves the old file or none, never half of one. The file keeps the mode of the file it
//!   replaces; a new one gets the usual mode for the umask.
//! - `-` (where the command allows it), `/dev/stdout`, `/dev/fd/1` and `/proc/self/fd/1`
//!   mean stdout.

use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::fs::{self, File, Permissions};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

/// What an output holds, for the stdout rules: binary bytes are never sent to a terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contents {
    /// Text (JSON, SVG): fine on a terminal.
    Text,
    /// Binary bytes (safetensors): refused on a terminal.
    Binary,
}

/// A checked output: stdout, or a regular file to create or replace.
#[derive(Debug)]
pub struct OutputFile {
    /// The path as the user gave it, for messages.
    shown: PathBuf,
    target: Target,
}

#[derive(Debug)]
enum Target {
    Stdout,
    /// The file the bytes end up in (a link's final target), its folder, and the mode of the
    /// file it replaces.
    File {
        path: PathBuf,
        folder: PathBuf,
        replaced: Option<Permissions>,
    },
}

/// How many links are followed before giving up (as Linux's ELOOP).
const MAX_LINKS: usize = 40;

impl OutputFile {
    /// Checks that `path` can be written, before any work. `stdout_ok`: whether `-` may mean
    /// stdout for this option (not where stdout already carries the command's table).
    /// `force`: replace a read-only file.
    pub fn check(
        path: &Path,
        contents: Contents,
        stdout_ok: bool,
        force: bool,
    ) -> Result<OutputFile> {
        let shown = path.to_path_buf();
        if path.as_os_str() == "-" && !stdout_ok {
            bail!("cannot write to `-` here: stdout carries the command's own output; name a file");
        }
        if path.as_os_str() == "-" || means_stdout(path) {
            if contents == Contents::Binary && std::io::stdout().is_terminal() {
                bail!(
                    "refusing to write binary safetensors to a terminal: redirect stdout \
                     (`> out.safetensors`) or name a file"
                );
            }
            return Ok(OutputFile {
                shown,
                target: Target::Stdout,
            });
        }
        let resolved = resolve_links(path)?;
        let folder = match resolved.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let named = if resolved == path {
            path.display().to_string()
        } else {
            format!("{} (a link to {})", path.display(), resolved.display())
        };
        let replaced = match fs::metadata(&resolved) {
            Ok(meta) => {
                let kind = meta.file_type();
                if kind.is_dir() {
                    bail!("cannot write {named}: it is a folder; name a file in it");
                }
                if !kind.is_file() {
                    bail!(
                        "cannot write {named}: it is {}, not a regular file",
                        describe_special(&kind)
                    );
                }
                if meta.permissions().readonly() && !force {
                    bail!("cannot write {named}: the file is read-only (--force replaces it)");
                }
                Some(meta.permissions())
            }
            // A missing or non-folder parent: the folder's check below says which.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                None
            }
            Err(e) => bail!("cannot write {named}: {e}"),
        };
        if resolved.file_name().is_none() {
            bail!("cannot write {named}: it names no file");
        }
        match fs::metadata(&folder) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => bail!("cannot write {named}: {} is not a folder", folder.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
                "cannot write {named}: {} is not a folder (it does not exist)",
                folder.display()
            ),
            Err(e) => bail!("cannot write {named}: {}: {e}", folder.display()),
        }
        // The one sure test that the folder takes a new file (permissions, read-only mounts,
        // root): make one.
        let probe = create_temp(&resolved, &folder)
            .map_err(|e| anyhow::anyhow!("cannot write {named}: {}: {e}", folder.display()))?;
        drop(probe);
        Ok(OutputFile {
            shown,
            target: Target::File {
                path: resolved,
                folder,
                replaced,
            },
        })
    }

    /// [`OutputFile::check`] for a text report next to a table on stdout (so no `-`).
    pub fn check_report(path: &Path, force: bool) -> Result<OutputFile> {
        OutputFile::check(path, Contents::Text, false, force)
    }

    /// Writes `bytes` and says so on stderr.
    pub fn write_and_tell(&self, bytes: &[u8]) -> Result<()> {
        self.write(bytes)?;
        eprintln!("wrote {}", self.display());
        Ok(())
    }

    /// Whether the bytes go to stdout.
    pub fn is_stdout(&self) -> bool {
        matches!(self.target, Target::Stdout)
    }

    /// The path as given, for messages.
    pub fn display(&self) -> std::path::Display<'_> {
        self.shown.display()
    }

    /// Opens the output for writing as the run goes (JSON Lines), not whole: stdout, or the
    /// target file created or truncated in place. A read-only file (accepted only with
    /// `--force`) is removed first, so that a new one can be made.
    pub fn open_streaming(&self) -> Result<Box<dyn Write>> {
        match &self.target {
            Target::Stdout => Ok(Box::new(std::io::stdout())),
            Target::File { path, replaced, .. } => {
                let fail = |e: std::io::Error| {
                    anyhow::anyhow!("cannot write {}: {e}", self.shown.display())
                };
                if replaced.as_ref().is_some_and(|p| p.readonly()) {
                    fs::remove_file(path).map_err(fail)?;
                }
                Ok(Box::new(File::create(path).map_err(fail)?))
            }
        }
    }

    /// Writes `bytes` whole: to stdout, or to a temporary file renamed over the target.
    pub fn write(&self, bytes: &[u8]) -> Result<()> {
        match &self.target {
            Target::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(bytes)
                    .and_then(|()| out.flush())
                    .context("cannot write to stdout")
            }
            Target::File {
                path,
                folder,
                replaced,
            } => {
                let fail = |e: std::io::Error| {
                    anyhow::anyhow!("cannot write {}: {e}", self.shown.display())
                };
                let mut temp = create_temp(path, folder).map_err(fail)?;
                temp.write_all(bytes).map_err(fail)?;
                if let Some(permissions) = replaced {
                    temp.as_file()
                        .set_permissions(permissions.clone())
                        .map_err(fail)?;
                }
                temp.as_file().sync_all().map_err(fail)?;
                temp.persist(path).map_err(|e| fail(e.error))?;
                // The rename itself, durable: best effort (some filesystems refuse to sync a
                // folder, and the file is already whole).
                if let Ok(dir) = File::open(folder) {
                    let _ = dir.sync_all();
                }
                Ok(())
            }
        }
    }
}

/// A new temporary file beside `target`, in `folder`: `.<name>.XXXXXX.tmp`, mode 0666 less
/// the umask.
fn create_temp(target: &Path, folder: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    let mut prefix = OsString::from(".");
    prefix.push(target.file_name().unwrap_or_default());
    prefix.push(".");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp").rand_bytes(6);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(Permissions::from_mode(0o666));
    }
    builder.tempfile_in(folder)
}

/// Paths that name this process's stdout whatever it is (a pipe, a terminal, a file the
/// shell opened): writing through a rename would replace the link itself.
fn means_stdout(path: &Path) -> bool {
    ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"]
        .iter()
        .any(|p| path == Path::new(p))
}

/// Follows symbolic links to the final path (which need not exist: a dangling link is
/// written through to its target).
fn resolve_links(path: &Path) -> Result<PathBuf> {
    let mut current = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let next = fs::read_link(&current)
                    .with_context(|| format!("cannot follow the link {}", current.display()))?;
                current = match current.parent() {
                    Some(parent) if next.is_relative() => parent.join(next),
                    _ => next,
                };
            }
            _ => return Ok(current),
        }
    }
    bail!(
        "cannot write {}: more than {MAX_LINKS} symbolic links to follow",
        path.display()
    )
}

fn describe_special(kind: &fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_char_device() || kind.is_block_device() {
            return "a device";
        }
        if kind.is_fifo() {
            return "a fifo";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    let _ = kind;
    "something else"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(path: &Path) -> Result<OutputFile> {
        OutputFile::check(path, Contents::Text, false, false)
    }

    #[test]
    fn new_and_existing_files_are_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        check(&path).unwrap().write(b"one").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"one");
        check(&path).unwrap().write(b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
    }

    #[cfg(unix)]
    #[test]
    fn links_are_written_through_and_modes_kept() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let real_dir = dir.path().join("real");
        fs::create_dir(&real_dir).unwrap();
        let real = real_dir.join("data.json");
        fs::write(&real, "old").unwrap();
        fs::set_permissions(&real, Permissions::from_mode(0o640)).unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink("real/data.json", &link).unwrap();
        check(&link).unwrap().write(b"new").unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&real).unwrap(), b"new");
        let mode = fs::metadata(&real).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);

        // A dangling link: the file is created where it points.
        let dangling = dir.path().join("dangling.json");
        std::os::unix::fs::symlink(real_dir.join("later.json"), &dangling).unwrap();
        check(&dangling).unwrap().write(b"x").unwrap();
        assert_eq!(fs::read(real_dir.join("later.json")).unwrap(), b"x");
    }

    #[cfg(unix)]
    #[test]
    fn special_files_folders_and_read_only_files_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let message = |path: &Path| format!("{:#}", check(path).unwrap_err());
        assert!(message(Path::new("/dev/null")).contains("is a device"));
        assert!(message(dir.path()).contains("is a folder"));
        let missing = dir.path().join("no/such/out.json");
        assert!(message(&missing).contains("is not a folder (it does not exist)"));
        assert!(message(Path::new("-")).contains("stdout"));

        let read_only = dir.path().join("ro.json");
        fs::write(&read_only, "keep").unwrap();
        fs::set_permissions(&read_only, Permissions::from_mode(0o444)).unwrap();
        assert!(message(&read_only).contains("read-only (--force replaces it)"));
        assert_eq!(fs::read(&read_only).unwrap(), b"keep");
        OutputFile::check(&read_only, Contents::Text, false, true)
            .unwrap()
            .write(b"replaced")
            .unwrap();
        assert_eq!(fs::read(&read_only).unwrap(), b"replaced");
    }
}

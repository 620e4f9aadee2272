//! Files the CLI writes (`infer --output`, `embed --output`, `embed-text --output`,
//! `classify --stats`, `bench --json/--plot`, `profile --json/--trace`, `tune --json`), checked
//! before any work and written whole or not at all: the one mechanism every writer goes
//! through.
//!
//! - [`OutputFile::check`] runs first: the folder must exist and take a new file (probed by
//!   creating and removing one), a symbolic link is followed to its final target, and a
//!   target that exists must be a regular file (not a folder, a device or a fifo) and, unless
//!   `--force`, writable. Temporary files of ours that a killed run left in the folder more
//!   than an hour ago are removed then.
//! - [`OutputFile::write`] writes a temporary file beside the (resolved) target, syncs it,
//!   renames it over the target and syncs the folder, so that a failure (a full disk, a kill)
//!   leaves the old file or none, never half of one. The file keeps the mode of the file it
//!   replaces; a new one gets the usual mode for the umask.
//! - [`OutputFile::open_streaming`] does the same for output written as the run goes (JSON
//!   Lines): into the temporary file, renamed over the target by [`Streaming::commit`] when the
//!   run ends; a run that fails before leaves the old file as it was.
//! - [`write_unit`] writes several files that belong together (an `.npy` and its list of row
//!   names): every one is written and synced as a temporary file before the first is renamed,
//!   so a full disk or any failure while writing leaves all of the old ones.
//! - `-` (where the command allows it), `/dev/stdout`, `/dev/fd/1` and `/proc/self/fd/1`
//!   mean stdout; a reader that closed it ends the process quietly with status 0, as `outln!`
//!   does.

use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::fs::{self, File, Permissions};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// What our temporary files' names hold between the target's name and the random part:
/// `.<name>.vitrt-XXXXXX.tmp`, so that the stale ones can be told from anyone else's.
const TEMP_MARK: &str = ".vitrt-";

/// Our temporary files last modified longer ago than this are a killed run's and are removed
/// when a later run checks an output in their folder (as the kernel cache does in its own).
const STALE_TEMP_AGE: Duration = Duration::from_secs(3600);

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
                        vitrt_weights::describe_file_type(&kind)
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
        remove_stale_temps(&folder, STALE_TEMP_AGE);
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

    /// Opens the output for writing as the run goes (JSON Lines): stdout, or a temporary file
    /// beside the target that [`Streaming::commit`] renames over it once the run is done. Until
    /// then the old file stays as it was; dropped without a commit (an error), the temporary
    /// file is removed.
    pub fn open_streaming(&self) -> Result<Streaming<'_>> {
        let temp = match &self.target {
            Target::Stdout => None,
            Target::File { path, folder, .. } => {
                Some(create_temp(path, folder).map_err(|e| self.failed(e))?)
            }
        };
        Ok(Streaming { output: self, temp })
    }

    /// Writes `bytes` whole: to stdout, or to a temporary file renamed over the target.
    pub fn write(&self, bytes: &[u8]) -> Result<()> {
        write_unit(&[(self, bytes)])
    }

    /// Fails if the target exists and is one of `inputs` (the same file under any name: a
    /// link, a hard link), which the run would read after replacing it, or replace once read.
    pub fn check_not_among(&self, inputs: &[PathBuf]) -> Result<()> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let Target::File { path, .. } = &self.target else {
                return Ok(());
            };
            let Ok(target) = fs::metadata(path) else {
                return Ok(());
            };
            let same =
                |meta: fs::Metadata| meta.dev() == target.dev() && meta.ino() == target.ino();
            if let Some(input) = inputs
                .iter()
                .find(|input| fs::metadata(input).is_ok_and(same))
            {
                bail!(
                    "{} is the output file {}: the run would replace an input it reads; name \
                     another output",
                    input.display(),
                    self.display()
                );
            }
        }
        let _ = inputs;
        Ok(())
    }

    /// A write error, naming the file as given.
    fn failed(&self, error: std::io::Error) -> anyhow::Error {
        anyhow::anyhow!("cannot write {}: {error}", self.shown.display())
    }

    /// Gives the temporary file the replaced file's mode and syncs it: ready to be renamed.
    fn finish_temp(&self, temp: &tempfile::NamedTempFile) -> Result<()> {
        if let Target::File {
            replaced: Some(permissions),
            ..
        } = &self.target
        {
            temp.as_file()
                .set_permissions(permissions.clone())
                .map_err(|e| self.failed(e))?;
        }
        temp.as_file().sync_all().map_err(|e| self.failed(e))
    }

    /// Renames a finished temporary file over the target, and makes the rename durable (best
    /// effort: some filesystems refuse to sync a folder, and the file is already whole).
    fn rename_into_place(&self, temp: tempfile::NamedTempFile) -> Result<()> {
        let Target::File { path, folder, .. } = &self.target else {
            unreachable!("only a file output has a temporary file");
        };
        temp.persist(path).map_err(|e| self.failed(e.error))?;
        if let Ok(dir) = File::open(folder) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

/// Writes several outputs that belong together (an `.npy` and its row names), in the order
/// given: every file output is first written whole and synced as a temporary file beside its
/// target, and only then are they renamed into place, one after the other. A failure while
/// writing (a full disk) leaves every old file as it was; name the file readers look at first
/// (the array) last. Stdout outputs are written where they come.
pub fn write_unit(outputs: &[(&OutputFile, &[u8])]) -> Result<()> {
    let mut ready = Vec::with_capacity(outputs.len());
    for &(output, bytes) in outputs {
        match &output.target {
            Target::Stdout => write_stdout(bytes)?,
            Target::File { path, folder, .. } => {
                let mut temp = create_temp(path, folder).map_err(|e| output.failed(e))?;
                temp.write_all(bytes).map_err(|e| output.failed(e))?;
                output.finish_temp(&temp)?;
                ready.push((output, temp));
            }
        }
    }
    for (output, temp) in ready {
        output.rename_into_place(temp)?;
    }
    Ok(())
}

/// An output written as the run goes: stdout, or a temporary file renamed over the target
/// by [`Streaming::commit`]; dropped without it, the temporary file is removed and the old
/// file kept.
pub struct Streaming<'a> {
    output: &'a OutputFile,
    /// `None` for stdout.
    temp: Option<tempfile::NamedTempFile>,
}

impl Streaming<'_> {
    /// Makes what was written the output: the temporary file synced and renamed over the
    /// target (stdout: nothing to do).
    pub fn commit(self) -> Result<()> {
        match self.temp {
            None => Ok(()),
            Some(temp) => {
                self.output.finish_temp(&temp)?;
                self.output.rename_into_place(temp)
            }
        }
    }
}

impl Write for Streaming<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match &mut self.temp {
            Some(temp) => temp.write(bytes),
            None => quiet_on_closed(std::io::stdout().write(bytes)),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.temp {
            Some(temp) => temp.flush(),
            None => quiet_on_closed(std::io::stdout().flush()),
        }
    }
}

/// Writes `bytes` to stdout whole.
fn write_stdout(bytes: &[u8]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    quiet_on_closed(out.write_all(bytes).and_then(|()| out.flush()))
        .map_err(|e| anyhow::anyhow!("cannot write to stdout: {e}"))
}

/// A write to stdout whose reader has gone (`| head -c1`) ends the process quietly with status
/// 0, as every command's text output does (`outln!`).
fn quiet_on_closed<T>(written: std::io::Result<T>) -> std::io::Result<T> {
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => other,
    }
}

/// A new temporary file beside `target`, in `folder`: `.<name>.vitrt-XXXXXX.tmp`, mode 0666
/// less the umask.
fn create_temp(target: &Path, folder: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    let mut prefix = OsString::from(".");
    prefix.push(target.file_name().unwrap_or_default());
    prefix.push(TEMP_MARK);
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp").rand_bytes(6);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(Permissions::from_mode(0o666));
    }
    builder.tempfile_in(folder)
}

/// Whether a file name is one [`create_temp`] makes: `.<name>.vitrt-XXXXXX.tmp`, the random
/// part six letters or digits.
fn is_our_temp_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")) else {
        return false;
    };
    let Some((target, random)) = rest.rsplit_once(TEMP_MARK) else {
        return false;
    };
    !target.is_empty() && random.len() == 6 && random.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Removes our temporary files in `folder` last modified more than `age` ago: a killed run's
/// (a live run's temporary file is written to as it goes, or lives for seconds). Best effort:
/// a file that cannot be removed is left.
fn remove_stale_temps(folder: &Path, age: Duration) -> usize {
    let Ok(entries) = fs::read_dir(folder) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_str().is_some_and(is_our_temp_name) {
            continue;
        }
        let stale = entry.metadata().is_ok_and(|meta| {
            meta.is_file()
                && meta
                    .modified()
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|elapsed| elapsed > age)
        });
        if stale && fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
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

    #[test]
    fn streamed_output_replaces_the_old_file_only_when_committed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        fs::write(&path, "old\n").unwrap();
        let output = check(&path).unwrap();
        // A run that fails after writing some lines: the old file stays, no temporary left.
        let mut stream = output.open_streaming().unwrap();
        stream.write_all(b"new\n").unwrap();
        assert_eq!(
            fs::read(&path).unwrap(),
            b"old\n",
            "not truncated at the start"
        );
        drop(stream);
        assert_eq!(fs::read(&path).unwrap(), b"old\n");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        // A run that ends: the new lines replace the old file.
        let mut stream = output.open_streaming().unwrap();
        stream.write_all(b"new\n").unwrap();
        stream.commit().unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new\n");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_unit_is_renamed_only_once_every_file_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let names = dir.path().join("e.npy.images.txt");
        fs::write(&names, "old names").unwrap();
        let names_out = check(&names).unwrap();
        // The second file's folder goes after the check: its temporary file cannot be made,
        // so the first file may not change either.
        let sub = dir.path().join("sub");
        fs::create_dir(&sub).unwrap();
        let array_out = check(&sub.join("e.npy")).unwrap();
        fs::remove_dir(&sub).unwrap();
        let error =
            write_unit(&[(&names_out, b"new names"), (&array_out, b"new array")]).unwrap_err();
        assert!(format!("{error:#}").contains("e.npy"), "{error:#}");
        assert_eq!(
            fs::read(&names).unwrap(),
            b"old names",
            "renamed before the unit was whole"
        );
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "a temporary file left"
        );

        let array = dir.path().join("e.npy");
        let array_out = check(&array).unwrap();
        write_unit(&[(&names_out, b"new names"), (&array_out, b"new array")]).unwrap();
        assert_eq!(fs::read(&names).unwrap(), b"new names");
        assert_eq!(fs::read(&array).unwrap(), b"new array");
    }

    #[test]
    fn stale_temporary_files_of_ours_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let ours = dir.path().join(".out.json.vitrt-a1B2c3.tmp");
        let fresh = dir.path().join(".out.json.vitrt-zzzzzz.tmp");
        let theirs = dir.path().join(".out.json.a1B2c3.tmp");
        let data = dir.path().join("data.vitrt-a1B2c3.tmp");
        for path in [&ours, &fresh, &theirs, &data] {
            fs::write(path, "x").unwrap();
        }
        let old = std::time::SystemTime::now() - Duration::from_secs(7200);
        for path in [&ours, &theirs, &data] {
            File::options()
                .write(true)
                .open(path)
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        check(&dir.path().join("out.json")).unwrap();
        assert!(!ours.exists(), "a killed run's temporary file stays");
        assert!(fresh.exists() && theirs.exists() && data.exists());
        assert!(is_our_temp_name(".e.npy.images.txt.vitrt-Ab12Cd.tmp"));
        assert!(!is_our_temp_name(".vitrt-Ab12Cd.tmp"));
        assert!(!is_our_temp_name(".e.npy.vitrt-Ab12C.tmp"));
    }

    #[cfg(unix)]
    #[test]
    fn an_output_that_is_an_input_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("s.png");
        fs::write(&image, "png bytes").unwrap();
        let link = dir.path().join("link.png");
        std::os::unix::fs::symlink(&image, &link).unwrap();
        let other = dir.path().join("t.png");
        fs::write(&other, "png bytes").unwrap();
        let output = check(&image).unwrap();
        let error = output.check_not_among(&[other.clone(), link]).unwrap_err();
        assert!(format!("{error}").contains("is the output file"), "{error}");
        assert!(output.check_not_among(&[other]).is_ok());
        assert_eq!(fs::read(&image).unwrap(), b"png bytes");
        let new = check(&dir.path().join("new.jsonl")).unwrap();
        assert!(new.check_not_among(&[image]).is_ok());
    }
}

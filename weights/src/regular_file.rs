//! Opening a file that is to be read whole (an image, a checkpoint, a tensor file) without
//! ever blocking or reading forever: a FIFO would block the opening thread until a writer
//! comes (a run that never ends, nothing printed), and a device such as `/dev/zero` would be
//! read up to a size limit before being refused. The file is opened with `O_NONBLOCK` (which
//! changes nothing for a regular file) and its type is checked on the open descriptor, so a
//! path swapped between a check and the open cannot slip through.

use std::fs::{File, FileType, OpenOptions};
use std::io;
use std::path::Path;

/// Opens `path` for reading if it is a regular file (a link is followed); otherwise an error
/// of kind `InvalidInput` saying what it is ("a fifo, not a regular file").
pub fn open_regular_file(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = match options.open(path) {
        Ok(file) => file,
        // A socket cannot be opened at all (ENXIO, "No such device or address"): say what it
        // is instead.
        Err(error) => {
            return Err(match std::fs::metadata(path) {
                Ok(meta) if !meta.is_file() && !meta.is_dir() => not_regular(&meta.file_type()),
                _ => error,
            })
        }
    };
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(not_regular(&kind));
    }
    Ok(file)
}

fn not_regular(kind: &FileType) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{}, not a regular file", describe(kind)),
    )
}

/// What a file that is not a regular one is, in a few words.
pub fn describe(kind: &FileType) -> &'static str {
    if kind.is_dir() {
        return "a folder";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a fifo";
        }
        if kind.is_socket() {
            return "a socket";
        }
        if kind.is_char_device() || kind.is_block_device() {
            return "a device";
        }
    }
    if kind.is_file() {
        return "a regular file";
    }
    "something else"
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn message(path: &Path) -> String {
        open_regular_file(path).unwrap_err().to_string()
    }

    #[test]
    fn only_regular_files_open_and_a_fifo_never_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.jpg");
        std::fs::write(&file, b"bytes").unwrap();
        assert!(open_regular_file(&file).is_ok());

        let fifo = dir.path().join("fifo.jpg");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        // Without O_NONBLOCK this open would wait for a writer forever.
        assert_eq!(message(&fifo), "a fifo, not a regular file");

        let socket = dir.path().join("s.png");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert_eq!(message(&socket), "a socket, not a regular file");

        assert_eq!(
            message(Path::new("/dev/zero")),
            "a device, not a regular file"
        );
        assert_eq!(message(dir.path()), "a folder, not a regular file");
        let missing = open_regular_file(&dir.path().join("missing.png")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    }
}

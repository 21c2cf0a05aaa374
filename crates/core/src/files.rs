//! Files opened by a name gputop was given. One it reads (the config, a hosts file) is read
//! only when it is a regular file, and only up to a size, so `/dev/zero` or a FIFO cannot
//! stall or flood it. One it writes (the alert log, recordings, captures) is opened without
//! following a symbolic link another user could have planted anywhere in its path, and
//! only when it is a regular file of the user's own: in a world-writable directory another
//! user cannot make gputop hang on a FIFO, append to their file, or write through a link.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

/// Why a text file was not read; it does not name the file (the caller knows what it was).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Opening or reading it failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A directory, FIFO, device or socket.
    #[error("not a regular file")]
    NotRegular,
    /// More than the bytes allowed.
    #[error("larger than {} KiB", .max_bytes >> 10)]
    TooLarge {
        /// The most bytes read.
        max_bytes: u64,
    },
    /// Not UTF-8: the first bad byte's offset.
    #[error("not UTF-8 text (byte {0})")]
    NotText(usize),
}

/// Reads the text file at `path`, of at most `max_bytes`; the error does not name the path.
pub fn read_text(path: &Path, max_bytes: u64) -> Result<String, ReadError> {
    // Non-blocking: opening a FIFO for reading would wait for a writer.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(ReadError::NotRegular);
    }
    if metadata.len() > max_bytes {
        return Err(ReadError::TooLarge { max_bytes });
    }
    let mut bytes = Vec::new();
    // A file growing while it is read stops at the limit too.
    file.take(max_bytes + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(ReadError::TooLarge { max_bytes });
    }
    String::from_utf8(bytes).map_err(|e| ReadError::NotText(e.utf8_error().valid_up_to()))
}

/// The largest certificate, key or CA bundle read: a system's whole CA bundle is a few
/// hundred KiB.
const PEM_MAX_BYTES: u64 = 4 << 20;

/// Reads a PEM file (certificates, a key, a CA bundle) at `path`, as [`read_text`] does.
pub fn read_pem(path: &Path) -> Result<Vec<u8>, ReadError> {
    read_text(path, PEM_MAX_BYTES).map(String::into_bytes)
}

/// How a file gputop writes is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// Appended to; created (mode 0600) when missing.
    Append,
    /// Created (mode 0600); an existing file is never overwritten.
    CreateNew,
}

/// Why a file was not opened for writing, with its path.
#[derive(Debug, thiserror::Error)]
#[error("cannot open {} for writing: {refusal}", path.display())]
pub struct WriteError {
    /// The file.
    pub path: PathBuf,
    /// Why not.
    pub refusal: Refusal,
}

/// Why a file is not written ([`WriteError`]).
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The file itself is a symbolic link.
    #[error("it is a symbolic link")]
    SymbolicLink,
    /// A directory on the way is another user's symbolic link.
    #[error("{} is a symbolic link of another user (uid {uid})", link.display())]
    OthersLink {
        /// The directory that is a link.
        link: PathBuf,
        /// Its owner.
        uid: u32,
    },
    /// A FIFO, socket, device or directory.
    #[error("it is a FIFO or a socket, not a regular file")]
    NotRegular,
    /// Created anew, and there is a file already.
    #[error("it already exists (gputop never overwrites a file; choose another name)")]
    Exists,
    /// Another user's file.
    #[error("it belongs to another user (uid {0})")]
    OthersFile(u32),
    /// The system refused.
    #[error("{0}")]
    Io(std::io::Error),
}

/// Opens `path` for writing as `how` says, refusing a path through another user's symbolic
/// link, and a file that is not regular or not the user's own.
pub fn open_for_writing(path: &Path, how: Write) -> Result<File, WriteError> {
    let refused = |refusal| WriteError {
        path: path.to_path_buf(),
        refusal,
    };
    check_links(path).map_err(refused)?;
    let mut options = OpenOptions::new();
    options
        .mode(0o600)
        // Not through a link at the last step; not blocking on a FIFO without a reader.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC);
    match how {
        Write::Append => options.append(true).create(true),
        Write::CreateNew => options.write(true).create_new(true),
    };
    let file = options.open(path).map_err(|e| {
        refused(match e.raw_os_error() {
            Some(libc::ELOOP) => Refusal::SymbolicLink,
            Some(libc::ENXIO) => Refusal::NotRegular,
            Some(libc::EEXIST) => Refusal::Exists,
            _ => Refusal::Io(e),
        })
    })?;
    let metadata = file.metadata().map_err(|e| refused(Refusal::Io(e)))?;
    if !metadata.is_file() {
        return Err(refused(Refusal::NotRegular));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if metadata.uid() != me {
        return Err(refused(Refusal::OthersFile(metadata.uid())));
    }
    // Writes block as usual from here on.
    // SAFETY: fcntl on a descriptor this function owns.
    unsafe {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok(file)
}

/// Refuses `path` if a directory on the way to it is a symbolic link owned by someone other
/// than the user or root (the rule of the kernel's `protected_symlinks`, for every step).
fn check_links(path: &Path) -> Result<(), Refusal> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut at = PathBuf::new();
    let parent = path.parent().unwrap_or(Path::new(""));
    for component in parent.components() {
        at.push(component);
        if !matches!(component, Component::Normal(_)) {
            continue;
        }
        let Ok(metadata) = std::fs::symlink_metadata(&at) else {
            return Ok(()); // missing: the open says so
        };
        if metadata.file_type().is_symlink() && metadata.uid() != me && metadata.uid() != 0 {
            return Err(Refusal::OthersLink {
                link: at,
                uid: metadata.uid(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_or_device_is_not_read_and_a_large_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(
            read_text(&fifo, 1024)
                .unwrap_err()
                .to_string()
                .contains("not a regular file")
        );
        assert!(
            read_text(Path::new("/dev/zero"), 1024)
                .unwrap_err()
                .to_string()
                .contains("not a regular file")
        );
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'a'; 2048]).unwrap();
        assert!(
            read_text(&big, 1024)
                .unwrap_err()
                .to_string()
                .contains("larger than 1 KiB")
        );
        assert_eq!(read_text(&big, 4096).unwrap().len(), 2048);
        std::fs::write(&big, b"ok\xff").unwrap();
        assert!(
            read_text(&big, 4096)
                .unwrap_err()
                .to_string()
                .contains("not UTF-8")
        );
    }

    #[test]
    fn writing_refuses_a_fifo_and_a_link_and_appends_to_the_users_own_file() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
        let refused = open_for_writing(&fifo, Write::Append).unwrap_err().to_string();
        assert!(
            refused.contains("FIFO") || refused.contains("not a regular file"),
            "{refused}"
        );
        let target = dir.path().join("target");
        std::fs::write(&target, "").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(
            open_for_writing(&link, Write::Append)
                .unwrap_err()
                .to_string()
                .contains("symbolic link")
        );
        let log = dir.path().join("log");
        use std::io::Write as _;
        open_for_writing(&log, Write::Append)
            .unwrap()
            .write_all(b"a\n")
            .unwrap();
        open_for_writing(&log, Write::Append)
            .unwrap()
            .write_all(b"b\n")
            .unwrap();
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "a\nb\n");
        assert!(
            open_for_writing(&log, Write::CreateNew)
                .unwrap_err()
                .to_string()
                .contains("already exists")
        );
    }
}

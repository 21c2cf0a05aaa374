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

/// Reads the text file at `path`, of at most `max_bytes`; the error does not name the path.
pub fn read_text(path: &Path, max_bytes: u64) -> Result<String, String> {
    // Non-blocking: opening a FIFO for reading would wait for a writer.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| e.to_string())?;
    let metadata = file.metadata().map_err(|e| e.to_string())?;
    let too_large = || format!("larger than {} KiB", max_bytes >> 10);
    if !metadata.is_file() {
        return Err("not a regular file".into());
    }
    if metadata.len() > max_bytes {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    // A file growing while it is read stops at the limit too.
    file.take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|e| format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()))
}

/// How a file gputop writes is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// Appended to; created (mode 0600) when missing.
    Append,
    /// Created (mode 0600); an existing file is never overwritten.
    CreateNew,
}

/// Opens `path` for writing as `how` says, refusing a path through another user's symbolic
/// link, and a file that is not regular or not the user's own.
pub fn open_for_writing(path: &Path, how: Write) -> Result<File, String> {
    let shown = path.display();
    check_links(path)?;
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
        let why = match e.raw_os_error() {
            Some(libc::ELOOP) => "it is a symbolic link".to_string(),
            Some(libc::ENXIO) => "it is a FIFO or a socket, not a regular file".to_string(),
            Some(libc::EEXIST) => {
                "it already exists (gputop never overwrites a file; choose another name)".into()
            }
            _ => e.to_string(),
        };
        format!("cannot open {shown} for writing: {why}")
    })?;
    let metadata = file.metadata().map_err(|e| format!("cannot open {shown}: {e}"))?;
    if !metadata.is_file() {
        return Err(format!("cannot open {shown} for writing: not a regular file"));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if metadata.uid() != me {
        return Err(format!(
            "cannot open {shown} for writing: it belongs to another user (uid {})",
            metadata.uid()
        ));
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
fn check_links(path: &Path) -> Result<(), String> {
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
            return Err(format!(
                "cannot open {} for writing: {} is a symbolic link of another user (uid {})",
                path.display(),
                at.display(),
                metadata.uid()
            ));
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
        assert!(read_text(&fifo, 1024).unwrap_err().contains("not a regular file"));
        assert!(
            read_text(Path::new("/dev/zero"), 1024)
                .unwrap_err()
                .contains("not a regular file")
        );
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'a'; 2048]).unwrap();
        assert!(read_text(&big, 1024).unwrap_err().contains("larger than 1 KiB"));
        assert_eq!(read_text(&big, 4096).unwrap().len(), 2048);
        std::fs::write(&big, b"ok\xff").unwrap();
        assert!(read_text(&big, 4096).unwrap_err().contains("not UTF-8"));
    }

    #[test]
    fn writing_refuses_a_fifo_and_a_link_and_appends_to_the_users_own_file() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
        let refused = open_for_writing(&fifo, Write::Append).unwrap_err();
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
                .contains("already exists")
        );
    }
}

//! The exporter's usage totals (GPU-seconds and memory-byte-seconds per user and container)
//! kept across restarts, for billing: `usage.json` in `$STATE_DIRECTORY` (systemd's
//! `StateDirectory=`), else `$XDG_STATE_HOME/gputop`, else `~/.local/state/gputop`. Written
//! atomically (a new file renamed over the old) every [`SAVE_EVERY`] and when the exporter
//! is stopped; read at start, at most [`MAX_BYTES`]. A file that cannot be read is reported
//! in one line and set aside as `usage.json.corrupt`; counting then starts from zero. One
//! exporter at a time keeps a directory's totals: it holds a lock on `usage.json.lock` (with
//! its PID in it) while it runs, and a second is refused with a line naming the first.

use anyhow::{Context, bail};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gputop_core::monitor::Monitor;
use gputop_core::monitor::usage::Accounting;

/// How often the totals are written while the exporter runs.
pub const SAVE_EVERY: Duration = Duration::from_secs(60);

/// Largest totals file read (two tables of [`gputop_core::monitor::usage::MAX_OWNERS`] owners fit
/// in about 1.5 MiB).
pub const MAX_BYTES: u64 = 8 << 20;

/// Where the totals are kept by default; `None` without a home directory.
pub fn default_path() -> Option<PathBuf> {
    let env = |key: &str| std::env::var_os(key).filter(|v| !v.is_empty()).map(PathBuf::from);
    let directory = if let Some(systemd) = std::env::var("STATE_DIRECTORY").ok().filter(|v| !v.is_empty()) {
        // systemd lists one directory per StateDirectory= entry, colon-separated.
        PathBuf::from(systemd.split(':').next().unwrap_or_default())
    } else if let Some(state) = env("XDG_STATE_HOME") {
        state.join("gputop")
    } else {
        env("HOME")?.join(".local/state/gputop")
    };
    Some(directory.join("usage.json"))
}

/// The totals file, when it was last written, and the lock that keeps it this exporter's.
#[derive(Debug)]
pub struct UsageState {
    path: PathBuf,
    saved_at: Instant,
    /// Held (flock) until the exporter ends; the kernel lets go of it however it ends.
    _lock: File,
}

/// Takes the lock on `path`'s totals for this process, creating the directory (0700) and the
/// lock file (0600); `Err` names the exporter that holds it.
fn lock(path: &Path) -> anyhow::Result<File> {
    let directory = path.parent().unwrap_or(Path::new("."));
    let lock_path = path.with_extension("json.lock");
    let fail = || format!("cannot lock the usage totals at {}", lock_path.display());
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(directory)
        .with_context(fail)?;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&lock_path)
        .with_context(fail)?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(error).with_context(fail);
        }
        let mut holder = String::new();
        let _ = (&file).take(32).read_to_string(&mut holder);
        let holder = holder.trim();
        let who = if holder.is_empty() {
            String::new()
        } else {
            format!(" (PID {holder})")
        };
        bail!(
            "another gputop export{who} keeps the usage totals in {}: stop it first, or give \
             this one a state directory of its own (STATE_DIRECTORY or XDG_STATE_HOME)",
            directory.display()
        );
    }
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()))
        .with_context(fail)?;
    Ok(file)
}

impl UsageState {
    /// Locks the totals at `path` for this exporter and adds those saved there to the
    /// `monitor`'s usage. `Err`: another exporter holds them, or the lock could not be made. The
    /// message beside `Ok`, if any, says what was wrong with the file and where it was set
    /// aside.
    pub fn open(path: PathBuf, monitor: &mut Monitor) -> anyhow::Result<(Self, Option<String>)> {
        let lock = lock(&path)?;
        let problem = match gputop_core::files::read_text(&path, MAX_BYTES) {
            Err(_) if !path.exists() => None,
            Err(e) => Some(e.to_string()),
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| e.to_string())
                .and_then(|saved| monitor.restore_usage(&saved).map_err(|e| e.to_string()))
                .err(),
        };
        let message = problem.map(|problem| {
            let aside = path.with_extension("json.corrupt");
            let moved = std::fs::rename(&path, &aside).map_or_else(
                |e| format!("could not set it aside ({e})"),
                |()| format!("set aside as {}", aside.display()),
            );
            gputop_core::format::sanitize(&format!(
                "usage totals {}: {problem}; {moved}; counting from zero",
                path.display()
            ))
        });
        let state = Self {
            path,
            saved_at: Instant::now(),
            _lock: lock,
        };
        Ok((state, message))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether [`SAVE_EVERY`] has passed since the last write.
    pub fn due(&self) -> bool {
        self.saved_at.elapsed() >= SAVE_EVERY
    }

    /// Writes the totals: to a new file beside the old, flushed to disk, then renamed over
    /// it, so a crash leaves the old file or the new one, never part of one.
    pub fn save(&mut self, accounting: &Accounting) -> anyhow::Result<()> {
        self.saved_at = Instant::now();
        let fail = || format!("cannot write {}", self.path.display());
        let directory = self.path.parent().unwrap_or(Path::new("."));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(directory)
            .with_context(fail)?;
        let fresh = self.path.with_extension("json.new");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            // Never through a link planted in the directory.
            .custom_flags(libc::O_NOFOLLOW)
            .open(&fresh)
            .with_context(fail)?;
        file.write_all(accounting.saved().to_string().as_bytes())
            .and_then(|()| file.sync_all())
            .with_context(fail)?;
        std::fs::rename(&fresh, &self.path).with_context(fail)?;
        // The rename itself, to disk.
        std::fs::File::open(directory)
            .and_then(|d| d.sync_all())
            .with_context(fail)
    }
}

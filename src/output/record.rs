//! `gputop record`: writes snapshots into a recording (the format is
//! [`crate::model::recording`]'s).
//!
//! Files are created with mode 0600, never through a symbolic link, never over an existing
//! file. Every string is sanitized before it is written. Each frame is written with one
//! `write` and flushed, so a recorder killed with SIGKILL leaves every frame up to the
//! last one whole (a torn last line is skipped on replay). When a segment reaches half the
//! size or age limit it becomes `FILE.1` (replacing the previous one) and a new `FILE`
//! starts: the recording stays within the limits and keeps the latest data.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{Value, json};

use crate::format::sanitize;
use crate::model::Snapshot;
use crate::model::recording::{FORMAT_VERSION, diff, previous_segment, to_stored};

/// Frames between key frames.
pub const KEY_EVERY: usize = 60;

/// Limits on a recording.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub max_bytes: u64,
    pub max_age_seconds: f64,
}

/// Why recording failed.
#[derive(Debug)]
pub struct RecordError(pub String);

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Creates `path` for a recording: mode 0600, never over an existing file, never through
/// a symbolic link.
fn create(path: &Path) -> Result<File, RecordError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            let why = if e.kind() == std::io::ErrorKind::AlreadyExists {
                "it already exists (gputop never overwrites a file; choose another name)".to_string()
            } else {
                e.to_string()
            };
            RecordError(format!("cannot create {}: {why}", path.display()))
        })
}

/// Writes one recording, segment by segment.
#[derive(Debug)]
pub struct Recorder {
    path: PathBuf,
    limits: Limits,
    interval: f64,
    id: String,
    file: File,
    segment: u64,
    segment_bytes: u64,
    segment_started: Instant,
    previous: Option<Value>,
    since_key: usize,
    pub frames: u64,
}

impl Recorder {
    /// Starts a recording at `path`. Refuses if `path` or its `.1` segment exists.
    pub fn create(path: &Path, limits: Limits, interval: f64, hostname: &str) -> Result<Self, RecordError> {
        let older = previous_segment(path);
        if std::fs::symlink_metadata(&older).is_ok() {
            return Err(RecordError(format!(
                "cannot record to {}: {} exists and would be replaced when the recording rotates",
                path.display(),
                older.display()
            )));
        }
        let file = create(path)?;
        let started_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let mut recorder = Self {
            path: path.to_path_buf(),
            limits,
            interval,
            id: format!("{}-{started_ms}", std::process::id()),
            file,
            segment: 0,
            segment_bytes: 0,
            segment_started: Instant::now(),
            previous: None,
            since_key: 0,
            frames: 0,
        };
        recorder.write_header(hostname)?;
        Ok(recorder)
    }

    fn write_header(&mut self, hostname: &str) -> Result<(), RecordError> {
        let header = json!({
            "gputop_recording": FORMAT_VERSION,
            "gputop_version": env!("CARGO_PKG_VERSION"),
            "id": self.id,
            "segment": self.segment,
            "hostname": sanitize(hostname),
            "interval_seconds": self.interval,
        });
        self.write_line(&header)
    }

    fn write_line(&mut self, value: &Value) -> Result<(), RecordError> {
        let mut line = value.to_string();
        line.push('\n');
        // One write per line: a kill leaves whole lines and at most one torn last line.
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|e| RecordError(format!("cannot write {}: {e}", self.path.display())))?;
        self.segment_bytes += line.len() as u64;
        Ok(())
    }

    /// Appends a snapshot; rotates first when the segment is at half a limit.
    pub fn push(&mut self, snapshot: &Snapshot) -> Result<(), RecordError> {
        let half_bytes = self.limits.max_bytes / 2;
        let half_age = self.limits.max_age_seconds / 2.0;
        if self.segment_bytes >= half_bytes || self.segment_started.elapsed().as_secs_f64() >= half_age {
            self.rotate(&snapshot.hostname)?;
        }
        let stored = to_stored(snapshot);
        let t = crate::monitor::history::timestamp(snapshot);
        let line = match (&self.previous, self.since_key) {
            (Some(previous), n) if n < KEY_EVERY => {
                self.since_key += 1;
                json!({ "t": t, "d": diff(previous, &stored).unwrap_or_else(|| json!({})) })
            }
            _ => {
                self.since_key = 1;
                json!({ "t": t, "k": stored })
            }
        };
        self.write_line(&line)?;
        self.previous = Some(stored);
        self.frames += 1;
        Ok(())
    }

    fn rotate(&mut self, hostname: &str) -> Result<(), RecordError> {
        let older = previous_segment(&self.path);
        std::fs::rename(&self.path, &older)
            .map_err(|e| RecordError(format!("cannot rotate {}: {e}", self.path.display())))?;
        self.file = create(&self.path)?;
        self.segment += 1;
        self.segment_bytes = 0;
        self.segment_started = Instant::now();
        self.previous = None;
        self.write_header(hostname)
    }
}

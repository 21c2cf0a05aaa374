//! `gputop record`: writes snapshots into a recording (the format is
//! [`gputop_core::model::recording`]'s).
//!
//! Files are created with mode 0600, never through a symbolic link, never over an existing
//! file. Every string is sanitized before it is written. Each frame is written with one
//! `write` and flushed, so a recorder killed with SIGKILL leaves every frame up to the
//! last one whole (a torn last line is skipped on replay). When a segment reaches half the
//! size or age limit it becomes `FILE.1` (replacing the previous one) and a new `FILE`
//! starts: the recording stays within the limits and keeps the latest data.

use anyhow::{Context, anyhow};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{Value, json};

use gputop_core::format::sanitize;
use gputop_core::model::Snapshot;
use gputop_core::model::recording::{FORMAT_VERSION, diff, previous_segment, to_stored};

/// Frames between key frames.
pub const KEY_EVERY: usize = 60;

/// Limits on a recording.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub max_bytes: u64,
    pub max_age_seconds: f64,
}

/// Creates `path` for a recording: mode 0600, never over an existing file, never through
/// a symbolic link (see [`gputop_core::files`]).
fn create(path: &Path) -> anyhow::Result<File> {
    Ok(gputop_core::files::open_for_writing(
        path,
        gputop_core::files::Write::CreateNew,
    )?)
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
    pub fn create(path: &Path, limits: Limits, interval: f64, hostname: &str) -> anyhow::Result<Self> {
        let older = previous_segment(path);
        if std::fs::symlink_metadata(&older).is_ok() {
            return Err(anyhow!(
                "cannot record to {}: {} exists and would be replaced when the recording rotates",
                path.display(),
                older.display()
            ));
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

    fn write_header(&mut self, hostname: &str) -> anyhow::Result<()> {
        let header = json!({
            "gputop_recording": FORMAT_VERSION,
            "gputop_version": env!("CARGO_PKG_VERSION"),
            "id": self.id,
            "segment": self.segment,
            "hostname": sanitize(hostname),
            "interval_seconds": self.interval,
        });
        let mut line = header.to_string();
        line.push('\n');
        self.write_line(&line)
    }

    fn write_line(&mut self, line: &str) -> anyhow::Result<()> {
        // One write per line: a kill leaves whole lines and at most one torn last line.
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.flush())
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        self.segment_bytes += line.len() as u64;
        Ok(())
    }

    /// Appends a snapshot; rotates first when the segment would pass half the size limit
    /// with it, or has reached half the age limit. A frame too large for half the size limit
    /// even in a fresh segment is refused, so the limit holds for any frame size.
    pub fn push(&mut self, snapshot: &Snapshot) -> anyhow::Result<()> {
        let half_bytes = self.limits.max_bytes / 2;
        let half_age = self.limits.max_age_seconds / 2.0;
        let stored = to_stored(snapshot);
        let t = gputop_core::monitor::history::timestamp(snapshot);
        let (mut line, mut key) = self.frame_line(t, &stored);
        let has_frames = self.since_key > 0;
        if has_frames
            && (self.segment_bytes + line.len() as u64 > half_bytes
                || self.segment_started.elapsed().as_secs_f64() >= half_age)
        {
            self.rotate(&snapshot.hostname)?;
            (line, key) = self.frame_line(t, &stored);
        }
        if self.segment_bytes + line.len() as u64 > half_bytes {
            return Err(anyhow!(
                "cannot record to {}: a frame of {} bytes does not fit in half of --max-size \
                 ({half_bytes} bytes, with the header); raise --max-size",
                self.path.display(),
                line.len()
            ));
        }
        self.write_line(&line)?;
        self.since_key = if key { 1 } else { self.since_key + 1 };
        self.previous = Some(stored);
        self.frames += 1;
        Ok(())
    }

    /// The line for a frame: a change against the previous frame, or a whole frame every
    /// [`KEY_EVERY`] frames and at the start of a segment; and whether it is a whole frame.
    fn frame_line(&self, t: f64, stored: &Value) -> (String, bool) {
        let (frame, key) = match &self.previous {
            Some(previous) if self.since_key > 0 && self.since_key < KEY_EVERY => (
                json!({ "t": t, "d": diff(previous, stored).unwrap_or_else(|| json!({})) }),
                false,
            ),
            _ => (json!({ "t": t, "k": stored }), true),
        };
        let mut line = frame.to_string();
        line.push('\n');
        (line, key)
    }

    fn rotate(&mut self, hostname: &str) -> anyhow::Result<()> {
        let older = previous_segment(&self.path);
        std::fs::rename(&self.path, &older)
            .with_context(|| format!("cannot rotate {}", self.path.display()))?;
        self.file = create(&self.path)?;
        self.segment += 1;
        self.segment_bytes = 0;
        self.segment_started = Instant::now();
        self.previous = None;
        self.since_key = 0;
        self.write_header(hostname)
    }
}

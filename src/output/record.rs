//! Recordings: the file format and `gputop record`.
//!
//! A recording is JSON lines. The first line is a header
//! (`{"gputop_recording": 1, "id": ..., "segment": n, ...}`); each further line is a frame:
//! `{"t": SECONDS, "k": SNAPSHOT}` (a key frame, the whole snapshot) or
//! `{"t": SECONDS, "d": PATCH}` (a JSON merge patch, RFC 7386, against the previous frame),
//! `t` being the snapshot's time in seconds since the epoch. Devices and processes are keyed objects in the
//! stored form, so a patch carries only the figures that changed. A key frame starts every
//! segment and follows every [`KEY_EVERY`] frames, so a reader can seek.
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

use serde_json::{Map, Value, json};

use crate::format::sanitize;
use crate::model::Snapshot;

pub const FORMAT_VERSION: u64 = 1;
/// Frames between key frames.
pub const KEY_EVERY: usize = 60;

/// The previous segment of `path`: `FILE.1`.
pub fn previous_segment(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

/// A snapshot in its stored form: sanitized, devices keyed by index and processes by
/// `pid/gpu`, so that merge patches work per device and per process.
pub fn to_stored(snapshot: &Snapshot) -> Value {
    let mut value = serde_json::to_value(snapshot).unwrap_or(Value::Null);
    sanitize_strings(&mut value);
    if let Some(object) = value.as_object_mut() {
        for (field, key) in [
            ("devices", keyed_device as fn(&Value) -> String),
            ("processes", keyed_process),
        ] {
            if let Some(Value::Array(items)) = object.remove(field) {
                let keyed: Map<String, Value> = items.into_iter().map(|item| (key(&item), item)).collect();
                object.insert(field.to_string(), Value::Object(keyed));
            }
        }
    }
    value
}

fn keyed_device(device: &Value) -> String {
    format!("{:06}", device["index"].as_u64().unwrap_or(0))
}

fn keyed_process(process: &Value) -> String {
    format!(
        "{:010}/{:06}",
        process["pid"].as_u64().unwrap_or(0),
        process["gpu_index"].as_u64().unwrap_or(0)
    )
}

/// The snapshot back from its stored form.
pub fn from_stored(stored: &Value) -> Result<Snapshot, String> {
    let mut value = stored.clone();
    if let Some(object) = value.as_object_mut() {
        for field in ["devices", "processes"] {
            if let Some(Value::Object(keyed)) = object.remove(field) {
                // Keys sort as the snapshot ordered them: devices by index; processes are
                // re-sorted by GPU memory below, as the collector does.
                object.insert(
                    field.to_string(),
                    Value::Array(keyed.into_iter().map(|(_, v)| v).collect()),
                );
            }
        }
    }
    let mut snapshot: Snapshot = serde_json::from_value(value).map_err(|e| e.to_string())?;
    crate::model::order::by_gpu_memory(&mut snapshot.processes);
    Ok(snapshot)
}

fn sanitize_strings(value: &mut Value) {
    match value {
        Value::String(text) => {
            let clean = sanitize(text);
            if clean != *text {
                *text = clean;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(sanitize_strings),
        Value::Object(map) => map.values_mut().for_each(sanitize_strings),
        _ => {}
    }
}

/// The JSON merge patch (RFC 7386) that turns `old` into `new`; `None` if they are equal.
pub fn diff(old: &Value, new: &Value) -> Option<Value> {
    if old == new {
        return None;
    }
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let mut patch = Map::new();
            for (key, value) in b {
                match a.get(key) {
                    Some(previous) => {
                        if let Some(change) = diff(previous, value) {
                            patch.insert(key.clone(), change);
                        }
                    }
                    None => {
                        patch.insert(key.clone(), null_safe(value));
                    }
                }
            }
            for key in a.keys().filter(|k| !b.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            Some(Value::Object(patch))
        }
        // A null inside a patch means "remove": a value that becomes null is written as
        // a whole object wrapper, which merge patches cannot express, so readings that can
        // be null are wrapped by `null_safe` below.
        _ => Some(null_safe(new)),
    }
}

/// Merge patches cannot set a member to null (null means "remove"): a stored null is
/// written as `{"null": true}` inside patches and turned back by [`apply`].
fn null_safe(value: &Value) -> Value {
    match value {
        Value::Null => json!({ NULL_MARK: true }),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), null_safe(v))).collect()),
        other => other.clone(),
    }
}

const NULL_MARK: &str = "\u{0}null";

fn is_null_mark(value: &Value) -> bool {
    value
        .as_object()
        .is_some_and(|m| m.len() == 1 && m.get(NULL_MARK) == Some(&Value::Bool(true)))
}

/// Applies a merge patch made by [`diff`] to `target`.
pub fn apply(target: &mut Value, patch: &Value) {
    if is_null_mark(patch) {
        *target = Value::Null;
        return;
    }
    let Value::Object(changes) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(fields) = target else { return };
    for (key, change) in changes {
        if change.is_null() {
            fields.remove(key);
        } else {
            apply(fields.entry(key.clone()).or_insert(Value::Null), change);
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_round_trip_including_values_that_become_null() {
        let a = json!({"x": 1, "r": {"failed": "timeout"}, "n": null, "o": {"p": [1, 2], "q": "s"}});
        let b = json!({"x": 2, "r": 5, "n": 3, "o": {"p": [1, 2, 3]}, "new": null});
        let patch = diff(&a, &b).unwrap();
        let mut c = a.clone();
        apply(&mut c, &patch);
        assert_eq!(c, b);
        let mut d = b.clone();
        apply(&mut d, &diff(&b, &a).unwrap());
        assert_eq!(d, a);
        assert_eq!(diff(&a, &a), None);
    }
}

//! The recording format, shared by `gputop record` and replay.
//!
//! A recording is JSON lines. The first line is a header
//! (`{"gputop_recording": 2, "id": ..., "segment": n, ...}`); each further line is a frame:
//! `{"t": SECONDS, "k": SNAPSHOT}` (a key frame, the whole snapshot) or
//! `{"t": SECONDS, "d": PATCH}` (a JSON merge patch, RFC 7386, against the previous frame),
//! `t` being the snapshot's time in seconds since the epoch. A snapshot is stored in its
//! wire form ([`super::wire`]) with devices and processes as keyed objects, so a patch
//! carries only the figures that changed. A segment `FILE` may be preceded by `FILE.1`.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::{Map, Value, json};

use super::Snapshot;
use super::wire::WireError;
use crate::format::sanitize;

/// The recording format's version (the header's `gputop_recording`): 2 since frames hold
/// the snapshot's wire form.
pub const FORMAT_VERSION: u64 = 2;

/// The previous segment of `path`: `FILE.1`.
pub fn previous_segment(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

/// A snapshot in its stored form: its wire form, sanitized, devices keyed by index and
/// processes by `pid/gpu`, so that merge patches work per device and per process.
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

/// Why a stored frame is not a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// Not the wire form's shape: a key of the wrong type, a list too long.
    #[error("{0}")]
    Shape(#[from] serde_json::Error),
    /// The wire form's shape, with a value out of range.
    #[error(transparent)]
    Value(#[from] WireError),
}

/// The snapshot back from its stored form, taken at `taken_at` (the frame's time).
pub fn from_stored(stored: &Value, taken_at: SystemTime) -> Result<Snapshot, FrameError> {
    let mut value = stored.clone();
    if let Some(object) = value.as_object_mut() {
        for field in ["devices", "processes"] {
            if let Some(Value::Object(keyed)) = object.remove(field) {
                // Keys sort as the snapshot ordered them: devices by index; processes are
                // re-sorted by GPU memory, as the collector does.
                object.insert(
                    field.to_string(),
                    Value::Array(keyed.into_iter().map(|(_, v)| v).collect()),
                );
            }
        }
    }
    let snapshot: Snapshot = serde_json::from_value(value)?;
    Ok(snapshot.from_wire(taken_at)?)
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

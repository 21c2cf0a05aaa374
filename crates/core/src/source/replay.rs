//! Replay: reads a recording (its `FILE.1` segment first, when it belongs to the same
//! recording) into an index of frames, rebuilds any frame from the key frame before it,
//! and plays it as a source ([`ReplaySource`]) with pause, seek and speed, read by the
//! collector as any other source is.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::model::Snapshot;
use crate::model::recording::{self as record, FORMAT_VERSION, previous_segment};

#[derive(Debug, Clone, Copy, PartialEq)]
struct FrameRef {
    t: f64,
    segment: usize,
    offset: u64,
    /// Index of the key frame this frame is rebuilt from.
    key: usize,
}

/// Why a recording, or a frame of it, could not be read: the file and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{}: {problem}", path.display())]
pub struct RecordingError {
    /// The recording's file (its segment).
    pub path: PathBuf,
    /// What is wrong.
    pub problem: RecordingProblem,
}

/// What is wrong with a recording ([`RecordingError`]).
#[derive(Debug, thiserror::Error)]
pub enum RecordingProblem {
    /// The file could not be opened or read.
    #[error("cannot read it: {0}")]
    Io(#[from] std::io::Error),
    /// Its first line is not a gputop recording's header.
    #[error("not a gputop recording (no header line)")]
    NoHeader,
    /// A header of something else.
    #[error("not a gputop recording")]
    NotARecording,
    /// A format this gputop does not read.
    #[error("recording format {0} is not supported (this gputop reads {FORMAT_VERSION})")]
    Format(u64),
    /// Not one frame could be read; the first problem found, if any.
    #[error("the recording holds no usable frames{}", .0.as_ref().map_or_else(String::new, |p| format!(" ({p})")))]
    NoFrames(Option<String>),
    /// A frame indexed before is gone (the file changed since).
    #[error("frame {0} is missing")]
    FrameMissing(usize),
    /// A frame whose snapshot gputop does not accept.
    #[error("{0}")]
    BadFrame(String),
}

/// An indexed recording.
#[derive(Debug, Clone)]
pub struct Recording {
    segments: Vec<PathBuf>,
    frames: Vec<FrameRef>,
    /// Lines that could not be read (a torn last line after a kill, a damaged byte, a key
    /// frame out of range) and the frames after them that depended on them.
    pub skipped: usize,
    /// The first skipped line, and why: `FILE line N: ...`.
    pub first_problem: Option<String>,
    /// The host it was recorded on.
    pub hostname: String,
    /// Seconds between snapshots when it was recorded.
    pub interval: f64,
}

impl Recording {
    /// Opens and indexes `path` (and `path.1` when it is the earlier part of the same recording).
    pub fn open(path: &Path) -> Result<Self, RecordingError> {
        let header = |p: &Path| -> Result<Value, RecordingError> {
            let mut lines = LineReader::open(p, 0)?;
            let first = lines.next_line()?.and_then(|(_, line)| line);
            let value: Value = first
                .and_then(|line| serde_json::from_slice(line).ok())
                .ok_or_else(|| problem(p, RecordingProblem::NoHeader))?;
            match value["gputop_recording"].as_u64() {
                Some(FORMAT_VERSION) => Ok(value),
                Some(v) => Err(problem(p, RecordingProblem::Format(v))),
                None => Err(problem(p, RecordingProblem::NotARecording)),
            }
        };
        let main = header(path)?;
        let mut segments = Vec::new();
        let older = previous_segment(path);
        if let Ok(previous) = header(&older)
            && previous["id"] == main["id"]
        {
            segments.push(older);
        }
        segments.push(path.to_path_buf());
        let mut recording = Self {
            segments,
            frames: Vec::new(),
            skipped: 0,
            hostname: main["hostname"].as_str().unwrap_or("").to_string(),
            interval: main["interval_seconds"]
                .as_f64()
                .filter(|i| *i > 0.0 && *i <= 86_400.0)
                .unwrap_or(2.0),
            first_problem: None,
        };
        for segment in 0..recording.segments.len() {
            recording.index_segment(segment)?;
        }
        if recording.frames.is_empty() {
            return Err(problem(path, RecordingProblem::NoFrames(recording.first_problem)));
        }
        Ok(recording)
    }

    fn index_segment(&mut self, segment: usize) -> Result<(), RecordingError> {
        let path = self.segments[segment].clone();
        let mut lines = LineReader::open(&path, 0)?;
        let mut key: Option<usize> = None;
        let mut number = 0usize;
        loop {
            let Some((at, line)) = lines.next_line()? else {
                return Ok(());
            };
            number += 1;
            if number == 1 {
                continue; // the header
            }
            match read_frame(line) {
                Ok((t, frame)) => {
                    if let Some(whole) = frame.get("k") {
                        // A key frame is a whole snapshot: check it now, so a recording of
                        // bad frames says why at once.
                        if let Err(why) = record::from_stored(whole, frame_time(t)) {
                            key = None;
                            self.skip(&path, number, &why.to_string());
                            continue;
                        }
                        key = Some(self.frames.len());
                    }
                    let Some(key) = key else {
                        self.skip(&path, number, "a change with no whole frame before it");
                        continue;
                    };
                    if self.frames.last().is_some_and(|f| t <= f.t) {
                        self.skip(&path, number, "a frame no later than the one before it");
                        continue;
                    }
                    self.frames.push(FrameRef {
                        t,
                        segment,
                        offset: at,
                        key,
                    });
                }
                Err(why) => {
                    // A torn or garbled line: the changes after it cannot be rebuilt.
                    key = None;
                    self.skip(&path, number, &why);
                }
            }
        }
    }

    fn skip(&mut self, path: &Path, line: usize, why: &str) {
        self.skipped += 1;
        // Sanitized where it is printed, with everything else from outside.
        if self.first_problem.is_none() {
            self.first_problem = Some(format!("{} line {line}: {why}", path.display()));
        }
    }

    /// How many frames it holds.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether it holds no frame.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Seconds since the epoch of frame `index`.
    pub fn time(&self, index: usize) -> f64 {
        self.frames[index.min(self.frames.len() - 1)].t
    }

    /// Seconds from the first frame to the last.
    pub fn span(&self) -> f64 {
        self.time(self.len() - 1) - self.time(0)
    }

    /// The last frame at or before `offset` seconds from the start.
    pub fn index_at(&self, offset: f64) -> usize {
        let t = self.time(0) + offset;
        self.frames.partition_point(|f| f.t <= t).saturating_sub(1)
    }

    /// Rebuilds frame `index` from its key frame.
    pub fn frame(&self, index: usize) -> Result<Snapshot, RecordingError> {
        let wanted = self.frames[index.min(self.frames.len() - 1)];
        let key = self.frames[wanted.key];
        let path = &self.segments[key.segment];
        let mut lines = LineReader::open(path, key.offset)?;
        let mut state = Value::Null;
        loop {
            let Some((at, line)) = lines.next_line()? else {
                return Err(problem(path, RecordingProblem::FrameMissing(index)));
            };
            let Ok((_, frame)) = read_frame(line) else {
                continue;
            };
            if let Some(whole) = frame.get("k") {
                state = whole.clone();
            } else if let Some(patch) = frame.get("d") {
                record::apply(&mut state, patch);
            }
            if at == wanted.offset {
                return record::from_stored(&state, frame_time(wanted.t))
                    .map_err(|e| problem(path, RecordingProblem::BadFrame(e.to_string())));
            }
        }
    }
}

fn problem(path: &Path, problem: RecordingProblem) -> RecordingError {
    RecordingError {
        path: path.to_path_buf(),
        problem,
    }
}

/// Longest line read: a key frame of the most processes a snapshot may hold is about 6 MB.
const MAX_LINE_BYTES: usize = 16 << 20;

/// Most JSON values in one line: a key frame of the most processes holds about 300 000. A
/// bound on the memory a line takes once parsed (a value takes 32 bytes or more, where
/// `0,` is 2 bytes of the line).
const MAX_LINE_VALUES: usize = 1_000_000;

/// Latest frame time accepted, in seconds since the epoch: the end of the year 9999.
const LATEST_FRAME_TIME: f64 = 253_402_300_799.0;

/// A frame line's time and content, or why it cannot be one.
fn read_frame(line: Option<&[u8]>) -> Result<(f64, Value), String> {
    let line = line.ok_or("a line longer than 16 MiB, or cut short")?;
    if json_values(line) > MAX_LINE_VALUES {
        return Err(format!("more than {MAX_LINE_VALUES} values in one line"));
    }
    let frame: Value = serde_json::from_slice(line).map_err(|e| format!("not a frame: {e}"))?;
    let t = frame["t"].as_f64().ok_or("a frame without its time")?;
    if !(0.0..=LATEST_FRAME_TIME).contains(&t) {
        return Err(format!("{t} is not a time between 1970 and 9999"));
    }
    if frame.get("k").is_none() && frame.get("d").is_none() {
        return Err("a frame without a snapshot or a change".into());
    }
    Ok((t, frame))
}

/// When a frame was taken (its time is checked by [`read_frame`]).
fn frame_time(t: f64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::try_from_secs_f64(t).unwrap_or_default()
}

/// About how many values a JSON text holds: its commas, colons and opening brackets outside
/// strings, counted without parsing it.
fn json_values(text: &[u8]) -> usize {
    let (mut count, mut in_string, mut escaped) = (0, false, false);
    for &b in text {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b',' | b':' | b'{' | b'[' => count += 1,
                _ => {}
            }
        }
    }
    count
}

/// A line read: its offset, and its bytes unless it was too long or torn.
type Line<'a> = (u64, Option<&'a [u8]>);

/// A recording's lines with the byte offset each starts at.
struct LineReader<'p> {
    path: &'p Path,
    reader: BufReader<File>,
    offset: u64,
    line: Vec<u8>,
}

impl<'p> LineReader<'p> {
    fn open(path: &'p Path, offset: u64) -> Result<Self, RecordingError> {
        let io = |e: std::io::Error| problem(path, RecordingProblem::Io(e));
        let mut file = File::open(path).map_err(io)?;
        file.seek(SeekFrom::Start(offset)).map_err(io)?;
        Ok(Self {
            path,
            reader: BufReader::new(file),
            offset,
            line: Vec::new(),
        })
    }

    /// The next line's offset and its bytes (without the newline), `None` for a line that is
    /// too long or has no newline (torn); `None` at the end of the file. Bytes are not
    /// checked as UTF-8 here: a damaged byte spoils its own line only.
    fn next_line(&mut self) -> Result<Option<Line<'_>>, RecordingError> {
        let at = self.offset;
        self.line.clear();
        let mut too_long = false;
        loop {
            let room = (MAX_LINE_BYTES + 1).saturating_sub(self.line.len()) as u64;
            let read = (&mut self.reader)
                .take(room.max(1))
                .read_until(b'\n', &mut self.line)
                .map_err(|e| problem(self.path, RecordingProblem::Io(e)))?;
            self.offset += read as u64;
            if read == 0 || self.line.last() == Some(&b'\n') {
                break;
            }
            if self.line.len() > MAX_LINE_BYTES {
                // Drop what was read of an overlong line and read on to its end.
                too_long = true;
                self.line.clear();
            }
        }
        if self.offset == at {
            return Ok(None);
        }
        let whole = !too_long && self.line.last() == Some(&b'\n');
        Ok(Some((at, whole.then(|| &self.line[..self.line.len() - 1]))))
    }
}

/// What the player is asked to do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PlayerCommand {
    /// Pause, or go on.
    TogglePause,
    /// Move by this many seconds of recording time.
    Seek(f64),
    /// Multiply the speed by this factor.
    Speed(f64),
}

/// Where playback stands, for the screen.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReplayStatus {
    /// Seconds from the first frame.
    pub position: f64,
    /// Seconds from the first frame to the last.
    pub length: f64,
    /// Recording seconds played per second.
    pub speed: f64,
    /// Whether playback is paused.
    pub paused: bool,
    /// The frame on screen, from 0.
    pub frame: usize,
    /// How many frames the recording holds.
    pub frames: usize,
}

/// Where a replay stands, shared by its source (which moves on on its collector's thread)
/// with whoever shows it.
#[derive(Debug, Clone, Default)]
pub struct Playback(Arc<Mutex<ReplayStatus>>);

impl Playback {
    /// Where playback stands with the frame read last.
    pub fn status(&self) -> ReplayStatus {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The slowest playback speed.
pub const SPEED_MIN: f64 = 0.125;
/// The fastest playback speed.
pub const SPEED_MAX: f64 = 64.0;

/// A recording as a source: the frame at the playback position, which moves on as the
/// recording's own times say (scaled by the speed) and is paused, sought and sped up by
/// [`PlayerCommand`]s. Its collector reads it when the next frame is due.
#[derive(Debug)]
pub struct ReplaySource {
    recording: Recording,
    speed: f64,
    paused: bool,
    /// The frame to show.
    index: usize,
    /// The last frame playback reaches: the recording's last, or the last before frames
    /// at its end that could not be rebuilt.
    last: usize,
    /// The frame rebuilt last, and its index.
    shown: (usize, Snapshot),
    playback: Playback,
}

impl ReplaySource {
    /// Plays `recording` from its first frame that can be rebuilt, at `speed` (clamped to
    /// [`SPEED_MIN`]..=[`SPEED_MAX`]).
    pub fn new(recording: Recording, speed: f64) -> Result<Self, RecordingError> {
        let mut first = recording.frame(0);
        let mut index = 0;
        while first.is_err() && index + 1 < recording.len() {
            index += 1;
            first = recording.frame(index);
        }
        let source = Self {
            last: recording.len() - 1,
            recording,
            speed: speed.clamp(SPEED_MIN, SPEED_MAX),
            paused: false,
            index,
            shown: (index, first?),
            playback: Playback::default(),
        };
        source.publish_status();
        Ok(source)
    }

    /// Where this source says how playback stands.
    pub fn playback(&self) -> Playback {
        self.playback.clone()
    }

    /// The frame at the playback position; a frame that cannot be rebuilt is passed over
    /// for the next one that can (none: the last shown stays, and playback ends there).
    pub(crate) fn snapshot(&mut self) -> Snapshot {
        let start = self.index;
        while self.index != self.shown.0 {
            match self.recording.frame(self.index) {
                Ok(snapshot) => self.shown = (self.index, snapshot),
                Err(_) if self.index < self.last => self.index += 1,
                Err(_) => {
                    // Nothing from `start` to the end can be rebuilt: playback ends before.
                    self.last = start.saturating_sub(1).max(self.shown.0);
                    self.index = self.shown.0;
                }
            }
        }
        self.publish_status();
        self.shown.1.clone()
    }

    /// Moves to the next frame, unless paused or at the end.
    pub(crate) fn advance(&mut self) {
        if !self.paused && self.index < self.last {
            self.index += 1;
        }
    }

    /// How long until the next frame is due: `None` while paused, at the end, or when the
    /// gap is too long to wait for (frame times are checked on reading: centuries at most).
    pub(crate) fn wait(&self) -> Option<Duration> {
        if self.paused || self.index >= self.last {
            return None;
        }
        let gap = self.recording.time(self.index + 1) - self.recording.time(self.index);
        Duration::try_from_secs_f64((gap / self.speed).max(0.0)).ok()
    }

    /// Pauses or goes on, seeks or changes the speed.
    pub(crate) fn control(&mut self, command: PlayerCommand) {
        match command {
            PlayerCommand::TogglePause => self.paused = !self.paused,
            PlayerCommand::Speed(factor) => self.speed = (self.speed * factor).clamp(SPEED_MIN, SPEED_MAX),
            PlayerCommand::Seek(delta) => {
                let recording = &self.recording;
                let position = recording.time(self.index) - recording.time(0) + delta;
                self.index = recording
                    .index_at(position.clamp(0.0, recording.span()))
                    .min(self.last);
            }
        }
    }

    fn publish_status(&self) {
        let recording = &self.recording;
        let index = self.shown.0;
        *self.playback.0.lock().unwrap_or_else(|e| e.into_inner()) = ReplayStatus {
            position: recording.time(index) - recording.time(0),
            length: recording.span(),
            speed: self.speed,
            paused: self.paused || index >= self.last,
            frame: index,
            frames: recording.len(),
        };
    }
}

//! Replay: reads a recording (its `FILE.1` segment first, when it belongs to the same
//! recording) into an index of frames, rebuilds any frame from the key frame before it,
//! and plays frames on a thread with pause, seek and speed.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};
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

/// An indexed recording.
#[derive(Debug, Clone)]
pub struct Recording {
    segments: Vec<PathBuf>,
    frames: Vec<FrameRef>,
    /// Lines that could not be read (a torn last line after a kill) and the frames after
    /// them that depended on them.
    pub skipped: usize,
    pub hostname: String,
    /// Seconds between snapshots when it was recorded.
    pub interval: f64,
}

impl Recording {
    /// Opens and indexes `path` (and `path.1` when it is the earlier part of the same recording).
    pub fn open(path: &Path) -> Result<Self, String> {
        let header = |p: &Path| -> Result<Value, String> {
            let file = File::open(p).map_err(|e| format!("cannot open {}: {e}", p.display()))?;
            let mut first = String::new();
            BufReader::new(file)
                .read_line(&mut first)
                .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            let value: Value = serde_json::from_str(&first)
                .map_err(|_| format!("{}: not a gputop recording (no header line)", p.display()))?;
            match value["gputop_recording"].as_u64() {
                Some(FORMAT_VERSION) => Ok(value),
                Some(v) => Err(format!(
                    "{}: recording format {v} is not supported (this gputop reads {FORMAT_VERSION})",
                    p.display()
                )),
                None => Err(format!("{}: not a gputop recording", p.display())),
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
                .filter(|i| *i > 0.0)
                .unwrap_or(2.0),
        };
        for segment in 0..recording.segments.len() {
            recording.index_segment(segment)?;
        }
        if recording.frames.is_empty() {
            return Err(format!("{}: the recording holds no frames", path.display()));
        }
        Ok(recording)
    }

    fn index_segment(&mut self, segment: usize) -> Result<(), String> {
        let mut lines = LineReader::open(&self.segments[segment], 0)?;
        let mut key: Option<usize> = None;
        let mut first = true;
        loop {
            let Some((at, line)) = lines.next_line()? else {
                return Ok(());
            };
            if std::mem::take(&mut first) {
                continue; // the header
            }
            let parsed: Option<Value> = line
                .ends_with('\n')
                .then(|| serde_json::from_str(line).ok())
                .flatten();
            let Some(frame) = parsed else {
                // A torn or garbled line: the deltas after it cannot be rebuilt.
                self.skipped += 1;
                key = None;
                continue;
            };
            let Some(t) = frame["t"].as_f64() else {
                self.skipped += 1;
                continue;
            };
            if frame.get("k").is_some() {
                key = Some(self.frames.len());
            } else if frame.get("d").is_none() || key.is_none() {
                self.skipped += 1;
                continue;
            }
            if self.frames.last().is_some_and(|f| t <= f.t) {
                self.skipped += 1;
                continue;
            }
            self.frames.push(FrameRef {
                t,
                segment,
                offset: at,
                key: key.expect("set above"),
            });
        }
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

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
    pub fn frame(&self, index: usize) -> Result<Snapshot, String> {
        let wanted = self.frames[index.min(self.frames.len() - 1)];
        let key = self.frames[wanted.key];
        let path = &self.segments[key.segment];
        let mut lines = LineReader::open(path, key.offset)?;
        let mut state = Value::Null;
        loop {
            let Some((at, line)) = lines.next_line()? else {
                return Err(format!("{}: frame {index} is missing", path.display()));
            };
            let Ok(frame) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if let Some(whole) = frame.get("k") {
                state = whole.clone();
            } else if let Some(patch) = frame.get("d") {
                record::apply(&mut state, patch);
            }
            if at == wanted.offset {
                let taken_at = std::time::UNIX_EPOCH + Duration::from_secs_f64(wanted.t.max(0.0));
                return record::from_stored(&state, taken_at);
            }
        }
    }
}

/// A recording's lines with the byte offset each starts at.
struct LineReader<'p> {
    path: &'p Path,
    reader: BufReader<File>,
    offset: u64,
    line: String,
}

impl<'p> LineReader<'p> {
    fn open(path: &'p Path, offset: u64) -> Result<Self, String> {
        let mut file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Ok(Self {
            path,
            reader: BufReader::new(file),
            offset,
            line: String::new(),
        })
    }

    /// The next line (with its newline, if it has one) and its offset; `None` at the end.
    fn next_line(&mut self) -> Result<Option<(u64, &str)>, String> {
        self.line.clear();
        let read = self
            .reader
            .read_line(&mut self.line)
            .map_err(|e| format!("cannot read {}: {e}", self.path.display()))?;
        let at = self.offset;
        self.offset += read as u64;
        Ok((read > 0).then_some((at, self.line.as_str())))
    }
}

/// What the player is asked to do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PlayerCommand {
    TogglePause,
    /// Move by this many seconds of recording time.
    Seek(f64),
    /// Multiply the speed by this factor.
    Speed(f64),
}

/// Where playback stands, for the screen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplayStatus {
    /// Seconds from the first frame.
    pub position: f64,
    pub length: f64,
    pub speed: f64,
    pub paused: bool,
    pub frame: usize,
    pub frames: usize,
}

/// One published frame.
#[derive(Debug, Clone)]
pub struct Played {
    pub snapshot: Arc<Snapshot>,
    pub status: ReplayStatus,
    /// The frame is earlier than the one before it: history must start over.
    pub rewound: bool,
}

/// Plays a recording on its own thread; dropping it stops the thread.
#[derive(Debug)]
pub struct Player {
    commands: Option<Sender<PlayerCommand>>,
    thread: Option<JoinHandle<()>>,
}

pub const SPEED_MIN: f64 = 0.125;
pub const SPEED_MAX: f64 = 64.0;

impl Player {
    /// Starts playing from the first frame at `speed`; `publish` returns false to stop.
    pub fn spawn(
        recording: Recording,
        speed: f64,
        mut publish: Box<dyn FnMut(Played) -> bool + Send>,
    ) -> std::io::Result<Self> {
        let (commands, inbox) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("gputop-replay".into())
            .spawn(move || play(&recording, speed, &inbox, &mut publish))?;
        Ok(Self {
            commands: Some(commands),
            thread: Some(thread),
        })
    }

    pub fn send(&self, command: PlayerCommand) {
        if let Some(commands) = &self.commands {
            let _ = commands.send(command);
        }
    }
}

impl Drop for Player {
    fn drop(&mut self) {
        self.commands.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn play(
    recording: &Recording,
    speed: f64,
    inbox: &Receiver<PlayerCommand>,
    publish: &mut dyn FnMut(Played) -> bool,
) {
    let mut speed = speed.clamp(SPEED_MIN, SPEED_MAX);
    let mut paused = false;
    let mut index = 0usize;
    let mut shown: Option<usize> = None;
    // A command changed the status: publish even if the frame is the same.
    let mut dirty = true;
    let last = recording.len() - 1;
    loop {
        if dirty || shown != Some(index) {
            let Ok(snapshot) = recording.frame(index) else {
                // A frame that cannot be rebuilt: go on with the next one.
                if index < last {
                    index += 1;
                    continue;
                }
                return;
            };
            let status = ReplayStatus {
                position: recording.time(index) - recording.time(0),
                length: recording.span(),
                speed,
                paused: paused || index == last,
                frame: index,
                frames: recording.len(),
            };
            let rewound = shown.is_some_and(|p| index < p);
            if !publish(Played {
                snapshot: Arc::new(snapshot),
                status,
                rewound,
            }) {
                return;
            }
            shown = Some(index);
            dirty = false;
        }
        let wait = if paused || index == last {
            Duration::from_secs(3600)
        } else {
            Duration::from_secs_f64(((recording.time(index + 1) - recording.time(index)) / speed).max(0.0))
        };
        match inbox.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {
                if !paused && index < last {
                    index += 1;
                }
            }
            Err(RecvTimeoutError::Disconnected) => return,
            Ok(command) => {
                match command {
                    PlayerCommand::TogglePause => paused = !paused,
                    PlayerCommand::Speed(factor) => speed = (speed * factor).clamp(SPEED_MIN, SPEED_MAX),
                    PlayerCommand::Seek(delta) => {
                        let position = recording.time(index) - recording.time(0) + delta;
                        index = recording.index_at(position.clamp(0.0, recording.span()));
                    }
                }
                dirty = true;
            }
        }
    }
}

//! Where device and process readings come from: NVML, the kernel's DRM interfaces for AMD
//! and Intel GPUs ([`drm`]), the built-in demo, a recording being replayed, or remote
//! exporters. Each source turns its input into plain [`Readout`] or snapshot values; only
//! [`nvml`] talks to the NVIDIA driver. The machine's GPUs ([`local`]: NVML and DRM in one
//! readout), the demo and a replay are [`Source`]s, read by the one collector.

pub mod demo;
pub mod drm;
pub mod http;
pub mod local;
pub mod nvml;
pub mod prometheus;
pub mod remote;
pub mod replay;

use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::model::{Device, GpuProcess, Reading, Snapshot};
use demo::DemoSource;
use local::LocalSource;
use nvml::NvmlSource;
use replay::{Recording, RecordingError, ReplaySource};

/// The driver's versions, as a GPU source read them.
#[derive(Debug, Clone, PartialEq)]
pub struct DriverInfo {
    /// The kernel driver's version: `550.54.15`.
    pub driver_version: Reading<String>,
    /// The NVML library's version.
    pub nvml_version: Reading<String>,
    /// As `major.minor`, e.g. `12.4`.
    pub cuda_driver_version: Reading<String>,
}

/// Mean and peak of a metric over the last interval, from the driver's sample buffer (the
/// current reading, mean and peak alike, where the buffer held none: an idle GPU's runs
/// dry).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Window {
    /// The mean of the samples.
    pub(crate) mean: f64,
    /// The highest sample.
    pub(crate) peak: f64,
}

impl Window {
    /// A window of no samples: the current reading.
    pub(crate) fn current(now: u32) -> Self {
        Self {
            mean: f64::from(now),
            peak: f64::from(now),
        }
    }
}

/// What a GPU source read: devices and the processes on them.
#[derive(Debug, Clone)]
pub struct Readout {
    /// The driver's versions.
    pub driver: DriverInfo,
    /// The GPUs.
    pub devices: Vec<Device>,
    /// The processes on them, one per process and GPU.
    pub processes: Vec<GpuProcess>,
    /// Whether the source gave its processes' host facts itself (the demo); else they are
    /// read from /proc when the snapshot is assembled.
    pub host_known: bool,
    /// Processes whose AMD or Intel GPU use could not be read (another user's).
    pub hidden_processes: u32,
}

impl Readout {
    /// No GPU read: what a machine without NVML reads of it.
    pub fn empty() -> Self {
        Self {
            driver: DriverInfo {
                driver_version: Reading::NotSupported,
                nvml_version: Reading::NotSupported,
                cuda_driver_version: Reading::NotSupported,
            },
            devices: Vec::new(),
            processes: Vec::new(),
            host_known: false,
            hidden_processes: 0,
        }
    }
}

/// What one reading of a source gives.
#[derive(Debug)]
pub(crate) enum Read {
    /// The GPUs and their processes, to be joined with this host's facts.
    Parts(Readout),
    /// A whole snapshot, taken elsewhere and at another time (a recording's frame).
    Whole(Box<Snapshot>),
}

/// What a collection is waiting on now: a driver call that never returns shows as data
/// that grows old, with the call named, instead of a frozen screen.
#[derive(Debug, Clone, Default)]
pub struct Activity(Arc<Mutex<Option<Call>>>);

/// A call's name, and the GPU it is made for.
type Call = (&'static str, Option<u32>);

impl Activity {
    /// Notes that `call` (on GPU `gpu`) is under way.
    pub fn set(&self, call: &'static str, gpu: Option<u32>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((call, gpu));
    }

    /// Notes that nothing is under way.
    pub fn clear(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// What is under way, in words: `nvmlDeviceGetSamples on GPU 0`.
    pub fn current(&self) -> Option<String> {
        let now = *self.0.lock().unwrap_or_else(|e| e.into_inner());
        now.map(|(call, gpu)| match gpu {
            Some(gpu) => format!("{call} on GPU {gpu}"),
            None => call.to_string(),
        })
    }
}

/// A GPU's readings that change from one moment to the next, each read again alone by
/// [`Source::refresh`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::EnumCount)]
#[repr(usize)]
pub enum Gauge {
    /// Memory used, free and total.
    Memory,
    /// GPU utilization, now and over the window.
    GpuUtilization,
    /// GPU and memory utilization, now and over the window.
    Utilization,
    /// The GPU's temperature.
    Temperature,
    /// Power draw, now and over the window.
    Power,
    /// Every fan's speed.
    FanSpeeds,
    /// The energy counter: millijoules since the driver loaded.
    Energy,
}

/// How much of the machine a reading reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    Devices,
    Processes,
}

/// Where device and process readings come from.
#[derive(Debug)]
pub enum Source {
    /// This machine's GPUs: NVIDIA's through NVML, AMD's and Intel's through DRM.
    Local(Box<LocalSource>),
    /// The built-in demo machine.
    Demo(Box<DemoSource>),
    /// A recording played back: whole snapshots, at the recording's own pace.
    Replay(Box<ReplaySource>),
}

impl Source {
    /// The built-in demo machine: four simulated GPUs with jobs on them.
    pub fn demo() -> Self {
        Self::Demo(Box::default())
    }

    /// The machine's GPUs: NVIDIA's through NVML (`libnvidia-ml.so.1`, or the library at
    /// `library`), AMD's and Intel's through the kernel's DRM interfaces under
    /// [`crate::host::roots`]. NVML's error when the machine has no GPU either can read.
    pub fn local(library: Option<&std::path::Path>) -> Result<Self, nvml::NvmlUnusable> {
        LocalSource::open(library).map(|local| Self::Local(Box::new(local)))
    }

    /// The machine's NVIDIA GPUs through NVML alone.
    pub fn nvml(library: Option<&std::path::Path>) -> Result<Self, nvml::NvmlUnusable> {
        NvmlSource::open(library).map(Self::from)
    }

    /// The NVML source of a live machine, where NVML is in use.
    pub fn nvml_mut(&mut self) -> Option<&mut NvmlSource> {
        match self {
            Self::Local(local) => local.nvml_mut(),
            Self::Demo(_) | Self::Replay(_) => None,
        }
    }

    /// Reads what a one-shot needs read twice (the DRM engines' counters); true when it
    /// did, and the reading after it should wait an interval.
    pub fn prime(&mut self) -> bool {
        match self {
            Self::Local(local) => local.prime(),
            Self::Demo(_) | Self::Replay(_) => false,
        }
    }

    /// `recording` played from its start at `speed` (see [`ReplaySource`]).
    pub fn replay(recording: Recording, speed: f64) -> Result<Self, RecordingError> {
        ReplaySource::new(recording, speed).map(|replay| Self::Replay(Box::new(replay)))
    }

    /// Where a replay says how playback stands; `None` for a live source.
    pub fn playback(&self) -> Option<replay::Playback> {
        match self {
            Self::Replay(replay) => Some(replay.playback()),
            Self::Local(_) | Self::Demo(_) => None,
        }
    }

    /// Where this source says what it is waiting on (the demo and a replay never wait).
    pub fn activity(&self) -> Activity {
        match self {
            Self::Local(local) => local.activity(),
            Self::Demo(_) | Self::Replay(_) => Activity::default(),
        }
    }

    pub(crate) fn read(&mut self, window: Duration) -> Read {
        match self {
            Self::Local(local) => Read::Parts(local.read(window, Reach::Processes)),
            Self::Demo(demo) => Read::Parts(demo.read(window)),
            Self::Replay(replay) => Read::Whole(Box::new(replay.snapshot())),
        }
    }

    /// What is due at the collector's timer: a replay moves to its next frame (a live
    /// source is simply read again).
    pub(crate) fn step(&mut self) {
        if let Self::Replay(replay) = self {
            replay.advance();
        }
    }

    /// Pauses, seeks or speeds up a replay; false for a live source, which has no such
    /// controls.
    pub(crate) fn control(&mut self, command: replay::PlayerCommand) -> bool {
        match self {
            Self::Replay(replay) => {
                replay.control(command);
                true
            }
            Self::Local(_) | Self::Demo(_) => false,
        }
    }

    /// When the collector reads this source next, after a reading that started at
    /// `started`: every `interval`, or, for a replay, when its next frame is due (`None`:
    /// only when asked).
    pub(crate) fn next_reading(&self, started: Instant, interval: Option<Duration>) -> Option<Instant> {
        match self {
            Self::Local(_) | Self::Demo(_) => interval.map(|every| started + every),
            Self::Replay(replay) => replay.wait().and_then(|wait| Instant::now().checked_add(wait)),
        }
    }

    /// Reads one gauge of `device` (a GPU of this source's last reading) again, now: one or
    /// two driver calls, for a caller that asks one field at a time.
    pub fn refresh(&mut self, device: &mut Device, gauge: Gauge, window: Duration) {
        match self {
            Self::Local(local) => local.refresh(device, gauge, window),
            // A recorded frame is what it is.
            Self::Replay(_) => {}
            // The demo machine is computed, not asked: it is read whole.
            Self::Demo(demo) => {
                if let Some(fresh) = demo
                    .read(window)
                    .devices
                    .into_iter()
                    .find(|d| d.index == device.index)
                {
                    *device = fresh;
                }
            }
        }
    }

    /// The GPUs' own readings alone, without their processes: what a caller asking a GPU's
    /// memory or temperature needs, at a fraction of a whole reading's cost (no process
    /// lists, no /proc). Utilization means and peaks cover the last `window`.
    pub fn read_devices(&mut self, window: Duration) -> Vec<Device> {
        match self {
            Self::Local(local) => local.read(window, Reach::Devices).devices,
            Self::Demo(demo) => demo.read(window).devices,
            Self::Replay(replay) => replay.snapshot().devices,
        }
    }
}

impl From<NvmlSource> for Source {
    fn from(nvml: NvmlSource) -> Self {
        Self::Local(Box::new(LocalSource::nvml(nvml)))
    }
}

/// A source being opened on a thread of its own: NVML's init takes seconds without
/// persistence mode and can hang on a GPU in trouble, and the view must not wait for it.
#[derive(Debug)]
pub struct Opening(Receiver<Result<Source, nvml::NvmlUnusable>>);

impl Opening {
    /// Calls `open` on a thread of its own; [`Opening::finish`] or [`Opening::wait`] gives its result.
    pub fn start(
        open: impl FnOnce() -> Result<Source, nvml::NvmlUnusable> + Send + 'static,
    ) -> std::io::Result<Self> {
        let (done, result) = mpsc::channel();
        thread::Builder::new().name("gputop-open".into()).spawn(move || {
            let _ = done.send(open());
        })?;
        Ok(Self(result))
    }

    /// The opened source, or why it could not be opened, once it is known.
    pub fn finish(self) -> Result<Source, nvml::NvmlUnusable> {
        self.0.recv().unwrap_or_else(|_| Err(opener_gone()))
    }

    /// The opened source (or why it could not be opened) if it is ready within `wait`,
    /// else the opening still under way.
    pub fn wait(self, wait: Duration) -> Result<Result<Source, nvml::NvmlUnusable>, Self> {
        match self.0.recv_timeout(wait) {
            Ok(result) => Ok(result),
            Err(RecvTimeoutError::Timeout) => Err(self),
            Err(RecvTimeoutError::Disconnected) => Ok(Err(opener_gone())),
        }
    }
}

/// Why an opening gave no source: its thread ended without one (it panicked).
fn opener_gone() -> nvml::NvmlUnusable {
    nvml::NvmlUnusable::Other("the thread opening NVML ended without a word".into())
}

//! Collection: turns a source (NVML or the demo) plus the host into `Arc<Snapshot>` values.
//!
//! [`collect_once`] serves `--once`; [`Collector`] runs the same read on its own thread at the
//! configured interval and publishes each snapshot whole. Readers clone the `Arc` and never
//! hold a lock while they use it.

pub mod container;
pub mod demo;
pub mod host;
mod machine;
pub mod nvml;
pub mod remote;
pub mod replay;

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

use crate::model::{Device, DriverInfo, GpuProcess, Snapshot};
use demo::DemoSource;
use host::HostCollector;
use nvml::NvmlSource;

/// What a GPU source read: devices and the processes on them.
#[derive(Debug, Clone)]
pub struct Readout {
    pub driver: DriverInfo,
    pub devices: Vec<Device>,
    pub processes: Vec<GpuProcess>,
    /// Whether the source gave its processes' host facts itself (the demo); else they are
    /// read from /proc when the snapshot is assembled.
    pub host_known: bool,
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

/// Where device and process readings come from.
#[derive(Debug)]
pub enum Source {
    Nvml(Box<NvmlSource>),
    Demo(Box<DemoSource>),
}

impl Source {
    /// Where this source says what it is waiting on (the demo never waits).
    pub fn activity(&self) -> Activity {
        match self {
            Self::Nvml(nvml) => nvml.activity(),
            Self::Demo(_) => Activity::default(),
        }
    }

    fn read(&mut self, window: Duration) -> Readout {
        match self {
            Self::Nvml(nvml) => nvml.read(window),
            Self::Demo(demo) => demo.read(window),
        }
    }
}

/// Reads the source and the host into one snapshot.
fn assemble(source: &mut Source, host: &mut HostCollector, window: Duration) -> Snapshot {
    let readout = source.read(window);
    let mut processes = readout.processes;
    if !readout.host_known {
        // /proc of a process stuck in the kernel can block too.
        let activity = source.activity();
        activity.set("reading /proc", None);
        host.fill(&mut processes);
        activity.clear();
    }
    crate::app::sort::by_gpu_memory(&mut processes);
    Snapshot {
        taken_at: SystemTime::now(),
        hostname: host.hostname().to_string(),
        driver: readout.driver,
        devices: readout.devices,
        processes,
        host: host.stats(),
        pid_namespace: host.pid_namespace(),
    }
}

/// A source being opened on a thread of its own: NVML's init takes seconds without
/// persistence mode and can hang on a GPU in trouble, and the view must not wait for it.
#[derive(Debug)]
pub struct Opening(Receiver<Result<Source, nvml::NvmlUnusable>>);

impl Opening {
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

/// One snapshot, for `--once`. Utilization means and peaks cover the last `window`.
pub fn collect_once(source: &mut Source, window: Duration) -> Snapshot {
    assemble(source, &mut HostCollector::new(), window)
}

/// The latest snapshot, shared between the collector and its readers.
pub type Latest = Arc<RwLock<Option<Arc<Snapshot>>>>;

/// A collector thread publishing a snapshot every interval.
#[derive(Debug)]
pub struct Collector {
    latest: Latest,
    activity: Activity,
    /// Closed when the collection thread ends.
    finished: Receiver<()>,
    /// Present when snapshots are delivered through [`Collector::next`].
    updates: Option<Receiver<Arc<Snapshot>>>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Collector {
    /// Starts collecting from `source` every `interval`; [`Collector::next`] returns each
    /// snapshot.
    pub fn spawn(source: Source, interval: Duration) -> std::io::Result<Self> {
        let (publish, updates) = mpsc::channel();
        Self::spawn_inner(
            source,
            interval,
            Box::new(move |s| publish.send(s).is_ok()),
            Some(updates),
        )
    }

    /// Starts collecting and hands each snapshot to `publish`, which returns false to stop.
    pub fn spawn_with(
        source: Source,
        interval: Duration,
        publish: Box<dyn FnMut(Arc<Snapshot>) -> bool + Send>,
    ) -> std::io::Result<Self> {
        Self::spawn_inner(source, interval, publish, None)
    }

    fn spawn_inner(
        mut source: Source,
        interval: Duration,
        mut publish: Box<dyn FnMut(Arc<Snapshot>) -> bool + Send>,
        updates: Option<Receiver<Arc<Snapshot>>>,
    ) -> std::io::Result<Self> {
        let latest: Latest = Arc::new(RwLock::new(None));
        let (stop, stopped) = mpsc::channel::<()>();
        let (finishing, finished) = mpsc::channel::<()>();
        let shared = Arc::clone(&latest);
        let activity = source.activity();
        let thread = thread::Builder::new()
            .name("gputop-collect".into())
            .spawn(move || {
                let _finishing = finishing;
                let mut host = HostCollector::new();
                let mut heap = crate::heap::Releaser::default();
                loop {
                    let started = Instant::now();
                    let snapshot = Arc::new(assemble(&mut source, &mut host, interval));
                    *shared.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&snapshot));
                    if !publish(snapshot) {
                        return;
                    }
                    heap.tick();
                    let rest = interval.saturating_sub(started.elapsed());
                    match stopped.recv_timeout(rest) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                }
            })?;
        Ok(Self {
            latest,
            activity,
            finished,
            updates,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The most recent snapshot, if one has been taken.
    pub fn latest(&self) -> Option<Arc<Snapshot>> {
        self.latest.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// What the collection is waiting on now, if anything.
    pub fn waiting_on(&self) -> Option<String> {
        self.activity.current()
    }

    /// Waits up to `timeout` for the next snapshot; `None` for a collector started with
    /// [`Collector::spawn_with`], whose snapshots go to its own callback.
    pub fn next(&self, timeout: Duration) -> Option<Arc<Snapshot>> {
        self.updates.as_ref()?.recv_timeout(timeout).ok()
    }
}

/// How long dropping a collector waits for its thread: one stuck in a driver call is left
/// behind, so quitting never waits on the driver.
const STOP_WAIT: Duration = Duration::from_millis(500);

impl Drop for Collector {
    fn drop(&mut self) {
        self.stop.take();
        let ended = matches!(
            self.finished.recv_timeout(STOP_WAIT),
            Err(RecvTimeoutError::Disconnected)
        );
        if let Some(thread) = self.thread.take()
            && ended
        {
            let _ = thread.join();
        }
    }
}

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
use std::sync::{Arc, RwLock};
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

/// Where device and process readings come from.
#[derive(Debug)]
pub enum Source {
    Nvml(Box<NvmlSource>),
    Demo(Box<DemoSource>),
}

impl Source {
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
        host.fill(&mut processes);
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
        let shared = Arc::clone(&latest);
        let thread = thread::Builder::new()
            .name("gputop-collect".into())
            .spawn(move || {
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
            updates,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The most recent snapshot, if one has been taken.
    pub fn latest(&self) -> Option<Arc<Snapshot>> {
        self.latest.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits up to `timeout` for the next snapshot; `None` for a collector started with
    /// [`Collector::spawn_with`], whose snapshots go to its own callback.
    pub fn next(&self, timeout: Duration) -> Option<Arc<Snapshot>> {
        self.updates.as_ref()?.recv_timeout(timeout).ok()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

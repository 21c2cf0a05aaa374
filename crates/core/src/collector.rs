//! The collection thread: reads a [`Source`] and the host into whole `Arc<Snapshot>` values
//! at the configured interval and publishes each one. Readers clone the `Arc` and never hold
//! a lock while they use it. [`collect_once`] serves `--once` with the same read.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, RwLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

use crate::host::HostCollector;
use crate::model::Snapshot;
use crate::source::{Activity, Source};

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
    let mut devices = readout.devices;
    host.name_pods(&mut devices, &mut processes);
    crate::model::order::by_gpu_memory(&mut processes);
    Snapshot {
        taken_at: SystemTime::now(),
        hostname: host.hostname().to_string(),
        driver: readout.driver,
        devices,
        processes,
        host: host.stats(),
        pid_namespace: host.pid_namespace(),
    }
}

/// One snapshot, for `--once`. Utilization means and peaks cover the last `window`.
pub fn collect_once(source: &mut Source, window: Duration) -> Snapshot {
    assemble(source, &mut HostCollector::new(), window)
}

/// One snapshot read with `host`, which keeps what it learnt of each process between calls
/// (so %CPU is the average since the last call): for readers that take snapshots when
/// asked, such as the Python module, rather than on a thread.
pub fn collect_with(source: &mut Source, host: &mut HostCollector, window: Duration) -> Snapshot {
    assemble(source, host, window)
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
            HostCollector::new(),
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
        Self::spawn_inner(source, HostCollector::new(), interval, publish, None)
    }

    /// [`Collector::spawn_with`], reading the host with `host` (which may name pods, see
    /// [`HostCollector::watch_pods`]).
    pub fn spawn_with_host(
        source: Source,
        host: HostCollector,
        interval: Duration,
        publish: Box<dyn FnMut(Arc<Snapshot>) -> bool + Send>,
    ) -> std::io::Result<Self> {
        Self::spawn_inner(source, host, interval, publish, None)
    }

    fn spawn_inner(
        mut source: Source,
        mut host: HostCollector,
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
                #[cfg(debug_assertions)]
                let mut published = 0_u32;
                loop {
                    let started = Instant::now();
                    let snapshot = Arc::new(assemble(&mut source, &mut host, interval));
                    *shared.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&snapshot));
                    if !publish(snapshot) {
                        return;
                    }
                    // Tests of the way a panic on a worker thread ends gputop (debug builds):
                    // after the second snapshot, when the view is on screen.
                    #[cfg(debug_assertions)]
                    {
                        published += 1;
                        if published == 2
                            && std::env::var_os("GPUTOP_DEBUG_PANIC").is_some_and(|v| v == "collector")
                        {
                            panic!("GPUTOP_DEBUG_PANIC=collector");
                        }
                    }
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

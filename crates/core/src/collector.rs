//! The collection thread: reads a [`Source`] and the host into whole `Arc<Snapshot>` values
//! at the configured interval (or when a reader asks) and publishes each one. Readers clone
//! the `Arc` and never hold a lock while they use it. [`collect_once`] serves `--once` with
//! the same read.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

use crate::host::HostCollector;
use crate::model::{Device, Snapshot};
use crate::source::replay::PlayerCommand;
use crate::source::{Activity, Gauge, Read, Source};

/// Reads the source and the host into one snapshot.
fn assemble(source: &mut Source, host: &mut HostCollector, window: Duration) -> Snapshot {
    let readout = match source.read(window) {
        // A recorded frame: its host and its time are the recording's.
        Read::Whole(snapshot) => return *snapshot,
        Read::Parts(readout) => readout,
    };
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
        driver_version: readout.driver.driver_version,
        cuda_driver_version: readout.driver.cuda_driver_version,
        nvml_version: readout.driver.nvml_version,
        devices,
        processes,
        host: host.stats(),
        pid_namespace: host.pid_namespace(),
        hidden_processes: readout.hidden_processes,
    }
}

/// One snapshot, for `--once`. Utilization means and peaks cover the last `window`.
/// AMD and Intel engines are counted over the `window` (at most a second) after a first
/// read of their counters.
pub fn collect_once(source: &mut Source, window: Duration) -> Snapshot {
    if source.prime() {
        thread::sleep(window.min(Duration::from_secs(1)));
    }
    assemble(source, &mut HostCollector::new(), window)
}

/// The latest snapshot, shared between the collector and its readers.
pub type Latest = Arc<RwLock<Option<Arc<Snapshot>>>>;

/// Hands each snapshot on; returns false to stop the collector.
pub type Publish = Box<dyn FnMut(Arc<Snapshot>) -> bool + Send>;

/// A collector: a thread that snapshots every interval (a replay when its next frame is
/// due; nothing unasked for [`Collector::on_demand`]), and readers that ask when they choose.
///
/// The source and what was last read of it sit behind one lock, which every reading takes,
/// so readers on many threads share one source without a lock of their own: a reader
/// ([`Collector::read`], [`Collector::read_devices`], [`Collector::read_gauge`]) reads on its
/// own thread, and an answer fresh enough is given again without asking the driver.
#[derive(Debug)]
pub struct Collector {
    latest: Latest,
    activity: Activity,
    reader: Arc<Mutex<Reader>>,
    /// Closed when the collection thread ends.
    finished: Mutex<Receiver<()>>,
    /// Present when snapshots are delivered through [`Collector::next`].
    updates: Option<Mutex<Receiver<Arc<Snapshot>>>>,
    /// Tells the thread a replay was moved, so its next frame is due from now; dropped to
    /// stop the thread.
    moved: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Collector {
    /// Starts collecting from `source` every `interval`; [`Collector::next`] returns each
    /// snapshot.
    pub fn spawn(source: Source, interval: Duration) -> std::io::Result<Self> {
        let (publish, updates) = mpsc::channel();
        Self::start(
            source,
            HostCollector::new(),
            Some(interval),
            interval,
            Box::new(move |s| publish.send(s).is_ok()),
            Some(updates),
        )
    }

    /// Starts collecting and hands each snapshot to `publish`, which returns false to stop.
    pub fn spawn_with(source: Source, interval: Duration, publish: Publish) -> std::io::Result<Self> {
        Self::start(
            source,
            HostCollector::new(),
            Some(interval),
            interval,
            publish,
            None,
        )
    }

    /// [`Collector::spawn_with`], reading the host with `host` (which may name pods, see
    /// [`HostCollector::watch_pods`]).
    pub fn spawn_with_host(
        source: Source,
        host: HostCollector,
        interval: Duration,
        publish: Publish,
    ) -> std::io::Result<Self> {
        Self::start(source, host, Some(interval), interval, publish, None)
    }

    /// A collector that reads only when asked, for callers that read when they choose (the
    /// Python module); utilization means and peaks cover the `window` before each reading,
    /// and each process's %CPU the time since the reading before.
    pub fn on_demand(source: Source, window: Duration) -> std::io::Result<Self> {
        Self::start(
            source,
            HostCollector::new(),
            None,
            window,
            Box::new(|_| true),
            None,
        )
    }

    fn start(
        source: Source,
        host: HostCollector,
        interval: Option<Duration>,
        window: Duration,
        publish: Publish,
        updates: Option<Receiver<Arc<Snapshot>>>,
    ) -> std::io::Result<Self> {
        let latest: Latest = Arc::new(RwLock::new(None));
        let (moved, moves) = mpsc::channel::<()>();
        let (finishing, finished) = mpsc::channel::<()>();
        let activity = source.activity();
        let reader = Arc::new(Mutex::new(Reader {
            source,
            host,
            window,
            latest: Arc::clone(&latest),
            latest_at: None,
            gpus: None,
            publish,
            #[cfg(debug_assertions)]
            published: 0,
        }));
        let shared = Arc::clone(&reader);
        let thread = thread::Builder::new()
            .name("gputop-collect".into())
            .spawn(move || {
                let _finishing = finishing;
                collect(&shared, interval, &moves);
            })?;
        Ok(Self {
            latest,
            activity,
            reader,
            finished: Mutex::new(finished),
            updates: updates.map(Mutex::new),
            moved: Some(moved),
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
        let updates = self.updates.as_ref()?.lock().unwrap_or_else(|e| e.into_inner());
        updates.recv_timeout(timeout).ok()
    }

    /// A whole snapshot no older than `fresh_for`, taken now (and published) when the latest
    /// is older.
    pub fn read(&self, fresh_for: Duration) -> Arc<Snapshot> {
        let mut reader = self.reader();
        match reader.fresh_snapshot(fresh_for) {
            Some(snapshot) => snapshot,
            None => {
                let snapshot = reader.snapshot();
                reader.publish(Arc::clone(&snapshot));
                snapshot
            }
        }
    }

    /// The GPUs without their processes (identity, limits, gauges), read now when the
    /// latest reading of them is older than `fresh_for`.
    pub fn read_devices(&self, fresh_for: Duration) -> Arc<Vec<Device>> {
        Arc::clone(&self.reader().devices(fresh_for).readings)
    }

    /// The GPUs, with GPU `index`'s `gauge` read again alone (one or two driver calls) when
    /// it is older than `fresh_for`: for readers that ask for one value at a time, as
    /// nvitop's getters do.
    pub fn read_gauge(&self, index: u32, gauge: Gauge, fresh_for: Duration) -> Arc<Vec<Device>> {
        self.reader().gauge(index, gauge, fresh_for)
    }

    /// Pauses, seeks or speeds up a replay (see [`Source::replay`]); its frame then is
    /// published at once. Nothing for a live source.
    pub fn control(&self, command: PlayerCommand) {
        let mut reader = self.reader();
        if reader.source.control(command) {
            let snapshot = reader.snapshot();
            reader.publish(snapshot);
            drop(reader);
            if let Some(moved) = &self.moved {
                let _ = moved.send(());
            }
        }
    }

    fn reader(&self) -> std::sync::MutexGuard<'_, Reader> {
        self.reader.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The collection thread: snapshots when the source's next reading is due, until the
/// collector is dropped or `publish` says stop. A `moves` message says a replay was moved:
/// its next frame is due from now.
fn collect(reader: &Mutex<Reader>, interval: Option<Duration>, moves: &Receiver<()>) {
    let lock = || reader.lock().unwrap_or_else(|e| e.into_inner());
    let mut due = interval.map(|_| Instant::now());
    loop {
        let moved = match due {
            Some(at) => match moves.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(()) => true,
                Err(RecvTimeoutError::Timeout) => false,
                Err(RecvTimeoutError::Disconnected) => return,
            },
            None => match moves.recv() {
                Ok(()) => true,
                Err(_) => return,
            },
        };
        let mut reader = lock();
        if moved {
            due = reader.source.next_reading(Instant::now(), interval);
            continue;
        }
        let started = Instant::now();
        if reader.latest_at.is_some() {
            reader.source.step();
        }
        let snapshot = reader.snapshot();
        due = reader.source.next_reading(started, interval);
        if !reader.publish(snapshot) {
            return;
        }
    }
}

/// The source and what was last read of it, behind the collector's lock.
struct Reader {
    source: Source,
    host: HostCollector,
    window: Duration,
    latest: Latest,
    /// When the latest whole snapshot was taken.
    latest_at: Option<Instant>,
    gpus: Option<Gpus>,
    publish: Publish,
    /// Snapshots published, for the debug build's panic test.
    #[cfg(debug_assertions)]
    published: u32,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("latest_at", &self.latest_at)
            .finish_non_exhaustive()
    }
}

/// The GPUs' latest reading, and when each GPU's gauges were read again alone since.
struct Gpus {
    readings: Arc<Vec<Device>>,
    read_at: Instant,
    /// By position in `readings`, then by [`Gauge`].
    gauges_at: Vec<[Option<Instant>; <Gauge as strum::EnumCount>::COUNT]>,
}

impl Gpus {
    fn new(readings: Vec<Device>, read_at: Instant) -> Self {
        Self {
            gauges_at: vec![[None; <Gauge as strum::EnumCount>::COUNT]; readings.len()],
            readings: Arc::new(readings),
            read_at,
        }
    }
}

impl Reader {
    /// Hands `snapshot` on; false once the receiver wants no more.
    fn publish(&mut self, snapshot: Arc<Snapshot>) -> bool {
        let more = (self.publish)(snapshot);
        // Tests of the way a panic on a worker thread ends gputop (debug builds): after the
        // second snapshot, when the view is on screen.
        #[cfg(debug_assertions)]
        {
            self.published += 1;
            if self.published == 2 && std::env::var_os("GPUTOP_DEBUG_PANIC").is_some_and(|v| v == "collector")
            {
                panic!("GPUTOP_DEBUG_PANIC=collector");
            }
        }
        more
    }

    /// The latest whole snapshot, if it is younger than `fresh_for`.
    fn fresh_snapshot(&self, fresh_for: Duration) -> Option<Arc<Snapshot>> {
        self.latest_at.filter(|at| at.elapsed() < fresh_for)?;
        self.latest.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A whole snapshot taken now, made the latest (its GPUs too).
    fn snapshot(&mut self) -> Arc<Snapshot> {
        let snapshot = Arc::new(assemble(&mut self.source, &mut self.host, self.window));
        let now = Instant::now();
        self.latest_at = Some(now);
        // Its GPUs are the latest now: copied out only if a reader asks for them alone, so
        // a collector on a timer (the view, the exporter) copies nothing.
        self.gpus = None;
        *self.latest.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&snapshot));
        snapshot
    }

    /// The GPUs' reading: the latest snapshot's, or taken now when there is none or it is
    /// older than `fresh_for`.
    fn devices(&mut self, fresh_for: Duration) -> &mut Gpus {
        if self.gpus.is_none()
            && let Some(at) = self.latest_at
            && let Some(latest) = self.latest.read().unwrap_or_else(|e| e.into_inner()).as_ref()
        {
            self.gpus = Some(Gpus::new(latest.devices.clone(), at));
        }
        if self
            .gpus
            .as_ref()
            .is_none_or(|g| g.read_at.elapsed() >= fresh_for)
        {
            let readings = self.source.read_devices(self.window);
            self.gpus = Some(Gpus::new(readings, Instant::now()));
        }
        self.gpus.as_mut().expect("read above")
    }

    /// The GPUs, GPU `index`'s `gauge` read again alone when older than `fresh_for`.
    fn gauge(&mut self, index: u32, gauge: Gauge, fresh_for: Duration) -> Arc<Vec<Device>> {
        let window = self.window;
        if self.gpus.is_none() {
            self.devices(fresh_for);
        }
        let Self { source, gpus, .. } = self;
        let gpus = gpus.as_mut().expect("read above");
        if let Some(slot) = gpus.readings.iter().position(|d| d.index == index) {
            let now = Instant::now();
            let read_at = &mut gpus.gauges_at[slot][gauge as usize];
            let last = read_at.map_or(gpus.read_at, |at| at.max(gpus.read_at));
            if now.duration_since(last) >= fresh_for {
                *read_at = Some(now);
                source.refresh(&mut Arc::make_mut(&mut gpus.readings)[slot], gauge, window);
            }
        }
        Arc::clone(&gpus.readings)
    }
}

/// How long dropping a collector waits for its thread: one stuck in a driver call is left
/// behind, so quitting never waits on the driver.
const STOP_WAIT: Duration = Duration::from_millis(500);

impl Drop for Collector {
    fn drop(&mut self) {
        self.moved.take();
        let finished = self.finished.get_mut().unwrap_or_else(|e| e.into_inner());
        let ended = matches!(
            finished.recv_timeout(STOP_WAIT),
            Err(RecvTimeoutError::Disconnected)
        );
        if let Some(thread) = self.thread.take()
            && ended
        {
            let _ = thread.join();
        }
    }
}

//! `ResourceMetricCollector`: nvitop's collector of resource metrics over tagged spans (a
//! training run, an epoch in it), of the GPUs, the host and the GPU processes descended from
//! `root_pids`, sampled on a Rust thread at the interval asked, without the GIL, into the
//! library's [`gputop_core::monitor::spans::Spans`]; and, gputop's own, GPU use per user and
//! container over the same samples, kept by a [`gputop_core::monitor::Monitor`] as the viewer's
//! and the exporter's is. Samples come from the module's one [`gputop_core::collector::Collector`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gputop_core::config::Settings;
use gputop_core::model::GpuProcess;
use gputop_core::monitor::Monitor;
use gputop_core::monitor::spans::{Spans, metrics};
use gputop_core::monitor::usage::Usage as UsageFigures;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyDict, PyTuple};

use crate::{Device, FRESH_FOR, collector, current_collector};

/// Seconds since the epoch, now.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Which GPU processes descend from the root PIDs (nvitop's `root_pids`, a root itself
/// included): each process (its PID and start) decided once, by walking its parents.
#[derive(Debug)]
struct Lineage {
    roots: BTreeSet<u32>,
    decided: HashMap<(u32, u64), bool>,
}

impl Lineage {
    /// Parents walked at most, against a loop in a table read while it changes.
    const MAX_DEPTH: usize = 1024;
    /// Decisions kept at most; all are forgotten past it.
    const MAX_DECIDED: usize = 65_536;

    fn descends(&mut self, p: &GpuProcess) -> bool {
        let Some(mut pid) = p.local_pid().filter(|_| !self.roots.is_empty()) else {
            return false;
        };
        let identity = (p.pid, p.host.start_ticks.get().unwrap_or(0));
        if let Some(&known) = self.decided.get(&identity) {
            return known;
        }
        // The reading's own parent first: the built-in machine's processes are not in /proc.
        let mut parent = p.host.parent_pid.get();
        let mut verdict = false;
        for _ in 0..Self::MAX_DEPTH {
            if self.roots.contains(&pid) {
                verdict = true;
                break;
            }
            match parent.or_else(|| gputop_core::host::parent_pid(pid)) {
                Some(next) if next != 0 && next != pid => pid = next,
                _ => break,
            }
            parent = None;
        }
        if self.decided.len() >= Self::MAX_DECIDED {
            self.decided.clear();
        }
        self.decided.insert(identity, verdict);
        verdict
    }
}

/// What the samples feed: the tags' statistics, GPU use per user and container, and when
/// the last sample was taken; and which processes' own metrics they give.
#[derive(Debug)]
struct Fed {
    spans: Mutex<Spans>,
    monitor: Mutex<Monitor>,
    sampled: Mutex<Option<Instant>>,
    lineage: Mutex<Lineage>,
}

/// Takes a reading and adds it to what `fed` keeps.
fn sample(fed: &Fed, devices: Option<&[u32]>) {
    if let Some(snapshot) = current_collector().map(|c| c.read(FRESH_FOR)) {
        let metrics = {
            let mut lineage = locked(&fed.lineage);
            metrics(&snapshot, devices, &mut |p| lineage.descends(p))
        };
        locked(&fed.spans).record(now(), &metrics);
        locked(&fed.monitor).ingest(&snapshot);
        *locked(&fed.sampled) = Some(Instant::now());
    }
}

fn not_started() -> PyErr {
    PyRuntimeError::new_err("Resource metric collector has not been started yet.")
}

/// nvitop's `RuntimeError` for a `tag` that is not open (none is, or not this one).
fn require_open(spans: &Spans, tag: Option<&str>) -> PyResult<()> {
    match tag {
        Some(tag) if !spans.is_open(tag) && spans.is_empty() => Err(not_started()),
        Some(tag) if !spans.is_open(tag) => Err(PyRuntimeError::new_err(format!(
            "Resource metric collector has not been started with tag \"{tag}\"."
        ))),
        _ => Ok(()),
    }
}

fn seconds(value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| PyValueError::new_err(format!("Invalid argument interval={value}")))
}

/// One user's or container's GPU use, as `ResourceMetricCollector.usage()` gives it.
#[pyclass(module = "gputop", frozen, get_all)]
#[derive(Debug, Clone)]
pub struct Usage {
    /// The GPUs it holds now.
    gpus: Vec<u32>,
    /// Bytes of GPU memory it holds now.
    gpu_memory: u64,
    processes: usize,
    /// Seconds of each GPU it held, summed, while the collector sampled.
    gpu_seconds: f64,
    gpu_memory_byte_seconds: f64,
    /// Joules of its GPUs' energy, shared among their processes by SM utilization.
    gpu_energy_joules: f64,
}

impl From<&UsageFigures> for Usage {
    fn from(u: &UsageFigures) -> Self {
        Self {
            gpus: u.gpus.iter().copied().collect(),
            gpu_memory: u.memory_bytes,
            processes: u.processes,
            gpu_seconds: u.gpu_seconds,
            gpu_memory_byte_seconds: u.memory_byte_seconds,
            gpu_energy_joules: u.energy_joules,
        }
    }
}

#[pymethods]
impl Usage {
    fn __repr__(&self) -> String {
        format!(
            "Usage(gpus={:?}, gpu_memory={}, processes={}, gpu_seconds={:.1})",
            self.gpus, self.gpu_memory, self.processes, self.gpu_seconds
        )
    }
}

/// nvitop's `ResourceMetricCollector(devices=None, root_pids=None, interval=1.0)`:
/// `start(tag)`, `collect()`, `stop(tag)`, `clear(tag)`, `with collector(tag):`, and
/// `daemonize(on_collect)`; and gputop's `usage()`.
#[pyclass(module = "gputop", frozen)]
#[derive(Debug)]
pub struct ResourceMetricCollector {
    devices: Option<Vec<u32>>,
    interval: Duration,
    fed: Arc<Fed>,
    /// The sampling thread, while a tag is open.
    sampler: Mutex<Option<(Sender<()>, JoinHandle<()>)>>,
}

impl ResourceMetricCollector {
    /// Starts the sampling thread if it is not running: a reading now, then every interval.
    fn run(&self) {
        let mut sampler = locked(&self.sampler);
        if sampler.is_some() {
            return;
        }
        let (stop, stopped) = mpsc::channel::<()>();
        let (fed, devices, interval) = (Arc::clone(&self.fed), self.devices.clone(), self.interval);
        let thread = std::thread::spawn(move || {
            loop {
                let began = Instant::now();
                sample(&fed, devices.as_deref());
                match stopped.recv_timeout(interval.saturating_sub(began.elapsed())) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
            }
        });
        *sampler = Some((stop, thread));
    }

    fn halt(&self) {
        let running = locked(&self.sampler).take();
        if let Some((stop, thread)) = running {
            drop(stop);
            let _ = thread.join();
        }
    }

    /// Opens `tag` and starts sampling.
    fn open(&self, py: Python<'_>, tag: &str) -> PyResult<()> {
        collector(py)?;
        {
            let mut spans = locked(&self.fed.spans);
            if spans.is_open(tag) {
                return Err(PyRuntimeError::new_err(format!(
                    "Resource metric collector is already started with tag \"{tag}\""
                )));
            }
            spans.open(tag, now());
        }
        // A fresh span samples at once, as nvitop's does.
        *locked(&self.fed.sampled) = None;
        self.run();
        Ok(())
    }

    /// Closes `tag` (the latest when `None`); sampling stops with the last tag.
    fn close(&self, py: Python<'_>, tag: Option<&str>) -> PyResult<()> {
        let empty = {
            let mut spans = locked(&self.fed.spans);
            require_open(&spans, tag)?;
            spans.close(tag);
            spans.is_empty()
        };
        if empty {
            py.detach(|| self.halt());
        }
        Ok(())
    }
}

/// Extracts every item of an iterable (a list, a set, a generator).
fn items<'py, T: FromPyObjectOwned<'py>>(iterable: &Bound<'py, PyAny>) -> PyResult<Vec<T>> {
    iterable
        .try_iter()?
        .map(|item| item?.extract::<T>().map_err(Into::into))
        .collect()
}

#[pymethods]
impl ResourceMetricCollector {
    /// `devices`: the GPUs to log (all when `None`); `root_pids`: the processes whose GPU
    /// descendants (themselves included) are logged one by one (this process when `None`;
    /// `{1}` for every GPU process); `interval`: seconds between samples.
    #[new]
    #[pyo3(signature = (devices=None, root_pids=None, interval=1.0))]
    fn new(
        devices: Option<&Bound<'_, PyAny>>,
        root_pids: Option<&Bound<'_, PyAny>>,
        interval: f64,
    ) -> PyResult<Self> {
        let interval = seconds(interval)?;
        let devices = devices
            .map(|ds| items::<PyRef<'_, Device>>(ds).map(|ds| ds.iter().map(|d| d.index).collect()))
            .transpose()?;
        let roots = match root_pids {
            Some(pids) => items::<u32>(pids)?.into_iter().collect(),
            None => BTreeSet::from([std::process::id()]),
        };
        Ok(Self {
            devices,
            interval,
            fed: Arc::new(Fed {
                spans: Mutex::default(),
                monitor: Mutex::new({
                    let mut settings = Settings::default();
                    // The module shows no alerts: no rule is judged at each sample.
                    settings.alert.builtin_rules = false;
                    Monitor::new(&settings.history, &settings.alert, interval.as_secs_f64())
                }),
                sampled: Mutex::default(),
                lineage: Mutex::new(Lineage {
                    roots,
                    decided: HashMap::new(),
                }),
            }),
            sampler: Mutex::default(),
        })
    }

    #[getter]
    fn interval(&self) -> f64 {
        self.interval.as_secs_f64()
    }

    /// Opens `tag` (inside the tags open now, which prefix its keys) and starts sampling;
    /// `RuntimeError` when `tag` is open already. Also called `activate`.
    #[pyo3(signature = (tag))]
    fn start<'py>(slf: Bound<'py, Self>, tag: &str) -> PyResult<Bound<'py, Self>> {
        slf.get().open(slf.py(), tag)?;
        Ok(slf)
    }

    /// Closes `tag` (the latest opened when none is given) and the tags inside it; sampling
    /// stops with the last. `RuntimeError` when `tag` is not open. Also called `deactivate`.
    #[pyo3(signature = (tag = None))]
    fn stop<'py>(slf: Bound<'py, Self>, tag: Option<&str>) -> PyResult<Bound<'py, Self>> {
        slf.get().close(slf.py(), tag)?;
        Ok(slf)
    }

    /// `with collector(tag="epoch"):` opens `tag` for the block.
    fn __call__(slf: Bound<'_, Self>, tag: String) -> Opened {
        Opened {
            collector: slf.unbind(),
            tag,
        }
    }

    /// Every open tag's mean, min, max and last of each metric since it started; a reading
    /// is taken first when the last is older than the interval, as nvitop does.
    /// `RuntimeError` when no tag is open.
    fn collect(&self, py: Python<'_>) -> PyResult<BTreeMap<String, f64>> {
        if locked(&self.fed.spans).is_empty() {
            return Err(not_started());
        }
        let stale = locked(&self.fed.sampled).is_none_or(|at| at.elapsed() > self.interval);
        if stale {
            py.detach(|| sample(&self.fed, self.devices.as_deref()));
        }
        Ok(locked(&self.fed.spans).collected(now()))
    }

    /// Starts the statistics of `tag` and the tags inside it (the latest tag's when none is
    /// given) over from now.
    #[pyo3(signature = (tag = None))]
    fn clear(&self, tag: Option<&str>) -> PyResult<()> {
        let mut spans = locked(&self.fed.spans);
        require_open(&spans, tag)?;
        spans.clear(tag, now());
        Ok(())
    }

    /// gputop's own: GPU use per user and per container while this collector sampled (its
    /// first sample to its last): `{"seconds": s, "users": {name: Usage}, "containers": {...}}`.
    fn usage<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let monitor = locked(&self.fed.monitor);
        let accounting = monitor.usage();
        let out = PyDict::new(py);
        out.set_item("seconds", accounting.seconds)?;
        for (name, table) in [
            ("users", &accounting.users),
            ("containers", &accounting.containers),
        ] {
            let rows = PyDict::new(py);
            for (owner, figures) in table {
                rows.set_item(owner, Usage::from(figures))?;
            }
            out.set_item(name, rows)?;
        }
        Ok(out)
    }

    /// gputop's shorthand for `with collector("metrics"):`.
    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        slf.get().open(slf.py(), "metrics")?;
        Ok(slf)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) {
        locked(&self.fed.spans).close_all();
        py.detach(|| self.halt());
    }

    /// nvitop's: a daemon thread (returned, started unless `start=False`) that calls
    /// `on_start(collector)`, then `on_collect(collector.collect())` every `interval`
    /// seconds (at most the collector's) inside `tag` while it returns true, then
    /// `on_stop(collector)`.
    #[pyo3(signature = (
        on_collect, interval = None, *, on_start = None, on_stop = None,
        tag = "metrics-daemon".to_string(), start = true
    ))]
    #[allow(clippy::too_many_arguments)]
    fn daemonize<'py>(
        slf: &Bound<'py, Self>,
        on_collect: Py<PyAny>,
        interval: Option<f64>,
        on_start: Option<Py<PyAny>>,
        on_stop: Option<Py<PyAny>>,
        tag: String,
        start: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let own = slf.get().interval;
        let every = interval.map_or(Ok(own), seconds)?.min(own);
        let collector: Py<Self> = slf.clone().unbind();
        let name = tag.clone();
        let target = PyCFunction::new_closure(py, None, None, move |args, _| -> PyResult<()> {
            let py = args.py();
            let collector = collector.bind(py);
            if let Some(on_start) = &on_start {
                on_start.call1(py, (collector,))?;
            }
            let collected = collect_while(collector, &on_collect, &tag, every);
            let stopped = on_stop
                .as_ref()
                .map_or(Ok(()), |on_stop| on_stop.call1(py, (collector,)).map(drop));
            collected.and(stopped)
        })?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("target", target)?;
        kwargs.set_item("name", name)?;
        kwargs.set_item("daemon", true)?;
        let thread = py
            .import("threading")?
            .getattr("Thread")?
            .call((), Some(&kwargs))?;
        thread.setattr("collector", slf)?;
        if start {
            thread.call_method0("start")?;
        }
        Ok(thread)
    }
}

/// The daemon's loop: inside `tag`, `on_collect(collector.collect())` every `every` while
/// it returns true.
fn collect_while(
    collector: &Bound<'_, ResourceMetricCollector>,
    on_collect: &Py<PyAny>,
    tag: &str,
    every: Duration,
) -> PyResult<()> {
    let py = collector.py();
    collector.call_method1("start", (tag,))?;
    let collected = (|| {
        let mut next = Instant::now() + every;
        loop {
            let metrics = collector.call_method0("collect")?;
            if !on_collect.call1(py, (metrics,))?.bind(py).is_truthy()? {
                return Ok(());
            }
            let wait = next.saturating_duration_since(Instant::now());
            py.detach(|| std::thread::sleep(wait));
            next += every;
        }
    })();
    let stopped = collector.call_method1("stop", (tag,)).map(drop);
    collected.and(stopped)
}

/// What `collector(tag)` gives: a context manager that opens `tag` for its block.
#[pyclass(module = "gputop", frozen)]
#[derive(Debug)]
pub struct Opened {
    collector: Py<ResourceMetricCollector>,
    tag: String,
}

#[pymethods]
impl Opened {
    fn __enter__(&self, py: Python<'_>) -> PyResult<Py<ResourceMetricCollector>> {
        self.collector.get().open(py, &self.tag)?;
        Ok(self.collector.clone_ref(py))
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<()> {
        let collector = self.collector.get();
        // The block's code may have stopped it already.
        if locked(&collector.fed.spans).is_open(&self.tag) {
            collector.close(py, Some(&self.tag))?;
        }
        Ok(())
    }
}

impl Drop for ResourceMetricCollector {
    fn drop(&mut self) {
        self.halt();
    }
}

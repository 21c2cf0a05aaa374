//! `ResourceMetricCollector`: nvitop's collector of resource metrics over tagged spans (a
//! training run, an epoch in it), sampled on a Rust thread at the interval asked, without
//! the GIL, into the library's [`gputop::monitor::spans::Spans`]; and, gputop's own, GPU use
//! per user and container over the same samples ([`gputop::monitor::usage::Accounting`]).

use std::collections::BTreeMap;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gputop::monitor::spans::{Spans, metrics};
use gputop::monitor::usage::{Accounting, Usage as UsageFigures};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::{Device, ensure_open, read_machine};

/// Seconds since the epoch, now.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the samples feed: the tags' statistics, GPU use per user and container, and when
/// the last sample was taken.
#[derive(Debug)]
struct Fed {
    spans: Mutex<Spans>,
    accounting: Mutex<Accounting>,
    sampled: Mutex<Option<Instant>>,
}

/// Takes a reading and adds it to what `fed` keeps.
fn sample(fed: &Fed, devices: Option<&[u32]>) {
    if let Ok(snapshot) = read_machine() {
        let metrics = metrics(&snapshot, devices);
        locked(&fed.spans).record(now(), &metrics);
        locked(&fed.accounting).record(&snapshot);
        *locked(&fed.sampled) = Some(Instant::now());
    }
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
}

impl From<&UsageFigures> for Usage {
    fn from(u: &UsageFigures) -> Self {
        Self {
            gpus: u.gpus.iter().copied().collect(),
            gpu_memory: u.memory_bytes,
            processes: u.processes,
            gpu_seconds: u.gpu_seconds,
            gpu_memory_byte_seconds: u.memory_byte_seconds,
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

/// nvitop's `ResourceMetricCollector(devices=None, interval=1.0)`: `start(tag)`,
/// `collect()`, `stop(tag)`, `clear(tag)`, a context manager, and `daemonize(on_collect)`;
/// and gputop's `usage()`.
#[pyclass(module = "gputop")]
#[derive(Debug)]
pub struct ResourceMetricCollector {
    devices: Option<Vec<u32>>,
    interval: Duration,
    fed: Arc<Fed>,
    sampler: Option<(Sender<()>, JoinHandle<()>)>,
}

impl ResourceMetricCollector {
    /// Starts the sampling thread if it is not running: a reading now, then every interval.
    fn run(&mut self) {
        if self.sampler.is_some() {
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
        self.sampler = Some((stop, thread));
    }

    fn halt(&mut self) {
        if let Some((stop, thread)) = self.sampler.take() {
            drop(stop);
            let _ = thread.join();
        }
    }

    /// Opens `tag` and starts sampling.
    fn open(&mut self, py: Python<'_>, tag: &str) -> PyResult<()> {
        ensure_open(py)?;
        locked(&self.fed.spans).open(tag, now());
        self.run();
        Ok(())
    }
}

#[pymethods]
impl ResourceMetricCollector {
    #[new]
    #[pyo3(signature = (devices=None, interval=1.0))]
    fn new(devices: Option<Vec<PyRef<'_, Device>>>, interval: f64) -> PyResult<Self> {
        if !(interval.is_finite() && interval > 0.0) {
            return Err(PyValueError::new_err(
                "interval must be a positive number of seconds",
            ));
        }
        let interval = Duration::from_secs_f64(interval);
        Ok(Self {
            devices: devices.map(|ds| ds.iter().map(|d| d.index).collect()),
            interval,
            fed: Arc::new(Fed {
                spans: Mutex::default(),
                accounting: Mutex::new(Accounting::new(interval)),
                sampled: Mutex::default(),
            }),
            sampler: None,
        })
    }

    /// Opens `tag` (inside the tags open now, which prefix its keys) and starts sampling.
    #[pyo3(signature = (tag = "metrics"))]
    fn start<'py>(mut slf: PyRefMut<'py, Self>, tag: &str) -> PyResult<PyRefMut<'py, Self>> {
        let py = slf.py();
        slf.open(py, tag)?;
        Ok(slf)
    }

    /// Closes `tag` (the latest opened when none is given) and the tags inside it; sampling
    /// stops with the last.
    #[pyo3(signature = (tag = None))]
    fn stop(&mut self, py: Python<'_>, tag: Option<&str>) {
        let empty = {
            let mut spans = locked(&self.fed.spans);
            spans.close(tag);
            spans.is_empty()
        };
        if empty {
            py.detach(|| self.halt());
        }
    }

    /// Every open tag's mean, min, max and last of each metric since it started; a reading
    /// is taken first when the last is older than half the interval, as nvitop does.
    fn collect(&self, py: Python<'_>) -> BTreeMap<String, f64> {
        let stale = locked(&self.fed.sampled).is_none_or(|at| at.elapsed() > self.interval / 2);
        let open = !locked(&self.fed.spans).is_empty();
        if stale && open {
            py.detach(|| sample(&self.fed, self.devices.as_deref()));
        }
        locked(&self.fed.spans).collected(now())
    }

    /// Starts the statistics of `tag` and the tags inside it (every tag's when none is
    /// given) over from now.
    #[pyo3(signature = (tag = None))]
    fn clear(&self, tag: Option<&str>) {
        locked(&self.fed.spans).clear(tag, now());
    }

    /// gputop's own: GPU use per user and per container while this collector sampled (its
    /// first sample to its last): `{"seconds": s, "users": {name: Usage}, "containers": {...}}`.
    fn usage<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let accounting = locked(&self.fed.accounting);
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

    fn __enter__(mut slf: PyRefMut<'_, Self>) -> PyResult<PyRefMut<'_, Self>> {
        let py = slf.py();
        slf.open(py, "metrics")?;
        Ok(slf)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, py: Python<'_>, _args: &Bound<'_, PyTuple>) {
        locked(&self.fed.spans).close_all();
        py.detach(|| self.halt());
    }

    /// Calls `on_collect(metrics)` every `interval` seconds (the collector's own when not
    /// given) on a daemon thread, until it returns `False` or raises; opens a `tag` for it.
    #[pyo3(signature = (on_collect, interval = None, tag = "metrics"))]
    fn daemonize(
        &mut self,
        py: Python<'_>,
        on_collect: Py<PyAny>,
        interval: Option<f64>,
        tag: &str,
    ) -> PyResult<()> {
        let every = Duration::try_from_secs_f64(interval.unwrap_or(self.interval.as_secs_f64()))
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| PyValueError::new_err("interval must be a positive number of seconds"))?;
        self.open(py, tag)?;
        let (fed, tag) = (Arc::clone(&self.fed), tag.to_string());
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(every);
                let collected = locked(&fed.spans).collected(now());
                let go_on = Python::attach(|py| match on_collect.call1(py, (collected,)) {
                    Ok(result) => result.bind(py).extract::<bool>().unwrap_or(true),
                    Err(error) => {
                        error.print(py);
                        false
                    }
                });
                if !go_on {
                    locked(&fed.spans).close(Some(&tag));
                    return;
                }
            }
        });
        Ok(())
    }
}

impl Drop for ResourceMetricCollector {
    fn drop(&mut self) {
        self.halt();
    }
}

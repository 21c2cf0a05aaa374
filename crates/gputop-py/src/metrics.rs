//! `ResourceMetricCollector`: nvitop's collector of resource metrics over tagged spans (a
//! training run, an epoch in it), sampled on a Rust thread at the interval asked, without
//! the GIL, into the library's [`gputop::monitor::spans::Spans`].

use std::collections::BTreeMap;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gputop::monitor::spans::{Spans, metrics};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::{Device, ensure_open, read_machine};

/// Seconds since the epoch, now.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Takes a reading and adds its metrics to every open tag of `spans`.
fn sample(spans: &Mutex<Spans>, devices: Option<&[u32]>, last: &Mutex<Option<Instant>>) {
    if let Ok(snapshot) = read_machine() {
        let metrics = metrics(&snapshot, devices);
        spans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record(now(), &metrics);
        *last.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }
}

/// nvitop's `ResourceMetricCollector(devices=None, interval=1.0)`: `start(tag)`,
/// `collect()`, `stop(tag)`, `clear(tag)`, a context manager, and `daemonize(on_collect)`.
#[pyclass(module = "gputop")]
#[derive(Debug)]
pub struct ResourceMetricCollector {
    devices: Option<Vec<u32>>,
    interval: Duration,
    spans: Arc<Mutex<Spans>>,
    /// When the last sample was taken.
    sampled: Arc<Mutex<Option<Instant>>>,
    sampler: Option<(Sender<()>, JoinHandle<()>)>,
}

impl ResourceMetricCollector {
    /// Starts the sampling thread if it is not running: a reading now, then every interval.
    fn run(&mut self) {
        if self.sampler.is_some() {
            return;
        }
        let (stop, stopped) = mpsc::channel::<()>();
        let (spans, sampled, devices, interval) = (
            Arc::clone(&self.spans),
            Arc::clone(&self.sampled),
            self.devices.clone(),
            self.interval,
        );
        let thread = std::thread::spawn(move || {
            loop {
                let began = Instant::now();
                sample(&spans, devices.as_deref(), &sampled);
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
        Ok(Self {
            devices: devices.map(|ds| ds.iter().map(|d| d.index).collect()),
            interval: Duration::from_secs_f64(interval),
            spans: Arc::default(),
            sampled: Arc::default(),
            sampler: None,
        })
    }

    /// Opens `tag` (tags nest: each keeps its own statistics) and starts sampling.
    #[pyo3(signature = (tag = "metrics"))]
    fn start<'py>(mut slf: PyRefMut<'py, Self>, tag: &str) -> PyResult<PyRefMut<'py, Self>> {
        ensure_open(slf.py())?;
        slf.spans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .open(tag, now());
        slf.run();
        Ok(slf)
    }

    /// Closes `tag` (the latest opened when none is given); sampling stops with the last.
    #[pyo3(signature = (tag = None))]
    fn stop(&mut self, py: Python<'_>, tag: Option<&str>) {
        let empty = {
            let mut spans = self.spans.lock().unwrap_or_else(|e| e.into_inner());
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
        let stale = self
            .sampled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none_or(|at| at.elapsed() > self.interval / 2);
        let open = !self.spans.lock().unwrap_or_else(|e| e.into_inner()).is_empty();
        if stale && open {
            py.detach(|| sample(&self.spans, self.devices.as_deref(), &self.sampled));
        }
        self.spans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .collected(now())
    }

    /// Starts `tag`'s statistics (every tag's when none is given) over from now.
    #[pyo3(signature = (tag = None))]
    fn clear(&self, tag: Option<&str>) {
        self.spans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear(tag, now());
    }

    fn __enter__(slf: PyRefMut<'_, Self>) -> PyResult<PyRefMut<'_, Self>> {
        Self::start(slf, "metrics")
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) {
        self.spans.lock().unwrap_or_else(|e| e.into_inner()).close_all();
        py.detach(|| self.halt());
    }

    /// Calls `on_collect(metrics)` every `interval` seconds (the collector's own when not
    /// given) on a daemon thread, until it returns `False`; starts a `tag` span for it.
    #[pyo3(signature = (on_collect, interval = None, tag = "metrics"))]
    fn daemonize(
        mut slf: PyRefMut<'_, Self>,
        on_collect: Py<PyAny>,
        interval: Option<f64>,
        tag: &str,
    ) -> PyResult<()> {
        let every = Duration::try_from_secs_f64(interval.unwrap_or(slf.interval.as_secs_f64()))
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| PyValueError::new_err("interval must be a positive number of seconds"))?;
        ensure_open(slf.py())?;
        slf.spans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .open(tag, now());
        slf.run();
        let spans = Arc::clone(&slf.spans);
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(every);
                let collected = spans.lock().unwrap_or_else(|e| e.into_inner()).collected(now());
                // Returning False stops; an exception stops too (it is printed).
                let go_on = Python::attach(|py| match on_collect.call1(py, (collected,)) {
                    Ok(result) => result.bind(py).extract::<bool>().unwrap_or(true),
                    Err(error) => {
                        error.print(py);
                        false
                    }
                });
                if !go_on {
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

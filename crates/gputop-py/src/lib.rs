//! The `gputop` Python module: nvitop's `Device` API (its names, units and `None` for what
//! is not known) over gputop's own reading of the machine, so `from nvitop import Device`
//! can become `from gputop import Device`.
//!
//! Every call answers from a reading at most 50 ms old, taken with the GIL released: a
//! gauge (memory, utilization, temperature, power, fans) is read again alone, in one or two
//! driver calls, as nvitop's getters each ask the driver for their own field; identity and
//! limits come from a reading of the GPUs without their processes; `processes()` from a
//! whole reading (the GPUs, their processes and the processes' host facts).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use gputop_core::collector::Collector;
use gputop_core::model::{Device as DeviceReading, GpuProcess as ProcessReading, Snapshot};
use gputop_core::source::{Gauge, Source};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyIndexError, PyValueError};
use pyo3::prelude::*;

mod metrics;

create_exception!(
    gputop,
    GpuTopError,
    PyException,
    "gputop cannot read the GPUs: no NVML library, no driver, no permission, no GPU. The \
     message says which, and what to do, as the gputop command does."
);

/// How old a reading may be to answer a call.
pub(crate) const FRESH_FOR: Duration = Duration::from_millis(50);

/// Utilization means and peaks cover this much before a reading.
const WINDOW: Duration = Duration::from_secs(1);

/// The collector this process reads through, once the GPUs are open: whichever Python
/// thread asks reads through it, one reading at a time under the collector's own lock. This
/// lock guards only which collector is current (`init` and `demo` replace it).
static COLLECTOR: RwLock<Option<Arc<Collector>>> = RwLock::new(None);

fn open(source: Result<Source, String>) -> PyResult<()> {
    let collector = Collector::on_demand(source.map_err(GpuTopError::new_err)?, WINDOW)
        .map_err(|e| GpuTopError::new_err(format!("gputop cannot start its reading thread: {e}")))?;
    *COLLECTOR.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(collector));
    Ok(())
}

/// Reads the machine's NVML: the library on the loader's path, or `nvml_lib` (as the
/// command's `--nvml-lib`; `GPUTOP_NVML_LIB` when not given). Called on first use.
#[pyfunction]
#[pyo3(signature = (nvml_lib=None))]
fn init(py: Python<'_>, nvml_lib: Option<std::path::PathBuf>) -> PyResult<()> {
    let library = nvml_lib.or_else(|| std::env::var_os("GPUTOP_NVML_LIB").map(Into::into));
    let source = py.detach(|| Source::local(library.as_deref()).map_err(|e| e.to_string()));
    open(source)
}

/// Reads gputop's built-in simulated machine instead of the real GPUs.
#[pyfunction]
fn demo() -> PyResult<()> {
    open(Ok(Source::demo()))
}

/// The current collector, opening the machine's NVML on first use.
pub(crate) fn collector(py: Python<'_>) -> PyResult<Arc<Collector>> {
    if let Some(collector) = current_collector() {
        return Ok(collector);
    }
    init(py, None)?;
    current_collector().ok_or_else(|| GpuTopError::new_err("gputop has not opened the GPUs"))
}

/// The current collector, if the GPUs are open.
pub(crate) fn current_collector() -> Option<Arc<Collector>> {
    COLLECTOR.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The latest whole reading, taken now when the last one is older than [`FRESH_FOR`];
/// opens the machine's NVML on first use.
fn reading(py: Python<'_>) -> PyResult<Arc<Snapshot>> {
    let collector = collector(py)?;
    Ok(py.detach(|| collector.read(FRESH_FOR)))
}

/// The latest reading of the GPUs alone (or of a whole reading's GPUs), taken now when older
/// than [`FRESH_FOR`]; opens the machine's NVML on first use.
fn devices_reading(py: Python<'_>) -> PyResult<Arc<Vec<DeviceReading>>> {
    let collector = collector(py)?;
    Ok(py.detach(|| collector.read_devices(FRESH_FOR)))
}

/// `read` of GPU `index`, its `gauge` read again alone (one or two driver calls) when older
/// than [`FRESH_FOR`]: as nvitop's getters, which each ask the driver for their own field.
fn gauge_reading<T>(
    py: Python<'_>,
    index: u32,
    gauge: Gauge,
    read: impl FnOnce(&DeviceReading) -> Option<T>,
) -> PyResult<Option<T>> {
    let collector = collector(py)?;
    let devices = py.detach(|| collector.read_gauge(index, gauge, FRESH_FOR));
    let device = devices
        .iter()
        .find(|d| d.index == index)
        .ok_or_else(|| GpuTopError::new_err(format!("GPU {index} is gone")))?;
    Ok(read(device))
}

/// A size as nvitop writes one, so printed reports read the same: four significant digits
/// up to 1000 of a unit (`24.00MiB`, `324.0MiB`), whole MiB up to 20 GiB (`6144MiB`).
fn human_bytes(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    let units = [
        ("MiB", KIB * KIB),
        ("GiB", KIB.powi(3)),
        ("TiB", KIB.powi(4)),
        ("PiB", KIB.powi(5)),
    ];
    if b < KIB {
        return format!("{bytes}B");
    }
    if b < KIB * KIB {
        return format!("{}KiB", (b / KIB).round_ties_even());
    }
    for (i, (unit, size)) in units.iter().enumerate() {
        let value = b / size;
        if value < 100.0 {
            return format!("{value:.2}{unit}");
        }
        if value < 1000.0 || i + 1 == units.len() {
            return format!("{value:.1}{unit}");
        }
        // Between 1000 MiB and 20 GiB, whole MiB.
        if i == 0 && b < 20.0 * units[1].1 {
            return format!("{}MiB", value.round_ties_even());
        }
    }
    unreachable!("the last unit returns")
}

/// One GPU, by its index as NVML counts them.
#[pyclass(module = "gputop", frozen, eq, hash)]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Device {
    pub(crate) index: u32,
}

impl Device {
    fn gauge<T>(
        &self,
        py: Python<'_>,
        gauge: Gauge,
        read: impl FnOnce(&DeviceReading) -> Option<T>,
    ) -> PyResult<Option<T>> {
        gauge_reading(py, self.index, gauge, read)
    }

    fn with<T>(&self, py: Python<'_>, read: impl FnOnce(&DeviceReading) -> Option<T>) -> PyResult<Option<T>> {
        let devices = devices_reading(py)?;
        let device = devices
            .iter()
            .find(|d| d.index == self.index)
            .ok_or_else(|| GpuTopError::new_err(format!("GPU {} is gone", self.index)))?;
        Ok(read(device))
    }
}

#[pymethods]
impl Device {
    /// `Device(0)` or `Device(uuid="GPU-...")`.
    #[new]
    #[pyo3(signature = (index=None, *, uuid=None))]
    fn new(py: Python<'_>, index: Option<u32>, uuid: Option<String>) -> PyResult<Self> {
        let devices = devices_reading(py)?;
        let found = match (index, uuid) {
            (Some(index), None) => devices.iter().find(|d| d.index == index),
            (None, Some(uuid)) => devices
                .iter()
                .find(|d| d.uuid.value().is_some_and(|u| *u == uuid)),
            _ => return Err(PyValueError::new_err("give one of index and uuid")),
        };
        found
            .map(|d| Device { index: d.index })
            .ok_or_else(|| PyIndexError::new_err("no such GPU"))
    }

    /// Every GPU.
    #[staticmethod]
    fn all(py: Python<'_>) -> PyResult<Vec<Device>> {
        Ok(devices_reading(py)?
            .iter()
            .map(|d| Device { index: d.index })
            .collect())
    }

    /// How many GPUs there are.
    #[staticmethod]
    fn count(py: Python<'_>) -> PyResult<usize> {
        Ok(devices_reading(py)?.len())
    }

    #[getter]
    fn index(&self) -> u32 {
        self.index
    }

    fn name(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.with(py, |d| d.name.value().cloned())
    }

    fn uuid(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.with(py, |d| d.uuid.value().cloned())
    }

    /// `nvidia`, `amd` or `intel`.
    fn vendor(&self, py: Python<'_>) -> PyResult<Option<&'static str>> {
        self.with(py, |d| Some(d.vendor.label()))
    }

    /// The kernel driver: `nvidia`, `amdgpu`, `i915` or `xe`.
    fn driver(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.with(py, |d| d.driver.value().cloned())
    }

    /// Its driver's version: NVIDIA's driver; for amdgpu, i915 and xe the module's own
    /// version where it has one, else the kernel's release.
    fn driver_version(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.with(py, |d| d.driver_version.value().cloned())
    }

    /// `00000000:17:00.0`.
    fn pci_bus_id(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.with(py, |d| d.pci_bus_id.value().cloned())
    }

    /// Bytes.
    fn memory_total(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.gauge(py, Gauge::Memory, |d| d.memory_total_bytes.get())
    }

    /// Bytes.
    fn memory_used(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.gauge(py, Gauge::Memory, |d| d.memory_used_bytes.get())
    }

    /// Bytes.
    fn memory_free(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.gauge(py, Gauge::Memory, |d| d.memory_free_bytes.get())
    }

    /// `used / total`, as nvitop writes sizes: `8492MiB / 40.00GiB`.
    fn memory_usage(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.gauge(py, Gauge::Memory, |d| {
            d.memory()
                .get()
                .map(|m| format!("{} / {}", human_bytes(m.used), human_bytes(m.total)))
        })
    }

    /// Percent of the total in use, one decimal.
    fn memory_percent(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        self.gauge(py, Gauge::Memory, |d| {
            d.memory()
                .get()
                .filter(|m| m.total > 0)
                .map(|m| (m.used as f64 * 1000.0 / m.total as f64).round() / 10.0)
        })
    }

    /// Percent, as the driver reports it now.
    fn gpu_utilization(&self, py: Python<'_>) -> PyResult<Option<u32>> {
        self.gauge(py, Gauge::GpuUtilization, |d| d.utilization_gpu_percent.get())
    }

    /// Percent of time the memory was read or written, now.
    fn memory_utilization(&self, py: Python<'_>) -> PyResult<Option<u32>> {
        self.gauge(py, Gauge::Utilization, |d| d.utilization_memory_percent.get())
    }

    /// Degrees Celsius.
    fn temperature(&self, py: Python<'_>) -> PyResult<Option<u32>> {
        self.gauge(py, Gauge::Temperature, |d| d.temperature_celsius.get())
    }

    /// Milliwatts, as nvitop.
    fn power_usage(&self, py: Python<'_>) -> PyResult<Option<u32>> {
        self.gauge(py, Gauge::Power, |d| d.power_usage_watts.get().map(milliwatts))
    }

    /// Milliwatts, as nvitop.
    fn power_limit(&self, py: Python<'_>) -> PyResult<Option<u32>> {
        self.with(py, |d| d.power_limit_watts.get().map(milliwatts))
    }

    /// Millijoules since the driver loaded, as nvitop; read again alone, as a counter is.
    fn total_energy_consumption(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.gauge(py, Gauge::Energy, |d| {
            d.energy_joules
                .get()
                .map(|joules| (joules * 1000.0).round() as u64)
        })
    }

    /// Percent; `None` on passively cooled GPUs.
    fn fan_speed(&self, py: Python<'_>) -> PyResult<Option<u32>> {
        self.gauge(py, Gauge::FanSpeeds, |d| d.fan_speed_percent.get())
    }

    /// The interval's mean and peak utilization, in percent, from the driver's samples:
    /// what nvitop has no name for (`{"mean": 37.5, "peak": 100.0}`).
    fn utilization_window(&self, py: Python<'_>) -> PyResult<Option<HashMap<&'static str, f64>>> {
        self.gauge(py, Gauge::GpuUtilization, |d| {
            let mean = d.utilization_gpu_mean_percent.get()?;
            let peak = d.utilization_gpu_peak_percent.get()?;
            Some(HashMap::from([("mean", mean), ("peak", peak)]))
        })
    }

    /// The processes on this GPU, by PID.
    fn processes(&self, py: Python<'_>) -> PyResult<HashMap<u32, GpuProcess>> {
        let snapshot = reading(py)?;
        Ok(snapshot
            .processes
            .iter()
            .filter(|p| p.gpu_index == self.index)
            .map(|p| (p.pid, GpuProcess(p.clone())))
            .collect())
    }

    fn __repr__(&self) -> String {
        format!("Device(index={})", self.index)
    }
}

/// A process on one GPU, as read with the GPU.
#[pyclass(module = "gputop", frozen)]
#[derive(Debug, Clone)]
struct GpuProcess(ProcessReading);

#[pymethods]
impl GpuProcess {
    #[getter]
    fn pid(&self) -> u32 {
        self.0.pid
    }

    /// Bytes of GPU memory.
    fn gpu_memory(&self) -> Option<u64> {
        self.0.gpu_memory_bytes.get()
    }

    fn gpu_memory_human(&self) -> Option<String> {
        self.0.gpu_memory_bytes.get().map(human_bytes)
    }

    /// Percent of the GPU's streaming multiprocessors it kept busy.
    fn gpu_sm_utilization(&self) -> Option<u32> {
        self.0.sm_percent.get()
    }

    fn username(&self) -> Option<String> {
        self.0.host.user.as_deref().map(str::to_owned)
    }

    /// The program's name: the command line's first word, without its directory.
    fn name(&self) -> Option<String> {
        let command = self.0.host.command.value()?;
        let first = command.split(' ').next()?;
        Some(first.rsplit('/').next().unwrap_or(first).to_string())
    }

    /// The command line, split into words.
    fn cmdline(&self) -> Option<Vec<String>> {
        let command = self.0.host.command.value()?;
        Some(command.split(' ').map(String::from).collect())
    }

    /// Percent of one CPU.
    fn cpu_percent(&self) -> Option<f64> {
        self.0.host.cpu_percent.get()
    }

    /// Bytes resident in host memory.
    fn host_memory(&self) -> Option<u64> {
        self.0.host.memory_bytes.get()
    }

    fn __repr__(&self) -> String {
        format!("GpuProcess(pid={}, gpu={})", self.0.pid, self.0.gpu_index)
    }
}

#[pymodule]
#[pyo3(name = "gputop")]
fn gputop_py(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Device>()?;
    m.add_class::<GpuProcess>()?;
    m.add_class::<metrics::ResourceMetricCollector>()?;
    m.add_class::<metrics::Usage>()?;
    m.add_class::<metrics::Opened>()?;
    // nvitop's other names for them.
    let collector = m.getattr("ResourceMetricCollector")?;
    collector.setattr("activate", collector.getattr("start")?)?;
    collector.setattr("deactivate", collector.getattr("stop")?)?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(demo, m)?)?;
    m.add("GpuTopError", m.py().get_type::<GpuTopError>())?;
    // nvitop's name for a value that is not known.
    m.add("NA", m.py().None())?;
    Ok(())
}

/// Watts as the driver's (and nvitop's) whole milliwatts.
fn milliwatts(watts: f64) -> u32 {
    (watts * 1000.0).round().clamp(0.0, f64::from(u32::MAX)) as u32
}

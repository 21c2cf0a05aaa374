//! AMD and Intel GPUs through the kernel's DRM interfaces, without vendor libraries: the
//! devices from sysfs and hwmon ([`sysfs`]), the processes using them from `/proc/PID/fdinfo`
//! ([`clients`], [`fdinfo`]). Every path is read under a root ([`RootedFiles`]), so a
//! container that mounts the host's `/proc` and `/sys` elsewhere, and the tests' fake trees,
//! are read alike.

pub mod captured;
pub mod clients;
pub mod fdinfo;
#[cfg(any(test, feature = "testing"))]
pub mod fixture;
pub mod sysfs;

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::model::{Device, Engine, GpuProcess, ProcessType, Reading, Vendor};
use clients::{ClientTracker, ProcessUse, Region};
use sysfs::{DeviceFigures, DrmDevice};

/// The files a DRM reader reads, relative to its root.
pub trait Files {
    /// The names in a directory.
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>>;
    /// Where a symbolic link points.
    fn link(&self, path: &Path) -> std::io::Result<PathBuf>;
    /// At most `max` bytes of a file.
    fn read(&self, path: &Path, max: usize) -> std::io::Result<Vec<u8>>;
    /// A small text file (a sysfs attribute), `None` when it cannot be read.
    fn text(&self, path: &Path) -> Option<String> {
        self.read(path, 4096)
            .ok()
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// The machine's files under a root directory: `/proc`, `/sys`, or where a container mounts
/// the host's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootedFiles {
    root: PathBuf,
}

impl RootedFiles {
    /// Files under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }
}

impl Files for RootedFiles {
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        std::fs::read_dir(self.root.join(dir))?
            .map(|entry| Ok(entry?.file_name().to_string_lossy().into_owned()))
            .collect()
    }

    fn link(&self, path: &Path) -> std::io::Result<PathBuf> {
        std::fs::read_link(self.root.join(path))
    }

    fn read(&self, path: &Path, max: usize) -> std::io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        std::fs::File::open(self.root.join(path))?
            .take(max as u64)
            .read_to_end(&mut bytes)?;
        Ok(bytes)
    }
}

/// One GPU with its figures, and what its processes do on it.
#[derive(Debug, Clone, PartialEq)]
pub struct DrmReading {
    /// The device.
    pub device: DrmDevice,
    /// Its sysfs and hwmon figures; `power_watts` for Intel from its energy counter's delta.
    pub figures: DeviceFigures,
    /// Percent busy: amdgpu's own figure (`None` where it gives none: the clients' sum
    /// would miss compute work through `/dev/kfd`); for Intel, which has no busy figure in
    /// sysfs, the busiest engine class summed over the clients gputop could read.
    pub busy_percent: Option<f64>,
    /// Its processes, by PID.
    pub processes: BTreeMap<u32, ProcessUse>,
}

/// Reads the machine's AMD and Intel GPUs and their processes, refresh after refresh.
pub struct DrmReader {
    procfs: Box<dyn Files + Send>,
    sysfs: Box<dyn Files + Send>,
    devices: Vec<DrmDevice>,
    /// The kernel's release (`sys/kernel/osrelease`): the version of a driver built in its
    /// tree, which has no version of its own.
    kernel_release: Option<String>,
    clients: ClientTracker,
    /// Intel's energy counters at the last read: microjoules, and when (nanoseconds).
    energy: HashMap<String, (u64, u64)>,
    clock: Box<dyn FnMut() -> u64 + Send>,
}

impl std::fmt::Debug for DrmReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DrmReader")
            .field("devices", &self.devices)
            .finish_non_exhaustive()
    }
}

/// Nanoseconds of the monotonic clock since the reader began.
fn monotonic() -> Box<dyn FnMut() -> u64 + Send> {
    let started = std::time::Instant::now();
    Box::new(move || u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

impl DrmReader {
    /// A reader of the trees under `procfs` and `sysfs` (`/proc`, `/sys`); the devices are
    /// found once, here.
    pub fn new(procfs: impl Into<PathBuf>, sysfs: impl Into<PathBuf>) -> Self {
        Self::with(
            Box::new(RootedFiles::new(procfs)),
            Box::new(RootedFiles::new(sysfs)),
            monotonic(),
        )
    }

    /// A reader of the trees under `procfs` and `sysfs` that keeps what it reads in the
    /// capture it returns beside it (and the bytes that holds), for `gputop capture`.
    pub fn recording(
        procfs: impl Into<PathBuf>,
        sysfs: impl Into<PathBuf>,
    ) -> (Self, Arc<Mutex<(captured::Captured, usize)>>) {
        let log = Arc::default();
        let recorder = |root: PathBuf, which| {
            Box::new(captured::Recorder::new(
                Box::new(RootedFiles::new(root)),
                which,
                Arc::clone(&log),
            ))
        };
        let reader = Self::with(
            recorder(procfs.into(), captured::Which::Proc),
            recorder(sysfs.into(), captured::Which::Sys),
            monotonic(),
        );
        (reader, log)
    }

    /// A reader of any files, with any clock (the tests' fake trees and time).
    pub fn with(
        procfs: Box<dyn Files + Send>,
        sysfs: Box<dyn Files + Send>,
        clock: Box<dyn FnMut() -> u64 + Send>,
    ) -> Self {
        let devices = sysfs::find_devices(sysfs.as_ref());
        let kernel_release = if devices.is_empty() {
            None
        } else {
            sysfs::printable_line(procfs.as_ref(), Path::new("sys/kernel/osrelease"))
        };
        Self {
            procfs,
            sysfs,
            devices,
            kernel_release,
            clients: ClientTracker::default(),
            energy: HashMap::new(),
            clock,
        }
    }

    /// The devices found.
    pub fn devices(&self) -> &[DrmDevice] {
        &self.devices
    }

    /// Every device's figures and processes now, and how many processes could not be read.
    pub fn read(&mut self) -> (Vec<DrmReading>, usize) {
        let sweep = self.clients.sweep(self.procfs.as_ref(), &mut self.clock);
        let mut readings = Vec::with_capacity(self.devices.len());
        for device in &self.devices {
            let mut figures = device.read(self.sysfs.as_ref());
            let now = (self.clock)();
            if let Some(energy) = figures.energy_microjoules {
                let before = self.energy.insert(device.pci_slot.clone(), (energy, now));
                figures.power_watts = before.and_then(|(was, at)| {
                    let seconds = now.saturating_sub(at) as f64 / 1e9;
                    (seconds > 0.0 && energy >= was).then(|| (energy - was) as f64 / 1e6 / seconds)
                });
            }
            let processes: BTreeMap<u32, ProcessUse> = sweep
                .processes
                .iter()
                .filter(|((_, slot), _)| *slot == device.pci_slot)
                .map(|((pid, _), used)| (*pid, used.clone()))
                .collect();
            let busy_percent = match device.vendor {
                Vendor::Amd | Vendor::Nvidia => figures.busy_percent.map(f64::from),
                Vendor::Intel => busiest_class(&processes),
            };
            readings.push(DrmReading {
                device: device.clone(),
                figures,
                busy_percent,
                processes,
            });
        }
        (readings, sweep.hidden)
    }
}

/// The machine's AMD and Intel GPUs and their processes in the model's shape.
#[derive(Debug, Default)]
pub struct DrmReadout {
    /// The GPUs, indexed from the first index asked for, in the kernel's order (`cardN`).
    pub devices: Vec<Device>,
    /// Their processes, one per process and GPU.
    pub processes: Vec<GpuProcess>,
    /// Processes whose fds could not be read.
    pub hidden: u32,
}

impl DrmReader {
    /// Every device and process now, as model values, the devices numbered from
    /// `first_index` (after NVML's).
    pub fn readout(&mut self, first_index: u32) -> DrmReadout {
        let (readings, hidden) = self.read();
        let mut out = DrmReadout {
            hidden: u32::try_from(hidden).unwrap_or(u32::MAX),
            ..DrmReadout::default()
        };
        for (index, reading) in (first_index..).zip(readings) {
            for (pid, used) in &reading.processes {
                out.processes.push(process_of(*pid, index, used));
            }
            out.devices
                .push(device_of(index, reading, self.kernel_release.as_deref()));
        }
        out
    }
}

/// Why a sleeping GPU's sensors are not read.
const ASLEEP: &str = "the GPU sleeps (runtime power management); reading it would wake it";

/// A GPU as the model has it, from its reading; its driver's version is the module's own,
/// else the kernel's release.
fn device_of(index: u32, reading: DrmReading, kernel_release: Option<&str>) -> Device {
    let DrmReading {
        device,
        figures,
        busy_percent,
        ..
    } = reading;
    let mut out = Device::new(index, device.vendor);
    out.driver = Reading::Value(device.driver);
    out.driver_version = device
        .module_version
        .or_else(|| kernel_release.map(str::to_string))
        .map_or(Reading::NotSupported, Reading::Value);
    out.name = Reading::Value(device.name);
    out.pci_bus_id = Reading::Value(device.pci_slot);
    let known = |value: Option<u64>| -> Reading<u64> {
        match value {
            Some(v) => Reading::Value(v),
            None if figures.asleep => Reading::failed(ASLEEP),
            None => Reading::NotSupported,
        }
    };
    let small =
        |value: Option<u32>| known(value.map(u64::from)).map(|v| u32::try_from(v).unwrap_or(u32::MAX));
    let real = |value: Option<f64>| -> Reading<f64> {
        match value {
            Some(v) if v.is_finite() => Reading::Value(v),
            _ if figures.asleep => Reading::failed(ASLEEP),
            _ => Reading::NotSupported,
        }
    };
    // A runtime-suspended GPU runs nothing.
    let busy = if figures.asleep { Some(0.0) } else { busy_percent };
    out.utilization_gpu_percent = real(busy).map(|p| p.round() as u32);
    out.utilization_gpu_mean_percent = real(busy);
    out.utilization_gpu_peak_percent = real(busy);
    out.utilization_memory_percent = small(figures.memory_busy_percent);
    out.utilization_memory_mean_percent = real(figures.memory_busy_percent.map(f64::from));
    out.utilization_memory_peak_percent = out.utilization_memory_mean_percent.clone();
    out.memory_total_bytes = known(figures.vram_total_bytes);
    out.memory_used_bytes = known(figures.vram_used_bytes);
    out.memory_free_bytes = known(
        figures
            .vram_total_bytes
            .zip(figures.vram_used_bytes)
            .map(|(total, used)| total.saturating_sub(used)),
    );
    out.gtt_total_bytes = known(figures.gtt_total_bytes);
    out.gtt_used_bytes = known(figures.gtt_used_bytes);
    out.temperature_celsius = small(figures.temperature_celsius);
    out.memory_temperature_celsius = small(figures.memory_temperature_celsius);
    out.set_fan_speeds(small(figures.fan_percent).map(|f| vec![f]));
    out.power_usage_watts = real(figures.power_watts);
    out.power_usage_mean_watts = out.power_usage_watts.clone();
    out.power_usage_peak_watts = out.power_usage_watts.clone();
    out.power_limit_watts = real(figures.power_cap_watts);
    out.power_enforced_limit_watts = out.power_limit_watts.clone();
    out.energy_joules = real(figures.energy_microjoules.map(|uj| uj as f64 / 1e6));
    out.clock_graphics_mhz = small(figures.core_clock_mhz);
    out.clock_memory_mhz = small(figures.memory_clock_mhz);
    out
}

/// One process on one GPU as the model has it: its GPU % is its engines' summed, its GPU
/// memory what it holds in VRAM (on a GPU without VRAM, in system memory).
fn process_of(pid: u32, gpu_index: u32, used: &ProcessUse) -> GpuProcess {
    let busy = |engine: Engine| used.engines.get(&engine).is_some_and(|p| *p > 0.0);
    let kind = match (busy(Engine::Compute), busy(Engine::Graphics)) {
        (true, true) => ProcessType::ComputeGraphics,
        (true, false) => ProcessType::Compute,
        _ => ProcessType::Graphics,
    };
    let vram = used.memory.get(&Region::Vram).copied();
    let system = used.memory.get(&Region::System).copied();
    let mut process = GpuProcess::new(pid, gpu_index, kind);
    process.gpu_memory_bytes = vram.or(system).map_or(Reading::NotSupported, Reading::Value);
    process.gpu_system_memory_bytes = system.map_or(Reading::NotSupported, Reading::Value);
    process.sm_percent = used
        .gpu_percent()
        .map_or(Reading::NotSupported, |p| Reading::Value(p.round() as u32));
    process.engines_percent = used
        .engines
        .iter()
        .map(|(engine, percent)| (*engine, (percent * 100.0).round() / 100.0))
        .collect();
    process
}

/// The busiest engine class's percent summed over processes (at most 100); `None` before
/// any client has a rate.
fn busiest_class(processes: &BTreeMap<u32, ProcessUse>) -> Option<f64> {
    let mut per_class: BTreeMap<Engine, f64> = BTreeMap::new();
    for used in processes.values() {
        for (class, percent) in &used.engines {
            *per_class.entry(*class).or_default() += percent;
        }
    }
    per_class.values().copied().reduce(f64::max).map(|p| p.min(100.0))
}

#[cfg(test)]
mod tests;

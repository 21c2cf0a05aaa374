//! NVML through nvml-wrapper: the only module (with its `raw` part) that names
//! `nvml_wrapper`.
//!
//! Static facts are read once per device; fast metrics every refresh; utilization and power
//! come from the driver's sample buffer since the previous read (means, peaks, and the latest
//! sample as the current value); PCIe throughput, which blocks in the driver, is read by its
//! own thread on a slower cadence.

mod events;
mod raw;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{
    Clock, ComputeMode, EccCounter, MemoryError, PcieUtilCounter, RetirementCause, Sampling,
    TemperatureSensor, TemperatureThreshold,
};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::{ProcessInfo, ProcessUtilizationSample, Sample};
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device as NvmlDevice, cuda_driver_version_major, cuda_driver_version_minor};
use nvml_wrapper_sys::bindings::nvmlDevice_t;

use super::{Activity, DriverInfo, Gauge, Reach, Readout, Window};
use crate::model::{
    Bar1, Device, DeviceStatus, GpuProcess, HostFacts, Memory, MigDevice, MigId, NvLink, ProcessType,
    Reading, RemappedRows, RetiredPages, Vendor,
};

/// A device sample as the driver gave it, stamped on the driver's own clock: what
/// `gputop capture` keeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RawSample {
    /// The GPU's index.
    pub gpu: u32,
    /// Which buffer.
    pub metric: SampledMetric,
    /// The driver's timestamp, microseconds.
    pub timestamp_us: u64,
    /// The value, in the buffer's unit.
    pub value: f64,
}

/// The sample buffers gputop reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampledMetric {
    /// GPU utilization, percent.
    GpuUtilization,
    /// Memory utilization, percent.
    MemoryUtilization,
    /// Power draw, milliwatts.
    PowerMilliwatts,
}

/// What a capture says about the driver beyond its versions: the calls gputop uses that it
/// does not export, and the size of its `_v3` process entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverExports {
    /// The NVML functions gputop calls that the library does not export.
    pub absent: Vec<&'static str>,
    /// The size of a `_v3` process entry, where the library has the `_v3` calls.
    pub v3_entry_bytes: Option<usize>,
}

/// Why NVML cannot be used at all; each maps to its own exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NvmlUnusable {
    /// The library could not be loaded (missing, wrong architecture, no `nvmlInit_v2`).
    LibraryMissing(String),
    /// No NVIDIA kernel driver is loaded.
    DriverNotLoaded,
    /// The NVML library and the kernel driver are of different versions.
    DriverLibraryMismatch,
    /// The user may not open the GPUs' device files.
    NoPermission,
    /// NVML found no GPU.
    NoGpu,
    /// Another error, as NVML names it.
    Other(String),
}

/// What the messages below suggest where no GPU can be read.
const TRY_DEMO: &str = "to try gputop without a GPU, run `gputop --demo`";

/// What is wrong and what to do, in one line (gputop prints it as its error).
impl std::fmt::Display for NvmlUnusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::LibraryMissing(detail) => write!(
                f,
                "cannot load the NVIDIA management library ({detail}); install the NVIDIA driver or \
                 point --nvml-lib at libnvidia-ml.so.1; {TRY_DEMO}"
            ),
            Self::DriverNotLoaded => write!(
                f,
                "the NVIDIA driver is not loaded (NVML: Driver Not Loaded); load it (`modprobe nvidia`, \
                 or reboot after installing it); {TRY_DEMO}"
            ),
            Self::DriverLibraryMismatch => write!(
                f,
                "the NVIDIA kernel driver and libnvidia-ml.so.1 are different versions (usually after a \
                 driver upgrade); reboot or reload the nvidia kernel modules, or point --nvml-lib at the \
                 library that matches the driver"
            ),
            Self::NoPermission => write!(
                f,
                "no permission to use the GPUs through NVML; check access to /dev/nvidia* (your user's \
                 groups, or the container's device settings)"
            ),
            Self::NoGpu => {
                write!(
                    f,
                    "NVML found no NVIDIA GPU on this machine (check `nvidia-smi`); {TRY_DEMO}"
                )
            }
            Self::Other(detail) => {
                write!(f, "NVML failed to initialise: {detail}; {TRY_DEMO}")
            }
        }
    }
}

impl std::error::Error for NvmlUnusable {}

/// A driver that lacks a symbol behaves as if the metric is not supported.
fn is_missing(error: &NvmlError) -> bool {
    matches!(
        error,
        NvmlError::NotSupported | NvmlError::FunctionNotFound | NvmlError::FailedToLoadSymbol(_)
    )
}

fn reading<T>(result: Result<T, NvmlError>) -> Reading<T> {
    match result {
        Ok(value) => Reading::Value(value),
        Err(error) => unread(&error),
    }
}

/// What a reading the driver did not give is: not supported, or failed with the reason.
fn unread<T>(error: &NvmlError) -> Reading<T> {
    if is_missing(error) {
        Reading::NotSupported
    } else {
        Reading::Failed(error.to_string())
    }
}

/// Facts that do not change while gputop runs; read once per device.
#[derive(Debug, Clone)]
struct StaticFacts {
    name: Reading<String>,
    uuid: Reading<String>,
    pci_bus_id: Reading<String>,
    temperature_slowdown: Reading<u32>,
    temperature_shutdown: Reading<u32>,
    /// Graphics, SM, memory and video.
    max_clocks: [Reading<u32>; 4],
    max_link_generation: Reading<u32>,
    max_link_width: Reading<u32>,
    fan_count: Reading<u32>,
}

impl StaticFacts {
    fn read(device: &NvmlDevice<'_>) -> Self {
        let max_clock = |clock| reading(device.max_clock_info(clock));
        Self {
            name: reading(device.name()),
            uuid: reading(device.uuid()),
            pci_bus_id: reading(device.pci_info().map(|p| p.bus_id)),
            temperature_slowdown: reading(device.temperature_threshold(TemperatureThreshold::Slowdown)),
            temperature_shutdown: reading(device.temperature_threshold(TemperatureThreshold::Shutdown)),
            max_clocks: [Clock::Graphics, Clock::SM, Clock::Memory, Clock::Video].map(max_clock),
            max_link_generation: reading(device.max_pcie_link_gen()),
            max_link_width: reading(device.max_pcie_link_width()),
            fan_count: reading(device.num_fans()),
        }
    }
}

/// PCIe throughput of one device, as the slow thread last read it.
#[derive(Debug, Clone)]
struct PcieThroughput {
    tx_kbps: Reading<u32>,
    rx_kbps: Reading<u32>,
}

/// How often readings that change rarely are read again (power limits, ECC, modes, PCIe
/// link, BAR1, encoder/decoder, energy, graphics and video clocks): read
/// every refresh they would be more than half of gputop's NVML calls.
pub const SLOW_INTERVAL: Duration = Duration::from_secs(10);

/// How often NVLink state and error counters are read again: five calls a link, up to 18
/// links a GPU, would otherwise be most of the slow readings' calls.
pub const NVLINK_INTERVAL: Duration = Duration::from_secs(60);

/// A GPU's NVLinks: each link's state, and the data link error counters of those that are
/// up; NOT_SUPPORTED on a board without NVLink. Links are asked by number until the driver
/// says there is no such link.
fn read_nvlinks(device: &NvmlDevice<'_>) -> Reading<Vec<NvLink>> {
    use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
    let mut links = Vec::new();
    // NVML_NVLINK_MAX_LINKS is 18; room for more.
    for link in 0..32 {
        let wrapper = device.link_wrapper_for(link);
        let active = match wrapper.is_active() {
            Ok(active) => active,
            // Past the last link: INVALID_ARGUMENT (NOT_SUPPORTED on some boards).
            Err(NvmlError::InvalidArg | NvmlError::NotSupported) if link > 0 => break,
            Err(error) => return reading(Err(error)),
        };
        // A counter the driver does not keep is unknown, never 0.
        let count = |counter| active.then(|| wrapper.error_counter(counter).ok()).flatten();
        links.push(NvLink {
            link,
            active,
            replay_errors: count(ErrorCounter::DlReplay),
            recovery_errors: count(ErrorCounter::DlRecovery),
            crc_flit_errors: count(ErrorCounter::DlCrcFlit),
            crc_data_errors: count(ErrorCounter::DlCrcData),
        });
    }
    Reading::Value(links)
}

/// The rarely changing readings of one device, and when they were read.
#[derive(Debug, Clone)]
struct SlowFacts {
    read_at: Instant,
    bar1: Reading<Bar1>,
    power_limit_mw: Reading<u32>,
    power_enforced_limit_mw: Reading<u32>,
    energy_mj: Reading<u64>,
    graphics_clock: Reading<u32>,
    video_clock: Reading<u32>,
    memory_clock: Reading<u32>,
    link_generation: Reading<u32>,
    link_width: Reading<u32>,
    encoder: Reading<u32>,
    decoder: Reading<u32>,
    ecc_enabled: Reading<bool>,
    ecc_uncorrected_volatile: Reading<u64>,
    remapped_rows: Reading<RemappedRows>,
    retired_pages: Reading<RetiredPages>,
    /// Read every [`NVLINK_INTERVAL`] (up to 18 links, five calls each): when, and what.
    nvlinks: (Instant, Reading<Vec<NvLink>>),
    compute_mode: Reading<String>,
    persistence_mode: Reading<bool>,
    mig_enabled: Reading<bool>,
    /// With MIG enabled: its MIG devices, found again every SLOW_INTERVAL.
    mig_devices: Vec<MigHandle>,
}

/// A MIG device found on a GPU: its handle and what does not change.
#[derive(Debug, Clone)]
struct MigHandle {
    handle: Handle,
    id: MigId,
    profile: Reading<String>,
    uuid: Reading<String>,
}

/// A MIG device's GPU and compute instance: NVML calls nvml-wrapper does not wrap.
fn mig_id(device: &NvmlDevice<'_>) -> Option<MigId> {
    let lib = device.nvml().lib();
    let (Ok(gpu_instance_of), Ok(compute_instance_of)) = (
        lib.nvmlDeviceGetGpuInstanceId.as_ref(),
        lib.nvmlDeviceGetComputeInstanceId.as_ref(),
    ) else {
        return None;
    };
    let (mut gpu_instance, mut compute_instance) = (0, 0);
    // SAFETY: a valid MIG device handle from this library, and pointers to two u32s.
    let ok = unsafe {
        gpu_instance_of(device.handle(), &mut gpu_instance) == 0
            && compute_instance_of(device.handle(), &mut compute_instance) == 0
    };
    ok.then_some(MigId {
        gpu_instance,
        compute_instance,
    })
}

/// The MIG devices of a MIG-enabled GPU (empty slots skipped).
fn find_mig_devices(device: &NvmlDevice<'_>) -> Vec<MigHandle> {
    let Ok(slots) = device.mig_device_count() else {
        return Vec::new();
    };
    (0..slots)
        .filter_map(|slot| device.mig_device_by_index(slot).ok())
        .filter_map(|mig| {
            let id = mig_id(&mig)?;
            // Real drivers name a MIG device "<GPU name> MIG <profile>".
            let profile = reading(mig.name()).map(|name| {
                name.rsplit_once(" MIG ")
                    .map_or(name.clone(), |(_, profile)| profile.to_string())
            });
            Some(MigHandle {
                // SAFETY: reading the raw handle has no preconditions.
                handle: Handle(unsafe { mig.handle() }),
                id,
                profile,
                uuid: reading(mig.uuid()),
            })
        })
        .collect()
}

/// Each MIG device's memory (and utilization, where the driver gives it), read now.
fn read_mig_devices(device: &NvmlDevice<'_>, found: &[MigHandle]) -> Vec<MigDevice> {
    found
        .iter()
        .map(|m| {
            // SAFETY: the handle came from this library, which is still initialised.
            let mig = unsafe { NvmlDevice::new(m.handle.0, device.nvml()) };
            let mut read = MigDevice {
                profile: m.profile.clone(),
                uuid: m.uuid.clone(),
                utilization_gpu_percent: reading(mig.utilization_rates().map(|u| u.gpu)),
                ..MigDevice::new(m.id)
            };
            read.set_memory(reading(mig.memory_info().map(|memory| Memory {
                total: memory.total,
                used: memory.used,
                free: memory.free,
                reserved: memory.reserved,
            })));
            read
        })
        .collect()
}

impl SlowFacts {
    /// Reads them again, with the NVLinks `kept` when they are recent enough.
    fn read(device: &NvmlDevice<'_>, kept: Option<(Instant, Reading<Vec<NvLink>>)>) -> Self {
        let ecc_enabled = reading(device.is_ecc_enabled().map(|e| e.currently_enabled));
        let mig_enabled = reading(device.mig_mode().map(|m| m.current == 1));
        let ecc_uncorrected_volatile = match ecc_enabled {
            Reading::Value(true) => {
                reading(device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile))
            }
            Reading::Value(false) => Reading::NotSupported,
            ref other => other.clone().map(|_| 0),
        };
        Self {
            read_at: Instant::now(),
            bar1: reading(device.bar1_memory_info().map(|b| Bar1 {
                total: b.total,
                used: b.used,
            })),
            power_limit_mw: reading(device.power_management_limit()),
            power_enforced_limit_mw: reading(device.enforced_power_limit()),
            energy_mj: reading(device.total_energy_consumption()),
            graphics_clock: reading(device.clock_info(Clock::Graphics)),
            video_clock: reading(device.clock_info(Clock::Video)),
            memory_clock: reading(device.clock_info(Clock::Memory)),
            link_generation: reading(device.current_pcie_link_gen()),
            link_width: reading(device.current_pcie_link_width()),
            encoder: reading(device.encoder_utilization().map(|u| u.utilization)),
            decoder: reading(device.decoder_utilization().map(|u| u.utilization)),
            ecc_enabled,
            ecc_uncorrected_volatile,
            nvlinks: kept.unwrap_or_else(|| (Instant::now(), read_nvlinks(device))),
            remapped_rows: reading(raw::remapped_rows(device)),
            retired_pages: reading((|| {
                let pages = |cause| device.retired_pages(cause).map(|p| p.len() as u32);
                Ok(RetiredPages {
                    single_bit: pages(RetirementCause::MultipleSingleBitEccErrors)?,
                    double_bit: pages(RetirementCause::DoubleBitEccError)?,
                })
            })()),
            compute_mode: reading(device.compute_mode().map(|mode| {
                match mode {
                    ComputeMode::Default => "default",
                    ComputeMode::ExclusiveThread => "exclusive_thread",
                    ComputeMode::Prohibited => "prohibited",
                    ComputeMode::ExclusiveProcess => "exclusive_process",
                }
                .to_string()
            })),
            persistence_mode: reading(device.is_in_persistent_mode()),
            mig_enabled: mig_enabled.clone(),
            mig_devices: match mig_enabled {
                Reading::Value(true) => find_mig_devices(device),
                _ => Vec::new(),
            },
        }
    }
}

/// How long the newest sample of a buffer stays the current reading when no newer one has
/// come: the longest sample period (1/6 s to 1 s depending on the product, NVML docs).
const SAMPLE_HOLD: Duration = Duration::from_secs(1);

/// What was read of one sample buffer: the newest timestamp consumed, and the last window
/// and newest value, with when they were read.
#[derive(Debug, Clone, Copy, Default)]
struct SampleMark {
    watermark: u64,
    held: Option<(Instant, Window, f64)>,
}

/// Per-device read state: what was read of each sample buffer, the newest process sample
/// timestamp consumed, and the buffers NVML answers into.
#[derive(Debug, Clone, Default)]
struct Watermarks {
    gpu_util: SampleMark,
    memory_util: SampleMark,
    power: SampleMark,
    processes: u64,
    buffers: raw::Buffers,
}

/// A device handle kept between refreshes.
#[derive(Debug, Clone, Copy)]
struct Handle(nvmlDevice_t);

// SAFETY: an NVML device handle is an opaque identifier that NVML (thread-safe) accepts
// from any thread; gputop never dereferences it.
unsafe impl Send for Handle {}

/// An open NVML library and what gputop remembers between reads.
pub struct NvmlSource {
    nvml: Arc<Nvml>,
    /// Driver, NVML and CUDA versions: read once at open.
    driver: DriverInfo,
    device_count: u32,
    statics: Vec<Option<StaticFacts>>,
    slow: Vec<Option<SlowFacts>>,
    /// Device handles, valid for as long as NVML is initialised: asked for once.
    handles: Vec<Option<Handle>>,
    watermarks: Vec<Watermarks>,
    /// The process-list calls this driver has and the layout they write.
    process_api: raw::ProcessApi,
    /// The call under way, for readers to name when data grows old.
    activity: Activity,
    /// Every device sample read, while `gputop capture` asks for them.
    sample_log: Option<RefCell<Vec<RawSample>>>,
    pcie: Option<Arc<Mutex<Vec<PcieThroughput>>>>,
    /// Each GPU's Xid errors, while the event thread watches them.
    xids: Option<events::XidLog>,
    /// Processes at the last read.
    process_count: usize,
    /// Dropping them stops the PCIe and the event threads.
    _stop: Vec<Sender<()>>,
}

impl std::fmt::Debug for NvmlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlSource")
            .field("device_count", &self.device_count)
            .finish()
    }
}

/// The drivers whose `_v3` process calls write 32-byte entries (with
/// `usedGpuCcProtectedMemory`) under the same name: 535.43.02 up to 535.98.
const CC_LAYOUT_DRIVERS: ((u32, u32, u32), (u32, u32, u32)) = ((535, 43, 2), (535, 98, 0));

/// `"535.54.03"` as numbers; missing parts read as 0. The simulator has its own reading of
/// the same table on purpose: the client's beliefs about drivers must be tested against the
/// simulator's, not shared with them.
fn driver_version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.trim().split('.').map(|part| {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u32>().ok()
    });
    let major = parts.next()??;
    Some((
        major,
        parts.next().flatten().unwrap_or(0),
        parts.next().flatten().unwrap_or(0),
    ))
}

/// The newest process-list calls the driver exports and the entry size they write, as
/// nvitop decides it: 32-byte `_v3` entries on the drivers of [`CC_LAYOUT_DRIVERS`], or
/// where the driver exports `nvmlDeviceGetConfComputeMemSizeInfo` but not yet
/// `nvmlDeviceGetRunningProcessDetailList` (which came with the fix).
fn process_api(version: &Reading<String>, nvml: &Nvml) -> raw::ProcessApi {
    let lib = nvml.lib();
    if lib.nvmlDeviceGetComputeRunningProcesses_v3.is_ok() {
        let (first, fixed) = CC_LAYOUT_DRIVERS;
        let by_version = version
            .value()
            .and_then(|v| driver_version(v))
            .is_some_and(|v| first <= v && v < fixed);
        let by_symbols = lib.nvmlDeviceGetConfComputeMemSizeInfo.is_ok()
            && lib.nvmlDeviceGetRunningProcessDetailList.is_err();
        let entry_bytes = if by_version || by_symbols { 32 } else { 24 };
        raw::ProcessApi::V3 { entry_bytes }
    } else if lib.nvmlDeviceGetComputeRunningProcesses_v2.is_ok() {
        raw::ProcessApi::V2
    } else {
        raw::ProcessApi::V1
    }
}

impl NvmlSource {
    /// Loads and initialises NVML from `library` (default: `libnvidia-ml.so.1` on the loader path).
    pub fn open(library: Option<&Path>) -> Result<Self, NvmlUnusable> {
        let mut builder = Nvml::builder();
        if let Some(path) = library {
            builder.lib_path(OsStr::new(path));
        }
        let nvml = builder.init().map_err(|error| match error {
            NvmlError::LibloadingError(e) => NvmlUnusable::LibraryMissing(e.to_string()),
            NvmlError::FailedToLoadSymbol(e) => NvmlUnusable::LibraryMissing(e),
            NvmlError::LibraryNotFound => NvmlUnusable::LibraryMissing("libnvidia-ml.so.1 not found".into()),
            NvmlError::DriverNotLoaded => NvmlUnusable::DriverNotLoaded,
            NvmlError::LibRmVersionMismatch => NvmlUnusable::DriverLibraryMismatch,
            NvmlError::NoPermission => NvmlUnusable::NoPermission,
            other => NvmlUnusable::Other(other.to_string()),
        })?;
        let device_count = match nvml.device_count() {
            Ok(0) => return Err(NvmlUnusable::NoGpu),
            Ok(n) => n,
            Err(NvmlError::NoPermission) => return Err(NvmlUnusable::NoPermission),
            Err(e) => return Err(NvmlUnusable::Other(e.to_string())),
        };
        let count = device_count as usize;
        let driver = DriverInfo {
            driver_version: reading(nvml.sys_driver_version()),
            nvml_version: reading(nvml.sys_nvml_version()),
            cuda_driver_version: reading(nvml.sys_cuda_driver_version()).map(|v| {
                format!(
                    "{}.{}",
                    cuda_driver_version_major(v),
                    cuda_driver_version_minor(v)
                )
            }),
        };
        let process_api = process_api(&driver.driver_version, &nvml);
        Ok(Self {
            nvml: Arc::new(nvml),
            driver,
            device_count,
            statics: vec![None; count],
            slow: vec![None; count],
            handles: vec![None; count],
            watermarks: vec![Watermarks::default(); count],
            process_api,
            activity: Activity::default(),
            sample_log: None,
            pcie: None,
            xids: None,
            process_count: 0,
            _stop: Vec::new(),
        })
    }

    /// Keeps every device sample read from now on, for [`NvmlSource::take_samples`].
    pub fn log_samples(&mut self) {
        self.sample_log.get_or_insert_with(RefCell::default);
    }

    /// The samples kept since the last call.
    pub fn take_samples(&mut self) -> Vec<RawSample> {
        self.sample_log.as_ref().map(RefCell::take).unwrap_or_default()
    }

    /// The calls gputop uses that this driver lacks, and its `_v3` entry size.
    pub fn exports(&self) -> DriverExports {
        let lib = self.nvml.lib();
        // Each call gputop uses that drivers gained over time, by its name in the bindings.
        macro_rules! exported {
            ($($name:ident),* $(,)?) => { [$((stringify!($name), lib.$name.is_ok())),*] };
        }
        let used = exported![
            nvmlDeviceGetMemoryInfo_v2,
            nvmlDeviceGetComputeRunningProcesses_v3,
            nvmlDeviceGetGraphicsRunningProcesses_v3,
            nvmlDeviceGetMPSComputeRunningProcesses_v3,
            nvmlDeviceGetComputeRunningProcesses_v2,
            nvmlDeviceGetGraphicsRunningProcesses_v2,
            nvmlDeviceGetMPSComputeRunningProcesses_v2,
            nvmlDeviceGetConfComputeMemSizeInfo,
            nvmlDeviceGetRunningProcessDetailList,
            nvmlDeviceGetProcessesUtilizationInfo,
            nvmlDeviceGetProcessUtilization,
            nvmlDeviceGetSamples,
            nvmlDeviceGetTotalEnergyConsumption,
        ];
        DriverExports {
            absent: used
                .iter()
                .filter(|(_, found)| !found)
                .map(|(name, _)| *name)
                .collect(),
            v3_entry_bytes: match self.process_api {
                raw::ProcessApi::V3 { entry_bytes } => Some(entry_bytes),
                _ => None,
            },
        }
    }

    /// Where this source says which call it is waiting on.
    pub fn activity(&self) -> Activity {
        self.activity.clone()
    }

    /// Starts what a reader that runs for long watches beside its reads: a thread reading
    /// PCIe throughput every `pcie_interval` (each read blocks about 20 ms), and one counting
    /// Xid errors from the driver's events.
    pub fn start_threads(&mut self, pcie_interval: Duration) {
        let shared = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = mpsc::channel();
        let nvml = Arc::clone(&self.nvml);
        let count = self.device_count;
        let sink = Arc::clone(&shared);
        let spawned = thread::Builder::new()
            .name("gputop-pcie".into())
            .spawn(move || pcie_loop(&nvml, count, &sink, pcie_interval, &stopped));
        if spawned.is_ok() {
            self.pcie = Some(shared);
            self._stop.push(stop);
        }
        if let Some((log, stop)) = events::spawn(Arc::clone(&self.nvml), self.device_count) {
            self.xids = Some(log);
            self._stop.push(stop);
        }
    }

    /// Reads one gauge of `device` again; nothing when its GPU has not answered a reading
    /// yet, or it fails now (the failure is the reading).
    pub(crate) fn refresh(&mut self, device: &mut Device, gauge: Gauge, window: Duration) {
        let slot = device.index as usize;
        let (Some(Some(Handle(handle))), Some(Some(statics))) =
            (self.handles.get(slot).copied(), self.statics.get(slot))
        else {
            return;
        };
        // SAFETY: the handle came from nvmlDeviceGetHandleByIndex on this same, still
        // initialised, library; NVML handles stay valid until shutdown.
        let nvml_device = unsafe { NvmlDevice::new(handle, &self.nvml) };
        let marks = &mut self.watermarks[slot];
        let pass = Pass {
            window,
            activity: &self.activity,
            sample_log: self.sample_log.as_ref(),
        };
        match gauge {
            Gauge::Memory => device.set_memory(reading(memory_info(&nvml_device))),
            Gauge::GpuUtilization => {
                let (now, window) = read_sampled(
                    &nvml_device,
                    device.index,
                    SampledMetric::GpuUtilization,
                    marks,
                    &pass,
                );
                device.utilization_gpu_percent = now;
                device.utilization_gpu_mean_percent = window.part(|w| w.mean);
                device.utilization_gpu_peak_percent = window.part(|w| w.peak);
            }
            Gauge::Utilization => {
                let utilization = read_utilization(&nvml_device, device.index, marks, &pass);
                device.utilization_gpu_percent = utilization.gpu;
                device.utilization_memory_percent = utilization.memory;
                device.utilization_gpu_mean_percent = utilization.gpu_window.part(|w| w.mean);
                device.utilization_gpu_peak_percent = utilization.gpu_window.part(|w| w.peak);
                device.utilization_memory_mean_percent = utilization.memory_window.part(|w| w.mean);
                device.utilization_memory_peak_percent = utilization.memory_window.part(|w| w.peak);
            }
            Gauge::Temperature => {
                device.temperature_celsius = reading(nvml_device.temperature(TemperatureSensor::Gpu));
            }
            Gauge::Power => {
                let (now, window) = read_sampled(
                    &nvml_device,
                    device.index,
                    SampledMetric::PowerMilliwatts,
                    marks,
                    &pass,
                );
                device.power_usage_watts = now.part(|mw| f64::from(*mw) / 1000.0);
                device.power_usage_mean_watts = window.part(|w| w.mean / 1000.0);
                device.power_usage_peak_watts = window.part(|w| w.peak / 1000.0);
            }
            Gauge::FanSpeeds => device.set_fan_speeds(read_fans(&nvml_device, statics)),
            Gauge::Energy => {
                device.energy_joules =
                    reading(nvml_device.total_energy_consumption()).part(|mj| *mj as f64 / 1000.0);
            }
        }
        self.activity.clear();
    }

    /// One reading of every GPU and their processes.
    pub fn read(&mut self, window: Duration) -> Readout {
        self.read_reaching(window, Reach::Processes)
    }

    /// One reading of every GPU, and of their processes when `reach` says so.
    pub(crate) fn read_reaching(&mut self, window: Duration, reach: Reach) -> Readout {
        let nvml = Arc::clone(&self.nvml);
        let driver = self.driver.clone();
        let pcie = self
            .pcie
            .as_ref()
            .map(|shared| shared.lock().unwrap_or_else(|e| e.into_inner()).clone());
        let mut devices = Vec::with_capacity(self.device_count as usize);
        // Sized as the last read's list: growing it would copy every process several times.
        let mut processes = Vec::with_capacity(self.process_count);
        let activity = self.activity.clone();
        for index in 0..self.device_count {
            let slot = index as usize;
            activity.set("nvmlDeviceGetHandleByIndex", Some(index));
            let device = match self.handles[slot] {
                // SAFETY: the handle came from nvmlDeviceGetHandleByIndex on this same, still
                // initialised, library; NVML handles stay valid until shutdown.
                Some(Handle(handle)) => unsafe { NvmlDevice::new(handle, &nvml) },
                None => match nvml.device_by_index(index) {
                    Ok(device) => {
                        // SAFETY: reading the raw handle has no preconditions.
                        self.handles[slot] = Some(Handle(unsafe { device.handle() }));
                        device
                    }
                    Err(error) => {
                        devices.push(unavailable(index, &error, self.statics[slot].as_ref()));
                        continue;
                    }
                },
            };
            activity.set("static facts (name, UUID, PCI, limits)", Some(index));
            let statics = self.statics[slot]
                .get_or_insert_with(|| StaticFacts::read(&device))
                .clone();
            let throughput = match &pcie {
                Some(all) => all.get(slot).cloned().unwrap_or(PcieThroughput {
                    tx_kbps: Reading::Failed("not sampled yet".into()),
                    rx_kbps: Reading::Failed("not sampled yet".into()),
                }),
                None => PcieThroughput {
                    tx_kbps: Reading::Failed("PCIe throughput is sampled only in live mode".into()),
                    rx_kbps: Reading::Failed("PCIe throughput is sampled only in live mode".into()),
                },
            };
            let marks = &mut self.watermarks[slot];
            let slow = &mut self.slow[slot];
            let pass = Pass {
                window,
                activity: &activity,
                sample_log: self.sample_log.as_ref(),
            };
            match read_device(&device, index, &statics, slow, throughput, marks, &pass) {
                Ok(read) => devices.push(read),
                Err(error) => {
                    devices.push(unavailable(index, &error, Some(&statics)));
                    continue;
                }
            }
            if reach == Reach::Devices {
                continue;
            }
            let (listed, unlisted) =
                read_processes(&device, index, &statics.uuid, &mut self.process_api, marks, &pass);
            processes.extend(listed);
            if let Some(read) = devices.last_mut() {
                read.process_list_error = unlisted;
            }
        }
        activity.clear();
        for device in &mut devices {
            device.driver_version = driver.driver_version.clone();
        }
        self.process_count = processes.len();
        if let Some(log) = &self.xids {
            let log = log.lock().unwrap_or_else(|e| e.into_inner());
            for device in devices.iter_mut().filter(|d| d.is_ok()) {
                if let Some(counted) = log.get(device.index as usize) {
                    device.set_xid_errors(counted);
                }
            }
        }
        Readout {
            driver,
            devices,
            processes,
            host_known: false,
            hidden_processes: 0,
        }
    }
}

/// Why a reader without the event thread (a one-shot, a single reading) has no Xid errors.
const NOT_WATCHED: &str =
    "Xid errors are counted only while gputop watches the driver's events (the view, the exporter)";

/// What every device's read in one pass shares: how far back windows reach, and where
/// the call under way is noted.
struct Pass<'a> {
    window: Duration,
    activity: &'a Activity,
    sample_log: Option<&'a RefCell<Vec<RawSample>>>,
}

/// A device that does not answer; its identity is kept when it was read before, so the
/// What a GPU answers through NVML's field values, in one call: the memory's temperature
/// (`NVML_FI_DEV_MEMORY_TEMP`: HBM boards answer, GDDR boards say not supported) and the
/// power draw at this instant (`NVML_FI_DEV_POWER_INSTANT`, milliwatts; the power usage call
/// averages over a second on Ampere, but GA100, and newer).
struct FieldValues {
    memory_temperature: Reading<u32>,
    power_instant_milliwatts: Reading<f64>,
}

fn field_values(device: &NvmlDevice<'_>) -> FieldValues {
    use nvml_wrapper_sys::bindings::field_id::{NVML_FI_DEV_MEMORY_TEMP, NVML_FI_DEV_POWER_INSTANT};
    let number = |value: SampleValue| match value {
        SampleValue::U32(v) => f64::from(v),
        SampleValue::U64(v) => v as f64,
        SampleValue::I64(v) => v as f64,
        SampleValue::F64(v) => v,
    };
    let fields = [
        FieldId(NVML_FI_DEV_MEMORY_TEMP),
        FieldId(NVML_FI_DEV_POWER_INSTANT),
    ];
    let mut answers: Vec<Reading<f64>> = match device.field_values_for(&fields) {
        Ok(samples) => samples
            .into_iter()
            .map(|sample| reading(sample.and_then(|s| s.value)).map(number))
            .collect(),
        Err(error) => vec![reading::<f64>(Err(error)); fields.len()],
    };
    answers.resize(fields.len(), Reading::NotSupported);
    let measure = |r: Reading<f64>| match r {
        Reading::Value(v) if !v.is_finite() || v < 0.0 => Reading::NotSupported,
        other => other,
    };
    let power = measure(answers.pop().unwrap_or_default());
    let memory = measure(answers.pop().unwrap_or_default());
    FieldValues {
        memory_temperature: memory.map(|c| c.min(f64::from(u32::MAX)) as u32),
        power_instant_milliwatts: power,
    }
}

/// user can tell which GPU is gone.
fn unavailable(index: u32, error: &NvmlError, known: Option<&StaticFacts>) -> Device {
    let reason = error.to_string();
    let (status, status_reason) = match error {
        NvmlError::GpuLost => (DeviceStatus::Lost, reason.clone()),
        // What a GPU that fell off the bus (Xid 79) often answers for its handle, and every
        // call in a container whose devices a host daemon-reload took away.
        NvmlError::Unknown => (
            DeviceStatus::Lost,
            format!(
                "{reason} for the GPU's handle: fallen off the bus (Xid 79), or in a container \
                 that lost its devices (restart the container)"
            ),
        ),
        _ => (DeviceStatus::Error, reason.clone()),
    };
    let mut device = Device::unavailable(index, status, &reason);
    device.status_reason = Some(status_reason);
    if let Some(facts) = known {
        device.name = facts.name.clone();
        device.uuid = facts.uuid.clone();
        device.pci_bus_id = facts.pci_bus_id.clone();
    }
    device
}

fn pcie_loop(
    nvml: &Nvml,
    count: u32,
    sink: &Mutex<Vec<PcieThroughput>>,
    interval: Duration,
    stopped: &Receiver<()>,
) {
    // Handles stay valid while NVML is initialised: asked for once each.
    let mut handles: Vec<Option<Handle>> = vec![None; count as usize];
    loop {
        let readings: Vec<PcieThroughput> = (0..count)
            .map(|index| {
                let device = match handles[index as usize] {
                    // SAFETY: the handle came from this library, still initialised.
                    Some(Handle(handle)) => Ok(unsafe { NvmlDevice::new(handle, nvml) }),
                    None => nvml.device_by_index(index).inspect(|device| {
                        // SAFETY: reading the raw handle has no preconditions.
                        handles[index as usize] = Some(Handle(unsafe { device.handle() }));
                    }),
                };
                match device {
                    Ok(device) => PcieThroughput {
                        tx_kbps: reading(device.pcie_throughput(PcieUtilCounter::Send)),
                        rx_kbps: reading(device.pcie_throughput(PcieUtilCounter::Receive)),
                    },
                    Err(error) => PcieThroughput {
                        tx_kbps: Reading::Failed(error.to_string()),
                        rx_kbps: Reading::Failed(error.to_string()),
                    },
                }
            })
            .collect();
        *sink.lock().unwrap_or_else(|e| e.into_inner()) = readings;
        match stopped.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

/// Mean and peak of the driver's samples of the last `window`, and the newest sample's
/// value (the current reading); `None` when the buffer holds no new sample, as an idle GPU's
/// runs dry. Driver stamps are on the driver's own clock (boot time on Linux), so they are
/// never compared with the host's: the first read asks for all (0), later ones for samples
/// newer than the newest stamp given, and the window is cut back from the newest sample.
/// The samples newer than `mark`'s watermark: their window and the newest value. With none,
/// the last ones read while they are younger than [`SAMPLE_HOLD`] (the samples are still
/// the current ones), else `None` (the buffer ran dry: an idle GPU).
fn sample_window(
    device: &NvmlDevice<'_>,
    key: (u32, SampledMetric),
    mark: &mut SampleMark,
    buffers: &mut raw::Buffers,
    pass: &Pass<'_>,
) -> Result<Option<(Window, f64)>, NvmlError> {
    let fresh = new_samples(device, key, &mut mark.watermark, buffers, pass)?;
    if let Some((window, newest)) = fresh {
        mark.held = Some((Instant::now(), window, newest));
        return Ok(fresh);
    }
    Ok(mark
        .held
        .filter(|(at, _, _)| at.elapsed() < SAMPLE_HOLD)
        .map(|(_, window, newest)| (window, newest)))
}

fn new_samples(
    device: &NvmlDevice<'_>,
    (index, metric): (u32, SampledMetric),
    watermark: &mut u64,
    buffers: &mut raw::Buffers,
    pass: &Pass<'_>,
) -> Result<Option<(Window, f64)>, NvmlError> {
    let sampling = match metric {
        SampledMetric::GpuUtilization => Sampling::GpuUtilization,
        SampledMetric::MemoryUtilization => Sampling::MemoryUtilization,
        SampledMetric::PowerMilliwatts => Sampling::Power,
    };
    let samples = match raw::samples(device, sampling, *watermark, buffers) {
        Err(NvmlError::NotFound) => return Ok(None),
        other => other?,
    };
    let value = |s: &Sample| match s.value {
        SampleValue::F64(v) => v,
        SampleValue::U32(v) => f64::from(v),
        SampleValue::U64(v) => v as f64,
        SampleValue::I64(v) => v as f64,
    };
    if let Some(log) = pass.sample_log {
        log.borrow_mut().extend(samples.iter().map(|s| RawSample {
            gpu: index,
            metric,
            timestamp_us: s.timestamp,
            value: value(s),
        }));
    }
    let window = pass.window;
    let Some(newest) = samples.iter().max_by_key(|s| s.timestamp) else {
        return Ok(None);
    };
    *watermark = newest.timestamp;
    let since = newest.timestamp.saturating_sub(window.as_micros() as u64);
    let values: Vec<f64> = samples
        .iter()
        .filter(|s| s.timestamp > since)
        .map(value)
        .collect();
    let window = Window {
        mean: values.iter().sum::<f64>() / values.len() as f64,
        peak: values.iter().copied().fold(f64::MIN, f64::max),
    };
    Ok(Some((window, value(newest))))
}

/// A metric's window: the samples' where the buffer had some, else the current reading
/// (mean and peak alike, from no samples), as an idle GPU's empty buffer means.
fn window_or_current(
    sampled: &Result<Option<(Window, f64)>, NvmlError>,
    current: &Reading<u32>,
) -> Reading<Window> {
    match sampled {
        Ok(Some((window, _))) => Reading::Value(*window),
        Ok(None) => current.clone().map(Window::current),
        Err(error) => unread(error),
    }
}

/// Memory through `_v2`, or the v1 call on drivers before R510.
fn memory_info(device: &NvmlDevice<'_>) -> Result<Memory, NvmlError> {
    match device.memory_info() {
        Err(error) if is_missing(&error) => raw::memory_v1(device).map(|(total, used, free)| Memory {
            total,
            used,
            free,
            reserved: 0,
        }),
        other => other.map(|m| Memory {
            total: m.total,
            used: m.used,
            free: m.free,
            reserved: m.reserved,
        }),
    }
}

/// A GPU's utilization now and over the window, from the driver's samples.
struct Utilization {
    gpu: Reading<u32>,
    memory: Reading<u32>,
    gpu_window: Reading<Window>,
    memory_window: Reading<Window>,
}

fn read_utilization(
    device: &NvmlDevice<'_>,
    index: u32,
    marks: &mut Watermarks,
    pass: &Pass<'_>,
) -> Utilization {
    let (gpu, gpu_window) = read_sampled(device, index, SampledMetric::GpuUtilization, marks, pass);
    let (memory, memory_window) = read_sampled(device, index, SampledMetric::MemoryUtilization, marks, pass);
    // Memory utilization is unknown for the reason GPU utilization is.
    let memory = match (&gpu, memory) {
        (Reading::NotSupported, _) => Reading::NotSupported,
        (Reading::Failed(reason), _) => Reading::Failed(reason.clone()),
        (_, value) => value,
    };
    Utilization {
        gpu,
        memory,
        gpu_window,
        memory_window,
    }
}

/// A sampled metric now (its newest sample, rounded; with none, the buffer dry, what the
/// driver answers directly: GetUtilizationRates, GetPowerUsage) and over the window.
fn read_sampled(
    device: &NvmlDevice<'_>,
    index: u32,
    metric: SampledMetric,
    marks: &mut Watermarks,
    pass: &Pass<'_>,
) -> (Reading<u32>, Reading<Window>) {
    let (mark, ceiling) = match metric {
        SampledMetric::GpuUtilization => (&mut marks.gpu_util, 100.0),
        SampledMetric::MemoryUtilization => (&mut marks.memory_util, 100.0),
        SampledMetric::PowerMilliwatts => (&mut marks.power, f64::from(u32::MAX)),
    };
    pass.activity.set("nvmlDeviceGetSamples", Some(index));
    let sampled = sample_window(device, (index, metric), mark, &mut marks.buffers, pass);
    let current = match &sampled {
        Ok(Some((_, newest))) => Reading::Value(newest.round().clamp(0.0, ceiling) as u32),
        _ => reading(match metric {
            SampledMetric::GpuUtilization => device.utilization_rates().map(|u| u.gpu),
            SampledMetric::MemoryUtilization => device.utilization_rates().map(|u| u.memory),
            SampledMetric::PowerMilliwatts => device.power_usage(),
        }),
    };
    let window = window_or_current(&sampled, &current);
    (current, window)
}

fn read_fans(device: &NvmlDevice<'_>, statics: &StaticFacts) -> Reading<Vec<u32>> {
    match &statics.fan_count {
        Reading::Value(count) => {
            let speeds: Result<Vec<u32>, NvmlError> = (0..*count).map(|fan| device.fan_speed(fan)).collect();
            reading(speeds)
        }
        Reading::NotSupported => Reading::NotSupported,
        Reading::Failed(reason) => Reading::Failed(reason.clone()),
    }
}

fn read_device(
    device: &NvmlDevice<'_>,
    index: u32,
    statics: &StaticFacts,
    slow: &mut Option<SlowFacts>,
    throughput: PcieThroughput,
    marks: &mut Watermarks,
    pass: &Pass<'_>,
) -> Result<Device, NvmlError> {
    let activity = pass.activity;
    let gpu = Some(index);
    activity.set("nvmlDeviceGetMemoryInfo", gpu);
    // The first call tells whether the device answers at all. UNKNOWN may fail this one
    // call (as memory in WSL) or the whole GPU (fallen off the bus): the handle call tells.
    let memory = match memory_info(device) {
        Err(error @ (NvmlError::GpuLost | NvmlError::ResetRequired)) => return Err(error),
        Err(NvmlError::Unknown) => match device.nvml().device_by_index(index) {
            Err(error @ (NvmlError::Unknown | NvmlError::GpuLost)) => return Err(error),
            _ => Reading::Failed(NvmlError::Unknown.to_string()),
        },
        other => reading(other),
    };
    let utilization = read_utilization(device, index, marks, pass);
    let clock = |clock| reading(device.clock_info(clock));
    if slow.as_ref().is_none_or(|s| s.read_at.elapsed() >= SLOW_INTERVAL) {
        activity.set("slow readings (power limits, ECC, modes, BAR1)", gpu);
        let kept = slow
            .take()
            .map(|s| s.nvlinks)
            .filter(|(at, _)| at.elapsed() < NVLINK_INTERVAL);
        *slow = Some(SlowFacts::read(device, kept));
    }
    let slow = slow.clone().expect("read above");
    activity.set("power, temperature, fans and clocks", gpu);
    let (power, power_window) = read_sampled(device, index, SampledMetric::PowerMilliwatts, marks, pass);
    let watts = |milliwatts: &u32| f64::from(*milliwatts) / 1000.0;
    let kilobytes = |kb: &u32| u64::from(*kb) * 1024;
    let fields = field_values(device);
    let mut read = Device {
        index,
        driver: Reading::Value("nvidia".into()),
        name: statics.name.clone(),
        uuid: statics.uuid.clone(),
        pci_bus_id: statics.pci_bus_id.clone(),
        status: DeviceStatus::Ok,
        status_reason: None,
        utilization_gpu_mean_percent: utilization.gpu_window.part(|w| w.mean),
        utilization_gpu_peak_percent: utilization.gpu_window.part(|w| w.peak),
        utilization_gpu_percent: utilization.gpu,
        utilization_memory_mean_percent: utilization.memory_window.part(|w| w.mean),
        utilization_memory_peak_percent: utilization.memory_window.part(|w| w.peak),
        utilization_memory_percent: utilization.memory,
        temperature_celsius: reading(device.temperature(TemperatureSensor::Gpu)),
        memory_temperature_celsius: fields.memory_temperature,
        power_instant_watts: fields.power_instant_milliwatts.map(|mw| mw / 1000.0),
        temperature_slowdown_celsius: statics.temperature_slowdown.clone(),
        temperature_shutdown_celsius: statics.temperature_shutdown.clone(),
        power_usage_watts: power.part(watts),
        power_usage_mean_watts: power_window.part(|w| w.mean / 1000.0),
        power_usage_peak_watts: power_window.part(|w| w.peak / 1000.0),
        power_limit_watts: slow.power_limit_mw.part(watts),
        power_enforced_limit_watts: slow.power_enforced_limit_mw.part(watts),
        energy_joules: slow.energy_mj.part(|mj| *mj as f64 / 1000.0),
        performance_state: reading(device.performance_state().map(|p| p.as_c())),
        clock_graphics_mhz: slow.graphics_clock,
        clock_sm_mhz: clock(Clock::SM),
        clock_memory_mhz: slow.memory_clock,
        clock_video_mhz: slow.video_clock,
        clock_max_graphics_mhz: statics.max_clocks[0].clone(),
        clock_max_sm_mhz: statics.max_clocks[1].clone(),
        clock_max_memory_mhz: statics.max_clocks[2].clone(),
        clock_max_video_mhz: statics.max_clocks[3].clone(),
        pcie_link_generation: slow.link_generation,
        pcie_link_width: slow.link_width,
        pcie_link_max_generation: statics.max_link_generation.clone(),
        pcie_link_max_width: statics.max_link_width.clone(),
        pcie_tx_bytes_per_second: throughput.tx_kbps.part(kilobytes),
        pcie_rx_bytes_per_second: throughput.rx_kbps.part(kilobytes),
        encoder_utilization_percent: slow.encoder,
        decoder_utilization_percent: slow.decoder,
        ecc_enabled: slow.ecc_enabled,
        ecc_uncorrected_volatile_errors: slow.ecc_uncorrected_volatile,
        nvlinks: slow.nvlinks.1,
        // Counted by the event thread, when one watches (see `start_threads`).
        xid_errors: Reading::failed(NOT_WATCHED),
        last_xid: None,
        last_critical_xid: None,
        compute_mode: slow.compute_mode,
        persistence_mode: slow.persistence_mode,
        mig_mode: slow.mig_enabled,
        // Every refresh: the exporter counts the seconds each reason holds the clocks down.
        throttle_reasons: reading(
            device
                .current_throttle_reasons()
                .map(|reasons| crate::model::clock_event_names(reasons.bits())),
        ),
        mig_devices: read_mig_devices(device, &slow.mig_devices),
        // The kubelet's, where there is one: the collector asks it.
        pods: Vec::new(),
        process_list_error: None,
        ..Device::new(index, Vendor::Nvidia)
    };
    read.set_memory(memory);
    read.set_bar1(slow.bar1);
    read.set_fan_speeds(read_fans(device, statics));
    read.set_remapped_rows(slow.remapped_rows);
    read.set_retired_pages(slow.retired_pages);
    Ok(read)
}

/// A process list through the newest API the driver has, stepping `api` down for good
/// when the driver turns out to lack it; a list the driver lacks altogether is empty.
fn process_list(
    device: &NvmlDevice<'_>,
    list: raw::ProcessList,
    api: &mut raw::ProcessApi,
    buffers: &mut raw::Buffers,
) -> Result<Vec<ProcessInfo>, NvmlError> {
    loop {
        match raw::processes(device, list, *api, buffers) {
            Err(error) if is_missing(&error) => match api.older() {
                // Only the compute list decides: a driver may lack just the MPS list.
                Some(older) if list == raw::ProcessList::Compute => *api = older,
                _ => return Ok(Vec::new()),
            },
            other => return other,
        }
    }
}

/// Whether a per-process utilization sample is one to count (nvtop's filter, go-nvml #51):
/// drivers pad answers with rows of PID 0, PIDs no list has, values far over 100 and
/// samples older than asked for.
fn is_valid_sample(sample: &ProcessUtilizationSample, watermark: u64, listed: &[GpuProcess]) -> bool {
    sample.pid != 0
        && sample.timestamp > watermark
        && [sample.sm_util, sample.mem_util, sample.enc_util, sample.dec_util]
            .iter()
            .all(|v| *v <= 100)
        && listed.iter().any(|p| p.pid == sample.pid)
}

/// Why a process list could not be read, in the user's words: on a MIG-enabled GPU the
/// driver lists processes of the whole GPU only to root (nvml.h; nvidia-container-toolkit
/// #842).
fn unlisted_reason(error: &NvmlError, mig_enabled: bool) -> String {
    match error {
        NvmlError::NoPermission if mig_enabled => "process list needs root on MIG GPUs".into(),
        NvmlError::NoPermission => "process list needs root".into(),
        other => format!("process list failed: {other}"),
    }
}

/// Compute, graphics and MPS lists merged by PID, with per-process utilization, and why
/// the lists could not be read, if they could not.
fn read_processes(
    device: &NvmlDevice<'_>,
    index: u32,
    uuid: &Reading<String>,
    api: &mut raw::ProcessApi,
    marks: &mut Watermarks,
    pass: &Pass<'_>,
) -> (Vec<GpuProcess>, Option<String>) {
    let (window, activity) = (pass.window, pass.activity);
    activity.set("nvmlDeviceGet*RunningProcesses", Some(index));
    let buffers = &mut marks.buffers;
    let compute = process_list(device, raw::ProcessList::Compute, api, buffers);
    let graphics = process_list(device, raw::ProcessList::Graphics, api, buffers);
    let mps = process_list(device, raw::ProcessList::Mps, api, buffers);
    let unlisted = [&compute, &graphics].into_iter().find_map(|list| {
        let error = list.as_ref().err()?;
        let mig_enabled = device.mig_mode().is_ok_and(|m| m.current == 1);
        Some(unlisted_reason(error, mig_enabled))
    });
    let listed = [&compute, &graphics, &mps]
        .iter()
        .map(|list| list.as_ref().map_or(0, Vec::len))
        .sum();
    let mut merged: Vec<GpuProcess> = Vec::with_capacity(listed);
    let lists = [
        (compute, ProcessType::Compute),
        (mps, ProcessType::Compute),
        (graphics, ProcessType::Graphics),
    ];
    for (list, kind) in lists {
        for info in list.unwrap_or_default() {
            let memory = match info.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Reading::Value(bytes),
                UsedGpuMemory::Unavailable => Reading::NotSupported,
            };
            match merged.iter_mut().find(|p| p.pid == info.pid) {
                Some(existing) => {
                    existing.kind = existing.kind.merge(kind);
                    if let (Some(a), Some(b)) = (existing.gpu_memory_bytes.get(), memory.get()) {
                        existing.gpu_memory_bytes = Reading::Value(a.max(b));
                    }
                }
                None => merged.push(GpuProcess {
                    pid: info.pid,
                    gpu_index: index,
                    gpu_uuid: uuid.clone(),
                    kind,
                    gpu_memory_bytes: memory,
                    gpu_system_memory_bytes: Reading::NotSupported,
                    sm_percent: Reading::Value(0),
                    engines_percent: BTreeMap::new(),
                    memory_bandwidth_percent: Reading::Value(0),
                    encoder_percent: Reading::Value(0),
                    decoder_percent: Reading::Value(0),
                    gpu_instance_id: info.gpu_instance_id,
                    compute_instance_id: info.compute_instance_id,
                    host: HostFacts::unread(info.pid),
                }),
            }
        }
    }
    if merged.is_empty() {
        return (merged, unlisted);
    }
    // Process samples carry Unix-time stamps on some drivers and not on others: as for
    // device samples, only the driver's own stamps are compared.
    activity.set("nvmlDeviceGetProcessUtilization", Some(index));
    match raw::process_utilization(device, marks.processes, &mut marks.buffers) {
        Ok(samples) => {
            let valid: Vec<&ProcessUtilizationSample> = samples
                .iter()
                .filter(|s| is_valid_sample(s, marks.processes, &merged))
                .collect();
            let Some(newest) = valid.iter().map(|s| s.timestamp).max() else {
                return (merged, unlisted);
            };
            marks.processes = newest;
            let since = newest.saturating_sub(window.as_micros() as u64);
            for process in &mut merged {
                let mine: Vec<&&ProcessUtilizationSample> = valid
                    .iter()
                    .filter(|s| s.pid == process.pid && s.timestamp > since)
                    .collect();
                if mine.is_empty() {
                    continue;
                }
                let mean = |f: fn(&ProcessUtilizationSample) -> u32| {
                    let sum: u64 = mine.iter().map(|s| u64::from(f(s))).sum();
                    Reading::Value((sum as f64 / mine.len() as f64).round() as u32)
                };
                process.sm_percent = mean(|s| s.sm_util);
                process.memory_bandwidth_percent = mean(|s| s.mem_util);
                process.encoder_percent = mean(|s| s.enc_util);
                process.decoder_percent = mean(|s| s.dec_util);
            }
        }
        // No sample newer than the watermark: no process ran kernels in the interval.
        Err(NvmlError::NotFound) => {}
        Err(error) => {
            let failed: Reading<u32> = reading(Err(error));
            for process in &mut merged {
                process.sm_percent = failed.clone();
                process.memory_bandwidth_percent = failed.clone();
                process.encoder_percent = failed.clone();
                process.decoder_percent = failed.clone();
            }
        }
    }
    (merged, unlisted)
}

//! The snapshot's one wire form: what `--once --json` prints, `/snapshot` serves, recordings
//! store and the remote view reads back. Units are in the key names; an unknown value is
//! `null`, whether unsupported or failed (a reading read back from the wire is then "not
//! supported": the reason a reading failed stays on the machine that read it).
//! `config/snapshot.schema.json` is generated from these types ([`json_schema`]);
//! [`VERSION`] changes with any change a reader would notice. A document from outside (a
//! remote node, a recording) is bounded while it is parsed ([`limits`]) and checked before it
//! becomes a [`Snapshot`].

use std::marker::PhantomData;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use schemars::JsonSchema;
use serde::de::{Error as _, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::{
    Bar1, Clocks, Container, Device, DeviceStatus, DriverInfo, GpuProcess, HostFacts, HostStats, Memory,
    MigDevice, MigId, NvLink, PcieLink, PidMapping, PidNamespace, PodContainer, ProcessType, Reading,
    RemappedRows, RetiredPages, Snapshot, Window, XidErrors, XidEvent,
};

/// The wire form's version (the document's `version`).
pub const VERSION: u32 = 1;

/// What a reader of the wire form accepts: lists longer than these are refused while the
/// document is parsed, before they take memory.
pub mod limits {
    /// GPUs in a snapshot, and one more than the highest GPU index.
    pub const DEVICES: usize = 64;
    /// MIG devices of one GPU.
    pub const MIG_DEVICES: usize = 64;
    /// Process rows (one per process and GPU).
    pub const PROCESSES: usize = 8192;
    /// Fans, throttle reasons.
    pub const SHORT_LIST: usize = 64;
    /// Bytes of one string (a command line is cut at 4 KiB long before this).
    pub const TEXT_BYTES: usize = 65_536;
}

/// A value of a document from outside that gputop does not accept, and its place in the
/// document: `devices[0].utilization_gpu_percent: 140 is over 100`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{place}: {problem}")]
pub struct WireError {
    /// Where the value is: `devices[0].index`, `processes[3].command`, `host.cpu_percent`.
    pub place: String,
    /// What is wrong with it.
    pub problem: Problem,
}

/// What is wrong with a value ([`WireError`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Problem {
    /// A string longer than [`limits::TEXT_BYTES`].
    #[error("a string of {bytes} bytes (at most {max})", max = limits::TEXT_BYTES)]
    TooLong {
        /// Its length in bytes.
        bytes: usize,
    },
    /// A number over the most its field accepts.
    #[error("{value} is over {max}")]
    OverMax {
        /// The number.
        value: f64,
        /// The most accepted.
        max: f64,
    },
    /// A negative or non-finite number where a count or a measure belongs.
    #[error("{0} is not a count or a measure")]
    NotAMeasure(f64),
    /// A GPU index of [`limits::DEVICES`] or more.
    #[error("{0} is not a GPU index (0 to {max})", max = limits::DEVICES - 1)]
    NotAGpuIndex(u32),
    /// Two GPUs with one index.
    #[error("GPU {0} is listed twice")]
    ListedTwice(u32),
    /// A time after the year 9999.
    #[error("{0} is not a time between 1970 and 9999")]
    NotATime(u64),
}

fn refuse<T>(place: &str, problem: Problem) -> Result<T, WireError> {
    Err(WireError {
        place: place.to_string(),
        problem,
    })
}

/// A list of at most `N` items, refused at item `N + 1` while parsing.
pub fn bounded<'de, const N: usize, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Vec<T>, D::Error> {
    struct Bounded<T, const N: usize>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for Bounded<T, N> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "a list of at most {N} items")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(N));
            while let Some(item) = seq.next_element()? {
                if items.len() == N {
                    return Err(A::Error::custom(format!("a list of more than {N} items")));
                }
                items.push(item);
            }
            Ok(items)
        }
    }
    deserializer.deserialize_seq(Bounded::<T, N>(PhantomData))
}

/// [`bounded`] for a list that may be `null` or missing.
fn bounded_or_null<'de, const N: usize, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<Vec<T>>, D::Error> {
    struct List<T, const N: usize>(Vec<T>);
    impl<'de, T: Deserialize<'de>, const N: usize> Deserialize<'de> for List<T, N> {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            bounded::<N, D, T>(deserializer).map(List)
        }
    }
    Ok(Option::<List<T, N>>::deserialize(deserializer)?.map(|list| list.0))
}

/// A snapshot on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WireSnapshot {
    /// The document's format version; readers refuse another.
    #[schemars(extend("const" = VERSION))]
    pub version: u32,
    /// RFC 3339, UTC, whole seconds.
    #[schemars(extend("format" = "date-time"))]
    pub timestamp: String,
    /// The host's name.
    pub hostname: String,
    /// How the processes' PIDs relate to gputop's PID namespace.
    #[serde(default)]
    pub pid_namespace: PidNamespace,
    /// The kernel driver's version: `550.54.15`.
    pub driver_version: Option<String>,
    /// The CUDA version the driver supports, `major.minor`: `12.4`.
    pub cuda_driver_version: Option<String>,
    /// The NVML library's version.
    pub nvml_version: Option<String>,
    /// The GPUs, by index.
    #[serde(deserialize_with = "bounded::<{ limits::DEVICES }, _, _>")]
    #[schemars(length(max = limits::DEVICES))]
    pub devices: Vec<WireDevice>,
    /// The processes on them, one per process and GPU, largest GPU memory first.
    #[serde(deserialize_with = "bounded::<{ limits::PROCESSES }, _, _>")]
    #[schemars(length(max = limits::PROCESSES))]
    pub processes: Vec<WireProcess>,
    /// The host's own load.
    pub host: HostStats,
}

/// A GPU on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "device", deny_unknown_fields)]
pub struct WireDevice {
    /// NVML's index.
    pub index: u32,
    /// The product name: `NVIDIA H100 80GB HBM3`.
    pub name: Option<String>,
    /// `GPU-...`: what `CUDA_VISIBLE_DEVICES` takes.
    pub uuid: Option<String>,
    /// `00000000:17:00.0`.
    pub pci_bus_id: Option<String>,
    /// Whether it answers.
    pub status: WireStatus,
    /// Why it does not (`null` when it does).
    pub status_reason: Option<String>,
    /// Percent of the last sample period in which a kernel ran.
    pub utilization_gpu_percent: Option<u32>,
    /// `utilization_gpu_percent`'s mean over the last interval, from the driver's samples.
    pub utilization_gpu_mean_percent: Option<f64>,
    /// `utilization_gpu_percent`'s peak over the last interval, from the driver's samples.
    pub utilization_gpu_peak_percent: Option<f64>,
    /// Percent of the last sample period in which memory was read or written.
    pub utilization_memory_percent: Option<u32>,
    /// `utilization_memory_percent`'s mean over the last interval.
    pub utilization_memory_mean_percent: Option<f64>,
    /// `utilization_memory_percent`'s peak over the last interval.
    pub utilization_memory_peak_percent: Option<f64>,
    /// All its memory.
    pub memory_total_bytes: Option<u64>,
    /// Memory allocated by processes and contexts.
    pub memory_used_bytes: Option<u64>,
    /// Memory neither used nor reserved.
    pub memory_free_bytes: Option<u64>,
    /// Memory reserved by the driver and firmware; not part of `memory_used_bytes`.
    pub memory_reserved_bytes: Option<u64>,
    /// The BAR1 aperture through which the host maps GPU memory.
    pub bar1_total_bytes: Option<u64>,
    /// BAR1 mapped now.
    pub bar1_used_bytes: Option<u64>,
    /// The GPU core's temperature.
    pub temperature_celsius: Option<u32>,
    /// The temperature at which the GPU slows its clocks.
    pub temperature_slowdown_celsius: Option<u32>,
    /// The temperature at which the GPU shuts down.
    pub temperature_shutdown_celsius: Option<u32>,
    /// The first fan's, as nvidia-smi and nvitop show it.
    pub fan_speed_percent: Option<u32>,
    /// Every fan's speed, in the driver's order.
    #[serde(default, deserialize_with = "bounded_or_null::<{ limits::SHORT_LIST }, _, _>")]
    #[schemars(length(max = limits::SHORT_LIST))]
    pub fan_speeds_percent: Option<Vec<u32>>,
    /// Power draw now.
    pub power_usage_watts: Option<f64>,
    /// Power draw's mean over the last interval, from the driver's samples.
    pub power_usage_mean_watts: Option<f64>,
    /// Power draw's peak over the last interval, from the driver's samples.
    pub power_usage_peak_watts: Option<f64>,
    /// The power limit set.
    pub power_limit_watts: Option<f64>,
    /// The power limit in force (the least of every limit).
    pub power_enforced_limit_watts: Option<f64>,
    /// Energy used since the driver loaded (Volta and newer).
    pub energy_joules: Option<f64>,
    /// The performance state: 0 (P0, most) to 15 (P15, least).
    pub performance_state: Option<u32>,
    /// The graphics clock now.
    pub clock_graphics_mhz: Option<u32>,
    /// The SM clock now.
    pub clock_sm_mhz: Option<u32>,
    /// The memory clock now.
    pub clock_memory_mhz: Option<u32>,
    /// The video (encoder and decoder) clock now.
    pub clock_video_mhz: Option<u32>,
    /// The highest graphics clock the GPU allows.
    pub clock_max_graphics_mhz: Option<u32>,
    /// The highest SM clock the GPU allows.
    pub clock_max_sm_mhz: Option<u32>,
    /// The highest memory clock the GPU allows.
    pub clock_max_memory_mhz: Option<u32>,
    /// The highest video clock the GPU allows.
    pub clock_max_video_mhz: Option<u32>,
    /// The PCIe generation the link runs at now (it falls when idle).
    pub pcie_link_generation: Option<u32>,
    /// The PCIe lanes the link runs on now.
    pub pcie_link_width: Option<u32>,
    /// The highest PCIe generation the GPU and its slot allow.
    pub pcie_link_max_generation: Option<u32>,
    /// The most PCIe lanes the GPU and its slot allow.
    pub pcie_link_max_width: Option<u32>,
    /// PCIe bytes sent per second (a 20 ms sample of the driver's).
    pub pcie_tx_bytes_per_second: Option<u64>,
    /// PCIe bytes received per second (a 20 ms sample of the driver's).
    pub pcie_rx_bytes_per_second: Option<u64>,
    /// Video encoder utilization.
    pub encoder_utilization_percent: Option<u32>,
    /// Video decoder utilization.
    pub decoder_utilization_percent: Option<u32>,
    /// Whether ECC is on.
    pub ecc_enabled: Option<bool>,
    /// Uncorrected ECC errors since the driver loaded.
    pub ecc_uncorrected_volatile_errors: Option<u64>,
    /// Rows remapped after correctable memory errors (Ampere and newer).
    pub remapped_rows_correctable: Option<u32>,
    /// Rows remapped after uncorrectable memory errors.
    pub remapped_rows_uncorrectable: Option<u32>,
    /// A row remap waits for a GPU reset.
    pub remapped_rows_pending: Option<bool>,
    /// A row remap failed: the GPU needs service.
    pub remapped_rows_failure: Option<bool>,
    /// Pages retired after multiple single-bit ECC errors (Kepler to Turing).
    pub retired_pages_single_bit: Option<u32>,
    /// Pages retired after a double-bit ECC error.
    pub retired_pages_double_bit: Option<u32>,
    /// Its NVLinks (SXM boards), by link number.
    #[serde(default, deserialize_with = "bounded_or_null::<{ limits::SHORT_LIST }, _, _>")]
    #[schemars(length(max = limits::SHORT_LIST))]
    pub nvlinks: Option<Vec<NvLink>>,
    /// Events per Xid while gputop watched the driver's events, by Xid; `null` when it did
    /// not (a one-shot).
    #[serde(default, deserialize_with = "bounded_or_null::<{ limits::SHORT_LIST }, _, _>")]
    #[schemars(length(max = limits::SHORT_LIST))]
    pub xid_errors: Option<Vec<WireXidCount>>,
    /// The latest Xid error.
    #[serde(default)]
    pub last_xid: Option<WireXid>,
    /// The latest critical one (an Xid applications do not cause).
    #[serde(default)]
    pub last_critical_xid: Option<WireXid>,
    /// `Default`, `Exclusive_Process` or `Prohibited`, as nvidia-smi writes it.
    pub compute_mode: Option<String>,
    /// Whether the driver stays loaded with no client.
    pub persistence_mode: Option<bool>,
    /// Whether MIG mode is on.
    pub mig_mode: Option<bool>,
    /// What holds the clocks down now (NVML's clock event reasons): `sw_power_cap`, ...
    #[serde(default, deserialize_with = "bounded_or_null::<{ limits::SHORT_LIST }, _, _>")]
    #[schemars(length(max = limits::SHORT_LIST))]
    pub throttle_reasons: Option<Vec<String>>,
    /// With MIG on: its MIG devices, by GPU and compute instance.
    #[serde(default, deserialize_with = "bounded::<{ limits::MIG_DEVICES }, _, _>")]
    #[schemars(length(max = limits::MIG_DEVICES))]
    pub mig_devices: Vec<WireMig>,
    /// The pods' containers the kubelet allocated the GPU to (Kubernetes).
    #[serde(default, deserialize_with = "bounded::<{ limits::SHORT_LIST }, _, _>")]
    #[schemars(length(max = limits::SHORT_LIST))]
    pub pods: Vec<PodContainer>,
    /// Why this GPU's processes could not be listed.
    pub process_list_error: Option<String>,
}

/// Whether a GPU answers: `ok`, `lost` (fallen off the bus) or `error` (unusable for
/// another reason); `status_reason` says why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "status")]
pub enum WireStatus {
    /// It answers.
    Ok,
    /// Fallen off the bus.
    Lost,
    /// Unusable for another reason.
    Error,
}

/// How the driver's PID names the process in gputop's own PID namespace: the `same` PID,
/// `mapped` to `local_pid`, or `unmapped` (`unmapped_reason` says why).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "pid_mapping")]
pub enum WirePidMapping {
    /// The driver's PID is gputop's.
    Same,
    /// gputop knows it as `local_pid`.
    Mapped,
    /// gputop cannot reach it.
    Unmapped,
}

/// A MIG device on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "mig_device", deny_unknown_fields)]
pub struct WireMig {
    /// The GPU instance.
    pub gpu_instance_id: u32,
    /// The compute instance within it.
    pub compute_instance_id: u32,
    /// As nvidia-smi names it: `3g.40gb`.
    pub profile: Option<String>,
    /// `MIG-...`: what `CUDA_VISIBLE_DEVICES` takes.
    pub uuid: Option<String>,
    /// All its memory.
    pub memory_total_bytes: Option<u64>,
    /// Its memory in use.
    pub memory_used_bytes: Option<u64>,
    /// Its memory free.
    pub memory_free_bytes: Option<u64>,
    /// Most drivers do not report utilization per MIG device.
    pub utilization_gpu_percent: Option<u32>,
    /// The pods' containers the kubelet allocated the MIG device to.
    #[serde(default, deserialize_with = "bounded::<{ limits::SHORT_LIST }, _, _>")]
    #[schemars(length(max = limits::SHORT_LIST))]
    pub pods: Vec<PodContainer>,
}

/// A process on one GPU, on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "process", deny_unknown_fields)]
pub struct WireProcess {
    /// Its PID as the driver reports it (the host's PID namespace).
    pub pid: u32,
    /// The GPU's index.
    pub gpu_index: u32,
    /// The GPU's UUID.
    pub gpu_uuid: Option<String>,
    /// Compute, graphics or both.
    #[serde(rename = "type")]
    pub kind: ProcessType,
    /// GPU memory it holds.
    pub gpu_memory_bytes: Option<u64>,
    /// SM utilization over the last interval.
    pub sm_percent: Option<u32>,
    /// Memory-bandwidth utilization over the last interval.
    pub memory_bandwidth_percent: Option<u32>,
    /// Video encoder utilization over the last interval.
    pub encoder_percent: Option<u32>,
    /// Video decoder utilization over the last interval.
    pub decoder_percent: Option<u32>,
    /// On a MIG device: its GPU instance.
    pub gpu_instance_id: Option<u32>,
    /// On a MIG device: its compute instance.
    pub compute_instance_id: Option<u32>,
    /// The owner's user name.
    pub user: Option<String>,
    /// Its command line, arguments joined by spaces; `null` on `/snapshot` unless `gputop export --process-commands`.
    pub command: Option<String>,
    /// CPU since the previous reading, percent of one core.
    pub cpu_percent: Option<f64>,
    /// Resident host memory.
    pub host_memory_bytes: Option<u64>,
    /// When it started.
    pub start_time_unix_seconds: Option<u64>,
    /// How long it has run.
    pub running_seconds: Option<u64>,
    /// The container, pod, Slurm job or systemd slice it runs in; `null` on the host.
    pub container: Option<WireContainer>,
    /// Its PID inside its own container's namespace.
    pub container_pid: Option<u32>,
    /// The PID that names it in gputop's own namespace; `null` when unreachable.
    pub local_pid: Option<u32>,
    /// Whether gputop's PID namespace can reach it.
    pub pid_mapping: WirePidMapping,
    /// Why it cannot (`null` when it can).
    pub unmapped_reason: Option<String>,
}

/// A container with the label the CONTAINER column shows. Its fields are spelt out, not
/// flattened from [`Container`]: serde buffers a flattened object whole, unbounded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "container", deny_unknown_fields)]
pub struct WireContainer {
    /// What runs it.
    pub runtime: super::Runtime,
    /// The container's short id, the Slurm job number, the LXC name, or the systemd unit.
    pub id: String,
    /// Kubernetes: the pod's UID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Kubernetes: the pod's namespace and name and the container's, from the kubelet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<PodContainer>,
    /// Slurm: the job's user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// How the CONTAINER column names it: `docker:3f2a1b9c0d12`, `team-a/trainer-0/pytorch`.
    #[serde(default)]
    pub label: String,
}

/// The `--once --json` and `/snapshot` document: the snapshot's wire form, then the alerts
/// and the usage accounting. [`json_schema`] is its JSON Schema.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(
    title = "gputop snapshot, version 1",
    description = "What `gputop --once --json` prints and `gputop export` serves at /snapshot. \
                   Units are in the key names; null is unknown (not supported, or failed).",
    deny_unknown_fields
)]
pub struct WireReport {
    /// The snapshot, its keys at the top level.
    #[serde(flatten)]
    pub snapshot: WireSnapshot,
    /// Pending and firing alerts, most severe first.
    pub alerts: Vec<WireAlert>,
    /// GPU use per user and container.
    pub usage: WireUsage,
}

impl WireReport {
    /// The report without command lines, which may hold secrets.
    pub fn without_commands(mut self) -> Self {
        for process in &mut self.snapshot.processes {
            process.command = None;
        }
        self
    }
}

/// The JSON Schema of [`WireReport`] (draft 2020-12), as `config/snapshot.schema.json` holds
/// it.
pub fn json_schema() -> serde_json::Value {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator()
        .into_root_schema_for::<WireReport>();
    schema.to_value()
}

/// An alert that is pending or firing, on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(rename = "alert", deny_unknown_fields)]
pub struct WireAlert {
    /// The rule's name.
    pub rule: String,
    /// The rule's severity.
    pub severity: WireSeverity,
    /// Pending or firing.
    pub state: WireAlertState,
    /// `GPU 0`, `PID 4242 on GPU 1` or `host`.
    pub subject: String,
    /// The GPU it is about; `null` for the host.
    pub gpu_index: Option<u32>,
    /// The process it is about (the driver's PID); `null` for a GPU or the host.
    pub pid: Option<u32>,
    /// Seconds since the epoch when the alert entered its state.
    pub since: f64,
    /// The rule's value when last evaluated.
    pub value: Option<f64>,
    /// The rule's summary with the subject and value filled in.
    pub summary: String,
}

/// An alert rule's severity, as Alertmanager's `severity` label has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "severity")]
pub enum WireSeverity {
    /// Worth knowing.
    Info,
    /// Worth a look.
    Warning,
    /// Worth acting on now.
    Critical,
}

/// Pending: the condition holds but not yet for the rule's `for` duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "alert_state")]
pub enum WireAlertState {
    /// The condition holds, not yet for the rule's `for` duration.
    Pending,
    /// The condition has held for the rule's `for` duration.
    Firing,
}

/// GPU use per user and per container over the time gputop has accounted for.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(rename = "usage", deny_unknown_fields)]
pub struct WireUsage {
    /// When accounting began (RFC 3339); `null` before the first snapshot with time in it.
    #[schemars(extend("format" = "date-time"))]
    pub since: Option<String>,
    /// The seconds accounted for.
    #[schemars(range(min = 0.0))]
    pub seconds: f64,
    /// By user, most GPU memory now first, then most GPU-seconds.
    pub users: Vec<WireUserUsage>,
    /// By container, in the same order.
    pub containers: Vec<WireContainerUsage>,
}

/// One user's GPU use.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(rename = "user_usage", deny_unknown_fields)]
pub struct WireUserUsage {
    /// The user name.
    pub user: String,
    /// Its use.
    #[serde(flatten)]
    pub totals: WireUsageTotals,
}

/// One container's GPU use.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(rename = "container_usage", deny_unknown_fields)]
pub struct WireContainerUsage {
    /// The container's label.
    pub container: String,
    /// Its use.
    #[serde(flatten)]
    pub totals: WireUsageTotals,
}

/// What a user or container holds now and has used over the accounted time.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct WireUsageTotals {
    /// The GPUs its processes hold now.
    pub gpus: Vec<u32>,
    /// GPU memory its processes hold now.
    pub gpu_memory_bytes: u64,
    /// Its processes holding a GPU now (a process on two GPUs counts once).
    pub processes: u64,
    /// GPU-seconds: each GPU holding one of its processes counts one per second.
    #[schemars(range(min = 0.0))]
    pub gpu_seconds: f64,
    /// GPU memory held times seconds.
    #[schemars(range(min = 0.0))]
    pub gpu_memory_byte_seconds: f64,
    /// The GPUs' energy its processes' shares account for.
    #[schemars(range(min = 0.0))]
    pub gpu_energy_joules: f64,
}

/// Two decimals: means and percentages are not more precise than that.
fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// A reading with [`round2`]'s two decimals, for `serialize_with`.
pub(super) fn two_decimals<S: serde::Serializer>(
    reading: &Reading<f64>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    reading.value().map(|v| round2(*v)).serialize(serializer)
}

/// A reading's value on the wire.
fn put<T: Clone>(reading: &Reading<T>) -> Option<T> {
    reading.value().cloned()
}

/// A reading's value on the wire, converted.
fn with<T, U>(reading: &Reading<T>, f: impl FnOnce(&T) -> U) -> Option<U> {
    reading.value().map(f)
}

/// A value from the wire as a reading.
fn get<T>(value: Option<T>) -> Reading<T> {
    value.map_or(Reading::NotSupported, Reading::Value)
}

/// Memory from its figures on the wire: known when total, used and free all are.
fn memory(total: Option<u64>, used: Option<u64>, free: Option<u64>, reserved: Option<u64>) -> Option<Memory> {
    Some(Memory {
        total: total?,
        used: used?,
        free: free?,
        reserved: reserved.unwrap_or(0),
    })
}

fn watts(milliwatts: u32) -> f64 {
    f64::from(milliwatts) / 1000.0
}

fn milliwatts(watts: f64) -> u32 {
    (watts * 1000.0).round().clamp(0.0, f64::from(u32::MAX)) as u32
}

impl From<&Snapshot> for WireSnapshot {
    fn from(s: &Snapshot) -> Self {
        Self {
            version: VERSION,
            timestamp: crate::format::rfc3339(s.taken_at),
            hostname: s.hostname.clone(),
            pid_namespace: s.pid_namespace,
            driver_version: put(&s.driver.driver_version),
            cuda_driver_version: put(&s.driver.cuda_driver_version),
            nvml_version: put(&s.driver.nvml_version),
            devices: s.devices.iter().map(WireDevice::from).collect(),
            processes: s.processes.iter().map(WireProcess::from).collect(),
            host: s.host.clone(),
        }
    }
}

impl WireSnapshot {
    /// The snapshot again, taken at `taken_at` (the wire's timestamp has whole seconds
    /// only; a recording keeps its frames' own times, a remote view its arrival time), once
    /// [`WireSnapshot::check`] has found every value in range.
    pub fn into_snapshot(self, taken_at: SystemTime) -> Result<Snapshot, WireError> {
        self.check()?;
        let mut processes: Vec<GpuProcess> = self.processes.into_iter().map(GpuProcess::from).collect();
        super::order::by_gpu_memory(&mut processes);
        Ok(Snapshot {
            taken_at,
            hostname: self.hostname,
            driver: DriverInfo {
                driver_version: get(self.driver_version),
                nvml_version: get(self.nvml_version),
                cuda_driver_version: get(self.cuda_driver_version),
            },
            devices: self.devices.into_iter().map(Device::from).collect(),
            processes,
            host: self.host,
            pid_namespace: self.pid_namespace,
        })
    }

    /// The first value out of what gputop accepts, named by its place in the document:
    /// GPU indexes unique and under [`limits::DEVICES`], percentages at most 100 (a fan's
    /// at most 200: some boards report over 100), temperatures at most 1000 °C, numbers
    /// with a fraction finite and not negative, strings at most [`limits::TEXT_BYTES`].
    pub fn check(&self) -> Result<(), WireError> {
        for (place, value) in [
            ("timestamp", Some(&self.timestamp)),
            ("hostname", Some(&self.hostname)),
            ("driver_version", self.driver_version.as_ref()),
            ("cuda_driver_version", self.cuda_driver_version.as_ref()),
            ("nvml_version", self.nvml_version.as_ref()),
        ] {
            text(place, value)?;
        }
        let mut seen = [false; limits::DEVICES];
        for (i, d) in self.devices.iter().enumerate() {
            let place = |field: &str| format!("devices[{i}].{field}");
            let index = d.index as usize;
            if index >= limits::DEVICES {
                return refuse(&place("index"), Problem::NotAGpuIndex(d.index));
            }
            if std::mem::replace(&mut seen[index], true) {
                return refuse(&place("index"), Problem::ListedTwice(d.index));
            }
            d.check(&place)?;
        }
        for (i, p) in self.processes.iter().enumerate() {
            p.check(&|field: &str| format!("processes[{i}].{field}"))?;
        }
        let place = |field: &str| format!("host.{field}");
        fraction(&place("cpu_percent"), self.host.cpu_percent.get(), 100.0)?;
        for average in self.host.load_average.value().into_iter().flatten() {
            fraction(&place("load_average"), Some(*average), f64::MAX)?;
        }
        Ok(())
    }
}

/// A pod's names, each a string of at most [`limits::TEXT_BYTES`].
fn pod_names(place: &str, names: &PodContainer) -> Result<(), WireError> {
    for (field, value) in [
        ("namespace", &names.namespace),
        ("pod", &names.pod),
        ("container", &names.container),
    ] {
        text(&format!("{place}.{field}"), Some(value))?;
    }
    Ok(())
}

/// A string of at most [`limits::TEXT_BYTES`].
fn text(place: &str, value: Option<&String>) -> Result<(), WireError> {
    match value {
        Some(text) if text.len() > limits::TEXT_BYTES => {
            refuse(place, Problem::TooLong { bytes: text.len() })
        }
        _ => Ok(()),
    }
}

/// A whole number of at most `max`.
fn at_most(place: &str, value: Option<u32>, max: u32) -> Result<(), WireError> {
    match value {
        Some(v) if v > max => refuse(
            place,
            Problem::OverMax {
                value: f64::from(v),
                max: f64::from(max),
            },
        ),
        _ => Ok(()),
    }
}

/// A number with a fraction: finite, not negative, at most `max`.
fn fraction(place: &str, value: Option<f64>, max: f64) -> Result<(), WireError> {
    match value {
        Some(v) if !v.is_finite() || v < 0.0 => refuse(place, Problem::NotAMeasure(v)),
        Some(v) if v > max => refuse(place, Problem::OverMax { value: v, max }),
        _ => Ok(()),
    }
}

impl WireDevice {
    fn check(&self, place: &dyn Fn(&str) -> String) -> Result<(), WireError> {
        for (field, value) in [
            ("name", self.name.as_ref()),
            ("uuid", self.uuid.as_ref()),
            ("pci_bus_id", self.pci_bus_id.as_ref()),
            ("status_reason", self.status_reason.as_ref()),
            ("compute_mode", self.compute_mode.as_ref()),
            ("process_list_error", self.process_list_error.as_ref()),
        ] {
            text(&place(field), value)?;
        }
        for reason in self.throttle_reasons.iter().flatten() {
            text(&place("throttle_reasons"), Some(reason))?;
        }
        for (i, pod) in self.pods.iter().enumerate() {
            pod_names(&place(&format!("pods[{i}]")), pod)?;
        }
        for (field, xid) in [
            ("last_xid", self.last_xid),
            ("last_critical_xid", self.last_critical_xid),
        ] {
            if let Some(xid) = xid
                && xid.time_unix_seconds > LATEST_TIME_UNIX_SECONDS
            {
                return refuse(
                    &place(&format!("{field}.time_unix_seconds")),
                    Problem::NotATime(xid.time_unix_seconds),
                );
            }
        }
        for (field, value, max) in [
            ("utilization_gpu_percent", self.utilization_gpu_percent, 100),
            ("utilization_memory_percent", self.utilization_memory_percent, 100),
            (
                "encoder_utilization_percent",
                self.encoder_utilization_percent,
                100,
            ),
            (
                "decoder_utilization_percent",
                self.decoder_utilization_percent,
                100,
            ),
            ("fan_speed_percent", self.fan_speed_percent, 200),
            ("temperature_celsius", self.temperature_celsius, 1000),
            (
                "temperature_slowdown_celsius",
                self.temperature_slowdown_celsius,
                1000,
            ),
            (
                "temperature_shutdown_celsius",
                self.temperature_shutdown_celsius,
                1000,
            ),
        ] {
            at_most(&place(field), value, max)?;
        }
        for speed in self.fan_speeds_percent.iter().flatten() {
            at_most(&place("fan_speeds_percent"), Some(*speed), 200)?;
        }
        for (field, value, max) in [
            (
                "utilization_gpu_mean_percent",
                self.utilization_gpu_mean_percent,
                100.0,
            ),
            (
                "utilization_gpu_peak_percent",
                self.utilization_gpu_peak_percent,
                100.0,
            ),
            (
                "utilization_memory_mean_percent",
                self.utilization_memory_mean_percent,
                100.0,
            ),
            (
                "utilization_memory_peak_percent",
                self.utilization_memory_peak_percent,
                100.0,
            ),
            ("power_usage_watts", self.power_usage_watts, f64::MAX),
            ("power_usage_mean_watts", self.power_usage_mean_watts, f64::MAX),
            ("power_usage_peak_watts", self.power_usage_peak_watts, f64::MAX),
            ("power_limit_watts", self.power_limit_watts, f64::MAX),
            (
                "power_enforced_limit_watts",
                self.power_enforced_limit_watts,
                f64::MAX,
            ),
            ("energy_joules", self.energy_joules, f64::MAX),
        ] {
            fraction(&place(field), value, max)?;
        }
        for (i, m) in self.mig_devices.iter().enumerate() {
            let field = |name: &str| place(&format!("mig_devices[{i}].{name}"));
            text(&field("profile"), m.profile.as_ref())?;
            text(&field("uuid"), m.uuid.as_ref())?;
            at_most(&field("utilization_gpu_percent"), m.utilization_gpu_percent, 100)?;
            for (j, pod) in m.pods.iter().enumerate() {
                pod_names(&field(&format!("pods[{j}]")), pod)?;
            }
        }
        Ok(())
    }
}

impl WireProcess {
    fn check(&self, place: &dyn Fn(&str) -> String) -> Result<(), WireError> {
        if self.gpu_index as usize >= limits::DEVICES {
            return refuse(&place("gpu_index"), Problem::NotAGpuIndex(self.gpu_index));
        }
        for (field, value) in [
            ("gpu_uuid", self.gpu_uuid.as_ref()),
            ("user", self.user.as_ref()),
            ("command", self.command.as_ref()),
            ("unmapped_reason", self.unmapped_reason.as_ref()),
        ] {
            text(&place(field), value)?;
        }
        if let Some(c) = &self.container {
            text(&place("container.id"), Some(&c.id))?;
            text(&place("container.pod"), c.pod.as_ref())?;
            text(&place("container.label"), Some(&c.label))?;
            text(&place("container.user"), c.user.as_ref())?;
            if let Some(names) = &c.names {
                pod_names(&place("container.names"), names)?;
            }
        }
        for (field, value) in [
            ("sm_percent", self.sm_percent),
            ("memory_bandwidth_percent", self.memory_bandwidth_percent),
            ("encoder_percent", self.encoder_percent),
            ("decoder_percent", self.decoder_percent),
        ] {
            at_most(&place(field), value, 100)?;
        }
        // A process can use many cores: 100 % each.
        fraction(&place("cpu_percent"), self.cpu_percent, 100.0 * 65_536.0)
    }
}

impl From<&Device> for WireDevice {
    fn from(d: &Device) -> Self {
        let (status, status_reason) = match &d.status {
            DeviceStatus::Ok => (WireStatus::Ok, None),
            DeviceStatus::Lost(r) => (WireStatus::Lost, Some(r.clone())),
            DeviceStatus::Failed(r) => (WireStatus::Error, Some(r.clone())),
        };
        let memory = put(&d.memory);
        let bar1 = put(&d.bar1);
        let gpu_window = put(&d.utilization_gpu_window);
        let memory_window = put(&d.utilization_memory_window);
        let power_window = put(&d.power_usage_window);
        Self {
            index: d.index,
            name: put(&d.name),
            uuid: put(&d.uuid),
            pci_bus_id: put(&d.pci_bus_id),
            status,
            status_reason,
            utilization_gpu_percent: put(&d.utilization_gpu),
            utilization_gpu_mean_percent: gpu_window.map(|w| round2(w.mean)),
            utilization_gpu_peak_percent: gpu_window.map(|w| round2(w.peak)),
            utilization_memory_percent: put(&d.utilization_memory),
            utilization_memory_mean_percent: memory_window.map(|w| round2(w.mean)),
            utilization_memory_peak_percent: memory_window.map(|w| round2(w.peak)),
            memory_total_bytes: memory.map(|m| m.total),
            memory_used_bytes: memory.map(|m| m.used),
            memory_free_bytes: memory.map(|m| m.free),
            memory_reserved_bytes: memory.map(|m| m.reserved),
            bar1_total_bytes: bar1.map(|b| b.total),
            bar1_used_bytes: bar1.map(|b| b.used),
            temperature_celsius: put(&d.temperature),
            temperature_slowdown_celsius: put(&d.temperature_slowdown),
            temperature_shutdown_celsius: put(&d.temperature_shutdown),
            fan_speed_percent: d.fan_speed().get(),
            fan_speeds_percent: put(&d.fan_speeds),
            power_usage_watts: with(&d.power_usage_mw, |mw| watts(*mw)),
            power_usage_mean_watts: power_window.map(|w| round2(w.mean / 1000.0)),
            power_usage_peak_watts: power_window.map(|w| round2(w.peak / 1000.0)),
            power_limit_watts: with(&d.power_limit_mw, |mw| watts(*mw)),
            power_enforced_limit_watts: with(&d.power_enforced_limit_mw, |mw| watts(*mw)),
            energy_joules: with(&d.energy_mj, |mj| *mj as f64 / 1000.0),
            performance_state: put(&d.performance_state),
            clock_graphics_mhz: put(&d.clocks.graphics),
            clock_sm_mhz: put(&d.clocks.sm),
            clock_memory_mhz: put(&d.clocks.memory),
            clock_video_mhz: put(&d.clocks.video),
            clock_max_graphics_mhz: put(&d.max_clocks.graphics),
            clock_max_sm_mhz: put(&d.max_clocks.sm),
            clock_max_memory_mhz: put(&d.max_clocks.memory),
            clock_max_video_mhz: put(&d.max_clocks.video),
            pcie_link_generation: put(&d.pcie_link.generation),
            pcie_link_width: put(&d.pcie_link.width),
            pcie_link_max_generation: put(&d.pcie_link.max_generation),
            pcie_link_max_width: put(&d.pcie_link.max_width),
            pcie_tx_bytes_per_second: with(&d.pcie_tx_kbps, |kb| u64::from(*kb) * 1024),
            pcie_rx_bytes_per_second: with(&d.pcie_rx_kbps, |kb| u64::from(*kb) * 1024),
            encoder_utilization_percent: put(&d.encoder),
            decoder_utilization_percent: put(&d.decoder),
            ecc_enabled: put(&d.ecc_enabled),
            ecc_uncorrected_volatile_errors: put(&d.ecc_uncorrected_volatile),
            remapped_rows_correctable: with(&d.remapped_rows, |r| r.correctable),
            remapped_rows_uncorrectable: with(&d.remapped_rows, |r| r.uncorrectable),
            remapped_rows_pending: with(&d.remapped_rows, |r| r.pending),
            remapped_rows_failure: with(&d.remapped_rows, |r| r.failure),
            retired_pages_single_bit: with(&d.retired_pages, |r| r.single_bit),
            retired_pages_double_bit: with(&d.retired_pages, |r| r.double_bit),
            nvlinks: put(&d.nvlinks),
            xid_errors: with(&d.xid_errors, |errors| {
                errors
                    .counts
                    .iter()
                    .map(|(&xid, &count)| WireXidCount { xid, count })
                    .collect()
            }),
            last_xid: d
                .xid_errors
                .value()
                .and_then(|e| e.last.as_ref())
                .map(WireXid::from),
            last_critical_xid: d
                .xid_errors
                .value()
                .and_then(|e| e.last_critical.as_ref())
                .map(WireXid::from),
            compute_mode: put(&d.compute_mode),
            persistence_mode: put(&d.persistence_mode),
            mig_mode: put(&d.mig_enabled),
            throttle_reasons: put(&d.throttle_reasons),
            mig_devices: d.mig_devices.iter().map(WireMig::from).collect(),
            pods: d.pods.clone(),
            process_list_error: d.processes_unlisted.clone(),
        }
    }
}

/// How many events of one Xid, on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "xid_count", deny_unknown_fields)]
pub struct WireXidCount {
    /// The Xid number.
    pub xid: u32,
    /// Events of it.
    pub count: u64,
}

/// One Xid error on the wire: its code and when gputop received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "xid", deny_unknown_fields)]
pub struct WireXid {
    /// The Xid number.
    pub xid: u32,
    /// When gputop received it.
    #[schemars(range(max = LATEST_TIME_UNIX_SECONDS))]
    pub time_unix_seconds: u64,
}

/// Latest time a reader accepts, in seconds since the epoch: the end of the year 9999.
const LATEST_TIME_UNIX_SECONDS: u64 = 253_402_300_799;

impl From<&XidEvent> for WireXid {
    fn from(event: &XidEvent) -> Self {
        Self {
            xid: event.xid,
            time_unix_seconds: event.at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        }
    }
}

impl From<WireXid> for XidEvent {
    fn from(xid: WireXid) -> Self {
        Self {
            xid: xid.xid,
            // Checked before: at most the year 9999.
            at: UNIX_EPOCH + Duration::from_secs(xid.time_unix_seconds.min(LATEST_TIME_UNIX_SECONDS)),
        }
    }
}

impl From<WireDevice> for Device {
    fn from(d: WireDevice) -> Self {
        let reason = d.status_reason.clone().unwrap_or_default();
        let status = match d.status {
            WireStatus::Ok => DeviceStatus::Ok,
            WireStatus::Lost => DeviceStatus::Lost(reason),
            WireStatus::Error => DeviceStatus::Failed(reason),
        };
        // The wire does not carry how many driver samples a window held.
        let window = |mean: Option<f64>, peak: Option<f64>, scale: f64| {
            get(mean.map(|mean| Window {
                mean: mean * scale,
                peak: peak.unwrap_or(mean) * scale,
                samples: 1,
            }))
        };
        let memory = memory(
            d.memory_total_bytes,
            d.memory_used_bytes,
            d.memory_free_bytes,
            d.memory_reserved_bytes,
        );
        let bar1 = d
            .bar1_total_bytes
            .zip(d.bar1_used_bytes)
            .map(|(total, used)| Bar1 { total, used });
        Device {
            index: d.index,
            status,
            name: get(d.name),
            uuid: get(d.uuid),
            pci_bus_id: get(d.pci_bus_id),
            utilization_gpu: get(d.utilization_gpu_percent),
            utilization_memory: get(d.utilization_memory_percent),
            utilization_gpu_window: window(
                d.utilization_gpu_mean_percent,
                d.utilization_gpu_peak_percent,
                1.0,
            ),
            utilization_memory_window: window(
                d.utilization_memory_mean_percent,
                d.utilization_memory_peak_percent,
                1.0,
            ),
            memory: get(memory),
            bar1: get(bar1),
            temperature: get(d.temperature_celsius),
            temperature_slowdown: get(d.temperature_slowdown_celsius),
            temperature_shutdown: get(d.temperature_shutdown_celsius),
            fan_speeds: get(d.fan_speeds_percent),
            power_usage_mw: get(d.power_usage_watts.map(milliwatts)),
            power_usage_window: window(d.power_usage_mean_watts, d.power_usage_peak_watts, 1000.0),
            power_limit_mw: get(d.power_limit_watts.map(milliwatts)),
            power_enforced_limit_mw: get(d.power_enforced_limit_watts.map(milliwatts)),
            energy_mj: get(d.energy_joules.map(|j| (j * 1000.0).round().max(0.0) as u64)),
            performance_state: get(d.performance_state),
            clocks: Clocks {
                graphics: get(d.clock_graphics_mhz),
                sm: get(d.clock_sm_mhz),
                memory: get(d.clock_memory_mhz),
                video: get(d.clock_video_mhz),
            },
            max_clocks: Clocks {
                graphics: get(d.clock_max_graphics_mhz),
                sm: get(d.clock_max_sm_mhz),
                memory: get(d.clock_max_memory_mhz),
                video: get(d.clock_max_video_mhz),
            },
            pcie_link: PcieLink {
                generation: get(d.pcie_link_generation),
                width: get(d.pcie_link_width),
                max_generation: get(d.pcie_link_max_generation),
                max_width: get(d.pcie_link_max_width),
            },
            pcie_tx_kbps: get(d
                .pcie_tx_bytes_per_second
                .map(|b| u32::try_from(b / 1024).unwrap_or(u32::MAX))),
            pcie_rx_kbps: get(d
                .pcie_rx_bytes_per_second
                .map(|b| u32::try_from(b / 1024).unwrap_or(u32::MAX))),
            encoder: get(d.encoder_utilization_percent),
            decoder: get(d.decoder_utilization_percent),
            ecc_enabled: get(d.ecc_enabled),
            ecc_uncorrected_volatile: get(d.ecc_uncorrected_volatile_errors),
            remapped_rows: get((|| {
                Some(RemappedRows {
                    correctable: d.remapped_rows_correctable?,
                    uncorrectable: d.remapped_rows_uncorrectable?,
                    pending: d.remapped_rows_pending?,
                    failure: d.remapped_rows_failure?,
                })
            })()),
            nvlinks: get(d.nvlinks),
            xid_errors: get(d.xid_errors.map(|counts| XidErrors {
                counts: counts.into_iter().map(|c| (c.xid, c.count)).collect(),
                last: d.last_xid.map(XidEvent::from),
                last_critical: d.last_critical_xid.map(XidEvent::from),
            })),
            retired_pages: get((|| {
                Some(RetiredPages {
                    single_bit: d.retired_pages_single_bit?,
                    double_bit: d.retired_pages_double_bit?,
                })
            })()),
            compute_mode: get(d.compute_mode),
            persistence_mode: get(d.persistence_mode),
            mig_enabled: get(d.mig_mode),
            throttle_reasons: get(d.throttle_reasons),
            mig_devices: d.mig_devices.into_iter().map(MigDevice::from).collect(),
            processes_unlisted: d.process_list_error,
            pods: d.pods,
        }
    }
}

impl From<&MigDevice> for WireMig {
    fn from(m: &MigDevice) -> Self {
        let memory = put(&m.memory);
        Self {
            gpu_instance_id: m.id.gpu_instance,
            compute_instance_id: m.id.compute_instance,
            profile: put(&m.profile),
            uuid: put(&m.uuid),
            memory_total_bytes: memory.map(|m| m.total),
            memory_used_bytes: memory.map(|m| m.used),
            memory_free_bytes: memory.map(|m| m.free),
            utilization_gpu_percent: put(&m.utilization_gpu),
            pods: m.pods.clone(),
        }
    }
}

impl From<WireMig> for MigDevice {
    fn from(m: WireMig) -> Self {
        let memory = memory(
            m.memory_total_bytes,
            m.memory_used_bytes,
            m.memory_free_bytes,
            None,
        );
        MigDevice {
            id: MigId {
                gpu_instance: m.gpu_instance_id,
                compute_instance: m.compute_instance_id,
            },
            profile: get(m.profile),
            uuid: get(m.uuid),
            memory: get(memory),
            utilization_gpu: get(m.utilization_gpu_percent),
            pods: m.pods,
        }
    }
}

impl From<&GpuProcess> for WireProcess {
    fn from(p: &GpuProcess) -> Self {
        let h = &p.host;
        let (pid_mapping, unmapped_reason) = match &h.mapping {
            PidMapping::Same => (WirePidMapping::Same, None),
            PidMapping::Mapped { .. } => (WirePidMapping::Mapped, None),
            PidMapping::Unmapped { reason } => (WirePidMapping::Unmapped, Some(reason.clone())),
        };
        Self {
            pid: p.pid,
            gpu_index: p.gpu_index,
            gpu_uuid: put(&p.gpu_uuid),
            kind: p.kind,
            gpu_memory_bytes: put(&p.gpu_memory_bytes),
            sm_percent: put(&p.sm_percent),
            memory_bandwidth_percent: put(&p.memory_bandwidth_percent),
            encoder_percent: put(&p.encoder_percent),
            decoder_percent: put(&p.decoder_percent),
            gpu_instance_id: p.mig.map(|m| m.gpu_instance),
            compute_instance_id: p.mig.map(|m| m.compute_instance),
            user: put(&h.user),
            command: put(&h.command),
            cpu_percent: with(&h.cpu_percent, |c| round2(*c)),
            host_memory_bytes: put(&h.memory_bytes),
            start_time_unix_seconds: put(&h.start_time),
            running_seconds: put(&h.running_seconds),
            container: h.container.as_ref().map(|c| WireContainer {
                runtime: c.runtime,
                id: c.id.clone(),
                pod: c.pod.clone(),
                names: c.names.clone(),
                user: c.user.clone(),
                label: c.label(),
            }),
            container_pid: h.namespace_pid,
            local_pid: p.local_pid(),
            pid_mapping,
            unmapped_reason,
        }
    }
}

impl From<WireProcess> for GpuProcess {
    fn from(p: WireProcess) -> Self {
        let mapping = match p.pid_mapping {
            WirePidMapping::Mapped => p
                .local_pid
                .map_or(PidMapping::Same, |local_pid| PidMapping::Mapped { local_pid }),
            WirePidMapping::Unmapped => PidMapping::Unmapped {
                reason: p.unmapped_reason.unwrap_or_default(),
            },
            WirePidMapping::Same => PidMapping::Same,
        };
        let mig = p
            .gpu_instance_id
            .zip(p.compute_instance_id)
            .map(|(gpu_instance, compute_instance)| MigId {
                gpu_instance,
                compute_instance,
            });
        GpuProcess {
            pid: p.pid,
            gpu_index: p.gpu_index,
            gpu_uuid: get(p.gpu_uuid),
            kind: p.kind,
            gpu_memory_bytes: get(p.gpu_memory_bytes),
            sm_percent: get(p.sm_percent),
            memory_bandwidth_percent: get(p.memory_bandwidth_percent),
            encoder_percent: get(p.encoder_percent),
            decoder_percent: get(p.decoder_percent),
            mig,
            host: HostFacts {
                user: get(p.user),
                // Not on the wire: the uid only serves signals, which are never sent to a
                // process read from the wire.
                uid: Reading::NotSupported,
                parent_pid: Reading::NotSupported,
                command: get(p.command),
                cpu_percent: get(p.cpu_percent),
                memory_bytes: get(p.host_memory_bytes),
                start_time: get(p.start_time_unix_seconds),
                // Not on the wire either: it serves signals only.
                start_ticks: Reading::NotSupported,
                running_seconds: get(p.running_seconds),
                container: p.container.map(|c| Container {
                    runtime: c.runtime,
                    id: c.id,
                    pod: c.pod,
                    names: c.names,
                    user: c.user,
                }),
                namespace_pid: p.container_pid,
                mapping,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::model::testing;

    /// The committed schema is the one the wire types generate. After a change to them:
    /// `GPUTOP_UPDATE_SCHEMA=1 cargo test -p gputop-core schema`, then review the file's diff.
    #[test]
    fn the_committed_schema_is_the_generated_one() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/snapshot.schema.json");
        let generated = serde_json::to_string_pretty(&json_schema()).unwrap() + "\n";
        if std::env::var_os("GPUTOP_UPDATE_SCHEMA").is_some() {
            std::fs::write(&path, &generated).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap();
        assert!(
            committed == generated,
            "{} is not what the wire types generate; run GPUTOP_UPDATE_SCHEMA=1 cargo test -p \
             gputop-core schema and review the diff",
            path.display()
        );
    }

    fn device() -> Device {
        let mut d = Device::unavailable(1, DeviceStatus::Ok, "not read");
        d.name = Reading::Value("NVIDIA H100".into());
        d.utilization_gpu = Reading::Value(87);
        d.utilization_gpu_window = Reading::Value(Window {
            mean: 80.5,
            peak: 99.0,
            samples: 1,
        });
        d.memory = Reading::Value(Memory {
            total: 80 << 30,
            used: 60 << 30,
            free: 20 << 30,
            reserved: 1 << 20,
        });
        d.bar1 = Reading::Value(Bar1 {
            total: 1 << 30,
            used: 1 << 20,
        });
        d.power_usage_mw = Reading::Value(312_500);
        d.power_enforced_limit_mw = Reading::Value(700_000);
        d.energy_mj = Reading::Value(123_456_789);
        d.pcie_tx_kbps = Reading::Value(4096);
        d.fan_speeds = Reading::NotSupported;
        d.throttle_reasons = Reading::Value(vec!["sw_power_cap".into()]);
        d.temperature = Reading::failed("NVML_ERROR_UNKNOWN");
        d.mig_devices = vec![MigDevice {
            id: MigId {
                gpu_instance: 1,
                compute_instance: 0,
            },
            profile: Reading::Value("3g.40gb".into()),
            uuid: Reading::failed("timeout"),
            memory: Reading::NotSupported,
            utilization_gpu: Reading::NotSupported,
            pods: Vec::new(),
        }];
        d.processes_unlisted = Some("process list needs root on MIG GPUs".into());
        d
    }

    /// What a snapshot keeps through its wire form: everything the views show. Not on the
    /// wire: why a reading failed, the uid and parent PID, a window's sample count, and the
    /// time below a second (the reader supplies the time).
    #[test]
    fn a_snapshot_survives_its_wire_form() {
        let taken_at = UNIX_EPOCH + Duration::from_secs(1_796_000_000);
        let mut p = testing::process(4242, 1, "alice", 3 << 30);
        p.host.command = Reading::failed("permission denied");
        p.host.mapping = PidMapping::Unmapped {
            reason: "another PID namespace".into(),
        };
        p.mig = Some(MigId {
            gpu_instance: 1,
            compute_instance: 0,
        });
        let lost = Device::unavailable(0, DeviceStatus::Lost("fallen off the bus".into()), "GPU lost");
        let snapshot = testing::snapshot(taken_at, vec![lost, device()], vec![p]);
        let wire = WireSnapshot::from(&snapshot);
        let text = serde_json::to_string(&wire).unwrap();
        let back: WireSnapshot = serde_json::from_str(&text).unwrap();
        assert_eq!(back, wire);
        let back = back.into_snapshot(taken_at).unwrap();
        assert_eq!(WireSnapshot::from(&back), wire, "the same on the wire again");
        assert_eq!(back.taken_at, taken_at);
        assert_eq!(
            back.devices[0].status,
            DeviceStatus::Lost("fallen off the bus".into())
        );
        let (d, original) = (&back.devices[1], &snapshot.devices[1]);
        assert_eq!(
            d.temperature,
            Reading::NotSupported,
            "failed reads back unsupported"
        );
        assert_eq!(d.memory, original.memory);
        assert_eq!(d.bar1, original.bar1);
        assert_eq!(d.utilization_gpu_window, original.utilization_gpu_window);
        assert_eq!(d.power_usage_mw, original.power_usage_mw);
        assert_eq!(d.energy_mj, original.energy_mj);
        assert_eq!(d.throttle_reasons, original.throttle_reasons);
        assert_eq!(d.mig_devices[0].profile, original.mig_devices[0].profile);
        assert_eq!(d.processes_unlisted, original.processes_unlisted);
        let (p, original) = (&back.processes[0], &snapshot.processes[0]);
        assert_eq!(p.mig, original.mig);
        assert_eq!(p.host.mapping, original.host.mapping);
        assert_eq!(p.host.user, original.host.user);
        assert_eq!(p.gpu_memory_bytes, original.gpu_memory_bytes);
    }

    #[test]
    fn readings_are_values_in_their_units_and_unknown_ones_null() {
        let wire = WireDevice::from(&device());
        let value = serde_json::to_value(&wire).unwrap();
        assert!(value["temperature_celsius"].is_null(), "failed");
        assert!(value["fan_speeds_percent"].is_null(), "not supported");
        assert_eq!(value["power_usage_watts"], 312.5);
        assert_eq!(value["energy_joules"], 123_456.789);
        assert_eq!(value["pcie_tx_bytes_per_second"], 4096 * 1024);
        assert_eq!(value["utilization_gpu_peak_percent"], 99.0);
    }

    /// The host's load is its own wire form: a value or null, the CPU with two decimals,
    /// and a key an older writer left out reads back as not supported.
    #[test]
    fn the_host_is_its_own_wire_form() {
        let host = HostStats {
            cpu_percent: Reading::Value(12.3456),
            memory_total_bytes: Reading::Value(64 << 30),
            swap_total_bytes: Reading::failed("no /proc/meminfo"),
            ..HostStats::default()
        };
        let value = serde_json::to_value(&host).unwrap();
        assert_eq!(value["cpu_percent"], 12.35);
        assert_eq!(value["memory_total_bytes"], 64_u64 << 30);
        assert!(value["swap_total_bytes"].is_null(), "failed");
        assert!(value["uptime_seconds"].is_null(), "not supported");
        let back: HostStats = serde_json::from_str(r#"{"memory_total_bytes": 1024}"#).unwrap();
        assert_eq!(back.memory_total_bytes, Reading::Value(1024));
        assert_eq!(back.cpu_percent, Reading::NotSupported, "absent");
    }

    #[test]
    fn values_out_of_range_are_refused_with_their_place() {
        let p = testing::process(4242, 0, "alice", 3 << 30);
        let snapshot = testing::snapshot(UNIX_EPOCH, vec![device()], vec![p]);
        let mut wire = WireSnapshot::from(&snapshot);
        wire.devices[0].index = 0;
        assert!(wire.clone().into_snapshot(UNIX_EPOCH).is_ok());
        wire.devices[0].utilization_gpu_percent = Some(4_000);
        assert_eq!(
            wire.clone().check().unwrap_err().to_string(),
            "devices[0].utilization_gpu_percent: 4000 is over 100"
        );
        wire.devices[0].utilization_gpu_percent = Some(40);
        wire.devices[0].power_usage_watts = Some(-1.0);
        assert!(
            wire.check()
                .unwrap_err()
                .to_string()
                .starts_with("devices[0].power_usage_watts: -1")
        );
        wire.devices[0].power_usage_watts = None;
        wire.hostname = "h".repeat(limits::TEXT_BYTES + 1);
        assert!(
            wire.check()
                .unwrap_err()
                .to_string()
                .starts_with("hostname: a string of 65537 bytes")
        );
        wire.hostname = "h".into();
        wire.devices.push(wire.devices[0].clone());
        assert!(wire.check().unwrap_err().to_string().contains("is listed twice"));
        let too_many = format!(
            "{{\"version\":1,\"timestamp\":\"\",\"hostname\":\"h\",\"driver_version\":null,\
             \"cuda_driver_version\":null,\"nvml_version\":null,\"host\":{{}},\"processes\":[],\
             \"devices\":[{}]}}",
            vec![r#"{"index":0,"status":"ok"}"#; limits::DEVICES + 1].join(",")
        );
        let error = serde_json::from_str::<WireSnapshot>(&too_many)
            .unwrap_err()
            .to_string();
        assert!(error.contains("more than 64 items"), "{error}");
    }
}

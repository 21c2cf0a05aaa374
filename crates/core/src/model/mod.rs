//! The snapshot: plain data that flows from the collector to every reader.
//!
//! No handles, no locks, no I/O. Every metric is a [`Reading`]: a value, not supported, or
//! failed with its reason; readers print `N/A` or `null`, never 0 for unknown.

pub mod order;
pub mod recording;
pub mod wire;

use std::time::SystemTime;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One metric as read from the driver or the OS.
#[derive(Debug, Clone, PartialEq)]
pub enum Reading<T> {
    /// The value read.
    Value(T),
    /// The device or driver does not offer this metric.
    NotSupported,
    /// Reading it failed; the reason is kept for diagnostics.
    Failed(String),
}

impl<T> Reading<T> {
    /// A failed reading, with `reason`.
    pub fn failed(reason: &str) -> Self {
        Self::Failed(reason.to_string())
    }

    /// The value, if there is one.
    pub fn value(&self) -> Option<&T> {
        match self {
            Self::Value(v) => Some(v),
            _ => None,
        }
    }

    /// The value changed by `f`; not supported and failed stay so.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Reading<U> {
        match self {
            Self::Value(v) => Reading::Value(f(v)),
            Self::NotSupported => Reading::NotSupported,
            Self::Failed(reason) => Reading::Failed(reason),
        }
    }
}

impl<T: Copy> Reading<T> {
    /// A copy of the value, if there is one.
    pub fn get(&self) -> Option<T> {
        self.value().copied()
    }
}

/// Nothing read: not supported.
impl<T> Default for Reading<T> {
    fn default() -> Self {
        Self::NotSupported
    }
}

/// On the wire a reading is its value, or `null` whether unsupported or failed: the reason
/// a reading failed stays on the machine that read it.
impl<T: Serialize> Serialize for Reading<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(serializer)
    }
}

/// From the wire, `null` (or a missing key, with `#[serde(default)]`) is "not supported".
impl<'de, T: Deserialize<'de>> Deserialize<'de> for Reading<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Option::<T>::deserialize(deserializer)?.map_or(Self::NotSupported, Self::Value))
    }
}

/// Its schema is its value's, or `null`.
impl<T: JsonSchema> JsonSchema for Reading<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        Option::<T>::schema_name()
    }

    fn inline_schema() -> bool {
        Option::<T>::inline_schema()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        Option::<T>::json_schema(generator)
    }
}

/// Mean and peak of a metric over the last interval, from the driver's sample buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// The time-weighted mean of the samples.
    pub mean: f64,
    /// The highest sample.
    pub peak: f64,
    /// The driver samples behind mean and peak; 0 when its buffer held none (an idle GPU's
    /// runs dry), and mean and peak are then the current reading.
    pub samples: usize,
}

/// Whether a device answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceStatus {
    /// It answers.
    Ok,
    /// Fallen off the bus or otherwise gone; the other GPUs go on.
    Lost(String),
    /// Unusable for another reason (reset required, no permission, ...).
    Failed(String),
}

/// A GPU's (or MIG device's) memory, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// All of it.
    pub total: u64,
    /// Allocated by processes and contexts.
    pub used: u64,
    /// Neither used nor reserved.
    pub free: u64,
    /// Reserved by the driver and firmware; not part of `used`.
    pub reserved: u64,
}

/// The BAR1 aperture through which the host maps GPU memory, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bar1 {
    /// All of it.
    pub total: u64,
    /// Mapped now.
    pub used: u64,
}

/// Clock frequencies, MHz.
#[derive(Debug, Clone, PartialEq)]
pub struct Clocks {
    /// The graphics clock.
    pub graphics: Reading<u32>,
    /// The SM clock.
    pub sm: Reading<u32>,
    /// The memory clock.
    pub memory: Reading<u32>,
    /// The video (encoder and decoder) clock.
    pub video: Reading<u32>,
}

/// A GPU's PCIe link.
#[derive(Debug, Clone, PartialEq)]
pub struct PcieLink {
    /// The generation it runs at now (it falls when idle).
    pub generation: Reading<u32>,
    /// The lanes it runs on now.
    pub width: Reading<u32>,
    /// The highest generation the GPU and its slot allow.
    pub max_generation: Reading<u32>,
    /// The most lanes the GPU and its slot allow.
    pub max_width: Reading<u32>,
}

/// A MIG device's place in its GPU: GPU instance and compute instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MigId {
    /// The GPU instance.
    pub gpu_instance: u32,
    /// The compute instance within it.
    pub compute_instance: u32,
}

/// One MIG device: a slice of a GPU with its own memory and compute.
#[derive(Debug, Clone, PartialEq)]
pub struct MigDevice {
    /// Its GPU and compute instance.
    pub id: MigId,
    /// As nvidia-smi names it: `3g.40gb`.
    pub profile: Reading<String>,
    /// `MIG-...`: what `CUDA_VISIBLE_DEVICES` takes.
    pub uuid: Reading<String>,
    /// Its own memory.
    pub memory: Reading<Memory>,
    /// Most drivers do not report utilization per MIG device.
    pub utilization_gpu: Reading<u32>,
    /// The pods' containers the kubelet allocated this MIG device to.
    pub pods: Vec<PodContainer>,
}

/// One GPU at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    /// NVML's index.
    pub index: u32,
    /// Whether it answers.
    pub status: DeviceStatus,
    /// The product name: `NVIDIA H100 80GB HBM3`.
    pub name: Reading<String>,
    /// `GPU-...`: what `CUDA_VISIBLE_DEVICES` takes.
    pub uuid: Reading<String>,
    /// `00000000:17:00.0`.
    pub pci_bus_id: Reading<String>,
    /// Percent of the last sample period in which a kernel ran.
    pub utilization_gpu: Reading<u32>,
    /// Percent of the last sample period in which memory was read or written.
    pub utilization_memory: Reading<u32>,
    /// `utilization_gpu` over the last interval, from the driver's sample buffer.
    pub utilization_gpu_window: Reading<Window>,
    /// `utilization_memory` over the last interval, from the driver's sample buffer.
    pub utilization_memory_window: Reading<Window>,
    /// Its memory.
    pub memory: Reading<Memory>,
    /// Its BAR1 aperture.
    pub bar1: Reading<Bar1>,
    /// Degrees Celsius, the GPU core's.
    pub temperature: Reading<u32>,
    /// Degrees Celsius at which the GPU slows its clocks.
    pub temperature_slowdown: Reading<u32>,
    /// Degrees Celsius at which the GPU shuts down.
    pub temperature_shutdown: Reading<u32>,
    /// Per fan, in percent.
    pub fan_speeds: Reading<Vec<u32>>,
    /// Power draw now, milliwatts.
    pub power_usage_mw: Reading<u32>,
    /// Mean and peak power draw (mW) over the last interval, from the driver's sample buffer.
    pub power_usage_window: Reading<Window>,
    /// The power limit set, milliwatts.
    pub power_limit_mw: Reading<u32>,
    /// The power limit in force (the least of every limit), milliwatts.
    pub power_enforced_limit_mw: Reading<u32>,
    /// Energy used since the driver loaded, millijoules (Volta and newer).
    pub energy_mj: Reading<u64>,
    /// The performance state: 0 (P0, most) to 15 (P15, least).
    pub performance_state: Reading<u32>,
    /// Clocks now.
    pub clocks: Clocks,
    /// The highest clocks it allows.
    pub max_clocks: Clocks,
    /// Its PCIe link.
    pub pcie_link: PcieLink,
    /// PCIe bytes sent per second, in KB/s as NVML gives them (a 20 ms sample).
    pub pcie_tx_kbps: Reading<u32>,
    /// PCIe bytes received per second, in KB/s as NVML gives them (a 20 ms sample).
    pub pcie_rx_kbps: Reading<u32>,
    /// Video encoder utilization, percent.
    pub encoder: Reading<u32>,
    /// Video decoder utilization, percent.
    pub decoder: Reading<u32>,
    /// Whether ECC is on.
    pub ecc_enabled: Reading<bool>,
    /// Uncorrected ECC errors since the driver loaded.
    pub ecc_uncorrected_volatile: Reading<u64>,
    /// Rows remapped after memory errors (Ampere and newer).
    pub remapped_rows: Reading<RemappedRows>,
    /// Pages retired after ECC errors (Kepler to Turing).
    pub retired_pages: Reading<RetiredPages>,
    /// Its NVLinks (SXM boards), by link number.
    pub nvlinks: Reading<Vec<NvLink>>,
    /// Xid errors the driver reported while gputop watched its events (the view, the
    /// exporter; a one-shot watches none).
    pub xid_errors: Reading<XidErrors>,
    /// `Default`, `Exclusive_Process` or `Prohibited`, as nvidia-smi writes it.
    pub compute_mode: Reading<String>,
    /// Whether the driver stays loaded with no client.
    pub persistence_mode: Reading<bool>,
    /// Whether MIG mode is on.
    pub mig_enabled: Reading<bool>,
    /// What holds the clocks down now (NVML's clock event or throttle reasons), by the names
    /// of [`CLOCK_EVENT_REASONS`].
    pub throttle_reasons: Reading<Vec<String>>,
    /// With MIG enabled: its MIG devices, by GPU and compute instance.
    pub mig_devices: Vec<MigDevice>,
    /// The pods' containers the kubelet allocated this GPU to (its PodResources API):
    /// several when the GPU is shared; empty when none, or when gputop cannot ask.
    pub pods: Vec<PodContainer>,
    /// Why this GPU's processes could not be listed (the driver refused or failed), so an
    /// empty process table is not mistaken for an idle GPU.
    pub processes_unlisted: Option<String>,
}

impl Device {
    /// A device of which nothing could be read, with `status` saying why.
    pub fn unavailable(index: u32, status: DeviceStatus, reason: &str) -> Self {
        let clocks = || Clocks {
            graphics: Reading::failed(reason),
            sm: Reading::failed(reason),
            memory: Reading::failed(reason),
            video: Reading::failed(reason),
        };
        Self {
            index,
            status,
            name: Reading::failed(reason),
            uuid: Reading::failed(reason),
            pci_bus_id: Reading::failed(reason),
            utilization_gpu: Reading::failed(reason),
            utilization_memory: Reading::failed(reason),
            utilization_gpu_window: Reading::failed(reason),
            utilization_memory_window: Reading::failed(reason),
            memory: Reading::failed(reason),
            bar1: Reading::failed(reason),
            temperature: Reading::failed(reason),
            temperature_slowdown: Reading::failed(reason),
            temperature_shutdown: Reading::failed(reason),
            fan_speeds: Reading::failed(reason),
            power_usage_mw: Reading::failed(reason),
            power_usage_window: Reading::failed(reason),
            power_limit_mw: Reading::failed(reason),
            power_enforced_limit_mw: Reading::failed(reason),
            energy_mj: Reading::failed(reason),
            performance_state: Reading::failed(reason),
            clocks: clocks(),
            max_clocks: clocks(),
            pcie_link: PcieLink {
                generation: Reading::failed(reason),
                width: Reading::failed(reason),
                max_generation: Reading::failed(reason),
                max_width: Reading::failed(reason),
            },
            pcie_tx_kbps: Reading::failed(reason),
            pcie_rx_kbps: Reading::failed(reason),
            encoder: Reading::failed(reason),
            decoder: Reading::failed(reason),
            ecc_enabled: Reading::failed(reason),
            ecc_uncorrected_volatile: Reading::failed(reason),
            remapped_rows: Reading::failed(reason),
            retired_pages: Reading::failed(reason),
            nvlinks: Reading::failed(reason),
            xid_errors: Reading::failed(reason),
            compute_mode: Reading::failed(reason),
            persistence_mode: Reading::failed(reason),
            mig_enabled: Reading::failed(reason),
            throttle_reasons: Reading::failed(reason),
            mig_devices: Vec::new(),
            pods: Vec::new(),
            processes_unlisted: None,
        }
    }

    /// The first fan's speed, as nvidia-smi and nvitop show it.
    pub fn fan_speed(&self) -> Reading<u32> {
        match &self.fan_speeds {
            Reading::Value(fans) => fans.first().map_or(Reading::NotSupported, |f| Reading::Value(*f)),
            Reading::NotSupported => Reading::NotSupported,
            Reading::Failed(reason) => Reading::Failed(reason.clone()),
        }
    }

    /// Used memory as a percentage of the total.
    pub fn memory_percent(&self) -> Option<f64> {
        let memory = self.memory.value()?;
        (memory.total > 0).then(|| memory.used as f64 * 100.0 / memory.total as f64)
    }
}

/// What a process does on its GPU: compute (`C`), graphics (`G`) or both (`C+G`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "process_type")]
pub enum ProcessType {
    /// A compute (CUDA) context.
    #[serde(rename = "C")]
    Compute,
    /// A graphics context.
    #[serde(rename = "G")]
    Graphics,
    /// Both.
    #[serde(rename = "C+G")]
    ComputeGraphics,
}

impl ProcessType {
    /// `C`, `G` or `C+G`, as nvidia-smi writes it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Compute => "C",
            Self::Graphics => "G",
            Self::ComputeGraphics => "C+G",
        }
    }

    /// Whether it has a compute context.
    pub fn is_compute(self) -> bool {
        matches!(self, Self::Compute | Self::ComputeGraphics)
    }

    /// Whether it has a graphics context.
    pub fn is_graphics(self) -> bool {
        matches!(self, Self::Graphics | Self::ComputeGraphics)
    }

    /// The type of a process found in both lists, or in one list twice.
    pub fn merge(self, other: Self) -> Self {
        if self == other {
            self
        } else {
            Self::ComputeGraphics
        }
    }
}

/// What runs a containerised process, as its cgroup path tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "runtime")]
pub enum Runtime {
    /// Docker.
    Docker,
    /// Podman.
    Podman,
    /// containerd without Kubernetes.
    Containerd,
    /// CRI-O.
    #[serde(rename = "cri-o")]
    CriO,
    /// A Kubernetes pod (any runtime).
    Kubernetes,
    /// LXC or LXD.
    Lxc,
    /// A Slurm job.
    Slurm,
    /// A systemd slice or service.
    Systemd,
}

impl Runtime {
    /// The runtime's short name in labels: `docker`, `pod`, `slurm`, ...
    pub fn label(self) -> &'static str {
        match self {
            Self::Docker => "docker",
            Self::Podman => "podman",
            Self::Containerd => "containerd",
            Self::CriO => "cri-o",
            Self::Kubernetes => "pod",
            Self::Lxc => "lxc",
            Self::Slurm => "slurm",
            Self::Systemd => "systemd",
        }
    }
}

/// The container (or Kubernetes pod, Slurm job, systemd slice) a process runs in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Container {
    /// What runs it.
    pub runtime: Runtime,
    /// The container's short id (12 hex digits), the Slurm job number, the LXC name, or the
    /// systemd slice and service.
    pub id: String,
    /// Kubernetes: the pod's UID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Kubernetes: the pod's namespace and name and the container's, where the kubelet
    /// told them (see [`PodContainer`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<PodContainer>,
    /// Slurm: the job's user (the `uid_N` of its cgroup path, else the process's owner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

impl Container {
    /// A container of `runtime` known by `id` alone.
    pub fn new(runtime: Runtime, id: impl Into<String>) -> Self {
        Self {
            runtime,
            id: id.into(),
            pod: None,
            names: None,
            user: None,
        }
    }

    /// How the CONTAINER column, filters and groups name it: `docker:3f2a1b9c0d12`,
    /// `team-a/trainer-0/pytorch` (a pod by name), `pod:1a2b3c4d/3f2a1b9c0d12` (by UID),
    /// `slurm:4242`, `user-1000.slice`.
    pub fn label(&self) -> String {
        if let Some(names) = &self.names {
            return names.label();
        }
        match (&self.runtime, &self.pod) {
            (Runtime::Systemd, _) => self.id.clone(),
            (Runtime::Kubernetes, Some(pod)) => {
                format!("pod:{}/{}", pod.chars().take(8).collect::<String>(), self.id)
            }
            (runtime, _) => [runtime.label(), ":", &self.id].concat(),
        }
    }

    /// The CONTAINER label of a process in `container`, `-` for one on the host.
    pub fn label_of(container: Option<&Self>) -> String {
        container.map_or_else(|| "-".to_string(), Self::label)
    }
}

/// A Kubernetes pod's container by name, as the kubelet's PodResources API names the holder
/// of a device.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "pod_container", deny_unknown_fields)]
pub struct PodContainer {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// Empty when only the pod is known.
    pub container: String,
}

impl PodContainer {
    /// `namespace/pod/container` (`namespace/pod` without a container).
    pub fn label(&self) -> String {
        if self.container.is_empty() {
            format!("{}/{}", self.namespace, self.pod)
        } else {
            format!("{}/{}/{}", self.namespace, self.pod, self.container)
        }
    }
}

/// How a PID NVML reported relates to gputop's own PID namespace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PidMapping {
    /// The same number names the same process for gputop (same namespace, or verified).
    #[default]
    Same,
    /// gputop knows this process by another number in its own namespace (from NSpid).
    Mapped {
        /// Its PID in gputop's namespace.
        local_pid: u32,
    },
    /// gputop cannot reach this process: signals are disabled, and a local process that
    /// merely shares the number is never shown or signalled in its place.
    Unmapped {
        /// Why, in words.
        reason: String,
    },
}

/// Where gputop runs relative to the PID namespace NVML reports PIDs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "pid_namespace")]
pub enum PidNamespace {
    /// The host's (initial) PID namespace: NVML's PIDs are gputop's.
    #[default]
    Host,
    /// A nested namespace, with a /proc that shows the host's PIDs: NSpid maps them.
    NestedHostProc,
    /// A container's own namespace and /proc: NVML's host PIDs cannot be mapped; a PID
    /// counts as gputop's only when that process holds an NVIDIA device file open.
    Container,
}

/// Facts about a process from the host (procfs), not from the GPU driver.
#[derive(Debug, Clone, PartialEq)]
pub struct HostFacts {
    /// The owner's user name (the uid's number where it has no name).
    pub user: Reading<String>,
    /// The real uid behind `user`; signals re-check it.
    pub uid: Reading<u32>,
    /// Its parent's PID.
    pub parent_pid: Reading<u32>,
    /// Its command line, arguments joined by spaces.
    pub command: Reading<String>,
    /// CPU since the previous reading, percent of one core.
    pub cpu_percent: Reading<f64>,
    /// Resident memory, bytes.
    pub memory_bytes: Reading<u64>,
    /// Seconds since the Unix epoch.
    pub start_time: Reading<u64>,
    /// Clock ticks after boot at which it started: with the PID, the kernel's own identity
    /// of a process, which signals check (two processes can start in the same second).
    pub start_ticks: Reading<u64>,
    /// Seconds since it started.
    pub running_seconds: Reading<u64>,
    /// From its cgroup; `None` on the host itself.
    pub container: Option<Container>,
    /// Its PID inside its own (container's) namespace, when that differs.
    pub namespace_pid: Option<u32>,
    /// Whether, and by which number, gputop can reach it.
    pub mapping: PidMapping,
}

impl HostFacts {
    /// For a PID the host does not know (exited, or in another PID namespace).
    pub fn gone(reason: &str) -> Self {
        Self {
            user: Reading::failed(reason),
            uid: Reading::failed(reason),
            parent_pid: Reading::failed(reason),
            command: Reading::failed(reason),
            cpu_percent: Reading::failed(reason),
            memory_bytes: Reading::failed(reason),
            start_time: Reading::failed(reason),
            start_ticks: Reading::failed(reason),
            running_seconds: Reading::failed(reason),
            container: None,
            namespace_pid: None,
            mapping: PidMapping::Same,
        }
    }

    /// Until the host reader fills them in (a GPU source's processes before `assemble`);
    /// nothing to allocate for the many processes read at every refresh.
    pub fn unread() -> Self {
        Self {
            user: Reading::NotSupported,
            uid: Reading::NotSupported,
            parent_pid: Reading::NotSupported,
            command: Reading::NotSupported,
            cpu_percent: Reading::NotSupported,
            memory_bytes: Reading::NotSupported,
            start_time: Reading::NotSupported,
            start_ticks: Reading::NotSupported,
            running_seconds: Reading::NotSupported,
            container: None,
            namespace_pid: None,
            mapping: PidMapping::Same,
        }
    }

    /// For an NVML PID gputop cannot reach from its PID namespace.
    pub fn unmapped(reason: &str) -> Self {
        Self {
            mapping: PidMapping::Unmapped {
                reason: reason.to_string(),
            },
            ..Self::gone(reason)
        }
    }
}

/// One process on one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuProcess {
    /// Its PID as NVML reports it (the host's PID namespace).
    pub pid: u32,
    /// The GPU's index.
    pub gpu_index: u32,
    /// The GPU's UUID.
    pub gpu_uuid: Reading<String>,
    /// Compute, graphics or both.
    pub kind: ProcessType,
    /// GPU memory it holds.
    pub gpu_memory_bytes: Reading<u64>,
    /// SM utilization over the last interval, percent.
    pub sm_percent: Reading<u32>,
    /// Memory-bandwidth utilization over the last interval, percent.
    pub memory_bandwidth_percent: Reading<u32>,
    /// Video encoder utilization over the last interval, percent.
    pub encoder_percent: Reading<u32>,
    /// Video decoder utilization over the last interval, percent.
    pub decoder_percent: Reading<u32>,
    /// On a MIG-enabled GPU: the MIG device it runs on.
    pub mig: Option<MigId>,
    /// What the host knows of it.
    pub host: HostFacts,
}

impl GpuProcess {
    /// The PID to signal in gputop's namespace; `None` when gputop cannot reach it.
    pub fn local_pid(&self) -> Option<u32> {
        match &self.host.mapping {
            PidMapping::Same => Some(self.pid),
            PidMapping::Mapped { local_pid } => Some(*local_pid),
            PidMapping::Unmapped { .. } => None,
        }
    }

    /// The CONTAINER label, `-` on the host.
    pub fn container_label(&self) -> String {
        Container::label_of(self.host.container.as_ref())
    }
}

/// The host's own load; on the wire as it is (`host`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
#[schemars(rename = "host", deny_unknown_fields)]
pub struct HostStats {
    /// CPU since the previous reading, percent of all cores.
    #[serde(serialize_with = "wire::two_decimals")]
    pub cpu_percent: Reading<f64>,
    /// Its memory.
    pub memory_total_bytes: Reading<u64>,
    /// Its memory in use (total less available).
    pub memory_used_bytes: Reading<u64>,
    /// Its swap.
    pub swap_total_bytes: Reading<u64>,
    /// Its swap in use.
    pub swap_used_bytes: Reading<u64>,
    /// Load averages over 1, 5 and 15 minutes.
    pub load_average: Reading<[f64; 3]>,
    /// Seconds since boot.
    pub uptime_seconds: Reading<u64>,
}

/// Driver-level facts.
#[derive(Debug, Clone, PartialEq)]
pub struct DriverInfo {
    /// The kernel driver's version: `550.54.15`.
    pub driver_version: Reading<String>,
    /// The NVML library's version.
    pub nvml_version: Reading<String>,
    /// As `major.minor`, e.g. `12.4`.
    pub cuda_driver_version: Reading<String>,
}

/// Everything gputop knows at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// When it was taken.
    pub taken_at: SystemTime,
    /// The host's name.
    pub hostname: String,
    /// The driver's versions.
    pub driver: DriverInfo,
    /// The GPUs, by index.
    pub devices: Vec<Device>,
    /// Largest GPU memory first.
    pub processes: Vec<GpuProcess>,
    /// The host's own load.
    pub host: HostStats,
    /// How NVML's PIDs relate to gputop's.
    pub pid_namespace: PidNamespace,
}

impl Snapshot {
    /// The GPUs whose processes could not be listed, and why.
    pub fn unlisted(&self) -> impl Iterator<Item = (u32, &str)> {
        self.devices
            .iter()
            .filter_map(|d| Some((d.index, d.processes_unlisted.as_deref()?)))
    }
}

/// What identifies a process row across refreshes and re-sorts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessKey {
    /// The PID as NVML reports it.
    pub pid: u32,
    /// When it started (seconds since the epoch), where known: PIDs are reused.
    pub start_time: Option<u64>,
    /// The GPU.
    pub gpu_index: u32,
}

impl ProcessKey {
    /// The key of process row `p`.
    pub fn of(p: &GpuProcess) -> Self {
        Self {
            pid: p.pid,
            start_time: p.host.start_time.get(),
            gpu_index: p.gpu_index,
        }
    }
}

/// Row remapping, as `nvmlDeviceGetRemappedRows` reports it: rows remapped after correctable
/// and after uncorrectable errors, a remap waiting for a GPU reset, and a remap that failed
/// (the GPU needs service).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemappedRows {
    /// Rows remapped after correctable errors.
    pub correctable: u32,
    /// Rows remapped after uncorrectable errors.
    pub uncorrectable: u32,
    /// A remap waits for a GPU reset.
    pub pending: bool,
    /// A remap failed: the GPU needs service.
    pub failure: bool,
}

/// Pages retired after multiple single-bit ECC errors and after a double-bit one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetiredPages {
    /// Pages retired after multiple single-bit errors.
    pub single_bit: u32,
    /// Pages retired after a double-bit error.
    pub double_bit: u32,
}

/// One NVLink: whether it is up, and its data link error counters since the driver loaded
/// (`null` for a link that is down, or a counter the driver does not keep).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "nvlink", deny_unknown_fields)]
pub struct NvLink {
    /// The link number.
    pub link: u32,
    /// Whether it is up.
    pub active: bool,
    /// Replay errors since the driver loaded; `null` for a link that is down.
    pub replay_errors: Option<u64>,
    /// Recovery errors since the driver loaded.
    pub recovery_errors: Option<u64>,
    /// CRC errors in flow-control units since the driver loaded.
    pub crc_flit_errors: Option<u64>,
    /// CRC errors in data since the driver loaded.
    pub crc_data_errors: Option<u64>,
}

/// The Xids applications cause (an illegal access, a page fault, a timeout): NVIDIA's
/// Kubernetes device plugin does not mark a GPU unhealthy for these (13, 31, 43, 45, 68,
/// 109; NVIDIA/k8s-device-plugin #1340). Every other Xid is critical: the GPU needs
/// attention (48 double-bit ECC, 63/64 row remapping, 74 NVLink, 94/95 contained and
/// uncontained ECC, ...).
pub const APPLICATION_XIDS: [u32; 6] = [13, 31, 43, 45, 68, 109];

/// Whether `xid` means the GPU needs attention (not one an application causes).
pub fn is_critical_xid(xid: u32) -> bool {
    !APPLICATION_XIDS.contains(&xid)
}

/// One Xid error as the driver reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XidEvent {
    /// The Xid number (NVIDIA's Xid catalogue explains each).
    pub xid: u32,
    /// When gputop received it.
    pub at: SystemTime,
}

/// The Xid errors of one GPU since gputop began watching its events. When several arrive
/// between two reads of the driver's event set, NVML reports the latest Xid for each of them
/// (nvml.h), so a count may name a later Xid for an earlier event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct XidErrors {
    /// Events per Xid, by Xid.
    pub counts: std::collections::BTreeMap<u32, u64>,
    /// The latest event.
    pub last: Option<XidEvent>,
    /// The latest event of a critical Xid.
    pub last_critical: Option<XidEvent>,
}

impl XidErrors {
    /// Counts one event.
    pub fn record(&mut self, event: XidEvent) {
        *self.counts.entry(event.xid).or_default() += 1;
        self.last = Some(event);
        if is_critical_xid(event.xid) {
            self.last_critical = Some(event);
        }
    }

    /// Events of critical Xids.
    pub fn critical(&self) -> u64 {
        self.counts
            .iter()
            .filter(|(xid, _)| is_critical_xid(**xid))
            .map(|(_, count)| count)
            .sum()
    }
}

/// NVML's clock event (throttle) reasons: each bit of `nvmlDeviceGetCurrentClocksEventReasons`
/// (`...ThrottleReasons` before R535) and its name, as nvml.h defines them.
pub const CLOCK_EVENT_REASONS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// The names of the reasons set in `bits`; a bit nvml.h does not name is shown as itself.
pub fn clock_event_names(bits: u64) -> Vec<String> {
    let known: u64 = CLOCK_EVENT_REASONS.iter().map(|(bit, _)| bit).sum();
    let mut names: Vec<String> = CLOCK_EVENT_REASONS
        .iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|(_, name)| (*name).to_string())
        .collect();
    if bits & !known != 0 {
        names.push(format!("0x{:x}", bits & !known));
    }
    names
}

/// Minimal values for unit tests elsewhere in the crate.
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use super::*;

    /// A compute process of `user` holding `memory_bytes` on `gpu`, with no other facts.
    pub fn process(pid: u32, gpu: u32, user: &str, memory_bytes: u64) -> GpuProcess {
        let mut host = HostFacts::gone("test");
        host.user = Reading::Value(user.into());
        GpuProcess {
            pid,
            gpu_index: gpu,
            gpu_uuid: Reading::NotSupported,
            kind: ProcessType::Compute,
            gpu_memory_bytes: Reading::Value(memory_bytes),
            sm_percent: Reading::Value(0),
            memory_bandwidth_percent: Reading::Value(0),
            encoder_percent: Reading::Value(0),
            decoder_percent: Reading::Value(0),
            mig: None,
            host,
        }
    }

    /// A snapshot taken at `taken_at` holding only `devices` and `processes`.
    pub fn snapshot(taken_at: SystemTime, devices: Vec<Device>, processes: Vec<GpuProcess>) -> Snapshot {
        Snapshot {
            taken_at,
            hostname: "test".into(),
            driver: DriverInfo {
                driver_version: Reading::NotSupported,
                nvml_version: Reading::NotSupported,
                cuda_driver_version: Reading::NotSupported,
            },
            devices,
            processes,
            host: HostStats {
                cpu_percent: Reading::NotSupported,
                memory_total_bytes: Reading::NotSupported,
                memory_used_bytes: Reading::NotSupported,
                swap_total_bytes: Reading::NotSupported,
                swap_used_bytes: Reading::NotSupported,
                load_average: Reading::NotSupported,
                uptime_seconds: Reading::NotSupported,
            },
            pid_namespace: PidNamespace::Host,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_is_labelled_by_its_pod_names_when_the_kubelet_gave_them() {
        let mut pod = Container {
            pod: Some("5e1f0000-aaaa-4bbb-8ccc-000000000001".into()),
            ..Container::new(Runtime::Kubernetes, "a1a1a1a1a1a1")
        };
        assert_eq!(pod.label(), "pod:5e1f0000/a1a1a1a1a1a1");
        pod.names = Some(PodContainer {
            namespace: "ml".into(),
            pod: "trainer-0".into(),
            container: "pytorch".into(),
        });
        assert_eq!(pod.label(), "ml/trainer-0/pytorch");
        let names = pod.names.as_mut().unwrap();
        names.container.clear();
        assert_eq!(pod.label(), "ml/trainer-0", "only the pod known");
    }
}

//! The snapshot: plain data that flows from the collector to every reader.
//!
//! No handles, no locks, no I/O. Every metric is a [`Reading`]: a value, not supported, or
//! failed with its reason; readers print `N/A` or `null`, never 0 for unknown. These types
//! are also the wire form (`--json`, `/snapshot`, recordings): fields are named with their
//! units as the keys are, and figures the driver gives in one call (memory, BAR1, row
//! remapping) are separate fields with a setter and a getter for the group.

pub mod catalogue;
pub mod fleet;
pub mod order;
pub mod recording;
pub mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;
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

    /// The value through its `Deref`, as `Option::as_deref`: a `Reading<Arc<str>>`'s `&str`.
    pub fn as_deref(&self) -> Option<&T::Target>
    where
        T: std::ops::Deref,
    {
        self.value().map(|v| &**v)
    }

    /// A part of the value, by `f`; not supported and failed stay so (a group of figures
    /// read in one call, kept as one reading each).
    pub fn part<U>(&self, f: impl FnOnce(&T) -> U) -> Reading<U> {
        match self {
            Self::Value(v) => Reading::Value(f(v)),
            Self::NotSupported => Reading::NotSupported,
            Self::Failed(reason) => Reading::Failed(reason.clone()),
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

/// Who made a GPU, and so which source reads it: NVML for NVIDIA, the kernel's DRM
/// interfaces for AMD and Intel.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "vendor")]
pub enum Vendor {
    /// NVIDIA, through NVML.
    #[default]
    Nvidia,
    /// AMD (PCI vendor 0x1002), through amdgpu's sysfs, hwmon and fdinfo.
    Amd,
    /// Intel (PCI vendor 0x8086), through i915's or xe's sysfs, hwmon and fdinfo.
    Intel,
}

impl Vendor {
    /// As labels and JSON write it: `nvidia`, `amd`, `intel`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Nvidia => "nvidia",
            Self::Amd => "amd",
            Self::Intel => "intel",
        }
    }

    /// As the screen shows it: `NVIDIA`, `AMD`, `Intel`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Nvidia => "NVIDIA",
            Self::Amd => "AMD",
            Self::Intel => "Intel",
        }
    }
}

/// A class of GPU engine, across drivers (amdgpu's `gfx`, i915's `render` and xe's `rcs`
/// are all graphics); NVIDIA's are the process's SM, encoder and decoder figures instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "engine")]
pub enum Engine {
    /// 3D and general rendering.
    Graphics,
    /// Compute queues.
    Compute,
    /// Copy (blitter, SDMA).
    Copy,
    /// Video decode and encode.
    Video,
    /// Video post-processing.
    VideoEnhance,
    /// Any other engine the driver names.
    Other,
}

impl Engine {
    /// As labels and JSON write it: `graphics`, `video_enhance`, ...
    pub fn label(self) -> &'static str {
        match self {
            Self::Graphics => "graphics",
            Self::Compute => "compute",
            Self::Copy => "copy",
            Self::Video => "video",
            Self::VideoEnhance => "video_enhance",
            Self::Other => "other",
        }
    }
}

/// Whether a GPU answers: `ok`, `lost` (fallen off the bus) or `error` (unusable for
/// another reason: reset required, no permission, ...); `status_reason` says why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "status")]
pub enum DeviceStatus {
    /// It answers.
    #[default]
    Ok,
    /// Fallen off the bus or otherwise gone; the other GPUs go on.
    Lost,
    /// Unusable for another reason.
    Error,
}

/// A GPU's (or MIG device's) memory, in bytes: [`Device::memory`]'s figures together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// All of it.
    pub total: u64,
    /// Allocated by processes and contexts.
    pub used: u64,
    /// Neither used nor reserved.
    pub free: u64,
    /// Reserved by the driver and firmware; not part of `used` (0 where unknown).
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

/// Row remapping, as `nvmlDeviceGetRemappedRows` reports it in one call.
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

/// A MIG device's place in its GPU: GPU instance and compute instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MigId {
    /// The GPU instance.
    pub gpu_instance: u32,
    /// The compute instance within it.
    pub compute_instance: u32,
}

/// One MIG device: a slice of a GPU with its own memory and compute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "mig_device", deny_unknown_fields)]
pub struct MigDevice {
    /// The GPU instance.
    pub gpu_instance_id: u32,
    /// The compute instance within it.
    pub compute_instance_id: u32,
    /// As nvidia-smi names it: `3g.40gb`.
    pub profile: Reading<String>,
    /// `MIG-...`: what `CUDA_VISIBLE_DEVICES` takes.
    pub uuid: Reading<String>,
    /// All its memory.
    pub memory_total_bytes: Reading<u64>,
    /// Its memory in use.
    pub memory_used_bytes: Reading<u64>,
    /// Its memory free.
    pub memory_free_bytes: Reading<u64>,
    /// Most drivers do not report utilization per MIG device.
    pub utilization_gpu_percent: Reading<u32>,
    /// The pods' containers the kubelet allocated the MIG device to.
    #[serde(
        default,
        deserialize_with = "wire::bounded::<{ wire::limits::SHORT_LIST }, _, _>"
    )]
    #[schemars(length(max = wire::limits::SHORT_LIST))]
    pub pods: Vec<PodContainer>,
}

impl MigDevice {
    /// A MIG device `id` of which nothing is read yet.
    pub fn new(id: MigId) -> Self {
        Self {
            gpu_instance_id: id.gpu_instance,
            compute_instance_id: id.compute_instance,
            profile: Reading::NotSupported,
            uuid: Reading::NotSupported,
            memory_total_bytes: Reading::NotSupported,
            memory_used_bytes: Reading::NotSupported,
            memory_free_bytes: Reading::NotSupported,
            utilization_gpu_percent: Reading::NotSupported,
            pods: Vec::new(),
        }
    }

    /// Its GPU and compute instance.
    pub fn id(&self) -> MigId {
        MigId {
            gpu_instance: self.gpu_instance_id,
            compute_instance: self.compute_instance_id,
        }
    }

    /// Its memory's figures together; known when total, used and free all are.
    pub fn memory(&self) -> Reading<Memory> {
        memory_of(
            [
                &self.memory_total_bytes,
                &self.memory_used_bytes,
                &self.memory_free_bytes,
            ],
            &Reading::NotSupported,
        )
    }

    /// Sets its memory's figures from one read.
    pub fn set_memory(&mut self, memory: Reading<Memory>) {
        self.memory_total_bytes = memory.part(|m| m.total);
        self.memory_used_bytes = memory.part(|m| m.used);
        self.memory_free_bytes = memory.part(|m| m.free);
    }
}

/// Not supported, or failed with `why`.
fn unknown<T>(why: Option<&str>) -> Reading<T> {
    why.map_or(Reading::NotSupported, Reading::failed)
}

/// Memory from its figures: known when total, used and free all are; failed when one
/// failed.
fn memory_of(figures: [&Reading<u64>; 3], reserved: &Reading<u64>) -> Reading<Memory> {
    match figures.map(Reading::get) {
        [Some(total), Some(used), Some(free)] => Reading::Value(Memory {
            total,
            used,
            free,
            reserved: reserved.get().unwrap_or(0),
        }),
        _ => figures
            .into_iter()
            .find_map(|f| match f {
                Reading::Failed(reason) => Some(Reading::Failed(reason.clone())),
                _ => None,
            })
            .unwrap_or(Reading::NotSupported),
    }
}

/// One GPU at one instant, as the wire form has it: units in the field names, an unknown
/// value `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "device", deny_unknown_fields)]
pub struct Device {
    /// gputop's index: NVML's for NVIDIA GPUs, then AMD and Intel GPUs in the kernel's
    /// order (`cardN`).
    pub index: u32,
    /// Who made it.
    #[serde(default)]
    pub vendor: Vendor,
    /// The kernel driver: `nvidia`, `amdgpu`, `i915` or `xe`.
    pub driver: Reading<String>,
    /// Its driver's version: NVIDIA's driver version; for amdgpu, i915 and xe the kernel
    /// module's own version where sysfs has one, else the kernel's release.
    #[serde(default)]
    pub driver_version: Reading<String>,
    /// The product name: `NVIDIA H100 80GB HBM3`.
    pub name: Reading<String>,
    /// `GPU-...`: what `CUDA_VISIBLE_DEVICES` takes.
    pub uuid: Reading<String>,
    /// `00000000:17:00.0`.
    pub pci_bus_id: Reading<String>,
    /// Whether it answers.
    pub status: DeviceStatus,
    /// Why it does not (`null` when it does).
    pub status_reason: Option<String>,
    /// Percent of the last sample period in which a kernel ran.
    pub utilization_gpu_percent: Reading<u32>,
    /// `utilization_gpu_percent`'s mean over the last interval, from the driver's samples
    /// (the current reading where its buffer held none: an idle GPU's runs dry).
    #[serde(serialize_with = "wire::two_decimals")]
    pub utilization_gpu_mean_percent: Reading<f64>,
    /// `utilization_gpu_percent`'s peak over the last interval, from the driver's samples.
    #[serde(serialize_with = "wire::two_decimals")]
    pub utilization_gpu_peak_percent: Reading<f64>,
    /// Percent of the last sample period in which memory was read or written.
    pub utilization_memory_percent: Reading<u32>,
    /// `utilization_memory_percent`'s mean over the last interval.
    #[serde(serialize_with = "wire::two_decimals")]
    pub utilization_memory_mean_percent: Reading<f64>,
    /// `utilization_memory_percent`'s peak over the last interval.
    #[serde(serialize_with = "wire::two_decimals")]
    pub utilization_memory_peak_percent: Reading<f64>,
    /// All its memory.
    pub memory_total_bytes: Reading<u64>,
    /// Memory allocated by processes and contexts.
    pub memory_used_bytes: Reading<u64>,
    /// Memory neither used nor reserved.
    pub memory_free_bytes: Reading<u64>,
    /// Memory reserved by the driver and firmware; not part of `memory_used_bytes`.
    pub memory_reserved_bytes: Reading<u64>,
    /// The BAR1 aperture through which the host maps GPU memory.
    pub bar1_total_bytes: Reading<u64>,
    /// BAR1 mapped now.
    pub bar1_used_bytes: Reading<u64>,
    /// AMD: the GTT, system memory the GPU maps, in all (`null` elsewhere).
    pub gtt_total_bytes: Reading<u64>,
    /// AMD: the GTT in use.
    pub gtt_used_bytes: Reading<u64>,
    /// The GPU core's temperature.
    pub temperature_celsius: Reading<u32>,
    /// The GPU memory's temperature: NVIDIA's HBM boards (not GDDR ones), amdgpu's `mem`
    /// sensor.
    #[serde(default)]
    pub memory_temperature_celsius: Reading<u32>,
    /// The temperature at which the GPU slows its clocks.
    pub temperature_slowdown_celsius: Reading<u32>,
    /// The temperature at which the GPU shuts down.
    pub temperature_shutdown_celsius: Reading<u32>,
    /// The first fan's, as nvidia-smi and nvitop show it.
    pub fan_speed_percent: Reading<u32>,
    /// Every fan's speed, in the driver's order.
    #[serde(
        default,
        deserialize_with = "wire::bounded_reading::<{ wire::limits::SHORT_LIST }, _, _>"
    )]
    #[schemars(length(max = wire::limits::SHORT_LIST))]
    pub fan_speeds_percent: Reading<Vec<u32>>,
    /// Power draw now: NVML's power usage, which Ampere (but GA100) and newer GPUs average
    /// over a second.
    pub power_usage_watts: Reading<f64>,
    /// Power draw at this instant, where the driver gives it apart from `power_usage_watts`
    /// (NVML's field value `NVML_FI_DEV_POWER_INSTANT`).
    #[serde(default, serialize_with = "wire::two_decimals")]
    pub power_instant_watts: Reading<f64>,
    /// Power draw's mean over the last interval, from the driver's samples.
    #[serde(serialize_with = "wire::two_decimals")]
    pub power_usage_mean_watts: Reading<f64>,
    /// Power draw's peak over the last interval, from the driver's samples.
    #[serde(serialize_with = "wire::two_decimals")]
    pub power_usage_peak_watts: Reading<f64>,
    /// The power limit set.
    pub power_limit_watts: Reading<f64>,
    /// The power limit in force (the least of every limit).
    pub power_enforced_limit_watts: Reading<f64>,
    /// Energy used since the driver loaded (Volta and newer).
    pub energy_joules: Reading<f64>,
    /// The performance state: 0 (P0, most) to 15 (P15, least).
    pub performance_state: Reading<u32>,
    /// The graphics clock now.
    pub clock_graphics_mhz: Reading<u32>,
    /// The SM clock now.
    pub clock_sm_mhz: Reading<u32>,
    /// The memory clock now.
    pub clock_memory_mhz: Reading<u32>,
    /// The video (encoder and decoder) clock now.
    pub clock_video_mhz: Reading<u32>,
    /// The highest graphics clock the GPU allows.
    pub clock_max_graphics_mhz: Reading<u32>,
    /// The highest SM clock the GPU allows.
    pub clock_max_sm_mhz: Reading<u32>,
    /// The highest memory clock the GPU allows.
    pub clock_max_memory_mhz: Reading<u32>,
    /// The highest video clock the GPU allows.
    pub clock_max_video_mhz: Reading<u32>,
    /// The PCIe generation the link runs at now (it falls when idle).
    pub pcie_link_generation: Reading<u32>,
    /// The PCIe lanes the link runs on now.
    pub pcie_link_width: Reading<u32>,
    /// The highest PCIe generation the GPU and its slot allow.
    pub pcie_link_max_generation: Reading<u32>,
    /// The most PCIe lanes the GPU and its slot allow.
    pub pcie_link_max_width: Reading<u32>,
    /// PCIe bytes sent per second (a 20 ms sample of the driver's).
    pub pcie_tx_bytes_per_second: Reading<u64>,
    /// PCIe bytes received per second (a 20 ms sample of the driver's).
    pub pcie_rx_bytes_per_second: Reading<u64>,
    /// Video encoder utilization.
    pub encoder_utilization_percent: Reading<u32>,
    /// Video decoder utilization.
    pub decoder_utilization_percent: Reading<u32>,
    /// Whether ECC is on.
    pub ecc_enabled: Reading<bool>,
    /// Uncorrected ECC errors since the driver loaded.
    pub ecc_uncorrected_volatile_errors: Reading<u64>,
    /// Rows remapped after correctable memory errors (Ampere and newer).
    pub remapped_rows_correctable: Reading<u32>,
    /// Rows remapped after uncorrectable memory errors.
    pub remapped_rows_uncorrectable: Reading<u32>,
    /// A row remap waits for a GPU reset.
    pub remapped_rows_pending: Reading<bool>,
    /// A row remap failed: the GPU needs service.
    pub remapped_rows_failure: Reading<bool>,
    /// Pages retired after multiple single-bit ECC errors (Kepler to Turing).
    pub retired_pages_single_bit: Reading<u32>,
    /// Pages retired after a double-bit ECC error.
    pub retired_pages_double_bit: Reading<u32>,
    /// Its NVLinks (SXM boards), by link number.
    #[serde(
        default,
        deserialize_with = "wire::bounded_reading::<{ wire::limits::SHORT_LIST }, _, _>"
    )]
    #[schemars(length(max = wire::limits::SHORT_LIST))]
    pub nvlinks: Reading<Vec<NvLink>>,
    /// Events per Xid while gputop watched the driver's events, by Xid; `null` when it did
    /// not (a one-shot watches none).
    #[serde(
        default,
        deserialize_with = "wire::bounded_reading::<{ wire::limits::SHORT_LIST }, _, _>"
    )]
    #[schemars(length(max = wire::limits::SHORT_LIST))]
    pub xid_errors: Reading<Vec<XidCount>>,
    /// The latest Xid error.
    #[serde(default)]
    pub last_xid: Option<XidEvent>,
    /// The latest critical one (an Xid applications do not cause).
    #[serde(default)]
    pub last_critical_xid: Option<XidEvent>,
    /// `Default`, `Exclusive_Process` or `Prohibited`, as nvidia-smi writes it.
    pub compute_mode: Reading<String>,
    /// Whether the driver stays loaded with no client.
    pub persistence_mode: Reading<bool>,
    /// Whether MIG mode is on.
    pub mig_mode: Reading<bool>,
    /// What holds the clocks down now (NVML's clock event reasons): `sw_power_cap`, ...
    #[serde(
        default,
        deserialize_with = "wire::bounded_reading::<{ wire::limits::SHORT_LIST }, _, _>"
    )]
    #[schemars(length(max = wire::limits::SHORT_LIST))]
    pub throttle_reasons: Reading<Vec<String>>,
    /// With MIG on: its MIG devices, by GPU and compute instance.
    #[serde(
        default,
        deserialize_with = "wire::bounded::<{ wire::limits::MIG_DEVICES }, _, _>"
    )]
    #[schemars(length(max = wire::limits::MIG_DEVICES))]
    pub mig_devices: Vec<MigDevice>,
    /// The pods' containers the kubelet allocated the GPU to (its PodResources API): several
    /// when the GPU is shared; empty when none, or when gputop cannot ask.
    #[serde(
        default,
        deserialize_with = "wire::bounded::<{ wire::limits::SHORT_LIST }, _, _>"
    )]
    #[schemars(length(max = wire::limits::SHORT_LIST))]
    pub pods: Vec<PodContainer>,
    /// Why this GPU's processes could not be listed (the driver refused or failed), so an
    /// empty process table is not mistaken for an idle GPU.
    pub process_list_error: Option<String>,
}

impl Device {
    /// A device of which nothing could be read, with `status` saying why (`reason` is the
    /// status's reason unless the device answers).
    pub fn unavailable(index: u32, status: DeviceStatus, reason: &str) -> Self {
        Self {
            status,
            status_reason: (status != DeviceStatus::Ok).then(|| reason.to_string()),
            ..Self::blank(index, Vendor::Nvidia, Some(reason))
        }
    }

    /// A device of `vendor` of which nothing is read yet: every reading not supported until
    /// its source sets it.
    pub fn new(index: u32, vendor: Vendor) -> Self {
        Self::blank(index, vendor, None)
    }

    /// Every reading failed with `why`, or not supported without one.
    fn blank(index: u32, vendor: Vendor, why: Option<&str>) -> Self {
        Self {
            index,
            vendor,
            driver: unknown(why),
            driver_version: unknown(why),
            name: unknown(why),
            uuid: unknown(why),
            pci_bus_id: unknown(why),
            status: DeviceStatus::Ok,
            status_reason: None,
            utilization_gpu_percent: unknown(why),
            utilization_gpu_mean_percent: unknown(why),
            utilization_gpu_peak_percent: unknown(why),
            utilization_memory_percent: unknown(why),
            utilization_memory_mean_percent: unknown(why),
            utilization_memory_peak_percent: unknown(why),
            memory_total_bytes: unknown(why),
            memory_used_bytes: unknown(why),
            memory_free_bytes: unknown(why),
            memory_reserved_bytes: unknown(why),
            bar1_total_bytes: unknown(why),
            bar1_used_bytes: unknown(why),
            gtt_total_bytes: unknown(why),
            gtt_used_bytes: unknown(why),
            temperature_celsius: unknown(why),
            memory_temperature_celsius: unknown(why),
            temperature_slowdown_celsius: unknown(why),
            temperature_shutdown_celsius: unknown(why),
            fan_speed_percent: unknown(why),
            fan_speeds_percent: unknown(why),
            power_usage_watts: unknown(why),
            power_instant_watts: unknown(why),
            power_usage_mean_watts: unknown(why),
            power_usage_peak_watts: unknown(why),
            power_limit_watts: unknown(why),
            power_enforced_limit_watts: unknown(why),
            energy_joules: unknown(why),
            performance_state: unknown(why),
            clock_graphics_mhz: unknown(why),
            clock_sm_mhz: unknown(why),
            clock_memory_mhz: unknown(why),
            clock_video_mhz: unknown(why),
            clock_max_graphics_mhz: unknown(why),
            clock_max_sm_mhz: unknown(why),
            clock_max_memory_mhz: unknown(why),
            clock_max_video_mhz: unknown(why),
            pcie_link_generation: unknown(why),
            pcie_link_width: unknown(why),
            pcie_link_max_generation: unknown(why),
            pcie_link_max_width: unknown(why),
            pcie_tx_bytes_per_second: unknown(why),
            pcie_rx_bytes_per_second: unknown(why),
            encoder_utilization_percent: unknown(why),
            decoder_utilization_percent: unknown(why),
            ecc_enabled: unknown(why),
            ecc_uncorrected_volatile_errors: unknown(why),
            remapped_rows_correctable: unknown(why),
            remapped_rows_uncorrectable: unknown(why),
            remapped_rows_pending: unknown(why),
            remapped_rows_failure: unknown(why),
            retired_pages_single_bit: unknown(why),
            retired_pages_double_bit: unknown(why),
            nvlinks: unknown(why),
            xid_errors: unknown(why),
            last_xid: None,
            last_critical_xid: None,
            compute_mode: unknown(why),
            persistence_mode: unknown(why),
            mig_mode: unknown(why),
            throttle_reasons: unknown(why),
            mig_devices: Vec::new(),
            pods: Vec::new(),
            process_list_error: None,
        }
    }

    /// Whether it answers.
    pub fn is_ok(&self) -> bool {
        self.status == DeviceStatus::Ok
    }

    /// Its memory's figures together; known when total, used and free all are.
    pub fn memory(&self) -> Reading<Memory> {
        memory_of(
            [
                &self.memory_total_bytes,
                &self.memory_used_bytes,
                &self.memory_free_bytes,
            ],
            &self.memory_reserved_bytes,
        )
    }

    /// Sets its memory's figures from one read.
    pub fn set_memory(&mut self, memory: Reading<Memory>) {
        self.memory_total_bytes = memory.part(|m| m.total);
        self.memory_used_bytes = memory.part(|m| m.used);
        self.memory_free_bytes = memory.part(|m| m.free);
        self.memory_reserved_bytes = memory.part(|m| m.reserved);
    }

    /// Its BAR1 aperture; known when total and used are.
    pub fn bar1(&self) -> Reading<Bar1> {
        match (&self.bar1_total_bytes, &self.bar1_used_bytes) {
            (Reading::Value(total), Reading::Value(used)) => Reading::Value(Bar1 {
                total: *total,
                used: *used,
            }),
            (Reading::Failed(reason), _) | (_, Reading::Failed(reason)) => Reading::Failed(reason.clone()),
            _ => Reading::NotSupported,
        }
    }

    /// Sets its BAR1 figures from one read.
    pub fn set_bar1(&mut self, bar1: Reading<Bar1>) {
        self.bar1_total_bytes = bar1.part(|b| b.total);
        self.bar1_used_bytes = bar1.part(|b| b.used);
    }

    /// Sets every fan's speed, and the first fan's.
    pub fn set_fan_speeds(&mut self, fans: Reading<Vec<u32>>) {
        self.fan_speed_percent = match &fans {
            Reading::Value(speeds) => speeds
                .first()
                .map_or(Reading::NotSupported, |f| Reading::Value(*f)),
            Reading::NotSupported => Reading::NotSupported,
            Reading::Failed(reason) => Reading::Failed(reason.clone()),
        };
        self.fan_speeds_percent = fans;
    }

    /// Its row remapping; known when all four figures are.
    pub fn remapped_rows(&self) -> Option<RemappedRows> {
        Some(RemappedRows {
            correctable: self.remapped_rows_correctable.get()?,
            uncorrectable: self.remapped_rows_uncorrectable.get()?,
            pending: self.remapped_rows_pending.get()?,
            failure: self.remapped_rows_failure.get()?,
        })
    }

    /// Sets its row remapping's figures from one read.
    pub fn set_remapped_rows(&mut self, rows: Reading<RemappedRows>) {
        self.remapped_rows_correctable = rows.part(|r| r.correctable);
        self.remapped_rows_uncorrectable = rows.part(|r| r.uncorrectable);
        self.remapped_rows_pending = rows.part(|r| r.pending);
        self.remapped_rows_failure = rows.part(|r| r.failure);
    }

    /// Its retired pages; known when both figures are.
    pub fn retired_pages(&self) -> Option<RetiredPages> {
        Some(RetiredPages {
            single_bit: self.retired_pages_single_bit.get()?,
            double_bit: self.retired_pages_double_bit.get()?,
        })
    }

    /// Sets its retired pages' figures from one read.
    pub fn set_retired_pages(&mut self, pages: Reading<RetiredPages>) {
        self.retired_pages_single_bit = pages.part(|p| p.single_bit);
        self.retired_pages_double_bit = pages.part(|p| p.double_bit);
    }

    /// Sets the Xid errors seen while watching its events (`Failed` when not watched).
    pub fn set_xid_errors(&mut self, errors: &Reading<XidErrors>) {
        self.xid_errors = errors.part(|e| {
            e.counts
                .iter()
                .map(|(&xid, &count)| XidCount { xid, count })
                .collect()
        });
        let errors = errors.value();
        self.last_xid = errors.and_then(|e| e.last);
        self.last_critical_xid = errors.and_then(|e| e.last_critical);
    }

    /// Events of critical Xids while gputop watched; `None` when it did not.
    pub fn critical_xids(&self) -> Option<u64> {
        let counts = self.xid_errors.value()?;
        Some(
            counts
                .iter()
                .filter(|c| is_critical_xid(c.xid))
                .map(|c| c.count)
                .sum(),
        )
    }

    /// Its utilisation as views show it: the mean over the last interval (the driver's
    /// samples), else the momentary reading.
    pub fn utilization_percent(&self) -> Option<f64> {
        self.utilization_gpu_mean_percent
            .get()
            .or_else(|| self.utilization_gpu_percent.get().map(f64::from))
    }

    /// Used memory as a percentage of the total.
    pub fn memory_percent(&self) -> Option<f64> {
        let (total, used) = (self.memory_total_bytes.get()?, self.memory_used_bytes.get()?);
        (total > 0).then(|| used as f64 * 100.0 / total as f64)
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
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "container", deny_unknown_fields)]
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
    /// told them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<PodContainer>,
    /// Slurm: the job's user (the `uid_N` of its cgroup path, else the process's owner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// How the CONTAINER column, filters and groups name it: `docker:3f2a1b9c0d12`,
    /// `team-a/trainer-0/pytorch` (a pod by name), `pod:1a2b3c4d/3f2a1b9c0d12` (by UID),
    /// `slurm:4242`, `user-1000.slice`.
    // Made from the fields above by the constructors and `set_names`; a snapshot read from
    // the wire makes it again.
    #[serde(default)]
    pub label: String,
}

impl Container {
    /// A container of `runtime` known by `id` alone.
    pub fn new(runtime: Runtime, id: impl Into<String>) -> Self {
        Self::labelled(Self {
            runtime,
            id: id.into(),
            pod: None,
            names: None,
            user: None,
            label: String::new(),
        })
    }

    /// A Kubernetes container `id` of the pod whose UID is `pod`.
    pub fn in_pod(id: impl Into<String>, pod: Option<String>) -> Self {
        Self::labelled(Self {
            pod,
            ..Self::new(Runtime::Kubernetes, id)
        })
    }

    /// Names it as the kubelet does, and labels it so.
    pub fn set_names(&mut self, names: PodContainer) {
        self.names = Some(names);
        self.relabel();
    }

    /// Makes its label again from its fields.
    pub fn relabel(&mut self) {
        self.label = if let Some(names) = &self.names {
            names.label()
        } else {
            match (&self.runtime, &self.pod) {
                (Runtime::Systemd, _) => self.id.clone(),
                (Runtime::Kubernetes, Some(pod)) => {
                    format!("pod:{}/{}", pod.chars().take(8).collect::<String>(), self.id)
                }
                (runtime, _) => [runtime.label(), ":", &self.id].concat(),
            }
        };
    }

    fn labelled(mut self) -> Self {
        self.relabel();
        self
    }

    /// How the CONTAINER column, filters and groups name it.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The CONTAINER label of a process in `container`, `-` for one on the host.
    pub fn label_of(container: Option<&Self>) -> &str {
        container.map_or("-", Self::label)
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

/// How the driver's PID names the process in gputop's own PID namespace: the `same` PID,
/// `mapped` to another (`local_pid`), or `unmapped` (`unmapped_reason` says why).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "pid_mapping")]
pub enum PidMapping {
    /// The same number names the same process for gputop (same namespace, or verified).
    #[default]
    Same,
    /// gputop knows this process by another number in its own namespace (from NSpid).
    Mapped,
    /// gputop cannot reach this process: signals are disabled, and a local process that
    /// merely shares the number is never shown or signalled in its place.
    Unmapped,
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

/// Facts about a process from the host (procfs), not from the GPU driver; on the wire
/// among the process's own keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HostFacts {
    /// The owner's user name (the uid's number where it has no name).
    // This, the command and the container are shared (`Arc`) with the collector's record
    // of the process, so a refresh copies none of their text.
    pub user: Reading<Arc<str>>,
    /// The real uid behind `user`; signals re-check it. Not on the wire: signals are never
    /// sent to a process read from the wire.
    #[serde(skip)]
    pub uid: Reading<u32>,
    /// Its parent's PID.
    #[serde(skip)]
    pub parent_pid: Reading<u32>,
    /// Its command line, arguments joined by spaces; `null` on `/snapshot` unless `gputop
    /// export --process-commands`.
    pub command: Reading<Arc<str>>,
    /// CPU since the previous reading, percent of one core.
    #[serde(serialize_with = "wire::two_decimals")]
    pub cpu_percent: Reading<f64>,
    /// Resident host memory.
    #[serde(rename = "host_memory_bytes")]
    pub memory_bytes: Reading<u64>,
    /// When it started, seconds since the Unix epoch.
    #[serde(rename = "start_time_unix_seconds")]
    pub start_time: Reading<u64>,
    /// Clock ticks after boot at which it started: with the PID, the kernel's own identity
    /// of a process, which signals check (two processes can start in the same second).
    #[serde(skip)]
    pub start_ticks: Reading<u64>,
    /// How long it has run.
    pub running_seconds: Reading<u64>,
    /// The container, pod, Slurm job or systemd slice it runs in; `null` on the host.
    pub container: Option<Arc<Container>>,
    /// Its PID inside its own container's namespace, when that differs.
    #[serde(rename = "container_pid")]
    pub namespace_pid: Option<u32>,
    /// The PID that names it in gputop's own namespace; `null` when unreachable.
    pub local_pid: Option<u32>,
    /// Whether gputop's PID namespace can reach it.
    pub pid_mapping: PidMapping,
    /// Why it cannot (`null` when it can).
    pub unmapped_reason: Option<String>,
}

impl HostFacts {
    /// For `pid`, which the host does not know (exited, or in another PID namespace).
    pub fn gone(pid: u32, reason: &str) -> Self {
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
            ..Self::unread(pid)
        }
    }

    /// Until the host reader fills them in (a GPU source's processes before `assemble`);
    /// nothing to allocate for the many processes read at every refresh.
    pub fn unread(pid: u32) -> Self {
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
            local_pid: Some(pid),
            pid_mapping: PidMapping::Same,
            unmapped_reason: None,
        }
    }

    /// For a driver's PID gputop cannot reach from its PID namespace.
    pub fn unmapped(reason: &str) -> Self {
        Self {
            local_pid: None,
            pid_mapping: PidMapping::Unmapped,
            unmapped_reason: Some(reason.to_string()),
            ..Self::gone(0, reason)
        }
    }
}

/// One process on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "process", deny_unknown_fields)]
pub struct GpuProcess {
    /// Its PID as the driver reports it (the host's PID namespace).
    pub pid: u32,
    /// The GPU's index.
    pub gpu_index: u32,
    /// The GPU's UUID.
    pub gpu_uuid: Reading<String>,
    /// Compute, graphics or both.
    #[serde(rename = "type")]
    pub kind: ProcessType,
    /// GPU memory it holds (AMD and Intel: resident in VRAM; on a GPU without VRAM, in
    /// system memory).
    pub gpu_memory_bytes: Reading<u64>,
    /// AMD and Intel: the memory it holds resident in system memory the GPU maps (GTT,
    /// system region); `null` for NVIDIA.
    pub gpu_system_memory_bytes: Reading<u64>,
    /// Its share of the GPU's compute over the last interval: NVIDIA's SM utilization; AMD
    /// and Intel: the busy share of every engine class summed, at most 100.
    pub sm_percent: Reading<u32>,
    /// AMD and Intel: each engine class's busy share over the last interval, percent
    /// (divided by the class's engine count); empty for NVIDIA and before a second read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub engines_percent: BTreeMap<Engine, f64>,
    /// Memory-bandwidth utilization over the last interval.
    pub memory_bandwidth_percent: Reading<u32>,
    /// Video encoder utilization over the last interval.
    pub encoder_percent: Reading<u32>,
    /// Video decoder utilization over the last interval.
    pub decoder_percent: Reading<u32>,
    /// On a MIG device: its GPU instance.
    pub gpu_instance_id: Option<u32>,
    /// On a MIG device: its compute instance.
    pub compute_instance_id: Option<u32>,
    /// What the host knows of it. Flattened: a reader buffers one process's keys, which
    /// the document's own size bounds (16 MiB from a node, a line of a recording).
    #[serde(flatten)]
    pub host: HostFacts,
}

impl GpuProcess {
    /// Process `pid` of `kind` on GPU `gpu_index`, of which nothing else is read yet.
    pub fn new(pid: u32, gpu_index: u32, kind: ProcessType) -> Self {
        Self {
            pid,
            gpu_index,
            gpu_uuid: Reading::NotSupported,
            kind,
            gpu_memory_bytes: Reading::NotSupported,
            gpu_system_memory_bytes: Reading::NotSupported,
            sm_percent: Reading::NotSupported,
            memory_bandwidth_percent: Reading::NotSupported,
            encoder_percent: Reading::NotSupported,
            decoder_percent: Reading::NotSupported,
            engines_percent: BTreeMap::new(),
            gpu_instance_id: None,
            compute_instance_id: None,
            host: HostFacts::unread(pid),
        }
    }

    /// The PID to signal in gputop's namespace; `None` when gputop cannot reach it.
    pub fn local_pid(&self) -> Option<u32> {
        self.host.local_pid
    }

    /// On a MIG-enabled GPU: the MIG device it runs on.
    pub fn mig(&self) -> Option<MigId> {
        Some(MigId {
            gpu_instance: self.gpu_instance_id?,
            compute_instance: self.compute_instance_id?,
        })
    }

    /// The CONTAINER label, `-` on the host.
    pub fn container_label(&self) -> &str {
        Container::label_of(self.host.container.as_deref())
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

/// Everything gputop knows at one instant; its wire form is [`wire::WireReport`]'s keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "snapshot")]
pub struct Snapshot {
    /// RFC 3339, UTC, whole seconds.
    // A reader supplies its own time (`Snapshot::from_wire`): a recording keeps its frames'
    // times, a remote view its arrival time.
    #[serde(
        rename = "timestamp",
        serialize_with = "wire::rfc3339",
        skip_deserializing,
        default = "wire::epoch"
    )]
    #[schemars(with = "String", extend("format" = "date-time"), transform = wire::written_only)]
    pub taken_at: SystemTime,
    /// The host's name.
    pub hostname: String,
    /// How the processes' PIDs relate to gputop's PID namespace.
    #[serde(default)]
    pub pid_namespace: PidNamespace,
    /// The kernel driver's version: `550.54.15`.
    pub driver_version: Reading<String>,
    /// The CUDA version the driver supports, `major.minor`: `12.4`.
    pub cuda_driver_version: Reading<String>,
    /// The NVML library's version.
    pub nvml_version: Reading<String>,
    /// The GPUs, by index.
    #[serde(deserialize_with = "wire::bounded::<{ wire::limits::DEVICES }, _, _>")]
    #[schemars(length(max = wire::limits::DEVICES))]
    pub devices: Vec<Device>,
    /// The processes on them, one per process and GPU, largest GPU memory first.
    #[serde(deserialize_with = "wire::bounded::<{ wire::limits::PROCESSES }, _, _>")]
    #[schemars(length(max = wire::limits::PROCESSES))]
    pub processes: Vec<GpuProcess>,
    /// The host's own load.
    pub host: HostStats,
    /// Processes whose AMD or Intel GPU use could not be read: another user's, when gputop
    /// runs without root or CAP_SYS_PTRACE. They are left out, not shown as idle.
    #[serde(default)]
    pub hidden_processes: u32,
}

impl Snapshot {
    /// A snapshot of `hostname` taken at `taken_at` holding only `devices` and `processes`;
    /// the rest not supported.
    pub fn new(
        taken_at: SystemTime,
        hostname: String,
        devices: Vec<Device>,
        processes: Vec<GpuProcess>,
    ) -> Self {
        Self {
            taken_at,
            hostname,
            driver_version: Reading::NotSupported,
            cuda_driver_version: Reading::NotSupported,
            nvml_version: Reading::NotSupported,
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
            hidden_processes: 0,
        }
    }

    /// What the status line and `--once` say of the processes gputop could not read, when
    /// there are any: `2 processes hidden: ...`.
    pub fn hidden_note(&self) -> Option<String> {
        let plural = if self.hidden_processes == 1 { "" } else { "es" };
        (self.hidden_processes > 0).then(|| {
            format!(
                "{} process{plural} hidden: another user's GPU use needs root or CAP_SYS_PTRACE",
                self.hidden_processes
            )
        })
    }

    /// The GPUs whose processes could not be listed, and why.
    pub fn unlisted(&self) -> impl Iterator<Item = (u32, &str)> {
        self.devices
            .iter()
            .filter_map(|d| Some((d.index, d.process_list_error.as_deref()?)))
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

/// One Xid error as the driver reported it: its code and when gputop received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "xid", deny_unknown_fields)]
pub struct XidEvent {
    /// The Xid number (NVIDIA's Xid catalogue explains each).
    pub xid: u32,
    /// When gputop received it, seconds since the Unix epoch.
    #[schemars(range(max = wire::LATEST_TIME_UNIX_SECONDS))]
    pub time_unix_seconds: u64,
}

impl XidEvent {
    /// Xid `xid` received at `at`.
    pub fn new(xid: u32, at: SystemTime) -> Self {
        Self {
            xid,
            time_unix_seconds: at
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }

    /// When gputop received it.
    pub fn at(&self) -> SystemTime {
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(self.time_unix_seconds)
    }
}

/// How many events of one Xid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "xid_count", deny_unknown_fields)]
pub struct XidCount {
    /// The Xid number.
    pub xid: u32,
    /// Events of it.
    pub count: u64,
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
        let mut host = HostFacts::gone(pid, "test");
        host.user = Reading::Value(user.into());
        GpuProcess {
            pid,
            gpu_index: gpu,
            gpu_uuid: Reading::NotSupported,
            kind: ProcessType::Compute,
            gpu_memory_bytes: Reading::Value(memory_bytes),
            gpu_system_memory_bytes: Reading::NotSupported,
            sm_percent: Reading::Value(0),
            engines_percent: BTreeMap::new(),
            memory_bandwidth_percent: Reading::Value(0),
            encoder_percent: Reading::Value(0),
            decoder_percent: Reading::Value(0),
            gpu_instance_id: None,
            compute_instance_id: None,
            host,
        }
    }

    /// A snapshot taken at `taken_at` holding only `devices` and `processes`.
    pub fn snapshot(taken_at: SystemTime, devices: Vec<Device>, processes: Vec<GpuProcess>) -> Snapshot {
        Snapshot::new(taken_at, "test".into(), devices, processes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_is_labelled_by_its_pod_names_when_the_kubelet_gave_them() {
        let mut pod = Container::in_pod(
            "a1a1a1a1a1a1",
            Some("5e1f0000-aaaa-4bbb-8ccc-000000000001".into()),
        );
        assert_eq!(pod.label(), "pod:5e1f0000/a1a1a1a1a1a1");
        pod.set_names(PodContainer {
            namespace: "ml".into(),
            pod: "trainer-0".into(),
            container: "pytorch".into(),
        });
        assert_eq!(pod.label(), "ml/trainer-0/pytorch");
        let names = pod.names.as_mut().unwrap();
        names.container.clear();
        pod.relabel();
        assert_eq!(pod.label(), "ml/trainer-0", "only the pod known");
    }
}

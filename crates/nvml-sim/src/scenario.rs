//! The scenario file: its TOML format (version 1, documented in README.md), parsing and
//! validation.
//!
//! Everything here is plain data. Parsing resolves what can be resolved once (size strings,
//! error names, PIDs from the environment) so that evaluation never fails on a malformed value.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use crate::codes::{Code, code_from_name};

/// Error from loading a scenario: one line, ready for stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError(pub String);

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScenarioError {}

fn err(message: impl Into<String>) -> ScenarioError {
    ScenarioError(message.into())
}

/// A whole simulated machine.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub meta: Meta,
    pub clock: ClockConfig,
    pub system: System,
    pub sim: SimConfig,
    pub smi: SmiConfig,
    pub gpu: Vec<Gpu>,
}

/// How the simulator's `nvidia-smi` reads the machine; options that make it disagree with
/// other NVML clients on purpose, the way real tool versions do.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SmiConfig {
    /// Report memory through the v1 call, whose `used` includes the driver-reserved memory.
    pub memory_includes_reserved: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    pub version: u32,
    #[serde(default)]
    pub name: String,
    /// All `random` expressions derive from (seed, gpu, field, time bucket).
    #[serde(default)]
    pub seed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockMode {
    /// Scenario time is the seconds since the first `nvmlInit*`, times `speed`.
    Wall,
    /// Scenario time is set only by the control exports (or `GPUTOP_SIM_TIME_MS`).
    Manual,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClockConfig {
    pub mode: ClockMode,
    pub speed: f64,
    /// Extension: scenario time (seconds) at the first `nvmlInit*`.
    pub start: f64,
}

impl Default for ClockConfig {
    fn default() -> Self {
        Self {
            mode: ClockMode::Wall,
            speed: 1.0,
            start: 0.0,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct System {
    pub driver_version: String,
    pub nvml_version: String,
    pub cuda_driver_version: i32,
    /// Every `nvmlInit*` fails with this code (a name such as `"DRIVER_NOT_LOADED"`).
    pub init_error: Option<String>,
    pub lenient_struct_versions: bool,
    /// Exports absent from this driver besides those its version lacks (see `profile`).
    pub missing_symbols: Vec<String>,
    /// Bytes per entry of the `_v3` process lists (16, 24 or 32), overriding what the
    /// driver version implies.
    pub process_v3_entry_bytes: Option<usize>,
}

impl Default for System {
    fn default() -> Self {
        Self {
            driver_version: "550.54.15".into(),
            nvml_version: "12.550.54.15".into(),
            cuda_driver_version: 12040,
            init_error: None,
            lenient_struct_versions: false,
            missing_symbols: Vec::new(),
            process_v3_entry_bytes: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    pub process_sample_period_ms: u64,
    pub samples_period_ms: u64,
    pub race_grow_between_calls: bool,
    pub latency_us: Latency,
    /// Extension for testing the FFI guard: these exports panic inside the library.
    pub panic_in: Vec<String>,
    /// The clock `nvmlDeviceGetSamples` stamps samples with.
    pub sample_clock: SampleClock,
    /// Per-process utilization answers as some drivers give them: padded size queries, rows
    /// with PID 0, unknown PIDs with impossible values, samples older than asked for.
    pub dirty_process_samples: bool,
    /// The legacy nvmlDeviceGetProcessUtilization reads 0 for every process while
    /// nvmlDeviceGetProcessesUtilizationInfo gives the values, as reported on Blackwell.
    pub legacy_process_utilization_zero: bool,
    /// How long every `nvmlInit*` takes, as without persistence mode (seconds on real GPUs).
    pub init_delay_ms: u64,
    /// Whose privileges calls have: as on a real driver, a MIG-enabled GPU lists its memory
    /// and processes only to root.
    pub caller: Caller,
}

/// The privileges the simulated driver sees its caller with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Caller {
    /// The calling process's own effective user.
    Actual,
    Root,
    User,
}

/// Which clock device samples are stamped with, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SampleClock {
    /// Since the machine booted (CLOCK_BOOTTIME), as Linux drivers were seen to stamp them.
    Boot,
    /// Since the Unix epoch.
    Epoch,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            process_sample_period_ms: 500,
            samples_period_ms: 167,
            race_grow_between_calls: false,
            latency_us: Latency::default(),
            panic_in: Vec::new(),
            sample_clock: SampleClock::Boot,
            dirty_process_samples: false,
            legacy_process_utilization_zero: false,
            caller: Caller::Actual,
            init_delay_ms: 0,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Latency {
    pub default: u64,
    pub processes: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pci {
    #[serde(default)]
    pub domain: u32,
    pub bus: Option<u32>,
    #[serde(default)]
    pub device: u32,
    #[serde(default = "default_device_id")]
    pub device_id: u32,
    #[serde(default)]
    pub subsystem_id: u32,
}

fn default_device_id() -> u32 {
    0x20B0
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clocks<T> {
    pub graphics: T,
    pub sm: T,
    pub mem: T,
    pub video: T,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemperatureThresholds {
    pub shutdown: Option<u32>,
    pub slowdown: Option<u32>,
    /// Extension: the maximum GPU and memory operating temperatures.
    pub gpu_max: Option<u32>,
    pub mem_max: Option<u32>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcieLink {
    pub max_gen: u32,
    pub max_width: u32,
    #[serde(rename = "gen")]
    pub generation: u32,
    pub width: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComputeMode {
    Default,
    ExclusiveThread,
    Prohibited,
    ExclusiveProcess,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MigSetting {
    Disabled,
    Enabled,
    Unsupported,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ecc {
    pub supported: bool,
    #[serde(default)]
    pub volatile_uncorrected: u64,
    #[serde(default)]
    pub aggregate_uncorrected: u64,
}

/// Row remapping (Ampere and newer, NVML docs for `nvmlDeviceGetRemappedRows`): rows
/// remapped after correctable and uncorrectable errors, a remap waiting for a GPU reset, and
/// a remap that failed (the GPU needs service).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemappedRows {
    #[serde(default)]
    pub correctable: u32,
    #[serde(default)]
    pub uncorrectable: u32,
    #[serde(default)]
    pub pending: bool,
    #[serde(default)]
    pub failure: bool,
}

/// Retired pages (Kepler to Turing; Ampere and newer remap rows instead, NVML docs for
/// `nvmlDeviceGetRetiredPages`): pages retired after multiple single-bit and after
/// double-bit ECC errors.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetiredPages {
    #[serde(default)]
    pub single_bit: u32,
    #[serde(default)]
    pub double_bit: u32,
}

/// NVLink (SXM boards; NVML docs for `nvmlDeviceGetNvLinkState` and
/// `nvmlDeviceGetNvLinkErrorCounter`): how many links, which are down, and each link's data
/// link error counters (replay, recovery, CRC flit, CRC data), by link; a link the lists do
/// not reach has none.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvLinks {
    pub links: u32,
    #[serde(default)]
    pub inactive: Vec<u32>,
    #[serde(default)]
    pub replay: Vec<u64>,
    #[serde(default)]
    pub recovery: Vec<u64>,
    #[serde(default)]
    pub crc_flit: Vec<u64>,
    #[serde(default)]
    pub crc_data: Vec<u64>,
}

/// `remapped_rows = false` (not supported) or the counts.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
enum RemappedRowsSetting {
    Supported(bool),
    Rows(RemappedRows),
}

/// Raw form of one GPU, as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuDef {
    #[serde(default = "default_gpu_name")]
    name: String,
    uuid: Option<String>,
    serial: Option<String>,
    pci: Option<Pci>,
    #[serde(default = "default_memory_total")]
    memory_total: Scalar,
    #[serde(default)]
    memory_reserved: Option<Scalar>,
    #[serde(default)]
    memory_base_used: Option<Scalar>,
    bar1_total: Option<Scalar>,
    bar1_used: Option<Scalar>,
    #[serde(default = "default_power_limit")]
    power_limit_mw: u32,
    enforced_power_limit_mw: Option<u32>,
    max_clocks_mhz: Option<Clocks<u32>>,
    #[serde(default = "one")]
    fans: u32,
    temperature_thresholds: Option<TemperatureThresholds>,
    pcie: Option<PcieLink>,
    #[serde(default = "default_compute_mode")]
    compute_mode: ComputeMode,
    #[serde(default)]
    persistence: bool,
    #[serde(default)]
    display_active: bool,
    #[serde(default = "default_mig")]
    mig: MigSetting,
    ecc: Option<Ecc>,
    /// Absent: supported, none remapped. `false`: not supported (before Ampere).
    remapped_rows: Option<RemappedRowsSetting>,
    /// Absent: not supported (Ampere and newer).
    retired_pages: Option<RetiredPages>,
    /// Absent: no NVLink (a PCIe board): NOT_SUPPORTED.
    nvlink: Option<NvLinks>,
    #[serde(default = "default_architecture")]
    architecture: String,
    #[serde(default = "default_cuda_capability")]
    cuda_capability: [i32; 2],
    /// Extension: `nvmlBrandType_t` value (2 = Tesla).
    #[serde(default = "default_brand")]
    brand: u32,
    /// The energy counter at scenario time 0, in mJ: it counts from when the driver loaded.
    #[serde(default)]
    energy_start_mj: u64,
    #[serde(default)]
    dynamic: BTreeMap<String, toml::Value>,
    #[serde(default)]
    process: Vec<ProcessDef>,
    #[serde(default)]
    fault: Vec<FaultDef>,
    #[serde(default)]
    hang: Vec<HangDef>,
    /// Xid errors the driver reports through its event API, on the scenario's timeline.
    #[serde(default)]
    xid: Vec<XidDef>,
    /// Whether the GPU delivers events; `false`: registering answers NOT_SUPPORTED, as on
    /// old boards and some virtual GPUs (k8s-device-plugin PR #1562).
    #[serde(default = "yes")]
    events: bool,
    /// MIG devices (GPU instance + compute instance), with `mig = "enabled"`.
    #[serde(default)]
    mig_device: Vec<MigDeviceDef>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct MigDeviceDef {
    gpu_instance: u32,
    compute_instance: u32,
    /// As nvidia-smi names it: `1g.10gb`, `3g.40gb`, ...
    profile: String,
    memory: Scalar,
    uuid: Option<String>,
}

/// One MIG device of a GPU, resolved.
#[derive(Debug, Clone)]
pub struct MigDevice {
    pub gpu_instance: u32,
    pub compute_instance: u32,
    pub profile: String,
    pub memory_total: u64,
    pub uuid: String,
}

fn default_gpu_name() -> String {
    "NVIDIA Simulated GPU".into()
}
fn default_memory_total() -> Scalar {
    Scalar::Text("16 GiB".into())
}
fn default_power_limit() -> u32 {
    300_000
}
fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}
fn default_compute_mode() -> ComputeMode {
    ComputeMode::Default
}
fn default_mig() -> MigSetting {
    MigSetting::Disabled
}
fn default_architecture() -> String {
    "ampere".into()
}
fn default_cuda_capability() -> [i32; 2] {
    [8, 0]
}
fn default_brand() -> u32 {
    2
}

/// A number or a size string (`"2 GiB"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Scalar {
    Number(f64),
    Text(String),
}

impl Scalar {
    fn resolve(&self, what: &str) -> Result<f64, ScenarioError> {
        match self {
            Self::Number(n) => Ok(*n),
            Self::Text(text) => parse_size(text).map(|b| b as f64).ok_or_else(|| {
                err(format!(
                    "{what}: '{text}' is not a number or a size such as \"2 GiB\""
                ))
            }),
        }
    }
}

/// Parses `"512 MiB"`, `"40GB"`, `"123"` into bytes.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        _ => return None,
    };
    Some((number * factor).round() as u64)
}

/// How keyframes are joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Interp {
    Step,
    Linear,
}

/// A value that may vary with scenario time.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Constant(f64),
    Keyframes {
        points: Vec<(f64, f64)>,
        interp: Interp,
        repeat: Option<f64>,
    },
    Sine {
        mean: f64,
        amplitude: f64,
        period: f64,
        phase: f64,
    },
    Random {
        min: f64,
        max: f64,
        hold: f64,
    },
    /// The field always fails with this code.
    Error(Code),
    /// The driver reports `NVML_VALUE_NOT_AVAILABLE` (only for process memory).
    Unavailable,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyframesDef {
    keyframes: Vec<(f64, Scalar)>,
    #[serde(default = "default_interp")]
    interp: Interp,
    repeat: Option<f64>,
}

fn default_interp() -> Interp {
    Interp::Linear
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SineDef {
    mean: f64,
    amplitude: f64,
    period: f64,
    #[serde(default)]
    phase: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RandomDef {
    min: f64,
    max: f64,
    #[serde(default = "default_hold")]
    hold: f64,
}

fn default_hold() -> f64 {
    1.0
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum ExprDef {
    Scalar(Scalar),
    Keyframes(KeyframesDef),
    Sine { sine: SineDef },
    Random { random: RandomDef },
    Error { error: String },
}

impl Expr {
    /// The definition `value` holds. The common shapes (a number, a text, a one-key `sine`
    /// or `random` table) are read directly; the rest go through serde's untagged matching,
    /// which tries each shape in turn and formats an error for each miss: with hundreds of
    /// processes that was a large part of the scenario's parse, which every client of the
    /// simulator pays inside nvmlInit.
    fn definition(value: &toml::Value) -> Option<ExprDef> {
        let direct = match value {
            toml::Value::Integer(n) => Some(ExprDef::Scalar(Scalar::Number(*n as f64))),
            toml::Value::Float(x) => Some(ExprDef::Scalar(Scalar::Number(*x))),
            toml::Value::String(text) => Some(ExprDef::Scalar(Scalar::Text(text.clone()))),
            toml::Value::Table(table) if table.len() == 1 => {
                let (kind, inner) = table.iter().next()?;
                match kind.as_str() {
                    "sine" => inner.clone().try_into().ok().map(|sine| ExprDef::Sine { sine }),
                    "random" => inner
                        .clone()
                        .try_into()
                        .ok()
                        .map(|random| ExprDef::Random { random }),
                    _ => None,
                }
            }
            _ => None,
        };
        direct.or_else(|| value.clone().try_into().ok())
    }

    fn parse(value: &toml::Value, what: &str) -> Result<Self, ScenarioError> {
        let def = Self::definition(value).ok_or_else(|| {
            err(format!(
                "{what}: expected a number, a size, or {{ keyframes | sine | random | error }}, found {value}"
            ))
        })?;
        Ok(match def {
            ExprDef::Scalar(Scalar::Text(text)) if text == "unavailable" => Self::Unavailable,
            ExprDef::Scalar(scalar) => Self::Constant(scalar.resolve(what)?),
            ExprDef::Keyframes(k) => {
                if k.keyframes.is_empty() {
                    return Err(err(format!("{what}: keyframes is empty")));
                }
                let mut points = Vec::with_capacity(k.keyframes.len());
                for (t, v) in &k.keyframes {
                    points.push((*t, v.resolve(what)?));
                }
                if points.windows(2).any(|w| w[1].0 < w[0].0) {
                    return Err(err(format!("{what}: keyframe times must not decrease")));
                }
                if k.repeat.is_some_and(|r| r <= 0.0) {
                    return Err(err(format!("{what}: repeat must be positive")));
                }
                Self::Keyframes {
                    points,
                    interp: k.interp,
                    repeat: k.repeat,
                }
            }
            ExprDef::Sine { sine } => {
                if sine.period <= 0.0 {
                    return Err(err(format!("{what}: sine period must be positive")));
                }
                Self::Sine {
                    mean: sine.mean,
                    amplitude: sine.amplitude,
                    period: sine.period,
                    phase: sine.phase,
                }
            }
            ExprDef::Random { random } => {
                if random.hold <= 0.0 || random.max < random.min {
                    return Err(err(format!("{what}: random needs min <= max and hold > 0")));
                }
                Self::Random {
                    min: random.min,
                    max: random.max,
                    hold: random.hold,
                }
            }
            ExprDef::Error { error } => Self::Error(parse_code(&error, what)?),
        })
    }
}

fn parse_code(name: &str, what: &str) -> Result<Code, ScenarioError> {
    code_from_name(name).ok_or_else(|| err(format!("{what}: unknown NVML error name '{name}'")))
}

/// Process kinds as NVML lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum ProcessType {
    #[serde(rename = "C")]
    Compute,
    #[serde(rename = "G")]
    Graphics,
    #[serde(rename = "C+G")]
    ComputeGraphics,
    #[serde(rename = "M")]
    Mps,
}

impl ProcessType {
    pub fn in_compute_list(self) -> bool {
        matches!(self, Self::Compute | Self::ComputeGraphics)
    }
    pub fn in_graphics_list(self) -> bool {
        matches!(self, Self::Graphics | Self::ComputeGraphics)
    }
    pub fn in_mps_list(self) -> bool {
        self == Self::Mps
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcessDef {
    pid: Option<u32>,
    pid_env: Option<String>,
    /// Extension: take the n-th PID of a whitespace- or comma-separated list in `pid_env`.
    pid_index: Option<usize>,
    #[serde(rename = "type", default = "default_process_type")]
    kind: ProcessType,
    name: Option<String>,
    /// Extension for the built-in demo, whose PIDs are not real: the owner and command line.
    user: Option<String>,
    command: Option<String>,
    /// Extension for the demo: the process's `/proc/PID/cgroup` text (its container).
    cgroup: Option<String>,
    /// The index of the GPU's `mig_device` the process runs on.
    mig_device: Option<usize>,
    /// Extension for the demo: host CPU percent and resident memory.
    cpu: Option<toml::Value>,
    host_memory: Option<toml::Value>,
    #[serde(default)]
    used_memory: Option<toml::Value>,
    sm: Option<toml::Value>,
    mem: Option<toml::Value>,
    enc: Option<toml::Value>,
    dec: Option<toml::Value>,
    #[serde(default)]
    start: f64,
    end: Option<f64>,
}

fn default_process_type() -> ProcessType {
    ProcessType::Compute
}

/// Calls on `field` block for `seconds` while active, as NVML calls on a hung GPU do.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct HangDef {
    field: String,
    seconds: f64,
    from: Option<f64>,
    until: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct XidDef {
    at: f64,
    xid: u64,
}

/// Xids NVML does not deliver as events: DCGM's maintainers say NVML cannot report 79
/// (fallen off the bus), 119 and 120 (GSP errors) (NVIDIA/DCGM #162). A GPU that fell off
/// the bus is a fault: every call answers GPU_IS_LOST.
const UNDELIVERED_XIDS: [u64; 3] = [79, 119, 120];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultDef {
    field: String,
    error: String,
    from: Option<f64>,
    until: Option<f64>,
}

/// Logical fields a fault may name.
pub const FAULT_FIELDS: &[&str] = &[
    "name",
    "uuid",
    "pci",
    "memory",
    "bar1",
    "utilization",
    "encoder",
    "decoder",
    "temperature",
    "temperature_threshold",
    "fan_speed",
    "power_usage",
    "power_limit",
    "enforced_power_limit",
    "energy",
    "pstate",
    "clocks",
    "max_clocks",
    "pcie_throughput",
    "pcie_link",
    "compute_mode",
    "persistence",
    "display",
    "ecc",
    "remapped_rows",
    "retired_pages",
    "nvlink",
    "mig",
    "processes",
    "process_utilization",
    "samples",
    "throttle_reasons",
    "events",
    "serial",
    "handle",
    "*",
];

/// Dynamic fields of `[gpu.dynamic]`.
pub const DYNAMIC_FIELDS: &[&str] = &[
    "utilization_gpu",
    "utilization_memory",
    "temperature",
    "power_mw",
    "fan_speed",
    "pstate",
    "clocks_mhz",
    "encoder",
    "decoder",
    "pcie_tx_kbps",
    "pcie_rx_kbps",
    "memory_used",
    "memory_temperature",
    "throttle_reasons",
];

/// One simulated GPU, resolved.
#[derive(Debug, Clone)]
pub struct Gpu {
    pub name: String,
    pub uuid: String,
    pub serial: String,
    pub pci: Pci,
    pub memory_total: u64,
    pub memory_reserved: u64,
    pub memory_base_used: u64,
    pub bar1_total: u64,
    pub bar1_used: u64,
    pub power_limit_mw: u32,
    pub enforced_power_limit_mw: u32,
    pub max_clocks_mhz: Clocks<u32>,
    pub fans: u32,
    pub temperature_thresholds: TemperatureThresholds,
    pub pcie: PcieLink,
    pub compute_mode: ComputeMode,
    pub persistence: bool,
    pub display_active: bool,
    pub mig: MigSetting,
    pub ecc: Ecc,
    /// `None`: the driver answers NOT_SUPPORTED.
    pub remapped_rows: Option<RemappedRows>,
    pub retired_pages: Option<RetiredPages>,
    pub nvlink: Option<NvLinks>,
    pub architecture: u32,
    pub cuda_capability: [i32; 2],
    pub brand: u32,
    pub energy_start_mj: u64,
    pub dynamic: Dynamic,
    pub processes: Vec<Process>,
    pub faults: Vec<Fault>,
    pub hangs: Vec<Hang>,
    /// Xid errors in the order they happen.
    pub xids: Vec<Xid>,
    /// Whether the GPU delivers events (`nvmlDeviceRegisterEvents`).
    pub events: bool,
    pub mig_devices: Vec<MigDevice>,
}

/// An Xid error at scenario time `at`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Xid {
    pub at: f64,
    pub xid: u64,
}

/// The time-varying values of one GPU.
#[derive(Debug, Clone)]
pub struct Dynamic {
    pub utilization_gpu: Expr,
    pub utilization_memory: Expr,
    pub temperature: Expr,
    pub power_mw: Expr,
    pub fan_speed: Expr,
    pub pstate: Expr,
    pub clocks_mhz: Clocks<Expr>,
    pub encoder: Expr,
    pub decoder: Expr,
    pub pcie_tx_kbps: Expr,
    pub pcie_rx_kbps: Expr,
    /// When absent, used memory is the base plus the live processes' memory.
    pub memory_used: Option<Expr>,
    /// The memory's temperature (NVML's field value `NVML_FI_DEV_MEMORY_TEMP`). Absent: the
    /// field answers NOT_SUPPORTED, as on GDDR boards; HBM boards report it (V100 and A100
    /// do, RTX 2080 Ti and A40 do not: jelmd/nvmex issue 1; nor RTX 30 cards: CPU-X issue
    /// 259 quoting NVIDIA's forum).
    pub memory_temperature: Option<Expr>,
    pub throttle_reasons: Expr,
}

#[derive(Debug, Clone)]
pub struct Process {
    pub pid: u32,
    pub kind: ProcessType,
    pub name: Option<String>,
    pub user: Option<String>,
    pub command: Option<String>,
    pub cgroup: Option<String>,
    pub mig_device: Option<usize>,
    pub cpu: Expr,
    pub host_memory: Expr,
    pub used_memory: Expr,
    pub sm: Expr,
    pub mem: Expr,
    pub enc: Expr,
    pub dec: Expr,
    pub start: f64,
    pub end: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct Fault {
    pub field: String,
    pub error: Code,
    pub from: Option<f64>,
    pub until: Option<f64>,
}

/// Whether `t` lies in the window from `from` (inclusive) to `until`; a missing end is open.
fn within(from: Option<f64>, until: Option<f64>, t: f64) -> bool {
    from.is_none_or(|from| t >= from) && until.is_none_or(|until| t < until)
}

/// Calls on `field` (or every call, for `*`) block for `seconds` within the window.
#[derive(Debug, Clone)]
pub struct Hang {
    pub field: String,
    pub seconds: f64,
    pub from: Option<f64>,
    pub until: Option<f64>,
}

impl Hang {
    pub fn active_at(&self, t: f64) -> bool {
        within(self.from, self.until, t)
    }
}

impl Fault {
    pub fn active_at(&self, t: f64) -> bool {
        within(self.from, self.until, t)
    }
}

/// Reads environment variables for `pid_env`; a parameter so tests need not touch the
/// process environment.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioDef {
    meta: Meta,
    #[serde(default)]
    clock: ClockConfig,
    #[serde(default)]
    system: System,
    #[serde(default)]
    sim: SimConfig,
    #[serde(default)]
    smi: SmiConfig,
    #[serde(default)]
    gpu: Vec<GpuDef>,
    /// The AMD and Intel GPUs' sysfs and fdinfo files a `gputop capture` read: gputop's own
    /// DRM reader serves them again in its tests; this library serves NVML only.
    #[serde(default, rename = "drm")]
    _drm: Option<toml::Value>,
}

impl Scenario {
    /// Parses and validates a scenario. `origin` names the file in error messages.
    pub fn parse(text: &str, origin: &str, env: EnvLookup<'_>) -> Result<Self, ScenarioError> {
        let def: ScenarioDef = toml::from_str(text).map_err(|e| {
            let message = e.message().trim().replace('\n', " ");
            match e.span() {
                Some(span) => {
                    let (line, column) = line_column(text, span.start);
                    err(format!("{origin}:{line}:{column}: {message}"))
                }
                None => err(format!("{origin}: {message}")),
            }
        })?;
        if def.meta.version != 1 {
            return Err(err(format!(
                "{origin}: unsupported scenario version {} (this simulator reads version 1)",
                def.meta.version
            )));
        }
        if def.clock.speed <= 0.0 {
            return Err(err(format!("{origin}: clock.speed must be positive")));
        }
        if def.sim.samples_period_ms == 0 || def.sim.process_sample_period_ms == 0 {
            return Err(err(format!("{origin}: sample periods must be positive")));
        }
        if let Some(bytes) = def.system.process_v3_entry_bytes
            && ![16, 24, 32].contains(&bytes)
        {
            return Err(err(format!(
                "{origin}: system.process_v3_entry_bytes is {bytes}; drivers write 16, 24 or 32"
            )));
        }
        if let Some(name) = &def.system.init_error {
            parse_code(name, &format!("{origin}: system.init_error"))?;
        }
        let pid_lists = PidLists::new(env);
        let gpus = def
            .gpu
            .into_iter()
            .enumerate()
            .map(|(index, gpu)| {
                resolve_gpu(
                    gpu,
                    index,
                    def.meta.seed,
                    &format!("{origin}: gpu[{index}]"),
                    &pid_lists,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            meta: def.meta,
            clock: def.clock,
            system: def.system,
            sim: def.sim,
            smi: def.smi,
            gpu: gpus,
        })
    }

    /// The `init_error` code, if the scenario makes every init fail.
    pub fn init_error(&self) -> Option<Code> {
        self.system.init_error.as_deref().and_then(code_from_name)
    }
}

/// 1-based line and column of a byte offset.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

fn resolve_gpu(
    def: GpuDef,
    index: usize,
    seed: u64,
    what: &str,
    env: &PidLists<'_>,
) -> Result<Gpu, ScenarioError> {
    let bytes = |s: &Option<Scalar>, default: u64, key: &str| -> Result<u64, ScenarioError> {
        match s {
            Some(s) => s.resolve(&format!("{what}.{key}")).map(|v| v.max(0.0) as u64),
            None => Ok(default),
        }
    };
    let memory_total = def.memory_total.resolve(&format!("{what}.memory_total"))? as u64;
    let memory_reserved = bytes(&def.memory_reserved, 0, "memory_reserved")?;
    if memory_reserved > memory_total {
        return Err(err(format!("{what}: memory_reserved exceeds memory_total")));
    }
    let max_clocks = def.max_clocks_mhz.unwrap_or(Clocks {
        graphics: 1410,
        sm: 1410,
        mem: 1215,
        video: 1275,
    });
    let dynamic = resolve_dynamic(&def.dynamic, &max_clocks, what)?;
    let processes = def
        .process
        .iter()
        .enumerate()
        .map(|(i, p)| resolve_process(p, &format!("{what}.process[{i}]"), env))
        .collect::<Result<Vec<_>, _>>()?;
    let faults = def
        .fault
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let at = format!("{what}.fault[{i}]");
            if !FAULT_FIELDS.contains(&f.field.as_str()) {
                return Err(err(format!("{at}: unknown field '{}'", f.field)));
            }
            Ok(Fault {
                field: f.field.clone(),
                error: parse_code(&f.error, &at)?,
                from: f.from,
                until: f.until,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let hangs = def
        .hang
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let at = format!("{what}.hang[{i}]");
            if !FAULT_FIELDS.contains(&h.field.as_str()) {
                return Err(err(format!("{at}: unknown field '{}'", h.field)));
            }
            if h.seconds.is_nan() || h.seconds < 0.0 {
                return Err(err(format!("{at}: seconds must not be negative")));
            }
            Ok(Hang {
                field: h.field.clone(),
                seconds: h.seconds,
                from: h.from,
                until: h.until,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut xids = def
        .xid
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let at = format!("{what}.xid[{i}]");
            if !x.at.is_finite() || x.at < 0.0 {
                return Err(err(format!("{at}: at must be a time in seconds, 0 or later")));
            }
            if x.xid == 0 || x.xid > u64::from(u32::MAX) {
                return Err(err(format!("{at}: xid must be from 1 to {}", u32::MAX)));
            }
            if UNDELIVERED_XIDS.contains(&x.xid) {
                return Err(err(format!(
                    "{at}: Xid {} is not delivered through NVML's events (NVIDIA/DCGM #162); \
                     a GPU that fell off the bus is a fault: field = \"*\", error = \"GPU_IS_LOST\"",
                    x.xid
                )));
            }
            if !def.events {
                return Err(err(format!("{at}: the GPU has events = false")));
            }
            Ok(Xid { at: x.at, xid: x.xid })
        })
        .collect::<Result<Vec<_>, _>>()?;
    xids.sort_by(|a, b| a.at.total_cmp(&b.at));
    let mig_devices = def
        .mig_device
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let at = format!("{what}.mig_device[{i}]");
            if def.mig != MigSetting::Enabled {
                return Err(err(format!("{at}: MIG devices need mig = \"enabled\"")));
            }
            if def.mig_device[..i]
                .iter()
                .any(|o| (o.gpu_instance, o.compute_instance) == (m.gpu_instance, m.compute_instance))
            {
                return Err(err(format!(
                    "{at}: GPU instance {} compute instance {} is listed twice",
                    m.gpu_instance, m.compute_instance
                )));
            }
            Ok(MigDevice {
                gpu_instance: m.gpu_instance,
                compute_instance: m.compute_instance,
                profile: m.profile.clone(),
                memory_total: m.memory.resolve(&format!("{at}.memory"))?.max(0.0) as u64,
                uuid: m.uuid.clone().unwrap_or_else(|| {
                    format!(
                        "MIG-{:08x}-{:04x}-5{:03x}-9{:03x}-{:012x}",
                        seed as u32 ^ 0x4d49_4700,
                        index,
                        m.gpu_instance & 0xfff,
                        m.compute_instance & 0xfff,
                        i
                    )
                }),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if let Some((i, p)) = processes
        .iter()
        .enumerate()
        .find(|(_, p)| p.mig_device.is_some_and(|m| m >= mig_devices.len()))
    {
        return Err(err(format!(
            "{what}.process[{i}]: mig_device {} is not one of the {} MIG devices",
            p.mig_device.unwrap_or(0),
            mig_devices.len()
        )));
    }
    let architecture = match def.architecture.to_ascii_lowercase().as_str() {
        "kepler" => 2,
        "maxwell" => 3,
        "pascal" => 4,
        "volta" => 5,
        "turing" => 6,
        "ampere" => 7,
        "ada" => 8,
        "hopper" => 9,
        "blackwell" => 10,
        other => return Err(err(format!("{what}: unknown architecture '{other}'"))),
    };
    let mut uuid_bits = seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    uuid_bits = crate::engine::mix64(uuid_bits);
    Ok(Gpu {
        uuid: def.uuid.unwrap_or_else(|| {
            format!(
                "GPU-{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                (uuid_bits >> 32) as u32,
                (uuid_bits >> 16) as u16,
                index & 0xfff,
                (uuid_bits >> 4) & 0xfff,
                index
            )
        }),
        serial: def.serial.unwrap_or_else(|| format!("13240{:08}", index + 1)),
        name: def.name,
        pci: def.pci.unwrap_or(Pci {
            domain: 0,
            bus: None,
            device: 0,
            device_id: default_device_id(),
            subsystem_id: 0,
        }),
        memory_total,
        memory_reserved,
        memory_base_used: bytes(&def.memory_base_used, 0, "memory_base_used")?,
        bar1_total: bytes(&def.bar1_total, 256 << 20, "bar1_total")?,
        bar1_used: bytes(&def.bar1_used, 8 << 20, "bar1_used")?,
        power_limit_mw: def.power_limit_mw,
        enforced_power_limit_mw: def.enforced_power_limit_mw.unwrap_or(def.power_limit_mw),
        max_clocks_mhz: max_clocks,
        fans: def.fans,
        temperature_thresholds: def.temperature_thresholds.unwrap_or(TemperatureThresholds {
            shutdown: Some(92),
            slowdown: Some(89),
            gpu_max: None,
            mem_max: None,
        }),
        pcie: def.pcie.unwrap_or(PcieLink {
            max_gen: 4,
            max_width: 16,
            generation: 4,
            width: 16,
        }),
        compute_mode: def.compute_mode,
        persistence: def.persistence,
        display_active: def.display_active,
        mig: def.mig,
        ecc: def.ecc.unwrap_or(Ecc {
            supported: true,
            volatile_uncorrected: 0,
            aggregate_uncorrected: 0,
        }),
        remapped_rows: match def.remapped_rows {
            None => Some(RemappedRows::default()),
            Some(RemappedRowsSetting::Supported(false)) => None,
            Some(RemappedRowsSetting::Supported(true)) => Some(RemappedRows::default()),
            Some(RemappedRowsSetting::Rows(rows)) => Some(rows),
        },
        retired_pages: def.retired_pages,
        nvlink: def.nvlink,
        architecture,
        cuda_capability: def.cuda_capability,
        brand: def.brand,
        energy_start_mj: def.energy_start_mj,
        dynamic,
        processes,
        faults,
        hangs,
        xids,
        events: def.events,
        mig_devices,
    })
}

fn resolve_dynamic(
    table: &BTreeMap<String, toml::Value>,
    max_clocks: &Clocks<u32>,
    what: &str,
) -> Result<Dynamic, ScenarioError> {
    if let Some(unknown) = table.keys().find(|k| !DYNAMIC_FIELDS.contains(&k.as_str())) {
        return Err(err(format!("{what}.dynamic: unknown field '{unknown}'")));
    }
    let get = |key: &str, default: f64| -> Result<Expr, ScenarioError> {
        match table.get(key) {
            Some(v) => Expr::parse(v, &format!("{what}.dynamic.{key}")),
            None => Ok(Expr::Constant(default)),
        }
    };
    let clocks = match table.get("clocks_mhz") {
        None => Clocks {
            graphics: Expr::Constant(f64::from(max_clocks.graphics)),
            sm: Expr::Constant(f64::from(max_clocks.sm)),
            mem: Expr::Constant(f64::from(max_clocks.mem)),
            video: Expr::Constant(f64::from(max_clocks.video)),
        },
        Some(toml::Value::Table(t)) => {
            let key = |k: &str, default: u32| -> Result<Expr, ScenarioError> {
                match t.get(k) {
                    Some(v) => Expr::parse(v, &format!("{what}.dynamic.clocks_mhz.{k}")),
                    None => Ok(Expr::Constant(f64::from(default))),
                }
            };
            if let Some(unknown) = t
                .keys()
                .find(|k| !["graphics", "sm", "mem", "video"].contains(&k.as_str()))
            {
                return Err(err(format!(
                    "{what}.dynamic.clocks_mhz: unknown clock '{unknown}'"
                )));
            }
            Clocks {
                graphics: key("graphics", max_clocks.graphics)?,
                sm: key("sm", max_clocks.sm)?,
                mem: key("mem", max_clocks.mem)?,
                video: key("video", max_clocks.video)?,
            }
        }
        Some(other) => {
            return Err(err(format!(
                "{what}.dynamic.clocks_mhz: expected a table of graphics/sm/mem/video, found {other}"
            )));
        }
    };
    Ok(Dynamic {
        utilization_gpu: get("utilization_gpu", 0.0)?,
        utilization_memory: get("utilization_memory", 0.0)?,
        temperature: get("temperature", 35.0)?,
        power_mw: get("power_mw", 50_000.0)?,
        fan_speed: get("fan_speed", 30.0)?,
        pstate: get("pstate", 0.0)?,
        clocks_mhz: clocks,
        encoder: get("encoder", 0.0)?,
        decoder: get("decoder", 0.0)?,
        pcie_tx_kbps: get("pcie_tx_kbps", 0.0)?,
        pcie_rx_kbps: get("pcie_rx_kbps", 0.0)?,
        memory_used: table
            .get("memory_used")
            .map(|v| Expr::parse(v, &format!("{what}.dynamic.memory_used")))
            .transpose()?,
        memory_temperature: table
            .get("memory_temperature")
            .map(|v| Expr::parse(v, &format!("{what}.dynamic.memory_temperature")))
            .transpose()?,
        throttle_reasons: get("throttle_reasons", 0.0)?,
    })
}

/// `pid_env` variables, each split into its PIDs once (a scenario may name thousands).
struct PidLists<'a> {
    env: EnvLookup<'a>,
    split: std::cell::RefCell<BTreeMap<String, Option<std::rc::Rc<Vec<String>>>>>,
}

impl<'a> PidLists<'a> {
    fn new(env: EnvLookup<'a>) -> Self {
        Self {
            env,
            split: std::cell::RefCell::new(BTreeMap::new()),
        }
    }

    fn get(&self, var: &str) -> Option<std::rc::Rc<Vec<String>>> {
        self.split
            .borrow_mut()
            .entry(var.to_string())
            .or_insert_with(|| {
                (self.env)(var).map(|value| {
                    std::rc::Rc::new(
                        value
                            .split(|c: char| c == ',' || c.is_whitespace())
                            .filter(|s| !s.is_empty())
                            .map(str::to_string)
                            .collect(),
                    )
                })
            })
            .clone()
    }
}

fn resolve_process(def: &ProcessDef, what: &str, env: &PidLists<'_>) -> Result<Process, ScenarioError> {
    let pid = match (def.pid, &def.pid_env) {
        (Some(pid), None) => pid,
        (None, Some(var)) => {
            let list = env
                .get(var)
                .ok_or_else(|| err(format!("{what}: pid_env {var} is not set")))?;
            let index = def.pid_index.unwrap_or(0);
            let item = list
                .get(index)
                .ok_or_else(|| err(format!("{what}: {var} has no PID at index {index}")))?;
            item.parse()
                .map_err(|_| err(format!("{what}: {var} holds '{item}', not a PID")))?
        }
        _ => return Err(err(format!("{what}: give exactly one of pid and pid_env"))),
    };
    let expr = |v: &Option<toml::Value>, key: &str| -> Result<Expr, ScenarioError> {
        v.as_ref().map_or(Ok(Expr::Constant(0.0)), |v| {
            Expr::parse(v, &format!("{what}.{key}"))
        })
    };
    if def.end.is_some_and(|end| end < def.start) {
        return Err(err(format!("{what}: end is before start")));
    }
    Ok(Process {
        pid,
        kind: def.kind,
        name: def.name.clone(),
        user: def.user.clone(),
        command: def.command.clone(),
        cgroup: def.cgroup.clone(),
        mig_device: def.mig_device,
        cpu: expr(&def.cpu, "cpu")?,
        host_memory: expr(&def.host_memory, "host_memory")?,
        used_memory: expr(&def.used_memory, "used_memory")?,
        sm: expr(&def.sm, "sm")?,
        mem: expr(&def.mem, "mem")?,
        enc: expr(&def.enc, "enc")?,
        dec: expr(&def.dec, "dec")?,
        start: def.start,
        end: def.end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_read_directly_match_serdes_untagged_reading() {
        let values = [
            "5",
            "2.5",
            "-3",
            "\"64 MiB\"",
            "\"unavailable\"",
            "{ sine = { mean = 40, amplitude = 30, period = 8 } }",
            "{ sine = { mean = 40, amplitude = 30, period = 8, phase = 1 } }",
            "{ random = { min = 10, max = 20 } }",
            "{ random = { min = 10, max = 20, hold = 2 } }",
            "{ random = { min = 10, max = 20, bogus = 2 } }",
            "{ random = { min = 10 } }",
            "{ sine = { mean = 1, amplitude = 1, period = 1 }, extra = 1 }",
            "{ keyframes = [[0, 1], [5, \"2 GiB\"]], interp = \"step\" }",
            "{ error = \"GPU_IS_LOST\" }",
            "true",
            "[1, 2]",
        ];
        for text in values {
            let value: toml::Value =
                toml::from_str::<toml::Table>(&format!("v = {text}")).unwrap()["v"].clone();
            let untagged: Option<ExprDef> = value.clone().try_into().ok();
            assert_eq!(
                format!("{:?}", Expr::definition(&value)),
                format!("{untagged:?}"),
                "{text}"
            );
        }
    }
}

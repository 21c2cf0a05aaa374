//! The snapshot's one wire form: what `--once --json` prints, `/snapshot` serves, recordings
//! store and the remote view reads back. The model's types are the wire form (their serde
//! derives); this module holds what goes around them: the envelope with its [`VERSION`]
//! ([`WireReport`]), the limits a reader enforces while it parses ([`limits`]) and the
//! checks a document from outside passes before it becomes a [`Snapshot`]
//! ([`Snapshot::from_wire`]). Units are in the key names; an unknown value is `null`, whether
//! unsupported or failed (a reading read back from the wire is then "not supported": the
//! reason a reading failed stays on the machine that read it).
//! `config/snapshot.schema.json` is generated from the same types ([`json_schema`]).

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use schemars::JsonSchema;
use serde::de::{Error as _, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::{Device, GpuProcess, PodContainer, Reading, Snapshot};

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

/// [`bounded`] for a list that may be `null` or missing: a reading.
pub fn bounded_reading<'de, const N: usize, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Reading<Vec<T>>, D::Error> {
    struct List<T, const N: usize>(Vec<T>);
    impl<'de, T: Deserialize<'de>, const N: usize> Deserialize<'de> for List<T, N> {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            bounded::<N, D, T>(deserializer).map(List)
        }
    }
    Ok(Option::<List<T, N>>::deserialize(deserializer)?
        .map_or(Reading::NotSupported, |list| Reading::Value(list.0)))
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
    /// The document's format version; readers refuse another.
    #[schemars(extend("const" = VERSION))]
    pub version: u32,
    /// The snapshot, its keys at the top level.
    #[serde(flatten)]
    pub snapshot: Snapshot,
    /// Pending and firing alerts, most severe first.
    pub alerts: Vec<WireAlert>,
    /// GPU use per user and container.
    pub usage: WireUsage,
}

impl WireReport {
    /// The report of `snapshot`, `alerts` and `usage`, in this version of the wire form.
    pub fn new(snapshot: Snapshot, alerts: Vec<WireAlert>, usage: WireUsage) -> Self {
        Self {
            version: VERSION,
            snapshot,
            alerts,
            usage,
        }
    }

    /// The report without command lines, which may hold secrets.
    pub fn without_commands(mut self) -> Self {
        for process in &mut self.snapshot.processes {
            process.host.command = Reading::NotSupported;
        }
        self
    }
}

/// The version of a document in the wire form: its `version`, read apart from the
/// snapshot (a flattened envelope would be buffered whole before the snapshot's limits
/// apply).
pub fn version_of(document: &[u8]) -> Result<u32, serde_json::Error> {
    #[derive(Deserialize)]
    struct Envelope {
        version: u32,
    }
    serde_json::from_slice::<Envelope>(document).map(|e| e.version)
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

/// An optional figure with two decimals at most, for `serialize_with`.
pub(super) fn two_decimals_or_null<S: serde::Serializer>(
    value: &Option<f64>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    value.map(round2).serialize(serializer)
}

/// A time as RFC 3339, UTC, whole seconds, for `serialize_with`.
pub(super) fn rfc3339<S: serde::Serializer>(at: &SystemTime, serializer: S) -> Result<S::Ok, S::Error> {
    crate::format::rfc3339(*at).serialize(serializer)
}

/// The time a snapshot read from the wire has until its reader supplies one.
pub(super) fn epoch() -> SystemTime {
    UNIX_EPOCH
}

/// A key the wire form writes and a reader takes from elsewhere: its schema has no
/// `default` or `readOnly` (what serde's reader-side default would put there).
pub(super) fn written_only(schema: &mut schemars::Schema) {
    schema.remove("default");
    schema.remove("readOnly");
}

/// Latest time a reader accepts, in seconds since the epoch: the end of the year 9999.
pub const LATEST_TIME_UNIX_SECONDS: u64 = 253_402_300_799;

impl Snapshot {
    /// A snapshot read from the wire, taken at `taken_at` (the wire's timestamp has whole
    /// seconds only; a recording keeps its frames' own times, a remote view its arrival
    /// time), once [`Snapshot::check`] has found every value in range. Processes are sorted
    /// as the collector sorts them, and containers labelled as this gputop labels them.
    pub fn from_wire(mut self, taken_at: SystemTime) -> Result<Snapshot, WireError> {
        self.check()?;
        self.taken_at = taken_at;
        for container in self
            .processes
            .iter_mut()
            .filter_map(|p| p.host.container.as_mut())
        {
            Arc::make_mut(container).relabel();
        }
        super::order::by_gpu_memory(&mut self.processes);
        Ok(self)
    }

    /// The first value out of what gputop accepts, named by its place in the document:
    /// GPU indexes unique and under [`limits::DEVICES`], percentages at most 100 (a fan's
    /// at most 200: some boards report over 100), temperatures at most 1000 °C, numbers
    /// with a fraction finite and not negative, strings at most [`limits::TEXT_BYTES`].
    pub fn check(&self) -> Result<(), WireError> {
        text("hostname", Some(&self.hostname))?;
        for (place, value) in [
            ("driver_version", &self.driver_version),
            ("cuda_driver_version", &self.cuda_driver_version),
            ("nvml_version", &self.nvml_version),
        ] {
            text(place, value.value())?;
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
fn text<S: AsRef<str> + ?Sized>(place: &str, value: Option<&S>) -> Result<(), WireError> {
    match value.map(AsRef::as_ref) {
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

impl Device {
    fn check(&self, place: &dyn Fn(&str) -> String) -> Result<(), WireError> {
        for (field, value) in [
            ("driver", self.driver.value()),
            ("driver_version", self.driver_version.value()),
            ("name", self.name.value()),
            ("uuid", self.uuid.value()),
            ("pci_bus_id", self.pci_bus_id.value()),
            ("status_reason", self.status_reason.as_ref()),
            ("compute_mode", self.compute_mode.value()),
            ("process_list_error", self.process_list_error.as_ref()),
        ] {
            text(&place(field), value)?;
        }
        for reason in self.throttle_reasons.value().into_iter().flatten() {
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
            ("utilization_gpu_percent", &self.utilization_gpu_percent, 100),
            (
                "utilization_memory_percent",
                &self.utilization_memory_percent,
                100,
            ),
            (
                "encoder_utilization_percent",
                &self.encoder_utilization_percent,
                100,
            ),
            (
                "decoder_utilization_percent",
                &self.decoder_utilization_percent,
                100,
            ),
            ("fan_speed_percent", &self.fan_speed_percent, 200),
            ("temperature_celsius", &self.temperature_celsius, 1000),
            (
                "memory_temperature_celsius",
                &self.memory_temperature_celsius,
                1000,
            ),
            (
                "temperature_slowdown_celsius",
                &self.temperature_slowdown_celsius,
                1000,
            ),
            (
                "temperature_shutdown_celsius",
                &self.temperature_shutdown_celsius,
                1000,
            ),
        ] {
            at_most(&place(field), value.get(), max)?;
        }
        for speed in self.fan_speeds_percent.value().into_iter().flatten() {
            at_most(&place("fan_speeds_percent"), Some(*speed), 200)?;
        }
        for (field, value, max) in [
            (
                "utilization_gpu_mean_percent",
                &self.utilization_gpu_mean_percent,
                100.0,
            ),
            (
                "utilization_gpu_peak_percent",
                &self.utilization_gpu_peak_percent,
                100.0,
            ),
            (
                "utilization_memory_mean_percent",
                &self.utilization_memory_mean_percent,
                100.0,
            ),
            (
                "utilization_memory_peak_percent",
                &self.utilization_memory_peak_percent,
                100.0,
            ),
            ("power_usage_watts", &self.power_usage_watts, f64::MAX),
            ("power_instant_watts", &self.power_instant_watts, f64::MAX),
            ("power_usage_mean_watts", &self.power_usage_mean_watts, f64::MAX),
            ("power_usage_peak_watts", &self.power_usage_peak_watts, f64::MAX),
            ("power_limit_watts", &self.power_limit_watts, f64::MAX),
            (
                "power_enforced_limit_watts",
                &self.power_enforced_limit_watts,
                f64::MAX,
            ),
            ("energy_joules", &self.energy_joules, f64::MAX),
        ] {
            fraction(&place(field), value.get(), max)?;
        }
        for (i, m) in self.mig_devices.iter().enumerate() {
            let field = |name: &str| place(&format!("mig_devices[{i}].{name}"));
            text(&field("profile"), m.profile.value())?;
            text(&field("uuid"), m.uuid.value())?;
            at_most(
                &field("utilization_gpu_percent"),
                m.utilization_gpu_percent.get(),
                100,
            )?;
            for (j, pod) in m.pods.iter().enumerate() {
                pod_names(&field(&format!("pods[{j}]")), pod)?;
            }
        }
        Ok(())
    }
}

impl GpuProcess {
    fn check(&self, place: &dyn Fn(&str) -> String) -> Result<(), WireError> {
        if self.gpu_index as usize >= limits::DEVICES {
            return refuse(&place("gpu_index"), Problem::NotAGpuIndex(self.gpu_index));
        }
        let host = &self.host;
        for (field, value) in [
            ("gpu_uuid", self.gpu_uuid.as_deref()),
            ("user", host.user.as_deref()),
            ("command", host.command.as_deref()),
            ("unmapped_reason", host.unmapped_reason.as_deref()),
        ] {
            text(&place(field), value)?;
        }
        if let Some(c) = &host.container {
            text(&place("container.id"), Some(&c.id))?;
            text(&place("container.pod"), c.pod.as_ref())?;
            text(&place("container.label"), Some(&c.label))?;
            text(&place("container.user"), c.user.as_ref())?;
            if let Some(names) = &c.names {
                pod_names(&place("container.names"), names)?;
            }
        }
        for (field, value) in [
            ("sm_percent", &self.sm_percent),
            ("memory_bandwidth_percent", &self.memory_bandwidth_percent),
            ("encoder_percent", &self.encoder_percent),
            ("decoder_percent", &self.decoder_percent),
        ] {
            at_most(&place(field), value.get(), 100)?;
        }
        // A process can use many cores: 100 % each.
        fraction(&place("cpu_percent"), host.cpu_percent.get(), 100.0 * 65_536.0)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::model::{
        Bar1, Container, DeviceStatus, HostStats, Memory, MigDevice, MigId, PidMapping, testing,
    };

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
        d.utilization_gpu_percent = Reading::Value(87);
        d.utilization_gpu_mean_percent = Reading::Value(80.5);
        d.utilization_gpu_peak_percent = Reading::Value(99.0);
        d.set_memory(Reading::Value(Memory {
            total: 80 << 30,
            used: 60 << 30,
            free: 20 << 30,
            reserved: 1 << 20,
        }));
        d.set_bar1(Reading::Value(Bar1 {
            total: 1 << 30,
            used: 1 << 20,
        }));
        d.power_usage_watts = Reading::Value(312.5);
        d.power_enforced_limit_watts = Reading::Value(700.0);
        d.energy_joules = Reading::Value(123_456.789);
        d.pcie_tx_bytes_per_second = Reading::Value(4096 * 1024);
        d.set_fan_speeds(Reading::NotSupported);
        d.throttle_reasons = Reading::Value(vec!["sw_power_cap".into()]);
        d.temperature_celsius = Reading::failed("NVML_ERROR_UNKNOWN");
        d.mig_devices = vec![MigDevice {
            profile: Reading::Value("3g.40gb".into()),
            uuid: Reading::failed("timeout"),
            ..MigDevice::new(MigId {
                gpu_instance: 1,
                compute_instance: 0,
            })
        }];
        d.process_list_error = Some("process list needs root on MIG GPUs".into());
        d
    }

    /// A document in the wire form, as `--once --json` prints it.
    fn document(snapshot: &Snapshot) -> String {
        let usage = WireUsage {
            since: None,
            seconds: 0.0,
            users: Vec::new(),
            containers: Vec::new(),
        };
        let report = WireReport::new(snapshot.clone(), Vec::new(), usage);
        serde_json::to_string(&report).unwrap()
    }

    /// What a snapshot keeps through its wire form: everything the views show. Not on the
    /// wire: why a reading failed, the uid and parent PID, and the time below a second (the
    /// reader supplies the time).
    #[test]
    fn a_snapshot_survives_its_wire_form() {
        let taken_at = UNIX_EPOCH + Duration::from_secs(1_796_000_000);
        let mut p = testing::process(4242, 1, "alice", 3 << 30);
        p.host.command = Reading::failed("permission denied");
        p.host.local_pid = None;
        p.host.pid_mapping = PidMapping::Unmapped;
        p.host.unmapped_reason = Some("another PID namespace".into());
        p.gpu_instance_id = Some(1);
        p.compute_instance_id = Some(0);
        p.host.container = Some(Container::in_pod("a1a1a1a1a1a1", Some("5e1f0000-aaaa".into())).into());
        let lost = Device::unavailable(0, DeviceStatus::Lost, "fallen off the bus");
        let snapshot = testing::snapshot(taken_at, vec![lost, device()], vec![p]);
        let text = document(&snapshot);
        assert_eq!(version_of(text.as_bytes()).unwrap(), VERSION);
        // A label from outside is made again from the container's fields.
        let tampered = text.replace("pod:5e1f0000/a1a1a1a1a1a1", "\\u001b[2Jforged");
        let back: Snapshot = serde_json::from_str(&tampered).unwrap();
        let back = back.from_wire(taken_at).unwrap();
        assert_eq!(document(&back), text, "the same on the wire again");
        assert_eq!(back.taken_at, taken_at);
        assert_eq!(back.devices[0].status, DeviceStatus::Lost);
        assert_eq!(
            back.devices[0].status_reason.as_deref(),
            Some("fallen off the bus")
        );
        let (d, original) = (&back.devices[1], &snapshot.devices[1]);
        assert_eq!(
            d.temperature_celsius,
            Reading::NotSupported,
            "failed reads back unsupported"
        );
        assert_eq!(d.memory(), original.memory());
        assert_eq!(d.bar1(), original.bar1());
        assert_eq!(
            d.utilization_gpu_mean_percent,
            original.utilization_gpu_mean_percent
        );
        assert_eq!(
            d.utilization_gpu_peak_percent,
            original.utilization_gpu_peak_percent
        );
        assert_eq!(d.power_usage_watts, original.power_usage_watts);
        assert_eq!(d.energy_joules, original.energy_joules);
        assert_eq!(d.throttle_reasons, original.throttle_reasons);
        assert_eq!(d.mig_devices[0].profile, original.mig_devices[0].profile);
        assert_eq!(d.process_list_error, original.process_list_error);
        let (p, original) = (&back.processes[0], &snapshot.processes[0]);
        assert_eq!(p.mig(), original.mig());
        assert_eq!(p.host.pid_mapping, original.host.pid_mapping);
        assert_eq!(p.host.unmapped_reason, original.host.unmapped_reason);
        assert_eq!(p.local_pid(), None);
        assert_eq!(p.host.user, original.host.user);
        assert_eq!(p.gpu_memory_bytes, original.gpu_memory_bytes);
        assert_eq!(p.container_label(), "pod:5e1f0000/a1a1a1a1a1a1");
    }

    #[test]
    fn readings_are_values_in_their_units_and_unknown_ones_null() {
        let value = serde_json::to_value(device()).unwrap();
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
        let mut wire = testing::snapshot(UNIX_EPOCH, vec![device()], vec![p]);
        wire.devices[0].index = 0;
        assert!(wire.clone().from_wire(UNIX_EPOCH).is_ok());
        wire.devices[0].utilization_gpu_percent = Reading::Value(4_000);
        assert_eq!(
            wire.clone().check().unwrap_err().to_string(),
            "devices[0].utilization_gpu_percent: 4000 is over 100"
        );
        wire.devices[0].utilization_gpu_percent = Reading::Value(40);
        wire.devices[0].power_usage_watts = Reading::Value(-1.0);
        assert!(
            wire.check()
                .unwrap_err()
                .to_string()
                .starts_with("devices[0].power_usage_watts: -1")
        );
        wire.devices[0].power_usage_watts = Reading::NotSupported;
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
        let error = serde_json::from_str::<Snapshot>(&too_many)
            .unwrap_err()
            .to_string();
        assert!(error.contains("more than 64 items"), "{error}");
    }
}

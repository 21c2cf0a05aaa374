//! The Prometheus text exposition (format 0.0.4) of a snapshot: `gputop_` names in base
//! units, one family per metric with its HELP and TYPE once, labels `gpu`, `uuid` and
//! `name`; a value that is not supported or failed is an absent series, never NaN.

use std::fmt::Write;

use gputop_core::format::sanitize;
use gputop_core::model::{
    CLOCK_EVENT_REASONS, Container, Device, DeviceStatus, GpuProcess, PodContainer, Reading, Runtime,
    Snapshot, catalogue,
};
use gputop_core::monitor::clock_events::ClockEvents;
use gputop_core::monitor::usage::{Accounting, Usage};

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the exposition includes beyond the device figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// Per-process series (PIDs and users are high-cardinality labels).
    pub processes: bool,
    /// The command line as a label of per-process series (it may hold secrets).
    pub commands: bool,
}

/// Longest label value written; longer values are cut.
const LABEL_MAX: usize = 256;

/// A label value: sanitized, cut to `LABEL_MAX` bytes, and escaped for the format.
pub fn label_value(text: &str) -> String {
    let clean = sanitize(text);
    let mut cut = clean.as_str();
    if cut.len() > LABEL_MAX {
        let mut end = LABEL_MAX;
        while !cut.is_char_boundary(end) {
            end -= 1;
        }
        cut = &cut[..end];
    }
    cut.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One metric family under construction.
struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    samples: Vec<(String, f64)>,
}

impl Family {
    fn new(name: &'static str, kind: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }

    fn add(&mut self, labels: &str, value: Option<f64>) {
        if let Some(v) = value.filter(|v| v.is_finite()) {
            self.samples.push((labels.to_string(), v));
        }
    }

    /// Writes the family; one without samples is left out whole.
    fn write(&self, out: &mut String) {
        if self.samples.is_empty() {
            return;
        }
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind);
        for (labels, value) in &self.samples {
            if labels.is_empty() {
                let _ = writeln!(out, "{} {}", self.name, number(*value));
            } else {
                let _ = writeln!(out, "{}{{{labels}}} {}", self.name, number(*value));
            }
        }
    }
}

fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        format!("{value}")
    }
}

fn get<T: Copy + Into<f64>>(reading: &Reading<T>) -> Option<f64> {
    reading.get().map(Into::into)
}

/// A GPU's labels: `gpu`, `uuid`, `name`, `vendor` (`nvidia`, `amd`, `intel`) and `driver`
/// (`nvidia`, `amdgpu`, `i915`, `xe`), and `pod`, `namespace` and `container` while one pod's
/// container holds it (as dcgm-exporter labels them).
fn device_labels(d: &Device) -> String {
    let mut labels = format!(
        "gpu=\"{}\",uuid=\"{}\",name=\"{}\",{}",
        d.index,
        label_value(d.uuid.value().map_or("", String::as_str)),
        label_value(d.name.value().map_or("", String::as_str)),
        maker_labels(d)
    );
    if let [holder] = d.pods.as_slice() {
        labels.push_str(&pod_labels(holder));
    }
    labels
}

/// `vendor="...",driver="..."` of a GPU.
fn maker_labels(d: &Device) -> String {
    format!(
        "vendor=\"{}\",driver=\"{}\"",
        d.vendor.label(),
        label_value(d.driver.value().map_or("", String::as_str))
    )
}

/// `,pod="...",namespace="...",container="..."` of a pod's container.
fn pod_labels(holder: &PodContainer) -> String {
    format!(
        ",pod=\"{}\",namespace=\"{}\",container=\"{}\"",
        label_value(&holder.pod),
        label_value(&holder.namespace),
        label_value(&holder.container)
    )
}

/// The exposition of `snapshot`; `None` before the first collection (`gputop_up 0`).
pub fn exposition(snapshot: Option<(&Snapshot, &Accounting, &ClockEvents)>, options: Options) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let mut up = Family::new("gputop_up", "gauge", "1 once gputop has collected a snapshot.");
    up.add("", Some(if snapshot.is_some() { 1.0 } else { 0.0 }));
    up.write(&mut out);
    let mut build = Family::new(
        "gputop_build_info",
        "gauge",
        "gputop's version, as a label; the value is always 1.",
    );
    build.add(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION")), Some(1.0));
    build.write(&mut out);
    let Some((snapshot, usage, clock_events)) = snapshot else {
        return out;
    };

    let mut collected = Family::new(
        "gputop_last_collect_timestamp_seconds",
        "gauge",
        "When the snapshot served was taken, in seconds since the Unix epoch.",
    );
    collected.add("", Some(gputop_core::monitor::history::timestamp(snapshot)));
    collected.write(&mut out);

    let mut info = Family::new(
        catalogue::GPU_INFO,
        "gauge",
        "Identity of each GPU, as labels; the value is always 1.",
    );
    let mut gpu_up = Family::new(
        "gputop_gpu_up",
        "gauge",
        "1 if the GPU answers, 0 if it is lost or failing.",
    );
    for d in &snapshot.devices {
        let labels = device_labels(d);
        gpu_up.add(
            &labels,
            Some(if d.status == DeviceStatus::Ok { 1.0 } else { 0.0 }),
        );
        info.add(
            &format!(
                "{labels},pci_bus_id=\"{}\",driver_version=\"{}\"",
                label_value(d.pci_bus_id.value().map_or("", String::as_str)),
                label_value(d.driver_version.value().map_or("", String::as_str))
            ),
            Some(1.0),
        );
    }
    gpu_up.write(&mut out);
    info.write(&mut out);

    let ok: Vec<&Device> = snapshot
        .devices
        .iter()
        .filter(|d| d.status == DeviceStatus::Ok)
        .collect();
    for gauge in catalogue::DEVICE_GAUGES {
        let mut family = Family::new(gauge.name, "gauge", gauge.help);
        for d in &ok {
            family.add(&device_labels(d), gauge.exported(d));
        }
        family.write(&mut out);
    }
    let mut clocks = Family::new(
        "gputop_gpu_clock_hertz",
        "gauge",
        "Current clock, by clock domain.",
    );
    for d in &ok {
        let labels = device_labels(d);
        for (domain, reading) in [
            ("graphics", &d.clock_graphics_mhz),
            ("sm", &d.clock_sm_mhz),
            ("memory", &d.clock_memory_mhz),
            ("video", &d.clock_video_mhz),
        ] {
            clocks.add(
                &format!("{labels},clock=\"{domain}\""),
                get(reading).map(|mhz| mhz * 1e6),
            );
        }
    }
    clocks.write(&mut out);
    let mut energy = Family::new(
        "gputop_gpu_energy_joules_total",
        "counter",
        "Energy used since the driver loaded.",
    );
    let mut ecc = Family::new(
        "gputop_gpu_ecc_uncorrected_errors_total",
        "counter",
        "Uncorrected ECC errors since the driver loaded.",
    );
    let mut count = Family::new(catalogue::GPU_PROCESSES, "gauge", "Processes holding the GPU.");
    for d in &ok {
        let labels = device_labels(d);
        energy.add(&labels, d.energy_joules.get());
        ecc.add(&labels, d.ecc_uncorrected_volatile_errors.get().map(|n| n as f64));
        let held = snapshot
            .processes
            .iter()
            .filter(|p| p.gpu_index == d.index)
            .count();
        count.add(&labels, Some(held as f64));
    }
    energy.write(&mut out);
    ecc.write(&mut out);
    count.write(&mut out);
    clock_event_families(&ok, clock_events, &mut out);
    memory_fault_families(&ok, &mut out);
    nvlink_families(&ok, &mut out);
    xid_families(&ok, &mut out);
    mig_families(snapshot, &ok, &mut out);
    if options.processes {
        process_families(snapshot, options, &mut out);
        usage_families(usage, &mut out);
    }
    out
}

/// Memory the GPU has taken out of use: remapped rows (Ampere and newer) with a pending or
/// failed remap, and retired pages (before Ampere). Absent where the GPU has none of either.
fn memory_fault_families(devices: &[&Device], out: &mut String) {
    let mut rows = Family::new(
        "gputop_gpu_remapped_rows",
        "gauge",
        "Memory rows remapped after correctable or uncorrectable errors (Ampere and newer).",
    );
    let mut pending = Family::new(
        "gputop_gpu_row_remap_pending",
        "gauge",
        "1 when a row remap waits for a GPU reset.",
    );
    let mut failure = Family::new(
        "gputop_gpu_row_remap_failure",
        "gauge",
        "1 when a row remap failed: the GPU needs service.",
    );
    let mut pages = Family::new(
        "gputop_gpu_retired_pages",
        "gauge",
        "Memory pages retired after ECC errors (Kepler to Turing).",
    );
    let flag = |on: bool| Some(if on { 1.0 } else { 0.0 });
    for d in devices {
        let labels = device_labels(d);
        if let Some(r) = d.remapped_rows() {
            rows.add(
                &format!("{labels},cause=\"correctable\""),
                Some(f64::from(r.correctable)),
            );
            rows.add(
                &format!("{labels},cause=\"uncorrectable\""),
                Some(f64::from(r.uncorrectable)),
            );
            pending.add(&labels, flag(r.pending));
            failure.add(&labels, flag(r.failure));
        }
        if let Some(p) = d.retired_pages() {
            pages.add(
                &format!("{labels},cause=\"single_bit_ecc\""),
                Some(f64::from(p.single_bit)),
            );
            pages.add(
                &format!("{labels},cause=\"double_bit_ecc\""),
                Some(f64::from(p.double_bit)),
            );
        }
    }
    for family in [rows, pending, failure, pages] {
        family.write(out);
    }
}

/// Each NVLink of each GPU: up or down, and its data link error counters.
fn nvlink_families(devices: &[&Device], out: &mut String) {
    let mut active = Family::new("gputop_gpu_nvlink_active", "gauge", "1 while the NVLink is up.");
    let mut errors = Family::new(
        "gputop_gpu_nvlink_errors_total",
        "counter",
        "NVLink data link errors since the driver loaded, by counter (replay, recovery, crc_flit, crc_data).",
    );
    for d in devices {
        for l in d.nvlinks.value().into_iter().flatten() {
            let labels = format!("{},link=\"{}\"", device_labels(d), l.link);
            active.add(&labels, Some(if l.active { 1.0 } else { 0.0 }));
            for (counter, value) in [
                ("replay", l.replay_errors),
                ("recovery", l.recovery_errors),
                ("crc_flit", l.crc_flit_errors),
                ("crc_data", l.crc_data_errors),
            ] {
                errors.add(
                    &format!("{labels},counter=\"{counter}\""),
                    value.map(|v| v as f64),
                );
            }
        }
    }
    active.write(out);
    errors.write(out);
}

/// Xid errors since the exporter began watching each GPU's events, per Xid; and the critical
/// ones together, present at 0 from the start so that a rule sees the first one arrive.
/// Absent where the GPU's events are not watched.
fn xid_families(devices: &[&Device], out: &mut String) {
    let mut errors = Family::new(
        "gputop_gpu_xid_errors_total",
        "counter",
        "Xid errors the driver reported since the exporter started watching, by Xid.",
    );
    let mut critical = Family::new(
        "gputop_gpu_critical_xid_errors_total",
        "counter",
        "Critical Xid errors (every Xid but 13, 31, 43, 45, 68 and 109, which applications cause) since the exporter started watching.",
    );
    for d in devices {
        let (Some(xids), Some(critical_count)) = (d.xid_errors.value(), d.critical_xids()) else {
            continue;
        };
        let labels = device_labels(d);
        for c in xids {
            errors.add(&format!("{labels},xid=\"{}\"", c.xid), Some(c.count as f64));
        }
        critical.add(&labels, Some(critical_count as f64));
    }
    errors.write(out);
    critical.write(out);
}

/// Each clock event reason of each GPU: whether it holds the clocks down now (1 or 0, every
/// reason nvml.h names, so a query sees the series before the event), and for how many
/// seconds it has since the exporter started.
fn clock_event_families(devices: &[&Device], events: &ClockEvents, out: &mut String) {
    let mut active = Family::new(
        "gputop_gpu_clock_event_active",
        "gauge",
        "1 while the reason holds the GPU's clocks down (NVML's clock event or throttle reasons).",
    );
    let mut seconds = Family::new(
        "gputop_gpu_clock_event_seconds_total",
        "counter",
        "Seconds the reason has held the GPU's clocks down since the exporter started.",
    );
    for d in devices {
        let Some(now) = d.throttle_reasons.value() else {
            continue;
        };
        let device = device_labels(d);
        for (_, reason) in CLOCK_EVENT_REASONS {
            let labels = format!("{device},reason=\"{reason}\"");
            let on = now.iter().any(|r| r == reason);
            active.add(&labels, Some(if on { 1.0 } else { 0.0 }));
            seconds.add(&labels, Some(events.seconds(d.index, reason)));
        }
    }
    active.write(out);
    seconds.write(out);
}

/// Per user and per container (`-`: on the host): GPUs, memory and processes now, and
/// what accumulated since the exporter first counted (the totals survive restarts). Names for
/// users, for containers, type, help.
type UsageFamily = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    fn(&Usage) -> f64,
);
const USAGE_FAMILIES: [UsageFamily; 6] = [
    (
        "gputop_user_gpus",
        "gputop_container_gpus",
        "gauge",
        "GPUs holding at least one of its processes.",
        |u| u.gpus.len() as f64,
    ),
    (
        "gputop_user_gpu_memory_bytes",
        "gputop_container_gpu_memory_bytes",
        "gauge",
        "GPU memory its processes hold.",
        |u| u.memory_bytes as f64,
    ),
    (
        "gputop_user_processes",
        "gputop_container_processes",
        "gauge",
        "Its processes on GPUs.",
        |u| u.processes as f64,
    ),
    (
        "gputop_user_gpu_seconds_total",
        "gputop_container_gpu_seconds_total",
        "counter",
        "GPU-seconds since counting began (kept across restarts): each GPU holding one of its processes counts one per second.",
        |u| u.gpu_seconds,
    ),
    (
        "gputop_user_gpu_memory_byte_seconds_total",
        "gputop_container_gpu_memory_byte_seconds_total",
        "counter",
        "GPU memory held over time since counting began (kept across restarts), in byte-seconds.",
        |u| u.memory_byte_seconds,
    ),
    (
        "gputop_user_gpu_energy_joules_total",
        "gputop_container_gpu_energy_joules_total",
        "counter",
        "GPU energy its processes used since counting began (kept across restarts), in joules: each GPU's energy shared among its processes by SM utilization, evenly when the GPU is idle.",
        |u| u.energy_joules,
    ),
];

fn usage_families(usage: &Accounting, out: &mut String) {
    for (user_name, container_name, kind, help, read) in USAGE_FAMILIES {
        for (name, label, table) in [
            (user_name, "user", &usage.users),
            (container_name, "container", &usage.containers),
        ] {
            let mut family = Family::new(name, kind, help);
            for (owner, u) in table {
                family.add(&format!("{label}=\"{}\"", label_value(owner)), Some(read(u)));
            }
            family.write(out);
        }
    }
}

/// Each MIG device's memory and process count, labelled with its GPU and instance ids.
fn mig_families(snapshot: &Snapshot, devices: &[&Device], out: &mut String) {
    let mut total = Family::new(
        "gputop_mig_memory_total_bytes",
        "gauge",
        "Memory of a MIG device.",
    );
    let mut used = Family::new(
        "gputop_mig_memory_used_bytes",
        "gauge",
        "Memory used on a MIG device.",
    );
    let mut processes = Family::new("gputop_mig_processes", "gauge", "Processes on a MIG device.");
    for d in devices {
        for m in &d.mig_devices {
            let mut labels = format!(
                "{},gpu_instance=\"{}\",compute_instance=\"{}\",profile=\"{}\",mig_uuid=\"{}\"",
                device_labels(d),
                m.gpu_instance_id,
                m.compute_instance_id,
                label_value(m.profile.value().map_or("", String::as_str)),
                label_value(m.uuid.value().map_or("", String::as_str)),
            );
            // The MIG device's own holder (a whole GPU's already labels all of it).
            if let ([], [holder]) = (d.pods.as_slice(), m.pods.as_slice()) {
                labels.push_str(&pod_labels(holder));
            }
            total.add(&labels, m.memory_total_bytes.get().map(|bytes| bytes as f64));
            used.add(&labels, m.memory_used_bytes.get().map(|bytes| bytes as f64));
            let held = snapshot
                .processes
                .iter()
                .filter(|p| p.gpu_index == d.index && p.mig() == Some(m.id()))
                .count();
            processes.add(&labels, Some(held as f64));
        }
    }
    total.write(out);
    used.write(out);
    processes.write(out);
}

fn process_families(snapshot: &Snapshot, options: Options, out: &mut String) {
    let makers: std::collections::HashMap<u32, String> = snapshot
        .devices
        .iter()
        .map(|d| (d.index, maker_labels(d)))
        .collect();
    let labels = |p: &GpuProcess| {
        let container = p.host.container.as_deref();
        let mut text = format!(
            "gpu=\"{}\",uuid=\"{}\",{},pid=\"{}\",type=\"{}\",user=\"{}\"",
            p.gpu_index,
            label_value(p.gpu_uuid.value().map_or("", String::as_str)),
            makers
                .get(&p.gpu_index)
                .map_or("vendor=\"\",driver=\"\"", String::as_str),
            p.pid,
            p.kind.label(),
            label_value(p.host.user.as_deref().unwrap_or("")),
        );
        // A pod's process by the kubelet's names (as dcgm-exporter labels them), else the
        // container as the CONTAINER column shows it; a Slurm job's number and user.
        match container {
            Some(Container {
                names: Some(names), ..
            }) => text.push_str(&pod_labels(names)),
            _ => {
                let label = container.map_or("", Container::label);
                let _ = write!(text, ",container=\"{}\"", label_value(label));
            }
        }
        if let Some(job) = container.filter(|c| c.runtime == Runtime::Slurm) {
            // The job's user where its cgroup path names one, else the process's owner.
            let user = job.user.as_deref().or(p.host.user.as_deref());
            let _ = write!(
                text,
                ",slurm_job=\"{}\",slurm_user=\"{}\"",
                label_value(&job.id),
                label_value(user.unwrap_or(""))
            );
        }
        if let Some(id) = p.mig() {
            let _ = write!(text, ",mig=\"{}/{}\"", id.gpu_instance, id.compute_instance);
        }
        if options.commands {
            let command = p.host.command.as_deref().unwrap_or("");
            let _ = write!(text, ",command=\"{}\"", label_value(command));
        }
        text
    };
    let mut memory = Family::new(
        catalogue::PROCESS_GPU_MEMORY,
        "gauge",
        "GPU memory a process holds on a GPU.",
    );
    let mut sm = Family::new(
        catalogue::PROCESS_SM_UTILIZATION,
        "gauge",
        "Share of the GPU's SM time a process used in the last sample (AMD and Intel: its \
         engines' busy time summed, at most 1).",
    );
    let mut engines = Family::new(
        "gputop_process_engine_utilization_ratio",
        "gauge",
        "AMD and Intel: share of an engine class a process kept busy over the last interval (0 to 1).",
    );
    let mut system_memory = Family::new(
        "gputop_process_gpu_system_memory_bytes",
        "gauge",
        "AMD and Intel: system memory the GPU maps that a process holds (GTT, system region).",
    );
    let mut cpu = Family::new(
        catalogue::PROCESS_CPU,
        "gauge",
        "CPU time a process used over the last interval, in CPUs (1 = one full core).",
    );
    for p in &snapshot.processes {
        let labels = labels(p);
        memory.add(&labels, p.gpu_memory_bytes.get().map(|b| b as f64));
        sm.add(&labels, get(&p.sm_percent).map(|s| s / 100.0));
        cpu.add(&labels, p.host.cpu_percent.get().map(|c| c / 100.0));
        system_memory.add(&labels, p.gpu_system_memory_bytes.get().map(|b| b as f64));
        for (engine, percent) in &p.engines_percent {
            let engine = engine.label();
            engines.add(&format!("{labels},engine=\"{engine}\""), Some(percent / 100.0));
        }
    }
    memory.write(out);
    system_memory.write(out);
    sm.write(out);
    engines.write(out);
    cpu.write(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_sanitized_and_cut() {
        assert_eq!(label_value("a\"b\\c"), "a\\\"b\\\\c");
        assert_eq!(
            label_value("x\ny"),
            "x\\\\ny",
            "a newline is shown as text, then escaped"
        );
        assert!(!label_value("evil\u{1b}[2J").contains('\u{1b}'));
        assert!(label_value(&"é".repeat(300)).len() <= LABEL_MAX);
    }

    #[test]
    fn a_slurm_job_without_a_user_in_its_cgroup_is_labelled_with_the_owner() {
        use gputop_core::model::testing::{process, snapshot};
        use std::time::{Duration, SystemTime};
        let mut named = process(10, 0, "alice", 1 << 30);
        named.host.container = Some(
            Container {
                user: Some("bob".into()),
                ..Container::new(Runtime::Slurm, "77")
            }
            .into(),
        );
        let mut unnamed = process(11, 0, "carol", 1 << 30);
        unnamed.host.container = Some(Container::new(Runtime::Slurm, "78").into());
        let snapshot = snapshot(SystemTime::UNIX_EPOCH, Vec::new(), vec![named, unnamed]);
        let interval = Duration::from_secs(1);
        let (usage, clocks) = (Accounting::new(interval), ClockEvents::new(interval));
        let options = Options {
            processes: true,
            commands: false,
        };
        let text = exposition(Some((&snapshot, &usage, &clocks)), options);
        assert!(text.contains("slurm_job=\"77\",slurm_user=\"bob\""), "{text}");
        assert!(text.contains("slurm_job=\"78\",slurm_user=\"carol\""), "{text}");
        assert!(!text.contains("slurm_user=\"\""), "{text}");
    }

    #[test]
    fn before_the_first_snapshot_only_up_zero_and_build_info() {
        let text = exposition(None, Options::default());
        assert!(text.contains("\ngputop_up 0\n"), "{text}");
        assert!(text.contains("gputop_build_info{version="));
        assert!(text.ends_with('\n'));
    }
}

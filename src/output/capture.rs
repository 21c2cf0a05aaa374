//! `gputop capture`: what a machine's NVML answered over a few seconds, written as a
//! simulator scenario that replays the same machine, for bug reports and for turning a
//! real GPU into a test.
//!
//! The scenario holds what `--once --json` shows of the devices and their processes (PIDs,
//! types, memory, %SM; no users or command lines), the driver's versions and missing
//! exports, and every device sample with its time taken from the driver's own stamps. On a
//! machine with AMD or Intel GPUs, its `[drm]` table holds the sysfs files and the DRM
//! clients' fdinfo that gputop read, at the first and the last refresh, which gputop's DRM
//! reader serves again in a test.

use std::collections::BTreeMap;

use toml::{Table, Value};

use gputop_core::model::{Device, DeviceStatus, Reading};
use gputop_core::source::Readout;
use gputop_core::source::nvml::{DriverExports, RawSample, SampledMetric};

/// One refresh of a capture: its second since the capture began, what it read, and the
/// device samples the driver gave it.
#[derive(Debug, Clone)]
pub struct CapturedRead {
    pub at: f64,
    pub readout: Readout,
    pub samples: Vec<RawSample>,
}

/// Everything a capture read.
#[derive(Debug, Clone)]
pub struct Captured {
    pub hostname: String,
    pub exports: DriverExports,
    pub reads: Vec<CapturedRead>,
}

impl Captured {
    fn samples(&self) -> impl Iterator<Item = &RawSample> {
        self.reads.iter().flat_map(|r| &r.samples)
    }
}

/// The exports of no NVML library.
pub fn no_exports() -> DriverExports {
    DriverExports {
        absent: Vec::new(),
        v3_entry_bytes: None,
    }
}

/// The `[drm]` table of a capture: the AMD and Intel GPUs' files as read.
pub fn drm_section(files: &gputop_core::source::drm::captured::Captured) -> String {
    let mut root = Table::new();
    if let Ok(value) = Value::try_from(files) {
        root.insert("drm".into(), value);
    }
    format!(
        "\n# The AMD and Intel GPUs' sysfs files and DRM clients' fdinfo as gputop read them, at \
         the first refresh and the last, {:.1} s later.\n{}",
        files.seconds,
        toml::to_string(&root).unwrap_or_default()
    )
}

/// The scenario text of a capture.
pub fn scenario(capture: &Captured) -> String {
    let Some(first) = capture.reads.first() else {
        return String::new();
    };
    let driver = &first.readout.driver;
    let text = |r: &Reading<String>| r.value().cloned().unwrap_or_default();
    let mut meta = Table::new();
    meta.insert("version".into(), Value::Integer(1));
    meta.insert(
        "name".into(),
        Value::String(format!("capture of {}", capture.hostname)),
    );
    let mut system = Table::new();
    system.insert(
        "driver_version".into(),
        Value::String(text(&driver.driver_version)),
    );
    system.insert("nvml_version".into(), Value::String(text(&driver.nvml_version)));
    if let Some(cuda) = driver.cuda_driver_version.value().and_then(|v| cuda_number(v)) {
        system.insert("cuda_driver_version".into(), Value::Integer(cuda));
    }
    let absent = capture.exports.absent.iter().map(|n| Value::String((*n).into()));
    system.insert("missing_symbols".into(), Value::Array(absent.collect()));
    if let Some(bytes) = capture.exports.v3_entry_bytes {
        system.insert("process_v3_entry_bytes".into(), Value::Integer(bytes as i64));
    }
    let samples: Vec<RawSample> = capture.samples().copied().collect();
    let period_ms = sample_period_ms(&samples);
    let mut sim = Table::new();
    sim.insert("samples_period_ms".into(), Value::Integer(period_ms as i64));
    sim.insert(
        "sample_clock".into(),
        Value::String(sample_clock(&samples).into()),
    );
    let refused = capture.reads.iter().flat_map(|r| &r.readout.devices).any(|d| {
        d.process_list_error
            .as_deref()
            .is_some_and(|why| why.contains("needs root"))
    });
    if refused {
        sim.insert("caller".into(), Value::String("user".into()));
    }
    let gpus = first
        .readout
        .devices
        .iter()
        .map(|d| Value::Table(gpu(d, capture, period_ms)))
        .collect();
    let mut root = Table::new();
    root.insert("meta".into(), Value::Table(meta));
    root.insert("system".into(), Value::Table(system));
    root.insert("sim".into(), Value::Table(sim));
    root.insert("gpu".into(), Value::Array(gpus));
    let seconds = capture.reads.last().map_or(0.0, |r| r.at);
    let first_stamp = samples.iter().map(|s| s.timestamp_us).min();
    format!(
        "# gputop capture of {} ({} refreshes over {seconds:.1} s; {} device samples, the first \
         stamped {} on the driver's clock).\n\
         # Scenario time 0 is the first refresh; samples keep their place on the driver's clock.\n\
         # Replay: GPUTOP_SIM_SCENARIO=THIS_FILE gputop --nvml-lib libnvml_sim.so\n{}",
        sanitize_comment(&capture.hostname),
        capture.reads.len(),
        samples.len(),
        first_stamp.map_or("-".into(), |s| s.to_string()),
        toml::to_string(&root).unwrap_or_default()
    )
}

/// A host name inside a TOML comment: one line, printable.
fn sanitize_comment(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(255).collect()
}

/// `"12.4"` as NVML's number, 12040.
fn cuda_number(text: &str) -> Option<i64> {
    let (major, minor) = text.split_once('.')?;
    Some(major.parse::<i64>().ok()? * 1000 + minor.parse::<i64>().ok()? * 10)
}

/// The driver's sample period: the commonest gap between one GPU's samples of one metric.
fn sample_period_ms(samples: &[RawSample]) -> u64 {
    let mut gaps: BTreeMap<u64, usize> = BTreeMap::new();
    for pair in samples.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.gpu == b.gpu && a.metric == b.metric && b.timestamp_us > a.timestamp_us {
            let ms = (b.timestamp_us - a.timestamp_us + 500) / 1000;
            *gaps.entry(ms).or_default() += 1;
        }
    }
    gaps.into_iter()
        .max_by_key(|(_, n)| *n)
        .map_or(167, |(ms, _)| ms.clamp(1, 10_000))
}

/// Stamps within a year of the present Unix time are Unix time; others count from boot.
fn sample_clock(samples: &[RawSample]) -> &'static str {
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let year_us = 365 * 24 * 3600 * 1_000_000u64;
    match samples.first() {
        Some(s) if s.timestamp_us.abs_diff(now_us) < year_us => "epoch",
        _ => "boot",
    }
}

/// Step keyframes, or `None` for no points; a point that repeats the value before it is
/// left out, as it changes nothing.
fn keyframes(points: impl IntoIterator<Item = (f64, f64)>) -> Option<Value> {
    let mut last = None;
    let points: Vec<Value> = points
        .into_iter()
        .filter(|(_, v)| last.replace(*v) != Some(*v))
        .map(|(t, v)| {
            let t = (t * 1e6).round() / 1e6;
            Value::Array(vec![Value::Float(t), Value::Float(v)])
        })
        .collect();
    if points.is_empty() {
        return None;
    }
    let mut table = Table::new();
    table.insert("keyframes".into(), Value::Array(points));
    table.insert("interp".into(), Value::String("step".into()));
    Some(Value::Table(table))
}

/// One number read off a device.
type DeviceValue = fn(&Device) -> Option<f64>;

/// A GPU's reading at each refresh, as step keyframes.
fn per_read(capture: &Captured, index: u32, value: DeviceValue) -> Option<Value> {
    keyframes(capture.reads.iter().filter_map(|r| {
        let device = r.readout.devices.iter().find(|d| d.index == index)?;
        Some((r.at, value(device)?))
    }))
}

/// One metric's samples of GPU `index` at scenario times: the newest sample the first
/// refresh got is at 0, the others where the driver's stamps put them, each half a period
/// early so that the simulator's ticks fall inside it rather than on its edge.
fn sampled(capture: &Captured, index: u32, metric: SampledMetric, period_ms: u64) -> Option<Value> {
    let first = capture.reads.first()?;
    let anchor = first
        .samples
        .iter()
        .filter(|s| s.gpu == index)
        .map(|s| s.timestamp_us)
        .max()?;
    let mut stamps: BTreeMap<u64, f64> = BTreeMap::new();
    for s in capture.samples().filter(|s| s.gpu == index && s.metric == metric) {
        stamps.insert(s.timestamp_us, s.value);
    }
    let half = period_ms as f64 / 2000.0;
    keyframes(
        stamps
            .into_iter()
            .map(|(stamp, v)| ((stamp as f64 - anchor as f64) / 1e6 - half, v)),
    )
}

fn value_of<T: Copy + Into<f64>>(reading: &Reading<T>) -> Option<f64> {
    reading.get().map(Into::into)
}

/// Faults that make the simulator answer as the driver did where a reading failed or was
/// not supported at the first refresh.
fn faults(d: &Device) -> Vec<Value> {
    let fields: [(&str, Option<bool>); 12] = [
        ("memory", unread(&d.memory_total_bytes)),
        ("bar1", unread(&d.bar1_total_bytes)),
        ("utilization", unread(&d.utilization_gpu_percent)),
        ("temperature", unread(&d.temperature_celsius)),
        ("power_usage", unread(&d.power_usage_watts)),
        ("power_limit", unread(&d.power_limit_watts)),
        ("enforced_power_limit", unread(&d.power_enforced_limit_watts)),
        ("energy", unread(&d.energy_joules)),
        ("pstate", unread(&d.performance_state)),
        ("encoder", unread(&d.encoder_utilization_percent)),
        ("decoder", unread(&d.decoder_utilization_percent)),
        ("clocks", unread(&d.clock_sm_mhz)),
    ];
    let mut faults: Vec<Value> = fields
        .into_iter()
        .filter_map(|(field, supported)| {
            let error = if supported? { "UNKNOWN" } else { "NOT_SUPPORTED" };
            Some(fault(field, error))
        })
        .collect();
    match d.status {
        DeviceStatus::Ok => {}
        DeviceStatus::Lost => faults.push(fault("*", "GPU_IS_LOST")),
        DeviceStatus::Error => faults.push(fault("*", "UNKNOWN")),
    }
    faults
}

/// `None` for a value; `Some(false)` not supported; `Some(true)` failed.
fn unread<T>(reading: &Reading<T>) -> Option<bool> {
    match reading {
        Reading::Value(_) => None,
        Reading::NotSupported => Some(false),
        Reading::Failed(_) => Some(true),
    }
}

fn fault(field: &str, error: &str) -> Value {
    let mut table = Table::new();
    table.insert("field".into(), Value::String(field.into()));
    table.insert("error".into(), Value::String(error.into()));
    Value::Table(table)
}

fn int(table: &mut Table, key: &str, value: Option<u64>) {
    if let Some(v) = value {
        table.insert(key.into(), Value::Integer(i64::try_from(v).unwrap_or(i64::MAX)));
    }
}

/// One `[[gpu]]` table: identity and limits from the first refresh, readings as keyframes.
fn gpu(d: &Device, capture: &Captured, period_ms: u64) -> Table {
    let mut g = Table::new();
    let text = |r: &Reading<String>| r.value().cloned();
    if let Some(name) = text(&d.name) {
        g.insert("name".into(), Value::String(name));
    }
    if let Some(uuid) = text(&d.uuid) {
        g.insert("uuid".into(), Value::String(uuid));
    }
    if let Some(pci) = text(&d.pci_bus_id).and_then(|id| pci_table(&id)) {
        g.insert("pci".into(), Value::Table(pci));
    }
    if let Some(memory) = d.memory().value() {
        int(&mut g, "memory_total", Some(memory.total));
        int(&mut g, "memory_reserved", Some(memory.reserved));
    }
    if let Some(bar1) = d.bar1().value() {
        int(&mut g, "bar1_total", Some(bar1.total));
        int(&mut g, "bar1_used", Some(bar1.used));
    }
    // The simulator's units are the driver's: milliwatts and millijoules.
    let thousandths = |r: &Reading<f64>| r.get().map(|v| (v * 1000.0).round() as u64);
    int(&mut g, "power_limit_mw", thousandths(&d.power_limit_watts));
    int(&mut g, "energy_start_mj", thousandths(&d.energy_joules));
    int(
        &mut g,
        "enforced_power_limit_mw",
        thousandths(&d.power_enforced_limit_watts),
    );
    let fans = d.fan_speeds_percent.value().map_or(0, Vec::len);
    int(&mut g, "fans", Some(fans as u64));
    let mut thresholds = Table::new();
    int(
        &mut thresholds,
        "shutdown",
        d.temperature_shutdown_celsius.get().map(u64::from),
    );
    int(
        &mut thresholds,
        "slowdown",
        d.temperature_slowdown_celsius.get().map(u64::from),
    );
    g.insert("temperature_thresholds".into(), Value::Table(thresholds));
    if let (Some(graphics), Some(sm), Some(mem), Some(video)) = (
        d.clock_max_graphics_mhz.get(),
        d.clock_max_sm_mhz.get(),
        d.clock_max_memory_mhz.get(),
        d.clock_max_video_mhz.get(),
    ) {
        let mut clocks = Table::new();
        for (key, v) in [("graphics", graphics), ("sm", sm), ("mem", mem), ("video", video)] {
            int(&mut clocks, key, Some(u64::from(v)));
        }
        g.insert("max_clocks_mhz".into(), Value::Table(clocks));
    }
    if let (Some(max_gen), Some(max_width), Some(generation), Some(width)) = (
        d.pcie_link_max_generation.get(),
        d.pcie_link_max_width.get(),
        d.pcie_link_generation.get(),
        d.pcie_link_width.get(),
    ) {
        let mut pcie = Table::new();
        for (key, v) in [
            ("max_gen", max_gen),
            ("max_width", max_width),
            ("gen", generation),
            ("width", width),
        ] {
            int(&mut pcie, key, Some(u64::from(v)));
        }
        g.insert("pcie".into(), Value::Table(pcie));
    }
    if let Some(mode) = d.compute_mode.value() {
        g.insert("compute_mode".into(), Value::String(mode.clone()));
    }
    if let Some(persistence) = d.persistence_mode.get() {
        g.insert("persistence".into(), Value::Boolean(persistence));
    }
    let mig = match d.mig_mode {
        Reading::Value(true) => "enabled",
        Reading::Value(false) => "disabled",
        _ => "unsupported",
    };
    g.insert("mig".into(), Value::String(mig.into()));
    let mut ecc = Table::new();
    ecc.insert("supported".into(), Value::Boolean(d.ecc_enabled.get().is_some()));
    int(
        &mut ecc,
        "volatile_uncorrected",
        d.ecc_uncorrected_volatile_errors.get(),
    );
    g.insert("ecc".into(), Value::Table(ecc));
    match (d.remapped_rows(), &d.remapped_rows_correctable) {
        (Some(r), _) => {
            let mut rows = Table::new();
            int(&mut rows, "correctable", Some(u64::from(r.correctable)));
            int(&mut rows, "uncorrectable", Some(u64::from(r.uncorrectable)));
            rows.insert("pending".into(), Value::Boolean(r.pending));
            rows.insert("failure".into(), Value::Boolean(r.failure));
            g.insert("remapped_rows".into(), Value::Table(rows));
        }
        (None, Reading::NotSupported) => {
            g.insert("remapped_rows".into(), Value::Boolean(false));
        }
        (None, _) => {}
    }
    if let Reading::Value(links) = &d.nvlinks {
        let mut nvlink = Table::new();
        int(&mut nvlink, "links", Some(links.len() as u64));
        // The simulator keeps every counter: one the driver did not give is captured as 0.
        let list = |f: fn(&gputop_core::model::NvLink) -> Option<u64>| {
            let counts = links
                .iter()
                .map(|l| f(l).unwrap_or(0).min(i64::MAX as u64) as i64);
            Value::Array(counts.map(Value::Integer).collect())
        };
        let inactive = links
            .iter()
            .filter(|l| !l.active)
            .map(|l| Value::Integer(i64::from(l.link)));
        nvlink.insert("inactive".into(), Value::Array(inactive.collect()));
        nvlink.insert("replay".into(), list(|l| l.replay_errors));
        nvlink.insert("recovery".into(), list(|l| l.recovery_errors));
        nvlink.insert("crc_flit".into(), list(|l| l.crc_flit_errors));
        nvlink.insert("crc_data".into(), list(|l| l.crc_data_errors));
        g.insert("nvlink".into(), Value::Table(nvlink));
    }
    if let Some(p) = d.retired_pages() {
        let mut pages = Table::new();
        int(&mut pages, "single_bit", Some(u64::from(p.single_bit)));
        int(&mut pages, "double_bit", Some(u64::from(p.double_bit)));
        g.insert("retired_pages".into(), Value::Table(pages));
    }
    g.insert(
        "dynamic".into(),
        Value::Table(dynamic(d.index, capture, period_ms)),
    );
    let mig_devices: Vec<Value> = d
        .mig_devices
        .iter()
        .map(|m| {
            let mut t = Table::new();
            int(&mut t, "gpu_instance", Some(u64::from(m.gpu_instance_id)));
            int(&mut t, "compute_instance", Some(u64::from(m.compute_instance_id)));
            t.insert(
                "profile".into(),
                Value::String(m.profile.value().cloned().unwrap_or_default()),
            );
            int(&mut t, "memory", m.memory_total_bytes.get());
            if let Some(uuid) = m.uuid.value() {
                t.insert("uuid".into(), Value::String(uuid.clone()));
            }
            Value::Table(t)
        })
        .collect();
    if !mig_devices.is_empty() {
        g.insert("mig_device".into(), Value::Array(mig_devices));
    }
    g.insert("process".into(), Value::Array(processes(d, capture)));
    g.insert("fault".into(), Value::Array(faults(d)));
    g
}

/// `00000000:07:00.0` as `{ domain, bus, device }`.
fn pci_table(bus_id: &str) -> Option<Table> {
    let mut parts = bus_id.split([':', '.']);
    let hex = |p: Option<&str>| p.and_then(|p| u32::from_str_radix(p, 16).ok());
    let (domain, bus, device) = (hex(parts.next())?, hex(parts.next())?, hex(parts.next())?);
    let mut t = Table::new();
    for (key, v) in [("domain", domain), ("bus", bus), ("device", device)] {
        t.insert(key.into(), Value::Integer(i64::from(v)));
    }
    Some(t)
}

fn dynamic(index: u32, capture: &Captured, period_ms: u64) -> Table {
    let mut t = Table::new();
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(v) = value {
            t.insert(key.into(), v);
        }
    };
    let sampled_or_read = |metric, read: DeviceValue| {
        sampled(capture, index, metric, period_ms).or_else(|| per_read(capture, index, read))
    };
    put(
        "utilization_gpu",
        sampled_or_read(SampledMetric::GpuUtilization, |d| {
            value_of(&d.utilization_gpu_percent)
        }),
    );
    put(
        "utilization_memory",
        sampled_or_read(SampledMetric::MemoryUtilization, |d| {
            value_of(&d.utilization_memory_percent)
        }),
    );
    put(
        "power_mw",
        sampled_or_read(SampledMetric::PowerMilliwatts, |d| {
            d.power_usage_watts.get().map(|watts| watts * 1000.0)
        }),
    );
    put(
        "temperature",
        per_read(capture, index, |d| value_of(&d.temperature_celsius)),
    );
    // None where the board does not report it: the simulator's field is then not
    // supported, as the driver said.
    put(
        "memory_temperature",
        per_read(capture, index, |d| value_of(&d.memory_temperature_celsius)),
    );
    put(
        "fan_speed",
        per_read(capture, index, |d| value_of(&d.fan_speed_percent)),
    );
    put(
        "pstate",
        per_read(capture, index, |d| value_of(&d.performance_state)),
    );
    put(
        "encoder",
        per_read(capture, index, |d| value_of(&d.encoder_utilization_percent)),
    );
    put(
        "decoder",
        per_read(capture, index, |d| value_of(&d.decoder_utilization_percent)),
    );
    put(
        "memory_used",
        per_read(capture, index, |d| {
            d.memory_used_bytes.get().map(|used| used as f64)
        }),
    );
    let mut clocks = Table::new();
    let reads: [(&str, DeviceValue); 4] = [
        ("graphics", |d| value_of(&d.clock_graphics_mhz)),
        ("sm", |d| value_of(&d.clock_sm_mhz)),
        ("mem", |d| value_of(&d.clock_memory_mhz)),
        ("video", |d| value_of(&d.clock_video_mhz)),
    ];
    for (key, read) in reads {
        if let Some(v) = per_read(capture, index, read) {
            clocks.insert(key.into(), v);
        }
    }
    if !clocks.is_empty() {
        t.insert("clocks_mhz".into(), Value::Table(clocks));
    }
    t
}

/// The processes of GPU `d`: each PID from its first refresh to the refresh it was gone,
/// with its memory and per-process utilization at each refresh.
fn processes(d: &Device, capture: &Captured) -> Vec<Value> {
    let mut pids: Vec<u32> = Vec::new();
    for read in &capture.reads {
        for p in read.readout.processes.iter().filter(|p| p.gpu_index == d.index) {
            if !pids.contains(&p.pid) {
                pids.push(p.pid);
            }
        }
    }
    pids.into_iter()
        .map(|pid| {
            let seen: Vec<(f64, &gputop_core::model::GpuProcess)> = capture
                .reads
                .iter()
                .filter_map(|r| {
                    let p = r
                        .readout
                        .processes
                        .iter()
                        .find(|p| p.pid == pid && p.gpu_index == d.index)?;
                    Some((r.at, p))
                })
                .collect();
            let mut t = Table::new();
            int(&mut t, "pid", Some(u64::from(pid)));
            t.insert("type".into(), Value::String(seen[0].1.kind.label().into()));
            let memory: Vec<(f64, f64)> = seen
                .iter()
                .filter_map(|(at, p)| Some((*at, p.gpu_memory_bytes.get()? as f64)))
                .collect();
            match keyframes(memory) {
                Some(keys) => t.insert("used_memory".into(), keys),
                None => t.insert("used_memory".into(), Value::String("unavailable".into())),
            };
            let percent = |f: fn(&gputop_core::model::GpuProcess) -> &Reading<u32>| {
                keyframes(
                    seen.iter()
                        .filter_map(|(at, p)| Some((*at, f64::from(f(p).get()?)))),
                )
            };
            for (key, f) in [
                (
                    "sm",
                    (|p| &p.sm_percent) as fn(&gputop_core::model::GpuProcess) -> &Reading<u32>,
                ),
                ("mem", |p| &p.memory_bandwidth_percent),
                ("enc", |p| &p.encoder_percent),
                ("dec", |p| &p.decoder_percent),
            ] {
                if let Some(keys) = percent(f) {
                    t.insert(key.into(), keys);
                }
            }
            if let Some(mig) = seen[0].1.mig() {
                let slot = d.mig_devices.iter().position(|m| m.id() == mig);
                int(&mut t, "mig_device", slot.map(|s| s as u64));
            }
            // Seen at the first refresh: it ran before the capture began.
            let first = seen[0].0;
            let start = if first == capture.reads[0].at {
                -3600.0
            } else {
                first
            };
            t.insert("start".into(), Value::Float(start));
            let last = seen[seen.len() - 1].0;
            if let Some(gone) = capture.reads.iter().map(|r| r.at).find(|at| *at > last) {
                t.insert("end".into(), Value::Float(gone));
            }
            Value::Table(t)
        })
        .collect()
}

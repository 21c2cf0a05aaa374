//! `gputop validate`: gputop's own NVML readings beside `nvidia-smi`'s, read at aligned
//! times, metric by metric, with the difference, a verdict against the tolerance and, for a
//! systematic difference, its likely cause.
//!
//! Running `nvidia-smi` is the only I/O here besides the NVML reads; parsing its CSV and
//! comparing are pure functions.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use gputop_core::model::{Device, ProcessType};
use gputop_core::source::Readout;

const MIB: f64 = 1024.0 * 1024.0;

/// The `nvidia-smi --query-gpu` fields validate reads.
pub const SMI_GPU_FIELDS: &[&str] = &[
    "index",
    "uuid",
    "utilization.gpu",
    "utilization.memory",
    "memory.total",
    "memory.used",
    "temperature.gpu",
    "temperature.memory",
    "power.draw",
    "power.limit",
    "pstate",
    "fan.speed",
    "clocks.gr",
    "clocks.sm",
    "clocks.mem",
];

/// How two readings of one metric are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Percentages: the tolerance is in percentage points.
    Points,
    /// Quantities: the tolerance is a percentage of nvidia-smi's value.
    Relative,
    /// States: equal or not.
    Exact,
}

/// One compared metric: its nvidia-smi field, its unit, and gputop's reading of it.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    pub field: &'static str,
    pub unit: &'static str,
    pub scale: Scale,
    pub gputop: fn(&Device) -> Option<f64>,
}

/// The metrics, in report order.
pub const METRICS: &[Metric] = &[
    Metric {
        field: "utilization.gpu",
        unit: "%",
        scale: Scale::Points,
        gputop: |d| d.utilization_gpu_percent.get().map(f64::from),
    },
    Metric {
        field: "utilization.memory",
        unit: "%",
        scale: Scale::Points,
        gputop: |d| d.utilization_memory_percent.get().map(f64::from),
    },
    Metric {
        field: "memory.used",
        unit: "MiB",
        scale: Scale::Relative,
        gputop: |d| d.memory_used_bytes.get().map(|used| (used as f64 / MIB).floor()),
    },
    Metric {
        field: "memory.total",
        unit: "MiB",
        scale: Scale::Relative,
        gputop: |d| {
            d.memory_total_bytes
                .get()
                .map(|total| (total as f64 / MIB).floor())
        },
    },
    Metric {
        field: "temperature.gpu",
        unit: "C",
        scale: Scale::Relative,
        gputop: |d| d.temperature_celsius.get().map(f64::from),
    },
    Metric {
        field: "temperature.memory",
        unit: "C",
        scale: Scale::Relative,
        gputop: |d| d.memory_temperature_celsius.get().map(f64::from),
    },
    Metric {
        field: "power.draw",
        unit: "W",
        scale: Scale::Relative,
        gputop: |d| d.power_usage_watts.get(),
    },
    Metric {
        field: "power.limit",
        unit: "W",
        scale: Scale::Relative,
        gputop: |d| d.power_limit_watts.get(),
    },
    Metric {
        field: "pstate",
        unit: "",
        scale: Scale::Exact,
        gputop: |d| d.performance_state.get().map(f64::from),
    },
    Metric {
        field: "fan.speed",
        unit: "%",
        scale: Scale::Points,
        gputop: |d| d.fan_speed_percent.get().map(f64::from),
    },
    Metric {
        field: "clocks.gr",
        unit: "MHz",
        scale: Scale::Relative,
        gputop: |d| d.clock_graphics_mhz.get().map(f64::from),
    },
    Metric {
        field: "clocks.sm",
        unit: "MHz",
        scale: Scale::Relative,
        gputop: |d| d.clock_sm_mhz.get().map(f64::from),
    },
    Metric {
        field: "clocks.mem",
        unit: "MHz",
        scale: Scale::Relative,
        gputop: |d| d.clock_memory_mhz.get().map(f64::from),
    },
];

/// One GPU line of `nvidia-smi --query-gpu`.
#[derive(Debug, Clone, PartialEq)]
pub struct SmiGpu {
    pub uuid: String,
    /// Field name to value; `None` for `[N/A]`, `[Not Supported]` and the like.
    pub values: HashMap<String, Option<f64>>,
}

/// One line of `nvidia-smi --query-compute-apps`.
#[derive(Debug, Clone, PartialEq)]
pub struct SmiApp {
    pub gpu_uuid: String,
    pub pid: u32,
    pub used_mib: Option<f64>,
}

/// A number as nvidia-smi prints it (`95`, `312.00`, `P2`); `None` for bracketed notes.
fn smi_number(text: &str) -> Option<f64> {
    let text = text.trim();
    if text.starts_with('[') || text.eq_ignore_ascii_case("N/A") {
        return None;
    }
    text.strip_prefix('P').unwrap_or(text).parse().ok()
}

/// Parses `--query-gpu=<SMI_GPU_FIELDS> --format=csv,noheader,nounits`.
pub fn parse_smi_gpus(csv: &str) -> Result<Vec<SmiGpu>, String> {
    csv.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let cells: Vec<&str> = line.split(", ").collect();
            if cells.len() != SMI_GPU_FIELDS.len() {
                return Err(format!(
                    "nvidia-smi printed {} fields where {} were asked: {line:?}",
                    cells.len(),
                    SMI_GPU_FIELDS.len()
                ));
            }
            let values = SMI_GPU_FIELDS
                .iter()
                .zip(&cells)
                .skip(2)
                .map(|(field, cell)| ((*field).to_string(), smi_number(cell)))
                .collect();
            Ok(SmiGpu {
                uuid: cells[1].trim().to_string(),
                values,
            })
        })
        .collect()
}

/// Parses `--query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits`.
pub fn parse_smi_apps(csv: &str) -> Result<Vec<SmiApp>, String> {
    csv.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let cells: Vec<&str> = line.split(", ").collect();
            let [uuid, pid, used] = cells[..] else {
                return Err(format!("nvidia-smi printed an unexpected process line: {line:?}"));
            };
            Ok(SmiApp {
                gpu_uuid: uuid.trim().to_string(),
                pid: pid.trim().parse().map_err(|_| format!("not a PID in {line:?}"))?,
                used_mib: smi_number(used),
            })
        })
        .collect()
}

/// Why nvidia-smi could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmiFailure(pub String);

fn run_smi(program: &Path, args: &[String]) -> Result<String, SmiFailure> {
    let output = Command::new(program).args(args).output().map_err(|e| {
        SmiFailure(if e.kind() == std::io::ErrorKind::NotFound {
            format!(
                "nvidia-smi not found ({}); install the NVIDIA driver utilities or give --nvidia-smi PATH",
                program.display()
            )
        } else {
            format!("cannot run {}: {e}", program.display())
        })
    })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let reason = stderr
            .lines()
            .chain(stdout.lines())
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        let code = output
            .status
            .code()
            .map_or_else(|| "a signal".to_string(), |c| format!("status {c}"));
        return Err(SmiFailure(format!(
            "{} failed with {code}: {}",
            program.display(),
            reason.trim()
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Both tools' readings in one round.
#[derive(Debug, Clone)]
pub struct Round {
    pub gputop: Readout,
    pub smi_gpus: Vec<SmiGpu>,
    pub smi_apps: Vec<SmiApp>,
    /// Time between gputop's read and nvidia-smi's answer.
    pub skew: Duration,
}

/// Reads both tools once: gputop first, nvidia-smi right after.
pub fn read_round(read_gputop: &mut dyn FnMut() -> Readout, smi: &Path) -> Result<Round, SmiFailure> {
    let started = Instant::now();
    let gputop = read_gputop();
    let format = "--format=csv,noheader,nounits".to_string();
    let gpus = run_smi(
        smi,
        &[
            format!("--query-gpu={}", SMI_GPU_FIELDS.join(",")),
            format.clone(),
        ],
    )?;
    let apps = run_smi(
        smi,
        &["--query-compute-apps=gpu_uuid,pid,used_memory".into(), format],
    )?;
    let skew = started.elapsed();
    Ok(Round {
        gputop,
        smi_gpus: parse_smi_gpus(&gpus).map_err(SmiFailure)?,
        smi_apps: parse_smi_apps(&apps).map_err(SmiFailure)?,
        skew,
    })
}

/// One metric of one GPU, compared over all rounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub metric: &'static str,
    pub unit: &'static str,
    pub gputop: Option<f64>,
    pub nvidia_smi: Option<f64>,
    pub difference: Option<f64>,
    pub within_tolerance: bool,
    pub likely_cause: Option<String>,
}

/// One GPU's comparisons.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuReport {
    pub index: u32,
    pub uuid: String,
    pub name: Option<String>,
    pub metrics: Vec<Comparison>,
}

/// Per-process GPU memory, compared.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessComparison {
    pub gpu_uuid: String,
    pub pid: u32,
    pub gputop_mib: Option<f64>,
    pub nvidia_smi_mib: Option<f64>,
    pub within_tolerance: bool,
    pub likely_cause: Option<String>,
}

/// The whole validation.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub tolerance_percent: f64,
    pub rounds: usize,
    pub max_skew: Duration,
    pub gpus: Vec<GpuReport>,
    pub processes: Vec<ProcessComparison>,
}

impl Report {
    pub fn disagreements(&self) -> usize {
        let gpus = self
            .gpus
            .iter()
            .flat_map(|g| &g.metrics)
            .filter(|m| !m.within_tolerance)
            .count();
        gpus + self.processes.iter().filter(|p| !p.within_tolerance).count()
    }

    pub fn readings(&self) -> usize {
        self.gpus.iter().map(|g| g.metrics.len()).sum::<usize>() + self.processes.len()
    }
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

fn within(scale: Scale, tolerance: f64, gputop: f64, smi: f64) -> bool {
    let difference = (gputop - smi).abs();
    match scale {
        Scale::Points => difference <= tolerance + 1e-9,
        Scale::Relative => difference <= tolerance / 100.0 * smi.abs().max(1.0) + 1e-9,
        Scale::Exact => difference < 1e-9,
    }
}

/// The likely cause of a difference in `metric`, from what both tools reported.
fn likely_cause(metric: &Metric, rounds: &[(f64, f64)], reserved_mib: Option<f64>, tolerance: f64) -> String {
    let (g, s) = (
        mean(&rounds.iter().map(|r| r.0).collect::<Vec<_>>()).unwrap_or(0.0),
        mean(&rounds.iter().map(|r| r.1).collect::<Vec<_>>()).unwrap_or(0.0),
    );
    let signs_differ = rounds.iter().any(|(a, b)| a > b) && rounds.iter().any(|(a, b)| a < b);
    match (metric.field, reserved_mib) {
        ("memory.used", Some(reserved)) if within(Scale::Relative, tolerance, g + reserved, s) => format!(
            "nvidia-smi counts the {reserved:.0} MiB the driver reserves as used; gputop reports that \
             memory apart (memory_reserved_bytes), as NVML's memory v2 call does"
        ),
        ("memory.total", Some(reserved)) if within(Scale::Relative, tolerance, g - reserved, s) => {
            format!("nvidia-smi's total leaves out the {reserved:.0} MiB the driver reserves")
        }
        _ if signs_differ => "the value changed between the two reads (sampling); compare under a steady \
                              load, or over a longer --duration"
            .into(),
        ("utilization.gpu" | "utilization.memory", _) => "sampling window: the two tools read the driver's \
             utilization over different periods"
            .into(),
        ("power.draw", _) => "averaging window: this nvidia-smi may report an averaged power draw where \
                              NVML's power usage is instantaneous"
            .into(),
        ("clocks.gr" | "clocks.sm" | "clocks.mem" | "pstate", _) => {
            "clocks and performance state follow the load from moment to moment".into()
        }
        _ => "a systematic difference: the NVML library gputop loaded may not match the driver \
              nvidia-smi uses (check --nvml-lib and `nvidia-smi --version`)"
            .into(),
    }
}

/// Compares all rounds. `tolerance` is in percent (percentage points for % metrics).
pub fn compare(rounds: &[Round], tolerance: f64) -> Report {
    let last = rounds.last();
    let devices: Vec<&Device> = last
        .map(|r| r.gputop.devices.iter().collect())
        .unwrap_or_default();
    let gpus = devices
        .iter()
        .map(|device| {
            let uuid = device.uuid.value().cloned().unwrap_or_default();
            let reserved_mib = device
                .memory_reserved_bytes
                .get()
                .map(|reserved| (reserved as f64 / MIB).floor());
            let metrics = METRICS
                .iter()
                .map(|metric| compare_metric(metric, rounds, device.index, &uuid, reserved_mib, tolerance))
                .collect();
            GpuReport {
                index: device.index,
                uuid,
                name: device.name.value().cloned(),
                metrics,
            }
        })
        .collect();
    Report {
        tolerance_percent: tolerance,
        rounds: rounds.len(),
        max_skew: rounds.iter().map(|r| r.skew).max().unwrap_or_default(),
        gpus,
        processes: last.map(|r| compare_processes(r, tolerance)).unwrap_or_default(),
    }
}

fn compare_metric(
    metric: &Metric,
    rounds: &[Round],
    index: u32,
    uuid: &str,
    reserved_mib: Option<f64>,
    tolerance: f64,
) -> Comparison {
    let mut gputop_values = Vec::new();
    let mut smi_values = Vec::new();
    let mut pairs = Vec::new();
    for round in rounds {
        let ours = round
            .gputop
            .devices
            .iter()
            .find(|d| d.index == index)
            .and_then(metric.gputop);
        let theirs = round
            .smi_gpus
            .iter()
            .find(|g| g.uuid == uuid)
            .and_then(|g| g.values.get(metric.field).copied().flatten());
        gputop_values.extend(ours);
        smi_values.extend(theirs);
        if let (Some(a), Some(b)) = (ours, theirs) {
            pairs.push((a, b));
        }
    }
    let (gputop, nvidia_smi) = (mean(&gputop_values), mean(&smi_values));
    let (within_tolerance, likely_cause) = match (gputop, nvidia_smi) {
        (None, None) => (true, None),
        (Some(_), None) => (
            false,
            Some("nvidia-smi reports no value (not supported, or the GPU is lost)".into()),
        ),
        (None, Some(_)) => (false, Some("gputop reads no value where nvidia-smi does".into())),
        (Some(g), Some(s)) if within(metric.scale, tolerance, g, s) => (true, None),
        (Some(_), Some(_)) => (false, Some(likely_cause(metric, &pairs, reserved_mib, tolerance))),
    };
    Comparison {
        metric: metric.field,
        unit: metric.unit,
        gputop,
        nvidia_smi,
        difference: gputop.zip(nvidia_smi).map(|(g, s)| g - s),
        within_tolerance,
        likely_cause,
    }
}

/// Per-process GPU memory in the last round. nvidia-smi lists compute processes only.
fn compare_processes(round: &Round, tolerance: f64) -> Vec<ProcessComparison> {
    let uuid_of = |index: u32| {
        round
            .gputop
            .devices
            .iter()
            .find(|d| d.index == index)
            .and_then(|d| d.uuid.value().cloned())
            .unwrap_or_default()
    };
    let mut out: Vec<ProcessComparison> = round
        .gputop
        .processes
        .iter()
        .filter(|p| p.kind != ProcessType::Graphics)
        .map(|p| {
            let gpu_uuid = uuid_of(p.gpu_index);
            let ours = p.gpu_memory_bytes.get().map(|b| (b as f64 / MIB).floor());
            let theirs = round
                .smi_apps
                .iter()
                .find(|a| a.pid == p.pid && a.gpu_uuid == gpu_uuid);
            let (within_tolerance, likely_cause) = match (ours, theirs.map(|a| a.used_mib)) {
                (_, None) => (
                    false,
                    Some("nvidia-smi does not list it: it started or exited between the reads".into()),
                ),
                (None, Some(None)) => (true, None),
                (Some(g), Some(Some(s))) if within(Scale::Relative, tolerance, g, s) => (true, None),
                _ => (
                    false,
                    Some("the two tools read different per-process memory".into()),
                ),
            };
            ProcessComparison {
                gpu_uuid,
                pid: p.pid,
                gputop_mib: ours,
                nvidia_smi_mib: theirs.and_then(|a| a.used_mib),
                within_tolerance,
                likely_cause,
            }
        })
        .collect();
    for app in &round.smi_apps {
        if !out.iter().any(|p| p.pid == app.pid && p.gpu_uuid == app.gpu_uuid) {
            out.push(ProcessComparison {
                gpu_uuid: app.gpu_uuid.clone(),
                pid: app.pid,
                gputop_mib: None,
                nvidia_smi_mib: app.used_mib,
                within_tolerance: false,
                likely_cause: Some(
                    "gputop does not list it: it started or exited between the reads, or NVML's \
                     process list differs from the one nvidia-smi sees"
                        .into(),
                ),
            });
        }
    }
    out
}

fn number(value: Option<f64>, unit: &str) -> String {
    match value {
        None => "N/A".into(),
        Some(v) if unit.is_empty() => format!("P{v:.0}"),
        Some(v) if v.fract().abs() < 1e-9 => format!("{v:.0} {unit}"),
        Some(v) => format!("{v:.2} {unit}"),
    }
}

/// The readable report.
pub fn text(report: &Report) -> String {
    let mut out = format!(
        "gputop validate: {} round(s), nvidia-smi read within {} ms of gputop; tolerance {}% \
         (percentage points for % metrics)\n",
        report.rounds,
        report.max_skew.as_millis(),
        report.tolerance_percent
    );
    for gpu in &report.gpus {
        out.push_str(&format!(
            "\nGPU {}  {}  {}\n",
            gpu.index,
            gputop_core::format::sanitize(gpu.name.as_deref().unwrap_or("N/A")),
            gputop_core::format::sanitize(&gpu.uuid)
        ));
        let mut rows = vec![
            ["METRIC", "GPUTOP", "NVIDIA-SMI", "DIFF", "AGREE", "LIKELY CAUSE"]
                .map(String::from)
                .to_vec(),
        ];
        for m in &gpu.metrics {
            rows.push(vec![
                m.metric.to_string(),
                number(m.gputop, m.unit),
                number(m.nvidia_smi, m.unit),
                m.difference.map_or_else(|| "-".into(), |d| format!("{d:+.2}")),
                if m.within_tolerance { "yes" } else { "NO" }.into(),
                m.likely_cause.clone().unwrap_or_default(),
            ]);
        }
        out.push_str(&gputop_core::format::table(&rows, &[]));
    }
    if !report.processes.is_empty() {
        out.push_str("\nProcesses (GPU memory)\n");
        let mut rows = vec![
            ["GPU UUID", "PID", "GPUTOP", "NVIDIA-SMI", "AGREE", "LIKELY CAUSE"]
                .map(String::from)
                .to_vec(),
        ];
        for p in &report.processes {
            rows.push(vec![
                gputop_core::format::sanitize(&p.gpu_uuid),
                p.pid.to_string(),
                number(p.gputop_mib, "MiB"),
                number(p.nvidia_smi_mib, "MiB"),
                if p.within_tolerance { "yes" } else { "NO" }.into(),
                p.likely_cause.clone().unwrap_or_default(),
            ]);
        }
        out.push_str(&gputop_core::format::table(&rows, &[]));
    }
    let differ = report.disagreements();
    out.push_str(&format!(
        "\n{} of {} readings agree{}\n",
        report.readings() - differ,
        report.readings(),
        if differ == 0 {
            ".".to_string()
        } else {
            format!("; {differ} differ beyond the tolerance.")
        }
    ));
    out
}

/// The `--json` document.
pub fn json_report(report: &Report) -> Value {
    json!({
        "agree": report.disagreements() == 0,
        "tolerance_percent": report.tolerance_percent,
        "rounds": report.rounds,
        "max_skew_ms": report.max_skew.as_millis() as u64,
        "gpus": report.gpus.iter().map(|g| json!({
            "index": g.index,
            "uuid": g.uuid,
            "name": g.name,
            "metrics": g.metrics.iter().map(|m| json!({
                "metric": m.metric,
                "unit": m.unit,
                "gputop": m.gputop,
                "nvidia_smi": m.nvidia_smi,
                "difference": m.difference,
                "within_tolerance": m.within_tolerance,
                "likely_cause": m.likely_cause,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "processes": report.processes.iter().map(|p| json!({
            "gpu_uuid": p.gpu_uuid,
            "pid": p.pid,
            "gputop_mib": p.gputop_mib,
            "nvidia_smi_mib": p.nvidia_smi_mib,
            "within_tolerance": p.within_tolerance,
            "likely_cause": p.likely_cause,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nvidia_smi_csv_with_notes_and_pstates() {
        let csv = "0, GPU-a, 95, 40, 40960, 24876, 76, [N/A], 312.00, 400.00, P2, [N/A], 1410, 1395, 1215\n";
        let gpus = parse_smi_gpus(csv).unwrap();
        assert_eq!(gpus[0].uuid, "GPU-a");
        assert_eq!(gpus[0].values["temperature.memory"], None, "a GDDR board's");
        assert_eq!(gpus[0].values["power.draw"], Some(312.0));
        assert_eq!(gpus[0].values["pstate"], Some(2.0));
        assert_eq!(gpus[0].values["fan.speed"], None);
        assert!(
            parse_smi_gpus("0, GPU-a, 95\n")
                .unwrap_err()
                .contains("3 fields where 15")
        );
        let apps = parse_smi_apps("GPU-a, 4242, 18432\nGPU-b, 7, [N/A]\n").unwrap();
        assert_eq!(
            apps[1],
            SmiApp {
                gpu_uuid: "GPU-b".into(),
                pid: 7,
                used_mib: None
            }
        );
        assert!(parse_smi_apps("GPU-a, x, 1\n").is_err());
    }

    #[test]
    fn tolerance_scales() {
        assert!(within(Scale::Points, 5.0, 95.0, 90.0));
        assert!(!within(Scale::Points, 5.0, 95.0, 89.0));
        assert!(within(Scale::Relative, 5.0, 105.0, 100.0));
        assert!(!within(Scale::Relative, 5.0, 106.0, 100.0));
        assert!(!within(Scale::Exact, 50.0, 2.0, 0.0));
    }

    #[test]
    fn causes_are_named_from_the_evidence() {
        let used = &METRICS[2];
        assert!(likely_cause(used, &[(1000.0, 1512.0)], Some(512.0), 1.0).contains("reserves as used"));
        let util = &METRICS[0];
        assert!(likely_cause(util, &[(90.0, 50.0), (20.0, 60.0)], None, 1.0).contains("changed between"));
        assert!(likely_cause(util, &[(90.0, 50.0), (80.0, 60.0)], None, 1.0).contains("sampling window"));
        let temp = &METRICS[4];
        assert!(likely_cause(temp, &[(80.0, 60.0)], None, 1.0).contains("--nvml-lib"));
    }
}

//! `--once` output: the readable report, the JSON document and the `--list` lines.
//!
//! Pure functions from a snapshot to text. Unknown values print as `N/A` (text) or `null`
//! (JSON); text from processes is escaped so it can never drive the terminal.

use std::time::SystemTime;

use crate::format::{human_bytes, human_duration, rfc3339, sanitize, table};

use serde_json::{Value, json};

use crate::model::{
    Device, DeviceStatus, DriverInfo, GpuProcess, HostFacts, HostStats, Memory, MigDevice, MigId, PidMapping,
    ProcessType, Reading, Snapshot, Window,
};
use crate::monitor::alerts::Active;

/// Version of the JSON document's schema; bumped on incompatible changes.
pub const JSON_SCHEMA_VERSION: u32 = 1;

const NA: &str = "N/A";

/// The GPUs whose processes could not be listed, and why.
pub fn unlisted(snapshot: &Snapshot) -> impl Iterator<Item = (u32, &str)> {
    snapshot
        .devices
        .iter()
        .filter_map(|d| Some((d.index, d.processes_unlisted.as_deref()?)))
}

fn text<T>(reading: &Reading<T>, show: impl FnOnce(&T) -> String) -> String {
    reading.value().map_or_else(|| NA.to_string(), show)
}

fn pair(a: &Reading<u32>, b: &Reading<u32>, show: impl Fn(u32) -> String) -> String {
    format!("{}/{}", text(a, |v| show(*v)), text(b, |v| show(*v)))
}

/// The header and cell of one device metric (`display.default_metrics`).
fn metric_cells(metric: &str, device: &Device) -> Vec<(&'static str, String)> {
    let percent = |r: &Reading<u32>| text(r, |v| format!("{v}%"));
    let window = |r: &Reading<Window>| r.value().map(|w| (w.mean, w.peak));
    match metric {
        "utilization" => vec![
            ("UTIL", percent(&device.utilization_gpu)),
            (
                "MEAN/PEAK",
                window(&device.utilization_gpu_window)
                    .map_or_else(|| NA.into(), |(mean, peak)| format!("{mean:.0}%/{peak:.0}%")),
            ),
        ],
        "memory" => vec![(
            "MEMORY",
            text(&device.memory, |m| {
                let pct = device.memory_percent().unwrap_or(0.0);
                format!("{} / {} ({pct:.0}%)", human_bytes(m.used), human_bytes(m.total))
            }),
        )],
        "temperature" => vec![("TEMP", text(&device.temperature, |t| format!("{t}C")))],
        "power" => vec![(
            "POWER",
            pair(&device.power_usage_mw, &device.power_limit_mw, |mw| {
                format!("{:.0}W", (f64::from(mw) / 1000.0).round())
            }),
        )],
        "fan" => vec![("FAN", percent(&device.fan_speed()))],
        "clocks" => vec![(
            "SM/MEM CLOCK",
            pair(&device.clocks.sm, &device.clocks.memory, |mhz| {
                format!("{mhz}MHz")
            }),
        )],
        "pcie" => vec![(
            "PCIE RX/TX",
            pair(&device.pcie_rx_kbps, &device.pcie_tx_kbps, |kb| {
                format!("{}/s", human_bytes(u64::from(kb) * 1024))
            }),
        )],
        "encoder" => vec![("ENC", percent(&device.encoder))],
        "decoder" => vec![("DEC", percent(&device.decoder))],
        _ => Vec::new(),
    }
}

/// The readable `--once` report: a header, the devices, then the processes.
pub fn text_report(snapshot: &Snapshot, metrics: &[String], alerts: &[Active]) -> String {
    let driver = &snapshot.driver;
    let mut out = format!(
        "{}  {}  driver {}  CUDA {}\n\n",
        sanitize(&snapshot.hostname),
        rfc3339(snapshot.taken_at).replace('T', " ").replace('Z', " UTC"),
        text(&driver.driver_version, |v| sanitize(v)),
        text(&driver.cuda_driver_version, |v| sanitize(v)),
    );
    let mut header = vec!["GPU".to_string(), "NAME".to_string()];
    if let Some(device) = snapshot.devices.first() {
        for metric in metrics {
            header.extend(
                metric_cells(metric, device)
                    .into_iter()
                    .map(|(h, _)| h.to_string()),
            );
        }
    }
    let mut rows = vec![header];
    for device in &snapshot.devices {
        let mut row = vec![device.index.to_string(), text(&device.name, |n| sanitize(n))];
        match &device.status {
            DeviceStatus::Ok => {
                for metric in metrics {
                    row.extend(metric_cells(metric, device).into_iter().map(|(_, cell)| cell));
                }
            }
            DeviceStatus::Lost(reason) => row.push(format!("LOST: {}", sanitize(reason))),
            DeviceStatus::Failed(reason) => row.push(format!("ERROR: {}", sanitize(reason))),
        }
        rows.push(row);
    }
    let right: Vec<bool> = rows[0].iter().enumerate().map(|(i, _)| i == 0).collect();
    out.push_str(&table(&rows, &right));
    out.push_str(&mig_table(snapshot));

    out.push('\n');
    for (index, reason) in unlisted(snapshot) {
        out.push_str(&format!("GPU {index}: {}\n", sanitize(reason)));
    }
    if snapshot.processes.is_empty() {
        out.push_str("No GPU processes.\n");
        out.push_str(&alert_lines(alerts));
        return out;
    }
    let containers = snapshot.processes.iter().any(|p| p.host.container.is_some());
    let mut header = [
        "GPU", "PID", "TYPE", "USER", "GPU-MEM", "%SM", "%CPU", "HOST-MEM", "TIME", "COMMAND",
    ]
    .map(String::from)
    .to_vec();
    let mut right = vec![true, true, false, false, true, true, true, true, true, false];
    if containers {
        header.insert(header.len() - 1, "CONTAINER".into());
        right.insert(right.len() - 1, false);
    }
    let mut rows = vec![header];
    rows.extend(snapshot.processes.iter().map(|p| {
        let mut row = process_row(p);
        if containers {
            row.insert(row.len() - 1, sanitize(&p.container_label()));
        }
        row
    }));
    out.push_str(&table(&rows, &right));
    out.push_str(&alert_lines(alerts));
    out
}

/// The MIG devices, one row each as GPU/GPU instance/compute instance; nothing without MIG.
fn mig_table(snapshot: &Snapshot) -> String {
    let mut rows = vec![
        ["MIG", "PROFILE", "MEMORY", "PROCS", "UUID"]
            .map(String::from)
            .to_vec(),
    ];
    for d in &snapshot.devices {
        for m in &d.mig_devices {
            let processes = snapshot
                .processes
                .iter()
                .filter(|p| p.gpu_index == d.index && p.mig == Some(m.id))
                .count();
            rows.push(vec![
                format!("{}/{}/{}", d.index, m.id.gpu_instance, m.id.compute_instance),
                text(&m.profile, |p| sanitize(p)),
                text(&m.memory, |mem| {
                    format!(
                        "{} / {} ({:.0}%)",
                        human_bytes(mem.used),
                        human_bytes(mem.total),
                        mem.used as f64 * 100.0 / mem.total.max(1) as f64
                    )
                }),
                processes.to_string(),
                text(&m.uuid, |u| sanitize(u)),
            ]);
        }
    }
    if rows.len() == 1 {
        return String::new();
    }
    format!("\n{}", table(&rows, &[true, false, false, true, false]))
}

/// "Alerts:" and one line per alert, or nothing.
fn alert_lines(alerts: &[Active]) -> String {
    if alerts.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nAlerts:\n");
    for alert in alerts {
        out.push_str(&format!(
            "  {:<8} {}\n",
            alert.severity.label().to_uppercase(),
            sanitize(&alert.summary)
        ));
    }
    out
}

fn process_row(p: &GpuProcess) -> Vec<String> {
    let host = &p.host;
    let command = match &host.command {
        Reading::Value(command) => sanitize(command),
        Reading::NotSupported => NA.to_string(),
        Reading::Failed(reason) => format!("({})", sanitize(reason)),
    };
    vec![
        match p.mig {
            Some(id) => format!("{}/{}/{}", p.gpu_index, id.gpu_instance, id.compute_instance),
            None => p.gpu_index.to_string(),
        },
        p.local_pid().unwrap_or(p.pid).to_string(),
        p.kind.label().to_string(),
        text(&host.user, |u| sanitize(u)),
        text(&p.gpu_memory_bytes, |b| human_bytes(*b)),
        text(&p.sm_percent, u32::to_string),
        text(&host.cpu_percent, |c| format!("{c:.1}")),
        text(&host.memory_bytes, |b| human_bytes(*b)),
        text(&host.running_seconds, |s| human_duration(*s)),
        command,
    ]
}

/// `--list`: one line per GPU, like `nvidia-smi -L`.
pub fn list(snapshot: &Snapshot) -> String {
    snapshot
        .devices
        .iter()
        .map(|d| {
            let status = match &d.status {
                DeviceStatus::Ok => String::new(),
                DeviceStatus::Lost(reason) => format!(" [LOST: {}]", sanitize(reason)),
                DeviceStatus::Failed(reason) => format!(" [ERROR: {}]", sanitize(reason)),
            };
            format!(
                "GPU {}: {} (UUID: {}, PCI: {}){status}\n",
                d.index,
                text(&d.name, |n| sanitize(n)),
                text(&d.uuid, |u| sanitize(u)),
                text(&d.pci_bus_id, |b| sanitize(b)),
            )
        })
        .collect()
}

fn j<T: Clone + Into<Value>>(reading: &Reading<T>) -> Value {
    reading.value().map_or(Value::Null, |v| v.clone().into())
}

fn j_map<T>(reading: &Reading<T>, f: impl FnOnce(&T) -> Value) -> Value {
    reading.value().map_or(Value::Null, f)
}

fn device_json(d: &Device) -> Value {
    let (status, reason) = match &d.status {
        DeviceStatus::Ok => ("ok", Value::Null),
        DeviceStatus::Lost(r) => ("lost", Value::String(r.clone())),
        DeviceStatus::Failed(r) => ("error", Value::String(r.clone())),
    };
    let mean = |w: &Reading<Window>| j_map(w, |w| json!(round2(w.mean)));
    let peak = |w: &Reading<Window>| j_map(w, |w| json!(round2(w.peak)));
    let watts = |r: &Reading<u32>| j_map(r, |mw| json!(f64::from(*mw) / 1000.0));
    let bytes_per_second = |r: &Reading<u32>| j_map(r, |kb| json!(u64::from(*kb) * 1024));
    json!({
        "index": d.index,
        "name": j(&d.name),
        "uuid": j(&d.uuid),
        "pci_bus_id": j(&d.pci_bus_id),
        "status": status,
        "status_reason": reason,
        "utilization_gpu_percent": j(&d.utilization_gpu),
        "utilization_gpu_mean_percent": mean(&d.utilization_gpu_window),
        "utilization_gpu_peak_percent": peak(&d.utilization_gpu_window),
        "utilization_memory_percent": j(&d.utilization_memory),
        "utilization_memory_mean_percent": mean(&d.utilization_memory_window),
        "utilization_memory_peak_percent": peak(&d.utilization_memory_window),
        "memory_total_bytes": j_map(&d.memory, |m| json!(m.total)),
        "memory_used_bytes": j_map(&d.memory, |m| json!(m.used)),
        "memory_free_bytes": j_map(&d.memory, |m| json!(m.free)),
        "memory_reserved_bytes": j_map(&d.memory, |m| json!(m.reserved)),
        "bar1_total_bytes": j_map(&d.bar1, |b| json!(b.total)),
        "bar1_used_bytes": j_map(&d.bar1, |b| json!(b.used)),
        "temperature_celsius": j(&d.temperature),
        "temperature_slowdown_celsius": j(&d.temperature_slowdown),
        "temperature_shutdown_celsius": j(&d.temperature_shutdown),
        "fan_speed_percent": j(&d.fan_speed()),
        "fan_speeds_percent": j_map(&d.fan_speeds, |f| json!(f)),
        "power_usage_watts": watts(&d.power_usage_mw),
        "power_usage_mean_watts": j_map(&d.power_usage_window, |w| json!(round2(w.mean / 1000.0))),
        "power_usage_peak_watts": j_map(&d.power_usage_window, |w| json!(round2(w.peak / 1000.0))),
        "power_limit_watts": watts(&d.power_limit_mw),
        "power_enforced_limit_watts": watts(&d.power_enforced_limit_mw),
        "energy_joules": j_map(&d.energy_mj, |mj| json!(*mj as f64 / 1000.0)),
        "performance_state": j(&d.performance_state),
        "clock_graphics_mhz": j(&d.clocks.graphics),
        "clock_sm_mhz": j(&d.clocks.sm),
        "clock_memory_mhz": j(&d.clocks.memory),
        "clock_video_mhz": j(&d.clocks.video),
        "clock_max_graphics_mhz": j(&d.max_clocks.graphics),
        "clock_max_sm_mhz": j(&d.max_clocks.sm),
        "clock_max_memory_mhz": j(&d.max_clocks.memory),
        "clock_max_video_mhz": j(&d.max_clocks.video),
        "pcie_link_generation": j(&d.pcie_link.generation),
        "pcie_link_width": j(&d.pcie_link.width),
        "pcie_link_max_generation": j(&d.pcie_link.max_generation),
        "pcie_link_max_width": j(&d.pcie_link.max_width),
        "pcie_tx_bytes_per_second": bytes_per_second(&d.pcie_tx_kbps),
        "pcie_rx_bytes_per_second": bytes_per_second(&d.pcie_rx_kbps),
        "encoder_utilization_percent": j(&d.encoder),
        "decoder_utilization_percent": j(&d.decoder),
        "ecc_enabled": j(&d.ecc_enabled),
        "ecc_uncorrected_volatile_errors": j(&d.ecc_uncorrected_volatile),
        "compute_mode": j(&d.compute_mode),
        "persistence_mode": j(&d.persistence_mode),
        "mig_mode": j(&d.mig_enabled),
        "throttle_reasons": j_map(&d.throttle_reasons, |r| json!(r)),
        "mig_devices": d.mig_devices.iter().map(mig_json).collect::<Vec<_>>(),
        "process_list_error": d.processes_unlisted,
    })
}

fn mig_json(m: &MigDevice) -> Value {
    json!({
        "gpu_instance_id": m.id.gpu_instance,
        "compute_instance_id": m.id.compute_instance,
        "profile": j(&m.profile),
        "uuid": j(&m.uuid),
        "memory_total_bytes": j_map(&m.memory, |m| json!(m.total)),
        "memory_used_bytes": j_map(&m.memory, |m| json!(m.used)),
        "memory_free_bytes": j_map(&m.memory, |m| json!(m.free)),
        "utilization_gpu_percent": j(&m.utilization_gpu),
    })
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

fn process_json(p: &GpuProcess) -> Value {
    let h = &p.host;
    json!({
        "pid": p.pid,
        "gpu_index": p.gpu_index,
        "gpu_uuid": j(&p.gpu_uuid),
        "type": p.kind.label(),
        "gpu_memory_bytes": j(&p.gpu_memory_bytes),
        "sm_percent": j(&p.sm_percent),
        "memory_bandwidth_percent": j(&p.memory_bandwidth_percent),
        "encoder_percent": j(&p.encoder_percent),
        "decoder_percent": j(&p.decoder_percent),
        "gpu_instance_id": p.mig.map(|m| m.gpu_instance),
        "compute_instance_id": p.mig.map(|m| m.compute_instance),
        "user": j(&h.user),
        "command": j(&h.command),
        "cpu_percent": j_map(&h.cpu_percent, |c| json!(round2(*c))),
        "host_memory_bytes": j(&h.memory_bytes),
        "start_time_unix_seconds": j(&h.start_time),
        "running_seconds": j(&h.running_seconds),
        "container": h.container.as_ref().map(|c| {
            let mut value = json!(c);
            value["label"] = json!(c.label());
            value
        }),
        "container_pid": h.namespace_pid,
        "local_pid": p.local_pid(),
        "pid_mapping": match &h.mapping {
            PidMapping::Same => "same",
            PidMapping::Mapped { .. } => "mapped",
            PidMapping::Unmapped { .. } => "unmapped",
        },
        "unmapped_reason": match &h.mapping {
            PidMapping::Unmapped { reason } => Some(reason.as_str()),
            _ => None,
        },
    })
}

/// The `--once --json` document (schema in README.md).
/// `usage` covers the time gputop has run (one snapshot for `--once`: no time yet).
pub fn json_report(
    snapshot: &Snapshot,
    alerts: &[Active],
    usage: &crate::monitor::usage::Accounting,
) -> Value {
    let h = &snapshot.host;
    json!({
        "version": JSON_SCHEMA_VERSION,
        "timestamp": rfc3339(snapshot.taken_at),
        "hostname": snapshot.hostname,
        "pid_namespace": snapshot.pid_namespace,
        "driver_version": j(&snapshot.driver.driver_version),
        "cuda_driver_version": j(&snapshot.driver.cuda_driver_version),
        "nvml_version": j(&snapshot.driver.nvml_version),
        "devices": snapshot.devices.iter().map(device_json).collect::<Vec<_>>(),
        "processes": snapshot.processes.iter().map(process_json).collect::<Vec<_>>(),
        "host": {
            "cpu_percent": j_map(&h.cpu_percent, |c| json!(round2(*c))),
            "memory_total_bytes": j(&h.memory_total_bytes),
            "memory_used_bytes": j(&h.memory_used_bytes),
            "swap_total_bytes": j(&h.swap_total_bytes),
            "swap_used_bytes": j(&h.swap_used_bytes),
            "load_average": j_map(&h.load_average, |l| json!(l)),
            "uptime_seconds": j(&h.uptime_seconds),
        },
        "alerts": alerts.iter().map(Active::to_json).collect::<Vec<_>>(),
        "usage": usage.to_json(),
    })
}

/// A MIG device's ids as the JSON document has them.
fn mig_id(gpu_instance: &Value, compute_instance: &Value) -> Option<MigId> {
    Some(MigId {
        gpu_instance: u32::try_from(gpu_instance.as_u64()?).ok()?,
        compute_instance: u32::try_from(compute_instance.as_u64()?).ok()?,
    })
}

/// A snapshot read back from a `--once --json` document (a remote node's `/snapshot`):
/// the figures the views show; what the document does not carry is not supported. The
/// snapshot's time is `received`, when it arrived.
pub fn snapshot_from_json(doc: &Value, received: SystemTime) -> Result<Snapshot, String> {
    fn reading<T>(value: &Value, read: impl FnOnce(&Value) -> Option<T>) -> Reading<T> {
        if value.is_null() {
            Reading::NotSupported
        } else {
            read(value).map_or_else(
                || Reading::Failed("unreadable in the remote report".into()),
                Reading::Value,
            )
        }
    }
    let text = |v: &Value| reading(v, |v| v.as_str().map(str::to_string));
    let int = |v: &Value| reading(v, |v| v.as_u64().and_then(|n| u32::try_from(n).ok()));
    let big = |v: &Value| reading(v, Value::as_u64);
    let float = |v: &Value| reading(v, Value::as_f64);
    let milli = |v: &Value| reading(v, |v| v.as_f64().map(|w| (w * 1000.0).round() as u32));
    let window = |mean: &Value, peak: &Value, scale: f64| {
        reading(mean, |m| {
            Some(Window {
                mean: m.as_f64()? * scale,
                peak: peak.as_f64().unwrap_or(m.as_f64()?) * scale,
                samples: 1,
            })
        })
    };
    if doc["version"].as_u64() != Some(u64::from(JSON_SCHEMA_VERSION)) {
        return Err(format!("not a gputop report of version {JSON_SCHEMA_VERSION}"));
    }
    let devices = doc["devices"]
        .as_array()
        .ok_or("the report has no devices")?
        .iter()
        .map(|d| {
            let index = d["index"].as_u64().unwrap_or(0) as u32;
            let reason = d["status_reason"].as_str().unwrap_or("").to_string();
            let status = match d["status"].as_str() {
                Some("ok") => DeviceStatus::Ok,
                Some("lost") => DeviceStatus::Lost(reason.clone()),
                _ => DeviceStatus::Failed(reason.clone()),
            };
            let mut device = Device::unavailable(index, status, "not in the remote report");
            device.name = text(&d["name"]);
            device.uuid = text(&d["uuid"]);
            device.pci_bus_id = text(&d["pci_bus_id"]);
            if device.status != DeviceStatus::Ok {
                return device;
            }
            device.utilization_gpu = int(&d["utilization_gpu_percent"]);
            device.utilization_memory = int(&d["utilization_memory_percent"]);
            device.utilization_gpu_window = window(
                &d["utilization_gpu_mean_percent"],
                &d["utilization_gpu_peak_percent"],
                1.0,
            );
            device.utilization_memory_window = window(
                &d["utilization_memory_mean_percent"],
                &d["utilization_memory_peak_percent"],
                1.0,
            );
            device.memory = reading(&d["memory_total_bytes"], |total| {
                Some(Memory {
                    total: total.as_u64()?,
                    used: d["memory_used_bytes"].as_u64()?,
                    free: d["memory_free_bytes"].as_u64()?,
                    reserved: d["memory_reserved_bytes"].as_u64().unwrap_or(0),
                })
            });
            device.temperature = int(&d["temperature_celsius"]);
            device.temperature_slowdown = int(&d["temperature_slowdown_celsius"]);
            device.fan_speeds = reading(&d["fan_speeds_percent"], |f| {
                f.as_array()?
                    .iter()
                    .map(|v| v.as_u64().map(|n| n as u32))
                    .collect()
            });
            device.power_usage_mw = milli(&d["power_usage_watts"]);
            device.power_usage_window =
                window(&d["power_usage_mean_watts"], &d["power_usage_peak_watts"], 1000.0);
            device.power_limit_mw = milli(&d["power_limit_watts"]);
            device.energy_mj = reading(&d["energy_joules"], |j| j.as_f64().map(|j| (j * 1000.0) as u64));
            device.performance_state = int(&d["performance_state"]);
            device.clocks.graphics = int(&d["clock_graphics_mhz"]);
            device.clocks.sm = int(&d["clock_sm_mhz"]);
            device.clocks.memory = int(&d["clock_memory_mhz"]);
            device.encoder = int(&d["encoder_utilization_percent"]);
            device.decoder = int(&d["decoder_utilization_percent"]);
            device.ecc_uncorrected_volatile = big(&d["ecc_uncorrected_volatile_errors"]);
            device.processes_unlisted = d["process_list_error"].as_str().map(sanitize);
            device.mig_devices = d["mig_devices"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| {
                    Some(MigDevice {
                        id: mig_id(&m["gpu_instance_id"], &m["compute_instance_id"])?,
                        profile: text(&m["profile"]),
                        uuid: text(&m["uuid"]),
                        memory: reading(&m["memory_total_bytes"], |total| {
                            Some(Memory {
                                total: total.as_u64()?,
                                used: m["memory_used_bytes"].as_u64()?,
                                free: m["memory_free_bytes"].as_u64()?,
                                reserved: 0,
                            })
                        }),
                        utilization_gpu: int(&m["utilization_gpu_percent"]),
                    })
                })
                .collect();
            device
        })
        .collect();
    let processes = doc["processes"]
        .as_array()
        .ok_or("the report has no processes")?
        .iter()
        .map(|p| GpuProcess {
            pid: p["pid"].as_u64().unwrap_or(0) as u32,
            gpu_index: p["gpu_index"].as_u64().unwrap_or(0) as u32,
            gpu_uuid: text(&p["gpu_uuid"]),
            kind: match p["type"].as_str() {
                Some("G") => ProcessType::Graphics,
                Some("C+G") => ProcessType::ComputeGraphics,
                _ => ProcessType::Compute,
            },
            gpu_memory_bytes: big(&p["gpu_memory_bytes"]),
            sm_percent: int(&p["sm_percent"]),
            memory_bandwidth_percent: int(&p["memory_bandwidth_percent"]),
            encoder_percent: int(&p["encoder_percent"]),
            decoder_percent: int(&p["decoder_percent"]),
            mig: mig_id(&p["gpu_instance_id"], &p["compute_instance_id"]),
            host: HostFacts {
                user: text(&p["user"]),
                uid: Reading::NotSupported,
                parent_pid: Reading::NotSupported,
                command: text(&p["command"]),
                cpu_percent: float(&p["cpu_percent"]),
                memory_bytes: big(&p["host_memory_bytes"]),
                start_time: big(&p["start_time_unix_seconds"]),
                running_seconds: big(&p["running_seconds"]),
                container: serde_json::from_value(p["container"].clone()).ok(),
                namespace_pid: p["container_pid"].as_u64().and_then(|n| u32::try_from(n).ok()),
                // A remote node's processes are never signalled from here.
                mapping: PidMapping::Unmapped {
                    reason: "on another machine".into(),
                },
            },
        })
        .collect();
    let h = &doc["host"];
    Ok(Snapshot {
        taken_at: received,
        hostname: doc["hostname"].as_str().unwrap_or("").to_string(),
        driver: DriverInfo {
            driver_version: text(&doc["driver_version"]),
            nvml_version: text(&doc["nvml_version"]),
            cuda_driver_version: text(&doc["cuda_driver_version"]),
        },
        devices,
        processes,
        pid_namespace: serde_json::from_value(doc["pid_namespace"].clone()).unwrap_or_default(),
        host: HostStats {
            cpu_percent: float(&h["cpu_percent"]),
            memory_total_bytes: big(&h["memory_total_bytes"]),
            memory_used_bytes: big(&h["memory_used_bytes"]),
            swap_total_bytes: big(&h["swap_total_bytes"]),
            swap_used_bytes: big(&h["swap_used_bytes"]),
            load_average: reading(&h["load_average"], |l| {
                let l = l.as_array()?;
                Some([l.first()?.as_f64()?, l.get(1)?.as_f64()?, l.get(2)?.as_f64()?])
            }),
            uptime_seconds: big(&h["uptime_seconds"]),
        },
    })
}

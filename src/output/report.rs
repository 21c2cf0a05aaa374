//! `--once` output: the readable report, the JSON document (the snapshot's wire form with
//! the alerts and usage) and the `--list` lines.
//!
//! Pure functions from a snapshot to text. Unknown values print as `N/A` (text) or `null`
//! (JSON); text from processes is escaped so it can never drive the terminal.

use gputop::format::{human_bytes, human_duration, rfc3339, sanitize, table};
use gputop::model::wire::WireReport;
use gputop::model::{Device, DeviceStatus, GpuProcess, Reading, Snapshot, Vendor};
use gputop::monitor::alerts::Active;

const NA: &str = "N/A";

fn text<T>(reading: &Reading<T>, show: impl FnOnce(&T) -> String) -> String {
    reading.value().map_or_else(|| NA.to_string(), show)
}

fn pair<T: Copy>(a: &Reading<T>, b: &Reading<T>, show: impl Fn(T) -> String) -> String {
    format!("{}/{}", text(a, |v| show(*v)), text(b, |v| show(*v)))
}

/// The header and cell of one device metric (`display.default_metrics`).
fn metric_cells(metric: &str, device: &Device) -> Vec<(&'static str, String)> {
    let percent = |r: &Reading<u32>| text(r, |v| format!("{v}%"));
    match metric {
        "utilization" => vec![
            ("UTIL", percent(&device.utilization_gpu_percent)),
            (
                "MEAN/PEAK",
                device
                    .utilization_gpu_mean_percent
                    .get()
                    .zip(device.utilization_gpu_peak_percent.get())
                    .map_or_else(|| NA.into(), |(mean, peak)| format!("{mean:.0}%/{peak:.0}%")),
            ),
        ],
        "memory" => vec![(
            "MEMORY",
            text(&device.memory(), |m| {
                let pct = device.memory_percent().unwrap_or(0.0);
                format!("{} / {} ({pct:.0}%)", human_bytes(m.used), human_bytes(m.total))
            }),
        )],
        "temperature" => vec![("TEMP", text(&device.temperature_celsius, |t| format!("{t}C")))],
        "power" => vec![(
            "POWER",
            pair(&device.power_usage_watts, &device.power_limit_watts, |watts| {
                format!("{:.0}W", watts.round())
            }),
        )],
        "fan" => vec![("FAN", percent(&device.fan_speed_percent))],
        "clocks" => vec![(
            "SM/MEM CLOCK",
            pair(&device.clock_sm_mhz, &device.clock_memory_mhz, |mhz| {
                format!("{mhz}MHz")
            }),
        )],
        "pcie" => vec![(
            "PCIE RX/TX",
            pair(
                &device.pcie_rx_bytes_per_second,
                &device.pcie_tx_bytes_per_second,
                |bytes| format!("{}/s", human_bytes(bytes)),
            ),
        )],
        "encoder" => vec![("ENC", percent(&device.encoder_utilization_percent))],
        "decoder" => vec![("DEC", percent(&device.decoder_utilization_percent))],
        _ => Vec::new(),
    }
}

/// The readable `--once` report: a header, the devices, then the processes.
pub fn text_report(snapshot: &Snapshot, metrics: &[String], alerts: &[Active]) -> String {
    let mut out = format!(
        "{}  {}  driver {}  CUDA {}\n\n",
        sanitize(&snapshot.hostname),
        rfc3339(snapshot.taken_at).replace('T', " ").replace('Z', " UTC"),
        text(&snapshot.driver_version, |v| sanitize(v)),
        text(&snapshot.cuda_driver_version, |v| sanitize(v)),
    );
    // Where a GPU is not NVIDIA's, each says whose and where it sits.
    let makers = snapshot.devices.iter().any(|d| d.vendor != Vendor::Nvidia);
    let mut header = vec!["GPU".to_string()];
    if makers {
        header.extend(["VENDOR".to_string(), "BUS".to_string()]);
    }
    header.push("NAME".to_string());
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
        let mut row = vec![device.index.to_string()];
        if makers {
            row.push(device.vendor.name().to_string());
            row.push(text(&device.pci_bus_id, |b| sanitize(b)));
        }
        row.push(text(&device.name, |n| sanitize(n)));
        match fault(device) {
            None => {
                for metric in metrics {
                    row.extend(metric_cells(metric, device).into_iter().map(|(_, cell)| cell));
                }
            }
            Some(fault) => row.push(fault),
        }
        rows.push(row);
    }
    let right: Vec<bool> = rows[0].iter().enumerate().map(|(i, _)| i == 0).collect();
    out.push_str(&table(&rows, &right));
    out.push_str(&mig_table(snapshot));

    out.push('\n');
    for (index, reason) in snapshot.unlisted() {
        out.push_str(&format!("GPU {index}: {}\n", sanitize(reason)));
    }
    if let Some(note) = snapshot.hidden_note() {
        out.push_str(&format!("{note}\n"));
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
            row.insert(row.len() - 1, sanitize(p.container_label()));
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
                .filter(|p| p.gpu_index == d.index && p.mig() == Some(m.id()))
                .count();
            rows.push(vec![
                format!("{}/{}/{}", d.index, m.gpu_instance_id, m.compute_instance_id),
                text(&m.profile, |p| sanitize(p)),
                text(&m.memory(), |mem| {
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
        match p.mig() {
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
            let status = fault(d).map(|fault| format!(" [{fault}]")).unwrap_or_default();
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

/// The document for `snapshot`; `usage` covers the time gputop has run (one snapshot for
/// `--once`: no time yet).
pub fn json_report(
    snapshot: &Snapshot,
    alerts: &[Active],
    usage: &gputop::monitor::usage::Accounting,
) -> WireReport {
    WireReport::new(
        snapshot.clone(),
        alerts.iter().map(Active::to_wire).collect(),
        usage.to_wire(),
    )
}

/// `LOST: reason` or `ERROR: reason` for a GPU that does not answer.
fn fault(d: &Device) -> Option<String> {
    let state = match d.status {
        DeviceStatus::Ok => return None,
        DeviceStatus::Lost => "LOST",
        DeviceStatus::Error => "ERROR",
    };
    Some(format!(
        "{state}: {}",
        sanitize(d.status_reason.as_deref().unwrap_or(""))
    ))
}

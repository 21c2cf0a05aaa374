//! `--once` output: the readable report, the JSON document (the snapshot's wire form with
//! the alerts and usage) and the `--list` lines.
//!
//! Pure functions from a snapshot to text. Unknown values print as `N/A` (text) or `null`
//! (JSON); text from processes is escaped so it can never drive the terminal.

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use crate::app::columns::{self, Column, NA, device as cells, na};
use gputop_core::format::{human_bytes, rfc3339, sanitize, table};
use gputop_core::model::order::SortKey;
use gputop_core::model::wire::WireReport;
use gputop_core::model::{Device, DeviceStatus, Snapshot, Vendor};
use gputop_core::monitor::alerts::Active;

/// The header and cell of one device metric (`display.default_metrics`), in the live
/// view's texts.
fn metric_cells(metric: &str, device: &Device) -> Vec<(&'static str, String)> {
    let pair = |a: String, b: String| format!("{a}/{b}");
    match metric {
        "utilization" => vec![
            ("UTIL", cells::percent(&device.utilization_gpu_percent)),
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
            na(&device.memory(), |_| {
                format!("{} ({})", cells::memory(device), cells::memory_percent(device))
            }),
        )],
        "temperature" => vec![("TEMP", cells::temperature(device))],
        "memory_temperature" => vec![("MEMTEMP", cells::memory_temperature(device))],
        "power" => vec![("POWER", cells::power(device))],
        "power_instant" => vec![("POWER NOW", cells::power_instant(device))],
        "fan" => vec![("FAN", cells::percent(&device.fan_speed_percent))],
        "clocks" => vec![(
            "SM/MEM CLOCK",
            pair(
                cells::clock(&device.clock_sm_mhz),
                cells::clock(&device.clock_memory_mhz),
            ),
        )],
        "pcie" => vec![(
            "PCIE RX/TX",
            pair(
                cells::rate(&device.pcie_rx_bytes_per_second),
                cells::rate(&device.pcie_tx_bytes_per_second),
            ),
        )],
        "encoder" => vec![("ENC", cells::percent(&device.encoder_utilization_percent))],
        "decoder" => vec![("DEC", cells::percent(&device.decoder_utilization_percent))],
        _ => Vec::new(),
    }
}

/// The readable `--once` report: a header, the devices, then the processes. On a terminal
/// `width` columns wide, the processes are laid out as the live view lays them out and no
/// line is longer; without a width (a pipe, a file), every column is printed whole.
pub fn text_report(snapshot: &Snapshot, metrics: &[String], alerts: &[Active], width: Option<u16>) -> String {
    let mut out = format!(
        "{}  {}  driver {}  CUDA {}\n\n",
        sanitize(&snapshot.hostname),
        rfc3339(snapshot.taken_at).replace('T', " ").replace('Z', " UTC"),
        na(&snapshot.driver_version, |v| sanitize(v)),
        na(&snapshot.cuda_driver_version, |v| sanitize(v)),
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
            row.push(na(&device.pci_bus_id, |b| sanitize(b)));
        }
        row.push(na(&device.name, |n| sanitize(n)));
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
    out.push_str(&fitted_table(rows, right, width, &DEVICE_COLUMNS_DROPPED_FIRST));
    out.push_str(&mig_table(snapshot, width));

    out.push('\n');
    for (index, reason) in snapshot.unlisted() {
        out.push_str(&format!("GPU {index}: {}\n", sanitize(reason)));
    }
    if let Some(note) = snapshot.hidden_note() {
        out.push_str(&format!("{note}\n"));
    }
    if snapshot.processes.is_empty() {
        out.push_str("No GPU processes.\n");
    } else {
        out.push_str(&process_table(snapshot, width));
    }
    out.push_str(&alert_lines(alerts));
    match width {
        Some(width) => wrap_long_lines(&out, usize::from(width)),
        None => out,
    }
}

/// The device table's columns a narrow terminal gives up, in order, before its lines are
/// cut: where a GPU sits, then what the live view shows on its second line.
const DEVICE_COLUMNS_DROPPED_FIRST: [&str; 9] = [
    "BUS",
    "MEAN/PEAK",
    "SM/MEM CLOCK",
    "PCIE RX/TX",
    "ENC",
    "DEC",
    "FAN",
    "VENDOR",
    "UUID",
];

/// `rows` (the first the header) as a table; in `width` columns, without the columns named
/// in `dropped_first`, in that order, until its lines fit, and then each line cut there.
fn fitted_table(
    mut rows: Vec<Vec<String>>,
    mut right: Vec<bool>,
    width: Option<u16>,
    dropped_first: &[&str],
) -> String {
    let Some(width) = width.map(usize::from) else {
        return table(&rows, &right);
    };
    let fits = |text: &str| text.lines().all(|l| l.width() <= width);
    let mut text = table(&rows, &right);
    for name in dropped_first {
        if fits(&text) {
            break;
        }
        let Some(at) = rows[0].iter().position(|h| h == name) else {
            continue;
        };
        for row in &mut rows {
            if at < row.len() {
                row.remove(at);
            }
        }
        right.remove(at);
        text = table(&rows, &right);
    }
    text.lines()
        .map(|line| format!("{}\n", cut(line, width).trim_end()))
        .collect()
}

/// The processes in the live view's columns, with its cell texts. In `width` columns as the
/// live view lays them out (columns dropped, fixed widths, the command cut at the edge);
/// without a width, every column, each as wide as its widest cell.
fn process_table(snapshot: &Snapshot, width: Option<u16>) -> String {
    let host_memory_total = snapshot.host.memory_total_bytes.get().unwrap_or(0);
    let mig = snapshot.processes.iter().any(|p| p.mig().is_some());
    let Some(width) = width else {
        let shown = columns::every(snapshot);
        let mut rows = vec![shown.iter().map(|c| c.header(mig).to_string()).collect()];
        rows.extend(
            snapshot
                .processes
                .iter()
                .map(|p| shown.iter().map(|c| c.cell(p, host_memory_total)).collect()),
        );
        let right: Vec<bool> = shown.iter().map(|c| c.right_aligned()).collect();
        return table(&rows, &right);
    };
    let placed = columns::fitted(snapshot, width, SortKey::GpuMemory);
    // Headers left-aligned, numbers right-aligned, as the live view shows them.
    let line = |cell: &dyn Fn(Column) -> String, header: bool| {
        let mut line = String::new();
        for (i, column) in placed.iter().enumerate() {
            if i > 0 {
                line.push(' ');
            }
            let text = cell(column.column);
            if column.width == 0 {
                line.push_str(&text);
                continue;
            }
            let room = usize::from(column.width);
            let text = cut(&text, room);
            let pad = " ".repeat(room - text.width());
            if column.column.right_aligned() && !header {
                line.push_str(&pad);
                line.push_str(&text);
            } else {
                line.push_str(&text);
                line.push_str(&pad);
            }
        }
        let mut line = cut(&line, usize::from(width)).trim_end().to_string();
        line.push('\n');
        line
    };
    let mut out = line(&|c| c.header(mig).to_string(), true);
    for p in &snapshot.processes {
        out.push_str(&line(&|c| c.cell(p, host_memory_total), false));
    }
    out
}

/// `text` cut to at most `width` terminal columns.
fn cut(text: &str, width: usize) -> String {
    let mut used = 0;
    text.chars()
        .take_while(|c| {
            used += c.width().unwrap_or(0);
            used <= width
        })
        .collect()
}

/// `text` with each line longer than `width` columns wrapped at spaces, its continuation
/// indented as its first words were; a word longer than the line is cut.
fn wrap_long_lines(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line.width() <= width {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let body = line.trim_start();
        let indent = " ".repeat((line.len() - body.len() + 2).min(width / 2));
        let mut current = line[..line.len() - body.len()].to_string();
        let mut fresh = true;
        for word in body.split(' ') {
            if !fresh && current.width() + 1 + word.width() > width {
                out.push_str(&cut(&current, width));
                out.push('\n');
                current = indent.clone();
                fresh = true;
            }
            if !fresh {
                current.push(' ');
            }
            current.push_str(word);
            fresh = false;
        }
        out.push_str(&cut(&current, width));
        out.push('\n');
    }
    out
}

/// The MIG devices, one row each as GPU/GPU instance/compute instance; nothing without MIG.
fn mig_table(snapshot: &Snapshot, width: Option<u16>) -> String {
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
                na(&m.profile, |p| sanitize(p)),
                na(&m.memory(), |mem| {
                    format!(
                        "{} / {} ({:.0}%)",
                        human_bytes(mem.used),
                        human_bytes(mem.total),
                        mem.used as f64 * 100.0 / mem.total.max(1) as f64
                    )
                }),
                processes.to_string(),
                na(&m.uuid, |u| sanitize(u)),
            ]);
        }
    }
    if rows.len() == 1 {
        return String::new();
    }
    let right = vec![true, false, false, true, false];
    format!(
        "\n{}",
        fitted_table(rows, right, width, &DEVICE_COLUMNS_DROPPED_FIRST)
    )
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
                na(&d.name, |n| sanitize(n)),
                na(&d.uuid, |u| sanitize(u)),
                na(&d.pci_bus_id, |b| sanitize(b)),
            )
        })
        .collect()
}

/// The document for `snapshot`; `usage` covers the time gputop has run (one snapshot for
/// `--once`: no time yet).
pub fn json_report(
    snapshot: &Snapshot,
    alerts: &[Active],
    usage: &gputop_core::monitor::usage::Accounting,
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

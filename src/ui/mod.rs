//! Drawing: every screen as a function of the view's state into a ratatui buffer.
//!
//! Nothing here does I/O or changes the state: [`draw`] returns where the process table
//! landed, for the mouse and for paging. Every string from outside (GPU names, users,
//! command lines, environment) passes through `format::sanitize` before it is drawn.

mod chart;
mod paint;
mod screens;
#[cfg(test)]
mod tests;
pub mod theme;

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};

use crate::app::columns::{self, Column, device as cells, na, percent_of};
use crate::app::state::{App, ProcessKey};
use crate::app::view::{LayoutMode, Screen};
use gputop_core::format::trim_number;
use gputop_core::format::{age, human_bytes, human_duration, sanitize};
use gputop_core::model::order::SortKey;
use gputop_core::model::{Device, DeviceStatus, PidNamespace, Reading, Snapshot, Vendor};
use gputop_core::monitor::alerts::rules::Severity;
use gputop_core::monitor::alerts::{Active, Phase, Subject};
use theme::{Load, Theme};

/// Below this the screen shows a notice instead of the panels.
pub const MIN_WIDTH: u16 = 60;
pub const MIN_HEIGHT: u16 = 12;

/// Where the process table landed, for the mouse.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableGeometry {
    /// Screen row of the first process row.
    pub first_row_y: u16,
    pub rows: u16,
    pub header_y: u16,
    /// Column spans of the header: (x start, x end, sort key).
    pub columns: Vec<(u16, u16, SortKey)>,
    /// Where a text screen (help, alerts, users, environment) landed, when one is open.
    pub text: Option<screens::TextGeometry>,
}

/// Draws the current screen; writes nothing but the buffer. Returns where the main
/// screen's process table landed (for the mouse, and for paging by the rows it shows).
pub fn draw(buffer: &mut Buffer, app: &App, theme: &Theme) -> TableGeometry {
    let area = buffer.area;
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let text = format!(
            "Terminal too small: {}x{}. gputop needs at least {MIN_WIDTH}x{MIN_HEIGHT}; enlarge it or press q.",
            area.width, area.height
        );
        Widget::render(
            Paragraph::new(text).wrap(ratatui::widgets::Wrap { trim: true }),
            area,
            buffer,
        );
        return TableGeometry::default();
    }
    if app.view.screen == Screen::Cluster
        || (app.view.screen == Screen::Help && app.data.fleet.is_some() && app.data.snapshot.is_none())
    {
        if app.view.screen == Screen::Cluster {
            screens::cluster(buffer, area, app, theme);
            return TableGeometry::default();
        }
        return TableGeometry {
            text: Some(screens::help(buffer, area, app, theme)),
            ..TableGeometry::default()
        };
    }
    let Some(snapshot) = app.data.snapshot.clone() else {
        let text = match &app.data.stale {
            Some(stale) => format!(
                "gputop: {}... ({} s; q quits)",
                stale
                    .waiting_on
                    .as_deref()
                    .map_or("reading the GPUs".into(), sanitize),
                stale.age_seconds
            ),
            None if app.view.node.is_some() => {
                "gputop: asking for the node's GPUs and processes... (Esc: back)".into()
            }
            None => "gputop: reading the GPUs...".into(),
        };
        Widget::render(Paragraph::new(text), area, buffer);
        return TableGeometry::default();
    };
    let mut geometry = TableGeometry::default();
    match app.view.screen {
        Screen::Main => geometry = main_screen(buffer, area, app, &snapshot, theme),
        Screen::Help => geometry.text = Some(screens::help(buffer, area, app, theme)),
        Screen::Details => screens::details(buffer, area, app, theme),
        Screen::Environment => geometry.text = Some(screens::environment(buffer, area, app, theme)),
        Screen::Tree => screens::tree(buffer, area, app, theme),
        Screen::Charts => screens::charts(buffer, area, app, theme),
        Screen::Alerts => geometry.text = Some(screens::alerts(buffer, area, app, theme)),
        Screen::Users => geometry.text = Some(screens::users(buffer, area, app, theme)),
        Screen::Cluster => screens::cluster(buffer, area, app, theme),
    }
    if let Some(confirmation) = &app.view.confirmation {
        screens::confirmation(buffer, area, confirmation, theme);
    }
    geometry
}

/// Whether the device panel uses two lines per GPU.
fn full_layout(app: &App, devices: usize, height: u16) -> bool {
    match app.view.layout {
        LayoutMode::Full => true,
        LayoutMode::Compact => false,
        // Two lines per GPU while at least 5 process rows remain.
        LayoutMode::Auto => (devices * 2 + 9) as u16 <= height,
    }
}

fn header_line(snapshot: &Snapshot, app: &App, theme: &Theme) -> Line<'static> {
    let mut spans = vec![
        Span::styled("gputop ", theme.title()),
        Span::raw(format!(
            "{}  driver {}  CUDA {}  ",
            sanitize(&snapshot.hostname),
            na(&snapshot.driver_version, |v| sanitize(v)),
            na(&snapshot.cuda_driver_version, |v| sanitize(v)),
        )),
    ];
    if let Some(stale) = &app.data.stale {
        let waiting = stale.waiting_on.as_deref().map_or(String::new(), |call| {
            format!(": {} has not returned", sanitize(call))
        });
        spans.push(Span::styled(
            format!(" data {} s old{waiting} ", stale.age_seconds),
            theme.alert(),
        ));
        spans.push(Span::raw(" "));
    }
    if let Some(replay) = &app.data.replay {
        let state = if replay.paused { "paused" } else { "playing" };
        spans.push(Span::styled(
            format!(
                " REPLAY {} / {} x{} {state} ",
                human_duration(replay.position as u64),
                human_duration(replay.length as u64),
                trim_number(replay.speed)
            ),
            theme.sorted_header(),
        ));
        spans.push(Span::raw(" "));
    }
    let marks = &app.data.alert_marks;
    let counts = marks.firing_counts;
    if counts.iter().any(|c| *c > 0) {
        spans.push(Span::raw(" alerts:"));
        for severity in Severity::ALL.into_iter().rev() {
            let count = counts[severity as usize];
            if count > 0 {
                spans.push(Span::raw(" "));
                spans.push(Span::styled(
                    format!("{count} {}", severity.label()),
                    theme.severity(severity),
                ));
            }
        }
        spans.push(Span::raw(" "));
    }
    let pending = marks.pending;
    if pending > 0 {
        spans.push(Span::styled(format!(" {pending} pending "), theme.alert()));
    }
    // A GPU whose Xid rule fires: the Xid, and how long before this snapshot it came.
    for d in &snapshot.devices {
        let xid_rule_fires = marks
            .of_subject(&Subject::Device(d.index))
            .is_some_and(|m| m.critical_xid);
        if let (true, Some(event)) = (xid_rule_fires, d.last_critical_xid) {
            let ago = snapshot
                .taken_at
                .duration_since(event.at())
                .map_or(0, |d| d.as_secs());
            spans.push(Span::raw(" "));
            spans.push(Span::styled(
                format!(" Xid {} on GPU {} {} ago ", event.xid, d.index, age(ago)),
                theme.severity(Severity::Critical),
            ));
        }
    }
    Line::from(spans)
}

/// The lines of one GPU in the device panel.
fn device_lines(
    d: &Device,
    app: &App,
    theme: &Theme,
    full: bool,
    width: u16,
    layout: &DeviceLayout,
) -> Vec<Line<'static>> {
    let name = named_with_vendor(d);
    let label = match d.status {
        DeviceStatus::Ok => None,
        DeviceStatus::Lost => Some("LOST"),
        DeviceStatus::Error => Some("ERROR"),
    };
    if let Some(label) = label {
        let reason = d.status_reason.as_deref().unwrap_or("");
        return vec![Line::from(vec![
            Span::raw(format!("{:>2}  {name}  ", d.index)),
            Span::styled(format!("{label}: {}", sanitize(reason)), theme.error()),
        ])];
    }
    let display = &app.settings.display;
    let mem_pct = d.memory_percent();
    // The bar and its figure are the mean since the last refresh (the driver's samples), the
    // peak beside it, as `--once` and the alerts reason: a burst between two refreshes is not
    // missed, and an idle GPU reads idle. The momentary reading follows where there is room.
    let window = d
        .utilization_gpu_mean_percent
        .get()
        .zip(d.utilization_gpu_peak_percent.get());
    let util = d.utilization_percent();
    // Marks come from the alert engine: `!` while a rule about a reading above its threshold
    // fires for this GPU (an idle GPU's alerts colour only its index), and the temperature
    // in red while a temperature rule fires.
    let marks = app.data.alert_marks.of_subject(&Subject::Device(d.index));
    let over = marks.is_some_and(|m| m.above);
    let mark = if over { "!" } else { " " };
    let over_temp = marks.is_some_and(|m| m.temperature);
    let mem_style = mem_pct.map_or(Style::new(), |p| {
        theme.load(Load::of(p, display.memory_low, display.memory_high))
    });
    let util_style = util.map_or(Style::new(), |u| {
        theme.load(Load::of(u, display.utilization_low, display.utilization_high))
    });
    let memory = cells::memory(d);
    let temp_style = if over_temp { theme.error() } else { Style::new() };
    let fan = format!("FAN {:>4}", cells::percent(&d.fan_speed_percent));
    // Only NVIDIA's driver has performance states: blank where there are none.
    let pstate = match &d.performance_state {
        Reading::NotSupported => "   ".to_string(),
        state => format!("P{:<2}", na(state, u32::to_string)),
    };
    let now = format!("{} now", cells::percent(&d.utilization_gpu_percent));
    let power = cells::power(d);
    let mean_peak = match (window, util) {
        (Some((mean, peak)), _) => format!(" {mean:>3.0}% mean {peak:>3.0}% peak"),
        (None, Some(u)) => format!(" {u:>3.0}%"),
        (None, None) => "  N/A".into(),
    };
    // A GPU with a firing alert: its index in the alert's colours.
    let index_style = marks.map_or(Style::new(), |m| theme.severity(m.severity));
    // What the first line leaves out goes to the second.
    let first = {
        let name = if layout.name_width < 22 {
            name.strip_prefix("NVIDIA ").unwrap_or(&name)
        } else {
            &name
        };
        let mut spans = vec![
            Span::styled(mark.to_string(), theme.error()),
            Span::styled(format!("{:>2}", d.index), index_style),
            Span::raw(format!(" {name:<w$.w$} ", w = layout.name_width)),
        ];
        if layout.fan {
            spans.push(Span::raw(format!("{fan} ")));
        }
        spans.push(Span::styled(format!("{:>4} ", cells::temperature(d)), temp_style));
        if layout.pstate {
            spans.push(Span::raw(format!("{pstate} ")));
        }
        spans.extend([
            Span::raw(format!("{power:>9} MEM ")),
            Span::styled(theme.bar(mem_pct.unwrap_or(0.0), layout.bar_width), mem_style),
            Span::styled(format!(" {:>4} ", cells::memory_percent(d)), mem_style),
        ]);
        if layout.memory {
            spans.push(Span::raw(format!("{memory:<17} ")));
        }
        spans.extend([
            Span::raw("UTIL "),
            Span::styled(theme.bar(util.unwrap_or(0.0), layout.bar_width), util_style),
            Span::styled(mean_peak.clone(), util_style),
        ]);
        if layout.now {
            spans.push(Span::raw(format!(", {now}")));
        }
        Line::from(spans)
    };
    let width = usize::from(width);
    if !full {
        return vec![first];
    }
    // The second line: what the first had no room for, then the rest, whole items only.
    let mut items: Vec<String> = Vec::new();
    if !layout.pstate && !pstate.trim().is_empty() {
        items.push(pstate.trim_end().to_string());
    }
    if !layout.fan {
        items.push(fan);
    }
    if !layout.memory {
        items.push(format!("MEM {memory}"));
    }
    if !layout.now {
        items.push(format!("UTIL {now}"));
    }
    if d.vendor != Vendor::Nvidia {
        // Two GPUs of one model are told apart by their slot.
        items.insert(
            0,
            format!(
                "{} {}",
                na(&d.driver, |driver| sanitize(driver)),
                na(&d.pci_bus_id, |slot| sanitize(slot))
            ),
        );
    }
    if let (Some(used), Some(total)) = (d.gtt_used_bytes.get(), d.gtt_total_bytes.get()) {
        items.push(format!("GTT {}/{}", human_bytes(used), human_bytes(total)));
    }
    // A figure the GPU does not offer at all is left out, not shown as N/A.
    let clock = match (d.clock_sm_mhz.get(), d.clock_graphics_mhz.get()) {
        (Some(sm), _) => Some(format!("SM {sm}MHz")),
        (None, Some(graphics)) => Some(format!("CLK {graphics}MHz")),
        (None, None) if offers(&d.clock_sm_mhz) => Some("SM N/A".into()),
        (None, None) => None,
    };
    let candidates = [
        clock,
        offers(&d.clock_memory_mhz).then(|| format!("MCLK {}", cells::clock(&d.clock_memory_mhz))),
        offers(&d.memory_temperature_celsius).then(|| format!("MEMTEMP {}", cells::memory_temperature(d))),
        offers(&d.power_instant_watts).then(|| format!("PWR NOW {}", cells::power_instant(d))),
        (offers(&d.pcie_rx_bytes_per_second) || offers(&d.pcie_tx_bytes_per_second)).then(|| {
            format!(
                "PCIe RX {} TX {}",
                cells::rate(&d.pcie_rx_bytes_per_second),
                cells::rate(&d.pcie_tx_bytes_per_second)
            )
        }),
        (offers(&d.encoder_utilization_percent) || offers(&d.decoder_utilization_percent)).then(|| {
            format!(
                "ENC {} DEC {}",
                cells::percent(&d.encoder_utilization_percent),
                cells::percent(&d.decoder_utilization_percent)
            )
        }),
        offers(&d.ecc_uncorrected_volatile_errors)
            .then(|| format!("ECC {}", na(&d.ecc_uncorrected_volatile_errors, u64::to_string))),
        d.memory_reserved_bytes
            .get()
            .map(|reserved| format!("reserved {}", human_bytes(reserved))),
        offers(&d.energy_joules).then(|| {
            format!(
                "ENERGY {}",
                na(&d.energy_joules, |joules| gputop_core::format::human_energy(
                    *joules
                ))
            )
        }),
    ];
    items.extend(candidates.into_iter().flatten());
    // Four columns in: two of indent, then the gap each item is preceded by.
    let mut second = String::from("  ");
    for item in items {
        if second.chars().count() + 2 + item.chars().count() <= width {
            second.push_str("  ");
            second.push_str(&item);
        }
    }
    vec![first, Line::from(second)]
}

/// Whether a GPU offers a reading at all (its value, or a failure to read it).
fn offers<T>(reading: &Reading<T>) -> bool {
    !matches!(reading, Reading::NotSupported)
}

/// A GPU's name as the device panel shows it: an AMD or Intel GPU's begins with its maker's
/// name, so that the GPUs of a machine with several makers are told apart (NVIDIA's names
/// say NVIDIA, or GeForce, Tesla, Quadro).
fn named_with_vendor(d: &Device) -> String {
    let name = na(&d.name, |n| sanitize(n));
    let vendor = d.vendor.name();
    if d.vendor == Vendor::Nvidia || name.starts_with(vendor) {
        name
    } else {
        format!("{vendor} {name}")
    }
}

/// What a GPU's first line holds at one width: the name's width (under 22 without its
/// `NVIDIA ` prefix), the bars' width, and which figures it carries beside temperature,
/// power, memory and utilization.
struct DeviceLayout {
    name_width: usize,
    bar_width: usize,
    fan: bool,
    pstate: bool,
    /// Memory used/total as figures, beside the bar's percentage.
    memory: bool,
    /// The momentary utilization beside the interval's mean and peak.
    now: bool,
}

/// From the widest terminals to 80 columns; the first in which every GPU's first line fits is
/// drawn, so that the GPUs' columns line up.
const DEVICE_LAYOUTS: [DeviceLayout; 5] = [
    DeviceLayout {
        name_width: 22,
        bar_width: 20,
        fan: true,
        pstate: true,
        memory: true,
        now: true,
    },
    DeviceLayout {
        name_width: 22,
        bar_width: 12,
        fan: true,
        pstate: true,
        memory: true,
        now: true,
    },
    DeviceLayout {
        name_width: 15,
        bar_width: 12,
        fan: false,
        pstate: true,
        memory: true,
        now: false,
    },
    DeviceLayout {
        name_width: 15,
        bar_width: 10,
        fan: false,
        pstate: true,
        memory: false,
        now: false,
    },
    DeviceLayout {
        name_width: 12,
        bar_width: 6,
        fan: false,
        pstate: false,
        memory: false,
        now: false,
    },
];

/// One line per MIG device under its GPU: instance ids, profile, memory, utilization
/// (where the driver gives it) and how many processes run on it; bars `bar_width` wide, as
/// its GPU's.
fn mig_lines(d: &Device, snapshot: &Snapshot, theme: &Theme, bar_width: usize) -> Vec<Line<'static>> {
    d.mig_devices
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let last = i + 1 == d.mig_devices.len();
            let branch = match (theme.ascii, last) {
                (true, true) => "`-",
                (true, false) => "|-",
                (false, true) => "└─",
                (false, false) => "├─",
            };
            let percent = m.memory().value().map(|mem| percent_of(mem.used, mem.total));
            let processes = snapshot
                .processes
                .iter()
                .filter(|p| p.gpu_index == d.index && p.mig() == Some(m.id()))
                .count();
            Line::from(vec![
                Span::raw(format!(
                    "   {branch} MIG {}/{} {:<9} MEM ",
                    m.gpu_instance_id,
                    m.compute_instance_id,
                    na(&m.profile, |p| sanitize(p)),
                )),
                Span::raw(theme.bar(percent.unwrap_or(0.0), bar_width)),
                Span::raw(format!(
                    " {:>4} {:<17} UTIL {:>4}  PROCS {processes}",
                    percent.map_or("N/A".into(), |p| format!("{p:.0}%")),
                    na(&m.memory(), |mem| format!(
                        "{}/{}",
                        human_bytes(mem.used),
                        human_bytes(mem.total)
                    )),
                    na(&m.utilization_gpu_percent, |u| format!("{u}%")),
                )),
            ])
        })
        .collect()
}

fn host_line(snapshot: &Snapshot, theme: &Theme) -> Line<'static> {
    let h = &snapshot.host;
    let mem = match (h.memory_used_bytes.get(), h.memory_total_bytes.get()) {
        (Some(u), Some(t)) => format!("{:.1}% of {}", percent_of(u, t), human_bytes(t)),
        _ => "N/A".into(),
    };
    let swap = match (h.swap_used_bytes.get(), h.swap_total_bytes.get()) {
        (Some(u), Some(t)) if t > 0 => format!("{:.1}%", percent_of(u, t)),
        (Some(_), Some(_)) => "none".into(),
        _ => "N/A".into(),
    };
    let load = format!(
        " CPU {}  MEM {mem}  SWP {swap}  LOAD {}  UP {}",
        na(&h.cpu_percent, |c| format!("{c:.1}%")),
        na(&h.load_average, |l| format!(
            "{:.2} {:.2} {:.2}",
            l[0], l[1], l[2]
        )),
        na(&h.uptime_seconds, |s| human_duration(*s)),
    );
    let mut spans = vec![Span::raw(load)];
    if let Some(banner) = namespace_banner(snapshot) {
        spans.push(Span::styled(format!("  {banner}"), theme.alert()));
    }
    if let Some(note) = snapshot.hidden_note() {
        spans.push(Span::styled(format!("  {note}"), theme.alert()));
    }
    Line::from(spans)
}

/// Says so when gputop runs in a PID namespace of its own, where NVML's PIDs may not be its.
fn namespace_banner(snapshot: &Snapshot) -> Option<String> {
    let unreachable = snapshot
        .processes
        .iter()
        .filter(|p| p.local_pid().is_none())
        .count();
    let place = match snapshot.pid_namespace {
        PidNamespace::Host => return None,
        PidNamespace::NestedHostProc => "nested PID namespace",
        PidNamespace::Container => "container PID namespace",
    };
    Some(if unreachable == 0 {
        format!("[{place}]")
    } else {
        format!("[{place}: {unreachable} of the GPU processes outside it; no signals for those]")
    })
}

fn main_screen(
    buffer: &mut Buffer,
    area: Rect,
    app: &App,
    snapshot: &Snapshot,
    theme: &Theme,
) -> TableGeometry {
    let shown = app.view.selection.over(&snapshot.devices);
    let devices: Vec<&Device> = snapshot.devices.iter().filter(|d| shown.gpu(d)).collect();
    let full = full_layout(app, devices.len(), area.height);
    let lay_out = |layout: &DeviceLayout| {
        let lines: Vec<Vec<Line>> = devices
            .iter()
            .map(|d| device_lines(d, app, theme, full, area.width, layout))
            .collect();
        // A lost GPU's line is its reason, cut at the edge: it picks no layout.
        let fits = lines
            .iter()
            .zip(&devices)
            .filter(|(_, d)| d.status == DeviceStatus::Ok)
            .all(|(l, _)| {
                l.first()
                    .is_none_or(|first| first.width() <= usize::from(area.width))
            });
        fits.then_some(lines)
    };
    let narrowest = &DEVICE_LAYOUTS[DEVICE_LAYOUTS.len() - 1];
    let (layout, per_device) = DEVICE_LAYOUTS[..DEVICE_LAYOUTS.len() - 1]
        .iter()
        .find_map(|layout| lay_out(layout).map(|lines| (layout, lines)))
        .unwrap_or_else(|| {
            let lines = devices
                .iter()
                .map(|d| device_lines(d, app, theme, full, area.width, narrowest))
                .collect();
            (narrowest, lines)
        });
    let device_lines: Vec<Line> = devices
        .iter()
        .zip(per_device)
        .flat_map(|(d, mut lines)| {
            lines.extend(mig_lines(d, snapshot, theme, layout.bar_width));
            lines
        })
        .collect();
    let alert_lines = alert_panel(app, theme, area.height);
    let [header, panel, host, alert_area, table_area, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(device_lines.len() as u16),
        Constraint::Length(1),
        Constraint::Length(alert_lines.len() as u16),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    paint::line(buffer, header, &header_line(snapshot, app, theme));
    paint::lines(buffer, panel, &device_lines, Style::default());
    paint::lines(buffer, host, &[host_line(snapshot, theme)], theme.dim());
    paint::lines(buffer, alert_area, &alert_lines, Style::default());
    for (y, line) in (alert_area.top()..alert_area.bottom()).zip(&alert_lines) {
        if line.width() > usize::from(alert_area.width) {
            paint::mark_cut(
                buffer,
                Rect {
                    y,
                    height: 1,
                    ..alert_area
                },
                theme.ascii,
            );
        }
    }

    let rows = app.rows();
    let visible = table_area.height.saturating_sub(1) as usize;
    let selected = app.selected_index(&rows);
    let (up, down) = theme.sort_marks();
    let descending = app.view.sort.descending_by_default() != app.view.reverse;
    let table_columns = columns::fitted(snapshot, table_area.width, app.view.sort);
    // Columns left to right with one space between; COMMAND takes the rest, and whatever
    // does not fit is cut at the right edge.
    let edge = table_area.right();
    let mut x = table_area.x;
    let mut columns = Vec::new();
    let mut placed = Vec::with_capacity(table_columns.len());
    for columns::Placed {
        column,
        header: name,
        width,
    } in &table_columns
    {
        let width = if *width == 0 {
            edge.saturating_sub(x)
        } else {
            *width
        };
        let key = column.sort_key();
        let sorted = key == Some(app.view.sort);
        let label = if sorted {
            format!("{name}{}", if descending { down } else { up })
        } else {
            name.to_string()
        };
        let style = if sorted {
            theme.sorted_header()
        } else {
            theme.header()
        };
        let end = x.saturating_add(width);
        paint::text(buffer, x, table_area.y, end, &label, style);
        if let Some(key) = key {
            columns.push((x, end, key));
        }
        placed.push((x, end, *column));
        x = end.saturating_add(1);
    }
    let host_memory_total = snapshot.host.memory_total_bytes.get().unwrap_or(0);
    let my_uid = app.view.my_uid;
    let shown = rows.iter().enumerate().skip(app.view.scroll).take(visible);
    for (y, (i, p)) in (table_area.y + 1..table_area.bottom()).zip(shown) {
        let mut style = Style::new();
        if my_uid.is_some() && p.host.uid.get() != my_uid {
            style = style.patch(theme.dim());
        }
        if let Some(marks) = app
            .data
            .alert_marks
            .of_subject(&Subject::Process(ProcessKey::of(p)))
        {
            style = style.patch(theme.severity(marks.severity));
        }
        if app.view.tagged.contains(&p.pid) {
            style = style.patch(theme.tagged());
        }
        if Some(i) == selected {
            style = style.patch(theme.selected());
        }
        if style != Style::default() {
            buffer.set_style(
                Rect {
                    y,
                    height: 1,
                    ..table_area
                },
                style,
            );
        }
        for &(x, end, column) in &placed {
            let mut cell = column.cell(p, host_memory_total);
            if column == Column::Command {
                cell = cell.chars().skip(app.view.command_offset).collect();
            }
            // Right-aligned as `format!("{cell:>width$}")` would: padded by characters.
            let pad = if column.right_aligned() {
                (end - x).saturating_sub(u16::try_from(cell.chars().count()).unwrap_or(u16::MAX))
            } else {
                0
            };
            paint::text(buffer, x + pad, y, end, &cell, Style::default());
        }
    }
    if rows.is_empty() {
        let message = if app.view.filter.is_empty() {
            "No GPU processes."
        } else {
            "No process matches the filter."
        };
        // A GPU whose list the driver refused is not idle: say why it shows nothing.
        let mut lines: Vec<Line> = snapshot
            .unlisted()
            .map(|(index, reason)| Line::from(format!("GPU {index}: {}", sanitize(reason))))
            .collect();
        lines.push(Line::from(message));
        let below = Rect {
            y: table_area.y + 1,
            height: (lines.len() as u16).min(table_area.height.saturating_sub(1)),
            ..table_area
        };
        paint::lines(buffer, below, &lines, theme.dim());
    }
    let footer_text = footer_line(app, rows.len(), theme, footer.width);
    paint::lines(buffer, footer, &[footer_text], Style::default());
    TableGeometry {
        first_row_y: table_area.y + 1,
        rows: visible as u16,
        header_y: table_area.y,
        columns,
        text: None,
    }
}

/// Firing alerts, most severe first: at most three lines (one on short terminals).
fn alert_panel(app: &App, theme: &Theme, height: u16) -> Vec<Line<'static>> {
    let firing: Vec<&Active> = app
        .data
        .alert_marks
        .active
        .iter()
        .filter(|a| a.phase == Phase::Firing)
        .collect();
    let room = if height >= 30 { 3 } else { 1 };
    let mut lines: Vec<Line> = firing
        .iter()
        .take(room)
        .map(|a| {
            Line::from(vec![
                Span::styled(
                    format!("{:<8}", a.severity.label().to_uppercase()),
                    theme.severity(a.severity),
                ),
                Span::raw(format!(" {}", sanitize(&a.summary))),
            ])
        })
        .collect();
    if firing.len() > room
        && let Some(last) = lines.last_mut()
    {
        last.spans.insert(
            0,
            Span::styled(format!("+{} more (A) ", firing.len() - room), theme.dim()),
        );
    }
    lines
}

/// The bottom line, `width` columns wide: the sort prompt after `o`; else the filter while
/// one is set, then the latest message (a kill's result, a refusal), then as many key hints
/// as fit. A message is never hidden by the filter.
fn footer_line(app: &App, shown: usize, theme: &Theme, width: u16) -> Line<'static> {
    use crate::app::state::Origin;
    if let Some(reverse) = app.view.sort_prefix {
        return Line::from(Span::styled(
            crate::app::keymap::sort_prompt(reverse, usize::from(width)),
            theme.header(),
        ));
    }
    let mut spans = Vec::new();
    if app.view.filter_editing || !app.view.filter.is_empty() {
        spans.extend([
            Span::styled("Filter: ", theme.header()),
            Span::raw(sanitize(&app.view.filter)),
            Span::styled(
                if app.view.filter_editing { "_" } else { "" },
                Style::new().add_modifier(Modifier::SLOW_BLINK),
            ),
            Span::raw(if app.view.status.is_some() {
                format!(" ({shown} shown)")
            } else {
                format!("  ({shown} shown; Esc clears)")
            }),
        ]);
        if let Some(error) = &app.view.filter_error {
            spans.push(Span::styled(format!("  {}", sanitize(error)), theme.error()));
        }
    }
    if let Some(status) = &app.view.status {
        if !spans.is_empty() {
            spans.push(Span::styled("  | ", theme.dim()));
        }
        spans.push(Span::styled(sanitize(status), theme.header()));
    }
    if app.view.filter_editing {
        return Line::from(spans);
    }
    let used: usize = spans.iter().map(|s| s.content.chars().count()).sum();
    let note = match app.data.origin {
        _ if app.view.readonly => "(read-only)",
        Origin::Live => "",
        Origin::Demo => "(demo: no signals)",
        Origin::Recording => "(replay: no signals)",
        Origin::Remote => "(remote: no signals)",
    };
    let signals = note.is_empty();
    let gap = if used == 0 { 0 } else { 3 };
    let room = usize::from(width).saturating_sub(used + gap);
    let room_for_hints = if signals {
        room
    } else {
        room.saturating_sub(note.len() + 2)
    };
    let hints = crate::app::keymap::footer_hints(signals, room_for_hints);
    if hints.len() <= room_for_hints {
        if used > 0 {
            spans.push(Span::raw(" ".repeat(gap)));
        }
        spans.push(Span::styled(hints, theme.dim()));
        if !signals {
            spans.push(Span::styled(format!("  {note}"), theme.dim()));
        }
    }
    Line::from(spans)
}

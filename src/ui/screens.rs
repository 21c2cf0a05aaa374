//! The screens besides the main one, and the signal confirmation dialog.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::symbols;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Widget, Wrap};

use super::chart::TimeChart;
use super::theme::Theme;
use super::{na, percent_of};
use crate::app::fleet as fleet_cells;
use crate::app::keymap::{self, Binding};
use crate::app::state::{App, ProcessKey};
use crate::app::view::{CHART_SPANS, Confirmation};
use gputop_core::format::seconds_text;
use gputop_core::format::{human_bytes, human_duration, sanitize};
use gputop_core::model::fleet::{NodeState, Summary};
use gputop_core::model::{GpuProcess, PidMapping};
use gputop_core::monitor::history::{DeviceMetric, ProcessMetric};

fn block<'a>(title: &str, theme: &Theme) -> Block<'a> {
    let block = Block::default()
        .borders(Borders::ALL)
        .title(Span::styled(format!(" {title} "), theme.title()));
    if theme.ascii {
        block.border_set(symbols::border::Set {
            top_left: "+",
            top_right: "+",
            bottom_left: "+",
            bottom_right: "+",
            vertical_left: "|",
            vertical_right: "|",
            horizontal_top: "-",
            horizontal_bottom: "-",
        })
    } else {
        block
    }
}

/// How a text screen landed: the rows it shows and the last first line scrolling reaches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TextGeometry {
    pub page: usize,
    pub last_top: usize,
}

/// A scrolling text screen: `lines` in a block titled `title`, from the view's first line,
/// never scrolled past the end. Wrapped to the width with `wrap`; otherwise each line is
/// shifted left by the view's sideways offset and a line cut at either edge shows `…` there.
fn text_screen(
    buffer: &mut Buffer,
    area: Rect,
    title: &str,
    lines: Vec<Line<'static>>,
    wrap: bool,
    app: &App,
    theme: &Theme,
) -> TextGeometry {
    let outer = block(title, theme);
    let inner = outer.inner(area);
    Widget::render(outer, area, buffer);
    let lines = if wrap {
        lines
            .into_iter()
            .flat_map(|l| wrapped(l, usize::from(inner.width)))
            .collect()
    } else {
        lines
    };
    let page = usize::from(inner.height);
    let last_top = lines.len().saturating_sub(page);
    let top = app.view.text_scroll.min(last_top);
    let offset = if wrap { 0 } else { app.view.text_offset };
    let ellipsis = if theme.ascii { "~" } else { "…" };
    for (y, line) in (inner.top()..inner.bottom()).zip(&lines[top..]) {
        let row = Rect {
            y,
            height: 1,
            ..inner
        };
        let length: usize = line.spans.iter().map(|s| s.content.chars().count()).sum();
        let shifted = shifted(line, offset);
        super::paint::line(buffer, row, &shifted);
        if offset > 0 && length > 0 {
            buffer.set_string(row.x, y, ellipsis, line.style);
        }
        if length > offset + usize::from(row.width) {
            super::paint::mark_cut(buffer, row, theme.ascii);
        }
    }
    TextGeometry { page, last_top }
}

/// `line` without its first `offset` characters.
fn shifted(line: &Line<'static>, offset: usize) -> Line<'static> {
    if offset == 0 {
        return line.clone();
    }
    let mut skip = offset;
    let spans = line.spans.iter().filter_map(|span| {
        let count = span.content.chars().count();
        if skip >= count {
            skip -= count;
            return None;
        }
        let rest: String = span.content.chars().skip(skip).collect();
        skip = 0;
        Some(Span::styled(rest, span.style))
    });
    Line::from(spans.collect::<Vec<_>>()).style(line.style)
}

/// `line` as rows of at most `width` characters, broken at spaces where it can be;
/// continuation rows are indented to where the line's text starts after its first column
/// (the help's key column). A line of several spans takes its first span's style.
fn wrapped(line: Line<'static>, width: usize) -> Vec<Line<'static>> {
    let text: String = line.spans.iter().map(|s| s.content.as_ref()).collect();
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= width || width < 8 {
        return vec![line];
    }
    let style = line
        .spans
        .first()
        .map_or(line.style, |s| line.style.patch(s.style));
    let lead = chars.iter().take_while(|c| **c == ' ').count();
    let indent = text[lead..]
        .find("  ")
        .map(|i| lead + i + 2 + text[lead + i..].chars().skip(2).take_while(|c| *c == ' ').count())
        .filter(|i| *i < width / 2)
        .unwrap_or(lead + 2);
    let mut rows = Vec::new();
    let mut start = 0;
    while start < chars.len() {
        let room = if rows.is_empty() { width } else { width - indent };
        let mut end = (start + room).min(chars.len());
        if end < chars.len()
            && let Some(space) = chars[start..end]
                .iter()
                .rposition(|c| *c == ' ')
                .filter(|i| *i > 0)
        {
            end = start + space;
        }
        let piece: String = chars[start..end].iter().collect();
        let prefix = if rows.is_empty() {
            String::new()
        } else {
            " ".repeat(indent)
        };
        rows.push(Line::from(Span::styled(
            format!("{prefix}{}", piece.trim_end()),
            style,
        )));
        start = end;
        while start < chars.len() && chars[start] == ' ' {
            start += 1;
        }
    }
    rows
}

/// Help, generated from the key tables the event loop decodes with; it scrolls.
pub fn help(buffer: &mut Buffer, area: Rect, app: &App, theme: &Theme) -> TextGeometry {
    let mut sections: Vec<(&str, &[Binding])> = Vec::new();
    if app.data.replay.is_some() {
        sections.push(("Replay", keymap::REPLAY));
    }
    if app.data.fleet.is_some() {
        sections.push(("Fleet view: the cluster", keymap::CLUSTER));
    }
    sections.extend([
        ("Main screen and tree view", keymap::MAIN),
        ("Signal confirmation", keymap::DIALOG),
        ("Process details", keymap::DETAILS),
        ("Environment", keymap::ENVIRONMENT),
        ("GPU history charts", keymap::CHARTS),
        ("Alerts", keymap::ALERTS),
        ("Users and containers", keymap::USERS),
        (
            "Text screens: help, alerts, users, environment (in help any other key goes back)",
            keymap::SCROLLING,
        ),
    ]);
    // Signal keys are listed where they are off too, so that the demo teaches them.
    let signals_off = if app.view.readonly {
        Some("Read-only: signals are disabled")
    } else {
        app.data.origin.no_signals()
    };
    let labels = sections.iter().flat_map(|(_, table)| table.iter());
    let width = labels.map(|b| b.label().len()).max().unwrap_or(0);
    let mut lines = Vec::new();
    for (title, table) in &sections {
        lines.push(Line::from(Span::styled(title.to_string(), theme.header())));
        for binding in table.iter() {
            let off = if binding.signal && signals_off.is_some() {
                " (off here)"
            } else {
                ""
            };
            lines.push(Line::from(format!(
                "  {:<width$}  {}{off}",
                binding.label(),
                binding.help
            )));
        }
        lines.push(Line::from(""));
    }
    lines.push(Line::from(
        "Mouse: click selects a process, the wheel moves the selection, a click on a header sorts.",
    ));
    if let Some(why) = signals_off {
        lines.push(Line::from(format!("{why}.")));
    }
    lines.push(Line::from(Span::styled(
        "Press any other key to go back.",
        theme.dim(),
    )));
    text_screen(buffer, area, "gputop help", lines, true, app, theme)
}

/// Identity, figures and history of the selected process.
/// A process's use of its GPU in one line: NVIDIA's SM, memory bandwidth, encoder and
/// decoder; AMD's and Intel's engine classes, and the system memory the GPU maps for it.
fn gpu_use(p: &GpuProcess) -> String {
    if p.engines_percent.is_empty() {
        return format!(
            "GPU memory {}  %SM {}  %GMBW {}  %ENC {}  %DEC {}",
            na(&p.gpu_memory_bytes, |b| human_bytes(*b)),
            na(&p.sm_percent, u32::to_string),
            na(&p.memory_bandwidth_percent, u32::to_string),
            na(&p.encoder_percent, u32::to_string),
            na(&p.decoder_percent, u32::to_string),
        );
    }
    let engines: Vec<String> = p
        .engines_percent
        .iter()
        .map(|(engine, percent)| format!("{} {percent:.0}%", engine.label()))
        .collect();
    format!(
        "GPU memory {} (system {})  %GPU {}  engines: {}",
        na(&p.gpu_memory_bytes, |b| human_bytes(*b)),
        na(&p.gpu_system_memory_bytes, |b| human_bytes(*b)),
        na(&p.sm_percent, u32::to_string),
        engines.join(", ")
    )
}

pub fn details(buffer: &mut Buffer, area: Rect, app: &App, theme: &Theme) {
    let outer = block("process details (Enter or Esc: back)", theme);
    let inner = outer.inner(area);
    Widget::render(outer, area, buffer);
    let Some(p) = app.selected_process() else {
        Widget::render(Paragraph::new("The process has ended."), inner, buffer);
        return;
    };
    let snapshot = app.data.snapshot.as_ref();
    let host_total = snapshot
        .and_then(|s| s.host.memory_total_bytes.get())
        .unwrap_or(0);
    let h = &p.host;
    let facts = vec![
        Line::from(format!(
            "PID {}  user {}  uid {}  parent {}  started {}",
            p.pid,
            na(&h.user, |u| sanitize(u)),
            na(&h.uid, u32::to_string),
            na(&h.parent_pid, u32::to_string),
            na(&h.running_seconds, |s| format!("{} ago", human_duration(*s))),
        )),
        Line::from(format!(
            "GPU {} ({})  type {}",
            p.gpu_index,
            na(&p.gpu_uuid, |u| sanitize(u)),
            p.kind.label()
        )),
        Line::from(format!("command: {}", na(&h.command, |c| sanitize(c)))),
        Line::from(sanitize(&where_it_runs(p))),
        Line::from(gpu_use(p)),
        Line::from(format!(
            "%CPU {}  host memory {} ({:.1}%)",
            na(&h.cpu_percent, |c| format!("{c:.1}")),
            na(&h.memory_bytes, |b| human_bytes(*b)),
            h.memory_bytes.get().map_or(0.0, |b| percent_of(b, host_total)),
        )),
    ];
    let [top, charts] = Layout::vertical([Constraint::Length(7), Constraint::Min(3)]).areas(inner);
    Widget::render(Paragraph::new(facts).wrap(Wrap { trim: false }), top, buffer);
    let key = ProcessKey::of(p);
    let device_mib = snapshot
        .and_then(|s| s.devices.iter().find(|d| d.index == p.gpu_index))
        .and_then(|d| d.memory_total_bytes.get())
        .map_or(0.0, |total| (total >> 20) as f64);
    let series = [
        (
            ProcessMetric::GpuMemoryMib,
            "GPU memory",
            na(&p.gpu_memory_bytes, |b| human_bytes(*b)),
            " MiB",
            device_mib,
        ),
        (
            ProcessMetric::Sm,
            "%SM",
            na(&p.sm_percent, |v| format!("{v}%")),
            "%",
            100.0,
        ),
        (
            ProcessMetric::Cpu,
            "%CPU",
            na(&h.cpu_percent, |v| format!("{v:.1}%")),
            "%",
            100.0,
        ),
    ];
    let rows = Layout::vertical([Constraint::Ratio(1, 3); 3]).split(charts);
    let to = app.data.monitor.history().now().unwrap_or(0.0);
    let from = to - CHART_SPANS[0];
    for ((metric, title, now, unit, top), row) in series.into_iter().zip(rows.iter()) {
        // Memory in GiB: MiB figures of a large GPU do not fit the axis.
        let (unit, top, divisor) = if unit == " MiB" {
            ("GiB", top / 1024.0, 1024.0)
        } else {
            (unit, top, 1.0)
        };
        let points: Vec<(f64, Option<f64>)> = app
            .data
            .monitor
            .history()
            .process(&key, metric)
            .map(|s| s.points_since(from))
            .unwrap_or_default()
            .into_iter()
            .map(|(t, v)| (t, v.map(|v| v / divisor)))
            .collect();
        let outer = block(&format!("{title} now {now} (last 10 min)"), theme);
        let inner = outer.inner(*row);
        Widget::render(outer, *row, buffer);
        Widget::render(chart(&points, from, to, top, unit, theme), inner, buffer);
    }
}

/// A chart in the theme's looks.
fn chart<'a>(
    points: &'a [(f64, Option<f64>)],
    from: f64,
    to: f64,
    top: f64,
    unit: &'a str,
    theme: &Theme,
) -> TimeChart<'a> {
    TimeChart {
        points,
        from,
        to,
        min_top: top,
        unit,
        ascii: theme.ascii,
        style: theme.ok(),
        axis_style: theme.dim(),
    }
}

/// History charts of one GPU: utilization, memory, temperature, power.
pub fn charts(buffer: &mut Buffer, area: Rect, app: &App, theme: &Theme) {
    let span = CHART_SPANS[app.view.chart_span % CHART_SPANS.len()];
    let index = app.view.chart_device;
    let device = app
        .data
        .snapshot
        .as_ref()
        .and_then(|s| s.devices.iter().find(|d| d.index == index));
    let name = device.map_or_else(String::new, |d| na(&d.name, |n| sanitize(n)));
    let title = format!(
        "GPU {index} {name}: last {} (Up/Down: GPU, w: span, g or Esc: back)",
        seconds_text(span)
    );
    let outer = block(&title, theme);
    let inner = outer.inner(area);
    Widget::render(outer, area, buffer);
    let to = app.data.monitor.history().now().unwrap_or(0.0);
    let from = to - span;
    let power_limit = device.and_then(|d| d.power_limit_watts.get()).unwrap_or(0.0);
    let temperature_top = device
        .and_then(|d| d.temperature_slowdown_celsius.get())
        .map_or(90.0, f64::from);
    let panels = [
        (
            DeviceMetric::Utilization,
            "utilization (interval mean)",
            "%",
            100.0,
        ),
        (DeviceMetric::MemoryPercent, "memory used", "%", 100.0),
        (DeviceMetric::Temperature, "temperature", "C", temperature_top),
        (
            DeviceMetric::Power,
            "power draw (interval mean)",
            "W",
            power_limit,
        ),
    ];
    let columns = if inner.width >= 120 { 2 } else { 1 };
    let rows_needed = panels.len().div_ceil(columns) as u32;
    let rows = Layout::vertical(vec![Constraint::Ratio(1, rows_needed); rows_needed as usize]).split(inner);
    for (i, (metric, label, unit, top)) in panels.into_iter().enumerate() {
        let row = rows[i / columns];
        let cell = if columns == 2 {
            Layout::horizontal([Constraint::Ratio(1, 2); 2]).split(row)[i % 2]
        } else {
            row
        };
        let series = app.data.monitor.history().device(index, metric);
        let points = series.map(|s| s.points_since(from)).unwrap_or_default();
        let stats = series.and_then(|s| s.window(from, to)).map_or_else(
            || "no data".to_string(),
            |a| {
                format!(
                    "now {:.0}{unit}  mean {:.0}  min {:.0}  max {:.0}",
                    a.last, a.mean, a.min, a.max
                )
            },
        );
        let outer = block(&format!("{label}: {stats}"), theme);
        let area = outer.inner(cell);
        Widget::render(outer, cell, buffer);
        Widget::render(chart(&points, from, to, top, unit, theme), area, buffer);
    }
}

/// Active alerts, the log of transitions (newest first) and the rules in force.
pub fn alerts(buffer: &mut Buffer, area: Rect, app: &App, theme: &Theme) -> TextGeometry {
    let now = app.data.monitor.history().now().unwrap_or(0.0);
    let ago = |at: f64| format!("{} ago", human_duration((now - at).max(0.0) as u64));
    let mut lines = vec![Line::from(Span::styled("Active", theme.header()))];
    let active = &app.data.alert_marks.active;
    if active.is_empty() {
        lines.push(Line::from("  none"));
    }
    for alert in active {
        lines.push(Line::from(vec![
            Span::styled(
                format!("  {:<8}", alert.severity.label().to_uppercase()),
                theme.severity(alert.severity),
            ),
            Span::raw(format!(
                " {:<8} {:>10}  {}",
                alert.phase.label(),
                ago(alert.since),
                sanitize(&alert.summary)
            )),
        ]));
    }
    lines.push(Line::from(""));
    lines.push(Line::from(Span::styled("Log (newest first)", theme.header())));
    if app.data.monitor.alerts().log().is_empty() {
        lines.push(Line::from("  nothing yet"));
    }
    for t in app.data.monitor.alerts().log().iter().rev() {
        lines.push(Line::from(vec![
            Span::styled(
                format!("  {:<8}", t.severity.label().to_uppercase()),
                theme.severity(t.severity),
            ),
            Span::raw(format!(
                " {:>10}  {} -> {}  {}",
                ago(t.at),
                t.from.label(),
                t.to.label(),
                sanitize(&t.summary)
            )),
        ]));
    }
    lines.push(Line::from(""));
    lines.push(Line::from(Span::styled("Rules in force", theme.header())));
    for rule in app.data.monitor.alerts().rules() {
        lines.push(Line::from(format!(
            "  {:<8} {:<26} {} {}",
            rule.severity.label(),
            sanitize(&rule.name),
            rule.metric.scope(),
            rule.condition()
        )));
    }
    text_screen(
        buffer,
        area,
        "alerts (A or Esc: back; arrows scroll)",
        lines,
        false,
        app,
        theme,
    )
}

/// Who uses what: per user, then per container, the GPUs and memory they hold now, their
/// processes, and GPU-time, memory-time and energy since the view started.
pub fn users(buffer: &mut Buffer, area: Rect, app: &App, theme: &Theme) -> TextGeometry {
    let usage = &app.data.monitor.usage();
    // The columns every width shows take 75; ENERGY comes where there is room for it too.
    let energy = area.width >= 75 + 8 + 2;
    let header = |first: &str| {
        let mut text = format!(
            "  {first:<24} {:<8} {:>9} {:>5} {:>10} {:>12}",
            "GPUS", "GPU-MEM", "PROCS", "GPU-TIME", "MEM-TIME"
        );
        if energy {
            text.push_str(&format!(" {:>7}", "ENERGY"));
        }
        Line::from(Span::styled(text, theme.header()))
    };
    let row = |owner: &str, u: &gputop_core::monitor::usage::Usage| {
        let gpus: Vec<String> = u.gpus.iter().map(u32::to_string).collect();
        let gpus = if gpus.is_empty() {
            "-".to_string()
        } else {
            gpus.join(",")
        };
        let mut text = format!(
            "  {:<24} {:<8} {:>9} {:>5} {:>10} {:>12}",
            sanitize(owner).chars().take(24).collect::<String>(),
            gpus.chars().take(8).collect::<String>(),
            human_bytes(u.memory_bytes),
            u.processes,
            gputop_core::format::human_duration(u.gpu_seconds.max(0.0).round() as u64),
            format!(
                "{:.2} GiB·h",
                u.memory_byte_seconds / (1u64 << 30) as f64 / 3600.0
            ),
        );
        if energy {
            let joules = gputop_core::format::human_energy(u.energy_joules);
            text.push_str(&format!(" {joules:>7}"));
        }
        let line = Line::from(text);
        if u.processes == 0 {
            line.style(theme.dim())
        } else {
            line
        }
    };
    let mut lines = vec![Line::from(format!(
        "Watched for {} since the view started. GPU-TIME counts each GPU holding one of the processes; MEM-TIME is GPU memory held over time{}.",
        human_duration(usage.seconds as u64),
        if energy {
            "; ENERGY is the GPUs' energy, shared among their processes by SM use"
        } else {
            ""
        }
    ))];
    lines.push(Line::from(""));
    lines.push(header("USER"));
    if usage.users.is_empty() {
        lines.push(Line::from("  nobody yet"));
    }
    for (user, u) in gputop_core::monitor::usage::Accounting::ranked(&usage.users) {
        lines.push(row(user, u));
    }
    lines.push(Line::from(""));
    lines.push(header("CONTAINER (-: host)"));
    for (container, u) in gputop_core::monitor::usage::Accounting::ranked(&usage.containers) {
        lines.push(row(container, u));
    }
    text_screen(
        buffer,
        area,
        "users and containers (u or Esc: back)",
        lines,
        true,
        app,
        theme,
    )
}

/// The fleet view: the summary, every node (sorted and filtered), then the top processes,
/// the idle GPUs and the use per user and namespace, of the nodes shown.
pub fn cluster(buffer: &mut Buffer, area: Rect, app: &App, theme: &Theme) {
    let Some(fleet) = &app.data.fleet else {
        Widget::render(
            Paragraph::new("gputop: asking for the fleet... (q quits)"),
            area,
            buffer,
        );
        return;
    };
    let view = &app.view.fleet;
    let shown: Vec<&gputop_core::model::fleet::FleetNode> =
        view.rows.iter().map(|&i| &fleet.nodes[i]).collect();
    let summary = Summary::of(shown.iter().copied());
    let mut head = vec![Line::from(vec![
        Span::styled("gputop fleet ", theme.title()),
        Span::raw(format!("{}   ", sanitize(&fleet.feed))),
        Span::styled(
            fleet_cells::summary_line(&summary),
            if summary.alerts_firing > 0 || summary.nodes_down > 0 {
                theme.alert()
            } else {
                theme.dim()
            },
        ),
    ])];
    let mut notes: Vec<String> = Vec::new();
    if let Some(age) = fleet.stale_seconds {
        notes.push(format!("data {age} s old"));
    }
    notes.extend(fleet.problems.iter().take(2).map(|p| sanitize(p)));
    if fleet.problems.len() > 2 {
        notes.push(format!(
            "and {} more problems (gputop --once lists them)",
            fleet.problems.len() - 2
        ));
    }
    if !notes.is_empty() {
        head.push(Line::from(Span::styled(
            notes.join("; "),
            theme.severity(gputop_core::monitor::alerts::rules::Severity::Warning),
        )));
    }
    let arrow = if view.reversed { "reversed" } else { "" };
    let filter = if app.view.filter_editing {
        format!("   filter: {}_", sanitize(&view.filter))
    } else if view.filter.is_empty() {
        String::new()
    } else {
        format!("   filter: {}", sanitize(&view.filter))
    };
    head.push(Line::from(Span::styled(
        format!(
            "sorted by {} {arrow}{filter}   (. , sort  I invert  / filter  Enter open  h help  q quit; read-only)",
            view.sort.title()
        ),
        theme.dim(),
    )));
    let bottom_height = if area.height >= 24 {
        (area.height / 2).min(16)
    } else {
        0
    };
    let [top_area, bottom_area] =
        Layout::vertical([Constraint::Min(4), Constraint::Length(bottom_height)]).areas(area);
    let [head_area, nodes_area] =
        Layout::vertical([Constraint::Length(head.len() as u16), Constraint::Min(2)]).areas(top_area);
    Widget::render(Paragraph::new(head), head_area, buffer);

    // The nodes: every shown row sets the columns' widths, the window follows the selection.
    let mut rows = vec![
        fleet_cells::NODE_HEADINGS
            .iter()
            .map(|h| h.to_string())
            .collect::<Vec<_>>(),
    ];
    rows.extend(shown.iter().map(|n| fleet_cells::node_cells(n)));
    let text = gputop_core::format::table(&rows, &fleet_cells::NODE_FIGURES);
    let mut lines = text.lines();
    let width = usize::from(nodes_area.width);
    let mut out = vec![Line::from(Span::styled(
        cut(lines.next().unwrap_or(""), width),
        theme.header(),
    ))];
    let window = usize::from(nodes_area.height).saturating_sub(1).max(1);
    let first = (view.selected + 1).saturating_sub(window);
    for (i, line) in lines.enumerate().skip(first).take(window) {
        let node = shown[i];
        let mut style = match (&node.state, node.stale_seconds) {
            (NodeState::Waiting, _) => theme.dim(),
            (NodeState::Up, None) => theme.ok(),
            (NodeState::Up, Some(_)) => {
                theme.severity(gputop_core::monitor::alerts::rules::Severity::Warning)
            }
            (NodeState::Down { .. }, _) => theme.error(),
        };
        if i == view.selected {
            style = style.patch(theme.selected());
        }
        out.push(Line::from(Span::styled(cut(line, width), style)));
    }
    if shown.is_empty() {
        out.push(Line::from(Span::styled(
            if fleet.nodes.is_empty() {
                "no nodes yet"
            } else {
                "no node matches the filter"
            },
            theme.dim(),
        )));
    }
    Widget::render(Paragraph::new(out), nodes_area, buffer);
    if bottom_height == 0 {
        return;
    }

    // Below: the top processes on the left; idle GPUs, users and namespaces on the right.
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(bottom_area);
    let on_shown = |instance: &str| shown.iter().any(|n| n.instance == instance);
    let user = view.user();
    let processes: Vec<Vec<String>> = fleet
        .top_processes
        .iter()
        .filter(|p| on_shown(&p.instance) && user.is_none_or(|u| p.user.as_deref() == Some(u)))
        .map(fleet_cells::process_cells)
        .collect();
    let mut left_lines = section(
        "TOP PROCESSES by GPU memory",
        &fleet_cells::PROCESS_HEADINGS,
        processes,
        &fleet_cells::PROCESS_FIGURES,
        left.width,
        theme,
    );
    left_lines.truncate(usize::from(left.height));
    Widget::render(Paragraph::new(left_lines), left, buffer);
    let idle: Vec<Vec<String>> = fleet
        .idle_gpus
        .iter()
        .filter(|g| on_shown(&g.instance))
        .map(|g| fleet_cells::idle_cells(g, fleet.idle_lookback_seconds))
        .collect();
    let share_rows = |shares: &[gputop_core::model::fleet::Share]| -> Vec<Vec<String>> {
        shares.iter().map(fleet_cells::share_cells).collect()
    };
    let third = usize::from(right.height) / 3;
    let mut right_lines = Vec::new();
    let idle_title = format!("IDLE GPUS ({}), longest first", summary.gpus_idle);
    for (title, first_heading, rows, height) in [
        (idle_title.as_str(), None, idle, third.max(2)),
        (
            "USERS (all nodes)",
            Some("USER"),
            share_rows(&fleet.users),
            third.max(2),
        ),
        (
            "NAMESPACES (all nodes)",
            Some("NAMESPACE"),
            share_rows(&fleet.namespaces),
            third.max(2),
        ),
    ] {
        let mut lines = match first_heading {
            None => section(
                title,
                &fleet_cells::IDLE_HEADINGS,
                rows,
                &fleet_cells::IDLE_FIGURES,
                right.width,
                theme,
            ),
            Some(first) => {
                let mut headings = vec![first];
                headings.extend(fleet_cells::SHARE_HEADINGS);
                section(
                    title,
                    &headings,
                    rows,
                    &fleet_cells::SHARE_FIGURES,
                    right.width,
                    theme,
                )
            }
        };
        lines.truncate(height);
        right_lines.extend(lines);
    }
    Widget::render(Paragraph::new(right_lines), right, buffer);
}

/// A titled table of cells, each line cut to `width`.
fn section<'a>(
    title: &str,
    headings: &[&str],
    rows: Vec<Vec<String>>,
    right: &[bool],
    width: u16,
    theme: &Theme,
) -> Vec<Line<'a>> {
    let width = usize::from(width.saturating_sub(1));
    let mut out = vec![Line::from(Span::styled(cut(title, width), theme.title()))];
    if rows.is_empty() {
        out.push(Line::from(Span::styled("  none", theme.dim())));
        return out;
    }
    let mut all = vec![headings.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    all.extend(rows);
    for (i, line) in gputop_core::format::table(&all, right).lines().enumerate() {
        let style = if i == 0 {
            theme.header()
        } else {
            ratatui::style::Style::default()
        };
        out.push(Line::from(Span::styled(cut(line, width), style)));
    }
    out
}

fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_string()
    } else {
        let mut out: String = text.chars().take(width.saturating_sub(1)).collect();
        out.push('~');
        out
    }
}

/// The environment of the selected process.
pub fn environment(buffer: &mut Buffer, area: Rect, app: &App, theme: &Theme) -> TextGeometry {
    let (title, lines): (String, Vec<Line>) = match &app.view.environment {
        None => ("environment".into(), vec![Line::from("Reading...")]),
        Some((pid, Ok(vars))) => (
            format!(
                "environment of PID {pid} ({} variables; e or Esc: back)",
                vars.len()
            ),
            vars.iter().map(|v| Line::from(sanitize(v))).collect(),
        ),
        Some((pid, Err(reason))) => (
            format!("environment of PID {pid}"),
            vec![Line::from(Span::styled(sanitize(reason), theme.error()))],
        ),
    };
    text_screen(buffer, area, &title, lines, false, app, theme)
}

/// GPU processes with their ancestors and children.
pub fn tree(buffer: &mut Buffer, area: Rect, app: &App, theme: &Theme) {
    let (branch, last, bar) = if theme.ascii {
        ("|- ", "`- ", "|  ")
    } else {
        ("├─ ", "└─ ", "│  ")
    };
    let rows = app.rows();
    let nodes = &app.view.tree;
    // The GPU figures in one column, after the widest branch and PID.
    let branch_width = |node: &crate::app::state::TreeLine| 3 * node.depth + node.pid.to_string().len();
    let left = nodes.iter().map(branch_width).max().unwrap_or(0);
    let lines: Vec<Line> = nodes
        .iter()
        .map(|node| {
            let indent = if node.depth == 0 {
                String::new()
            } else {
                let mut indent: String = node
                    .ancestors_last
                    .iter()
                    .map(|last| if *last { "   " } else { bar })
                    .collect();
                indent.push_str(if node.last_child { last } else { branch });
                indent
            };
            let gpu = node
                .gpu
                .and_then(|key| rows.iter().find(|p| ProcessKey::of(p) == key));
            let pad = " ".repeat(left - branch_width(node) + 2);
            let text = match gpu {
                Some(p) => format!(
                    "{indent}{}{pad}GPU {:>2} {:>9} {:<8}  {}",
                    node.pid,
                    p.gpu_index,
                    na(&p.gpu_memory_bytes, |b| human_bytes(*b)),
                    na(&p.host.user, |u| sanitize(u)),
                    na(&p.host.command, |c| sanitize(c)),
                ),
                None => format!("{indent}{} {}", node.pid, sanitize(&node.name)),
            };
            let style = if node.gpu.is_some() && node.gpu == app.view.selected {
                theme.selected()
            } else if node.gpu.is_some() {
                theme.header()
            } else {
                theme.dim()
            };
            Line::from(Span::styled(text, style))
        })
        .collect();
    let lines = if lines.is_empty() {
        vec![Line::from("No GPU processes.")]
    } else {
        lines
    };
    Widget::render(
        Paragraph::new(lines).block(block("process tree: GPU processes in bold (t: back)", theme)),
        area,
        buffer,
    );
}

/// The signal confirmation, naming every target.
pub fn confirmation(buffer: &mut Buffer, area: Rect, confirmation: &Confirmation, theme: &Theme) {
    let width = area.width.saturating_sub(4).min(100);
    let height = (confirmation.targets.len() as u16 + 5).min(area.height.saturating_sub(2));
    let rect = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height.saturating_sub(height)) / 2,
        width,
        height,
    };
    let mut lines = vec![Line::from(format!(
        "Send {} to {} process{}?",
        confirmation.signal.name(),
        confirmation.targets.len(),
        if confirmation.targets.len() == 1 { "" } else { "es" }
    ))];
    for t in &confirmation.targets {
        lines.push(Line::from(format!(
            "  PID {:>8}  {:<10}  {}",
            t.pid,
            sanitize(&t.user),
            sanitize(&t.command)
        )));
    }
    lines.push(Line::from(""));
    lines.push(Line::from(Span::styled(
        "Enter: send    Esc: cancel",
        theme.header(),
    )));
    Widget::render(Clear, rect, buffer);
    Widget::render(Paragraph::new(lines).block(block("confirm", theme)), rect, buffer);
}

/// The container and PID-namespace line of the details screen.
fn where_it_runs(p: &GpuProcess) -> String {
    let container = match &p.host.container {
        Some(c) => {
            let inner = p
                .host
                .namespace_pid
                .map(|pid| format!(", PID {pid} inside"))
                .unwrap_or_default();
            let pod = c
                .pod
                .as_ref()
                .map(|pod| format!(", pod UID {pod}"))
                .unwrap_or_default();
            format!("container {}{pod}{inner}", c.label())
        }
        None => "on the host (no container)".into(),
    };
    let host = &p.host;
    let reach = match (host.pid_mapping, host.local_pid, &host.unmapped_reason) {
        (PidMapping::Mapped, Some(local_pid), _) => {
            format!("; PID {local_pid} in gputop's namespace (NVML: {})", p.pid)
        }
        (PidMapping::Unmapped, _, Some(reason)) => format!("; signals disabled: {reason}"),
        _ => String::new(),
    };
    format!("{container}{reach}")
}

//! The screens besides the main one, and the signal confirmation dialog.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::symbols;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};

use super::chart::TimeChart;
use super::theme::Theme;
use super::{na, percent_of};
use crate::alerts::rules::format_seconds;
use crate::app::keys::{self, Binding};
use crate::app::state::{App, CHART_SPANS, Confirmation, ProcessKey};
use crate::history::{DeviceMetric, ProcessMetric};
use crate::report::{human_bytes, human_duration, sanitize};

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

/// Help, generated from the key tables the event loop decodes with.
pub fn help(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let mut lines = Vec::new();
    let mut section = |title: &str, table: &[Binding]| {
        lines.push(Line::from(Span::styled(title.to_string(), theme.header())));
        for binding in table.iter().filter(|b| !(app.readonly && b.signal)) {
            lines.push(Line::from(format!("  {:<14} {}", binding.label, binding.help)));
        }
        lines.push(Line::from(""));
    };
    if app.replay.is_some() {
        section("Replay", keys::REPLAY);
    }
    section("Main screen and tree view", keys::MAIN);
    section("Signal confirmation", keys::DIALOG);
    section("Process details", keys::DETAILS);
    section("Environment", keys::ENVIRONMENT);
    section("GPU history charts", keys::CHARTS);
    section("Alerts", keys::ALERTS);
    lines.push(Line::from(
        "Mouse: click selects a process, the wheel moves the selection, a click on a header sorts.",
    ));
    if app.readonly {
        lines.push(Line::from("Read-only: signals are disabled."));
    }
    lines.push(Line::from(Span::styled("Press any key to go back.", theme.dim())));
    frame.render_widget(
        Paragraph::new(lines)
            .block(block("gputop help", theme))
            .wrap(Wrap { trim: false }),
        area,
    );
}

/// Identity, figures and history of the selected process.
pub fn details(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let outer = block("process details (Enter or Esc: back)", theme);
    let inner = outer.inner(area);
    frame.render_widget(outer, area);
    let Some(p) = app.selected_process() else {
        frame.render_widget(Paragraph::new("The process has ended."), inner);
        return;
    };
    let snapshot = app.snapshot.as_ref();
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
        Line::from(format!(
            "GPU memory {}  %SM {}  %GMBW {}  %ENC {}  %DEC {}",
            na(&p.gpu_memory_bytes, |b| human_bytes(*b)),
            na(&p.sm_percent, u32::to_string),
            na(&p.memory_bandwidth_percent, u32::to_string),
            na(&p.encoder_percent, u32::to_string),
            na(&p.decoder_percent, u32::to_string),
        )),
        Line::from(format!(
            "%CPU {}  host memory {} ({:.1}%)",
            na(&h.cpu_percent, |c| format!("{c:.1}")),
            na(&h.memory_bytes, |b| human_bytes(*b)),
            h.memory_bytes.get().map_or(0.0, |b| percent_of(b, host_total)),
        )),
    ];
    let [top, charts] = Layout::vertical([Constraint::Length(6), Constraint::Min(3)]).areas(inner);
    frame.render_widget(Paragraph::new(facts).wrap(Wrap { trim: false }), top);
    let key = ProcessKey::of(p);
    let device_mib = snapshot
        .and_then(|s| s.devices.iter().find(|d| d.index == p.gpu_index))
        .and_then(|d| d.memory.get())
        .map_or(0.0, |m| (m.total >> 20) as f64);
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
    let to = app.history.now().unwrap_or(0.0);
    let from = to - CHART_SPANS[0];
    for ((metric, title, now, unit, top), row) in series.into_iter().zip(rows.iter()) {
        // Memory in GiB: MiB figures of a large GPU do not fit the axis.
        let (unit, top, divisor) = if unit == " MiB" {
            ("GiB", top / 1024.0, 1024.0)
        } else {
            (unit, top, 1.0)
        };
        let points: Vec<(f64, Option<f64>)> = app
            .history
            .process(&key, metric)
            .map(|s| s.points_since(from))
            .unwrap_or_default()
            .into_iter()
            .map(|(t, v)| (t, v.map(|v| v / divisor)))
            .collect();
        let outer = block(&format!("{title} now {now} (last 10 min)"), theme);
        let inner = outer.inner(*row);
        frame.render_widget(outer, *row);
        frame.render_widget(chart(&points, from, to, top, unit, theme), inner);
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
pub fn charts(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let span = CHART_SPANS[app.chart_span % CHART_SPANS.len()];
    let index = app.chart_device;
    let device = app
        .snapshot
        .as_ref()
        .and_then(|s| s.devices.iter().find(|d| d.index == index));
    let name = device.map_or_else(String::new, |d| na(&d.name, |n| sanitize(n)));
    let title = format!(
        "GPU {index} {name}: last {} (Up/Down: GPU, w: span, g or Esc: back)",
        format_seconds(span)
    );
    let outer = block(&title, theme);
    let inner = outer.inner(area);
    frame.render_widget(outer, area);
    let to = app.history.now().unwrap_or(0.0);
    let from = to - span;
    let power_limit = device
        .and_then(|d| d.power_limit_mw.get())
        .map_or(0.0, |mw| f64::from(mw) / 1000.0);
    let temperature_top = device
        .and_then(|d| d.temperature_slowdown.get())
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
        let series = app.history.device(index, metric);
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
        frame.render_widget(outer, cell);
        frame.render_widget(chart(&points, from, to, top, unit, theme), area);
    }
}

/// Active alerts, the log of transitions (newest first) and the rules in force.
pub fn alerts(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let now = app.history.now().unwrap_or(0.0);
    let ago = |at: f64| format!("{} ago", human_duration((now - at).max(0.0) as u64));
    let mut lines = vec![Line::from(Span::styled("Active", theme.header()))];
    let active = app.alerts.active();
    if active.is_empty() {
        lines.push(Line::from("  none"));
    }
    for alert in &active {
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
    if app.alerts.log().is_empty() {
        lines.push(Line::from("  nothing yet"));
    }
    for t in app.alerts.log().iter().rev() {
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
    for rule in app.alerts.rules() {
        lines.push(Line::from(format!(
            "  {:<8} {:<26} {} {}",
            rule.severity.label(),
            sanitize(&rule.name),
            rule.metric.scope(),
            rule.condition()
        )));
    }
    let scroll = app.text_scroll.min(lines.len().saturating_sub(1)) as u16;
    frame.render_widget(
        Paragraph::new(lines)
            .block(block("alerts (A or Esc: back)", theme))
            .scroll((scroll, 0)),
        area,
    );
}

/// The environment of the selected process.
pub fn environment(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let (title, lines): (String, Vec<Line>) = match &app.environment {
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
    let scroll = app.text_scroll.min(lines.len().saturating_sub(1)) as u16;
    frame.render_widget(
        Paragraph::new(lines)
            .block(block(&title, theme))
            .scroll((scroll, 0)),
        area,
    );
}

/// GPU processes with their ancestors and children.
pub fn tree(frame: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let (branch, last, bar) = if theme.ascii {
        ("|- ", "`- ", "|  ")
    } else {
        ("├─ ", "└─ ", "│  ")
    };
    let rows = app.rows();
    let lines: Vec<Line> = app
        .tree_lines()
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
            let text = match gpu {
                Some(p) => format!(
                    "{indent}{}  GPU {} {} {}  {}",
                    node.pid,
                    p.gpu_index,
                    na(&p.gpu_memory_bytes, |b| human_bytes(*b)),
                    na(&p.host.user, |u| sanitize(u)),
                    na(&p.host.command, |c| sanitize(c)),
                ),
                None => format!("{indent}{} {}", node.pid, sanitize(&node.name)),
            };
            let style = if node.gpu.is_some() && node.gpu == app.selected {
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
    frame.render_widget(
        Paragraph::new(lines).block(block("process tree: GPU processes in bold (t: back)", theme)),
        area,
    );
}

/// The signal confirmation, naming every target.
pub fn confirmation(frame: &mut Frame, area: Rect, confirmation: &Confirmation, theme: &Theme) {
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
    frame.render_widget(Clear, rect);
    frame.render_widget(Paragraph::new(lines).block(block("confirm", theme)), rect);
}

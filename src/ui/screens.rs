//! The screens besides the main one, and the signal confirmation dialog.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::symbols;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Sparkline, Wrap};

use super::theme::Theme;
use super::{na, percent_of};
use crate::app::keys::{self, Binding};
use crate::app::state::{App, Confirmation, ProcessKey};
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
    section("Main screen and tree view", keys::MAIN);
    section("Signal confirmation", keys::DIALOG);
    section("Process details", keys::DETAILS);
    section("Environment", keys::ENVIRONMENT);
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
    let history = app.history.get(&ProcessKey::of(p));
    let device_mib = snapshot
        .and_then(|s| s.devices.iter().find(|d| d.index == p.gpu_index))
        .and_then(|d| d.memory.get())
        .map_or(0, |m| m.total >> 20);
    let series: [(&str, Vec<u64>, String); 3] = [
        (
            "GPU memory",
            history
                .map(|h| {
                    h.gpu_memory
                        .iter()
                        .map(|v| (*v / (1u64 << 20) as f64) as u64)
                        .collect()
                })
                .unwrap_or_default(),
            na(&p.gpu_memory_bytes, |b| human_bytes(*b)),
        ),
        (
            "%SM",
            history
                .map(|h| h.sm.iter().map(|v| *v as u64).collect())
                .unwrap_or_default(),
            na(&p.sm_percent, |v| format!("{v}%")),
        ),
        (
            "%CPU",
            history
                .map(|h| h.cpu.iter().map(|v| *v as u64).collect())
                .unwrap_or_default(),
            na(&h.cpu_percent, |v| format!("{v:.1}%")),
        ),
    ];
    let rows = Layout::vertical([Constraint::Ratio(1, 3); 3]).split(charts);
    // Scales: GPU memory against the device's total, percentages against 100.
    let scales = [device_mib, 100, 100];
    for (((title, data, now), row), scale) in series.into_iter().zip(rows.iter()).zip(scales) {
        let width = row.width.saturating_sub(2) as usize;
        let start = data.len().saturating_sub(width);
        let points = data.len();
        let title = format!("{title} now {now} ({points} refreshes since gputop started)");
        let max = data.iter().copied().max().unwrap_or(0).max(scale).max(1);
        let mut sparkline = Sparkline::default()
            .block(block(&title, theme))
            .data(&data[start..])
            .max(max);
        if theme.ascii {
            sparkline = sparkline.bar_set(symbols::bar::Set {
                full: "#",
                seven_eighths: "#",
                three_quarters: "=",
                five_eighths: "=",
                half: "-",
                three_eighths: "-",
                one_quarter: ".",
                one_eighth: ".",
                empty: " ",
            });
        }
        frame.render_widget(sparkline, *row);
    }
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

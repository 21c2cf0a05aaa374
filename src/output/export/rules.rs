//! `gputop rules`: the alert rules in force, written as Prometheus alerting rules over the
//! metrics `gputop export` serves, so a fleet alerts in Prometheus as one machine does in
//! gputop: the same metrics, windows, `for`, hysteresis (a firing alert holds while the
//! value passes its clear level), severities and summaries.
//!
//! Prometheus has only the samples it scraped: a window shorter than four scrape intervals
//! is widened to four (and says so), and the coverage a rule asks for becomes a minimum
//! count of samples in its window.

use std::fmt::Write;

use gputop_core::format::{seconds_text, trim_number};
use gputop_core::model::catalogue;
use gputop_core::monitor::alerts::rules::{Function, Holders, Metric, Rule};
use gputop_core::monitor::history::{DeviceMetric, ProcessMetric};

/// The series and the scaling that turn a rule's metric into Prometheus terms:
/// `(selector, suffix)`, the value being `f(selector[window]) suffix`.
fn series(metric: Metric) -> Option<(&'static str, &'static str)> {
    Some(match metric {
        Metric::Device(DeviceMetric::Utilization) => (catalogue::UTILIZATION.name, " * 100"),
        Metric::Device(DeviceMetric::MemoryBandwidth) => (catalogue::MEMORY_UTILIZATION.name, " * 100"),
        // Matched on every label: both series carry the same ones (the scrape's job and
        // instance, the exporter's gpu, uuid and name), and the result keeps them all for
        // the `and` clauses after it. `on(...)` would keep only the labels it names.
        Metric::Device(DeviceMetric::MemoryPercent) => (
            catalogue::MEMORY_USED.name,
            " / gputop_gpu_memory_total_bytes * 100",
        ),
        Metric::Device(DeviceMetric::MemoryMib) => (catalogue::MEMORY_USED.name, " / 1048576"),
        Metric::Device(DeviceMetric::Temperature) => (catalogue::TEMPERATURE.name, ""),
        Metric::Device(DeviceMetric::Power) => (catalogue::POWER.name, ""),
        Metric::Device(DeviceMetric::CriticalXids) => ("gputop_gpu_critical_xid_errors_total", ""),
        Metric::Process(ProcessMetric::GpuMemoryMib) => (catalogue::PROCESS_GPU_MEMORY, " / 1048576"),
        Metric::Process(ProcessMetric::Sm) => (catalogue::PROCESS_SM_UTILIZATION, " * 100"),
        Metric::Process(ProcessMetric::Cpu) => (catalogue::PROCESS_CPU, " * 100"),
        Metric::Host(_) => return None,
    })
}

/// A duration as PromQL writes it (its syntax, not text for people: `5m`, `1h`, `90s`).
fn duration(seconds: f64) -> String {
    let s = seconds.round().max(1.0) as u64;
    if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// The PromQL value of `rule` over `window` seconds.
fn value(rule: &Rule, selector: &str, suffix: &str, window: f64) -> String {
    let w = duration(window);
    let tenth = duration(window / 10.0);
    let rest = duration(window - window / 10.0);
    match rule.function {
        Function::Mean => format!("avg_over_time({selector}[{w}]){suffix}"),
        Function::Min => format!("min_over_time({selector}[{w}]){suffix}"),
        Function::Max => format!("max_over_time({selector}[{w}]){suffix}"),
        Function::Last => format!("{selector}{suffix}"),
        // A counter (`_total`) falls to 0 when the exporter restarts: its growth is what
        // `increase` measures, resets included; a gauge's range is its highest minus lowest.
        Function::Range if selector.ends_with("_total") => format!("increase({selector}[{w}]){suffix}"),
        Function::Range => {
            format!("(max_over_time({selector}[{w}]) - min_over_time({selector}[{w}])){suffix}")
        }
        Function::Increase | Function::SteadyIncrease => format!(
            "(avg_over_time({selector}[{tenth}]) - avg_over_time({selector}[{tenth}] offset {rest})){suffix}"
        ),
    }
}

/// A YAML double-quoted scalar: `\` and `"` escaped, and every control, line- or
/// paragraph-separator, bidirectional or byte-order character as `\uXXXX`, so the string
/// stays on its line and is text, whatever it holds.
fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            // YAML also breaks lines at U+2028 and U+2029 and strips a byte-order mark.
            c if gputop_core::format::is_hidden_control(c)
                || matches!(c, '\u{2028}' | '\u{2029}' | '\u{FEFF}') =>
            {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Text from the configuration as a Go template (Prometheus's annotations) shows it: every
/// `{{` becomes an action that prints `{{`, so the text cannot open an action of its own.
fn literal_in_template(text: &str) -> String {
    text.replace("{{", "{{ \"{{\" }}")
}

/// The rules file `rules` (as [`prometheus_rules`] writes it) as a prometheus-operator
/// PrometheusRule in the namespace of `config/kubernetes/`: its `groups` become the spec's.
pub fn prometheus_rule_manifest(rules: &str) -> String {
    let mut out = String::from(
        "# Prometheus alerting rules generated by `gputop rules --kubernetes` from gputop's alert\n\
         # configuration, for the prometheus-operator. Regenerate after changing the thresholds.\n\
         apiVersion: monitoring.coreos.com/v1\n\
         kind: PrometheusRule\n\
         metadata:\n  name: gputop\n  namespace: gputop\n  labels:\n    app.kubernetes.io/name: gputop-exporter\n\
         spec:\n",
    );
    for line in rules.lines().filter(|l| !l.starts_with('#')) {
        if line.is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "  {line}");
        }
    }
    out
}

/// The rules file for Prometheus, given its scrape interval in seconds.
pub fn prometheus_rules(rules: &[Rule], scrape_interval: f64) -> String {
    let mut out = String::from(
        "# Prometheus alerting rules generated by `gputop rules` from gputop's alert configuration.\n\
         # Check: promtool check rules FILE. Metrics: `gputop export` (process rules need --processes).\n\
         groups:\n  - name: gputop\n    rules:\n",
    );
    for rule in rules {
        let Some((selector, suffix)) = series(rule.metric) else {
            let _ = writeln!(
                out,
                "      # {}: host metrics are not exported (node_exporter covers the host); left out.",
                rule.name
            );
            continue;
        };
        let window = rule.window.max(4.0 * scrape_interval);
        let op = rule.comparison.symbol();
        let v = value(rule, selector, suffix, window);
        let mut expr = format!("{v} {op} {}", trim_number(rule.threshold));
        if rule.clear != rule.threshold {
            // Hysteresis: once firing, the alert holds while the value passes the clear level.
            let _ = write!(
                expr,
                " or ({v} {op} {} and ignoring(alertname, alertstate, severity) ALERTS{{alertname=\"{}\", alertstate=\"firing\"}})",
                trim_number(rule.clear),
                rule.name
            );
            expr = format!("({expr})");
        }
        match rule.holders {
            Holders::Any => {}
            Holders::Some => expr.push_str(" and on(instance, gpu) (gputop_gpu_processes > 0)"),
            Holders::None => expr.push_str(" and on(instance, gpu) (gputop_gpu_processes == 0)"),
        }
        if rule.function == Function::SteadyIncrease {
            // Steady: the rate of change never negative across the window.
            let _ = write!(
                expr,
                " and min_over_time(deriv({selector}[{}])[{}:{}]) >= 0",
                duration(window / 5.0),
                duration(window),
                duration(window / 10.0)
            );
        }
        let needed = ((rule.min_coverage * window / scrape_interval).ceil() as u64).max(1);
        if rule.function != Function::Last {
            let _ = write!(
                expr,
                " and count_over_time({selector}[{}]) >= {needed}",
                duration(window)
            );
        }
        let subject = match rule.metric {
            Metric::Process(_) => {
                "{{ $labels.instance }} GPU {{ $labels.gpu }} PID {{ $labels.pid }} ({{ $labels.user }})"
            }
            _ => "{{ $labels.instance }} GPU {{ $labels.gpu }} ({{ $labels.name }})",
        };
        let summary = literal_in_template(
            &rule
                .summary
                .clone()
                .unwrap_or_else(|| rule.name.replace('_', " ")),
        );
        let widened = if window > rule.window {
            format!(
                " The window is {} here (gputop: {}), four scrape intervals.",
                seconds_text(window),
                seconds_text(rule.window)
            )
        } else {
            String::new()
        };
        let description = format!(
            "{subject}: {} is {{{{ $value | printf \"%.1f\" }}}}{}.{widened}",
            rule.condition(),
            rule.metric.unit()
        );
        let _ = write!(
            out,
            "      - alert: {}\n        expr: {}\n        for: {}\n        labels:\n          severity: {}\n        annotations:\n          summary: {}\n          description: {}\n",
            rule.name,
            quote(&expr),
            if rule.for_seconds > 0.0 {
                duration(rule.for_seconds)
            } else {
                "0s".to_string()
            },
            rule.severity.label(),
            quote(&summary),
            quote(&description),
        );
    }
    out
}

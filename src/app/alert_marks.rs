//! What the screen shows of the alerts, taken from the alert engine once per snapshot: the
//! header's counts, each GPU's and process's marks, and the active alerts for the alert panel
//! and the alerts screen. Drawing reads these and never asks the engine.

use std::collections::BTreeMap;

use gputop_core::monitor::alerts::rules::{Comparison, Metric, Severity};
use gputop_core::monitor::alerts::{Active, Engine, Subject};
use gputop_core::monitor::history::DeviceMetric;

/// The alerts as the screen marks them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AlertMarks {
    /// Firing alerts per severity, `[info, warning, critical]`.
    pub firing_counts: [usize; 3],
    /// Alerts whose condition holds, not yet for their `for` duration.
    pub pending: usize,
    /// Pending and firing alerts, the firing and the most severe first.
    pub active: Vec<Active>,
    /// The subjects with a firing alert.
    subjects: BTreeMap<Subject, Marks>,
}

/// How one GPU or process is marked: what its firing alerts are about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marks {
    /// The most severe of its firing alerts.
    pub severity: Severity,
    /// A rule about a reading above its threshold fires (a GPU's `!`).
    pub above: bool,
    /// A temperature rule fires (the temperature in red).
    pub temperature: bool,
    /// A critical-Xid rule fires (the header names the Xid).
    pub critical_xid: bool,
}

impl AlertMarks {
    /// The marks of the engine's state now.
    pub fn of(engine: &Engine) -> Self {
        let mut subjects: BTreeMap<Subject, Marks> = BTreeMap::new();
        for (rule, subject) in engine.firing() {
            let above = rule.comparison == Comparison::Above;
            let temperature = rule.metric == Metric::Device(DeviceMetric::Temperature);
            let critical_xid = rule.metric == Metric::Device(DeviceMetric::CriticalXids);
            subjects
                .entry(subject)
                .and_modify(|m| {
                    m.severity = m.severity.max(rule.severity);
                    m.above |= above;
                    m.temperature |= temperature;
                    m.critical_xid |= critical_xid;
                })
                .or_insert(Marks {
                    severity: rule.severity,
                    above,
                    temperature,
                    critical_xid,
                });
        }
        Self {
            firing_counts: engine.firing_counts(),
            pending: engine.pending_count(),
            active: engine.active(),
            subjects,
        }
    }

    /// The marks of `subject`; `None` without a firing alert.
    pub fn of_subject(&self, subject: &Subject) -> Option<&Marks> {
        self.subjects.get(subject)
    }
}

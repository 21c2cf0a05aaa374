//! The alert engine: pure. Each evaluation reads the history at its latest time and moves
//! every (rule, subject) pair through pending, firing and resolved, with "no data" when the
//! readings cover too little of a rule's window. It returns the transitions; the runtime
//! writes them to the log file and runs notifications ([`sink`]).

pub mod rules;
pub mod sink;

use std::collections::{BTreeMap, VecDeque};

use serde_json::{Value, json};

use crate::format::{sanitize, seconds_text};
use crate::model::wire::{WireAlert, WireAlertState, WireSeverity};
use crate::model::{ProcessKey, Snapshot};
use crate::monitor::history::{DeviceMetric, History};
use rules::{Function, Metric, Rule, Severity};

/// Transitions the in-memory log keeps for the alert log screen.
pub const LOG_LENGTH: usize = 1000;

/// What an alert is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Subject {
    /// A GPU, by index.
    Device(u32),
    /// A process on one GPU.
    Process(ProcessKey),
    /// The host (its CPU or memory).
    Host,
}

impl Subject {
    /// How messages name the subject: `GPU 0`, `PID 4242 on GPU 1`, `host`.
    pub fn label(&self) -> String {
        match self {
            Self::Device(index) => format!("GPU {index}"),
            Self::Process(key) => format!("PID {} on GPU {}", key.pid, key.gpu_index),
            Self::Host => "host".into(),
        }
    }
}

/// Where a (rule, subject) pair stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The condition does not hold.
    Inactive,
    /// The condition holds, for less than the rule's `for` duration.
    Pending,
    /// The condition has held for the rule's `for` duration.
    Firing,
    /// Too few readings in the window to judge.
    NoData,
    /// Firing until the latest judgement; inactive from the next.
    Resolved,
}

impl Phase {
    /// The phase as logs and the view write it: `pending`, `no data`, ...
    pub fn label(self) -> &'static str {
        match self {
            Self::Inactive => "inactive",
            Self::Pending => "pending",
            Self::Firing => "firing",
            Self::NoData => "no data",
            Self::Resolved => "resolved",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct State {
    phase: Phase,
    /// When the current phase began (seconds since the epoch).
    since: f64,
    value: Option<f64>,
    /// When its rule last found the subject (seconds since the epoch).
    checked: f64,
}

/// One change of state, as logged.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// When (seconds since the epoch).
    pub at: f64,
    /// The rule's name.
    pub rule: String,
    /// The rule's severity.
    pub severity: Severity,
    /// What it is about.
    pub subject: Subject,
    /// The phase before.
    pub from: Phase,
    /// The phase after.
    pub to: Phase,
    /// The value the rule judged, in its metric's unit, if there was one.
    pub value: Option<f64>,
    /// The rule's summary with the subject and value filled in.
    pub summary: String,
}

impl Transition {
    /// The log line's JSON object.
    pub fn to_json(&self) -> Value {
        json!({
            "time": self.at,
            "rule": sanitize(&self.rule),
            "severity": self.severity.label(),
            "subject": self.subject.label(),
            "from": self.from.label(),
            "state": self.to.label(),
            "value": self.value.map(|v| (v * 100.0).round() / 100.0),
            "summary": sanitize(&self.summary),
        })
    }
}

/// An alert that is pending or firing now.
#[derive(Debug, Clone, PartialEq)]
pub struct Active {
    /// The rule's name.
    pub rule: String,
    /// The rule's severity.
    pub severity: Severity,
    /// What it is about.
    pub subject: Subject,
    /// Pending or firing.
    pub phase: Phase,
    /// When that phase began (seconds since the epoch).
    pub since: f64,
    /// The value the rule judged last, in its metric's unit.
    pub value: Option<f64>,
    /// The rule's summary with the subject and value filled in.
    pub summary: String,
}

impl Active {
    /// The alert as the JSON report lists it.
    pub fn to_wire(&self) -> WireAlert {
        let (gpu_index, pid) = match self.subject {
            Subject::Device(index) => (Some(index), None),
            Subject::Process(key) => (Some(key.gpu_index), Some(key.pid)),
            Subject::Host => (None, None),
        };
        WireAlert {
            rule: sanitize(&self.rule),
            severity: match self.severity {
                Severity::Info => WireSeverity::Info,
                Severity::Warning => WireSeverity::Warning,
                Severity::Critical => WireSeverity::Critical,
            },
            // [`Engine::active`] keeps only the pending and the firing.
            state: if self.phase == Phase::Pending {
                WireAlertState::Pending
            } else {
                WireAlertState::Firing
            },
            subject: self.subject.label(),
            gpu_index,
            pid,
            since: self.since,
            value: self.value.map(|v| (v * 100.0).round() / 100.0),
            summary: sanitize(&self.summary),
        }
    }
}

/// The rules and the state of every (rule, subject) pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Engine {
    rules: Vec<Rule>,
    states: BTreeMap<(usize, Subject), State>,
    log: VecDeque<Transition>,
    /// Per rule, when it was last judged.
    evaluated: Vec<f64>,
    /// Per GPU, its latest critical Xid in the latest snapshot: what an Xid rule's summary
    /// names (the rule itself judges counts).
    latest_xids: BTreeMap<u32, u32>,
    /// Whether the latest judgement was [`Engine::evaluate_once`]'s, on one reading.
    one_reading: bool,
}

impl Engine {
    /// An engine for `rules`, with every pair inactive and an empty log.
    pub fn new(rules: Vec<Rule>) -> Self {
        Self {
            evaluated: vec![f64::MIN; rules.len()],
            rules,
            states: BTreeMap::new(),
            log: VecDeque::new(),
            latest_xids: BTreeMap::new(),
            one_reading: false,
        }
    }

    /// Notes each GPU's latest critical Xid from `snapshot`, for the summaries that name it.
    pub fn note_xids(&mut self, snapshot: &Snapshot) {
        self.latest_xids = snapshot
            .devices
            .iter()
            .filter_map(|d| Some((d.index, d.last_critical_xid?.xid)))
            .collect();
    }

    /// The rules, in the order given.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Evaluates every rule at the history's latest time; returns the transitions worth
    /// logging (firing, resolved, and no data where an alert was firing).
    pub fn evaluate(&mut self, history: &History) -> Vec<Transition> {
        self.judge(history, false)
    }

    /// Judges every rule once on the history's latest reading alone, for a one-shot
    /// (`--once`, `--json`, a replayed frame): a mean, minimum or maximum over a window is
    /// taken as that one reading, a rule that needs a span of readings (increase, range) has
    /// no data, and a `for` duration cannot pass, so its alert stays pending. [`Engine::active`]
    /// says so in each alert's summary.
    pub fn evaluate_once(&mut self, history: &History) -> Vec<Transition> {
        self.judge(history, true)
    }

    fn judge(&mut self, history: &History, one_reading: bool) -> Vec<Transition> {
        let Some(now) = history.now() else {
            return Vec::new();
        };
        self.one_reading = one_reading;
        let mut out = Vec::new();
        for (index, rule) in self.rules.iter().enumerate() {
            // A mean or an increase over a long window changes slowly: it is judged every
            // thirtieth of its length. An extreme, a range or the last reading can change
            // with one reading (an Xid error): judged at every one.
            let cadence = match rule.function {
                Function::Mean | Function::Increase | Function::SteadyIncrease => rule.window / 30.0,
                Function::Min | Function::Max | Function::Last | Function::Range => 0.0,
            };
            if now - self.evaluated[index] < cadence {
                continue;
            }
            self.evaluated[index] = now;
            for (subject, series, admitted) in subjects(rule, history) {
                let value = match series {
                    None => Err(0.0),
                    Some(_) if one_reading && rule.function.needs_history() => Err(0.0),
                    Some(s) if one_reading => s.window(now - rule.window, now).map(|a| a.last).ok_or(0.0),
                    Some(s) => rule.evaluate(s, now),
                };
                let state = self.states.entry((index, subject)).or_insert(State {
                    phase: Phase::Inactive,
                    since: now,
                    value: None,
                    checked: now,
                });
                state.checked = now;
                let xid = self.latest_xids.get(&subject_gpu(subject)).copied();
                if let Some(t) = step(rule, state, value.ok(), admitted, now, subject, xid) {
                    out.push(t);
                }
            }
        }
        // Subjects a rule judged now no longer has (a process ended, a GPU vanished): their
        // alerts resolve.
        let gone: Vec<(usize, Subject)> = self
            .states
            .iter()
            .filter(|((index, _), state)| self.evaluated[*index] == now && state.checked != now)
            .map(|(key, _)| *key)
            .collect();
        for key in gone {
            if let Some(state) = self.states.remove(&key)
                && state.phase == Phase::Firing
            {
                let rule = &self.rules[key.0];
                out.push(transition(
                    rule,
                    key.1,
                    Phase::Firing,
                    Phase::Resolved,
                    None,
                    now,
                    None,
                ));
            }
        }
        for t in &out {
            if self.log.len() == LOG_LENGTH {
                self.log.pop_front();
            }
            self.log.push_back(t.clone());
        }
        out
    }

    /// Pending and firing alerts, most severe first.
    pub fn active(&self) -> Vec<Active> {
        let mut out: Vec<Active> = self
            .states
            .iter()
            .filter(|(_, s)| matches!(s.phase, Phase::Pending | Phase::Firing))
            .map(|((index, subject), state)| {
                let rule = &self.rules[*index];
                Active {
                    rule: rule.name.clone(),
                    severity: rule.severity,
                    subject: *subject,
                    phase: state.phase,
                    since: state.since,
                    value: state.value,
                    summary: {
                        let mut text = summary(
                            rule,
                            *subject,
                            state.value,
                            self.latest_xids.get(&subject_gpu(*subject)).copied(),
                        );
                        if self.one_reading {
                            text.push_str(&one_reading_note(rule, state.phase));
                        }
                        text
                    },
                }
            })
            .collect();
        out.sort_by(|a, b| {
            (b.phase == Phase::Firing, b.severity)
                .cmp(&(a.phase == Phase::Firing, a.severity))
                .then(a.subject.cmp(&b.subject))
        });
        out
    }

    /// Firing alerts per severity, `[info, warning, critical]`.
    pub fn firing_counts(&self) -> [usize; 3] {
        let mut counts = [0; 3];
        for ((index, _), state) in &self.states {
            if state.phase == Phase::Firing {
                counts[self.rules[*index].severity as usize] += 1;
            }
        }
        counts
    }

    /// Alerts pending: their condition holds, not yet for their `for` duration.
    pub fn pending_count(&self) -> usize {
        self.states.values().filter(|s| s.phase == Phase::Pending).count()
    }

    /// The rules firing about `subject`.
    pub fn firing_rules<'e>(&'e self, subject: &'e Subject) -> impl Iterator<Item = &'e Rule> + 'e {
        // One lookup per rule: the screen asks this for every visible row.
        self.rules.iter().enumerate().filter_map(move |(index, rule)| {
            let state = self.states.get(&(index, *subject))?;
            (state.phase == Phase::Firing).then_some(rule)
        })
    }

    /// Every firing (rule, subject) pair.
    pub fn firing(&self) -> impl Iterator<Item = (&Rule, Subject)> + '_ {
        self.states
            .iter()
            .filter(|(_, state)| state.phase == Phase::Firing)
            .map(|((index, subject), _)| (&self.rules[*index], *subject))
    }

    /// The most severe firing alert about `subject`.
    pub fn severity_of(&self, subject: &Subject) -> Option<Severity> {
        self.firing_rules(subject).map(|rule| rule.severity).max()
    }

    /// Every logged transition, oldest first.
    pub fn log(&self) -> &VecDeque<Transition> {
        &self.log
    }
}

/// The GPU a subject is on (`u32::MAX` for the host).
fn subject_gpu(subject: Subject) -> u32 {
    match subject {
        Subject::Device(index) => index,
        Subject::Process(key) => key.gpu_index,
        Subject::Host => u32::MAX,
    }
}

/// The subjects a rule applies to, each with its series and whether the rule admits it now.
fn subjects<'h>(
    rule: &Rule,
    history: &'h History,
) -> Vec<(Subject, Option<&'h crate::monitor::history::Series>, bool)> {
    match rule.metric {
        Metric::Device(metric) => (0..history.device_count() as u32)
            .map(|index| {
                let admitted = rule.holders.admits(history.occupied(index));
                (Subject::Device(index), history.device(index, metric), admitted)
            })
            .collect(),
        Metric::Process(metric) => history
            .present_processes()
            .map(|key| (Subject::Process(*key), history.process(key, metric), true))
            .collect(),
        Metric::Host(metric) => vec![(Subject::Host, Some(history.host(metric)), true)],
    }
}

/// One step of the state machine; the transition to log, if any.
fn step(
    rule: &Rule,
    state: &mut State,
    value: Option<f64>,
    admitted: bool,
    now: f64,
    subject: Subject,
    xid: Option<u32>,
) -> Option<Transition> {
    let firing = state.phase == Phase::Firing;
    let next = match value {
        None => Phase::NoData,
        Some(v) if admitted && rule.holds(v, firing) => {
            if firing {
                Phase::Firing
            } else {
                let pending_since = if state.phase == Phase::Pending {
                    state.since
                } else {
                    now
                };
                if now - pending_since >= rule.for_seconds {
                    Phase::Firing
                } else {
                    Phase::Pending
                }
            }
        }
        Some(_) if firing => Phase::Resolved,
        Some(_) => Phase::Inactive,
    };
    let from = state.phase;
    state.value = value.or(state.value);
    if next != from {
        state.since = now;
        state.phase = next;
    }
    let logged = match (from, next) {
        (a, b) if a == b => false,
        (_, Phase::Firing) | (Phase::Firing, _) => true,
        _ => false,
    };
    if state.phase == Phase::Resolved {
        state.phase = Phase::Inactive;
    }
    logged.then(|| transition(rule, subject, from, next, value, now, xid))
}

fn transition(
    rule: &Rule,
    subject: Subject,
    from: Phase,
    to: Phase,
    value: Option<f64>,
    at: f64,
    xid: Option<u32>,
) -> Transition {
    Transition {
        at,
        rule: rule.name.clone(),
        severity: rule.severity,
        subject,
        from,
        to,
        value,
        summary: summary(rule, subject, value, xid),
    }
}

/// "GPU 0: GPU hotter than 85 °C (temperature 30 s mean > 85 °C: 87.2 °C)"; a rule on Xid
/// errors also names the GPU's latest critical Xid (`xid`): "...: 1.0; last Xid 48)".
pub fn summary(rule: &Rule, subject: Subject, value: Option<f64>, xid: Option<u32>) -> String {
    let what = rule
        .summary
        .clone()
        .unwrap_or_else(|| rule.name.replace('_', " "));
    let unit = rule.metric.unit();
    let mut now = value.map_or(String::new(), |v| format!(": {v:.1}{unit}"));
    if let (Metric::Device(DeviceMetric::CriticalXids), Some(xid)) = (rule.metric, xid) {
        now.push_str(&format!("; last Xid {xid}"));
    }
    // Back under the threshold but not past the clear level: the alert is held, and says so
    // rather than read as "> 80 °C: 79.3 °C".
    let held = value.filter(|v| rule.holds(*v, true) && !rule.holds(*v, false));
    let condition = match held {
        Some(_) => format!(
            "{}; held until {} {}{unit}",
            rule.condition(),
            match rule.comparison {
                rules::Comparison::Above => "below",
                rules::Comparison::Below => "above",
            },
            crate::format::trim_number(rule.clear)
        ),
        None => rule.condition(),
    };
    format!("{}: {what} ({condition}{now})", subject.label())
}

/// What a one-shot's alert could not see: the window its rule means, or the `for` duration
/// that keeps it pending.
fn one_reading_note(rule: &Rule, phase: Phase) -> String {
    let mut note = String::new();
    if rule.function != Function::Last {
        note.push_str(&format!(
            "; one reading, not a {} {}",
            seconds_text(rule.window),
            rule.function.name().replace('_', " ")
        ));
    }
    if phase == Phase::Pending {
        note.push_str(&format!(
            "; pending: one snapshot cannot show the {} `for` duration",
            seconds_text(rule.for_seconds)
        ));
    }
    note
}

#[cfg(test)]
mod summary_tests {
    use super::*;

    #[test]
    fn an_alert_held_by_its_clear_level_says_so_instead_of_contradicting_itself() {
        let hot = &Rule {
            name: "gpu_temperature".into(),
            metric: Metric::Device(DeviceMetric::Temperature),
            function: Function::Mean,
            comparison: rules::Comparison::Above,
            threshold: 80.0,
            clear: 75.0,
            window: rules::DEFAULT_WINDOW,
            for_seconds: 0.0,
            severity: Severity::Warning,
            min_coverage: rules::DEFAULT_MIN_COVERAGE,
            holders: rules::Holders::Any,
            summary: Some("GPU hotter than 80 °C".into()),
        };
        let held = summary(hot, Subject::Device(0), Some(79.3), None);
        assert!(
            held.contains(&format!(
                "held until below {} °C",
                crate::format::trim_number(hot.clear)
            )),
            "{held}"
        );
        assert!(held.ends_with(": 79.3 °C)"), "{held}");
        let over = summary(hot, Subject::Device(0), Some(84.0), None);
        assert!(!over.contains("held"), "{over}");
        let cleared = summary(hot, Subject::Device(0), Some(60.0), None);
        assert!(!cleared.contains("held"), "{cleared}");
    }
}

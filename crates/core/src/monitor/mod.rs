//! What gputop knows over time, fed once per snapshot by [`Monitor::ingest`]: [`history`]
//! (the readings kept), [`alerts`] (the rule engine judging them), [`usage`] (GPU time
//! per user and container) and [`clock_events`] (seconds each GPU's clocks were held down); [`spans`] keeps statistics over tagged spans for callers that
//! sample when they choose (the Python module's collector). The view, the exporter and the library share it; it does no
//! I/O (delivering alert transitions is the caller's).

pub mod alerts;
pub mod clock_events;
pub mod history;
pub mod spans;
pub mod usage;

use std::time::Duration;

use crate::model::Snapshot;
use alerts::rules::AlertSettings;
use alerts::{Active, Engine, Transition};
use clock_events::ClockEvents;
use history::{History, HistorySettings};
use usage::Accounting;

/// History, alerts and usage, kept together so that each snapshot reaches all three once
/// and in one order.
#[derive(Debug, Clone)]
pub struct Monitor {
    history: History,
    alerts: Engine,
    usage: Accounting,
    clock_events: ClockEvents,
    /// What a restart starts again from.
    settings: (HistorySettings, AlertSettings, f64),
}

impl Monitor {
    /// An empty monitor for snapshots `refresh` seconds apart.
    pub fn new(history: &HistorySettings, alert: &AlertSettings, refresh: f64) -> Self {
        Self {
            history: History::new(history, refresh),
            alerts: Engine::new(alert.effective_rules()),
            usage: Accounting::new(Duration::from_secs_f64(refresh)),
            clock_events: ClockEvents::new(Duration::from_secs_f64(refresh)),
            settings: (history.clone(), alert.clone(), refresh),
        }
    }

    /// The alerts one snapshot alone shows, for a one-shot: the snapshot taken into history,
    /// then judged by the same engine as a running monitor's, on that one reading
    /// ([`Engine::evaluate_once`]).
    pub fn alerts_once(&mut self, snapshot: &Snapshot) -> Vec<Active> {
        self.history.record(snapshot);
        self.alerts.note_xids(snapshot);
        self.alerts.evaluate_once(&self.history);
        self.alerts.active()
    }

    /// Takes one snapshot into history and usage, then judges the alert rules over the
    /// history; returns the alert transitions it caused.
    pub fn ingest(&mut self, snapshot: &Snapshot) -> Vec<Transition> {
        self.history.record(snapshot);
        self.usage.record(snapshot);
        self.clock_events.record(snapshot);
        self.alerts.note_xids(snapshot);
        self.alerts.evaluate(&self.history)
    }

    /// Each metric's readings over time.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The alert rules and where each (rule, subject) stands.
    pub fn alerts(&self) -> &Engine {
        &self.alerts
    }

    /// GPU use per user and per container.
    pub fn usage(&self) -> &Accounting {
        &self.usage
    }

    /// Adds totals saved by an earlier run ([`Accounting::saved`]) to the usage; refused
    /// whole when any of it is out of range.
    pub fn restore_usage(&mut self, saved: &serde_json::Value) -> Result<(), usage::RestoreError> {
        self.usage.restore(saved)
    }

    /// Clock-event reasons over time.
    pub fn clock_events(&self) -> &ClockEvents {
        &self.clock_events
    }

    /// Forgets everything (a replay that moved backwards).
    pub fn restart(&mut self) {
        let (history, alert, refresh) = &self.settings;
        *self = Self::new(history, alert, *refresh);
    }
}

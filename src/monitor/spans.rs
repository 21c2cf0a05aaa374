//! Statistics of readings over tagged spans (a training run, an epoch in it), as nvitop's
//! `ResourceMetricCollector` keeps them: for every open tag, each metric's time-weighted
//! mean, min, max and last since the tag opened, under nvitop's keys
//! (`train/gpu:0/memory_used (MiB)/mean`; a tag opened inside another is prefixed by it:
//! `train/epoch/...`). The Python module samples into it.

use std::collections::BTreeMap;

use crate::model::Snapshot;

/// Running statistics of one metric: its samples' time-weighted integral (trapezoids between
/// samples), min, max and last.
#[derive(Debug, Clone, Copy)]
struct Stat {
    first_at: f64,
    last_at: f64,
    integral: f64,
    min: f64,
    max: f64,
    last: f64,
}

impl Stat {
    fn new(at: f64, value: f64) -> Self {
        Self {
            first_at: at,
            last_at: at,
            integral: 0.0,
            min: value,
            max: value,
            last: value,
        }
    }

    fn push(&mut self, at: f64, value: f64) {
        let since = (at - self.last_at).max(0.0);
        self.integral += since * (self.last + value) / 2.0;
        self.last_at = at;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
        self.last = value;
    }

    /// The time-weighted mean; a single sample's value.
    fn mean(&self) -> f64 {
        let span = self.last_at - self.first_at;
        if span > 0.0 {
            self.integral / span
        } else {
            self.last
        }
    }
}

/// One open tag: its name, its key prefix (the tags it is nested in, then its own), when it
/// opened and its metrics' statistics by key.
#[derive(Debug, Clone)]
struct Span {
    tag: String,
    prefix: String,
    opened_at: f64,
    last_sample_at: Option<f64>,
    stats: BTreeMap<String, Stat>,
}

/// The metrics of one reading, as `(key, value)`: each GPU's, then the host's. Units in the
/// keys, as nvitop names them.
pub fn metrics(snapshot: &Snapshot, devices: Option<&[u32]>) -> Vec<(String, f64)> {
    const MIB: f64 = 1024.0 * 1024.0;
    const GIB: f64 = MIB * 1024.0;
    let mut out = Vec::new();
    for d in &snapshot.devices {
        if devices.is_some_and(|wanted| !wanted.contains(&d.index)) {
            continue;
        }
        let gpu = format!("gpu:{}", d.index);
        let mut put = |name: &str, value: Option<f64>| {
            if let Some(value) = value {
                out.push((format!("{gpu}/{name}"), value));
            }
        };
        let memory = d.memory.get();
        put("memory_used (MiB)", memory.map(|m| m.used as f64 / MIB));
        put("memory_free (MiB)", memory.map(|m| m.free as f64 / MIB));
        put("memory_total (MiB)", memory.map(|m| m.total as f64 / MIB));
        put(
            "memory_percent (%)",
            memory
                .filter(|m| m.total > 0)
                .map(|m| m.used as f64 * 100.0 / m.total as f64),
        );
        put("gpu_utilization (%)", d.utilization_gpu.get().map(f64::from));
        put(
            "memory_utilization (%)",
            d.utilization_memory.get().map(f64::from),
        );
        put("fan_speed (%)", d.fan_speed().get().map(f64::from));
        put("temperature (C)", d.temperature.get().map(f64::from));
        put(
            "power_usage (W)",
            d.power_usage_mw.get().map(|mw| f64::from(mw) / 1000.0),
        );
    }
    let h = &snapshot.host;
    if let Some(cpu) = h.cpu_percent.get() {
        out.push(("host/cpu_percent (%)".into(), cpu));
    }
    if let (Some(used), Some(total)) = (h.memory_used_bytes.get(), h.memory_total_bytes.get()) {
        out.push(("host/memory_used (GiB)".into(), used as f64 / GIB));
        if total > 0 {
            out.push((
                "host/memory_percent (%)".into(),
                used as f64 * 100.0 / total as f64,
            ));
        }
    }
    out
}

/// The open tags, in the order they were opened.
#[derive(Debug, Clone, Default)]
pub struct Spans(Vec<Span>);

impl Spans {
    /// Opens `tag` at `at` (seconds since the epoch), inside the tags open now: its keys are
    /// prefixed by theirs, and it keeps its own statistics.
    pub fn open(&mut self, tag: &str, at: f64) {
        let prefix = match self.0.last() {
            Some(outer) => format!("{}/{tag}", outer.prefix),
            None => tag.to_string(),
        };
        self.0.push(Span {
            tag: tag.to_string(),
            prefix,
            opened_at: at,
            last_sample_at: None,
            stats: BTreeMap::new(),
        });
    }

    /// Closes the latest `tag` opened (the latest of all when none is given) and the tags
    /// opened inside it.
    pub fn close(&mut self, tag: Option<&str>) {
        let at = match tag {
            Some(tag) => self.0.iter().rposition(|s| s.tag == tag),
            None => self.0.len().checked_sub(1),
        };
        if let Some(at) = at {
            self.0.truncate(at);
        }
    }

    pub fn close_all(&mut self) {
        self.0.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Starts the statistics of `tag` and of the tags inside it (of every tag when none is
    /// given) over from `at`.
    pub fn clear(&mut self, tag: Option<&str>, at: f64) {
        let from = tag
            .and_then(|t| self.0.iter().rposition(|s| s.tag == t))
            .unwrap_or(0);
        if tag.is_some() && !self.0.iter().any(|s| Some(s.tag.as_str()) == tag) {
            return;
        }
        for span in &mut self.0[from..] {
            span.opened_at = at;
            span.last_sample_at = None;
            span.stats.clear();
        }
    }

    /// Adds one reading's metrics, taken at `at` (seconds since the epoch), to every open tag.
    pub fn record(&mut self, at: f64, sample: &[(String, f64)]) {
        for span in &mut self.0 {
            span.last_sample_at = Some(at);
            for (key, value) in sample {
                span.stats
                    .entry(key.clone())
                    .and_modify(|s| s.push(at, *value))
                    .or_insert_with(|| Stat::new(at, *value));
            }
        }
    }

    /// Every open tag's statistics under nvitop's keys, with its duration until `now`, the
    /// time now and the time of its last sample (seconds since the epoch).
    pub fn collected(&self, now: f64) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for span in &self.0 {
            let prefix = &span.prefix;
            for (key, s) in &span.stats {
                out.insert(format!("{prefix}/{key}/mean"), s.mean());
                out.insert(format!("{prefix}/{key}/min"), s.min);
                out.insert(format!("{prefix}/{key}/max"), s.max);
                out.insert(format!("{prefix}/{key}/last"), s.last);
            }
            out.insert(format!("{prefix}/duration (s)"), (now - span.opened_at).max(0.0));
            out.insert(format!("{prefix}/timestamp"), now);
            if let Some(at) = span.last_sample_at {
                out.insert(format!("{prefix}/last_timestamp"), at);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "gpu:0/temperature (C)";

    #[test]
    fn statistics_of_a_known_sequence_are_time_weighted() {
        let mut spans = Spans::default();
        spans.open("train", 100.0);
        // 4 for 1 s, then 1 rising to 7 over 2 s: trapezoids 2.5 + 8 over 3 s.
        for (at, value) in [(100.0, 4.0), (101.0, 1.0), (103.0, 7.0)] {
            spans.record(at, &[(KEY.into(), value)]);
        }
        let out = spans.collected(104.0);
        assert_eq!(out["train/gpu:0/temperature (C)/mean"], 3.5);
        assert_eq!(out["train/gpu:0/temperature (C)/min"], 1.0);
        assert_eq!(out["train/gpu:0/temperature (C)/max"], 7.0);
        assert_eq!(out["train/gpu:0/temperature (C)/last"], 7.0);
        assert_eq!(out["train/duration (s)"], 4.0);
        assert_eq!(out["train/timestamp"], 104.0);
        assert_eq!(out["train/last_timestamp"], 103.0);
    }

    #[test]
    fn tags_nest_under_their_outer_tags_and_close_and_clear_with_them() {
        let mut spans = Spans::default();
        spans.open("train", 0.0);
        spans.record(0.0, &[(KEY.into(), 90.0)]);
        spans.open("epoch", 1.0);
        spans.record(1.0, &[(KEY.into(), 10.0)]);
        let out = spans.collected(1.0);
        assert_eq!(out["train/gpu:0/temperature (C)/max"], 90.0);
        assert_eq!(
            out["train/epoch/gpu:0/temperature (C)/max"], 10.0,
            "its own samples only"
        );
        assert_eq!(out["train/gpu:0/temperature (C)/mean"], 50.0);
        spans.clear(Some("epoch"), 2.0);
        let out = spans.collected(2.0);
        assert!(!out.contains_key("train/epoch/gpu:0/temperature (C)/mean"));
        assert!(
            out.contains_key("train/gpu:0/temperature (C)/mean"),
            "the outer tag keeps its"
        );
        spans.close(Some("train"));
        assert!(spans.is_empty(), "closing a tag closes the ones inside it");
    }
}

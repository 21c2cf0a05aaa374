//! Statistics of readings over tagged spans (a training epoch, an inference call), as
//! nvitop's `ResourceMetricCollector` keeps them: for every open tag, each metric's mean,
//! min, max and last since the tag opened, under nvitop's keys
//! (`train/gpu:0/memory_used (MiB)/mean`). The Python module samples into it.

use std::collections::BTreeMap;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::model::Snapshot;

/// Running statistics of one metric.
#[derive(Debug, Clone, Copy)]
pub struct Stat {
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
    last: f64,
}

impl Stat {
    fn new(value: f64) -> Self {
        Self {
            count: 1,
            sum: value,
            min: value,
            max: value,
            last: value,
        }
    }

    fn push(&mut self, value: f64) {
        self.count += 1;
        self.sum += value;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
        self.last = value;
    }
}

/// One open tag: since when, and its metrics' statistics by key.
#[derive(Debug, Clone)]
struct Span {
    tag: String,
    started: Instant,
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
    /// Opens `tag` now (tags nest: each keeps its own statistics).
    pub fn open(&mut self, tag: &str) {
        self.0.push(Span {
            tag: tag.to_string(),
            started: Instant::now(),
            stats: BTreeMap::new(),
        });
    }

    /// Closes the latest `tag` opened, or the latest of all when none is given.
    pub fn close(&mut self, tag: Option<&str>) {
        let at = match tag {
            Some(tag) => self.0.iter().rposition(|s| s.tag == tag),
            None => self.0.len().checked_sub(1),
        };
        if let Some(at) = at {
            self.0.remove(at);
        }
    }

    pub fn close_all(&mut self) {
        self.0.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Starts `tag`'s statistics (every tag's when none is given) over from now.
    pub fn clear(&mut self, tag: Option<&str>) {
        for span in &mut self.0 {
            if tag.is_none_or(|t| t == span.tag) {
                span.started = Instant::now();
                span.stats.clear();
            }
        }
    }

    /// Adds one reading's metrics to every open tag.
    pub fn record(&mut self, sample: &[(String, f64)]) {
        for span in &mut self.0 {
            for (key, value) in sample {
                span.stats
                    .entry(key.clone())
                    .and_modify(|s| s.push(*value))
                    .or_insert_with(|| Stat::new(*value));
            }
        }
    }

    /// Every open tag's statistics under nvitop's keys, its duration and the time now.
    pub fn collected(&self) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        for span in &self.0 {
            for (key, s) in &span.stats {
                out.insert(format!("{}/{key}/mean", span.tag), s.sum / s.count as f64);
                out.insert(format!("{}/{key}/min", span.tag), s.min);
                out.insert(format!("{}/{key}/max", span.tag), s.max);
                out.insert(format!("{}/{key}/last", span.tag), s.last);
            }
            out.insert(
                format!("{}/duration (s)", span.tag),
                span.started.elapsed().as_secs_f64(),
            );
            out.insert(format!("{}/timestamp", span.tag), now);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_of_a_known_sequence() {
        let mut spans = Spans::default();
        spans.open("epoch");
        spans.record(&[("gpu:0/temperature (C)".into(), 90.0)]);
        spans.open("train");
        for value in [4.0, 1.0, 7.0] {
            spans.record(&[("gpu:0/temperature (C)".into(), value)]);
        }
        let out = spans.collected();
        assert_eq!(out["train/gpu:0/temperature (C)/mean"], 4.0);
        assert_eq!(out["train/gpu:0/temperature (C)/min"], 1.0);
        assert_eq!(out["train/gpu:0/temperature (C)/max"], 7.0);
        assert_eq!(out["train/gpu:0/temperature (C)/last"], 7.0);
        assert!(out.contains_key("train/duration (s)") && out.contains_key("train/timestamp"));
        // The outer tag saw the earlier reading too.
        assert_eq!(out["epoch/gpu:0/temperature (C)/max"], 90.0);
        assert_eq!(out["epoch/gpu:0/temperature (C)/mean"], 25.5);
        spans.close(Some("epoch"));
        assert!(!spans.collected().contains_key("epoch/duration (s)"));
        spans.clear(None);
        assert!(!spans.collected().contains_key("train/gpu:0/temperature (C)/mean"));
        spans.close(None);
        assert!(spans.is_empty());
    }
}

//! Statistics of readings over tagged spans (a training run, an epoch in it), as nvitop's
//! `ResourceMetricCollector` keeps them: for every open tag, each metric's time-weighted
//! mean, min, max and last since the tag opened, under nvitop's keys
//! (`train/gpu:0/memory_used (MiB)/mean`; a tag opened inside another is prefixed by it:
//! `train/epoch/...`). The Python module samples into it.

use std::collections::BTreeMap;

use crate::model::{Device, GpuProcess, HostStats, Snapshot};

/// Running statistics of one metric, as nvitop keeps them: the integral of its samples
/// over time (the first held back to where its statistics start, trapezoids between
/// samples), min, max and last, and whether it was in the latest reading.
#[derive(Debug, Clone, Copy)]
struct Stat {
    from: f64,
    last_at: f64,
    integral: f64,
    min: f64,
    max: f64,
    last: f64,
    current: bool,
}

impl Stat {
    /// Its first sample, `value` at `at`, for statistics that start at `from`.
    fn new(from: f64, at: f64, value: f64) -> Self {
        Self {
            from,
            last_at: at,
            integral: value * (at - from).max(0.0),
            min: value,
            max: value,
            last: value,
            current: true,
        }
    }

    fn push(&mut self, at: f64, value: f64) {
        let since = (at - self.last_at).max(0.0);
        self.integral += since * (self.last + value) / 2.0;
        self.last_at = at;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
        self.last = value;
        self.current = true;
    }

    /// The time-weighted mean until `now`: a metric still read holds its last value until
    /// then; one that has gone (a process that ended) ends at its last sample.
    fn mean(&self, now: f64) -> f64 {
        let (until, integral) = if self.current {
            let held = (now - self.last_at).max(0.0);
            (self.last_at + held, self.integral + self.last * held)
        } else {
            (self.last_at, self.integral)
        };
        if until > self.from {
            integral / (until - self.from)
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

/// A metric nvitop reports as its maximum alone, under its own key.
const RUNNING_TIME: &str = "host/running_time (min)";

/// The processes whose own metrics a reading gives (nvitop's `root_pids` and their
/// descendants, decided by the caller).
pub type ProcessFilter<'a> = &'a mut dyn FnMut(&GpuProcess) -> bool;

/// The metrics of one reading, as `(key, value)`: each GPU's, the host's, then each chosen
/// process's (`pid:N/host/...` once, `pid:N/gpu:I/...` for each GPU it is on). Units in
/// the keys, as nvitop names them.
pub fn metrics(
    snapshot: &Snapshot,
    devices: Option<&[u32]>,
    chosen: ProcessFilter<'_>,
) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let wanted = |index: u32| devices.is_none_or(|wanted| wanted.contains(&index));
    for d in snapshot.devices.iter().filter(|d| wanted(d.index)) {
        device_metrics(d, &mut out);
    }
    host_metrics(&snapshot.host, &mut out);
    let mut seen = Vec::new();
    for p in &snapshot.processes {
        if !wanted(p.gpu_index) || !chosen(p) {
            continue;
        }
        let Some(device) = snapshot.devices.iter().find(|d| d.index == p.gpu_index) else {
            continue;
        };
        if !seen.contains(&p.pid) {
            seen.push(p.pid);
            process_host_metrics(p, &snapshot.host, &mut out);
        }
        process_gpu_metrics(p, device, &mut out);
    }
    out
}

const MIB: f64 = 1024.0 * 1024.0;
const GIB: f64 = MIB * 1024.0;

fn percent(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 * 100.0 / whole as f64)
}

/// Pushes `scope/name` when the value is known.
fn put(out: &mut Vec<(String, f64)>, scope: &str, name: &str, value: Option<f64>) {
    if let Some(value) = value {
        out.push((format!("{scope}/{name}"), value));
    }
}

fn device_metrics(d: &Device, out: &mut Vec<(String, f64)>) {
    let gpu = format!("gpu:{}", d.index);
    let memory = d.memory().get();
    put(
        out,
        &gpu,
        "memory_used (MiB)",
        memory.map(|m| m.used as f64 / MIB),
    );
    put(
        out,
        &gpu,
        "memory_free (MiB)",
        memory.map(|m| m.free as f64 / MIB),
    );
    put(
        out,
        &gpu,
        "memory_total (MiB)",
        memory.map(|m| m.total as f64 / MIB),
    );
    put(
        out,
        &gpu,
        "memory_percent (%)",
        memory.and_then(|m| percent(m.used, m.total)),
    );
    let utilization = d.utilization_gpu_percent.get().map(f64::from);
    put(out, &gpu, "gpu_utilization (%)", utilization);
    let memory_utilization = d.utilization_memory_percent.get().map(f64::from);
    put(out, &gpu, "memory_utilization (%)", memory_utilization);
    put(
        out,
        &gpu,
        "fan_speed (%)",
        d.fan_speed_percent.get().map(f64::from),
    );
    put(
        out,
        &gpu,
        "temperature (C)",
        d.temperature_celsius.get().map(f64::from),
    );
    put(out, &gpu, "power_usage (W)", d.power_usage_watts.get());
}

fn host_metrics(h: &HostStats, out: &mut Vec<(String, f64)>) {
    put(out, "host", "cpu_percent (%)", h.cpu_percent.get());
    let (used, total) = (h.memory_used_bytes.get(), h.memory_total_bytes.get());
    let memory_percent = used.zip(total).and_then(|(u, t)| percent(u, t));
    put(out, "host", "memory_percent (%)", memory_percent);
    let (swap_used, swap_total) = (h.swap_used_bytes.get(), h.swap_total_bytes.get());
    let swap_percent = swap_used
        .zip(swap_total)
        .map(|(u, t)| percent(u, t).unwrap_or(0.0));
    put(out, "host", "swap_percent (%)", swap_percent);
    put(out, "host", "memory_used (GiB)", used.map(|u| u as f64 / GIB));
    if let Some([one, five, fifteen]) = h.load_average.get() {
        // nvitop's names; the values are the kernel's load averages.
        put(out, "host", "load_average (%) (1 min)", Some(one));
        put(out, "host", "load_average (%) (5 min)", Some(five));
        put(out, "host", "load_average (%) (15 min)", Some(fifteen));
    }
}

fn process_host_metrics(p: &GpuProcess, host: &HostStats, out: &mut Vec<(String, f64)>) {
    let scope = format!("pid:{}/host", p.pid);
    let facts = &p.host;
    put(out, &scope, "cpu_percent (%)", facts.cpu_percent.get());
    let resident = facts.memory_bytes.get();
    put(out, &scope, "host_memory (MiB)", resident.map(|b| b as f64 / MIB));
    let share = resident
        .zip(host.memory_total_bytes.get())
        .and_then(|(b, t)| percent(b, t));
    put(out, &scope, "host_memory_percent (%)", share);
    let minutes = facts.running_seconds.get().map(|s| s as f64 / 60.0);
    put(out, &format!("pid:{}", p.pid), RUNNING_TIME, minutes);
}

fn process_gpu_metrics(p: &GpuProcess, d: &Device, out: &mut Vec<(String, f64)>) {
    let scope = format!("pid:{}/gpu:{}", p.pid, d.index);
    let bytes = p.gpu_memory_bytes.get();
    put(out, &scope, "gpu_memory (MiB)", bytes.map(|b| b as f64 / MIB));
    let share = bytes
        .zip(d.memory_total_bytes.get())
        .and_then(|(b, total)| percent(b, total));
    put(out, &scope, "gpu_memory_percent (%)", share);
    let bandwidth = p.memory_bandwidth_percent.get().map(f64::from);
    put(out, &scope, "gpu_memory_utilization (%)", bandwidth);
    let sm = p.sm_percent.get().map(f64::from);
    put(out, &scope, "gpu_sm_utilization (%)", sm);
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

    /// Whether `tag` is open.
    pub fn is_open(&self, tag: &str) -> bool {
        self.0.iter().any(|s| s.tag == tag)
    }

    /// Closes every span.
    pub fn close_all(&mut self) {
        self.0.clear();
    }

    /// Whether no span is open.
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
            // A metric first read now starts where the span's last sample (or the span) did.
            let from = span.last_sample_at.unwrap_or(span.opened_at);
            for stat in span.stats.values_mut() {
                stat.current = false;
            }
            for (key, value) in sample {
                span.stats
                    .entry(key.clone())
                    .and_modify(|s| s.push(at, *value))
                    .or_insert_with(|| Stat::new(from, at, *value));
            }
            span.last_sample_at = Some(at);
        }
    }

    /// Every open tag's statistics under nvitop's keys, with its duration until `now`, the
    /// time now and the time of its last sample (seconds since the epoch).
    pub fn collected(&self, now: f64) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for span in &self.0 {
            let prefix = &span.prefix;
            for (key, s) in &span.stats {
                if key.ends_with(RUNNING_TIME) {
                    out.insert(format!("{prefix}/{key}"), s.max);
                    continue;
                }
                out.insert(format!("{prefix}/{key}/mean"), s.mean(now));
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
        // 4 falling to 1 over 1 s, 1 rising to 7 over 2 s, then 7 held until now: 2.5 + 8 +
        // 7 over 4 s.
        for (at, value) in [(100.0, 4.0), (101.0, 1.0), (103.0, 7.0)] {
            spans.record(at, &[(KEY.into(), value)]);
        }
        let out = spans.collected(104.0);
        assert_eq!(out["train/gpu:0/temperature (C)/mean"], 4.375);
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
        assert_eq!(
            out["train/gpu:0/temperature (C)/mean"], 50.0,
            "90 falling to 10 over 0..1 s"
        );
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

    #[test]
    fn a_metric_that_goes_ends_at_its_last_sample_and_one_that_comes_starts_before_it() {
        const LATER: &str = "pid:7/gpu:0/gpu_memory (MiB)";
        let mut spans = Spans::default();
        spans.open("run", 0.0);
        spans.record(0.0, &[(KEY.into(), 10.0)]);
        spans.record(2.0, &[(KEY.into(), 10.0), (LATER.into(), 100.0)]);
        spans.record(4.0, &[(LATER.into(), 200.0)]);
        let out = spans.collected(10.0);
        assert_eq!(
            out["run/gpu:0/temperature (C)/mean"], 10.0,
            "gone after 2 s: its mean is over 0..2 s"
        );
        // 100 held back to the sample before it (0..2 s), 100 to 200 over 2..4 s, 200 held
        // until now (4..10 s): (200 + 300 + 1200) / 10.
        assert_eq!(out["run/pid:7/gpu:0/gpu_memory (MiB)/mean"], 170.0);
    }

    #[test]
    fn the_running_time_is_its_maximum_alone() {
        let mut spans = Spans::default();
        spans.open("run", 0.0);
        for (at, minutes) in [(0.0, 1.0), (60.0, 2.0)] {
            spans.record(at, &[(format!("pid:7/{RUNNING_TIME}"), minutes)]);
        }
        let out = spans.collected(60.0);
        assert_eq!(out["run/pid:7/host/running_time (min)"], 2.0);
        assert!(!out.keys().any(|k| k.contains("running_time (min)/")), "{out:?}");
    }

    #[test]
    fn each_chosen_process_has_its_host_metrics_once_and_its_gpu_metrics_per_gpu() {
        let mut source = crate::source::Source::demo();
        let snapshot = crate::collector::collect_once(&mut source, std::time::Duration::from_secs(1));
        let chosen = snapshot.processes[0].clone();
        let out = metrics(&snapshot, None, &mut |p| p.pid == chosen.pid);
        let keys: Vec<&str> = out.iter().map(|(k, _)| k.as_str()).collect();
        let own = format!("pid:{}/", chosen.pid);
        let host_memory = format!("{own}host/host_memory (MiB)");
        assert_eq!(keys.iter().filter(|k| **k == host_memory).count(), 1);
        let gpu_memory = format!("{own}gpu:{}/gpu_memory (MiB)", chosen.gpu_index);
        let (_, mib) = out
            .iter()
            .find(|(k, _)| *k == gpu_memory)
            .expect("its GPU memory");
        assert_eq!(
            *mib,
            chosen.gpu_memory_bytes.get().unwrap() as f64 / MIB,
            "{keys:?}"
        );
        assert!(
            keys.iter()
                .filter(|k| k.starts_with("pid:"))
                .all(|k| k.starts_with(&own)),
            "no other process: {keys:?}"
        );
        assert!(keys.contains(&"gpu:0/memory_used (MiB)"), "{keys:?}");
        assert!(keys.contains(&"host/memory_percent (%)"), "{keys:?}");
        let none = metrics(&snapshot, Some(&[]), &mut |_| true);
        assert!(
            none.iter().all(|(k, _)| k.starts_with("host/")),
            "no GPU asked for, only the host: {none:?}"
        );
    }
}

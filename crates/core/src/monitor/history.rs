//! History: bounded time series of device, process and host metrics, and window aggregates
//! (time-weighted mean, min, max, first, last, coverage) over them.
//!
//! A [`Series`] keeps every recent reading (the raw tier, the last [`RAW_SPAN`] seconds) and
//! coarser buckets for older data: tier k holds buckets `sample_interval × 10^k` seconds
//! wide, [`BUCKETS_PER_TIER`] of them, until the tiers reach `retention_time`. Memory is
//! fixed by the settings, never by how long gputop runs. [`History`] owns one series per
//! device metric, per process metric ([`PROCESS_BUCKET`] aggregates only: processes can be
//! many) and per host metric; charts and the alert engine read it, nothing else writes it.

use std::collections::VecDeque;
use std::time::UNIX_EPOCH;

use foldhash::{HashMap, HashMapExt};

use crate::model::{Device, GpuProcess, ProcessKey, Reading, Snapshot};

/// The `[history]` settings: how long readings are kept, and at what resolution.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistorySettings {
    /// Seconds of readings kept.
    pub retention_time: u64,
    /// Seconds each bucket averages once a reading is older than the raw span.
    pub sample_interval: u64,
}

/// Seconds of raw readings each series keeps.
pub const RAW_SPAN: f64 = 900.0;
/// Most raw readings a series keeps, whatever the refresh interval.
pub const RAW_POINTS_MAX: usize = 4096;
/// Buckets per aggregate tier.
pub const BUCKETS_PER_TIER: usize = 720;
/// Seconds per bucket of a process's series: processes can be many, so they keep
/// [`RAW_SPAN`] seconds of 10-second aggregates, not every reading.
pub const PROCESS_BUCKET: f64 = 10.0;
/// A process's series outlive the process by this long (its details screen may be open).
pub const PROCESS_GRACE: f64 = 120.0;

/// One reading. A `NaN` value is a reading that was not available: it covers no time.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Point {
    t: f64,
    value: f32,
    /// Seconds of time this reading stands for, ending at `t`.
    covers: f32,
}

/// Readings aggregated over one bucket of its tier, `[start, start + width)`. 24 bytes: a
/// process keeps three series of them, and a machine may run hundreds of processes.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bucket {
    /// Which bucket: the tier's `origin + slot`-th of its width since the epoch.
    slot: u32,
    /// Time-weighted mean of the readings (as precise as the raw readings, which are `f32`).
    mean: f32,
    covered: f32,
    min: f32,
    max: f32,
    last: f32,
}

#[derive(Debug, Clone, PartialEq)]
struct Tier {
    width: f64,
    capacity: usize,
    /// Number (since the epoch) of the bucket the slots count from.
    origin: i64,
    buckets: VecDeque<Bucket>,
}

impl Tier {
    /// Number since the epoch of the bucket holding time `t`.
    fn number_at(&self, t: f64) -> i64 {
        (t / self.width).floor() as i64
    }

    fn number(&self, bucket: &Bucket) -> i64 {
        self.origin + i64::from(bucket.slot)
    }

    fn start(&self, bucket: &Bucket) -> f64 {
        self.number(bucket) as f64 * self.width
    }
}

/// Aggregates of a series over a window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Aggregate {
    /// Time-weighted mean.
    pub mean: f64,
    /// The least reading.
    pub min: f64,
    /// The greatest reading.
    pub max: f64,
    /// The earliest and latest reading (or bucket mean) in the window.
    pub first: f64,
    /// See `first`.
    pub last: f64,
    /// Fraction of the window that readings cover, 0 to 1.
    pub coverage: f64,
}

/// A bounded time series.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The expected seconds between readings; a longer gap counts as missing data.
    nominal: f64,
    raw: VecDeque<Point>,
    /// 0 for a series with aggregate tiers only.
    raw_capacity: usize,
    last: Option<Point>,
    /// Fixed at creation: a slice, without a Vec's spare capacity (a process holds three
    /// series of one tier each, and a machine may run hundreds of processes).
    tiers: Box<[Tier]>,
    retention: f64,
}

impl Series {
    /// A series fed every `nominal` seconds, with aggregate tiers from `sample_interval` up to
    /// `retention` seconds (no tiers when `sample_interval` is `None`).
    pub fn new(nominal: f64, sample_interval: Option<f64>, retention: f64) -> Self {
        let nominal = nominal.max(0.001);
        let raw_span = RAW_SPAN.min(retention);
        let raw_capacity = ((raw_span / nominal).ceil() as usize + 1).clamp(2, RAW_POINTS_MAX);
        let mut tiers = Vec::new();
        if let Some(mut width) = sample_interval {
            loop {
                let capacity = ((retention / width).ceil() as usize).clamp(1, BUCKETS_PER_TIER);
                tiers.push(Tier {
                    width,
                    capacity,
                    origin: 0,
                    buckets: VecDeque::new(),
                });
                if width * capacity as f64 >= retention {
                    break;
                }
                width *= 10.0;
            }
        }
        Self {
            nominal,
            raw: VecDeque::new(),
            raw_capacity,
            last: None,
            tiers: tiers.into_boxed_slice(),
            retention,
        }
    }

    /// A series without raw readings: buckets `width` seconds wide over `span` seconds.
    pub fn coarse(nominal: f64, width: f64, span: f64) -> Self {
        Self {
            raw_capacity: 0,
            ..Self::new(nominal, Some(width), span)
        }
    }

    /// Adds the reading at `t` (seconds); `None` is a gap. Readings must move forward in time.
    pub fn push(&mut self, t: f64, value: Option<f64>) {
        let previous = self.last.map(|p| p.t);
        if previous.is_some_and(|p| t <= p) || !t.is_finite() {
            return;
        }
        let covers = previous.map_or(self.nominal, |p| (t - p).min(2.0 * self.nominal));
        let value = value.filter(|v| v.is_finite());
        let point = Point {
            t,
            value: value.map_or(f32::NAN, |v| v as f32),
            covers: covers as f32,
        };
        self.last = Some(point);
        if self.raw_capacity > 0 {
            if self.raw.len() == self.raw_capacity {
                self.raw.pop_front();
            } else if self.raw.len() == self.raw.capacity() {
                self.raw
                    .reserve_exact(grown_capacity(self.raw.len(), self.raw_capacity) - self.raw.len());
            }
            self.raw.push_back(point);
        }
        while self
            .raw
            .front()
            .is_some_and(|p| p.t < t - RAW_SPAN.min(self.retention))
        {
            self.raw.pop_front();
        }
        let Some(value) = value else { return };
        let retention = self.retention;
        for tier in &mut self.tiers {
            let number = tier.number_at(t);
            let newest = tier.buckets.back().map(|b| tier.number(b));
            match tier.buckets.back_mut() {
                Some(bucket) if newest == Some(number) => {
                    let covered = bucket.covered + covers as f32;
                    bucket.mean += (value as f32 - bucket.mean) * (covers as f32 / covered);
                    bucket.covered = covered;
                    bucket.min = bucket.min.min(value as f32);
                    bucket.max = bucket.max.max(value as f32);
                    bucket.last = value as f32;
                }
                _ => {
                    if tier.buckets.len() == tier.capacity {
                        tier.buckets.pop_front();
                    } else if tier.buckets.len() == tier.buckets.capacity() {
                        let grown = grown_capacity(tier.buckets.len(), tier.capacity);
                        tier.buckets.reserve_exact(grown - tier.buckets.len());
                    }
                    if tier.buckets.is_empty() {
                        tier.origin = number;
                    }
                    let Ok(slot) = u32::try_from(number - tier.origin) else {
                        // Slots last 13 years at 0.1 s buckets; past that, count afresh.
                        tier.buckets.clear();
                        continue;
                    };
                    tier.buckets.push_back(Bucket {
                        slot,
                        mean: value as f32,
                        covered: covers as f32,
                        min: value as f32,
                        max: value as f32,
                        last: value as f32,
                    });
                }
            }
            while tier
                .buckets
                .front()
                .is_some_and(|b| tier.start(b) + tier.width < t - retention)
            {
                tier.buckets.pop_front();
            }
        }
    }

    /// Aggregates over `(from, to]`, from the finest data that reaches back to `from`;
    /// `None` when no reading falls inside.
    pub fn window(&self, from: f64, to: f64) -> Option<Aggregate> {
        let span = to - from;
        if span <= 0.0 {
            return None;
        }
        match self.source_for(from) {
            Some(tier) => tier_window(tier, from, to),
            None => self.raw_window(from, to),
        }
    }

    /// The data that reaches back to `from`: the raw tier (`None`) if it does, else the
    /// finest aggregate tier that does, else whichever reaches furthest back.
    fn source_for(&self, from: f64) -> Option<&Tier> {
        let raw_start = self
            .raw
            .front()
            .map_or(f64::INFINITY, |p| p.t - f64::from(p.covers));
        if raw_start <= from + self.nominal {
            return None;
        }
        let start = |tier: &Tier| tier.buckets.front().map_or(f64::INFINITY, |b| tier.start(b));
        if let Some(tier) = self.tiers.iter().find(|tier| start(tier) <= from) {
            return Some(tier);
        }
        // Nothing reaches back far enough: a tier only if it holds clearly older data.
        self.tiers
            .iter()
            .filter(|tier| start(tier) + tier.width < raw_start)
            .min_by(|a, b| start(a).total_cmp(&start(b)))
    }

    fn raw_window(&self, from: f64, to: f64) -> Option<Aggregate> {
        let mut acc = Accumulator::default();
        for point in self.raw.iter().filter(|p| p.t > from && p.t <= to) {
            if point.value.is_nan() {
                continue;
            }
            let value = f64::from(point.value);
            let weight = f64::from(point.covers).min(point.t - from);
            acc.add(value, weight, value, value, value);
        }
        acc.finish(to - from)
    }

    /// Means of `parts` equal slices of `(from, to]`, oldest first; `None` for a slice
    /// without readings.
    pub fn slices(&self, from: f64, to: f64, parts: usize) -> Vec<Option<f64>> {
        let width = (to - from) / parts.max(1) as f64;
        (0..parts)
            .map(|i| {
                let start = from + width * i as f64;
                self.window(start, start + width).map(|a| a.mean)
            })
            .collect()
    }

    /// `(time, value)` of the readings after `from`, gaps as `None`: what charts draw.
    pub fn points_since(&self, from: f64) -> Vec<(f64, Option<f64>)> {
        let raw: Vec<(f64, Option<f64>)> = self
            .raw
            .iter()
            .filter(|p| p.t > from)
            .map(|p| (p.t, Some(f64::from(p.value)).filter(|v| v.is_finite())))
            .collect();
        let Some(tier) = self.source_for(from) else {
            return raw;
        };
        // Older than the raw tier: bucket means of the tier that reaches back.
        let raw_start = self.raw.front().map_or(f64::INFINITY, |p| p.t);
        let latest = self.last.map_or(f64::INFINITY, |p| p.t);
        let mut out: Vec<(f64, Option<f64>)> = tier
            .buckets
            .iter()
            .map(|b| (tier.start(b) + tier.width, b))
            .filter(|&(end, _)| end > from && end <= raw_start)
            // The newest bucket is still filling: draw it at its latest reading.
            .map(|(end, b)| (end.min(latest), bucket_mean(b)))
            .collect();
        out.extend(raw);
        out
    }

    /// Heap bytes held, counted from the containers' capacities.
    pub fn memory_bytes(&self) -> usize {
        self.raw.capacity() * size_of::<Point>()
            + self
                .tiers
                .iter()
                .map(|t| t.buckets.capacity() * size_of::<Bucket>() + size_of::<Tier>())
                .sum::<usize>()
    }
}

/// The capacity a full buffer of `len` grows to: double, but never past `limit`, the most it
/// will hold (doubling would overshoot it by up to twice, in every one of many series).
fn grown_capacity(len: usize, limit: usize) -> usize {
    (len * 2).max(4).min(limit).max(len + 1)
}

fn bucket_mean(bucket: &Bucket) -> Option<f64> {
    (bucket.covered > 0.0).then(|| f64::from(bucket.mean))
}

fn tier_window(tier: &Tier, from: f64, to: f64) -> Option<Aggregate> {
    let mut acc = Accumulator::default();
    for bucket in &tier.buckets {
        let start = tier.start(bucket);
        let end = start + tier.width;
        let overlap = end.min(to) - start.max(from);
        if overlap <= 0.0 {
            continue;
        }
        let Some(mean) = bucket_mean(bucket) else { continue };
        // Part of a bucket counts in proportion to the part of its width inside the window.
        let weight = f64::from(bucket.covered) * overlap / tier.width;
        acc.add(
            mean,
            weight,
            f64::from(bucket.min),
            f64::from(bucket.max),
            f64::from(bucket.last),
        );
    }
    acc.finish(to - from)
}

#[derive(Debug, Default)]
struct Accumulator {
    weighted_sum: f64,
    weight: f64,
    min: Option<f64>,
    max: Option<f64>,
    first: Option<f64>,
    last: Option<f64>,
}

impl Accumulator {
    fn add(&mut self, mean: f64, weight: f64, min: f64, max: f64, last: f64) {
        self.weighted_sum += mean * weight;
        self.weight += weight;
        self.min = Some(self.min.map_or(min, |m| m.min(min)));
        self.max = Some(self.max.map_or(max, |m| m.max(max)));
        self.first.get_or_insert(mean);
        self.last = Some(last);
    }

    fn finish(self, span: f64) -> Option<Aggregate> {
        let (min, max, first, last) = (self.min?, self.max?, self.first?, self.last?);
        Some(Aggregate {
            mean: if self.weight > 0.0 {
                self.weighted_sum / self.weight
            } else {
                last
            },
            min,
            max,
            first,
            last,
            coverage: (self.weight / span).clamp(0.0, 1.0),
        })
    }
}

/// What is recorded per device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, strum::EnumCount)]
pub enum DeviceMetric {
    /// Percent; the interval mean from the driver's sample buffer where there is one.
    Utilization,
    /// Memory-bandwidth utilization, percent.
    MemoryBandwidth,
    /// Used memory as a percentage of the total.
    MemoryPercent,
    /// Used memory in MiB.
    MemoryMib,
    /// Degrees Celsius.
    Temperature,
    /// Watts; the interval mean where the driver offers power samples.
    Power,
    /// Critical Xid errors (see [`crate::model::is_critical_xid`]) counted since gputop
    /// began watching the GPU's events: a count that only grows.
    CriticalXids,
}

impl DeviceMetric {
    /// Every device metric, in the order series are kept.
    pub const ALL: [Self; <Self as strum::EnumCount>::COUNT] = [
        Self::Utilization,
        Self::MemoryBandwidth,
        Self::MemoryPercent,
        Self::MemoryMib,
        Self::Temperature,
        Self::Power,
        Self::CriticalXids,
    ];

    /// The reading this metric records from a device.
    pub fn read(self, device: &Device) -> Option<f64> {
        if !device.is_ok() {
            return None;
        }
        let mean_or = |mean: &Reading<f64>, now: Option<f64>| mean.get().or(now);
        match self {
            Self::Utilization => mean_or(
                &device.utilization_gpu_mean_percent,
                device.utilization_gpu_percent.get().map(f64::from),
            ),
            Self::MemoryBandwidth => mean_or(
                &device.utilization_memory_mean_percent,
                device.utilization_memory_percent.get().map(f64::from),
            ),
            Self::MemoryPercent => device.memory_percent(),
            Self::MemoryMib => device.memory_used_bytes.get().map(|used| used as f64 / MIB),
            Self::Temperature => device.temperature_celsius.get().map(f64::from),
            Self::Power => mean_or(&device.power_usage_mean_watts, device.power_usage_watts.get()),
            Self::CriticalXids => device.critical_xids().map(|count| count as f64),
        }
    }
}

/// What is recorded per process (per GPU it uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, strum::EnumCount)]
pub enum ProcessMetric {
    /// GPU memory in MiB.
    GpuMemoryMib,
    /// SM utilization, percent.
    Sm,
    /// CPU, percent of one core.
    Cpu,
}

impl ProcessMetric {
    /// Every process metric, in the order series are kept.
    pub const ALL: [Self; <Self as strum::EnumCount>::COUNT] = [Self::GpuMemoryMib, Self::Sm, Self::Cpu];

    /// The reading this metric records from a process.
    pub fn read(self, process: &GpuProcess) -> Option<f64> {
        match self {
            Self::GpuMemoryMib => process.gpu_memory_bytes.get().map(|b| b as f64 / MIB),
            Self::Sm => process.sm_percent.get().map(f64::from),
            Self::Cpu => process.host.cpu_percent.get(),
        }
    }
}

/// What is recorded for the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, strum::EnumCount)]
pub enum HostMetric {
    /// CPU, percent of all cores.
    Cpu,
    /// Used memory as a percentage of the total.
    MemoryPercent,
}

impl HostMetric {
    /// Every host metric, in the order series are kept.
    pub const ALL: [Self; <Self as strum::EnumCount>::COUNT] = [Self::Cpu, Self::MemoryPercent];

    /// The reading this metric records from a snapshot's host.
    pub fn read(self, snapshot: &Snapshot) -> Option<f64> {
        let host = &snapshot.host;
        match self {
            Self::Cpu => host.cpu_percent.get(),
            Self::MemoryPercent => match (host.memory_used_bytes.get(), host.memory_total_bytes.get()) {
                (Some(used), Some(total)) if total > 0 => Some(used as f64 * 100.0 / total as f64),
                _ => None,
            },
        }
    }
}

const MIB: f64 = 1024.0 * 1024.0;

#[derive(Debug, Clone, PartialEq)]
struct ProcessSeries {
    /// In [`ProcessMetric::ALL`]'s order; held in place, not behind a pointer: every
    /// refresh updates every process's series, and each pointer is a cache miss.
    series: [Series; ProcessMetric::ALL.len()],
    last_seen: f64,
    /// Whether it held the GPU in the latest snapshot.
    present: bool,
}

/// Every series gputop keeps, fed one snapshot at a time.
#[derive(Debug, Clone, PartialEq)]
pub struct History {
    refresh: f64,
    sample_interval: f64,
    retention: f64,
    /// Per device index, one series per [`DeviceMetric::ALL`].
    devices: Vec<Vec<Series>>,
    processes: HashMap<ProcessKey, ProcessSeries>,
    host: Vec<Series>,
    /// Per device index, whether any process held it in the latest snapshot.
    occupied: Vec<bool>,
    now: Option<f64>,
}

/// Seconds since the Unix epoch of a snapshot.
pub fn timestamp(snapshot: &Snapshot) -> f64 {
    snapshot
        .taken_at
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl History {
    /// `refresh` is the seconds between snapshots.
    pub fn new(settings: &HistorySettings, refresh: f64) -> Self {
        let retention = settings.retention_time as f64;
        Self {
            refresh,
            sample_interval: settings.sample_interval as f64,
            retention,
            devices: Vec::new(),
            processes: HashMap::new(),
            host: HostMetric::ALL
                .iter()
                .map(|_| Series::new(refresh, Some(settings.sample_interval as f64), retention))
                .collect(),
            occupied: Vec::new(),
            now: None,
        }
    }

    /// Adds `snapshot`'s readings to every series, and forgets processes gone for a while.
    pub fn record(&mut self, snapshot: &Snapshot) {
        let t = timestamp(snapshot);
        self.now = Some(t);
        for device in &snapshot.devices {
            let index = device.index as usize;
            while self.devices.len() <= index {
                self.devices.push(
                    DeviceMetric::ALL
                        .iter()
                        .map(|_| Series::new(self.refresh, Some(self.sample_interval), self.retention))
                        .collect(),
                );
            }
            for (series, metric) in self.devices[index].iter_mut().zip(DeviceMetric::ALL) {
                series.push(t, metric.read(device));
            }
        }
        self.occupied = vec![false; self.devices.len()];
        for entry in self.processes.values_mut() {
            entry.present = false;
        }
        for process in &snapshot.processes {
            if let Some(slot) = self.occupied.get_mut(process.gpu_index as usize) {
                *slot = true;
            }
            let refresh = self.refresh;
            let entry = self
                .processes
                .entry(ProcessKey::of(process))
                .or_insert_with(|| ProcessSeries {
                    series: ProcessMetric::ALL.map(|_| Series::coarse(refresh, PROCESS_BUCKET, RAW_SPAN)),
                    last_seen: t,
                    present: true,
                });
            entry.last_seen = t;
            entry.present = true;
            for (series, metric) in entry.series.iter_mut().zip(ProcessMetric::ALL) {
                series.push(t, metric.read(process));
            }
        }
        self.processes.retain(|_, p| t - p.last_seen <= PROCESS_GRACE);
        for (series, metric) in self.host.iter_mut().zip(HostMetric::ALL) {
            series.push(t, metric.read(snapshot));
        }
    }

    /// Seconds since the epoch of the latest snapshot recorded.
    pub fn now(&self) -> Option<f64> {
        self.now
    }

    /// How many GPUs have series (one more than the highest index seen).
    pub fn device_count(&self) -> usize {
        self.devices.len()
    }

    /// GPU `index`'s series of `metric`, if the GPU was seen.
    pub fn device(&self, index: u32, metric: DeviceMetric) -> Option<&Series> {
        let position = DeviceMetric::ALL.iter().position(|m| *m == metric)?;
        self.devices.get(index as usize).map(|series| &series[position])
    }

    /// Whether any process held the device in the latest snapshot.
    pub fn occupied(&self, index: u32) -> bool {
        self.occupied.get(index as usize).copied().unwrap_or(false)
    }

    /// The series of `metric` for the process `key`, if it was seen lately.
    pub fn process(&self, key: &ProcessKey, metric: ProcessMetric) -> Option<&Series> {
        let position = ProcessMetric::ALL.iter().position(|m| *m == metric)?;
        self.processes.get(key).map(|p| &p.series[position])
    }

    /// The processes in the latest snapshot.
    pub fn present_processes(&self) -> impl Iterator<Item = &ProcessKey> {
        self.processes.iter().filter(|(_, p)| p.present).map(|(k, _)| k)
    }

    /// The host's series of `metric`.
    pub fn host(&self, metric: HostMetric) -> &Series {
        let position = HostMetric::ALL.iter().position(|m| *m == metric).unwrap_or(0);
        &self.host[position]
    }

    /// Heap bytes held by every series.
    pub fn memory_bytes(&self) -> usize {
        let devices: usize = self.devices.iter().flatten().map(Series::memory_bytes).sum();
        let processes = self.process_memory_bytes();
        let host: usize = self.host.iter().map(Series::memory_bytes).sum();
        devices + processes + host
    }

    /// Heap bytes held by the processes' series.
    pub fn process_memory_bytes(&self) -> usize {
        self.processes
            .values()
            .flat_map(|p| &p.series)
            .map(Series::memory_bytes)
            .sum()
    }

    /// Heap bytes held by one device's series.
    pub fn device_memory_bytes(&self, index: u32) -> usize {
        self.devices
            .get(index as usize)
            .map_or(0, |series| series.iter().map(Series::memory_bytes).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each `ALL` is as long as its enum has variants (the compiler checks that); with no
    /// variant twice, each holds every one.
    #[test]
    fn every_metric_list_names_each_metric_once() {
        fn unique<T: Ord + Copy>(all: &[T]) -> bool {
            let mut sorted = all.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            sorted.len() == all.len()
        }
        assert!(unique(&DeviceMetric::ALL));
        assert!(unique(&ProcessMetric::ALL));
        assert!(unique(&HostMetric::ALL));
    }

    fn feed(series: &mut Series, from: f64, to: f64, step: f64, value: impl Fn(f64) -> Option<f64>) {
        let mut t = from;
        while t <= to + 1e-9 {
            series.push(t, value(t));
            t += step;
        }
    }

    #[test]
    fn window_mean_is_time_weighted_and_reports_coverage() {
        let mut series = Series::new(1.0, Some(10.0), 3600.0);
        // 10 s at 10, then 20 s at 40.
        feed(&mut series, 1.0, 30.0, 1.0, |t| {
            Some(if t <= 10.0 { 10.0 } else { 40.0 })
        });
        let all = series.window(0.0, 30.0).unwrap();
        assert!((all.mean - 30.0).abs() < 1e-9, "{all:?}");
        assert_eq!((all.min, all.max, all.first, all.last), (10.0, 40.0, 10.0, 40.0));
        assert!((all.coverage - 1.0).abs() < 1e-9);
        let late = series.window(20.0, 30.0).unwrap();
        assert_eq!(late.mean, 40.0);
    }

    #[test]
    fn gaps_lower_coverage_and_missing_readings_cover_nothing() {
        let mut series = Series::new(1.0, None, 600.0);
        feed(&mut series, 1.0, 30.0, 1.0, |t| (t <= 10.0).then_some(5.0));
        let window = series.window(0.0, 30.0).unwrap();
        assert!((window.coverage - 10.0 / 30.0).abs() < 1e-9, "{window:?}");
        assert!(series.window(15.0, 30.0).is_none(), "no readings: no aggregate");
        // A reading after a long silence covers at most two intervals.
        series.push(100.0, Some(7.0));
        let after = series.window(40.0, 100.0).unwrap();
        assert!((after.coverage - 2.0 / 60.0).abs() < 1e-9, "{after:?}");
    }

    #[test]
    fn older_windows_come_from_coarser_tiers() {
        let mut series = Series::new(1.0, Some(1.0), 86_400.0);
        // Two hours: the first hour at 20, the second at 60.
        feed(&mut series, 1.0, 7200.0, 1.0, |t| {
            Some(if t <= 3600.0 { 20.0 } else { 60.0 })
        });
        let first_hour = series.window(0.0, 3600.0).unwrap();
        assert!((first_hour.mean - 20.0).abs() < 0.5, "{first_hour:?}");
        assert!(first_hour.coverage > 0.95, "{first_hour:?}");
        let both = series.window(0.0, 7200.0).unwrap();
        assert!((both.mean - 40.0).abs() < 0.5, "{both:?}");
        let points = series.points_since(0.0);
        assert!(
            points.len() < 2000,
            "older data is drawn from buckets: {}",
            points.len()
        );
        assert!(points.first().unwrap().0 < 700.0);
    }

    #[test]
    fn a_tier_of_fewer_than_four_buckets_fills_and_rolls() {
        // history.retention_time = 60 with sample_interval = 30: one tier of two buckets.
        let mut series = Series::new(1.0, Some(30.0), 60.0);
        for second in 1..=300u32 {
            series.push(f64::from(second), Some(f64::from(second)));
        }
        assert_eq!(series.tiers[0].buckets.len(), 2);
        assert!(series.tiers[0].buckets.capacity() < 4);
        let both = tier_window(&series.tiers[0], 270.0, 330.0).unwrap();
        assert_eq!((both.min, both.max), (270.0, 300.0));
    }

    #[test]
    fn buffers_grow_to_what_they_hold_and_no_further() {
        // Raw readings: 901 over 15 minutes at 1 s, where doubling would reserve 1024.
        let mut series = Series::new(1.0, None, 86_400.0);
        for second in 1..=2000u32 {
            series.push(f64::from(second), Some(1.0));
        }
        assert_eq!(series.raw.capacity(), series.raw_capacity);
        // A process series: one tier of 90 buckets, where doubling would reserve 128.
        let mut series = Series::coarse(1.0, PROCESS_BUCKET, RAW_SPAN);
        for second in 1..=2000u32 {
            series.push(f64::from(second), Some(1.0));
        }
        assert_eq!(series.tiers.len(), 1);
        assert_eq!(series.tiers[0].buckets.capacity(), 90);
    }

    #[test]
    fn memory_stays_bounded_over_days_of_readings() {
        let settings = HistorySettings {
            retention_time: 86_400,
            sample_interval: 1,
        };
        let mut series = Series::new(1.0, Some(settings.sample_interval as f64), 86_400.0);
        let mut after_a_day = 0;
        // Three days of one reading a second.
        for second in 1..=3 * 86_400u32 {
            series.push(f64::from(second), Some(f64::from(second % 97)));
            if second == 86_400 {
                after_a_day = series.memory_bytes();
            }
        }
        assert_eq!(
            series.memory_bytes(),
            after_a_day,
            "no growth after the first day"
        );
        assert!(after_a_day < 256 * 1024, "{after_a_day} bytes for one series");
        let old = series.window(86_400.0, 2.0 * 86_400.0);
        assert!(old.is_none(), "data older than the retention time is gone");
        assert!(series.window(2.5 * 86_400.0, 3.0 * 86_400.0).is_some());
    }
}

//! The scenario engine: every simulated value as a pure function of (scenario, time, gpu, field).
//!
//! Shared by the C ABI exports (`ffi`) and by gputop's built-in demo, so both show the same
//! machine. Nothing here mutates per call, apart from a memo of the energy integral.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::codes::{Code, GPU_IS_LOST, NOT_SUPPORTED};
use crate::scenario::{Expr, Gpu, Interp, MigSetting, Process, ProcessType, SampleClock, Scenario, Xid};

/// `nvmlSamplingType_t` values the simulator serves.
pub mod sampling {
    pub const TOTAL_POWER: u32 = 0;
    pub const GPU_UTILIZATION: u32 = 1;
    pub const MEMORY_UTILIZATION: u32 = 2;
    pub const ENC_UTILIZATION: u32 = 3;
    pub const DEC_UTILIZATION: u32 = 4;
    pub const PROCESSOR_CLK: u32 = 5;
    pub const MEMORY_CLK: u32 = 6;
}

/// How many entries the driver keeps in each `nvmlDeviceGetSamples` ring buffer.
pub const SAMPLE_BUFFER_LEN: u64 = 120;

/// SplitMix64 finaliser: a well-mixed 64-bit hash step.
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn hash_str(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The key of field `field` of the `index`-th process, for [`eval`]. Only a `random`
/// expression uses it, so only one gets it made: each call answers for every process, and
/// clients call several times a second.
fn process_key(expr: &Expr, index: usize, field: &str) -> String {
    match expr {
        Expr::Random { .. } => format!("process{index}.{field}"),
        _ => String::new(),
    }
}

/// Evaluates an expression at scenario time `t`. `key` identifies the field for `random`.
pub fn eval(expr: &Expr, t: f64, seed: u64, gpu: usize, key: &str) -> Result<f64, Code> {
    match expr {
        Expr::Constant(v) => Ok(*v),
        Expr::Keyframes {
            points,
            interp,
            repeat,
        } => {
            let t = repeat.map_or(t, |period| t.rem_euclid(period));
            Ok(keyframe_value(points, *interp, t))
        }
        Expr::Sine {
            mean,
            amplitude,
            period,
            phase,
        } => Ok(mean + amplitude * (std::f64::consts::TAU * (t + phase) / period).sin()),
        Expr::Random { min, max, hold } => {
            let bucket = (t / hold).floor() as i64 as u64;
            let h = mix64(seed ^ mix64(gpu as u64) ^ mix64(hash_str(key)) ^ mix64(bucket));
            let unit = (h >> 11) as f64 / (1u64 << 53) as f64;
            Ok(min + unit * (max - min))
        }
        Expr::Error(code) => Err(*code),
        Expr::Unavailable => Err(NOT_SUPPORTED),
    }
}

fn keyframe_value(points: &[(f64, f64)], interp: Interp, t: f64) -> f64 {
    let after = points.partition_point(|(kt, _)| *kt <= t);
    if after == 0 {
        return points[0].1;
    }
    let (t0, v0) = points[after - 1];
    match (interp, points.get(after)) {
        (Interp::Linear, Some(&(t1, v1))) if t1 > t0 => v0 + (v1 - v0) * (t - t0) / (t1 - t0),
        _ => v0,
    }
}

fn clamp_u32(v: f64, max: f64) -> u32 {
    v.clamp(0.0, max).round() as u32
}

/// A process on a GPU at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveProcess {
    pub pid: u32,
    pub kind: ProcessType,
    /// `None` is NVML's "not available".
    pub used_memory: Option<u64>,
    /// The index of the MIG device it runs on, and that device's GPU and compute instance.
    pub mig_device: Option<usize>,
    pub instance_ids: Option<(u32, u32)>,
}

/// Per-process utilisation at one sample tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessSample {
    pub pid: u32,
    pub timestamp_us: u64,
    pub sm: u32,
    pub mem: u32,
    pub enc: u32,
    pub dec: u32,
}

/// Memory figures as `nvmlMemory_v2_t` has them: total = reserved + used + free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryState {
    pub total: u64,
    pub reserved: u64,
    pub used: u64,
    pub free: u64,
}

/// Maps between scenario seconds and wall-clock microseconds since the Unix epoch, and
/// stamps samples on the driver's sample clock.
#[derive(Debug, Clone, Copy)]
pub struct TimeBase {
    /// Wall clock at the moment scenario time was `start`.
    pub wall_origin_us: u64,
    pub start: f64,
    pub speed: f64,
    /// Unix time of the sample clock's zero: 0 for epoch stamps, the boot time for boot
    /// stamps.
    pub sample_clock_zero_us: u64,
}

impl TimeBase {
    /// A time base whose samples are stamped in Unix time.
    pub fn now(start: f64, speed: f64) -> Self {
        Self {
            wall_origin_us: wall_now_us(),
            start,
            speed,
            sample_clock_zero_us: 0,
        }
    }

    /// A time base whose device samples are stamped on `clock`.
    pub fn with_sample_clock(start: f64, speed: f64, clock: SampleClock) -> Self {
        let wall = wall_now_us();
        let zero = match clock {
            SampleClock::Epoch => 0,
            // Boot time as /proc/uptime gives it; a machine without one seems just booted.
            SampleClock::Boot => wall.saturating_sub(uptime_us().unwrap_or(0)),
        };
        Self {
            wall_origin_us: wall,
            start,
            speed,
            sample_clock_zero_us: zero,
        }
    }

    /// Wall-clock µs of scenario time `t`.
    pub fn wall_us(&self, t: f64) -> u64 {
        let offset_us = (t - self.start) / self.speed * 1e6;
        (self.wall_origin_us as f64 + offset_us).max(0.0) as u64
    }

    /// The device-sample stamp of scenario time `t`.
    pub fn sample_us(&self, t: f64) -> u64 {
        self.wall_us(t).saturating_sub(self.sample_clock_zero_us)
    }

    /// Scenario time of wall-clock µs `wall_us`.
    pub fn scenario_t(&self, wall_us: u64) -> f64 {
        self.start + (wall_us as f64 - self.wall_origin_us as f64) / 1e6 * self.speed
    }
}

/// µs since boot, from /proc/uptime.
fn uptime_us() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/uptime").ok()?;
    let seconds: f64 = text.split_whitespace().next()?.parse().ok()?;
    Some((seconds * 1e6) as u64)
}

/// The logical field whose faults a sample buffer shares (power, utilization): a metric
/// the driver cannot read has no samples either.
pub fn sample_field(sample_type: u32) -> Option<&'static str> {
    match sample_type {
        sampling::TOTAL_POWER => Some("power_usage"),
        sampling::GPU_UTILIZATION | sampling::MEMORY_UTILIZATION => Some("utilization"),
        _ => None,
    }
}

pub fn wall_now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A loaded scenario, ready to answer questions about any instant.
#[derive(Debug)]
pub struct Sim {
    pub scenario: Scenario,
    /// Per GPU: cumulative energy in mJ at each whole scenario second, extended on demand.
    energy_memo: Vec<Mutex<Vec<f64>>>,
}

impl Sim {
    pub fn new(scenario: Scenario) -> Self {
        let energy_memo = scenario.gpu.iter().map(|_| Mutex::new(vec![0.0])).collect();
        Self {
            scenario,
            energy_memo,
        }
    }

    pub fn gpu_count(&self) -> usize {
        self.scenario.gpu.len()
    }

    pub fn gpu(&self, index: usize) -> &Gpu {
        &self.scenario.gpu[index]
    }

    /// The error an active fault gives `field` of `gpu` at `t`. A device-wide `GPU_IS_LOST`
    /// (field `*`) wins over everything.
    pub fn fault(&self, gpu: usize, field: &str, t: f64) -> Option<Code> {
        let faults = &self.gpu(gpu).faults;
        let active = |f: &&crate::scenario::Fault| f.active_at(t);
        if let Some(lost) = faults
            .iter()
            .filter(active)
            .find(|f| f.field == "*" && f.error == GPU_IS_LOST)
        {
            return Some(lost.error);
        }
        faults
            .iter()
            .filter(active)
            .find(|f| f.field == field || f.field == "*")
            .map(|f| f.error)
    }

    /// How long a call on `field` of `gpu` blocks at `t` (the longest active hang).
    pub fn hang(&self, gpu: usize, field: &str, t: f64) -> Option<f64> {
        self.gpu(gpu)
            .hangs
            .iter()
            .filter(|h| h.active_at(t) && (h.field == field || h.field == "*"))
            .map(|h| h.seconds)
            .reduce(f64::max)
    }

    /// The Xid errors of `gpu` after scenario time `after`, up to and at `until`.
    pub fn xids(&self, gpu: usize, after: f64, until: f64) -> impl Iterator<Item = &Xid> + '_ {
        self.gpu(gpu)
            .xids
            .iter()
            .filter(move |x| x.at > after && x.at <= until)
    }

    /// Whether the whole GPU is lost at `t`.
    pub fn is_lost(&self, gpu: usize, t: f64) -> bool {
        self.fault(gpu, "", t) == Some(GPU_IS_LOST)
    }

    /// Evaluates a GPU's expression at `t`.
    pub fn value(&self, gpu: usize, expr: &Expr, key: &str, t: f64) -> Result<f64, Code> {
        eval(expr, t, self.scenario.meta.seed, gpu, key)
    }

    /// A percentage field, clamped to 0..=100.
    pub fn percent(&self, gpu: usize, expr: &Expr, key: &str, t: f64) -> Result<u32, Code> {
        self.value(gpu, expr, key, t).map(|v| clamp_u32(v, 100.0))
    }

    /// A non-negative integer field.
    pub fn count(&self, gpu: usize, expr: &Expr, key: &str, t: f64) -> Result<u32, Code> {
        self.value(gpu, expr, key, t)
            .map(|v| clamp_u32(v, f64::from(u32::MAX)))
    }

    /// The memory's temperature; NOT_SUPPORTED where the scenario gives none (GDDR boards).
    pub fn memory_temperature(&self, gpu: usize, t: f64) -> Result<u32, Code> {
        match &self.gpu(gpu).dynamic.memory_temperature {
            Some(expr) => self.count(gpu, expr, "memory_temperature", t),
            None => Err(NOT_SUPPORTED),
        }
    }

    pub fn pstate(&self, gpu: usize, t: f64) -> Result<u32, Code> {
        let p = self.count(gpu, &self.gpu(gpu).dynamic.pstate, "pstate", t)?;
        Ok(if p <= 15 { p } else { 32 })
    }

    fn process_alive(process: &Process, t: f64) -> bool {
        t >= process.start && process.end.is_none_or(|end| t < end)
    }

    /// Processes on `gpu` at `t`, in scenario order.
    pub fn live_processes(&self, gpu: usize, t: f64) -> Vec<LiveProcess> {
        self.gpu(gpu)
            .processes
            .iter()
            .enumerate()
            .filter(|(_, p)| Self::process_alive(p, t))
            .map(|(i, p)| LiveProcess {
                pid: p.pid,
                kind: p.kind,
                used_memory: self
                    .value(
                        gpu,
                        &p.used_memory,
                        &process_key(&p.used_memory, i, "used_memory"),
                        t,
                    )
                    .ok()
                    .map(|v| v.max(0.0) as u64),
                mig_device: p.mig_device,
                instance_ids: p
                    .mig_device
                    .and_then(|m| self.gpu(gpu).mig_devices.get(m))
                    .map(|m| (m.gpu_instance, m.compute_instance)),
            })
            .collect()
    }

    /// Memory of MIG device `mig` of `gpu` at `t`: its processes' memory.
    pub fn mig_memory(&self, gpu: usize, mig: usize, t: f64) -> MemoryState {
        let total = self.gpu(gpu).mig_devices[mig].memory_total;
        let used: u64 = self
            .live_processes(gpu, t)
            .iter()
            .filter(|p| p.mig_device == Some(mig))
            .filter_map(|p| p.used_memory)
            .sum::<u64>()
            .min(total);
        MemoryState {
            total,
            reserved: 0,
            used,
            free: total - used,
        }
    }

    /// The scenario entry for a live process, by PID, on any GPU.
    pub fn find_process(&self, pid: u32, t: f64) -> Option<&Process> {
        self.scenario
            .gpu
            .iter()
            .flat_map(|g| g.processes.iter())
            .find(|p| p.pid == pid && Self::process_alive(p, t))
    }

    pub fn memory(&self, gpu: usize, t: f64) -> Result<MemoryState, Code> {
        let g = self.gpu(gpu);
        let usable = g.memory_total - g.memory_reserved;
        let used = match &g.dynamic.memory_used {
            Some(expr) => self.value(gpu, expr, "memory_used", t)?.max(0.0) as u64,
            None => {
                let processes: u64 = self
                    .live_processes(gpu, t)
                    .iter()
                    .filter_map(|p| p.used_memory)
                    .sum();
                g.memory_base_used + processes
            }
        }
        .min(usable);
        Ok(MemoryState {
            total: g.memory_total,
            reserved: g.memory_reserved,
            used,
            free: usable - used,
        })
    }

    /// Energy in mJ consumed from scenario time 0 to `t`: the power curve integrated over
    /// one-second steps (midpoint rule), plus the partial last second.
    pub fn energy_mj(&self, gpu: usize, t: f64) -> Result<u64, Code> {
        let power = &self.gpu(gpu).dynamic.power_mw;
        let t = t.max(0.0);
        let whole = t.floor() as usize;
        let mut memo = self.energy_memo[gpu].lock().unwrap_or_else(|e| e.into_inner());
        while memo.len() <= whole {
            let second = memo.len() - 1;
            let watts_mid = self.value(gpu, power, "power_mw", second as f64 + 0.5)?.max(0.0);
            let next = memo[second] + watts_mid;
            memo.push(next);
        }
        let partial = self.value(gpu, power, "power_mw", t)?.max(0.0) * (t - whole as f64);
        Ok(self.gpu(gpu).energy_start_mj + (memo[whole] + partial) as u64)
    }

    /// The latest sample tick at or before `t`. NVML's current utilization is the driver's
    /// latest sample, so it is read there, consistent with the sample buffer.
    pub fn latest_sample_tick(&self, t: f64) -> f64 {
        let period = self.scenario.sim.samples_period_ms as f64 / 1000.0;
        (t / period).floor() * period
    }

    /// The expression behind an `nvmlSamplingType_t`, or `None` if it is not simulated.
    pub fn sample_source(&self, gpu: usize, sample_type: u32) -> Option<(&Expr, &'static str)> {
        let d = &self.gpu(gpu).dynamic;
        Some(match sample_type {
            sampling::TOTAL_POWER => (&d.power_mw, "power_mw"),
            sampling::GPU_UTILIZATION => (&d.utilization_gpu, "utilization_gpu"),
            sampling::MEMORY_UTILIZATION => (&d.utilization_memory, "utilization_memory"),
            sampling::ENC_UTILIZATION => (&d.encoder, "encoder"),
            sampling::DEC_UTILIZATION => (&d.decoder, "decoder"),
            sampling::PROCESSOR_CLK => (&d.clocks_mhz.graphics, "clocks_mhz.graphics"),
            sampling::MEMORY_CLK => (&d.clocks_mhz.mem, "clocks_mhz.mem"),
            _ => return None,
        })
    }

    /// The driver's sample buffer for `sample_type` at `t`: `(stamp µs, value)` for the last
    /// [`SAMPLE_BUFFER_LEN`] ticks of `samples_period_ms`, oldest first, only those stamped
    /// after `last_seen_us`. The buffer is the driver's, so it holds the ticks from before
    /// the client started too (NVML docs: samples are kept for a while in a circular
    /// buffer). An idle GPU's utilization buffers run dry: when GPU utilization was 0 at
    /// every tick the buffer spans, they hold no sample (polarsignals/gpu-metrics-agent
    /// PR #37; nvml-wrapper #56).
    pub fn samples(
        &self,
        gpu: usize,
        sample_type: u32,
        t: f64,
        time: &TimeBase,
        last_seen_us: u64,
    ) -> Result<Vec<(u64, u32)>, Code> {
        let utilization = matches!(
            sample_type,
            sampling::GPU_UTILIZATION | sampling::MEMORY_UTILIZATION
        );
        if utilization && !self.utilization_supported(gpu) {
            return Err(NOT_SUPPORTED);
        }
        let (expr, key) = self.sample_source(gpu, sample_type).ok_or(NOT_SUPPORTED)?;
        let is_percent = matches!(
            sample_type,
            sampling::GPU_UTILIZATION
                | sampling::MEMORY_UTILIZATION
                | sampling::ENC_UTILIZATION
                | sampling::DEC_UTILIZATION
        );
        let period = self.scenario.sim.samples_period_ms as f64 / 1000.0;
        let last_tick = (t / period).floor() as i64;
        let first_tick = last_tick - (SAMPLE_BUFFER_LEN as i64 - 1);
        let tick_t = |tick: i64| tick as f64 * period;
        if utilization && self.idle_throughout(gpu, (first_tick..=last_tick).rev().map(tick_t))? {
            return Ok(Vec::new());
        }
        // Newest first, down to the last one the client has seen (stamps only grow with the
        // tick): a driver copies the new entries of its buffer, it does not walk all of it.
        let mut out = Vec::new();
        for tick in (first_tick..=last_tick).rev() {
            let tick_t = tick_t(tick);
            let stamp = time.sample_us(tick_t);
            if stamp <= last_seen_us {
                break;
            }
            let value = self.value(gpu, expr, key, tick_t)?;
            let value = if is_percent {
                clamp_u32(value, 100.0)
            } else {
                clamp_u32(value, f64::from(u32::MAX))
            };
            out.push((stamp, value));
        }
        out.reverse();
        Ok(out)
    }

    /// Whether GPU utilization is 0 at every one of `ticks` (newest first: a busy GPU is
    /// found busy at once; a constant is judged without evaluating each tick).
    fn idle_throughout(&self, gpu: usize, ticks: impl Iterator<Item = f64>) -> Result<bool, Code> {
        let busy = &self.gpu(gpu).dynamic.utilization_gpu;
        if let Expr::Constant(value) = busy {
            return Ok(clamp_u32(*value, 100.0) == 0);
        }
        for t in ticks {
            if self.percent(gpu, busy, "utilization_gpu", t)? != 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Per-process utilisation samples newer than `last_seen_us`: one per live process, taken
    /// at the latest tick of `process_sample_period_ms` at or before `t`.
    pub fn process_samples(
        &self,
        gpu: usize,
        t: f64,
        time: &TimeBase,
        last_seen_us: u64,
    ) -> Vec<ProcessSample> {
        let period = self.scenario.sim.process_sample_period_ms as f64 / 1000.0;
        if t < 0.0 {
            return Vec::new();
        }
        let tick_t = (t / period).floor() * period;
        let stamp = time.wall_us(tick_t);
        if stamp <= last_seen_us {
            return Vec::new();
        }
        let seed = self.scenario.meta.seed;
        self.gpu(gpu)
            .processes
            .iter()
            .enumerate()
            .filter(|(_, p)| Self::process_alive(p, tick_t))
            .map(|(i, p)| {
                let pct = |e: &Expr, name: &str| {
                    eval(e, tick_t, seed, gpu, &process_key(e, i, name)).map_or(0, |v| clamp_u32(v, 100.0))
                };
                ProcessSample {
                    pid: p.pid,
                    timestamp_us: stamp,
                    sm: pct(&p.sm, "sm"),
                    mem: pct(&p.mem, "mem"),
                    enc: pct(&p.enc, "enc"),
                    dec: pct(&p.dec, "dec"),
                }
            })
            .collect()
    }

    /// Device and per-process utilization: real drivers do not report them with MIG on.
    pub fn utilization_supported(&self, gpu: usize) -> bool {
        self.mig(gpu) != MigSetting::Enabled
    }

    pub fn mig(&self, gpu: usize) -> MigSetting {
        self.gpu(gpu).mig
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    fn expr(text: &str) -> Expr {
        let scenario = Scenario::parse(
            &format!("[meta]\nversion = 1\nseed = 7\n[[gpu]]\n[gpu.dynamic]\nutilization_gpu = {text}\n"),
            "test",
            &|_| None,
        )
        .unwrap();
        scenario.gpu[0].dynamic.utilization_gpu.clone()
    }

    #[test]
    fn constants_and_sizes() {
        assert_eq!(eval(&expr("42"), 3.0, 0, 0, "k"), Ok(42.0));
        assert_eq!(
            eval(&expr("\"2 GiB\""), 0.0, 0, 0, "k"),
            Ok(2.0 * 1024.0 * 1024.0 * 1024.0)
        );
    }

    #[test]
    fn keyframes_linear_step_and_repeat() {
        let linear = expr("{ keyframes = [[0, 0], [10, 100]] }");
        assert_eq!(eval(&linear, -1.0, 0, 0, "k"), Ok(0.0));
        assert_eq!(eval(&linear, 2.5, 0, 0, "k"), Ok(25.0));
        assert_eq!(eval(&linear, 99.0, 0, 0, "k"), Ok(100.0));
        let step = expr("{ keyframes = [[0, 5], [1.8, 100]], interp = \"step\", repeat = 2 }");
        assert_eq!(eval(&step, 1.79, 0, 0, "k"), Ok(5.0));
        assert_eq!(eval(&step, 1.9, 0, 0, "k"), Ok(100.0));
        assert_eq!(eval(&step, 2.1, 0, 0, "k"), Ok(5.0));
        assert_eq!(eval(&step, 3.85, 0, 0, "k"), Ok(100.0));
    }

    #[test]
    fn sine_has_its_mean_amplitude_and_period() {
        let sine = expr("{ sine = { mean = 40, amplitude = 30, period = 8 } }");
        let at = |t| eval(&sine, t, 0, 0, "k").unwrap();
        assert!((at(0.0) - 40.0).abs() < 1e-9);
        assert!((at(2.0) - 70.0).abs() < 1e-9);
        assert!((at(6.0) - 10.0).abs() < 1e-9);
        assert!((at(10.0) - at(2.0)).abs() < 1e-9);
    }

    #[test]
    fn random_is_deterministic_held_and_in_range() {
        let random = expr("{ random = { min = 10, max = 20, hold = 2 } }");
        let a = eval(&random, 0.5, 1, 0, "k").unwrap();
        assert_eq!(eval(&random, 1.9, 1, 0, "k").unwrap(), a, "held within a bucket");
        let values: Vec<f64> = (0..200)
            .map(|b| eval(&random, f64::from(b) * 2.0, 1, 0, "k").unwrap())
            .collect();
        assert!(values.iter().all(|v| (10.0..=20.0).contains(v)));
        assert!(values.windows(2).any(|w| w[0] != w[1]), "changes across buckets");
        assert_ne!(eval(&random, 0.5, 2, 0, "k").unwrap(), a, "seed matters");
        assert_ne!(eval(&random, 0.5, 1, 1, "k").unwrap(), a, "gpu matters");
    }

    #[test]
    fn error_expression_fails_with_its_code() {
        assert_eq!(
            eval(&expr("{ error = \"NO_PERMISSION\" }"), 0.0, 0, 0, "k"),
            Err(4)
        );
    }
}

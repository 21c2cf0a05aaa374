//! Seconds each clock event reason (thermal slowdown, power cap, ...) has held each GPU's
//! clocks down since gputop started, integrated over the snapshots as [`super::usage`] is:
//! each snapshot adds the time since the one before to the reasons it shows, and a gap
//! longer than [`super::usage::MAX_GAP_INTERVALS`] refreshes adds nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use super::usage::Elapsed;
use crate::model::{CLOCK_EVENT_REASONS, Snapshot};

/// Seconds per GPU and clock event reason, accumulated over snapshots.
#[derive(Debug, Clone)]
pub struct ClockEvents {
    elapsed: Elapsed,
    /// By GPU index, then by position in [`CLOCK_EVENT_REASONS`].
    seconds: BTreeMap<u32, [f64; CLOCK_EVENT_REASONS.len()]>,
}

impl ClockEvents {
    /// For snapshots `interval` apart.
    pub fn new(interval: Duration) -> Self {
        Self {
            elapsed: Elapsed::new(interval),
            seconds: BTreeMap::new(),
        }
    }

    /// Adds the time since the previous snapshot to each reason `snapshot` shows.
    pub fn record(&mut self, snapshot: &Snapshot) {
        let elapsed = self.elapsed.to(snapshot.taken_at);
        for device in &snapshot.devices {
            let totals = self.seconds.entry(device.index).or_default();
            for reason in device.throttle_reasons.value().into_iter().flatten() {
                if let Some(at) = CLOCK_EVENT_REASONS.iter().position(|(_, name)| name == reason) {
                    totals[at] += elapsed;
                }
            }
        }
    }

    /// Seconds `reason` (one of [`CLOCK_EVENT_REASONS`]' names) held GPU `gpu`'s clocks down.
    pub fn seconds(&self, gpu: u32, reason: &str) -> f64 {
        let at = CLOCK_EVENT_REASONS.iter().position(|(_, name)| *name == reason);
        self.seconds
            .get(&gpu)
            .zip(at)
            .map_or(0.0, |(totals, at)| totals[at])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Reading, testing};
    use std::time::SystemTime;

    #[test]
    fn each_reason_counts_the_seconds_it_was_shown_and_gaps_count_nothing() {
        let mut events = ClockEvents::new(Duration::from_secs(1));
        let at = |second: u64, reasons: &[&str]| {
            let taken_at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + second);
            let device = crate::model::Device::unavailable(0, crate::model::DeviceStatus::Ok, "test");
            let mut snapshot = testing::snapshot(taken_at, vec![device], Vec::new());
            snapshot.devices[0].throttle_reasons =
                Reading::Value(reasons.iter().map(|r| r.to_string()).collect());
            snapshot
        };
        for second in 0..=10 {
            let reasons: &[&str] = if second > 5 {
                &["sw_power_cap", "hw_thermal_slowdown"]
            } else {
                &["sw_power_cap"]
            };
            events.record(&at(second, reasons));
        }
        assert_eq!(events.seconds(0, "sw_power_cap"), 10.0);
        assert_eq!(events.seconds(0, "hw_thermal_slowdown"), 5.0);
        assert_eq!(events.seconds(0, "gpu_idle"), 0.0);
        // A minute unseen (gputop suspended) is not counted.
        events.record(&at(70, &["sw_power_cap"]));
        assert_eq!(events.seconds(0, "sw_power_cap"), 10.0);
        assert_eq!(events.seconds(1, "sw_power_cap"), 0.0, "no such GPU");
    }
}

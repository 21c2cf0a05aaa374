//! Who uses what: per user and per container, the GPUs, GPU memory and processes now, and
//! GPU-seconds, GPU-memory-byte-seconds and GPU energy accumulated since gputop started (or,
//! restored from what an exporter saved, since it first did).
//!
//! Each snapshot adds its figures times the time since the previous one, so a user holding
//! two GPUs for a minute gets 120 GPU-seconds. A GPU's energy goes to the processes on it by
//! their shares of it ([`gpu_shares`]), held over time: when its energy counter advances
//! (NVML reads it every few refreshes), each owner gets the advance times the part of the
//! time since the counter last advanced that its shares cover. A gap longer than
//! [`MAX_GAP_INTERVALS`] refreshes (a suspended gputop) adds nothing: what happened in it
//! was not seen.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::model::wire::{WireContainerUsage, WireUsage, WireUsageTotals, WireUserUsage};
use crate::model::{Container, GpuProcess, Snapshot};

/// Longest gap between snapshots, in refresh intervals, that still counts.
pub const MAX_GAP_INTERVALS: f64 = 3.0;

/// Most owners kept per table; beyond it the longest idle are forgotten (pods churn).
pub const MAX_OWNERS: usize = 4096;

/// Why saved usage totals were refused ([`Accounting::restore`]); nothing of them is taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    /// Another format, or not gputop's.
    #[error("not version 1 of gputop's usage totals")]
    Version,
    /// `users` or `containers` is missing or not an object.
    #[error("{0} is not an object")]
    NotAnObject(&'static str),
    /// A table with more than [`MAX_OWNERS`] owners.
    #[error("{table}: {owners} owners, more than {MAX_OWNERS}")]
    TooMany {
        /// `users` or `containers`.
        table: &'static str,
        /// How many it holds.
        owners: usize,
    },
    /// A time that is not seconds since 1970 (the JSON value).
    #[error("{0} is not a time")]
    NotATime(String),
    /// A total that is negative or not a number.
    #[error("{what}: {value} is not a non-negative number")]
    NotAnAmount {
        /// The owner, or `seconds`.
        what: String,
        /// The JSON value.
        value: String,
    },
}

/// What processes of a process-less, unreadable owner are grouped under.
pub const UNKNOWN_USER: &str = "(unknown)";

/// One user's or one container's use.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    /// GPUs with at least one of its processes, now.
    pub gpus: BTreeSet<u32>,
    /// GPU memory its processes hold now.
    pub memory_bytes: u64,
    /// Its processes holding a GPU now (a process on two GPUs counts once).
    pub processes: usize,
    /// GPU-seconds: each GPU holding one of its processes counts one per second.
    pub gpu_seconds: f64,
    /// Byte-seconds of GPU memory held.
    pub memory_byte_seconds: f64,
    /// Joules of its GPUs' energy that its processes' shares account for.
    pub energy_joules: f64,
    /// When it last held a GPU.
    pub last_active: Option<SystemTime>,
}

/// The seconds each snapshot accounts for: the time since the one before, or none after a
/// gap longer than [`MAX_GAP_INTERVALS`] refreshes (what happened in it was not seen).
#[derive(Debug, Clone)]
pub struct Elapsed {
    last: Option<SystemTime>,
    max_gap: Duration,
}

impl Elapsed {
    /// For snapshots `interval` apart.
    pub fn new(interval: Duration) -> Self {
        Self {
            last: None,
            max_gap: interval.mul_f64(MAX_GAP_INTERVALS).max(Duration::from_secs(1)),
        }
    }

    /// The seconds a snapshot taken at `now` accounts for.
    pub fn to(&mut self, now: SystemTime) -> f64 {
        let elapsed = self
            .last
            .and_then(|last| now.duration_since(last).ok())
            .filter(|gap| *gap <= self.max_gap)
            .map_or(0.0, |gap| gap.as_secs_f64());
        if self.last.is_none_or(|last| now > last) {
            self.last = Some(now);
        }
        elapsed
    }
}

/// Usage per user and per container since gputop started.
#[derive(Debug, Clone)]
pub struct Accounting {
    /// The first snapshot's time.
    pub since: Option<SystemTime>,
    elapsed: Elapsed,
    /// Seconds of time the accumulations cover.
    pub seconds: f64,
    /// By user name.
    pub users: BTreeMap<String, Usage>,
    /// By container label.
    pub containers: BTreeMap<String, Usage>,
    /// Per GPU by index: its energy counter and the shares of it held since it last advanced.
    energy: BTreeMap<u32, EnergyShares>,
}

/// One GPU's energy counter where it last advanced, and since then: the seconds seen, and
/// per user and per container the seconds its processes' shares of the GPU add up to.
#[derive(Debug, Clone)]
struct EnergyShares {
    counter_joules: f64,
    seconds: f64,
    users: BTreeMap<String, f64>,
    containers: BTreeMap<String, f64>,
}

impl EnergyShares {
    fn from(counter_joules: f64) -> Self {
        Self {
            counter_joules,
            seconds: 0.0,
            users: BTreeMap::new(),
            containers: BTreeMap::new(),
        }
    }
}

/// What the processes of a snapshot are grouped by before they are named: borrowed from the
/// snapshot, so each owner's name is made once per refresh, not once per process.
fn user_of(p: &GpuProcess) -> Option<&str> {
    p.host.user.as_deref()
}

fn user_name(user: Option<&str>) -> String {
    user.unwrap_or(UNKNOWN_USER).to_string()
}

fn container_of(p: &GpuProcess) -> Option<&Container> {
    p.host.container.as_deref()
}

/// What one owner holds in one snapshot.
#[derive(Debug, Default)]
struct Held {
    gpus: BTreeSet<u32>,
    memory_bytes: u64,
    /// Per GPU, the shares of it its processes hold (see [`gpu_shares`]).
    shares: BTreeMap<u32, f64>,
    /// Sorted and without repeats once complete (a process on two GPUs is one process).
    pids: Vec<u32>,
}

/// Each process's share of its GPU, by position in `snapshot.processes`: its part of the
/// SM utilization the GPU's processes add up to, when each of them reports one and they add
/// up to more than zero; an equal part otherwise (processes holding an idle GPU hold its
/// idle power). The shares of a GPU's processes add up to 1.
pub fn gpu_shares(snapshot: &Snapshot) -> Vec<f64> {
    // Per GPU: its processes, the SM utilization they add up to, and whether all gave one.
    let mut gpus: BTreeMap<u32, (usize, u64, bool)> = BTreeMap::new();
    for p in &snapshot.processes {
        let gpu = gpus.entry(p.gpu_index).or_insert((0, 0, true));
        gpu.0 += 1;
        match p.sm_percent.get() {
            Some(sm) => gpu.1 += u64::from(sm),
            None => gpu.2 = false,
        }
    }
    snapshot
        .processes
        .iter()
        .map(|p| {
            let (count, sm_sum, all_known) = gpus[&p.gpu_index];
            match p.sm_percent.get() {
                Some(sm) if all_known && sm_sum > 0 => f64::from(sm) / sm_sum as f64,
                _ => 1.0 / count as f64,
            }
        })
        .collect()
}

impl Accounting {
    /// Accounting for snapshots `interval` apart.
    pub fn new(interval: Duration) -> Self {
        Self {
            since: None,
            elapsed: Elapsed::new(interval),
            seconds: 0.0,
            users: BTreeMap::new(),
            containers: BTreeMap::new(),
            energy: BTreeMap::new(),
        }
    }

    /// Takes each GPU's energy counter: a GPU whose counter cannot be read, went back (the
    /// driver reloaded) or comes after a gap starts counting again from this snapshot; the
    /// rest add `elapsed` to the time their shares are counted over.
    fn read_energy_counters(&mut self, snapshot: &Snapshot, elapsed: f64) {
        self.energy.retain(|index, _| {
            snapshot
                .devices
                .iter()
                .any(|d| d.index == *index && d.energy_joules.get().is_some())
        });
        for d in &snapshot.devices {
            let Some(counter) = d.energy_joules.get() else {
                continue;
            };
            let shares = self
                .energy
                .entry(d.index)
                .or_insert_with(|| EnergyShares::from(counter));
            if counter < shares.counter_joules || elapsed == 0.0 {
                *shares = EnergyShares::from(counter);
            } else {
                shares.seconds += elapsed;
            }
        }
    }

    /// Where a GPU's counter advanced: the advance to each owner by the part of the time since
    /// its last advance that the owner's shares cover, then counting again from here.
    fn share_energy(&mut self, snapshot: &Snapshot) {
        for d in &snapshot.devices {
            let (Some(counter), Some(shares)) = (d.energy_joules.get(), self.energy.get_mut(&d.index)) else {
                continue;
            };
            if counter <= shares.counter_joules || shares.seconds <= 0.0 {
                continue;
            }
            let joules = counter - shares.counter_joules;
            for (table, held) in [
                (&mut self.users, &shares.users),
                (&mut self.containers, &shares.containers),
            ] {
                for (owner, seconds) in held {
                    if let Some(usage) = table.get_mut(owner) {
                        usage.energy_joules += joules * seconds / shares.seconds;
                    }
                }
            }
            *shares = EnergyShares::from(counter);
        }
    }

    /// Adds a snapshot.
    pub fn record(&mut self, snapshot: &Snapshot) {
        let now = snapshot.taken_at;
        self.since.get_or_insert(now);
        let elapsed = self.elapsed.to(now);
        self.seconds += elapsed;
        self.read_energy_counters(snapshot, elapsed);
        let shares = gpu_shares(snapshot);
        let users = Self::current(snapshot, &shares, user_of, user_name);
        let containers = Self::current(snapshot, &shares, container_of, |c| {
            Container::label_of(c).to_string()
        });
        // Which of a GPU's energy shares each table's owners hold.
        type OwnersOf = fn(&mut EnergyShares) -> &mut BTreeMap<String, f64>;
        let (of_users, of_containers): (OwnersOf, OwnersOf) = (|e| &mut e.users, |e| &mut e.containers);
        for (table, current, owners_of) in [
            (&mut self.users, users, of_users),
            (&mut self.containers, containers, of_containers),
        ] {
            for usage in table.values_mut() {
                usage.gpus.clear();
                usage.memory_bytes = 0;
                usage.processes = 0;
            }
            for (owner, held) in current {
                for (gpu, share) in &held.shares {
                    // Not where the counter starts again with this snapshot (no seconds yet).
                    if let Some(energy) = self.energy.get_mut(gpu).filter(|e| e.seconds > 0.0) {
                        *owners_of(energy).entry(owner.clone()).or_default() += share * elapsed;
                    }
                }
                let usage = table.entry(owner).or_default();
                usage.gpu_seconds += held.gpus.len() as f64 * elapsed;
                usage.memory_byte_seconds += held.memory_bytes as f64 * elapsed;
                usage.gpus = held.gpus;
                usage.memory_bytes = held.memory_bytes;
                usage.processes = held.pids.len();
                usage.last_active = Some(now);
            }
            Self::forget_idle(table);
        }
        self.share_energy(snapshot);
    }

    /// GPUs, memory, shares of each GPU (each process's of `shares`) and PIDs per owner in
    /// one snapshot: grouped by `owner`, then named.
    fn current<'a, K: Ord>(
        snapshot: &'a Snapshot,
        shares: &[f64],
        owner: impl Fn(&'a GpuProcess) -> K,
        name: impl Fn(K) -> String,
    ) -> BTreeMap<String, Held> {
        let mut by_owner: BTreeMap<K, Held> = BTreeMap::new();
        for (p, share) in snapshot.processes.iter().zip(shares) {
            let held = by_owner.entry(owner(p)).or_default();
            held.gpus.insert(p.gpu_index);
            held.memory_bytes += p.gpu_memory_bytes.get().unwrap_or(0);
            *held.shares.entry(p.gpu_index).or_default() += share;
            held.pids.push(p.pid);
        }
        // Two owners may share a name (a user name and an unreadable owner's stand-in).
        let mut named: BTreeMap<String, Held> = BTreeMap::new();
        for (key, held) in by_owner {
            let same = named.entry(name(key)).or_default();
            same.gpus.extend(held.gpus);
            same.memory_bytes += held.memory_bytes;
            for (gpu, share) in held.shares {
                *same.shares.entry(gpu).or_default() += share;
            }
            same.pids.extend(held.pids);
        }
        for held in named.values_mut() {
            held.pids.sort_unstable();
            held.pids.dedup();
        }
        named
    }

    fn forget_idle(table: &mut BTreeMap<String, Usage>) {
        while table.len() > MAX_OWNERS {
            let Some(oldest) = table
                .iter()
                .filter(|(_, u)| u.processes == 0)
                .min_by_key(|(_, u)| u.last_active)
                .map(|(k, _)| k.clone())
            else {
                return;
            };
            table.remove(&oldest);
        }
    }

    /// Owners by GPU memory now, then by GPU-seconds.
    pub fn ranked(table: &BTreeMap<String, Usage>) -> Vec<(&String, &Usage)> {
        let mut rows: Vec<(&String, &Usage)> = table.iter().collect();
        rows.sort_by(|a, b| {
            b.1.memory_bytes
                .cmp(&a.1.memory_bytes)
                .then(b.1.gpu_seconds.total_cmp(&a.1.gpu_seconds))
                .then(a.0.cmp(b.0))
        });
        rows
    }

    /// The totals worth keeping across restarts, as JSON: when accounting began, the seconds
    /// it covers, and each owner's GPU-seconds, memory-byte-seconds and last activity.
    pub fn saved(&self) -> Value {
        let unix = |t: Option<SystemTime>| {
            t.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map(|d| d.as_secs_f64())
        };
        let table = |table: &BTreeMap<String, Usage>| -> serde_json::Map<String, Value> {
            table
                .iter()
                .map(|(owner, u)| {
                    let row = json!({
                        "gpu_seconds": u.gpu_seconds,
                        "gpu_memory_byte_seconds": u.memory_byte_seconds,
                        "gpu_energy_joules": u.energy_joules,
                        "last_active": unix(u.last_active),
                    });
                    (owner.clone(), row)
                })
                .collect()
        };
        json!({
            "version": 1,
            "since": unix(self.since),
            "seconds": self.seconds,
            "users": table(&self.users),
            "containers": table(&self.containers),
        })
    }

    /// Adds totals [`Accounting::saved`] wrote to these; `Err` says what is wrong with them
    /// (nothing is taken then). At most [`MAX_OWNERS`] owners a table are taken.
    pub fn restore(&mut self, saved: &Value) -> Result<(), RestoreError> {
        if saved["version"] != 1 {
            return Err(RestoreError::Version);
        }
        let time = |v: &Value| -> Result<Option<SystemTime>, RestoreError> {
            match v {
                Value::Null => Ok(None),
                v => v
                    .as_f64()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .and_then(|s| SystemTime::UNIX_EPOCH.checked_add(Duration::try_from_secs_f64(s).ok()?))
                    .map(Some)
                    .ok_or_else(|| RestoreError::NotATime(v.to_string())),
            }
        };
        let amount = |v: &Value, what: &str| -> Result<f64, RestoreError> {
            v.as_f64()
                .filter(|n| n.is_finite() && *n >= 0.0)
                .ok_or_else(|| RestoreError::NotAnAmount {
                    what: what.to_string(),
                    value: v.to_string(),
                })
        };
        let mut tables = Vec::new();
        for key in ["users", "containers"] {
            let rows = saved[key].as_object().ok_or(RestoreError::NotAnObject(key))?;
            if rows.len() > MAX_OWNERS {
                return Err(RestoreError::TooMany {
                    table: key,
                    owners: rows.len(),
                });
            }
            let mut table = Vec::with_capacity(rows.len());
            for (owner, row) in rows {
                // Saved before energy was counted: none.
                let energy = match &row["gpu_energy_joules"] {
                    Value::Null => 0.0,
                    joules => amount(joules, owner)?,
                };
                table.push((
                    owner.clone(),
                    amount(&row["gpu_seconds"], owner)?,
                    amount(&row["gpu_memory_byte_seconds"], owner)?,
                    energy,
                    time(&row["last_active"])?,
                ));
            }
            tables.push(table);
        }
        let since = time(&saved["since"])?;
        let seconds = amount(&saved["seconds"], "seconds")?;
        self.since = match (since, self.since) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.seconds += seconds;
        for (table, rows) in [&mut self.users, &mut self.containers].into_iter().zip(tables) {
            for (owner, gpu_seconds, memory_byte_seconds, energy_joules, last_active) in rows {
                let usage = table.entry(owner).or_default();
                usage.gpu_seconds += gpu_seconds;
                usage.memory_byte_seconds += memory_byte_seconds;
                usage.energy_joules += energy_joules;
                usage.last_active = usage.last_active.max(last_active);
            }
            Self::forget_idle(table);
        }
        Ok(())
    }

    /// The `usage` object of the JSON report.
    pub fn to_wire(&self) -> WireUsage {
        let totals = |u: &Usage| WireUsageTotals {
            gpus: u.gpus.iter().copied().collect(),
            gpu_memory_bytes: u.memory_bytes,
            processes: u.processes as u64,
            gpu_seconds: (u.gpu_seconds * 1000.0).round() / 1000.0,
            gpu_memory_byte_seconds: u.memory_byte_seconds.round(),
            gpu_energy_joules: (u.energy_joules * 1000.0).round() / 1000.0,
        };
        WireUsage {
            since: self.since.map(crate::format::rfc3339),
            seconds: (self.seconds * 1000.0).round() / 1000.0,
            users: Self::ranked(&self.users)
                .into_iter()
                .map(|(user, u)| WireUserUsage {
                    user: user.clone(),
                    totals: totals(u),
                })
                .collect(),
            containers: Self::ranked(&self.containers)
                .into_iter()
                .map(|(container, u)| WireContainerUsage {
                    container: container.clone(),
                    totals: totals(u),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::testing;
    use std::time::UNIX_EPOCH;

    const GIB: u64 = 1 << 30;

    fn process(pid: u32, gpu: u32, user: &str, gib: u64) -> GpuProcess {
        testing::process(pid, gpu, user, gib * GIB)
    }

    fn at(second: u64, processes: Vec<GpuProcess>) -> Snapshot {
        let taken_at = UNIX_EPOCH + Duration::from_secs(1_800_000_000 + second);
        testing::snapshot(taken_at, Vec::new(), processes)
    }

    #[test]
    fn saved_totals_are_added_back_and_bad_ones_are_refused_whole() {
        let mut first = Accounting::new(Duration::from_secs(1));
        for second in 0..=10 {
            first.record(&at(second, vec![process(10, 0, "alice", 4)]));
        }
        let saved = first.saved();
        let mut second = Accounting::new(Duration::from_secs(1));
        second.restore(&saved).unwrap();
        for second_ in 100..=105 {
            second.record(&at(second_, vec![process(11, 1, "alice", 2)]));
        }
        let alice = &second.users["alice"];
        assert_eq!(alice.gpu_seconds, 15.0, "10 s saved and 5 s since");
        assert_eq!(alice.memory_byte_seconds, (40 * GIB + 10 * GIB) as f64);
        assert_eq!(second.seconds, 15.0);
        assert_eq!(
            second.since, first.since,
            "counting began with the first exporter"
        );
        for bad in [
            json!({"version": 2}),
            json!({"version": 1, "since": null, "seconds": 1.0, "users": {"a": {"gpu_seconds": -1.0,
                   "gpu_memory_byte_seconds": 0.0, "last_active": null}}, "containers": {}}),
            json!({"version": 1, "since": null, "seconds": 1.0, "users": [], "containers": {}}),
        ] {
            let mut fresh = Accounting::new(Duration::from_secs(1));
            assert!(fresh.restore(&bad).is_err(), "{bad}");
            assert!(
                fresh.users.is_empty() && fresh.seconds == 0.0,
                "nothing taken from {bad}"
            );
        }
    }

    #[test]
    fn gpu_seconds_and_byte_seconds_integrate_over_the_snapshots() {
        let mut accounting = Accounting::new(Duration::from_secs(1));
        // alice: two processes on GPU 0 and one on GPU 1; bob: one on GPU 1.
        let busy = || {
            vec![
                process(10, 0, "alice", 4),
                process(11, 0, "alice", 2),
                process(12, 1, "alice", 1),
                process(20, 1, "bob", 8),
            ]
        };
        for second in 0..=60 {
            accounting.record(&at(second, busy()));
        }
        let alice = &accounting.users["alice"];
        assert_eq!(alice.gpus, BTreeSet::from([0, 1]));
        assert_eq!((alice.memory_bytes, alice.processes), (7 * GIB, 3));
        assert!((alice.gpu_seconds - 120.0).abs() < 1e-9, "{}", alice.gpu_seconds);
        assert!((alice.memory_byte_seconds - (7 * GIB * 60) as f64).abs() < 1.0);
        let bob = &accounting.users["bob"];
        assert!((bob.gpu_seconds - 60.0).abs() < 1e-9);
        assert_eq!(accounting.seconds, 60.0);
        // Everyone on the host: one "-" container with all four processes.
        assert_eq!(accounting.containers["-"].processes, 4);
        assert!((accounting.containers["-"].gpu_seconds - 120.0).abs() < 1e-9);

        // bob leaves: his figures now are zero, his accumulation stays.
        accounting.record(&at(61, vec![process(10, 0, "alice", 4)]));
        let bob = &accounting.users["bob"];
        assert_eq!((bob.processes, bob.memory_bytes, bob.gpus.len()), (0, 0, 0));
        assert!((bob.gpu_seconds - 60.0).abs() < 1e-9);
        assert!((accounting.users["alice"].gpu_seconds - 121.0).abs() < 1e-9);
    }

    #[test]
    fn a_process_on_two_gpus_counts_once_and_containers_are_grouped_by_label() {
        let in_container = |mut p: GpuProcess, id: &str| {
            p.host.container = Some(Container::new(crate::model::Runtime::Docker, id).into());
            p
        };
        let mut unreadable = process(40, 1, "x", 1);
        unreadable.host.user = crate::model::Reading::Failed("gone".into());
        let mut accounting = Accounting::new(Duration::from_secs(1));
        accounting.record(&at(
            0,
            vec![
                in_container(process(30, 0, "carol", 1), "3f2a1b9c0d12"),
                in_container(process(30, 1, "carol", 2), "3f2a1b9c0d12"),
                in_container(process(31, 1, "dave", 4), "aaaaaaaaaaaa"),
                unreadable,
                process(41, 0, UNKNOWN_USER, 8),
            ],
        ));
        let carol = &accounting.users["carol"];
        assert_eq!((carol.processes, carol.memory_bytes), (1, 3 * GIB));
        assert_eq!(carol.gpus, BTreeSet::from([0, 1]));
        let docker = &accounting.containers["docker:3f2a1b9c0d12"];
        assert_eq!((docker.processes, docker.memory_bytes), (1, 3 * GIB));
        assert_eq!(accounting.containers["docker:aaaaaaaaaaaa"].processes, 1);
        assert_eq!(accounting.containers["-"].processes, 2);
        // An unreadable owner and one literally named as the stand-in are one row.
        let unknown = &accounting.users[UNKNOWN_USER];
        assert_eq!((unknown.processes, unknown.memory_bytes), (2, 9 * GIB));
        assert_eq!(unknown.gpus, BTreeSet::from([0, 1]));
    }

    /// GPU `index` whose energy counter reads `mj`.
    fn gpu(index: u32, mj: u64) -> crate::model::Device {
        let mut d = crate::model::Device::unavailable(index, crate::model::DeviceStatus::Ok, "test");
        d.energy_joules = crate::model::Reading::Value(mj as f64 / 1000.0);
        d
    }

    fn busy(pid: u32, gpu: u32, user: &str, sm: Option<u32>) -> GpuProcess {
        let mut p = process(pid, gpu, user, 1);
        p.sm_percent = sm.map_or(crate::model::Reading::NotSupported, crate::model::Reading::Value);
        p
    }

    #[test]
    fn each_gpus_energy_goes_to_its_processes_by_their_sm_share() {
        let mut accounting = Accounting::new(Duration::from_secs(1));
        let taken = |second: u64, counters: [u64; 3]| {
            let mut s = at(
                second,
                vec![
                    // GPU 0: alice 75 % of the SM use, bob 25 %.
                    busy(1, 0, "alice", Some(30)),
                    busy(2, 0, "bob", Some(10)),
                    // GPU 1: one process without a figure, so both take half.
                    busy(3, 1, "alice", Some(50)),
                    busy(4, 1, "bob", None),
                    // GPU 2 has no processes: its energy is no one's.
                ],
            );
            s.devices = counters
                .iter()
                .enumerate()
                .map(|(i, mj)| gpu(i as u32, *mj))
                .collect();
            s
        };
        // The first snapshot only reads the counters; then 400 J, 100 J and 50 J in 2 s.
        accounting.record(&taken(0, [1_000_000, 5_000_000, 0]));
        accounting.record(&taken(1, [1_300_000, 5_040_000, 30_000]));
        accounting.record(&taken(2, [1_400_000, 5_100_000, 50_000]));
        let joules = |accounting: &Accounting, user: &str| accounting.users[user].energy_joules;
        assert!(
            (joules(&accounting, "alice") - (300.0 + 50.0)).abs() < 1e-9,
            "{}",
            joules(&accounting, "alice")
        );
        assert!(
            (joules(&accounting, "bob") - (100.0 + 50.0)).abs() < 1e-9,
            "{}",
            joules(&accounting, "bob")
        );
        assert!((accounting.containers["-"].energy_joules - 500.0).abs() < 1e-9);

        // A counter that went back (the driver reloaded) adds nothing, then counts on from
        // there; an idle GPU's energy is split evenly among the processes holding it.
        let idle = |second: u64, mj: u64| {
            let mut s = at(
                second,
                vec![busy(1, 0, "alice", Some(0)), busy(2, 0, "bob", Some(0))],
            );
            s.devices = vec![gpu(0, mj)];
            s
        };
        accounting.record(&idle(3, 10_000));
        accounting.record(&idle(4, 30_000));
        assert!(
            (joules(&accounting, "alice") - 360.0).abs() < 1e-9,
            "{}",
            joules(&accounting, "alice")
        );
        assert!(
            (joules(&accounting, "bob") - 160.0).abs() < 1e-9,
            "{}",
            joules(&accounting, "bob")
        );

        // A counter read every few refreshes: its advance goes to who held the GPU over the
        // time it covers, alice for one second of three and bob for two.
        let alone = |second: u64, user: &str, mj: u64| {
            let mut s = at(second, vec![busy(1, 0, user, Some(90))]);
            s.devices = vec![gpu(0, mj)];
            s
        };
        accounting.record(&alone(5, "alice", 30_000));
        accounting.record(&alone(6, "bob", 30_000));
        accounting.record(&alone(7, "bob", 60_000));
        assert!(
            (joules(&accounting, "alice") - 370.0).abs() < 1e-9,
            "{}",
            joules(&accounting, "alice")
        );
        assert!(
            (joules(&accounting, "bob") - 180.0).abs() < 1e-9,
            "{}",
            joules(&accounting, "bob")
        );

        // Saved and restored with the rest; totals saved before energy was counted read none.
        let mut restored = Accounting::new(Duration::from_secs(1));
        restored.restore(&accounting.saved()).unwrap();
        assert!((restored.users["alice"].energy_joules - 370.0).abs() < 1e-9);
        let mut older = accounting.saved();
        older["users"]["alice"]
            .as_object_mut()
            .unwrap()
            .remove("gpu_energy_joules");
        let mut from_older = Accounting::new(Duration::from_secs(1));
        from_older.restore(&older).unwrap();
        assert_eq!(from_older.users["alice"].energy_joules, 0.0);
        let users = serde_json::to_value(accounting.to_wire()).unwrap()["users"].clone();
        let bob = users
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["user"] == "bob")
            .unwrap();
        assert_eq!(bob["gpu_energy_joules"], 180.0);
    }

    #[test]
    fn a_gap_longer_than_three_intervals_adds_nothing() {
        let mut accounting = Accounting::new(Duration::from_secs(2));
        accounting.record(&at(0, vec![process(1, 0, "alice", 1)]));
        accounting.record(&at(2, vec![process(1, 0, "alice", 1)]));
        accounting.record(&at(100, vec![process(1, 0, "alice", 1)]));
        accounting.record(&at(102, vec![process(1, 0, "alice", 1)]));
        assert!((accounting.users["alice"].gpu_seconds - 4.0).abs() < 1e-9);
        assert_eq!(accounting.seconds, 4.0);
    }

    #[test]
    fn idle_owners_beyond_the_cap_are_forgotten_busy_ones_kept() {
        let mut accounting = Accounting::new(Duration::from_secs(1));
        for i in 0..(MAX_OWNERS as u64 + 10) {
            accounting.record(&at(i, vec![process(1, 0, &format!("u{i}"), 1)]));
        }
        assert_eq!(accounting.users.len(), MAX_OWNERS);
        let last = format!("u{}", MAX_OWNERS + 9);
        assert_eq!(accounting.users[&last].processes, 1);
        assert!(
            !accounting.users.contains_key("u0"),
            "the longest idle went first"
        );
    }
}

//! Host facts: the only module that reads procfs (processes, their environment, the identity
//! a signal is checked against), asks the user database for owners' names, and names
//! `sysinfo` (for the host name and the boot time).
//!
//! Per PID: user, command line, CPU %, resident memory, start and running time, read
//! straight from `/proc/PID/stat` (one small read) and the owner of `/proc/PID` (one stat),
//! with the command line read once per process. Only the PIDs NVML reported are read, never
//! the whole process table. The host's own CPU, memory, load and uptime come from
//! `machine`.

use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use foldhash::{HashMap, HashMapExt};
use sysinfo::System;

pub mod containers;
mod machine;
pub mod pods;
pub mod roots;
mod users;

use crate::model::{Container, GpuProcess, HostFacts, HostStats, PidNamespace, Reading, Runtime};
use containers::{self as container, Namespaces, PidReach};
use machine::MachineReader;
use users::UserNames;
pub use users::user_name_of;

/// What is kept of a process between refreshes.
#[derive(Debug)]
struct Known {
    /// In clock ticks since boot: with the PID, the process's identity.
    start_ticks: u64,
    uid: u32,
    /// Shared with each snapshot's facts of the process, not copied; so are the command
    /// and the container.
    user: Arc<str>,
    command: Arc<str>,
    /// `/proc/PID/stat`, kept open: re-read in place each refresh without a path lookup,
    /// and pinned to this process (a read fails once it has exited).
    stat_file: Option<std::fs::File>,
    container: Option<Arc<Container>>,
    namespace_pid: Option<u32>,
    mapping: PidReach,
    /// CPU ticks used, and when they were read: the next %CPU is the delta.
    cpu_ticks: u64,
    read_at: Instant,
}

/// When a refresh reads the host: to measure %CPU over, and to date processes by.
struct Clock {
    now: Instant,
    epoch_seconds: u64,
}

/// The fields of `/proc/PID/stat` gputop uses.
#[derive(Debug, Clone, PartialEq)]
struct Stat {
    parent_pid: u32,
    cpu_ticks: u64,
    start_ticks: u64,
    rss_pages: u64,
}

/// `/proc/PID/stat` split into the process name (in parentheses, and it may itself hold
/// spaces and parentheses) and the fields after it.
fn split_stat(text: &[u8]) -> Option<(&[u8], &[u8])> {
    let close = memchr::memrchr(b')', text)?;
    let open = text[..close].iter().position(|&b| b == b'(')?;
    Some((&text[open + 1..close], &text[close + 1..]))
}

/// The process name in the bytes of `/proc/PID/stat`.
fn stat_name(text: &[u8]) -> Option<String> {
    split_stat(text).map(|(name, _)| String::from_utf8_lossy(name).into_owned())
}

/// Parses the numbers gputop needs from the bytes of `/proc/PID/stat` as read (read at
/// every refresh for every process: no strings are made, and the fields after the last one
/// used are not looked at).
fn parse_stat(text: &[u8]) -> Option<Stat> {
    let (_, after_name) = split_stat(text)?;
    let mut fields = after_name
        .split(u8::is_ascii_whitespace)
        .filter(|f| !f.is_empty());
    // Field 3 (state) comes first; each `nth` counts from the field after the last taken.
    let mut next = |skip: usize| decimal(fields.nth(skip)?);
    let parent_pid = u32::try_from(next(1)?).ok()?; // field 4
    let user_ticks = next(9)?; // field 14
    let system_ticks = next(0)?; // field 15
    let start_ticks = next(6)?; // field 22
    let rss_pages = next(1)?; // field 24
    Some(Stat {
        parent_pid,
        cpu_ticks: user_ticks.checked_add(system_ticks)?,
        start_ticks,
        rss_pages,
    })
}

/// An unsigned decimal number, all of `digits`; `None` for anything else or an overflow.
/// `/proc/PID/stat` writes a negative RSS as 0, so no field gputop reads has a sign.
fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |number, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        number.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// When the machine booted, seconds since the epoch: `btime` of the procfs root's `stat`
/// (the host's, where `--path.procfs` names it), else as `sysinfo` finds it.
fn boot_time() -> u64 {
    std::fs::read_to_string(roots::proc_path("stat"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("btime ")?.trim().parse().ok())
        })
        .unwrap_or_else(System::boot_time)
}

/// Seconds since the epoch at which a process started, in whole seconds.
fn start_seconds(boot_time: u64, start_ticks: u64, ticks_per_second: u64) -> u64 {
    boot_time + start_ticks / ticks_per_second.max(1)
}

/// When `pid` started, in clock ticks after boot, read now: with the PID, the process's
/// identity. `None` if there is no such process.
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = parse_stat(&std::fs::read(roots::process_path(pid, "stat")).ok()?)?;
    Some(stat.start_ticks)
}

/// When `pid` started, in whole seconds since the epoch, as the process table shows it.
#[cfg(any(test, feature = "testing"))]
pub fn start_time_seconds(pid: u32) -> Option<u64> {
    let stat = parse_stat(&std::fs::read(roots::process_path(pid, "stat")).ok()?)?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(start_seconds(boot_time(), stat.start_ticks, ticks))
}

/// The real owner of the process `pid` now (the owner of `/proc/PID`); `None` if there is no
/// such process.
pub fn owner_uid(pid: u32) -> Option<u32> {
    std::fs::metadata(roots::proc_path(pid.to_string()))
        .ok()
        .map(|m| m.uid())
}

/// Why a process's environment was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvironmentError {
    /// Another user's process, and gputop is not root.
    #[error("no permission to read the environment of PID {0}")]
    NoPermission(u32),
    /// The process is gone.
    #[error("PID {0} has exited")]
    Exited(u32),
}

/// The environment of a process, one `NAME=value` per entry.
pub fn environment(pid: u32) -> Result<Vec<String>, EnvironmentError> {
    match std::fs::read(roots::process_path(pid, "environ")) {
        Ok(bytes) => Ok(bytes
            .split(|b| *b == 0)
            .filter(|v| !v.is_empty())
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            Err(EnvironmentError::NoPermission(pid))
        }
        Err(_) => Err(EnvironmentError::Exited(pid)),
    }
}

/// Reads the host; keeps what it learnt of each process between refreshes.
pub struct HostCollector {
    machine: MachineReader,
    hostname: String,
    users: UserNames,
    known: HashMap<u32, Known>,
    namespaces: Namespaces,
    boot_time: u64,
    ticks_per_second: u64,
    page_size: u64,
    buffer: Vec<u8>,
    /// The kubelet's device allocations, when gputop asks it (see [`pods`]).
    pods: Option<pods::PodWatcher>,
}

impl std::fmt::Debug for HostCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCollector")
            .field("known", &self.known.len())
            .finish()
    }
}

impl Default for HostCollector {
    fn default() -> Self {
        Self::new()
    }
}

impl HostCollector {
    /// A reader that knows no process yet: the first [`HostCollector::fill`] gives no %CPU.
    pub fn new() -> Self {
        // SAFETY: sysconf has no preconditions.
        let (ticks, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        Self {
            machine: MachineReader::new(),
            hostname: System::host_name().unwrap_or_else(|| "localhost".into()),
            users: UserNames::default(),
            known: HashMap::new(),
            namespaces: Namespaces::detect(),
            boot_time: boot_time(),
            ticks_per_second: ticks.max(1) as u64,
            page_size: page.max(1) as u64,
            buffer: Vec::with_capacity(1024),
            pods: None,
        }
    }

    /// Asks the kubelet at `socket` which pods hold the GPUs, from now on (see [`pods`]).
    pub fn watch_pods(&mut self, socket: std::path::PathBuf) -> std::io::Result<()> {
        self.pods = Some(pods::PodWatcher::start(socket)?);
        Ok(())
    }

    /// Names the pods holding `devices` and the pods `processes` run in, as the kubelet
    /// last said; nothing when gputop does not ask it.
    pub fn name_pods(&self, devices: &mut [crate::model::Device], processes: &mut [GpuProcess]) {
        if let Some(watcher) = &self.pods {
            pods::attribute(devices, processes, &watcher.allocations());
        }
    }

    /// The process's stat, through its open file when it has one (same process), else by
    /// path; the file comes back to keep when there is room for it.
    fn read_stat(
        &mut self,
        pid: u32,
        open: Option<std::fs::File>,
        keep: bool,
    ) -> Option<(Stat, Option<std::fs::File>)> {
        if let Some(file) = open
            && read_at_start(&file, &mut self.buffer, PROC_FILE_BYTES).is_ok()
            && let Some(stat) = parse_stat(&self.buffer)
        {
            return Some((stat, Some(file)));
        }
        let file = std::fs::File::open(roots::process_path(pid, "stat")).ok()?;
        read_at_start(&file, &mut self.buffer, PROC_FILE_BYTES).ok()?;
        let stat = parse_stat(&self.buffer)?;
        Some((stat, keep.then_some(file)))
    }

    /// Where gputop runs relative to the host's PID namespace.
    pub fn pid_namespace(&self) -> PidNamespace {
        self.namespaces.view
    }

    /// Fills in the host facts of each process, in place. A PID the host does not know
    /// (exited between the NVML call and now, or in another PID namespace) gets readings
    /// that say so; a process on several GPUs is read once.
    pub fn fill(&mut self, processes: &mut [GpuProcess]) {
        let clock = Clock {
            now: Instant::now(),
            epoch_seconds: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        };
        // Updated in place; those not asked about are dropped at the end.
        let mut known = std::mem::take(&mut self.known);
        let mut first_sights = first_sights(
            processes
                .iter()
                .map(|p| p.pid)
                .filter(|pid| !known.contains_key(pid)),
            &self.namespaces,
        );
        // Where each PID was first met: a later row of the same process copies its facts.
        let mut met: HashMap<u32, usize> = HashMap::with_capacity(processes.len());
        let mut kept = 0;
        for index in 0..processes.len() {
            let pid = processes[index].pid;
            if let Some(&first) = met.get(&pid) {
                processes[index].host = processes[first].host.clone();
                continue;
            }
            met.insert(pid, index);
            let keep = kept < MAX_OPEN_STAT_FILES;
            let (facts, known_now) = self.read_one(pid, &mut known, first_sights.remove(&pid), keep, &clock);
            processes[index].host = facts;
            kept += usize::from(known_now);
        }
        // Processes no longer asked about are forgotten.
        known.retain(|_, entry| entry.read_at == clock.now);
        self.known = known;
    }

    /// The facts of one process, and whether it is (now) known: its entry in `known` read
    /// in place when it was seen before, else made from its first sight (`prefetched`, or
    /// read now).
    fn read_one(
        &mut self,
        pid: u32,
        known: &mut HashMap<u32, Known>,
        mut prefetched: Option<FirstSight>,
        keep: bool,
        clock: &Clock,
    ) -> (HostFacts, bool) {
        let in_container = self.namespaces.view == PidNamespace::Container;
        let read = match prefetched.as_mut().and_then(|first| first.stat.take()) {
            // Opened again, and kept, at the next refresh.
            Some(stat) => Some((stat, None)),
            None => {
                let open = known.get_mut(&pid).and_then(|k| k.stat_file.take());
                self.read_stat(pid, open, keep)
            }
        };
        let Some((stat, stat_file)) = read else {
            let facts = if in_container {
                HostFacts::unmapped(
                    "host PID, not in this container (run gputop with the host's PID namespace)",
                )
            } else {
                HostFacts::gone(pid, "no such process")
            };
            return (facts, false);
        };
        let start_time = start_seconds(self.boot_time, stat.start_ticks, self.ticks_per_second);
        let running = clock.epoch_seconds.saturating_sub(start_time);
        let ticks_per_second = self.ticks_per_second as f64;
        // The same process as last time (a reused PID starts at another tick): the %CPU is
        // the delta over the interval.
        if let Some(entry) = known.get_mut(&pid).filter(|k| k.start_ticks == stat.start_ticks) {
            let seconds = clock.now.duration_since(entry.read_at).as_secs_f64();
            let used = stat.cpu_ticks.saturating_sub(entry.cpu_ticks) as f64 / ticks_per_second;
            let cpu = if seconds > 0.0 {
                used * 100.0 / seconds
            } else {
                0.0
            };
            entry.cpu_ticks = stat.cpu_ticks;
            entry.read_at = clock.now;
            entry.stat_file = stat_file;
            return (self.facts_now(pid, entry, &stat, cpu, start_time, running), true);
        }
        let first =
            prefetched.unwrap_or_else(|| FirstSight::read(pid, &self.namespaces, &mut Batch::default()));
        if let (true, PidReach::Unmapped { reason }) = (in_container, &first.mapping) {
            // The local process with this number is not the GPU's: show nothing of it.
            return (HostFacts::unmapped(reason), false);
        }
        let Some(uid) = first.uid else {
            return (HostFacts::gone(pid, "no such process"), false);
        };
        // First sight: the lifetime average, as `ps` reports %CPU.
        let cpu = if running > 0 {
            stat.cpu_ticks as f64 / ticks_per_second * 100.0 / running as f64
        } else {
            0.0
        };
        let user = self.users.name(uid);
        let mut container = first.container;
        if let Some(job) = container.as_mut().filter(|c| c.runtime == Runtime::Slurm) {
            // The job's user: the one its cgroup path names, else the process's owner.
            job.user = Some(
                first
                    .slurm_uid
                    .map_or_else(|| user.clone(), |uid| self.users.name(uid)),
            );
        }
        let entry = Known {
            start_ticks: stat.start_ticks,
            uid,
            user: user.into(),
            command: first.command.map_or_else(|| "?".into(), Arc::from),
            stat_file,
            container: container.map(Arc::new),
            namespace_pid: first.namespace_pid,
            mapping: first.mapping,
            cpu_ticks: stat.cpu_ticks,
            read_at: clock.now,
        };
        let facts = self.facts_now(pid, &entry, &stat, cpu, start_time, running);
        known.insert(pid, entry);
        (facts, true)
    }

    /// A known process's facts with this refresh's readings.
    fn facts_now(
        &self,
        pid: u32,
        entry: &Known,
        stat: &Stat,
        cpu: f64,
        start_time: u64,
        running: u64,
    ) -> HostFacts {
        let mut facts = HostFacts {
            user: Reading::Value(entry.user.clone()),
            uid: Reading::Value(entry.uid),
            parent_pid: Reading::Value(stat.parent_pid),
            command: Reading::Value(entry.command.clone()),
            cpu_percent: Reading::Value(cpu),
            memory_bytes: Reading::Value(stat.rss_pages * self.page_size),
            start_time: Reading::Value(start_time),
            start_ticks: Reading::Value(stat.start_ticks),
            running_seconds: Reading::Value(running),
            container: entry.container.clone(),
            namespace_pid: entry.namespace_pid,
            ..HostFacts::unread(pid)
        };
        entry.mapping.fill(pid, &mut facts);
        facts
    }

    /// CPU, memory, swap, load and uptime of the host.
    pub fn stats(&mut self) -> HostStats {
        self.machine.read()
    }
}

impl HostCollector {
    /// The machine's host name, read once.
    pub fn hostname(&self) -> &str {
        &self.hostname
    }
}

/// What is read of a process once, when it is first seen: owner, command line, container,
/// and how its PID maps into gputop's namespace.
#[derive(Debug)]
struct FirstSight {
    /// `/proc/PID/stat`, read by path: files opened by several threads at once would make
    /// the kernel wait for RCU each time the shared descriptor table grows.
    stat: Option<Stat>,
    mapping: PidReach,
    /// `None`: the process is gone.
    uid: Option<u32>,
    /// Arguments joined by spaces, or the name in brackets when there are none (kernel
    /// threads, zombies); `None` when neither could be read (the process is gone).
    command: Option<String>,
    container: Option<Container>,
    /// A Slurm job's user, as its cgroup path names them (cgroup v1).
    slurm_uid: Option<u32>,
    namespace_pid: Option<u32>,
}

/// What one reader of a batch of first sights keeps from one process to the next.
#[derive(Debug, Default)]
struct Batch {
    buffer: Vec<u8>,
    /// Whether each container's processes share gputop's PID namespace: a container's
    /// processes share one namespace, so one link read answers for all of them.
    shared: HashMap<String, bool>,
    /// The container of each `/proc/PID/cgroup` content met: the processes of a job, a
    /// container or a session have the same one, and reading it is most of a first sight.
    containers: HashMap<Vec<u8>, Option<Container>>,
}

impl Batch {
    /// The container of the `/proc/PID/cgroup` content in the buffer.
    fn container(&mut self) -> Option<Container> {
        if let Some(known) = self.containers.get(self.buffer.as_slice()) {
            return known.clone();
        }
        let container = container::container_of(&String::from_utf8_lossy(&self.buffer));
        self.containers.insert(self.buffer.clone(), container.clone());
        container
    }
}

impl FirstSight {
    fn read(pid: u32, namespaces: &Namespaces, batch: &mut Batch) -> Self {
        let (stat, name) = match read_small(
            &roots::process_path(pid, "stat"),
            &mut batch.buffer,
            PROC_FILE_BYTES,
        ) {
            Ok(_) => (parse_stat(&batch.buffer), stat_name(&batch.buffer)),
            Err(_) => (None, None),
        };
        let mut status = None;
        let mut read_status = |buffer: &mut Vec<u8>| {
            status
                .get_or_insert_with(|| {
                    read_small(&roots::process_path(pid, "status"), buffer, PROC_FILE_BYTES)
                        .ok()
                        .map(|_| String::from_utf8_lossy(buffer).into_owned())
                })
                .clone()
        };
        // How NVML's PID maps into gputop's namespace: in a container, a local process that
        // merely shares the number is never read in its place.
        let mapping = match namespaces.view {
            PidNamespace::Host => PidReach::Same,
            _ => namespaces.map(pid, read_status(&mut batch.buffer).as_deref(), || {
                container::holds_nvidia_device(pid)
            }),
        };
        let uid = std::fs::metadata(roots::proc_path(pid.to_string()))
            .ok()
            .map(|m| m.uid());
        let container = read_small(
            &roots::process_path(pid, "cgroup"),
            &mut batch.buffer,
            PROC_FILE_BYTES,
        )
        .ok()
        .and_then(|_| batch.container());
        let slurm_uid = container
            .as_ref()
            .filter(|c| c.runtime == Runtime::Slurm)
            .and_then(|_| container::slurm_uid(&String::from_utf8_lossy(&batch.buffer)));
        // In a PID namespace of its own the process has its own number too (NSpid's last).
        let namespace_pid = container
            .as_ref()
            .filter(|c| {
                !*batch
                    .shared
                    .entry(c.id.clone())
                    .or_insert_with(|| namespaces.shares_mine(pid))
            })
            .and_then(|_| read_status(&mut batch.buffer))
            .and_then(|status| container::nspid(&status).last().copied())
            .filter(|&inner| inner != pid);
        let cut = read_small(
            &roots::process_path(pid, "cmdline"),
            &mut batch.buffer,
            COMMAND_BYTES,
        )
        .unwrap_or(false);
        let mut args: Vec<String> = batch
            .buffer
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if cut {
            args.push("…".into());
        }
        Self {
            stat,
            mapping,
            uid,
            // Kernel threads and zombies have no command line: their name in brackets, as
            // `ps` shows them.
            command: if args.is_empty() {
                name.map(|name| format!("[{name}]"))
            } else {
                Some(args.join(" "))
            },
            container,
            slurm_uid,
            namespace_pid,
        }
    }
}

/// Below this many new processes one thread reads them; above, up to [`FIRST_SIGHT_THREADS`]
/// share the work (a one-shot report meets every process at once).
const FIRST_SIGHT_PARALLEL_FROM: usize = 128;
const FIRST_SIGHT_THREADS: usize = 4;

/// First sights of `pids` (duplicates read once), in parallel when there are many.
fn first_sights(pids: impl Iterator<Item = u32>, namespaces: &Namespaces) -> HashMap<u32, FirstSight> {
    let mut pids: Vec<u32> = pids.collect();
    pids.sort_unstable();
    pids.dedup();
    // available_parallelism reads cgroup files: asked only when there are many to read.
    let threads = if pids.len() < FIRST_SIGHT_PARALLEL_FROM {
        1
    } else {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(FIRST_SIGHT_THREADS)
    };
    if threads < 2 {
        let mut batch = Batch::default();
        return pids
            .into_iter()
            .map(|pid| (pid, FirstSight::read(pid, namespaces, &mut batch)))
            .collect();
    }
    let chunk = pids.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let workers: Vec<_> = pids
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    let mut batch = Batch::default();
                    part.iter()
                        .map(|&pid| (pid, FirstSight::read(pid, namespaces, &mut batch)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().unwrap_or_default())
            .collect()
    })
}

/// Most `/proc/PID/stat` files kept open (well under the usual limit of 1024 descriptors);
/// processes beyond it are read by path.
const MAX_OPEN_STAT_FILES: usize = 600;

/// Most bytes read of a /proc file: the files gputop reads are far smaller, but a command
/// line (written by its process) can be megabytes.
pub(super) const PROC_FILE_BYTES: usize = 64 << 10;

/// Most bytes of a command line kept: a longer one is cut and ends in " …".
const COMMAND_BYTES: usize = 4096;

/// Reads an open /proc file from its start into `buffer`, up to `limit` bytes: the kernel
/// renders it anew. One read into all of the buffer's room (grown to fit, once): a read that
/// fills less than asked has reached the end, as /proc renders the whole file per read, and
/// asking again, from an offset, would make the kernel render it a second time. Returns
/// whether the file was longer than `limit`.
pub(super) fn read_at_start(
    file: &std::fs::File,
    buffer: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    buffer.clear();
    buffer.reserve(1024.min(limit + 1));
    loop {
        let filled = buffer.len();
        // One byte past the limit tells a file of exactly `limit` bytes from a longer one.
        buffer.resize(buffer.capacity().min(limit + 1), 0);
        let room = buffer.len() - filled;
        let n = match file.read_at(&mut buffer[filled..], filled as u64) {
            Ok(n) => n,
            Err(error) => {
                buffer.truncate(filled);
                return Err(error);
            }
        };
        buffer.truncate(filled + n);
        if buffer.len() > limit {
            buffer.truncate(limit);
            return Ok(true);
        }
        if n < room {
            return Ok(false);
        }
        buffer.reserve(room);
    }
}

/// Reads a small /proc file into `buffer` (up to `limit` bytes): open, one read (see
/// [`read_at_start`]), close; no size probing, as /proc files report no size and every
/// system call counts with many processes. Returns whether the file was cut.
fn read_small(path: &std::path::Path, buffer: &mut Vec<u8>, limit: usize) -> std::io::Result<bool> {
    read_at_start(&std::fs::File::open(path)?, buffer, limit)
}

/// One process of the whole table, for the tree view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessEntry {
    /// Its PID, as this PID namespace sees it.
    pub pid: u32,
    /// Its parent's PID (0 for none).
    pub parent_pid: u32,
    /// Its name as `/proc/PID/stat` gives it.
    pub name: String,
}

/// A live process's parent, from /proc/PID/stat; `None` once it has gone.
pub fn parent_pid(pid: u32) -> Option<u32> {
    let text = std::fs::read(roots::process_path(pid, "stat")).ok()?;
    Some(parse_stat(&text)?.parent_pid)
}

/// Every process's PID, parent and name, from /proc/PID/stat (cheap: one small read each).
pub fn process_table() -> Vec<ProcessEntry> {
    let Ok(dir) = std::fs::read_dir(roots::proc_path("")) else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let text = std::fs::read(roots::process_path(pid, "stat")).ok()?;
            Some(ProcessEntry {
                pid,
                parent_pid: parse_stat(&text)?.parent_pid,
                name: stat_name(&text)?,
            })
        })
        .collect()
}

/// A process table made from a snapshot's own facts (the demo, whose PIDs are not real):
/// each process under its recorded parent.
pub fn table_of(snapshot: &crate::model::Snapshot) -> Vec<ProcessEntry> {
    let mut table: Vec<ProcessEntry> = Vec::new();
    for p in &snapshot.processes {
        if table.iter().any(|e| e.pid == p.pid) {
            continue;
        }
        let command = p.host.command.as_deref().unwrap_or("?");
        let program = command.split_whitespace().next().unwrap_or("?");
        table.push(ProcessEntry {
            pid: p.pid,
            parent_pid: p.host.parent_pid.get().unwrap_or(0),
            name: program.rsplit('/').next().unwrap_or(program).to_string(),
        });
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_parent_is_read_and_a_gone_one_has_none() {
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() } as u32;
        assert_eq!(parent_pid(std::process::id()), Some(parent));
        assert_eq!(parent_pid(u32::MAX - 1), None);
    }

    #[test]
    fn environment_is_split_into_entries() {
        let vars = environment(std::process::id()).unwrap();
        assert!(vars.iter().any(|v| v.starts_with("PATH=")), "{vars:?}");
        assert!(environment(u32::MAX - 1).is_err());
    }

    #[test]
    fn a_batch_reads_each_cgroup_content_once_and_keeps_containers_apart() {
        let docker = "0::/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n";
        let slurm = "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n";
        let mut batch = Batch::default();
        let mut container_of = |text: &str| {
            batch.buffer = text.as_bytes().to_vec();
            batch.container().map(|c| c.label().to_string())
        };
        assert_eq!(container_of(docker).as_deref(), Some("docker:0123456789ab"));
        assert_eq!(container_of(slurm).as_deref(), Some("slurm:4242"));
        assert_eq!(container_of(docker).as_deref(), Some("docker:0123456789ab"));
        assert_eq!(container_of("0::/\n"), None);
        assert_eq!(container_of("0::/\n"), None);
        assert_eq!(batch.containers.len(), 3, "one parse per distinct content");
    }

    /// Each PID's facts as `fill` writes them, in the order asked.
    fn facts(host: &mut HostCollector, pids: &[u32]) -> Vec<HostFacts> {
        let mut processes: Vec<GpuProcess> = pids
            .iter()
            .map(|&pid| crate::model::testing::process(pid, 0, "unread", 0))
            .collect();
        host.fill(&mut processes);
        processes.into_iter().map(|p| p.host).collect()
    }

    #[test]
    fn an_open_file_is_read_whole_from_its_start_each_time() {
        use std::io::Write;
        let mut file = tempfile::tempfile().unwrap();
        let long: Vec<u8> = (0..5000u32).map(|i| b'a' + (i % 26) as u8).collect();
        file.write_all(&long).unwrap();
        let mut buffer = Vec::new();
        read_at_start(&file, &mut buffer, PROC_FILE_BYTES).unwrap();
        assert_eq!(buffer, long, "grown past its first kilobyte to the end");
        read_at_start(&file, &mut buffer, PROC_FILE_BYTES).unwrap();
        assert_eq!(
            buffer, long,
            "again from the start, not from where the last read ended"
        );
        let stat = std::fs::File::open("/proc/self/stat").unwrap();
        read_at_start(&stat, &mut buffer, PROC_FILE_BYTES).unwrap();
        let text = String::from_utf8(buffer.clone()).unwrap();
        assert!(text.ends_with('\n') && parse_stat(&buffer).is_some(), "{text}");
    }

    #[test]
    fn stat_lines_parse_even_with_parentheses_and_spaces_in_the_name() {
        let line = "4242 (evil ) name (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 \
                    123456 10000000 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
        let stat = parse_stat(line.as_bytes()).unwrap();
        assert_eq!(stat_name(line.as_bytes()).unwrap(), "evil ) name (x)");
        assert_eq!(stat.parent_pid, 1);
        assert_eq!(stat.cpu_ticks, 300);
        assert_eq!(stat.start_ticks, 123_456);
        assert_eq!(stat.rss_pages, 2048);
        assert_eq!(parse_stat(b"garbage"), None);
        assert_eq!(parse_stat(b"1 (x) S 1 2"), None, "cut short");
        assert_eq!(parse_stat(b"1 x) S 1"), None, "no opening parenthesis");
        let spaced = line.replace(" 250 50 ", "  250\t50  ");
        assert_eq!(
            parse_stat(spaced.as_bytes()).unwrap().cpu_ticks,
            300,
            "runs of whitespace"
        );
        let signed = line.replace(" 250 50 ", " 250 -50 ");
        assert_eq!(
            parse_stat(signed.as_bytes()),
            None,
            "a sign where a count belongs"
        );
        let huge = line.replace(" 250 50 ", " 250 99999999999999999999 ");
        assert_eq!(parse_stat(huge.as_bytes()), None, "a count past u64");
        let empty_name = "7 () S 1 7 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5 0 3 0";
        assert_eq!(stat_name(empty_name.as_bytes()).unwrap(), "");
        assert_eq!(parse_stat(empty_name.as_bytes()).unwrap().rss_pages, 3);
    }

    #[test]
    fn this_process_is_read_with_its_owner_start_and_command() {
        let mut host = HostCollector::new();
        let me = std::process::id();
        let read = facts(&mut host, &[me, me]);
        let mine = &read[0];
        assert_eq!(
            read[1], *mine,
            "one process on two GPUs: read once, the same facts"
        );
        // SAFETY: getuid has no preconditions.
        assert_eq!(mine.uid.get(), Some(unsafe { libc::getuid() }));
        assert!(mine.command.value().is_some_and(|c| !c.is_empty()));
        assert!(mine.memory_bytes.get().is_some_and(|m| m > 0));
        let again = facts(&mut host, &[me]);
        assert_eq!(
            again[0].start_time, mine.start_time,
            "the same process, the same start"
        );
        // Its text is shared with the record kept of it, not copied at each refresh.
        let shared = |a: &Reading<Arc<str>>, b: &Reading<Arc<str>>| match (a, b) {
            (Reading::Value(a), Reading::Value(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        assert!(shared(&again[0].command, &mine.command) && shared(&again[0].user, &mine.user));
    }

    #[test]
    fn a_long_command_line_is_kept_to_its_first_4_kib() {
        // One argument may be up to 128 KiB (MAX_ARG_STRLEN).
        let long = "x".repeat(100 << 10);
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read line", &long])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Until the child has exec'd, its command line is this test's own.
        let cmdline = format!("/proc/{}/cmdline", child.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !std::fs::read(&cmdline).unwrap_or_default().starts_with(b"sh\0")
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut host = HostCollector::new();
        let read = facts(&mut host, &[child.id()]);
        let command = read[0].command.value().unwrap();
        assert!(command.len() <= COMMAND_BYTES + 4, "{} bytes", command.len());
        assert!(
            command.starts_with("sh -c read line xxx") && command.ends_with(" …"),
            "{}",
            command.chars().take(40).collect::<String>()
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_process_without_a_command_line_is_shown_by_its_name_in_brackets() {
        // A zombie (exited, not yet waited for) has no command line left, as kernel threads.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let stat_path = format!("/proc/{}/stat", child.id());
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while !std::fs::read_to_string(&stat_path).unwrap().contains(") Z ") {
            assert!(Instant::now() < deadline, "the child never became a zombie");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let read = facts(&mut HostCollector::new(), &[child.id()]);
        assert_eq!(read[0].command.as_deref(), Some("[true]"));
        child.wait().unwrap();
    }

    #[test]
    fn processes_no_longer_asked_about_are_forgotten_and_their_files_closed() {
        let mut host = HostCollector::new();
        let me = std::process::id();
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        // Until the child has exec'd, its command line is still this test's.
        let cmdline = format!("/proc/{}/cmdline", child.id());
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while !std::fs::read(&cmdline).unwrap_or_default().starts_with(b"sleep") {
            assert!(Instant::now() < deadline, "the child never ran sleep");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let read = facts(&mut host, &[me, child.id()]);
        assert!(read[1].command.value().is_some_and(|c| c.starts_with("sleep")));
        // The child's stat file is opened for keeping at the refresh after its first sight.
        facts(&mut host, &[me, child.id()]);
        assert!(host.known[&child.id()].stat_file.is_some());
        facts(&mut host, &[me]);
        assert_eq!(host.known.keys().copied().collect::<Vec<_>>(), vec![me]);
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

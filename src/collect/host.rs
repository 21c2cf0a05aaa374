//! Host facts: the only module that reads procfs for processes and names `sysinfo`.
//!
//! Per PID: user, command line, CPU %, resident memory, start and running time, read
//! straight from `/proc/PID/stat` (one small read) and the owner of `/proc/PID` (one stat),
//! with the command line read once per process. Only the PIDs NVML reported are read, never
//! the whole process table. The host's own CPU, memory, load and uptime come from sysinfo.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use sysinfo::{MemoryRefreshKind, System, Users};

use super::container::{self, Namespaces};
use crate::model::{Container, HostFacts, HostStats, PidMapping, PidNamespace, Reading};

/// What is kept of a process between refreshes.
#[derive(Debug)]
struct Known {
    /// In clock ticks since boot: with the PID, the process's identity.
    start_ticks: u64,
    uid: u32,
    user: String,
    command: String,
    /// `/proc/PID/stat`, kept open: re-read in place each refresh without a path lookup,
    /// and pinned to this process (a read fails once it has exited).
    stat_file: Option<std::fs::File>,
    container: Option<Container>,
    namespace_pid: Option<u32>,
    mapping: PidMapping,
    /// CPU ticks used, and when they were read: the next %CPU is the delta.
    cpu_ticks: u64,
    read_at: Instant,
}

/// The fields of `/proc/PID/stat` gputop uses.
#[derive(Debug, Clone, PartialEq)]
struct Stat {
    name: String,
    parent_pid: u32,
    cpu_ticks: u64,
    start_ticks: u64,
    rss_pages: u64,
}

fn parse_stat(text: &str) -> Option<Stat> {
    // The name sits in parentheses and may itself hold spaces and parentheses.
    let (head, rest) = text.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_string();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Counting from field 3 (state) at index 0.
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    Some(Stat {
        name,
        parent_pid: field(4)? as u32,
        cpu_ticks: field(14)? + field(15)?,
        start_ticks: field(22)?,
        rss_pages: field(24)?,
    })
}

/// Seconds since the epoch at which a process started: whole seconds, so the host facts and
/// the identity check before a signal ([`start_time`]) always agree for the same process.
fn start_seconds(boot_time: u64, start_ticks: u64, ticks_per_second: u64) -> u64 {
    boot_time + start_ticks / ticks_per_second.max(1)
}

/// When `pid` started, in seconds since the epoch, read now: with the PID, the process's
/// identity. `None` if there is no such process.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(start_seconds(System::boot_time(), stat.start_ticks, ticks))
}

/// Reads the host; keeps what it learnt of each process between refreshes.
pub struct HostCollector {
    system: System,
    hostname: String,
    users: Users,
    known: HashMap<u32, Known>,
    namespaces: Namespaces,
    boot_time: u64,
    ticks_per_second: u64,
    page_size: u64,
    buffer: Vec<u8>,
    cpu_refreshed: bool,
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
    pub fn new() -> Self {
        // SAFETY: sysconf has no preconditions.
        let (ticks, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        Self {
            system: System::new(),
            hostname: System::host_name().unwrap_or_else(|| "localhost".into()),
            users: Users::new_with_refreshed_list(),
            known: HashMap::new(),
            namespaces: Namespaces::detect(),
            boot_time: System::boot_time(),
            ticks_per_second: ticks.max(1) as u64,
            page_size: page.max(1) as u64,
            buffer: Vec::with_capacity(1024),
            cpu_refreshed: false,
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
            && read_at_start(&file, &mut self.buffer).is_ok()
            && let Some(stat) = parse_stat(&String::from_utf8_lossy(&self.buffer))
        {
            return Some((stat, Some(file)));
        }
        let file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
        read_at_start(&file, &mut self.buffer).ok()?;
        let stat = parse_stat(&String::from_utf8_lossy(&self.buffer))?;
        Some((stat, keep.then_some(file)))
    }

    /// Where gputop runs relative to the host's PID namespace.
    pub fn pid_namespace(&self) -> PidNamespace {
        self.namespaces.view
    }

    /// How NVML's `pid` maps into gputop's PID namespace; in a container, `None` when it
    /// does not (the facts then say why), and a local process that merely shares the number
    /// is never read in its place.
    fn map_pid(&mut self, pid: u32) -> (PidMapping, Option<String>) {
        if self.namespaces.view == PidNamespace::Host {
            return (PidMapping::Same, None);
        }
        let status = read_small(&format!("/proc/{pid}/status"), &mut self.buffer)
            .ok()
            .map(|()| String::from_utf8_lossy(&self.buffer).into_owned());
        let mapping = self
            .namespaces
            .map(pid, status.as_deref(), || container::holds_nvidia_device(pid));
        (mapping, status)
    }

    /// Facts for each PID. A PID the host does not know (exited between the NVML call and
    /// now, or in another PID namespace) gets readings that say so.
    pub fn facts(&mut self, pids: &[u32]) -> HashMap<u32, HostFacts> {
        let mut out = HashMap::with_capacity(pids.len());
        let now = Instant::now();
        let now_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut known = std::mem::take(&mut self.known);
        let mut kept = HashMap::with_capacity(pids.len());
        for &pid in pids {
            if out.contains_key(&pid) {
                continue; // one process on several GPUs
            }
            let in_container = self.namespaces.view == PidNamespace::Container;
            let mut previous = known.remove(&pid);
            let open = previous.as_mut().and_then(|k| k.stat_file.take());
            let keep = kept.len() < MAX_OPEN_STAT_FILES;
            let Some((stat, stat_file)) = self.read_stat(pid, open, keep) else {
                out.insert(
                    pid,
                    if in_container {
                        HostFacts::unmapped(
                            "host PID, not in this container (run gputop with the host's PID namespace)",
                        )
                    } else {
                        HostFacts::gone("no such process")
                    },
                );
                continue;
            };
            let start_time = start_seconds(self.boot_time, stat.start_ticks, self.ticks_per_second);
            let running = now_epoch.saturating_sub(start_time);
            let previous = previous.filter(|k| k.start_ticks == stat.start_ticks);
            let mapped = match &previous {
                Some(_) => None,
                None => {
                    let (mapping, status) = self.map_pid(pid);
                    if let (true, PidMapping::Unmapped { reason }) = (in_container, &mapping) {
                        // The local process with this number is not the GPU's: show nothing of it.
                        out.insert(pid, HostFacts::unmapped(reason));
                        continue;
                    }
                    Some((mapping, status))
                }
            };
            let cpu = match &previous {
                // Seen before: the delta over the interval.
                Some(k) => {
                    let seconds = now.duration_since(k.read_at).as_secs_f64();
                    let used =
                        stat.cpu_ticks.saturating_sub(k.cpu_ticks) as f64 / self.ticks_per_second as f64;
                    if seconds > 0.0 {
                        used * 100.0 / seconds
                    } else {
                        0.0
                    }
                }
                // First sight: the lifetime average, as `ps` reports %CPU.
                None if running > 0 => {
                    stat.cpu_ticks as f64 / self.ticks_per_second as f64 * 100.0 / running as f64
                }
                None => 0.0,
            };
            let entry = match previous {
                Some(k) => Known {
                    cpu_ticks: stat.cpu_ticks,
                    read_at: now,
                    stat_file,
                    ..k
                },
                None => {
                    let (mapping, status) = mapped.unwrap_or_default();
                    let Ok(metadata) = std::fs::metadata(format!("/proc/{pid}")) else {
                        out.insert(pid, HostFacts::gone("no such process"));
                        continue;
                    };
                    let uid = metadata.uid();
                    let user = self
                        .users
                        .iter()
                        .find(|u| **u.id() == uid)
                        .map_or_else(|| uid.to_string(), |u| u.name().to_string());
                    let container = self.container(pid);
                    // Inside a container the process has its own number too (NSpid's last).
                    let namespace_pid = match (&container, status) {
                        (Some(_), Some(status)) => Some(status),
                        (Some(_), None) => read_small(&format!("/proc/{pid}/status"), &mut self.buffer)
                            .ok()
                            .map(|()| String::from_utf8_lossy(&self.buffer).into_owned()),
                        (None, _) => None,
                    }
                    .and_then(|status| container::nspid(&status).last().copied())
                    .filter(|&inner| inner != pid);
                    Known {
                        start_ticks: stat.start_ticks,
                        uid,
                        user,
                        command: command_line(pid, &stat.name),
                        stat_file,
                        container,
                        namespace_pid,
                        mapping,
                        cpu_ticks: stat.cpu_ticks,
                        read_at: now,
                    }
                }
            };
            out.insert(
                pid,
                HostFacts {
                    user: Reading::Value(entry.user.clone()),
                    uid: Reading::Value(entry.uid),
                    parent_pid: Reading::Value(stat.parent_pid),
                    command: Reading::Value(entry.command.clone()),
                    cpu_percent: Reading::Value(cpu),
                    memory_bytes: Reading::Value(stat.rss_pages * self.page_size),
                    start_time: Reading::Value(start_time),
                    running_seconds: Reading::Value(running),
                    container: entry.container.clone(),
                    namespace_pid: entry.namespace_pid,
                    mapping: entry.mapping.clone(),
                },
            );
            kept.insert(pid, entry);
        }
        // Processes no longer asked about are forgotten.
        self.known = kept;
        out
    }

    /// CPU, memory, swap, load and uptime of the host.
    pub fn stats(&mut self) -> HostStats {
        self.system
            .refresh_memory_specifics(MemoryRefreshKind::everything());
        self.system.refresh_cpu_usage();
        // CPU usage is a delta: the first refresh has nothing to compare with.
        let cpu_percent = if self.cpu_refreshed {
            Reading::Value(f64::from(self.system.global_cpu_usage()))
        } else {
            Reading::Failed("needs two samples".into())
        };
        self.cpu_refreshed = true;
        let load = System::load_average();
        HostStats {
            cpu_percent,
            memory_total_bytes: Reading::Value(self.system.total_memory()),
            memory_used_bytes: Reading::Value(self.system.used_memory()),
            swap_total_bytes: Reading::Value(self.system.total_swap()),
            swap_used_bytes: Reading::Value(self.system.used_swap()),
            load_average: Reading::Value([load.one, load.five, load.fifteen]),
            uptime_seconds: Reading::Value(System::uptime()),
        }
    }
}

impl HostCollector {
    /// The container of `pid`, from its cgroup; `None` on the host or when unreadable.
    fn container(&mut self, pid: u32) -> Option<Container> {
        read_small(&format!("/proc/{pid}/cgroup"), &mut self.buffer).ok()?;
        container::container_of(&String::from_utf8_lossy(&self.buffer))
    }

    /// The machine's host name, read once.
    pub fn hostname(&self) -> &str {
        &self.hostname
    }
}

/// The command line, arguments joined by spaces; kernel threads and zombies have none, so
/// their name in brackets, as `ps` shows them.
fn command_line(pid: u32, name: &str) -> String {
    let mut raw = Vec::new();
    let _ = read_small(&format!("/proc/{pid}/cmdline"), &mut raw);
    let args: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    if args.is_empty() {
        format!("[{name}]")
    } else {
        args.join(" ")
    }
}

/// Most `/proc/PID/stat` files kept open (well under the usual limit of 1024 descriptors);
/// processes beyond it are read by path.
const MAX_OPEN_STAT_FILES: usize = 600;

/// Reads an open /proc file whole from its start into `buffer`: the kernel renders it anew.
fn read_at_start(file: &std::fs::File, buffer: &mut Vec<u8>) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    buffer.clear();
    let mut chunk = [0u8; 1024];
    loop {
        let n = file.read_at(&mut chunk, buffer.len() as u64)?;
        if n == 0 {
            return Ok(());
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// Reads a small /proc file whole into `buffer`: open, read until the end, close (no size
/// probing: /proc files report no size, and every system call counts with many processes).
fn read_small(path: &str, buffer: &mut Vec<u8>) -> std::io::Result<()> {
    buffer.clear();
    let mut file = std::fs::File::open(path)?;
    let mut chunk = [0u8; 4096];
    loop {
        let n = file.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// One process of the whole table, for the tree view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessEntry {
    pub pid: u32,
    pub parent_pid: u32,
    pub name: String,
}

/// Every process's PID, parent and name, from /proc/PID/stat (cheap: one small read each).
pub fn process_table() -> Vec<ProcessEntry> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
            Some(ProcessEntry {
                pid,
                parent_pid: stat.parent_pid,
                name: stat.name,
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
        let command = p.host.command.value().map(String::as_str).unwrap_or("?");
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
    fn stat_lines_parse_even_with_parentheses_and_spaces_in_the_name() {
        let line = "4242 (evil ) name (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 \
                    123456 10000000 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
        let stat = parse_stat(line).unwrap();
        assert_eq!(stat.name, "evil ) name (x)");
        assert_eq!(stat.parent_pid, 1);
        assert_eq!(stat.cpu_ticks, 300);
        assert_eq!(stat.start_ticks, 123_456);
        assert_eq!(stat.rss_pages, 2048);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_read_with_its_owner_start_and_command() {
        let mut host = HostCollector::new();
        let me = std::process::id();
        let facts = host.facts(&[me, me]);
        let mine = &facts[&me];
        // SAFETY: getuid has no preconditions.
        assert_eq!(mine.uid.get(), Some(unsafe { libc::getuid() }));
        assert!(mine.command.value().is_some_and(|c| !c.is_empty()));
        assert!(mine.memory_bytes.get().is_some_and(|m| m > 0));
        let again = host.facts(&[me]);
        assert_eq!(
            again[&me].start_time, mine.start_time,
            "the same process, the same start"
        );
    }
}

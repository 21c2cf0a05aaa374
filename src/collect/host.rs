//! Host facts through sysinfo (procfs): the only module that names `sysinfo`.
//!
//! Per PID: user, command line, CPU %, resident memory, start and running time. Only the PIDs
//! NVML reported are refreshed, never the whole process table.

use std::collections::{HashMap, HashSet};

use sysinfo::{MemoryRefreshKind, Pid, ProcessRefreshKind, ProcessesToUpdate, System, UpdateKind, Users};

use crate::model::{HostFacts, HostStats, Reading};

/// Reads the host; keeps sysinfo state between refreshes so CPU percentages are deltas.
pub struct HostCollector {
    system: System,
    hostname: String,
    users: Users,
    /// PIDs refreshed last time: their CPU % is a delta over the interval.
    seen: HashSet<u32>,
    cpu_refreshed: bool,
}

impl std::fmt::Debug for HostCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCollector")
            .field("seen", &self.seen.len())
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
        Self {
            system: System::new(),
            hostname: System::host_name().unwrap_or_else(|| "localhost".into()),
            users: Users::new_with_refreshed_list(),
            seen: HashSet::new(),
            cpu_refreshed: false,
        }
    }

    /// Facts for each PID. A PID the host does not know (exited between the NVML call and
    /// now, or in another PID namespace) gets readings that say so.
    pub fn facts(&mut self, pids: &[u32]) -> HashMap<u32, HostFacts> {
        // Each PID once: sysinfo drops a process that is refreshed twice in one call.
        let mut wanted: Vec<Pid> = pids.iter().map(|&p| Pid::from_u32(p)).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let kind = ProcessRefreshKind::nothing()
            .with_cpu()
            .with_memory()
            .with_cmd(UpdateKind::OnlyIfNotSet)
            .with_user(UpdateKind::OnlyIfNotSet);
        self.system
            .refresh_processes_specifics(ProcessesToUpdate::Some(&wanted), true, kind);
        let mut out = HashMap::with_capacity(pids.len());
        let mut now_seen = HashSet::with_capacity(pids.len());
        for &pid in pids {
            let Some(process) = self.system.process(Pid::from_u32(pid)) else {
                out.insert(pid, HostFacts::gone("no such process"));
                continue;
            };
            let user = process.user_id().map_or(Reading::NotSupported, |uid| {
                Reading::Value(
                    self.users
                        .get_user_by_id(uid)
                        .map_or_else(|| uid.to_string(), |u| u.name().to_string()),
                )
            });
            let cmd: Vec<String> = process
                .cmd()
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            let command = if cmd.is_empty() {
                // Kernel threads and zombies have no command line; show the name like ps does.
                format!("[{}]", process.name().to_string_lossy())
            } else {
                cmd.join(" ")
            };
            let running = process.run_time();
            // Seen before: sysinfo's delta over the interval. First sight: the lifetime
            // average, as `ps` reports %CPU.
            let cpu = if self.seen.contains(&pid) {
                f64::from(process.cpu_usage())
            } else if running > 0 {
                process.accumulated_cpu_time() as f64 / 10.0 / running as f64
            } else {
                0.0
            };
            now_seen.insert(pid);
            out.insert(
                pid,
                HostFacts {
                    user,
                    uid: process
                        .user_id()
                        .map_or(Reading::NotSupported, |uid| Reading::Value(**uid)),
                    parent_pid: process
                        .parent()
                        .map_or(Reading::NotSupported, |p| Reading::Value(p.as_u32())),
                    command: Reading::Value(command),
                    cpu_percent: Reading::Value(cpu),
                    memory_bytes: Reading::Value(process.memory()),
                    start_time: Reading::Value(process.start_time()),
                    running_seconds: Reading::Value(running),
                },
            );
        }
        self.seen = now_seen;
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
    /// The machine's host name, read once.
    pub fn hostname(&self) -> &str {
        &self.hostname
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
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (head, rest) = stat.rsplit_once(')')?;
            let name = head.split_once('(')?.1.to_string();
            let parent_pid = rest.split_whitespace().nth(1)?.parse().ok()?;
            Some(ProcessEntry {
                pid,
                parent_pid,
                name,
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

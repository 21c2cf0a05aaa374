//! The fleet: many machines' GPUs as one plain value, made by either feed (Prometheus'
//! series, or the nodes' own `/snapshot`s). The cluster screen, `--once` and `--json` read
//! only this. Its JSON form (`gputop --prometheus URL --once --json`) is versioned with the
//! snapshot's and has its own schema, `config/fleet.schema.json` ([`json_schema`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

use schemars::JsonSchema;
use serde::Serialize;

use super::{Snapshot, wire};

/// A GPU under this utilisation (percent) counts as idle.
pub const IDLE_BELOW_PERCENT: f64 = 1.0;

/// Top processes kept across the fleet, largest GPU memory first.
pub const TOP_PROCESSES: usize = 50;

/// Users and namespaces kept, largest GPU memory first.
pub const TOP_SHARES: usize = 50;

/// Idle GPUs listed, longest idle first (the summary counts them all).
pub const IDLE_LISTED: usize = 200;

/// Every node, the fleet's biggest processes and its use per user and namespace.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(rename = "fleet", deny_unknown_fields)]
pub struct Fleet {
    /// The document's format version (the snapshot's).
    #[schemars(extend("const" = wire::VERSION))]
    pub version: u32,
    /// When the figures were had: RFC 3339, UTC, whole seconds.
    #[serde(rename = "timestamp", serialize_with = "wire::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub taken_at: SystemTime,
    /// Where they come from: `prometheus URL` or `nodes`.
    pub feed: String,
    /// The figures are this many seconds old: the latest refresh failed (see `problems`).
    pub stale_seconds: Option<u64>,
    /// What is missing or wrong, one line each: a failed refresh, samples that are not
    /// numbers, series no exporter serves.
    pub problems: Vec<String>,
    /// GPUs idle this long or longer show as idle for at least this long (the feed looks no
    /// further back).
    pub idle_lookback_seconds: u64,
    /// Totals over the nodes.
    pub summary: Summary,
    /// Every node, in the feed's order.
    pub nodes: Vec<FleetNode>,
    /// The idle GPUs of the nodes that are up, longest idle first (at most [`IDLE_LISTED`]).
    pub idle_gpus: Vec<IdleGpu>,
    /// The largest processes by GPU memory across the fleet (at most [`TOP_PROCESSES`]).
    pub top_processes: Vec<FleetProcess>,
    /// GPU use per user across the fleet, largest memory first.
    pub users: Vec<Share>,
    /// GPU use per Kubernetes namespace across the fleet, largest memory first.
    pub namespaces: Vec<Share>,
}

/// Totals over the nodes that are up.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[schemars(rename = "fleet_summary", deny_unknown_fields)]
pub struct Summary {
    /// Nodes in all.
    pub nodes: usize,
    /// Nodes whose latest scrape or fetch succeeded.
    pub nodes_up: usize,
    /// Nodes whose latest scrape or fetch failed.
    pub nodes_down: usize,
    /// GPUs on the nodes that are up.
    pub gpus: usize,
    /// GPUs under [`IDLE_BELOW_PERCENT`] utilisation.
    pub gpus_idle: usize,
    /// GPU memory in use.
    pub memory_used_bytes: u64,
    /// GPU memory in all.
    pub memory_total_bytes: u64,
    /// Mean utilisation over the GPUs that report one.
    #[serde(serialize_with = "wire::two_decimals_or_null")]
    pub utilization_percent: Option<f64>,
    /// GPU processes.
    pub processes: usize,
    /// Alerts firing.
    pub alerts_firing: usize,
}

/// Where a node stands.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case", tag = "state")]
#[schemars(rename = "node_state")]
pub enum NodeState {
    /// Not asked yet.
    Waiting,
    /// Its latest scrape or fetch succeeded.
    Up,
    /// Its latest scrape or fetch failed.
    Down {
        /// Why, as far as the feed knows.
        reason: String,
        /// Fetches failed in a row (the nodes feed counts them; Prometheus does not say).
        failures: Option<u32>,
    },
}

/// One node.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(rename = "fleet_node", deny_unknown_fields)]
pub struct FleetNode {
    /// Prometheus' `instance` label, or the address asked.
    pub instance: String,
    /// The name the node gives itself, where the feed has it.
    pub hostname: Option<String>,
    /// Up, down or waiting.
    #[serde(flatten)]
    pub state: NodeState,
    /// Whether `state` is up.
    pub up: bool,
    /// The node's figures are this many seconds older than the fleet's.
    pub stale_seconds: Option<u64>,
    /// Its target labels other than `job` and `instance` (`cluster`, `rack`, ...).
    pub labels: BTreeMap<String, String>,
    /// Alerts firing on it.
    pub alerts_firing: usize,
    /// Its GPUs.
    pub gpus: usize,
    /// Its GPUs under [`IDLE_BELOW_PERCENT`] utilisation.
    pub gpus_idle: usize,
    /// GPU memory in use over its GPUs.
    pub memory_used_bytes: u64,
    /// GPU memory over its GPUs.
    pub memory_total_bytes: u64,
    /// Mean utilisation over its GPUs that report one.
    #[serde(serialize_with = "wire::two_decimals_or_null")]
    pub utilization_percent: Option<f64>,
    /// Its GPU processes.
    pub processes: usize,
    /// The users with GPU processes on it, by name (at most [`TOP_SHARES`]).
    pub users: Vec<String>,
    /// Its GPUs one by one, by index, where the feed read them: the nodes feed always,
    /// Prometheus for `--once` (the live screen reads each node's totals only).
    pub devices: Vec<FleetGpu>,
    /// Its whole snapshot, where the feed has one (the nodes feed; Prometheus for the node
    /// that is open).
    #[serde(skip)]
    pub snapshot: Option<Arc<Snapshot>>,
}

/// One GPU of a node.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(rename = "fleet_gpu", deny_unknown_fields)]
pub struct FleetGpu {
    /// Its index on the node.
    pub index: u32,
    /// Its product name.
    pub name: Option<String>,
    /// Its utilisation, percent.
    #[serde(serialize_with = "wire::two_decimals_or_null")]
    pub utilization_percent: Option<f64>,
    /// Memory in use.
    pub memory_used_bytes: Option<u64>,
    /// Memory in all.
    pub memory_total_bytes: Option<u64>,
    /// For an idle GPU (under [`IDLE_BELOW_PERCENT`]): seconds since it was last busy, at most
    /// the fleet's `idle_lookback_seconds`.
    pub idle_seconds: Option<u64>,
}

impl FleetGpu {
    /// Whether it is idle now.
    pub fn is_idle(&self) -> bool {
        self.utilization_percent.is_some_and(|u| u < IDLE_BELOW_PERCENT)
    }
}

/// An idle GPU of the fleet.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(rename = "fleet_idle_gpu", deny_unknown_fields)]
pub struct IdleGpu {
    /// Its node's `instance`.
    pub instance: String,
    /// Its index on that node.
    pub gpu_index: u32,
    /// Memory held on it while idle.
    pub memory_used_bytes: Option<u64>,
    /// Seconds since it was last busy, at most the fleet's `idle_lookback_seconds`.
    pub idle_seconds: Option<u64>,
}

/// A process among the fleet's largest.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(rename = "fleet_process", deny_unknown_fields)]
pub struct FleetProcess {
    /// Its node's `instance`.
    pub instance: String,
    /// The GPU's index on that node.
    pub gpu_index: u32,
    /// Its PID on that node.
    pub pid: u32,
    /// Its owner.
    pub user: Option<String>,
    /// Its command line, where the exporter serves it.
    pub command: Option<String>,
    /// GPU memory it holds.
    pub gpu_memory_bytes: Option<u64>,
    /// Its share of the GPU's streaming multiprocessors, percent.
    #[serde(serialize_with = "wire::two_decimals_or_null")]
    pub sm_percent: Option<f64>,
    /// Its Kubernetes pod.
    pub pod: Option<String>,
    /// Its pod's namespace.
    pub namespace: Option<String>,
    /// Its Slurm job.
    pub slurm_job: Option<String>,
}

/// GPU use of one user or namespace across the fleet.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[schemars(rename = "fleet_share", deny_unknown_fields)]
pub struct Share {
    /// The user or namespace.
    pub name: String,
    /// Nodes it uses GPUs on.
    pub nodes: usize,
    /// GPUs it uses.
    pub gpus: usize,
    /// Its GPU processes.
    pub processes: usize,
    /// GPU memory it holds.
    pub gpu_memory_bytes: u64,
}

impl Fleet {
    /// A fleet of `nodes` from `feed` at `taken_at`, with its summary computed.
    pub fn new(
        feed: String,
        taken_at: SystemTime,
        idle_lookback_seconds: u64,
        nodes: Vec<FleetNode>,
    ) -> Self {
        let mut fleet = Self {
            version: wire::VERSION,
            taken_at,
            feed,
            stale_seconds: None,
            problems: Vec::new(),
            idle_lookback_seconds,
            summary: Summary::default(),
            nodes,
            idle_gpus: Vec::new(),
            top_processes: Vec::new(),
            users: Vec::new(),
            namespaces: Vec::new(),
        };
        fleet.summarize();
        fleet
    }

    /// Recomputes [`Fleet::summary`] from the nodes.
    pub fn summarize(&mut self) {
        self.summary = Summary::of(self.nodes.iter());
    }

    /// Lists the idle GPUs of the nodes' devices, longest idle first.
    pub fn list_idle_gpus(&mut self) {
        let mut idle: Vec<IdleGpu> = self
            .nodes
            .iter()
            .filter(|n| n.up)
            .flat_map(|n| {
                n.devices.iter().filter(|g| g.is_idle()).map(|g| IdleGpu {
                    instance: n.instance.clone(),
                    gpu_index: g.index,
                    memory_used_bytes: g.memory_used_bytes,
                    idle_seconds: g.idle_seconds,
                })
            })
            .collect();
        sort_idle(&mut idle);
        self.idle_gpus = idle;
    }
}

/// Longest idle first, then by node and index; at most [`IDLE_LISTED`].
pub fn sort_idle(idle: &mut Vec<IdleGpu>) {
    idle.sort_by(|a, b| {
        b.idle_seconds
            .cmp(&a.idle_seconds)
            .then_with(|| a.instance.cmp(&b.instance))
            .then(a.gpu_index.cmp(&b.gpu_index))
    });
    idle.truncate(IDLE_LISTED);
}

impl Summary {
    /// The totals of `nodes`.
    pub fn of<'a>(nodes: impl Iterator<Item = &'a FleetNode>) -> Self {
        let mut summary = Self::default();
        let (mut utilization, mut reporting) = (0.0, 0usize);
        for node in nodes {
            summary.nodes += 1;
            if matches!(node.state, NodeState::Down { .. }) {
                summary.nodes_down += 1;
            }
            if !node.up {
                continue;
            }
            summary.nodes_up += 1;
            summary.processes += node.processes;
            summary.alerts_firing += node.alerts_firing;
            summary.gpus += node.gpus;
            summary.gpus_idle += node.gpus_idle;
            summary.memory_used_bytes += node.memory_used_bytes;
            summary.memory_total_bytes += node.memory_total_bytes;
            if let Some(u) = node.utilization_percent {
                // Weighed by the GPUs it is the mean of.
                utilization += u * node.gpus.max(1) as f64;
                reporting += node.gpus.max(1);
            }
        }
        summary.utilization_percent = (reporting > 0).then(|| utilization / reporting as f64);
        summary
    }
}

impl FleetNode {
    /// A node known by `instance` in `state`, with nothing else known yet.
    pub fn new(instance: String, state: NodeState) -> Self {
        Self {
            instance,
            hostname: None,
            up: state == NodeState::Up,
            state,
            stale_seconds: None,
            labels: BTreeMap::new(),
            alerts_firing: 0,
            gpus: 0,
            gpus_idle: 0,
            memory_used_bytes: 0,
            memory_total_bytes: 0,
            utilization_percent: None,
            processes: 0,
            users: Vec::new(),
            devices: Vec::new(),
            snapshot: None,
        }
    }

    /// How the views name it: its host name with the instance, or the instance.
    pub fn name(&self) -> String {
        match &self.hostname {
            Some(host) if !host.is_empty() && !self.instance.starts_with(host.as_str()) => {
                format!("{host} ({})", self.instance)
            }
            _ => self.instance.clone(),
        }
    }

    /// Sets its GPUs one by one, and its totals from them.
    pub fn set_devices(&mut self, devices: Vec<FleetGpu>) {
        let utils: Vec<f64> = devices.iter().filter_map(|g| g.utilization_percent).collect();
        self.gpus = devices.len();
        self.gpus_idle = devices.iter().filter(|g| g.is_idle()).count();
        self.memory_used_bytes = devices.iter().filter_map(|g| g.memory_used_bytes).sum();
        self.memory_total_bytes = devices.iter().filter_map(|g| g.memory_total_bytes).sum();
        self.utilization_percent =
            (!utils.is_empty()).then(|| utils.iter().sum::<f64>() / utils.len() as f64);
        self.devices = devices;
    }

    /// Its GPUs as the fleet shows them, from a snapshot it sent.
    pub fn devices_of(snapshot: &Snapshot) -> Vec<FleetGpu> {
        snapshot
            .devices
            .iter()
            .map(|d| {
                let memory = d.memory().get();
                FleetGpu {
                    index: d.index,
                    name: d.name.value().cloned(),
                    utilization_percent: d.utilization_percent(),
                    memory_used_bytes: memory.map(|m| m.used),
                    memory_total_bytes: memory.map(|m| m.total),
                    idle_seconds: None,
                }
            })
            .collect()
    }
}

/// The processes of nodes' snapshots as the fleet lists them, largest GPU memory first, at
/// most [`TOP_PROCESSES`].
pub fn top_processes(nodes: &[FleetNode]) -> Vec<FleetProcess> {
    let mut all: Vec<FleetProcess> = nodes
        .iter()
        .filter(|n| n.up)
        .filter_map(|n| n.snapshot.as_deref().map(|s| (n, s)))
        .flat_map(|(n, s)| {
            s.processes.iter().map(move |p| {
                let container = p.host.container.as_ref();
                let pod = container.and_then(|c| c.names.as_ref());
                FleetProcess {
                    instance: n.instance.clone(),
                    gpu_index: p.gpu_index,
                    pid: p.pid,
                    user: p.host.user.as_deref().map(str::to_owned),
                    command: p.host.command.as_deref().map(str::to_owned),
                    gpu_memory_bytes: p.gpu_memory_bytes.get(),
                    sm_percent: p.sm_percent.get().map(f64::from),
                    pod: pod.map(|pod| pod.pod.clone()),
                    namespace: pod.map(|pod| pod.namespace.clone()),
                    slurm_job: container
                        .filter(|c| c.runtime == super::Runtime::Slurm)
                        .map(|c| c.id.clone()),
                }
            })
        })
        .collect();
    all.sort_by(|a, b| {
        b.gpu_memory_bytes
            .cmp(&a.gpu_memory_bytes)
            .then_with(|| a.instance.cmp(&b.instance))
            .then(a.pid.cmp(&b.pid))
    });
    all.truncate(TOP_PROCESSES);
    all
}

/// GPU use per user (and per namespace) over nodes' snapshots, largest memory first.
pub fn shares_of(nodes: &[FleetNode], key: impl Fn(&super::GpuProcess) -> Option<String>) -> Vec<Share> {
    let mut totals: BTreeMap<String, (Share, BTreeSet<(usize, u32)>)> = BTreeMap::new();
    for (n, node) in nodes.iter().enumerate().filter(|(_, n)| n.up) {
        let Some(snapshot) = &node.snapshot else { continue };
        for p in &snapshot.processes {
            let Some(name) = key(p) else { continue };
            let entry = totals.entry(name).or_default();
            entry.0.processes += 1;
            entry.0.gpu_memory_bytes += p.gpu_memory_bytes.get().unwrap_or(0);
            entry.1.insert((n, p.gpu_index));
        }
    }
    let mut out: Vec<Share> = totals
        .into_iter()
        .map(|(name, (share, gpus))| Share {
            name,
            nodes: gpus.iter().map(|(n, _)| *n).collect::<BTreeSet<_>>().len(),
            gpus: gpus.len(),
            ..share
        })
        .collect();
    sort_shares(&mut out);
    out
}

/// Largest GPU memory first, then by name; at most [`TOP_SHARES`].
pub fn sort_shares(shares: &mut Vec<Share>) {
    shares.sort_by(|a, b| {
        b.gpu_memory_bytes
            .cmp(&a.gpu_memory_bytes)
            .then_with(|| a.name.cmp(&b.name))
    });
    shares.truncate(TOP_SHARES);
}

/// The JSON Schema of [`Fleet`] (draft 2020-12), as `config/fleet.schema.json` holds it.
pub fn json_schema() -> serde_json::Value {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator()
        .into_root_schema_for::<Fleet>();
    schema.to_value()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed schema is the one the fleet's types generate. After a change to them:
    /// `GPUTOP_UPDATE_SCHEMA=1 cargo test -p gputop-core schema`, then review the file's diff.
    #[test]
    fn the_committed_fleet_schema_is_the_generated_one() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/fleet.schema.json");
        let generated = serde_json::to_string_pretty(&json_schema()).unwrap() + "\n";
        if std::env::var_os("GPUTOP_UPDATE_SCHEMA").is_some() {
            std::fs::write(&path, &generated).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "config/fleet.schema.json is not what the fleet's types generate: \
             GPUTOP_UPDATE_SCHEMA=1 cargo test -p gputop-core schema"
        );
    }
}

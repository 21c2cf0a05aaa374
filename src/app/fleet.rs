//! The fleet as the cluster screen and `--once` show it: which nodes show and in what order
//! (sort column, filter by name, label or user), and the cells of each table (nodes, idle
//! GPUs, top processes, users and namespaces), so the screen and the text report say the
//! same. Pure: the state arranges when a fleet, a sort or a filter arrives.

use std::cmp::Ordering;

use gputop_core::format::{human_bytes, sanitize};
use gputop_core::model::fleet::{Fleet, FleetNode, FleetProcess, IdleGpu, NodeState, Share, Summary};

/// The node table's columns, in the order `,` and `.` step through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeColumn {
    Node,
    State,
    Gpus,
    Idle,
    Memory,
    Utilization,
    Processes,
    Alerts,
}

impl NodeColumn {
    pub const ALL: [Self; 8] = [
        Self::Node,
        Self::State,
        Self::Gpus,
        Self::Idle,
        Self::Memory,
        Self::Utilization,
        Self::Processes,
        Self::Alerts,
    ];

    /// Its heading.
    pub fn title(self) -> &'static str {
        match self {
            Self::Node => "NODE",
            Self::State => "STATE",
            Self::Gpus => "GPUS",
            Self::Idle => "IDLE",
            Self::Memory => "MEMORY",
            Self::Utilization => "UTIL",
            Self::Processes => "PROCS",
            Self::Alerts => "ALERTS",
        }
    }

    /// The next column (`forward`) or the previous one, round.
    pub fn step(self, forward: bool) -> Self {
        let at = Self::ALL.iter().position(|c| *c == self).unwrap_or(0);
        let count = Self::ALL.len();
        Self::ALL[if forward {
            (at + 1) % count
        } else {
            (at + count - 1) % count
        }]
    }

    /// Whether the largest comes first unless reversed (figures), or the smallest (names).
    fn descending(self) -> bool {
        !matches!(self, Self::Node | Self::State)
    }
}

/// How the cluster screen arranges the nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetView {
    pub sort: NodeColumn,
    pub reversed: bool,
    /// Words a node must match: `key=value` (a target label, or `user=NAME`), or text in its
    /// name or a label's value.
    pub filter: String,
    pub filter_editing: bool,
    /// Indexes into the fleet's nodes, in the order shown.
    pub rows: Vec<usize>,
    /// The selected row (into `rows`).
    pub selected: usize,
    /// The first row drawn.
    pub scroll: usize,
}

impl Default for FleetView {
    fn default() -> Self {
        Self {
            sort: NodeColumn::Node,
            reversed: false,
            filter: String::new(),
            filter_editing: false,
            rows: Vec::new(),
            selected: 0,
            scroll: 0,
        }
    }
}

impl FleetView {
    /// Filters and sorts the nodes again; the selection stays on the same node where it can.
    pub fn arrange(&mut self, fleet: &Fleet) {
        let kept = self.rows.get(self.selected).copied();
        let words: Vec<&str> = self.filter.split_whitespace().collect();
        let mut rows: Vec<usize> = (0..fleet.nodes.len())
            .filter(|&i| words.iter().all(|w| matches(&fleet.nodes[i], fleet, w)))
            .collect();
        rows.sort_by(|&a, &b| {
            let order = compare(self.sort, &fleet.nodes[a], &fleet.nodes[b]);
            let order = if self.sort.descending() {
                order.reverse()
            } else {
                order
            };
            let order = if self.reversed { order.reverse() } else { order };
            order.then_with(|| fleet.nodes[a].instance.cmp(&fleet.nodes[b].instance))
        });
        self.selected = kept
            .and_then(|node| rows.iter().position(|&r| r == node))
            .unwrap_or(0)
            .min(rows.len().saturating_sub(1));
        self.rows = rows;
    }

    /// Whether a node is shown (the filter takes it).
    pub fn shows(&self, fleet: &Fleet, node: &FleetNode) -> bool {
        self.filter.split_whitespace().all(|w| matches(node, fleet, w))
    }

    /// The user a `user=NAME` word of the filter asks for.
    pub fn user(&self) -> Option<&str> {
        self.filter
            .split_whitespace()
            .find_map(|w| w.strip_prefix("user="))
    }
}

fn matches(node: &FleetNode, fleet: &Fleet, word: &str) -> bool {
    match word.split_once('=') {
        Some(("user", user)) => {
            node.users.iter().any(|u| u == user)
                || fleet
                    .top_processes
                    .iter()
                    .any(|p| p.instance == node.instance && p.user.as_deref() == Some(user))
        }
        Some(("instance" | "node", name)) => node.instance == name || node.hostname.as_deref() == Some(name),
        Some((key, value)) => node.labels.get(key).is_some_and(|v| v == value),
        None => {
            let word = word.to_lowercase();
            node.name().to_lowercase().contains(&word)
                || node.labels.values().any(|v| v.to_lowercase().contains(&word))
        }
    }
}

fn compare(column: NodeColumn, a: &FleetNode, b: &FleetNode) -> Ordering {
    let rank = |n: &FleetNode| match n.state {
        NodeState::Down { .. } => 0,
        NodeState::Waiting => 1,
        NodeState::Up => 2,
    };
    match column {
        NodeColumn::Node => a.name().cmp(&b.name()),
        NodeColumn::State => rank(a).cmp(&rank(b)),
        NodeColumn::Gpus => a.gpus.cmp(&b.gpus),
        NodeColumn::Idle => a.gpus_idle.cmp(&b.gpus_idle),
        NodeColumn::Memory => a.memory_used_bytes.cmp(&b.memory_used_bytes),
        NodeColumn::Utilization => a
            .utilization_percent
            .partial_cmp(&b.utilization_percent)
            .unwrap_or(Ordering::Equal),
        NodeColumn::Processes => a.processes.cmp(&b.processes),
        NodeColumn::Alerts => a.alerts_firing.cmp(&b.alerts_firing),
    }
}

/// A percentage, or N/A.
fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "N/A".into(), |v| format!("{v:.0}%"))
}

/// The summary in one line.
pub fn summary_line(summary: &Summary) -> String {
    format!(
        "{} nodes: {} up, {} down   GPUs {} ({} idle)   memory {} / {}   mean utilization {}   processes {}   alerts {}",
        summary.nodes,
        summary.nodes_up,
        summary.nodes_down,
        summary.gpus,
        summary.gpus_idle,
        human_bytes(summary.memory_used_bytes),
        human_bytes(summary.memory_total_bytes),
        percent(summary.utilization_percent),
        summary.processes,
        summary.alerts_firing,
    )
}

/// The node table's headings, then LABELS.
pub const NODE_HEADINGS: [&str; 9] = [
    "NODE", "STATE", "GPUS", "IDLE", "MEMORY", "UTIL", "PROCS", "ALERTS", "LABELS",
];
/// Which of them are figures (right-aligned).
pub const NODE_FIGURES: [bool; 9] = [false, false, true, true, true, true, true, true, false];

/// A node's state in words: `up`, `up, data 12 s old`, `DOWN (3x): reason`.
pub fn state_text(node: &FleetNode) -> String {
    let age = node
        .stale_seconds
        .map_or_else(String::new, |s| format!(", data {s} s old"));
    match &node.state {
        NodeState::Waiting => "waiting".into(),
        NodeState::Up => format!("up{age}"),
        NodeState::Down { reason, failures } => {
            let times = failures.map_or_else(String::new, |n| format!("{n}x"));
            let inside = [times, age.trim_start_matches(", ").to_string()]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(", ");
            if inside.is_empty() {
                format!("DOWN: {}", sanitize(reason))
            } else {
                format!("DOWN ({inside}): {}", sanitize(reason))
            }
        }
    }
}

/// A node's row: its cells under [`NODE_HEADINGS`] (figures blank while it has none).
pub fn node_cells(node: &FleetNode) -> Vec<String> {
    let mut cells = vec![sanitize(&node.name()), state_text(node)];
    if node.gpus == 0 && !node.up {
        cells.extend(std::iter::repeat_n(String::new(), 6));
    } else {
        cells.extend([
            node.gpus.to_string(),
            node.gpus_idle.to_string(),
            format!(
                "{}/{}",
                human_bytes(node.memory_used_bytes),
                human_bytes(node.memory_total_bytes)
            ),
            percent(node.utilization_percent),
            node.processes.to_string(),
            node.alerts_firing.to_string(),
        ]);
    }
    cells.push(
        node.labels
            .iter()
            .map(|(k, v)| format!("{}={}", sanitize(k), sanitize(v)))
            .collect::<Vec<_>>()
            .join(" "),
    );
    cells
}

/// The idle GPU table's headings and figure columns.
pub const IDLE_HEADINGS: [&str; 4] = ["NODE", "GPU", "IDLE FOR", "MEMORY HELD"];
pub const IDLE_FIGURES: [bool; 4] = [false, true, true, true];

/// An idle GPU's row; `lookback` is how far back the feed looked.
pub fn idle_cells(gpu: &IdleGpu, lookback: u64) -> Vec<String> {
    let idle = match gpu.idle_seconds {
        Some(s) if s >= lookback && lookback > 0 => format!(">= {} min", s / 60),
        Some(s) => format!("{} min", s / 60),
        None => "N/A".into(),
    };
    vec![
        sanitize(&gpu.instance),
        gpu.gpu_index.to_string(),
        idle,
        gpu.memory_used_bytes.map_or_else(|| "N/A".into(), human_bytes),
    ]
}

/// The top process table's headings and figure columns.
pub const PROCESS_HEADINGS: [&str; 7] = ["NODE", "GPU", "PID", "USER", "GPU-MEM", "SM", "POD / JOB"];
pub const PROCESS_FIGURES: [bool; 7] = [false, true, true, false, true, true, false];

/// A top process's row.
pub fn process_cells(p: &FleetProcess) -> Vec<String> {
    let place = match (&p.namespace, &p.pod, &p.slurm_job) {
        (Some(ns), Some(pod), _) => format!("{}/{}", sanitize(ns), sanitize(pod)),
        (_, _, Some(job)) => format!("slurm:{}", sanitize(job)),
        _ => String::new(),
    };
    vec![
        sanitize(&p.instance),
        p.gpu_index.to_string(),
        p.pid.to_string(),
        sanitize(p.user.as_deref().unwrap_or("?")),
        p.gpu_memory_bytes.map_or_else(|| "N/A".into(), human_bytes),
        percent(p.sm_percent),
        place,
    ]
}

/// The share tables' figure headings (after USER or NAMESPACE) and figure columns.
pub const SHARE_HEADINGS: [&str; 4] = ["NODES", "GPUS", "PROCS", "GPU-MEM"];
pub const SHARE_FIGURES: [bool; 5] = [false, true, true, true, true];

/// A user's or namespace's row.
pub fn share_cells(share: &Share) -> Vec<String> {
    vec![
        sanitize(&share.name),
        share.nodes.to_string(),
        share.gpus.to_string(),
        share.processes.to_string(),
        human_bytes(share.gpu_memory_bytes),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputop_core::model::fleet::FleetGpu;
    use std::time::SystemTime;

    fn node(name: &str, utils: &[f64], labels: &[(&str, &str)], users: &[&str]) -> FleetNode {
        let mut n = FleetNode::new(name.into(), NodeState::Up);
        let devices = utils
            .iter()
            .enumerate()
            .map(|(i, u)| FleetGpu {
                index: i as u32,
                name: None,
                utilization_percent: Some(*u),
                memory_used_bytes: Some(1 << 30),
                memory_total_bytes: Some(8 << 30),
                idle_seconds: None,
            })
            .collect();
        n.set_devices(devices);
        n.labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        n.users = users.iter().map(|u| u.to_string()).collect();
        n
    }

    #[test]
    fn sorts_by_a_column_either_way_and_filters_by_label_user_and_name() {
        let fleet = Fleet::new(
            "nodes".into(),
            SystemTime::UNIX_EPOCH,
            0,
            vec![
                node("gpu-a:9835", &[50.0, 0.0], &[("cluster", "a")], &["alice"]),
                node("gpu-b:9835", &[90.0], &[("cluster", "b")], &["bob"]),
                node("gpu-c:9835", &[0.0, 0.0, 0.0], &[("cluster", "a")], &[]),
            ],
        );
        let mut view = FleetView::default();
        view.arrange(&fleet);
        assert_eq!(view.rows, [0, 1, 2]);
        view.sort = NodeColumn::Utilization;
        view.arrange(&fleet);
        assert_eq!(view.rows, [1, 0, 2], "the busiest first");
        view.reversed = true;
        view.arrange(&fleet);
        assert_eq!(view.rows, [2, 0, 1]);
        view.sort = NodeColumn::Idle;
        view.reversed = false;
        view.arrange(&fleet);
        assert_eq!(view.rows, [2, 0, 1], "the most idle GPUs first");
        view.selected = 1; // gpu-a
        view.filter = "cluster=a".into();
        view.arrange(&fleet);
        assert_eq!(
            (view.rows.clone(), view.selected),
            (vec![2, 0], 1),
            "the selection stays on gpu-a"
        );
        view.filter = "cluster=a user=alice".into();
        view.arrange(&fleet);
        assert_eq!(view.rows, [0]);
        view.filter = "GPU-B".into();
        view.arrange(&fleet);
        assert_eq!(view.rows, [1]);
        assert_eq!(NodeColumn::Node.step(false), NodeColumn::Alerts);
    }
}

#[cfg(test)]
mod opening {
    use std::sync::Arc;
    use std::time::SystemTime;

    use gputop_core::config::Settings;
    use gputop_core::model::Snapshot;
    use gputop_core::model::fleet::{Fleet, FleetNode, NodeState};

    use crate::app::filter::Selection;
    use crate::app::state::{Action, App, Effect, Go, Received};
    use crate::app::view::Screen;

    fn fleet(names: &[&str]) -> Arc<Fleet> {
        let nodes = names
            .iter()
            .map(|name| {
                let mut node = FleetNode::new(name.to_string(), NodeState::Up);
                node.snapshot = Some(Arc::new(Snapshot::new(
                    SystemTime::now(),
                    name.to_string(),
                    vec![],
                    vec![],
                )));
                node
            })
            .collect();
        Arc::new(Fleet::new("nodes".into(), SystemTime::now(), 0, nodes))
    }

    #[test]
    fn the_open_node_stays_open_when_another_joins_before_it() {
        let mut app = App::new(Settings::default(), Selection::default(), true, None);
        app.view.screen = Screen::Cluster;
        app.update(Action::Received(Received::Fleet(fleet(&["b:9835", "c:9835"]))));
        app.view.fleet.selected = 1;
        let effects = app.update(Action::Go(Go::Details));
        assert_eq!(effects.first(), Some(&Effect::OpenNode(Some("c:9835".into()))));
        assert_eq!(
            app.data.snapshot.as_ref().map(|s| s.hostname.as_str()),
            Some("c:9835")
        );
        // A node sorted before it arrives: the view still shows c.
        app.update(Action::Received(Received::Fleet(fleet(&[
            "a:9835", "b:9835", "c:9835",
        ]))));
        assert_eq!(
            app.data.snapshot.as_ref().map(|s| s.hostname.as_str()),
            Some("c:9835")
        );
        assert_eq!(app.update(Action::Go(Go::Back)), [Effect::OpenNode(None)]);
        assert_eq!(app.view.screen, Screen::Cluster);
    }
}

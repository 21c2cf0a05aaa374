//! The interactive view's state and its one update function: `Action` in, state changed,
//! `Effect`s out for the runtime to execute (signals, reading /proc, quitting). No I/O here.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::app::filter::Selection;
use crate::app::query::Query;
use crate::config::Settings;
use crate::model::order::{self, SortKey};
use crate::model::{GpuProcess, Snapshot};
use crate::monitor::Monitor;
use crate::monitor::alerts::Transition;
use crate::source::remote::Cluster;
use crate::source::replay::{PlayerCommand, ReplayStatus};

pub use crate::model::ProcessKey;

/// The signals gputop sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Terminate,
    Kill,
    Interrupt,
}

impl Signal {
    pub fn name(self) -> &'static str {
        match self {
            Self::Terminate => "SIGTERM",
            Self::Kill => "SIGKILL",
            Self::Interrupt => "SIGINT",
        }
    }

    pub fn number(self) -> i32 {
        match self {
            Self::Terminate => libc::SIGTERM,
            Self::Kill => libc::SIGKILL,
            Self::Interrupt => libc::SIGINT,
        }
    }
}

/// A process a signal is meant for, as the user saw it when confirming.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The PID to signal, in gputop's PID namespace.
    pub pid: u32,
    /// The PID under /proc (differs from `pid` only when /proc shows an outer namespace).
    pub proc_pid: u32,
    pub start_time: Option<u64>,
    pub uid: Option<u32>,
    pub user: String,
    pub command: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Screen {
    Main,
    Help,
    Details,
    Environment,
    Tree,
    /// Device history charts.
    Charts,
    /// Active alerts, the transitions log and the rules in force.
    Alerts,
    /// Remote nodes: the cluster summary and per-user totals.
    Cluster,
    /// Who uses what: per user and per container, now and accumulated.
    Users,
}

impl Screen {
    /// Text screens opened over another one: they scroll, and Back returns to it.
    pub fn is_overlay(self) -> bool {
        matches!(self, Self::Help | Self::Environment | Self::Alerts | Self::Users)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutMode {
    Auto,
    Full,
    Compact,
}

/// Everything the user can do, as the event loop decodes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Quit,
    /// Ctrl-Z: give the terminal back and stop; redraw everything on resume.
    Suspend,
    /// Clear and redraw the whole screen.
    Redraw,
    Help,
    Back,
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    SortNext,
    SortPrevious,
    /// `o`/`O` pressed: the next letter picks the sort key.
    SortPrefix {
        reverse: bool,
    },
    SortBy {
        key: SortKey,
        reverse: bool,
    },
    StartFilter,
    FilterInput(char),
    FilterBackspace,
    FilterAccept,
    FilterClear,
    Tag,
    ClearTags,
    AskSignal(Signal),
    Confirm,
    Cancel,
    Details,
    Environment,
    Tree,
    Layout(LayoutMode),
    /// Scroll the COMMAND column sideways by this many characters; `None` back to the start.
    ScrollCommand(Option<i32>),
    /// A click on a process row, counted from the first visible row.
    ClickRow(usize),
    Scroll(i32),
    Snapshot(Arc<Snapshot>),
    /// The runtime's word on live data that has not been refreshed (`None`: it is fresh).
    Stale(Option<Stale>),
    /// The process table was drawn with this many rows.
    TableRows(usize),
    EnvironmentRead(Result<Vec<String>, String>),
    ProcessTableRead(Vec<crate::host::ProcessEntry>),
    SignalsSent(Vec<String>),
    Charts,
    /// On the charts screen: the next (or previous) GPU.
    ChartDevice(i32),
    /// On the charts screen: the next time span.
    ChartSpan,
    AlertLog,
    /// The users and containers screen, or back from it.
    Users,
    /// Replay: where playback stands.
    ReplayStatus(ReplayStatus),
    /// Replay: pause or resume, seek, change speed.
    Replay(PlayerCommand),
    /// Replay moved backwards: history and alerts start over.
    HistoryRestart,
    /// Remote nodes: the latest state of every node.
    Cluster(Arc<Cluster>),
    /// Problems delivering alerts (log file, notification command), for the status line.
    AlertDeliveryFailed(Vec<String>),
}

/// Work for the runtime.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    Quit,
    Suspend,
    Redraw,
    Send {
        signal: Signal,
        targets: Vec<Target>,
    },
    ReadEnvironment {
        pid: u32,
    },
    /// The tree view needs every process's parent.
    ReadProcessTable,
    /// Alert transitions to log and notify.
    DeliverAlerts(Vec<Transition>),
    /// Replay: a command for the player.
    Replay(PlayerCommand),
}

/// A confirmation waiting for Enter or Esc.
#[derive(Debug, Clone, PartialEq)]
pub struct Confirmation {
    pub signal: Signal,
    pub targets: Vec<Target>,
}

/// Time spans the charts screen cycles through (`w`), in seconds.
pub const CHART_SPANS: [f64; 4] = [600.0, 3600.0, 6.0 * 3600.0, 86_400.0];

/// The whole interactive state.
#[derive(Debug, Clone)]
pub struct App {
    pub snapshot: Option<Arc<Snapshot>>,
    pub settings: Settings,
    pub selection: Selection,
    pub readonly: bool,
    /// This user's uid: other users' rows are dimmed.
    pub my_uid: Option<u32>,
    pub screen: Screen,
    /// The screen to return to from help and environment.
    pub previous: Screen,
    pub layout: LayoutMode,
    pub sort: SortKey,
    pub reverse: bool,
    pub sort_prefix: Option<bool>,
    pub filter: String,
    pub filter_editing: bool,
    pub filter_error: Option<String>,
    pub selected: Option<ProcessKey>,
    pub tagged: BTreeSet<u32>,
    pub scroll: usize,
    /// Rows the process table showed when last drawn (Action::TableRows).
    pub table_rows: usize,
    pub confirmation: Option<Confirmation>,
    pub status: Option<String>,
    pub environment: Option<(u32, Result<Vec<String>, String>)>,
    /// First line shown on the help and environment screens.
    pub text_scroll: usize,
    /// First character of the COMMAND column shown (long command lines).
    pub command_offset: usize,
    /// History, alerts and GPU use per user and container since the view started.
    pub monitor: Monitor,
    /// The GPU the charts screen shows, and the index into [`CHART_SPANS`].
    pub chart_device: u32,
    pub chart_span: usize,
    /// Set while playing a recording.
    pub replay: Option<ReplayStatus>,
    /// Set in the remote view: every node's latest state.
    pub cluster: Option<Arc<Cluster>>,
    /// The node row selected on the cluster screen, and the node shown on the main screen.
    pub cluster_selected: usize,
    pub node: Option<usize>,
    /// Every process's parent and name, read for the tree view.
    pub process_table: Vec<crate::host::ProcessEntry>,
    /// Set while the live data is older than two refreshes, or not there yet.
    pub stale: Option<Stale>,
}

/// Live data the collector has not refreshed: how old it is and what it waits on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale {
    pub age_seconds: u64,
    /// The driver call (or other read) that has not returned, where known.
    pub waiting_on: Option<String>,
}

impl App {
    pub fn new(settings: Settings, selection: Selection, readonly: bool, my_uid: Option<u32>) -> Self {
        let monitor = Monitor::new(
            &settings.history,
            &settings.alert,
            settings.display.refresh_interval,
        );
        Self {
            snapshot: None,
            settings,
            selection,
            readonly,
            my_uid,
            screen: Screen::Main,
            previous: Screen::Main,
            layout: LayoutMode::Auto,
            sort: SortKey::GpuMemory,
            reverse: false,
            sort_prefix: None,
            filter: String::new(),
            filter_editing: false,
            filter_error: None,
            selected: None,
            tagged: BTreeSet::new(),
            scroll: 0,
            table_rows: 10,
            confirmation: None,
            status: None,
            environment: None,
            text_scroll: 0,
            command_offset: 0,
            monitor,
            chart_device: 0,
            chart_span: 0,
            replay: None,
            cluster: None,
            cluster_selected: 0,
            node: None,
            process_table: Vec::new(),
            stale: None,
        }
    }

    /// The process rows on screen, filtered and sorted.
    pub fn rows(&self) -> Vec<&GpuProcess> {
        let Some(snapshot) = &self.snapshot else {
            return Vec::new();
        };
        let query = Query::parse(&self.filter).unwrap_or_default();
        let mut rows: Vec<&GpuProcess> = snapshot
            .processes
            .iter()
            .filter(|p| self.selection.shows_process(p, &snapshot.devices) && query.matches(p))
            .collect();
        order::by_key(&mut rows, self.sort, self.reverse);
        rows
    }

    /// The identities of the rows on screen, in order.
    fn row_keys(&self) -> Vec<ProcessKey> {
        self.rows().into_iter().map(ProcessKey::of).collect()
    }

    /// Where the selection is among `rows`.
    pub fn selected_index(&self, rows: &[&GpuProcess]) -> Option<usize> {
        let key = self.selected?;
        rows.iter().position(|p| ProcessKey::of(p) == key)
    }

    pub fn selected_process(&self) -> Option<&GpuProcess> {
        let rows = self.rows();
        let index = self.selected_index(&rows)?;
        Some(rows[index])
    }

    fn select_index(&mut self, keys: &[ProcessKey], index: usize) {
        if keys.is_empty() {
            self.selected = None;
            return;
        }
        let index = index.min(keys.len() - 1);
        self.selected = Some(keys[index]);
        self.keep_visible(index);
    }

    fn selected_position(&self, keys: &[ProcessKey]) -> Option<usize> {
        let key = self.selected?;
        keys.iter().position(|k| *k == key)
    }

    fn keep_visible(&mut self, index: usize) {
        let height = self.table_rows.max(1);
        if index < self.scroll {
            self.scroll = index;
        } else if index >= self.scroll + height {
            self.scroll = index + 1 - height;
        }
    }

    fn move_selection(&mut self, delta: isize) {
        let keys = self.row_keys();
        if keys.is_empty() {
            return;
        }
        let next = match self.selected_position(&keys) {
            None if delta >= 0 => 0,
            None => keys.len() - 1,
            Some(i) => i.saturating_add_signed(delta).min(keys.len() - 1),
        };
        self.select_index(&keys, next);
    }

    /// Why the selected process cannot be signalled, when gputop cannot reach it.
    fn unreachable_choice(&self) -> Option<String> {
        let p = self.selected_process()?;
        match &p.host.mapping {
            crate::model::PidMapping::Unmapped { reason } => Some(format!(
                "Signals disabled: PID {} is {}",
                p.pid,
                crate::format::sanitize(reason)
            )),
            _ => None,
        }
    }

    /// Targets of a signal: the tagged processes, else the selected one.
    fn targets(&self) -> Vec<Target> {
        let Some(snapshot) = &self.snapshot else {
            return Vec::new();
        };
        let chosen: Vec<&GpuProcess> = if self.tagged.is_empty() {
            self.selected_process().into_iter().collect()
        } else {
            snapshot
                .processes
                .iter()
                .filter(|p| self.tagged.contains(&p.pid))
                .collect()
        };
        let mut targets: Vec<Target> = Vec::new();
        for p in chosen {
            // A process gputop cannot reach by PID is never a target.
            let Some(local_pid) = p.local_pid() else { continue };
            if targets.iter().any(|t| t.pid == local_pid) {
                continue; // the same process on several GPUs is one target
            }
            targets.push(Target {
                pid: local_pid,
                proc_pid: p.pid,
                start_time: p.host.start_time.get(),
                uid: p.host.uid.get(),
                user: p.host.user.value().cloned().unwrap_or_else(|| "?".into()),
                command: p.host.command.value().cloned().unwrap_or_else(|| "?".into()),
            });
        }
        targets.sort_by_key(|t| t.pid);
        targets
    }

    /// Takes a new snapshot: history, alerts, tags and selection follow it. Returns the
    /// alert transitions it caused.
    fn accept_snapshot(&mut self, snapshot: Arc<Snapshot>) -> Vec<Transition> {
        let transitions = self.monitor.ingest(&snapshot);
        let pids: BTreeSet<u32> = snapshot.processes.iter().map(|p| p.pid).collect();
        self.tagged.retain(|pid| pids.contains(pid));
        self.snapshot = Some(snapshot);
        let keys = self.row_keys();
        if let Some(index) = self.selected_position(&keys) {
            self.keep_visible(index);
        }
        self.scroll = self.scroll.min(keys.len().saturating_sub(1));
        transitions
    }

    /// Applies one action; returns the effects to run.
    pub fn update(&mut self, action: Action) -> Vec<Effect> {
        // `o`/`O` waits for exactly one more key.
        if !matches!(
            action,
            Action::SortPrefix { .. } | Action::Snapshot(_) | Action::TableRows(_)
        ) {
            self.sort_prefix = None;
        }
        match &action {
            Action::Quit
            | Action::Suspend
            | Action::Redraw
            | Action::Help
            | Action::Back
            | Action::Details
            | Action::Environment
            | Action::Tree
            | Action::Layout(_)
            | Action::Charts
            | Action::ChartDevice(_)
            | Action::ChartSpan
            | Action::Users
            | Action::AlertLog
            | Action::Replay(_) => self.change_screen(action),
            Action::Up
            | Action::Down
            | Action::PageUp
            | Action::PageDown
            | Action::Home
            | Action::End
            | Action::Scroll(_)
            | Action::ClickRow(_)
            | Action::ScrollCommand(_) => self.navigate(action),
            Action::SortNext
            | Action::SortPrevious
            | Action::SortPrefix { .. }
            | Action::SortBy { .. }
            | Action::StartFilter
            | Action::FilterInput(_)
            | Action::FilterBackspace
            | Action::FilterAccept
            | Action::FilterClear => self.arrange(action),
            Action::Tag | Action::ClearTags | Action::AskSignal(_) | Action::Confirm | Action::Cancel => {
                self.signal_action(action)
            }
            // Listed, not `_`: a new action must be given to a handler, or it would be
            // silently ignored.
            Action::Stale(_)
            | Action::TableRows(_)
            | Action::Snapshot(_)
            | Action::ProcessTableRead(_)
            | Action::EnvironmentRead(_)
            | Action::SignalsSent(_)
            | Action::AlertDeliveryFailed(_)
            | Action::ReplayStatus(_)
            | Action::HistoryRestart
            | Action::Cluster(_) => self.receive(action),
        }
    }

    /// Screens and layout: opening, closing and switching views.
    fn change_screen(&mut self, action: Action) -> Vec<Effect> {
        match action {
            Action::Quit => return vec![Effect::Quit],
            Action::Suspend => return vec![Effect::Suspend],
            Action::Redraw => return vec![Effect::Redraw],
            Action::Help if self.screen != Screen::Help => {
                self.previous = self.screen;
                self.screen = Screen::Help;
                self.text_scroll = 0;
            }
            Action::Back if self.cluster.is_some() && matches!(self.screen, Screen::Main | Screen::Tree) => {
                self.screen = Screen::Cluster;
                self.node = None;
            }
            Action::Back => match self.screen {
                screen if screen.is_overlay() => self.screen = self.previous,
                _ => self.screen = Screen::Main,
            },
            Action::Details if self.screen == Screen::Cluster => {
                let snapshot = self
                    .cluster
                    .as_ref()
                    .and_then(|c| c.nodes.get(self.cluster_selected))
                    .and_then(|n| n.snapshot.clone());
                if let Some(snapshot) = snapshot {
                    self.node = Some(self.cluster_selected);
                    self.restart_history();
                    self.selected = None;
                    self.tagged.clear();
                    self.screen = Screen::Main;
                    return self.update(Action::Snapshot(snapshot));
                }
                self.status = Some("No snapshot from this node yet".into());
            }
            Action::Details if self.selected_process().is_some() => self.screen = Screen::Details,
            Action::Environment => {
                if let Some(p) = self.selected_process() {
                    let (pid, local) = (p.pid, p.local_pid());
                    self.previous = self.screen;
                    self.screen = Screen::Environment;
                    self.environment = None;
                    self.text_scroll = 0;
                    if local.is_none() {
                        // Never the environment of a local process that shares the number.
                        let why = "not readable: the process is outside gputop's PID namespace";
                        self.environment = Some((pid, Err(why.into())));
                        return Vec::new();
                    }
                    return vec![Effect::ReadEnvironment { pid }];
                }
            }
            Action::Tree => {
                self.screen = if self.screen == Screen::Tree {
                    Screen::Main
                } else {
                    Screen::Tree
                };
            }
            Action::Layout(mode) => self.layout = mode,
            Action::Charts => {
                if self.screen == Screen::Charts {
                    self.screen = Screen::Main;
                } else {
                    // Start at the selected process's GPU, if any.
                    if let Some(p) = self.selected_process() {
                        self.chart_device = p.gpu_index;
                    }
                    self.screen = Screen::Charts;
                }
            }
            Action::ChartDevice(delta) => {
                let count = self.monitor.history.device_count().max(1) as i64;
                self.chart_device =
                    (i64::from(self.chart_device) + i64::from(delta)).rem_euclid(count) as u32;
            }
            Action::ChartSpan => self.chart_span = (self.chart_span + 1) % CHART_SPANS.len(),
            Action::Users => self.toggle_overlay(Screen::Users),
            Action::AlertLog => self.toggle_overlay(Screen::Alerts),
            Action::Replay(command) if self.replay.is_some() => return vec![Effect::Replay(command)],
            _ => {}
        }
        Vec::new()
    }

    /// Moving the selection and scrolling.
    fn navigate(&mut self, action: Action) -> Vec<Effect> {
        match action {
            Action::Up | Action::Down if self.screen == Screen::Cluster => {
                let count = self.cluster.as_ref().map_or(0, |c| c.nodes.len());
                let step: isize = if action == Action::Up { -1 } else { 1 };
                self.cluster_selected = self
                    .cluster_selected
                    .saturating_add_signed(step)
                    .min(count.saturating_sub(1));
            }
            Action::Up => self.move_selection(-1),
            Action::Down => self.move_selection(1),
            Action::PageUp => self.move_selection(-(self.table_rows.max(1) as isize)),
            Action::PageDown => self.move_selection(self.table_rows.max(1) as isize),
            Action::Home => {
                let keys = self.row_keys();
                self.select_index(&keys, 0);
            }
            Action::End => {
                let keys = self.row_keys();
                self.select_index(&keys, usize::MAX);
            }
            Action::Scroll(delta) if self.screen.is_overlay() => {
                self.text_scroll = self.text_scroll.saturating_add_signed(delta as isize);
            }
            Action::Scroll(delta) => self.move_selection(delta as isize),
            Action::ClickRow(offset) => {
                let keys = self.row_keys();
                if self.scroll + offset < keys.len() {
                    self.select_index(&keys, self.scroll + offset);
                }
            }
            Action::ScrollCommand(delta) => {
                self.command_offset =
                    delta.map_or(0, |d| self.command_offset.saturating_add_signed(d as isize));
            }
            _ => {}
        }
        Vec::new()
    }

    /// Sorting and filtering the process table.
    fn arrange(&mut self, action: Action) -> Vec<Effect> {
        match action {
            Action::SortNext | Action::SortPrevious => {
                self.sort = if action == Action::SortNext {
                    self.sort.next()
                } else {
                    self.sort.previous()
                };
                self.reverse = false;
                self.status = Some(format!("Sorted by {}", self.sort.name()));
            }
            Action::SortPrefix { reverse } => self.sort_prefix = Some(reverse),
            Action::SortBy { key, reverse } => {
                self.sort = key;
                self.reverse = reverse;
                self.status = Some(format!(
                    "Sorted by {}{}",
                    key.name(),
                    if reverse { ", reversed" } else { "" }
                ));
            }
            Action::StartFilter => self.filter_editing = true,
            Action::FilterInput(c) => {
                self.filter.push(c);
                self.check_filter();
            }
            Action::FilterBackspace => {
                self.filter.pop();
                self.check_filter();
            }
            Action::FilterAccept => self.filter_editing = false,
            Action::FilterClear => {
                self.filter.clear();
                self.filter_editing = false;
                self.filter_error = None;
            }
            _ => {}
        }
        Vec::new()
    }

    /// Tagging processes and the signal confirmation.
    fn signal_action(&mut self, action: Action) -> Vec<Effect> {
        match action {
            Action::Tag => {
                if let Some(p) = self.selected_process() {
                    let pid = p.pid;
                    if !self.tagged.remove(&pid) {
                        self.tagged.insert(pid);
                    }
                    self.move_selection(1);
                }
            }
            Action::ClearTags => {
                self.tagged.clear();
                self.selected = None;
            }
            Action::AskSignal(signal) => {
                if self.readonly {
                    self.status = Some("Read-only: signals are disabled".into());
                } else {
                    let targets = self.targets();
                    let unreachable = self.unreachable_choice();
                    if let (true, Some(why)) = (targets.is_empty(), unreachable) {
                        self.status = Some(why);
                    } else if targets.is_empty() {
                        self.status = Some("Select a process (arrows) or tag some (Space) first".into());
                    } else {
                        self.confirmation = Some(Confirmation { signal, targets });
                    }
                }
            }
            Action::Confirm => {
                if let Some(Confirmation { signal, targets }) = self.confirmation.take()
                    && !self.readonly
                {
                    self.tagged.clear();
                    return vec![Effect::Send { signal, targets }];
                }
            }
            Action::Cancel => {
                self.confirmation = None;
                self.status = Some("Cancelled".into());
            }
            _ => {}
        }
        Vec::new()
    }

    /// What the runtime hands back: snapshots, staleness, layout, the results of effects.
    fn receive(&mut self, action: Action) -> Vec<Effect> {
        match action {
            Action::Stale(stale) => self.stale = stale,
            Action::TableRows(rows) => self.table_rows = rows,
            Action::Snapshot(snapshot) => {
                self.stale = None;
                let transitions = self.accept_snapshot(snapshot);
                let mut effects = Vec::new();
                if !transitions.is_empty() {
                    effects.push(Effect::DeliverAlerts(transitions));
                }
                if self.screen == Screen::Tree {
                    effects.push(Effect::ReadProcessTable);
                }
                return effects;
            }
            Action::ProcessTableRead(table) => self.process_table = table,
            Action::SignalsSent(outcomes) => self.status = Some(outcomes.join("; ")),
            Action::EnvironmentRead(result) => {
                if let Some(p) = self.selected_process() {
                    self.environment = Some((p.pid, result));
                }
            }
            Action::AlertDeliveryFailed(problems) => self.status = Some(problems.join("; ")),
            Action::ReplayStatus(status) => self.replay = Some(status),
            Action::HistoryRestart => self.restart_history(),
            Action::Cluster(cluster) => {
                let shown = self
                    .node
                    .and_then(|i| cluster.nodes.get(i))
                    .and_then(|n| n.snapshot.clone());
                self.cluster = Some(cluster);
                if let Some(snapshot) = shown
                    && self.snapshot.as_ref().is_none_or(|s| !Arc::ptr_eq(s, &snapshot))
                {
                    return self.update(Action::Snapshot(snapshot));
                }
            }
            _ => {}
        }
        Vec::new()
    }

    /// Opens `screen` over the current one, or closes it back to where it was opened.
    fn toggle_overlay(&mut self, screen: Screen) {
        if self.screen == screen {
            self.screen = self.previous;
        } else {
            self.previous = self.screen;
            self.screen = screen;
            self.text_scroll = 0;
        }
    }

    fn restart_history(&mut self) {
        self.monitor.restart();
    }

    fn check_filter(&mut self) {
        self.filter_error = Query::parse(&self.filter).err();
        let keys = self.row_keys();
        self.scroll = 0;
        match self.selected_position(&keys) {
            Some(index) => self.keep_visible(index),
            None => self.selected = None,
        }
    }
}

/// A line of the tree view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeLine {
    pub depth: usize,
    pub pid: u32,
    pub name: String,
    /// The GPU process row, when this process uses a GPU.
    pub gpu: Option<ProcessKey>,
    pub last_child: bool,
    /// For each ancestor level below the root: whether that ancestor was its parent's last
    /// child (no more siblings below it to draw a line for).
    pub ancestors_last: Vec<bool>,
}

impl App {
    /// GPU processes with their ancestors up to init and their direct children, as a tree.
    pub fn tree_lines(&self) -> Vec<TreeLine> {
        use std::collections::BTreeMap;
        let rows = self.rows();
        // A local process that merely shares an unreachable PID's number is not its.
        let unreachable: BTreeSet<u32> = rows
            .iter()
            .filter(|p| p.local_pid().is_none())
            .map(|p| p.pid)
            .collect();
        let table = || {
            self.process_table
                .iter()
                .filter(|e| !unreachable.contains(&e.pid) && !unreachable.contains(&e.parent_pid))
        };
        let parent: HashMap<u32, (u32, &str)> = table()
            .map(|e| (e.pid, (e.parent_pid, e.name.as_str())))
            .collect();
        let gpu_pids: BTreeSet<u32> = rows.iter().map(|p| p.pid).collect();
        let mut shown: BTreeSet<u32> = BTreeSet::new();
        for &pid in &gpu_pids {
            // Ancestors, guarding against loops in a racy /proc read.
            let mut at = pid;
            while shown.insert(at) {
                match parent.get(&at) {
                    Some((ppid, _)) if *ppid != 0 => at = *ppid,
                    _ => break,
                }
            }
        }
        for entry in table() {
            if gpu_pids.contains(&entry.parent_pid) {
                shown.insert(entry.pid);
            }
        }
        let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        let mut roots = Vec::new();
        for &pid in &shown {
            match parent
                .get(&pid)
                .map(|(ppid, _)| *ppid)
                .filter(|ppid| shown.contains(ppid) && *ppid != pid)
            {
                Some(ppid) => children.entry(ppid).or_default().push(pid),
                None => roots.push(pid),
            }
        }
        let mut out = Vec::new();
        let mut stack: Vec<(u32, usize, bool, Vec<bool>)> = roots
            .iter()
            .rev()
            .enumerate()
            .map(|(i, p)| (*p, 0, i == 0, Vec::new()))
            .collect();
        while let Some((pid, depth, last_child, ancestors_last)) = stack.pop() {
            let name = parent.get(&pid).map(|(_, n)| (*n).to_string()).or_else(|| {
                rows.iter()
                    .find(|p| p.pid == pid)
                    .and_then(|p| p.host.command.value().cloned())
            });
            out.push(TreeLine {
                depth,
                pid,
                name: name.unwrap_or_else(|| "?".into()),
                gpu: rows.iter().find(|p| p.pid == pid).map(|p| ProcessKey::of(p)),
                last_child,
                ancestors_last: ancestors_last.clone(),
            });
            if depth > 64 {
                continue;
            }
            if let Some(kids) = children.get(&pid) {
                let mut below = ancestors_last;
                if depth > 0 {
                    below.push(last_child);
                }
                for (i, kid) in kids.iter().rev().enumerate() {
                    stack.push((*kid, depth + 1, i == 0, below.clone()));
                }
            }
        }
        out
    }
}

//! The interactive state, split into what was observed ([`Observed`]: the snapshot and the
//! monitor it feeds) and how the user looks at it ([`View`]), and its one update function:
//! `Action` in, state changed, `Effect`s out for the runtime to execute (signals, reading
//! /proc, quitting). No I/O here.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::app::alert_marks::AlertMarks;
use crate::app::filter::Selection;
use crate::app::query::Query;
use gputop_core::config::Settings;
use gputop_core::model::fleet::Fleet;
use gputop_core::model::order::{self, SortKey};
use gputop_core::model::{GpuProcess, Snapshot};
use gputop_core::monitor::Monitor;
use gputop_core::monitor::alerts::Transition;
use gputop_core::source::replay::{PlayerCommand, ReplayStatus};

use crate::app::view::{CHART_SPANS, Confirmation, LayoutMode, Screen, View};
pub use gputop_core::model::ProcessKey;

/// Where the rows come from. Only this machine's live processes are read from /proc (their
/// environment) or signalled; the others say why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// This machine's GPUs, now.
    Live,
    /// The built-in simulated machine: its processes are invented.
    Demo,
    /// A recording played back.
    Recording,
    /// Another machine's exporter.
    Remote,
}

impl Origin {
    /// Why a row's environment cannot be shown; `None` for this machine's live processes.
    pub fn no_environment(self) -> Option<&'static str> {
        match self {
            Self::Live => None,
            Self::Demo => Some("A demo process: it is invented and has no environment"),
            Self::Recording => Some("A recorded process: its environment is not recorded"),
            Self::Remote => Some("A remote process: its environment stays on its node"),
        }
    }

    /// Why a row cannot be signalled; `None` for this machine's live processes.
    pub fn no_signals(self) -> Option<&'static str> {
        match self {
            Self::Live => None,
            Self::Demo => Some("Demo: its processes are invented, so signals are off"),
            Self::Recording => Some("A recorded process: signals reach only live ones"),
            Self::Remote => Some("A remote process: signals reach only this machine's"),
        }
    }
}

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
    /// Clock ticks after boot at which it started (its identity, with the PID).
    pub start_ticks: Option<u64>,
    pub uid: Option<u32>,
    pub user: String,
    pub command: String,
}

/// Everything the user can do, as the event loop decodes it, and what the runtime hands
/// back; each kind has its own handler, which matches every one of its actions.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Go(Go),
    Move(Move),
    Arrange(Arrange),
    Signalling(Signalling),
    Received(Received),
}

/// Screens and layout: opening, closing and switching views.
#[derive(Debug, Clone, PartialEq)]
pub enum Go {
    Quit,
    /// Ctrl-Z: give the terminal back and stop; redraw everything on resume.
    Suspend,
    /// Clear and redraw the whole screen.
    Redraw,
    Help,
    Back,
    Details,
    Environment,
    Tree,
    Layout(LayoutMode),
    Charts,
    /// On the charts screen: the next (or previous) GPU.
    ChartDevice(i32),
    /// On the charts screen: the next time span.
    ChartSpan,
    AlertLog,
    /// The users and containers screen, or back from it.
    Users,
    /// Replay: pause or resume, seek, change speed.
    Replay(PlayerCommand),
}

/// Moving the selection and scrolling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    Scroll(i32),
    /// A click on a process row, counted from the first visible row.
    ClickRow(usize),
    /// Scroll the COMMAND column sideways by this many characters; `None` back to the start.
    ScrollCommand(Option<i32>),
}

/// Sorting and filtering the process table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrange {
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
    /// Reverse the current order.
    Invert,
    StartFilter,
    FilterInput(char),
    FilterBackspace,
    FilterAccept,
    FilterClear,
}

/// Tagging processes and the signal confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signalling {
    Tag,
    ClearTags,
    AskSignal(Signal),
    Confirm,
    Cancel,
}

/// What the runtime hands back: snapshots, staleness, layout, the results of effects.
#[derive(Debug, Clone, PartialEq)]
pub enum Received {
    Snapshot(Arc<Snapshot>),
    /// The runtime's word on live data that has not been refreshed (`None`: it is fresh).
    Stale(Option<Stale>),
    /// The process table was drawn with this many rows.
    TableRows(usize),
    /// The text screen was drawn with `page` rows; `last_top` is the last first line.
    TextRows {
        page: usize,
        last_top: usize,
    },
    EnvironmentRead(Result<Vec<String>, String>),
    ProcessTableRead(Vec<gputop_core::host::ProcessEntry>),
    SignalsSent(Vec<String>),
    /// Replay: where playback stands.
    ReplayStatus(ReplayStatus),
    /// Replay moved backwards: history and alerts start over.
    HistoryRestart,
    /// The fleet: every node's latest state.
    Fleet(Arc<Fleet>),
    /// Problems delivering alerts (log file, notification command), for the status line.
    AlertDeliveryFailed(Vec<String>),
    /// The status line's message has been read: the key hints come back.
    StatusExpired,
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
    /// The fleet: read this node's GPUs and processes too (`None`: no node is open).
    OpenNode(Option<String>),
}

/// The whole interactive state: what was observed, and how the user is looking at it.
#[derive(Debug, Clone)]
pub struct App {
    pub settings: Settings,
    pub data: Observed,
    pub view: View,
}

/// What gputop observed, and the engines fed by it.
#[derive(Debug, Clone)]
pub struct Observed {
    pub snapshot: Option<Arc<Snapshot>>,
    /// History, alerts and GPU use per user and container since the view started.
    pub monitor: Monitor,
    /// The monitor's alerts as the screen marks them, taken after each snapshot.
    pub alert_marks: AlertMarks,
    /// Set while playing a recording.
    pub replay: Option<ReplayStatus>,
    /// Set in the fleet view: every node's latest state.
    pub fleet: Option<Arc<Fleet>>,
    /// Every process's parent and name, read for the tree view.
    pub process_table: Vec<gputop_core::host::ProcessEntry>,
    /// Set while the live data is older than two refreshes, or not there yet.
    pub stale: Option<Stale>,
    /// Whose processes the rows are.
    pub origin: Origin,
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
            settings,
            data: Observed {
                snapshot: None,
                monitor,
                alert_marks: AlertMarks::default(),
                replay: None,
                fleet: None,
                process_table: Vec::new(),
                stale: None,
                origin: Origin::Live,
            },
            view: View::new(selection, readonly, my_uid),
        }
    }

    /// The process rows on screen, filtered and sorted.
    pub fn rows(&self) -> Vec<&GpuProcess> {
        let Some(snapshot) = &self.data.snapshot else {
            return Vec::new();
        };
        self.view.rows.iter().map(|&i| &snapshot.processes[i]).collect()
    }

    /// Filters and sorts the rows again: after a new snapshot, a new sort or a new filter.
    fn arrange_rows(&mut self) {
        let mut rows = std::mem::take(&mut self.view.rows);
        rows.clear();
        if let Some(snapshot) = &self.data.snapshot {
            let query = Query::parse(&self.view.filter).unwrap_or_default();
            let processes = &snapshot.processes;
            let shown = self.view.selection.over(&snapshot.devices);
            rows.extend((0..processes.len()).filter(|&i| {
                let p = &processes[i];
                shown.process(p) && query.matches(p)
            }));
            let (key, reverse) = (self.view.sort, self.view.reverse);
            rows.sort_by(|&a, &b| order::compare(&processes[a], &processes[b], key, reverse));
        }
        self.view.rows = rows;
        self.prepare_tree();
    }

    /// The tree screen's lines from the rows and the process table, while it is open.
    fn prepare_tree(&mut self) {
        self.view.tree = if self.view.screen == Screen::Tree {
            self.tree_lines()
        } else {
            Vec::new()
        };
    }

    /// The identities of the rows on screen, in order.
    fn row_keys(&self) -> Vec<ProcessKey> {
        self.rows().into_iter().map(ProcessKey::of).collect()
    }

    /// Where the selection is among `rows`.
    pub fn selected_index(&self, rows: &[&GpuProcess]) -> Option<usize> {
        let key = self.view.selected?;
        rows.iter().position(|p| ProcessKey::of(p) == key)
    }

    pub fn selected_process(&self) -> Option<&GpuProcess> {
        let rows = self.rows();
        let index = self.selected_index(&rows)?;
        Some(rows[index])
    }

    fn select_index(&mut self, keys: &[ProcessKey], index: usize) {
        if keys.is_empty() {
            self.view.selected = None;
            return;
        }
        let index = index.min(keys.len() - 1);
        self.view.selected = Some(keys[index]);
        self.keep_visible(index);
    }

    fn selected_position(&self, keys: &[ProcessKey]) -> Option<usize> {
        let key = self.view.selected?;
        keys.iter().position(|k| *k == key)
    }

    fn keep_visible(&mut self, index: usize) {
        let height = self.view.table_rows.max(1);
        if index < self.view.scroll {
            self.view.scroll = index;
        } else if index >= self.view.scroll + height {
            self.view.scroll = index + 1 - height;
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
        let reason = p.host.unmapped_reason.as_deref()?;
        Some(format!(
            "Signals disabled: PID {} is {}",
            p.pid,
            gputop_core::format::sanitize(reason)
        ))
    }

    /// Targets of a signal: the tagged processes, else the selected one.
    fn targets(&self) -> Vec<Target> {
        let Some(snapshot) = &self.data.snapshot else {
            return Vec::new();
        };
        let chosen: Vec<&GpuProcess> = if self.view.tagged.is_empty() {
            self.selected_process().into_iter().collect()
        } else {
            snapshot
                .processes
                .iter()
                .filter(|p| self.view.tagged.contains(&p.pid))
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
                start_ticks: p.host.start_ticks.get(),
                uid: p.host.uid.get(),
                user: p.host.user.as_deref().unwrap_or("?").to_owned(),
                command: p.host.command.as_deref().unwrap_or("?").to_owned(),
            });
        }
        targets.sort_by_key(|t| t.pid);
        targets
    }

    /// Takes a new snapshot: history, alerts, tags and selection follow it. Returns the
    /// alert transitions it caused.
    fn accept_snapshot(&mut self, snapshot: Arc<Snapshot>) -> Vec<Transition> {
        let transitions = self.data.monitor.ingest(&snapshot);
        self.data.alert_marks = AlertMarks::of(self.data.monitor.alerts());
        let pids: BTreeSet<u32> = snapshot.processes.iter().map(|p| p.pid).collect();
        self.view.tagged.retain(|pid| pids.contains(pid));
        self.data.snapshot = Some(snapshot);
        self.arrange_rows();
        let keys = self.row_keys();
        if let Some(index) = self.selected_position(&keys) {
            self.keep_visible(index);
        }
        self.view.scroll = self.view.scroll.min(keys.len().saturating_sub(1));
        transitions
    }

    /// Applies one action; returns the effects to run.
    pub fn update(&mut self, action: Action) -> Vec<Effect> {
        // `o`/`O` waits for exactly one more key.
        if !matches!(
            action,
            Action::Arrange(Arrange::SortPrefix { .. })
                | Action::Received(
                    Received::Snapshot(_)
                        | Received::TableRows(_)
                        | Received::TextRows { .. }
                        | Received::StatusExpired
                )
        ) {
            self.view.sort_prefix = None;
        }
        match action {
            Action::Go(go) => {
                let effects = self.go(go);
                // A screen left or returned to (an overlay closed over the tree) changes
                // what is prepared for it.
                self.prepare_tree();
                effects
            }
            Action::Move(step) => {
                self.navigate(step);
                Vec::new()
            }
            Action::Arrange(arrange) => {
                self.arrange(arrange);
                Vec::new()
            }
            Action::Signalling(step) => self.signal_action(step),
            Action::Received(received) => self.receive(received),
        }
    }

    /// Screens and layout: opening, closing and switching views.
    fn go(&mut self, action: Go) -> Vec<Effect> {
        match action {
            Go::Quit => return vec![Effect::Quit],
            Go::Suspend => return vec![Effect::Suspend],
            Go::Redraw => return vec![Effect::Redraw],
            Go::Help if self.view.screen != Screen::Help => {
                self.view.previous = self.view.screen;
                self.view.screen = Screen::Help;
                self.view.text_scroll = 0;
                self.view.text_offset = 0;
            }
            Go::Back
                if self.data.fleet.is_some() && matches!(self.view.screen, Screen::Main | Screen::Tree) =>
            {
                self.view.screen = Screen::Cluster;
                self.view.node = None;
                return vec![Effect::OpenNode(None)];
            }
            Go::Back => match self.view.screen {
                screen if screen.is_overlay() => self.view.screen = self.view.previous,
                _ => self.view.screen = Screen::Main,
            },
            Go::Details if self.view.screen == Screen::Cluster => {
                let fleet = self.data.fleet.clone();
                let Some(node) = fleet.as_ref().and_then(|f| {
                    let index = *self.view.fleet.rows.get(self.view.fleet.selected)?;
                    f.nodes.get(index)
                }) else {
                    return Vec::new();
                };
                if !node.up && node.snapshot.is_none() {
                    self.view.status = Some("No data from this node: it is down".into());
                    return Vec::new();
                }
                self.view.node = Some(node.instance.clone());
                self.restart_history();
                self.view.selected = None;
                self.view.tagged.clear();
                self.view.screen = Screen::Main;
                self.data.snapshot = None;
                let mut effects = vec![Effect::OpenNode(Some(node.instance.clone()))];
                if let Some(snapshot) = node.snapshot.clone() {
                    effects.extend(self.update(Action::Received(Received::Snapshot(snapshot))));
                }
                return effects;
            }
            Go::Details if self.selected_process().is_some() => self.view.screen = Screen::Details,
            Go::Environment => {
                if let Some(why) = self.data.origin.no_environment() {
                    self.view.status = Some(why.into());
                } else if let Some(p) = self.selected_process() {
                    let (pid, local) = (p.pid, p.local_pid());
                    self.view.previous = self.view.screen;
                    self.view.screen = Screen::Environment;
                    self.view.environment = None;
                    self.view.text_scroll = 0;
                    self.view.text_offset = 0;
                    self.view.text_offset = 0;
                    if local.is_none() {
                        // Never the environment of a local process that shares the number.
                        let why = "not readable: the process is outside gputop's PID namespace";
                        self.view.environment = Some((pid, Err(why.into())));
                        return Vec::new();
                    }
                    return vec![Effect::ReadEnvironment { pid }];
                }
            }
            Go::Tree => {
                self.view.screen = if self.view.screen == Screen::Tree {
                    Screen::Main
                } else {
                    Screen::Tree
                };
            }
            Go::Layout(mode) => self.view.layout = mode,
            Go::Charts => {
                if self.view.screen == Screen::Charts {
                    self.view.screen = Screen::Main;
                } else {
                    // Start at the selected process's GPU, if any.
                    if let Some(p) = self.selected_process() {
                        self.view.chart_device = p.gpu_index;
                    }
                    self.view.screen = Screen::Charts;
                }
            }
            Go::ChartDevice(delta) => {
                let count = self.data.monitor.history().device_count().max(1) as i64;
                self.view.chart_device =
                    (i64::from(self.view.chart_device) + i64::from(delta)).rem_euclid(count) as u32;
            }
            Go::ChartSpan => self.view.chart_span = (self.view.chart_span + 1) % CHART_SPANS.len(),
            Go::Users => self.toggle_overlay(Screen::Users),
            Go::AlertLog => self.toggle_overlay(Screen::Alerts),
            Go::Replay(command) if self.data.replay.is_some() => return vec![Effect::Replay(command)],
            // Help on the help screen, details with no process selected, replay keys with
            // nothing replaying: nothing to do.
            Go::Help | Go::Details | Go::Replay(_) => {}
        }
        Vec::new()
    }

    /// Moving the selection and scrolling.
    fn navigate(&mut self, action: Move) {
        if self.view.screen.is_overlay() {
            self.scroll_text(action);
            return;
        }
        match action {
            _ if self.view.screen == Screen::Cluster => {
                let fleet = &mut self.view.fleet;
                let page = self.view.table_rows.max(1) as isize;
                let step: isize = match action {
                    Move::Up => -1,
                    Move::Down => 1,
                    Move::PageUp => -page,
                    Move::PageDown => page,
                    Move::Home => isize::MIN,
                    Move::End => isize::MAX,
                    Move::Scroll(delta) => delta as isize,
                    Move::ClickRow(offset) => (fleet.scroll + offset) as isize - fleet.selected as isize,
                    Move::ScrollCommand(_) => 0,
                };
                fleet.selected = fleet
                    .selected
                    .saturating_add_signed(step)
                    .min(fleet.rows.len().saturating_sub(1));
            }
            Move::Up => self.move_selection(-1),
            Move::Down => self.move_selection(1),
            Move::PageUp => self.move_selection(-(self.view.table_rows.max(1) as isize)),
            Move::PageDown => self.move_selection(self.view.table_rows.max(1) as isize),
            Move::Home => {
                let keys = self.row_keys();
                self.select_index(&keys, 0);
            }
            Move::End => {
                let keys = self.row_keys();
                self.select_index(&keys, usize::MAX);
            }
            Move::Scroll(delta) => self.move_selection(delta as isize),
            Move::ClickRow(offset) => {
                let keys = self.row_keys();
                if self.view.scroll + offset < keys.len() {
                    self.select_index(&keys, self.view.scroll + offset);
                }
            }
            Move::ScrollCommand(delta) => {
                self.view.command_offset =
                    delta.map_or(0, |d| self.view.command_offset.saturating_add_signed(d as isize));
            }
        }
    }

    /// Scrolling a text screen: never past its end, a page being the rows it shows.
    fn scroll_text(&mut self, action: Move) {
        let view = &mut self.view;
        let (page, last) = (view.text_page.max(1), view.text_last_top);
        let top = view.text_scroll.min(last);
        view.text_scroll = match action {
            Move::Up => top.saturating_sub(1),
            Move::Down => top + 1,
            Move::PageUp => top.saturating_sub(page),
            Move::PageDown => top + page,
            Move::Home => 0,
            Move::End => last,
            Move::Scroll(delta) => top.saturating_add_signed(delta as isize),
            Move::ClickRow(_) | Move::ScrollCommand(_) => top,
        }
        .min(last);
        if let Move::ScrollCommand(delta) = action {
            view.text_offset = delta.map_or(0, |d| view.text_offset.saturating_add_signed(d as isize));
        }
    }

    /// Sorting and filtering the process table (or the cluster screen's nodes).
    fn arrange(&mut self, action: Arrange) {
        if self.view.screen == Screen::Cluster {
            self.arrange_nodes(action);
            return;
        }
        match action {
            Arrange::SortNext | Arrange::SortPrevious => {
                self.view.sort = if action == Arrange::SortNext {
                    self.view.sort.next()
                } else {
                    self.view.sort.previous()
                };
                self.view.reverse = false;
                self.arrange_rows();
                self.view.status = Some(format!("Sorted by {}", self.view.sort.name()));
            }
            Arrange::SortPrefix { reverse } => self.view.sort_prefix = Some(reverse),
            Arrange::SortBy { key, reverse } => {
                self.view.sort = key;
                self.view.reverse = reverse;
                self.arrange_rows();
                self.view.status = Some(format!(
                    "Sorted by {}{}",
                    key.name(),
                    if reverse { ", reversed" } else { "" }
                ));
            }
            Arrange::Invert => {
                self.view.reverse = !self.view.reverse;
                self.arrange_rows();
            }
            Arrange::StartFilter => self.view.filter_editing = true,
            Arrange::FilterInput(c) => {
                self.view.filter.push(c);
                self.check_filter();
            }
            Arrange::FilterBackspace => {
                self.view.filter.pop();
                self.check_filter();
            }
            Arrange::FilterAccept => self.view.filter_editing = false,
            Arrange::FilterClear => {
                self.view.filter.clear();
                self.view.filter_editing = false;
                self.view.filter_error = None;
                self.arrange_rows();
            }
        }
    }

    /// Sorting and filtering the cluster screen's nodes.
    fn arrange_nodes(&mut self, action: Arrange) {
        let fleet = &mut self.view.fleet;
        match action {
            Arrange::SortNext | Arrange::SortPrevious => {
                fleet.sort = fleet.sort.step(action == Arrange::SortNext);
                fleet.reversed = false;
            }
            Arrange::Invert => fleet.reversed = !fleet.reversed,
            Arrange::SortBy { .. } | Arrange::SortPrefix { .. } => {}
            Arrange::StartFilter => self.view.filter_editing = true,
            Arrange::FilterInput(c) => fleet.filter.push(c),
            Arrange::FilterBackspace => {
                fleet.filter.pop();
            }
            Arrange::FilterAccept => self.view.filter_editing = false,
            Arrange::FilterClear => {
                fleet.filter.clear();
                self.view.filter_editing = false;
            }
        }
        if let Some(data) = &self.data.fleet {
            fleet.arrange(data);
        }
    }

    /// Tagging processes and the signal confirmation.
    fn signal_action(&mut self, action: Signalling) -> Vec<Effect> {
        match action {
            Signalling::Tag => {
                if let Some(p) = self.selected_process() {
                    let pid = p.pid;
                    if !self.view.tagged.remove(&pid) {
                        self.view.tagged.insert(pid);
                    }
                    self.move_selection(1);
                }
            }
            Signalling::ClearTags => {
                self.view.tagged.clear();
                self.view.selected = None;
            }
            Signalling::AskSignal(signal) => {
                if let Some(why) = self.data.origin.no_signals() {
                    self.view.status = Some(why.into());
                } else if self.view.readonly {
                    self.view.status = Some("Read-only: signals are disabled".into());
                } else {
                    let targets = self.targets();
                    let unreachable = self.unreachable_choice();
                    if let (true, Some(why)) = (targets.is_empty(), unreachable) {
                        self.view.status = Some(why);
                    } else if targets.is_empty() {
                        self.view.status = Some("Select a process (arrows) or tag some (Space) first".into());
                    } else {
                        self.view.confirmation = Some(Confirmation { signal, targets });
                    }
                }
            }
            Signalling::Confirm => {
                if let Some(Confirmation { signal, targets }) = self.view.confirmation.take()
                    && !self.view.readonly
                    && self.data.origin == Origin::Live
                {
                    self.view.tagged.clear();
                    return vec![Effect::Send { signal, targets }];
                }
            }
            // Esc on the confirmation says so; on the sort prompt it just closes it.
            Signalling::Cancel if self.view.confirmation.is_some() => {
                self.view.confirmation = None;
                self.view.status = Some("Cancelled".into());
            }
            // Nothing to cancel (the sort prompt closed before this handler ran).
            Signalling::Cancel => {}
        }
        Vec::new()
    }

    /// What the runtime hands back: snapshots, staleness, layout, the results of effects.
    fn receive(&mut self, action: Received) -> Vec<Effect> {
        match action {
            Received::Stale(stale) => self.data.stale = stale,
            Received::TableRows(rows) => self.view.table_rows = rows,
            Received::TextRows { page, last_top } => {
                self.view.text_page = page;
                self.view.text_last_top = last_top;
                self.view.text_scroll = self.view.text_scroll.min(last_top);
            }
            Received::Snapshot(snapshot) => {
                self.data.stale = None;
                let transitions = self.accept_snapshot(snapshot);
                let mut effects = Vec::new();
                if !transitions.is_empty() {
                    effects.push(Effect::DeliverAlerts(transitions));
                }
                if self.view.screen == Screen::Tree {
                    effects.push(Effect::ReadProcessTable);
                }
                return effects;
            }
            Received::ProcessTableRead(table) => {
                self.data.process_table = table;
                self.prepare_tree();
            }
            Received::SignalsSent(outcomes) => self.view.status = Some(outcomes.join("; ")),
            Received::EnvironmentRead(result) => {
                if let Some(p) = self.selected_process() {
                    self.view.environment = Some((p.pid, result));
                }
            }
            Received::AlertDeliveryFailed(problems) => self.view.status = Some(problems.join("; ")),
            Received::ReplayStatus(status) => self.data.replay = Some(status),
            Received::HistoryRestart => self.restart_history(),
            Received::StatusExpired => self.view.status = None,
            Received::Fleet(fleet) => {
                let shown = self
                    .view
                    .node
                    .as_ref()
                    .and_then(|open| fleet.nodes.iter().find(|n| &n.instance == open))
                    .and_then(|n| n.snapshot.clone());
                self.view.fleet.arrange(&fleet);
                self.data.fleet = Some(fleet);
                if let Some(snapshot) = shown
                    && self
                        .data
                        .snapshot
                        .as_ref()
                        .is_none_or(|s| !Arc::ptr_eq(s, &snapshot))
                {
                    return self.receive(Received::Snapshot(snapshot));
                }
            }
        }
        Vec::new()
    }

    /// Opens `screen` over the current one, or closes it back to where it was opened.
    fn toggle_overlay(&mut self, screen: Screen) {
        if self.view.screen == screen {
            self.view.screen = self.view.previous;
        } else {
            self.view.previous = self.view.screen;
            self.view.screen = screen;
            self.view.text_scroll = 0;
            self.view.text_offset = 0;
        }
    }

    fn restart_history(&mut self) {
        self.data.monitor.restart();
        self.data.alert_marks = AlertMarks::default();
    }

    fn check_filter(&mut self) {
        self.view.filter_error = Query::parse(&self.view.filter).err();
        self.arrange_rows();
        let keys = self.row_keys();
        self.view.scroll = 0;
        match self.selected_position(&keys) {
            Some(index) => self.keep_visible(index),
            None => self.view.selected = None,
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
            self.data
                .process_table
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
            // Only through parents the table knows: a snapshot's table (the demo, a
            // recording, a node) holds its GPU processes alone, not their launchers.
            while shown.insert(at) {
                match parent.get(&at) {
                    Some((ppid, _)) if *ppid != 0 && parent.contains_key(ppid) => at = *ppid,
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
                    .and_then(|p| p.host.command.as_deref().map(str::to_owned))
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

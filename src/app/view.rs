//! How the user is looking at the data: the screen, the selection and tags, sorting and
//! filtering, scroll positions, the open dialog and the status line. Plain data; only
//! [`crate::app::state::App::update`] changes it and `ui` reads it.

use std::collections::BTreeSet;

use crate::app::filter::Selection;
use crate::app::fleet::FleetView;
use crate::app::state::{Signal, Target, TreeLine};
use gputop_core::model::ProcessKey;
use gputop_core::model::order::SortKey;

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
    /// The fleet (Prometheus or remote nodes): the summary, the nodes, idle GPUs, top
    /// processes, users and namespaces.
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

/// A confirmation waiting for Enter or Esc.
#[derive(Debug, Clone, PartialEq)]
pub struct Confirmation {
    pub signal: Signal,
    pub targets: Vec<Target>,
}

/// Time spans the charts screen cycles through (`w`), in seconds.
pub const CHART_SPANS: [f64; 4] = [600.0, 3600.0, 6.0 * 3600.0, 86_400.0];

/// The view state.
#[derive(Debug, Clone)]
pub struct View {
    /// The GPUs and processes the command line asked to show.
    pub selection: Selection,
    /// Signals are disabled.
    pub readonly: bool,
    /// This user's uid: other users' rows are dimmed.
    pub my_uid: Option<u32>,
    pub screen: Screen,
    /// The screen to return to from help and environment.
    pub previous: Screen,
    pub layout: LayoutMode,
    pub sort: SortKey,
    pub reverse: bool,
    /// `o`/`O` was pressed: the next key picks the sort key (reversed when `true`).
    pub sort_prefix: Option<bool>,
    pub filter: String,
    /// The process rows on screen, filtered and sorted: positions in the snapshot's process
    /// list, arranged again only when the snapshot, the sort or the filter changes.
    pub(super) rows: Vec<usize>,
    /// The tree screen's lines, prepared while it is open: again for each new snapshot,
    /// process table, sort or filter, never while drawing; empty on the other screens.
    pub tree: Vec<TreeLine>,
    pub filter_editing: bool,
    pub filter_error: Option<String>,
    pub selected: Option<ProcessKey>,
    pub tagged: BTreeSet<u32>,
    /// First process row shown.
    pub scroll: usize,
    /// Rows the process table showed when last drawn (`Received::TableRows`).
    pub table_rows: usize,
    pub confirmation: Option<Confirmation>,
    pub status: Option<String>,
    /// The environment screen's process and what reading its environment gave.
    pub environment: Option<(u32, Result<Vec<String>, String>)>,
    /// First line shown on the text screens (help, alerts, users, environment).
    pub text_scroll: usize,
    /// Columns the text screens' lines are shifted left by (Right and Left scroll them).
    pub text_offset: usize,
    /// The text screen's rows and the last first line it can scroll to, as last drawn
    /// (`Received::TextRows`).
    pub text_page: usize,
    pub text_last_top: usize,
    /// First character of the COMMAND column shown (long command lines).
    pub command_offset: usize,
    /// The GPU the charts screen shows, and the index into [`CHART_SPANS`].
    pub chart_device: u32,
    pub chart_span: usize,
    /// The cluster screen's order, filter and selection, and the node (its instance) shown
    /// on the main screen.
    pub fleet: FleetView,
    pub node: Option<String>,
}

impl View {
    pub fn new(selection: Selection, readonly: bool, my_uid: Option<u32>) -> Self {
        Self {
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
            rows: Vec::new(),
            tree: Vec::new(),
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
            text_offset: 0,
            text_page: 10,
            text_last_top: 0,
            command_offset: 0,
            chart_device: 0,
            chart_span: 0,
            fleet: FleetView::default(),
            node: None,
        }
    }
}

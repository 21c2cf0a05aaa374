//! The interactive view without I/O: its state and pure update ([`state`]), the view state
//! it keeps apart from the data ([`view`]), the one key map that decodes keys and feeds help
//! and the footer ([`keymap`]), the filter and the query language, what the screen marks
//! of the alerts ([`alert_marks`]), the process table's columns and cells, shared with
//! `--once` ([`columns`]), and the cluster screen's order and filter ([`fleet`]).

pub mod alert_marks;
pub mod columns;
pub mod filter;
pub mod fleet;
pub mod keymap;
pub mod query;
pub mod state;
pub mod view;

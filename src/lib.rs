//! gputop: an interactive viewer for NVIDIA GPUs and the processes using them.
//!
//! Data flows one way: [`collect`] reads NVML (or the demo) and the host into
//! [`model::Snapshot`] values; [`app`] holds the interactive state and its pure update;
//! [`ui`] draws it and [`report`] prints `--once`. [`interactive`] is the event loop,
//! [`tui`] the terminal, [`signal`] safe process signalling. [`config`] owns settings and
//! [`cli`] the command line; [`run`] ties them together.

#![recursion_limit = "256"]

pub mod alerts;
pub mod app;
pub mod capture;
pub mod cli;
pub mod collect;
pub mod config;
pub mod export;
pub mod heap;
pub mod history;
pub mod interactive;
pub mod model;
pub mod record;
pub mod report;
pub mod run;
pub mod signal;
pub mod term;
pub mod ui;
pub mod usage;
pub mod validate;

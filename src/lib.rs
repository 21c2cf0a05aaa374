//! gputop: an interactive viewer for NVIDIA GPUs and the processes using them.
//!
//! Data flows one way: a [`source`] (NVML, the demo, a replay, remote nodes) and [`host`]
//! facts become [`model::Snapshot`] values on the [`collector`] thread; [`monitor`] keeps
//! their history, alerts and usage; [`app`] holds the view's state and its pure update,
//! [`ui`] draws it, and [`output`] writes reports, recordings and the exporter's pages.
//! [`interactive`] is the event loop, [`term`] the terminal, [`signal`] safe process
//! signalling. [`config`] owns settings and [`cli`] the command line; [`run`] ties them
//! together.

#![recursion_limit = "256"]

pub mod app;
pub mod cli;
pub mod collector;
pub mod config;
pub mod format;
pub mod heap;
pub mod host;
pub mod interactive;
pub mod model;
pub mod monitor;
pub mod output;
pub mod run;
pub mod signal;
pub mod source;
pub mod term;
pub mod ui;
pub mod validate;

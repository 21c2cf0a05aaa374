//! gputop: an interactive viewer for NVIDIA GPUs and the processes using them.
//!
//! Data flows one way: [`collect`] reads NVML (or the demo) and the host into
//! [`model::Snapshot`] values; [`app`] selects and orders them; [`report`] prints them.
//! [`config`] owns settings and [`cli`] the command line; [`run`] ties them together.

#![recursion_limit = "256"]

pub mod app;
pub mod cli;
pub mod collect;
pub mod config;
pub mod model;
pub mod report;
pub mod run;
pub mod validate;

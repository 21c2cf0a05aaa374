//! gputop: NVIDIA GPUs and the processes using them, as plain data.
//!
//! The library is what the `gputop` viewer and exporter are built on: a [`source`] (NVML,
//! the built-in demo, a recording, remote exporters) read into [`model::Snapshot`] values,
//! with each GPU process's [`host`] facts from `/proc` (owner, command line, CPU, memory,
//! container), by a [`collector`] thread at an interval, kept over time by a [`monitor::Monitor`]
//! (history, alert rules, GPU time per user), with [`config::Settings`] as the TOML file
//! gives them. Every metric is a [`model::Reading`]: a value, not supported, or failed.
//!
//! ```no_run
//! use std::time::Duration;
//! use gputop::{collector::Collector, source::Source};
//!
//! let collector = Collector::spawn(Source::nvml(None)?, Duration::from_secs(1))?;
//! if let Some(snapshot) = collector.next(Duration::from_secs(5)) {
//!     for gpu in &snapshot.devices {
//!         println!("GPU {}: {:?} bytes used", gpu.index, gpu.memory.get().map(|m| m.used));
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! `examples/log_gpus.rs` logs memory and utilization once a second.

#![recursion_limit = "256"]

// Test helpers shared with the integration tests name the crate `gputop`.
#[cfg(test)]
extern crate self as gputop;

pub mod collector;
pub mod config;
pub mod format;
pub mod host;
pub mod model;
pub mod monitor;
pub mod source;

// The program's own parts: the view, its terminal and the commands. The view and its drawing
// are public with the `internals` feature only, for gputop's own benchmarks (no stable API).
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod app;
#[cfg(not(feature = "internals"))]
pub(crate) mod app;
pub(crate) mod cli;
pub(crate) mod files;
pub(crate) mod heap;
pub(crate) mod output;
pub(crate) mod run;
pub(crate) mod signal;
pub(crate) mod term;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod ui;
#[cfg(not(feature = "internals"))]
pub(crate) mod ui;

#[cfg(test)]
mod tests;

/// The `gputop` program: parses the command line, runs, and exits with a one-line message
/// and the failure's code. For gputop's binary.
#[doc(hidden)]
pub fn program_main() {
    term::end_on_panic();
    let cli = cli::Cli::parse_checked();
    if let Err(failure) = run::run(&cli, &|name| std::env::var(name).ok()) {
        // Messages quote what they were given (config keys and values, paths, answers of
        // remote nodes): never raw on the terminal.
        eprintln!("gputop: {}", format::sanitize(&failure.to_string()));
        std::process::exit(failure.exit_code());
    }
}

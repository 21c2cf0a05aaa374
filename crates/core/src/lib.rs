//! gputop: NVIDIA, AMD and Intel GPUs and the processes using them, as plain data.
//!
//! The library is what the `gputop` viewer and exporter are built on: a [`source`] (NVML
//! and the kernel's DRM interfaces, the built-in demo, a recording, remote exporters) read
//! into [`model::Snapshot`] values,
//! with each GPU process's [`host`] facts from `/proc` (owner, command line, CPU, memory,
//! container), by a [`collector`] thread at an interval, kept over time by a [`monitor::Monitor`]
//! (history, alert rules, GPU time per user), with [`config::Settings`] as the TOML file
//! gives them. Every metric is a [`model::Reading`]: a value, not supported, or failed.
//!
//! ```no_run
//! use std::time::Duration;
//! use gputop_core::{collector::Collector, source::Source};
//!
//! let collector = Collector::spawn(Source::local(None)?, Duration::from_secs(1))?;
//! if let Some(snapshot) = collector.next(Duration::from_secs(5)) {
//!     for gpu in &snapshot.devices {
//!         println!("GPU {}: {:?} bytes used", gpu.index, gpu.memory_used_bytes.get());
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! `examples/log_gpus.rs` in gputop's repository logs memory and utilization once a second.
//! The viewer, the exporter and the other commands are the `gputop` program's own, not part
//! of this library.

#![warn(missing_docs, unreachable_pub)]

pub mod collector;
pub mod config;
pub mod files;
pub mod format;
pub mod host;
pub mod model;
pub mod monitor;
pub mod source;

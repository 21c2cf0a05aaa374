//! What gputop writes for others: the `--once` text report, recordings, scenario captures,
//! and the Prometheus exporter.

pub mod capture;
pub mod export;
pub mod record;
pub mod report;

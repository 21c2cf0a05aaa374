//! What gputop writes for others: the `--once` text report (of a machine and of a fleet),
//! recordings, scenario captures, and the Prometheus exporter.

pub mod capture;
pub mod export;
pub mod fleet;
pub mod record;
pub mod report;

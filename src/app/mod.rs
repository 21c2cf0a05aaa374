//! Application logic without I/O: ordering and selecting what the snapshot holds.

pub mod filter;
pub mod sort;

//! nvml-sim: a simulated `libnvidia-ml.so.1` driven by a scenario file.
//!
//! Built as a cdylib it exports the NVML C ABI, so the real client code paths
//! (nvml-wrapper, nvidia-ml-py, nvtop) run without a GPU. Built as an rlib without the
//! `exports` feature it is the scenario engine behind gputop's `--demo`.
//!
//! - [`scenario`] parses and validates the TOML scenario format.
//! - [`engine`] computes every value as a pure function of time.
//! - [`profile`] says what a driver version exports and how it lays out process lists.
//! - `ffi` (feature `exports`) is the C ABI.

pub mod codes;
pub mod engine;
pub mod profile;
pub mod scenario;

#[cfg(feature = "exports")]
mod ffi;

/// Scenarios compiled into the library, reachable as `GPUTOP_SIM_SCENARIO=builtin:<name>`.
pub const BUILTINS: &[(&str, &str)] = &[("demo", include_str!("../scenarios/demo.toml"))];

/// The text of a built-in scenario.
pub fn builtin(name: &str) -> Option<&'static str> {
    BUILTINS.iter().find(|(n, _)| *n == name).map(|(_, text)| *text)
}

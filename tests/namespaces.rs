//! gputop in real PID namespaces (`unshare`, as root): NVML's PIDs are mapped where the
//! kernel or the device files vouch for them, and a local process that merely shares a
//! number is never shown in the GPU process's place.
//!
//! Needs root and `unshare`: the tests are ignored unless asked for (`sudo bash
//! .ci/all-tests`, which CI runs); asked for, any failure to create a namespace fails them.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

/// Three GPU processes whose PIDs come from `GPUTOP_SIM_PIDS`.
const SCENARIO: &str = r#"
[meta]
version = 1
[[gpu]]
name = "Sim Zero"
[[gpu.process]]
pid_env = "GPUTOP_SIM_PIDS"
pid_index = 0
used_memory = "3 GiB"
[[gpu.process]]
pid_env = "GPUTOP_SIM_PIDS"
pid_index = 1
used_memory = "2 GiB"
[[gpu.process]]
pid_env = "GPUTOP_SIM_PIDS"
pid_index = 2
used_memory = "1 GiB"
"#;

/// Runs `script` under `sh` in new namespaces (`unshare` `flags`) and returns its stdout:
/// the `--once --json` document gputop printed there.
fn run_inside(dir: &Path, flags: &[&str], script: &str, outer_pids: &str) -> Value {
    let scenario = dir.join("scenario.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let output = Command::new("unshare")
        .args(flags)
        .args(["sh", "-c", script])
        .env("GPUTOP", env!("CARGO_BIN_EXE_gputop"))
        .env("SIM_LIB", common::sim_lib())
        .env("GPUTOP_SIM_SCENARIO", &scenario)
        .env("GPUTOP_SIM_CLOCK", "manual")
        .env("GPUTOP_SIM_TIME_MS", "1000")
        .env("OUTER_PIDS", outer_pids)
        .env("HOME", dir)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .output()
        .expect("run unshare");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the script failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json = stdout
        .lines()
        .skip_while(|l| !l.starts_with('{'))
        .collect::<Vec<_>>()
        .join("\n");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn process(doc: &Value, pid: u64) -> &Value {
    doc["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("no process {pid} in {doc}"))
}

#[test]
#[ignore = "needs root: creates PID namespaces with unshare"]
fn in_a_container_namespace_only_processes_holding_an_nvidia_device_count_as_local() {
    common::require_namespaces();
    let dir = tempfile::tempdir().unwrap();
    let outer = common::Sleepers::spawn(1);
    // Inside: a GPU process holding /dev/nvidia0 (a driver that translates PIDs reports its
    // local number), an unrelated process, and a host PID that does not exist here.
    let script = format!(
        r#"set -e
{}
sleep 600 9</dev/nvidia0 &
gpu=$!
sleep 600 &
namesake=$!
echo "local $gpu $namesake"
GPUTOP_SIM_PIDS="$gpu $namesake $OUTER_PIDS" "$GPUTOP" --nvml-lib "$SIM_LIB" --once --json
kill $gpu $namesake
"#,
        common::FAKE_NVIDIA_DEV
    );
    let doc = run_inside(
        dir.path(),
        &["--pid", "--fork", "--mount-proc"],
        &script,
        &outer.env(),
    );
    assert_eq!(doc["pid_namespace"], "container", "{doc}");
    let processes = doc["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 3);
    // The GPU process, by its own number, with its facts; signals allowed.
    let gpu = &processes[0];
    assert_eq!(gpu["gpu_memory_bytes"], 3u64 << 30);
    assert_eq!(gpu["pid_mapping"], "same", "{gpu}");
    assert_eq!(gpu["local_pid"], gpu["pid"]);
    assert_eq!(gpu["command"], "sleep 600");
    // The local process that merely shares NVML's number: nothing of it is shown.
    let namesake = &processes[1];
    assert_eq!(namesake["pid_mapping"], "unmapped", "{namesake}");
    assert!(namesake["local_pid"].is_null());
    assert!(
        namesake["user"].is_null() || namesake["user"].is_object(),
        "{namesake}"
    );
    assert_ne!(
        namesake["command"], "sleep 600",
        "the namesake's command must not be shown"
    );
    assert!(
        namesake["unmapped_reason"]
            .as_str()
            .unwrap()
            .contains("another one"),
        "{namesake}"
    );
    // A host PID that is not in the container at all.
    let host = process(&doc, u64::from(outer.pids()[0]));
    assert_eq!(host["pid_mapping"], "unmapped");
    assert!(
        host["unmapped_reason"]
            .as_str()
            .unwrap()
            .contains("not in this container")
    );
}

#[test]
#[ignore = "needs root: creates PID namespaces with unshare"]
fn in_a_nested_namespace_seeing_the_host_proc_nspid_maps_host_pids_to_local_ones() {
    common::require_namespaces();
    let dir = tempfile::tempdir().unwrap();
    let outer = common::Sleepers::spawn(1);
    // /proc stays the host's (no --mount-proc): NVML's host PIDs are found there, and NSpid
    // gives each one's number in gputop's namespace.
    let script = format!(
        r#"set -e
sleep 600 &
local=$!
{}
test -n "$host"
echo "mapping $host $local"
GPUTOP_SIM_PIDS="$host $OUTER_PIDS $OUTER_PIDS" "$GPUTOP" --nvml-lib "$SIM_LIB" --once --json
kill $local
"#,
        common::HOST_PID_OF_LOCAL
    );
    let doc = run_inside(dir.path(), &["--pid", "--fork"], &script, &outer.env());
    assert_eq!(doc["pid_namespace"], "nested_host_proc", "{doc}");
    let inner = &doc["processes"].as_array().unwrap()[0];
    assert_eq!(inner["pid_mapping"], "mapped", "{inner}");
    let (host_pid, local_pid) = (
        inner["pid"].as_u64().unwrap(),
        inner["local_pid"].as_u64().unwrap(),
    );
    assert_ne!(host_pid, local_pid);
    assert!(local_pid < 10, "a fresh namespace numbers from 1: {local_pid}");
    assert_eq!(inner["command"], "sleep 600");
    // The test's own process lives outside gputop's namespace: shown, never signalled.
    let outside = process(&doc, u64::from(outer.pids()[0]));
    assert_eq!(outside["pid_mapping"], "unmapped");
    assert_eq!(
        outside["command"], "sleep 600",
        "its facts come from the host's /proc"
    );
}

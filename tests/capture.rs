//! `gputop capture`: a simulated machine captured, then replayed from the capture, must look
//! the same to gputop as the original.

mod common;

use common::{Sleepers, driver_dir, gputop, gputop_on, gputop_on_driver, json, scenario, stderr};
use serde_json::Value;

/// What a `--once --json` document says of the GPUs and their processes, without what
/// belongs to the moment or the host (time, host facts of the processes, alerts, usage).
fn gpus_and_processes(mut doc: Value) -> Value {
    for key in [
        "timestamp",
        "host",
        "usage",
        "alerts",
        "hostname",
        "pid_namespace",
    ] {
        doc.as_object_mut().unwrap().remove(key);
    }
    for process in doc["processes"].as_array_mut().unwrap() {
        let process = process.as_object_mut().unwrap();
        process.retain(|key, _| {
            [
                "pid",
                "gpu_index",
                "gpu_uuid",
                "type",
                "gpu_memory_bytes",
                "sm_percent",
                "memory_bandwidth_percent",
                "encoder_percent",
                "decoder_percent",
                "gpu_instance_id",
                "compute_instance_id",
            ]
            .contains(&key.as_str())
        });
    }
    doc
}

fn capture(mut command: std::process::Command, file: &std::path::Path) {
    let output = command
        .arg("capture")
        .arg(file)
        .args(["--duration", "2"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("captured 3 refreshes of"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_captured_machine_replays_as_the_original() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(3);
    let file = home.path().join("capture.toml");
    let mut original = gputop_on(home.path(), &scenario("two-gpus-training"), 100_000);
    original.env("GPUTOP_SIM_PIDS", sleepers.env());
    capture(original, &file);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("# gputop capture of "), "{text}");
    // The scenario names its processes "python3": a capture keeps no process names.
    assert!(!text.contains("python3"), "the capture holds a process name");

    let mut original = gputop_on(home.path(), &scenario("two-gpus-training"), 100_000);
    original.env("GPUTOP_SIM_PIDS", sleepers.env());
    let expected = gpus_and_processes(json(original));
    let replayed = gpus_and_processes(json(gputop_on(home.path(), &file, 0)));
    assert_eq!(replayed, expected);
    assert_eq!(expected["processes"].as_array().unwrap().len(), 3);

    // Never an existing file.
    let again = gputop_on(home.path(), &scenario("two-gpus-training"), 100_000)
        .env("GPUTOP_SIM_PIDS", sleepers.env())
        .args(["capture"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text, "left as it was");
}

#[test]
fn a_capture_keeps_the_drivers_version_exports_and_process_layout() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(2);
    let machine = "[meta]\nversion = 1\n[system]\ndriver_version = \"535.54.03\"\n\
        [sim]\nsamples_period_ms = 100\n\
        [[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\n[gpu.dynamic]\n\
        utilization_gpu = { keyframes = [[0, 100], [0.3, 10]], interp = \"step\", repeat = 1 }\n\
        [[gpu.process]]\npid_env = \"GPUTOP_SIM_PIDS\"\npid_index = 0\nused_memory = \"3 GiB\"\nsm = 33\n\
        [[gpu.process]]\npid_env = \"GPUTOP_SIM_PIDS\"\npid_index = 1\nused_memory = \"5 GiB\"\nsm = 55\n";
    let driver = driver_dir(machine);
    let file = home.path().join("capture.toml");
    let mut original = gputop_on_driver(home.path(), driver.path(), 30_000);
    original.env("GPUTOP_SIM_PIDS", sleepers.env());
    capture(original, &file);
    let text = std::fs::read_to_string(&file).unwrap();
    let parsed: toml::Table = toml::from_str(&text).unwrap();
    assert_eq!(parsed["system"]["driver_version"].as_str(), Some("535.54.03"));
    assert_eq!(parsed["system"]["process_v3_entry_bytes"].as_integer(), Some(32));
    let missing = parsed["system"]["missing_symbols"].as_array().unwrap();
    assert!(
        missing
            .iter()
            .any(|m| m.as_str() == Some("nvmlDeviceGetRunningProcessDetailList"))
    );
    assert_eq!(parsed["sim"]["samples_period_ms"].as_integer(), Some(100));
    assert_eq!(parsed["sim"]["sample_clock"].as_str(), Some("boot"));

    let mut original = gputop_on_driver(home.path(), driver.path(), 30_000);
    original.env("GPUTOP_SIM_PIDS", sleepers.env());
    let expected = gpus_and_processes(json(original));
    let replay = driver_dir(&text);
    let replayed = gpus_and_processes(json(gputop_on_driver(home.path(), replay.path(), 0)));
    assert_eq!(replayed, expected);
    // The bursty GPU's mean and peak come from the captured samples, not a flat line.
    let gpu = &replayed["devices"][0];
    assert_eq!(gpu["utilization_gpu_peak_percent"].as_f64(), Some(100.0));
    let mean = gpu["utilization_gpu_mean_percent"].as_f64().unwrap();
    assert!((mean - 37.0).abs() <= 3.0, "mean {mean}");
}

#[test]
fn the_demo_has_nothing_to_capture() {
    let home = tempfile::tempdir().unwrap();
    let output = gputop(home.path())
        .args(["--demo", "capture"])
        .arg(home.path().join("x.toml"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("the demo has none to capture"));
    assert!(!home.path().join("x.toml").exists());
}

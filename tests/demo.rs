//! `--demo`: the built-in simulated machine works with nothing installed, and it is lively.

mod common;

use std::time::Duration;

use common::{gputop, json, stderr, stdout};
use gputop_core::source::demo::DemoSource;

#[test]
fn demo_once_and_json_show_the_simulated_machine() {
    let home = tempfile::tempdir().unwrap();
    let mut command = gputop(home.path());
    command.arg("--demo");
    let doc = json(command);
    let devices = doc["devices"].as_array().unwrap();
    let makers: Vec<&str> = devices.iter().map(|d| d["vendor"].as_str().unwrap()).collect();
    assert_eq!(makers, ["nvidia", "nvidia", "nvidia", "nvidia", "amd", "intel"]);
    assert_eq!(devices[0]["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(devices[4]["name"], "AMD Radeon RX 7900 XTX");
    assert_eq!(devices[5]["driver"], "xe");
    assert!(devices.iter().all(|d| d["status"] == "ok"));
    assert_eq!(
        devices[0]["fan_speed_percent"],
        serde_json::Value::Null,
        "SXM boards have no fan"
    );
    let processes = doc["processes"].as_array().unwrap();
    assert!(processes.len() >= 6, "{processes:?}");
    assert_eq!(processes[0]["user"], "alice");
    assert!(
        processes
            .iter()
            .all(|p| p["command"].is_string() && p["cpu_percent"].is_number())
    );

    let output = gputop(home.path()).args(["--demo", "--once"]).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("python3 train.py --model llama-7b") && text.contains("NVIDIA A100-SXM4-40GB"),
        "{text}"
    );

    let list = stdout(&gputop(home.path()).args(["--demo", "-l"]).output().unwrap());
    assert_eq!(list.lines().count(), 6, "{list}");
    assert!(
        list.contains("GPU 4: AMD Radeon RX 7900 XTX (UUID: N/A, PCI: 0000:c3:00.0)"),
        "{list}"
    );
    assert!(
        list.starts_with("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-3f1c9a52"),
        "{list}"
    );
}

#[test]
fn demo_values_change_over_time_and_the_bursty_gpu_shows_its_peak() {
    let mut demo = DemoSource::new();
    let first = demo.read(Duration::from_secs(2));
    std::thread::sleep(Duration::from_millis(1300));
    let second = demo.read(Duration::from_secs(2));
    let power = |r: &gputop_core::source::Readout| -> Vec<Option<f64>> {
        r.devices.iter().map(|d| d.power_usage_watts.get()).collect()
    };
    assert_ne!(
        power(&first),
        power(&second),
        "power changes from second to second"
    );
    // GPU 1 idles at 5% with a 200 ms burst to 100% every 2 s: a 2 s window sees the burst.
    let gpu = &second.devices[1];
    let (mean, peak) = (
        gpu.utilization_gpu_mean_percent.get().expect("a mean"),
        gpu.utilization_gpu_peak_percent.get().expect("a peak"),
    );
    assert_eq!(peak, 100.0);
    assert!(mean > 5.0 && mean < 30.0, "mean {mean}");
}

#[test]
fn the_simulator_library_serves_the_same_demo_machine() {
    let home = tempfile::tempdir().unwrap();
    let mut through_nvml = gputop(home.path());
    through_nvml
        .arg("--nvml-lib")
        .arg(common::sim_lib())
        .env("GPUTOP_SIM_SCENARIO", "builtin:demo");
    let mut demo = gputop(home.path());
    demo.arg("--demo");
    // The demo's AMD and Intel GPUs are read through DRM, not the library.
    let identity = |doc: serde_json::Value| -> Vec<(String, String)> {
        doc["devices"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["vendor"] == "nvidia")
            .map(|d| {
                (
                    d["name"].as_str().unwrap().to_string(),
                    d["uuid"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    assert_eq!(identity(json(through_nvml)), identity(json(demo)));
}

/// The alert verdicts of a one-shot: rule, state and subject of each, in order.
fn verdicts(doc: &serde_json::Value) -> Vec<(String, String, String)> {
    doc["alerts"]
        .as_array()
        .expect("alerts")
        .iter()
        .map(|a| {
            let text = |key: &str| a[key].as_str().unwrap_or_default().to_owned();
            (text("rule"), text("state"), text("subject"))
        })
        .collect()
}

/// Filters choose what is shown, never what is judged: a GPU whose processes a filter hides
/// is still held (GPU 1 is bob's), and a GPU left out of `--only` keeps its alerts.
#[test]
fn filters_leave_the_alert_verdicts_of_a_one_shot_as_they_are() {
    let home = tempfile::tempdir().unwrap();
    let one_shot = |filter: &[&str]| {
        let mut command = gputop(home.path());
        command.arg("--demo").args(filter);
        json(command)
    };
    let whole = verdicts(&one_shot(&[]));
    assert!(
        whole.contains(&("gpu_idle_reserved".into(), "pending".into(), "GPU 1".into())),
        "{whole:?}"
    );
    for filter in [
        &["--user", "alice"][..],
        &["--pid", "99999"],
        &["--only", "0"],
        &["--compute"],
        &["--graphics"],
    ] {
        let doc = one_shot(filter);
        assert_eq!(verdicts(&doc), whole, "with {filter:?}");
        let shown = doc["processes"].as_array().unwrap().len();
        assert!(
            shown < one_shot(&[])["processes"].as_array().unwrap().len(),
            "{filter:?} hides some processes, so the test means something"
        );
    }
}

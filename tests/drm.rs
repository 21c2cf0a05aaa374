//! AMD and Intel GPUs through the real binary, on fake `/sys` and `/proc` trees laid out as
//! the kernel lays them out (`gputop_core::source::drm::fixture`: two AMD GPUs, an xe and an
//! i915 GPU, six processes), read through `--path.sysfs` and `--path.procfs`. A thread
//! advances the counters with the wall clock as gputop reads them, so every rate gputop
//! reports is the one the counters imply.

mod common;

use common::drm::Machine;
use gputop_core::source::drm::fixture;

fn near(value: &serde_json::Value, expected: f64, what: &str) {
    let got = value.as_f64().unwrap_or_else(|| panic!("{what}: {value}"));
    assert!(
        (got - expected).abs() <= 2.0,
        "{what}: {got}, expected {expected} within 2 points"
    );
}

#[test]
fn once_json_reports_each_gpu_and_process_as_the_counters_imply() {
    let machine = Machine::start();
    let home = tempfile::tempdir().unwrap();
    let doc = common::json(machine.gputop(home.path()));
    common::assert_matches_schema(&doc, "--once --json on AMD and Intel");
    let devices = doc["devices"].as_array().unwrap();
    let described: Vec<(u64, &str, &str, &str)> = devices
        .iter()
        .map(|d| {
            (
                d["index"].as_u64().unwrap(),
                d["vendor"].as_str().unwrap(),
                d["driver"].as_str().unwrap(),
                d["pci_bus_id"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        described,
        [
            (0, "amd", "amdgpu", fixture::A),
            (1, "amd", "amdgpu", fixture::B),
            (2, "intel", "xe", fixture::C),
            (3, "intel", "i915", fixture::D),
        ]
    );
    let a = &devices[0];
    assert_eq!(a["utilization_gpu_percent"], 87);
    assert_eq!(a["memory_used_bytes"], 8u64 << 30);
    assert_eq!(a["gtt_used_bytes"], 256u64 << 20);
    assert_eq!(a["temperature_celsius"], 65);
    assert_eq!(a["power_usage_watts"], 245.0);
    assert_eq!(a["clock_graphics_mhz"], 2482);
    assert_eq!(a["fan_speed_percent"], 40);
    assert!(
        devices[1]["utilization_gpu_percent"].is_null(),
        "B gives none: unknown, not 0"
    );
    near(
        &devices[2]["utilization_gpu_percent"],
        30.0,
        "C: its busiest class",
    );
    near(
        &devices[2]["power_usage_watts"],
        45.0,
        "C: its energy counter's delta",
    );
    near(
        &devices[3]["utilization_gpu_percent"],
        30.0,
        "D: its busiest class",
    );
    let processes = doc["processes"].as_array().unwrap();
    let process = |pid: u64, gpu: u64| {
        processes
            .iter()
            .find(|p| p["pid"] == pid && p["gpu_index"] == gpu)
            .unwrap_or_else(|| panic!("no {pid} on GPU {gpu}: {processes:?}"))
    };
    for (pid, gpu, percent, memory) in [
        (1201, 0, 25.0, (1u64 << 30) + (256 << 20)),
        (2301, 0, 70.0, 4 << 30),
        (2301, 1, 25.0, 2 << 30),
        (2302, 1, 0.0, 12 << 30),
        (2401, 2, 40.0, 512 << 20),
        (2501, 3, 50.0, 64 << 20),
    ] {
        let p = process(pid, gpu);
        near(&p["sm_percent"], percent, &format!("{pid} on GPU {gpu}"));
        assert_eq!(p["gpu_memory_bytes"], memory, "{pid} on GPU {gpu}");
    }
    near(
        &process(2301, 0)["engines_percent"]["compute"],
        10.0,
        "2301's compute on A",
    );
    near(
        &process(2401, 2)["engines_percent"]["video_enhance"],
        10.0,
        "2401's video-enhance",
    );
    assert_eq!(process(2401, 2)["gpu_system_memory_bytes"], 8u64 << 20);
    assert_eq!(process(2301, 0)["command"], "blender -b scene.blend");
    assert_eq!(processes.len(), 6, "2402 shares 1201's client: {processes:?}");
    assert_eq!(doc["hidden_processes"], 0);
}

/// `gputop export --processes` on the machine, and the port its metrics are served on, once
/// it has read the machine twice (rates known).
fn exporter(machine: &Machine, home: &std::path::Path) -> (common::Killed, u16) {
    let port = common::free_port();
    let child = machine
        .gputop(home)
        .args(["export", "--processes", "--interval", "1", "--web-listen-address"])
        .arg(format!("127.0.0.1:{port}"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let exporter = common::Killed(child);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !common::get(port, "/metrics")
        .2
        .contains("gputop_process_sm_utilization_ratio{gpu=\"3\"")
    {
        assert!(std::time::Instant::now() < deadline, "no rates served");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    (exporter, port)
}

/// The value of the one sample of `name` whose labels contain every one of `labels`.
fn sample(body: &str, name: &str, labels: &[&str]) -> f64 {
    let lines: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && labels.iter().all(|want| l.contains(want)))
        .collect();
    assert_eq!(lines.len(), 1, "{name} {labels:?}: {lines:?}");
    lines[0].rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn the_exporter_serves_every_vendor_with_its_labels_and_the_same_series() {
    let machine = Machine::start();
    let home = tempfile::tempdir().unwrap();
    let (_exporter, port) = exporter(&machine, home.path());
    let body = common::get(port, "/metrics").2;
    let a = ["gpu=\"0\"", "vendor=\"amd\"", "driver=\"amdgpu\""];
    assert_eq!(sample(&body, "gputop_gpu_utilization_ratio", &a), 0.87);
    assert_eq!(
        sample(&body, "gputop_gpu_gtt_used_bytes", &a),
        (256u64 << 20) as f64
    );
    assert_eq!(sample(&body, "gputop_gpu_power_watts", &a), 245.0);
    let c = ["gpu=\"2\"", "vendor=\"intel\"", "driver=\"xe\""];
    assert!((sample(&body, "gputop_gpu_power_watts", &c) - 45.0).abs() <= 2.0);
    let blender = ["gpu=\"0\"", "vendor=\"amd\"", "pid=\"2301\""];
    assert!((sample(&body, "gputop_process_sm_utilization_ratio", &blender) - 0.70).abs() <= 0.02);
    assert_eq!(
        sample(&body, "gputop_process_gpu_memory_bytes", &blender),
        (4u64 << 30) as f64
    );
    let compute = ["gpu=\"0\"", "pid=\"2301\"", "engine=\"compute\""];
    assert!((sample(&body, "gputop_process_engine_utilization_ratio", &compute) - 0.10).abs() <= 0.02);
    let integrated = ["gpu=\"3\"", "vendor=\"intel\"", "driver=\"i915\"", "pid=\"2501\""];
    assert_eq!(
        sample(&body, "gputop_process_gpu_system_memory_bytes", &integrated),
        (64u64 << 20) as f64
    );
}

#[test]
#[ignore = "needs Prometheus: promtool checks the exposition"]
fn promtool_passes_the_exposition_of_amd_and_intel_gpus() {
    let machine = Machine::start();
    let home = tempfile::tempdir().unwrap();
    let (_exporter, port) = exporter(&machine, home.path());
    common::promtool_checks_metrics(&common::get(port, "/metrics").2);
}

#[test]
fn a_capture_keeps_the_files_read_and_replays_as_a_test_scenario() {
    use gputop_core::source::drm::DrmReader;
    use gputop_core::source::drm::captured::Captured;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let machine = Machine::start();
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("report.toml");
    let output = machine
        .gputop(home.path())
        .args(["capture", "--duration", "3"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    assert!(
        common::stderr(&output).contains("of 4 GPU(s)"),
        "{}",
        common::stderr(&output)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    nvml_sim::scenario::Scenario::parse(&text, "report.toml", &|_| None)
        .expect("the simulator reads the capture");
    #[derive(serde::Deserialize)]
    struct Report {
        drm: Captured,
    }
    let captured = toml::from_str::<Report>(&text).expect("a [drm] table").drm;
    assert!(
        captured
            .proc
            .links
            .values()
            .all(|target| target.starts_with("/dev/dri/")),
        "only the DRM fds are kept: {:?}",
        captured.proc.links
    );
    assert!(!captured.proc.links.contains_key("1201/fd/3"), "1201's /dev/null");
    // Served again: the first files at 0, the last at the capture's length.
    let later = Arc::new(AtomicBool::new(false));
    let (proc, sys) = captured.serve(Arc::clone(&later));
    let now = Arc::new(AtomicU64::new(0));
    let clock = Arc::clone(&now);
    let mut reader = DrmReader::with(
        Box::new(proc),
        Box::new(sys),
        Box::new(move || clock.load(Ordering::SeqCst)),
    );
    reader.readout(0);
    later.store(true, Ordering::SeqCst);
    now.store((captured.seconds * 1e9) as u64, Ordering::SeqCst);
    let out = reader.readout(0);
    assert_eq!(out.devices.len(), 4);
    let percent = |pid: u32, gpu: u32| {
        out.processes
            .iter()
            .find(|p| p.pid == pid && p.gpu_index == gpu)
            .and_then(|p| p.sm_percent.get())
            .unwrap_or_else(|| panic!("{pid} on {gpu}: {:?}", out.processes))
    };
    for (pid, gpu, expected) in [(1201, 0, 25), (2301, 0, 70), (2401, 2, 40), (2501, 3, 50)] {
        let got = percent(pid, gpu);
        assert!(
            got.abs_diff(expected) <= 2,
            "{pid} on {gpu}: {got}, expected {expected}"
        );
    }
}

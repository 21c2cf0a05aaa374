//! AMD and Intel GPUs through the real binary, on fake `/sys` and `/proc` trees laid out as
//! the kernel lays them out (`gputop::source::drm::fixture`: two AMD GPUs, an xe and an
//! i915 GPU, six processes), read through `--path.sysfs` and `--path.procfs`. A thread
//! advances the counters with the wall clock as gputop reads them, so every rate gputop
//! reports is the one the counters imply.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gputop::source::drm::fixture;

/// The fake machine, its counters advancing with the wall clock until dropped.
struct Machine {
    dir: tempfile::TempDir,
    stop: Arc<AtomicBool>,
    writer: Option<JoinHandle<()>>,
}

impl Machine {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let (sys, proc) = (dir.path().join("sys"), dir.path().join("proc"));
        fixture::sysfs(&sys, 0.0);
        fixture::procfs(&proc, 0.0);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let started = Instant::now();
        let writer = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                fixture::advance(&sys, &proc, started.elapsed().as_secs_f64());
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        Self {
            dir,
            stop,
            writer: Some(writer),
        }
    }

    fn sysfs(&self) -> PathBuf {
        self.dir.path().join("sys")
    }

    fn procfs(&self) -> PathBuf {
        self.dir.path().join("proc")
    }

    /// gputop reading this machine alone: NVML is pointed at a library that is not there.
    fn gputop(&self, home: &Path) -> std::process::Command {
        let mut command = common::gputop_with_sysfs(home, &self.sysfs());
        command
            .arg("--path.procfs")
            .arg(self.procfs())
            .arg("--nvml-lib")
            .arg(self.dir.path().join("no-libnvidia-ml.so.1"));
        command
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

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

//! The collector thread on the simulated library, in this process: snapshots published at
//! the interval, PCIe read on its own thread, and a GPU lost mid-run while the others go on;
//! a collector that reads only when asked; and process lists read into buffers kept between
//! readings.

mod common;

use std::time::{Duration, Instant};

use gputop_core::collector::Collector;
use gputop_core::model::DeviceStatus;
use gputop_core::source::nvml::NvmlSource;
use gputop_core::source::{Gauge, Source};

const SCENARIO: &str = r#"
[meta]
version = 1
[clock]
mode = "wall"
speed = 20.0
[[gpu]]
name = "Steady"
[gpu.dynamic]
utilization_gpu = 40
pcie_tx_kbps = 1200
pcie_rx_kbps = 3400
[[gpu]]
name = "Doomed"
[gpu.dynamic]
utilization_gpu = 60
[[gpu.fault]]
field = "*"
error = "GPU_IS_LOST"
from = 20.0
[[gpu]]
name = "Also steady"
[gpu.dynamic]
utilization_gpu = { keyframes = [[0, 0], [1, 100]], interp = "step", repeat = 2 }
"#;

/// The simulated library in a folder of its own, running a scenario, with its call counters.
struct Simulated {
    _dir: tempfile::TempDir,
    lib: std::path::PathBuf,
    /// Loading the same path again reaches the same library instance, so its call counters
    /// can be read once gputop is done with it; this handle also keeps it loaded until then.
    counters: libloading::Library,
}

impl Simulated {
    fn new(scenario: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libnvidia-ml.so.1");
        std::fs::copy(common::sim_lib(), &lib).unwrap();
        std::fs::write(dir.path().join("gputop-sim.toml"), scenario).unwrap();
        // SAFETY: loading our own simulator, whose constructors do nothing.
        let counters = unsafe { libloading::Library::new(&lib) }.unwrap();
        Self {
            _dir: dir,
            lib,
            counters,
        }
    }

    /// How many times gputop called `name`.
    fn calls(&self, name: &str) -> u64 {
        // SAFETY: the simulator's control export has this C signature.
        unsafe {
            let count: libloading::Symbol<unsafe extern "C" fn(*const std::ffi::c_char) -> u64> =
                self.counters.get(b"gputop_sim_call_count").unwrap();
            count(std::ffi::CString::new(name).unwrap().as_ptr())
        }
    }
}

#[test]
fn snapshots_flow_and_a_lost_gpu_does_not_stop_the_others() {
    let sim = Simulated::new(SCENARIO);
    let mut source = NvmlSource::open(Some(&sim.lib)).expect("the simulator initialises");
    source.start_threads(Duration::from_millis(50));
    let collector = Collector::spawn(Source::from(source), Duration::from_millis(100)).unwrap();

    let deadline = Instant::now() + Duration::from_secs(20);
    let mut snapshots = Vec::new();
    while Instant::now() < deadline {
        let Some(snapshot) = collector.next(Duration::from_secs(5)) else {
            continue;
        };
        let lost = snapshot.devices[1].status != DeviceStatus::Ok;
        snapshots.push(snapshot);
        if lost && snapshots.len() >= 3 {
            break;
        }
    }
    let last = snapshots.last().expect("at least one snapshot");
    assert!(
        last.devices[1].status == DeviceStatus::Lost,
        "GPU 1 is lost by scenario t = 20 s"
    );
    assert_eq!(
        last.devices[1].name.value().map(String::as_str),
        Some("Doomed"),
        "a lost GPU keeps its name"
    );
    assert_eq!(
        snapshots[0].devices[1].status,
        DeviceStatus::Ok,
        "GPU 1 worked at first"
    );
    for snapshot in &snapshots {
        assert_eq!(snapshot.devices.len(), 3);
        for index in [0, 2] {
            assert_eq!(
                snapshot.devices[index].status,
                DeviceStatus::Ok,
                "GPU {index} keeps working"
            );
        }
        assert_eq!(snapshot.devices[0].utilization_gpu_percent.get(), Some(40));
    }
    assert!(
        snapshots.windows(2).all(|w| w[0].taken_at < w[1].taken_at),
        "each snapshot is newer than the last"
    );
    // PCIe throughput arrives from its own thread.
    let with_pcie = snapshots
        .iter()
        .find(|s| s.devices[0].pcie_tx_bytes_per_second.get().is_some());
    let pcie = &with_pcie.expect("PCIe readings arrive").devices[0];
    // The driver's KB/s, in bytes.
    assert_eq!(
        (
            pcie.pcie_tx_bytes_per_second.get(),
            pcie.pcie_rx_bytes_per_second.get()
        ),
        (Some(1200 * 1024), Some(3400 * 1024))
    );
    // Each snapshot's window holds only samples newer than the previous read: GPU 2
    // alternates 0/100 every scenario second, so its windows see both values (a peak of
    // 100 over a mean below it: two samples at least).
    let window = snapshots[1..].iter().rev().find_map(|s| {
        let d = &s.devices[2];
        d.utilization_gpu_mean_percent
            .get()
            .zip(d.utilization_gpu_peak_percent.get())
    });
    let (mean, peak) = window.expect("a utilization window");
    assert!(peak == 100.0 && mean < 100.0, "mean {mean}, peak {peak}");
    assert!(collector.latest().unwrap().taken_at >= last.taken_at);
    drop(collector);

    // Static facts are read once per GPU; fast metrics once per snapshot.
    let calls = [
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlSystemGetDriverVersion",
    ]
    .map(|name| sim.calls(name));
    let reads = snapshots.len() as u64;
    assert_eq!(calls[0], 3, "names read once per GPU");
    assert_eq!(calls[1], 3, "UUIDs read once per GPU");
    assert_eq!(
        calls[3], 2,
        "the driver version: once by nvml-wrapper's init, once by gputop"
    );
    assert!(
        calls[2] >= 2 * reads,
        "memory read at every snapshot: {} for {reads}",
        calls[2]
    );
}

const ONE_GPU: &str = r#"
[meta]
version = 1
[[gpu]]
name = "Asked"
[gpu.dynamic]
utilization_gpu = 30
temperature = 55
"#;

/// An on-demand collector (the Python module's) reads only when asked and only what is
/// stale: a whole reading fresh enough is given again, one gauge asked for alone costs that
/// gauge's driver call, and readers on several threads share the one collector.
#[test]
fn an_on_demand_collector_reads_only_what_is_asked_and_stale() {
    let sim = Simulated::new(ONE_GPU);
    let calls = |name: &str| sim.calls(name);
    let source = NvmlSource::open(Some(&sim.lib)).expect("the simulator initialises");
    let collector = Collector::on_demand(Source::from(source), Duration::from_secs(1)).unwrap();

    std::thread::sleep(Duration::from_millis(200));
    assert!(collector.latest().is_none(), "nothing is read unasked");

    let long = Duration::from_secs(60);
    let first = collector.read(long);
    assert_eq!(first.devices[0].temperature_celsius.get(), Some(55));
    let again = collector.read(long);
    assert!(
        std::sync::Arc::ptr_eq(&first, &again),
        "a fresh reading is given again"
    );

    let temperatures = calls("nvmlDeviceGetTemperature");
    let devices = collector.read_gauge(0, Gauge::Temperature, long);
    assert_eq!(devices[0].temperature_celsius.get(), Some(55));
    assert_eq!(
        calls("nvmlDeviceGetTemperature"),
        temperatures,
        "fresh: not asked again"
    );
    collector.read_gauge(0, Gauge::Temperature, Duration::ZERO);
    assert_eq!(
        calls("nvmlDeviceGetTemperature"),
        temperatures + 1,
        "stale: the one gauge read alone"
    );

    let readings: Vec<_> = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..4)
            .map(|_| scope.spawn(|| collector.read(Duration::ZERO)))
            .collect();
        readers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for reading in &readings {
        assert!(
            !std::sync::Arc::ptr_eq(reading, &first),
            "asked fresh, read again"
        );
        assert_eq!(reading.devices[0].utilization_gpu_percent.get(), Some(30));
    }
    drop(collector);
}

/// One GPU running 100 processes, more than the first process-list buffer holds (64), of
/// which 30 end at scenario second 40 (two seconds of wall time at 20 times): the 70 left
/// still need the grown buffer.
fn hundred_processes_then_seventy() -> String {
    let mut text = String::from(
        "[meta]\nversion = 1\n[clock]\nmode = \"wall\"\nspeed = 20.0\n[[gpu]]\nname = \"Busy\"\n",
    );
    for i in 0..100 {
        let end = if i < 30 { "end = 40.0\n" } else { "" };
        text.push_str(&format!("[[gpu.process]]\npid = {}\n{end}", 200_000 + i));
    }
    text
}

/// The process lists are read into buffers each GPU keeps: a list longer than the buffer is
/// read whole after one retry, the grown buffer is kept (one call a list from then on), and
/// when the list shrinks only the processes still listed are read, none left over from the
/// longer list before.
#[test]
fn process_lists_read_into_kept_buffers_grow_once_and_shrink_with_the_gpu() {
    let sim = Simulated::new(&hundred_processes_then_seventy());
    let source = NvmlSource::open(Some(&sim.lib)).expect("the simulator initialises");
    let collector = Collector::on_demand(Source::from(source), Duration::from_secs(1)).unwrap();
    let pids = |snapshot: &gputop_core::model::Snapshot| {
        let mut pids: Vec<u32> = snapshot.processes.iter().map(|p| p.pid).collect();
        pids.sort_unstable();
        pids
    };

    let first = collector.read(Duration::ZERO);
    assert_eq!(pids(&first), (200_000..200_100).collect::<Vec<_>>());
    std::thread::sleep(Duration::from_secs(3));
    for _ in 0..2 {
        let later = collector.read(Duration::ZERO);
        assert_eq!(pids(&later), (200_030..200_100).collect::<Vec<_>>());
    }
    drop(collector);
    let graphics = sim.calls("nvmlDeviceGetGraphicsRunningProcesses_v3");
    assert_eq!(graphics, 3, "one graphics list a reading");
    assert_eq!(
        sim.calls("nvmlDeviceGetComputeRunningProcesses_v3"),
        graphics + 1,
        "the compute list asked again only once, when it outgrew the first buffer"
    );
}

/// A recording of `frames` whole frames `gap` seconds apart, each GPU 0 at a temperature of
/// 40 plus its number.
fn recording(dir: &std::path::Path, frames: u32, gap: f64) -> std::path::PathBuf {
    use gputop_core::model::recording::{FORMAT_VERSION, to_stored};
    let path = dir.join("frames.jsonl");
    let mut text = serde_json::json!({
        "gputop_recording": FORMAT_VERSION,
        "id": "collector-test",
        "segment": 0,
        "hostname": "gpu-box",
        "interval_seconds": gap,
    })
    .to_string();
    text.push('\n');
    for frame in 0..frames {
        let mut snapshot = common::fixtures::snapshot();
        snapshot.devices[0].temperature_celsius = gputop_core::model::Reading::Value(40 + frame);
        let t = 1_795_966_801.0 + f64::from(frame) * gap;
        text.push_str(&serde_json::json!({ "t": t, "k": to_stored(&snapshot) }).to_string());
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// A replay is a source like any other: the one collector publishes its frames in order at
/// the recording's pace (here 50 ms apart), stops at the last, and a pause, a seek or a new
/// speed publishes the frame at once with where playback stands.
#[test]
fn a_replay_is_read_through_the_collector_at_its_own_pace() {
    use gputop_core::source::replay::{PlayerCommand, Recording};
    let dir = tempfile::tempdir().unwrap();
    let recording = Recording::open(&recording(dir.path(), 4, 0.05)).unwrap();
    let source = Source::replay(recording, 1.0).unwrap();
    let playback = source.playback().expect("a replay says where it stands");
    let (sent, published) = std::sync::mpsc::channel();
    let collector = Collector::spawn_with(
        source,
        Duration::from_secs(60),
        Box::new(move |snapshot| {
            let status = playback.status();
            sent.send((snapshot.devices[0].temperature_celsius.get(), status))
                .is_ok()
        }),
    )
    .unwrap();
    let next = || published.recv_timeout(Duration::from_secs(5)).expect("a frame");
    let started = Instant::now();
    for frame in 0..4_u32 {
        let (temperature, status) = next();
        assert_eq!(temperature, Some(40 + frame), "frame {frame} in order");
        assert_eq!(status.frame, frame as usize);
        assert_eq!(status.paused, frame == 3, "playback ends at the last frame");
    }
    // Three gaps of 50 ms, not the collector's 60 s interval.
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        published.recv_timeout(Duration::from_millis(300)).is_err(),
        "nothing after the last frame"
    );

    collector.control(PlayerCommand::Seek(-1.0));
    let (temperature, status) = next();
    assert_eq!(
        (temperature, status.frame),
        (Some(40), 0),
        "sought back to the start"
    );
    collector.control(PlayerCommand::TogglePause);
    let (_, status) = next();
    assert!(status.paused);
    assert!(
        published.recv_timeout(Duration::from_millis(300)).is_err(),
        "paused: no frame moves on"
    );
    collector.control(PlayerCommand::Speed(2.0));
    assert_eq!(next().1.speed, 2.0);
    collector.control(PlayerCommand::TogglePause);
    assert_eq!(next().1.frame, 0, "going on shows the same frame first");
    assert_eq!(next().1.frame, 1, "then the next, at its time");
}

/// A live source has no playback: asking it to seek publishes nothing.
#[test]
fn a_live_collector_ignores_replay_controls() {
    let (sent, published) = std::sync::mpsc::channel();
    let collector = Collector::spawn_with(
        Source::demo(),
        Duration::from_secs(60),
        Box::new(move |snapshot| sent.send(snapshot).is_ok()),
    )
    .unwrap();
    published
        .recv_timeout(Duration::from_secs(5))
        .expect("the first reading");
    collector.control(gputop_core::source::replay::PlayerCommand::Seek(-10.0));
    assert!(published.recv_timeout(Duration::from_millis(300)).is_err());
}

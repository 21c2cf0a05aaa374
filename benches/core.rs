//! Micro-benchmarks of gputop's own work, without a terminal: building a snapshot through the
//! NVML path (on the simulator), sorting and filtering 10 000 processes, and rendering a
//! 200x50 frame of them. `cargo bench --bench core` prints medians (the
//! feature makes the view public to this benchmark); nothing here asserts time.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use gputop_core::config::Settings;
use gputop_core::model::order::SortKey;
use gputop_core::model::*;
use gputop_core::source::nvml::NvmlSource;
use gputop_program::app::filter::Selection;
use gputop_program::app::state::{Action, App, Arrange, Received};
use gputop_program::term::Screen;
use gputop_program::ui::{self, theme::Theme};
use ratatui::layout::Rect;

fn median(mut f: impl FnMut(), runs: usize) -> Duration {
    f(); // warm-up
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn process(i: u32) -> GpuProcess {
    GpuProcess {
        pid: 10_000 + i,
        gpu_index: i % 8,
        gpu_uuid: Reading::Value(format!("GPU-{i:08}")),
        kind: ProcessType::Compute,
        gpu_memory_bytes: Reading::Value(u64::from(i % 977) << 24),
        sm_percent: Reading::Value(i % 101),
        gpu_system_memory_bytes: Default::default(),
        engines_percent: Default::default(),
        memory_bandwidth_percent: Reading::Value(i % 53),
        encoder_percent: Reading::Value(0),
        decoder_percent: Reading::Value(0),
        gpu_instance_id: None,
        compute_instance_id: None,
        host: HostFacts {
            user: Reading::Value(format!("user{}", i % 37).into()),
            uid: Reading::Value(1000 + i % 37),
            parent_pid: Reading::Value(1),
            command: Reading::Value(format!("python3 train.py --run {i} --lr 3e-4").into()),
            cpu_percent: Reading::Value(f64::from(i % 400) / 3.0),
            memory_bytes: Reading::Value(u64::from(i) << 20),
            start_time: Reading::Value(1_700_000_000 + u64::from(i)),
            start_ticks: Reading::Value(100 * u64::from(i)),
            running_seconds: Reading::Value(u64::from(i) * 7),
            ..HostFacts::unread(10_000 + i)
        },
    }
}

fn snapshot(processes: u32) -> Snapshot {
    let devices = (0..8)
        .map(|index| {
            let mut d = Device::unavailable(index, DeviceStatus::Ok, "bench");
            d.name = Reading::Value("NVIDIA H100 80GB HBM3".into());
            d.set_memory(Reading::Value(Memory {
                total: 80 << 30,
                used: 60 << 30,
                free: 19 << 30,
                reserved: 1 << 30,
            }));
            d.utilization_gpu_percent = Reading::Value(90);
            d.temperature_celsius = Reading::Value(70);
            d
        })
        .collect();
    Snapshot {
        taken_at: UNIX_EPOCH,
        hostname: "bench".into(),
        pid_namespace: PidNamespace::Host,
        hidden_processes: 0,
        driver_version: Reading::Value("550.54.15".into()),
        cuda_driver_version: Reading::Value("12.4".into()),
        nvml_version: Reading::NotSupported,
        devices,
        processes: (0..processes).map(process).collect(),
        host: HostStats {
            cpu_percent: Reading::Value(50.0),
            memory_total_bytes: Reading::Value(512 << 30),
            memory_used_bytes: Reading::Value(100 << 30),
            swap_total_bytes: Reading::Value(0),
            swap_used_bytes: Reading::Value(0),
            load_average: Reading::Value([1.0, 1.0, 1.0]),
            uptime_seconds: Reading::Value(1000),
        },
    }
}

fn main() {
    // `cargo bench --bench core -- --write-drm-machine DIR`: the DRM benchmark's machine,
    // for bench/drm.py to run gputop on.
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--write-drm-machine") {
        let dir = std::path::Path::new(&args[at + 1]);
        gputop_core::source::drm::fixture::sysfs(&dir.join("sys"), 0.0);
        gputop_core::source::drm::fixture::crowd(&dir.join("proc"), 1000, 50);
        return;
    }
    let snapshot = Arc::new(snapshot(10_000));
    let mut app = App::new(Settings::default(), Selection::default(), false, Some(1000));
    app.update(Action::Received(Received::Snapshot(Arc::clone(&snapshot))));

    // Each sort action filters and sorts the rows again (the view keeps them between
    // changes); by GPU memory, one way then the other.
    let mut reverse = false;
    let mut sort_by_memory = |app: &mut App| {
        reverse = !reverse;
        app.update(Action::Arrange(Arrange::SortBy {
            key: SortKey::GpuMemory,
            reverse,
        }));
        black_box(app.rows());
    };
    let sort = median(|| sort_by_memory(&mut app), 51);
    println!(
        "sort 10 000 processes by GPU memory:       {:>9.3} ms",
        sort.as_secs_f64() * 1e3
    );
    app.view.filter = "user:user7 mem>2G".into();
    let filter = median(|| sort_by_memory(&mut app), 51);
    println!(
        "filter and sort 10 000 processes:          {:>9.3} ms",
        filter.as_secs_f64() * 1e3
    );
    app.view.filter.clear();
    sort_by_memory(&mut app);

    let theme = Theme {
        color: true,
        ascii: false,
        light: false,
    };
    // A frame as the terminal gets it: drawn, compared with what the terminal shows, and the
    // changed cells written (to nowhere).
    let mut screen = Screen::new(std::io::sink(), Rect::new(0, 0, 200, 50)).expect("a sink");
    let render = median(
        || {
            let drawn = screen.draw(|buffer| ui::draw(buffer, &app, &theme));
            black_box(drawn.expect("a sink"));
        },
        51,
    );
    println!(
        "render a 200x50 frame of 10 000 processes: {:>9.3} ms",
        render.as_secs_f64() * 1e3
    );

    // History and alert rules per refresh: 8 GPUs, 64 processes, time moving on.
    let mut app = App::new(Settings::default(), Selection::default(), false, Some(1000));
    let base = crate::snapshot(64);
    let mut second = 0u64;
    let frames: Vec<Arc<Snapshot>> = (0..2000u64)
        .map(|i| {
            let mut s = base.clone();
            s.taken_at = UNIX_EPOCH + Duration::from_secs(1_800_000_000 + i * 2);
            Arc::new(s)
        })
        .collect();
    // Ten minutes of history first, so the long windows (leak: 10 min) have data to read.
    for frame in &frames[..300] {
        app.update(Action::Received(Received::Snapshot(Arc::clone(frame))));
    }
    let alerts = median(
        || {
            second += 1;
            let frame = &frames[(300 + second as usize) % frames.len()];
            black_box(app.update(Action::Received(Received::Snapshot(Arc::clone(frame)))));
        },
        501,
    );
    println!(
        "history + alert rules, 8 GPUs 64 processes: {:>8.3} ms per refresh",
        alerts.as_secs_f64() * 1e3
    );

    // History memory for one GPU: a day of readings every second.
    let settings = gputop_core::config::HistorySettings {
        retention_time: 86_400,
        sample_interval: 1,
    };
    let mut history = gputop_core::monitor::history::History::new(&settings, 1.0);
    let mut one_gpu = crate::snapshot(1);
    one_gpu.devices.truncate(1);
    for i in 0..86_400u64 {
        one_gpu.taken_at = UNIX_EPOCH + Duration::from_secs(1_800_000_000 + i);
        history.record(&one_gpu);
    }
    println!(
        "history of one GPU, a day at 1 s:          {:>9.1} KiB (6 metrics; each process {:.1} KiB)",
        history.device_memory_bytes(0) as f64 / 1024.0,
        history.process_memory_bytes() as f64 / 1024.0
    );

    // Building a snapshot through nvml-wrapper, on the simulated 8-GPU machine.
    let exe = std::env::current_exe().unwrap();
    let lib = exe.parent().unwrap().join("libnvml_sim.so");
    if lib.exists() {
        let dir = std::env::temp_dir().join(format!("gputop-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let copy = dir.join("libnvidia-ml.so.1");
        std::fs::copy(&lib, &copy).unwrap();
        let scenario = "[meta]\nversion = 1\n".to_string()
            + &(0..8)
                .map(|g| {
                    let procs: String = (0..8)
                        .map(|p| {
                            format!(
                                "[[gpu.process]]\npid = {}\nused_memory = \"1 GiB\"\nsm = 50\n",
                                900_000 + g * 8 + p
                            )
                        })
                        .collect();
                    format!("[[gpu]]\nname = \"Sim {g}\"\n{procs}")
                })
                .collect::<String>();
        std::fs::write(dir.join("gputop-sim.toml"), scenario).unwrap();
        let mut source = NvmlSource::open(Some(&copy)).expect("simulator");
        let read = median(
            || {
                black_box(source.read(Duration::from_secs(1)));
            },
            51,
        );
        println!(
            "read 8 GPUs and 64 processes through NVML: {:>9.3} ms",
            read.as_secs_f64() * 1e3
        );
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("read through NVML: skipped, build the simulator first (cargo build -p nvml-sim)");
    }

    drm_refresh(lib.exists().then_some(lib.as_path()));
}

/// The DRM reader on a fake machine of 1000 processes with 10 fds each, 50 of which hold
/// 3 DRM fds on 4 GPUs (two AMD, an xe and an i915 GPU, as `drm::fixture` lays them out),
/// beside NVML's read of 4 GPUs with the same 50 processes on the simulator: the first read
/// opens every fd directory, a steady one the GPU holders' and a tenth of the others'.
fn drm_refresh(nvml_lib: Option<&std::path::Path>) {
    use gputop_core::source::drm::{DrmReader, fixture};
    let dir = std::env::temp_dir().join(format!("gputop-bench-drm-{}", std::process::id()));
    let (proc, sys) = (dir.join("proc"), dir.join("sys"));
    fixture::sysfs(&sys, 0.0);
    fixture::crowd(&proc, 1000, 50);
    let first = {
        let mut reader = DrmReader::new(&proc, &sys);
        let start = Instant::now();
        black_box(reader.readout(0));
        start.elapsed()
    };
    let mut reader = DrmReader::new(&proc, &sys);
    reader.readout(0);
    let steady = median(
        || {
            black_box(reader.readout(0));
        },
        51,
    );
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "DRM, 4 GPUs, 1000 processes x 10 fds, 50 with 3 on a GPU:  first {:.3} ms, steady {:.3} ms a refresh ({:.3} s CPU a minute at 1 s)",
        first.as_secs_f64() * 1e3,
        steady.as_secs_f64() * 1e3,
        steady.as_secs_f64() * 60.0
    );
    let Some(lib) = nvml_lib else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("gputop-bench-nvml4-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("libnvidia-ml.so.1");
    std::fs::copy(lib, &copy).unwrap();
    let scenario = "[meta]\nversion = 1\n".to_string()
        + &(0..4u32)
            .map(|g| {
                let procs: String = (0..50u32)
                    .filter(|p| p % 4 == g)
                    .map(|p| {
                        format!(
                            "[[gpu.process]]\npid = {}\nused_memory = \"1 GiB\"\nsm = 50\n",
                            900_000 + p
                        )
                    })
                    .collect();
                format!("[[gpu]]\nname = \"Sim {g}\"\n{procs}")
            })
            .collect::<String>();
    std::fs::write(dir.join("gputop-sim.toml"), scenario).unwrap();
    let mut source = NvmlSource::open(Some(&copy)).expect("simulator");
    let nvml = median(
        || {
            black_box(source.read(Duration::from_secs(1)));
        },
        51,
    );
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "NVML, 4 GPUs, the same 50 processes (simulator):           {:.3} ms a refresh ({:.3} s CPU a minute at 1 s); DRM / NVML {:.2}",
        nvml.as_secs_f64() * 1e3,
        nvml.as_secs_f64() * 60.0,
        steady.as_secs_f64() / nvml.as_secs_f64()
    );
}

//! Fuzzing the readers of data from outside: the config parser, the snapshot reader (what a
//! remote node's `/snapshot` says), Prometheus' answer parser (what the fleet view reads), the
//! recording reader, the simulator's scenario parser and the DRM readers (`/proc/PID/fdinfo`
//! and sysfs attributes of AMD and Intel GPUs). Each target first replays its corpus
//! (`tests/fuzz/<target>/`, plus the files the
//! project ships of that kind), then feeds it mutated inputs for `GPUTOP_FUZZ_SECONDS`
//! seconds (1 by default; `.ci/run` gives each a minute). A snapshot that is accepted is also
//! drawn, reported and fed to the monitor, so what a reader lets through cannot break what
//! comes after. An input that panics is saved under `target/fuzz-failures/` and fails the
//! test with its path and the seed (`GPUTOP_FUZZ_SEED` replays the same run).
//!
//! The mutations are random, not coverage-guided (cargo-fuzz needs a nightly compiler,
//! which CI does not have): byte flips and overwrites, inserted tokens readers find hard
//! (huge and negative numbers, bad UTF-8, deep nesting, escapes), deleted, repeated and
//! spliced ranges.

use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant, UNIX_EPOCH};

use crate::app::filter::Selection;
use crate::app::state::{Action, App, Received};
use gputop_core::config::{CliOverrides, Settings};
use gputop_core::model::Snapshot;
use gputop_core::monitor::Monitor;
use gputop_core::source::replay::Recording;

/// Tokens inserted whole: the values and shapes that break readers.
const TOKENS: &[&[u8]] = &[
    b"4294967295",
    b"18446744073709551616",
    b"-1",
    b"1e400",
    b"1e20",
    b"-0.0",
    b"NaN",
    b"null",
    b"true",
    b"\"\"",
    b"{}",
    b"[]",
    b"[[[[[[[[[[[[[[[[",
    b"{\"index\":",
    b"\"processes\":[",
    b"\"k\":",
    b"\"d\":",
    b"\"t\":",
    b"\xff",
    b"\xe2\x80",
    b"\\u0000",
    b"\\ud800",
    b"\x1b[2J",
    "\u{202e}".as_bytes(),
    b"\n",
    b"\r\n",
    b"=",
    b"[[gpu]]\n",
    b"[[alert.rules]]\n",
    b"\"\"\"",
    b"'''",
];

/// A small fast generator (xorshift64*), seeded per run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One to four random changes to `input`, with `others` to splice from.
fn mutate(input: &[u8], others: &[Vec<u8>], rng: &mut Rng) -> Vec<u8> {
    let mut data = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(data.len() + 1);
        match rng.below(7) {
            0 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] ^= 1 << rng.below(8);
            }
            1 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] = rng.next() as u8;
            }
            2 => {
                let token = TOKENS[rng.below(TOKENS.len())];
                data.splice(at..at, token.iter().copied());
            }
            3 if at < data.len() => {
                let end = (at + 1 + rng.below(64)).min(data.len());
                data.drain(at..end);
            }
            4 if at < data.len() => {
                let end = (at + 1 + rng.below(64)).min(data.len());
                let piece = data[at..end].to_vec();
                let times = 1 + rng.below(8);
                for _ in 0..times {
                    data.splice(end..end, piece.iter().copied());
                }
            }
            5 if !others.is_empty() => {
                let other = &others[rng.below(others.len())];
                let from = rng.below(other.len() + 1);
                let end = (from + rng.below(256)).min(other.len());
                data.splice(at..at, other[from..end].iter().copied());
            }
            _ => data.truncate(at),
        }
    }
    data.truncate(1 << 20);
    data
}

/// The seed inputs of `target`: its corpus folder and the `shipped` files.
fn corpus(target: &str, shipped: &[PathBuf]) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz")
        .join(target);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    paths.extend(shipped.iter().cloned());
    let inputs: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(!inputs.is_empty(), "no corpus for {target}");
    inputs
}

/// Replays the corpus of `target` through `run`, then mutated inputs for the time given.
fn fuzz(target: &str, shipped: &[PathBuf], mut run: impl FnMut(&[u8])) {
    let seeds = corpus(target, shipped);
    let seconds: f64 = std::env::var("GPUTOP_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let seed = std::env::var("GPUTOP_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| UNIX_EPOCH.elapsed().unwrap().as_nanos() as u64 | 1);
    let mut rng = Rng(seed);
    silence_panics_of_fuzzed_inputs();
    let mut try_one = |input: &[u8]| {
        FUZZING.set(true);
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| run(input)));
        FUZZING.set(false);
        if outcome.is_err() {
            let target_dir =
                std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo("target"), PathBuf::from);
            let dir = target_dir.join("fuzz-failures");
            std::fs::create_dir_all(&dir).unwrap();
            let file = dir.join(format!("{target}-{seed}"));
            std::fs::write(&file, input).unwrap();
            panic!(
                "{target}: an input panicked (seed {seed}); saved as {}",
                file.display()
            );
        }
    };
    for input in &seeds {
        try_one(input);
    }
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut runs = 0u64;
    while Instant::now() < deadline {
        let base = &seeds[rng.below(seeds.len())];
        let input = mutate(base, &seeds, &mut rng);
        try_one(&input);
        runs += 1;
    }
    eprintln!(
        "{target}: {} seeds and {runs} mutated inputs, seed {seed}",
        seeds.len()
    );
}

thread_local! {
    /// Whether this thread is running a fuzzed input now.
    static FUZZING: Cell<bool> = const { Cell::new(false) };
}

/// Panics are caught one input at a time and the default hook would print each; the other
/// tests of this binary keep theirs.
fn silence_panics_of_fuzzed_inputs() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !FUZZING.get() {
                default(info);
            }
        }));
    });
}

/// Draws what `app` shows on a 120x40 screen, as the view would.
fn draw(app: &App) {
    let theme = crate::ui::theme::Theme {
        color: true,
        ascii: false,
        light: false,
    };
    let mut buffer = ratatui::buffer::Buffer::empty(ratatui::layout::Rect::new(0, 0, 120, 40));
    let _ = crate::ui::draw(&mut buffer, app, &theme);
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

#[test]
fn fuzz_the_config_parser() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    fuzz("config", &[repo("config/default.toml")], |input| {
        std::fs::write(&path, input).unwrap();
        if let Ok(effective) = gputop_core::config::load(Some(&path), &|_| None, &CliOverrides::default()) {
            let _ = gputop_core::config::dump(&effective);
        }
    });
}

#[test]
fn fuzz_the_snapshot_reader() {
    let settings = Settings::default();
    fuzz("snapshot", &[], |input| {
        let Ok(wire) = serde_json::from_slice::<Snapshot>(input) else {
            return;
        };
        let Ok(snapshot) = wire.from_wire(UNIX_EPOCH) else {
            return;
        };
        let snapshot = Arc::new(snapshot);
        for width in [None, Some(1), Some(80)] {
            let report =
                crate::output::report::text_report(&snapshot, &settings.display.default_metrics, &[], width);
            if let Some(width) = width {
                assert!(
                    report
                        .lines()
                        .all(|l| unicode_width::UnicodeWidthStr::width(l) <= usize::from(width))
                );
            }
        }
        let mut monitor = Monitor::new(&settings.history, &settings.alert, 1.0);
        monitor.ingest(&snapshot);
        let mut app = App::new(settings.clone(), Selection::default(), true, None);
        app.update(Action::Received(Received::Snapshot(Arc::clone(&snapshot))));
        draw(&app);
    });
}

#[test]
fn fuzz_the_prometheus_answer_parser() {
    use gputop_core::model::fleet::{Fleet, FleetGpu, FleetNode, NodeState};
    let settings = Settings::default();
    fuzz("prometheus", &[], |input| {
        let Ok(samples) = gputop_core::source::prometheus::parse_answer(input) else {
            return;
        };
        // What an answer lets through is drawn and reported: its labels as node names,
        // label values and GPU names, its values as figures.
        let nodes = samples
            .iter()
            .map(|s| {
                let instance = s.labels.get("instance").cloned().unwrap_or_default();
                let mut node = FleetNode::new(instance, NodeState::Up);
                node.labels = s.labels.clone();
                node.set_devices(vec![FleetGpu {
                    index: 0,
                    name: s.labels.get("name").cloned(),
                    utilization_percent: Some(s.value),
                    memory_used_bytes: None,
                    memory_total_bytes: None,
                    idle_seconds: Some(s.value as u64),
                }]);
                node
            })
            .collect();
        let mut fleet = Fleet::new("prometheus fuzz".into(), UNIX_EPOCH, 3600, nodes);
        fleet.list_idle_gpus();
        let fleet = Arc::new(fleet);
        let _ = crate::output::fleet::text(&fleet);
        let mut app = App::new(settings.clone(), Selection::default(), true, None);
        app.view.screen = crate::app::view::Screen::Cluster;
        app.update(Action::Received(Received::Fleet(fleet)));
        draw(&app);
    });
}

#[test]
fn fuzz_the_recording_reader() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fuzzed.rec");
    fuzz("recording", &[], |input| {
        std::fs::write(&path, input).unwrap();
        if let Ok(recording) = Recording::open(&path) {
            for index in 0..recording.len().min(20) {
                let _ = recording.frame(index);
            }
            let _ = recording.index_at(recording.span() / 2.0);
        }
    });
}

#[test]
fn fuzz_the_scenario_parser() {
    let shipped: Vec<PathBuf> = std::fs::read_dir(repo("tests/scenarios"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    fuzz("scenario", &shipped, |input| {
        let text = String::from_utf8_lossy(input);
        let _ = nvml_sim::scenario::Scenario::parse(&text, "fuzz", &|_| Some("1 2 3".into()));
    });
}

/// The DRM readers: every attribute of an AMD and an Intel GPU's sysfs and hwmon, and the
/// fdinfo of a process holding both, are the fuzzed input; read twice, as refreshes do.
#[test]
fn fuzz_the_drm_readers() {
    use gputop_core::source::drm::{DrmReader, fdinfo::Fdinfo};
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let (proc, sys) = (dir.path().join("proc"), dir.path().join("sys"));
    let mut attributes = Vec::new();
    for (card, slot, vendor, driver) in [
        (0, "0000:03:00.0", "0x1002", "amdgpu"),
        (1, "0000:08:00.0", "0x8086", "xe"),
    ] {
        let class = sys.join(format!("class/drm/card{card}"));
        std::fs::create_dir_all(&class).unwrap();
        symlink(format!("../../../bus/pci/devices/{slot}"), class.join("device")).unwrap();
        let device = sys.join("bus/pci/devices").join(slot);
        std::fs::create_dir_all(device.join("hwmon/hwmon0")).unwrap();
        std::fs::create_dir_all(device.join("tile0/gt0/freq0")).unwrap();
        std::fs::write(device.join("vendor"), vendor).unwrap();
        std::fs::write(device.join("uevent"), format!("DRIVER={driver}\n")).unwrap();
        for name in [
            "gpu_busy_percent",
            "mem_busy_percent",
            "mem_info_vram_total",
            "mem_info_vram_used",
            "mem_info_gtt_total",
            "mem_info_gtt_used",
            "power/runtime_status",
            "tile0/gt0/freq0/act_freq",
        ] {
            attributes.push(device.join(name));
        }
        for name in [
            "temp1_input",
            "temp2_input",
            "power1_average",
            "power1_input",
            "power1_cap",
            "power1_max",
            "energy1_input",
            "freq1_input",
            "freq2_input",
            "pwm1",
            "pwm1_max",
        ] {
            attributes.push(device.join("hwmon/hwmon0").join(name));
        }
        std::fs::create_dir_all(device.join("power")).unwrap();
    }
    let process = proc.join("100");
    std::fs::create_dir_all(process.join("fd")).unwrap();
    std::fs::create_dir_all(process.join("fdinfo")).unwrap();
    for (fd, node) in [(3, "renderD128"), (4, "renderD129")] {
        symlink(
            format!("/dev/dri/{node}"),
            process.join("fd").join(fd.to_string()),
        )
        .unwrap();
        attributes.push(process.join("fdinfo").join(fd.to_string()));
    }
    fuzz("drm", &[], |input| {
        let _ = Fdinfo::parse(input);
        for path in &attributes {
            std::fs::write(path, input).unwrap();
        }
        let mut reader = DrmReader::new(&proc, &sys);
        reader.read();
        reader.read();
    });
}

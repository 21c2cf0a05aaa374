//! The alert engine on synthetic series fed through the history, one snapshot a second:
//! `for` durations to the second, hysteresis, no data on gaps, change and leak rules on
//! their shapes and not on noise, idle-while-reserved.

mod common;

use std::time::{Duration, UNIX_EPOCH};

use common::fixtures::{GIB, device, process, snapshot};
use gputop_core::config::{HistorySettings, Settings};
use gputop_core::model::{Memory, Reading, Snapshot};
use gputop_core::monitor::alerts::rules::{Comparison, Function, Holders, Metric, Rule, Severity, builtin};
use gputop_core::monitor::alerts::{Engine, Phase, Subject, Transition};
use gputop_core::monitor::history::{DeviceMetric, History};

const T0: u64 = 1_800_000_000;

/// One GPU, and optionally one process on it with `process_mib` of GPU memory.
fn machine(
    second: u64,
    temperature: Option<u32>,
    util: u32,
    memory_percent: f64,
    process_mib: Option<f64>,
) -> Snapshot {
    let mut s = snapshot();
    s.taken_at = UNIX_EPOCH + Duration::from_secs(T0 + second);
    let mut gpu = device(0, "NVIDIA H100 80GB HBM3", 10, util, 50);
    gpu.temperature_celsius = temperature.map_or(Reading::Failed("timeout".into()), Reading::Value);
    let total = 80 * GIB;
    let used = (total as f64 * memory_percent / 100.0) as u64;
    gpu.set_memory(Reading::Value(Memory {
        total,
        used,
        free: total - used,
        reserved: 0,
    }));
    s.devices = vec![gpu];
    s.processes = process_mib
        .map(|mib| {
            let mut p = process(4242, 0, 1000, "alice", "python3 train.py", 1, 90);
            p.gpu_memory_bytes = Reading::Value((mib * 1024.0 * 1024.0) as u64);
            p
        })
        .into_iter()
        .collect();
    s
}

fn rule(
    metric: Metric,
    function: Function,
    threshold: f64,
    clear: f64,
    window: f64,
    for_seconds: f64,
) -> Rule {
    Rule {
        name: "test_rule".into(),
        metric,
        function,
        comparison: Comparison::Above,
        threshold,
        clear,
        window,
        for_seconds,
        severity: Severity::Warning,
        min_coverage: 0.5,
        holders: Holders::Any,
        summary: None,
    }
}

struct Run {
    history: History,
    engine: Engine,
    second: u64,
    log: Vec<Transition>,
}

impl Run {
    fn new(rules: Vec<Rule>) -> Self {
        let settings = HistorySettings {
            retention_time: 86_400,
            sample_interval: 10,
        };
        Self {
            history: History::new(&settings, 1.0),
            engine: Engine::new(rules),
            second: 0,
            log: Vec::new(),
        }
    }

    /// Feeds `seconds` snapshots made by `make(second)`.
    fn feed(&mut self, seconds: u64, make: impl Fn(u64) -> Snapshot) {
        for _ in 0..seconds {
            self.second += 1;
            self.history.record(&make(self.second));
            self.log.extend(self.engine.evaluate(&self.history));
        }
    }

    fn phase(&self, rule: &str) -> Phase {
        self.engine
            .active()
            .iter()
            .find(|a| a.rule == rule)
            .map_or(Phase::Inactive, |a| a.phase)
    }

    fn fired(&self, rule: &str) -> Vec<u64> {
        self.log
            .iter()
            .filter(|t| t.rule == rule && t.to == Phase::Firing)
            .map(|t| t.at as u64 - T0)
            .collect()
    }
}

fn temperature(value: u32) -> impl Fn(u64) -> Snapshot {
    move |s| machine(s, Some(value), 50, 10.0, None)
}

#[test]
fn a_condition_must_hold_for_the_whole_for_duration_and_clears_only_past_the_clear_level() {
    let metric = Metric::Device(DeviceMetric::Temperature);
    let mut run = Run::new(vec![rule(metric, Function::Last, 80.0, 75.0, 5.0, 30.0)]);
    run.feed(60, temperature(70));
    // Above the threshold for 29 s: pending throughout, never firing.
    run.feed(30, temperature(90));
    assert_eq!(run.phase("test_rule"), Phase::Pending);
    run.feed(5, temperature(70));
    assert_eq!(run.phase("test_rule"), Phase::Inactive);
    assert!(
        run.fired("test_rule").is_empty(),
        "29 s must not fire a 30 s rule"
    );
    // Above for 30 s: fires at exactly the 30th second.
    let start = run.second + 1;
    run.feed(31, temperature(90));
    assert_eq!(run.fired("test_rule"), vec![start + 30]);
    assert_eq!(run.phase("test_rule"), Phase::Firing);
    // Below the threshold but above the clear level: still firing.
    run.feed(20, temperature(78));
    assert_eq!(run.phase("test_rule"), Phase::Firing);
    run.feed(1, temperature(74));
    assert_eq!(run.phase("test_rule"), Phase::Inactive);
    let last = run.log.last().unwrap();
    assert_eq!((last.from, last.to), (Phase::Firing, Phase::Resolved));
}

#[test]
fn the_default_window_is_a_30_second_mean_and_a_spike_does_not_fire_it() {
    let metric = Metric::Device(DeviceMetric::Temperature);
    let mut run = Run::new(vec![rule(metric, Function::Mean, 80.0, 78.0, 30.0, 0.0)]);
    run.feed(60, temperature(70));
    run.feed(5, temperature(99)); // a 5 s spike: the 30 s mean stays near 75
    run.feed(30, temperature(70));
    assert!(run.fired("test_rule").is_empty(), "{:?}", run.log);
    run.feed(30, temperature(86));
    assert_eq!(run.phase("test_rule"), Phase::Firing);
}

#[test]
fn gaps_are_no_data_never_ok() {
    let metric = Metric::Device(DeviceMetric::Temperature);
    let mut run = Run::new(vec![rule(metric, Function::Mean, 80.0, 78.0, 30.0, 0.0)]);
    run.feed(40, temperature(90));
    assert_eq!(run.phase("test_rule"), Phase::Firing);
    // The sensor stops answering: after half the window without readings, no data.
    run.feed(20, |s| machine(s, None, 50, 10.0, None));
    let last = run.log.last().unwrap();
    assert_eq!(
        (last.from, last.to),
        (Phase::Firing, Phase::NoData),
        "{:?}",
        run.log
    );
    assert!(
        !run.log.iter().any(|t| t.to == Phase::Resolved),
        "a gap must not read as resolved"
    );
    // And at start-up, too few readings are no data, not OK.
    let mut fresh = Run::new(vec![rule(metric, Function::Mean, 80.0, 78.0, 30.0, 0.0)]);
    fresh.feed(10, temperature(99));
    assert!(
        fresh.fired("test_rule").is_empty(),
        "10 s cover a third of the window"
    );
    fresh.feed(6, temperature(99));
    assert_eq!(
        fresh.fired("test_rule").len(),
        1,
        "half the window covered: judged"
    );
}

#[test]
fn memory_rising_fires_on_a_rise_and_not_on_noise() {
    let rules: Vec<Rule> = builtin(&Settings::default().alert)
        .into_iter()
        .filter(|r| r.name == "gpu_memory_rising")
        .collect();
    let mut noisy = Run::new(rules.clone());
    // ±8 points of noise around 40%, for 20 minutes.
    noisy.feed(1200, |s| {
        let noise = [8.0, -8.0, 3.0, -5.0, 6.0, 0.0, -7.0][(s % 7) as usize];
        machine(s, Some(50), 50, 40.0 + noise, None)
    });
    assert!(noisy.fired("gpu_memory_rising").is_empty(), "{:?}", noisy.log);
    let mut rising = Run::new(rules);
    rising.feed(300, |s| machine(s, Some(50), 50, 10.0, None));
    // From 10% to 45% over three minutes.
    rising.feed(180, |s| {
        machine(s, Some(50), 50, 10.0 + 35.0 * (s - 300) as f64 / 180.0, None)
    });
    assert_eq!(rising.fired("gpu_memory_rising").len(), 1, "{:?}", rising.log);
}

#[test]
fn a_steady_leak_is_caught_and_noise_or_one_allocation_is_not() {
    let rules: Vec<Rule> = builtin(&Settings::default().alert)
        .into_iter()
        .filter(|r| r.name == "process_memory_leak")
        .collect();
    let run_with = |memory: &dyn Fn(u64) -> f64| {
        let mut run = Run::new(rules.clone());
        run.feed(1500, |s| machine(s, Some(50), 90, 50.0, Some(memory(s))));
        run
    };
    // 2 GiB growing by about 1 MiB a second, in allocator-sized 16 MiB steps.
    let leak = run_with(&|s| 2048.0 + ((s / 16) * 16) as f64);
    let fired = leak.fired("process_memory_leak");
    assert_eq!(fired.len(), 1, "{:?}", leak.log);
    assert!(
        fired[0] >= 570,
        "needs 95% of 10 minutes of history, fired at {}",
        fired[0]
    );
    assert_eq!(leak.log[0].subject.label(), "PID 4242 on GPU 0");
    assert_eq!(leak.log[0].severity, Severity::Critical);
    // Training: memory going up and down by 4 GiB every 90 s.
    let sawtooth = run_with(&|s| 8192.0 + ((s % 90) as f64) * 45.0);
    assert!(
        sawtooth.fired("process_memory_leak").is_empty(),
        "{:?}",
        sawtooth.log
    );
    // One big allocation at minute 5, then flat.
    let jump = run_with(&|s| if s < 300 { 1024.0 } else { 9216.0 });
    assert!(jump.fired("process_memory_leak").is_empty(), "{:?}", jump.log);
    // Flat with noise.
    let flat = run_with(&|s| 4096.0 + [0.0, 30.0, -20.0, 10.0][(s % 4) as usize]);
    assert!(flat.fired("process_memory_leak").is_empty(), "{:?}", flat.log);
}

#[test]
fn reserved_and_idle_is_a_warning_idle_and_free_only_a_note() {
    let rules: Vec<Rule> = builtin(&Settings::default().alert)
        .into_iter()
        .filter(|r| r.name.starts_with("gpu_idle"))
        .collect();
    let mut reserved = Run::new(rules.clone());
    reserved.feed(420, |s| machine(s, Some(40), 2, 30.0, Some(20_000.0)));
    let fired = reserved.fired("gpu_idle_reserved");
    assert_eq!(fired.len(), 1, "{:?}", reserved.log);
    // The 60 s mean is judged from 30 s on; then 5 minutes must pass.
    assert!((330..=361).contains(&fired[0]), "fired at {}", fired[0]);
    assert!(reserved.fired("gpu_idle_free").is_empty());
    assert_eq!(
        reserved.engine.severity_of(&Subject::Device(0)),
        Some(Severity::Warning)
    );
    let mut free = Run::new(rules.clone());
    free.feed(420, |s| machine(s, Some(40), 2, 1.0, None));
    assert!(free.fired("gpu_idle_reserved").is_empty());
    assert_eq!(free.fired("gpu_idle_free").len(), 1);
    // Busy: neither.
    let mut busy = Run::new(rules);
    busy.feed(420, |s| machine(s, Some(40), 80, 30.0, Some(20_000.0)));
    assert!(busy.log.is_empty(), "{:?}", busy.log);
}

#[test]
fn an_ended_process_resolves_its_alerts_and_the_log_is_bounded() {
    let metric = Metric::Process(gputop_core::monitor::history::ProcessMetric::GpuMemoryMib);
    let mut run = Run::new(vec![rule(metric, Function::Last, 1000.0, 1000.0, 5.0, 0.0)]);
    run.feed(10, |s| machine(s, Some(40), 50, 30.0, Some(2000.0)));
    assert_eq!(run.fired("test_rule").len(), 1);
    run.feed(1, |s| machine(s, Some(40), 50, 30.0, None));
    assert_eq!(run.log.last().unwrap().to, Phase::Resolved);
    // Flapping for a long time keeps the in-memory log at its bound.
    run.feed(3000, |s| {
        machine(s, Some(40), 50, 30.0, (s % 2 == 0).then_some(2000.0))
    });
    assert_eq!(run.engine.log().len(), gputop_core::monitor::alerts::LOG_LENGTH);
}

mod sink {
    use super::*;
    use gputop_core::config::AlertSettings;
    use gputop_core::monitor::alerts::sink::Sink;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    fn critical(rule: &str) -> Transition {
        Transition {
            at: 1_800_000_000.0,
            rule: rule.into(),
            severity: Severity::Critical,
            subject: Subject::Device(0),
            from: Phase::Pending,
            to: Phase::Firing,
            value: Some(91.5),
            summary: "GPU 0: hot \u{1b}[2J".into(),
        }
    }

    fn settings(dir: &Path, command: &[&str], min_interval: f64, timeout: f64) -> AlertSettings {
        AlertSettings {
            log_file: dir.join("alerts.log").display().to_string(),
            notify_critical: command.iter().map(|s| s.to_string()).collect(),
            notify_min_interval: min_interval,
            notify_timeout: timeout,
            ..Settings::default().alert
        }
    }

    fn wait_for(path: &Path, lines: usize) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            if text.lines().count() >= lines || std::time::Instant::now() > deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn the_log_is_appended_0600_json_lines_and_never_followed_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("alerts.log");
        std::fs::write(&log, "kept\n").unwrap();
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut sink = Sink::open(&settings(dir.path(), &[], 0.0, 1.0)).unwrap();
        assert!(sink.deliver(&[critical("a"), critical("b")]).is_empty());
        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "kept", "appended, never truncated");
        let entry: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
        assert_eq!(entry["rule"], "b");
        assert_eq!(entry["state"], "firing");
        assert_eq!(entry["severity"], "critical");
        assert!(!text.contains('\u{1b}'), "escape sequences are not logged raw");

        let fresh = tempfile::tempdir().unwrap();
        drop(Sink::open(&settings(fresh.path(), &[], 0.0, 1.0)).unwrap());
        let mode = std::fs::metadata(fresh.path().join("alerts.log"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);

        let linked = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(&log, linked.path().join("alerts.log")).unwrap();
        let error = Sink::open(&settings(linked.path(), &[], 0.0, 1.0))
            .unwrap_err()
            .to_string();
        assert!(error.contains("alert.log_file"), "{error}");
    }

    #[test]
    fn notifications_run_without_a_shell_are_rate_limited_and_time_out() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("notified");
        // The program is run directly; this test's program happens to be sh, to record the
        // environment it was given.
        let script = format!(
            "echo \"$GPUTOP_ALERT_RULE $GPUTOP_ALERT_SEVERITY $GPUTOP_ALERT_SUBJECT $GPUTOP_ALERT_SUPPRESSED\" >> {}",
            out.display()
        );
        let mut limited = Sink::open(&settings(dir.path(), &["sh", "-c", &script], 300.0, 5.0)).unwrap();
        limited.deliver(&[critical("first")]);
        limited.deliver(&[critical("second"), critical("third")]);
        let text = wait_for(&out, 1);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "first critical GPU 0 0\n",
            "{text}"
        );

        let mut open = Sink::open(&settings(dir.path(), &["sh", "-c", &script], 0.0, 5.0)).unwrap();
        open.deliver(&[critical("fourth"), critical("fifth")]);
        let text = wait_for(&out, 3);
        assert!(text.contains("fourth") && text.contains("fifth"), "{text}");

        // A command that hangs is killed after the timeout.
        let pid_file = dir.path().join("pid");
        let hang = format!("echo $$ > {}; exec sleep 30", pid_file.display());
        let mut slow = Sink::open(&settings(dir.path(), &["sh", "-c", &hang], 0.0, 0.3)).unwrap();
        slow.deliver(&[critical("slow")]);
        let pid = wait_for(&pid_file, 1).trim().to_string();
        assert!(!pid.is_empty());
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "the notification command was not killed"
            );
            std::thread::sleep(Duration::from_millis(50));
        }

        let mut missing = Sink::open(&settings(dir.path(), &["/nonexistent/notify"], 0.0, 1.0)).unwrap();
        let problems = missing.deliver(&[critical("x")]);
        assert!(
            problems[0].contains("cannot run /nonexistent/notify"),
            "{problems:?}"
        );
    }
}

#[test]
fn history_memory_stays_bounded_over_hours_with_processes_coming_and_going() {
    let settings = HistorySettings {
        retention_time: 3600,
        sample_interval: 1,
    };
    let mut history = History::new(&settings, 1.0);
    let mut engine = Engine::new(builtin(&Settings::default().alert));
    let mut sizes = Vec::new();
    // Four hours at one snapshot a second; a new process every minute, each living 5 minutes.
    for second in 1..=4 * 3600u64 {
        let mut s = machine(second, Some(60), 50, 40.0, Some(1000.0));
        s.processes[0].pid = 10_000 + (second / 300) as u32;
        let mut other = s.processes[0].clone();
        other.pid = 20_000 + (second / 60) as u32;
        s.processes.push(other);
        history.record(&s);
        engine.evaluate(&history);
        if second % 3600 == 0 {
            sizes.push(history.memory_bytes());
        }
    }
    // Past the retention time the history no longer grows.
    assert_eq!(sizes[1], sizes[3], "{sizes:?}");
    assert!(sizes[3] < 1 << 20, "{sizes:?}");
    assert!(engine.log().len() <= gputop_core::monitor::alerts::LOG_LENGTH);
}

/// A one-shot's snapshot goes through the same engine: a mean is taken as the one reading
/// and says so, a `for` duration keeps its alert pending and says why, a rule that needs a
/// span of readings has no data, and a reading under the threshold raises nothing.
#[test]
fn a_one_shot_is_judged_by_the_same_engine_and_says_what_it_could_not_see() {
    let temp = Metric::Device(DeviceMetric::Temperature);
    let named = |name: &str, rule: Rule| Rule {
        name: name.into(),
        ..rule
    };
    let rules = vec![
        named("hot_mean", rule(temp, Function::Mean, 80.0, 75.0, 30.0, 0.0)),
        named("hot_for", rule(temp, Function::Last, 80.0, 75.0, 30.0, 60.0)),
        named("hot_range", rule(temp, Function::Range, 1.0, 0.0, 30.0, 0.0)),
        named("very_hot", rule(temp, Function::Last, 95.0, 90.0, 30.0, 0.0)),
    ];
    let settings = HistorySettings {
        retention_time: 86_400,
        sample_interval: 10,
    };
    let mut history = History::new(&settings, 1.0);
    history.record(&machine(1, Some(84), 50, 10.0, None));
    let mut engine = Engine::new(rules);
    engine.evaluate_once(&history);
    let active = engine.active();
    let names: Vec<&str> = active.iter().map(|a| a.rule.as_str()).collect();
    assert_eq!(names, ["hot_mean", "hot_for"], "{active:#?}");
    assert_eq!(active[0].phase, Phase::Firing);
    assert_eq!(active[0].value, Some(84.0));
    assert!(
        active[0].summary.ends_with("; one reading, not a 30 s mean"),
        "{}",
        active[0].summary
    );
    assert_eq!(active[1].phase, Phase::Pending);
    assert!(
        active[1]
            .summary
            .ends_with("; pending: one snapshot cannot show the 1 min `for` duration"),
        "{}",
        active[1].summary
    );
}

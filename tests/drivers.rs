//! gputop on the drivers public reports describe (the simulator's driver profiles): each
//! driver's library exports what that driver has and answers as it was seen to, and
//! `gputop --once --json` must show the scenario's exact values through it.

mod common;

use common::{Sleepers, driver_dir, gputop_on_driver, json};
use serde_json::Value;

const GIB: u64 = 1 << 30;

/// One GPU with three real processes of 1, 2 and 3 GiB at 30, 40 and 50 %SM, on `system`.
fn three_processes(system: &str, extra_sim: &str) -> String {
    let mut text = format!("[meta]\nversion = 1\n[system]\n{system}\n[sim]\n{extra_sim}\n");
    text.push_str(
        "[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\nmemory_total = \"80 GiB\"\n\
         [gpu.dynamic]\nutilization_gpu = 60\n",
    );
    for (i, sm) in [30, 40, 50].iter().enumerate() {
        text.push_str(&format!(
            "[[gpu.process]]\npid_env = \"GPUTOP_SIM_PIDS\"\npid_index = {i}\n\
             used_memory = \"{} GiB\"\nsm = {sm}\n",
            i + 1
        ));
    }
    text
}

/// `(pid, GPU memory, %SM)` of every process, in PID order.
fn processes(doc: &Value) -> Vec<(u64, u64, Option<u64>)> {
    let mut rows: Vec<_> = doc["processes"]
        .as_array()
        .expect("a process list")
        .iter()
        .map(|p| {
            (
                p["pid"].as_u64().unwrap(),
                p["gpu_memory_bytes"].as_u64().expect("GPU memory"),
                p["sm_percent"].as_u64(),
            )
        })
        .collect();
    rows.sort_unstable();
    rows
}

/// The three sleepers' PIDs with 1, 2 and 3 GiB and their %SM.
fn expected(sleepers: &Sleepers, sm: [u64; 3]) -> Vec<(u64, u64, Option<u64>)> {
    let mut rows: Vec<_> = sleepers
        .pids()
        .iter()
        .zip(1..)
        .zip(sm)
        .map(|((pid, gib), sm)| (u64::from(*pid), gib * GIB, Some(sm)))
        .collect();
    rows.sort_unstable();
    rows
}

fn once_on(scenario: &str, sleepers: &Sleepers, t_ms: u64) -> Value {
    let home = tempfile::tempdir().unwrap();
    let driver = driver_dir(scenario);
    let mut command = gputop_on_driver(home.path(), driver.path(), t_ms);
    command.env("GPUTOP_SIM_PIDS", sleepers.env());
    json(command)
}

/// gputop's one-shot on `system` and `sim` shows the three processes exactly.
fn shows_every_process_exactly(system: &str, sim: &str) {
    let sleepers = Sleepers::spawn(3);
    let doc = once_on(&three_processes(system, sim), &sleepers, 5_000);
    assert_eq!(processes(&doc), expected(&sleepers, [30, 40, 50]));
}

#[test]
fn a_535_54_driver_with_32_byte_v3_entries_shows_every_process_exactly() {
    shows_every_process_exactly("driver_version = \"535.54.03\"", "");
}

#[test]
fn the_32_byte_layout_is_also_found_by_the_symbols_a_driver_exports() {
    // A version gputop cannot place: the layout follows the exports, as nvitop decides it.
    let system = "driver_version = \"R535 custom build\"\n\
                  missing_symbols = [\"nvmlDeviceGetRunningProcessDetailList\"]\n\
                  process_v3_entry_bytes = 32";
    shows_every_process_exactly(system, "");
}

#[test]
fn a_fixed_535_driver_is_read_with_24_byte_entries() {
    shows_every_process_exactly("driver_version = \"535.104.05\"", "");
}

#[test]
fn a_pre_r510_driver_shows_memory_through_the_v1_call() {
    let sleepers = Sleepers::spawn(3);
    let doc = once_on(
        &three_processes("driver_version = \"470.82.01\"", ""),
        &sleepers,
        5_000,
    );
    let gpu = &doc["devices"][0];
    assert_eq!(gpu["memory_total_bytes"].as_u64(), Some(80 * GIB));
    assert_eq!(
        gpu["memory_used_bytes"].as_u64(),
        Some(6 * GIB),
        "the three processes"
    );
    assert_eq!(processes(&doc), expected(&sleepers, [30, 40, 50]));
}

#[test]
fn a_pre_450_66_driver_lists_processes_through_the_v1_calls() {
    let sleepers = Sleepers::spawn(3);
    let doc = once_on(
        &three_processes("driver_version = \"450.36.06\"", ""),
        &sleepers,
        5_000,
    );
    assert_eq!(processes(&doc), expected(&sleepers, [30, 40, 50]));
    assert_eq!(doc["devices"][0]["memory_used_bytes"].as_u64(), Some(6 * GIB));
}

#[test]
fn dirty_process_utilization_answers_leave_each_process_its_own_sm() {
    shows_every_process_exactly("driver_version = \"535.104.05\"", "dirty_process_samples = true");
}

#[test]
fn dirty_answers_over_many_refreshes_neither_skew_nor_stall_the_per_process_sm() {
    let scenario = three_processes("", "dirty_process_samples = true")
        .replace("pid_env = \"GPUTOP_SIM_PIDS\"\npid_index = 0", "pid = 501")
        .replace("pid_env = \"GPUTOP_SIM_PIDS\"\npid_index = 1", "pid = 502")
        .replace("pid_env = \"GPUTOP_SIM_PIDS\"\npid_index = 2", "pid = 503");
    let driver = driver_dir(&scenario.replace("[sim]\n", "[clock]\nmode = \"manual\"\n[sim]\n"));
    let lib = driver.path().join("libnvidia-ml.so.1");
    // SAFETY: loading our own simulator, the same instance gputop opens below.
    let control = unsafe { libloading::Library::new(&lib) }.unwrap();
    // SAFETY: the simulator exports this symbol with this signature.
    let set_time = unsafe { control.get::<unsafe extern "C" fn(u64)>(b"gputop_sim_set_time_ms") }.unwrap();
    let mut source =
        gputop_core::source::nvml::NvmlSource::open(Some(&lib)).expect("the simulator initialises");
    for second in 5..12 {
        // SAFETY: a plain function call into the simulator.
        unsafe { set_time(second * 1000) };
        let readout = source.read(std::time::Duration::from_secs(1));
        let mut sm: Vec<(u32, Option<u32>)> = readout
            .processes
            .iter()
            .map(|p| (p.pid, p.sm_percent.get()))
            .collect();
        sm.sort_unstable();
        assert_eq!(
            sm,
            [(501, Some(30)), (502, Some(40)), (503, Some(50))],
            "refresh at {second} s"
        );
    }
}

#[test]
fn an_idle_gpus_empty_sample_buffer_reads_as_its_current_utilization() {
    let sleepers = Sleepers::spawn(0);
    let scenario =
        "[meta]\nversion = 1\n[[gpu]]\n[gpu.dynamic]\nutilization_gpu = 0\nutilization_memory = 0\n";
    let doc = once_on(scenario, &sleepers, 5_000);
    let gpu = &doc["devices"][0];
    assert_eq!(gpu["utilization_gpu_percent"].as_u64(), Some(0));
    assert_eq!(gpu["utilization_gpu_mean_percent"].as_f64(), Some(0.0));
    assert_eq!(gpu["utilization_gpu_peak_percent"].as_f64(), Some(0.0));
    assert_eq!(gpu["utilization_memory_mean_percent"].as_f64(), Some(0.0));
}

#[test]
fn the_newest_sample_stays_the_reading_until_newer_ones_come_or_the_buffer_runs_dry() {
    // A sample a second; the GPU goes from 10 % to 90 % at 5.5 s.
    let scenario = "[meta]\nversion = 1\n[clock]\nmode = \"manual\"\n[sim]\nsamples_period_ms = 1000\n\
        [[gpu]]\n[gpu.dynamic]\nutilization_gpu = { keyframes = [[0, 10], [5.5, 90]], interp = \"step\" }\n";
    let driver = driver_dir(scenario);
    let lib = driver.path().join("libnvidia-ml.so.1");
    // SAFETY: loading our own simulator, the same instance gputop opens below.
    let control = unsafe { libloading::Library::new(&lib) }.unwrap();
    // SAFETY: the simulator exports these symbols with these signatures.
    let set_time = unsafe { control.get::<unsafe extern "C" fn(u64)>(b"gputop_sim_set_time_ms") }.unwrap();
    let calls = unsafe {
        control.get::<unsafe extern "C" fn(*const std::ffi::c_char) -> u64>(b"gputop_sim_call_count")
    }
    .unwrap();
    // SAFETY: a NUL-terminated symbol name.
    let direct_calls = || unsafe { calls(c"nvmlDeviceGetUtilizationRates".as_ptr()) };
    let mut source =
        gputop_core::source::nvml::NvmlSource::open(Some(&lib)).expect("the simulator initialises");
    let mut utilization = || {
        source.read(std::time::Duration::from_secs(1)).devices[0]
            .utilization_gpu_percent
            .get()
    };
    // SAFETY: a plain function call into the simulator.
    unsafe { set_time(5_900) };
    let before = direct_calls();
    assert_eq!(utilization(), Some(10), "the newest sample, taken at 5 s");
    assert_eq!(
        (utilization(), direct_calls() - before),
        (Some(10), 0),
        "no newer sample: the newest is still the reading, without asking the driver again"
    );
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    assert_eq!(
        (utilization(), direct_calls() - before),
        (Some(10), 2),
        "no sample for over a second: the buffer ran dry, the driver is asked directly (for \
         the GPU's and the memory's utilization)"
    );
    // SAFETY: as above.
    unsafe { set_time(7_200) };
    assert_eq!(utilization(), Some(90), "the samples of 6 and 7 s");
}

/// 200 ms at 100 % every 2 s over 5 %: the true mean is 14.5 %.
const BURSTY: &str = "[meta]\nversion = 1\n[sim]\nsamples_period_ms = 20\n[[gpu]]\n[gpu.dynamic]\n\
    utilization_gpu = { keyframes = [[0, 100], [0.2, 5]], interp = \"step\", repeat = 2 }\n";

#[test]
fn a_one_shot_on_a_bursty_gpu_reports_the_true_mean_from_the_drivers_buffer() {
    let sleepers = Sleepers::spawn(0);
    // Fresh starts at several phases of the burst cycle: the driver's buffer already holds
    // the last seconds, so the mean is the truth wherever the start falls.
    for t_ms in [0, 150, 700, 1_300, 1_990] {
        let doc = once_on(BURSTY, &sleepers, t_ms);
        let gpu = &doc["devices"][0];
        let mean = gpu["utilization_gpu_mean_percent"].as_f64().expect("a mean");
        assert!((mean - 14.5).abs() <= 3.0, "at {t_ms} ms: mean {mean}");
        assert_eq!(
            gpu["utilization_gpu_peak_percent"].as_f64(),
            Some(100.0),
            "at {t_ms} ms"
        );
    }
}

#[test]
fn where_the_legacy_per_process_call_reads_zero_the_newer_call_gives_the_sm() {
    shows_every_process_exactly(
        "driver_version = \"580.159.03\"",
        "legacy_process_utilization_zero = true",
    );
}

#[test]
fn means_and_peaks_come_from_samples_on_either_driver_clock() {
    let sleepers = Sleepers::spawn(0);
    for clock in ["boot", "epoch"] {
        let scenario = BURSTY.replace("[sim]\n", &format!("[sim]\nsample_clock = \"{clock}\"\n"));
        // At 700 ms the GPU reads 5 %: a window that found no samples would say 5.
        let doc = once_on(&scenario, &sleepers, 700);
        let gpu = &doc["devices"][0];
        assert_eq!(gpu["utilization_gpu_percent"].as_u64(), Some(5), "{clock}");
        let mean = gpu["utilization_gpu_mean_percent"].as_f64().expect("a mean");
        assert!((mean - 14.5).abs() <= 3.0, "{clock} clock: mean {mean}");
        assert_eq!(
            gpu["utilization_gpu_peak_percent"].as_f64(),
            Some(100.0),
            "{clock}"
        );
    }
}

#[test]
fn unknown_from_one_call_fails_that_field_and_from_the_handle_marks_the_gpu_lost() {
    let sleepers = Sleepers::spawn(0);
    let scenario = "[meta]\nversion = 1\n\
        [[gpu]]\n[gpu.dynamic]\ntemperature = 50\n[[gpu.fault]]\nfield = \"memory\"\nerror = \"UNKNOWN\"\n\
        [[gpu]]\n[[gpu.fault]]\nfield = \"*\"\nerror = \"UNKNOWN\"\n";
    let doc = once_on(scenario, &sleepers, 5_000);
    let wsl = &doc["devices"][0];
    assert_eq!(wsl["status"], "ok");
    assert_eq!(wsl["memory_used_bytes"], Value::Null);
    assert_eq!(wsl["temperature_celsius"].as_u64(), Some(50));
    let fallen = &doc["devices"][1];
    assert_eq!(fallen["status"], "lost", "{fallen}");
}

#[test]
fn a_mig_gpus_process_list_refused_to_a_user_says_so_instead_of_an_empty_table() {
    let sleepers = Sleepers::spawn(2);
    let scenario = "[meta]\nversion = 1\n[sim]\ncaller = \"user\"\n\
        [[gpu]]\nmig = \"enabled\"\n[[gpu.mig_device]]\ngpu_instance = 1\ncompute_instance = 0\n\
        profile = \"3g.40gb\"\nmemory = \"40 GiB\"\n[[gpu.process]]\npid_env = \"GPUTOP_SIM_PIDS\"\n\
        pid_index = 0\nused_memory = \"1 GiB\"\nmig_device = 0\n\
        [[gpu]]\n[[gpu.process]]\npid_env = \"GPUTOP_SIM_PIDS\"\npid_index = 1\nused_memory = \"2 GiB\"\n";
    let doc = once_on(scenario, &sleepers, 5_000);
    assert_eq!(
        doc["devices"][0]["process_list_error"],
        "process list needs root on MIG GPUs"
    );
    assert_eq!(doc["devices"][1]["process_list_error"], Value::Null);
    let pids: Vec<u64> = doc["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(
        pids,
        [u64::from(sleepers.pids()[1])],
        "the other GPU's process is listed"
    );

    let home = tempfile::tempdir().unwrap();
    let driver = driver_dir(scenario);
    let output = gputop_on_driver(home.path(), driver.path(), 5_000)
        .env("GPUTOP_SIM_PIDS", sleepers.env())
        .arg("--once")
        .output()
        .unwrap();
    let text = common::stdout(&output);
    assert!(
        text.contains("GPU 0: process list needs root on MIG GPUs"),
        "{text}"
    );
}

#[test]
fn a_one_shot_on_a_driver_whose_calls_hang_ends_with_an_error_instead_of_hanging() {
    // Process-list calls that take ten minutes, as on a GPU hung in the driver (Xid 45).
    let scenario = "[meta]\nversion = 1\n[sim]\nlatency_us = { processes = 600000000 }\n[[gpu]]\n";
    let home = tempfile::tempdir().unwrap();
    let driver = driver_dir(scenario);
    let mut child = gputop_on_driver(home.path(), driver.path(), 5_000)
        .args(["--once", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            panic!("gputop --once still waits on the hung driver after 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let output = child.wait_with_output().unwrap();
    assert_eq!(status.code(), Some(1));
    assert!(output.stdout.is_empty(), "no partial report");
    let stderr = common::stderr(&output);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("NVML did not answer within 15 s"), "{stderr}");
}

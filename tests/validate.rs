//! `gputop validate` against the simulator's `nvidia-smi`, which reads the same simulated
//! machine through the NVML C ABI with its own calls.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{Sleepers, gputop_on, scenario, sim_lib_dir, sim_nvidia_smi, stderr, stdout};
use serde_json::Value;

fn validate(home: &Path, scenario_path: &Path, pids: &str, lib_dir: &Path, extra: &[&str]) -> Output {
    let mut command: Command = gputop_on(home, scenario_path, 100_000);
    command
        .env("GPUTOP_SIM_PIDS", pids)
        .env("LD_LIBRARY_PATH", lib_dir)
        .arg("validate")
        .arg("--nvidia-smi")
        .arg(sim_nvidia_smi())
        .args(extra);
    command.output().expect("run gputop validate")
}

fn metric<'a>(doc: &'a Value, gpu: usize, name: &str) -> &'a Value {
    doc["gpus"][gpu]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == name)
        .unwrap_or_else(|| panic!("no {name} for GPU {gpu}"))
}

#[test]
fn agreeing_tools_exit_0_with_every_reading_within_tolerance() {
    let home = tempfile::tempdir().unwrap();
    let lib = sim_lib_dir();
    let sleepers = Sleepers::spawn(3);
    let path = scenario("two-gpus-training");
    let output = validate(
        home.path(),
        &path,
        &sleepers.env(),
        lib.path(),
        &["--json", "--duration", "0"],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(doc["agree"], true);
    assert_eq!(doc["rounds"], 1);
    assert_eq!(doc["gpus"].as_array().unwrap().len(), 2);
    let used = metric(&doc, 0, "memory.used");
    assert_eq!(
        (used["gputop"].as_f64(), used["nvidia_smi"].as_f64()),
        (Some(24876.0), Some(24876.0))
    );
    assert_eq!(metric(&doc, 1, "power.draw")["nvidia_smi"], 201.5);
    assert_eq!(metric(&doc, 1, "pstate")["gputop"], 2.0);
    let processes = doc["processes"].as_array().unwrap();
    assert_eq!(
        processes.len(),
        2,
        "the compute processes; nvidia-smi does not list graphics ones"
    );
    assert!(processes.iter().all(|p| p["within_tolerance"] == true));

    // Two rounds a second apart, as text.
    let output = validate(
        home.path(),
        &path,
        &sleepers.env(),
        lib.path(),
        &["--duration", "1"],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.starts_with("gputop validate: 2 round(s)"), "{text}");
    assert!(text.contains("28 of 28 readings agree."), "{text}");
}

#[test]
fn memory_counted_with_reserved_is_found_and_explained() {
    let home = tempfile::tempdir().unwrap();
    let lib = sim_lib_dir();
    let sleepers = Sleepers::spawn(3);
    let text = std::fs::read_to_string(scenario("two-gpus-training")).unwrap();
    let path = home.path().join("reserved.toml");
    std::fs::write(&path, format!("[smi]\nmemory_includes_reserved = true\n{text}")).unwrap();
    let output = validate(
        home.path(),
        &path,
        &sleepers.env(),
        lib.path(),
        &["--json", "--tolerance", "1"],
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("differ from nvidia-smi beyond the tolerance"),
        "{}",
        stderr(&output)
    );
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(doc["agree"], false);
    for gpu in [0, 1] {
        let used = metric(&doc, gpu, "memory.used");
        assert_eq!(used["within_tolerance"], false, "{used}");
        assert_eq!(used["difference"], -512.0, "{used}");
        assert!(
            used["likely_cause"]
                .as_str()
                .unwrap()
                .contains("512 MiB the driver reserves as used"),
            "{used}"
        );
        assert_eq!(metric(&doc, gpu, "utilization.gpu")["within_tolerance"], true);
    }
    let output = validate(
        home.path(),
        &path,
        &sleepers.env(),
        lib.path(),
        &["--duration", "0"],
    );
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    let line = text
        .lines()
        .find(|l| l.starts_with("memory.used") && l.contains("324 MiB"))
        .unwrap();
    assert!(line.contains("NO") && line.contains("836 MiB"), "{line}");
    assert!(
        text.contains("1 differ beyond the tolerance") || text.contains("differ beyond"),
        "{text}"
    );
}

#[test]
fn missing_or_failing_nvidia_smi_is_exit_9() {
    let home = tempfile::tempdir().unwrap();
    let lib = sim_lib_dir();
    let path = scenario("idle-gpu");
    let run = |smi: &str| {
        gputop_on(home.path(), &path, 1_000)
            .env("LD_LIBRARY_PATH", lib.path())
            .args(["validate", "--duration", "0", "--nvidia-smi", smi])
            .output()
            .unwrap()
    };
    let missing = run("/nonexistent/nvidia-smi");
    assert_eq!(missing.status.code(), Some(9));
    assert!(
        stderr(&missing).contains("nvidia-smi not found (/nonexistent/nvidia-smi)"),
        "{}",
        stderr(&missing)
    );
    let failing = run("false");
    assert_eq!(failing.status.code(), Some(9));
    assert!(
        stderr(&failing).contains("false failed with status 1"),
        "{}",
        stderr(&failing)
    );
    let garbage = run("echo");
    assert_eq!(garbage.status.code(), Some(9));
    assert!(
        stderr(&garbage).contains("fields where 15 were asked"),
        "{}",
        stderr(&garbage)
    );
    for output in [&missing, &failing, &garbage] {
        assert!(stdout(output).is_empty() && !stderr(output).contains("panicked"));
    }
}

#[test]
fn a_lost_gpu_reads_as_unavailable_on_both_sides() {
    let home = tempfile::tempdir().unwrap();
    let lib = sim_lib_dir();
    let output = gputop_on(home.path(), &scenario("faults-gpu-lost"), 40_000)
        .env("LD_LIBRARY_PATH", lib.path())
        .arg("validate")
        .arg("--nvidia-smi")
        .arg(sim_nvidia_smi())
        .args(["--duration", "0", "--json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
    let lost = metric(&doc, 1, "temperature.gpu");
    assert!(lost["gputop"].is_null() && lost["nvidia_smi"].is_null(), "{lost}");
    assert_eq!(metric(&doc, 2, "utilization.gpu")["gputop"], 33.0);
    assert_eq!(metric(&doc, 2, "utilization.gpu")["nvidia_smi"], 33.0);
}

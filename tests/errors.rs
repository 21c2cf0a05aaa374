//! Every way gputop can fail to start: one actionable line on stderr, nothing on stdout,
//! the documented exit code, and never a panic.

mod common;

use std::path::Path;
use std::process::Output;

use common::{gputop, gputop_on, scenario, sim_lib, stderr, stdout};

/// Checks a failure: exit code, a single `gputop:` line (after any from the simulator), no panic.
fn assert_failure(output: &Output, code: i32, needle: &str) -> String {
    let err = stderr(output);
    assert_eq!(output.status.code(), Some(code), "stderr: {err}");
    assert!(stdout(output).is_empty(), "nothing on stdout: {}", stdout(output));
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "no panic: {err}"
    );
    let ours: Vec<&str> = err.lines().filter(|l| l.starts_with("gputop:")).collect();
    assert_eq!(ours.len(), 1, "exactly one gputop line: {err}");
    assert!(ours[0].contains(needle), "{needle:?} not in {err}");
    err
}

fn scenario_file(dir: &Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("scenario.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn missing_library_names_the_way_out() {
    let home = tempfile::tempdir().unwrap();
    let output = gputop(home.path())
        .args(["--once", "--nvml-lib", "/nonexistent/libnvidia-ml.so.1"])
        .output()
        .unwrap();
    let err = assert_failure(&output, 4, "cannot load the NVIDIA management library");
    assert!(
        err.contains("--nvml-lib") && err.contains("gputop --demo"),
        "{err}"
    );
}

#[test]
fn a_library_without_nvml_symbols_is_reported_as_unloadable() {
    let home = tempfile::tempdir().unwrap();
    // libc is a real shared library without nvmlInit_v2.
    let libc = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/lib64/libc.so.6",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists())
    .expect("libc.so.6");
    let output = gputop(home.path())
        .args(["--once", "--nvml-lib", libc])
        .output()
        .unwrap();
    assert_failure(&output, 4, "nvmlInit_v2");
}

#[test]
fn no_driver_is_exit_5_and_the_simulator_says_why_on_one_line() {
    let home = tempfile::tempdir().unwrap();
    let output = gputop(home.path())
        .arg("--once")
        .arg("--nvml-lib")
        .arg(sim_lib())
        .output()
        .unwrap();
    let err = assert_failure(&output, 5, "the NVIDIA driver is not loaded");
    let sim: Vec<&str> = err.lines().filter(|l| l.starts_with("nvml-sim:")).collect();
    assert_eq!(sim.len(), 1, "{err}");
    assert!(sim[0].contains("GPUTOP_SIM_SCENARIO"), "{err}");
    assert_eq!(err.lines().count(), 2, "{err}");
}

#[test]
fn an_invalid_scenario_fails_init_with_its_location() {
    let home = tempfile::tempdir().unwrap();
    let path = scenario_file(home.path(), "[meta]\nversion = 1\n\n[[gpu]]\nnmae = \"typo\"\n");
    let output = gputop_on(home.path(), &path, 0).arg("--once").output().unwrap();
    let err = assert_failure(&output, 5, "driver is not loaded");
    assert!(
        err.contains(&format!("{}:5:1", path.display())) && err.contains("nmae"),
        "{err}"
    );
}

#[test]
fn driver_library_mismatch_is_exit_6() {
    let home = tempfile::tempdir().unwrap();
    let path = scenario_file(
        home.path(),
        "[meta]\nversion = 1\n[system]\ninit_error = \"LIB_RM_VERSION_MISMATCH\"\n",
    );
    let output = gputop_on(home.path(), &path, 0).arg("--once").output().unwrap();
    let err = assert_failure(&output, 6, "different versions");
    assert!(err.contains("reboot"), "{err}");
}

#[test]
fn no_permission_is_exit_7() {
    let home = tempfile::tempdir().unwrap();
    let path = scenario_file(
        home.path(),
        "[meta]\nversion = 1\n[system]\ninit_error = \"NO_PERMISSION\"\n",
    );
    let output = gputop_on(home.path(), &path, 0).arg("--json").output().unwrap();
    assert_failure(&output, 7, "/dev/nvidia");
}

#[test]
fn no_gpu_is_exit_8() {
    let home = tempfile::tempdir().unwrap();
    let path = scenario_file(home.path(), "[meta]\nversion = 1\n");
    let output = gputop_on(home.path(), &path, 0).arg("--list").output().unwrap();
    assert_failure(&output, 8, "found no NVIDIA GPU");
}

#[test]
fn usage_errors_are_exit_2() {
    let home = tempfile::tempdir().unwrap();
    for args in [
        &["--interval", "fast"][..],
        &["--bogus"],
        &["--demo", "--nvml-lib", "/x"],
        &["--only", "gpu0"],
        &["--only", "0", "--only-visible"],
    ] {
        let output = gputop(home.path()).args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", stderr(&output));
        assert!(stdout(&output).is_empty());
    }
}

#[test]
fn every_bad_flag_value_is_one_line_naming_the_flag_the_value_and_what_is_allowed() {
    let home = tempfile::tempdir().unwrap();
    // (arguments, the flag the line must name, the value it must quote, what it must allow)
    let cases: &[(&[&str], &str, &str, &str)] = &[
        (&["--interval", "-1"], "--interval", "-1", "0.1 to 3600"),
        (&["--interval", "0"], "--interval", "0", "0.1 to 3600"),
        (&["--interval", "abc"], "--interval", "abc", "0.1 to 3600"),
        (
            &["--interval", "1e9", "--demo", "--once"],
            "--interval",
            "1e9",
            "0.1 to 3600",
        ),
        (&["--pid", "abc"], "--pid", "abc", "process ID"),
        (&["--pid", "-3"], "--pid", "-3", "process ID"),
        (&["--only", "gpu0"], "--only", "gpu0", "GPU index"),
        (
            &["record", "x.rec", "--max-size", "1Q"],
            "--max-size",
            "1Q",
            "K, M or G",
        ),
        (
            &["record", "x.rec", "--duration", "-5"],
            "--duration",
            "-5",
            "above 0",
        ),
        (
            &["replay", "x.rec", "--speed", "100"],
            "--speed",
            "100",
            "0.125 to 64",
        ),
        (
            &["replay", "x.rec", "--once", "--at", "-1"],
            "--at",
            "-1",
            "0 or more",
        ),
        (
            &["capture", "x.toml", "--duration", "0"],
            "--duration",
            "0",
            "above 0",
        ),
        (
            &["rules", "--scrape-interval", "-15"],
            "--scrape-interval",
            "-15",
            "above 0",
        ),
        (
            &["validate", "--tolerance", "-1"],
            "--tolerance",
            "-1",
            "0 to 86400",
        ),
        (
            &["export", "--web-listen-address", "abc"],
            "--web-listen-address",
            "abc",
            "HOST:PORT",
        ),
        (&["--json", "--list"], "--json", "--list", "cannot be used with"),
        (&["--bogus"], "--bogus", "--bogus", "unexpected argument"),
    ];
    for (args, flag, value, allowed) in cases {
        let output = gputop(home.path()).args(*args).output().unwrap();
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {err}");
        assert!(stdout(&output).is_empty(), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line, not:\n{err}");
        assert!(err.starts_with("gputop: "), "{args:?}: {err}");
        for needle in [flag, value, allowed] {
            assert!(err.contains(needle), "{args:?}: {needle:?} missing from: {err}");
        }
    }
    // Help and the version still print in full, to stdout, with success.
    let help = gputop(home.path()).arg("--help").output().unwrap();
    assert!(help.status.success());
    assert!(stdout(&help).contains("Exit codes:"));
}

#[test]
fn broken_pipe_is_not_an_error() {
    let home = tempfile::tempdir().unwrap();
    let mut child = gputop(home.path())
        .args(["--demo", "--once", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stderr(&output).is_empty(), "{}", stderr(&output));
}

#[test]
fn the_simulator_never_writes_to_stdout_even_when_tracing() {
    let home = tempfile::tempdir().unwrap();
    let trace = home.path().join("trace.jsonl");
    let output = gputop_on(home.path(), &scenario("idle-gpu"), 1_000)
        .env("GPUTOP_SIM_TRACE", &trace)
        .args(["--once", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    serde_json::from_slice::<serde_json::Value>(&output.stdout).expect("stdout is exactly the JSON document");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each trace line is JSON"))
        .collect();
    assert!(lines.iter().any(|l| l["sym"] == "nvmlInit_v2" && l["ret"] == 0));
    assert!(
        lines
            .iter()
            .any(|l| l["sym"] == "nvmlDeviceGetMemoryInfo_v2" && l["gpu"] == 0)
    );
    assert!(lines.iter().all(|l| l["t_ms"].is_u64()));
}

#[test]
fn version_and_help_document_themselves() {
    let home = tempfile::tempdir().unwrap();
    let version = gputop(home.path()).arg("-V").output().unwrap();
    assert!(version.status.success());
    // Then the commit and its date when built from git (tests/manual.rs checks those).
    assert!(
        stdout(&version).starts_with(&format!("gputop {}", env!("CARGO_PKG_VERSION"))),
        "{}",
        stdout(&version)
    );
    let help = stdout(&gputop(home.path()).arg("--help").output().unwrap());
    for needle in [
        "--once",
        "--json",
        "--nvml-lib",
        "--demo",
        "Exit codes:",
        "8  no NVIDIA GPU found",
    ] {
        assert!(help.contains(needle), "{needle:?} missing from --help");
    }
}

/// A copy of the gputop binary in a directory anyone may enter, with `prepare` run on it.
fn binary_copy(dir: &Path, prepare: &[&str]) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = dir.join("gputop");
    std::fs::copy(env!("CARGO_BIN_EXE_gputop"), &copy).unwrap();
    if !prepare.is_empty() {
        let status = std::process::Command::new(prepare[0])
            .args(&prepare[1..])
            .arg(&copy)
            .status()
            .unwrap();
        assert!(status.success(), "{prepare:?}");
    }
    copy
}

/// `binary` run as nobody (setpriv), on the demo.
fn as_nobody(binary: &Path) -> Output {
    common::require_root();
    std::process::Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(binary)
        .args(["--demo", "--once"])
        .env("HOME", "/nonexistent")
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap()
}

#[test]
#[ignore = "needs root: makes a setuid copy and runs it as nobody"]
fn a_setuid_copy_refuses_to_run_for_another_user() {
    let dir = tempfile::tempdir().unwrap();
    let copy = binary_copy(dir.path(), &["chmod", "4755"]);
    assert_failure(&as_nobody(&copy), 1, "refusing to run set-user-ID");
}

#[test]
#[ignore = "needs root: gives a copy cap_kill and runs it as nobody"]
fn a_copy_with_cap_kill_refuses_to_run_for_a_user_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let copy = binary_copy(dir.path(), &["setcap", "cap_kill+ep"]);
    assert_failure(&as_nobody(&copy), 1, "refusing to run with capabilities");
    // Without the capability it runs.
    let plain = tempfile::tempdir().unwrap();
    let copy = binary_copy(plain.path(), &[]);
    let output = as_nobody(&copy);
    assert!(output.status.success(), "{}", stderr(&output));
}

//! Processes as the host sees them: real owners and command lines, a PID that vanished
//! between NVML and /proc, and hostile command lines that must never reach the terminal raw.

mod common;

use std::process::{Command, Stdio};

use common::{Sleepers, dead_pid, gputop_on, json, stderr, stdout};

/// `--once --json` on `scenario` with `pids` as GPUTOP_SIM_PIDS.
fn json_with_pids(home: &std::path::Path, scenario: &std::path::Path, pids: &str) -> serde_json::Value {
    let mut command = gputop_on(home, scenario, 1_000);
    command.env("GPUTOP_SIM_PIDS", pids);
    json(command)
}

fn one_process_scenario(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("one.toml");
    std::fs::write(
        &path,
        "[meta]\nversion = 1\n[[gpu]]\nname = \"Sim\"\n[[gpu.process]]\npid_env = \"GPUTOP_SIM_PIDS\"\nused_memory = \"1 GiB\"\nsm = 9\n",
    )
    .unwrap();
    path
}

#[test]
fn a_vanished_process_keeps_its_gpu_figures_and_says_it_is_gone() {
    let home = tempfile::tempdir().unwrap();
    let path = one_process_scenario(home.path());
    let pid = dead_pid();
    let mut command = gputop_on(home.path(), &path, 1_000);
    command.env("GPUTOP_SIM_PIDS", pid.to_string());
    let doc = json(command);
    let process = &doc["processes"][0];
    assert_eq!(process["pid"], pid);
    assert_eq!(process["gpu_memory_bytes"], 1u64 << 30);
    assert_eq!(process["sm_percent"], 9);
    for key in [
        "user",
        "command",
        "cpu_percent",
        "host_memory_bytes",
        "start_time_unix_seconds",
        "running_seconds",
    ] {
        assert!(
            process[key].is_null(),
            "{key} is unknown for a vanished process: {process}"
        );
    }
    let output = gputop_on(home.path(), &path, 1_000)
        .env("GPUTOP_SIM_PIDS", pid.to_string())
        .arg("--once")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let row = text.lines().find(|l| l.contains(&pid.to_string())).unwrap();
    assert!(
        row.contains("(no such process)") && row.contains("1.0GiB"),
        "{row}"
    );
}

#[test]
fn escape_sequences_in_command_lines_are_shown_as_text() {
    let home = tempfile::tempdir().unwrap();
    let path = one_process_scenario(home.path());
    // `sh -c 'read x' NAME` waits on its stdin; NAME ($0) lands in /proc/PID/cmdline.
    let hostile = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred";
    let mut child = Command::new("sh")
        .args(["-c", "read x", hostile])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let output = gputop_on(home.path(), &path, 1_000)
        .env("GPUTOP_SIM_PIDS", &pid)
        .arg("--once")
        .output()
        .unwrap();
    let doc = json_with_pids(home.path(), &path, &pid);
    let _ = child.kill();
    let _ = child.wait();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        !output.stdout.contains(&0x1b) && !output.stdout.contains(&0x07),
        "no raw control bytes reach the terminal"
    );
    let text = stdout(&output);
    assert!(
        text.contains("\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\u{1b}[31mred"),
        "{text}"
    );
    // JSON keeps the exact command; serde escapes the control characters.
    assert_eq!(doc["processes"][0]["command"], format!("sh -c read x {hostile}"));
}

#[test]
fn host_facts_of_a_live_process_are_real() {
    let home = tempfile::tempdir().unwrap();
    let path = one_process_scenario(home.path());
    let sleeper = Sleepers::spawn(1);
    let pid = sleeper.pids()[0];
    let doc = json_with_pids(home.path(), &path, &sleeper.env());
    drop(sleeper);
    let process = &doc["processes"][0];
    assert_eq!(process["pid"], pid);
    let me = Command::new("id").arg("-un").output().unwrap();
    assert_eq!(process["user"], String::from_utf8_lossy(&me.stdout).trim());
    assert_eq!(process["command"], "sleep 600");
    assert!(process["host_memory_bytes"].as_u64().unwrap() > 0);
    let cpu = process["cpu_percent"].as_f64().unwrap();
    assert!((0.0..5.0).contains(&cpu), "an idle sleep uses no CPU: {cpu}");
    let started = process["start_time_unix_seconds"].as_u64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        started <= now && now - started < 120,
        "started just now: {started} vs {now}"
    );
}

#[test]
fn a_process_on_two_gpus_has_a_row_on_each_with_its_host_facts() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join("two.toml");
    std::fs::write(
        &path,
        "[meta]\nversion = 1\n\
         [[gpu]]\n[[gpu.process]]\npid_env = \"GPUTOP_SIM_PIDS\"\nused_memory = \"3 GiB\"\n\
         [[gpu]]\n[[gpu.process]]\npid_env = \"GPUTOP_SIM_PIDS\"\nused_memory = \"2 GiB\"\n",
    )
    .unwrap();
    let sleeper = Sleepers::spawn(1);
    let pid = sleeper.pids()[0];
    let doc = json_with_pids(home.path(), &path, &sleeper.env());
    drop(sleeper);
    let rows = doc["processes"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (row, gpu) in rows.iter().zip([0, 1]) {
        assert_eq!(
            (row["pid"].as_u64(), row["gpu_index"].as_u64()),
            (Some(u64::from(pid)), Some(gpu))
        );
        assert_eq!(row["command"], "sleep 600", "{row}");
    }
}

//! `gputop record` and `gputop replay` through the real binary on the simulator, with real
//! processes: a recorder killed with SIGKILL leaves a file that replays up to its last
//! frame; files are 0600, never overwritten, never followed through a symbolic link;
//! hostile text is sanitized; size limits rotate into FILE.1 and replay reads both.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Sleepers, gputop, scenario, stderr, stdout};

fn recorder(home: &Path, file: &Path, pids: &str, extra: &[&str]) -> Command {
    let mut command = gputop(home);
    command
        .arg("--nvml-lib")
        .arg(common::sim_lib())
        .env("GPUTOP_SIM_SCENARIO", scenario("two-gpus-training"))
        .env("GPUTOP_SIM_PIDS", pids)
        .arg("record")
        .arg(file)
        .args(extra);
    if !extra.contains(&"--interval") {
        command.args(["--interval", "0.1"]);
    }
    command
}

fn lines(file: &Path) -> usize {
    std::fs::read_to_string(file).map_or(0, |t| t.matches('\n').count())
}

fn replay(home: &Path, file: &Path, args: &[&str]) -> std::process::Output {
    gputop(home).arg("replay").arg(file).args(args).output().unwrap()
}

/// A process whose command line carries escape sequences and a bidi override.
fn hostile() -> Child {
    Command::new("sh")
        .args(["-c", "read x", "evil\x1b]0;pwned\x07\x1b[2J\u{202e}txt"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_recorder_killed_with_sigkill_leaves_a_file_that_replays() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("gpus.rec");
    let sleepers = Sleepers::spawn(2);
    let mut evil = hostile();
    let pids = format!("{} {}", sleepers.env(), evil.id());
    let mut child = recorder(home.path(), &file, &pids, &[]).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while lines(&file) < 13 {
        assert!(
            Instant::now() < deadline,
            "the recorder wrote {} lines",
            lines(&file)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap(); // SIGKILL: no chance to clean up
    child.wait().unwrap();
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let bytes = std::fs::read(&file).unwrap();
    assert!(!bytes.contains(&0x1b), "no raw escape byte is recorded");
    assert!(
        String::from_utf8_lossy(&bytes).contains("\\\\u{1b}]0;pwned"),
        "the name is kept, escaped"
    );
    // A kill in the middle of a write leaves a torn last line; add one to be sure.
    let frames = lines(&file) - 1;
    let mut torn = bytes.clone();
    torn.extend_from_slice(b"{\"t\":1,\"d\":{\"devices\":{\"000000\":{\"temperat");
    std::fs::write(&file, torn).unwrap();

    let info = replay(home.path(), &file, &["--info"]);
    assert!(info.status.success(), "{}", stderr(&info));
    assert!(
        stdout(&info).contains(&format!("{frames} frames")) && stdout(&info).contains("1 damaged line"),
        "{}",
        stdout(&info)
    );
    for at in ["0", "0.5"] {
        let output = replay(home.path(), &file, &["--once", "--json", "--at", at]);
        assert!(output.status.success(), "{}", stderr(&output));
        let doc: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let devices = doc["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 2);
        assert_eq!(devices[0]["name"], "NVIDIA A100-SXM4-40GB");
        assert_eq!(devices[0]["memory_total_bytes"], 40u64 << 30);
        let mut seen: Vec<u64> = doc["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["pid"].as_u64().unwrap())
            .collect();
        seen.sort_unstable();
        let mut expected: Vec<u64> = pids.split(' ').map(|p| p.parse().unwrap()).collect();
        expected.sort_unstable();
        assert_eq!(seen, expected);
    }
    // The last whole frame replays too, and its text report shows the escaped name.
    let text = replay(home.path(), &file, &["--once"]);
    assert!(stdout(&text).contains("\\u{1b}]0;pwned"), "{}", stdout(&text));
    let _ = evil.kill();
    let _ = evil.wait();
}

#[test]
fn recordings_never_overwrite_or_follow_links() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(3);
    let existing = home.path().join("notes.txt");
    std::fs::write(&existing, "my notes").unwrap();
    let output = recorder(home.path(), &existing, &sleepers.env(), &["--duration", "1"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(stderr(&output).contains("already exists"), "{}", stderr(&output));
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "my notes");

    let link = home.path().join("planted.rec");
    std::os::unix::fs::symlink(&existing, &link).unwrap();
    let output = recorder(home.path(), &link, &sleepers.env(), &["--duration", "1"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!(
        std::fs::read_to_string(&existing).unwrap(),
        "my notes",
        "not written through the link"
    );

    let fresh = home.path().join("fresh.rec");
    std::fs::write(home.path().join("fresh.rec.1"), "older").unwrap();
    let output = recorder(home.path(), &fresh, &sleepers.env(), &["--duration", "1"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("would be replaced"),
        "{}",
        stderr(&output)
    );
    assert!(!fresh.exists());

    let garbage = home.path().join("garbage.rec");
    std::fs::write(&garbage, "hello\n").unwrap();
    let output = replay(home.path(), &garbage, &["--once"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("not a gputop recording"),
        "{}",
        stderr(&output)
    );
    assert_eq!(stderr(&output).lines().count(), 1);
}

#[test]
fn the_size_limit_rotates_and_replay_reads_both_segments() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(3);
    let file = home.path().join("rotating.rec");
    let older = home.path().join("rotating.rec.1");
    let output = recorder(
        home.path(),
        &file,
        &sleepers.env(),
        // Frames after the first hold only what changed: 40 s at 0.1 s fill more than 64K.
        &["--max-size", "64K", "--duration", "40"],
    )
    .output()
    .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let recorded: usize = stderr(&output)
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", stderr(&output)));
    assert!(older.exists(), "rotated into FILE.1 after {recorded} frames");
    let total = std::fs::metadata(&file).unwrap().len() + std::fs::metadata(&older).unwrap().len();
    assert!(total <= 64 * 1024 + 8 * 1024, "{total} bytes for a 64K limit");
    let kept = lines(&file) - 1 + lines(&older) - 1;
    assert!(kept < recorded, "old data made room: {kept} of {recorded}");
    let info = replay(home.path(), &file, &["--info"]);
    assert!(
        stdout(&info).contains(&format!("{kept} frames")) && stdout(&info).contains("0 damaged"),
        "{}",
        stdout(&info)
    );
}

#[test]
fn the_age_limit_rotates_too() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(3);
    let file = home.path().join("aging.rec");
    let output = recorder(
        home.path(),
        &file,
        &sleepers.env(),
        &["--max-age", "2", "--duration", "3.5"],
    )
    .output()
    .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    // Half the age limit per segment: after 3.5 s the file has rotated at least twice, and
    // FILE.1 holds only the segment before the current one.
    let older = home.path().join("aging.rec.1");
    assert!(older.exists(), "rotated by age");
    let kept = lines(&file) - 1 + lines(&older) - 1;
    let recorded: usize = stderr(&output)
        .split_whitespace()
        .nth(2)
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        kept < recorded,
        "the oldest second was dropped: {kept} of {recorded}"
    );
    let info = replay(home.path(), &file, &["--info"]);
    assert!(
        stdout(&info).contains(&format!("{kept} frames")),
        "{}",
        stdout(&info)
    );
}

/// A real recording of the two-GPU scenario, 0.1 s apart for `seconds`; its lines.
fn recorded(home: &Path, file: &Path, seconds: &str) -> Vec<Vec<u8>> {
    let sleepers = Sleepers::spawn(3);
    let output = recorder(home, file, &sleepers.env(), &["--duration", seconds])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let bytes = std::fs::read(file).unwrap();
    bytes
        .split_inclusive(|b| *b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

#[test]
fn a_damaged_byte_spoils_only_its_own_line_and_the_changes_built_on_it() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("damaged.rec");
    let mut lines = recorded(home.path(), &file, "2");
    let frames = lines.len() - 1;
    assert!(frames >= 10, "{frames} frames");
    // A torn write inside a multi-byte character: one byte that is not UTF-8.
    let at = lines[5].iter().position(|b| *b == b'"').unwrap() + 1;
    lines[5].insert(at, 0xE2);
    std::fs::write(&file, lines.concat()).unwrap();
    let info = replay(home.path(), &file, &["--info"]);
    assert!(info.status.success(), "{}", stderr(&info));
    let text = stdout(&info);
    // Frames 1 to 4 come before the damage; the changes after it, up to the next whole
    // frame, cannot be rebuilt and are counted with it.
    let kept: usize = text
        .split(": ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    let skipped: usize = text
        .split("; ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(kept + skipped, frames, "{text}");
    assert!(kept >= 4 && skipped >= 1, "{text}");
    assert!(text.contains("line 6"), "the first damaged line is named: {text}");
    let first = replay(home.path(), &file, &["--once", "--json", "--at", "0"]);
    assert!(first.status.success(), "{}", stderr(&first));
}

#[test]
fn frame_times_out_of_range_are_skipped_and_a_long_gap_plays_without_a_panic() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("gaps.rec");
    let lines = recorded(home.path(), &file, "1");
    let retimed = |line: &[u8], t: &str| -> Vec<u8> {
        let mut frame: serde_json::Value = serde_json::from_slice(line).unwrap();
        frame["t"] = serde_json::from_str(t).unwrap();
        let mut out = frame.to_string().into_bytes();
        out.push(b'\n');
        out
    };
    // Frames 1e20 s apart: the second is past the year 9999 and is skipped.
    let far = [lines[0].clone(), lines[1].clone(), retimed(&lines[1], "1e20")].concat();
    std::fs::write(&file, &far).unwrap();
    let info = replay(home.path(), &file, &["--info"]);
    assert!(info.status.success(), "{}", stderr(&info));
    assert!(
        stdout(&info).contains("1 frames") && stdout(&info).contains("not a time between 1970 and 9999"),
        "{}",
        stdout(&info)
    );
    // Two whole frames 2.5e11 s apart replay; nothing waits on the gap but the player.
    let gap = [
        lines[0].clone(),
        lines[1].clone(),
        retimed(&lines[1], "253402300000"),
    ]
    .concat();
    std::fs::write(&file, &gap).unwrap();
    let last = replay(home.path(), &file, &["--once", "--json"]);
    assert!(last.status.success(), "{}", stderr(&last));
    let info = replay(home.path(), &file, &["--info"]);
    assert!(stdout(&info).contains("2 frames"), "{}", stdout(&info));
}

#[test]
fn a_frame_out_of_bounds_is_refused_with_its_place() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("crafted.rec");
    let lines = recorded(home.path(), &file, "0.5");
    let mut frame: serde_json::Value = serde_json::from_slice(&lines[1]).unwrap();
    frame["k"]["devices"]["000000"]["index"] = serde_json::json!(4_294_967_295u64);
    let crafted = [lines[0].clone(), format!("{frame}\n").into_bytes()].concat();
    std::fs::write(&file, crafted).unwrap();
    let started = Instant::now();
    let output = replay(home.path(), &file, &["--once"]);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let err = stderr(&output);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no usable frames")
            && err.contains("line 2: devices[0].index: 4294967295 is not a GPU index"),
        "{err}"
    );
}

#[test]
fn the_size_limit_holds_for_frames_larger_than_it() {
    let home = tempfile::tempdir().unwrap();
    // 300 processes on one GPU: a whole frame is over 32 KiB, half of the smallest limit.
    let mut scenario = String::from("[meta]\nversion = 1\n[[gpu]]\nname = \"Crowded\"\n");
    for pid in 0..300 {
        scenario.push_str(&format!(
            "[[gpu.process]]\npid = {}\nused_memory = \"1 GiB\"\n",
            4_000_000 + pid
        ));
    }
    let crowded = home.path().join("crowded.toml");
    std::fs::write(&crowded, scenario).unwrap();
    let file = home.path().join("big-frames.rec");
    let output = gputop(home.path())
        .arg("--nvml-lib")
        .arg(common::sim_lib())
        .env("GPUTOP_SIM_SCENARIO", &crowded)
        .args(["record"])
        .arg(&file)
        .args(["--max-size", "64K", "--duration", "5", "--interval", "0.1"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("does not fit in half of --max-size"),
        "{}",
        stderr(&output)
    );
    let older = home.path().join("big-frames.rec.1");
    let total = std::fs::metadata(&file).unwrap().len() + std::fs::metadata(&older).map_or(0, |m| m.len());
    assert!(total <= 64 * 1024, "{total} bytes for a 64K limit");
}

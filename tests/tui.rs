//! The real binary in a pseudo-terminal, on the simulated NVML, with real processes: keys in,
//! the screen read back through a terminal emulator (vt100).

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{CommandBuilder, MasterPty, PtySize, native_pty_system};

/// A program running in a pseudo-terminal, with its screen parsed as a terminal would.
struct Pty {
    child: Box<dyn portable_pty::Child + Send + Sync>,
    master: Option<Box<dyn MasterPty + Send>>,
    writer: Box<dyn Write + Send>,
    parser: Arc<Mutex<vt100::Parser>>,
    raw: Arc<Mutex<Vec<u8>>>,
}

impl Pty {
    fn spawn(command: CommandBuilder, cols: u16, rows: u16) -> Self {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("open a pty");
        let child = pair.slave.spawn_command(command).expect("spawn in the pty");
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().unwrap();
        let writer = pair.master.take_writer().unwrap();
        let parser = Arc::new(Mutex::new(vt100::Parser::new(rows, cols, 0)));
        let raw = Arc::new(Mutex::new(Vec::new()));
        let (p, r) = (Arc::clone(&parser), Arc::clone(&raw));
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                p.lock().unwrap().process(&buf[..n]);
                r.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Self {
            child,
            master: Some(pair.master),
            writer,
            parser,
            raw,
        }
    }

    fn screen(&self) -> String {
        self.parser.lock().unwrap().screen().contents()
    }

    fn title(&self) -> String {
        self.parser.lock().unwrap().screen().title().to_string()
    }

    /// Waits until the screen satisfies `ready`; panics with the screen after `secs`.
    fn wait_until(&self, what: &str, secs: u64, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let screen = self.screen();
            if ready(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_for(&self, needle: &str) -> String {
        self.wait_until(needle, 15, |s| s.contains(needle))
    }

    fn keys(&mut self, keys: &str) {
        self.writer.write_all(keys.as_bytes()).unwrap();
        self.writer.flush().unwrap();
        // Let the program read this key alone: ESC followed closely by more reads as Alt-.
        std::thread::sleep(Duration::from_millis(150));
    }

    fn wait_exit(&mut self, secs: u64) -> Option<portable_pty::ExitStatus> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Scrolls a text screen down a line at a time until `needle` shows; panics at its end.
    fn scroll_to(&mut self, needle: &str) -> String {
        for _ in 0..80 {
            let screen = self.screen();
            if screen.contains(needle) {
                return screen;
            }
            self.writer.write_all(b"j").unwrap();
            self.writer.flush().unwrap();
            std::thread::sleep(Duration::from_millis(40));
        }
        panic!("{needle:?} never showed: {}", self.screen());
    }

    fn tty_path(&self) -> String {
        self.master
            .as_ref()
            .and_then(|m| m.tty_name())
            .expect("the pty's name")
            .display()
            .to_string()
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The rows of the process table: lines under the header.
fn process_rows(screen: &str) -> Vec<String> {
    let lines: Vec<&str> = screen.lines().collect();
    let Some(header) = lines
        .iter()
        .position(|l| l.starts_with("GPU") && l.contains(" TYPE "))
    else {
        return Vec::new();
    };
    lines[header + 1..]
        .iter()
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.to_string())
        .collect()
}

fn pid_of(row: &str) -> u32 {
    row.split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

fn gputop_command(home: &Path, scenario: &Path, pids: &str, extra: &[&str]) -> CommandBuilder {
    let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_gputop"));
    for (key, _) in std::env::vars() {
        if key.starts_with("GPUTOP_") || key == "NO_COLOR" || key == "XDG_CONFIG_HOME" {
            command.env_remove(key);
        }
    }
    command.env("HOME", home);
    command.env("TERM", "xterm-256color");
    command.env("GPUTOP_SIM_SCENARIO", scenario);
    command.env("GPUTOP_SIM_PIDS", pids);
    command.arg("--nvml-lib");
    command.arg(common::sim_lib());
    if !extra.contains(&"--interval") {
        command.args(["--interval", "0.5"]);
    }
    command.args(extra);
    command
}

/// Two GPUs; the process with the most GPU memory is on GPU 1.
fn scenario(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("tui.toml");
    std::fs::write(
        &path,
        r#"
[meta]
version = 1
[[gpu]]
name = "Sim Zero"
[[gpu.process]]
pid_env = "GPUTOP_SIM_PIDS"
pid_index = 0
used_memory = "1 GiB"
[[gpu.process]]
pid_env = "GPUTOP_SIM_PIDS"
pid_index = 1
used_memory = "2 GiB"
[[gpu]]
name = "Sim One"
[[gpu.process]]
pid_env = "GPUTOP_SIM_PIDS"
pid_index = 2
used_memory = "5 GiB"
"#,
    )
    .unwrap();
    path
}

/// gputop in a pty on the two-GPU scenario with three real processes, showing all three.
struct Session {
    _home: tempfile::TempDir,
    sleepers: common::Sleepers,
    pids: Vec<u32>,
    pty: Pty,
    screen: String,
}

fn session(extra: &[&str]) -> Session {
    let home = tempfile::tempdir().unwrap();
    let sleepers = common::Sleepers::spawn(3);
    let pids = sleepers.pids();
    let command = gputop_command(home.path(), &scenario(home.path()), &sleepers.env(), extra);
    let pty = Pty::spawn(command, 120, 30);
    let screen = pty.wait_until("three process rows", 15, |s| process_rows(s).len() == 3);
    Session {
        _home: home,
        sleepers,
        pids,
        pty,
        screen,
    }
}

/// gputop in a pty on the two-GPU scenario with one real process standing in for all three.
fn gputop_with_one(home: &Path, pid: u32, cols: u16) -> Pty {
    let pids = format!("{pid} {pid} {pid}");
    Pty::spawn(gputop_command(home, &scenario(home), &pids, &[]), cols, 30)
}

fn order(screen: &str) -> Vec<u32> {
    process_rows(screen).iter().map(|r| pid_of(r)).collect()
}

#[test]
fn sorted_by_gpu_memory_largest_first_even_on_a_later_gpu_then_by_other_keys() {
    let Session {
        pids,
        mut pty,
        screen,
        ..
    } = session(&[]);
    assert_eq!(order(&screen), vec![pids[2], pids[1], pids[0]], "{screen}");
    assert!(
        screen.contains("GPU-MEM▼"),
        "the sorted column is marked: {screen}"
    );
    pty.keys("on");
    let screen = pty.wait_for("Sorted by natural");
    assert_eq!(order(&screen), vec![pids[0], pids[1], pids[2]], "{screen}");
    pty.keys("Og");
    let screen = pty.wait_for("Sorted by GPU memory, reversed");
    assert_eq!(order(&screen)[0], pids[0], "{screen}");
    pty.keys("q");
    assert!(pty.wait_exit(5).is_some_and(|s| s.success()));
}

#[test]
fn the_filter_narrows_the_table_and_esc_restores_it() {
    let Session { pids, mut pty, .. } = session(&[]);
    pty.keys("/gpu:0");
    let screen = pty.wait_until("two rows", 5, |s| process_rows(s).len() == 2);
    assert!(screen.contains("Filter: gpu:0"), "{screen}");
    pty.keys(&format!("\x7f\x7f\x7f\x7f\x7f{}", pids[2]));
    let screen = pty.wait_until("one row", 5, |s| process_rows(s).len() == 1);
    assert_eq!(order(&screen), vec![pids[2]]);
    pty.keys("\x1b");
    let screen = pty.wait_until("three rows again", 5, |s| process_rows(s).len() == 3);
    assert!(!screen.contains("Filter:"), "{screen}");
    pty.keys("q");
}

/// PgDn moves the selection by the rows the table showed when last drawn: the view learns
/// the count from the drawing, which itself changes no state.
#[test]
fn page_down_moves_by_the_rows_on_screen() {
    let home = tempfile::tempdir().unwrap();
    let count = 40;
    let sleepers = common::Sleepers::spawn(count);
    let pids = sleepers.pids();
    let mut text = String::from("[meta]\nversion = 1\n[[gpu]]\nname = \"Sim\"\n");
    for i in 0..count {
        // More memory for a later index: the table lists the PIDs in reverse.
        text += &format!(
            "[[gpu.process]]\npid_env = \"GPUTOP_SIM_PIDS\"\npid_index = {i}\nused_memory = \"{} MiB\"\n",
            100 + i
        );
    }
    let scenario = home.path().join("many.toml");
    std::fs::write(&scenario, text).unwrap();
    let command = gputop_command(home.path(), &scenario, &sleepers.env(), &[]);
    let mut pty = Pty::spawn(command, 120, 30);
    let screen = pty.wait_until("process rows", 15, |s| order(s).iter().any(|p| *p != 0));
    let shown = order(&screen).into_iter().filter(|p| *p != 0).count();
    assert!(
        shown > 1 && shown != 10 && shown < count,
        "{shown} rows: {screen}"
    );
    pty.keys("\x1b[B"); // Down: selects the first row
    pty.keys("\x1b[6~"); // PgDn
    pty.keys("\r"); // the selected process's details
    let expected = pids[count - 1 - shown];
    pty.wait_for(&format!("PID {expected} "));
    pty.keys("q");
    pty.keys("q");
    assert!(pty.wait_exit(5).is_some_and(|s| s.success()));
}

#[test]
fn kill_then_enter_kills_exactly_the_selected_process_and_says_so() {
    let Session {
        mut sleepers,
        pids,
        mut pty,
        ..
    } = session(&[]);
    pty.keys("\x1b[B"); // Down: selects the first row, the largest (pids[2])
    pty.keys("K");
    let screen = pty.wait_for("Send SIGKILL to 1 process?");
    assert!(
        screen.contains(&format!("PID {:>8}", pids[2])),
        "the dialog names the target: {screen}"
    );
    assert!(sleepers.alive(2), "nothing is sent before Enter");
    pty.keys("\r");
    pty.wait_for(&format!("SIGKILL sent to PID {}", pids[2]));
    let status = sleepers.child(2).wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
    assert!(
        sleepers.alive(0) && sleepers.alive(1),
        "no other process is touched"
    );

    // Esc cancels.
    pty.keys("\x1b[B");
    pty.keys("T");
    pty.wait_for("Send SIGTERM to 1 process?");
    pty.keys("\x1b");
    pty.wait_for("Cancelled");
    assert!(sleepers.alive(0) && sleepers.alive(1));
    pty.keys("q");
}

#[test]
fn readonly_offers_no_signal_at_all() {
    let Session {
        mut sleepers,
        mut pty,
        screen,
        ..
    } = session(&["--readonly"]);
    assert!(
        screen.contains("(read-only)") && !screen.contains("T/K/I signal"),
        "{screen}"
    );
    pty.keys("\x1b[B");
    pty.keys("K");
    let said = pty.wait_for("Read-only: signals are disabled");
    assert!(!said.contains("Send SIGKILL"), "no dialog: {said}");
    pty.keys("\r");
    std::thread::sleep(Duration::from_millis(500));
    let screen = pty.screen();
    assert!(!screen.contains("Send SIGKILL"), "no dialog: {screen}");
    pty.keys("h");
    pty.wait_for("gputop help");
    // The signal keys are in the help, marked off, and the help says why.
    pty.scroll_to("send SIGKILL (asks first) (off here)");
    pty.scroll_to("Read-only: signals are disabled.");
    assert!((0..3).all(|i| sleepers.alive(i)));
}

#[test]
fn mouse_clicks_select_rows_and_sort_by_headers() {
    let Session {
        pids,
        mut pty,
        screen,
        ..
    } = session(&[]);
    let lines: Vec<&str> = screen.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("GPU") && l.contains(" TYPE "))
        .unwrap();
    // SGR mouse reports are 1-based: click the second process row, then open its details.
    pty.keys(&format!("\x1b[<0;20;{}M\x1b[<0;20;{}m", header + 3, header + 3));
    pty.keys("\r");
    let details = pty.wait_for("process details");
    assert!(
        details.contains(&format!("PID {}", pids[1])),
        "the clicked row was selected: {details}"
    );
    pty.keys("\x1b");
    pty.wait_for("PID     TYPE USER");
    // A click on the PID header sorts by PID.
    let column = lines[header].find("PID").unwrap() + 2;
    pty.keys(&format!(
        "\x1b[<0;{column};{}M\x1b[<0;{column};{}m",
        header + 1,
        header + 1
    ));
    let screen = pty.wait_for("Sorted by PID");
    let mut sorted = pids.clone();
    sorted.sort_unstable();
    assert_eq!(order(&screen), sorted);
    // The wheel moves the selection: Esc clears it, two notches down select the second row.
    pty.keys("\x1b");
    pty.keys(&format!("\x1b[<65;20;{}M", header + 4));
    pty.keys(&format!("\x1b[<65;20;{}M", header + 4));
    pty.keys("\r");
    let details = pty.wait_for("process details");
    assert!(
        details.contains(&format!("PID {}", sorted[1])),
        "the wheel moved down twice: {details}"
    );
    pty.keys("q");
}

#[test]
fn no_color_draws_without_colours() {
    for no_color in [false, true] {
        let home = tempfile::tempdir().unwrap();
        let sleepers = common::Sleepers::spawn(3);
        let mut command = gputop_command(home.path(), &scenario(home.path()), &sleepers.env(), &[]);
        if no_color {
            command.env("NO_COLOR", "1");
        }
        let mut pty = Pty::spawn(command, 120, 30);
        pty.wait_until("three process rows", 15, |s| process_rows(s).len() == 3);
        pty.keys("\x1b[B");
        let raw = String::from_utf8_lossy(&pty.raw.lock().unwrap()).to_string();
        // crossterm sets colours with SGR 38;... (foreground) and 48;... (background).
        let coloured = raw.contains("\x1b[38;") || raw.contains("\x1b[48;");
        assert_eq!(coloured, !no_color, "colour sequences with NO_COLOR={no_color}");
        if no_color {
            assert!(raw.contains("\x1b[7m"), "the selection is shown in reverse video");
        }
        pty.keys("q");
    }
}

fn sleeper() -> Child {
    Command::new("sleep")
        .arg("600")
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

fn alive(child: &mut Child) -> bool {
    child.try_wait().unwrap().is_none()
}

#[test]
#[ignore = "needs root: runs gputop as nobody against a process of root"]
fn another_users_process_is_not_permitted_and_lives() {
    // gputop runs as nobody (setpriv), the target belongs to root.
    common::require_root();
    let mut victim = sleeper();
    // Everything nobody needs lives in a world-readable directory: the checkout may sit
    // under a home directory nobody cannot enter.
    let temp = tempfile::Builder::new()
        .prefix("gputop-nobody")
        .tempdir_in("/tmp")
        .unwrap();
    let dir = temp.path();
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let scenario_path = dir.join("one.toml");
    std::fs::write(
        &scenario_path,
        "[meta]\nversion = 1\n[[gpu]]\n[[gpu.process]]\npid_env = \"GPUTOP_SIM_PIDS\"\nused_memory = \"1 GiB\"\n",
    )
    .unwrap();
    let lib = dir.join("libnvidia-ml.so.1");
    std::fs::copy(common::sim_lib(), &lib).unwrap();
    let binary = dir.join("gputop");
    std::fs::copy(env!("CARGO_BIN_EXE_gputop"), &binary).unwrap();
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("setpriv");
    let mut command = CommandBuilder::new(setpriv);
    command.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        env!("CARGO_BIN_EXE_gputop"),
    ]);
    command.arg("--nvml-lib");
    command.arg(&lib);
    command.env("HOME", "/nonexistent");
    command.cwd("/");
    command.env("TERM", "xterm-256color");
    command.env("GPUTOP_SIM_SCENARIO", &scenario_path);
    command.env("GPUTOP_SIM_PIDS", victim.id().to_string());
    let mut pty = Pty::spawn(command, 120, 30);
    pty.wait_until("one row", 15, |s| process_rows(s).len() == 1);
    pty.keys("\x1b[B");
    pty.keys("K");
    pty.wait_for("Send SIGKILL to 1 process?");
    pty.keys("\r");
    pty.wait_for(&format!("not permitted: PID {} is owned by root", victim.id()));
    assert!(alive(&mut victim));
    pty.keys("q");
    let _ = victim.kill();
    let _ = victim.wait();
}

/// `stty -g` of the pty, read from its slave side.
fn stty(tty: &str) -> String {
    let tty = std::fs::File::open(tty).unwrap();
    let out = Command::new("stty").arg("-g").stdin(tty).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn sigterm_and_sighup_leave_the_terminal_as_it_was() {
    for signal in ["TERM", "HUP"] {
        let home = tempfile::tempdir().unwrap();
        let mut child = sleeper();
        let mut pty = gputop_with_one(home.path(), child.id(), 100);
        let tty = pty.tty_path();
        pty.wait_for("PID     TYPE USER");
        let raw = stty(&tty);
        let pid = pty.child.process_id().unwrap();
        Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .unwrap();
        let status = pty
            .wait_exit(2)
            .unwrap_or_else(|| panic!("gputop still runs a second after SIG{signal}"));
        let expected = if signal == "TERM" { 128 + 15 } else { 128 + 1 };
        assert_eq!(status.exit_code(), expected, "exit status after SIG{signal}");
        let restored = stty(&tty);
        assert_ne!(raw, restored, "gputop had the terminal in raw mode");
        // A fresh pty's settings are what gputop found; it must leave them so.
        let fresh = Pty::spawn(CommandBuilder::new("sleep"), 100, 30);
        assert_eq!(
            restored,
            stty(&fresh.tty_path()),
            "terminal settings after SIG{signal}"
        );
        let bytes = pty.raw.lock().unwrap().clone();
        let tail = String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(64)..]).to_string();
        assert!(
            tail.contains("\x1b[?1049l"),
            "left the alternate screen: {tail:?}"
        );
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn escape_sequences_in_a_process_name_change_neither_screen_nor_title() {
    let home = tempfile::tempdir().unwrap();
    let hostile = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred";
    let mut child = Command::new("sh")
        .args(["-c", "read x", hostile])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pty = gputop_with_one(home.path(), child.id(), 160);
    let screen = pty.wait_for("\\u{1b}]0;pwned\\u{7}");
    assert!(
        screen.contains("PID     TYPE USER"),
        "the screen is intact: {screen}"
    );
    assert_ne!(pty.title(), "pwned");
    pty.keys("q");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
#[ignore = "needs root: creates PID namespaces with unshare"]
fn a_process_replaced_under_the_same_pid_is_refused() {
    // In a fresh PID namespace the test can make a new process take the old one's PID
    // (ns_last_pid), as PID reuse does on a busy machine. Both hold an NVIDIA device open,
    // as GPU processes do: in its own PID namespace gputop counts only those as local.
    common::require_namespaces();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let scenario_path = scenario(dir.path());
    let script = format!(
        r#"{fake_dev}
           ( sleep 600 9</dev/nvidia0 & A=$!; echo $A > {d}/a.pid
             while [ ! -e {d}/go ]; do sleep 0.05; done
             kill -9 $A; wait $A
             echo $((A-1)) > /proc/sys/kernel/ns_last_pid
             sleep 600 9</dev/nvidia0 & echo $! > {d}/b.pid; wait ) &
           while [ ! -s {d}/a.pid ]; do sleep 0.05; done
           A=$(cat {d}/a.pid)
           GPUTOP_SIM_PIDS="$A $A $A" exec {gputop} --nvml-lib {lib} --interval 0.5"#,
        fake_dev = common::FAKE_NVIDIA_DEV,
        gputop = env!("CARGO_BIN_EXE_gputop"),
        lib = common::sim_lib().display(),
    );
    let mut command = CommandBuilder::new("unshare");
    command.args(["--pid", "--fork", "--mount-proc", "sh", "-c", &script]);
    for (key, _) in std::env::vars() {
        if key.starts_with("GPUTOP_") {
            command.env_remove(key);
        }
    }
    command.env("HOME", dir.path());
    command.env("TERM", "xterm-256color");
    command.env("GPUTOP_SIM_SCENARIO", &scenario_path);
    command.cwd(dir.path());
    let mut pty = Pty::spawn(command, 120, 30);
    // One PID on both GPUs, twice on GPU 0 (merged): two rows.
    pty.wait_until("two rows", 15, |s| process_rows(s).len() == 2);
    let a: u32 = std::fs::read_to_string(dir.path().join("a.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    pty.keys("\x1b[B");
    pty.keys("K");
    pty.wait_for("Send SIGKILL to 1 process?");
    // Start times have a resolution of one second: let the old process be at least that old.
    std::thread::sleep(Duration::from_millis(1100));
    std::fs::write(dir.path().join("go"), "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let b = loop {
        if let Ok(text) = std::fs::read_to_string(dir.path().join("b.pid"))
            && let Ok(pid) = text.trim().parse::<u32>()
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the replacement process did not start");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(a, b, "the new process took the old PID");
    pty.keys("\r");
    pty.wait_for(&format!("refused: PID {a} now belongs to another process"));
    // The replacement still runs: signal 0 probes it inside the namespace through /proc.
    let screen = pty.screen();
    assert!(!screen.contains("SIGKILL sent"), "{screen}");
    pty.keys("q");
}

#[test]
fn ctrl_z_suspends_with_the_terminal_restored_and_resumes_with_a_full_redraw() {
    let home = tempfile::tempdir().unwrap();
    let mut child = sleeper();
    let mut pty = gputop_with_one(home.path(), child.id(), 100);
    let tty = pty.tty_path();
    pty.wait_for("PID     TYPE USER");
    let pid = pty.child.process_id().unwrap();
    pty.keys("\x1a");
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_state(pid) != 'T' {
        assert!(Instant::now() < deadline, "gputop did not stop on Ctrl-Z");
        std::thread::sleep(Duration::from_millis(50));
    }
    let fresh = Pty::spawn(CommandBuilder::new("sleep"), 100, 30);
    assert_eq!(
        stty(&tty),
        stty(&fresh.tty_path()),
        "the terminal is cooked while gputop is stopped"
    );
    let before = pty.raw.lock().unwrap().len();
    Command::new("kill")
        .args(["-CONT", &pid.to_string()])
        .status()
        .unwrap();
    pty.wait_until("a full redraw", 5, |_| {
        let raw = pty.raw.lock().unwrap();
        let after = String::from_utf8_lossy(&raw[before..]).to_string();
        after.contains("\x1b[2J") && after.contains("COMMAND")
    });
    pty.keys("q");
    assert!(pty.wait_exit(5).is_some_and(|s| s.success()));
    let _ = child.kill();
    let _ = child.wait();
}

/// The state letter of /proc/PID/stat (R, S, T for stopped...).
fn process_state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
        .unwrap_or('?')
}

#[test]
fn when_the_terminal_goes_away_gputop_exits_instead_of_spinning() {
    use std::os::fd::{FromRawFd, OwnedFd};
    // A pty that is not gputop's controlling terminal: closing it sends no SIGHUP, so gputop
    // must notice the failing reads and writes (EIO) by itself.
    // Opened close-on-exec, so no process the tests spawn meanwhile keeps the pty open.
    // SAFETY: posix_openpt/grantpt/unlockpt/ptsname_r/open on descriptors we own.
    let (master, slave) = unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(master >= 0, "posix_openpt");
        assert_eq!(libc::grantpt(master), 0);
        assert_eq!(libc::unlockpt(master), 0);
        let mut name = [0 as libc::c_char; 64];
        assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
        let slave = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(slave >= 0, "open the pty's slave");
        let size = libc::winsize {
            ws_row: 30,
            ws_col: 100,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        libc::ioctl(slave, libc::TIOCSWINSZ, &size);
        (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave))
    };
    let home = tempfile::tempdir().unwrap();
    let mut sleeper = sleeper();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gputop"))
        .args([
            "--nvml-lib",
            common::sim_lib().to_str().unwrap(),
            "--interval",
            "0.2",
        ])
        .env("HOME", home.path())
        .env("TERM", "xterm-256color")
        .env("GPUTOP_SIM_SCENARIO", scenario(home.path()))
        .env("GPUTOP_SIM_PIDS", format!("{0} {0} {0}", sleeper.id()))
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    drop(slave);
    // Read until the first frame is drawn, then close the terminal.
    let mut reader = std::fs::File::from(master);
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !String::from_utf8_lossy(&seen).contains("COMMAND") {
        assert!(Instant::now() < deadline, "no frame was drawn");
        let mut buf = [0u8; 4096];
        let n = reader.read(&mut buf).unwrap();
        seen.extend_from_slice(&buf[..n]);
    }
    drop(reader);
    let deadline = Instant::now() + Duration::from_secs(2);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "gputop still runs 2 s after its terminal went away"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        status.code().is_some(),
        "it exits by itself, not by a signal: {status:?}"
    );
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

/// Seconds into the replay, from the header's "REPLAY h:mm:ss / h:mm:ss".
fn replay_position(screen: &str) -> Option<u64> {
    let after = screen.split("REPLAY ").nth(1)?;
    let clock = after.split_whitespace().next()?;
    let parts: Vec<u64> = clock.split(':').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    Some(parts.iter().fold(0, |acc, p| acc * 60 + p))
}

/// Records the fixture machine as `hostname` once a second for `seconds` into `file`, in the
/// documented recording format (a header line, then one whole frame a line).
fn record_fixture(file: &Path, hostname: &str, seconds: u64) {
    record_fixture_with(file, hostname, seconds, |_| {});
}

/// [`record_fixture`] with each frame changed by `edit` first.
fn record_fixture_with(
    file: &Path,
    hostname: &str,
    seconds: u64,
    edit: impl Fn(&mut gputop_core::model::Snapshot),
) {
    use gputop_core::model::recording::{FORMAT_VERSION, to_stored};
    let header = serde_json::json!({
        "gputop_recording": FORMAT_VERSION,
        "id": "fixture",
        "segment": 0,
        "hostname": hostname,
        "interval_seconds": 1.0,
    });
    let mut text = format!("{header}\n");
    let base = common::fixtures::snapshot();
    for second in 0..seconds {
        let mut frame = base.clone();
        frame.taken_at = base.taken_at + Duration::from_secs(second);
        frame.hostname = hostname.into();
        edit(&mut frame);
        let t = frame
            .taken_at
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let line = serde_json::json!({ "t": t, "k": to_stored(&frame) });
        text.push_str(&format!("{line}\n"));
    }
    std::fs::write(file, text).unwrap();
}

#[test]
fn a_recording_replays_with_pause_seek_and_speed_and_no_signals() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("two-minutes.rec");
    record_fixture(&file, "recorded-host", 120);
    let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_gputop"));
    command.env("HOME", home.path());
    command.env("TERM", "xterm-256color");
    command.env_remove("GPUTOP_CONFIG");
    command.arg("replay");
    command.arg(&file);
    let mut pty = Pty::spawn(command, 160, 40);
    let screen = pty.wait_for("REPLAY");
    assert!(
        screen.contains("recorded-host") && screen.contains("train.py"),
        "{screen}"
    );
    assert!(
        screen.contains("(replay: no signals)"),
        "signals are off in a replay: {screen}"
    );
    pty.keys("p");
    let screen = pty.wait_for("paused");
    let paused_at = replay_position(&screen).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        replay_position(&pty.screen()),
        Some(paused_at),
        "paused means paused"
    );
    pty.keys("}");
    pty.wait_until("ten seconds later", 10, |s| {
        replay_position(s) == Some(paused_at + 10)
    });
    pty.keys("S");
    pty.wait_for("x2 paused");
    pty.keys("{{");
    pty.wait_until("back twenty seconds", 10, |s| {
        replay_position(s) == Some(paused_at.saturating_sub(10))
    });
    pty.keys("p");
    pty.wait_for("x2 playing");
    pty.keys("K");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !pty.screen().contains("SIGKILL"),
        "no signal dialog: {}",
        pty.screen()
    );
    pty.keys("q");
    assert!(pty.wait_exit(5).is_some_and(|s| s.success()));
}

/// `gputop --demo` with `args`, for a pseudo-terminal.
fn demo_command(home: &Path, args: &[&str]) -> CommandBuilder {
    let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_gputop"));
    command.env("HOME", home);
    command.env("TERM", "xterm-256color");
    command.env_remove("GPUTOP_CONFIG");
    command.arg("--demo");
    command.args(args);
    command
}

/// `gputop --demo` in a pseudo-terminal of `cols` x `rows`, once it shows its processes.
fn demo_at(home: &Path, cols: u16, rows: u16) -> (Pty, String) {
    let pty = Pty::spawn(demo_command(home, &[]), cols, rows);
    let screen = pty.wait_until("the process table", 15, |s| {
        s.contains("GPU-MEM") && s.contains("alice")
    });
    (pty, screen)
}

#[test]
fn the_screen_is_laid_out_for_80x24_100x30_160x45_and_240x60() {
    let home = tempfile::tempdir().unwrap();
    for (cols, rows) in [(80, 24), (100, 30), (160, 45), (240, 60)] {
        let (mut pty, screen) = demo_at(home.path(), cols, rows);
        let lines: Vec<&str> = screen.lines().collect();
        // Which job is which: the command lines readable, at least 24 columns of them.
        let header = lines.iter().find(|l| l.starts_with("GPU")).unwrap();
        let command_at = header.find("COMMAND").expect("a COMMAND column");
        assert!(usize::from(cols) - command_at >= 24, "{cols}x{rows}:\n{screen}");
        assert!(
            screen.contains("python3 train.py --model"),
            "{cols}x{rows}:\n{screen}"
        );
        // Each GPU's first line whole: utilization's mean and peak, labelled, never cut.
        let gpus: Vec<&&str> = lines
            .iter()
            .filter(|l| l.contains(" UTIL ") && l.get(..3).is_some_and(|i| i.trim().parse::<u32>().is_ok()))
            .collect();
        assert_eq!(
            gpus.len(),
            6,
            "four NVIDIA GPUs, an AMD and an Intel one: {cols}x{rows}:\n{screen}"
        );
        for line in &gpus {
            let line = line.trim_end();
            assert!(
                line.ends_with("peak") || line.ends_with("now") || line.ends_with("N/A"),
                "{cols}x{rows}: a GPU line cut short: {line:?}"
            );
        }
        assert!(screen.contains("13% mean 100% peak"), "{cols}x{rows}:\n{screen}");
        // The second lines hold whole items only.
        for line in lines
            .iter()
            .filter(|l| l.starts_with("    ") && l.contains("MCLK"))
        {
            let last = line.trim_end().rsplit("  ").next().unwrap();
            assert!(
                ["MHz", "/s", "%", "B", "J", "C", "W", "ECC 0"]
                    .iter()
                    .any(|end| last.ends_with(end))
                    || last.starts_with("ECC"),
                "{cols}x{rows}: {line:?}"
            );
        }
        // The footer: help first, quit last, never cut.
        let footer = lines.iter().rev().find(|l| !l.trim().is_empty()).unwrap();
        assert!(
            footer.starts_with("h help") && footer.contains("q quit"),
            "{cols}x{rows}: {footer:?}"
        );
        if cols >= 240 {
            // CONTAINER as wide as its longest label where the command keeps its room.
            assert!(
                screen.contains("system.slice/jupyterhub.service "),
                "{cols}x{rows}:\n{screen}"
            );
        }
        pty.keys("q");
        assert!(pty.wait_exit(5).is_some_and(|s| s.success()), "{cols}x{rows}");
    }
}

#[test]
fn the_demo_says_why_it_has_no_environment_and_no_signals() {
    let home = tempfile::tempdir().unwrap();
    let (mut pty, _) = demo_at(home.path(), 100, 30);
    pty.keys("\x1b[B");
    pty.keys("e");
    pty.wait_for("A demo process: it is invented and has no environment");
    assert!(!pty.screen().contains("has exited"), "{}", pty.screen());
    pty.keys("K");
    pty.wait_for("Demo: its processes are invented, so signals are off");
    // o prompts for the letter; the filter keeps messages visible beside it.
    pty.keys("o");
    pty.wait_for("Sort: g GPU memory s %SM");
    pty.keys("g");
    pty.wait_for("Sorted by GPU memory");
    pty.keys("/alice\r");
    pty.keys("K");
    let screen = pty.wait_for("Demo: its processes are invented");
    assert!(screen.contains("Filter: alice"), "{screen}");
    // The tree: the job's worker under its first process, the GPU figures in one column.
    pty.keys("\x1b");
    pty.keys("t");
    let tree = pty.wait_for("└─ 48377");
    let column = |pid: &str| {
        let line = tree.lines().find(|l| l.contains(pid)).unwrap();
        line[..line.find("GPU ").unwrap()].chars().count()
    };
    assert_eq!(column("48213"), column("└─ 48377"), "{tree}");
    assert!(!tree.contains(" ?"), "no unknown ancestors: {tree}");
    pty.keys("t");
    pty.keys("q");
    assert!(pty.wait_exit(5).is_some_and(|s| s.success()));
}

#[test]
fn a_recorded_process_never_shows_a_local_process_that_has_its_pid() {
    let home = tempfile::tempdir().unwrap();
    // A local process holding a secret, whose PID the recording's first row carries.
    let mut local = Command::new("sleep")
        .arg("600")
        .env("MY_SECRET_TOKEN", "hunter2")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pid = local.id();
    let file = home.path().join("secret.rec");
    record_fixture_with(&file, "recorded-host", 30, |frame| {
        frame.processes[0].pid = pid;
        frame.processes[0].host.local_pid = Some(pid);
    });
    let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_gputop"));
    command.env("HOME", home.path());
    command.env("TERM", "xterm-256color");
    command.arg("replay");
    command.arg(&file);
    let mut pty = Pty::spawn(command, 120, 30);
    let screen = pty.wait_for("train.py");
    assert!(screen.contains(&pid.to_string()), "{screen}");
    // The first row is the largest: the recorded process with the local PID.
    pty.keys("\x1b[B");
    pty.keys("e");
    let said = pty.wait_for("its environment is not recorded");
    assert!(!said.contains("hunter2") && !said.contains("MY_SECRET"), "{said}");
    assert!(
        !said.contains("environment of PID"),
        "no environment screen: {said}"
    );
    pty.keys("K");
    pty.wait_for("A recorded process: signals reach only live ones");
    assert!(!pty.screen().contains("Send SIGKILL"), "{}", pty.screen());
    // The message goes after a few seconds, and the key hints come back.
    pty.wait_until("the hints back", 15, |s| {
        s.contains("q quit") && !s.contains("signals reach")
    });
    pty.keys("h");
    pty.wait_for("gputop help");
    let help = pty.scroll_to("send SIGKILL (asks first) (off here)");
    assert!(!help.contains("hunter2"), "{help}");
    pty.keys("q");
    pty.keys("q");
    assert!(pty.wait_exit(5).is_some_and(|s| s.success()));
    assert!(alive(&mut local), "the local process lives");
    let _ = local.kill();
    let _ = local.wait();
}

#[test]
fn an_alert_fires_on_screen_in_the_log_file_and_charts_and_the_alert_screen_open() {
    let home = tempfile::tempdir().unwrap();
    let log = home.path().join("alerts.log");
    let config = home.path().join("alerts.toml");
    std::fs::write(
        &config,
        format!(
            "[alert]\nlog_file = \"{}\"\n\n[[alert.rules]]\nname = \"memory_in_use\"\nmetric = \"memory_mib\"\n\
             threshold = 1024\nwindow = 2\nseverity = \"critical\"\nsummary = \"more than 1 GiB in use\"\n",
            log.display()
        ),
    )
    .unwrap();
    let sleepers = common::Sleepers::spawn(3);
    let command = gputop_command(
        home.path(),
        &scenario(home.path()),
        &sleepers.env(),
        &["--config", config.to_str().unwrap()],
    );
    let mut pty = Pty::spawn(command, 160, 40);
    let screen = pty.wait_for("alerts: 2 critical");
    assert!(
        screen.contains("CRITICAL GPU 0: more than 1 GiB in use"),
        "{screen}"
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert_eq!(logged.lines().count(), 2, "{logged}");
    assert!(logged.contains("\"state\":\"firing\"") && logged.contains("memory_in_use"));
    pty.keys("A");
    let screen = pty.wait_for("Rules in force");
    assert!(
        screen.contains("memory_in_use") && screen.contains("gpu_temperature_critical"),
        "{screen}"
    );
    pty.keys("A");
    pty.keys("g");
    let screen = pty.wait_for("utilization (interval mean)");
    assert!(
        screen.contains("GPU 0 Sim Zero") && screen.contains("now"),
        "{screen}"
    );
    pty.keys("j");
    pty.wait_for("GPU 1 Sim One");
    pty.keys("q");
    pty.keys("q");
    assert!(pty.wait_exit(5).is_some_and(|s| s.success()));
}

#[test]
fn a_critical_xid_shows_in_the_header_and_fires_the_builtin_rule() {
    // GPU 0 of the scenario reports Xids 2 to 6 s after the view opens NVML; the last
    // critical one is 94 (contained ECC error).
    let home = tempfile::tempdir().unwrap();
    let scenario = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/xid-errors.toml");
    let command = gputop_command(home.path(), &scenario, "", &["--interval", "0.2"]);
    let mut pty = Pty::spawn(command, 160, 40);
    let screen = pty.wait_for("Xid 94 on GPU 0");
    assert!(screen.contains("alerts: 1 critical"), "{screen}");
    assert!(
        screen.contains("GPU 0: Critical Xid error"),
        "the alert panel names the rule: {screen}"
    );
    pty.keys("q");
    assert!(pty.wait_exit(5).is_some_and(|s| s.success()));
}

#[test]
fn the_remote_view_watches_fifty_exporters_some_dead_and_opens_one() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = common::Sleepers::spawn(3);
    let free_port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let mut exporters = Vec::new();
    let mut addresses = Vec::new();
    for _ in 0..50 {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_gputop"))
            .env("HOME", home.path())
            // Each exporter keeps its own usage totals: one machine's would refuse the rest.
            .env("XDG_STATE_HOME", home.path().join(format!("state-{port}")))
            .env("GPUTOP_SIM_SCENARIO", common::scenario("two-gpus-training"))
            .env("GPUTOP_SIM_CLOCK", "manual")
            .env("GPUTOP_SIM_TIME_MS", "100000")
            .env("GPUTOP_SIM_PIDS", sleepers.env())
            .arg("--nvml-lib")
            .arg(common::sim_lib())
            .args([
                "export",
                "--web-listen-address",
                &format!("127.0.0.1:{port}"),
                "--interval",
                "1",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Killed even when the test fails.
        exporters.push(common::Killed(child));
        addresses.push(format!("http://127.0.0.1:{port}/"));
    }
    // Three addresses where nothing listens, and two that accept and never answer.
    for _ in 0..3 {
        addresses.push(format!("127.0.0.1:{}", free_port()));
    }
    let black_holes: Vec<std::net::TcpListener> = (0..2)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    for hole in &black_holes {
        addresses.push(hole.local_addr().unwrap().to_string());
    }
    let hosts = home.path().join("hosts");
    std::fs::write(&hosts, format!("# the lab\n{}\n", addresses[25..].join("\n"))).unwrap();
    let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_gputop"));
    command.env("HOME", home.path());
    command.env("TERM", "xterm-256color");
    command.args(["--interval", "1", "--remote", &addresses[..25].join(",")]);
    command.arg("--hosts-file");
    command.arg(&hosts);
    let mut pty = Pty::spawn(command, 200, 80);
    let screen = pty.wait_until("every node judged", 60, |s| s.contains("55 nodes: 50 up, 5 down"));
    assert!(screen.contains("GPUs 100"), "{screen}");
    let user = std::process::Command::new("id").arg("-un").output().unwrap();
    let user = String::from_utf8_lossy(&user.stdout).trim().to_string();
    // The users' table is on the right of the top processes': its row is the user's name
    // followed by four figures.
    let numbers: Vec<&str> = screen
        .lines()
        .find_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let at = words.windows(5).position(|w| {
                w[0] == user && w[1..4].iter().all(|n| n.parse::<u32>().is_ok()) && w[4].ends_with('B')
            })?;
            Some(words[at..at + 4].to_vec())
        })
        .unwrap_or_else(|| panic!("no totals for {user}: {screen}"));
    assert_eq!(
        &numbers[1..4],
        ["50", "100", "150"],
        "nodes, GPUs, processes of {user}: {numbers:?}"
    );
    assert!(
        screen.contains("DOWN (") && screen.contains("cannot connect"),
        "{screen}"
    );
    // The view answers while nodes time out: open the first node and come back.
    pty.keys("\r");
    pty.wait_for("NVIDIA A100-SXM4-40GB");
    pty.wait_for("(remote: no signals)");
    pty.keys("\x7f");
    pty.wait_for("USERS (all nodes)");
    pty.keys("q");
    assert!(pty.wait_exit(5).is_some_and(|s| s.success()));
    drop(exporters);
}

/// `script` under `sh` in new namespaces (`unshare` `flags`) in a 140x30 pty, with
/// `$GPUTOP`, `$SIM_LIB` and `$REPORT` (where the script writes what it saw) set.
fn in_namespaces(flags: &[&str], script: &str, home: &Path, scenario: &Path, report: &Path) -> Pty {
    let mut command = CommandBuilder::new("unshare");
    command.args(flags);
    command.args(["sh", "-c", script]);
    for (key, _) in std::env::vars() {
        if key.starts_with("GPUTOP_") || key == "NO_COLOR" {
            command.env_remove(key);
        }
    }
    command.env("HOME", home);
    command.env("TERM", "xterm-256color");
    command.env("GPUTOP", env!("CARGO_BIN_EXE_gputop"));
    command.env("SIM_LIB", common::sim_lib());
    command.env("GPUTOP_SIM_SCENARIO", scenario);
    command.env("REPORT", report);
    Pty::spawn(command, 140, 30)
}

/// Once gputop has exited, what the script wrote to `report` (waiting for `needle`).
fn script_report(pty: &mut Pty, report: &Path, needle: &str) -> String {
    assert!(pty.wait_exit(10).is_some(), "gputop exits");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(report).unwrap_or_default();
        if text.contains(needle) || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// In a container's own PID namespace: the row whose PID a local process merely shares
/// says so and cannot be signalled (that process lives); the process that holds an NVIDIA
/// device open is the GPU's and is killed on request.
#[test]
#[ignore = "needs root: creates PID namespaces with unshare"]
fn in_a_container_namespace_only_the_verified_process_can_be_killed() {
    common::require_namespaces();
    let home = tempfile::tempdir().unwrap();
    let scenario = scenario(home.path());
    let report = home.path().join("report");
    let script = format!(
        r#"set -e
{}
sleep 600 9</dev/nvidia0 &
gpu=$!
sleep 600 &
namesake=$!
GPUTOP_SIM_PIDS="$gpu $gpu $namesake" "$GPUTOP" --nvml-lib "$SIM_LIB" --interval 0.5 || true
set +e
wait $gpu
echo "gpu exit $?" > "$REPORT"
kill -0 $namesake && echo "namesake alive" >> "$REPORT"
kill $namesake
"#,
        common::FAKE_NVIDIA_DEV
    );
    let mut pty = in_namespaces(
        &["--pid", "--fork", "--mount-proc"],
        &script,
        home.path(),
        &scenario,
        &report,
    );
    // The namesake's row (5 GiB, first) shows no facts of the local process.
    let screen = pty.wait_until("both rows", 15, |s| process_rows(s).len() == 2);
    assert!(screen.contains("container PID namespace"), "the banner: {screen}");
    let rows = process_rows(&screen);
    assert!(rows[0].contains("(host PID"), "the row says why: {screen}");
    assert!(
        !rows[0].contains("sleep 600"),
        "the namesake's command is not shown: {screen}"
    );
    pty.keys("\x1b[B");
    pty.keys("K");
    pty.wait_for("Signals disabled");
    // The verified process (GPU 0, second row): killed after confirming.
    pty.keys("\x1b[B");
    pty.keys("K");
    pty.wait_for("Send SIGKILL to 1 process?");
    pty.keys("\r");
    pty.wait_for("SIGKILL sent to PID");
    pty.keys("q");
    let text = script_report(&mut pty, &report, "gpu exit");
    assert!(
        text.contains("gpu exit 137"),
        "the GPU process was killed: {text}"
    );
    assert!(text.contains("namesake alive"), "the namesake lives: {text}");
}

/// `u` opens who-uses-what: this user's three processes on two GPUs, then back.
#[test]
fn the_users_view_opens_with_u_and_closes_with_u() {
    let Session { mut pty, .. } = session(&[]);
    let me = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout).unwrap();
    pty.keys("u");
    let screen = pty.wait_for("users and containers");
    let row = screen
        .lines()
        .find(|l| l.contains(me.trim()) && l.contains("0,1"))
        .unwrap_or_else(|| panic!("a row for {} on GPUs 0,1: {screen}", me.trim()));
    assert!(row.contains(" 3 "), "three processes: {row}");
    pty.keys("u");
    pty.wait_until("the process table again", 5, |s| process_rows(s).len() == 3);
    pty.keys("q");
    assert!(pty.wait_exit(5).is_some_and(|s| s.success()));
}

#[test]
fn a_redraw_that_changes_nothing_writes_nothing_and_one_that_changes_a_cell_writes_it() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = common::Sleepers::spawn(3);
    // No snapshot for a minute after the first: every frame below comes from a key.
    let command = gputop_command(
        home.path(),
        &scenario(home.path()),
        &sleepers.env(),
        &["--interval", "60"],
    );
    let mut pty = Pty::spawn(command, 120, 30);
    pty.wait_until("three process rows", 15, |s| process_rows(s).len() == 3);
    std::thread::sleep(Duration::from_millis(500));
    let before = pty.raw.lock().unwrap().len();
    // Unbound on the main screen: the event loop redraws, and the frame is the same.
    pty.keys("Z");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        pty.raw.lock().unwrap().len(),
        before,
        "bytes for an unchanged frame"
    );
    // The selection moves: a few cells change, and only they are written.
    pty.keys("\x1b[B");
    std::thread::sleep(Duration::from_millis(500));
    let written = pty.raw.lock().unwrap().len() - before;
    assert!(written > 0, "nothing written for a moved selection");
    assert!(
        written < 2000,
        "{written} bytes for a moved selection: the frame was redrawn whole"
    );
    pty.keys("q");
    assert!(pty.wait_exit(5).is_some_and(|s| s.success()));
}

/// In a nested PID namespace that still sees the host's /proc, NVML's host PID is shown and
/// signalled by its number in gputop's namespace (NSpid), and the kill reaches exactly it.
#[test]
#[ignore = "needs root: creates PID namespaces with unshare"]
fn in_a_nested_namespace_a_host_pid_is_killed_through_its_local_number() {
    common::require_namespaces();
    let home = tempfile::tempdir().unwrap();
    let scenario = scenario(home.path());
    let report = home.path().join("report");
    let script = format!(
        r#"set -e
sleep 600 &
local=$!
{}
GPUTOP_SIM_PIDS="$host $host $host" "$GPUTOP" --nvml-lib "$SIM_LIB" --interval 0.5 || true
set +e
wait $local
echo "local $local exit $?" > "$REPORT"
"#,
        common::HOST_PID_OF_LOCAL
    );
    let mut pty = in_namespaces(&["--pid", "--fork"], &script, home.path(), &scenario, &report);
    let screen = pty.wait_until("two rows", 15, |s| process_rows(s).len() == 2);
    assert!(screen.contains("nested PID namespace"), "the banner: {screen}");
    let local = pid_of(&process_rows(&screen)[0]);
    assert!(local < 10, "the row shows the local number: {screen}");
    pty.keys("\x1b[B");
    pty.keys("K");
    pty.wait_for("Send SIGKILL to 1 process?");
    pty.keys("\r");
    pty.wait_for(&format!("SIGKILL sent to PID {local}"));
    pty.keys("q");
    let text = script_report(&mut pty, &report, "exit");
    assert_eq!(
        text.trim(),
        format!("local {local} exit 137"),
        "the process itself was killed"
    );
}

#[test]
fn a_slow_init_and_a_hung_call_show_as_waiting_and_old_data_and_q_still_quits() {
    let home = tempfile::tempdir().unwrap();
    // nvmlInit takes 2 s (no persistence mode); from scenario time 5 s the process lists
    // block for ten minutes (a GPU hung in the driver).
    let scenario = home.path().join("hung.toml");
    std::fs::write(
        &scenario,
        "[meta]\nversion = 1\n[sim]\ninit_delay_ms = 2000\n[[gpu]]\nname = \"Hangs\"\n\
         [[gpu.hang]]\nfield = \"processes\"\nseconds = 600\nfrom = 5\n",
    )
    .unwrap();
    let mut pty = Pty::spawn(gputop_command(home.path(), &scenario, "", &[]), 120, 30);
    pty.wait_until("the view while NVML opens", 2, |s| s.contains("opening NVML"));
    pty.wait_for("Hangs");
    let screen = pty.wait_until("the stale-data marker", 20, |s| s.contains("has not returned"));
    let header = screen.lines().next().unwrap_or_default().to_string();
    assert!(
        header.contains("s old: nvmlDeviceGet*RunningProcesses on GPU 0 has not returned"),
        "{header}"
    );
    pty.keys("q");
    let status = pty.wait_exit(2).expect("q quits while the collector is stuck");
    assert!(status.success());
}

#[test]
fn an_nvml_that_fails_after_a_slow_init_ends_the_view_with_its_error_and_exit_code() {
    let home = tempfile::tempdir().unwrap();
    let scenario = home.path().join("slow-failing.toml");
    std::fs::write(
        &scenario,
        "[meta]\nversion = 1\n[system]\ninit_error = \"DRIVER_NOT_LOADED\"\n\
         [sim]\ninit_delay_ms = 1500\n[[gpu]]\n",
    )
    .unwrap();
    let mut pty = Pty::spawn(gputop_command(home.path(), &scenario, "", &[]), 100, 30);
    let before = stty(&pty.tty_path());
    pty.wait_until("the view while NVML opens", 2, |s| s.contains("opening NVML"));
    let status = pty.wait_exit(10).expect("gputop ends once NVML has failed");
    assert_eq!(
        status.exit_code(),
        5,
        "the exit code of a driver that is not loaded"
    );
    let output = String::from_utf8_lossy(&pty.raw.lock().unwrap()).into_owned();
    assert!(output.contains("the NVIDIA driver is not loaded"), "{output}");
    assert_eq!(stty(&pty.tty_path()), before, "the terminal is as it was");
}

#[test]
fn a_panic_on_a_worker_thread_ends_gputop_with_one_line_and_the_terminal_restored() {
    let home = tempfile::tempdir().unwrap();
    let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_gputop"));
    command.args(["--demo"]);
    command.env("HOME", home.path());
    command.env("TERM", "xterm-256color");
    // Debug builds panic on the collection thread after its second snapshot.
    command.env("GPUTOP_DEBUG_PANIC", "collector");
    let mut pty = Pty::spawn(command, 100, 30);
    let before = stty(&Pty::spawn(CommandBuilder::new("sleep"), 100, 30).tty_path());
    let status = pty
        .wait_exit(5)
        .expect("a panic on the collection thread ends gputop");
    assert_eq!(status.exit_code(), 70, "the exit code of an internal error");
    let output = String::from_utf8_lossy(&pty.raw.lock().unwrap()).into_owned();
    // What follows leaving the alternate screen and showing the cursor again.
    let after_screen = output
        .rsplit("\x1b[?1049l")
        .next()
        .unwrap_or("")
        .trim_start_matches("\x1b[?25h");
    assert!(
        output.contains("\x1b[?1049l"),
        "left the alternate screen: {output:?}"
    );
    let lines: Vec<&str> = after_screen
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), 1, "one line after the view: {lines:?}");
    assert!(
        lines[0].starts_with("gputop: internal error in thread 'gputop-collect'"),
        "{lines:?}"
    );
    assert!(
        !output.contains("RUST_BACKTRACE"),
        "no backtrace hint: {output:?}"
    );
    assert_eq!(stty(&pty.tty_path()), before, "the terminal is as it was");
}

/// How a fake node answers `GET /snapshot`.
#[derive(Clone)]
enum Answer {
    Body(Arc<Vec<u8>>),
    /// The status line and headers a byte a second, never the body.
    Trickle,
}

/// A node on 127.0.0.1 answering as its `answer` says now; counts the requests.
struct FakeNode {
    address: String,
    requests: Arc<std::sync::atomic::AtomicUsize>,
    answer: Arc<Mutex<Answer>>,
}

fn fake_node(answer: Answer) -> FakeNode {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let node = FakeNode {
        address: listener.local_addr().unwrap().to_string(),
        requests: Arc::default(),
        answer: Arc::new(Mutex::new(answer)),
    };
    let (requests, answer) = (Arc::clone(&node.requests), Arc::clone(&node.answer));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let (requests, answer) = (Arc::clone(&requests), answer.lock().unwrap().clone());
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                requests.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                match answer {
                    Answer::Body(body) => {
                        let head = format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                            body.len()
                        );
                        let _ = stream.write_all(head.as_bytes());
                        let _ = stream.write_all(&body);
                    }
                    Answer::Trickle => {
                        for b in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Padding: "
                            .iter()
                            .cycle()
                            .take(120)
                        {
                            if stream.write_all(&[*b]).is_err() {
                                return;
                            }
                            std::thread::sleep(Duration::from_secs(1));
                        }
                    }
                }
            });
        }
    });
    node
}

/// The demo machine's `--once --json` document: what a real node's `/snapshot` holds.
fn demo_document() -> serde_json::Value {
    let home = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_gputop"))
        .env("HOME", home.path())
        .args(["--demo", "--once", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success());
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The peak resident memory of `pid`, in MiB.
fn peak_rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib / 1024
}

fn body(text: String) -> Answer {
    Answer::Body(Arc::new(text.into_bytes()))
}

#[test]
fn hostile_nodes_are_refused_each_with_its_reason_and_memory_stays_small() {
    let home = tempfile::tempdir().unwrap();
    let good = demo_document();
    let mut far_index = good.clone();
    far_index["devices"][0]["index"] = serde_json::json!(4_294_967_295u64);
    let mut emptied = good.clone();
    emptied["processes"] = serde_json::json!([]);
    let emptied = emptied.to_string();
    // 5,000,000 empty process objects: 15 MB, under the 16 MiB cap.
    let empty_objects = emptied.replacen(
        "\"processes\":[]",
        &format!("\"processes\":[{}{{}}]", "{},".repeat(4_999_999)),
        1,
    );
    // 200,000 well-formed processes: more than a snapshot may hold.
    let process = r#"{"pid":1,"gpu_index":0,"type":"C","pid_mapping":"same"}"#;
    let many = emptied.replacen(
        "\"processes\":[]",
        &format!(
            "\"processes\":[{}{process}]",
            format!("{process},").repeat(199_999)
        ),
        1,
    );
    let nodes = [
        fake_node(body(far_index.to_string())),
        fake_node(body(empty_objects)),
        fake_node(body(many)),
        fake_node(body(good.to_string())),
    ];
    let addresses: Vec<&str> = nodes.iter().map(|n| n.address.as_str()).collect();
    let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_gputop"));
    command.env("HOME", home.path());
    command.env("TERM", "xterm-256color");
    command.args(["--interval", "1", "--remote", &addresses.join(",")]);
    let mut pty = Pty::spawn(command, 200, 40);
    let screen = pty.wait_until("every node judged", 30, |s| s.contains("4 nodes: 1 up, 3 down"));
    let row = |address: &str| {
        screen
            .lines()
            .find(|l| l.contains(address))
            .unwrap_or_else(|| panic!("no row for {address}: {screen}"))
            .to_string()
    };
    assert!(
        row(addresses[0]).contains("devices[0].index: 4294967295 is not a GPU index"),
        "{screen}"
    );
    assert!(row(addresses[1]).contains("missing field `pid`"), "{screen}");
    assert!(row(addresses[2]).contains("more than 8192 items"), "{screen}");
    assert!(row(addresses[3]).contains(" up "), "{screen}");
    // Each bad node was read more than once (retried), and never took much memory.
    std::thread::sleep(Duration::from_secs(3));
    let pid = pty.child.process_id().unwrap();
    let peak = peak_rss_mib(pid);
    eprintln!("peak resident memory of the remote view: {peak} MiB");
    assert!(peak < 200, "peak resident memory {peak} MiB");
    pty.keys("q");
    assert!(pty.wait_exit(5).is_some_and(|s| s.success()), "q quits");
}

#[test]
fn slow_nodes_delay_no_other_and_old_data_says_how_old() {
    let home = tempfile::tempdir().unwrap();
    let good = body(demo_document().to_string());
    let slow: Vec<FakeNode> = (0..16).map(|_| fake_node(Answer::Trickle)).collect();
    let fast = fake_node(good.clone());
    // Answers once, then trickles: its data grows old.
    let fading = fake_node(good);
    let mut addresses: Vec<&str> = slow.iter().map(|n| n.address.as_str()).collect();
    addresses.push(&fast.address);
    addresses.push(&fading.address);
    let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_gputop"));
    command.env("HOME", home.path());
    command.env("TERM", "xterm-256color");
    command.args(["--interval", "1", "--remote", &addresses.join(",")]);
    let started = Instant::now();
    let pty = Pty::spawn(command, 200, 40);
    pty.wait_until("the fading node up", 15, |s| {
        s.lines()
            .any(|l| l.contains(&fading.address) && l.contains(" up "))
    });
    *fading.answer.lock().unwrap() = Answer::Trickle;
    let screen = pty.wait_until("the slow nodes down, the fading one old", 30, |s| {
        s.contains("18 nodes: 1 up, 17 down")
            && s.lines()
                .any(|l| l.contains(&fading.address) && l.contains(" s old"))
    });
    assert!(screen.contains("no whole answer within 5 s"), "{screen}");
    let seconds = started.elapsed().as_secs_f64();
    let fetched = fast.requests.load(std::sync::atomic::Ordering::SeqCst) as f64;
    // One fetch a second (the interval), whatever the slow nodes do.
    assert!(
        fetched >= (seconds - 3.0).floor(),
        "the good node was fetched {fetched} times in {seconds:.0} s"
    );
}

#[test]
fn frames_1e20_seconds_apart_replay_and_quit_without_a_panic() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("gap.rec");
    record_fixture(&file, "gap-host", 3);
    // The second frame 1e20 s after the first: more seconds than the player's wait for it
    // can hold. It is skipped on reading (with the change after it, which builds on it).
    let text = std::fs::read_to_string(&file).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut frame: serde_json::Value = serde_json::from_str(&lines[2]).unwrap();
    frame["t"] = serde_json::json!(1e20);
    lines[2] = frame.to_string();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_gputop"));
    command.env("HOME", home.path());
    command.env("TERM", "xterm-256color");
    command.arg("replay");
    command.arg(&file);
    let mut pty = Pty::spawn(command, 160, 40);
    pty.wait_for("REPLAY");
    pty.keys("}");
    pty.keys("S");
    std::thread::sleep(Duration::from_millis(500));
    pty.keys("q");
    let status = pty.wait_exit(5).expect("q quits");
    assert!(status.success(), "exit status {status:?}");
    let output = String::from_utf8_lossy(&pty.raw.lock().unwrap()).into_owned();
    assert!(
        !output.contains("internal error") && !output.contains("panicked"),
        "{output}"
    );
}

#[test]
fn a_machine_of_nvidia_amd_and_intel_gpus_shows_them_all_in_one_table() {
    let home = tempfile::tempdir().unwrap();
    let machine = common::drm::Machine::start();
    let (sys, proc) = (machine.sysfs(), machine.procfs());
    let extra = [
        "--path.sysfs",
        sys.to_str().unwrap(),
        "--path.procfs",
        proc.to_str().unwrap(),
    ];
    let command = gputop_command(home.path(), &scenario(home.path()), "1 1 1", &extra);
    let pty = Pty::spawn(command, 160, 45);
    // GPU 2 is AMD's A (after NVML's two): blender's engines summed, 70 %. Engine use is a
    // rate: shown from the second refresh.
    let blender = |screen: &str| {
        process_rows(screen)
            .into_iter()
            .find(|r| r.contains("blender") && r.trim_start().starts_with("2 "))
    };
    let near_70 = |row: &str| {
        row.split_whitespace()
            .filter_map(|w| w.parse::<u32>().ok())
            .any(|p| p.abs_diff(70) <= 2)
    };
    let screen = pty.wait_until("every GPU and blender's engine use", 15, |s| {
        s.contains("mpv movie.mkv") && blender(s).is_some_and(|r| near_70(&r))
    });
    for needle in [
        "Sim Zero",
        "AMD GPU 0x744c",
        "amdgpu 0000:03:00.0",
        "amdgpu 0000:43:00.0",
        "Intel GPU 0xe20b",
        "xe 0000:08:00.0",
        "i915 0000:00:02.0",
    ] {
        assert!(screen.contains(needle), "{needle}:\n{screen}");
    }
}

#[test]
#[ignore = "needs Prometheus: a real prometheus server scrapes three exporters"]
fn the_fleet_view_on_prometheus_sorts_filters_and_opens_a_node() {
    let home = tempfile::tempdir().unwrap();
    let exporters: Vec<(common::Killed, u16)> = (0..3)
        .map(|_| {
            let port = common::free_port();
            let child = common::gputop(home.path())
                .env("XDG_STATE_HOME", home.path().join(format!("state-{port}")))
                .args(["export", "--demo", "--processes", "--interval", "0.5"])
                .args(["--web-listen-address", &format!("127.0.0.1:{port}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let exporter = common::Killed(child);
            common::wait_ready(port);
            (exporter, port)
        })
        .collect();
    let target = |i: usize| format!("'127.0.0.1:{}'", exporters[i].1);
    let (_prometheus, web) = common::prometheus_with(
        home.path(),
        &format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: gputop\n    static_configs:\n      \
             - targets: [{}, {}]\n        labels: {{cluster: a}}\n      - targets: [{}]\n        labels: {{cluster: b}}\n",
            target(0),
            target(1),
            target(2)
        ),
    );
    let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_gputop"));
    command.env("HOME", home.path());
    command.env("TERM", "xterm-256color");
    command.args([
        "--interval",
        "1",
        "--prometheus",
        &format!("http://127.0.0.1:{web}"),
    ]);
    let mut pty = Pty::spawn(command, 200, 50);
    let screen = pty.wait_until("three nodes up", 60, |s| {
        s.contains("3 nodes: 3 up, 0 down   GPUs 18") && s.contains("TOP PROCESSES") && s.contains("alice")
    });
    assert!(
        screen.contains(&format!("prometheus http://127.0.0.1:{web}")),
        "{screen}"
    );
    assert!(screen.contains("cluster=b"), "{screen}");
    // Sorted by the next column (STATE), then a filter on a label.
    pty.keys(".");
    pty.wait_for("sorted by STATE");
    pty.keys("/cluster=b\r");
    let screen = pty.wait_until("one node left", 10, |s| {
        s.contains("1 nodes: 1 up, 0 down   GPUs 6")
    });
    let third = format!("127.0.0.1:{}", exporters[2].1);
    assert!(screen.contains(&third), "{screen}");
    // Enter opens it: its GPUs and processes, from the same series.
    pty.keys("\r");
    let screen = pty.wait_until("the node's GPUs", 20, |s| {
        s.contains("NVIDIA H100 80GB HBM3") && s.contains("alice")
    });
    assert!(screen.contains("(remote: no signals)"), "{screen}");
    pty.keys("\x7f");
    pty.wait_for("TOP PROCESSES");
    pty.keys("q");
    assert!(pty.wait_exit(5).is_some_and(|s| s.success()));
}

/// The fleet view of the Prometheus on `port` in a 160x40 pseudo-terminal.
fn fleet_view(home: &Path, port: u16, extra: &[&str]) -> Pty {
    let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_gputop"));
    command.env("HOME", home);
    command.env("TERM", "xterm-256color");
    command.args(["--interval", "1"]);
    command.args(extra);
    command.args(["--prometheus", &format!("http://127.0.0.1:{port}")]);
    Pty::spawn(command, 160, 40)
}

#[test]
fn the_fleet_view_says_why_prometheus_gives_nothing_and_keeps_answering_keys() {
    // A Prometheus behind a proxy that wants a login: every query gets 401.
    let port = common::fake_http(|_| {
        Some(
            b"HTTP/1.1 401 Unauthorized\r\nContent-Type: text/plain\r\nContent-Length: 13\r\nConnection: close\r\n\r\nUnauthorized\n"
                .to_vec(),
        )
    });
    let home = tempfile::tempdir().unwrap();
    let mut pty = fleet_view(home.path(), port, &[]);
    let screen = pty.wait_for("no data yet: answered HTTP 401");
    assert!(screen.contains("0 nodes: 0 up, 0 down"), "{screen}");
    // Keys still work while nothing comes: help opens and closes, q quits.
    pty.keys("h");
    pty.wait_for("Fleet view: the cluster");
    pty.keys("q");
    pty.keys("q");
    assert!(pty.wait_exit(5).is_some_and(|s| s.success()));
}

/// The one node of the fake Prometheus' `up`, as a sample of its answer.
const ONE_NODE_UP: &str = r#"{"metric":{"instance":"gpu-1:9835","job":"gputop"},"value":[1,"1"]}"#;

#[test]
fn a_prometheus_that_stops_answering_shows_as_data_growing_old() {
    // Answers for two seconds (one node, no other series), then holds every request.
    let started = Instant::now();
    let port = common::fake_http(move |request| {
        if started.elapsed() > Duration::from_secs(2) {
            return None;
        }
        let result = if request.contains("query=up%7B") {
            ONE_NODE_UP
        } else {
            ""
        };
        Some(common::json_response(&common::prometheus_vector(result)))
    });
    let home = tempfile::tempdir().unwrap();
    let mut pty = fleet_view(home.path(), port, &["--prometheus-timeout", "60"]);
    pty.wait_for("1 nodes: 1 up, 0 down");
    let screen = pty.wait_until("the data said to be old", 15, |s| {
        s.contains("waiting for Prometheus' answers") && s.contains(" s old")
    });
    assert!(screen.contains("gpu-1:9835"), "the last figures stay: {screen}");
    pty.keys("q");
    assert!(
        pty.wait_exit(5).is_some_and(|s| s.success()),
        "q quits while it waits"
    );
}

/// How many times the fleet view asks `up` in four seconds at `--interval 1`, against a
/// Prometheus whose `up` holds `samples` samples over five minutes (21: a scrape every 15 s).
fn up_queries_in_four_seconds(samples: u32) -> usize {
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&asked);
    let port = common::fake_http(move |request| {
        let result = if request.contains("count_over_time") {
            format!(r#"{{"metric":{{}},"value":[1,"{samples}"]}}"#)
        } else if request.contains("query=up%7B") {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            ONE_NODE_UP.to_string()
        } else {
            String::new()
        };
        Some(common::json_response(&common::prometheus_vector(&result)))
    });
    let home = tempfile::tempdir().unwrap();
    let mut pty = fleet_view(home.path(), port, &[]);
    pty.wait_for("1 nodes: 1 up, 0 down");
    std::thread::sleep(Duration::from_secs(4));
    let count = asked.load(std::sync::atomic::Ordering::SeqCst);
    pty.keys("q");
    assert!(pty.wait_exit(5).is_some_and(|s| s.success()));
    count
}

#[test]
fn the_fleet_view_refreshes_no_faster_than_prometheus_scrapes() {
    // Scraped every 15 s: asking every second would show the same samples again.
    assert_eq!(up_queries_in_four_seconds(21), 1, "one refresh in 4 s");
    // Scraped every second: --interval 1 holds.
    let every_second = up_queries_in_four_seconds(301);
    assert!(every_second >= 3, "{every_second} refreshes in 4 s");
}

/// The screen judges alerts on the whole machine: with `--user alice` the GPUs that only
/// other users' processes hold are still held, never free.
#[test]
fn a_user_filter_leaves_the_alert_screen_judging_the_whole_machine() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("holders.toml");
    let rule = |name: &str, holders: &str| {
        format!(
            "[[alert.rules]]\nname = \"{name}\"\nmetric = \"temperature\"\nthreshold = 1\n\
             window = 1\nholders = \"{holders}\"\nseverity = \"critical\"\n\n"
        )
    };
    std::fs::write(&config, rule("held", "some") + &rule("free", "none")).unwrap();
    let config = config.to_str().unwrap();
    let command = demo_command(
        home.path(),
        &["--interval", "0.5", "--user", "alice", "--config", config],
    );
    let mut pty = Pty::spawn(command, 160, 45);
    let screen = pty.wait_for("alice");
    assert!(!screen.contains("bob"), "the filter shows alice's only: {screen}");
    pty.keys("A");
    let screen = pty.wait_until("every GPU judged", 15, |s| {
        (0..6).all(|gpu| s.contains(&format!("GPU {gpu}: held (")))
    });
    assert!(!screen.contains(": free ("), "{screen}");
    pty.keys("A");
    pty.keys("q");
    assert!(pty.wait_exit(5).is_some_and(|s| s.success()));
}

/// `--once` on an 80-column terminal: no line wider than the terminal, and the processes
/// with the live view's columns and cell texts (the command cut at the same place). In a
/// pipe it keeps every column and the whole command.
#[test]
fn once_in_an_80_column_terminal_fits_it_with_the_live_views_cells() {
    let home = tempfile::tempdir().unwrap();
    let long = "--data /datasets/imagenet/train --epochs 90 --batch-size 256 --lr 0.1";
    let jobs: Vec<common::Killed> = (0..3)
        .map(|_| {
            common::Killed(
                Command::new("sh")
                    .args(["-c", "sleep 600; :", "train.py"])
                    .args(long.split(' '))
                    .stdin(Stdio::null())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    let pids = jobs
        .iter()
        .map(|j| j.0.id().to_string())
        .collect::<Vec<_>>()
        .join(" ");
    let scenario = scenario(home.path());

    let mut once = Pty::spawn(gputop_command(home.path(), &scenario, &pids, &["--once"]), 80, 40);
    assert!(
        once.wait_exit(15).is_some_and(|s| s.success()),
        "{}",
        once.screen()
    );
    std::thread::sleep(Duration::from_millis(200));
    let raw = String::from_utf8_lossy(&once.raw.lock().unwrap()).into_owned();
    let printed: Vec<&str> = raw.split("\r\n").collect();
    for line in &printed {
        assert!(
            line.chars().count() <= 80,
            "{} columns: {line:?}\n{raw}",
            line.chars().count()
        );
    }
    let header = printed
        .iter()
        .position(|l| l.trim_start().starts_with("GPU") && l.contains(" PID "))
        .unwrap_or_else(|| panic!("no process table: {raw}"));
    let once_rows: Vec<&str> = printed[header + 1..]
        .iter()
        .take_while(|l| !l.trim().is_empty())
        .copied()
        .collect();
    assert_eq!(once_rows.len(), 3, "{raw}");

    let live = Pty::spawn(gputop_command(home.path(), &scenario, &pids, &[]), 80, 24);
    let screen = live.wait_until("three process rows", 15, |s| {
        s.lines().filter(|l| l.contains("sh -c sleep 600")).count() == 3
    });
    let live_rows: Vec<&str> = screen.lines().filter(|l| l.contains("sh -c sleep 600")).collect();
    // The same cells, TIME aside (the two runs are a moment apart): the live header names
    // the columns and where each starts.
    let live_header = screen
        .lines()
        .find(|l| l.contains(" PID ") && l.contains("COMMAND"))
        .unwrap();
    assert_eq!(
        printed[header].split_whitespace().collect::<Vec<_>>(),
        live_header
            .replace(['▼', 'v'], "")
            .split_whitespace()
            .collect::<Vec<_>>(),
        "the live view's columns"
    );
    // TIME's 9 columns start under its header (counted in characters: the sort arrow is one).
    let time = live_header
        .char_indices()
        .position(|(at, _)| live_header[at..].starts_with("TIME"))
        .unwrap();
    let without_time = |row: &str| {
        let mut row: Vec<char> = row.chars().collect();
        row.drain(time..time + 9);
        row.into_iter().collect::<String>().trim_end().to_string()
    };
    let mut once_cells: Vec<String> = once_rows.iter().map(|r| without_time(r)).collect();
    let mut live_cells: Vec<String> = live_rows.iter().map(|r| without_time(r)).collect();
    once_cells.sort();
    live_cells.sort();
    assert_eq!(once_cells, live_cells, "\n{raw}\n{screen}");
    assert!(
        once_cells
            .iter()
            .all(|c| c.ends_with(" sh -c sleep 600; : train.p")),
        "the command cut where the live view cuts it: {once_cells:?}"
    );

    // In a pipe: every column and the whole command.
    let output = Command::new(env!("CARGO_BIN_EXE_gputop"))
        .env("HOME", home.path())
        .env("GPUTOP_SIM_SCENARIO", &scenario)
        .env("GPUTOP_SIM_PIDS", &pids)
        .args(["--nvml-lib", common::sim_lib().to_str().unwrap(), "--once"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains(&format!("train.py {long}")), "{text}");
    assert!(
        text.contains(" TYPE ") && text.contains(" %GMBW ") && text.contains(" %MEM "),
        "{text}"
    );
}

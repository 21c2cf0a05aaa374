//! Shared test harness: the gputop binary, the simulated NVML library, scenarios, and real
//! processes whose PIDs scenarios refer to.
#![allow(dead_code)]

pub mod drm;
pub mod fixtures;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// The simulated `libnvidia-ml.so.1` built by cargo for this test run.
pub fn sim_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    let lib = deps.join("libnvml_sim.so");
    assert!(
        lib.exists(),
        "{} is missing: run the tests with `cargo test --workspace`",
        lib.display()
    );
    lib
}

/// The simulator's `nvidia-smi`, built by cargo beside the library.
pub fn sim_nvidia_smi() -> PathBuf {
    let lib = sim_lib();
    let smi = lib
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("nvidia-smi");
    assert!(
        smi.exists(),
        "{} is missing: run the tests with `cargo test --workspace`",
        smi.display()
    );
    smi
}

/// A directory holding the simulator as `libnvidia-ml.so.1`, for `LD_LIBRARY_PATH`.
pub fn sim_lib_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::copy(sim_lib(), dir.path().join("libnvidia-ml.so.1")).expect("copy the simulator");
    dir
}

/// A directory holding `scenario_text` as the scenario beside a `libnvidia-ml.so.1` that
/// exports only what the scenario's driver version has, as that driver's library does.
pub fn driver_dir(scenario_text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    nvml_sim::profile::write_driver_library(&sim_lib(), scenario_text, &dir.path().join("libnvidia-ml.so.1"))
        .expect("write the driver's library");
    std::fs::write(dir.path().join("gputop-sim.toml"), scenario_text).expect("write the scenario");
    dir
}

/// gputop on the driver of [`driver_dir`] at manual scenario time `t_ms`.
pub fn gputop_on_driver(home: &Path, driver: &Path, t_ms: u64) -> Command {
    let mut command = gputop(home);
    command
        .arg("--nvml-lib")
        .arg(driver.join("libnvidia-ml.so.1"))
        .env("GPUTOP_SIM_CLOCK", "manual")
        .env("GPUTOP_SIM_TIME_MS", t_ms.to_string());
    command
}

pub fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scenarios")
        .join(format!("{name}.toml"))
}

/// The gputop binary with a clean environment: no user config, no simulator settings, and
/// a sysfs without GPUs, so that the simulated NVIDIA GPUs are the machine's only ones (an
/// Intel or AMD GPU of the machine running the tests stays out).
pub fn gputop(home: &Path) -> Command {
    gputop_with_sysfs(home, &home.join("no-sysfs"))
}

/// [`gputop`] reading AMD and Intel GPUs from `sysfs`.
pub fn gputop_with_sysfs(home: &Path, sysfs: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gputop"));
    command.arg("--path.sysfs").arg(sysfs);
    for (key, _) in std::env::vars() {
        if key.starts_with("GPUTOP_")
            || ["NO_COLOR", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "STATE_DIRECTORY"].contains(&key.as_str())
        {
            command.env_remove(key);
        }
    }
    command
        .env("HOME", home)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null());
    command
}

/// gputop on the simulator with `scenario` at manual scenario time `t_ms`.
pub fn gputop_on(home: &Path, scenario_path: &Path, t_ms: u64) -> Command {
    let mut command = gputop(home);
    command
        .arg("--nvml-lib")
        .arg(sim_lib())
        .env("GPUTOP_SIM_SCENARIO", scenario_path)
        .env("GPUTOP_SIM_CLOCK", "manual")
        .env("GPUTOP_SIM_TIME_MS", t_ms.to_string());
    command
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs and returns the parsed `--json` document, failing with stderr on a non-zero exit.
pub fn json(mut command: Command) -> serde_json::Value {
    let output = command.args(["--once", "--json"]).output().expect("run gputop");
    assert!(output.status.success(), "gputop failed: {}", stderr(&output));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(&output)))
}

/// Real idle processes, killed on drop.
pub struct Sleepers {
    children: Vec<Child>,
}

impl Sleepers {
    pub fn spawn(count: usize) -> Self {
        let children = (0..count)
            .map(|_| {
                Command::new("sleep")
                    .arg("600")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("spawn sleep")
            })
            .collect();
        Self { children }
    }

    /// The `i`-th process, to wait on or probe.
    pub fn child(&mut self, i: usize) -> &mut Child {
        &mut self.children[i]
    }

    /// Whether the `i`-th process still runs.
    pub fn alive(&mut self, i: usize) -> bool {
        self.children[i].try_wait().expect("try_wait").is_none()
    }

    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// The PIDs as `GPUTOP_SIM_PIDS` wants them.
    pub fn env(&self) -> String {
        self.pids()
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl Drop for Sleepers {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A PID that no process has: a child that has exited and been reaped.
pub fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().expect("wait");
    pid
}

/// In a private mount namespace: /dev replaced by a tmpfs holding the few real nodes the
/// tools need and a stand-in `/dev/nvidia0`, so a process can hold an "NVIDIA device" open
/// without touching the machine's /dev.
pub const FAKE_NVIDIA_DEV: &str = r#"
old=$(mktemp -d)
mount --bind /dev "$old"
mount -t tmpfs tmpfs /dev
for node in null zero tty urandom; do touch /dev/$node; mount --bind "$old/$node" /dev/$node; done
mkdir /dev/pts && mount --bind "$old/pts" /dev/pts
touch /dev/nvidia0
"#;

/// Shell: sets `host` to the host's PID of this namespace's process `$local`. Other tests'
/// namespaces run at the same time and number from 1 too, so the NSpid match alone can name
/// a stranger: the candidate must also be in this shell's PID namespace.
pub const HOST_PID_OF_LOCAL: &str = r#"
host=
mine=$(readlink /proc/self/ns/pid)
for status in $(grep -lE "^NSpid:[[:space:]]+[0-9]+[[:space:]]+$local\$" /proc/[0-9]*/status 2>/dev/null); do
    candidate=${status#/proc/}; candidate=${candidate%/status}
    if [ "$(readlink /proc/$candidate/ns/pid 2>/dev/null)" = "$mine" ]; then host=$candidate; break; fi
done
"#;

/// Fails a root-only test run without root, and one whose namespaces cannot be made: such a
/// test is `#[ignore]`d, so it runs only when asked for.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test needs root (it is ignored unless asked for: run `sudo bash .ci/all-tests`)"
    );
}

/// [`require_root`], and PID namespaces that `unshare` can create.
pub fn require_namespaces() {
    require_root();
    let probe = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .status()
        .expect("unshare (util-linux) is needed");
    assert!(probe.success(), "unshare --pid --fork --mount-proc failed");
}

/// Panics with every violation when `doc` is not a snapshot as `config/snapshot.schema.json`
/// describes it.
pub fn assert_matches_schema(doc: &serde_json::Value, what: &str) {
    assert_matches_schema_file(doc, what, "config/snapshot.schema.json");
}

/// Panics with every violation when `doc` is not as the schema `file` (from the repository's
/// root) describes.
pub fn assert_matches_schema_file(doc: &serde_json::Value, what: &str, file: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let validator = jsonschema::draft202012::new(&schema).expect("a valid JSON Schema");
    let errors: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not match the schema:\n{}",
        errors.join("\n")
    );
}

/// A TCP port free on 127.0.0.1 now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A GET (or any raw request) and its status, headers and body.
pub fn request(port: u16, raw: &str) -> (u16, String, String) {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new(), String::new());
    };
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    stream.write_all(raw.as_bytes()).unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    (status, head.to_string(), body)
}

/// The body of a chunked response (Prometheus's API answers so).
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}

pub fn get(port: u16, path: &str) -> (u16, String, String) {
    request(
        port,
        &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"),
    )
}

/// Waits (up to 20 s) until the exporter on `port` has a snapshot to serve.
pub fn wait_ready(port: u16) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while get(port, "/-/ready").0 != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "the exporter never got ready"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A child process killed (and reaped) when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A 200 answer with the JSON `body`, head and all, for [`fake_http`].
pub fn json_response(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Prometheus' answer to an instant query: a vector of `result` (samples, comma-separated).
pub fn prometheus_vector(result: &str) -> String {
    format!(r#"{{"status":"success","data":{{"resultType":"vector","result":[{result}]}}}}"#)
}

/// A fake HTTP server on a free port: each request's head is answered with the bytes
/// `reply` gives (head and body), or held a minute when it gives `None`.
pub fn fake_http(reply: impl Fn(&str) -> Option<Vec<u8>> + Send + Sync + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let reply = std::sync::Arc::new(reply);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let reply = std::sync::Arc::clone(&reply);
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                match reply(&String::from_utf8_lossy(&head)) {
                    Some(bytes) => {
                        let _ = stream.write_all(&bytes);
                        let _ = stream.flush();
                    }
                    None => std::thread::sleep(Duration::from_secs(60)),
                }
            });
        }
    });
    port
}

/// A real Prometheus with the configuration `config`, its data in `home`; returns it and its
/// web port.
pub fn prometheus_with(home: &Path, config: &str) -> (Killed, u16) {
    let path = home.join("prometheus.yml");
    std::fs::write(&path, config).unwrap();
    let web = free_port();
    let prometheus = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", path.display()))
            .arg(format!("--storage.tsdb.path={}", home.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus: install the Debian package `prometheus` (`bash .ci/all-tests` does)"),
    );
    (prometheus, web)
}

/// Asserts that `promtool check metrics` finds nothing to say of `exposition`.
pub fn promtool_checks_metrics(exposition: &str) {
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool: install the Debian package `prometheus` (`bash .ci/all-tests` does)");
    check
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let checked = check.wait_with_output().unwrap();
    assert!(
        checked.status.success() && checked.stdout.is_empty() && checked.stderr.is_empty(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

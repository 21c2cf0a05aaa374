//! `gputop export` and `gputop rules` through the real binary on the simulator: a real
//! Prometheus server scrapes it and answers the scenario's values; promtool checks the
//! exposition and the rules (and runs the rules' unit tests); concurrent, malformed and
//! slow clients neither stop the exporter nor the collector; the Grafana dashboard uses
//! only names the exporter serves.
//!
//! The tests that run `prometheus` or `promtool` (Debian package `prometheus`) are ignored
//! unless asked for: `bash .ci/all-tests` installs the package and runs them, as CI does.
//! Asked for without the programs, they fail and say so.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Killed, Sleepers, free_port, get, gputop, prometheus_with, request, scenario, wait_ready};

/// Fails a test that needs the Prometheus tools when they are missing, saying how to get them.
fn require_prometheus_tools() {
    for tool in ["prometheus", "promtool"] {
        let found = Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            found,
            "{tool} is missing: install the Debian package `prometheus` (`bash .ci/all-tests` does)"
        );
    }
}

/// `gputop export` on `scenario_path` at scenario time 100 s, frozen.
fn exporter(home: &Path, scenario_path: &Path, pids: &str, extra: &[&str]) -> (Killed, u16) {
    let (mut command, port) = exporter_command(home, scenario_path, pids, extra);
    listening(Killed(command.spawn().unwrap()), port)
}

/// The command `exporter` runs, and the port it will listen on.
fn exporter_command(home: &Path, scenario_path: &Path, pids: &str, extra: &[&str]) -> (Command, u16) {
    let port = free_port();
    let mut command = gputop(home);
    command
        .arg("--nvml-lib")
        .arg(common::sim_lib())
        .env("GPUTOP_SIM_SCENARIO", scenario_path)
        .env("GPUTOP_SIM_CLOCK", "manual")
        .env("GPUTOP_SIM_TIME_MS", "100000")
        .env("GPUTOP_SIM_PIDS", pids)
        .args([
            "export",
            "--web-listen-address",
            &format!("127.0.0.1:{port}"),
            "--interval",
            "0.2",
        ])
        .args(extra)
        .stderr(Stdio::null());
    (command, port)
}

/// `exporter` once it accepts connections on `port`.
fn listening(exporter: Killed, port: u16) -> (Killed, u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return (exporter, port);
        }
        assert!(Instant::now() < deadline, "the exporter did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`exporter`], once it has a snapshot to serve.
fn ready_exporter(home: &Path, scenario_path: &Path, pids: &str, extra: &[&str]) -> (Killed, u16) {
    let (exporter, port) = exporter(home, scenario_path, pids, extra);
    wait_ready(port);
    (exporter, port)
}

/// Metric names in an exposition.
fn names(exposition: &str) -> Vec<String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect()
}

/// A real Prometheus scraping the exporter on `port` every second (with `rules` loaded);
/// returns it and its web port.
fn start_prometheus(home: &Path, port: u16, rules: Option<&Path>) -> (Killed, u16) {
    let rule_files = rules.map_or(String::new(), |r| format!("rule_files:\n  - {}\n", r.display()));
    prometheus_with(
        home,
        &format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n{rule_files}\
             scrape_configs:\n  - job_name: gputop\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    )
}

/// The result vector of an instant query; empty until Prometheus answers.
fn query(web: u16, q: &str) -> Vec<serde_json::Value> {
    let (status, _, body) = get(web, &format!("/api/v1/query?query={q}"));
    if status != 200 {
        return Vec::new();
    }
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    doc["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// Polls `q` until `done` holds of its result (90 s at most).
fn query_until(web: u16, q: &str, done: impl Fn(&[serde_json::Value]) -> bool) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let result = query(web, q);
        if done(&result) {
            return result;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never answered {q} as expected: {result:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
#[ignore = "needs Prometheus: a real prometheus server scrapes the exporter"]
fn a_real_prometheus_scrapes_the_scenario_values_and_loads_the_rules() {
    require_prometheus_tools();
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(3);
    let (_exporter, port) = ready_exporter(
        home.path(),
        &scenario("two-gpus-training"),
        &sleepers.env(),
        &["--processes"],
    );
    let rules = home.path().join("gputop-rules.yml");
    let generated = gputop(home.path())
        .args(["rules", "--scrape-interval", "1"])
        .output()
        .unwrap();
    std::fs::write(&rules, &generated.stdout).unwrap();
    let (_prometheus, web) = start_prometheus(home.path(), port, Some(&rules));
    let query = |q: &str| query(web, q);
    let temperatures = query_until(web, "gputop_gpu_temperature_celsius", |r| r.len() == 2);
    let by_gpu = |result: &[serde_json::Value]| -> BTreeMap<String, f64> {
        result
            .iter()
            .map(|r| {
                (
                    r["metric"]["gpu"].as_str().unwrap().to_string(),
                    r["value"][1].as_str().unwrap().parse::<f64>().unwrap(),
                )
            })
            .collect()
    };
    // The scenario's values at t = 100 s.
    assert_eq!(
        by_gpu(&temperatures),
        BTreeMap::from([("0".into(), 76.0), ("1".into(), 58.0)])
    );
    assert_eq!(
        by_gpu(&query("gputop_gpu_power_watts")),
        BTreeMap::from([("0".into(), 312.0), ("1".into(), 201.5)])
    );
    assert_eq!(
        by_gpu(&query("gputop_gpu_memory_total_bytes")),
        BTreeMap::from([
            ("0".into(), 40.0 * 1073741824.0),
            ("1".into(), 40.0 * 1073741824.0)
        ])
    );
    let snapshot: serde_json::Value = serde_json::from_str(&get(port, "/snapshot").2).unwrap();
    let used = by_gpu(&query("gputop_gpu_memory_used_bytes"));
    assert_eq!(
        used["0"],
        snapshot["devices"][0]["memory_used_bytes"].as_f64().unwrap()
    );
    assert_eq!(query("gputop_process_gpu_memory_bytes").len(), 3);
    assert_eq!(query("gputop_up")[0]["value"][1], "1");
    // The target is healthy (the content type is accepted) and every rule loaded.
    let (_, _, targets) = get(web, "/api/v1/targets");
    assert!(targets.contains("\"health\":\"up\""), "{targets}");
    let (_, _, loaded) = get(web, "/api/v1/rules");
    let doc: serde_json::Value = serde_json::from_str(&loaded).unwrap();
    let count = doc["data"]["groups"][0]["rules"].as_array().map_or(0, Vec::len);
    assert_eq!(count, 8, "{loaded}");
}

/// Every query of the Grafana dashboard returns data from the scrape of Prometheus on `web`.
fn every_dashboard_query_returns_data(web: u16) {
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("config/grafana/gputop.json"))
            .unwrap(),
    )
    .unwrap();
    let encode = |q: &str| -> String {
        q.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
                b => format!("%{b:02X}"),
            })
            .collect()
    };
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap().replace("$instance", ".*");
            let result = query_until(web, &encode(&expr), |r| !r.is_empty());
            assert!(!result.is_empty(), "{}: {expr}", panel["title"]);
        }
    }
}

/// Four GPUs, each crossing some of the built-in rules' thresholds (the sim's clock runs):
/// GPU 0 at 95 % memory and 90 °C, with NVLinks (one counting replays); GPU 1's memory rising
/// 2 points a second for 30 s of each 40 (its process's); GPU 2 at 5 % held by a process
/// whose memory grows 0.5 GiB a second; GPU 3 idle and free, reporting an application's Xid
/// (31) at 8 s and a critical one (48) at 10 s.
const EVERY_RULE_CROSSED: &str = r#"[meta]
version = 1
name = "every-rule-crossed"

[[gpu]]
memory_total = "40 GiB"
memory_base_used = "0 MiB"
nvlink = { links = 4, replay = [0, 3] }
[gpu.dynamic]
utilization_gpu = 90
temperature = 90
[[gpu.process]]
pid_env = "GPUTOP_SIM_PIDS"
pid_index = 0
used_memory = "38 GiB"

[[gpu]]
memory_total = "40 GiB"
memory_base_used = "0 MiB"
[gpu.dynamic]
utilization_gpu = 90
temperature = 50
[[gpu.process]]
pid_env = "GPUTOP_SIM_PIDS"
pid_index = 1
used_memory = { keyframes = [[0, "1 GiB"], [30, "25 GiB"], [40, "1 GiB"]], interp = "linear", repeat = 40 }

[[gpu]]
memory_total = "80 GiB"
memory_base_used = "0 MiB"
[gpu.dynamic]
utilization_gpu = 5
temperature = 40
[[gpu.process]]
pid_env = "GPUTOP_SIM_PIDS"
pid_index = 2
used_memory = { keyframes = [[0, "1 GiB"], [120, "61 GiB"]], interp = "linear" }

[[gpu]]
memory_total = "80 GiB"
memory_base_used = "0 MiB"
[gpu.dynamic]
utilization_gpu = 0
temperature = 30
[[gpu.xid]]
at = 8.0
xid = 31
[[gpu.xid]]
at = 10.0
xid = 48
"#;

/// The built-in rules with short windows, so a test sees each fire within two minutes: seconds
/// for the device rules, 100 s for the process rule (the shortest a steady increase can have:
/// process history keeps 10 s aggregates).
const SHORT_WINDOWS: &str = r#"[[alert.rules]]
name = "gpu_memory_high"
metric = "memory_percent"
threshold = 85
clear = 80
window = 4
[[alert.rules]]
name = "gpu_memory_rising"
metric = "memory_percent"
function = "increase"
threshold = 20
window = 20
min_coverage = 0.75
severity = "info"
[[alert.rules]]
name = "gpu_idle_reserved"
metric = "utilization"
comparison = "<"
threshold = 20
clear = 25
window = 4
for = 3
holders = "some"
[[alert.rules]]
name = "gpu_idle_free"
metric = "utilization"
comparison = "<"
threshold = 20
clear = 25
window = 4
for = 3
holders = "none"
severity = "info"
[[alert.rules]]
name = "gpu_temperature_high"
metric = "temperature"
threshold = 80
clear = 77
window = 4
[[alert.rules]]
name = "gpu_temperature_critical"
metric = "temperature"
threshold = 85
clear = 82
window = 4
severity = "critical"
[[alert.rules]]
name = "process_memory_leak"
scope = "process"
metric = "gpu_memory_mib"
function = "steady_increase"
threshold = 256
clear = 0
window = 100
min_coverage = 0.75
severity = "critical"
[[alert.rules]]
name = "gpu_xid_error"
metric = "critical_xids"
function = "range"
threshold = 0
window = 20
min_coverage = 0.05
severity = "critical"
"#;

#[test]
#[ignore = "needs Prometheus: a real prometheus server evaluates the generated rules"]
fn each_generated_rule_fires_in_a_real_prometheus_where_its_threshold_is_crossed() {
    require_prometheus_tools();
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(3);
    let scenario_path = home.path().join("every-rule-crossed.toml");
    std::fs::write(&scenario_path, EVERY_RULE_CROSSED).unwrap();
    let config = home.path().join("short-windows.toml");
    std::fs::write(&config, SHORT_WINDOWS).unwrap();
    let rules = home.path().join("gputop-rules.yml");
    let generated = gputop(home.path())
        .arg("--config")
        .arg(&config)
        .args(["rules", "--scrape-interval", "1"])
        .output()
        .unwrap();
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    std::fs::write(&rules, &generated.stdout).unwrap();
    let port = free_port();
    let child = gputop(home.path())
        .arg("--nvml-lib")
        .arg(common::sim_lib())
        .env("GPUTOP_SIM_SCENARIO", &scenario_path)
        .env("GPUTOP_SIM_PIDS", sleepers.env())
        .arg("--config")
        .arg(&config)
        .args([
            "export",
            "--processes",
            "--interval",
            "0.5",
            "--web-listen-address",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (_exporter, port) = listening(Killed(child), port);
    wait_ready(port);
    let (_prometheus, web) = start_prometheus(home.path(), port, Some(&rules));

    // (rule, GPU) pairs: each must be seen firing in Prometheus and in the exporter's own
    // judgement; the quiet ones never.
    let expected: BTreeSet<(String, String)> = [
        ("gpu_memory_high", "0"),
        ("gpu_temperature_high", "0"),
        ("gpu_temperature_critical", "0"),
        ("gpu_memory_rising", "1"),
        ("gpu_idle_reserved", "2"),
        ("process_memory_leak", "2"),
        ("gpu_idle_free", "3"),
        ("gpu_xid_error", "3"),
    ]
    .into_iter()
    .map(|(r, g)| (r.to_string(), g.to_string()))
    .collect();
    let mut in_prometheus = BTreeSet::new();
    let mut in_gputop = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(180);
    while (in_prometheus != expected || in_gputop != expected) && Instant::now() < deadline {
        let (_, _, body) = get(web, "/api/v1/alerts");
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        for alert in doc["data"]["alerts"].as_array().into_iter().flatten() {
            if alert["state"] == "firing" {
                let labels = &alert["labels"];
                let pair = (
                    labels["alertname"].as_str().unwrap_or("").to_string(),
                    labels["gpu"].as_str().unwrap_or("").to_string(),
                );
                assert!(expected.contains(&pair), "Prometheus fired {pair:?}: {alert}");
                in_prometheus.insert(pair);
            }
        }
        let doc: serde_json::Value = serde_json::from_str(&get(port, "/snapshot").2).unwrap_or_default();
        for alert in doc["alerts"].as_array().into_iter().flatten() {
            if alert["state"] == "firing" {
                let pair = (
                    alert["rule"].as_str().unwrap_or("").to_string(),
                    alert["gpu_index"].to_string(),
                );
                assert!(expected.contains(&pair), "gputop fired {pair:?}: {alert}");
                in_gputop.insert(pair);
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(in_prometheus, expected, "fired in Prometheus");
    assert_eq!(in_gputop, expected, "fired in the exporter");
    every_dashboard_query_returns_data(web);
}

/// Runs `program` with `args` in `dir`, which must succeed.
fn run_in(dir: &Path, program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate it signed, made by
/// openssl in `dir`.
fn make_certificates(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let request = |name: &str, subject: &str| {
        let mut args = vec!["req"];
        args.extend(ec);
        let (key, csr) = (format!("{name}.key"), format!("{name}.csr"));
        args.extend(["-keyout", &key, "-out", &csr, "-subj", subject]);
        run_in(dir, "openssl", &args);
    };
    let mut args = vec!["req", "-x509"];
    args.extend(ec);
    args.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=gputop test CA",
    ]);
    run_in(dir, "openssl", &args);
    std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for (name, subject) in [("server", "/CN=127.0.0.1"), ("client", "/CN=prometheus")] {
        request(name, subject);
        let (csr, crt, ext) = (
            format!("{name}.csr"),
            format!("{name}.crt"),
            format!("{name}.ext"),
        );
        run_in(
            dir,
            "openssl",
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
        );
    }
}

/// curl's HTTP status for `url` with `args` ("000" when the connection itself failed).
fn curl_status(dir: &Path, url: &str, args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10"])
        .args(args)
        .arg(url)
        .current_dir(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[ignore = "needs Prometheus, curl and openssl: a real Prometheus scrapes over TLS with basic auth"]
fn a_web_config_file_serves_tls_with_basic_auth_and_client_certificates_to_prometheus() {
    require_prometheus_tools();
    let home = tempfile::tempdir().unwrap();
    let dir = home.path();
    make_certificates(dir);
    let hash = bcrypt::hash("s3cr3t word", 4).unwrap();
    std::fs::write(
        dir.join("web.yml"),
        format!(
            "# exporter-toolkit's format; paths relative to this file\ntls_server_config:\n  \
             cert_file: server.crt\n  key_file: server.key\n  client_auth_type: RequireAndVerifyClientCert\n  \
             client_ca_file: ca.crt\nbasic_auth_users:\n  prometheus: {hash}\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let child = gputop(dir)
        .args(["--demo", "export", "--web.config.file"])
        .arg(dir.join("web.yml"))
        .arg("--web-listen-address")
        .arg(format!("127.0.0.1:{port}"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (_exporter, port) = listening(Killed(child), port);
    let url = format!("https://127.0.0.1:{port}/metrics");
    let client = [
        "--cacert",
        "ca.crt",
        "--cert",
        "client.crt",
        "--key",
        "client.key",
    ];
    let with = |extra: &[&str]| {
        let mut args: Vec<&str> = client.to_vec();
        args.extend(extra);
        curl_status(dir, &url, &args)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while with(&["-u", "prometheus:s3cr3t word"]) != "200" {
        assert!(
            Instant::now() < deadline,
            "never served over TLS with the password"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(with(&[]), "401", "no credentials");
    assert_eq!(with(&["-u", "prometheus:wrong"]), "401", "a wrong password");
    assert_eq!(with(&["-u", "someone:s3cr3t word"]), "401", "an unknown user");
    assert_eq!(
        curl_status(dir, &url, &["--cacert", "ca.crt", "-u", "prometheus:s3cr3t word"]),
        "000",
        "no client certificate: the handshake fails"
    );
    assert_eq!(
        curl_status(dir, &format!("http://127.0.0.1:{port}/metrics"), &[]),
        "000",
        "plain HTTP is not answered"
    );

    // A real Prometheus scrapes it with the CA, its client certificate and the password.
    let (_prometheus, web) = prometheus_with(
        dir,
        &format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: gputop\n    scheme: https\n    \
             tls_config:\n      ca_file: {d}/ca.crt\n      cert_file: {d}/client.crt\n      key_file: {d}/client.key\n    \
             basic_auth:\n      username: prometheus\n      password: 's3cr3t word'\n    \
             static_configs:\n      - targets: ['127.0.0.1:{port}']\n",
            d = dir.display()
        ),
    );
    let up = query_until(web, "up", |r| r.first().is_some_and(|s| s["value"][1] == "1"));
    assert_eq!(up[0]["metric"]["instance"], format!("127.0.0.1:{port}"));
    let gpus = query_until(web, "gputop_gpu_info", |r| !r.is_empty());
    assert_eq!(
        gpus.len(),
        6,
        "the demo machine's GPUs (four NVIDIA, an AMD, an Intel), scraped over TLS"
    );
}

#[test]
fn a_bad_web_config_file_is_refused_at_start_with_where_and_why() {
    let home = tempfile::tempdir().unwrap();
    let cases: [(&str, &[&str]); 5] = [
        (
            "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  cipher_suits: [x]\n",
            &["web.yml:4:3:", "unknown field `cipher_suits`"],
        ),
        (
            "basic_auth_users:\n  prometheus: hunter2\n",
            &[
                "web.yml: basic_auth_users: prometheus: not a bcrypt hash",
                "htpasswd",
            ],
        ),
        (
            "tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n",
            &["web.yml: tls_server_config:", "missing.crt"],
        ),
        (
            "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  client_auth_type: RequireAnyClientCert\n",
            &[
                "client_auth_type: RequireAnyClientCert",
                "RequireAndVerifyClientCert",
            ],
        ),
        (
            "http_server_config:\n  http2: true\n",
            &["http2", "HTTP/1.1 only"],
        ),
    ];
    for (text, expected) in cases {
        let path = home.path().join("web.yml");
        std::fs::write(&path, text).unwrap();
        let out = gputop(home.path())
            .args(["--demo", "export", "--web-config-file"])
            .arg(&path)
            .args(["--web-listen-address", "127.0.0.1:0"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{text}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        for part in expected {
            assert!(stderr.contains(part), "{text}: {stderr} lacks {part}");
        }
    }
}

#[test]
fn clock_event_reasons_are_series_each_active_or_not_with_their_seconds() {
    let home = tempfile::tempdir().unwrap();
    let (_exporter, port) = ready_exporter(home.path(), &scenario("clock-events"), "", &[]);
    let samples = |body: &str, family: &str| -> BTreeMap<(String, String), f64> {
        body.lines()
            .filter(|l| l.starts_with(&format!("{family}{{")))
            .map(|l| {
                let (series, value) = l.rsplit_once(' ').unwrap();
                let (_, labels) = parse_series(series).unwrap();
                (
                    (labels["gpu"].clone(), labels["reason"].clone()),
                    value.parse().unwrap(),
                )
            })
            .collect()
    };
    // At scenario time 100 s: GPU 0 power-capped and thermally slowed, GPU 1 no longer idle.
    let body = get(port, "/metrics").2;
    let active = samples(&body, "gputop_gpu_clock_event_active");
    assert_eq!(active.len(), 18, "every reason of each GPU: {active:?}");
    let on: Vec<&(String, String)> = active
        .iter()
        .filter(|(_, v)| **v == 1.0)
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        on,
        [
            &("0".to_string(), "sw_power_cap".to_string()),
            &("0".to_string(), "sw_thermal_slowdown".to_string())
        ]
    );
    std::thread::sleep(Duration::from_millis(1500));
    let body = get(port, "/metrics").2;
    let seconds = samples(&body, "gputop_gpu_clock_event_seconds_total");
    assert!(
        seconds[&("0".into(), "sw_power_cap".into())] >= 1.0,
        "{seconds:?}"
    );
    assert_eq!(seconds[&("0".into(), "gpu_idle".into())], 0.0);
    assert_eq!(seconds[&("1".into(), "sw_power_cap".into())], 0.0);
    let snapshot: serde_json::Value = serde_json::from_str(&get(port, "/snapshot").2).unwrap();
    assert_eq!(
        snapshot["devices"][0]["throttle_reasons"],
        serde_json::json!(["sw_power_cap", "sw_thermal_slowdown"]),
        "the JSON names them alike"
    );
}

#[test]
fn remapped_rows_retired_pages_and_nvlinks_are_served_as_the_driver_reports_them() {
    let home = tempfile::tempdir().unwrap();
    let (_exporter, port) = ready_exporter(home.path(), &scenario("memory-faults"), "", &[]);
    let body = get(port, "/metrics").2;
    let mut served: Vec<String> = body
        .lines()
        .filter(|l| {
            [
                "gputop_gpu_remapped_rows",
                "gputop_gpu_row_remap_",
                "gputop_gpu_retired_pages",
            ]
            .iter()
            .any(|f| l.starts_with(f))
        })
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            let (name, labels) = parse_series(series).unwrap();
            let cause = labels.get("cause").map_or(String::new(), |c| format!(" {c}"));
            format!("{name} gpu {}{cause} = {value}", labels["gpu"])
        })
        .collect();
    served.sort();
    assert_eq!(
        served,
        [
            "gputop_gpu_remapped_rows gpu 0 correctable = 3",
            "gputop_gpu_remapped_rows gpu 0 uncorrectable = 1",
            "gputop_gpu_retired_pages gpu 1 double_bit_ecc = 1",
            "gputop_gpu_retired_pages gpu 1 single_bit_ecc = 2",
            "gputop_gpu_row_remap_failure gpu 0 = 0",
            "gputop_gpu_row_remap_pending gpu 0 = 1",
        ],
        "GPU 0 cannot retire pages, GPU 1 cannot remap rows: absent, not 0"
    );
    let link = |body: &str, family: &str| -> Vec<String> {
        let mut out: Vec<String> = body
            .lines()
            .filter(|l| l.starts_with(&format!("{family}{{")))
            .map(|l| {
                let (series, value) = l.rsplit_once(' ').unwrap();
                let (_, labels) = parse_series(series).unwrap();
                let counter = labels.get("counter").map_or(String::new(), |c| format!(" {c}"));
                format!("gpu {} link {}{counter} = {value}", labels["gpu"], labels["link"])
            })
            // Of the error counters, those that counted something.
            .filter(|l| family.ends_with("active") || !l.ends_with(" = 0"))
            .collect();
        out.sort();
        out
    };
    assert_eq!(
        link(&body, "gputop_gpu_nvlink_active"),
        [
            "gpu 0 link 0 = 1",
            "gpu 0 link 1 = 1",
            "gpu 0 link 2 = 0",
            "gpu 0 link 3 = 1"
        ],
        "GPU 1 has no NVLink"
    );
    assert_eq!(
        link(&body, "gputop_gpu_nvlink_errors_total"),
        ["gpu 0 link 1 crc_flit = 2", "gpu 0 link 1 replay = 7"]
    );
    let snapshot: serde_json::Value = serde_json::from_str(&get(port, "/snapshot").2).unwrap();
    let gpu = &snapshot["devices"];
    assert_eq!(gpu[0]["nvlinks"][1]["replay_errors"], 7);
    assert_eq!(
        gpu[0]["nvlinks"][2]["replay_errors"],
        serde_json::Value::Null,
        "a link that is down has no counters, not zeros"
    );
    assert_eq!(gpu[1]["nvlinks"], serde_json::Value::Null);
    assert_eq!(gpu[0]["remapped_rows_pending"], true);
    assert_eq!(gpu[0]["retired_pages_double_bit"], serde_json::Value::Null);
    assert_eq!(gpu[1]["retired_pages_double_bit"], 1);
    assert_eq!(gpu[1]["remapped_rows_correctable"], serde_json::Value::Null);
}

/// `gputop export` on the xid-errors scenario, whose clock runs from nvmlInit: its Xids
/// arrive 2 to 6 s after the start. Its alert log is `home/alerts.log`.
fn xid_exporter(home: &Path) -> (Killed, u16) {
    let config = home.join("config.toml");
    let log = home.join("alerts.log");
    std::fs::write(
        &config,
        format!("[alert]\nlog_file = {:?}\n", log.display().to_string()),
    )
    .unwrap();
    let port = free_port();
    let child = gputop(home)
        .arg("--nvml-lib")
        .arg(common::sim_lib())
        .env("GPUTOP_SIM_SCENARIO", scenario("xid-errors"))
        .arg("--config")
        .arg(&config)
        .args(["export", "--interval", "0.2", "--web-listen-address"])
        .arg(format!("127.0.0.1:{port}"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    listening(Killed(child), port)
}

#[test]
fn xid_errors_are_counted_per_xid_and_a_critical_one_fires_the_builtin_rule() {
    let home = tempfile::tempdir().unwrap();
    let log = home.path().join("alerts.log");
    let (_exporter, port) = xid_exporter(home.path());
    let served = |body: &str| -> Vec<String> {
        let mut out: Vec<String> = body
            .lines()
            .filter(|l| l.contains("xid_errors_total{"))
            .map(|l| {
                let (series, value) = l.rsplit_once(' ').unwrap();
                let (name, labels) = parse_series(series).unwrap();
                let xid = labels.get("xid").map_or(String::new(), |x| format!(" xid {x}"));
                format!("{name} gpu {}{xid} = {value}", labels["gpu"])
            })
            .collect();
        out.sort();
        out
    };
    let expected = [
        "gputop_gpu_critical_xid_errors_total gpu 0 = 4",
        "gputop_gpu_critical_xid_errors_total gpu 2 = 0",
        "gputop_gpu_xid_errors_total gpu 0 xid 31 = 1",
        "gputop_gpu_xid_errors_total gpu 0 xid 48 = 1",
        // 63 and 64 came at once: NVML names the later for both.
        "gputop_gpu_xid_errors_total gpu 0 xid 64 = 2",
        "gputop_gpu_xid_errors_total gpu 0 xid 94 = 1",
    ];
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut body = String::new();
    while served(&body) != expected && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        body = get(port, "/metrics").2;
    }
    assert_eq!(
        served(&body),
        expected,
        "GPU 1 offers no events and GPU 3 fell off the bus: no series, not zeros; the Xid \
         after GPU 3 was lost still arrives"
    );
    // The built-in rule needs readings over 1 % of its 10-minute window (6 s) first.
    let firing_xid_rule = |snapshot: &serde_json::Value| -> Vec<serde_json::Value> {
        snapshot["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["rule"] == "gpu_xid_error" && a["state"] == "firing")
            .cloned()
            .collect()
    };
    let mut snapshot: serde_json::Value = serde_json::from_str(&get(port, "/snapshot").2).unwrap();
    while firing_xid_rule(&snapshot).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        snapshot = serde_json::from_str(&get(port, "/snapshot").2).unwrap();
    }
    let gpu = &snapshot["devices"];
    assert_eq!(
        gpu[0]["xid_errors"],
        serde_json::json!([
            {"xid": 31, "count": 1}, {"xid": 48, "count": 1}, {"xid": 64, "count": 2}, {"xid": 94, "count": 1}
        ])
    );
    assert_eq!(gpu[0]["last_xid"]["xid"], 94);
    assert_eq!(gpu[0]["last_critical_xid"]["xid"], 94);
    assert_eq!(
        gpu[1]["xid_errors"],
        serde_json::Value::Null,
        "no events: unknown"
    );
    assert_eq!(gpu[2]["xid_errors"], serde_json::json!([]), "watched, none came");
    assert_eq!(gpu[2]["last_xid"], serde_json::Value::Null);
    // The built-in critical rule fires for GPU 0 alone and names the Xid, in /snapshot and
    // in the alert log.
    let firing = firing_xid_rule(&snapshot);
    assert_eq!(firing.len(), 1, "{firing:?}");
    assert_eq!(firing[0]["gpu_index"], 0);
    assert_eq!(firing[0]["severity"], "critical");
    assert!(
        firing[0]["summary"].as_str().unwrap().contains("last Xid 94"),
        "{firing:?}"
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    let line: serde_json::Value = serde_json::from_str(
        logged
            .lines()
            .find(|l| l.contains("gpu_xid_error"))
            .unwrap_or_else(|| panic!("no Xid alert in the log: {logged}")),
    )
    .unwrap();
    assert_eq!(line["state"], "firing");
    assert_eq!(line["subject"], "GPU 0");
    // It fired once its window held enough readings, naming the latest critical Xid then
    // (never the application's 31).
    let summary = line["summary"].as_str().unwrap();
    assert!(
        ["48", "64", "94"]
            .iter()
            .any(|xid| summary.ends_with(&format!("last Xid {xid})"))),
        "{line}"
    );
}

/// `systemd-analyze` with `args`, its exit status and everything it printed.
fn systemd_analyze(args: &[&str], unit: &Path) -> (bool, String) {
    let out = Command::new("systemd-analyze")
        .args(args)
        .arg(unit)
        .output()
        .expect("systemd-analyze (Debian's systemd) runs");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), printed)
}

#[test]
#[ignore = "needs systemd-analyze (Debian's systemd): .ci/all-tests installs it"]
fn the_systemd_unit_verifies_clean_and_rates_below_4_in_systemd_analyze_security() {
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("config/systemd/gputop-exporter.service"),
    )
    .unwrap();
    // verify also checks that ExecStart's program exists: this build's binary stands in for
    // the installed one.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("gputop-exporter.service");
    assert!(unit.contains("ExecStart=/usr/local/bin/gputop export"));
    std::fs::write(
        &copy,
        unit.replace("/usr/local/bin/gputop", env!("CARGO_BIN_EXE_gputop")),
    )
    .unwrap();
    let (ok, printed) = systemd_analyze(&["verify"], &copy);
    assert!(
        ok && printed.trim().is_empty(),
        "systemd-analyze verify: {printed}"
    );
    let (_, printed) = systemd_analyze(&["security", "--offline=true"], &copy);
    let level: f64 = printed
        .lines()
        .find_map(|l| l.split("gputop-exporter.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no overall exposure level: {printed}"));
    assert!(level < 4.0, "exposure {level}: {printed}");
    // Each setting it still flags is one the unit explains.
    for flagged in printed.lines().filter(|l| l.starts_with('✗')) {
        let setting = flagged
            .trim_start_matches('✗')
            .trim_start()
            .split(['=', ' '])
            .next()
            .unwrap();
        assert!(!setting.is_empty(), "{flagged}");
        let explained = ["RootDirectory", "RootImage"].contains(&setting) || unit.contains(setting);
        assert!(explained, "{setting} is flagged and the unit says nothing of it");
    }
}

/// The exposition of the two-GPU scenario with per-process series and a process whose
/// command line holds quotes, backslashes, an escape sequence, a newline and a bidi override.
fn hostile_exposition(home: &Path) -> String {
    let sleepers = Sleepers::spawn(2);
    let mut evil = Command::new("sh")
        .args(["-c", "read x", "evil\"\\\x1b[2J\nname\u{202e}"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let pids = format!("{} {}", sleepers.env(), evil.id());
    let (_exporter, port) = ready_exporter(
        home,
        &scenario("two-gpus-training"),
        &pids,
        &["--processes", "--process-commands"],
    );
    let (status, head, body) = get(port, "/metrics");
    assert_eq!(status, 200);
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    let _ = evil.kill();
    let _ = evil.wait();
    body
}

fn committed_rules() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config/prometheus/gputop-rules.yml")
}

#[test]
fn the_exposition_escapes_hostile_text_and_the_committed_rules_are_current() {
    let home = tempfile::tempdir().unwrap();
    let body = hostile_exposition(home.path());
    assert!(!body.contains('\u{1b}') && !body.contains("NaN"));
    assert!(
        body.contains("read x evil\\\"\\\\\\\\u{1b}[2J\\\\nname\\\\u{202e}\"}"),
        "{body}"
    );
    // The committed rules file is what `gputop rules` writes with the defaults.
    let rules = gputop(home.path()).arg("rules").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&rules.stdout),
        std::fs::read_to_string(committed_rules()).unwrap(),
        "regenerate config/prometheus/gputop-rules.yml with `gputop rules`"
    );
}

#[test]
#[ignore = "needs Prometheus: promtool checks the exposition and the rules"]
fn promtool_passes_the_exposition_the_rules_and_their_unit_tests() {
    require_prometheus_tools();
    let home = tempfile::tempdir().unwrap();
    common::promtool_checks_metrics(&hostile_exposition(home.path()));
    let committed = committed_rules();
    let dir = committed.parent().unwrap();
    for args in [
        vec!["check", "rules", "gputop-rules.yml"],
        vec!["test", "rules", "gputop-rules.test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(&args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// A series as `name{a="x",b="y"}` writes it (the exposition's samples, promtool's input
/// series): its name and its labels, values unescaped.
fn parse_series(text: &str) -> Option<(String, BTreeMap<String, String>)> {
    let (name, rest) = match text.find('{') {
        Some(at) => (&text[..at], &text[at + 1..]),
        None => (text.split_whitespace().next()?, ""),
    };
    let mut labels = BTreeMap::new();
    let mut chars = rest.chars();
    loop {
        let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
        let key = key.trim_start_matches([',', ' ']).to_string();
        if key.is_empty() || key.starts_with('}') {
            break;
        }
        if chars.next() != Some('"') {
            return None;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => value.push(match chars.next()? {
                    'n' => '\n',
                    other => other,
                }),
                '"' => break,
                c => value.push(c),
            }
        }
        labels.insert(key, value);
    }
    Some((name.to_string(), labels))
}

/// Each series name of an exposition with the label names Prometheus stores for its samples:
/// those with a value (an empty value is no label once scraped) and the scrape's own `job`
/// and `instance`.
fn scraped_label_names(exposition: &str) -> BTreeMap<String, BTreeSet<BTreeSet<String>>> {
    let mut out: BTreeMap<String, BTreeSet<BTreeSet<String>>> = BTreeMap::new();
    for line in exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, labels) = parse_series(line).expect("a sample line");
        let mut names: BTreeSet<String> = labels
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, _)| k)
            .collect();
        names.extend(["job".to_string(), "instance".to_string()]);
        out.entry(name).or_default().insert(names);
    }
    out
}

#[test]
fn the_rule_tests_label_their_series_as_a_scrape_of_the_exporter_does_and_cover_every_rule() {
    let home = tempfile::tempdir().unwrap();
    let port = free_port();
    let child = gputop(home.path())
        .args(["--demo", "export", "--processes", "--web-listen-address"])
        .arg(format!("127.0.0.1:{port}"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (_exporter, port) = listening(Killed(child), port);
    wait_ready(port);
    let scraped = scraped_label_names(&get(port, "/metrics").2);
    let tests_file = committed_rules().with_file_name("gputop-rules.test.yml");
    let tests = std::fs::read_to_string(&tests_file).unwrap();
    let mut checked = 0;
    for line in tests.lines() {
        let Some(series) = line.trim().strip_prefix("- series: '") else {
            continue;
        };
        let (name, labels) = parse_series(series.trim_end_matches('\'')).expect("a series");
        let names: BTreeSet<String> = labels.into_keys().collect();
        let served = scraped
            .get(&name)
            .unwrap_or_else(|| panic!("{name} is not served"));
        assert!(
            served.contains(&names),
            "{name} in the rule tests has labels {names:?}; a scrape gives {served:?}"
        );
        checked += 1;
    }
    assert!(checked >= 10, "{checked} series");
    // Every rule has a case where it must fire and one where it must not.
    let lines: Vec<&str> = tests.lines().map(str::trim).collect();
    let mut cases: BTreeMap<&str, (bool, bool)> = BTreeMap::new();
    for (i, line) in lines.iter().enumerate() {
        if let Some(name) = line.strip_prefix("alertname: ") {
            let case = cases.entry(name).or_default();
            match lines.get(i + 1) {
                Some(&"exp_alerts: []") => case.1 = true,
                Some(&"exp_alerts:") => case.0 = true,
                other => panic!("{name}: {other:?}"),
            }
        }
    }
    let rules = std::fs::read_to_string(committed_rules()).unwrap();
    let names: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert_eq!(names.len(), 8, "{names:?}");
    for name in names {
        assert_eq!(
            cases.get(name),
            Some(&(true, true)),
            "{name}: (a firing case, a quiet case) in {}",
            tests_file.display()
        );
    }
}

fn last_collect(body: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix("gputop_last_collect_timestamp_seconds "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn a_hundred_concurrent_scrapes_are_all_answered_while_collection_goes_on() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(3);
    let (_exporter, port) = ready_exporter(home.path(), &scenario("two-gpus-training"), &sleepers.env(), &[]);
    let before = last_collect(&get(port, "/metrics").2);
    let scrapes: Vec<_> = (0..100)
        .map(|_| std::thread::spawn(move || get(port, "/metrics")))
        .collect();
    let results: Vec<(u16, String, String)> = scrapes.into_iter().map(|s| s.join().unwrap()).collect();
    for (status, _, body) in &results {
        assert_eq!(*status, 200);
        assert!(body.contains("\ngputop_up 1\n") && body.ends_with('\n'));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while last_collect(&get(port, "/metrics").2) <= before {
        assert!(Instant::now() < deadline, "the collector stopped publishing");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn malformed_and_slow_clients_are_answered_or_dropped_and_never_stop_the_exporter() {
    let home = tempfile::tempdir().unwrap();
    // Every process call takes 1.5 s: the first snapshot comes late, so readiness shows.
    let slow = home.path().join("slow.toml");
    std::fs::write(
        &slow,
        "[meta]\nversion = 1\n[sim]\nlatency_us = { processes = 1500000 }\n[[gpu]]\nname = \"Slow\"\n",
    )
    .unwrap();
    let (mut exporter, port) = exporter(home.path(), &slow, "", &[]);
    let (status, head, _) = get(port, "/-/ready");
    assert_eq!(status, 503, "not ready before the first snapshot");
    assert!(head.contains("Retry-After: 1"));
    let (status, _, body) = get(port, "/metrics");
    assert_eq!(status, 200);
    assert!(body.contains("\ngputop_up 0\n"), "{body}");
    // Thirty clients that connect and say nothing hold no one else up.
    let idle: Vec<TcpStream> = (0..30)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    wait_ready(port);
    assert_eq!(get(port, "/metrics").0, 200);
    assert_eq!(request(port, "GARBAGE\r\n\r\n").0, 400);
    // A head over 8 KiB: 431, RFC 6585's status for it.
    assert_eq!(
        request(
            port,
            &format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000))
        )
        .0,
        431
    );
    assert_eq!(request(port, "POST /metrics HTTP/1.1\r\n\r\n").0, 405);
    // Not an HTTP/1 request line: 400 (RFC 9112 leaves 505 to the server's choice).
    assert_eq!(request(port, "GET /metrics HTTP/2.0\r\n\r\n").0, 400);
    assert_eq!(get(port, "/nope").0, 404);
    assert_eq!(
        request(port, "HEAD /metrics HTTP/1.1\r\n\r\n").2,
        "",
        "HEAD has no body"
    );
    {
        let mut torn = TcpStream::connect(("127.0.0.1", port)).unwrap();
        torn.write_all(b"GET /met").unwrap();
    }
    drop(idle);
    assert_eq!(get(port, "/metrics").0, 200);
    assert!(exporter.0.try_wait().unwrap().is_none(), "still running");
}

#[test]
fn the_grafana_dashboard_uses_only_names_the_exporter_serves() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(3);
    let (_exporter, port) = ready_exporter(
        home.path(),
        &scenario("two-gpus-training"),
        &sleepers.env(),
        &["--processes"],
    );
    // PCIe throughput comes from its own slower thread: present from its first reading on.
    let deadline = Instant::now() + Duration::from_secs(10);
    let served = loop {
        let served = names(&get(port, "/metrics").2);
        if served
            .iter()
            .any(|n| n == "gputop_gpu_pcie_receive_bytes_per_second")
            || Instant::now() > deadline
        {
            break served;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Xid errors per Xid are served once the driver reports one: from a second exporter.
    let xid_home = tempfile::tempdir().unwrap();
    let (_xids, xid_port) = xid_exporter(xid_home.path());
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut served_after_xids = names(&get(xid_port, "/metrics").2);
    while !served_after_xids
        .iter()
        .any(|n| n == "gputop_gpu_xid_errors_total")
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(200));
        served_after_xids = names(&get(xid_port, "/metrics").2);
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/grafana/gputop.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut used = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let mut rest = expr;
            while let Some(at) = rest.find("gputop_") {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[at + name.len()..];
                used.push(name);
            }
        }
    }
    assert!(used.len() > 15, "{used:?}");
    for name in &used {
        assert!(
            served.contains(name) || served_after_xids.contains(name),
            "the dashboard uses {name}, which the exporter does not serve"
        );
    }
    // And the exposition sanity: no family twice.
    let mut sorted = served.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), served.len());
}

#[test]
fn the_exporter_judges_the_alert_rules_without_a_terminal() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(3);
    let log = home.path().join("alerts.log");
    let config = home.path().join("rules.toml");
    std::fs::write(
        &config,
        format!(
            "[alert]\nlog_file = \"{}\"\n[[alert.rules]]\nname = \"busy_memory\"\nmetric = \"memory_mib\"\n\
             threshold = 1024\nwindow = 1\nseverity = \"critical\"\n",
            log.display()
        ),
    )
    .unwrap();
    let (_exporter, port) = ready_exporter(
        home.path(),
        &scenario("two-gpus-training"),
        &sleepers.env(),
        &["--config", config.to_str().unwrap()],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let alerts = loop {
        let doc: serde_json::Value = serde_json::from_str(&get(port, "/snapshot").2).unwrap_or_default();
        let firing: Vec<serde_json::Value> = doc["alerts"]
            .as_array()
            .map(|a| a.iter().filter(|x| x["state"] == "firing").cloned().collect())
            .unwrap_or_default();
        if !firing.is_empty() {
            break firing;
        }
        assert!(Instant::now() < deadline, "no firing alerts in /snapshot: {doc}");
        std::thread::sleep(Duration::from_millis(100));
    };
    // GPU 0 holds 24 GiB, GPU 1 324 MiB: one alert.
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0]["subject"], "GPU 0");
    assert_eq!(alerts[0]["severity"], "critical");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        logged
            .lines()
            .filter(|l| l.contains("\"state\":\"firing\""))
            .count(),
        1,
        "{logged}"
    );
}

/// `/snapshot` is the snapshot's wire form, as `config/snapshot.schema.json` describes it.
#[test]
fn the_snapshot_page_matches_the_schema() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(3);
    let (_exporter, port) = ready_exporter(home.path(), &scenario("two-gpus-training"), &sleepers.env(), &[]);
    let (status, _, body) = get(port, "/snapshot");
    assert_eq!(status, 200);
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["devices"].as_array().unwrap().len(), 2);
    common::assert_matches_schema(&doc, "/snapshot");
}

/// MIG devices and per-user / per-container accounting in the exposition.
fn mig_exporter(home: &Path, sleepers: &Sleepers) -> (Killed, u16) {
    ready_exporter(home, &scenario("mig-a100"), &sleepers.env(), &["--processes"])
}

#[test]
fn mig_devices_and_usage_per_user_are_exported() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(4);
    let (_exporter, port) = mig_exporter(home.path(), &sleepers);
    std::thread::sleep(Duration::from_millis(600));
    let (_, _, body) = get(port, "/metrics");
    let line = |prefix: &str| {
        body.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {body}"))
            .to_string()
    };
    assert!(
        line("gputop_mig_memory_used_bytes{gpu=\"0\"")
            .contains("gpu_instance=\"1\",compute_instance=\"0\",profile=\"3g.40gb\"")
    );
    assert!(line("gputop_mig_memory_used_bytes{gpu=\"0\"").ends_with(&format!(" {}", 20u64 << 30)));
    assert!(line("gputop_mig_processes{gpu=\"0\"").ends_with(" 2"));
    assert!(line("gputop_process_gpu_memory_bytes{gpu=\"0\"").contains(",mig=\"1/0\""));
    // Every process runs as this test's user: all four processes, both GPUs.
    let user = line("gputop_user_processes{");
    assert!(user.ends_with(" 4"), "{user}");
    assert!(line("gputop_user_gpus{").ends_with(" 2"));
    let seconds: f64 = line("gputop_user_gpu_seconds_total{")
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(seconds > 0.0, "GPU-seconds accumulate: {seconds}");
    assert!(line("# TYPE gputop_container_gpu_memory_byte_seconds_total").ends_with("counter"));
}

/// Energy per user: with the simulator's clock running, the GPUs' energy counters advance
/// and the exporter's usage accounting shares each GPU's energy among its processes.
#[test]
fn gpu_energy_goes_to_the_user_whose_processes_hold_the_gpus() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(4);
    let (mut command, port) = exporter_command(
        home.path(),
        &scenario("mig-a100"),
        &sleepers.env(),
        &["--processes"],
    );
    let exporter = Killed(command.env("GPUTOP_SIM_CLOCK", "wall").spawn().unwrap());
    let (_exporter, port) = listening(exporter, port);
    wait_ready(port);
    // Both GPUs hold only this user's processes, so between two scrapes the user's energy
    // grows by what the GPUs' energy counters advanced.
    let total = |body: &str, prefix: &str| -> f64 {
        body.lines()
            .filter(|l| l.starts_with(prefix))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    };
    // NVML's energy counter is read every 10 s (the slow readings): scrape until it moved.
    let gpu_energy = |body: &str| total(body, "gputop_gpu_energy_joules_total{");
    let (_, _, before) = get(port, "/metrics");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let after = loop {
        std::thread::sleep(Duration::from_millis(500));
        let (_, _, after) = get(port, "/metrics");
        if gpu_energy(&after) != gpu_energy(&before) || std::time::Instant::now() > deadline {
            break after;
        }
    };
    let gpus = gpu_energy(&after) - gpu_energy(&before);
    let user = total(&after, "gputop_user_gpu_energy_joules_total{")
        - total(&before, "gputop_user_gpu_energy_joules_total{");
    assert!(gpus > 0.0, "the simulated GPUs draw power");
    assert!((user - gpus).abs() < 1e-3 * gpus, "user {user} J, GPUs {gpus} J");
}

/// The same, scraped by a real Prometheus: the MIG memory is the scenario's, GPU-seconds
/// grow with time.
#[test]
#[ignore = "needs Prometheus: a real prometheus server scrapes the exporter"]
fn mig_devices_and_usage_per_user_are_scraped_by_prometheus() {
    require_prometheus_tools();
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(4);
    let (_exporter, port) = mig_exporter(home.path(), &sleepers);
    let (_prometheus, web) = start_prometheus(home.path(), port, None);
    let mig = query_until(web, "gputop_mig_memory_total_bytes", |r| r.len() == 3);
    let mut totals: Vec<f64> = mig
        .iter()
        .map(|r| r["value"][1].as_str().unwrap().parse().unwrap())
        .collect();
    totals.sort_by(f64::total_cmp);
    assert_eq!(totals, [9.75, 19.5, 39.5].map(|g| g * 1073741824.0));
    // Two GPUs held: GPU-seconds grow at about 2 per second between two scrapes.
    let first = query_until(web, "gputop_user_gpu_seconds_total", |r| r.len() == 1);
    let value = |r: &[serde_json::Value]| r[0]["value"][1].as_str().unwrap().parse::<f64>().unwrap();
    let (t0, v0) = (first[0]["value"][0].as_f64().unwrap(), value(&first));
    let later = query_until(web, "gputop_user_gpu_seconds_total", |r| {
        r.len() == 1 && r[0]["value"][0].as_f64().unwrap() > t0 + 2.5 && value(r) > v0 + 2.0
    });
    let rate = (value(&later) - v0) / (later[0]["value"][0].as_f64().unwrap() - t0);
    assert!(
        (1.0..=3.0).contains(&rate),
        "about 2 GPU-seconds per second, got {rate}"
    );
}

#[test]
fn a_hung_driver_call_makes_the_exporter_say_stale_and_how_old() {
    let home = tempfile::tempdir().unwrap();
    // On the wall clock, from scenario time 1.5 s the process lists block for ten minutes.
    let scenario = home.path().join("hung.toml");
    std::fs::write(
        &scenario,
        "[meta]\nversion = 1\n[[gpu]]\n[[gpu.hang]]\nfield = \"processes\"\nseconds = 600\nfrom = 1.5\n",
    )
    .unwrap();
    let port = free_port();
    let child = gputop(home.path())
        .arg("--nvml-lib")
        .arg(common::sim_lib())
        .env("GPUTOP_SIM_SCENARIO", &scenario)
        .args([
            "export",
            "--web-listen-address",
            &format!("127.0.0.1:{port}"),
            "--interval",
            "0.2",
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _exporter = listening(Killed(child), port);
    wait_ready(port);
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let (status, _, body) = get(port, "/-/ready");
        if status == 503 {
            break body;
        }
        assert!(Instant::now() < deadline, "never reported stale: {status} {body}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(body.starts_with("stale: the data is "), "{body}");
    assert!(
        body.contains("nvmlDeviceGet*RunningProcesses on GPU 0 has not returned"),
        "{body}"
    );
    let (status, _, metrics) = get(port, "/metrics");
    assert_eq!(status, 200, "old data is still served");
    let stale: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("gputop_collector_stale_seconds "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no stale gauge in:\n{metrics}"));
    assert!(stale > 0.4, "older than two intervals: {stale}");
}

#[test]
fn five_hundred_slowloris_connections_keep_no_scraper_out() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(3);
    let (mut exporter, port) =
        ready_exporter(home.path(), &scenario("two-gpus-training"), &sleepers.env(), &[]);
    let stop = Arc::new(AtomicBool::new(false));
    // 500 clients sending a request head a byte every 4 s, reconnecting when closed.
    let trickler = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let connect = || {
                let stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
                stream.set_nonblocking(true).ok()?;
                Some(stream)
            };
            let mut clients: Vec<Option<TcpStream>> = (0..500).map(|_| connect()).collect();
            while !stop.load(Ordering::Relaxed) {
                for client in &mut clients {
                    let alive = client.as_mut().is_some_and(|c| c.write_all(b"G").is_ok());
                    if !alive {
                        *client = connect();
                    }
                }
                for _ in 0..40 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    let started = Instant::now();
    let mut statuses = Vec::new();
    while started.elapsed() < Duration::from_secs(12) {
        statuses.push(get(port, "/metrics").0);
        std::thread::sleep(Duration::from_millis(500));
    }
    stop.store(true, Ordering::Relaxed);
    trickler.join().unwrap();
    assert!(
        statuses.iter().all(|s| *s == 200),
        "every scrape answered while 500 clients trickled: {statuses:?}"
    );
    assert!(exporter.0.try_wait().unwrap().is_none(), "still running");
}

#[test]
fn the_snapshot_page_serves_command_lines_only_when_asked_like_metrics() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(3);
    for (extra, shown) in [
        (&[][..], false),
        (&["--processes", "--process-commands"][..], true),
    ] {
        let (_exporter, port) = ready_exporter(
            home.path(),
            &scenario("two-gpus-training"),
            &sleepers.env(),
            extra,
        );
        let (status, _, body) = get(port, "/snapshot");
        assert_eq!(status, 200);
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
        let processes = doc["processes"].as_array().unwrap();
        assert!(!processes.is_empty());
        for process in processes {
            assert_eq!(process["command"].is_string(), shown, "{extra:?}: {process}");
            assert!(
                process["user"].is_string(),
                "users are served either way: {process}"
            );
        }
    }
}

/// `gputop export` on the simulated two-GPU machine running `sleepers`, its state under
/// `home`'s `~/.local/state` (or the demo machine's with `--demo` in `source`).
fn state_exporter(home: &Path, sleepers: &Sleepers, source: &[&str], port: u16) -> std::process::Child {
    gputop(home)
        .args(if source.is_empty() {
            vec!["--nvml-lib".to_string(), common::sim_lib().display().to_string()]
        } else {
            source.iter().map(|s| s.to_string()).collect()
        })
        .env("GPUTOP_SIM_SCENARIO", scenario("two-gpus-training"))
        .env("GPUTOP_SIM_PIDS", sleepers.env())
        .args([
            "export",
            "--processes",
            "--interval",
            "0.2",
            "--web-listen-address",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// [`state_exporter`] once it serves a snapshot.
fn ready_state_exporter(home: &Path, sleepers: &Sleepers, source: &[&str]) -> (Killed, u16) {
    let port = free_port();
    let child = state_exporter(home, sleepers, source, port);
    let (exporter, port) = listening(Killed(child), port);
    wait_ready(port);
    (exporter, port)
}

/// Each user's GPU-seconds in `/snapshot`.
fn gpu_seconds_by_user(port: u16) -> BTreeMap<String, f64> {
    let doc: serde_json::Value = serde_json::from_str(&get(port, "/snapshot").2).unwrap_or_default();
    doc["usage"]["users"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|u| {
            (
                u["user"].as_str().unwrap().to_string(),
                u["gpu_seconds"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// Stops the exporter with SIGTERM: its exit status and what it wrote to stderr.
fn terminate(exporter: &mut Killed) -> (std::process::ExitStatus, String) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(exporter.0.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = exporter.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "SIGTERM did not stop the exporter");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    exporter
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status, stderr)
}

#[test]
fn usage_totals_survive_a_restart_and_a_corrupt_file_is_set_aside() {
    let home = tempfile::tempdir().unwrap();
    let state = home.path().join(".local/state/gputop/usage.json");
    let sleepers = Sleepers::spawn(3);
    let (mut first, port) = ready_state_exporter(home.path(), &sleepers, &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while gpu_seconds_by_user(port).values().all(|s| *s < 1.0) {
        assert!(Instant::now() < deadline, "no GPU-seconds counted");
        std::thread::sleep(Duration::from_millis(100));
    }
    let before = gpu_seconds_by_user(port);
    // The sleepers' owner: whoever runs the test.
    let owner = before.keys().next().expect("a user counted").clone();
    let (status, stderr) = terminate(&mut first);
    assert!(status.success(), "SIGTERM ends it cleanly: {status:?} {stderr}");
    assert!(stderr.contains(&state.display().to_string()), "{stderr}");
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&state).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // The next exporter starts from the saved totals: at least what the first had served.
    let (mut second, port) = ready_state_exporter(home.path(), &sleepers, &[]);
    let restored = gpu_seconds_by_user(port);
    for (user, seconds) in &before {
        let saved_seconds = saved["users"][user]["gpu_seconds"].as_f64().unwrap();
        // /snapshot rounds to milliseconds.
        assert!(
            saved_seconds >= seconds - 0.001,
            "{user}: saved {saved_seconds} < served {seconds}"
        );
        assert!(
            restored[user] >= saved_seconds - 0.001,
            "{user}: {} after the restart, {saved_seconds} saved",
            restored[user]
        );
    }
    let metrics = get(port, "/metrics").2;
    let counter = metrics
        .lines()
        .find(|l| l.starts_with(&format!("gputop_user_gpu_seconds_total{{user=\"{owner}\"}}")))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .expect("the owner's GPU-seconds counter");
    assert!(counter >= before[&owner], "the counter goes on from {counter}");
    terminate(&mut second);

    // A damaged file: reported in one line, set aside, and counting starts from zero.
    std::fs::write(
        &state,
        format!("{{\"version\":1,\"users\":{{\"{owner}\":{{\"gpu_seconds\":\"lots\""),
    )
    .unwrap();
    let (mut third, port) = ready_state_exporter(home.path(), &sleepers, &[]);
    let counted = gpu_seconds_by_user(port).get(&owner).copied().unwrap_or(0.0);
    assert!(counted < before[&owner], "from zero");
    let (status, stderr) = terminate(&mut third);
    assert!(status.success());
    let problem: Vec<&str> = stderr.lines().filter(|l| l.contains("set aside")).collect();
    assert_eq!(problem.len(), 1, "{stderr}");
    assert!(
        problem[0].contains("usage.json.corrupt") && problem[0].contains("from zero"),
        "{stderr}"
    );
    assert!(state.with_extension("json.corrupt").exists());
    assert!(state.exists(), "the new totals were written at the stop");
}

#[test]
fn the_demo_keeps_no_usage_totals_and_a_second_exporter_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let directory = home.path().join(".local/state/gputop");
    let sleepers = Sleepers::spawn(3);

    // The demo counts its users for /snapshot, and writes none of them down.
    let (mut demo, port) = ready_state_exporter(home.path(), &sleepers, &["--demo"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while gpu_seconds_by_user(port).values().all(|s| *s < 1.0) {
        assert!(Instant::now() < deadline, "no GPU-seconds counted");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, stderr) = terminate(&mut demo);
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("demo's usage totals are not kept"), "{stderr}");
    assert!(!directory.exists(), "the demo wrote state: {directory:?}");

    // A real exporter holds the totals; a second on the same machine and user is refused
    // with one line naming the first, and the first's totals go on.
    let (mut first, port) = ready_state_exporter(home.path(), &sleepers, &[]);
    let second = state_exporter(home.path(), &sleepers, &[], free_port());
    let output = second.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{err}");
    let refusal: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("another gputop export"))
        .collect();
    assert_eq!(refusal.len(), 1, "{err}");
    assert!(
        refusal[0].contains(&format!("(PID {})", first.0.id()))
            && refusal[0].contains(&directory.display().to_string()),
        "{err}"
    );
    assert!(!err.contains("serving"), "refused before listening: {err}");
    assert_eq!(get(port, "/-/ready").0, 200, "the first still serves");
    let (status, stderr) = terminate(&mut first);
    assert!(status.success(), "{stderr}");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(directory.join("usage.json")).unwrap()).unwrap();
    assert!(
        saved["users"].as_object().is_some_and(|u| !u.is_empty()),
        "{saved}"
    );

    // Once the first has stopped, the lock is free again.
    let (mut third, _) = ready_state_exporter(home.path(), &sleepers, &[]);
    let (status, stderr) = terminate(&mut third);
    assert!(status.success(), "{stderr}");
}

/// `gputop export` with `alert.log_file` at `log`: how it ended within 10 s.
fn export_with_log(home: &Path, log: &Path) -> std::process::Output {
    let sleepers = Sleepers::spawn(3);
    let config = home.join("log.toml");
    std::fs::write(&config, format!("[alert]\nlog_file = \"{}\"\n", log.display())).unwrap();
    let mut child = gputop(home)
        .arg("--nvml-lib")
        .arg(common::sim_lib())
        .env("GPUTOP_SIM_SCENARIO", scenario("two-gpus-training"))
        .env("GPUTOP_SIM_PIDS", sleepers.env())
        .args([
            "--config",
            config.to_str().unwrap(),
            "export",
            "--web-listen-address",
        ])
        .arg(format!("127.0.0.1:{}", free_port()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "gputop export still runs with alert.log_file at {}",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[test]
#[ignore = "needs root: plants files owned by nobody"]
fn an_alert_log_planted_as_a_fifo_or_another_users_file_or_through_their_link_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    common::require_root();
    let home = tempfile::tempdir().unwrap();
    let shared = home.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let nobody = 65534;
    // Another user's FIFO: opening it for writing would wait for a reader forever.
    let fifo = shared.join("fifo.log");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    std::os::unix::fs::chown(&fifo, Some(nobody), Some(nobody)).unwrap();
    // Another user's file, writable by all.
    let theirs = shared.join("theirs.log");
    std::fs::write(&theirs, "").unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(nobody), Some(nobody)).unwrap();
    // Another user's link to a directory: the log would land where they chose.
    let elsewhere = home.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let link = shared.join("logs");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(nobody), Some(nobody)).unwrap();
    for (log, why) in [
        (fifo.clone(), "not a regular file"),
        (theirs.clone(), "belongs to another user"),
        (link.join("alerts.log"), "symbolic link of another user"),
    ] {
        let output = export_with_log(home.path(), &log);
        let err = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(output.status.code(), Some(3), "{}: {err}", log.display());
        assert!(
            err.contains("alert.log_file") && err.contains(why),
            "{}: {err}",
            log.display()
        );
    }
    assert_eq!(
        std::fs::read(&theirs).unwrap(),
        b"",
        "nothing appended to their file"
    );
    assert!(
        !elsewhere.join("alerts.log").exists(),
        "nothing written through the link"
    );
}

/// `gputop rules` for a rule whose summary holds a newline, a bell, template actions,
/// quotes, a backslash and a bidi override.
fn odd_summary_rules(home: &Path) -> String {
    let config = home.join("rules.toml");
    std::fs::write(
        &config,
        "[[alert.rules]]\nname = \"odd_summary\"\nmetric = \"temperature\"\nthreshold = 80\n\
         summary = \"line one\\nline two\\u0007 {{ end }} {{ $value }} \\\"quoted\\\" back\\\\slash \\u202e\"\n",
    )
    .unwrap();
    let output = gputop(home)
        .args(["--config", config.to_str().unwrap(), "rules"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn a_rule_summary_with_control_characters_and_template_text_stays_text() {
    let home = tempfile::tempdir().unwrap();
    let rules = odd_summary_rules(home.path());
    assert!(
        !rules
            .chars()
            .any(|c| c.is_control() && c != '\n' || c == '\u{202e}'),
        "no raw control or bidi character: {rules:?}"
    );
    let line = rules.lines().find(|l| l.contains("line one")).unwrap();
    assert!(line.contains("{{ \\\"{{\\\" }} end }}"), "{line}");
}

#[test]
#[ignore = "needs Prometheus: promtool checks the rules"]
fn a_rule_summary_with_control_characters_and_template_text_passes_promtool() {
    require_prometheus_tools();
    let home = tempfile::tempdir().unwrap();
    let rules = odd_summary_rules(home.path());
    let file = home.path().join("rules.yml");
    std::fs::write(&file, &rules).unwrap();
    let checked = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

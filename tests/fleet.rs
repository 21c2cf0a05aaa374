//! The fleet view from outside: `gputop --prometheus URL --once [--json]` against a real
//! Prometheus scraping three real `gputop export --demo` (ignored without the Debian package
//! `prometheus`; `bash .ci/all-tests` installs it), against a fake Prometheus that answers
//! badly (HTML, 401, a body cut short or too large, NaN, missing series), and `--remote
//! NODE --once` reading exporters directly.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Killed, free_port, gputop, prometheus_with, stderr, stdout, wait_ready};

/// `gputop export --demo --processes` on a free port, once it serves a snapshot.
fn demo_exporter(home: &Path) -> (Killed, u16) {
    let port = free_port();
    let child = gputop(home)
        // Each exporter keeps its own usage totals: one directory's would refuse the rest.
        .env("XDG_STATE_HOME", home.join(format!("state-{port}")))
        .args(["export", "--demo", "--processes", "--interval", "0.5"])
        .args(["--web-listen-address", &format!("127.0.0.1:{port}")])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let exporter = Killed(child);
    wait_ready(port);
    (exporter, port)
}

fn fleet_once(home: &Path, args: &[&str]) -> Output {
    gputop(home).args(args).arg("--once").output().unwrap()
}

fn fleet_json(home: &Path, args: &[&str]) -> serde_json::Value {
    let output = gputop(home)
        .args(args)
        .args(["--once", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The node `instance` of a fleet document.
fn node<'a>(fleet: &'a serde_json::Value, instance: &str) -> &'a serde_json::Value {
    fleet["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["instance"] == instance)
        .unwrap_or_else(|| panic!("no node {instance}: {fleet:#}"))
}

#[test]
#[ignore = "needs Prometheus: a real prometheus server scrapes three exporters"]
fn a_real_prometheus_shows_three_exporters_and_a_stopped_one_down_within_two_scrapes() {
    let home = tempfile::tempdir().unwrap();
    let mut exporters: Vec<(Killed, u16)> = (0..3).map(|_| demo_exporter(home.path())).collect();
    let target = |port: u16| format!("'127.0.0.1:{port}'");
    let scrape = 1.0;
    let (_prometheus, web) = prometheus_with(
        home.path(),
        &format!(
            "global:\n  scrape_interval: {scrape}s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: gputop\n    \
             static_configs:\n      - targets: [{}, {}]\n        labels: {{cluster: a, rack: r1}}\n      \
             - targets: [{}]\n        labels: {{cluster: b, rack: r2}}\n",
            target(exporters[0].1),
            target(exporters[1].1),
            target(exporters[2].1),
        ),
    );
    let url = format!("http://127.0.0.1:{web}");
    let args = ["--prometheus", url.as_str()];
    // Each exporter's own report, to compare with what Prometheus' series say.
    let own: Vec<serde_json::Value> = exporters
        .iter()
        .map(|(_, port)| serde_json::from_str(&common::get(*port, "/snapshot").2).unwrap())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let fleet = loop {
        let output = gputop(home.path())
            .args(args)
            .args(["--once", "--json"])
            .output()
            .unwrap();
        if output.status.success() {
            let fleet: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
            let ready = fleet["summary"]["nodes_up"] == 3
                && fleet["nodes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|n| n["devices"].as_array().unwrap().len() == 6)
                && fleet["top_processes"].as_array().unwrap().len() >= 3
                && !fleet["users"].as_array().unwrap().is_empty();
            if ready {
                break fleet;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the fleet never showed three nodes: {}",
            stdout(&output)
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    common::assert_matches_schema_file(&fleet, "the fleet", "config/fleet.schema.json");
    assert_eq!(fleet["feed"], format!("prometheus {url}"));
    assert_eq!(fleet["summary"]["gpus"], 18);
    for ((_, port), own) in exporters.iter().zip(&own) {
        let instance = format!("127.0.0.1:{port}");
        let n = node(&fleet, &instance);
        assert_eq!(n["state"], "up");
        let names: Vec<&str> = n["devices"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|d| d["name"].as_str())
            .collect();
        let own_names: Vec<&str> = own["devices"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|d| d["name"].as_str())
            .collect();
        assert_eq!(names, own_names, "{instance}: the GPUs it serves");
        assert_eq!(
            n["processes"].as_u64().unwrap() as usize,
            own["processes"].as_array().unwrap().len(),
            "{instance}: its processes"
        );
        let mut users: Vec<&str> = n["users"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|u| u.as_str())
            .collect();
        let mut own_users: Vec<&str> = own["processes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["user"].as_str())
            .collect();
        users.sort_unstable();
        own_users.sort_unstable();
        own_users.dedup();
        assert_eq!(users, own_users, "{instance}: its users");
        let rack = if instance.ends_with(&exporters[2].1.to_string()) {
            "r2"
        } else {
            "r1"
        };
        assert_eq!(n["labels"]["rack"], rack, "{instance}: its target labels");
    }
    // The demo's figures move with time: the biggest process is the same, its memory close.
    let top = &fleet["top_processes"][0];
    let biggest = own[0]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|p| p["gpu_memory_bytes"].as_u64())
        .unwrap();
    assert_eq!(
        (&top["pid"], &top["user"]),
        (&biggest["pid"], &biggest["user"]),
        "{top}"
    );
    let (theirs, ours) = (
        biggest["gpu_memory_bytes"].as_f64().unwrap(),
        top["gpu_memory_bytes"].as_f64().unwrap(),
    );
    assert!((ours / theirs - 1.0).abs() < 0.05, "{ours} against {theirs}");
    assert!(
        top["instance"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{top}"
    );
    // The text report names the same nodes, and a label filters nothing away.
    let text = stdout(&fleet_once(home.path(), &args));
    assert!(text.contains("3 nodes: 3 up, 0 down   GPUs 18"), "{text}");
    assert!(text.contains("cluster=b rack=r2"), "{text}");

    // One exporter stopped: down within two scrape intervals (and the time to ask).
    let stopped = format!("127.0.0.1:{}", exporters[1].1);
    drop(exporters.remove(1));
    let at = Instant::now();
    loop {
        let fleet = fleet_json(home.path(), &args);
        if node(&fleet, &stopped)["state"] == "down" {
            assert_eq!(fleet["summary"]["nodes_down"], 1);
            break;
        }
        assert!(
            at.elapsed() < Duration::from_secs_f64(2.0 * scrape + 1.0),
            "{stopped} not down {:?} after it stopped: {fleet:#}",
            at.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = stdout(&fleet_once(home.path(), &args));
    assert!(text.contains("3 nodes: 2 up, 1 down"), "{text}");
    assert!(
        text.contains("DOWN: Prometheus' latest scrape of it failed"),
        "{text}"
    );
}

/// What the fake Prometheus answers to a query.
#[derive(Clone)]
enum Reply {
    /// A 200 with this JSON body.
    Json(String),
    /// Anything else, sent as it is (head and body).
    Raw(Vec<u8>),
}

/// A fake Prometheus on a free port: each query (decoded) is answered by `reply`.
fn fake_prometheus(reply: impl Fn(&str) -> Reply + Send + Sync + 'static) -> u16 {
    common::fake_http(move |head| {
        let target = head.split(' ').nth(1).unwrap_or("");
        let query = target.split_once("query=").map_or("", |(_, q)| q);
        Some(match reply(&decode(query)) {
            Reply::Json(body) => common::json_response(&body),
            Reply::Raw(bytes) => bytes,
        })
    })
}

/// A URL's `%`-decoding.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&text[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn vector(series: &[String]) -> String {
    common::prometheus_vector(&series.join(","))
}

fn series(labels: &str, value: &str) -> String {
    format!(r#"{{"metric":{{{labels}}},"value":[1700000000.5,"{value}"]}}"#)
}

/// A healthy node's answer to `query` (one node, two GPUs); `None` for what it lacks.
fn healthy(query: &str) -> Option<String> {
    let node = r#""instance":"gpu-1:9835""#;
    let gpu = |g: u32| format!(r#"{node},"gpu":"{g}""#);
    let answer = if query.starts_with("up{") {
        vec![series(&format!(r#"{node},"job":"gputop","cluster":"a""#), "1")]
    } else if query.starts_with("count by (instance) (gputop_gpu_info") {
        vec![series(node, "2")]
    } else if query.starts_with("count by (instance) (max by (instance, gpu) (gputop_gpu_utilization_ratio") {
        vec![series(node, "1")]
    } else if query.starts_with("avg by (instance) (max by (instance, gpu) (gputop_gpu_utilization_ratio") {
        vec![series(node, "0.25")]
    } else if query.starts_with("sum by (instance) (gputop_gpu_memory_used_bytes") {
        vec![series(node, "1e9")]
    } else if query.starts_with("sum by (instance) (gputop_gpu_memory_total_bytes") {
        vec![series(node, "1.6e11")]
    } else if query.starts_with("max by (instance, gpu) (gputop_gpu_memory_used_bytes")
        && query.contains(" and on ")
    {
        vec![series(&gpu(1), "0")]
    } else if query.contains("(gputop_gpu_info") {
        vec![
            series(&format!(r#"{},"name":"NVIDIA H100""#, gpu(0)), "1"),
            series(&format!(r#"{},"name":"NVIDIA H100""#, gpu(1)), "1"),
        ]
    } else if query.starts_with("max by (instance, gpu) (gputop_gpu_utilization_ratio") {
        vec![series(&gpu(0), "0.5"), series(&gpu(1), "0")]
    } else if query.contains("(gputop_gpu_memory_used_bytes") && query.starts_with("max") {
        vec![series(&gpu(0), "1e9"), series(&gpu(1), "0")]
    } else if query.contains("(gputop_gpu_memory_total_bytes") {
        vec![series(&gpu(0), "8e10"), series(&gpu(1), "8e10")]
    } else if query.starts_with("sum by (instance) (gputop_gpu_processes") {
        vec![series(node, "1")]
    } else {
        return None;
    };
    Some(vector(&answer))
}

fn json_or_empty(answer: Option<String>) -> Reply {
    Reply::Json(answer.unwrap_or_else(|| vector(&[])))
}

fn http(status: &str, content_type: &str, body: &str) -> Reply {
    Reply::Raw(
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

/// `--once` against a fake Prometheus answering `reply`: its exit status, stdout and stderr.
fn once_against(reply: impl Fn(&str) -> Reply + Send + Sync + 'static, json: bool) -> (bool, String, String) {
    let home = tempfile::tempdir().unwrap();
    let port = fake_prometheus(reply);
    let mut command = gputop(home.path());
    command.args([
        "--prometheus",
        &format!("http://127.0.0.1:{port}"),
        "--prometheus-timeout",
        "3",
    ]);
    command.arg("--once");
    if json {
        command.arg("--json");
    }
    let output = command.output().unwrap();
    (output.status.success(), stdout(&output), stderr(&output))
}

/// Asserts a failure in one line, without a panic, that says `why`.
fn fails_in_one_line(outcome: (bool, String, String), why: &str) {
    let (ok, out, err) = outcome;
    assert!(!ok, "it succeeded: {out}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains(why), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_answers_each_give_a_one_line_reason_and_no_panic() {
    fails_in_one_line(
        once_against(
            |_| {
                http(
                    "200 OK",
                    "text/html",
                    "<!DOCTYPE html><html><body>Sign in</body></html>",
                )
            },
            false,
        ),
        "not a Prometheus answer (an HTML page: a proxy or a login in the way?)",
    );
    fails_in_one_line(
        once_against(|_| http("401 Unauthorized", "text/plain", "Unauthorized"), false),
        "answered HTTP 401",
    );
    fails_in_one_line(
        once_against(
            |_| {
                http(
                    "400 Bad Request",
                    "application/json",
                    r#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\""}"#,
                )
            },
            false,
        ),
        r#"Prometheus: HTTP 400: invalid parameter "query""#,
    );
    // A body cut short: the length promised is not sent.
    fails_in_one_line(
        once_against(
            |_| {
                Reply::Raw(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5000\r\nConnection: close\r\n\r\n{\"status\":\"succ"
                        .to_vec(),
                )
            },
            false,
        ),
        "cannot read the answer",
    );
    // 40 MiB to the `up` query: over the cap, refused before it is all read.
    let huge = Arc::new(http("200 OK", "application/json", &" ".repeat(40 << 20)));
    fails_in_one_line(
        once_against(
            move |query| {
                if query.starts_with("up{") {
                    (*huge).clone()
                } else {
                    json_or_empty(healthy(query))
                }
            },
            false,
        ),
        "answer larger than 32 MiB",
    );
    // Nothing answers in time.
    fails_in_one_line(
        once_against(
            |_| {
                std::thread::sleep(Duration::from_secs(5));
                Reply::Json(vector(&[]))
            },
            false,
        ),
        "no whole answer within 3 s",
    );
}

#[test]
fn nan_infinite_samples_and_missing_series_are_named_and_the_rest_shown() {
    // NaN and +Inf utilisation: those GPUs show N/A, and the report says why.
    let (ok, out, err) = once_against(
        |query| {
            if query.starts_with("max by (instance, gpu) (gputop_gpu_utilization_ratio") {
                let node = r#""instance":"gpu-1:9835""#;
                Reply::Json(vector(&[
                    series(&format!(r#"{node},"gpu":"0""#), "NaN"),
                    series(&format!(r#"{node},"gpu":"1""#), "+Inf"),
                ]))
            } else {
                json_or_empty(healthy(query))
            }
        },
        true,
    );
    assert!(ok, "{err}");
    let fleet: serde_json::Value = serde_json::from_str(&out).unwrap();
    common::assert_matches_schema_file(&fleet, "the fleet", "config/fleet.schema.json");
    let problems: Vec<&str> = fleet["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    assert!(
        problems.contains(&"gputop_gpu_utilization_ratio: 2 samples are NaN or infinite, shown as N/A"),
        "{problems:?}"
    );
    let devices = fleet["nodes"][0]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    assert!(
        devices.iter().all(|d| d["utilization_percent"].is_null()),
        "{devices:?}"
    );
    assert_eq!(devices[0]["memory_used_bytes"], 1_000_000_000u64);

    // An exporter of another version: no info and no utilisation series.
    let (ok, out, err) = once_against(
        |query| {
            if query.contains("gputop_gpu_info") || query.contains("gputop_gpu_utilization_ratio") {
                Reply::Json(vector(&[]))
            } else {
                json_or_empty(healthy(query))
            }
        },
        false,
    );
    assert!(ok, "{err}");
    assert!(
        out.contains(r#"problem: no gputop_gpu_info series for {job=~"gputop|gputop-exporter"}: are these gputop exporters, of this version?"#),
        "{out}"
    );
    assert!(
        out.contains("problem: no gputop_gpu_utilization_ratio series"),
        "{out}"
    );
    assert!(
        out.contains("1 nodes: 1 up, 0 down   GPUs 2"),
        "GPUs from the memory series: {out}"
    );
    // Processes counted, but no per-process series: the report says how to get them.
    assert!(
        out.contains("problem: no per-process series: run the exporters with --processes"),
        "{out}"
    );
}

#[test]
fn the_remote_view_reports_once_with_a_node_down() {
    let home = tempfile::tempdir().unwrap();
    let (_exporter, port) = demo_exporter(home.path());
    let dead = free_port();
    let args = ["--remote", &format!("127.0.0.1:{port},127.0.0.1:{dead}")];
    let fleet = fleet_json(home.path(), &args);
    common::assert_matches_schema_file(&fleet, "the fleet", "config/fleet.schema.json");
    assert_eq!(fleet["feed"], "nodes");
    let up = node(&fleet, &format!("127.0.0.1:{port}"));
    assert_eq!(
        (up["state"].as_str(), up["devices"].as_array().unwrap().len()),
        (Some("up"), 6)
    );
    let own: serde_json::Value = serde_json::from_str(&common::get(port, "/snapshot").2).unwrap();
    assert_eq!(
        up["processes"].as_u64().unwrap() as usize,
        own["processes"].as_array().unwrap().len()
    );
    let down = node(&fleet, &format!("127.0.0.1:{dead}"));
    assert_eq!(down["state"], "down");
    assert!(
        down["reason"].as_str().unwrap().contains("cannot connect"),
        "{down}"
    );
    assert!(!fleet["top_processes"].as_array().unwrap().is_empty());
    let text = stdout(&fleet_once(home.path(), &args));
    assert!(text.contains("2 nodes: 1 up, 1 down   GPUs 6"), "{text}");
    assert!(text.contains("top processes by GPU memory:"), "{text}");
    // Not a terminal and no --once: the report all the same, as for one machine.
    let output = gputop(home.path())
        .args(args)
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        stdout(&output).contains("2 nodes: 1 up, 1 down"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn bad_addresses_and_selectors_are_refused_in_one_line() {
    let home = tempfile::tempdir().unwrap();
    for (args, why) in [
        (
            vec!["--prometheus", "ftp://prom:9090"],
            "--prometheus 'ftp://prom:9090': only http:// and https:// are spoken",
        ),
        (
            vec![
                "--prometheus",
                "http://prom:9090",
                "--prometheus-selector",
                "{job=\"gputop\"",
            ],
            "--prometheus-selector '{job=\"gputop\"' is not a label selector",
        ),
        (vec!["--prometheus-selector", "{job=\"x\"}"], "--prometheus"),
        // A device for a CA file is refused, not read until memory runs out.
        (
            vec![
                "--prometheus",
                "https://127.0.0.1:1",
                "--prometheus-ca-file",
                "/dev/zero",
            ],
            "/dev/zero: not a regular file",
        ),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_gputop"))
            .env("HOME", home.path())
            .args(&args)
            .arg("--once")
            .output()
            .unwrap();
        let err = stderr(&output);
        assert!(!output.status.success(), "{args:?}");
        assert!(err.contains(why), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// The drill-down into one node (Enter on the fleet screen) from a real Prometheus shows
/// what the node itself serves: each process's type (C, G, C+G), each GPU's driver version
/// (NVIDIA's driver; the kernel's release for the demo's amdgpu and xe) and its memory's
/// temperature where it has one.
#[test]
#[ignore = "needs Prometheus: a real prometheus server scrapes an exporter"]
fn the_drill_down_from_a_real_prometheus_has_the_nodes_process_types_and_driver_versions() {
    use gputop_core::source::http::{Endpoint, TlsFiles};
    use gputop_core::source::prometheus::{self, Prometheus};

    let home = tempfile::tempdir().unwrap();
    let (_exporter, port) = demo_exporter(home.path());
    let (_prometheus, web) = prometheus_with(
        home.path(),
        &format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: gputop\n    \
             static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    );
    let own: serde_json::Value = serde_json::from_str(&common::get(port, "/snapshot").2).unwrap();
    let types = |processes: Vec<(u64, u64, String)>| {
        let mut processes = processes;
        processes.sort();
        processes
    };
    let own_types = types(
        own["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let number = |key: &str| p[key].as_u64().unwrap();
                (
                    number("pid"),
                    number("gpu_index"),
                    p["type"].as_str().unwrap().to_owned(),
                )
            })
            .collect(),
    );
    let own_drivers: Vec<(u64, String)> = own["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["index"].as_u64().unwrap(),
                d["driver_version"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        own_types.iter().any(|(_, _, kind)| kind == "G")
            && own_types.iter().any(|(_, _, kind)| kind == "C+G"),
        "the demo has graphics and mixed processes: {own_types:?}"
    );
    assert_eq!(
        own_drivers.iter().map(|(_, v)| v.as_str()).collect::<Vec<_>>(),
        [
            "550.54.15",
            "550.54.15",
            "550.54.15",
            "550.54.15",
            "6.8.0-49-generic",
            "6.8.0-49-generic"
        ]
    );

    let settings = prometheus::Settings {
        endpoint: Endpoint::parse(&format!("http://127.0.0.1:{web}"), prometheus::PROMETHEUS_PORT).unwrap(),
        selector: String::new(),
        tls: TlsFiles::default(),
        credentials: None,
        timeout: Duration::from_secs(5),
    };
    let client = Prometheus::new(&settings).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let instance = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let node = loop {
        if let Ok(node) = runtime.block_on(client.node(&instance))
            && node.processes.len() == own_types.len()
            && node.devices.len() == own_drivers.len()
        {
            break node;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never had the node's series"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let drilled = types(
        node.processes
            .iter()
            .map(|p| {
                (
                    u64::from(p.pid),
                    u64::from(p.gpu_index),
                    p.kind.label().to_owned(),
                )
            })
            .collect(),
    );
    assert_eq!(drilled, own_types);
    let drivers: Vec<(u64, String)> = node
        .devices
        .iter()
        .map(|d| {
            (
                u64::from(d.index),
                d.driver_version.value().cloned().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(drivers, own_drivers);
    // The memory's temperature where the node has one (the demo's NVIDIA HBM boards and its
    // AMD GPU's `mem` sensor), none where it has none (its Intel GPU).
    let has_memory_temperature = |d: &serde_json::Value| d["memory_temperature_celsius"].is_number();
    let own_memory_temperatures: Vec<bool> = own["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(has_memory_temperature)
        .collect();
    assert_eq!(own_memory_temperatures, [true, true, true, true, true, false]);
    let drilled_memory_temperatures: Vec<bool> = node
        .devices
        .iter()
        .map(|d| d.memory_temperature_celsius.get().is_some())
        .collect();
    assert_eq!(drilled_memory_temperatures, own_memory_temperatures);
    // The power draw at this instant: NVML's field value, so NVIDIA's GPUs only.
    let drilled_instant_power: Vec<bool> = node
        .devices
        .iter()
        .map(|d| d.power_instant_watts.get().is_some())
        .collect();
    assert_eq!(drilled_instant_power, [true, true, true, true, false, false]);
    assert_eq!(
        node.driver_version.value(),
        own["driver_version"].as_str().map(str::to_owned).as_ref()
    );
}

//! The real binary, through nvml-wrapper, against every scenario in tests/scenarios: `--once`
//! and `--json` show exactly the scenario's values, N/A/null where unsupported, and a lost GPU
//! never disturbs the others.

mod common;

use common::{Sleepers, gputop_on, json, scenario, stderr, stdout};
use serde_json::{Value, json};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn device(doc: &Value, index: u64) -> &Value {
    doc["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["index"] == index)
        .unwrap_or_else(|| panic!("no device {index} in {doc}"))
}

/// Checks `keys` of `object` against `expected`, reporting every mismatch at once.
fn assert_fields(object: &Value, expected: &Value) {
    let mut wrong = Vec::new();
    for (key, want) in expected.as_object().unwrap() {
        if &object[key] != want {
            wrong.push(format!("{key}: got {}, want {want}", object[key]));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn two_gpus_training_json_has_exactly_the_scenario_values() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(3);
    let pids = sleepers.pids();
    let mut command = gputop_on(home.path(), &scenario("two-gpus-training"), 100_000);
    command.env("GPUTOP_SIM_PIDS", sleepers.env());
    let doc = json(command);

    assert_eq!(doc["version"], 1);
    assert_eq!(doc["driver_version"], "550.54.15");
    assert_eq!(doc["cuda_driver_version"], "12.4");
    assert_eq!(doc["nvml_version"], "12.550.54.15");
    assert!(doc["timestamp"].as_str().unwrap().ends_with('Z'));

    let used0 = 300 * MIB + 18 * GIB + 6 * GIB;
    assert_fields(
        device(&doc, 0),
        &json!({
            "name": "NVIDIA A100-SXM4-40GB",
            "uuid": "GPU-5f0c0a1e-0000-4000-8000-000000000000",
            "pci_bus_id": "00000000:07:00.0",
            "status": "ok",
            "status_reason": null,
            "utilization_gpu_percent": 95,
            "utilization_gpu_mean_percent": 95.0,
            "utilization_gpu_peak_percent": 95.0,
            "utilization_memory_percent": 40,
            "utilization_memory_mean_percent": 40.0,
            "memory_total_bytes": 40 * GIB,
            "memory_reserved_bytes": 512 * MIB,
            "memory_used_bytes": used0,
            "memory_free_bytes": 40 * GIB - 512 * MIB - used0,
            "bar1_total_bytes": 64 * GIB,
            "temperature_celsius": 76,
            "temperature_slowdown_celsius": 89,
            "temperature_shutdown_celsius": 92,
            "fan_speed_percent": 55,
            "fan_speeds_percent": [55],
            "power_usage_watts": 312.0,
            "power_limit_watts": 400.0,
            "power_enforced_limit_watts": 400.0,
            "energy_joules": 31_200.0,
            "performance_state": 0,
            "clock_graphics_mhz": 1410,
            "clock_sm_mhz": 1395,
            "clock_memory_mhz": 1215,
            "clock_video_mhz": 1275,
            "clock_max_sm_mhz": 1410,
            "pcie_link_generation": 4,
            "pcie_link_width": 16,
            "pcie_link_max_width": 16,
            "pcie_tx_bytes_per_second": null,
            "encoder_utilization_percent": 0,
            "ecc_enabled": true,
            "ecc_uncorrected_volatile_errors": 2,
            "compute_mode": "default",
            "persistence_mode": true,
            "mig_mode": false,
            "throttle_reasons": [],
        }),
    );
    assert_fields(
        device(&doc, 1),
        &json!({
            "utilization_gpu_percent": 63,
            "utilization_gpu_mean_percent": 63.0,
            "utilization_gpu_peak_percent": 63.0,
            "utilization_memory_percent": 21,
            "memory_used_bytes": 300 * MIB + 24 * MIB,
            "memory_reserved_bytes": 512 * MIB,
            "temperature_celsius": 58,
            "fan_speed_percent": 41,
            "power_usage_watts": 201.5,
            "performance_state": 2,
            "pcie_link_width": 8,
            "persistence_mode": false,
            "clock_sm_mhz": 1410,
        }),
    );

    let processes = doc["processes"].as_array().unwrap();
    let order: Vec<u64> = processes.iter().map(|p| p["pid"].as_u64().unwrap()).collect();
    assert_eq!(
        order,
        pids.iter().map(|&p| u64::from(p)).collect::<Vec<_>>(),
        "largest GPU memory first"
    );
    assert_fields(
        &processes[0],
        &json!({"gpu_index": 0, "gpu_uuid": "GPU-5f0c0a1e-0000-4000-8000-000000000000", "type": "C",
                "gpu_memory_bytes": 18 * GIB, "sm_percent": 90, "memory_bandwidth_percent": 30,
                "command": "sleep 600"}),
    );
    assert_fields(
        &processes[1],
        &json!({"type": "C+G", "gpu_memory_bytes": 6 * GIB, "sm_percent": 4}),
    );
    assert_fields(
        &processes[2],
        &json!({"gpu_index": 1, "type": "G", "gpu_memory_bytes": 24 * MIB, "sm_percent": 1}),
    );
    for process in processes {
        for key in [
            "user",
            "cpu_percent",
            "host_memory_bytes",
            "start_time_unix_seconds",
            "running_seconds",
        ] {
            assert!(
                !process[key].is_null(),
                "{key} of a live process is known: {process}"
            );
        }
    }
}

#[test]
fn two_gpus_training_text_report_shows_the_same_values() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(3);
    let output = gputop_on(home.path(), &scenario("two-gpus-training"), 100_000)
        .env("GPUTOP_SIM_PIDS", sleepers.env())
        .arg("--once")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    let gpu0 = lines
        .iter()
        .find(|l| l.trim_start().starts_with("0  NVIDIA"))
        .expect("GPU 0 line");
    for want in ["95%", "95%/95%", "24.3GiB/40.0GiB (61%)", "76C", "312/400W"] {
        assert!(gpu0.contains(want), "GPU 0 line lacks {want:?}: {gpu0}");
    }
    let gpu1 = lines
        .iter()
        .find(|l| l.trim_start().starts_with("1  NVIDIA"))
        .expect("GPU 1 line");
    assert!(
        gpu1.contains("63%") && gpu1.contains("58C") && gpu1.contains("202/400W"),
        "{gpu1}"
    );
    let header = lines
        .iter()
        .position(|l| l.contains("PID") && l.contains("COMMAND"))
        .expect("process header");
    let first = lines[header + 1];
    let pid = sleepers.pids()[0].to_string();
    assert!(
        first.contains(&pid) && first.contains("18.0GiB") && first.contains("sleep 600"),
        "{first}"
    );
}

#[test]
fn idle_gpu_has_no_processes_and_exact_readings() {
    let home = tempfile::tempdir().unwrap();
    let doc = json(gputop_on(home.path(), &scenario("idle-gpu"), 5_000));
    assert_eq!(doc["processes"], json!([]));
    assert_fields(
        device(&doc, 0),
        &json!({"name": "NVIDIA A100-PCIE-40GB", "pci_bus_id": "00000000:3B:00.0",
                "utilization_gpu_percent": 0, "utilization_gpu_peak_percent": 0.0,
                "memory_used_bytes": 4 * MIB, "memory_free_bytes": 40 * GIB - 512 * MIB - 4 * MIB,
                "temperature_celsius": 31, "power_usage_watts": 35.0, "power_limit_watts": 250.0,
                "fan_speed_percent": 30, "clock_graphics_mhz": 210, "pcie_link_generation": 1,
                "bar1_used_bytes": 2 * MIB, "persistence_mode": false, "energy_joules": 175.0}),
    );
    let text = stdout(
        &gputop_on(home.path(), &scenario("idle-gpu"), 5_000)
            .arg("--once")
            .output()
            .unwrap(),
    );
    assert!(text.contains("No GPU processes."), "{text}");
}

#[test]
fn unsupported_fan_and_power_are_null_and_n_a_never_zero() {
    let home = tempfile::tempdir().unwrap();
    let path = scenario("faults-fan-power-unsupported");
    let doc = json(gputop_on(home.path(), &path, 1_000));
    assert_fields(
        device(&doc, 0),
        &json!({"status": "ok", "utilization_gpu_percent": 12, "fan_speed_percent": null,
                "fan_speeds_percent": null, "power_usage_watts": null, "power_limit_watts": null,
                "power_enforced_limit_watts": null, "energy_joules": null, "temperature_celsius": null,
                "memory_used_bytes": 500 * MIB}),
    );
    let output = gputop_on(home.path(), &path, 1_000)
        .args(["--once", "--config"])
        .arg(write_metrics_config(home.path()))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let line = stdout(&output)
        .lines()
        .find(|l| l.contains("Tesla T4"))
        .unwrap()
        .to_string();
    assert!(line.contains("N/A/N/A"), "power shows N/A/N/A: {line}");
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert!(cells.contains(&"N/A"), "fan and temperature show N/A: {line}");
    assert!(
        !line.contains(" 0% ") && !line.contains("0W"),
        "unknown is never 0: {line}"
    );
}

fn write_metrics_config(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("metrics.toml");
    std::fs::write(
        &path,
        "[display]\ndefault_metrics = [\"utilization\", \"temperature\", \"fan\", \"power\"]\n",
    )
    .unwrap();
    path
}

#[test]
fn a_gpu_lost_mid_run_is_marked_while_the_others_stay_correct() {
    let home = tempfile::tempdir().unwrap();
    let path = scenario("faults-gpu-lost");
    let before = json(gputop_on(home.path(), &path, 10_000));
    assert_eq!(device(&before, 1)["status"], "ok");
    assert_eq!(device(&before, 1)["utilization_gpu_percent"], 22);

    let after = json(gputop_on(home.path(), &path, 40_000));
    let lost = device(&after, 1);
    assert_eq!(lost["status"], "lost");
    assert!(
        lost["status_reason"]
            .as_str()
            .unwrap()
            .contains("fell off the bus"),
        "{lost}"
    );
    for key in [
        "name",
        "utilization_gpu_percent",
        "memory_used_bytes",
        "temperature_celsius",
        "power_usage_watts",
    ] {
        assert!(lost[key].is_null(), "{key} of a lost GPU is null");
    }
    assert_fields(
        device(&after, 0),
        &json!({"status": "ok", "utilization_gpu_percent": 11, "temperature_celsius": 45,
                "memory_used_bytes": GIB, "memory_reserved_bytes": 300 * MIB, "power_usage_watts": 30.0}),
    );
    assert_fields(
        device(&after, 2),
        &json!({"status": "ok", "utilization_gpu_percent": 33, "temperature_celsius": 55,
                "memory_used_bytes": 3 * GIB, "power_usage_watts": 50.0}),
    );
    let text = stdout(
        &gputop_on(home.path(), &path, 40_000)
            .arg("--once")
            .output()
            .unwrap(),
    );
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("1 "))
        .expect("GPU 1 line");
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(&cells[..3], ["1", "N/A", "LOST:"], "{text}");
    let gpu0 = text.lines().find(|l| l.trim_start().starts_with("0 ")).unwrap();
    assert!(
        gpu0.len() < 100,
        "the lost GPU's message does not widen the columns: {text}"
    );
    let list = stdout(
        &gputop_on(home.path(), &path, 40_000)
            .arg("--list")
            .output()
            .unwrap(),
    );
    assert_eq!(list.lines().count(), 3, "{list}");
    assert!(list.lines().nth(1).unwrap().contains("[LOST:"), "{list}");
}

#[test]
fn an_old_driver_falls_back_to_v2_process_calls() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(2);
    let mut command = gputop_on(home.path(), &scenario("old-driver"), 1_000);
    command.env("GPUTOP_SIM_PIDS", sleepers.env());
    let doc = json(command);
    assert_eq!(doc["driver_version"], "450.80.02");
    assert_eq!(doc["cuda_driver_version"], "11.0");
    assert_fields(
        device(&doc, 0),
        &json!({"status": "ok", "utilization_gpu_percent": 77, "energy_joules": null, "power_usage_watts": 180.0}),
    );
    let processes = doc["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 2, "{processes:?}");
    assert_fields(
        &processes[0],
        &json!({"type": "C", "gpu_memory_bytes": 5 * GIB, "sm_percent": 70}),
    );
    assert_fields(
        &processes[1],
        &json!({"type": "G", "gpu_memory_bytes": 100 * MIB}),
    );
}

#[test]
fn eight_gpus_and_64_processes_match_the_scenario_engine() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(64);
    let path = scenario("eight-gpus-64-processes");
    let t_ms = 50_000;
    let mut command = gputop_on(home.path(), &path, t_ms);
    command.env("GPUTOP_SIM_PIDS", sleepers.env());
    let doc = json(command);

    // The oracle: the scenario file evaluated by the simulator's engine, without the C ABI.
    let env_pids = sleepers.env();
    let text = std::fs::read_to_string(&path).unwrap();
    let lookup = |k: &str| (k == "GPUTOP_SIM_PIDS").then(|| env_pids.clone());
    let parsed = nvml_sim::scenario::Scenario::parse(&text, "oracle", &lookup).unwrap();
    let sim = nvml_sim::engine::Sim::new(parsed);
    let t = t_ms as f64 / 1000.0;
    for gpu in 0..8 {
        let d = &sim.gpu(gpu).dynamic;
        let got = device(&doc, gpu as u64);
        assert_eq!(
            got["utilization_gpu_percent"],
            sim.percent(
                gpu,
                &d.utilization_gpu,
                "utilization_gpu",
                sim.latest_sample_tick(t)
            )
            .unwrap()
        );
        assert_eq!(
            got["temperature_celsius"],
            sim.count(gpu, &d.temperature, "temperature", t).unwrap()
        );
        let power = sim
            .count(gpu, &d.power_mw, "power_mw", sim.latest_sample_tick(t))
            .unwrap();
        assert_eq!(got["power_usage_watts"], json!(f64::from(power) / 1000.0));
        assert_eq!(got["memory_used_bytes"], sim.memory(gpu, t).unwrap().used);
        assert_eq!(got["fan_speed_percent"], Value::Null, "fans = 0");
    }
    let processes = doc["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 64);
    let memories: Vec<u64> = processes
        .iter()
        .map(|p| p["gpu_memory_bytes"].as_u64().unwrap())
        .collect();
    assert!(
        memories.windows(2).all(|w| w[0] >= w[1]),
        "sorted by GPU memory, largest first"
    );
    let samples: Vec<_> = (0..8)
        .flat_map(|gpu| {
            let time = nvml_sim::engine::TimeBase::now(t, 1.0);
            sim.process_samples(gpu, t, &time, 0)
        })
        .collect();
    for (i, pid) in sleepers.pids().into_iter().enumerate() {
        let (gpu, slot) = (i / 8, i % 8);
        let row = processes
            .iter()
            .find(|p| p["pid"] == pid)
            .unwrap_or_else(|| panic!("pid {pid} missing"));
        let want_sm = samples.iter().find(|s| s.pid == pid).unwrap().sm;
        assert_fields(
            row,
            &json!({"gpu_index": gpu, "gpu_memory_bytes": ((slot as u64 + 1) * 512 + gpu as u64) * MIB,
                    "type": if slot == 7 { "G" } else { "C" }, "sm_percent": want_sm,
                    "memory_bandwidth_percent": (slot * 7) % 50}),
        );
    }
}

#[test]
fn filters_narrow_devices_and_processes() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(3);
    let pids = sleepers.pids();
    let run = |args: &[&str]| {
        let mut command = gputop_on(home.path(), &scenario("two-gpus-training"), 100_000);
        command.env("GPUTOP_SIM_PIDS", sleepers.env()).args(args);
        let doc = json(command);
        let devices: Vec<u64> = doc["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["index"].as_u64().unwrap())
            .collect();
        let procs: Vec<u64> = doc["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["pid"].as_u64().unwrap())
            .collect();
        (devices, procs)
    };
    let p: Vec<u64> = pids.iter().map(|&p| u64::from(p)).collect();
    assert_eq!(run(&[]), (vec![0, 1], p.clone()));
    assert_eq!(run(&["--only", "1"]), (vec![1], vec![p[2]]));
    assert_eq!(run(&["--compute"]), (vec![0, 1], vec![p[0], p[1]]));
    assert_eq!(run(&["--graphics"]), (vec![0, 1], vec![p[1], p[2]]));
    assert_eq!(
        run(&["--pid", &p[2].to_string(), &p[0].to_string()]),
        (vec![0, 1], vec![p[0], p[2]])
    );
    assert_eq!(run(&["--user", "nobody-at-all"]), (vec![0, 1], vec![]));
    let me = json({
        let mut c = gputop_on(home.path(), &scenario("two-gpus-training"), 100_000);
        c.env("GPUTOP_SIM_PIDS", sleepers.env());
        c
    })["processes"][0]["user"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(run(&["--user", &me]).1, p);
}

/// The JSON schema is a public contract (README.md): this locks its keys and their order.
#[test]
fn json_keys_are_exactly_the_documented_schema() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(3);
    let mut command = gputop_on(home.path(), &scenario("two-gpus-training"), 100_000);
    // GPU 0 runs at 76 C: a 70 C threshold puts one alert in the report.
    command
        .env("GPUTOP_SIM_PIDS", sleepers.env())
        .env("GPUTOP_ALERT_TEMPERATURE_THRESHOLD", "70");
    let doc = json(command);
    let keys = |v: &Value| {
        v.as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        keys(&doc),
        "version timestamp hostname pid_namespace driver_version cuda_driver_version nvml_version devices processes \
         host hidden_processes alerts usage"
    );
    assert_eq!(
        keys(&doc["alerts"][0]),
        "rule severity state subject gpu_index pid since value summary"
    );
    assert_eq!(doc["alerts"][0]["rule"], "gpu_temperature_high");
    assert_eq!(doc["alerts"][0]["gpu_index"], 0);
    assert_eq!(doc["alerts"].as_array().unwrap().len(), 1, "{}", doc["alerts"]);
    assert_eq!(
        keys(&doc["devices"][0]),
        "index vendor driver driver_version name uuid pci_bus_id status status_reason utilization_gpu_percent \
         utilization_gpu_mean_percent utilization_gpu_peak_percent utilization_memory_percent \
         utilization_memory_mean_percent utilization_memory_peak_percent memory_total_bytes \
         memory_used_bytes memory_free_bytes memory_reserved_bytes bar1_total_bytes bar1_used_bytes \
         gtt_total_bytes gtt_used_bytes temperature_celsius memory_temperature_celsius temperature_slowdown_celsius temperature_shutdown_celsius fan_speed_percent \
         fan_speeds_percent power_usage_watts power_instant_watts power_usage_mean_watts power_usage_peak_watts power_limit_watts power_enforced_limit_watts energy_joules \
         performance_state clock_graphics_mhz clock_sm_mhz clock_memory_mhz clock_video_mhz \
         clock_max_graphics_mhz clock_max_sm_mhz clock_max_memory_mhz clock_max_video_mhz \
         pcie_link_generation pcie_link_width pcie_link_max_generation pcie_link_max_width \
         pcie_tx_bytes_per_second pcie_rx_bytes_per_second encoder_utilization_percent \
         decoder_utilization_percent ecc_enabled ecc_uncorrected_volatile_errors remapped_rows_correctable \
         remapped_rows_uncorrectable remapped_rows_pending remapped_rows_failure retired_pages_single_bit \
         retired_pages_double_bit nvlinks xid_errors last_xid last_critical_xid compute_mode \
         persistence_mode mig_mode throttle_reasons mig_devices pods process_list_error"
    );
    assert_eq!(
        keys(&doc["processes"][0]),
        "pid gpu_index gpu_uuid type gpu_memory_bytes gpu_system_memory_bytes sm_percent memory_bandwidth_percent encoder_percent \
         decoder_percent gpu_instance_id compute_instance_id user command cpu_percent host_memory_bytes \
         start_time_unix_seconds running_seconds \
         container container_pid local_pid pid_mapping unmapped_reason"
    );
    assert_eq!(
        keys(&doc["host"]),
        "cpu_percent memory_total_bytes memory_used_bytes swap_total_bytes swap_used_bytes load_average \
         uptime_seconds"
    );
    assert_eq!(keys(&doc["usage"]), "since seconds users containers");
    assert_eq!(
        keys(&doc["usage"]["users"][0]),
        "user gpus gpu_memory_bytes processes gpu_seconds gpu_memory_byte_seconds \
         gpu_energy_joules"
    );
    assert_eq!(
        keys(&doc["usage"]["containers"][0]),
        "container gpus gpu_memory_bytes processes gpu_seconds gpu_memory_byte_seconds \
         gpu_energy_joules"
    );
}

/// MIG through the real nvml-wrapper path: each MIG device with its ids, profile, UUID and
/// memory (its processes'), each process attributed to its MIG device.
#[test]
fn mig_devices_are_enumerated_and_processes_attributed() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(4);
    let p = sleepers.pids();
    let run = |extra: &[&str], visible: Option<&str>| {
        let mut command = gputop_on(home.path(), &scenario("mig-a100"), 1_000);
        command.env("GPUTOP_SIM_PIDS", sleepers.env()).args(extra);
        if let Some(list) = visible {
            command.env("CUDA_VISIBLE_DEVICES", list);
        }
        json(command)
    };
    let doc = run(&[], None);
    let a100 = &doc["devices"][0];
    assert_eq!(a100["mig_mode"], true);
    let migs = a100["mig_devices"].as_array().unwrap();
    let summary: Vec<String> = migs
        .iter()
        .map(|m| {
            format!(
                "{}/{} {} {} GiB used of {:.2}",
                m["gpu_instance_id"],
                m["compute_instance_id"],
                m["profile"].as_str().unwrap(),
                m["memory_used_bytes"].as_u64().unwrap() >> 30,
                m["memory_total_bytes"].as_f64().unwrap() / f64::from(1u32 << 30)
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            "1/0 3g.40gb 20 GiB used of 39.50",
            "5/0 2g.20gb 6 GiB used of 19.50",
            "13/0 1g.10gb 0 GiB used of 9.75"
        ]
    );
    assert_eq!(migs[1]["uuid"], "MIG-22222222-bbbb-5000-9000-000000000002");
    assert!(
        migs[0]["utilization_gpu_percent"].is_null(),
        "not given per MIG device"
    );
    // Nor for the MIG-enabled GPU or its processes: N/A, never 0.
    assert!(a100["utilization_gpu_percent"].is_null() && a100["utilization_gpu_mean_percent"].is_null());
    assert!(
        doc["processes"][1]["sm_percent"].is_null(),
        "{}",
        doc["processes"][1]
    );
    assert_eq!(doc["processes"][0]["sm_percent"], 0, "the whole H100 reports it");
    assert_eq!(doc["devices"][1]["mig_devices"].as_array().unwrap().len(), 0);
    let placed = |doc: &serde_json::Value| -> Vec<(u64, serde_json::Value, serde_json::Value)> {
        doc["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| {
                (
                    q["pid"].as_u64().unwrap(),
                    q["gpu_instance_id"].clone(),
                    q["compute_instance_id"].clone(),
                )
            })
            .collect()
    };
    let pid = |i: usize| u64::from(p[i]);
    let null = serde_json::Value::Null;
    assert_eq!(
        placed(&doc),
        vec![
            (pid(3), null.clone(), null.clone()),
            (pid(0), 1.into(), 0.into()),
            (pid(1), 1.into(), 0.into()),
            (pid(2), 5.into(), 0.into()),
        ]
    );

    // --only and --only-visible name GPUs and MIG devices as CUDA_VISIBLE_DEVICES does.
    let pids = |doc: serde_json::Value| placed(&doc).iter().map(|(pid, _, _)| *pid).collect::<Vec<_>>();
    assert_eq!(pids(run(&["--only", "MIG-22222222"], None)), vec![pid(2)]);
    assert_eq!(
        pids(run(
            &["--only", "MIG-GPU-a100a100-0000-4000-8000-000000000001/1/0"],
            None
        )),
        vec![pid(0), pid(1)]
    );
    assert_eq!(pids(run(&["--only", "GPU-b200"], None)), vec![pid(3)]);
    assert_eq!(
        pids(run(&["--only-visible"], Some("1,MIG-11111111"))),
        vec![pid(3), pid(0), pid(1)]
    );
    assert_eq!(
        pids(run(&["--only-visible"], Some("GPU-ffff,1"))),
        Vec::<u64>::new(),
        "CUDA stops at the first bad entry"
    );
    assert_eq!(
        pids(run(&["--only-visible"], None)).len(),
        4,
        "unset: everything is visible"
    );
    let only_mig = run(&["--only", "MIG-33333333"], None);
    assert_eq!(only_mig["devices"].as_array().unwrap().len(), 1);
    assert_eq!(only_mig["devices"][0]["mig_devices"].as_array().unwrap().len(), 1);
}

/// The memory's temperature and the power draw at this instant through NVML's field values,
/// as the simulator's library serves them: an HBM board's figures, and `null` (`N/A` in
/// `--once`) for a board whose driver says the fields are not supported.
#[test]
fn memory_temperature_and_instant_power_are_nvmls_field_values_where_the_board_has_them() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join("memory-temperature.toml");
    std::fs::write(
        &path,
        "[meta]\nversion = 1\n\n[[gpu]]\nname = \"NVIDIA A100-SXM4-80GB\"\n[gpu.dynamic]\n\
         temperature = 61\nmemory_temperature = 74\npower_mw = 250500\n\n[[gpu]]\n\
         name = \"NVIDIA A40\"\n[gpu.dynamic]\ntemperature = 55\n\n[[gpu.fault]]\n\
         field = \"power_usage\"\nerror = \"NOT_SUPPORTED\"\n",
    )
    .unwrap();
    let doc = json(gputop_on(home.path(), &path, 1_000));
    assert_eq!(device(&doc, 0)["memory_temperature_celsius"], 74);
    assert_eq!(device(&doc, 1)["memory_temperature_celsius"], Value::Null);
    assert_eq!(device(&doc, 1)["temperature_celsius"], 55);
    // The power draw at this instant is the field value `NVML_FI_DEV_POWER_INSTANT`; a board
    // without power readings has neither figure.
    assert_eq!(device(&doc, 0)["power_instant_watts"], 250.5);
    assert_eq!(device(&doc, 1)["power_instant_watts"], Value::Null);
    assert_eq!(device(&doc, 1)["power_usage_watts"], Value::Null);

    let config = home.path().join("memtemp.toml");
    std::fs::write(
        &config,
        "[display]\ndefault_metrics = [\"temperature\", \"memory_temperature\", \"power_instant\"]\n",
    )
    .unwrap();
    let output = gputop_on(home.path(), &path, 1_000)
        .args(["--once", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let row = |name: &str| {
        text.lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("no {name}: {text}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert!(text.contains(" MEMTEMP"), "{text}");
    assert!(text.contains(" POWER NOW"), "{text}");
    assert_eq!(
        row("A100")[row("A100").len() - 3..],
        ["61C", "74C", "250W"],
        "{text}"
    );
    assert_eq!(
        row("A40")[row("A40").len() - 3..],
        ["55C", "N/A", "N/A"],
        "{text}"
    );
}

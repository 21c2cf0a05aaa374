//! The simulator's `nvidia-smi`: the query options gputop validate uses, in nvidia-smi's formats.

use std::process::Command;

fn smi(scenario: &str, args: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let lib = exe.parent().unwrap().join("libnvml_sim.so");
    std::fs::copy(lib, dir.path().join("libnvidia-ml.so.1")).unwrap();
    let path = dir.path().join("scenario.toml");
    std::fs::write(&path, scenario).unwrap();
    Command::new(env!("CARGO_BIN_EXE_nvidia-smi"))
        .args(args)
        .env("LD_LIBRARY_PATH", dir.path())
        .env("GPUTOP_SIM_SCENARIO", &path)
        .env("GPUTOP_SIM_CLOCK", "manual")
        .output()
        .unwrap()
}

const MACHINE: &str = r#"
[meta]
version = 1
[[gpu]]
name = "Sim A"
uuid = "GPU-a"
memory_total = "8 GiB"
memory_reserved = "256 MiB"
memory_base_used = "1 GiB"
fans = 0
[gpu.dynamic]
utilization_gpu = 42
power_mw = 123456
pstate = 8
[[gpu.process]]
pid = 4242
name = "trainer"
used_memory = "3 GiB"
"#;

fn text(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn query_gpu_in_csv_with_and_without_header_and_units() {
    let fields =
        "--query-gpu=index,uuid,name,utilization.gpu,memory.used,memory.total,power.draw,pstate,fan.speed";
    let plain = text(&smi(MACHINE, &[fields, "--format=csv,noheader,nounits"]));
    assert_eq!(
        plain,
        "0, GPU-a, Sim A, 42, 4096, 8192, 123.46, P8, [Not Supported]\n"
    );
    let decorated = text(&smi(MACHINE, &[fields, "--format=csv"]));
    let mut lines = decorated.lines();
    assert_eq!(
        lines.next(),
        Some("index, uuid, name, utilization.gpu, memory.used, memory.total, power.draw, pstate, fan.speed")
    );
    assert_eq!(
        lines.next(),
        Some("0, GPU-a, Sim A, 42 %, 4096 MiB, 8192 MiB, 123.46 W, P8, [Not Supported]")
    );
}

#[test]
fn memory_can_be_read_the_v1_way_with_reserved_counted_as_used() {
    let scenario = format!("[smi]\nmemory_includes_reserved = true\n{MACHINE}");
    let out = text(&smi(
        &scenario,
        &["--query-gpu=memory.used", "--format=csv,noheader,nounits"],
    ));
    assert_eq!(out, "4352\n");
}

#[test]
fn query_compute_apps() {
    let out = text(&smi(
        MACHINE,
        &[
            "--query-compute-apps=gpu_uuid,pid,used_memory,process_name",
            "--format=csv,noheader",
        ],
    ));
    assert_eq!(out, "GPU-a, 4242, 3072 MiB, trainer\n");
}

#[test]
fn bad_fields_and_a_missing_driver_fail_like_nvidia_smi() {
    let bad = smi(MACHINE, &["--query-gpu=bogus", "--format=csv"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("Field \"bogus\" is not a valid field to query."));
    let no_driver = smi("[meta]\nversion = 2\n", &["--query-gpu=index", "--format=csv"]);
    assert_eq!(no_driver.status.code(), Some(9));
    assert!(
        String::from_utf8_lossy(&no_driver.stderr).contains("couldn't communicate with the NVIDIA driver")
    );
    assert!(no_driver.stdout.is_empty());
}

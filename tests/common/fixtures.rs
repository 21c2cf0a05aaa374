//! Fixed data for tests that need a snapshot without a simulator: three GPUs (one lost),
//! three processes (one with a hostile command line), a busy host.

use std::time::{Duration, UNIX_EPOCH};

use gputop_core::model::*;

pub const GIB: u64 = 1 << 30;

pub fn device(index: u32, name: &str, used_gib: u64, util: u32, temp: u32) -> Device {
    let mut d = Device::unavailable(index, DeviceStatus::Ok, "unused");
    d.name = Reading::Value(name.into());
    d.uuid = Reading::Value(format!("GPU-0000000{index}-aaaa-4bbb-8ccc-dddddddddddd"));
    d.pci_bus_id = Reading::Value(format!("00000000:{:02X}:00.0", 0x18 + index));
    d.utilization_gpu_percent = Reading::Value(util);
    d.utilization_memory_percent = Reading::Value(util / 2);
    d.utilization_gpu_mean_percent = Reading::Value(f64::from(util));
    d.utilization_gpu_peak_percent = Reading::Value(f64::from(util.max(1)) + 3.0);
    d.set_memory(Reading::Value(Memory {
        total: 80 * GIB,
        used: used_gib * GIB,
        free: (79 - used_gib) * GIB,
        reserved: GIB,
    }));
    d.temperature_celsius = Reading::Value(temp);
    // GPU 0 has HBM, which reports its temperature; the others' memory does not.
    d.memory_temperature_celsius = if index == 0 {
        Reading::Value(temp + 8)
    } else {
        Reading::NotSupported
    };
    d.set_fan_speeds(if index == 0 {
        Reading::NotSupported
    } else {
        Reading::Value(vec![40])
    });
    d.power_usage_watts = Reading::Value(f64::from(300 + index * 50));
    d.power_instant_watts = Reading::Value(f64::from(320 + index * 50));
    d.power_limit_watts = Reading::Value(700.0);
    // About ten days at 300 W since the driver loaded.
    d.energy_joules = Reading::Value(259_200_000.0 + f64::from(index) * 1_000_000.0);
    d.performance_state = Reading::Value(0);
    d.clock_graphics_mhz = Reading::Value(1980);
    d.clock_sm_mhz = Reading::Value(1980);
    d.clock_memory_mhz = Reading::Value(2619);
    d.clock_video_mhz = Reading::Value(1755);
    d.pcie_rx_bytes_per_second = Reading::Value(2_000_000 * 1024);
    d.pcie_tx_bytes_per_second = Reading::Value(500_000 * 1024);
    d.encoder_utilization_percent = Reading::Value(0);
    d.decoder_utilization_percent = Reading::Value(0);
    d.ecc_uncorrected_volatile_errors = Reading::Value(0);
    d
}

pub fn process(pid: u32, gpu: u32, uid: u32, user: &str, command: &str, mem_gib: u64, sm: u32) -> GpuProcess {
    GpuProcess {
        pid,
        gpu_index: gpu,
        gpu_uuid: Reading::Value(format!("GPU-0000000{gpu}-aaaa-4bbb-8ccc-dddddddddddd")),
        kind: ProcessType::Compute,
        gpu_memory_bytes: Reading::Value(mem_gib * GIB),
        sm_percent: Reading::Value(sm),
        gpu_system_memory_bytes: Default::default(),
        engines_percent: Default::default(),
        memory_bandwidth_percent: Reading::Value(sm / 2),
        encoder_percent: Reading::Value(0),
        decoder_percent: Reading::Value(0),
        gpu_instance_id: None,
        compute_instance_id: None,
        host: HostFacts {
            user: Reading::Value(user.into()),
            uid: Reading::Value(uid),
            parent_pid: Reading::Value(if pid == 4102 { 4101 } else { 1 }),
            command: Reading::Value(command.into()),
            cpu_percent: Reading::Value(f64::from(sm) * 1.1),
            memory_bytes: Reading::Value(mem_gib * GIB / 4),
            start_time: Reading::Value(1_700_000_000 + u64::from(pid)),
            start_ticks: Reading::Value(100 * u64::from(pid)),
            running_seconds: Reading::Value(3_725 + u64::from(pid)),
            // bob works in a Docker container.
            container: (pid == 5200).then(|| Container::new(Runtime::Docker, "3f2a1b9c0d12").into()),
            namespace_pid: (pid == 5200).then_some(7),
            ..HostFacts::unread(pid)
        },
    }
}

pub fn snapshot() -> Snapshot {
    let mut lost = Device::unavailable(2, DeviceStatus::Lost, "GPU is lost");
    lost.name = Reading::Value("NVIDIA H100 80GB HBM3".into());
    Snapshot {
        taken_at: UNIX_EPOCH + Duration::from_secs(1_795_966_801),
        hostname: "gpu-box".into(),
        pid_namespace: PidNamespace::Host,
        hidden_processes: 0,
        driver_version: Reading::Value("550.54.15".into()),
        cuda_driver_version: Reading::Value("12.4".into()),
        nvml_version: Reading::Value("12.550.54.15".into()),
        devices: vec![
            device(0, "NVIDIA H100 80GB HBM3", 70, 97, 84),
            device(1, "NVIDIA H100 80GB HBM3", 12, 5, 41),
            lost,
        ],
        processes: vec![
            process(
                4101,
                0,
                1000,
                "alice",
                "python3 train.py --model llama-7b",
                60,
                95,
            ),
            process(
                4102,
                0,
                1000,
                "alice",
                "python3 -m torch.distributed.run worker.py",
                9,
                3,
            ),
            process(
                5200,
                1,
                1001,
                "bob",
                "evil \u{1b}]0;pwned\u{7}\u{1b}[2J name \u{202e}txt.exe",
                11,
                4,
            ),
        ],
        host: HostStats {
            cpu_percent: Reading::Value(37.5),
            memory_total_bytes: Reading::Value(512 * GIB),
            memory_used_bytes: Reading::Value(96 * GIB),
            swap_total_bytes: Reading::Value(0),
            swap_used_bytes: Reading::Value(0),
            load_average: Reading::Value([7.25, 6.5, 6.0]),
            uptime_seconds: Reading::Value(864_000),
        },
    }
}

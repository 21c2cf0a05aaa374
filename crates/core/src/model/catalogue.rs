//! The metrics gputop publishes, each declared once: its Prometheus name and help, the model
//! field it is read from, how the exporter reads it and how the fleet's drill-down writes
//! it back into a [`Device`]. The exporter's `/metrics`, the fleet reader's queries and its
//! node snapshot are all made from these tables, so the names are written here alone.

use super::{Device, Reading};

/// How a device gauge's exported value relates to its model field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A percentage in the model, a ratio (0 to 1) on `/metrics`.
    Percent,
    /// Bytes, or bytes per second.
    Bytes,
    /// Degrees Celsius.
    Celsius,
    /// Watts.
    Watts,
    /// A number without a unit (the performance state).
    Count,
}

impl Unit {
    /// What one unit of the model's value is on `/metrics`.
    fn exported(self) -> f64 {
        match self {
            Unit::Percent => 0.01,
            _ => 1.0,
        }
    }
}

/// One gauge per GPU: `gputop_gpu_...{gpu, uuid, name, vendor, driver}`.
#[derive(Debug, Clone, Copy)]
pub struct DeviceGauge {
    /// The Prometheus name.
    pub name: &'static str,
    /// The Prometheus help text.
    pub help: &'static str,
    /// The model field (and `--json` key) it is read from.
    pub field: &'static str,
    /// Its unit in the model.
    pub unit: Unit,
    /// The value in the model's unit, where the device has one.
    read: fn(&Device) -> Option<f64>,
    /// Sets the model's fields from a value in the model's unit (the fleet's drill-down).
    write: fn(&mut Device, f64),
}

impl DeviceGauge {
    /// The value `/metrics` serves for `device`: base units, percentages as ratios.
    pub fn exported(&self, device: &Device) -> Option<f64> {
        (self.read)(device).map(|v| v * self.unit.exported())
    }

    /// Sets `device`'s field from a value `/metrics` served; a value that is not finite
    /// or is negative sets nothing.
    pub fn import(&self, device: &mut Device, exported: f64) {
        if exported.is_finite() && exported >= 0.0 {
            (self.write)(device, exported / self.unit.exported());
        }
    }
}

/// Each GPU's identity as labels (`pci_bus_id`, `driver_version` besides the GPU's); 1.
pub const GPU_INFO: &str = "gputop_gpu_info";
/// Processes holding each GPU.
pub const GPU_PROCESSES: &str = "gputop_gpu_processes";
/// A process's GPU memory, per GPU.
pub const PROCESS_GPU_MEMORY: &str = "gputop_process_gpu_memory_bytes";
/// A process's SM (or engine) use, per GPU.
pub const PROCESS_SM_UTILIZATION: &str = "gputop_process_sm_utilization_ratio";
/// A process's CPU use, in CPUs.
pub const PROCESS_CPU: &str = "gputop_process_cpu_ratio";
/// GPUs holding a user's processes.
pub const USER_GPUS: &str = "gputop_user_gpus";
/// GPU memory a user's processes hold.
pub const USER_GPU_MEMORY: &str = "gputop_user_gpu_memory_bytes";
/// A user's processes on GPUs.
pub const USER_PROCESSES: &str = "gputop_user_processes";

fn whole(value: f64) -> u32 {
    value.round().clamp(0.0, f64::from(u32::MAX)) as u32
}

fn percent(value: f64) -> u32 {
    whole(value.min(100.0))
}

fn small(reading: &Reading<u32>) -> Option<f64> {
    reading.get().map(f64::from)
}

fn bytes(reading: &Reading<u64>) -> Option<f64> {
    reading.get().map(|b| b as f64)
}

fn count(value: f64) -> Reading<u64> {
    Reading::Value(value.min(u64::MAX as f64) as u64)
}

/// GPU utilization over the last interval.
pub const UTILIZATION: DeviceGauge = DeviceGauge {
    name: "gputop_gpu_utilization_ratio",
    help: "GPU utilization over the last interval, from the driver's sample buffer (0 to 1).",
    field: "utilization_gpu_mean_percent",
    unit: Unit::Percent,
    read: Device::utilization_percent,
    write: |d, v| {
        d.utilization_gpu_percent = Reading::Value(percent(v));
        d.utilization_gpu_mean_percent = Reading::Value(v.min(100.0));
    },
};

/// GPU memory in use.
pub const MEMORY_USED: DeviceGauge = DeviceGauge {
    name: "gputop_gpu_memory_used_bytes",
    help: "GPU memory in use.",
    field: "memory_used_bytes",
    unit: Unit::Bytes,
    read: |d| bytes(&d.memory_used_bytes),
    write: |d, v| d.memory_used_bytes = count(v),
};

/// GPU memory in all.
pub const MEMORY_TOTAL: DeviceGauge = DeviceGauge {
    name: "gputop_gpu_memory_total_bytes",
    help: "GPU memory in all.",
    field: "memory_total_bytes",
    unit: Unit::Bytes,
    read: |d| bytes(&d.memory_total_bytes),
    write: |d, v| d.memory_total_bytes = count(v),
};

/// Memory-bandwidth utilization over the last interval.
pub const MEMORY_UTILIZATION: DeviceGauge = DeviceGauge {
    name: "gputop_gpu_memory_utilization_ratio",
    help: "Memory-bandwidth utilization over the last interval (0 to 1).",
    field: "utilization_memory_mean_percent",
    unit: Unit::Percent,
    read: |d| {
        d.utilization_memory_mean_percent
            .get()
            .or_else(|| small(&d.utilization_memory_percent))
    },
    write: |d, v| {
        d.utilization_memory_percent = Reading::Value(percent(v));
        d.utilization_memory_mean_percent = Reading::Value(v.min(100.0));
    },
};

/// The GPU core's temperature.
pub const TEMPERATURE: DeviceGauge = DeviceGauge {
    name: "gputop_gpu_temperature_celsius",
    help: "GPU core temperature.",
    field: "temperature_celsius",
    unit: Unit::Celsius,
    read: |d| small(&d.temperature_celsius),
    write: |d, v| d.temperature_celsius = Reading::Value(whole(v)),
};

/// Power draw over the last interval.
pub const POWER: DeviceGauge = DeviceGauge {
    name: "gputop_gpu_power_watts",
    help: "Power draw over the last interval (the sample buffer's mean, else the current reading).",
    field: "power_usage_mean_watts",
    unit: Unit::Watts,
    read: |d| {
        d.power_usage_mean_watts
            .get()
            .or_else(|| d.power_usage_watts.get())
    },
    write: |d, v| {
        d.power_usage_watts = Reading::Value(v);
        d.power_usage_mean_watts = Reading::Value(v);
    },
};

/// Every device gauge, in the order `/metrics` serves them.
pub const DEVICE_GAUGES: &[DeviceGauge] = &[
    UTILIZATION,
    DeviceGauge {
        name: "gputop_gpu_utilization_peak_ratio",
        help: "Highest GPU utilization sample in the last interval (0 to 1).",
        field: "utilization_gpu_peak_percent",
        unit: Unit::Percent,
        read: |d| d.utilization_gpu_peak_percent.get(),
        write: |d, v| d.utilization_gpu_peak_percent = Reading::Value(v.min(100.0)),
    },
    MEMORY_UTILIZATION,
    MEMORY_USED,
    MEMORY_TOTAL,
    DeviceGauge {
        name: "gputop_gpu_memory_free_bytes",
        help: "GPU memory free.",
        field: "memory_free_bytes",
        unit: Unit::Bytes,
        read: |d| bytes(&d.memory_free_bytes),
        write: |d, v| d.memory_free_bytes = count(v),
    },
    DeviceGauge {
        name: "gputop_gpu_gtt_used_bytes",
        help: "AMD: system memory the GPU maps (GTT) in use.",
        field: "gtt_used_bytes",
        unit: Unit::Bytes,
        read: |d| bytes(&d.gtt_used_bytes),
        write: |d, v| d.gtt_used_bytes = count(v),
    },
    DeviceGauge {
        name: "gputop_gpu_gtt_total_bytes",
        help: "AMD: system memory the GPU maps (GTT) in all.",
        field: "gtt_total_bytes",
        unit: Unit::Bytes,
        read: |d| bytes(&d.gtt_total_bytes),
        write: |d, v| d.gtt_total_bytes = count(v),
    },
    DeviceGauge {
        name: "gputop_gpu_memory_reserved_bytes",
        help: "GPU memory reserved by the driver and firmware.",
        field: "memory_reserved_bytes",
        unit: Unit::Bytes,
        read: |d| bytes(&d.memory_reserved_bytes),
        write: |d, v| d.memory_reserved_bytes = count(v),
    },
    TEMPERATURE,
    DeviceGauge {
        name: "gputop_gpu_memory_temperature_celsius",
        help: "GPU memory temperature (NVIDIA HBM boards, amdgpu's mem sensor).",
        field: "memory_temperature_celsius",
        unit: Unit::Celsius,
        read: |d| small(&d.memory_temperature_celsius),
        write: |d, v| d.memory_temperature_celsius = Reading::Value(whole(v)),
    },
    DeviceGauge {
        name: "gputop_gpu_slowdown_temperature_celsius",
        help: "Temperature at which the GPU slows down.",
        field: "temperature_slowdown_celsius",
        unit: Unit::Celsius,
        read: |d| small(&d.temperature_slowdown_celsius),
        write: |d, v| d.temperature_slowdown_celsius = Reading::Value(whole(v)),
    },
    DeviceGauge {
        name: "gputop_gpu_fan_speed_ratio",
        help: "Speed of the first fan (0 to 1).",
        field: "fan_speed_percent",
        unit: Unit::Percent,
        read: |d| small(&d.fan_speed_percent),
        write: |d, v| d.set_fan_speeds(Reading::Value(vec![whole(v.min(200.0))])),
    },
    POWER,
    DeviceGauge {
        name: "gputop_gpu_power_instant_watts",
        help: "Power draw at the instant of the last refresh, where the driver gives it apart from the averaged figure.",
        field: "power_instant_watts",
        unit: Unit::Watts,
        read: |d| d.power_instant_watts.get(),
        write: |d, v| d.power_instant_watts = Reading::Value(v),
    },
    DeviceGauge {
        name: "gputop_gpu_power_limit_watts",
        help: "Power management limit.",
        field: "power_limit_watts",
        unit: Unit::Watts,
        read: |d| d.power_limit_watts.get(),
        write: |d, v| d.power_limit_watts = Reading::Value(v),
    },
    DeviceGauge {
        name: "gputop_gpu_performance_state",
        help: "Performance state, 0 (highest) to 15.",
        field: "performance_state",
        unit: Unit::Count,
        read: |d| small(&d.performance_state),
        write: |d, v| d.performance_state = Reading::Value(whole(v.min(15.0))),
    },
    DeviceGauge {
        name: "gputop_gpu_pcie_transmit_bytes_per_second",
        help: "PCIe transmit throughput.",
        field: "pcie_tx_bytes_per_second",
        unit: Unit::Bytes,
        read: |d| bytes(&d.pcie_tx_bytes_per_second),
        write: |d, v| d.pcie_tx_bytes_per_second = count(v),
    },
    DeviceGauge {
        name: "gputop_gpu_pcie_receive_bytes_per_second",
        help: "PCIe receive throughput.",
        field: "pcie_rx_bytes_per_second",
        unit: Unit::Bytes,
        read: |d| bytes(&d.pcie_rx_bytes_per_second),
        write: |d, v| d.pcie_rx_bytes_per_second = count(v),
    },
    DeviceGauge {
        name: "gputop_gpu_encoder_utilization_ratio",
        help: "Video encoder utilization (0 to 1).",
        field: "encoder_utilization_percent",
        unit: Unit::Percent,
        read: |d| small(&d.encoder_utilization_percent),
        write: |d, v| d.encoder_utilization_percent = Reading::Value(percent(v)),
    },
    DeviceGauge {
        name: "gputop_gpu_decoder_utilization_ratio",
        help: "Video decoder utilization (0 to 1).",
        field: "decoder_utilization_percent",
        unit: Unit::Percent,
        read: |d| small(&d.decoder_utilization_percent),
        write: |d, v| d.decoder_utilization_percent = Reading::Value(percent(v)),
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Memory, Vendor};

    /// The model's numeric device fields that no gauge publishes, each with its reason: a
    /// new field is published or named here, never forgotten.
    const NOT_GAUGES: &[(&str, &str)] = &[
        ("index", "a label"),
        (
            "utilization_gpu_percent",
            "the driver's latest sample; the interval mean is published",
        ),
        (
            "utilization_memory_percent",
            "the latest sample; the interval mean is published",
        ),
        ("utilization_memory_peak_percent", "not published yet"),
        ("bar1_total_bytes", "not published yet"),
        ("bar1_used_bytes", "not published yet"),
        ("temperature_shutdown_celsius", "not published yet"),
        ("fan_speeds_percent", "the first fan's is published"),
        (
            "power_usage_watts",
            "the latest sample; the interval mean is published",
        ),
        ("power_usage_peak_watts", "not published yet"),
        ("power_enforced_limit_watts", "not published yet"),
        ("energy_joules", "a counter: gputop_gpu_energy_joules_total"),
        ("clock_graphics_mhz", "gputop_gpu_clock_hertz{clock}"),
        ("clock_sm_mhz", "gputop_gpu_clock_hertz{clock}"),
        ("clock_memory_mhz", "gputop_gpu_clock_hertz{clock}"),
        ("clock_video_mhz", "gputop_gpu_clock_hertz{clock}"),
        ("clock_max_graphics_mhz", "not published yet"),
        ("clock_max_sm_mhz", "not published yet"),
        ("clock_max_memory_mhz", "not published yet"),
        ("clock_max_video_mhz", "not published yet"),
        ("pcie_link_generation", "not published yet"),
        ("pcie_link_width", "not published yet"),
        ("pcie_link_max_generation", "not published yet"),
        ("pcie_link_max_width", "not published yet"),
        (
            "ecc_uncorrected_volatile_errors",
            "a counter: gputop_gpu_ecc_uncorrected_errors_total",
        ),
        ("remapped_rows_correctable", "gputop_gpu_remapped_rows{cause}"),
        ("remapped_rows_uncorrectable", "gputop_gpu_remapped_rows{cause}"),
        ("retired_pages_single_bit", "gputop_gpu_retired_pages{cause}"),
        ("retired_pages_double_bit", "gputop_gpu_retired_pages{cause}"),
    ];

    /// Every numeric field of a device's wire form is a gauge's or named as not one; every
    /// gauge's field is in the wire form; names are unique.
    #[test]
    fn every_numeric_device_field_is_published_or_says_why_not() {
        let mut device = Device::new(0, Vendor::Nvidia);
        device.set_memory(Reading::Value(Memory {
            total: 1,
            used: 1,
            free: 0,
            reserved: 0,
        }));
        let schema = serde_json::to_value(crate::model::wire::json_schema()).unwrap();
        let properties = schema["$defs"]["device"]["properties"]
            .as_object()
            .expect("the device's schema");
        let numeric = |kind: &serde_json::Value| {
            let text = kind.to_string();
            text.contains("\"integer\"") || text.contains("\"number\"")
        };
        let gauges: Vec<&str> = DEVICE_GAUGES.iter().map(|g| g.field).collect();
        for (field, kind) in properties {
            if !numeric(kind) {
                continue;
            }
            let named = NOT_GAUGES.iter().any(|(f, _)| f == field);
            assert!(
                gauges.contains(&field.as_str()) != named,
                "{field}: publish it as a gauge or say in NOT_GAUGES why not (and not both)"
            );
        }
        for gauge in DEVICE_GAUGES {
            assert!(
                properties.contains_key(gauge.field),
                "{}: no such field",
                gauge.field
            );
        }
        let mut names: Vec<&str> = DEVICE_GAUGES.iter().map(|g| g.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), DEVICE_GAUGES.len(), "a name twice");
    }

    /// What the exporter serves, the drill-down writes back: each gauge reads the value it
    /// was given, and what is not a measure sets nothing.
    #[test]
    fn each_gauge_round_trips_through_its_exported_value() {
        for gauge in DEVICE_GAUGES {
            let exported = match gauge.unit {
                Unit::Percent => 0.42,
                Unit::Bytes => 8e9,
                Unit::Celsius => 61.0,
                Unit::Watts => 301.5,
                Unit::Count => 2.0,
            };
            let mut device = Device::new(0, Vendor::Nvidia);
            gauge.import(&mut device, exported);
            let read = gauge.exported(&device).expect(gauge.name);
            assert!((read - exported).abs() < 1e-9, "{}: {read}", gauge.name);
            let mut untouched = Device::new(0, Vendor::Nvidia);
            gauge.import(&mut untouched, f64::NAN);
            gauge.import(&mut untouched, -1.0);
            assert_eq!(gauge.exported(&untouched), None, "{}", gauge.name);
        }
    }
}

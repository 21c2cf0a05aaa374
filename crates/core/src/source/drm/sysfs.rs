//! AMD and Intel GPUs as sysfs and hwmon describe them: found under `class/drm`, identified
//! by their PCI slot, vendor and driver, and read per refresh (utilisation where amdgpu
//! gives it, VRAM and GTT, temperature, power, power cap, clocks, fan). Every figure is
//! `None` where the file is missing or unreadable; a device that sleeps (runtime PM
//! `suspended`) is not woken by a sensor read.

use std::path::{Path, PathBuf};

use super::Files;
use crate::model::Vendor;

/// PCI vendor IDs.
const AMD: &str = "0x1002";
const INTEL: &str = "0x8086";

/// One AMD or Intel GPU found under `class/drm`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrmDevice {
    /// `card0`.
    pub card: String,
    /// The PCI slot, `0000:03:00.0`: what `drm-pdev` names in fdinfo.
    pub pci_slot: String,
    /// Its maker.
    pub vendor: Vendor,
    /// The kernel driver: `amdgpu`, `i915`, `xe`.
    pub driver: String,
    /// The driver module's own version (`module/<driver>/version`), which only a module
    /// built out of the kernel's tree has (amdgpu-dkms); `None` for the kernel's own.
    pub module_version: Option<String>,
    /// The product name where the driver gives one (amdgpu's `product_name`), else the
    /// vendor and PCI device ID: `AMD GPU 0x744c`.
    pub name: String,
    /// `class/drm/cardN/device`, relative to the sysfs root.
    device_dir: PathBuf,
    /// Whether its hwmon has a memory sensor: amdgpu's temp1 is the edge, temp2 the
    /// junction, temp3 the memory, labelled `mem`, on discrete GPUs since Vega (SOC15) only
    /// (the kernel's Documentation/gpu/amdgpu/thermal.rst). A label does not change: read
    /// once, when the device is found.
    memory_sensor: bool,
}

/// What one read of a device's sysfs and hwmon files gives.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceFigures {
    /// Percent busy, where the driver reports it (amdgpu's `gpu_busy_percent`).
    pub busy_percent: Option<u32>,
    /// Percent of time memory was busy (amdgpu).
    pub memory_busy_percent: Option<u32>,
    /// VRAM in all and in use, bytes.
    pub vram_total_bytes: Option<u64>,
    /// VRAM in use, bytes.
    pub vram_used_bytes: Option<u64>,
    /// GTT (system memory the GPU maps) in all, bytes.
    pub gtt_total_bytes: Option<u64>,
    /// GTT in use, bytes.
    pub gtt_used_bytes: Option<u64>,
    /// Degrees Celsius: amdgpu's edge sensor, xe's package, i915's first.
    pub temperature_celsius: Option<u32>,
    /// Degrees Celsius: amdgpu's memory sensor (discrete GPUs since Vega).
    pub memory_temperature_celsius: Option<u32>,
    /// Power draw now (amdgpu's average, else its instantaneous figure), watts.
    pub power_watts: Option<f64>,
    /// The cumulative energy counter (Intel), microjoules: power is its delta over time.
    pub energy_microjoules: Option<u64>,
    /// The power cap, watts.
    pub power_cap_watts: Option<f64>,
    /// The core clock now, MHz.
    pub core_clock_mhz: Option<u32>,
    /// The memory clock now, MHz.
    pub memory_clock_mhz: Option<u32>,
    /// The first fan's duty, percent of its maximum PWM.
    pub fan_percent: Option<u32>,
    /// Whether runtime power management has put the device to sleep (sensors not read).
    pub asleep: bool,
}

/// The AMD and Intel GPUs under `class/drm` of the sysfs root: `cardN` entries (not
/// connectors such as `card0-DP-1`), by PCI slot; NVIDIA's are NVML's.
pub fn find_devices(files: &dyn Files) -> Vec<DrmDevice> {
    let Ok(mut entries) = files.list(Path::new("class/drm")) else {
        return Vec::new();
    };
    entries.sort_by_key(|name| card_number(name));
    let mut devices: Vec<DrmDevice> = Vec::new();
    for card in entries.into_iter().filter(|name| card_number(name).is_some()) {
        let link = Path::new("class/drm").join(&card).join("device");
        let Ok(target) = files.link(&link) else {
            continue;
        };
        let Some(pci_slot) = target.file_name().and_then(|n| n.to_str()).map(str::to_string) else {
            continue;
        };
        // Read through the link: sysfs's own links (`class/drm/card0` is one) resolve as
        // the kernel lays them out.
        let device_dir = link;
        let vendor = match files.text(&device_dir.join("vendor")).as_deref().map(str::trim) {
            Some(AMD) => Vendor::Amd,
            Some(INTEL) => Vendor::Intel,
            _ => continue,
        };
        let driver = files
            .link(&device_dir.join("driver"))
            .ok()
            .and_then(|d| d.file_name().and_then(|n| n.to_str()).map(str::to_string))
            .or_else(|| {
                let uevent = files.text(&device_dir.join("uevent"))?;
                uevent
                    .lines()
                    .find_map(|l| l.strip_prefix("DRIVER=").map(str::to_string))
            });
        let Some(driver) = driver else {
            continue;
        };
        if devices.iter().any(|d| d.pci_slot == pci_slot) {
            continue;
        }
        let name = product_name(files, &device_dir, vendor);
        let module_version = printable_line(files, &Path::new("module").join(&driver).join("version"));
        let memory_sensor = vendor == Vendor::Amd
            && hwmon_dir(files, &device_dir)
                .and_then(|hwmon| files.text(&hwmon.join("temp3_label")))
                .is_some_and(|label| label.trim() == "mem");
        devices.push(DrmDevice {
            card,
            pci_slot,
            vendor,
            driver,
            module_version,
            name,
            device_dir,
            memory_sensor,
        });
    }
    devices
}

/// The board's product name (amdgpu's `product_name`, from its FRU data, on some boards),
/// else the vendor and the PCI device ID; printable ASCII, at most 64 characters.
fn product_name(files: &dyn Files, device_dir: &Path, vendor: Vendor) -> String {
    let read = |name: &str| printable_line(files, &device_dir.join(name));
    match read("product_name") {
        Some(name) if !name.is_empty() => name,
        _ => format!("{} GPU {}", vendor.name(), read("device").unwrap_or_default()),
    }
}

/// A one-line attribute as printable ASCII, at most 64 characters; `None` when it cannot
/// be read or is empty.
pub fn printable_line(files: &dyn Files, path: &Path) -> Option<String> {
    let text = files.text(path)?;
    let line: String = text
        .trim()
        .chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .take(64)
        .collect();
    (!line.is_empty()).then_some(line)
}

/// `Some(N)` for `cardN`.
fn card_number(name: &str) -> Option<u32> {
    name.strip_prefix("card")?.parse().ok()
}

impl DrmDevice {
    /// Its figures now.
    pub fn read(&self, files: &dyn Files) -> DeviceFigures {
        let dir = &self.device_dir;
        let number = |name: &str| -> Option<u64> { files.text(&dir.join(name))?.trim().parse().ok() };
        let asleep = files
            .text(&dir.join("power/runtime_status"))
            .is_some_and(|s| s.trim() == "suspended");
        let mut figures = DeviceFigures {
            asleep,
            ..DeviceFigures::default()
        };
        if asleep {
            return figures;
        }
        let hwmon = hwmon_dir(files, dir);
        let sensor = |name: &str| -> Option<u64> {
            let hwmon = hwmon.as_ref()?;
            files.text(&hwmon.join(name))?.trim().parse().ok()
        };
        let percent = |v: u64| u32::try_from(v.min(100)).ok();
        let celsius = |millidegrees: u64| u32::try_from(millidegrees / 1000).ok();
        let watts = |microwatts: u64| microwatts as f64 / 1e6;
        let mhz = |hz: u64| u32::try_from(hz / 1_000_000).ok();
        match self.vendor {
            // Never found here: NVIDIA's GPUs are NVML's.
            Vendor::Nvidia => {}
            Vendor::Amd => {
                figures.busy_percent = number("gpu_busy_percent").and_then(percent);
                figures.memory_busy_percent = number("mem_busy_percent").and_then(percent);
                figures.vram_total_bytes = number("mem_info_vram_total");
                figures.vram_used_bytes = number("mem_info_vram_used");
                figures.gtt_total_bytes = number("mem_info_gtt_total");
                figures.gtt_used_bytes = number("mem_info_gtt_used");
                figures.temperature_celsius = sensor("temp1_input").and_then(celsius);
                if self.memory_sensor {
                    figures.memory_temperature_celsius = sensor("temp3_input").and_then(celsius);
                }
                figures.power_watts = sensor("power1_average")
                    .or_else(|| sensor("power1_input"))
                    .map(watts);
                figures.power_cap_watts = sensor("power1_cap").map(watts);
                figures.core_clock_mhz = sensor("freq1_input").and_then(mhz);
                figures.memory_clock_mhz = sensor("freq2_input").and_then(mhz);
                figures.fan_percent = sensor("pwm1").zip(sensor("pwm1_max")).and_then(|(pwm, max)| {
                    (max > 0).then(|| (pwm.min(max) as f64 * 100.0 / max as f64).round() as u32)
                });
            }
            Vendor::Intel => {
                let (temperature, clock) = if self.driver == "xe" {
                    (
                        sensor("temp2_input"),
                        number("tile0/gt0/freq0/act_freq").and_then(|v| u32::try_from(v).ok()),
                    )
                } else {
                    let card = Path::new("class/drm").join(&self.card);
                    let act = files
                        .text(&card.join("gt_act_freq_mhz"))
                        .and_then(|t| t.trim().parse().ok());
                    (sensor("temp1_input"), act)
                };
                figures.temperature_celsius = temperature.and_then(celsius);
                figures.core_clock_mhz = clock;
                figures.energy_microjoules = sensor("energy1_input");
                figures.power_cap_watts = sensor("power1_max").map(watts);
            }
        }
        figures
    }
}

/// The hwmon directory of the device at `device_dir` (`hwmon/hwmonN`), if it has one.
fn hwmon_dir(files: &dyn Files, device_dir: &Path) -> Option<PathBuf> {
    let dir = device_dir.join("hwmon");
    let mut names = files.list(&dir).ok()?;
    names.sort();
    names
        .into_iter()
        .find(|n| n.starts_with("hwmon"))
        .map(|n| dir.join(n))
}

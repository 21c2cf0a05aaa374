//! The built-in demo: the simulator's scenario engine read directly, no library loaded.
//!
//! The demo machine is nvml-sim's `builtin:demo` scenario, the same one the simulated
//! `libnvidia-ml.so.1` serves, so `gputop --demo` and gputop on the simulator show one machine.
//! Beside its NVIDIA GPUs it has an AMD and an Intel GPU (its `drm` module), read by the real DRM
//! reader from files held in memory. Its PIDs are invented, so host facts come from the
//! scenario instead of /proc.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use nvml_sim::codes::{self, Code};
use nvml_sim::engine::{Sim, TimeBase, sampling, wall_now_us};
use nvml_sim::scenario::{ComputeMode, MigSetting, Scenario};

use super::{DriverInfo, Readout, Window};
use crate::host::containers::container_of;
use crate::model::{
    Bar1, Device, DeviceStatus, GpuProcess, HostFacts, Memory, MigDevice, MigId, PidMapping, ProcessType,
    Reading, RemappedRows, RetiredPages, Vendor, XidErrors, XidEvent,
};

mod drm;

/// The demo machine and its clock.
#[derive(Debug)]
pub struct DemoSource {
    sim: Sim,
    /// Its AMD and Intel GPUs, after the simulator's NVIDIA ones.
    drm: drm::DemoDrm,
    time: TimeBase,
    /// Scenario time when the demo began watching Xid errors.
    watching_since: f64,
}

fn reading<T>(result: Result<T, Code>) -> Reading<T> {
    match result {
        Ok(value) => Reading::Value(value),
        Err(codes::NOT_SUPPORTED | codes::FUNCTION_NOT_FOUND) => Reading::NotSupported,
        Err(code) => Reading::Failed(codes::code_name(code).to_string()),
    }
}

impl DemoSource {
    /// The demo machine at its scenario's start.
    pub fn new() -> Self {
        let text = nvml_sim::builtin("demo").unwrap_or_default();
        let scenario = Scenario::parse(text, "builtin:demo", &|_| None)
            .unwrap_or_else(|e| panic!("the built-in demo scenario is invalid: {e}"));
        let time = TimeBase::now(scenario.clock.start, scenario.clock.speed);
        Self {
            sim: Sim::new(scenario),
            drm: drm::DemoDrm::new(),
            watching_since: time.scenario_t(wall_now_us()),
            time,
        }
    }

    /// The demo machine now; utilization means and peaks cover the last `window`.
    pub fn read(&mut self, window: Duration) -> Readout {
        let t = self.time.scenario_t(wall_now_us());
        let system = &self.sim.scenario.system;
        let cuda = system.cuda_driver_version;
        let driver = DriverInfo {
            driver_version: Reading::Value(system.driver_version.clone()),
            nvml_version: Reading::Value(system.nvml_version.clone()),
            cuda_driver_version: Reading::Value(format!("{}.{}", cuda / 1000, (cuda % 1000) / 10)),
        };
        let since = wall_now_us().saturating_sub(window.as_micros() as u64);
        let mut devices = Vec::new();
        let mut processes = Vec::new();
        for gpu in 0..self.sim.gpu_count() {
            let mut device = self.device(gpu, t, since);
            device.driver_version = driver.driver_version.clone();
            devices.push(device);
            processes.extend(self.processes(gpu, t));
        }
        give_jobs_parents(&mut processes);
        let others = self.drm.read(u32::try_from(devices.len()).unwrap_or(u32::MAX));
        devices.extend(others.devices);
        processes.extend(others.processes);
        Readout {
            driver,
            devices,
            processes,
            // A demo process's owner and command come from the scenario, not this host.
            host_known: true,
            hidden_processes: 0,
        }
    }

    /// A field through the scenario's faults, as the C ABI would serve it.
    fn field<T>(
        &self,
        gpu: usize,
        field: &str,
        t: f64,
        value: impl FnOnce() -> Result<T, Code>,
    ) -> Reading<T> {
        match self.sim.fault(gpu, field, t) {
            Some(code) => reading(Err(code)),
            None => reading(value()),
        }
    }

    /// The window of `sample_type`'s samples since `since`; where the buffer has none (an
    /// idle GPU's runs dry), the `current` reading, as gputop reads NVML.
    fn window(
        &self,
        gpu: usize,
        sample_type: u32,
        t: f64,
        since: u64,
        current: &Reading<u32>,
    ) -> Reading<Window> {
        let shared = nvml_sim::engine::sample_field(sample_type).unwrap_or("samples");
        let sampled = self.field(gpu, shared, t, || {
            let samples = self.sim.samples(gpu, sample_type, t, &self.time, since)?;
            let values: Vec<f64> = samples.iter().map(|(_, v)| f64::from(*v)).collect();
            Ok((!values.is_empty()).then(|| Window {
                mean: values.iter().sum::<f64>() / values.len() as f64,
                peak: values.iter().copied().fold(f64::MIN, f64::max),
            }))
        });
        match sampled {
            Reading::Value(Some(window)) => Reading::Value(window),
            Reading::Value(None) => current.clone().map(Window::current),
            Reading::NotSupported => Reading::NotSupported,
            Reading::Failed(reason) => Reading::Failed(reason),
        }
    }

    fn device(&self, gpu: usize, t: f64, since: u64) -> Device {
        let index = gpu as u32;
        if self.sim.is_lost(gpu, t) {
            return Device::unavailable(index, DeviceStatus::Lost, "GPU is lost");
        }
        let sim = &self.sim;
        let g = sim.gpu(gpu);
        let d = &g.dynamic;
        let percent =
            |field: &str, expr, key: &str| self.field(gpu, field, t, || sim.percent(gpu, expr, key, t));
        let count = |field: &str, expr, key: &str| self.field(gpu, field, t, || sim.count(gpu, expr, key, t));
        let fixed = |field: &str, value: u32| self.field(gpu, field, t, || Ok(value));
        let fans = self.field(gpu, "fan_speed", t, || {
            if g.fans == 0 {
                return Err(codes::NOT_SUPPORTED);
            }
            let speed = sim.percent(gpu, &d.fan_speed, "fan_speed", t)?;
            Ok(vec![speed; g.fans as usize])
        });
        let bus = g.pci.bus.unwrap_or(index + 1);
        let utilization = |expr, key: &str| {
            self.field(gpu, "utilization", t, || {
                if !sim.utilization_supported(gpu) {
                    return Err(codes::NOT_SUPPORTED);
                }
                sim.percent(gpu, expr, key, sim.latest_sample_tick(t))
            })
        };
        let utilization_gpu = utilization(&d.utilization_gpu, "utilization_gpu");
        let utilization_memory = utilization(&d.utilization_memory, "utilization_memory");
        let power_usage_mw = self.field(gpu, "power_usage", t, || {
            sim.count(gpu, &d.power_mw, "power_mw", sim.latest_sample_tick(t))
        });
        let gpu_window = self.window(gpu, sampling::GPU_UTILIZATION, t, since, &utilization_gpu);
        let memory_window = self.window(gpu, sampling::MEMORY_UTILIZATION, t, since, &utilization_memory);
        let power_window = self.window(gpu, sampling::TOTAL_POWER, t, since, &power_usage_mw);
        let watts = |milliwatts: &u32| f64::from(*milliwatts) / 1000.0;
        let kilobytes = |kb: &u32| u64::from(*kb) * 1024;
        let mut device = Device {
            index,
            driver: Reading::Value("nvidia".into()),
            name: self.field(gpu, "name", t, || Ok(g.name.clone())),
            uuid: self.field(gpu, "uuid", t, || Ok(g.uuid.clone())),
            pci_bus_id: self.field(gpu, "pci", t, || {
                Ok(format!("{:08X}:{:02X}:{:02X}.0", g.pci.domain, bus, g.pci.device))
            }),
            status: DeviceStatus::Ok,
            status_reason: None,
            utilization_gpu_percent: utilization_gpu,
            utilization_gpu_mean_percent: gpu_window.part(|w| w.mean),
            utilization_gpu_peak_percent: gpu_window.part(|w| w.peak),
            utilization_memory_percent: utilization_memory,
            utilization_memory_mean_percent: memory_window.part(|w| w.mean),
            utilization_memory_peak_percent: memory_window.part(|w| w.peak),
            temperature_celsius: count("temperature", &d.temperature, "temperature"),
            memory_temperature_celsius: self.field(gpu, "temperature", t, || sim.memory_temperature(gpu, t)),
            temperature_slowdown_celsius: self.field(gpu, "temperature_threshold", t, || {
                g.temperature_thresholds.slowdown.ok_or(codes::NOT_SUPPORTED)
            }),
            temperature_shutdown_celsius: self.field(gpu, "temperature_threshold", t, || {
                g.temperature_thresholds.shutdown.ok_or(codes::NOT_SUPPORTED)
            }),
            power_usage_watts: power_usage_mw.part(watts),
            power_instant_watts: self
                .field(gpu, "power_usage", t, || {
                    sim.count(gpu, &d.power_mw, "power_mw", t)
                })
                .part(watts),
            power_usage_mean_watts: power_window.part(|w| w.mean / 1000.0),
            power_usage_peak_watts: power_window.part(|w| w.peak / 1000.0),
            power_limit_watts: fixed("power_limit", g.power_limit_mw).part(watts),
            power_enforced_limit_watts: fixed("enforced_power_limit", g.enforced_power_limit_mw).part(watts),
            energy_joules: self
                .field(gpu, "energy", t, || sim.energy_mj(gpu, t))
                .part(|mj| *mj as f64 / 1000.0),
            performance_state: self.field(gpu, "pstate", t, || sim.pstate(gpu, t)),
            clock_graphics_mhz: count("clocks", &d.clocks_mhz.graphics, "clocks_mhz.graphics"),
            clock_sm_mhz: count("clocks", &d.clocks_mhz.sm, "clocks_mhz.sm"),
            clock_memory_mhz: count("clocks", &d.clocks_mhz.mem, "clocks_mhz.mem"),
            clock_video_mhz: count("clocks", &d.clocks_mhz.video, "clocks_mhz.video"),
            clock_max_graphics_mhz: fixed("max_clocks", g.max_clocks_mhz.graphics),
            clock_max_sm_mhz: fixed("max_clocks", g.max_clocks_mhz.sm),
            clock_max_memory_mhz: fixed("max_clocks", g.max_clocks_mhz.mem),
            clock_max_video_mhz: fixed("max_clocks", g.max_clocks_mhz.video),
            pcie_link_generation: fixed("pcie_link", g.pcie.generation),
            pcie_link_width: fixed("pcie_link", g.pcie.width),
            pcie_link_max_generation: fixed("pcie_link", g.pcie.max_gen),
            pcie_link_max_width: fixed("pcie_link", g.pcie.max_width),
            pcie_tx_bytes_per_second: count("pcie_throughput", &d.pcie_tx_kbps, "pcie_tx_kbps")
                .part(kilobytes),
            pcie_rx_bytes_per_second: count("pcie_throughput", &d.pcie_rx_kbps, "pcie_rx_kbps")
                .part(kilobytes),
            encoder_utilization_percent: percent("encoder", &d.encoder, "encoder"),
            decoder_utilization_percent: percent("decoder", &d.decoder, "decoder"),
            ecc_enabled: self.field(gpu, "ecc", t, || {
                if g.ecc.supported {
                    Ok(true)
                } else {
                    Err(codes::NOT_SUPPORTED)
                }
            }),
            ecc_uncorrected_volatile_errors: self.field(gpu, "ecc", t, || {
                if g.ecc.supported {
                    Ok(g.ecc.volatile_uncorrected)
                } else {
                    Err(codes::NOT_SUPPORTED)
                }
            }),
            nvlinks: self.field(gpu, "nvlink", t, || {
                let links = g.nvlink.as_ref().ok_or(codes::NOT_SUPPORTED)?;
                let active = |link: u32| !links.inactive.contains(&link);
                let at = |counts: &[u64], link: u32| {
                    active(link).then(|| counts.get(link as usize).copied().unwrap_or(0))
                };
                Ok((0..links.links)
                    .map(|link| crate::model::NvLink {
                        link,
                        active: active(link),
                        replay_errors: at(&links.replay, link),
                        recovery_errors: at(&links.recovery, link),
                        crc_flit_errors: at(&links.crc_flit, link),
                        crc_data_errors: at(&links.crc_data, link),
                    })
                    .collect())
            }),
            last_xid: None,
            last_critical_xid: None,
            compute_mode: self.field(gpu, "compute_mode", t, || {
                Ok(match g.compute_mode {
                    ComputeMode::Default => "default",
                    ComputeMode::ExclusiveThread => "exclusive_thread",
                    ComputeMode::Prohibited => "prohibited",
                    ComputeMode::ExclusiveProcess => "exclusive_process",
                }
                .to_string())
            }),
            persistence_mode: self.field(gpu, "persistence", t, || Ok(g.persistence)),
            mig_mode: self.field(gpu, "mig", t, || match g.mig {
                MigSetting::Unsupported => Err(codes::NOT_SUPPORTED),
                setting => Ok(setting == MigSetting::Enabled),
            }),
            throttle_reasons: self.field(gpu, "throttle_reasons", t, || {
                sim.count(gpu, &d.throttle_reasons, "throttle_reasons", t)
                    .map(|bits| crate::model::clock_event_names(u64::from(bits)))
            }),
            mig_devices: g
                .mig_devices
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    let memory = sim.mig_memory(gpu, i, t);
                    let mut mig = MigDevice {
                        profile: Reading::Value(m.profile.clone()),
                        uuid: Reading::Value(m.uuid.clone()),
                        ..MigDevice::new(MigId {
                            gpu_instance: m.gpu_instance,
                            compute_instance: m.compute_instance,
                        })
                    };
                    mig.set_memory(Reading::Value(Memory {
                        total: memory.total,
                        used: memory.used,
                        free: memory.free,
                        reserved: memory.reserved,
                    }));
                    mig
                })
                .collect(),
            // The kubelet's, where there is one: the collector asks it.
            pods: Vec::new(),
            process_list_error: None,
            ..Device::new(index, Vendor::Nvidia)
        };
        device.set_memory(self.field(gpu, "memory", t, || {
            sim.memory(gpu, t).map(|m| Memory {
                total: m.total,
                used: m.used,
                free: m.free,
                reserved: m.reserved,
            })
        }));
        device.set_bar1(self.field(gpu, "bar1", t, || {
            Ok(Bar1 {
                total: g.bar1_total,
                used: g.bar1_used.min(g.bar1_total),
            })
        }));
        device.set_fan_speeds(fans);
        device.set_remapped_rows(self.field(gpu, "remapped_rows", t, || {
            let rows = g.remapped_rows.ok_or(codes::NOT_SUPPORTED)?;
            Ok(RemappedRows {
                correctable: rows.correctable,
                uncorrectable: rows.uncorrectable,
                pending: rows.pending,
                failure: rows.failure,
            })
        }));
        device.set_retired_pages(self.field(gpu, "retired_pages", t, || {
            let pages = g.retired_pages.ok_or(codes::NOT_SUPPORTED)?;
            Ok(RetiredPages {
                single_bit: pages.single_bit,
                double_bit: pages.double_bit,
            })
        }));
        device.set_xid_errors(&self.field(gpu, "events", t, || {
            if !g.events {
                return Err(codes::NOT_SUPPORTED);
            }
            let mut errors = XidErrors::default();
            for xid in sim.xids(gpu, self.watching_since, t) {
                errors.record(XidEvent::new(
                    u32::try_from(xid.xid).unwrap_or(u32::MAX),
                    UNIX_EPOCH + Duration::from_micros(self.time.wall_us(xid.at)),
                ));
            }
            Ok(errors)
        }));
        device
    }

    fn processes(&self, gpu: usize, t: f64) -> Vec<GpuProcess> {
        let sim = &self.sim;
        if sim.is_lost(gpu, t) {
            return Vec::new();
        }
        let uuid = Reading::Value(sim.gpu(gpu).uuid.clone());
        let utilization = sim.process_samples(gpu, t, &self.time, 0);
        let seed = sim.scenario.meta.seed;
        sim.live_processes(gpu, t)
            .into_iter()
            .filter_map(|live| {
                let (position, script) = sim
                    .gpu(gpu)
                    .processes
                    .iter()
                    .enumerate()
                    .find(|(_, p)| p.pid == live.pid)?;
                let sample = utilization.iter().find(|s| s.pid == live.pid);
                let pct = |v: Option<u32>| match sim.utilization_supported(gpu) {
                    true => Reading::Value(v.unwrap_or(0)),
                    false => Reading::NotSupported,
                };
                let host_value = |expr, key: &str| {
                    nvml_sim::engine::eval(expr, t, seed, gpu, &format!("process{position}.{key}"))
                        .unwrap_or(0.0)
                };
                // A demo process seems to have run for an hour before the demo began.
                let running = (t - script.start).max(0.0) as u64 + 3600;
                let start_epoch = (wall_now_us() / 1_000_000).saturating_sub(running);
                Some(GpuProcess {
                    pid: live.pid,
                    gpu_index: gpu as u32,
                    gpu_uuid: uuid.clone(),
                    kind: match live.kind {
                        nvml_sim::scenario::ProcessType::Graphics => ProcessType::Graphics,
                        nvml_sim::scenario::ProcessType::ComputeGraphics => ProcessType::ComputeGraphics,
                        _ => ProcessType::Compute,
                    },
                    gpu_memory_bytes: live.used_memory.map_or(Reading::NotSupported, Reading::Value),
                    gpu_system_memory_bytes: Reading::NotSupported,
                    sm_percent: pct(sample.map(|s| s.sm)),
                    engines_percent: BTreeMap::new(),
                    memory_bandwidth_percent: pct(sample.map(|s| s.mem)),
                    encoder_percent: pct(sample.map(|s| s.enc)),
                    decoder_percent: pct(sample.map(|s| s.dec)),
                    gpu_instance_id: live.instance_ids.map(|(gpu_instance, _)| gpu_instance),
                    compute_instance_id: live.instance_ids.map(|(_, compute_instance)| compute_instance),
                    host: HostFacts {
                        user: Reading::Value(script.user.as_deref().unwrap_or("demo").into()),
                        // Invented owners: uid 0 for root, 1000 and up for the others.
                        uid: Reading::Value(demo_uid(script.user.as_deref())),
                        parent_pid: Reading::Value(1),
                        command: Reading::Value(
                            script
                                .command
                                .clone()
                                .or_else(|| script.name.clone())
                                .unwrap_or_default()
                                .into(),
                        ),
                        cpu_percent: Reading::Value(host_value(&script.cpu, "cpu").max(0.0)),
                        memory_bytes: Reading::Value(
                            host_value(&script.host_memory, "host_memory").max(0.0) as u64
                        ),
                        start_time: Reading::Value(start_epoch),
                        // The demo is read-only: nothing is signalled.
                        start_ticks: Reading::NotSupported,
                        running_seconds: Reading::Value(running),
                        container: script.cgroup.as_deref().and_then(container_of).map(Arc::new),
                        namespace_pid: None,
                        local_pid: Some(live.pid),
                        pid_mapping: PidMapping::Same,
                        unmapped_reason: None,
                    },
                })
            })
            .collect()
    }
}

/// The demo's process tree: a job's later processes (the same user in the same container)
/// are children of its first, as a launcher's workers are; the others hang off init.
fn give_jobs_parents(processes: &mut [GpuProcess]) {
    let job = |p: &GpuProcess| (p.host.user.value().cloned(), p.host.container.clone());
    for i in 1..processes.len() {
        let first = processes[..i]
            .iter()
            .find(|q| q.pid != processes[i].pid && job(q) == job(&processes[i]) && q.host.container.is_some())
            .map(|q| q.pid);
        if let Some(parent) = first {
            processes[i].host.parent_pid = Reading::Value(parent);
        }
    }
}

/// A stable invented uid for a demo user.
fn demo_uid(user: Option<&str>) -> u32 {
    match user {
        Some("root") => 0,
        Some(name) => 1000 + name.bytes().map(u32::from).sum::<u32>() % 1000,
        None => 1000,
    }
}

impl Default for DemoSource {
    fn default() -> Self {
        Self::new()
    }
}

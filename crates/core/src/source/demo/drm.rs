//! The demo machine's AMD and Intel GPUs: a `/sys` and `/proc` held in memory, whose
//! counters advance with the clock, read by the real DRM reader. An AMD Radeon (amdgpu)
//! renders in Blender and serves a ROCm job, whose compute goes through `/dev/kfd` and so
//! shows its VRAM but no engine time, as on a real machine; an Intel GPU (xe) transcodes
//! video with ffmpeg.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::model::{GpuProcess, HostFacts, PidMapping, Reading};
use crate::source::drm::{DrmReader, DrmReadout, Files};

const AMD_SLOT: &str = "0000:c3:00.0";
const INTEL_SLOT: &str = "0000:08:00.0";
/// The demo machine's kernel, one that has xe (6.8 and later).
const KERNEL_RELEASE: &str = "6.8.0-49-generic";
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// A demo process on one of these GPUs: PID, user, command, the GPU's slot, and its client.
struct Job {
    pid: u32,
    user: &'static str,
    command: &'static str,
    fd: u32,
    node: &'static str,
    cpu_percent: f64,
    host_memory: u64,
}

const JOBS: [Job; 3] = [
    Job {
        pid: 4101,
        user: "maya",
        command: "blender -b shots/042.blend -a",
        fd: 14,
        node: "renderD128",
        cpu_percent: 96.0,
        host_memory: 6 * GIB,
    },
    Job {
        pid: 4102,
        user: "omar",
        command: "python3 serve_llm.py --device rocm",
        fd: 9,
        node: "renderD128",
        cpu_percent: 38.0,
        host_memory: 9 * GIB,
    },
    Job {
        pid: 4201,
        user: "media",
        command: "ffmpeg -hwaccel qsv -i cam.mkv -c:v av1_qsv out.mkv",
        fd: 7,
        node: "renderD129",
        cpu_percent: 22.0,
        host_memory: 420 * MIB,
    },
];

/// The AMD and Intel GPUs of the demo machine.
#[derive(Debug)]
pub(super) struct DemoDrm {
    reader: DrmReader,
}

impl DemoDrm {
    pub(super) fn new() -> Self {
        let started = Instant::now();
        let clock = move || u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let mut reader = DrmReader::with(
            Box::new(Tree::Proc(started)),
            Box::new(Tree::Sys(started)),
            Box::new(clock),
        );
        // Read once now, so that the first reading shows rates: the counters are smooth, so
        // even a short interval gives the load of the moment.
        reader.read();
        Self { reader }
    }

    /// The GPUs, numbered from `first_index`, and their processes with their host facts.
    pub(super) fn read(&mut self, first_index: u32) -> DrmReadout {
        let mut out = self.reader.readout(first_index);
        for process in &mut out.processes {
            fill_host(process);
        }
        out
    }
}

/// A job's host facts, as the demo invents them.
fn fill_host(process: &mut GpuProcess) {
    let Some(job) = JOBS.iter().find(|j| j.pid == process.pid) else {
        return;
    };
    let running = 3 * 3600 + u64::from(job.pid % 100) * 60;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    process.host = HostFacts {
        user: Reading::Value(job.user.into()),
        uid: Reading::Value(1000 + job.pid % 100),
        parent_pid: Reading::Value(1),
        command: Reading::Value(job.command.into()),
        cpu_percent: Reading::Value(job.cpu_percent),
        memory_bytes: Reading::Value(job.host_memory),
        start_time: Reading::Value(now.saturating_sub(running)),
        // The demo is read-only: nothing is signalled.
        start_ticks: Reading::NotSupported,
        running_seconds: Reading::Value(running),
        container: None,
        namespace_pid: None,
        local_pid: Some(job.pid),
        pid_mapping: PidMapping::Same,
        unmapped_reason: None,
    };
}

/// The busy time, in nanoseconds, of an engine kept `mean` busy (0 to 1) with a swing of
/// `swing` over a `period` in seconds: the integral of `mean + swing sin(2 pi t / period)`.
fn busy_ns(t: f64, mean: f64, swing: f64, period: f64) -> u64 {
    let w = std::f64::consts::TAU / period;
    let seconds = mean * t + swing / w * (1.0 - (w * t).cos());
    (seconds.max(0.0) * 1e9) as u64
}

/// The load now of an engine of [`busy_ns`]'s shape.
fn load(t: f64, mean: f64, swing: f64, period: f64) -> f64 {
    mean + swing * (std::f64::consts::TAU * t / period).sin()
}

/// The demo's `/proc` or `/sys`, computed at the moment of each read.
enum Tree {
    Proc(Instant),
    Sys(Instant),
}

impl Tree {
    fn seconds(&self) -> f64 {
        match self {
            Self::Proc(started) | Self::Sys(started) => started.elapsed().as_secs_f64(),
        }
    }

    fn text(&self, path: &str) -> Option<String> {
        let t = self.seconds();
        match self {
            Self::Proc(_) => proc_file(path, t),
            Self::Sys(_) => sys_file(path, t),
        }
    }
}

fn not_found() -> std::io::Error {
    std::io::ErrorKind::NotFound.into()
}

impl Files for Tree {
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        let dir = dir.to_string_lossy();
        let names: Vec<String> = match (self, dir.as_ref()) {
            (Self::Proc(_), "" | ".") => JOBS.iter().map(|j| j.pid.to_string()).collect(),
            (Self::Proc(_), _) => {
                let job = dir
                    .strip_suffix("/fd")
                    .and_then(|pid| JOBS.iter().find(|j| j.pid.to_string() == pid))
                    .ok_or_else(not_found)?;
                vec!["0".into(), job.fd.to_string()]
            }
            (Self::Sys(_), "class/drm") => [
                "card0",
                "card0-DP-1",
                "card1",
                "renderD128",
                "renderD129",
                "version",
            ]
            .map(String::from)
            .to_vec(),
            (Self::Sys(_), "class/drm/card0/device/hwmon") => vec!["hwmon2".into()],
            (Self::Sys(_), "class/drm/card1/device/hwmon") => vec!["hwmon3".into()],
            _ => return Err(not_found()),
        };
        Ok(names)
    }

    fn link(&self, path: &Path) -> std::io::Result<PathBuf> {
        let path = path.to_string_lossy();
        let target = match (self, path.as_ref()) {
            (Self::Sys(_), "class/drm/card0/device") => format!("../../../bus/pci/devices/{AMD_SLOT}"),
            (Self::Sys(_), "class/drm/card1/device") => format!("../../../bus/pci/devices/{INTEL_SLOT}"),
            (Self::Sys(_), "class/drm/card0/device/driver") => "../../../bus/pci/drivers/amdgpu".into(),
            (Self::Sys(_), "class/drm/card1/device/driver") => "../../../bus/pci/drivers/xe".into(),
            (Self::Proc(_), _) => {
                let (pid, fd) = path.split_once("/fd/").ok_or_else(not_found)?;
                let job = JOBS
                    .iter()
                    .find(|j| j.pid.to_string() == pid)
                    .ok_or_else(not_found)?;
                if fd == job.fd.to_string() {
                    format!("/dev/dri/{}", job.node)
                } else if fd == "0" {
                    "/dev/null".into()
                } else {
                    return Err(not_found());
                }
            }
            _ => return Err(not_found()),
        };
        Ok(PathBuf::from(target))
    }

    fn read(&self, path: &Path, max: usize) -> std::io::Result<Vec<u8>> {
        let mut bytes = self
            .text(&path.to_string_lossy())
            .ok_or_else(not_found)?
            .into_bytes();
        bytes.truncate(max);
        Ok(bytes)
    }
}

/// `PID/fdinfo/FD` of a demo job at `t` seconds.
fn proc_file(path: &str, t: f64) -> Option<String> {
    // Both drivers are the kernel's own, so their version is its release.
    if path == "sys/kernel/osrelease" {
        return Some(KERNEL_RELEASE.into());
    }
    let (pid, fd) = path.split_once("/fdinfo/")?;
    let job = JOBS.iter().find(|j| j.pid.to_string() == pid)?;
    let head = "pos:\t0\nflags:\t02100002\nmnt_id:\t26\n";
    if fd == "0" {
        return Some(format!("{head}ino:\t4\n"));
    }
    if fd != job.fd.to_string() {
        return None;
    }
    let amd = |id: u32| {
        format!("{head}ino:\t{id}\ndrm-driver:\tamdgpu\ndrm-client-id:\t{id}\ndrm-pdev:\t{AMD_SLOT}\n")
    };
    Some(match job.pid {
        4101 => format!(
            "{}drm-total-vram:\t7340032 KiB\ndrm-resident-vram:\t7340032 KiB\ndrm-memory-vram:\t7340032 KiB\n\
             drm-resident-gtt:\t524288 KiB\ndrm-engine-gfx:\t{} ns\ndrm-engine-compute:\t{} ns\n\
             drm-engine-dma:\t{} ns\n",
            amd(311),
            busy_ns(t, 0.62, 0.25, 40.0),
            busy_ns(t, 0.08, 0.05, 17.0),
            busy_ns(t, 0.03, 0.02, 9.0),
        ),
        // ROCm work goes through /dev/kfd: its VRAM shows here, its engine time does not.
        4102 => format!(
            "{}drm-total-vram:\t14680064 KiB\ndrm-resident-vram:\t14680064 KiB\ndrm-resident-gtt:\t131072 KiB\n",
            amd(312)
        ),
        _ => {
            let total = (t * 19_200_000.0) as u64 + 7_655_183_225;
            // Cycles of the GPU's 19.2 MHz timestamp, over both engines of each class.
            let cycles = |mean: f64, swing: f64, period: f64| {
                (busy_ns(t, mean, swing, period) as f64 * 0.0192 * 2.0) as u64
            };
            format!(
                "{head}ino:\t401\ndrm-driver:\txe\ndrm-client-id:\t401\ndrm-pdev:\t{INTEL_SLOT}\n\
                 drm-total-system:\t0\ndrm-resident-gtt:\t16 MiB\ndrm-total-vram0:\t1536 MiB\n\
                 drm-resident-vram0:\t1536 MiB\ndrm-cycles-rcs:\t0\ndrm-total-cycles-rcs:\t{total}\n\
                 drm-cycles-vcs:\t{}\ndrm-total-cycles-vcs:\t{total}\ndrm-engine-capacity-vcs:\t2\n\
                 drm-cycles-vecs:\t{}\ndrm-total-cycles-vecs:\t{total}\ndrm-engine-capacity-vecs:\t2\n",
                cycles(0.35, 0.15, 23.0),
                cycles(0.12, 0.05, 31.0),
            )
        }
    })
}

/// A sysfs file of the demo's GPUs at `t` seconds.
fn sys_file(path: &str, t: f64) -> Option<String> {
    let (device, name) = if let Some(name) = path.strip_prefix("class/drm/card0/device/") {
        ("amd", name)
    } else if let Some(name) = path.strip_prefix("class/drm/card1/device/") {
        ("intel", name)
    } else {
        return None;
    };
    let amd_busy = load(t, 0.78, 0.2, 40.0).clamp(0.0, 1.0);
    let text = match (device, name) {
        ("amd", "vendor") => "0x1002".into(),
        ("amd", "device") => "0x744c".into(),
        ("amd", "product_name") => "AMD Radeon RX 7900 XTX".into(),
        ("amd", "power/runtime_status") | ("intel", "power/runtime_status") => "active".into(),
        ("amd", "gpu_busy_percent") => format!("{}", (amd_busy * 100.0).round()),
        ("amd", "mem_busy_percent") => format!("{}", (amd_busy * 35.0).round()),
        ("amd", "mem_info_vram_total") => (24 * GIB).to_string(),
        ("amd", "mem_info_vram_used") => (21 * GIB + 600 * MIB).to_string(),
        ("amd", "mem_info_gtt_total") => (32 * GIB).to_string(),
        ("amd", "mem_info_gtt_used") => (700 * MIB).to_string(),
        ("amd", "hwmon/hwmon2/name") => "amdgpu".into(),
        ("amd", "hwmon/hwmon2/temp1_input") => format!("{}", (52.0 + 22.0 * amd_busy) as u64 * 1000),
        ("amd", "hwmon/hwmon2/temp3_input") => format!("{}", (58.0 + 26.0 * amd_busy) as u64 * 1000),
        ("amd", "hwmon/hwmon2/temp3_label") => "mem".into(),
        ("amd", "hwmon/hwmon2/power1_average") => format!("{}", ((70.0 + 250.0 * amd_busy) * 1e6) as u64),
        ("amd", "hwmon/hwmon2/power1_cap") => "339000000".into(),
        ("amd", "hwmon/hwmon2/freq1_input") => format!("{}", ((1200.0 + 1300.0 * amd_busy) * 1e6) as u64),
        ("amd", "hwmon/hwmon2/freq2_input") => "1249000000".into(),
        ("amd", "hwmon/hwmon2/pwm1") => format!("{}", (60.0 + 110.0 * amd_busy) as u64),
        ("amd", "hwmon/hwmon2/pwm1_max") => "255".into(),
        ("intel", "vendor") => "0x8086".into(),
        ("intel", "device") => "0xe20b".into(),
        ("intel", "tile0/gt0/freq0/act_freq") => {
            format!("{}", (1800.0 + 800.0 * load(t, 0.5, 0.4, 23.0)) as u64)
        }
        ("intel", "hwmon/hwmon3/name") => "xe".into(),
        ("intel", "hwmon/hwmon3/temp2_input") => "61000".into(),
        ("intel", "hwmon/hwmon3/power1_max") => "190000000".into(),
        // 60 W on average, in microjoules since the driver loaded.
        ("intel", "hwmon/hwmon3/energy1_input") => format!("{}", 9_000_000_000_u64 + (t * 60e6) as u64),
        _ => return None,
    };
    Some(format!("{text}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Engine, Vendor};

    #[test]
    fn the_demo_gpus_are_read_by_the_drm_reader_with_their_jobs() {
        let mut drm = DemoDrm::new();
        drm.read(4);
        std::thread::sleep(std::time::Duration::from_millis(200));
        let out = drm.read(4);
        let found: Vec<(u32, Vendor, Option<&String>)> = out
            .devices
            .iter()
            .map(|d| (d.index, d.vendor, d.name.value()))
            .collect();
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!((found[0].0, found[0].1), (4, Vendor::Amd));
        assert_eq!(found[0].2.map(String::as_str), Some("AMD Radeon RX 7900 XTX"));
        assert_eq!((found[1].0, found[1].1), (5, Vendor::Intel));
        let blender = out.processes.iter().find(|p| p.pid == 4101).unwrap();
        let busy = blender.engines_percent[&Engine::Graphics];
        assert!((30.0..=95.0).contains(&busy), "graphics {busy}");
        assert_eq!(blender.host.user.as_deref(), Some("maya"));
        let rocm = out.processes.iter().find(|p| p.pid == 4102).unwrap();
        assert_eq!(rocm.sm_percent.get(), Some(0), "KFD work is not in fdinfo");
        assert_eq!(rocm.gpu_memory_bytes.get(), Some(14 * GIB));
        let ffmpeg = out.processes.iter().find(|p| p.pid == 4201).unwrap();
        let video = ffmpeg.engines_percent[&Engine::Video];
        assert!((20.0..=60.0).contains(&video), "video {video}");
        assert!(
            out.devices[1]
                .power_usage_watts
                .get()
                .is_some_and(|w| (50.0..70.0).contains(&w))
        );
    }
}

//! The DRM reader on fake `/proc` and `/sys` trees laid out as the kernel lays them out: two
//! AMD GPUs (A with every figure, B of the same model with fewer), one Intel GPU (C, xe),
//! five processes (one client shared by two processes, one process on two GPUs, one of
//! another user), counters that advance by a known amount between two reads a second apart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::clients::Region;
use super::fixture::{A, AMDGPU_DKMS_VERSION, B, C, D, KERNEL_RELEASE, client, link, procfs, sysfs, write};
use super::*;
use crate::model::{Engine, Vendor};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const SECOND: u64 = 1_000_000_000;

/// The machine's files with some refused, as the kernel refuses another user's fds.
struct Refusing {
    files: RootedFiles,
    refused: Vec<PathBuf>,
}

impl Files for Refusing {
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        self.check(dir)?;
        self.files.list(dir)
    }

    fn link(&self, path: &Path) -> std::io::Result<PathBuf> {
        self.check(path)?;
        self.files.link(path)
    }

    fn read(&self, path: &Path, max: usize) -> std::io::Result<Vec<u8>> {
        self.check(path)?;
        self.files.read(path, max)
    }
}

impl Refusing {
    fn check(&self, path: &Path) -> std::io::Result<()> {
        if self.refused.iter().any(|r| path.starts_with(r)) {
            return Err(std::io::ErrorKind::PermissionDenied.into());
        }
        Ok(())
    }
}

/// A reader of fresh trees whose clock the test sets; `refused` are procfs paths that
/// fail as another user's do.
fn machine(refused: &[&str]) -> (tempfile::TempDir, DrmReader, Arc<AtomicU64>) {
    let dir = tempfile::tempdir().unwrap();
    sysfs(&dir.path().join("sys"), 0.0);
    procfs(&dir.path().join("proc"), 0.0);
    let now = Arc::new(AtomicU64::new(0));
    let clock = Arc::clone(&now);
    let procfs = Refusing {
        files: RootedFiles::new(dir.path().join("proc")),
        refused: refused.iter().map(PathBuf::from).collect(),
    };
    let reader = DrmReader::with(
        Box::new(procfs),
        Box::new(RootedFiles::new(dir.path().join("sys"))),
        Box::new(move || clock.load(Ordering::SeqCst)),
    );
    (dir, reader, now)
}

/// Two reads a second apart; the second's readings by PCI slot, and its hidden count.
fn read_twice(refused: &[&str]) -> (BTreeMap<String, DrmReading>, usize) {
    let (dir, mut reader, now) = machine(refused);
    reader.read();
    procfs(&dir.path().join("proc"), 1.0);
    sysfs(&dir.path().join("sys"), 1.0);
    now.store(SECOND, Ordering::SeqCst);
    let (readings, hidden) = reader.read();
    let by_slot = readings
        .into_iter()
        .map(|r| (r.device.pci_slot.clone(), r))
        .collect();
    (by_slot, hidden)
}

fn engines(pairs: &[(Engine, f64)]) -> BTreeMap<Engine, f64> {
    pairs.iter().copied().collect()
}

/// Percents to four decimals: the arithmetic is exact to far below that.
fn rounded(map: &BTreeMap<Engine, f64>) -> BTreeMap<Engine, f64> {
    map.iter().map(|(c, p)| (*c, (p * 1e4).round() / 1e4)).collect()
}

#[test]
fn the_devices_are_found_by_slot_vendor_and_driver_and_connectors_skipped() {
    let (_dir, reader, _) = machine(&[]);
    let found: Vec<(&str, &str, Vendor, &str)> = reader
        .devices()
        .iter()
        .map(|d| (d.card.as_str(), d.pci_slot.as_str(), d.vendor, d.driver.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            ("card0", A, Vendor::Amd, "amdgpu"),
            ("card1", B, Vendor::Amd, "amdgpu"),
            ("card2", C, Vendor::Intel, "xe"),
            ("card3", D, Vendor::Intel, "i915"),
        ]
    );
}

#[test]
fn each_device_reads_its_sysfs_and_hwmon_figures() {
    let (readings, _) = read_twice(&[]);
    let a = &readings[A];
    assert_eq!(a.busy_percent, Some(87.0));
    assert_eq!(a.figures.memory_busy_percent, Some(12));
    assert_eq!(
        (a.figures.vram_total_bytes, a.figures.vram_used_bytes),
        (Some(24 * GIB), Some(8 * GIB))
    );
    assert_eq!(
        (a.figures.gtt_total_bytes, a.figures.gtt_used_bytes),
        (Some(32 * GIB), Some(256 * MIB))
    );
    assert_eq!(a.figures.temperature_celsius, Some(65), "the edge sensor");
    assert_eq!(a.figures.power_watts, Some(245.0));
    assert_eq!(a.figures.power_cap_watts, Some(303.0));
    assert_eq!(a.figures.core_clock_mhz, Some(2482), "freq1_input is in Hz");
    assert_eq!(a.figures.memory_clock_mhz, Some(1249));
    assert_eq!(a.figures.fan_percent, Some(40), "102 of 255");
    let b = &readings[B];
    assert_eq!(
        b.busy_percent, None,
        "no gpu_busy_percent: unknown, not 0 nor the clients' 25 %"
    );
    assert_eq!(
        b.figures.power_watts,
        Some(95.0),
        "power1_input where there is no average"
    );
    assert_eq!(
        (b.figures.fan_percent, b.figures.temperature_celsius),
        (None, Some(48))
    );
    let c = &readings[C];
    assert_eq!(c.figures.core_clock_mhz, Some(2800), "the actual frequency");
    assert_eq!(c.figures.power_watts, Some(45.0), "45 J over 1 s");
    assert_eq!(c.figures.power_cap_watts, Some(190.0));
    assert_eq!(c.figures.temperature_celsius, Some(58), "xe's package sensor");
    assert_eq!(
        c.busy_percent.map(|p| (p * 1e4).round() / 1e4),
        Some(30.0),
        "its busiest class, video"
    );
}

#[test]
fn each_process_counts_its_clients_once_with_exact_rates_and_memory() {
    let (readings, hidden) = read_twice(&[]);
    assert_eq!(hidden, 0);
    let a = &readings[A].processes;
    assert_eq!(
        a.keys().copied().collect::<Vec<_>>(),
        [1201, 2301],
        "2402 shares 1201's client"
    );
    assert_eq!(rounded(&a[&1201].engines), engines(&[(Engine::Graphics, 25.0)]));
    assert_eq!(
        a[&1201].memory[&Region::Vram],
        GIB + 256 * MIB,
        "two clients; dup'd fds once"
    );
    assert_eq!(a[&1201].sharers, [2402]);
    assert_eq!(
        rounded(&a[&2301].engines),
        engines(&[(Engine::Graphics, 60.0), (Engine::Compute, 10.0)])
    );
    assert_eq!(a[&2301].memory[&Region::Vram], 4 * GIB);
    assert_eq!(a[&2301].gpu_percent().map(|p| p.round()), Some(70.0));
    let b = &readings[B].processes;
    assert_eq!(rounded(&b[&2301].engines), engines(&[(Engine::Graphics, 25.0)]));
    assert_eq!(
        b[&2301].memory[&Region::Vram],
        2 * GIB,
        "the older drm-memory-* key"
    );
    assert_eq!(
        b[&2302].gpu_percent(),
        Some(0.0),
        "KFD work is not in fdinfo: 0, read twice"
    );
    assert_eq!(b[&2302].memory[&Region::Vram], 12 * GIB);
    let c = &readings[C].processes[&2401];
    assert_eq!(
        rounded(&c.engines),
        engines(&[
            (Engine::Graphics, 0.0),
            (Engine::Compute, 0.0),
            (Engine::Copy, 0.0),
            (Engine::Video, 30.0),
            (Engine::VideoEnhance, 10.0),
        ]),
        "cycles over the GPU timestamp, per engine of the class"
    );
    assert_eq!(
        (c.memory[&Region::Vram], c.memory[&Region::System]),
        (512 * MIB, 8 * MIB)
    );
}

#[test]
fn another_users_process_is_counted_as_hidden_never_as_idle() {
    let (readings, hidden) = read_twice(&["2302/fd"]);
    assert_eq!(hidden, 1);
    let b = &readings[B].processes;
    assert!(!b.contains_key(&2302), "{b:?}");
    assert_eq!(rounded(&b[&2301].engines), engines(&[(Engine::Graphics, 25.0)]));
}

#[test]
fn a_first_read_has_no_rates_and_a_counter_that_goes_back_gives_zero() {
    let (dir, mut reader, now) = machine(&[]);
    let (first, _) = reader.read();
    let a = first.iter().find(|r| r.device.pci_slot == A).unwrap();
    assert_eq!(a.processes[&1201].gpu_percent(), None, "one read: no rate yet");
    assert_eq!(
        a.processes[&1201].memory[&Region::Vram],
        GIB + 256 * MIB,
        "memory needs one read"
    );
    procfs(&dir.path().join("proc"), 1.0);
    now.store(SECOND, Ordering::SeqCst);
    reader.read();
    // t2: the counters are back at their t0 values.
    procfs(&dir.path().join("proc"), 0.0);
    now.store(2 * SECOND, Ordering::SeqCst);
    let (third, _) = reader.read();
    let a = third.iter().find(|r| r.device.pci_slot == A).unwrap();
    assert_eq!(
        a.processes[&1201].gpu_percent(),
        Some(0.0),
        "held, never negative"
    );
    assert_eq!(a.processes[&2301].gpu_percent(), Some(0.0));
}

#[test]
fn a_process_that_vanished_or_holds_no_gpu_is_skipped_and_revisited_later() {
    let (dir, mut reader, now) = machine(&[]);
    // Listed, gone before its fds are read.
    std::fs::create_dir_all(dir.path().join("proc/9999")).unwrap();
    let quiet = dir.path().join("proc/3000");
    link(&quiet.join("fd/0"), "/dev/null");
    let (_, hidden) = reader.read();
    assert_eq!(hidden, 0, "a vanished process is not hidden");
    // 3000 opens a GPU: seen at its revisit, not before.
    link(&quiet.join("fd/9"), "/dev/dri/renderD130");
    let body = client(401, 0.0).replace("401", "402");
    write(&quiet.join("fdinfo/9"), &body);
    let mut sweeps_until_seen = 0;
    for sweep in 1..=clients::REVISIT_EVERY {
        now.store(u64::from(sweep) * SECOND, Ordering::SeqCst);
        let (readings, _) = reader.read();
        sweeps_until_seen = sweep;
        if readings.iter().any(|r| r.processes.contains_key(&3000)) {
            break;
        }
    }
    assert_eq!(sweeps_until_seen, clients::REVISIT_EVERY);
}

#[test]
fn a_client_without_an_id_is_one_client_per_fd() {
    let (dir, mut reader, _) = machine(&[]);
    let fdinfo = dir.path().join("proc/2401/fdinfo/7");
    let body = std::fs::read_to_string(&fdinfo)
        .unwrap()
        .replace("drm-client-id:\t401\n", "");
    std::fs::write(&fdinfo, body).unwrap();
    let (readings, _) = reader.read();
    let c = readings.iter().find(|r| r.device.pci_slot == C).unwrap();
    assert_eq!(c.processes[&2401].memory[&Region::Vram], 512 * MIB);
}

#[test]
fn a_device_runtime_pm_has_put_to_sleep_is_not_woken_by_a_sensor_read() {
    let (dir, mut reader, _) = machine(&[]);
    let b = dir.path().join("sys/bus/pci/devices").join(B);
    std::fs::write(b.join("power/runtime_status"), "suspended\n").unwrap();
    let (readings, _) = reader.read();
    let b = readings.iter().find(|r| r.device.pci_slot == B).unwrap();
    assert!(b.figures.asleep);
    assert_eq!(
        (
            b.figures.power_watts,
            b.figures.temperature_celsius,
            b.figures.vram_used_bytes
        ),
        (None, None, None),
        "no figure read"
    );
}

#[test]
fn an_integrated_i915_gpu_gives_its_clock_and_its_clients_engines_and_system_memory() {
    let (readings, _) = read_twice(&[]);
    let d = &readings[D];
    assert_eq!(d.figures.core_clock_mhz, Some(1300), "gt_act_freq_mhz");
    assert_eq!(
        (d.figures.temperature_celsius, d.figures.power_watts),
        (None, None),
        "an iGPU has no hwmon"
    );
    assert_eq!(
        d.busy_percent.map(f64::round),
        Some(30.0),
        "video, its busiest class"
    );
    let p = &d.processes[&2501];
    assert_eq!(
        rounded(&p.engines),
        engines(&[
            (Engine::Graphics, 20.0),
            (Engine::Copy, 0.0),
            (Engine::Video, 30.0),
            (Engine::VideoEnhance, 0.0),
        ]),
        "ns over the second, video over its two engines"
    );
    assert_eq!(p.memory[&Region::System], 64 * MIB);
    assert!(!p.memory.contains_key(&Region::Vram));
}

#[test]
fn the_readout_numbers_the_gpus_after_nvidias_and_gives_model_values() {
    let (dir, mut reader, now) = machine(&["2302/fd"]);
    reader.read();
    procfs(&dir.path().join("proc"), 1.0);
    sysfs(&dir.path().join("sys"), 1.0);
    now.store(SECOND, Ordering::SeqCst);
    let out = reader.readout(2);
    let gpus: Vec<(u32, Vendor, Option<&String>, Option<&String>)> = out
        .devices
        .iter()
        .map(|d| (d.index, d.vendor, d.driver.value(), d.pci_bus_id.value()))
        .collect();
    let text = |s: &str| s.to_string();
    assert_eq!(
        gpus.iter()
            .map(|(i, v, d, p)| (*i, *v, d.cloned(), p.cloned()))
            .collect::<Vec<_>>(),
        [
            (2, Vendor::Amd, Some(text("amdgpu")), Some(text(A))),
            (3, Vendor::Amd, Some(text("amdgpu")), Some(text(B))),
            (4, Vendor::Intel, Some(text("xe")), Some(text(C))),
            (5, Vendor::Intel, Some(text("i915")), Some(text(D))),
        ]
    );
    // amdgpu-dkms has a version of its own; xe and i915 are the kernel's.
    let versions: Vec<Option<&str>> = out
        .devices
        .iter()
        .map(|d| d.driver_version.value().map(String::as_str))
        .collect();
    assert_eq!(
        versions,
        [
            Some(AMDGPU_DKMS_VERSION),
            Some(AMDGPU_DKMS_VERSION),
            Some(KERNEL_RELEASE),
            Some(KERNEL_RELEASE)
        ]
    );
    let a = &out.devices[0];
    assert_eq!(
        (
            a.memory_temperature_celsius.get(),
            out.devices[1].memory_temperature_celsius.get()
        ),
        (Some(70), None),
        "A's hwmon has a `mem` sensor, B's none"
    );
    assert_eq!(a.name.value().map(String::as_str), Some("AMD GPU 0x744c"));
    assert_eq!(a.utilization_gpu_percent.get(), Some(87));
    assert_eq!(a.memory_used_bytes.get(), Some(8 * GIB));
    assert_eq!(a.memory_free_bytes.get(), Some(16 * GIB));
    assert_eq!(a.gtt_used_bytes.get(), Some(256 * MIB));
    assert_eq!(a.fan_speed_percent.get(), Some(40));
    assert_eq!(a.clock_graphics_mhz.get(), Some(2482));
    assert_eq!(
        out.devices[1].utilization_gpu_percent,
        Reading::NotSupported,
        "B gives no busy figure"
    );
    let c = &out.devices[2];
    assert_eq!(c.power_usage_watts.get().map(f64::round), Some(45.0));
    assert_eq!(c.energy_joules.get(), Some(5045.0));
    assert_eq!(
        c.memory_total_bytes,
        Reading::NotSupported,
        "no sysfs file for xe's VRAM"
    );
    assert_eq!(out.hidden, 1);
    let process = |pid: u32, gpu: u32| {
        out.processes
            .iter()
            .find(|p| p.pid == pid && p.gpu_index == gpu)
            .unwrap_or_else(|| panic!("{pid} on {gpu}: {:?}", out.processes))
    };
    let blender = process(2301, 2);
    assert_eq!(blender.sm_percent.get(), Some(70));
    assert_eq!(blender.kind, ProcessType::ComputeGraphics);
    assert_eq!(blender.gpu_memory_bytes.get(), Some(4 * GIB));
    assert_eq!(blender.engines_percent[&Engine::Compute], 10.0);
    let ffmpeg = process(2401, 4);
    assert_eq!(ffmpeg.sm_percent.get(), Some(40));
    assert_eq!(ffmpeg.kind, ProcessType::Graphics);
    assert_eq!(
        (
            ffmpeg.gpu_memory_bytes.get(),
            ffmpeg.gpu_system_memory_bytes.get()
        ),
        (Some(512 * MIB), Some(8 * MIB))
    );
    let integrated = process(2501, 5);
    assert_eq!(
        (
            integrated.gpu_memory_bytes.get(),
            integrated.gpu_system_memory_bytes.get()
        ),
        (Some(64 * MIB), Some(64 * MIB)),
        "no VRAM: its GPU memory is system memory"
    );
    assert_eq!(out.processes.len(), 5, "2302 hidden: {:?}", out.processes);
}

#[test]
fn a_refused_process_stays_hidden_between_its_retries_and_a_kernel_thread_is_not_hidden() {
    let (dir, mut reader, now) = machine(&["2302/fd", "2/fd"]);
    // A kernel thread (kthreadd: PF_KTHREAD in its flags), whose fds no user may read.
    write(
        &dir.path().join("proc/2/stat"),
        "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 3 0 0\n",
    );
    link(&dir.path().join("proc/2/fd/0"), "/dev/null");
    for sweep in 0..=clients::REVISIT_EVERY {
        now.store(u64::from(sweep) * SECOND, Ordering::SeqCst);
        let (_, hidden) = reader.read();
        assert_eq!(hidden, 1, "sweep {sweep}: 2302 alone, every sweep");
    }
}

#[test]
fn a_holder_reads_only_its_gpu_fds_until_its_relisting_and_a_reused_fd_ends_it() {
    let (dir, mut reader, now) = machine(&[]);
    reader.read();
    // 2301 opens a client on C: seen at its relisting, not before.
    let blender = dir.path().join("proc/2301");
    link(&blender.join("fd/22"), "/dev/dri/renderD130");
    write(
        &blender.join("fdinfo/22"),
        &client(401, 0.0).replace("401", "403"),
    );
    let on_c = |readings: &[DrmReading]| {
        readings
            .iter()
            .any(|r| r.device.pci_slot == C && r.processes.contains_key(&2301))
    };
    let mut seen_at = None;
    for sweep in 1..=clients::REVISIT_EVERY {
        now.store(u64::from(sweep) * SECOND, Ordering::SeqCst);
        let (readings, _) = reader.read();
        if on_c(&readings) {
            seen_at = Some(sweep);
            break;
        }
    }
    assert_eq!(seen_at, Some(clients::REVISIT_EVERY));
    // 2401's fd 7 closed and reused for a plain file: not a client any more, at once.
    link(&dir.path().join("proc/2401/fd/7"), "/home/u/notes.txt");
    write(
        &dir.path().join("proc/2401/fdinfo/7"),
        "pos:\t0\nflags:\t0100002\n",
    );
    now.store(20 * SECOND, Ordering::SeqCst);
    let (readings, _) = reader.read();
    assert!(
        readings.iter().all(|r| !r.processes.contains_key(&2401)),
        "{readings:?}"
    );
}

//! The DRM reader on fake `/proc` and `/sys` trees laid out as the kernel lays them out: two
//! AMD GPUs (A with every figure, B of the same model with fewer), one Intel GPU (C, xe),
//! five processes (one client shared by two processes, one process on two GPUs, one of
//! another user), counters that advance by a known amount between two reads a second apart.

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::clients::{EngineClass, Region};
use super::sysfs::Vendor;
use super::*;

const A: &str = "0000:03:00.0";
const B: &str = "0000:43:00.0";
const C: &str = "0000:08:00.0";
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const SECOND: u64 = 1_000_000_000;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn link(path: &Path, target: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    if std::fs::symlink_metadata(path).is_ok() {
        std::fs::remove_file(path).unwrap();
    }
    symlink(target, path).unwrap();
}

/// The sysfs tree: devices A, B, C, a connector entry and a file to skip.
fn sysfs(root: &Path) {
    for (card, render, slot) in [(0, 128, A), (1, 129, B), (2, 130, C)] {
        for node in [format!("card{card}"), format!("renderD{render}")] {
            link(
                &root.join("class/drm").join(&node).join("device"),
                &format!("../../../bus/pci/devices/{slot}"),
            );
        }
        write(
            &root.join(format!("class/drm/card{card}/dev")),
            &format!("226:{card}\n"),
        );
    }
    std::fs::create_dir_all(root.join("class/drm/card0-DP-1")).unwrap();
    write(&root.join("class/drm/version"), "drm 1.1.0 20060810\n");
    let amd = |slot: &str, files: &[(&str, &str)]| {
        let dir = root.join("bus/pci/devices").join(slot);
        write(&dir.join("vendor"), "0x1002\n");
        write(&dir.join("device"), "0x744c\n");
        write(
            &dir.join("uevent"),
            &format!("DRIVER=amdgpu\nPCI_SLOT_NAME={slot}\n"),
        );
        link(&dir.join("driver"), "../../../bus/pci/drivers/amdgpu");
        write(&dir.join("power/runtime_status"), "active\n");
        for (name, value) in files {
            write(&dir.join(name), &format!("{value}\n"));
        }
    };
    amd(
        A,
        &[
            ("gpu_busy_percent", "87"),
            ("mem_busy_percent", "12"),
            ("mem_info_vram_total", "25769803776"),
            ("mem_info_vram_used", "8589934592"),
            ("mem_info_gtt_total", "34359738368"),
            ("mem_info_gtt_used", "268435456"),
            ("pp_dpm_sclk", "0: 500Mhz\n1: 1500Mhz\n2: 2482Mhz *"),
            ("hwmon/hwmon3/name", "amdgpu"),
            ("hwmon/hwmon3/temp1_input", "65000"),
            ("hwmon/hwmon3/temp1_label", "edge"),
            ("hwmon/hwmon3/temp2_input", "78000"),
            ("hwmon/hwmon3/temp2_label", "junction"),
            ("hwmon/hwmon3/temp3_input", "70000"),
            ("hwmon/hwmon3/temp1_crit", "100000"),
            ("hwmon/hwmon3/power1_average", "245000000"),
            ("hwmon/hwmon3/power1_cap", "303000000"),
            ("hwmon/hwmon3/power1_cap_max", "339000000"),
            ("hwmon/hwmon3/freq1_input", "2482000000"),
            ("hwmon/hwmon3/freq2_input", "1249000000"),
            ("hwmon/hwmon3/fan1_input", "1650"),
            ("hwmon/hwmon3/pwm1", "102"),
            ("hwmon/hwmon3/pwm1_max", "255"),
        ],
    );
    amd(
        B,
        &[
            ("mem_info_vram_total", "25769803776"),
            ("mem_info_vram_used", "15569256448"),
            ("hwmon/hwmon4/name", "amdgpu"),
            ("hwmon/hwmon4/temp1_input", "48000"),
            ("hwmon/hwmon4/power1_input", "95000000"),
        ],
    );
    let c = root.join("bus/pci/devices").join(C);
    write(&c.join("vendor"), "0x8086\n");
    write(&c.join("device"), "0xe20b\n");
    write(&c.join("uevent"), &format!("DRIVER=xe\nPCI_SLOT_NAME={C}\n"));
    write(&c.join("power/runtime_status"), "active\n");
    for (name, value) in [
        ("act_freq", "2800"),
        ("cur_freq", "2850"),
        ("max_freq", "2850"),
        ("min_freq", "400"),
        ("rp0_freq", "2850"),
        ("rpn_freq", "400"),
    ] {
        write(&c.join("tile0/gt0/freq0").join(name), &format!("{value}\n"));
    }
    for (name, value) in [
        ("name", "xe"),
        ("energy1_input", "5000000000"),
        ("power1_max", "190000000"),
        ("temp2_input", "58000"),
        ("fan1_input", "1200"),
    ] {
        write(&c.join("hwmon/hwmon5").join(name), &format!("{value}\n"));
    }
}

const PROCFS_LINES: &str = "pos:\t0\nflags:\t02100002\nmnt_id:\t26\nino:\t1043\n";

/// The fdinfo bodies of each client at t0 (`later` false) and t1.
fn client(id: u32, later: bool) -> String {
    let pick = |t0: u64, t1: u64| if later { t1 } else { t0 };
    let amd = |id: u32, slot: &str| format!("drm-driver:\tamdgpu\ndrm-client-id:\t{id}\ndrm-pdev:\t{slot}\n");
    let body = match id {
        101 => format!(
            "{}pasid:\t32769\ndrm-total-vram:\t262144 KiB\ndrm-resident-vram:\t262144 KiB\n\
             drm-shared-vram:\t0\ndrm-memory-vram:\t262144 KiB\ndrm-memory-gtt: \t2048 KiB\n\
             drm-engine-gfx:\t{} ns\n",
            amd(101, A),
            pick(50_000_000_000, 50_050_000_000)
        ),
        102 => format!(
            "{}drm-total-vram:\t1048576 KiB\ndrm-resident-vram:\t1048576 KiB\n\
             drm-memory-vram:\t1048576 KiB\ndrm-total-gtt:\t2 MiB\ndrm-engine-gfx:\t{} ns\n",
            amd(102, A),
            pick(10_000_000_000, 10_200_000_000)
        ),
        2011 => format!(
            "{}drm-resident-vram:\t4194304 KiB\ndrm-engine-gfx:\t{} ns\ndrm-engine-compute:\t{} ns\n",
            amd(201, A),
            pick(100_000_000_000, 100_600_000_000),
            pick(5_000_000_000, 5_100_000_000)
        ),
        2012 => format!(
            "{}drm-memory-vram:\t2097152 KiB\ndrm-engine-gfx:\t{} ns\n",
            amd(201, B),
            pick(2_000_000_000, 2_250_000_000)
        ),
        301 => format!("{}drm-resident-vram:\t12582912 KiB\n", amd(301, B)),
        401 => {
            let total = pick(7_655_183_225, 7_674_383_225);
            let mut text = format!(
                "drm-driver:\txe\ndrm-client-id:\t401\ndrm-pdev:\t{C}\ndrm-total-system:\t0\n\
                 drm-total-gtt:\t8 MiB\ndrm-resident-gtt:\t8 MiB\ndrm-total-vram0:\t512 MiB\n\
                 drm-resident-vram0:\t512 MiB\ndrm-cycles-rcs:\t0\n"
            );
            for class in ["rcs", "bcs", "vcs", "vecs", "ccs"] {
                text.push_str(&format!("drm-total-cycles-{class}:\t{total}\n"));
            }
            text.push_str(&format!(
                "drm-cycles-vcs:\t{}\ndrm-engine-capacity-vcs:\t2\ndrm-cycles-vecs:\t{}\n\
                 drm-engine-capacity-vecs:\t2\ndrm-cycles-bcs:\t0\ndrm-cycles-ccs:\t0\n\
                 drm-engine-capacity-ccs:\t4\n",
                pick(28_257_900, 39_777_900),
                pick(0, 3_840_000)
            ));
            text
        }
        _ => unreachable!(),
    };
    format!("{PROCFS_LINES}{body}")
}

/// Each process's fds: (fd, link target, client or none).
fn fds(pid: u32) -> Vec<(u32, &'static str, Option<u32>)> {
    match pid {
        1201 => vec![
            (3, "/dev/null", None),
            (14, "/dev/dri/card0", Some(101)),
            (15, "/dev/dri/renderD128", Some(102)),
            (16, "/dev/dri/renderD128", Some(102)),
        ],
        2402 => vec![(15, "/dev/dri/renderD128", Some(102))],
        2301 => vec![
            (20, "/dev/dri/renderD128", Some(2011)),
            (21, "/dev/dri/renderD129", Some(2012)),
        ],
        2302 => vec![(5, "/dev/kfd", None), (6, "/dev/dri/renderD129", Some(301))],
        2401 => vec![(7, "/dev/dri/renderD130", Some(401))],
        _ => unreachable!(),
    }
}

const PIDS: [u32; 5] = [1201, 2402, 2301, 2302, 2401];

/// The procfs tree at t0 or t1.
fn procfs(root: &Path, later: bool) {
    for pid in PIDS {
        let dir = root.join(pid.to_string());
        let uid = if pid == 2302 { 1001 } else { 1000 };
        write(
            &dir.join("status"),
            &format!("Uid:\t{uid}\t{uid}\t{uid}\t{uid}\n"),
        );
        for (fd, target, client_id) in fds(pid) {
            link(&dir.join("fd").join(fd.to_string()), target);
            let body = client_id.map_or_else(|| PROCFS_LINES.to_string(), |id| client(id, later));
            write(&dir.join("fdinfo").join(fd.to_string()), &body);
        }
    }
    write(&root.join("sys/kernel/pid_max"), "4194304\n");
}

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
    sysfs(&dir.path().join("sys"));
    procfs(&dir.path().join("proc"), false);
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
    procfs(&dir.path().join("proc"), true);
    std::fs::write(
        dir.path()
            .join("sys/bus/pci/devices")
            .join(C)
            .join("hwmon/hwmon5/energy1_input"),
        "5045000000\n",
    )
    .unwrap();
    now.store(SECOND, Ordering::SeqCst);
    let (readings, hidden) = reader.read();
    let by_slot = readings
        .into_iter()
        .map(|r| (r.device.pci_slot.clone(), r))
        .collect();
    (by_slot, hidden)
}

fn engines(pairs: &[(EngineClass, f64)]) -> BTreeMap<EngineClass, f64> {
    pairs.iter().copied().collect()
}

/// Percents to four decimals: the arithmetic is exact to far below that.
fn rounded(map: &BTreeMap<EngineClass, f64>) -> BTreeMap<EngineClass, f64> {
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
    assert_eq!(
        rounded(&a[&1201].engines),
        engines(&[(EngineClass::Graphics, 25.0)])
    );
    assert_eq!(
        a[&1201].memory[&Region::Vram],
        GIB + 256 * MIB,
        "two clients; dup'd fds once"
    );
    assert_eq!(a[&1201].sharers, [2402]);
    assert_eq!(
        rounded(&a[&2301].engines),
        engines(&[(EngineClass::Graphics, 60.0), (EngineClass::Compute, 10.0)])
    );
    assert_eq!(a[&2301].memory[&Region::Vram], 4 * GIB);
    assert_eq!(a[&2301].gpu_percent().map(|p| p.round()), Some(70.0));
    let b = &readings[B].processes;
    assert_eq!(
        rounded(&b[&2301].engines),
        engines(&[(EngineClass::Graphics, 25.0)])
    );
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
            (EngineClass::Graphics, 0.0),
            (EngineClass::Compute, 0.0),
            (EngineClass::Copy, 0.0),
            (EngineClass::Video, 30.0),
            (EngineClass::VideoEnhance, 10.0),
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
    assert_eq!(
        rounded(&b[&2301].engines),
        engines(&[(EngineClass::Graphics, 25.0)])
    );
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
    procfs(&dir.path().join("proc"), true);
    now.store(SECOND, Ordering::SeqCst);
    reader.read();
    // t2: the counters are back at their t0 values.
    procfs(&dir.path().join("proc"), false);
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
    let body = client(401, false).replace("401", "402");
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

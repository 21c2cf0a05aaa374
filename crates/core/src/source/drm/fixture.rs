//! The fake machine the DRM tests read: `/sys` and `/proc` trees laid out as the kernel lays
//! them out, with two AMD GPUs (A with every figure, B of the same model with fewer), two
//! Intel GPUs (C on xe, D an integrated one on i915) and six processes (one client shared by
//! two processes, one process on two GPUs, one of another user). Counters advance linearly
//! with the time given: a reader's rates over any interval are the table's below.
//!
//! | PID | GPU | engines | memory |
//! |---|---|---|---|
//! | 1201 | A | graphics 25 % (clients 101 and 102) | VRAM 1.25 GiB |
//! | 2402 | A | shares client 102 with 1201 | - |
//! | 2301 | A, B | A: graphics 60 %, compute 10 %; B: graphics 25 % | 4 GiB; 2 GiB |
//! | 2302 | B | 0 % (KFD work) | 12 GiB |
//! | 2401 | C | video 30 %, video-enhance 10 % | VRAM 512 MiB, GTT 8 MiB |
//! | 2501 | D | graphics 20 %, video 30 % | system 64 MiB |
//!
//! A: busy 87 %, 245 W, 65 °C, 2482 MHz; B: no busy figure, 95 W; C: 45 W from its energy
//! counter, 58 °C, 2800 MHz; D: 1300 MHz, no sensors.

use std::os::unix::fs::symlink;
use std::path::Path;

/// AMD GPU A's PCI slot.
pub const A: &str = "0000:03:00.0";
/// AMD GPU B's PCI slot: the same model as A.
pub const B: &str = "0000:43:00.0";
/// Intel GPU C's (xe) PCI slot.
pub const C: &str = "0000:08:00.0";
/// Intel GPU D's (i915, integrated: no VRAM, no hwmon) PCI slot.
pub const D: &str = "0000:00:02.0";

/// The kernel's release, the version of xe and i915, built in its tree.
pub const KERNEL_RELEASE: &str = "6.8.0-49-generic";
/// amdgpu's version: built out of the kernel's tree by amdgpu-dkms, the module has one of
/// its own (`modinfo amdgpu` prints `version: 5.11.14` for `updates/dkms/amdgpu.ko` in
/// ROCm/legacy-rocm-build issue 1584).
pub const AMDGPU_DKMS_VERSION: &str = "6.8.5";

/// Writes `text` to `path` whole: a reader at the same moment sees the old or the new
/// content, never a part.
pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let partial = path.with_extension("partial");
    std::fs::write(&partial, text).unwrap();
    std::fs::rename(&partial, path).unwrap();
}

/// A symbolic link at `path` to `target`, replacing one there.
pub fn link(path: &Path, target: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    if std::fs::symlink_metadata(path).is_ok() {
        std::fs::remove_file(path).unwrap();
    }
    symlink(target, path).unwrap();
}

/// The sysfs tree at `t` seconds: devices A, B, C, D, a connector entry and a file to skip.
pub fn sysfs(root: &Path, t: f64) {
    write(
        &root.join("module/amdgpu/version"),
        &format!("{AMDGPU_DKMS_VERSION}\n"),
    );
    for (card, render, slot) in [(0, 128, A), (1, 129, B), (2, 130, C), (3, 131, D)] {
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
            ("hwmon/hwmon3/temp3_label", "mem"),
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
        (
            "energy1_input",
            &advanced(5_000_000_000, 5_045_000_000, t).to_string(),
        ),
        ("power1_max", "190000000"),
        ("temp2_input", "58000"),
        ("fan1_input", "1200"),
    ] {
        write(&c.join("hwmon/hwmon5").join(name), &format!("{value}\n"));
    }
    let d = root.join("bus/pci/devices").join(D);
    write(&d.join("vendor"), "0x8086\n");
    write(&d.join("device"), "0x46a6\n");
    write(&d.join("uevent"), &format!("DRIVER=i915\nPCI_SLOT_NAME={D}\n"));
    write(&d.join("power/runtime_status"), "active\n");
    write(&root.join("class/drm/card3/gt_act_freq_mhz"), "1300\n");
}

/// A counter at `t` seconds that reads `at0` at 0 and `at1` at 1 s.
fn advanced(at0: u64, at1: u64, t: f64) -> u64 {
    at0 + ((at1 - at0) as f64 * t) as u64
}

const PROCFS_LINES: &str = "pos:\t0\nflags:\t02100002\nmnt_id:\t26\nino:\t1043\n";

/// The fdinfo body of client `id` at `t` seconds.
pub fn client(id: u32, t: f64) -> String {
    let pick = |t0: u64, t1: u64| advanced(t0, t1, t);
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
        501 => format!(
            "drm-driver:\ti915\ndrm-client-id:\t501\ndrm-pdev:\t{D}\n\
             drm-total-system0:\t65536 KiB\ndrm-resident-system0:\t65536 KiB\n\
             drm-total-stolen-system0:\t0\ndrm-engine-render:\t{} ns\n\
             drm-engine-copy:\t0 ns\ndrm-engine-video:\t{} ns\ndrm-engine-capacity-video:\t2\n\
             drm-engine-video-enhance:\t0 ns\n",
            pick(346_249, 200_346_249),
            pick(1_000_000_000, 1_600_000_000)
        ),
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
        2501 => vec![(4, "/dev/dri/renderD131", Some(501))],
        _ => unreachable!(),
    }
}

/// The processes.
pub const PIDS: [u32; 6] = [1201, 2402, 2301, 2302, 2401, 2501];

/// Each process's command line (NUL-separated as procfs writes it) and parent.
fn command(pid: u32) -> (&'static str, u32) {
    match pid {
        1201 => ("/usr/bin/gnome-shell", 1),
        2402 => ("sh\0-c\0sleep 100", 1201),
        2301 => ("blender\0-b\0scene.blend", 1),
        2302 => ("python3\0train.py", 1),
        2401 => ("ffmpeg\0-hwaccel\0vaapi\0-i\0in.mkv\0out.mp4", 1),
        2501 => ("mpv\0movie.mkv", 1),
        _ => unreachable!(),
    }
}

/// A process's `status`, `stat`, `cmdline` and `cgroup`, as procfs writes them.
fn process_files(dir: &Path, pid: u32, cmdline: &str, parent: u32, uid: u32) {
    let name = cmdline
        .split('\0')
        .next()
        .unwrap_or_default()
        .rsplit('/')
        .next()
        .unwrap_or_default();
    write(
        &dir.join("status"),
        &format!("Name:\t{name}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nNSpid:\t{pid}\n"),
    );
    write(
        &dir.join("stat"),
        &format!(
            "{pid} ({name}) S {parent} {pid} {pid} 0 -1 4194304 100 0 0 0 500 100 0 0 20 0 1 0 \
             {start} 1000000 25600 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n",
            start = 100 + pid,
        ),
    );
    write(&dir.join("cmdline"), &format!("{cmdline}\0"));
    write(
        &dir.join("cgroup"),
        "0::/user.slice/user-1000.slice/session-2.scope\n",
    );
}

/// The procfs tree at `t` seconds: the processes' `stat`, `status`, `cmdline`, fds and
/// fdinfo, and the machine's `stat`, `meminfo`, `loadavg` and `uptime`.
pub fn procfs(root: &Path, t: f64) {
    for pid in PIDS {
        let dir = root.join(pid.to_string());
        let uid = if pid == 2302 { 1001 } else { 1000 };
        let (cmdline, parent) = command(pid);
        process_files(&dir, pid, cmdline, parent, uid);
        for (fd, target, client_id) in fds(pid) {
            link(&dir.join("fd").join(fd.to_string()), target);
            let body = client_id.map_or_else(|| PROCFS_LINES.to_string(), |id| client(id, t));
            write(&dir.join("fdinfo").join(fd.to_string()), &body);
        }
    }
    write(&root.join("sys/kernel/pid_max"), "4194304\n");
    write(&root.join("sys/kernel/osrelease"), &format!("{KERNEL_RELEASE}\n"));
    write(
        &root.join("stat"),
        "cpu  1000 0 500 100000 0 0 0 0 0 0\nbtime 1764979200\n",
    );
    write(
        &root.join("meminfo"),
        "MemTotal:       65536000 kB\nMemFree:        30000000 kB\nMemAvailable:   40000000 kB\n\
         SwapTotal:       8000000 kB\nSwapFree:        8000000 kB\n",
    );
    write(&root.join("loadavg"), "1.50 1.20 1.00 2/500 3000\n");
    write(&root.join("uptime"), "86400.00 300000.00\n");
}

/// Advances the counters alone to `t` seconds (the clients' fdinfo and C's energy counter),
/// each file replaced whole: what a test does while a reader reads.
pub fn advance(sys: &Path, proc: &Path, t: f64) {
    for pid in PIDS {
        for (fd, _, client_id) in fds(pid) {
            if let Some(id) = client_id {
                write(&proc.join(format!("{pid}/fdinfo/{fd}")), &client(id, t));
            }
        }
    }
    write(
        &sys.join(format!("bus/pci/devices/{C}/hwmon/hwmon5/energy1_input")),
        &format!("{}\n", advanced(5_000_000_000, 5_045_000_000, t)),
    );
}

/// A crowded `/proc` for benchmarks: `processes` processes (PIDs from 1000) of 10 fds each;
/// every `processes / holders`-th holds 3 DRM fds (three clients) on one of the four GPUs of
/// [`sysfs`], the holders spread over the GPUs in turn (memory and static engine counters,
/// as a reader parses them).
pub fn crowd(proc: &Path, processes: u32, holders: u32) {
    let nodes = [
        ("renderD128", A, "amdgpu"),
        ("renderD129", B, "amdgpu"),
        ("renderD130", C, "xe"),
        ("renderD131", D, "i915"),
    ];
    let every = (processes / holders.max(1)).max(1);
    for pid in 1000..1000 + processes {
        let dir = proc.join(pid.to_string());
        process_files(&dir, pid, &format!("worker\0--id\0{pid}"), 1, 1000);
        let on_gpu = (pid - 1000) % every == 0 && (pid - 1000) / every < holders;
        for fd in 0..10u32 {
            let drm = on_gpu && fd >= 7;
            let (node, slot, driver) = nodes[((pid - 1000) / every) as usize % 4];
            let target = if drm {
                format!("/dev/dri/{node}")
            } else {
                "/dev/null".into()
            };
            link(&dir.join("fd").join(fd.to_string()), &target);
            if drm {
                let engines = if driver == "xe" {
                    format!("drm-cycles-rcs:\t{pid}000\ndrm-total-cycles-rcs:\t{pid}0000\n")
                } else {
                    format!("drm-engine-gfx:\t{pid}000000 ns\n")
                };
                write(
                    &dir.join("fdinfo").join(fd.to_string()),
                    &format!(
                        "{PROCFS_LINES}drm-driver:\t{driver}\ndrm-client-id:\t{pid}{fd}\n\
                         drm-pdev:\t{slot}\ndrm-resident-vram:\t1048576 KiB\n{engines}"
                    ),
                );
            }
        }
    }
}

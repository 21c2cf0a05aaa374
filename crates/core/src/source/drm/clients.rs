//! The DRM clients of the machine's processes, from `/proc/PID/fd` and `fdinfo`: which
//! processes hold a GPU, how busy each keeps each engine class, and the memory each holds
//! per region.
//!
//! A client (one `struct drm_file`) is counted once, keyed by device and client id, however
//! many fds or processes share it: its owner is the lowest PID holding it (not init), the
//! others are listed as sharers. Rates need two reads of the same client: nanosecond engines
//! over the time between the reads of that client's fd, xe's cycles over its GPU
//! timestamp's; a counter that goes back holds its larger value, so a rate is never negative.
//!
//! The sweep reads every fd of a process only when it is new or due for its slower revisit
//! ([`REVISIT_EVERY`] sweeps): a machine of a thousand processes without GPU work is not
//! read in full at every refresh, and a process holding the GPU has only its DRM fds'
//! fdinfo read between two listings of its fds (at once when one stops being a client).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::ErrorKind;
use std::path::Path;

use super::Files;
use super::fdinfo::{self, Fdinfo};
use crate::model::Engine;

/// Sweeps between two reads of the fds of a process that held no DRM fd.
pub const REVISIT_EVERY: u32 = 10;

/// The engine class of `driver`'s engine `name`.
pub fn engine_of(driver: &str, name: &str) -> Engine {
    match (driver, name) {
        (_, "gfx" | "render" | "rcs") => Engine::Graphics,
        (_, "compute" | "ccs") => Engine::Compute,
        (_, "dma" | "copy" | "bcs") => Engine::Copy,
        ("amdgpu", "dec" | "enc" | "enc_1" | "jpeg") | (_, "video" | "vcs") => Engine::Video,
        (_, "vpe" | "video-enhance" | "vecs") => Engine::VideoEnhance,
        _ => Engine::Other,
    }
}

/// A memory region, across drivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Region {
    /// The GPU's own memory (amdgpu `vram`, i915 `local0`, xe `vram0`, `vram1`).
    Vram,
    /// System memory the GPU maps (`gtt`, `system`, `system0`, amdgpu `cpu`, stolen).
    System,
}

impl Region {
    /// The region a driver's name means.
    pub fn of(name: &str) -> Self {
        if name.starts_with("vram") || name.starts_with("local") {
            Self::Vram
        } else {
            Self::System
        }
    }
}

/// What one process does on one GPU.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessUse {
    /// The percent of each engine class its clients kept busy since the last sweep; empty
    /// until a client has been read twice.
    pub engines: BTreeMap<Engine, f64>,
    /// Bytes resident per region.
    pub memory: BTreeMap<Region, u64>,
    /// Other processes that hold one of its clients (fork-inherited or passed fds).
    pub sharers: Vec<u32>,
    /// Whether one of its clients has been read twice: its rates are known (a client that
    /// names no engine, as amdgpu omits those at 0, is then at 0 %).
    pub rated: bool,
}

impl ProcessUse {
    /// The engines' percents summed, at most 100: the process's GPU %; `None` before a
    /// client of it has been read twice.
    pub fn gpu_percent(&self) -> Option<f64> {
        self.rated.then(|| self.engines.values().sum::<f64>().min(100.0))
    }
}

/// One sweep's result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sweep {
    /// Per (process, PCI slot of the GPU).
    pub processes: BTreeMap<(u32, String), ProcessUse>,
    /// Processes whose fds could not be read (another user's without CAP_SYS_PTRACE, a
    /// process made non-dumpable).
    pub hidden: usize,
}

/// A client's counters at one read.
#[derive(Debug, Clone, PartialEq)]
struct Counters {
    /// When its fd was read, nanoseconds of the reader's clock.
    at_ns: u64,
    engine_ns: BTreeMap<String, u64>,
    cycles: BTreeMap<String, u64>,
    total_cycles: BTreeMap<String, u64>,
}

/// One client seen in this sweep.
#[derive(Debug)]
struct Seen {
    info: Fdinfo,
    at_ns: u64,
    holders: Vec<u32>,
}

/// Which client: its device and id (or, without an id, the fd it was read through).
type ClientKey = (String, ClientId);

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum ClientId {
    Id(u64),
    Fd(u32, u32),
}

/// A process holding DRM fds.
#[derive(Debug)]
struct Held {
    fds: Vec<u32>,
    relist_at: u32,
}

/// What is kept between sweeps.
#[derive(Debug, Default)]
pub struct ClientTracker {
    /// Each client's counters at its last read.
    previous: HashMap<ClientKey, Counters>,
    /// Processes that held DRM fds at their last read: which fds, and the sweep at which to
    /// list all their fds again (between, only those fds' fdinfo is read).
    holders: HashMap<u32, Held>,
    /// Processes that held none, and the sweep at which to read them again.
    quiet: HashMap<u32, u32>,
    /// Processes whose fds could not be read (counted as hidden at every sweep), and the
    /// sweep at which to try again.
    refused: HashMap<u32, u32>,
    /// Kernel threads, whose fds cannot be read by a user and which hold no GPU: not
    /// hidden, not tried again.
    kernel: HashSet<u32>,
    sweeps: u32,
}

impl ClientTracker {
    /// Reads the clients of the processes under the procfs root; `now_ns` is the reader's
    /// monotonic clock, asked as each fd is read.
    pub fn sweep(&mut self, files: &dyn Files, now_ns: &mut dyn FnMut() -> u64) -> Sweep {
        self.sweeps = self.sweeps.wrapping_add(1);
        let mut sweep = Sweep::default();
        let Ok(entries) = files.list(Path::new("")) else {
            return sweep;
        };
        let mut pids: Vec<u32> = entries.iter().filter_map(|e| e.parse().ok()).collect();
        pids.sort_unstable();
        let alive: HashSet<u32> = pids.iter().copied().collect();
        self.holders.retain(|pid, _| alive.contains(pid));
        self.quiet.retain(|pid, _| alive.contains(pid));
        self.refused.retain(|pid, _| alive.contains(pid));
        self.kernel.retain(|pid| alive.contains(pid));
        let mut clients: BTreeMap<ClientKey, Seen> = BTreeMap::new();
        for pid in pids {
            if self.kernel.contains(&pid) {
                continue;
            }
            if let Some(&retry) = self.refused.get(&pid) {
                if retry != self.sweeps {
                    sweep.hidden += 1;
                    continue;
                }
                self.refused.remove(&pid);
            }
            // A holder's known DRM fds alone while they still are DRM clients; its whole fd
            // table at its relisting, or when one of them is not any more.
            if let Some(held) = self.holders.get(&pid).filter(|h| h.relist_at != self.sweeps) {
                match read_fds(files, pid, &held.fds, now_ns, &mut clients) {
                    Err(e) if e.kind() == ErrorKind::PermissionDenied => {
                        self.refuse(files, pid, &mut sweep);
                        continue;
                    }
                    Ok(read) if read.len() == held.fds.len() => continue,
                    _ => {}
                }
            }
            let due = match self.quiet.get(&pid) {
                Some(&next) => next == self.sweeps,
                None => true,
            };
            if !self.holders.contains_key(&pid) && !due {
                continue;
            }
            match read_process(files, pid, now_ns, &mut clients) {
                Err(e) if e.kind() == ErrorKind::PermissionDenied => self.refuse(files, pid, &mut sweep),
                Err(_) => {}
                Ok(None) => {
                    self.holders.remove(&pid);
                    let next = self.sweeps.wrapping_add(REVISIT_EVERY);
                    self.quiet.insert(pid, next);
                }
                Ok(Some(fds)) => {
                    let relist_at = self.sweeps.wrapping_add(REVISIT_EVERY);
                    self.holders.insert(pid, Held { fds, relist_at });
                    self.quiet.remove(&pid);
                }
            }
        }
        // Only the clients read in this sweep are kept: a closed client's counters go.
        let mut previous = HashMap::with_capacity(clients.len());
        for (key, seen) in clients {
            let before = self.previous.get(&key);
            let rates = before.map(|b| rates(&seen.info, seen.at_ns, b));
            let (owner, sharers) = owner_of(&seen.holders);
            let entry = sweep.processes.entry((owner, key.0.clone())).or_default();
            for sharer in sharers {
                if !entry.sharers.contains(&sharer) {
                    entry.sharers.push(sharer);
                }
            }
            for (region, bytes) in &seen.info.resident {
                let held = entry.memory.entry(Region::of(region)).or_default();
                *held = held.saturating_add(*bytes);
            }
            entry.rated |= rates.is_some();
            for (class, percent) in rates.into_iter().flatten() {
                let total = entry.engines.entry(class).or_default();
                *total = (*total + percent).min(100.0);
            }
            let counters = Counters {
                at_ns: seen.at_ns,
                engine_ns: seen.info.engine_ns,
                cycles: seen.info.cycles,
                total_cycles: seen.info.total_cycles,
            };
            let kept = match before {
                Some(b) => held(b, counters),
                None => counters,
            };
            previous.insert(key, kept);
        }
        self.previous = previous;
        sweep
    }
}

impl ClientTracker {
    /// Notes that `pid`'s fds could not be read: hidden, and tried again at its revisit, or
    /// left alone for good when it is a kernel thread.
    fn refuse(&mut self, files: &dyn Files, pid: u32, sweep: &mut Sweep) {
        self.holders.remove(&pid);
        self.quiet.remove(&pid);
        if is_kernel_thread(files, pid) {
            self.kernel.insert(pid);
        } else {
            sweep.hidden += 1;
            self.refused.insert(pid, self.sweeps.wrapping_add(REVISIT_EVERY));
        }
    }
}

/// The kernel's flag for its own threads in `/proc/PID/stat`'s ninth field.
const PF_KTHREAD: u64 = 0x0020_0000;

/// Whether `pid` is a kernel thread, by the flags of its `stat` (readable by anyone).
fn is_kernel_thread(files: &dyn Files, pid: u32) -> bool {
    let Ok(bytes) = files.read(&Path::new(&pid.to_string()).join("stat"), 1024) else {
        return false;
    };
    let text = String::from_utf8_lossy(&bytes);
    // After the name in parentheses (which may hold any character): state, then fields 4 to
    // 8, then the flags.
    text.rfind(')')
        .and_then(|end| text[end + 1..].split_whitespace().nth(6)?.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_KTHREAD != 0)
}

/// Reads every fd of process `pid` and the DRM clients among them into `clients`: the fds
/// that are DRM clients, `None` when it holds no DRM node (one whose fdinfo names no client,
/// a driver without usage statistics, still makes it a holder).
fn read_process(
    files: &dyn Files,
    pid: u32,
    now_ns: &mut dyn FnMut() -> u64,
    clients: &mut BTreeMap<ClientKey, Seen>,
) -> std::io::Result<Option<Vec<u32>>> {
    let dir = Path::new(&pid.to_string()).join("fd");
    let mut drm = Vec::new();
    for fd in files.list(&dir)?.iter().filter_map(|f| f.parse::<u32>().ok()) {
        if files
            .link(&dir.join(fd.to_string()))
            .is_ok_and(|target| is_drm_node(&target))
        {
            drm.push(fd);
        }
    }
    if drm.is_empty() {
        return Ok(None);
    }
    drm.sort_unstable();
    read_fds(files, pid, &drm, now_ns, clients).map(Some)
}

/// Reads the fdinfo of process `pid`'s `fds` into `clients`; those that are DRM clients.
fn read_fds(
    files: &dyn Files,
    pid: u32,
    fds: &[u32],
    now_ns: &mut dyn FnMut() -> u64,
    clients: &mut BTreeMap<ClientKey, Seen>,
) -> std::io::Result<Vec<u32>> {
    let dir = Path::new(&pid.to_string()).join("fdinfo");
    let mut read = Vec::with_capacity(fds.len());
    for &fd in fds {
        let text = match files.read(&dir.join(fd.to_string()), fdinfo::MAX_BYTES) {
            Ok(text) => text,
            Err(e) if e.kind() == ErrorKind::PermissionDenied => return Err(e),
            Err(_) => continue,
        };
        let at_ns = now_ns();
        let info = Fdinfo::parse(&text);
        let (Some(_), Some(pdev)) = (&info.driver, info.pdev.clone()) else {
            continue;
        };
        read.push(fd);
        let id = info.client_id.map_or(ClientId::Fd(pid, fd), ClientId::Id);
        let seen = clients.entry((pdev, id)).or_insert(Seen {
            info,
            at_ns,
            holders: Vec::new(),
        });
        if !seen.holders.contains(&pid) {
            seen.holders.push(pid);
        }
    }
    Ok(read)
}

/// Whether an fd's link names a DRM node (`/dev/dri/card*`, `/dev/dri/renderD*`).
fn is_drm_node(target: &Path) -> bool {
    target
        .to_str()
        .and_then(|t| t.strip_prefix("/dev/dri/"))
        .is_some_and(|node| node.starts_with("card") || node.starts_with("renderD"))
}

/// The owner of a client (the lowest PID but init's) and the others holding it.
fn owner_of(holders: &[u32]) -> (u32, Vec<u32>) {
    let mut sorted = holders.to_vec();
    sorted.sort_unstable();
    let owner = sorted.iter().copied().find(|pid| *pid != 1).unwrap_or(sorted[0]);
    (owner, sorted.into_iter().filter(|pid| *pid != owner).collect())
}

/// A client's percent per engine class from its read `now` (at `at_ns`) and its counters
/// `before`.
fn rates(now: &Fdinfo, at_ns: u64, before: &Counters) -> BTreeMap<Engine, f64> {
    let driver = now.driver.as_deref().unwrap_or("");
    let capacity = |class: &str| now.capacity.get(class).copied().unwrap_or(1) as f64;
    let mut out: BTreeMap<Engine, f64> = BTreeMap::new();
    let mut add = |name: &str, percent: f64| {
        let total = out.entry(engine_of(driver, name)).or_default();
        *total = (*total + percent.clamp(0.0, 100.0)).min(100.0);
    };
    let elapsed_ns = at_ns.saturating_sub(before.at_ns);
    if elapsed_ns > 0 {
        for (name, busy) in &now.engine_ns {
            // A class absent before was at 0 (amdgpu prints none whose total is 0).
            let was = before.engine_ns.get(name).copied().unwrap_or(0);
            let delta = busy.saturating_sub(was) as f64;
            add(name, 100.0 * delta / (elapsed_ns as f64 * capacity(name)));
        }
    }
    // xe: cycles over the GPU timestamp of the same two reads, in the GPU's clock.
    let timestamp = |totals: &BTreeMap<String, u64>, name: &str| {
        totals.get(name).or_else(|| totals.values().max()).copied()
    };
    for (name, cycles) in &now.cycles {
        let (Some(was), Some(t1), Some(t0)) = (
            before.cycles.get(name),
            timestamp(&now.total_cycles, name),
            timestamp(&before.total_cycles, name),
        ) else {
            continue;
        };
        let ticks = t1.saturating_sub(t0);
        if ticks > 0 {
            add(
                name,
                100.0 * cycles.saturating_sub(*was) as f64 / (ticks as f64 * capacity(name)),
            );
        }
    }
    out
}

/// The counters to keep: each at least its previous value, so a counter that went back
/// counts from its larger value until it passes it.
fn held(before: &Counters, mut now: Counters) -> Counters {
    for (map, old) in [
        (&mut now.engine_ns, &before.engine_ns),
        (&mut now.cycles, &before.cycles),
        (&mut now.total_cycles, &before.total_cycles),
    ] {
        for (name, value) in map.iter_mut() {
            if let Some(previous) = old.get(name) {
                *value = (*value).max(*previous);
            }
        }
    }
    now
}

//! The NVML C ABI exports: argument checks, two-call size protocols, faults, tracing.
//!
//! Every export runs inside [`guarded`], so no panic crosses the FFI boundary, every call is
//! counted, and nothing is ever written to stdout. Values come from [`crate::engine`].
//! Symbol groups: A (gputop through nvml-wrapper), B (nvitop) and
//! C (nvtop), plus the legacy process and init symbols of group D so that fallbacks can be
//! exercised (clients that probe `_v3` first never reach them).

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong, c_void};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use nvml_wrapper_sys::bindings::{
    nvmlBAR1Memory_t, nvmlDevice_t, nvmlEventData_t, nvmlEventSet_t, nvmlFieldValue_t, nvmlMemory_t,
    nvmlMemory_v2_t, nvmlPciInfo_t, nvmlProcessInfo_v1_t, nvmlProcessInfo_v2_t,
    nvmlProcessUtilizationInfo_v1_t, nvmlProcessUtilizationSample_t, nvmlProcessesUtilizationInfo_t,
    nvmlSample_t, nvmlTemperature_t, nvmlUtilization_t,
};

use crate::codes::*;
use crate::engine::{LiveProcess, ProcessSample, Sim, TimeBase, wall_now_us};
use crate::scenario::{Caller, ClockMode, ComputeMode, MigSetting, ProcessType, Scenario};

type Ret = c_uint;

const MEMORY_V2_VERSION: c_uint = 0x0200_0028;
const TEMPERATURE_V1_VERSION: c_uint = 0x0100_000C;
const NO_INSTANCE: c_uint = 0xFFFF_FFFF;
const VALUE_NOT_AVAILABLE: c_ulonglong = u64::MAX;

// Layout checks against the sizes in nvml.h.
const _: () = assert!(size_of::<nvmlMemory_v2_t>() == 40);
const _: () = assert!(size_of::<nvmlProcessInfo_v2_t>() == 24);
const _: () = assert!(size_of::<nvmlProcessInfo_v1_t>() == 16);
const _: () = assert!(size_of::<nvmlProcessUtilizationSample_t>() == 32);
const _: () = assert!(size_of::<nvmlProcessUtilizationInfo_v1_t>() == 40);
const _: () = assert!(size_of::<nvmlProcessesUtilizationInfo_t>() == 24);
const _: () = assert!(size_of::<nvmlSample_t>() == 16);
const _: () = assert!(size_of::<nvmlPciInfo_t>() == 68);
const _: () = assert!(size_of::<nvmlFieldValue_t>() == 40);
const _: () = assert!(size_of::<nvmlEventData_t>() == 32);

/// A loaded scenario and its clock.
struct Loaded {
    sim: Sim,
    time: TimeBase,
    manual: AtomicBool,
    /// Manual clock: scenario time in µs.
    manual_us: AtomicU64,
    trace: Option<Mutex<BufWriter<File>>>,
    /// Exports this driver lacks (its version's, and the scenario's `missing_symbols`).
    missing: Vec<String>,
    /// Bytes per entry the `_v3` process lists write (32 on 535.43.02 to 535.86.x).
    v3_entry_bytes: usize,
    /// Devices whose last process-list call was a size query (for `race_grow_between_calls`).
    size_queried: Vec<AtomicBool>,
}

impl Loaded {
    fn now(&self) -> f64 {
        if self.manual.load(Ordering::Relaxed) {
            self.manual_us.load(Ordering::Relaxed) as f64 / 1e6
        } else {
            self.time.scenario_t(wall_now_us())
        }
    }
}

static INIT_COUNT: AtomicU32 = AtomicU32::new(0);
static STATE: RwLock<Option<Arc<Loaded>>> = RwLock::new(None);
static PRELOAD: Mutex<Option<PathBuf>> = Mutex::new(None);
static CALLS: RwLock<Option<HashMap<&'static str, AtomicU64>>> = RwLock::new(None);

fn state() -> Option<Arc<Loaded>> {
    STATE.read().unwrap_or_else(|e| e.into_inner()).clone()
}

fn count_call(sym: &'static str) {
    {
        let calls = CALLS.read().unwrap_or_else(|e| e.into_inner());
        if let Some(counter) = calls.as_ref().and_then(|m| m.get(sym)) {
            counter.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    let mut calls = CALLS.write().unwrap_or_else(|e| e.into_inner());
    calls
        .get_or_insert_with(HashMap::new)
        .entry(sym)
        .or_insert_with(|| AtomicU64::new(0))
        .fetch_add(1, Ordering::Relaxed);
}

fn trace(loaded: Option<&Loaded>, sym: &str, gpu: Option<usize>, ret: Ret) {
    let Some(loaded) = loaded else { return };
    let Some(trace) = &loaded.trace else { return };
    let t_ms = wall_now_us().saturating_sub(loaded.time.wall_origin_us) / 1000;
    let gpu = gpu.map_or_else(|| "null".to_string(), |g| g.to_string());
    let mut w = trace.lock().unwrap_or_else(|e| e.into_inner());
    let _ = writeln!(w, r#"{{"t_ms":{t_ms},"sym":"{sym}","gpu":{gpu},"ret":{ret}}}"#);
    let _ = w.flush();
}

/// Runs an export body: counts it, catches panics (→ UNKNOWN) and traces the result.
fn guarded(sym: &'static str, gpu: Option<usize>, body: impl FnOnce() -> Result<(), Ret>) -> Ret {
    count_call(sym);
    let ret = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => UNKNOWN,
    };
    trace(state().as_deref(), sym, gpu, ret);
    ret
}

/// An export that needs an initialised library.
fn with_sim(sym: &'static str, body: impl FnOnce(&Loaded) -> Result<(), Ret>) -> Ret {
    guarded(sym, None, || {
        let loaded = initialised()?;
        check_symbol(&loaded, sym)?;
        body(&loaded)
    })
}

/// Symbols the scenario removed (old drivers) or rigged to panic (FFI guard tests).
fn check_symbol(loaded: &Loaded, sym: &str) -> Result<(), Ret> {
    if loaded.missing.iter().any(|m| m == sym) {
        return Err(FUNCTION_NOT_FOUND);
    }
    if loaded.sim.scenario.sim.panic_in.iter().any(|p| p == sym) {
        // An unwinding panic like any other, without the hook's message on stderr.
        std::panic::resume_unwind(Box::new(format!("nvml-sim: injected panic in {sym}")));
    }
    Ok(())
}

fn initialised() -> Result<Arc<Loaded>, Ret> {
    if INIT_COUNT.load(Ordering::SeqCst) == 0 {
        return Err(UNINITIALIZED);
    }
    state().ok_or(UNINITIALIZED)
}

fn device_index(loaded: &Loaded, device: nvmlDevice_t) -> Result<usize, Ret> {
    let raw = device as usize;
    if mig_index(loaded, device).is_some() {
        // What real drivers answer for most queries on a MIG device (utilization, ...).
        return Err(NOT_SUPPORTED);
    }
    if raw == 0 || raw > loaded.sim.gpu_count() {
        return Err(INVALID_ARGUMENT);
    }
    Ok(raw - 1)
}

/// An export that takes a device handle. `field` names the logical field for faults.
fn with_device(
    sym: &'static str,
    device: nvmlDevice_t,
    field: &'static str,
    body: impl FnOnce(&Loaded, usize, f64) -> Result<(), Ret>,
) -> Ret {
    let gpu = state().and_then(|l| device_index(&l, device).ok());
    guarded(sym, gpu, || {
        let loaded = initialised()?;
        check_symbol(&loaded, sym)?;
        let gpu = device_index(&loaded, device)?;
        let t = loaded.now();
        if let Some(seconds) = loaded.sim.hang(gpu, field, t) {
            std::thread::sleep(Duration::from_secs_f64(seconds));
        }
        if let Some(code) = loaded.sim.fault(gpu, field, t) {
            return Err(code);
        }
        let latency = &loaded.sim.scenario.sim.latency_us;
        let delay = if field == "processes" && latency.processes > 0 {
            latency.processes
        } else {
            latency.default
        };
        if delay > 0 {
            std::thread::sleep(Duration::from_micros(delay));
        }
        body(&loaded, gpu, t)
    })
}

/// MIG device handles: above every GPU handle, GPU and MIG index packed in.
const MIG_HANDLE_BASE: usize = 0x1000_0000;

/// How many MIG devices a MIG-enabled GPU may hold (A100/H100: 7).
const MAX_MIG_DEVICES: c_uint = 7;

fn mig_handle(gpu: usize, mig: usize) -> nvmlDevice_t {
    (MIG_HANDLE_BASE + gpu * 0x100 + mig) as nvmlDevice_t
}

/// The GPU and MIG index of a MIG device handle; `None` for anything else.
fn mig_index(loaded: &Loaded, device: nvmlDevice_t) -> Option<(usize, usize)> {
    let raw = (device as usize).checked_sub(MIG_HANDLE_BASE)?;
    let (gpu, mig) = (raw >> 8, raw & 0xff);
    (gpu < loaded.sim.gpu_count() && mig < loaded.sim.gpu(gpu).mig_devices.len()).then_some((gpu, mig))
}

/// An export that answers for a MIG device handle with `mig_body`, and for a GPU handle as
/// [`with_device`] does with `gpu_body`.
fn with_device_or_mig(
    sym: &'static str,
    device: nvmlDevice_t,
    field: &'static str,
    gpu_body: impl FnOnce(&Loaded, usize, f64) -> Result<(), Ret>,
    mig_body: impl FnOnce(&Loaded, usize, usize, f64) -> Result<(), Ret>,
) -> Ret {
    let Some((gpu, mig)) = state().and_then(|l| mig_index(&l, device)) else {
        return with_device(sym, device, field, gpu_body);
    };
    guarded(sym, Some(gpu), || {
        let loaded = initialised()?;
        check_symbol(&loaded, sym)?;
        let t = loaded.now();
        if let Some(code) = loaded.sim.fault(gpu, field, t) {
            return Err(code);
        }
        mig_body(&loaded, gpu, mig, t)
    })
}

unsafe fn out<'a, T>(p: *mut T) -> Result<&'a mut T, Ret> {
    // SAFETY: the caller passes a pointer valid for writes, or NULL (rejected here).
    unsafe { p.as_mut() }.ok_or(INVALID_ARGUMENT)
}

unsafe fn write_str(buf: *mut c_char, length: c_uint, text: &str) -> Result<(), Ret> {
    if buf.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    if text.len() + 1 > length as usize {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: `buf` holds at least `length` bytes, checked above to fit text and NUL.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buf, text.len());
        *buf.add(text.len()) = 0;
    }
    Ok(())
}

fn fixed_str<const N: usize>(text: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    for (dst, src) in out.iter_mut().zip(text.bytes().take(N - 1)) {
        *dst = src as c_char;
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Loading

fn library_dir() -> Option<PathBuf> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let anchor = nvmlInit_v2 as *const c_void;
    // SAFETY: dladdr only reads the address and fills `info`.
    if unsafe { libc::dladdr(anchor, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader.
    let file = unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned();
    Path::new(&file).parent().map(Path::to_path_buf)
}

/// Finds and parses the scenario (the lookup order of README.md).
fn load_scenario() -> Result<Scenario, String> {
    let env = |k: &str| std::env::var(k).ok();
    let preload = PRELOAD.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(path) = preload {
        return read_scenario(&path, &env);
    }
    if let Some(spec) = env("GPUTOP_SIM_SCENARIO").filter(|s| !s.is_empty()) {
        if let Some(name) = spec.strip_prefix("builtin:") {
            let text = crate::builtin(name).ok_or_else(|| format!("no built-in scenario named '{name}'"))?;
            return Scenario::parse(text, &spec, &env).map_err(|e| e.0);
        }
        return read_scenario(Path::new(&spec), &env);
    }
    if let Some(beside) = library_dir()
        .map(|d| d.join("gputop-sim.toml"))
        .filter(|p| p.exists())
    {
        return read_scenario(&beside, &env);
    }
    Err("no scenario: set GPUTOP_SIM_SCENARIO to a scenario file or builtin:<name>".into())
}

/// Largest scenario file read: a capture of a busy 8-GPU machine is well under 1 MiB.
const SCENARIO_MAX_BYTES: u64 = 16 << 20;

fn read_scenario(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Scenario, String> {
    use std::io::Read;
    let cannot = |why: String| format!("cannot read scenario {}: {why}", path.display());
    let file = std::fs::File::open(path).map_err(|e| cannot(e.to_string()))?;
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Err(cannot("not a regular file".into()));
    }
    let mut text = String::new();
    file.take(SCENARIO_MAX_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| cannot(e.to_string()))?;
    if text.len() as u64 > SCENARIO_MAX_BYTES {
        return Err(cannot(format!("larger than {} MiB", SCENARIO_MAX_BYTES >> 20)));
    }
    Scenario::parse(&text, &path.display().to_string(), env).map_err(|e| e.0)
}

fn build_loaded(scenario: Scenario) -> Loaded {
    let env_clock = std::env::var("GPUTOP_SIM_CLOCK").ok();
    let manual = match env_clock.as_deref() {
        Some("manual") => true,
        Some("wall") => false,
        _ => scenario.clock.mode == ClockMode::Manual,
    };
    let start = std::env::var("GPUTOP_SIM_TIME_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(scenario.clock.start, |ms| ms as f64 / 1000.0);
    let speed = if manual { 1.0 } else { scenario.clock.speed };
    let trace = std::env::var_os("GPUTOP_SIM_TRACE")
        .and_then(|path| OpenOptions::new().create(true).append(true).open(path).ok())
        .map(|f| Mutex::new(BufWriter::new(f)));
    let gpus = scenario.gpu.len();
    Loaded {
        missing: crate::profile::absent_exports(&scenario.system),
        v3_entry_bytes: crate::profile::v3_entry_bytes(&scenario.system),
        time: TimeBase::with_sample_clock(start, speed, scenario.sim.sample_clock),
        sim: Sim::new(scenario),
        manual: AtomicBool::new(manual),
        manual_us: AtomicU64::new((start * 1e6) as u64),
        trace,
        size_queried: (0..gpus).map(|_| AtomicBool::new(false)).collect(),
    }
}

fn init(sym: &'static str) -> Ret {
    guarded(sym, None, || {
        let mut slot = STATE.write().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            match load_scenario() {
                Ok(scenario) => *slot = Some(Arc::new(build_loaded(scenario))),
                Err(message) => {
                    eprintln!("nvml-sim: {message}");
                    return Err(DRIVER_NOT_LOADED);
                }
            }
        }
        // A slow init can end in failure too: the delay comes first.
        if let Some(delay) = slot.as_ref().map(|l| l.sim.scenario.sim.init_delay_ms) {
            std::thread::sleep(Duration::from_millis(delay));
        }
        if let Some(code) = slot.as_ref().and_then(|l| l.sim.scenario.init_error()) {
            return Err(code);
        }
        INIT_COUNT.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Lifecycle and system

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlInit_v2() -> Ret {
    init("nvmlInit_v2")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlInit() -> Ret {
    init("nvmlInit")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> Ret {
    init("nvmlInitWithFlags")
}

/// Decrements the init count. The scenario is kept: clients race shutdown with queries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlShutdown() -> Ret {
    guarded("nvmlShutdown", None, || {
        INIT_COUNT
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .map(|_| ())
            .map_err(|_| UNINITIALIZED)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlErrorString(result: Ret) -> *const c_char {
    static MESSAGES: std::sync::OnceLock<Vec<(Ret, std::ffi::CString)>> = std::sync::OnceLock::new();
    let messages = MESSAGES.get_or_init(|| {
        TABLE
            .iter()
            .map(|(code, _, text)| (*code, std::ffi::CString::new(*text).unwrap_or_default()))
            .collect()
    });
    messages
        .iter()
        .find(|(code, _)| *code == result)
        .map_or(c"Unknown Error".as_ptr(), |(_, text)| text.as_ptr())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> Ret {
    with_sim("nvmlSystemGetDriverVersion", |l| unsafe {
        write_str(version, length, &l.sim.scenario.system.driver_version)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> Ret {
    with_sim("nvmlSystemGetNVMLVersion", |l| unsafe {
        write_str(version, length, &l.sim.scenario.system.nvml_version)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) -> Ret {
    with_sim("nvmlSystemGetCudaDriverVersion", |l| {
        *unsafe { out(version) }? = l.sim.scenario.system.cuda_driver_version;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> Ret {
    with_sim("nvmlSystemGetCudaDriverVersion_v2", |l| {
        *unsafe { out(version) }? = l.sim.scenario.system.cuda_driver_version;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetProcessName(pid: c_uint, name: *mut c_char, length: c_uint) -> Ret {
    with_sim("nvmlSystemGetProcessName", |l| {
        let scripted = l.sim.find_process(pid, l.now()).and_then(|p| p.name.clone());
        let comm = || {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .ok()
                .map(|s| s.trim_end().to_string())
        };
        let text = scripted.or_else(comm).ok_or(NOT_FOUND)?;
        unsafe { write_str(name, length, &text) }
    })
}

// ---------------------------------------------------------------------------------------------
// Enumeration and identity

fn get_count(sym: &'static str, count: *mut c_uint) -> Ret {
    with_sim(sym, |l| {
        *unsafe { out(count) }? = l.sim.gpu_count() as c_uint;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> Ret {
    get_count("nvmlDeviceGetCount_v2", count)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount(count: *mut c_uint) -> Ret {
    get_count("nvmlDeviceGetCount", count)
}

fn handle_by_index(sym: &'static str, index: c_uint, device: *mut nvmlDevice_t) -> Ret {
    guarded(sym, Some(index as usize), || {
        let l = initialised()?;
        let index = index as usize;
        if index >= l.sim.gpu_count() {
            return Err(INVALID_ARGUMENT);
        }
        if let Some(code) = l.sim.fault(index, "handle", l.now()) {
            return Err(code);
        }
        *unsafe { out(device) }? = (index + 1) as nvmlDevice_t;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut nvmlDevice_t) -> Ret {
    handle_by_index("nvmlDeviceGetHandleByIndex_v2", index, device)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(index: c_uint, device: *mut nvmlDevice_t) -> Ret {
    handle_by_index("nvmlDeviceGetHandleByIndex", index, device)
}

fn handle_by(
    sym: &'static str,
    key: *const c_char,
    device: *mut nvmlDevice_t,
    matches: impl Fn(&Sim, usize, &str) -> bool,
) -> Ret {
    with_sim(sym, |l| {
        if key.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: the caller passes a NUL-terminated string.
        let key = unsafe { CStr::from_ptr(key) }
            .to_str()
            .map_err(|_| INVALID_ARGUMENT)?;
        let index = (0..l.sim.gpu_count())
            .find(|&i| matches(&l.sim, i, key))
            .ok_or(NOT_FOUND)?;
        if l.sim.is_lost(index, l.now()) {
            return Err(GPU_IS_LOST);
        }
        *unsafe { out(device) }? = (index + 1) as nvmlDevice_t;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut nvmlDevice_t) -> Ret {
    handle_by("nvmlDeviceGetHandleByUUID", uuid, device, |s, i, k| {
        s.gpu(i).uuid == k
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus_id: *const c_char,
    device: *mut nvmlDevice_t,
) -> Ret {
    handle_by("nvmlDeviceGetHandleByPciBusId_v2", bus_id, device, |s, i, k| {
        pci_bus_ids(s, i).iter().any(|id| id.eq_ignore_ascii_case(k))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleBySerial(
    serial: *const c_char,
    device: *mut nvmlDevice_t,
) -> Ret {
    handle_by("nvmlDeviceGetHandleBySerial", serial, device, |s, i, k| {
        s.gpu(i).serial == k
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: nvmlDevice_t, index: *mut c_uint) -> Ret {
    with_device("nvmlDeviceGetIndex", device, "handle", |_, gpu, _| {
        *unsafe { out(index) }? = gpu as c_uint;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(device: nvmlDevice_t, name: *mut c_char, length: c_uint) -> Ret {
    with_device_or_mig(
        "nvmlDeviceGetName",
        device,
        "name",
        |l, gpu, _| unsafe { write_str(name, length, &l.sim.gpu(gpu).name) },
        |l, gpu, mig, _| {
            let g = l.sim.gpu(gpu);
            // As real drivers name MIG devices: the GPU's name, "MIG", the profile.
            let text = format!("{} MIG {}", g.name, g.mig_devices[mig].profile);
            unsafe { write_str(name, length, &text) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(device: nvmlDevice_t, uuid: *mut c_char, length: c_uint) -> Ret {
    with_device_or_mig(
        "nvmlDeviceGetUUID",
        device,
        "uuid",
        |l, gpu, _| unsafe { write_str(uuid, length, &l.sim.gpu(gpu).uuid) },
        |l, gpu, mig, _| unsafe { write_str(uuid, length, &l.sim.gpu(gpu).mig_devices[mig].uuid) },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSerial(
    device: nvmlDevice_t,
    serial: *mut c_char,
    length: c_uint,
) -> Ret {
    with_device("nvmlDeviceGetSerial", device, "serial", |l, gpu, _| unsafe {
        write_str(serial, length, &l.sim.gpu(gpu).serial)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetBrand(device: nvmlDevice_t, brand: *mut c_uint) -> Ret {
    with_device("nvmlDeviceGetBrand", device, "name", |l, gpu, _| {
        *unsafe { out(brand) }? = l.sim.gpu(gpu).brand;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetArchitecture(device: nvmlDevice_t, arch: *mut c_uint) -> Ret {
    with_device("nvmlDeviceGetArchitecture", device, "name", |l, gpu, _| {
        *unsafe { out(arch) }? = l.sim.gpu(gpu).architecture;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: nvmlDevice_t,
    major: *mut c_int,
    minor: *mut c_int,
) -> Ret {
    with_device(
        "nvmlDeviceGetCudaComputeCapability",
        device,
        "name",
        |l, gpu, _| {
            let [ma, mi] = l.sim.gpu(gpu).cuda_capability;
            *unsafe { out(major) }? = ma;
            *unsafe { out(minor) }? = mi;
            Ok(())
        },
    )
}

/// The device's bus id in the 8-digit and the legacy 4-digit domain forms.
fn pci_bus_ids(sim: &Sim, gpu: usize) -> [String; 2] {
    let pci = &sim.gpu(gpu).pci;
    let bus = pci.bus.unwrap_or(gpu as u32 + 1);
    [
        format!("{:08X}:{:02X}:{:02X}.0", pci.domain, bus, pci.device),
        format!("{:04X}:{:02X}:{:02X}.0", pci.domain, bus, pci.device),
    ]
}

fn pci_info(sym: &'static str, device: nvmlDevice_t, pci: *mut nvmlPciInfo_t) -> Ret {
    with_device(sym, device, "pci", |l, gpu, _| {
        let p = &l.sim.gpu(gpu).pci;
        let [bus_id, legacy] = pci_bus_ids(&l.sim, gpu);
        *unsafe { out(pci) }? = nvmlPciInfo_t {
            busIdLegacy: fixed_str(&legacy),
            domain: p.domain,
            bus: p.bus.unwrap_or(gpu as u32 + 1),
            device: p.device,
            pciDeviceId: (p.device_id << 16) | 0x10DE,
            pciSubSystemId: p.subsystem_id,
            busId: fixed_str(&bus_id),
        };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(device: nvmlDevice_t, pci: *mut nvmlPciInfo_t) -> Ret {
    pci_info("nvmlDeviceGetPciInfo_v3", device, pci)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v2(device: nvmlDevice_t, pci: *mut nvmlPciInfo_t) -> Ret {
    pci_info("nvmlDeviceGetPciInfo_v2", device, pci)
}

// ---------------------------------------------------------------------------------------------
// Memory and utilisation

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_v2_t,
) -> Ret {
    let write = |l: &Loaded, m: crate::engine::MemoryState| {
        let memory = unsafe { out(memory) }?;
        if memory.version != MEMORY_V2_VERSION && !l.sim.scenario.system.lenient_struct_versions {
            return Err(FUNCTION_NOT_FOUND);
        }
        memory.total = m.total;
        memory.reserved = m.reserved;
        memory.used = m.used;
        memory.free = m.free;
        Ok(())
    };
    with_device_or_mig(
        "nvmlDeviceGetMemoryInfo_v2",
        device,
        "memory",
        |l, gpu, t| {
            check_mig_privileges(l, gpu)?;
            write(l, l.sim.memory(gpu, t)?)
        },
        |l, gpu, mig, t| write(l, l.sim.mig_memory(gpu, mig, t)),
    )
}

/// v1: `used` includes the reserved part, as real NVML reports it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(device: nvmlDevice_t, memory: *mut nvmlMemory_t) -> Ret {
    let write = |m: crate::engine::MemoryState| {
        *unsafe { out(memory) }? = nvmlMemory_t {
            total: m.total,
            free: m.free,
            used: m.used + m.reserved,
        };
        Ok(())
    };
    with_device_or_mig(
        "nvmlDeviceGetMemoryInfo",
        device,
        "memory",
        |l, gpu, t| {
            check_mig_privileges(l, gpu)?;
            write(l.sim.memory(gpu, t)?)
        },
        |l, gpu, mig, t| write(l.sim.mig_memory(gpu, mig, t)),
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetBAR1MemoryInfo(
    device: nvmlDevice_t,
    bar1: *mut nvmlBAR1Memory_t,
) -> Ret {
    with_device("nvmlDeviceGetBAR1MemoryInfo", device, "bar1", |l, gpu, _| {
        let g = l.sim.gpu(gpu);
        let used = g.bar1_used.min(g.bar1_total);
        *unsafe { out(bar1) }? = nvmlBAR1Memory_t {
            bar1Total: g.bar1_total,
            bar1Free: g.bar1_total - used,
            bar1Used: used,
        };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    util: *mut nvmlUtilization_t,
) -> Ret {
    with_device(
        "nvmlDeviceGetUtilizationRates",
        device,
        "utilization",
        |l, gpu, t| {
            if !l.sim.utilization_supported(gpu) {
                return Err(NOT_SUPPORTED);
            }
            let d = &l.sim.gpu(gpu).dynamic;
            let t = l.sim.latest_sample_tick(t);
            let value = nvmlUtilization_t {
                gpu: l.sim.percent(gpu, &d.utilization_gpu, "utilization_gpu", t)?,
                memory: l
                    .sim
                    .percent(gpu, &d.utilization_memory, "utilization_memory", t)?,
            };
            *unsafe { out(util) }? = value;
            Ok(())
        },
    )
}

fn codec_utilization(
    sym: &'static str,
    device: nvmlDevice_t,
    field: &'static str,
    util: *mut c_uint,
    period_us: *mut c_uint,
) -> Ret {
    with_device(sym, device, field, |l, gpu, t| {
        let d = &l.sim.gpu(gpu).dynamic;
        let expr = if field == "encoder" {
            &d.encoder
        } else {
            &d.decoder
        };
        let value = l.sim.percent(gpu, expr, field, t)?;
        *unsafe { out(util) }? = value;
        *unsafe { out(period_us) }? = (l.sim.scenario.sim.samples_period_ms * 1000) as c_uint;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEncoderUtilization(
    device: nvmlDevice_t,
    util: *mut c_uint,
    period_us: *mut c_uint,
) -> Ret {
    codec_utilization(
        "nvmlDeviceGetEncoderUtilization",
        device,
        "encoder",
        util,
        period_us,
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDecoderUtilization(
    device: nvmlDevice_t,
    util: *mut c_uint,
    period_us: *mut c_uint,
) -> Ret {
    codec_utilization(
        "nvmlDeviceGetDecoderUtilization",
        device,
        "decoder",
        util,
        period_us,
    )
}

/// The driver's sample buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSamples(
    device: nvmlDevice_t,
    sample_type: c_uint,
    last_seen: c_ulonglong,
    value_type: *mut c_uint,
    count: *mut c_uint,
    samples: *mut nvmlSample_t,
) -> Ret {
    with_device("nvmlDeviceGetSamples", device, "samples", |l, gpu, t| {
        // A metric the driver cannot read has no samples either.
        if let Some(code) =
            crate::engine::sample_field(sample_type).and_then(|field| l.sim.fault(gpu, field, t))
        {
            return Err(code);
        }
        let count = unsafe { out(count) }?;
        let available = l.sim.samples(gpu, sample_type, t, &l.time, last_seen)?;
        if samples.is_null() {
            *count = available.len() as c_uint;
            return Ok(());
        }
        if *count == 0 {
            return Err(INVALID_ARGUMENT);
        }
        if available.is_empty() {
            return Err(NOT_FOUND);
        }
        let take = available.len().min(*count as usize);
        let newest = &available[available.len() - take..];
        for (i, (stamp, value)) in newest.iter().enumerate() {
            let mut sample: nvmlSample_t = unsafe { std::mem::zeroed() };
            sample.timeStamp = *stamp;
            sample.sampleValue.uiVal = *value;
            // SAFETY: the caller's buffer holds `*count` >= `take` samples.
            unsafe { samples.add(i).write(sample) };
        }
        *count = take as c_uint;
        if !value_type.is_null() {
            // SAFETY: checked non-null; NVML_VALUE_TYPE_UNSIGNED_INT.
            unsafe { *value_type = 1 };
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Thermal, power, clocks

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: nvmlDevice_t,
    sensor: c_uint,
    temp: *mut c_uint,
) -> Ret {
    with_device("nvmlDeviceGetTemperature", device, "temperature", |l, gpu, t| {
        if sensor != 0 {
            return Err(INVALID_ARGUMENT);
        }
        let value = l
            .sim
            .count(gpu, &l.sim.gpu(gpu).dynamic.temperature, "temperature", t)?;
        *unsafe { out(temp) }? = value;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperatureV(
    device: nvmlDevice_t,
    temp: *mut nvmlTemperature_t,
) -> Ret {
    with_device("nvmlDeviceGetTemperatureV", device, "temperature", |l, gpu, t| {
        let temp = unsafe { out(temp) }?;
        if temp.version != TEMPERATURE_V1_VERSION {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        if temp.sensorType != 0 {
            return Err(INVALID_ARGUMENT);
        }
        temp.temperature =
            l.sim
                .count(gpu, &l.sim.gpu(gpu).dynamic.temperature, "temperature", t)? as c_int;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperatureThreshold(
    device: nvmlDevice_t,
    kind: c_uint,
    temp: *mut c_uint,
) -> Ret {
    with_device(
        "nvmlDeviceGetTemperatureThreshold",
        device,
        "temperature_threshold",
        |l, gpu, _| {
            let th = &l.sim.gpu(gpu).temperature_thresholds;
            let value = match kind {
                0 => th.shutdown,
                1 => th.slowdown,
                2 => th.mem_max,
                3 => th.gpu_max,
                _ => None,
            };
            *unsafe { out(temp) }? = value.ok_or(NOT_SUPPORTED)?;
            Ok(())
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNumFans(device: nvmlDevice_t, fans: *mut c_uint) -> Ret {
    with_device("nvmlDeviceGetNumFans", device, "fan_speed", |l, gpu, _| {
        let n = l.sim.gpu(gpu).fans;
        if n == 0 {
            return Err(NOT_SUPPORTED);
        }
        *unsafe { out(fans) }? = n;
        Ok(())
    })
}

fn fan_speed(sym: &'static str, device: nvmlDevice_t, fan: c_uint, speed: *mut c_uint) -> Ret {
    with_device(sym, device, "fan_speed", |l, gpu, t| {
        let g = l.sim.gpu(gpu);
        if g.fans == 0 {
            return Err(NOT_SUPPORTED);
        }
        if fan >= g.fans {
            return Err(INVALID_ARGUMENT);
        }
        let value = l.sim.percent(gpu, &g.dynamic.fan_speed, "fan_speed", t)?;
        *unsafe { out(speed) }? = value;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed_v2(
    device: nvmlDevice_t,
    fan: c_uint,
    speed: *mut c_uint,
) -> Ret {
    fan_speed("nvmlDeviceGetFanSpeed_v2", device, fan, speed)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed(device: nvmlDevice_t, speed: *mut c_uint) -> Ret {
    fan_speed("nvmlDeviceGetFanSpeed", device, 0, speed)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(device: nvmlDevice_t, mw: *mut c_uint) -> Ret {
    with_device("nvmlDeviceGetPowerUsage", device, "power_usage", |l, gpu, t| {
        // The driver's latest power reading: the newest sample of its power buffer.
        let tick = l.sim.latest_sample_tick(t);
        let value = l
            .sim
            .count(gpu, &l.sim.gpu(gpu).dynamic.power_mw, "power_mw", tick)?;
        *unsafe { out(mw) }? = value;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimit(device: nvmlDevice_t, mw: *mut c_uint) -> Ret {
    with_device(
        "nvmlDeviceGetPowerManagementLimit",
        device,
        "power_limit",
        |l, gpu, _| {
            *unsafe { out(mw) }? = l.sim.gpu(gpu).power_limit_mw;
            Ok(())
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(device: nvmlDevice_t, mw: *mut c_uint) -> Ret {
    with_device(
        "nvmlDeviceGetEnforcedPowerLimit",
        device,
        "enforced_power_limit",
        |l, gpu, _| {
            *unsafe { out(mw) }? = l.sim.gpu(gpu).enforced_power_limit_mw;
            Ok(())
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: nvmlDevice_t,
    mj: *mut c_ulonglong,
) -> Ret {
    with_device(
        "nvmlDeviceGetTotalEnergyConsumption",
        device,
        "energy",
        |l, gpu, t| {
            let value = l.sim.energy_mj(gpu, t)?;
            *unsafe { out(mj) }? = value;
            Ok(())
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPerformanceState(device: nvmlDevice_t, pstate: *mut c_uint) -> Ret {
    with_device("nvmlDeviceGetPerformanceState", device, "pstate", |l, gpu, t| {
        let value = l.sim.pstate(gpu, t)?;
        *unsafe { out(pstate) }? = value;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: nvmlDevice_t,
    reasons: *mut c_ulonglong,
) -> Ret {
    with_device(
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        device,
        "throttle_reasons",
        |l, gpu, t| {
            let value = l.sim.count(
                gpu,
                &l.sim.gpu(gpu).dynamic.throttle_reasons,
                "throttle_reasons",
                t,
            )?;
            *unsafe { out(reasons) }? = c_ulonglong::from(value);
            Ok(())
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: nvmlDevice_t,
    clock: c_uint,
    mhz: *mut c_uint,
) -> Ret {
    with_device("nvmlDeviceGetClockInfo", device, "clocks", |l, gpu, t| {
        let c = &l.sim.gpu(gpu).dynamic.clocks_mhz;
        let (expr, key) = match clock {
            0 => (&c.graphics, "clocks_mhz.graphics"),
            1 => (&c.sm, "clocks_mhz.sm"),
            2 => (&c.mem, "clocks_mhz.mem"),
            3 => (&c.video, "clocks_mhz.video"),
            _ => return Err(INVALID_ARGUMENT),
        };
        let value = l.sim.count(gpu, expr, key, t)?;
        *unsafe { out(mhz) }? = value;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: nvmlDevice_t,
    clock: c_uint,
    mhz: *mut c_uint,
) -> Ret {
    with_device("nvmlDeviceGetMaxClockInfo", device, "max_clocks", |l, gpu, _| {
        let c = &l.sim.gpu(gpu).max_clocks_mhz;
        *unsafe { out(mhz) }? = match clock {
            0 => c.graphics,
            1 => c.sm,
            2 => c.mem,
            3 => c.video,
            _ => return Err(INVALID_ARGUMENT),
        };
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// PCIe

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: nvmlDevice_t,
    counter: c_uint,
    kbps: *mut c_uint,
) -> Ret {
    with_device(
        "nvmlDeviceGetPcieThroughput",
        device,
        "pcie_throughput",
        |l, gpu, t| {
            let d = &l.sim.gpu(gpu).dynamic;
            let (expr, key) = match counter {
                0 => (&d.pcie_tx_kbps, "pcie_tx_kbps"),
                1 => (&d.pcie_rx_kbps, "pcie_rx_kbps"),
                _ => return Err(INVALID_ARGUMENT),
            };
            let value = l.sim.count(gpu, expr, key, t)?;
            *unsafe { out(kbps) }? = value;
            Ok(())
        },
    )
}

fn pcie_link(
    sym: &'static str,
    device: nvmlDevice_t,
    value: *mut c_uint,
    pick: fn(&crate::scenario::PcieLink) -> u32,
) -> Ret {
    with_device(sym, device, "pcie_link", |l, gpu, _| {
        *unsafe { out(value) }? = pick(&l.sim.gpu(gpu).pcie);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkGeneration(
    device: nvmlDevice_t,
    value: *mut c_uint,
) -> Ret {
    pcie_link("nvmlDeviceGetCurrPcieLinkGeneration", device, value, |p| {
        p.generation
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkWidth(device: nvmlDevice_t, value: *mut c_uint) -> Ret {
    pcie_link("nvmlDeviceGetCurrPcieLinkWidth", device, value, |p| p.width)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkGeneration(device: nvmlDevice_t, value: *mut c_uint) -> Ret {
    pcie_link("nvmlDeviceGetMaxPcieLinkGeneration", device, value, |p| p.max_gen)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkWidth(device: nvmlDevice_t, value: *mut c_uint) -> Ret {
    pcie_link("nvmlDeviceGetMaxPcieLinkWidth", device, value, |p| p.max_width)
}

// ---------------------------------------------------------------------------------------------
// Modes

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeMode(device: nvmlDevice_t, mode: *mut c_uint) -> Ret {
    with_device("nvmlDeviceGetComputeMode", device, "compute_mode", |l, gpu, _| {
        *unsafe { out(mode) }? = match l.sim.gpu(gpu).compute_mode {
            ComputeMode::Default => 0,
            ComputeMode::ExclusiveThread => 1,
            ComputeMode::Prohibited => 2,
            ComputeMode::ExclusiveProcess => 3,
        };
        Ok(())
    })
}

fn enable_state(
    sym: &'static str,
    device: nvmlDevice_t,
    field: &'static str,
    state: *mut c_uint,
    pick: fn(&crate::scenario::Gpu) -> bool,
) -> Ret {
    with_device(sym, device, field, |l, gpu, _| {
        *unsafe { out(state) }? = c_uint::from(pick(l.sim.gpu(gpu)));
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPersistenceMode(device: nvmlDevice_t, state: *mut c_uint) -> Ret {
    enable_state(
        "nvmlDeviceGetPersistenceMode",
        device,
        "persistence",
        state,
        |g| g.persistence,
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDisplayActive(device: nvmlDevice_t, state: *mut c_uint) -> Ret {
    enable_state("nvmlDeviceGetDisplayActive", device, "display", state, |g| {
        g.display_active
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDisplayMode(device: nvmlDevice_t, state: *mut c_uint) -> Ret {
    enable_state("nvmlDeviceGetDisplayMode", device, "display", state, |g| {
        g.display_active
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> Ret {
    with_device("nvmlDeviceGetEccMode", device, "ecc", |l, gpu, _| {
        if !l.sim.gpu(gpu).ecc.supported {
            return Err(NOT_SUPPORTED);
        }
        *unsafe { out(current) }? = 1;
        *unsafe { out(pending) }? = 1;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: nvmlDevice_t,
    error_type: c_uint,
    counter_type: c_uint,
    count: *mut c_ulonglong,
) -> Ret {
    with_device("nvmlDeviceGetTotalEccErrors", device, "ecc", |l, gpu, _| {
        let ecc = &l.sim.gpu(gpu).ecc;
        if !ecc.supported {
            return Err(NOT_SUPPORTED);
        }
        *unsafe { out(count) }? = match (error_type, counter_type) {
            (0, 0 | 1) => 0,
            (1, 0) => ecc.volatile_uncorrected,
            (1, 1) => ecc.aggregate_uncorrected,
            _ => return Err(INVALID_ARGUMENT),
        };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    device: nvmlDevice_t,
    correctable: *mut c_uint,
    uncorrectable: *mut c_uint,
    pending: *mut c_uint,
    failure: *mut c_uint,
) -> Ret {
    with_device(
        "nvmlDeviceGetRemappedRows",
        device,
        "remapped_rows",
        |l, gpu, _| {
            let rows = l.sim.gpu(gpu).remapped_rows.ok_or(NOT_SUPPORTED)?;
            *unsafe { out(correctable) }? = rows.correctable;
            *unsafe { out(uncorrectable) }? = rows.uncorrectable;
            *unsafe { out(pending) }? = c_uint::from(rows.pending);
            *unsafe { out(failure) }? = c_uint::from(rows.failure);
            Ok(())
        },
    )
}

/// Retired pages of one cause (0: multiple single-bit ECC errors, 1: a double-bit one): the
/// count asked with room for none, then the addresses. The `_v2` form also gives times.
fn retired_pages(
    name: &'static str,
    device: nvmlDevice_t,
    cause: c_uint,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: *mut c_ulonglong,
) -> Ret {
    with_device(name, device, "retired_pages", |l, gpu, _| {
        let pages = l.sim.gpu(gpu).retired_pages.ok_or(NOT_SUPPORTED)?;
        let retired = match cause {
            0 => pages.single_bit,
            1 => pages.double_bit,
            _ => return Err(INVALID_ARGUMENT),
        };
        let room = unsafe { out(count) }?;
        let fits = *room >= retired;
        *room = retired;
        if !fits {
            return Err(INSUFFICIENT_SIZE);
        }
        for i in 0..retired as usize {
            let page = 0x1000_0000 + (cause as u64) * 0x100_0000 + i as u64 * 0x1000;
            if !addresses.is_null() {
                // SAFETY: the caller gave room for `retired` entries (checked above).
                unsafe { *addresses.add(i) = page };
            }
            if !timestamps.is_null() {
                // SAFETY: as above.
                unsafe { *timestamps.add(i) = 1_700_000_000_000_000 + i as u64 };
            }
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPages(
    device: nvmlDevice_t,
    cause: c_uint,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
) -> Ret {
    retired_pages(
        "nvmlDeviceGetRetiredPages",
        device,
        cause,
        count,
        addresses,
        std::ptr::null_mut(),
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPages_v2(
    device: nvmlDevice_t,
    cause: c_uint,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: *mut c_ulonglong,
) -> Ret {
    retired_pages(
        "nvmlDeviceGetRetiredPages_v2",
        device,
        cause,
        count,
        addresses,
        timestamps,
    )
}

/// The GPU's NVLinks when `link` is one of them: NOT_SUPPORTED without NVLink, and
/// INVALID_ARGUMENT past the last link, as the driver answers.
fn nvlinks(l: &Loaded, gpu: usize, link: c_uint) -> Result<&crate::scenario::NvLinks, Ret> {
    let links = l.sim.gpu(gpu).nvlink.as_ref().ok_or(NOT_SUPPORTED)?;
    if link >= links.links {
        return Err(INVALID_ARGUMENT);
    }
    Ok(links)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkState(
    device: nvmlDevice_t,
    link: c_uint,
    active: *mut c_uint,
) -> Ret {
    with_device("nvmlDeviceGetNvLinkState", device, "nvlink", |l, gpu, _| {
        let links = nvlinks(l, gpu, link)?;
        *unsafe { out(active) }? = c_uint::from(!links.inactive.contains(&link));
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkErrorCounter(
    device: nvmlDevice_t,
    link: c_uint,
    counter: c_uint,
    value: *mut c_ulonglong,
) -> Ret {
    with_device(
        "nvmlDeviceGetNvLinkErrorCounter",
        device,
        "nvlink",
        |l, gpu, _| {
            let links = nvlinks(l, gpu, link)?;
            let by_link = match counter {
                0 => &links.replay,
                1 => &links.recovery,
                2 => &links.crc_flit,
                3 => &links.crc_data,
                _ => return Err(INVALID_ARGUMENT),
            };
            *unsafe { out(value) }? = by_link.get(link as usize).copied().unwrap_or(0);
            Ok(())
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> Ret {
    with_device("nvmlDeviceGetMigMode", device, "mig", |l, gpu, _| {
        let mode = match l.sim.mig(gpu) {
            MigSetting::Unsupported => return Err(NOT_SUPPORTED),
            MigSetting::Disabled => 0,
            MigSetting::Enabled => 1,
        };
        *unsafe { out(current) }? = mode;
        *unsafe { out(pending) }? = mode;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(device: nvmlDevice_t, is_mig: *mut c_uint) -> Ret {
    with_device_or_mig(
        "nvmlDeviceIsMigDeviceHandle",
        device,
        "mig",
        |_, _, _| {
            *unsafe { out(is_mig) }? = 0;
            Ok(())
        },
        |_, _, _, _| {
            *unsafe { out(is_mig) }? = 1;
            Ok(())
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(device: nvmlDevice_t, count: *mut c_uint) -> Ret {
    with_device("nvmlDeviceGetMaxMigDeviceCount", device, "mig", |l, gpu, _| {
        *unsafe { out(count) }? = match l.sim.mig(gpu) {
            MigSetting::Unsupported => return Err(NOT_SUPPORTED),
            MigSetting::Disabled => 0,
            MigSetting::Enabled => MAX_MIG_DEVICES,
        };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    mig: *mut nvmlDevice_t,
) -> Ret {
    with_device(
        "nvmlDeviceGetMigDeviceHandleByIndex",
        device,
        "mig",
        |l, gpu, _| {
            if index >= MAX_MIG_DEVICES {
                return Err(INVALID_ARGUMENT);
            }
            let listed = l.sim.gpu(gpu).mig_devices.len();
            if l.sim.mig(gpu) != MigSetting::Enabled || index as usize >= listed {
                return Err(NOT_FOUND);
            }
            *unsafe { out(mig) }? = mig_handle(gpu, index as usize);
            Ok(())
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    device: nvmlDevice_t,
    parent: *mut nvmlDevice_t,
) -> Ret {
    with_device_or_mig(
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
        device,
        "mig",
        |_, _, _| Err(INVALID_ARGUMENT),
        |_, gpu, _, _| {
            *unsafe { out(parent) }? = (gpu + 1) as nvmlDevice_t;
            Ok(())
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(device: nvmlDevice_t, id: *mut c_uint) -> Ret {
    instance_id("nvmlDeviceGetGpuInstanceId", device, id, |m| m.gpu_instance)
}

/// A MIG device's GPU or compute instance id; a whole GPU has none.
fn instance_id(
    sym: &'static str,
    device: nvmlDevice_t,
    id: *mut c_uint,
    pick: fn(&crate::scenario::MigDevice) -> u32,
) -> Ret {
    with_device_or_mig(
        sym,
        device,
        "mig",
        |_, _, _| Err(NOT_SUPPORTED),
        |l, gpu, mig, _| {
            *unsafe { out(id) }? = pick(&l.sim.gpu(gpu).mig_devices[mig]);
            Ok(())
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(device: nvmlDevice_t, id: *mut c_uint) -> Ret {
    instance_id("nvmlDeviceGetComputeInstanceId", device, id, |m| {
        m.compute_instance
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDriverModel_v2(
    device: nvmlDevice_t,
    _current: *mut c_uint,
    _pending: *mut c_uint,
) -> Ret {
    with_device("nvmlDeviceGetDriverModel_v2", device, "handle", |_, _, _| {
        Err(NOT_SUPPORTED)
    })
}

/// `NVML_FI_DEV_MEMORY_TEMP` (nvml.h): the memory's temperature, in degrees C.
const FI_DEV_MEMORY_TEMP: c_uint = 82;
/// `NVML_FI_DEV_POWER_INSTANT` (nvml.h): the power draw at this instant, in milliwatts.
const FI_DEV_POWER_INSTANT: c_uint = 186;

/// Overall success; each field answers on its own, as the real call does: the memory's
/// temperature where the scenario gives one (through the `temperature` fault), the power
/// draw at this instant (the `power_mw` expression at the call's time, where
/// `nvmlDeviceGetPowerUsage` reads it at the latest sample; through the `power_usage`
/// fault), every other field NOT_SUPPORTED. Which driver first answered the instant power
/// is not modelled: every simulated driver does.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: nvmlDevice_t,
    count: c_int,
    values: *mut nvmlFieldValue_t,
) -> Ret {
    with_device("nvmlDeviceGetFieldValues", device, "handle", |l, gpu, t| {
        if values.is_null() || count < 0 {
            return Err(INVALID_ARGUMENT);
        }
        for i in 0..count as usize {
            // SAFETY: the caller's array holds `count` entries.
            let entry = unsafe { &mut *values.add(i) };
            let answer = match entry.fieldId {
                FI_DEV_MEMORY_TEMP => match l.sim.fault(gpu, "temperature", t) {
                    Some(code) => Err(code),
                    None => l.sim.memory_temperature(gpu, t),
                },
                FI_DEV_POWER_INSTANT => match l.sim.fault(gpu, "power_usage", t) {
                    Some(code) => Err(code),
                    None => l.sim.count(gpu, &l.sim.gpu(gpu).dynamic.power_mw, "power_mw", t),
                },
                _ => Err(NOT_SUPPORTED),
            };
            match answer {
                Ok(value) => {
                    // NVML_VALUE_TYPE_UNSIGNED_INT.
                    entry.valueType = 1;
                    entry.value.uiVal = value;
                    entry.timestamp = wall_now_us() as i64;
                    entry.nvmlReturn = SUCCESS;
                }
                Err(code) => entry.nvmlReturn = code,
            }
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Processes

#[derive(Clone, Copy, PartialEq, Eq)]
enum ProcessList {
    Compute,
    Graphics,
    Mps,
}

impl ProcessList {
    fn includes(self, kind: ProcessType) -> bool {
        match self {
            Self::Compute => kind.in_compute_list(),
            Self::Graphics => kind.in_graphics_list(),
            Self::Mps => kind.in_mps_list(),
        }
    }
}

/// What a real driver answers a caller without root for a MIG-enabled GPU's own memory and
/// process lists (nvml.h: "only if the caller has appropriate privileges";
/// nvidia-container-toolkit #842, 550.127.08).
fn check_mig_privileges(l: &Loaded, gpu: usize) -> Result<(), Ret> {
    if l.sim.mig(gpu) != MigSetting::Enabled {
        return Ok(());
    }
    let root = match l.sim.scenario.sim.caller {
        Caller::Root => true,
        Caller::User => false,
        // SAFETY: geteuid has no preconditions.
        Caller::Actual => (unsafe { libc::geteuid() }) == 0,
    };
    if root { Ok(()) } else { Err(NO_PERMISSION) }
}

/// The processes of `list` on `gpu` at `t` (with the race of `race_grow_between_calls`).
fn listed_processes(l: &Loaded, gpu: usize, t: f64, list: ProcessList) -> Vec<LiveProcess> {
    let mut live: Vec<LiveProcess> = l
        .sim
        .live_processes(gpu, t)
        .into_iter()
        .filter(|p| list.includes(p.kind))
        .collect();
    let raced = l.size_queried[gpu].swap(false, Ordering::Relaxed);
    if raced && l.sim.scenario.sim.race_grow_between_calls && !live.is_empty() {
        // A process started between the size query and this fetch.
        let mut extra = live[live.len() - 1].clone();
        extra.pid = extra.pid.wrapping_add(1_000_000);
        live.push(extra);
    }
    live
}

/// Writes one process entry of `entry_bytes` (16: v1; 24: v2; 32: with
/// `usedGpuCcProtectedMemory`) at `at`.
///
/// # Safety
/// `at` is valid for writes of `entry_bytes` bytes.
unsafe fn write_process(at: *mut u8, entry_bytes: usize, p: &LiveProcess) {
    let memory = p.used_memory.unwrap_or(VALUE_NOT_AVAILABLE);
    let (gpu_instance, compute_instance) = p.instance_ids.unwrap_or((NO_INSTANCE, NO_INSTANCE));
    // SAFETY: the caller's entry holds `entry_bytes` bytes; unaligned writes need no more.
    unsafe {
        std::ptr::write_bytes(at, 0, entry_bytes);
        at.cast::<c_uint>().write_unaligned(p.pid);
        at.add(8).cast::<c_ulonglong>().write_unaligned(memory);
        if entry_bytes >= 24 {
            at.add(16).cast::<c_uint>().write_unaligned(gpu_instance);
            at.add(20).cast::<c_uint>().write_unaligned(compute_instance);
        }
    }
}

/// The two-call size protocol (a count query, then a fetch), writing entries of
/// `entry_bytes`.
fn running_processes(
    sym: &'static str,
    device: nvmlDevice_t,
    list: ProcessList,
    count: *mut c_uint,
    infos: *mut u8,
    entry_bytes: fn(&Loaded) -> usize,
) -> Ret {
    with_device(sym, device, "processes", |l, gpu, t| {
        check_mig_privileges(l, gpu)?;
        let count = unsafe { out(count) }?;
        let live = listed_processes(l, gpu, t, list);
        let n = live.len();
        if (*count as usize) < n || (infos.is_null() && n > 0) {
            *count = n as c_uint;
            l.size_queried[gpu].store(true, Ordering::Relaxed);
            return Err(INSUFFICIENT_SIZE);
        }
        let stride = entry_bytes(l);
        for (i, p) in live.iter().enumerate() {
            // SAFETY: the caller's buffer holds `*count` >= n entries of the layout this
            // driver writes.
            unsafe { write_process(infos.add(i * stride), stride, p) };
        }
        *count = n as c_uint;
        Ok(())
    })
}

macro_rules! process_exports {
    ($($name:ident, $list:expr, $bytes:expr;)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(device: nvmlDevice_t, count: *mut c_uint, infos: *mut c_void) -> Ret {
            running_processes(stringify!($name), device, $list, count, infos.cast(), $bytes)
        }
    )*};
}

process_exports! {
    nvmlDeviceGetComputeRunningProcesses_v3, ProcessList::Compute, |l| l.v3_entry_bytes;
    nvmlDeviceGetGraphicsRunningProcesses_v3, ProcessList::Graphics, |l| l.v3_entry_bytes;
    nvmlDeviceGetMPSComputeRunningProcesses_v3, ProcessList::Mps, |l| l.v3_entry_bytes;
    nvmlDeviceGetComputeRunningProcesses_v2, ProcessList::Compute, |_| 24;
    nvmlDeviceGetGraphicsRunningProcesses_v2, ProcessList::Graphics, |_| 24;
    nvmlDeviceGetMPSComputeRunningProcesses_v2, ProcessList::Mps, |_| 24;
    nvmlDeviceGetComputeRunningProcesses, ProcessList::Compute, |_| 16;
    nvmlDeviceGetGraphicsRunningProcesses, ProcessList::Graphics, |_| 16;
    nvmlDeviceGetMPSComputeRunningProcesses, ProcessList::Mps, |_| 16;
}

/// `nvmlProcessDetailList_v1_t`: a versioned request for one list in 32-byte entries.
#[repr(C)]
pub struct ProcessDetailList {
    version: c_uint,
    mode: c_uint,
    entries: c_uint,
    array: *mut u8,
}

const PROCESS_DETAIL_LIST_V1: c_uint = 0x0100_0018;

/// The R535.98+ process list: mode 0 compute, 1 graphics, 2 MPS; 32-byte entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRunningProcessDetailList(
    device: nvmlDevice_t,
    request: *mut ProcessDetailList,
) -> Ret {
    let sym = "nvmlDeviceGetRunningProcessDetailList";
    with_device(sym, device, "processes", |l, gpu, t| {
        check_mig_privileges(l, gpu)?;
        let request = unsafe { out(request) }?;
        if request.version != PROCESS_DETAIL_LIST_V1 {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        let list = match request.mode {
            0 => ProcessList::Compute,
            1 => ProcessList::Graphics,
            2 => ProcessList::Mps,
            _ => return Err(INVALID_ARGUMENT),
        };
        let live = listed_processes(l, gpu, t, list);
        if (request.entries as usize) < live.len() || (request.array.is_null() && !live.is_empty()) {
            request.entries = live.len() as c_uint;
            return Err(INSUFFICIENT_SIZE);
        }
        for (i, p) in live.iter().enumerate() {
            // SAFETY: the caller's array holds `entries` >= live.len() 32-byte entries.
            unsafe { write_process(request.array.add(i * 32), 32, p) };
        }
        request.entries = live.len() as c_uint;
        Ok(())
    })
}

/// Exported from R535 on; the simulated GPUs have no confidential computing, so it answers
/// NOT_SUPPORTED, as a driver does on such a GPU.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetConfComputeMemSizeInfo(
    device: nvmlDevice_t,
    _info: *mut c_void,
) -> Ret {
    with_device(
        "nvmlDeviceGetConfComputeMemSizeInfo",
        device,
        "handle",
        |_, _, _| Err(NOT_SUPPORTED),
    )
}

/// The per-process utilization rows a driver answers: one per live process sampled after
/// `last_seen`, and with `dirty_process_samples` the rows real drivers add (nvtop #110;
/// go-nvml #11, #51): a PID 0 row and an unknown PID with %SM 37100, both stamped 1.5 s
/// after the others (staggered stamps), and each process again with a sample just older
/// than `last_seen`.
fn process_rows(l: &Loaded, gpu: usize, t: f64, last_seen: u64) -> Vec<ProcessSample> {
    let mut rows = l.sim.process_samples(gpu, t, &l.time, last_seen);
    if l.sim.scenario.sim.dirty_process_samples && !rows.is_empty() {
        let stamp = rows[0].timestamp_us + 1_500_000;
        let junk = |pid, sm| ProcessSample {
            pid,
            timestamp_us: stamp,
            sm,
            mem: sm,
            enc: 0,
            dec: 0,
        };
        let stale: Vec<ProcessSample> = rows
            .iter()
            .filter(|_| last_seen > 0)
            .map(|r| ProcessSample {
                timestamp_us: last_seen - 1,
                sm: 100,
                mem: 100,
                ..*r
            })
            .collect();
        rows.push(junk(0, 55));
        rows.push(junk(0x7FFF_FFF0, 37_100));
        rows.extend(stale);
    }
    rows
}

/// What a size query answers: drivers with dirty answers always said 100.
fn rows_wanted(l: &Loaded, rows: usize) -> c_uint {
    let padded = if l.sim.scenario.sim.dirty_process_samples {
        100
    } else {
        0
    };
    rows.max(padded) as c_uint
}

/// The rows both per-process utilization calls answer, after the checks they share: NOT_FOUND
/// for none, INSUFFICIENT_SIZE (with `count` set to what a size query says) when the
/// caller's buffer is missing or short.
fn process_rows_for(
    l: &Loaded,
    gpu: usize,
    t: f64,
    last_seen: u64,
    count: &mut c_uint,
    has_buffer: bool,
) -> Result<Vec<ProcessSample>, Ret> {
    if !l.sim.utilization_supported(gpu) {
        return Err(NOT_SUPPORTED);
    }
    let rows = process_rows(l, gpu, t, last_seen);
    if rows.is_empty() {
        return Err(NOT_FOUND);
    }
    if !has_buffer || (*count as usize) < rows.len() {
        *count = rows_wanted(l, rows.len());
        return Err(INSUFFICIENT_SIZE);
    }
    *count = rows.len() as c_uint;
    Ok(rows)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    utilization: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    last_seen: c_ulonglong,
) -> Ret {
    with_device(
        "nvmlDeviceGetProcessUtilization",
        device,
        "process_utilization",
        |l, gpu, t| {
            let count = unsafe { out(count) }?;
            let rows = process_rows_for(l, gpu, t, last_seen, count, !utilization.is_null())?;
            let zero = l.sim.scenario.sim.legacy_process_utilization_zero;
            for (i, s) in rows.iter().enumerate() {
                let value = |v: u32| if zero { 0 } else { v };
                let sample = nvmlProcessUtilizationSample_t {
                    pid: s.pid,
                    timeStamp: s.timestamp_us,
                    smUtil: value(s.sm),
                    memUtil: value(s.mem),
                    encUtil: value(s.enc),
                    decUtil: value(s.dec),
                };
                // SAFETY: the caller's buffer holds `*count` >= rows.len() entries.
                unsafe { utilization.add(i).write(sample) };
            }
            Ok(())
        },
    )
}

const PROCESSES_UTILIZATION_INFO_V1: c_uint = 0x0100_0018;

/// The R550 form of the per-process utilization call: a versioned struct holding the
/// count, the last-seen stamp and the array; the same rows as the legacy call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetProcessesUtilizationInfo(
    device: nvmlDevice_t,
    info: *mut nvmlProcessesUtilizationInfo_t,
) -> Ret {
    with_device(
        "nvmlDeviceGetProcessesUtilizationInfo",
        device,
        "process_utilization",
        |l, gpu, t| {
            let info = unsafe { out(info) }?;
            if info.version != PROCESSES_UTILIZATION_INFO_V1 {
                return Err(ARGUMENT_VERSION_MISMATCH);
            }
            let has_buffer = !info.procUtilArray.is_null();
            let rows = process_rows_for(
                l,
                gpu,
                t,
                info.lastSeenTimeStamp,
                &mut info.processSamplesCount,
                has_buffer,
            )?;
            for (i, s) in rows.iter().enumerate() {
                let sample = nvmlProcessUtilizationInfo_v1_t {
                    timeStamp: s.timestamp_us,
                    pid: s.pid,
                    smUtil: s.sm,
                    memUtil: s.mem,
                    encUtil: s.enc,
                    decUtil: s.dec,
                    jpgUtil: 0,
                    ofaUtil: 0,
                };
                // SAFETY: the caller's array holds `processSamplesCount` >= rows.len().
                unsafe { info.procUtilArray.add(i).write(sample) };
            }
            Ok(())
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Control exports for tests and benchmarks (never probed by NVML clients).

/// Uses this scenario file: before init it wins over every other lookup; after init it
/// replaces the loaded scenario. Returns 0 on success, DRIVER_NOT_LOADED on a bad file.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gputop_sim_load_scenario(path: *const c_char) -> Ret {
    guarded("gputop_sim_load_scenario", None, || {
        if path.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: the caller passes a NUL-terminated path.
        let path = PathBuf::from(unsafe { CStr::from_ptr(path) }.to_string_lossy().into_owned());
        *PRELOAD.lock().unwrap_or_else(|e| e.into_inner()) = Some(path.clone());
        let mut slot = STATE.write().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            let scenario = read_scenario(&path, &|k| std::env::var(k).ok()).map_err(|m| {
                eprintln!("nvml-sim: {m}");
                DRIVER_NOT_LOADED
            })?;
            *slot = Some(Arc::new(build_loaded(scenario)));
        }
        Ok(())
    })
}

/// Switches to the manual clock at `ms` scenario milliseconds.
#[unsafe(no_mangle)]
pub extern "C" fn gputop_sim_set_time_ms(ms: u64) {
    if let Some(l) = state() {
        l.manual_us.store(ms.saturating_mul(1000), Ordering::Relaxed);
        l.manual.store(true, Ordering::Relaxed);
    }
}

/// Advances the manual clock by `ms` (switching to it at the current time first).
#[unsafe(no_mangle)]
pub extern "C" fn gputop_sim_advance_ms(ms: u64) {
    if let Some(l) = state() {
        if !l.manual.swap(true, Ordering::Relaxed) {
            l.manual_us.store((l.now() * 1e6) as u64, Ordering::Relaxed);
        }
        l.manual_us.fetch_add(ms.saturating_mul(1000), Ordering::Relaxed);
    }
}

/// How many times `sym` has been called in this library instance.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gputop_sim_call_count(sym: *const c_char) -> u64 {
    if sym.is_null() {
        return 0;
    }
    // SAFETY: the caller passes a NUL-terminated name.
    let Ok(sym) = unsafe { CStr::from_ptr(sym) }.to_str() else {
        return 0;
    };
    let calls = CALLS.read().unwrap_or_else(|e| e.into_inner());
    calls
        .as_ref()
        .and_then(|m| m.get(sym))
        .map_or(0, |c| c.load(Ordering::Relaxed))
}

/// A `[smi]` option of the loaded scenario as a number (booleans are 0 or 1), for the
/// simulator's `nvidia-smi`; 0 for unknown names or before init.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gputop_sim_smi_option(name: *const c_char) -> u64 {
    if name.is_null() {
        return 0;
    }
    // SAFETY: the caller passes a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
    match (state(), name.as_ref()) {
        (Some(l), "memory_includes_reserved") => u64::from(l.sim.scenario.smi.memory_includes_reserved),
        _ => 0,
    }
}

// Events: Xid errors from the scenario's timeline, through an event set.

/// The event types a GPU with events offers: single- and double-bit ECC, P-state, Xid
/// critical error and clock changes (nvml.h's `nvmlEventType*`).
const SUPPORTED_EVENT_TYPES: c_ulonglong = 0x1 | 0x2 | 0x4 | 0x8 | 0x10;
/// `nvmlEventTypeXidCriticalError`: the only kind this simulator delivers.
const EVENT_TYPE_XID: c_ulonglong = 0x8;

/// A GPU registered on an event set.
#[derive(Debug)]
struct Registered {
    gpu: usize,
    types: c_ulonglong,
    /// How many of the GPU's Xids are behind the set: delivered, or before it registered.
    behind: usize,
}

/// Event sets by handle (a handle is its slot + 1); a freed one leaves `None`.
static EVENT_SETS: Mutex<Vec<Option<Vec<Registered>>>> = Mutex::new(Vec::new());

fn event_sets() -> std::sync::MutexGuard<'static, Vec<Option<Vec<Registered>>>> {
    EVENT_SETS.lock().unwrap_or_else(|e| e.into_inner())
}

fn event_set(sets: &mut [Option<Vec<Registered>>], set: nvmlEventSet_t) -> Result<&mut Vec<Registered>, Ret> {
    (set as usize)
        .checked_sub(1)
        .and_then(|slot| sets.get_mut(slot))
        .and_then(Option::as_mut)
        .ok_or(INVALID_ARGUMENT)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) -> Ret {
    with_sim("nvmlEventSetCreate", |_| {
        let out = unsafe { out(set) }?;
        let mut sets = event_sets();
        sets.push(Some(Vec::new()));
        *out = sets.len() as nvmlEventSet_t;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetFree(set: nvmlEventSet_t) -> Ret {
    with_sim("nvmlEventSetFree", |_| {
        let mut sets = event_sets();
        event_set(&mut sets, set)?;
        sets[set as usize - 1] = None;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(
    device: nvmlDevice_t,
    types: *mut c_ulonglong,
) -> Ret {
    with_device(
        "nvmlDeviceGetSupportedEventTypes",
        device,
        "events",
        |l, gpu, _| {
            if !l.sim.gpu(gpu).events {
                return Err(NOT_SUPPORTED);
            }
            *unsafe { out(types) }? = SUPPORTED_EVENT_TYPES;
            Ok(())
        },
    )
}

/// A GPU without events, or event types it lacks: NOT_SUPPORTED, and the set stays usable
/// (nvml.h; k8s-device-plugin PR #1562 skips such a GPU and watches the others).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceRegisterEvents(
    device: nvmlDevice_t,
    types: c_ulonglong,
    set: nvmlEventSet_t,
) -> Ret {
    with_device("nvmlDeviceRegisterEvents", device, "events", |l, gpu, t| {
        if !l.sim.gpu(gpu).events || types & !SUPPORTED_EVENT_TYPES != 0 {
            return Err(NOT_SUPPORTED);
        }
        let mut sets = event_sets();
        let registered = event_set(&mut sets, set)?;
        match registered.iter_mut().find(|r| r.gpu == gpu) {
            Some(known) => known.types |= types,
            None => registered.push(Registered {
                gpu,
                types,
                // Events happen to a set from its registration on.
                behind: l.sim.gpu(gpu).xids.iter().filter(|x| x.at <= t).count(),
            }),
        }
        Ok(())
    })
}

/// The next Xid of the set's GPUs that has happened by `t`: marked delivered, with what the
/// event says. `Err` when a registered GPU is lost.
fn next_event(l: &Loaded, registered: &mut [Registered], t: f64) -> Result<Option<nvmlEventData_t>, Ret> {
    if registered.iter().any(|r| l.sim.is_lost(r.gpu, t)) {
        return Err(GPU_IS_LOST);
    }
    let due = registered
        .iter_mut()
        .filter(|r| r.types & EVENT_TYPE_XID != 0)
        .filter_map(|r| {
            let xid = l.sim.gpu(r.gpu).xids.get(r.behind)?;
            (xid.at <= t).then_some((xid.at, r))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0));
    let Some((_, r)) = due else {
        return Ok(None);
    };
    r.behind += 1;
    // "If there are multiple XID errors generated before nvmlEventSetWait is invoked then
    // the last seen XID error type will be returned for all XID error events" (nvml.h).
    let last = l
        .sim
        .xids(r.gpu, f64::NEG_INFINITY, t)
        .last()
        .map_or(0, |x| x.xid);
    Ok(Some(nvmlEventData_t {
        device: (r.gpu + 1) as nvmlDevice_t,
        eventType: EVENT_TYPE_XID,
        eventData: last,
        gpuInstanceId: NO_INSTANCE,
        computeInstanceId: NO_INSTANCE,
    }))
}

/// Waits up to `timeoutms` for an event of the set: an Xid of a registered GPU, delivered
/// once each, in the order they happened; TIMEOUT when none comes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    timeoutms: c_uint,
) -> Ret {
    with_sim("nvmlEventSetWait_v2", |l| {
        let out = unsafe { out(data) }?;
        let deadline = std::time::Instant::now() + Duration::from_millis(u64::from(timeoutms));
        loop {
            let t = l.now();
            let next_at = {
                let mut sets = event_sets();
                let registered = event_set(&mut sets, set)?;
                if let Some(event) = next_event(l, registered, t)? {
                    *out = event;
                    return Ok(());
                }
                registered
                    .iter()
                    .filter_map(|r| l.sim.gpu(r.gpu).xids.get(r.behind))
                    .map(|x| x.at)
                    .reduce(f64::min)
            };
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(TIMEOUT);
            }
            // Asleep until the next Xid is due or the wait ends; the manual clock (tests)
            // moves by calls from another thread, so it is looked at again every 20 ms.
            let until_next = match next_at {
                _ if l.manual.load(Ordering::Relaxed) => Duration::from_millis(20),
                Some(at) => Duration::from_secs_f64(((at - t) / l.time.speed).max(0.0) + 0.001),
                None => left,
            };
            std::thread::sleep(left.min(until_next));
        }
    })
}

//! The simulator's C ABI, called exactly as C clients call it.
//!
//! Each test loads its own copy of the library from its own directory, with the scenario
//! beside it as `gputop-sim.toml` (lookup rule 3), so tests never share library state.

use std::ffi::{CString, c_char, c_uint, c_ulonglong, c_void};
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use libloading::{Library, Symbol};
use nvml_wrapper_sys::bindings::{
    nvmlMemory_t, nvmlMemory_v2_t, nvmlProcessInfo_v1_t, nvmlProcessInfo_v2_t,
    nvmlProcessUtilizationSample_t, nvmlSample_t, nvmlTemperature_t,
};

type Device = *mut c_void;
type ProcessList = unsafe extern "C" fn(Device, *mut c_uint, *mut nvmlProcessInfo_v2_t) -> u32;

const SUCCESS: u32 = 0;
const UNINITIALIZED: u32 = 1;
const INVALID_ARGUMENT: u32 = 2;
const NOT_FOUND: u32 = 6;
const INSUFFICIENT_SIZE: u32 = 7;
const FUNCTION_NOT_FOUND: u32 = 13;
const GPU_IS_LOST: u32 = 15;
const ARGUMENT_VERSION_MISMATCH: u32 = 25;
const UNKNOWN: u32 = 999;

/// A private copy of the simulator with its scenario.
struct Sim {
    lib: Library,
    _dir: tempfile::TempDir,
}

fn built_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.parent().expect("deps dir").join("libnvml_sim.so")
}

impl Sim {
    fn load(scenario: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("libnvidia-ml.so.1");
        std::fs::copy(built_library(), &path).expect("copy the simulator");
        std::fs::write(dir.path().join("gputop-sim.toml"), scenario).expect("write scenario");
        // SAFETY: loading our own simulator, whose constructors do nothing.
        let lib = unsafe { Library::new(&path) }.expect("load the simulator");
        Self { lib, _dir: dir }
    }

    fn sym<T>(&self, name: &str) -> Symbol<'_, T> {
        // SAFETY: the caller names the C signature of an exported symbol.
        unsafe { self.lib.get(name.as_bytes()) }.unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn init(&self) -> u32 {
        unsafe { self.sym::<unsafe extern "C" fn() -> u32>("nvmlInit_v2")() }
    }

    fn shutdown(&self) -> u32 {
        unsafe { self.sym::<unsafe extern "C" fn() -> u32>("nvmlShutdown")() }
    }

    fn count(&self) -> (u32, u32) {
        let mut n = 0;
        let ret =
            unsafe { self.sym::<unsafe extern "C" fn(*mut c_uint) -> u32>("nvmlDeviceGetCount_v2")(&mut n) };
        (ret, n)
    }

    fn handle(&self, index: u32) -> (u32, Device) {
        let mut device = std::ptr::null_mut();
        let ret = unsafe {
            self.sym::<unsafe extern "C" fn(c_uint, *mut Device) -> u32>("nvmlDeviceGetHandleByIndex_v2")(
                index,
                &mut device,
            )
        };
        (ret, device)
    }

    /// A `_v3` running-process list export (24-byte entries).
    fn process_list(&self, name: &str) -> Symbol<'_, ProcessList> {
        self.sym::<ProcessList>(name)
    }

    fn u32_getter(&self, name: &str, device: Device) -> (u32, u32) {
        let mut value = 0;
        let ret =
            unsafe { self.sym::<unsafe extern "C" fn(Device, *mut c_uint) -> u32>(name)(device, &mut value) };
        (ret, value)
    }

    fn set_time_ms(&self, ms: u64) {
        unsafe { self.sym::<unsafe extern "C" fn(u64)>("gputop_sim_set_time_ms")(ms) }
    }

    fn calls(&self, name: &str) -> u64 {
        let name = CString::new(name).unwrap();
        unsafe {
            self.sym::<unsafe extern "C" fn(*const c_char) -> u64>("gputop_sim_call_count")(name.as_ptr())
        }
    }
}

fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as u64
}

const TWO_GPUS: &str = r#"
[meta]
version = 1
[clock]
mode = "manual"
start = 100.0
[[gpu]]
name = "Sim GPU zero"
memory_total = "8 GiB"
memory_reserved = "1 GiB"
memory_base_used = "1 GiB"
[gpu.dynamic]
utilization_gpu = { keyframes = [[0, 10], [200, 90]], interp = "linear" }
[[gpu.process]]
pid = 4001
used_memory = "2 GiB"
sm = 70
[[gpu.process]]
pid = 4002
type = "G"
used_memory = "unavailable"
[[gpu.process]]
pid = 4003
used_memory = "1 GiB"
start = 150.0
[[gpu]]
name = "Sim GPU one"
[[gpu.fault]]
field = "*"
error = "GPU_IS_LOST"
from = 120.0
[[gpu.fault]]
field = "power_usage"
error = "NOT_SUPPORTED"
"#;

#[test]
fn init_is_reference_counted_and_calls_before_init_fail() {
    let sim = Sim::load(TWO_GPUS);
    assert_eq!(sim.count().0, UNINITIALIZED);
    assert_eq!(sim.shutdown(), UNINITIALIZED);
    assert_eq!(sim.init(), SUCCESS);
    assert_eq!(sim.init(), SUCCESS);
    assert_eq!(sim.count(), (SUCCESS, 2));
    assert_eq!(sim.shutdown(), SUCCESS);
    assert_eq!(sim.count(), (SUCCESS, 2), "still initialised once");
    assert_eq!(sim.shutdown(), SUCCESS);
    assert_eq!(sim.count().0, UNINITIALIZED);
    assert_eq!(
        sim.init(),
        SUCCESS,
        "re-init after shutdown works: the scenario was kept"
    );
}

#[test]
fn bad_handles_indices_and_null_pointers_are_invalid_arguments() {
    let sim = Sim::load(TWO_GPUS);
    sim.init();
    assert_eq!(sim.handle(2).0, INVALID_ARGUMENT);
    let ret = unsafe {
        sim.sym::<unsafe extern "C" fn(c_uint, *mut Device) -> u32>("nvmlDeviceGetHandleByIndex_v2")(
            0,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(ret, INVALID_ARGUMENT);
    assert_eq!(
        sim.u32_getter("nvmlDeviceGetPowerUsage", 0x999 as Device).0,
        INVALID_ARGUMENT
    );
    let (_, device) = sim.handle(0);
    let ret = unsafe {
        sim.sym::<unsafe extern "C" fn(Device, *mut c_uint) -> u32>("nvmlDeviceGetPowerUsage")(
            device,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(ret, INVALID_ARGUMENT);
}

#[test]
fn strings_are_nul_terminated_and_too_small_buffers_say_so() {
    let sim = Sim::load(TWO_GPUS);
    sim.init();
    let (_, device) = sim.handle(0);
    let get_name = sim.sym::<unsafe extern "C" fn(Device, *mut c_char, c_uint) -> u32>("nvmlDeviceGetName");
    let mut small = [0 as c_char; 12];
    assert_eq!(
        unsafe { get_name(device, small.as_mut_ptr(), 12) },
        INSUFFICIENT_SIZE
    );
    let mut buf = [0x7f as c_char; 96];
    assert_eq!(unsafe { get_name(device, buf.as_mut_ptr(), 96) }, SUCCESS);
    let name = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    assert_eq!(name.to_str().unwrap(), "Sim GPU zero");
    let error_string = sim.sym::<unsafe extern "C" fn(u32) -> *const c_char>("nvmlErrorString");
    let text = |code| {
        unsafe { std::ffi::CStr::from_ptr(error_string(code)) }
            .to_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(text(GPU_IS_LOST), "GPU is lost");
    assert_eq!(text(123_456), "Unknown Error");
}

#[test]
fn process_lists_follow_the_two_call_protocol() {
    let sim = Sim::load(TWO_GPUS);
    sim.init();
    let (_, device) = sim.handle(0);
    let (_, other) = sim.handle(1);
    let compute = sim.process_list("nvmlDeviceGetComputeRunningProcesses_v3");
    let mut count = 0;
    assert_eq!(
        unsafe { compute(device, &mut count, std::ptr::null_mut()) },
        INSUFFICIENT_SIZE
    );
    assert_eq!(count, 1, "pid 4003 starts at t=150; 4002 is graphics");
    assert_eq!(
        unsafe { compute(device, std::ptr::null_mut(), std::ptr::null_mut()) },
        INVALID_ARGUMENT
    );
    let mut infos = vec![unsafe { std::mem::zeroed::<nvmlProcessInfo_v2_t>() }; 4];
    let mut count = 4;
    assert_eq!(
        unsafe { compute(device, &mut count, infos.as_mut_ptr()) },
        SUCCESS
    );
    assert_eq!(count, 1);
    assert_eq!(infos[0].pid, 4001);
    assert_eq!(infos[0].usedGpuMemory, 2 << 30);
    assert_eq!(
        infos[0].gpuInstanceId,
        u32::MAX,
        "no MIG: instance ids are 0xFFFFFFFF"
    );

    // A process appears on the timeline.
    sim.set_time_ms(160_000);
    let mut count = 1;
    assert_eq!(
        unsafe { compute(device, &mut count, infos.as_mut_ptr()) },
        INSUFFICIENT_SIZE
    );
    assert_eq!(count, 2);

    // Memory NVML cannot attribute is NVML_VALUE_NOT_AVAILABLE.
    let graphics = sim.process_list("nvmlDeviceGetGraphicsRunningProcesses_v3");
    let mut count = 4;
    assert_eq!(
        unsafe { graphics(device, &mut count, infos.as_mut_ptr()) },
        SUCCESS
    );
    assert_eq!((count, infos[0].pid, infos[0].usedGpuMemory), (1, 4002, u64::MAX));

    // No processes: SUCCESS with 0, even with a NULL buffer.
    sim.set_time_ms(100_000);
    let mut count = 0;
    assert_eq!(
        unsafe { compute(other, &mut count, std::ptr::null_mut()) },
        SUCCESS
    );
    assert_eq!(count, 0);
}

#[test]
fn legacy_process_symbols_write_the_16_byte_layout() {
    let sim = Sim::load(TWO_GPUS);
    sim.init();
    let (_, device) = sim.handle(0);
    let v1 = sim.sym::<unsafe extern "C" fn(Device, *mut c_uint, *mut nvmlProcessInfo_v1_t) -> u32>(
        "nvmlDeviceGetComputeRunningProcesses",
    );
    let mut infos = vec![unsafe { std::mem::zeroed::<nvmlProcessInfo_v1_t>() }; 2];
    let mut count = 2;
    assert_eq!(unsafe { v1(device, &mut count, infos.as_mut_ptr()) }, SUCCESS);
    assert_eq!((count, infos[0].pid, infos[0].usedGpuMemory), (1, 4001, 2 << 30));
}

#[test]
fn memory_v2_checks_its_struct_version_and_v1_counts_reserved_as_used() {
    let sim = Sim::load(TWO_GPUS);
    sim.init();
    let (_, device) = sim.handle(0);
    let v2 =
        sim.sym::<unsafe extern "C" fn(Device, *mut nvmlMemory_v2_t) -> u32>("nvmlDeviceGetMemoryInfo_v2");
    let mut memory: nvmlMemory_v2_t = unsafe { std::mem::zeroed() };
    memory.version = 2;
    assert_eq!(
        unsafe { v2(device, &mut memory) },
        FUNCTION_NOT_FOUND,
        "nvtop's version = 2 is rejected"
    );
    memory.version = 0x0200_0028;
    assert_eq!(unsafe { v2(device, &mut memory) }, SUCCESS);
    let used = (1u64 << 30) + (2 << 30);
    assert_eq!(
        (memory.total, memory.reserved, memory.used),
        (8 << 30, 1 << 30, used)
    );
    assert_eq!(memory.free, (8u64 << 30) - (1 << 30) - used);
    let v1 = sim.sym::<unsafe extern "C" fn(Device, *mut nvmlMemory_t) -> u32>("nvmlDeviceGetMemoryInfo");
    let mut old: nvmlMemory_t = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { v1(device, &mut old) }, SUCCESS);
    assert_eq!((old.used, old.free), (used + (1 << 30), memory.free));
}

#[test]
fn temperature_v_checks_its_version() {
    let sim = Sim::load(TWO_GPUS);
    sim.init();
    let (_, device) = sim.handle(0);
    let get =
        sim.sym::<unsafe extern "C" fn(Device, *mut nvmlTemperature_t) -> u32>("nvmlDeviceGetTemperatureV");
    let mut t: nvmlTemperature_t = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { get(device, &mut t) }, ARGUMENT_VERSION_MISMATCH);
    t.version = 0x0100_000C;
    assert_eq!(unsafe { get(device, &mut t) }, SUCCESS);
    assert_eq!(t.temperature, 35, "the default temperature");
}

#[test]
fn values_follow_the_timeline_and_faults_their_windows() {
    let sim = Sim::load(TWO_GPUS);
    sim.init();
    let (_, gpu0) = sim.handle(0);
    let utilization = |device| {
        let mut u = nvml_wrapper_sys::bindings::nvmlUtilization_t { gpu: 0, memory: 0 };
        let ret = unsafe {
            sim.sym::<unsafe extern "C" fn(Device, *mut nvml_wrapper_sys::bindings::nvmlUtilization_t) -> u32>(
                "nvmlDeviceGetUtilizationRates",
            )(device, &mut u)
        };
        (ret, u.gpu)
    };
    assert_eq!(utilization(gpu0), (SUCCESS, 50), "t=100 s, halfway from 10 to 90");
    sim.set_time_ms(150_000);
    assert_eq!(utilization(gpu0), (SUCCESS, 70));

    sim.set_time_ms(110_000);
    let (ret, gpu1) = sim.handle(1);
    assert_eq!(ret, SUCCESS);
    assert_eq!(
        sim.u32_getter("nvmlDeviceGetPowerUsage", gpu1).0,
        3,
        "power is NOT_SUPPORTED on GPU 1"
    );
    assert_eq!(
        sim.u32_getter("nvmlDeviceGetTemperature", gpu1).0,
        INVALID_ARGUMENT,
        "sensor arg missing"
    );

    sim.set_time_ms(120_000);
    assert_eq!(sim.handle(1).0, GPU_IS_LOST);
    assert_eq!(
        sim.u32_getter("nvmlDeviceGetPowerUsage", gpu1).0,
        GPU_IS_LOST,
        "lost wins"
    );
    assert_eq!(
        sim.u32_getter("nvmlDeviceGetPerformanceState", gpu1).0,
        GPU_IS_LOST
    );
    assert_eq!(sim.count(), (SUCCESS, 2), "a lost GPU is still counted");
    assert_eq!(utilization(gpu0).0, SUCCESS, "the other GPU is unaffected");
}

#[test]
fn sample_buffers_on_the_epoch_clock_use_wall_clock_timestamps_and_the_size_protocol() {
    let sim = Sim::load(&TWO_GPUS.replace(
        "[clock]\nmode = \"manual\"",
        "[sim]\nsample_clock = \"epoch\"\n[clock]\nmode = \"wall\"",
    ));
    sim.init();
    let (_, device) = sim.handle(0);
    let samples = sim.sym::<unsafe extern "C" fn(
        Device,
        c_uint,
        c_ulonglong,
        *mut c_uint,
        *mut c_uint,
        *mut nvmlSample_t,
    ) -> u32>("nvmlDeviceGetSamples");
    let since = now_us() - 5_000_000;
    let (mut kind, mut count) = (0, 0);
    assert_eq!(
        unsafe { samples(device, 1, since, &mut kind, &mut count, std::ptr::null_mut()) },
        SUCCESS
    );
    assert!(count >= 1, "the buffer holds the tick at the current time");
    let mut buffer = vec![unsafe { std::mem::zeroed::<nvmlSample_t>() }; count as usize];
    let mut zero = 0;
    assert_eq!(
        unsafe { samples(device, 1, since, &mut kind, &mut zero, buffer.as_mut_ptr()) },
        INVALID_ARGUMENT
    );
    assert_eq!(
        unsafe { samples(device, 1, since, &mut kind, &mut count, buffer.as_mut_ptr()) },
        SUCCESS
    );
    assert_eq!(kind, 1, "unsigned int values");
    let stamps: Vec<u64> = buffer[..count as usize].iter().map(|s| s.timeStamp).collect();
    assert!(stamps.windows(2).all(|w| w[0] < w[1]), "newest last");
    let newest = *stamps.last().unwrap();
    assert!(
        newest <= now_us() && newest + 1_000_000 > now_us(),
        "a real, recent timestamp"
    );
    // t is 100 s plus however long this test took to get here (0.4 points per second).
    let newest_value = unsafe { buffer[count as usize - 1].sampleValue.uiVal };
    assert!(
        (50..=52).contains(&newest_value),
        "about halfway from 10 to 90: {newest_value}"
    );
    assert_eq!(
        unsafe { samples(device, 1, newest, &mut kind, &mut count, buffer.as_mut_ptr()) },
        NOT_FOUND
    );

    let process = sim.sym::<unsafe extern "C" fn(
        Device,
        *mut nvmlProcessUtilizationSample_t,
        *mut c_uint,
        c_ulonglong,
    ) -> u32>("nvmlDeviceGetProcessUtilization");
    let mut n = 0;
    let last_second = now_us() - 1_000_000;
    assert_eq!(
        unsafe { process(device, std::ptr::null_mut(), &mut n, last_second) },
        INSUFFICIENT_SIZE
    );
    assert_eq!(n, 2, "one sample per live process");
    let mut buffer = vec![unsafe { std::mem::zeroed::<nvmlProcessUtilizationSample_t>() }; 2];
    assert_eq!(
        unsafe { process(device, buffer.as_mut_ptr(), &mut n, last_second) },
        SUCCESS
    );
    let first = buffer.iter().find(|s| s.pid == 4001).expect("pid 4001 sampled");
    assert_eq!(first.smUtil, 70);
    assert!(
        first.timeStamp > last_second,
        "nvitop drops samples older than a second"
    );
    assert_eq!(
        unsafe { process(device, std::ptr::null_mut(), &mut n, now_us()) },
        NOT_FOUND
    );
}

#[test]
fn missing_symbols_and_injected_panics_behave_like_an_old_or_broken_driver() {
    let sim = Sim::load(
        "[meta]\nversion = 1\n\
         [system]\nmissing_symbols = [\"nvmlDeviceGetPowerUsage\"]\n\
         [sim]\npanic_in = [\"nvmlDeviceGetPerformanceState\"]\n\
         [[gpu]]\n[[gpu]]\n",
    );
    sim.init();
    let (_, device) = sim.handle(0);
    assert_eq!(
        sim.u32_getter("nvmlDeviceGetPowerUsage", device).0,
        FUNCTION_NOT_FOUND
    );
    assert_eq!(
        sim.u32_getter("nvmlDeviceGetPerformanceState", device).0,
        UNKNOWN,
        "the panic is contained"
    );
    assert_eq!(
        sim.u32_getter("nvmlDeviceGetPerformanceState", device).0,
        UNKNOWN,
        "and the library still works"
    );
    assert_eq!(sim.count(), (SUCCESS, 2));
}

#[test]
fn race_grow_makes_the_fetch_after_a_size_query_find_one_more() {
    let scenario = TWO_GPUS.replacen(
        "[meta]\nversion = 1\n",
        "[meta]\nversion = 1\n[sim]\nrace_grow_between_calls = true\n",
        1,
    );
    let sim = Sim::load(&scenario);
    sim.init();
    let (_, device) = sim.handle(0);
    let compute = sim.process_list("nvmlDeviceGetComputeRunningProcesses_v3");
    let mut count = 0;
    assert_eq!(
        unsafe { compute(device, &mut count, std::ptr::null_mut()) },
        INSUFFICIENT_SIZE
    );
    assert_eq!(count, 1);
    let mut infos = vec![unsafe { std::mem::zeroed::<nvmlProcessInfo_v2_t>() }; 1];
    assert_eq!(
        unsafe { compute(device, &mut count, infos.as_mut_ptr()) },
        INSUFFICIENT_SIZE
    );
    assert_eq!(count, 2);
}

#[test]
fn init_error_and_invalid_scenarios_fail_init() {
    let mismatch = Sim::load("[meta]\nversion = 1\n[system]\ninit_error = \"LIB_RM_VERSION_MISMATCH\"\n");
    assert_eq!(mismatch.init(), 18);
    let broken = Sim::load("[meta]\nversion = 1\n[[gpu]]\nnmae = \"typo\"\n");
    assert_eq!(broken.init(), 9, "DRIVER_NOT_LOADED");
    assert_eq!(broken.count().0, UNINITIALIZED);
}

#[test]
fn control_export_chooses_the_scenario_before_init() {
    let sim = Sim::load(TWO_GPUS);
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("one.toml");
    std::fs::write(&other, "[meta]\nversion = 1\n[[gpu]]\n").unwrap();
    let path = CString::new(other.to_str().unwrap()).unwrap();
    let load = sim.sym::<unsafe extern "C" fn(*const c_char) -> u32>("gputop_sim_load_scenario");
    assert_eq!(unsafe { load(path.as_ptr()) }, SUCCESS);
    sim.init();
    assert_eq!(sim.count(), (SUCCESS, 1));
}

#[test]
fn concurrent_calls_from_many_threads_are_safe_and_counted() {
    let sim = Sim::load(TWO_GPUS);
    sim.init();
    let (_, device) = sim.handle(0);
    let device = device as usize;
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                for _ in 0..2000 {
                    let (ret, watts) = sim.u32_getter("nvmlDeviceGetPowerUsage", device as Device);
                    assert_eq!((ret, watts), (SUCCESS, 50_000));
                }
            });
        }
    });
    assert_eq!(sim.calls("nvmlDeviceGetPowerUsage"), 16_000);
}

/// Symbol groups: A (nvml-wrapper), B (nvitop), C (nvtop), D (legacy).
const EXPORTED: &[&str] = &[
    "nvmlInit_v2",
    "nvmlInitWithFlags",
    "nvmlShutdown",
    "nvmlErrorString",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetNVMLVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlSystemGetProcessName",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetHandleByPciBusId_v2",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetSerial",
    "nvmlDeviceGetBrand",
    "nvmlDeviceGetArchitecture",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetBAR1MemoryInfo",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetEncoderUtilization",
    "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetSamples",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetTemperatureThreshold",
    "nvmlDeviceGetNumFans",
    "nvmlDeviceGetFanSpeed_v2",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetComputeMode",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetDisplayActive",
    "nvmlDeviceGetDisplayMode",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetMPSComputeRunningProcesses_v3",
    "nvmlDeviceGetProcessUtilization",
    // B: nvitop
    "nvmlSystemGetCudaDriverVersion",
    "nvmlDeviceGetFanSpeed",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetDriverModel_v2",
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetFieldValues",
    // C: nvtop
    "nvmlDeviceGetMemoryInfo",
    // D: legacy fallbacks
    "nvmlInit",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetPciInfo_v2",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
    "nvmlDeviceGetMPSComputeRunningProcesses",
    "nvmlDeviceGetMPSComputeRunningProcesses_v2",
];

#[test]
fn every_symbol_the_three_clients_need_is_exported_and_the_confcompute_pair_together() {
    let sim = Sim::load(TWO_GPUS);
    for name in EXPORTED {
        // SAFETY: only the address is looked up.
        let found = unsafe { sim.lib.get::<*const c_void>(name.as_bytes()) };
        assert!(found.is_ok(), "{name} is not exported");
    }
    // nvitop reads 32-byte `_v3` entries when the first is exported without the second:
    // the default (R550) driver exports both.
    for name in [
        "nvmlDeviceGetConfComputeMemSizeInfo",
        "nvmlDeviceGetRunningProcessDetailList",
        "nvmlDeviceGetProcessesUtilizationInfo",
    ] {
        // SAFETY: only the address is looked up.
        let found = unsafe { sim.lib.get::<*const c_void>(name.as_bytes()) };
        assert!(found.is_ok(), "{name} is not exported");
    }
}

#[test]
fn processes_leave_on_the_timeline_and_faults_end_with_their_window() {
    let sim = Sim::load(
        "[meta]\nversion = 1\n[clock]\nmode = \"manual\"\n[[gpu]]\n\
         [[gpu.process]]\npid = 77\nend = 10.0\n\
         [[gpu.fault]]\nfield = \"temperature\"\nerror = \"TIMEOUT\"\nfrom = 5.0\nuntil = 8.0\n",
    );
    sim.init();
    let (_, device) = sim.handle(0);
    let compute = sim.process_list("nvmlDeviceGetComputeRunningProcesses_v3");
    let temperature = |device| {
        let mut value = 0;
        unsafe {
            sim.sym::<unsafe extern "C" fn(Device, c_uint, *mut c_uint) -> u32>("nvmlDeviceGetTemperature")(
                device, 0, &mut value,
            )
        }
    };
    let mut count = 0;
    assert_eq!(
        unsafe { compute(device, &mut count, std::ptr::null_mut()) },
        INSUFFICIENT_SIZE
    );
    assert_eq!(temperature(device), SUCCESS);
    sim.set_time_ms(6_000);
    assert_eq!(temperature(device), 10, "TIMEOUT inside [5, 8)");
    sim.set_time_ms(8_000);
    assert_eq!(temperature(device), SUCCESS, "the window has ended");
    sim.set_time_ms(10_000);
    let mut count = 0;
    assert_eq!(
        unsafe { compute(device, &mut count, std::ptr::null_mut()) },
        SUCCESS
    );
    assert_eq!(count, 0, "the process has left");
}

#[test]
fn lenient_struct_versions_and_injected_latency() {
    let sim = Sim::load(
        "[meta]\nversion = 1\n[system]\nlenient_struct_versions = true\n\
         [sim]\nlatency_us = { default = 20000 }\n[[gpu]]\n",
    );
    sim.init();
    let (_, device) = sim.handle(0);
    let v2 =
        sim.sym::<unsafe extern "C" fn(Device, *mut nvmlMemory_v2_t) -> u32>("nvmlDeviceGetMemoryInfo_v2");
    let mut memory: nvmlMemory_v2_t = unsafe { std::mem::zeroed() };
    memory.version = 2;
    let started = std::time::Instant::now();
    assert_eq!(
        unsafe { v2(device, &mut memory) },
        SUCCESS,
        "nvtop's version 2 is accepted when lenient"
    );
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(20),
        "each device call waits latency_us"
    );
    assert_eq!(memory.total, 16 << 30);
}

/// A MIG-enabled GPU as root sees it: its process lists answer only root.
const MIG_GPU: &str = r#"
[meta]
version = 1
[clock]
mode = "manual"
[sim]
caller = "root"
[[gpu]]
name = "NVIDIA A100-SXM4-40GB"
mig = "enabled"
[[gpu.mig_device]]
gpu_instance = 3
compute_instance = 0
profile = "2g.10gb"
memory = "9.75 GiB"
uuid = "MIG-aaaaaaaa-0000-5000-9000-000000000000"
[[gpu.process]]
pid = 4242
mig_device = 0
used_memory = "1 GiB"
[[gpu.process]]
pid = 4343
used_memory = "2 GiB"
"#;

#[test]
fn mig_devices_have_handles_ids_names_memory_and_their_processes() {
    const NOT_SUPPORTED: u32 = 3;
    let sim = Sim::load(MIG_GPU);
    assert_eq!(sim.init(), SUCCESS);
    let (_, gpu) = sim.handle(0);
    assert_eq!(
        sim.u32_getter("nvmlDeviceGetMaxMigDeviceCount", gpu),
        (SUCCESS, 7)
    );
    let by_index = sim.sym::<unsafe extern "C" fn(Device, c_uint, *mut Device) -> u32>(
        "nvmlDeviceGetMigDeviceHandleByIndex",
    );
    let mut mig = std::ptr::null_mut();
    assert_eq!(unsafe { by_index(gpu, 1, &mut mig) }, NOT_FOUND, "an empty slot");
    assert_eq!(
        unsafe { by_index(gpu, 7, &mut mig) },
        INVALID_ARGUMENT,
        "beyond the maximum"
    );
    assert_eq!(unsafe { by_index(gpu, 0, &mut mig) }, SUCCESS);
    assert_eq!(sim.u32_getter("nvmlDeviceIsMigDeviceHandle", mig), (SUCCESS, 1));
    assert_eq!(sim.u32_getter("nvmlDeviceIsMigDeviceHandle", gpu), (SUCCESS, 0));
    assert_eq!(sim.u32_getter("nvmlDeviceGetGpuInstanceId", mig), (SUCCESS, 3));
    assert_eq!(
        sim.u32_getter("nvmlDeviceGetComputeInstanceId", mig),
        (SUCCESS, 0)
    );
    let mut parent = std::ptr::null_mut();
    let from_mig = sim.sym::<unsafe extern "C" fn(Device, *mut Device) -> u32>(
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    );
    assert_eq!(unsafe { from_mig(mig, &mut parent) }, SUCCESS);
    assert_eq!(parent, gpu);
    assert_eq!(unsafe { from_mig(gpu, &mut parent) }, INVALID_ARGUMENT);
    let mut name = [0 as c_char; 96];
    let get_name = sim.sym::<unsafe extern "C" fn(Device, *mut c_char, c_uint) -> u32>("nvmlDeviceGetName");
    assert_eq!(unsafe { get_name(mig, name.as_mut_ptr(), 96) }, SUCCESS);
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(name, "NVIDIA A100-SXM4-40GB MIG 2g.10gb");
    let mut memory: nvmlMemory_v2_t = unsafe { std::mem::zeroed() };
    memory.version = 0x0200_0028;
    let get_memory =
        sim.sym::<unsafe extern "C" fn(Device, *mut nvmlMemory_v2_t) -> u32>("nvmlDeviceGetMemoryInfo_v2");
    assert_eq!(unsafe { get_memory(mig, &mut memory) }, SUCCESS);
    assert_eq!(
        (memory.total, memory.used),
        ((39 << 30) / 4, 1 << 30),
        "only its own process"
    );
    // Most queries do not apply to a MIG device.
    assert_eq!(sim.u32_getter("nvmlDeviceGetPowerUsage", mig).0, NOT_SUPPORTED);
    // The parent's process list names each process's instance.
    let list = sim.process_list("nvmlDeviceGetComputeRunningProcesses_v3");
    let mut infos: [nvmlProcessInfo_v2_t; 4] = unsafe { std::mem::zeroed() };
    let mut n: c_uint = 4;
    assert_eq!(unsafe { list(gpu, &mut n, infos.as_mut_ptr()) }, SUCCESS);
    let placed: Vec<(u32, u32, u32)> = infos[..n as usize]
        .iter()
        .map(|i| (i.pid, i.gpuInstanceId, i.computeInstanceId))
        .collect();
    assert_eq!(placed, [(4242, 3, 0), (4343, u32::MAX, u32::MAX)]);
}

#[test]
fn mig_devices_need_mig_enabled_and_processes_a_listed_device() {
    let env = |_: &str| None;
    let disabled = MIG_GPU.replace("mig = \"enabled\"", "mig = \"disabled\"");
    let error = nvml_sim::scenario::Scenario::parse(&disabled, "s.toml", &env).unwrap_err();
    assert!(
        error.0.contains("MIG devices need mig = \"enabled\""),
        "{}",
        error.0
    );
    let stray = MIG_GPU.replace("mig_device = 0", "mig_device = 2");
    let error = nvml_sim::scenario::Scenario::parse(&stray, "s.toml", &env).unwrap_err();
    assert!(
        error.0.contains("mig_device 2 is not one of the 1 MIG devices"),
        "{}",
        error.0
    );
}

type Samples =
    unsafe extern "C" fn(Device, c_uint, c_ulonglong, *mut c_uint, *mut c_uint, *mut nvmlSample_t) -> u32;

/// Every sample of `kind` newer than `since`, or the error code.
fn read_samples(sim: &Sim, device: Device, kind: c_uint, since: u64) -> Result<Vec<(u64, u32)>, u32> {
    let samples = sim.sym::<Samples>("nvmlDeviceGetSamples");
    let (mut value_type, mut count) = (0, 0);
    let ret = unsafe {
        samples(
            device,
            kind,
            since,
            &mut value_type,
            &mut count,
            std::ptr::null_mut(),
        )
    };
    if ret != SUCCESS {
        return Err(ret);
    }
    count = count.max(1);
    let mut buffer = vec![unsafe { std::mem::zeroed::<nvmlSample_t>() }; count as usize];
    let ret = unsafe {
        samples(
            device,
            kind,
            since,
            &mut value_type,
            &mut count,
            buffer.as_mut_ptr(),
        )
    };
    if ret != SUCCESS {
        return Err(ret);
    }
    Ok(buffer[..count as usize]
        .iter()
        .map(|s| (s.timeStamp, unsafe { s.sampleValue.uiVal }))
        .collect())
}

fn uptime_us() -> u64 {
    let text = std::fs::read_to_string("/proc/uptime").unwrap();
    (text.split_whitespace().next().unwrap().parse::<f64>().unwrap() * 1e6) as u64
}

#[test]
fn device_samples_are_stamped_on_the_boot_clock_and_predate_the_client() {
    let sim = Sim::load(
        "[meta]\nversion = 1\n[clock]\nmode = \"manual\"\n[sim]\nsamples_period_ms = 100\n\
         [[gpu]]\n[gpu.dynamic]\nutilization_gpu = 40\n",
    );
    sim.init();
    sim.set_time_ms(0);
    let (_, device) = sim.handle(0);
    let samples = read_samples(&sim, device, 1, 0).expect("a full buffer");
    assert_eq!(
        samples.len(),
        120,
        "the driver's buffer holds the seconds before init"
    );
    let newest = samples.last().unwrap().0;
    assert!(
        newest.abs_diff(uptime_us()) < 5_000_000,
        "microseconds since boot ({newest} against an uptime of {} µs)",
        uptime_us()
    );
    assert!(newest + 1_000_000_000_000 < now_us(), "far from Unix time");
    assert!(samples.iter().all(|(_, v)| *v == 40));
    // A client that cuts by the host's Unix clock gets nothing; by the newest stamp, a window.
    assert_eq!(
        read_samples(&sim, device, 1, now_us() - 1_000_000),
        Err(NOT_FOUND)
    );
    assert_eq!(
        read_samples(&sim, device, 1, newest - 1_000_000).unwrap().len(),
        10
    );
}

#[test]
fn an_idle_gpus_utilization_buffer_runs_dry_while_power_is_sampled() {
    let sim = Sim::load("[meta]\nversion = 1\n[[gpu]]\n[gpu.dynamic]\nutilization_gpu = 0\n");
    sim.init();
    let (_, device) = sim.handle(0);
    assert_eq!(
        read_samples(&sim, device, 1, 0),
        Err(NOT_FOUND),
        "GPU utilization"
    );
    assert_eq!(
        read_samples(&sim, device, 2, 0),
        Err(NOT_FOUND),
        "memory utilization"
    );
    assert!(!read_samples(&sim, device, 0, 0).unwrap().is_empty(), "power");
}

const ONE_BUSY_GPU: &str = "[[gpu]]\n[[gpu.process]]\npid = 501\nused_memory = \"1 GiB\"\nsm = 30\n\
    [[gpu.process]]\npid = 502\nused_memory = \"2 GiB\"\nsm = 40\n\
    [[gpu.process]]\npid = 503\nused_memory = \"3 GiB\"\nsm = 50\n";

/// The `_v3` compute list read as raw bytes, with room for 8 entries of 32 bytes.
fn v3_bytes(sim: &Sim, device: Device) -> (u32, Vec<u8>) {
    let v3 = sim.sym::<unsafe extern "C" fn(Device, *mut c_uint, *mut u8) -> u32>(
        "nvmlDeviceGetComputeRunningProcesses_v3",
    );
    let mut buffer = vec![0u8; 8 * 32];
    let mut count = 8;
    assert_eq!(unsafe { v3(device, &mut count, buffer.as_mut_ptr()) }, SUCCESS);
    (count, buffer)
}

fn entry(buffer: &[u8], stride: usize, i: usize) -> (u32, u64) {
    let at = i * stride;
    (
        u32::from_le_bytes(buffer[at..at + 4].try_into().unwrap()),
        u64::from_le_bytes(buffer[at + 8..at + 16].try_into().unwrap()),
    )
}

#[test]
fn drivers_535_43_to_535_86_write_32_byte_v3_entries_and_lack_the_detail_list() {
    let sim = Sim::load(&format!(
        "[meta]\nversion = 1\n[system]\ndriver_version = \"535.54.03\"\n{ONE_BUSY_GPU}"
    ));
    sim.init();
    let (_, device) = sim.handle(0);
    let (count, buffer) = v3_bytes(&sim, device);
    assert_eq!(count, 3);
    let gib = 1u64 << 30;
    assert_eq!(
        (0..3).map(|i| entry(&buffer, 32, i)).collect::<Vec<_>>(),
        [(501, gib), (502, 2 * gib), (503, 3 * gib)]
    );
    assert_ne!(
        entry(&buffer, 24, 1),
        (502, 2 * gib),
        "a 24-byte reader is misled"
    );
    let mut info = ProcessDetails::new(0, 8);
    assert_eq!(sim.detail_list(device, &mut info), FUNCTION_NOT_FOUND);

    let fixed = Sim::load(&format!(
        "[meta]\nversion = 1\n[system]\ndriver_version = \"535.104.05\"\n{ONE_BUSY_GPU}"
    ));
    fixed.init();
    let (_, device) = fixed.handle(0);
    let (_, buffer) = v3_bytes(&fixed, device);
    assert_eq!(
        entry(&buffer, 24, 2),
        (503, 3 * gib),
        "535.98+ is back to 24 bytes"
    );
    let mut info = ProcessDetails::new(0, 8);
    assert_eq!(fixed.detail_list(device, &mut info), SUCCESS);
    assert_eq!(info.request.entries, 3);
    assert_eq!(entry(&info.entries, 32, 1), (502, 2 * gib));
}

/// `nvmlProcessDetailList_v1_t` and the array it points at.
struct ProcessDetails {
    request: DetailRequest,
    entries: Vec<u8>,
}

#[repr(C)]
struct DetailRequest {
    version: c_uint,
    mode: c_uint,
    entries: c_uint,
    array: *mut u8,
}

impl ProcessDetails {
    fn new(mode: c_uint, capacity: usize) -> Self {
        let mut entries = vec![0u8; capacity * 32];
        let request = DetailRequest {
            version: 0x0100_0018,
            mode,
            entries: capacity as c_uint,
            array: entries.as_mut_ptr(),
        };
        Self { request, entries }
    }
}

impl Sim {
    fn detail_list(&self, device: Device, details: &mut ProcessDetails) -> u32 {
        let call = self.sym::<unsafe extern "C" fn(Device, *mut DetailRequest) -> u32>(
            "nvmlDeviceGetRunningProcessDetailList",
        );
        unsafe { call(device, &mut details.request) }
    }
}

#[test]
fn a_v3_entry_size_can_be_set_to_the_16_bytes_one_driver_was_seen_writing() {
    let sim = Sim::load(&format!(
        "[meta]\nversion = 1\n[system]\nprocess_v3_entry_bytes = 16\n{ONE_BUSY_GPU}"
    ));
    sim.init();
    let (_, device) = sim.handle(0);
    let (_, buffer) = v3_bytes(&sim, device);
    assert_eq!(entry(&buffer, 16, 2), (503, 3 << 30));
    let bad = Sim::load("[meta]\nversion = 1\n[system]\nprocess_v3_entry_bytes = 20\n");
    assert_eq!(bad.init(), 9, "DRIVER_NOT_LOADED for an impossible size");
}

#[test]
fn old_drivers_answer_function_not_found_for_what_came_later() {
    let r470 = Sim::load("[meta]\nversion = 1\n[system]\ndriver_version = \"470.82.01\"\n[[gpu]]\n");
    r470.init();
    let (_, device) = r470.handle(0);
    let mut memory: nvmlMemory_v2_t = unsafe { std::mem::zeroed() };
    memory.version = 0x0200_0028;
    let v2 =
        r470.sym::<unsafe extern "C" fn(Device, *mut nvmlMemory_v2_t) -> u32>("nvmlDeviceGetMemoryInfo_v2");
    assert_eq!(unsafe { v2(device, &mut memory) }, FUNCTION_NOT_FOUND);
    let mut count = 0;
    let v3 = r470.process_list("nvmlDeviceGetComputeRunningProcesses_v3");
    assert_eq!(
        unsafe { v3(device, &mut count, std::ptr::null_mut()) },
        FUNCTION_NOT_FOUND
    );
    let v2_list = r470.process_list("nvmlDeviceGetComputeRunningProcesses_v2");
    assert_eq!(
        unsafe { v2_list(device, &mut count, std::ptr::null_mut()) },
        SUCCESS
    );

    let r450 = Sim::load("[meta]\nversion = 1\n[system]\ndriver_version = \"450.36.06\"\n[[gpu]]\n");
    r450.init();
    let (_, device) = r450.handle(0);
    let v2_list = r450.process_list("nvmlDeviceGetComputeRunningProcesses_v2");
    assert_eq!(
        unsafe { v2_list(device, &mut count, std::ptr::null_mut()) },
        FUNCTION_NOT_FOUND
    );
}

#[test]
fn a_driver_library_written_for_a_profile_does_not_export_what_the_driver_lacks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("libnvidia-ml.so.1");
    nvml_sim::profile::write_driver_library(
        &built_library(),
        "[meta]\nversion = 1\n[system]\ndriver_version = \"535.54.03\"\n\
         missing_symbols = [\"nvmlDeviceGetPowerUsage\"]\n",
        &path,
    )
    .unwrap();
    // SAFETY: loading our own simulator, whose constructors do nothing.
    let lib = unsafe { Library::new(&path) }.unwrap();
    let exported = |name: &str| unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_ok();
    assert!(exported("nvmlInit_v2"));
    assert!(exported("nvmlDeviceGetConfComputeMemSizeInfo"));
    assert!(exported("nvmlDeviceGetComputeRunningProcesses_v3"));
    assert!(!exported("nvmlDeviceGetRunningProcessDetailList"));
    assert!(!exported("nvmlDeviceGetProcessesUtilizationInfo"));
    assert!(!exported("nvmlDeviceGetPowerUsage"));
}

type ProcessUtilization =
    unsafe extern "C" fn(Device, *mut nvmlProcessUtilizationSample_t, *mut c_uint, c_ulonglong) -> u32;

#[test]
fn dirty_process_samples_pad_the_size_query_and_add_junk_rows() {
    let sim = Sim::load(&format!(
        "[meta]\nversion = 1\n[clock]\nmode = \"manual\"\n[sim]\ndirty_process_samples = true\n{ONE_BUSY_GPU}"
    ));
    sim.init();
    sim.set_time_ms(10_000);
    let (_, device) = sim.handle(0);
    let call = sim.sym::<ProcessUtilization>("nvmlDeviceGetProcessUtilization");
    let mut count = 0;
    let since = now_us() - 2_000_000;
    assert_eq!(
        unsafe { call(device, std::ptr::null_mut(), &mut count, since) },
        INSUFFICIENT_SIZE
    );
    assert_eq!(count, 100, "the size query always says 100");
    let mut rows = vec![unsafe { std::mem::zeroed::<nvmlProcessUtilizationSample_t>() }; 100];
    assert_eq!(
        unsafe { call(device, rows.as_mut_ptr(), &mut count, since) },
        SUCCESS
    );
    let rows = &rows[..count as usize];
    assert!(rows.iter().any(|r| r.pid == 0), "a PID 0 row");
    assert!(rows.iter().any(|r| r.smUtil == 37_100), "an impossible %SM");
    assert!(
        rows.iter().any(|r| r.timeStamp <= since),
        "rows older than asked for"
    );
    let good: Vec<u32> = rows
        .iter()
        .filter(|r| r.timeStamp > since && [501, 502, 503].contains(&r.pid))
        .map(|r| r.smUtil)
        .collect();
    assert_eq!(good, [30, 40, 50]);
}

#[test]
fn processes_utilization_info_answers_as_the_legacy_call_does() {
    let sim = Sim::load(&format!(
        "[meta]\nversion = 1\n[clock]\nmode = \"manual\"\n{ONE_BUSY_GPU}"
    ));
    sim.init();
    sim.set_time_ms(10_000);
    let (_, device) = sim.handle(0);
    let call =
        sim.sym::<unsafe extern "C" fn(
            Device,
            *mut nvml_wrapper_sys::bindings::nvmlProcessesUtilizationInfo_t,
        ) -> u32>("nvmlDeviceGetProcessesUtilizationInfo");
    let mut rows =
        vec![unsafe { std::mem::zeroed::<nvml_wrapper_sys::bindings::nvmlProcessUtilizationInfo_v1_t>() }; 8];
    let mut info = nvml_wrapper_sys::bindings::nvmlProcessesUtilizationInfo_t {
        version: 0x0100_0018,
        processSamplesCount: 8,
        lastSeenTimeStamp: 0,
        procUtilArray: rows.as_mut_ptr(),
    };
    assert_eq!(unsafe { call(device, &mut info) }, SUCCESS);
    assert_eq!(info.processSamplesCount, 3);
    let sm: Vec<(u32, u32)> = rows[..3].iter().map(|r| (r.pid, r.smUtil)).collect();
    assert_eq!(sm, [(501, 30), (502, 40), (503, 50)]);
    info.version = 1;
    assert_eq!(unsafe { call(device, &mut info) }, ARGUMENT_VERSION_MISMATCH);
}

const XIDS: &str = r#"
[meta]
version = 1
[clock]
mode = "manual"
start = 10.0
[[gpu]]
name = "Sim GPU zero"
[[gpu.xid]]
at = 5.0
xid = 13
[[gpu.xid]]
at = 20.0
xid = 48
[[gpu.xid]]
at = 30.0
xid = 63
[[gpu.xid]]
at = 30.0
xid = 64
[[gpu]]
name = "Sim GPU one, no events"
events = false
[[gpu]]
name = "Sim GPU two"
[[gpu.xid]]
at = 25.0
xid = 94
[[gpu.fault]]
field = "*"
error = "GPU_IS_LOST"
from = 40.0
"#;

type EventSet = *mut c_void;

#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct EventData {
    device: usize,
    event_type: c_ulonglong,
    event_data: c_ulonglong,
    gpu_instance: c_uint,
    compute_instance: c_uint,
}

const TIMEOUT: u32 = 10;
const NOT_SUPPORTED: u32 = 3;
const XID_EVENT: c_ulonglong = 0x8;

#[test]
fn xid_errors_arrive_through_an_event_set_in_order_once_each() {
    let sim = Sim::load(XIDS);
    sim.init();
    let devices: Vec<Device> = (0..3).map(|i| sim.handle(i).1).collect();
    let mut set: EventSet = std::ptr::null_mut();
    let create = sim.sym::<unsafe extern "C" fn(*mut EventSet) -> u32>("nvmlEventSetCreate");
    assert_eq!(unsafe { create(&mut set) }, SUCCESS);
    let supported = |device| {
        let mut types: c_ulonglong = 0;
        let ret = unsafe {
            sim.sym::<unsafe extern "C" fn(Device, *mut c_ulonglong) -> u32>(
                "nvmlDeviceGetSupportedEventTypes",
            )(device, &mut types)
        };
        (ret, types & XID_EVENT)
    };
    assert_eq!(supported(devices[0]), (SUCCESS, XID_EVENT));
    assert_eq!(supported(devices[1]).0, NOT_SUPPORTED);
    let register = |device| unsafe {
        sim.sym::<unsafe extern "C" fn(Device, c_ulonglong, EventSet) -> u32>("nvmlDeviceRegisterEvents")(
            device, XID_EVENT, set,
        )
    };
    assert_eq!(register(devices[0]), SUCCESS);
    assert_eq!(register(devices[1]), NOT_SUPPORTED, "no events on this GPU");
    assert_eq!(
        register(devices[2]),
        SUCCESS,
        "the set is still usable after a refusal"
    );
    let wait = |timeout_ms: c_uint| {
        let mut data = EventData::default();
        let ret = unsafe {
            sim.sym::<unsafe extern "C" fn(EventSet, *mut EventData, c_uint) -> u32>("nvmlEventSetWait_v2")(
                set, &mut data, timeout_ms,
            )
        };
        (ret, data.device, data.event_type, data.event_data)
    };
    let gpu = |i: usize| devices[i] as usize;
    // At 10 s: the Xid of 5 s was before the set existed.
    assert_eq!(wait(30).0, TIMEOUT);
    sim.set_time_ms(22_000);
    assert_eq!(wait(30), (SUCCESS, gpu(0), XID_EVENT, 48));
    assert_eq!(wait(30).0, TIMEOUT, "each is delivered once");
    sim.set_time_ms(27_000);
    assert_eq!(wait(30), (SUCCESS, gpu(2), XID_EVENT, 94));
    // 63 and 64 came before this wait: "If there are multiple XID errors generated before
    // nvmlEventSetWait is invoked then the last seen XID error type will be returned for
    // all XID error events" (nvml.h).
    sim.set_time_ms(35_000);
    assert_eq!(wait(30), (SUCCESS, gpu(0), XID_EVENT, 64));
    assert_eq!(wait(30), (SUCCESS, gpu(0), XID_EVENT, 64));
    assert_eq!(wait(30).0, TIMEOUT);
    sim.set_time_ms(40_000);
    assert_eq!(wait(30).0, GPU_IS_LOST, "a registered GPU fell off the bus");
    let free = sim.sym::<unsafe extern "C" fn(EventSet) -> u32>("nvmlEventSetFree");
    assert_eq!(unsafe { free(set) }, SUCCESS);
    assert_eq!(unsafe { free(set) }, INVALID_ARGUMENT, "freed already");
    assert_eq!(wait(30).0, INVALID_ARGUMENT);
}

#[test]
fn xid_79_is_refused_in_a_scenario_as_nvml_does_not_deliver_it() {
    let sim = Sim::load(&XIDS.replace("xid = 94", "xid = 79"));
    assert_ne!(sim.init(), SUCCESS, "Xid 79 is a GPU_IS_LOST fault, not an event");
}

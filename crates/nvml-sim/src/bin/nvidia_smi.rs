//! A small `nvidia-smi` for the simulated machine: only `--query-gpu=...`,
//! `--query-compute-apps=...` and `--format=csv[,noheader][,nounits]`.
//!
//! Like the real tool it loads `libnvidia-ml.so.1` through the dynamic loader
//! (`LD_LIBRARY_PATH`) and reads every value through the NVML C ABI, with its own calls
//! (not nvml-wrapper's), so `gputop validate` is tested against an independent client.
//! Output formats follow the real tool: `[N/A]`, `[Not Supported]`, MiB, W, MHz, `P0`.

use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong, c_void};
use std::process::ExitCode;

use libloading::{Library, Symbol};

type Device = *mut c_void;

const NOT_SUPPORTED: u32 = 3;
const INSUFFICIENT_SIZE: u32 = 7;

const GPU_FIELDS: &[&str] = &[
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "driver_version",
    "utilization.gpu",
    "utilization.memory",
    "memory.total",
    "memory.used",
    "memory.free",
    "temperature.gpu",
    "temperature.memory",
    "power.draw",
    "power.limit",
    "pstate",
    "fan.speed",
    "clocks.gr",
    "clocks.sm",
    "clocks.mem",
];
const APP_FIELDS: &[&str] = &["gpu_uuid", "pid", "used_memory", "process_name"];

/// What the user asked for.
struct Request {
    gpu_fields: Vec<String>,
    app_fields: Vec<String>,
    header: bool,
    units: bool,
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("{message}");
    eprintln!(
        "Usage: nvidia-smi --query-gpu=FIELDS | --query-compute-apps=FIELDS --format=csv[,noheader][,nounits]"
    );
    ExitCode::from(2)
}

fn parse_args() -> Result<Request, String> {
    let mut request = Request {
        gpu_fields: Vec::new(),
        app_fields: Vec::new(),
        header: true,
        units: true,
    };
    let mut format_seen = false;
    for arg in std::env::args().skip(1) {
        let split = |list: &str| list.split(',').map(|f| f.trim().to_string()).collect::<Vec<_>>();
        if let Some(list) = arg.strip_prefix("--query-gpu=") {
            request.gpu_fields = split(list);
        } else if let Some(list) = arg.strip_prefix("--query-compute-apps=") {
            request.app_fields = split(list);
        } else if let Some(format) = arg.strip_prefix("--format=") {
            let parts = split(format);
            if parts.first().map(String::as_str) != Some("csv") {
                return Err(format!("Invalid format: {format}"));
            }
            for part in &parts[1..] {
                match part.as_str() {
                    "noheader" => request.header = false,
                    "nounits" => request.units = false,
                    other => return Err(format!("Invalid format option: {other}")),
                }
            }
            format_seen = true;
        } else {
            return Err(format!("Unsupported argument: {arg}"));
        }
    }
    if request.gpu_fields.is_empty() == request.app_fields.is_empty() || !format_seen {
        return Err("Give one of --query-gpu and --query-compute-apps, and --format".into());
    }
    let known = |fields: &[String], all: &[&str]| fields.iter().find(|f| !all.contains(&f.as_str())).cloned();
    if let Some(bad) =
        known(&request.gpu_fields, GPU_FIELDS).or_else(|| known(&request.app_fields, APP_FIELDS))
    {
        return Err(format!("Field \"{bad}\" is not a valid field to query."));
    }
    Ok(request)
}

/// The loaded library and typed access to its symbols.
struct Nvml {
    lib: Library,
}

impl Nvml {
    fn sym<T>(&self, name: &str) -> Option<Symbol<'_, T>> {
        // SAFETY: each caller names the C signature of the symbol it asks for.
        unsafe { self.lib.get(name.as_bytes()) }.ok()
    }

    fn u32_of(&self, name: &str, device: Device) -> Result<u32, u32> {
        let f = self
            .sym::<unsafe extern "C" fn(Device, *mut c_uint) -> u32>(name)
            .ok_or(NOT_SUPPORTED)?;
        let mut value = 0;
        // SAFETY: device handle from NVML, valid out-pointer.
        match unsafe { f(device, &mut value) } {
            0 => Ok(value),
            code => Err(code),
        }
    }

    /// One field value of `nvmlDeviceGetFieldValues`, read as an unsigned int.
    fn field_u32(&self, device: Device, field_id: c_uint) -> Result<u32, u32> {
        /// `nvmlFieldValue_t`: 40 bytes, the value's union last.
        #[repr(C)]
        struct FieldValue {
            field_id: c_uint,
            scope_id: c_uint,
            timestamp: i64,
            latency_usec: i64,
            value_type: c_uint,
            nvml_return: c_uint,
            value: u64,
        }
        let f = self
            .sym::<unsafe extern "C" fn(Device, c_int, *mut FieldValue) -> u32>("nvmlDeviceGetFieldValues")
            .ok_or(NOT_SUPPORTED)?;
        let mut value = FieldValue {
            field_id,
            scope_id: 0,
            timestamp: 0,
            latency_usec: 0,
            value_type: 0,
            nvml_return: 0,
            value: 0,
        };
        // SAFETY: device handle from NVML, one entry for a count of one.
        match unsafe { f(device, 1, &mut value) } {
            0 if value.nvml_return == 0 => Ok(value.value as u32),
            0 => Err(value.nvml_return),
            code => Err(code),
        }
    }

    fn u32_arg(&self, name: &str, device: Device, arg: c_uint) -> Result<u32, u32> {
        let f = self
            .sym::<unsafe extern "C" fn(Device, c_uint, *mut c_uint) -> u32>(name)
            .ok_or(NOT_SUPPORTED)?;
        let mut value = 0;
        // SAFETY: as above.
        match unsafe { f(device, arg, &mut value) } {
            0 => Ok(value),
            code => Err(code),
        }
    }

    fn text(&self, name: &str, device: Option<Device>) -> Result<String, u32> {
        let mut buf = [0 as c_char; 96];
        let ret = match device {
            Some(device) => {
                let f = self
                    .sym::<unsafe extern "C" fn(Device, *mut c_char, c_uint) -> u32>(name)
                    .ok_or(NOT_SUPPORTED)?;
                // SAFETY: a 96-byte buffer, as NVML's name and UUID calls want.
                unsafe { f(device, buf.as_mut_ptr(), 96) }
            }
            None => {
                let f = self
                    .sym::<unsafe extern "C" fn(*mut c_char, c_uint) -> u32>(name)
                    .ok_or(NOT_SUPPORTED)?;
                // SAFETY: as above.
                unsafe { f(buf.as_mut_ptr(), 96) }
            }
        };
        if ret != 0 {
            return Err(ret);
        }
        // SAFETY: NVML wrote a NUL-terminated string into the buffer.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// (total, used, free) in bytes, as nvidia-smi reports them.
    fn memory(&self, device: Device, includes_reserved: bool) -> Result<(u64, u64, u64), u32> {
        if includes_reserved {
            #[repr(C)]
            struct MemoryV1 {
                total: c_ulonglong,
                free: c_ulonglong,
                used: c_ulonglong,
            }
            let f = self
                .sym::<unsafe extern "C" fn(Device, *mut MemoryV1) -> u32>("nvmlDeviceGetMemoryInfo")
                .ok_or(NOT_SUPPORTED)?;
            let mut m = MemoryV1 {
                total: 0,
                free: 0,
                used: 0,
            };
            // SAFETY: the v1 layout: three u64.
            return match unsafe { f(device, &mut m) } {
                0 => Ok((m.total, m.used, m.free)),
                code => Err(code),
            };
        }
        #[repr(C)]
        struct MemoryV2 {
            version: c_uint,
            total: c_ulonglong,
            reserved: c_ulonglong,
            free: c_ulonglong,
            used: c_ulonglong,
        }
        let f = self
            .sym::<unsafe extern "C" fn(Device, *mut MemoryV2) -> u32>("nvmlDeviceGetMemoryInfo_v2")
            .ok_or(NOT_SUPPORTED)?;
        let mut m = MemoryV2 {
            version: 0x0200_0028,
            total: 0,
            reserved: 0,
            free: 0,
            used: 0,
        };
        // SAFETY: the v2 layout with its struct version.
        match unsafe { f(device, &mut m) } {
            0 => Ok((m.total, m.used, m.free)),
            code => Err(code),
        }
    }

    fn utilization(&self, device: Device) -> Result<(u32, u32), u32> {
        let f = self
            .sym::<unsafe extern "C" fn(Device, *mut [c_uint; 2]) -> u32>("nvmlDeviceGetUtilizationRates")
            .ok_or(NOT_SUPPORTED)?;
        let mut u = [0; 2];
        // SAFETY: nvmlUtilization_t is two u32.
        match unsafe { f(device, &mut u) } {
            0 => Ok((u[0], u[1])),
            code => Err(code),
        }
    }

    fn pci_bus_id(&self, device: Device) -> Result<String, u32> {
        let f = self
            .sym::<unsafe extern "C" fn(Device, *mut [u8; 68]) -> u32>("nvmlDeviceGetPciInfo_v3")
            .ok_or(NOT_SUPPORTED)?;
        let mut pci = [0u8; 68];
        // SAFETY: nvmlPciInfo_t is 68 bytes; busId is the 32 bytes at offset 36.
        match unsafe { f(device, &mut pci) } {
            0 => Ok(CStr::from_bytes_until_nul(&pci[36..])
                .map_or_else(|_| String::new(), |s| s.to_string_lossy().into_owned())),
            code => Err(code),
        }
    }

    fn option(&self, name: &str) -> u64 {
        let Some(f) = self.sym::<unsafe extern "C" fn(*const c_char) -> u64>("gputop_sim_smi_option") else {
            return 0;
        };
        let name = std::ffi::CString::new(name).unwrap_or_default();
        // SAFETY: a NUL-terminated name.
        unsafe { f(name.as_ptr()) }
    }

    fn compute_apps(&self, device: Device) -> Result<Vec<(u32, u64)>, u32> {
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Info {
            pid: c_uint,
            used: c_ulonglong,
            gpu_instance: c_uint,
            compute_instance: c_uint,
        }
        let f = self
            .sym::<unsafe extern "C" fn(Device, *mut c_uint, *mut Info) -> u32>(
                "nvmlDeviceGetComputeRunningProcesses_v3",
            )
            .ok_or(NOT_SUPPORTED)?;
        let mut count: c_uint = 0;
        // SAFETY: a size query with a NULL buffer, then a buffer of `count` entries.
        match unsafe { f(device, &mut count, std::ptr::null_mut()) } {
            0 => return Ok(Vec::new()),
            INSUFFICIENT_SIZE => {}
            code => return Err(code),
        }
        count += 4;
        let mut infos = vec![
            Info {
                pid: 0,
                used: 0,
                gpu_instance: 0,
                compute_instance: 0
            };
            count as usize
        ];
        match unsafe { f(device, &mut count, infos.as_mut_ptr()) } {
            0 => Ok(infos[..count as usize].iter().map(|i| (i.pid, i.used)).collect()),
            code => Err(code),
        }
    }

    fn process_name(&self, pid: u32) -> Option<String> {
        let f =
            self.sym::<unsafe extern "C" fn(c_uint, *mut c_char, c_uint) -> u32>("nvmlSystemGetProcessName")?;
        let mut buf = [0 as c_char; 256];
        // SAFETY: a 256-byte buffer.
        (unsafe { f(pid, buf.as_mut_ptr(), 256) } == 0).then(|| {
            unsafe { CStr::from_ptr(buf.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        })
    }
}

/// A value as nvidia-smi prints it: the number, or `[N/A]` / `[Not Supported]` / `[...]`.
fn show<T>(value: Result<T, u32>, unit: &str, units: bool, format: impl FnOnce(T) -> String) -> String {
    match value {
        Ok(v) if units && !unit.is_empty() => format!("{} {unit}", format(v)),
        Ok(v) => format(v),
        Err(NOT_SUPPORTED) => "[Not Supported]".into(),
        Err(15) => "[GPU is lost]".into(),
        Err(_) => "[N/A]".into(),
    }
}

const MIB: u64 = 1 << 20;

fn gpu_field(nvml: &Nvml, index: u32, device: Result<Device, u32>, field: &str, units: bool) -> String {
    let device = match (field, device) {
        ("index", _) => return index.to_string(),
        ("driver_version", _) => {
            return show(nvml.text("nvmlSystemGetDriverVersion", None), "", units, |v| v);
        }
        (_, Ok(device)) => device,
        (_, Err(code)) => return show::<u32>(Err(code), "", units, |v| v.to_string()),
    };
    let memory = || nvml.memory(device, nvml.option("memory_includes_reserved") != 0);
    match field {
        "uuid" => show(nvml.text("nvmlDeviceGetUUID", Some(device)), "", units, |v| v),
        "name" => show(nvml.text("nvmlDeviceGetName", Some(device)), "", units, |v| v),
        "pci.bus_id" => show(nvml.pci_bus_id(device), "", units, |v| v),
        "utilization.gpu" => show(nvml.utilization(device).map(|u| u.0), "%", units, |v| {
            v.to_string()
        }),
        "utilization.memory" => show(nvml.utilization(device).map(|u| u.1), "%", units, |v| {
            v.to_string()
        }),
        "memory.total" => show(memory().map(|m| m.0 / MIB), "MiB", units, |v| v.to_string()),
        "memory.used" => show(memory().map(|m| m.1 / MIB), "MiB", units, |v| v.to_string()),
        "memory.free" => show(memory().map(|m| m.2 / MIB), "MiB", units, |v| v.to_string()),
        "temperature.gpu" => show(
            nvml.u32_arg("nvmlDeviceGetTemperature", device, 0),
            "",
            units,
            |v| v.to_string(),
        ),
        // NVML_FI_DEV_MEMORY_TEMP.
        "temperature.memory" => show(nvml.field_u32(device, 82), "", units, |v| v.to_string()),
        "power.draw" => show(nvml.u32_of("nvmlDeviceGetPowerUsage", device), "W", units, |mw| {
            format!("{:.2}", f64::from(mw) / 1000.0)
        }),
        "power.limit" => show(
            nvml.u32_of("nvmlDeviceGetPowerManagementLimit", device),
            "W",
            units,
            |mw| format!("{:.2}", f64::from(mw) / 1000.0),
        ),
        "pstate" => show(
            nvml.u32_of("nvmlDeviceGetPerformanceState", device),
            "",
            units,
            |p| format!("P{p}"),
        ),
        "fan.speed" => show(
            nvml.u32_arg("nvmlDeviceGetFanSpeed_v2", device, 0),
            "%",
            units,
            |v| v.to_string(),
        ),
        "clocks.gr" => show(
            nvml.u32_arg("nvmlDeviceGetClockInfo", device, 0),
            "MHz",
            units,
            |v| v.to_string(),
        ),
        "clocks.sm" => show(
            nvml.u32_arg("nvmlDeviceGetClockInfo", device, 1),
            "MHz",
            units,
            |v| v.to_string(),
        ),
        "clocks.mem" => show(
            nvml.u32_arg("nvmlDeviceGetClockInfo", device, 2),
            "MHz",
            units,
            |v| v.to_string(),
        ),
        _ => "[N/A]".into(),
    }
}

fn main() -> ExitCode {
    let request = match parse_args() {
        Ok(request) => request,
        Err(message) => return usage_error(&message),
    };
    const NO_DRIVER: &str = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. \
                             Make sure that the latest NVIDIA driver is installed and running.";
    // SAFETY: loading the NVML library, whose initialisation is in nvmlInit_v2.
    let Ok(lib) = (unsafe { Library::new("libnvidia-ml.so.1") }) else {
        eprintln!("{NO_DRIVER}");
        return ExitCode::from(9);
    };
    let nvml = Nvml { lib };
    let init = nvml.sym::<unsafe extern "C" fn() -> u32>("nvmlInit_v2");
    // SAFETY: nvmlInit_v2 takes no arguments.
    if init.is_none_or(|init| unsafe { init() } != 0) {
        eprintln!("{NO_DRIVER}");
        return ExitCode::from(9);
    }
    let mut count: c_uint = 0;
    if let Some(f) = nvml.sym::<unsafe extern "C" fn(*mut c_uint) -> u32>("nvmlDeviceGetCount_v2") {
        // SAFETY: a valid out-pointer.
        unsafe { f(&mut count) };
    }
    let handle = |index: u32| -> Result<Device, u32> {
        let f = nvml
            .sym::<unsafe extern "C" fn(c_uint, *mut Device) -> u32>("nvmlDeviceGetHandleByIndex_v2")
            .ok_or(NOT_SUPPORTED)?;
        let mut device = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        match unsafe { f(index, &mut device) } {
            0 => Ok(device),
            code => Err(code),
        }
    };
    let mut out = String::new();
    if !request.gpu_fields.is_empty() {
        if request.header {
            out.push_str(&request.gpu_fields.join(", "));
            out.push('\n');
        }
        for index in 0..count {
            let row: Vec<String> = request
                .gpu_fields
                .iter()
                .map(|f| gpu_field(&nvml, index, handle(index), f, request.units))
                .collect();
            out.push_str(&row.join(", "));
            out.push('\n');
        }
    } else {
        if request.header {
            out.push_str(&request.app_fields.join(", "));
            out.push('\n');
        }
        for index in 0..count {
            let Ok(device) = handle(index) else { continue };
            let uuid = nvml.text("nvmlDeviceGetUUID", Some(device)).unwrap_or_default();
            for (pid, used) in nvml.compute_apps(device).unwrap_or_default() {
                let row: Vec<String> = request
                    .app_fields
                    .iter()
                    .map(|f| match f.as_str() {
                        "gpu_uuid" => uuid.clone(),
                        "pid" => pid.to_string(),
                        "used_memory" if used == u64::MAX => "[N/A]".into(),
                        "used_memory" if request.units => format!("{} MiB", used / MIB),
                        "used_memory" => (used / MIB).to_string(),
                        _ => nvml.process_name(pid).unwrap_or_else(|| "[N/A]".into()),
                    })
                    .collect();
                out.push_str(&row.join(", "));
                out.push('\n');
            }
        }
    }
    print!("{out}");
    if let Some(shutdown) = nvml.sym::<unsafe extern "C" fn() -> u32>("nvmlShutdown") {
        // SAFETY: balanced with the init above.
        unsafe { shutdown() };
    }
    ExitCode::SUCCESS
}

//! The least work gputop's main screen needs, as a yardstick for `bench/peers.sh`. Every
//! refresh it makes the reads that screen shows and nothing else, sorts the process rows by
//! GPU memory, and draws nothing:
//!
//! - per GPU: utilisation, memory, temperature, power, graphics and memory clocks, fan,
//!   performance state, the compute and graphics process lists (one call each, into a buffer
//!   kept between refreshes) and the processes' utilisation since the last sample;
//! - per process: its `/proc/PID/stat`, kept open and read again from the start; its command
//!   line and owner once, when it first appears;
//! - `/proc/stat`, `/proc/meminfo` and `/proc/loadavg`, kept open, once a refresh.
//!
//! What gputop spends beyond this program is its own work: drawing, history, alerts, copies.
//!
//!     gputop-floor [--nvml-lib PATH] [--interval SECONDS] [--refreshes N]

use std::collections::HashMap;
use std::ffi::{OsStr, c_uint};
use std::fs::File;
use std::hint::black_box;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::time::{Duration, Instant};

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlProcessInfo_v2_t, nvmlProcessUtilizationSample_t, nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE,
};

/// What the command line asks for.
struct Options {
    library: Option<String>,
    interval: Duration,
    /// Stop after this many refreshes (0: run until killed).
    refreshes: u64,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        library: None,
        interval: Duration::from_secs(1),
        refreshes: 0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--nvml-lib" => options.library = Some(value()?),
            "--interval" => {
                let seconds: f64 = value()?.parse().map_err(|_| "--interval: not a number")?;
                options.interval =
                    Duration::try_from_secs_f64(seconds).map_err(|_| "--interval: out of range")?;
            }
            "--refreshes" => options.refreshes = value()?.parse().map_err(|_| "--refreshes: not a number")?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(options)
}

/// One GPU's readings of a refresh, kept so that the reads cannot be optimised away.
#[derive(Debug, Default)]
#[expect(
    dead_code,
    reason = "kept for black_box: what a screen would show, never shown"
)]
struct GpuRow {
    utilization: Option<(u32, u32)>,
    memory: Option<(u64, u64)>,
    temperature: Option<u32>,
    power_mw: Option<u32>,
    clocks: (Option<u32>, Option<u32>),
    fan: Option<u32>,
    performance_state: Option<u32>,
}

/// A process row: what the screen shows of it.
#[derive(Debug)]
#[expect(
    dead_code,
    reason = "kept for black_box: what a screen would show, never shown"
)]
struct Process {
    stat: Option<File>,
    command: String,
    uid: Option<u32>,
    gpu_memory: u64,
    sm: u32,
    cpu_ticks: u64,
    /// The refresh that last saw it on a GPU.
    seen: u64,
}

impl Process {
    /// A process seen for the first time: its command line and owner, once.
    fn new(pid: u32) -> Self {
        let command = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        Self {
            stat: File::open(format!("/proc/{pid}/stat")).ok(),
            command: String::from_utf8_lossy(&command).replace('\0', " "),
            uid: std::fs::metadata(format!("/proc/{pid}")).ok().map(|m| m.uid()),
            gpu_memory: 0,
            sm: 0,
            cpu_ticks: 0,
            seen: 0,
        }
    }

    /// Reads its `stat` again: user and system ticks (fields 14 and 15).
    fn read_stat(&mut self, buffer: &mut [u8]) {
        let Some(file) = &self.stat else { return };
        let Ok(n) = file.read_at(buffer, 0) else { return };
        let text = &buffer[..n];
        let after_name = text.iter().rposition(|&b| b == b')').map_or(0, |i| i + 2);
        let mut fields = text[after_name..].split(|&b| b == b' ');
        let number = |field: Option<&[u8]>| {
            field
                .and_then(|f| std::str::from_utf8(f).ok())
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        // After the name: state is field 3, utime 14 and stime 15.
        let utime = number(fields.nth(11));
        let stime = number(fields.next());
        self.cpu_ticks = utime + stime;
    }
}

/// Calls a list function with `buffer`, growing it while the driver says it is too small;
/// returns the entries written. One call when the buffer is large enough, as it stays.
fn fill<T: Copy>(
    buffer: &mut Vec<T>,
    zero: T,
    mut call: impl FnMut(&mut c_uint, *mut T) -> u32,
) -> Result<usize, NvmlError> {
    loop {
        let mut count = buffer.len() as c_uint;
        let code = call(&mut count, buffer.as_mut_ptr());
        if code == nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
            buffer.resize((count as usize).max(buffer.len()) * 2, zero);
            continue;
        }
        nvml_try(code)?;
        return Ok(count as usize);
    }
}

const NO_PROCESS: nvmlProcessInfo_v2_t = nvmlProcessInfo_v2_t {
    pid: 0,
    usedGpuMemory: 0,
    gpuInstanceId: 0,
    computeInstanceId: 0,
};

const NO_SAMPLE: nvmlProcessUtilizationSample_t = nvmlProcessUtilizationSample_t {
    pid: 0,
    timeStamp: 0,
    smUtil: 0,
    memUtil: 0,
    encUtil: 0,
    decUtil: 0,
};

/// The lists' buffers and the process-utilisation mark of one GPU, kept between refreshes.
struct Lists {
    processes: Vec<nvmlProcessInfo_v2_t>,
    samples: Vec<nvmlProcessUtilizationSample_t>,
    last_sample: u64,
}

/// The compute and graphics processes of `device` (pid, used memory) and their SM use since
/// the last call, into `out`.
fn read_processes(
    device: &Device<'_>,
    lists: &mut Lists,
    out: &mut Vec<(u32, u64, u32)>,
) -> Result<(), NvmlError> {
    let lib = device.nvml().lib();
    // SAFETY: the handle is passed back to the library that made it, still initialised.
    let handle = unsafe { device.handle() };
    let first = out.len();
    for symbol in [
        &lib.nvmlDeviceGetComputeRunningProcesses_v2,
        &lib.nvmlDeviceGetGraphicsRunningProcesses_v2,
    ] {
        let list = *nvml_sym(symbol.as_ref())?;
        // SAFETY: `buffer` holds `*count` entries of the layout this symbol writes.
        let n = fill(&mut lists.processes, NO_PROCESS, |count, buffer| unsafe {
            list(handle, count, buffer)
        })?;
        out.extend(lists.processes[..n].iter().map(|p| (p.pid, p.usedGpuMemory, 0)));
    }
    let utilization = *nvml_sym(lib.nvmlDeviceGetProcessUtilization.as_ref())?;
    let since = lists.last_sample;
    // SAFETY: as above; the buffer holds `*count` samples.
    let n = match fill(&mut lists.samples, NO_SAMPLE, |count, buffer| unsafe {
        utilization(handle, buffer, count, since)
    }) {
        Ok(n) => n,
        // No sample newer than `since`: nothing ran.
        Err(NvmlError::NotFound) => 0,
        Err(e) => return Err(e),
    };
    for sample in &lists.samples[..n] {
        lists.last_sample = lists.last_sample.max(sample.timeStamp);
        if let Some(row) = out[first..].iter_mut().find(|row| row.0 == sample.pid) {
            row.2 = sample.smUtil;
        }
    }
    Ok(())
}

fn read_gpu(device: &Device<'_>) -> GpuRow {
    GpuRow {
        utilization: device.utilization_rates().ok().map(|u| (u.gpu, u.memory)),
        memory: device.memory_info().ok().map(|m| (m.used, m.total)),
        temperature: device.temperature(TemperatureSensor::Gpu).ok(),
        power_mw: device.power_usage().ok(),
        clocks: (
            device.clock_info(Clock::Graphics).ok(),
            device.clock_info(Clock::Memory).ok(),
        ),
        fan: device.fan_speed(0).ok(),
        performance_state: device.performance_state().ok().map(|p| p as u32),
    }
}

fn main() {
    let options = match options() {
        Ok(options) => options,
        Err(why) => {
            eprintln!("gputop-floor: {why}");
            std::process::exit(2);
        }
    };
    let mut builder = Nvml::builder();
    if let Some(library) = &options.library {
        builder.lib_path(OsStr::new(library));
    }
    let nvml = match builder.init() {
        Ok(nvml) => nvml,
        Err(e) => {
            eprintln!("gputop-floor: NVML: {e}");
            std::process::exit(1);
        }
    };
    let devices: Vec<Device<'_>> = (0..nvml.device_count().unwrap_or(0))
        .filter_map(|i| nvml.device_by_index(i).ok())
        .collect();
    let mut lists: Vec<Lists> = devices
        .iter()
        .map(|_| Lists {
            processes: vec![NO_PROCESS; 64],
            samples: vec![NO_SAMPLE; 128],
            last_sample: 0,
        })
        .collect();
    let host: Vec<File> = ["/proc/stat", "/proc/meminfo", "/proc/loadavg"]
        .iter()
        .filter_map(|path| File::open(path).ok())
        .collect();
    let mut processes: HashMap<u32, Process> = HashMap::new();
    let mut found: Vec<(u32, u64, u32)> = Vec::new();
    let mut gpus: Vec<GpuRow> = Vec::with_capacity(devices.len());
    let mut buffer = vec![0u8; 16 * 1024];
    let mut rows: Vec<u32> = Vec::new();
    let started = Instant::now();
    for refresh in 1u64.. {
        gpus.clear();
        found.clear();
        for (device, list) in devices.iter().zip(&mut lists) {
            gpus.push(read_gpu(device));
            let _ = read_processes(device, list, &mut found);
        }
        for &(pid, memory, sm) in &found {
            let process = processes.entry(pid).or_insert_with(|| Process::new(pid));
            process.gpu_memory = memory;
            process.sm = sm;
            process.seen = refresh;
            process.read_stat(&mut buffer);
        }
        processes.retain(|_, p| p.seen == refresh);
        for file in &host {
            let n = file.read_at(&mut buffer, 0).unwrap_or(0);
            black_box(&buffer[..n]);
        }
        rows.clear();
        rows.extend(processes.keys());
        rows.sort_unstable_by_key(|pid| std::cmp::Reverse(processes[pid].gpu_memory));
        black_box((&gpus, &rows, &processes));
        if options.refreshes != 0 && refresh >= options.refreshes {
            break;
        }
        let next = started + options.interval * (refresh as u32);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}

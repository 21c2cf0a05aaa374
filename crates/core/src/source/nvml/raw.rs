//! NVML reads through nvml-wrapper-sys that nvml-wrapper does not make the way real drivers
//! need: lists in one call, process lists in the layout each driver writes, and the older
//! calls old drivers have.
//!
//! nvml-wrapper asks the driver for a count and then fetches: two calls per list, every
//! refresh, on every GPU. These pass a buffer large enough for the usual answer and ask again
//! only when the driver says it was too small, halving those calls.

use std::ffi::c_uint;

use nvml_wrapper::Device as NvmlDevice;
use nvml_wrapper::EventSet;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{SampleValueType, Sampling};
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use nvml_wrapper::struct_wrappers::device::{ProcessInfo, ProcessUtilizationSample, Sample};
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlMemory_t, nvmlProcessInfo_t, nvmlProcessInfo_v1_t, nvmlProcessInfo_v2_t,
    nvmlProcessUtilizationInfo_v1_t, nvmlProcessUtilizationSample_t, nvmlProcessesUtilizationInfo_t,
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE, nvmlReturn_t, nvmlSample_t, nvmlValueType_t,
};

/// Samples one call fetches: more than a sample buffer holds (about 100).
const SAMPLE_CAPACITY: usize = 128;

/// Entries of a process list's first buffer.
const LIST_CAPACITY: usize = 64;

/// Per-process utilization samples' first buffer.
const UTILIZATION_CAPACITY: usize = 256;

/// How often a list that grew between calls is asked for again.
const ATTEMPTS: usize = 4;

/// One device's answer buffers, kept between refreshes so that a refresh neither allocates
/// nor zeroes them. Each is filled with zeroes when first used or grown, so what a driver
/// leaves unwritten is never uninitialised.
#[derive(Clone, Default)]
pub(super) struct Buffers {
    samples: Vec<nvmlSample_t>,
    /// Compute, graphics and MPS.
    lists: [Vec<ListSlot>; 3],
    utilization: Vec<nvmlProcessUtilizationInfo_v1_t>,
    legacy_utilization: Vec<nvmlProcessUtilizationSample_t>,
}

impl std::fmt::Debug for Buffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Their lengths: NVML's sample type has no Debug of its own.
        f.debug_struct("Buffers")
            .field("samples", &self.samples.len())
            .field("lists", &self.lists.each_ref().map(Vec::len))
            .field("utilization", &self.utilization.len())
            .field("legacy_utilization", &self.legacy_utilization.len())
            .finish()
    }
}

/// Calls `fetch(count, buffer)` with `buffer` (first made `initial` entries long), growing it
/// to the count the driver asks for while it answers INSUFFICIENT_SIZE. Returns the filled
/// entries.
fn fetch_list<T: Copy>(
    zero: T,
    buffer: &mut Vec<T>,
    initial: usize,
    mut fetch: impl FnMut(&mut c_uint, *mut T) -> nvmlReturn_t,
) -> Result<&[T], NvmlError> {
    if buffer.is_empty() {
        buffer.resize(initial.max(1), zero);
    }
    for _ in 0..ATTEMPTS {
        let mut count = buffer.len() as c_uint;
        let code = fetch(&mut count, buffer.as_mut_ptr());
        if code == nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
            // Room for the list as it is now, and for some growth before the next call.
            let grown = (count as usize).max(buffer.len()) * 2;
            buffer.resize(grown, zero);
            continue;
        }
        nvml_try(code)?;
        let filled = (count as usize).min(buffer.len());
        return Ok(&buffer[..filled]);
    }
    Err(NvmlError::InsufficientSize(Some(buffer.len())))
}

fn handle(device: &NvmlDevice<'_>) -> nvmlDevice_t {
    // SAFETY: reading the raw handle has no preconditions; it is passed back to the same
    // library, still initialised, while `device` lives.
    unsafe { device.handle() }
}

/// Registers `device` for `events` on `set`. nvml-wrapper's own `register_events` frees the
/// whole set when one GPU refuses (NOT_SUPPORTED on an old board or a virtual GPU), which
/// would end every other GPU's events too; this leaves the set as it is.
pub(super) fn register_events(
    device: &NvmlDevice<'_>,
    events: EventTypes,
    set: &EventSet<'_>,
) -> Result<(), NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceRegisterEvents.as_ref())?;
    // SAFETY: the device and the set come from this library, still initialised.
    nvml_try(unsafe { sym(handle(device), events.bits(), set.handle()) })
}

/// Samples of `sampling` newer than `since` (µs), oldest first.
pub(super) fn samples(
    device: &NvmlDevice<'_>,
    sampling: Sampling,
    since: u64,
    buffers: &mut Buffers,
) -> Result<Vec<Sample>, NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetSamples.as_ref())?;
    let mut value_type: nvmlValueType_t = 0;
    // SAFETY: nvmlSample_t is plain data; all-zero is a valid value.
    let zero: nvmlSample_t = unsafe { std::mem::zeroed() };
    let raw = fetch_list(zero, &mut buffers.samples, SAMPLE_CAPACITY, |count, buffer| {
        // SAFETY: `buffer` holds `*count` entries and the other pointers are valid.
        unsafe {
            sym(
                handle(device),
                sampling.as_c(),
                since,
                &mut value_type,
                count,
                buffer,
            )
        }
    })?;
    let value_type = SampleValueType::try_from(value_type)?;
    Ok(raw
        .iter()
        .map(|s| Sample::from_tag_and_struct(&value_type, *s))
        .collect())
}

/// Which running-process list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ProcessList {
    Compute,
    Graphics,
    Mps,
}

/// Which process-list symbols a driver has, and the entry size its answers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ProcessApi {
    /// `…RunningProcesses_v3`, whose entries are 24 bytes, or 32 on the drivers that added
    /// `usedGpuCcProtectedMemory` without a version bump.
    V3 { entry_bytes: usize },
    /// `…RunningProcesses_v2` (450.66 and later): 24-byte entries.
    V2,
    /// The unversioned calls of older drivers: 16-byte entries (pid, used memory).
    V1,
}

impl ProcessApi {
    fn entry_bytes(self) -> usize {
        match self {
            Self::V3 { entry_bytes } => entry_bytes,
            Self::V2 => 24,
            Self::V1 => 16,
        }
    }

    /// The next older API, for a driver that turns out to lack this one.
    pub(super) fn older(self) -> Option<Self> {
        match self {
            Self::V3 { .. } => Some(Self::V2),
            Self::V2 => Some(Self::V1),
            Self::V1 => None,
        }
    }
}

/// The largest entry any driver writes: buffers are sized for it, so a driver whose layout
/// was guessed wrong still writes inside them.
const MAX_ENTRY_BYTES: usize = 32;

type ListFn<T> = unsafe extern "C" fn(nvmlDevice_t, *mut c_uint, *mut T) -> nvmlReturn_t;

/// A process-list symbol of one of the three versions: each takes (device, count, array)
/// and they differ only in the entries they write.
#[derive(Clone, Copy)]
enum ListSymbol {
    V1(ListFn<nvmlProcessInfo_v1_t>),
    V2(ListFn<nvmlProcessInfo_v2_t>),
    V3(ListFn<nvmlProcessInfo_t>),
}

fn list_symbol(device: &NvmlDevice<'_>, list: ProcessList, api: ProcessApi) -> Result<ListSymbol, NvmlError> {
    let lib = device.nvml().lib();
    let (v1, v2, v3) = match list {
        ProcessList::Compute => (
            &lib.nvmlDeviceGetComputeRunningProcesses,
            &lib.nvmlDeviceGetComputeRunningProcesses_v2,
            &lib.nvmlDeviceGetComputeRunningProcesses_v3,
        ),
        ProcessList::Graphics => (
            &lib.nvmlDeviceGetGraphicsRunningProcesses,
            &lib.nvmlDeviceGetGraphicsRunningProcesses_v2,
            &lib.nvmlDeviceGetGraphicsRunningProcesses_v3,
        ),
        ProcessList::Mps => (
            &lib.nvmlDeviceGetMPSComputeRunningProcesses,
            &lib.nvmlDeviceGetMPSComputeRunningProcesses_v2,
            &lib.nvmlDeviceGetMPSComputeRunningProcesses_v3,
        ),
    };
    Ok(match api {
        ProcessApi::V1 => ListSymbol::V1(*nvml_sym(v1.as_ref())?),
        ProcessApi::V2 => ListSymbol::V2(*nvml_sym(v2.as_ref())?),
        ProcessApi::V3 { .. } => ListSymbol::V3(*nvml_sym(v3.as_ref())?),
    })
}

/// A slot of a process list's buffer: an entry of the largest layout, as 8-byte words for
/// alignment. NVML is told the count of these slots, and writes that many entries of its
/// own, never larger, layout.
type ListSlot = [u64; MAX_ENTRY_BYTES / 8];

/// A process list through `api`.
pub(super) fn processes(
    device: &NvmlDevice<'_>,
    list: ProcessList,
    api: ProcessApi,
    buffers: &mut Buffers,
) -> Result<Vec<ProcessInfo>, NvmlError> {
    let sym = list_symbol(device, list, api)?;
    let buffer = &mut buffers.lists[list as usize];
    let raw = fetch_list(ListSlot::default(), buffer, LIST_CAPACITY, |count, buffer| {
        let (device, array) = (handle(device), buffer.cast::<u8>());
        // SAFETY: `buffer` holds `*count` slots of MAX_ENTRY_BYTES, room for `*count`
        // entries of any layout.
        unsafe {
            match sym {
                ListSymbol::V1(f) => f(device, count, array.cast()),
                ListSymbol::V2(f) => f(device, count, array.cast()),
                ListSymbol::V3(f) => f(device, count, array.cast()),
            }
        }
    })?;
    let stride = api.entry_bytes();
    // SAFETY: the words are initialised memory of `raw.len() * MAX_ENTRY_BYTES` bytes, and
    // any byte is a valid u8.
    let bytes = unsafe { std::slice::from_raw_parts(raw.as_ptr().cast::<u8>(), raw.len() * MAX_ENTRY_BYTES) };
    Ok(bytes
        .chunks_exact(stride)
        .take(raw.len())
        .map(parse_entry)
        .collect())
}

/// One process entry: pid @0, used memory @8, and in 24- and 32-byte entries the GPU and
/// compute instance @16 and @20.
fn parse_entry(entry: &[u8]) -> ProcessInfo {
    let u32_at = |at: usize| u32::from_ne_bytes(entry[at..at + 4].try_into().unwrap_or([0; 4]));
    let used = u64::from_ne_bytes(entry[8..16].try_into().unwrap_or([0; 8]));
    let (gpu_instance, compute_instance) = match entry.len() {
        16 => (u32::MAX, u32::MAX),
        _ => (u32_at(16), u32_at(20)),
    };
    ProcessInfo::from(nvmlProcessInfo_t {
        pid: u32_at(0),
        usedGpuMemory: used,
        gpuInstanceId: gpu_instance,
        computeInstanceId: compute_instance,
    })
}

/// Per-process utilization samples newer than `since` (µs), through
/// `nvmlDeviceGetProcessesUtilizationInfo` where the driver has it (R550+; the legacy call
/// was reported reading 0 on Blackwell), else `nvmlDeviceGetProcessUtilization`.
pub(super) fn process_utilization(
    device: &NvmlDevice<'_>,
    since: u64,
    buffers: &mut Buffers,
) -> Result<Vec<ProcessUtilizationSample>, NvmlError> {
    match processes_utilization_info(device, since, &mut buffers.utilization) {
        Err(error) if super::is_missing(&error) => {
            legacy_process_utilization(device, since, &mut buffers.legacy_utilization)
        }
        other => other,
    }
}

const PROCESSES_UTILIZATION_INFO_V1: c_uint = 0x0100_0018;

fn processes_utilization_info(
    device: &NvmlDevice<'_>,
    since: u64,
    buffer: &mut Vec<nvmlProcessUtilizationInfo_v1_t>,
) -> Result<Vec<ProcessUtilizationSample>, NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetProcessesUtilizationInfo.as_ref())?;
    // SAFETY: plain data; all-zero is a valid value.
    let zero: nvmlProcessUtilizationInfo_v1_t = unsafe { std::mem::zeroed() };
    let raw = fetch_list(zero, buffer, UTILIZATION_CAPACITY, |count, buffer| {
        let mut info = nvmlProcessesUtilizationInfo_t {
            version: PROCESSES_UTILIZATION_INFO_V1,
            processSamplesCount: *count,
            lastSeenTimeStamp: since,
            procUtilArray: buffer,
        };
        // SAFETY: `info` points at a buffer of `*count` entries.
        let code = unsafe { sym(handle(device), &mut info) };
        *count = info.processSamplesCount;
        code
    })?;
    Ok(raw
        .iter()
        .map(|s| ProcessUtilizationSample {
            pid: s.pid,
            timestamp: s.timeStamp,
            sm_util: s.smUtil,
            mem_util: s.memUtil,
            enc_util: s.encUtil,
            dec_util: s.decUtil,
        })
        .collect())
}

fn legacy_process_utilization(
    device: &NvmlDevice<'_>,
    since: u64,
    buffer: &mut Vec<nvmlProcessUtilizationSample_t>,
) -> Result<Vec<ProcessUtilizationSample>, NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetProcessUtilization.as_ref())?;
    // SAFETY: nvmlProcessUtilizationSample_t is plain data; all-zero is a valid value.
    let zero: nvmlProcessUtilizationSample_t = unsafe { std::mem::zeroed() };
    let raw = fetch_list(zero, buffer, UTILIZATION_CAPACITY, |count, buffer| {
        // SAFETY: `buffer` holds `*count` entries.
        unsafe { sym(handle(device), buffer, count, since) }
    })?;
    Ok(raw.iter().copied().map(ProcessUtilizationSample::from).collect())
}

/// Memory through the v1 call, for drivers before R510 that lack `_v2`. Its `used` counts
/// what newer drivers report as reserved, so nothing is reported reserved.
pub(super) fn memory_v1(device: &NvmlDevice<'_>) -> Result<(u64, u64, u64), NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetMemoryInfo.as_ref())?;
    // SAFETY: nvmlMemory_t is plain data; all-zero is a valid value.
    let mut memory: nvmlMemory_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid handle and a pointer to one nvmlMemory_t.
    nvml_try(unsafe { sym(handle(device), &mut memory) })?;
    Ok((memory.total, memory.used, memory.free))
}

/// Row remapping (`nvmlDeviceGetRemappedRows`, Ampere and newer), which nvml-wrapper does
/// not wrap.
pub(super) fn remapped_rows(device: &NvmlDevice<'_>) -> Result<crate::model::RemappedRows, NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetRemappedRows.as_ref())?;
    let (mut correctable, mut uncorrectable, mut pending, mut failure) = (0, 0, 0, 0);
    // SAFETY: a valid handle and four pointers to unsigned ints.
    nvml_try(unsafe {
        sym(
            handle(device),
            &mut correctable,
            &mut uncorrectable,
            &mut pending,
            &mut failure,
        )
    })?;
    Ok(crate::model::RemappedRows {
        correctable,
        uncorrectable,
        pending: pending != 0,
        failure: failure != 0,
    })
}

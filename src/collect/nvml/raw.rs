//! Single-call NVML reads through nvml-wrapper-sys, for the lists read every refresh.
//!
//! nvml-wrapper asks the driver for a count and then fetches: two calls per list, every
//! refresh, on every GPU. These pass a buffer large enough for the usual answer and ask again
//! only when the driver says it was too small, halving those calls.

use std::ffi::c_uint;

use nvml_wrapper::Device as NvmlDevice;
use nvml_wrapper::enum_wrappers::device::{SampleValueType, Sampling};
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use nvml_wrapper::struct_wrappers::device::{ProcessInfo, ProcessUtilizationSample, Sample};
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlProcessInfo_t, nvmlProcessUtilizationSample_t,
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE, nvmlReturn_t, nvmlSample_t, nvmlValueType_t,
};

/// Samples one call fetches: more than a sample buffer holds (about 100).
const SAMPLE_CAPACITY: usize = 128;

/// How often a list that grew between calls is asked for again.
const ATTEMPTS: usize = 4;

/// Calls `fetch(count, buffer)` with a buffer of `capacity` entries, growing it to the count
/// the driver asks for while it answers INSUFFICIENT_SIZE. Returns the filled entries.
fn fetch_list<T: Copy>(
    zero: T,
    capacity: &mut usize,
    mut fetch: impl FnMut(&mut c_uint, *mut T) -> nvmlReturn_t,
) -> Result<Vec<T>, NvmlError> {
    for _ in 0..ATTEMPTS {
        let mut buffer = vec![zero; (*capacity).max(1)];
        let mut count = buffer.len() as c_uint;
        let code = fetch(&mut count, buffer.as_mut_ptr());
        if code == nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
            // Room for the list as it is now, and for some growth before the next call.
            *capacity = (count as usize).max(*capacity) * 2;
            continue;
        }
        nvml_try(code)?;
        buffer.truncate(count as usize);
        return Ok(buffer);
    }
    Err(NvmlError::InsufficientSize(Some(*capacity)))
}

fn handle(device: &NvmlDevice<'_>) -> nvmlDevice_t {
    // SAFETY: reading the raw handle has no preconditions; it is passed back to the same
    // library, still initialised, while `device` lives.
    unsafe { device.handle() }
}

/// Samples of `sampling` newer than `since` (µs), oldest first.
pub fn samples(device: &NvmlDevice<'_>, sampling: Sampling, since: u64) -> Result<Vec<Sample>, NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetSamples.as_ref())?;
    let mut value_type: nvmlValueType_t = 0;
    let mut capacity = SAMPLE_CAPACITY;
    // SAFETY: nvmlSample_t is plain data; all-zero is a valid value.
    let zero: nvmlSample_t = unsafe { std::mem::zeroed() };
    let raw = fetch_list(zero, &mut capacity, |count, buffer| {
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
        .into_iter()
        .map(|s| Sample::from_tag_and_struct(&value_type, s))
        .collect())
}

/// Which running-process list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessList {
    Compute,
    Graphics,
    Mps,
}

/// The `_v3` process list; `capacity` carries the buffer size between refreshes.
pub fn processes(
    device: &NvmlDevice<'_>,
    list: ProcessList,
    capacity: &mut usize,
) -> Result<Vec<ProcessInfo>, NvmlError> {
    let lib = device.nvml().lib();
    let sym = nvml_sym(
        match list {
            ProcessList::Compute => &lib.nvmlDeviceGetComputeRunningProcesses_v3,
            ProcessList::Graphics => &lib.nvmlDeviceGetGraphicsRunningProcesses_v3,
            ProcessList::Mps => &lib.nvmlDeviceGetMPSComputeRunningProcesses_v3,
        }
        .as_ref(),
    )?;
    // SAFETY: nvmlProcessInfo_t is plain data; all-zero is a valid value.
    let zero: nvmlProcessInfo_t = unsafe { std::mem::zeroed() };
    let raw = fetch_list(zero, capacity, |count, buffer| {
        // SAFETY: `buffer` holds `*count` entries of the layout the `_v3` symbol writes.
        unsafe { sym(handle(device), count, buffer) }
    })?;
    Ok(raw.into_iter().map(ProcessInfo::from).collect())
}

/// Per-process utilization samples newer than `since` (µs); `capacity` as for `processes`.
pub fn process_utilization(
    device: &NvmlDevice<'_>,
    since: u64,
    capacity: &mut usize,
) -> Result<Vec<ProcessUtilizationSample>, NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetProcessUtilization.as_ref())?;
    // SAFETY: nvmlProcessUtilizationSample_t is plain data; all-zero is a valid value.
    let zero: nvmlProcessUtilizationSample_t = unsafe { std::mem::zeroed() };
    let raw = fetch_list(zero, capacity, |count, buffer| {
        // SAFETY: `buffer` holds `*count` entries.
        unsafe { sym(handle(device), buffer, count, since) }
    })?;
    Ok(raw.into_iter().map(ProcessUtilizationSample::from).collect())
}

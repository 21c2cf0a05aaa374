//! Xid errors through NVML's event API, on a thread of their own: one event set with every
//! GPU that offers Xid events, waited on with a timeout so the thread notices when it is
//! asked to stop. A GPU that cannot register (an old board or a virtual GPU answers
//! NOT_SUPPORTED) is left out with the reason; when the driver says a GPU was lost, the set
//! is made again from the GPUs that still answer.

use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, SystemTime};

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper_sys::bindings::nvmlDevice_t;

use super::{raw, unread};
use crate::model::{Reading, XidErrors, XidEvent};

/// Each GPU's Xid errors so far, as the thread counts them.
pub(super) type XidLog = Arc<Mutex<Vec<Reading<XidErrors>>>>;

/// How long one wait for an event lasts: how soon the thread notices it should stop.
const WAIT_MS: u32 = 500;

/// How long the thread rests after the driver fails a wait, instead of spinning on it.
const AFTER_FAILURE: Duration = Duration::from_secs(1);

/// The Xid code NVML gives an Xid it cannot name (nvml-wrapper's `XidError::Unknown`).
const UNKNOWN_XID: u32 = 999;

/// Starts the thread watching `count` GPUs; dropping the sender stops it.
pub(super) fn spawn(nvml: Arc<Nvml>, count: u32) -> Option<(XidLog, Sender<()>)> {
    let log: XidLog = Arc::new(Mutex::new(vec![
        Reading::failed("Xid events: not registered yet");
        count as usize
    ]));
    let (stop, stopped) = mpsc::channel();
    let shared = Arc::clone(&log);
    thread::Builder::new()
        .name("gputop-xid".into())
        .spawn(move || watch(&nvml, count, &shared, &stopped))
        .ok()?;
    Some((log, stop))
}

fn asked_to_stop(stopped: &Receiver<()>) -> bool {
    !matches!(stopped.try_recv(), Err(TryRecvError::Empty))
}

fn watch(nvml: &Nvml, count: u32, log: &Mutex<Vec<Reading<XidErrors>>>, stopped: &Receiver<()>) {
    let update = |index: usize, outcome: Result<(), &NvmlError>| {
        let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
        log[index] = match (outcome, &log[index]) {
            // Registered again after a lost GPU: the counts so far stay.
            (Ok(()), Reading::Value(counted)) => Reading::Value(counted.clone()),
            (Ok(()), _) => Reading::Value(XidErrors::default()),
            (Err(error), _) => unread(error),
        };
    };
    loop {
        let set = match nvml.create_event_set() {
            Ok(set) => set,
            Err(error) => {
                for index in 0..count as usize {
                    update(index, Err(&error));
                }
                return;
            }
        };
        let mut handles: Vec<Option<nvmlDevice_t>> = vec![None; count as usize];
        for index in 0..count {
            let registered = nvml.device_by_index(index).and_then(|device| {
                if !device
                    .supported_event_types()?
                    .contains(EventTypes::CRITICAL_XID_ERROR)
                {
                    return Err(NvmlError::NotSupported);
                }
                raw::register_events(&device, EventTypes::CRITICAL_XID_ERROR, &set)?;
                // SAFETY: reading the raw handle has no preconditions.
                Ok(unsafe { device.handle() })
            });
            handles[index as usize] = registered.as_ref().ok().copied();
            update(index as usize, registered.as_ref().map(|_| ()));
        }
        if handles.iter().all(Option::is_none) {
            // Nothing to wait on: the thread is done (the readings say why).
            return;
        }
        loop {
            if asked_to_stop(stopped) {
                return;
            }
            match set.wait(WAIT_MS) {
                Ok(event) => {
                    let xid = match event.event_data {
                        Some(XidError::Value(0)) | None => continue,
                        Some(XidError::Value(code)) => u32::try_from(code).unwrap_or(UNKNOWN_XID),
                        Some(XidError::Unknown) => UNKNOWN_XID,
                    };
                    // SAFETY: reading the raw handle has no preconditions.
                    let from = unsafe { event.device.handle() };
                    let Some(index) = handles.iter().position(|h| *h == Some(from)) else {
                        continue;
                    };
                    let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
                    if let Reading::Value(counted) = &mut log[index] {
                        counted.record(XidEvent::new(xid, SystemTime::now()));
                    }
                }
                Err(NvmlError::Timeout) => {}
                // A GPU fell off the bus: the set is made again without it.
                Err(NvmlError::GpuLost) => {
                    thread::sleep(AFTER_FAILURE);
                    break;
                }
                Err(_) => thread::sleep(AFTER_FAILURE),
            }
        }
    }
}

//! This machine's GPUs, whoever made them: NVIDIA's through NVML, AMD's and Intel's through
//! the kernel's DRM interfaces, in one readout. NVML's GPUs keep NVML's indexes; the DRM
//! GPUs follow them, in the kernel's order (`cardN`). Neither source sees the other's GPUs, so none is listed
//! twice; a machine without NVML is read through DRM alone.

use std::time::Duration;

use super::drm::DrmReader;
use super::nvml::{NvmlSource, NvmlUnusable};
use super::{Activity, Gauge, Reach, Readout};
use crate::host::roots;
use crate::model::{Device, Vendor};

/// The machine's GPUs through NVML and DRM.
#[derive(Debug)]
pub struct LocalSource {
    nvml: Option<NvmlSource>,
    /// `None` on a machine without an AMD or Intel GPU.
    drm: Option<DrmReader>,
}

impl LocalSource {
    /// NVML (`libnvidia-ml.so.1`, or the library at `library`) and the AMD and Intel GPUs
    /// under the sysfs root; NVML's error when there is neither.
    pub fn open(library: Option<&std::path::Path>) -> Result<Self, NvmlUnusable> {
        let roots = roots::get();
        let drm = DrmReader::new(&roots.procfs, &roots.sysfs);
        let drm = (!drm.devices().is_empty()).then_some(drm);
        match NvmlSource::open(library) {
            Ok(nvml) => Ok(Self {
                nvml: Some(nvml),
                drm,
            }),
            Err(why) if drm.is_none() => Err(why),
            Err(_) => Ok(Self { nvml: None, drm }),
        }
    }

    /// NVML alone.
    pub fn nvml(nvml: NvmlSource) -> Self {
        Self {
            nvml: Some(nvml),
            drm: None,
        }
    }

    /// The NVML source, where NVML is in use.
    pub fn nvml_mut(&mut self) -> Option<&mut NvmlSource> {
        self.nvml.as_mut()
    }

    /// Where NVML says what it is waiting on.
    pub fn activity(&self) -> Activity {
        self.nvml.as_ref().map(NvmlSource::activity).unwrap_or_default()
    }

    /// Whether the DRM GPUs need a first read before their rates are known, which this
    /// call makes: a one-shot waits an interval after it.
    pub fn prime(&mut self) -> bool {
        self.drm.as_mut().is_some_and(|drm| {
            drm.read();
            true
        })
    }

    pub(super) fn read(&mut self, window: Duration, reach: Reach) -> Readout {
        let mut out = match &mut self.nvml {
            Some(nvml) => nvml.read_reaching(window, reach),
            None => Readout::empty(),
        };
        if let Some(drm) = &mut self.drm {
            let first = u32::try_from(out.devices.len()).unwrap_or(u32::MAX);
            let read = drm.readout(first);
            out.devices.extend(read.devices);
            if reach == Reach::Processes {
                out.processes.extend(read.processes);
                out.hidden_processes = read.hidden;
            }
        }
        out
    }

    pub(super) fn refresh(&mut self, device: &mut Device, gauge: Gauge, window: Duration) {
        match (device.vendor, &mut self.nvml) {
            (Vendor::Nvidia, Some(nvml)) => nvml.refresh(device, gauge, window),
            // sysfs gives a DRM GPU's figures in one cheap pass.
            (_, _) => {
                if let Some(fresh) = self
                    .read(window, Reach::Devices)
                    .devices
                    .into_iter()
                    .find(|d| d.index == device.index)
                {
                    *device = fresh;
                }
            }
        }
    }
}

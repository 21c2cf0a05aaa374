//! Which devices and processes the user asked to see (`--only`, `--only-visible`, `--user`,
//! `--pid`, `--compute`, `--graphics`).
//!
//! Devices are named as `CUDA_VISIBLE_DEVICES` names them, without starting CUDA: an index,
//! a GPU UUID or a unique prefix of one (`GPU-8932f937`), a MIG device's UUID (`MIG-...`) or
//! `MIG-GPU-<uuid>/<gpu instance>/<compute instance>`. As CUDA does, the list ends at the
//! first entry that names no device (or more than one).

use gputop_core::model::{Device, GpuProcess, MigId, Snapshot};

/// One entry of a device list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSpec {
    Index(u32),
    /// A GPU UUID or a prefix of one.
    Uuid(String),
    /// A MIG device's own UUID (`MIG-...`) or a prefix of one.
    MigUuid(String),
    /// `MIG-GPU-<uuid>/<gi>/<ci>`: a MIG device by its GPU's UUID and instance ids.
    MigOf {
        gpu_uuid: String,
        id: MigId,
    },
}

impl DeviceSpec {
    /// Parses one entry; `None` when it cannot name a device.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        if let Ok(index) = text.parse::<u32>() {
            return Some(Self::Index(index));
        }
        if let Some(rest) = text.strip_prefix("MIG-GPU-") {
            let mut parts = rest.split('/');
            let (uuid, gi, ci) = (parts.next()?, parts.next()?, parts.next()?);
            if parts.next().is_some() || uuid.is_empty() {
                return None;
            }
            return Some(Self::MigOf {
                gpu_uuid: format!("GPU-{uuid}"),
                id: MigId {
                    gpu_instance: gi.parse().ok()?,
                    compute_instance: ci.parse().ok()?,
                },
            });
        }
        if text.len() > "MIG-".len() && text.starts_with("MIG-") {
            return Some(Self::MigUuid(text.to_string()));
        }
        if text.len() > "GPU-".len() && text.starts_with("GPU-") {
            return Some(Self::Uuid(text.to_string()));
        }
        None
    }

    /// Whole GPUs and MIG devices of `devices` this entry names.
    fn matches<'a>(&self, devices: &'a [Device]) -> Vec<(&'a Device, Option<MigId>)> {
        let uuid_starts = |d: &Device, prefix: &str| d.uuid.value().is_some_and(|u| u.starts_with(prefix));
        match self {
            Self::Index(index) => devices
                .iter()
                .filter(|d| d.index == *index)
                .map(|d| (d, None))
                .collect(),
            Self::Uuid(prefix) => devices
                .iter()
                .filter(|d| uuid_starts(d, prefix))
                .map(|d| (d, None))
                .collect(),
            Self::MigUuid(prefix) => devices
                .iter()
                .flat_map(|d| {
                    d.mig_devices
                        .iter()
                        .filter(|m| m.uuid.value().is_some_and(|u| u.starts_with(prefix.as_str())))
                        .map(move |m| (d, Some(m.id())))
                })
                .collect(),
            Self::MigOf { gpu_uuid, id } => devices
                .iter()
                .filter(|d| uuid_starts(d, gpu_uuid) && d.mig_devices.iter().any(|m| m.id() == *id))
                .map(|d| (d, Some(*id)))
                .collect(),
        }
    }
}

/// Parses a device list (`--only`, `CUDA_VISIBLE_DEVICES`): entries up to the first that
/// cannot name a device, as CUDA reads it. An empty list names no device.
pub fn parse_device_list(text: &str) -> Vec<DeviceSpec> {
    text.split(',').map_while(DeviceSpec::parse).collect()
}

/// A selection of devices and processes; empty lists select everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// `None` shows every device.
    pub devices: Option<Vec<DeviceSpec>>,
    pub users: Vec<String>,
    pub pids: Vec<u32>,
    pub compute: bool,
    pub graphics: bool,
}

impl Selection {
    /// The GPUs and MIG devices the list names in `devices`, up to its first entry that
    /// names none or several; `None` when everything is shown.
    fn chosen<'a>(&self, devices: &'a [Device]) -> Option<Vec<(&'a Device, Option<MigId>)>> {
        let specs = self.devices.as_ref()?;
        let mut chosen = Vec::new();
        for spec in specs {
            let matched = spec.matches(devices);
            if matched.len() != 1 {
                break;
            }
            chosen.extend(matched);
        }
        Some(chosen)
    }

    /// This selection over one snapshot's `devices`: the devices it names are worked out
    /// once, not again for each process checked.
    pub fn over<'a>(&'a self, devices: &'a [Device]) -> Shown<'a> {
        Shown {
            selection: self,
            chosen: self.chosen(devices),
        }
    }

    /// The snapshot holding only what is selected (a chosen MIG device's GPU keeps only that
    /// MIG device). Filters in place: a one-shot of many processes copies none of them.
    pub fn apply(&self, mut snapshot: Snapshot) -> Snapshot {
        let shown = self.over(&snapshot.devices);
        snapshot.processes.retain(|p| shown.process(p));
        let Some(chosen) = shown.chosen else {
            return snapshot;
        };
        let chosen: Vec<(u32, Option<MigId>)> = chosen.iter().map(|(d, mig)| (d.index, *mig)).collect();
        snapshot.devices.retain_mut(|d| {
            let index = d.index;
            let named = |mig: Option<MigId>| chosen.iter().any(|&(c, m)| c == index && m == mig);
            if !named(None) {
                d.mig_devices.retain(|m| named(Some(m.id())));
            }
            chosen.iter().any(|&(c, _)| c == index)
        });
        snapshot
    }
}

/// A [`Selection`] over one snapshot's devices ([`Selection::over`]).
#[derive(Debug)]
pub struct Shown<'a> {
    selection: &'a Selection,
    /// The GPUs and MIG devices named; `None` when every device is shown.
    chosen: Option<Vec<(&'a Device, Option<MigId>)>>,
}

impl Shown<'_> {
    /// Whether `device` is shown: every GPU, or one the list names.
    pub fn gpu(&self, device: &Device) -> bool {
        self.chosen
            .as_ref()
            .is_none_or(|chosen| chosen.iter().any(|(d, _)| d.index == device.index))
    }

    /// Whether `process` is shown: of a shown device, and of the kind, user and PID asked.
    pub fn process(&self, process: &GpuProcess) -> bool {
        let selection = self.selection;
        let kind_ok = match (selection.compute, selection.graphics) {
            (true, false) => process.kind.is_compute(),
            (false, true) => process.kind.is_graphics(),
            _ => true,
        };
        let user_ok = selection.users.is_empty()
            || process
                .host
                .user
                .as_deref()
                .is_some_and(|user| selection.users.iter().any(|u| u == user));
        let pid_ok = selection.pids.is_empty() || selection.pids.contains(&process.pid);
        // A whole GPU shows all its processes; a MIG device only its own.
        let device_ok = self.chosen.as_ref().is_none_or(|chosen| {
            chosen.iter().any(|(d, mig)| {
                d.index == process.gpu_index && mig.is_none_or(|id| process.mig() == Some(id))
            })
        });
        kind_ok && user_ok && pid_ok && device_ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputop_core::model::{DeviceStatus, MigDevice, ProcessType, Reading, testing};

    fn process(pid: u32, gpu: u32, kind: ProcessType, user: &str) -> GpuProcess {
        GpuProcess {
            kind,
            ..testing::process(pid, gpu, user, 1)
        }
    }

    const MIG_A: MigId = MigId {
        gpu_instance: 1,
        compute_instance: 0,
    };
    const MIG_B: MigId = MigId {
        gpu_instance: 2,
        compute_instance: 0,
    };

    /// GPU 0 plain; GPU 1 split into two MIG devices.
    fn devices() -> Vec<Device> {
        let mut plain = Device::unavailable(0, DeviceStatus::Ok, "test");
        plain.uuid = Reading::Value("GPU-aaaa1111-0000-4000-8000-000000000000".into());
        let mut split = Device::unavailable(1, DeviceStatus::Ok, "test");
        split.uuid = Reading::Value("GPU-bbbb2222-0000-4000-8000-000000000000".into());
        split.mig_devices = [
            (MIG_A, "MIG-1111aaaa-0000-5000-9000-000000000000"),
            (MIG_B, "MIG-2222bbbb-0000-5000-9000-000000000000"),
        ]
        .into_iter()
        .map(|(id, uuid)| MigDevice {
            profile: Reading::Value("3g.40gb".into()),
            uuid: Reading::Value(uuid.into()),
            ..MigDevice::new(id)
        })
        .collect();
        vec![plain, split]
    }

    #[test]
    fn each_criterion_narrows_and_they_combine() {
        let devices = devices();
        let c = process(1, 0, ProcessType::Compute, "alice");
        let g = process(2, 1, ProcessType::Graphics, "bob");
        let cg = process(3, 1, ProcessType::ComputeGraphics, "alice");
        let shows = |s: &Selection, p: &GpuProcess| s.over(&devices).process(p);
        let all = Selection::default();
        assert!([&c, &g, &cg].iter().all(|p| shows(&all, p)));

        let compute = Selection {
            compute: true,
            ..Default::default()
        };
        assert!(shows(&compute, &c) && !shows(&compute, &g) && shows(&compute, &cg));
        let graphics = Selection {
            graphics: true,
            ..Default::default()
        };
        assert!(!shows(&graphics, &c) && shows(&graphics, &g) && shows(&graphics, &cg));

        let alice_on_1 = Selection {
            users: vec!["alice".into()],
            devices: Some(parse_device_list("1")),
            ..Default::default()
        };
        assert!(!shows(&alice_on_1, &c) && !shows(&alice_on_1, &g) && shows(&alice_on_1, &cg));
        let pid = Selection {
            pids: vec![2],
            ..Default::default()
        };
        assert!(!shows(&pid, &c) && shows(&pid, &g));
    }

    #[test]
    fn device_lists_read_as_cuda_visible_devices_does() {
        let devices = devices();
        let gpus = |list: &str| {
            let selection = Selection {
                devices: Some(parse_device_list(list)),
                ..Default::default()
            };
            let snapshot = selection.apply(testing::snapshot(
                std::time::UNIX_EPOCH,
                devices.clone(),
                Vec::new(),
            ));
            snapshot
                .devices
                .iter()
                .map(|d| format!("{}:{}", d.index, d.mig_devices.len()))
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(gpus("0,1"), "0:0 1:2");
        assert_eq!(gpus("1"), "1:2");
        assert_eq!(gpus("GPU-bbbb2222"), "1:2", "a unique UUID prefix");
        assert_eq!(gpus("GPU-"), "", "'GPU-' alone names nothing");
        assert_eq!(gpus("MIG-2222bbbb-0000-5000-9000-000000000000"), "1:1");
        assert_eq!(gpus("MIG-GPU-bbbb2222-0000-4000-8000-000000000000/1/0"), "1:1");
        // The list ends at the first entry naming no device: 1 is never reached.
        assert_eq!(gpus("0,7,1"), "0:0");
        assert_eq!(gpus("0,bogus,1"), "0:0");
        assert_eq!(
            gpus(""),
            "",
            "an empty list shows no GPU, as CUDA_VISIBLE_DEVICES=\"\""
        );
        // A prefix two GPUs share is ambiguous: nothing from there on.
        assert_eq!(gpus("GPU-"), "");

        // A MIG device shows only its own processes.
        let selection = Selection {
            devices: Some(parse_device_list("MIG-1111aaaa")),
            ..Default::default()
        };
        let mut on_a = process(5, 1, ProcessType::Compute, "alice");
        (on_a.gpu_instance_id, on_a.compute_instance_id) =
            (Some(MIG_A.gpu_instance), Some(MIG_A.compute_instance));
        let mut on_b = process(6, 1, ProcessType::Compute, "bob");
        (on_b.gpu_instance_id, on_b.compute_instance_id) =
            (Some(MIG_B.gpu_instance), Some(MIG_B.compute_instance));
        let shown = selection.over(&devices);
        assert!(shown.process(&on_a));
        assert!(!shown.process(&on_b));
        assert!(!shown.process(&process(7, 0, ProcessType::Compute, "carol")));
    }
}

//! Which devices and processes the user asked to see (`--only`, `--user`, `--pid`,
//! `--compute`, `--graphics`).

use crate::model::{GpuProcess, Snapshot};

/// A selection of devices and processes; empty lists select everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    pub only_gpus: Vec<u32>,
    pub users: Vec<String>,
    pub pids: Vec<u32>,
    pub compute: bool,
    pub graphics: bool,
}

impl Selection {
    pub fn shows_gpu(&self, index: u32) -> bool {
        self.only_gpus.is_empty() || self.only_gpus.contains(&index)
    }

    pub fn shows_process(&self, process: &GpuProcess) -> bool {
        let kind_ok = match (self.compute, self.graphics) {
            (true, false) => process.kind.is_compute(),
            (false, true) => process.kind.is_graphics(),
            _ => true,
        };
        let user_ok = self.users.is_empty()
            || process
                .host
                .user
                .value()
                .is_some_and(|user| self.users.iter().any(|u| u == user));
        let pid_ok = self.pids.is_empty() || self.pids.contains(&process.pid);
        kind_ok && user_ok && pid_ok && self.shows_gpu(process.gpu_index)
    }

    /// A copy of the snapshot holding only what is selected.
    pub fn apply(&self, snapshot: &Snapshot) -> Snapshot {
        Snapshot {
            devices: snapshot
                .devices
                .iter()
                .filter(|d| self.shows_gpu(d.index))
                .cloned()
                .collect(),
            processes: snapshot
                .processes
                .iter()
                .filter(|p| self.shows_process(p))
                .cloned()
                .collect(),
            ..snapshot.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HostFacts, ProcessType, Reading};

    fn process(pid: u32, gpu: u32, kind: ProcessType, user: &str) -> GpuProcess {
        let mut host = HostFacts::gone("test");
        host.user = Reading::Value(user.to_string());
        GpuProcess {
            pid,
            gpu_index: gpu,
            gpu_uuid: Reading::NotSupported,
            kind,
            gpu_memory_bytes: Reading::Value(1),
            sm_percent: Reading::Value(0),
            memory_bandwidth_percent: Reading::Value(0),
            encoder_percent: Reading::Value(0),
            decoder_percent: Reading::Value(0),
            host,
        }
    }

    #[test]
    fn each_criterion_narrows_and_they_combine() {
        let c = process(1, 0, ProcessType::Compute, "alice");
        let g = process(2, 1, ProcessType::Graphics, "bob");
        let cg = process(3, 1, ProcessType::ComputeGraphics, "alice");
        let all = Selection::default();
        assert!([&c, &g, &cg].iter().all(|p| all.shows_process(p)));

        let compute = Selection {
            compute: true,
            ..Default::default()
        };
        assert!(compute.shows_process(&c) && !compute.shows_process(&g) && compute.shows_process(&cg));
        let graphics = Selection {
            graphics: true,
            ..Default::default()
        };
        assert!(!graphics.shows_process(&c) && graphics.shows_process(&g) && graphics.shows_process(&cg));

        let alice_on_1 = Selection {
            users: vec!["alice".into()],
            only_gpus: vec![1],
            ..Default::default()
        };
        assert!(
            !alice_on_1.shows_process(&c) && !alice_on_1.shows_process(&g) && alice_on_1.shows_process(&cg)
        );
        let pid = Selection {
            pids: vec![2],
            ..Default::default()
        };
        assert!(!pid.shows_process(&c) && pid.shows_process(&g));
    }
}

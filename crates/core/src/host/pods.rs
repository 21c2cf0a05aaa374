//! Kubernetes pods by name: which pod and container the kubelet allocated each GPU and MIG
//! device to, from its PodResources API (gRPC on its Unix socket), asked again every
//! [`REFRESH`] on a thread of its own; and the same names for the processes in those pods.
//!
//! The API names pods, not their UIDs, so a process is named through its GPU: a process in
//! a pod's cgroup on a device one container holds gets that container's names, and every
//! process of the same pod UID (and container ID) the same ones.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::model::{Device, GpuProcess, PodContainer, Reading, Runtime};

/// How often the kubelet is asked again: pods come and go.
pub const REFRESH: Duration = Duration::from_secs(10);

/// The longest one call may take, connecting included.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The pods' containers holding each device, by device ID (a GPU's or MIG device's UUID).
pub type Allocations = BTreeMap<String, Vec<PodContainer>>;

/// A device ID as the NVIDIA device plugin gives it: a UUID, or with time-slicing a
/// replica of one (`GPU-...::2`), which names the same GPU.
fn device_uuid(id: &str) -> &str {
    id.split_once("::").map_or(id, |(uuid, _)| uuid)
}

/// The devices each pod's containers hold, asked of the kubelet at `socket` once.
pub fn ask(socket: &Path) -> Result<Allocations, gputop_podresources::ListError> {
    let answer = gputop_podresources::list(socket, TIMEOUT)?;
    let mut out = Allocations::new();
    for pod in answer.pod_resources {
        for container in pod.containers {
            let holder = PodContainer {
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                container: container.name.clone(),
            };
            for id in container.devices.iter().flat_map(|d| &d.device_ids) {
                out.entry(device_uuid(id).to_string())
                    .or_default()
                    .push(holder.clone());
            }
        }
    }
    for holders in out.values_mut() {
        holders.sort();
        holders.dedup();
    }
    Ok(out)
}

/// The kubelet's latest answer, kept fresh by a thread of its own.
#[derive(Debug)]
pub struct PodWatcher {
    latest: Arc<Mutex<Arc<Allocations>>>,
    _stop: Sender<()>,
}

impl PodWatcher {
    /// Starts asking the kubelet at `socket` every [`REFRESH`]; a failed call leaves no
    /// names until a call succeeds.
    pub fn start(socket: PathBuf) -> std::io::Result<Self> {
        let latest = Arc::new(Mutex::new(Arc::new(Allocations::new())));
        let (stop, stopped) = mpsc::channel();
        let shared = Arc::clone(&latest);
        std::thread::Builder::new()
            .name("gputop-pods".into())
            .spawn(move || watch(&socket, &shared, &stopped))?;
        Ok(Self { latest, _stop: stop })
    }

    /// The allocations the kubelet last reported.
    pub fn allocations(&self) -> Arc<Allocations> {
        Arc::clone(&self.latest.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

fn watch(socket: &Path, latest: &Mutex<Arc<Allocations>>, stopped: &Receiver<()>) {
    loop {
        let answer = ask(socket).unwrap_or_default();
        *latest.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(answer);
        match stopped.recv_timeout(REFRESH) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

/// Names the holders of `devices` and their MIG devices, and the processes in their pods.
pub fn attribute(devices: &mut [Device], processes: &mut [GpuProcess], allocations: &Allocations) {
    let holders = |uuid: &Reading<String>| {
        uuid.value()
            .and_then(|uuid| allocations.get(uuid.as_str()))
            .cloned()
            .unwrap_or_default()
    };
    for device in devices.iter_mut() {
        device.pods = holders(&device.uuid);
        for mig in &mut device.mig_devices {
            mig.pods = holders(&mig.uuid);
        }
    }
    // A process in a pod's cgroup on a device held by one container is that container's;
    // its pod UID and container ID then name the pod's other processes too.
    let mut pods: HashMap<String, (String, String)> = HashMap::new();
    let mut containers: HashMap<String, String> = HashMap::new();
    for process in processes.iter() {
        let Some(container) = process
            .host
            .container
            .as_ref()
            .filter(|c| c.runtime == Runtime::Kubernetes)
        else {
            continue;
        };
        let Some(device) = devices.iter().find(|d| d.index == process.gpu_index) else {
            continue;
        };
        let held = match process.mig() {
            Some(id) => device.mig_devices.iter().find(|m| m.id() == id).map(|m| &m.pods),
            None => Some(&device.pods),
        };
        if let Some([holder]) = held.map(Vec::as_slice) {
            if let Some(uid) = &container.pod {
                pods.insert(uid.clone(), (holder.namespace.clone(), holder.pod.clone()));
            }
            containers.insert(container.id.clone(), holder.container.clone());
        }
    }
    for process in processes.iter_mut() {
        let Some(container) = process
            .host
            .container
            .as_mut()
            .filter(|c| c.runtime == Runtime::Kubernetes)
        else {
            continue;
        };
        let Some((namespace, pod)) = container.pod.as_ref().and_then(|uid| pods.get(uid)) else {
            continue;
        };
        let names = PodContainer {
            namespace: namespace.clone(),
            pod: pod.clone(),
            container: containers.get(&container.id).cloned().unwrap_or_default(),
        };
        Arc::make_mut(container).set_names(names);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Container, DeviceStatus, HostFacts, ProcessType};

    fn holder(pod: &str, container: &str) -> PodContainer {
        PodContainer {
            namespace: "team".into(),
            pod: pod.into(),
            container: container.into(),
        }
    }

    fn gpu(index: u32, uuid: &str) -> Device {
        let mut d = Device::unavailable(index, DeviceStatus::Ok, "test");
        d.uuid = Reading::Value(uuid.into());
        d
    }

    fn process(pid: u32, gpu: u32, pod_uid: &str, id: &str) -> GpuProcess {
        let mut host = HostFacts::gone(pid, "test");
        host.container = Some(Container::in_pod(id, Some(pod_uid.into())).into());
        GpuProcess {
            pid,
            gpu_index: gpu,
            gpu_uuid: Reading::NotSupported,
            kind: ProcessType::Compute,
            gpu_memory_bytes: Reading::NotSupported,
            sm_percent: Reading::NotSupported,
            gpu_system_memory_bytes: Default::default(),
            engines_percent: Default::default(),
            memory_bandwidth_percent: Reading::NotSupported,
            encoder_percent: Reading::NotSupported,
            decoder_percent: Reading::NotSupported,
            gpu_instance_id: None,
            compute_instance_id: None,
            host,
        }
    }

    #[test]
    fn replicas_name_their_gpu() {
        assert_eq!(device_uuid("GPU-1234::3"), "GPU-1234");
        assert_eq!(device_uuid("MIG-abcd"), "MIG-abcd");
    }

    #[test]
    fn a_process_is_named_through_its_gpu_and_its_pod_mates_through_its_uid() {
        let allocations = Allocations::from([
            ("GPU-a".to_string(), vec![holder("trainer", "pytorch")]),
            // Shared by two pods (time-slicing): no one holder.
            (
                "GPU-b".to_string(),
                vec![holder("trainer", "pytorch"), holder("notebook", "jupyter")],
            ),
        ]);
        let mut devices = vec![gpu(0, "GPU-a"), gpu(1, "GPU-b"), gpu(2, "GPU-c")];
        let mut processes = vec![
            process(10, 0, "uid-1", "c1"),
            // The same container on the shared GPU: named by its pod UID and container ID.
            process(11, 1, "uid-1", "c1"),
            // Another pod on the shared GPU: nothing tells which.
            process(12, 1, "uid-2", "c2"),
        ];
        attribute(&mut devices, &mut processes, &allocations);
        assert_eq!(devices[0].pods, vec![holder("trainer", "pytorch")]);
        assert_eq!(devices[1].pods.len(), 2);
        assert!(devices[2].pods.is_empty());
        let names: Vec<Option<String>> = processes
            .iter()
            .map(|p| {
                p.host
                    .container
                    .as_ref()
                    .and_then(|c| c.names.as_ref())
                    .map(PodContainer::label)
            })
            .collect();
        assert_eq!(
            names,
            [
                Some("team/trainer/pytorch".to_string()),
                Some("team/trainer/pytorch".to_string()),
                None
            ]
        );
    }
}

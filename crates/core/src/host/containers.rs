//! Containers and PID namespaces, from procfs: which container a process runs in (its
//! cgroup path), where gputop runs relative to the host's PID namespace, and how a PID that
//! NVML reported maps to one gputop may show and signal.
//!
//! NVML reports PIDs of the host's namespace on most drivers and of the caller's on some
//! newer ones. gputop never takes a local process that merely shares the number for the
//! GPU's: in a container's own namespace a PID counts only when that process holds an
//! NVIDIA device file open.

use crate::model::{Container, HostFacts, PidMapping, PidNamespace, Runtime};

/// The inode of the initial (host) PID namespace: `PROC_PID_INIT_INO` in the kernel.
const HOST_PID_NAMESPACE_INODE: u64 = 0xEFFF_FFFC;

/// The container named by the contents of `/proc/PID/cgroup`; `None` on the host itself.
pub fn container_of(cgroup: &str) -> Option<Container> {
    // cgroup v2 (`0::/path`) and v1's systemd hierarchy name the unit tree; any hierarchy
    // may carry a runtime's directory.
    let mut unified = None;
    let mut paths = Vec::new();
    for line in cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        if (id == "0" && controllers.is_empty()) || controllers == "name=systemd" {
            unified.get_or_insert(path);
        }
        paths.push(path);
    }
    unified
        .into_iter()
        .chain(paths.iter().copied())
        .find_map(runtime_container)
        .or_else(|| unified.and_then(systemd_unit))
}

/// A container id in a cgroup directory name: `docker-<64 hex>.scope`, `<64 hex>`, ...;
/// the first 12 hex digits, as `docker ps` shows it.
fn hex_id(segment: &str, prefixes: &[&str]) -> Option<String> {
    let name = segment.strip_suffix(".scope").unwrap_or(segment);
    let id = match prefixes.iter().find_map(|p| name.strip_prefix(p)) {
        Some(id) => id,
        None if prefixes.is_empty() => name,
        None => return None,
    };
    (id.len() >= 32 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id[..12].to_string())
}

/// A container runtime's cgroup layout, systemd or cgroupfs driver, v1 or v2.
fn runtime_container(path: &str) -> Option<Container> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let make = |runtime, id: String| Some(Container::new(runtime, id));
    if segments.iter().any(|s| s.starts_with("kubepods")) {
        // `pod<uid>` (cgroupfs) or `kubepods-burstable-pod<uid with _>.slice` (systemd).
        let pod = segments.iter().find_map(|s| {
            let name = s.strip_suffix(".slice").unwrap_or(s);
            let uid = match name.strip_prefix("pod") {
                Some(uid) => uid,
                None if name.starts_with("kubepods") => name.rsplit('-').next()?.strip_prefix("pod")?,
                None => return None,
            };
            Some(uid.replace('_', "-"))
        });
        let id = segments.last().and_then(|s| {
            hex_id(s, &["cri-containerd-", "crio-", "docker-", "containerd-"]).or_else(|| hex_id(s, &[]))
        });
        return Some(Container::in_pod(id.unwrap_or_else(|| "-".into()), pod));
    }
    for (i, segment) in segments.iter().enumerate().rev() {
        if let Some(id) = hex_id(segment, &["docker-"]) {
            return make(Runtime::Docker, id);
        }
        if let Some(id) = hex_id(segment, &["libpod-conmon-", "libpod-"]) {
            return make(Runtime::Podman, id);
        }
        if let Some(id) = hex_id(segment, &["cri-containerd-", "nerdctl-", "containerd-"]) {
            return make(Runtime::Containerd, id);
        }
        if let Some(id) = hex_id(segment, &["crio-"]) {
            return make(Runtime::CriO, id);
        }
        if let Some(job) = segment.strip_prefix("job_")
            && !job.is_empty()
            && job.bytes().all(|b| b.is_ascii_digit())
        {
            return make(Runtime::Slurm, job.to_string());
        }
        if let Some(name) = segment.strip_prefix("lxc.payload.") {
            return make(Runtime::Lxc, name.to_string());
        }
        let parent = i.checked_sub(1).map(|p| segments[p]);
        if let Some(id) = hex_id(segment, &[]) {
            // cgroupfs driver: `/docker/<id>`, `/libpod_parent/libpod-<id>`, `/<namespace>/<id>`.
            let runtime = match parent {
                Some("docker") => Runtime::Docker,
                Some(p) if p.starts_with("libpod") => Runtime::Podman,
                _ => Runtime::Containerd,
            };
            return make(runtime, id);
        }
        if parent == Some("lxc") {
            return make(Runtime::Lxc, segment.to_string());
        }
    }
    None
}

/// A process under systemd outside any container: its innermost slice, and the service in
/// it if any (`user-1000.slice`, `system.slice/jupyter.service`).
fn systemd_unit(path: &str) -> Option<Container> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let slice = segments.iter().rposition(|s| s.ends_with(".slice"));
    let after = slice.map_or(0, |i| i + 1);
    let service = segments[after..].iter().find(|s| s.ends_with(".service"));
    let id = match (slice.map(|i| segments[i]), service) {
        (Some(slice), Some(service)) => format!("{slice}/{service}"),
        (Some(slice), None) => slice.to_string(),
        (None, Some(service)) => service.to_string(),
        (None, None) => segments.first().filter(|s| s.ends_with(".scope"))?.to_string(),
    };
    Some(Container::new(Runtime::Systemd, id))
}

/// The user a Slurm job's cgroup path names: `slurm/uid_1000/job_77` (cgroup v1); `None`
/// where it names none (cgroup v2's `slurmstepd.scope/job_77`).
pub fn slurm_uid(cgroup: &str) -> Option<u32> {
    cgroup
        .lines()
        .filter_map(|line| line.splitn(3, ':').nth(2))
        .flat_map(|path| path.split('/'))
        .find_map(|segment| segment.strip_prefix("uid_")?.parse().ok())
}

/// The PIDs of `/proc/PID/status`'s `NSpid:` line: the process's PID in the namespace of
/// this /proc, then in each nested namespace down to its own.
pub fn nspid(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))
        .map(|pids| pids.split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

/// The inode of a `/proc/PID/ns/pid` link (`pid:[4026531836]`).
fn namespace_inode(link: impl AsRef<std::path::Path>) -> Option<u64> {
    std::fs::read_link(link)
        .ok()?
        .to_str()?
        .strip_prefix("pid:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Where gputop runs, and what that means for NVML's PIDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Namespaces {
    /// Whether NVML's PIDs are gputop's own or those of another PID namespace.
    pub view: PidNamespace,
    /// gputop's own PID namespace inode.
    own: Option<u64>,
    /// How deep gputop's namespace is below the one /proc shows (NSpid's index of its PIDs).
    level: usize,
}

impl Namespaces {
    /// Reads gputop's own namespace from /proc.
    pub fn detect() -> Self {
        let own = namespace_inode("/proc/self/ns/pid");
        let own_nspid =
            std::fs::read_to_string("/proc/self/status").map_or_else(|_| Vec::new(), |s| nspid(&s));
        // A /proc shows the PIDs of the namespace it was mounted in: it is the host's when
        // its PID 1 lives in the host namespace (a link a nested process may not read), or
        // when it shows the kernel's threads, which only the host namespace holds.
        let proc_is_host = namespace_inode(super::roots::process_path(1, "ns/pid"))
            == Some(HOST_PID_NAMESPACE_INODE)
            || std::fs::read_to_string(super::roots::process_path(2, "stat"))
                .is_ok_and(|s| s.starts_with("2 (kthreadd)"));
        Self::classify(own, own_nspid.len(), proc_is_host)
    }

    /// Whether `pid` lives in gputop's own PID namespace (one link read, no file).
    pub fn shares_mine(&self, pid: u32) -> bool {
        self.own.is_some() && namespace_inode(super::roots::process_path(pid, "ns/pid")) == self.own
    }

    fn classify(own_inode: Option<u64>, own_nspid_len: usize, proc_is_host: bool) -> Self {
        let host = Self {
            view: PidNamespace::Host,
            own: own_inode,
            level: 0,
        };
        match own_inode {
            // Unreadable (no /proc/self/ns): the common case, and what peers assume.
            None => host,
            Some(HOST_PID_NAMESPACE_INODE) => host,
            Some(_) if own_nspid_len >= 2 && proc_is_host => Self {
                view: PidNamespace::NestedHostProc,
                level: own_nspid_len - 1,
                ..host
            },
            Some(_) => Self {
                view: PidNamespace::Container,
                level: 0,
                ..host
            },
        }
    }

    /// How the NVML PID `pid` maps into gputop's namespace. `status` is the text of
    /// `/proc/PID/status` when /proc has that PID; `holds_nvidia_device` answers whether the
    /// local process holds an NVIDIA device file open (asked only in a container).
    pub fn map(
        &self,
        pid: u32,
        status: Option<&str>,
        holds_nvidia_device: impl FnOnce() -> bool,
    ) -> PidReach {
        match self.view {
            PidNamespace::Host => PidReach::Same,
            PidNamespace::NestedHostProc => {
                let pids = status.map(nspid).unwrap_or_default();
                match pids.get(self.level) {
                    Some(&local) if local == pid => PidReach::Same,
                    Some(&local) => PidReach::Mapped { local_pid: local },
                    None if status.is_none() => PidReach::Same, // exited: signals say so
                    None => PidReach::Unmapped {
                        reason: "outside gputop's PID namespace".into(),
                    },
                }
            }
            PidNamespace::Container => match status {
                None => PidReach::Unmapped {
                    reason: "host PID, not in this container (run gputop with the host's PID namespace)"
                        .into(),
                },
                Some(_) if holds_nvidia_device() => PidReach::Same,
                Some(_) => PidReach::Unmapped {
                    reason: "host PID; the local process with this number is another one".into(),
                },
            },
        }
    }
}

/// How a PID the driver reported relates to gputop's own PID namespace, as it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PidReach {
    /// The same number names the same process for gputop (same namespace, or verified).
    Same,
    /// gputop knows this process by another number in its own namespace (from NSpid).
    Mapped {
        /// Its PID in gputop's namespace.
        local_pid: u32,
    },
    /// gputop cannot reach this process: signals are disabled, and a local process that
    /// merely shares the number is never shown or signalled in its place.
    Unmapped {
        /// Why, in words.
        reason: String,
    },
}

impl PidReach {
    /// Writes how the driver's `pid` is reached into `facts`.
    pub fn fill(&self, pid: u32, facts: &mut HostFacts) {
        (facts.local_pid, facts.pid_mapping, facts.unmapped_reason) = match self {
            Self::Same => (Some(pid), PidMapping::Same, None),
            Self::Mapped { local_pid } => (Some(*local_pid), PidMapping::Mapped, None),
            Self::Unmapped { reason } => (None, PidMapping::Unmapped, Some(reason.clone())),
        };
    }
}

/// Whether process `pid` holds a file under /dev/nvidia open (nvidiactl, nvidia0, ...).
pub fn holds_nvidia_device(pid: u32) -> bool {
    let Ok(entries) = std::fs::read_dir(super::roots::process_path(pid, "fd")) else {
        return false;
    };
    entries.filter_map(Result::ok).any(|entry| {
        std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("/dev/nvidia"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f2a1b9c0d12e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9";

    fn label(cgroup: &str) -> Option<String> {
        container_of(cgroup).map(|c| c.label().to_string())
    }

    #[test]
    fn docker_podman_containerd_and_cri_o_in_every_driver_layout() {
        let short = &ID[..12];
        let cases = [
            (
                format!("0::/system.slice/docker-{ID}.scope"),
                format!("docker:{short}"),
            ),
            (
                format!("12:memory:/docker/{ID}\n1:name=systemd:/docker/{ID}"),
                format!("docker:{short}"),
            ),
            (
                format!(
                    "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container"
                ),
                format!("podman:{short}"),
            ),
            (
                format!("0::/machine.slice/libpod-conmon-{ID}.scope"),
                format!("podman:{short}"),
            ),
            (
                format!("3:cpu:/libpod_parent/libpod-{ID}"),
                format!("podman:{short}"),
            ),
            (
                format!("0::/system.slice/nerdctl-{ID}.scope"),
                format!("containerd:{short}"),
            ),
            (format!("0::/default/{ID}"), format!("containerd:{short}")),
            (
                format!("0::/system.slice/crio-{ID}.scope"),
                format!("cri-o:{short}"),
            ),
        ];
        for (cgroup, expected) in cases {
            assert_eq!(label(&cgroup).as_deref(), Some(expected.as_str()), "{cgroup}");
        }
    }

    #[test]
    fn kubernetes_pods_with_systemd_and_cgroupfs_drivers() {
        let short = &ID[..12];
        let systemd = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b3c4d_5e6f_4a7b_8c9d_0e1f2a3b4c5d.slice/cri-containerd-{ID}.scope"
        );
        let pod = container_of(&systemd).unwrap();
        assert_eq!(pod.runtime, Runtime::Kubernetes);
        assert_eq!(pod.pod.as_deref(), Some("1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"));
        assert_eq!(pod.label(), format!("pod:1a2b3c4d/{short}"));
        let cgroupfs = format!("11:memory:/kubepods/besteffort/pod0e1f2a3b-aaaa-bbbb-cccc-000000000000/{ID}");
        assert_eq!(label(&cgroupfs), Some(format!("pod:0e1f2a3b/{short}")));
    }

    #[test]
    fn slurm_jobs_lxc_and_systemd_slices() {
        assert_eq!(
            label("0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0").as_deref(),
            Some("slurm:4242")
        );
        assert_eq!(
            label("4:cpuset:/slurm/uid_1000/job_77/step_batch").as_deref(),
            Some("slurm:77")
        );
        assert_eq!(
            slurm_uid("4:cpuset:/slurm/uid_1000/job_77/step_batch"),
            Some(1000)
        );
        assert_eq!(
            slurm_uid("0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0"),
            None,
            "cgroup v2 names no user: the process's owner stands in"
        );
        assert_eq!(label("0::/lxc.payload.trainbox").as_deref(), Some("lxc:trainbox"));
        assert_eq!(
            label("0::/user.slice/user-1000.slice/session-3.scope").as_deref(),
            Some("user-1000.slice")
        );
        assert_eq!(
            label("0::/system.slice/jupyterhub.service").as_deref(),
            Some("system.slice/jupyterhub.service")
        );
        assert_eq!(label("0::/init.scope").as_deref(), Some("init.scope"));
        // The root cgroup, garbage and short hex names are no container.
        assert_eq!(label("0::/"), None);
        assert_eq!(label("garbage\n\n::::"), None);
        assert_eq!(label("0::/docker/abc123"), None);
    }

    #[test]
    fn nspid_lists_the_pid_in_each_namespace() {
        assert_eq!(
            nspid("Name:\tsleep\nNSpid:\t18466\t2\nPPid:\t1\n"),
            vec![18466, 2]
        );
        assert_eq!(nspid("Name:\tsleep\n"), Vec::<u32>::new());
    }

    #[test]
    fn pids_map_only_where_the_kernel_or_the_device_files_vouch_for_them() {
        let host = Namespaces::classify(Some(HOST_PID_NAMESPACE_INODE), 1, true);
        assert_eq!(host.view, PidNamespace::Host);
        assert_eq!(host.map(42, None, || unreachable!()), PidReach::Same);

        // gputop one level down, /proc still the host's (unshare --pid without --mount-proc).
        let nested = Namespaces::classify(Some(4026532178), 2, true);
        assert_eq!(nested.view, PidNamespace::NestedHostProc);
        let status = "NSpid:\t18466\t7\n";
        assert_eq!(
            nested.map(18466, Some(status), || unreachable!()),
            PidReach::Mapped { local_pid: 7 }
        );
        assert!(matches!(
            nested.map(900, Some("NSpid:\t900\n"), || unreachable!()),
            PidReach::Unmapped { .. }
        ));

        // A container's own namespace and /proc.
        let container = Namespaces::classify(Some(4026532178), 1, false);
        assert_eq!(container.view, PidNamespace::Container);
        assert!(matches!(
            container.map(18466, None, || unreachable!()),
            PidReach::Unmapped { .. }
        ));
        assert!(matches!(
            container.map(2, Some("NSpid:\t2\n"), || false),
            PidReach::Unmapped { .. }
        ));
        assert_eq!(container.map(2, Some("NSpid:\t2\n"), || true), PidReach::Same);
    }
}

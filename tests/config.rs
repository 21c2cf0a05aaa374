//! Configuration through the real binary: discovery, precedence, strict errors with
//! file:line:column, `--dump-config` with origins, and the user's file left untouched.

mod common;

use std::path::{Path, PathBuf};

use common::{gputop, stderr, stdout};

/// The block design.md says must load exactly as written.
const DESIGN_BLOCK: &str = r#"[display]
refresh_interval = 2.0
default_metrics = ["utilization", "memory", "temperature", "power"]

[alert]
memory_usage_threshold = 85
gpu_utilization_threshold = 90
temperature_threshold = 80

[history]
retention_time = 86400
sample_interval = 10
"#;

fn user_config(home: &Path, text: &str) -> PathBuf {
    let dir = home.join(".config/gputop");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn dump(home: &Path, args: &[&str], env: &[(&str, &str)]) -> (String, toml::Table) {
    let output = gputop(home)
        .arg("--dump-config")
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let table = toml::from_str(&text).unwrap_or_else(|e| panic!("dump is not TOML ({e}):\n{text}"));
    (text, table)
}

fn line_of<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(&format!("{key} =")))
        .unwrap_or_else(|| panic!("{key} not in {text}"))
}

#[test]
fn the_design_block_loads_exactly_and_every_value_names_its_line() {
    let home = tempfile::tempdir().unwrap();
    let path = user_config(home.path(), DESIGN_BLOCK);
    let (text, table) = dump(home.path(), &[], &[]);
    assert_eq!(table["display"]["refresh_interval"].as_float(), Some(2.0));
    assert_eq!(
        table["display"]["default_metrics"].as_array().unwrap().len(),
        4,
        "{text}"
    );
    assert_eq!(table["alert"]["memory_usage_threshold"].as_float(), Some(85.0));
    assert_eq!(table["alert"]["gpu_utilization_threshold"].as_float(), Some(90.0));
    assert_eq!(table["alert"]["temperature_threshold"].as_float(), Some(80.0));
    assert_eq!(table["history"]["retention_time"].as_integer(), Some(86400));
    assert_eq!(table["history"]["sample_interval"].as_integer(), Some(10));
    assert!(
        line_of(&text, "refresh_interval").ends_with(&format!("# from {}:2", path.display())),
        "{text}"
    );
    assert!(
        line_of(&text, "sample_interval").ends_with(&format!("# from {}:12", path.display())),
        "{text}"
    );
    assert!(
        !line_of(&text, "pcie_interval").contains('#'),
        "defaults carry no comment: {text}"
    );
}

#[test]
fn xdg_config_home_wins_over_home() {
    let home = tempfile::tempdir().unwrap();
    user_config(home.path(), "[display]\nrefresh_interval = 7\n");
    let xdg = home.path().join("xdg");
    std::fs::create_dir_all(xdg.join("gputop")).unwrap();
    std::fs::write(
        xdg.join("gputop/config.toml"),
        "[display]\nrefresh_interval = 9\n",
    )
    .unwrap();
    let (_, table) = dump(home.path(), &[], &[("XDG_CONFIG_HOME", xdg.to_str().unwrap())]);
    assert_eq!(table["display"]["refresh_interval"].as_float(), Some(9.0));
    let (_, table) = dump(home.path(), &[], &[]);
    assert_eq!(table["display"]["refresh_interval"].as_float(), Some(7.0));
}

#[test]
fn cli_beats_environment_beats_file_beats_defaults() {
    let home = tempfile::tempdir().unwrap();
    user_config(
        home.path(),
        "[display]\nrefresh_interval = 3\n[alert]\ntemperature_threshold = 70\n",
    );
    let env = [
        ("GPUTOP_DISPLAY_REFRESH_INTERVAL", "4"),
        ("GPUTOP_ALERT_MEMORY_USAGE_THRESHOLD", "60"),
        ("GPUTOP_DISPLAY_DEFAULT_METRICS", "memory,power"),
    ];
    let (text, table) = dump(home.path(), &["--interval", "5"], &env);
    assert_eq!(table["display"]["refresh_interval"].as_float(), Some(5.0));
    assert!(
        line_of(&text, "refresh_interval").ends_with("# from command line --interval"),
        "{text}"
    );
    assert_eq!(table["alert"]["memory_usage_threshold"].as_float(), Some(60.0));
    assert!(
        line_of(&text, "memory_usage_threshold")
            .ends_with("# from environment variable GPUTOP_ALERT_MEMORY_USAGE_THRESHOLD")
    );
    assert_eq!(
        line_of(&text, "default_metrics")
            .split('#')
            .next()
            .unwrap()
            .trim(),
        r#"default_metrics = ["memory", "power"]"#
    );
    assert_eq!(table["alert"]["temperature_threshold"].as_float(), Some(70.0));
    assert_eq!(table["alert"]["gpu_utilization_threshold"].as_float(), Some(90.0));

    let (text, table) = dump(home.path(), &[], &env);
    assert_eq!(table["display"]["refresh_interval"].as_float(), Some(4.0));
    assert!(
        line_of(&text, "refresh_interval").contains("GPUTOP_DISPLAY_REFRESH_INTERVAL"),
        "{text}"
    );
}

#[test]
fn the_dump_loads_back_to_the_same_settings() {
    let home = tempfile::tempdir().unwrap();
    user_config(
        home.path(),
        "[display]\nrefresh_interval = 0.5\ndefault_metrics = [\"fan\"]\n[history]\nsample_interval = 30\n",
    );
    let (first, _) = dump(
        home.path(),
        &["--interval", "1.25"],
        &[("GPUTOP_COLLECT_PCIE_INTERVAL", "12")],
    );
    let saved = home.path().join("dumped.toml");
    std::fs::write(&saved, &first).unwrap();
    let (second, _) = dump(home.path(), &["--config", saved.to_str().unwrap()], &[]);
    let values = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.contains(" = "))
            .map(|l| l.split("  #").next().unwrap().to_string())
            .collect()
    };
    assert_eq!(values(&first), values(&second));
    assert!(
        first.contains("refresh_interval = 1.25") && first.contains("pcie_interval = 12.0"),
        "{first}"
    );
}

/// A bad file: exit 3, one line naming file:line:column, nothing drawn, the file unchanged.
fn assert_config_error(text: &str, needles: &[&str]) {
    let home = tempfile::tempdir().unwrap();
    let path = user_config(home.path(), text);
    let before = std::fs::metadata(&path).unwrap().modified().unwrap();
    let output = gputop(home.path()).args(["--demo", "--once"]).output().unwrap();
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{err}");
    assert!(stdout(&output).is_empty(), "nothing is drawn before the error");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!err.contains("panicked"));
    for needle in needles {
        let needle = needle.replace("{path}", &path.display().to_string());
        assert!(err.contains(&needle), "{needle:?} not in {err}");
    }
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        text,
        "the user's file is never rewritten"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), before);
}

#[test]
fn unknown_key_is_named_with_a_suggestion_and_its_position() {
    assert_config_error(
        "# mine\n[display]\nrefresh_intervl = 2\n",
        &[
            "{path}:3:1:",
            "unknown key 'refresh_intervl' in [display]",
            "did you mean 'refresh_interval'?",
        ],
    );
}

#[test]
fn unknown_section_and_misplaced_keys_get_hints() {
    assert_config_error(
        "[displya]\nrefresh_interval = 2\n",
        &[
            "{path}:1:2:",
            "unknown section 'displya'",
            "did you mean [display]?",
        ],
    );
    assert_config_error(
        "refresh_interval = 2\n",
        &["{path}:1:1:", "'refresh_interval' belongs in [display]"],
    );
    assert_config_error("display = 3\n", &["{path}:1:1:", "'display' must be a table"]);
}

#[test]
fn wrong_types_and_ranges_name_the_value() {
    assert_config_error(
        "[display]\nrefresh_interval = \"fast\"\n",
        &[
            "{path}:2:20:",
            "display.refresh_interval",
            "expected a number, found a string",
        ],
    );
    assert_config_error(
        "[alert]\n  temperature_threshold = 400\n",
        &[
            "{path}:2:27:",
            "400 is out of range: expected 0 to 150 degrees Celsius",
        ],
    );
    assert_config_error(
        "[history]\nretention_time = 1.5\n",
        &["{path}:2:18:", "expected a whole number"],
    );
    assert_config_error(
        "[display]\ndefault_metrics = [\"temprature\"]\n",
        &["{path}:2:19:", "did you mean 'temperature'?"],
    );
    assert_config_error(
        "[history]\nretention_time = 60\nsample_interval = 120\n",
        &["must not exceed history.retention_time", "{path}:3"],
    );
}

#[test]
fn syntax_errors_point_at_the_spot() {
    assert_config_error("[display]\nrefresh_interval = = 2\n", &["{path}:2:"]);
}

#[test]
fn explicit_config_must_exist_and_env_values_are_checked() {
    let home = tempfile::tempdir().unwrap();
    let output = gputop(home.path())
        .args(["--demo", "--once", "--config", "/nonexistent/gputop.toml"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(
        stderr(&output).contains("/nonexistent/gputop.toml: cannot read config file"),
        "{}",
        stderr(&output)
    );

    let output = gputop(home.path())
        .args(["--demo", "--once"])
        .env("GPUTOP_DISPLAY_REFRESH_INTERVAL", "0")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(
        stderr(&output).contains("environment variable GPUTOP_DISPLAY_REFRESH_INTERVAL=0: 0 is out of range"),
        "{}",
        stderr(&output)
    );

    let output = gputop(home.path())
        .args(["--demo", "--once", "--interval", "0.01"])
        .output()
        .unwrap();
    // A flag's bad value is a usage error, as for any flag (exit 2), with the same range.
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("'--interval <SECS>': 0.01 is out of range: expected 0.1 to 3600"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn metrics_setting_chooses_the_report_columns() {
    let home = tempfile::tempdir().unwrap();
    user_config(
        home.path(),
        "[display]\ndefault_metrics = [\"fan\", \"clocks\"]\n",
    );
    let output = gputop(home.path()).args(["--demo", "--once"]).output().unwrap();
    let text = stdout(&output);
    let header = text.lines().find(|l| l.starts_with("GPU  VENDOR")).unwrap();
    let columns: Vec<&str> = header
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(columns, ["GPU", "VENDOR", "BUS", "NAME", "FAN", "SM/MEM CLOCK"]);
}

const RULES: &str = r#"[alert]
log_file = "/tmp/alerts.log"
notify_critical = ["notify-send", "gputop"]

[[alert.rules]]
name = "gpu_power_high"
metric = "power"
threshold = 650
clear = 600
window = 60
for = 30
severity = "critical"
summary = "near the power limit"

[[alert.rules]]
name = "gpu_idle_free"
enabled = false
"#;

#[test]
fn alert_rules_load_dump_and_load_back() {
    let home = tempfile::tempdir().unwrap();
    user_config(home.path(), RULES);
    let (first, table) = dump(home.path(), &[], &[]);
    let rules = table["alert"]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 2, "{first}");
    assert_eq!(rules[0]["threshold"].as_float(), Some(650.0));
    assert_eq!(rules[0]["for"].as_float(), Some(30.0));
    assert_eq!(rules[1]["enabled"].as_bool(), Some(false));
    assert_eq!(table["alert"]["notify_critical"].as_array().unwrap().len(), 2);
    let saved = home.path().join("dumped.toml");
    std::fs::write(&saved, &first).unwrap();
    let (second, _) = dump(home.path(), &["--config", saved.to_str().unwrap()], &[]);
    // Origins differ (one file, then the other), and so does the header naming the file.
    let strip = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| !l.starts_with("# Config file: "))
            .map(|l| l.split("  #").next().unwrap().to_string())
            .collect()
    };
    assert_eq!(strip(&first), strip(&second));
}

#[test]
fn bad_alert_rules_are_named_with_their_position() {
    assert_config_error(
        "[[alert.rules]]\nname = \"hot\"\nmetric = \"temperature\"\nthreshhold = 90\n",
        &[
            "{path}:4:1:",
            "unknown key 'threshhold' in [[alert.rules]]",
            "did you mean 'threshold'?",
        ],
    );
    assert_config_error(
        "[[alert.rules]]\nname = \"hot\"\nmetric = \"temprature\"\nthreshold = 90\n",
        &[
            "{path}:3:10:",
            "unknown value 'temprature'",
            "did you mean 'temperature'?",
        ],
    );
    assert_config_error(
        "[[alert.rules]]\nname = \"hot\"\nmetric = \"temperature\"\nthreshold = 90\nclear = 95\n",
        &["{path}:5:9:", "alert rule clear", "would never resolve"],
    );
    assert_config_error(
        "[[alert.rules]]\nname = \"hot\"\nmetric = \"temperature\"\n",
        &["{path}:1:1:", "needs a threshold"],
    );
    assert_config_error(
        "[alert]\nnotify_warning = \"notify-send hi\"\n",
        &["{path}:2:18:", "expected a command as a list of strings"],
    );
    assert_config_error(
        "[[alert.rules]]\nname = \"leak\"\nscope = \"process\"\nmetric = \"gpu_memory_mib\"\nholders = \"some\"\nthreshold = 1\n",
        &["{path}:5:11:", "only device rules"],
    );
    // Process history keeps 10 s aggregates: an increase over less than ten of them could
    // never be judged, and the rule would never fire.
    assert_config_error(
        "[[alert.rules]]\nname = \"leak\"\nscope = \"process\"\nmetric = \"gpu_memory_mib\"\n\
         function = \"steady_increase\"\nthreshold = 256\nwindow = 12\n",
        &[
            "{path}:7:10:",
            "alert rule window",
            "at least 100 s",
            "10 s aggregates",
        ],
    );
    assert_config_error(
        "[[alert.rules]]\nname = \"leak\"\nscope = \"process\"\nmetric = \"gpu_memory_mib\"\n\
         function = \"increase\"\nthreshold = 256\n",
        &["{path}:1:1:", "at least 100 s", "set window"],
    );
}

#[test]
fn escape_sequences_in_a_config_key_or_value_are_shown_escaped() {
    let home = tempfile::tempdir().unwrap();
    for text in [
        "[display]\n\"\\u001b]0;pwned\\u0007\\u202e\" = 1\n",
        "[display]\ndefault_metrics = [\"\\u001b[2J\\u202epower\"]\n",
    ] {
        user_config(home.path(), text);
        let output = gputop(home.path()).args(["--demo", "--once"]).output().unwrap();
        assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
        let err = stderr(&output);
        assert!(
            !err.contains('\u{1b}') && !err.contains('\u{202e}'),
            "raw: {err:?}"
        );
        assert!(err.contains("\\u{1b}"), "escaped: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn a_config_that_is_a_device_or_a_fifo_is_refused_at_once() {
    let home = tempfile::tempdir().unwrap();
    let fifo = home.path().join("config.fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for path in [Path::new("/dev/zero"), fifo.as_path()] {
        let started = std::time::Instant::now();
        let output = gputop(home.path())
            .args(["--demo", "--once", "--config"])
            .arg(path)
            .output()
            .unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("not a regular file"),
            "{}",
            stderr(&output)
        );
    }
    let big = home.path().join("big.toml");
    std::fs::write(&big, "# padding\n".repeat(200_000)).unwrap();
    let output = gputop(home.path())
        .args(["--demo", "--once", "--config"])
        .arg(&big)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(
        stderr(&output).contains("larger than 1024 KiB"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn dump_config_names_the_file_it_read_or_looked_for() {
    let home = tempfile::tempdir().unwrap();
    let (missing, _) = dump(home.path(), &[], &[]);
    let expected = home.path().join(".config/gputop/config.toml");
    assert!(
        missing.contains(&format!("# Config file: {} (not there", expected.display())),
        "{missing}"
    );
    user_config(home.path(), "[display]\nrefresh_interval = 3.0\n");
    let (read, _) = dump(home.path(), &[], &[]);
    assert!(
        read.contains(&format!("# Config file: {} (read)", expected.display())),
        "{read}"
    );
    assert!(
        read.contains("man gputop") && !read.contains("config/default.toml"),
        "{read}"
    );
}

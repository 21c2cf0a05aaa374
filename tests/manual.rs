//! `gputop completions SHELL` and `gputop man`, checked by their consumers: each shell parses
//! its completion script without running it, and groff renders the page without a warning.
//! The zsh and fish checks need those shells (`.ci/all-tests` installs them). Elvish can
//! only compile a script in an interactive session (its `edit:` module), and PowerShell is
//! not in Debian: those two scripts are only checked to register their completer.

mod common;

use std::path::Path;
use std::process::Command;

use common::{gputop, stderr};

fn generated(home: &Path, args: &[&str]) -> String {
    let output = gputop(home).args(args).output().unwrap();
    assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    String::from_utf8(output.stdout).unwrap()
}

/// `shell` with `check` parses the completion script for `name` without an error.
fn parses(shell: &str, check: &[&str], name: &str) {
    let home = tempfile::tempdir().unwrap();
    let script = generated(home.path(), &["completions", name]);
    assert!(
        script.contains("gputop") && script.contains("completions"),
        "{script}"
    );
    let file = home.path().join(format!("gputop.{name}"));
    std::fs::write(&file, &script).unwrap();
    let output = Command::new(shell)
        .args(check)
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("{shell}: {e} (bash .ci/all-tests installs it)"));
    assert!(
        output.status.success() && output.stderr.is_empty(),
        "{shell} {check:?}: {}",
        stderr(&output)
    );
}

#[test]
fn the_bash_completion_parses() {
    parses("bash", &["-n"], "bash");
}

#[test]
#[ignore = "needs zsh: .ci/all-tests installs it"]
fn the_zsh_completion_parses() {
    parses("zsh", &["-n"], "zsh");
}

#[test]
#[ignore = "needs fish: .ci/all-tests installs it"]
fn the_fish_completion_parses() {
    parses("fish", &["--no-execute"], "fish");
}

#[test]
fn the_elvish_completion_registers_a_completer() {
    let home = tempfile::tempdir().unwrap();
    let script = generated(home.path(), &["completions", "elvish"]);
    assert!(
        script.contains("edit:completion:arg-completer[gputop]"),
        "{script}"
    );
}

#[test]
fn the_powershell_completion_registers_a_completer() {
    let home = tempfile::tempdir().unwrap();
    let script = generated(home.path(), &["completions", "powershell"]);
    assert!(
        script.contains("Register-ArgumentCompleter") && script.contains("'gputop'"),
        "{script}"
    );
}

#[test]
fn the_man_page_renders_without_a_warning_and_lists_keys_config_and_exit_codes() {
    let home = tempfile::tempdir().unwrap();
    let page = generated(home.path(), &["man"]);
    let file = home.path().join("gputop.1");
    std::fs::write(&file, &page).unwrap();
    let output = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .arg(&file)
        .output()
        .expect("groff (Debian's groff-base) renders the page");
    assert!(
        output.status.success() && output.stderr.is_empty(),
        "groff: {}",
        stderr(&output)
    );
    // The synopsis names each option's argument.
    let synopsis = page
        .split(".SH SYNOPSIS\n")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .expect("a synopsis");
    for option in [
        "[\\fB\\-\\-interval\\fR \\fISECS\\fR]",
        "[\\fB\\-\\-pid\\fR \\fIPID\\fR...]",
        "[\\fB\\-\\-config\\fR \\fIPATH\\fR]",
        "[\\fB\\-1\\fR|\\fB\\-\\-once\\fR]",
    ] {
        assert!(synopsis.contains(option), "{option} missing from: {synopsis}");
    }
    for section in [
        ".SH KEYS",
        ".SH CONFIGURATION",
        ".SH \"EXIT STATUS\"",
        ".SH OPTIONS",
    ] {
        assert!(page.contains(section), "no {section}");
    }
    assert!(
        page.contains("F10") && page.contains("refresh_interval"),
        "{page}"
    );
}

#[test]
fn help_ends_with_the_keys_and_version_names_the_commit() {
    let home = tempfile::tempdir().unwrap();
    let help = generated(home.path(), &["--help"]);
    let keys = help.rsplit("Keys in the view").next().unwrap();
    assert!(keys.contains("F10") && keys.contains("quit"), "{help}");
    let version = generated(home.path(), &["--version"]);
    let built_from_git = Path::new(env!("CARGO_MANIFEST_DIR")).join(".git").exists();
    assert!(
        version.starts_with(&format!("gputop {}", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    assert_eq!(version.contains("(commit "), built_from_git, "{version}");
}

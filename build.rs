//! Build information for `gputop --version`: the commit and its date, when built from a git
//! checkout (the commit's date rather than the build's, so a build is reproducible).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}

fn main() {
    let info = match (
        git(&["rev-parse", "--short=12", "HEAD"]),
        git(&["log", "-1", "--format=%cs"]),
    ) {
        (Some(commit), Some(date)) => format!(" (commit {commit}, {date})"),
        _ => String::new(),
    };
    println!("cargo:rustc-env=GPUTOP_BUILD_INFO={info}");
    // A new commit moves HEAD or the branch it names.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        for path in ["HEAD", "refs/heads", "packed-refs"] {
            println!("cargo:rerun-if-changed={dir}/{path}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}

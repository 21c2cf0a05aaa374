//! The Debian package (`bash scripts/deb.sh`) installed and removed with the real dpkg: what
//! it puts on the machine works, and removing it leaves the machine as it was.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Every file the package installs besides its documentation's copyright notice.
const INSTALLED: [&str; 8] = [
    "/usr/bin/gputop",
    "/usr/share/man/man1/gputop.1.gz",
    "/usr/share/bash-completion/completions/gputop",
    "/usr/share/zsh/vendor-completions/_gputop",
    "/usr/share/fish/vendor_completions.d/gputop.fish",
    "/lib/systemd/system/gputop-exporter.service",
    "/usr/share/doc/gputop/config.toml",
    "/usr/share/doc/gputop/README.md",
];

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"))
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The package `scripts/deb.sh` built (`GPUTOP_DEB` names another).
fn package() -> PathBuf {
    if let Some(path) = std::env::var_os("GPUTOP_DEB") {
        return PathBuf::from(path);
    }
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/debian");
    std::fs::read_dir(&folder)
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .unwrap_or_else(|| {
            panic!(
                "no package in {}: run `bash scripts/deb.sh` first",
                folder.display()
            )
        })
}

#[test]
#[ignore = "needs root and the package built by scripts/deb.sh: it installs and removes it with dpkg"]
fn the_debian_package_installs_what_it_promises_and_is_removed_without_a_trace() {
    common::require_root();
    let deb = package();
    assert!(
        !run("dpkg", &["-s", "gputop"]).status.success(),
        "gputop is installed already: this test would change the machine"
    );
    for path in INSTALLED {
        assert!(!Path::new(path).exists(), "{path} is there before the package");
    }
    let installed = run("dpkg", &["-i", deb.to_str().unwrap()]);
    // Whatever happens next, the package goes again.
    struct Purge;
    impl Drop for Purge {
        fn drop(&mut self) {
            let _ = Command::new("dpkg").args(["--purge", "gputop"]).output();
        }
    }
    let purge = Purge;
    assert!(installed.status.success(), "dpkg -i: {}", text(&installed));
    let listed = text(&run("dpkg", &["-L", "gputop"]));
    for path in INSTALLED {
        assert!(Path::new(path).is_file(), "{path} missing");
        assert!(listed.contains(path), "dpkg -L does not list {path}: {listed}");
    }
    // The installed binary runs its demo, and names itself.
    let version = run("/usr/bin/gputop", &["--version"]);
    assert!(text(&version).starts_with("gputop 0."), "{}", text(&version));
    let once = run("/usr/bin/gputop", &["--demo", "--once"]);
    assert!(
        once.status.success() && text(&once).contains("NVIDIA H100"),
        "{}",
        text(&once)
    );
    // The man page is gputop's, the unit starts the installed binary and is not enabled.
    let man = run("sh", &["-c", "zcat /usr/share/man/man1/gputop.1.gz"]);
    assert!(text(&man).contains(".SH SYNOPSIS"), "{}", text(&man));
    let unit = std::fs::read_to_string("/lib/systemd/system/gputop-exporter.service").unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/gputop export"), "{unit}");
    assert!(!Path::new("/etc/systemd/system/multi-user.target.wants/gputop-exporter.service").exists());
    let completion = std::fs::read_to_string("/usr/share/bash-completion/completions/gputop").unwrap();
    assert!(completion.contains("complete"), "{completion}");

    drop(purge);
    assert!(
        !run("dpkg", &["-s", "gputop"]).status.success(),
        "still installed"
    );
    for path in INSTALLED {
        assert!(!Path::new(path).exists(), "{path} left behind");
    }
    assert!(
        !Path::new("/usr/share/doc/gputop").exists(),
        "its doc folder left behind"
    );
}

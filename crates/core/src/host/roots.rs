//! Where the machine's `/proc` and `/sys` are: there, or where `--path.procfs` and
//! `--path.sysfs` put them (a container that mounts the host's trees elsewhere, a test's
//! fake trees). Set once at start, before anything reads them; every reader of a process's
//! files and of the GPUs' sysfs asks here.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The procfs and sysfs roots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// `/proc`, or where the host's is mounted.
    pub procfs: PathBuf,
    /// `/sys`, or where the host's is mounted.
    pub sysfs: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Self {
            procfs: PathBuf::from("/proc"),
            sysfs: PathBuf::from("/sys"),
        }
    }
}

static ROOTS: OnceLock<Roots> = OnceLock::new();

/// Sets the roots for the rest of the run; `false` when they were set, or read, already.
pub fn set(roots: Roots) -> bool {
    ROOTS.set(roots).is_ok()
}

/// The roots in force: those set, else `/proc` and `/sys`.
pub fn get() -> &'static Roots {
    ROOTS.get_or_init(Roots::default)
}

/// `relative` under the procfs root: `stat` is `/proc/stat`.
pub fn proc_path(relative: impl AsRef<Path>) -> PathBuf {
    get().procfs.join(relative)
}

/// File `name` of process `pid`: `/proc/PID/stat`.
pub fn process_path(pid: u32, name: &str) -> PathBuf {
    let mut path = get().procfs.join(pid.to_string());
    path.push(name);
    path
}

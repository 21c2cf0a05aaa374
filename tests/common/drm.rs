//! A fake machine of AMD and Intel GPUs (`gputop_core::source::drm::fixture`) whose counters
//! advance with the wall clock while gputop reads it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gputop_core::source::drm::fixture;

/// One machine at a time in a test binary: two writers and their gputops would share two
/// cores, and a writer kept waiting leaves its counters behind the clock.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The fake machine, its counters advancing with the wall clock until dropped.
pub struct Machine {
    _turn: std::sync::MutexGuard<'static, ()>,
    dir: tempfile::TempDir,
    stop: Arc<AtomicBool>,
    writer: Option<JoinHandle<()>>,
}

impl Machine {
    pub fn start() -> Self {
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        // In memory where the machine has it, as /proc and /sys are: a rename on a disk's
        // file system can wait tens of milliseconds on its journal, leaving the counters
        // behind the clock.
        let dir = tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .expect("temp dir");
        let (sys, proc) = (dir.path().join("sys"), dir.path().join("proc"));
        fixture::sysfs(&sys, 0.0);
        fixture::procfs(&proc, 0.0);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let started = Instant::now();
        let writer = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                fixture::advance(&sys, &proc, started.elapsed().as_secs_f64());
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        Self {
            _turn: turn,
            dir,
            stop,
            writer: Some(writer),
        }
    }

    pub fn sysfs(&self) -> PathBuf {
        self.dir.path().join("sys")
    }

    pub fn procfs(&self) -> PathBuf {
        self.dir.path().join("proc")
    }

    /// gputop reading this machine alone: NVML is pointed at a library that is not there.
    pub fn gputop(&self, home: &Path) -> std::process::Command {
        let mut command = super::gputop_with_sysfs(home, &self.sysfs());
        command
            .arg("--path.procfs")
            .arg(self.procfs())
            .arg("--nvml-lib")
            .arg(self.dir.path().join("no-libnvidia-ml.so.1"));
        command
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

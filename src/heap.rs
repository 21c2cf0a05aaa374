//! The program's heap policy: glibc keeps freed memory resident, and gputop runs for days
//! beside the jobs it watches, so what a burst freed (NVML's start, the first sight of many
//! processes, history buffers that grew) is handed back to the system here. The binary's
//! own: the library never tunes its host process's allocator (a Python training process).

use std::time::{Duration, Instant};

/// How often a long-running loop hands freed pages back: rarely enough that reusing them
/// (a page fault each) costs nothing measurable.
pub const RELEASE_EVERY: Duration = Duration::from_secs(60);

/// Returns the heap's free pages to the system; what is still allocated is untouched.
pub fn release_free_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Calls [`release_free_pages`] on its first tick (after a loop's first round, the costliest)
/// and then at most once per [`RELEASE_EVERY`].
#[derive(Debug, Default)]
pub struct Releaser {
    last: Option<Instant>,
}

impl Releaser {
    /// Whether it released this time.
    pub fn tick(&mut self) -> bool {
        let due = self.last.is_none_or(|last| last.elapsed() >= RELEASE_EVERY);
        if due {
            release_free_pages();
            self.last = Some(Instant::now());
        }
        due
    }
}

/// `publish` (a collector's, run on its thread after each snapshot) followed by a
/// [`Releaser`]'s tick.
pub fn releasing<T: 'static>(
    mut publish: impl FnMut(T) -> bool + Send + 'static,
) -> Box<dyn FnMut(T) -> bool + Send> {
    let mut releaser = Releaser::default();
    Box::new(move |item| {
        let go_on = publish(item);
        releaser.tick();
        go_on
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rss_anon_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn freed_pages_below_a_live_allocation_leave_resident_memory() {
        // RSS is per process and other tests' allocations would blur it: measured in a child
        // that runs this test alone.
        const CHILD: &str = "GPUTOP_HEAP_TEST_CHILD";
        if std::env::var_os(CHILD).is_none() {
            let child = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["heap::tests::freed_pages_below_a_live_allocation_leave_resident_memory"])
                .args(["--exact", "--test-threads=1", "--nocapture"])
                .env(CHILD, "1")
                .output()
                .unwrap();
            assert!(
                child.status.success(),
                "the child measuring RSS failed: {}{}",
                String::from_utf8_lossy(&child.stdout),
                String::from_utf8_lossy(&child.stderr)
            );
            return;
        }
        // 32 MiB in small blocks (below the size glibc maps on its own), each page touched, then
        // one block after them that stays: the freed space cannot be trimmed off the heap's top.
        let blocks: Vec<Vec<u8>> = (0..8192).map(|_| vec![1u8; 4096]).collect();
        let pin = vec![1u8; 4096];
        let full = rss_anon_kib();
        drop(blocks);
        let freed = rss_anon_kib();
        release_free_pages();
        let released = rss_anon_kib();
        assert!(pin[0] == 1);
        assert!(
            freed + 1024 > full,
            "free() alone kept the pages ({full} -> {freed} KiB)"
        );
        assert!(
            released + 16 * 1024 < freed,
            "releasing returned under 16 MiB of 32 ({freed} -> {released} KiB)"
        );
    }

    #[test]
    fn a_releaser_releases_on_its_first_tick_then_once_a_minute() {
        let mut releaser = Releaser::default();
        assert!(releaser.tick());
        assert!(
            !releaser.tick(),
            "a second tick within the minute releases nothing"
        );
    }
}

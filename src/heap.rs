//! The process heap's policy: glibc keeps freed memory resident, and gputop runs for days
//! beside the jobs it watches, so what a burst freed (NVML's start, the first sight of many
//! processes, history buffers that grew) is handed back to the system here.

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

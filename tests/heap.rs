//! The heap policy against the real allocator: freed pages below a live allocation (which
//! glibc's free cannot return by shrinking the heap) go back to the system when released.
//! Its own test binary: RSS is per process, and other tests' allocations would blur it.

fn rss_anon_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn freed_pages_below_a_live_allocation_leave_resident_memory() {
    // 32 MiB in small blocks (below the size glibc maps on its own), each page touched, then
    // one block after them that stays: the freed space cannot be trimmed off the heap's top.
    let blocks: Vec<Vec<u8>> = (0..8192).map(|_| vec![1u8; 4096]).collect();
    let pin = vec![1u8; 4096];
    let full = rss_anon_kib();
    drop(blocks);
    let freed = rss_anon_kib();
    gputop::heap::release_free_pages();
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
    let mut releaser = gputop::heap::Releaser::default();
    assert!(releaser.tick());
    assert!(
        !releaser.tick(),
        "a second tick within the minute releases nothing"
    );
}

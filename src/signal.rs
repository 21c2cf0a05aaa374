//! Safe process signalling: pin the process with a pidfd, check it is still the one the user
//! confirmed (start time in clock ticks, and owner), then signal through the pidfd. On kernels without pidfd,
//! the same checks and then `kill(2)`. Never PID 0, 1 or gputop itself. What it knows of
//! a process it asks of [`gputop_core::host`].

use crate::app::state::{Signal, Target};
use gputop_core::host::{owner_uid, start_ticks};

/// What happened to one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Sent,
    /// The process had already exited.
    Gone,
    /// The PID now belongs to another process (different start time or owner).
    Replaced,
    NotPermitted {
        owner: String,
    },
    Refused(&'static str),
    Failed(String),
}

impl Outcome {
    /// The status-line text for `target`.
    pub fn describe(&self, signal: Signal, target: &Target) -> String {
        let pid = target.pid;
        match self {
            Self::Sent => format!("{} sent to PID {pid}", signal.name()),
            Self::Gone => format!("PID {pid} had already exited"),
            Self::Replaced => format!("refused: PID {pid} now belongs to another process"),
            Self::NotPermitted { owner } => format!("not permitted: PID {pid} is owned by {owner}"),
            Self::Refused(why) => format!("refused: PID {pid} {why}"),
            Self::Failed(error) => format!("{} to PID {pid} failed: {error}", signal.name()),
        }
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn owner_name(uid: u32) -> String {
    gputop_core::host::user_name_of(uid).unwrap_or_else(|| format!("uid {uid}"))
}

/// Whether the process now at `target.pid` is the one the user confirmed.
fn same_process(target: &Target) -> Result<(), Outcome> {
    let Some(expected) = target.start_ticks else {
        return Err(Outcome::Refused(
            "has no known start time to check its identity against",
        ));
    };
    let owner = owner_uid(target.proc_pid).ok_or(Outcome::Gone)?;
    let now = start_ticks(target.proc_pid).ok_or(Outcome::Gone)?;
    // The kernel's clock ticks (10 ms at the usual 100 a second), as both sides read them
    // from /proc/PID/stat: a PID reused within one tick is the residual risk.
    if now != expected || target.uid.is_some_and(|uid| uid != owner) {
        return Err(Outcome::Replaced);
    }
    Ok(())
}

fn classify(errno: i32, pid: u32) -> Outcome {
    match errno {
        libc::ESRCH => Outcome::Gone,
        libc::EPERM => {
            let owner = owner_uid(pid).map_or_else(|| "another user".into(), owner_name);
            Outcome::NotPermitted { owner }
        }
        other => Outcome::Failed(std::io::Error::from_raw_os_error(other).to_string()),
    }
}

/// Sends `signal` to exactly the process the user confirmed, or says why not.
pub fn send(target: &Target, signal: Signal) -> Outcome {
    let pid = target.pid;
    if pid == 0 || pid == 1 {
        return Outcome::Refused("is never signalled");
    }
    if pid == std::process::id() {
        return Outcome::Refused("is gputop itself");
    }
    let Ok(raw_pid) = libc::pid_t::try_from(pid) else {
        return Outcome::Refused("is out of range");
    };
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, raw_pid, 0) };
    if pidfd < 0 {
        let error = errno();
        if error != libc::ENOSYS {
            return classify(error, pid);
        }
        // No pidfd (Linux < 5.3): check, then kill; a PID reused in between is the residual risk.
        if let Err(outcome) = same_process(target) {
            return outcome;
        }
        // SAFETY: kill with a checked, positive pid.
        return if unsafe { libc::kill(raw_pid, signal.number()) } == 0 {
            Outcome::Sent
        } else {
            classify(errno(), pid)
        };
    }
    let pidfd = pidfd as libc::c_int;
    // The pidfd pins the process: if it is the confirmed one now, the signal reaches it.
    let outcome = match same_process(target) {
        Err(outcome) => outcome,
        Ok(()) => {
            // SAFETY: a pidfd we own, a valid signal number, no siginfo, no flags.
            let result = unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    pidfd,
                    signal.number(),
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                )
            };
            if result == 0 {
                Outcome::Sent
            } else {
                classify(errno(), pid)
            }
        }
    };
    // SAFETY: closing the descriptor pidfd_open gave us.
    unsafe { libc::close(pidfd) };
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn target_of(child: &std::process::Child) -> Target {
        let pid = child.id();
        Target {
            pid,
            proc_pid: pid,
            start_ticks: start_ticks(pid),
            uid: owner_uid(pid),
            user: "me".into(),
            command: "sleep".into(),
        }
    }

    #[test]
    fn a_confirmed_process_is_killed_and_nothing_else() {
        let mut victim = Command::new("sleep").arg("600").spawn().unwrap();
        let mut bystander = Command::new("sleep").arg("600").spawn().unwrap();
        let target = target_of(&victim);
        assert_eq!(send(&target, Signal::Kill), Outcome::Sent);
        let status = victim.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        );
        assert!(bystander.try_wait().unwrap().is_none(), "the other process lives");
        assert_eq!(send(&target, Signal::Kill), Outcome::Gone, "reaped: gone");
        bystander.kill().unwrap();
        bystander.wait().unwrap();
    }

    #[test]
    fn a_different_start_time_or_owner_is_refused() {
        let mut child = Command::new("sleep").arg("600").spawn().unwrap();
        let mut target = target_of(&child);
        target.start_ticks = target.start_ticks.map(|t| t - 1);
        assert_eq!(send(&target, Signal::Kill), Outcome::Replaced);
        let mut target = target_of(&child);
        target.uid = target.uid.map(|u| u + 1);
        assert_eq!(send(&target, Signal::Kill), Outcome::Replaced);
        target.start_ticks = None;
        assert!(matches!(send(&target, Signal::Kill), Outcome::Refused(_)));
        assert!(child.try_wait().unwrap().is_none(), "still alive");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// A sleeper spawned under `pid`, made free again by the caller: the kernel hands out
    /// `ns_last_pid + 1` next (root only; another process forking between is retried).
    fn sleeper_under(pid: u32) -> Option<std::process::Child> {
        for _ in 0..50 {
            std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).ok()?;
            let mut child = Command::new("sleep").arg("600").spawn().unwrap();
            if child.id() == pid {
                return Some(child);
            }
            child.kill().unwrap();
            child.wait().unwrap();
        }
        None
    }

    #[test]
    #[ignore = "needs root: reuses a PID through kernel.ns_last_pid"]
    fn a_process_replaced_under_the_same_pid_in_the_same_second_is_refused() {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "this test reuses a PID through kernel.ns_last_pid: it needs root (sudo bash .ci/all-tests)"
        );
        // Retried when the second process happens to start in the next second: the case
        // tested is the one whole seconds could not tell apart.
        for _ in 0..5 {
            let mut first = Command::new("sleep").arg("600").spawn().unwrap();
            let target = target_of(&first);
            let started = gputop_core::host::start_time_seconds(first.id());
            // Past the clock tick it started in (10 ms at the usual 100 a second): within one
            // tick, a reused PID is the residual risk.
            std::thread::sleep(std::time::Duration::from_millis(30));
            first.kill().unwrap();
            first.wait().unwrap();
            let mut second = sleeper_under(target.pid).expect("the PID was handed out again");
            let same_second = gputop_core::host::start_time_seconds(second.id()) == started;
            let outcome = send(&target, Signal::Kill);
            let lives = second.try_wait().unwrap().is_none();
            second.kill().unwrap();
            second.wait().unwrap();
            if same_second {
                assert_eq!(outcome, Outcome::Replaced);
                assert!(lives, "the new process lives");
                return;
            }
        }
        panic!("no PID was reused within one second in five tries");
    }

    #[test]
    fn init_zero_and_self_are_never_signalled() {
        let me = Target {
            pid: std::process::id(),
            proc_pid: std::process::id(),
            start_ticks: Some(0),
            uid: None,
            user: String::new(),
            command: String::new(),
        };
        assert_eq!(send(&me, Signal::Kill), Outcome::Refused("is gputop itself"));
        for pid in [0, 1] {
            let t = Target { pid, ..me.clone() };
            assert_eq!(send(&t, Signal::Kill), Outcome::Refused("is never signalled"));
        }
    }
}

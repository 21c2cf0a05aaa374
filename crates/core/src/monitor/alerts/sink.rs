//! Where alert transitions go outside the screen: an append-only JSON-lines log file and
//! an optional notification command per severity, run without a shell, killed after a
//! timeout, and rate-limited per severity.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::rules::AlertSettings;
use super::{Phase, Transition};
use crate::format::sanitize;

/// The runtime end of the alert engine.
#[derive(Debug)]
pub struct Sink {
    log: Option<File>,
    /// Per severity (info, warning, critical): the command's argv, empty for none.
    commands: [Vec<String>; 3],
    timeout: Duration,
    min_interval: Duration,
    last_sent: [Option<Instant>; 3],
    /// Notifications skipped by the rate limit since the last one sent, per severity.
    suppressed: [usize; 3],
}

/// Why the alert log (`alert.log_file`) was not opened.
#[derive(Debug, thiserror::Error)]
#[error("alert.log_file: {0}")]
pub struct LogFileError(#[from] pub crate::files::WriteError);

impl Sink {
    /// Opens the alert log (appending) and takes the notify commands; an error names the key.
    pub fn open(settings: &AlertSettings) -> Result<Self, LogFileError> {
        let log = match settings.log_file.as_str() {
            "" => None,
            path => Some(crate::files::open_for_writing(
                &PathBuf::from(path),
                crate::files::Write::Append,
            )?),
        };
        Ok(Self {
            log,
            commands: [
                settings.notify_info.clone(),
                settings.notify_warning.clone(),
                settings.notify_critical.clone(),
            ],
            timeout: Duration::from_secs_f64(settings.notify_timeout),
            min_interval: Duration::from_secs_f64(settings.notify_min_interval),
            last_sent: [None; 3],
            suppressed: [0; 3],
        })
    }

    /// Logs every transition and notifies about alerts that fire. A failing log write or
    /// command never stops gputop; the returned lines say what went wrong.
    pub fn deliver(&mut self, transitions: &[Transition]) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(log) = &mut self.log {
            let mut text = String::new();
            for t in transitions {
                text.push_str(&t.to_json().to_string());
                text.push('\n');
            }
            if !text.is_empty()
                && let Err(e) = log.write_all(text.as_bytes()).and_then(|()| log.flush())
            {
                problems.push(format!("alert log: {e}"));
            }
        }
        for t in transitions.iter().filter(|t| t.to == Phase::Firing) {
            if let Some(problem) = self.notify(t) {
                problems.push(problem);
            }
        }
        problems
    }

    fn notify(&mut self, t: &Transition) -> Option<String> {
        let slot = t.severity as usize;
        let argv = &self.commands[slot];
        let (program, args) = argv.split_first()?;
        let now = Instant::now();
        if self.last_sent[slot].is_some_and(|last| now.duration_since(last) < self.min_interval) {
            self.suppressed[slot] += 1;
            return None;
        }
        self.last_sent[slot] = Some(now);
        let suppressed = std::mem::take(&mut self.suppressed[slot]);
        let child = Command::new(program)
            .args(args)
            .env("GPUTOP_ALERT_RULE", &t.rule)
            .env("GPUTOP_ALERT_SEVERITY", t.severity.label())
            .env("GPUTOP_ALERT_STATE", t.to.label())
            .env("GPUTOP_ALERT_SUBJECT", t.subject.label())
            .env(
                "GPUTOP_ALERT_VALUE",
                t.value.map_or(String::new(), |v| format!("{v:.2}")),
            )
            .env("GPUTOP_ALERT_SUMMARY", sanitize(&t.summary))
            .env("GPUTOP_ALERT_SUPPRESSED", suppressed.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        match child {
            Ok(mut child) => {
                let timeout = self.timeout;
                // Reaped on its own thread, so a slow command never holds up the display.
                let _ = thread::Builder::new()
                    .name("gputop-notify".into())
                    .spawn(move || {
                        let deadline = Instant::now() + timeout;
                        loop {
                            match child.try_wait() {
                                Ok(Some(_)) | Err(_) => return,
                                Ok(None) if Instant::now() >= deadline => {
                                    let _ = child.kill();
                                    let _ = child.wait();
                                    return;
                                }
                                Ok(None) => thread::sleep(Duration::from_millis(20)),
                            }
                        }
                    });
                None
            }
            Err(e) => Some(format!(
                "alert.notify_{}: cannot run {program}: {e}",
                t.severity.label()
            )),
        }
    }
}

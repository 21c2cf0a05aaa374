//! `gputop export`: the collector thread hands each snapshot to the HTTP server, which
//! answers `/metrics`, `/-/ready` and `/snapshot` from it (each page rendered by the first
//! request for it), so scrapes never touch NVML and never wait for it. The alert rules are judged over the exporter's own history
//! (for `/snapshot`, the alert log and notifications); [`rules`] turns the same rules into
//! Prometheus rules.

pub mod metrics;
pub mod rules;
pub mod server;
pub mod usage_state;
pub mod web_config;

use anyhow::Context;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use gputop_core::collector::Collector;
use gputop_core::config::Settings;
use gputop_core::host::HostCollector;
use gputop_core::monitor::Monitor;
use gputop_core::monitor::alerts::sink::Sink;
use gputop_core::source::Source;
use metrics::Options;
use server::{SharedPages, SnapshotPages};
use web_config::WebConfig;

/// Port of `gputop export` by default: not Prometheus's 9090, node_exporter's 9100 or
/// dcgm-exporter's 9400.
pub const DEFAULT_ADDRESS: &str = "127.0.0.1:9835";

/// Where and how the exporter serves: the address, and TLS and authentication.
#[derive(Debug)]
pub struct Serving {
    pub address: String,
    pub web: WebConfig,
}

/// A host reader that names the pods holding the GPUs when the kubelet's PodResources
/// socket answers; says in one line at start which it is, and never fails for it.
fn pod_naming_host(socket: &str) -> HostCollector {
    let mut host = HostCollector::new();
    if socket.is_empty() {
        return host;
    }
    let path = std::path::PathBuf::from(socket);
    if std::fs::symlink_metadata(&path).is_err() {
        eprintln!(
            "gputop export: no pod labels: no kubelet PodResources socket at {} (not a Kubernetes node, or not mounted)",
            path.display()
        );
        return host;
    }
    match gputop_core::host::pods::ask(&path) {
        Ok(allocations) => eprintln!(
            "gputop export: pod labels from the kubelet at {} ({} devices allocated now)",
            path.display(),
            allocations.len()
        ),
        Err(why) => eprintln!(
            "gputop export: no pod labels for now: {}",
            gputop_core::format::sanitize(&why.to_string())
        ),
    }
    if let Err(e) = host.watch_pods(path) {
        eprintln!("gputop export: no pod labels: cannot start the thread asking the kubelet: {e}");
    }
    host
}

/// Binds the address, starts collecting, and serves until the process is stopped; alert
/// transitions go to `sink`.
pub fn run(
    source: Source,
    settings: &Settings,
    options: Options,
    mut sink: Sink,
    serving: Serving,
) -> anyhow::Result<()> {
    // The exporter keeps history and judges the alert rules as the view does: /snapshot
    // lists the pending and firing alerts, and the alert log and notifications work
    // without a terminal.
    let mut monitor = Monitor::new(
        &settings.history,
        &settings.alert,
        settings.display.refresh_interval,
    );
    // Only a real machine's usage is kept: the demo's users would land in the totals that
    // billing reads.
    let state_path = match source {
        Source::Demo(_) => {
            eprintln!("gputop export: the demo's usage totals are not kept (only a real machine's are)");
            None
        }
        // A recording's users are not this machine's either.
        Source::Replay(_) => None,
        Source::Local(_) => usage_state::default_path(),
    };
    let mut state = match state_path {
        Some(path) => {
            let (state, problem) = usage_state::UsageState::open(path, &mut monitor)?;
            if let Some(problem) = problem {
                eprintln!("gputop export: {problem}");
            }
            Some(state)
        }
        None => None,
    };
    let address = &serving.address;
    let listener = TcpListener::bind(address).with_context(|| format!("cannot listen on {address}"))?;
    let bound = listener
        .local_addr()
        .map_or_else(|_| address.to_string(), |a| a.to_string());
    let scheme = if serving.web.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let auth = if serving.web.auth.is_some() {
        " (basic auth)"
    } else {
        ""
    };
    eprintln!("gputop export: serving {scheme}://{bound}/metrics{auth}");
    let pages: SharedPages = Arc::new(RwLock::new(None));
    let interval = Duration::from_secs_f64(settings.display.refresh_interval);
    let freshness = server::Freshness {
        interval,
        activity: source.activity(),
    };
    let shared = Arc::clone(&pages);
    if let Some(state) = &state {
        eprintln!("gputop export: usage totals kept in {}", state.path().display());
    }
    // SIGTERM, SIGINT and SIGHUP stop the exporter once the collector has saved the totals
    // (or after two intervals and a second, should collection hang).
    let stopping = Arc::new(AtomicBool::new(false));
    let (saved, saved_at_stop) = mpsc::channel::<()>();
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP]).context("cannot handle signals")?;
    let asked = Arc::clone(&stopping);
    std::thread::Builder::new()
        .name("gputop-signals".into())
        .spawn(move || {
            if signals.forever().next().is_some() {
                asked.store(true, Ordering::SeqCst);
                let _ = saved_at_stop.recv_timeout(2 * interval + Duration::from_secs(1));
                std::process::exit(0);
            }
        })
        .context("cannot handle signals")?;
    let _collector = Collector::spawn_with_host(
        source,
        pod_naming_host(&settings.collect.pod_resources_socket),
        interval,
        crate::heap::releasing(move |snapshot: Arc<gputop_core::model::Snapshot>| {
            let transitions = monitor.ingest(&snapshot);
            let stop = stopping.load(Ordering::SeqCst);
            if let Some(state) = state.as_mut().filter(|s| stop || s.due())
                && let Err(problem) = state.save(monitor.usage())
            {
                eprintln!(
                    "gputop export: {}",
                    gputop_core::format::sanitize(&format!("{problem:#}"))
                );
            }
            if stop {
                let _ = saved.send(());
                return false;
            }
            for problem in sink.deliver(&transitions) {
                eprintln!("gputop export: {}", gputop_core::format::sanitize(&problem));
            }
            let page = SnapshotPages::new(Arc::clone(&snapshot), &monitor, options);
            *shared.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(page));
            true
        }),
    )
    .context("cannot start the collector")?;
    server::serve(listener, pages, freshness, serving.web).context("cannot serve")
}

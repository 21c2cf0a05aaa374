//! The program: from parsed arguments to output and an exit code.
//!
//! Every failure the user can cause or meet becomes a [`Failure`]: one actionable line and a
//! documented exit code (see `cli::EXIT_CODES`), never a panic.

mod interactive;
mod manual;
mod validate;

use anyhow::{Context, anyhow};
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::app::filter::Selection;
use crate::cli::{CaptureArgs, Cli, Command, RecordArgs, ReplayArgs, ValidateArgs};
use crate::output::record::{Limits, Recorder};
use crate::output::report;
use crate::ui::theme::Theme;
use gputop_core::collector::{Collector, collect_once};
use gputop_core::config::Origin;
use gputop_core::config::{self, ConfigError, Effective, Settings};
use gputop_core::format::sanitize;
use gputop_core::monitor::Monitor;
use gputop_core::monitor::alerts::{self, sink::Sink};
use gputop_core::source::http::{Credentials, Endpoint, TlsFiles};
use gputop_core::source::nvml::{NvmlSource, NvmlUnusable};
use gputop_core::source::prometheus::{self, Prometheus};
use gputop_core::source::remote::{self, MAX_NODES, parse_hosts_file};
use gputop_core::source::replay::Recording;
use gputop_core::source::{Opening, Source};
use interactive::{Ending, Feed};
use validate::SmiFailure;

/// Why gputop stopped early.
#[derive(Debug)]
pub enum Failure {
    Config(ConfigError),
    Nvml(NvmlUnusable),
    Output(std::io::Error),
    /// `gputop validate`: nvidia-smi is missing or failed.
    Smi(SmiFailure),
    /// `gputop validate`: this many readings differ beyond the tolerance.
    Disagreement(usize),
    /// A failure its causes explain in one line (record, replay, export, the remote view).
    Other(anyhow::Error),
}

impl Failure {
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Output(_) | Self::Disagreement(_) | Self::Other(_) => 1,
            Self::Smi(_) => 9,
            Self::Config(_) => 3,
            Self::Nvml(NvmlUnusable::LibraryMissing(_)) => 4,
            Self::Nvml(NvmlUnusable::DriverNotLoaded) => 5,
            Self::Nvml(NvmlUnusable::DriverLibraryMismatch) => 6,
            Self::Nvml(NvmlUnusable::NoPermission) => 7,
            Self::Nvml(NvmlUnusable::NoGpu) => 8,
            Self::Nvml(NvmlUnusable::Other(_)) => 1,
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Self::Other(e)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Config(e) => write!(f, "configuration error: {e}"),
            Self::Output(e) => write!(f, "cannot write the output: {e}"),
            Self::Other(e) => write!(f, "{e:#}"),
            Self::Smi(SmiFailure(reason)) => write!(f, "validate: {reason}"),
            Self::Disagreement(n) => write!(
                f,
                "validate: {n} reading(s) differ from nvidia-smi beyond the tolerance"
            ),
            Self::Nvml(why) => write!(f, "{why}"),
        }
    }
}

/// Writes to stdout; a closed pipe (`gputop --once | head -1`) is not an error.
fn emit(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure::Output(e)),
        _ => Ok(()),
    }
}

fn open_source(cli: &Cli) -> Result<Source, Failure> {
    open_live(cli).map_err(Failure::Nvml)
}

fn open_live(cli: &Cli) -> Result<Source, NvmlUnusable> {
    if cli.demo {
        return Ok(Source::demo());
    }
    let source = Source::local(cli.nvml_lib.as_deref())?;
    // Initialising frees most of what it allocated (a driver's tables, the simulator's
    // scenario): hand those pages back rather than keep them resident for the run. The
    // first collection does not reuse them all, so this also lowers a one-shot's peak
    // (8 GPUs: 7.0 -> 6.5 MiB with 64 processes, 9.2 -> 8.3 with 512).
    crate::heap::release_free_pages();
    Ok(source)
}

/// How long the view waits for NVML to open before it starts and says it is waiting: a
/// quick failure is still told before the screen is taken.
const OPEN_BEFORE_VIEW: Duration = Duration::from_millis(500);

/// Runs gputop with parsed arguments; `env` reads the environment.
pub fn run(cli: &Cli, env: &dyn Fn(&str) -> Option<String>) -> Result<(), Failure> {
    refuse_borrowed_privileges()?;
    let standard = gputop_core::host::roots::Roots::default();
    gputop_core::host::roots::set(gputop_core::host::roots::Roots {
        procfs: cli.procfs.clone().unwrap_or(standard.procfs),
        sysfs: cli.sysfs.clone().unwrap_or(standard.sysfs),
    });
    let effective = config::load(cli.config.as_deref(), env, &cli.overrides()).map_err(Failure::Config)?;
    if cli.dump_config {
        return emit(&config::dump(&effective));
    }
    match &cli.command {
        Some(Command::Validate(args)) => return run_validate(cli, args),
        Some(Command::Replay(args)) => return run_replay(cli, args, &effective, env),
        Some(Command::Record(args)) => return run_record(cli, args, &effective),
        Some(Command::Capture(args)) => return run_capture(cli, args),
        Some(Command::Completions { shell }) => return emit(&manual::completions(*shell)),
        Some(Command::Man) => return emit(&manual::page()),
        Some(Command::Rules(args)) => {
            let rules = effective.settings.alert.effective_rules();
            let text = crate::output::export::rules::prometheus_rules(&rules, args.scrape_interval);
            return emit(&if args.kubernetes {
                crate::output::export::rules::prometheus_rule_manifest(&text)
            } else {
                text
            });
        }
        Some(Command::Export(args)) => {
            let web = match &args.web_config_file {
                Some(path) => crate::output::export::web_config::load(path)
                    .map_err(|e| Failure::Config(ConfigError(format!("{e:#}"))))?,
                None => Default::default(),
            };
            let mut source = open_source(cli)?;
            if let Some(nvml) = source.nvml_mut() {
                nvml.start_threads(Duration::from_secs_f64(effective.settings.collect.pcie_interval));
            }
            let options = crate::output::export::metrics::Options {
                processes: args.processes,
                commands: args.process_commands,
            };
            let sink = Sink::open(&effective.settings.alert)
                .map_err(|e| Failure::Config(ConfigError(e.to_string())))?;
            return crate::output::export::run(
                source,
                &effective.settings,
                options,
                sink,
                crate::output::export::Serving {
                    address: args.web_listen_address.clone(),
                    web,
                },
            )
            .map_err(Failure::Other);
        }
        None => {}
    }
    if !cli.remote.is_empty() || cli.hosts_file.is_some() {
        return run_remote(cli, &effective, env);
    }
    if let Some(url) = &cli.prometheus {
        return run_prometheus(cli, url, &effective, env);
    }
    let interval = Duration::from_secs_f64(effective.settings.display.refresh_interval);
    let selection = cli.selection(env("CUDA_VISIBLE_DEVICES").as_deref());
    if cli.list {
        let snapshot = one_snapshot(cli, interval)?;
        return emit(&report::list(&selection.apply(snapshot)));
    }
    if cli.once || cli.json || !std::io::stdout().is_terminal() {
        let snapshot = one_snapshot(cli, interval)?;
        let alerts = one_shot_alerts(&effective.settings, &snapshot);
        let snapshot = selection.apply(snapshot);
        return emit(&once_report(&snapshot, &alerts, cli.json, &effective)?);
    }
    interactive_view(cli, &effective, env)
}

/// The alerts of a one-shot's snapshot, judged by the same engine as the viewer's and the
/// exporter's, on its one reading of the whole machine: `--user`, `--pid`, `--only`,
/// `--compute` and `--graphics` choose what is shown, never what is judged (a GPU that a
/// filter leaves empty is not idle).
fn one_shot_alerts(settings: &Settings, snapshot: &gputop_core::model::Snapshot) -> Vec<alerts::Active> {
    Monitor::new(
        &settings.history,
        &settings.alert,
        settings.display.refresh_interval,
    )
    .alerts_once(snapshot)
}

/// How long a one-shot waits for NVML to open and answer: a driver without persistence
/// mode takes seconds to initialise, a hung GPU (Xid 45) can block calls for good.
const ONE_SHOT_LIMIT: Duration = Duration::from_secs(15);

/// Opens the source and takes one snapshot on a thread of its own, so that a driver whose
/// calls never return ends gputop with an error after [`ONE_SHOT_LIMIT`] instead of a hang.
fn one_snapshot(cli: &Cli, window: Duration) -> Result<gputop_core::model::Snapshot, Failure> {
    let (done, result) = std::sync::mpsc::channel();
    let cli = cli.clone();
    std::thread::Builder::new()
        .name("gputop-once".into())
        .spawn(move || {
            let snapshot = open_source(&cli).map(|mut source| collect_once(&mut source, window));
            let _ = done.send(snapshot);
        })
        .context("cannot start the collection thread")?;
    result.recv_timeout(ONE_SHOT_LIMIT).unwrap_or_else(|_| {
        Err(Failure::Other(anyhow!(
            "NVML did not answer within {} s: the driver may be hung (check `nvidia-smi` and the \
             kernel log for Xid errors) or still initialising without persistence mode",
            ONE_SHOT_LIMIT.as_secs()
        )))
    })
}

/// The interactive screen, when stdout is a terminal.
fn interactive_view(
    cli: &Cli,
    effective: &Effective,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), Failure> {
    let pcie_interval = Duration::from_secs_f64(effective.settings.collect.pcie_interval);
    let options = cli.clone();
    let opening = Opening::start(move || {
        let mut source = open_live(&options)?;
        if let Some(nvml) = source.nvml_mut() {
            nvml.start_threads(pcie_interval);
        }
        Ok(source)
    })
    .context("cannot start the thread opening NVML")?;
    let feed = match opening.wait(OPEN_BEFORE_VIEW) {
        Ok(Ok(source)) => Feed::Source(source),
        Ok(Err(why)) => return Err(Failure::Nvml(why)),
        Err(still_opening) => Feed::Opening(still_opening),
    };
    let theme = theme_of(cli, env);
    // The demo's PIDs are invented: the view never signals them (see `Origin`).
    let readonly = cli.readonly || effective.settings.signals.readonly;
    let selection = cli.selection(env("CUDA_VISIBLE_DEVICES").as_deref());
    view(feed, &effective.settings, selection, readonly, theme)
}

/// The interactive view over `feed` until it ends; a signal ends gputop with 128 + N.
fn view(
    feed: Feed,
    settings: &Settings,
    selection: Selection,
    readonly: bool,
    theme: Theme,
) -> Result<(), Failure> {
    let sink = Sink::open(&settings.alert).map_err(|e| Failure::Config(ConfigError(e.to_string())))?;
    match interactive::run(feed, settings, selection, readonly, theme, sink) {
        Ok(Ending::Signal(signal)) => std::process::exit(128 + signal),
        Ok(Ending::Quit | Ending::TerminalClosed) => Ok(()),
        Ok(Ending::Failed(why)) => Err(Failure::Nvml(why)),
        Err(e) => Err(Failure::Output(e)),
    }
}
fn theme_of(cli: &Cli, env: &dyn Fn(&str) -> Option<String>) -> Theme {
    Theme {
        color: !cli.no_color && env("NO_COLOR").is_none_or(|v| v.is_empty()),
        ascii: cli.ascii,
        light: cli.light,
    }
}

/// `gputop capture FILE`: refreshes once a second for `--duration` seconds, keeping every
/// NVML device sample and the AMD and Intel GPUs' files read, then writes the scenario.
fn run_capture(cli: &Cli, args: &CaptureArgs) -> Result<(), Failure> {
    if cli.demo {
        return Err(anyhow!("gputop capture records a machine's GPUs; the demo has none to capture").into());
    }
    let roots = gputop_core::host::roots::get();
    let (mut drm, drm_files) = gputop_core::source::drm::DrmReader::recording(&roots.procfs, &roots.sysfs);
    let mut nvml = match NvmlSource::open(cli.nvml_lib.as_deref()) {
        Ok(nvml) => Some(nvml),
        Err(why) if drm.devices().is_empty() => return Err(Failure::Nvml(why)),
        Err(_) => None,
    };
    let mut file = gputop_core::files::open_for_writing(&args.file, gputop_core::files::Write::CreateNew)
        .map_err(anyhow::Error::from)?;
    if let Some(nvml) = &mut nvml {
        nvml.log_samples();
    }
    let hostname = gputop_core::host::HostCollector::new().hostname().to_string();
    let started = Instant::now();
    let mut reads = Vec::new();
    let mut drm_seconds = 0.0;
    loop {
        let at = started.elapsed().as_secs_f64();
        let (readout, samples) = match &mut nvml {
            Some(nvml) => (nvml.read(Duration::from_secs(1)), nvml.take_samples()),
            None => (gputop_core::source::Readout::empty(), Vec::new()),
        };
        reads.push(crate::output::capture::CapturedRead { at, readout, samples });
        if !drm.devices().is_empty() {
            drm.read();
            drm_seconds = started.elapsed().as_secs_f64();
        }
        let next = Duration::from_secs(reads.len() as u64);
        if next.as_secs_f64() > args.duration {
            break;
        }
        std::thread::sleep(next.saturating_sub(started.elapsed()));
    }
    let captured = crate::output::capture::Captured {
        hostname,
        exports: nvml
            .as_ref()
            .map_or_else(crate::output::capture::no_exports, NvmlSource::exports),
        reads,
    };
    let mut text = crate::output::capture::scenario(&captured);
    let drm_gpus = drm.devices().len();
    if drm_gpus > 0 {
        let mut files = drm_files.lock().unwrap_or_else(|e| e.into_inner()).0.for_report();
        files.seconds = drm_seconds - captured.reads[0].at;
        text.push_str(&crate::output::capture::drm_section(&files));
    }
    std::io::Write::write_all(&mut file, text.as_bytes())
        .with_context(|| format!("cannot write {}", args.file.display()))?;
    eprintln!(
        "gputop: captured {} refreshes of {} GPU(s) to {}",
        captured.reads.len(),
        captured.reads[0].readout.devices.len() + drm_gpus,
        args.file.display()
    );
    Ok(())
}

fn run_record(cli: &Cli, args: &RecordArgs, effective: &Effective) -> Result<(), Failure> {
    let source = open_source(cli)?;
    let settings = &effective.settings;
    let limits = Limits {
        max_bytes: args.max_size,
        max_age_seconds: args.max_age,
    };
    let interval = settings.display.refresh_interval;
    let hostname = gputop_core::host::HostCollector::new().hostname().to_string();
    let mut recorder = Recorder::create(&args.file, limits, interval, &hostname)?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM, SIGHUP] {
        signal_hook::flag::register(signal, Arc::clone(&stop)).map_err(Failure::Output)?;
    }
    let collector = Collector::spawn(source, Duration::from_secs_f64(interval)).map_err(Failure::Output)?;
    let started = Instant::now();
    let deadline = args.duration.map(Duration::from_secs_f64);
    let mut heap = crate::heap::Releaser::default();
    while !stop.load(Ordering::Relaxed) && deadline.is_none_or(|d| started.elapsed() < d) {
        if let Some(snapshot) = collector.next(Duration::from_millis(200)) {
            recorder.push(&snapshot)?;
            heap.tick();
        }
    }
    drop(collector);
    eprintln!(
        "gputop: recorded {} frames to {}",
        recorder.frames,
        args.file.display()
    );
    Ok(())
}

/// Refuses to run with more privilege than the user who started gputop has: set-user-ID or
/// set-group-ID, or capabilities given to the file (`setcap cap_kill+ep`). gputop loads a
/// library the user names (`--nvml-lib`), runs the user's notification commands and signals
/// processes; with borrowed privilege each of these would act for someone else. Root, who
/// has every capability anyway, runs as usual.
fn refuse_borrowed_privileges() -> Result<(), Failure> {
    // SAFETY: these getters have no preconditions.
    let (uid, euid, gid, egid) =
        unsafe { (libc::getuid(), libc::geteuid(), libc::getgid(), libc::getegid()) };
    if uid != euid || gid != egid {
        return Err(anyhow!(
            "refusing to run set-user-ID or set-group-ID (user {uid} running as {euid}, group {gid} as {egid}): \
             install gputop without the setuid and setgid bits"
        )
        .into());
    }
    if uid == 0 {
        return Ok(());
    }
    let (effective, permitted) = capabilities();
    if effective != 0 || permitted != 0 {
        return Err(anyhow!(
            "refusing to run with capabilities (effective {effective:#x}, permitted {permitted:#x}) \
             that user {uid} does not have: remove them from the file with `setcap -r` or from the service"
        )
        .into());
    }
    Ok(())
}

/// This process's effective and permitted capability sets (all 64 bits), from `capget(2)`.
fn capabilities() -> (u64, u64) {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget with a version 3 header and room for its two data structs.
    let result = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    if result != 0 {
        return (0, 0);
    }
    let join = |low: u32, high: u32| u64::from(low) | (u64::from(high) << 32);
    (
        join(data[0].effective, data[1].effective),
        join(data[0].permitted, data[1].permitted),
    )
}

/// `gputop replay FILE`: the interactive view over a recording, or one frame with --once.
fn run_replay(
    cli: &Cli,
    args: &ReplayArgs,
    effective: &Effective,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), Failure> {
    let recording = Recording::open(&args.file).map_err(anyhow::Error::from)?;
    if args.info {
        let first = recording
            .first_problem
            .as_ref()
            .map_or_else(String::new, |problem| format!(" (first: {})", sanitize(problem)));
        return emit(&format!(
            "{}: {} frames over {:.1} s from {}; {} damaged line(s) skipped{first}\n",
            args.file.display(),
            recording.len(),
            recording.span(),
            sanitize(&recording.hostname),
            recording.skipped
        ));
    }
    if args.once || args.json || !std::io::stdout().is_terminal() {
        let index = args.at.map_or(recording.len() - 1, |at| recording.index_at(at));
        let snapshot = recording.frame(index).map_err(anyhow::Error::from)?;
        let alerts = one_shot_alerts(&effective.settings, &snapshot);
        let snapshot = cli
            .selection(env("CUDA_VISIBLE_DEVICES").as_deref())
            .apply(snapshot);
        return emit(&once_report(&snapshot, &alerts, args.json, effective)?);
    }
    // History expects snapshots at the recording's own interval.
    let mut settings = effective.settings.clone();
    settings.display.refresh_interval = recording.interval;
    // A recording's processes are not this machine's: the view never signals them.
    view(
        Feed::Source(Source::replay(recording, args.speed).map_err(anyhow::Error::from)?),
        &settings,
        cli.selection(env("CUDA_VISIBLE_DEVICES").as_deref()),
        cli.readonly || settings.signals.readonly,
        theme_of(cli, env),
    )
}

/// `--remote` / `--hosts-file`: the cluster view of other machines' exporters.
fn run_remote(cli: &Cli, effective: &Effective, env: &dyn Fn(&str) -> Option<String>) -> Result<(), Failure> {
    let mut nodes = Vec::new();
    for address in &cli.remote {
        nodes.push(remote::parse_node(address).map_err(|e| anyhow!("--remote {e}"))?);
    }
    if let Some(path) = &cli.hosts_file {
        let text = gputop_core::files::read_text(path, 1 << 20)
            .with_context(|| format!("{}: cannot read the hosts file", path.display()))?;
        let listed = parse_hosts_file(&text).with_context(|| path.display().to_string())?;
        nodes.extend(listed);
    }
    if nodes.is_empty() {
        return Err(anyhow!("no nodes to watch: give --remote URL or a hosts file with addresses").into());
    }
    if nodes.len() > MAX_NODES {
        return Err(anyhow!(
            "{} nodes: the remote view watches at most {MAX_NODES}",
            nodes.len()
        )
        .into());
    }
    if cli.once || cli.json || !std::io::stdout().is_terminal() {
        let fleet = remote::once(nodes).context("cannot start the fetches")?;
        return emit_fleet(&fleet, cli.json);
    }
    // Remote processes are not this machine's: the view never signals them.
    view(
        Feed::Remote(nodes),
        &effective.settings,
        cli.selection(env("CUDA_VISIBLE_DEVICES").as_deref()),
        cli.readonly || effective.settings.signals.readonly,
        theme_of(cli, env),
    )
}

/// Seconds between fleet refreshes when neither `--interval` nor the file sets them.
const FLEET_INTERVAL: f64 = 5.0;

/// `--prometheus URL`: the fleet from Prometheus' series.
fn run_prometheus(
    cli: &Cli,
    url: &str,
    effective: &Effective,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), Failure> {
    let endpoint =
        Endpoint::parse(url, prometheus::PROMETHEUS_PORT).map_err(|e| anyhow!("--prometheus {e}"))?;
    let selector = prometheus::parse_selector(&cli.prometheus_selector)
        .map_err(|e| anyhow!("--prometheus-selector {e}"))?;
    let credentials = match (&cli.prometheus_bearer_token_file, &cli.prometheus_basic_auth_file) {
        (Some(token), _) => Some(Credentials::BearerTokenFile(token.clone())),
        (None, Some(pair)) => Some(Credentials::BasicAuthFile(pair.clone())),
        (None, None) => None,
    };
    let settings = prometheus::Settings {
        endpoint,
        selector,
        tls: TlsFiles {
            ca_file: cli.prometheus_ca_file.clone(),
            cert_file: cli.prometheus_cert_file.clone(),
            key_file: cli.prometheus_key_file.clone(),
        },
        credentials,
        timeout: Duration::from_secs_f64(cli.prometheus_timeout),
    };
    if cli.once || cli.json || !std::io::stdout().is_terminal() {
        let fleet =
            prometheus::once(&settings).map_err(|why| anyhow!("{}: {why}", settings.endpoint.url()))?;
        return emit_fleet(&fleet, cli.json);
    }
    let client = Prometheus::new(&settings).context("--prometheus")?;
    let mut settings_used = effective.settings.clone();
    let interval_set = effective.entries.iter().any(|e| {
        e.key.section == "display" && e.key.name == "refresh_interval" && e.origin != Origin::Default
    });
    if !interval_set {
        settings_used.display.refresh_interval = FLEET_INTERVAL;
    }
    view(
        Feed::Prometheus(client),
        &settings_used,
        cli.selection(env("CUDA_VISIBLE_DEVICES").as_deref()),
        cli.readonly || effective.settings.signals.readonly,
        theme_of(cli, env),
    )
}

/// A fleet's `--once` report, as text or JSON.
fn emit_fleet(fleet: &gputop_core::model::fleet::Fleet, json: bool) -> Result<(), Failure> {
    let text = if json {
        crate::output::fleet::json(fleet).map_err(|e| Failure::Output(e.into()))?
    } else {
        crate::output::fleet::text(fleet)
    };
    emit(&text)
}

/// The `--once` report, as text or JSON.
fn once_report(
    snapshot: &gputop_core::model::Snapshot,
    alerts: &[alerts::Active],
    json: bool,
    effective: &Effective,
) -> Result<String, Failure> {
    if json {
        // One snapshot: who holds what now; nothing has accumulated yet.
        let mut usage = gputop_core::monitor::usage::Accounting::new(std::time::Duration::from_secs(1));
        usage.record(snapshot);
        let mut text = serde_json::to_string_pretty(&report::json_report(snapshot, alerts, &usage))
            .map_err(|e| Failure::Output(e.into()))?;
        text.push('\n');
        Ok(text)
    } else {
        // On a terminal, fitted to its width as the live view is; in a pipe, whole.
        let width = std::io::stdout()
            .is_terminal()
            .then(|| crate::term::terminal_size().ok())
            .flatten()
            .map(|size| size.width)
            .filter(|columns| *columns > 0);
        Ok(report::text_report(
            snapshot,
            &effective.settings.display.default_metrics,
            alerts,
            width,
        ))
    }
}

/// `gputop validate`: rounds of aligned reads, then the comparison.
fn run_validate(cli: &Cli, args: &ValidateArgs) -> Result<(), Failure> {
    let mut source = NvmlSource::open(cli.nvml_lib.as_deref()).map_err(Failure::Nvml)?;
    let extra_rounds = if args.duration.is_finite() {
        args.duration.max(0.0).floor() as usize
    } else {
        0
    };
    let mut rounds = Vec::with_capacity(extra_rounds + 1);
    for round in 0..=extra_rounds {
        if round > 0 {
            std::thread::sleep(Duration::from_secs(1));
        }
        let mut read = || source.read(Duration::from_secs(1));
        rounds.push(validate::read_round(&mut read, &args.nvidia_smi).map_err(Failure::Smi)?);
    }
    let report = validate::compare(&rounds, args.tolerance);
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&validate::json_report(&report))
            .map_err(|e| Failure::Output(e.into()))?;
        text.push('\n');
        text
    } else {
        validate::text(&report)
    };
    emit(&text)?;
    match report.disagreements() {
        0 => Ok(()),
        n => Err(Failure::Disagreement(n)),
    }
}

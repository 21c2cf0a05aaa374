//! The command line (clap): flags, their help, and how they map onto settings and filters.

use std::path::PathBuf;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::app::filter::{DeviceSpec, Selection, parse_device_list};
use gputop_core::config::CliOverrides;

/// An interactive viewer for NVIDIA GPUs and the processes using them.
///
/// Without a GPU, `gputop --demo` shows a simulated machine.
#[derive(Debug, Clone, Parser)]
#[command(name = "gputop", version = VERSION, about, long_about = None, after_help = EXIT_CODES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Print one report and exit (also when stdout is not a terminal)
    #[arg(short = '1', long)]
    pub once: bool,

    /// With --once: print the report as JSON (implies --once)
    #[arg(long, conflicts_with_all = ["list", "dump_config"])]
    pub json: bool,

    /// List the GPUs, one per line, and exit
    #[arg(short = 'l', long)]
    pub list: bool,

    /// Print the effective configuration, with the origin of each setting, and exit
    #[arg(long)]
    pub dump_config: bool,

    /// Read the configuration from PATH instead of ~/.config/gputop/config.toml
    #[arg(long, value_name = "PATH", global = true)]
    pub config: Option<PathBuf>,

    /// Seconds between refreshes, 0.1 to 3600 (overrides display.refresh_interval)
    #[arg(long, value_name = "SECS", global = true, allow_negative_numbers = true, value_parser = interval)]
    pub interval: Option<f64>,

    /// Show only these GPUs or MIG devices, named as CUDA_VISIBLE_DEVICES names them: index,
    /// GPU UUID (or a unique prefix), MIG UUID, or MIG-GPU-<uuid>/<gi>/<ci>
    #[arg(long, value_name = "ID", num_args = 1.., value_delimiter = ',', value_parser = parse_device_spec)]
    pub only: Vec<DeviceSpec>,

    /// Show only the GPUs and MIG devices CUDA_VISIBLE_DEVICES makes visible
    #[arg(long, conflicts_with = "only")]
    pub only_visible: bool,

    /// Show only processes of these users
    #[arg(long, value_name = "USER", num_args = 1.., value_delimiter = ',')]
    pub user: Vec<String>,

    /// Show only these processes
    #[arg(long, value_name = "PID", num_args = 1.., value_delimiter = ',', allow_negative_numbers = true, value_parser = pid)]
    pub pid: Vec<u32>,

    /// Show only compute processes (C and C+G)
    #[arg(long)]
    pub compute: bool,

    /// Show only graphics processes (G and C+G)
    #[arg(long)]
    pub graphics: bool,

    /// Never send signals to processes (also `[signals] readonly = true`)
    #[arg(long)]
    pub readonly: bool,

    /// No colours (also when NO_COLOR is set)
    #[arg(long)]
    pub no_color: bool,

    /// Draw with ASCII characters only
    #[arg(long)]
    pub ascii: bool,

    /// Colours for a light terminal background
    #[arg(long)]
    pub light: bool,

    /// Load NVML from PATH instead of libnvidia-ml.so.1 on the library path
    #[arg(long, value_name = "PATH", global = true)]
    pub nvml_lib: Option<PathBuf>,

    /// Read processes from this procfs, not /proc (a container that mounts the host's elsewhere)
    #[arg(long = "path.procfs", value_name = "DIR", global = true)]
    pub procfs: Option<PathBuf>,

    /// Read AMD and Intel GPUs from this sysfs, not /sys (where the host's is mounted)
    #[arg(long = "path.sysfs", value_name = "DIR", global = true)]
    pub sysfs: Option<PathBuf>,

    /// Watch other machines' `gputop export` (http://HOST:PORT, HOST:PORT or HOST; port 9835)
    #[arg(long, value_name = "URL", num_args = 1.., value_delimiter = ',', conflicts_with_all = ["demo", "nvml_lib"])]
    pub remote: Vec<String>,

    /// Watch the nodes listed in PATH (one address per line, # comments)
    #[arg(long, value_name = "PATH", conflicts_with_all = ["demo", "nvml_lib"])]
    pub hosts_file: Option<PathBuf>,

    /// The fleet from Prometheus (or Thanos, Mimir, VictoriaMetrics) scraping gputop's exporters
    #[arg(long, value_name = "URL", conflicts_with_all = ["demo", "nvml_lib", "remote", "hosts_file"])]
    pub prometheus: Option<String>,

    /// With --prometheus: the label matchers of gputop's targets
    #[arg(
        long,
        value_name = "SELECTOR",
        default_value = gputop_core::source::prometheus::DEFAULT_SELECTOR,
        requires = "prometheus"
    )]
    pub prometheus_selector: String,

    /// With --prometheus: send the token in FILE (read at each request) as a bearer token
    #[arg(
        long,
        value_name = "FILE",
        requires = "prometheus",
        conflicts_with = "prometheus_basic_auth_file"
    )]
    pub prometheus_bearer_token_file: Option<PathBuf>,

    /// With --prometheus: basic auth with USER:PASSWORD, the first line of FILE
    #[arg(long, value_name = "FILE", requires = "prometheus")]
    pub prometheus_basic_auth_file: Option<PathBuf>,

    /// With --prometheus over https: trust only the CA certificates in FILE (PEM)
    #[arg(long, value_name = "FILE", requires = "prometheus")]
    pub prometheus_ca_file: Option<PathBuf>,

    /// With --prometheus over https: present this client certificate (PEM; with --prometheus-key-file)
    #[arg(long, value_name = "FILE", requires_all = ["prometheus", "prometheus_key_file"])]
    pub prometheus_cert_file: Option<PathBuf>,

    /// With --prometheus over https: the client certificate's key (PEM)
    #[arg(long, value_name = "FILE", requires_all = ["prometheus", "prometheus_cert_file"])]
    pub prometheus_key_file: Option<PathBuf>,

    /// With --prometheus: seconds a query may take before the screen says the data is old
    #[arg(long, value_name = "SECS", default_value_t = 10.0, requires = "prometheus", value_parser = timeout)]
    pub prometheus_timeout: f64,

    /// Show a built-in simulated machine instead of the real GPUs
    #[arg(long, conflicts_with = "nvml_lib", global = true)]
    pub demo: bool,
}

/// Subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Cross-check gputop's readings against nvidia-smi on this machine
    #[command(after_help = VALIDATE_EXIT_CODES)]
    Validate(ValidateArgs),
    /// Serve Prometheus metrics (/metrics), readiness (/-/ready) and the JSON snapshot (/snapshot)
    Export(ExportArgs),
    /// Print Prometheus alerting rules made from the alert configuration
    Rules(RulesArgs),
    /// Record snapshots to FILE (JSON lines, mode 0600) until stopped; replay them later
    Record(RecordArgs),
    /// Play a recording in the interactive view (p pause, { } seek, s S speed), or print one frame
    Replay(ReplayArgs),
    /// Write what this machine's GPUs answer (NVML, AMD and Intel files), for a few seconds, as a test scenario
    /// that replays the machine (attach it to a bug report)
    Capture(CaptureArgs),
    /// Print a completion script for SHELL (bash, zsh, fish, elvish, powershell)
    Completions {
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff): gputop man > ~/.local/share/man/man1/gputop.1
    Man,
}

#[derive(Debug, Clone, Args)]
pub struct CaptureArgs {
    /// The scenario file to create (never an existing file)
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Seconds to capture, one refresh a second
    #[arg(long, value_name = "SECS", default_value_t = 5.0, allow_negative_numbers = true, value_parser = positive)]
    pub duration: f64,
}

#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// Address to listen on (loopback by default; 0.0.0.0:PORT to serve every interface)
    #[arg(long, value_name = "ADDR:PORT", default_value = crate::output::export::DEFAULT_ADDRESS, value_parser = listen_address)]
    pub web_listen_address: String,

    /// TLS and basic auth, as Prometheus exporters read them (exporter-toolkit's YAML)
    #[arg(long, value_name = "FILE", alias = "web.config.file")]
    pub web_config_file: Option<PathBuf>,

    /// Also export per-process series (labels gpu, uuid, pid, user)
    #[arg(long)]
    pub processes: bool,

    /// With --processes: add the command line as a label (it may contain secrets)
    #[arg(long, requires = "processes")]
    pub process_commands: bool,
}

#[derive(Debug, Clone, Args)]
pub struct RulesArgs {
    /// Prometheus's scrape interval for gputop, in seconds: windows are at least four of them
    #[arg(long, value_name = "SECS", default_value_t = 15.0, allow_negative_numbers = true, value_parser = positive)]
    pub scrape_interval: f64,

    /// Write them as a prometheus-operator PrometheusRule for Kubernetes (namespace gputop)
    #[arg(long)]
    pub kubernetes: bool,
}

#[derive(Debug, Clone, Args)]
pub struct RecordArgs {
    /// The recording to create (never an existing file)
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Most bytes the recording holds (FILE and FILE.1 together): K, M, G (or KiB, MiB, GiB)
    /// binary, KB, MB, GB decimal
    #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = size)]
    pub max_size: u64,

    /// Oldest data kept, in seconds (FILE and FILE.1 together)
    #[arg(long, value_name = "SECS", default_value_t = 604_800.0, allow_negative_numbers = true, value_parser = positive)]
    pub max_age: f64,

    /// Stop after this many seconds (default: until SIGINT or SIGTERM)
    #[arg(long, value_name = "SECS", allow_negative_numbers = true, value_parser = positive)]
    pub duration: Option<f64>,
}

#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// The recording to play
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Playback speed (0.125 to 64)
    #[arg(long, value_name = "X", default_value_t = 1.0, allow_negative_numbers = true, value_parser = speed)]
    pub speed: f64,

    /// Print the frame at --at (default: the last) instead of playing
    #[arg(short = '1', long)]
    pub once: bool,

    /// With --once: the frame as JSON
    #[arg(long)]
    pub json: bool,

    /// With --once: seconds from the start of the recording
    #[arg(long, value_name = "SECS", allow_negative_numbers = true, value_parser = seconds_from_start)]
    pub at: Option<f64>,

    /// Print the number of frames, the time span and skipped lines, and exit
    #[arg(long)]
    pub info: bool,
}

fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err("expected a number above 0".into()),
    }
}

/// `--prometheus-timeout`: 0.1 to 300 seconds.
fn timeout(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if (0.1..=300.0).contains(&seconds) => Ok(seconds),
        _ => Err("a number of seconds from 0.1 to 300".into()),
    }
}

/// `--interval`: the range `display.refresh_interval` allows, checked where the flag is read
/// so that a bad value is a usage error like any other.
fn interval(text: &str) -> Result<f64, String> {
    let key = gputop_core::config::schema::find("display", "refresh_interval").expect("a key of the schema");
    let number: f64 = text
        .parse()
        .map_err(|_| "expected a number of seconds from 0.1 to 3600")?;
    key.check(&toml::Value::Float(number))
        .map_err(|e| e.to_string())?;
    Ok(number)
}

fn speed(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if (0.125..=64.0).contains(&v) => Ok(v),
        _ => Err("expected a speed from 0.125 to 64".into()),
    }
}

fn seconds_from_start(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v >= 0.0 && v.is_finite() => Ok(v),
        _ => Err("expected seconds from the start of the recording, 0 or more".into()),
    }
}

fn pid(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(v) if v > 0 => Ok(v),
        _ => Err("expected a process ID (a whole number above 0)".into()),
    }
}

/// `HOST:PORT` as the exporter binds it: `127.0.0.1:9835`, `[::]:9835`, `localhost:9835`.
fn listen_address(text: &str) -> Result<String, String> {
    let valid = text
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if valid {
        Ok(text.to_string())
    } else {
        Err("expected HOST:PORT, such as 127.0.0.1:9835, 0.0.0.0:9835 or [::]:9835".into())
    }
}

/// A size as [`gputop_core::format::parse_size`] reads it: "64M", "512K", "1GiB", "2GB" or bytes.
fn size(text: &str) -> Result<u64, String> {
    let bytes = gputop_core::format::parse_size(text).ok_or_else(|| {
        "expected a size in bytes, or with K, M or G (binary) or KB, MB or GB (decimal), such as 64M"
            .to_string()
    })?;
    if bytes < 64 << 10 {
        return Err("a recording needs at least 64K".into());
    }
    Ok(bytes)
}

#[derive(Debug, Clone, Args)]
pub struct ValidateArgs {
    /// Seconds to sample for; one round per second (0: a single round)
    #[arg(long, value_name = "SECS", default_value_t = 5.0, allow_negative_numbers = true, value_parser = non_negative)]
    pub duration: f64,

    /// Allowed difference: percent of nvidia-smi's value, or percentage points for % metrics
    #[arg(long, value_name = "PCT", default_value_t = 5.0, allow_negative_numbers = true, value_parser = non_negative)]
    pub tolerance: f64,

    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,

    /// The nvidia-smi to compare with
    #[arg(long, value_name = "PATH", default_value = "nvidia-smi")]
    pub nvidia_smi: PathBuf,
}

fn non_negative(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if (0.0..=86_400.0).contains(&v) => Ok(v),
        _ => Err("expected a number from 0 to 86400".into()),
    }
}

/// Exit codes of `gputop validate`.
pub const VALIDATE_EXIT_CODES: &str = "Exit codes:
  0  every reading agrees within the tolerance
  1  some readings differ beyond the tolerance
  9  nvidia-smi is missing or failed
  2-8 as for gputop itself (usage, configuration, NVML)";

/// Exit codes, shown at the end of --help and documented in README.md.
/// `gputop --version`: the version, and the commit and its date when built from git.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), env!("GPUTOP_BUILD_INFO"));

/// What `--help` ends with: the exit codes, then the keys of the view.
pub fn help_tail() -> String {
    format!(
        "{EXIT_CODES}\n\nKeys in the view (h or F1 there shows every screen's):\n{}",
        crate::app::keymap::summary()
    )
}

pub const EXIT_CODES: &str = "Exit codes:
  0  success
  1  runtime error (for example, writing the output failed, or NVML not answering a one-shot within 15 s)
  2  usage error (bad command-line arguments)
  3  configuration error (the message names file:line:column)
  4  NVML library not found or not loadable
  5  NVIDIA driver not loaded
  6  NVIDIA driver and NVML library versions differ
  7  no permission to use the GPUs
  8  no NVIDIA GPU found
  9  (gputop validate) nvidia-smi is missing or failed
  70 internal error (a bug: the one-line message says where; please report it)
  128+N  the interactive view ended by signal N (143 SIGTERM, 129 SIGHUP)";

fn parse_device_spec(text: &str) -> Result<DeviceSpec, String> {
    DeviceSpec::parse(text).ok_or_else(|| {
        format!(
            "'{text}' is not a GPU index, GPU UUID (GPU-...), MIG UUID (MIG-...) or MIG-GPU-<uuid>/<gi>/<ci>"
        )
    })
}

/// Ends gputop on a bad command line: clap's message as one line (what, where, and the tip
/// when it has one), exit status 2; help and the version print as clap prints them.
fn usage_error(error: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        error.exit();
    }
    eprintln!("gputop: {}", one_line(&error.render().to_string()));
    std::process::exit(2);
}

/// clap's rendered error as one line: its paragraphs but the usage and the pointer to
/// `--help`, joined.
fn one_line(rendered: &str) -> String {
    let parts: Vec<String> = rendered
        .split("\n\n")
        .map(|paragraph| paragraph.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty() && !p.starts_with("Usage:") && !p.starts_with("For more information"))
        .collect();
    let line = parts.join("; ");
    let line = line.strip_prefix("error: ").unwrap_or(&line);
    format!("{line} (gputop --help lists the options)")
}

impl Cli {
    /// Parses the command line; exits with a usage error (status 2) on a bad one.
    pub fn parse_checked() -> Self {
        let matches = Self::command()
            .after_help(help_tail())
            .try_get_matches()
            .unwrap_or_else(|e| usage_error(e));
        let cli = Self::from_arg_matches(&matches).unwrap_or_else(|e| usage_error(e));
        if cli.demo && matches!(cli.command, Some(Command::Validate(_) | Command::Replay(_))) {
            usage_error(Self::command().error(
                clap::error::ErrorKind::ArgumentConflict,
                "--demo cannot be used with validate (it compares real NVML readings) or replay (it plays a file)",
            ));
        }
        cli
    }

    /// What to show; `cuda_visible_devices` is the environment's `CUDA_VISIBLE_DEVICES`.
    pub fn selection(&self, cuda_visible_devices: Option<&str>) -> Selection {
        let devices = if self.only_visible {
            // Unset: every device is visible, as for CUDA.
            cuda_visible_devices.map(parse_device_list)
        } else if self.only.is_empty() {
            None
        } else {
            Some(self.only.clone())
        };
        Selection {
            devices,
            users: self.user.clone(),
            pids: self.pid.clone(),
            compute: self.compute,
            graphics: self.graphics,
        }
    }

    pub fn overrides(&self) -> CliOverrides {
        CliOverrides {
            interval: self.interval,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}

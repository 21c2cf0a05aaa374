//! Configuration: the TOML file, environment overrides and CLI overrides, layered as
//! CLI > environment > file > built-in defaults, validated strictly, with the origin of
//! every value kept for `--dump-config`. The user's file is only ever read.

pub mod rules;
pub mod schema;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

pub use crate::monitor::alerts::rules::{AlertSettings, RuleEntry};
pub use crate::monitor::history::HistorySettings;
use schema::{KEYS, Key, Value, suggest};

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Nothing set it: the built-in default.
    Default,
    /// A config file set it.
    File {
        /// The file.
        path: PathBuf,
        /// The line of the key, from 1.
        line: usize,
    },
    /// The environment variable it names set it.
    Env(String),
    /// The command-line flag it names set it.
    Cli(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Default => f.write_str("built-in default"),
            Self::File { path, line } => write!(f, "from {}:{line}", path.display()),
            Self::Env(var) => write!(f, "from environment variable {var}"),
            Self::Cli(flag) => write!(f, "from command line {flag}"),
        }
    }
}

/// A configuration problem, as one line: where (file:line:column, the environment variable
/// or the flag), then what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// The `[display]` table: the view's refresh and colours, the one-shot report's columns.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DisplaySettings {
    /// Seconds between refreshes.
    pub refresh_interval: f64,
    /// Device columns of the `--once` report, in order.
    pub default_metrics: Vec<String>,
    /// Load colours: below `low` light, from `high` heavy (percent).
    pub utilization_low: f64,
    /// From this percent utilization on, heavy.
    pub utilization_high: f64,
    /// Below this percent of memory used, light.
    pub memory_low: f64,
    /// From this percent of memory used on, heavy.
    pub memory_high: f64,
}

/// The `[signals]` table: whether gputop may signal processes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalSettings {
    /// Never send signals (the same as --readonly).
    pub readonly: bool,
}

/// The `[collect]` table: what is read besides each refresh's own readings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectSettings {
    /// Seconds between PCIe throughput reads (each blocks in the driver).
    pub pcie_interval: f64,
    /// The kubelet's PodResources socket, asked which pods hold the GPUs; empty: never.
    pub pod_resources_socket: String,
}

/// The validated, typed settings every other module reads.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// The `[display]` table.
    pub display: DisplaySettings,
    /// The `[alert]` table and its rules.
    pub alert: AlertSettings,
    /// The `[history]` table.
    pub history: HistorySettings,
    /// The `[collect]` table.
    pub collect: CollectSettings,
    /// The `[signals]` table.
    pub signals: SignalSettings,
}

/// One key's effective value and origin.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The key.
    pub key: &'static Key,
    /// Its value, from `origin`.
    pub value: Value,
    /// What set it.
    pub origin: Origin,
}

/// The effective configuration: typed settings and, per key, where its value came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    /// The settings, typed.
    pub settings: Settings,
    /// Every key's value and origin, in the table's order.
    pub entries: Vec<Entry>,
    /// The config file read, or looked for and not found.
    pub file: ConfigFile,
}

/// The config file behind an [`Effective`] configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigFile {
    /// This file was read.
    Read(PathBuf),
    /// The usual place, where there is no file: the built-in defaults hold.
    NotFound(PathBuf),
    /// No usual place (neither `XDG_CONFIG_HOME` nor `HOME` is set).
    NoPlace,
}

impl Default for Settings {
    /// The built-in defaults: the key table's, typed (a test checks they fit).
    fn default() -> Self {
        Settings::typed(&default_entries()).expect("the key table's defaults fit the typed settings")
    }
}

impl Settings {
    /// The checked entries as typed settings: each `[section]` deserialized into its struct,
    /// which refuses a key it lacks and misses none (`deny_unknown_fields`), so the key table
    /// and these types cannot drift apart unnoticed. `[[alert.rules]]` are parsed on their own.
    fn typed(entries: &[Entry]) -> Result<Self, ConfigError> {
        let mut sections = toml::Table::new();
        for entry in entries {
            let section = sections
                .entry(entry.key.section)
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(keys) = section {
                keys.insert(entry.key.name.to_string(), entry.value.to_toml_value());
            }
        }
        Settings::deserialize(toml::Value::Table(sections)).map_err(|e| {
            ConfigError(format!(
                "the settings do not fit their types: {}",
                e.message().trim()
            ))
        })
    }
}

/// Overrides given on the command line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CliOverrides {
    /// `--interval`: seconds between refreshes.
    pub interval: Option<f64>,
}

/// The file gputop reads when `--config` is not given:
/// `$XDG_CONFIG_HOME/gputop/config.toml`, else `~/.config/gputop/config.toml`.
pub fn default_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let base = env("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            env("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| Path::new(&h).join(".config"))
        })?;
    Some(base.join("gputop").join("config.toml"))
}

/// Largest config file read: a full commented config is about 10 KiB.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Loads the effective configuration. `explicit` is `--config`; `env` reads the environment.
pub fn load(
    explicit: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
    cli: &CliOverrides,
) -> Result<Effective, ConfigError> {
    let mut entries = default_entries();
    let mut rules = Vec::new();
    let from_env = env("GPUTOP_CONFIG").filter(|v| !v.is_empty()).map(PathBuf::from);
    let (path, required) = match (explicit, from_env) {
        (Some(path), _) => (Some(path.to_path_buf()), true),
        (None, Some(path)) => (Some(path), true),
        (None, None) => (default_path(env), false),
    };
    let missing =
        |path: &Path| std::fs::metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
    let file = match path {
        Some(path) if required || !missing(&path) => {
            let text = crate::files::read_text(&path, MAX_CONFIG_BYTES)
                .map_err(|e| ConfigError(format!("{}: cannot read config file: {e}", path.display())))?;
            rules = apply_file(&mut entries, &path, &text)?;
            ConfigFile::Read(path)
        }
        Some(path) => ConfigFile::NotFound(path),
        None => ConfigFile::NoPlace,
    };
    apply_env(&mut entries, env)?;
    if let Some(interval) = cli.interval {
        set_from_cli(
            &mut entries,
            "display.refresh_interval",
            toml::Value::Float(interval),
            "--interval",
        )?;
    }
    let mut settings = Settings::typed(&entries)?;
    check_consistency(&settings, &entries)?;
    settings.alert.rules = rules;
    Ok(Effective {
        settings,
        entries,
        file,
    })
}

/// Every key at its built-in default.
fn default_entries() -> Vec<Entry> {
    KEYS.iter()
        .map(|key| Entry {
            key,
            value: key.default_value(),
            origin: Origin::Default,
        })
        .collect()
}

fn entry_mut<'a>(entries: &'a mut [Entry], path: &str) -> Result<&'a mut Entry, ConfigError> {
    entries
        .iter_mut()
        .find(|e| e.key.path() == path)
        .ok_or_else(|| ConfigError(format!("{path} is not a configuration key")))
}

/// Parses a configuration file strictly and applies it over `entries`.
pub fn apply_file(entries: &mut [Entry], path: &Path, text: &str) -> Result<Vec<RuleEntry>, ConfigError> {
    let at = |offset: usize| {
        let (line, column) = line_column(text, offset);
        format!("{}:{line}:{column}", path.display())
    };
    let parse_error = |e: toml::de::Error| {
        let message = e.message().trim().replace('\n', " ");
        match e.span() {
            Some(span) => ConfigError(format!("{}: {message}", at(span.start))),
            None => ConfigError(format!("{}: {message}", path.display())),
        }
    };
    // First pass: syntax, and that every top-level key is a known section holding a table.
    let top: BTreeMap<Spanned<String>, toml::Value> = toml::from_str(text).map_err(parse_error)?;
    let sections = schema::sections();
    for (name, value) in &top {
        if !sections.contains(&name.get_ref().as_str()) {
            let hint = top_level_hint(name.get_ref(), &sections);
            return Err(ConfigError(format!(
                "{}: unknown section '{}'{hint}",
                at(name.span().start),
                name.get_ref()
            )));
        }
        if !value.is_table() {
            return Err(ConfigError(format!(
                "{}: '{}' must be a table: write [{}] and put its keys below it",
                at(name.span().start),
                name.get_ref(),
                name.get_ref()
            )));
        }
    }
    // Second pass: every key known, every value of the right type and range.
    type Section = BTreeMap<Spanned<String>, Spanned<toml::Value>>;
    let tables: BTreeMap<String, Section> = toml::from_str(text).map_err(parse_error)?;
    for (section, keys) in &tables {
        for (name, value) in keys {
            if section == "alert" && name.get_ref() == "rules" {
                continue; // [[alert.rules]]: parsed below, with positions inside each rule
            }
            let Some(key) = schema::find(section, name.get_ref()) else {
                let rules = (section == "alert").then_some("rules");
                let names = KEYS
                    .iter()
                    .filter(|k| k.section == section)
                    .map(|k| k.name)
                    .chain(rules);
                let hint = suggest(name.get_ref(), names)
                    .map_or_else(String::new, |s| format!("; did you mean '{s}'?"));
                return Err(ConfigError(format!(
                    "{}: unknown key '{}' in [{section}]{hint}",
                    at(name.span().start),
                    name.get_ref()
                )));
            };
            let checked = key
                .check(value.get_ref())
                .map_err(|m| ConfigError(format!("{}: {}: {m}", at(value.span().start), key.path())))?;
            let (line, _) = line_column(text, name.span().start);
            let entry = entry_mut(entries, &key.path())?;
            entry.value = checked;
            entry.origin = Origin::File {
                path: path.to_path_buf(),
                line,
            };
        }
    }
    rules::parse(text, &at).map_err(ConfigError)
}

/// "did you mean" for a top-level name: a section, or a key that belongs in one.
fn top_level_hint(name: &str, sections: &[&'static str]) -> String {
    if let Some(key) = KEYS.iter().find(|k| k.name == name) {
        return format!("; '{name}' belongs in [{}]", key.section);
    }
    suggest(name, sections.iter().copied()).map_or_else(String::new, |s| format!("; did you mean [{s}]?"))
}

fn apply_env(entries: &mut [Entry], env: &dyn Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
    for key in KEYS {
        let var = key.env_var();
        let Some(text) = env(&var) else { continue };
        let parsed = toml::from_str::<toml::Table>(&format!("v = {text}"))
            .ok()
            .and_then(|mut t| t.remove("v"));
        let value = match (key.kind, parsed) {
            (schema::Kind::Choices { .. }, Some(list @ toml::Value::Array(_))) => list,
            // A list may also be written plainly: GPUTOP_DISPLAY_DEFAULT_METRICS=memory,power
            (schema::Kind::Choices { .. }, _) => toml::Value::Array(
                unquote(&text)
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| toml::Value::String(s.to_string()))
                    .collect(),
            ),
            (_, Some(value)) => value,
            (_, None) => toml::Value::String(text.clone()),
        };
        let checked = key
            .check(&value)
            .map_err(|m| ConfigError(format!("environment variable {var}={text}: {m}")))?;
        let entry = entry_mut(entries, &key.path())?;
        entry.value = checked;
        entry.origin = Origin::Env(var);
    }
    Ok(())
}

/// The text of an environment value, unquoted if it was a TOML string.
fn unquote(text: &str) -> String {
    toml::from_str::<toml::Table>(&format!("v = {text}"))
        .ok()
        .and_then(|t| t.get("v").and_then(|v| v.as_str().map(str::to_string)))
        .unwrap_or_else(|| text.to_string())
}

fn set_from_cli(
    entries: &mut [Entry],
    path: &str,
    value: toml::Value,
    flag: &'static str,
) -> Result<(), ConfigError> {
    let entry = entry_mut(entries, path)?;
    entry.value = entry
        .key
        .check(&value)
        .map_err(|m| ConfigError(format!("{flag}: {m}")))?;
    entry.origin = Origin::Cli(flag);
    Ok(())
}

/// Rules that involve more than one key, judged on the typed settings; `entries` say what
/// set each key.
fn check_consistency(settings: &Settings, entries: &[Entry]) -> Result<(), ConfigError> {
    let origin = |path: &str| {
        entries
            .iter()
            .find(|e| e.key.path() == path)
            .map_or_else(|| Origin::Default.to_string(), |e| e.origin.to_string())
    };
    let display = &settings.display;
    for (low, low_value, high, high_value) in [
        (
            "display.utilization_low",
            display.utilization_low,
            "display.utilization_high",
            display.utilization_high,
        ),
        (
            "display.memory_low",
            display.memory_low,
            "display.memory_high",
            display.memory_high,
        ),
    ] {
        if low_value >= high_value {
            return Err(ConfigError(format!(
                "{low} ({low_value}, {}) must be below {high} ({high_value}, {})",
                origin(low),
                origin(high)
            )));
        }
    }
    let history = &settings.history;
    if history.sample_interval > history.retention_time {
        return Err(ConfigError(format!(
            "history.sample_interval ({} s, {}) must not exceed history.retention_time ({} s, {})",
            history.sample_interval,
            origin("history.sample_interval"),
            history.retention_time,
            origin("history.retention_time")
        )));
    }
    Ok(())
}

/// 1-based line and column of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The effective configuration as TOML that loads back to the same settings, with the
/// origin of every value that is not a built-in default.
pub fn dump(effective: &Effective) -> String {
    let file = match &effective.file {
        ConfigFile::Read(path) => format!("{} (read)", path.display()),
        ConfigFile::NotFound(path) => format!(
            "{} (not there: the built-in defaults hold; write it to change them)",
            path.display()
        ),
        ConfigFile::NoPlace => "none (neither XDG_CONFIG_HOME nor HOME is set)".into(),
    };
    let mut out = format!(
        "# gputop: the effective configuration (gputop --dump-config).\n\
         # Config file: {}\n\
         # Values without a comment are built-in defaults. What each key means: `man gputop`\n\
         # (install the page with `gputop man > ~/.local/share/man/man1/gputop.1`), whose\n\
         # CONFIGURATION section is the commented default file.\n",
        crate::format::sanitize(&file)
    );
    for section in schema::sections() {
        out.push_str(&format!("\n[{section}]\n"));
        for entry in effective.entries.iter().filter(|e| e.key.section == section) {
            out.push_str(&format!("{} = {}", entry.key.name, entry.value.to_toml()));
            if entry.origin != Origin::Default {
                out.push_str(&format!("  # {}", entry.origin));
            }
            out.push('\n');
        }
    }
    for rule in &effective.settings.alert.rules {
        out.push_str(&rules::to_toml(rule));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str) -> Result<Effective, ConfigError> {
        let mut entries = default_entries();
        let rules = apply_file(&mut entries, Path::new("test.toml"), text)?;
        let mut settings = Settings::typed(&entries)?;
        check_consistency(&settings, &entries)?;
        settings.alert.rules = rules;
        Ok(Effective {
            settings,
            entries,
            file: ConfigFile::Read(PathBuf::from("test.toml")),
        })
    }

    /// The key table and the typed settings cannot drift apart: a key the types lack, or a
    /// key the table lacks, is an error that names it, never a panic or a silent default.
    #[test]
    fn the_key_table_and_the_typed_settings_agree_or_say_where_not() {
        static EXTRA: schema::Key = schema::Key {
            section: "display",
            name: "no_such_key",
            kind: schema::Kind::Bool,
            default: schema::Default::Bool(true),
            unit: "",
        };
        let mut entries = default_entries();
        entries.push(Entry {
            key: &EXTRA,
            value: Value::Bool(true),
            origin: Origin::Default,
        });
        let error = Settings::typed(&entries).unwrap_err();
        assert!(error.0.contains("no_such_key"), "{error}");

        let mut entries = default_entries();
        entries.retain(|e| e.key.path() != "display.memory_low");
        let error = Settings::typed(&entries).unwrap_err();
        assert!(error.0.contains("memory_low"), "{error}");

        assert!(Settings::typed(&default_entries()).is_ok());
    }

    #[test]
    fn dump_of_defaults_loads_back_unchanged() {
        let effective = load(None, &|_| None, &CliOverrides::default()).expect("no file: defaults");
        let text = dump(&effective);
        assert_eq!(load_text(&text).unwrap().settings, Settings::default());
    }
}

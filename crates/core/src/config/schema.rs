//! Every configuration key: its section, type, range, default and meaning.
//!
//! The one table that validation, environment overrides, `--dump-config` and the typed
//! [`super::Settings`] all read, so a key cannot exist in one place and not another.

use std::fmt;

/// A configuration value after type checking.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A number with a fraction.
    Float(f64),
    /// A whole number.
    Int(i64),
    /// True or false.
    Bool(bool),
    /// A list of strings.
    List(Vec<String>),
    /// A string.
    Text(String),
}

impl Value {
    /// The value as a TOML value.
    pub fn to_toml_value(&self) -> toml::Value {
        match self {
            Self::Float(v) => toml::Value::Float(*v),
            Self::Int(v) => toml::Value::Integer(*v),
            Self::Bool(v) => toml::Value::Boolean(*v),
            Self::Text(text) => toml::Value::String(text.clone()),
            Self::List(items) => toml::Value::Array(items.iter().cloned().map(toml::Value::String).collect()),
        }
    }

    /// The value as TOML source text.
    pub fn to_toml(&self) -> String {
        match self {
            Self::Float(v) => {
                let text = v.to_string();
                if text.contains(['.', 'e', 'E']) || !v.is_finite() {
                    text
                } else {
                    format!("{text}.0")
                }
            }
            Self::Int(v) => v.to_string(),
            Self::Bool(v) => v.to_string(),
            Self::Text(text) => toml::Value::String(text.clone()).to_string(),
            Self::List(items) => {
                let quoted: Vec<String> = items
                    .iter()
                    .map(|s| toml::Value::String(s.clone()).to_string())
                    .collect();
                format!("[{}]", quoted.join(", "))
            }
        }
    }
}

/// The type and domain of a key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// A number (integers accepted) in `min..=max`.
    Float {
        /// The smallest value accepted.
        min: f64,
        /// The largest value accepted.
        max: f64,
    },
    /// A whole number in `min..=max`.
    Int {
        /// The smallest value accepted.
        min: i64,
        /// The largest value accepted.
        max: i64,
    },
    /// A list of distinct strings, each one of `choices`.
    Choices {
        /// The strings the list may hold.
        choices: &'static [&'static str],
    },
    /// True or false.
    Bool,
    /// A string, e.g. a file path; empty means "none".
    Text,
    /// A command and its arguments, run without a shell; empty means "none".
    Command,
}

/// One configuration key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Key {
    /// The TOML table the key is in (`display`, `alert`, ...).
    pub section: &'static str,
    /// The key's name within its table.
    pub name: &'static str,
    /// Its type and the values it accepts.
    pub kind: Kind,
    /// Its value when nothing sets it.
    pub default: Default,
    /// The unit its value is in, with a leading space (` seconds`), for range errors; empty
    /// for none.
    pub unit: &'static str,
}

/// A default that can live in a `const` table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Default {
    /// A number with a fraction.
    Float(f64),
    /// A whole number.
    Int(i64),
    /// True or false.
    Bool(bool),
    /// A list of strings.
    List(&'static [&'static str]),
    /// A string.
    Text(&'static str),
}

impl Key {
    /// `section.name`, as the key is written in messages and `--dump-config`.
    pub fn path(&self) -> String {
        format!("{}.{}", self.section, self.name)
    }

    /// `GPUTOP_<SECTION>_<NAME>`, the environment variable that overrides this key.
    pub fn env_var(&self) -> String {
        format!("GPUTOP_{}_{}", self.section, self.name).to_ascii_uppercase()
    }

    /// The built-in default as a value.
    pub fn default_value(&self) -> Value {
        match self.default {
            Default::Float(v) => Value::Float(v),
            Default::Int(v) => Value::Int(v),
            Default::Bool(v) => Value::Bool(v),
            Default::List(items) => Value::List(items.iter().map(|s| (*s).to_string()).collect()),
            Default::Text(text) => Value::Text(text.to_string()),
        }
    }

    /// Type- and range-checks a TOML value for this key.
    pub fn check(&self, value: &toml::Value) -> Result<Value, ValueError> {
        let wrong = |expected| ValueError::WrongType {
            expected,
            found: type_name(value),
        };
        let in_range = |number: f64, min: f64, max: f64| {
            if (min..=max).contains(&number) {
                Ok(())
            } else {
                Err(ValueError::OutOfRange {
                    value: number,
                    min,
                    max,
                    unit: self.unit,
                })
            }
        };
        let strings = |items: &[toml::Value]| {
            items
                .iter()
                .map(|item| match item {
                    toml::Value::String(text) => Ok(text.clone()),
                    other => Err(ValueError::NotAString(type_name(other))),
                })
                .collect::<Result<Vec<String>, ValueError>>()
        };
        match self.kind {
            Kind::Float { min, max } => {
                let number = match value {
                    toml::Value::Float(v) => *v,
                    toml::Value::Integer(v) => *v as f64,
                    _ => return Err(wrong("a number")),
                };
                in_range(number, min, max)?;
                Ok(Value::Float(number))
            }
            Kind::Int { min, max } => {
                let toml::Value::Integer(number) = value else {
                    return Err(wrong("a whole number"));
                };
                in_range(*number as f64, min as f64, max as f64)?;
                Ok(Value::Int(*number))
            }
            Kind::Text => match value {
                toml::Value::String(text) => Ok(Value::Text(text.clone())),
                _ => Err(wrong("a string")),
            },
            Kind::Command => {
                let toml::Value::Array(items) = value else {
                    return Err(wrong(
                        "a command as a list of strings, e.g. [\"notify-send\", \"gputop\"]",
                    ));
                };
                let words = strings(items)?;
                if words.first().is_some_and(String::is_empty) {
                    return Err(ValueError::EmptyProgram);
                }
                Ok(Value::List(words))
            }
            Kind::Bool => match value {
                toml::Value::Boolean(v) => Ok(Value::Bool(*v)),
                _ => Err(wrong("true or false")),
            },
            Kind::Choices { choices } => {
                let toml::Value::Array(items) = value else {
                    return Err(wrong("a list of strings"));
                };
                let mut out: Vec<String> = Vec::with_capacity(items.len());
                for text in strings(items)? {
                    if !choices.contains(&text.as_str()) {
                        return Err(ValueError::UnknownChoice {
                            hint: suggest(&text, choices.iter().copied()),
                            value: text,
                            choices,
                        });
                    }
                    if out.contains(&text) {
                        return Err(ValueError::Twice(text));
                    }
                    out.push(text);
                }
                Ok(Value::List(out))
            }
        }
    }
}

/// Why a value is refused for a key ([`Key::check`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValueError {
    /// A value of another type.
    #[error("expected {expected}, found {found}")]
    WrongType {
        /// What the key takes: `a number`.
        expected: &'static str,
        /// What it was given: `a string`.
        found: &'static str,
    },
    /// A number outside the key's range.
    #[error("{value} is out of range: expected {min} to {max}{unit}")]
    OutOfRange {
        /// The number given.
        value: f64,
        /// The smallest accepted.
        min: f64,
        /// The largest accepted.
        max: f64,
        /// Its unit, with a leading space, or empty.
        unit: &'static str,
    },
    /// A list with an item that is not a string.
    #[error("expected a list of strings, found an item that is {0}")]
    NotAString(&'static str),
    /// A command whose program is empty.
    #[error("the command's program (its first word) is empty")]
    EmptyProgram,
    /// A string that is not one of the key's choices.
    #[error(
        "unknown value '{value}'{}; expected one of {}",
        hint.map_or_else(String::new, |s| format!(" (did you mean '{s}'?)")),
        choices.join(", ")
    )]
    UnknownChoice {
        /// The string given.
        value: String,
        /// The nearest choice, if one is near.
        hint: Option<&'static str>,
        /// Every choice.
        choices: &'static [&'static str],
    },
    /// A choice listed twice.
    #[error("'{0}' is listed twice")]
    Twice(String),
}

fn type_name(value: &toml::Value) -> &'static str {
    match value {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date-time",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

/// Metrics the device line can show, in `display.default_metrics`.
pub const METRICS: &[&str] = &[
    "utilization",
    "memory",
    "temperature",
    "memory_temperature",
    "power",
    "power_instant",
    "fan",
    "clocks",
    "pcie",
    "encoder",
    "decoder",
];

/// Every key gputop reads.
pub const KEYS: &[Key] = &[
    Key {
        section: "display",
        name: "refresh_interval",
        kind: Kind::Float {
            min: 0.1,
            max: 3600.0,
        },
        default: Default::Float(2.0),
        unit: " seconds",
    },
    Key {
        section: "display",
        name: "default_metrics",
        kind: Kind::Choices { choices: METRICS },
        default: Default::List(&["utilization", "memory", "temperature", "power"]),
        unit: "",
    },
    Key {
        section: "display",
        name: "utilization_low",
        kind: Kind::Float { min: 0.0, max: 100.0 },
        default: Default::Float(10.0),
        unit: " percent",
    },
    Key {
        section: "display",
        name: "utilization_high",
        kind: Kind::Float { min: 0.0, max: 100.0 },
        default: Default::Float(75.0),
        unit: " percent",
    },
    Key {
        section: "display",
        name: "memory_low",
        kind: Kind::Float { min: 0.0, max: 100.0 },
        default: Default::Float(10.0),
        unit: " percent",
    },
    Key {
        section: "display",
        name: "memory_high",
        kind: Kind::Float { min: 0.0, max: 100.0 },
        default: Default::Float(80.0),
        unit: " percent",
    },
    Key {
        section: "alert",
        name: "memory_usage_threshold",
        kind: Kind::Float { min: 0.0, max: 100.0 },
        default: Default::Float(85.0),
        unit: " percent",
    },
    Key {
        section: "alert",
        name: "gpu_utilization_threshold",
        kind: Kind::Float { min: 0.0, max: 100.0 },
        default: Default::Float(90.0),
        unit: " percent",
    },
    Key {
        section: "alert",
        name: "temperature_threshold",
        kind: Kind::Float { min: 0.0, max: 150.0 },
        default: Default::Float(80.0),
        unit: " degrees Celsius",
    },
    Key {
        section: "alert",
        name: "builtin_rules",
        kind: Kind::Bool,
        default: Default::Bool(true),
        unit: "",
    },
    Key {
        section: "alert",
        name: "log_file",
        kind: Kind::Text,
        default: Default::Text(""),
        unit: "",
    },
    Key {
        section: "alert",
        name: "notify_info",
        kind: Kind::Command,
        default: Default::List(&[]),
        unit: "",
    },
    Key {
        section: "alert",
        name: "notify_warning",
        kind: Kind::Command,
        default: Default::List(&[]),
        unit: "",
    },
    Key {
        section: "alert",
        name: "notify_critical",
        kind: Kind::Command,
        default: Default::List(&[]),
        unit: "",
    },
    Key {
        section: "alert",
        name: "notify_timeout",
        kind: Kind::Float {
            min: 0.1,
            max: 3600.0,
        },
        default: Default::Float(10.0),
        unit: " seconds",
    },
    Key {
        section: "alert",
        name: "notify_min_interval",
        kind: Kind::Float {
            min: 0.0,
            max: 86_400.0,
        },
        default: Default::Float(300.0),
        unit: " seconds",
    },
    Key {
        section: "history",
        name: "retention_time",
        kind: Kind::Int {
            min: 60,
            max: 31_536_000,
        },
        default: Default::Int(86_400),
        unit: " seconds",
    },
    Key {
        section: "history",
        name: "sample_interval",
        kind: Kind::Int { min: 1, max: 3600 },
        default: Default::Int(10),
        unit: " seconds",
    },
    Key {
        section: "collect",
        name: "pcie_interval",
        kind: Kind::Float {
            min: 1.0,
            max: 3600.0,
        },
        default: Default::Float(5.0),
        unit: " seconds",
    },
    Key {
        section: "collect",
        name: "pod_resources_socket",
        kind: Kind::Text,
        default: Default::Text("/var/lib/kubelet/pod-resources/kubelet.sock"),
        unit: "",
    },
    Key {
        section: "signals",
        name: "readonly",
        kind: Kind::Bool,
        default: Default::Bool(false),
        unit: "",
    },
];

/// The sections, in table order.
pub fn sections() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for key in KEYS {
        if !out.contains(&key.section) {
            out.push(key.section);
        }
    }
    out
}

/// The key `name` of table `section`, if there is one.
pub fn find(section: &str, name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.section == section && k.name == name)
}

/// The nearest candidate to `word` by edit distance, if it is close enough to be a typo.
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, c)| *d <= (c.len().max(word.len()) / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            current.push((previous[j] + cost).min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_toml())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_catch_typos_not_strangers() {
        assert_eq!(
            suggest("refresh_intervl", ["refresh_interval", "default_metrics"]),
            Some("refresh_interval")
        );
        assert_eq!(suggest("displya", sections()), Some("display"));
        assert_eq!(
            suggest("colour_scheme", ["refresh_interval", "default_metrics"]),
            None
        );
    }

    #[test]
    fn every_default_passes_its_own_check() {
        for key in KEYS {
            let text = format!("v = {}", key.default_value().to_toml());
            let table: toml::Table = toml::from_str(&text).unwrap();
            assert_eq!(key.check(&table["v"]), Ok(key.default_value()), "{}", key.path());
        }
    }

    #[test]
    fn checks_type_range_and_choices() {
        let interval = find("display", "refresh_interval").unwrap();
        assert_eq!(interval.check(&toml::Value::Integer(3)), Ok(Value::Float(3.0)));
        assert!(
            interval
                .check(&toml::Value::Float(0.0))
                .unwrap_err()
                .to_string()
                .contains("out of range")
        );
        assert!(
            interval
                .check(&toml::Value::String("2".into()))
                .unwrap_err()
                .to_string()
                .contains("expected a number")
        );
        let metrics = find("display", "default_metrics").unwrap();
        let bad = toml::Value::Array(vec![toml::Value::String("temprature".into())]);
        assert!(
            metrics
                .check(&bad)
                .unwrap_err()
                .to_string()
                .contains("did you mean 'temperature'")
        );
        let retention = find("history", "retention_time").unwrap();
        assert!(
            retention
                .check(&toml::Value::Float(60.5))
                .unwrap_err()
                .to_string()
                .contains("whole number")
        );
    }
}

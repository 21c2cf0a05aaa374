//! Alert rules: what is watched, over which window, against which thresholds; the built-in
//! defaults; and how a rule reads its value from the history.

use crate::format::{seconds_text, trim_number};
use crate::monitor::history::{DeviceMetric, HostMetric, ProcessMetric, Series};

/// How serious an alert is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Worth knowing.
    Info,
    /// Worth a look.
    Warning,
    /// Worth acting on now.
    Critical,
}

impl Severity {
    /// Every severity, least serious first.
    pub const ALL: [Self; 3] = [Self::Info, Self::Warning, Self::Critical];

    /// The Prometheus/Alertmanager label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Warning => "warning",
            Self::Critical => "critical",
        }
    }

    /// The severity its label names.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.label() == text)
    }
}

/// The metric a rule watches; its scope follows from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Read from each GPU.
    Device(DeviceMetric),
    /// Read from each process on each GPU.
    Process(ProcessMetric),
    /// Read from the host.
    Host(HostMetric),
}

impl Metric {
    /// `(scope, name, unit)`: the names rules are written with and the unit messages write
    /// after a number. Every metric has them: a new one does not build until it is here.
    fn entry(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Metric::Device(metric) => (
                "device",
                match metric {
                    DeviceMetric::Utilization => "utilization",
                    DeviceMetric::MemoryBandwidth => "memory_bandwidth",
                    DeviceMetric::MemoryPercent => "memory_percent",
                    DeviceMetric::MemoryMib => "memory_mib",
                    DeviceMetric::Temperature => "temperature",
                    DeviceMetric::Power => "power",
                    DeviceMetric::CriticalXids => "critical_xids",
                },
                match metric {
                    DeviceMetric::Utilization
                    | DeviceMetric::MemoryBandwidth
                    | DeviceMetric::MemoryPercent => "%",
                    DeviceMetric::MemoryMib => " MiB",
                    DeviceMetric::Temperature => " °C",
                    DeviceMetric::Power => " W",
                    DeviceMetric::CriticalXids => "",
                },
            ),
            Metric::Process(metric) => match metric {
                ProcessMetric::GpuMemoryMib => ("process", "gpu_memory_mib", " MiB"),
                ProcessMetric::Sm => ("process", "sm", "%"),
                ProcessMetric::Cpu => ("process", "cpu", "%"),
            },
            Metric::Host(metric) => match metric {
                HostMetric::Cpu => ("host", "cpu", "%"),
                HostMetric::MemoryPercent => ("host", "memory_percent", "%"),
            },
        }
    }

    /// Every metric: the devices', the processes', then the host's.
    pub fn all() -> impl Iterator<Item = Metric> {
        DeviceMetric::ALL
            .into_iter()
            .map(Metric::Device)
            .chain(ProcessMetric::ALL.into_iter().map(Metric::Process))
            .chain(HostMetric::ALL.into_iter().map(Metric::Host))
    }

    /// `device`, `process` or `host`.
    pub fn scope(self) -> &'static str {
        self.entry().0
    }

    /// The name rules give it within its scope (`memory_percent`).
    pub fn name(self) -> &'static str {
        self.entry().1
    }

    /// Its unit as messages write it after a number (`%`, ` MiB`); empty for a count.
    pub fn unit(self) -> &'static str {
        self.entry().2
    }

    /// The metric `name` of `scope`, if there is one.
    pub fn parse(scope: &str, name: &str) -> Option<Self> {
        Self::all().find(|m| m.scope() == scope && m.name() == name)
    }
}

/// What a rule computes from the readings in its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    /// Time-weighted mean (the default).
    Mean,
    /// The least reading.
    Min,
    /// The greatest reading.
    Max,
    /// The latest reading.
    Last,
    /// Mean of the window's last tenth minus mean of its first tenth.
    Increase,
    /// The increase, when the window's ten slices rise steadily (never falling, rising in
    /// most steps); otherwise 0. Catches leaks, not one big allocation or noise.
    SteadyIncrease,
    /// The highest reading minus the lowest: for a count that only grows (Xid errors), how
    /// much it grew within the window.
    Range,
}

impl Function {
    /// Every function with the name rules give it.
    pub const ALL: [(&'static str, Self); 7] = [
        ("mean", Self::Mean),
        ("min", Self::Min),
        ("max", Self::Max),
        ("last", Self::Last),
        ("increase", Self::Increase),
        ("steady_increase", Self::SteadyIncrease),
        ("range", Self::Range),
    ];

    /// The name rules give it.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, f)| *f == self)
            .map_or("mean", |(n, _)| n)
    }

    /// The function named `text`, if there is one.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.iter().find(|(n, _)| *n == text).map(|(_, f)| *f)
    }

    /// Whether the value needs a span of history (it cannot be judged from one reading).
    pub fn needs_history(self) -> bool {
        matches!(self, Self::Increase | Self::SteadyIncrease | Self::Range)
    }
}

/// How a rule's value is compared with its threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    /// The condition holds above the threshold.
    Above,
    /// The condition holds below the threshold.
    Below,
}

impl Comparison {
    /// `>` or `<`.
    pub fn symbol(self) -> &'static str {
        match self {
            Self::Above => ">",
            Self::Below => "<",
        }
    }

    /// `>`, `above`, `<` or `below`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            ">" | "above" => Some(Self::Above),
            "<" | "below" => Some(Self::Below),
            _ => None,
        }
    }

    /// Whether `value` passes `threshold` this way.
    pub fn holds(self, value: f64, threshold: f64) -> bool {
        match self {
            Self::Above => value > threshold,
            Self::Below => value < threshold,
        }
    }
}

/// For device rules: whether processes must hold the GPU for the rule to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holders {
    /// Whatever holds the GPU.
    Any,
    /// Only while processes hold it.
    Some,
    /// Only while no process holds it.
    None,
}

impl Holders {
    /// Every choice with the name rules give it.
    pub const ALL: [(&'static str, Self); 3] =
        [("any", Self::Any), ("some", Self::Some), ("none", Self::None)];

    /// The name rules give it.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, h)| *h == self)
            .map_or("any", |(n, _)| n)
    }

    /// The choice named `text`, if there is one.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.iter().find(|(n, _)| *n == text).map(|(_, h)| *h)
    }

    /// Whether a GPU that is (or is not) `occupied` may be judged.
    pub fn admits(self, occupied: bool) -> bool {
        match self {
            Self::Any => true,
            Self::Some => occupied,
            Self::None => !occupied,
        }
    }
}

/// One alert rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Its name, unique among the rules; a file's rule replaces a built-in of that name.
    pub name: String,
    /// What it watches.
    pub metric: Metric,
    /// What it computes over its window.
    pub function: Function,
    /// Whether above or below the threshold is wrong.
    pub comparison: Comparison,
    /// The level the value must pass to start the alert, in the metric's unit.
    pub threshold: f64,
    /// Once firing, the alert stays until the value no longer passes this (hysteresis).
    pub clear: f64,
    /// Seconds of history the function reads.
    pub window: f64,
    /// Seconds the condition must hold before the alert fires.
    pub for_seconds: f64,
    /// How serious it is.
    pub severity: Severity,
    /// Fraction of the window readings must cover; less is "no data", never OK.
    pub min_coverage: f64,
    /// For device rules: whether processes must (or must not) hold the GPU.
    pub holders: Holders,
    /// A sentence for people; the default is generated from the rule.
    pub summary: Option<String>,
}

/// A rule's window when it gives none, in seconds.
pub const DEFAULT_WINDOW: f64 = 30.0;
/// A rule's `min_coverage` when it gives none.
pub const DEFAULT_MIN_COVERAGE: f64 = 0.5;

impl Rule {
    /// The rule's value from a series ending at `now`: `Err(coverage)` when the readings
    /// cover less of the window than the rule requires.
    pub fn evaluate(&self, series: &Series, now: f64) -> Result<f64, f64> {
        let from = now - self.window;
        let Some(whole) = series.window(from, now) else {
            return Err(0.0);
        };
        if whole.coverage < self.min_coverage {
            return Err(whole.coverage);
        }
        match self.function {
            Function::Mean => Ok(whole.mean),
            Function::Min => Ok(whole.min),
            Function::Max => Ok(whole.max),
            Function::Last => Ok(whole.last),
            Function::Range => Ok(whole.max - whole.min),
            Function::Increase | Function::SteadyIncrease => {
                let slices = series.slices(from, now, 10);
                let (Some(Some(first)), Some(Some(last))) = (slices.first(), slices.last()) else {
                    return Err(whole.coverage);
                };
                if self.function == Function::Increase {
                    return Ok(last - first);
                }
                Ok(steady_increase(&slices).unwrap_or(0.0))
            }
        }
    }

    /// Whether the value starts the alert (`firing` false) or keeps it (`firing` true).
    pub fn holds(&self, value: f64, firing: bool) -> bool {
        let level = if firing { self.clear } else { self.threshold };
        self.comparison.holds(value, level)
    }

    /// The condition in words, e.g. "temperature 30 s mean > 85 °C".
    pub fn condition(&self) -> String {
        let unit = self.metric.unit();
        let over = match self.function {
            Function::Last => String::new(),
            f => format!(" {} {}", seconds_text(self.window), f.name().replace('_', " ")),
        };
        let mut text = format!(
            "{}{over} {} {}{unit}",
            self.metric.name().replace('_', " "),
            self.comparison.symbol(),
            trim_number(self.threshold)
        );
        if self.for_seconds > 0.0 {
            text.push_str(&format!(" for {}", seconds_text(self.for_seconds)));
        }
        match self.holders {
            Holders::Any => {}
            Holders::Some => text.push_str(" while processes hold it"),
            Holders::None => text.push_str(" with no process on it"),
        }
        text
    }
}

/// The total increase of slice means that never fall and rise in most steps.
fn steady_increase(slices: &[Option<f64>]) -> Option<f64> {
    let values: Vec<f64> = slices.iter().copied().collect::<Option<Vec<f64>>>()?;
    let total = values.last()? - values.first()?;
    if total <= 0.0 {
        return None;
    }
    // Allow a wobble of 1% of the total rise, never a real fall.
    let tolerance = total * 0.01;
    let steps: Vec<f64> = values.windows(2).map(|w| w[1] - w[0]).collect();
    let falls = steps.iter().any(|d| *d < -tolerance);
    let rises = steps.iter().filter(|d| **d > tolerance).count();
    (!falls && rises * 2 > steps.len()).then_some(total)
}

/// A rule as written: either a full rule, or `enabled = false` to turn a built-in off.
#[derive(Debug, Clone, PartialEq)]
pub enum RuleEntry {
    /// A rule, new or replacing a built-in of its name.
    Rule(Rule),
    /// `enabled = false`: the built-in rule of this name is off.
    Disabled(String),
}

/// The `[alert]` settings: the thresholds behind the built-in rules, the file's own rules
/// and where transitions are delivered.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertSettings {
    /// GPU memory use, percent of the total, that fires `gpu_memory_high`.
    pub memory_usage_threshold: f64,
    /// No effect: kept so that files which set it still load.
    pub gpu_utilization_threshold: f64,
    /// Degrees Celsius that fire `gpu_temperature_high`.
    pub temperature_threshold: f64,
    /// Whether the built-in rules apply (each can still be replaced or disabled by name).
    pub builtin_rules: bool,
    /// Append-only JSON-lines log of alert transitions; empty for none.
    pub log_file: String,
    /// Commands run when an alert of each severity fires; empty for none.
    pub notify_info: Vec<String>,
    /// See `notify_info`.
    pub notify_warning: Vec<String>,
    /// See `notify_info`.
    pub notify_critical: Vec<String>,
    /// Seconds a notification command may run before it is killed.
    pub notify_timeout: f64,
    /// Seconds between two notifications of one severity.
    pub notify_min_interval: f64,
    /// `[[alert.rules]]` from the file (parsed with their own positions, not by serde).
    #[serde(skip)]
    pub rules: Vec<RuleEntry>,
}

impl AlertSettings {
    /// The rules in force: the built-ins (unless turned off, replaced or disabled by name)
    /// and then the file's own.
    pub fn effective_rules(&self) -> Vec<Rule> {
        let named = |name: &str| {
            self.rules.iter().any(|e| match e {
                RuleEntry::Rule(r) => r.name == name,
                RuleEntry::Disabled(n) => n == name,
            })
        };
        let mut out: Vec<Rule> = if self.builtin_rules {
            builtin(self).into_iter().filter(|r| !named(&r.name)).collect()
        } else {
            Vec::new()
        };
        out.extend(self.rules.iter().filter_map(|e| match e {
            RuleEntry::Rule(r) => Some(r.clone()),
            RuleEntry::Disabled(_) => None,
        }));
        out
    }
}

/// The built-in rules, from the simple `[alert]` thresholds and fixed defaults.
pub fn builtin(settings: &AlertSettings) -> Vec<Rule> {
    let rule = |name: &str, metric, function, comparison, threshold, clear, severity| Rule {
        name: name.to_string(),
        metric,
        function,
        comparison,
        threshold,
        clear,
        window: DEFAULT_WINDOW,
        for_seconds: 0.0,
        severity,
        min_coverage: DEFAULT_MIN_COVERAGE,
        holders: Holders::Any,
        summary: None,
    };
    use Comparison::{Above, Below};
    use Function::{Increase, Mean, Range, SteadyIncrease};
    let device = Metric::Device;
    let memory = settings.memory_usage_threshold;
    let temperature = settings.temperature_threshold;
    vec![
        Rule {
            summary: Some(format!(
                "GPU memory above {}% of the total: less than {}% headroom before out-of-memory",
                trim_number(memory),
                trim_number(100.0 - memory)
            )),
            ..rule(
                "gpu_memory_high",
                device(DeviceMetric::MemoryPercent),
                Mean,
                Above,
                memory,
                (memory - 5.0).max(0.0),
                Severity::Warning,
            )
        },
        Rule {
            window: 300.0,
            min_coverage: 0.9,
            summary: Some("GPU memory use rose by more than 20% of the total within 5 minutes".into()),
            ..rule(
                "gpu_memory_rising",
                device(DeviceMetric::MemoryPercent),
                Increase,
                Above,
                20.0,
                20.0,
                Severity::Info,
            )
        },
        Rule {
            window: 60.0,
            for_seconds: 300.0,
            holders: Holders::Some,
            summary: Some(
                "GPU reserved but idle: under 20% utilization for 5 minutes while processes hold it".into(),
            ),
            ..rule(
                "gpu_idle_reserved",
                device(DeviceMetric::Utilization),
                Mean,
                Below,
                20.0,
                25.0,
                Severity::Warning,
            )
        },
        Rule {
            window: 60.0,
            for_seconds: 300.0,
            holders: Holders::None,
            summary: Some("GPU idle with no process for 5 minutes: free for work".into()),
            ..rule(
                "gpu_idle_free",
                device(DeviceMetric::Utilization),
                Mean,
                Below,
                20.0,
                25.0,
                Severity::Info,
            )
        },
        Rule {
            summary: Some(format!("GPU hotter than {} °C", trim_number(temperature))),
            ..rule(
                "gpu_temperature_high",
                device(DeviceMetric::Temperature),
                Mean,
                Above,
                temperature,
                (temperature - 3.0).max(0.0),
                Severity::Warning,
            )
        },
        Rule {
            summary: Some("GPU hotter than 85 °C: throttling and hardware damage ahead".into()),
            ..rule(
                "gpu_temperature_critical",
                device(DeviceMetric::Temperature),
                Mean,
                Above,
                85.0,
                82.0,
                Severity::Critical,
            )
        },
        Rule {
            window: 600.0,
            // Judged from the first seconds on: an Xid soon after gputop starts counts too.
            min_coverage: 0.01,
            summary: Some(
                "Critical Xid error (not one an application causes): the GPU needs attention".into(),
            ),
            ..rule(
                "gpu_xid_error",
                device(DeviceMetric::CriticalXids),
                Range,
                Above,
                0.0,
                0.0,
                Severity::Critical,
            )
        },
        Rule {
            window: 600.0,
            min_coverage: 0.95,
            summary: Some("GPU memory of the process grew steadily for 10 minutes: leak suspected".into()),
            ..rule(
                "process_memory_leak",
                Metric::Process(ProcessMetric::GpuMemoryMib),
                SteadyIncrease,
                Above,
                256.0,
                0.0,
                Severity::Critical,
            )
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_increase_needs_most_steps_rising_and_none_falling() {
        let ramp: Vec<Option<f64>> = (0..10).map(|i| Some(100.0 + 50.0 * f64::from(i))).collect();
        assert_eq!(steady_increase(&ramp), Some(450.0));
        let mut one_jump = vec![Some(100.0); 5];
        one_jump.extend(vec![Some(900.0); 5]);
        assert_eq!(steady_increase(&one_jump), None, "one allocation is not a leak");
        let mut falls = ramp.clone();
        falls[5] = Some(0.0);
        assert_eq!(steady_increase(&falls), None);
        let mut gap = ramp;
        gap[3] = None;
        assert_eq!(steady_increase(&gap), None);
    }

    #[test]
    fn conditions_read_as_sentences() {
        let rules = builtin(&crate::config::Settings::default().alert);
        let texts: Vec<String> = rules.iter().map(Rule::condition).collect();
        assert!(
            texts.contains(&"temperature 30 s mean > 85 °C".to_string()),
            "{texts:?}"
        );
        assert!(
            texts.contains(&"utilization 1 min mean < 20% for 5 min while processes hold it".to_string())
        );
    }
}

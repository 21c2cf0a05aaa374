//! `[[alert.rules]]`: parsing each rule strictly (every error with file:line:column) and
//! writing rules back as TOML for `--dump-config`.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::schema::suggest;
use crate::monitor::alerts::rules::{
    Comparison, DEFAULT_MIN_COVERAGE, DEFAULT_WINDOW, Function, Holders, Metric, Rule, RuleEntry, Severity,
};
use crate::monitor::history::{PROCESS_BUCKET, RAW_SPAN};

type SpannedTable = BTreeMap<Spanned<String>, Spanned<toml::Value>>;

#[derive(Deserialize)]
struct RulesOnly {
    #[serde(default)]
    alert: RulesSection,
}

#[derive(Deserialize, Default)]
struct RulesSection {
    #[serde(default)]
    rules: Vec<Spanned<SpannedTable>>,
}

/// The keys an `[[alert.rules]]` table may have.
const FIELDS: &[&str] = &[
    "name",
    "enabled",
    "scope",
    "metric",
    "function",
    "comparison",
    "threshold",
    "clear",
    "window",
    "for",
    "severity",
    "min_coverage",
    "holders",
    "summary",
];

/// Parses every `[[alert.rules]]` table of `text`. `at` turns a byte offset into
/// "file:line:column".
pub fn parse(text: &str, at: &dyn Fn(usize) -> String) -> Result<Vec<RuleEntry>, String> {
    let Ok(file) = toml::from_str::<RulesOnly>(text) else {
        return Err(format!(
            "{}: [alert] rules must be written as [[alert.rules]] tables",
            at(text.find("rules").unwrap_or(0))
        ));
    };
    let mut out: Vec<RuleEntry> = Vec::new();
    for table in &file.alert.rules {
        let entry = parse_one(table, at)?;
        let name = match &entry {
            RuleEntry::Rule(r) => &r.name,
            RuleEntry::Disabled(n) => n,
        };
        let twice = out.iter().any(|e| match e {
            RuleEntry::Rule(r) => &r.name == name,
            RuleEntry::Disabled(n) => n == name,
        });
        if twice {
            return Err(format!(
                "{}: alert rule '{name}' is defined twice",
                at(table.span().start)
            ));
        }
        out.push(entry);
    }
    Ok(out)
}

fn parse_one(table: &Spanned<SpannedTable>, at: &dyn Fn(usize) -> String) -> Result<RuleEntry, String> {
    let fields = table.get_ref();
    for key in fields.keys() {
        if !FIELDS.contains(&key.get_ref().as_str()) {
            let hint = suggest(key.get_ref(), FIELDS.iter().copied())
                .map_or_else(String::new, |s| format!("; did you mean '{s}'?"));
            return Err(format!(
                "{}: unknown key '{}' in [[alert.rules]]{hint}",
                at(key.span().start),
                key.get_ref()
            ));
        }
    }
    let get = |name: &str| fields.iter().find(|(k, _)| k.get_ref() == name).map(|(_, v)| v);
    // At the field's value, or at the rule's table where the field is not written.
    let error = |field: &str, message: String| {
        let offset = get(field).map_or(table.span().start, |v| v.span().start);
        format!("{}: alert rule {field}: {message}", at(offset))
    };
    let text = |field: &str| -> Result<Option<String>, String> {
        match get(field) {
            None => Ok(None),
            Some(v) => match v.get_ref() {
                toml::Value::String(s) => Ok(Some(s.clone())),
                _ => Err(error(field, "expected a string".into())),
            },
        }
    };
    let number = |field: &str, min: f64, max: f64| -> Result<Option<f64>, String> {
        match get(field) {
            None => Ok(None),
            Some(v) => {
                let n = match v.get_ref() {
                    toml::Value::Float(f) => *f,
                    toml::Value::Integer(i) => *i as f64,
                    _ => return Err(error(field, "expected a number".into())),
                };
                if !(min..=max).contains(&n) {
                    return Err(error(
                        field,
                        format!("{n} is out of range: expected {min} to {max}"),
                    ));
                }
                Ok(Some(n))
            }
        }
    };
    let choice = |field: &str, names: &[&str]| -> Result<Option<String>, String> {
        let Some(value) = text(field)? else {
            return Ok(None);
        };
        if names.contains(&value.as_str()) {
            return Ok(Some(value));
        }
        let hint = suggest(&value, names.iter().copied())
            .map_or_else(String::new, |s| format!(" (did you mean '{s}'?)"));
        Err(error(
            field,
            format!(
                "unknown value '{value}'{hint}; expected one of {}",
                names.join(", ")
            ),
        ))
    };
    let start = at(table.span().start);
    let name = text("name")?.ok_or_else(|| format!("{start}: an [[alert.rules]] table needs a name"))?;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(error(
            "name",
            format!("'{name}' must be letters, digits and _ (it becomes a Prometheus alert name)"),
        ));
    }
    if let Some(enabled) = get("enabled") {
        match enabled.get_ref() {
            toml::Value::Boolean(false) => {
                if fields.len() > 2 {
                    return Err(format!(
                        "{start}: alert rule '{name}' is disabled (enabled = false): give it no other keys"
                    ));
                }
                return Ok(RuleEntry::Disabled(name));
            }
            toml::Value::Boolean(true) => {}
            _ => return Err(error("enabled", "expected true or false".into())),
        }
    }
    let scope = choice("scope", &["device", "process", "host"])?.unwrap_or_else(|| "device".into());
    let metric_names: Vec<&str> = Metric::all()
        .filter(|m| m.scope() == scope)
        .map(Metric::name)
        .collect();
    let metric_name = choice("metric", &metric_names)?.ok_or_else(|| {
        format!(
            "{start}: alert rule '{name}' needs a metric ({})",
            metric_names.join(", ")
        )
    })?;
    let metric = Metric::parse(&scope, &metric_name)
        .ok_or_else(|| error("metric", format!("unknown metric '{metric_name}'")))?;
    let function_names: Vec<&str> = Function::ALL.iter().map(|(n, _)| *n).collect();
    let function = choice("function", &function_names)?
        .and_then(|f| Function::parse(&f))
        .unwrap_or(Function::Mean);
    let comparison = match text("comparison")? {
        None => Comparison::Above,
        Some(c) => Comparison::parse(&c)
            .ok_or_else(|| error("comparison", format!("unknown comparison '{c}'; expected > or <")))?,
    };
    let threshold = number("threshold", f64::MIN, f64::MAX)?
        .ok_or_else(|| format!("{start}: alert rule '{name}' needs a threshold"))?;
    let clear = number("clear", f64::MIN, f64::MAX)?.unwrap_or(threshold);
    let wrong_side = match comparison {
        Comparison::Above => clear > threshold,
        Comparison::Below => clear < threshold,
    };
    if wrong_side {
        let side = if comparison == Comparison::Above {
            "above"
        } else {
            "below"
        };
        return Err(error(
            "clear",
            format!("{clear} is {side} the threshold {threshold}: an alert would never resolve"),
        ));
    }
    // Process history keeps 10 s aggregates, not every reading: a process rule's window
    // holds at least one, and an increase's ten slices one each.
    let (min_window, max_window) = match (scope.as_str(), function.needs_history()) {
        ("process", true) => (10.0 * PROCESS_BUCKET, RAW_SPAN),
        ("process", false) => (PROCESS_BUCKET, RAW_SPAN),
        _ => (1.0, 31_536_000.0),
    };
    let window = number("window", 1.0, max_window)?.unwrap_or(DEFAULT_WINDOW);
    if window < min_window {
        let reason = format!(
            "a process rule with function {} needs a window of at least {min_window} s (process \
             history keeps 10 s aggregates)",
            function.name()
        );
        return Err(match get("window") {
            Some(_) => error("window", reason),
            None => format!("{start}: alert rule '{name}': {reason}; set window"),
        });
    }
    let for_seconds = number("for", 0.0, 31_536_000.0)?.unwrap_or(0.0);
    let severity_names: Vec<&str> = Severity::ALL.iter().map(|s| s.label()).collect();
    let severity = choice("severity", &severity_names)?
        .and_then(|s| Severity::parse(&s))
        .unwrap_or(Severity::Warning);
    let min_coverage = number("min_coverage", 0.01, 1.0)?.unwrap_or(DEFAULT_MIN_COVERAGE);
    let holder_names: Vec<&str> = Holders::ALL.iter().map(|(n, _)| *n).collect();
    let holders = choice("holders", &holder_names)?
        .and_then(|h| Holders::parse(&h))
        .unwrap_or(Holders::Any);
    if holders != Holders::Any && scope != "device" {
        return Err(error(
            "holders",
            "only device rules can depend on the processes holding a GPU".into(),
        ));
    }
    Ok(RuleEntry::Rule(Rule {
        name,
        metric,
        function,
        comparison,
        threshold,
        clear,
        window,
        for_seconds,
        severity,
        min_coverage,
        holders,
        summary: text("summary")?,
    }))
}

/// A rule as an `[[alert.rules]]` table that parses back to it.
pub fn to_toml(entry: &RuleEntry) -> String {
    let quote = |s: &str| toml::Value::String(s.to_string()).to_string();
    let float = |v: f64| super::schema::Value::Float(v).to_toml();
    match entry {
        RuleEntry::Disabled(name) => format!("\n[[alert.rules]]\nname = {}\nenabled = false\n", quote(name)),
        RuleEntry::Rule(r) => {
            let mut out = format!(
                "\n[[alert.rules]]\nname = {}\nscope = {}\nmetric = {}\nfunction = {}\ncomparison = {}\n\
                 threshold = {}\nclear = {}\nwindow = {}\nfor = {}\nseverity = {}\nmin_coverage = {}\n\
                 holders = {}\n",
                quote(&r.name),
                quote(r.metric.scope()),
                quote(r.metric.name()),
                quote(r.function.name()),
                quote(r.comparison.symbol()),
                float(r.threshold),
                float(r.clear),
                float(r.window),
                float(r.for_seconds),
                quote(r.severity.label()),
                float(r.min_coverage),
                quote(r.holders.name()),
            );
            if let Some(summary) = &r.summary {
                out.push_str(&format!("summary = {}\n", quote(summary)));
            }
            out
        }
    }
}

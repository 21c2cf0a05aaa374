//! The `/` filter: plain words match command, user or PID; field terms narrow by column.
//!
//! Terms: `user:alice`, `container:docker` (`container:-`: on the host), `gpu:1`, `pid:4242`, `type:G`, `cmd:train`, and comparisons
//! `mem>4G`, `mem<512M` (GPU memory), `sm>50`, `cpu>=10`, `hostmem>2G`. All terms must match.

use gputop_core::model::GpuProcess;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compare {
    Greater,
    GreaterOrEqual,
    Less,
    LessOrEqual,
    Equal,
}

#[derive(Debug, Clone, PartialEq)]
enum Term {
    Text(String),
    User(String),
    Container(String),
    Gpu(u32),
    Pid(u32),
    Type(String),
    Command(String),
    Number {
        field: NumberField,
        compare: Compare,
        value: f64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NumberField {
    GpuMemory,
    Sm,
    Cpu,
    HostMemory,
}

/// A parsed filter; an empty one matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Query {
    terms: Vec<Term>,
}

fn parse_term(word: &str) -> Result<Term, String> {
    for (op, compare) in [
        (">=", Compare::GreaterOrEqual),
        ("<=", Compare::LessOrEqual),
        (">", Compare::Greater),
        ("<", Compare::Less),
        ("=", Compare::Equal),
    ] {
        if let Some((name, value)) = word.split_once(op) {
            let field = match name.to_ascii_lowercase().as_str() {
                "mem" | "gpumem" => NumberField::GpuMemory,
                "sm" => NumberField::Sm,
                "cpu" => NumberField::Cpu,
                "hostmem" => NumberField::HostMemory,
                _ => {
                    return Err(format!(
                        "unknown field '{name}' in '{word}' (mem, sm, cpu, hostmem)"
                    ));
                }
            };
            let value = match field {
                NumberField::GpuMemory | NumberField::HostMemory => {
                    gputop_core::format::parse_size(value).map(|b| b as f64)
                }
                _ => value.parse().ok(),
            }
            .ok_or_else(|| format!("'{value}' is not a number in '{word}'"))?;
            return Ok(Term::Number {
                field,
                compare,
                value,
            });
        }
    }
    if let Some((name, value)) = word.split_once(':') {
        let number = |v: &str| {
            v.parse::<u32>()
                .map_err(|_| format!("'{v}' is not a number in '{word}'"))
        };
        return Ok(match name.to_ascii_lowercase().as_str() {
            "user" => Term::User(value.to_string()),
            "container" | "ctr" | "pod" | "job" => Term::Container(value.to_lowercase()),
            "gpu" => Term::Gpu(number(value)?),
            "pid" => Term::Pid(number(value)?),
            "type" => Term::Type(value.to_ascii_uppercase()),
            "cmd" | "command" => Term::Command(value.to_lowercase()),
            _ => Term::Text(word.to_lowercase()),
        });
    }
    Ok(Term::Text(word.to_lowercase()))
}

impl Query {
    /// Parses the filter text; the error names the first bad term.
    pub fn parse(text: &str) -> Result<Self, String> {
        let terms = text
            .split_whitespace()
            .map(parse_term)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { terms })
    }

    pub fn matches(&self, p: &GpuProcess) -> bool {
        self.terms.iter().all(|term| term_matches(term, p))
    }
}

fn term_matches(term: &Term, p: &GpuProcess) -> bool {
    let user = p.host.user.as_deref().unwrap_or("");
    let command = p
        .host
        .command
        .value()
        .map(|c| c.to_lowercase())
        .unwrap_or_default();
    match term {
        Term::Text(text) => {
            command.contains(text.as_str())
                || user.to_lowercase().contains(text.as_str())
                || p.host
                    .container
                    .as_ref()
                    .is_some_and(|c| c.label().to_lowercase().contains(text.as_str()))
                || p.pid.to_string() == *text
        }
        Term::User(name) => user == name,
        // `container:-` selects the processes on the host itself.
        Term::Container(text) => p.container_label().to_lowercase().contains(text.as_str()),
        Term::Gpu(index) => p.gpu_index == *index,
        Term::Pid(pid) => p.pid == *pid,
        Term::Type(kind) => p.kind.label() == kind,
        Term::Command(text) => command.contains(text.as_str()),
        Term::Number {
            field,
            compare,
            value,
        } => {
            let actual = match field {
                NumberField::GpuMemory => p.gpu_memory_bytes.get().map(|b| b as f64),
                NumberField::Sm => p.sm_percent.get().map(f64::from),
                NumberField::Cpu => p.host.cpu_percent.get(),
                NumberField::HostMemory => p.host.memory_bytes.get().map(|b| b as f64),
            };
            actual.is_some_and(|a| match compare {
                Compare::Greater => a > *value,
                Compare::GreaterOrEqual => a >= *value,
                Compare::Less => a < *value,
                Compare::LessOrEqual => a <= *value,
                Compare::Equal => (a - value).abs() < 1e-9,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputop_core::model::{HostFacts, ProcessType, Reading};

    fn process(pid: u32, gpu: u32, user: &str, command: &str, mem_gib: u64, sm: u32) -> GpuProcess {
        let mut host = HostFacts::gone(pid, "test");
        host.user = Reading::Value(user.into());
        host.command = Reading::Value(command.into());
        host.cpu_percent = Reading::Value(12.5);
        GpuProcess {
            pid,
            gpu_index: gpu,
            gpu_uuid: Reading::NotSupported,
            kind: ProcessType::Compute,
            gpu_memory_bytes: Reading::Value(mem_gib << 30),
            sm_percent: Reading::Value(sm),
            gpu_system_memory_bytes: Default::default(),
            engines_percent: Default::default(),
            memory_bandwidth_percent: Reading::Value(0),
            encoder_percent: Reading::Value(0),
            decoder_percent: Reading::Value(0),
            gpu_instance_id: None,
            compute_instance_id: None,
            host,
        }
    }

    /// The PIDs of `processes` the filter `text` lets through.
    fn matching(processes: &[&GpuProcess], text: &str) -> Vec<u32> {
        let q = Query::parse(text).unwrap();
        processes.iter().filter(|p| q.matches(p)).map(|p| p.pid).collect()
    }

    #[test]
    fn plain_words_and_field_terms() {
        let a = process(100, 0, "alice", "python3 train.py", 8, 90);
        let b = process(200, 1, "bob", "jupyter-lab", 2, 5);
        let check = |text: &str| matching(&[&a, &b], text);
        assert_eq!(check(""), vec![100, 200]);
        assert_eq!(check("TRAIN"), vec![100]);
        assert_eq!(check("bob"), vec![200]);
        assert_eq!(check("200"), vec![200]);
        assert_eq!(check("user:alice"), vec![100]);
        assert_eq!(check("gpu:1"), vec![200]);
        assert_eq!(check("mem>4G"), vec![100]);
        assert_eq!(check("mem<=2GiB"), vec![200]);
        assert_eq!(check("sm>50 user:bob"), Vec::<u32>::new());
        assert_eq!(check("cpu>=12.5 type:C"), vec![100, 200]);
        assert_eq!(check("cmd:jupyter"), vec![200]);
    }

    #[test]
    fn containers_are_matched_by_label_and_dash_means_the_host() {
        let mut a = process(100, 0, "alice", "python3 train.py", 8, 90);
        a.host.container = Some(
            gputop_core::model::Container::new(gputop_core::model::Runtime::Docker, "3f2a1b9c0d12").into(),
        );
        let b = process(200, 1, "bob", "jupyter-lab", 2, 5);
        let check = |text: &str| matching(&[&a, &b], text);
        assert_eq!(check("container:docker"), vec![100]);
        assert_eq!(check("ctr:3F2A"), vec![100]);
        assert_eq!(check("container:-"), vec![200]);
        assert_eq!(
            check("3f2a1b"),
            vec![100],
            "a plain word matches the container too"
        );
    }

    #[test]
    fn bad_terms_are_named() {
        assert!(
            Query::parse("mem>lots")
                .unwrap_err()
                .contains("'lots' is not a number")
        );
        assert!(
            Query::parse("temp>3")
                .unwrap_err()
                .contains("unknown field 'temp'")
        );
        assert!(Query::parse("gpu:x").unwrap_err().contains("'x' is not a number"));
    }
}

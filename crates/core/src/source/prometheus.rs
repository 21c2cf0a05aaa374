//! The fleet from Prometheus (or Thanos, Mimir, VictoriaMetrics: the same HTTP API) that
//! scrapes `gputop export` on every node: `gputop --prometheus URL`. A refresh asks a fixed
//! set of instant queries (`/api/v1/query`) whatever the fleet's size; Prometheus aggregates
//! (`sum`, `count`, `topk` by node, GPU, user or namespace), so what gputop reads grows with
//! the GPUs, never with the processes. Every answer is bounded in bytes and series and
//! checked; a query that fails, a sample that is not a number, a series no exporter serves
//! each become one line of [`Fleet::problems`]. The node that is open gets its own queries,
//! its GPUs and processes made into a [`Snapshot`] for the main screen.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;
use serde_json::value::RawValue;

use super::http::{Client, Credentials, Endpoint, FeedThread, HttpError, SetupError, TlsFiles};
use crate::model::fleet::{self, Fleet, FleetGpu, FleetNode, FleetProcess, IdleGpu, NodeState, Share};
use crate::model::{Device, GpuProcess, ProcessType, Reading, Snapshot, Vendor, catalogue, wire};

/// Largest answer read.
pub const BODY_MAX: usize = 32 << 20;
/// Most series read of one answer (4 000 nodes of 16 GPUs).
pub const MAX_SERIES: usize = 65_536;
/// Longest label value kept; longer ones are cut.
pub const LABEL_MAX: usize = 256;
/// How far back a GPU's idle time is looked for.
pub const IDLE_LOOKBACK: Duration = Duration::from_secs(3600);
/// How often the idle times are asked again (they are counted in minutes).
pub const IDLE_EVERY: Duration = Duration::from_secs(60);
/// The port of Prometheus, for an address without one.
pub const PROMETHEUS_PORT: u16 = 9090;
/// The selector when none is given: the job of `config/prometheus/prometheus.yml`, or of the
/// ServiceMonitor in `config/kubernetes/` (the Service's name).
pub const DEFAULT_SELECTOR: &str = r#"{job=~"gputop|gputop-exporter"}"#;

/// How to reach Prometheus and which series are gputop's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Its URL.
    pub endpoint: Endpoint,
    /// The label matchers of gputop's targets, without braces: `job="gputop",cluster="a"`.
    pub selector: String,
    /// TLS beyond the system's trust store.
    pub tls: TlsFiles,
    /// A bearer token or basic auth.
    pub credentials: Option<Credentials>,
    /// The most one query may take.
    pub timeout: Duration,
}

/// Why a selector is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a label selector: write matchers in braces, {{job=\"gputop\",cluster=\"a\"}}")]
pub struct SelectorError(String);

/// The matchers of `{job="gputop",cluster="a"}` (braces optional), checked for what would
/// break the queries they are put into: unbalanced quotes or braces. Prometheus checks the
/// rest, and its reason is shown.
pub fn parse_selector(text: &str) -> Result<String, SelectorError> {
    let trimmed = text.trim();
    let inner = trimmed
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .unwrap_or(trimmed)
        .trim();
    let (mut quoted, mut escaped) = (false, false);
    for c in inner.chars() {
        match (quoted, escaped, c) {
            (true, false, '\\') => escaped = true,
            (true, true, _) => escaped = false,
            (_, _, '"') => quoted = !quoted,
            (false, _, '{' | '}') => return Err(SelectorError(text.to_string())),
            _ => {}
        }
    }
    if quoted || inner.contains('\n') || !inner.is_empty() && !inner.contains(['=', '~']) {
        return Err(SelectorError(text.to_string()));
    }
    Ok(inner.trim_end_matches(',').to_string())
}

/// Why an answer was not taken.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// No answer, or not a 200 (with Prometheus' reason where it gave one).
    #[error("{0}")]
    Http(HttpError),
    /// Prometheus refused the query.
    #[error("Prometheus: {0}")]
    Refused(String),
    /// Not a Prometheus answer: a proxy's page, a truncated body.
    #[error("not a Prometheus answer ({0})")]
    NotAnAnswer(String),
    /// More series than [`MAX_SERIES`].
    #[error("more than {MAX_SERIES} series in one answer")]
    TooManySeries,
}

impl From<HttpError> for AnswerError {
    fn from(error: HttpError) -> Self {
        match error {
            // Prometheus says why in JSON (400, 422, 503): that reason is the one to show.
            HttpError::Status { status, body } => match serde_json::from_slice::<Envelope>(&body) {
                Ok(Envelope { error: Some(why), .. }) => Self::Refused(format!("HTTP {status}: {why}")),
                _ => Self::Http(HttpError::Status { status, body }),
            },
            other => Self::Http(other),
        }
    }
}

/// One series of an instant vector: its labels and its value (NaN and infinities kept, for
/// the reader to say so).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Its labels (`__name__` dropped), each value at most [`LABEL_MAX`] bytes.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

impl Sample {
    fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

#[derive(Deserialize)]
struct Envelope<'a> {
    status: String,
    #[serde(borrow, default)]
    data: Option<Data<'a>>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct Data<'a> {
    #[serde(rename = "resultType")]
    result_type: String,
    #[serde(borrow)]
    result: &'a RawValue,
}

#[derive(Deserialize)]
struct RawSample {
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

/// The samples of an instant query's answer (a vector, or a scalar as one unlabelled
/// sample), or why it is not one.
pub fn parse_answer(body: &[u8]) -> Result<Vec<Sample>, AnswerError> {
    let envelope: Envelope = serde_json::from_slice(body).map_err(|e| {
        let start = String::from_utf8_lossy(&body[..body.len().min(200)]).to_lowercase();
        AnswerError::NotAnAnswer(if start.trim_start().starts_with('<') {
            "an HTML page: a proxy or a login in the way?".to_string()
        } else if e.is_eof() {
            "the answer ends early".to_string()
        } else {
            e.to_string()
        })
    })?;
    if envelope.status != "success" {
        return Err(AnswerError::Refused(
            envelope
                .error
                .unwrap_or_else(|| format!("status {}", envelope.status)),
        ));
    }
    let data = envelope
        .data
        .ok_or_else(|| AnswerError::NotAnAnswer("no data".into()))?;
    let value = |text: &str| {
        text.parse::<f64>().map_err(|_| {
            AnswerError::NotAnAnswer(format!("'{}' is not a number", crate::format::sanitize(text)))
        })
    };
    match data.result_type.as_str() {
        "vector" => {
            let raw: Bounded = serde_json::from_str(data.result.get()).map_err(|e| {
                if e.to_string().contains(TOO_MANY) {
                    AnswerError::TooManySeries
                } else {
                    AnswerError::NotAnAnswer(e.to_string())
                }
            })?;
            raw.0
                .into_iter()
                .map(|s| {
                    let labels = s
                        .metric
                        .into_iter()
                        .filter(|(k, _)| k != "__name__")
                        .map(|(k, mut v)| {
                            if v.len() > LABEL_MAX {
                                let mut end = LABEL_MAX;
                                while !v.is_char_boundary(end) {
                                    end -= 1;
                                }
                                v.truncate(end);
                            }
                            (k, v)
                        })
                        .collect();
                    Ok(Sample {
                        labels,
                        value: value(&s.value.1)?,
                    })
                })
                .collect()
        }
        "scalar" => {
            let (_, text): (f64, String) = serde_json::from_str(data.result.get())
                .map_err(|e| AnswerError::NotAnAnswer(e.to_string()))?;
            Ok(vec![Sample {
                labels: BTreeMap::new(),
                value: value(&text)?,
            }])
        }
        other => Err(AnswerError::NotAnAnswer(format!(
            "a {} where an instant vector was asked",
            crate::format::sanitize(other)
        ))),
    }
}

const TOO_MANY: &str = "series over the limit";

/// A vector's series, refused past [`MAX_SERIES`] before more are read.
struct Bounded(Vec<RawSample>);

impl<'de> Deserialize<'de> for Bounded {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Bounded;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of series")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Bounded, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
                while let Some(sample) = seq.next_element()? {
                    if out.len() == MAX_SERIES {
                        return Err(serde::de::Error::custom(TOO_MANY));
                    }
                    out.push(sample);
                }
                Ok(Bounded(out))
            }
        }
        deserializer.deserialize_seq(Visitor)
    }
}

/// A PromQL string literal of `text`.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '\\' | '"' => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `%`-encoding of a query for the URL.
fn encoded(query: &str) -> String {
    let mut out = String::with_capacity(query.len() * 2);
    for b in query.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What one refresh asks, by the name its problems are reported under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ask {
    Up,
    NodeGpus,
    NodeIdle,
    NodeMemoryUsed,
    NodeMemoryTotal,
    NodeUtilization,
    IdleMemory,
    Info,
    Utilization,
    MemoryUsed,
    MemoryTotal,
    Processes,
    NodeUsers,
    Alerts,
    Top,
    TopSm,
    UserMemory,
    UserGpus,
    UserProcesses,
    UserNodes,
    NamespaceMemory,
    NamespaceGpus,
    NamespaceProcesses,
    NamespaceNodes,
    Idle,
}

impl Ask {
    /// The series it reads, as a problem names them.
    fn series(self) -> String {
        if self == Self::Idle {
            return format!("{} (idle times)", catalogue::UTILIZATION.name);
        }
        let name = match self {
            Self::Up => "up",
            Self::Info | Self::NodeGpus => catalogue::GPU_INFO,
            Self::Utilization | Self::NodeIdle | Self::NodeUtilization => catalogue::UTILIZATION.name,
            Self::MemoryUsed | Self::NodeMemoryUsed | Self::IdleMemory => catalogue::MEMORY_USED.name,
            Self::MemoryTotal | Self::NodeMemoryTotal => catalogue::MEMORY_TOTAL.name,
            Self::Processes | Self::NamespaceProcesses => catalogue::GPU_PROCESSES,
            Self::NodeUsers | Self::UserProcesses | Self::UserNodes => catalogue::USER_PROCESSES,
            Self::Alerts => "ALERTS",
            Self::Top => catalogue::PROCESS_GPU_MEMORY,
            Self::TopSm => catalogue::PROCESS_SM_UTILIZATION,
            Self::UserMemory => catalogue::USER_GPU_MEMORY,
            Self::UserGpus => catalogue::USER_GPUS,
            Self::NamespaceMemory | Self::NamespaceGpus | Self::NamespaceNodes => catalogue::MEMORY_USED.name,
            Self::Idle => catalogue::UTILIZATION.name,
        };
        name.to_string()
    }

    /// Whether an empty answer while nodes are up means the exporters lack the series.
    fn expected(self) -> bool {
        matches!(
            self,
            Self::Info
                | Self::Utilization
                | Self::MemoryUsed
                | Self::MemoryTotal
                | Self::Processes
                | Self::NodeGpus
                | Self::NodeUtilization
                | Self::NodeMemoryUsed
                | Self::NodeMemoryTotal
        )
    }
}

/// The queries of one refresh, for the selector's series: each node's totals, and with
/// `each_gpu` every GPU's figures too (`--once`: the JSON lists them).
fn queries(selector: &str, with_idle: bool, each_gpu: bool) -> Vec<(Ask, String)> {
    let s = |name: &str| format!("{name}{{{selector}}}");
    let with = |name: &str, extra: &str| {
        if selector.is_empty() {
            format!("{name}{{{extra}}}")
        } else {
            format!("{name}{{{selector},{extra}}}")
        }
    };
    let top = format!(
        "topk({}, {})",
        fleet::TOP_PROCESSES,
        s(catalogue::PROCESS_GPU_MEMORY)
    );
    let utilization = format!("max by (instance, gpu) ({})", s(catalogue::UTILIZATION.name));
    let busy = fleet::IDLE_BELOW_PERCENT / 100.0;
    let mut asks = vec![
        (Ask::Up, s("up")),
        (
            Ask::NodeGpus,
            format!("count by (instance) ({})", s(catalogue::GPU_INFO)),
        ),
        (
            Ask::NodeIdle,
            format!("count by (instance) ({utilization} < {busy})"),
        ),
        (
            Ask::NodeMemoryUsed,
            format!("sum by (instance) ({})", s(catalogue::MEMORY_USED.name)),
        ),
        (
            Ask::NodeMemoryTotal,
            format!("sum by (instance) ({})", s(catalogue::MEMORY_TOTAL.name)),
        ),
        (Ask::NodeUtilization, format!("avg by (instance) ({utilization})")),
        (
            Ask::IdleMemory,
            format!(
                "max by (instance, gpu) ({}) and on (instance, gpu) ({utilization} < {busy})",
                s(catalogue::MEMORY_USED.name)
            ),
        ),
        (
            Ask::Processes,
            format!("sum by (instance) ({})", s(catalogue::GPU_PROCESSES)),
        ),
        (
            Ask::NodeUsers,
            format!(
                "topk by (instance) ({}, max by (instance, user) ({}))",
                fleet::TOP_SHARES,
                s(catalogue::USER_PROCESSES)
            ),
        ),
        (
            Ask::Alerts,
            format!(
                "count by (instance) ({})",
                with("ALERTS", r#"alertstate="firing""#)
            ),
        ),
        (Ask::Top, top),
    ];
    for (ask, aggregate) in [
        (
            Ask::UserMemory,
            format!("sum by (user) ({})", s(catalogue::USER_GPU_MEMORY)),
        ),
        (
            Ask::UserGpus,
            format!("sum by (user) ({})", s(catalogue::USER_GPUS)),
        ),
        (
            Ask::UserProcesses,
            format!("sum by (user) ({})", s(catalogue::USER_PROCESSES)),
        ),
        (
            Ask::UserNodes,
            format!("count by (user) ({})", s(catalogue::USER_PROCESSES)),
        ),
    ] {
        asks.push((ask, format!("topk({}, {aggregate})", fleet::TOP_SHARES * 4)));
    }
    let held = |name: &str| with(name, r#"namespace!="""#);
    for (ask, aggregate) in [
        (
            Ask::NamespaceMemory,
            format!("sum by (namespace) ({})", held(catalogue::MEMORY_USED.name)),
        ),
        (
            Ask::NamespaceGpus,
            format!("count by (namespace) ({})", held(catalogue::MEMORY_USED.name)),
        ),
        (
            Ask::NamespaceProcesses,
            format!("sum by (namespace) ({})", held(catalogue::GPU_PROCESSES)),
        ),
        (
            Ask::NamespaceNodes,
            format!(
                "count by (namespace) (count by (namespace, instance) ({}))",
                held(catalogue::MEMORY_USED.name)
            ),
        ),
    ] {
        asks.push((ask, format!("topk({}, {aggregate})", fleet::TOP_SHARES * 4)));
    }
    if each_gpu {
        asks.extend([
            (
                Ask::Info,
                format!("max by (instance, gpu, name) ({})", s(catalogue::GPU_INFO)),
            ),
            (Ask::Utilization, utilization.clone()),
            (
                Ask::MemoryUsed,
                format!("max by (instance, gpu) ({})", s(catalogue::MEMORY_USED.name)),
            ),
            (
                Ask::MemoryTotal,
                format!("max by (instance, gpu) ({})", s(catalogue::MEMORY_TOTAL.name)),
            ),
        ]);
    }
    if with_idle {
        // When each idle GPU was last busy within the lookback, a step every two minutes.
        asks.push((
            Ask::Idle,
            format!(
                "time() - max_over_time((timestamp({utilization} >= {busy}))[{}s:120s]) and on (instance, gpu) ({utilization} < {busy})",
                IDLE_LOOKBACK.as_secs()
            ),
        ));
    }
    asks
}

/// Each idle GPU's seconds since it was last busy, by node and GPU index, and when they were
/// asked (they are asked every [`IDLE_EVERY`]).
type IdleTimes = (BTreeMap<(String, u32), u64>, Option<Instant>);

/// The query of the SM use of the processes of `top`'s nodes, or `None` without any.
fn sm_of_top(selector: &str, top: &[Sample]) -> Option<String> {
    let escape = |text: &str| {
        text.chars()
            .fold(String::with_capacity(text.len()), |mut out, c| {
                if ".+*?()[]{}|^$\\".contains(c) {
                    out.push('\\');
                }
                out.push(c);
                out
            })
    };
    // Their nodes and their PIDs: a few more series than the top ones, never a node's all.
    let any_of = |label: &str| {
        let values: std::collections::BTreeSet<&str> = top.iter().filter_map(|s| s.label(label)).collect();
        let alternatives: Vec<String> = values.into_iter().map(escape).collect();
        (!alternatives.is_empty()).then(|| format!("{label}=~{}", quoted(&alternatives.join("|"))))
    };
    let matchers = [selector.to_string(), any_of("instance")?, any_of("pid")?];
    let matchers: Vec<&str> = matchers
        .iter()
        .map(String::as_str)
        .filter(|m| !m.is_empty())
        .collect();
    Some(format!(
        "{}{{{}}}",
        catalogue::PROCESS_SM_UTILIZATION,
        matchers.join(",")
    ))
}

/// A client of one Prometheus, for gputop's series.
#[derive(Debug, Clone)]
pub struct Prometheus {
    client: Client,
    selector: String,
    /// Each idle GPU's seconds since it was last busy, and when they were asked.
    idle: Arc<Mutex<IdleTimes>>,
}

impl Prometheus {
    /// A client for `settings`.
    pub fn new(settings: &Settings) -> Result<Self, SetupError> {
        Ok(Self {
            client: Client::new(
                settings.endpoint.clone(),
                &settings.tls,
                settings.credentials.clone(),
                settings.timeout,
                BODY_MAX,
            )?,
            selector: settings.selector.clone(),
            idle: Arc::new(Mutex::new((BTreeMap::new(), None))),
        })
    }

    /// What the views call this feed.
    pub fn feed(&self) -> String {
        format!("prometheus {}", self.client.endpoint().url())
    }

    /// The answer to one instant query.
    pub async fn query(&self, promql: &str) -> Result<Vec<Sample>, AnswerError> {
        let body = self
            .client
            .get(&format!("/api/v1/query?query={}", encoded(promql)))
            .await?;
        parse_answer(&body)
    }

    /// Every query of a refresh at once; each answer or why not, in the order asked.
    async fn ask_all(&self, asks: Vec<(Ask, String)>) -> Vec<(Ask, Result<Vec<Sample>, AnswerError>)> {
        let tasks: Vec<_> = asks
            .into_iter()
            .map(|(ask, promql)| {
                let me = self.clone();
                (ask, tokio::spawn(async move { me.query(&promql).await }))
            })
            .collect();
        let mut out = Vec::with_capacity(tasks.len());
        for (ask, task) in tasks {
            let answer = task
                .await
                .unwrap_or_else(|e| Err(AnswerError::NotAnAnswer(e.to_string())));
            out.push((ask, answer));
        }
        out
    }

    /// The scrape interval of gputop's targets, as the samples of `up` over five minutes
    /// show it; `None` before there are two.
    pub async fn scrape_interval(&self) -> Option<Duration> {
        let window = 300.0;
        let promql = format!("max(count_over_time(up{{{}}}[{window}s]))", self.selector);
        let samples = self.query(&promql).await.ok()?;
        let count = samples.first()?.value;
        (count.is_finite() && count >= 2.0).then(|| Duration::from_secs_f64(window / (count - 1.0).max(1.0)))
    }

    /// The fleet now: nodes and their totals (with `each_gpu`, every GPU's figures too), the
    /// idle GPUs, the top processes, users and namespaces. Fails only when `up` cannot be
    /// read; a query that fails otherwise is one of the fleet's problems.
    pub async fn fleet(&self, each_gpu: bool) -> Result<Fleet, AnswerError> {
        let with_idle = {
            let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            idle.1.is_none_or(|at| at.elapsed() >= IDLE_EVERY)
        };
        let mut answers = self.ask_all(queries(&self.selector, with_idle, each_gpu)).await;
        let top = answers.iter().find(|(ask, _)| *ask == Ask::Top);
        if let Some(promql) = top
            .and_then(|(_, a)| a.as_ref().ok())
            .and_then(|t| sm_of_top(&self.selector, t))
        {
            answers.push((Ask::TopSm, self.query(&promql).await));
        }
        let taken_at = SystemTime::now();
        let mut problems = Vec::new();
        let mut got: BTreeMap<Ask, Vec<Sample>> = BTreeMap::new();
        for (ask, answer) in answers {
            match answer {
                Ok(samples) => {
                    let odd = samples.iter().filter(|s| !s.value.is_finite()).count();
                    if odd > 0 {
                        problems.push(format!(
                            "{}: {odd} samples are NaN or infinite, shown as N/A",
                            ask.series()
                        ));
                    }
                    got.insert(ask, samples.into_iter().filter(|s| s.value.is_finite()).collect());
                }
                Err(why) if ask == Ask::Up => return Err(why),
                Err(why) => problems.push(format!("{}: {why}", ask.series())),
            }
        }
        if with_idle && got.contains_key(&Ask::Idle) {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            idle.0 = got[&Ask::Idle]
                .iter()
                .filter_map(|s| {
                    Some((
                        (s.label("instance")?.to_string(), gpu_of(s)?),
                        s.value.max(0.0) as u64,
                    ))
                })
                .collect();
            idle.1 = Some(Instant::now());
        }
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).0.clone();
        let mut fleet = build(self.feed(), taken_at, &got, &idle, each_gpu);
        let any_up = fleet.nodes.iter().any(|n| n.up);
        for (ask, samples) in &got {
            if any_up && ask.expected() && samples.is_empty() {
                problems.push(format!(
                    "no {} series for {{{}}}: are these gputop exporters, of this version?",
                    ask.series(),
                    self.selector
                ));
            }
        }
        if any_up && fleet.summary.processes > 0 && got.get(&Ask::Top).is_some_and(Vec::is_empty) {
            problems.push(
                "no per-process series: run the exporters with --processes for the top processes".into(),
            );
        }
        let mut seen = std::collections::BTreeSet::new();
        problems.retain(|p| seen.insert(p.clone()));
        fleet.problems = problems;
        Ok(fleet)
    }

    /// One node's GPUs and processes from its series, as a snapshot for the main screen.
    pub async fn node(&self, instance: &str) -> Result<Snapshot, AnswerError> {
        let node = if self.selector.is_empty() {
            format!("instance={}", quoted(instance))
        } else {
            format!("{},instance={}", self.selector, quoted(instance))
        };
        let names = node_series();
        let tasks: Vec<_> = names
            .iter()
            .map(|name| {
                let (me, promql) = (self.clone(), format!("{name}{{{node}}}"));
                tokio::spawn(async move { me.query(&promql).await })
            })
            .collect();
        let mut answers = Vec::with_capacity(tasks.len());
        for task in tasks {
            answers.push(
                task.await
                    .unwrap_or_else(|e| Err(AnswerError::NotAnAnswer(e.to_string())))?,
            );
        }
        Ok(node_snapshot(instance, &answers))
    }
}

fn gpu_of(sample: &Sample) -> Option<u32> {
    sample.label("gpu")?.parse().ok()
}

/// Bytes from a sample, where it is a count of bytes.
fn bytes(value: f64) -> Option<u64> {
    (value.is_finite() && value >= 0.0).then_some(value as u64)
}

/// The fleet from the answers of one refresh.
fn build(
    feed: String,
    taken_at: SystemTime,
    got: &BTreeMap<Ask, Vec<Sample>>,
    idle: &BTreeMap<(String, u32), u64>,
    each_gpu: bool,
) -> Fleet {
    let empty = Vec::new();
    let answer = |ask: Ask| got.get(&ask).unwrap_or(&empty);
    let mut nodes: BTreeMap<String, FleetNode> = BTreeMap::new();
    for s in answer(Ask::Up) {
        let Some(instance) = s.label("instance") else {
            continue;
        };
        let state = if s.value >= 1.0 {
            NodeState::Up
        } else {
            NodeState::Down {
                reason: "Prometheus' latest scrape of it failed (up = 0)".into(),
                failures: None,
            }
        };
        let mut node = FleetNode::new(instance.to_string(), state);
        node.labels = s
            .labels
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "job" | "instance"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        nodes.insert(instance.to_string(), node);
    }
    // GPUs from any per-GPU series: an exporter lacking one still shows its GPUs.
    let mut gpus: BTreeMap<(String, u32), FleetGpu> = BTreeMap::new();
    for ask in [Ask::Info, Ask::Utilization, Ask::MemoryUsed, Ask::MemoryTotal] {
        for s in answer(ask) {
            let (Some(instance), Some(index)) = (s.label("instance"), gpu_of(s)) else {
                continue;
            };
            if !nodes.contains_key(instance) {
                continue;
            }
            let gpu = gpus.entry((instance.to_string(), index)).or_insert(FleetGpu {
                index,
                name: None,
                utilization_percent: None,
                memory_used_bytes: None,
                memory_total_bytes: None,
                idle_seconds: None,
            });
            match ask {
                Ask::Info => gpu.name = s.label("name").map(str::to_string),
                Ask::Utilization => gpu.utilization_percent = Some((s.value * 100.0).clamp(0.0, 100.0)),
                Ask::MemoryUsed => gpu.memory_used_bytes = bytes(s.value),
                _ => gpu.memory_total_bytes = bytes(s.value),
            }
        }
    }
    let lookback = IDLE_LOOKBACK.as_secs();
    let idle_for = |instance: &str, index: u32| {
        Some(
            idle.get(&(instance.to_string(), index))
                .copied()
                .unwrap_or(lookback)
                .min(lookback),
        )
    };
    let mut by_node: BTreeMap<String, Vec<FleetGpu>> = BTreeMap::new();
    for ((instance, index), mut gpu) in gpus {
        if gpu.is_idle() {
            gpu.idle_seconds = idle_for(&instance, index);
        }
        by_node.entry(instance).or_default().push(gpu);
    }
    // Each node's totals, from Prometheus' sums; or, with every GPU read, from them.
    for s in [
        Ask::NodeGpus,
        Ask::NodeIdle,
        Ask::NodeMemoryUsed,
        Ask::NodeMemoryTotal,
        Ask::NodeUtilization,
    ]
    .into_iter()
    .flat_map(|ask| answer(ask).iter().map(move |s| (ask, s)))
    {
        let (ask, s) = s;
        let Some(node) = s.label("instance").and_then(|i| nodes.get_mut(i)) else {
            continue;
        };
        let value = s.value.max(0.0);
        match ask {
            Ask::NodeGpus => node.gpus = value as usize,
            Ask::NodeIdle => node.gpus_idle = value as usize,
            Ask::NodeMemoryUsed => node.memory_used_bytes = value as u64,
            Ask::NodeMemoryTotal => node.memory_total_bytes = value as u64,
            _ => node.utilization_percent = Some((value * 100.0).min(100.0)),
        }
    }
    if each_gpu {
        for (instance, devices) in by_node {
            if let Some(node) = nodes.get_mut(&instance) {
                node.set_devices(devices);
            }
        }
    }
    let mut idle_gpus: Vec<IdleGpu> = answer(Ask::IdleMemory)
        .iter()
        .filter_map(|s| {
            let (instance, index) = (s.label("instance")?, gpu_of(s)?);
            nodes.get(instance).filter(|n| n.up)?;
            Some(IdleGpu {
                instance: instance.to_string(),
                gpu_index: index,
                memory_used_bytes: bytes(s.value),
                idle_seconds: idle_for(instance, index),
            })
        })
        .collect();
    fleet::sort_idle(&mut idle_gpus);
    for (ask, s) in [Ask::Processes, Ask::Alerts, Ask::NodeUsers]
        .into_iter()
        .flat_map(|ask| answer(ask).iter().map(move |s| (ask, s)))
    {
        let Some(node) = s.label("instance").and_then(|i| nodes.get_mut(i)) else {
            continue;
        };
        let count = if s.value.is_finite() {
            s.value.max(0.0) as usize
        } else {
            0
        };
        match ask {
            Ask::Processes => node.processes = count,
            Ask::Alerts => node.alerts_firing = count,
            _ => {
                if let Some(user) = s.label("user") {
                    node.users.push(user.to_string());
                }
            }
        }
    }
    let sm: BTreeMap<(String, String, String), f64> = answer(Ask::TopSm)
        .iter()
        .filter_map(|s| {
            let key = (s.label("instance")?, s.label("gpu")?, s.label("pid")?);
            Some(((key.0.to_string(), key.1.to_string(), key.2.to_string()), s.value))
        })
        .collect();
    let mut top: Vec<FleetProcess> = answer(Ask::Top)
        .iter()
        .filter_map(|s| {
            let instance = s.label("instance")?.to_string();
            let (gpu, pid) = (s.label("gpu")?, s.label("pid")?);
            let key = (instance.clone(), gpu.to_string(), pid.to_string());
            Some(FleetProcess {
                gpu_index: gpu.parse().ok()?,
                pid: pid.parse().ok()?,
                user: s.label("user").map(str::to_string),
                command: s.label("command").map(str::to_string),
                gpu_memory_bytes: bytes(s.value),
                sm_percent: sm.get(&key).map(|r| (r * 100.0).clamp(0.0, 100.0)),
                pod: s.label("pod").map(str::to_string),
                namespace: s.label("namespace").map(str::to_string),
                slurm_job: s.label("slurm_job").map(str::to_string),
                instance,
            })
        })
        .collect();
    top.sort_by(|a, b| {
        b.gpu_memory_bytes
            .cmp(&a.gpu_memory_bytes)
            .then_with(|| a.instance.cmp(&b.instance))
            .then(a.pid.cmp(&b.pid))
    });
    let shares = |key: &str, memory: Ask, gpus: Ask, processes: Ask, node_count: Ask| {
        let mut table: BTreeMap<String, Share> = BTreeMap::new();
        for ask in [memory, gpus, processes, node_count] {
            for s in answer(ask) {
                let Some(name) = s.label(key) else { continue };
                let share = table.entry(name.to_string()).or_insert_with(|| Share {
                    name: name.to_string(),
                    ..Share::default()
                });
                let value = s.value.max(0.0);
                match ask {
                    a if a == memory => share.gpu_memory_bytes = value as u64,
                    a if a == gpus => share.gpus = value as usize,
                    a if a == processes => share.processes = value as usize,
                    _ => share.nodes = value as usize,
                }
            }
        }
        let mut out: Vec<Share> = table.into_values().collect();
        fleet::sort_shares(&mut out);
        out
    };
    let users = shares(
        "user",
        Ask::UserMemory,
        Ask::UserGpus,
        Ask::UserProcesses,
        Ask::UserNodes,
    );
    let namespaces = shares(
        "namespace",
        Ask::NamespaceMemory,
        Ask::NamespaceGpus,
        Ask::NamespaceProcesses,
        Ask::NamespaceNodes,
    );
    let mut fleet = Fleet::new(
        feed,
        taken_at,
        IDLE_LOOKBACK.as_secs(),
        nodes.into_values().collect(),
    );
    fleet.idle_gpus = idle_gpus;
    fleet.top_processes = top;
    fleet.users = users;
    fleet.namespaces = namespaces;
    fleet
}

/// The series a node's drill-down asks, in the order [`node_snapshot`] reads them: the
/// GPUs' identities, every device gauge, then the processes' figures.
fn node_series() -> Vec<&'static str> {
    std::iter::once(catalogue::GPU_INFO)
        .chain(catalogue::DEVICE_GAUGES.iter().map(|g| g.name))
        .chain([
            catalogue::PROCESS_GPU_MEMORY,
            catalogue::PROCESS_SM_UTILIZATION,
            catalogue::PROCESS_CPU,
        ])
        .collect()
}

/// A node's snapshot from its series, in the order [`node_series`] lists them.
fn node_snapshot(instance: &str, answers: &[Vec<Sample>]) -> Snapshot {
    let none = Vec::new();
    let answer = |i: usize| answers.get(i).unwrap_or(&none);
    let gauges = catalogue::DEVICE_GAUGES.len();
    let info = answer(0);
    let (memory, sm, cpu) = (answer(gauges + 1), answer(gauges + 2), answer(gauges + 3));
    let mut devices: BTreeMap<u32, Device> = BTreeMap::new();
    for s in info {
        let Some(index) = gpu_of(s) else { continue };
        let vendor = match s.label("vendor") {
            Some("amd") => Vendor::Amd,
            Some("intel") => Vendor::Intel,
            _ => Vendor::Nvidia,
        };
        let mut d = Device::new(index, vendor);
        let text = |name: &str| {
            s.label(name)
                .map_or(Reading::NotSupported, |v| Reading::Value(v.to_string()))
        };
        d.name = text("name");
        d.uuid = text("uuid");
        d.pci_bus_id = text("pci_bus_id");
        d.driver = text("driver");
        d.driver_version = text("driver_version");
        devices.insert(index, d);
    }
    for (i, gauge) in catalogue::DEVICE_GAUGES.iter().enumerate() {
        for s in answer(i + 1) {
            let Some(index) = gpu_of(s) else { continue };
            // A GPU without an info series (an older exporter) is still shown.
            let d = devices
                .entry(index)
                .or_insert_with(|| Device::new(index, Vendor::Nvidia));
            gauge.import(d, s.value);
        }
    }
    for d in devices.values_mut() {
        // Free is what is neither used nor reserved, where the exporter left it out.
        if let (None, Some(total), Some(used)) = (
            d.memory_free_bytes.get(),
            d.memory_total_bytes.get(),
            d.memory_used_bytes.get(),
        ) {
            let reserved = d.memory_reserved_bytes.get().unwrap_or(0);
            d.memory_free_bytes = Reading::Value(total.saturating_sub(used).saturating_sub(reserved));
        }
    }
    let finite = |s: &Sample| s.value.is_finite().then_some(s.value);
    let mut processes: BTreeMap<(u32, u32), GpuProcess> = BTreeMap::new();
    let key = |s: &Sample| Some((s.label("pid")?.parse::<u32>().ok()?, gpu_of(s)?));
    for s in memory {
        let Some((pid, gpu)) = key(s) else { continue };
        // An exporter older than the `type` label is taken to list compute processes, the
        // only ones it could tell from graphics ones by their SM use.
        let kind = match s.label("type") {
            Some("G") => ProcessType::Graphics,
            Some("C+G") => ProcessType::ComputeGraphics,
            _ => ProcessType::Compute,
        };
        let mut p = GpuProcess::new(pid, gpu, kind);
        p.gpu_memory_bytes = bytes(s.value).map_or(Reading::NotSupported, Reading::Value);
        p.gpu_uuid = s
            .label("uuid")
            .map_or(Reading::NotSupported, |u| Reading::Value(u.to_string()));
        p.host.user = s
            .label("user")
            .map_or(Reading::NotSupported, |u| Reading::Value(u.into()));
        p.host.command = s
            .label("command")
            .map_or(Reading::NotSupported, |c| Reading::Value(c.into()));
        processes.insert((pid, gpu), p);
    }
    for s in sm {
        if let (Some(k), Some(v)) = (key(s), finite(s))
            && let Some(p) = processes.get_mut(&k)
        {
            p.sm_percent = Reading::Value((v * 100.0).round().clamp(0.0, 100.0) as u32);
        }
    }
    for s in cpu {
        if let (Some(k), Some(v)) = (key(s), finite(s))
            && let Some(p) = processes.get_mut(&k)
        {
            p.host.cpu_percent = Reading::Value(v.max(0.0) * 100.0);
        }
    }
    let mut processes: Vec<GpuProcess> = processes.into_values().collect();
    processes.truncate(wire::limits::PROCESSES);
    let mut devices: Vec<Device> = devices.into_values().collect();
    devices.truncate(wire::limits::DEVICES);
    // The header's driver is NVIDIA's, as on the node itself.
    let nvidia_driver = devices
        .iter()
        .find(|d| d.vendor == Vendor::Nvidia)
        .map_or(Reading::NotSupported, |d| d.driver_version.clone());
    let mut snapshot = Snapshot::new(SystemTime::now(), instance.to_string(), devices, processes);
    snapshot.driver_version = nvidia_driver;
    snapshot
}

/// The fleet once (`--once`), or why not.
pub fn once(settings: &Settings) -> Result<Fleet, String> {
    let prometheus = Prometheus::new(settings).map_err(|e| e.to_string())?;
    let runtime = super::http::runtime().map_err(|e| e.to_string())?;
    runtime
        .block_on(prometheus.fleet(true))
        .map_err(|e| e.to_string())
}

/// Whole seconds since `fleet` was had.
fn age(fleet: &Fleet) -> u64 {
    SystemTime::now()
        .duration_since(fleet.taken_at)
        .unwrap_or_default()
        .as_secs()
}

/// Asks Prometheus on its own thread at each interval; dropping it stops it.
#[derive(Debug)]
pub struct Poller {
    _thread: FeedThread,
    open: Arc<Mutex<Option<String>>>,
    wake: Arc<tokio::sync::Notify>,
}

impl Poller {
    /// Starts asking every `interval` (or the targets' scrape interval, if longer);
    /// `publish` gets each fleet and returns false to stop.
    pub fn spawn(
        prometheus: Prometheus,
        interval: Duration,
        mut publish: Box<dyn FnMut(Arc<Fleet>) -> bool + Send>,
    ) -> std::io::Result<Self> {
        let open: Arc<Mutex<Option<String>>> = Arc::default();
        let wake = Arc::new(tokio::sync::Notify::new());
        let (node, woken) = (Arc::clone(&open), Arc::clone(&wake));
        let thread = FeedThread::spawn("gputop-prometheus", move |stop| {
            async move {
                let mut interval = interval;
                if let Some(scrape) = prometheus.scrape_interval().await {
                    interval = interval.max(scrape);
                }
                let mut last: Option<Fleet> = None;
                loop {
                    if stop.asked() {
                        return;
                    }
                    let started = Instant::now();
                    // A slow Prometheus holds no screen: while its answers are awaited, the
                    // last fleet is shown again each second, with its age, once that is over
                    // two intervals.
                    let mut asking = std::pin::pin!(prometheus.fleet(false));
                    let answer = loop {
                        match tokio::time::timeout(Duration::from_secs(1), &mut asking).await {
                            Ok(answer) => break answer,
                            Err(_) if stop.asked() => return,
                            Err(_) => {}
                        }
                        if let Some(old) = &last
                            && age(old) > 2 * interval.as_secs()
                        {
                            let mut waiting = old.clone();
                            waiting.stale_seconds = Some(age(old));
                            waiting.problems = vec!["waiting for Prometheus' answers".into()];
                            if !publish(Arc::new(waiting)) {
                                return;
                            }
                        }
                    };
                    let mut fleet = match answer {
                        Ok(fleet) => fleet,
                        // The last fleet, marked with its age and the reason.
                        Err(why) => match &last {
                            Some(old) => {
                                let mut fleet = old.clone();
                                fleet.stale_seconds = Some(age(old));
                                fleet.problems = vec![format!("no new data: {why}")];
                                fleet
                            }
                            None => {
                                let mut fleet =
                                    Fleet::new(prometheus.feed(), SystemTime::now(), 0, Vec::new());
                                fleet.problems = vec![format!("no data yet: {why}")];
                                fleet.stale_seconds = Some(0);
                                fleet
                            }
                        },
                    };
                    if fleet.stale_seconds.is_none() {
                        last = Some(fleet.clone());
                    }
                    let shown = node.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    if let Some(instance) = shown
                        && let Some(at) = fleet.nodes.iter().position(|n| n.instance == instance)
                    {
                        match prometheus.node(&instance).await {
                            Ok(snapshot) => fleet.nodes[at].snapshot = Some(Arc::new(snapshot)),
                            Err(why) => fleet.problems.push(format!("{instance}: {why}")),
                        }
                    }
                    if !publish(Arc::new(fleet)) {
                        return;
                    }
                    // The next refresh at the interval, or at once when a node is opened; the
                    // stop is looked at every half second.
                    let next = started + interval;
                    loop {
                        let left = next.saturating_duration_since(Instant::now());
                        if left.is_zero() || stop.asked() {
                            break;
                        }
                        if tokio::time::timeout(left.min(Duration::from_millis(500)), woken.notified())
                            .await
                            .is_ok()
                        {
                            break;
                        }
                    }
                }
            }
        })?;
        Ok(Self {
            _thread: thread,
            open,
            wake,
        })
    }

    /// Which node's GPUs and processes to read too (the node open on the screen).
    pub fn open(&self, instance: Option<String>) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = instance;
        self.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(series: &str) -> String {
        format!(r#"{{"status":"success","data":{{"resultType":"vector","result":[{series}]}}}}"#)
    }

    #[test]
    fn answers_are_read_or_refused_with_a_reason() {
        let body = vector(
            r#"{"metric":{"__name__":"up","instance":"a:9835","job":"gputop"},"value":[1.5,"1"]},
               {"metric":{"instance":"b:9835"},"value":[1.5,"NaN"]},
               {"metric":{"instance":"c:9835"},"value":[1.5,"+Inf"]}"#,
        );
        let samples = parse_answer(body.as_bytes()).unwrap();
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0].label("instance"), Some("a:9835"));
        assert!(!samples[0].labels.contains_key("__name__"));
        assert!(samples[1].value.is_nan() && samples[2].value.is_infinite());
        let scalar = r#"{"status":"success","data":{"resultType":"scalar","result":[1.5,"42"]}}"#;
        assert_eq!(parse_answer(scalar.as_bytes()).unwrap()[0].value, 42.0);
        let reason = |body: &str| parse_answer(body.as_bytes()).unwrap_err().to_string();
        assert_eq!(
            reason("<html><body>Sign in</body></html>"),
            "not a Prometheus answer (an HTML page: a proxy or a login in the way?)"
        );
        assert_eq!(
            reason(&body[..body.len() / 2]),
            "not a Prometheus answer (the answer ends early)"
        );
        assert_eq!(
            reason(r#"{"status":"error","errorType":"bad_data","error":"parse error at char 5"}"#),
            "Prometheus: parse error at char 5"
        );
        assert!(reason(&vector(r#"{"metric":{},"value":[1,"x"]}"#)).contains("'x' is not a number"));
        let matrix = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(reason(matrix).contains("a matrix where an instant vector was asked"));
        let many = vec![r#"{"metric":{},"value":[1,"1"]}"#; MAX_SERIES + 1].join(",");
        assert_eq!(
            reason(&vector(&many)),
            format!("more than {MAX_SERIES} series in one answer")
        );
        let long = "x".repeat(LABEL_MAX * 2);
        let samples =
            parse_answer(vector(&format!(r#"{{"metric":{{"user":"{long}"}},"value":[1,"1"]}}"#)).as_bytes());
        assert_eq!(samples.unwrap()[0].labels["user"].len(), LABEL_MAX);
    }

    #[test]
    fn selectors_are_taken_with_or_without_braces_and_broken_ones_refused() {
        assert_eq!(
            parse_selector(r#"{job="gputop",cluster="a"}"#).unwrap(),
            r#"job="gputop",cluster="a""#
        );
        assert_eq!(parse_selector(r#"job=~"gpu.*""#).unwrap(), r#"job=~"gpu.*""#);
        assert_eq!(parse_selector("{}").unwrap(), "");
        assert_eq!(parse_selector(r#"{job="a}b"}"#).unwrap(), r#"job="a}b""#);
        for bad in [
            r#"{job="gputop"#,
            r#"{job="a"}) or vector(1"#,
            "gputop",
            "{a=\"b\"}{",
        ] {
            assert!(parse_selector(bad).is_err(), "{bad}");
        }
        assert_eq!(quoted(r#"a"b\c"#), r#""a\"b\\c""#);
        let top = [
            sample(&[("instance", "gpu-1.lab:9835"), ("pid", "7")], 1.0),
            sample(&[("instance", "gpu-2.lab:9835"), ("pid", "42")], 1.0),
            sample(&[("instance", "gpu-1.lab:9835"), ("pid", "42")], 1.0),
        ];
        assert_eq!(
            sm_of_top(r#"job="gputop""#, &top).unwrap(),
            r#"gputop_process_sm_utilization_ratio{job="gputop",instance=~"gpu-1\\.lab:9835|gpu-2\\.lab:9835",pid=~"42|7"}"#
        );
        assert_eq!(sm_of_top("", &[]), None);
        assert_eq!(encoded("up{a=\"b c\"}"), "up%7Ba%3D%22b%20c%22%7D");
    }

    fn sample(labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value,
        }
    }

    #[test]
    fn a_refresh_becomes_nodes_gpus_idle_times_top_processes_and_users() {
        let mut got = BTreeMap::new();
        got.insert(
            Ask::Up,
            vec![
                sample(&[("instance", "a:9835"), ("job", "gputop"), ("rack", "r1")], 1.0),
                sample(&[("instance", "b:9835"), ("job", "gputop")], 0.0),
            ],
        );
        got.insert(
            Ask::Utilization,
            vec![
                sample(&[("instance", "a:9835"), ("gpu", "0")], 0.5),
                sample(&[("instance", "a:9835"), ("gpu", "1")], 0.0),
                sample(&[("instance", "a:9835"), ("gpu", "2")], 0.0),
            ],
        );
        got.insert(
            Ask::MemoryUsed,
            vec![sample(&[("instance", "a:9835"), ("gpu", "0")], 1e9)],
        );
        got.insert(Ask::Processes, vec![sample(&[("instance", "a:9835")], 3.0)]);
        got.insert(
            Ask::Top,
            vec![sample(
                &[
                    ("instance", "a:9835"),
                    ("gpu", "0"),
                    ("pid", "42"),
                    ("user", "alice"),
                    ("namespace", "ml"),
                ],
                1e9,
            )],
        );
        got.insert(
            Ask::TopSm,
            vec![sample(
                &[("instance", "a:9835"), ("gpu", "0"), ("pid", "42")],
                0.25,
            )],
        );
        got.insert(Ask::UserMemory, vec![sample(&[("user", "alice")], 1e9)]);
        got.insert(Ask::UserNodes, vec![sample(&[("user", "alice")], 1.0)]);
        got.insert(
            Ask::IdleMemory,
            vec![
                sample(&[("instance", "a:9835"), ("gpu", "1")], 0.0),
                sample(&[("instance", "a:9835"), ("gpu", "2")], 5e8),
            ],
        );
        let idle = BTreeMap::from([(("a:9835".to_string(), 1), 600)]);
        let fleet = build("prometheus x".into(), SystemTime::UNIX_EPOCH, &got, &idle, true);
        assert_eq!(
            (
                fleet.summary.nodes_up,
                fleet.summary.nodes_down,
                fleet.summary.gpus
            ),
            (1, 1, 3)
        );
        assert_eq!(fleet.summary.gpus_idle, 2);
        assert_eq!(
            fleet.nodes[0].labels,
            BTreeMap::from([("rack".to_string(), "r1".to_string())])
        );
        let idle: Vec<(u32, Option<u64>, Option<u64>)> = fleet
            .idle_gpus
            .iter()
            .map(|g| (g.gpu_index, g.idle_seconds, g.memory_used_bytes))
            .collect();
        assert_eq!(
            idle,
            [(2, Some(3600), Some(500_000_000)), (1, Some(600), Some(0))],
            "not busy within the lookback: at least an hour"
        );
        // The live screen's read: each node's totals from Prometheus' sums, no GPU one by one.
        let mut totals = BTreeMap::new();
        totals.insert(Ask::Up, got[&Ask::Up].clone());
        totals.insert(Ask::NodeGpus, vec![sample(&[("instance", "a:9835")], 3.0)]);
        totals.insert(Ask::NodeIdle, vec![sample(&[("instance", "a:9835")], 2.0)]);
        totals.insert(Ask::NodeMemoryUsed, vec![sample(&[("instance", "a:9835")], 1e9)]);
        totals.insert(
            Ask::NodeMemoryTotal,
            vec![sample(&[("instance", "a:9835")], 2.4e11)],
        );
        totals.insert(
            Ask::NodeUtilization,
            vec![sample(&[("instance", "a:9835")], 1.0 / 6.0)],
        );
        let live = build(
            "prometheus x".into(),
            SystemTime::UNIX_EPOCH,
            &totals,
            &BTreeMap::new(),
            false,
        );
        let a = &live.nodes[0];
        assert_eq!(
            (a.gpus, a.gpus_idle, a.memory_used_bytes, a.devices.len()),
            (3, 2, 1_000_000_000, 0)
        );
        assert!((a.utilization_percent.unwrap() - 16.67).abs() < 0.01);
        assert_eq!((live.summary.gpus, live.summary.gpus_idle), (3, 2));
        let top = &fleet.top_processes[0];
        assert_eq!(
            (top.pid, top.sm_percent, top.namespace.as_deref()),
            (42, Some(25.0), Some("ml"))
        );
        assert_eq!(fleet.users[0].name, "alice");
        assert_eq!(
            (fleet.users[0].nodes, fleet.users[0].gpu_memory_bytes),
            (1, 1_000_000_000)
        );
        assert_eq!(fleet.summary.processes, 3);
    }

    #[test]
    fn a_node_snapshot_is_made_of_its_series() {
        let gpu = |value: f64| vec![sample(&[("gpu", "0")], value)];
        let answers: Vec<Vec<Sample>> = node_series()
            .into_iter()
            .map(|name| match name {
                catalogue::GPU_INFO => vec![sample(
                    &[
                        ("gpu", "0"),
                        ("name", "NVIDIA H100"),
                        ("vendor", "nvidia"),
                        ("uuid", "GPU-1"),
                        ("driver_version", "550.54.15"),
                    ],
                    1.0,
                )],
                "gputop_gpu_utilization_ratio" => gpu(0.75),
                "gputop_gpu_memory_used_bytes" => gpu(2e9),
                "gputop_gpu_memory_total_bytes" => gpu(8e9),
                "gputop_gpu_temperature_celsius" => gpu(61.0),
                "gputop_gpu_power_watts" => gpu(300.0),
                "gputop_gpu_power_limit_watts" => gpu(700.0),
                "gputop_gpu_fan_speed_ratio" => gpu(f64::NAN),
                catalogue::PROCESS_GPU_MEMORY => vec![sample(
                    &[("gpu", "0"), ("pid", "7"), ("type", "C+G"), ("user", "bob")],
                    1e9,
                )],
                catalogue::PROCESS_SM_UTILIZATION => vec![sample(&[("gpu", "0"), ("pid", "7")], 0.5)],
                catalogue::PROCESS_CPU => vec![sample(&[("gpu", "0"), ("pid", "7")], 1.5)],
                _ => Vec::new(),
            })
            .collect();
        let snapshot = node_snapshot("a:9835", &answers);
        let d = &snapshot.devices[0];
        assert_eq!(d.utilization_gpu_percent, Reading::Value(75));
        assert_eq!(
            d.memory().get().map(|m| (m.used, m.free)),
            Some((2_000_000_000, 6_000_000_000))
        );
        assert_eq!(d.fan_speed_percent, Reading::NotSupported, "NaN is not a reading");
        assert_eq!(d.driver_version.value().map(String::as_str), Some("550.54.15"));
        assert_eq!(snapshot.driver_version, d.driver_version, "the header's driver");
        let p = &snapshot.processes[0];
        assert_eq!(p.kind, ProcessType::ComputeGraphics);
        assert_eq!(
            (p.pid, p.sm_percent.get(), p.host.user.as_deref()),
            (7, Some(50), Some("bob"))
        );
        assert_eq!(p.host.cpu_percent, Reading::Value(150.0));
    }
}

//! Remote nodes: `gputop --remote` reads other machines' `gputop export` through their
//! `/snapshot` (the `--once --json` document) over HTTP or HTTPS ([`super::http`]). One
//! thread runs a task per node on its own runtime (a slow node never delays another); every
//! fetch has one deadline for connecting, the answer's head and its body, and a size cap;
//! what a node sends is bounded and checked by the wire form's reader; a node that fails is
//! retried with exponential backoff. Each change is published as a whole [`Fleet`], and again
//! as a node's data grows older than its interval.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Deserialize;

use super::http::{AddressError, Client, Endpoint, FeedThread, HttpError, TlsFiles};
use crate::model::fleet::{self, Fleet, FleetNode, NodeState};
use crate::model::{Snapshot, wire};

/// Nodes watched at most.
pub const MAX_NODES: usize = 512;
/// The most one fetch may take, from connecting to the answer's last byte.
pub const FETCH_DEADLINE: Duration = Duration::from_secs(5);
/// Largest `/snapshot` accepted.
pub const BODY_MAX: usize = 16 << 20;
/// Longest wait between retries of a node that does not answer.
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// The fleet is made again at most this often while outcomes arrive.
const PUBLISH_EVERY: Duration = Duration::from_millis(200);
/// The port of `gputop export`, for an address without one.
pub const EXPORTER_PORT: u16 = 9835;

/// Why a hosts file is not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostsError {
    /// A line of a hosts file, numbered from 1.
    #[error("line {line}: {error}")]
    Line {
        /// The line.
        line: usize,
        /// What is wrong with it.
        error: AddressError,
    },
    /// More nodes than [`MAX_NODES`].
    #[error("{0} nodes: gputop watches at most {MAX_NODES}")]
    TooMany(usize),
}

/// Why a node's `/snapshot` was not had ([`fetch`]).
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// No answer, or not a 200.
    #[error(transparent)]
    Http(#[from] HttpError),
    /// Not JSON of a snapshot.
    #[error("not a gputop snapshot: {0}")]
    NotASnapshot(serde_json::Error),
    /// A snapshot of another version.
    #[error("not a gputop report of version {}", wire::VERSION)]
    Version,
    /// A snapshot with a value gputop does not accept.
    #[error("{0}")]
    Refused(#[from] wire::WireError),
    /// The client could not be set up (TLS).
    #[error("{0}")]
    Setup(String),
}

/// A node's address: `http[s]://host:port[/]`, `host:port` or `host` (port 9835).
pub fn parse_node(text: &str) -> Result<Endpoint, AddressError> {
    Endpoint::parse(text, EXPORTER_PORT)
}

/// Nodes from a hosts file: one address per line; `#` starts a comment.
pub fn parse_hosts_file(text: &str) -> Result<Vec<Endpoint>, HostsError> {
    let nodes: Vec<Endpoint> = text
        .lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let line = line.split('#').next().unwrap_or("").trim();
            (!line.is_empty())
                .then(|| parse_node(line).map_err(|error| HostsError::Line { line: i + 1, error }))
        })
        .collect::<Result<_, _>>()?;
    if nodes.len() > MAX_NODES {
        return Err(HostsError::TooMany(nodes.len()));
    }
    Ok(nodes)
}

/// A client for a node's exporter: the system's trust store for https, the fetch deadline
/// and size cap.
pub fn client(node: Endpoint) -> Result<Client, super::http::SetupError> {
    Client::new(node, &TlsFiles::default(), None, FETCH_DEADLINE, BODY_MAX)
}

/// A node's `/snapshot` and its firing alerts, or why not, within [`FETCH_DEADLINE`].
pub async fn fetch(client: &Client) -> Result<(Snapshot, usize), FetchError> {
    let body = client.get("/snapshot").await?;
    if wire::version_of(&body).map_err(FetchError::NotASnapshot)? != wire::VERSION {
        return Err(FetchError::Version);
    }
    let snapshot: Snapshot = serde_json::from_slice(&body).map_err(FetchError::NotASnapshot)?;
    // Read apart from the snapshot: a flattened struct would be buffered whole, unbounded,
    // before the snapshot's own limits apply.
    let alerts: NodeAlerts = serde_json::from_slice(&body).map_err(FetchError::NotASnapshot)?;
    let firing = alerts.alerts.iter().filter(|a| a.state == "firing").count();
    // The reason is shown sanitized, as everything from outside, where it is drawn.
    Ok((snapshot.from_wire(SystemTime::now())?, firing))
}

/// Most alerts read of a node's `/snapshot`.
const MAX_ALERTS: usize = 4096;

/// The alerts of a node's `/snapshot`.
#[derive(Deserialize)]
struct NodeAlerts {
    #[serde(default, deserialize_with = "wire::bounded::<MAX_ALERTS, _, _>")]
    alerts: Vec<NodeAlert>,
}

#[derive(Deserialize)]
struct NodeAlert {
    state: String,
}

/// What the poller knows of one node.
#[derive(Debug, Clone)]
struct Watched {
    node: Endpoint,
    state: NodeState,
    snapshot: Option<Arc<Snapshot>>,
    alerts: usize,
    last_ok: Option<SystemTime>,
    /// When each GPU was last seen busy (or first seen).
    last_busy: BTreeMap<u32, SystemTime>,
}

impl Watched {
    fn new(node: Endpoint) -> Self {
        Self {
            node,
            state: NodeState::Waiting,
            snapshot: None,
            alerts: 0,
            last_ok: None,
            last_busy: BTreeMap::new(),
        }
    }

    /// Takes a fetch's outcome; returns the failures in a row since the last success.
    fn take(&mut self, outcome: Result<(Snapshot, usize), FetchError>, now: SystemTime) -> u32 {
        match outcome {
            Ok((snapshot, alerts)) => {
                for gpu in FleetNode::devices_of(&snapshot) {
                    let entry = self.last_busy.entry(gpu.index).or_insert(now);
                    if !gpu.is_idle() {
                        *entry = now;
                    }
                }
                self.state = NodeState::Up;
                self.snapshot = Some(Arc::new(snapshot));
                self.alerts = alerts;
                self.last_ok = Some(now);
                0
            }
            Err(reason) => {
                let failures = match &self.state {
                    NodeState::Down { failures, .. } => failures.unwrap_or(0) + 1,
                    _ => 1,
                };
                self.state = NodeState::Down {
                    reason: reason.to_string(),
                    failures: Some(failures),
                };
                failures
            }
        }
    }

    /// Whole seconds since its latest snapshot, once that is longer than the interval.
    fn age(&self, interval: Duration, now: SystemTime) -> Option<u64> {
        self.last_ok
            .and_then(|at| now.duration_since(at).ok())
            .filter(|age| *age > interval.max(Duration::from_secs(1)))
            .map(|age| age.as_secs())
    }

    fn fleet_node(&self, interval: Duration, now: SystemTime) -> FleetNode {
        let mut node = FleetNode::new(self.node.label(), self.state.clone());
        node.stale_seconds = self.age(interval, now);
        if let Some(snapshot) = &self.snapshot {
            node.hostname = Some(snapshot.hostname.clone());
            node.alerts_firing = self.alerts;
            node.processes = snapshot.processes.len();
            let users: std::collections::BTreeSet<&str> = snapshot
                .processes
                .iter()
                .filter_map(|p| p.host.user.as_deref())
                .collect();
            node.users = users
                .into_iter()
                .take(fleet::TOP_SHARES)
                .map(str::to_owned)
                .collect();
            let mut devices = FleetNode::devices_of(snapshot);
            for gpu in devices.iter_mut().filter(|g| g.is_idle()) {
                gpu.idle_seconds = self
                    .last_busy
                    .get(&gpu.index)
                    .and_then(|at| now.duration_since(*at).ok())
                    .map(|d| d.as_secs());
            }
            node.set_devices(devices);
            node.snapshot = Some(Arc::clone(snapshot));
        }
        node
    }
}

/// The fleet of the watched nodes as of `now`; idle times reach back to `started`.
fn fleet_of(watched: &[Watched], interval: Duration, started: SystemTime, now: SystemTime) -> Fleet {
    let nodes: Vec<FleetNode> = watched.iter().map(|w| w.fleet_node(interval, now)).collect();
    let lookback = now.duration_since(started).unwrap_or_default().as_secs();
    let mut fleet = Fleet::new("nodes".into(), now, lookback, nodes);
    fleet.list_idle_gpus();
    fleet.top_processes = fleet::top_processes(&fleet.nodes);
    fleet.users = fleet::shares_of(&fleet.nodes, |p| p.host.user.as_deref().map(str::to_owned));
    fleet.namespaces = fleet::shares_of(&fleet.nodes, |p| {
        p.host
            .container
            .as_ref()
            .and_then(|c| c.names.as_ref())
            .map(|names| names.namespace.clone())
    });
    fleet
}

/// Every node asked once, at the same time: the fleet `--once` reports.
pub fn once(nodes: Vec<Endpoint>) -> std::io::Result<Fleet> {
    let runtime = super::http::runtime()?;
    let started = SystemTime::now();
    let mut watched: Vec<Watched> = nodes.into_iter().map(Watched::new).collect();
    let outcomes = runtime.block_on(async {
        let tasks: Vec<_> = watched
            .iter()
            .map(|w| {
                let node = w.node.clone();
                tokio::spawn(async move { fetch_node(node).await })
            })
            .collect();
        let mut outcomes = Vec::with_capacity(tasks.len());
        for task in tasks {
            outcomes.push(task.await.ok());
        }
        outcomes
    });
    let now = SystemTime::now();
    for (w, outcome) in watched.iter_mut().zip(outcomes) {
        if let Some(outcome) = outcome {
            w.take(outcome, now);
        }
    }
    Ok(fleet_of(&watched, FETCH_DEADLINE, started, now))
}

async fn fetch_node(node: Endpoint) -> Result<(Snapshot, usize), FetchError> {
    let client = client(node).map_err(|e| FetchError::Setup(e.to_string()))?;
    fetch(&client).await
}

/// Polls the nodes on its own thread; dropping it stops them.
#[derive(Debug)]
pub struct Poller {
    _thread: FeedThread,
}

impl Poller {
    /// Starts polling every `interval`; `publish` gets the whole fleet after each change and
    /// returns false to stop.
    pub fn spawn(
        nodes: Vec<Endpoint>,
        interval: Duration,
        mut publish: Box<dyn FnMut(Arc<Fleet>) -> bool + Send>,
    ) -> std::io::Result<Self> {
        let thread = FeedThread::spawn("gputop-remote", move |stop| {
            async move {
                let started = SystemTime::now();
                let (results, mut outcomes) = tokio::sync::mpsc::unbounded_channel();
                let count = nodes.len().max(1) as u32;
                for (index, node) in nodes.iter().enumerate() {
                    let (node, results) = (node.clone(), results.clone());
                    // Staggered first fetches, so fifty nodes are not asked in the same instant.
                    let first = interval.mul_f64(f64::from(index as u32) / f64::from(count)) / 4;
                    tokio::spawn(async move {
                        tokio::time::sleep(first).await;
                        let client = client(node).map_err(|e| e.to_string());
                        let mut failures = 0;
                        loop {
                            let outcome = match &client {
                                Ok(client) => fetch(client).await,
                                Err(why) => Err(FetchError::Setup(why.clone())),
                            };
                            failures = if outcome.is_ok() { 0 } else { failures + 1 };
                            if results.send((index, outcome)).is_err() {
                                return;
                            }
                            let wait = if failures == 0 {
                                interval
                            } else {
                                backoff(interval, failures)
                            };
                            tokio::time::sleep(wait).await;
                        }
                    });
                }
                drop(results);
                let mut watched: Vec<Watched> = nodes.into_iter().map(Watched::new).collect();
                let mut shown_ages = Vec::new();
                // Outcomes arrive one node at a time: the fleet is made again at most every
                // PUBLISH_EVERY, with all that arrived meanwhile.
                let (mut dirty, mut published) = (false, None::<std::time::Instant>);
                loop {
                    if stop.asked() {
                        return;
                    }
                    let since = published.map_or(PUBLISH_EVERY, |at| at.elapsed());
                    let wait = if dirty {
                        PUBLISH_EVERY.saturating_sub(since)
                    } else {
                        Duration::from_millis(500)
                    };
                    match tokio::time::timeout(wait, outcomes.recv()).await {
                        Ok(Some((index, outcome))) => {
                            watched[index].take(outcome, SystemTime::now());
                            while let Ok((index, outcome)) = outcomes.try_recv() {
                                watched[index].take(outcome, SystemTime::now());
                            }
                            dirty = true;
                        }
                        Ok(None) => return,
                        Err(_) => {}
                    }
                    // Data growing older than the interval is news too.
                    let now = SystemTime::now();
                    let ages: Vec<Option<u64>> = watched.iter().map(|w| w.age(interval, now)).collect();
                    dirty |= ages != shown_ages;
                    if dirty && published.is_none_or(|at| at.elapsed() >= PUBLISH_EVERY) {
                        shown_ages = ages;
                        (dirty, published) = (false, Some(std::time::Instant::now()));
                        if !publish(Arc::new(fleet_of(&watched, interval, started, now))) {
                            return;
                        }
                    }
                }
            }
        })?;
        Ok(Self { _thread: thread })
    }
}

/// The wait before retrying a node after `failures` failures in a row.
pub fn backoff(interval: Duration, failures: u32) -> Duration {
    interval
        .saturating_mul(1 << failures.min(6))
        .min(BACKOFF_MAX)
        .max(interval)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_hosts_files() {
        assert_eq!(parse_node("http://gpu-01:9835/").unwrap().label(), "gpu-01:9835");
        assert_eq!(parse_node("gpu-02").unwrap().port, 9835);
        assert_eq!(parse_node("10.0.0.7:9900").unwrap().port, 9900);
        assert!(parse_node("https://x").unwrap().tls);
        assert!(parse_node("gpu:port").is_err());
        let nodes = parse_hosts_file("# lab\ngpu-01:9835\n\n  gpu-02  # spare\n").unwrap();
        assert_eq!(nodes.len(), 2);
        assert!(
            parse_hosts_file("ok\nbad:xx\n")
                .unwrap_err()
                .to_string()
                .starts_with("line 2:")
        );
    }

    #[test]
    fn backoff_doubles_up_to_a_minute() {
        let second = Duration::from_secs(1);
        assert_eq!(backoff(second, 1), Duration::from_secs(2));
        assert_eq!(backoff(second, 3), Duration::from_secs(8));
        assert_eq!(backoff(second, 20), BACKOFF_MAX);
    }
}

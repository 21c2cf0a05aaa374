//! Remote nodes: `gputop --remote` reads other machines' `gputop export` through their
//! `/snapshot` (the `--once --json` document) over plain HTTP. A poller thread schedules
//! the nodes, with a fetch worker per node (a slow node never delays another); every fetch
//! has one deadline for connecting, the answer's head and its body, and a size cap; what
//! a node sends is bounded and checked by the wire form's reader; a node that fails is
//! retried with exponential backoff. Each change is published as a whole [`Cluster`], and
//! again as a node's data grows older than its interval.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

use crate::model::Snapshot;
use serde::Deserialize;

use crate::model::wire;

/// Nodes watched at most (a fetch worker each).
pub const MAX_NODES: usize = 512;
/// The most one fetch may take, from connecting to the answer's last byte.
pub const FETCH_DEADLINE: Duration = Duration::from_secs(5);
/// Largest `/snapshot` accepted.
pub const BODY_MAX: usize = 16 << 20;
/// Longest wait between retries of a node that does not answer.
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// Why a node's address, or a hosts file, is not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// An `https://` address: the remote view speaks plain HTTP.
    #[error("{0}: https is not supported; use http:// (or a TLS-terminating proxy)")]
    Https(String),
    /// Not `host:port`.
    #[error("'{0}' is not a node address (host:port)")]
    NotAnAddress(String),
    /// A port that is not a number from 0 to 65535.
    #[error("'{0}': the port must be a number")]
    Port(String),
    /// A line of a hosts file, numbered from 1.
    #[error("line {line}: {error}")]
    Line {
        /// The line.
        line: usize,
        /// What is wrong with it.
        error: Box<AddressError>,
    },
    /// More nodes than [`MAX_NODES`].
    #[error("{0} nodes: gputop watches at most {MAX_NODES}")]
    TooMany(usize),
}

/// Why a node's `/snapshot` was not had ([`fetch`]).
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// Its name did not resolve.
    #[error("cannot resolve: {0}")]
    Resolve(std::io::Error),
    /// Its name resolved to no address.
    #[error("cannot resolve")]
    NoAddress,
    /// The connection failed.
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    /// The request could not be sent.
    #[error("cannot send: {0}")]
    Send(std::io::Error),
    /// The answer could not be read.
    #[error("cannot read: {0}")]
    Read(std::io::Error),
    /// The socket could not be set up.
    #[error("{0}")]
    Socket(std::io::Error),
    /// No whole answer within [`FETCH_DEADLINE`].
    #[error("no whole answer within {} s", FETCH_DEADLINE.as_secs())]
    Late,
    /// An answer over [`BODY_MAX`].
    #[error("answer larger than {} MiB", BODY_MAX >> 20)]
    TooLarge,
    /// Not HTTP.
    #[error("not an HTTP answer")]
    NotHttp,
    /// An HTTP status other than 200.
    #[error("answered HTTP {0}")]
    Status(String),
    /// Not JSON of a snapshot.
    #[error("not a gputop snapshot: {0}")]
    NotASnapshot(serde_json::Error),
    /// A snapshot of another version.
    #[error("not a gputop report of version {}", wire::VERSION)]
    Version,
    /// A snapshot with a value gputop does not accept.
    #[error("{0}")]
    Refused(#[from] wire::WireError),
}

/// A node to watch: `host:port` of its `gputop export`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The host name or address.
    pub host: String,
    /// The port `gputop export` listens on.
    pub port: u16,
}

impl Node {
    /// `http://host:port[/...]`, `host:port` or `host` (port 9835).
    pub fn parse(text: &str) -> Result<Self, AddressError> {
        let trimmed = text.trim();
        if trimmed.starts_with("https://") {
            return Err(AddressError::Https(trimmed.to_string()));
        }
        let rest = trimmed.strip_prefix("http://").unwrap_or(trimmed);
        let authority = rest.split('/').next().unwrap_or("");
        if authority.is_empty() || authority.contains(char::is_whitespace) {
            return Err(AddressError::NotAnAddress(trimmed.to_string()));
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => {
                let port = port
                    .parse::<u16>()
                    .map_err(|_| AddressError::Port(trimmed.to_string()))?;
                (host.trim_matches(['[', ']']).to_string(), port)
            }
            _ => (authority.to_string(), 9835),
        };
        Ok(Self { host, port })
    }

    /// `host:port`, as the view names the node.
    pub fn label(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Nodes from a hosts file: one address per line; `#` starts a comment.
pub fn parse_hosts_file(text: &str) -> Result<Vec<Node>, AddressError> {
    let nodes: Vec<Node> = text
        .lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let line = line.split('#').next().unwrap_or("").trim();
            (!line.is_empty()).then(|| {
                Node::parse(line).map_err(|e| AddressError::Line {
                    line: i + 1,
                    error: Box::new(e),
                })
            })
        })
        .collect::<Result<_, _>>()?;
    if nodes.len() > MAX_NODES {
        return Err(AddressError::TooMany(nodes.len()));
    }
    Ok(nodes)
}

/// Where a node stands.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeStatus {
    /// Not asked yet.
    Waiting,
    /// Its latest fetch succeeded.
    Up,
    /// The last fetch failed; it is tried again after a wait that grows with each failure, up
    /// to [`BACKOFF_MAX`].
    Down {
        /// Why the last fetch failed.
        reason: String,
        /// Fetches failed in a row.
        failures: u32,
    },
}

/// One node and what it last said.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeState {
    /// The node.
    pub node: Node,
    /// Where it stands.
    pub status: NodeStatus,
    /// The latest snapshot it sent (kept while it is down, marked stale by the status).
    pub snapshot: Option<Arc<Snapshot>>,
    /// Firing alerts in its latest report.
    pub alerts: usize,
    /// When its latest snapshot arrived.
    pub last_ok: Option<SystemTime>,
    /// Whole seconds since that snapshot arrived, once that is longer than the interval
    /// (`None` while it is fresh, or there is none).
    pub stale_seconds: Option<u64>,
}

/// Every node, in the order given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cluster {
    /// Each node's state.
    pub nodes: Vec<NodeState>,
}

/// A node's `/snapshot`, or why not, within [`FETCH_DEADLINE`].
pub fn fetch(node: &Node) -> Result<(Snapshot, usize), FetchError> {
    let deadline = Instant::now() + FETCH_DEADLINE;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or(FetchError::Late)
    };
    let address = (node.host.as_str(), node.port)
        .to_socket_addrs()
        .map_err(FetchError::Resolve)?
        .next()
        .ok_or(FetchError::NoAddress)?;
    let mut stream = TcpStream::connect_timeout(&address, left()?).map_err(FetchError::Connect)?;
    stream
        .set_write_timeout(Some(left()?))
        .map_err(FetchError::Socket)?;
    let request = format!(
        "GET /snapshot HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nConnection: close\r\n\r\n",
        node.label()
    );
    stream.write_all(request.as_bytes()).map_err(FetchError::Send)?;
    let mut response = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        // Each read waits only for what is left of the deadline: a node sending a byte at a
        // time cannot stretch the fetch.
        stream
            .set_read_timeout(Some(left()?))
            .map_err(FetchError::Socket)?;
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(FetchError::Late);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(FetchError::Read(e)),
        };
        if n == 0 {
            break;
        }
        if response.len() + n > BODY_MAX {
            return Err(FetchError::TooLarge);
        }
        response.extend_from_slice(&chunk[..n]);
    }
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or(FetchError::NotHttp)?;
    let head = String::from_utf8_lossy(&response[..split]);
    let status = head.split(' ').nth(1).unwrap_or("");
    if status != "200" {
        return Err(FetchError::Status(status.to_string()));
    }
    let body = &response[split + 4..];
    if wire::version_of(body).map_err(FetchError::NotASnapshot)? != wire::VERSION {
        return Err(FetchError::Version);
    }
    let snapshot: Snapshot = serde_json::from_slice(body).map_err(FetchError::NotASnapshot)?;
    // Read apart from the snapshot: a flattened struct would be buffered whole, unbounded,
    // before the snapshot's own limits apply.
    let alerts: NodeAlerts = serde_json::from_slice(body).map_err(FetchError::NotASnapshot)?;
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

/// Polls the nodes on its own threads; dropping it stops them.
#[derive(Debug)]
pub struct Poller {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

type Job = usize;
type Outcome = (usize, Result<(Snapshot, usize), FetchError>);

impl Poller {
    /// Starts polling every `interval`; `publish` gets the whole cluster after each change
    /// and returns false to stop.
    pub fn spawn(
        nodes: Vec<Node>,
        interval: Duration,
        mut publish: Box<dyn FnMut(Arc<Cluster>) -> bool + Send>,
    ) -> std::io::Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = thread::Builder::new()
            .name("gputop-remote".into())
            .spawn(move || {
                // A worker per node: at most one fetch per node is in flight, so a node that
                // hangs until its deadline holds up no other.
                let workers = nodes.len().clamp(1, MAX_NODES);
                let (jobs, queue) = mpsc::channel::<Job>();
                let queue = Arc::new(Mutex::new(queue));
                let (results, outcomes) = mpsc::channel::<Outcome>();
                let shared_nodes = Arc::new(nodes.clone());
                for n in 0..workers {
                    let (queue, results, nodes) =
                        (Arc::clone(&queue), results.clone(), Arc::clone(&shared_nodes));
                    let _ = thread::Builder::new()
                        .name(format!("gputop-fetch-{n}"))
                        .spawn(move || {
                            loop {
                                let job = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
                                let Ok(index) = job else { return };
                                if results.send((index, fetch(&nodes[index]))).is_err() {
                                    return;
                                }
                            }
                        });
                }
                let mut cluster = Cluster {
                    nodes: nodes
                        .into_iter()
                        .map(|node| NodeState {
                            node,
                            status: NodeStatus::Waiting,
                            snapshot: None,
                            alerts: 0,
                            last_ok: None,
                            stale_seconds: None,
                        })
                        .collect(),
                };
                let now = Instant::now();
                // Staggered first fetches, so fifty nodes are not asked in the same instant.
                let count = cluster.nodes.len().max(1) as u32;
                let mut due: Vec<Option<Instant>> = (0..cluster.nodes.len())
                    .map(|i| Some(now + interval.mul_f64(f64::from(i as u32) / f64::from(count)) / 4))
                    .collect();
                loop {
                    let now = Instant::now();
                    for (index, slot) in due.iter_mut().enumerate() {
                        if slot.is_some_and(|at| at <= now) {
                            *slot = None; // in flight
                            if jobs.send(index).is_err() {
                                return;
                            }
                        }
                    }
                    let next = due.iter().flatten().min().copied();
                    let wait = next.map_or(interval, |at| at.saturating_duration_since(Instant::now()));
                    match stopped.try_recv() {
                        Err(mpsc::TryRecvError::Empty) => {}
                        _ => return,
                    }
                    match outcomes.recv_timeout(wait.min(Duration::from_millis(500))) {
                        Ok((index, outcome)) => {
                            let state = &mut cluster.nodes[index];
                            let again = match outcome {
                                Ok((snapshot, alerts)) => {
                                    state.status = NodeStatus::Up;
                                    state.snapshot = Some(Arc::new(snapshot));
                                    state.alerts = alerts;
                                    state.last_ok = Some(SystemTime::now());
                                    interval
                                }
                                Err(reason) => {
                                    let failures = match &state.status {
                                        NodeStatus::Down { failures, .. } => failures + 1,
                                        _ => 1,
                                    };
                                    state.status = NodeStatus::Down {
                                        reason: reason.to_string(),
                                        failures,
                                    };
                                    backoff(interval, failures)
                                }
                            };
                            due[index] = Some(Instant::now() + again);
                            if !publish(Arc::new(cluster.clone())) {
                                return;
                            }
                        }
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                    // Data growing older than the interval is news too.
                    if age_nodes(&mut cluster, interval, SystemTime::now())
                        && !publish(Arc::new(cluster.clone()))
                    {
                        return;
                    }
                }
            })?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// Sets each node's [`NodeState::stale_seconds`] as of `now`; returns whether any changed.
pub fn age_nodes(cluster: &mut Cluster, interval: Duration, now: SystemTime) -> bool {
    let mut changed = false;
    for node in &mut cluster.nodes {
        let age = node
            .last_ok
            .and_then(|at| now.duration_since(at).ok())
            .filter(|age| *age > interval.max(Duration::from_secs(1)))
            .map(|age| age.as_secs());
        changed |= node.stale_seconds != age;
        node.stale_seconds = age;
    }
    changed
}

/// The wait before retrying a node after `failures` failures in a row.
pub fn backoff(interval: Duration, failures: u32) -> Duration {
    interval
        .saturating_mul(1 << failures.min(6))
        .min(BACKOFF_MAX)
        .max(interval)
}

impl Drop for Poller {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_hosts_files() {
        assert_eq!(
            Node::parse("http://gpu-01:9835/").unwrap(),
            Node {
                host: "gpu-01".into(),
                port: 9835
            }
        );
        assert_eq!(Node::parse("gpu-02").unwrap().port, 9835);
        assert_eq!(Node::parse("10.0.0.7:9900").unwrap().port, 9900);
        assert!(Node::parse("https://x").is_err());
        assert!(Node::parse("gpu:port").is_err());
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

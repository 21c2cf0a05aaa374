//! Remote nodes: `gputop --remote` reads other machines' `gputop export` through their
//! `/snapshot` (the `--once --json` document) over plain HTTP. A poller thread schedules
//! the nodes, a fixed number of fetch workers bound the concurrency, every fetch has
//! connect and read timeouts and a size cap, and a node that fails is retried with
//! exponential backoff. Each change is published as a whole [`Cluster`].

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

use crate::model::Snapshot;
use serde::Deserialize;

use crate::model::wire::{self, WireSnapshot};

/// Fetches at once, at most.
pub const MAX_CONCURRENT: usize = 16;
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest `/snapshot` accepted.
pub const BODY_MAX: usize = 16 << 20;
/// Longest wait between retries of a node that does not answer.
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// A node to watch: `host:port` of its `gputop export`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub host: String,
    pub port: u16,
}

impl Node {
    /// `http://host:port[/...]`, `host:port` or `host` (port 9835).
    pub fn parse(text: &str) -> Result<Self, String> {
        let trimmed = text.trim();
        if trimmed.starts_with("https://") {
            return Err(format!(
                "{trimmed}: https is not supported; use http:// (or a TLS-terminating proxy)"
            ));
        }
        let rest = trimmed.strip_prefix("http://").unwrap_or(trimmed);
        let authority = rest.split('/').next().unwrap_or("");
        if authority.is_empty() || authority.contains(char::is_whitespace) {
            return Err(format!("'{trimmed}' is not a node address (host:port)"));
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => {
                let port = port
                    .parse::<u16>()
                    .map_err(|_| format!("'{trimmed}': the port must be a number"))?;
                (host.trim_matches(['[', ']']).to_string(), port)
            }
            _ => (authority.to_string(), 9835),
        };
        Ok(Self { host, port })
    }

    pub fn label(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Nodes from a hosts file: one address per line; `#` starts a comment.
pub fn parse_hosts_file(text: &str) -> Result<Vec<Node>, String> {
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let line = line.split('#').next().unwrap_or("").trim();
            (!line.is_empty()).then(|| Node::parse(line).map_err(|e| format!("line {}: {e}", i + 1)))
        })
        .collect()
}

/// Where a node stands.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeStatus {
    /// Not asked yet.
    Waiting,
    Up,
    /// The last fetch failed; the next try is after `retry_in` from `at`.
    Down {
        reason: String,
        failures: u32,
    },
}

/// One node and what it last said.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeState {
    pub node: Node,
    pub status: NodeStatus,
    /// The latest snapshot it sent (kept while it is down, marked stale by the status).
    pub snapshot: Option<Arc<Snapshot>>,
    /// Firing alerts in its latest report.
    pub alerts: usize,
    pub last_ok: Option<SystemTime>,
}

/// Every node, in the order given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cluster {
    pub nodes: Vec<NodeState>,
}

/// A node's `/snapshot`, or why not.
pub fn fetch(node: &Node) -> Result<(Snapshot, usize), String> {
    let address = (node.host.as_str(), node.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve: {e}"))?
        .next()
        .ok_or("cannot resolve")?;
    let mut stream =
        TcpStream::connect_timeout(&address, CONNECT_TIMEOUT).map_err(|e| format!("cannot connect: {e}"))?;
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(READ_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let request = format!(
        "GET /snapshot HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nConnection: close\r\n\r\n",
        node.label()
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("cannot send: {e}"))?;
    let mut response = Vec::new();
    stream
        .take(BODY_MAX as u64 + 1)
        .read_to_end(&mut response)
        .map_err(|e| format!("cannot read: {e}"))?;
    if response.len() > BODY_MAX {
        return Err(format!("answer larger than {} MiB", BODY_MAX >> 20));
    }
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("not an HTTP answer")?;
    let head = String::from_utf8_lossy(&response[..split]);
    let status = head.split(' ').nth(1).unwrap_or("");
    if status != "200" {
        return Err(format!("answered HTTP {status}"));
    }
    let doc: NodeDocument =
        serde_json::from_slice(&response[split + 4..]).map_err(|e| format!("not a gputop snapshot: {e}"))?;
    if doc.snapshot.version != wire::VERSION {
        return Err(format!("not a gputop report of version {}", wire::VERSION));
    }
    let firing = doc.alerts.iter().filter(|a| a.state == "firing").count();
    Ok((doc.snapshot.into_snapshot(SystemTime::now()), firing))
}

/// A node's `/snapshot`: the snapshot's wire form and its alerts.
#[derive(Deserialize)]
struct NodeDocument {
    #[serde(flatten)]
    snapshot: WireSnapshot,
    #[serde(default)]
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
type Outcome = (usize, Result<(Snapshot, usize), String>);

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
                let workers = nodes.len().clamp(1, MAX_CONCURRENT);
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
                                    state.status = NodeStatus::Down { reason, failures };
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
                }
            })?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
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

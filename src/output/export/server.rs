//! The exporter's HTTP server: GET (and HEAD) of `/metrics`, `/-/ready` and `/snapshot`,
//! answered from a snapshot's pages, each rendered at most once, so a scrape never calls
//! NVML. hyper's HTTP/1 server, with TLS by tokio-rustls, on a tokio runtime of the serving
//! thread; every answer closes its connection.
//!
//! Up to [`MAX_CONNECTIONS`] connections are open at once. A request head (the TLS
//! handshake included) must arrive whole within [`HEAD_DEADLINE`] and [`HEAD_MAX`] bytes. A
//! connection still sending its head after [`SLOW_AFTER`] is slow: one address keeps at
//! most [`MAX_SLOW_PER_PEER`] slow connections, and a full server closes the connection
//! that has waited longest for its head to make room, so clients trickling bytes
//! (slowloris) cannot keep a scraper out; only when every connection is being answered does
//! a new one get 503. Malformed requests get hyper's 4xx and a log line; nothing a client
//! sends can stop the server.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::body::{Body, Bytes, Frame, SizeHint};
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::task::AbortHandle;

use super::metrics::{CONTENT_TYPE, Options, exposition};
use super::web_config::WebConfig;
use crate::output::report::json_report;
use gputop_core::model::Snapshot;
use gputop_core::monitor::Monitor;
use gputop_core::monitor::alerts::Active;
use gputop_core::monitor::clock_events::ClockEvents;
use gputop_core::monitor::usage::Accounting;
use gputop_core::source::Activity;

const TEXT: &str = "text/plain; charset=utf-8";

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 256;
/// Slow connections (see [`SLOW_AFTER`]) one address may hold.
pub const MAX_SLOW_PER_PEER: usize = 16;
/// A connection still sending its request head after this long is slow: a client sends its
/// head at once.
pub const SLOW_AFTER: Duration = Duration::from_secs(1);
/// The most a client may take to send its whole request head, the TLS handshake included.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// Longest request head, the request line included.
pub const HEAD_MAX: usize = 8 * 1024;
/// How long after its head's deadline a connection is closed, answered or not: a client that
/// does not read its answer holds its place no longer (Prometheus gives up on a scrape after
/// 10 s too).
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(10);

/// One snapshot's `/metrics` and `/snapshot`, each rendered by the first request for it:
/// the collector refreshes every second or two while a Prometheus scrapes every 15 to 60 s
/// (and only `/metrics`), and rendering both pages at every refresh was most of an
/// exporter's work. What they are made of is copied from the monitor when the snapshot is
/// delivered, so a page rendered later shows the same as one rendered then. A page is sent
/// to every scrape of its snapshot without being copied.
#[derive(Debug)]
pub struct SnapshotPages {
    snapshot: Arc<Snapshot>,
    alerts: Vec<Active>,
    usage: Accounting,
    clock_events: ClockEvents,
    options: Options,
    metrics: OnceLock<Bytes>,
    json: OnceLock<Bytes>,
    /// When the collector delivered the snapshot.
    delivered_at: Instant,
}

impl SnapshotPages {
    pub fn new(snapshot: Arc<Snapshot>, monitor: &Monitor, options: Options) -> Self {
        Self {
            snapshot,
            alerts: monitor.alerts().active(),
            usage: monitor.usage().clone(),
            clock_events: monitor.clock_events().clone(),
            options,
            metrics: OnceLock::new(),
            json: OnceLock::new(),
            delivered_at: Instant::now(),
        }
    }

    /// `/metrics`, rendered once.
    pub fn metrics(&self) -> Bytes {
        self.metrics
            .get_or_init(|| {
                Bytes::from(exposition(
                    Some((&self.snapshot, &self.usage, &self.clock_events)),
                    self.options,
                ))
            })
            .clone()
    }

    /// `/snapshot`, rendered once.
    pub fn json(&self) -> Bytes {
        self.json
            .get_or_init(|| {
                let report = json_report(&self.snapshot, &self.alerts, &self.usage);
                // Command lines may hold secrets: served only when asked for.
                let report = if self.options.commands {
                    report
                } else {
                    report.without_commands()
                };
                Bytes::from(serde_json::to_string(&report).unwrap_or_default())
            })
            .clone()
    }
}

/// How the server tells pages the collector has stopped refreshing: older than two
/// intervals, they are stale, `/-/ready` says so with the call that has not returned, and
/// `/metrics` carries their age.
#[derive(Debug, Clone)]
pub struct Freshness {
    pub interval: Duration,
    pub activity: Activity,
}

impl Freshness {
    /// Seconds since `pages` were delivered, and whether that is stale.
    fn age(&self, pages: &SnapshotPages) -> (f64, bool) {
        let age = pages.delivered_at.elapsed();
        (age.as_secs_f64(), age > 2 * self.interval)
    }
}

/// The latest snapshot's pages (`None` before the first), replaced whole on every snapshot.
pub type SharedPages = Arc<RwLock<Option<Arc<SnapshotPages>>>>;

/// The open connections, for making room: which peer, since when, and whether it is still
/// sending its request head.
#[derive(Default)]
struct Connections {
    open: Mutex<Vec<Open>>,
}

struct Open {
    id: u64,
    peer: IpAddr,
    since: Instant,
    reading_head: bool,
    /// Its task, to close it with (its socket goes with the task); `None` until spawned.
    task: Option<AbortHandle>,
}

impl Connections {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Open>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes in a connection from `peer`. A connection still sending its head after
    /// [`SLOW_AFTER`] is slow: a peer keeps at most [`MAX_SLOW_PER_PEER`] of them (its
    /// oldest is closed). A full server closes the connection that has waited longest for
    /// its head (a client sends its head at once: the newest are the last to go).
    /// `false` when the server is full and every connection is being answered.
    fn admit(&self, id: u64, peer: IpAddr) -> bool {
        let mut closed = Vec::new();
        let admitted = {
            let mut open = self.lock();
            let now = Instant::now();
            let slow_of_peer =
                |c: &Open| c.peer == peer && c.reading_head && now.duration_since(c.since) >= SLOW_AFTER;
            // The connection that has waited longest for its head, among those `among` picks.
            let oldest_waiting = |open: &[Open], among: &dyn Fn(&Open) -> bool| {
                open.iter()
                    .enumerate()
                    .filter(|(_, c)| c.reading_head && among(c))
                    .min_by_key(|(_, c)| c.since)
                    .map(|(i, _)| i)
            };
            if open.iter().filter(|c| slow_of_peer(c)).count() >= MAX_SLOW_PER_PEER
                && let Some(index) = oldest_waiting(&open, &slow_of_peer)
            {
                closed.extend(open.swap_remove(index).task);
            }
            let room = open.len() < MAX_CONNECTIONS
                || match oldest_waiting(&open, &|_| true) {
                    Some(index) => {
                        closed.extend(open.swap_remove(index).task);
                        true
                    }
                    None => false,
                };
            if room {
                open.push(Open {
                    id,
                    peer,
                    since: now,
                    reading_head: true,
                    task: None,
                });
            }
            room
        };
        // Outside the lock: a closed connection's task gives its place up under it.
        for task in closed {
            task.abort();
        }
        admitted
    }

    /// The admitted connection `id` is served by `task`.
    fn started(&self, id: u64, task: AbortHandle) {
        if let Some(c) = self.lock().iter_mut().find(|c| c.id == id) {
            c.task = Some(task);
        }
    }

    /// The connection has sent its head: it is being answered, and is no longer closed to
    /// make room.
    fn answering(&self, id: u64) {
        if let Some(c) = self.lock().iter_mut().find(|c| c.id == id) {
            c.reading_head = false;
        }
    }

    fn leave(&self, id: u64) {
        self.lock().retain(|c| c.id != id);
    }
}

/// A connection's place among the open ones, given up when its task ends or is closed.
struct Place {
    id: u64,
    connections: Arc<Connections>,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.connections.leave(self.id);
    }
}

/// What a full server says to a plain HTTP client before closing its connection (a TLS
/// client could not read it: it is only closed).
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n\
Content-Length: 16\r\nConnection: close\r\nRetry-After: 1\r\n\r\nbusy, try again\n";

/// What the answers are made from.
struct Site {
    pages: SharedPages,
    freshness: Freshness,
    web: Arc<WebConfig>,
}

/// Serves `pages` on `listener` (with `web`'s TLS and authentication) for as long as the
/// process runs; an error only if the runtime or the listener cannot be set up.
pub fn serve(
    listener: TcpListener,
    pages: SharedPages,
    freshness: Freshness,
    web: WebConfig,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let site = Arc::new(Site {
        pages,
        freshness,
        web: Arc::new(web),
    });
    let connections = Arc::new(Connections::default());
    gputop_core::source::http::runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        for id in 0u64.. {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                // Out of file descriptors, say: let connections close before trying again.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if !connections.admit(id, peer.ip()) {
                if site.web.tls.is_none() {
                    // A new socket's send buffer takes these few bytes at once.
                    let _ = stream.try_write(BUSY);
                }
                continue;
            }
            let place = Place {
                id,
                connections: Arc::clone(&connections),
            };
            let task = tokio::spawn(connection(stream, peer, Arc::clone(&site), place));
            connections.started(id, task.abort_handle());
        }
        Ok(())
    })
}

/// Serves one connection: the TLS handshake if any, one request, its answer.
async fn connection(stream: tokio::net::TcpStream, peer: SocketAddr, site: Arc<Site>, place: Place) {
    // An answer is written in a few pieces and the connection then closed: nothing to gain
    // from holding the last piece back for the peer's acknowledgement.
    let _ = stream.set_nodelay(true);
    let head_by = tokio::time::Instant::now() + HEAD_DEADLINE;
    match &site.web.tls {
        None => answer_one(TokioIo::new(stream), peer, head_by, &site, &place).await,
        Some(config) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(config));
            match tokio::time::timeout_at(head_by, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => answer_one(TokioIo::new(tls), peer, head_by, &site, &place).await,
                // A plain HTTP client, an unknown certificate.
                Ok(Err(e)) => eprintln!(
                    "gputop export: {peer}: TLS: {}",
                    gputop_core::format::sanitize(&e.to_string())
                ),
                // Nothing whole in time.
                Err(_) => {}
            }
        }
    }
}

/// Reads one request head by `head_by` and answers it.
async fn answer_one<I>(io: I, peer: SocketAddr, head_by: tokio::time::Instant, site: &Site, place: &Place)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
{
    let service = hyper::service::service_fn(|request| async move {
        place.connections.answering(place.id);
        Ok::<_, Infallible>(site.answer(request).await)
    });
    let serving = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(head_by.saturating_duration_since(tokio::time::Instant::now()))
        .max_header_size(HEAD_MAX)
        .keep_alive(false)
        // Header names as HTTP/1 clients and the old server wrote them (`Retry-After`).
        .title_case_headers(true)
        .serve_connection(io, service);
    match tokio::time::timeout_at(head_by + ANSWER_DEADLINE, serving).await {
        Ok(Err(e)) if e.is_parse() || e.is_parse_too_large() => {
            eprintln!(
                "gputop export: {peer}: {}",
                gputop_core::format::sanitize(&e.to_string())
            );
        }
        // Answered, gone, silent past the deadline, or not reading its answer.
        _ => {}
    }
}

impl Site {
    async fn answer(&self, request: Request<hyper::body::Incoming>) -> Response<Pieces> {
        let method = request.method();
        if method != Method::GET && method != Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
        }
        if self.web.auth.is_some() {
            let authorization = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .map(str::to_string);
            // bcrypt takes tens of milliseconds by design: off the thread serving the others.
            let web = Arc::clone(&self.web);
            let accepted = tokio::task::spawn_blocking(move || {
                web.auth
                    .as_ref()
                    .is_some_and(|auth| auth.accepts(authorization.as_deref()))
            });
            if !accepted.await.unwrap_or(false) {
                return text(StatusCode::UNAUTHORIZED, "unauthorized\n");
            }
        }
        let latest = self.pages.read().unwrap_or_else(|e| e.into_inner()).clone();
        let age = latest.as_deref().map(|pages| self.freshness.age(pages));
        match request.uri().path() {
            "/metrics" => {
                // The page as rendered, then its age: the only part a scrape computes.
                let page = latest.map_or_else(
                    || Bytes::from(exposition(None, Options::default())),
                    |pages| pages.metrics(),
                );
                let stale = age.map_or(String::new(), |(seconds, _)| {
                    format!(
                        "# HELP gputop_collector_stale_seconds Seconds since the collector last delivered a snapshot.\n\
                         # TYPE gputop_collector_stale_seconds gauge\n\
                         gputop_collector_stale_seconds {seconds:.3}\n"
                    )
                });
                respond(StatusCode::OK, CONTENT_TYPE, [page, Bytes::from(stale)])
            }
            "/-/ready" => match age {
                Some((seconds, true)) => {
                    let waiting = self
                        .freshness
                        .activity
                        .current()
                        .map_or(String::new(), |call| format!("; {call} has not returned"));
                    let body = format!("stale: the data is {seconds:.0} s old{waiting}\n");
                    respond(StatusCode::SERVICE_UNAVAILABLE, TEXT, [Bytes::from(body)])
                }
                Some(_) => text(StatusCode::OK, "ready\n"),
                None => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
            },
            "/snapshot" => match latest {
                Some(pages) => respond(StatusCode::OK, "application/json", [pages.json()]),
                None => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
            },
            "/" => respond(
                StatusCode::OK,
                "text/html; charset=utf-8",
                [Bytes::from_static(
                    b"<html><body><h1>gputop</h1><p><a href=\"/metrics\">/metrics</a> <a href=\"/snapshot\">/snapshot</a> <a href=\"/-/ready\">/-/ready</a></p></body></html>\n",
                )],
            ),
            _ => text(StatusCode::NOT_FOUND, "not found\n"),
        }
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Pieces> {
    respond(status, TEXT, [Bytes::from_static(body.as_bytes())])
}

/// An answer with `pieces` as its body (hyper leaves the body out for HEAD).
fn respond<const N: usize>(
    status: StatusCode,
    content_type: &'static str,
    pieces: [Bytes; N],
) -> Response<Pieces> {
    let mut response = Response::new(Pieces(pieces.into()));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    match status {
        StatusCode::SERVICE_UNAVAILABLE => {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        StatusCode::METHOD_NOT_ALLOWED => {
            headers.insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        }
        StatusCode::UNAUTHORIZED => {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"gputop\", charset=\"UTF-8\""),
            );
        }
        _ => {}
    }
    response
}

/// An answer's body: pieces sent one after another, none copied (a page is shared by every
/// scrape of its snapshot).
struct Pieces(VecDeque<Bytes>);

impl Body for Pieces {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|piece| Ok(Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.0.iter().map(|piece| piece.len() as u64).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn peer(n: u64) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n as u32))
    }

    fn open_ids(connections: &Connections) -> Vec<u64> {
        let mut ids: Vec<u64> = connections.lock().iter().map(|c| c.id).collect();
        ids.sort_unstable();
        ids
    }

    /// Backdates connection `id` by `seconds`, as if it had been open that long.
    fn age(connections: &Connections, id: u64, seconds: u64) {
        let mut open = connections.lock();
        let c = open.iter_mut().find(|c| c.id == id).unwrap();
        c.since -= Duration::from_secs(seconds);
    }

    #[test]
    fn a_full_server_closes_the_longest_waiting_head_and_refuses_only_when_all_are_answered() {
        let connections = Connections::default();
        let full = MAX_CONNECTIONS as u64;
        for id in 0..full {
            assert!(connections.admit(id, peer(id)));
        }
        age(&connections, 7, 3);
        connections.answering(7);
        age(&connections, 9, 2);
        // Full: the newcomer takes the place of the oldest still sending its head (9), not
        // of the older one being answered (7).
        assert!(connections.admit(full, peer(full)));
        let ids = open_ids(&connections);
        assert_eq!(ids.len(), MAX_CONNECTIONS);
        assert!(ids.contains(&7) && !ids.contains(&9) && ids.contains(&full));
        for id in ids {
            connections.answering(id);
        }
        assert!(
            !connections.admit(full + 1, peer(full + 1)),
            "all answered: refused"
        );
        connections.leave(7);
        assert!(
            connections.admit(full + 2, peer(full + 2)),
            "a place given up is taken"
        );
    }

    #[test]
    fn one_address_keeps_at_most_its_share_of_slow_connections() {
        let connections = Connections::default();
        let trickler = peer(1);
        let slow = MAX_SLOW_PER_PEER as u64;
        for id in 0..slow {
            assert!(connections.admit(id, trickler));
            age(&connections, id, 10 + slow - id);
        }
        // Another address's slow connection is not the trickler's to lose.
        assert!(connections.admit(100, peer(2)));
        age(&connections, 100, 60);
        // One more from the trickler: its own oldest slow one (0) goes.
        assert!(connections.admit(slow, trickler));
        let ids = open_ids(&connections);
        assert!(!ids.contains(&0) && ids.contains(&100) && ids.contains(&slow));
        assert_eq!(ids.len(), MAX_SLOW_PER_PEER + 1);
    }
}

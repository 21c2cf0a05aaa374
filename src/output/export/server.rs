//! A small HTTP/1.1 server for the exporter: GET (and HEAD) of `/metrics`, `/-/ready` and
//! `/snapshot`, answered from a snapshot's pages, each rendered at most once, so a scrape
//! never calls NVML. Each connection has its own small thread, up to [`MAX_CONNECTIONS`]
//! at once. A request head must arrive whole within [`HEAD_DEADLINE`] and 8 KiB. A connection still
//! sending its head after a second is slow: one address keeps at most
//! [`MAX_SLOW_PER_PEER`] slow connections, and a full server closes the connection that has
//! waited longest for its head to make room, so clients trickling bytes (slowloris) cannot
//! keep a scraper out; only when every slot is being answered does a connection get 503. Every answer closes the connection. Malformed
//! requests get 400 and a log line; nothing a client sends can stop the server.

use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use super::metrics::{CONTENT_TYPE, Options, exposition};
use super::web_config::WebConfig;
use crate::output::report::json_report;
use gputop::model::Snapshot;
use gputop::monitor::Monitor;
use gputop::monitor::alerts::Active;
use gputop::monitor::clock_events::ClockEvents;
use gputop::monitor::usage::Accounting;
use gputop::source::Activity;

const TEXT: &str = "text/plain; charset=utf-8";

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 256;
/// Slow connections (see [`SLOW_AFTER`]) one address may hold.
pub const MAX_SLOW_PER_PEER: usize = 16;
/// A connection still sending its request head after this long is slow: a client sends its
/// head at once.
pub const SLOW_AFTER: Duration = Duration::from_secs(1);
/// The most a client may take to send its whole request head.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// Stack of a connection's thread: it renders a page at most, with shallow calls.
const STACK: usize = 128 * 1024;
/// Longest request head read.
pub const HEAD_MAX: usize = 8 * 1024;
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// One snapshot's `/metrics` and `/snapshot`, each rendered by the first request for it:
/// the collector refreshes every second or two while a Prometheus scrapes every 15 to 60 s
/// (and only `/metrics`), and rendering both pages at every refresh was most of an
/// exporter's work. What they are made of is copied from the monitor when the snapshot is
/// delivered, so a page rendered later shows the same as one rendered then.
#[derive(Debug)]
pub struct SnapshotPages {
    snapshot: Arc<Snapshot>,
    alerts: Vec<Active>,
    usage: Accounting,
    clock_events: ClockEvents,
    options: Options,
    metrics: OnceLock<String>,
    json: OnceLock<String>,
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
    pub fn metrics(&self) -> &str {
        self.metrics.get_or_init(|| {
            exposition(
                Some((&self.snapshot, &self.usage, &self.clock_events)),
                self.options,
            )
        })
    }

    /// `/snapshot`, rendered once.
    pub fn json(&self) -> &str {
        self.json.get_or_init(|| {
            let report = json_report(&self.snapshot, &self.alerts, &self.usage);
            // Command lines may hold secrets: served only when asked for.
            let report = if self.options.commands {
                report
            } else {
                report.without_commands()
            };
            serde_json::to_string(&report).unwrap_or_default()
        })
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
    /// A handle to close it with.
    stream: TcpStream,
}

impl Connections {
    /// Takes in a connection from `peer`. A connection still sending its head after
    /// [`SLOW_AFTER`] is slow: a peer keeps at most [`MAX_SLOW_PER_PEER`] of them (its
    /// oldest is closed). A full server closes the connection that has waited longest for
    /// its head (a client sends its head at once: the newest are the last to go).
    /// `false` when the server is full and every connection is being answered.
    fn admit(&self, id: u64, peer: IpAddr, stream: &TcpStream) -> bool {
        let Ok(handle) = stream.try_clone() else {
            return false;
        };
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
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
        let close = |open: &mut Vec<Open>, index: usize| {
            // Its thread sees the connection end and leaves.
            let _ = open.swap_remove(index).stream.shutdown(Shutdown::Both);
        };
        if open.iter().filter(|c| slow_of_peer(c)).count() >= MAX_SLOW_PER_PEER
            && let Some(index) = oldest_waiting(&open, &slow_of_peer)
        {
            close(&mut open, index);
        }
        if open.len() >= MAX_CONNECTIONS {
            match oldest_waiting(&open, &|_| true) {
                Some(index) => close(&mut open, index),
                None => return false,
            }
        }
        open.push(Open {
            id,
            peer,
            since: now,
            reading_head: true,
            stream: handle,
        });
        true
    }

    /// The connection has sent its head: it is being answered, and is no longer closed to
    /// make room.
    fn answering(&self, id: u64) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = open.iter_mut().find(|c| c.id == id) {
            c.reading_head = false;
        }
    }

    fn leave(&self, id: u64) {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|c| c.id != id);
    }
}

/// A client's connection: plain TCP, or TLS over it (the handshake made by the first read).
enum Conn {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ServerConnection, TcpStream>>),
}

impl Conn {
    fn socket(&self) -> &TcpStream {
        match self {
            Self::Plain(stream) => stream,
            Self::Tls(tls) => &tls.sock,
        }
    }

    /// Ends the answer: TLS says so to the client before the connection closes.
    fn finish(&mut self) {
        if let Self::Tls(tls) = self {
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Self::Plain(stream) => stream.read(buf),
            Self::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Plain(stream) => stream.write(buf),
            Self::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Plain(stream) => stream.flush(),
            Self::Tls(tls) => tls.flush(),
        }
    }
}

/// Serves `pages` on `listener` (with `web`'s TLS and authentication) until `stop` is set
/// (checked between connections).
pub fn serve(
    listener: TcpListener,
    pages: SharedPages,
    freshness: Freshness,
    web: Arc<WebConfig>,
    stop: Arc<AtomicBool>,
) {
    let freshness = Arc::new(freshness);
    let connections = Arc::new(Connections::default());
    for (id, stream) in (0u64..).zip(listener.incoming()) {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut stream) = stream else { continue };
        let Ok(peer) = stream.peer_addr() else { continue };
        if !connections.admit(id, peer.ip(), &stream) {
            // Plain text a TLS client could not read: it is only closed.
            if web.tls.is_none() {
                let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
                let _ = respond(&mut stream, 503, TEXT, b"busy, try again\n", false);
            }
            continue;
        }
        let (pages, open, fresh, web) = (
            Arc::clone(&pages),
            Arc::clone(&connections),
            Arc::clone(&freshness),
            Arc::clone(&web),
        );
        let spawned = thread::Builder::new()
            .name("gputop-http".into())
            .stack_size(STACK)
            .spawn(move || {
                handle(stream, peer, &pages, &fresh, &web, || open.answering(id));
                open.leave(id);
            });
        if spawned.is_err() {
            connections.leave(id);
        }
    }
}

fn handle(
    stream: TcpStream,
    peer: SocketAddr,
    pages: &SharedPages,
    freshness: &Freshness,
    web: &WebConfig,
    answering: impl FnOnce(),
) {
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    // An answer is written in a few pieces and the connection then closed: nothing to gain
    // from holding the last piece back for the peer's acknowledgement.
    let _ = stream.set_nodelay(true);
    let mut conn = match &web.tls {
        None => Conn::Plain(stream),
        Some(config) => match rustls::ServerConnection::new(Arc::clone(config)) {
            Ok(tls) => Conn::Tls(Box::new(rustls::StreamOwned::new(tls, stream))),
            Err(_) => return,
        },
    };
    answer(&mut conn, peer, pages, freshness, web, answering);
    conn.finish();
}

fn answer(
    stream: &mut Conn,
    peer: SocketAddr,
    pages: &SharedPages,
    freshness: &Freshness,
    web: &WebConfig,
    answering: impl FnOnce(),
) {
    let bad_request = |stream: &mut Conn, problem: &str| {
        eprintln!("gputop export: {peer}: {}", gputop::format::sanitize(problem));
        let _ = respond(stream, 400, TEXT, b"bad request\n", false);
    };
    let head = match read_head(stream) {
        Ok(head) => head,
        Err(Some(problem)) => return bad_request(stream, &problem),
        // The client went away, said nothing in time, or was closed to make room.
        Err(None) => return,
    };
    answering();
    let mut lines = head.lines();
    let mut parts = lines.next().unwrap_or("").split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
        return bad_request(stream, "malformed request line");
    };
    if !version.starts_with("HTTP/1.") {
        let _ = respond(stream, 505, TEXT, b"HTTP/1.x only\n", false);
        return;
    }
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        let _ = respond(stream, 405, TEXT, b"GET only\n", false);
        return;
    }
    if let Some(auth) = &web.auth {
        let authorization = lines.find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("authorization")
                .then(|| value.trim())
        });
        if !auth.accepts(authorization) {
            let _ = respond(stream, 401, TEXT, b"unauthorized\n", head_only);
            return;
        }
    }
    let path = target.split('?').next().unwrap_or("");
    let latest = pages.read().unwrap_or_else(|e| e.into_inner()).clone();
    let age = latest.as_deref().map(|pages| freshness.age(pages));
    let _ = match path {
        "/metrics" => {
            // The page as rendered, then its age: the only part a scrape computes.
            let stale = age.map_or(String::new(), |(seconds, _)| {
                format!(
                    "# HELP gputop_collector_stale_seconds Seconds since the collector last delivered a snapshot.\n\
                     # TYPE gputop_collector_stale_seconds gauge\n\
                     gputop_collector_stale_seconds {seconds:.3}\n"
                )
            });
            let waiting;
            let page = match &latest {
                Some(pages) => pages.metrics(),
                None => {
                    waiting = exposition(None, Options::default());
                    &waiting
                }
            };
            let body = [page.as_bytes(), stale.as_bytes()];
            respond_parts(stream, 200, CONTENT_TYPE, &body, head_only)
        }
        "/-/ready" if matches!(age, Some((_, true))) => {
            let waiting = freshness
                .activity
                .current()
                .map_or(String::new(), |call| format!("; {call} has not returned"));
            let seconds = age.map_or(0.0, |(s, _)| s);
            let body = format!("stale: the data is {seconds:.0} s old{waiting}\n");
            respond(stream, 503, TEXT, body.as_bytes(), head_only)
        }
        "/-/ready" if latest.is_some() => respond(stream, 200, TEXT, b"ready\n", head_only),
        "/-/ready" => respond(stream, 503, TEXT, b"not ready\n", head_only),
        "/snapshot" if let Some(page) = &latest => {
            respond(stream, 200, "application/json", page.json().as_bytes(), head_only)
        }
        "/snapshot" => respond(stream, 503, TEXT, b"not ready\n", head_only),
        "/" => respond(
            stream,
            200,
            "text/html; charset=utf-8",
            b"<html><body><h1>gputop</h1><p><a href=\"/metrics\">/metrics</a> <a href=\"/snapshot\">/snapshot</a> <a href=\"/-/ready\">/-/ready</a></p></body></html>\n",
            head_only,
        ),
        _ => respond(stream, 404, TEXT, b"not found\n", head_only),
    };
}

/// Reads up to the blank line ending the request head, all within [`HEAD_DEADLINE`].
/// `Err(None)`: the client went away or sent nothing whole in time (nothing to answer);
/// `Err(Some(why))`: a malformed request.
fn read_head(stream: &mut Conn) -> Result<String, Option<String>> {
    let deadline = Instant::now() + HEAD_DEADLINE;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        // Each read waits only for what is left: a byte every few seconds does not stretch it.
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or(None)?;
        let _ = stream.socket().set_read_timeout(Some(left));
        let n = match stream.read(&mut buf) {
            Ok(0) if head.is_empty() => return Err(None),
            Ok(0) => return Err(Some("connection closed inside the request head".into())),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // rustls's: a failed handshake (a plain HTTP client, an unknown certificate).
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                eprintln!(
                    "gputop export: {}: TLS: {e}",
                    stream
                        .socket()
                        .peer_addr()
                        .map_or_else(|_| "?".into(), |a| a.to_string())
                );
                return Err(None);
            }
            Err(_) => return Err(None),
        };
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = find(&head, b"\r\n\r\n").or_else(|| find(&head, b"\n\n")) {
            head.truncate(end);
            return String::from_utf8(head).map_err(|_| Some("request head is not UTF-8".into()));
        }
        if head.len() > HEAD_MAX {
            return Err(Some(format!("request head longer than {HEAD_MAX} bytes")));
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn respond(
    stream: &mut impl Write,
    status: u16,
    content_type: &str,
    body: &[u8],
    head_only: bool,
) -> std::io::Result<()> {
    respond_parts(stream, status, content_type, &[body], head_only)
}

/// Answers with a body written in `parts`, so a page is sent without copying it.
fn respond_parts(
    stream: &mut impl Write,
    status: u16,
    content_type: &str,
    parts: &[&[u8]],
    head_only: bool,
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    };
    let mut head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\nCache-Control: no-store\r\n",
        parts.iter().map(|part| part.len()).sum::<usize>()
    );
    if status == 503 {
        head.push_str("Retry-After: 1\r\n");
    }
    if status == 405 {
        head.push_str("Allow: GET, HEAD\r\n");
    }
    if status == 401 {
        head.push_str("WWW-Authenticate: Basic realm=\"gputop\", charset=\"UTF-8\"\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    if !head_only {
        for part in parts {
            stream.write_all(part)?;
        }
    }
    stream.flush()
}

//! A small HTTP/1.1 server for the exporter: GET (and HEAD) of `/metrics`, `/-/ready` and
//! `/snapshot`, answered from pages rendered once per snapshot, so a scrape never calls
//! NVML. Each connection has its own small thread, up to [`MAX_CONNECTIONS`] at once (so a
//! few slow clients cannot hold up the others); beyond that a connection gets 503 at once.
//! Every connection has read and write timeouts,
//! request heads are capped at 8 KiB, and every answer closes the connection. Malformed
//! requests get 400 and a log line; nothing a client sends can stop the server.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use super::metrics::CONTENT_TYPE;
use crate::source::Activity;

const TEXT: &str = "text/plain; charset=utf-8";

/// Connections served at once; beyond this they get 503.
pub const MAX_CONNECTIONS: usize = 256;
/// Stack of a connection's thread: it only copies a page out.
const STACK: usize = 128 * 1024;
/// Longest request head read.
pub const HEAD_MAX: usize = 8 * 1024;
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the server answers with, replaced whole on every snapshot.
#[derive(Debug, Clone, Default)]
pub struct Pages {
    pub ready: bool,
    pub metrics: String,
    pub snapshot_json: String,
    /// When the collector delivered these pages (`None` before the first snapshot).
    pub rendered_at: Option<Instant>,
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
    /// Seconds since the pages were rendered, and whether that is stale.
    fn age(&self, pages: &Pages) -> Option<(f64, bool)> {
        let age = pages.rendered_at?.elapsed();
        Some((age.as_secs_f64(), age > 2 * self.interval))
    }
}

pub type SharedPages = Arc<RwLock<Arc<Pages>>>;

/// Serves `pages` on `listener` until `stop` is set (checked between connections).
pub fn serve(listener: TcpListener, pages: SharedPages, freshness: Freshness, stop: Arc<AtomicBool>) {
    let freshness = Arc::new(freshness);
    let active = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut stream) = stream else { continue };
        if active.load(Ordering::Acquire) >= MAX_CONNECTIONS {
            let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = respond(&mut stream, 503, TEXT, b"busy, try again\n", false);
            continue;
        }
        active.fetch_add(1, Ordering::AcqRel);
        let (pages, count, fresh) = (Arc::clone(&pages), Arc::clone(&active), Arc::clone(&freshness));
        let spawned = thread::Builder::new()
            .name("gputop-http".into())
            .stack_size(STACK)
            .spawn(move || {
                handle(stream, &pages, &fresh);
                count.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

fn handle(mut stream: TcpStream, pages: &SharedPages, freshness: &Freshness) {
    let _ = stream.set_read_timeout(Some(READ_TIMEOUT));
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    // An answer is written in a few pieces and the connection then closed: nothing to gain
    // from holding the last piece back for the peer's acknowledgement.
    let _ = stream.set_nodelay(true);
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "?".to_string(), |a: SocketAddr| a.to_string());
    let bad_request = |stream: &mut TcpStream, problem: &str| {
        eprintln!("gputop export: {peer}: {problem}");
        let _ = respond(stream, 400, TEXT, b"bad request\n", false);
    };
    let head = match read_head(&mut stream) {
        Ok(head) => head,
        Err(Some(problem)) => return bad_request(&mut stream, &problem),
        // The client went away or said nothing: nobody to answer.
        Err(None) => return,
    };
    let mut parts = head.lines().next().unwrap_or("").split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
        return bad_request(&mut stream, "malformed request line");
    };
    if !version.starts_with("HTTP/1.") {
        let _ = respond(&mut stream, 505, TEXT, b"HTTP/1.x only\n", false);
        return;
    }
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        let _ = respond(&mut stream, 405, TEXT, b"GET only\n", false);
        return;
    }
    let path = target.split('?').next().unwrap_or("");
    let pages = Arc::clone(&pages.read().unwrap_or_else(|e| e.into_inner()));
    let age = freshness.age(&pages);
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
            let body = [pages.metrics.as_bytes(), stale.as_bytes()];
            respond_parts(&mut stream, 200, CONTENT_TYPE, &body, head_only)
        }
        "/-/ready" if matches!(age, Some((_, true))) => {
            let waiting = freshness
                .activity
                .current()
                .map_or(String::new(), |call| format!("; {call} has not returned"));
            let seconds = age.map_or(0.0, |(s, _)| s);
            let body = format!("stale: the data is {seconds:.0} s old{waiting}\n");
            respond(&mut stream, 503, TEXT, body.as_bytes(), head_only)
        }
        "/-/ready" if pages.ready => respond(&mut stream, 200, TEXT, b"ready\n", head_only),
        "/-/ready" => respond(&mut stream, 503, TEXT, b"not ready\n", head_only),
        "/snapshot" if pages.ready => respond(
            &mut stream,
            200,
            "application/json",
            pages.snapshot_json.as_bytes(),
            head_only,
        ),
        "/snapshot" => respond(&mut stream, 503, TEXT, b"not ready\n", head_only),
        "/" => respond(
            &mut stream,
            200,
            "text/html; charset=utf-8",
            b"<html><body><h1>gputop</h1><p><a href=\"/metrics\">/metrics</a> <a href=\"/snapshot\">/snapshot</a> <a href=\"/-/ready\">/-/ready</a></p></body></html>\n",
            head_only,
        ),
        _ => respond(&mut stream, 404, TEXT, b"not found\n", head_only),
    };
}

/// Reads up to the blank line ending the request head. `Err(None)`: the client went away
/// or timed out without a word (nothing to answer); `Err(Some(why))`: a malformed request.
fn read_head(stream: &mut TcpStream) -> Result<String, Option<String>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) if head.is_empty() => return Err(None),
            Ok(0) => return Err(Some("connection closed inside the request head".into())),
            Ok(n) => n,
            Err(_) if head.is_empty() => return Err(None),
            Err(e) => return Err(Some(format!("reading the request: {e}"))),
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
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
    head_only: bool,
) -> std::io::Result<()> {
    respond_parts(stream, status, content_type, &[body], head_only)
}

/// Answers with a body written in `parts`, so a page is sent without copying it.
fn respond_parts(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    parts: &[&[u8]],
    head_only: bool,
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
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
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    if !head_only {
        for part in parts {
            stream.write_all(part)?;
        }
    }
    stream.flush()
}

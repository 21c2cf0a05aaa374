//! HTTP GET for the feeds from other machines (nodes' `/snapshot`, Prometheus' query API):
//! hyper's HTTP/1 client on the caller's tokio runtime, TLS by rustls (the system's trust
//! store, or a CA file, and an optional client certificate), a bearer token or basic auth read
//! from files at each request (so a rotated token is picked up), one deadline for the whole
//! exchange and a cap on the answer's size.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};

/// Why an address is not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// A scheme other than http or https.
    #[error("'{0}': only http:// and https:// are spoken")]
    Scheme(String),
    /// No host, or spaces in it.
    #[error("'{0}' is not an address (host, host:port or a URL)")]
    NotAnAddress(String),
    /// A port that is not a number from 0 to 65535.
    #[error("'{0}': the port must be a number")]
    Port(String),
}

/// Where requests go: scheme, host, port and a path prefix (Prometheus behind a proxy's
/// `/prometheus/`, say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// https.
    pub tls: bool,
    /// The host name or address (an IPv6 address without its brackets).
    pub host: String,
    /// The port.
    pub port: u16,
    /// The path prefix, without its last `/` (empty for the root).
    pub prefix: String,
}

impl Endpoint {
    /// `http[s]://host[:port][/prefix]` (without a port, 80 or 443 as in any URL), `host:port`
    /// or `host` (http on `default_port`).
    pub fn parse(text: &str, default_port: u16) -> Result<Self, AddressError> {
        let trimmed = text.trim();
        let (tls, rest, default_port) = match trimmed.split_once("://") {
            Some(("http", rest)) => (false, rest, 80),
            Some(("https", rest)) => (true, rest, 443),
            Some(_) => return Err(AddressError::Scheme(trimmed.to_string())),
            None => (false, trimmed, default_port),
        };
        let (authority, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if authority.is_empty() || authority.contains(char::is_whitespace) || authority.contains('@') {
            return Err(AddressError::NotAnAddress(trimmed.to_string()));
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => {
                let port = port
                    .parse::<u16>()
                    .map_err(|_| AddressError::Port(trimmed.to_string()))?;
                (host.trim_matches(['[', ']']).to_string(), port)
            }
            _ => (authority.trim_matches(['[', ']']).to_string(), default_port),
        };
        if host.is_empty() {
            return Err(AddressError::NotAnAddress(trimmed.to_string()));
        }
        let prefix = prefix.trim_end_matches('/');
        let prefix = if prefix.is_empty() {
            String::new()
        } else {
            format!("/{prefix}")
        };
        Ok(Self {
            tls,
            host,
            port,
            prefix,
        })
    }

    /// `host:port`, as a view names it.
    pub fn label(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The whole URL of the prefix.
    pub fn url(&self) -> String {
        format!(
            "{}://{}{}",
            if self.tls { "https" } else { "http" },
            self.label(),
            self.prefix
        )
    }
}

/// How a client proves who it is, read from files at each request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    /// `Authorization: Bearer` with the file's first line.
    BearerTokenFile(PathBuf),
    /// Basic auth with the file's first line, `USER:PASSWORD`.
    BasicAuthFile(PathBuf),
}

/// TLS settings beyond the system's trust store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// Trust only the certificates of this PEM file.
    pub ca_file: Option<PathBuf>,
    /// A client certificate (PEM) with its key, for servers that ask for one.
    pub cert_file: Option<PathBuf>,
    /// The client certificate's key (PEM).
    pub key_file: Option<PathBuf>,
}

/// Why a client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A file could not be read.
    #[error("{}: {error}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        error: crate::files::ReadError,
    },
    /// A certificate or key file holds none, or one rustls refuses.
    #[error("{}: {reason}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A client certificate without its key, or a key without its certificate.
    #[error("a client certificate needs both its certificate and its key file")]
    HalfAClientCertificate,
    /// TLS could not be set up.
    #[error("TLS: {0}")]
    Tls(rustls::Error),
    /// The system's trust store had no certificate.
    #[error("no trusted certificates in the system's store; give a CA file")]
    NoRoots,
}

/// Why a request got no answer to use.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The credentials file could not be read.
    #[error("credentials: {0}")]
    Credentials(String),
    /// The name did not resolve.
    #[error("cannot resolve: {0}")]
    Resolve(std::io::Error),
    /// The name resolved to no address.
    #[error("cannot resolve")]
    NoAddress,
    /// The connection failed.
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    /// The TLS handshake failed.
    #[error("TLS: {0}")]
    Tls(std::io::Error),
    /// HTTP went wrong (a malformed answer, a closed connection).
    #[error("HTTP: {0}")]
    Protocol(hyper::Error),
    /// The body could not be read.
    #[error("cannot read the answer: {0}")]
    Body(String),
    /// No whole answer within the deadline.
    #[error("no whole answer within {} s", .0.as_secs_f64())]
    Late(Duration),
    /// An answer over the size cap.
    #[error("answer larger than {} MiB", .0 >> 20)]
    TooLarge(usize),
    /// An HTTP status other than 200, with the start of the body (for the server's reason).
    #[error("answered HTTP {status}")]
    Status {
        /// The status code.
        status: u16,
        /// The first bytes of the body.
        body: Bytes,
    },
}

/// An HTTP client for one endpoint.
#[derive(Clone)]
pub struct Client {
    endpoint: Endpoint,
    tls: Option<tokio_rustls::TlsConnector>,
    credentials: Option<Credentials>,
    deadline: Duration,
    body_max: usize,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.endpoint)
            .field("credentials", &self.credentials)
            .field("deadline", &self.deadline)
            .field("body_max", &self.body_max)
            .finish_non_exhaustive()
    }
}

/// Most bytes of an error answer kept for its reason.
const ERROR_BODY_KEPT: usize = 4096;

impl Client {
    /// A client of `endpoint` whose requests take at most `deadline` and whose answers are at
    /// most `body_max` bytes. TLS (for https) trusts `tls.ca_file`, else the system's store.
    pub fn new(
        endpoint: Endpoint,
        tls: &TlsFiles,
        credentials: Option<Credentials>,
        deadline: Duration,
        body_max: usize,
    ) -> Result<Self, SetupError> {
        let tls = endpoint.tls.then(|| tls_connector(tls)).transpose()?;
        Ok(Self {
            endpoint,
            tls,
            credentials,
            deadline,
            body_max,
        })
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// GET `path_and_query` (after the endpoint's prefix): the body of a 200 answer.
    pub async fn get(&self, path_and_query: &str) -> Result<Bytes, HttpError> {
        tokio::time::timeout(self.deadline, self.exchange(path_and_query))
            .await
            .unwrap_or(Err(HttpError::Late(self.deadline)))
    }

    async fn exchange(&self, path_and_query: &str) -> Result<Bytes, HttpError> {
        let authorization = self.authorization()?;
        let address = tokio::net::lookup_host((self.endpoint.host.as_str(), self.endpoint.port))
            .await
            .map_err(HttpError::Resolve)?
            .next()
            .ok_or(HttpError::NoAddress)?;
        let tcp = tokio::net::TcpStream::connect(address)
            .await
            .map_err(HttpError::Connect)?;
        let _ = tcp.set_nodelay(true);
        let mut request = hyper::Request::get(format!("{}{path_and_query}", self.endpoint.prefix))
            .header(hyper::header::HOST, self.endpoint.label())
            .header(hyper::header::ACCEPT, "application/json");
        if let Some(value) = authorization {
            request = request.header(hyper::header::AUTHORIZATION, value);
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|e| HttpError::Body(e.to_string()))?;
        match &self.tls {
            None => self.send(tcp, request).await,
            Some(connector) => {
                let name = ServerName::try_from(self.endpoint.host.clone())
                    .map_err(|e| HttpError::Tls(std::io::Error::other(e)))?;
                let stream = connector.connect(name, tcp).await.map_err(HttpError::Tls)?;
                self.send(stream, request).await
            }
        }
    }

    async fn send<S>(&self, stream: S, request: hyper::Request<Empty<Bytes>>) -> Result<Bytes, HttpError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(HttpError::Protocol)?;
        // The connection is driven beside the request; it ends with the answer (or with the
        // deadline, which drops both).
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        let answer = async {
            let response = sender.send_request(request).await.map_err(HttpError::Protocol)?;
            let status = response.status().as_u16();
            let cap = if status == 200 {
                self.body_max
            } else {
                ERROR_BODY_KEPT
            };
            let body = Limited::new(response.into_body(), cap).collect().await;
            match body {
                Ok(body) if status == 200 => Ok(body.to_bytes()),
                Ok(body) => Err(HttpError::Status {
                    status,
                    body: body.to_bytes(),
                }),
                Err(_) if status != 200 => Err(HttpError::Status {
                    status,
                    body: Bytes::new(),
                }),
                Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(HttpError::TooLarge(cap)),
                Err(e) => Err(HttpError::Body(e.to_string())),
            }
        }
        .await;
        driver.abort();
        answer
    }

    fn authorization(&self) -> Result<Option<String>, HttpError> {
        let first_line = |path: &Path| -> Result<String, HttpError> {
            let text = crate::files::read_text(path, 64 << 10)
                .map_err(|e| HttpError::Credentials(format!("{}: {e}", path.display())))?;
            let line = text.lines().next().unwrap_or("").trim().to_string();
            if line.is_empty() {
                return Err(HttpError::Credentials(format!("{}: empty", path.display())));
            }
            Ok(line)
        };
        Ok(match &self.credentials {
            None => None,
            Some(Credentials::BearerTokenFile(path)) => Some(format!("Bearer {}", first_line(path)?)),
            Some(Credentials::BasicAuthFile(path)) => {
                let pair = first_line(path)?;
                if !pair.contains(':') {
                    return Err(HttpError::Credentials(format!(
                        "{}: expected USER:PASSWORD on its first line",
                        path.display()
                    )));
                }
                Some(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(pair)
                ))
            }
        })
    }
}

fn tls_connector(files: &TlsFiles) -> Result<tokio_rustls::TlsConnector, SetupError> {
    // Bounded, and never waiting on a FIFO: the paths come from the command line.
    let read = |path: &Path| {
        crate::files::read_pem(path).map_err(|error| SetupError::File {
            path: path.to_path_buf(),
            error,
        })
    };
    let pem_error = |path: &Path, reason: String| SetupError::Pem {
        path: path.to_path_buf(),
        reason,
    };
    let mut roots = rustls::RootCertStore::empty();
    match &files.ca_file {
        Some(path) => {
            for cert in CertificateDer::pem_slice_iter(&read(path)?) {
                let cert = cert.map_err(|e| pem_error(path, e.to_string()))?;
                roots.add(cert).map_err(|e| pem_error(path, e.to_string()))?;
            }
            if roots.is_empty() {
                return Err(pem_error(path, "no certificate in it".into()));
            }
        }
        None => {
            // Certificates the platform cannot parse are skipped, as browsers do.
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(SetupError::NoRoots);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(SetupError::Tls)?
        .with_root_certificates(roots);
    let config = match (&files.cert_file, &files.key_file) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(cert)?)
                .collect::<Result<_, _>>()
                .map_err(|e| pem_error(cert, e.to_string()))?;
            if chain.is_empty() {
                return Err(pem_error(cert, "no certificate in it".into()));
            }
            let private =
                PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|e| pem_error(key, e.to_string()))?;
            builder
                .with_client_auth_cert(chain, private)
                .map_err(SetupError::Tls)?
        }
        _ => return Err(SetupError::HalfAClientCertificate),
    };
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// A runtime for a feed's thread: one thread, its I/O and timers.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
}

/// A feed's own thread, running a task on its own [`runtime`]; dropping it asks the task to
/// stop (through [`Stop`]) and waits for the thread.
#[derive(Debug)]
pub struct FeedThread {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Whether a [`FeedThread`]'s owner has let it go: its task looks between refreshes.
#[derive(Debug)]
pub struct Stop(std::sync::mpsc::Receiver<()>);

impl Stop {
    /// The task should end.
    pub fn asked(&self) -> bool {
        !matches!(self.0.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty))
    }
}

impl FeedThread {
    /// Starts `task` on a thread called `name`.
    pub fn spawn<F, T>(name: &str, task: T) -> std::io::Result<Self>
    where
        T: FnOnce(Stop) -> F + Send + 'static,
        F: std::future::Future<Output = ()>,
    {
        let (stop, stopped) = std::sync::mpsc::channel();
        let runtime = runtime()?;
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || runtime.block_on(task(Stop(stopped))))?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for FeedThread {
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
    fn addresses() {
        let e = Endpoint::parse("http://gpu-01:9835/", 9835).unwrap();
        assert_eq!(
            (e.tls, e.host.as_str(), e.port, e.prefix.as_str()),
            (false, "gpu-01", 9835, "")
        );
        assert_eq!(Endpoint::parse("gpu-02", 9835).unwrap().port, 9835);
        assert_eq!(Endpoint::parse("10.0.0.7:9900", 9835).unwrap().port, 9900);
        let e = Endpoint::parse("https://prom.example/prometheus/", 9090).unwrap();
        assert_eq!((e.tls, e.port, e.prefix.as_str()), (true, 443, "/prometheus"));
        assert_eq!(e.url(), "https://prom.example:443/prometheus");
        assert_eq!(Endpoint::parse("http://prometheus", 9090).unwrap().port, 80);
        let e = Endpoint::parse("http://[::1]:9090", 9090).unwrap();
        assert_eq!((e.host.as_str(), e.label()), ("::1", "[::1]:9090".to_string()));
        assert!(Endpoint::parse("ftp://x", 1).is_err());
        assert!(Endpoint::parse("gpu:port", 1).is_err());
        assert!(Endpoint::parse("user:pw@host", 1).is_err());
        assert!(Endpoint::parse("", 1).is_err());
    }
}

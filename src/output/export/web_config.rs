//! `gputop export --web-config-file`: TLS and basic authentication, read from a file in the
//! format of Prometheus's exporter-toolkit (node_exporter's `--web.config.file`):
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt          # PEM; relative paths are the file's own directory's
//!   key_file: server.key
//!   client_auth_type: RequireAndVerifyClientCert   # or VerifyClientCertIfGiven, NoClientCert
//!   client_ca_file: ca.crt
//!   min_version: TLS12             # or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$...         # bcrypt hashes (htpasswd -nBC 10 "" | tr -d ':\n')
//! ```
//!
//! TLS is rustls's; the certificate files are read once, at start.

use anyhow::{Context, anyhow, bail};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use base64::Engine;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use serde::Deserialize;

/// Longest web configuration read.
const MAX_BYTES: u64 = 64 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsFile>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
    http_server_config: Option<HttpFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: PathBuf,
    key_file: PathBuf,
    client_ca_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    min_version: Option<String>,
}

/// exporter-toolkit's HTTP options: gputop speaks HTTP/1.1 only, so `http2` may be false.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    http2: Option<bool>,
}

/// What the server does with each connection: TLS when configured, and the users whose
/// basic-auth credentials it accepts (none: no authentication).
#[derive(Debug, Default)]
pub struct WebConfig {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub auth: Option<BasicAuth>,
}

/// Reads and checks `path`: the YAML, the certificates and keys it names, the bcrypt
/// hashes. An error names the file (and line and column for the YAML).
pub fn load(path: &Path) -> anyhow::Result<WebConfig> {
    let shown = path.display();
    let text = gputop_core::files::read_text(path, MAX_BYTES).with_context(|| shown.to_string())?;
    let file: File = serde_norway::from_str(&text).map_err(|e| {
        let place = e
            .location()
            .map_or(String::new(), |l| format!(":{}:{}", l.line(), l.column()));
        // The crate's message repeats the place at its end.
        let message = e.to_string();
        let message = message.split(" at line ").next().unwrap_or(&message).to_string();
        anyhow!(gputop_core::format::sanitize(&format!(
            "{shown}{place}: {message}"
        )))
    })?;
    if file.http_server_config.and_then(|h| h.http2) == Some(true) {
        bail!("{shown}: http_server_config.http2: gputop serves HTTP/1.1 only; remove it or set false");
    }
    let directory = path.parent().unwrap_or(Path::new("."));
    let tls = file
        .tls_server_config
        .map(|t| tls_config(&t, directory).with_context(|| format!("{shown}: tls_server_config")))
        .transpose()?;
    let auth = if file.basic_auth_users.is_empty() {
        None
    } else {
        for (user, hash) in &file.basic_auth_users {
            if hash.parse::<bcrypt::HashParts>().is_err() {
                bail!(gputop_core::format::sanitize(&format!(
                    "{shown}: basic_auth_users: {user}: not a bcrypt hash (make one with \
                     htpasswd -nBC 10 \"\" | tr -d ':\\n')"
                )));
            }
        }
        Some(BasicAuth {
            users: file.basic_auth_users,
            accepted: Mutex::default(),
        })
    };
    Ok(WebConfig { tls, auth })
}

/// Which client certificates the server asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientCertificates {
    None,
    VerifiedIfGiven,
    Required,
}

fn tls_config(file: &TlsFile, directory: &Path) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    // The settings first, then the files they name.
    let versions: &[&rustls::SupportedProtocolVersion] = match file.min_version.as_deref() {
        None | Some("TLS12") => &[&rustls::version::TLS13, &rustls::version::TLS12],
        Some("TLS13") => &[&rustls::version::TLS13],
        Some(other) => bail!("min_version: {other}: expected TLS12 or TLS13"),
    };
    let clients = match file.client_auth_type.as_deref() {
        None | Some("NoClientCert") => ClientCertificates::None,
        Some("RequireAndVerifyClientCert") => ClientCertificates::Required,
        Some("VerifyClientCertIfGiven") => ClientCertificates::VerifiedIfGiven,
        Some(other @ ("RequestClientCert" | "RequireAnyClientCert")) => bail!(
            "client_auth_type: {other}: gputop does not take client certificates it cannot \
             verify; use RequireAndVerifyClientCert or VerifyClientCertIfGiven with client_ca_file"
        ),
        Some(other) => bail!(
            "client_auth_type: {other}: expected NoClientCert, VerifyClientCertIfGiven or \
             RequireAndVerifyClientCert"
        ),
    };
    let read_pem = |p: &Path| -> anyhow::Result<Vec<u8>> {
        let full = directory.join(p);
        gputop_core::files::read_pem(&full).with_context(|| full.display().to_string())
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read_pem(&file.cert_file)?)
        .collect::<Result<_, _>>()
        .context("cert_file")?;
    if certs.is_empty() {
        bail!("cert_file: no certificate in it");
    }
    let key = PrivateKeyDer::from_pem_slice(&read_pem(&file.key_file)?).context("key_file")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(versions)?;
    let builder = if clients == ClientCertificates::None {
        builder.with_no_client_auth()
    } else {
        let ca = file
            .client_ca_file
            .as_deref()
            .context("client_ca_file: needed to verify client certificates")?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&read_pem(ca)?) {
            roots
                .add(cert.context("client_ca_file")?)
                .context("client_ca_file")?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
        let verifier = if clients == ClientCertificates::VerifiedIfGiven {
            verifier.allow_unauthenticated()
        } else {
            verifier
        };
        builder.with_client_cert_verifier(verifier.build().context("client_ca_file")?)
    };
    let config = builder
        .with_single_cert(certs, key)
        .context("cert_file and key_file")?;
    Ok(Arc::new(config))
}

/// The users and their bcrypt hashes, and the `Authorization` values already accepted
/// (bcrypt costs tens of milliseconds by design; a scraper sends the same one every time).
#[derive(Debug)]
pub struct BasicAuth {
    users: BTreeMap<String, String>,
    accepted: Mutex<Vec<String>>,
}

/// `Authorization` values remembered as accepted.
const ACCEPTED_KEPT: usize = 16;

/// A hash to check unknown users' passwords against, so an answer takes as long whether the
/// user exists or not (made once, at bcrypt's default cost).
static NO_USER: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    bcrypt::hash("gputop: no such user", bcrypt::DEFAULT_COST).unwrap_or_default()
});

impl BasicAuth {
    /// Whether the request's `Authorization` header value carries a known user and the
    /// password of their hash.
    pub fn accepts(&self, authorization: Option<&str>) -> bool {
        let Some(value) = authorization else {
            return false;
        };
        let accepted = || self.accepted.lock().unwrap_or_else(|e| e.into_inner());
        if accepted().iter().any(|a| a == value) {
            return true;
        }
        let Some((user, password)) = credentials(value) else {
            return false;
        };
        let (hash, known) = match self.users.get(&user) {
            Some(hash) => (hash.as_str(), true),
            None => (NO_USER.as_str(), false),
        };
        // Not under the lock: other requests are not held up by this one's bcrypt.
        let matches = bcrypt::verify(&password, hash).unwrap_or(false);
        if known && matches {
            let mut accepted = accepted();
            if accepted.len() >= ACCEPTED_KEPT {
                accepted.remove(0);
            }
            accepted.push(value.to_string());
        }
        known && matches
    }
}

/// The user and password of a `Basic` credential.
fn credentials(value: &str) -> Option<(String, String)> {
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_decoded_and_checked_against_bcrypt_hashes() {
        assert_eq!(
            credentials("Basic YWxpY2U6czNjcjN0"),
            Some(("alice".into(), "s3cr3t".into()))
        );
        assert_eq!(credentials("Bearer YWxpY2U6czNjcjN0"), None);
        assert_eq!(credentials("Basic not-base64!"), None);
        let auth = BasicAuth {
            users: BTreeMap::from([("alice".into(), bcrypt::hash("s3cr3t", 4).unwrap())]),
            accepted: Mutex::default(),
        };
        assert!(auth.accepts(Some("Basic YWxpY2U6czNjcjN0")));
        assert!(
            auth.accepts(Some("Basic YWxpY2U6czNjcjN0")),
            "again, from the accepted"
        );
        // alice:wrong, bob:s3cr3t, none.
        assert!(!auth.accepts(Some("Basic YWxpY2U6d3Jvbmc=")));
        assert!(!auth.accepts(Some("Basic Ym9iOnMzY3IzdA==")));
        assert!(!auth.accepts(None));
    }
}

//! TLS for every outbound HTTP client: rustls with the aws-lc-rs provider.
//!
//! Trust is the platform's native roots plus the Mozilla roots of `webpki-root-certs`
//! (so a minimal container without a CA store still reaches public servers), plus an
//! optional extra [`CaBundle`] (a private CA; the `caBundlePath` keys). Every client
//! the gateway opens is built by [`http_client`] or [`blocking_http_client`], so the
//! rules are the same for backends, OIDC discovery and JWKS, token endpoints and OTLP.
//!
//! [`describe`] turns a failed connection into words a reader can act on
//! ("certificate not trusted: unknown issuer") without the URL or any header.

use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// Why a CA bundle or a TLS client could not be set up. The text names the file,
/// never its contents.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The path is relative or climbs with `..`.
    #[error("{path:?} must be an absolute path without \"..\"")]
    NotAbsolute {
        /// The configured path.
        path: PathBuf,
    },
    /// The file could not be read.
    #[error("cannot read {path:?}: {source}")]
    Read {
        /// The configured path.
        path: PathBuf,
        /// The I/O failure.
        source: std::io::Error,
    },
    /// The file is not PEM, or a certificate in it is malformed.
    #[error("{path:?} is not a PEM certificate bundle: {reason}")]
    BadPem {
        /// The configured path.
        path: PathBuf,
        /// What the PEM parser said.
        reason: String,
    },
    /// The file holds no `CERTIFICATE` block.
    #[error("{path:?} holds no PEM certificate")]
    NoCertificates {
        /// The configured path.
        path: PathBuf,
    },
    /// A certificate parsed as PEM but rustls refused it as a trust anchor.
    #[error("{path:?}: a certificate is not a usable CA: {reason}")]
    BadCertificate {
        /// The configured path.
        path: PathBuf,
        /// What rustls said.
        reason: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the HTTPS client: {0}")]
    Client(String),
}

/// Extra trust anchors from a PEM file (one or more `CERTIFICATE` blocks).
#[derive(Clone, PartialEq, Eq)]
pub struct CaBundle {
    path: PathBuf,
    certs: Vec<CertificateDer<'static>>,
}

impl std::fmt::Debug for CaBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaBundle")
            .field("path", &self.path)
            .field("certificates", &self.certs.len())
            .finish()
    }
}

impl CaBundle {
    /// Read and check `path`: absolute, no `..`, readable, PEM with at least one
    /// certificate, each a valid trust anchor.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, TlsError> {
        let path = path.as_ref().to_path_buf();
        if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
            return Err(TlsError::NotAbsolute { path });
        }
        let pem = std::fs::read(&path).map_err(|source| TlsError::Read {
            path: path.clone(),
            source,
        })?;
        Self::from_pem(path, &pem)
    }

    /// Parse PEM bytes; `path` is only used in messages.
    pub fn from_pem(path: impl Into<PathBuf>, pem: &[u8]) -> Result<Self, TlsError> {
        let path = path.into();
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::BadPem {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        if certs.is_empty() {
            return Err(TlsError::NoCertificates { path });
        }
        // Refuse now what the verifier would refuse on the first connection.
        let mut store = rustls::RootCertStore::empty();
        for cert in &certs {
            store
                .add(cert.clone())
                .map_err(|e| TlsError::BadCertificate {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
        }
        Ok(Self { path, certs })
    }

    /// The file the bundle came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many certificates it holds.
    pub fn len(&self) -> usize {
        self.certs.len()
    }

    /// Always false: a bundle without certificates is refused by [`CaBundle::load`].
    pub fn is_empty(&self) -> bool {
        self.certs.is_empty()
    }
}

/// The default trust anchors as certificates: the Mozilla roots of
/// `webpki-root-certs`, then the platform's that rustls accepts as anchors. Read once
/// per process: reading the platform store touches the file system and is the same
/// for every client.
pub fn default_certificates() -> &'static [CertificateDer<'static>] {
    static CERTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    CERTS.get_or_init(|| {
        let mut certs = webpki_root_certs::TLS_SERVER_ROOT_CERTS.to_vec();
        let native = rustls_native_certs::load_native_certs();
        if !native.errors.is_empty() {
            tracing::debug!(
                errors = native.errors.len(),
                "some platform CA certificates could not be read"
            );
        }
        let (mut added, mut ignored) = (0usize, 0usize);
        for cert in native.certs {
            // Only what a RootCertStore takes: a client that is handed these as PEM
            // (the redis crate) refuses the whole set over one bad anchor.
            if rustls::RootCertStore::empty().add(cert.clone()).is_ok() {
                certs.push(cert);
                added += 1;
            } else {
                ignored += 1;
            }
        }
        tracing::debug!(added, ignored, "platform CA certificates loaded");
        certs
    })
}

/// The default roots as a store, built once.
fn default_roots() -> &'static rustls::RootCertStore {
    static ROOTS: OnceLock<rustls::RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let mut store = rustls::RootCertStore::empty();
        store.add_parsable_certificates(default_certificates().iter().cloned());
        store
    })
}

/// The default roots and `extra`, PEM-encoded: for a client that takes its trust
/// anchors as PEM instead of a rustls configuration (the redis crate's
/// `TlsCertificates::root_cert`), so it trusts exactly what [`client_config`] does.
pub fn roots_pem(extra: Option<&CaBundle>) -> Vec<u8> {
    use base64::Engine as _;
    let extra = extra.map(|b| b.certs.as_slice()).unwrap_or_default();
    let mut pem = Vec::new();
    for cert in default_certificates().iter().chain(extra) {
        let body = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        pem.extend_from_slice(b"-----BEGIN CERTIFICATE-----\n");
        for line in body.as_bytes().chunks(64) {
            pem.extend_from_slice(line);
            pem.push(b'\n');
        }
        pem.extend_from_slice(b"-----END CERTIFICATE-----\n");
    }
    pem
}

/// The rustls client configuration for the given extra trust anchors.
pub fn client_config(extra: Option<&CaBundle>) -> Arc<rustls::ClientConfig> {
    let mut roots = default_roots().clone();
    if let Some(bundle) = extra {
        // Checked by `CaBundle::from_pem`; a failure here cannot happen.
        roots.add_parsable_certificates(bundle.certs.iter().cloned());
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(roots).with_no_client_auth());
    match config {
        Ok(config) => Arc::new(config),
        // The aws-lc-rs provider supports the default versions; keep going with
        // reqwest's own defaults rather than panic if that ever changes.
        Err(e) => {
            tracing::error!(error = %e, "rustls refused the default protocol versions");
            Arc::new(
                rustls::ClientConfig::builder()
                    .with_root_certificates(default_roots().clone())
                    .with_no_client_auth(),
            )
        }
    }
}

/// Finish `builder` with this module's TLS rules and build it.
pub fn http_client(
    builder: reqwest::ClientBuilder,
    extra: Option<&CaBundle>,
) -> Result<reqwest::Client, TlsError> {
    builder
        .tls_backend_preconfigured((*client_config(extra)).clone())
        .build()
        .map_err(|e| TlsError::Client(e.to_string()))
}

/// A blocking client (for the OTLP exporter, which sends from its own threads) with
/// this module's TLS rules. Built on a fresh thread: reqwest's blocking client owns a
/// runtime and must not be created inside an async one.
#[cfg(feature = "otel")]
pub fn blocking_http_client(
    timeout: std::time::Duration,
    extra: Option<&CaBundle>,
) -> Result<reqwest::blocking::Client, TlsError> {
    let config = (*client_config(extra)).clone();
    std::thread::Builder::new()
        .name("vmcp-blocking-http".into())
        .spawn(move || {
            reqwest::blocking::Client::builder()
                .timeout(timeout)
                .tls_backend_preconfigured(config)
                .build()
        })
        .map_err(|e| TlsError::Client(e.to_string()))?
        .join()
        .map_err(|_| TlsError::Client("the client thread panicked".into()))?
        .map_err(|e| TlsError::Client(e.to_string()))
}

/// Words for a TLS failure somewhere in `error`'s source chain, or `None` when the
/// failure was not about TLS. Never includes URLs, headers or certificate contents.
pub fn describe(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut source = Some(error);
    while let Some(e) = source {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(describe_rustls(tls));
        }
        // io::Error::source skips the error it wraps, and rustls errors arrive
        // wrapped in one (or two: hyper-util wraps the handshake's io::Error again).
        source = match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

fn describe_rustls(error: &rustls::Error) -> String {
    use rustls::{CertificateError as C, Error as E};
    match error {
        E::InvalidCertificate(cert) => {
            let why = match cert {
                C::UnknownIssuer => "unknown issuer",
                C::Expired | C::ExpiredContext { .. } => "expired",
                C::NotValidYet | C::NotValidYetContext { .. } => "not valid yet",
                C::NotValidForName | C::NotValidForNameContext { .. } => {
                    "not valid for this host name"
                }
                C::Revoked => "revoked",
                C::BadSignature => "bad signature",
                C::InvalidPurpose | C::InvalidPurposeContext { .. } => "not a server certificate",
                C::BadEncoding => "malformed certificate",
                C::UnhandledCriticalExtension => "an unsupported critical extension",
                C::UnknownRevocationStatus => "revocation status unknown",
                C::ExpiredRevocationList | C::ExpiredRevocationListContext { .. } => {
                    "the revocation list has expired"
                }
                C::UnsupportedSignatureAlgorithmContext { .. }
                | C::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => {
                    "unsupported signature algorithm"
                }
                C::InvalidOcspResponse => "invalid OCSP response",
                C::Other(other) => other
                    .0
                    .downcast_ref::<webpki::Error>()
                    .map_or("refused by the certificate verifier", describe_webpki),
                _ => "refused by the certificate verifier",
            };
            format!("certificate not trusted: {why}")
        }
        E::AlertReceived(alert) => format!(
            "TLS handshake refused by the server: {}",
            words(&format!("{alert:?}"))
        ),
        E::NoCertificatesPresented => "TLS handshake failed: no certificate presented".into(),
        E::PeerIncompatible(why) => format!(
            "TLS handshake failed: incompatible peer ({})",
            words(&format!("{why:?}"))
        ),
        E::InvalidMessage(_) | E::InappropriateMessage { .. } => {
            "TLS handshake failed: not a TLS server (or a broken one)".into()
        }
        other => format!("TLS failure: {other}"),
    }
}

/// The verifier's reasons that rustls passes on as `Other` (its `Display` is the
/// variant's name).
fn describe_webpki(error: &webpki::Error) -> &'static str {
    use webpki::Error as W;
    match error {
        W::CaUsedAsEndEntity => "the server presented a CA certificate as its own",
        W::EndEntityUsedAsCa => "the issuer is not a certificate authority",
        W::PathLenConstraintViolated => "the chain is longer than a CA allows",
        W::NameConstraintViolation => "the name is outside its CA's name constraints",
        W::MaximumPathDepthExceeded
        | W::MaximumPathBuildCallsExceeded
        | W::MaximumSignatureChecksExceeded
        | W::MaximumNameConstraintComparisonsExceeded => "the chain is too long or too complex",
        W::UnsupportedCertVersion => "unsupported certificate version",
        W::UnsupportedCriticalExtension => "an unsupported critical extension",
        W::SignatureAlgorithmMismatch => "inconsistent signature algorithms",
        W::EmptyEkuExtension | W::ExtensionValueInvalid | W::InvalidSerialNumber => {
            "malformed certificate"
        }
        _ => "refused by the certificate verifier",
    }
}

/// `HandshakeFailure` → `handshake failure`: a Debug name read as words.
fn words(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push(' ');
            }
            out.push(c.to_ascii_lowercase());
        } else if c.is_ascii_alphanumeric() || c == ' ' {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_pem_holds_every_default_anchor_then_the_bundle() {
        let defaults = default_certificates();
        assert!(
            defaults.len() >= webpki_root_certs::TLS_SERVER_ROOT_CERTS.len(),
            "the Mozilla roots are part of the defaults"
        );
        let pem = roots_pem(None);
        let back: Vec<_> = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(back.as_slice(), defaults, "PEM round-trips to the same DER");
        // A bundle of one of them (any valid CA) comes last, after all the defaults.
        let one = CaBundle::from_pem("/extra.pem", &pem[..=pem_end(&pem)]).unwrap();
        let with = roots_pem(Some(&one));
        let back: Vec<_> = CertificateDer::pem_slice_iter(&with)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(back.len(), defaults.len() + 1);
        assert_eq!(back.last(), defaults.first());
        let mut store = rustls::RootCertStore::empty();
        for cert in back {
            store.add(cert).expect("every anchor is one rustls takes");
        }
    }

    /// The index of the last byte of the first PEM block.
    fn pem_end(pem: &[u8]) -> usize {
        let end = b"-----END CERTIFICATE-----\n";
        pem.windows(end.len()).position(|w| w == end).unwrap() + end.len() - 1
    }

    #[test]
    fn relative_and_climbing_paths_are_refused() {
        assert!(matches!(
            CaBundle::load("ca.pem"),
            Err(TlsError::NotAbsolute { .. })
        ));
        assert!(matches!(
            CaBundle::load("/etc/../etc/ssl/ca.pem"),
            Err(TlsError::NotAbsolute { .. })
        ));
    }

    #[test]
    fn a_missing_file_names_the_path() {
        let e = CaBundle::load("/nonexistent/vmcp-ca.pem").unwrap_err();
        assert!(e.to_string().contains("/nonexistent/vmcp-ca.pem"), "{e}");
    }

    #[test]
    fn pem_without_certificates_is_refused() {
        let e = CaBundle::from_pem("/x.pem", b"just some text\n").unwrap_err();
        assert!(matches!(e, TlsError::NoCertificates { .. }), "{e}");
        let key = b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        let e = CaBundle::from_pem("/x.pem", key).unwrap_err();
        assert!(matches!(e, TlsError::NoCertificates { .. }), "{e}");
    }

    #[test]
    fn a_garbage_certificate_is_refused() {
        let pem = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let e = CaBundle::from_pem("/x.pem", pem).unwrap_err();
        assert!(
            matches!(e, TlsError::BadCertificate { .. } | TlsError::BadPem { .. }),
            "{e}"
        );
    }

    #[test]
    fn unknown_issuer_reads_as_words_through_io_wrapping() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let inner = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        let io = std::io::Error::other(inner);
        assert_eq!(
            describe(&io).as_deref(),
            Some("certificate not trusted: unknown issuer")
        );
        let plain = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(describe(&plain), None);
    }

    #[test]
    fn verifier_reasons_are_words() {
        let other = rustls::OtherError(std::sync::Arc::new(webpki::Error::CaUsedAsEndEntity));
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other));
        assert_eq!(
            describe(&std::io::Error::other(tls)).as_deref(),
            Some("certificate not trusted: the server presented a CA certificate as its own")
        );
        let alert = rustls::Error::AlertReceived(rustls::AlertDescription::HandshakeFailure);
        assert_eq!(
            describe(&std::io::Error::other(alert)).as_deref(),
            Some("TLS handshake refused by the server: handshake failure")
        );
    }

    #[test]
    fn the_default_config_has_roots() {
        assert!(!default_roots().is_empty());
        let _ = client_config(None);
    }
}

//! TLS for the tests: a certificate authority generated at test time (`rcgen`), server
//! certificates it issues for loopback, PEM files on disk for `caBundlePath`, and a
//! loopback HTTPS server for any axum router (tokio-rustls + hyper-util).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;

/// A throw-away certificate authority.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate, PEM.
    pub pem: String,
    dir: PathBuf,
}

/// A server certificate (for `localhost` and `127.0.0.1`) and its key, PEM.
#[derive(Clone)]
pub struct ServerCert {
    /// Certificate chain, PEM.
    pub cert_pem: String,
    /// Private key (PKCS#8), PEM.
    pub key_pem: String,
    /// Where `cert_pem` is written.
    pub cert_file: PathBuf,
    /// Where `key_pem` is written.
    pub key_file: PathBuf,
}

fn unique_dir() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "vmcp-tls-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).expect("create a temp dir for certificates");
    dir
}

impl TestCa {
    /// A fresh CA (its own key, self-signed).
    pub fn generate(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("self-signed CA");
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
            dir: unique_dir(),
        }
    }

    /// The CA certificate written to a PEM file (an absolute path).
    pub fn ca_file(&self) -> PathBuf {
        let path = self.dir.join("ca.pem");
        std::fs::write(&path, &self.pem).expect("write the CA file");
        path
    }

    /// A server certificate for `localhost` and `127.0.0.1`, written to files.
    pub fn server_cert(&self, label: &str) -> ServerCert {
        let params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("server params");
        let key = KeyPair::generate().expect("server key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign server");
        let cert_file = self.dir.join(format!("{label}.crt"));
        let key_file = self.dir.join(format!("{label}.key"));
        std::fs::write(&cert_file, cert.pem()).expect("write cert");
        std::fs::write(&key_file, key.serialize_pem()).expect("write key");
        ServerCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_file,
            key_file,
        }
    }
}

/// A CA certificate (self-signed, `CA:TRUE`, for `localhost` and `127.0.0.1`) served
/// as a server's own certificate: what a misconfigured server presents. Its
/// `cert_file` is also the bundle that trusts it.
pub fn ca_as_server_cert(label: &str) -> ServerCert {
    let mut params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, label);
    let key = KeyPair::generate().expect("CA key");
    let cert = params.self_signed(&key).expect("self-signed CA");
    let dir = unique_dir();
    let cert_file = dir.join(format!("{label}.crt"));
    let key_file = dir.join(format!("{label}.key"));
    std::fs::write(&cert_file, cert.pem()).expect("write cert");
    std::fs::write(&key_file, key.serialize_pem()).expect("write key");
    ServerCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        cert_file,
        key_file,
    }
}

impl Drop for TestCa {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl ServerCert {
    fn server_config(&self) -> rustls::ServerConfig {
        let certs = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("server cert PEM");
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).expect("server key PEM");
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("server TLS config");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config
    }
}

/// A client that trusts only `ca` (to talk to the test servers directly).
pub fn client_trusting(ca: &TestCa) -> reqwest::Client {
    let bundle = vmcp_layers::tls::CaBundle::from_pem("/test-ca.pem", ca.pem.as_bytes())
        .expect("test CA parses");
    vmcp_layers::tls::http_client(reqwest::Client::builder(), Some(&bundle))
        .expect("an HTTPS client")
}

/// Serve `router` over HTTPS on a free loopback port until the token is cancelled.
/// Failed handshakes are counted, not fatal (a client refusing our certificate is
/// what some tests are about).
pub async fn serve_tls_on_loopback(
    router: axum::Router,
    cert: &ServerCert,
) -> (SocketAddr, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("listener addr");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cert.server_config()));
    let stop = CancellationToken::new();
    let token = stop.clone();
    tokio::spawn(async move {
        loop {
            let tcp = tokio::select! {
                _ = token.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(_) => continue,
                },
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let router = router.clone();
            let token = token.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(router);
                let builder = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                let conn = builder
                    .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(tls), service);
                tokio::select! {
                    _ = conn => {}
                    _ = token.cancelled() => {}
                }
            });
        }
    });
    (addr, stop)
}

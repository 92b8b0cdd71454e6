//! A real OIDC issuer on loopback for the authentication tests: RSA keys generated
//! at start (aws-lc-rs), `/.well-known/openid-configuration` and a JWKS served over
//! HTTP or HTTPS, tokens signed with jsonwebtoken, key rotation, and a count of JWKS fetches.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rsa::{KeyPair, KeySize};
use aws_lc_rs::signature::KeyPair as _;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// One signing key: its `kid`, PKCS#1 private key, and public JWK.
#[derive(Clone)]
pub struct SigningKey {
    /// The key id.
    pub kid: String,
    pkcs1: Vec<u8>,
    /// The public key as a JWK.
    pub jwk: Value,
    /// The modulus bytes (what an attacker knows of the public key).
    pub modulus: Vec<u8>,
}

/// Read one DER TLV at `input`: (tag, content, rest).
fn der(input: &[u8]) -> (u8, &[u8], &[u8]) {
    let tag = input[0];
    let (len, header) = if input[1] < 0x80 {
        (input[1] as usize, 2)
    } else {
        let n = (input[1] & 0x7f) as usize;
        let len = input[2..2 + n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize);
        (len, 2 + n)
    };
    (tag, &input[header..header + len], &input[header + len..])
}

fn strip_zero(int: &[u8]) -> &[u8] {
    if int.len() > 1 && int[0] == 0 {
        &int[1..]
    } else {
        int
    }
}

impl SigningKey {
    /// A fresh RSA-2048 key.
    pub fn generate(kid: &str) -> Self {
        let pair = KeyPair::generate(KeySize::Rsa2048).expect("RSA key generation");
        let pkcs8 = AsDer::<aws_lc_rs::encoding::Pkcs8V1Der>::as_der(&pair).expect("PKCS#8");
        // PrivateKeyInfo ::= SEQUENCE { version, algorithm, privateKey OCTET STRING }
        let (_, info, _) = der(pkcs8.as_ref());
        let (_, _, rest) = der(info);
        let (_, _, rest) = der(rest);
        let (_, pkcs1, _) = der(rest);
        // RSAPublicKey ::= SEQUENCE { modulus INTEGER, publicExponent INTEGER }
        let (_, public, _) = der(pair.public_key().as_ref());
        let (_, n, rest) = der(public);
        let (_, e, _) = der(rest);
        let (n, e) = (strip_zero(n), strip_zero(e));
        Self {
            kid: kid.to_owned(),
            pkcs1: pkcs1.to_vec(),
            jwk: json!({
                "kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
                "n": URL_SAFE_NO_PAD.encode(n), "e": URL_SAFE_NO_PAD.encode(e),
            }),
            modulus: n.to_vec(),
        }
    }

    /// Sign `claims` as an RS256 JWT with this key.
    pub fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &EncodingKey::from_rsa_der(&self.pkcs1))
            .expect("sign a token")
    }
}

/// The issuer: its keys (the published ones and spares) and its HTTP server.
pub struct Idp {
    /// The issuer URL (`iss`), `http://127.0.0.1:<port>`.
    pub issuer: String,
    /// The published key set.
    published: Arc<Mutex<Vec<Value>>>,
    jwks_fetches: Arc<AtomicU64>,
    stop: CancellationToken,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Drop for Idp {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

impl Idp {
    /// Start an issuer publishing `keys`, over plain HTTP.
    pub async fn start(keys: &[&SigningKey]) -> Self {
        Self::start_with(keys, None).await
    }

    /// Start an issuer publishing `keys` over HTTPS with `cert` (`https://127.0.0.1:<port>`).
    pub async fn start_tls(keys: &[&SigningKey], cert: &crate::tls::ServerCert) -> Self {
        Self::start_with(keys, Some(cert)).await
    }

    async fn start_with(keys: &[&SigningKey], tls: Option<&crate::tls::ServerCert>) -> Self {
        let published: Arc<Mutex<Vec<Value>>> =
            Arc::new(Mutex::new(keys.iter().map(|k| k.jwk.clone()).collect()));
        let jwks_fetches = Arc::new(AtomicU64::new(0));
        // The discovery document names the issuer URL, known once the port is bound.
        let issuer_slot: Arc<Mutex<String>> = Arc::default();
        let app = {
            let published = published.clone();
            let fetches = jwks_fetches.clone();
            let issuer_slot = issuer_slot.clone();
            axum::Router::new()
                .route(
                    "/.well-known/openid-configuration",
                    axum::routing::get(move || {
                        let issuer = issuer_slot.lock().unwrap().clone();
                        async move {
                            axum::Json(json!({
                                "issuer": issuer,
                                "jwks_uri": format!("{issuer}/jwks"),
                                "id_token_signing_alg_values_supported": ["RS256"],
                            }))
                        }
                    }),
                )
                .route(
                    "/jwks",
                    axum::routing::get(move || {
                        fetches.fetch_add(1, Ordering::SeqCst);
                        let keys = published.lock().unwrap().clone();
                        async move { axum::Json(json!({ "keys": keys })) }
                    }),
                )
        };
        let (issuer, addr, stop) = match tls {
            None => {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind idp");
                let addr = listener.local_addr().expect("idp addr");
                let stop = CancellationToken::new();
                let token = stop.clone();
                tokio::spawn(async move {
                    let _ = axum::serve(listener, app)
                        .with_graceful_shutdown(async move { token.cancelled_owned().await })
                        .await;
                });
                (format!("http://{addr}"), addr, stop)
            }
            Some(cert) => {
                let (addr, stop) = crate::tls::serve_tls_on_loopback(app, cert).await;
                (format!("https://{addr}"), addr, stop)
            }
        };
        *issuer_slot.lock().unwrap() = issuer.clone();
        Self {
            issuer,
            published,
            jwks_fetches,
            stop,
            addr,
        }
    }

    /// Publish `key` (rotation: new keys are added next to the old ones).
    pub fn publish(&self, key: &SigningKey) {
        self.published.lock().unwrap().push(key.jwk.clone());
    }

    /// How many times the JWKS was fetched.
    pub fn jwks_fetches(&self) -> u64 {
        self.jwks_fetches.load(Ordering::SeqCst)
    }

    /// Standard claims for `sub` with audience `vmcp`, valid for an hour, plus `extra`.
    pub fn claims(&self, sub: &str, extra: Value) -> Value {
        let mut claims = json!({
            "iss": self.issuer, "aud": "vmcp", "sub": sub,
            "iat": now(), "nbf": now() - 5, "exp": now() + 3600,
        });
        if let (Some(c), Some(e)) = (claims.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                c.insert(k.clone(), v.clone());
            }
        }
        claims
    }
}

/// An unsigned `alg: none` token for `claims`.
pub fn none_token(claims: &Value) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
    let body = URL_SAFE_NO_PAD.encode(claims.to_string());
    format!("{header}.{body}.")
}

/// An HS256 token whose HMAC secret is the public key's modulus, claiming `kid`.
pub fn hs256_with_public_key(key: &SigningKey, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(key.kid.clone());
    let secret = EncodingKey::from_secret(&key.modulus).expect("an HMAC key");
    jsonwebtoken::encode(&header, claims, &secret).expect("sign HS256")
}

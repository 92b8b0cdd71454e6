//! The token issuer of variant (c): an RSA-2048 key generated at start (aws-lc-rs),
//! its public half as a JWK set for the gateway's JWT validator, and RS256 tokens
//! signed with it (jsonwebtoken). Nothing is served: the validator is given the key
//! set directly, as a deployment with keys distributed out of band would be.
//!
//! The DER handling is the minimum taken from the test issuer (`tests/src/idp.rs`):
//! aws-lc-rs exports the private key as PKCS#8 while jsonwebtoken signs with PKCS#1,
//! and the JWK needs the modulus and exponent of the public key.

use aws_lc_rs::encoding::{AsDer, Pkcs8V1Der};
use aws_lc_rs::rsa::{KeyPair, KeySize};
use aws_lc_rs::signature::KeyPair as _;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

/// The `iss` of every token (never fetched: the validator has the keys).
pub const ISSUER: &str = "https://idp.vmcp-bench.invalid";
/// The `aud` of every token.
pub const AUDIENCE: &str = "vmcp-bench";

/// One RSA signing key and its `kid`.
pub struct Issuer {
    kid: String,
    pkcs1: Vec<u8>,
    jwk: Value,
}

/// Read one DER TLV at `input`: (content, rest).
fn der(input: &[u8]) -> Result<(&[u8], &[u8]), String> {
    let bad = || "malformed DER from aws-lc-rs".to_owned();
    let first = *input.get(1).ok_or_else(bad)?;
    let (len, header) = if first < 0x80 {
        (first as usize, 2)
    } else {
        let n = (first & 0x7f) as usize;
        let bytes = input.get(2..2 + n).ok_or_else(bad)?;
        (
            bytes.iter().fold(0usize, |acc, b| (acc << 8) | *b as usize),
            2 + n,
        )
    };
    let content = input.get(header..header + len).ok_or_else(bad)?;
    Ok((content, &input[header + len..]))
}

/// An unsigned big-endian DER INTEGER without its sign byte.
fn unsigned(int: &[u8]) -> &[u8] {
    match int {
        [0, rest @ ..] if !rest.is_empty() => rest,
        _ => int,
    }
}

impl Issuer {
    /// A fresh RSA-2048 key called `kid`.
    pub fn generate(kid: &str) -> Result<Self, String> {
        let pair = KeyPair::generate(KeySize::Rsa2048).map_err(|e| format!("RSA key: {e}"))?;
        let pkcs8 = AsDer::<Pkcs8V1Der>::as_der(&pair).map_err(|e| format!("PKCS#8: {e}"))?;
        // PrivateKeyInfo ::= SEQUENCE { version, algorithm, privateKey OCTET STRING }
        let (info, _) = der(pkcs8.as_ref())?;
        let (_, rest) = der(info)?;
        let (_, rest) = der(rest)?;
        let (pkcs1, _) = der(rest)?;
        // RSAPublicKey ::= SEQUENCE { modulus INTEGER, publicExponent INTEGER }
        let (public, _) = der(pair.public_key().as_ref())?;
        let (n, rest) = der(public)?;
        let (e, _) = der(rest)?;
        Ok(Self {
            kid: kid.to_owned(),
            pkcs1: pkcs1.to_vec(),
            jwk: json!({
                "kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
                "n": URL_SAFE_NO_PAD.encode(unsigned(n)),
                "e": URL_SAFE_NO_PAD.encode(unsigned(e)),
            }),
        })
    }

    /// The public key set, as a JWKS endpoint would publish it.
    pub fn jwks(&self) -> Result<JwkSet, String> {
        serde_json::from_value(json!({ "keys": [self.jwk] })).map_err(|e| format!("JWKS: {e}"))
    }

    /// An RS256 token for `sub` in `groups`, valid for `lifetime_secs` from now.
    pub fn token(&self, sub: &str, groups: &[&str], lifetime_secs: u64) -> Result<String, String> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|e| e.to_string())?
            .as_secs();
        let claims = json!({
            "iss": ISSUER, "aud": AUDIENCE, "sub": sub, "groups": groups,
            "email": format!("{sub}@example.com"),
            "iat": now, "nbf": now.saturating_sub(5), "exp": now + lifetime_secs,
        });
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, &claims, &EncodingKey::from_rsa_der(&self.pkcs1))
            .map_err(|e| format!("sign a token: {e}"))
    }
}

//! The embedding endpoint peer (tests/peers/py_embed.py): all-MiniLM-L6-v2 behind
//! TEI's `/embed` and OpenAI's `/v1/embeddings`, for the optimizer's semantic tier.

use std::process::Stdio;

use serde_json::Value;
use tokio::process::Command;

use crate::{Peer, announced_port, python, repo_root};

/// Start py_embed.py on `port` (0: a free one); `extra` are its flags
/// (`--delay-ms MS`). Its `url` is the base URL (the provider's path is appended).
pub async fn py_embed_on(port: u16, extra: &[&str]) -> Peer {
    let mut child = Command::new(python())
        .arg(repo_root().join("tests/peers/py_embed.py"))
        .args(["--port", &port.to_string()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start py_embed.py");
    let port = announced_port(&mut child, "py_embed.py").await;
    Peer {
        child,
        url: format!("http://127.0.0.1:{port}"),
        port,
    }
}

/// What the peer saw: `{requests, headers (the last request's), texts (every
/// text embedded, in order)}`.
pub async fn seen(peer: &Peer) -> Value {
    reqwest::get(format!("{}/seen", peer.url))
        .await
        .expect("GET /seen")
        .json()
        .await
        .expect("/seen JSON")
}

//! Python peer scripts driven by a JSON plan: the plan on stdin, the outcome as JSON
//! on stdout (tests/peers/py_forwarding.py, py_asked.py).

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::{python, repo_root};

/// Run the Python peer script `script` (under `tests/peers/`) against `url`, hand it
/// `plan` as JSON on stdin, and return the JSON it prints (bounded: 150 s).
pub async fn run_py_plan(script: &str, url: &str, plan: &Value) -> Value {
    let mut child = Command::new(python())
        .arg(repo_root().join("tests/peers").join(script))
        .arg(url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("start {script}: {e}"));
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin
        .write_all(plan.to_string().as_bytes())
        .await
        .expect("write plan");
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(150), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{script} finished within 150s"))
        .unwrap_or_else(|e| panic!("{script} ran: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{script} printed non-JSON ({e}): {text}\n{stderr}"))
}

//! The README's shell blocks, run as written against the built server, so the front
//! door cannot rot.
//!
//! The README marks what runs: a block fenced ```` ```sh test ```` runs on its own, one
//! fenced ```` ```sh test-with-server ```` runs while `vmcp serve` (the embedded
//! default) is up, and ```` ```yaml file=NAME ```` is saved as `NAME` first. A `#> text`
//! line in a block is text its output must contain. Blocks run with `bash -euo
//! pipefail` in a scratch directory laid out like the repository (`target/debug/vmcp`,
//! `.peers`, `tests`), each with the documented port 4483 replaced by a free one (in
//! the text, and as `VMCP_PORT` for `vmcp serve`) so tests can run in parallel, in a
//! process group that is killed afterwards.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;
use vmcp_tests::{free_port, peers_dir, repo_root};

use super::serve::{Serve, VMCP};

const DOCUMENTED_PORT: &str = "4483";

#[derive(Debug, PartialEq)]
enum Kind {
    Alone,
    WithServer,
    File(String),
}

#[derive(Debug)]
struct Block {
    kind: Kind,
    /// 1-based line of the opening fence, for messages.
    line: usize,
    text: String,
}

fn marked_blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    // The block being read; `None` inside it for an unmarked one (skipped).
    let mut open: Option<Option<Block>> = None;
    for (i, line) in markdown.lines().enumerate() {
        let fence = line.trim_start();
        match open.take() {
            Some(block) if fence == "```" => blocks.extend(block),
            Some(mut block) => {
                if let Some(block) = &mut block {
                    block.text.push_str(line);
                    block.text.push('\n');
                }
                open = Some(block);
            }
            None if fence.starts_with("```") => {
                let info = fence.trim_start_matches('`');
                let kind = match info.split_whitespace().collect::<Vec<_>>()[..] {
                    ["sh", "test"] => Some(Kind::Alone),
                    ["sh", "test-with-server"] => Some(Kind::WithServer),
                    [_, file] => file
                        .strip_prefix("file=")
                        .map(|name| Kind::File(name.to_owned())),
                    _ => None,
                };
                open = Some(kind.map(|kind| Block {
                    kind,
                    line: i + 1,
                    text: String::new(),
                }));
            }
            None => {}
        }
    }
    blocks
}

/// A scratch directory with the repository paths the README uses.
fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vmcp-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("target/debug")).unwrap();
    let link = |from: &Path, to: &Path| std::os::unix::fs::symlink(from, to).unwrap();
    link(Path::new(VMCP), &dir.join("target/debug/vmcp"));
    link(&peers_dir(), &dir.join(".peers"));
    link(&repo_root().join("tests"), &dir.join("tests"));
    dir
}

/// Run `script` in `dir` with bash; its stdout and stderr. Everything it started is
/// killed when it ends.
async fn run(dir: &Path, script: &str, port: &str) -> (bool, String, String) {
    let child = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env("VMCP_PORT", port)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .expect("bash runs");
    let group = child.id().expect("running") as i32;
    let output = tokio::time::timeout(Duration::from_secs(60), async {
        let out = child.wait_with_output().await.expect("bash ran");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await;
    // Anything left in the block's process group (a server it started) goes too.
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .stderr(Stdio::null())
        .status();
    output.unwrap_or_else(|_| (false, String::new(), "timed out after 60s".to_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_shell_blocks_work_as_written() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let blocks = marked_blocks(&readme);
    let dir = scratch();
    for block in &blocks {
        if let Kind::File(name) = &block.kind {
            std::fs::write(dir.join(name), &block.text).unwrap();
        }
    }
    let runnable: Vec<&Block> = blocks
        .iter()
        .filter(|b| !matches!(b.kind, Kind::File(_)))
        .collect();
    assert!(
        runnable.len() >= 5,
        "the README's marked blocks were found: {blocks:#?}"
    );
    for block in runnable {
        let server = match block.kind {
            Kind::WithServer => Some(Serve::new().start().await),
            _ => None,
        };
        let port = server
            .as_ref()
            .map_or_else(free_port, |s| s.port)
            .to_string();
        let script = block.text.replace(DOCUMENTED_PORT, &port);
        let (ok, stdout, stderr) = run(&dir, &script, &port).await;
        drop(server);
        let at = format!("README.md line {}", block.line);
        assert!(
            ok,
            "{at} failed:\n{script}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
        );
        for expected in block.text.lines().filter_map(|l| l.strip_prefix("#> ")) {
            let expected = expected.replace(DOCUMENTED_PORT, &port);
            assert!(
                stdout.contains(&expected),
                "{at}: the output lacks {expected:?}:\n{stdout}\n--- stderr\n{stderr}"
            );
        }
    }
}

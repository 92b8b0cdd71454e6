//! The shell blocks of the README and of `docs/*.md`, run as written against the
//! built server, so the documentation cannot rot.
//!
//! Every shell block is marked. A block fenced ```` ```sh test ```` runs on its own,
//! one fenced ```` ```sh test-with-server ```` runs while `vmcp serve` (the embedded
//! default) is up, and ```` ```yaml file=NAME ```` is saved as `NAME` first. A block
//! that is not run here (a release build, the whole suite, a fragment) is fenced
//! ```` ```sh no-test REASON ````; an unmarked shell block fails
//! [`every_shell_block_in_the_docs_is_run_or_marked`]. A `#> text` line in a block is
//! text its output must contain. Blocks run with `bash -euo pipefail` in a scratch
//! directory laid out like the repository (`target/debug/vmcp`, `.peers`, `tests`),
//! each with the documented port 4483 replaced by a free one (in the text, and as
//! `VMCP_PORT` for `vmcp serve`) so tests can run in parallel, in a process group
//! that is killed afterwards.

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
    /// `sh no-test REASON`: shown, not run.
    NotRun,
    /// A shell block with none of the marks (or `no-test` without a reason).
    Unmarked,
}

/// The fence languages that are shell.
const SHELLS: &[&str] = &["sh", "bash", "shell", "console", "zsh"];

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
                    ["sh", "no-test", _, ..] => Some(Kind::NotRun),
                    [shell, ..] if SHELLS.contains(&shell) => Some(Kind::Unmarked),
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

/// The README and the pages under `docs/`, each with its path for messages.
fn documents() -> Vec<(String, String)> {
    let root = repo_root();
    let mut paths = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    paths.extend(docs);
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let shown = path.strip_prefix(&root).unwrap().display().to_string();
            (shown, text)
        })
        .collect()
}

#[test]
fn every_shell_block_in_the_docs_is_run_or_marked() {
    let mut unmarked = Vec::new();
    let mut repeated = Vec::new();
    for (path, text) in documents() {
        for block in marked_blocks(&text) {
            if block.kind == Kind::Unmarked {
                unmarked.push(format!("{path} line {}", block.line));
            }
        }
        // A reference section per configuration key: a key's heading (in backticks)
        // appears once in a page.
        let mut seen = std::collections::HashSet::new();
        for heading in text
            .lines()
            .filter(|l| l.starts_with('#') && l.contains('`'))
        {
            if !seen.insert(heading) {
                repeated.push(format!("{path}: {heading}"));
            }
        }
    }
    assert!(
        unmarked.is_empty(),
        "shell blocks neither run (`sh test`, `sh test-with-server`) nor marked \
         `sh no-test REASON`:\n{}",
        unmarked.join("\n")
    );
    assert!(
        repeated.is_empty(),
        "sections written twice:\n{}",
        repeated.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docs_shell_blocks_work_as_written() {
    let dir = scratch();
    let mut runnable = Vec::new();
    let mut in_readme = 0;
    for (path, text) in documents() {
        let blocks = marked_blocks(&text);
        for block in &blocks {
            if let Kind::File(name) = &block.kind {
                std::fs::write(dir.join(name), &block.text).unwrap();
            }
        }
        for block in blocks {
            if matches!(block.kind, Kind::Alone | Kind::WithServer) {
                in_readme += usize::from(path == "README.md");
                runnable.push((path.clone(), block));
            }
        }
    }
    assert!(
        in_readme >= 5,
        "the README's marked blocks were found: {runnable:#?}"
    );
    for (path, block) in runnable {
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
        let at = format!("{path} line {}", block.line);
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

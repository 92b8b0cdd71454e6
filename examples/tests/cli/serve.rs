//! Starting the real `vmcp` binary for a test: `vmcp serve` on a free loopback
//! port, its output discarded or written to files, and its URL, signals and logs.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{Child, Command};
use vmcp_tests::{free_port, wait_for_port};

/// The binary under test.
pub const VMCP: &str = env!("CARGO_BIN_EXE_vmcp");

/// How to start `vmcp serve --port <free port>`: extra arguments, environment,
/// and where stdout and stderr go (nowhere unless given a file).
#[derive(Default)]
pub struct Serve {
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    env_remove: Vec<OsString>,
    stdout: Option<PathBuf>,
    stderr: Option<PathBuf>,
    nofile: Option<u64>,
    wrapper: Vec<OsString>,
}

impl Serve {
    /// `vmcp serve` on the embedded default.
    pub fn new() -> Self {
        Self::default()
    }

    /// Arguments after `serve --port <port>`.
    pub fn args<S: Into<OsString>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// `serve -c <path>`.
    pub fn config(self, path: &Path) -> Self {
        self.args([OsString::from("-c"), path.as_os_str().to_owned()])
    }

    /// Set an environment variable.
    pub fn env(mut self, key: &str, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Remove an environment variable (`RUST_LOG`, to test the default filter).
    pub fn env_remove(mut self, key: &str) -> Self {
        self.env_remove.push(key.into());
        self
    }

    /// Run it with an open-file limit of `limit` (soft and hard, set by `sh`'s
    /// `ulimit -n` before it execs the binary).
    pub fn nofile(mut self, limit: u64) -> Self {
        self.nofile = Some(limit);
        self
    }

    /// Run it through `wrapper` (a program and its arguments, which must exec the
    /// binary and its arguments appended last, as `unshare … sh -c '… exec "$@"'` does).
    pub fn wrapped<S: Into<OsString>>(mut self, wrapper: impl IntoIterator<Item = S>) -> Self {
        self.wrapper = wrapper.into_iter().map(Into::into).collect();
        self
    }

    /// One more argument for the wrapper, before the binary (`$0` of `sh -c`).
    pub fn wrapped_arg(mut self, arg: impl AsRef<std::ffi::OsStr>) -> Self {
        self.wrapper.push(arg.as_ref().to_owned());
        self
    }

    /// Write stdout to `path`.
    pub fn stdout_to(mut self, path: impl Into<PathBuf>) -> Self {
        self.stdout = Some(path.into());
        self
    }

    /// Write stderr to `path`.
    pub fn stderr_to(mut self, path: impl Into<PathBuf>) -> Self {
        self.stderr = Some(path.into());
        self
    }

    /// Start it and wait until its port accepts connections. It is killed if the
    /// [`Server`] is dropped.
    pub async fn start(self) -> Server {
        let port = free_port();
        let output = |path: &Option<PathBuf>| match path {
            Some(path) => Stdio::from(std::fs::File::create(path).expect("create a log file")),
            None => Stdio::null(),
        };
        // The programs the binary runs under, outermost first: the open-file limit's
        // `sh`, then the wrapper; each execs the rest of its arguments.
        let mut argv: Vec<OsString> = Vec::new();
        if let Some(limit) = self.nofile {
            argv.extend(["sh", "-c", r#"ulimit -n "$0" && exec "$@""#].map(OsString::from));
            argv.push(limit.to_string().into());
        }
        argv.extend(self.wrapper.iter().cloned());
        argv.push(VMCP.into());
        let mut command = Command::new(&argv[0]);
        command.args(&argv[1..]);
        command
            .args(["serve", "--port", &port.to_string()])
            .args(&self.args)
            .stdout(output(&self.stdout))
            .stderr(output(&self.stderr))
            .kill_on_drop(true);
        for key in &self.env_remove {
            command.env_remove(key);
        }
        for (key, value) in &self.env {
            command.env(key, value);
        }
        let child = command.spawn().expect("start vmcp serve");
        wait_for_port(port).await;
        Server {
            child,
            port,
            stdout: self.stdout,
            stderr: self.stderr,
        }
    }
}

/// A running `vmcp serve`.
pub struct Server {
    /// The process.
    pub child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    stdout: Option<PathBuf>,
    stderr: Option<PathBuf>,
}

impl Server {
    /// The MCP endpoint.
    pub fn url(&self) -> String {
        self.at("/mcp")
    }

    /// `path` on the server (`/status`, `/metrics`, …).
    pub fn at(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the server is running")
    }

    /// Send it `signal` (`-HUP`, `-TERM`, …).
    pub fn signal(&self, signal: &str) {
        let _ = std::process::Command::new("kill")
            .args([signal, &self.pid().to_string()])
            .status();
    }

    /// SIGTERM, and its exit status once it exits, which must be within `within`.
    pub async fn terminate(&mut self, within: Duration) -> ExitStatus {
        self.signal("-TERM");
        tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("exits within {}s of SIGTERM", within.as_secs()))
            .expect("wait for vmcp serve")
    }

    /// What it wrote to its stdout and stderr files so far (stdout first).
    pub fn logs(&self) -> String {
        [&self.stdout, &self.stderr]
            .into_iter()
            .flatten()
            .map(|path| std::fs::read_to_string(path).unwrap_or_default())
            .collect()
    }
}

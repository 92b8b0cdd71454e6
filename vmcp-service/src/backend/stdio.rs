//! Local stdio backends: spawning the child, its restarts, its stderr, and its end.
//!
//! The child runs in its own process group and speaks MCP 2025-11-25 on
//! stdin/stdout through rmcp's [`TokioChildProcess`]. [`Supervisor`] owns what
//! outlives one process: the restart backoff and the pid of the live child. When
//! the child's stdout ends on its own, the supervisor logs the exit, sets the
//! backoff, and emits `Disconnected` twice (now, and when the backoff ends): the
//! aggregator re-lists the backend on that event, and re-listing opens a connection,
//! which spawns the next process. Closing the connection (shutdown, reload) runs
//! rmcp's graceful sequence (close stdin, SIGTERM, SIGKILL) and then kills whatever
//! is left of the group; dropping the transport kills the group synchronously, so a
//! runtime tearing down cannot leave children behind.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use process_wrap::tokio::{CommandWrap, ProcessGroup};
use rmcp::RoleClient;
use rmcp::transport::{TokioChildProcess, Transport};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::ChildStderr;
use tokio::sync::{broadcast, watch};

use super::event::{BackendEvent, BackendEventKind};
use crate::config::{BackendConfig, find_executable};

/// Variables of the gateway's environment a child inherits; everything else it gets
/// comes from its `env` (the gateway's environment may hold credentials).
const INHERITED_ENV: [&str; 8] = [
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR",
];
/// A child that ran at least this long before exiting restarts without delay growth.
const STABLE_AFTER: Duration = Duration::from_secs(60);
/// First restart delay; doubled per quick exit up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long closing waits for the child before killing its group outright (rmcp's
/// own sequence takes at most 6 s).
const STOP_WAIT: Duration = Duration::from_secs(8);
/// Longest stderr chunk logged as one line.
const MAX_STDERR_LINE: u64 = 4096;

/// Why no process could be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The last process exited a moment ago; the next one starts after the backoff.
    #[error("the process exited; restarting in {}s", .0.as_secs().max(1))]
    BackingOff(Duration),
    /// An `env` entry names a variable the gateway's environment lacks.
    #[error("the gateway's environment has no {0} (named in env)")]
    MissingEnv(String),
    /// The operating system refused to start it.
    #[error("cannot start {command}: {source}")]
    Spawn {
        /// The configured command (never its arguments or environment).
        command: String,
        /// The error.
        source: std::io::Error,
    },
}

/// What a stdio backend's process is doing, for the status surface.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProcessStatus {
    /// The live child's pid (also its process group).
    pub pid: Option<u32>,
    /// Processes started after the first one.
    pub restarts: u32,
    /// How the last process ended, when it ended on its own.
    pub last_exit: Option<String>,
}

#[derive(Default)]
struct Restarts {
    started: Option<Instant>,
    spawned: u32,
    quick_exits: u32,
    not_before: Option<Instant>,
    last_exit: Option<String>,
    /// The last process ended on its own and no other has started since.
    exited: bool,
    /// The gateway closed the last process (shutdown, reload, reconnect).
    closed: bool,
}

/// One stdio backend's process across restarts.
pub struct Supervisor {
    backend: Arc<str>,
    events: broadcast::Sender<BackendEvent>,
    state: Mutex<Restarts>,
    /// The live child's pid; `None` once it is gone.
    alive: watch::Sender<Option<u32>>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("backend", &self.backend)
            .field("pid", &*self.alive.borrow())
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    /// A supervisor with no process yet.
    pub fn new(backend: Arc<str>, events: broadcast::Sender<BackendEvent>) -> Self {
        Self {
            backend,
            events,
            state: Mutex::new(Restarts::default()),
            alive: watch::Sender::new(None),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Restarts> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The process as the status surface shows it.
    pub fn status(&self) -> ProcessStatus {
        let state = self.state();
        ProcessStatus {
            pid: *self.alive.borrow(),
            restarts: state.spawned.saturating_sub(1),
            last_exit: state.last_exit.clone(),
        }
    }

    /// Whether no process runs because the last one exited (which its own log line
    /// reported) or the gateway closed it: the failures of this gap say nothing new.
    pub fn explains_failures(&self) -> bool {
        let state = self.state();
        (state.exited || state.closed) && self.alive.borrow().is_none()
    }

    /// Start a process for `config` unless the restart backoff forbids it yet.
    pub fn spawn(self: &Arc<Self>, config: &BackendConfig) -> Result<StdioTransport, SpawnError> {
        let command = config.command.clone().unwrap_or_default();
        if let Some(at) = self.state().not_before {
            let now = Instant::now();
            if at > now {
                return Err(SpawnError::BackingOff(at - now));
            }
        }
        let program = find_executable(&command, config.cwd.as_deref())
            .map(|p| p.into_os_string())
            .unwrap_or_else(|| command.clone().into());
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(&config.args).env_clear();
        for name in INHERITED_ENV {
            if let Some(value) = std::env::var_os(name) {
                cmd.env(name, value);
            }
        }
        for (name, value) in &config.env {
            let value = value
                .resolve()
                .map_err(|missing| SpawnError::MissingEnv(missing.to_owned()))?;
            cmd.env(name, value);
        }
        if let Some(dir) = &config.cwd {
            cmd.current_dir(dir);
        }
        let mut wrapped = CommandWrap::from(cmd);
        wrapped.wrap(ProcessGroup::leader());
        let (child, stderr) = TokioChildProcess::builder(wrapped)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| SpawnError::Spawn {
                command: command.clone(),
                source,
            })?;
        let pid = child.id();
        {
            let mut state = self.state();
            state.started = Some(Instant::now());
            state.spawned = state.spawned.saturating_add(1);
            state.exited = false;
            state.closed = false;
        }
        self.alive.send_replace(pid);
        tracing::info!(backend = %self.backend, pid, "stdio backend started");
        if let Some(stderr) = stderr {
            tokio::spawn(forward_stderr(self.backend.clone(), stderr));
        }
        Ok(StdioTransport {
            child,
            pid,
            supervisor: self.clone(),
            closing: false,
            finished: false,
        })
    }

    /// The process `pid` ended on its own (its stdout closed).
    fn exited(&self, pid: Option<u32>) {
        // A discarded connection's process may end after its successor started: only
        // the live one's exit means a restart.
        if *self.alive.borrow() != pid {
            return;
        }
        let delay = {
            let mut state = self.state();
            let ran = state.started.map(|t| t.elapsed()).unwrap_or_default();
            state.quick_exits = if ran < STABLE_AFTER {
                state.quick_exits.saturating_add(1)
            } else {
                1
            };
            let delay = FIRST_BACKOFF
                .saturating_mul(1 << (state.quick_exits - 1).min(6))
                .min(MAX_BACKOFF);
            state.not_before = Some(Instant::now() + delay);
            let exit = format!(
                "exited after {}s; restart {}s later",
                ran.as_secs(),
                delay.as_secs()
            );
            // The one line an exit leaves: the failures it causes (calls cut off,
            // the restart backoff) are recorded without warning again.
            tracing::warn!(backend = %self.backend, pid, "stdio backend {:?} {exit}", &*self.backend);
            state.last_exit = Some(exit);
            state.exited = true;
            delay
        };
        self.gone(pid);
        self.emit_disconnected();
        // The restart timer: when the backoff ends, the same event makes the
        // aggregator re-list the backend, which starts the next process.
        let events = self.events.clone();
        let backend = self.backend.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = events.send(BackendEvent {
                backend,
                kind: BackendEventKind::Disconnected,
            });
        });
    }

    fn emit_disconnected(&self) {
        let _ = self.events.send(BackendEvent {
            backend: self.backend.clone(),
            kind: BackendEventKind::Disconnected,
        });
    }

    fn gone(&self, pid: Option<u32>) {
        self.alive.send_if_modified(|alive| {
            let current = *alive == pid;
            if current {
                *alive = None;
            }
            current
        });
    }

    /// Wait (bounded) until the process of a closed connection is gone, then make
    /// sure nothing of its group is left.
    pub async fn stopped(&self) {
        let mut alive = self.alive.subscribe();
        let pid = *alive.borrow();
        if tokio::time::timeout(STOP_WAIT, alive.wait_for(Option::is_none))
            .await
            .is_err()
        {
            tracing::warn!(backend = %self.backend, pid, "stdio backend did not stop in time; killing it");
        }
        kill_group(pid);
    }
}

/// Log the child's stderr at debug, line by line (long lines in chunks).
async fn forward_stderr(backend: Arc<str>, stderr: ChildStderr) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader)
            .take(MAX_STDERR_LINE)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                tracing::debug!(target: "vmcp::stdio", backend = %backend, "{}", text.trim_end());
            }
        }
    }
}

/// SIGKILL the process group led by `pid` (the whole group, grandchildren too).
fn kill_group(pid: Option<u32>) {
    #[cfg(unix)]
    if let Some(pgid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // ESRCH (already gone) is the usual outcome and fine.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    #[cfg(not(unix))]
    let _ = pid;
}

/// rmcp's child-process transport, reporting the child's own exit to the
/// [`Supervisor`] and killing its process group when closed or dropped.
pub struct StdioTransport {
    child: TokioChildProcess,
    pid: Option<u32>,
    supervisor: Arc<Supervisor>,
    /// Set when we close it: the end of stdout is then not an exit to report.
    closing: bool,
    /// Set once the group was killed and reported gone.
    finished: bool,
}

impl StdioTransport {
    fn finish(&mut self) {
        if !self.finished {
            self.finished = true;
            kill_group(self.pid);
            self.supervisor.gone(self.pid);
        }
    }
}

impl Transport<RoleClient> for StdioTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.child.send(item)
    }

    async fn receive(&mut self) -> Option<rmcp::service::RxJsonRpcMessage<RoleClient>> {
        let message = self.child.receive().await;
        if message.is_none() && !self.closing && !self.finished {
            self.supervisor.exited(self.pid);
            self.finish();
        }
        message
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.closing = true;
        self.supervisor.state().closed = true;
        let result = self.child.graceful_shutdown().await;
        self.finish();
        result
    }
}

impl Drop for StdioTransport {
    fn drop(&mut self) {
        self.finish();
    }
}

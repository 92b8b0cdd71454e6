//! The command line: the benchmark's options (`--quick`, `--rounds`, `--only`, …),
//! the child mode of the session probe, and the profiling modes (`serve-backend`,
//! `serve-gateway`, `drive`).

use std::time::Duration;

use anyhow::Context;

use crate::client::{Op, Revision};

/// What this invocation was asked to do, and with which settings.
pub struct Args {
    pub warmup: Duration,
    pub window: Duration,
    pub rounds: usize,
    pub sessions: usize,
    pub aggregation_backends: usize,
    pub aggregation_tools: usize,
    /// Only the throughput rows whose `variant:revision:op:clients` label contains this.
    pub only: Option<String>,
    /// Child mode: measure idle sessions of one server kind and print KiB per session.
    pub session_probe: Option<String>,
    /// Profiling modes (see `profile`): serve a backend or a gateway, or drive a
    /// fixed number of requests at a running server.
    pub mode: Mode,
}

/// What this invocation does.
pub enum Mode {
    /// The benchmark.
    Bench,
    /// `serve-backend`: serve the benchmark backend until SIGINT/SIGTERM.
    ServeBackend,
    /// `serve-gateway URL[,URL…] [--stack]`: serve the bare gateway (b) fronting the
    /// backend(s) at the URLs (named `bench`, `bench2`, …), or with `--stack` the full layer stack (c), printing the bearer token
    /// its clients must send; with `--rate-limit`, metering every call by
    /// `gateway::RATE_LIMITS`.
    ServeGateway {
        backend_url: String,
        stack: bool,
        /// `--exchange`: the full stack with the backend's outgoing auth an RFC 8693
        /// token exchange against an in-process endpoint (variant (x); implies `--stack`).
        exchange: bool,
        rate_limit: bool,
        /// `--extra-yaml FILE`: configuration appended to the generated one (for
        /// example `sessionStorage`, `codeMode` or a `rateLimiting` with a Redis store).
        extra_yaml: Option<String>,
    },
    /// `drive URL TOOL`: send exactly `requests` requests and report the wall time.
    Drive {
        url: String,
        tool: String,
        revision: Revision,
        op: Op,
        requests: usize,
        clients: usize,
        /// `--bearer TOKEN`: sent as `Authorization: Bearer TOKEN` (variant (c)).
        bearer: Option<String>,
        /// `--arguments JSON`: the call's arguments instead of `{"text":"hello"}`
        /// (for example a code-mode script).
        arguments: Option<String>,
        /// `--per-op N`: one timed operation is N requests in a row (three direct
        /// calls against one 3-call script); `requests` counts operations.
        per_op: usize,
    },
    /// `restore URL_A URL_B [--sessions N]`: open N Legacy sessions on replica A, then
    /// time each one's first `tools/call` on replica B (p50/p99); with `URL_B` `-`,
    /// only open them and leave them idle (to read their size in Redis).
    Restore {
        url_a: String,
        url_b: Option<String>,
        tool: String,
        sessions: usize,
    },
}

/// Parse the process's arguments.
pub fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        warmup: Duration::from_millis(300),
        window: Duration::from_secs(1),
        rounds: crate::report::MIN_ROUNDS,
        sessions: 10_000,
        aggregation_backends: 50,
        aggregation_tools: 100,
        only: None,
        session_probe: None,
        mode: Mode::Bench,
    };
    let mut it = std::env::args().skip(1).peekable();
    match it.peek().map(String::as_str) {
        Some("serve-backend") => {
            it.next();
            args.mode = Mode::ServeBackend;
        }
        Some("serve-gateway") => {
            it.next();
            args.mode = Mode::ServeGateway {
                backend_url: it.next().context("serve-gateway BACKEND_URL")?,
                stack: false,
                exchange: false,
                rate_limit: false,
                extra_yaml: None,
            };
        }
        Some("drive") => {
            it.next();
            let url = it.next().context("drive URL TOOL")?;
            let tool = it.next().context("drive URL TOOL")?;
            args.mode = Mode::Drive {
                url,
                tool,
                revision: Revision::Modern,
                op: Op::Call,
                requests: 1000,
                clients: 1,
                bearer: None,
                arguments: None,
                per_op: 1,
            };
        }
        Some("restore") => {
            it.next();
            let url_a = it.next().context("restore URL_A URL_B TOOL")?;
            let url_b = it.next().context("restore URL_A URL_B TOOL")?;
            args.mode = Mode::Restore {
                url_a,
                url_b: (url_b != "-").then_some(url_b),
                tool: it.next().context("restore URL_A URL_B TOOL")?,
                sessions: 1000,
            };
        }
        _ => {}
    }
    while let Some(arg) = it.next() {
        let mut value = || it.next().context("missing value");
        if let Mode::Restore { sessions, .. } = &mut args.mode
            && arg == "--sessions"
        {
            *sessions = value()?.parse()?;
            continue;
        }
        if let Mode::ServeGateway {
            stack,
            exchange,
            rate_limit,
            extra_yaml,
            ..
        } = &mut args.mode
        {
            match arg.as_str() {
                "--extra-yaml" => {
                    *extra_yaml = Some(value()?);
                    continue;
                }
                "--stack" => {
                    *stack = true;
                    continue;
                }
                "--exchange" => {
                    *stack = true;
                    *exchange = true;
                    continue;
                }
                "--rate-limit" => {
                    *rate_limit = true;
                    continue;
                }
                _ => {}
            }
        }
        if let Mode::Drive {
            revision,
            op,
            requests,
            clients,
            bearer,
            arguments,
            per_op,
            ..
        } = &mut args.mode
        {
            match arg.as_str() {
                "--per-op" => {
                    *per_op = value()?.parse::<usize>()?.max(1);
                    continue;
                }
                "--arguments" => {
                    *arguments = Some(value()?);
                    continue;
                }
                "--legacy" => {
                    *revision = Revision::Legacy;
                    continue;
                }
                "--list" => {
                    *op = Op::List;
                    continue;
                }
                "--requests" => {
                    *requests = value()?.parse()?;
                    continue;
                }
                "--clients" => {
                    *clients = value()?.parse()?;
                    continue;
                }
                "--bearer" => {
                    *bearer = Some(value()?);
                    continue;
                }
                _ => {}
            }
        }
        match arg.as_str() {
            "--quick" => {
                args.warmup = Duration::from_millis(100);
                args.window = Duration::from_millis(300);
                args.rounds = 1;
                args.sessions = 1_000;
            }
            "--window-ms" => args.window = Duration::from_millis(value()?.parse()?),
            "--warmup-ms" => args.warmup = Duration::from_millis(value()?.parse()?),
            "--rounds" => args.rounds = value()?.parse::<usize>()?.max(1),
            "--sessions" => args.sessions = value()?.parse()?,
            "--only" => args.only = Some(value()?),
            "--session-probe" => args.session_probe = Some(value()?),
            _ => anyhow::bail!(
                "usage: vmcp-bench [--quick] [--window-ms N] [--warmup-ms N] [--rounds N] [--sessions N] [--only a:modern:tools/call:8]\n\
                 \x20      vmcp-bench serve-backend | serve-gateway BACKEND_URL [--stack] [--exchange] [--rate-limit] [--extra-yaml FILE]\n\
                 \x20      vmcp-bench drive URL TOOL [--legacy] [--list] [--requests N] [--clients N] [--bearer TOKEN] [--arguments JSON] [--per-op N]\n\
                 \x20      vmcp-bench restore URL_A URL_B|- TOOL [--sessions N]"
            ),
        }
    }
    Ok(args)
}

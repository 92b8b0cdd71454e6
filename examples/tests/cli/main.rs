//! The bundled `vmcp` binary run as a real process: its command line, its logs, its
//! configuration messages and schema, outgoing credentials, stdio children, and the
//! README's shell blocks. One test binary (each links the whole stack); one module
//! per concern, all starting the binary through `serve`.

mod commands;
mod config_ux;
mod connections;
mod fifo;
mod integrity;
mod kubernetes;
mod origins;
mod outgoing_auth;
mod readme;
mod replicas;
mod serve;
mod serve_logs;
mod session_storage;
mod stdio;

//! Support code of the bundled vmcp server: the in-process demo backends of the
//! embedded default configuration, the starter configuration written by `init`, and
//! the server's log setup.

pub mod demo;
pub mod logging;
pub mod starter;

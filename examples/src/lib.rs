//! Support code of the bundled vmcp server: the in-process demo backends of the
//! embedded default configuration, and the starter configuration written by `init`.

pub mod demo;
pub mod starter;

//! vmcp service.

pub mod backend;

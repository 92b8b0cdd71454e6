//! vmcp service.

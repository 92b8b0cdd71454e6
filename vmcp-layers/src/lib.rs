//! vmcp layers.

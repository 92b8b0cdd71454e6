//! What a layer needs from the layers in front of it, and the fail-closed answer when
//! it is mounted without them.
//!
//! A layer that reads [`ParsedMcpRequest`] or [`Identity`] from the request
//! extensions cannot tell "nothing to do" from "mounted in the wrong place" unless the
//! earlier layer leaves a trace. [`McpParseLayer`](crate::parse::McpParseLayer)
//! inserts [`McpParsed`] on every request it passes (a GET or DELETE has no parsed
//! body but still went through it); [`AuthLayer`](crate::auth::AuthLayer) inserts the
//! `Arc<Identity>`. A layer that finds neither answers **500** with a JSON-RPC
//! internal error naming the missing layer, instead of letting the request through
//! unchecked.

use std::sync::Arc;

use axum::body::Body;
use http::{Extensions, Response, StatusCode};

use crate::context::{Identity, ParsedMcpRequest};
use crate::jsonrpc;

/// The trace [`McpParseLayer`](crate::parse::McpParseLayer) leaves on every request
/// it passes, whether or not the request had a JSON-RPC body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct McpParsed;

/// A layer was mounted without a layer it depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MissingLayer {
    /// No [`McpParseLayer`](crate::parse::McpParseLayer) in front of `layer`.
    #[error("{layer} is mounted without McpParseLayer in front of it")]
    Parse {
        /// The layer that found the gap.
        layer: &'static str,
    },
    /// No [`AuthLayer`](crate::auth::AuthLayer) (no `Arc<Identity>`) in front of `layer`.
    #[error("{layer} is mounted without AuthLayer in front of it")]
    Auth {
        /// The layer that found the gap.
        layer: &'static str,
    },
    /// No [`DiscoveryLayer`](crate::discovery::DiscoveryLayer) in front of `layer`.
    #[error("{layer} is mounted without DiscoveryLayer in front of it")]
    Discovery {
        /// The layer that found the gap.
        layer: &'static str,
    },
}

impl MissingLayer {
    /// The fail-closed answer: HTTP 500, JSON-RPC `-32603`, the message naming the
    /// missing layer (a wiring mistake of the operator, not a secret).
    pub fn into_response(self) -> Response<Body> {
        tracing::error!("{self}; request refused");
        jsonrpc::error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            jsonrpc::INTERNAL_ERROR,
            &self.to_string(),
        )
    }
}

/// The parsed request, `None` for a request the parse layer passed without a body
/// (GET, DELETE), or the error when no parse layer ran.
pub fn parsed<'a>(
    extensions: &'a Extensions,
    layer: &'static str,
) -> Result<Option<&'a Arc<ParsedMcpRequest>>, MissingLayer> {
    match extensions.get::<Arc<ParsedMcpRequest>>() {
        Some(parsed) => Ok(Some(parsed)),
        None if extensions.get::<McpParsed>().is_some() => Ok(None),
        None => Err(MissingLayer::Parse { layer }),
    }
}

/// The caller's identity, or the error when no authentication layer ran.
pub fn identity<'a>(
    extensions: &'a Extensions,
    layer: &'static str,
) -> Result<&'a Arc<Identity>, MissingLayer> {
    extensions
        .get::<Arc<Identity>>()
        .ok_or(MissingLayer::Auth { layer })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_less_request_that_went_through_parse_is_not_missing_anything() {
        let mut extensions = Extensions::new();
        assert_eq!(
            parsed(&extensions, "gate"),
            Err(MissingLayer::Parse { layer: "gate" })
        );
        extensions.insert(McpParsed);
        assert_eq!(parsed(&extensions, "gate"), Ok(None));
    }

    #[test]
    fn the_message_names_both_layers() {
        assert_eq!(
            MissingLayer::Auth { layer: "authz" }.to_string(),
            "authz is mounted without AuthLayer in front of it"
        );
    }
}

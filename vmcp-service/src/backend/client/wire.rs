//! A direct request as it goes on the wire, serialized from borrowed parts: the
//! caller's params are not cloned to add the connection's client context to their
//! `_meta`; the context is written next to them.

use rmcp::model::{CallToolRequestParams, GetPromptRequestParams, InputResponses, JsonObject};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// The `_meta` key whose caller's value stands over the connection's (SEP-2322).
pub(super) const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// The request as it goes on the wire; `params` is serialized in place.
#[derive(serde::Serialize)]
pub(super) struct Outgoing<'a, P> {
    pub jsonrpc: &'static str,
    pub id: i64,
    pub method: &'static str,
    pub params: &'a P,
}

/// `tools/call` or `prompts/get` params with the connection's client context in
/// their `_meta`, written as rmcp writes `CallToolRequestParams` and
/// `GetPromptRequestParams` (same members, same order).
pub(super) struct RequestParams<'a> {
    /// The caller's `_meta`, or a relayed request's own (see `DirectHttp`).
    pub meta: Option<&'a JsonObject>,
    pub name: &'a str,
    pub arguments: Option<Arguments<'a>>,
    pub input_responses: Option<&'a InputResponses>,
    pub request_state: Option<&'a str>,
    pub context: &'a Context,
}

/// A connection's client context, each value serialized once, at connect: it
/// goes into every request's `_meta` unchanged.
pub(super) struct Context(Vec<(String, Box<RawValue>)>);

impl Context {
    pub fn new(context: &JsonObject) -> Self {
        Self(
            context
                .iter()
                .filter_map(|(key, value)| {
                    Some((key.clone(), serde_json::value::to_raw_value(value).ok()?))
                })
                .collect(),
        )
    }

    /// `key`'s value, by scanning: cheaper than hashing for the few keys it has.
    fn get(&self, key: &str) -> Option<&RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| &**v)
    }
}

/// A [`RequestParams`] borrowing the like-named fields of one of rmcp's two param
/// types (they share no trait for them).
macro_rules! borrowed {
    ($params:expr, $context:expr) => {
        RequestParams {
            meta: $params.meta.as_ref().map(|m| &m.0.0),
            name: &$params.name,
            arguments: $params.arguments.as_ref().map(Arguments::Map),
            input_responses: $params.input_responses.as_ref(),
            request_state: $params.request_state.as_deref(),
            context: $context,
        }
    };
}

impl<'a> RequestParams<'a> {
    /// A `tools/call`'s params.
    pub fn call(params: &'a CallToolRequestParams, context: &'a Context) -> Self {
        borrowed!(params, context)
    }

    /// A `prompts/get`'s params.
    pub fn prompt(params: &'a GetPromptRequestParams, context: &'a Context) -> Self {
        borrowed!(params, context)
    }

    /// With the caller's arguments as it wrote them (checked by the parse) instead
    /// of the params', if given.
    pub fn raw_arguments(mut self, raw: Option<&'a RawValue>) -> Self {
        if let Some(raw) = raw {
            self.arguments = Some(Arguments::Raw(raw));
        }
        self
    }

    /// With a relayed request's own `_meta` instead of the caller's, if it has one.
    pub fn relayed(mut self, meta: Option<&'a JsonObject>) -> Self {
        if meta.is_some() {
            self.meta = meta;
        }
        self
    }
}

/// A call's arguments as they go on the wire: a map, or the caller's bytes.
#[derive(Clone, Copy)]
pub(super) enum Arguments<'a> {
    Map(&'a JsonObject),
    Raw(&'a RawValue),
}

impl Serialize for Arguments<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Arguments::Map(map) => map.serialize(serializer),
            Arguments::Raw(raw) => raw.serialize(serializer),
        }
    }
}

impl Serialize for RequestParams<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry(
            "_meta",
            &MetaWithContext {
                own: self.meta,
                context: self.context,
            },
        )?;
        map.serialize_entry("name", self.name)?;
        if let Some(arguments) = self.arguments {
            map.serialize_entry("arguments", &arguments)?;
        }
        if let Some(responses) = self.input_responses {
            map.serialize_entry("inputResponses", responses)?;
        }
        if let Some(state) = self.request_state {
            map.serialize_entry("requestState", state)?;
        }
        map.end()
    }
}

/// The caller's `_meta` with the connection's client context merged in: a context
/// key replaces the caller's value in place, except the caller's client
/// capabilities, which stand (SEP-2322: the backend may ask the caller only what it
/// can answer; the router has already removed any the client sent); context keys
/// the caller did not send follow, in the context's order (as inserting them into
/// the caller's map would place them).
struct MetaWithContext<'a> {
    own: Option<&'a JsonObject>,
    context: &'a Context,
}

/// `key`'s value in a small map, by scanning: cheaper than hashing for the few
/// keys a `_meta` has, and linear for a large one.
fn find<'m>(map: &'m JsonObject, key: &str) -> Option<&'m Value> {
    map.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
}

impl Serialize for MetaWithContext<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        let own = self.own.into_iter().flatten();
        for (key, value) in own {
            match (key != CLIENT_CAPABILITIES)
                .then(|| self.context.get(key))
                .flatten()
            {
                Some(context) => map.serialize_entry(key, context)?,
                None => map.serialize_entry(key, value)?,
            }
        }
        for (key, value) in &self.context.0 {
            if self.own.is_none_or(|own| find(own, key).is_none()) {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::RequestMetaObject;
    use serde_json::json;

    use super::*;

    /// The old way: clone the params, insert the context, serialize.
    fn inserted(params: &CallToolRequestParams, context: &JsonObject) -> String {
        let mut params = params.clone();
        let meta = params.meta.get_or_insert_default();
        for (key, value) in context {
            if key == CLIENT_CAPABILITIES && meta.0.contains_key(key) {
                continue;
            }
            meta.0.insert(key.clone(), value.clone());
        }
        serde_json::to_string(&params).unwrap()
    }

    fn object(value: Value) -> JsonObject {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn the_context_is_written_as_inserting_it_would_write_it() {
        let context = object(json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            CLIENT_CAPABILITIES: {"roots": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "vmcp", "version": "0"},
        }));
        let metas = [
            None,
            Some(json!({})),
            Some(json!({CLIENT_CAPABILITIES: {}})),
            Some(json!({"traceparent": "00-1-2-01", CLIENT_CAPABILITIES: {"x": 1}})),
            Some(json!({"io.modelcontextprotocol/protocolVersion": "2025-11-25", "a": [1]})),
            Some(
                json!({"io.modelcontextprotocol/clientInfo": null, "b": 2, CLIENT_CAPABILITIES: {}}),
            ),
        ];
        for meta in metas {
            for arguments in [None, Some(object(json!({"text": "hi", "n": 1})))] {
                let mut params = CallToolRequestParams::new("echo");
                params.meta = meta.clone().map(|m| RequestMetaObject::from(object(m)));
                params.arguments = arguments;
                params.request_state = meta.is_some().then(|| "s".to_owned());
                let written =
                    serde_json::to_string(&RequestParams::call(&params, &Context::new(&context)))
                        .unwrap();
                assert_eq!(written, inserted(&params, &context), "{meta:?}");
            }
        }
        // The caller's bytes in place of the params' arguments: the same request.
        let mut params = CallToolRequestParams::new("echo");
        params.arguments = Some(object(json!({"text": "hi", "n": [1, {"a": null}]})));
        let raw = RawValue::from_string(r#"{"text":"hi","n":[1,{"a":null}]}"#.to_owned()).unwrap();
        let bare = CallToolRequestParams::new("echo");
        let written = serde_json::to_string(
            &RequestParams::call(&bare, &Context::new(&context)).raw_arguments(Some(&raw)),
        )
        .unwrap();
        assert_eq!(written, inserted(&params, &context));
        // A relayed call's own `_meta` replaces the params'.
        let mut params = CallToolRequestParams::new("echo");
        params.meta = Some(RequestMetaObject::from(object(json!({"a": 1}))));
        let relayed = object(json!({"a": 1, "progressToken": 7}));
        let written = serde_json::to_string(
            &RequestParams::call(&params, &Context::new(&context)).relayed(Some(&relayed)),
        )
        .unwrap();
        params.meta = Some(RequestMetaObject::from(relayed));
        assert_eq!(written, inserted(&params, &context));
    }
}

//! A direct request as it goes on the wire, written from borrowed parts: the
//! caller's params are not cloned to add the connection's client context to their
//! `_meta`; the context is written next to them.
//!
//! Written by hand, not by serde: the member names are constants, and the
//! context's keys and values were serialized once, at connect. Through
//! `serde_json`'s serializer every key was escaped again on every call (about 3 k
//! instructions of a 100 k call).

use rmcp::model::{CallToolRequestParams, GetPromptRequestParams, InputResponses, JsonObject};
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// The `_meta` key whose caller's value stands over the connection's (SEP-2322).
pub(super) const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// The JSON-RPC request `method` with `params`, as the bytes of its body. `method`
/// is one of the client's own constants, which need no escaping.
pub(super) fn request(
    id: i64,
    method: &'static str,
    params: &RequestParams<'_>,
) -> serde_json::Result<Vec<u8>> {
    debug_assert!(!method.contains(['"', '\\']));
    let mut out = Vec::with_capacity(256 + params.arguments.map_or(0, Arguments::len));
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    json(&mut out, &id)?;
    out.extend_from_slice(br#","method":""#);
    out.extend_from_slice(method.as_bytes());
    out.extend_from_slice(br#"","params":"#);
    params.write(&mut out)?;
    out.push(b'}');
    Ok(out)
}

/// `value` as JSON onto `out`.
fn json(out: &mut Vec<u8>, value: &(impl Serialize + ?Sized)) -> serde_json::Result<()> {
    serde_json::to_writer(out, value)
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

/// A connection's client context, each key and value serialized once, at connect:
/// it goes into every request's `_meta` unchanged.
pub(super) struct Context(Vec<ContextEntry>);

struct ContextEntry {
    key: String,
    /// `key` as a JSON string.
    key_json: Box<RawValue>,
    value: Box<RawValue>,
}

impl Context {
    pub fn new(context: &JsonObject) -> Self {
        Self(
            context
                .iter()
                .filter_map(|(key, value)| {
                    Some(ContextEntry {
                        key: key.clone(),
                        key_json: serde_json::value::to_raw_value(key).ok()?,
                        value: serde_json::value::to_raw_value(value).ok()?,
                    })
                })
                .collect(),
        )
    }

    /// `key`'s entry, by scanning: cheaper than hashing for the few keys it has.
    fn entry(&self, key: &str) -> Option<&ContextEntry> {
        self.0.iter().find(|e| e.key == key)
    }
}

impl ContextEntry {
    /// `"key":value`, as serialized at connect.
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.key_json.get().as_bytes());
        out.push(b':');
        out.extend_from_slice(self.value.get().as_bytes());
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

impl Arguments<'_> {
    /// About how many bytes they take on the wire.
    fn len(self) -> usize {
        match self {
            Arguments::Map(map) => 16 * map.len(),
            Arguments::Raw(raw) => raw.get().len(),
        }
    }

    fn write(self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        match self {
            Arguments::Map(map) => json(out, map),
            Arguments::Raw(raw) => {
                out.extend_from_slice(raw.get().as_bytes());
                Ok(())
            }
        }
    }
}

impl RequestParams<'_> {
    /// The params object onto `out`, members in rmcp's order.
    fn write(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.extend_from_slice(br#"{"_meta":"#);
        MetaWithContext {
            own: self.meta,
            context: self.context,
        }
        .write(out)?;
        out.extend_from_slice(br#","name":"#);
        json(out, self.name)?;
        if let Some(arguments) = self.arguments {
            out.extend_from_slice(br#","arguments":"#);
            arguments.write(out)?;
        }
        if let Some(responses) = self.input_responses {
            out.extend_from_slice(br#","inputResponses":"#);
            json(out, responses)?;
        }
        if let Some(state) = self.request_state {
            out.extend_from_slice(br#","requestState":"#);
            json(out, state)?;
        }
        out.push(b'}');
        Ok(())
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

impl MetaWithContext<'_> {
    fn write(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.push(b'{');
        let mut first = true;
        let mut comma = |out: &mut Vec<u8>| {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
        };
        for (key, value) in self.own.into_iter().flatten() {
            comma(out);
            let entry = self.context.entry(key);
            match entry {
                Some(entry) if key != CLIENT_CAPABILITIES => entry.write(out),
                _ => {
                    match entry {
                        Some(entry) => out.extend_from_slice(entry.key_json.get().as_bytes()),
                        None => json(out, key)?,
                    }
                    out.push(b':');
                    json(out, value)?;
                }
            }
        }
        for entry in &self.context.0 {
            if self.own.is_none_or(|own| find(own, &entry.key).is_none()) {
                comma(out);
                entry.write(out);
            }
        }
        out.push(b'}');
        Ok(())
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

    fn on_wire(params: &RequestParams<'_>) -> String {
        let mut out = Vec::new();
        params.write(&mut out).unwrap();
        String::from_utf8(out).unwrap()
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
                let written = on_wire(&RequestParams::call(&params, &Context::new(&context)));
                assert_eq!(written, inserted(&params, &context), "{meta:?}");
            }
        }
        // The caller's bytes in place of the params' arguments: the same request.
        let mut params = CallToolRequestParams::new("echo");
        params.arguments = Some(object(json!({"text": "hi", "n": [1, {"a": null}]})));
        let raw = RawValue::from_string(r#"{"text":"hi","n":[1,{"a":null}]}"#.to_owned()).unwrap();
        let bare = CallToolRequestParams::new("echo");
        let written =
            on_wire(&RequestParams::call(&bare, &Context::new(&context)).raw_arguments(Some(&raw)));
        assert_eq!(written, inserted(&params, &context));
        // A relayed call's own `_meta` replaces the params'.
        let mut params = CallToolRequestParams::new("echo");
        params.meta = Some(RequestMetaObject::from(object(json!({"a": 1}))));
        let relayed = object(json!({"a": 1, "progressToken": 7}));
        let written =
            on_wire(&RequestParams::call(&params, &Context::new(&context)).relayed(Some(&relayed)));
        params.meta = Some(RequestMetaObject::from(relayed));
        assert_eq!(written, inserted(&params, &context));
    }

    /// Names, keys and values that need escaping come out as serde_json writes
    /// them, inside the JSON-RPC envelope.
    #[test]
    fn a_request_body_is_the_json_rmcp_writes() {
        let context = object(json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "k\"ey": "v\n",
        }));
        let mut params = CallToolRequestParams::new("na\"me\u{1}");
        params.meta = Some(RequestMetaObject::from(object(
            json!({"q\\uote": "x\"y", CLIENT_CAPABILITIES: {}}),
        )));
        params.arguments = Some(object(json!({"t": "\u{7f}\""})));
        params.request_state = Some("s\"".into());
        let body = request(
            -42,
            "tools/call",
            &RequestParams::call(&params, &Context::new(&context)),
        )
        .unwrap();
        let text = std::str::from_utf8(&body).unwrap();
        let expected = format!(
            r#"{{"jsonrpc":"2.0","id":-42,"method":"tools/call","params":{}}}"#,
            inserted(&params, &context)
        );
        assert_eq!(text, expected);
        serde_json::from_str::<Value>(text).unwrap();
    }
}

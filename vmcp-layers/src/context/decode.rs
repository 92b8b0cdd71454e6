// Over 600 lines: the one-pass decoder and the proptest holding it equal to the Value-based reference are one idea; over a third is tests.
//! Decoding a JSON-RPC body into a [`ParsedMcpRequest`]: once per request, by the
//! parse layer, so no later layer parses it again.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use serde::de::DeserializeSeed;
use serde_json::value::RawValue;

use super::arguments::Key;
use super::{Arguments, ClientInfo, McpRevision, ParseError, ParsedMcpRequest};
use crate::strict_json::{Strict, StrictVisitor, duplicate, insert_new};

pub(super) const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";
const CLIENT_INFO_META: &str = "io.modelcontextprotocol/clientInfo";
/// Where `params.arguments` is in a body: in `params`, in the body's object.
const ARGUMENTS_DEPTH: usize = 3;

/// `body` decoded; with `RAW`, `params.arguments` is kept as the body's bytes when
/// it is an object (anything else there is an error, left to the other decode).
fn decode<const RAW: bool>(body: &[u8]) -> Result<Body<'_>, serde_json::Error> {
    // One UTF-8 check of the whole body, instead of one per string (and per raw
    // value) that a decode of bytes makes; a body that fails it is decoded as bytes,
    // so its error is the one serde_json gives.
    match std::str::from_utf8(body) {
        Ok(text) => decode_from::<RAW, _>(serde_json::Deserializer::from_str(text)),
        Err(_) => decode_from::<RAW, _>(serde_json::Deserializer::from_slice(body)),
    }
}

fn decode_from<'de, const RAW: bool, R: serde_json::de::Read<'de>>(
    mut deserializer: serde_json::Deserializer<R>,
) -> Result<Body<'de>, serde_json::Error> {
    let decoded = BodySeed::<RAW>.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(decoded)
}

/// `key`'s value in `map`, by scanning (see [`ParsedMcpRequest::meta_value`]).
pub(super) fn member<'m>(map: &'m Map<String, Value>, key: &str) -> Option<&'m Value> {
    map.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
}

impl ClientInfo {
    fn from_value(value: &Value) -> Option<Self> {
        let value = value.as_object()?;
        let name = member(value, "name")?.as_str()?.to_owned();
        let version = member(value, "version")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        Some(Self { name, version })
    }
}

impl ParsedMcpRequest {
    /// Decode a JSON-RPC body. `protocol_header` is the `MCP-Protocol-Version`
    /// header and `has_session` whether an `Mcp-Session-Id` header was sent; both
    /// feed the revision classification.
    pub fn parse(
        body: &[u8],
        protocol_header: Option<&str>,
        has_session: bool,
    ) -> Result<Self, ParseError> {
        // `arguments` is kept as the client's bytes when it is an object the check
        // accepts. Any error, or arguments it refuses, and the body is decoded again
        // with `arguments` as values: that decode finds the error, and says it, as
        // a decode of the whole body into values does (the tests hold it to that).
        if let Ok(Body::Object(members)) = decode::<true>(body)
            && members
                .params
                .arguments
                .as_ref()
                .is_none_or(|arguments| match arguments {
                    Args::Raw(raw) => super::arguments::checked(raw, ARGUMENTS_DEPTH),
                    Args::Values(_) => true,
                })
        {
            return Self::from_members(members, protocol_header, has_session);
        }
        let members = match decode::<false>(body) {
            Ok(Body::Object(members)) => members,
            Ok(Body::Array) => return Err(ParseError::Batch),
            Ok(Body::Other) => return Err(ParseError::NotAnObject),
            Err(e) if e.classify() == serde_json::error::Category::Data => {
                return Err(ParseError::DuplicateKey(e.to_string()));
            }
            Err(e) => return Err(ParseError::NotJson(e.to_string())),
        };
        Self::from_members(members, protocol_header, has_session)
    }

    /// The request from its decoded members (see [`Self::parse`]).
    fn from_members(
        members: Members<'_>,
        protocol_header: Option<&str>,
        has_session: bool,
    ) -> Result<Self, ParseError> {
        let Members {
            id,
            jsonrpc_2_0,
            method,
            params,
            rest,
        } = members;
        // rmcp reads ids as string or i64; anything else would reach it and be
        // answered 415 instead of -32600.
        if id
            .as_ref()
            .is_some_and(|id| !(id.is_string() || id.is_i64()))
        {
            return Err(ParseError::InvalidId);
        }
        let method = method.unwrap_or_default();
        let ParamsMembers {
            mut name,
            mut uri,
            arguments,
            meta,
            rest: params,
        } = params;
        let arguments = arguments.map(|arguments| match arguments {
            Args::Raw(raw) => Arguments::from_checked(raw.to_owned()),
            Args::Values(map) => Arguments::from_map(map),
        });
        let client_info = params.get("clientInfo").and_then(ClientInfo::from_value);
        // A completion names what it completes in `ref`; it is authorized as that
        // prompt or resource, so the name goes where those requests carry theirs.
        // `ref` itself stays in the params: it is forwarded as it came.
        if method == "completion/complete"
            && let Some(Value::Object(reference)) = params.get("ref")
        {
            let field = |key: &str| {
                reference
                    .get(key)
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            };
            match reference.get("type").and_then(Value::as_str) {
                Some("ref/prompt") => name = field("name"),
                Some("ref/resource") => uri = field("uri"),
                _ => {}
            }
        }
        let meta_version = meta
            .as_ref()
            .and_then(|m| member(m, PROTOCOL_VERSION_META))
            .and_then(Value::as_str);
        let client = client_info.or_else(|| {
            meta.as_ref()
                .and_then(|m| member(m, CLIENT_INFO_META))
                .and_then(ClientInfo::from_value)
        });
        let revision = if method == "initialize" || has_session {
            McpRevision::Legacy
        } else if let Some(version) = meta_version.or(protocol_header) {
            McpRevision::from_version(version)
        } else {
            McpRevision::Legacy
        };
        Ok(Self {
            id,
            method,
            name,
            uri,
            arguments,
            meta,
            client,
            revision: Some(revision),
            jsonrpc_2_0,
            rest,
            params_rest: params,
        })
    }
}

// One pass over the body: the members `ParsedMcpRequest` has fields for go straight
// into them (no map built only to be taken apart again); the others, and those of
// an unexpected type, into `rest` maps. Every object is checked for repeated keys,
// as `strict_json` does.

/// A whole body: a JSON-RPC object, a batch, or any other JSON value.
// `Body` and `Params` have twin scalar visits; one generic visitor for both cost
// about 1 k instructions per request (callgrind), so each keeps its own.
// Returned once per request and taken apart at once: boxing the object would cost
// an allocation to save a move.
#[allow(clippy::large_enum_variant)]
enum Body<'de> {
    Object(Members<'de>),
    Array,
    Other,
}

/// The top-level members of a JSON-RPC object.
#[derive(Default)]
struct Members<'de> {
    id: Option<Value>,
    /// `jsonrpc` is `"2.0"` (otherwise it is in `rest`).
    jsonrpc_2_0: bool,
    /// `method`, when a string (otherwise it is in `rest`).
    method: Option<String>,
    params: ParamsMembers<'de>,
    rest: Map<String, Value>,
}

/// The members of `params`, when an object.
#[derive(Default)]
struct ParamsMembers<'de> {
    name: Option<String>,
    uri: Option<String>,
    arguments: Option<Args<'de>>,
    meta: Option<Map<String, Value>>,
    rest: Map<String, Value>,
}

/// `params.arguments`, when an object: its bytes in the body (not yet checked for
/// repeated keys), or its values.
enum Args<'de> {
    Raw(&'de RawValue),
    Values(Map<String, Value>),
}

/// `params`: an object, or any other value (kept as it came).
enum Params<'de> {
    Object(ParamsMembers<'de>),
    Other(Value),
}

/// Marks `key` as seen in its object, refusing a second one.
fn first<E: de::Error>(seen: &mut bool, key: &str) -> Result<(), E> {
    if std::mem::replace(seen, true) {
        return Err(duplicate(key));
    }
    Ok(())
}

/// `value` if it is a string, else `value` into `rest` under `key`.
fn string_or_rest<E: de::Error>(
    value: Value,
    key: &str,
    rest: &mut Map<String, Value>,
) -> Result<Option<String>, E> {
    match value {
        Value::String(s) => Ok(Some(s)),
        other => insert_new(rest, key.to_owned(), other).map(|()| None),
    }
}

/// `value` if it is an object, else `value` into `rest` under `key`.
fn object_or_rest<E: de::Error>(
    value: Value,
    key: &str,
    rest: &mut Map<String, Value>,
) -> Result<Option<Map<String, Value>>, E> {
    match value {
        Value::Object(o) => Ok(Some(o)),
        other => insert_new(rest, key.to_owned(), other).map(|()| None),
    }
}

/// Decodes a [`Body`]; `RAW`: see [`decode`].
struct BodySeed<const RAW: bool>;

impl<'de, const RAW: bool> DeserializeSeed<'de> for BodySeed<RAW> {
    type Value = Body<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Body<'de>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, const RAW: bool> Visitor<'de> for BodySeed<RAW> {
    type Value = Body<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC message")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Body<'de>, A::Error> {
        let mut members = Members::default();
        let (mut id, mut jsonrpc, mut method, mut params) = (false, false, false, false);
        while let Some(Key(key)) = map.next_key()? {
            match key.as_ref() {
                // Not into `rest` when it is what every request has: that map (and
                // the member's key and value) would be built for nothing.
                "jsonrpc" => {
                    let Strict(value) = map.next_value()?;
                    first(&mut jsonrpc, &key)?;
                    if value.as_str() == Some("2.0") {
                        members.jsonrpc_2_0 = true;
                    } else {
                        insert_new(&mut members.rest, key.into_owned(), value)?;
                    }
                }
                "id" => {
                    let Strict(value) = map.next_value()?;
                    first(&mut id, &key)?;
                    members.id = Some(value);
                }
                "method" => {
                    let Strict(value) = map.next_value()?;
                    first(&mut method, &key)?;
                    members.method = string_or_rest(value, &key, &mut members.rest)?;
                }
                "params" => {
                    let value = map.next_value_seed(ParamsSeed::<RAW>)?;
                    first(&mut params, &key)?;
                    match value {
                        Params::Object(object) => members.params = object,
                        Params::Other(other) => {
                            insert_new(&mut members.rest, key.into_owned(), other)?;
                        }
                    }
                }
                _ => {
                    let Strict(value) = map.next_value()?;
                    insert_new(&mut members.rest, key.into_owned(), value)?;
                }
            }
        }
        Ok(Body::Object(members))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Body<'de>, A::Error> {
        // Read to the end, so a malformed batch is refused as malformed.
        StrictVisitor.visit_seq(seq).map(|_| Body::Array)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Body<'de>, E> {
        Ok(Body::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Body<'de>, E> {
        Ok(Body::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Body<'de>, E> {
        Ok(Body::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Body<'de>, E> {
        Ok(Body::Other)
    }

    fn visit_str<E>(self, _: &str) -> Result<Body<'de>, E> {
        Ok(Body::Other)
    }

    fn visit_unit<E>(self) -> Result<Body<'de>, E> {
        Ok(Body::Other)
    }
}

/// Decodes [`Params`]; `RAW`: see [`decode`].
struct ParamsSeed<const RAW: bool>;

impl<'de, const RAW: bool> DeserializeSeed<'de> for ParamsSeed<RAW> {
    type Value = Params<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Params<'de>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, const RAW: bool> Visitor<'de> for ParamsSeed<RAW> {
    type Value = Params<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Params<'de>, A::Error> {
        let mut members = ParamsMembers::default();
        let mut seen = [false; 4];
        while let Some(Key(key)) = map.next_key()? {
            let slot = match key.as_ref() {
                "name" => 0,
                "uri" => 1,
                "arguments" => 2,
                "_meta" => 3,
                _ => {
                    let Strict(value) = map.next_value()?;
                    insert_new(&mut members.rest, key.into_owned(), value)?;
                    continue;
                }
            };
            if RAW && slot == 2 {
                let raw: &'de RawValue = map.next_value()?;
                first(&mut seen[slot], &key)?;
                if !raw.get().starts_with('{') {
                    // Into `rest` as a value: for the other decode.
                    return Err(de::Error::custom("arguments that are not an object"));
                }
                members.arguments = Some(Args::Raw(raw));
                continue;
            }
            let Strict(value) = map.next_value()?;
            first(&mut seen[slot], &key)?;
            let rest = &mut members.rest;
            match slot {
                0 => members.name = string_or_rest(value, &key, rest)?,
                1 => members.uri = string_or_rest(value, &key, rest)?,
                2 => members.arguments = object_or_rest(value, &key, rest)?.map(Args::Values),
                _ => members.meta = object_or_rest(value, &key, rest)?,
            }
        }
        Ok(Params::Object(members))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Params<'de>, A::Error> {
        StrictVisitor.visit_seq(seq).map(Params::Other)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Params<'de>, E> {
        Ok(Params::Other(Value::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Params<'de>, E> {
        Ok(Params::Other(Value::from(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Params<'de>, E> {
        Ok(Params::Other(Value::from(v)))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Params<'de>, E> {
        Ok(Params::Other(Value::from(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Params<'de>, E> {
        Ok(Params::Other(Value::String(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Params<'de>, E> {
        Ok(Params::Other(Value::String(v)))
    }

    fn visit_unit<E>(self) -> Result<Params<'de>, E> {
        Ok(Params::Other(Value::Null))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::context::CallKind;

    /// How `parse` decoded before it went member by member: the whole body as a
    /// strict `Value`, then taken apart. `parse` must agree with it on every body.
    fn reference(
        body: &[u8],
        protocol_header: Option<&str>,
        has_session: bool,
    ) -> Result<ParsedMcpRequest, ParseError> {
        let value = crate::strict_json::from_slice(body).map_err(|e| {
            if e.classify() == serde_json::error::Category::Data {
                ParseError::DuplicateKey(e.to_string())
            } else {
                ParseError::NotJson(e.to_string())
            }
        })?;
        let mut object = match value {
            Value::Object(object) => object,
            Value::Array(_) => return Err(ParseError::Batch),
            _ => return Err(ParseError::NotAnObject),
        };
        // Take `key` when it has the expected shape; otherwise leave it in `map`.
        fn take<T>(
            map: &mut Map<String, Value>,
            key: &str,
            shape: impl FnOnce(Value) -> Result<T, Value>,
        ) -> Option<T> {
            let value = map.remove(key)?;
            match shape(value) {
                Ok(taken) => Some(taken),
                Err(value) => {
                    map.insert(key.to_owned(), value);
                    None
                }
            }
        }
        let string = |value| match value {
            Value::String(s) => Ok(s),
            other => Err(other),
        };
        let object_of = |value| match value {
            Value::Object(o) => Ok(o),
            other => Err(other),
        };
        let method = take(&mut object, "method", string);
        let jsonrpc_2_0 = take(&mut object, "jsonrpc", |value| match value {
            Value::String(s) if s == "2.0" => Ok(()),
            other => Err(other),
        })
        .is_some();
        let id = object.remove("id");
        let mut params = take(&mut object, "params", object_of).unwrap_or_default();
        let params = ParamsMembers {
            name: take(&mut params, "name", string),
            uri: take(&mut params, "uri", string),
            arguments: take(&mut params, "arguments", object_of).map(Args::Values),
            meta: take(&mut params, "_meta", object_of),
            rest: params,
        };
        let members = Members {
            id,
            jsonrpc_2_0,
            method,
            params,
            rest: object,
        };
        ParsedMcpRequest::from_members(members, protocol_header, has_session)
    }

    /// JSON-RPC-shaped bodies: the members `parse` takes (of the right type or
    /// not), unknown ones, repeated keys, and non-object bodies.
    fn body() -> impl Strategy<Value = String> {
        let key = prop::sample::select(vec![
            "jsonrpc",
            "id",
            "method",
            "params",
            "name",
            "uri",
            "arguments",
            "_meta",
            "clientInfo",
            "ref",
            "type",
            "version",
            "x",
            "n\\u0061me",
        ]);
        let scalar = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            any::<i64>().prop_map(|n| n.to_string()),
            Just("1.5".to_owned()),
            Just("18446744073709551615".to_owned()),
            prop::sample::select(vec![
                "tools/call",
                "completion/complete",
                "initialize",
                "ref/prompt",
                "ref/resource",
                "2026-07-28",
                "2025-11-25",
                "2.0",
                "io.modelcontextprotocol/protocolVersion",
                "a\\\"b",
                "",
            ])
            .prop_map(|s| format!("\"{s}\"")),
        ];
        fn object(members: Vec<(&str, String)>) -> String {
            let members: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("\"{k}\":{v}"))
                .collect();
            format!("{{{}}}", members.join(","))
        }
        let inner_key = key.clone();
        let value = scalar.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|items| format!("[{}]", items.join(","))),
                prop::collection::vec((inner_key.clone(), inner), 0..6).prop_map(object),
            ]
        });
        let top = prop::collection::vec((key, value.clone()), 0..8).prop_map(object);
        prop_oneof![
            // Mostly objects at the top; any value, or one with trailing garbage, now and then.
            6 => top,
            1 => value.clone(),
            1 => value.prop_map(|v| format!("{v}x")),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

        #[test]
        fn parse_agrees_with_the_value_decoder(
            body in body(),
            header in prop::option::of(prop::sample::select(vec!["2025-11-25", "2026-07-28"])),
            session: bool,
        ) {
            prop_assert_eq!(
                ParsedMcpRequest::parse(body.as_bytes(), header, session),
                reference(body.as_bytes(), header, session),
                "{}", body
            );
        }
    }

    #[test]
    fn parse_agrees_on_hand_picked_bodies() {
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"k":[1,{"z":null}]},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"extra":1}}"#,
            r#"{"method":1,"params":[1,2],"id":"x"}"#,
            r#"{"params":{"name":1,"uri":{},"arguments":[],"_meta":"m"}}"#,
            r#"{"params":{"name":"a","name":"b"}}"#,
            r#"{"params":{"name":1,"name":"b"}}"#,
            r#"{"method":"a","jsonrpc":"2.0","method":2}"#,
            r#"{"params":{},"params":{}}"#,
            r#"{"id":1,"id":1}"#,
            r#"{"x":1,"x":2}"#,
            r#"{"params":{"ref":{"a":1,"a":1}}}"#,
            r#"{"method":"completion/complete","params":{"ref":{"type":"ref/resource","uri":"u"},"uri":"v"}}"#,
            r#"{"na\u006de":1}"#,
            r#"{"params":{"na\u006de":"x"}}"#,
            r#"[{"a":1,"a":2}]"#,
            r#"[1,"#,
            r#"{"a":1}  "#,
            r#"{"a":1} {}"#,
            "\"s\"",
            "null",
            "",
            "{\"a\":\"\\ud800\"}",
            // `arguments`, kept raw when the check accepts it: repeated keys at any
            // depth, escaped twins, not an object, whitespace, bad strings, errors after it.
            r#"{"params":{"arguments":{"a":1,"a":2}}}"#,
            r#"{"params":{"arguments":{"a":1,"\u0061":2}}}"#,
            r#"{"params":{"arguments":{"x":[{"b":1},{"b":1,"b":2}]}}}"#,
            r#"{"params":{"arguments":[{"a":1,"a":2}]}}"#,
            r#"{"params":{"arguments":"s","name":"t"}}"#,
            r#"{"params":{"arguments":null}}"#,
            r#"{"params":{"arguments" : { "a" : [ 1 , 2 ] } , "name":"t"}}"#,
            r#"{"params":{"arguments":{"a":"\ud800"}}}"#,
            r#"{"params":{"arguments":{"a":"\x"}}}"#,
            r#"{"params":{"arguments":{"a":1},"arguments":{"a":1}}}"#,
            r#"{"params":{"arguments":{"a":1}},"id":1,"id":2}"#,
            r#"{"params":{"arguments":{"a":1}}"#,
            r#"{"params":{"arguments":{"a":1}},}"#,
            r#"{"params":{"arguments":{"a":1e400}}}"#,
            r#"{"params":{"arguments":{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k1":9}}}"#,
        ] {
            assert_eq!(
                ParsedMcpRequest::parse(body.as_bytes(), None, false),
                reference(body.as_bytes(), None, false),
                "{body}"
            );
        }
    }

    #[test]
    fn parse_agrees_on_bodies_that_are_not_utf8() {
        // A body is read as text after one UTF-8 check; one that fails it is read as
        // bytes, and must fail as the value decoder does.
        for body in [
            &b"{\"method\":\"tools/call\",\"params\":{\"name\":\"\xff\"}}"[..],
            b"{\"\xc3\":1}",
            b"{\"params\":{\"arguments\":{\"a\":\"\xed\xa0\x80\"}}}",
            b"{\"id\":1}\xff",
            b"\xef\xbb\xbf{}",
        ] {
            let parsed = ParsedMcpRequest::parse(body, None, false);
            assert!(parsed.is_err(), "{body:?}");
            assert_eq!(parsed, reference(body, None, false), "{body:?}");
        }
    }

    #[test]
    fn parse_agrees_on_arguments_nested_to_the_recursion_limit() {
        // serde_json refuses a document's 128th open container; `arguments` opens
        // the third.
        for depth in 120..=130 {
            let body = format!(
                r#"{{"params":{{"arguments":{{"a":{}1{}}}}}}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            );
            let parsed = ParsedMcpRequest::parse(body.as_bytes(), None, false);
            assert_eq!(parsed, reference(body.as_bytes(), None, false), "{depth}");
            assert_eq!(parsed.is_ok(), depth + 3 < 128, "{depth}");
            let body = body.replace("1]", r#"{"b":1,"b":2}]"#);
            let parsed = ParsedMcpRequest::parse(body.as_bytes(), None, false);
            assert_eq!(parsed, reference(body.as_bytes(), None, false), "{depth}");
            assert!(parsed.is_err(), "{depth}");
        }
    }

    #[test]
    fn parses_a_modern_tool_call_once() {
        let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"gh_create_issue","arguments":{"repo":"a/b"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let parsed = ParsedMcpRequest::parse(body, Some("2026-07-28"), false).unwrap();
        assert_eq!(parsed.method, "tools/call");
        assert_eq!(parsed.id, Some(Value::from(7)));
        assert_eq!(parsed.name.as_deref(), Some("gh_create_issue"));
        assert_eq!(parsed.arguments.as_ref().unwrap().map()["repo"], "a/b");
        // Kept as the client wrote it, not written again from a map.
        let body = br#"{"id":1,"params":{"arguments":{ "repo" : "a\/b" }}}"#;
        let spaced = ParsedMcpRequest::parse(body, None, false).unwrap();
        let arguments = spaced.arguments.as_ref().unwrap();
        assert_eq!(arguments.raw().get(), r#"{ "repo" : "a\/b" }"#);
        assert_eq!(arguments, parsed.arguments.as_ref().unwrap());
        assert_eq!(parsed.revision, Some(McpRevision::Modern));
        assert_eq!(parsed.meta_protocol_version(), Some("2026-07-28"));
    }

    #[test]
    fn client_info_from_initialize_or_meta() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"c","version":"1"}}}"#;
        let parsed = ParsedMcpRequest::parse(body, None, false).unwrap();
        assert_eq!(parsed.client.unwrap().name, "c");
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/clientInfo":{"name":"m","version":"2"}}}}"#;
        let parsed = ParsedMcpRequest::parse(body, None, false).unwrap();
        assert_eq!(parsed.client.unwrap().version, "2");
    }

    #[test]
    fn initialize_and_session_requests_are_legacy() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
        let parsed = ParsedMcpRequest::parse(body, None, false).unwrap();
        assert_eq!(parsed.revision, Some(McpRevision::Legacy));
        let body = br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
        let parsed = ParsedMcpRequest::parse(body, Some("2025-11-25"), true).unwrap();
        assert_eq!(parsed.revision, Some(McpRevision::Legacy));
    }

    #[test]
    fn completions_name_what_they_complete() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"gh_p"},"argument":{"name":"a","value":""}}}"#;
        let parsed = ParsedMcpRequest::parse(body, None, false).unwrap();
        assert_eq!(parsed.target(), Some("gh_p"));
        assert_eq!(CallKind::of_request(&parsed), Some(CallKind::Prompt));
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{"ref":{"type":"ref/resource","uri":"x://{id}"},"argument":{"name":"id","value":""}}}"#;
        let parsed = ParsedMcpRequest::parse(body, None, false).unwrap();
        assert_eq!(parsed.uri.as_deref(), Some("x://{id}"));
        assert_eq!(CallKind::of_request(&parsed), Some(CallKind::Resource));
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{"ref":{"type":"ref/other","name":"n"}}}"#;
        let parsed = ParsedMcpRequest::parse(body, None, false).unwrap();
        assert_eq!(parsed.target(), None, "an unknown reference names nothing");
        assert_eq!(CallKind::of_request(&parsed), Some(CallKind::Prompt));
        let body =
            br#"{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"x://a"}}"#;
        let parsed = ParsedMcpRequest::parse(body, None, false).unwrap();
        assert_eq!(CallKind::of_request(&parsed), Some(CallKind::Resource));
    }

    #[test]
    fn rejects_batches_and_garbage() {
        assert_eq!(
            ParsedMcpRequest::parse(b"[]", None, false),
            Err(ParseError::Batch)
        );
        assert!(matches!(
            ParsedMcpRequest::parse(b"{nope", None, false),
            Err(ParseError::NotJson(_))
        ));
        assert_eq!(
            ParsedMcpRequest::parse(b"42", None, false),
            Err(ParseError::NotAnObject)
        );
    }

    #[test]
    fn rejects_duplicate_keys_and_ids_rmcp_cannot_read() {
        let twice = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call"}"#;
        assert!(matches!(
            ParsedMcpRequest::parse(twice, None, false),
            Err(ParseError::DuplicateKey(_))
        ));
        for id in ["null", "{}", "[1]", "true", "1.5"] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#);
            assert_eq!(
                ParsedMcpRequest::parse(body.as_bytes(), None, false),
                Err(ParseError::InvalidId),
                "id {id}"
            );
        }
        let body = br#"{"jsonrpc":"2.0","id":"a","method":"tools/list"}"#;
        assert!(ParsedMcpRequest::parse(body, None, false).is_ok());
    }
}

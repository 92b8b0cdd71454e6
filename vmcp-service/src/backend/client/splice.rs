//! A backend's complete `tools/call` or `prompts/get` result, passed on as the
//! backend wrote it.
//!
//! The direct path holds the result's bytes; reading them into rmcp's
//! `CallToolResult` (or `GetPromptResult`) only to write them again costs every
//! call a copy of each content block both ways. Only what must change on the
//! client hop is touched: `resultType` (`"complete"` for a 2026-07-28 caller,
//! absent for an older one, as rmcp's server writes it) and the reserved `_meta`
//! keys that do not cross the gateway (see `backend::meta`). Members the gateway
//! does not know pass unchanged. Whatever is not plainly a complete result
//! (`input_required`, a task, no required member, a repeated or ill-typed one,
//! tool output an older caller cannot read) is left to the typed reading, which
//! decides as before.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::backend::meta::crosses_gateway;

/// Which result is spliced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A `tools/call` result (rmcp's `CallToolResult`).
    Call,
    /// A `prompts/get` result (rmcp's `GetPromptResult`).
    Prompt,
}

/// Whom the result is for: the protocol revision the caller negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    /// 2026-07-28: `resultType: "complete"` is written.
    Modern,
    /// Before 2026-07-28 (a session): no `resultType`, and tool output only as an
    /// object (rmcp's server moves any other into the content, which the typed
    /// reading does).
    Legacy,
}

/// `raw` as the caller's result, when it is a complete result of `kind` as rmcp
/// reads one: an object whose `resultType` is absent or `"complete"`, with, for a
/// call, `content` (an array), `structuredContent` or `isError` (a boolean); for a
/// prompt, `messages` (an array) and at most a string `description`. `None` for
/// anything else. A call's missing `content` is written as `[]`.
pub(crate) fn complete_result(kind: Kind, peer: Peer, raw: &RawValue) -> Option<Vec<u8>> {
    let Members(members) = serde_json::from_str(raw.get()).ok()?;
    let (mut known, mut content) = (false, false);
    for (i, (key, value)) in members.iter().enumerate() {
        if members[..i].iter().any(|(seen, _)| seen == key) {
            return None;
        }
        let value = value.get();
        match (kind, key.as_ref()) {
            (_, "resultType") if value != r#""complete""# => return None,
            (Kind::Call, "content") | (Kind::Prompt, "messages") if !value.starts_with('[') => {
                return None;
            }
            (Kind::Call, "isError") if value != "true" && value != "false" => return None,
            (Kind::Call, "structuredContent")
                if peer == Peer::Legacy && !value.starts_with('{') =>
            {
                return None;
            }
            (Kind::Prompt, "description") if !value.starts_with('"') => return None,
            (Kind::Call, "content") | (Kind::Prompt, "messages") => (known, content) = (true, true),
            (Kind::Call, "isError" | "structuredContent") => known = true,
            _ => {}
        }
    }
    // A prompt without `messages` does not read (the typed reading refuses it).
    if !known || (kind == Kind::Prompt && !content) {
        return None;
    }
    let mut out = Vec::with_capacity(raw.get().len() + 24);
    out.push(b'{');
    let mut first = true;
    if peer == Peer::Modern {
        out.extend_from_slice(br#""resultType":"complete""#);
        first = false;
    }
    // Required by the schema; rmcp reads it as empty when a backend leaves it out.
    if !content {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        out.extend_from_slice(br#""content":[]"#);
    }
    for (key, value) in &members {
        if key == "resultType" {
            continue;
        }
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        write_key(&mut out, key);
        if key == "_meta" {
            write_meta(&mut out, value)?;
        } else {
            out.extend_from_slice(value.get().as_bytes());
        }
    }
    out.push(b'}');
    Some(out)
}

/// `_meta` without the reserved keys that stop at the gateway; `None` when it is
/// not an object (the typed reading refuses that too).
fn write_meta(out: &mut Vec<u8>, meta: &RawValue) -> Option<()> {
    let Members(members) = serde_json::from_str(meta.get()).ok()?;
    if members.iter().all(|(key, _)| crosses_gateway(key)) {
        out.extend_from_slice(meta.get().as_bytes());
        return Some(());
    }
    out.push(b'{');
    let mut first = true;
    for (key, value) in members.iter().filter(|(key, _)| crosses_gateway(key)) {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        write_key(out, key);
        out.extend_from_slice(value.get().as_bytes());
    }
    out.push(b'}');
    Some(())
}

/// `"key":`, escaped as JSON requires.
fn write_key(out: &mut Vec<u8>, key: &str) {
    // Writing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, key);
    out.push(b':');
}

/// A JSON object's members in order, values unparsed.
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> Visitor<'de> for Object {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some(Key(key)) = map.next_key()? {
                    members.push((key, map.next_value()?));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Object)
    }
}

/// An object key, borrowed unless it has escapes (serde's `borrow` on a `Cow`).
#[derive(Deserialize)]
#[serde(transparent)]
struct Key<'a>(#[serde(borrow)] Cow<'a, str>);

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolResult, GetPromptResult, ResultType};
    use serde_json::{Value, json};

    fn raw(value: &str) -> Box<RawValue> {
        RawValue::from_string(value.to_owned()).unwrap()
    }

    /// What the typed reading gives the caller: rmcp's `CallToolResult`, complete,
    /// reserved `_meta` stripped (as the edge did before it spliced).
    fn typed(value: &str) -> Option<Value> {
        let mut result: CallToolResult = serde_json::from_str(value).ok()?;
        if let Some(meta) = result.meta.as_mut() {
            crate::backend::meta::strip_reserved(&mut meta.0);
        }
        result.result_type = Some(ResultType::COMPLETE);
        Some(serde_json::to_value(result).unwrap())
    }

    #[test]
    fn spliced_results_equal_the_typed_reading() {
        let cases = [
            r#"{"content":[{"type":"text","text":"hi"}]}"#,
            r#"{"resultType":"complete","content":[{"type":"text","text":"a \"quoted\" \u00e9"}],"isError":false}"#,
            r#"{"structuredContent":{"n":1},"content":[]}"#,
            r#"{"structuredContent":null}"#,
            r#"{"isError":true}"#,
            r#"{ "content" : [ ] , "_meta" : { "a" : 1 } }"#,
            r#"{"content":[],"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"evil"},"io.modelcontextprotocol/related-task":{"taskId":"t"},"x":[1]}}"#,
            r#"{"content":[],"_meta":{"io.modelcontextprotocol/protocolVersion":"x"}}"#,
            r#"{"content":[],"\u005fmeta":{"io.modelcontextprotocol/serverInfo":1,"k":2}}"#,
        ];
        for case in cases {
            let spliced = complete_result(Kind::Call, Peer::Modern, &raw(case))
                .unwrap_or_else(|| panic!("{case}"));
            let spliced: Value = serde_json::from_slice(&spliced).unwrap();
            assert_eq!(Some(spliced), typed(case), "{case}");
        }
    }

    /// rmcp's reading of a prompt, complete, reserved `_meta` stripped (the typed
    /// path's answer), with `resultType` as `peer` gets it.
    fn typed_prompt(value: &str, peer: Peer) -> Option<Value> {
        let mut result: GetPromptResult = serde_json::from_str(value).ok()?;
        if let Some(meta) = result.meta.as_mut() {
            crate::backend::meta::strip_reserved(&mut meta.0);
        }
        result.result_type = (peer == Peer::Modern).then_some(ResultType::COMPLETE);
        Some(serde_json::to_value(result).unwrap())
    }

    #[test]
    fn spliced_prompts_equal_the_typed_reading_for_both_peers() {
        let cases = [
            r#"{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}]}"#,
            r#"{"resultType":"complete","description":"d \"q\"","messages":[]}"#,
            r#"{"messages":[],"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"evil"},"io.modelcontextprotocol/related-task":{"taskId":"t"},"k":1}}"#,
        ];
        for peer in [Peer::Modern, Peer::Legacy] {
            for case in cases {
                let spliced = complete_result(Kind::Prompt, peer, &raw(case))
                    .unwrap_or_else(|| panic!("{case}"));
                let spliced: Value = serde_json::from_slice(&spliced).unwrap();
                assert_eq!(Some(spliced), typed_prompt(case, peer), "{peer:?} {case}");
            }
        }
        for case in [
            r#"{}"#,
            r#"{"description":"no messages"}"#,
            r#"{"messages":{}}"#,
            r#"{"messages":[],"description":null}"#,
            r#"{"messages":[],"description":7}"#,
            r#"{"resultType":"input_required","inputRequests":{}}"#,
            r#"{"messages":[],"messages":[]}"#,
            r#"{"content":[]}"#,
        ] {
            assert_eq!(
                complete_result(Kind::Prompt, Peer::Modern, &raw(case)),
                None,
                "{case}"
            );
        }
    }

    #[test]
    fn a_legacy_peer_gets_no_result_type_and_only_object_tool_output() {
        for case in [
            r#"{"resultType":"complete","content":[{"type":"text","text":"hi"}]}"#,
            r#"{"structuredContent":{"n":1},"content":[]}"#,
            r#"{"isError":true}"#,
        ] {
            let spliced = complete_result(Kind::Call, Peer::Legacy, &raw(case)).unwrap();
            let mut expected = typed(case).unwrap();
            expected.as_object_mut().unwrap().remove("resultType");
            assert_eq!(
                serde_json::from_slice::<Value>(&spliced).unwrap(),
                expected,
                "{case}"
            );
        }
        // Non-object output is moved into the content by the typed reading, as rmcp's
        // server moves it for such a peer.
        for case in [
            r#"{"structuredContent":[1,2],"content":[]}"#,
            r#"{"structuredContent":"s"}"#,
            r#"{"structuredContent":null,"content":[]}"#,
        ] {
            assert_eq!(
                complete_result(Kind::Call, Peer::Legacy, &raw(case)),
                None,
                "{case}"
            );
            assert!(
                complete_result(Kind::Call, Peer::Modern, &raw(case)).is_some(),
                "{case}"
            );
        }
    }

    #[test]
    fn members_the_gateway_does_not_know_pass_unchanged() {
        let spliced = complete_result(
            Kind::Call,
            Peer::Modern,
            &raw(r#"{"content":[{"type":"text","text":"t","future":{"x":1}}],"extra":[1,2]}"#),
        )
        .unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&spliced).unwrap(),
            json!({"resultType": "complete", "content": [{"type": "text", "text": "t", "future": {"x": 1}}], "extra": [1, 2]})
        );
    }

    #[test]
    fn anything_but_a_plain_complete_result_is_left_to_the_typed_reading() {
        for case in [
            r#"{"resultType":"input_required","inputRequests":{}}"#,
            r#"{"resultType":"task","task":{"taskId":"t"}}"#,
            r#"{"resultType":"compl\u0065te","content":[]}"#,
            r#"{"resultType":7,"content":[]}"#,
            r#"{}"#,
            r#"{"_meta":{"a":1}}"#,
            r#"{"content":{}}"#,
            r#"{"content":"text"}"#,
            r#"{"isError":"yes"}"#,
            r#"{"content":[],"content":[]}"#,
            r#"{"content":[],"_meta":null}"#,
            r#"{"content":[],"_meta":[1]}"#,
            r#"[1]"#,
            r#""complete""#,
        ] {
            assert_eq!(
                complete_result(Kind::Call, Peer::Modern, &raw(case)),
                None,
                "{case}"
            );
        }
    }
}

//! The HTTP client under rmcp's streamable-HTTP transport for Legacy backends: it
//! taps the answer stream of every request that carries a [`Relay`].
//!
//! A 2025-11-25 backend sends the progress and logs of a request on that request's
//! POST answer stream. rmcp hands notifications to its `ClientHandler` on spawned
//! tasks, so they would lose their order and could arrive after the answer; and it
//! does not say which request's stream a notification came on. Reading the stream
//! here, inside the one task that reads it, keeps both: each notification is relayed
//! (awaited) before any later event of the same stream, the answer included, moves on.
//! Requests without a relay are passed through untouched.
//!
//! A backend's `elicitation/create`, `sampling/createMessage` or `roots/list` on such
//! a stream is the call's too: it goes to the call's caller through the relay
//! (`backend::bridge`), and the answer is POSTed back here, on the same session under
//! the request's id, instead of rmcp's `ClientHandler` answering it.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{
    CallToolRequest, CallToolResponse, CancelledNotification, CancelledNotificationParam,
    ClientJsonRpcMessage, ClientNotification, ClientRequest, GetExtensions, GetMeta,
    GetPromptRequest, GetPromptResponse, InputRequest, ProgressToken, RequestId,
    ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use rmcp::{Peer, RoleClient};
use sse_stream::{Error as SseError, Sse};

use crate::backend::bridge::{Answer, input_request, policy_answer};
use crate::backend::relay::Relay;

/// `reqwest::Client` with relayed answer streams tapped.
#[derive(Clone)]
pub(super) struct TapClient(pub(super) reqwest::Client);

type Events = BoxStream<'static, Result<Sse, SseError>>;
type HttpError = StreamableHttpError<reqwest::Error>;

impl StreamableHttpClient for TapClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let tap = match &message {
            ClientJsonRpcMessage::Request(request) => {
                request
                    .request
                    .extensions()
                    .get::<Relay>()
                    .cloned()
                    .map(|relay| {
                        // rmcp minted this hop's progress token; only progress under it
                        // belongs to the call.
                        (relay, request.request.get_meta().get_progress_token())
                    })
            }
            _ => None,
        };
        let answerer = tap.as_ref().map(|_| Answerer {
            http: self.0.clone(),
            uri: uri.clone(),
            session_id: session_id.clone(),
            auth_header: auth_header.clone(),
            custom_headers: custom_headers.clone(),
        });
        let response = self
            .0
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await?;
        Ok(match (tap, answerer, response) {
            (
                Some((relay, hop)),
                Some(answerer),
                StreamableHttpPostResponse::Sse(events, session),
            ) => StreamableHttpPostResponse::Sse(
                tapped(events, relay, hop, Arc::new(answerer)),
                session,
            ),
            (_, _, other) => other,
        })
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<Events, HttpError> {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<Events, HttpError> {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

/// Posts the answers to a backend's requests on the session of the call they came in.
struct Answerer {
    http: reqwest::Client,
    uri: Arc<str>,
    session_id: Option<Arc<str>>,
    auth_header: Option<String>,
    custom_headers: HashMap<HeaderName, HeaderValue>,
}

impl Answerer {
    async fn answer(&self, id: RequestId, answer: Answer) {
        let message = match answer {
            Ok(result) => ClientJsonRpcMessage::response(result, id),
            Err(error) => ClientJsonRpcMessage::error(error, Some(id)),
        };
        if let Err(error) = self
            .http
            .post_message(
                self.uri.clone(),
                message,
                self.session_id.clone(),
                self.auth_header.clone(),
                self.custom_headers.clone(),
            )
            .await
        {
            tracing::debug!("could not answer a backend's request: {error}");
        }
    }
}

/// Whether `data` may be a backend request the caller should answer (a cheap test
/// before parsing).
fn may_be_ask(data: &str) -> bool {
    data.contains("\"id\"")
        && (data.contains("elicitation/create")
            || data.contains("sampling/createMessage")
            || data.contains("roots/list"))
}

/// Answer the backend's `request`: from the call's caller, else from policy.
async fn bridge(relay: &Relay, answerer: &Answerer, id: RequestId, request: InputRequest) {
    let answer = match relay.ask(request.clone()).await {
        // A caller that went away or a reaped parked call: the backend gets an error.
        Some(pending) => pending.await.unwrap_or_else(|_| {
            Err(rmcp::ErrorData::internal_error(
                "the caller did not answer",
                None,
            ))
        }),
        None => policy_answer(&request),
    };
    answerer.answer(id, answer).await;
}

/// `events` with the call's progress and logs taken out and relayed, in order, and
/// its requests to the caller answered.
fn tapped(
    events: Events,
    relay: Relay,
    hop: Option<ProgressToken>,
    answerer: Arc<Answerer>,
) -> Events {
    events
        .filter_map(move |event| {
            let relay = relay.clone();
            let hop = hop.clone();
            let answerer = answerer.clone();
            async move {
                let Ok(sse) = &event else {
                    return Some(event);
                };
                if let Some(data) = sse.data.as_deref().filter(|d| may_be_ask(d))
                    && let Ok(ServerJsonRpcMessage::Request(request)) =
                        serde_json::from_str::<ServerJsonRpcMessage>(data)
                {
                    let id = request.id;
                    if let Some(ask) = input_request(request.request) {
                        // Awaited here: the backend waits for this answer anyway, and
                        // later events of this stream stay behind it, in order.
                        bridge(&relay, &answerer, id, ask).await;
                        return None;
                    }
                    return Some(event);
                }
                // Cheap test first: most events are the answer, which passes on.
                let Some(data) = sse.data.as_deref().filter(|d| d.contains("notifications/"))
                else {
                    return Some(event);
                };
                let Ok(ServerJsonRpcMessage::Notification(note)) = serde_json::from_str(data)
                else {
                    return Some(event);
                };
                if !Relay::consumes(&note.notification) {
                    return Some(event);
                }
                if let Some(relayed) = relay.translate(&note.notification, hop.as_ref()) {
                    relay.send(relayed).await;
                }
                None
            }
        })
        .boxed()
}

/// Tells the backend a relayed request was abandoned (the caller cancelled, or its
/// call was dropped), as rmcp's own `*_once` calls do.
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let peer = self.peer.clone();
        let note = ClientNotification::CancelledNotification(CancelledNotification::new(
            CancelledNotificationParam::new(Some(id), Some("the caller cancelled".to_owned())),
        ));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = peer.send_notification(note).await;
            });
        }
    }
}

/// Send `request` with `relay` in its extensions and await the answer.
async fn relayed(
    peer: &Peer<RoleClient>,
    mut request: ClientRequest,
    relay: Relay,
) -> Result<ServerResult, ServiceError> {
    request.extensions_mut().insert(relay);
    let handle = peer
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await?;
    let mut guard = CancelOnDrop {
        peer: peer.clone(),
        id: Some(handle.id.clone()),
    };
    let result = handle.await_response().await;
    guard.id = None;
    result
}

/// `tools/call` on a Legacy connection, relayed.
pub(super) async fn call_tool(
    peer: &Peer<RoleClient>,
    params: rmcp::model::CallToolRequestParams,
    relay: Relay,
) -> Result<CallToolResponse, ServiceError> {
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    match relayed(peer, request, relay).await? {
        ServerResult::CallToolResult(result) => Ok(CallToolResponse::Complete(result)),
        ServerResult::InputRequiredResult(result) => Ok(CallToolResponse::InputRequired(result)),
        ServerResult::CreateTaskResult(result) => Ok(CallToolResponse::Task(result)),
        ServerResult::EmptyResult(_) => Ok(CallToolResponse::Complete(Default::default())),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// `prompts/get` on a Legacy connection, relayed.
pub(super) async fn get_prompt(
    peer: &Peer<RoleClient>,
    params: rmcp::model::GetPromptRequestParams,
    relay: Relay,
) -> Result<GetPromptResponse, ServiceError> {
    let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(params));
    match relayed(peer, request, relay).await? {
        ServerResult::GetPromptResult(result) => Ok(GetPromptResponse::Complete(result)),
        ServerResult::InputRequiredResult(result) => Ok(GetPromptResponse::InputRequired(result)),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

#[cfg(test)]
#[allow(deprecated)] // LoggingLevel: logging is deprecated by SEP-2577 but still served.
mod tests {
    use super::*;
    use crate::backend::relay::{Relayed, Wants, relay};
    use rmcp::model::{LoggingLevel, NumberOrString};

    fn event(data: &str) -> Result<Sse, SseError> {
        Ok(Sse {
            event: Some("message".into()),
            data: Some(data.into()),
            id: None,
            retry: None,
        })
    }

    #[tokio::test]
    async fn a_relayed_stream_hands_over_its_notifications_in_order_before_the_answer() {
        let (relay, mut rx) = relay(Wants {
            progress: Some(ProgressToken(NumberOrString::String("c".into()))),
            logs: Some(LoggingLevel::Info),
        });
        let events = futures::stream::iter(vec![
            event(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":5,"progress":1}}"#),
            event(r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"debug","data":"quiet"}}"#),
            event(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":6,"progress":9}}"#),
            event(r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"error","data":"loud"}}"#),
            event(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#),
            event(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":5,"progress":2}}"#),
            event(r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#),
        ])
        .boxed();
        let hop = ProgressToken(NumberOrString::Number(5));
        let answerer = Arc::new(Answerer {
            http: reqwest::Client::new(),
            uri: "http://127.0.0.1:9/mcp".into(),
            session_id: None,
            auth_header: None,
            custom_headers: HashMap::new(),
        });
        let passed: Vec<String> = tapped(events, relay, Some(hop), answerer)
            .map(|e| e.unwrap().data.unwrap())
            .collect()
            .await;
        // Only what is not the call's passes on to rmcp: the list change and the answer.
        assert_eq!(passed.len(), 2, "{passed:?}");
        assert!(passed[0].contains("list_changed") && passed[1].contains("result"));
        let mut relayed = Vec::new();
        while let Ok(item) = rx.try_recv() {
            relayed.push(match item {
                Relayed::Progress(p) => format!("progress {} {:?}", p.progress, p.progress_token.0),
                Relayed::Log(l) => format!("log {}", l.data),
            });
        }
        assert_eq!(
            relayed,
            [
                "progress 1 String(\"c\")",
                "log \"loud\"",
                "progress 2 String(\"c\")"
            ]
        );
    }

    #[tokio::test]
    async fn a_backend_request_on_a_relayed_stream_goes_to_the_caller_not_to_rmcp() {
        let (relay, _rx) = relay(Wants::default());
        let (tx, mut asked) = crate::backend::bridge::asks();
        let relay = relay.with_asks(tx);
        let events = futures::stream::iter(vec![
            event(
                r#"{"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":{"message":"who?","requestedSchema":{"type":"object","properties":{}}}}"#,
            ),
            event(r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#),
        ])
        .boxed();
        let answerer = Arc::new(Answerer {
            http: reqwest::Client::new(),
            uri: "http://127.0.0.1:9/mcp".into(),
            session_id: None,
            auth_header: None,
            custom_headers: HashMap::new(),
        });
        let passed = tokio::spawn(
            tapped(events, relay, None, answerer)
                .map(|e| e.unwrap().data.unwrap())
                .collect::<Vec<String>>(),
        );
        let ask = asked.recv().await.expect("the caller is asked");
        assert!(matches!(ask.request, InputRequest::Elicitation(_)));
        let _ = ask.reply.send(Ok(rmcp::model::ClientResult::ElicitResult(
            rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Decline),
        )));
        // The request never reaches rmcp; the answer does.
        let passed = passed.await.unwrap();
        assert_eq!(passed.len(), 1, "{passed:?}");
        assert!(passed[0].contains("result"));
    }
}

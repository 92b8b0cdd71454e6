//! Unit tests of the legacy HTTP+SSE client transport, against small in-process servers.
use super::framing::{EventSizeLimiter, split_lines};
use super::*;
use bytes::Bytes;
use rmcp::model::{ClientNotification, InitializedNotification};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

fn url(text: &str) -> Url {
    Url::parse(text).unwrap()
}

#[test]
fn endpoint_resolution() {
    let sse = url("http://127.0.0.1:3001/mcp/sse");
    let resolve = |data: &str| resolve_endpoint(&sse, &sse, Some(data));

    assert_eq!(
        resolve("/message?sessionId=abc").unwrap().as_str(),
        "http://127.0.0.1:3001/message?sessionId=abc"
    );
    assert_eq!(
        resolve("messages/?session_id=1").unwrap().as_str(),
        "http://127.0.0.1:3001/mcp/messages/?session_id=1"
    );
    assert_eq!(
        resolve(" http://127.0.0.1:3001/m ").unwrap().as_str(),
        "http://127.0.0.1:3001/m"
    );
    for foreign in [
        "http://evil.example/message",
        "https://127.0.0.1:3001/message",
        "http://127.0.0.1:3002/message",
        "//evil.example/message",
    ] {
        assert!(
            matches!(
                resolve(foreign),
                Err(SseTransportError::CrossOriginEndpoint { .. })
            ),
            "{foreign} accepted"
        );
    }
    assert!(matches!(
        resolve_endpoint(&sse, &sse, None),
        Err(SseTransportError::InvalidEndpoint { .. })
    ));
    assert!(matches!(
        resolve("http://[::1"),
        Err(SseTransportError::InvalidEndpoint { .. })
    ));
    // Default ports are part of the origin either way.
    let sse = url("http://localhost/sse");
    assert!(resolve_endpoint(&sse, &sse, Some("http://localhost:80/m")).is_ok());
}

#[test]
fn event_size_limit() {
    let mut limiter = EventSizeLimiter::new(10);
    assert!(limiter.observe(b"data: 1234\n\n"));
    assert!(limiter.observe(b"data: 1234\r\n\r\ndata: 1234\r"));
    assert!(limiter.observe(b"\n\r\n"));
    assert!(limiter.observe(b"data:"));
    assert!(!limiter.observe(b" 123456"));

    // Several lines of one event add up; `\r\n` is not an empty line.
    let mut limiter = EventSizeLimiter::new(16);
    assert!(limiter.observe(b"data: 1\r\ndata: 2\r"));
    assert!(!limiter.observe(b"\ndata: 3\r\n"));
}

#[test]
fn line_splitting() {
    let lines = split_lines(Bytes::from_static(b"a\r\nb\nc\rd\r\n\ne"));
    let lines: Vec<&[u8]> = lines.iter().map(|line| line.as_ref()).collect();
    let expected: [&[u8]; 6] = [b"a\r\n", b"b\n", b"c\r", b"d\r\n", b"\n", b"e"];
    assert_eq!(lines, expected);
    assert!(split_lines(Bytes::new()).is_empty());
}

#[test]
fn message_decoding() {
    let sse_url = url("http://127.0.0.1/sse");
    let event = |data: &str| Sse::default().event("message").data(data);
    let one = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
    assert_eq!(decode_message_event(&sse_url, &event(one)).len(), 1);
    let batch = format!("[{one}, {one}]");
    assert_eq!(decode_message_event(&sse_url, &event(&batch)).len(), 2);
    assert!(decode_message_event(&sse_url, &event("{not json")).is_empty());
    assert!(decode_message_event(&sse_url, &event(r#"{"foo":1}"#)).is_empty());
    assert!(decode_message_event(&sse_url, &Sse::default()).is_empty());
}

#[test]
fn config_debug_hides_header_values() {
    let mut config = SseClientConfig::new("http://127.0.0.1/sse");
    config.headers.insert(
        http::header::AUTHORIZATION,
        HeaderValue::from_static("Bearer secret"),
    );
    let debug = format!("{config:?}");
    assert!(debug.contains("authorization"), "{debug}");
    assert!(!debug.contains("secret"), "{debug}");
}

/// Reads one HTTP/1.1 request (head and `Content-Length` body); returns the head.
async fn read_request(stream: &mut TcpStream) -> String {
    let mut buffer = Vec::new();
    let head_end = loop {
        let mut chunk = [0; 1024];
        let read = stream.read(&mut chunk).await.unwrap();
        assert!(read > 0, "connection closed mid-request");
        buffer.extend_from_slice(&chunk[..read]);
        if let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break end + 4;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let length = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        let mut chunk = [0; 1024];
        let read = stream.read(&mut chunk).await.unwrap();
        assert!(read > 0, "connection closed mid-body");
        buffer.extend_from_slice(&chunk[..read]);
    }
    head
}

/// A one-session fake legacy SSE server: writes `events` on the GET stream, then waits
/// for one POST, answers it with `post_answer`, and closes the stream.
async fn fake_server(events: &'static str, post_answer: &'static str) -> Url {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut sse, _) = listener.accept().await.unwrap();
        let head = read_request(&mut sse).await;
        assert!(head.starts_with("GET /sse "), "{head}");
        assert!(head.contains("accept: text/event-stream"), "{head}");
        assert!(head.contains("x-api-key: k"), "{head}");
        sse.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
            .await
            .unwrap();
        sse.write_all(events.as_bytes()).await.unwrap();
        let (mut post, _) = listener.accept().await.unwrap();
        let head = read_request(&mut post).await;
        assert!(head.starts_with("POST /message?s=1 "), "{head}");
        assert!(head.contains("content-type: application/json"), "{head}");
        assert!(head.contains("x-api-key: k"), "{head}");
        post.write_all(post_answer.as_bytes()).await.unwrap();
        drop(sse);
    });
    url(&format!("http://{address}/sse"))
}

fn config(url: &Url) -> SseClientConfig {
    let mut config = SseClientConfig::new(url.as_str());
    config
        .headers
        .insert("x-api-key", HeaderValue::from_static("k"));
    config.connect_timeout = Duration::from_secs(5);
    config
}

/// `receive`, failing the test instead of hanging.
async fn receive(transport: &mut SseClientTransport) -> Option<ServerJsonRpcMessage> {
    tokio::time::timeout(Duration::from_secs(5), transport.receive())
        .await
        .expect("receive timed out")
}

fn initialized() -> ClientJsonRpcMessage {
    ClientJsonRpcMessage::notification(ClientNotification::InitializedNotification(
        InitializedNotification::default(),
    ))
}

#[tokio::test]
async fn sse_skips_garbage_and_ends_with_the_stream() {
    let sse_url = fake_server(
        concat!(
            ": comment\n\n",
            "event: endpoint\ndata: /message?s=1\n\n",
            "event: message\ndata: {not json\n\n",
            "event: ping\ndata: {}\n\n",
            "this line is not SSE\n\n",
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\n",
            "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n",
        ),
        "HTTP/1.1 202 Accepted\r\ncontent-length: 8\r\n\r\nAccepted",
    )
    .await;
    let mut transport = SseClientTransport::connect(reqwest::Client::new(), config(&sse_url))
        .await
        .unwrap();
    assert_eq!(
        transport.endpoint().as_str(),
        sse_url.join("/message?s=1").unwrap().as_str()
    );

    let first = receive(&mut transport).await.unwrap();
    assert!(
        matches!(&first, ServerJsonRpcMessage::Response(response) if response.id.to_string() == "7"),
        "{first:?}"
    );
    let second = receive(&mut transport).await.unwrap();
    assert!(
        matches!(second, ServerJsonRpcMessage::Notification(_)),
        "{second:?}"
    );
    transport.send(initialized()).await.unwrap();
    // The server closes the stream after the POST.
    let end = receive(&mut transport).await;
    assert!(end.is_none(), "{end:?}");
    assert!(transport.is_closed());
    assert!(matches!(
        transport.send(initialized()).await,
        Err(SseTransportError::Closed)
    ));
    transport.close().await.unwrap();
}

#[tokio::test]
async fn sse_post_error_names_the_status() {
    let sse_url = fake_server(
        "event: endpoint\ndata: /message?s=1\n\n",
        "HTTP/1.1 400 Bad Request\r\ncontent-length: 7\r\n\r\nno such",
    )
    .await;
    let mut transport = SseClientTransport::connect(reqwest::Client::new(), config(&sse_url))
        .await
        .unwrap();
    let error = transport.send(initialized()).await.unwrap_err();
    assert!(
        matches!(&error, SseTransportError::PostStatus { status, body, .. }
            if *status == StatusCode::BAD_REQUEST && body == "no such"),
        "{error:?}"
    );
    assert!(error.to_string().contains("400"), "{error}");
    transport.close().await.unwrap();
    assert!(receive(&mut transport).await.is_none());
}

#[tokio::test]
async fn sse_post_timeout() {
    // Like server-everything given an unknown session id: the POST is never answered.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut sse, _) = listener.accept().await.unwrap();
        read_request(&mut sse).await;
        sse.write_all(
            concat!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n",
                "event: endpoint\ndata: /message\n\n",
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let (mut post, _) = listener.accept().await.unwrap();
        read_request(&mut post).await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    let mut config = SseClientConfig::new(format!("http://{address}/sse"));
    config.post_timeout = Some(Duration::from_millis(200));
    let mut transport = SseClientTransport::connect(reqwest::Client::new(), config)
        .await
        .unwrap();
    let sent = tokio::time::timeout(Duration::from_secs(5), transport.send(initialized()))
        .await
        .expect("the POST timeout did not fire");
    let error = sent.unwrap_err();
    assert!(
        matches!(&error, SseTransportError::Post { source, .. } if source.is_timeout()),
        "{error:?}"
    );
}

/// Serves one connection with a fixed raw answer (and then keeps it open).
async fn raw_server(answer: &'static str) -> Url {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        read_request(&mut stream).await;
        stream.write_all(answer.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    url(&format!("http://{address}/sse"))
}

#[tokio::test]
async fn sse_connect_failures_are_typed() {
    let connect = |url: Url| async move {
        let mut config = SseClientConfig::new(url.as_str());
        config.connect_timeout = Duration::from_millis(500);
        SseClientTransport::connect(reqwest::Client::new(), config).await
    };

    let html =
        raw_server("HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 2\r\n\r\nhi")
            .await;
    let error = connect(html).await.unwrap_err();
    assert!(
        matches!(error, SseTransportError::NotEventStream { .. }),
        "{error:?}"
    );

    let missing = raw_server("HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n").await;
    let error = connect(missing).await.unwrap_err();
    assert!(
        matches!(error, SseTransportError::ConnectStatus { status, .. } if status == StatusCode::NOT_FOUND),
        "{error:?}"
    );

    let silent =
        raw_server("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n: hi\n\n").await;
    let error = connect(silent).await.unwrap_err();
    assert!(
        matches!(error, SseTransportError::ConnectTimeout { .. }),
        "{error:?}"
    );

    let ended = raw_server(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 9\r\n\r\ndata: x\n\n",
    )
    .await;
    let error = connect(ended).await.unwrap_err();
    assert!(
        matches!(error, SseTransportError::EndedBeforeEndpoint { .. }),
        "{error:?}"
    );

    let foreign = raw_server(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\nevent: endpoint\ndata: http://example.com/m\n\n",
    )
    .await;
    let error = connect(foreign).await.unwrap_err();
    assert!(
        matches!(error, SseTransportError::CrossOriginEndpoint { .. }),
        "{error:?}"
    );

    let error = connect(url("ftp://127.0.0.1/sse")).await.unwrap_err();
    assert!(
        matches!(error, SseTransportError::UnsupportedScheme { .. }),
        "{error:?}"
    );
    let error =
        SseClientTransport::connect(reqwest::Client::new(), SseClientConfig::new("not a url"))
            .await
            .unwrap_err();
    assert!(
        matches!(error, SseTransportError::InvalidUrl { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn sse_oversized_event_ends_the_stream() {
    let sse_url = raw_server(concat!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n",
        "event: endpoint\ndata: /m\n\n",
        "event: message\ndata: 0123456789012345678901234567890123456789\n\n",
    ))
    .await;
    let mut config = SseClientConfig::new(sse_url.as_str());
    config.max_event_size = 32;
    let mut transport = SseClientTransport::connect(reqwest::Client::new(), config)
        .await
        .unwrap();
    let end = receive(&mut transport).await;
    assert!(end.is_none(), "{end:?}");
}

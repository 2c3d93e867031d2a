//! MCP sessions at `/mcp` (revisions before 2026-07-28) on the wire, with raw
//! HTTP and a small SSE reader that keeps each event's `id`:
//!
//! - every `POST` in a session is answered on an SSE stream that opens with
//!   a priming event (an id, `retry:`, no data) and numbers its events
//!   `<index>/<stream>`;
//! - a call whose client dropped its stream keeps running, and a `GET` with
//!   `Last-Event-ID` takes the stream up again after that event, result
//!   included, nothing repeated; an id naming no stream gets an empty one;
//! - the session's `GET` stream carries `notifications/tools/list_changed`;
//! - `DELETE` ends the session and cancels its running calls;
//! - a session with no request, no call and no reader for `idle_timeout`
//!   ends, and one whose `GET` stream is being read does not.

use crate::mcp_http;
use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use haip::{Context, Limits, ServerBuilder, Tool, ToolError};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use mcp_http::{Reply, mcp_request};
use serde_json::{Value, json};
use support::{base_limits, builder, start, within};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};

/// The revision of the sessions' requests (it has `initialize`).
const REVISION: &str = "2025-11-25";

/// A server with sessions on, and `tools`.
fn server(tools: Vec<Tool>) -> ServerBuilder {
    let mut builder = builder().mcp_sessions(true);
    for tool in tools {
        builder = builder.tool(tool);
    }
    builder
}

// ----- raw HTTP and SSE -------------------------------------------------------------

/// The client side of one connection: closed when dropped.
struct Connection(tokio::task::JoinHandle<()>);

impl Drop for Connection {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One request over a new connection to `addr`, answered as it comes.
async fn send(addr: SocketAddr, request: Request<Bytes>) -> (Response<Incoming>, Connection) {
    within("the answer to start", async {
        let stream = TcpStream::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {addr}: {e}"));
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap_or_else(|e| panic!("HTTP handshake with {addr}: {e}"));
        let connection = Connection(tokio::spawn(async move {
            let _ = connection.await;
        }));
        let response = sender
            .send_request(request.map(Full::new))
            .await
            .unwrap_or_else(|e| panic!("request to {addr}: {e}"));
        (response, connection)
    })
    .await
}

/// The request an MCP client of the session `session` sends to `/mcp`.
fn request(
    addr: SocketAddr,
    method: &str,
    session: &str,
    body: Option<&Value>,
    last_event: Option<&str>,
) -> Request<Bytes> {
    let mut request = Request::builder()
        .method(method)
        .uri("/mcp")
        .header("host", format!("127.0.0.1:{}", addr.port()))
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", REVISION);
    request = match body {
        Some(_) => request
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json"),
        None => request.header("accept", "text/event-stream"),
    };
    if let Some(last) = last_event {
        request = request.header("last-event-id", last);
    }
    let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    request.body(body).expect("a valid request")
}

/// One SSE event.
#[derive(Debug, Clone, PartialEq)]
struct Event {
    id: Option<String>,
    retry: Option<String>,
    /// Its data lines, joined with `\n`; `None` when it has no `data:`.
    data: Option<String>,
}

impl Event {
    /// Its data as a JSON-RPC message.
    fn message(&self) -> Value {
        let data = self.data.as_deref().unwrap_or_default();
        serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }

    /// Its id as `(index, stream)`.
    fn index(&self) -> (u64, u64) {
        let id = self
            .id
            .as_deref()
            .unwrap_or_else(|| panic!("an event without an id: {self:?}"));
        let (index, stream) = id
            .split_once('/')
            .unwrap_or_else(|| panic!("not <index>/<stream>: {self:?}"));
        let number = |n: &str| n.parse::<u64>().unwrap_or_else(|e| panic!("{e}: {self:?}"));
        (number(index), number(stream))
    }
}

/// The event of one SSE block, `None` for a block of comments only.
fn parse_block(block: &str) -> Option<Event> {
    let mut event = Event {
        id: None,
        retry: None,
        data: None,
    };
    let mut fields = false;
    for line in block.lines() {
        if line.starts_with(':') || line.is_empty() {
            continue;
        }
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
        fields = true;
        match name {
            "id" => event.id = Some(value),
            "retry" => event.retry = Some(value),
            "data" => {
                event.data = Some(match event.data.take() {
                    Some(before) => format!("{before}\n{value}"),
                    None => value,
                });
            }
            _ => {}
        }
    }
    fields.then_some(event)
}

/// The events of a whole SSE body.
fn parse_events(body: &str) -> Vec<Event> {
    body.replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(parse_block)
        .collect()
}

/// An SSE answer read event by event; dropping it closes its connection.
struct Sse {
    status: u16,
    headers: hyper::HeaderMap,
    body: Incoming,
    /// What arrived and was not read as events yet.
    pending: String,
    _connection: Connection,
}

impl Sse {
    async fn open(addr: SocketAddr, request: Request<Bytes>) -> Sse {
        let (response, connection) = send(addr, request).await;
        let (parts, body) = response.into_parts();
        Sse {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
            pending: String::new(),
            _connection: connection,
        }
    }

    fn content_type(&self) -> &str {
        self.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// The next event, or `None` once the stream ended; fails the test
    /// when neither comes within [`support::WAIT`].
    async fn next(&mut self) -> Option<Event> {
        within("the next SSE event", self.next_event()).await
    }

    /// Every event up to the stream's end.
    async fn rest(&mut self) -> Vec<Event> {
        within("the SSE stream to end", async {
            let mut events = Vec::new();
            while let Some(event) = self.next_event().await {
                events.push(event);
            }
            events
        })
        .await
    }

    async fn next_event(&mut self) -> Option<Event> {
        loop {
            while let Some(end) = self.pending.find("\n\n") {
                let block: String = self.pending.drain(..end + 2).collect();
                if let Some(event) = parse_block(&block) {
                    return Some(event);
                }
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        let text = String::from_utf8_lossy(&data).replace("\r\n", "\n");
                        self.pending.push_str(&text);
                    }
                }
                Some(Err(_)) | None => return None,
            }
        }
    }
}

// ----- sessions ---------------------------------------------------------------------

fn initialize() -> Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": REVISION,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}
        }
    })
}

/// An `initialize` of a new session, read to its end.
async fn initialize_reply(addr: SocketAddr) -> Reply {
    mcp_request(
        addr,
        "POST",
        Some(&initialize()),
        &[("mcp-protocol-version", REVISION)],
    )
    .await
}

/// Opens a session (and says it is initialized); its id.
async fn open_session(addr: SocketAddr) -> String {
    let init = initialize_reply(addr).await;
    assert_eq!(init.status, 200, "initialize: {init:?}");
    assert_eq!(
        init.response()["result"]["protocolVersion"],
        REVISION,
        "{init:?}"
    );
    let id = init
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no session id: {init:?}"))
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let reply = in_session(addr, &id, "POST", Some(&initialized)).await;
    assert_eq!(reply.status, 202, "notifications/initialized: {reply:?}");
    id
}

/// A request in the session `id`, read to its end.
async fn in_session(addr: SocketAddr, id: &str, method: &str, body: Option<&Value>) -> Reply {
    let headers = [("mcp-session-id", id), ("mcp-protocol-version", REVISION)];
    mcp_request(addr, method, body, &headers).await
}

fn tools_list(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"})
}

/// A `tools/call` of `name` asking for progress notifications.
fn call_with_progress(id: u64, name: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": {}, "_meta": {"progressToken": "p"}}
    })
}

/// The status of a `tools/list` in the session `id`.
async fn list_status(addr: SocketAddr, id: &str) -> u16 {
    in_session(addr, id, "POST", Some(&tools_list(50)))
        .await
        .status
}

/// Asserts that `event` is a priming event: an id of index 0, `retry:`, no
/// data; its stream's number.
fn assert_priming(event: Option<&Event>) -> u64 {
    let event = event.unwrap_or_else(|| panic!("no priming event"));
    let (index, stream) = event.index();
    assert_eq!(
        index, 0,
        "the priming event is the stream's first: {event:?}"
    );
    let retry = event
        .retry
        .as_deref()
        .unwrap_or_else(|| panic!("no retry: {event:?}"));
    assert!(retry.parse::<u64>().is_ok(), "retry in ms: {event:?}");
    assert!(
        event.data.as_deref().unwrap_or_default().is_empty(),
        "no data: {event:?}"
    );
    stream
}

// ----- tools ------------------------------------------------------------------------

/// `steps`: reports 10 %, then waits for a permit of the semaphore.
fn progress_then_gate() -> (Tool, Arc<Semaphore>) {
    let gate = Arc::new(Semaphore::new(0));
    let permits = Arc::clone(&gate);
    let tool = Tool::builder("steps")
        .description("Reports progress, then waits for the test")
        .handler(move |_params: Value, ctx: Context| {
            let permits = Arc::clone(&permits);
            async move {
                ctx.progress(10.0);
                let permit = permits.acquire().await.expect("the gate stays open");
                permit.forget();
                Ok::<_, ToolError>(json!({"finished": true}))
            }
        })
        .build()
        .expect("steps is a valid tool");
    (tool, gate)
}

/// `wait_for_cancel`: reports its start (and 10 %), then waits for its
/// cancellation and reports that.
fn cancel_probe() -> (Tool, mpsc::UnboundedReceiver<&'static str>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let tool = Tool::builder("wait_for_cancel")
        .description("Waits until cancelled")
        .handler(move |_params: Value, ctx: Context| {
            let tx = tx.clone();
            async move {
                let _ = tx.send("started");
                ctx.progress(10.0);
                ctx.cancelled().await;
                let _ = tx.send("cancelled");
                Err::<Value, _>(ToolError::cancelled())
            }
        })
        .build()
        .expect("the probe is a valid tool");
    (tool, rx)
}

/// `greet`, registered at run time.
fn greeter() -> Tool {
    Tool::builder("greet")
        .description("Greets")
        .handler(|_params: Value, _ctx: Context| async move {
            Ok::<_, ToolError>(json!({"greeting": "hello"}))
        })
        .build()
        .expect("greet is a valid tool")
}

// ----- the tests --------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_stream_broke_is_taken_up_again_with_last_event_id() {
    let (tool, gate) = progress_then_gate();
    let (handle, _) = start(server(vec![tool])).await;
    let addr = handle.local_addr();
    let session = open_session(addr).await;

    let call = call_with_progress(7, "steps");
    let mut post = Sse::open(addr, request(addr, "POST", &session, Some(&call), None)).await;
    assert_eq!(post.status, 200);
    assert!(
        post.content_type().starts_with("text/event-stream"),
        "{:?}",
        post.headers
    );
    let priming = post.next().await;
    let stream = assert_priming(priming.as_ref());
    let progress = post.next().await.expect("the progress event");
    let message = progress.message();
    assert_eq!(message["method"], "notifications/progress", "{progress:?}");
    assert_eq!(message["params"]["progressToken"], "p", "{progress:?}");
    let (seen, of) = progress.index();
    assert_eq!(
        of, stream,
        "the progress is on the call's stream: {progress:?}"
    );
    let last = progress.id.clone().expect("an id");
    // The client's connection breaks; the call goes on.
    drop(post);

    gate.add_permits(1);
    let mut resumed = Sse::open(
        addr,
        request(addr, "GET", &session, None, Some(last.as_str())),
    )
    .await;
    assert_eq!(resumed.status, 200);
    assert!(
        resumed.content_type().starts_with("text/event-stream"),
        "{:?}",
        resumed.headers
    );
    let events = resumed.rest().await;
    for event in &events {
        let (index, of) = event.index();
        assert_eq!(of, stream, "the call's stream: {events:?}");
        assert!(
            index > seen,
            "nothing up to {last} is repeated, the priming event included: {events:?}"
        );
        assert_ne!(
            event.message()["method"],
            "notifications/progress",
            "{events:?}"
        );
    }
    let result = events
        .iter()
        .map(Event::message)
        .find(|m| m["id"] == 7)
        .unwrap_or_else(|| panic!("the call's result: {events:?}"));
    // No output schema: the tool's value is the text of the result.
    assert_eq!(
        result["result"]["content"][0]["text"],
        json!({"finished": true}).to_string(),
        "{result}"
    );
    assert_eq!(
        events.last().map(Event::message),
        Some(result),
        "the result ends the stream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_get_stream_carries_tool_list_changes() {
    let (handle, _) = start(server(Vec::new()).builtin_tools()).await;
    let addr = handle.local_addr();
    let session = open_session(addr).await;

    let mut notes = Sse::open(addr, request(addr, "GET", &session, None, None)).await;
    assert_eq!(notes.status, 200);
    assert!(
        notes.content_type().starts_with("text/event-stream"),
        "{:?}",
        notes.headers
    );
    let priming = notes.next().await;
    assert_eq!(
        assert_priming(priming.as_ref()),
        0,
        "the session's GET stream is stream 0"
    );

    let replaced = handle.register_tool(greeter()).expect("greet registers");
    assert!(replaced.is_none());
    let event = notes.next().await.expect("a notification");
    let message = event.message();
    assert_eq!(message["jsonrpc"], "2.0", "{event:?}");
    assert_eq!(
        message["method"], "notifications/tools/list_changed",
        "{event:?}"
    );
    assert!(message.get("id").is_none(), "a notification: {event:?}");
    assert_eq!(event.index(), (1, 0), "{event:?}");
    // The session sees it.
    let reply = in_session(addr, &session, "POST", Some(&tools_list(2))).await;
    let tools = reply.response()["result"]["tools"].clone();
    assert!(
        tools
            .as_array()
            .is_some_and(|tools| tools.iter().any(|t| t["name"] == "greet")),
        "{reply:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_last_event_id_gets_an_empty_stream() {
    let (handle, _) = start(server(Vec::new()).builtin_tools()).await;
    let addr = handle.local_addr();
    let session = open_session(addr).await;
    let headers = [
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", REVISION),
        ("last-event-id", "7/99"),
    ];
    let reply = mcp_request(addr, "GET", None, &headers).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(
        reply.content_type().starts_with("text/event-stream"),
        "{reply:?}"
    );
    assert_eq!(reply.body, "", "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_cancels_the_sessions_running_calls() {
    let (probe, mut events) = cancel_probe();
    let (handle, _) = start(server(vec![probe])).await;
    let addr = handle.local_addr();
    let session = open_session(addr).await;

    let call = call_with_progress(3, "wait_for_cancel");
    let mut post = Sse::open(addr, request(addr, "POST", &session, Some(&call), None)).await;
    assert_eq!(post.status, 200);
    assert_eq!(
        within("the probe to start", events.recv()).await,
        Some("started")
    );
    assert_priming(post.next().await.as_ref());
    let progress = post.next().await.expect("the progress event");
    assert_eq!(
        progress.message()["method"],
        "notifications/progress",
        "{progress:?}"
    );

    let reply = in_session(addr, &session, "DELETE", None).await;
    assert_eq!(reply.status, 204, "{reply:?}");
    assert_eq!(
        within("the probe to see its cancellation", events.recv()).await,
        Some("cancelled")
    );
    // The call's stream ends with its session.
    let rest = post.rest().await;
    assert!(
        rest.iter().all(|e| e.message()["id"] == 3),
        "only the call's own answer, if any: {rest:?}"
    );

    let reply = in_session(addr, &session, "POST", Some(&tools_list(4))).await;
    assert_eq!(reply.status, 404, "a POST in the ended session: {reply:?}");
    let reply = in_session(addr, &session, "GET", None).await;
    assert_eq!(reply.status, 404, "a GET of the ended session: {reply:?}");
    let reply = in_session(addr, &session, "DELETE", None).await;
    assert_eq!(
        reply.status, 404,
        "a DELETE of the ended session: {reply:?}"
    );
}

/// Any request in a session is activity, so the test does not ask the idle
/// session whether it is still there until it ended: with `max_sessions: 2`
/// and two sessions open, an `initialize` (which touches neither) is refused
/// until one of them ends. The other's `GET` stream is read all along, and
/// three idle sessions in a row ending are its clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_ends() {
    let (handle, _) = start(server(Vec::new()).builtin_tools().limits(Limits {
        idle_timeout: Duration::from_secs(1),
        max_sessions: 2,
        ..base_limits()
    }))
    .await;
    let addr = handle.local_addr();
    let idle = open_session(addr).await;
    let read = open_session(addr).await;
    let mut notes = Sse::open(addr, request(addr, "GET", &read, None, None)).await;
    assert_eq!(notes.status, 200);
    assert_priming(notes.next().await.as_ref());
    let reader = tokio::spawn(async move {
        let mut events = Vec::new();
        while let Some(event) = notes.next_event().await {
            events.push(event);
        }
        events
    });
    let refused = initialize_reply(addr).await;
    assert_eq!(refused.status, 503, "both places are taken: {refused:?}");

    for round in 1..=3 {
        let opened = within("an idle session to end and free its place", async {
            loop {
                let reply = initialize_reply(addr).await;
                if reply.status == 200 {
                    break reply;
                }
                assert_eq!(reply.status, 503, "{reply:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert!(opened.headers.contains_key("mcp-session-id"), "{opened:?}");
        if round == 1 {
            let status = list_status(addr, &idle).await;
            assert_eq!(status, 404, "the idle session ended");
        }
    }
    assert!(
        !reader.is_finished(),
        "the read session's GET stream is still open: {:?}",
        reader.await
    );
    assert_eq!(
        list_status(addr, &read).await,
        200,
        "the session whose GET stream is read lives on"
    );
    reader.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_post_stream_opens_with_a_priming_event() {
    let (handle, _) = start(server(Vec::new()).builtin_tools()).await;
    let addr = handle.local_addr();
    let session = open_session(addr).await;
    let reply = in_session(addr, &session, "POST", Some(&tools_list(2))).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(
        reply.content_type().starts_with("text/event-stream"),
        "{reply:?}"
    );
    let events = parse_events(&reply.body);
    assert_eq!(events.len(), 2, "{events:?}");
    let stream = assert_priming(events.first());
    let answer = &events[1];
    assert_eq!(answer.index(), (1, stream), "{answer:?}");
    let message = answer.message();
    assert_eq!(message["id"], 2, "{message}");
    assert!(
        message["result"]["tools"]
            .as_array()
            .is_some_and(|tools| tools.iter().any(|t| t["name"] == "echo")),
        "{message}"
    );
}

/// The client of a broken stream makes another request in its session
/// before it takes the stream up again: the stream is still kept. (Once the
/// call is counted done, its result follows on its stream at once; were
/// the `tools/list` to come first, the test would pass without showing
/// anything, never fail.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_stream_outlives_the_sessions_next_request() {
    let (tool, gate) = progress_then_gate();
    let (handle, _) = start(server(vec![tool])).await;
    let addr = handle.local_addr();
    let session = open_session(addr).await;
    let call = call_with_progress(7, "steps");
    let mut post = Sse::open(addr, request(addr, "POST", &session, Some(&call), None)).await;
    assert_priming(post.next().await.as_ref());
    let progress = post.next().await.expect("the progress event");
    let last = progress.id.clone().expect("an id");
    drop(post);
    gate.add_permits(1);
    support::stats_until(addr, "the call done", |stats| {
        support::executions(stats)[1] == 1
    })
    .await;
    let reply = in_session(addr, &session, "POST", Some(&tools_list(8))).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let mut resumed = Sse::open(
        addr,
        request(addr, "GET", &session, None, Some(last.as_str())),
    )
    .await;
    let events = resumed.rest().await;
    assert!(
        events.iter().any(|e| e.message()["id"] == 7),
        "the call's result after {last}: {events:?}"
    );
}

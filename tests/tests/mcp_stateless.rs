//! `/mcp` without sessions: with `mcp_sessions(false)` (`HAIP_MCP_SESSIONS=0`)
//! no client gets an `Mcp-Session-Id`, every POST is served on its own, so
//! any instance answers any request; MCP 2026-07-28 requests are served so
//! whatever the setting (by default, sessions on, a client that sends
//! `initialize` gets a session: `mcp_first_hour.rs`).
//!
//! - The official Python MCP SDK's client (`tests/mcp/stateless.py`) works
//!   through a round-robin proxy whose every POST goes to the other of two
//!   instances than the one before: it initializes on one, and lists tools,
//!   calls tools, gets progress and log lines on both (checked by the proxy's
//!   log and by each instance's `/stats`).
//! - A `tools/call` to an instance that never saw `initialize` succeeds
//!   (plain JSON, no session); with `mcp_sessions(true)` it is refused.
//! - Stateless, `ctx.ask` and `ctx.sample` fail at once, naming
//!   `mcp_sessions`, even for a client that declares elicitation and
//!   sampling; with sessions the same client is asked.
//! - Progress and log lines come on the call's own SSE stream; a log level in
//!   the request's `_meta` is honoured, `logging/setLevel` lasts for its own
//!   request only.
//! - `GET` and `DELETE` are `405`; `max_sessions` bounds requests in flight.
//! - MCP 2026-07-28 (no sessions at all): a `subscriptions/listen` stream is
//!   acknowledged, then hears of every registry change (tagged with its
//!   subscription id) until the server stops, idle or not, past the write
//!   deadline; it gets only what it asked for; half of `max_sessions` may be
//!   open at once, one more is refused with `503`. With `mcp_sessions(true)`
//!   such requests are still served on their own (questions in rounds,
//!   listen streams). A request gets log lines only at the level its
//!   `_meta` names, and `logging/setLevel` is not found (`404`, `-32601`).
//!   `Mcp-Param-*` headers are checked against the `x-mcp-header`
//!   annotations the client was shown (its schema profile).

use crate::mcp_http;
use crate::mcp_support;
use crate::support;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use haip::{Context, Limits, SampleRequest, ServerBuilder, ServerHandle, Tool, ToolError};
use mcp_http::{Proxy, Reply, mcp_request, run_script};
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};
use support::{WAIT, base_limits, builder, demo_builder, executions, get_json, start, within};
use tokio::net::TcpStream;

async fn post(addr: SocketAddr, body: &Value) -> Reply {
    mcp_request(addr, "POST", Some(body), &[]).await
}

fn initialize(id: u64) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {"elicitation": {}, "sampling": {}},
            "clientInfo": {"name": "raw", "version": "0"}
        }
    })
}

fn call(id: u64, name: &str, arguments: Value) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}
    })
}

// ----- tools ------------------------------------------------------------------------

/// `instance`: `{"instance": name}`, which server ran it.
fn instance_tool(name: &'static str) -> Tool {
    Tool::builder("instance")
        .description("Names the server instance that runs the call")
        .output_schema(json!({
            "type": "object",
            "properties": {"instance": {"type": "string"}},
            "required": ["instance"]
        }))
        .handler(move |_: Value, _: Context| async move {
            Ok::<_, ToolError>(json!({ "instance": name }))
        })
        .build()
        .expect("instance is a valid tool")
}

/// `ask`: asks for a confirmation; `{"answer": ...}` or `{"error": ...}`
/// naming the `AskError` variant, with how long it took.
fn ask_tool() -> Tool {
    Tool::builder("ask")
        .description("Asks the client to confirm")
        .handler(|_: Value, ctx: Context| async move {
            let started = Instant::now();
            let outcome = match ctx.confirm("Go on?").await {
                Ok(yes) => json!({ "answer": yes }),
                Err(e) => json!({ "error": format!("{e:?}"), "message": e.to_string() }),
            };
            Ok::<_, ToolError>(json!({
                "outcome": outcome,
                "ms": started.elapsed().as_millis() as u64,
            }))
        })
        .build()
        .expect("ask is a valid tool")
}

/// `sample`: asks the client's model; `{"model": ...}` or `{"error": ...}`.
fn sample_tool() -> Tool {
    Tool::builder("sample")
        .description("Asks the client's model")
        .handler(|_: Value, ctx: Context| async move {
            let started = Instant::now();
            let outcome = match ctx.sample(SampleRequest::new("Say hi").max_tokens(5)).await {
                Ok(sampled) => json!({ "model": sampled.model }),
                Err(e) => json!({ "error": format!("{e:?}"), "message": e.to_string() }),
            };
            Ok::<_, ToolError>(json!({
                "outcome": outcome,
                "ms": started.elapsed().as_millis() as u64,
            }))
        })
        .build()
        .expect("sample is a valid tool")
}

/// `chatty`: a debug and an info line, progress 50, then (on its next poll:
/// a call done on its first poll has no progress to report) `{"done": true}`.
fn chatty_tool() -> Tool {
    Tool::builder("chatty")
        .description("Logs, reports progress, answers")
        .handler(|_: Value, ctx: Context| async move {
            ctx.debug("a debug line");
            ctx.info("an info line");
            ctx.progress(50.0);
            tokio::task::yield_now().await;
            Ok::<_, ToolError>(json!({ "done": true }))
        })
        .build()
        .expect("chatty is a valid tool")
}

async fn start_instance(builder: ServerBuilder) -> (ServerHandle, SocketAddr) {
    let (handle, _) = start(builder).await;
    let addr = handle.local_addr();
    (handle, addr)
}

// ----- the Python SDK through the proxy ---------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_client_alternates_between_two_stateless_instances() {
    let stateless = || demo_builder().mcp_sessions(false);
    let (a, a_addr) = start_instance(stateless().tool(instance_tool("A"))).await;
    let (b, b_addr) = start_instance(stateless().tool(instance_tool("B"))).await;
    let proxy = Proxy::start([a_addr, b_addr]).await;
    let url = format!("http://{}/mcp", proxy.addr);
    let summary = run_script("stateless.py", &[&url]).await;
    println!("{summary}");

    let routed = proxy.routed();
    let report = format!("{routed:#?}");
    let sequence: Vec<String> = routed
        .iter()
        .map(|r| format!("{}:{}", ["A", "B"][r.instance], r.method))
        .collect();
    println!("routed: {}", sequence.join(" "));
    assert!(
        routed.iter().all(|r| r.http == "POST"),
        "stateless, the client only POSTs (no GET stream, no DELETE): {report}"
    );
    assert!(
        routed.iter().all(|r| r.status / 100 == 2),
        "every POST succeeded: {report}"
    );
    assert!(
        routed
            .iter()
            .filter(|r| !r.request)
            .all(|r| r.status == 202),
        "notifications were accepted (202): {report}"
    );
    assert!(
        routed.iter().all(|r| !r.session_id),
        "no answer carried Mcp-Session-Id: {report}"
    );
    assert!(
        routed.windows(2).all(|w| w[0].instance != w[1].instance),
        "each POST went to the other instance than the one before: {report}"
    );
    let initializes: Vec<usize> = routed
        .iter()
        .filter(|r| r.method == "initialize")
        .map(|r| r.instance)
        .collect();
    assert_eq!(initializes, [0], "one initialize, on A: {report}");
    let calls_on = |instance| {
        routed
            .iter()
            .filter(|r| r.instance == instance && r.method == "tools/call")
            .count() as u64
    };
    assert!(
        calls_on(1) >= 4,
        "B, which never saw initialize, served tool calls: {report}"
    );
    assert!(
        routed
            .iter()
            .any(|r| r.instance == 1 && r.method == "tools/list"),
        "B listed the tools: {report}"
    );
    // Each instance's own statistics agree with the proxy: they ran the
    // calls routed to them.
    for (handle, instance) in [(&a, 0), (&b, 1)] {
        let stats = get_json(handle.local_addr(), "/stats").await;
        let [total, _, _, _, active] = executions(&stats);
        assert_eq!(
            (total, active),
            (calls_on(instance), 0),
            "instance {instance}'s calls: {stats}\n{report}"
        );
    }
    a.shutdown().await;
    b.shutdown().await;
}

// ----- no session needed, or required -----------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_without_initialize_is_served_statelessly_and_refused_with_sessions() {
    let (_a, a_addr) = start_instance(demo_builder().mcp_sessions(false)).await;
    let (_b, b_addr) = start_instance(demo_builder().mcp_sessions(false)).await;
    // A client initializes on A ...
    let init = post(a_addr, &initialize(1)).await;
    assert_eq!(init.status, 200, "{init:?}");
    assert!(init.headers.get("mcp-session-id").is_none(), "{init:?}");
    assert_eq!(init.content_type(), "application/json", "{init:?}");
    let result = &init.response()["result"];
    assert_eq!(result["serverInfo"]["name"], "haip", "{init:?}");
    assert!(
        result["capabilities"]["tools"].get("listChanged").is_none(),
        "stateless, listChanged is not promised to a client with a handshake: {init:?}"
    );
    // ... and calls on B, which never heard of it: plain JSON, no session.
    let reply = post(b_addr, &call(2, "add", json!({"a": 2, "b": 3}))).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.content_type(), "application/json", "{reply:?}");
    assert!(reply.headers.get("mcp-session-id").is_none(), "{reply:?}");
    let response = reply.response();
    assert_eq!(response["id"], 2, "{reply:?}");
    assert_eq!(
        response["result"]["structuredContent"],
        json!({"result": 5}),
        "{reply:?}"
    );
    // Without any initialize at all, too; and a stale session id is ignored.
    let reply = mcp_request(
        b_addr,
        "POST",
        Some(&call(3, "echo", json!({"message": "hi"}))),
        &[("mcp-session-id", "no-such-session")],
    )
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(
        reply.response()["result"]["structuredContent"],
        json!({"echoed": "hi"}),
        "{reply:?}"
    );
    // GET (the session's stream) and DELETE (ending a session) have no
    // meaning without sessions.
    for method in ["GET", "DELETE"] {
        let reply = mcp_request(b_addr, method, None, &[]).await;
        assert_eq!(reply.status, 405, "{method}: {reply:?}");
    }

    // With sessions (the default), the same call without a session is
    // refused, and one with a session this instance does not hold is not
    // found.
    let (_s, s_addr) = start_instance(demo_builder()).await;
    let reply = post(s_addr, &call(2, "add", json!({"a": 2, "b": 3}))).await;
    assert!(
        (400..500).contains(&reply.status),
        "a call without a session: {reply:?}"
    );
    let reply = mcp_request(
        s_addr,
        "POST",
        Some(&call(3, "add", json!({"a": 2, "b": 3}))),
        &[("mcp-session-id", "no-such-session")],
    )
    .await;
    assert_eq!(reply.status, 404, "a call in an unknown session: {reply:?}");
    // Its initialize opens a session, and promises listChanged.
    let init = post(s_addr, &initialize(1)).await;
    assert_eq!(init.status, 200, "{init:?}");
    assert!(init.headers.get("mcp-session-id").is_some(), "{init:?}");
    assert_eq!(
        init.response()["result"]["capabilities"]["tools"]["listChanged"],
        true,
        "{init:?}"
    );
}

/// `HAIP_MCP_SESSIONS=0` turns sessions off for a server built with
/// `from_env`, `1` keeps them on, and without it they are on (the
/// quickstart example, run as a process with each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haip_mcp_sessions_in_the_environment_turns_sessions_off_or_on() {
    let binary = mcp_support::example_binary("quickstart");
    for (sessions, value) in [(true, Some("1")), (false, Some("0")), (true, None)] {
        let port = mcp_support::free_port();
        let mut command = tokio::process::Command::new(&binary);
        match value {
            Some(value) => command.env("HAIP_MCP_SESSIONS", value),
            None => command.env_remove("HAIP_MCP_SESSIONS"),
        };
        let _server = command
            .env("HAIP_ADDR", format!("127.0.0.1:{port}"))
            .env("HAIP_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the quickstart example starts");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + WAIT;
        while TcpStream::connect(addr).await.is_err() {
            assert!(Instant::now() < deadline, "the quickstart never listened");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let init = post(addr, &initialize(1)).await;
        assert_eq!(init.status, 200, "{init:?}");
        assert_eq!(
            init.headers.get("mcp-session-id").is_some(),
            sessions,
            "HAIP_MCP_SESSIONS={value:?}: {init:?}"
        );
    }
}

// ----- what needs sessions ------------------------------------------------------------

/// An MCP client that declares elicitation and sampling; it declines every
/// question and has no model (rmcp's defaults).
struct Capable;

impl ClientHandler for Capable {
    fn get_info(&self) -> ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"elicitation": {}, "sampling": {}},
            "clientInfo": {"name": "capable", "version": "0"}
        }))
        .expect("a valid ClientConfig")
    }
}

/// The `outcome` of the `ask` or `sample` tool called by a capable rmcp client.
async fn outcome_of(addr: SocketAddr, tool: &str) -> (Value, u64) {
    let transport = StreamableHttpClientTransport::from_uri(format!("http://{addr}/mcp"));
    let client = within("the MCP client to initialize", Capable.serve(transport))
        .await
        .expect("the MCP client initializes");
    let result = within(
        &format!("tools/call {tool}"),
        client
            .peer()
            .call_tool(CallToolRequestParams::new(tool.to_owned())),
    )
    .await
    .unwrap_or_else(|e| panic!("tools/call {tool}: {e}"));
    let _ = within("closing the MCP client", client.cancel()).await;
    let value = result
        .content
        .iter()
        .find_map(|c| c.as_text())
        .map(|t| serde_json::from_str::<Value>(&t.text).expect("the text is JSON"))
        .unwrap_or_else(|| panic!("no text: {result:?}"));
    (
        value["outcome"].clone(),
        value["ms"].as_u64().unwrap_or(u64::MAX),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_and_sample_fail_at_once_statelessly_and_reach_the_client_with_sessions() {
    let tools = || builder().tool(ask_tool()).tool(sample_tool());
    let (_stateless, addr) = start_instance(tools().mcp_sessions(false)).await;
    // The client declared both: the error names the setting, not the client.
    let no_session = |outcome: &Value| {
        outcome["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("Failed"))
            && outcome["message"]
                .as_str()
                .is_some_and(|m| m.contains("no session") && m.contains("mcp_sessions"))
    };
    let (asked, ms) = outcome_of(addr, "ask").await;
    assert!(no_session(&asked), "{asked}");
    assert!(ms < 1000, "ask took {ms} ms to fail");
    let (sampled, ms) = outcome_of(addr, "sample").await;
    assert!(no_session(&sampled), "{sampled}");
    assert!(ms < 1000, "sample took {ms} ms to fail");

    // With sessions the same client gets the question (rmcp declines it) and
    // the sampling request (rmcp has no model: an error comes back).
    let (_sessions, addr) = start_instance(tools().mcp_sessions(true)).await;
    let (asked, _) = outcome_of(addr, "ask").await;
    assert_eq!(asked, json!({"answer": false}), "declined");
    let (sampled, _) = outcome_of(addr, "sample").await;
    assert!(
        sampled["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("Failed")),
        "the client answered the sampling request with an error: {sampled}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_and_logs_come_on_the_calls_own_stream() {
    let (_s, addr) = start_instance(builder().tool(chatty_tool()).mcp_sessions(false)).await;
    let chatty = |id, meta: Value| {
        let mut body = call(id, "chatty", json!({}));
        body["params"]["_meta"] = meta;
        body
    };
    // With a progress token: progress, the info line (not the debug one:
    // `info` is the default level), then the result, all on this request's
    // SSE stream.
    let reply = post(addr, &chatty(1, json!({"progressToken": "p1"}))).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(
        reply.content_type().starts_with("text/event-stream"),
        "notifications before the result need SSE: {reply:?}"
    );
    let messages = reply.messages();
    let methods: Vec<&str> = messages
        .iter()
        .map(|m| m["method"].as_str().unwrap_or("(response)"))
        .collect();
    assert!(methods.contains(&"notifications/progress"), "{messages:#?}");
    let logs = |messages: &[Value]| -> Vec<String> {
        messages
            .iter()
            .filter(|m| m["method"] == "notifications/message")
            .map(|m| format!("{} {}", m["params"]["level"], m["params"]["data"]))
            .collect()
    };
    assert_eq!(
        logs(&messages),
        [r#""info" "an info line""#],
        "{messages:#?}"
    );
    let progress = messages
        .iter()
        .find(|m| m["method"] == "notifications/progress")
        .expect("a progress notification");
    assert_eq!(progress["params"]["progressToken"], "p1");
    assert_eq!(progress["params"]["progress"], 50.0);
    assert_eq!(methods.last(), Some(&"(response)"), "{messages:#?}");
    assert_eq!(
        messages.last().expect("messages")["result"]["content"][0]["text"],
        r#"{"done":true}"#,
        "{messages:#?}"
    );

    // `logging/setLevel` is answered, but the next request is served on its
    // own: still `info`.
    let set = json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel",
                     "params": {"level": "debug"}});
    let reply = post(addr, &set).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.response()["result"], json!({}), "{reply:?}");
    let reply = post(addr, &chatty(3, json!({}))).await;
    assert_eq!(logs(&reply.messages()), [r#""info" "an info line""#]);
    // A level in the request's `_meta` holds for that request.
    let reply = post(
        addr,
        &chatty(4, json!({"io.modelcontextprotocol/logLevel": "debug"})),
    )
    .await;
    assert_eq!(
        logs(&reply.messages()),
        [r#""debug" "a debug line""#, r#""info" "an info line""#],
        "{reply:?}"
    );
}

/// Stateless, `max_sessions` bounds the requests being served: one more
/// gets `503` while a call runs, and is served once it has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_sessions_bounds_requests_in_flight() {
    let (gated, mut gate) = support::gated_tool("gated");
    let (_s, addr) = start_instance(
        builder()
            .tool(gated)
            .limits(Limits {
                max_sessions: 1,
                ..base_limits()
            })
            .mcp_sessions(false),
    )
    .await;
    let running = tokio::spawn(async move { post(addr, &call(1, "gated", json!({}))).await });
    gate.started().await;
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let refused = post(addr, &list).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    gate.open(1);
    let done = within("the gated call", running)
        .await
        .expect("the request task does not panic");
    assert_eq!(done.status, 200, "{done:?}");
    // The finished request's service winds down just after its answer.
    let deadline = Instant::now() + WAIT;
    loop {
        let reply = post(addr, &list).await;
        if reply.status == 200 {
            let tools = &reply.response()["result"]["tools"];
            assert_eq!(tools[0]["name"], "gated", "{reply:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still refused after the call ended: {reply:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ----- MCP 2026-07-28: no sessions at all ---------------------------------------------

/// A request of MCP 2026-07-28 (`_meta` with the version and what the
/// client can answer), and the headers such a client sends with it.
fn modern(id: u64, method: &str, mut params: Value, can: Value) -> (Value, Vec<(String, String)>) {
    let name = params["name"].as_str().map(str::to_owned);
    let meta = params
        .as_object_mut()
        .expect("params are an object")
        .entry("_meta")
        .or_insert_with(|| json!({}));
    meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
    meta["io.modelcontextprotocol/clientCapabilities"] = can;
    let mut headers = vec![
        ("MCP-Protocol-Version".to_owned(), "2026-07-28".to_owned()),
        ("Mcp-Method".to_owned(), method.to_owned()),
    ];
    if let Some(name) = name {
        headers.push(("Mcp-Name".to_owned(), name));
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    (body, headers)
}

fn header_refs(headers: &[(String, String)]) -> Vec<(&str, &str)> {
    headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect()
}

/// Posts a 2026-07-28 request to `path` with `extra` headers besides its own.
async fn post_modern(
    addr: SocketAddr,
    path: &str,
    (body, headers): &(Value, Vec<(String, String)>),
    extra: &[(&str, &str)],
) -> Reply {
    let mut all = header_refs(headers);
    all.extend_from_slice(extra);
    mcp_http::mcp_request_to(addr, path, "POST", Some(body), &all).await
}

/// Opens a `subscriptions/listen` stream asking for `notifications`.
async fn listen(addr: SocketAddr, id: u64, notifications: Value) -> mcp_http::Streaming {
    let (body, headers) = modern(
        id,
        "subscriptions/listen",
        json!({"notifications": notifications}),
        json!({}),
    );
    mcp_http::mcp_stream(addr, &body, &header_refs(&headers)).await
}

/// A tool named `name` that answers `{}`.
fn plain_tool(name: &str) -> Tool {
    Tool::builder(name)
        .description("Answers at once")
        .handler(|_: Value, _: Context| async { Ok::<_, ToolError>(json!({})) })
        .build()
        .expect("a valid tool")
}

/// The id of the subscription a listen-stream notification is tagged with.
fn subscription_of(message: &Value) -> &Value {
    &message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_stream_hears_every_registry_change_until_the_server_stops() {
    // A short write deadline: an idle listen stream holds nothing unsent,
    // so the deadline never closes it.
    let (handle, addr) = start_instance(builder().tool(chatty_tool()).limits(Limits {
        write_timeout: Duration::from_millis(300),
        ..base_limits()
    }))
    .await;
    let mut stream = listen(addr, 7, json!({"toolsListChanged": true})).await;
    assert_eq!(stream.status, 200);
    let ack = stream.next().await.expect("the acknowledgment");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "{ack}"
    );
    assert_eq!(subscription_of(&ack), 7, "{ack}");

    // A tool added, replaced, removed: each is told, tagged with the id.
    handle
        .register_tool(plain_tool("added"))
        .expect("registered");
    let changed = stream.next().await.expect("a change");
    assert_eq!(
        changed["method"], "notifications/tools/list_changed",
        "{changed}"
    );
    assert_eq!(subscription_of(&changed), 7, "{changed}");
    handle.unregister_tool("added").expect("it was there");
    let changed = stream.next().await.expect("a change");
    assert_eq!(
        changed["method"], "notifications/tools/list_changed",
        "{changed}"
    );

    // Quiet for several write deadlines, and still open.
    assert!(
        stream.quiet_for(Duration::from_millis(1200)).await,
        "nothing changed"
    );
    handle
        .register_tool(plain_tool("later"))
        .expect("registered");
    let changed = stream
        .next()
        .await
        .expect("the stream outlived the write deadline");
    assert_eq!(
        changed["method"], "notifications/tools/list_changed",
        "{changed}"
    );

    // The server stopping ends the stream (rmcp closes its response streams
    // at once; a final result may or may not make it out first).
    let stopping = tokio::spawn(async move { handle.shutdown().await });
    while let Some(last) = stream.next().await {
        assert_eq!(last["id"], 7, "only the final result: {last}");
        assert!(last.get("result").is_some(), "{last}");
    }
    within("the server to stop", stopping)
        .await
        .expect("shutdown does not panic");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_stream_gets_only_what_it_asked_for() {
    // Without sessions: the MCP 2025 request at the end has none.
    let (handle, addr) = start_instance(builder().tool(chatty_tool()).mcp_sessions(false)).await;
    // Prompts only: haip has none, so nothing is accepted and the stream,
    // which would never carry anything, ends at once.
    let mut stream = listen(addr, 3, json!({"promptsListChanged": true})).await;
    let ack = stream.next().await.expect("the acknowledgment");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(ack["params"]["notifications"], json!({}), "{ack}");
    handle
        .register_tool(plain_tool("added"))
        .expect("registered");
    let last = stream.next().await.expect("the final result");
    assert_eq!(last["id"], 3, "not a tools/list_changed: {last}");
    assert!(last.get("result").is_some(), "{last}");
    assert_eq!(stream.next().await, None);
    // An MCP 2025 client without a session has no listen stream: the
    // method is not found.
    let legacy = json!({"jsonrpc": "2.0", "id": 4, "method": "subscriptions/listen",
                        "params": {"notifications": {"toolsListChanged": true}}});
    let reply = post(addr, &legacy).await;
    assert_eq!(reply.response()["error"]["code"], -32601, "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_of_max_sessions_may_listen_and_one_more_is_refused() {
    let (_s, addr) = start_instance(builder().tool(chatty_tool()).limits(Limits {
        max_sessions: 2,
        ..base_limits()
    }))
    .await;
    let mut first = listen(addr, 1, json!({"toolsListChanged": true})).await;
    first.next().await.expect("the acknowledgment");
    let refused = listen(addr, 2, json!({"toolsListChanged": true})).await;
    assert_eq!(refused.status, 503);
    assert_eq!(
        refused
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let mut refused = refused;
    let error = refused.next().await.expect("a JSON-RPC error");
    assert_eq!(error["id"], 2, "{error}");
    assert_eq!(error["error"]["code"], -32000, "{error}");
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("subscriptions/listen") && message.contains("at most 1"),
        "{message}"
    );
    // Calls still have their place.
    let reply = post_modern(
        addr,
        "/mcp",
        &modern(
            3,
            "tools/call",
            json!({"name": "chatty", "arguments": {}}),
            json!({}),
        ),
        &[],
    )
    .await;
    assert_eq!(
        reply.response()["result"]["content"][0]["text"],
        r#"{"done":true}"#,
        "{reply:?}"
    );
    // The listener goes away: its place is free again (once the server
    // notices the closed connection).
    drop(first);
    let deadline = Instant::now() + WAIT * 3;
    loop {
        let mut again = listen(addr, 4, json!({"toolsListChanged": true})).await;
        if again.status == 200 {
            let ack = again.next().await.expect("the acknowledgment");
            assert_eq!(
                ack["method"], "notifications/subscriptions/acknowledged",
                "{ack}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the first listener's place was never freed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sessions_2026_requests_are_still_served_on_their_own() {
    let (handle, addr) = start_instance(
        builder()
            .tool(ask_tool())
            .request_state_key("a secret of at least thirty-two bytes....")
            .mcp_sessions(true),
    )
    .await;
    // The question goes back in rounds, as without sessions.
    let ask = modern(
        1,
        "tools/call",
        json!({"name": "ask", "arguments": {}}),
        json!({"elicitation": {}}),
    );
    let reply = post_modern(addr, "/mcp", &ask, &[]).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(reply.headers.get("mcp-session-id").is_none(), "{reply:?}");
    let result = &reply.response()["result"];
    assert_eq!(result["resultType"], "input_required", "{reply:?}");
    let (key, request) = result["inputRequests"]
        .as_object()
        .and_then(|r| r.iter().next())
        .expect("one question");
    assert_eq!(request["method"], "elicitation/create", "{reply:?}");
    let state = result["requestState"].as_str().expect("a request state");
    let (mut retry, headers) = ask;
    retry["params"]["inputResponses"] =
        json!({ key.as_str(): {"action": "accept", "content": {"confirm": true}} });
    retry["params"]["requestState"] = json!(state);
    let reply = post_modern(addr, "/mcp", &(retry, headers), &[]).await;
    let text = reply.response()["result"]["content"][0]["text"].clone();
    let outcome: Value = serde_json::from_str(text.as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {reply:?}"));
    assert_eq!(outcome["outcome"], json!({"answer": true}), "{reply:?}");
    // And a listen stream hears registry changes.
    let mut stream = listen(addr, 9, json!({"toolsListChanged": true})).await;
    stream.next().await.expect("the acknowledgment");
    handle
        .register_tool(plain_tool("added"))
        .expect("registered");
    let changed = stream.next().await.expect("a change");
    assert_eq!(
        changed["method"], "notifications/tools/list_changed",
        "{changed}"
    );
    // `initialize` still opens a session.
    let init = post(addr, &initialize(2)).await;
    assert!(init.headers.get("mcp-session-id").is_some(), "{init:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_request_gets_log_lines_only_at_the_level_it_names() {
    let (_s, addr) = start_instance(builder().tool(chatty_tool())).await;
    let chatty = |id, meta: Value| {
        modern(
            id,
            "tools/call",
            json!({"name": "chatty", "arguments": {}, "_meta": meta}),
            json!({}),
        )
    };
    let logs = |reply: &Reply| -> Vec<String> {
        reply
            .messages()
            .iter()
            .filter(|m| m["method"] == "notifications/message")
            .map(|m| m["params"]["level"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    // No `logLevel`: no log lines at all (a 2025 request gets `info`).
    let reply = post_modern(addr, "/mcp", &chatty(1, json!({})), &[]).await;
    assert!(logs(&reply).is_empty(), "{reply:?}");
    assert_eq!(
        reply.response()["result"]["content"][0]["text"],
        r#"{"done":true}"#
    );
    let reply = post_modern(
        addr,
        "/mcp",
        &chatty(2, json!({"io.modelcontextprotocol/logLevel": "debug"})),
        &[],
    )
    .await;
    assert_eq!(logs(&reply), ["debug", "info"], "{reply:?}");
    // `logging/setLevel` is gone in 2026-07-28: not found, with its id.
    for params in [json!({}), json!({"level": "debug"})] {
        let set = modern(3, "logging/setLevel", params, json!({}));
        let reply = post_modern(addr, "/mcp", &set, &[]).await;
        assert_eq!(reply.status, 404, "{reply:?}");
        let response = reply.response();
        assert_eq!(
            (response["id"].clone(), response["error"]["code"].clone()),
            (json!(3), json!(-32601)),
            "{reply:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_param_headers_are_checked_against_what_the_client_was_shown() {
    let region = Tool::builder("regional")
        .description("Answers for a region")
        .input_schema(json!({
            "type": "object",
            "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
            "required": ["region"]
        }))
        .handler(|params: Value, _: Context| async move {
            Ok::<_, ToolError>(json!({"region": params["region"]}))
        })
        .build()
        .expect("a valid tool");
    let (_s, addr) = start_instance(builder().tool(region)).await;
    let call = || {
        modern(
            1,
            "tools/call",
            json!({"name": "regional", "arguments": {"region": "eu-west"}}),
            json!({}),
        )
    };
    let list = modern(2, "tools/list", json!({}), json!({}));
    // In `full`, the annotation is shown, and the header is required.
    let full = "/mcp?schema_profile=full";
    let listed = post_modern(addr, full, &list, &[]).await;
    assert_eq!(
        listed.response()["result"]["tools"][0]["inputSchema"]["properties"]["region"]["x-mcp-header"],
        "Region",
        "{listed:?}"
    );
    let missing = post_modern(addr, full, &call(), &[]).await;
    assert_eq!(missing.status, 400, "{missing:?}");
    assert_eq!(missing.response()["error"]["code"], -32020, "{missing:?}");
    let wrong = post_modern(addr, full, &call(), &[("Mcp-Param-Region", "us-east")]).await;
    assert_eq!(wrong.status, 400, "{wrong:?}");
    let right = post_modern(addr, full, &call(), &[("Mcp-Param-Region", "eu-west")]).await;
    assert_eq!(right.status, 200, "{right:?}");
    assert_eq!(
        right.response()["result"]["content"][0]["text"],
        r#"{"region":"eu-west"}"#,
        "{right:?}"
    );
    // In a call over 64 KiB (whose arguments the front door parses apart),
    // a long annotated value is still checked against its header.
    let long = "r".repeat(2000);
    let large = modern(
        4,
        "tools/call",
        json!({"name": "regional", "arguments": {"region": long, "padding": "p".repeat(70_000)}}),
        json!({}),
    );
    let right = post_modern(addr, full, &large, &[("Mcp-Param-Region", long.as_str())]).await;
    assert_eq!(right.status, 200, "{right:?}");
    assert!(right.response().get("result").is_some(), "{right:?}");
    let wrong = post_modern(addr, full, &large, &[("Mcp-Param-Region", "eu-west")]).await;
    assert_eq!(wrong.status, 400, "{wrong:?}");
    // The default profile shows no annotation: a client that was shown none
    // sends no header, and is not refused for it.
    let listed = post_modern(addr, "/mcp", &list, &[]).await;
    let schema = &listed.response()["result"]["tools"][0]["inputSchema"];
    assert!(
        schema["properties"]["region"].get("x-mcp-header").is_none(),
        "{schema}"
    );
    let plain = post_modern(addr, "/mcp", &call(), &[]).await;
    assert_eq!(plain.status, 200, "{plain:?}");
    assert!(plain.response().get("result").is_some(), "{plain:?}");
}

// ----- running the Python script ------------------------------------------------------

/// A tool that says when it starts (after reporting progress when `report`),
/// then waits to be cancelled, and says when it is.
fn waiting_tool(
    report: bool,
    started: tokio::sync::mpsc::Sender<()>,
    cancelled: tokio::sync::mpsc::Sender<()>,
) -> Tool {
    Tool::builder("wait")
        .description("Waits to be cancelled")
        .handler(move |_: Value, ctx: Context| {
            let (started, cancelled) = (started.clone(), cancelled.clone());
            async move {
                if report {
                    ctx.progress(1.0);
                }
                let _ = started.send(()).await;
                tokio::select! {
                    () = ctx.cancelled() => {
                        let _ = cancelled.send(()).await;
                        Err(ToolError::execution("cancelled"))
                    }
                    () = tokio::time::sleep(Duration::from_secs(30)) => {
                        Err(ToolError::execution("never cancelled"))
                    }
                }
            }
        })
        .build()
        .expect("a valid tool")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_call_is_cancelled_when_its_client_goes_away() {
    use tokio::io::AsyncWriteExt;
    // Streaming: the call's progress has come on its answer's SSE stream
    // when the client closes it.
    let (started_tx, mut started) = tokio::sync::mpsc::channel(1);
    let (cancelled_tx, mut cancelled) = tokio::sync::mpsc::channel(1);
    let (handle, addr) =
        start_instance(builder().tool(waiting_tool(true, started_tx, cancelled_tx))).await;
    let call = modern(
        1,
        "tools/call",
        json!({"name": "wait", "arguments": {}, "_meta": {"progressToken": "w"}}),
        json!({}),
    );
    let mut stream = mcp_http::mcp_stream(addr, &call.0, &header_refs(&call.1)).await;
    assert_eq!(stream.status, 200);
    let progress = stream.next().await.expect("the call's progress");
    assert_eq!(progress["method"], "notifications/progress", "{progress}");
    drop(stream);
    within("the tool to be cancelled", cancelled.recv())
        .await
        .expect("the tool saw its cancellation");
    within("the tool to have started", started.recv()).await;
    handle.shutdown().await;

    // Before any answer: the client closes its connection while the call
    // runs, with nothing sent yet.
    let (started_tx, mut started) = tokio::sync::mpsc::channel(1);
    let (cancelled_tx, mut cancelled) = tokio::sync::mpsc::channel(1);
    let (handle, addr) =
        start_instance(builder().tool(waiting_tool(false, started_tx, cancelled_tx))).await;
    let (body, headers) = modern(
        2,
        "tools/call",
        json!({"name": "wait", "arguments": {}}),
        json!({}),
    );
    let body = body.to_string();
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in &headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let mut conn = within("connecting", TcpStream::connect(addr))
        .await
        .expect("connected");
    within(
        "sending",
        conn.write_all(format!("{head}\r\n{body}").as_bytes()),
    )
    .await
    .expect("sent");
    within("the tool to start", started.recv())
        .await
        .expect("the tool started");
    drop(conn);
    within("the tool to be cancelled", cancelled.recv())
        .await
        .expect("the tool saw its cancellation");
    handle.shutdown().await;
}

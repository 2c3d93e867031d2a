//! `/mcp` is stateless by default: no `Mcp-Session-Id`, every POST served on
//! its own, so any instance answers any request.
//!
//! - The official Python MCP SDK's client (`tests/mcp/stateless.py`) works
//!   through a round-robin proxy whose every POST goes to the other of two
//!   instances than the one before: it initializes on one, and lists tools,
//!   calls tools, gets progress and log lines on both (checked by the proxy's
//!   log and by each instance's `/stats`).
//! - A `tools/call` to an instance that never saw `initialize` succeeds
//!   (plain JSON, no session); with `mcp_sessions(true)` it is refused.
//! - Stateless, `ctx.ask` and `ctx.sample` fail at once with `Unsupported`
//!   even for a client that declares elicitation and sampling; with sessions
//!   the same client is asked.
//! - Progress and log lines come on the call's own SSE stream; a log level in
//!   the request's `_meta` is honoured, `logging/setLevel` lasts for its own
//!   request only.
//! - `GET` and `DELETE` are `405`; `max_sessions` bounds requests in flight.

#[path = "support/mcp_http.rs"]
mod mcp_http;
#[path = "support/mcp.rs"]
mod mcp_support;
mod support;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use haip::{Context, SampleRequest, ServerBuilder, ServerHandle, Tool, ToolError};
use mcp_http::{Proxy, Reply, mcp_request, run_script};
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};
use support::{WAIT, builder, demo_builder, executions, get_json, start, within};
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
    let (a, a_addr) = start_instance(demo_builder().tool(instance_tool("A"))).await;
    let (b, b_addr) = start_instance(demo_builder().tool(instance_tool("B"))).await;
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
    let (_a, a_addr) = start_instance(demo_builder()).await;
    let (_b, b_addr) = start_instance(demo_builder()).await;
    // A client initializes on A ...
    let init = post(a_addr, &initialize(1)).await;
    assert_eq!(init.status, 200, "{init:?}");
    assert!(init.headers.get("mcp-session-id").is_none(), "{init:?}");
    assert_eq!(init.content_type(), "application/json", "{init:?}");
    let result = &init.response()["result"];
    assert_eq!(result["serverInfo"]["name"], "haip", "{init:?}");
    assert!(
        result["capabilities"]["tools"].get("listChanged").is_none(),
        "stateless, listChanged is not promised: {init:?}"
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

    // With sessions, the same call without a session is refused, and one
    // with a session this instance does not hold is not found.
    let (_s, s_addr) = start_instance(demo_builder().mcp_sessions(true)).await;
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

/// `HAIP_MCP_SESSIONS=1` turns sessions on for a server built with
/// `from_env` (the quickstart example, run as a process with and without it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haip_mcp_sessions_in_the_environment_turns_sessions_on() {
    let binary = mcp_support::example_binary("quickstart");
    for (sessions, value) in [(true, "1"), (false, "0")] {
        let port = mcp_support::free_port();
        let _server = tokio::process::Command::new(&binary)
            .env("HAIP_ADDR", format!("127.0.0.1:{port}"))
            .env("HAIP_MCP_SESSIONS", value)
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
            "HAIP_MCP_SESSIONS={value}: {init:?}"
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
    let (_stateless, addr) = start_instance(tools()).await;
    let (asked, ms) = outcome_of(addr, "ask").await;
    assert_eq!(asked["error"], "Unsupported", "{asked}");
    assert!(ms < 1000, "ask took {ms} ms to fail");
    let (sampled, ms) = outcome_of(addr, "sample").await;
    assert_eq!(sampled["error"], "Unsupported", "{sampled}");
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
    let (_s, addr) = start_instance(builder().tool(chatty_tool())).await;
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
    let (_s, addr) = start_instance(builder().tool(gated).max_sessions(1)).await;
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

// ----- running the Python script ------------------------------------------------------

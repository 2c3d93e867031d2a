//! Security: MCP sessions bound to their owner, and per-caller shares of MCP
//! sessions, requests and listen streams (issue 37, items 2 and 5).
//!
//! - An MCP session is its opener's: another subject naming it (`POST`,
//!   `GET`, `DELETE`, an answer to the session's question) is answered as if
//!   it did not exist (`404`), and the session goes on for its owner.
//! - One caller holds at most `max_sessions_per_caller` of each pool: MCP
//!   sessions, stateless requests in flight, `subscriptions/listen` streams;
//!   one more is refused with `503` naming the share, while other callers
//!   are served. Sessions and stateless requests are pools of their own.
//! - A session that ends gives its place and its share back.

use crate::mcp_http;
use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use haip::{Context, Limits, ServerBuilder, Tool, ToolError};
use mcp_http::{Reply, Streaming, mcp_request, mcp_stream};
use serde_json::{Value, json};
use support::{base_limits, builder, gated_tool, hs256_token, start, within};

/// The HS256 secret of the test servers (at least 32 bytes).
const SECRET: &str = "security-mcp-test-secret-of-at-least-32-bytes";

/// The protocol revision of the sessions' requests (it has `initialize`).
const SESSION_REVISION: &str = "2025-06-18";

/// A server with HS256 authentication, `echo` and `ask`.
fn authenticated() -> ServerBuilder {
    builder().builtin_tools().jwt_hs256(SECRET).tool(ask_tool())
}

/// `ask`: asks its client to confirm; `{"answer": bool}` or `{"error": ...}`.
fn ask_tool() -> Tool {
    Tool::builder("ask")
        .description("Asks the client to confirm")
        .handler(|_: Value, ctx: Context| async move {
            Ok::<_, ToolError>(match ctx.confirm("Go on?").await {
                Ok(yes) => json!({ "answer": yes }),
                Err(e) => json!({ "error": e.to_string() }),
            })
        })
        .build()
        .expect("ask is a valid tool")
}

fn bearer(who: &str) -> String {
    format!("Bearer {}", hs256_token(SECRET, who, None))
}

fn initialize(id: u64) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "initialize",
        "params": {
            "protocolVersion": SESSION_REVISION,
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "raw", "version": "0"}
        }
    })
}

/// `who`'s `initialize`.
async fn open(addr: SocketAddr, who: &str) -> Reply {
    let auth = bearer(who);
    mcp_request(
        addr,
        "POST",
        Some(&initialize(1)),
        &[("authorization", &auth)],
    )
    .await
}

/// `who` opens a session (and says it is initialized); its id.
async fn open_session(addr: SocketAddr, who: &str) -> String {
    let init = open(addr, who).await;
    assert_eq!(init.status, 200, "{who}'s initialize: {init:?}");
    let id = init
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no session id: {init:?}"))
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let reply = in_session(addr, who, &id, "POST", Some(&initialized)).await;
    assert_eq!(reply.status, 202, "{who}'s initialized: {reply:?}");
    id
}

/// A request of `who` in the session `id`, read to its end.
async fn in_session(
    addr: SocketAddr,
    who: &str,
    id: &str,
    method: &str,
    body: Option<&Value>,
) -> Reply {
    let auth = bearer(who);
    let headers = [
        ("authorization", auth.as_str()),
        ("mcp-session-id", id),
        ("mcp-protocol-version", SESSION_REVISION),
    ];
    mcp_request(addr, method, body, &headers).await
}

/// The status of `who`'s `GET` of the session `id`'s stream (which, when
/// it opens, is dropped at once).
async fn get_stream(addr: SocketAddr, who: &str, id: &str) -> u16 {
    let request = hyper::Request::get("/mcp")
        .header("host", format!("127.0.0.1:{}", addr.port()))
        .header("accept", "text/event-stream")
        .header("authorization", bearer(who))
        .header("mcp-session-id", id)
        .header("mcp-protocol-version", SESSION_REVISION)
        .body(Bytes::new())
        .expect("a valid request");
    let response = within("the GET's answer", mcp_http::send(addr, request))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    response.status().as_u16()
}

fn tools_list(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"})
}

fn tool_names(reply: &Reply) -> Vec<String> {
    let response = reply.response();
    response["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {reply:?}"))
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// A 2026-07-28 request (no session, no `initialize`) of `who`, with the
/// headers such a client sends.
async fn modern(addr: SocketAddr, who: &str, id: u64, method: &str, mut params: Value) -> Reply {
    let name = params["name"].as_str().map(str::to_owned);
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let auth = bearer(who);
    let mut headers = vec![
        ("authorization", auth.as_str()),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ];
    if let Some(name) = &name {
        headers.push(("mcp-name", name.as_str()));
    }
    mcp_request(addr, "POST", Some(&body), &headers).await
}

/// `who`'s 2026-07-28 `tools/call` of `echo`: answered, and echoed; how
/// long it took.
async fn echo_2026(addr: SocketAddr, who: &str) -> Duration {
    let started = Instant::now();
    let reply = modern(
        addr,
        who,
        7,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": who}}),
    )
    .await;
    assert_eq!(reply.status, 200, "{who}'s stateless call: {reply:?}");
    assert_eq!(
        reply.response()["result"]["structuredContent"],
        json!({"echoed": who}),
        "{reply:?}"
    );
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "{who}'s call took {took:?}");
    took
}

/// A `subscriptions/listen` stream of `who` (2026-07-28).
async fn listen(addr: SocketAddr, who: &str, id: u64) -> Streaming {
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
        "params": {
            "notifications": {"toolsListChanged": true},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        }
    });
    let auth = bearer(who);
    let headers = [
        ("authorization", auth.as_str()),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "subscriptions/listen"),
    ];
    mcp_stream(addr, &body, &headers).await
}

/// A `503` with `Retry-After` whose JSON-RPC error says `what`.
fn assert_busy(reply: &Reply, what: &[&str]) {
    assert_eq!(reply.status, 503, "{reply:?}");
    assert_eq!(
        reply
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1"),
        "{reply:?}"
    );
    let error = &reply.response()["error"];
    assert_eq!(error["code"], -32000, "{reply:?}");
    let message = error["message"].as_str().unwrap_or_default();
    for part in what {
        assert!(message.contains(part), "{part:?} not in {message:?}");
    }
}

// ----- sessions are their openers' -----------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_subject_cannot_use_end_or_read_a_session() {
    let (handle, _) = start(authenticated().mcp_sessions(true)).await;
    let addr = handle.local_addr();
    let alice = open_session(addr, "alice").await;
    let (before, reply) = support::timed(in_session(
        addr,
        "alice",
        &alice,
        "POST",
        Some(&tools_list(2)),
    ))
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(tool_names(&reply).contains(&"ask".to_owned()), "{reply:?}");

    // Bob, with a valid token and alice's session id: as if there were none.
    let unknown = in_session(addr, "bob", "no-such-session", "POST", Some(&tools_list(3))).await;
    assert_eq!(unknown.status, 404, "an unknown session: {unknown:?}");
    let reply = in_session(addr, "bob", &alice, "POST", Some(&tools_list(3))).await;
    assert_eq!(reply.status, 404, "bob's POST: {reply:?}");
    assert_eq!(reply.body, unknown.body, "nothing tells the two apart");
    assert_eq!(get_stream(addr, "bob", &alice).await, 404, "bob's GET");
    let reply = in_session(addr, "bob", &alice, "DELETE", None).await;
    assert_eq!(reply.status, 404, "bob's DELETE: {reply:?}");
    let reply = in_session(addr, "bob", "no-such-session", "DELETE", None).await;
    assert_eq!(
        reply.status, 404,
        "a DELETE of an unknown session: {reply:?}"
    );

    // Alice's session goes on.
    let (during, reply) = support::timed(in_session(
        addr,
        "alice",
        &alice,
        "POST",
        Some(&tools_list(4)),
    ))
    .await;
    assert_eq!(reply.status, 200, "alice after bob's DELETE: {reply:?}");
    support::security_row(
        2,
        "Another subject with a valid token and a leaked `Mcp-Session-Id` answers the owner's question, reads its `GET` stream, `DELETE`s it",
        "`404`, as for a session that does not exist; the owner's tool gets the owner's answer",
        "the owner's `tools/list` in its session",
        Some(before),
        Some(during),
    );
    assert!(tool_names(&reply).contains(&"echo".to_owned()), "{reply:?}");
    assert_eq!(get_stream(addr, "alice", &alice).await, 200, "alice's GET");

    // Alice's tool asks her a question: bob's answer is refused, hers is
    // the one the tool gets.
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                      "params": {"name": "ask", "arguments": {}}});
    let auth = bearer("alice");
    let mut asked = mcp_stream(
        addr,
        &call,
        &[
            ("authorization", auth.as_str()),
            ("mcp-session-id", alice.as_str()),
            ("mcp-protocol-version", SESSION_REVISION),
        ],
    )
    .await;
    assert_eq!(asked.status, 200);
    let question = asked.next().await.expect("the question");
    assert_eq!(question["method"], "elicitation/create", "{question}");
    let answer = |confirm: bool| {
        json!({"jsonrpc": "2.0", "id": question["id"].clone(),
               "result": {"action": "accept", "content": {"confirm": confirm}}})
    };
    let reply = in_session(addr, "bob", &alice, "POST", Some(&answer(true))).await;
    assert_eq!(reply.status, 404, "bob's answer: {reply:?}");
    let reply = in_session(addr, "alice", &alice, "POST", Some(&answer(false))).await;
    assert_eq!(reply.status, 202, "alice's answer: {reply:?}");
    let result = asked.next().await.expect("the call's result");
    assert_eq!(result["id"], 5, "{result}");
    let text = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    let outcome: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {result}"));
    assert_eq!(
        outcome,
        json!({"answer": false}),
        "alice's answer, not bob's: {result}"
    );

    // Alice ends her session; then it is gone for her too.
    let reply = in_session(addr, "alice", &alice, "DELETE", None).await;
    assert_eq!(reply.status, 204, "alice's DELETE: {reply:?}");
    let reply = in_session(addr, "alice", &alice, "POST", Some(&tools_list(6))).await;
    assert_eq!(reply.status, 404, "an ended session: {reply:?}");
}

// ----- every pool has a per-caller share ---------------------------------------------

/// Alice at her share of sessions is refused one more, naming the share;
/// bob opens one, and his stateless call is served at once. One of alice's
/// ended sessions gives its place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_caller_holds_at_most_its_share_of_sessions() {
    let (handle, _) = start(authenticated().mcp_sessions(true).limits(Limits {
        max_sessions: 20,
        max_sessions_per_caller: 5,
        ..base_limits()
    }))
    .await;
    let addr = handle.local_addr();
    let before = echo_2026(addr, "bob").await;
    let mut sessions = Vec::new();
    for _ in 0..5 {
        sessions.push(open_session(addr, "alice").await);
    }
    let refused = open(addr, "alice").await;
    assert_busy(
        &refused,
        &[
            r#"subject "alice" already holds 5 MCP sessions"#,
            "max_sessions_per_caller = 5",
        ],
    );
    assert_eq!(refused.response()["id"], 1, "{refused:?}");

    // Bob's own share is whole.
    let bob = open_session(addr, "bob").await;
    let reply = in_session(addr, "bob", &bob, "POST", Some(&tools_list(2))).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let during = echo_2026(addr, "bob").await;
    support::security_row(
        5,
        "One subject opens MCP sessions until none are left (shown with `max_sessions_per_caller: 5`); before, that also refused everyone's stateless requests",
        "beyond its share: `503` + `Retry-After`, JSON-RPC error naming `max_sessions_per_caller`; sessions and stateless requests are separate pools",
        "another subject's 2026-07-28 `tools/call`",
        Some(before),
        Some(during),
    );
    // Alice's sessions do not hold stateless requests either.
    echo_2026(addr, "alice").await;

    // An ended session gives its place and its share back (its service is
    // dropped just after the DELETE is answered).
    let ended = sessions.pop().expect("five sessions");
    let reply = in_session(addr, "alice", &ended, "DELETE", None).await;
    assert_eq!(reply.status, 204, "{reply:?}");
    within("alice's share to have room again", async {
        loop {
            let reply = open(addr, "alice").await;
            if reply.status == 200 {
                break;
            }
            assert_busy(&reply, &["already holds 5 MCP sessions"]);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let refused = open(addr, "alice").await;
    assert_busy(&refused, &["already holds 5 MCP sessions"]);
}

/// The sessions and the stateless requests are pools of their own: with
/// every session taken, a stateless call is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_cannot_starve_stateless_requests() {
    let (handle, _) = start(authenticated().mcp_sessions(true).limits(Limits {
        max_sessions: 2,
        ..base_limits()
    }))
    .await;
    let addr = handle.local_addr();
    let _a = open_session(addr, "alice").await;
    let _b = open_session(addr, "alice").await;
    let refused = open(addr, "bob").await;
    assert_busy(&refused, &["Too many MCP sessions (max_sessions = 2)"]);
    echo_2026(addr, "bob").await;
}

/// Alice with her share of requests in flight is refused one more, naming
/// the share; bob is served, and so is alice once hers are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_caller_holds_at_most_its_share_of_requests_in_flight() {
    let (gated, mut gate) = gated_tool("gated");
    let (handle, _) = start(authenticated().tool(gated).limits(Limits {
        max_sessions: 10,
        max_sessions_per_caller: 3,
        ..base_limits()
    }))
    .await;
    let addr = handle.local_addr();
    let before = echo_2026(addr, "bob").await;
    let mut running = Vec::new();
    for id in 0..3 {
        running.push(tokio::spawn(async move {
            modern(
                addr,
                "alice",
                id,
                "tools/call",
                json!({"name": "gated", "arguments": {}}),
            )
            .await
        }));
        gate.started().await;
    }
    let refused = modern(addr, "alice", 9, "tools/list", json!({})).await;
    assert_busy(
        &refused,
        &[
            r#"subject "alice" already has 3 MCP requests in flight"#,
            "max_sessions_per_caller = 3",
        ],
    );
    assert_eq!(refused.response()["id"], 9, "{refused:?}");
    // Bob is served at once, with a call and with an old client's handshake.
    let during = echo_2026(addr, "bob").await;
    support::security_row(
        5,
        "One subject holds MCP requests in flight (calls that wait) until none are left (shown with `max_sessions_per_caller: 3`)",
        "beyond its share: `503` + `Retry-After` naming `max_sessions_per_caller`",
        "another subject's 2026-07-28 `tools/call`",
        Some(before),
        Some(during),
    );
    let init = open(addr, "bob").await;
    assert_eq!(init.status, 200, "{init:?}");

    gate.open(3);
    for call in running {
        let reply = within("a gated call", call).await.expect("no panic");
        assert_eq!(reply.status, 200, "{reply:?}");
    }
    // Each answered request's service winds down just after its answer.
    within("alice's share to have room again", async {
        loop {
            let reply = modern(addr, "alice", 10, "tools/list", json!({})).await;
            if reply.status == 200 {
                break;
            }
            assert_busy(&reply, &["already has 3 MCP requests in flight"]);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// Alice with her share of listen streams is refused one more, naming the
/// share; bob opens one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_caller_holds_at_most_its_share_of_listen_streams() {
    let (handle, _) = start(authenticated().limits(Limits {
        max_sessions: 100,
        max_sessions_per_caller: 2,
        ..base_limits()
    }))
    .await;
    let addr = handle.local_addr();
    let mut streams = Vec::new();
    for id in 1..=2 {
        let mut stream = listen(addr, "alice", id).await;
        assert_eq!(stream.status, 200);
        let ack = stream.next().await.expect("the acknowledgment");
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{ack}"
        );
        streams.push(stream);
    }
    let mut refused = listen(addr, "alice", 3).await;
    assert_eq!(refused.status, 503);
    let error = refused.next().await.expect("a JSON-RPC error");
    assert_eq!(error["id"], 3, "{error}");
    assert_eq!(error["error"]["code"], -32000, "{error}");
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(r#"subject "alice" already holds 2 subscriptions/listen streams"#)
            && message.contains("max_sessions_per_caller = 2"),
        "{message}"
    );

    let mut bob = listen(addr, "bob", 4).await;
    assert_eq!(bob.status, 200);
    let ack = bob.next().await.expect("bob's acknowledgment");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
}

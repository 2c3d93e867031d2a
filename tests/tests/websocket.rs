//! Wire behaviour over a real WebSocket (HAIP.md §2–§9, §14, §16): the
//! handshake, discovery, the built-in and demo tools, call outcomes, errors,
//! heartbeat, cancellation, timeouts, panics, the live registry and the HTTP
//! side endpoints.
//!
//! Every envelope a test receives is also checked by the support client
//! against the outbound rules (seven fields, UUID v4 ids, `seq` +1 from `"1"`
//! with no gaps, one session id).

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use haip::{Context, Tool, ToolError};
use serde_json::{Value, json};
use support::{
    Client, DropGuard, builder, demo_builder, expected_hai_payload, gated_tool, get_json, http_get,
    is_uuid_v4, start, stats_until, within,
};
use tokio::sync::mpsc;
use tokio_tungstenite::connect_async;
use tokio_tungstenite::tungstenite;

// ----- §3 handshake, §2.4 envelope rules ------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_hai_comes_first_with_exact_payload_and_envelopes_follow_the_rules() {
    let (handle, url) = start(demo_builder()).await;
    let mut client = Client::connect(&url).await;
    let hai = client.hai.clone();
    assert_eq!(hai["seq"], "1", "{hai}");
    assert_eq!(hai["channel"], "SYSTEM", "{hai}");
    assert_eq!(hai["payload"], expected_hai_payload(), "{hai}");
    assert!(hai.get("run_id").is_none() && hai.get("thread_id").is_none());

    // A mixed exchange; the client checks every envelope's shape and seq.
    let mut ids = HashSet::from([hai["id"].as_str().unwrap().to_owned()]);
    client.request("PING", json!({"nonce": "n-1"})).await;
    client.request("TOOL_LIST", json!({})).await;
    client.call("c-1", "echo", json!({"message": "hi"})).await;
    client.call("c-2", "nope", json!({})).await;
    client.send_text("{not json").await;
    client
        .call(
            "c-3",
            "process_file",
            json!({"filename": "a.txt", "operation": "read"}),
        )
        .await;
    let mut seen_done = 0;
    while seen_done < 3 {
        let env = client.recv().await;
        assert!(
            ids.insert(env["id"].as_str().unwrap().to_owned()),
            "envelope ids must be unique: {env}"
        );
        if env["type"] == "TOOL_DONE" {
            seen_done += 1;
        }
    }
    // HAI, PONG, TOOL_LIST, TOOL_DONE, ERROR + TOOL_DONE, ERROR, 6 progress
    // updates and TOOL_DONE: 14 envelopes, numbered 1..=14 without gaps.
    assert_eq!(client.last_seq(), 14);

    // Each connection is its own session, numbered from "1"; `/` and
    // `/haip/websocket` upgrade too.
    let addr = handle.local_addr();
    for path in ["/", "/haip/websocket", "/haip?x=1"] {
        let other = Client::connect(&format!("ws://{addr}{path}")).await;
        assert_eq!(other.hai["seq"], "1");
        assert_eq!(other.hai["payload"], expected_hai_payload());
        assert_ne!(
            other.session, client.session,
            "a fresh session per connection"
        );
    }
    // Other paths are 404s.
    match within(
        "the 404 upgrade",
        connect_async(format!("ws://{addr}/nope")),
    )
    .await
    {
        Err(tungstenite::Error::Http(response)) => assert_eq!(response.status(), 404),
        other => panic!("upgrade on /nope must fail with 404, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hai_advertises_configured_credit_and_runs() {
    let (_handle, url) = start(
        builder()
            .max_concurrent_runs(3)
            .initial_credit_messages(50)
            .initial_credit_bytes(65_536),
    )
    .await;
    let client = Client::connect(&url).await;
    let mut expected = expected_hai_payload();
    expected["capabilities"]["max_concurrent_runs"] = json!(3);
    expected["capabilities"]["flow_control"] =
        json!({"initial_credit_messages": 50, "initial_credit_bytes": 65_536});
    assert_eq!(client.hai["payload"], expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_hai_gets_no_reply_and_string_major_is_compatible() {
    let (_handle, url) = start(demo_builder()).await;
    let mut client = Client::connect(&url).await;
    client
        .request(
            "HAI",
            json!({"haip_version": "1.1.2", "accept_major": ["1"], "accept_events": ["PING", "PONG"]}),
        )
        .await;
    client.ping_marker().await;
    // Tool replies are always delivered, whatever accept_events says (§3.3).
    let done = client
        .call_done("c-1", "echo", json!({"message": "x"}))
        .await;
    assert_eq!(done["status"], "OK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_incompatible_hai_gets_error_then_close_1002() {
    let (_handle, url) = start(demo_builder()).await;
    let mut client = Client::connect(&url).await;
    let id = client
        .request(
            "HAI",
            json!({"haip_version": "2.0.0", "accept_major": [2], "accept_events": ["PING"]}),
        )
        .await;
    let err = client.expect_error().await;
    assert_eq!(
        err["payload"],
        json!({
            "code": "VERSION_INCOMPATIBLE",
            "message": "No common protocol major version",
            "related_id": id,
            "detail": {"supported_major": [1]}
        })
    );
    let (code, reason) = client.expect_close().await;
    assert_eq!(
        (code, reason.as_str()),
        (1002, "version incompatible"),
        "close after VERSION_INCOMPATIBLE"
    );
}

// ----- §6.2 TOOL_LIST, §6.3 TOOL_SCHEMA -----------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_list_has_builtins_then_demo_tools_and_adverts_get_no_reply() {
    let (_handle, url) = start(demo_builder()).await;
    let mut client = Client::connect(&url).await;
    client.request("TOOL_LIST", json!({})).await;
    let env = client.recv().await;
    assert_eq!(
        (env["type"].as_str(), env["channel"].as_str()),
        (Some("TOOL_LIST"), Some("AGENT"))
    );
    // Built-ins first with §7's fixed descriptions, then the demo tools in
    // registration order, each with its own (non-empty) description.
    let mut expected = vec![
        json!({"name": "echo", "description": "Echo back the input"}),
        json!({"name": "add", "description": "Add two numbers"}),
        json!({"name": "weather", "description": "Get weather information"}),
    ];
    for tool in haip_examples::demo::tools() {
        assert!(!tool.description().is_empty(), "{tool:?}");
        expected.push(json!({"name": tool.name(), "description": tool.description()}));
    }
    let names: Vec<&str> = expected
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "echo",
            "add",
            "weather",
            "calculator",
            "process_file",
            "create_user"
        ]
    );
    assert_eq!(env["payload"], json!({ "tools": expected }));

    // A client advertising its own tools (upstream SDK listTools) gets nothing.
    client
        .request(
            "TOOL_LIST",
            json!({"tools": [{"name": "client_tool", "description": "mine"}]}),
        )
        .await;
    client.ping_marker().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_list_omits_empty_descriptions() {
    let bare = Tool::builder("bare")
        .handler(|_: Value, _: Context| async { Ok::<_, ToolError>(Value::Null) })
        .build()
        .unwrap();
    let (_handle, url) = start(builder().builtin_tools().tool(bare)).await;
    let mut client = Client::connect(&url).await;
    client.request("TOOL_LIST", json!({})).await;
    let env = client.recv().await;
    assert_eq!(env["payload"]["tools"][3], json!({"name": "bare"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_schema_replies_and_errors() {
    let (gated, _gate) = gated_tool("gated");
    let (_handle, url) = start(demo_builder().tool(gated)).await;
    let mut client = Client::connect(&url).await;

    client.request("TOOL_SCHEMA", json!({"tool": "echo"})).await;
    let env = client.recv().await;
    assert_eq!(
        (env["type"].as_str(), env["channel"].as_str()),
        (Some("TOOL_SCHEMA"), Some("AGENT"))
    );
    assert_eq!(
        env["payload"],
        json!({
            "tool": "echo",
            "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
            "outputSchema": {"type": "object", "properties": {"echoed": {"type": "string"}}}
        })
    );

    // Built-in add and weather schemas are exactly §7's.
    client.request("TOOL_SCHEMA", json!({"tool": "add"})).await;
    assert_eq!(
        client.recv().await["payload"],
        json!({
            "tool": "add",
            "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
            "outputSchema": {"type": "object", "properties": {"result": {"type": "number"}}}
        })
    );
    client
        .request("TOOL_SCHEMA", json!({"tool": "weather"}))
        .await;
    assert_eq!(
        client.recv().await["payload"],
        json!({
            "tool": "weather",
            "inputSchema": {"type": "object", "properties": {"location": {"type": "string"}}},
            "outputSchema": {"type": "object", "properties": {"temperature": {"type": "string"}, "condition": {"type": "string"}, "location": {"type": "string"}}}
        })
    );

    // A tool without an output schema: no outputSchema key; default input schema.
    client
        .request("TOOL_SCHEMA", json!({"tool": "gated"}))
        .await;
    assert_eq!(
        client.recv().await["payload"],
        json!({"tool": "gated", "inputSchema": {"type": "object"}})
    );

    // Unknown tool.
    let id = client.request("TOOL_SCHEMA", json!({"tool": "nope"})).await;
    let err = client.expect_error().await;
    assert_eq!(
        err["payload"],
        json!({"code": "TOOL_NOT_FOUND", "message": "Tool nope not found", "related_id": id, "detail": {"tool": "nope"}})
    );

    // Missing or non-string tool.
    for payload in [json!({}), json!({"tool": 5})] {
        let id = client.request("TOOL_SCHEMA", payload).await;
        let err = client.expect_error().await;
        assert_eq!(
            err["payload"],
            json!({"code": "INVALID_MESSAGE", "message": "Invalid message format", "related_id": id, "detail": {"reason": "missing tool"}})
        );
    }

    // A client advertising a schema gets nothing.
    client
        .request(
            "TOOL_SCHEMA",
            json!({"tool": "client_tool", "inputSchema": {"type": "object"}}),
        )
        .await;
    client.ping_marker().await;
}

// ----- §7 built-ins and the demo tools --------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_tools_return_the_documented_results() {
    let (_handle, url) = start(demo_builder()).await;
    let mut client = Client::connect(&url).await;

    let done = client
        .call_done("e1", "echo", json!({"message": "Hello, HAIP Server!"}))
        .await;
    assert_eq!(
        done,
        json!({"call_id": "e1", "status": "OK", "result": {"echoed": "Hello, HAIP Server!"}})
    );

    let done = client.call_done("a1", "add", json!({"a": 5, "b": 3})).await;
    assert_eq!(
        done,
        json!({"call_id": "a1", "status": "OK", "result": {"result": 8}})
    );
    assert!(
        done["result"]["result"].is_i64(),
        "integer sum stays an integer: {done}"
    );

    let done = client
        .call_done("a2", "add", json!({"a": 1.5, "b": 2}))
        .await;
    assert_eq!(done["result"], json!({"result": 3.5}));

    let done = client
        .call_done("a3", "add", json!({"a": 1e308, "b": 1e308}))
        .await;
    assert_eq!(done["status"], "ERROR", "{done}");
    assert_eq!(done["result"]["code"], "TOOL_EXECUTION_ERROR", "{done}");
    assert!(
        done["result"]["error"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );

    let done = client
        .call_done("a4", "add", json!({"a": "5", "b": 3}))
        .await;
    assert_eq!(done["result"]["code"], "INVALID_PARAMS", "{done}");
    assert_eq!(done["result"]["details"][0]["path"], "/a");
    assert_eq!(done["result"]["details"].as_array().map(Vec::len), Some(1));

    // Built-in schemas are open: extra params are accepted.
    let done = client
        .call_done("a5", "add", json!({"a": 1, "b": 2, "extra": true}))
        .await;
    assert_eq!(done["result"], json!({"result": 3}));

    for (id, params) in [("e2", json!({})), ("e3", json!({"message": 5}))] {
        let done = client.call_done(id, "echo", params).await;
        assert_eq!(done["result"]["code"], "INVALID_PARAMS", "{done}");
        assert_eq!(done["result"]["error"], "Invalid params for tool echo");
        assert_eq!(done["result"]["details"][0]["path"], "/message");
    }

    client
        .call("w1", "weather", json!({"location": "London"}))
        .await;
    let (raw, env) = client.recv_raw().await;
    assert_eq!(
        env["payload"],
        json!({"call_id": "w1", "status": "OK", "result": {"temperature": "22°C", "condition": "Sunny", "location": "London"}})
    );
    assert!(
        raw.contains("22°C"),
        "non-ASCII must be raw UTF-8 on the wire: {raw}"
    );
    assert!(!raw.contains("\\u"), "no \\u escapes on the wire: {raw}");

    let done = client.call_done("w2", "weather", json!({})).await;
    assert_eq!(
        done["result"],
        json!({"temperature": "22°C", "condition": "Sunny", "location": "Unknown"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_tools_compute_and_validate() {
    let (_handle, url) = start(demo_builder()).await;
    let mut client = Client::connect(&url).await;

    let done = client
        .call_done(
            "k1",
            "calculator",
            json!({"operation": "multiply", "a": 6, "b": 7}),
        )
        .await;
    assert_eq!(done["status"], "OK", "{done}");
    assert_eq!(done["result"]["result"].as_f64(), Some(42.0), "{done}");

    let done = client
        .call_done(
            "k2",
            "calculator",
            json!({"operation": "divide", "a": 1, "b": 0}),
        )
        .await;
    assert_eq!(
        done["result"],
        json!({"error": "Division by zero", "code": "TOOL_EXECUTION_ERROR"})
    );

    let done = client
        .call_done(
            "u1",
            "create_user",
            json!({"username": "ada_l", "email": "ada@example.com", "age": 36}),
        )
        .await;
    assert_eq!(done["status"], "OK", "{done}");
    assert_eq!(done["result"]["created"], true);
    assert!(
        done["result"]["user_id"]
            .as_str()
            .is_some_and(|s| s.starts_with("user_"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_handlers_run_and_their_panics_are_internal_errors() {
    let sum = Tool::builder("blocking_sum")
        .blocking_handler(|params: Value, _ctx: Context| {
            let n = params["n"].as_u64().unwrap_or(0);
            if n == 13 {
                panic!("unlucky blocking panic");
            }
            Ok(json!({ "sum": (1..=n).sum::<u64>() }))
        })
        .build()
        .unwrap();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = std::sync::Mutex::new(release_rx);
    let (held_tx, mut held_rx) = mpsc::unbounded_channel::<()>();
    let hold = Tool::builder("blocking_hold")
        .blocking_handler(move |_: Value, _ctx: Context| {
            let _ = held_tx.send(());
            // Blocks its thread until the test releases it.
            let _ = release_rx.lock().unwrap().recv();
            Ok(json!("released"))
        })
        .build()
        .unwrap();
    let (_handle, url) = start(builder().tool(sum).tool(hold)).await;
    let mut client = Client::connect(&url).await;
    let done = client
        .call_done("b1", "blocking_sum", json!({"n": 100}))
        .await;
    assert_eq!(done["result"], json!({"sum": 5050}));

    // A running (blocking) tool never delays the session's other traffic.
    client.call("h1", "blocking_hold", json!({})).await;
    within("the blocking tool to start", held_rx.recv()).await;
    client.ping_marker().await;
    let done = client
        .call_done("b3", "blocking_sum", json!({"n": 3}))
        .await;
    assert_eq!(done["result"], json!({"sum": 6}));
    release_tx.send(()).unwrap();
    assert_eq!(client.expect_done("h1").await["result"], "released");
    client.call("b2", "blocking_sum", json!({"n": 13})).await;
    let (raw, env) = client.recv_raw().await;
    assert_eq!(
        env["payload"]["result"],
        json!({"error": "Internal error in tool blocking_sum", "code": "INTERNAL_ERROR"})
    );
    assert!(!raw.contains("unlucky"), "panic text leaked: {raw}");
}

// ----- §6.4 call outcomes ------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_or_missing_tool_gets_error_then_tool_done() {
    let (_handle, url) = start(demo_builder()).await;
    let mut client = Client::connect(&url).await;

    let id = client.call("c-2", "nope", json!({})).await;
    let err = client.expect_error().await;
    assert_eq!(
        err["payload"],
        json!({"code": "TOOL_NOT_FOUND", "message": "Tool nope not found", "related_id": id, "detail": {"call_id": "c-2", "tool": "nope"}})
    );
    let done = client.expect_done("c-2").await;
    assert_eq!(
        done,
        json!({"call_id": "c-2", "status": "ERROR", "result": {"error": "Tool nope not found", "code": "TOOL_NOT_FOUND"}})
    );

    let id = client
        .request("TOOL_CALL", json!({"call_id": "c-3", "params": {}}))
        .await;
    let err = client.expect_error().await;
    assert_eq!(
        err["payload"],
        json!({"code": "TOOL_NOT_FOUND", "message": "Tool name missing", "related_id": id, "detail": {"call_id": "c-3", "tool": null}})
    );
    let done = client.expect_done("c-3").await;
    assert_eq!(
        done["result"],
        json!({"error": "Tool name missing", "code": "TOOL_NOT_FOUND"})
    );
    client.ping_marker().await;
}

/// A tool with a closed schema that counts its runs.
fn counted_tool(runs: Arc<AtomicUsize>) -> Tool {
    Tool::builder("counted")
        .description("Counts its runs")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 0},
                "tag": {"type": "string", "maxLength": 3}
            },
            "required": ["n", "tag"],
            "additionalProperties": false
        }))
        .handler(move |params: Value, _ctx: Context| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, ToolError>(json!({ "n": params["n"] })) }
        })
        .build()
        .unwrap()
}

fn detail_paths(done: &Value) -> Vec<String> {
    done["result"]["details"]
        .as_array()
        .unwrap_or_else(|| panic!("no details array: {done}"))
        .iter()
        .map(|d| {
            assert!(
                d["message"].as_str().is_some_and(|m| !m.is_empty()),
                "each violation has a message: {d}"
            );
            assert_eq!(
                d.as_object().map(|o| o.len()),
                Some(2),
                "only path and message: {d}"
            );
            d["path"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_params_list_every_violation_and_the_tool_does_not_run() {
    let runs = Arc::new(AtomicUsize::new(0));
    let (_handle, url) = start(demo_builder().tool(counted_tool(Arc::clone(&runs)))).await;
    let mut client = Client::connect(&url).await;

    let done = client.call_done("p1", "add", json!({"a": "5"})).await;
    assert_eq!(done["status"], "ERROR");
    assert_eq!(done["result"]["code"], "INVALID_PARAMS");
    assert_eq!(done["result"]["error"], "Invalid params for tool add");
    assert_eq!(detail_paths(&done), ["/a", "/b"]);

    let done = client
        .call_done(
            "p2",
            "create_user",
            json!({"username": "a!", "email": "not-an-email", "age": 5, "extra": 1}),
        )
        .await;
    assert_eq!(done["result"]["code"], "INVALID_PARAMS", "{done}");
    assert_eq!(
        done["result"]["error"],
        "Invalid params for tool create_user"
    );
    // "a!" is both too short and off-pattern: two entries for /username.
    assert_eq!(
        detail_paths(&done),
        ["/age", "/email", "/extra", "/username", "/username"],
        "{done}"
    );

    let done = client
        .call_done(
            "p3",
            "counted",
            json!({"n": -1, "tag": "toolong", "x": 1, "y": 2}),
        )
        .await;
    assert_eq!(done["result"]["code"], "INVALID_PARAMS", "{done}");
    assert_eq!(detail_paths(&done), ["/n", "/tag", "/x", "/y"]);
    let done = client
        .call_done("p4", "counted", json!("not an object"))
        .await;
    assert_eq!(detail_paths(&done), [""], "{done}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "an invalid call never runs");

    let done = client
        .call_done("p5", "counted", json!({"n": 3, "tag": "ok"}))
        .await;
    assert_eq!(done["result"], json!({"n": 3}));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_gets_errors_and_the_session_keeps_working() {
    let (_handle, url) = start(demo_builder()).await;
    let mut client = Client::connect(&url).await;

    let invalid = |reason: &str| json!({"code": "INVALID_MESSAGE", "message": "Invalid message format", "detail": {"reason": reason}});

    client.send_text("{not json").await;
    assert_eq!(
        client.expect_error().await["payload"],
        invalid("invalid JSON")
    );
    client.send_text("[1,2,3]").await;
    assert_eq!(
        client.expect_error().await["payload"],
        invalid("not an object")
    );
    client.send_text("\"PING\"").await;
    assert_eq!(
        client.expect_error().await["payload"],
        invalid("not an object")
    );

    client
        .send(&json!({"id": "m1", "payload": {"nonce": "x"}}))
        .await;
    let mut expected = invalid("missing type");
    expected["related_id"] = json!("m1");
    assert_eq!(client.expect_error().await["payload"], expected);

    client
        .send(&json!({"id": "m2", "type": "PING", "payload": [1]}))
        .await;
    let mut expected = invalid("payload must be an object");
    expected["related_id"] = json!("m2");
    assert_eq!(client.expect_error().await["payload"], expected);
    client.send(&json!({"type": "PING", "payload": null})).await;
    assert_eq!(
        client.expect_error().await["payload"],
        invalid("payload must be an object")
    );

    client
        .send(&json!({"id": "m3", "type": "MESSAGE", "payload": {"content": "hi"}}))
        .await;
    assert_eq!(
        client.expect_error().await["payload"],
        json!({"code": "UNSUPPORTED_TYPE", "message": "Unknown message type: MESSAGE", "related_id": "m3", "detail": {"type": "MESSAGE"}})
    );
    // Case-sensitive type names.
    client.send(&json!({"type": "ping", "payload": {}})).await;
    assert_eq!(
        client.expect_error().await["payload"]["code"],
        "UNSUPPORTED_TYPE"
    );

    // Inbound traffic the server does not act on is silent (§5, §6.8, §9).
    for (ty, payload) in [
        ("PONG", json!({"nonce": "x"})),
        ("ERROR", json!({"code": "X", "message": "client error"})),
        ("TOOL_UPDATE", json!({"call_id": "z", "status": "RUNNING"})),
        ("TOOL_DONE", json!({"call_id": "z", "status": "OK"})),
        ("TEXT_MESSAGE_START", json!({"content": "no message_id"})),
    ] {
        client.request(ty, payload).await;
    }
    client.ping_marker().await;

    let done = client
        .call_done("ok", "echo", json!({"message": "still alive"}))
        .await;
    assert_eq!(done["result"], json!({"echoed": "still alive"}));
}

// ----- §9 heartbeat ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_gets_pong_with_the_same_nonce() {
    let (_handle, url) = start(builder()).await;
    let mut client = Client::connect(&url).await;
    client.request("PING", json!({"nonce": "n-1"})).await;
    let pong = client.recv().await;
    assert_eq!(
        (pong["type"].as_str(), pong["channel"].as_str()),
        (Some("PONG"), Some("SYSTEM"))
    );
    assert_eq!(pong["payload"], json!({"nonce": "n-1"}));

    client.request("PING", json!({})).await;
    assert_eq!(client.recv().await["payload"], json!({}));

    // The nonce is copied unchanged, whatever it is.
    client
        .request("PING", json!({"nonce": 5, "other": "dropped"}))
        .await;
    assert_eq!(client.recv().await["payload"], json!({"nonce": 5}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_pings_unless_the_client_filters_them() {
    let interval = Duration::from_millis(200);
    let (_handle, url) = start(builder().heartbeat_interval(interval)).await;

    // No client HAI: every event accepted, so heartbeat PINGs arrive.
    let mut pinged = Client::connect(&url).await;
    let mut nonces = HashSet::new();
    for _ in 0..2 {
        let ping = pinged.recv().await;
        assert_eq!(
            (ping["type"].as_str(), ping["channel"].as_str()),
            (Some("PING"), Some("SYSTEM")),
            "{ping}"
        );
        let payload = ping["payload"].as_object().unwrap();
        assert_eq!(payload.len(), 1, "{ping}");
        let nonce = payload["nonce"].as_str().unwrap();
        assert!(is_uuid_v4(nonce), "{ping}");
        nonces.insert(nonce.to_owned());
    }
    assert_eq!(nonces.len(), 2, "a new nonce per PING");

    // accept_events without PING: no heartbeat after the HAI is processed. The
    // PONG marker proves the HAI was handled; a PING before it is allowed.
    let mut filtered = Client::connect(&url).await;
    filtered
        .request(
            "HAI",
            json!({"haip_version": "1.1.2", "accept_major": [1], "accept_events": ["PONG"]}),
        )
        .await;
    filtered.request("PING", json!({"nonce": "marker"})).await;
    let (pong, _early_pings) = filtered.recv_until(|env| env["type"] == "PONG").await;
    assert_eq!(pong["payload"], json!({"nonce": "marker"}));
    // Bounded negative wait: three heartbeat intervals without any envelope.
    let quiet = tokio::time::timeout(interval * 3, filtered.recv_raw()).await;
    assert!(
        quiet.is_err(),
        "no heartbeat PING may reach a client whose accept_events lacks PING: {:?}",
        quiet.map(|(raw, _)| raw)
    );
}

// ----- §6.5 progress ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_file_reports_progress_then_done() {
    let (_handle, url) = start(demo_builder()).await;
    let mut client = Client::connect(&url).await;
    client
        .call(
            "f1",
            "process_file",
            json!({"filename": "data.csv", "operation": "analyze"}),
        )
        .await;
    for expected in [0, 20, 40, 60, 80, 100] {
        let update = client.expect_update("f1").await;
        assert_eq!(
            update,
            json!({"call_id": "f1", "status": "RUNNING", "progress": expected})
        );
        assert!(
            update["progress"].is_u64(),
            "progress stays an integer: {update}"
        );
    }
    let done = client.expect_done("f1").await;
    assert_eq!(
        done,
        json!({"call_id": "f1", "status": "OK", "result": {"processed": true, "lines": 150}})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_is_clamped_and_carries_partial() {
    let tool = Tool::builder("reporter")
        .handler(|_: Value, ctx: Context| async move {
            ctx.progress(f64::NAN); // discarded
            ctx.progress_with(12.5, json!({"rows": 1}));
            Ok::<_, ToolError>(Value::Null)
        })
        .build()
        .unwrap();
    let clamp = Tool::builder("clamp")
        .handler(|_: Value, ctx: Context| async move {
            ctx.progress(250.0);
            Ok::<_, ToolError>(json!("done"))
        })
        .build()
        .unwrap();
    let (_handle, url) = start(builder().tool(tool).tool(clamp)).await;
    let mut client = Client::connect(&url).await;
    client.call("r1", "reporter", json!({})).await;
    assert_eq!(
        client.expect_update("r1").await,
        json!({"call_id": "r1", "status": "RUNNING", "progress": 12.5, "partial": {"rows": 1}})
    );
    // A null result is omitted.
    assert_eq!(
        client.expect_done("r1").await,
        json!({"call_id": "r1", "status": "OK"})
    );
    client.call("r2", "clamp", json!({})).await;
    assert_eq!(client.expect_update("r2").await["progress"], json!(100));
    assert_eq!(client.expect_done("r2").await["result"], "done");
}

// ----- §6.7 cancellation --------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_run_sends_cancelling_then_cancelled_with_reason() {
    let (gated, mut gate) = gated_tool("gated");
    let (_handle, url) = start(demo_builder().tool(gated)).await;
    let mut client = Client::connect(&url).await;

    client.call("g1", "gated", json!({})).await;
    assert_eq!(gate.started().await, "g1");
    client
        .request(
            "TOOL_CANCEL",
            json!({"call_id": "g1", "reason": "user closed panel"}),
        )
        .await;
    assert_eq!(
        client.expect_update("g1").await,
        json!({"call_id": "g1", "status": "CANCELLING"})
    );
    assert_eq!(gate.cancelled().await, "g1", "the tool saw ctx.cancelled()");
    // The tool's late progress report and its return value are discarded.
    assert_eq!(
        client.expect_done("g1").await,
        json!({"call_id": "g1", "status": "CANCELLED", "result": {"reason": "user closed panel"}})
    );
    client.ping_marker().await;

    // Without a reason: no result.
    client.call("g2", "gated", json!({})).await;
    assert_eq!(gate.started().await, "g2");
    client
        .request("TOOL_CANCEL", json!({"call_id": "g2"}))
        .await;
    assert_eq!(client.expect_update("g2").await["status"], "CANCELLING");
    assert_eq!(
        client.expect_done("g2").await,
        json!({"call_id": "g2", "status": "CANCELLED"})
    );

    // Unknown, finished, missing or non-string call ids are ignored silently.
    for payload in [
        json!({"call_id": "never-existed", "reason": "x"}),
        json!({"call_id": "g1"}),
        json!({}),
        json!({"call_id": 5}),
    ] {
        client.request("TOOL_CANCEL", payload).await;
    }
    client.ping_marker().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_call_twice_is_ignored() {
    let (gated, mut gate) = gated_tool("gated");
    let (_handle, url) = start(builder().tool(gated)).await;
    let mut client = Client::connect(&url).await;
    client.call("g1", "gated", json!({})).await;
    gate.started().await;
    client
        .request("TOOL_CANCEL", json!({"call_id": "g1", "reason": "first"}))
        .await;
    client
        .request("TOOL_CANCEL", json!({"call_id": "g1", "reason": "second"}))
        .await;
    assert_eq!(client.expect_update("g1").await["status"], "CANCELLING");
    assert_eq!(
        client.expect_done("g1").await["result"],
        json!({"reason": "first"})
    );
    client.ping_marker().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_ignoring_cancellation_is_aborted_after_the_grace_period() {
    let grace = Duration::from_millis(200);
    let (started_tx, mut started_rx) = mpsc::unbounded_channel::<()>();
    let (dropped_tx, mut dropped_rx) = mpsc::unbounded_channel::<()>();
    let stubborn = Tool::builder("stubborn")
        .handler(move |_: Value, _ctx: Context| {
            let started = started_tx.clone();
            let guard = DropGuard(dropped_tx.clone());
            async move {
                let _guard = guard;
                let _ = started.send(());
                let mut ticks = 0u64;
                // Never looks at ctx: only an abort stops this.
                loop {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    ticks += 1;
                    if ticks == u64::MAX {
                        break;
                    }
                }
                Ok::<_, ToolError>(json!({ "ticks": ticks }))
            }
        })
        .build()
        .unwrap();
    let (_handle, url) = start(builder().cancel_grace(grace).tool(stubborn)).await;
    let mut client = Client::connect(&url).await;
    client.call("s1", "stubborn", json!({})).await;
    within("the stubborn tool to start", started_rx.recv()).await;

    let sent = Instant::now();
    client
        .request("TOOL_CANCEL", json!({"call_id": "s1", "reason": "stop"}))
        .await;
    assert_eq!(client.expect_update("s1").await["status"], "CANCELLING");
    let done = client.expect_done("s1").await;
    let elapsed = sent.elapsed();
    assert_eq!(
        done,
        json!({"call_id": "s1", "status": "CANCELLED", "result": {"reason": "stop"}})
    );
    assert!(
        elapsed >= grace - Duration::from_millis(10),
        "TOOL_DONE came after {elapsed:?}, before the {grace:?} grace period"
    );
    assert!(
        elapsed < Duration::from_secs(3),
        "TOOL_DONE took {elapsed:?}"
    );
    // The future was dropped before its TOOL_DONE was issued.
    assert!(
        dropped_rx.try_recv().is_ok(),
        "the stubborn tool's future must be dropped (aborted) by the time TOOL_DONE arrives"
    );
    client.ping_marker().await;
}

// ----- §6.6 panics and timeouts -----------------------------------------------------------------

fn panicking_tool() -> Tool {
    Tool::builder("boom")
        .handler(|_: Value, _: Context| async move {
            if std::hint::black_box(true) {
                panic!("secret panic text 42");
            }
            Ok::<_, ToolError>(Value::Null)
        })
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_tool_ends_with_internal_error_without_leaking_the_panic() {
    let (_handle, url) = start(demo_builder().tool(panicking_tool())).await;
    let mut client = Client::connect(&url).await;
    client.call("p1", "boom", json!({})).await;
    let (raw, env) = client.recv_raw().await;
    assert_eq!(
        env["payload"],
        json!({"call_id": "p1", "status": "ERROR", "result": {"error": "Internal error in tool boom", "code": "INTERNAL_ERROR"}})
    );
    assert!(!raw.contains("secret"), "panic text on the wire: {raw}");
    // The session and the server survive.
    let done = client
        .call_done("e1", "echo", json!({"message": "after"}))
        .await;
    assert_eq!(done["status"], "OK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_errors_puts_the_panic_text_in_the_message() {
    let (_handle, url) = start(builder().debug_errors(true).tool(panicking_tool())).await;
    let mut client = Client::connect(&url).await;
    let done = client.call_done("p1", "boom", json!({})).await;
    assert_eq!(
        done["result"],
        json!({"error": "Tool boom panicked: secret panic text 42", "code": "INTERNAL_ERROR"})
    );
}

/// A tool that would take 30 s but stops (and says so) when cancelled.
fn slow_tool(
    name: &str,
    timeout: Option<Duration>,
    saw_cancel: mpsc::UnboundedSender<String>,
) -> Tool {
    let mut b = Tool::builder(name);
    if let Some(t) = timeout {
        b = b.timeout(t);
    }
    b.handler(move |_: Value, ctx: Context| {
        let saw_cancel = saw_cancel.clone();
        async move {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(30)) => Ok::<_, ToolError>(json!("finished")),
                () = ctx.cancelled() => {
                    let _ = saw_cancel.send(ctx.call_id().to_owned());
                    Ok(json!("late"))
                }
            }
        }
    })
    .build()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_ends_the_call_with_timeout_and_no_cancelling() {
    let (tx, mut saw_cancel) = mpsc::unbounded_channel();
    let (_handle, url) = start(
        builder()
            .tool_timeout(Duration::from_millis(150))
            .tool(slow_tool(
                "slow",
                Some(Duration::from_millis(100)),
                tx.clone(),
            ))
            .tool(slow_tool("slow2", None, tx)),
    )
    .await;
    let mut client = Client::connect(&url).await;

    let sent = Instant::now();
    client.call("t1", "slow", json!({})).await;
    // The very next envelope is the TOOL_DONE: no CANCELLING before it.
    let done = client.expect_done("t1").await;
    assert!(
        sent.elapsed() >= Duration::from_millis(100),
        "timed out early"
    );
    assert_eq!(
        done,
        json!({"call_id": "t1", "status": "ERROR", "result": {"error": "Tool slow timed out after 100 ms", "code": "TIMEOUT"}})
    );
    assert_eq!(
        within("the tool to see the cancellation", saw_cancel.recv()).await,
        Some("t1".to_owned()),
        "a timed-out tool is signalled to stop"
    );
    // Its late return value is discarded: nothing more for t1.
    client.ping_marker().await;

    // The server-wide tool_timeout applies to tools without their own.
    let done = client.call_done("t2", "slow2", json!({})).await;
    assert_eq!(
        done["result"],
        json!({"error": "Tool slow2 timed out after 150 ms", "code": "TIMEOUT"})
    );
}

// ----- §6.4 duplicates, §6.9 correlation ----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_active_call_id_is_rejected_and_reusable_after_done() {
    let (gated, mut gate) = gated_tool("gated");
    let (_handle, url) = start(demo_builder().tool(gated)).await;
    let mut client = Client::connect(&url).await;

    client.call("dup", "gated", json!({})).await;
    assert_eq!(gate.started().await, "dup");
    let id = client
        .call("dup", "echo", json!({"message": "again"}))
        .await;
    let err = client.expect_error().await;
    assert_eq!(
        err["payload"],
        json!({"code": "INVALID_MESSAGE", "message": "Duplicate call_id", "related_id": id, "detail": {"call_id": "dup", "reason": "duplicate call_id"}})
    );
    client.ping_marker().await;

    gate.open(1);
    assert_eq!(
        client.expect_done("dup").await,
        json!({"call_id": "dup", "status": "OK", "result": {"released": "dup"}})
    );
    // Exactly one TOOL_DONE: nothing for the rejected duplicate.
    client.ping_marker().await;
    assert_eq!(gate.runs(), 1);

    // A finished call's id may be reused.
    let done = client
        .call_done("dup", "echo", json!({"message": "reused"}))
        .await;
    assert_eq!(done["result"], json!({"echoed": "reused"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_id_defaults_params_null_and_run_ids_are_copied() {
    let (_handle, url) = start(demo_builder()).await;
    let mut client = Client::connect(&url).await;

    // No call_id: the envelope id is the call id.
    client
        .send(&json!({"id": "env-77", "type": "TOOL_CALL", "payload": {"tool": "echo", "params": {"message": "m"}}}))
        .await;
    assert_eq!(client.expect_done("env-77").await["status"], "OK");
    // A numeric call_id becomes its decimal text; a numeric envelope id too.
    client
        .send(&json!({"id": "e1", "type": "TOOL_CALL", "payload": {"call_id": 42, "tool": "weather"}}))
        .await;
    assert_eq!(client.expect_done("42").await["status"], "OK");
    client
        .send(&json!({"id": 1234, "type": "TOOL_CALL", "payload": {"tool": "weather"}}))
        .await;
    assert_eq!(client.expect_done("1234").await["status"], "OK");
    // Neither: a fresh UUID.
    client
        .send(
            &json!({"type": "TOOL_CALL", "payload": {"tool": "echo", "params": {"message": "m"}}}),
        )
        .await;
    let env = client.recv().await;
    assert_eq!(env["type"], "TOOL_DONE");
    assert!(
        is_uuid_v4(env["payload"]["call_id"].as_str().unwrap_or_default()),
        "{env}"
    );

    // params null or absent ⇒ {}.
    for payload in [
        json!({"call_id": "n1", "tool": "weather", "params": null}),
        json!({"call_id": "n2", "tool": "weather"}),
    ] {
        let call_id = payload["call_id"].as_str().unwrap().to_owned();
        client.request("TOOL_CALL", payload).await;
        assert_eq!(
            client.expect_done(&call_id).await["result"]["location"],
            "Unknown"
        );
    }
    // params null on a tool with required params fails validation against {}.
    client
        .request(
            "TOOL_CALL",
            json!({"call_id": "n3", "tool": "echo", "params": null}),
        )
        .await;
    let done = client.expect_done("n3").await;
    assert_eq!(done["result"]["details"][0]["path"], "/message");

    // The envelope run_id/thread_id are copied onto every envelope about the call.
    client
        .send(
            &json!({"id": "r-1", "run_id": "run-1", "thread_id": "th-1", "type": "TOOL_CALL",
                      "payload": {"call_id": "rc1", "tool": "echo", "params": {"message": "m"}}}),
        )
        .await;
    let env = client.recv().await;
    assert_eq!(
        (env["type"].as_str(), env["payload"]["call_id"].as_str()),
        (Some("TOOL_DONE"), Some("rc1"))
    );
    assert_eq!(
        (env["run_id"].as_str(), env["thread_id"].as_str()),
        (Some("run-1"), Some("th-1")),
        "{env}"
    );
    // payload.run_id (upstream CLI) counts too.
    client
        .send(&json!({"id": "r-2", "type": "TOOL_CALL",
                      "payload": {"call_id": "rc2", "tool": "echo", "run_id": "run-2", "params": {"message": "m"}}}))
        .await;
    let env = client.recv().await;
    assert_eq!(env["run_id"], "run-2", "{env}");
    // ...including the ERROR of an unknown tool.
    client
        .send(&json!({"id": "r-3", "run_id": "run-3", "type": "TOOL_CALL",
                      "payload": {"call_id": "rc3", "tool": "nope"}}))
        .await;
    let err = client.expect_error().await;
    assert_eq!(err["run_id"], "run-3", "{err}");
    let env = client.recv().await;
    assert_eq!(
        (env["type"].as_str(), env["run_id"].as_str()),
        (Some("TOOL_DONE"), Some("run-3")),
        "{env}"
    );
    // Replies not about a call carry no run id.
    client
        .send(&json!({"id": "r-4", "run_id": "run-4", "type": "PING", "payload": {"nonce": "p"}}))
        .await;
    let pong = client.recv().await;
    assert_eq!(pong["type"], "PONG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_are_accepted_on_any_channel() {
    let (_handle, url) = start(demo_builder()).await;
    let mut client = Client::connect(&url).await;
    for (i, channel) in ["USER", "AGENT", "SYSTEM", "custom-1", "bad channel!"]
        .iter()
        .enumerate()
    {
        let call_id = format!("ch{i}");
        client
            .send(&json!({"id": call_id, "channel": channel, "type": "TOOL_CALL",
                          "payload": {"call_id": call_id, "tool": "add", "params": {"a": i, "b": 1}}}))
            .await;
        let done = client.expect_done(&call_id).await;
        assert_eq!(done["result"]["result"], json!(i + 1), "{done}");
    }
}

// ----- §6.1 live registry ------------------------------------------------------------------

fn versioned_tool(description: &str, version: u32) -> Tool {
    Tool::builder("dynamic")
        .description(description)
        .handler(move |_: Value, _: Context| async move {
            Ok::<_, ToolError>(json!({ "version": version }))
        })
        .build()
        .unwrap()
}

async fn listed(client: &mut Client) -> Vec<(String, String)> {
    client.request("TOOL_LIST", json!({})).await;
    let env = client.recv().await;
    assert_eq!(env["type"], "TOOL_LIST", "{env}");
    env["payload"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_owned(),
                t["description"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_registered_replaced_and_unregistered_while_connected() {
    let (handle, url) = start(demo_builder()).await;
    let mut client = Client::connect(&url).await;
    let before = listed(&mut client).await;
    assert_eq!(before.len(), 6);

    assert!(
        handle
            .register_tool(versioned_tool("First version", 1))
            .expect("registering a stateless tool succeeds")
            .is_none()
    );
    let names: Vec<String> = handle.tools().iter().map(|t| t.name().to_owned()).collect();
    assert_eq!(
        names,
        [
            "echo",
            "add",
            "weather",
            "calculator",
            "process_file",
            "create_user",
            "dynamic"
        ]
    );
    let after = listed(&mut client).await;
    assert_eq!(after[..6], before[..]);
    assert_eq!(after[6], ("dynamic".to_owned(), "First version".to_owned()));
    let done = client.call_done("d1", "dynamic", json!({})).await;
    assert_eq!(done["result"], json!({"version": 1}));

    // Replacing keeps the position.
    let replaced = handle
        .register_tool(versioned_tool("Second version", 2))
        .expect("replacing a stateless tool succeeds");
    assert_eq!(
        replaced.map(|t| t.description().to_owned()),
        Some("First version".to_owned())
    );
    let list = listed(&mut client).await;
    assert_eq!(list.len(), 7);
    assert_eq!(list[6], ("dynamic".to_owned(), "Second version".to_owned()));
    let done = client.call_done("d2", "dynamic", json!({})).await;
    assert_eq!(done["result"], json!({"version": 2}));

    // A second connection sees the same registry.
    let mut other = Client::connect(&url).await;
    assert_eq!(listed(&mut other).await, list);

    assert_eq!(
        handle
            .unregister_tool("dynamic")
            .map(|t| t.name().to_owned()),
        Some("dynamic".to_owned())
    );
    assert!(handle.unregister_tool("dynamic").is_none());
    assert_eq!(listed(&mut client).await, before);
    let id = client.call("d3", "dynamic", json!({})).await;
    let err = client.expect_error().await;
    assert_eq!(err["payload"]["code"], "TOOL_NOT_FOUND");
    assert_eq!(err["payload"]["related_id"], id);
    let done = client.expect_done("d3").await;
    assert_eq!(done["result"]["code"], "TOOL_NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unregistering_a_tool_does_not_affect_its_running_call() {
    let (gated, mut gate) = gated_tool("gated");
    let (handle, url) = start(builder().tool(gated)).await;
    let mut client = Client::connect(&url).await;
    client.call("g1", "gated", json!({})).await;
    gate.started().await;
    assert!(handle.unregister_tool("gated").is_some());
    gate.open(1);
    assert_eq!(
        client.expect_done("g1").await["result"],
        json!({"released": "g1"})
    );
}

// ----- §16 HTTP side endpoints -------------------------------------------------------------

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    k.sort_unstable();
    k
}

fn is_iso8601_millis(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 24
        && b.iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b'-',
            10 => c == b'T',
            13 | 16 => c == b':',
            19 => c == b'.',
            23 => c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

fn executions(stats: &Value) -> [u64; 5] {
    let t = &stats["toolExecutions"];
    let get = |k: &str| {
        t[k].as_u64()
            .unwrap_or_else(|| panic!("toolExecutions.{k} is not an integer: {stats}"))
    };
    let [total, ok, failed, cancelled, active] =
        ["total", "successful", "failed", "cancelled", "active"].map(get);
    assert_eq!(
        total,
        ok + failed + cancelled + active,
        "total = successful + failed + cancelled + active: {stats}"
    );
    [total, ok, failed, cancelled, active]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_stats_report_live_counters() {
    let (gated, mut gate) = gated_tool("gated");
    let (handle, url) = start(demo_builder().tool(gated)).await;
    let addr = handle.local_addr();

    let response = http_get(addr, "/health").await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("access-control-allow-origin"), Some("*"));
    let health = response.json();
    assert_eq!(
        keys(&health),
        [
            "activeConnections",
            "errors",
            "status",
            "timestamp",
            "totalConnections",
            "uptime",
            "version",
            "warnings"
        ]
    );
    assert_eq!(health["status"], "ok");
    assert_eq!(health["version"], "1.1.2");
    assert!(health["uptime"].is_u64(), "{health}");
    assert!(
        is_iso8601_millis(health["timestamp"].as_str().unwrap_or_default()),
        "{health}"
    );
    assert_eq!(
        (&health["activeConnections"], &health["totalConnections"]),
        (&json!(0), &json!(0))
    );
    assert_eq!(
        (&health["errors"], &health["warnings"]),
        (&json!(0), &json!(0))
    );

    let stats = get_json(addr, "/stats").await;
    assert_eq!(executions(&stats), [0, 0, 0, 0, 0]);
    assert_eq!(stats["totalMessages"], 0);
    assert_eq!(stats["averageLatency"].as_f64(), Some(0.0));
    assert_eq!(stats["errorRate"].as_f64(), Some(0.0));

    // The session counts as soon as the client sees the socket open.
    let mut client = Client::connect(&url).await;
    let stats = get_json(addr, "/stats").await;
    assert_eq!(
        (&stats["activeConnections"], &stats["totalConnections"]),
        (&json!(1), &json!(1)),
        "{stats}"
    );

    // 2 OK, 2 failed (one of them with an ERROR envelope), 1 cancelled, 1 active.
    assert_eq!(
        client
            .call_done("s1", "echo", json!({"message": "x"}))
            .await["status"],
        "OK"
    );
    assert_eq!(
        client.call_done("s2", "weather", json!({})).await["status"],
        "OK"
    );
    assert_eq!(
        client
            .call_done("s3", "add", json!({"a": 1e308, "b": 1e308}))
            .await["status"],
        "ERROR"
    );
    client.call("s4", "nope", json!({})).await;
    client.expect_error().await;
    client.expect_done("s4").await;
    client.call("s5", "gated", json!({})).await;
    gate.started().await;
    client
        .request("TOOL_CANCEL", json!({"call_id": "s5"}))
        .await;
    client.expect_update("s5").await;
    assert_eq!(client.expect_done("s5").await["status"], "CANCELLED");
    client.call("s6", "gated", json!({})).await;
    gate.started().await;
    client.send_text("{not json").await; // an ERROR, but not a message
    client.expect_error().await;

    let stats = get_json(addr, "/stats").await;
    assert_eq!(
        keys(&stats),
        [
            "activeConnections",
            "averageLatency",
            "errorRate",
            "memoryUsage",
            "messagesPerSecond",
            "toolExecutions",
            "totalConnections",
            "totalMessages",
            "uptime"
        ],
        "{stats}"
    );
    assert_eq!(executions(&stats), [6, 2, 2, 1, 1], "{stats}");
    assert_eq!(
        keys(&stats["toolExecutions"]),
        ["active", "cancelled", "failed", "successful", "total"]
    );
    // Six calls and one cancel passed step 3; the malformed text did not.
    assert_eq!(stats["totalMessages"], 7, "{stats}");
    let error_rate = stats["errorRate"].as_f64().unwrap();
    assert!((error_rate - 2.0 / 7.0).abs() < 1e-9, "{stats}");
    assert!(stats["averageLatency"].as_f64().unwrap() > 0.0, "{stats}");
    assert!(stats["messagesPerSecond"].as_f64().is_some(), "{stats}");
    assert!(stats["uptime"].is_u64(), "{stats}");
    assert!(stats["memoryUsage"]["rss"].as_u64().unwrap() > 0, "{stats}");
    let health = get_json(addr, "/health").await;
    assert_eq!(health["errors"], 2, "ERROR envelopes sent: {health}");

    // A second socket is counted, and uncounted once it closes.
    let other = Client::connect(&url).await;
    let stats = get_json(addr, "/stats").await;
    assert_eq!(
        (&stats["activeConnections"], &stats["totalConnections"]),
        (&json!(2), &json!(2))
    );
    other.close().await;
    stats_until(addr, "activeConnections back to 1", |s| {
        s["activeConnections"] == 1
    })
    .await;

    gate.open(1);
    assert_eq!(client.expect_done("s6").await["status"], "OK");
    let stats = get_json(addr, "/stats").await;
    assert_eq!(executions(&stats), [6, 3, 2, 1, 0], "{stats}");

    // Unknown routes are 404 JSON.
    let response = http_get(addr, "/nope").await;
    assert_eq!(response.status, 404);
    assert_eq!(
        response.json(),
        json!({"error": "Not found", "code": "NOT_FOUND"})
    );
}

// ----- more §2, §5, §6, §9, §13, §15 wire details ----------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crit_rejects_unknown_fields_and_ids_are_echoed_loosely() {
    let (_handle, url) = start(builder()).await;
    let mut client = Client::connect(&url).await;

    client
        .send(&json!({"id": "k1", "type": "PING", "crit": true, "x": 1,
                      "payload": {"nonce": "n", "content": 2}}))
        .await;
    let err = client.expect_error().await;
    let mut fields: Vec<&str> = err["payload"]["detail"]["fields"]
        .as_array()
        .unwrap_or_else(|| panic!("detail.fields: {err}"))
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    fields.sort_unstable();
    assert_eq!(fields, ["payload.content", "x"], "{err}");
    assert_eq!(
        (
            &err["payload"]["code"],
            &err["payload"]["message"],
            &err["payload"]["related_id"]
        ),
        (
            &json!("UNSUPPORTED_TYPE"),
            &json!("Unknown critical fields"),
            &json!("k1")
        )
    );
    // Only known fields: processed normally.
    client
        .send(
            &json!({"id": "k2", "type": "PING", "crit": true, "ack": "1", "seq": 3,
                      "payload": {"nonce": "fine"}}),
        )
        .await;
    assert_eq!(client.recv().await["payload"], json!({"nonce": "fine"}));

    // A numeric id is echoed as its decimal text; other id types give no related_id.
    client
        .send(&json!({"id": 7, "type": "MESSAGE", "payload": {}}))
        .await;
    assert_eq!(client.expect_error().await["payload"]["related_id"], "7");
    client
        .send(&json!({"id": {"a": 1}, "type": "MESSAGE", "payload": {}}))
        .await;
    let err = client.expect_error().await;
    assert!(err["payload"].get("related_id").is_none(), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_ping_frames_get_pong_frames_while_a_tool_runs() {
    let (gated, mut gate) = gated_tool("gated");
    let (_handle, url) = start(builder().tool(gated)).await;
    let mut client = Client::connect(&url).await;
    client.call("g1", "gated", json!({})).await;
    gate.started().await;

    client
        .ws
        .send(tungstenite::Message::Ping(b"are you there".to_vec().into()))
        .await
        .expect("send a ping frame");
    match within("the pong frame", client.ws.next()).await {
        Some(Ok(tungstenite::Message::Pong(data))) => assert_eq!(&data[..], b"are you there"),
        other => panic!("expected a pong frame, got {other:?}"),
    }
    client.ping_marker().await;
    gate.open(1);
    assert_eq!(client.expect_done("g1").await["status"], "OK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_json_envelopes_are_handled_like_text() {
    let (_handle, url) = start(builder()).await;
    let mut client = Client::connect(&url).await;
    let ping = json!({"id": "b1", "type": "PING", "payload": {"nonce": "bin"}}).to_string();
    client
        .ws
        .send(tungstenite::Message::Binary(ping.into_bytes().into()))
        .await
        .expect("send a binary message");
    assert_eq!(
        client.recv().await["payload"],
        json!({"nonce": "bin"}),
        "a binary JSON envelope is answered like text"
    );
    // Arbitrary bytes without a pending envelope: no error, nothing sent.
    client
        .ws
        .send(tungstenite::Message::Binary(vec![0, 159, 146, 150].into()))
        .await
        .expect("send a binary message");
    client.ping_marker().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_messages_that_are_not_envelopes_are_ignored() {
    // §13: a binary message with no pending envelope is handled like text only
    // when it is a JSON object with a string `type`; anything else goes to the
    // binary hook, with no error.
    let (_handle, url) = start(builder()).await;
    let mut client = Client::connect(&url).await;
    for body in [
        r#"{"type": 5, "payload": {}}"#,
        r#"{"type": "PING", "payload": {"#,
        r#"{"no": "type", "payload": {}}"#,
    ] {
        client
            .ws
            .send(tungstenite::Message::Binary(
                body.as_bytes().to_vec().into(),
            ))
            .await
            .expect("send a binary message");
        client.request("PING", json!({"nonce": body})).await;
        let env = client.recv().await;
        assert_eq!(
            (env["type"].as_str(), &env["payload"]),
            (Some("PONG"), &json!({ "nonce": body })),
            "binary message {body:?} must be ignored (binary hook, no error), got {env}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subprotocol_haip_or_a_token_entry_is_selected() {
    use tungstenite::client::IntoClientRequest;
    let (_handle, url) = start(builder()).await;
    for (offered, selected) in [("chat, haip", "haip"), ("token.abc", "token.abc")] {
        let mut request = url.as_str().into_client_request().unwrap();
        request
            .headers_mut()
            .insert("sec-websocket-protocol", offered.parse().unwrap());
        let (mut client, response) = Client::connect_with(request).await;
        assert_eq!(
            response
                .headers()
                .get("sec-websocket-protocol")
                .and_then(|v| v.to_str().ok()),
            Some(selected),
            "offered {offered:?}"
        );
        client.ping_marker().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_errors_details_and_self_reported_cancellation() {
    let fails =
        Tool::builder("fails")
            .handler(|params: Value, _ctx: Context| async move {
                match params["mode"].as_str().unwrap_or_default() {
                    "exec" => Err(ToolError::execution("disk full")
                        .with_details(json!({"device": "/dev/sda"}))),
                    "params" => Err(ToolError::invalid_params("n too big")
                        .with_details(json!([{"path": "/n", "message": "too big"}]))),
                    "custom" => Err(ToolError::new("QUOTA_EXCEEDED", "Daily quota used up")),
                    "cancel" => Err(ToolError::cancelled()),
                    _ => Ok(json!({ "parsed": "x12".parse::<i64>()? })),
                }
            })
            .build()
            .unwrap();
    let (handle, url) = start(builder().tool(fails)).await;
    let mut client = Client::connect(&url).await;

    let done = client
        .call_done("f1", "fails", json!({"mode": "exec"}))
        .await;
    assert_eq!(
        done,
        json!({"call_id": "f1", "status": "ERROR", "result":
               {"error": "disk full", "code": "TOOL_EXECUTION_ERROR", "details": {"device": "/dev/sda"}}})
    );
    let done = client
        .call_done("f2", "fails", json!({"mode": "params"}))
        .await;
    assert_eq!(
        done["result"],
        json!({"error": "n too big", "code": "INVALID_PARAMS", "details": [{"path": "/n", "message": "too big"}]})
    );
    let done = client
        .call_done("f3", "fails", json!({"mode": "custom"}))
        .await;
    assert_eq!(
        done["result"],
        json!({"error": "Daily quota used up", "code": "QUOTA_EXCEEDED"})
    );
    // `?` on any std error: TOOL_EXECUTION_ERROR with its text.
    let done = client.call_done("f4", "fails", json!({})).await;
    assert_eq!(done["result"]["code"], "TOOL_EXECUTION_ERROR", "{done}");
    assert_eq!(done["result"]["error"], "invalid digit found in string");
    // A tool reporting cancellation nobody asked for: CANCELLED, no result, no CANCELLING.
    let done = client
        .call_done("f5", "fails", json!({"mode": "cancel"}))
        .await;
    assert_eq!(done, json!({"call_id": "f5", "status": "CANCELLED"}));

    let stats = get_json(handle.local_addr(), "/stats").await;
    assert_eq!(executions(&stats), [5, 0, 4, 1, 0], "{stats}");
}

fn shaped_tool() -> Tool {
    Tool::builder("shaped")
        .output_schema(json!({
            "type": "object",
            "properties": {"x": {"type": "integer"}},
            "required": ["x"]
        }))
        .handler(|params: Value, _: Context| async move { Ok::<_, ToolError>(params) })
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_schema_violations_are_counted_and_sent_unless_strict() {
    let (handle, url) = start(builder().tool(shaped_tool())).await;
    let mut client = Client::connect(&url).await;
    let done = client.call_done("o1", "shaped", json!({"x": 1})).await;
    assert_eq!(done["result"], json!({"x": 1}));
    assert_eq!(
        get_json(handle.local_addr(), "/health").await["warnings"],
        0
    );
    let done = client.call_done("o2", "shaped", json!({"y": "two"})).await;
    assert_eq!(
        done,
        json!({"call_id": "o2", "status": "OK", "result": {"y": "two"}})
    );
    assert_eq!(
        get_json(handle.local_addr(), "/health").await["warnings"],
        1,
        "an output schema violation counts as a warning"
    );

    let (_strict_handle, strict_url) =
        start(builder().strict_output_validation(true).tool(shaped_tool())).await;
    let mut strict = Client::connect(&strict_url).await;
    let done = strict.call_done("o3", "shaped", json!({"x": "one"})).await;
    assert_eq!(done["status"], "ERROR", "{done}");
    assert_eq!(done["result"]["code"], "TOOL_EXECUTION_ERROR", "{done}");
    assert_eq!(detail_paths(&done), ["/x"]);
    let done = strict.call_done("o4", "shaped", json!({"x": 4})).await;
    assert_eq!(done["status"], "OK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_schema_legacy_field_adds_schema() {
    let (_handle, url) = start(builder().builtin_tools().tool_schema_legacy_field(true)).await;
    let mut client = Client::connect(&url).await;
    client.request("TOOL_SCHEMA", json!({"tool": "echo"})).await;
    let payload = client.recv().await["payload"].clone();
    assert_eq!(
        keys(&payload),
        ["inputSchema", "outputSchema", "schema", "tool"]
    );
    assert_eq!(payload["schema"], payload["inputSchema"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_cancel_cancels_the_calls_of_that_run() {
    let (gated, mut gate) = gated_tool("gated");
    let (_handle, url) = start(builder().tool(gated)).await;
    let mut client = Client::connect(&url).await;

    client
        .send(&json!({"id": "x1", "run_id": "run-9", "type": "TOOL_CALL",
                      "payload": {"call_id": "g1", "tool": "gated"}}))
        .await;
    client
        .send(&json!({"id": "x2", "type": "TOOL_CALL",
                      "payload": {"call_id": "g2", "tool": "gated", "run_id": "run-9"}}))
        .await;
    client
        .send(&json!({"id": "x3", "run_id": "other", "type": "TOOL_CALL",
                      "payload": {"call_id": "g3", "tool": "gated"}}))
        .await;
    let mut started: Vec<String> = Vec::new();
    for _ in 0..3 {
        started.push(gate.started().await);
    }
    started.sort();
    assert_eq!(started, ["g1", "g2", "g3"]);

    client
        .request("RUN_CANCEL", json!({"run_id": "run-9"}))
        .await;
    let mut per_call: std::collections::HashMap<String, Vec<Value>> = Default::default();
    for _ in 0..4 {
        let env = client.recv().await;
        assert_eq!(
            env["run_id"], "run-9",
            "envelopes about the call carry its run id: {env}"
        );
        let call_id = env["payload"]["call_id"].as_str().unwrap().to_owned();
        per_call
            .entry(call_id)
            .or_default()
            .push(env["payload"].clone());
    }
    for call_id in ["g1", "g2"] {
        assert_eq!(
            per_call[call_id],
            [
                json!({"call_id": call_id, "status": "CANCELLING"}),
                json!({"call_id": call_id, "status": "CANCELLED", "result": {"reason": "run cancelled"}})
            ]
        );
    }

    let id = client.request("RUN_CANCEL", json!({})).await;
    assert_eq!(
        client.expect_error().await["payload"],
        json!({"code": "MISSING_RUN_ID", "message": "Run ID is required", "related_id": id})
    );
    let id = client
        .request("RUN_CANCEL", json!({"run_id": "run-9"}))
        .await;
    assert_eq!(
        client.expect_error().await["payload"],
        json!({"code": "RUN_NOT_FOUND", "message": "Run not found", "related_id": id, "detail": {"run_id": "run-9"}})
    );

    gate.open(1);
    let env = client.recv().await;
    assert_eq!(
        (env["payload"].clone(), env["run_id"].clone()),
        (
            json!({"call_id": "g3", "status": "OK", "result": {"released": "g3"}}),
            json!("other")
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_sessions_may_use_the_same_call_id() {
    let (gated, mut gate) = gated_tool("gated");
    let (_handle, url) = start(builder().tool(gated)).await;
    let mut a = Client::connect(&url).await;
    let mut b = Client::connect(&url).await;
    a.call("same", "gated", json!({})).await;
    b.call("same", "gated", json!({})).await;
    gate.started().await;
    gate.started().await;
    gate.open(2);
    assert_eq!(a.expect_done("same").await["status"], "OK");
    assert_eq!(b.expect_done("same").await["status"], "OK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_preflight_and_headers() {
    let (handle, _url) = start(builder()).await;
    let response = support::http_request(handle.local_addr(), "OPTIONS", "/haip/anything").await;
    assert_eq!(response.status, 204, "{response:?}");
    assert_eq!(response.header("access-control-allow-origin"), Some("*"));
    assert_eq!(
        response.header("access-control-allow-methods"),
        Some("GET, POST, OPTIONS")
    );
    assert_eq!(
        response.header("access-control-allow-headers"),
        Some(
            "Authorization, Content-Type, Cache-Control, X-HAIP-Message, X-HAIP-Binary, X-HAIP-Session"
        )
    );
    let response = http_get(handle.local_addr(), "/stats").await;
    assert_eq!(
        response.header("access-control-expose-headers"),
        Some("X-HAIP-Session")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_declared_finished_and_limited_per_session() {
    let (_handle, url) = start(builder().max_concurrent_runs(2)).await;
    let mut a = Client::connect(&url).await;
    let mut b = Client::connect(&url).await;

    // Declaring runs gets no reply, up to the limit.
    a.request("RUN_STARTED", json!({"run_id": "r1"})).await;
    a.request("RUN_STARTED", json!({"run_id": "r2"})).await;
    a.request("RUN_STARTED", json!({"run_id": "r1"})).await; // already active: ignored
    a.ping_marker().await;
    let id = a.request("RUN_STARTED", json!({"run_id": "r3"})).await;
    assert_eq!(
        a.expect_error().await["payload"],
        json!({"code": "RUN_LIMIT_EXCEEDED", "message": "Too many concurrent runs", "related_id": id,
               "detail": {"max_concurrent_runs": 2}})
    );

    // Another session cannot finish this session's run.
    let id = b.request("RUN_FINISHED", json!({"run_id": "r1"})).await;
    assert_eq!(
        b.expect_error().await["payload"],
        json!({"code": "RUN_NOT_FOUND", "message": "Run not found", "related_id": id, "detail": {"run_id": "r1"}})
    );

    // Finishing (payload or envelope run id) is silent; a second time is RUN_NOT_FOUND.
    a.request("RUN_FINISHED", json!({"run_id": "r1", "status": "OK"}))
        .await;
    a.send(&json!({"id": "f2", "run_id": "r2", "type": "RUN_FINISHED", "payload": {}}))
        .await;
    a.ping_marker().await;
    a.request("RUN_FINISHED", json!({"run_id": "r1"})).await;
    assert_eq!(a.expect_error().await["payload"]["code"], "RUN_NOT_FOUND");
    let id = a.request("RUN_FINISHED", json!({})).await;
    assert_eq!(
        a.expect_error().await["payload"],
        json!({"code": "MISSING_RUN_ID", "message": "Run ID is required", "related_id": id})
    );
    // RUN_ERROR is never answered, known run or not.
    a.request("RUN_STARTED", json!({"run_id": "r4"})).await;
    a.request(
        "RUN_ERROR",
        json!({"code": "X", "message": "m", "run_id": "r4"}),
    )
    .await;
    a.request("RUN_ERROR", json!({"code": "X", "message": "m"}))
        .await;
    a.ping_marker().await;
}

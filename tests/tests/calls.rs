//! Tool calls over a real WebSocket (docs/protocol.md §6.4, §6.9, §7): the built-in
//! and demo tools, blocking handlers, unknown or missing tools, duplicate
//! call ids, call id defaults and run id correlation.
//!
//! Every envelope a test receives is also checked by the support client
//! against the outbound rules (seven fields, UUID v4 ids, `seq` +1 from `"1"`
//! with no gaps, one session id).

use crate::support;

use haip::{Context, Tool};
use serde_json::{Value, json};
use support::{Client, builder, demo_builder, gated_tool, is_uuid_v4, start, within};
use tokio::sync::mpsc;

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

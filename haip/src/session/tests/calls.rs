//! The handshake, listing and calling tools, queues, cancels, progress and runs.

use super::*;

#[tokio::test]
async fn hai_is_first_and_matches_the_spec() {
    let shared = Arc::new(Shared::new(
        Config::default(),
        Registry::default(),
        Default::default(),
    ));
    let mut session = Session::new(shared, Door::Stream, None);
    let hai: Value = serde_json::from_slice(&session.poll_transmit().unwrap()).unwrap();
    assert_eq!(hai["seq"], "1");
    assert_eq!(hai["channel"], "SYSTEM");
    assert_eq!(hai["payload"]["haip_version"], "1.1.2");
    assert_eq!(
        hai["payload"]["accept_events"].as_array().unwrap().len(),
        22
    );
    assert_eq!(
        hai["payload"]["capabilities"]["binary_frames"], false,
        "streams cannot carry binary frames"
    );
    assert_eq!(
        hai["payload"]["capabilities"]["flow_control"]["initial_credit_messages"],
        1000
    );
}

#[tokio::test]
async fn list_schema_ping_and_errors_answer_in_request_order() {
    let mut h = Harness::new(Config::default(), vec![]);
    h.send(json!({"type": "TOOL_LIST", "payload": {}}));
    h.send(json!({"id": "s1", "type": "TOOL_SCHEMA", "payload": {"tool": "add"}}));
    h.send(json!({"id": "s2", "type": "TOOL_SCHEMA", "payload": {"tool": "nope"}}));
    h.send(json!({"id": "s3", "type": "TOOL_SCHEMA", "payload": {}}));
    h.send(json!({"type": "PING", "payload": {"nonce": 17}}));
    h.session.handle_text("not json");
    h.send(json!({"id": "u1", "type": "FILE_START", "payload": {}}));
    h.send(json!({"type": "TEXT_MESSAGE_START", "payload": {"content": "hi"}}));
    h.send(json!({"type": "PONG", "payload": {}}));
    let out = h.out();
    let types: Vec<&str> = out.iter().map(|v| v["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "TOOL_LIST",
            "TOOL_SCHEMA",
            "ERROR",
            "ERROR",
            "PONG",
            "ERROR",
            "ERROR"
        ]
    );
    assert_eq!(
        out[0]["payload"]["tools"][1],
        json!({"name": "add", "description": "Add two numbers"})
    );
    assert_eq!(out[1]["payload"]["tool"], "add");
    assert!(out[1]["payload"].get("schema").is_none());
    assert_eq!(out[2]["payload"]["code"], "TOOL_NOT_FOUND");
    assert_eq!(out[2]["payload"]["related_id"], "s2");
    assert_eq!(out[3]["payload"]["detail"]["reason"], "missing tool");
    assert_eq!(out[4]["payload"], json!({"nonce": 17}));
    assert_eq!(out[5]["payload"]["detail"]["reason"], "invalid JSON");
    assert_eq!(out[6]["payload"]["code"], "UNSUPPORTED_TYPE");
}

#[tokio::test]
async fn legacy_schema_field_is_a_setting() {
    let config = Config {
        tool_schema_legacy_field: true,
        ..Config::default()
    };
    let mut h = Harness::new(config, vec![]);
    h.send(json!({"type": "TOOL_SCHEMA", "payload": {"tool": "echo"}}));
    let out = h.out();
    assert_eq!(
        out[0]["payload"]["schema"],
        out[0]["payload"]["inputSchema"]
    );
}

#[tokio::test]
async fn calls_end_with_exactly_one_tool_done_each() {
    let mut h = Harness::new(Config::default(), vec![]);
    h.send(call("c1", "add", json!({"a": 5, "b": 3})));
    h.send(call("c2", "nope", json!({})));
    h.send(call("c3", "add", json!({"a": "5"})));
    let out = h.run_until_done(3).await;
    let done: Vec<&Value> = out.iter().filter(|v| v["type"] == "TOOL_DONE").collect();
    let by_id =
        |id: &str| done.iter().find(|v| v["payload"]["call_id"] == id).unwrap()["payload"].clone();
    assert_eq!(
        by_id("c1"),
        json!({"call_id": "c1", "status": "OK", "result": {"result": 8}})
    );
    assert_eq!(
        by_id("c2")["result"],
        json!({"error": "Tool nope not found", "code": "TOOL_NOT_FOUND"})
    );
    let details = &by_id("c3")["result"]["details"];
    assert_eq!(details[0]["path"], "/a");
    assert_eq!(details[1]["path"], "/b");
    // The unknown tool's ERROR precedes its TOOL_DONE.
    let err = out.iter().position(|v| v["type"] == "ERROR").unwrap();
    let c2 = out
        .iter()
        .position(|v| v["payload"]["call_id"] == "c2" && v["type"] == "TOOL_DONE")
        .unwrap();
    assert!(err < c2);
    assert_eq!(
        out[err]["payload"]["detail"],
        json!({"call_id": "c2", "tool": "nope"})
    );
}

#[tokio::test]
async fn queue_then_rate_limit_then_fifo_start() {
    let (mut h, gate) = Harness::gated(Config {
        max_inflight_calls: 1,
        max_queued_calls: 1,
        ..Config::default()
    });
    h.send(call("a", "gate", json!({})));
    h.send(call("b", "gate", json!({})));
    h.send(call("c", "gate", json!({})));
    let out = h.out();
    assert_eq!(
        out[0]["payload"],
        json!({"call_id": "b", "status": "QUEUED"})
    );
    assert_eq!(out[1]["payload"]["result"]["code"], "RATE_LIMITED");
    assert_eq!(out[1]["payload"]["call_id"], "c");
    gate.notify_one();
    let out = h.run_until_done(1).await;
    assert_eq!(out.last().unwrap()["payload"]["call_id"], "a");
    gate.notify_one();
    let out = h.run_until_done(1).await;
    assert_eq!(out.last().unwrap()["payload"]["call_id"], "b");
    assert!(h.session.is_idle());
}

#[tokio::test]
async fn duplicate_active_call_id_gets_only_an_error() {
    let (mut h, gate) = Harness::gated(Config::default());
    h.send(call("a", "gate", json!({})));
    h.send(call("a", "echo", json!({"message": "x"})));
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["payload"]["message"], "Duplicate call_id");
    assert_eq!(out[0]["payload"]["related_id"], "req-a");
    gate.notify_one();
    let out = h.run_until_done(1).await;
    assert_eq!(out.iter().filter(|v| v["type"] == "TOOL_DONE").count(), 1);
    // A finished call's id may be reused.
    h.send(call("a", "echo", json!({"message": "again"})));
    let out = h.run_until_done(1).await;
    assert_eq!(out[0]["payload"]["result"], json!({"echoed": "again"}));
}

#[tokio::test]
async fn cancel_sends_cancelling_then_cancelled_with_reason() {
    let (mut h, _gate) = Harness::gated(Config {
        max_inflight_calls: 1,
        ..Config::default()
    });
    h.send(call("run", "gate", json!({})));
    h.send(call("wait", "gate", json!({})));
    h.send(json!({"type": "TOOL_CANCEL", "payload": {"call_id": "wait"}}));
    h.send(json!({"type": "TOOL_CANCEL", "payload": {"call_id": "run", "reason": "user closed panel"}}));
    h.send(json!({"type": "TOOL_CANCEL", "payload": {"call_id": "unknown"}}));
    let out = h.run_until_done(2).await;
    let payloads: Vec<Value> = out.iter().map(|v| v["payload"].clone()).collect();
    assert_eq!(
        payloads,
        [
            json!({"call_id": "wait", "status": "QUEUED"}),
            json!({"call_id": "wait", "status": "CANCELLING"}),
            json!({"call_id": "wait", "status": "CANCELLED"}),
            json!({"call_id": "run", "status": "CANCELLING"}),
            json!({"call_id": "run", "status": "CANCELLED", "result": {"reason": "user closed panel"}}),
        ]
    );
}

#[tokio::test]
async fn progress_is_merged_while_unsent_and_precedes_tool_done() {
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let release = Arc::new(std::sync::Mutex::new(Some(release_rx)));
    let tool = Tool::builder("steps")
        .handler(move |_: Value, ctx: Context| {
            let release = release.lock().unwrap().take();
            async move {
                for p in [10.0, 20.0, 30.0] {
                    ctx.progress_with(p, json!({"at": p}));
                }
                if let Some(rx) = release {
                    let _ = rx.await;
                }
                Ok(Value::Null)
            }
        })
        .build()
        .unwrap();
    let mut h = Harness::new(Config::default(), vec![tool]);
    h.send(call("p", "steps", json!({})));
    // Deliver the progress notification without draining the outbox in between.
    let event = tokio::time::timeout(Duration::from_secs(10), h.events.recv())
        .await
        .unwrap()
        .unwrap();
    h.session.handle_event(event);
    release_tx.send(()).unwrap();
    let out = h.run_until_done(1).await;
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(
        out[0]["payload"],
        json!({"call_id": "p", "status": "RUNNING", "progress": 30, "partial": {"at": 30.0}})
    );
    assert_eq!(
        out[1]["payload"],
        json!({"call_id": "p", "status": "OK"}),
        "a null result is omitted"
    );
}

#[tokio::test]
async fn runs_are_limited_and_run_cancel_cancels_their_calls() {
    let (mut h, _gate) = Harness::gated(Config {
        max_concurrent_runs: 1,
        ..Config::default()
    });
    h.send(json!({"type": "RUN_STARTED", "payload": {"run_id": "r1"}}));
    h.send(json!({"id": "r2", "type": "RUN_STARTED", "payload": {"run_id": "r2"}}));
    let out = h.out();
    assert_eq!(out[0]["payload"]["code"], "RUN_LIMIT_EXCEEDED");
    h.send(json!({"id": "x", "run_id": "r1", "type": "TOOL_CALL", "payload": {"call_id": "x", "tool": "gate"}}));
    h.send(json!({"type": "RUN_CANCEL", "payload": {"run_id": "r1"}}));
    h.send(json!({"id": "rc", "type": "RUN_CANCEL", "payload": {"run_id": "r9"}}));
    h.send(json!({"id": "rf", "type": "RUN_FINISHED", "payload": {}}));
    let out = h.run_until_done(1).await;
    let summary: Vec<(String, Value)> = out
        .iter()
        .map(|v| (v["type"].as_str().unwrap().to_owned(), v["payload"].clone()))
        .collect();
    assert_eq!(
        summary[0].1,
        json!({"call_id": "x", "status": "CANCELLING"})
    );
    assert_eq!(out[0]["run_id"], "r1");
    assert_eq!(summary[1].1["code"], "RUN_NOT_FOUND");
    assert_eq!(summary[2].1["code"], "MISSING_RUN_ID");
    assert_eq!(
        summary[3].1,
        json!({"call_id": "x", "status": "CANCELLED", "result": {"reason": "run cancelled"}})
    );
}

#[tokio::test]
async fn shutdown_cancels_every_active_call() {
    let (mut h, _gate) = Harness::gated(Config::default());
    h.send(call("a", "gate", json!({})));
    h.send(call("b", "gate", json!({})));
    h.session.handle_shutdown();
    let out = h.run_until_done(2).await;
    let done: Vec<&Value> = out.iter().filter(|v| v["type"] == "TOOL_DONE").collect();
    for d in done {
        assert_eq!(d["payload"]["result"], json!({"reason": "server shutdown"}));
    }
    assert!(h.session.is_idle());
}

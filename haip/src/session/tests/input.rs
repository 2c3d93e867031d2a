//! Input the session checks: strict envelopes, validating params (on and off
//! the session task), waiting calls, two-frame binary and odd numbers.

use super::*;

/// `strict_envelope` (docs/protocol.md §2.2): the full schema is required, and a
/// `seq` not above the highest seen is dropped without a word.
#[tokio::test]
async fn strict_envelope_requires_the_schema_and_drops_stale_seqs() {
    let config = Config {
        strict_envelope: true,
        ..Config::default()
    };
    let mut h = Harness::new(config, vec![]);
    let session = "7d9e2a10-3b4c-4d5e-8f60-718293a4b5c6";
    let ping = |id: &str, seq: &str, nonce: &str| {
        json!({"id": id, "session": session, "seq": seq, "ts": "1767225600000",
               "channel": "SYSTEM", "type": "PING", "payload": {"nonce": nonce}})
    };
    let id = |n: u32| format!("00000000-0000-4000-8000-{n:012}");

    h.send(ping(&id(1), "1", "a"));
    let out = h.out();
    assert_eq!((out.len(), &out[0]["payload"]["nonce"]), (1, &json!("a")));

    // Missing or ill-typed fields: INVALID_MESSAGE, reason "schema".
    let mut bad = Vec::new();
    bad.push(json!({"id": id(2), "type": "PING", "payload": {}}));
    let mut v = ping("not-a-uuid", "2", "b");
    bad.push(v.clone());
    v = ping(&id(3), "2", "b");
    v["seq"] = json!(2);
    bad.push(v.clone());
    v = ping(&id(4), "2", "b");
    v["ts"] = json!("2026-01-01T00:00:00Z");
    bad.push(v.clone());
    v = ping(&id(5), "2", "b");
    v.as_object_mut().unwrap().remove("channel");
    bad.push(v);
    for envelope in bad {
        h.send(envelope.clone());
        let out = h.out();
        assert_eq!(out.len(), 1, "{envelope}");
        assert_eq!(out[0]["type"], "ERROR", "{envelope}");
        assert_eq!(out[0]["payload"]["code"], "INVALID_MESSAGE");
        assert_eq!(out[0]["payload"]["detail"], json!({"reason": "schema"}));
        if envelope["id"].as_str().is_some_and(|i| i.len() == 36) {
            assert_eq!(out[0]["payload"]["related_id"], envelope["id"]);
        }
    }
    // A repeated or older seq is dropped; a higher one is handled.
    h.send(ping(&id(6), "1", "again"));
    h.send(ping(&id(7), "0", "older"));
    assert!(h.out().is_empty(), "stale seqs are dropped silently");
    h.send(ping(&id(8), "5", "c"));
    let out = h.out();
    assert_eq!(out[0]["payload"]["nonce"], "c");
    // Not JSON, or no type: the ordinary errors, not "schema".
    h.session.handle_text("{nope");
    let out = h.out();
    assert_eq!(out[0]["payload"]["detail"]["reason"], "invalid JSON");
    h.send(json!({"id": id(9), "payload": {}}));
    let out = h.out();
    assert_eq!(out[0]["payload"]["detail"]["reason"], "missing type");
}

/// A tool with a closed schema `{s: string}` that echoes `s`.
pub(super) fn closed_tool() -> Tool {
    Tool::builder("closed")
        .input_schema(json!({
            "type": "object",
            "properties": {"s": {"type": "string"}},
            "additionalProperties": false
        }))
        .handler(|params: Value, _ctx: crate::Context| async move {
            Ok::<_, ToolError>(json!({ "len": params["s"].as_str().map_or(0, str::len) }))
        })
        .build()
        .unwrap()
}

#[tokio::test]
async fn large_params_are_validated_off_the_session_task_with_capped_details() {
    let mut h = Harness::new(Config::default(), vec![closed_tool()]);
    let mut params = Map::new();
    for i in 0..20_000 {
        params.insert(format!("k{i:05}"), json!(i));
    }
    params.insert("s".into(), json!(7));
    h.send(call("big", "closed", Value::Object(params)));
    assert!(
        h.out().iter().all(|v| v["type"] != "TOOL_DONE"),
        "the verdict comes from the validation task, not the session's"
    );
    let out = h.run_until_done(1).await;
    let done = out.last().unwrap();
    let result = &done["payload"]["result"];
    assert_eq!(result["code"], "INVALID_PARAMS", "{result}");
    assert_eq!(result["total"], 20_001);
    let details = result["details"].as_array().unwrap();
    assert_eq!(details.len(), 20, "max_violations");
    assert_eq!(details[0]["path"], "/k00000");
    let text = done.to_string();
    assert!(text.len() < 4096, "{} bytes", text.len());

    // A rejected call gives its params' bytes back: many in a row are all
    // validated, none refused for the bytes the earlier ones held.
    for i in 0..300 {
        h.send(call(
            &format!("bad{i}"),
            "closed",
            json!({"s": 7, "pad": "x".repeat(70_000)}),
        ));
        let out = h.run_until_done(1).await;
        assert_eq!(
            out.last().unwrap()["payload"]["result"]["code"],
            "INVALID_PARAMS",
            "call {i}"
        );
    }
    assert_eq!(h.session.held_bytes, 0);

    // Valid large params run the tool.
    h.send(call("ok", "closed", json!({"s": "x".repeat(100_000)})));
    let out = h.run_until_done(1).await;
    assert_eq!(
        out.last().unwrap()["payload"],
        json!({"call_id": "ok", "status": "OK", "result": {"len": 100_000}})
    );
    assert!(h.session.is_idle());
}

#[tokio::test]
async fn a_call_waiting_for_a_validator_is_queued_and_can_be_cancelled() {
    let mut h = Harness::new(Config::default(), vec![closed_tool()]);
    let limiter = Arc::clone(h.session.shared.runner.validators());
    let permits = limiter.available_permits() as u32;
    let busy = limiter.acquire_many(permits).await.unwrap();
    h.send(call("w", "closed", json!({"s": "x".repeat(100_000)})));
    assert_eq!(
        h.out()[0]["payload"],
        json!({"call_id": "w", "status": "QUEUED"})
    );
    h.send(json!({"type": "TOOL_CANCEL", "payload": {"call_id": "w", "reason": "no"}}));
    let out = h.out();
    assert_eq!(out[0]["payload"]["status"], "CANCELLING");
    assert_eq!(
        out[1]["payload"],
        json!({"call_id": "w", "status": "CANCELLED", "result": {"reason": "no"}})
    );
    assert!(h.session.is_idle());
    drop(busy);
    // The id is free again and the validator works for the next call.
    h.send(call("w", "closed", json!({"s": "y".repeat(70_000)})));
    let out = h.run_until_done(1).await;
    assert_eq!(out.last().unwrap()["payload"]["status"], "OK");
    assert_eq!(
        out.iter().filter(|v| v["type"] == "TOOL_DONE").count(),
        1,
        "{out:?}"
    );
}

#[tokio::test]
async fn waiting_calls_are_bounded_in_bytes() {
    let (mut h, gate) = Harness::gated(Config {
        max_inflight_calls: 1,
        max_queued_bytes: 100_000,
        ..Config::default()
    });
    let blob = "x".repeat(40_000);
    h.send(call("a", "gate", json!({})));
    h.send(call("b", "gate", json!({"blob": blob})));
    h.send(call("c", "gate", json!({"blob": blob})));
    h.send(call("d", "gate", json!({"blob": blob})));
    let out = h.out();
    let statuses: Vec<(&Value, &Value)> = out
        .iter()
        .map(|v| (&v["payload"]["call_id"], &v["payload"]["status"]))
        .collect();
    assert_eq!(
        statuses,
        [
            (&json!("b"), &json!("QUEUED")),
            (&json!("c"), &json!("QUEUED")),
            (&json!("d"), &json!("ERROR"))
        ]
    );
    assert_eq!(out[2]["payload"]["result"]["code"], "RATE_LIMITED");
    // Starting a queued call frees its bytes.
    gate.notify_one();
    h.run_until_done(1).await;
    h.send(call("e", "gate", json!({"blob": blob})));
    assert_eq!(h.out()[0]["payload"]["status"], "QUEUED");
}

#[tokio::test]
async fn two_frame_binary_waits_for_its_body() {
    let mut h = Harness::new(Config::default(), vec![]);
    // The body arrives: the envelope is handled.
    h.send(json!({"id": "b1", "type": "PING", "bin_len": 3, "payload": {"nonce": "n1"}}));
    assert!(h.session.is_awaiting_binary());
    assert!(h.out().is_empty(), "nothing until the body is here");
    assert_eq!(h.session.handle_binary(b"abc"), Control::Continue);
    assert_eq!(h.out()[0]["payload"], json!({"nonce": "n1"}));
    // A body of another length: both discarded.
    h.send(json!({"id": "b2", "type": "PING", "bin_len": 3, "payload": {"nonce": "n2"}}));
    h.session.handle_binary(b"abcd");
    let out = h.out();
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0]["payload"]["code"], "BINARY_FRAME_ERROR");
    assert_eq!(out[0]["payload"]["related_id"], "b2");
    assert_eq!(
        out[0]["payload"]["detail"],
        json!({"expected": 3, "actual": 4})
    );
    // Text where the body was due: the error, then the text as usual.
    h.send(json!({"id": "b3", "type": "PING", "bin_len": 3, "payload": {"nonce": "n3"}}));
    h.send(json!({"type": "PING", "payload": {"nonce": "n4"}}));
    let out = h.out();
    assert_eq!(
        out[0]["payload"]["detail"],
        json!({"reason": "missing binary frame"})
    );
    assert_eq!(out[0]["payload"]["related_id"], "b3");
    assert_eq!(out[1]["payload"], json!({"nonce": "n4"}));
    // Nothing within the wait: the driver reports it.
    h.send(json!({"type": "PING", "bin_len": 0, "payload": {}}));
    h.session.handle_missing_binary();
    assert_eq!(h.out()[0]["payload"]["code"], "BINARY_FRAME_ERROR");
    assert!(!h.session.is_awaiting_binary());
    // `payload.data` means base64: no binary frame is awaited.
    h.send(json!({"type": "PING", "bin_len": 3, "payload": {"data": "YWJj", "nonce": "n5"}}));
    assert_eq!(h.out()[0]["payload"]["nonce"], "n5");
    // A binary message holding an envelope, with nothing awaited: handled as text.
    h.session
        .handle_binary(br#"{"type":"PING","payload":{"nonce":"n6"}}"#);
    assert_eq!(h.out()[0]["payload"], json!({"nonce": "n6"}));
    // Other binary data: no consumer, no error.
    h.session.handle_binary(&[0xff, 0x00]);
    assert!(h.out().is_empty());
}

#[tokio::test]
async fn outsized_or_overflowing_client_numbers_are_errors_not_panics() {
    let mut h = Harness::new(Config::default(), vec![]);
    let control = h.send(json!({"type": "PING", "bin_len": u64::MAX, "payload": {}}));
    assert_eq!(
        control,
        Control::Close {
            code: 1009,
            reason: "message too large",
            keep_session: true
        }
    );
    assert_eq!(h.out()[0]["payload"]["code"], "MESSAGE_TOO_LARGE");
    let mut h = Harness::new(Config::default(), vec![]);
    h.send(
        json!({"type": "HAI", "payload": {"capabilities": {"flow_control": {
        "initial_credit_messages": u64::MAX, "initial_credit_bytes": u64::MAX}}}}),
    );
    for _ in 0..2 {
        h.send(json!({"type": "FLOW_UPDATE", "payload": {
            "channel": "AGENT", "add_messages": u64::MAX, "add_bytes": u64::MAX}}));
    }
    for _ in 0..10 {
        h.send(json!({"type": "PING", "payload": {"nonce": "x".repeat(100_000)}}));
    }
    let out = h.out();
    assert_eq!(out.iter().filter(|v| v["type"] == "PONG").count(), 10);
}

#[tokio::test]
async fn streams_ignore_bin_len() {
    let shared = Shared::for_tests(Config::default());
    let mut session = Session::new(shared, Door::Stream, None);
    session.poll_transmit();
    session.handle_text(r#"{"type":"PING","bin_len":5,"payload":{"nonce":"s"}}"#);
    assert!(!session.is_awaiting_binary());
    let pong: Value = serde_json::from_slice(&session.poll_transmit().unwrap()).unwrap();
    assert_eq!(pong["type"], "PONG");
}

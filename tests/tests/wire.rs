//! WebSocket transport details (docs/protocol.md §2, §9): malformed input, `PING` /
//! `PONG`, the heartbeat, WebSocket ping frames and binary messages.
//!
//! Every envelope a test receives is also checked by the support client
//! against the outbound rules (seven fields, UUID v4 ids, `seq` +1 from `"1"`
//! with no gaps, one session id).

use crate::support;

use std::collections::HashSet;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use haip::Limits;
use serde_json::json;
use support::{Client, base_limits, builder, demo_builder, gated_tool, is_uuid_v4, start, within};
use tokio_tungstenite::tungstenite;

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
    let (_handle, url) = start(builder().limits(Limits {
        heartbeat_interval: interval,
        ..base_limits()
    }))
    .await;

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

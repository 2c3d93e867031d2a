//! Handshake and envelope rules over a real WebSocket (docs/protocol.md §2–§3): the
//! server HAI and its payload, client HAI, the version check, `crit` and
//! loosely echoed ids, subprotocol selection and channels.
//!
//! Every envelope a test receives is also checked by the support client
//! against the outbound rules (seven fields, UUID v4 ids, `seq` +1 from `"1"`
//! with no gaps, one session id).

use crate::support;

use std::collections::HashSet;

use haip::Limits;
use serde_json::json;
use support::{Client, base_limits, builder, demo_builder, expected_hai_payload, start, within};
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
    let (_handle, url) = start(builder().limits(Limits {
        max_concurrent_runs: 3,
        initial_credit_messages: 50,
        initial_credit_bytes: 65_536,
        ..base_limits()
    }))
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

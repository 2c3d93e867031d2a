//! Replay and resumption edge cases (docs/protocol.md §11.2, §11.3, §14.2, §15.4):
//! `REPLAY_REQUEST` ranges on a live connection (inclusive bounds, string and
//! number forms, empty ranges, `REPLAY_TOO_OLD`, invalid bounds); every
//! reason a resumption fails — after which the connection carries on, on its
//! fresh session; resuming over another transport, and by an upstream POST
//! carrying more than the resuming `HAI`.

use crate::conn;
use crate::support;

use std::collections::BTreeMap;

use conn::{Conn, Item, Kind, assert_ok};
use haip::Limits;
use serde_json::{Value, json};
use support::{
    Client, base_limits, builder, confirming_hai_payload, expect_on, resume_hai, seq_of, start,
    stats_until,
};

/// Sends `n` `PING`s and reads their `PONG`s; returns their raw texts by seq.
async fn pongs(c: &mut Client, n: usize) -> BTreeMap<u64, String> {
    let mut texts = BTreeMap::new();
    for i in 0..n {
        c.request("PING", json!({ "nonce": format!("n{i}") })).await;
        let (text, env) = c.recv_raw().await;
        assert_eq!(env["type"], "PONG", "{env}");
        texts.insert(seq_of(&env), text);
    }
    texts
}

/// Sends a `REPLAY_REQUEST` with `payload`; the next envelopes must be
/// exactly `expected` (raw texts), in order.
async fn replay(c: &mut Client, payload: Value, expected: &[&String]) {
    c.request("REPLAY_REQUEST", payload.clone()).await;
    for want in expected {
        let (text, env) = c.recv_raw().await;
        assert_eq!(&&text, want, "REPLAY_REQUEST {payload}: got {env}");
    }
}

/// The ERROR payload of a failed `REPLAY_REQUEST` or resumption.
fn error_payload(code: &str, message: &str, related_id: &str, detail: Value) -> Value {
    json!({"code": code, "message": message, "related_id": related_id, "detail": detail})
}

fn resume_failed(related_id: &str, reason: &str) -> Value {
    error_payload(
        "RESUME_FAILED",
        "Session cannot be resumed",
        related_id,
        json!({ "reason": reason }),
    )
}

/// §11.2: ranges are inclusive, `to_seq` defaults to (and is capped at) the
/// newest, both bounds may be strings or numbers, replays are byte-identical
/// and take no `seq`; empty ranges send nothing; bad bounds are
/// `INVALID_MESSAGE`.
#[tokio::test]
async fn replay_request_ranges() {
    let (handle, url) = start(builder()).await;
    let mut c = Client::connect(&url).await;
    let session = c.session.clone();
    let hai = c.hai.clone();
    let sent = pongs(&mut c, 4).await; // seqs 2..=5
    c.relax();
    replay(
        &mut c,
        json!({"from_seq": "2", "to_seq": "3"}),
        &[&sent[&2], &sent[&3]],
    )
    .await;
    replay(&mut c, json!({"from_seq": 4}), &[&sent[&4], &sent[&5]]).await;
    replay(&mut c, json!({"from_seq": 5, "to_seq": 99}), &[&sent[&5]]).await;
    replay(&mut c, json!({"from_seq": "3", "to_seq": 3}), &[&sent[&3]]).await;
    c.request("REPLAY_REQUEST", json!({"from_seq": "0", "to_seq": "1"}))
        .await;
    assert_eq!(c.recv().await, hai, "seq 1 is the HAI, unchanged");
    // Empty ranges: nothing at all, so the PONG marker comes next, as seq 6.
    for empty in [
        json!({"from_seq": "4", "to_seq": "3"}),
        json!({"from_seq": "6"}),
        json!({"from_seq": 1000, "to_seq": 2000}),
        json!({"from_seq": "0", "to_seq": "0"}),
    ] {
        c.request("REPLAY_REQUEST", empty).await;
    }
    c.follow(&session, 5);
    c.ping_marker().await;

    for (bad, reason) in [
        (json!({}), "invalid from_seq"),
        (json!({"from_seq": "abc"}), "invalid from_seq"),
        (json!({"from_seq": -1}), "invalid from_seq"),
        (json!({"from_seq": "-1"}), "invalid from_seq"),
        (json!({"from_seq": 1.5}), "invalid from_seq"),
        (json!({"from_seq": null}), "invalid from_seq"),
        (json!({"from_seq": ""}), "invalid from_seq"),
        (json!({"from_seq": " 2"}), "invalid from_seq"),
        (json!({"from_seq": [2]}), "invalid from_seq"),
        (json!({"from_seq": "2", "to_seq": "x"}), "invalid to_seq"),
        (json!({"from_seq": "2", "to_seq": -3}), "invalid to_seq"),
        (json!({"from_seq": "2", "to_seq": null}), "invalid to_seq"),
    ] {
        let id = c.request("REPLAY_REQUEST", bad.clone()).await;
        let error = c.expect_error().await;
        assert_eq!(
            error["payload"],
            error_payload(
                "INVALID_MESSAGE",
                "Invalid message format",
                &id,
                json!({ "reason": reason })
            ),
            "REPLAY_REQUEST {bad}"
        );
    }
    c.ping_marker().await;
    c.close().await;
    handle.shutdown().await;
}

/// §11.1, §11.2: with `replay_window_messages: 2` at most 20 envelopes are
/// kept; asking for an evicted one is `REPLAY_TOO_OLD` naming the oldest
/// kept, and nothing is re-sent; what is kept still replays.
#[tokio::test]
async fn replay_request_too_old() {
    let (handle, url) = start(builder().limits(Limits {
        replay_window_messages: 2,
        ..base_limits()
    }))
    .await;
    let mut c = Client::connect(&url).await;
    let session = c.session.clone();
    let sent = pongs(&mut c, 25).await; // seqs 2..=26; 7..=26 kept
    let id = c.request("REPLAY_REQUEST", json!({"from_seq": "1"})).await;
    let error = c.expect_error().await; // seq 27: now 8..=27 kept
    let too_old = |id: &str, oldest: &str| {
        error_payload(
            "REPLAY_TOO_OLD",
            "Requested envelopes are no longer kept",
            id,
            json!({ "oldest_seq": oldest }),
        )
    };
    assert_eq!(error["payload"], too_old(&id, "7"));
    // Partly evicted ranges fail as a whole.
    let id = c
        .request("REPLAY_REQUEST", json!({"from_seq": 7, "to_seq": 30}))
        .await;
    let error = c.expect_error().await; // seq 28: now 9..=28 kept
    assert_eq!(error["payload"], too_old(&id, "8"));
    c.relax();
    replay(
        &mut c,
        json!({"from_seq": "20", "to_seq": "21"}),
        &[&sent[&20], &sent[&21]],
    )
    .await;
    c.follow(&session, 28);
    c.ping_marker().await;
    c.close().await;
    handle.shutdown().await;
}

/// §11.3: resuming a session nobody knows fails with `unknown session`; the
/// connection stays on its fresh session, and the `HAI` is otherwise processed
/// (its flow-control capability turns on `FLOW_UPDATE`s).
#[tokio::test]
async fn resume_unknown_session() {
    let (handle, url) = start(builder().builtin_tools()).await;
    let mut c = Client::connect(&url).await;
    let mut hai = resume_hai("r1", "00000000-0000-4000-8000-000000000000", "0");
    hai["payload"]["capabilities"] = json!({"flow_control": {
        "initial_credit_messages": 10, "initial_credit_bytes": 65536}});
    hai["payload"]["accept_events"] = json!(["HAI", "PONG", "ERROR", "FLOW_UPDATE", "TOOL_DONE"]);
    c.send(&hai).await;
    let error = c.expect_error().await;
    assert_eq!(error["payload"], resume_failed("r1", "unknown session"));
    // The HAI was the first of five SYSTEM envelopes: credit comes back.
    for _ in 0..4 {
        c.request("PING", json!({})).await;
        assert_eq!(c.recv().await["type"], "PONG");
    }
    let update = c.recv().await;
    assert_eq!(
        (
            &update["type"],
            &update["payload"]["channel"],
            &update["payload"]["add_messages"]
        ),
        (&json!("FLOW_UPDATE"), &json!("SYSTEM"), &json!(5)),
        "{update}"
    );
    let done = c
        .call_done("e1", "echo", json!({"message": "still here"}))
        .await;
    assert_eq!(done["status"], "OK");
    c.close().await;
    handle.shutdown().await;
}

const SECRET: &str = "reliability-secret-of-32-bytes-at-least";

fn token(sub: &str) -> String {
    support::hs256_token(SECRET, sub, None)
}

/// §11.3, §17: with authentication on, only the subject that opened a session
/// may resume it: bob's attempt on alice's live session fails with `subject
/// mismatch` and leaves alice connected; alice herself can take it over.
#[tokio::test]
async fn resume_by_another_subject() {
    let (handle, _) = start(builder().builtin_tools().jwt_hs256(SECRET)).await;
    let addr = handle.local_addr();
    let (alice_token, bob_token) = (token("alice"), token("bob"));
    let mut alice = Conn::connect(Kind::Ws, addr, Some(&alice_token)).await;
    let old = alice.session.clone();
    alice
        .call_done("a1", "echo", json!({"message": "hi"}))
        .await;

    let mut bob = Conn::connect(Kind::Ws, addr, Some(&bob_token)).await;
    bob.send(&resume_hai("steal", &old, "2")).await;
    assert_eq!(
        bob.expect_error().await,
        resume_failed("steal", "subject mismatch")
    );
    bob.ping_marker().await;
    alice.ping_marker().await; // seq 3, still connected

    let mut again = Conn::connect(Kind::Ws, addr, Some(&alice_token)).await;
    again.relax();
    again.send(&resume_hai("mine", &old, "3")).await;
    let hai = again.recv().await;
    assert_eq!(
        (&hai["type"], &hai["session"], &hai["seq"]),
        (&json!("HAI"), &json!(old), &json!("4")),
        "{hai}"
    );
    assert_eq!(hai["payload"]["last_rx_seq"], "0", "alice sent no seq");
    let (_, _, end) = alice.read_to_end().await;
    assert_eq!(
        end,
        Item::Closed(Some((1000, "session resumed elsewhere".to_owned())))
    );
    drop((bob, again));
    handle.shutdown().await;
}

/// Connects, makes one echo call (seq 2), drops the connection and waits
/// until its session is kept; returns the session id.
async fn lost_session(url: &str, addr: std::net::SocketAddr) -> String {
    let mut a = Client::connect(url).await;
    a.call_done("a1", "echo", json!({"message": "x"})).await;
    let id = a.session.clone();
    drop(a);
    stats_until(addr, "the lost session kept", |s| {
        s["detachedSessions"] == 1
    })
    .await;
    id
}

/// §11.3: `last_rx_seq` beyond the session's newest seq, or not an integer,
/// fails with `invalid last_rx_seq`; the session stays resumable, and a
/// JSON-number `last_rx_seq` equal to the newest resumes with nothing replayed.
#[tokio::test]
async fn resume_with_invalid_last_rx_seq() {
    let (handle, url) = start(builder().builtin_tools()).await;
    let addr = handle.local_addr();
    let old = lost_session(&url, addr).await; // newest seq 2
    for bad in [
        json!("3"),
        json!(3),
        json!("abc"),
        json!(-1),
        json!(null),
        json!(""),
    ] {
        let mut b = Client::connect(&url).await;
        let mut hai = resume_hai("r", &old, "0");
        hai["payload"]["last_rx_seq"] = bad.clone();
        b.send(&hai).await;
        assert_eq!(
            b.expect_error().await["payload"],
            resume_failed("r", "invalid last_rx_seq"),
            "last_rx_seq {bad}"
        );
        b.ping_marker().await;
    }
    let mut c = Client::connect_raw(&url).await;
    let mut hai = resume_hai("ok", &old, "0");
    hai["payload"]["last_rx_seq"] = json!(2);
    c.send(&hai).await;
    let confirm = c.recv().await;
    assert_eq!(
        (&confirm["type"], &confirm["session"], &confirm["seq"]),
        (&json!("HAI"), &json!(old), &json!("3")),
        "{confirm}"
    );
    c.follow(&old, 3);
    c.ping_marker().await;
    handle.shutdown().await;
}

/// §11.3: a gap reaching back past the replay window fails with `window
/// exceeded`; the first `last_rx_seq` whose successors are all kept works.
#[tokio::test]
async fn resume_past_the_window() {
    let (handle, url) = start(builder().limits(Limits {
        replay_window_messages: 2,
        ..base_limits()
    }))
    .await;
    let addr = handle.local_addr();
    let mut a = Client::connect(&url).await;
    let old = a.session.clone();
    let sent = pongs(&mut a, 25).await; // seqs 2..=26; 7..=26 kept
    drop(a);
    stats_until(addr, "the lost session kept", |s| {
        s["detachedSessions"] == 1
    })
    .await;
    for last in ["0", "1", "5"] {
        let mut b = Client::connect(&url).await;
        b.send(&resume_hai("r", &old, last)).await;
        assert_eq!(
            b.expect_error().await["payload"],
            resume_failed("r", "window exceeded"),
            "last_rx_seq {last}"
        );
        b.ping_marker().await;
    }
    let mut c = Client::connect_raw(&url).await;
    c.send(&resume_hai("r", &old, "6")).await;
    for seq in 7..=26 {
        let (text, _) = c.recv_raw().await;
        assert_eq!(text, sent[&seq], "replay of seq {seq}");
    }
    let confirm = c.recv().await;
    assert_eq!((&confirm["type"], seq_of(&confirm)), (&json!("HAI"), 27));
    handle.shutdown().await;
}

/// §11.3: a resumption `HAI` that is not the connection's first envelope
/// fails with `not first message` (and does not disturb the live session it
/// names); a `HAI` naming the current session, or without `last_rx_seq`, or
/// without `session`, is no resumption attempt and never fails.
#[tokio::test]
async fn resume_not_first_and_non_attempts() {
    let (handle, url) = start(builder()).await;
    let mut owner = Client::connect(&url).await;
    let old = owner.session.clone();

    let mut b = Client::connect(&url).await;
    b.ping_marker().await;
    b.send(&resume_hai("late", &old, "1")).await;
    assert_eq!(
        b.expect_error().await["payload"],
        resume_failed("late", "not first message")
    );
    b.ping_marker().await;
    owner.ping_marker().await;

    // As the first envelope, and again later: never RESUME_FAILED.
    let mut c = Client::connect(&url).await;
    let own = c.session.clone();
    let mut no_last = resume_hai("x", &old, "1");
    no_last["payload"]
        .as_object_mut()
        .expect("an object")
        .remove("last_rx_seq");
    let mut no_session = resume_hai("y", &old, "1");
    no_session
        .as_object_mut()
        .expect("an object")
        .remove("session");
    for hai in [resume_hai("self", &own, "1"), no_last, no_session] {
        c.send(&hai).await;
        c.ping_marker().await;
    }
    let mut d = Client::connect(&url).await;
    let mut other = resume_hai("z", &old, "1");
    other["payload"]
        .as_object_mut()
        .expect("an object")
        .remove("last_rx_seq");
    d.send(&other).await;
    d.ping_marker().await;
    owner.ping_marker().await; // nobody took it over
    handle.shutdown().await;
}

/// §15.4, §11.3: an upstream POST whose array body starts with the resuming
/// `HAI` has every element handled: the ones after the `HAI` run on the
/// resumed session, after its confirming `HAI`.
#[tokio::test]
async fn sse_resume_post_handles_the_rest_of_its_body() {
    let (handle, _) = start(builder().builtin_tools()).await;
    let addr = handle.local_addr();
    let mut a = Conn::connect(Kind::Sse, addr, None).await;
    let old = a.session.clone();
    a.call_done("e1", "echo", json!({"message": "one"})).await; // seq 2
    drop(a);
    stats_until(addr, "the session kept", |s| s["detachedSessions"] == 1).await;

    let mut b = Conn::connect(Kind::Sse, addr, None).await;
    b.relax();
    let body = json!([
        resume_hai("r", &old, "2"),
        {"id": "after", "type": "PING", "payload": {"nonce": "after-resume"}},
        {"id": "call", "type": "TOOL_CALL",
         "payload": {"call_id": "e2", "tool": "echo", "params": {"message": "two"}}},
    ]);
    assert_ok(&b.post(&body.to_string()).await);
    let hai = b.recv().await;
    expect_on(&hai, &old, 3, "HAI");
    b.follow(&old, 3);
    let pong = b.recv().await;
    assert_eq!(
        (&pong["type"], &pong["payload"]),
        (&json!("PONG"), &json!({"nonce": "after-resume"})),
        "the PING after the resuming HAI: {pong}"
    );
    b.expect_done("e2").await;
    b.ping_marker().await;
    drop(b);
    handle.shutdown().await;
}

/// §11.3, §15, §3.1: a session may be resumed over another transport; the
/// missed envelopes come unchanged, and the confirming `HAI` describes the
/// connection it is sent on (`binary_frames` only on WebSocket).
#[tokio::test]
async fn resume_across_transports() {
    let (handle, _) = start(builder().builtin_tools()).await;
    let addr = handle.local_addr();
    let mut wrong_binary_frames = Vec::new();
    for (from, to) in [
        (Kind::Ws, Kind::Sse),
        (Kind::Sse, Kind::Ws),
        (Kind::Stream, Kind::Sse),
    ] {
        let mut a = Conn::connect(from, addr, None).await;
        let old = a.session.clone();
        a.call_done("e1", "echo", json!({"message": "missed"}))
            .await;
        drop(a);
        let mut b = Conn::connect(to, addr, None).await;
        b.relax();
        // Claims not to have seen the TOOL_DONE (seq 2): it comes again.
        b.send(&resume_hai("r", &old, "1")).await;
        let (_, done) = b.recv_raw().await;
        assert_eq!(
            expect_on(&done, &old, 2, "TOOL_DONE"),
            json!({"call_id": "e1", "status": "OK", "result": {"echoed": "missed"}}),
            "{from:?} -> {to:?}"
        );
        let (_, hai) = b.recv_raw().await;
        let mut payload = expect_on(&hai, &old, 3, "HAI");
        let binary_frames = payload["capabilities"]["binary_frames"].clone();
        payload["capabilities"]["binary_frames"] = json!(to == Kind::Ws);
        assert_eq!(
            payload,
            confirming_hai_payload(to == Kind::Ws, "0"),
            "{from:?} -> {to:?}"
        );
        if binary_frames != json!(to == Kind::Ws) {
            wrong_binary_frames.push(format!("{from:?} -> {to:?}: {binary_frames}"));
        }
        b.follow(&old, 3);
        b.ping_marker().await;
    }
    assert!(
        wrong_binary_frames.is_empty(),
        "the confirming HAI must describe the new connection (binary_frames only on \
         WebSocket): {wrong_binary_frames:?}"
    );
    handle.shutdown().await;
}

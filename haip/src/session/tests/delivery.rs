//! Getting envelopes out: resumption, the outbox and its byte budget, replay
//! and flow control.

use super::*;

#[tokio::test]
async fn version_check_and_resumption_attempts() {
    let mut h = Harness::new(Config::default(), vec![]);
    let control = h.send(json!({"id": "h", "session": "other", "type": "HAI", "payload": {"accept_major": [1], "last_rx_seq": "3", "accept_events": ["PONG"]}}));
    let Control::Resume(request) = control else {
        panic!("expected a resumption, got {control:?}")
    };
    assert_eq!(
        (
            request.session.as_str(),
            request.last_rx_seq,
            request.related_id.as_deref()
        ),
        ("other", Some(3), Some("h"))
    );
    assert!(h.out().is_empty(), "the driver answers, not the session");
    h.session.handle_resume_refused(
        crate::session::ResumeRefused::UnknownSession,
        request.related_id.as_deref(),
        &request.hai,
    );
    let out = h.out();
    assert_eq!(out[0]["payload"]["code"], "RESUME_FAILED");
    assert_eq!(out[0]["payload"]["related_id"], "h");
    assert_eq!(out[0]["payload"]["detail"]["reason"], "unknown session");
    assert!(
        !h.session.handle_heartbeat(),
        "the HAI's accept_events still applied"
    );
    // Only the first envelope may resume.
    h.send(json!({"id": "h2", "session": "other", "type": "HAI", "payload": {"last_rx_seq": 1}}));
    assert_eq!(
        h.out()[0]["payload"]["detail"]["reason"],
        "not first message"
    );
    // The upstream SDK's random session id without last_rx_seq is no resumption.
    h.send(json!({"session": "random", "type": "HAI", "payload": {"accept_major": ["1"]}}));
    assert!(h.out().is_empty());
    let control = h.send(json!({"type": "HAI", "payload": {"accept_major": [2]}}));
    assert_eq!(
        control,
        Control::Close {
            code: 1002,
            reason: "version incompatible",
            keep_session: false,
        }
    );
    assert_eq!(
        h.out()[0]["payload"]["detail"],
        json!({"supported_major": [1]})
    );
}

#[tokio::test]
async fn accept_events_filters_heartbeat_pings_only() {
    let mut h = Harness::new(Config::default(), vec![]);
    assert!(h.session.handle_heartbeat());
    assert_eq!(h.out()[0]["type"], "PING");
    h.send(json!({"type": "HAI", "payload": {"accept_events": ["PONG"]}}));
    assert!(!h.session.handle_heartbeat(), "filtered out");
    h.send(json!({"type": "PING", "payload": {}}));
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["type"], "PONG");
}

#[tokio::test]
async fn outbox_overflow_is_detected() {
    let config = Config {
        max_outbound_queue: 16,
        ..Config::default()
    };
    let mut h = Harness::new(config, vec![]);
    for _ in 0..16 {
        h.send(json!({"type": "PING", "payload": {}}));
    }
    assert_eq!(h.session.overflow(), None);
    h.send(json!({"type": "PING", "payload": {}}));
    assert_eq!(h.session.overflow(), Some(Overflow::Queue));
}

#[tokio::test]
async fn outbound_bytes_are_counted_and_overflow_behind_the_next_envelope() {
    let config = Config {
        max_outbound_bytes: 8192,
        ..Config::default()
    };
    let mut h = Harness::new(config, vec![]);
    let nonce = "n".repeat(3000);
    // One envelope larger than the budget on its own is not an overflow:
    // only what waits behind the next one to be written counts.
    h.send(json!({"type": "PING", "payload": {"nonce": "x".repeat(9000)}}));
    assert!(
        h.session.backlog().bytes > 9000,
        "{:?}",
        h.session.backlog()
    );
    assert_eq!(h.session.overflow(), None);
    h.out();
    assert_eq!(h.session.backlog(), Backlog::default());
    for _ in 0..3 {
        h.send(json!({"type": "PING", "payload": {"nonce": nonce}}));
    }
    assert_eq!(h.session.overflow(), None, "{:?}", h.session.backlog());
    h.send(json!({"type": "PING", "payload": {"nonce": nonce}}));
    assert_eq!(h.session.overflow(), Some(Overflow::Bytes));
    let backlog = h.session.backlog();
    assert_eq!(backlog.envelopes, 4);
    assert!(backlog.bytes > 4 * 3000, "{backlog:?}");
    // Committing counts them out again.
    assert_eq!(h.out().len(), 4);
    assert_eq!(h.session.backlog(), Backlog::default());
    assert_eq!(h.session.overflow(), None);
}

#[tokio::test]
async fn replays_are_fed_one_by_one_and_never_overflow() {
    let config = Config {
        max_outbound_queue: 16,
        replay_window_bytes: 1 << 20,
        ..Config::default()
    };
    let mut h = Harness::new(config, vec![]);
    for _ in 0..100 {
        h.send(json!({"type": "PING", "payload": {}}));
        h.out();
    }
    h.send(json!({"type": "REPLAY_REQUEST", "payload": {"from_seq": "1"}}));
    let backlog = h.session.backlog();
    assert_eq!(backlog.envelopes, 101, "HAI and 100 PONGs: {backlog:?}");
    assert_eq!(
        h.session.overflow(),
        None,
        "replays do not count against the queue"
    );
    let mut seen = 0;
    while let Some(text) = h.session.poll_transmit() {
        let v: Value = serde_json::from_slice(&text).unwrap();
        seen += 1;
        assert_eq!(v["seq"], seen.to_string(), "re-sent in order, unchanged");
    }
    assert_eq!(seen, 101);
    assert_eq!(h.session.backlog(), Backlog::default());
}

#[tokio::test]
async fn replay_requests_resend_kept_envelopes_unchanged() {
    let mut h = Harness::new(Config::default(), vec![]);
    for nonce in ["a", "b", "c"] {
        h.send(json!({"type": "PING", "payload": {"nonce": nonce}}));
    }
    let originals = h.out(); // seq 2, 3, 4
    h.send(json!({"type": "REPLAY_REQUEST", "payload": {"from_seq": "2", "to_seq": 3}}));
    h.send(json!({"type": "REPLAY_REQUEST", "payload": {"from_seq": 9}}));
    h.send(json!({"id": "r", "type": "REPLAY_REQUEST", "payload": {"from_seq": "x"}}));
    let mut replayed = Vec::new();
    while let Some(text) = h.session.poll_transmit() {
        replayed.push(serde_json::from_slice::<Value>(&text).unwrap());
    }
    assert_eq!(replayed[0], originals[0], "byte-identical re-send");
    assert_eq!(replayed[1], originals[1]);
    assert_eq!(
        replayed[2]["payload"]["detail"],
        json!({"reason": "invalid from_seq"})
    );
    assert_eq!(replayed.len(), 3, "an empty range sends nothing");
}

#[tokio::test]
async fn replay_beyond_the_window_is_too_old() {
    let config = Config {
        replay_window_messages: 2,
        ..Config::default()
    };
    let mut h = Harness::new(config, vec![]);
    for _ in 0..25 {
        h.send(json!({"type": "PING", "payload": {}}));
    }
    h.out(); // 26 committed; the hard cap keeps 20: seq 7..=26
    h.send(json!({"id": "old", "type": "REPLAY_REQUEST", "payload": {"from_seq": 1}}));
    let out = h.out();
    assert_eq!(out[0]["payload"]["code"], "REPLAY_TOO_OLD");
    assert_eq!(out[0]["payload"]["detail"], json!({"oldest_seq": "7"}));
}

#[tokio::test]
async fn credit_is_returned_in_batches_to_clients_that_ask() {
    let mut h = Harness::new(Config::default(), vec![]);
    h.send(json!({"type": "HAI", "payload": {"capabilities": {"flow_control": {"initial_credit_messages": 10, "initial_credit_bytes": 100000}}}}));
    for _ in 0..4 {
        h.send(json!({"channel": "SYSTEM", "type": "PING", "payload": {}}));
    }
    let out = h.out();
    let updates: Vec<&Value> = out.iter().filter(|v| v["type"] == "FLOW_UPDATE").collect();
    assert_eq!(updates.len(), 1, "{out:?}");
    assert_eq!(updates[0]["channel"], "SYSTEM");
    assert_eq!(updates[0]["payload"]["channel"], "SYSTEM");
    assert_eq!(updates[0]["payload"]["add_messages"], 5);
    assert!(updates[0]["payload"]["add_bytes"].as_u64().unwrap() > 100);

    // A client without flow control (or filtering FLOW_UPDATE) gets none.
    let mut h = Harness::new(Config::default(), vec![]);
    for _ in 0..20 {
        h.send(json!({"type": "PING", "payload": {}}));
    }
    assert!(h.out().iter().all(|v| v["type"] == "PONG"));
}

#[tokio::test]
async fn paused_channels_hold_their_envelopes_in_order() {
    let mut h = Harness::new(Config::default(), vec![]);
    h.send(json!({"type": "PAUSE_CHANNEL", "payload": {"channel": "AGENT"}}));
    h.send(json!({"type": "PAUSE_CHANNEL", "payload": {"channel": "SYSTEM"}}));
    h.send(json!({"type": "TOOL_LIST", "payload": {}}));
    h.send(json!({"type": "PING", "payload": {"nonce": 1}}));
    h.send(json!({"type": "TOOL_SCHEMA", "payload": {"tool": "add"}}));
    let out = h.out();
    assert_eq!(out.len(), 1, "only SYSTEM flows: {out:?}");
    assert_eq!(out[0]["type"], "PONG");
    h.send(json!({"type": "RESUME_CHANNEL", "payload": {"channel": "AGENT"}}));
    let types: Vec<String> = h
        .out()
        .iter()
        .map(|v| v["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(types, ["TOOL_LIST", "TOOL_SCHEMA"]);
}

#[tokio::test]
async fn strict_flow_control_drops_envelopes_beyond_credit() {
    let config = Config {
        strict_flow_control: true,
        initial_credit_messages: 3,
        ..Config::default()
    };
    let mut h = Harness::new(config, vec![]);
    // Credit is per channel: spend USER's three on PINGs.
    for _ in 0..3 {
        h.send(json!({"channel": "USER", "type": "PING", "payload": {}}));
    }
    h.send(json!({"id": "x", "type": "TOOL_CALL", "payload": {"call_id": "x", "tool": "echo", "params": {"message": "m"}}}));
    let out = h.out();
    assert_eq!(out.len(), 4);
    assert_eq!(out[3]["payload"]["code"], "FLOW_CONTROL_VIOLATION");
    assert_eq!(out[3]["payload"]["related_id"], "x");
    assert_eq!(
        out[3]["payload"]["detail"],
        json!({"channel": "USER", "reason": "INSUFFICIENT_CREDITS"})
    );
    assert!(h.session.is_idle(), "the dropped call was never accepted");
}

#[tokio::test]
async fn a_resumed_session_replays_what_the_client_missed_then_confirms() {
    let mut h = Harness::new(Config::default(), vec![]);
    h.send(json!({"seq": "7", "type": "PING", "payload": {"nonce": "a"}}));
    h.send(json!({"seq": 9, "type": "PING", "payload": {"nonce": "b"}}));
    let sent = h.out(); // seq 2, 3 (after the HAI, seq 1)
    assert_eq!(
        h.session.can_resume_from(4),
        Err(crate::session::ResumeRefused::InvalidLastRxSeq)
    );
    assert_eq!(h.session.can_resume_from(3), Ok(()));
    assert_eq!(h.session.can_resume_from(0), Ok(()));
    h.session
        .handle_resume(1, &crate::protocol::payload::Hai::default(), Door::Stream);
    let mut texts = Vec::new();
    while let Some(text) = h.session.poll_transmit() {
        texts.push(serde_json::from_slice::<Value>(&text).unwrap());
    }
    assert_eq!(texts[0], sent[0], "missed envelopes come back unchanged");
    assert_eq!(texts[1], sent[1]);
    assert_eq!(texts[2]["type"], "HAI");
    assert_eq!(texts[2]["seq"], "4", "the counter continues");
    assert_eq!(
        texts[2]["payload"]["last_rx_seq"], "9",
        "highest client seq processed here"
    );
}

#[tokio::test]
async fn resumption_needs_every_missed_envelope_kept() {
    let config = Config {
        replay_window_messages: 1,
        ..Config::default()
    };
    let mut h = Harness::new(config, vec![]);
    for _ in 0..15 {
        h.send(json!({"type": "PING", "payload": {}}));
    }
    h.out(); // 16 committed, the hard cap keeps the newest 10
    assert_eq!(
        h.session.can_resume_from(2),
        Err(crate::session::ResumeRefused::WindowExceeded)
    );
    assert_eq!(h.session.can_resume_from(6), Ok(()));
}

#[tokio::test]
async fn shutdown_releases_paused_channels_so_every_call_gets_its_tool_done() {
    let (mut h, _gate) = Harness::gated(Config::default());
    h.send(json!({"type": "PAUSE_CHANNEL", "payload": {"channel": "AGENT"}}));
    h.send(call("a", "gate", json!({})));
    assert!(h.out().is_empty());
    h.session.handle_shutdown();
    let out = h.run_until_done(1).await;
    assert_eq!(
        out.last().unwrap()["payload"]["result"],
        json!({"reason": "server shutdown"})
    );
}

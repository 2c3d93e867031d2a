//! Sessions restored from a store: replaying, confirming, and their lost
//! calls and paused channels.

use super::*;

#[tokio::test]
async fn a_restored_session_replays_confirms_then_ends_its_lost_calls() {
    // A session recorded elsewhere: its HAI (1), a PONG (2), a call's
    // progress (3); the call was still running when its instance died.
    let mut h = Harness::new(Config::default(), vec![]);
    let text = |seq: u64, ty: &str| {
        bytes::Bytes::from(format!(
            r#"{{"id":"i{seq}","session":"gone","seq":"{seq}","ts":"1","channel":"SYSTEM","type":"{ty}","payload":{{}}}}"#
        ))
    };
    let snapshot = Snapshot {
        subject: None,
        window: vec![
            (1, text(1, "HAI")),
            (2, text(2, "PONG")),
            (3, text(3, "PONG")),
        ],
        next_seq: 4,
        last_rx_seq: 6,
        open_calls: vec!["p1".to_owned()],
        paused: vec![],
        ..Default::default()
    };
    let shared = Arc::clone(h.session.shared());
    let (mut session, lost) = Session::restore(shared, Door::WebSocket, "gone", snapshot);
    assert_eq!(session.id(), "gone");
    assert!(!session.has_outbound(), "no HAI of its own");
    assert_eq!(
        session.can_resume_from(4),
        Err(crate::session::ResumeRefused::InvalidLastRxSeq)
    );
    assert_eq!(session.can_resume_from(1), Ok(()));
    session.handle_resume(
        1,
        &crate::protocol::payload::Hai::default(),
        Door::WebSocket,
    );
    session.handle_lost_calls(lost);
    h.session = session;
    let texts = h.session_replay();
    let kinds: Vec<(&str, &str)> = texts
        .iter()
        .map(|v| (v["type"].as_str().unwrap(), v["seq"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("PONG", "2"),
            ("PONG", "3"),
            ("HAI", "4"),
            ("TOOL_DONE", "5")
        ]
    );
    assert_eq!(texts[2]["payload"]["last_rx_seq"], "6");
    assert_eq!(texts[3]["session"], "gone");
    let done = &texts[3]["payload"];
    assert_eq!(done["call_id"], "p1");
    assert_eq!(done["status"], "ERROR");
    assert_eq!(done["result"]["code"], "INTERNAL_ERROR");
    assert!(
        done["result"]["error"]
            .as_str()
            .unwrap()
            .contains("instance lost")
    );
}

#[tokio::test]
async fn a_restored_session_keeps_its_channels_paused() {
    // Pause state belongs to the session and survives resumption (§12.2),
    // on another instance too: the lost call's TOOL_DONE (AGENT) waits.
    let mut h = Harness::new(Config::default(), vec![]);
    let snapshot = Snapshot {
        subject: None,
        window: vec![(
            1,
            bytes::Bytes::from_static(
                br#"{"id":"i1","session":"gone","seq":"1","ts":"1","channel":"SYSTEM","type":"HAI","payload":{}}"#,
            ),
        )],
        next_seq: 2,
        last_rx_seq: 0,
        open_calls: vec!["p1".to_owned()],
        paused: vec!["AGENT".to_owned()],
        ..Default::default()
    };
    let shared = Arc::clone(h.session.shared());
    let (mut session, lost) = Session::restore(shared, Door::WebSocket, "gone", snapshot);
    session.handle_resume(
        1,
        &crate::protocol::payload::Hai::default(),
        Door::WebSocket,
    );
    session.handle_lost_calls(lost);
    h.session = session;
    let kinds = |texts: Vec<Value>| -> Vec<String> {
        texts
            .iter()
            .map(|v| v["type"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(kinds(h.session_replay()), ["HAI"]);
    let _ = h.session.handle_text(
        r#"{"id":"r1","channel":"SYSTEM","type":"RESUME_CHANNEL","payload":{"channel":"AGENT"}}"#,
    );
    assert_eq!(kinds(h.session_replay()), ["TOOL_DONE"]);
}

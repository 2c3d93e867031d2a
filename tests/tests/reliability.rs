//! Session reliability on the real wire (docs/protocol.md §6.4 "client disconnected",
//! §11.3, §14.3): a lost connection's session is kept with its calls running;
//! a new connection resumes it and gets exactly what it missed, byte-identical,
//! then a confirming `HAI`; a live session taken over from another connection
//! closes the first one; a kept session that expires cancels its calls.
//!
//! Replay ranges and resumption failures: `reliability_replay.rs`; flow control
//! and runs: `reliability_flow.rs`; the randomised disconnect property:
//! `reliability_prop.rs`.

use crate::conn;
use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use conn::{Conn, Item, Kind, assert_ok, per_transport, post};
use haip::{Context, Limits, Tool, ToolError};
use serde_json::{Value, json};
use support::{
    Client, base_limits, builder, confirming_hai_payload, executions, expect_on, get_json,
    resume_hai, seq_of, start, stats_until, within,
};
use tokio::sync::{Semaphore, mpsc};

per_transport!(resume_after_drop_mid_call, live_session_taken_over);

/// The test's side of [`stepper`].
struct Steps {
    permits: Arc<Semaphore>,
    started: mpsc::UnboundedReceiver<String>,
    cancelled: mpsc::UnboundedReceiver<String>,
}

impl Steps {
    /// Lets one waiting (or future) call finish.
    fn open(&self) {
        self.permits.add_permits(1);
    }

    async fn started(&mut self) -> String {
        within("a stepper call to start", self.started.recv())
            .await
            .expect("the stepper tool is alive")
    }

    async fn cancelled(&mut self) -> String {
        within(
            "a stepper call to see its cancellation",
            self.cancelled.recv(),
        )
        .await
        .expect("the stepper tool is alive")
    }
}

/// A tool that reports progress 10 (`{"step":1}`), waits for a permit from
/// [`Steps`], reports progress 60 (`{"step":2}`) and returns
/// `{"finished": <call_id>}`; on cancellation it reports it and stops.
fn stepper() -> (Tool, Steps) {
    let permits = Arc::new(Semaphore::new(0));
    let (started_tx, started) = mpsc::unbounded_channel();
    let (cancelled_tx, cancelled) = mpsc::unbounded_channel();
    let steps = Steps {
        permits: Arc::clone(&permits),
        started,
        cancelled,
    };
    let tool = Tool::builder("stepper")
        .description("Reports progress, waits for the test, reports again")
        .handler(move |_params: Value, ctx: Context| {
            let (permits, started, cancelled) = (
                Arc::clone(&permits),
                started_tx.clone(),
                cancelled_tx.clone(),
            );
            async move {
                ctx.progress_with(10.0, json!({"step": 1}));
                let _ = started.send(ctx.call_id().to_owned());
                tokio::select! {
                    permit = permits.acquire() => {
                        permit.expect("the semaphore is never closed").forget();
                        ctx.progress_with(60.0, json!({"step": 2}));
                        Ok(json!({ "finished": ctx.call_id() }))
                    }
                    () = ctx.cancelled() => {
                        let _ = cancelled.send(ctx.call_id().to_owned());
                        Err(ToolError::cancelled())
                    }
                }
            }
        })
        .build()
        .expect("the stepper tool is valid");
    (tool, steps)
}

/// A client envelope with an explicit client `seq`.
fn with_seq(id: &str, seq: &str, ty: &str, payload: Value) -> Value {
    let channel = if ty.starts_with("TOOL_") {
        "USER"
    } else {
        "SYSTEM"
    };
    json!({"id": id, "seq": seq, "channel": channel, "type": ty, "payload": payload})
}

/// §11.3 over WebSocket: a call's missed updates and `TOOL_DONE`, committed
/// while the client was away, arrive exactly once after resumption — same
/// `id`/`seq`/`ts` bytes as the server committed them — then the confirming
/// `HAI`; the resumed session's counter continues and the fresh one is gone.
#[tokio::test]
async fn ws_resume_after_drop_mid_call_delivers_missed_envelopes_once() {
    let (tool, mut steps) = stepper();
    let (handle, url) = start(builder().builtin_tools().tool(tool)).await;
    let addr = handle.local_addr();

    let mut a = Client::connect(&url).await;
    let old = a.session.clone();
    let hai1 = a.hai.clone();
    // What the client saw, by seq: raw text as received.
    let mut seen: BTreeMap<u64, String> = BTreeMap::new();
    a.send(&with_seq(
        "call-1",
        "1",
        "TOOL_CALL",
        json!({"call_id": "s1", "tool": "stepper"}),
    ))
    .await;
    let (text, update) = a.recv_raw().await;
    assert_eq!(
        (seq_of(&update), &update["type"], &update["payload"]),
        (
            2,
            &json!("TOOL_UPDATE"),
            &json!({"call_id": "s1", "status": "RUNNING", "progress": 10, "partial": {"step": 1}})
        ),
        "{update}"
    );
    seen.insert(2, text);
    assert_eq!(steps.started().await, "s1");
    // Client seqs need not grow: the server reports the highest it processed.
    for (id, seq) in [("ping-5", "5"), ("ping-4", "4")] {
        a.send(&with_seq(id, seq, "PING", json!({"nonce": id})))
            .await;
        let (text, pong) = a.recv_raw().await;
        assert_eq!(pong["type"], "PONG", "{pong}");
        seen.insert(seq_of(&pong), text);
    }
    let last_rx_seq = a.last_seq();
    assert_eq!(last_rx_seq, 4);

    // Lose the connection abruptly (no close frame), then let the call finish.
    drop(a);
    let dropped_at = Instant::now();
    stats_until(addr, "the lost session kept", |s| {
        s["detachedSessions"] == 1
    })
    .await;
    steps.open();
    stats_until(addr, "the call finished while disconnected", |s| {
        executions(s) == [1, 1, 0, 0, 0]
    })
    .await;

    let mut b = Client::connect_raw(&url).await;
    let fresh = b.session.clone();
    assert_ne!(fresh, old, "a new connection starts a fresh session");
    assert_eq!(b.hai["seq"], "1", "{}", b.hai);
    b.send(&resume_hai("resume-1", &old, &last_rx_seq.to_string()))
        .await;
    let (text5, env5) = b.recv_raw().await;
    assert_eq!(
        expect_on(&env5, &old, 5, "TOOL_UPDATE"),
        json!({"call_id": "s1", "status": "RUNNING", "progress": 60, "partial": {"step": 2}})
    );
    let (text6, env6) = b.recv_raw().await;
    assert_eq!(
        expect_on(&env6, &old, 6, "TOOL_DONE"),
        json!({"call_id": "s1", "status": "OK", "result": {"finished": "s1"}})
    );
    let (text7, env7) = b.recv_raw().await;
    assert_eq!(
        expect_on(&env7, &old, 7, "HAI"),
        confirming_hai_payload(true, "5")
    );
    eprintln!(
        "ws_resume_after_drop_mid_call: resumed {:?} after the drop",
        dropped_at.elapsed()
    );
    seen.extend([(5, text5), (6, text6), (7, text7)]);
    b.follow(&old, 7);
    let stats = get_json(addr, "/stats").await;
    assert_eq!(stats["detachedSessions"], 0, "{stats}");

    // The resumed session works and its counter continues.
    let done = b.call_done("e1", "echo", json!({"message": "back"})).await;
    assert_eq!(done["result"], json!({"echoed": "back"}));
    assert_eq!(b.last_seq(), 8);
    b.ping_marker().await;

    // The window agrees with what the client saw, byte for byte: nothing
    // was lost, nothing duplicated (a second TOOL_DONE would show up here).
    b.relax();
    b.request("REPLAY_REQUEST", json!({"from_seq": "1", "to_seq": "7"}))
        .await;
    let (_, replayed_hai) = b.recv_raw().await;
    assert_eq!(replayed_hai, hai1, "seq 1 is the first HAI, unchanged");
    for seq in 2..=7 {
        let (text, env) = b.recv_raw().await;
        assert_eq!(seq_of(&env), seq, "{env}");
        assert_eq!(text, seen[&seq], "replayed seq {seq} differs");
    }
    b.follow(&old, 9);
    b.ping_marker().await;
    let types: Vec<String> = seen
        .values()
        .map(|t| serde_json::from_str::<Value>(t).expect("JSON")["type"].to_string())
        .collect();
    assert_eq!(
        types,
        [
            "TOOL_UPDATE",
            "PONG",
            "PONG",
            "TOOL_UPDATE",
            "TOOL_DONE",
            "HAI"
        ]
        .map(|t| format!("{t:?}")),
        "everything after the first HAI, once each"
    );

    // The fresh session of the resuming connection was dropped.
    let mut c = Client::connect(&url).await;
    c.send(&resume_hai("resume-fresh", &fresh, "1")).await;
    let error = c.expect_error().await;
    assert_eq!(
        error["payload"],
        json!({"code": "RESUME_FAILED", "message": "Session cannot be resumed",
               "related_id": "resume-fresh", "detail": {"reason": "unknown session"}})
    );
    b.close().await;
    c.close().await;
    handle.shutdown().await;
}

/// §11.3 on every transport (the HTTP ones resume by an upstream POST of the
/// `HAI` to the fresh stream): the lost connection is noticed while idle and
/// its session kept; missed envelopes arrive once on the new connection, and
/// later upstream traffic naming the old session reaches it.
async fn resume_after_drop_mid_call(kind: Kind) {
    resume_after_drop(kind, true).await;
}

/// [`resume_after_drop_mid_call`] on HTTP streaming, without waiting for the
/// server to notice the loss first: resumption works whether the session is
/// kept or still attached to the dead connection.
#[tokio::test]
async fn stream_resume_after_drop_without_waiting_for_the_loss() {
    resume_after_drop(Kind::Stream, false).await;
}

async fn resume_after_drop(kind: Kind, wait_kept: bool) {
    let (tool, mut steps) = stepper();
    let (handle, _) = start(builder().builtin_tools().tool(tool)).await;
    let addr = handle.local_addr();

    let mut a = Conn::connect(kind, addr, None).await;
    let old = a.session.clone();
    a.send(&with_seq(
        "c1",
        "3",
        "TOOL_CALL",
        json!({"call_id": "s1", "tool": "stepper"}),
    ))
    .await;
    let (update_text, update) = a.recv_raw().await;
    assert_eq!(
        (seq_of(&update), &update["payload"]["progress"]),
        (2, &json!(10))
    );
    assert_eq!(steps.started().await, "s1");
    drop(a);
    let dropped_at = Instant::now();
    if wait_kept {
        stats_until(addr, "the lost connection gone, its session kept", |s| {
            s["activeConnections"] == 0 && s["detachedSessions"] == 1
        })
        .await;
    }
    steps.open();
    stats_until(addr, "the call finished while disconnected", |s| {
        executions(s)[1] == 1
    })
    .await;

    let mut b = Conn::connect(kind, addr, None).await;
    b.relax();
    // Claim less than was received: seq 2 comes again, byte-identical.
    b.send(&resume_hai("resume-1", &old, "1")).await;
    let (text, env) = b.recv_raw().await;
    expect_on(&env, &old, 2, "TOOL_UPDATE");
    assert_eq!(text, update_text, "replays are byte-identical");
    let (_, env) = b.recv_raw().await;
    assert_eq!(expect_on(&env, &old, 3, "TOOL_UPDATE")["progress"], 60);
    let (_, env) = b.recv_raw().await;
    assert_eq!(
        expect_on(&env, &old, 4, "TOOL_DONE"),
        json!({"call_id": "s1", "status": "OK", "result": {"finished": "s1"}})
    );
    let (_, env) = b.recv_raw().await;
    assert_eq!(
        expect_on(&env, &old, 5, "HAI"),
        confirming_hai_payload(kind == Kind::Ws, "3")
    );
    eprintln!(
        "resume_after_drop_mid_call({kind:?}): resumed {:?} after the drop",
        dropped_at.elapsed()
    );
    b.follow(&old, 5);
    // Upstream traffic (X-HAIP-Session: the old id on SSE) reaches the new connection.
    let done = b.call_done("e1", "echo", json!({"message": "again"})).await;
    assert_eq!(done["status"], "OK");
    if kind != Kind::Ws {
        // Targeted by the envelope `session` alone.
        let ping =
            json!({"id": "p", "session": old, "type": "PING", "payload": {"nonce": "by-envelope"}});
        assert_ok(&post(addr, "/haip/message", None, &[], &ping.to_string()).await);
        let pong = b.recv().await;
        assert_eq!(
            (&pong["type"], &pong["payload"]),
            (&json!("PONG"), &json!({"nonce": "by-envelope"}))
        );
    }
    b.ping_marker().await;
    let stats = get_json(addr, "/stats").await;
    assert_eq!(stats["detachedSessions"], 0, "{stats}");
    assert_eq!(executions(&stats), [2, 2, 0, 0, 0], "{stats}");
    drop(b);
    handle.shutdown().await;
}

/// §11.3, §14.3: resuming a live session from a second connection closes the
/// first (WebSocket 1000 `session resumed elsewhere`; streams end); the second
/// gets the replay and the `HAI`, and the running call finishes there.
async fn live_session_taken_over(kind: Kind) {
    let (tool, mut steps) = stepper();
    let (handle, _) = start(builder().tool(tool)).await;
    let addr = handle.local_addr();

    let mut a = Conn::connect(kind, addr, None).await;
    let old = a.session.clone();
    a.send(&with_seq(
        "c1",
        "1",
        "TOOL_CALL",
        json!({"call_id": "s1", "tool": "stepper"}),
    ))
    .await;
    let (t2, _) = a.recv_raw().await;
    assert_eq!(steps.started().await, "s1");
    a.send(&with_seq("p1", "2", "PING", json!({"nonce": "n"})))
        .await;
    let (t3, pong) = a.recv_raw().await;
    assert_eq!(pong["type"], "PONG");

    let mut b = Conn::connect(kind, addr, None).await;
    b.relax();
    b.send(&resume_hai("take", &old, "1")).await;
    for (seq, sent) in [(2, &t2), (3, &t3)] {
        let (text, env) = b.recv_raw().await;
        assert_eq!((seq_of(&env), &text), (seq, sent), "replay of seq {seq}");
    }
    let (_, env) = b.recv_raw().await;
    assert_eq!(
        expect_on(&env, &old, 4, "HAI"),
        confirming_hai_payload(kind == Kind::Ws, "2")
    );
    b.follow(&old, 4);

    let (rest, done, end) = a.read_to_end().await;
    assert!(
        rest.is_empty(),
        "nothing more on the first connection: {rest:?}"
    );
    assert!(!done, "no data: [DONE] for a takeover");
    let expected = match kind {
        Kind::Ws => Item::Closed(Some((1000, "session resumed elsewhere".to_owned()))),
        _ => Item::End,
    };
    assert_eq!(end, expected, "{kind:?}");

    steps.open();
    assert_eq!(b.expect_update("s1").await["progress"], 60);
    assert_eq!(
        b.expect_done("s1").await["result"],
        json!({"finished": "s1"})
    );
    b.ping_marker().await;
    stats_until(addr, "one connection, no kept session", |s| {
        s["activeConnections"] == 1 && s["detachedSessions"] == 0
    })
    .await;
    drop((a, b));
    handle.shutdown().await;
}

/// §11.3: a kept session that outlives `replay_window_time` expires: its
/// running call is cancelled (nothing sent, counted as cancelled), it is no
/// longer kept, and resuming it afterwards fails with `unknown session`.
#[tokio::test]
async fn expired_session_cancels_its_calls_and_is_unknown() {
    let (tool, mut steps) = stepper();
    let keep = Duration::from_millis(300);
    let (handle, url) = start(builder().tool(tool).limits(Limits {
        replay_window_time: keep,
        ..base_limits()
    }))
    .await;
    let addr = handle.local_addr();

    let mut a = Client::connect(&url).await;
    let old = a.session.clone();
    a.call("s1", "stepper", json!({})).await;
    assert_eq!(a.expect_update("s1").await["progress"], 10);
    assert_eq!(steps.started().await, "s1");
    let last = a.last_seq().to_string();
    drop(a);
    let dropped_at = Instant::now();

    assert_eq!(steps.cancelled().await, "s1", "expiry cancels the call");
    stats_until(addr, "the expired session's call counted cancelled", |s| {
        executions(s) == [1, 0, 0, 1, 0] && s["detachedSessions"] == 0
    })
    .await;
    assert!(
        dropped_at.elapsed() >= keep,
        "kept at least replay_window_time ({:?})",
        dropped_at.elapsed()
    );

    let mut b = Client::connect(&url).await;
    b.send(&resume_hai("late", &old, &last)).await;
    let error = b.expect_error().await;
    assert_eq!(error["payload"]["code"], "RESUME_FAILED", "{error}");
    assert_eq!(
        error["payload"]["detail"],
        json!({"reason": "unknown session"})
    );
    assert_eq!(error["payload"]["related_id"], "late");
    assert_eq!(b.session, b.hai["session"].as_str().unwrap_or_default());
    b.ping_marker().await;
    b.close().await;
    handle.shutdown().await;
}

/// §6.4, §11.3: a WebSocket closed cleanly by the client (close frame) is a
/// lost connection too: its session is kept and resumable.
#[tokio::test]
async fn clean_close_keeps_the_session_too() {
    let (tool, mut steps) = stepper();
    let (handle, url) = start(builder().tool(tool)).await;
    let addr = handle.local_addr();
    let mut a = Client::connect(&url).await;
    let old = a.session.clone();
    a.call("s1", "stepper", json!({})).await;
    a.expect_update("s1").await;
    steps.started().await;
    a.close().await;
    stats_until(addr, "the closed session kept", |s| {
        s["detachedSessions"] == 1
    })
    .await;
    steps.open();
    stats_until(addr, "the call finished", |s| executions(s)[1] == 1).await;
    let mut b = Client::connect_raw(&url).await;
    b.send(&resume_hai("r", &old, "2")).await;
    let kinds: Vec<(u64, String)> = within("replay and HAI", async {
        let mut out = Vec::new();
        loop {
            let env = b.recv().await;
            out.push((seq_of(&env), env["type"].as_str().unwrap_or("").to_owned()));
            if env["type"] == "HAI" {
                return out;
            }
        }
    })
    .await;
    assert_eq!(
        kinds,
        [
            (3, "TOOL_UPDATE".to_owned()),
            (4, "TOOL_DONE".to_owned()),
            (5, "HAI".to_owned())
        ]
    );
    b.close().await;
    handle.shutdown().await;
}

/// §11.3: a lost session is kept for `replay_window_time` from each loss:
/// two gaps of 60% of that window each (more than the window in total), with
/// a resumption in between, both survive, and the call that finished during
/// the first gap is delivered once.
#[tokio::test]
async fn each_loss_keeps_the_session_for_the_full_window() {
    let keep = Duration::from_secs(2);
    let gap = keep * 3 / 5;
    let (tool, mut steps) = stepper();
    let (handle, url) = start(builder().tool(tool).limits(Limits {
        replay_window_time: keep,
        ..base_limits()
    }))
    .await;
    let addr = handle.local_addr();
    let mut a = Client::connect(&url).await;
    let old = a.session.clone();
    a.call("s1", "stepper", json!({})).await;
    a.expect_update("s1").await; // seq 2
    steps.started().await;
    drop(a);
    let first_loss = Instant::now();
    stats_until(addr, "the session kept", |s| s["detachedSessions"] == 1).await;
    steps.open();
    // The gap under test, not synchronisation.
    tokio::time::sleep(gap).await;
    let mut b = Client::connect_raw(&url).await;
    b.send(&resume_hai("r1", &old, "2")).await;
    let types: Vec<Value> = [b.recv().await, b.recv().await, b.recv().await]
        .iter()
        .map(|e| e["type"].clone())
        .collect();
    assert_eq!(types, ["TOOL_UPDATE", "TOOL_DONE", "HAI"]);
    let first_gap = first_loss.elapsed();
    drop(b);
    let second_loss = Instant::now();
    stats_until(addr, "the session kept again", |s| {
        s["detachedSessions"] == 1
    })
    .await;
    tokio::time::sleep(gap).await;
    let mut c = Client::connect_raw(&url).await;
    c.send(&resume_hai("r2", &old, "5")).await;
    let hai = c.recv().await;
    assert_eq!(
        (&hai["type"], &hai["session"], seq_of(&hai)),
        (&json!("HAI"), &json!(old), 6),
        "{hai}"
    );
    eprintln!(
        "each_loss_keeps_the_session: gaps {first_gap:?} and {:?}, window {keep:?}",
        second_loss.elapsed()
    );
    c.follow(&old, 6);
    c.ping_marker().await;
    c.close().await;
    handle.shutdown().await;
}

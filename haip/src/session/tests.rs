//! Session-core tests: text in, envelopes out, no sockets.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::*;
use crate::Context;
use crate::exec::{self, CallEvent, CallKey};
use crate::session::SessionConfig as Config;
use crate::session::timers::STREAM_HEARTBEAT_CAP;
use crate::tool::{Registry, Tool, ToolError, builtin};

struct Harness {
    session: Session,
    events_tx: mpsc::UnboundedSender<CallEvent>,
    events: mpsc::UnboundedReceiver<CallEvent>,
    seq: u64,
    /// Start the calls the session asks for on the call runner (a runtime is
    /// needed), or keep them in `actions` (the fake-clock tests).
    run_calls: bool,
    actions: Vec<Action>,
}

impl Harness {
    fn new(config: Config, tools: Vec<Tool>) -> Harness {
        let registry = Registry::default();
        for tool in builtin::tools().into_iter().chain(tools) {
            registry.register(tool);
        }
        let shared = Arc::new(Shared::new(config, registry, Default::default()));
        let mut h = Harness::on(Session::new(shared, TransportKind::WebSocket, None), true);
        let hai = h.out();
        assert_eq!(hai.len(), 1);
        assert_eq!(hai[0]["type"], "HAI");
        h
    }

    fn on(session: Session, run_calls: bool) -> Harness {
        let (events_tx, events) = mpsc::unbounded_channel();
        Harness {
            session,
            events_tx,
            events,
            seq: 0,
            run_calls,
            actions: Vec::new(),
        }
    }

    fn send(&mut self, v: Value) -> Control {
        let control = self.session.handle_text(&v.to_string());
        self.act();
        control
    }

    /// Does what the session asked, as the driver would.
    fn act(&mut self) {
        while let Some(action) = self.session.poll_action() {
            let runner = &self.session.shared().runner;
            match action {
                Action::Start(start) if self.run_calls => {
                    if let Some((key, outcome)) = runner.start(*start, &self.events_tx) {
                        self.session.handle_event(CallEvent::Finished(key, outcome));
                    }
                }
                Action::Validate(validate) if self.run_calls => {
                    runner.start_validation(*validate, &self.events_tx);
                }
                action => self.actions.push(action),
            }
        }
    }

    /// Commits and returns everything in the outbox, checking `seq` continuity.
    fn out(&mut self) -> Vec<Value> {
        self.act();
        let mut all = Vec::new();
        while let Some(text) = self.session.commit_next() {
            let v: Value = serde_json::from_slice(&text).unwrap();
            self.seq += 1;
            assert_eq!(v["seq"], self.seq.to_string(), "seq gap at {v}");
            assert_eq!(v["session"], self.session.id());
            all.push(v);
        }
        all
    }

    /// Drains a replay: re-sent envelopes keep their old `seq`.
    fn session_replay(&mut self) -> Vec<Value> {
        std::iter::from_fn(|| self.session.commit_next())
            .map(|text| serde_json::from_slice(&text).unwrap())
            .collect()
    }

    /// Feeds call events until `done` TOOL_DONEs have been committed.
    async fn run_until_done(&mut self, done: usize) -> Vec<Value> {
        let mut all = self.out();
        let count = |all: &[Value]| all.iter().filter(|v| v["type"] == "TOOL_DONE").count();
        while count(&all) < done {
            let event = tokio::time::timeout(Duration::from_secs(10), self.events.recv())
                .await
                .expect("timed out waiting for a call event")
                .expect("event channel closed");
            self.session.handle_event(event);
            all.extend(self.out());
        }
        all
    }

    /// Lets time pass on the fake clock and handles the deadlines due.
    fn advance(&mut self, clock: &FakeClock, by: Duration) -> Control {
        clock.advance(by);
        let control = self.session.handle_timeout(clock.now());
        self.act();
        control
    }
}

fn call(call_id: &str, tool: &str, params: Value) -> Value {
    json!({"id": format!("req-{call_id}"), "type": "TOOL_CALL", "payload": {"call_id": call_id, "tool": tool, "params": params}})
}

fn gate_tool(name: &str, gate: Arc<tokio::sync::Notify>) -> Tool {
    Tool::builder(name)
        .handler(move |_: Value, ctx: Context| {
            let gate = gate.clone();
            async move {
                tokio::select! {
                    () = gate.notified() => Ok(json!({"released": true})),
                    () = ctx.cancelled() => Err(ToolError::cancelled()),
                }
            }
        })
        .build()
        .unwrap()
}

#[tokio::test]
async fn hai_is_first_and_matches_the_spec() {
    let shared = Arc::new(Shared::new(
        Config::default(),
        Registry::default(),
        Default::default(),
    ));
    let mut session = Session::new(shared, TransportKind::Stream, None);
    let hai: Value = serde_json::from_slice(&session.commit_next().unwrap()).unwrap();
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
    let gate = Arc::new(tokio::sync::Notify::new());
    let config = Config {
        max_inflight_calls: 1,
        max_queued_calls: 1,
        ..Config::default()
    };
    let mut h = Harness::new(config, vec![gate_tool("gate", gate.clone())]);
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
    let gate = Arc::new(tokio::sync::Notify::new());
    let mut h = Harness::new(Config::default(), vec![gate_tool("gate", gate.clone())]);
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
    let gate = Arc::new(tokio::sync::Notify::new());
    let config = Config {
        max_inflight_calls: 1,
        ..Config::default()
    };
    let mut h = Harness::new(config, vec![gate_tool("gate", gate)]);
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
    h.session.resume_failed(
        "unknown session",
        request.related_id.as_deref(),
        &request.hai,
    );
    let out = h.out();
    assert_eq!(out[0]["payload"]["code"], "RESUME_FAILED");
    assert_eq!(out[0]["payload"]["related_id"], "h");
    assert_eq!(out[0]["payload"]["detail"]["reason"], "unknown session");
    assert!(
        !h.session.heartbeat(),
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
    assert!(h.session.heartbeat());
    assert_eq!(h.out()[0]["type"], "PING");
    h.send(json!({"type": "HAI", "payload": {"accept_events": ["PONG"]}}));
    assert!(!h.session.heartbeat(), "filtered out");
    h.send(json!({"type": "PING", "payload": {}}));
    let out = h.out();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["type"], "PONG");
}

#[tokio::test]
async fn runs_are_limited_and_run_cancel_cancels_their_calls() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let config = Config {
        max_concurrent_runs: 1,
        ..Config::default()
    };
    let mut h = Harness::new(config, vec![gate_tool("gate", gate)]);
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
    let gate = Arc::new(tokio::sync::Notify::new());
    let mut h = Harness::new(Config::default(), vec![gate_tool("gate", gate)]);
    h.send(call("a", "gate", json!({})));
    h.send(call("b", "gate", json!({})));
    h.session.begin_shutdown();
    let out = h.run_until_done(2).await;
    let done: Vec<&Value> = out.iter().filter(|v| v["type"] == "TOOL_DONE").collect();
    for d in done {
        assert_eq!(d["payload"]["result"], json!({"reason": "server shutdown"}));
    }
    assert!(h.session.is_idle());
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
    while let Some(text) = h.session.commit_next() {
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
    while let Some(text) = h.session.commit_next() {
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
    assert_eq!(h.session.can_resume_from(4), Err("invalid last_rx_seq"));
    assert_eq!(h.session.can_resume_from(3), Ok(()));
    assert_eq!(h.session.can_resume_from(0), Ok(()));
    h.session.resumed(
        1,
        &crate::protocol::payload::Hai::default(),
        TransportKind::Stream,
    );
    let mut texts = Vec::new();
    while let Some(text) = h.session.commit_next() {
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
    assert_eq!(h.session.can_resume_from(2), Err("window exceeded"));
    assert_eq!(h.session.can_resume_from(6), Ok(()));
}

#[tokio::test]
async fn shutdown_releases_paused_channels_so_every_call_gets_its_tool_done() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let mut h = Harness::new(Config::default(), vec![gate_tool("gate", gate)]);
    h.send(json!({"type": "PAUSE_CHANNEL", "payload": {"channel": "AGENT"}}));
    h.send(call("a", "gate", json!({})));
    assert!(h.out().is_empty());
    h.session.begin_shutdown();
    let out = h.run_until_done(1).await;
    assert_eq!(
        out.last().unwrap()["payload"]["result"],
        json!({"reason": "server shutdown"})
    );
}

/// `strict_envelope` (HAIP.md §2.2): the full schema is required, and a
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
fn closed_tool() -> Tool {
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
    let gate = Arc::new(tokio::sync::Notify::new());
    let config = Config {
        max_inflight_calls: 1,
        max_queued_bytes: 100_000,
        ..Config::default()
    };
    let mut h = Harness::new(config, vec![gate_tool("gate", gate.clone())]);
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
    assert!(h.session.awaits_binary());
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
    h.session.binary_frame_missing();
    assert_eq!(h.out()[0]["payload"]["code"], "BINARY_FRAME_ERROR");
    assert!(!h.session.awaits_binary());
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
    let mut session = Session::new(shared, TransportKind::Stream, None);
    session.commit_next();
    session.handle_text(r#"{"type":"PING","bin_len":5,"payload":{"nonce":"s"}}"#);
    assert!(!session.awaits_binary());
    let pong: Value = serde_json::from_slice(&session.commit_next().unwrap()).unwrap();
    assert_eq!(pong["type"], "PONG");
}

/// A session on a fake clock with counting ids, outside any runtime.
fn on_fake_clock(config: Config) -> (Harness, Arc<FakeClock>) {
    let clock = Arc::new(FakeClock::new());
    let shared = Shared::new(config, Registry::default(), Default::default())
        .with_time(clock.clone(), Arc::new(CountingIds::default()));
    let session = Session::new(Arc::new(shared), TransportKind::WebSocket, None);
    let mut h = Harness::on(session, false);
    assert_eq!(h.out()[0]["type"], "HAI");
    (h, clock)
}

fn ping(h: &mut Harness, n: usize) {
    for i in 0..n {
        h.send(json!({"type": "PING", "payload": {"nonce": format!("n{i}")}}));
    }
    assert_eq!(h.out().len(), n, "one PONG per PING");
}

#[test]
fn ids_and_timestamps_come_from_the_injected_sources() {
    let (mut h, clock) = on_fake_clock(Config::default());
    assert_eq!(h.session.id(), "00000000-0000-4000-8000-000000000001");
    clock.advance(Duration::from_millis(1234));
    h.send(json!({"type": "PING", "payload": {"nonce": "a"}}));
    let pong = &h.out()[0];
    assert_eq!(pong["ts"], (1_767_225_600_000u64 + 1234).to_string());
    assert_eq!(pong["id"], "00000000-0000-4000-8000-000000000003");
    // A call without a call id or an envelope id gets the next one.
    let nameless = json!({"type": "TOOL_CALL", "payload": {"tool": "nope", "params": {}}});
    h.send(nameless);
    let error = &h.out()[0];
    assert_eq!(error["payload"]["code"], "TOOL_NOT_FOUND", "{error}");
    // Ids in order: the session (1), HAI (2), the PONG (3), the call (4), the ERROR (5).
    assert_eq!(
        error["payload"]["detail"]["call_id"],
        "00000000-0000-4000-8000-000000000004"
    );
    assert_eq!(error["id"], "00000000-0000-4000-8000-000000000005");
}

#[test]
fn replay_keeps_young_envelopes_and_lets_old_ones_expire_on_the_clock() {
    let config = Config {
        replay_window_messages: 10,
        replay_window_time: Duration::from_secs(60),
        ..Config::default()
    };
    let (mut h, clock) = on_fake_clock(config);
    ping(&mut h, 30); // seq 2..=31, HAI is 1
    // Young: everything is kept (up to 10 × replay_window_messages).
    h.send(json!({"type": "REPLAY_REQUEST", "payload": {"from_seq": "1"}}));
    let replayed = h.session_replay();
    assert_eq!(replayed.len(), 31, "all 31 envelopes replayed");
    // A minute later, the next commit lets all but the newest 10 go.
    clock.advance(Duration::from_secs(61));
    ping(&mut h, 1); // seq 32
    h.send(json!({"type": "REPLAY_REQUEST", "payload": {"from_seq": "1"}}));
    let answer = h.out();
    assert_eq!(answer[0]["payload"]["code"], "REPLAY_TOO_OLD", "{answer:?}");
    assert_eq!(answer[0]["payload"]["detail"]["oldest_seq"], "23");
    // That ERROR was seq 33 and pushed seq 23 out. 59 s on, seq 32 and 33
    // are still young; the next commit (34) keeps the newest 10: 25..=34.
    clock.advance(Duration::from_secs(59));
    ping(&mut h, 1);
    h.send(json!({"type": "REPLAY_REQUEST", "payload": {"from_seq": "25"}}));
    let kept = h.session_replay();
    assert_eq!(kept.len(), 10, "seq 25..=34 kept");
    assert_eq!(kept[0]["seq"], "25");
    assert_eq!(kept[9]["seq"], "34");
}

/// A session on a fake clock with counting ids, outside any runtime, with
/// `tools` registered (never run: the calls it starts are only recorded).
fn on_fake_clock_with(
    config: Config,
    tools: Vec<Tool>,
    transport: TransportKind,
) -> (Harness, Arc<FakeClock>) {
    let clock = Arc::new(FakeClock::new());
    let registry = Registry::default();
    for tool in tools {
        registry.register(tool);
    }
    let shared = Shared::new(config, registry, Default::default())
        .with_time(clock.clone(), Arc::new(CountingIds::default()));
    let session = Session::new(Arc::new(shared), transport, None);
    let mut h = Harness::on(session, false);
    assert_eq!(h.out()[0]["type"], "HAI");
    (h, clock)
}

/// A tool that is never run here (the fake-clock tests only record starts).
fn idle_tool(name: &str) -> Tool {
    Tool::builder(name)
        .handler(|_: Value, _ctx: Context| async move { Ok::<_, ToolError>(Value::Null) })
        .build()
        .unwrap()
}

impl Harness {
    /// The calls started so far, taken.
    fn started(&mut self) -> Vec<exec::Start> {
        std::mem::take(&mut self.actions)
            .into_iter()
            .filter_map(|action| match action {
                Action::Start(start) => Some(*start),
                _ => None,
            })
            .collect()
    }

    /// The call task for `key` stopped (after a cancel or a timeout).
    fn stopped(&mut self, key: CallKey) {
        let outcome = Box::new(crate::exec::Outcome::Stopped);
        self.session.handle_event(CallEvent::Finished(key, outcome));
        self.act();
    }
}

const MS: Duration = Duration::from_millis(1);

#[test]
fn a_tool_timeout_ends_the_call_on_the_clock_and_the_slot_waits_for_the_task() {
    let config = Config {
        tool_timeout: Some(Duration::from_secs(2)),
        ..Config::default()
    };
    let tools = vec![idle_tool("slow")];
    let (mut h, clock) = on_fake_clock_with(config, tools, TransportKind::WebSocket);
    h.send(call("c1", "slow", json!({})));
    let start = h.started().pop().expect("the call is started");
    assert_eq!(
        h.session.poll_timeout(),
        Some(clock.now() + Duration::from_secs(2))
    );
    h.advance(&clock, Duration::from_secs(2) - MS);
    assert!(h.out().is_empty(), "nothing before the deadline");
    assert!(!start.cancel.is_cancelled());
    h.advance(&clock, MS);
    let done = h.out();
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0]["type"], "TOOL_DONE");
    assert_eq!(done[0]["payload"]["status"], "ERROR");
    assert_eq!(done[0]["payload"]["result"]["code"], "TIMEOUT");
    assert_eq!(
        done[0]["payload"]["result"]["error"],
        "Tool slow timed out after 2000 ms"
    );
    assert!(start.cancel.is_cancelled(), "the task is told to stop");
    assert!(
        !h.session.is_idle(),
        "the task holds its slot until it stops"
    );
    h.stopped(start.key);
    assert!(h.session.is_idle());
    assert!(h.out().is_empty(), "exactly one TOOL_DONE");
}

#[test]
fn a_cancelled_call_gets_its_tool_done_when_the_grace_period_ends() {
    let config = Config {
        cancel_grace: Duration::from_secs(5),
        ..Config::default()
    };
    let tools = vec![idle_tool("stuck"), idle_tool("polite")];
    let (mut h, clock) = on_fake_clock_with(config, tools, TransportKind::WebSocket);
    h.send(call("c1", "stuck", json!({})));
    h.send(call("c2", "polite", json!({})));
    let started = h.started();
    let (stuck, polite) = (&started[0], &started[1]);
    let cancel = |id: &str| json!({"type": "TOOL_CANCEL", "payload": {"call_id": id, "reason": "changed my mind"}});
    h.send(cancel("c1"));
    h.send(cancel("c2"));
    let out = h.out();
    let statuses: Vec<_> = out.iter().map(|v| v["payload"]["status"].clone()).collect();
    assert_eq!(statuses, ["CANCELLING", "CANCELLING"], "{out:?}");
    assert!(stuck.cancel.is_cancelled() && polite.cancel.is_cancelled());
    // The polite tool stops at once: its TOOL_DONE now.
    h.stopped(polite.key);
    let done = h.out();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0]["payload"]["call_id"], "c2");
    assert_eq!(done[0]["payload"]["status"], "CANCELLED");
    // The stuck one gets its TOOL_DONE when the grace period ends, not later.
    h.advance(&clock, Duration::from_secs(5) - MS);
    assert!(h.out().is_empty());
    h.advance(&clock, MS);
    let done = h.out();
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0]["payload"]["call_id"], "c1");
    assert_eq!(done[0]["payload"]["status"], "CANCELLED");
    assert_eq!(done[0]["payload"]["result"]["reason"], "changed my mind");
    assert!(
        !h.session.is_idle(),
        "its task holds the slot until aborted"
    );
    h.stopped(stuck.key);
    assert!(h.session.is_idle());
    // Neither deadline fires again.
    h.advance(&clock, Duration::from_secs(60));
    assert!(h.out().iter().all(|v| v["type"] != "TOOL_DONE"));
}

#[test]
fn heartbeats_go_out_on_the_interval_and_streams_cap_it() {
    let config = Config {
        heartbeat_interval: Some(Duration::from_secs(30)),
        idle_timeout: None,
        ..Config::default()
    };
    let (mut h, clock) = on_fake_clock_with(config.clone(), vec![], TransportKind::WebSocket);
    h.advance(&clock, Duration::from_secs(30) - MS);
    assert!(h.out().is_empty());
    h.advance(&clock, MS);
    let ping = h.out();
    assert_eq!(ping.len(), 1);
    assert_eq!(ping[0]["type"], "PING");
    assert_eq!(
        h.session.poll_timeout(),
        Some(clock.now() + Duration::from_secs(30)),
        "the next one a full interval later"
    );
    // A client that filters PINGs gets none; on a WebSocket, nothing else.
    h.send(json!({"type": "HAI", "payload": {"haip_version": "1.1.2", "accept_events": ["TOOL_DONE"]}}));
    h.out();
    h.advance(&clock, Duration::from_secs(30));
    assert!(h.out().is_empty());
    assert!(h.actions.is_empty());

    // On a stream the interval is at most 15 s, and a client that filters
    // PINGs gets a transport keep-alive instead.
    let (mut h, clock) = on_fake_clock_with(config, vec![], TransportKind::Stream);
    assert_eq!(
        h.session.poll_timeout(),
        Some(clock.now() + STREAM_HEARTBEAT_CAP)
    );
    h.send(json!({"type": "HAI", "payload": {"haip_version": "1.1.2", "accept_events": ["TOOL_DONE"]}}));
    h.out();
    h.advance(&clock, Duration::from_secs(15));
    assert!(h.out().is_empty());
    assert!(matches!(h.actions.as_slice(), [Action::KeepAlive]));
}

#[test]
fn a_connection_idle_for_idle_timeout_is_closed_and_input_puts_it_off() {
    let config = Config {
        heartbeat_interval: None,
        idle_timeout: Some(Duration::from_secs(300)),
        ..Config::default()
    };
    let (mut h, clock) = on_fake_clock_with(config, vec![], TransportKind::WebSocket);
    h.advance(&clock, Duration::from_secs(200));
    h.session.touch(clock.now());
    assert_eq!(
        h.advance(&clock, Duration::from_secs(100)),
        Control::Continue
    );
    assert_eq!(
        h.session.poll_timeout(),
        Some(clock.now() + Duration::from_secs(200)),
        "checked again 300 s after the last input"
    );
    assert_eq!(
        h.advance(&clock, Duration::from_secs(200) - MS),
        Control::Continue
    );
    assert_eq!(
        h.advance(&clock, MS),
        Control::Close {
            code: 1001,
            reason: "idle",
            keep_session: true
        }
    );
    assert_eq!(h.session.poll_timeout(), None, "closed once");
    // Parked, a session has no connection to be idle on, nor heartbeats.
    let (mut h, clock) = on_fake_clock_with(Config::default(), vec![], TransportKind::WebSocket);
    h.session.disconnected();
    assert_eq!(h.session.poll_timeout(), None);
    assert_eq!(
        h.advance(&clock, Duration::from_secs(3600)),
        Control::Continue
    );
    assert!(h.out().is_empty());
    // Resumed on a new connection: both run again from then.
    h.session.connected(clock.now());
    assert_eq!(
        h.session.poll_timeout(),
        Some(clock.now() + Duration::from_secs(30))
    );
}

#[test]
fn a_binary_frame_not_sent_within_10_s_is_reported_missing() {
    let config = Config {
        heartbeat_interval: None,
        idle_timeout: None,
        ..Config::default()
    };
    let (mut h, clock) = on_fake_clock_with(config, vec![], TransportKind::WebSocket);
    h.send(
        json!({"id": "b1", "type": "AUDIO_CHUNK", "bin_len": 3, "payload": {"mime": "audio/wav"}}),
    );
    assert!(h.session.awaits_binary());
    h.advance(&clock, Duration::from_secs(10) - MS);
    assert!(h.out().is_empty());
    h.advance(&clock, MS);
    let error = h.out();
    assert_eq!(error.len(), 1, "{error:?}");
    assert_eq!(error[0]["payload"]["code"], "BINARY_FRAME_ERROR");
    assert_eq!(error[0]["payload"]["related_id"], "b1");
    assert!(!h.session.awaits_binary());
}

#[test]
fn resumption_needs_the_missed_envelopes_still_young_or_among_the_newest() {
    let config = Config {
        replay_window_messages: 10,
        replay_window_time: Duration::from_secs(60),
        heartbeat_interval: None,
        idle_timeout: None,
        ..Config::default()
    };
    let (mut h, clock) = on_fake_clock_with(config, vec![], TransportKind::WebSocket);
    ping(&mut h, 30); // seq 2..=31
    assert_eq!(h.session.can_resume_from(0), Ok(()), "young: all kept");
    assert_eq!(h.session.can_resume_from(32), Err("invalid last_rx_seq"));
    // A minute on, the next commit keeps only the newest 10 (23..=32).
    h.advance(&clock, Duration::from_secs(61));
    ping(&mut h, 1);
    assert_eq!(h.session.can_resume_from(22), Ok(()));
    assert_eq!(h.session.can_resume_from(21), Err("window exceeded"));
}

#[test]
fn only_calls_with_small_params_are_polled_on_the_session_task() {
    let tools = vec![idle_tool("t")];
    let (mut h, _clock) = on_fake_clock_with(Config::default(), tools, TransportKind::WebSocket);
    h.send(call("small", "t", json!({"s": "x"})));
    let small = h.started();
    assert_eq!(small.len(), 1);
    assert!(small[0].inline, "a small call is tried inline");
    // Large params: validated off the session's task, then run in a task of
    // their own from the start.
    h.send(call("large", "t", json!({"s": "x".repeat(LARGE_PARAMS)})));
    let Some(Action::Validate(validate)) = h.actions.pop() else {
        panic!("large params are validated off the session's task");
    };
    let verdict = Box::new(exec::Validation::Valid(validate.params));
    h.session
        .handle_event(CallEvent::Validated(validate.key, verdict));
    h.act();
    let large = h.started();
    assert_eq!(large.len(), 1);
    assert!(
        !large[0].inline,
        "a large call never runs on the session's task"
    );
}

/// A tool that asks for `{n: integer 1..=3}` and returns the answer.
fn asking_tool() -> Tool {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Pick {
        #[schemars(range(min = 1, max = 3))]
        n: u8,
    }
    Tool::builder("pick")
        .handler(|_: Value, ctx: Context| async move {
            match ctx.ask::<Pick>("Pick one").await? {
                crate::Answer::Accepted(pick) => Ok(json!({"n": pick.n})),
                _ => Ok(json!({"n": null})),
            }
        })
        .build()
        .unwrap()
}

/// Reads call events into the session until an envelope of `ty` is out.
async fn until(h: &mut Harness, ty: &str) -> Vec<Value> {
    let mut all = h.out();
    while !all.iter().any(|v| v["type"] == ty) {
        let event = tokio::time::timeout(Duration::from_secs(10), h.events.recv())
            .await
            .expect("timed out waiting for a call event")
            .expect("event channel closed");
        h.session.handle_event(event);
        all.extend(h.out());
    }
    all
}

#[tokio::test]
async fn questions_are_asked_checked_and_answered() {
    let mut h = Harness::new(Config::default(), vec![asking_tool()]);
    h.send(json!({"type": "HAI", "payload": {"capabilities": {"tool_input": true}}}));
    h.send(call("q1", "pick", json!({})));
    let out = until(&mut h, "TOOL_UPDATE").await;
    let asked = &out.last().unwrap()["payload"];
    assert_eq!(asked["status"], "WAITING_INPUT", "{asked}");
    let request = &asked["input_request"];
    assert_eq!(request["message"], "Pick one");
    assert_eq!(
        request["schema"]["properties"]["n"],
        json!({"type": "integer", "minimum": 1, "maximum": 3})
    );
    let request_id = request["request_id"].as_str().unwrap().to_owned();
    let input = |payload: Value| json!({"id": "in-1", "type": "TOOL_INPUT", "payload": payload});

    // No action: malformed. Unknown request: not found. Out of range: invalid.
    h.send(input(json!({"call_id": "q1", "request_id": request_id})));
    let out = h.out();
    assert_eq!(out[0]["payload"]["code"], "INVALID_MESSAGE", "{out:?}");
    assert_eq!(out[0]["payload"]["detail"]["reason"], "invalid action");
    h.send(input(
        json!({"call_id": "q1", "request_id": "other", "action": "decline"}),
    ));
    let out = h.out();
    assert_eq!(out[0]["payload"]["code"], "REQUEST_NOT_FOUND", "{out:?}");
    assert_eq!(out[0]["payload"]["message"], "No open input request other");
    h.send(input(
        json!({"call_id": "q1", "request_id": request_id, "action": "accept", "content": {"n": 9}}),
    ));
    let out = h.out();
    assert_eq!(out[0]["payload"]["code"], "INVALID_PARAMS", "{out:?}");
    assert_eq!(out[0]["payload"]["related_id"], "in-1");
    assert_eq!(out[0]["payload"]["detail"]["violations"][0]["path"], "/n");

    // Still open: the right answer goes to the tool.
    h.send(input(
        json!({"call_id": "q1", "request_id": request_id, "action": "accept", "content": {"n": 2}}),
    ));
    let out = until(&mut h, "TOOL_DONE").await;
    assert_eq!(
        out[0]["payload"],
        json!({"call_id": "q1", "status": "RUNNING"})
    );
    let done = &out.last().unwrap()["payload"];
    assert_eq!(done["result"], json!({"n": 2}), "{done}");
}

#[tokio::test]
async fn a_client_without_tool_input_is_never_asked() {
    let mut h = Harness::new(Config::default(), vec![asking_tool()]);
    h.send(call("q1", "pick", json!({})));
    let out = until(&mut h, "TOOL_DONE").await;
    assert_eq!(out.len(), 1, "no question: {out:?}");
    let done = &out[0]["payload"];
    assert_eq!(done["status"], "ERROR");
    assert_eq!(done["result"]["code"], "TOOL_EXECUTION_ERROR");
    assert_eq!(
        done["result"]["error"],
        "the client cannot answer questions (it did not declare that it can)"
    );
}

#[tokio::test]
async fn open_questions_per_call_are_bounded() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Yes {
        #[allow(dead_code)]
        yes: bool,
    }
    let greedy = Tool::builder("greedy")
        .handler(|_: Value, ctx: Context| async move {
            let asks = (0..20).map(|i| {
                let ctx = ctx.clone();
                async move { ctx.ask::<Yes>(format!("question {i}")).await }
            });
            let answers = futures_util::future::join_all(asks).await;
            let refused = answers.iter().filter(|a| a.is_err()).count();
            Ok(json!({"refused": refused}))
        })
        .build()
        .unwrap();
    let mut h = Harness::new(Config::default(), vec![greedy]);
    h.send(json!({"type": "HAI", "payload": {"capabilities": {"tool_input": true}}}));
    h.send(call("g1", "greedy", json!({})));
    let mut asked = Vec::new();
    while asked.len() < crate::context::MAX_OPEN_QUESTIONS {
        for v in until(&mut h, "TOOL_UPDATE").await {
            asked.push(v["payload"]["input_request"]["request_id"].clone());
        }
    }
    assert_eq!(asked.len(), crate::context::MAX_OPEN_QUESTIONS);
    // Answering every open one lets the tool finish: the other 4 were refused.
    for request_id in asked {
        h.send(json!({"type": "TOOL_INPUT", "payload": {"call_id": "g1", "request_id": request_id, "action": "decline"}}));
    }
    let out = until(&mut h, "TOOL_DONE").await;
    let done = &out.last().unwrap()["payload"];
    assert_eq!(done["result"], json!({"refused": 4}), "{done}");
}

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
    };
    let shared = Arc::clone(h.session.shared());
    let (mut session, lost) = Session::restore(shared, TransportKind::WebSocket, "gone", snapshot);
    assert_eq!(session.id(), "gone");
    assert!(!session.has_outbound(), "no HAI of its own");
    assert_eq!(session.can_resume_from(4), Err("invalid last_rx_seq"));
    assert_eq!(session.can_resume_from(1), Ok(()));
    session.resumed(
        1,
        &crate::protocol::payload::Hai::default(),
        TransportKind::WebSocket,
    );
    session.end_lost_calls(lost);
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
    };
    let shared = Arc::clone(h.session.shared());
    let (mut session, lost) = Session::restore(shared, TransportKind::WebSocket, "gone", snapshot);
    session.resumed(
        1,
        &crate::protocol::payload::Hai::default(),
        TransportKind::WebSocket,
    );
    session.end_lost_calls(lost);
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

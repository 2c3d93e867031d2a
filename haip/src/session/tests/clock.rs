//! Time on a fake clock, outside any runtime: ids and timestamps, the replay
//! window, tool timeouts, cancel grace, heartbeats, idle and binary waits.

use super::*;

/// A session on a fake clock with counting ids, outside any runtime.
pub(super) fn on_fake_clock(config: Config) -> (Harness, Arc<FakeClock>) {
    let clock = Arc::new(FakeClock::new());
    let shared = Shared::new(config, Registry::default(), Default::default())
        .with_time(clock.clone(), Arc::new(CountingIds::default()));
    let session = Session::new(Arc::new(shared), Door::WebSocket, None);
    let mut h = Harness::on(session, false);
    assert_eq!(h.out()[0]["type"], "HAI");
    (h, clock)
}

pub(super) fn ping(h: &mut Harness, n: usize) {
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
pub(super) fn on_fake_clock_with(
    config: Config,
    tools: Vec<Tool>,
    door: Door,
) -> (Harness, Arc<FakeClock>) {
    let clock = Arc::new(FakeClock::new());
    let registry = Registry::default();
    for tool in tools {
        registry.register(tool);
    }
    let shared = Shared::new(config, registry, Default::default())
        .with_time(clock.clone(), Arc::new(CountingIds::default()));
    let session = Session::new(Arc::new(shared), door, None);
    let mut h = Harness::on(session, false);
    assert_eq!(h.out()[0]["type"], "HAI");
    (h, clock)
}

/// A tool that is never run here (the fake-clock tests only record starts).
pub(super) fn idle_tool(name: &str) -> Tool {
    Tool::builder(name)
        .handler(|_: Value, _ctx: Context| async move { Ok::<_, ToolError>(Value::Null) })
        .build()
        .unwrap()
}

impl Harness {
    /// The calls started so far, taken.
    pub(super) fn started(&mut self) -> Vec<exec::Start> {
        std::mem::take(&mut self.actions)
            .into_iter()
            .filter_map(|action| match action {
                Action::Start(start) => Some(*start),
                _ => None,
            })
            .collect()
    }

    /// The call task for `key` stopped (after a cancel or a timeout).
    pub(super) fn stopped(&mut self, key: CallKey) {
        let outcome = Box::new(crate::exec::Outcome::Stopped);
        self.session.handle_event(CallEvent::Finished(key, outcome));
        self.act();
    }
}

pub(super) const MS: Duration = Duration::from_millis(1);

/// Lets `by` pass on the fake clock, checking that nothing is sent before
/// its last millisecond, and gives what is sent then.
fn out_at(h: &mut Harness, clock: &FakeClock, by: Duration) -> Vec<Value> {
    h.advance(clock, by - MS);
    assert!(h.out().is_empty(), "nothing before the deadline");
    h.advance(clock, MS);
    h.out()
}

#[test]
fn a_tool_timeout_ends_the_call_on_the_clock_and_the_slot_waits_for_the_task() {
    let config = Config {
        tool_timeout: Some(Duration::from_secs(2)),
        ..Config::default()
    };
    let tools = vec![idle_tool("slow")];
    let (mut h, clock) = on_fake_clock_with(config, tools, Door::WebSocket);
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
    let (mut h, clock) = on_fake_clock_with(config, tools, Door::WebSocket);
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
    let done = out_at(&mut h, &clock, Duration::from_secs(5));
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
    let (mut h, clock) = on_fake_clock_with(config.clone(), vec![], Door::WebSocket);
    let ping = out_at(&mut h, &clock, Duration::from_secs(30));
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
    let (mut h, clock) = on_fake_clock_with(config, vec![], Door::Stream);
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
    let (mut h, clock) = on_fake_clock_with(config, vec![], Door::WebSocket);
    h.advance(&clock, Duration::from_secs(200));
    h.session.handle_traffic(clock.now());
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
    let (mut h, clock) = on_fake_clock_with(Config::default(), vec![], Door::WebSocket);
    h.session.handle_disconnect();
    assert_eq!(h.session.poll_timeout(), None);
    assert_eq!(
        h.advance(&clock, Duration::from_secs(3600)),
        Control::Continue
    );
    assert!(h.out().is_empty());
    // Resumed on a new connection: both run again from then.
    h.session.handle_connect(clock.now());
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
    let (mut h, clock) = on_fake_clock_with(config, vec![], Door::WebSocket);
    h.send(
        json!({"id": "b1", "type": "AUDIO_CHUNK", "bin_len": 3, "payload": {"mime": "audio/wav"}}),
    );
    assert!(h.session.is_awaiting_binary());
    let error = out_at(&mut h, &clock, Duration::from_secs(10));
    assert_eq!(error.len(), 1, "{error:?}");
    assert_eq!(error[0]["payload"]["code"], "BINARY_FRAME_ERROR");
    assert_eq!(error[0]["payload"]["related_id"], "b1");
    assert!(!h.session.is_awaiting_binary());
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
    let (mut h, clock) = on_fake_clock_with(config, vec![], Door::WebSocket);
    ping(&mut h, 30); // seq 2..=31
    assert_eq!(h.session.can_resume_from(0), Ok(()), "young: all kept");
    assert_eq!(
        h.session.can_resume_from(32),
        Err(crate::session::ResumeRefused::InvalidLastRxSeq)
    );
    // A minute on, the next commit keeps only the newest 10 (23..=32).
    h.advance(&clock, Duration::from_secs(61));
    ping(&mut h, 1);
    assert_eq!(h.session.can_resume_from(22), Ok(()));
    assert_eq!(
        h.session.can_resume_from(21),
        Err(crate::session::ResumeRefused::WindowExceeded)
    );
}

#[test]
fn only_calls_with_small_params_are_polled_on_the_session_task() {
    let tools = vec![idle_tool("t")];
    let (mut h, _clock) = on_fake_clock_with(Config::default(), tools, Door::WebSocket);
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

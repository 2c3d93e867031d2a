//! Fuzzing the decoder and the session core on stable Rust, driven by proptest.
//!
//! Two families of properties, both fed through the same socket-less harness
//! ([`Run`]) that plays the transport (HAIP.md §2.2 step 1, §13) and the client:
//!
//! 1. **Decoder.** Arbitrary bytes, arbitrary strings and mutated valid
//!    envelopes (bytes flipped, inserted, deleted, repeated, cut off) go through
//!    [`decode`] and through a session's `handle_text` / `handle_binary`. Nothing
//!    panics; the decoder agrees with a plain `serde_json::Value` reading of the
//!    same text (§2.2 steps 2–5); every envelope the session commits is JSON
//!    with the seven required fields (§2.1, §2.4).
//! 2. **Envelope sequences.** Random sequences of inbound units — `TOOL_CALL`s
//!    whose call ids collide (string, numeric, absent), aimed at fast, slow,
//!    gated, panicking, failing, timing-out and unknown tools with valid,
//!    invalid, absent and large params; `TOOL_CANCEL`, runs, `PING`,
//!    `REPLAY_REQUEST`, pauses, `FLOW_UPDATE`s with extreme numbers, `HAI`s,
//!    two-frame binary (right, wrong and missing frames), junk — interleaved with
//!    draining the outbox, letting tool tasks run and letting time pass (the
//!    runtime's paused clock and the session's injected one together, up to
//!    400 s at a step, past `replay_window_time`), under a
//!    handful of configurations (small slot and queue limits, strict flow
//!    control, a tight outbox, small outbound messages, short timeouts). At the
//!    end the harness resumes every channel, winds the calls down (server
//!    shutdown, or releasing the gated tools) and runs the event loop until the
//!    session is idle. Checked: no panic; committed `seq`s run 1, 2, 3, … with no
//!    gap, and replays are byte-identical (§11); exactly one `TOOL_DONE` per
//!    accepted `TOOL_CALL`, after every `TOOL_UPDATE` of that call (§6.4–§6.7,
//!    §6.9); a duplicate `call_id` is refused exactly while the call holding it
//!    is active; byte accounting back to zero (§18.1).
//!
//! Tool tasks run on a current-thread tokio runtime whose clock is paused: tool
//! timeouts and the cancel grace period elapse as soon as nothing else can run,
//! so a call that never ends fails an assertion instead of hanging the test.
//!
//! By default the file runs 2048 decoder cases, 256 arbitrary-input sessions
//! and 256 envelope sequences: about 5 s in a debug build on 2 cores. Ask for
//! more with proptest's own variable (it sets every test's case count here;
//! `PROPTEST_RNG_SEED=<n>` replays a run):
//!
//! ```text
//! PROPTEST_CASES=20000 cargo test -p haip --lib session::fuzz --release
//! ```
//!
//! No regression files are written: a case found failing is shrunk and kept
//! below as a test of its own.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::Bytes;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{Index, select};
use proptest::strategy::Union;
use serde_json::{Map, Value, json};
use tokio::sync::{Semaphore, mpsc};

use super::{
    Action, Backlog, Clock, Control, FakeClock, Overflow, RandomIds, Session, Shared, TransportKind,
};
use crate::Context;
use crate::exec::CallEvent;
use crate::protocol::{Channel, ErrorCode, EventType, Inbound, decode, is_binary_envelope};
use crate::session::SessionConfig as Config;
use crate::tool::{Registry, Tool, ToolError, builtin};

/// Cases of the decoder-only property (cheap: no session).
const DECODE_CASES: u32 = 2048;
/// Cases of the arbitrary-input-into-a-session property.
const INPUT_CASES: u32 = 256;
/// Cases of the envelope-sequence property (a runtime and a session each).
const SEQUENCE_CASES: u32 = 256;

/// How long (on the paused clock) the wind-down may wait for a call event
/// before the calls count as never ending: far beyond any timeout or grace.
const HANG: Duration = Duration::from_secs(3600);

/// The channel names the server sends on (HAIP.md §4).
const CHANNELS: [&str; 5] = ["USER", "AGENT", "SYSTEM", "AUDIO_IN", "AUDIO_OUT"];

/// Returns `Err(message)` from the enclosing function unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// `default_cases`, unless `PROPTEST_CASES` asks for another count. No
/// failure-persistence files: they would land in the source tree.
fn proptest_config(default_cases: u32) -> ProptestConfig {
    let base = ProptestConfig::default();
    let cases = if std::env::var_os("PROPTEST_CASES").is_some() {
        base.cases
    } else {
        default_cases
    };
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..base
    }
}

/// A runtime per case: tool tasks interleave with the harness only where it
/// yields, and the paused clock makes timeouts and grace periods instant.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
}

/// At most `max` characters of `text`, for failure messages.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        format!("{}…", text.chars().take(max).collect::<String>())
    }
}

// ----- tools --------------------------------------------------------------------

/// Tools covering every way a call can end (HAIP.md §6.4 outcome table).
/// `gate` and `stubborn` wait for a permit of `gate`; the harness adds
/// permits as a step and closes it to let them all finish.
fn fuzz_tools(gate: &Arc<Semaphore>) -> Vec<Tool> {
    let built = |tool: Result<Tool, crate::Error>| tool.expect("fuzz tool definitions are valid");
    let waits = Arc::clone(gate);
    let ignores_cancel = Arc::clone(gate);
    vec![
        // Ends when released, or promptly when cancelled.
        built(
            Tool::builder("gate")
                .handler(move |_: Value, ctx: Context| {
                    let gate = Arc::clone(&waits);
                    async move {
                        tokio::select! {
                            permit = gate.acquire() => {
                                if let Ok(permit) = permit {
                                    permit.forget();
                                }
                                Ok(json!({"released": true}))
                            }
                            () = ctx.cancelled() => Err(ToolError::cancelled()),
                        }
                    }
                })
                .build(),
        ),
        // Ignores cancellation: stopped by the abort after the grace period.
        built(
            Tool::builder("stubborn")
                .handler(move |_: Value, _ctx: Context| {
                    let gate = Arc::clone(&ignores_cancel);
                    async move {
                        if let Ok(permit) = gate.acquire().await {
                            permit.forget();
                        }
                        Ok::<_, ToolError>(json!("finally"))
                    }
                })
                .build(),
        ),
        built(
            Tool::builder("boom")
                .handler(|params: Value, _ctx: Context| async move {
                    if params.is_object() {
                        panic!("the boom tool panics on purpose");
                    }
                    Ok::<_, ToolError>(params)
                })
                .build(),
        ),
        built(
            Tool::builder("fail")
                .handler(|_: Value, _ctx: Context| async move {
                    Err::<Value, _>(
                        ToolError::execution("the fail tool fails")
                            .with_details(json!({"why": "on purpose"})),
                    )
                })
                .build(),
        ),
        // Progress, merged while unsent, clamped, NaN dropped (HAIP.md §6.5).
        built(
            Tool::builder("steps")
                .handler(|_: Value, ctx: Context| async move {
                    for step in 0..4u8 {
                        ctx.progress_with(f64::from(step) * 40.0, json!({"step": step}));
                        tokio::task::yield_now().await;
                    }
                    ctx.progress(f64::NAN);
                    Ok::<_, ToolError>(json!({"steps": 4}))
                })
                .build(),
        ),
        // Reports a cancellation nobody asked for.
        built(
            Tool::builder("quitter")
                .handler(|_: Value, _ctx: Context| async move {
                    Err::<Value, _>(ToolError::cancelled())
                })
                .build(),
        ),
        // Times out, then ignores the cancel until aborted.
        built(
            Tool::builder("slowpoke")
                .timeout(Duration::from_millis(50))
                .handler(|_: Value, _ctx: Context| async move {
                    tokio::time::sleep(Duration::from_secs(600)).await;
                    Ok::<_, ToolError>(json!("late"))
                })
                .build(),
        ),
        // A closed schema: unknown params are violations.
        built(
            Tool::builder("closed")
                .input_schema(json!({
                    "type": "object",
                    "properties": {"s": {"type": "string"}},
                    "required": ["s"],
                    "additionalProperties": false
                }))
                .handler(|params: Value, _ctx: Context| async move {
                    Ok::<_, ToolError>(json!({"len": params["s"].as_str().map_or(0, str::len)}))
                })
                .build(),
        ),
        // Progress and a result over a small `max_outbound_message_bytes`.
        built(
            Tool::builder("big")
                .handler(|_: Value, ctx: Context| async move {
                    ctx.progress_with(50.0, "p".repeat(6000));
                    tokio::task::yield_now().await;
                    Ok::<_, ToolError>(json!({"blob": "b".repeat(6000)}))
                })
                .build(),
        ),
        built(
            Tool::builder("nullish")
                .handler(|_: Value, _ctx: Context| async move { Ok::<_, ToolError>(Value::Null) })
                .build(),
        ),
        // A result violating its output schema (`strict_output_validation`).
        built(
            Tool::builder("liar")
                .output_schema(json!({
                    "type": "object",
                    "properties": {"n": {"type": "number"}},
                    "required": ["n"]
                }))
                .handler(|_: Value, _ctx: Context| async move {
                    Ok::<_, ToolError>(json!({"n": "not a number"}))
                })
                .build(),
        ),
    ]
}

// ----- the harness ----------------------------------------------------------------

/// A `TOOL_CALL` that reached dispatch (HAIP.md §2.2 step 6 onwards), as the
/// oracle sees it.
#[derive(Debug)]
struct CallUnit {
    /// Its call id (§6.4 step 1); `None` when the server makes one up.
    call_id: Option<String>,
    /// The `run_id` / `thread_id` every envelope about it carries (§6.9).
    run_id: Option<String>,
    thread_id: Option<String>,
    /// Whether `tool` names a registered tool.
    registered: bool,
    /// What it was refused with, if anything.
    duplicate: bool,
    dropped: bool,
    /// Whether it must be refused as a duplicate, when the harness could tell
    /// (everything the session said so far was committed and seen).
    expect_duplicate: Option<bool>,
    /// The unit, for failure messages.
    text: String,
}

impl CallUnit {
    /// Accepted: neither a duplicate (§6.4 step 2) nor dropped by strict flow
    /// control (§12.3). Every accepted call is owed exactly one `TOOL_DONE`.
    fn accepted(&self) -> bool {
        !self.duplicate && !self.dropped
    }
}

/// An envelope waiting for its binary frame (HAIP.md §13), as modelled.
struct Awaiting {
    inbound: Inbound,
    expected: u64,
    /// Whether its id was fresh when it arrived.
    fresh: bool,
    /// When it arrived (the session's clock): the frame is due 10 s later.
    since: std::time::Instant,
}

/// A session with no socket, the transport and client around it, and the
/// oracle: a model of which `TOOL_CALL`s are accepted, checked against what
/// the session commits.
///
/// Which unit an `ERROR` is about: the one whose envelope id is its
/// `related_id`, when that id was fresh. A unit without a fresh id is
/// bracketed by draining the outbox before and after it: `ERROR`s go out on
/// `SYSTEM`, which is never paused or held for credit, so everything such a
/// unit causes on `SYSTEM` is committed in between.
struct Run {
    session: Session,
    events_tx: mpsc::UnboundedSender<CallEvent>,
    events: mpsc::UnboundedReceiver<CallEvent>,
    shared: Arc<Shared>,
    /// The session's clock: moved with the runtime's paused one.
    clock: Arc<FakeClock>,
    gate: Arc<Semaphore>,
    websocket: bool,
    /// Fresh committed envelopes, in `seq` order.
    out: Vec<Value>,
    /// Every committed text by `seq`, to check replays byte for byte.
    texts: HashMap<u64, Bytes>,
    newest: u64,
    awaiting: Option<Awaiting>,
    /// Envelope ids of every unit sent.
    seen_ids: HashSet<String>,
    calls: Vec<CallUnit>,
    /// Fresh envelope id → the call it names.
    by_related: HashMap<String, usize>,
    /// The call being bracketed by drains.
    window: Option<usize>,
    /// Committed `TOOL_DONE`s per call id.
    dones: HashMap<String, usize>,
    /// `BINARY_FRAME_ERROR`s owed: one per awaited envelope discarded.
    frame_errors: usize,
}

impl Run {
    fn new(config: Config, websocket: bool) -> Result<Run, String> {
        config
            .validate()
            .map_err(|e| format!("the fuzzed configuration is invalid: {e}"))?;
        let gate = Arc::new(Semaphore::new(0));
        let registry = Registry::default();
        for tool in builtin::tools().into_iter().chain(fuzz_tools(&gate)) {
            registry.register(tool);
        }
        let clock = Arc::new(FakeClock::new());
        let shared = Shared::new(config, registry, Default::default())
            .with_time(clock.clone(), Arc::new(RandomIds));
        let shared = Arc::new(shared);
        let (tx, events) = mpsc::unbounded_channel();
        let transport = if websocket {
            TransportKind::WebSocket
        } else {
            TransportKind::Stream
        };
        let session = Session::new(Arc::clone(&shared), transport, None);
        let mut run = Run {
            session,
            events_tx: tx,
            events,
            shared,
            clock,
            gate,
            websocket,
            out: Vec::new(),
            texts: HashMap::new(),
            newest: 0,
            awaiting: None,
            seen_ids: HashSet::new(),
            calls: Vec::new(),
            by_related: HashMap::new(),
            window: None,
            dones: HashMap::new(),
            frame_errors: 0,
        };
        run.drain()?;
        ensure!(
            run.out.len() == 1 && run.out[0]["type"] == "HAI",
            "the server does not speak first with HAI: {:?}",
            run.out
        );
        Ok(run)
    }

    fn config(&self) -> &Config {
        &self.shared.config
    }

    // ----- inbound ----------------------------------------------------------

    /// One inbound text message.
    fn text(&mut self, text: &str) -> Result<(), String> {
        self.unit(text, None)
    }

    /// One inbound binary message (WebSocket only: streams have none).
    fn binary(&mut self, bytes: &[u8]) -> Result<(), String> {
        if !self.websocket {
            return Ok(());
        }
        if bytes.len() > self.config().max_message_bytes {
            let control = self.session.message_too_large();
            return self.after(control);
        }
        if let Some(awaiting) = self.awaiting.take() {
            // The frame an envelope waits for: handled if the length
            // matches, else both are discarded with an error.
            let matches = bytes.len() as u64 == awaiting.expected;
            if !matches {
                self.frame_errors += 1;
            }
            let control = if matches && awaiting.inbound.event == EventType::ToolCall {
                self.dispatch(awaiting.inbound, awaiting.fresh, |s| s.handle_binary(bytes))?
            } else {
                self.session.handle_binary(bytes)
            };
            return self.after(control);
        }
        // Nothing awaited: an envelope sent as binary is handled as text.
        if is_binary_envelope(bytes)
            && let Ok(text) = std::str::from_utf8(bytes)
        {
            return self.unit(text, Some(bytes));
        }
        let control = self.session.handle_binary(bytes);
        self.after(control)
    }

    /// A text unit, arrived as text or (`frame`) as a binary message.
    fn unit(&mut self, text: &str, frame: Option<&[u8]>) -> Result<(), String> {
        let limit = self.config().max_message_bytes;
        if text.len() > limit {
            // HAIP.md §2.2 step 1 is the transport's.
            let control = self.session.message_too_large();
            return self.after(control);
        }
        // Text where a frame was due ends the wait (HAIP.md §13).
        self.frame_missing();
        let mut call = None;
        if let Ok(inbound) = decode(text) {
            let fresh = self.fresh_id(inbound.id.as_deref())?;
            if self.websocket
                && let Some(expected) = inbound.bin_len
                && !inbound.payload.contains_key("data")
            {
                // Larger than any message may be: MESSAGE_TOO_LARGE, not awaited.
                if expected <= limit as u64 {
                    self.awaiting = Some(Awaiting {
                        inbound,
                        expected,
                        fresh,
                        since: self.clock.now(),
                    });
                }
            } else if inbound.event == EventType::ToolCall {
                call = Some((inbound, fresh));
            }
        }
        let control = match call {
            Some((inbound, fresh)) => self.dispatch(inbound, fresh, |s| match frame {
                Some(bytes) => s.handle_binary(bytes),
                None => s.handle_text(text),
            })?,
            None => match frame {
                Some(bytes) => self.session.handle_binary(bytes),
                None => self.session.handle_text(text),
            },
        };
        self.after(control)
    }

    /// The awaited envelope, if any, is discarded for want of its frame.
    fn frame_missing(&mut self) {
        if self.awaiting.take().is_some() {
            self.frame_errors += 1;
        }
    }

    /// Whether `id` tells this unit's `ERROR`s apart from every other unit's.
    /// Reusing the id of a call first settles what that call caused.
    fn fresh_id(&mut self, id: Option<&str>) -> Result<bool, String> {
        let Some(id) = id else {
            return Ok(false);
        };
        if self.by_related.contains_key(id) {
            self.drain()?;
            self.by_related.remove(id);
        }
        Ok(self.seen_ids.insert(id.to_owned()))
    }

    /// Hands a `TOOL_CALL` to the session through `handle`, recording what
    /// the oracle needs about it.
    fn dispatch(
        &mut self,
        inbound: Inbound,
        fresh: bool,
        handle: impl FnOnce(&mut Session) -> Control,
    ) -> Result<Control, String> {
        let index = self.calls.len();
        match inbound.id.as_deref() {
            Some(id) if fresh => {
                self.by_related.insert(id.to_owned(), index);
            }
            _ => {
                self.drain()?;
                self.window = Some(index);
            }
        }
        let payload = &inbound.payload;
        // HAIP.md §6.4 step 1.
        let call_id = match payload.get("call_id") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => inbound.id.clone(),
        };
        // Nothing uncommitted: every TOOL_DONE issued so far has been seen,
        // so whether the call id is held by an active call is known.
        let expect_duplicate = match &call_id {
            None => Some(false),
            Some(id) if self.session.backlog() == Backlog::default() => Some(self.active(id)),
            Some(_) => None,
        };
        let run_id = match payload.get("run_id") {
            Some(Value::String(r)) if inbound.run_id.is_none() => Some(r.clone()),
            _ => inbound.run_id.clone(),
        };
        let registered = match payload.get("tool") {
            Some(Value::String(name)) => self.shared.registry.get(name).is_some(),
            _ => false,
        };
        let text = clip(&Value::Object(payload.clone()).to_string(), 200);
        self.calls.push(CallUnit {
            call_id,
            run_id,
            thread_id: inbound.thread_id.clone(),
            registered,
            duplicate: false,
            dropped: false,
            expect_duplicate,
            text,
        });
        let control = handle(&mut self.session);
        if self.window.is_some() {
            self.drain()?;
            self.window = None;
        }
        Ok(control)
    }

    /// Whether an accepted call with this id has no committed `TOOL_DONE` yet.
    fn active(&self, call_id: &str) -> bool {
        let accepted = self
            .calls
            .iter()
            .filter(|c| c.call_id.as_deref() == Some(call_id) && c.accepted())
            .count();
        accepted > self.dones.get(call_id).copied().unwrap_or(0)
    }

    /// What the transport does with a `Control`. A resumption finds no such
    /// session, so the connection stays (HAIP.md §11.3). A `Close` is left
    /// alone: the session must keep its promises whatever its transport does
    /// (a kept session is resumed and fed again), so feeding continues.
    fn after(&mut self, control: Control) -> Result<(), String> {
        if let Control::Resume(request) = control {
            self.session.resume_failed(
                "unknown session",
                request.related_id.as_deref(),
                &request.hai,
            );
        }
        self.check()
    }

    /// Invariants that hold between any two steps.
    fn check(&self) -> Result<(), String> {
        let backlog = self.session.backlog();
        let gauge = self.shared.stats.outbound_bytes.load(Relaxed);
        ensure!(
            gauge <= backlog.bytes as u64,
            "outboundBytes {gauge} exceeds the session's backlog {backlog:?}"
        );
        match self.session.overflow() {
            Some(Overflow::Queue) => ensure!(
                backlog.envelopes > self.config().max_outbound_queue,
                "queue overflow reported with {backlog:?}"
            ),
            Some(Overflow::Bytes) => ensure!(
                backlog.bytes > self.config().max_outbound_bytes,
                "byte overflow reported with {backlog:?}"
            ),
            None => {}
        }
        ensure!(
            self.session.awaits_binary() == self.awaiting.is_some(),
            "the session {} a binary frame, the model says otherwise",
            if self.session.awaits_binary() {
                "awaits"
            } else {
                "does not await"
            }
        );
        Ok(())
    }

    /// Does what the session asked, as the driver would: its calls and
    /// validations go to the call runner (keep-alives go nowhere).
    fn act(&mut self) {
        let runner = self.shared.runner.clone();
        while let Some(action) = self.session.poll_action() {
            match action {
                Action::Start(start) => {
                    if let Some((key, outcome)) = runner.start(*start, &self.events_tx) {
                        self.session.handle_event(CallEvent::Finished(key, outcome));
                    }
                }
                Action::Validate(validate) => runner.start_validation(*validate, &self.events_tx),
                Action::KeepAlive => {}
            }
        }
    }

    /// Feeds every call event that is ready.
    fn pump(&mut self) {
        self.act();
        while let Ok(event) = self.events.try_recv() {
            self.session.handle_event(event);
            self.act();
        }
    }

    /// Lets `by` pass on the session's clock (the runtime's has already)
    /// and handles the deadlines due: timeouts, grace periods, the binary
    /// frame wait, heartbeats.
    fn elapse(&mut self, by: Duration) -> Result<(), String> {
        self.clock.advance(by);
        let now = self.clock.now();
        let control = self.session.handle_timeout(now);
        if self
            .awaiting
            .as_ref()
            .is_some_and(|a| now >= a.since + super::timers::BINARY_FRAME_WAIT)
        {
            self.frame_missing();
        }
        self.act();
        self.after(control)
    }

    // ----- outbound ---------------------------------------------------------

    /// Commits and checks everything that may go out.
    fn drain(&mut self) -> Result<(), String> {
        self.act();
        while let Some(text) = self.session.commit_next() {
            self.observe(text)?;
        }
        Ok(())
    }

    fn observe(&mut self, text: Bytes) -> Result<(), String> {
        let v = check_envelope(&text, self.session.id())?;
        let seq: u64 = v["seq"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("unreadable seq in {v}"))?;
        if seq <= self.newest {
            // A replay (HAIP.md §11.2): the very bytes committed before.
            ensure!(
                self.texts.get(&seq) == Some(&text),
                "re-sent envelope {seq} differs from the one committed"
            );
            return Ok(());
        }
        ensure!(
            seq == self.newest + 1,
            "seq gap: {seq} committed after {}",
            self.newest
        );
        let limit = self.config().max_outbound_message_bytes;
        ensure!(
            text.len() <= limit,
            "a {}-byte envelope exceeds max_outbound_message_bytes {limit}",
            text.len()
        );
        self.newest = seq;
        self.texts.insert(seq, text);
        match v["type"].as_str() {
            Some("ERROR") => self.attribute(&v)?,
            Some("TOOL_DONE") => {
                if let Some(id) = v["payload"]["call_id"].as_str() {
                    *self.dones.entry(id.to_owned()).or_default() += 1;
                }
            }
            _ => {}
        }
        self.out.push(v);
        Ok(())
    }

    /// Notes a duplicate or flow-control refusal on the call it is about.
    fn attribute(&mut self, v: &Value) -> Result<(), String> {
        let p = &v["payload"];
        let duplicate =
            p["code"] == "INVALID_MESSAGE" && p["detail"]["reason"] == "duplicate call_id";
        let dropped = p["code"] == ErrorCode::FLOW_CONTROL_VIOLATION.as_str();
        if !duplicate && !dropped {
            return Ok(());
        }
        let about = self.window.or_else(|| {
            p["related_id"]
                .as_str()
                .and_then(|id| self.by_related.get(id).copied())
        });
        let Some(index) = about else {
            // Strict flow control drops other envelopes too.
            ensure!(
                !duplicate,
                "a duplicate-call_id ERROR about no TOOL_CALL: {v}"
            );
            return Ok(());
        };
        let call = &mut self.calls[index];
        if duplicate {
            ensure!(
                !call.duplicate && !call.dropped,
                "a second refusal for TOOL_CALL {}: {v}",
                call.text
            );
            ensure!(
                p["detail"]["call_id"].as_str() == call.call_id.as_deref(),
                "duplicate ERROR names another call id than TOOL_CALL {}: {v}",
                call.text
            );
            call.duplicate = true;
        } else {
            ensure!(
                !call.duplicate && !call.dropped,
                "a second refusal for TOOL_CALL {}: {v}",
                call.text
            );
            call.dropped = true;
        }
        Ok(())
    }

    // ----- the end ----------------------------------------------------------

    /// Winds everything down and checks the whole conversation.
    async fn finish(mut self, shutdown: bool) -> Result<(), String> {
        // The transport's wait for a frame runs out.
        self.session.binary_frame_missing();
        self.frame_missing();
        if shutdown {
            self.session.begin_shutdown();
        } else {
            self.gate.close();
        }
        // The client resumes every channel and, since strict flow control
        // holds outbound envelopes for want of client credit (a client HAI
        // may advertise none), grants plenty. Each on a fresh channel name,
        // so that its own inbound credit cannot be short.
        for (i, channel) in ["AGENT", "USER", "AUDIO_IN", "AUDIO_OUT"]
            .into_iter()
            .enumerate()
        {
            let resume = json!({"channel": format!("fin-r{i}"), "type": "RESUME_CHANNEL",
                "payload": {"channel": channel}});
            let grant = json!({"channel": format!("fin-g{i}"), "type": "FLOW_UPDATE",
                "payload": {"channel": channel, "add_messages": u64::MAX, "add_bytes": u64::MAX}});
            self.text(&resume.to_string())?;
            self.text(&grant.to_string())?;
        }
        let mut waited = Duration::ZERO;
        loop {
            self.pump();
            self.drain()?;
            if self.session.is_idle() {
                break;
            }
            // A call event, or else the session's next deadline (its calls'
            // timeouts and grace periods), the two clocks moving together.
            let until = self
                .session
                .poll_timeout()
                .map_or(HANG, |at| at.saturating_duration_since(self.clock.now()))
                .min(HANG.saturating_sub(waited));
            let started = tokio::time::Instant::now();
            let event = tokio::time::timeout(until, self.events.recv()).await;
            let passed = started.elapsed();
            waited += passed;
            match event {
                Ok(Some(event)) => self.session.handle_event(event),
                Ok(None) => return Err("the call event channel closed".into()),
                Err(_) if waited < HANG => {}
                Err(_) => {
                    let owed: Vec<&str> = self
                        .calls
                        .iter()
                        .filter(|c| c.accepted())
                        .map(|c| c.text.as_str())
                        .collect();
                    return Err(format!(
                        "calls never end: not idle an hour (paused clock) after the wind-down; accepted: {owed:?}"
                    ));
                }
            }
            self.elapse(passed)?;
        }
        // No call is active now, and the client resumed every channel: this
        // changes nothing, unless a resume was lost (then the check below
        // would blame the wind-down, not the session).
        self.session.begin_shutdown();
        self.drain()?;
        let backlog = self.session.backlog();
        ensure!(
            backlog == Backlog::default() && !self.session.has_outbound(),
            "envelopes left in the outbox after the wind-down: {backlog:?}"
        );
        let gauge = self.shared.stats.outbound_bytes.load(Relaxed);
        ensure!(gauge == 0, "outboundBytes is {gauge} with nothing waiting");
        self.verify()?;
        let Run {
            session, shared, ..
        } = self;
        drop(session);
        let gauge = shared.stats.outbound_bytes.load(Relaxed);
        ensure!(
            gauge == 0,
            "outboundBytes is {gauge} after the session is gone"
        );
        let replay = shared.replay.used();
        ensure!(
            replay == 0,
            "the replay budget still counts {replay} bytes after the session is gone"
        );
        Ok(())
    }

    /// Exactly one `TOOL_DONE` per accepted call, after its updates; the
    /// duplicate refusals where they were predictable; one
    /// `BINARY_FRAME_ERROR` per envelope whose frame did not come.
    fn verify(&self) -> Result<(), String> {
        let frame_errors = self
            .out
            .iter()
            .filter(|v| v["type"] == "ERROR" && v["payload"]["code"] == "BINARY_FRAME_ERROR")
            .count();
        ensure!(
            frame_errors == self.frame_errors,
            "{frame_errors} BINARY_FRAME_ERRORs for {} envelopes whose frame did not come",
            self.frame_errors
        );
        for call in &self.calls {
            ensure!(
                call.call_id.is_some() || !call.duplicate,
                "a call with a server-made call id refused as a duplicate: {}",
                call.text
            );
            if let (false, Some(expected)) = (call.dropped, call.expect_duplicate) {
                ensure!(
                    call.duplicate == expected,
                    "TOOL_CALL {}: {} as a duplicate, but call id {:?} {} held by an active call",
                    call.text,
                    if call.duplicate {
                        "refused"
                    } else {
                        "not refused"
                    },
                    call.call_id,
                    if expected { "was" } else { "was not" }
                );
            }
        }
        // Tool traffic per call id, in commit order (all of it on AGENT).
        let mut traffic: HashMap<&str, Vec<&Value>> = HashMap::new();
        for v in &self.out {
            if matches!(v["type"].as_str(), Some("TOOL_UPDATE" | "TOOL_DONE")) {
                let id = v["payload"]["call_id"]
                    .as_str()
                    .ok_or_else(|| format!("tool traffic without a string call_id: {v}"))?;
                traffic.entry(id).or_default().push(v);
            }
        }
        let mut accepted: HashMap<&str, Vec<&CallUnit>> = HashMap::new();
        let mut anonymous = 0;
        for call in &self.calls {
            match call.call_id.as_deref() {
                Some(id) => {
                    let calls = accepted.entry(id).or_default();
                    if call.accepted() {
                        calls.push(call);
                    }
                }
                None if call.accepted() => anonymous += 1,
                None => {}
            }
        }
        // A call id may be reused once its TOOL_DONE is out, so the k-th
        // TOOL_DONE with an id ends the k-th accepted call with it.
        for (id, calls) in &accepted {
            let envs = traffic.remove(id).unwrap_or_default();
            let segments = segments(id, &envs)?;
            ensure!(
                segments.len() == calls.len(),
                "call id {:?}: {} accepted TOOL_CALLs but {} TOOL_DONEs; calls {:?}; traffic {:?}",
                clip(id, 40),
                calls.len(),
                segments.len(),
                calls.iter().map(|c| &c.text).collect::<Vec<_>>(),
                envs.iter()
                    .map(|v| clip(&v["payload"].to_string(), 200))
                    .collect::<Vec<_>>()
            );
            for (segment, call) in segments.iter().zip(calls) {
                check_segment(segment, Some(call))?;
            }
        }
        // What is left are call ids the server made up (a new UUID each).
        ensure!(
            traffic.len() == anonymous,
            "{anonymous} accepted calls without a call id, but traffic for {} other ids: {:?}",
            traffic.len(),
            traffic.keys().map(|k| clip(k, 40)).collect::<Vec<_>>()
        );
        for (id, envs) in &traffic {
            let segments = segments(id, envs)?;
            ensure!(
                segments.len() == 1,
                "server-made call id {id}: {} TOOL_DONEs",
                segments.len()
            );
            check_segment(&segments[0], None)?;
        }
        Ok(())
    }
}

/// Splits one call id's traffic at each `TOOL_DONE`; updates after the last
/// `TOOL_DONE` belong to no call.
fn segments<'a>(id: &str, envs: &[&'a Value]) -> Result<Vec<Vec<&'a Value>>, String> {
    let mut segments = Vec::new();
    let mut current = Vec::new();
    for v in envs {
        current.push(*v);
        if v["type"] == "TOOL_DONE" {
            segments.push(std::mem::take(&mut current));
        }
    }
    ensure!(
        current.is_empty(),
        "call id {:?}: TOOL_UPDATEs after its last TOOL_DONE: {:?}",
        clip(id, 40),
        current
            .iter()
            .map(|v| clip(&v["payload"].to_string(), 200))
            .collect::<Vec<_>>()
    );
    Ok(segments)
}

/// One call's updates and its `TOOL_DONE` (HAIP.md §6.5, §6.6, §6.9).
fn check_segment(segment: &[&Value], call: Option<&CallUnit>) -> Result<(), String> {
    let Some((done, updates)) = segment.split_last() else {
        return Err("an empty segment".into());
    };
    let shown = || {
        segment
            .iter()
            .map(|v| clip(&v["payload"].to_string(), 200))
            .collect::<Vec<_>>()
    };
    let mut cancelling = false;
    for (k, update) in updates.iter().enumerate() {
        let p = &update["payload"];
        match p["status"].as_str() {
            Some("QUEUED") => ensure!(k == 0, "QUEUED is not the first update: {:?}", shown()),
            Some("RUNNING") => ensure!(!cancelling, "an update after CANCELLING: {:?}", shown()),
            Some("CANCELLING") => {
                ensure!(!cancelling, "CANCELLING twice: {:?}", shown());
                cancelling = true;
            }
            _ => return Err(format!("a TOOL_UPDATE with a bad status: {p}")),
        }
        if let Some(progress) = p.get("progress") {
            ensure!(
                progress
                    .as_f64()
                    .is_some_and(|n| (0.0..=100.0).contains(&n)),
                "progress out of 0..=100: {p}"
            );
        }
    }
    let p = &done["payload"];
    match p["status"].as_str() {
        Some("OK") => {}
        Some("CANCELLED") => {}
        Some("ERROR") => ensure!(
            p["result"]["code"].is_string() && p["result"]["error"].is_string(),
            "TOOL_DONE ERROR without result.code and result.error: {p}"
        ),
        _ => return Err(format!("a TOOL_DONE with a bad status: {p}")),
    }
    // After CANCELLING, the cancel decides (unless the TOOL_DONE is too large).
    ensure!(
        !cancelling || p["status"] == "CANCELLED" || p["result"]["code"] == "RESULT_TOO_LARGE",
        "CANCELLING but not ended CANCELLED: {:?}",
        shown()
    );
    let Some(call) = call else {
        return Ok(());
    };
    for v in segment {
        ensure!(
            v.get("run_id").and_then(Value::as_str) == call.run_id.as_deref()
                && v.get("thread_id").and_then(Value::as_str) == call.thread_id.as_deref(),
            "tool traffic of TOOL_CALL {} does not carry its run_id {:?} / thread_id {:?}: {v}",
            call.text,
            call.run_id,
            call.thread_id
        );
    }
    if !call.registered {
        ensure!(
            updates.is_empty()
                && p["status"] == "ERROR"
                && p["result"]["code"] == ErrorCode::TOOL_NOT_FOUND.as_str(),
            "a call to no registered tool did not end TOOL_NOT_FOUND: {} → {:?}",
            call.text,
            shown()
        );
    }
    Ok(())
}

/// A committed envelope: JSON with the seven required fields and nothing the
/// server never sends (HAIP.md §2.1, §2.4).
fn check_envelope(text: &[u8], session: &str) -> Result<Value, String> {
    let shown = || clip(&String::from_utf8_lossy(text), 300);
    let v: Value = serde_json::from_slice(text)
        .map_err(|e| format!("a committed envelope is not JSON ({e}): {}", shown()))?;
    let Value::Object(obj) = &v else {
        return Err(format!(
            "a committed envelope is not an object: {}",
            shown()
        ));
    };
    for key in ["id", "session", "seq", "ts", "channel", "type"] {
        ensure!(
            obj.get(key).is_some_and(Value::is_string),
            "a committed envelope without a string {key}: {}",
            shown()
        );
    }
    ensure!(
        obj.get("payload").is_some_and(Value::is_object),
        "a committed envelope whose payload is not an object: {}",
        shown()
    );
    for key in ["ack", "pv", "crit", "related_id"] {
        ensure!(
            !obj.contains_key(key),
            "a committed envelope with {key}: {}",
            shown()
        );
    }
    let field = |key: &str| obj[key].as_str().unwrap_or_default();
    let id = field("id");
    ensure!(
        id.len() == 36
            && !id.bytes().any(|b| b.is_ascii_uppercase())
            && uuid::Uuid::parse_str(id).is_ok_and(|u| u.get_version_num() == 4),
        "an envelope id that is no lower-case UUID v4: {}",
        shown()
    );
    ensure!(
        field("session") == session,
        "another session's id: {}",
        shown()
    );
    let decimal = |s: &str| {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
    };
    ensure!(
        decimal(field("seq")) && field("seq") != "0" && decimal(field("ts")),
        "seq or ts not decimal: {}",
        shown()
    );
    ensure!(
        CHANNELS.contains(&field("channel")),
        "a non-standard channel: {}",
        shown()
    );
    ensure!(
        EventType::parse(field("type")).is_some(),
        "an unknown type: {}",
        shown()
    );
    Ok(v)
}

// ----- the decoder against a plain JSON reading ------------------------------------

/// `decode(text)` agrees with reading `text` as a `serde_json::Value`, where
/// that reading succeeds (HAIP.md §2.2 steps 2–5, §2.1 leniency). (The
/// decoder skips ignored fields without converting them, so it may accept
/// texts a `Value` cannot hold, like `"ack": 1e999`: nothing is said then.)
fn check_decode(text: &str) -> Result<(), String> {
    let decoded = decode(text);
    if let Err(err) = &decoded {
        ensure!(
            err.code == ErrorCode::INVALID_MESSAGE || err.code == ErrorCode::UNSUPPORTED_TYPE,
            "decode failed with {}: {:?}",
            err.code,
            clip(text, 200)
        );
        ensure!(
            err.detail.is_object(),
            "an error detail that is no object: {err}"
        );
    }
    let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(text) else {
        if let Ok(v) = serde_json::from_str::<Value>(text) {
            // JSON, but not an object: step 2.
            ensure!(
                decoded.as_ref().is_err_and(|e| e.related_id.is_none()),
                "decode accepted a non-object {}",
                clip(&v.to_string(), 200)
            );
        }
        return Ok(());
    };
    let id = match obj.get("id") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let shown = || clip(text, 200);
    let (Some(Value::String(type_name)), Some(Value::Object(payload))) =
        (obj.get("type"), obj.get("payload"))
    else {
        // Step 3.
        let err = decoded.err().ok_or_else(|| {
            format!(
                "decode accepted an envelope without type or payload: {}",
                shown()
            )
        })?;
        ensure!(
            err.code == ErrorCode::INVALID_MESSAGE && err.related_id == id,
            "step 3 failure reported as {err} (related_id {:?}): {}",
            err.related_id,
            shown()
        );
        return Ok(());
    };
    let Some(event) = EventType::parse(type_name) else {
        let err = decoded
            .err()
            .ok_or_else(|| format!("decode accepted an unknown type: {}", shown()))?;
        ensure!(
            err.code == ErrorCode::UNSUPPORTED_TYPE && err.related_id == id,
            "an unknown type reported as {err}: {}",
            shown()
        );
        return Ok(());
    };
    if obj.get("crit") == Some(&Value::Bool(true))
        && let Err(err) = &decoded
    {
        // Step 5: unknown fields under `crit`.
        ensure!(
            err.code == ErrorCode::UNSUPPORTED_TYPE
                && err.detail["fields"]
                    .as_array()
                    .is_some_and(|f| !f.is_empty()),
            "a crit envelope refused with {err}: {}",
            shown()
        );
        return Ok(());
    }
    let inbound =
        decoded.map_err(|e| format!("decode refused ({e}) a valid envelope: {}", shown()))?;
    let string = |key: &str| match obj.get(key) {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    let channel = match obj.get("channel") {
        Some(Value::String(c)) if Channel::is_valid_name(c) => c.clone(),
        _ => event.default_channel().as_str().to_owned(),
    };
    ensure!(
        inbound.event == event,
        "decoded event {:?}: {}",
        inbound.event,
        shown()
    );
    ensure!(
        inbound.payload == *payload,
        "decoded payload differs: {}",
        shown()
    );
    ensure!(inbound.id == id, "decoded id {:?}: {}", inbound.id, shown());
    ensure!(
        inbound.channel == channel,
        "decoded channel {:?}: {}",
        inbound.channel,
        shown()
    );
    ensure!(
        inbound.session == string("session")
            && inbound.run_id == string("run_id")
            && inbound.thread_id == string("thread_id"),
        "decoded session/run_id/thread_id differ: {}",
        shown()
    );
    ensure!(
        inbound.bin_len == obj.get("bin_len").and_then(Value::as_u64),
        "decoded bin_len {:?}: {}",
        inbound.bin_len,
        shown()
    );
    Ok(())
}

// ----- inputs: bytes, strings, mutated envelopes -------------------------------------

/// Valid envelopes, the seeds of mutation.
const TEMPLATES: [&str; 16] = [
    r#"{"id":"t1","type":"TOOL_CALL","payload":{"call_id":"c1","tool":"echo","params":{"message":"hi"}}}"#,
    r#"{"type":"TOOL_CALL","channel":"AGENT","run_id":"r1","payload":{"call_id":7,"tool":"add","params":{"a":1,"b":2}}}"#,
    r#"{"id":"t3","type":"TOOL_CALL","payload":{"call_id":"c1","tool":"gate"}}"#,
    r#"{"id":9,"seq":"3","ts":"2026-01-01T00:00:00Z","session":"s","type":"PING","payload":{"nonce":"n"}}"#,
    r#"{"type":"HAI","payload":{"haip_version":"1.1.2","accept_major":[1],"accept_events":["PING","PONG"],"capabilities":{"flow_control":{"initial_credit_messages":10,"initial_credit_bytes":1000}}}}"#,
    r#"{"type":"REPLAY_REQUEST","payload":{"from_seq":"1","to_seq":2}}"#,
    r#"{"type":"TOOL_CANCEL","payload":{"call_id":"c1","reason":"r"}}"#,
    r#"{"type":"RUN_STARTED","payload":{"run_id":"r1"}}"#,
    r#"{"type":"RUN_CANCEL","run_id":"r1","payload":{}}"#,
    r#"{"type":"FLOW_UPDATE","payload":{"channel":"AGENT","add_messages":18446744073709551615,"add_bytes":1}}"#,
    r#"{"type":"PAUSE_CHANNEL","payload":{"channel":"AGENT"}}"#,
    r#"{"type":"AUDIO_CHUNK","bin_len":3,"bin_mime":"audio/wav","payload":{"message_id":"a","mime":"audio/wav"}}"#,
    r#"{"crit":true,"type":"TEXT_MESSAGE_START","xtra":1,"payload":{"message_id":"m","text":"h\u00e9llo \u2603 \u0000 \ud83d\ude00 ☃"}}"#,
    r#"{"type":"TOOL_SCHEMA","payload":{"tool":"add"}}"#,
    r#"{"type":"TOOL_LIST","payload":{}}"#,
    r#"{"type":"TOOL_CALL","bin_len":0,"payload":{"call_id":"c2","tool":"weather","params":{"location":"P"}}}"#,
];

/// Bytes that matter to a JSON reader.
const INTERESTING: [u8; 18] = [
    b'"', b'{', b'}', b'[', b']', b':', b',', b'\\', b'0', b'9', b'-', b'e', b'.', b' ', 0x00,
    0xff, 0xc3, 0x80,
];

#[derive(Debug, Clone)]
enum Mutation {
    Flip(Index, u8),
    Insert(Index, u8),
    Delete(Index, u8),
    Repeat(Index, u8),
    Truncate(Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let byte = prop_oneof![3 => select(INTERESTING.to_vec()), 1 => any::<u8>()];
    prop_oneof![
        (any::<Index>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip(at, bit)),
        (any::<Index>(), byte).prop_map(|(at, b)| Mutation::Insert(at, b)),
        (any::<Index>(), 1u8..8).prop_map(|(at, n)| Mutation::Delete(at, n)),
        (any::<Index>(), 1u8..16).prop_map(|(at, n)| Mutation::Repeat(at, n)),
        any::<Index>().prop_map(Mutation::Truncate),
    ]
}

fn mutate(template: &str, mutations: &[Mutation]) -> Vec<u8> {
    let mut bytes = template.as_bytes().to_vec();
    for m in mutations {
        let len = bytes.len();
        match m {
            Mutation::Flip(at, bit) if len > 0 => bytes[at.index(len)] ^= 1 << (bit % 8),
            Mutation::Insert(at, b) => bytes.insert(at.index(len + 1), *b),
            Mutation::Delete(at, n) if len > 0 => {
                let from = at.index(len);
                bytes.drain(from..(from + usize::from(*n)).min(len));
            }
            Mutation::Repeat(at, n) if len > 0 => {
                let from = at.index(len);
                let to = (from + usize::from(*n)).min(len);
                let chunk = bytes[from..to].to_vec();
                bytes.splice(to..to, chunk);
            }
            Mutation::Truncate(at) => bytes.truncate(at.index(len + 1)),
            _ => {}
        }
    }
    bytes
}

#[derive(Debug, Clone)]
enum Input {
    Bytes(Vec<u8>),
    Text(String),
    Mutated(usize, Vec<Mutation>),
}

impl Input {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Input::Bytes(b) => b.clone(),
            Input::Text(t) => t.clone().into_bytes(),
            Input::Mutated(t, m) => mutate(TEMPLATES[*t], m),
        }
    }
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        2 => vec(any::<u8>(), 0..128).prop_map(Input::Bytes),
        2 => any::<String>().prop_map(Input::Text),
        3 => r#"[{}\[\]":,. a-zA-Z0-9_\\-]{0,64}"#.prop_map(Input::Text),
        8 => (0..TEMPLATES.len(), vec(mutation(), 1..6)).prop_map(|(t, m)| Input::Mutated(t, m)),
    ]
}

/// Feeds `inputs` to a fresh WebSocket session (`true`: as a binary message)
/// after checking the decoder on each, then winds the session down.
fn run_inputs(inputs: &[(Input, bool)]) -> Result<(), String> {
    runtime().block_on(async {
        let mut run = Run::new(Config::default(), true)?;
        for (input, as_binary) in inputs {
            let bytes = input.bytes();
            match std::str::from_utf8(&bytes) {
                Ok(text) => {
                    check_decode(text)?;
                    if *as_binary {
                        run.binary(&bytes)?;
                    } else {
                        run.text(text)?;
                    }
                }
                Err(_) => run.binary(&bytes)?,
            }
            run.drain()?;
        }
        run.finish(true).await
    })
}

// ----- inputs: envelope sequences ------------------------------------------------------

/// One of `items`, by weight; earlier items are where shrinking heads.
fn pick<T: Clone + Debug + 'static>(items: Vec<(u32, T)>) -> BoxedStrategy<T> {
    Union::new_weighted(
        items
            .into_iter()
            .map(|(weight, item)| (weight, Just(item).boxed()))
            .collect(),
    )
    .boxed()
}

/// A JSON object of the present entries.
fn object(entries: Vec<(&str, Option<Value>)>) -> Map<String, Value> {
    entries
        .into_iter()
        .filter_map(|(key, value)| value.map(|v| (key.to_owned(), v)))
        .collect()
}

/// The envelope id, made concrete (and, where it should be, unique) when rendered.
#[derive(Debug, Clone)]
enum Id {
    /// `"m<step>"`.
    Unique,
    /// `100000 + step`, a JSON number.
    Numeric,
    Absent,
    /// `"c<n>"`: shared with other units, and with the call id pool.
    Shared(u8),
    /// Not a string or a number: treated as absent.
    Odd,
}

/// An inbound envelope, rendered at its step.
#[derive(Clone)]
struct Env {
    id: Id,
    event: String,
    payload: Map<String, Value>,
    /// Other envelope fields: channel, seq, run_id, bin_len, crit, …
    fields: Vec<(&'static str, Value)>,
    /// With `bin_len`: the binary message sent right after it, if any.
    follow: Option<Follow>,
}

/// The binary message that follows an envelope announcing one (HAIP.md §13).
#[derive(Debug, Clone)]
enum Follow {
    /// Exactly the announced length.
    Expected,
    /// Longer by 1 + n.
    Longer(u8),
}

/// Long strings shortened, so that a failing case stays readable.
fn abbreviated(v: &Value) -> Value {
    match v {
        Value::String(s) if s.chars().count() > 64 => {
            Value::String(format!("{}…({} chars)", clip(s, 16), s.chars().count()))
        }
        Value::Array(items) => Value::Array(items.iter().map(abbreviated).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), abbreviated(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

impl Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fields: Map<String, Value> = self
            .fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), abbreviated(v)))
            .collect();
        f.debug_struct("Env")
            .field("id", &self.id)
            .field("event", &clip(&self.event, 16))
            .field(
                "payload",
                &abbreviated(&Value::Object(self.payload.clone())).to_string(),
            )
            .field("fields", &Value::Object(fields).to_string())
            .field("follow", &self.follow)
            .finish()
    }
}

impl Env {
    /// The envelope's text at `step`.
    fn render(&self, step: usize) -> String {
        let mut obj = Map::new();
        match self.id {
            Id::Unique => {
                obj.insert("id".into(), json!(format!("m{step}")));
            }
            Id::Numeric => {
                obj.insert("id".into(), json!(100_000 + step));
            }
            Id::Absent => {}
            Id::Shared(n) => {
                obj.insert("id".into(), json!(format!("c{n}")));
            }
            Id::Odd => {
                obj.insert("id".into(), json!({"not": "an id"}));
            }
        }
        for (key, value) in &self.fields {
            obj.insert((*key).to_owned(), value.clone());
        }
        obj.insert("type".into(), json!(self.event));
        obj.insert("payload".into(), Value::Object(self.payload.clone()));
        Value::Object(obj).to_string()
    }
}

/// A type, its payload and fields it brings along.
type Kind = (String, Map<String, Value>, Vec<(&'static str, Value)>);

fn kind(event: &str, payload: Map<String, Value>) -> Kind {
    (event.to_owned(), payload, Vec::new())
}

/// Call ids from a small pool, so that duplicates happen; `"1"` and `1` are
/// the same id (HAIP.md §6.4 step 1).
fn call_ids() -> BoxedStrategy<Option<Value>> {
    pick(vec![
        (6, Some(json!("c1"))),
        (6, Some(json!("c2"))),
        (3, Some(json!("c3"))),
        (2, Some(json!(1))),
        (1, Some(json!(2))),
        (1, Some(json!("1"))),
        (1, Some(json!(1.5))),
        (3, None),
        (1, Some(Value::Null)),
        (1, Some(json!(true))),
        (1, Some(json!("L".repeat(5000)))),
    ])
}

fn tool_call() -> impl Strategy<Value = Kind> {
    let tools = pick(vec![
        (4, Some(json!("echo"))),
        (4, Some(json!("add"))),
        (2, Some(json!("weather"))),
        (6, Some(json!("gate"))),
        (2, Some(json!("stubborn"))),
        (2, Some(json!("boom"))),
        (2, Some(json!("fail"))),
        (3, Some(json!("steps"))),
        (1, Some(json!("quitter"))),
        (2, Some(json!("slowpoke"))),
        (2, Some(json!("closed"))),
        (1, Some(json!("big"))),
        (1, Some(json!("nullish"))),
        (1, Some(json!("liar"))),
        (2, Some(json!("nope"))),
        (1, Some(json!(""))),
        (1, None),
        (1, Some(json!(42))),
        (1, Some(json!("T".repeat(5000)))),
    ]);
    let params = pick(vec![
        (3, None),
        (2, Some(Value::Null)),
        (3, Some(json!({}))),
        (3, Some(json!({"message": "hi"}))),
        (1, Some(json!({"message": 5}))),
        (3, Some(json!({"a": 1, "b": 2}))),
        (1, Some(json!({"a": "5"}))),
        (1, Some(json!({"a": 1e308, "b": 1e308}))),
        (1, Some(json!({"a": i64::MAX, "b": 1}))),
        (2, Some(json!({"s": "x"}))),
        (1, Some(json!({"s": 1, "extra": true}))),
        (1, Some(json!({"location": "Paris"}))),
        (1, Some(json!([1, 2]))),
        (1, Some(json!("params"))),
        (1, Some(json!({"message": "M".repeat(6000)}))),
        // Over 64 KiB: validated off the session task (HAIP.md §18.1).
        (1, Some(json!({"s": "x".repeat(70_000)}))),
        (1, Some(json!({"s": 7, "pad": "y".repeat(70_000)}))),
    ]);
    let run_ids = pick(vec![
        (6, None),
        (1, Some(json!("r1"))),
        (1, Some(json!("r2"))),
        (1, Some(json!(7))),
    ]);
    (call_ids(), tools, params, run_ids).prop_map(|(call_id, tool, params, run_id)| {
        kind(
            "TOOL_CALL",
            object(vec![
                ("call_id", call_id),
                ("tool", tool),
                ("params", params),
                ("run_id", run_id),
            ]),
        )
    })
}

fn tool_cancel() -> impl Strategy<Value = Kind> {
    let reasons = pick(vec![
        (3, None),
        (3, Some(json!("stop"))),
        (1, Some(json!(5))),
    ]);
    (call_ids(), reasons).prop_map(|(call_id, reason)| {
        kind(
            "TOOL_CANCEL",
            object(vec![("call_id", call_id), ("reason", reason)]),
        )
    })
}

fn run_event() -> impl Strategy<Value = Kind> {
    let events = select(vec![
        "RUN_STARTED",
        "RUN_CANCEL",
        "RUN_FINISHED",
        "RUN_ERROR",
    ]);
    let run_ids = pick(vec![
        (4, Some(json!("r1"))),
        (3, Some(json!("r2"))),
        (1, Some(json!("r3"))),
        (2, None),
        (1, Some(json!(5))),
    ]);
    let envelope_run_ids = pick(vec![(4, None), (1, Some(json!("r1")))]);
    let statuses = pick(vec![
        (3, None),
        (1, Some(json!("CANCELLED"))),
        (1, Some(json!(3))),
    ]);
    (events, run_ids, envelope_run_ids, statuses).prop_map(|(event, run_id, outer, status)| {
        let mut k = kind(event, object(vec![("run_id", run_id), ("status", status)]));
        if let Some(outer) = outer {
            k.2.push(("run_id", outer));
        }
        k
    })
}

fn ping() -> impl Strategy<Value = Kind> {
    pick(vec![
        (2, None),
        (3, Some(json!("n"))),
        (1, Some(json!(5))),
        (1, Some(json!({"deep": [1, {"x": null}]}))),
        (1, Some(json!("N".repeat(5000)))),
    ])
    .prop_map(|nonce| kind("PING", object(vec![("nonce", nonce)])))
}

fn replay_request() -> impl Strategy<Value = Kind> {
    let seqs = || {
        pick(vec![
            (3, None),
            (2, Some(json!(0))),
            (3, Some(json!(1))),
            (2, Some(json!("3"))),
            (1, Some(json!("x"))),
            (1, Some(json!(-1))),
            (1, Some(json!(u64::MAX))),
            (1, Some(json!("18446744073709551616"))),
            (1, Some(json!(1.5))),
            (1, Some(Value::Null)),
        ])
    };
    (seqs(), seqs()).prop_map(|(from, to)| {
        kind(
            "REPLAY_REQUEST",
            object(vec![("from_seq", from), ("to_seq", to)]),
        )
    })
}

fn pause_or_resume() -> impl Strategy<Value = Kind> {
    let channels = pick(vec![
        (6, Some(json!("AGENT"))),
        (1, Some(json!("SYSTEM"))),
        (1, Some(json!("USER"))),
        (1, Some(json!("AUDIO_OUT"))),
        (1, Some(json!("nope"))),
        (1, None),
        (1, Some(json!(5))),
    ]);
    (any::<bool>(), channels).prop_map(|(pause, channel)| {
        let event = if pause {
            "PAUSE_CHANNEL"
        } else {
            "RESUME_CHANNEL"
        };
        kind(event, object(vec![("channel", channel)]))
    })
}

fn flow_update() -> impl Strategy<Value = Kind> {
    let channels = pick(vec![
        (3, Some(json!("AGENT"))),
        (1, Some(json!("SYSTEM"))),
        (1, Some(json!("x"))),
        (1, None),
    ]);
    let amounts = || {
        pick(vec![
            (2, None),
            (1, Some(json!(0))),
            (2, Some(json!(1))),
            (3, Some(json!(u64::MAX))),
            (1, Some(json!(-1))),
            (1, Some(json!("5"))),
            (1, Some(json!(1e300))),
        ])
    };
    (channels, amounts(), amounts()).prop_map(|(channel, messages, bytes)| {
        kind(
            "FLOW_UPDATE",
            object(vec![
                ("channel", channel),
                ("add_messages", messages),
                ("add_bytes", bytes),
            ]),
        )
    })
}

fn hai() -> impl Strategy<Value = Kind> {
    let majors = pick(vec![
        (4, None),
        (3, Some(json!([1]))),
        (1, Some(json!(["1"]))),
        (1, Some(json!([2]))),
        (1, Some(json!("1"))),
        (1, Some(json!([]))),
    ]);
    let events = pick(vec![
        (4, None),
        (1, Some(json!([]))),
        (1, Some(json!(["PING", "PONG"]))),
        (2, Some(json!(["FLOW_UPDATE", "TOOL_LIST", "PING"]))),
        (1, Some(json!(5))),
    ]);
    let capabilities = pick(vec![
        (3, None),
        (
            2,
            Some(
                json!({"flow_control": {"initial_credit_messages": 0, "initial_credit_bytes": 0}}),
            ),
        ),
        (
            1,
            Some(
                json!({"flow_control": {"initial_credit_messages": 1, "initial_credit_bytes": 100}}),
            ),
        ),
        (
            2,
            Some(
                json!({"flow_control": {"initial_credit_messages": u64::MAX, "initial_credit_bytes": u64::MAX}}),
            ),
        ),
        (1, Some(json!({"flow_control": {}}))),
        (1, Some(json!(7))),
    ]);
    // With another session's id, a `last_rx_seq` is a resumption attempt (§11.3).
    let resume = pick(vec![
        (3, None),
        (2, Some((json!("other"), json!("0")))),
        (1, Some((json!("other"), json!(3)))),
        (1, Some((json!("other"), json!("x")))),
    ]);
    (majors, events, capabilities, resume).prop_map(|(major, events, capabilities, resume)| {
        let (session, last_rx_seq) = match resume {
            Some((session, seq)) => (Some(session), Some(seq)),
            None => (None, None),
        };
        let mut k = kind(
            "HAI",
            object(vec![
                ("haip_version", Some(json!("1.1.2"))),
                ("accept_major", major),
                ("accept_events", events),
                ("capabilities", capabilities),
                ("last_rx_seq", last_rx_seq),
            ]),
        );
        if let Some(session) = session {
            k.2.push(("session", session));
        }
        k
    })
}

fn other() -> impl Strategy<Value = Kind> {
    pick(vec![
        (2, kind("TOOL_LIST", Map::new())),
        (
            1,
            kind("TOOL_LIST", object(vec![("tools", Some(json!([])))])),
        ),
        (
            1,
            kind("TOOL_SCHEMA", object(vec![("tool", Some(json!("add")))])),
        ),
        (
            1,
            kind("TOOL_SCHEMA", object(vec![("tool", Some(json!("nope")))])),
        ),
        (1, kind("TOOL_SCHEMA", Map::new())),
        (
            1,
            kind(
                "TEXT_MESSAGE_START",
                object(vec![("content", Some(json!("hi")))]),
            ),
        ),
        (
            1,
            kind(
                "AUDIO_CHUNK",
                object(vec![
                    ("message_id", Some(json!("a"))),
                    ("mime", Some(json!("audio/wav"))),
                ]),
            ),
        ),
        (1, kind("PONG", Map::new())),
        (
            1,
            kind(
                "ERROR",
                object(vec![
                    ("code", Some(json!("X"))),
                    ("message", Some(json!("m"))),
                ]),
            ),
        ),
        (
            1,
            kind(
                "TOOL_UPDATE",
                object(vec![
                    ("call_id", Some(json!("c1"))),
                    ("status", Some(json!("RUNNING"))),
                ]),
            ),
        ),
        (
            1,
            kind(
                "TOOL_DONE",
                object(vec![
                    ("call_id", Some(json!("c1"))),
                    ("status", Some(json!("OK"))),
                ]),
            ),
        ),
        (1, kind("MESSAGE", Map::new())),
        (1, kind(&"Y".repeat(5000), Map::new())),
    ])
}

fn env() -> impl Strategy<Value = Env> {
    let kinds = Union::new_weighted(vec![
        (10, tool_call().boxed()),
        (3, tool_cancel().boxed()),
        (4, run_event().boxed()),
        (2, ping().boxed()),
        (2, replay_request().boxed()),
        (3, pause_or_resume().boxed()),
        (1, flow_update().boxed()),
        (2, hai().boxed()),
        (2, other().boxed()),
    ]);
    let ids = pick(vec![
        (8, Id::Unique),
        (2, Id::Numeric),
        (3, Id::Absent),
        (1, Id::Shared(1)),
        (1, Id::Shared(2)),
        (1, Id::Odd),
    ]);
    let channels = pick(vec![
        (8, None),
        (1, Some(json!("USER"))),
        (1, Some(json!("AGENT"))),
        (1, Some(json!("SYSTEM"))),
        (1, Some(json!("x-1"))),
        (1, Some(json!("bad channel"))),
        (1, Some(json!(5))),
    ]);
    let seqs = pick(vec![
        (6, None),
        (1, Some(json!("1"))),
        (1, Some(json!(9))),
        (1, Some(json!("x"))),
        (1, Some(json!(u64::MAX))),
        (1, Some(json!(-1))),
    ]);
    let run_ids = pick(vec![
        (6, None),
        (2, Some(json!("r1"))),
        (1, Some(json!("r2"))),
        (1, Some(json!(3))),
    ]);
    let thread_ids = pick(vec![(6, None), (1, Some(json!("t1")))]);
    let crits = pick(vec![
        (12, None),
        (1, Some(json!(true))),
        (1, Some(json!(false))),
        (1, Some(json!("true"))),
    ]);
    let extras = pick(vec![(8, None), (1, Some(json!(1)))]);
    // Two-frame binary (§13): bin_len, and whether payload.data makes it base64.
    let bin_lens = pick(vec![
        (3, json!(3)),
        (2, json!(0)),
        (1, json!(1)),
        (1, json!(7)),
        (1, json!(2_000_000)),
        (1, json!(u64::MAX)),
        (1, json!(-1)),
        (1, json!("3")),
        (1, json!(2.5)),
    ]);
    let follows = pick(vec![
        (6, Some(Follow::Expected)),
        (2, Some(Follow::Longer(0))),
        (1, Some(Follow::Longer(5))),
        (3, None),
    ]);
    let bins = prop::option::weighted(0.15, (bin_lens, prop::bool::weighted(0.2), follows));
    (
        ids,
        kinds,
        (channels, seqs, run_ids, thread_ids, crits, extras, bins),
    )
        .prop_map(
            |(
                id,
                (event, mut payload, mut fields),
                (channel, seq, run_id, thread_id, crit, extra, bin),
            )| {
                let generic = [
                    ("channel", channel),
                    ("seq", seq),
                    ("run_id", run_id),
                    ("thread_id", thread_id),
                    ("crit", crit),
                    ("xtra", extra),
                ];
                for (key, value) in generic {
                    if let Some(value) = value
                        && !fields.iter().any(|(k, _)| *k == key)
                    {
                        fields.push((key, value));
                    }
                }
                let mut follow = None;
                if let Some((bin_len, data, then)) = bin {
                    fields.push(("bin_len", bin_len));
                    follow = then;
                    if data {
                        payload.insert("data".into(), json!("YWJj"));
                    }
                }
                Env {
                    id,
                    event,
                    payload,
                    fields,
                    follow,
                }
            },
        )
}

/// A binary message, relative to the frame the model says is awaited.
#[derive(Debug, Clone)]
enum Frame {
    /// Exactly the awaited length (3 bytes when none is awaited).
    Expected,
    /// Longer than awaited by 1 + n.
    Other(u8),
    Bytes(Vec<u8>),
    /// An envelope sent as a binary message.
    Envelope(Env),
}

#[derive(Debug, Clone)]
enum Step {
    Send(Env),
    Junk(String),
    Mutated(usize, Vec<Mutation>),
    Frame(Frame),
    /// The transport's wait for a binary frame runs out.
    FrameMissing,
    /// The socket drains: commit everything that may go out.
    Drain,
    /// Let tool tasks run (yield this often), then feed their events.
    Progress(u8),
    /// Let this many ms pass on the paused clock, then feed events.
    Sleep(u64),
    /// Let this many gated calls finish.
    Release(u8),
    /// The heartbeat timer fires.
    Heartbeat,
    /// The transport got an oversized unit.
    TooLarge,
}

fn step() -> impl Strategy<Value = Step> {
    let frames = prop_oneof![
        5 => Just(Frame::Expected),
        2 => (0u8..3).prop_map(Frame::Other),
        1 => vec(any::<u8>(), 0..16).prop_map(Frame::Bytes),
        1 => env().prop_map(Frame::Envelope),
    ];
    Union::new_weighted(vec![
        (20, env().prop_map(Step::Send).boxed()),
        (
            1,
            prop_oneof![r#"[{}\[\]":,. a-zA-Z0-9_-]{0,40}"#, any::<String>(),]
                .prop_map(Step::Junk)
                .boxed(),
        ),
        (
            1,
            (0..TEMPLATES.len(), vec(mutation(), 1..4))
                .prop_map(|(t, m)| Step::Mutated(t, m))
                .boxed(),
        ),
        (3, frames.prop_map(Step::Frame).boxed()),
        (1, Just(Step::FrameMissing).boxed()),
        (4, Just(Step::Drain).boxed()),
        (4, (1u8..6).prop_map(Step::Progress).boxed()),
        (
            1,
            // 400 s: beyond `replay_window_time`, old envelopes expire.
            select(vec![1u64, 60, 6000, 400_000])
                .prop_map(Step::Sleep)
                .boxed(),
        ),
        (1, (1u8..4).prop_map(Step::Release).boxed()),
        (1, Just(Step::Heartbeat).boxed()),
        (1, Just(Step::TooLarge).boxed()),
    ])
}

/// The configuration variants (HAIP.md §18, §18.1), and how the run ends.
#[derive(Debug, Clone)]
struct Setup {
    /// `max_inflight_calls`, `max_queued_calls`.
    slots: Option<(usize, usize)>,
    /// `strict_flow_control` with this initial credit (messages, bytes).
    strict: Option<(u64, u64)>,
    /// `max_outbound_queue` 16 and `max_outbound_bytes` 4096.
    tight_outbox: bool,
    /// `max_outbound_message_bytes` 4096, and so (the smallest valid
    /// setting) `max_message_bytes` a third of it.
    small_messages: bool,
    announce_running: bool,
    tool_timeout_ms: Option<u64>,
    /// `replay_window_messages` 2 and `replay_budget_bytes` 8192.
    small_replay: bool,
    credit_return_messages: u64,
    max_concurrent_runs: usize,
    strict_output_validation: bool,
    debug_errors: bool,
    websocket: bool,
    /// Wind down with a server shutdown; else release the gated tools and
    /// let every call end by itself.
    shutdown: bool,
}

impl Setup {
    fn config(&self) -> Config {
        let mut config = Config {
            announce_running: self.announce_running,
            tool_timeout: self.tool_timeout_ms.map(Duration::from_millis),
            credit_return_messages: self.credit_return_messages,
            max_concurrent_runs: self.max_concurrent_runs,
            strict_output_validation: self.strict_output_validation,
            debug_errors: self.debug_errors,
            ..Config::default()
        };
        if let Some((inflight, queued)) = self.slots {
            config.max_inflight_calls = inflight;
            config.max_queued_calls = queued;
        }
        if let Some((messages, bytes)) = self.strict {
            config.strict_flow_control = true;
            config.initial_credit_messages = messages;
            config.initial_credit_bytes = bytes;
        }
        if self.tight_outbox {
            config.max_outbound_queue = 16;
            config.max_outbound_bytes = 4096;
        }
        if self.small_messages {
            config.max_outbound_message_bytes = 4096;
            config.max_message_bytes = 4096 / 3;
        }
        debug_assert!(config.validate().is_ok(), "{config:?}");
        if self.small_replay {
            config.replay_window_messages = 2;
            config.replay_budget_bytes = 8192;
        }
        config
    }
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        prop::option::weighted(0.3, (1usize..=2, 0usize..=2)),
        prop::option::weighted(
            0.2,
            (select(vec![3u64, 1000]), select(vec![4096u64, 1 << 20])),
        ),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
        prop::option::weighted(0.1, select(vec![1u64, 30, 1000])),
        prop::bool::weighted(0.15),
        select(vec![5u64, 1, 2]),
        select(vec![10usize, 1]),
        (
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.9),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                slots,
                strict,
                tight_outbox,
                small_messages,
                announce_running,
                tool_timeout_ms,
                small_replay,
                credit_return_messages,
                max_concurrent_runs,
                (strict_output_validation, debug_errors, websocket, shutdown),
            )| Setup {
                slots,
                strict,
                tight_outbox,
                small_messages,
                announce_running,
                tool_timeout_ms,
                small_replay,
                credit_return_messages,
                max_concurrent_runs,
                strict_output_validation,
                debug_errors,
                websocket,
                shutdown,
            },
        )
}

#[derive(Debug, Clone)]
struct Case {
    setup: Setup,
    steps: Vec<Step>,
}

fn case() -> impl Strategy<Value = Case> {
    (setup(), vec(step(), 1..40)).prop_map(|(setup, steps)| Case { setup, steps })
}

impl Run {
    /// The length of the awaited binary frame (3 when none is awaited).
    fn awaited_len(&self) -> usize {
        self.awaiting
            .as_ref()
            .map_or(3, |a| usize::try_from(a.expected).unwrap_or(3))
    }

    async fn step(&mut self, index: usize, step: &Step) -> Result<(), String> {
        match step {
            Step::Send(env) => {
                self.text(&env.render(index))?;
                let Some(follow) = &env.follow else {
                    return Ok(());
                };
                // Relative to what the model awaits now (nothing, if the
                // envelope was refused or carried `payload.data`).
                let awaited = self.awaited_len();
                let len = match follow {
                    Follow::Expected => awaited,
                    Follow::Longer(n) => awaited + 1 + usize::from(*n),
                };
                self.binary(&vec![0xA5; len])
            }
            Step::Junk(text) => self.text(text),
            Step::Mutated(template, mutations) => {
                match String::from_utf8(mutate(TEMPLATES[*template], mutations)) {
                    Ok(text) => self.text(&text),
                    Err(e) => self.binary(e.as_bytes()),
                }
            }
            Step::Frame(frame) => {
                let awaited = self.awaited_len();
                let bytes = match frame {
                    Frame::Expected => vec![0xA5; awaited],
                    Frame::Other(n) => vec![0x5A; awaited + 1 + usize::from(*n)],
                    Frame::Bytes(bytes) => bytes.clone(),
                    Frame::Envelope(env) => env.render(index).into_bytes(),
                };
                self.binary(&bytes)
            }
            Step::FrameMissing => {
                self.session.binary_frame_missing();
                self.frame_missing();
                self.check()
            }
            Step::Drain => self.drain(),
            Step::Progress(yields) => {
                for _ in 0..*yields {
                    tokio::task::yield_now().await;
                }
                self.pump();
                self.check()
            }
            Step::Sleep(ms) => {
                // The session's clock and the tools' clock move together:
                // replay windows expire as tools time out.
                self.act();
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                self.pump();
                self.elapse(Duration::from_millis(*ms))?;
                self.check()
            }
            Step::Release(n) => {
                self.gate.add_permits(usize::from(*n));
                Ok(())
            }
            Step::Heartbeat => {
                self.session.heartbeat();
                self.check()
            }
            Step::TooLarge => {
                let control = self.session.message_too_large();
                self.after(control)
            }
        }
    }
}

fn run_case(case: &Case) -> Result<(), String> {
    runtime().block_on(async {
        let mut run = Run::new(case.setup.config(), case.setup.websocket)?;
        for (index, step) in case.steps.iter().enumerate() {
            run.step(index, step).await.map_err(|e| {
                format!("at step {index} ({}): {e}", clip(&format!("{step:?}"), 300))
            })?;
        }
        run.finish(case.setup.shutdown).await
    })
}

proptest! {
    #![proptest_config(proptest_config(DECODE_CASES))]

    /// The decoder never panics and agrees with a plain JSON reading.
    #[test]
    fn decode_agrees_with_a_plain_json_reading(input in input()) {
        let bytes = input.bytes();
        if let Ok(text) = std::str::from_utf8(&bytes) {
            check_decode(text).map_err(TestCaseError::fail)?;
        }
    }
}

proptest! {
    #![proptest_config(proptest_config(INPUT_CASES))]

    /// Arbitrary text and binary messages: no panic, only valid envelopes
    /// out, and whatever calls they make end exactly once.
    #[test]
    fn a_session_survives_arbitrary_messages(inputs in vec((input(), any::<bool>()), 1..8)) {
        run_inputs(&inputs).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(proptest_config(SEQUENCE_CASES))]

    /// Random conversations keep every promise of HAIP.md §6.4–§6.7 and §18.1.
    #[test]
    fn envelope_sequences_end_every_accepted_call_exactly_once(case in case()) {
        run_case(&case).map_err(TestCaseError::fail)?;
    }
}

// ----- regressions ---------------------------------------------------------------------

/// Sends `units` (text messages) to a fresh WebSocket session under `config`,
/// then winds it down with a shutdown, checking everything the fuzzer does.
fn replay_units(config: Config, units: &[String]) -> Result<(), String> {
    runtime().block_on(async {
        let mut run = Run::new(config, true)?;
        for unit in units {
            run.text(unit)?;
            run.drain()?;
        }
        run.finish(true).await
    })
}

/// Every envelope the server builds from one message must fit in one
/// outbound message, or a call could end without its `TOOL_DONE` (found by
/// this harness: an unknown tool's name or a call id longer than
/// `max_outbound_message_bytes` made both the `ERROR` and the `TOOL_DONE`
/// too large to send). So `build()` refuses an outbound limit under three
/// times the inbound one...
#[test]
fn an_outbound_limit_too_small_for_the_replies_is_refused() {
    let config = Config {
        max_outbound_message_bytes: 4096,
        ..Config::default()
    };
    let error = config.validate().expect_err("4096 is less than 3 MiB");
    assert!(
        error.to_string().contains("max_outbound_message_bytes"),
        "{error}"
    );
}

/// ... and under the smallest valid limits, the longest tool name and call
/// id a message can carry still get their `ERROR` and `TOOL_DONE`.
#[test]
fn the_longest_names_a_message_can_carry_still_get_their_tool_done() {
    let config = Config {
        max_outbound_message_bytes: 4096,
        max_message_bytes: 4096 / 3,
        ..Config::default()
    };
    assert!(config.validate().is_ok());
    let room = config.max_message_bytes;
    let fill = |call: Value, field: &str| {
        let short = call.to_string().len();
        let mut call = call;
        call["payload"][field] = json!("x".repeat(room - short));
        assert_eq!(call.to_string().len(), room);
        call.to_string()
    };
    let unknown = fill(
        json!({"id": "m0", "type": "TOOL_CALL", "payload": {"call_id": "c1", "tool": ""}}),
        "tool",
    );
    let long_id = fill(
        json!({"id": "m1", "type": "TOOL_CALL",
            "payload": {"call_id": "", "tool": "echo", "params": {"message": "hi"}}}),
        "call_id",
    );
    if let Err(e) = replay_units(config, &[unknown, long_id]) {
        panic!("{}", clip(&e, 400));
    }
}

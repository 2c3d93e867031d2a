//! The per-session state machine, independent of any transport: driven,
//! never driving (the handle/poll split of ARCHITECTURE.md).
//!
//! Inputs: inbound units ([`Session::handle_text`], [`Session::handle_binary`]),
//! call events from the call runner ([`Session::handle_event`]) and the passing
//! of time ([`Session::handle_timeout`]). Outputs: committed envelopes
//! ([`Session::poll_transmit`]), what to do next ([`Session::poll_action`]: run a
//! call, validate params, send a keep-alive) and when to wake
//! ([`Session::poll_timeout`]); each handler returns a [`Control`] (go on,
//! close, resume another session). It never spawns, never awaits, never reads
//! the system clock or makes ids itself: time and ids are injected.

mod binary;
mod calls;
mod clock;
mod config;
mod flow;
#[cfg(test)]
mod fuzz;
pub(crate) mod link;
mod record;
mod refused;
mod replay;
mod resume;
#[cfg(feature = "redis")]
mod shared_store;
mod store;
#[cfg(feature = "mcp")]
pub(crate) mod tasks;
#[cfg(test)]
mod tests;
mod timers;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::context::Caller;
use crate::context::LogLevel;
use crate::exec::admit::Gate;
use crate::exec::{self, CallKey, CallRunner};
use crate::hash::{FastMap, FastSet};
use crate::protocol::payload::{
    self, Hai, InboundEvent, LastRxSeq, Payload, ReplayRequest, RunStarted, ToolSchemaRequest,
};
use crate::protocol::{
    ACCEPT_MAJOR, Channel, DecodeError, ErrorCode, EventType, HAIP_VERSION, Inbound, Outgoing,
    Prepared, decode, strict_schema_error,
};
use crate::schema::SchemaProfile;
use crate::stats::{Door, Stats};
use crate::tool::{Registry, StateMap};

pub(crate) use calls::Call;
pub(crate) use calls::LARGE_PARAMS;
pub(crate) use clock::{Clock, ID_LEN, IdSource, RandomIds, SystemClock};
#[cfg(test)]
pub(crate) use clock::{CountingIds, FakeClock};
pub(crate) use config::{SessionConfig, invalid};
use flow::{Amount, InboundCredit, OutboundGate, Owed};
pub(crate) use refused::ResumeRefused;
#[cfg(feature = "redis")]
pub(crate) use replay::REPLAY_HARD_CAP_FACTOR;
use replay::{ReplayBudget, ReplayWindow};
pub(crate) use resume::ResumeRequest;
pub(crate) use store::{
    Attached, InMemorySessionStore, SessionStore, Takeover, TakeoverAddress, next_event,
};
use timers::{Deadlines, Timers};

// The shared store's (feature `redis`).
#[cfg(feature = "redis")]
pub(crate) use {
    shared_store::{NotRestored, Record, Snapshot},
    store::{StoreFuture, Takeovers},
};

/// What a session shares with the rest of the server.
pub(crate) struct Shared {
    pub(crate) config: SessionConfig,
    pub(crate) registry: Registry,
    pub(crate) state: Arc<StateMap>,
    pub(crate) stats: Arc<Stats>,
    /// Cancelled when the server shuts down.
    pub(crate) shutdown: CancellationToken,
    /// Sessions by id, live or parked, for resumption.
    pub(crate) store: Arc<dyn SessionStore>,
    /// Where call tasks and large-params validations run (docs/protocol.md §18.1: at
    /// most `max(1, cores / 2)` validations at once), on the server's tracker.
    pub(crate) runner: CallRunner,
    /// The bytes all replay windows share (docs/protocol.md §18.1).
    pub(crate) replay: ReplayBudget,
    /// The time, for the sessions (never read from the system directly).
    pub(crate) clock: Arc<dyn Clock>,
    /// Fresh ids, for the sessions.
    pub(crate) ids: Arc<dyn IdSource>,
    /// The records of MCP tasks (kept where sessions are: shared by the
    /// instances when the session store is).
    #[cfg(feature = "mcp")]
    pub(crate) tasks: Arc<dyn tasks::TaskStore>,
    /// Spans of calls (feature `otel`; off unless an endpoint is set).
    pub(crate) tracer: crate::otel::Tracer,
}

impl Shared {
    /// What calls are admitted against: the server's tools, rules and
    /// counters; `now` is the door's clock (a session's is [`Self::clock`]).
    pub(crate) fn gate<'a>(&'a self, now: &'a dyn Fn() -> std::time::Instant) -> Gate<'a> {
        Gate {
            registry: &self.registry,
            stats: &self.stats,
            tracer: &self.tracer,
            required_scopes: &self.config.required_scopes,
            max_violations: self.config.max_violations,
            now,
        }
    }

    pub(crate) fn new(config: SessionConfig, registry: Registry, state: StateMap) -> Shared {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Shared {
            registry,
            state: Arc::new(state),
            stats: Arc::new(Stats::new()),
            shutdown: CancellationToken::new(),
            store: Arc::new(InMemorySessionStore::default()),
            runner: CallRunner::new(cores / 2),
            replay: ReplayBudget::new(config.replay_budget_bytes),
            clock: Arc::new(SystemClock),
            ids: Arc::new(RandomIds),
            #[cfg(feature = "mcp")]
            tasks: Arc::new(tasks::InMemoryTaskStore::new(
                "local",
                tasks::TaskLimits::default(),
                Arc::new(SystemClock),
            )),
            tracer: crate::otel::Tracer::default(),
            config,
        }
    }

    /// The same, on another clock and id source (tests drive a fake clock).
    #[cfg(test)]
    pub(crate) fn with_time(mut self, clock: Arc<dyn Clock>, ids: Arc<dyn IdSource>) -> Shared {
        self.clock = clock;
        self.ids = ids;
        self
    }

    /// A server's shared state with `config`, the built-in tools and nothing else.
    #[cfg(test)]
    pub(crate) fn for_tests(config: SessionConfig) -> Arc<Shared> {
        let registry = Registry::default();
        for tool in crate::tool::builtin::tools() {
            registry.register(tool);
        }
        Arc::new(Shared::new(config, registry, StateMap::default()))
    }
}

/// What the transport must do after handling an input.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Control {
    Continue,
    /// Write what is committed, then close with this code and reason;
    /// `keep_session` says whether the session stays resumable.
    Close {
        code: u16,
        reason: &'static str,
        keep_session: bool,
    },
    /// The client asks to resume another session (docs/protocol.md §11.3).
    Resume(Box<ResumeRequest>),
}

/// What the session asks of whoever drives it ([`Session::poll_action`]).
pub(crate) enum Action {
    /// Run a call: hand it to the call runner.
    Start(Box<exec::Start>),
    /// Validate large params off the session's task.
    Validate(Box<exec::Validate>),
    /// A heartbeat was due but the client filters `PING`s: on a stream, send
    /// a transport keep-alive if nothing else is flowing (docs/protocol.md §9).
    KeepAlive,
}

/// An outbound envelope waiting to be written.
enum Pending {
    /// Not yet committed; progress updates remember their call so a newer
    /// report can replace them while they wait (docs/protocol.md §6.5).
    New {
        env: Prepared,
        progress_of: Option<CallKey>,
    },
    /// Envelopes committed earlier, re-sent unchanged from the replay window
    /// one at a time as the socket drains (a `REPLAY_REQUEST`, a resumption).
    Replay(VecDeque<Bytes>),
}

/// Why a connection cannot keep up (docs/protocol.md §12.2, §18.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Overflow {
    /// More than `max_outbound_queue` envelopes wait.
    Queue,
    /// More than `max_outbound_bytes` wait behind the next one to be written.
    Bytes,
}

/// What waits in the outbox, for back-pressure (docs/protocol.md §18.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Backlog {
    /// Envelopes waiting, replayed ones included.
    pub(crate) envelopes: usize,
    /// The bytes of those not committed yet. Replayed envelopes are not
    /// counted: they are held by the replay window anyway, and a client that
    /// receives a long replay must still be able to send.
    pub(crate) bytes: usize,
}

/// One HAIP session: the state machine of docs/protocol.md §2–§14, driven
/// and never driving. It holds no socket and awaits nothing; whoever drives
/// it (`server::driver`, the in-memory carrier of `haip::testing`, the
/// fuzz harness) feeds it what happened and carries out what it asks for.
///
/// Its contract, by group (inputs are `handle_*`, outputs `poll_*`, and
/// queries nouns or questions: `backlog`, `is_idle`, `can_resume_from`):
///
/// - **Inputs**, what happened: a client's message (`handle_text`,
///   `handle_binary`, and `handle_decoded` for a large one the driver
///   decoded off the session's task), a message the transport refused
///   before reading it (`handle_oversized_message`, or
///   `handle_oversized_envelope` for one envelope of an upstream POST), a
///   text message where a binary frame was due (`handle_missing_binary`),
///   a running call's event (`handle_event`), time (`handle_timeout(now)`,
///   and `handle_traffic(now)` for any inbound traffic), the connection
///   coming and going (`handle_connect(now)`, `handle_disconnect`), another
///   connection taking the session over (`handle_resume`, then
///   `handle_connect`; a session restored from a shared store also hears of
///   the calls lost with its instance, `handle_lost_calls`), a resumption
///   refused (`handle_resume_refused`), the registry changing
///   (`handle_tools_changed`), the server stopping (`handle_shutdown`). An
///   input that ends the connection says so in the [`Control`] it returns.
/// - **Outputs**, what it asks for, each polled until it has nothing more:
///   `poll_action` (start or validate a call, keep a stream alive: the
///   [`Action`]s the driver carries out on the runner), `poll_transmit` (the
///   next envelope, its `seq` and `ts` assigned, to write), and
///   `poll_timeout` (when it must next be told the time).
/// - **Back-pressure**: `backlog` and `has_outbound` (what waits, to pause
///   reading while the outbox is full), `overflow` (a client too slow to
///   keep, to close), `is_idle` (nothing owed: shutdown may close now).
///
/// A driver, after each input, polls in this order: `poll_action` until
/// `None` (actions may commit envelopes, such as a call that ends at
/// once), then `poll_transmit` while its writer has room, then `overflow`,
/// then `poll_timeout` to arm its one timer. Nothing the session decides is
/// lost by polling late: actions and envelopes wait for the next poll.
pub(crate) struct Session {
    shared: Arc<Shared>,
    id: Arc<str>,
    /// The door its connection came in by (what `HAI` advertises, and the
    /// heartbeat, depend on it).
    door: Door,
    next_seq: u64,
    outbox: VecDeque<Pending>,
    /// Uncommitted envelopes in the outbox, and their bytes.
    new_envelopes: usize,
    new_bytes: usize,
    /// Replayed envelopes in the outbox.
    replay_envelopes: usize,
    window: ReplayWindow,
    inbound_credit: InboundCredit,
    gate: OutboundGate,
    /// The client's `HAI` asked for flow control (`capabilities.flow_control`).
    client_flow_control: bool,
    /// The client's `HAI` said it answers tools' questions
    /// (`capabilities.tool_input`, docs/protocol.md §6.11).
    tool_input: bool,
    /// The least severe tool log line the client wants (`capabilities.log_level`).
    log_level: LogLevel,
    /// The schema profile the client asked for (`capabilities.schema_profile`,
    /// docs/protocol.md §6.14); the server's default when `None`.
    schema_profile: Option<SchemaProfile>,
    /// What the driver is to do next, in order.
    actions: VecDeque<Action>,
    /// Heartbeat, idle timeout, binary frame wait.
    timers: Timers,
    /// Call timeouts and cancel grace periods.
    deadlines: Deadlines,
    calls: FastMap<CallKey, Call>,
    /// call_id → key, for calls whose `TOOL_DONE` is not yet issued.
    active_ids: FastMap<String, CallKey>,
    /// Calls waiting for a slot, first in first out.
    waiting: VecDeque<CallKey>,
    /// Tasks holding a concurrency slot (a timed-out task keeps it until it stops).
    running: usize,
    /// Calls whose params are being validated off the session task.
    validating: usize,
    /// Bytes of params held by calls waiting to run (queued or validating).
    held_bytes: usize,
    /// Bytes of the inbound unit being handled.
    inbound_len: usize,
    next_key: u64,
    /// The client's `accept_events`, when it sent one (only the names of
    /// HAIP 1 types are kept: a long list of others costs nothing).
    accept_events: Option<FastSet<EventType>>,
    /// Runs the client declared and has not finished (docs/protocol.md §8).
    runs: FastSet<String>,
    /// The authenticated subject that opened the session (`None`: auth off).
    subject: Option<Arc<str>>,
    /// Who is connected to it now: the subject, its token's scopes and
    /// claims (`None`: auth off). A resuming connection brings its own.
    caller: Option<Arc<Caller>>,
    /// Highest inbound `seq` seen.
    last_rx_seq: u64,
    /// Whether any accepted envelope carried a `seq` (for `strict_envelope`).
    seq_seen: bool,
    /// An envelope waiting for its binary frame (docs/protocol.md §13).
    awaited: Option<Box<binary::Awaited>>,
    received_any: bool,
}

impl Session {
    /// A fresh session, on a connection from now on; its `HAI` is already in
    /// the outbox.
    pub(crate) fn new(shared: Arc<Shared>, door: Door, caller: Option<Arc<Caller>>) -> Session {
        let window = ReplayWindow::new(replay::Limits::from(&shared.config));
        let inbound_credit = InboundCredit::new(
            Amount {
                messages: shared.config.initial_credit_messages,
                bytes: shared.config.initial_credit_bytes,
            },
            Amount {
                messages: shared.config.credit_return_messages,
                bytes: shared.config.credit_return_bytes,
            },
        );
        let mut session = Session {
            id: Arc::from(shared.ids.fresh()),
            shared,
            door,
            next_seq: 1,
            outbox: VecDeque::new(),
            new_envelopes: 0,
            new_bytes: 0,
            replay_envelopes: 0,
            window,
            inbound_credit,
            gate: OutboundGate::default(),
            client_flow_control: false,
            tool_input: false,
            log_level: LogLevel::Info,
            schema_profile: None,
            actions: VecDeque::new(),
            timers: Timers::default(),
            deadlines: Deadlines::new(),
            calls: FastMap::default(),
            active_ids: FastMap::default(),
            waiting: VecDeque::new(),
            running: 0,
            validating: 0,
            held_bytes: 0,
            inbound_len: 0,
            next_key: 0,
            accept_events: None,
            runs: FastSet::default(),
            subject: caller.as_deref().map(|c| Arc::from(c.subject())),
            caller,
            last_rx_seq: 0,
            seq_seen: false,
            awaited: None,
            received_any: false,
        };
        session.record_opened();
        let hai = session.hai_payload();
        session.push(Outgoing::new(Channel::System, EventType::Hai, hai));
        let now = session.shared.clock.now();
        session.handle_connect(now);
        session
    }

    /// The next thing the driver is to do, in the order the session decided them.
    pub(crate) fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// What the session's replay window counts against the server's budget.
    pub(crate) fn window_cost(&self) -> usize {
        self.window.cost()
    }

    /// What the session shares with the rest of the server.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The session's UUID.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The door the session's connection came in by.
    pub(crate) fn door(&self) -> Door {
        self.door
    }

    /// The caller connected to the session, when authentication is on.
    pub(crate) fn caller(&self) -> Option<&Arc<Caller>> {
        self.caller.as_ref()
    }

    /// The caller now connected (a resuming connection's; the subject is
    /// the session's, checked before).
    pub(crate) fn set_caller(&mut self, caller: Option<Arc<Caller>>) {
        self.caller = caller;
    }

    /// The subject that opened the session, when authentication is on.
    pub(crate) fn subject(&self) -> Option<&Arc<str>> {
        self.subject.as_ref()
    }

    fn config(&self) -> &SessionConfig {
        &self.shared.config
    }

    fn hai_payload(&self) -> Value {
        let c = self.config();
        json!({
            "haip_version": HAIP_VERSION,
            "accept_major": ACCEPT_MAJOR,
            "accept_events": EventType::ALL.iter().map(|e| e.as_str()).collect::<Vec<_>>(),
            "capabilities": {
                "binary_frames": self.door == Door::WebSocket,
                "flow_control": {
                    "initial_credit_messages": c.initial_credit_messages,
                    "initial_credit_bytes": c.initial_credit_bytes,
                },
                "max_concurrent_runs": c.max_concurrent_runs,
                "signed_envelopes": false,
            },
        })
    }

    // ----- outbox -------------------------------------------------------------

    fn push(&mut self, out: Outgoing) {
        let env = Prepared::new(&out);
        self.push_prepared(env, None);
    }

    /// Queues an envelope. One larger than `max_outbound_message_bytes` is
    /// dropped and logged: the session's own envelopes are checked before
    /// they get here (`TOOL_DONE` becomes `RESULT_TOO_LARGE`, progress is
    /// dropped), so only an outsized schema or tool list can reach this.
    fn push_prepared(&mut self, env: Prepared, progress_of: Option<CallKey>) {
        let limit = self.config().max_outbound_message_bytes;
        if env.len() > limit {
            tracing::error!(
                event = env.event().as_str(),
                size = env.len(),
                limit,
                "outbound envelope over max_outbound_message_bytes dropped"
            );
            return;
        }
        self.count_new(env.len(), true);
        self.outbox.push_back(Pending::New { env, progress_of });
    }

    /// Queues envelopes committed earlier, to be re-sent as the socket drains.
    fn push_replay(&mut self, texts: Vec<Bytes>, at_front: bool) {
        if texts.is_empty() {
            return;
        }
        self.replay_envelopes += texts.len();
        let entry = Pending::Replay(texts.into());
        if at_front {
            self.outbox.push_front(entry);
        } else {
            self.outbox.push_back(entry);
        }
    }

    /// Counts an uncommitted envelope in (`added`) or out of the outbox, here
    /// and in the server's `outboundBytes`.
    fn count_new(&mut self, bytes: usize, added: bool) {
        let gauge = &self.shared.stats.outbound_bytes;
        if added {
            self.new_envelopes += 1;
            self.new_bytes += bytes;
            gauge.fetch_add(bytes as u64, Relaxed);
        } else {
            self.new_envelopes -= 1;
            self.new_bytes -= bytes;
            gauge.fetch_sub(bytes as u64, Relaxed);
        }
    }

    /// What waits to be written: uncommitted and replayed envelopes.
    pub(crate) fn backlog(&self) -> Backlog {
        Backlog {
            envelopes: self.new_envelopes + self.replay_envelopes,
            bytes: self.new_bytes,
        }
    }

    /// Whether the client is not keeping up: more than `max_outbound_queue`
    /// uncommitted envelopes, or more than `max_outbound_bytes` of them behind
    /// the next one to go (so a single large result never counts against
    /// itself). Replays are not counted: they are fed as the socket drains.
    pub(crate) fn overflow(&self) -> Option<Overflow> {
        let config = self.config();
        if self.new_envelopes > config.max_outbound_queue {
            return Some(Overflow::Queue);
        }
        if self.new_bytes > config.max_outbound_bytes {
            let head = self
                .outbox
                .iter()
                .find_map(|p| match p {
                    Pending::New { env, .. } => Some(env.len()),
                    Pending::Replay(_) => None,
                })
                .unwrap_or(0);
            if self.new_bytes - head > config.max_outbound_bytes {
                return Some(Overflow::Bytes);
            }
        }
        None
    }

    /// Whether something is waiting to be committed and written.
    pub(crate) fn has_outbound(&self) -> bool {
        self.next_ready().is_some()
    }

    /// The outbox position of the next envelope that may go out: the first
    /// one not held by a paused channel or, in strict mode, missing client credit.
    fn next_ready(&self) -> Option<usize> {
        let strict = self.shared.config.strict_flow_control;
        let may_hold = self.gate.any_paused() || (strict && self.gate.has_credit_limits());
        if !may_hold {
            return (!self.outbox.is_empty()).then_some(0);
        }
        self.outbox.iter().position(|p| match p {
            Pending::New { env, .. } => self.gate.open(env.channel(), strict),
            Pending::Replay(_) => true,
        })
    }

    /// Commits the next envelope (assigns its `seq`, keeps it in the replay
    /// window) and returns its JSON text; replayed envelopes come out unchanged.
    pub(crate) fn poll_transmit(&mut self) -> Option<Bytes> {
        let index = self.next_ready()?;
        if let Some(Pending::Replay(texts)) = self.outbox.get_mut(index) {
            let text = texts.pop_front();
            if texts.is_empty() {
                self.outbox.remove(index);
            }
            let text = text?;
            self.replay_envelopes -= 1;
            return Some(text);
        }
        let Some(Pending::New { env, progress_of }) = self.outbox.remove(index) else {
            return None;
        };
        self.count_new(env.len(), false);
        if let Some(key) = progress_of
            && let Some(call) = self.calls.get_mut(&key)
        {
            call.progress_pending = false;
        }
        if env.event() == EventType::Error {
            self.shared.stats.errors.fetch_add(1, Relaxed);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut id = [0u8; ID_LEN];
        let id = self.shared.ids.write(&mut id);
        let ts = self.shared.clock.unix_millis();
        let text = Bytes::from(env.encode(id, &self.id, seq, ts));
        self.gate.spend(env.channel(), text.len() as u64);
        self.window.keep(
            seq,
            text.clone(),
            self.shared.clock.now(),
            &self.shared.replay,
        );
        self.record_committed(seq, &text);
        Some(text)
    }

    /// Queues a typed payload, written straight to JSON text (no `Value`).
    fn push_payload<P: Payload>(&mut self, channel: Channel, payload: &P) {
        let env = Prepared::from_json(channel, P::EVENT, &payload.to_json(), None, None);
        self.push_prepared(env, None);
    }

    /// Sends the `ERROR` a payload that could not be used is answered with.
    fn reply_error(&mut self, reply: payload::Error) {
        let payload::Error {
            code,
            message,
            related_id,
            detail,
        } = reply;
        self.error(
            code,
            message,
            related_id.as_deref(),
            detail.map(Value::Object),
        );
    }

    fn error(
        &mut self,
        code: ErrorCode,
        message: impl Into<String>,
        related_id: Option<&str>,
        detail: Option<Value>,
    ) {
        self.error_about(code, message, related_id, detail, None, None);
    }

    fn error_about(
        &mut self,
        code: ErrorCode,
        message: impl Into<String>,
        related_id: Option<&str>,
        detail: Option<Value>,
        run_id: Option<&str>,
        thread_id: Option<&str>,
    ) {
        let mut payload = Map::new();
        payload.insert("code".into(), code.as_str().into());
        payload.insert("message".into(), message.into().into());
        if let Some(id) = related_id {
            payload.insert("related_id".into(), id.into());
        }
        if let Some(detail) = detail {
            payload.insert("detail".into(), detail);
        }
        self.push(Outgoing {
            channel: Channel::System,
            event: EventType::Error,
            payload: Value::Object(payload),
            run_id: run_id.map(str::to_owned),
            thread_id: thread_id.map(str::to_owned),
        });
    }

    /// Whether the client's `accept_events` lets unsolicited traffic of this type through.
    fn accepts(&self, event: EventType) -> bool {
        self.accept_events
            .as_ref()
            .is_none_or(|set| set.contains(&event))
    }

    // ----- inbound ------------------------------------------------------------

    /// Handles one inbound unit (docs/protocol.md §2.2 steps 2–7). Oversized units are
    /// the transport's to reject (step 1), see [`Session::handle_oversized_message`].
    pub(crate) fn handle_text(&mut self, text: &str) -> Control {
        let decoded = decode_unit(text, self.shared.config.strict_envelope);
        self.handle_decoded(text.len(), decoded)
    }

    /// Handles one inbound unit of `text_len` bytes already decoded with
    /// [`decode_unit`] (a transport decodes a large one off the session's task).
    pub(crate) fn handle_decoded(
        &mut self,
        text_len: usize,
        decoded: Result<Inbound, DecodeError>,
    ) -> Control {
        // A text message where a binary frame was due (docs/protocol.md §13).
        self.handle_missing_binary();
        #[cfg(feature = "metrics")]
        self.shared
            .stats
            .traffic
            .bytes_in
            .fetch_add(text_len as u64, Relaxed);
        let strict_envelope = self.shared.config.strict_envelope;
        match decoded {
            // `strict_envelope`: a `seq` not above the highest seen is dropped, silently.
            Ok(inbound)
                if strict_envelope
                    && self.seq_seen
                    && inbound.seq.is_some_and(|seq| seq <= self.last_rx_seq) =>
            {
                Control::Continue
            }
            Ok(inbound) => {
                self.shared.stats.total_messages.fetch_add(1, Relaxed);
                let first = !self.received_any;
                self.received_any = true;
                // Two-frame binary: the envelope waits for its body.
                if self.door == Door::WebSocket
                    && let Some(bin_len) = inbound.bin_len
                    && !inbound.payload.contains_key("data")
                {
                    return self.await_binary(inbound, text_len, bin_len, first);
                }
                self.accept(inbound, text_len as u64, first)
            }
            Err(err) => {
                if err.code == ErrorCode::UNSUPPORTED_TYPE {
                    // Passed step 3: it counts as a message.
                    self.shared.stats.total_messages.fetch_add(1, Relaxed);
                }
                self.received_any = true;
                self.decode_error(err);
                Control::Continue
            }
        }
    }

    /// docs/protocol.md §2.2 steps 6–7 for a decoded envelope of `bytes` (its text,
    /// plus its binary body): credit, then dispatch.
    fn accept(&mut self, mut inbound: Inbound, bytes: u64, first: bool) -> Control {
        self.inbound_len = usize::try_from(bytes).unwrap_or(usize::MAX);
        let fallback = inbound.event.default_channel().as_str();
        // The dispatch does not read the channel: move it, don't copy it.
        let channel = if self.inbound_credit.tracked(&inbound.channel, fallback) == inbound.channel
        {
            std::mem::take(&mut inbound.channel)
        } else {
            fallback.to_owned()
        };
        let strict = self.shared.config.strict_flow_control;
        if strict && !self.inbound_credit.has_credit(&channel, bytes) {
            // Step 6: dropped, not accepted (a TOOL_CALL gets no TOOL_DONE).
            self.error(
                ErrorCode::FLOW_CONTROL_VIOLATION,
                "Insufficient credits for channel",
                inbound.id.as_deref(),
                Some(json!({ "channel": channel, "reason": "INSUFFICIENT_CREDITS" })),
            );
            return Control::Continue;
        }
        let control = self.dispatch(inbound, first);
        let returns = self.client_flow_control && self.accepts(EventType::FlowUpdate);
        if let Owed::Return(channel, amount) = self
            .inbound_credit
            .handled(&channel, bytes, returns, strict)
        {
            self.push(Outgoing::new(
                Channel::System,
                EventType::FlowUpdate,
                json!({ "channel": channel, "add_messages": amount.messages, "add_bytes": amount.bytes }),
            ));
        }
        // A client that gets its credit back is owed it wherever the
        // session is restored (one without returns is owed nothing).
        if returns {
            self.record_owed();
        }
        control
    }

    fn decode_error(&mut self, err: DecodeError) {
        let DecodeError {
            code,
            message,
            related_id,
            detail,
        } = err;
        self.error(code, message, related_id.as_deref(), Some(detail));
    }

    /// Reports an inbound unit over `max_message_bytes`; the transport closes after it.
    pub(crate) fn handle_oversized_message(&mut self) -> Control {
        self.handle_oversized_envelope();
        Control::Close {
            code: 1009,
            reason: "message too large",
            keep_session: true,
        }
    }

    /// Reports an envelope over `max_message_bytes` that is skipped (one
    /// element of an upstream POST: the connection is not at fault).
    pub(crate) fn handle_oversized_envelope(&mut self) {
        let limit = self.config().max_message_bytes;
        self.error(
            ErrorCode::MESSAGE_TOO_LARGE,
            format!("Message exceeds {limit} bytes"),
            None,
            Some(json!({ "limit": limit })),
        );
    }

    fn dispatch(&mut self, mut msg: Inbound, first: bool) -> Control {
        if let Some(seq) = msg.seq {
            self.last_rx_seq = self.last_rx_seq.max(seq);
            self.seq_seen = true;
        }
        // The payload is decoded once, here; a `TOOL_CALL` without a call id
        // or an envelope id takes one from the session's id source.
        let ids = &self.shared.ids;
        let event = match InboundEvent::decode_with(&mut msg, || ids.fresh()) {
            Ok(event) => event,
            Err(e) => {
                // docs/protocol.md prescribes an ERROR for some (§6.3, §8, §11.2) and
                // silence for the rest (§6.7, §12.2).
                if let Some(reply) = e.reply() {
                    self.reply_error(reply);
                }
                return Control::Continue;
            }
        };
        match event {
            InboundEvent::Hai(hai) => return self.handle_hai(&msg, hai, first),
            InboundEvent::Ping(ping) => self.push_payload(Channel::System, &ping.pong()),
            InboundEvent::ToolList(_) => {
                let payload = self.tool_list();
                self.push(Outgoing::new(Channel::Agent, EventType::ToolList, payload));
            }
            InboundEvent::ToolSchema(request) => self.handle_tool_schema(&msg, request),
            InboundEvent::ToolCall(call) => self.handle_tool_call(msg, call),
            InboundEvent::ToolCancel(cancel) => self.cancel_call(&cancel.call_id, cancel.reason),
            InboundEvent::ToolInput(input) => self.handle_tool_input(&msg, input),
            InboundEvent::RunStarted(run) => self.run_started(&msg, run),
            InboundEvent::RunFinished(run) => self.run_finished(&msg, &run.run_id, false),
            InboundEvent::RunCancel(run) => self.run_finished(&msg, &run.run_id, true),
            InboundEvent::RunError(run) => {
                if let Some(run_id) = run.run_id {
                    self.runs.remove(&run_id);
                }
            }
            InboundEvent::ReplayRequest(request) => self.handle_replay_request(&msg, request),
            InboundEvent::FlowUpdate(flow) => {
                let amount = Amount {
                    messages: flow.add_messages.map_or(0, u64::from),
                    bytes: flow.add_bytes.map_or(0, u64::from),
                };
                self.gate.grant(&flow.channel, amount);
            }
            InboundEvent::PauseChannel(pause) => {
                self.gate.pause(&pause.channel);
                self.record_paused();
            }
            InboundEvent::ResumeChannel(resume) => {
                self.gate.resume(&resume.channel);
                self.record_paused();
            }
            // Accepted and handed to no hook yet: text, audio, inbound tool
            // traffic the server does not act on (§6.8), PONG, ERROR, a client
            // advertising its own tools.
            _ => {}
        }
        Control::Continue
    }

    fn handle_hai(&mut self, msg: &Inbound, hai: Hai, first: bool) -> Control {
        if !hai.is_compatible() {
            self.error(
                ErrorCode::VERSION_INCOMPATIBLE,
                "No common protocol major version",
                msg.id.as_deref(),
                Some(json!({ "supported_major": ACCEPT_MAJOR })),
            );
            return Control::Close {
                code: 1002,
                reason: "version incompatible",
                keep_session: false,
            };
        }
        let resuming =
            hai.last_rx_seq.is_some() && msg.session.as_deref().is_some_and(|s| s != &*self.id);
        if !resuming {
            self.apply_hai_settings(&hai, msg.id.as_deref());
            if self.wants_tools_changed() {
                self.push_tool_list();
            }
        } else if first {
            // The connection's driver looks the session up and takes it over.
            return Control::Resume(Box::new(ResumeRequest {
                session: msg.session.clone().unwrap_or_default(),
                last_rx_seq: match hai.last_rx_seq {
                    Some(LastRxSeq::Seq(seq)) => Some(seq),
                    _ => None,
                },
                related_id: msg.id.clone(),
                hai,
                text: None,
            }));
        } else {
            self.handle_resume_refused(ResumeRefused::NotFirstMessage, msg.id.as_deref(), &hai);
        }
        Control::Continue
    }

    /// Whether registry changes are pushed to this client (`advertise_tools`
    /// on, and `TOOL_LIST` in the `accept_events` of its `HAI`).
    fn wants_tools_changed(&self) -> bool {
        self.shared.config.advertise_tools
            && self
                .accept_events
                .as_ref()
                .is_some_and(|set| set.contains(&EventType::ToolList))
    }

    /// The registry changed: sends the current `TOOL_LIST` unsolicited, if
    /// the client wants registry changes pushed.
    pub(crate) fn handle_tools_changed(&mut self) {
        if self.wants_tools_changed() {
            self.push_tool_list();
        }
    }

    /// Sends the current `TOOL_LIST` unsolicited.
    fn push_tool_list(&mut self) {
        let payload = self.tool_list();
        self.push(Outgoing::new(Channel::Agent, EventType::ToolList, payload));
    }

    /// The `TOOL_LIST` payload: each tool's name, and its description,
    /// title, annotations and icons when it has them (docs/protocol.md §6.2, §6.13).
    fn tool_list(&self) -> Value {
        let snapshot = self.shared.registry.snapshot();
        let caller = self.caller.as_deref();
        let tools = snapshot
            .tools()
            .iter()
            .filter(|t| self.config().shows(caller, t))
            .map(|t| payload::ToolListItem {
                name: t.name().to_owned(),
                description: t.description().to_owned(),
                title: t.title().map(str::to_owned),
                annotations: t.annotations().clone(),
                icons: t.icons().to_vec(),
            })
            .collect();
        payload::ToolList { tools }.to_value()
    }

    /// `ERROR INVALID_MESSAGE` for a schema profile name that is not one
    /// (docs/protocol.md §6.14), listing the valid ones.
    pub(super) fn unknown_profile(&mut self, name: &str, related_id: Option<&str>) {
        let profiles: Vec<&str> = SchemaProfile::ALL.iter().map(|p| p.name()).collect();
        // Quoted briefly: the name is the client's.
        let shown: String = name.chars().take(40).collect();
        self.error(
            ErrorCode::INVALID_MESSAGE,
            format!(
                "Unknown schema profile {}; expected one of: {}",
                json!(shown),
                profiles.join(", ")
            ),
            related_id,
            Some(json!({ "reason": "unknown profile", "profiles": profiles })),
        );
    }

    fn handle_tool_schema(&mut self, msg: &Inbound, request: ToolSchemaRequest) {
        let name = request.tool;
        let profile = match request.profile.as_deref().map(str::parse::<SchemaProfile>) {
            None => self.schema_profile.unwrap_or(self.config().schema_profile),
            Some(Ok(profile)) => profile,
            Some(Err(e)) => {
                self.unknown_profile(&e.name, msg.id.as_deref());
                return;
            }
        };
        // A tool the caller may not use is not shown to it (docs/protocol.md §17.1).
        let tool = self
            .shared
            .registry
            .get(&name)
            .filter(|t| self.config().shows(self.caller.as_deref(), t));
        let Some(tool) = tool else {
            let (message, similar) = self.tool_not_found(&name);
            let mut detail = json!({ "tool": name });
            if !similar.is_empty() {
                detail["did_you_mean"] = json!(similar);
            }
            self.error(
                ErrorCode::TOOL_NOT_FOUND,
                message,
                msg.id.as_deref(),
                Some(detail),
            );
            return;
        };
        let Some(input) = tool.advertised_input_schema(profile) else {
            let why = crate::schema::refusals(tool.schema_problems(profile));
            self.error(
                ErrorCode::INVALID_MESSAGE,
                format!(
                    "Tool {name} cannot be described in the {profile} profile: {}",
                    why.join("; ")
                ),
                msg.id.as_deref(),
                Some(json!({
                    "reason": "profile cannot serve the tool",
                    "tool": name,
                    "profile": profile.name(),
                    "problems": why,
                })),
            );
            return;
        };
        let reply = payload::ToolSchema {
            tool: tool.name().to_owned(),
            input_schema: input.clone(),
            output_schema: tool.advertised_output_schema(profile).cloned(),
            schema: self
                .config()
                .tool_schema_legacy_field
                .then(|| input.clone()),
            title: tool.title().map(str::to_owned),
            annotations: tool.annotations().clone(),
            icons: tool.icons().to_vec(),
        };
        self.push(Outgoing::new(
            Channel::Agent,
            EventType::ToolSchema,
            reply.to_value(),
        ));
    }

    fn handle_replay_request(&mut self, msg: &Inbound, request: ReplayRequest) {
        let ReplayRequest { from_seq, to_seq } = request;
        match self.window.range(from_seq, to_seq, self.next_seq) {
            Ok(texts) => self.push_replay(texts, false),
            Err(too_old) => self.error(
                ErrorCode::REPLAY_TOO_OLD,
                "Requested envelopes are no longer kept",
                msg.id.as_deref(),
                Some(json!({ "oldest_seq": too_old.oldest_seq.to_string() })),
            ),
        }
    }

    fn run_started(&mut self, msg: &Inbound, run: RunStarted) {
        let run_id = run.run_id.unwrap_or_else(|| self.shared.ids.fresh());
        if self.runs.contains(&run_id) {
            return;
        }
        let limit = self.config().max_concurrent_runs;
        if self.runs.len() >= limit {
            self.error(
                ErrorCode::RUN_LIMIT_EXCEEDED,
                "Too many concurrent runs",
                msg.id.as_deref(),
                Some(json!({ "max_concurrent_runs": limit })),
            );
            return;
        }
        self.runs.insert(run_id);
    }

    /// `RUN_FINISHED` closes a run; `RUN_CANCEL` (`cancel`) also cancels every
    /// active call that carried its id (docs/protocol.md §8). A missing run id was
    /// answered `MISSING_RUN_ID` when the payload was decoded.
    fn run_finished(&mut self, msg: &Inbound, run_id: &str, cancel: bool) {
        let was_active = self.runs.remove(run_id);
        let cancelled = cancel && self.cancel_run_calls(run_id, "run cancelled") > 0;
        if !was_active && !cancelled {
            self.error(
                ErrorCode::RUN_NOT_FOUND,
                "Run not found",
                msg.id.as_deref(),
                Some(json!({ "run_id": run_id })),
            );
        }
    }

    /// A heartbeat is due ([`Session::handle_timeout`] says when): sends an
    /// unsolicited `PING`, unless the client filtered them out; returns
    /// whether it did.
    fn handle_heartbeat(&mut self) -> bool {
        if !self.accepts(EventType::Ping) {
            return false;
        }
        let nonce = self.shared.ids.fresh();
        self.push(Outgoing::new(
            Channel::System,
            EventType::Ping,
            json!({ "nonce": nonce }),
        ));
        true
    }
}

/// docs/protocol.md §2.2 steps 2–5 (and the `strict_envelope` schema) for one inbound
/// unit: the part of handling it that needs no session, so a transport may
/// run it off the session's task when the unit is large.
pub(crate) fn decode_unit(text: &str, strict_envelope: bool) -> Result<Inbound, DecodeError> {
    if strict_envelope && let Some(err) = strict_schema_error(text) {
        return Err(err);
    }
    decode(text)
}

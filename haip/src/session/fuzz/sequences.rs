//! Random envelope sequences: the inbound units, the steps between them and
//! the settings a session runs under.

use super::*;

/// One of `items`, by weight; earlier items are where shrinking heads.
pub(super) fn pick<T: Clone + Debug + 'static>(items: Vec<(u32, T)>) -> BoxedStrategy<T> {
    Union::new_weighted(
        items
            .into_iter()
            .map(|(weight, item)| (weight, Just(item).boxed()))
            .collect(),
    )
    .boxed()
}

/// A JSON object of the present entries.
pub(super) fn object(entries: Vec<(&str, Option<Value>)>) -> Map<String, Value> {
    entries
        .into_iter()
        .filter_map(|(key, value)| value.map(|v| (key.to_owned(), v)))
        .collect()
}

/// The envelope id, made concrete (and, where it should be, unique) when rendered.
#[derive(Debug, Clone)]
pub(super) enum Id {
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
pub(super) struct Env {
    pub(super) id: Id,
    pub(super) event: String,
    pub(super) payload: Map<String, Value>,
    /// Other envelope fields: channel, seq, run_id, bin_len, crit, …
    pub(super) fields: Vec<(&'static str, Value)>,
    /// With `bin_len`: the binary message sent right after it, if any.
    pub(super) follow: Option<Follow>,
}

/// The binary message that follows an envelope announcing one (docs/protocol.md §13).
#[derive(Debug, Clone)]
pub(super) enum Follow {
    /// Exactly the announced length.
    Expected,
    /// Longer by 1 + n.
    Longer(u8),
}

/// Long strings shortened, so that a failing case stays readable.
pub(super) fn abbreviated(v: &Value) -> Value {
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
    pub(super) fn render(&self, step: usize) -> String {
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
pub(super) type Kind = (String, Map<String, Value>, Vec<(&'static str, Value)>);

pub(super) fn kind(event: &str, payload: Map<String, Value>) -> Kind {
    (event.to_owned(), payload, Vec::new())
}

/// Call ids from a small pool, so that duplicates happen; `"1"` and `1` are
/// the same id (docs/protocol.md §6.4 step 1).
pub(super) fn call_ids() -> BoxedStrategy<Option<Value>> {
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

pub(super) fn tool_call() -> impl Strategy<Value = Kind> {
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
        // Over 64 KiB: validated off the session task (docs/protocol.md §18.1).
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

pub(super) fn tool_cancel() -> impl Strategy<Value = Kind> {
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

pub(super) fn run_event() -> impl Strategy<Value = Kind> {
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

pub(super) fn ping() -> impl Strategy<Value = Kind> {
    pick(vec![
        (2, None),
        (3, Some(json!("n"))),
        (1, Some(json!(5))),
        (1, Some(json!({"deep": [1, {"x": null}]}))),
        (1, Some(json!("N".repeat(5000)))),
    ])
    .prop_map(|nonce| kind("PING", object(vec![("nonce", nonce)])))
}

pub(super) fn replay_request() -> impl Strategy<Value = Kind> {
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

pub(super) fn pause_or_resume() -> impl Strategy<Value = Kind> {
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

pub(super) fn flow_update() -> impl Strategy<Value = Kind> {
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

pub(super) fn hai() -> impl Strategy<Value = Kind> {
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

pub(super) fn other() -> impl Strategy<Value = Kind> {
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

pub(super) fn env() -> impl Strategy<Value = Env> {
    (ids(), kinds(), generic_fields()).prop_map(|(id, kind, generic)| assemble(id, kind, generic))
}

/// The kinds of envelope, weighted.
fn kinds() -> impl Strategy<Value = Kind> {
    Union::new_weighted(vec![
        (10, tool_call().boxed()),
        (3, tool_cancel().boxed()),
        (4, run_event().boxed()),
        (2, ping().boxed()),
        (2, replay_request().boxed()),
        (3, pause_or_resume().boxed()),
        (1, flow_update().boxed()),
        (2, hai().boxed()),
        (2, other().boxed()),
    ])
}

/// Envelope ids: unique, numeric, absent, shared, odd.
fn ids() -> BoxedStrategy<Id> {
    pick(vec![
        (8, Id::Unique),
        (2, Id::Numeric),
        (3, Id::Absent),
        (1, Id::Shared(1)),
        (1, Id::Shared(2)),
        (1, Id::Odd),
    ])
}

/// The fields any envelope may carry, each `None` when left out: channel,
/// seq, run_id, thread_id, crit, an unknown field; and the binary frame it
/// may announce: its `bin_len`, whether `payload.data` makes it base64, and
/// what follows it.
type Generic = (
    Option<Value>,
    Option<Value>,
    Option<Value>,
    Option<Value>,
    Option<Value>,
    Option<Value>,
    Option<(Value, bool, Option<Follow>)>,
);

/// The fields of [`Generic`], weighted.
fn generic_fields() -> impl Strategy<Value = Generic> {
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
    (channels, seqs, run_ids, thread_ids, crits, extras, bins)
}

/// One envelope of a kind, with the generic fields its kind does not set
/// itself.
fn assemble(id: Id, (event, mut payload, mut fields): Kind, generic: Generic) -> Env {
    let (channel, seq, run_id, thread_id, crit, extra, bin) = generic;
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
}

/// A binary message, relative to the frame the model says is awaited.
#[derive(Debug, Clone)]
pub(super) enum Frame {
    /// Exactly the awaited length (3 bytes when none is awaited).
    Expected,
    /// Longer than awaited by 1 + n.
    Other(u8),
    Bytes(Vec<u8>),
    /// An envelope sent as a binary message.
    Envelope(Env),
}

#[derive(Debug, Clone)]
pub(super) enum Step {
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

pub(super) fn step() -> impl Strategy<Value = Step> {
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

/// The configuration variants (docs/protocol.md §18, §18.1), and how the run ends.
#[derive(Debug, Clone)]
pub(super) struct Setup {
    /// `max_inflight_calls`, `max_queued_calls`.
    pub(super) slots: Option<(usize, usize)>,
    /// `strict_flow_control` with this initial credit (messages, bytes).
    pub(super) strict: Option<(u64, u64)>,
    /// `max_outbound_queue` 16 and `max_outbound_bytes` 4096.
    pub(super) tight_outbox: bool,
    /// `max_outbound_message_bytes` 4096, and so (the smallest valid
    /// setting) `max_message_bytes` a third of it.
    pub(super) small_messages: bool,
    pub(super) announce_running: bool,
    pub(super) tool_timeout_ms: Option<u64>,
    /// `replay_window_messages` 2 and `replay_budget_bytes` 8192.
    pub(super) small_replay: bool,
    pub(super) credit_return_messages: u64,
    pub(super) max_concurrent_runs: usize,
    pub(super) strict_output_validation: bool,
    pub(super) debug_errors: bool,
    pub(super) websocket: bool,
    /// Wind down with a server shutdown; else release the gated tools and
    /// let every call end by itself.
    pub(super) shutdown: bool,
}

impl Setup {
    pub(super) fn config(&self) -> Config {
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

pub(super) fn setup() -> impl Strategy<Value = Setup> {
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
pub(super) struct Case {
    pub(super) setup: Setup,
    pub(super) steps: Vec<Step>,
}

pub(super) fn case() -> impl Strategy<Value = Case> {
    (setup(), vec(step(), 1..40)).prop_map(|(setup, steps)| Case { setup, steps })
}

impl Run {
    /// The length of the awaited binary frame (3 when none is awaited).
    pub(super) fn awaited_len(&self) -> usize {
        self.awaiting
            .as_ref()
            .map_or(3, |a| usize::try_from(a.expected).unwrap_or(3))
    }

    pub(super) async fn step(&mut self, index: usize, step: &Step) -> Result<(), String> {
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
                self.session.handle_missing_binary();
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
                self.session.handle_heartbeat();
                self.check()
            }
            Step::TooLarge => {
                let control = self.session.handle_oversized_message();
                self.after(control)
            }
        }
    }
}

pub(super) fn run_case(case: &Case) -> Result<(), String> {
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
    #![proptest_config(proptest_config(SEQUENCE_CASES))]

    /// Random conversations keep every promise of docs/protocol.md §6.4–§6.7 and §18.1.
    #[test]
    fn envelope_sequences_end_every_accepted_call_exactly_once(case in case()) {
        run_case(&case).map_err(TestCaseError::fail)?;
    }
}

//! Typed payloads of the HAIP 1 events that the server or the client acts on.
//!
//! [`InboundEvent::decode`] turns an accepted [`Inbound`] envelope into one
//! typed event, once; each payload type also decodes on its own with
//! [`Payload::from_payload`] (what a client does with server envelopes) and
//! encodes with [`Payload::to_value`] / [`Payload::to_json`].
//!
//! # Lenient in
//!
//! Real clients send loosely typed payloads (HAIP.md §1, §2), so decoding:
//!
//! * takes the payload object by value and moves each field out of it: nothing
//!   is re-serialised, and user data (`params`, `result`, `partial`, schemas)
//!   stays a [`Value`], moved, never copied;
//! * ignores unknown fields (open payloads keep them in an `other` map:
//!   `RUN_STARTED`, `HAI.capabilities`);
//! * treats an optional field of the wrong type as absent, and gives an absent
//!   one its protocol default (`TOOL_DONE.status` ⇒ `OK`, `TOOL_CALL.params`
//!   `null` or absent ⇒ `{}`, `RUN_FINISHED.status` ⇒ `OK`);
//! * reads `seq`-like fields (`last_rx_seq`, `from_seq`, `to_seq`) as a
//!   non-negative JSON integer or a decimal string, as the envelope's `seq`
//!   (HAIP.md §2.1, §11.2);
//! * takes a numeric call id as its decimal text (`TOOL_CALL`, `TOOL_UPDATE`,
//!   `TOOL_DONE`; not `TOOL_CANCEL`, whose non-string `call_id` HAIP.md §6.7
//!   ignores);
//! * fills in the fallbacks HAIP.md defines from the envelope
//!   ([`InboundEvent::decode`], [`InboundEvent::decode_with`] only): a
//!   `TOOL_CALL` without a usable `call_id` takes the envelope `id`, else a
//!   new UUID (with `decode_with`, the caller's id) (§6.4 step 1); a `RUN_*`
//!   without a payload `run_id` takes the envelope's (§8);
//! * fails, with a [`PayloadError`] naming the field and what was wrong with
//!   it, only where the receiver cannot act without the field. For an inbound
//!   envelope [`PayloadError::reply`] is the `ERROR` HAIP.md prescribes, or
//!   `None` where HAIP.md says to ignore the envelope silently.
//!
//! | Event | Required (else [`PayloadError`]) | Loose |
//! |---|---|---|
//! | `HAI` | — | every field; `accept_major`, `accept_events` kept only when arrays |
//! | `TOOL_LIST` | — (a `tools` array makes it an advertisement: [`InboundEvent::Other`]) | reply items: `description`, `title`, `annotations`, `icons` |
//! | `TOOL_SCHEMA` request | `tool` (reply `INVALID_MESSAGE`, `missing tool`) | — |
//! | `TOOL_SCHEMA` reply | `tool`, `inputSchema` (or legacy `schema`) | `outputSchema`, `title`, `annotations`, `icons` |
//! | `TOOL_CALL` | — (see [`ToolCall`]) | `call_id`, `tool`, `params`, `run_id` |
//! | `TOOL_CANCEL` | `call_id` string (ignored silently) | `reason` |
//! | `TOOL_INPUT` | `call_id`, `request_id`, `action` (reply `INVALID_MESSAGE`) | `content` |
//! | `TOOL_UPDATE` | `call_id`, `status` string | `progress`, `partial`, `log`, `input_request`; unknown statuses kept |
//! | `TOOL_DONE` | `call_id`; `status` one of the three; an `ERROR`'s `result.code`, `result.error` | `result` |
//! | `RUN_FINISHED`, `RUN_CANCEL` | run id (reply `MISSING_RUN_ID`) | `status`, `summary` |
//! | `RUN_STARTED`, `RUN_ERROR` | — | every field |
//! | `PING`, `PONG` | — | `nonce` (any value, copied unchanged) |
//! | `REPLAY_REQUEST` | `from_seq`, a present `to_seq` (reply `INVALID_MESSAGE`) | — |
//! | `ERROR` | — | every field (never answered, §5) |
//! | `FLOW_UPDATE`, `PAUSE_CHANNEL`, `RESUME_CHANNEL` | `channel` string (ignored silently) | `add_messages`, `add_bytes` (≥ 1, else absent) |
//!
//! # Strict out
//!
//! Encoding writes every field the protocol requires, optional fields only
//! when present, statuses in capitals, `seq`-like fields as decimal strings,
//! and omits a `TOOL_DONE` `result` that would be `null` (HAIP.md §2.4, §6.6).
//!
//! ```
//! use haip::protocol::decode;
//! use haip::protocol::payload::{InboundEvent, Payload, ToolDone, ToolStatus};
//! use serde_json::json;
//!
//! let mut inbound = decode(r#"{"id":"call-1","type":"TOOL_CALL","payload":{"tool":"echo"}}"#).unwrap();
//! let InboundEvent::ToolCall(call) = InboundEvent::decode(&mut inbound).unwrap() else { panic!() };
//! assert_eq!(call.call_id, "call-1"); // no call_id: the envelope id (HAIP.md §6.4)
//! assert_eq!(call.params, json!({}));
//!
//! let done = ToolDone::ok(call.call_id, Some(json!({"echoed": "hi"})));
//! assert_eq!(done.status(), ToolStatus::Ok);
//! assert_eq!(
//!     done.to_value(),
//!     json!({"call_id": "call-1", "status": "OK", "result": {"echoed": "hi"}})
//! );
//! ```

use std::fmt;
use std::num::NonZeroU64;

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Map, Number, Value};

use super::{
    ACCEPT_MAJOR, ErrorCode, EventType, HAIP_VERSION, Icon, Inbound, ToolAnnotations, u64_loose,
};

// ----- the trait and the errors ------------------------------------------------

/// A typed payload: how one event's payload object is read and written.
pub trait Payload: Serialize + Sized {
    /// The event type whose payload this is.
    const EVENT: EventType;

    /// Decodes a payload object leniently (see the [module](self)
    /// documentation), moving its fields out.
    fn from_payload(payload: Map<String, Value>) -> Result<Self, PayloadError>;

    /// Encodes it strictly, as a JSON object.
    fn to_value(&self) -> Value {
        // The payload types serialise only string-keyed maps: this cannot fail.
        serde_json::to_value(self).unwrap_or_else(|_| Value::Object(Map::new()))
    }

    /// Encodes it strictly, as JSON text, without building a [`Value`].
    fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_else(|_| b"{}".to_vec())
    }
}

/// A payload field that could not be used: which event, which field, what was
/// wrong with it.
///
/// ```
/// use haip::protocol::payload::{Payload, PayloadError, Problem, ToolSchemaRequest};
/// use serde_json::json;
///
/// let payload = json!({"tool": 5}).as_object().unwrap().clone();
/// let err = ToolSchemaRequest::from_payload(payload).unwrap_err();
/// assert_eq!(err.field, "tool");
/// assert_eq!(err.to_string(), "TOOL_SCHEMA payload.tool: expected a string, found a number");
/// // The ERROR a server answers it with (HAIP.md §6.3).
/// assert_eq!(err.reply().unwrap().detail.unwrap()["reason"], "missing tool");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PayloadError {
    /// The event whose payload it was.
    pub event: EventType,
    /// The field, as a path inside the payload: `tool`, `result.code`, `tools[2].name`.
    pub field: String,
    /// What was wrong with it.
    pub problem: Problem,
    /// The envelope `id`, when decoded by [`InboundEvent::decode`] from an
    /// envelope that had one (the `related_id` of a reply).
    pub related_id: Option<String>,
    /// The call the payload is about, when it named one (`TOOL_UPDATE`,
    /// `TOOL_DONE`): whoever waits for that call can be told.
    pub call_id: Option<String>,
}

/// What was wrong with a payload field.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// The field is absent.
    Missing,
    /// The field has the wrong JSON type.
    WrongType {
        /// What it should be, e.g. `a string`.
        expected: &'static str,
        /// What it was, e.g. `a number`.
        found: &'static str,
    },
    /// The field has the right type but a value outside those allowed.
    BadValue {
        /// What it should be, e.g. `OK, ERROR or CANCELLED`.
        expected: &'static str,
        /// The value found, as JSON text.
        found: String,
    },
}

impl Problem {
    fn wrong_type(expected: &'static str, found: &Value) -> Problem {
        Problem::WrongType {
            expected,
            found: kind(found),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Missing => f.write_str("missing"),
            Problem::WrongType { expected, found } => {
                write!(f, "expected {expected}, found {found}")
            }
            Problem::BadValue { expected, found } => {
                write!(f, "expected {expected}, found {found}")
            }
        }
    }
}

impl fmt::Display for PayloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} payload.{}: {}", self.event, self.field, self.problem)
    }
}

impl std::error::Error for PayloadError {}

impl PayloadError {
    fn new(event: EventType, field: impl Into<String>, problem: Problem) -> PayloadError {
        PayloadError {
            event,
            field: field.into(),
            problem,
            related_id: None,
            call_id: None,
        }
    }

    fn about_call(mut self, call_id: &str) -> PayloadError {
        self.call_id = Some(call_id.to_owned());
        self
    }

    /// The `ERROR` a server answers this inbound payload with (HAIP.md §6.3,
    /// §8, §11.2, §14.2), `related_id` included; `None` where HAIP.md says
    /// such an envelope is ignored silently (a `TOOL_CANCEL` without a string
    /// `call_id`, a `FLOW_UPDATE` or `PAUSE_CHANNEL` without a `channel`) or
    /// the payload is not one a server receives.
    pub fn reply(&self) -> Option<Error> {
        let reason = |reason: &str| {
            let mut detail = Map::new();
            detail.insert("reason".into(), reason.into());
            Some(detail)
        };
        let (code, message, detail) = match (self.event, self.field.as_str()) {
            (EventType::ToolSchema, "tool") => (
                ErrorCode::INVALID_MESSAGE,
                "Invalid message format",
                reason("missing tool"),
            ),
            (EventType::ReplayRequest, "from_seq") => (
                ErrorCode::INVALID_MESSAGE,
                "Invalid message format",
                reason("invalid from_seq"),
            ),
            (EventType::ReplayRequest, "to_seq") => (
                ErrorCode::INVALID_MESSAGE,
                "Invalid message format",
                reason("invalid to_seq"),
            ),
            (EventType::RunFinished | EventType::RunCancel, "run_id") => {
                (ErrorCode::MISSING_RUN_ID, "Run ID is required", None)
            }
            (EventType::ToolInput, "call_id") => (
                ErrorCode::INVALID_MESSAGE,
                "Invalid message format",
                reason("invalid call_id"),
            ),
            (EventType::ToolInput, "request_id") => (
                ErrorCode::INVALID_MESSAGE,
                "Invalid message format",
                reason("invalid request_id"),
            ),
            (EventType::ToolInput, "action") => (
                ErrorCode::INVALID_MESSAGE,
                "Invalid message format",
                reason("invalid action"),
            ),
            _ => return None,
        };
        Some(Error {
            code,
            message: message.to_owned(),
            related_id: self.related_id.clone(),
            detail,
        })
    }
}

/// What a JSON value is, for error messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A payload object being decoded: its fields are moved out one by one.
struct Reader {
    event: EventType,
    /// Prefix of the field names in errors (`result.` inside a `TOOL_DONE`).
    prefix: &'static str,
    map: Map<String, Value>,
}

impl Reader {
    fn new(event: EventType, map: Map<String, Value>) -> Reader {
        Reader {
            event,
            prefix: "",
            map,
        }
    }

    fn error(&self, key: &str, problem: Problem) -> PayloadError {
        PayloadError::new(self.event, format!("{}{key}", self.prefix), problem)
    }

    fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key)
    }

    /// A required string.
    fn string(&mut self, key: &str) -> Result<String, PayloadError> {
        match self.take(key) {
            Some(Value::String(s)) => Ok(s),
            Some(other) => Err(self.error(key, Problem::wrong_type("a string", &other))),
            None => Err(self.error(key, Problem::Missing)),
        }
    }

    /// A required call id: a string, or a number as its decimal text.
    fn call_id(&mut self, key: &str) -> Result<String, PayloadError> {
        match self.take(key) {
            Some(Value::String(s)) => Ok(s),
            Some(Value::Number(n)) => Ok(n.to_string()),
            Some(other) => Err(self.error(key, Problem::wrong_type("a string", &other))),
            None => Err(self.error(key, Problem::Missing)),
        }
    }

    /// An optional string: any other type counts as absent.
    fn opt_string(&mut self, key: &str) -> Option<String> {
        match self.take(key) {
            Some(Value::String(s)) => Some(s),
            _ => None,
        }
    }

    /// An optional boolean: any other type counts as absent.
    fn opt_bool(&mut self, key: &str) -> Option<bool> {
        self.take(key).and_then(|v| v.as_bool())
    }

    /// An optional non-negative JSON integer: any other value counts as absent.
    fn opt_u64(&mut self, key: &str) -> Option<u64> {
        self.take(key).and_then(|v| v.as_u64())
    }

    /// An optional object: any other type counts as absent.
    fn opt_object(&mut self, key: &str) -> Option<Map<String, Value>> {
        match self.take(key) {
            Some(Value::Object(m)) => Some(m),
            _ => None,
        }
    }

    /// A `seq`-like field (a non-negative integer or a decimal string), if present.
    fn seq(&mut self, key: &str) -> Option<Result<u64, PayloadError>> {
        let value = self.take(key)?;
        Some(u64_loose(&value).ok_or_else(|| {
            let problem = match &value {
                Value::Number(_) | Value::String(_) => Problem::BadValue {
                    expected: "a non-negative integer",
                    found: value.to_string(),
                },
                other => Problem::wrong_type("an integer or a decimal string", other),
            };
            self.error(key, problem)
        }))
    }
}

/// Writes `None` fields of a serialised struct as nothing.
fn put<S: SerializeMap, T: Serialize + ?Sized>(
    map: &mut S,
    key: &'static str,
    value: Option<&T>,
) -> Result<(), S::Error> {
    match value {
        Some(value) => map.serialize_entry(key, value),
        None => Ok(()),
    }
}

/// A `u64` as the decimal string HAIP writes `seq`-like fields as.
fn decimal<S: Serializer>(n: &u64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(itoa::Buffer::new().format(*n))
}

fn opt_decimal<S: Serializer>(n: &Option<u64>, serializer: S) -> Result<S::Ok, S::Error> {
    match n {
        Some(n) => decimal(n, serializer),
        None => serializer.serialize_none(),
    }
}

/// Writes the `other` map of an open payload, skipping any key a typed field
/// already wrote.
fn put_other<S: SerializeMap>(
    map: &mut S,
    other: &Map<String, Value>,
    known: &[&str],
) -> Result<(), S::Error> {
    for (key, value) in other {
        if !known.contains(&key.as_str()) {
            map.serialize_entry(key, value)?;
        }
    }
    Ok(())
}

// ----- handshake ---------------------------------------------------------------

/// `HAI` (HAIP.md §3): the handshake, sent by the server first on every
/// connection and optionally by the client.
///
/// `haip_version`, `accept_major` and `accept_events` are required by the
/// protocol but `None` after decoding a client `HAI` without them, because
/// HAIP.md §3.2 gives their absence a meaning (compatible; every event
/// accepted). Encoding writes a `None` one as this implementation's own value
/// ([`HAIP_VERSION`], `[1]`, all 22 event types), so every encoded `HAI` is
/// complete.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Hai {
    /// `haip_version`, e.g. `"1.1.2"`.
    pub haip_version: Option<String>,
    /// `accept_major`: the protocol majors the sender speaks; `None` when
    /// absent or not an array. Elements that are not a non-negative integer
    /// or its decimal string (`"1"`; not `"01"`, HAIP.md §3.2) are dropped.
    pub accept_major: Option<Vec<u64>>,
    /// `accept_events`: the types the sender wants unsolicited (HAIP.md §3.3);
    /// `None` when absent or not an array. Non-string elements are dropped;
    /// names are kept as sent (see [`Hai::accepted_events`]).
    pub accept_events: Option<Vec<String>>,
    /// `capabilities`, when an object.
    pub capabilities: Option<Capabilities>,
    /// `last_rx_seq`, when present: a client asking to resume (HAIP.md §11.3),
    /// or a server confirming a resumption.
    pub last_rx_seq: Option<LastRxSeq>,
    /// Top-level `binary_frames` (the protocol's own schema puts it here too).
    pub binary_frames: Option<bool>,
    /// Top-level `max_concurrent_runs`.
    pub max_concurrent_runs: Option<u64>,
}

/// A `HAI`'s `last_rx_seq` as it arrived: present is what makes a client
/// `HAI` a resumption attempt, even when the value is unusable (HAIP.md §11.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastRxSeq {
    /// A non-negative integer (a JSON integer or a decimal string).
    Seq(u64),
    /// Present, but not a non-negative integer: the attempt fails with
    /// `invalid last_rx_seq`. Encoding writes nothing for it.
    Invalid,
}

/// The `capabilities` object of a `HAI` (HAIP.md §3.1, §3.2, §6.11, §12.1).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Capabilities {
    /// `binary_frames`: two-frame binary is possible (server) / wanted (client).
    pub binary_frames: Option<bool>,
    /// `flow_control`, when an object: the client wants credit returned.
    pub flow_control: Option<FlowControl>,
    /// `max_concurrent_runs`.
    pub max_concurrent_runs: Option<u64>,
    /// `signed_envelopes`.
    pub signed_envelopes: Option<bool>,
    /// `tool_input`: the client can answer a tool's questions (HAIP.md §6.11).
    pub tool_input: Option<bool>,
    /// `log_level`: the least severe tool log line the client wants (HAIP.md §6.11).
    pub log_level: Option<String>,
    /// `schema_profile`: the profile the client wants tool schemas in
    /// (HAIP.md §6.14), as sent.
    pub schema_profile: Option<String>,
    /// Every other capability, as sent.
    pub other: Map<String, Value>,
}

/// `capabilities.flow_control` (HAIP.md §3.1, §12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct FlowControl {
    /// `initial_credit_messages`, when a non-negative integer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_credit_messages: Option<u64>,
    /// `initial_credit_bytes`, when a non-negative integer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_credit_bytes: Option<u64>,
}

impl Hai {
    /// A `HAI` with this implementation's version, majors and every event
    /// type, and nothing else.
    pub fn new() -> Hai {
        Hai {
            haip_version: Some(HAIP_VERSION.to_owned()),
            accept_major: Some(ACCEPT_MAJOR.to_vec()),
            accept_events: Some(all_event_names()),
            ..Hai::default()
        }
    }

    /// Whether it is compatible with major `1` (HAIP.md §3.2): `accept_major`
    /// absent, not an array, or containing `1` or `"1"`.
    pub fn is_compatible(&self) -> bool {
        self.accept_major
            .as_ref()
            .is_none_or(|majors| majors.iter().any(|m| ACCEPT_MAJOR.contains(m)))
    }

    /// `accept_events` as event types (unknown names dropped); `None` when
    /// every event is accepted.
    pub fn accepted_events(&self) -> Option<Vec<EventType>> {
        self.accept_events
            .as_ref()
            .map(|names| names.iter().filter_map(|n| EventType::parse(n)).collect())
    }
}

/// One `accept_major` element: a non-negative integer, or its canonical
/// decimal string (HAIP.md §3.2 names `1` and `"1"`; `"01"` is neither).
fn major(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => u64_loose(value).filter(|n| itoa::Buffer::new().format(*n) == s),
        _ => None,
    }
}

fn all_event_names() -> Vec<String> {
    EventType::ALL
        .iter()
        .map(|e| e.as_str().to_owned())
        .collect()
}

impl Payload for Hai {
    const EVENT: EventType = EventType::Hai;

    fn from_payload(payload: Map<String, Value>) -> Result<Hai, PayloadError> {
        let mut r = Reader::new(EventType::Hai, payload);
        let accept_major = match r.take("accept_major") {
            Some(Value::Array(majors)) => Some(majors.iter().filter_map(major).collect()),
            _ => None,
        };
        let accept_events = match r.take("accept_events") {
            Some(Value::Array(names)) => Some(
                names
                    .into_iter()
                    .filter_map(|n| match n {
                        Value::String(s) => Some(s),
                        _ => None,
                    })
                    .collect(),
            ),
            _ => None,
        };
        Ok(Hai {
            haip_version: r.opt_string("haip_version"),
            accept_major,
            accept_events,
            capabilities: r.opt_object("capabilities").map(Capabilities::from_map),
            last_rx_seq: r
                .take("last_rx_seq")
                .map(|v| u64_loose(&v).map_or(LastRxSeq::Invalid, LastRxSeq::Seq)),
            binary_frames: r.opt_bool("binary_frames"),
            max_concurrent_runs: r.opt_u64("max_concurrent_runs"),
        })
    }
}

impl Serialize for Hai {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        match &self.haip_version {
            Some(v) => map.serialize_entry("haip_version", v)?,
            None => map.serialize_entry("haip_version", HAIP_VERSION)?,
        }
        match &self.accept_major {
            Some(v) => map.serialize_entry("accept_major", v)?,
            None => map.serialize_entry("accept_major", &ACCEPT_MAJOR)?,
        }
        match &self.accept_events {
            Some(v) => map.serialize_entry("accept_events", v)?,
            None => map.serialize_entry("accept_events", &all_event_names())?,
        }
        put(&mut map, "capabilities", self.capabilities.as_ref())?;
        if let Some(LastRxSeq::Seq(n)) = self.last_rx_seq {
            map.serialize_entry("last_rx_seq", itoa::Buffer::new().format(n))?;
        }
        put(&mut map, "binary_frames", self.binary_frames.as_ref())?;
        put(
            &mut map,
            "max_concurrent_runs",
            self.max_concurrent_runs.as_ref(),
        )?;
        map.end()
    }
}

impl Capabilities {
    const KNOWN: [&'static str; 7] = [
        "binary_frames",
        "flow_control",
        "max_concurrent_runs",
        "signed_envelopes",
        "tool_input",
        "log_level",
        "schema_profile",
    ];

    fn from_map(map: Map<String, Value>) -> Capabilities {
        let mut r = Reader::new(EventType::Hai, map);
        let flow_control = r.opt_object("flow_control").map(|flow| {
            let mut f = Reader::new(EventType::Hai, flow);
            FlowControl {
                initial_credit_messages: f.opt_u64("initial_credit_messages"),
                initial_credit_bytes: f.opt_u64("initial_credit_bytes"),
            }
        });
        Capabilities {
            binary_frames: r.opt_bool("binary_frames"),
            flow_control,
            max_concurrent_runs: r.opt_u64("max_concurrent_runs"),
            signed_envelopes: r.opt_bool("signed_envelopes"),
            tool_input: r.opt_bool("tool_input"),
            log_level: r.opt_string("log_level"),
            schema_profile: r.opt_string("schema_profile"),
            other: r.map,
        }
    }
}

impl Serialize for Capabilities {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        put(&mut map, "binary_frames", self.binary_frames.as_ref())?;
        put(&mut map, "flow_control", self.flow_control.as_ref())?;
        put(
            &mut map,
            "max_concurrent_runs",
            self.max_concurrent_runs.as_ref(),
        )?;
        put(&mut map, "signed_envelopes", self.signed_envelopes.as_ref())?;
        put(&mut map, "tool_input", self.tool_input.as_ref())?;
        put(&mut map, "log_level", self.log_level.as_ref())?;
        put(&mut map, "schema_profile", self.schema_profile.as_ref())?;
        put_other(&mut map, &self.other, &Capabilities::KNOWN)?;
        map.end()
    }
}

// ----- tools -------------------------------------------------------------------

/// A `TOOL_LIST` request (HAIP.md §6.2): an empty payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct ToolListRequest {}

impl Payload for ToolListRequest {
    const EVENT: EventType = EventType::ToolList;

    /// Every payload is a request; one with a `tools` array is a client
    /// advertising its own tools, which [`InboundEvent::decode`] passes on as
    /// [`InboundEvent::Other`].
    fn from_payload(_: Map<String, Value>) -> Result<ToolListRequest, PayloadError> {
        Ok(ToolListRequest {})
    }
}

/// The `TOOL_LIST` listing (HAIP.md §6.2).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ToolList {
    /// The tools, in registry order.
    pub tools: Vec<ToolListItem>,
}

/// One tool of a `TOOL_LIST` listing.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ToolListItem {
    /// The tool's name.
    pub name: String,
    /// Its description; empty when it has none, and then not written.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// `title`: a name for people, when it has one (HAIP.md §6.13).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `annotations`: the hints it declares; not written when it declares
    /// none (HAIP.md §6.13).
    #[serde(skip_serializing_if = "ToolAnnotations::is_empty")]
    pub annotations: ToolAnnotations,
    /// `icons`; not written when it has none (HAIP.md §6.13).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub icons: Vec<Icon>,
}

impl Payload for ToolList {
    const EVENT: EventType = EventType::ToolList;

    fn from_payload(payload: Map<String, Value>) -> Result<ToolList, PayloadError> {
        let mut r = Reader::new(EventType::ToolList, payload);
        let items = match r.take("tools") {
            Some(Value::Array(items)) => items,
            Some(other) => return Err(r.error("tools", Problem::wrong_type("an array", &other))),
            None => return Err(r.error("tools", Problem::Missing)),
        };
        let mut tools = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let at = |field: &str, problem| {
                PayloadError::new(EventType::ToolList, format!("tools[{i}]{field}"), problem)
            };
            let mut item = match item {
                Value::Object(item) => Reader::new(EventType::ToolList, item),
                other => return Err(at("", Problem::wrong_type("an object", &other))),
            };
            let name = item.string("name").map_err(|e| at(".name", e.problem))?;
            tools.push(ToolListItem {
                name,
                description: item.opt_string("description").unwrap_or_default(),
                title: item.opt_string("title"),
                annotations: ToolAnnotations::from_value(item.take("annotations")),
                icons: Icon::list_from_value(item.take("icons")),
            });
        }
        Ok(ToolList { tools })
    }
}

/// A `TOOL_SCHEMA` request (HAIP.md §6.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolSchemaRequest {
    /// The tool asked about.
    pub tool: String,
    /// The schema profile to answer in (HAIP.md §6.14), as sent; the
    /// session's when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

impl Payload for ToolSchemaRequest {
    const EVENT: EventType = EventType::ToolSchema;

    /// `tool` must be a string (else the server answers `INVALID_MESSAGE`,
    /// `missing tool`). A payload with `schema` or `inputSchema` is a client
    /// advertising a tool, which [`InboundEvent::decode`] passes on as
    /// [`InboundEvent::Other`].
    fn from_payload(payload: Map<String, Value>) -> Result<ToolSchemaRequest, PayloadError> {
        let mut r = Reader::new(EventType::ToolSchema, payload);
        Ok(ToolSchemaRequest {
            tool: r.string("tool")?,
            profile: r.opt_string("profile"),
        })
    }
}

/// The `TOOL_SCHEMA` reply (HAIP.md §6.3).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSchema {
    /// The tool's name.
    pub tool: String,
    /// `inputSchema`: the JSON Schema of its params. Decoding falls back on
    /// the legacy `schema` field (HAIP 1 archive, upstream SDK).
    #[serde(rename = "inputSchema")]
    pub input_schema: Value,
    /// `outputSchema`, when the tool has one.
    #[serde(rename = "outputSchema", skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// The legacy `schema` field (the input schema again), sent with the
    /// `tool_schema_legacy_field` setting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// `title`, as in [`ToolListItem::title`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `annotations`, as in [`ToolListItem::annotations`].
    #[serde(skip_serializing_if = "ToolAnnotations::is_empty")]
    pub annotations: ToolAnnotations,
    /// `icons`, as in [`ToolListItem::icons`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub icons: Vec<Icon>,
}

impl Payload for ToolSchema {
    const EVENT: EventType = EventType::ToolSchema;

    fn from_payload(payload: Map<String, Value>) -> Result<ToolSchema, PayloadError> {
        let mut r = Reader::new(EventType::ToolSchema, payload);
        let tool = r.string("tool")?;
        let schema = r.take("schema");
        let input_schema = match (r.take("inputSchema"), &schema) {
            (Some(input), _) => input,
            (None, Some(legacy)) => legacy.clone(),
            (None, None) => return Err(r.error("inputSchema", Problem::Missing)),
        };
        Ok(ToolSchema {
            tool,
            input_schema,
            output_schema: r.take("outputSchema").filter(|v| !v.is_null()),
            schema,
            title: r.opt_string("title"),
            annotations: ToolAnnotations::from_value(r.take("annotations")),
            icons: Icon::list_from_value(r.take("icons")),
        })
    }
}

/// A `TOOL_CALL` (HAIP.md §6.4).
///
/// Decoding never fails: HAIP.md §6.4 answers every shape of call. A
/// `call_id` that is neither a string nor a number is absent (then
/// [`InboundEvent::decode`] takes the envelope `id`, else a new UUID
/// ([`InboundEvent::decode_with`]: else the caller's id);
/// [`Payload::from_payload`] has no envelope and reports it missing). A
/// `tool` that is not a string is `None` (the server answers
/// `TOOL_NOT_FOUND`, `Tool name missing`). `params` absent or `null` is `{}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    /// The call's id; a numeric one as its decimal text.
    pub call_id: String,
    /// The tool to run. Required by the protocol: `None` only after decoding
    /// a call that named none, and then not written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The params, as sent (validated against the tool's input schema, never
    /// coerced).
    pub params: Value,
    /// The payload's own `run_id` (the upstream CLI puts it here). The
    /// envelope `run_id`, if any, is on the [`Inbound`] and takes precedence
    /// for the envelopes about the call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

impl ToolCall {
    /// A call of `tool` with `params`.
    pub fn new(call_id: impl Into<String>, tool: impl Into<String>, params: Value) -> ToolCall {
        ToolCall {
            call_id: call_id.into(),
            tool: Some(tool.into()),
            params,
            run_id: None,
        }
    }

    /// Decodes a `TOOL_CALL` payload; `call_id` falls back on `fallback`.
    fn decode(
        payload: Map<String, Value>,
        fallback: impl FnOnce() -> Option<String>,
    ) -> Result<ToolCall, PayloadError> {
        let mut r = Reader::new(EventType::ToolCall, payload);
        let call_id = match r.take("call_id") {
            Some(Value::String(s)) => s,
            Some(Value::Number(n)) => n.to_string(),
            _ => fallback().ok_or_else(|| r.error("call_id", Problem::Missing))?,
        };
        let params = match r.take("params") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(params) => params,
        };
        Ok(ToolCall {
            call_id,
            tool: r.opt_string("tool"),
            params,
            run_id: r.opt_string("run_id"),
        })
    }
}

impl Payload for ToolCall {
    const EVENT: EventType = EventType::ToolCall;

    fn from_payload(payload: Map<String, Value>) -> Result<ToolCall, PayloadError> {
        ToolCall::decode(payload, || None)
    }
}

/// A `TOOL_CANCEL` (HAIP.md §6.7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolCancel {
    /// The call to cancel. Must be a string: the server ignores a
    /// `TOOL_CANCEL` without one, silently.
    pub call_id: String,
    /// Why; sent back in the `TOOL_DONE CANCELLED` result. Not a string ⇒ `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Payload for ToolCancel {
    const EVENT: EventType = EventType::ToolCancel;

    fn from_payload(payload: Map<String, Value>) -> Result<ToolCancel, PayloadError> {
        let mut r = Reader::new(EventType::ToolCancel, payload);
        Ok(ToolCancel {
            call_id: r.string("call_id")?,
            reason: r.opt_string("reason"),
        })
    }
}

/// `TOOL_INPUT`: the client's answer to a tool's question (HAIP.md §6.11).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolInput {
    /// The call that asked.
    pub call_id: String,
    /// The question (`input_request.request_id` of its `TOOL_UPDATE`).
    pub request_id: String,
    /// What the person did.
    pub action: InputAction,
    /// The answer, when `action` is `accept`: an object matching the
    /// question's schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
}

/// The `action` of a `TOOL_INPUT` (HAIP.md §6.11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InputAction {
    /// `accept`: answered, with `content`.
    Accept,
    /// `decline`: the person chose not to answer.
    Decline,
    /// `cancel`: the person dismissed the question.
    Cancel,
}

impl InputAction {
    /// The wire name: `"accept"`, `"decline"` or `"cancel"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            InputAction::Accept => "accept",
            InputAction::Decline => "decline",
            InputAction::Cancel => "cancel",
        }
    }
}

impl Payload for ToolInput {
    const EVENT: EventType = EventType::ToolInput;

    fn from_payload(payload: Map<String, Value>) -> Result<ToolInput, PayloadError> {
        let mut r = Reader::new(EventType::ToolInput, payload);
        let call_id = r.call_id("call_id")?;
        let request_id = r.string("request_id").map_err(|e| e.about_call(&call_id))?;
        let action = match r.take("action") {
            Some(Value::String(a)) if a == "accept" => InputAction::Accept,
            Some(Value::String(a)) if a == "decline" => InputAction::Decline,
            Some(Value::String(a)) if a == "cancel" => InputAction::Cancel,
            Some(other) => {
                return Err(r
                    .error(
                        "action",
                        Problem::wrong_type("accept, decline or cancel", &other),
                    )
                    .about_call(&call_id));
            }
            None => return Err(r.error("action", Problem::Missing).about_call(&call_id)),
        };
        Ok(ToolInput {
            call_id,
            request_id,
            action,
            content: r.take("content"),
        })
    }
}

/// The `status` of a `TOOL_UPDATE` (HAIP.md §6.5, §6.11).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum UpdateStatus {
    /// `QUEUED`: the call waits for a slot.
    Queued,
    /// `RUNNING`: execution started, or progress.
    Running,
    /// `CANCELLING`: a cancel began.
    Cancelling,
    /// `WAITING_INPUT`: the tool asked the client a question (HAIP.md §6.11).
    WaitingInput,
    /// A status this implementation does not know, as sent (a newer peer).
    Other(String),
}

impl UpdateStatus {
    /// The wire name, e.g. `"RUNNING"`.
    pub fn as_str(&self) -> &str {
        match self {
            UpdateStatus::Queued => "QUEUED",
            UpdateStatus::Running => "RUNNING",
            UpdateStatus::Cancelling => "CANCELLING",
            UpdateStatus::WaitingInput => "WAITING_INPUT",
            UpdateStatus::Other(s) => s,
        }
    }

    /// Reads a wire name; unknown names are [`UpdateStatus::Other`].
    pub fn parse(name: String) -> UpdateStatus {
        match name.as_str() {
            "QUEUED" => UpdateStatus::Queued,
            "RUNNING" => UpdateStatus::Running,
            "CANCELLING" => UpdateStatus::Cancelling,
            "WAITING_INPUT" => UpdateStatus::WaitingInput,
            _ => UpdateStatus::Other(name),
        }
    }
}

impl fmt::Display for UpdateStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for UpdateStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A `TOOL_UPDATE` (HAIP.md §6.5).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolUpdate {
    /// The call it is about.
    pub call_id: String,
    /// Its status.
    pub status: UpdateStatus,
    /// Percent done, kept as the number sent (`40` stays an integer). Not a
    /// number ⇒ `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<Number>,
    /// A partial result, any JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial: Option<Value>,
    /// A tool's log line, `{level, message, data?}` (HAIP.md §6.11).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<Value>,
    /// A tool's question, `{request_id, message, schema}`, with status
    /// `WAITING_INPUT` (HAIP.md §6.11).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_request: Option<Value>,
}

impl ToolUpdate {
    /// An update with only a status (`QUEUED`, `RUNNING`, `CANCELLING`).
    pub fn new(call_id: impl Into<String>, status: UpdateStatus) -> ToolUpdate {
        ToolUpdate {
            call_id: call_id.into(),
            status,
            progress: None,
            partial: None,
            log: None,
            input_request: None,
        }
    }
}

impl ToolUpdate {
    /// The payload as a JSON object, `partial` moved in rather than copied
    /// (what [`Payload::to_value`] builds, without cloning a tool's value).
    pub fn into_value(self) -> Value {
        let mut payload = Map::new();
        payload.insert("call_id".into(), Value::String(self.call_id));
        payload.insert(
            "status".into(),
            Value::String(self.status.as_str().to_owned()),
        );
        if let Some(progress) = self.progress {
            payload.insert("progress".into(), Value::Number(progress));
        }
        if let Some(partial) = self.partial {
            payload.insert("partial".into(), partial);
        }
        if let Some(log) = self.log {
            payload.insert("log".into(), log);
        }
        if let Some(input_request) = self.input_request {
            payload.insert("input_request".into(), input_request);
        }
        Value::Object(payload)
    }
}

impl Payload for ToolUpdate {
    const EVENT: EventType = EventType::ToolUpdate;

    fn from_payload(payload: Map<String, Value>) -> Result<ToolUpdate, PayloadError> {
        let mut r = Reader::new(EventType::ToolUpdate, payload);
        let call_id = r.call_id("call_id")?;
        let status = r.string("status").map_err(|e| e.about_call(&call_id))?;
        Ok(ToolUpdate {
            status: UpdateStatus::parse(status),
            progress: match r.take("progress") {
                Some(Value::Number(n)) => Some(n),
                _ => None,
            },
            partial: r.take("partial"),
            log: r.opt_object("log").map(Value::Object),
            input_request: r.opt_object("input_request").map(Value::Object),
            call_id,
        })
    }
}

/// The `status` of a `TOOL_DONE` (HAIP.md §6.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolStatus {
    /// `OK`: the tool returned a value.
    Ok,
    /// `ERROR`: the call failed.
    Error,
    /// `CANCELLED`: the call was cancelled.
    Cancelled,
}

impl ToolStatus {
    /// The wire name, e.g. `"OK"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ToolStatus::Ok => "OK",
            ToolStatus::Error => "ERROR",
            ToolStatus::Cancelled => "CANCELLED",
        }
    }

    /// Reads a wire name (case-sensitive).
    pub fn parse(name: &str) -> Option<ToolStatus> {
        match name {
            "OK" => Some(ToolStatus::Ok),
            "ERROR" => Some(ToolStatus::Error),
            "CANCELLED" => Some(ToolStatus::Cancelled),
            _ => None,
        }
    }
}

impl fmt::Display for ToolStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ToolStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A `TOOL_DONE` (HAIP.md §6.6): how a call ended.
///
/// On the wire the payload is `{call_id, status, result}`; what `result`
/// holds depends on `status`, so here the two are one [`ToolOutcome`] and
/// [`ToolDone::status`] is derived from it: an `ERROR`'s `{error, code,
/// details}` is a typed [`ToolFailure`], a `CANCELLED`'s `{reason}` a string.
///
/// ```
/// use haip::protocol::ErrorCode;
/// use haip::protocol::payload::{Payload, ToolDone, ToolFailure};
/// use serde_json::json;
///
/// let done = ToolDone::failed("c-2", ToolFailure::new(ErrorCode::TOOL_NOT_FOUND, "Tool nope not found"));
/// assert_eq!(
///     done.to_value(),
///     json!({"call_id": "c-2", "status": "ERROR", "result": {"error": "Tool nope not found", "code": "TOOL_NOT_FOUND"}})
/// );
/// let back = ToolDone::from_payload(done.to_value().as_object().unwrap().clone()).unwrap();
/// assert_eq!(back, done);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDone {
    /// The call it ends.
    pub call_id: String,
    /// How it ended, with its result.
    pub outcome: ToolOutcome,
}

/// How a call ended: a `TOOL_DONE`'s `status` with its `result`.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome {
    /// `OK`, with the tool's value (`None`: no `result`, the value was `null`).
    Ok(Option<Value>),
    /// `ERROR`, with the error `result`.
    Error(ToolFailure),
    /// `CANCELLED`, with `result.reason` when there is one.
    Cancelled(Option<String>),
}

impl ToolOutcome {
    /// The `status` it is sent with.
    pub fn status(&self) -> ToolStatus {
        match self {
            ToolOutcome::Ok(_) => ToolStatus::Ok,
            ToolOutcome::Error(_) => ToolStatus::Error,
            ToolOutcome::Cancelled(_) => ToolStatus::Cancelled,
        }
    }
}

/// The `result` of a `TOOL_DONE` with status `ERROR` (HAIP.md §6.6, §18.1).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolFailure {
    /// `error`: the human-readable message.
    #[serde(rename = "error")]
    pub message: String,
    /// `code`: `INVALID_PARAMS`, `TOOL_EXECUTION_ERROR`, …, or a tool's own.
    pub code: ErrorCode,
    /// `details`, e.g. every violation of `INVALID_PARAMS`; any JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// `total`: how many violations there were, when all were counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// `total_at_least`: how many were counted before counting stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_at_least: Option<u64>,
}

impl ToolFailure {
    /// A failure with a code and a message.
    pub fn new(code: impl Into<ErrorCode>, message: impl Into<String>) -> ToolFailure {
        ToolFailure {
            message: message.into(),
            code: code.into(),
            details: None,
            total: None,
            total_at_least: None,
        }
    }

    /// With `details`.
    pub fn with_details(mut self, details: Value) -> ToolFailure {
        self.details = Some(details);
        self
    }

    /// As a JSON object, moved rather than copied.
    fn into_value(self) -> Value {
        let mut result = Map::new();
        result.insert("error".into(), Value::String(self.message));
        result.insert("code".into(), Value::String(self.code.as_str().to_owned()));
        if let Some(details) = self.details {
            result.insert("details".into(), details);
        }
        if let Some(total) = self.total {
            result.insert("total".into(), total.into());
        }
        if let Some(total) = self.total_at_least {
            result.insert("total_at_least".into(), total.into());
        }
        Value::Object(result)
    }

    fn from_map(map: Map<String, Value>) -> Result<ToolFailure, PayloadError> {
        let mut r = Reader::new(EventType::ToolDone, map);
        r.prefix = "result.";
        Ok(ToolFailure {
            code: ErrorCode::new(r.string("code")?),
            message: r.string("error")?,
            details: r.take("details").filter(|v| !v.is_null()),
            total: r.opt_u64("total"),
            total_at_least: r.opt_u64("total_at_least"),
        })
    }
}

impl ToolDone {
    /// `OK`; a `null` value is sent as no `result`.
    pub fn ok(call_id: impl Into<String>, result: Option<Value>) -> ToolDone {
        ToolDone {
            call_id: call_id.into(),
            outcome: ToolOutcome::Ok(result.filter(|v| !v.is_null())),
        }
    }

    /// `ERROR`.
    pub fn failed(call_id: impl Into<String>, failure: ToolFailure) -> ToolDone {
        ToolDone {
            call_id: call_id.into(),
            outcome: ToolOutcome::Error(failure),
        }
    }

    /// `CANCELLED`, with the reason when there is one.
    pub fn cancelled(call_id: impl Into<String>, reason: Option<String>) -> ToolDone {
        ToolDone {
            call_id: call_id.into(),
            outcome: ToolOutcome::Cancelled(reason),
        }
    }

    /// The `status` it is sent with.
    pub fn status(&self) -> ToolStatus {
        self.outcome.status()
    }

    /// The payload as a JSON object, the result moved in rather than copied
    /// (what [`Payload::to_value`] builds, without cloning a tool's value).
    pub fn into_value(self) -> Value {
        let status = self.status();
        let mut payload = Map::new();
        payload.insert("call_id".into(), Value::String(self.call_id));
        payload.insert("status".into(), status.as_str().into());
        let result = match self.outcome {
            ToolOutcome::Ok(value) => value.filter(|v| !v.is_null()),
            ToolOutcome::Error(failure) => Some(failure.into_value()),
            ToolOutcome::Cancelled(reason) => reason.map(|reason| {
                let mut result = Map::new();
                result.insert("reason".into(), Value::String(reason));
                Value::Object(result)
            }),
        };
        if let Some(result) = result {
            payload.insert("result".into(), result);
        }
        Value::Object(payload)
    }

    /// The `result` to write, if any.
    fn result(&self) -> Option<DoneResult<'_>> {
        match &self.outcome {
            ToolOutcome::Ok(value) => value
                .as_ref()
                .filter(|v| !v.is_null())
                .map(DoneResult::Value),
            ToolOutcome::Error(failure) => Some(DoneResult::Failure(failure)),
            ToolOutcome::Cancelled(reason) => reason.as_deref().map(DoneResult::Reason),
        }
    }

    /// The payload JSON of a `TOOL_DONE` from its parts, `result` being JSON
    /// text already (a tool's value rendered off the session's task): no
    /// [`Value`] is built. The same text [`Payload::to_json`] writes.
    pub(crate) fn json_from_parts(
        call_id: &str,
        status: ToolStatus,
        result: Option<&[u8]>,
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(48 + call_id.len() + result.map_or(0, <[u8]>::len));
        out.extend_from_slice(b"{\"call_id\":");
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, call_id);
        out.extend_from_slice(b",\"status\":\"");
        out.extend_from_slice(status.as_str().as_bytes());
        out.push(b'"');
        if let Some(result) = result {
            out.extend_from_slice(b",\"result\":");
            out.extend_from_slice(result);
        }
        out.push(b'}');
        out
    }
}

/// What a `TOOL_DONE`'s `result` is, borrowed for writing.
enum DoneResult<'a> {
    Value(&'a Value),
    Failure(&'a ToolFailure),
    Reason(&'a str),
}

impl Serialize for DoneResult<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            DoneResult::Value(value) => value.serialize(serializer),
            DoneResult::Failure(failure) => failure.serialize(serializer),
            DoneResult::Reason(reason) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("reason", reason)?;
                map.end()
            }
        }
    }
}

impl Serialize for ToolDone {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let result = self.result();
        let mut map = serializer.serialize_map(Some(2 + usize::from(result.is_some())))?;
        map.serialize_entry("call_id", &self.call_id)?;
        map.serialize_entry("status", &self.status())?;
        put(&mut map, "result", result.as_ref())?;
        map.end()
    }
}

impl Payload for ToolDone {
    const EVENT: EventType = EventType::ToolDone;

    /// `status` absent is `OK` (the protocol default); any value other than
    /// the three is an error, as is an `ERROR` whose `result` lacks its
    /// `code` or `error`: the outcome of a call is never guessed. The error
    /// names the call, so whoever waits for it can be told. A `CANCELLED`
    /// result without a string `reason` is just no reason.
    fn from_payload(payload: Map<String, Value>) -> Result<ToolDone, PayloadError> {
        let mut r = Reader::new(EventType::ToolDone, payload);
        let call_id = r.call_id("call_id")?;
        let status = match r.take("status") {
            None => ToolStatus::Ok,
            Some(Value::String(s)) => match ToolStatus::parse(&s) {
                Some(status) => status,
                None => {
                    let found = Value::String(s).to_string();
                    let problem = Problem::BadValue {
                        expected: "OK, ERROR or CANCELLED",
                        found,
                    };
                    return Err(r.error("status", problem).about_call(&call_id));
                }
            },
            Some(other) => {
                let problem = Problem::wrong_type("a string", &other);
                return Err(r.error("status", problem).about_call(&call_id));
            }
        };
        let result = r.take("result").filter(|v| !v.is_null());
        let outcome = match (status, result) {
            (ToolStatus::Ok, result) => ToolOutcome::Ok(result),
            (ToolStatus::Cancelled, Some(Value::Object(mut result))) => {
                ToolOutcome::Cancelled(match result.remove("reason") {
                    Some(Value::String(reason)) => Some(reason),
                    _ => None,
                })
            }
            (ToolStatus::Cancelled, _) => ToolOutcome::Cancelled(None),
            (ToolStatus::Error, Some(Value::Object(result))) => ToolOutcome::Error(
                ToolFailure::from_map(result).map_err(|e| e.about_call(&call_id))?,
            ),
            (ToolStatus::Error, Some(other)) => {
                let problem = Problem::wrong_type("an object", &other);
                return Err(r.error("result", problem).about_call(&call_id));
            }
            (ToolStatus::Error, None) => {
                return Err(r.error("result", Problem::Missing).about_call(&call_id));
            }
        };
        Ok(ToolDone { call_id, outcome })
    }

    fn to_json(&self) -> Vec<u8> {
        let result = self
            .result()
            .map(|r| serde_json::to_vec(&r).unwrap_or_default());
        ToolDone::json_from_parts(&self.call_id, self.status(), result.as_deref())
    }
}

// ----- runs --------------------------------------------------------------------

/// `RUN_STARTED` (HAIP.md §8): an open payload.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunStarted {
    /// The run id: the payload's, else (by [`InboundEvent::decode`]) the
    /// envelope's; `None` ⇒ the server makes one up.
    pub run_id: Option<String>,
    /// `thread_id`, when a string.
    pub thread_id: Option<String>,
    /// `metadata`, when an object.
    pub metadata: Option<Map<String, Value>>,
    /// Every other field, as sent.
    pub other: Map<String, Value>,
}

impl Payload for RunStarted {
    const EVENT: EventType = EventType::RunStarted;

    fn from_payload(payload: Map<String, Value>) -> Result<RunStarted, PayloadError> {
        let mut r = Reader::new(EventType::RunStarted, payload);
        Ok(RunStarted {
            run_id: r.opt_string("run_id"),
            thread_id: r.opt_string("thread_id"),
            metadata: r.opt_object("metadata"),
            other: r.map,
        })
    }
}

impl Serialize for RunStarted {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        put(&mut map, "run_id", self.run_id.as_ref())?;
        put(&mut map, "thread_id", self.thread_id.as_ref())?;
        put(&mut map, "metadata", self.metadata.as_ref())?;
        put_other(&mut map, &self.other, &["run_id", "thread_id", "metadata"])?;
        map.end()
    }
}

/// The `status` of a `RUN_FINISHED` (HAIP.md §5, §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RunStatus {
    /// `OK` (the default).
    #[default]
    Ok,
    /// `CANCELLED`.
    Cancelled,
    /// `ERROR`.
    Error,
}

impl RunStatus {
    /// The wire name, e.g. `"OK"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            RunStatus::Ok => "OK",
            RunStatus::Cancelled => "CANCELLED",
            RunStatus::Error => "ERROR",
        }
    }
}

impl Serialize for RunStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// `RUN_FINISHED` (HAIP.md §8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunFinished {
    /// The run id: the payload's, else (by [`InboundEvent::decode`]) the
    /// envelope's; neither ⇒ an error answered `MISSING_RUN_ID`.
    pub run_id: String,
    /// How the run ended; absent or not one of the three ⇒ `OK` (the server
    /// closes the run whatever it says).
    pub status: RunStatus,
    /// `summary`, when a string.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

impl RunFinished {
    fn decode(
        payload: Map<String, Value>,
        envelope_run_id: Option<&str>,
    ) -> Result<RunFinished, PayloadError> {
        let mut r = Reader::new(EventType::RunFinished, payload);
        let run_id = run_id(&mut r, envelope_run_id)?;
        let status = match r.take("status") {
            Some(Value::String(s)) if s == "CANCELLED" => RunStatus::Cancelled,
            Some(Value::String(s)) if s == "ERROR" => RunStatus::Error,
            _ => RunStatus::Ok,
        };
        Ok(RunFinished {
            run_id,
            status,
            summary: r.opt_string("summary"),
        })
    }
}

/// A required run id: `payload.run_id` if a string, else the envelope's.
fn run_id(r: &mut Reader, envelope_run_id: Option<&str>) -> Result<String, PayloadError> {
    match (r.opt_string("run_id"), envelope_run_id) {
        (Some(id), _) => Ok(id),
        (None, Some(id)) => Ok(id.to_owned()),
        (None, None) => Err(r.error("run_id", Problem::Missing)),
    }
}

impl Payload for RunFinished {
    const EVENT: EventType = EventType::RunFinished;

    fn from_payload(payload: Map<String, Value>) -> Result<RunFinished, PayloadError> {
        RunFinished::decode(payload, None)
    }
}

/// `RUN_CANCEL` (HAIP.md §8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunCancel {
    /// The run id: the payload's, else (by [`InboundEvent::decode`]) the
    /// envelope's; neither ⇒ an error answered `MISSING_RUN_ID`.
    pub run_id: String,
}

impl Payload for RunCancel {
    const EVENT: EventType = EventType::RunCancel;

    fn from_payload(payload: Map<String, Value>) -> Result<RunCancel, PayloadError> {
        let mut r = Reader::new(EventType::RunCancel, payload);
        Ok(RunCancel {
            run_id: run_id(&mut r, None)?,
        })
    }
}

/// `RUN_ERROR` (HAIP.md §8). The server only closes the run it names, so
/// nothing here is required: a missing `code` or `message` decodes as empty.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunError {
    /// `code`.
    pub code: ErrorCode,
    /// `message`.
    pub message: String,
    /// The run id: the payload's, else (by [`InboundEvent::decode`]) the envelope's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// `related_id`, when a string.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub related_id: Option<String>,
    /// `detail`, when an object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<Map<String, Value>>,
}

impl Payload for RunError {
    const EVENT: EventType = EventType::RunError;

    fn from_payload(payload: Map<String, Value>) -> Result<RunError, PayloadError> {
        let mut r = Reader::new(EventType::RunError, payload);
        Ok(RunError {
            code: ErrorCode::new(r.opt_string("code").unwrap_or_default()),
            message: r.opt_string("message").unwrap_or_default(),
            run_id: r.opt_string("run_id"),
            related_id: r.opt_string("related_id"),
            detail: r.opt_object("detail"),
        })
    }
}

// ----- heartbeat, replay, errors, flow control ---------------------------------

/// `PING` (HAIP.md §9).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Ping {
    /// `nonce`: a string in HAIP 1, kept as whatever JSON was sent so that the
    /// `PONG` copies it unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nonce: Option<Value>,
}

impl Ping {
    /// A `PING` with a nonce.
    pub fn new(nonce: impl Into<String>) -> Ping {
        Ping {
            nonce: Some(Value::String(nonce.into())),
        }
    }

    /// Its answer: a `PONG` with the same `nonce`, or `{}` without one.
    pub fn pong(self) -> Pong {
        Pong { nonce: self.nonce }
    }
}

impl Payload for Ping {
    const EVENT: EventType = EventType::Ping;

    fn from_payload(mut payload: Map<String, Value>) -> Result<Ping, PayloadError> {
        Ok(Ping {
            nonce: payload.remove("nonce"),
        })
    }
}

/// `PONG` (HAIP.md §9).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Pong {
    /// `nonce`: the `PING`'s, unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nonce: Option<Value>,
}

impl Payload for Pong {
    const EVENT: EventType = EventType::Pong;

    fn from_payload(mut payload: Map<String, Value>) -> Result<Pong, PayloadError> {
        Ok(Pong {
            nonce: payload.remove("nonce"),
        })
    }
}

/// `REPLAY_REQUEST` (HAIP.md §11.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReplayRequest {
    /// The first `seq` wanted.
    #[serde(serialize_with = "decimal")]
    pub from_seq: u64,
    /// The last `seq` wanted; `None` ⇒ the newest.
    #[serde(
        serialize_with = "opt_decimal",
        skip_serializing_if = "Option::is_none"
    )]
    pub to_seq: Option<u64>,
}

impl Payload for ReplayRequest {
    const EVENT: EventType = EventType::ReplayRequest;

    fn from_payload(payload: Map<String, Value>) -> Result<ReplayRequest, PayloadError> {
        let mut r = Reader::new(EventType::ReplayRequest, payload);
        let from_seq = r
            .seq("from_seq")
            .unwrap_or_else(|| Err(r.error("from_seq", Problem::Missing)))?;
        Ok(ReplayRequest {
            from_seq,
            to_seq: r.seq("to_seq").transpose()?,
        })
    }
}

/// `ERROR` (HAIP.md §14).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Error {
    /// `code`: what clients key on.
    pub code: ErrorCode,
    /// `message`: fixed, informative text.
    pub message: String,
    /// `related_id`: the offending envelope's `id`, as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub related_id: Option<String>,
    /// `detail`, when an object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<Map<String, Value>>,
}

impl Error {
    /// An `ERROR` with a code and a message only.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
            related_id: None,
            detail: None,
        }
    }
}

impl From<super::DecodeError> for Error {
    /// The `ERROR` an envelope that failed decoding earns.
    fn from(err: super::DecodeError) -> Error {
        Error {
            code: err.code,
            message: err.message,
            related_id: err.related_id,
            detail: match err.detail {
                Value::Object(detail) => Some(detail),
                _ => None,
            },
        }
    }
}

impl Payload for Error {
    const EVENT: EventType = EventType::Error;

    /// Never fails: an `ERROR` is never answered (HAIP.md §5, no error
    /// loops), and a client fails the request it names whatever else it
    /// says, so a `code` or `message` that is not a string decodes as empty.
    fn from_payload(payload: Map<String, Value>) -> Result<Error, PayloadError> {
        let mut r = Reader::new(EventType::Error, payload);
        Ok(Error {
            code: ErrorCode::new(r.opt_string("code").unwrap_or_default()),
            message: r.opt_string("message").unwrap_or_default(),
            related_id: r.opt_string("related_id"),
            detail: r.opt_object("detail"),
        })
    }
}

/// `FLOW_UPDATE` (HAIP.md §12): credit granted on a channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowUpdate {
    /// The channel (any name; the server ignores a `FLOW_UPDATE` without one).
    pub channel: String,
    /// `add_messages`; absent, or not an integer ≥ 1, ⇒ `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub add_messages: Option<NonZeroU64>,
    /// `add_bytes`; absent, or not an integer ≥ 1, ⇒ `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub add_bytes: Option<NonZeroU64>,
}

impl Payload for FlowUpdate {
    const EVENT: EventType = EventType::FlowUpdate;

    fn from_payload(payload: Map<String, Value>) -> Result<FlowUpdate, PayloadError> {
        let mut r = Reader::new(EventType::FlowUpdate, payload);
        Ok(FlowUpdate {
            channel: r.string("channel")?,
            add_messages: r.opt_u64("add_messages").and_then(NonZeroU64::new),
            add_bytes: r.opt_u64("add_bytes").and_then(NonZeroU64::new),
        })
    }
}

/// `PAUSE_CHANNEL` (HAIP.md §12.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PauseChannel {
    /// The channel to hold (the server ignores the envelope without one).
    pub channel: String,
}

impl Payload for PauseChannel {
    const EVENT: EventType = EventType::PauseChannel;

    fn from_payload(payload: Map<String, Value>) -> Result<PauseChannel, PayloadError> {
        let mut r = Reader::new(EventType::PauseChannel, payload);
        Ok(PauseChannel {
            channel: r.string("channel")?,
        })
    }
}

/// `RESUME_CHANNEL` (HAIP.md §12.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResumeChannel {
    /// The channel to release (the server ignores the envelope without one).
    pub channel: String,
}

impl Payload for ResumeChannel {
    const EVENT: EventType = EventType::ResumeChannel;

    fn from_payload(payload: Map<String, Value>) -> Result<ResumeChannel, PayloadError> {
        let mut r = Reader::new(EventType::ResumeChannel, payload);
        Ok(ResumeChannel {
            channel: r.string("channel")?,
        })
    }
}

// ----- inbound dispatch --------------------------------------------------------

/// An accepted inbound envelope's payload as the event a server acts on
/// (HAIP.md §5, "Server on receipt").
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum InboundEvent {
    /// A client `HAI`.
    Hai(Hai),
    /// A `TOOL_LIST` request.
    ToolList(ToolListRequest),
    /// A `TOOL_SCHEMA` request.
    ToolSchema(ToolSchemaRequest),
    /// A `TOOL_CALL`.
    ToolCall(ToolCall),
    /// A `TOOL_CANCEL`.
    ToolCancel(ToolCancel),
    /// `TOOL_INPUT` (HAIP.md §6.11).
    ToolInput(ToolInput),
    /// `RUN_STARTED`.
    RunStarted(RunStarted),
    /// `RUN_FINISHED`.
    RunFinished(RunFinished),
    /// `RUN_CANCEL`.
    RunCancel(RunCancel),
    /// `RUN_ERROR`.
    RunError(RunError),
    /// `PING`.
    Ping(Ping),
    /// `REPLAY_REQUEST`.
    ReplayRequest(ReplayRequest),
    /// `FLOW_UPDATE`.
    FlowUpdate(FlowUpdate),
    /// `PAUSE_CHANNEL`.
    PauseChannel(PauseChannel),
    /// `RESUME_CHANNEL`.
    ResumeChannel(ResumeChannel),
    /// Accepted, and nothing for the server to do: `PONG`, `ERROR`,
    /// `TOOL_UPDATE`, `TOOL_DONE`, text and audio, a `TOOL_LIST` with `tools`
    /// or a `TOOL_SCHEMA` with `schema`/`inputSchema` (a client advertising
    /// its own tools, HAIP.md §6.8). The payload is left in the [`Inbound`],
    /// untouched, for a hook.
    Other,
}

impl InboundEvent {
    /// Decodes `inbound`'s payload into the event it is (see the
    /// [module](self) documentation for the leniency rules).
    ///
    /// For the events a server acts on, the payload is moved out of
    /// `inbound` (left empty); the envelope's other fields stay for the
    /// reply (`id` for `related_id`, `run_id`, `thread_id`). For
    /// [`InboundEvent::Other`] nothing is taken. An error carries the
    /// envelope `id` as its `related_id`; [`PayloadError::reply`] is the
    /// `ERROR` to answer it with, if any.
    ///
    /// ```
    /// use haip::protocol::decode;
    /// use haip::protocol::payload::InboundEvent;
    ///
    /// let mut inbound = decode(r#"{"id":"r-1","type":"REPLAY_REQUEST","payload":{"from_seq":"x"}}"#).unwrap();
    /// let err = InboundEvent::decode(&mut inbound).unwrap_err();
    /// let reply = err.reply().unwrap();
    /// assert_eq!(reply.code.as_str(), "INVALID_MESSAGE");
    /// assert_eq!(reply.related_id.as_deref(), Some("r-1"));
    /// assert_eq!(reply.detail.unwrap()["reason"], "invalid from_seq");
    /// ```
    pub fn decode(inbound: &mut Inbound) -> Result<InboundEvent, PayloadError> {
        InboundEvent::decode_with(inbound, || uuid::Uuid::new_v4().to_string())
    }

    /// [`InboundEvent::decode`], with the caller making the id of a
    /// `TOOL_CALL` that has neither a usable `call_id` nor an envelope `id`
    /// (HAIP.md §6.4 step 1): `fresh` is called then, and only then. A server
    /// session passes its own id source, so that every id it hands out comes
    /// from one place (and tests can predict them).
    ///
    /// ```
    /// use haip::protocol::decode;
    /// use haip::protocol::payload::InboundEvent;
    ///
    /// let mut inbound = decode(r#"{"type":"TOOL_CALL","payload":{"tool":"echo"}}"#).unwrap();
    /// let event = InboundEvent::decode_with(&mut inbound, || "call-7".to_owned()).unwrap();
    /// let InboundEvent::ToolCall(call) = event else { panic!() };
    /// assert_eq!(call.call_id, "call-7");
    /// ```
    pub fn decode_with(
        inbound: &mut Inbound,
        fresh: impl FnOnce() -> String,
    ) -> Result<InboundEvent, PayloadError> {
        let acted_on = match inbound.event {
            EventType::ToolList => !inbound.payload.get("tools").is_some_and(Value::is_array),
            EventType::ToolSchema => {
                !(inbound.payload.contains_key("schema")
                    || inbound.payload.contains_key("inputSchema"))
            }
            EventType::Hai
            | EventType::ToolCall
            | EventType::ToolCancel
            | EventType::ToolInput
            | EventType::RunStarted
            | EventType::RunFinished
            | EventType::RunCancel
            | EventType::RunError
            | EventType::Ping
            | EventType::ReplayRequest
            | EventType::FlowUpdate
            | EventType::PauseChannel
            | EventType::ResumeChannel => true,
            _ => false,
        };
        if !acted_on {
            return Ok(InboundEvent::Other);
        }
        let payload = std::mem::take(&mut inbound.payload);
        let envelope_run_id = inbound.run_id.as_deref();
        let decoded = match inbound.event {
            EventType::Hai => Hai::from_payload(payload).map(InboundEvent::Hai),
            EventType::ToolList => {
                ToolListRequest::from_payload(payload).map(InboundEvent::ToolList)
            }
            EventType::ToolSchema => {
                ToolSchemaRequest::from_payload(payload).map(InboundEvent::ToolSchema)
            }
            EventType::ToolCall => {
                let id = &inbound.id;
                ToolCall::decode(payload, || Some(id.clone().unwrap_or_else(fresh)))
                    .map(InboundEvent::ToolCall)
            }
            EventType::ToolCancel => {
                ToolCancel::from_payload(payload).map(InboundEvent::ToolCancel)
            }
            EventType::ToolInput => ToolInput::from_payload(payload).map(InboundEvent::ToolInput),
            EventType::RunStarted => RunStarted::from_payload(payload).map(|mut run| {
                run.run_id = run.run_id.or_else(|| envelope_run_id.map(str::to_owned));
                InboundEvent::RunStarted(run)
            }),
            EventType::RunFinished => {
                RunFinished::decode(payload, envelope_run_id).map(InboundEvent::RunFinished)
            }
            EventType::RunCancel => {
                let mut r = Reader::new(EventType::RunCancel, payload);
                run_id(&mut r, envelope_run_id)
                    .map(|run_id| InboundEvent::RunCancel(RunCancel { run_id }))
            }
            EventType::RunError => RunError::from_payload(payload).map(|mut run| {
                run.run_id = run.run_id.or_else(|| envelope_run_id.map(str::to_owned));
                InboundEvent::RunError(run)
            }),
            EventType::Ping => Ping::from_payload(payload).map(InboundEvent::Ping),
            EventType::ReplayRequest => {
                ReplayRequest::from_payload(payload).map(InboundEvent::ReplayRequest)
            }
            EventType::FlowUpdate => {
                FlowUpdate::from_payload(payload).map(InboundEvent::FlowUpdate)
            }
            EventType::PauseChannel => {
                PauseChannel::from_payload(payload).map(InboundEvent::PauseChannel)
            }
            EventType::ResumeChannel => {
                ResumeChannel::from_payload(payload).map(InboundEvent::ResumeChannel)
            }
            _ => Ok(InboundEvent::Other),
        };
        decoded.map_err(|mut e| {
            e.related_id.clone_from(&inbound.id);
            e
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::protocol::decode;

    fn map(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            other => panic!("not an object: {other}"),
        }
    }

    /// Encodes with both encoders, checks they agree, and decodes again.
    fn round_trip<P: Payload + fmt::Debug + PartialEq>(p: &P) -> P {
        let value = p.to_value();
        let text = p.to_json();
        let parsed: Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(parsed, value, "to_json and to_value agree");
        P::from_payload(map(value)).unwrap()
    }

    /// Decodes one envelope text into its event.
    fn event(text: &str) -> (Result<InboundEvent, PayloadError>, Inbound) {
        let mut inbound = decode(text).unwrap();
        let event = InboundEvent::decode(&mut inbound);
        (event, inbound)
    }

    fn envelope(ty: &str, payload: Value) -> String {
        json!({"id": "e-1", "type": ty, "payload": payload}).to_string()
    }

    #[test]
    fn every_payload_round_trips() {
        let mut caps = Capabilities {
            binary_frames: Some(true),
            flow_control: Some(FlowControl {
                initial_credit_messages: Some(1000),
                initial_credit_bytes: Some(1_048_576),
            }),
            max_concurrent_runs: Some(10),
            signed_envelopes: Some(false),
            tool_input: Some(true),
            log_level: Some("debug".into()),
            schema_profile: Some("openai-strict".into()),
            other: Map::new(),
        };
        caps.other.insert("x_custom".into(), json!({"a": [1]}));
        let hai = Hai {
            capabilities: Some(caps),
            last_rx_seq: Some(LastRxSeq::Seq(12)),
            binary_frames: Some(false),
            max_concurrent_runs: Some(3),
            ..Hai::new()
        };
        assert_eq!(round_trip(&hai), hai);
        assert_eq!(round_trip(&ToolListRequest {}), ToolListRequest {});
        let list = ToolList {
            tools: vec![
                ToolListItem {
                    name: "echo".into(),
                    description: "Echo back the input".into(),
                    ..ToolListItem::default()
                },
                ToolListItem {
                    name: "bare".into(),
                    ..ToolListItem::default()
                },
                ToolListItem {
                    name: "delete_repo".into(),
                    description: "Delete a repository".into(),
                    title: Some("Delete a repository".into()),
                    annotations: ToolAnnotations::new().destructive(true).open_world(false),
                    icons: vec![
                        Icon::new("https://example.com/trash.svg")
                            .with_mime_type("image/svg+xml")
                            .with_sizes(["48x48", "any"])
                            .with_theme(crate::protocol::IconTheme::Dark),
                        Icon::new("data:image/png;base64,AAAA"),
                    ],
                },
            ],
        };
        assert_eq!(round_trip(&list), list);
        let request = ToolSchemaRequest {
            tool: "echo".into(),
            profile: None,
        };
        assert_eq!(round_trip(&request), request);
        let request = ToolSchemaRequest {
            tool: "echo".into(),
            profile: Some("full".into()),
        };
        assert_eq!(round_trip(&request), request);
        let schema = ToolSchema {
            tool: "echo".into(),
            input_schema: json!({"type": "object"}),
            output_schema: Some(json!({"type": "object", "properties": {}})),
            schema: Some(json!({"type": "object"})),
            title: None,
            annotations: ToolAnnotations::default(),
            icons: Vec::new(),
        };
        assert_eq!(round_trip(&schema), schema);
        let schema = ToolSchema {
            title: Some("Echo".into()),
            annotations: ToolAnnotations::new().read_only(true),
            icons: vec![Icon::new("https://example.com/echo.png")],
            ..schema
        };
        assert_eq!(round_trip(&schema), schema);
        let call = ToolCall {
            run_id: Some("r-1".into()),
            ..ToolCall::new("c-1", "echo", json!({"message": "hi"}))
        };
        assert_eq!(round_trip(&call), call);
        let cancel = ToolCancel {
            call_id: "c-1".into(),
            reason: Some("user closed panel".into()),
        };
        assert_eq!(round_trip(&cancel), cancel);
        let update = ToolUpdate {
            progress: Some(40.into()),
            partial: Some(json!({"rows_done": 400})),
            ..ToolUpdate::new("c-4", UpdateStatus::Running)
        };
        assert_eq!(round_trip(&update), update);
        assert_eq!(update.clone().into_value(), update.to_value());
        for done in [
            ToolDone::ok("c-1", Some(json!({"echoed": "hi"}))),
            ToolDone::ok("c-1", None),
            ToolDone::cancelled("c-1", Some("enough".into())),
            ToolDone::cancelled("c-1", None),
            ToolDone::failed(
                "c-3",
                ToolFailure {
                    total: Some(2),
                    ..ToolFailure::new(ErrorCode::INVALID_PARAMS, "Invalid params for tool add")
                        .with_details(json!([{"path": "/a", "message": "m"}]))
                },
            ),
        ] {
            assert_eq!(round_trip(&done), done);
        }
        let started = RunStarted {
            run_id: Some("r".into()),
            thread_id: Some("t".into()),
            metadata: Some(map(json!({"k": 1}))),
            other: map(json!({"anything": [true]})),
        };
        assert_eq!(round_trip(&started), started);
        let finished = RunFinished {
            run_id: "r".into(),
            status: RunStatus::Cancelled,
            summary: Some("s".into()),
        };
        assert_eq!(round_trip(&finished), finished);
        let cancel = RunCancel { run_id: "r".into() };
        assert_eq!(round_trip(&cancel), cancel);
        let run_error = RunError {
            code: "E".into(),
            message: "m".into(),
            run_id: Some("r".into()),
            related_id: Some("x".into()),
            detail: Some(map(json!({"k": "v"}))),
        };
        assert_eq!(round_trip(&run_error), run_error);
        assert_eq!(round_trip(&Ping::new("n")), Ping::new("n"));
        assert_eq!(round_trip(&Ping::new("n").pong()), Ping::new("n").pong());
        for replay in [
            ReplayRequest {
                from_seq: 3,
                to_seq: Some(u64::MAX),
            },
            ReplayRequest {
                from_seq: 0,
                to_seq: None,
            },
        ] {
            assert_eq!(round_trip(&replay), replay);
        }
        let error = Error {
            related_id: Some("call-2".into()),
            detail: Some(map(json!({"call_id": "c-2", "tool": "nope"}))),
            ..Error::new(ErrorCode::TOOL_NOT_FOUND, "Tool nope not found")
        };
        assert_eq!(round_trip(&error), error);
        let flow = FlowUpdate {
            channel: "USER".into(),
            add_messages: NonZeroU64::new(5),
            add_bytes: NonZeroU64::new(900),
        };
        assert_eq!(round_trip(&flow), flow);
        let pause = PauseChannel {
            channel: "AGENT".into(),
        };
        assert_eq!(round_trip(&pause), pause);
        let resume = ResumeChannel {
            channel: "AGENT".into(),
        };
        assert_eq!(round_trip(&resume), resume);
    }

    /// What the server writes is exactly what HAIP.md §3.1 and §6.10 show.
    #[test]
    fn encoding_matches_the_spec_examples() {
        let hai = Hai {
            capabilities: Some(Capabilities {
                binary_frames: Some(true),
                flow_control: Some(FlowControl {
                    initial_credit_messages: Some(1000),
                    initial_credit_bytes: Some(1_048_576),
                }),
                max_concurrent_runs: Some(10),
                signed_envelopes: Some(false),
                ..Capabilities::default()
            }),
            ..Hai::new()
        };
        assert_eq!(
            hai.to_value(),
            json!({"haip_version":"1.1.2","accept_major":[1],
               "accept_events":["HAI","RUN_STARTED","RUN_FINISHED","RUN_CANCEL","RUN_ERROR","PING","PONG","REPLAY_REQUEST",
                 "TEXT_MESSAGE_START","TEXT_MESSAGE_PART","TEXT_MESSAGE_END","AUDIO_CHUNK","TOOL_CALL","TOOL_UPDATE",
                 "TOOL_DONE","TOOL_CANCEL","TOOL_LIST","TOOL_SCHEMA","ERROR","FLOW_UPDATE","PAUSE_CHANNEL","RESUME_CHANNEL"],
               "capabilities":{"binary_frames":true,"flow_control":{"initial_credit_messages":1000,"initial_credit_bytes":1048576},
                 "max_concurrent_runs":10,"signed_envelopes":false}})
        );
        // A HAI missing its required fields is still written complete.
        assert_eq!(Hai::default().to_value(), Hai::new().to_value());
        let confirm = Hai {
            last_rx_seq: Some(LastRxSeq::Seq(7)),
            ..Hai::new()
        };
        assert_eq!(confirm.to_value()["last_rx_seq"], "7");
        let invalid = Hai {
            last_rx_seq: Some(LastRxSeq::Invalid),
            ..Hai::new()
        };
        assert!(invalid.to_value().get("last_rx_seq").is_none());

        let text = |json: Vec<u8>| String::from_utf8(json).unwrap();
        let done = ToolDone::ok("c-1", Some(json!({"echoed": "Hello, HAIP Server!"})));
        assert_eq!(
            text(done.to_json()),
            r#"{"call_id":"c-1","status":"OK","result":{"echoed":"Hello, HAIP Server!"}}"#
        );
        let done = ToolDone::failed(
            "c-2",
            ToolFailure::new(ErrorCode::TOOL_NOT_FOUND, "Tool nope not found"),
        );
        assert_eq!(
            text(done.to_json()),
            r#"{"call_id":"c-2","status":"ERROR","result":{"error":"Tool nope not found","code":"TOOL_NOT_FOUND"}}"#
        );
        let done = ToolDone::cancelled("c-4", Some("user closed panel".into()));
        assert_eq!(
            text(done.to_json()),
            r#"{"call_id":"c-4","status":"CANCELLED","result":{"reason":"user closed panel"}}"#
        );
        // A null value is no result; no reason is no result.
        let done = ToolDone::ok("c", Some(Value::Null));
        assert_eq!(text(done.to_json()), r#"{"call_id":"c","status":"OK"}"#);
        let done = ToolDone::cancelled("c", None);
        assert_eq!(
            text(done.to_json()),
            r#"{"call_id":"c","status":"CANCELLED"}"#
        );
        let update = ToolUpdate {
            progress: Some(40.into()),
            partial: Some(json!({"rows_done": 400})),
            ..ToolUpdate::new("c-4", UpdateStatus::Running)
        };
        assert_eq!(
            text(update.to_json()),
            r#"{"call_id":"c-4","status":"RUNNING","progress":40,"partial":{"rows_done":400}}"#
        );
        let queued = ToolUpdate::new("c-65", UpdateStatus::Queued);
        assert_eq!(
            text(queued.to_json()),
            r#"{"call_id":"c-65","status":"QUEUED"}"#
        );
        let list = ToolList {
            tools: vec![
                ToolListItem {
                    name: "echo".into(),
                    description: "Echo back the input".into(),
                    ..ToolListItem::default()
                },
                ToolListItem {
                    name: "bare".into(),
                    ..ToolListItem::default()
                },
                ToolListItem {
                    name: "wipe".into(),
                    title: Some("Wipe".into()),
                    annotations: ToolAnnotations::new().destructive(true),
                    icons: vec![Icon::new("w.svg")],
                    ..ToolListItem::default()
                },
            ],
        };
        // Only what is there; a tool that declares nothing has no
        // `title`, `annotations` or `icons` (HAIP.md §6.2, §6.13).
        assert_eq!(
            text(list.to_json()),
            concat!(
                r#"{"tools":[{"name":"echo","description":"Echo back the input"},{"name":"bare"},"#,
                r#"{"name":"wipe","title":"Wipe","annotations":{"destructiveHint":true},"icons":[{"src":"w.svg"}]}]}"#
            )
        );
        assert_eq!(text(Ping::default().pong().to_json()), "{}");
        assert_eq!(
            text(
                ReplayRequest {
                    from_seq: 1,
                    to_seq: Some(20)
                }
                .to_json()
            ),
            r#"{"from_seq":"1","to_seq":"20"}"#
        );
        let error = Error {
            related_id: Some("call-2".into()),
            detail: Some(map(json!({"call_id": "c-2", "tool": "nope"}))),
            ..Error::new(ErrorCode::TOOL_NOT_FOUND, "Tool nope not found")
        };
        assert_eq!(
            error.to_value(),
            json!({"code":"TOOL_NOT_FOUND","message":"Tool nope not found","related_id":"call-2","detail":{"call_id":"c-2","tool":"nope"}})
        );
        let call = ToolCall::new("c-1", "echo", json!({"message": "hi"}));
        assert_eq!(
            text(call.to_json()),
            r#"{"call_id":"c-1","tool":"echo","params":{"message":"hi"}}"#
        );
        // Non-ASCII stays raw UTF-8 (HAIP.md §2.4).
        let done = ToolDone::ok("c", Some(json!({"temperature": "22°C"})));
        assert!(text(done.to_json()).contains("22°C"));
    }

    #[test]
    fn tool_done_from_parts_is_the_serde_encoding() {
        for (call_id, status, result) in [
            ("c-1", ToolStatus::Ok, Some(&br#"{"a":[1,2]}"#[..])),
            (
                "c\"2\n",
                ToolStatus::Error,
                Some(&br#"{"error":"e","code":"X"}"#[..]),
            ),
            ("c-3", ToolStatus::Cancelled, None),
        ] {
            let parts = ToolDone::json_from_parts(call_id, status, result);
            let mut expected = json!({"call_id": call_id, "status": status.as_str()});
            if let Some(result) = result {
                expected["result"] = serde_json::from_slice(result).unwrap();
            }
            assert_eq!(serde_json::from_slice::<Value>(&parts).unwrap(), expected);
        }
    }

    #[test]
    fn tool_calls_are_read_leniently() {
        // Numeric call id, no params, unknown fields.
        let (call, _) = event(&envelope(
            "TOOL_CALL",
            json!({"call_id": 7, "tool": "echo", "extra": {"x": 1}}),
        ));
        assert_eq!(
            call.unwrap(),
            InboundEvent::ToolCall(ToolCall {
                call_id: "7".into(),
                tool: Some("echo".into()),
                params: json!({}),
                run_id: None,
            })
        );
        // No call id: the envelope id; params null is {}; payload run_id kept.
        let (call, inbound) = event(&envelope(
            "TOOL_CALL",
            json!({"call_id": true, "tool": 5, "params": null, "run_id": "r"}),
        ));
        let InboundEvent::ToolCall(call) = call.unwrap() else {
            panic!("a call")
        };
        assert_eq!(
            (call.call_id.as_str(), call.tool, &call.params),
            ("e-1", None, &json!({}))
        );
        assert_eq!(call.run_id.as_deref(), Some("r"));
        // The payload moved out; the envelope stays.
        assert!(inbound.payload.is_empty());
        assert_eq!(inbound.id.as_deref(), Some("e-1"));
        // Neither: a new UUID.
        let (call, _) = event(r#"{"type":"TOOL_CALL","payload":{"tool":"echo","params":[1]}}"#);
        let InboundEvent::ToolCall(call) = call.unwrap() else {
            panic!("a call")
        };
        assert!(
            uuid::Uuid::parse_str(&call.call_id).is_ok(),
            "{}",
            call.call_id
        );
        assert_eq!(
            call.params,
            json!([1]),
            "params other than null are as sent"
        );
        // Standalone, with no envelope to fall back on, the call id is missing.
        let err = ToolCall::from_payload(map(json!({"tool": "echo"}))).unwrap_err();
        assert_eq!(
            (err.field.as_str(), &err.problem),
            ("call_id", &Problem::Missing)
        );
    }

    #[test]
    fn seq_like_fields_take_integers_and_decimal_strings() {
        let replay =
            ReplayRequest::from_payload(map(json!({"from_seq": "3", "to_seq": 9}))).unwrap();
        assert_eq!(
            replay,
            ReplayRequest {
                from_seq: 3,
                to_seq: Some(9)
            }
        );
        let hai = Hai::from_payload(map(
            json!({"last_rx_seq": "12", "accept_major": ["1", 2, "x", 1.5]}),
        ))
        .unwrap();
        assert_eq!(hai.last_rx_seq, Some(LastRxSeq::Seq(12)));
        assert_eq!(hai.accept_major, Some(vec![1, 2]));
        assert!(hai.is_compatible());
        let hai =
            Hai::from_payload(map(json!({"last_rx_seq": -1, "accept_major": [2, "2"]}))).unwrap();
        assert_eq!(hai.last_rx_seq, Some(LastRxSeq::Invalid));
        assert!(!hai.is_compatible());
    }

    #[test]
    fn missing_and_odd_optional_fields_take_their_defaults() {
        // A bare client HAI: compatible, every event, no resumption.
        let hai = Hai::from_payload(Map::new()).unwrap();
        assert_eq!(hai, Hai::default());
        assert!(hai.is_compatible());
        assert_eq!(hai.accepted_events(), None);
        let hai = Hai::from_payload(map(json!({
            "accept_major": 1,
            "accept_events": ["PING", 3, "NOPE", "TOOL_LIST"],
            "capabilities": {"flow_control": {"initial_credit_messages": "10"}, "binary_frames": "yes", "z": 1},
            "binary_frames": true,
            "unknown": {}
        })))
        .unwrap();
        assert_eq!(hai.accept_major, None, "not an array: compatible");
        assert_eq!(
            hai.accept_events.as_deref(),
            Some(&["PING".to_owned(), "NOPE".to_owned(), "TOOL_LIST".to_owned()][..])
        );
        assert_eq!(
            hai.accepted_events(),
            Some(vec![EventType::Ping, EventType::ToolList])
        );
        let caps = hai.capabilities.unwrap();
        assert_eq!(caps.flow_control, Some(FlowControl::default()));
        assert_eq!(caps.binary_frames, None);
        assert_eq!(caps.other, map(json!({"z": 1})));
        assert_eq!(hai.binary_frames, Some(true));
        // TOOL_DONE: status defaults to OK; null result is none.
        let done = ToolDone::from_payload(map(json!({"call_id": "c", "result": null}))).unwrap();
        assert_eq!(done, ToolDone::ok("c", None));
        // A cancellation with an odd result is one without a reason.
        let done = ToolDone::from_payload(map(
            json!({"call_id": "c", "status": "CANCELLED", "result": {"reason": 5}}),
        ))
        .unwrap();
        assert_eq!(done, ToolDone::cancelled("c", None));
        // TOOL_CANCEL: a non-string reason is no reason.
        let cancel = ToolCancel::from_payload(map(json!({"call_id": "c", "reason": 1}))).unwrap();
        assert_eq!(cancel.reason, None);
        // FLOW_UPDATE: non-positive or non-integer credit is none.
        let flow = FlowUpdate::from_payload(map(
            json!({"channel": "X", "add_messages": 0, "add_bytes": "5"}),
        ))
        .unwrap();
        assert_eq!((flow.add_messages, flow.add_bytes), (None, None));
        // RUN_FINISHED: an unknown status is OK.
        let finished =
            RunFinished::from_payload(map(json!({"run_id": "r", "status": "DONE"}))).unwrap();
        assert_eq!(finished.status, RunStatus::Ok);
        // RUN_ERROR, ERROR: nothing is required.
        let run_error = RunError::from_payload(Map::new()).unwrap();
        assert_eq!(
            (run_error.code.as_str(), run_error.message.as_str()),
            ("", "")
        );
        let error = Error::from_payload(map(json!({"code": 5, "related_id": "r"}))).unwrap();
        assert_eq!(
            (
                error.code.as_str(),
                error.message.as_str(),
                error.related_id.as_deref()
            ),
            ("", "", Some("r"))
        );
        // TOOL_UPDATE: unknown statuses are kept, a non-number progress is none.
        let update = ToolUpdate::from_payload(map(
            json!({"call_id": 4, "status": "WAITING_INPUT", "progress": "50"}),
        ))
        .unwrap();
        assert_eq!(
            (update.call_id.as_str(), &update.status, update.progress),
            ("4", &UpdateStatus::WaitingInput, None)
        );
        let update =
            ToolUpdate::from_payload(map(json!({"call_id": "c", "status": "LATER"}))).unwrap();
        assert_eq!(update.status, UpdateStatus::Other("LATER".into()));
        assert_eq!(update.to_value()["status"], "LATER");
        // TOOL_SCHEMA reply: the legacy `schema` stands in for `inputSchema`.
        let schema =
            ToolSchema::from_payload(map(json!({"tool": "t", "schema": {"type": "object"}})))
                .unwrap();
        assert_eq!(schema.input_schema, json!({"type": "object"}));
        // Annotations and icons of the wrong type are absent, not errors.
        let schema = ToolSchema::from_payload(map(json!({
            "tool": "t", "inputSchema": {}, "title": 5, "annotations": [true],
            "icons": [{"src": "i.png", "theme": "sepia"}, {"src": 1}]
        })))
        .unwrap();
        assert_eq!(schema.title, None);
        assert!(schema.annotations.is_empty());
        assert_eq!(schema.icons, [Icon::new("i.png")]);
        let list = ToolList::from_payload(map(json!({"tools": [
            {"name": "a", "annotations": {"readOnlyHint": 1, "openWorldHint": false}, "icons": "x.png"}
        ]})))
        .unwrap();
        assert_eq!(
            list.tools[0].annotations,
            ToolAnnotations::new().open_world(false)
        );
        assert!(list.tools[0].icons.is_empty());
        // PING: any nonce is copied unchanged, even a number.
        let ping = Ping::from_payload(map(json!({"nonce": 5}))).unwrap();
        assert_eq!(ping.pong().to_value(), json!({"nonce": 5}));
    }

    #[test]
    fn accept_major_takes_1_or_its_decimal_string_only() {
        let majors = |v: Value| {
            let hai = Hai::from_payload(map(json!({ "accept_major": v }))).unwrap();
            (hai.accept_major.clone(), hai.is_compatible())
        };
        assert_eq!(majors(json!([1])), (Some(vec![1]), true));
        assert_eq!(majors(json!(["1", 2])), (Some(vec![1, 2]), true));
        // HAIP.md §3.2: an array containing neither `1` nor `"1"`.
        assert_eq!(majors(json!(["01", 1.0, "x"])), (Some(vec![]), false));
        assert_eq!(majors(json!(["2"])), (Some(vec![2]), false));
        assert_eq!(majors(json!("1")), (None, true));
    }

    #[test]
    fn wrong_types_are_clear_errors() {
        let err = |r: Result<(), PayloadError>| r.unwrap_err().to_string();
        let check = |text: String, expected: &str| assert_eq!(text, expected);
        check(
            err(ToolSchemaRequest::from_payload(map(json!({"tool": 5}))).map(drop)),
            "TOOL_SCHEMA payload.tool: expected a string, found a number",
        );
        check(
            err(ToolSchemaRequest::from_payload(Map::new()).map(drop)),
            "TOOL_SCHEMA payload.tool: missing",
        );
        check(
            err(ReplayRequest::from_payload(map(json!({"from_seq": "-1"}))).map(drop)),
            r#"REPLAY_REQUEST payload.from_seq: expected a non-negative integer, found "-1""#,
        );
        check(
            err(ReplayRequest::from_payload(map(json!({"from_seq": 1, "to_seq": [2]}))).map(drop)),
            "REPLAY_REQUEST payload.to_seq: expected an integer or a decimal string, found an array",
        );
        check(
            err(ToolCancel::from_payload(map(json!({"call_id": 5}))).map(drop)),
            "TOOL_CANCEL payload.call_id: expected a string, found a number",
        );
        check(
            err(ToolList::from_payload(map(
                json!({"tools": [{"name": "a"}, {"description": "d"}]}),
            ))
            .map(drop)),
            "TOOL_LIST payload.tools[1].name: missing",
        );
        check(
            err(ToolList::from_payload(map(json!({"tools": ["a"]}))).map(drop)),
            "TOOL_LIST payload.tools[0]: expected an object, found a string",
        );
        check(
            err(FlowUpdate::from_payload(map(json!({"add_messages": 5}))).map(drop)),
            "FLOW_UPDATE payload.channel: missing",
        );
        // A TOOL_DONE whose outcome cannot be read names its call.
        let done = |v: Value| ToolDone::from_payload(map(v)).unwrap_err();
        let e = done(json!({"call_id": "c-9", "status": "FAILED"}));
        assert_eq!(
            (e.to_string().as_str(), e.call_id.as_deref()),
            (
                r#"TOOL_DONE payload.status: expected OK, ERROR or CANCELLED, found "FAILED""#,
                Some("c-9")
            )
        );
        let e = done(json!({"call_id": "c-9", "status": "ERROR", "result": {"error": "boom"}}));
        assert_eq!(e.field, "result.code");
        assert_eq!(e.call_id.as_deref(), Some("c-9"));
        let e = done(json!({"call_id": "c-9", "status": "ERROR"}));
        assert_eq!(
            (e.field.as_str(), &e.problem),
            ("result", &Problem::Missing)
        );
        let e = done(json!({"status": "OK"}));
        assert_eq!((e.field.as_str(), e.call_id), ("call_id", None));
        let e = ToolUpdate::from_payload(map(json!({"call_id": "u", "status": 3}))).unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.call_id.as_deref()),
            ("status", Some("u"))
        );
    }

    #[test]
    fn inbound_errors_carry_the_reply_haip_prescribes() {
        let reply = |text: &str| {
            let (event, _) = event(text);
            event.unwrap_err().reply().map(|e| e.to_value())
        };
        assert_eq!(
            reply(&envelope("TOOL_SCHEMA", json!({}))),
            Some(
                json!({"code": "INVALID_MESSAGE", "message": "Invalid message format", "related_id": "e-1", "detail": {"reason": "missing tool"}})
            )
        );
        assert_eq!(
            reply(&envelope(
                "REPLAY_REQUEST",
                json!({"from_seq": 1, "to_seq": "x"})
            )),
            Some(
                json!({"code": "INVALID_MESSAGE", "message": "Invalid message format", "related_id": "e-1", "detail": {"reason": "invalid to_seq"}})
            )
        );
        assert_eq!(
            reply(r#"{"type":"REPLAY_REQUEST","payload":{}}"#),
            Some(
                json!({"code": "INVALID_MESSAGE", "message": "Invalid message format", "detail": {"reason": "invalid from_seq"}})
            )
        );
        for ty in ["RUN_FINISHED", "RUN_CANCEL"] {
            assert_eq!(
                reply(&envelope(ty, json!({"run_id": 5}))),
                Some(
                    json!({"code": "MISSING_RUN_ID", "message": "Run ID is required", "related_id": "e-1"})
                )
            );
        }
        // Ignored silently (HAIP.md §6.7, §12.2).
        assert_eq!(reply(&envelope("TOOL_CANCEL", json!({"call_id": 1}))), None);
        assert_eq!(reply(&envelope("FLOW_UPDATE", json!({}))), None);
        assert_eq!(
            reply(&envelope("PAUSE_CHANNEL", json!({"channel": 1}))),
            None
        );
        assert_eq!(reply(&envelope("RESUME_CHANNEL", json!({}))), None);
    }

    #[test]
    fn run_ids_fall_back_on_the_envelope() {
        let text = |ty: &str, payload: Value| {
            json!({"type": ty, "run_id": "env", "payload": payload}).to_string()
        };
        let (e, _) = event(&text("RUN_CANCEL", json!({})));
        assert_eq!(
            e.unwrap(),
            InboundEvent::RunCancel(RunCancel {
                run_id: "env".into()
            })
        );
        let (e, _) = event(&text(
            "RUN_FINISHED",
            json!({"run_id": "own", "status": "ERROR"}),
        ));
        assert_eq!(
            e.unwrap(),
            InboundEvent::RunFinished(RunFinished {
                run_id: "own".into(),
                status: RunStatus::Error,
                summary: None
            })
        );
        let (e, _) = event(&text("RUN_STARTED", json!({"x": 1})));
        let InboundEvent::RunStarted(run) = e.unwrap() else {
            panic!("a run")
        };
        assert_eq!(
            (run.run_id.as_deref(), &run.other),
            (Some("env"), &map(json!({"x": 1})))
        );
        let (e, _) = event(&text("RUN_ERROR", json!({"code": "X"})));
        let InboundEvent::RunError(run) = e.unwrap() else {
            panic!("a run error")
        };
        assert_eq!(run.run_id.as_deref(), Some("env"));
        let (e, _) = event(r#"{"type":"RUN_STARTED","payload":{}}"#);
        assert_eq!(e.unwrap(), InboundEvent::RunStarted(RunStarted::default()));
    }

    #[test]
    fn what_the_server_does_not_act_on_passes_through_untouched() {
        for (ty, payload) in [
            ("TOOL_LIST", json!({"tools": [{"name": "mine"}]})),
            ("TOOL_SCHEMA", json!({"tool": "mine", "inputSchema": {}})),
            ("TOOL_SCHEMA", json!({"tool": "mine", "schema": {}})),
            ("TOOL_DONE", json!({"call_id": "c", "status": "WHATEVER"})),
            ("TOOL_UPDATE", json!({})),
            ("ERROR", json!({"code": 5})),
            ("PONG", json!({"nonce": "n"})),
            ("TEXT_MESSAGE_PART", json!({"content": "hi"})),
            ("AUDIO_CHUNK", json!({})),
        ] {
            let (e, inbound) = event(&envelope(ty, payload.clone()));
            assert_eq!(e.unwrap(), InboundEvent::Other, "{ty}");
            assert_eq!(Value::Object(inbound.payload), payload, "{ty}");
        }
        // A TOOL_LIST whose `tools` is no array is a request.
        let (e, _) = event(&envelope("TOOL_LIST", json!({"tools": "no"})));
        assert_eq!(e.unwrap(), InboundEvent::ToolList(ToolListRequest {}));
    }

    #[test]
    fn every_acted_on_event_decodes() {
        let cases = [
            ("HAI", json!({}), "Hai"),
            ("TOOL_LIST", json!({}), "ToolList"),
            ("TOOL_SCHEMA", json!({"tool": "echo"}), "ToolSchema"),
            ("TOOL_CALL", json!({}), "ToolCall"),
            ("TOOL_CANCEL", json!({"call_id": "c"}), "ToolCancel"),
            ("RUN_STARTED", json!({}), "RunStarted"),
            ("RUN_FINISHED", json!({"run_id": "r"}), "RunFinished"),
            ("RUN_CANCEL", json!({"run_id": "r"}), "RunCancel"),
            ("RUN_ERROR", json!({}), "RunError"),
            ("PING", json!({}), "Ping"),
            ("REPLAY_REQUEST", json!({"from_seq": 0}), "ReplayRequest"),
            ("FLOW_UPDATE", json!({"channel": "USER"}), "FlowUpdate"),
            ("PAUSE_CHANNEL", json!({"channel": "AGENT"}), "PauseChannel"),
            (
                "RESUME_CHANNEL",
                json!({"channel": "AGENT"}),
                "ResumeChannel",
            ),
        ];
        for (ty, payload, variant) in cases {
            let (e, _) = event(&envelope(ty, payload));
            let debug = format!("{:?}", e.unwrap());
            assert!(debug.starts_with(&format!("{variant}(")), "{ty}: {debug}");
        }
    }

    #[test]
    fn decode_errors_become_error_payloads() {
        let err = decode(r#"{"id":"x","type":"NOPE","payload":{}}"#).unwrap_err();
        assert_eq!(
            Error::from(err).to_value(),
            json!({"code": "UNSUPPORTED_TYPE", "message": "Unknown message type: NOPE", "related_id": "x", "detail": {"type": "NOPE"}})
        );
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9_-]{0,12}",
            any::<String>(),
            Just("22°C \"q\" \\ \u{1}".to_owned()),
        ]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            // Quarters: exact in binary, so they survive the text round trip.
            (-4000i32..4000).prop_map(|n| Value::from(f64::from(n) / 4.0)),
            text().prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(text(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn tool_done() -> impl Strategy<Value = ToolDone> {
        let outcome = prop_oneof![
            proptest::option::of(json_value())
                .prop_map(|v| ToolOutcome::Ok(v.filter(|v| !v.is_null()))),
            (
                text(),
                text(),
                proptest::option::of(json_value()),
                proptest::option::of(any::<u64>()),
                proptest::option::of(any::<u64>()),
            )
                .prop_map(|(code, message, details, total, total_at_least)| {
                    ToolOutcome::Error(ToolFailure {
                        message,
                        code: ErrorCode::new(code),
                        details: details.filter(|v| !v.is_null()),
                        total,
                        total_at_least,
                    })
                }),
            proptest::option::of(text()).prop_map(ToolOutcome::Cancelled),
        ];
        (text(), outcome).prop_map(|(call_id, outcome)| ToolDone { call_id, outcome })
    }

    fn tool_call() -> impl Strategy<Value = ToolCall> {
        (text(), text(), json_value(), proptest::option::of(text())).prop_map(
            |(call_id, tool, params, run_id)| ToolCall {
                run_id,
                // `null` params are read as `{}`.
                ..ToolCall::new(
                    call_id,
                    tool,
                    if params.is_null() { json!({}) } else { params },
                )
            },
        )
    }

    fn flow_update() -> impl Strategy<Value = FlowUpdate> {
        (
            text(),
            proptest::option::of(1..=u64::MAX),
            proptest::option::of(1..=u64::MAX),
        )
            .prop_map(|(channel, m, b)| FlowUpdate {
                channel,
                add_messages: m.and_then(NonZeroU64::new),
                add_bytes: b.and_then(NonZeroU64::new),
            })
    }

    /// Through JSON text, as on the wire.
    fn through_text<P: Payload>(p: &P) -> Result<P, PayloadError> {
        let text = p.to_json();
        let value: Value = serde_json::from_slice(&text).unwrap();
        P::from_payload(map(value))
    }

    proptest! {
        #[test]
        fn tool_done_round_trips(done in tool_done()) {
            prop_assert_eq!(through_text(&done).unwrap(), done.clone());
            let value: Value = serde_json::from_slice(&done.to_json()).unwrap();
            prop_assert_eq!(value, done.to_value());
            prop_assert_eq!(done.clone().into_value(), done.to_value());
        }

        #[test]
        fn tool_call_round_trips(call in tool_call()) {
            prop_assert_eq!(through_text(&call).unwrap(), call);
        }

        #[test]
        fn flow_update_round_trips(flow in flow_update()) {
            prop_assert_eq!(through_text(&flow).unwrap(), flow);
        }
    }
}

//! Typed payloads of the HAIP 1 events that the server or the client acts on.
//!
//! haip reads each accepted envelope's payload once, into the one typed
//! event it is, and writes its own payloads from typed values. Of those
//! types, the ones public are those the client shows: the server's [`Hai`]
//! (with its [`Capabilities`], [`FlowControl`] and [`LastRxSeq`]), what
//! `haip::client::Client::hai` returns, and the [`InputAction`] of an answer
//! to a question. The rules below are how haip reads and writes every
//! payload.
//!
//! # Lenient in
//!
//! Real clients send loosely typed payloads (docs/protocol.md §1, §2), so decoding:
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
//!   (docs/protocol.md §2.1, §11.2);
//! * takes a numeric call id as its decimal text (`TOOL_CALL`, `TOOL_UPDATE`,
//!   `TOOL_DONE`; not `TOOL_CANCEL`, whose non-string `call_id` docs/protocol.md §6.7
//!   ignores);
//! * fills in the fallbacks docs/protocol.md defines from the envelope: a
//!   `TOOL_CALL` without a usable `call_id` takes the envelope `id`, else a
//!   new id (§6.4 step 1); a `RUN_*` without a payload `run_id` takes the
//!   envelope's (§8);
//! * fails, with an error naming the field and what was wrong with it, only
//!   where the receiver cannot act without the field. For an inbound
//!   envelope the server answers with the `ERROR` docs/protocol.md
//!   prescribes, or ignores the envelope silently where docs/protocol.md
//!   says to.
//!
//! | Event | Required (else an error) | Loose |
//! |---|---|---|
//! | `HAI` | — | every field; `accept_major`, `accept_events` kept only when arrays |
//! | `TOOL_LIST` | — (a `tools` array makes it an advertisement, passed on untouched) | reply items: `description`, `title`, `annotations`, `icons` |
//! | `TOOL_SCHEMA` request | `tool` (reply `INVALID_MESSAGE`, `missing tool`) | — |
//! | `TOOL_SCHEMA` reply | `tool`, `inputSchema` (or legacy `schema`) | `outputSchema`, `title`, `annotations`, `icons` |
//! | `TOOL_CALL` | — (see above) | `call_id`, `tool`, `params`, `run_id` |
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
//! and omits a `TOOL_DONE` `result` that would be `null` (docs/protocol.md §2.4, §6.6).

use std::fmt;
use std::num::NonZeroU64;

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Map, Number, Value};

use super::{
    ACCEPT_MAJOR, ErrorCode, EventType, HAIP_VERSION, Icon, Inbound, ToolAnnotations, u64_loose,
};

mod calls;
mod error;
mod handshake;
mod inbound;
mod runs;
mod session;
#[cfg(test)]
mod tests;

pub use calls::InputAction;
pub(crate) use calls::{
    ToolCall, ToolCancel, ToolDone, ToolFailure, ToolInput, ToolList, ToolListItem,
    ToolListRequest, ToolOutcome, ToolSchema, ToolSchemaRequest, ToolStatus, ToolUpdate,
    UpdateStatus,
};
pub(crate) use error::{Error, PayloadError, Problem};
pub use handshake::{Capabilities, FlowControl, Hai, LastRxSeq};
pub(crate) use inbound::InboundEvent;
pub(crate) use runs::{RunCancel, RunError, RunFinished, RunStarted};
pub(crate) use session::{FlowUpdate, PauseChannel, Ping, ReplayRequest, ResumeChannel};

/// A typed payload: how one event's payload object is read and written.
pub(crate) trait Payload: Serialize + Sized {
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

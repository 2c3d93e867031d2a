//! Keeping a session going: heartbeat (`PING`, `PONG`, docs/protocol.md §9), replay
//! (`REPLAY_REQUEST`, §11.2) and flow control (`FLOW_UPDATE`, `PAUSE_CHANNEL`,
//! `RESUME_CHANNEL`, §12).

use super::*;

/// `PING` (docs/protocol.md §9).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub(crate) struct Ping {
    /// `nonce`: a string in HAIP 1, kept as whatever JSON was sent so that the
    /// `PONG` copies it unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) nonce: Option<Value>,
}

impl Ping {
    /// A `PING` with a nonce.
    #[cfg(test)]
    pub(crate) fn new(nonce: impl Into<String>) -> Ping {
        Ping {
            nonce: Some(Value::String(nonce.into())),
        }
    }

    /// Its answer: a `PONG` with the same `nonce`, or `{}` without one.
    pub(crate) fn pong(self) -> Pong {
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

/// `PONG` (docs/protocol.md §9).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub(crate) struct Pong {
    /// `nonce`: the `PING`'s, unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) nonce: Option<Value>,
}

impl Payload for Pong {
    const EVENT: EventType = EventType::Pong;

    fn from_payload(mut payload: Map<String, Value>) -> Result<Pong, PayloadError> {
        Ok(Pong {
            nonce: payload.remove("nonce"),
        })
    }
}

/// `REPLAY_REQUEST` (docs/protocol.md §11.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct ReplayRequest {
    /// The first `seq` wanted.
    #[serde(serialize_with = "decimal")]
    pub(crate) from_seq: u64,
    /// The last `seq` wanted; `None` ⇒ the newest.
    #[serde(
        serialize_with = "opt_decimal",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) to_seq: Option<u64>,
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

/// `FLOW_UPDATE` (docs/protocol.md §12): credit granted on a channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct FlowUpdate {
    /// The channel (any name; the server ignores a `FLOW_UPDATE` without one).
    pub(crate) channel: String,
    /// `add_messages`; absent, or not an integer ≥ 1, ⇒ `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) add_messages: Option<NonZeroU64>,
    /// `add_bytes`; absent, or not an integer ≥ 1, ⇒ `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) add_bytes: Option<NonZeroU64>,
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

/// `PAUSE_CHANNEL` (docs/protocol.md §12.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PauseChannel {
    /// The channel to hold (the server ignores the envelope without one).
    pub(crate) channel: String,
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

/// `RESUME_CHANNEL` (docs/protocol.md §12.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ResumeChannel {
    /// The channel to release (the server ignores the envelope without one).
    pub(crate) channel: String,
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

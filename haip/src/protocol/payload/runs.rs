//! Runs: `RUN_STARTED`, `RUN_FINISHED`, `RUN_CANCEL`, `RUN_ERROR` (docs/protocol.md §8).

use super::*;

/// `RUN_STARTED` (docs/protocol.md §8): an open payload.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct RunStarted {
    /// The run id: the payload's, else (by [`InboundEvent::decode_with`]) the
    /// envelope's; `None` ⇒ the server makes one up.
    pub(crate) run_id: Option<String>,
    /// `thread_id`, when a string.
    pub(crate) thread_id: Option<String>,
    /// `metadata`, when an object.
    pub(crate) metadata: Option<Map<String, Value>>,
    /// Every other field, as sent.
    pub(crate) other: Map<String, Value>,
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

/// The `status` of a `RUN_FINISHED` (docs/protocol.md §5, §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) enum RunStatus {
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
    pub(crate) const fn as_str(self) -> &'static str {
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

/// `RUN_FINISHED` (docs/protocol.md §8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct RunFinished {
    /// The run id: the payload's, else (by [`InboundEvent::decode_with`]) the
    /// envelope's; neither ⇒ an error answered `MISSING_RUN_ID`.
    pub(crate) run_id: String,
    /// How the run ended; absent or not one of the three ⇒ `OK` (the server
    /// closes the run whatever it says).
    pub(crate) status: RunStatus,
    /// `summary`, when a string.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) summary: Option<String>,
}

impl RunFinished {
    pub(super) fn decode(
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
pub(super) fn run_id(
    r: &mut Reader,
    envelope_run_id: Option<&str>,
) -> Result<String, PayloadError> {
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

/// `RUN_CANCEL` (docs/protocol.md §8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct RunCancel {
    /// The run id: the payload's, else (by [`InboundEvent::decode_with`]) the
    /// envelope's; neither ⇒ an error answered `MISSING_RUN_ID`.
    pub(crate) run_id: String,
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

/// `RUN_ERROR` (docs/protocol.md §8). The server only closes the run it names, so
/// nothing here is required: a missing `code` or `message` decodes as empty.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RunError {
    /// `code`.
    pub(crate) code: ErrorCode,
    /// `message`.
    pub(crate) message: String,
    /// The run id: the payload's, else (by [`InboundEvent::decode_with`]) the envelope's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) run_id: Option<String>,
    /// `related_id`, when a string.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) related_id: Option<String>,
    /// `detail`, when an object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) detail: Option<Map<String, Value>>,
}

impl Payload for RunError {
    const EVENT: EventType = EventType::RunError;

    /// Its run id, and the rest as an `ERROR`'s (which never fails).
    fn from_payload(payload: Map<String, Value>) -> Result<RunError, PayloadError> {
        let mut r = Reader::new(EventType::RunError, payload);
        let run_id = r.opt_string("run_id");
        let Error {
            code,
            message,
            related_id,
            detail,
        } = Error::from_payload(r.map)?;
        Ok(RunError {
            code,
            message,
            run_id,
            related_id,
            detail,
        })
    }
}

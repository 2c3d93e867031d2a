//! What can go wrong with a payload: [`PayloadError`] when one cannot be
//! used, and the `ERROR` event (docs/protocol.md §14).

use super::*;

/// A payload field that could not be used: which event, which field, what was
/// wrong with it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PayloadError {
    /// The event whose payload it was.
    pub(crate) event: EventType,
    /// The field, as a path inside the payload: `tool`, `result.code`, `tools[2].name`.
    pub(crate) field: String,
    /// What was wrong with it.
    pub(crate) problem: Problem,
    /// The envelope `id`, when decoded by [`InboundEvent::decode_with`] from an
    /// envelope that had one (the `related_id` of a reply).
    pub(crate) related_id: Option<String>,
    /// The call the payload is about, when it named one (`TOOL_UPDATE`,
    /// `TOOL_DONE`): whoever waits for that call can be told.
    pub(crate) call_id: Option<String>,
}

/// What was wrong with a payload field.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Problem {
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
    pub(super) fn wrong_type(expected: &'static str, found: &Value) -> Problem {
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
    pub(super) fn new(
        event: EventType,
        field: impl Into<String>,
        problem: Problem,
    ) -> PayloadError {
        PayloadError {
            event,
            field: field.into(),
            problem,
            related_id: None,
            call_id: None,
        }
    }

    pub(super) fn about_call(mut self, call_id: &str) -> PayloadError {
        self.call_id = Some(call_id.to_owned());
        self
    }

    /// The `ERROR` a server answers this inbound payload with (docs/protocol.md §6.3,
    /// §8, §11.2, §14.2), `related_id` included; `None` where docs/protocol.md says
    /// such an envelope is ignored silently (a `TOOL_CANCEL` without a string
    /// `call_id`, a `FLOW_UPDATE` or `PAUSE_CHANNEL` without a `channel`) or
    /// the payload is not one a server receives.
    pub(crate) fn reply(&self) -> Option<Error> {
        let invalid = |reason: String| {
            let mut detail = Map::new();
            detail.insert("reason".into(), reason.into());
            (
                ErrorCode::INVALID_MESSAGE,
                "Invalid message format",
                Some(detail),
            )
        };
        let (code, message, detail) = match (self.event, self.field.as_str()) {
            (EventType::ToolSchema, "tool") => invalid("missing tool".to_owned()),
            (EventType::ReplayRequest, field @ ("from_seq" | "to_seq"))
            | (EventType::ToolInput, field @ ("call_id" | "request_id" | "action")) => {
                invalid(format!("invalid {field}"))
            }
            (EventType::RunFinished | EventType::RunCancel, "run_id") => {
                (ErrorCode::MISSING_RUN_ID, "Run ID is required", None)
            }
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
pub(super) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `ERROR` (docs/protocol.md §14).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Error {
    /// `code`: what clients key on.
    pub(crate) code: ErrorCode,
    /// `message`: fixed, informative text.
    pub(crate) message: String,
    /// `related_id`: the offending envelope's `id`, as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) related_id: Option<String>,
    /// `detail`, when an object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) detail: Option<Map<String, Value>>,
}

impl Error {
    /// An `ERROR` with a code and a message only.
    #[cfg(test)]
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
            related_id: None,
            detail: None,
        }
    }
}

impl From<crate::protocol::DecodeError> for Error {
    /// The `ERROR` an envelope that failed decoding earns.
    fn from(err: crate::protocol::DecodeError) -> Error {
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

    /// Never fails: an `ERROR` is never answered (docs/protocol.md §5, no error
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

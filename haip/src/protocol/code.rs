use std::borrow::Cow;
use std::fmt;

/// An error code, as carried in `ERROR` payloads and in `TOOL_DONE` error results.
///
/// The codes the server itself sends are associated constants; a tool may choose
/// any other code (clients must tolerate unknown codes, docs/protocol.md §14.2).
///
/// ```
/// use haip::protocol::ErrorCode;
/// assert_eq!(ErrorCode::INVALID_PARAMS.as_str(), "INVALID_PARAMS");
/// assert_eq!(ErrorCode::new("QUOTA_EXCEEDED").as_str(), "QUOTA_EXCEEDED");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ErrorCode(Cow<'static, str>);

macro_rules! codes {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        impl ErrorCode {
            $($(#[$doc])* pub const $name: ErrorCode = ErrorCode(Cow::Borrowed(stringify!($name)));)*
        }
    };
}

codes! {
    /// Malformed envelope, duplicate call id, or a request missing a field.
    INVALID_MESSAGE,
    /// Unknown event type, or unknown fields under `crit`.
    UNSUPPORTED_TYPE,
    /// The client's `HAI` shares no major version with the server.
    VERSION_INCOMPATIBLE,
    /// `TOOL_CALL` / `TOOL_SCHEMA` for a tool that is not registered.
    TOOL_NOT_FOUND,
    /// `RUN_FINISHED` / `RUN_CANCEL` without a run id.
    MISSING_RUN_ID,
    /// A run that is not active in this session.
    RUN_NOT_FOUND,
    /// A `TOOL_INPUT` for a question that is not open (docs/protocol.md §6.11).
    REQUEST_NOT_FOUND,
    /// Too many concurrent runs.
    RUN_LIMIT_EXCEEDED,
    /// A replay range that is no longer kept.
    REPLAY_TOO_OLD,
    /// A session that cannot be resumed.
    RESUME_FAILED,
    /// Strict flow control: not enough credit.
    FLOW_CONTROL_VIOLATION,
    /// A binary frame that does not match its envelope.
    BINARY_FRAME_ERROR,
    /// A message over the size limit.
    MESSAGE_TOO_LARGE,
    /// Authentication on, no token presented.
    MISSING_TOKEN,
    /// A token that failed verification.
    INVALID_TOKEN,
    /// A token past its expiry.
    TOKEN_EXPIRED,
    /// Tool parameters that violate the tool's input schema.
    INVALID_PARAMS,
    /// The tool returned an error.
    TOOL_EXECUTION_ERROR,
    /// The tool ran past its timeout.
    TIMEOUT,
    /// The tool panicked or its value could not be serialised.
    INTERNAL_ERROR,
    /// The session's call queue is full.
    RATE_LIMITED,
    /// The encoded `TOOL_DONE` would exceed `max_outbound_message_bytes`.
    RESULT_TOO_LARGE,
    /// The caller's token lacks a scope the tool requires (docs/protocol.md §17.1);
    /// `details {required, missing}`.
    FORBIDDEN,
}

impl ErrorCode {
    /// A code of the application's own choosing.
    pub fn new(code: impl Into<Cow<'static, str>>) -> ErrorCode {
        ErrorCode(code.into())
    }

    /// The code as sent on the wire.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The code as a label of bounded cardinality: a code compiled into the
    /// program (every constant here, and a tool's literal) as it is, one
    /// made at run time as `OTHER`.
    pub(crate) fn label(&self) -> &'static str {
        match &self.0 {
            Cow::Borrowed(code) => code,
            Cow::Owned(_) => "OTHER",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for ErrorCode {
    /// As the plain string it is on the wire.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl From<&'static str> for ErrorCode {
    fn from(code: &'static str) -> Self {
        ErrorCode(Cow::Borrowed(code))
    }
}

impl From<String> for ErrorCode {
    fn from(code: String) -> Self {
        ErrorCode(Cow::Owned(code))
    }
}

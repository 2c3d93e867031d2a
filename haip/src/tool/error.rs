use std::fmt;

use serde_json::Value;

use crate::protocol::ErrorCode;
use crate::protocol::payload::ToolFailure;
use crate::schema::Violations;

/// The error a tool returns: a code, a human-readable message and optional details.
///
/// It becomes a `TOOL_DONE` with `status: "ERROR"` and
/// `result: {"error": <message>, "code": <code>, "details": <details>}`.
/// Any `std::error::Error` converts into it with `?` (code `TOOL_EXECUTION_ERROR`).
///
/// ```
/// use haip::ToolError;
/// use serde_json::json;
///
/// let e = ToolError::execution("Division by zero");
/// assert_eq!(e.code().as_str(), "TOOL_EXECUTION_ERROR");
///
/// let e = ToolError::new("QUOTA_EXCEEDED", "Daily quota used up").with_details(json!({"limit": 100}));
/// assert_eq!(e.details(), Some(&json!({"limit": 100})));
///
/// fn parse(s: &str) -> Result<i64, ToolError> {
///     Ok(s.parse::<i64>()?) // ParseIntError -> TOOL_EXECUTION_ERROR
/// }
/// assert!(parse("x").is_err());
/// ```
pub struct ToolError {
    code: ErrorCode,
    message: String,
    details: Option<Value>,
    cancelled: bool,
    /// Set when the params failed the tool's input schema after the layers
    /// ([`crate::layer`]) saw them: each protocol reports such a call as it
    /// reports invalid params.
    violations: Option<Box<Violations>>,
}

impl ToolError {
    /// An error with a code of the tool's choosing.
    pub fn new(code: impl Into<ErrorCode>, message: impl Into<String>) -> ToolError {
        ToolError {
            code: code.into(),
            message: message.into(),
            details: None,
            cancelled: false,
            violations: None,
        }
    }

    /// A `TOOL_EXECUTION_ERROR`: the tool ran and failed.
    pub fn execution(message: impl Into<String>) -> ToolError {
        ToolError::new(ErrorCode::TOOL_EXECUTION_ERROR, message)
    }

    /// An `INVALID_PARAMS` error from the tool's own checks.
    pub fn invalid_params(message: impl Into<String>) -> ToolError {
        ToolError::new(ErrorCode::INVALID_PARAMS, message)
    }

    /// The tool stopped because it was cancelled; the call ends with
    /// `TOOL_DONE` `status: "CANCELLED"` rather than an error.
    pub fn cancelled() -> ToolError {
        ToolError {
            cancelled: true,
            ..ToolError::new("CANCELLED", "cancelled")
        }
    }

    /// Attaches tool-supplied JSON details (sent as `result.details`).
    pub fn with_details(mut self, details: Value) -> ToolError {
        self.details = Some(details);
        self
    }

    /// The error code.
    pub fn code(&self) -> &ErrorCode {
        &self.code
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The details, if any.
    pub fn details(&self) -> Option<&Value> {
        self.details.as_ref()
    }

    /// Whether this reports a cancellation rather than a failure.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }

    /// An `INVALID_PARAMS` error for params that failed the input schema of
    /// `tool`, listing `found` in its details as a rejected `TOOL_CALL` does.
    pub(crate) fn violated(tool: &str, found: Violations) -> ToolError {
        ToolError {
            details: Some(found.details()),
            violations: Some(Box::new(found)),
            ..ToolError::new(
                ErrorCode::INVALID_PARAMS,
                format!("Invalid params for tool {tool}"),
            )
        }
    }

    /// The schema violations of params rejected after the layers.
    pub(crate) fn violations(&self) -> Option<&Violations> {
        self.violations.as_deref()
    }

    /// The `TOOL_DONE` error result, its parts moved rather than copied.
    pub(crate) fn into_failure(self) -> ToolFailure {
        ToolFailure {
            details: self.details,
            ..ToolFailure::new(self.code, self.message)
        }
    }
}

impl fmt::Debug for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolError")
            .field("code", &self.code.as_str())
            .field("message", &self.message)
            .field("details", &self.details)
            .field("cancelled", &self.cancelled)
            .finish()
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

// `ToolError` deliberately does not implement `std::error::Error`, so that this
// blanket conversion does not overlap with `From<T> for T` (the same trade-off as
// `anyhow::Error`): `?` works on any error inside a tool.
impl<E: std::error::Error + Send + Sync + 'static> From<E> for ToolError {
    fn from(error: E) -> ToolError {
        ToolError::execution(error.to_string())
    }
}

//! Why a test's call or wait did not give what it waited for.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::client::{ClientError, Outcome};

/// Why a call made through [`TestServer`](super::TestServer) did not give
/// what the test waited for: the tool's error (with its code), a
/// cancellation, a wait past the test's limit, or the client's error.
///
/// ```
/// use haip::testing::TestError;
///
/// let err = TestError::Failed {
///     code: "INVALID_PARAMS".into(),
///     message: "Invalid params".into(),
///     details: None,
/// };
/// assert_eq!(err.code(), Some("INVALID_PARAMS"));
/// assert_eq!(err.to_string(), "the call failed with INVALID_PARAMS: Invalid params");
///
/// // Its violations are part of the message, so a failed `?` shows them.
/// let err = TestError::Failed {
///     code: "INVALID_PARAMS".into(),
///     message: "Invalid params".into(),
///     details: Some(serde_json::json!([
///         {"path": "/a", "message": "\"one\" is a string; expected a number"},
///         {"path": "/b", "message": "\"b\" is a required property"},
///     ])),
/// };
/// assert_eq!(
///     err.to_string(),
///     "the call failed with INVALID_PARAMS: Invalid params \
///      (/a: \"one\" is a string; expected a number; /b: \"b\" is a required property)"
/// );
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestError {
    /// The call ended with `TOOL_DONE` `ERROR`: the tool returned an error,
    /// its params were invalid, it panicked or timed out.
    #[error("the call failed with {code}: {message}{}", details_text(.details.as_ref()))]
    Failed {
        /// The error code (`INVALID_PARAMS`, `TOOL_EXECUTION_ERROR`,
        /// `TIMEOUT`, a tool's own code, ...).
        code: String,
        /// The human-readable message.
        message: String,
        /// Details (for `INVALID_PARAMS`: an array of every violation,
        /// `{"path", "message"}`).
        details: Option<Value>,
    },
    /// The call ended with `TOOL_DONE` `CANCELLED`.
    #[error("the call was cancelled{}", .reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    Cancelled {
        /// The reason, when one was given.
        reason: Option<String>,
    },
    /// The call ended before what the test waited for came (a progress
    /// report, a log line, a question).
    #[error("the call ended {outcome} before {what} came")]
    Ended {
        /// What the test waited for.
        what: String,
        /// How the call ended.
        outcome: Box<Outcome>,
    },
    /// What the test waited for did not come within the test's limit
    /// ([`TestServer::timeout`](super::TestServer::timeout)).
    #[error("no {what} within {} ms{}", .after.as_millis(), .waiting.as_deref().map(|w| format!(" ({w})")).unwrap_or_default())]
    Timeout {
        /// What the test waited for.
        what: String,
        /// How long it waited.
        after: Duration,
        /// What the call was waiting for meanwhile, when it was waiting
        /// for the test (an unanswered question).
        waiting: Option<String>,
    },
    /// The server broke a rule of the protocol on the connection: a second
    /// `TOOL_DONE` for a call, a gap in `seq`, a call left without its
    /// `TOOL_DONE` at shutdown. Each broken rule is one line.
    #[error("the server broke the protocol: {}", .0.join("; "))]
    Protocol(Vec<String>),
    /// The call did something other than what the test said it would:
    /// [`TestCall::confirm`](super::TestCall::confirm) on a question that
    /// is not a confirmation.
    #[error("{0}")]
    Unexpected(String),
    /// The schemas the server advertises are not those of the snapshot
    /// file ([`TestServer::check_schemas_snapshot`](super::TestServer::check_schemas_snapshot)),
    /// or there is no snapshot yet. The message says how to accept them.
    #[error("{}", snapshot_text(.path, .diff.as_deref()))]
    Snapshot {
        /// The snapshot file.
        path: PathBuf,
        /// What changed, as lines removed (`-`) and added (`+`); `None`
        /// when there is no snapshot file.
        diff: Option<String>,
    },
    /// The client's own error: the server refused a request with an
    /// `ERROR` ([`ClientError::Server`], such as `TOOL_NOT_FOUND`), an
    /// answer did not fit its question ([`ClientError::InvalidAnswer`]), a
    /// typed result did not deserialise, the connection closed.
    #[error(transparent)]
    Client(#[from] ClientError),
}

impl TestError {
    /// The protocol's error code, when there is one: the `TOOL_DONE`'s
    /// (`INVALID_PARAMS`, `TIMEOUT`, ...), or that of the server's `ERROR`
    /// (`TOOL_NOT_FOUND`; `INVALID_PARAMS` for an answer that does not fit
    /// its question; `REQUEST_NOT_FOUND` for one that is not open).
    pub fn code(&self) -> Option<&str> {
        match self {
            TestError::Failed { code, .. } => Some(code),
            TestError::Client(ClientError::Server { code, .. }) => Some(code),
            TestError::Client(ClientError::InvalidAnswer { .. }) => Some("INVALID_PARAMS"),
            TestError::Client(ClientError::QuestionNotFound { .. }) => Some("REQUEST_NOT_FOUND"),
            _ => None,
        }
    }

    /// The `TOOL_DONE`'s details, when the call failed with some (for
    /// `INVALID_PARAMS`, `[{"path": "/a", "message": ...}, ...]`).
    pub fn details(&self) -> Option<&Value> {
        match self {
            TestError::Failed { details, .. } => details.as_ref(),
            _ => None,
        }
    }

    /// Whether the call ended cancelled.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, TestError::Cancelled { .. })
    }

    /// Whether a wait went past the test's limit.
    pub fn is_timeout(&self) -> bool {
        matches!(self, TestError::Timeout { .. })
    }

    /// The error a call's end is, when it did not succeed.
    pub(super) fn from_outcome(outcome: Outcome) -> Result<Option<Value>, TestError> {
        match outcome {
            Outcome::Ok(result) => Ok(result),
            Outcome::Error {
                code,
                message,
                details,
            } => Err(TestError::Failed {
                code,
                message,
                details,
            }),
            Outcome::Cancelled(reason) => Err(TestError::Cancelled { reason }),
        }
    }
}

/// The longest details a [`TestError::Failed`] shows when they are not a
/// list of violations.
const MAX_DETAILS_SHOWN: usize = 300;

/// ` (/a: ...; /b: ...)` for `INVALID_PARAMS` violations, ` (details: ...)`
/// for other details, nothing without.
fn details_text(details: Option<&Value>) -> String {
    let Some(details) = details else {
        return String::new();
    };
    let violations: Option<Vec<String>> = details.as_array().map(|items| {
        items
            .iter()
            .map_while(|item| {
                let path = item.get("path")?.as_str()?;
                let message = item.get("message")?.as_str()?;
                let path = if path.is_empty() { "(params)" } else { path };
                Some(format!("{path}: {message}"))
            })
            .collect()
    });
    match violations {
        Some(list) if !list.is_empty() && list.len() == details.as_array().map_or(0, Vec::len) => {
            format!(" ({})", list.join("; "))
        }
        _ => {
            let mut text = details.to_string();
            if text.len() > MAX_DETAILS_SHOWN {
                let mut end = MAX_DETAILS_SHOWN;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                text.push_str("...");
            }
            format!(" (details: {text})")
        }
    }
}

/// What a [`TestError::Snapshot`] says.
fn snapshot_text(path: &Path, diff: Option<&str>) -> String {
    let accept = "if that is intended, accept them by running the test again with \
                  HAIP_UPDATE_SNAPSHOTS=1";
    match diff {
        None => format!(
            "no schema snapshot at {}: run the test with HAIP_UPDATE_SNAPSHOTS=1 to write it",
            path.display()
        ),
        Some(diff) => format!(
            "the advertised schemas differ from the snapshot {} ({accept}):\n{diff}",
            path.display()
        ),
    }
}

//! [`MaskErrors`]: internal error text kept in the log, not sent.

use serde_json::{Value, json};

use super::{Call, Layer, Next};
use crate::protocol::ErrorCode;
use crate::tool::ToolError;

/// Replaces the message and details of internal errors with a reference id,
/// and logs the original under that id: a client learns that the call
/// failed and what to quote, not a database's error text.
///
/// Masked by default: `TOOL_EXECUTION_ERROR` (what `?` on any error in a
/// tool gives) and `INTERNAL_ERROR`. The code stays; the message becomes
/// `Internal error in tool {name} (reference {id})` and the details
/// `{"reference": id}`. The log line (target `haip::masked`, level `error`)
/// has the tool, the call id, the code, the message and the details.
/// Errors with other codes (a tool's own codes, `INVALID_PARAMS`,
/// `RATE_LIMITED`) pass as they are. A panic's text is never sent anyway
/// (unless `debug_errors` is on).
///
/// ```
/// use haip::layer::MaskErrors;
///
/// // Also mask the tool's own `UPSTREAM_FAILED` errors.
/// let mask = MaskErrors::new().code("UPSTREAM_FAILED");
/// let builder = haip::Server::builder().layer(mask);
/// # drop(builder);
/// ```
#[derive(Debug, Clone)]
pub struct MaskErrors {
    codes: Vec<ErrorCode>,
}

impl MaskErrors {
    /// Masks `TOOL_EXECUTION_ERROR` and `INTERNAL_ERROR`.
    pub fn new() -> MaskErrors {
        MaskErrors {
            codes: vec![ErrorCode::TOOL_EXECUTION_ERROR, ErrorCode::INTERNAL_ERROR],
        }
    }

    /// Masks errors with `code` too.
    pub fn code(mut self, code: impl Into<ErrorCode>) -> MaskErrors {
        self.codes.push(code.into());
        self
    }

    /// Masks only the codes given with [`code`](Self::code).
    pub fn only() -> MaskErrors {
        MaskErrors { codes: Vec::new() }
    }
}

impl Default for MaskErrors {
    fn default() -> MaskErrors {
        MaskErrors::new()
    }
}

impl Layer for MaskErrors {
    async fn call(&self, call: Call, next: Next) -> Result<Value, ToolError> {
        let tool = call.name().to_owned();
        let call_id = call.context().call_id().to_owned();
        let error = match next.run(call).await {
            Ok(value) => return Ok(value),
            Err(error) if error.is_cancelled() || !self.codes.contains(error.code()) => {
                return Err(error);
            }
            Err(error) => error,
        };
        let reference = reference();
        tracing::error!(
            target: "haip::masked",
            reference,
            tool,
            call_id,
            code = %error.code(),
            message = error.message(),
            details = ?error.details(),
            "tool error masked"
        );
        Err(ToolError::new(
            error.code().clone(),
            format!("Internal error in tool {tool} (reference {reference})"),
        )
        .with_details(json!({ "reference": reference })))
    }
}

/// A fresh reference: 16 hex digits, random.
fn reference() -> String {
    let mut id = uuid::Uuid::new_v4().simple().to_string();
    id.truncate(16);
    id
}

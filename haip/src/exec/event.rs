//! What a running call tells its session, and how its task ended: the types
//! a [`Context`](crate::Context) sends progress with, kept apart from the
//! machinery that runs calls so that the context and the runner do not name
//! each other.

use serde_json::Value;

use crate::schema::Violations;
use crate::tool::error::ToolError;

/// Identifies one accepted call inside a session (call ids may be reused once a
/// call is done, these never are).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct CallKey(pub(crate) u64);

/// What a running call tells its session.
#[derive(Debug)]
pub(crate) enum CallEvent {
    /// A progress report is waiting in the call's slot.
    Progress(CallKey),
    /// The timeout elapsed: the call's `TOOL_DONE TIMEOUT` is due now; the task
    /// is being stopped and will still report `Finished`.
    TimedOut(CallKey),
    /// The task ended and released its concurrency slot. (Boxed: every
    /// session's event channel holds a block of these, idle or not.)
    Finished(CallKey, Box<Outcome>),
    /// Large params were validated off the session task ([`validate`](super::validate)).
    Validated(CallKey, Box<Validation>),
}

/// The verdict on params validated off the session task.
#[derive(Debug)]
pub(crate) enum Validation {
    /// Valid: the params, handed back.
    Valid(Value),
    /// Invalid.
    Invalid(Violations),
    /// The validator panicked.
    Failed,
}

/// How a call's task ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The handler returned.
    Returned(Result<Value, ToolError>),
    /// The handler returned a value, already checked and encoded ([`Render`](super::Render)).
    Rendered(Box<Rendered>),
    /// The handler panicked; the panic text (never sent unless `debug_errors`).
    Panicked(String),
    /// The call was cancelled (or timed out) and has stopped, by itself or aborted.
    Stopped,
}

/// A returned value, rendered.
#[derive(Debug)]
pub(crate) struct Rendered {
    /// The value's JSON text (`None` for `null`), or its length when that is
    /// over [`Render::max_bytes`](super::Render::max_bytes).
    pub(crate) json: Result<Option<Vec<u8>>, usize>,
    /// How it violates the tool's output schema.
    pub(crate) violations: Violations,
}

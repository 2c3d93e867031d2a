//! Running one call: the handler in its own task, with timeout, panic capture
//! and cancellation (grace period, then abort). Every spawned call reports
//! exactly one [`CallEvent::Finished`].

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use std::sync::Arc;

use futures_util::FutureExt;
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::Context;
use crate::schema::Violations;
use crate::tool::{Tool, ToolError};

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
    /// Large params were validated off the session task ([`validate`]).
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

/// Validates large params on the blocking pool, at most as many at once
/// server-wide as `limiter` has permits, so one client's huge params cannot
/// starve other sessions (HAIP.md §18.1). Reports [`CallEvent::Validated`]
/// unless the call is cancelled first.
pub(crate) fn validate(
    key: CallKey,
    tool: Tool,
    params: Value,
    max_violations: usize,
    limiter: Arc<Semaphore>,
    cancel: CancellationToken,
    events: mpsc::UnboundedSender<CallEvent>,
) {
    tokio::spawn(async move {
        let permit = tokio::select! {
            permit = limiter.acquire_owned() => permit,
            () = cancel.cancelled() => return,
        };
        let Ok(permit) = permit else { return };
        let checked = tokio::task::spawn_blocking(move || {
            let found = tool.check_params(&params, max_violations);
            if found.is_empty() {
                Validation::Valid(params)
            } else {
                Validation::Invalid(found)
            }
        })
        .await;
        drop(permit);
        let verdict = checked.unwrap_or(Validation::Failed);
        // The session may be gone (connection closed); then nobody is waiting.
        let _ = events.send(CallEvent::Validated(key, Box::new(verdict)));
    });
}

/// How a call's task ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The handler returned.
    Returned(Result<Value, ToolError>),
    /// The handler panicked; the panic text (never sent unless `debug_errors`).
    Panicked(String),
    /// The call was cancelled (or timed out) and has stopped, by itself or aborted.
    Stopped,
}

/// The time limits of one call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The tool's timeout, if any.
    pub(crate) timeout: Option<Duration>,
    /// How long a cancelled or timed-out tool may take to stop before it is aborted.
    pub(crate) grace: Duration,
}

/// Spawns the call's task.
pub(crate) fn spawn(
    key: CallKey,
    tool: Tool,
    params: Value,
    ctx: Context,
    cancel: CancellationToken,
    limits: Limits,
    events: mpsc::UnboundedSender<CallEvent>,
) {
    tokio::spawn(async move {
        let outcome = run(key, tool, params, ctx, cancel, limits, &events).await;
        // The session may be gone (connection closed); then nobody is waiting.
        let _ = events.send(CallEvent::Finished(key, Box::new(outcome)));
    });
}

async fn run(
    key: CallKey,
    tool: Tool,
    params: Value,
    ctx: Context,
    cancel: CancellationToken,
    Limits { timeout, grace }: Limits,
    events: &mpsc::UnboundedSender<CallEvent>,
) -> Outcome {
    let mut call = AssertUnwindSafe(tool.call(params, ctx)).catch_unwind();
    let deadline = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        result = &mut call => return finished(result),
        () = cancel.cancelled() => {}
        () = deadline => {
            let _ = events.send(CallEvent::TimedOut(key));
            cancel.cancel();
        }
    }
    // Cancelled or timed out: give the tool `grace` to stop, then drop (abort) it.
    // Whatever it returns now is discarded.
    let _ = tokio::time::timeout(grace, &mut call).await;
    Outcome::Stopped
}

fn finished(result: Result<Result<Value, ToolError>, Box<dyn Any + Send>>) -> Outcome {
    match result {
        Ok(returned) => Outcome::Returned(returned),
        Err(panic) => Outcome::Panicked(panic_text(panic.as_ref())),
    }
}

/// The `INTERNAL_ERROR` message for a tool that panicked: the panic text only
/// with `debug_errors` on (it may hold details the client should not see).
pub(crate) fn panic_message(tool: &str, text: &str, debug_errors: bool) -> String {
    tracing::error!(tool, panic = %text, "tool panicked");
    if debug_errors {
        format!("Tool {tool} panicked: {text}")
    } else {
        format!("Internal error in tool {tool}")
    }
}

fn panic_text(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

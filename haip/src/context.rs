//! [`Context`]: what a running tool knows about its call.

use std::sync::{Arc, Mutex};

use serde_json::{Number, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::exec::{CallEvent, CallKey};
use crate::tool::{State, StateMap};

/// The handle a tool gets for one call: ids, progress reporting and cancellation.
///
/// Cheap to clone; clones refer to the same call. Progress reporting never
/// blocks: under back-pressure a newer report replaces an older unsent one of
/// the same call (latest wins).
///
/// ```
/// use haip::{Context, ToolError};
/// use std::time::Duration;
///
/// async fn count_to_five(ctx: Context) -> Result<u32, ToolError> {
///     for step in 1..=5u32 {
///         ctx.progress(f64::from(step) * 20.0);
///         tokio::select! {
///             _ = ctx.cancelled() => return Err(ToolError::cancelled()),
///             _ = tokio::time::sleep(Duration::from_millis(10)) => {}
///         }
///     }
///     Ok(5)
/// }
/// ```
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

struct Inner {
    call_id: String,
    session_id: Arc<str>,
    cancel: CancellationToken,
    progress: Option<ProgressSink>,
    state: Option<Arc<StateMap>>,
    subject: Option<Arc<str>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("call_id", &self.inner.call_id)
            .field("session_id", &self.inner.session_id)
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl Context {
    pub(crate) fn new(
        call_id: String,
        session_id: Arc<str>,
        cancel: CancellationToken,
        progress: Option<ProgressSink>,
        state: Option<Arc<StateMap>>,
        subject: Option<Arc<str>>,
    ) -> Context {
        Context {
            inner: Arc::new(Inner {
                call_id,
                session_id,
                cancel,
                progress,
                state,
                subject,
            }),
        }
    }

    /// A context attached to no session, for calling a tool function directly
    /// (in a unit test, say). Progress reports go nowhere; it is cancelled only
    /// through the returned token.
    ///
    /// ```
    /// let (ctx, cancel) = haip::Context::detached("test-call");
    /// ctx.progress(50.0); // discarded
    /// cancel.cancel();
    /// assert!(ctx.is_cancelled());
    /// ```
    pub fn detached(call_id: impl Into<String>) -> (Context, CancellationHandle) {
        let cancel = CancellationToken::new();
        let ctx = Context::new(
            call_id.into(),
            Arc::from(""),
            cancel.clone(),
            None,
            None,
            None,
        );
        (ctx, CancellationHandle(cancel))
    }

    /// The call's id (the `call_id` of its `TOOL_CALL`).
    pub fn call_id(&self) -> &str {
        &self.inner.call_id
    }

    /// The id of the session that made the call.
    pub fn session_id(&self) -> &str {
        &self.inner.session_id
    }

    /// The authenticated subject of the session that made the call (the
    /// token's `sub`, or what a custom authenticator returned); `None` when
    /// authentication is off.
    pub fn subject(&self) -> Option<&str> {
        self.inner.subject.as_deref()
    }

    /// The application state of type `T` registered with
    /// [`ServerBuilder::state`](crate::ServerBuilder::state), if any.
    pub fn state<T: Send + Sync + 'static>(&self) -> Option<State<T>> {
        self.inner.state.as_ref()?.get::<T>()
    }

    /// Reports progress in percent (clamped to 0–100; NaN is ignored).
    pub fn progress(&self, percent: f64) {
        self.report(percent, None);
    }

    /// Reports progress with a partial result, sent as `partial` in the
    /// `TOOL_UPDATE`. A value that cannot be serialised is dropped (the
    /// percentage is still reported).
    pub fn progress_with(&self, percent: f64, partial: impl serde::Serialize) {
        let partial = match serde_json::to_value(partial) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(call_id = %self.inner.call_id, error = %e, "progress partial could not be serialised");
                None
            }
        };
        self.report(percent, partial);
    }

    /// Whether the call has been cancelled (by the client, a run cancel, a
    /// timeout or server shutdown).
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Completes when the call is cancelled. Use it in `tokio::select!` to stop promptly.
    pub async fn cancelled(&self) {
        self.inner.cancel.cancelled().await
    }

    fn report(&self, percent: f64, partial: Option<Value>) {
        if percent.is_nan() {
            return;
        }
        self.report_progress(Some(percent), partial);
    }

    /// Reports progress whose percentage may be unknown: `TOOL_UPDATE` then
    /// carries no `progress` (HAIP.md §6.5 makes it optional), only what is
    /// `partial`.
    pub(crate) fn report_progress(&self, percent: Option<f64>, partial: Option<Value>) {
        if let Some(sink) = &self.inner.progress {
            sink.report(Progress {
                percent: percent.filter(|p| !p.is_nan()).map(percent_number),
                partial,
            });
        }
    }
}

/// Cancels a [`Context`] made with [`Context::detached`].
#[derive(Debug, Clone)]
pub struct CancellationHandle(CancellationToken);

impl CancellationHandle {
    /// Cancels the context (and its clones).
    pub fn cancel(&self) {
        self.0.cancel();
    }
}

/// Clamped to 0..=100; whole numbers stay JSON integers (`40`, not `40.0`).
fn percent_number(percent: f64) -> Number {
    let p = percent.clamp(0.0, 100.0);
    if p.fract() == 0.0 {
        Number::from(p as u64)
    } else {
        Number::from_f64(p).unwrap_or_else(|| Number::from(0))
    }
}

/// One progress report.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Progress {
    /// `None` when the tool cannot say how far along it is.
    pub(crate) percent: Option<Number>,
    pub(crate) partial: Option<Value>,
}

/// The latest unsent progress report of one call.
///
/// The session is notified only when the slot goes from empty to full, so a
/// call has at most one notification in flight however fast it reports: the
/// notification channel is bounded by the number of active calls.
#[derive(Default)]
pub(crate) struct ProgressSlot {
    state: Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    latest: Option<Progress>,
    closed: bool,
}

impl ProgressSlot {
    /// Takes the latest report, if any.
    pub(crate) fn take(&self) -> Option<Progress> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .latest
            .take()
    }

    /// Discards the pending report and every later one (after `CANCELLING` or `TOOL_DONE`).
    pub(crate) fn close(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.closed = true;
        state.latest = None;
    }
}

pub(crate) struct ProgressSink {
    pub(crate) key: CallKey,
    pub(crate) slot: Arc<ProgressSlot>,
    pub(crate) events: mpsc::UnboundedSender<CallEvent>,
}

impl ProgressSink {
    fn report(&self, progress: Progress) {
        let was_empty = {
            let mut state = self.slot.state.lock().unwrap_or_else(|e| e.into_inner());
            if state.closed {
                return;
            }
            state.latest.replace(progress).is_none()
        };
        if was_empty {
            // The session may be gone (connection closed): nothing to report to.
            let _ = self.events.send(CallEvent::Progress(self.key));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_is_clamped_and_integral_values_stay_integers() {
        assert_eq!(Value::Number(percent_number(40.0)).to_string(), "40");
        assert_eq!(Value::Number(percent_number(12.5)).to_string(), "12.5");
        assert_eq!(Value::Number(percent_number(250.0)).to_string(), "100");
        assert_eq!(Value::Number(percent_number(-3.0)).to_string(), "0");
    }

    #[test]
    fn reports_coalesce_and_notify_once_until_taken() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let slot = Arc::new(ProgressSlot::default());
        let sink = ProgressSink {
            key: CallKey(7),
            slot: slot.clone(),
            events: tx,
        };
        let ctx = Context::new(
            "c".into(),
            Arc::from("s"),
            CancellationToken::new(),
            Some(sink),
            None,
            None,
        );
        ctx.progress(10.0);
        ctx.progress(20.0);
        ctx.progress_with(30.0, "partial");
        ctx.progress(f64::NAN);
        assert!(matches!(rx.try_recv(), Ok(CallEvent::Progress(CallKey(7)))));
        assert!(rx.try_recv().is_err(), "one notification per fill");
        let p = slot.take().unwrap();
        assert_eq!(p.percent, Some(Number::from(30)));
        assert_eq!(p.partial, Some(Value::from("partial")));
        ctx.progress(40.0);
        assert!(rx.try_recv().is_ok());
        slot.close();
        ctx.progress(50.0);
        assert!(slot.take().is_none());
    }
}

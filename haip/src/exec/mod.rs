//! Running one call: the handler in its own task, with timeout, panic capture
//! and cancellation (grace period, then abort). Every spawned call reports
//! exactly one [`CallEvent::Finished`].

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use futures_util::FutureExt;
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::Context;
use crate::context::{CallSlot, Parts, Peer, ProgressSink};
use crate::protocol::payload::{ToolFailure, ToolOutcome};
use crate::protocol::{ErrorCode, to_json_within};
use crate::schema::Violations;
use crate::stats::{Ended, Stats, Throttle};
use crate::tool::{StateMap, Tool, ToolError};

pub(crate) mod admit;
pub(crate) mod event;

pub(crate) use event::{CallEvent, CallKey, Outcome, Rendered, Validation};

/// The one place tool tasks are spawned, for HAIP sessions and the MCP export
/// alike: every call task (and every off-session validation) runs on the
/// server's [`TaskTracker`], so shutdown waits for them to stop. Cheap to
/// clone.
#[derive(Clone)]
pub(crate) struct CallRunner {
    tasks: TaskTracker,
    /// Validations of large params at once, server-wide (docs/protocol.md §18.1).
    validators: Arc<Semaphore>,
    /// The layers around every call ([`crate::layer`]); `None` when there
    /// are none, so that a server without layers runs its tools directly.
    around: Option<Arc<dyn Around>>,
}

/// What runs a call's handler when the server has layers
/// ([`crate::layer`]'s stack): it may refuse the call, rewrite its params or
/// its result, and checks params the session left unchecked.
pub(crate) trait Around: Send + Sync + 'static {
    /// Runs `tool` with `params`, checking them first when `unchecked`.
    fn call(
        self: Arc<Self>,
        tool: Tool,
        params: Value,
        ctx: Context,
        unchecked: Option<Unchecked>,
    ) -> crate::tool::ToolFuture;
}

/// A call polled once by [`CallRunner::begin`].
pub(crate) enum Begun {
    /// It finished there.
    Done(CallKey, Box<Outcome>),
    /// It goes on: [`CallRunner::go_on`] gives it its task.
    Going(GoingCall),
}

/// A call that did not finish on its first poll.
pub(crate) struct GoingCall {
    key: CallKey,
    call: Going,
}

impl GoingCall {
    /// The call's key.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn key(&self) -> CallKey {
        self.key
    }
}

/// Where a running call reports what its session must hear of at once.
struct Reporter {
    /// The channel its caller gave, if any.
    events: Option<mpsc::UnboundedSender<CallEvent>>,
    /// Else the one its slot is given once the call goes on.
    slot: Arc<CallSlot>,
}

impl Reporter {
    fn send(&self, event: CallEvent) {
        let events = self.events.as_ref().or_else(|| self.slot.events());
        // The session may be gone (connection closed): nothing to report to.
        if let Some(events) = events {
            let _ = events.send(event);
        }
    }
}

/// A started call's future.
type Going = std::pin::Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// Params not checked against the tool's input schema yet: with layers, they
/// are checked after the layers, which may rewrite them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unchecked {
    /// Violations listed at most.
    pub(crate) max_violations: usize,
    /// Checked on the blocking pool with one of the validators' permits.
    pub(crate) large: bool,
}

impl CallRunner {
    /// A runner allowing `validators` large-params validations at once.
    pub(crate) fn new(validators: usize) -> CallRunner {
        CallRunner {
            tasks: TaskTracker::new(),
            validators: Arc::new(Semaphore::new(validators.max(1))),
            around: None,
        }
    }

    /// Runs every call through `around` (the server's layers).
    pub(crate) fn set_around(&mut self, around: Arc<dyn Around>) {
        self.around = Some(around);
    }

    /// Whether calls run through layers: then their params are checked
    /// after the layers ([`Unchecked`]), not before they start.
    pub(crate) fn layered(&self) -> bool {
        self.around.is_some()
    }

    /// The large-params validators, which the layers' stack shares.
    pub(crate) fn validators_handle(&self) -> Arc<Semaphore> {
        Arc::clone(&self.validators)
    }

    /// The server's task tracker: call tasks, and the server's own tasks.
    pub(crate) fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    /// Whether every validator is busy (a large call will wait, `QUEUED`).
    pub(crate) fn validators_busy(&self) -> bool {
        self.validators.available_permits() == 0
    }

    /// The validators' semaphore (tests occupy it).
    #[cfg(test)]
    pub(crate) fn validators(&self) -> &Arc<Semaphore> {
        &self.validators
    }

    /// Runs a call (for a session core, or the MCP export): its [`Context`]
    /// is built here, its progress reported on `events`; the handler runs with
    /// timeout, panic capture and cancellation (grace, then abort).
    ///
    /// Unless [`Start::inline`] is off, the call is first polled once right
    /// here, on the caller's task: most tools finish without waiting for
    /// anything, and such a call's outcome is returned at once, which spares
    /// it a task, a channel message and two wake-ups. Otherwise it goes on in
    /// its own task (where a tool that
    /// waits for something would be anyway), which reports
    /// [`CallEvent::Finished`] on `events`.
    pub(crate) fn start(
        &self,
        start: Start,
        events: &mpsc::UnboundedSender<CallEvent>,
    ) -> Option<(CallKey, Box<Outcome>)> {
        match self.begin(start, Some(events.clone())) {
            Begun::Done(key, outcome) => Some((key, outcome)),
            Begun::Going(going) => {
                self.go_on(going, events.clone());
                None
            }
        }
    }

    /// Builds a call's [`Context`] and polls the call once (unless
    /// [`Start::inline`] is off): a call that finished is [`Begun::Done`];
    /// one that goes on is handed back, to be given its task by
    /// [`go_on`](Self::go_on). `events`: where its progress is announced;
    /// `None` for a caller that makes its channel only for a call that goes
    /// on, and gives it to the call's slot ([`CallSlot::attach`]) before
    /// `go_on`.
    pub(crate) fn begin(
        &self,
        start: Start,
        events: Option<mpsc::UnboundedSender<CallEvent>>,
    ) -> Begun {
        let Start {
            key,
            tool,
            params,
            call_id,
            session_id,
            cancel,
            slot,
            state,
            caller,
            limits,
            inline,
            peer,
            trace,
            unchecked,
        } = start;
        let timeouts = Arc::clone(&slot);
        let sink = ProgressSink {
            key,
            slot,
            events: events.clone(),
        };
        let ctx = Context::new(Parts {
            call_id,
            session_id,
            cancel: cancel.clone(),
            progress: Some(sink),
            state: Some(state),
            caller,
            peer,
        })
        .traced(trace);
        let around = self.around.clone();
        let mut call: Going = Box::pin(async move {
            let handler = match around {
                Some(around) => around.call(tool.clone(), params, ctx, unchecked),
                None => tool.call(params, ctx),
            };
            // The channel the caller gave, or the one its slot is given
            // before the call goes on (a timeout is never on the first poll).
            let reporter = Reporter {
                events,
                slot: timeouts,
            };
            run(key, &tool, handler, cancel, limits, &reporter).await
        });
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if inline && let std::task::Poll::Ready(outcome) = call.as_mut().poll(&mut cx) {
            return Begun::Done(key, Box::new(outcome));
        }
        Begun::Going(GoingCall { key, call })
    }

    /// Runs a call [`begin`](Self::begin) handed back in its own task,
    /// which reports [`CallEvent::Finished`] on `events`.
    pub(crate) fn go_on(&self, going: GoingCall, events: mpsc::UnboundedSender<CallEvent>) {
        let GoingCall { key, call } = going;
        // Polled again in its task at once: whatever it waits for learns the
        // task's waker then (a future heeds the waker of its latest poll).
        self.tasks.spawn(async move {
            let outcome = call.await;
            // The session may be gone (connection closed); then nobody is waiting.
            let _ = events.send(CallEvent::Finished(key, Box::new(outcome)));
        });
    }

    /// Validates large params of a call that has no session core (the MCP
    /// export's) as [`validate`](Self::validate) does, and returns the verdict.
    #[cfg(feature = "mcp")]
    pub(crate) async fn validate_large(
        &self,
        tool: Tool,
        params: Value,
        max_violations: usize,
    ) -> Validation {
        check_large(&self.validators, tool, params, max_violations).await
    }

    /// Validates params a session core handed off ([`Validate`]).
    pub(crate) fn start_validation(
        &self,
        validate: Validate,
        events: &mpsc::UnboundedSender<CallEvent>,
    ) {
        let Validate {
            key,
            tool,
            params,
            max_violations,
            cancel,
        } = validate;
        self.validate(key, tool, params, max_violations, cancel, events.clone());
    }

    /// Validates large params on the blocking pool, at most as many at once
    /// server-wide as there are validators, so one client's huge params cannot
    /// starve other sessions (docs/protocol.md §18.1). Reports [`CallEvent::Validated`]
    /// unless the call is cancelled first.
    pub(crate) fn validate(
        &self,
        key: CallKey,
        tool: Tool,
        params: Value,
        max_violations: usize,
        cancel: CancellationToken,
        events: mpsc::UnboundedSender<CallEvent>,
    ) {
        let limiter = Arc::clone(&self.validators);
        self.tasks.spawn(validate(
            key,
            tool,
            params,
            max_violations,
            limiter,
            cancel,
            events,
        ));
    }
}

async fn validate(
    key: CallKey,
    tool: Tool,
    params: Value,
    max_violations: usize,
    limiter: Arc<Semaphore>,
    cancel: CancellationToken,
    events: mpsc::UnboundedSender<CallEvent>,
) {
    let verdict = tokio::select! {
        verdict = check_large(&limiter, tool, params, max_violations) => verdict,
        () = cancel.cancelled() => return,
    };
    // The session may be gone (connection closed); then nobody is waiting.
    let _ = events.send(CallEvent::Validated(key, Box::new(verdict)));
}

/// Validates params on the blocking pool with one of the `limiter`'s permits.
pub(crate) async fn check_large(
    limiter: &Arc<Semaphore>,
    tool: Tool,
    params: Value,
    max_violations: usize,
) -> Validation {
    let Ok(permit) = Arc::clone(limiter).acquire_owned().await else {
        return Validation::Failed;
    };
    let checked =
        tokio::task::spawn_blocking(move || admit::check(&tool, params, max_violations)).await;
    drop(permit);
    checked.unwrap_or(Validation::Failed)
}

/// A call a session core decided to run: everything its task needs but the
/// channel its events go to, which the driver running the session owns.
pub(crate) struct Start {
    /// The call, inside its session.
    pub(crate) key: CallKey,
    /// The tool to run.
    pub(crate) tool: Tool,
    /// Its params, validated.
    pub(crate) params: Value,
    /// The call's id, for [`Context::call_id`].
    pub(crate) call_id: String,
    /// The session's id, for [`Context::session_id`].
    pub(crate) session_id: Arc<str>,
    /// Cancelled when the call is (by the client, a timeout, shutdown).
    pub(crate) cancel: CancellationToken,
    /// Where the call's latest progress waits for the session.
    pub(crate) slot: Arc<CallSlot>,
    /// The server's shared state, for `State<T>` parameters.
    pub(crate) state: Arc<StateMap>,
    /// The authenticated caller, when authentication is on.
    pub(crate) caller: Option<Arc<crate::context::Caller>>,
    /// Time limits and rendering.
    pub(crate) limits: Limits,
    /// Poll it once on the caller's task first ([`CallRunner::start`]);
    /// `false` for a call with large params, whose work grows with them.
    pub(crate) inline: bool,
    /// Who answers the call's questions when its session does not (the MCP
    /// export's client); `None` for a HAIP session, which does.
    pub(crate) peer: Option<Arc<dyn Peer>>,
    /// The trace the call runs in (feature `otel`), for its context.
    pub(crate) trace: crate::otel::TraceLink,
    /// Params not checked yet (the server has layers): checked after them.
    pub(crate) unchecked: Option<Unchecked>,
}

/// Large params a session core hands off to be validated off its task.
pub(crate) struct Validate {
    /// The call, inside its session.
    pub(crate) key: CallKey,
    /// The tool whose input schema applies.
    pub(crate) tool: Tool,
    /// The params.
    pub(crate) params: Value,
    /// Violations listed at most.
    pub(crate) max_violations: usize,
    /// Cancelled when the call is: a validation still waiting stops.
    pub(crate) cancel: CancellationToken,
}

/// The time limits of one call, and what to do with its value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The tool's timeout, if the task keeps it (the MCP export). A session
    /// core keeps its calls' deadlines itself and passes none: it cancels
    /// the call when one passes.
    pub(crate) timeout: Option<Duration>,
    /// How long a cancelled or timed-out tool may take to stop before it is
    /// aborted. Kept by the task, so that a call stops even when its session
    /// is gone; a session core also keeps it, for the `TOOL_DONE` it owes.
    pub(crate) grace: Duration,
    /// Check and encode a returned value in the call's own task.
    pub(crate) render: Option<Render>,
}

/// How a returned value is rendered before it leaves the call's task: checked
/// against the tool's output schema and encoded to JSON, on the blocking pool
/// when it is large, so that a large result costs its session nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Render {
    /// The longest JSON text kept; a longer result is only measured.
    pub(crate) max_bytes: usize,
    /// Output-schema violations listed (`max_violations`).
    pub(crate) max_violations: usize,
}

/// Values whose JSON may be longer than this are rendered on the blocking pool.
const RENDER_INLINE_BYTES: usize = 64 * 1024;

impl Render {
    async fn render(self, tool: &Tool, value: Value) -> Rendered {
        if fits_within(&value, RENDER_INLINE_BYTES) {
            return self.render_now(tool, value);
        }
        let tool = tool.clone();
        // A render that panics is a bug of ours, not the tool's: report the
        // value as unrenderable rather than lose the call.
        tokio::task::spawn_blocking(move || self.render_now(&tool, value))
            .await
            .unwrap_or_else(|_| Rendered {
                json: Err(usize::MAX),
                violations: Violations::default(),
            })
    }

    fn render_now(self, tool: &Tool, value: Value) -> Rendered {
        let violations = tool.check_result(&value, self.max_violations);
        let json = if value.is_null() {
            Ok(None)
        } else {
            to_json_within(&value, self.max_bytes).map(Some)
        };
        // Dropping a large value is work too: done here, not in the session.
        drop(value);
        Rendered { json, violations }
    }
}

/// Whether `value`'s JSON is at most about `budget` bytes: a quick walk that
/// stops as soon as it is not (strings are counted as they are, so escapes
/// make it a slight underestimate; it only decides where rendering runs).
fn fits_within(value: &Value, budget: usize) -> bool {
    /// Takes `cost` from what is left; false once nothing is.
    fn spend(left: &mut usize, cost: usize) -> bool {
        match left.checked_sub(cost) {
            Some(rest) => {
                *left = rest;
                true
            }
            None => false,
        }
    }
    fn walk(value: &Value, left: &mut usize) -> bool {
        match value {
            Value::String(s) => spend(left, s.len() + 2),
            Value::Array(items) => {
                spend(left, items.len() + 2) && items.iter().all(|item| walk(item, left))
            }
            Value::Object(map) => {
                spend(left, 2)
                    && map
                        .iter()
                        .all(|(key, item)| spend(left, key.len() + 4) && walk(item, left))
            }
            _ => spend(left, 24),
        }
    }
    let mut left = budget;
    walk(value, &mut left)
}

async fn run(
    key: CallKey,
    tool: &Tool,
    handler: crate::tool::ToolFuture,
    cancel: CancellationToken,
    Limits {
        timeout,
        grace,
        render,
    }: Limits,
    events: &Reporter,
) -> Outcome {
    let mut call = AssertUnwindSafe(handler).catch_unwind();
    let deadline = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        result = &mut call => return match (finished(result), render) {
            (Outcome::Returned(Ok(value)), Some(render)) => {
                let value = tool.shape_output(value);
                Outcome::Rendered(Box::new(render.render(tool, value).await))
            }
            (Outcome::Returned(Ok(value)), None) => Outcome::Returned(Ok(tool.shape_output(value))),
            (outcome, _) => outcome,
        },
        () = cancel.cancelled() => {}
        () = deadline => {
            events.send(CallEvent::TimedOut(key));
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

/// What decides how an outcome completes a call (the session's settings).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    /// Output-schema violations listed (`max_violations`).
    pub(crate) max_violations: usize,
    /// A result that violates the output schema fails the call.
    pub(crate) strict_output_validation: bool,
    /// Put panic texts in `INTERNAL_ERROR` messages.
    pub(crate) debug_errors: bool,
}

/// How a finished call completes: the one mapping from [`Outcome`], shared by
/// HAIP sessions and the MCP export; each protocol only renders it (a
/// `TOOL_DONE`, a `CallToolResult`).
#[derive(Debug)]
pub(crate) enum Completion {
    /// The call ended with this outcome.
    Done(ToolOutcome),
    /// It succeeded with a value the call's task already checked and encoded:
    /// its JSON text (`None` for `null`), or the length it would have had.
    Encoded(Result<Option<Vec<u8>>, usize>),
}

/// Completes a call of `tool` that ended with `outcome`. A result that violates
/// the output schema is logged and counted (`warnings`); with
/// `strict_output_validation` it fails the call instead. A panic becomes
/// `INTERNAL_ERROR` (its text only with `debug_errors`); a tool that stopped
/// after a cancel, or said it was cancelled, is `CANCELLED`.
pub(crate) fn complete(
    tool: &Tool,
    outcome: Outcome,
    policy: Policy,
    stats: &Stats,
) -> (Completion, Ended) {
    let done = |outcome: ToolOutcome, ended| (Completion::Done(outcome), ended);
    let failed = |failure: ToolFailure| {
        let ended = Ended::failed(&failure.code);
        done(ToolOutcome::Error(failure), ended)
    };
    let name = tool.name();
    match outcome {
        Outcome::Rendered(rendered) => {
            let Rendered { json, violations } = *rendered;
            match violated(name, &violations, policy, stats) {
                Some(failure) => failed(failure),
                None => (Completion::Encoded(json), Ended::Ok),
            }
        }
        Outcome::Returned(Ok(value)) => {
            let found = tool.check_result(&value, policy.max_violations);
            match violated(name, &found, policy, stats) {
                Some(failure) => failed(failure),
                None => done(
                    ToolOutcome::Ok((!value.is_null()).then_some(value)),
                    Ended::Ok,
                ),
            }
        }
        Outcome::Returned(Err(e)) if e.is_cancelled() => {
            done(ToolOutcome::Cancelled(None), Ended::Cancelled)
        }
        // Params the layers passed on, then the input schema refused.
        Outcome::Returned(Err(ref e)) if let Some(found) = e.violations() => {
            failed(invalid_params(name, found))
        }
        Outcome::Returned(Err(e)) => failed(e.into_failure()),
        Outcome::Panicked(text) => {
            let message = panic_message(name, &text, policy.debug_errors);
            let failure = ToolFailure::new(ErrorCode::INTERNAL_ERROR, message);
            done(ToolOutcome::Error(failure), Ended::Panicked)
        }
        // Stopped after a cancel (the client's, a timeout's, shutdown's).
        Outcome::Stopped => done(ToolOutcome::Cancelled(None), Ended::Cancelled),
    }
}

/// Logs and counts a result that violates the output schema; the failure it
/// becomes with `strict_output_validation`.
fn violated(name: &str, found: &Violations, policy: Policy, stats: &Stats) -> Option<ToolFailure> {
    if found.is_empty() {
        return None;
    }
    stats.warnings.fetch_add(1, Relaxed);
    static VIOLATED: Throttle = Throttle::new();
    if let Some(suppressed) = VIOLATED.allow() {
        tracing::warn!(tool = %name, violations = ?found.listed, total = found.total, suppressed, "tool result violates its output schema");
    }
    if !policy.strict_output_validation {
        return None;
    }
    let failure = ToolFailure::new(
        ErrorCode::TOOL_EXECUTION_ERROR,
        format!("Result of tool {name} violates its output schema"),
    );
    Some(counted(failure.with_details(found.details()), found))
}

/// The `TOOL_DONE ERROR` result of a call whose params were rejected:
/// `{error, code: INVALID_PARAMS, details: [..max_violations], total}`
/// (`total_at_least` when counting stopped early).
pub(crate) fn invalid_params(tool: &str, found: &Violations) -> ToolFailure {
    let failure = ToolFailure::new(
        ErrorCode::INVALID_PARAMS,
        format!("Invalid params for tool {tool}"),
    );
    counted(failure.with_details(found.details()), found)
}

/// `INTERNAL_ERROR`: the check of `tool`'s params failed (its validator
/// panicked).
pub(crate) fn check_failed(tool: &str) -> ToolFailure {
    ToolFailure::new(
        ErrorCode::INTERNAL_ERROR,
        format!("Internal error validating params for tool {tool}"),
    )
}

/// `failure` with the count of the violations its details list: `total`, or
/// `total_at_least` when counting stopped early.
pub(crate) fn counted(mut failure: ToolFailure, found: &Violations) -> ToolFailure {
    let count = Some(found.total as u64);
    if found.exhaustive {
        failure.total = count;
    } else {
        failure.total_at_least = count;
    }
    failure
}

//! [`Context`]: what a running tool knows about its call.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde::de::DeserializeOwned;
use serde_json::{Number, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::exec::event::{CallEvent, CallKey};
use crate::schema::Form;
use crate::tool::{State, StateMap};

mod caller;
mod question;
pub(crate) mod share;
mod talk;

pub use caller::Caller;
pub use question::{Ask, Confirm, ListRoots, QuestionForm};
pub use talk::{
    Answer, AskError, LogLevel, Role, Root, RootsError, SampleError, SampleRequest, Sampled,
};
pub(crate) use talk::{LogLine, Peer, PeerFuture, PendingQuestion};

/// The handle a tool gets for one call: ids, progress, log lines, questions
/// to the person at the other end, and cancellation.
///
/// Cheap to clone; clones refer to the same call. Progress reporting never
/// blocks: under back-pressure a newer report replaces an older unsent one of
/// the same call (latest wins). Log lines never block either, and are never
/// merged ([`Context::log`]); [`Context::ask`] waits for an answer.
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
    parts: Parts,
    /// Questions made so far, for their default keys.
    questions: AtomicUsize,
    /// The trace the call runs in (feature `otel`), carried on by an MCP
    /// import to the server it calls.
    trace: crate::otel::TraceLink,
}

/// What a call's context is made of (the runner makes one per call).
pub(crate) struct Parts {
    /// The call's id.
    pub(crate) call_id: String,
    /// Its session's id (empty: none).
    pub(crate) session_id: Arc<str>,
    /// Cancelled when the call is.
    pub(crate) cancel: CancellationToken,
    /// Where its progress, log lines and questions go (`None`: nowhere).
    pub(crate) progress: Option<ProgressSink>,
    /// The server's shared state.
    pub(crate) state: Option<Arc<StateMap>>,
    /// Who called, when authentication is on.
    pub(crate) caller: Option<Arc<Caller>>,
    /// Who answers questions and sampling requests when the session does not
    /// (the MCP export's client).
    pub(crate) peer: Option<Arc<dyn Peer>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("call_id", &self.inner.parts.call_id)
            .field("session_id", &self.inner.parts.session_id)
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl Context {
    pub(crate) fn new(parts: Parts) -> Context {
        Context {
            inner: Arc::new(Inner {
                parts,
                questions: AtomicUsize::new(0),
                trace: crate::otel::TraceLink::default(),
            }),
        }
    }

    /// The same context, in the trace `link` (before anyone else holds it).
    pub(crate) fn traced(mut self, link: crate::otel::TraceLink) -> Context {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.trace = link;
        }
        self
    }

    /// The trace the call runs in.
    pub(crate) fn trace(&self) -> &crate::otel::TraceLink {
        &self.inner.trace
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
        let ctx = Context::new(Parts {
            call_id: call_id.into(),
            session_id: Arc::from(""),
            cancel: cancel.clone(),
            progress: None,
            state: None,
            caller: None,
            peer: None,
        });
        (ctx, CancellationHandle(cancel))
    }

    /// The call's id (the `call_id` of its `TOOL_CALL`).
    pub fn call_id(&self) -> &str {
        &self.inner.parts.call_id
    }

    /// The id of the session that made the call.
    pub fn session_id(&self) -> &str {
        &self.inner.parts.session_id
    }

    /// The authenticated subject of the session that made the call (the
    /// token's `sub`, or what a custom authenticator returned); `None` when
    /// authentication is off.
    pub fn subject(&self) -> Option<&str> {
        self.inner.parts.caller.as_deref().map(Caller::subject)
    }

    /// Who made the call: the subject, the scopes its token grants and its
    /// claims; `None` when authentication is off.
    ///
    /// ```
    /// use haip::{Context, ToolError, haip_tool};
    ///
    /// /// Closes a ticket of the caller's own tenant.
    /// #[haip_tool]
    /// async fn close_ticket(ctx: Context, id: u64) -> Result<bool, ToolError> {
    ///     let tenant = ctx
    ///         .caller()
    ///         .and_then(|c| c.claim("tenant"))
    ///         .and_then(|t| t.as_str())
    ///         .ok_or_else(|| ToolError::execution("no tenant in the token"))?;
    ///     Ok(id > 0 && !tenant.is_empty())
    /// }
    /// ```
    pub fn caller(&self) -> Option<&Caller> {
        self.inner.parts.caller.as_deref()
    }

    /// The application state of type `T` registered with
    /// [`ServerBuilder::state`](crate::ServerBuilder::state), if any.
    pub fn state<T: Send + Sync + 'static>(&self) -> Option<State<T>> {
        self.inner.parts.state.as_ref()?.get::<T>()
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
                tracing::warn!(call_id = %self.inner.parts.call_id, error = %e, "progress partial could not be serialised");
                None
            }
        };
        self.report(percent, partial);
    }

    /// Whether the call has been cancelled (by the client, a run cancel, a
    /// timeout or server shutdown).
    pub fn is_cancelled(&self) -> bool {
        self.inner.parts.cancel.is_cancelled()
    }

    /// Completes when the call is cancelled. Use it in `tokio::select!` to stop promptly.
    pub async fn cancelled(&self) {
        self.inner.parts.cancel.cancelled().await
    }

    fn report(&self, percent: f64, partial: Option<Value>) {
        if percent.is_nan() {
            return;
        }
        self.report_progress(Some(percent), partial);
    }

    /// Sends a log line at `level` to the client (HAIP: a `TOOL_UPDATE` with
    /// `log`; MCP: `notifications/message`), if the client wants that level
    /// (HAIP: its `HAI`'s `capabilities.log_level`, MCP: `logging/setLevel`;
    /// `info` by default).
    ///
    /// Never blocks. Lines are sent in order, before the call's `TOOL_DONE`,
    /// and are never merged like progress is; a call that logs much faster
    /// than its client reads is bounded all the same: past 256 unsent lines,
    /// new lines are dropped and a `warning` line says how many.
    ///
    /// ```
    /// use haip::{Context, LogLevel};
    ///
    /// async fn import(ctx: Context) {
    ///     ctx.info("reading the file");
    ///     ctx.log(LogLevel::Warning, "line 3 is empty; skipped");
    /// }
    /// ```
    pub fn log(&self, level: LogLevel, message: impl Into<String>) {
        self.send_log(LogLine {
            level,
            message: message.into(),
            data: None,
        });
    }

    /// [`Context::log`] with structured `data` beside the message (a value
    /// that cannot be serialised is left out).
    pub fn log_with(
        &self,
        level: LogLevel,
        message: impl Into<String>,
        data: impl serde::Serialize,
    ) {
        self.send_log(LogLine {
            level,
            message: message.into(),
            data: serde_json::to_value(data).ok(),
        });
    }

    /// A `debug` log line ([`Context::log`]).
    pub fn debug(&self, message: impl Into<String>) {
        self.log(LogLevel::Debug, message);
    }

    /// An `info` log line ([`Context::log`]).
    pub fn info(&self, message: impl Into<String>) {
        self.log(LogLevel::Info, message);
    }

    /// A `notice` log line ([`Context::log`]).
    pub fn notice(&self, message: impl Into<String>) {
        self.log(LogLevel::Notice, message);
    }

    /// A `warning` log line ([`Context::log`]).
    pub fn warning(&self, message: impl Into<String>) {
        self.log(LogLevel::Warning, message);
    }

    /// An `error` log line ([`Context::log`]). The call goes on: return an
    /// error to end it.
    pub fn error(&self, message: impl Into<String>) {
        self.log(LogLevel::Error, message);
    }

    fn send_log(&self, line: LogLine) {
        match &self.inner.parts.progress {
            Some(sink) => sink.log(line),
            None => {
                tracing::debug!(call_id = %self.inner.parts.call_id, level = line.level.as_str(), message = %line.message, "tool log line (no client)")
            }
        }
    }

    /// Asks the person at the other end a question; await it for the
    /// answer: a form with the fields of `T` (HAIP: `WAITING_INPUT` /
    /// `TOOL_INPUT`, §6.11; MCP: `elicitation/create` in form mode).
    ///
    /// **`T` is always a struct** (usually a `#[haip::data]` one): a
    /// question's form is an object of named fields, which is what HAIP
    /// clients and MCP elicitation show people. So `ctx.ask::<String>(..)`,
    /// `ctx.ask::<u32>(..)` or `ctx.ask::<Vec<_>>(..)` is a compile error
    /// ("a question's form must be a struct with `#[haip::data]`"): to ask
    /// for one value, put it in a struct of one field (below, and
    /// [`Context::confirm`] for yes or no). `T` is a [`QuestionForm`]:
    /// `#[haip::data]` makes every struct with named fields one, and a
    /// struct that derives its traits itself says so with an empty impl.
    ///
    /// Its fields are strings, numbers, integers, booleans, enums of unit
    /// variants, or lists of such enums (multiple choice); `Option` fields
    /// are optional, `#[serde(default = ...)]` gives a default, doc
    /// comments and `#[schemars(...)]` attributes (`range`, `length`,
    /// `email`, `title`) describe the fields. A struct with another shape
    /// of field (a nested struct, a list of free values) fails at run time
    /// with [`AskError::InvalidForm`], which names the field.
    ///
    /// The answer is checked against the form before the tool sees it (a
    /// HAIP client whose answer does not fit is told so and asked again).
    /// The call's timeout keeps running while it waits, and a cancelled
    /// call stops waiting ([`AskError::CallEnded`]). A client that cannot
    /// answer questions gets none: [`AskError::Unsupported`], at once.
    /// Questions awaited together (`tokio::join!`) are put to the client
    /// together.
    ///
    /// **Over MCP without sessions** (the default `/mcp`, MCP 2026-07-28)
    /// the server keeps nothing between a question and its answer: the call
    /// ends its round with the questions it waits for (`input_required`),
    /// and when the client retries with the answers, **the tool runs again
    /// from the start**, on whichever instance takes the retry. Each
    /// question then gets its answer at once, found by its
    /// [key](Ask::key), and the tool goes on. So what a tool does before a
    /// question runs once per round: keep it free of side effects (or
    /// idempotent), and ask the same questions in the same order on every
    /// run. A question the retry brings no answer for is asked again. Over
    /// HAIP and MCP sessions the call simply waits for the answer, and
    /// nothing runs twice.
    ///
    /// **In an MCP task** (a tool with [`TaskSupport`](crate::TaskSupport),
    /// a client that takes tasks) the call waits too: the question shows in
    /// the task's `tasks/get` until the client answers it with
    /// `tasks/update`, and nothing runs twice. Questions a call asks before
    /// it first waits for anything else go by rounds as above, so the task
    /// starts with their answers.
    ///
    /// ```
    /// use haip::{Answer, Context, ToolError};
    ///
    /// /// One value asked for: a struct of one field.
    /// #[haip::data]
    /// struct Size {
    ///     /// How many people.
    ///     #[schemars(range(min = 1, max = 12))]
    ///     party_size: u8,
    /// }
    ///
    /// async fn book(ctx: Context) -> Result<String, ToolError> {
    ///     match ctx.ask::<Size>("How many people?").await? {
    ///         Answer::Accepted(size) => Ok(format!("a table for {}", size.party_size)),
    ///         Answer::Declined | Answer::Cancelled => Ok("no table".to_owned()),
    ///     }
    /// }
    /// ```
    ///
    /// Clients show the fields in the order the form's schema lists them:
    /// the `haip call` command asks the required fields first, in the order
    /// they are declared, then the optional ones.
    pub fn ask<T>(&self, message: impl Into<String>) -> Ask<'_, T>
    where
        T: QuestionForm + schemars::JsonSchema + DeserializeOwned + 'static,
    {
        Ask::new(self, message.into())
    }

    /// Asks a yes-or-no question; await it: `true` only when the person
    /// accepts and confirms; declining or dismissing it is `false`. Fails
    /// (and, over MCP without sessions, re-runs) as [`Context::ask`] does.
    ///
    /// The question is a form of one required boolean field, `confirm`,
    /// whose default is `false`: **saying nothing is no**. Clients are sent
    ///
    /// ```text
    /// {"type": "object",
    ///  "properties": {"confirm": {"type": "boolean", "title": "Confirm", "default": false}},
    ///  "required": ["confirm"]}
    /// ```
    ///
    /// and answer `{"confirm": true}` to go ahead (`{"confirm": false}`, a
    /// decline or a dismissal is no). `haip call` asks
    /// `confirm "Confirm" (y/n; default no)`, where Enter says no; the
    /// inspector shows an unticked box; in a test (feature `testing`),
    /// `haip::testing::TestCall::confirm(true)` answers it.
    ///
    /// ```
    /// # async fn f(ctx: haip::Context) -> Result<(), haip::ToolError> {
    /// if !ctx.confirm("Delete 3 files?").await? {
    ///     return Err(haip::ToolError::execution("not confirmed"));
    /// }
    /// # Ok(()) }
    /// ```
    pub fn confirm(&self, message: impl Into<String>) -> Confirm<'_> {
        Confirm::new(self, message.into())
    }

    /// The key of the call's next question of this kind, by its place.
    pub(crate) fn next_key(&self, kind: &str) -> String {
        let n = self.inner.questions.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{kind}-{n}")
    }

    pub(crate) async fn ask_form(
        &self,
        key: String,
        message: String,
        form: Arc<Form>,
    ) -> Result<Answer<Value>, AskError> {
        let asked: PeerFuture<Result<Answer<Value>, AskError>> =
            match (&self.inner.parts.peer, &self.inner.parts.progress) {
                (Some(peer), _) => peer.ask(key, message, form),
                (None, Some(sink)) => Box::pin(sink.ask(message, form)),
                (None, None) => return Err(AskError::Unsupported),
            };
        tokio::select! {
            answer = asked => answer,
            () = self.cancelled() => Err(AskError::CallEnded),
        }
    }

    /// Asks the client's language model for a completion (MCP
    /// `sampling/createMessage`): for tools served to MCP clients that offer
    /// sampling. HAIP has no sampling, and clients without it get
    /// [`SampleError::Unsupported`] at once. Over MCP without sessions it
    /// goes as [`Context::ask`] does (the tool runs again with the reply;
    /// [`SampleRequest::key`] names it).
    ///
    /// ```
    /// use haip::{Context, SampleRequest, ToolError};
    ///
    /// async fn summarise(ctx: Context, text: String) -> Result<String, ToolError> {
    ///     let reply = ctx
    ///         .sample(SampleRequest::new(format!("Summarise: {text}")).max_tokens(200))
    ///         .await?;
    ///     Ok(reply.text().unwrap_or_default().to_owned())
    /// }
    /// ```
    pub async fn sample(&self, request: SampleRequest) -> Result<Sampled, SampleError> {
        let Some(peer) = &self.inner.parts.peer else {
            return Err(SampleError::Unsupported);
        };
        let key = request
            .key
            .clone()
            .unwrap_or_else(|| self.next_key("sample"));
        tokio::select! {
            reply = peer.sample(key, request) => reply,
            () = self.cancelled() => Err(SampleError::CallEnded),
        }
    }

    /// The roots the client shares (MCP `roots/list`): the directories or
    /// file trees it lets tools work in. Await it. HAIP clients share none,
    /// nor do MCP clients that did not declare `roots`:
    /// [`RootsError::Unsupported`]. Over MCP without sessions it goes as
    /// [`Context::ask`] does.
    ///
    /// ```
    /// # async fn f(ctx: haip::Context) -> Result<(), haip::ToolError> {
    /// for root in ctx.roots().await? {
    ///     println!("{}", root.uri);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn roots(&self) -> ListRoots<'_> {
        ListRoots::new(self)
    }

    pub(crate) async fn list_roots(&self, key: String) -> Result<Vec<Root>, RootsError> {
        let Some(peer) = &self.inner.parts.peer else {
            return Err(RootsError::Unsupported);
        };
        tokio::select! {
            roots = peer.roots(key) => roots,
            () = self.cancelled() => Err(RootsError::CallEnded),
        }
    }

    /// Reports progress whose percentage may be unknown: `TOOL_UPDATE` then
    /// carries no `progress` (docs/protocol.md §6.5 makes it optional), only what is
    /// `partial`.
    pub(crate) fn report_progress(&self, percent: Option<f64>, partial: Option<Value>) {
        if let Some(sink) = &self.inner.parts.progress {
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

/// What one call reported and its session has not taken yet: the latest
/// progress, log lines, questions.
///
/// The session is notified only when the slot goes from empty to not empty,
/// so a call has at most one notification in flight however fast it reports:
/// the notification channel is bounded by the number of active calls. Log
/// lines are bounded here ([`MAX_UNSENT_LOG_LINES`]), questions by the tool
/// (each waits for its answer).
#[derive(Default)]
pub(crate) struct CallSlot {
    state: Mutex<SlotState>,
    /// Where the call reports when its [`ProgressSink`] was made without a
    /// channel: set by [`attach`](Self::attach) once the call is known to
    /// go on (most calls finish on their first poll, and need none).
    events: OnceLock<(CallKey, mpsc::UnboundedSender<CallEvent>)>,
}

#[derive(Default)]
struct SlotState {
    latest: Option<Progress>,
    logs: VecDeque<LogLine>,
    /// Log lines dropped since the last take, the queue being full.
    dropped: u64,
    asks: VecDeque<PendingQuestion>,
    closed: bool,
}

impl SlotState {
    fn is_empty(&self) -> bool {
        self.latest.is_none() && self.logs.is_empty() && self.dropped == 0 && self.asks.is_empty()
    }
}

/// Log lines of one call waiting for its session, at most.
pub(crate) const MAX_UNSENT_LOG_LINES: usize = 256;

/// Questions of one call open at once, at most (a tool asks one at a time
/// unless it asks from several clones of its `Context`).
pub(crate) const MAX_OPEN_QUESTIONS: usize = 16;

/// What a question beyond [`MAX_OPEN_QUESTIONS`] gets.
pub(crate) fn too_many_questions() -> AskError {
    AskError::Failed(format!(
        "the call already has {MAX_OPEN_QUESTIONS} questions open"
    ))
}

impl CallSlot {
    /// Takes the latest report, if any.
    pub(crate) fn take(&self) -> Option<Progress> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .latest
            .take()
    }

    /// Takes the log lines, oldest first, and how many were dropped since
    /// the last take.
    pub(crate) fn take_logs(&self) -> (VecDeque<LogLine>, u64) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (
            std::mem::take(&mut state.logs),
            std::mem::take(&mut state.dropped),
        )
    }

    /// Takes the questions, oldest first.
    pub(crate) fn take_asks(&self) -> VecDeque<PendingQuestion> {
        std::mem::take(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()).asks)
    }

    /// From now on the call reports on `events` (as `key`); told at once
    /// if something is waiting already. A slot takes one channel: a second
    /// is ignored.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn attach(&self, key: CallKey, events: mpsc::UnboundedSender<CallEvent>) {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let waiting = !state.closed && !state.is_empty();
        if self.events.set((key, events)).is_ok()
            && waiting
            && let Some((key, events)) = self.events.get()
        {
            let _ = events.send(CallEvent::Progress(*key));
        }
    }

    /// The channel [`attach`](Self::attach) gave, if any.
    pub(crate) fn events(&self) -> Option<&mpsc::UnboundedSender<CallEvent>> {
        self.events.get().map(|(_, events)| events)
    }

    /// Discards everything pending and every later report (after
    /// `CANCELLING` or `TOOL_DONE`); questions waiting end with
    /// [`AskError::CallEnded`].
    pub(crate) fn close(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.closed = true;
        state.latest = None;
        state.logs = VecDeque::new();
        state.dropped = 0;
        state.asks = VecDeque::new();
    }
}

pub(crate) struct ProgressSink {
    pub(crate) key: CallKey,
    pub(crate) slot: Arc<CallSlot>,
    /// Where a fill is announced; `None`: on the channel the slot is given
    /// later ([`CallSlot::attach`]), nowhere until then.
    pub(crate) events: Option<mpsc::UnboundedSender<CallEvent>>,
}

impl ProgressSink {
    fn report(&self, progress: Progress) {
        self.put(|state| state.latest = Some(progress));
    }

    fn log(&self, line: LogLine) {
        self.put(|state| {
            if state.logs.len() < MAX_UNSENT_LOG_LINES {
                state.logs.push_back(line);
            } else {
                state.dropped += 1;
            }
        });
    }

    /// Hands a question to the session; the answer comes back on the
    /// returned future (the call ending first: [`AskError::CallEnded`]).
    fn ask(
        &self,
        message: String,
        form: Arc<Form>,
    ) -> impl Future<Output = Result<Answer<Value>, AskError>> + Send + 'static {
        let (reply, answer) = oneshot::channel();
        self.put(|state| {
            if state.asks.len() >= MAX_OPEN_QUESTIONS {
                let _ = reply.send(Err(too_many_questions()));
                return;
            }
            state.asks.push_back(PendingQuestion {
                message,
                form,
                reply,
            })
        });
        async move { answer.await.unwrap_or(Err(AskError::CallEnded)) }
    }

    /// Changes the slot, and tells the session when it was empty before (a
    /// closed slot takes nothing).
    fn put(&self, change: impl FnOnce(&mut SlotState)) {
        let was_empty = {
            let mut state = self.slot.state.lock().unwrap_or_else(|e| e.into_inner());
            if state.closed {
                return;
            }
            let was_empty = state.is_empty();
            change(&mut state);
            was_empty
        };
        if was_empty && let Some(events) = self.events.as_ref().or_else(|| self.slot.events()) {
            // The session may be gone (connection closed): nothing to report to.
            let _ = events.send(CallEvent::Progress(self.key));
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

    /// A context whose progress and log lines go to `slot`, the call
    /// (`CallKey(key)`) being announced on the receiver once per fill.
    fn reporting(key: u64) -> (Context, Arc<CallSlot>, mpsc::UnboundedReceiver<CallEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let slot = Arc::new(CallSlot::default());
        let sink = ProgressSink {
            key: CallKey(key),
            slot: slot.clone(),
            events: Some(tx),
        };
        let ctx = Context::new(Parts {
            call_id: "c".into(),
            session_id: Arc::from("s"),
            cancel: CancellationToken::new(),
            progress: Some(sink),
            state: None,
            caller: None,
            peer: None,
        });
        (ctx, slot, rx)
    }

    #[test]
    fn reports_coalesce_and_notify_once_until_taken() {
        let (ctx, slot, mut rx) = reporting(7);
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

    #[test]
    fn log_lines_are_kept_in_order_and_bounded() {
        let (ctx, slot, mut rx) = reporting(3);
        for i in 0..MAX_UNSENT_LOG_LINES + 44 {
            ctx.info(format!("line {i}"));
        }
        assert!(rx.try_recv().is_ok());
        assert!(rx.try_recv().is_err(), "one notification per fill");
        let (lines, dropped) = slot.take_logs();
        assert_eq!(lines.len(), MAX_UNSENT_LOG_LINES);
        assert_eq!(dropped, 44);
        assert_eq!(lines[0].message, "line 0");
        assert_eq!(lines[1].level, LogLevel::Info);
        assert_eq!(
            LogLine::dropped(dropped).to_json(),
            serde_json::json!({"level": "warning", "message": "44 log line(s) dropped: the tool logged faster than they could be sent"})
        );
        // Taken: room again, and a new notification.
        ctx.warning("after");
        assert!(rx.try_recv().is_ok());
        slot.close();
        ctx.error("closed");
        assert!(slot.take_logs().0.is_empty());
    }
}

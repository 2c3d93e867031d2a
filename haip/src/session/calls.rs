//! Tool calls inside a session: admission, queueing, progress, cancellation and
//! the one `TOOL_DONE` every accepted call ends with (docs/protocol.md §6.4–§6.7).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use serde_json::{Map, Number, Value, json};
use tokio_util::sync::CancellationToken;

use super::{Action, Pending, Session};
use tokio::sync::oneshot;

use crate::context::{
    Answer, AskError, CallSlot, LogLine, MAX_OPEN_QUESTIONS, PendingQuestion, Progress,
    too_many_questions,
};
use crate::exec::admit::{Admitted, Arrival, CallBook, Check, Refused};
use crate::exec::{self, CallEvent, CallKey, Completion, Outcome, Policy, Render, Validation};
use crate::otel::{CallSpan, QuestionSpan};
use crate::protocol::payload::{
    InputAction, ToolCall, ToolDone, ToolFailure, ToolInput, ToolOutcome, ToolStatus, ToolUpdate,
    UpdateStatus,
};
use crate::protocol::{Channel, ErrorCode, EventType, Inbound, Outgoing, Prepared};
use crate::schema::Form;
use crate::stats::{Ended, Throttle};
use crate::tool::Tool;

/// One accepted call.
pub(crate) struct Call {
    call_id: String,
    tool: Tool,
    /// Params of a call still waiting for a slot.
    params: Option<Value>,
    run_id: Option<String>,
    thread_id: Option<String>,
    state: State,
    cancel: CancellationToken,
    slot: Arc<CallSlot>,
    /// Its bookkeeping (its counters, its span) until it ends: `None` once
    /// its `TOOL_DONE` is issued.
    book: Option<CallBook>,
    /// The call's timeout while it runs, the end of its grace period while it
    /// is cancelled (see `session::timers`).
    pub(super) deadline: Option<Instant>,
    cancel_reason: Option<String>,
    /// A progress update of this call is waiting in the outbox.
    pub(super) progress_pending: bool,
    /// Bytes of params held while the call waits (queued or being validated).
    held: usize,
    /// `TOOL_UPDATE QUEUED` was sent.
    queued_sent: bool,
    /// Its params were larger than [`LARGE_PARAMS`]: it runs in a task of its
    /// own from the start, so that work growing with them (deserializing
    /// the arguments, say) never runs on the session's task.
    large: bool,
    /// Its questions waiting for an answer (docs/protocol.md §6.11).
    questions: Vec<Question>,
}

impl Call {
    /// Its span while it is owed a `TOOL_DONE`.
    fn span(&self) -> Option<&CallSpan> {
        self.book.as_ref().map(CallBook::span)
    }
}

/// A question of a call, put to the client and not yet answered.
struct Question {
    request_id: String,
    form: Arc<Form>,
    reply: oneshot::Sender<Result<Answer<Value>, AskError>>,
    span: QuestionSpan,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Large params being validated off the session task.
    Validating,
    Queued,
    Running,
    Cancelling,
    /// `TOOL_DONE` issued (timeout) while the task still holds its slot.
    Done,
}

/// Whom the answers about a call go to: the request's envelope id, the run
/// and the thread the call is part of.
struct Addressed {
    request_id: Option<String>,
    run_id: Option<String>,
    thread_id: Option<String>,
}

impl Session {
    /// A `TOOL_CALL` (docs/protocol.md §6.4), its payload decoded from `msg` (step 1,
    /// the call id, included: see `InboundEvent::decode_with`).
    pub(super) fn handle_tool_call(&mut self, msg: Inbound, call: ToolCall) {
        let Inbound {
            id,
            run_id,
            thread_id,
            ..
        } = msg;
        let ToolCall {
            call_id,
            tool: name,
            params,
            run_id: payload_run_id,
            meta,
        } = call;
        let to = Addressed {
            request_id: id,
            // The envelope's run id first, else the payload's (the upstream CLI).
            run_id: run_id.or(payload_run_id),
            thread_id,
        };
        // Step 2: duplicates of an active call get an ERROR and nothing else.
        if self.active_ids.contains_key(&call_id) {
            self.error_about(
                ErrorCode::INVALID_MESSAGE,
                "Duplicate call_id",
                to.request_id.as_deref(),
                Some(json!({ "call_id": call_id, "reason": "duplicate call_id" })),
                to.run_id.as_deref(),
                to.thread_id.as_deref(),
            );
            return;
        }
        // Steps 3–4: lookup, scopes, params (checked here unless large or
        // layered: large params off the session task, docs/protocol.md §18.1;
        // with layers, after them, in the call's task).
        let size = self.inbound_len;
        let large = size > LARGE_PARAMS;
        let layered = self.shared.runner.layered();
        let clock = &self.shared.clock;
        let now = || clock.now();
        let arrival = Arrival {
            tool: name.as_deref(),
            call_id: &call_id,
            session: Some(&self.id),
            door: self.door,
            meta: meta.as_ref(),
            caller: self.caller.as_deref(),
            received: now(),
            check: if large || layered {
                Check::Later
            } else {
                Check::Now
            },
        };
        let admitted =
            self.shared
                .gate(&now)
                .admit(arrival, params, |_, _| Ok::<_, Infallible>(()));
        drop(meta);
        match admitted {
            Ok(admitted) => self.place(admitted, call_id, to, size),
            Err(refused) => self.refuse_call(refused, call_id, name.as_deref(), to),
        }
    }

    /// Step 5: an admitted call starts, waits in the queue, or has its large
    /// params checked off the session task first; or, when too many wait
    /// already, is refused with `RATE_LIMITED`. A call being validated waits
    /// like a queued one, and the params of waiting calls are bounded in
    /// bytes as well as in number.
    fn place(&mut self, admitted: Admitted<()>, call_id: String, to: Addressed, size: usize) {
        let Admitted {
            tool,
            params,
            book,
            door: (),
        } = admitted;
        let (large, layered) = (size > LARGE_PARAMS, self.shared.runner.layered());
        let config = &self.shared.config;
        let max_violations = config.max_violations;
        let start_now = (!large || layered)
            && self.running < config.max_inflight_calls
            && self.waiting.is_empty();
        let too_many = self.waiting.len() + self.validating >= config.max_queued_calls
            || self.held_bytes.saturating_add(size) > config.max_queued_bytes;
        if !start_now && too_many {
            let refused = book.refuse(Refused::Busy, self.shared.clock.now());
            return self.refuse_call(refused, call_id, None, to);
        }
        let key = CallKey(self.next_key);
        self.next_key += 1;
        self.active_ids.insert(call_id.clone(), key);
        self.record_call_opened(&call_id);
        let cancel = CancellationToken::new();
        let mut call = Call {
            call_id,
            tool,
            params: None,
            run_id: to.run_id,
            thread_id: to.thread_id,
            state: State::Queued,
            cancel: cancel.clone(),
            slot: Arc::new(CallSlot::default()),
            book: Some(book),
            deadline: None,
            cancel_reason: None,
            progress_pending: false,
            held: 0,
            queued_sent: false,
            large,
            questions: Vec::new(),
        };
        if large && !layered {
            call.state = State::Validating;
            call.held = size;
            self.held_bytes += size;
            self.validating += 1;
            // Every validator busy: the call waits, and says so.
            let waits = self.shared.runner.validators_busy();
            self.actions
                .push_back(Action::Validate(Box::new(exec::Validate {
                    key,
                    tool: call.tool.clone(),
                    params,
                    max_violations,
                    cancel,
                })));
            self.calls.insert(key, call);
            if waits {
                self.announce_queued(key);
            }
            return;
        }
        call.params = Some(params);
        self.calls.insert(key, call);
        if start_now {
            self.start(key);
        } else {
            self.enqueue(key, size);
        }
    }

    /// Says a refusal (counted already): the call's one `TOOL_DONE ERROR`,
    /// after an `ERROR` too for an unknown tool (docs/protocol.md §6.4).
    fn refuse_call(
        &mut self,
        refused: Refused,
        call_id: String,
        name: Option<&str>,
        to: Addressed,
    ) {
        let failure = self.refused_failure(refused, name);
        if failure.code == ErrorCode::TOOL_NOT_FOUND {
            let mut detail = json!({ "call_id": call_id, "tool": name });
            if let Some(similar) = failure.details.as_ref() {
                detail["did_you_mean"] = similar["did_you_mean"].clone();
            }
            self.error_about(
                ErrorCode::TOOL_NOT_FOUND,
                failure.message.clone(),
                to.request_id.as_deref(),
                Some(detail),
                to.run_id.as_deref(),
                to.thread_id.as_deref(),
            );
        }
        self.push(Outgoing {
            run_id: to.run_id,
            thread_id: to.thread_id,
            ..tool_done(ToolDone::failed(call_id, failure))
        });
    }

    /// The `TOOL_DONE` failure of a call refused at admission.
    fn refused_failure(&self, refused: Refused, name: Option<&str>) -> ToolFailure {
        match refused {
            Refused::UnknownTool => {
                let Some(name) = name else {
                    return ToolFailure::new(ErrorCode::TOOL_NOT_FOUND, "Tool name missing");
                };
                let (message, similar) = self.tool_not_found(name);
                let failure = ToolFailure::new(ErrorCode::TOOL_NOT_FOUND, message);
                if similar.is_empty() {
                    failure
                } else {
                    failure.with_details(json!({ "did_you_mean": similar }))
                }
            }
            Refused::Forbidden(forbidden) => {
                ToolFailure::new(ErrorCode::FORBIDDEN, forbidden.message())
                    .with_details(forbidden.details())
            }
            Refused::InvalidParams(tool, found) => exec::invalid_params(tool.name(), &found),
            Refused::CheckFailed(tool) => exec::check_failed(tool.name()),
            Refused::Busy => {
                ToolFailure::new(ErrorCode::RATE_LIMITED, "Too many tool calls in flight")
            }
            Refused::Door(never) => match never {},
        }
    }

    /// `Tool <name> not found`, naming at most three tools the caller sees
    /// that it may have meant; and those names (`Snapshot::not_found`).
    pub(super) fn tool_not_found(&self, name: &str) -> (String, Vec<String>) {
        let caller = self.caller.as_deref();
        self.shared
            .registry
            .snapshot()
            .not_found(name, name, |t| self.config().shows(caller, t))
    }

    /// Puts an admitted call at the end of the queue (`QUEUED` unless said already).
    fn enqueue(&mut self, key: CallKey, size: usize) {
        let Some(call) = self.calls.get_mut(&key) else {
            return;
        };
        if call.held == 0 {
            call.held = size;
            self.held_bytes += size;
        }
        call.state = State::Queued;
        self.waiting.push_back(key);
        self.announce_queued(key);
    }

    /// `TOOL_UPDATE QUEUED`, once per call.
    fn announce_queued(&mut self, key: CallKey) {
        if let Some(call) = self.calls.get_mut(&key)
            && !call.queued_sent
        {
            call.queued_sent = true;
            self.push_update(key, UpdateStatus::Queued);
        }
    }

    /// Params validated off the session task: the call is admitted, or ends
    /// with `INVALID_PARAMS` (a validator that panicked: `INTERNAL_ERROR`).
    fn validated(&mut self, key: CallKey, verdict: Validation) {
        let Some(call) = self.calls.get_mut(&key) else {
            return; // cancelled meanwhile
        };
        if call.state != State::Validating {
            return;
        }
        self.validating -= 1;
        if let Some(span) = call.span() {
            span.since_start("tool.validate");
        }
        let name = call.tool.name().to_owned();
        if !matches!(verdict, Validation::Valid(_)) {
            // The call ends here: its params are no longer held.
            self.held_bytes -= std::mem::take(&mut call.held);
        }
        match verdict {
            Validation::Valid(params) => {
                call.params = Some(params);
                let size = call.held;
                if self.running < self.config().max_inflight_calls && self.waiting.is_empty() {
                    self.start(key);
                } else {
                    self.enqueue(key, size);
                }
            }
            Validation::Invalid(found) => {
                let failure = exec::invalid_params(&name, &found);
                let ended = Ended::failed(&failure.code);
                self.finish(key, ToolOutcome::Error(failure), ended);
                self.calls.remove(&key);
            }
            Validation::Failed => {
                let failure = ToolFailure::new(
                    ErrorCode::INTERNAL_ERROR,
                    format!("Internal error validating params for tool {name}"),
                );
                let ended = Ended::failed(&failure.code);
                self.finish(key, ToolOutcome::Error(failure), ended);
                self.calls.remove(&key);
            }
        }
    }

    /// Step 6: run a call in its own task ([`Action::Start`]), its timeout
    /// kept here.
    fn start(&mut self, key: CallKey) {
        let config = &self.shared.config;
        let (grace, default_timeout, announce) = (
            config.cancel_grace,
            config.tool_timeout,
            config.announce_running,
        );
        let render = Render {
            max_bytes: config.max_outbound_message_bytes,
            max_violations: config.max_violations,
        };
        let Some(call) = self.calls.get_mut(&key) else {
            return;
        };
        // A call that waited (its params validated off the session, or a
        // place in the queue) says for how long; one started at once did not.
        // A call that waits holds its params' bytes (queued, or validated
        // off the session); one started at once never held them.
        let waited = call.held > 0;
        if waited && let Some(span) = call.span() {
            span.since_start("tool.queue");
        }
        #[cfg(feature = "metrics")]
        if waited && let Some(book) = &call.book {
            let waited = self
                .shared
                .clock
                .now()
                .saturating_duration_since(book.received());
            self.shared.stats.call_waited(call.tool.name(), waited);
        }
        call.state = State::Running;
        self.held_bytes -= std::mem::take(&mut call.held);
        let params = call.params.take().unwrap_or(Value::Null);
        let timeout = call.tool.timeout().or(default_timeout);
        let start = exec::Start {
            key,
            tool: call.tool.clone(),
            params,
            call_id: call.call_id.clone(),
            session_id: Arc::clone(&self.id),
            cancel: call.cancel.clone(),
            slot: Arc::clone(&call.slot),
            state: Arc::clone(&self.shared.state),
            caller: self.caller.clone(),
            limits: exec::Limits {
                timeout: None,
                grace,
                render: Some(render),
            },
            inline: !call.large,
            peer: None,
            trace: call.span().map(CallSpan::link).unwrap_or_default(),
            unchecked: self.shared.runner.layered().then_some(exec::Unchecked {
                max_violations: config.max_violations,
                large: call.large,
            }),
        };
        self.actions.push_back(Action::Start(Box::new(start)));
        self.running += 1;
        if let Some(timeout) = timeout {
            let at = self.shared.clock.now() + timeout;
            self.arm_call(key, at);
        }
        if announce {
            self.push_update(key, UpdateStatus::Running);
        }
    }

    /// A call's deadline passed (see `session::timers`): a running call timed
    /// out; a cancelled one's grace period ran out.
    pub(super) fn call_deadline(&mut self, key: CallKey, at: Instant) {
        let Some(call) = self.calls.get(&key) else {
            return;
        };
        if call.deadline != Some(at) {
            return; // an earlier deadline of a call that moved on
        }
        match call.state {
            State::Running => self.timed_out(key),
            State::Cancelling => {
                // The task is being aborted (the runner keeps the same grace)
                // and keeps its slot until it stops; the client hears now.
                let reason = call.cancel_reason.clone();
                self.finish_cancelled(key, reason);
            }
            State::Validating | State::Queued | State::Done => {}
        }
    }

    /// A running call's timeout elapsed: its `TOOL_DONE TIMEOUT` now, and the
    /// task is cancelled (it keeps its slot until it stops, within the grace).
    fn timed_out(&mut self, key: CallKey) {
        let Some(call) = self.calls.get(&key) else {
            return;
        };
        if call.state != State::Running {
            return;
        }
        let ms = call
            .tool
            .timeout()
            .or(self.shared.config.tool_timeout)
            .unwrap_or_default()
            .as_millis();
        let failure = ToolFailure::new(
            ErrorCode::TIMEOUT,
            format!("Tool {} timed out after {ms} ms", call.tool.name()),
        );
        self.finish(key, ToolOutcome::Error(failure), Ended::TimedOut);
        if let Some(call) = self.calls.get_mut(&key) {
            call.state = State::Done; // keeps its slot until the task stops
            call.deadline = None;
            call.cancel.cancel();
        }
    }

    /// Starts waiting calls while slots are free.
    fn admit_waiting(&mut self) {
        while self.running < self.shared.config.max_inflight_calls {
            let Some(key) = self.waiting.pop_front() else {
                break;
            };
            self.start(key);
        }
    }

    pub(crate) fn handle_event(&mut self, event: CallEvent) {
        match event {
            CallEvent::Progress(key) => {
                if self
                    .calls
                    .get(&key)
                    .is_some_and(|c| c.state == State::Running)
                {
                    self.flush_logs(key);
                    self.flush_progress(key);
                    self.flush_questions(key);
                }
            }
            // A session's calls are timed here (`session::timers`); a task
            // that keeps its own timeout says so the same way.
            CallEvent::TimedOut(key) => self.timed_out(key),
            CallEvent::Validated(key, verdict) => self.validated(key, *verdict),
            CallEvent::Finished(key, outcome) => {
                self.running = self.running.saturating_sub(1);
                if let Some(state) = self.calls.get(&key).map(|c| c.state) {
                    match state {
                        State::Running => self.finish_with(key, *outcome),
                        State::Cancelling => {
                            let reason = self.calls.get(&key).and_then(|c| c.cancel_reason.clone());
                            self.finish_cancelled(key, reason);
                        }
                        State::Done | State::Queued | State::Validating => {}
                    }
                    self.calls.remove(&key);
                }
                self.admit_waiting();
            }
        }
    }

    fn finish_with(&mut self, key: CallKey, outcome: Outcome) {
        let Some(call) = self.calls.get(&key) else {
            return;
        };
        let config = self.config();
        let policy = Policy {
            max_violations: config.max_violations,
            strict_output_validation: config.strict_output_validation,
            debug_errors: config.debug_errors,
        };
        let (completion, ended) = exec::complete(&call.tool, outcome, policy, &self.shared.stats);
        let result = match completion {
            Completion::Done(outcome) => DoneResult::Outcome(outcome),
            Completion::Encoded(Ok(json)) => DoneResult::Json(json),
            Completion::Encoded(Err(size)) => DoneResult::TooLarge(size),
        };
        self.finish_done(key, result, ended);
    }

    fn finish_cancelled(&mut self, key: CallKey, reason: Option<String>) {
        self.finish(key, ToolOutcome::Cancelled(reason), Ended::Cancelled);
    }

    /// Issues the call's one `TOOL_DONE`, after any progress it reported.
    fn finish(&mut self, key: CallKey, outcome: ToolOutcome, ended: Ended) {
        self.finish_done(key, DoneResult::Outcome(outcome), ended);
    }

    /// Issues the call's one `TOOL_DONE`. One longer than
    /// `max_outbound_message_bytes` becomes `TOOL_DONE ERROR` code
    /// `RESULT_TOO_LARGE` (docs/protocol.md §18.1): still exactly one.
    fn finish_done(&mut self, key: CallKey, result: DoneResult, ended: Ended) {
        self.flush_logs(key);
        self.flush_progress(key);
        let limit = self.config().max_outbound_message_bytes;
        let Some(call) = self.calls.get_mut(&key) else {
            return;
        };
        call.slot.close();
        // Questions still open are closed: answers to them are now unknown
        // requests, and the tool (if it still waits) hears `CallEnded`.
        for question in call.questions.drain(..) {
            question.span.end("cancelled");
        }
        call.state = State::Done;
        let now = self.shared.clock.now();
        let about = |done: Outgoing| Outgoing {
            run_id: call.run_id.clone(),
            thread_id: call.thread_id.clone(),
            ..done
        };
        let built = match result {
            DoneResult::Outcome(outcome) => {
                let done = ToolDone {
                    call_id: call.call_id.clone(),
                    outcome,
                };
                Prepared::within(&about(tool_done(done)), limit)
            }
            DoneResult::Json(json) => {
                let env = raw_tool_done(call, json.as_deref());
                if env.len() > limit {
                    Err(env.len())
                } else {
                    Ok(env)
                }
            }
            DoneResult::TooLarge(size) => {
                // The envelope around a result of `size` bytes.
                let around = raw_tool_done(call, Some(b"")).len();
                Err(around.saturating_add(size))
            }
        };
        let (env, ended) = match built {
            Ok(env) => (env, ended),
            Err(size) => {
                static TOO_LARGE: Throttle = Throttle::new();
                if let Some(suppressed) = TOO_LARGE.allow() {
                    tracing::warn!(tool = %call.tool.name(), size, limit, suppressed, "tool result too large to send");
                }
                let failure = ToolFailure::new(
                    ErrorCode::RESULT_TOO_LARGE,
                    format!("Result of {size} bytes exceeds {limit}"),
                )
                .with_details(json!({ "size": size, "limit": limit }));
                let done = ToolDone::failed(call.call_id.clone(), failure);
                (
                    Prepared::new(&about(tool_done(done))),
                    Ended::failed(&ErrorCode::RESULT_TOO_LARGE),
                )
            }
        };
        let latency = call.book.take().map(|book| book.finish(ended, now));
        let latency = latency.unwrap_or_default();
        let stats = &self.shared.stats;
        let subject = self.subject.as_deref();
        let (tool, id) = (call.tool.name(), &call.call_id);
        stats.access("haip", tool, id, subject, ended, latency, env.len());
        let call_id = call.call_id.clone();
        self.active_ids.remove(&call_id);
        self.record_call_closed(&call_id);
        self.push_prepared(env, None);
    }

    /// Moves a reported progress value into the outbox, replacing an unsent one
    /// of the same call (latest wins). An update longer than
    /// `max_outbound_message_bytes` is dropped (progress may be; docs/protocol.md §6.5).
    fn flush_progress(&mut self, key: CallKey) {
        let Some(call) = self.calls.get(&key) else {
            return;
        };
        let Some(Progress { percent, partial }) = call.slot.take() else {
            return;
        };
        let pending = call.progress_pending;
        let env = Prepared::within(
            &update(call, UpdateStatus::Running, percent, partial),
            self.config().max_outbound_message_bytes,
        );
        let env = match env {
            Ok(env) => env,
            Err(size) => {
                static PROGRESS: Throttle = Throttle::new();
                if let Some(suppressed) = PROGRESS.allow() {
                    tracing::warn!(call_id = %call.call_id, size, suppressed, "progress update too large to send; dropped");
                }
                return;
            }
        };
        if pending {
            let queued = self.outbox.iter_mut().rev().find_map(|p| match p {
                Pending::New { env, progress_of } if *progress_of == Some(key) => Some(env),
                _ => None,
            });
            if let Some(queued) = queued {
                let old = std::mem::replace(queued, env);
                let new_len = queued.len();
                self.count_new(old.len(), false);
                self.count_new(new_len, true);
                return;
            }
        }
        if let Some(call) = self.calls.get_mut(&key) {
            call.progress_pending = true;
        }
        self.push_prepared(env, Some(key));
    }

    /// Moves a call's log lines into the outbox, in order (docs/protocol.md §6.11):
    /// those at or above the client's level, if its `accept_events` lets
    /// `TOOL_UPDATE` through. A line longer than `max_outbound_message_bytes`
    /// is dropped.
    fn flush_logs(&mut self, key: CallKey) {
        let Some(call) = self.calls.get(&key) else {
            return;
        };
        let (lines, dropped) = call.slot.take_logs();
        if lines.is_empty() && dropped == 0 {
            return;
        }
        if !self.accepts(EventType::ToolUpdate) {
            return;
        }
        let limit = self.config().max_outbound_message_bytes;
        let dropped = (dropped > 0).then(|| LogLine::dropped(dropped));
        let mut envs = Vec::with_capacity(lines.len() + 1);
        for line in lines.iter().chain(dropped.as_ref()) {
            if line.level < self.log_level {
                continue;
            }
            let mut out = update(call, UpdateStatus::Running, None, None);
            out.payload["log"] = line.to_json();
            match Prepared::within(&out, limit) {
                Ok(env) => envs.push(env),
                Err(size) => {
                    static LOG_LINE: Throttle = Throttle::new();
                    if let Some(suppressed) = LOG_LINE.allow() {
                        tracing::warn!(call_id = %call.call_id, size, suppressed, "log line too large to send; dropped");
                    }
                }
            }
        }
        for env in envs {
            self.push_prepared(env, None);
        }
    }

    /// Puts a call's new questions to the client (`WAITING_INPUT`), or fails
    /// them at once when the client cannot answer (docs/protocol.md §6.11).
    fn flush_questions(&mut self, key: CallKey) {
        let tool_input = self.tool_input;
        let Some(call) = self.calls.get(&key) else {
            return;
        };
        let asks = call.slot.take_asks();
        if asks.is_empty() {
            return;
        }
        let limit = self.config().max_outbound_message_bytes;
        let mut asked = Vec::new();
        for PendingQuestion {
            message,
            form,
            reply,
        } in asks
        {
            if !tool_input {
                let _ = reply.send(Err(AskError::Unsupported));
                continue;
            }
            if call.questions.len() + asked.len() >= MAX_OPEN_QUESTIONS {
                let _ = reply.send(Err(too_many_questions()));
                continue;
            }
            let request_id = self.shared.ids.fresh();
            let mut out = update(call, UpdateStatus::WaitingInput, None, None);
            out.payload["input_request"] = json!({
                "request_id": request_id,
                "message": message,
                "schema": form.schema(),
            });
            match Prepared::within(&out, limit) {
                Ok(env) => asked.push((
                    env,
                    Question {
                        request_id,
                        form,
                        reply,
                        span: call.span().map(CallSpan::question).unwrap_or_default(),
                    },
                )),
                Err(size) => {
                    let _ = reply.send(Err(AskError::Failed(format!(
                        "the question is {size} bytes, over the {limit}-byte limit"
                    ))));
                }
            }
        }
        for (env, question) in asked {
            self.shared.stats.question("asked");
            self.push_prepared(env, None);
            if let Some(call) = self.calls.get_mut(&key) {
                call.questions.push(question);
            }
        }
    }

    /// `TOOL_INPUT`: an answer to an open question (docs/protocol.md §6.11). An answer
    /// that does not fit the form gets `INVALID_PARAMS`, and the question
    /// stays open; one to no open question gets `REQUEST_NOT_FOUND`.
    pub(super) fn handle_tool_input(&mut self, msg: &Inbound, input: ToolInput) {
        let ToolInput {
            call_id,
            request_id,
            action,
            content,
        } = input;
        let max_violations = self.config().max_violations;
        let related_id = msg.id.as_deref();
        let found = self.active_ids.get(&call_id).copied().and_then(|key| {
            let call = self.calls.get(&key)?;
            let at = call
                .questions
                .iter()
                .position(|q| q.request_id == request_id)?;
            Some((key, at))
        });
        let Some((key, at)) = found else {
            self.error(
                ErrorCode::REQUEST_NOT_FOUND,
                format!("No open input request {request_id}"),
                related_id,
                Some(json!({ "call_id": call_id, "request_id": request_id })),
            );
            return;
        };
        let answer = match action {
            InputAction::Accept => {
                let content = content.unwrap_or(Value::Object(Map::new()));
                let question = &self.calls[&key].questions[at];
                let found = question.form.check(&content, max_violations);
                if !found.is_empty() {
                    let mut detail = json!({
                        "call_id": call_id,
                        "request_id": request_id,
                        "violations": found.details(),
                    });
                    let (field, n) = if found.exhaustive {
                        ("total", found.total)
                    } else {
                        ("total_at_least", found.total)
                    };
                    detail[field] = n.into();
                    self.error(
                        ErrorCode::INVALID_PARAMS,
                        "Answer does not match the question's schema",
                        related_id,
                        Some(detail),
                    );
                    return;
                }
                Answer::Accepted(content)
            }
            InputAction::Decline => Answer::Declined,
            InputAction::Cancel => Answer::Cancelled,
        };
        self.shared.stats.question(match answer {
            Answer::Accepted(_) => "answered",
            Answer::Declined => "declined",
            Answer::Cancelled => "cancelled",
        });
        if let Some(call) = self.calls.get_mut(&key) {
            let question = call.questions.swap_remove(at);
            question.span.end(match &answer {
                Answer::Accepted(_) => "answered",
                Answer::Declined => "declined",
                Answer::Cancelled => "cancelled",
            });
            // The tool may have stopped waiting (a clone asked and gave up).
            let _ = question.reply.send(Ok(answer));
        }
        self.push_update(key, UpdateStatus::Running);
    }

    /// A `QUEUED`, `RUNNING` (announce) or `CANCELLING` update: never merged.
    fn push_update(&mut self, key: CallKey, status: UpdateStatus) {
        if let Some(call) = self.calls.get(&key) {
            let out = update(call, status, None, None);
            self.push(out);
        }
    }

    /// `TOOL_CANCEL` (docs/protocol.md §6.7). Unknown, finished or cancelling calls are ignored.
    pub(super) fn cancel_call(&mut self, call_id: &str, reason: Option<String>) {
        if let Some(&key) = self.active_ids.get(call_id) {
            self.cancel_key(key, reason);
        }
    }

    fn cancel_key(&mut self, key: CallKey, reason: Option<String>) {
        let Some(state) = self.calls.get(&key).map(|c| c.state) else {
            return;
        };
        match state {
            State::Queued | State::Validating => {
                if state == State::Validating {
                    self.validating -= 1;
                } else {
                    self.waiting.retain(|k| *k != key);
                }
                if let Some(call) = self.calls.get_mut(&key) {
                    self.held_bytes -= std::mem::take(&mut call.held);
                    // A validation still waiting for its turn stops waiting.
                    call.cancel.cancel();
                }
                self.push_update(key, UpdateStatus::Cancelling);
                self.finish_cancelled(key, reason);
                self.calls.remove(&key);
            }
            State::Running => {
                self.flush_progress(key);
                self.push_update(key, UpdateStatus::Cancelling);
                if let Some(call) = self.calls.get_mut(&key) {
                    call.slot.close();
                    for question in call.questions.drain(..) {
                        question.span.end("cancelled");
                    }
                    call.state = State::Cancelling;
                    call.cancel_reason = reason;
                    call.cancel.cancel();
                }
                // `TOOL_DONE CANCELLED` when the task stops, at the latest
                // when the grace period ends.
                let at = self.shared.clock.now() + self.shared.config.cancel_grace;
                self.arm_call(key, at);
            }
            State::Cancelling | State::Done => {}
        }
    }

    /// Cancels every active call that carried `run_id`; returns how many.
    pub(super) fn cancel_run_calls(&mut self, run_id: &str, reason: &str) -> usize {
        let keys = self.active_keys(|c| c.run_id.as_deref() == Some(run_id));
        for &key in &keys {
            self.cancel_key(key, Some(reason.to_owned()));
        }
        keys.len()
    }

    /// Graceful shutdown: every active call gets the cancel sequence.
    pub(crate) fn handle_shutdown(&mut self) {
        // The connection is about to close for good: a paused channel must not
        // hold back the TOOL_DONEs every call is owed.
        self.gate.resume_all();
        for key in self.active_keys(|_| true) {
            self.cancel_key(key, Some("server shutdown".to_owned()));
        }
    }

    /// Keys of calls still owed a `TOOL_DONE`, in acceptance order.
    fn active_keys(&self, filter: impl Fn(&Call) -> bool) -> Vec<CallKey> {
        let mut keys: Vec<CallKey> = self
            .calls
            .iter()
            .filter(|(_, c)| {
                matches!(c.state, State::Queued | State::Validating | State::Running) && filter(c)
            })
            .map(|(k, _)| *k)
            .collect();
        keys.sort();
        keys
    }

    /// No call is owed a `TOOL_DONE` and no task holds a slot.
    pub(crate) fn is_idle(&self) -> bool {
        self.calls.is_empty() && self.running == 0
    }
}

impl Drop for Session {
    /// The connection is gone and nothing will be delivered: stop every task.
    /// Calls still owed a `TOOL_DONE` count as cancelled.
    fn drop(&mut self) {
        // Unsent envelopes leave the server's `outboundBytes`, and the window
        // the replay budget, with the session.
        let unsent = self.new_bytes as u64;
        self.shared.stats.outbound_bytes.fetch_sub(unsent, Relaxed);
        self.shared.replay.sub(self.window_cost());
        for call in self.calls.values_mut() {
            call.cancel.cancel();
            if let Some(book) = call.book.take() {
                book.abandon();
            }
        }
    }
}

/// How a call ended, for its `TOOL_DONE`.
enum DoneResult {
    /// Any status, the result (if any) a value.
    Outcome(ToolOutcome),
    /// `OK`, the value JSON text rendered in the call's task (`None` for
    /// `null`: no `result`).
    Json(Option<Vec<u8>>),
    /// `OK`, but the rendered value is longer than the limit: this many bytes.
    TooLarge(usize),
}

/// A `TOOL_DONE OK` whose `result` is JSON text already (the payload written
/// as text: no `Value` is built for it).
fn raw_tool_done(call: &Call, result: Option<&[u8]>) -> Prepared {
    let payload = ToolDone::json_from_parts(&call.call_id, ToolStatus::Ok, result);
    Prepared::from_json(
        Channel::Agent,
        EventType::ToolDone,
        &payload,
        call.run_id.as_deref(),
        call.thread_id.as_deref(),
    )
}

/// Params larger than this (the `TOOL_CALL`'s bytes) are validated off the
/// session task (docs/protocol.md §18.1).
pub(crate) const LARGE_PARAMS: usize = 64 * 1024;

/// A `TOOL_UPDATE` about `call`, `partial` moved into the payload, not copied.
fn update(
    call: &Call,
    status: UpdateStatus,
    progress: Option<Number>,
    partial: Option<Value>,
) -> Outgoing {
    let update = ToolUpdate {
        call_id: call.call_id.clone(),
        status,
        progress,
        partial,
        log: None,
        input_request: None,
    };
    Outgoing {
        channel: Channel::Agent,
        event: EventType::ToolUpdate,
        payload: update.into_value(),
        run_id: call.run_id.clone(),
        thread_id: call.thread_id.clone(),
    }
}

/// A `TOOL_DONE`, its result moved into the payload, not copied.
fn tool_done(done: ToolDone) -> Outgoing {
    Outgoing::new(Channel::Agent, EventType::ToolDone, done.into_value())
}

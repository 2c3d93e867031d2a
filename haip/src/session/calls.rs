//! Tool calls inside a session: admission, queueing, progress, cancellation and
//! the one `TOOL_DONE` every accepted call ends with (HAIP.md §6.4–§6.7).

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::{Pending, Session};
use crate::Context;
use crate::context::{Progress, ProgressSink, ProgressSlot};
use crate::exec::{self, CallEvent, CallKey, Outcome};
use crate::protocol::{Channel, ErrorCode, EventType, Inbound, Outgoing};
use crate::server::Ended;
use crate::tool::{Tool, ToolError};

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
    slot: Arc<ProgressSlot>,
    received: Instant,
    cancel_reason: Option<String>,
    /// A progress update of this call is waiting in the outbox.
    pub(super) progress_pending: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Queued,
    Running,
    Cancelling,
    /// `TOOL_DONE` issued (timeout) while the task still holds its slot.
    Done,
}

impl Session {
    pub(super) fn handle_tool_call(&mut self, msg: Inbound) {
        let Inbound {
            id,
            run_id,
            thread_id,
            mut payload,
            ..
        } = msg;
        let run_id = match payload.get("run_id") {
            Some(Value::String(r)) if run_id.is_none() => Some(r.clone()),
            _ => run_id,
        };
        // Step 1: the call id.
        let call_id = match payload.get("call_id") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => id
                .clone()
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
        };
        let about = |out: Outgoing| Outgoing {
            run_id: run_id.clone(),
            thread_id: thread_id.clone(),
            ..out
        };
        // Step 2: duplicates of an active call get an ERROR and nothing else.
        if self.active_ids.contains_key(&call_id) {
            self.error_about(
                ErrorCode::INVALID_MESSAGE,
                "Duplicate call_id",
                id.as_deref(),
                Some(json!({ "call_id": call_id, "reason": "duplicate call_id" })),
                run_id.as_deref(),
                thread_id.as_deref(),
            );
            return;
        }
        self.shared.stats.calls_total.fetch_add(1, Relaxed);
        let received = Instant::now();
        // Step 3: lookup.
        let name = match payload.get("tool") {
            Some(Value::String(name)) => Some(name.clone()),
            _ => None,
        };
        let tool = name.as_deref().and_then(|n| self.shared.registry.get(n));
        let Some(tool) = tool else {
            let message = match &name {
                Some(n) => format!("Tool {n} not found"),
                None => "Tool name missing".to_owned(),
            };
            self.error_about(
                ErrorCode::TOOL_NOT_FOUND,
                message.clone(),
                id.as_deref(),
                Some(json!({ "call_id": call_id, "tool": name })),
                run_id.as_deref(),
                thread_id.as_deref(),
            );
            let done = tool_done(
                &call_id,
                "ERROR",
                Some(ToolError::new(ErrorCode::TOOL_NOT_FOUND, message).to_result()),
            );
            self.push(about(done));
            self.shared
                .stats
                .call_ended(Ended::Failed, Some(received.elapsed()));
            return;
        };
        // Step 4: validate.
        let params = match payload.remove("params") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(p) => p,
        };
        let violations = tool.validate_params(&params);
        if !violations.is_empty() {
            let error =
                ToolError::invalid_params(format!("Invalid params for tool {}", tool.name()))
                    .with_details(Value::Array(
                        violations.iter().map(|v| v.to_json()).collect(),
                    ));
            self.push(about(tool_done(&call_id, "ERROR", Some(error.to_result()))));
            self.shared
                .stats
                .call_ended(Ended::Failed, Some(received.elapsed()));
            return;
        }
        // Step 5: admit.
        let config = self.config();
        let start_now = self.running < config.max_inflight_calls && self.waiting.is_empty();
        if !start_now && self.waiting.len() >= config.max_queued_calls {
            let error = ToolError::new(ErrorCode::RATE_LIMITED, "Too many tool calls in flight");
            self.push(about(tool_done(&call_id, "ERROR", Some(error.to_result()))));
            self.shared
                .stats
                .call_ended(Ended::Failed, Some(received.elapsed()));
            return;
        }
        let key = CallKey(self.next_key);
        self.next_key += 1;
        self.active_ids.insert(call_id.clone(), key);
        self.calls.insert(
            key,
            Call {
                call_id,
                tool,
                params: Some(params),
                run_id,
                thread_id,
                state: State::Queued,
                cancel: CancellationToken::new(),
                slot: Arc::new(ProgressSlot::default()),
                received,
                cancel_reason: None,
                progress_pending: false,
            },
        );
        if start_now {
            self.start(key);
        } else {
            self.waiting.push_back(key);
            self.push_update(key, json!({ "status": "QUEUED" }));
        }
    }

    /// Step 6: run a call in its own task.
    fn start(&mut self, key: CallKey) {
        let config = &self.shared.config;
        let (grace, default_timeout, announce) = (
            config.cancel_grace,
            config.tool_timeout,
            config.announce_running,
        );
        let Some(call) = self.calls.get_mut(&key) else {
            return;
        };
        call.state = State::Running;
        let params = call.params.take().unwrap_or(Value::Null);
        let sink = ProgressSink {
            key,
            slot: Arc::clone(&call.slot),
            events: self.events.clone(),
        };
        let ctx = Context::new(
            call.call_id.clone(),
            Arc::clone(&self.id),
            call.cancel.clone(),
            Some(sink),
            Some(Arc::clone(&self.shared.state)),
            self.subject.clone(),
        );
        let timeout = call.tool.timeout().or(default_timeout);
        let limits = exec::Limits { timeout, grace };
        exec::spawn(
            key,
            call.tool.clone(),
            params,
            ctx,
            call.cancel.clone(),
            limits,
            self.events.clone(),
        );
        self.running += 1;
        if announce {
            self.push_update(key, json!({ "status": "RUNNING" }));
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
                    self.flush_progress(key);
                }
            }
            CallEvent::TimedOut(key) => {
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
                let error = ToolError::new(
                    ErrorCode::TIMEOUT,
                    format!("Tool {} timed out after {ms} ms", call.tool.name()),
                );
                self.finish(key, "ERROR", Some(error.to_result()), Ended::Failed);
                if let Some(call) = self.calls.get_mut(&key) {
                    call.state = State::Done; // keeps its slot until the task stops
                }
            }
            CallEvent::Finished(key, outcome) => {
                self.running = self.running.saturating_sub(1);
                if let Some(state) = self.calls.get(&key).map(|c| c.state) {
                    match state {
                        State::Running => self.finish_with(key, *outcome),
                        State::Cancelling => {
                            let reason = self.calls.get(&key).and_then(|c| c.cancel_reason.clone());
                            self.finish_cancelled(key, reason);
                        }
                        State::Done | State::Queued => {}
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
        let name = call.tool.name().to_owned();
        match outcome {
            Outcome::Returned(Ok(value)) => {
                let violations = call.tool.validate_result(&value);
                if !violations.is_empty() {
                    self.shared.stats.warnings.fetch_add(1, Relaxed);
                    tracing::warn!(tool = %name, ?violations, "tool result violates its output schema");
                    if self.shared.config.strict_output_validation {
                        let error = ToolError::execution(format!(
                            "Result of tool {name} violates its output schema"
                        ))
                        .with_details(Value::Array(
                            violations.iter().map(|v| v.to_json()).collect(),
                        ));
                        self.finish(key, "ERROR", Some(error.to_result()), Ended::Failed);
                        return;
                    }
                }
                let result = (!value.is_null()).then_some(value);
                self.finish(key, "OK", result, Ended::Ok);
            }
            Outcome::Returned(Err(e)) if e.is_cancelled() => {
                self.finish(key, "CANCELLED", None, Ended::Cancelled)
            }
            Outcome::Returned(Err(e)) => {
                self.finish(key, "ERROR", Some(e.to_result()), Ended::Failed)
            }
            Outcome::Panicked(text) => {
                let message = exec::panic_message(&name, &text, self.shared.config.debug_errors);
                let error = ToolError::new(ErrorCode::INTERNAL_ERROR, message);
                self.finish(key, "ERROR", Some(error.to_result()), Ended::Failed);
            }
            // Stopped without a cancel from us: only when the session is going away.
            Outcome::Stopped => self.finish(key, "CANCELLED", None, Ended::Cancelled),
        }
    }

    fn finish_cancelled(&mut self, key: CallKey, reason: Option<String>) {
        let result = reason.map(|r| json!({ "reason": r }));
        self.finish(key, "CANCELLED", result, Ended::Cancelled);
    }

    /// Issues the call's one `TOOL_DONE`, after any progress it reported.
    fn finish(&mut self, key: CallKey, status: &str, result: Option<Value>, ended: Ended) {
        self.flush_progress(key);
        let Some(call) = self.calls.get_mut(&key) else {
            return;
        };
        call.slot.close();
        call.state = State::Done;
        let latency = call.received.elapsed();
        let done = Outgoing {
            run_id: call.run_id.clone(),
            thread_id: call.thread_id.clone(),
            ..tool_done(&call.call_id, status, result)
        };
        let call_id = call.call_id.clone();
        self.active_ids.remove(&call_id);
        self.push(done);
        self.shared.stats.call_ended(ended, Some(latency));
    }

    /// Moves a reported progress value into the outbox, replacing an unsent one
    /// of the same call (latest wins).
    fn flush_progress(&mut self, key: CallKey) {
        let Some(call) = self.calls.get(&key) else {
            return;
        };
        let Some(Progress { percent, partial }) = call.slot.take() else {
            return;
        };
        let mut update = json!({ "status": "RUNNING" });
        if let Some(percent) = percent {
            update["progress"] = Value::Number(percent);
        }
        if let Some(partial) = partial {
            update["partial"] = partial;
        }
        if call.progress_pending {
            let payload = self.update_payload(key, update);
            let queued = self.outbox.iter_mut().rev().find_map(|p| match p {
                Pending::New { out, progress_of } if *progress_of == Some(key) => Some(out),
                _ => None,
            });
            if let Some(out) = queued {
                out.payload = payload;
                return;
            }
            self.push_update_tagged(key, payload);
        } else {
            let payload = self.update_payload(key, update);
            self.push_update_tagged(key, payload);
        }
    }

    fn update_payload(&self, key: CallKey, fields: Value) -> Value {
        let mut payload = json!({ "call_id": self.calls.get(&key).map(|c| c.call_id.as_str()) });
        if let (Value::Object(p), Value::Object(f)) = (&mut payload, fields) {
            p.extend(f);
        }
        payload
    }

    fn push_update_tagged(&mut self, key: CallKey, payload: Value) {
        let Some(call) = self.calls.get_mut(&key) else {
            return;
        };
        call.progress_pending = true;
        let out = Outgoing {
            channel: Channel::Agent,
            event: EventType::ToolUpdate,
            payload,
            run_id: call.run_id.clone(),
            thread_id: call.thread_id.clone(),
        };
        self.outbox.push_back(Pending::New {
            out,
            progress_of: Some(key),
        });
    }

    /// A `QUEUED`, `RUNNING` (announce) or `CANCELLING` update: never merged.
    fn push_update(&mut self, key: CallKey, fields: Value) {
        let payload = self.update_payload(key, fields);
        let Some(call) = self.calls.get(&key) else {
            return;
        };
        let out = Outgoing {
            channel: Channel::Agent,
            event: EventType::ToolUpdate,
            payload,
            run_id: call.run_id.clone(),
            thread_id: call.thread_id.clone(),
        };
        self.push(out);
    }

    /// `TOOL_CANCEL` (HAIP.md §6.7). Unknown, finished or cancelling calls are ignored.
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
            State::Queued => {
                self.waiting.retain(|k| *k != key);
                self.push_update(key, json!({ "status": "CANCELLING" }));
                self.finish_cancelled(key, reason);
                self.calls.remove(&key);
            }
            State::Running => {
                self.flush_progress(key);
                self.push_update(key, json!({ "status": "CANCELLING" }));
                if let Some(call) = self.calls.get_mut(&key) {
                    call.slot.close();
                    call.state = State::Cancelling;
                    call.cancel_reason = reason;
                    call.cancel.cancel();
                }
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
    pub(crate) fn begin_shutdown(&mut self) {
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
            .filter(|(_, c)| matches!(c.state, State::Queued | State::Running) && filter(c))
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
        for call in self.calls.values() {
            call.cancel.cancel();
            if call.state != State::Done {
                self.shared.stats.call_ended(Ended::Cancelled, None);
            }
        }
    }
}

fn tool_done(call_id: &str, status: &str, result: Option<Value>) -> Outgoing {
    let mut payload = json!({ "call_id": call_id, "status": status });
    if let Some(result) = result {
        payload["result"] = result;
    }
    Outgoing::new(Channel::Agent, EventType::ToolDone, payload)
}

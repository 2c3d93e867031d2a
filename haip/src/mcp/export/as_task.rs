//! Exported calls that become MCP tasks (SEP-2663): for a client that takes
//! them, a call of a tool that supports tasks turns into one once it waits,
//! and runs on; its progress goes into the task's status, its end into the
//! task's record (`mcp/tasks.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use crate::mcp::model::{CallToolResult, RequestId};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::ExportService;
use super::calls::{Call, Stop, result_of, stopping};
use super::render::error_result;
use crate::context::{CallSlot, Caller};
use crate::exec::admit::CallBook;
use crate::exec::{CallEvent, CallKey, Limits, Outcome, Start, Unchecked};
use crate::mcp::tasks::{NOTE_EVERY, TaskPeer, Tasks, share_of};
use crate::otel::TraceLink;
use crate::protocol::json_len;
use crate::session::Shared;
use crate::session::tasks::{Rerun, TaskEnd, TaskRecord, TaskStatus};
use crate::stats::Ended;
use crate::tool::{TaskSupport, Tool};

/// How a call that may become a task was answered.
pub(super) enum AsTask {
    /// It is a task now, running on.
    Task(crate::mcp::model::CreateTaskResult),
    /// It could not become one (too many tasks): this says why.
    Refused(CallToolResult),
    /// It stopped before it became one: answered as any call.
    Stopped(Stop),
}

impl ExportService {
    /// Runs a call of a tool that supports tasks, for a client that takes
    /// them: it becomes a task once it waits for anything but answers of the
    /// client's next round (see [`TaskSupport`]).
    pub(super) async fn run_as_task(&self, mut call: Call<'_>) -> AsTask {
        // Who the task counts against: the `/mcp` front door's key for the
        // request; over stdio (no HTTP request) the one client, no share.
        let caller = share_of(call.request.key.as_ref(), call.subject.as_deref());
        let admission = match self.tasks.admit(caller) {
            Ok(admission) => admission,
            Err(why) => return AsTask::Refused(error_result(why, None)),
        };
        // What running it again needs, for a task that may outlive this
        // instance (its arguments, before they move into the call).
        let rerun = self.rerun_of(&call);
        let (events_tx, mut events) = mpsc::unbounded_channel();
        let slot = Arc::new(CallSlot::default());
        let cancel = self.shared.shutdown.child_token();
        let request = call.request;
        let peer = self.tasks.peer(request.can(), call.round.clone());
        let start = self.start_of(
            &mut call,
            cancel.clone(),
            Arc::clone(&slot),
            Arc::new(Arc::clone(&peer)),
        );
        let Call {
            tool,
            subject,
            permit,
            round,
            book,
            ..
        } = call;
        let request_id = request.id.clone();
        let logs = self.log_relay(request, tool);
        let required = tool.task_support() == TaskSupport::Required;
        let finished = match self.shared.runner.start(start, &events_tx) {
            Some((_, outcome)) => Some(*outcome),
            None => {
                drop(events_tx);
                if self.tasks.hand_over(&peer) {
                    None
                } else {
                    // It waits for answers of the client's next round: they
                    // come first (the task starts with them).
                    let round = round.as_deref().expect("only rounds hold a call back");
                    match self
                        .end_round(round, events, &slot, &cancel, permit, &logs)
                        .await
                    {
                        Stop::Outcome(outcome) if required => {
                            let call = Ending::new(request_id, subject, book);
                            let caller = admission.caller();
                            return self.ended_task(tool, &peer, caller, outcome, call).await;
                        }
                        stop => return AsTask::Stopped(stop),
                    }
                }
            }
        };
        if let Some(outcome) = finished {
            logs.flush(&slot).await;
            // Done at once: a plain result, unless the tool is always a task.
            if !required {
                // Answered as any call: the request ends the span.
                return AsTask::Stopped(Stop::Outcome(outcome));
            }
            let call = Ending::new(request_id, subject, book);
            let caller = admission.caller();
            return self.ended_task(tool, &peer, caller, outcome, call).await;
        }
        let created = self
            .tasks
            .create(&peer, subject.as_deref(), admission.caller(), None, rerun)
            .await;
        let created = match created {
            Ok(created) => created,
            Err(e) => {
                cancel.cancel();
                slot.close();
                self.shared.runner.tasks().spawn(stopping(events, permit));
                return AsTask::Refused(error_result(
                    format!("The task could not start: {e}"),
                    None,
                ));
            }
        };
        let shared = Arc::clone(&self.shared);
        let tasks = Arc::clone(&self.tasks);
        let tool = tool.clone();
        let ending = Ending::new(request_id, subject, book);
        self.shared.runner.tasks().spawn(async move {
            let stop = follow(&tasks, &peer, &mut events, &slot, &cancel).await;
            if matches!(stop, Stop::TimedOut) {
                // Stopped within the grace period, in the background.
                shared.runner.tasks().spawn(stopping(events, permit));
            } else {
                drop(permit);
            }
            let (ended, end) = task_end(&shared, &tool, stop, peer.cancel.is_cancelled());
            ending.count(&shared, &tool, ended, &end);
            tasks.finish(&peer, end).await;
            drop(admission);
        });
        AsTask::Task(created)
    }

    /// What running `call`'s task again needs, if it may run again on
    /// another instance: the store is shared, and its tool is marked
    /// idempotent (running it twice does no harm).
    fn rerun_of(&self, call: &Call<'_>) -> Option<Rerun> {
        if !self.tasks.reruns() || call.tool.annotations().idempotent_hint != Some(true) {
            return None;
        }
        let caller = call.caller.as_deref().map(|caller| {
            json!({
                "subject": caller.subject(),
                "scopes": caller.scopes(),
                "claims": caller.claims(),
            })
        });
        let can = call.request.can();
        Some(Rerun {
            tool: call.tool.name().to_owned(),
            arguments: call.params.clone(),
            caller,
            can: [can.elicit, can.sample, can.roots],
            attempt: 1,
            attempts: self.tasks.attempts(),
            answers: Map::new(),
        })
    }

    /// A task that ended as it began (a tool that is always a task).
    async fn ended_task(
        &self,
        tool: &Tool,
        peer: &Arc<TaskPeer>,
        caller: Option<&str>,
        outcome: Outcome,
        ending: Ending,
    ) -> AsTask {
        let (ended, end) = task_end(&self.shared, tool, Stop::Outcome(outcome), false);
        let subject = ending.subject.clone();
        ending.count(&self.shared, tool, ended, &end);
        let created = self
            .tasks
            .create(peer, subject.as_deref(), caller, Some(end), None)
            .await;
        match created {
            Ok(created) => AsTask::Task(created),
            Err(e) => AsTask::Refused(error_result(
                format!("The task could not be kept: {e}"),
                None,
            )),
        }
    }
}

/// Runs again, on this instance, a task taken over from an instance that
/// died (`record`, this instance's now: `TaskStore::take_claims`): its tool
/// called from the start with the same arguments, for the same caller, its
/// questions answered at once where its client answered them before; its
/// end recorded as any task's. A task whose tool is not here, or that finds
/// no room among this instance's tasks, fails, saying so.
pub(crate) fn run_again(shared: &Arc<Shared>, tasks: &Arc<Tasks>, record: TaskRecord) {
    let shared = Arc::clone(shared);
    let tasks = Arc::clone(tasks);
    let running = shared.runner.tasks().clone();
    running.spawn(async move {
        let peer = tasks.taken_over(&record);
        let Some(rerun) = record.rerun else {
            return;
        };
        let failed = |why: String| TaskEnd {
            status: TaskStatus::Failed,
            message: None,
            result: None,
            error: Some(json!({"code": crate::protocol::jsonrpc::INTERNAL_ERROR, "message": why})),
        };
        let Some(tool) = shared.registry.get(&rerun.tool) else {
            let why = format!(
                "tool {} is not served by the instance that took the task over",
                rerun.tool
            );
            tasks.finish(&peer, failed(why)).await;
            return;
        };
        let admission = match tasks.admit(record.caller.clone()) {
            Ok(admission) => admission,
            Err(why) => {
                let why = format!("the task could not run again: {why}");
                tasks.finish(&peer, failed(why)).await;
                return;
            }
        };
        // Its listen streams hear that it runs again.
        tasks.changed(&record.id).await;
        let (events_tx, mut events) = mpsc::unbounded_channel();
        let slot = Arc::new(CallSlot::default());
        let cancel = shared.shutdown.child_token();
        let config = &shared.config;
        let start = Start {
            key: CallKey(RUNS_AGAIN.fetch_add(1, Relaxed)),
            tool: tool.clone(),
            params: rerun.arguments,
            call_id: format!("{}-attempt-{}", record.id, rerun.attempt),
            session_id: Arc::from(format!("task-{}", record.id)),
            cancel: cancel.clone(),
            slot: Arc::clone(&slot),
            state: Arc::clone(&shared.state),
            caller: rerun.caller.as_ref().and_then(caller_of).map(Arc::new),
            limits: Limits {
                timeout: tool.timeout().or(config.tool_timeout),
                grace: config.cancel_grace,
                // MCP renders the value itself (structured content and text).
                render: None,
            },
            inline: true,
            peer: Some(Arc::new(crate::mcp::peer::Counted {
                inner: Arc::new(Arc::clone(&peer)),
                stats: Arc::clone(&shared),
                trace: TraceLink::default(),
            })),
            trace: TraceLink::default(),
            // Checked when the task was first called; with layers, after
            // them, as every call's.
            unchecked: shared.runner.layered().then_some(Unchecked {
                max_violations: config.max_violations,
                large: false,
            }),
        };
        let stop = match shared.runner.start(start, &events_tx) {
            Some((_, outcome)) => Stop::Outcome(*outcome),
            None => {
                drop(events_tx);
                follow(&tasks, &peer, &mut events, &slot, &cancel).await
            }
        };
        if matches!(stop, Stop::TimedOut) {
            // Stopped within the grace period, in the background.
            shared.runner.tasks().spawn(async move {
                while let Some(event) = events.recv().await {
                    if matches!(event, CallEvent::Finished(..)) {
                        break;
                    }
                }
            });
        }
        let (_, end) = task_end(&shared, &tool, stop, peer.cancel.is_cancelled());
        tasks.finish(&peer, end).await;
        drop(admission);
    });
}

/// Calls run again, numbered (a call's key within its own channel).
static RUNS_AGAIN: AtomicU64 = AtomicU64::new(0);

/// The caller a re-runnable task recorded (`{subject, scopes, claims}`).
fn caller_of(recorded: &Value) -> Option<Caller> {
    let subject = recorded.get("subject")?.as_str()?;
    let scopes: Vec<String> = recorded
        .get("scopes")
        .and_then(Value::as_array)
        .map(|s| {
            s.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let claims = recorded
        .get("claims")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    Some(Caller::new(subject).with_scopes(scopes).with_claims(claims))
}

/// Follows a task's call to its end: its progress into the task's status
/// message, `tasks/cancel` into the call's cancellation.
async fn follow(
    tasks: &Tasks,
    peer: &TaskPeer,
    events: &mut mpsc::UnboundedReceiver<CallEvent>,
    slot: &CallSlot,
    cancel: &CancellationToken,
) -> Stop {
    let mut noted: Option<Instant> = None;
    loop {
        let event = tokio::select! {
            () = peer.cancel.cancelled(), if !cancel.is_cancelled() => {
                cancel.cancel();
                slot.close();
                continue;
            }
            event = events.recv() => event,
        };
        match event {
            Some(CallEvent::Progress(_)) => {
                if noted.is_some_and(|at| at.elapsed() < NOTE_EVERY) {
                    continue;
                }
                let Some(progress) = slot.take() else {
                    continue;
                };
                let text = match (progress.partial, progress.percent) {
                    (Some(Value::String(s)), _) => s,
                    (Some(other), _) => other.to_string(),
                    (None, Some(percent)) => format!("{percent}%"),
                    (None, None) => continue,
                };
                noted = Some(Instant::now());
                tasks.note(peer, text).await;
            }
            Some(CallEvent::TimedOut(_)) => {
                slot.close();
                return Stop::TimedOut;
            }
            Some(CallEvent::Finished(_, outcome)) => return Stop::Outcome(*outcome),
            Some(CallEvent::Validated(..)) => {}
            None => return Stop::Outcome(Outcome::Stopped),
        }
    }
}

/// How a task's call ended, as the task's end: a result (an error result
/// too: the tool ran) completes it, a panic fails it (an error of the
/// server's), a cancellation by the client cancels it.
fn task_end(shared: &Shared, tool: &Tool, stop: Stop, cancelled: bool) -> (Ended, TaskEnd) {
    let panicked = matches!(stop, Stop::Outcome(Outcome::Panicked(_)));
    let (ended, result) = result_of(shared, tool, stop);
    if cancelled {
        let end = TaskEnd {
            status: TaskStatus::Cancelled,
            message: Some("Cancelled by the client".to_owned()),
            result: None,
            error: None,
        };
        return (Ended::Cancelled, end);
    }
    let text = |result: &CallToolResult| {
        result
            .content
            .iter()
            .find_map(|c| c.as_text().map(str::to_owned))
            .unwrap_or_default()
    };
    if panicked {
        let end = TaskEnd {
            status: TaskStatus::Failed,
            message: None,
            result: None,
            error: Some(
                serde_json::json!({"code": crate::protocol::jsonrpc::INTERNAL_ERROR, "message": text(&result)}),
            ),
        };
        return (ended, end);
    }
    let end = TaskEnd {
        status: TaskStatus::Completed,
        message: None,
        result: Some(serde_json::to_value(&result).unwrap_or(Value::Null)),
        error: None,
    };
    (ended, end)
}

/// What a call that became a task keeps for its end: its book, and what its
/// access-log line says, counted once, wherever it ends.
struct Ending {
    request_id: RequestId,
    subject: Option<Arc<str>>,
    book: CallBook,
}

impl Ending {
    /// Takes the call's book from the request, which no longer ends it.
    fn new(
        request_id: RequestId,
        subject: Option<Arc<str>>,
        book: &mut Option<CallBook>,
    ) -> Ending {
        Ending {
            request_id,
            subject,
            book: book.take().expect("a call becomes a task once"),
        }
    }

    /// The call of `tool` ended so, with `end` its task's record.
    fn count(self, shared: &Shared, tool: &Tool, ended: Ended, end: &TaskEnd) {
        let bytes = json_len(&end.result) + json_len(&end.error);
        let latency = self.book.finish(ended, shared.clock.now());
        let (id, who) = (&self.request_id, self.subject.as_deref());
        let stats = &shared.stats;
        stats.access("mcp-task", tool.name(), id, who, ended, latency, bytes);
    }
}

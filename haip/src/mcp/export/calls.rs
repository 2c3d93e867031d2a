//! Running one exported call: validated params started on the executor,
//! its progress, log lines and the client's cancellation relayed, questions
//! by rounds for stateless clients, and how it stopped turned into its result.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use crate::mcp::model::{
    CallToolRequestParams, CallToolResult, ProgressNotificationParam, ProtocolVersion,
};
use serde_json::{Map, Value};
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio_util::sync::CancellationToken;

use super::ExportService;
use super::logs::LogRelay;
use super::render::{
    error_result, failure_result, imported, invalid_params_result, passthrough_blocks,
    success_result,
};
use super::request::CallRequest;
use crate::context::{CallSlot, Caller, Peer};
use crate::exec::admit::CallBook;
use crate::exec::{self, Begun, CallEvent, CallKey, Completion, Outcome, Policy};
use crate::mcp::mrtr::{BadState, RoundPeer};
use crate::otel::TraceLink;
use crate::protocol::payload::ToolOutcome;
use crate::protocol::{ErrorCode, json_len};
use crate::session::Shared;
use crate::stats::{Ended, Throttle};
use crate::tool::Tool;

/// One validated call, about to run.
pub(super) struct Call<'a> {
    pub(super) tool: &'a Tool,
    pub(super) params: Value,
    /// Its params are large (checked on the blocking pool).
    pub(super) large: bool,
    pub(super) subject: Option<Arc<str>>,
    pub(super) caller: Option<Arc<Caller>>,
    pub(super) request: &'a CallRequest<'a>,
    /// Held until the tool's task has stopped.
    pub(super) permit: OwnedSemaphorePermit,
    pub(super) round: Option<Arc<RoundPeer>>,
    /// The call's bookkeeping: ended by the request, or taken by the task
    /// the call becomes.
    pub(super) book: &'a mut Option<CallBook>,
}

impl Call<'_> {
    /// What the call's tool sees of its trace.
    fn link(&self) -> TraceLink {
        let book = self.book.as_ref();
        book.map(|book| book.span().link()).unwrap_or_default()
    }
}

/// How an exported call stopped, before it becomes a `CallToolResult`.
pub(super) enum Stop {
    Outcome(Outcome),
    /// The timeout elapsed; the task is being stopped in the background.
    TimedOut,
    /// The tool waits for answers its client gives on a later round; the
    /// task is being stopped in the background.
    InputRequired,
}

impl ExportService {
    /// The client of this call when it takes questions by rounds (stateless
    /// `/mcp`, MCP 2026-07-28 or later), with the answers the request
    /// brings; `None` otherwise; `Err` for a `requestState` that does not
    /// verify.
    pub(super) fn round_peer(
        &self,
        tool: &Tool,
        arguments: &Value,
        subject: Option<&str>,
        params: &CallToolRequestParams,
        request: &CallRequest<'_>,
    ) -> Result<Option<Arc<RoundPeer>>, BadState> {
        let Some(rounds) = self.rounds.as_deref().filter(|_| self.stateless) else {
            return Ok(None);
        };
        let modern = request
            .version
            .as_ref()
            .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        if !modern {
            return Ok(None);
        }
        let can = request.can();
        let given = params
            .input_responses
            .clone()
            .map(|responses| responses.into_iter().collect::<Map<String, Value>>());
        let answers = rounds.answers(
            tool.name(),
            arguments,
            subject,
            params.request_state.as_deref(),
            given,
        )?;
        Ok(Some(RoundPeer::new(can, answers)))
    }
}

impl ExportService {
    /// What starts `call`, its questions going to `peer`. Its params move
    /// to what starts it.
    pub(super) fn start_of(
        &self,
        call: &mut Call<'_>,
        cancel: CancellationToken,
        slot: Arc<CallSlot>,
        peer: Arc<dyn Peer>,
    ) -> exec::Start {
        let config = &self.shared.config;
        let n = self.calls.fetch_add(1, Relaxed);
        exec::Start {
            key: CallKey(n),
            tool: call.tool.clone(),
            params: std::mem::take(&mut call.params),
            call_id: format!("mcp-{n}"),
            session_id: Arc::clone(&self.session_id),
            cancel,
            slot,
            state: Arc::clone(&self.shared.state),
            caller: call.caller.clone(),
            limits: exec::Limits {
                timeout: call.tool.timeout().or(config.tool_timeout),
                grace: config.cancel_grace,
                // MCP renders the value itself (structured content and text).
                render: None,
            },
            // Not on a session's task: the request's own.
            inline: true,
            peer: Some(Arc::new(crate::mcp::peer::Counted {
                inner: peer,
                stats: Arc::clone(&self.shared),
                trace: call.link(),
            })),
            trace: call.link(),
            unchecked: self.shared.runner.layered().then_some(exec::Unchecked {
                max_violations: config.max_violations,
                large: call.large,
            }),
        }
    }

    /// Runs one call to its end (or its timeout), relaying progress (when the
    /// client sent a progress token) and the client's cancellation. The
    /// concurrency `permit` is held until the tool's task has stopped.
    pub(super) async fn run(&self, mut call: Call<'_>) -> Stop {
        let slot = Arc::new(CallSlot::default());
        // The client's cancellation cancels the call, and so does server
        // shutdown (below, once the call goes on: a call that finishes on
        // its first poll needs neither).
        let cancel = CancellationToken::new();
        // So does the request's end before its answer (its future dropped:
        // the client went away); after the answer, cancelling changes nothing.
        let _cancel_on_drop = cancel.clone().drop_guard();
        let request = call.request;
        let round = call.round.clone();
        let peer: Arc<dyn Peer> = match &round {
            Some(round) => Arc::new(Arc::clone(round)),
            None => request.link.peer(self.stateless),
        };
        let start = self.start_of(&mut call, cancel.clone(), Arc::clone(&slot), peer);
        let Call { tool, permit, .. } = call;
        let logs = self.log_relay(request, tool);
        // A call that finished on its first poll is done here and now, with
        // no channel made for it.
        let going = match self.shared.runner.begin(start, None) {
            Begun::Done(_, outcome) => {
                logs.flush(&slot).await;
                return Stop::Outcome(*outcome);
            }
            Begun::Going(going) => going,
        };
        // Unbounded but small by construction, as in a session: a progress
        // event only when the slot fills, then at most TimedOut and Finished.
        let (events_tx, mut events) = mpsc::unbounded_channel();
        slot.attach(going.key(), events_tx.clone());
        // Only the call's task (and its slot, until it ends) reports now:
        // its end closes the channel.
        self.shared.runner.go_on(going, events_tx);
        let shutdown = &self.shared.shutdown;
        let token = request.progress_token();
        loop {
            let event = tokio::select! {
                () = request.cancelled.cancelled(), if !cancel.is_cancelled() => {
                    cancel.cancel();
                    slot.close();
                    continue;
                }
                () = shutdown.cancelled(), if !cancel.is_cancelled() => {
                    cancel.cancel();
                    slot.close();
                    continue;
                }
                event = events.recv() => event,
                () = wait_for_questions(round.as_deref()) => {
                    // Questions asked together go out together: the round
                    // ends once no more come (the tool may also finish).
                    let round = round.as_deref().expect("only awaited with a round");
                    return self.end_round(round, events, &slot, &cancel, permit, &logs).await;
                }
            };
            match event {
                Some(CallEvent::Progress(_)) => {
                    logs.flush(&slot).await;
                    let (Some(token), Some(progress)) = (&token, slot.take()) else {
                        continue;
                    };
                    let mut note = ProgressNotificationParam::new(
                        token.clone(),
                        progress.percent.and_then(|p| p.as_f64()).unwrap_or(0.0),
                    )
                    .with_total(100.0);
                    if let Some(partial) = progress.partial {
                        note = note.with_message(match partial {
                            Value::String(s) => s,
                            other => other.to_string(),
                        });
                    }
                    // A client that went away just misses its progress.
                    request.link.progress(note).await;
                }
                Some(CallEvent::TimedOut(_)) => {
                    // Answer at the deadline (as HAIP does); the executor
                    // stops the task within `cancel_grace`, and the slot is
                    // released only then.
                    slot.close();
                    self.shared.runner.tasks().spawn(stopping(events, permit));
                    return Stop::TimedOut;
                }
                Some(CallEvent::Finished(_, outcome)) => {
                    logs.flush(&slot).await;
                    return Stop::Outcome(*outcome);
                }
                // Params are validated before the call starts, never by the executor.
                Some(CallEvent::Validated(..)) => {}
                // The executor always reports `Finished`; this is unreachable
                // unless its task was lost, which is then a stop.
                None => return Stop::Outcome(Outcome::Stopped),
            }
        }
    }

    /// Ends the round of a call that asked questions its client answers on
    /// the next one: once no more come (or the call finishes after all).
    pub(super) async fn end_round(
        &self,
        round: &RoundPeer,
        mut events: mpsc::UnboundedReceiver<CallEvent>,
        slot: &CallSlot,
        cancel: &CancellationToken,
        permit: OwnedSemaphorePermit,
        logs: &LogRelay<'_>,
    ) -> Stop {
        match settle(round, &mut events).await {
            Some(outcome) => {
                logs.flush(slot).await;
                Stop::Outcome(outcome)
            }
            None => {
                round.close();
                cancel.cancel();
                slot.close();
                let tasks = self.shared.runner.tasks();
                tasks.spawn(stopping(events, permit));
                Stop::InputRequired
            }
        }
    }
}

/// The `CallToolResult` of a call that stopped.
pub(super) fn result_of(shared: &Shared, tool: &Tool, stop: Stop) -> (Ended, CallToolResult) {
    let name = tool.name();
    let outcome = match stop {
        // Answered as `input_required` by the caller; never here.
        Stop::InputRequired => {
            return (
                Ended::Cancelled,
                error_result(format!("Tool {name} waits for input"), None),
            );
        }
        Stop::TimedOut => {
            let ms = tool
                .timeout()
                .or(shared.config.tool_timeout)
                .map_or(0, |t| t.as_millis());
            let text = format!("Tool {name} timed out after {ms} ms");
            return (Ended::TimedOut, error_result(text, None));
        }
        Stop::Outcome(outcome) => outcome,
    };
    // Params the layers passed on, then the input schema refused: reported
    // as a call refused before it ran is.
    if let Outcome::Returned(Err(e)) = &outcome
        && let Some(found) = e.violations()
    {
        return (
            Ended::failed(&ErrorCode::INVALID_PARAMS),
            invalid_params_result(tool, found),
        );
    }
    let config = &shared.config;
    let policy = Policy {
        max_violations: config.max_violations,
        strict_output_validation: config.strict_output_validation,
        debug_errors: config.debug_errors,
    };
    let (completion, ended) = exec::complete(tool, outcome, policy, &shared.stats);
    let (result, most) = match completion {
        Completion::Done(ToolOutcome::Ok(value)) => {
            success_result(tool, value.unwrap_or(Value::Null))
        }
        Completion::Done(ToolOutcome::Cancelled(_)) => (
            error_result(format!("Tool {name} was cancelled"), None),
            None,
        ),
        Completion::Done(ToolOutcome::Error(failure)) => {
            // An imported tool's `isError` blocks pass through as they are.
            let blocks = failure
                .details
                .as_ref()
                .filter(|_| imported(tool))
                .and_then(passthrough_blocks);
            let result = match blocks {
                Some(blocks) => CallToolResult::error(blocks),
                None => failure_result(failure),
            };
            (result, None)
        }
        // Not asked for (`render: None`): MCP renders values itself.
        Completion::Encoded(_) => (
            error_result(format!("Internal error in tool {name}"), None),
            None,
        ),
    };
    // As HAIP's `TOOL_DONE` (docs/protocol.md §18.1): a result too large to send
    // becomes an error the model can read, and the call still ends once.
    // One that cannot be that large is not measured.
    let limit = config.max_outbound_message_bytes;
    if most.is_some_and(|most| most <= limit) {
        return (ended, result);
    }
    let size = json_len(&result);
    if size > limit {
        static TOO_LARGE: Throttle = Throttle::new();
        if let Some(suppressed) = TOO_LARGE.allow() {
            tracing::warn!(tool = %name, size, limit, suppressed, "tool result too large to send");
        }
        let text = format!("Result of {size} bytes exceeds {limit} (RESULT_TOO_LARGE)");
        let details = serde_json::json!({"code": "RESULT_TOO_LARGE", "size": size, "limit": limit});
        let ended = Ended::failed(&ErrorCode::RESULT_TOO_LARGE);
        return (ended, error_result(text, Some(details)));
    }
    (ended, result)
}

/// Completes when the call (taking questions by rounds) has asked one it
/// has no answer for; never without rounds.
async fn wait_for_questions(round: Option<&RoundPeer>) {
    match round {
        Some(round) => round.waiting().await,
        None => std::future::pending().await,
    }
}

/// Lets a call that asked finish asking: the round ends once no new
/// question has come for a few short waits. `Some` if the call ended
/// meanwhile (it did not need the answer after all).
async fn settle(
    round: &RoundPeer,
    events: &mut mpsc::UnboundedReceiver<CallEvent>,
) -> Option<Outcome> {
    const QUIET: std::time::Duration = std::time::Duration::from_millis(5);
    let mut seen = round.pending();
    let mut quiet = 0;
    while quiet < 3 {
        tokio::select! {
            event = events.recv() => match event {
                Some(CallEvent::Finished(_, outcome)) => return Some(*outcome),
                None => return Some(Outcome::Stopped),
                Some(_) => {}
            },
            () = tokio::time::sleep(QUIET) => {
                let now = round.pending();
                quiet = if now == seen { quiet + 1 } else { 0 };
                seen = now;
            }
        }
    }
    None
}

/// Holds a call's concurrency `permit` until its task has stopped (after
/// its answer went out early: a timeout, a round that waits for input).
pub(super) async fn stopping(
    mut events: mpsc::UnboundedReceiver<CallEvent>,
    permit: OwnedSemaphorePermit,
) {
    while let Some(event) = events.recv().await {
        if matches!(event, CallEvent::Finished(..)) {
            break;
        }
    }
    drop(permit);
}

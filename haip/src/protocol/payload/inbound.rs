//! An accepted inbound envelope's payload as the one event a server acts on.

use super::runs::run_id;
use super::*;

/// An accepted inbound envelope's payload as the event a server acts on
/// (docs/protocol.md §5, "Server on receipt").
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub(crate) enum InboundEvent {
    /// A client `HAI`.
    Hai(Hai),
    /// A `TOOL_LIST` request.
    ToolList(ToolListRequest),
    /// A `TOOL_SCHEMA` request.
    ToolSchema(ToolSchemaRequest),
    /// A `TOOL_CALL`.
    ToolCall(ToolCall),
    /// A `TOOL_CANCEL`.
    ToolCancel(ToolCancel),
    /// `TOOL_INPUT` (docs/protocol.md §6.11).
    ToolInput(ToolInput),
    /// `RUN_STARTED`.
    RunStarted(RunStarted),
    /// `RUN_FINISHED`.
    RunFinished(RunFinished),
    /// `RUN_CANCEL`.
    RunCancel(RunCancel),
    /// `RUN_ERROR`.
    RunError(RunError),
    /// `PING`.
    Ping(Ping),
    /// `REPLAY_REQUEST`.
    ReplayRequest(ReplayRequest),
    /// `FLOW_UPDATE`.
    FlowUpdate(FlowUpdate),
    /// `PAUSE_CHANNEL`.
    PauseChannel(PauseChannel),
    /// `RESUME_CHANNEL`.
    ResumeChannel(ResumeChannel),
    /// Accepted, and nothing for the server to do: `PONG`, `ERROR`,
    /// `TOOL_UPDATE`, `TOOL_DONE`, text and audio, a `TOOL_LIST` with `tools`
    /// or a `TOOL_SCHEMA` with `schema`/`inputSchema` (a client advertising
    /// its own tools, docs/protocol.md §6.8). The payload is left in the [`Inbound`],
    /// untouched, for a hook.
    Other,
}

impl InboundEvent {
    /// [`InboundEvent::decode_with`], a new UUID for a `TOOL_CALL` without
    /// an id: what the tests decode with.
    #[cfg(test)]
    pub(crate) fn decode(inbound: &mut Inbound) -> Result<InboundEvent, PayloadError> {
        InboundEvent::decode_with(inbound, || uuid::Uuid::new_v4().to_string())
    }

    /// Decodes `inbound`'s payload into the event it is (see the
    /// [module](super) documentation for the leniency rules).
    ///
    /// For the events a server acts on, the payload is moved out of
    /// `inbound` (left empty); the envelope's other fields stay for the
    /// reply (`id` for `related_id`, `run_id`, `thread_id`). For
    /// [`InboundEvent::Other`] nothing is taken. An error carries the
    /// envelope `id` as its `related_id`; [`PayloadError::reply`] is the
    /// `ERROR` to answer it with, if any.
    ///
    /// The caller makes the id of a `TOOL_CALL` that has neither a usable
    /// `call_id` nor an envelope `id` (docs/protocol.md §6.4 step 1): `fresh`
    /// is called then, and only then. A server session passes its own id
    /// source, so that every id it hands out comes from one place (and tests
    /// can predict them).
    pub(crate) fn decode_with(
        inbound: &mut Inbound,
        fresh: impl FnOnce() -> String,
    ) -> Result<InboundEvent, PayloadError> {
        let acted_on = match inbound.event {
            EventType::ToolList => !inbound.payload.get("tools").is_some_and(Value::is_array),
            EventType::ToolSchema => {
                !(inbound.payload.contains_key("schema")
                    || inbound.payload.contains_key("inputSchema"))
            }
            EventType::Hai
            | EventType::ToolCall
            | EventType::ToolCancel
            | EventType::ToolInput
            | EventType::RunStarted
            | EventType::RunFinished
            | EventType::RunCancel
            | EventType::RunError
            | EventType::Ping
            | EventType::ReplayRequest
            | EventType::FlowUpdate
            | EventType::PauseChannel
            | EventType::ResumeChannel => true,
            _ => false,
        };
        if !acted_on {
            return Ok(InboundEvent::Other);
        }
        let payload = std::mem::take(&mut inbound.payload);
        let envelope_run_id = inbound.run_id.as_deref();
        // A `RUN_STARTED` or `RUN_ERROR` without a run id of its own takes
        // the envelope's.
        let or_envelope =
            |run_id: Option<String>| run_id.or_else(|| envelope_run_id.map(str::to_owned));
        let decoded = match inbound.event {
            EventType::Hai => read(payload, InboundEvent::Hai),
            EventType::ToolList => read(payload, InboundEvent::ToolList),
            EventType::ToolSchema => read(payload, InboundEvent::ToolSchema),
            EventType::ToolCall => {
                let id = &inbound.id;
                ToolCall::decode(payload, || Some(id.clone().unwrap_or_else(fresh)))
                    .map(InboundEvent::ToolCall)
            }
            EventType::ToolCancel => read(payload, InboundEvent::ToolCancel),
            EventType::ToolInput => read(payload, InboundEvent::ToolInput),
            EventType::RunStarted => read(payload, |mut run: RunStarted| {
                run.run_id = or_envelope(run.run_id);
                InboundEvent::RunStarted(run)
            }),
            EventType::RunFinished => {
                RunFinished::decode(payload, envelope_run_id).map(InboundEvent::RunFinished)
            }
            EventType::RunCancel => {
                let mut r = Reader::new(EventType::RunCancel, payload);
                run_id(&mut r, envelope_run_id)
                    .map(|run_id| InboundEvent::RunCancel(RunCancel { run_id }))
            }
            EventType::RunError => read(payload, |mut run: RunError| {
                run.run_id = or_envelope(run.run_id);
                InboundEvent::RunError(run)
            }),
            EventType::Ping => read(payload, InboundEvent::Ping),
            EventType::ReplayRequest => read(payload, InboundEvent::ReplayRequest),
            EventType::FlowUpdate => read(payload, InboundEvent::FlowUpdate),
            EventType::PauseChannel => read(payload, InboundEvent::PauseChannel),
            EventType::ResumeChannel => read(payload, InboundEvent::ResumeChannel),
            _ => Ok(InboundEvent::Other),
        };
        decoded.map_err(|mut e| {
            e.related_id.clone_from(&inbound.id);
            e
        })
    }
}

/// Decodes a payload of `P` as the event `event` makes of it.
fn read<P: Payload>(
    payload: Map<String, Value>,
    event: impl FnOnce(P) -> InboundEvent,
) -> Result<InboundEvent, PayloadError> {
    P::from_payload(payload).map(event)
}

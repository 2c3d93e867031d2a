//! Tools and their calls: `TOOL_LIST`, `TOOL_SCHEMA`, `TOOL_CALL`,
//! `TOOL_CANCEL`, `TOOL_INPUT`, `TOOL_UPDATE`, `TOOL_DONE` (docs/protocol.md §6).

use super::*;

/// A `TOOL_LIST` request (docs/protocol.md §6.2): an empty payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub(crate) struct ToolListRequest {}

impl Payload for ToolListRequest {
    const EVENT: EventType = EventType::ToolList;

    /// Every payload is a request; one with a `tools` array is a client
    /// advertising its own tools, which [`InboundEvent::decode_with`] passes on as
    /// [`InboundEvent::Other`].
    fn from_payload(_: Map<String, Value>) -> Result<ToolListRequest, PayloadError> {
        Ok(ToolListRequest {})
    }
}

/// The `TOOL_LIST` listing (docs/protocol.md §6.2).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub(crate) struct ToolList {
    /// The tools, in registry order.
    pub(crate) tools: Vec<ToolListItem>,
}

/// One tool of a `TOOL_LIST` listing.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub(crate) struct ToolListItem {
    /// The tool's name.
    pub(crate) name: String,
    /// Its description; empty when it has none, and then not written.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) description: String,
    /// `title`: a name for people, when it has one (docs/protocol.md §6.13).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) title: Option<String>,
    /// `annotations`: the hints it declares; not written when it declares
    /// none (docs/protocol.md §6.13).
    #[serde(skip_serializing_if = "ToolAnnotations::is_empty")]
    pub(crate) annotations: ToolAnnotations,
    /// `icons`; not written when it has none (docs/protocol.md §6.13).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) icons: Vec<Icon>,
}

impl Payload for ToolList {
    const EVENT: EventType = EventType::ToolList;

    fn from_payload(payload: Map<String, Value>) -> Result<ToolList, PayloadError> {
        let mut r = Reader::new(EventType::ToolList, payload);
        let items = match r.take("tools") {
            Some(Value::Array(items)) => items,
            Some(other) => return Err(r.error("tools", Problem::wrong_type("an array", &other))),
            None => return Err(r.error("tools", Problem::Missing)),
        };
        let mut tools = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let at = |field: &str, problem| {
                PayloadError::new(EventType::ToolList, format!("tools[{i}]{field}"), problem)
            };
            let mut item = match item {
                Value::Object(item) => Reader::new(EventType::ToolList, item),
                other => return Err(at("", Problem::wrong_type("an object", &other))),
            };
            let name = item.string("name").map_err(|e| at(".name", e.problem))?;
            tools.push(ToolListItem {
                name,
                description: item.opt_string("description").unwrap_or_default(),
                title: item.opt_string("title"),
                annotations: ToolAnnotations::from_value(item.take("annotations")),
                icons: Icon::list_from_value(item.take("icons")),
            });
        }
        Ok(ToolList { tools })
    }
}

/// A `TOOL_SCHEMA` request (docs/protocol.md §6.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ToolSchemaRequest {
    /// The tool asked about.
    pub(crate) tool: String,
    /// The schema profile to answer in (docs/protocol.md §6.14), as sent; the
    /// session's when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) profile: Option<String>,
}

impl Payload for ToolSchemaRequest {
    const EVENT: EventType = EventType::ToolSchema;

    /// `tool` must be a string (else the server answers `INVALID_MESSAGE`,
    /// `missing tool`). A payload with `schema` or `inputSchema` is a client
    /// advertising a tool, which [`InboundEvent::decode_with`] passes on as
    /// [`InboundEvent::Other`].
    fn from_payload(payload: Map<String, Value>) -> Result<ToolSchemaRequest, PayloadError> {
        let mut r = Reader::new(EventType::ToolSchema, payload);
        Ok(ToolSchemaRequest {
            tool: r.string("tool")?,
            profile: r.opt_string("profile"),
        })
    }
}

/// The `TOOL_SCHEMA` reply (docs/protocol.md §6.3).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ToolSchema {
    /// The tool's name.
    pub(crate) tool: String,
    /// `inputSchema`: the JSON Schema of its params. Decoding falls back on
    /// the legacy `schema` field (HAIP 1 archive, upstream SDK).
    #[serde(rename = "inputSchema")]
    pub(crate) input_schema: Value,
    /// `outputSchema`, when the tool has one.
    #[serde(rename = "outputSchema", skip_serializing_if = "Option::is_none")]
    pub(crate) output_schema: Option<Value>,
    /// The legacy `schema` field (the input schema again), sent with the
    /// `tool_schema_legacy_field` setting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) schema: Option<Value>,
    /// `title`, as in [`ToolListItem::title`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) title: Option<String>,
    /// `annotations`, as in [`ToolListItem::annotations`].
    #[serde(skip_serializing_if = "ToolAnnotations::is_empty")]
    pub(crate) annotations: ToolAnnotations,
    /// `icons`, as in [`ToolListItem::icons`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) icons: Vec<Icon>,
}

impl Payload for ToolSchema {
    const EVENT: EventType = EventType::ToolSchema;

    fn from_payload(payload: Map<String, Value>) -> Result<ToolSchema, PayloadError> {
        let mut r = Reader::new(EventType::ToolSchema, payload);
        let tool = r.string("tool")?;
        let schema = r.take("schema");
        let input_schema = match (r.take("inputSchema"), &schema) {
            (Some(input), _) => input,
            (None, Some(legacy)) => legacy.clone(),
            (None, None) => return Err(r.error("inputSchema", Problem::Missing)),
        };
        Ok(ToolSchema {
            tool,
            input_schema,
            output_schema: r.take("outputSchema").filter(|v| !v.is_null()),
            schema,
            title: r.opt_string("title"),
            annotations: ToolAnnotations::from_value(r.take("annotations")),
            icons: Icon::list_from_value(r.take("icons")),
        })
    }
}

/// A `TOOL_CALL` (docs/protocol.md §6.4).
///
/// Decoding never fails: docs/protocol.md §6.4 answers every shape of call. A
/// `call_id` that is neither a string nor a number is absent (then
/// [`InboundEvent::decode_with`] takes the envelope `id`, else the caller's
/// id; [`Payload::from_payload`] has no envelope and reports it missing). A
/// `tool` that is not a string is `None` (the server answers
/// `TOOL_NOT_FOUND`, `Tool name missing`). `params` absent or `null` is `{}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ToolCall {
    /// The call's id; a numeric one as its decimal text.
    pub(crate) call_id: String,
    /// The tool to run. Required by the protocol: `None` only after decoding
    /// a call that named none, and then not written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool: Option<String>,
    /// The params, as sent (validated against the tool's input schema, never
    /// coerced).
    pub(crate) params: Value,
    /// The payload's own `run_id` (the upstream CLI puts it here). The
    /// envelope `run_id`, if any, is on the [`Inbound`] and takes precedence
    /// for the envelopes about the call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) run_id: Option<String>,
    /// The payload's `_meta` (docs/protocol.md §6.15): a W3C `traceparent` (and
    /// `tracestate`) here makes the call's span a child of the caller's.
    /// Anything but an object is ignored.
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub(crate) meta: Option<Map<String, Value>>,
}

impl ToolCall {
    /// A call of `tool` with `params` (what the client sends).
    #[cfg(any(test, feature = "client"))]
    pub(crate) fn new(
        call_id: impl Into<String>,
        tool: impl Into<String>,
        params: Value,
    ) -> ToolCall {
        ToolCall {
            call_id: call_id.into(),
            tool: Some(tool.into()),
            params,
            run_id: None,
            meta: None,
        }
    }

    /// Decodes a `TOOL_CALL` payload; `call_id` falls back on `fallback`.
    pub(super) fn decode(
        payload: Map<String, Value>,
        fallback: impl FnOnce() -> Option<String>,
    ) -> Result<ToolCall, PayloadError> {
        let mut r = Reader::new(EventType::ToolCall, payload);
        let call_id = match r.take("call_id") {
            Some(Value::String(s)) => s,
            Some(Value::Number(n)) => n.to_string(),
            _ => fallback().ok_or_else(|| r.error("call_id", Problem::Missing))?,
        };
        let params = match r.take("params") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(params) => params,
        };
        Ok(ToolCall {
            call_id,
            tool: r.opt_string("tool"),
            params,
            run_id: r.opt_string("run_id"),
            meta: match r.take("_meta") {
                Some(Value::Object(meta)) => Some(meta),
                _ => None,
            },
        })
    }
}

impl Payload for ToolCall {
    const EVENT: EventType = EventType::ToolCall;

    fn from_payload(payload: Map<String, Value>) -> Result<ToolCall, PayloadError> {
        ToolCall::decode(payload, || None)
    }
}

/// A `TOOL_CANCEL` (docs/protocol.md §6.7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ToolCancel {
    /// The call to cancel. Must be a string: the server ignores a
    /// `TOOL_CANCEL` without one, silently.
    pub(crate) call_id: String,
    /// Why; sent back in the `TOOL_DONE CANCELLED` result. Not a string ⇒ `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
}

impl Payload for ToolCancel {
    const EVENT: EventType = EventType::ToolCancel;

    fn from_payload(payload: Map<String, Value>) -> Result<ToolCancel, PayloadError> {
        let mut r = Reader::new(EventType::ToolCancel, payload);
        Ok(ToolCancel {
            call_id: r.string("call_id")?,
            reason: r.opt_string("reason"),
        })
    }
}

/// `TOOL_INPUT`: the client's answer to a tool's question (docs/protocol.md §6.11).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ToolInput {
    /// The call that asked.
    pub(crate) call_id: String,
    /// The question (`input_request.request_id` of its `TOOL_UPDATE`).
    pub(crate) request_id: String,
    /// What the person did.
    pub(crate) action: InputAction,
    /// The answer, when `action` is `accept`: an object matching the
    /// question's schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) content: Option<Value>,
}

/// The `action` of a `TOOL_INPUT` (docs/protocol.md §6.11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InputAction {
    /// `accept`: answered, with `content`.
    Accept,
    /// `decline`: the person chose not to answer.
    Decline,
    /// `cancel`: the person dismissed the question.
    Cancel,
}

impl InputAction {
    /// The wire name: `"accept"`, `"decline"` or `"cancel"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            InputAction::Accept => "accept",
            InputAction::Decline => "decline",
            InputAction::Cancel => "cancel",
        }
    }
}

impl Payload for ToolInput {
    const EVENT: EventType = EventType::ToolInput;

    fn from_payload(payload: Map<String, Value>) -> Result<ToolInput, PayloadError> {
        let mut r = Reader::new(EventType::ToolInput, payload);
        let call_id = r.call_id("call_id")?;
        let request_id = r.string("request_id").map_err(|e| e.about_call(&call_id))?;
        let action = match r.take("action") {
            Some(Value::String(a)) if a == "accept" => InputAction::Accept,
            Some(Value::String(a)) if a == "decline" => InputAction::Decline,
            Some(Value::String(a)) if a == "cancel" => InputAction::Cancel,
            Some(other) => {
                return Err(r
                    .error(
                        "action",
                        Problem::wrong_type("accept, decline or cancel", &other),
                    )
                    .about_call(&call_id));
            }
            None => return Err(r.error("action", Problem::Missing).about_call(&call_id)),
        };
        Ok(ToolInput {
            call_id,
            request_id,
            action,
            content: r.take("content"),
        })
    }
}

/// The `status` of a `TOOL_UPDATE` (docs/protocol.md §6.5, §6.11).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum UpdateStatus {
    /// `QUEUED`: the call waits for a slot.
    Queued,
    /// `RUNNING`: execution started, or progress.
    Running,
    /// `CANCELLING`: a cancel began.
    Cancelling,
    /// `WAITING_INPUT`: the tool asked the client a question (docs/protocol.md §6.11).
    WaitingInput,
    /// A status this implementation does not know, as sent (a newer peer).
    Other(String),
}

impl UpdateStatus {
    /// The wire name, e.g. `"RUNNING"`.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            UpdateStatus::Queued => "QUEUED",
            UpdateStatus::Running => "RUNNING",
            UpdateStatus::Cancelling => "CANCELLING",
            UpdateStatus::WaitingInput => "WAITING_INPUT",
            UpdateStatus::Other(s) => s,
        }
    }

    /// Reads a wire name; unknown names are [`UpdateStatus::Other`].
    pub(crate) fn parse(name: String) -> UpdateStatus {
        match name.as_str() {
            "QUEUED" => UpdateStatus::Queued,
            "RUNNING" => UpdateStatus::Running,
            "CANCELLING" => UpdateStatus::Cancelling,
            "WAITING_INPUT" => UpdateStatus::WaitingInput,
            _ => UpdateStatus::Other(name),
        }
    }
}

impl fmt::Display for UpdateStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for UpdateStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A `TOOL_UPDATE` (docs/protocol.md §6.5).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ToolUpdate {
    /// The call it is about.
    pub(crate) call_id: String,
    /// Its status.
    pub(crate) status: UpdateStatus,
    /// Percent done, kept as the number sent (`40` stays an integer). Not a
    /// number ⇒ `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) progress: Option<Number>,
    /// A partial result, any JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) partial: Option<Value>,
    /// A tool's log line, `{level, message, data?}` (docs/protocol.md §6.11).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) log: Option<Value>,
    /// A tool's question, `{request_id, message, schema}`, with status
    /// `WAITING_INPUT` (docs/protocol.md §6.11).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) input_request: Option<Value>,
}

impl ToolUpdate {
    /// An update with only a status (`QUEUED`, `RUNNING`, `CANCELLING`).
    #[cfg(test)]
    pub(crate) fn new(call_id: impl Into<String>, status: UpdateStatus) -> ToolUpdate {
        ToolUpdate {
            call_id: call_id.into(),
            status,
            progress: None,
            partial: None,
            log: None,
            input_request: None,
        }
    }
}

impl ToolUpdate {
    /// The payload as a JSON object, `partial` moved in rather than copied
    /// (what [`Payload::to_value`] builds, without cloning a tool's value).
    pub(crate) fn into_value(self) -> Value {
        let mut payload = Map::new();
        payload.insert("call_id".into(), Value::String(self.call_id));
        payload.insert(
            "status".into(),
            Value::String(self.status.as_str().to_owned()),
        );
        if let Some(progress) = self.progress {
            payload.insert("progress".into(), Value::Number(progress));
        }
        if let Some(partial) = self.partial {
            payload.insert("partial".into(), partial);
        }
        if let Some(log) = self.log {
            payload.insert("log".into(), log);
        }
        if let Some(input_request) = self.input_request {
            payload.insert("input_request".into(), input_request);
        }
        Value::Object(payload)
    }
}

impl Payload for ToolUpdate {
    const EVENT: EventType = EventType::ToolUpdate;

    fn from_payload(payload: Map<String, Value>) -> Result<ToolUpdate, PayloadError> {
        let mut r = Reader::new(EventType::ToolUpdate, payload);
        let call_id = r.call_id("call_id")?;
        let status = r.string("status").map_err(|e| e.about_call(&call_id))?;
        Ok(ToolUpdate {
            status: UpdateStatus::parse(status),
            progress: match r.take("progress") {
                Some(Value::Number(n)) => Some(n),
                _ => None,
            },
            partial: r.take("partial"),
            log: r.opt_object("log").map(Value::Object),
            input_request: r.opt_object("input_request").map(Value::Object),
            call_id,
        })
    }
}

/// The `status` of a `TOOL_DONE` (docs/protocol.md §6.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ToolStatus {
    /// `OK`: the tool returned a value.
    Ok,
    /// `ERROR`: the call failed.
    Error,
    /// `CANCELLED`: the call was cancelled.
    Cancelled,
}

impl ToolStatus {
    /// The wire name, e.g. `"OK"`.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            ToolStatus::Ok => "OK",
            ToolStatus::Error => "ERROR",
            ToolStatus::Cancelled => "CANCELLED",
        }
    }

    /// Reads a wire name (case-sensitive).
    pub(crate) fn parse(name: &str) -> Option<ToolStatus> {
        match name {
            "OK" => Some(ToolStatus::Ok),
            "ERROR" => Some(ToolStatus::Error),
            "CANCELLED" => Some(ToolStatus::Cancelled),
            _ => None,
        }
    }
}

impl fmt::Display for ToolStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ToolStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A `TOOL_DONE` (docs/protocol.md §6.6): how a call ended.
///
/// On the wire the payload is `{call_id, status, result}`; what `result`
/// holds depends on `status`, so here the two are one [`ToolOutcome`] and
/// [`ToolDone::status`] is derived from it: an `ERROR`'s `{error, code,
/// details}` is a typed [`ToolFailure`], a `CANCELLED`'s `{reason}` a string.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolDone {
    /// The call it ends.
    pub(crate) call_id: String,
    /// How it ended, with its result.
    pub(crate) outcome: ToolOutcome,
}

/// How a call ended: a `TOOL_DONE`'s `status` with its `result`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ToolOutcome {
    /// `OK`, with the tool's value (`None`: no `result`, the value was `null`).
    Ok(Option<Value>),
    /// `ERROR`, with the error `result`.
    Error(ToolFailure),
    /// `CANCELLED`, with `result.reason` when there is one.
    Cancelled(Option<String>),
}

impl ToolOutcome {
    /// The `status` it is sent with.
    pub(crate) fn status(&self) -> ToolStatus {
        match self {
            ToolOutcome::Ok(_) => ToolStatus::Ok,
            ToolOutcome::Error(_) => ToolStatus::Error,
            ToolOutcome::Cancelled(_) => ToolStatus::Cancelled,
        }
    }
}

/// The `result` of a `TOOL_DONE` with status `ERROR` (docs/protocol.md §6.6, §18.1).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ToolFailure {
    /// `error`: the human-readable message.
    #[serde(rename = "error")]
    pub(crate) message: String,
    /// `code`: `INVALID_PARAMS`, `TOOL_EXECUTION_ERROR`, …, or a tool's own.
    pub(crate) code: ErrorCode,
    /// `details`, e.g. every violation of `INVALID_PARAMS`; any JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) details: Option<Value>,
    /// `total`: how many violations there were, when all were counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) total: Option<u64>,
    /// `total_at_least`: how many were counted before counting stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) total_at_least: Option<u64>,
}

impl ToolFailure {
    /// A failure with a code and a message.
    pub(crate) fn new(code: impl Into<ErrorCode>, message: impl Into<String>) -> ToolFailure {
        ToolFailure {
            message: message.into(),
            code: code.into(),
            details: None,
            total: None,
            total_at_least: None,
        }
    }

    /// With `details`.
    pub(crate) fn with_details(mut self, details: Value) -> ToolFailure {
        self.details = Some(details);
        self
    }

    /// As a JSON object, moved rather than copied.
    pub(super) fn into_value(self) -> Value {
        let mut result = Map::new();
        result.insert("error".into(), Value::String(self.message));
        result.insert("code".into(), Value::String(self.code.as_str().to_owned()));
        if let Some(details) = self.details {
            result.insert("details".into(), details);
        }
        if let Some(total) = self.total {
            result.insert("total".into(), total.into());
        }
        if let Some(total) = self.total_at_least {
            result.insert("total_at_least".into(), total.into());
        }
        Value::Object(result)
    }

    pub(super) fn from_map(map: Map<String, Value>) -> Result<ToolFailure, PayloadError> {
        let mut r = Reader::new(EventType::ToolDone, map);
        r.prefix = "result.";
        Ok(ToolFailure {
            code: ErrorCode::new(r.string("code")?),
            message: r.string("error")?,
            details: r.take("details").filter(|v| !v.is_null()),
            total: r.opt_u64("total"),
            total_at_least: r.opt_u64("total_at_least"),
        })
    }
}

impl ToolDone {
    /// `OK`; a `null` value is sent as no `result`.
    #[cfg(test)]
    pub(crate) fn ok(call_id: impl Into<String>, result: Option<Value>) -> ToolDone {
        ToolDone {
            call_id: call_id.into(),
            outcome: ToolOutcome::Ok(result.filter(|v| !v.is_null())),
        }
    }

    /// `ERROR`.
    pub(crate) fn failed(call_id: impl Into<String>, failure: ToolFailure) -> ToolDone {
        ToolDone {
            call_id: call_id.into(),
            outcome: ToolOutcome::Error(failure),
        }
    }

    /// `CANCELLED`, with the reason when there is one.
    #[cfg(test)]
    pub(crate) fn cancelled(call_id: impl Into<String>, reason: Option<String>) -> ToolDone {
        ToolDone {
            call_id: call_id.into(),
            outcome: ToolOutcome::Cancelled(reason),
        }
    }

    /// The `status` it is sent with.
    pub(crate) fn status(&self) -> ToolStatus {
        self.outcome.status()
    }

    /// The payload as a JSON object, the result moved in rather than copied
    /// (what [`Payload::to_value`] builds, without cloning a tool's value).
    pub(crate) fn into_value(self) -> Value {
        let status = self.status();
        let mut payload = Map::new();
        payload.insert("call_id".into(), Value::String(self.call_id));
        payload.insert("status".into(), status.as_str().into());
        let result = match self.outcome {
            ToolOutcome::Ok(value) => value.filter(|v| !v.is_null()),
            ToolOutcome::Error(failure) => Some(failure.into_value()),
            ToolOutcome::Cancelled(reason) => reason.map(|reason| {
                let mut result = Map::new();
                result.insert("reason".into(), Value::String(reason));
                Value::Object(result)
            }),
        };
        if let Some(result) = result {
            payload.insert("result".into(), result);
        }
        Value::Object(payload)
    }

    /// The `result` to write, if any.
    pub(super) fn result(&self) -> Option<DoneResult<'_>> {
        match &self.outcome {
            ToolOutcome::Ok(value) => value
                .as_ref()
                .filter(|v| !v.is_null())
                .map(DoneResult::Value),
            ToolOutcome::Error(failure) => Some(DoneResult::Failure(failure)),
            ToolOutcome::Cancelled(reason) => reason.as_deref().map(DoneResult::Reason),
        }
    }

    /// The payload JSON of a `TOOL_DONE` from its parts, `result` being JSON
    /// text already (a tool's value rendered off the session's task): no
    /// [`Value`] is built. The same text [`Payload::to_json`] writes.
    pub(crate) fn json_from_parts(
        call_id: &str,
        status: ToolStatus,
        result: Option<&[u8]>,
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(48 + call_id.len() + result.map_or(0, <[u8]>::len));
        out.extend_from_slice(b"{\"call_id\":");
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, call_id);
        out.extend_from_slice(b",\"status\":\"");
        out.extend_from_slice(status.as_str().as_bytes());
        out.push(b'"');
        if let Some(result) = result {
            out.extend_from_slice(b",\"result\":");
            out.extend_from_slice(result);
        }
        out.push(b'}');
        out
    }
}

/// What a `TOOL_DONE`'s `result` is, borrowed for writing.
pub(super) enum DoneResult<'a> {
    Value(&'a Value),
    Failure(&'a ToolFailure),
    Reason(&'a str),
}

impl Serialize for DoneResult<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            DoneResult::Value(value) => value.serialize(serializer),
            DoneResult::Failure(failure) => failure.serialize(serializer),
            DoneResult::Reason(reason) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("reason", reason)?;
                map.end()
            }
        }
    }
}

impl Serialize for ToolDone {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let result = self.result();
        let mut map = serializer.serialize_map(Some(2 + usize::from(result.is_some())))?;
        map.serialize_entry("call_id", &self.call_id)?;
        map.serialize_entry("status", &self.status())?;
        put(&mut map, "result", result.as_ref())?;
        map.end()
    }
}

impl Payload for ToolDone {
    const EVENT: EventType = EventType::ToolDone;

    /// `status` absent is `OK` (the protocol default); any value other than
    /// the three is an error, as is an `ERROR` whose `result` lacks its
    /// `code` or `error`: the outcome of a call is never guessed. The error
    /// names the call, so whoever waits for it can be told. A `CANCELLED`
    /// result without a string `reason` is just no reason.
    fn from_payload(payload: Map<String, Value>) -> Result<ToolDone, PayloadError> {
        let mut r = Reader::new(EventType::ToolDone, payload);
        let call_id = r.call_id("call_id")?;
        let status = match r.take("status") {
            None => ToolStatus::Ok,
            Some(Value::String(s)) => match ToolStatus::parse(&s) {
                Some(status) => status,
                None => {
                    let found = Value::String(s).to_string();
                    let problem = Problem::BadValue {
                        expected: "OK, ERROR or CANCELLED",
                        found,
                    };
                    return Err(r.error("status", problem).about_call(&call_id));
                }
            },
            Some(other) => {
                let problem = Problem::wrong_type("a string", &other);
                return Err(r.error("status", problem).about_call(&call_id));
            }
        };
        let result = r.take("result").filter(|v| !v.is_null());
        let outcome = match (status, result) {
            (ToolStatus::Ok, result) => ToolOutcome::Ok(result),
            (ToolStatus::Cancelled, Some(Value::Object(mut result))) => {
                ToolOutcome::Cancelled(match result.remove("reason") {
                    Some(Value::String(reason)) => Some(reason),
                    _ => None,
                })
            }
            (ToolStatus::Cancelled, _) => ToolOutcome::Cancelled(None),
            (ToolStatus::Error, Some(Value::Object(result))) => ToolOutcome::Error(
                ToolFailure::from_map(result).map_err(|e| e.about_call(&call_id))?,
            ),
            (ToolStatus::Error, Some(other)) => {
                let problem = Problem::wrong_type("an object", &other);
                return Err(r.error("result", problem).about_call(&call_id));
            }
            (ToolStatus::Error, None) => {
                return Err(r.error("result", Problem::Missing).about_call(&call_id));
            }
        };
        Ok(ToolDone { call_id, outcome })
    }

    fn to_json(&self) -> Vec<u8> {
        let result = self
            .result()
            .map(|r| serde_json::to_vec(&r).unwrap_or_default());
        ToolDone::json_from_parts(&self.call_id, self.status(), result.as_deref())
    }
}

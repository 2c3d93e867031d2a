//! The MCP messages the export reads and writes, defined in one place: what
//! a request, a result, a notification or an error is on the wire, for the
//! revisions `/mcp` and stdio serve (2024-11-05 to 2026-07-28).
//!
//! Only what serving needs is here, field for field as the MCP schema names
//! it; serving MCP takes no SDK. (The import, feature `mcp-import`, speaks
//! to other servers through the MCP SDK's client and its own types.)
//!
//! Messages haip only writes are `Serialize` alone. What a client sends is
//! read as strictly as the schema says: a request whose params do not fit
//! is refused with `-32602` before anything runs.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value, json};

/// A JSON object.
pub(crate) type JsonObject = Map<String, Value>;

/// A `_meta` object (any keys).
pub(crate) type MetaObject = JsonObject;

// ---------------------------------------------------------------------------
// Revisions, ids, errors
// ---------------------------------------------------------------------------

/// A revision of MCP (`protocolVersion`, `MCP-Protocol-Version`): a date,
/// ordered as its text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub(crate) struct ProtocolVersion(Cow<'static, str>);

impl ProtocolVersion {
    pub(crate) const V_2024_11_05: Self = Self(Cow::Borrowed("2024-11-05"));
    pub(crate) const V_2025_03_26: Self = Self(Cow::Borrowed("2025-03-26"));
    pub(crate) const V_2025_06_18: Self = Self(Cow::Borrowed("2025-06-18"));
    pub(crate) const V_2025_11_25: Self = Self(Cow::Borrowed("2025-11-25"));
    pub(crate) const V_2026_07_28: Self = Self(Cow::Borrowed("2026-07-28"));

    /// Every revision haip serves, oldest first.
    pub(crate) const KNOWN_VERSIONS: &'static [Self] = &[
        Self::V_2024_11_05,
        Self::V_2025_03_26,
        Self::V_2025_06_18,
        Self::V_2025_11_25,
        Self::V_2026_07_28,
    ];

    /// The revision as its date.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether a session of this revision begins with `initialize` (every
    /// revision before 2026-07-28).
    pub(crate) fn has_initialize(&self) -> bool {
        self.as_str() < Self::V_2026_07_28.as_str()
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for ProtocolVersion {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ProtocolVersion {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(Self::KNOWN_VERSIONS
            .iter()
            .find(|known| known.as_str() == text)
            .cloned()
            .unwrap_or(ProtocolVersion(Cow::Owned(text))))
    }
}

/// A JSON-RPC request id: an integer or a string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum RequestId {
    Number(i64),
    String(Arc<str>),
}

impl RequestId {
    /// The id as a JSON value.
    pub(crate) fn to_value(&self) -> Value {
        match self {
            RequestId::Number(n) => Value::from(*n),
            RequestId::String(s) => Value::from(&**s),
        }
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Number(n) => n.fmt(f),
            RequestId::String(s) => s.fmt(f),
        }
    }
}

impl Serialize for RequestId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            RequestId::Number(n) => serializer.serialize_i64(*n),
            RequestId::String(s) => serializer.serialize_str(s),
        }
    }
}

impl<'de> Deserialize<'de> for RequestId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match Value::deserialize(deserializer)? {
            Value::String(s) => Ok(RequestId::String(s.into())),
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    return Ok(RequestId::Number(i));
                }
                // `1.0` and `1e2` are integers written as floats.
                const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
                match n.as_f64() {
                    Some(f) if n.as_u64().is_none() && f.fract() == 0.0 && f.abs() < EXACT => {
                        Ok(RequestId::Number(f as i64))
                    }
                    _ if n.as_u64().is_some() => Err(D::Error::custom("Number too large for i64")),
                    _ => Err(D::Error::custom("Expected an integer")),
                }
            }
            _ => Err(D::Error::custom("Expect number or string")),
        }
    }
}

/// A request's `progressToken`: an integer or a string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct ProgressToken(pub(crate) RequestId);

/// A JSON-RPC error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct ErrorCode(pub(crate) i32);

impl ErrorCode {
    /// The request's revision is not one the server serves (2026-07-28).
    pub(crate) const UNSUPPORTED_PROTOCOL_VERSION: Self = Self(-32022);
    /// The request needs a capability its client did not declare.
    pub(crate) const MISSING_REQUIRED_CLIENT_CAPABILITY: Self = Self(-32021);
    /// The request's `Mcp-*` headers disagree with its body (SEP-2243).
    pub(crate) const HEADER_MISMATCH: Self = Self(-32020);
    pub(crate) const INVALID_REQUEST: Self = Self(-32600);
    pub(crate) const METHOD_NOT_FOUND: Self = Self(-32601);
    pub(crate) const INVALID_PARAMS: Self = Self(-32602);
    pub(crate) const INTERNAL_ERROR: Self = Self(-32603);
}

/// A JSON-RPC error object: a code, a message and what more there is to say.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct McpError {
    pub(crate) code: ErrorCode,
    pub(crate) message: Cow<'static, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) data: Option<Value>,
}

impl McpError {
    pub(crate) fn new(
        code: ErrorCode,
        message: impl Into<Cow<'static, str>>,
        data: Option<Value>,
    ) -> McpError {
        McpError {
            code,
            message: message.into(),
            data,
        }
    }

    pub(crate) fn invalid_request(
        message: impl Into<Cow<'static, str>>,
        data: Option<Value>,
    ) -> McpError {
        McpError::new(ErrorCode::INVALID_REQUEST, message, data)
    }

    pub(crate) fn invalid_params(
        message: impl Into<Cow<'static, str>>,
        data: Option<Value>,
    ) -> McpError {
        McpError::new(ErrorCode::INVALID_PARAMS, message, data)
    }

    pub(crate) fn internal_error(
        message: impl Into<Cow<'static, str>>,
        data: Option<Value>,
    ) -> McpError {
        McpError::new(ErrorCode::INTERNAL_ERROR, message, data)
    }

    /// The request's revision is not served: which are.
    pub(crate) fn unsupported_protocol_version(
        requested: ProtocolVersion,
        supported: &[ProtocolVersion],
    ) -> McpError {
        McpError::new(
            ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
            Some(json!({"requested": requested, "supported": supported})),
        )
    }

    /// The request needs capabilities its client did not declare: which.
    pub(crate) fn missing_required_client_capability(required: ClientCapabilities) -> McpError {
        McpError::new(
            ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
            "Missing required client capability",
            Some(json!({"requiredCapabilities": required})),
        )
    }
}

// ---------------------------------------------------------------------------
// Capabilities and the lifecycle
// ---------------------------------------------------------------------------

/// The tasks extension (SEP-2663), by its id in `extensions`.
pub(crate) const TASKS_EXTENSION_ID: &str = "io.modelcontextprotocol/tasks";

/// What a client says it can do.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub(crate) struct ClientCapabilities {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) experimental: Option<BTreeMap<String, JsonObject>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) extensions: Option<BTreeMap<String, JsonObject>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) roots: Option<RootsCapability>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sampling: Option<SamplingCapability>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) elicitation: Option<ElicitationCapability>,
}

impl ClientCapabilities {
    /// The capabilities of a client that takes tasks, and nothing else.
    pub(crate) fn tasks() -> ClientCapabilities {
        let mut extensions = BTreeMap::new();
        extensions.insert(TASKS_EXTENSION_ID.to_owned(), JsonObject::new());
        ClientCapabilities {
            extensions: Some(extensions),
            ..ClientCapabilities::default()
        }
    }

    /// Whether the client takes tasks (the tasks extension).
    pub(crate) fn supports_tasks(&self) -> bool {
        self.extensions
            .as_ref()
            .is_some_and(|e| e.contains_key(TASKS_EXTENSION_ID))
    }
}

/// A client's `roots` capability.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RootsCapability {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) list_changed: Option<bool>,
}

/// A client's `sampling` capability.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub(crate) struct SamplingCapability {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tools: Option<JsonObject>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) context: Option<JsonObject>,
}

/// A client's `elicitation` capability: the modes it takes (none named:
/// forms).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub(crate) struct ElicitationCapability {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) form: Option<FormElicitation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) url: Option<UrlElicitation>,
}

/// Elicitation by form.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FormElicitation {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) schema_validation: Option<bool>,
}

/// Elicitation by URL.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub(crate) struct UrlElicitation {}

/// What the server says it can do (haip: tools, logging, tasks).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub(crate) struct ServerCapabilities {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) extensions: Option<BTreeMap<String, JsonObject>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) logging: Option<JsonObject>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tools: Option<ToolsCapability>,
}

/// The server's `tools` capability.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolsCapability {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) list_changed: Option<bool>,
}

/// A client's or a server's name and version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Implementation {
    pub(crate) name: String,
    pub(crate) version: String,
}

/// The params of `initialize`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InitializeRequestParams {
    #[serde(rename = "_meta", default)]
    pub(crate) meta: Option<MetaObject>,
    pub(crate) protocol_version: ProtocolVersion,
    pub(crate) capabilities: ClientCapabilities,
    pub(crate) client_info: Implementation,
}

/// The result of `initialize`, and what the server is (`ServerConfig`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InitializeResult {
    pub(crate) protocol_version: ProtocolVersion,
    pub(crate) capabilities: ServerCapabilities,
    pub(crate) server_info: Implementation,
}

/// What the server is: its capabilities and its name.
pub(crate) type ServerConfig = InitializeResult;

/// How long a result may be cached, and by whom (SEP-2549).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CacheScope {
    Private,
}

/// What a result is (SEP-2322, 2026-07-28): the answer, a round of
/// questions, or a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ResultType {
    Complete,
    InputRequired,
    Task,
}

/// The `_meta` key of the server's name on results that carry it.
const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// The `_meta` key of the `subscriptions/listen` a message belongs to.
pub(crate) const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The result of `server/discover` (2026-07-28).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DiscoverResult {
    pub(crate) result_type: ResultType,
    pub(crate) supported_versions: Vec<ProtocolVersion>,
    pub(crate) capabilities: ServerCapabilities,
    pub(crate) ttl_ms: u64,
    pub(crate) cache_scope: CacheScope,
    #[serde(rename = "_meta")]
    pub(crate) meta: MetaObject,
}

impl DiscoverResult {
    /// What `server` is and serves, not to be cached.
    pub(crate) fn from_server_info(
        supported_versions: Vec<ProtocolVersion>,
        server: &ServerConfig,
    ) -> DiscoverResult {
        let mut meta = MetaObject::new();
        meta.insert(SERVER_INFO.to_owned(), json!(server.server_info));
        DiscoverResult {
            result_type: ResultType::Complete,
            supported_versions,
            capabilities: server.capabilities.clone(),
            ttl_ms: 0,
            cache_scope: CacheScope::Private,
            meta,
        }
    }
}

// ---------------------------------------------------------------------------
// Tools and their results
// ---------------------------------------------------------------------------

/// A tool as `tools/list` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Tool {
    pub(crate) name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
    pub(crate) input_schema: Arc<JsonObject>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) output_schema: Option<Arc<JsonObject>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) annotations: Option<ToolAnnotations>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) icons: Option<Vec<Icon>>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub(crate) meta: Option<MetaObject>,
}

impl Tool {
    pub(crate) fn new(name: String, description: String, input_schema: Arc<JsonObject>) -> Tool {
        Tool {
            name,
            title: None,
            description: Some(description),
            input_schema,
            output_schema: None,
            annotations: None,
            icons: None,
            meta: None,
        }
    }
}

/// A tool's hints.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolAnnotations {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) read_only_hint: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) destructive_hint: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) idempotent_hint: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) open_world_hint: Option<bool>,
}

/// An icon of a tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Icon {
    pub(crate) src: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) mime_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sizes: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) theme: Option<IconTheme>,
}

/// The background an icon is drawn for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum IconTheme {
    Light,
    Dark,
}

/// The result of `tools/list`: every tool at once (no pages).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListToolsResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) result_type: Option<ResultType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ttl_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cache_scope: Option<CacheScope>,
    /// Shared: each made once per registry and schema profile.
    pub(crate) tools: Vec<Arc<Tool>>,
}

impl ListToolsResult {
    pub(crate) fn with_all_items(tools: Vec<Arc<Tool>>) -> ListToolsResult {
        ListToolsResult {
            result_type: Some(ResultType::Complete),
            ttl_ms: None,
            cache_scope: None,
            tools,
        }
    }
}

/// The params of `tools/call`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CallToolRequestParams {
    #[serde(rename = "_meta", default)]
    pub(crate) meta: Option<MetaObject>,
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) arguments: Option<JsonObject>,
    /// The answers to the last round's questions (2026-07-28).
    #[serde(default)]
    pub(crate) input_responses: Option<InputResponses>,
    /// The state the last round ended with (2026-07-28).
    #[serde(default)]
    pub(crate) request_state: Option<String>,
}

/// One block of a result's content: `{"type": ..., ...}`: text haip
/// writes, or a block kept as it came (text, image, audio, an embedded
/// resource or a link to one).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ContentBlock {
    /// `{"type": "text", "text": ...}`.
    Text(String),
    /// Any block, as it came.
    Kept(JsonObject),
}

impl ContentBlock {
    /// A text block.
    pub(crate) fn text(text: impl Into<String>) -> ContentBlock {
        ContentBlock::Text(text.into())
    }

    /// The text of a text block.
    pub(crate) fn as_text(&self) -> Option<&str> {
        match self {
            ContentBlock::Text(text) => Some(text),
            ContentBlock::Kept(block) => {
                if block.get("type")? != "text" {
                    return None;
                }
                block.get("text")?.as_str()
            }
        }
    }
}

impl Serialize for ContentBlock {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Text<'a> {
            r#type: &'static str,
            text: &'a str,
        }
        match self {
            ContentBlock::Text(text) => Text {
                r#type: "text",
                text,
            }
            .serialize(serializer),
            ContentBlock::Kept(block) => block.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    /// A block of a kind MCP knows, with the fields that kind needs.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let block = JsonObject::deserialize(deserializer)?;
        let Some(kind) = block.get("type").and_then(Value::as_str) else {
            return Err(D::Error::missing_field("type"));
        };
        /// A field a block of the kind needs, and what its value must be.
        type Needs = &'static [(&'static str, fn(&Value) -> bool)];
        let needs: Needs = match kind {
            "text" => &[("text", Value::is_string)],
            "image" | "audio" => &[("data", Value::is_string), ("mimeType", Value::is_string)],
            "resource" => &[("resource", Value::is_object)],
            "resource_link" => &[("uri", Value::is_string), ("name", Value::is_string)],
            other => {
                return Err(D::Error::unknown_variant(
                    other,
                    &["text", "image", "audio", "resource", "resource_link"],
                ));
            }
        };
        for (field, fits) in needs {
            match block.get(*field) {
                Some(value) if fits(value) => {}
                Some(_) => {
                    return Err(D::Error::custom(format!(
                        "invalid `{field}` in a {kind} block"
                    )));
                }
                None => return Err(D::Error::missing_field(field)),
            }
        }
        Ok(ContentBlock::Kept(block))
    }
}

/// The result of a tool call.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CallToolResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) result_type: Option<ResultType>,
    pub(crate) content: Vec<ContentBlock>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) structured_content: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) is_error: Option<bool>,
}

impl CallToolResult {
    /// A result that answers the call.
    pub(crate) fn success(content: Vec<ContentBlock>) -> CallToolResult {
        CallToolResult {
            result_type: Some(ResultType::Complete),
            content,
            structured_content: None,
            is_error: Some(false),
        }
    }

    /// A result that says the tool failed (the model reads why).
    pub(crate) fn error(content: Vec<ContentBlock>) -> CallToolResult {
        CallToolResult {
            is_error: Some(true),
            ..CallToolResult::success(content)
        }
    }
}

/// The client's answers to a round's questions, by key (2026-07-28).
pub(crate) type InputResponses = BTreeMap<String, Value>;

/// A round's questions, by key: each a server request
/// (`elicitation/create`, `sampling/createMessage`, `roots/list`) as
/// `{"method", "params"}`.
pub(crate) type InputRequests = BTreeMap<String, Value>;

/// A call that waits for the answers to questions (2026-07-28): ask them,
/// then call again with their answers and the state.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InputRequiredResult {
    pub(crate) result_type: ResultType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) input_requests: Option<InputRequests>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) request_state: Option<String>,
}

impl InputRequiredResult {
    pub(crate) fn new(
        input_requests: Option<InputRequests>,
        request_state: Option<String>,
    ) -> InputRequiredResult {
        InputRequiredResult {
            result_type: ResultType::InputRequired,
            input_requests,
            request_state,
        }
    }
}

/// What a `tools/call` is answered with.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CallToolResponse {
    /// Its result.
    Complete(CallToolResult),
    /// A round of questions.
    InputRequired(InputRequiredResult),
    /// A task that runs it.
    Task(CreateTaskResult),
}

impl From<CallToolResult> for CallToolResponse {
    fn from(result: CallToolResult) -> Self {
        CallToolResponse::Complete(result)
    }
}

// ---------------------------------------------------------------------------
// Tasks (SEP-2663)
// ---------------------------------------------------------------------------

/// Where a task is: as the task store keeps it.
pub(crate) use crate::session::tasks::TaskStatus;

/// A task, as its handle and its status show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Task {
    pub(crate) task_id: String,
    pub(crate) status: TaskStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) status_message: Option<String>,
    pub(crate) created_at: String,
    pub(crate) last_updated_at: String,
    /// How long it is kept after it ends; `null`: for as long as the
    /// server lives.
    pub(crate) ttl_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) poll_interval_ms: Option<u64>,
}

impl Task {
    pub(crate) fn new(
        task_id: String,
        status: TaskStatus,
        created_at: String,
        last_updated_at: String,
    ) -> Task {
        Task {
            task_id,
            status,
            status_message: None,
            created_at,
            last_updated_at,
            ttl_ms: None,
            poll_interval_ms: None,
        }
    }

    pub(crate) fn with_status_message(mut self, message: String) -> Task {
        self.status_message = Some(message);
        self
    }

    pub(crate) fn with_ttl_ms(mut self, ttl_ms: u64) -> Task {
        self.ttl_ms = Some(ttl_ms);
        self
    }

    pub(crate) fn with_poll_interval_ms(mut self, poll_interval_ms: u64) -> Task {
        self.poll_interval_ms = Some(poll_interval_ms);
        self
    }
}

/// What a task's status carries besides the task.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TaskPayload {
    Working,
    InputRequired { input_requests: InputRequests },
    Completed { result: JsonObject },
    Failed { error: JsonObject },
    Cancelled,
}

impl TaskPayload {
    fn status(&self) -> TaskStatus {
        match self {
            TaskPayload::Working => TaskStatus::Working,
            TaskPayload::InputRequired { .. } => TaskStatus::InputRequired,
            TaskPayload::Completed { .. } => TaskStatus::Completed,
            TaskPayload::Failed { .. } => TaskStatus::Failed,
            TaskPayload::Cancelled => TaskStatus::Cancelled,
        }
    }
}

/// A task with what its status carries (`tasks/get`, `notifications/tasks`):
/// the task's fields, then `inputRequests`, `result` or `error`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DetailedTask {
    pub(crate) task: Task,
    pub(crate) payload: TaskPayload,
}

impl DetailedTask {
    /// `task` with `payload`, its status the payload's.
    pub(crate) fn new(mut task: Task, payload: TaskPayload) -> DetailedTask {
        task.status = payload.status();
        DetailedTask { task, payload }
    }
}

impl Serialize for DetailedTask {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire<'a> {
            #[serde(flatten)]
            task: &'a Task,
            #[serde(skip_serializing_if = "Option::is_none")]
            input_requests: Option<&'a InputRequests>,
            #[serde(skip_serializing_if = "Option::is_none")]
            result: Option<&'a JsonObject>,
            #[serde(skip_serializing_if = "Option::is_none")]
            error: Option<&'a JsonObject>,
        }
        let (input_requests, result, error) = match &self.payload {
            TaskPayload::Working | TaskPayload::Cancelled => (None, None, None),
            TaskPayload::InputRequired { input_requests } => (Some(input_requests), None, None),
            TaskPayload::Completed { result } => (None, Some(result), None),
            TaskPayload::Failed { error } => (None, None, Some(error)),
        };
        Wire {
            task: &self.task,
            input_requests,
            result,
            error,
        }
        .serialize(serializer)
    }
}

/// A `tools/call` answered with a task.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateTaskResult {
    pub(crate) result_type: ResultType,
    #[serde(flatten)]
    pub(crate) task: Task,
}

impl CreateTaskResult {
    pub(crate) fn new(task: Task) -> CreateTaskResult {
        CreateTaskResult {
            result_type: ResultType::Task,
            task,
        }
    }
}

/// The result of `tasks/get`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GetTaskResult {
    pub(crate) result_type: ResultType,
    #[serde(flatten)]
    pub(crate) task: DetailedTask,
}

impl GetTaskResult {
    pub(crate) fn new(task: DetailedTask) -> GetTaskResult {
        GetTaskResult {
            result_type: ResultType::Complete,
            task,
        }
    }
}

// ---------------------------------------------------------------------------
// Notifications, logging, subscriptions
// ---------------------------------------------------------------------------

/// The params of `notifications/progress`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ProgressNotificationParam {
    pub(crate) progress_token: ProgressToken,
    pub(crate) progress: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) total: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) message: Option<String>,
}

impl ProgressNotificationParam {
    pub(crate) fn new(progress_token: ProgressToken, progress: f64) -> ProgressNotificationParam {
        ProgressNotificationParam {
            progress_token,
            progress,
            total: None,
            message: None,
        }
    }

    pub(crate) fn with_total(mut self, total: f64) -> ProgressNotificationParam {
        self.total = Some(total);
        self
    }

    pub(crate) fn with_message(mut self, message: String) -> ProgressNotificationParam {
        self.message = Some(message);
        self
    }
}

/// The severity of a log line, as syslog names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LoggingLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

/// The params of `logging/setLevel`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct SetLevelRequestParams {
    #[serde(rename = "_meta", default)]
    pub(crate) meta: Option<MetaObject>,
    pub(crate) level: LoggingLevel,
}

/// The params of `notifications/message` (a log line).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct LoggingMessageNotificationParam {
    pub(crate) level: LoggingLevel,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) logger: Option<String>,
    pub(crate) data: Value,
}

impl LoggingMessageNotificationParam {
    pub(crate) fn new(level: LoggingLevel, data: Value) -> LoggingMessageNotificationParam {
        LoggingMessageNotificationParam {
            level,
            logger: None,
            data,
        }
    }

    pub(crate) fn with_logger(
        mut self,
        logger: impl Into<String>,
    ) -> LoggingMessageNotificationParam {
        self.logger = Some(logger.into());
        self
    }
}

/// What a `subscriptions/listen` asks to hear of, or is told it will
/// (2026-07-28).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SubscriptionFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tools_list_changed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) prompts_list_changed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) resources_list_changed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) resource_subscriptions: Option<Vec<String>>,
}

impl SubscriptionFilter {
    /// Tool list changes, and nothing else.
    pub(crate) fn tools_list_changed() -> SubscriptionFilter {
        SubscriptionFilter {
            tools_list_changed: Some(true),
            ..SubscriptionFilter::default()
        }
    }

    /// What both filters ask for.
    pub(crate) fn intersection(&self, other: &SubscriptionFilter) -> SubscriptionFilter {
        let both =
            |a: Option<bool>, b: Option<bool>| (a == Some(true) && b == Some(true)).then_some(true);
        let resource_subscriptions =
            match (&self.resource_subscriptions, &other.resource_subscriptions) {
                (Some(asked), Some(taken)) => {
                    let uris: Vec<String> = asked
                        .iter()
                        .filter(|uri| taken.contains(uri))
                        .cloned()
                        .collect();
                    (!uris.is_empty()).then_some(uris)
                }
                _ => None,
            };
        SubscriptionFilter {
            tools_list_changed: both(self.tools_list_changed, other.tools_list_changed),
            prompts_list_changed: both(self.prompts_list_changed, other.prompts_list_changed),
            resources_list_changed: both(self.resources_list_changed, other.resources_list_changed),
            resource_subscriptions,
        }
    }

    /// What of this filter a server with `capabilities` can send.
    pub(crate) fn supported_by(&self, capabilities: &ServerCapabilities) -> SubscriptionFilter {
        let tools = capabilities
            .tools
            .as_ref()
            .is_some_and(|tools| tools.list_changed == Some(true));
        SubscriptionFilter {
            tools_list_changed: (self.tools_list_changed == Some(true) && tools).then_some(true),
            // haip serves no prompts and no resources.
            ..SubscriptionFilter::default()
        }
    }
}

/// The result that ends a `subscriptions/listen` (2026-07-28).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SubscriptionsListenResult {
    pub(crate) result_type: ResultType,
    #[serde(rename = "_meta")]
    pub(crate) meta: MetaObject,
}

impl SubscriptionsListenResult {
    /// The end of the listen `id`, from the server `server_info`.
    pub(crate) fn complete(
        id: &RequestId,
        server_info: &Implementation,
    ) -> SubscriptionsListenResult {
        let mut meta = MetaObject::new();
        meta.insert(SUBSCRIPTION_ID.to_owned(), id.to_value());
        meta.insert(SERVER_INFO.to_owned(), json!(server_info));
        SubscriptionsListenResult {
            result_type: ResultType::Complete,
            meta,
        }
    }
}

// ---------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------

/// An answer to `tasks/update` or `tasks/cancel`: nothing but "done".
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskAckResult {
    result_type: ResultType,
}

/// A result of no content (`ping`, `logging/setLevel`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct EmptyResult {}

/// The result of a request the server answers.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub(crate) enum ServerResult {
    Initialize(InitializeResult),
    Discover(DiscoverResult),
    ListTools(ListToolsResult),
    CallTool(CallToolResult),
    InputRequired(InputRequiredResult),
    CreateTask(CreateTaskResult),
    GetTask(GetTaskResult),
    SubscriptionsListen(SubscriptionsListenResult),
    TaskAck(TaskAckResult),
    Empty(EmptyResult),
}

impl ServerResult {
    /// `{}`.
    pub(crate) fn empty(_: ()) -> ServerResult {
        ServerResult::Empty(EmptyResult {})
    }

    /// The answer to `tasks/update` or `tasks/cancel`.
    pub(crate) fn task_ack(_: ()) -> ServerResult {
        ServerResult::TaskAck(TaskAckResult {
            result_type: ResultType::Complete,
        })
    }

    /// For a client of a revision before 2026-07-28: no `resultType:
    /// "complete"` (the field did not exist; strict clients refuse it).
    pub(crate) fn strip_result_type_for_legacy_peer(&mut self) {
        let result_type = match self {
            ServerResult::ListTools(r) => &mut r.result_type,
            ServerResult::CallTool(r) => &mut r.result_type,
            _ => return,
        };
        result_type.take_if(|t| *t == ResultType::Complete);
    }

    /// For a client of a revision before 2026-07-28, where both had to be
    /// objects: no output schema that is not an object's, and structured
    /// content that is not an object becomes the first text block (unless
    /// that block already holds it).
    pub(crate) fn strip_non_object_output_for_legacy_peer(&mut self) {
        match self {
            ServerResult::ListTools(r) => {
                let object = |schema: &Arc<JsonObject>| {
                    schema.get("type").and_then(Value::as_str) == Some("object")
                };
                for tool in &mut r.tools {
                    // Shared tools are copied only when one must change.
                    if tool.output_schema.as_ref().is_some_and(|s| !object(s)) {
                        Arc::make_mut(tool).output_schema = None;
                    }
                }
            }
            ServerResult::CallTool(r) => {
                if let Some(value) = r.structured_content.take_if(|value| !value.is_object()) {
                    let in_content = r
                        .content
                        .first()
                        .and_then(ContentBlock::as_text)
                        .is_some_and(|text| {
                            serde_json::from_str::<Value>(text).is_ok_and(|v| v == value)
                        });
                    if !in_content {
                        r.content.insert(0, ContentBlock::text(value.to_string()));
                    }
                }
            }
            _ => {}
        }
    }

    /// For a client of 2026-07-28: a complete `tools/list` says how long it
    /// may be cached (not at all, and by nobody but this client, unless it
    /// says otherwise).
    pub(crate) fn fill_missing_cache_hints(&mut self) {
        if let ServerResult::ListTools(r) = self
            && r.result_type.is_none_or(|t| t == ResultType::Complete)
        {
            r.ttl_ms.get_or_insert(0);
            r.cache_scope.get_or_insert(CacheScope::Private);
        }
    }
}

impl From<CallToolResponse> for ServerResult {
    fn from(response: CallToolResponse) -> Self {
        match response {
            CallToolResponse::Complete(result) => ServerResult::CallTool(result),
            CallToolResponse::InputRequired(result) => ServerResult::InputRequired(result),
            CallToolResponse::Task(result) => ServerResult::CreateTask(result),
        }
    }
}

// ---------------------------------------------------------------------------
// What the server asks of a client
// ---------------------------------------------------------------------------

/// Whether `params` are an `elicitation/create` by form MCP clients can
/// show: a message, and a flat object schema whose properties are strings,
/// numbers, booleans or lists of choices.
pub(crate) fn check_elicitation(params: &Value) -> Result<(), String> {
    if !params.get("message").is_some_and(Value::is_string) {
        return Err("it needs a `message`".to_owned());
    }
    let Some(schema) = params.get("requestedSchema").and_then(Value::as_object) else {
        return Err("it needs a `requestedSchema` object".to_owned());
    };
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err("its `requestedSchema` must be of `type: \"object\"`".to_owned());
    }
    let properties = match schema.get("properties") {
        Some(Value::Object(properties)) => properties,
        Some(_) => return Err("its `properties` must be an object".to_owned()),
        None => return Err("its `requestedSchema` needs `properties`".to_owned()),
    };
    for (name, property) in properties {
        let kind = property.get("type").and_then(Value::as_str);
        let fits = match kind {
            Some("string" | "number" | "integer" | "boolean") => true,
            Some("array") => property.get("items").is_some_and(Value::is_object),
            _ => {
                property.get("enum").is_some_and(Value::is_array)
                    || property.get("oneOf").is_some_and(Value::is_array)
                    || property.get("anyOf").is_some_and(Value::is_array)
            }
        };
        if !fits {
            return Err(format!(
                "field {name:?} is not a string, a number, a boolean or a choice"
            ));
        }
    }
    if let Some(required) = schema.get("required")
        && !required
            .as_array()
            .is_some_and(|names| names.iter().all(Value::is_string))
    {
        return Err("its `required` must be a list of names".to_owned());
    }
    Ok(())
}

/// Whether `params` are a `sampling/createMessage` MCP clients can take:
/// messages (each with a role and content) and a token limit.
pub(crate) fn check_sampling(params: &Value) -> Result<(), String> {
    let Some(messages) = params.get("messages").and_then(Value::as_array) else {
        return Err("missing field `messages`".to_owned());
    };
    for (i, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str);
        if !matches!(role, Some("user" | "assistant")) {
            return Err(format!(
                "message {i}: `role` must be \"user\" or \"assistant\""
            ));
        }
        if !message
            .get("content")
            .is_some_and(|c| c.is_object() || c.is_array())
        {
            return Err(format!("message {i}: missing `content`"));
        }
    }
    if !params.get("maxTokens").is_some_and(Value::is_u64) {
        return Err("missing field `maxTokens`".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests;

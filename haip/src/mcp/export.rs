//! Export: the registry served as an MCP server, over stdio or Streamable
//! HTTP at `/mcp`. Calls run through the same executor as HAIP calls (input
//! validation, timeout, panic capture, cancellation with grace period).

// MCP logging and sampling are deprecated upstream (SEP-2577), and still what
// today's MCP clients speak: tools' log lines and `ctx.sample` use them.
#![allow(deprecated)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use std::sync::atomic::AtomicU8;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, InputRequiredResult, ListToolsResult, LoggingLevel,
    LoggingMessageNotificationParam, PaginatedRequestParams, ProgressNotificationParam,
    ProtocolVersion, ServerCapabilities, ServerConfig, SetLevelRequestParams,
};
use rmcp::service::{NotificationContext, Peer as McpPeer, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{Map, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use super::import::McpContent;
use super::mrtr::{BadState, Can, RoundPeer, Rounds};
use super::peer::SessionPeer;
use super::tasks::{NOTE_EVERY, TaskPeer, Tasks};
use crate::content::Shape;
use crate::context::Caller;
use crate::context::{LogLevel, LogLine, Peer, ProgressSlot};
use crate::exec::{self, CallEvent, CallKey, Completion, Outcome, Policy, Validation};
use crate::protocol::payload::{ToolFailure, ToolOutcome};
use crate::protocol::{ErrorCode, json_len};
use crate::schema::SchemaProfile;
use crate::session::Shared;
use crate::session::tasks::{TaskEnd, TaskStatus};
use crate::stats::{Ended, Throttle, UNKNOWN_TOOL};
use crate::tool::{TaskSupport, Tool};

/// The caller an authenticated `/mcp` request carries into its calls.
#[derive(Clone)]
pub(crate) struct McpCaller(pub(crate) Option<Arc<Caller>>);

/// One MCP session's view of the registry.
#[derive(Clone)]
pub(crate) struct ExportService {
    shared: Arc<Shared>,
    session_id: Arc<str>,
    /// Calls of this MCP session executing at once (`max_inflight_calls`).
    inflight: Arc<Semaphore>,
    calls: Arc<AtomicU64>,
    _live: Option<Arc<LiveSession>>,
    /// Cancelled when the last clone of this session's service is dropped
    /// (the session ended): stops its `list_changed` relay.
    ended: CancellationToken,
    _ended_on_drop: Arc<tokio_util::sync::DropGuard>,
    /// Set once the relay runs: a repeated `initialized` starts no second one.
    relaying: Arc<AtomicBool>,
    /// The least severe log line the client wants (`logging/setLevel`;
    /// `info` until it says), as a [`LogLevel`] index.
    log_level: Arc<AtomicU8>,
    /// Serves one stateless `/mcp` request (no MCP session): nothing reaches
    /// the client outside this request's response, and the client cannot
    /// answer requests of the server (elicitation, sampling).
    stateless: bool,
    /// How calls of stateless requests ask questions by rounds (`mrtr.rs`).
    rounds: Option<Arc<Rounds>>,
    /// The server's tasks (`tasks.rs`).
    tasks: Arc<Tasks>,
}

/// Counts live MCP-over-HTTP sessions (in stateless mode, requests being
/// served), for `max_sessions`.
pub(crate) struct LiveSession(Arc<AtomicUsize>);

impl Drop for LiveSession {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

impl ExportService {
    /// A service for one MCP session (stdio, or `/mcp` in session mode).
    pub(crate) fn new(
        shared: Arc<Shared>,
        live: Option<Arc<LiveSession>>,
        tasks: Arc<Tasks>,
    ) -> ExportService {
        let permits = shared.config.max_inflight_calls;
        let ended = CancellationToken::new();
        ExportService {
            shared,
            session_id: Arc::from(format!("mcp-{}", uuid::Uuid::new_v4())),
            inflight: Arc::new(Semaphore::new(permits)),
            calls: Arc::new(AtomicU64::new(0)),
            _live: live,
            _ended_on_drop: Arc::new(ended.clone().drop_guard()),
            ended,
            relaying: Arc::new(AtomicBool::new(false)),
            log_level: Arc::new(AtomicU8::new(LogLevel::Info as u8)),
            stateless: false,
            rounds: None,
            tasks,
        }
    }

    /// A service for a new HTTP session (in stateless mode, for one request),
    /// or an error when `max_sessions` are live.
    pub(crate) fn for_http(
        shared: &Arc<Shared>,
        live: &Arc<AtomicUsize>,
        stateless: bool,
        rounds: Option<Arc<Rounds>>,
        tasks: &Arc<Tasks>,
    ) -> Result<ExportService, std::io::Error> {
        let max = shared.config.max_sessions;
        if live
            .fetch_update(Relaxed, Relaxed, |n| (n < max).then_some(n + 1))
            .is_err()
        {
            return Err(std::io::Error::other(format!(
                "too many MCP sessions (max_sessions = {max})"
            )));
        }
        let guard = Arc::new(LiveSession(Arc::clone(live)));
        let mut service = ExportService::new(Arc::clone(shared), Some(guard), Arc::clone(tasks));
        service.stateless = stateless;
        service.rounds = rounds;
        Ok(service)
    }
}

/// A haip tool as an MCP tool, its schemas in `profile` (HAIP.md §6.14);
/// `None` when the profile cannot serve it. The output schema is advertised
/// only when it describes an object (MCP's `structuredContent` must be one).
pub(crate) fn mcp_tool(tool: &Tool, profile: SchemaProfile) -> Option<rmcp::model::Tool> {
    let input = match tool.advertised_input_schema(profile)? {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    let mut out = rmcp::model::Tool::new(
        tool.name().to_owned(),
        tool.description().to_owned(),
        Arc::new(input),
    );
    if let Some(Value::Object(output)) = structured_schema(tool, profile)
        && describes_object(output)
    {
        out.output_schema = Some(Arc::new(output.clone()));
    }
    // HAIP.md §6.13: the same fields one to one.
    out.title = tool.title().map(str::to_owned);
    let hints = tool.annotations();
    if !hints.is_empty() {
        out.annotations = Some(rmcp::model::ToolAnnotations::from_raw(
            None, // the title goes in `Tool.title`, not the older `annotations.title`
            hints.read_only_hint,
            hints.destructive_hint,
            hints.idempotent_hint,
            hints.open_world_hint,
        ));
    }
    if !tool.icons().is_empty() {
        out.icons = Some(tool.icons().iter().map(mcp_icon).collect());
    }
    // MCP has no field for tags; `_meta` is where a server says more about
    // a tool, under a key of its own. (HAIP's `TOOL_LIST` has no such place.)
    if !tool.tags().is_empty() {
        let mut meta = rmcp::model::MetaObject::new();
        meta.0
            .insert(TAGS_META.to_owned(), Value::from(tool.tags()));
        out.meta = Some(meta);
    }
    Some(out)
}

/// The `_meta` key of a tool's tags in `tools/list`.
pub(crate) const TAGS_META: &str = "io.github.haip-rs/tags";

/// A haip icon as an MCP icon (HAIP.md §6.13: the same fields).
fn mcp_icon(icon: &crate::protocol::Icon) -> rmcp::model::Icon {
    let mut out = rmcp::model::Icon::new(icon.src.clone());
    out.mime_type = icon.mime_type.clone();
    if !icon.sizes.is_empty() {
        out.sizes = Some(icon.sizes.clone());
    }
    out.theme = icon.theme.map(|theme| match theme {
        crate::protocol::IconTheme::Light => rmcp::model::IconTheme::Light,
        crate::protocol::IconTheme::Dark => rmcp::model::IconTheme::Dark,
    });
    out
}

/// The schema profile of an `/mcp` request (`?schema_profile=` on its URL),
/// set by the server's front door.
#[derive(Clone, Copy)]
pub(crate) struct McpProfile(pub(crate) SchemaProfile);

/// The schema of a tool's structured results: its output schema, or for a
/// tool returning `Rich<T>`, `T`'s; `None` for content-only results.
fn structured_schema(tool: &Tool, profile: SchemaProfile) -> Option<&Value> {
    let schema = tool.advertised_output_schema(profile)?;
    match tool.shape() {
        Shape::Plain => Some(schema),
        Shape::Rich => schema.get("properties")?.get("structured"),
        Shape::Block | Shape::List => None,
    }
}

fn describes_object(schema: &Map<String, Value>) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

impl ServerHandler for ExportService {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_tools()
            .build();
        // Every registry change is announced with
        // `notifications/tools/list_changed`: in an MCP session on its
        // stream, and without one on a `subscriptions/listen` stream (MCP
        // 2026-07-28, `listen.rs`), which rmcp acknowledges only for what
        // these capabilities promise. (A client of an earlier revision
        // without a session has neither: `initialize` tells it so.)
        if let Some(tools) = &mut capabilities.tools {
            tools.list_changed = Some(true);
        }
        // Tasks (SEP-2663), for the tools that support them.
        capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(
                rmcp::model::TASKS_EXTENSION_ID.to_owned(),
                Default::default(),
            );
        let mut info = InitializeResult::new(capabilities);
        info.server_info = Implementation::new("haip", env!("CARGO_PKG_VERSION"));
        info
    }

    /// The handshake of MCP revisions before 2026-07-28. Served on its own
    /// (no MCP session), it promises no `listChanged`: such a client has no
    /// stream to be told on (`subscriptions/listen` came with 2026-07-28).
    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let mut info = self.negotiate_initialize(&request)?;
        if self.stateless
            && let Some(tools) = &mut info.capabilities.tools
        {
            tools.list_changed = None;
        }
        Ok(info)
    }

    /// From now on, tell the client of every registry change
    /// (`notifications/tools/list_changed`) until the session or the server ends.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if self.relaying.swap(true, Relaxed) {
            return;
        }
        let mut changes = self.shared.registry.subscribe();
        let ended = self.ended.clone();
        let shutdown = self.shared.shutdown.clone();
        let peer = context.peer;
        self.shared.runner.tasks().spawn(async move {
            loop {
                tokio::select! {
                    () = ended.cancelled() => break,
                    () = shutdown.cancelled() => break,
                    changed = changes.changed() => {
                        if changed.is_err() || peer.notify_tool_list_changed().await.is_err() {
                            break;
                        }
                    }
                }
            }
        });
    }

    /// `logging/setLevel`: the least severe tool log line this client gets.
    /// Removed in MCP 2026-07-28 (a request says its level in its `_meta`):
    /// `-32601` for requests of that revision.
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if per_request(context.meta.protocol_version().as_ref()) {
            return Err(McpError::method_not_found::<
                rmcp::model::SetLevelRequestMethod,
            >());
        }
        self.log_level
            .store(log_level(request.level) as u8, Relaxed);
        Ok(())
    }

    /// `subscriptions/listen` (MCP 2026-07-28): tool list changes, the only
    /// notifications of a server with tools only (`listen.rs`).
    fn accepted_subscription_filter(
        &self,
        _requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(super::listen::accepted())
    }

    /// One listen stream, until its client goes away, the server shuts down
    /// or the registry is gone (`listen.rs`).
    async fn listen(
        &self,
        subscription: rmcp::service::SubscriptionContext,
    ) -> Result<(), McpError> {
        let listening =
            super::listen::listening(&subscription, &self.inflight, &self.shared.registry)?;
        let subject = subject_of(subscription.request_context());
        let tasks = self.tasks.watch();
        super::listen::run(
            subscription,
            listening,
            self.shared.shutdown.clone(),
            subject,
            tasks,
        )
        .await
    }

    /// A tool as `tools/list` shows it to the client of the request being
    /// served, in its schema profile: rmcp checks a call's `Mcp-Param-*`
    /// headers against the `x-mcp-header` annotations of this input schema
    /// (SEP-2243), so it must be the one the client was shown (only `full`
    /// keeps annotations). Asked while the request is handed over.
    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        let profile = SERVING
            .try_with(|serving| serving.profile)
            .ok()
            .flatten()
            .unwrap_or(self.shared.config.schema_profile);
        mcp_tool(&self.shared.registry.get(name)?, profile)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let profile = context
            .extensions
            .get::<hyper::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<McpProfile>())
            .map_or(self.shared.config.schema_profile, |p| p.0);
        let snapshot = self.shared.registry.snapshot();
        let caller = caller_of(&context);
        // A tool the profile cannot describe is left out (a host in strict
        // mode would refuse every tool for one it cannot take), and so is
        // one the caller's scopes do not allow (HAIP.md §17.1).
        Ok(ListToolsResult::with_all_items(
            snapshot
                .tools()
                .iter()
                .filter(|t| self.shared.config.shows(caller.as_deref(), t))
                .filter_map(|t| mcp_tool(t, profile))
                .collect(),
        ))
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let stats = &self.shared.stats;
        let received = Instant::now();
        let tool = self.shared.registry.get(&request.name);
        stats.call_started(tool.as_ref().map_or(UNKNOWN_TOOL, |t| t.name()));
        let Some(tool) = tool else {
            let ended = Ended::failed(&ErrorCode::TOOL_NOT_FOUND);
            stats.call_ended(UNKNOWN_TOOL, ended, Some(received.elapsed()));
            return Err(McpError::invalid_params(
                format!("Tool {} not found", super::inbound::quote(&request.name)),
                None,
            ));
        };
        // The caller's scopes (HAIP.md §17.1). Over HTTP the front door has
        // answered `403` already; this holds for every other way in.
        if let Some(forbidden) = self
            .shared
            .config
            .forbidden(caller_of(&context).as_deref(), &tool)
        {
            stats.call_ended(
                tool.name(),
                Ended::failed(&ErrorCode::FORBIDDEN),
                Some(received.elapsed()),
            );
            return Err(McpError::invalid_request(
                forbidden.message(),
                Some(forbidden.details()),
            ));
        }
        // A tool that always runs as a task needs a client that takes tasks.
        let takes_tasks = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        if tool.task_support() == TaskSupport::Required && !takes_tasks {
            stats.call_ended(
                tool.name(),
                Ended::failed(&ErrorCode::INVALID_MESSAGE),
                Some(received.elapsed()),
            );
            return Err(McpError::missing_required_client_capability(
                rmcp::model::ClientCapabilities::builder()
                    .enable_tasks()
                    .build(),
            ));
        }
        let as_task = takes_tasks && tool.task_support() != TaskSupport::Forbidden;
        // A large call's arguments come parsed already, beside the message.
        let parsed = context
            .extensions
            .get::<hyper::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<LargeArguments>())
            .and_then(LargeArguments::take);
        let params = Value::Object(parsed.or(request.arguments.take()).unwrap_or_default());
        let subject = subject_of(&context);
        // Without sessions, a 2026-07-28 client takes questions by rounds:
        // the answers its retry brings (checked before anything runs).
        let round = match self.round_peer(&tool, &params, subject.as_deref(), &request, &context) {
            Ok(round) => round,
            Err(bad) => {
                stats.call_ended(
                    tool.name(),
                    Ended::failed(&ErrorCode::INVALID_PARAMS),
                    Some(received.elapsed()),
                );
                return Err(McpError::invalid_params(bad.0, None));
            }
        };
        let arguments = round.as_ref().map(|_| params.clone());
        let max_violations = self.shared.config.max_violations;
        let large = context
            .extensions
            .get::<hyper::http::request::Parts>()
            .is_some_and(|parts| parts.extensions.get::<LargeRequest>().is_some());
        // Large params are validated off the runtime's workers, a few at once.
        let validation = if large {
            self.shared
                .runner
                .validate_large(tool.clone(), params, max_violations)
                .await
        } else {
            let mut params = params;
            let found = tool.check_params(&mut params, max_violations);
            if found.is_empty() {
                Validation::Valid(params)
            } else {
                Validation::Invalid(found)
            }
        };
        let params = match validation {
            Validation::Valid(params) => params,
            Validation::Failed => {
                stats.call_ended(
                    tool.name(),
                    Ended::failed(&ErrorCode::INTERNAL_ERROR),
                    Some(received.elapsed()),
                );
                let text = format!("Internal error validating params for tool {}", tool.name());
                return Ok(error_result(text, None).into());
            }
            Validation::Invalid(found) => {
                stats.call_ended(
                    tool.name(),
                    Ended::failed(&ErrorCode::INVALID_PARAMS),
                    Some(received.elapsed()),
                );
                return Ok(invalid_params_result(&tool, &found).into());
            }
        };
        let Ok(permit) = Arc::clone(&self.inflight).try_acquire_owned() else {
            stats.call_ended(
                tool.name(),
                Ended::failed(&ErrorCode::RATE_LIMITED),
                Some(received.elapsed()),
            );
            return Ok(error_result("Too many tool calls in flight".to_owned(), None).into());
        };
        let call = Call {
            tool: &tool,
            params,
            subject: subject.clone(),
            caller: caller_of(&context),
            context: &context,
            permit,
            round: round.clone(),
            received,
        };
        let stop = if as_task {
            match self.run_as_task(call).await {
                AsTask::Task(result) => return Ok(CallToolResponse::Task(result)),
                AsTask::Refused(result) => {
                    stats.call_ended(
                        tool.name(),
                        Ended::failed(&ErrorCode::INTERNAL_ERROR),
                        Some(received.elapsed()),
                    );
                    return Ok(result.into());
                }
                AsTask::Stopped(stop) => stop,
            }
        } else {
            self.run(call).await
        };
        if let (Stop::InputRequired, Some(round), Some(rounds), Some(arguments)) =
            (&stop, &round, &self.rounds, &arguments)
        {
            // Not an end: the call goes on with the client's retry.
            stats.calls_total.fetch_sub(1, Relaxed);
            let (requests, state) =
                round.input_required(rounds, tool.name(), arguments, subject.as_deref());
            let result = InputRequiredResult::new(Some(requests), Some(state));
            return Ok(CallToolResponse::InputRequired(result));
        }
        let (ended, result) = result_of(&self.shared, &tool, stop);
        let latency = received.elapsed();
        stats.call_ended(tool.name(), ended, Some(latency));
        if tracing::enabled!(target: "haip::access", tracing::Level::INFO) {
            let bytes = json_len(&result);
            let who = subject.as_deref();
            stats.access("mcp", tool.name(), &context.id, who, ended, latency, bytes);
        }
        // A call that failed after a question its client could not take
        // (it did not declare the capability): say which it lacks.
        if result.is_error == Some(true)
            && let Some(required) = round.as_ref().and_then(|r| r.refused())
        {
            return Err(McpError::missing_required_client_capability(required));
        }
        Ok(result.into())
    }

    /// `tasks/get`.
    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, McpError> {
        let subject = subject_of(&context);
        self.tasks.get(&request.task_id, subject.as_deref()).await
    }

    /// `tasks/update`: answers to a task's questions.
    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let subject = subject_of(&context);
        self.tasks
            .update(
                &request.task_id,
                subject.as_deref(),
                request.input_responses,
            )
            .await
    }

    /// `tasks/cancel`.
    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let subject = subject_of(&context);
        self.tasks
            .cancel(&request.task_id, subject.as_deref())
            .await
    }
}

/// The authenticated caller of an `/mcp` request, if any.
fn caller_of(context: &RequestContext<RoleServer>) -> Option<Arc<Caller>> {
    context
        .extensions
        .get::<hyper::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<McpCaller>())
        .and_then(|c| c.0.clone())
}

/// The authenticated subject of an `/mcp` request, if any.
fn subject_of(context: &RequestContext<RoleServer>) -> Option<Arc<str>> {
    caller_of(context).map(|c| Arc::from(c.subject()))
}

/// Which questions the client of `context` can be sent.
fn can_of(context: &RequestContext<RoleServer>) -> Can {
    let caps = context.client_capabilities().unwrap_or_default();
    Can {
        elicit: caps.elicitation.is_some(),
        sample: caps.sampling.is_some(),
        roots: caps.roots.is_some(),
    }
}

/// One validated call, about to run.
struct Call<'a> {
    tool: &'a Tool,
    params: Value,
    subject: Option<Arc<str>>,
    caller: Option<Arc<Caller>>,
    context: &'a RequestContext<RoleServer>,
    /// Held until the tool's task has stopped.
    permit: OwnedSemaphorePermit,
    round: Option<Arc<RoundPeer>>,
    received: Instant,
}

/// How a call that may become a task was answered.
enum AsTask {
    /// It is a task now, running on.
    Task(rmcp::model::CreateTaskResult),
    /// It could not become one (too many tasks): this says why.
    Refused(CallToolResult),
    /// It stopped before it became one: answered as any call.
    Stopped(Stop),
}

impl ExportService {
    /// The client of this call when it takes questions by rounds (stateless
    /// `/mcp`, MCP 2026-07-28 or later), with the answers the request
    /// brings; `None` otherwise; `Err` for a `requestState` that does not
    /// verify.
    fn round_peer(
        &self,
        tool: &Tool,
        arguments: &Value,
        subject: Option<&str>,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<Arc<RoundPeer>>, BadState> {
        let Some(rounds) = self.rounds.as_deref().filter(|_| self.stateless) else {
            return Ok(None);
        };
        let modern = context
            .protocol_version()
            .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        if !modern {
            return Ok(None);
        }
        let can = can_of(context);
        let given = request
            .input_responses
            .clone()
            .map(|responses| responses.into_iter().collect::<Map<String, Value>>());
        let answers = rounds.answers(
            tool.name(),
            arguments,
            subject,
            request.request_state.as_deref(),
            given,
        )?;
        Ok(Some(RoundPeer::new(can, answers)))
    }
}

/// How an exported call stopped, before it becomes a `CallToolResult`.
enum Stop {
    Outcome(Outcome),
    /// The timeout elapsed; the task is being stopped in the background.
    TimedOut,
    /// The tool waits for answers its client gives on a later round; the
    /// task is being stopped in the background.
    InputRequired,
}

impl ExportService {
    /// What starts `call`, its questions going to `peer`.
    fn start_of(
        &self,
        call: &Call<'_>,
        cancel: CancellationToken,
        slot: Arc<ProgressSlot>,
        peer: Arc<dyn Peer>,
    ) -> exec::Start {
        let config = &self.shared.config;
        let n = self.calls.fetch_add(1, Relaxed);
        exec::Start {
            key: CallKey(n),
            tool: call.tool.clone(),
            params: call.params.clone(),
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
            peer: Some(peer),
        }
    }

    /// Runs one call to its end (or its timeout), relaying progress (when the
    /// client sent a progress token) and the client's cancellation. The
    /// concurrency `permit` is held until the tool's task has stopped.
    async fn run(&self, call: Call<'_>) -> Stop {
        // Unbounded but small by construction, as in a session: a progress
        // event only when the slot fills, then at most TimedOut and Finished.
        let (events_tx, mut events) = mpsc::unbounded_channel();
        let slot = Arc::new(ProgressSlot::default());
        // Server shutdown cancels the call as well as the client's cancellation.
        let cancel = self.shared.shutdown.child_token();
        let context = call.context;
        let round = call.round.clone();
        let peer: Arc<dyn Peer> = match &round {
            Some(round) => Arc::new(Arc::clone(round)),
            None => Arc::new(SessionPeer {
                peer: context.peer.clone(),
                stateless: self.stateless,
            }),
        };
        let start = self.start_of(&call, cancel.clone(), Arc::clone(&slot), peer);
        let Call { tool, permit, .. } = call;
        let logs = self.log_relay(context, tool);
        // A call that finished on its first poll is done here and now.
        if let Some((_, outcome)) = self.shared.runner.start(start, &events_tx) {
            logs.flush(&slot).await;
            return Stop::Outcome(*outcome);
        }
        // Only the call's task reports now: its end closes the channel.
        drop(events_tx);
        let token = context.meta.get_progress_token();
        loop {
            let event = tokio::select! {
                () = context.ct.cancelled(), if !cancel.is_cancelled() => {
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
                    let _ = context.peer.notify_progress(note).await;
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
    async fn end_round(
        &self,
        round: &RoundPeer,
        mut events: mpsc::UnboundedReceiver<CallEvent>,
        slot: &ProgressSlot,
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

    /// The relay of a call's log lines to the client of `context`.
    fn log_relay<'a>(
        &'a self,
        context: &'a RequestContext<RoleServer>,
        tool: &'a Tool,
    ) -> LogRelay<'a> {
        LogRelay {
            peer: &context.peer,
            level: &self.log_level,
            // A level in the request's `_meta` (how a stateless client says
            // it: no `logging/setLevel` outlives its request) wins.
            requested: context.meta.log_level().map(|l| log_level(l) as u8),
            logger: tool.name(),
        }
    }

    /// Runs a call of a tool that supports tasks, for a client that takes
    /// them: it becomes a task once it waits for anything but answers of the
    /// client's next round (see [`TaskSupport`]).
    async fn run_as_task(&self, call: Call<'_>) -> AsTask {
        let admission = match self.tasks.admit(call.subject.clone()) {
            Ok(admission) => admission,
            Err(why) => return AsTask::Refused(error_result(why, None)),
        };
        let (events_tx, mut events) = mpsc::unbounded_channel();
        let slot = Arc::new(ProgressSlot::default());
        let cancel = self.shared.shutdown.child_token();
        let context = call.context;
        let peer = self.tasks.peer(can_of(context), call.round.clone());
        let start = self.start_of(
            &call,
            cancel.clone(),
            Arc::clone(&slot),
            Arc::new(Arc::clone(&peer)),
        );
        let Call {
            tool,
            subject,
            permit,
            round,
            received,
            ..
        } = call;
        let logs = self.log_relay(context, tool);
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
                            return self
                                .ended_task(tool, &peer, subject, outcome, received)
                                .await;
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
                return AsTask::Stopped(Stop::Outcome(outcome));
            }
            return self
                .ended_task(tool, &peer, subject, outcome, received)
                .await;
        }
        let created = match self.tasks.create(&peer, subject.as_deref(), None).await {
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
        self.shared.runner.tasks().spawn(async move {
            let stop = follow(&tasks, &peer, &mut events, &slot, &cancel).await;
            if matches!(stop, Stop::TimedOut) {
                // Stopped within the grace period, in the background.
                shared.runner.tasks().spawn(stopping(events, permit));
            } else {
                drop(permit);
            }
            let (ended, end) = task_end(&shared, &tool, stop, peer.cancel.is_cancelled());
            tasks.finish(&peer, end).await;
            shared
                .stats
                .call_ended(tool.name(), ended, Some(received.elapsed()));
            drop(admission);
        });
        AsTask::Task(created)
    }

    /// A task that ended as it began (a tool that is always a task).
    async fn ended_task(
        &self,
        tool: &Tool,
        peer: &Arc<TaskPeer>,
        subject: Option<Arc<str>>,
        outcome: Outcome,
        received: Instant,
    ) -> AsTask {
        let (ended, end) = task_end(&self.shared, tool, Stop::Outcome(outcome), false);
        self.shared
            .stats
            .call_ended(tool.name(), ended, Some(received.elapsed()));
        match self.tasks.create(peer, subject.as_deref(), Some(end)).await {
            Ok(created) => AsTask::Task(created),
            Err(e) => AsTask::Refused(error_result(
                format!("The task could not be kept: {e}"),
                None,
            )),
        }
    }
}

/// Follows a task's call to its end: its progress into the task's status
/// message, `tasks/cancel` into the call's cancellation.
async fn follow(
    tasks: &Tasks,
    peer: &TaskPeer,
    events: &mut mpsc::UnboundedReceiver<CallEvent>,
    slot: &ProgressSlot,
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
            .find_map(|c| c.as_text().map(|t| t.text.clone()))
            .unwrap_or_default()
    };
    if panicked {
        let end = TaskEnd {
            status: TaskStatus::Failed,
            message: None,
            result: None,
            error: Some(serde_json::json!({"code": -32603, "message": text(&result)})),
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

/// The `CallToolResult` of a call that stopped.
fn result_of(shared: &Shared, tool: &Tool, stop: Stop) -> (Ended, CallToolResult) {
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
    let config = &shared.config;
    let policy = Policy {
        max_violations: config.max_violations,
        strict_output_validation: config.strict_output_validation,
        debug_errors: config.debug_errors,
    };
    let (completion, ended) = exec::complete(tool, outcome, policy, &shared.stats);
    let result = match completion {
        Completion::Done(ToolOutcome::Ok(value)) => {
            success_result(tool, value.unwrap_or(Value::Null))
        }
        Completion::Done(ToolOutcome::Cancelled(_)) => {
            error_result(format!("Tool {name} was cancelled"), None)
        }
        Completion::Done(ToolOutcome::Error(failure)) => {
            // An imported tool's `isError` blocks pass through as they are.
            let blocks = failure
                .details
                .as_ref()
                .filter(|_| imported(tool))
                .and_then(passthrough_blocks);
            match blocks {
                Some(blocks) => CallToolResult::error(blocks),
                None => failure_result(failure),
            }
        }
        // Not asked for (`render: None`): MCP renders values itself.
        Completion::Encoded(_) => error_result(format!("Internal error in tool {name}"), None),
    };
    // As HAIP's `TOOL_DONE` (HAIP.md §18.1): a result too large to send
    // becomes an error the model can read, and the call still ends once.
    let limit = config.max_outbound_message_bytes;
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
async fn stopping(mut events: mpsc::UnboundedReceiver<CallEvent>, permit: OwnedSemaphorePermit) {
    while let Some(event) = events.recv().await {
        if matches!(event, CallEvent::Finished(..)) {
            break;
        }
    }
    drop(permit);
}

/// Whether `tool` was imported from an MCP server (its results hold content blocks).
fn imported(tool: &Tool) -> bool {
    tool.mark::<McpContent>().is_some()
}

/// The MCP level of a HAIP log level, and back.
fn mcp_level(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Notice => LoggingLevel::Notice,
        LogLevel::Warning => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
    }
}

fn log_level(level: LoggingLevel) -> LogLevel {
    match level {
        LoggingLevel::Debug => LogLevel::Debug,
        LoggingLevel::Info => LogLevel::Info,
        LoggingLevel::Notice => LogLevel::Notice,
        LoggingLevel::Warning => LogLevel::Warning,
        _ => LogLevel::Error,
    }
}

/// Whether `version` is MCP 2026-07-28 or later: a revision whose requests
/// carry what they need in their `_meta` (no `initialize`, no
/// `logging/setLevel`).
fn per_request(version: Option<&ProtocolVersion>) -> bool {
    version.is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// Sends a call's log lines to the MCP client as `notifications/message`,
/// in order, those at or above the level it set.
struct LogRelay<'a> {
    peer: &'a McpPeer<RoleServer>,
    level: &'a AtomicU8,
    /// The request's own level (`_meta` `io.modelcontextprotocol/logLevel`).
    requested: Option<u8>,
    logger: &'a str,
}

impl LogRelay<'_> {
    async fn flush(&self, slot: &ProgressSlot) {
        let (lines, dropped) = slot.take_logs();
        let dropped = (dropped > 0).then(|| LogLine::dropped(dropped));
        let least = match self.requested {
            Some(level) => level,
            // MCP 2026-07-28: a request that names no `logLevel` in its
            // `_meta` gets no log lines (there is no `logging/setLevel`).
            None if self
                .peer
                .peer_info()
                .is_some_and(|info| per_request(Some(&info.protocol_version))) =>
            {
                return;
            }
            None => self.level.load(Relaxed),
        };
        for line in lines.iter().chain(dropped.as_ref()) {
            if (line.level as u8) < least {
                continue;
            }
            let data = match &line.data {
                None => Value::String(line.message.clone()),
                Some(data) => serde_json::json!({"message": line.message, "data": data}),
            };
            let note = LoggingMessageNotificationParam::new(mcp_level(line.level), data)
                .with_logger(self.logger);
            // A client that went away just misses its log lines.
            let _ = self.peer.notify_logging_message(note).await;
        }
    }
}

/// A successful result: `structuredContent` when the tool advertises an
/// object output schema, and always the value as text (a string as itself,
/// anything else as JSON) for clients that read only `content`. An imported
/// MCP tool's content blocks pass through as they are.
fn success_result(tool: &Tool, value: Value) -> CallToolResult {
    if imported(tool)
        && let Some(blocks) = passthrough_blocks(&value)
    {
        return CallToolResult::success(blocks);
    }
    if tool.shape().has_content() {
        return content_result(value);
    }
    let text = match &value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let content = if text.is_empty() {
        Vec::new()
    } else {
        vec![ContentBlock::text(text)]
    };
    let mut result = CallToolResult::success(content);
    let structured = matches!(tool.output_schema(), Some(Value::Object(s)) if describes_object(s));
    if structured {
        result.structured_content = Some(value);
    }
    result
}

/// A `{"content": [...], "structured"?: ...}` result (HAIP.md §6.12): the
/// blocks one to one, the structured value as `structuredContent`.
fn content_result(mut value: Value) -> CallToolResult {
    let blocks = value
        .get_mut("content")
        .map(Value::take)
        .and_then(|c| serde_json::from_value::<Vec<ContentBlock>>(c).ok())
        .unwrap_or_default();
    let mut result = CallToolResult::success(blocks);
    result.structured_content = value
        .get_mut("structured")
        .map(Value::take)
        .filter(Value::is_object);
    result
}

/// The blocks of an imported tool's `{"content": [...]}` result.
fn passthrough_blocks(value: &Value) -> Option<Vec<ContentBlock>> {
    let map = value.as_object()?;
    if map.len() != 1 {
        return None;
    }
    serde_json::from_value(map.get("content")?.clone()).ok()
}

/// The violations of a call's params, as a tool error the model can read.
fn invalid_params_result(tool: &Tool, found: &crate::schema::Violations) -> CallToolResult {
    let mut text = format!("Invalid params for tool {}:", tool.name());
    for v in &found.listed {
        let path = if v.path.is_empty() {
            "(params)"
        } else {
            &v.path
        };
        text.push_str(&format!("\n- {path}: {}", v.message));
    }
    let unlisted = found.total - found.listed.len();
    if unlisted > 0 || !found.exhaustive {
        let more = if found.exhaustive { "" } else { "at least " };
        text.push_str(&format!("\n(and {more}{unlisted} more)"));
    }
    error_result(text, None)
}

/// A tool error the model can read: the message, then the code and any details.
fn failure_result(failure: ToolFailure) -> CallToolResult {
    error_result(
        format!("{} ({})", failure.message, failure.code),
        failure.details,
    )
}

fn error_result(message: String, details: Option<Value>) -> CallToolResult {
    let mut content = vec![ContentBlock::text(message)];
    if let Some(details) = details {
        content.push(ContentBlock::text(details.to_string()));
    }
    CallToolResult::error(content)
}

/// The Streamable HTTP MCP endpoint at `/mcp`.
///
/// **Stateless** (the default): every POST is served on its own by a fresh
/// [`ExportService`], with no `Mcp-Session-Id`, so any instance behind a load
/// balancer answers any request. A plain request-response is answered with
/// `application/json`; a call that reports progress or log lines first gets
/// them on its response's SSE stream. `GET` and `DELETE` are `405`. An MCP
/// 2026-07-28 client takes a call's questions in rounds (`mrtr.rs`) and
/// hears of registry changes on a `subscriptions/listen` stream
/// (`listen.rs`); for a client of an earlier revision, requests of the
/// server (elicitation, sampling) are refused at once
/// (`AskError::Unsupported`, `SampleError::Unsupported`): the answer would
/// be a new POST that nothing waits for. `max_sessions` bounds the requests
/// being served at once (a listen stream is one while it is open; at most
/// half of them may be listen streams).
///
/// **Sessions** (`ServerBuilder::mcp_sessions(true)`): `initialize` opens an
/// MCP session held by this instance (`Mcp-Session-Id`), which serves the
/// client's later requests, its answers to elicitation and sampling, and the
/// `GET` stream that carries `notifications/tools/list_changed`.
/// `max_sessions` bounds the live sessions and the requests served on their
/// own: those of protocol revisions without `initialize`, 2026-07-28 and
/// later, are stateless either way (rounds, listen streams).
pub(crate) struct McpHttp {
    service: rmcp::transport::StreamableHttpService<
        ExportService,
        rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
    >,
    live: Arc<AtomicUsize>,
    max_sessions: usize,
    sessions: bool,
    /// The places for `subscriptions/listen` streams (`listen.rs`).
    listens: super::listen::Listens,
}

impl McpHttp {
    /// `open_host`: accept any `Host` header (authentication is on, or the
    /// operator allowed unauthenticated non-loopback serving). Otherwise only
    /// loopback hosts are accepted, against DNS rebinding. `max_body_bytes`:
    /// the largest request body. `sessions`: MCP sessions held by this
    /// instance instead of stateless requests. `rounds`: how stateless calls
    /// ask questions. `tasks`: the server's tasks.
    pub(crate) fn new(
        shared: &Arc<Shared>,
        open_host: bool,
        max_body_bytes: usize,
        sessions: bool,
        rounds: Arc<Rounds>,
        tasks: Arc<Tasks>,
    ) -> McpHttp {
        use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
        let mut config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(sessions)
            // Stateless: a result with nothing before it is plain JSON.
            .with_json_response(!sessions)
            .with_cancellation_token(shared.shutdown.child_token())
            // An SSE comment every 15 s on an idle response stream (a listen
            // stream, a session's `GET`): proxies keep it open, and a client
            // that went away is noticed.
            .with_sse_keep_alive(Some(std::time::Duration::from_secs(15)))
            .with_max_request_body_bytes(max_body_bytes);
        if open_host {
            config = config.disable_allowed_hosts();
        }
        let live = Arc::new(AtomicUsize::new(0));
        let factory_shared = Arc::clone(shared);
        let factory_live = Arc::clone(&live);
        let service = rmcp::transport::StreamableHttpService::new(
            move || {
                // Asked for once the request is parsed: a large one's permit
                // is not needed any more.
                let stateless = SERVING
                    .try_with(|serving| {
                        serving.parsing.borrow_mut().take();
                        serving.stateless
                    })
                    .unwrap_or(!sessions);
                let rounds = stateless.then(|| Arc::clone(&rounds));
                ExportService::for_http(&factory_shared, &factory_live, stateless, rounds, &tasks)
            },
            Arc::default(),
            config,
        );
        McpHttp {
            service,
            live,
            max_sessions: shared.config.max_sessions,
            sessions,
            listens: super::listen::Listens::new(shared.config.max_sessions),
        }
    }

    /// The places for `subscriptions/listen` streams, taken by the front
    /// door when a listen request arrives.
    pub(crate) fn listens(&self) -> &super::listen::Listens {
        &self.listens
    }

    /// Whether `req` would need a service while `max_sessions` are live: a
    /// POST opening a session, or in stateless mode any POST. (The service
    /// factory's own check, which rmcp answers with a 500, stays as the
    /// race-free backstop.)
    pub(crate) fn is_full_for(&self, req: &hyper::Request<hyper::body::Incoming>) -> bool {
        let needs_service = req.method() == hyper::Method::POST
            && (!self.sessions || !req.headers().contains_key("mcp-session-id"));
        needs_service && self.live.load(Relaxed) >= self.max_sessions
    }

    /// Serves one request; `caller` is the authenticated caller, if any.
    /// `parsing`: the permit a large request was let in with, given back once
    /// the MCP server has parsed it (when it asks for its service), or with
    /// the request's response at the latest; its calls validate their params
    /// off the runtime's workers.
    pub(crate) async fn handle<B>(
        &self,
        mut req: hyper::Request<B>,
        caller: Option<Arc<Caller>>,
        parsing: Option<OwnedSemaphorePermit>,
    ) -> hyper::Response<
        http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, std::convert::Infallible>,
    >
    where
        B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: std::fmt::Display,
    {
        use http_body_util::BodyExt;
        req.extensions_mut().insert(McpCaller(caller));
        if parsing.is_some() {
            req.extensions_mut().insert(LargeRequest);
        }
        // In session mode, a POST without `Mcp-Session-Id` that is not an
        // `initialize` is of a revision without sessions (2026-07-28 and
        // later): rmcp serves it on its own, and so must its service.
        let stateless = !self.sessions
            || (req.method() == hyper::Method::POST
                && !req.headers().contains_key("mcp-session-id")
                && req.extensions().get::<Handshake>().is_none());
        let serving = Serving {
            parsing: std::cell::RefCell::new(parsing),
            stateless,
            profile: req.extensions().get::<McpProfile>().map(|p| p.0),
        };
        let served = self.service.handle(req);
        SERVING
            .scope(serving, served)
            .await
            .map(|b| b.boxed_unsync())
    }
}

tokio::task_local! {
    /// The request being handed to the MCP server, while it is.
    static SERVING: Serving;
}

/// What the front door knows of the request being handed to the MCP
/// server, for what the MCP server asks of it meanwhile: the service for
/// the request (its factory takes no arguments), a tool's input schema.
struct Serving {
    /// The permit of a large request: given back once the MCP server has
    /// parsed it (when it asks for its service).
    parsing: std::cell::RefCell<Option<OwnedSemaphorePermit>>,
    /// Served on its own, no MCP session holding it: in stateless mode any
    /// request; in session mode one of a revision without `initialize`.
    stateless: bool,
    /// The schema profile its URL asks for (`?schema_profile=`), if any.
    profile: Option<SchemaProfile>,
}

/// Marks an `initialize` request (the front door has read its method): in
/// session mode it opens a session, and is not served on its own.
#[derive(Clone, Copy)]
pub(crate) struct Handshake;

/// Marks a request over 64 KiB: its params are validated on the blocking pool.
#[derive(Clone, Copy)]
pub(crate) struct LargeRequest;

/// The arguments of a large `tools/call`, parsed by the server's front door
/// off the runtime's workers and left out of the message the MCP server
/// parses (which keeps only their small scalars, and the values that travel
/// in `Mcp-Param-*` headers too). Taken once, by the call.
#[derive(Clone, Default)]
pub(crate) struct LargeArguments(pub(crate) Arc<std::sync::Mutex<Option<Map<String, Value>>>>);

impl LargeArguments {
    pub(crate) fn new(arguments: Map<String, Value>) -> LargeArguments {
        LargeArguments(Arc::new(std::sync::Mutex::new(Some(arguments))))
    }

    fn take(&self) -> Option<Map<String, Value>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Context;
    use crate::tool::ToolError;
    use serde_json::json;

    fn tool(output: Option<Value>) -> Tool {
        let mut b = Tool::builder("t")
            .description("A tool")
            .input_schema(json!({"type": "object", "properties": {"x": {"type": "integer"}}}))
            .handler(|_: Value, _: Context| async { Ok(Value::Null) });
        if let Some(output) = output {
            b = b.output_schema(output);
        }
        b.build().unwrap()
    }

    #[test]
    fn only_object_output_schemas_are_advertised() {
        let object = json!({"type": "object", "properties": {"r": {"type": "number"}}});
        let t = mcp_tool(&tool(Some(object.clone())), SchemaProfile::Full).unwrap();
        assert_eq!(t.name, "t");
        assert_eq!(t.description.as_deref(), Some("A tool"));
        assert_eq!(
            Value::Object((*t.input_schema).clone())["properties"]["x"]["type"],
            "integer"
        );
        assert_eq!(Value::Object((*t.output_schema.unwrap()).clone()), object);
        assert!(
            mcp_tool(&tool(Some(json!({"type": "string"}))), SchemaProfile::Full)
                .unwrap()
                .output_schema
                .is_none()
        );
        assert!(
            mcp_tool(&tool(None), SchemaProfile::Full)
                .unwrap()
                .output_schema
                .is_none()
        );
    }

    #[test]
    fn results_carry_text_and_structured_content_when_advertised() {
        let object = json!({"type": "object"});
        let r = success_result(&tool(Some(object)), json!({"r": 1}));
        assert_eq!(r.is_error, Some(false));
        assert_eq!(r.structured_content, Some(json!({"r": 1})));
        assert_eq!(r.content[0].as_text().unwrap().text, "{\"r\":1}");

        let r = success_result(&tool(Some(json!({"type": "string"}))), json!("plain"));
        assert_eq!(r.structured_content, None);
        assert_eq!(r.content[0].as_text().unwrap().text, "plain");

        assert!(success_result(&tool(None), Value::Null).content.is_empty());
    }

    #[test]
    fn imported_content_blocks_pass_through() {
        let imported = Tool::builder("img")
            .mark(McpContent)
            .handler(|_: Value, _: Context| async { Ok(Value::Null) })
            .build()
            .unwrap();
        let value = json!({"content": [
            {"type": "text", "text": "a logo"},
            {"type": "image", "data": "iVBORw0=", "mimeType": "image/png"}
        ]});
        let r = success_result(&imported, value.clone());
        assert_eq!(r.content.len(), 2);
        assert_eq!(r.content[0].as_text().unwrap().text, "a logo");
        assert!(r.content[1].as_image().is_some());
        // A haip tool returning the same shape is not reinterpreted.
        let r = success_result(&tool(None), value);
        assert_eq!(r.content.len(), 1);
        assert!(
            r.content[0]
                .as_text()
                .unwrap()
                .text
                .starts_with("{\"content\"")
        );
    }

    /// Every service promises `listChanged` (a session's stream, or without
    /// one a `subscriptions/listen` stream, carries it); each counts against
    /// `max_sessions` while it lives.
    #[tokio::test]
    async fn http_services_count_and_all_promise_list_changed() {
        let config = crate::session::SessionConfig {
            max_sessions: 2,
            ..Default::default()
        };
        let shared = Shared::for_tests(config);
        let live = Arc::new(AtomicUsize::new(0));
        let tasks = Tasks::new(&shared, crate::mcp::tasks::TaskSettings::default());
        let session = ExportService::for_http(&shared, &live, false, None, &tasks).unwrap();
        let stateless = ExportService::for_http(&shared, &live, true, None, &tasks).unwrap();
        assert_eq!(live.load(Relaxed), 2);
        let full = ExportService::for_http(&shared, &live, true, None, &tasks);
        assert!(full.is_err(), "a third service with max_sessions = 2");
        let tools = |s: &ExportService| s.get_info().capabilities.tools.unwrap();
        assert_eq!(tools(&session).list_changed, Some(true));
        assert_eq!(tools(&stateless).list_changed, Some(true));
        assert!(stateless.get_info().capabilities.logging.is_some());
        drop(stateless);
        assert_eq!(live.load(Relaxed), 1);
        drop(session);
        assert_eq!(live.load(Relaxed), 0);
    }

    #[test]
    fn tool_errors_are_readable_text() {
        let e = ToolError::execution("no such user").with_details(json!({"id": 3}));
        let r = failure_result(e.into_failure());
        assert_eq!(r.is_error, Some(true));
        assert_eq!(
            r.content[0].as_text().unwrap().text,
            "no such user (TOOL_EXECUTION_ERROR)"
        );
        assert_eq!(r.content[1].as_text().unwrap().text, "{\"id\":3}");
    }
}

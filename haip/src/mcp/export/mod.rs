//! Export: the registry served as an MCP server, over stdio or Streamable
//! HTTP at `/mcp`. Calls run through the same executor as HAIP calls (input
//! validation, timeout, panic capture, cancellation with grace period).
//!
//! Here: one MCP session's [`ExportService`] and the requests it answers.
//! Its calls run in `calls.rs` (those that become MCP tasks in `as_task.rs`),
//! tools and results are shown as MCP shows them in `render.rs`, log lines
//! relayed in `logs.rs`; `http.rs` is the `/mcp` endpoint, which makes a
//! service per MCP session or per request.

mod as_task;
mod calls;
pub(crate) mod direct;
mod events;
mod http;
mod logs;
pub(crate) mod render;
mod request;
pub(crate) mod session;
pub(crate) mod stateless;
#[cfg(test)]
mod tests;

pub(crate) use http::{McpHttp, McpProfile};

use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use std::collections::BTreeMap;

use crate::mcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, InitializeRequestParams,
    InitializeResult, InputRequiredResult, JsonObject, ListToolsResult, ServerCapabilities,
    ServerConfig, TASKS_EXTENSION_ID, ToolsCapability,
};
use crate::mcp::model::{McpError, ProtocolVersion};
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use self::as_task::AsTask;
use self::calls::{Call, Stop, result_of};
use self::http::Held;
use self::render::{error_result, invalid_params_result, mcp_tool};
use self::request::CallRequest;
use super::mrtr::{BadState, RoundPeer, Rounds};
use super::tasks::Tasks;
use crate::context::{Caller, LogLevel};
use crate::exec;
use crate::exec::admit::{Admitted, Arrival, Check, DoorRule, Refused};
use crate::protocol::{ErrorCode, json_len};
use crate::schema::SchemaProfile;
use crate::session::Shared;
use crate::stats::Ended;
use crate::tool::TaskSupport;

/// The headers of MCP's Streamable HTTP that `/mcp` reads on every request,
/// as names made once: a lookup by text parses the text every time.
pub(crate) mod header_names {
    use hyper::header::HeaderName;

    /// `MCP-Protocol-Version`.
    pub(crate) const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
    /// `Mcp-Method` (2026-07-28, SEP-2243).
    pub(crate) const METHOD: HeaderName = HeaderName::from_static("mcp-method");
    /// `Mcp-Name` (2026-07-28, SEP-2243).
    pub(crate) const NAME: HeaderName = HeaderName::from_static("mcp-name");
    /// `Mcp-Session-Id`.
    pub(crate) const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
}

/// One MCP session's view of the registry.
#[derive(Clone)]
pub(crate) struct ExportService {
    shared: Arc<Shared>,
    session_id: Arc<str>,
    /// Calls of this MCP session executing at once (`max_inflight_calls`).
    inflight: Arc<Semaphore>,
    calls: Arc<AtomicU64>,
    _live: Option<Arc<LiveSession>>,
    /// What it holds of `/mcp`'s pools beside its place among
    /// `max_sessions` (its caller's share; for a session, the record of who
    /// opened it): given back when the last clone is dropped (`http.rs`).
    held: Option<Arc<Held>>,
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

/// Counts one of `/mcp`'s services in its pool (live MCP sessions, or
/// stateless requests being served), for `max_sessions`.
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
        ExportService {
            shared,
            session_id: new_session_id(),
            inflight: Arc::new(Semaphore::new(permits)),
            calls: Arc::new(AtomicU64::new(0)),
            _live: live,
            held: None,
            log_level: Arc::new(AtomicU8::new(LogLevel::Info as u8)),
            stateless: false,
            rounds: None,
            tasks,
        }
    }

    /// A service for a new HTTP session or for one stateless request,
    /// counted in `live` (its pool), or an error when `max_sessions` are
    /// live there.
    pub(crate) fn for_http(
        shared: &Arc<Shared>,
        live: &Arc<AtomicUsize>,
        stateless: bool,
        rounds: Option<Arc<Rounds>>,
        tasks: &Arc<Tasks>,
    ) -> Result<ExportService, std::io::Error> {
        let guard = LiveSession::enter(live, shared.config.max_sessions)?;
        let mut service = ExportService::new(Arc::clone(shared), Some(guard), Arc::clone(tasks));
        service.stateless = stateless;
        service.rounds = rounds;
        Ok(service)
    }

    /// What the services of stateless requests served without the MCP
    /// server are copied from ([`for_request`](Self::for_request)): made
    /// once, so that a request allocates only what is its own.
    pub(crate) fn stateless(
        shared: &Arc<Shared>,
        rounds: &Arc<Rounds>,
        tasks: &Arc<Tasks>,
    ) -> ExportService {
        let mut service = ExportService::new(Arc::clone(shared), None, Arc::clone(tasks));
        service.stateless = true;
        service.rounds = Some(Arc::clone(rounds));
        // One call per request: the pool of requests bounds them.
        service.inflight = Arc::new(Semaphore::new(Semaphore::MAX_PERMITS));
        service
    }

    /// A service for one stateless request, copied from this one (made by
    /// [`stateless`](Self::stateless)) with an id of its own, counted in
    /// `live`; or an error when `max_sessions` are live there.
    pub(crate) fn for_request(
        &self,
        live: &Arc<AtomicUsize>,
    ) -> Result<ExportService, std::io::Error> {
        let guard = LiveSession::enter(live, self.shared.config.max_sessions)?;
        let mut service = self.clone();
        service.session_id = new_session_id();
        service._live = Some(guard);
        Ok(service)
    }
}

/// A new service's id (what its calls' `Context::session_id` gives): `mcp-`
/// and a random UUID, written straight into its one allocation (a stateless
/// request makes one per request).
fn new_session_id() -> Arc<str> {
    const PREFIX: &str = "mcp-";
    let mut id = [0u8; PREFIX.len() + uuid::fmt::Hyphenated::LENGTH];
    id[..PREFIX.len()].copy_from_slice(PREFIX.as_bytes());
    let written = uuid::Uuid::new_v4()
        .hyphenated()
        .encode_lower(&mut id[PREFIX.len()..])
        .len();
    let id = std::str::from_utf8(&id[..PREFIX.len() + written]).unwrap_or(PREFIX);
    Arc::from(id)
}

impl ExportService {
    /// The service, holding its caller's `share` of its pool while it lives.
    pub(crate) fn holding(mut self, share: crate::context::share::ShareGuard) -> ExportService {
        self.held = Some(Arc::new(Held::new(share)));
        self
    }
}

impl LiveSession {
    /// A place in the pool `live` of at most `max`.
    fn enter(live: &Arc<AtomicUsize>, max: usize) -> Result<Arc<LiveSession>, std::io::Error> {
        if live
            .fetch_update(Relaxed, Relaxed, |n| (n < max).then_some(n + 1))
            .is_err()
        {
            return Err(std::io::Error::other(format!(
                "Too many MCP sessions (max_sessions = {max})"
            )));
        }
        Ok(Arc::new(LiveSession(Arc::clone(live))))
    }
}

impl ExportService {
    /// What the server is and can do, at the newest revision that begins
    /// with `initialize`: the same for every request, made once.
    pub(crate) fn get_info(&self) -> &'static ServerConfig {
        static INFO: OnceLock<ServerConfig> = OnceLock::new();
        INFO.get_or_init(server_config)
    }

    /// The revisions served: every one haip knows.
    pub(crate) fn supported_protocol_versions(&self) -> &'static [ProtocolVersion] {
        ProtocolVersion::KNOWN_VERSIONS
    }

    /// The answer to `initialize`: the client's revision when it is one
    /// that begins with `initialize` and is served, else the newest such.
    /// (One of them is always served: nothing is refused.)
    pub(crate) fn negotiate_initialize(
        &self,
        params: &InitializeRequestParams,
    ) -> InitializeResult {
        let mut info = self.get_info().clone();
        let asked = &params.protocol_version;
        if asked.has_initialize() && self.supported_protocol_versions().contains(asked) {
            info.protocol_version = asked.clone();
        }
        info
    }
}

/// What haip is and can do over MCP ([`ExportService::get_info`]).
fn server_config() -> ServerConfig {
    // Tasks (SEP-2663), for the tools that support them.
    let mut extensions = BTreeMap::new();
    extensions.insert(TASKS_EXTENSION_ID.to_owned(), JsonObject::new());
    let capabilities = ServerCapabilities {
        extensions: Some(extensions),
        logging: Some(JsonObject::new()),
        // Every registry change is announced with
        // `notifications/tools/list_changed`: in an MCP session on its
        // stream, and without one on a `subscriptions/listen` stream
        // (MCP 2026-07-28, `listen.rs`), which acknowledges only what
        // these capabilities promise. (A client of an earlier revision
        // without a session has neither: `initialize` tells it so,
        // `stateless.rs`.)
        tools: Some(ToolsCapability {
            list_changed: Some(true),
        }),
    };
    InitializeResult {
        protocol_version: ProtocolVersion::V_2025_11_25,
        capabilities,
        server_info: Implementation {
            name: "haip".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        },
    }
}

impl ExportService {
    /// Serves a `tools/call`, whichever door hands it over.
    pub(crate) async fn serve_call(
        &self,
        mut params: CallToolRequestParams,
        mut request: CallRequest<'_>,
    ) -> Answer {
        let caller = request.caller.clone();
        let subject = caller.as_ref().map(|c| Arc::<str>::from(c.subject()));
        let admitted = self
            .admit_call(&mut params, &mut request, subject.as_deref())
            .await;
        let (
            Admitted {
                tool,
                params,
                book,
                door: round,
            },
            Place {
                permit,
                large,
                takes_tasks,
            },
        ) = match admitted {
            Ok(admitted) => admitted,
            Err(answer) => return *answer,
        };
        let now = || self.shared.clock.now();
        let arguments = round.as_ref().map(|_| params.clone());
        let mut book = Some(book);
        let call = Call {
            tool: &tool,
            params,
            large,
            subject: subject.clone(),
            caller,
            request: &request,
            permit,
            round: round.clone(),
            book: &mut book,
        };
        let as_task = takes_tasks && tool.task_support() != TaskSupport::Forbidden;
        let stop = if as_task {
            match self.run_as_task(call).await {
                AsTask::Task(result) => return Ok(CallToolResponse::Task(result)),
                AsTask::Refused(result) => {
                    // Unless the task ended and was counted before it
                    // could not be kept.
                    if let Some(book) = book.take() {
                        book.finish(Ended::failed(&ErrorCode::INTERNAL_ERROR), now());
                    }
                    return Ok(result.into());
                }
                AsTask::Stopped(stop) => stop,
            }
        } else {
            self.run(call).await
        };
        let book = book.expect("a call that did not become a task keeps its book");
        if let (Stop::InputRequired, Some(round), Some(rounds), Some(arguments)) =
            (&stop, &round, &self.rounds, &arguments)
        {
            // Not an end: the call goes on with the client's retry.
            book.suspend();
            let (requests, state) =
                round.input_required(rounds, tool.name(), arguments, subject.as_deref());
            let result = InputRequiredResult::new(Some(requests), Some(state));
            return Ok(CallToolResponse::InputRequired(result));
        }
        let (ended, result) = result_of(&self.shared, &tool, stop);
        let latency = book.finish(ended, now());
        if tracing::enabled!(target: "haip::access", tracing::Level::INFO) {
            let bytes = json_len(&result);
            let who = subject.as_deref();
            let stats = &self.shared.stats;
            stats.access("mcp", tool.name(), request.id, who, ended, latency, bytes);
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

    /// A tool list as `tools/list` shows it to `caller`, in `profile` (the
    /// server's when `None`).
    pub(crate) fn tool_list(
        &self,
        profile: Option<SchemaProfile>,
        caller: Option<&Caller>,
    ) -> ListToolsResult {
        let profile = profile.unwrap_or(self.shared.config.schema_profile);
        let snapshot = self.shared.registry.snapshot();
        // Each tool as MCP shows it in this profile, made once per registry.
        // A tool the profile cannot describe is left out (a host in strict
        // mode would refuse every tool for one it cannot take), and so is
        // one the caller's scopes do not allow (docs/protocol.md §17.1).
        let shown: Arc<Vec<Option<Arc<crate::mcp::model::Tool>>>> =
            snapshot.memo(profile as u64, |snapshot| {
                let tools = snapshot.tools().iter();
                tools.map(|t| mcp_tool(t, profile).map(Arc::new)).collect()
            });
        ListToolsResult::with_all_items(
            snapshot
                .tools()
                .iter()
                .zip(shown.iter())
                .filter(|(t, _)| self.shared.config.shows(caller, t))
                .filter_map(|(_, shown)| shown.clone())
                .collect(),
        )
    }

    /// Admits a `tools/call` (with the export's own rules: tasks, rounds),
    /// checks large params off the runtime's workers, and takes a place
    /// among the session's calls in flight; or answers the refusal.
    async fn admit_call(
        &self,
        params: &mut CallToolRequestParams,
        request: &mut CallRequest<'_>,
        subject: Option<&str>,
    ) -> Result<(Admitted<Option<Arc<RoundPeer>>>, Place), Box<Answer>> {
        // A large call's arguments come parsed already, beside the message.
        let arguments = request.arguments.take().or(params.arguments.take());
        let large = request.large;
        // With layers, params are checked after them, in the call's task;
        // large ones off the runtime's workers, a few at once.
        let layered = self.shared.runner.layered();
        let takes_tasks = request.takes_tasks();
        let clock = &self.shared.clock;
        let now = || clock.now();
        let request = &*request;
        let caller = request.caller.as_deref();
        let arrival = Arrival {
            tool: Some(&params.name),
            call_id: request.id,
            session: Some(&self.session_id),
            door: request.door,
            meta: Some(request.meta),
            caller,
            received: now(),
            check: if layered || large {
                Check::Later
            } else {
                Check::Now
            },
        };
        let params_value = Value::Object(arguments.unwrap_or_default());
        let admitted = self
            .shared
            .gate(&now)
            .admit(arrival, params_value, |tool, arguments| {
                // A tool that always runs as a task needs a client that takes them.
                if tool.task_support() == TaskSupport::Required && !takes_tasks {
                    return Err(Rule::NeedsTasks);
                }
                // Without sessions, a 2026-07-28 client takes questions by
                // rounds: the answers its retry brings, checked before anything
                // runs.
                let round = self.round_peer(tool, arguments, subject, params, request);
                round.map_err(Rule::BadState)
            });
        let refused = |refused| Err(Box::new(self.refused(refused, &params.name, caller)));
        let mut admitted = match admitted {
            Ok(admitted) => admitted,
            Err(why) => return refused(why),
        };
        if large && !layered {
            let validating = admitted.book.span().mark();
            let (tool, params) = (admitted.tool.clone(), std::mem::take(&mut admitted.params));
            let max_violations = self.shared.config.max_violations;
            let runner = &self.shared.runner;
            let verdict = runner.validate_large(tool, params, max_violations).await;
            admitted.book.span().child("tool.validate", validating);
            admitted = match admitted.checked(verdict, now()) {
                Ok(admitted) => admitted,
                Err(why) => return refused(why),
            };
        }
        let Ok(permit) = Arc::clone(&self.inflight).try_acquire_owned() else {
            return refused(admitted.book.refuse(Refused::Busy, now()));
        };
        let place = Place {
            permit,
            large,
            takes_tasks,
        };
        Ok((admitted, place))
    }

    /// The answer to a call refused at admission (counted already): a
    /// JSON-RPC error where the request itself was wrong, else a tool
    /// result with `isError`.
    fn refused(&self, refused: Refused<Rule>, name: &str, caller: Option<&Caller>) -> Answer {
        match refused {
            Refused::UnknownTool => {
                let quoted = super::inbound::quote(name);
                let (message, _) = self
                    .shared
                    .registry
                    .snapshot()
                    .not_found(name, &quoted, |t| self.shared.config.shows(caller, t));
                Err(McpError::invalid_params(message, None))
            }
            // Over HTTP the front door has answered `403` already; this
            // holds for every other way in.
            Refused::Forbidden(forbidden) => Err(McpError::invalid_request(
                forbidden.message(),
                Some(forbidden.details()),
            )),
            Refused::Door(Rule::NeedsTasks) => Err(McpError::missing_required_client_capability(
                crate::mcp::model::ClientCapabilities::tasks(),
            )),
            Refused::Door(Rule::BadState(bad)) => Err(McpError::invalid_params(bad.0, None)),
            Refused::InvalidParams(tool, found) => Ok(invalid_params_result(&tool, &found).into()),
            Refused::CheckFailed(tool) => {
                Ok(error_result(exec::check_failed(tool.name()).message, None).into())
            }
            Refused::Busy => {
                Ok(error_result("Too many tool calls in flight".to_owned(), None).into())
            }
        }
    }
}

/// The answer to a `tools/call`.
pub(crate) type Answer = Result<CallToolResponse, McpError>;

/// What an admitted call holds besides its admission.
struct Place {
    /// Its place among the session's calls in flight.
    permit: OwnedSemaphorePermit,
    /// Its params are large.
    large: bool,
    /// Its client takes tasks.
    takes_tasks: bool,
}

/// The export's own reasons to refuse a call at admission.
enum Rule {
    /// The tool runs only as a task; the client does not take tasks.
    NeedsTasks,
    /// The `requestState` of a retry does not verify.
    BadState(BadState),
}

impl DoorRule for Rule {
    fn code(&self) -> ErrorCode {
        match self {
            Rule::NeedsTasks => ErrorCode::INVALID_MESSAGE,
            Rule::BadState(_) => ErrorCode::INVALID_PARAMS,
        }
    }
}

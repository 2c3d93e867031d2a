//! MCP sessions at `/mcp` (revisions before 2026-07-28), served by haip
//! itself: `initialize` opens one (`Mcp-Session-Id`), the client's later
//! requests, notifications and answers name it, its `GET` stream carries
//! `notifications/tools/list_changed`, its `DELETE` ends it.
//!
//! A session is a plain record in one map ([`Sessions`]): nothing runs for
//! it while it is idle, so an idle session costs its record (a few hundred
//! bytes beside its id and what its client declared). Each request is
//! answered on an SSE stream of its own (`events.rs`), numbered, so that a
//! client whose connection broke takes it up again with `Last-Event-ID`; a
//! call that ends at once is answered from its request's task, any other
//! runs on a task of its own beside its stream (and goes on if the
//! client's connection breaks). The server's requests (elicitation, sampling,
//! roots) go on the stream of the call that makes them, and their answers
//! come back as `POST`s, matched by JSON-RPC id.
//!
//! With a task store other instances read (Redis), a session is kept there
//! too (who opened it, its revision, what its client declared, its log
//! level), so that any instance serves any of its requests: an instance
//! that does not hold it yet reads it and holds a copy (renewing the record
//! at most once a second), a call runs where its request arrived, the
//! server's questions carry ids `<n>@<instance>` so that whichever instance
//! the client posts its answer to passes it to the one that asked (over the
//! store's signals), a `notifications/cancelled` is passed to every
//! instance that holds the session, and a `DELETE` ends it on all of them.
//!
//! Security, per route: behind the server's `Origin`/`Host` guard and
//! authentication like every route; a session is its opener's (the subject
//! of its `initialize`; with authentication off, the one anonymous
//! subject), and a request of anyone else naming it is answered as one
//! naming no session (`404`), answers to its questions included; sessions
//! are a pool of `max_sessions`, of which one caller holds at most
//! `max_sessions_per_caller`; each session runs at most
//! `max_inflight_calls` calls at once, keeps at most `events::WINDOW`
//! events per stream and [`MAX_ASKED`] questions waiting for answers, and
//! ends after `idle_timeout` without a request, a call or a reader.

// MCP logging and sampling are deprecated upstream (SEP-2577), and still
// what today's MCP clients speak.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use crate::mcp::model::McpError;
use crate::mcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ErrorCode,
    InitializeRequestParams, ProtocolVersion, RequestId, ServerResult, SetLevelRequestParams,
};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Response, StatusCode};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::ExportService;
use super::direct::{Body, answer, encode, error_message, notification};
use super::events::{Stream, last_event, sse};
pub(crate) use super::header_names::SESSION_ID;
use super::header_names::{METHOD, NAME, PROTOCOL_VERSION};
use super::logs::{log_level, per_request};
use super::request::CallRequest;
use crate::context::Caller;
use crate::context::share::{CallerKey, Shares};
use crate::mcp::inbound::quote;
use crate::mcp::tasks::{SESSION_SIGNAL, Tasks};
use crate::schema::SchemaProfile;
use crate::session::Shared;
use crate::session::tasks::TaskSignal;
use crate::stats::Door;

mod link;
mod stdio;

use self::link::SessionLink;

pub(crate) use stdio::serve as serve_stdio;

/// How often, at most, a session's record in a shared store is renewed
/// (ms): a request of a session held here meanwhile reads nothing there.
const TOUCH_EVERY: u64 = 1000;
/// How often idle sessions are looked for, at most.
const SWEEP_EVERY: Duration = Duration::from_secs(30);
/// The server's requests of one session waiting for the client's answers.
pub(crate) const MAX_ASKED: usize = 64;
/// Ended streams a session keeps for a client that may come back to them
/// (`Last-Event-ID`), the newest ones...
const KEPT_STREAMS: usize = 8;
/// ... for this long after they ended.
const KEPT_FOR: Duration = Duration::from_secs(60);
/// The revisions that have sessions.
const SESSION_REVISIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// The `_meta` key of a request's own revision (2026-07-28 and later).
const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";

/// One JSON-RPC message of a session's client, read once: a request (`id`
/// and `method`), a notification (`method`), or an answer to one of the
/// server's requests (`id` and `result` or `error`).
#[derive(Deserialize)]
pub(crate) struct Message {
    pub(super) jsonrpc: String,
    pub(super) id: Option<RequestId>,
    pub(super) method: Option<String>,
    pub(super) params: Option<Map<String, Value>>,
    pub(super) result: Option<Value>,
    pub(super) error: Option<Value>,
}

impl Message {
    /// Its method, if it has one.
    pub(crate) fn method(&self) -> Option<&str> {
        self.method.as_deref()
    }

    /// The tool a `tools/call` calls.
    pub(crate) fn tool(&self) -> Option<&str> {
        if self.method() != Some("tools/call") {
            return None;
        }
        self.params.as_ref()?.get("name")?.as_str()
    }

    /// Its id, as the front door's refusals name it.
    pub(crate) fn id(&self) -> Option<Value> {
        match self.id.as_ref()? {
            RequestId::Number(n) => Some(Value::from(*n)),
            RequestId::String(s) => Some(Value::String(s.to_string())),
        }
    }
}

/// What the front door hands a session's `POST` with its message.
pub(crate) struct Incoming {
    /// The authenticated caller, if any.
    pub(crate) caller: Option<Arc<Caller>>,
    /// Whom its pools count it against.
    pub(crate) key: CallerKey,
    /// The schema profile its URL asks for, if any.
    pub(crate) profile: Option<SchemaProfile>,
    /// A large call's arguments, parsed by the front door off the workers.
    pub(crate) arguments: Option<Map<String, Value>>,
    /// Its message is large.
    pub(crate) large: bool,
    /// The way it came in.
    pub(crate) door: Door,
}

/// Whether a request's headers name a revision with sessions (or none:
/// 2025-03-26 is assumed).
fn session_revision(headers: &HeaderMap) -> bool {
    match headers.get(PROTOCOL_VERSION) {
        None => true,
        Some(value) => value.to_str().is_ok_and(|v| SESSION_REVISIONS.contains(&v)),
    }
}

/// Whether a `GET` or `DELETE` is a session's: its headers name a revision
/// with sessions.
pub(crate) fn takes(headers: &HeaderMap) -> bool {
    session_revision(headers)
}

/// The message in `body` when it is a session's: an `initialize`, or a
/// message of a revision with sessions that names none of its own in its
/// `_meta`. Anything else (a 2026-07-28 request, or a header that does not
/// agree with the message) is `None`, for the stateless door.
pub(crate) fn route(headers: &HeaderMap, body: &[u8]) -> Option<Message> {
    if !session_revision(headers) {
        return None;
    }
    let message: Message = serde_json::from_slice(body).ok()?;
    // Not a JSON-RPC 2.0 request, notification or answer: the front door's
    // check says what is wrong.
    if !shaped(&message) {
        return None;
    }
    let params = message.params.as_ref();
    if message.method.as_deref() == Some("initialize") {
        // The header, when there is one, names the revision asked for.
        let asked = params.and_then(|p| p.get("protocolVersion"))?.as_str()?;
        let header = headers.get(PROTOCOL_VERSION);
        return header
            .is_none_or(|h| h.as_bytes() == asked.as_bytes())
            .then_some(message);
    }
    let own = params
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object)
        .is_some_and(|meta| meta.contains_key(VERSION_KEY));
    (!own).then_some(message)
}

/// Whether `message` is a JSON-RPC 2.0 request, notification or answer.
fn shaped(message: &Message) -> bool {
    let shape = match (&message.id, &message.method) {
        (_, Some(_)) => message.result.is_none() && message.error.is_none(),
        (Some(_), None) => message.result.is_some() != message.error.is_some(),
        (None, None) => false,
    };
    message.jsonrpc == "2.0" && shape
}

/// The live MCP sessions of this instance.
pub(crate) struct Sessions {
    shared: Arc<Shared>,
    tasks: Arc<Tasks>,
    /// Live sessions (`max_sessions`).
    live: Arc<AtomicUsize>,
    /// Each caller's share of them (`max_sessions_per_caller`).
    shares: Arc<Shares>,
    map: Mutex<HashMap<Arc<str>, Arc<McpSession>>>,
    /// When this map was made: sessions' last activity counts from it.
    epoch: Instant,
    /// How long a session may be idle (`idle_timeout`; `None`: for ever).
    idle: Option<Duration>,
    sweeping: AtomicBool,
}

/// One MCP session.
struct McpSession {
    id: Arc<str>,
    /// Who opened it (`None` with authentication off).
    owner: Option<Arc<str>>,
    /// Its calls' service: its pool place, its calls in flight, its log level.
    service: ExportService,
    /// The revision it agreed on.
    version: ProtocolVersion,
    /// What its client declared.
    capabilities: ClientCapabilities,
    /// Cancelled when it ends: its calls and its questions stop.
    closed: CancellationToken,
    /// Its last request, in milliseconds after [`Sessions::epoch`].
    seen: AtomicU64,
    /// When its record in a shared store was last renewed (same clock).
    touched: AtomicU64,
    /// With a shared store, this instance's id (in its questions' ids).
    instance: Option<Arc<str>>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next_stream: u64,
    /// Its requests' streams, live or kept for a client that may resume.
    streams: HashMap<u64, Arc<Stream>>,
    /// Its `GET` stream, if it has one.
    standalone: Option<Arc<Stream>>,
    /// Its calls running, by request id (`notifications/cancelled`).
    running: HashMap<RequestId, CancellationToken>,
    next_asked: u64,
    /// The server's requests waiting for the client's answers.
    asked: HashMap<u64, oneshot::Sender<Result<Value, String>>>,
    /// With a shared store: the instances that hold the session too.
    holders: Vec<String>,
}

/// What a shared store keeps of a session, for any instance to serve it.
#[derive(serde::Serialize, Deserialize)]
struct Record {
    owner: Option<Arc<str>>,
    version: ProtocolVersion,
    capabilities: ClientCapabilities,
    /// Its log level (`logging/setLevel`), as a `LogLevel` index.
    level: u8,
}

impl Sessions {
    /// The sessions of the server sharing `shared`; with a task store
    /// other instances read (Redis), kept there too.
    pub(crate) fn new(
        shared: &Arc<Shared>,
        tasks: &Arc<Tasks>,
        per_caller: usize,
    ) -> Arc<Sessions> {
        let sessions = Arc::new(Sessions {
            shared: Arc::clone(shared),
            tasks: Arc::clone(tasks),
            live: Arc::new(AtomicUsize::new(0)),
            shares: Shares::new(per_caller),
            map: Mutex::default(),
            epoch: Instant::now(),
            idle: shared.config.idle_timeout,
            sweeping: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&sessions);
        tasks.on_session_signals(Box::new(move |id, signal| {
            if let Some(sessions) = weak.upgrade() {
                sessions.signalled(id, signal);
            }
        }));
        sessions
    }

    /// Sessions are kept in a store other instances read.
    fn shared_store(&self) -> bool {
        self.shared.tasks.shared()
    }

    /// With a shared store, this instance's id.
    fn instance(&self) -> Option<Arc<str>> {
        self.shared_store()
            .then(|| Arc::from(self.shared.tasks.instance()))
    }

    /// How long a session's record lives in a shared store after its last
    /// use: `idle_timeout`, or a day when sessions never idle out.
    fn record_ttl(&self) -> Duration {
        self.idle.unwrap_or(Duration::from_secs(24 * 3600))
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Arc<str>, Arc<McpSession>>> {
        // Inserts and removals are whole; a panic cannot leave one half-done.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The session `headers` name, when `subject` opened it. With a shared
    /// store, its record there is renewed (at most once a second), and a
    /// session opened on another instance is served here from it.
    async fn find(
        &self,
        headers: &HeaderMap,
        subject: Option<&str>,
    ) -> Result<Arc<McpSession>, Box<Response<Body>>> {
        let Some(id) = headers.get(SESSION_ID).and_then(|v| v.to_str().ok()) else {
            return Err(Box::new(plain(
                StatusCode::BAD_REQUEST,
                "Bad Request: Session ID is required",
            )));
        };
        let not_found = || Box::new(plain(StatusCode::NOT_FOUND, "Not Found: Session not found"));
        let now = self.now();
        let local = self.lock().get(id).cloned();
        let fresh = |session: &McpSession| {
            !self.shared_store() || now.saturating_sub(session.touched.load(Relaxed)) < TOUCH_EVERY
        };
        let session = match local {
            Some(session) if fresh(&session) => session,
            local => match self.shared.tasks.touch_session(id, self.record_ttl()).await {
                Ok(Some((record, holders))) => {
                    let session = match local {
                        Some(session) => {
                            // Another instance may have changed its level.
                            if let Some(level) = record.get("level").and_then(Value::as_u64) {
                                session.service.log_level.store(level as u8, Relaxed);
                            }
                            session
                        }
                        None => match self.replica(id, record, subject) {
                            Some(session) => session,
                            None => return Err(not_found()),
                        },
                    };
                    session.touched.store(now, Relaxed);
                    session.lock().holders = holders;
                    session
                }
                Ok(None) => {
                    if let Some(session) = local {
                        self.end_here(&session);
                    }
                    return Err(not_found());
                }
                // The store is away: a session held here goes on.
                Err(e) => match local {
                    Some(session) => session,
                    None => {
                        tracing::warn!(error = %e, "an MCP session could not be read from the store");
                        return Err(Box::new(plain(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "Service Unavailable: the MCP session store is unavailable; retry shortly",
                        )));
                    }
                },
            },
        };
        if session.owner.as_deref() != subject {
            return Err(not_found());
        }
        session.seen.store(now, Relaxed);
        Ok(session)
    }

    /// A session another instance opened, held here from its `record`;
    /// `None` unless `subject` opened it (nothing is held for anyone else).
    fn replica(&self, id: &str, record: Value, subject: Option<&str>) -> Option<Arc<McpSession>> {
        let record = Record::deserialize(record).ok()?;
        if record.owner.as_deref() != subject {
            return None;
        }
        let mut service =
            ExportService::new(Arc::clone(&self.shared), None, Arc::clone(&self.tasks));
        service.session_id = Arc::from(id);
        service.log_level.store(record.level, Relaxed);
        let session = self.session(
            service,
            record.owner,
            record.version,
            record.capabilities,
            self.instance(),
        );
        let mut map = self.lock();
        let session = map.entry(Arc::clone(&session.id)).or_insert(session);
        Some(Arc::clone(session))
    }

    /// A session served by `service` (whose id it takes), opened by
    /// `owner`, in `version`, whose client declared `capabilities`; with a
    /// shared store, `instance` is this instance's id.
    fn session(
        &self,
        service: ExportService,
        owner: Option<Arc<str>>,
        version: ProtocolVersion,
        capabilities: ClientCapabilities,
        instance: Option<Arc<str>>,
    ) -> Arc<McpSession> {
        let now = self.now();
        Arc::new(McpSession {
            id: Arc::clone(&service.session_id),
            owner,
            version,
            capabilities,
            service,
            closed: self.shared.shutdown.child_token(),
            seen: AtomicU64::new(now),
            touched: AtomicU64::new(now),
            instance,
            state: Mutex::default(),
        })
    }

    /// Records `session` in a shared store (a no-op without one).
    async fn put(&self, session: &McpSession) -> Result<(), String> {
        if !self.shared_store() {
            return Ok(());
        }
        let record = Record {
            owner: session.owner.clone(),
            version: session.version.clone(),
            capabilities: session.capabilities.clone(),
            level: session.service.log_level.load(Relaxed),
        };
        let record = serde_json::to_value(&record).map_err(|e| e.to_string())?;
        self.shared
            .tasks
            .put_session(&session.id, record, self.record_ttl())
            .await
            .map_err(|e| format!("the MCP session store is unavailable ({e}); retry shortly"))
    }

    /// Ends this instance's copy of `session`.
    fn end_here(&self, session: &McpSession) {
        let mut map = self.lock();
        if map
            .get(&session.id)
            .is_some_and(|s| std::ptr::eq(&**s, session))
        {
            map.remove(&session.id);
        }
        drop(map);
        session.close();
    }

    /// A signal another instance sent about one of the sessions held here:
    /// `<id>` ended; `<id>/asked`: the client's answers to questions asked
    /// here; `<id>/cancel/<request id>`: the client cancelled a call.
    fn signalled(&self, id: &str, signal: TaskSignal) {
        let (session_id, what) = id.split_once('/').unwrap_or((id, ""));
        let Some(session) = self.lock().get(session_id).cloned() else {
            return;
        };
        match (what, signal) {
            ("", TaskSignal::Cancel) => self.end_here(&session),
            ("asked", TaskSignal::Answers(answers)) => {
                for (n, reply) in answers {
                    if let Ok(n) = n.parse() {
                        session.deliver(
                            n,
                            reply.get("result").cloned(),
                            reply.get("error").cloned(),
                        );
                    }
                }
            }
            (call, TaskSignal::Cancel) => {
                let request = call
                    .strip_prefix("cancel/")
                    .and_then(|id| serde_json::from_str::<RequestId>(id).ok());
                if let Some(request) = request
                    && let Some(running) = session.lock().running.get(&request)
                {
                    running.cancel();
                }
            }
            _ => {}
        }
    }

    /// Serves a session's `POST` of `message`. `Err`: the session could not
    /// be opened for want of a place in the pools, for the client (`503`).
    pub(crate) async fn post(
        self: &Arc<Self>,
        headers: &HeaderMap,
        message: Message,
        incoming: Incoming,
    ) -> Result<Response<Body>, String> {
        let subject = incoming.caller.as_ref().map(|c| c.subject());
        if !headers.contains_key(SESSION_ID) {
            return match (&message.id, message.method.as_deref()) {
                (Some(_), Some("initialize")) => self.open(message, incoming).await,
                _ => Ok(plain(
                    StatusCode::BAD_REQUEST,
                    "Bad Request: Session ID is required",
                )),
            };
        }
        let session = match self.find(headers, subject).await {
            Ok(session) => session,
            Err(refused) => return Ok(*refused),
        };
        let Message {
            jsonrpc: _,
            id,
            method,
            params,
            result,
            error,
        } = message;
        Ok(match (id, method) {
            (Some(id), Some(method)) => {
                if let Some(mismatch) = mismatched(headers, &method, params.as_ref()) {
                    return Ok(json_error(StatusCode::BAD_REQUEST, &id, &mismatch));
                }
                let params = params.unwrap_or_default();
                self.request(&session, id, &method, params, incoming).await
            }
            (None, Some(method)) => {
                self.notified(&session, &method, params).await;
                accepted()
            }
            (Some(id), None) => {
                self.answered(&session, &id, result, error).await;
                accepted()
            }
            (None, None) => accepted(),
        })
    }

    /// `initialize`: a new session, its caller's, answered with what the
    /// server offers and its id; or why there is no place for it.
    async fn open(
        self: &Arc<Self>,
        message: Message,
        incoming: Incoming,
    ) -> Result<Response<Body>, String> {
        let id = message.id.unwrap_or(RequestId::Number(0));
        let params = Value::Object(message.params.unwrap_or_default());
        let params = match InitializeRequestParams::deserialize(params) {
            Ok(params) => params,
            Err(e) => {
                let error =
                    McpError::invalid_params(format!("Invalid initialize params: {e}"), None);
                return Ok(json_error(StatusCode::BAD_REQUEST, &id, &error));
            }
        };
        let key = &incoming.key;
        let share = self.shares.take(key).map_err(|over| {
            format!(
                "{} already holds {} MCP sessions (max_sessions_per_caller = {}); \
                 end one (DELETE) or retry later",
                key.describe(),
                over.share,
                over.share
            )
        })?;
        let service = ExportService::for_http(&self.shared, &self.live, false, None, &self.tasks)
            .map_err(|e| e.to_string())?
            .holding(share);
        let info = service.negotiate_initialize(&params);
        let owner = incoming.caller.as_ref().map(|c| Arc::from(c.subject()));
        let version = info.protocol_version.clone();
        let session = self.session(
            service,
            owner,
            version,
            params.capabilities,
            self.instance(),
        );
        self.put(&session).await?;
        let stream = session.open_stream();
        let answer = session.reply(&id, Ok(ServerResult::Initialize(info)));
        stream.push(answer);
        stream.end();
        self.lock()
            .insert(Arc::clone(&session.id), Arc::clone(&session));
        self.sweep_later();
        let mut response = stream.respond(None, self.shared.shutdown.clone(), None);
        if let Ok(value) = HeaderValue::from_str(&session.id) {
            response.headers_mut().insert(SESSION_ID, value);
        }
        Ok(response)
    }

    /// Answers the request `id` of `session` on a stream of its own.
    async fn request(
        &self,
        session: &Arc<McpSession>,
        id: RequestId,
        method: &str,
        params: Map<String, Value>,
        incoming: Incoming,
    ) -> Response<Body> {
        let stream = self.start(session, id, method, params, incoming).await;
        stream.respond(None, self.shared.shutdown.clone(), None)
    }

    /// Starts answering the request `id` of `session`: the stream its
    /// answer (and what comes before it) goes on.
    async fn start(
        &self,
        session: &Arc<McpSession>,
        id: RequestId,
        method: &str,
        params: Map<String, Value>,
        incoming: Incoming,
    ) -> Arc<Stream> {
        let stream = session.open_stream();
        if method == "tools/call" {
            session.call(&stream, id, params, incoming).await;
            return stream;
        }
        let answered = self.answer(session, method, params, &incoming).await;
        stream.push(session.reply(&id, answered));
        stream.end();
        stream
    }

    /// The answer to a session's request other than `tools/call`.
    async fn answer(
        &self,
        session: &McpSession,
        method: &str,
        params: Map<String, Value>,
        incoming: &Incoming,
    ) -> Result<ServerResult, McpError> {
        let service = &session.service;
        let subject = incoming.caller.as_ref().map(|c| c.subject());
        let params = Value::Object(params);
        match method {
            "ping" => Ok(ServerResult::empty(())),
            "tools/list" => Ok(ServerResult::ListTools(
                service.tool_list(incoming.profile, incoming.caller.as_deref()),
            )),
            "initialize" => {
                let params = parse::<InitializeRequestParams>(params)?;
                Ok(ServerResult::Initialize(
                    service.negotiate_initialize(&params),
                ))
            }
            "logging/setLevel" if !per_request(Some(&session.version)) => {
                let params = parse::<SetLevelRequestParams>(params)?;
                service
                    .log_level
                    .store(log_level(params.level) as u8, Relaxed);
                // Every instance serving the session sends what it asks for.
                if let Err(why) = self.put(session).await {
                    return Err(McpError::internal_error(why, None));
                }
                Ok(ServerResult::empty(()))
            }
            "tasks/get" | "tasks/update" | "tasks/cancel" => {
                if !session.capabilities.supports_tasks() {
                    return Err(McpError::missing_required_client_capability(
                        ClientCapabilities::tasks(),
                    ));
                }
                let task = parse::<TaskParams>(params)?;
                let tasks = &self.tasks;
                match method {
                    "tasks/get" => tasks
                        .get(&task.task_id, subject)
                        .await
                        .map(ServerResult::GetTask),
                    "tasks/update" => tasks
                        .update(
                            &task.task_id,
                            subject,
                            task.input_responses.unwrap_or_default(),
                        )
                        .await
                        .map(ServerResult::task_ack),
                    _ => tasks
                        .cancel(&task.task_id, subject)
                        .await
                        .map(ServerResult::task_ack),
                }
            }
            _ => Err(McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                method.to_owned(),
                None,
            )),
        }
    }

    /// Serves a session's `GET`: its stream of notifications (a new one
    /// replaces the one before), or with `Last-Event-ID` the rest of a
    /// stream it lost (empty when nothing of it is kept).
    pub(crate) async fn get(&self, headers: &HeaderMap, subject: Option<&str>) -> Response<Body> {
        let streams = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|range| {
                let essence = range.split(';').next().unwrap_or_default().trim();
                essence.eq_ignore_ascii_case("text/event-stream")
            });
        if !streams {
            return plain(
                StatusCode::NOT_ACCEPTABLE,
                "Not Acceptable: Client must accept text/event-stream",
            );
        }
        let session = match self.find(headers, subject).await {
            Ok(session) => session,
            Err(refused) => return *refused,
        };
        let shutdown = self.shared.shutdown.clone();
        let relay = || {
            let note = notification("notifications/tools/list_changed", &json!({}));
            Some((self.shared.registry.subscribe(), note))
        };
        let last = headers.get("last-event-id").and_then(|v| v.to_str().ok());
        if let Some(last) = last {
            let state = session.lock();
            let found = last_event(last).and_then(|(number, index)| {
                let stream = match number {
                    0 => state.standalone.clone(),
                    n => state.streams.get(&n).cloned(),
                };
                stream.map(|stream| (stream, index))
            });
            drop(state);
            return match found {
                Some((stream, index)) => {
                    let relay = if stream.number() == 0 { relay() } else { None };
                    stream.respond(Some(index), shutdown, relay)
                }
                None => sse(Empty::new().boxed_unsync()),
            };
        }
        let stream = Stream::new(0);
        if let Some(before) = session.lock().standalone.replace(Arc::clone(&stream)) {
            before.end();
        }
        stream.respond(None, shutdown, relay())
    }

    /// Serves a session's `DELETE`: it ends, its calls are cancelled (with
    /// a shared store, on every instance that holds it).
    pub(crate) async fn delete(
        &self,
        headers: &HeaderMap,
        subject: Option<&str>,
    ) -> Response<Body> {
        let session = match self.find(headers, subject).await {
            Ok(session) => session,
            Err(refused) => return *refused,
        };
        self.end_here(&session);
        if self.shared_store() {
            let holders = match self.shared.tasks.end_session(&session.id).await {
                Ok(holders) => holders,
                Err(e) => {
                    tracing::warn!(error = %e, "an ended MCP session stays in the store until it expires");
                    session.lock().holders.clone()
                }
            };
            let signal = format!("{SESSION_SIGNAL}{}", session.id);
            self.cancel_elsewhere(&holders, &signal).await;
        }
        let mut response = Response::new(Empty::new().boxed_unsync());
        *response.status_mut() = StatusCode::NO_CONTENT;
        response
    }

    /// A notification of `session`'s client: `notifications/cancelled`
    /// cancels the call it names (with a shared store, on whichever
    /// instance runs it); the rest need nothing.
    async fn notified(
        &self,
        session: &McpSession,
        method: &str,
        params: Option<Map<String, Value>>,
    ) {
        if method != "notifications/cancelled" {
            return;
        }
        let Some(id) = params
            .as_ref()
            .and_then(|p| p.get("requestId"))
            .and_then(|id| RequestId::deserialize(id).ok())
        else {
            return;
        };
        tracing::debug!(
            target: "haip::mcp",
            "notifications/cancelled for request id={}",
            quote(&id.to_string())
        );
        if let Some(call) = session.lock().running.get(&id) {
            call.cancel();
            return;
        }
        if !self.shared_store() {
            return;
        }
        // Who holds it now: the call may have started since this instance
        // last looked.
        let holders = match self
            .shared
            .tasks
            .touch_session(&session.id, self.record_ttl())
            .await
        {
            Ok(Some((_, holders))) => holders,
            _ => session.lock().holders.clone(),
        };
        let Ok(request) = serde_json::to_string(&id) else {
            return;
        };
        let signal = format!("{SESSION_SIGNAL}{}/cancel/{request}", session.id);
        self.cancel_elsewhere(&holders, &signal).await;
    }

    /// `session`'s client's answer to the server's request `id`: to the
    /// call that asked, here or (with a shared store) on the instance that
    /// asked.
    async fn answered(
        &self,
        session: &McpSession,
        id: &RequestId,
        result: Option<Value>,
        error: Option<Value>,
    ) {
        let (n, instance) = match id {
            RequestId::Number(n) => (u64::try_from(*n).ok(), None),
            RequestId::String(id) => match id.split_once('@') {
                Some((n, instance)) => (n.parse().ok(), Some(instance)),
                None => (id.parse().ok(), None),
            },
        };
        let Some(n) = n else {
            return;
        };
        match instance {
            Some(instance) if self.shared_store() && instance != self.shared.tasks.instance() => {
                let mut reply = Map::new();
                if let Some(result) = result {
                    reply.insert("result".into(), result);
                }
                if let Some(error) = error {
                    reply.insert("error".into(), error);
                }
                let answers = Map::from_iter([(n.to_string(), Value::Object(reply))]);
                let signal = format!("{SESSION_SIGNAL}{}/asked", session.id);
                let told = self
                    .tasks
                    .tell_instance(instance, &signal, TaskSignal::Answers(answers))
                    .await;
                if let Err(e) = told {
                    tracing::warn!(error = %e, "an answer to a question could not be passed on");
                }
            }
            _ => session.deliver(n, result, error),
        }
    }

    /// Sends the cancellation `signal` to every one of `holders` but this
    /// instance (one that is gone just misses it).
    async fn cancel_elsewhere(&self, holders: &[String], signal: &str) {
        let me = self.shared.tasks.instance();
        for holder in holders.iter().filter(|h| h.as_str() != me) {
            let _ = self
                .tasks
                .tell_instance(holder, signal, TaskSignal::Cancel)
                .await;
        }
    }

    /// Looks for idle sessions from now on (every half `idle_timeout`, at
    /// most every [`SWEEP_EVERY`]), until the server shuts down.
    fn sweep_later(self: &Arc<Self>) {
        let Some(idle) = self.idle else {
            return;
        };
        if self.sweeping.swap(true, Relaxed) {
            return;
        }
        let every = (idle / 2).clamp(Duration::from_millis(10), SWEEP_EVERY);
        let sessions = Arc::downgrade(self);
        let shutdown = self.shared.shutdown.clone();
        self.shared.runner.tasks().spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(every) => {}
                }
                let Some(sessions) = Weak::upgrade(&sessions) else {
                    return;
                };
                sessions.sweep(idle);
            }
        });
    }

    /// Ends the sessions idle for `idle` or more.
    fn sweep(&self, idle: Duration) {
        let now = self.now();
        let idle = idle.as_millis() as u64;
        let mut ended = Vec::new();
        self.lock().retain(|_, session| {
            session.lock().prune();
            let keep = now.saturating_sub(session.seen.load(Relaxed)) < idle || session.busy();
            if !keep {
                ended.push(Arc::clone(session));
            }
            keep
        });
        for session in ended {
            tracing::debug!(session = %session.id, "an idle MCP session ended");
            session.close();
        }
    }
}

/// `tasks/get`, `tasks/update`, `tasks/cancel` params.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TaskParams {
    pub(super) task_id: String,
    pub(super) input_responses: Option<std::collections::BTreeMap<String, Value>>,
}

/// `params` as the params of a method, or the `-32602` that says why not.
pub(super) fn parse<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, McpError> {
    T::deserialize(params)
        .map_err(|e| McpError::invalid_params(format!("Invalid params: {e}"), None))
}

/// An `Mcp-Method` or `Mcp-Name` header that does not say what the body
/// does (SEP-2243): the error that refuses the request.
fn mismatched(
    headers: &HeaderMap,
    method: &str,
    params: Option<&Map<String, Value>>,
) -> Option<McpError> {
    let said = |name| headers.get(name).map(|v| v.to_str().unwrap_or_default());
    if let Some(said) = said(METHOD)
        && said != method
    {
        let message =
            format!("Mcp-Method header ({said}) does not match the request's method ({method})");
        return Some(McpError::new(ErrorCode::HEADER_MISMATCH, message, None));
    }
    let name = params.and_then(|p| p.get("name")).and_then(Value::as_str);
    if method == "tools/call"
        && let (Some(said), Some(name)) = (said(NAME), name)
        && said != name
    {
        let message = format!("Mcp-Name header ({said}) does not match the called tool ({name})");
        return Some(McpError::new(ErrorCode::HEADER_MISMATCH, message, None));
    }
    None
}

impl State {
    /// Lets go of ended streams older than [`KEPT_FOR`], and of the oldest
    /// beyond [`KEPT_STREAMS`].
    fn prune(&mut self) {
        // One look at each stream and at the clock: this runs every few
        // requests of a busy session.
        let now = Instant::now();
        let mut ended = Vec::with_capacity(self.streams.len());
        self.streams.retain(|n, stream| match stream.ended() {
            Some(at) if now.saturating_duration_since(at) >= KEPT_FOR => false,
            Some(at) => {
                ended.push((at, *n));
                true
            }
            None => true,
        });
        if ended.len() > KEPT_STREAMS {
            ended.sort_unstable();
            for (_, n) in &ended[..ended.len() - KEPT_STREAMS] {
                self.streams.remove(n);
            }
        }
    }
}

impl McpSession {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change is whole; a panic cannot leave one half-done.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new stream for one of its requests.
    fn open_stream(&self) -> Arc<Stream> {
        let mut state = self.lock();
        // Ended streams are let go by age when the session is swept; here
        // only when there are more than it keeps.
        if state.streams.len() > 2 * KEPT_STREAMS {
            state.prune();
        }
        state.next_stream += 1;
        let number = state.next_stream;
        let stream = Stream::new(number);
        state.streams.insert(number, Arc::clone(&stream));
        stream
    }

    /// Something runs or is read in it: it is not idle.
    fn busy(&self) -> bool {
        let state = self.lock();
        !state.running.is_empty()
            || state.standalone.as_ref().is_some_and(|s| s.attached())
            || state.streams.values().any(|s| s.attached())
    }

    /// It ended: its calls are cancelled, its questions fail, its streams end.
    fn close(&self) {
        self.closed.cancel();
        let mut state = self.lock();
        for stream in state.streams.values().chain(state.standalone.iter()) {
            stream.end();
        }
        state.streams.clear();
        state.standalone = None;
        state.asked.clear();
    }

    /// The last message of a request: its result in the shape the session's
    /// revision expects, or its error.
    fn reply(&self, id: &RequestId, answered: Result<ServerResult, McpError>) -> Bytes {
        match answered {
            Ok(mut result) => {
                if per_request(Some(&self.version)) {
                    result.fill_missing_cache_hints();
                } else {
                    result.strip_result_type_for_legacy_peer();
                    result.strip_non_object_output_for_legacy_peer();
                }
                answer(id, &result)
            }
            Err(error) => error_message(id, &error),
        }
    }

    /// Runs a `tools/call` whose answer goes on `stream`: here when it ends
    /// at once, else on a task of its own.
    async fn call(
        self: &Arc<Self>,
        stream: &Arc<Stream>,
        id: RequestId,
        params: Map<String, Value>,
        incoming: Incoming,
    ) {
        let meta = params
            .get("_meta")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let params = match parse::<CallToolRequestParams>(Value::Object(params)) {
            Ok(params) => params,
            Err(error) => {
                stream.push(self.reply(&id, Err(error)));
                stream.end();
                return;
            }
        };
        let cancelled = self.closed.child_token();
        self.lock().running.insert(id.clone(), cancelled.clone());
        let session = Arc::clone(self);
        let link = Arc::new(SessionLink {
            session: Arc::clone(self),
            stream: Arc::clone(stream),
        });
        let answer_stream = Arc::clone(stream);
        let given_up = cancelled.clone();
        let serving = async move {
            let declared = session.capabilities.supports_tasks();
            let request = CallRequest {
                id: &id,
                meta: &meta,
                version: Some(session.version.clone()),
                capabilities: session.capabilities.clone(),
                caller: incoming.caller,
                key: Some(incoming.key),
                door: incoming.door,
                arguments: incoming.arguments,
                large: incoming.large,
                cancelled,
                link,
            };
            let answered = session.service.serve_call(params, request).await;
            session.lock().running.remove(&id);
            let answered = answered.and_then(|response| match response {
                // A task handle only for a client that takes tasks (SEP-2663).
                CallToolResponse::Task(_) if !declared => Err(
                    McpError::missing_required_client_capability(ClientCapabilities::tasks()),
                ),
                response => Ok(ServerResult::from(response)),
            });
            let answer = session.reply(&id, answered);
            // Cancelled by its client (or its session ended): nobody waits
            // for its answer, and MCP says none is sent.
            if given_up.is_cancelled() {
                tracing::debug!(
                    target: "haip::mcp",
                    "request id={} was cancelled by its client: its answer is not sent: {}",
                    quote(&id.to_string()),
                    brief(&String::from_utf8_lossy(&answer))
                );
                answer_stream.end();
                return;
            }
            answer_stream.send(answer, true).await;
        };
        // A call that ends at once (most do) is answered from here; any
        // other goes on on a task of its own, its stream answered at once.
        let mut serving = Box::pin(serving);
        if futures_util::poll!(&mut serving).is_pending() {
            tokio::spawn(serving);
        }
    }

    /// Its client's answer to the server's request `n`, asked here.
    fn deliver(&self, n: u64, result: Option<Value>, error: Option<Value>) {
        let Some(waiting) = self.lock().asked.remove(&n) else {
            return;
        };
        let reply = match (result, error) {
            (Some(result), _) => Ok(result),
            (None, Some(error)) => {
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("no message");
                let code = error
                    .get("code")
                    .and_then(Value::as_i64)
                    .unwrap_or_default();
                Err(format!(
                    "the client answered with an error: {message} ({code})"
                ))
            }
            (None, None) => Err("the client answered with neither a result nor an error".into()),
        };
        let _ = waiting.send(reply);
    }

    /// Sends the server's request `method` to its client on `stream`, and
    /// waits for the answer; `Err` says why there is none.
    async fn ask_client(
        &self,
        stream: &Stream,
        method: &str,
        params: Value,
    ) -> Result<Value, String> {
        let (answer, answered) = oneshot::channel();
        let n = {
            let mut state = self.lock();
            if state.asked.len() >= MAX_ASKED {
                return Err(format!(
                    "this MCP session already waits for {MAX_ASKED} answers of its client"
                ));
            }
            state.next_asked += 1;
            let n = state.next_asked;
            state.asked.insert(n, answer);
            n
        };
        // Not waited for any more (the call was cancelled): forgotten.
        struct Forget<'a>(&'a McpSession, u64);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.0.lock().asked.remove(&self.1);
            }
        }
        let _forget = Forget(self, n);
        // With a shared store, its answer may reach another instance: the
        // id names this one, which that one passes the answer to.
        let id = match &self.instance {
            Some(instance) => Value::String(format!("{n}@{instance}")),
            None => Value::from(n),
        };
        let request =
            encode(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        if !stream.send(request, false).await {
            return Err("the request's stream has ended".into());
        }
        tokio::select! {
            reply = answered => reply.unwrap_or_else(|_| Err("the MCP session ended".into())),
            () = self.closed.cancelled() => Err("the MCP session ended".into()),
        }
    }
}

/// The start of an answer, for a log line: enough to say how the call ended.
fn brief(text: &str) -> &str {
    match text.char_indices().nth(240) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// `202 Accepted`: a notification or an answer taken.
fn accepted() -> Response<Body> {
    let mut response = Response::new(Empty::new().boxed_unsync());
    *response.status_mut() = StatusCode::ACCEPTED;
    response
}

/// A plain-text refusal.
fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed_unsync());
    *response.status_mut() = status;
    response
}

/// A JSON-RPC error answering `id`, under `status`.
fn json_error(status: StatusCode, id: &RequestId, error: &McpError) -> Response<Body> {
    let mut response = Response::new(Full::new(error_message(id, error)).boxed_unsync());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(version: Option<&'static str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(version) = version {
            headers.insert("mcp-protocol-version", HeaderValue::from_static(version));
        }
        headers
    }

    const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    const LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#;
    const MODERN: &str = r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;

    #[test]
    fn messages_of_revisions_with_sessions_are_the_sessions() {
        assert!(route(&headers(None), INITIALIZE.as_bytes()).is_some());
        assert!(route(&headers(Some("2025-11-25")), INITIALIZE.as_bytes()).is_some());
        assert!(route(&headers(None), LIST.as_bytes()).is_some());
        assert!(route(&headers(Some("2025-03-26")), LIST.as_bytes()).is_some());
        let answer = r#"{"jsonrpc":"2.0","id":4,"result":{"action":"accept"}}"#;
        assert!(route(&headers(Some("2025-11-25")), answer.as_bytes()).is_some());
        let cancelled =
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}"#;
        assert!(route(&headers(None), cancelled.as_bytes()).is_some());
    }

    #[test]
    fn the_rest_goes_on_to_the_stateless_door() {
        // A request that names its own revision, or a header of a revision
        // without sessions (or one no revision has).
        assert!(route(&headers(None), MODERN.as_bytes()).is_none());
        assert!(route(&headers(Some("2026-07-28")), LIST.as_bytes()).is_none());
        assert!(route(&headers(Some("1999-01-01")), LIST.as_bytes()).is_none());
        // A header that disagrees with the `initialize` it comes with.
        assert!(route(&headers(Some("2025-06-18")), INITIALIZE.as_bytes()).is_none());
        // Not a JSON-RPC 2.0 request, notification or answer: the front
        // door's check refuses it with the error it deserves.
        for odd in [
            r#"{"jsonrpc":"1.0","id":2,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":2}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{},"error":{"code":1,"message":"x"}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/list","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":[1]}"#,
        ] {
            assert!(route(&headers(None), odd.as_bytes()).is_none(), "{odd}");
        }
        assert!(takes(&headers(Some("2025-06-18"))));
        assert!(!takes(&headers(Some("2026-07-28"))));
    }

    #[test]
    fn a_header_that_contradicts_the_body_is_named() {
        let mut headers = HeaderMap::new();
        headers.insert("mcp-method", HeaderValue::from_static("tools/list"));
        let error = mismatched(&headers, "tools/call", None).expect("refused");
        assert_eq!(error.code, ErrorCode::HEADER_MISMATCH);
        assert!(error.message.contains("tools/list"), "{}", error.message);
        assert!(mismatched(&headers, "tools/list", None).is_none());
        let mut named = HeaderMap::new();
        named.insert("mcp-name", HeaderValue::from_static("echo"));
        let params: Map<String, Value> = serde_json::from_str(r#"{"name":"other"}"#).unwrap();
        assert!(mismatched(&named, "tools/call", Some(&params)).is_some());
    }
}

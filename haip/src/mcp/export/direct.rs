//! MCP 2026-07-28 requests that `/mcp` serves itself: `tools/call`,
//! `tools/list`, `server/discover` and `tasks/get|update|cancel` of a client
//! that names its revision and capabilities in the request's `_meta`, as
//! every request of that revision does. Such a request needs no session and nothing of an earlier one, so it
//! is answered here, on the request's own task: its message parsed once into
//! the types it needs, its call run on the export's admission path
//! (`ExportService::serve_call`), its answer written once. A plain answer is
//! `application/json`; a call that sends progress or log lines before its
//! result answers with an SSE stream that carries them and then the result.
//!
//! [`route`] takes only a request whose headers agree with its body in every
//! way the revision asks (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`)
//! and whose tool has no `x-mcp-header` parameters; any other request, and
//! every refusal of a header, goes on to `stateless.rs`, which checks it
//! in full and answers it (with the JSON-RPC error the revision names, when
//! it is refused).

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;
use std::time::Duration;

use crate::mcp::model::McpError;
use crate::mcp::model::{
    CallToolRequestParams, ClientCapabilities, DiscoverResult, ErrorCode, InputResponses,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProtocolVersion, RequestId,
    ServerResult, SubscriptionFilter, SubscriptionsListenResult,
};
use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Response, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::ExportService;
use super::header_names::{METHOD as MCP_METHOD, NAME as MCP_NAME, PROTOCOL_VERSION};
use super::request::{CallRequest, ClientLink, Sent};
use crate::context::share::CallerKey;
use crate::context::{Caller, Peer};
use crate::mcp::inbound::MAX_TOKEN_BYTES;
use crate::mcp::listen::{self, Listening};
use crate::mcp::peer::NoSession;
use crate::schema::SchemaProfile;
use crate::stats::Door;

/// The `_meta` key of a request's revision.
const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key of what a request's client declared.
const CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
/// Messages a call may send before its result that wait for its client.
const OUTBOX: usize = 32;
/// An SSE comment on an answer stream this long silent: proxies keep it
/// open, and a client that went away is noticed.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

pub(crate) use super::events::Body;
use super::events::sse;

/// A request [`route`] took: served by [`ExportService::serve_direct`].
pub(crate) struct Direct {
    id: RequestId,
    method: Method,
    /// The rest of its `_meta`: what a call reads later (progress token,
    /// log level, trace context).
    meta: Map<String, Value>,
    capabilities: ClientCapabilities,
}

enum Method {
    Call(Box<CallToolRequestParams>),
    List,
    /// `server/discover`: what the server speaks and offers.
    Discover,
    /// `tasks/get`, `tasks/update` (with its answers), `tasks/cancel`.
    Task(TaskMethod, String, Option<InputResponses>),
    /// `subscriptions/listen` with the notifications it asks for, and its
    /// place among the listen streams once the front door took it.
    Listen(SubscriptionFilter, Option<Listening>),
}

#[derive(Clone, Copy)]
pub(super) enum TaskMethod {
    Get,
    Update,
    Cancel,
}

impl Direct {
    /// Its JSON-RPC method.
    pub(crate) fn method(&self) -> &'static str {
        match self.method {
            Method::Call(_) => "tools/call",
            Method::List => "tools/list",
            Method::Discover => "server/discover",
            Method::Task(TaskMethod::Get, ..) => "tasks/get",
            Method::Task(TaskMethod::Update, ..) => "tasks/update",
            Method::Task(TaskMethod::Cancel, ..) => "tasks/cancel",
            Method::Listen(..) => "subscriptions/listen",
        }
    }

    /// The tool a `tools/call` calls.
    pub(crate) fn tool(&self) -> Option<&str> {
        match &self.method {
            Method::Call(params) => Some(&params.name),
            _ => None,
        }
    }

    /// It opens a listen stream: it needs a place among them
    /// ([`give`](Self::give)).
    pub(crate) fn listens(&self) -> bool {
        matches!(self.method, Method::Listen(..))
    }

    /// The place the front door took for its listen stream.
    pub(crate) fn give(&mut self, listening: Listening) {
        if let Method::Listen(_, place) = &mut self.method {
            *place = Some(listening);
        }
    }

    /// Its id, as the front door's refusals name it.
    pub(crate) fn id(&self) -> Value {
        match &self.id {
            RequestId::Number(n) => Value::from(*n),
            RequestId::String(s) => Value::String(s.to_string()),
        }
    }
}

/// A JSON-RPC request of a method served here, read in one pass. Any
/// other shape fails to parse, and goes on to the front door's check,
/// which refuses it with the error it deserves.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Message<'a> {
    #[serde(borrow)]
    jsonrpc: Cow<'a, str>,
    id: RequestId,
    #[serde(borrow)]
    method: Cow<'a, str>,
    #[serde(borrow)]
    params: Option<Params<'a>>,
}

/// The params of `tools/call` and `tools/list` (whose `cursor` is not
/// read: the list is never paged).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Params<'a> {
    #[serde(rename = "_meta", borrow)]
    meta: Option<Meta<'a>>,
    name: Option<String>,
    arguments: Option<Map<String, Value>>,
    task_id: Option<String>,
    notifications: Option<SubscriptionFilter>,
    // `null` is not a value of these (the front door's check refuses it).
    #[serde(default, deserialize_with = "present")]
    input_responses: Option<InputResponses>,
    #[serde(default, deserialize_with = "present")]
    request_state: Option<String>,
}

/// A field that is there: `null` fails to parse as `T`.
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    field: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(field).map(Some)
}

/// A request's `_meta`, read in the message's one pass: its revision and
/// its client's capabilities typed, as this door needs them, and every other
/// key kept as it came, for what reads it later.
#[derive(Default)]
struct Meta<'a> {
    /// Its `io.modelcontextprotocol/protocolVersion`.
    version: Option<Cow<'a, str>>,
    /// Its `io.modelcontextprotocol/clientCapabilities`.
    capabilities: Option<ClientCapabilities>,
    rest: Map<String, Value>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Meta<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(meta: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = Meta<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Meta<'de>, A::Error> {
                let mut meta = Meta::default();
                // A key repeated: its last value counts, as in any JSON object here.
                while let Some(Text(key)) = map.next_key()? {
                    match &*key {
                        VERSION_KEY => meta.version = Some(map.next_value::<Text<'de>>()?.0),
                        CAPABILITIES_KEY => meta.capabilities = Some(map.next_value()?),
                        _ => {
                            let value = map.next_value()?;
                            meta.rest.insert(key.into_owned(), value);
                        }
                    }
                }
                Ok(meta)
            }
        }
        meta.deserialize_map(Fields)
    }
}

/// A JSON string, borrowed from the message unless it holds escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(text: D) -> Result<Self, D::Error> {
        struct Chars;
        impl<'de> serde::de::Visitor<'de> for Chars {
            type Value = Text<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(text)))
            }

            fn visit_str<E>(self, text: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(text.to_owned())))
            }
        }
        text.deserialize_str(Chars)
    }
}

/// The request in `body` when it is one served here; `None` sends it on.
/// `annotated`: the called tool's input schema has parameters that travel
/// in `Mcp-Param-*` headers too.
pub(crate) fn route(
    headers: &HeaderMap,
    body: &[u8],
    annotated: impl FnOnce(&str) -> bool,
) -> Option<Direct> {
    // Only this revision's requests are served here: nothing else is parsed.
    if one(headers, &PROTOCOL_VERSION)? != ProtocolVersion::V_2026_07_28.as_str() {
        return None;
    }
    let message: Message<'_> = serde_json::from_slice(body).ok()?;
    if message.jsonrpc != "2.0" || !short(&message.id) {
        return None;
    }
    let params = message.params?;
    let meta = params.meta?;
    let method = match &*message.method {
        "tools/call" => {
            let name = params.name?;
            if one(headers, &MCP_NAME)? != name || annotated(&name) {
                return None;
            }
            let call = CallToolRequestParams {
                meta: None,
                name,
                arguments: params.arguments,
                input_responses: params.input_responses,
                request_state: params.request_state,
            };
            Method::Call(Box::new(call))
        }
        "tools/list" => Method::List,
        "server/discover" => Method::Discover,
        "subscriptions/listen" => Method::Listen(params.notifications?, None),
        // A task's id travels in `Mcp-Name` too (SEP-2663), as a call's tool.
        task @ ("tasks/get" | "tasks/update" | "tasks/cancel") => {
            let kind = match task {
                "tasks/get" => TaskMethod::Get,
                "tasks/update" => TaskMethod::Update,
                _ => TaskMethod::Cancel,
            };
            let responses = params.input_responses;
            if matches!(kind, TaskMethod::Update) && responses.is_none() {
                return None;
            }
            let task_id = params.task_id?;
            if one(headers, &MCP_NAME)? != task_id {
                return None;
            }
            Method::Task(kind, task_id, responses)
        }
        _ => return None,
    };
    // The header named this revision (above): so must the body.
    let agreed = meta.version.as_deref() == Some(ProtocolVersion::V_2026_07_28.as_str())
        && one(headers, &MCP_METHOD)? == message.method;
    // A progress token is repeated in every notification: a short string
    // or an integer.
    let token = match meta.rest.get("progressToken") {
        None => true,
        Some(Value::String(token)) => token.len() <= MAX_TOKEN_BYTES,
        Some(token) => token.is_i64() || token.is_u64(),
    };
    if !agreed || !token {
        return None;
    }
    Some(Direct {
        id: message.id,
        method,
        meta: meta.rest,
        capabilities: meta.capabilities?,
    })
}

/// An id short enough to repeat in what the server sends back.
fn short(id: &RequestId) -> bool {
    match id {
        RequestId::String(id) => id.len() <= MAX_TOKEN_BYTES,
        RequestId::Number(_) => true,
    }
}

/// The one value of header `name` as text; `None` when it is missing,
/// repeated, not text, or Base64-wrapped (`=?base64?…?=`).
fn one<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?.to_str().ok()?;
    (values.next().is_none() && !value.starts_with("=?base64?")).then_some(value)
}

impl ExportService {
    /// Serves a request [`route`] took, for `caller` (counted against `key`)
    /// in schema `profile`.
    pub(crate) async fn serve_direct(
        self,
        direct: Direct,
        caller: Option<Arc<Caller>>,
        key: CallerKey,
        profile: Option<SchemaProfile>,
    ) -> Response<Body> {
        let Direct {
            id,
            method,
            meta,
            capabilities,
        } = direct;
        let params = match method {
            Method::List => {
                let list = self.tool_list(profile, caller.as_deref());
                let (status, message) = reply(&id, Ok(ServerResult::ListTools(list)));
                return json(status, &message);
            }
            Method::Discover => {
                let versions = self.supported_protocol_versions().to_vec();
                let discovered = DiscoverResult::from_server_info(versions, self.get_info());
                let (status, message) = reply(&id, Ok(ServerResult::Discover(discovered)));
                return json(status, &message);
            }
            Method::Listen(requested, Some(listening)) => {
                return self.listen(id, requested, listening, caller.as_deref());
            }
            Method::Listen(_, None) => {
                let error = McpError::internal_error("a listen stream without its place", None);
                let (status, message) = reply(&id, Err(error));
                return json(status, &message);
            }
            Method::Task(kind, task, responses) => {
                let answered = self
                    .task(
                        kind,
                        &task,
                        responses,
                        Some(&capabilities),
                        caller.as_deref(),
                    )
                    .await;
                let (status, message) = reply(&id, answered);
                return json(status, &message);
            }
            Method::Call(params) => params,
        };
        let of = CallOf {
            meta,
            version: ProtocolVersion::V_2026_07_28,
            capabilities,
            caller,
            key,
            arguments: None,
            large: false,
            statuses: true,
        };
        self.answer_call(id, *params, of).await
    }
}

/// What a `tools/call` served on its own request needs beside its params.
pub(super) struct CallOf {
    /// The request's `_meta`.
    pub(super) meta: Map<String, Value>,
    /// The revision it is served in.
    pub(super) version: ProtocolVersion,
    /// What its client declared.
    pub(super) capabilities: ClientCapabilities,
    /// The authenticated caller, if any.
    pub(super) caller: Option<Arc<Caller>>,
    /// Whom it is counted against.
    pub(super) key: CallerKey,
    /// A large call's arguments, parsed beside the message by the front door.
    pub(super) arguments: Option<Map<String, Value>>,
    /// Its message is large.
    pub(super) large: bool,
    /// Its JSON-RPC error is answered with the HTTP status it names
    /// ([`reply`]); else `200`.
    pub(super) statuses: bool,
}

impl ExportService {
    /// Runs the call `params` of the request `id` and answers it: plain JSON
    /// when nothing comes before its result, else an SSE stream that
    /// carries its progress and log lines, then its result.
    pub(super) async fn answer_call(
        self,
        id: RequestId,
        params: CallToolRequestParams,
        of: CallOf,
    ) -> Response<Body> {
        let CallOf {
            meta,
            version,
            capabilities,
            caller,
            key,
            arguments,
            large,
            statuses,
        } = of;
        let cancelled = CancellationToken::new();
        let shutdown = self.shared.shutdown.clone();
        let link = Arc::new(Link::new(version.clone()));
        let request_link = Arc::clone(&link);
        let request_cancelled = cancelled.clone();
        let mut serving = Box::pin(async move {
            let request = CallRequest {
                id: &id,
                meta: &meta,
                version: Some(version),
                capabilities,
                caller,
                key: Some(key),
                door: Door::McpHttp,
                arguments,
                large,
                cancelled: request_cancelled,
                link: request_link,
            };
            let answered = self.serve_call(params, request).await;
            let (status, message) = reply(&id, answered.map(ServerResult::from));
            (if statuses { status } else { StatusCode::OK }, message)
        });
        // The client gone before its answer (this future dropped): the call
        // is cancelled.
        let on_drop = cancelled.clone().drop_guard();
        // Most calls finish on their first poll having sent nothing: they
        // are answered as plain JSON, and no outbox is made for them.
        let first_poll = std::future::poll_fn(|cx| Poll::Ready(serving.as_mut().poll(cx))).await;
        if let Poll::Ready((status, message)) = first_poll {
            on_drop.disarm();
            let Some(mut sent) = link.receiver() else {
                return json(status, &message);
            };
            // What the call sent before its result goes first; the stream
            // ends once the call's senders are gone.
            drop((link, serving));
            return match sent.try_recv() {
                Ok(first) => stream(first, sent, Some(message), cancelled, shutdown),
                Err(_) => json(status, &message),
            };
        }
        let mut sent = link.receiver_or_open();
        let outbox = link.sender();
        drop(link);
        let first = tokio::select! {
            biased;
            Some(first) = sent.recv() => first,
            (status, message) = &mut serving => {
                // Whatever the call sent before its result goes first.
                let Ok(first) = sent.try_recv() else {
                    on_drop.disarm();
                    return json(status, &message);
                };
                drop(outbox);
                return stream(first, sent, Some(message), cancelled, shutdown);
            }
        };
        on_drop.disarm();
        // The rest of the call goes on beside its answer's stream.
        tokio::spawn(async move {
            let (_, message) = serving.await;
            let _ = outbox.send(message).await;
        });
        stream(first, sent, None, cancelled, shutdown)
    }
}

impl ExportService {
    /// A `subscriptions/listen` stream (`mcp/listen.rs`) of the request `id`:
    /// acknowledged with what of `requested` haip sends (tool list changes),
    /// then those, and a caller's own tasks' changes, until its client goes
    /// away, the server shuts down, or the registry is gone (then its final
    /// result).
    pub(super) fn listen(
        &self,
        id: RequestId,
        requested: SubscriptionFilter,
        listening: Listening,
        caller: Option<&Caller>,
    ) -> Response<Body> {
        let advertised = requested.supported_by(&self.get_info().capabilities);
        let accepted = requested
            .intersection(&listen::accepted())
            .intersection(&advertised);
        let first = listen::acknowledgment(&id, &accepted);
        let done = SubscriptionsListenResult::complete(&id, &self.get_info().server_info);
        let last = answer(&id, &ServerResult::SubscriptionsListen(done));
        let (outbox, rest) = mpsc::channel(OUTBOX);
        let cancelled = CancellationToken::new();
        let shutdown = self.shared.shutdown.clone();
        let subject = caller.map(|c| Arc::from(c.subject()));
        tokio::spawn(listen::relay(listen::Relay {
            listening,
            accepted,
            id,
            outbox,
            last,
            cancelled: cancelled.clone(),
            shutdown: shutdown.clone(),
            subject,
            tasks: self.tasks.watch(),
        }));
        stream(first, rest, None, cancelled, shutdown)
    }

    /// `tasks/get`, `tasks/update`, `tasks/cancel` of the task `task`, for a
    /// client that takes tasks (it says so in `capabilities`, when they are
    /// known).
    pub(super) async fn task(
        &self,
        kind: TaskMethod,
        task: &str,
        responses: Option<InputResponses>,
        capabilities: Option<&ClientCapabilities>,
        caller: Option<&Caller>,
    ) -> Result<ServerResult, McpError> {
        if capabilities.is_some_and(|c| !c.supports_tasks()) {
            return Err(McpError::missing_required_client_capability(
                ClientCapabilities::tasks(),
            ));
        }
        let subject = caller.map(Caller::subject);
        let tasks = &self.tasks;
        match kind {
            TaskMethod::Get => tasks.get(task, subject).await.map(ServerResult::GetTask),
            TaskMethod::Update => tasks
                .update(task, subject, responses.unwrap_or_default())
                .await
                .map(ServerResult::task_ack),
            TaskMethod::Cancel => tasks
                .cancel(task, subject)
                .await
                .map(ServerResult::task_ack),
        }
    }
}

/// How a call served on its own request (here, or by `stateless.rs`)
/// reaches its client: its notifications go on the request's answer, ahead
/// of the result, through an outbox made when the call first sends one.
pub(super) struct Link {
    /// What the call sent, waiting for the answer's stream.
    outbox: OnceLock<Outbox>,
    /// The revision of its request.
    version: ProtocolVersion,
}

/// A call's notifications on their way to its answer's stream.
struct Outbox {
    sender: mpsc::Sender<Bytes>,
    /// Taken once, by the request that answers.
    receiver: Mutex<Option<mpsc::Receiver<Bytes>>>,
}

impl Link {
    pub(super) fn new(version: ProtocolVersion) -> Link {
        Link {
            outbox: OnceLock::new(),
            version,
        }
    }

    /// The outbox, made now if the call has sent nothing yet.
    fn outbox(&self) -> &Outbox {
        self.outbox.get_or_init(|| {
            let (sender, receiver) = mpsc::channel(OUTBOX);
            Outbox {
                sender,
                receiver: Mutex::new(Some(receiver)),
            }
        })
    }

    /// What the call sent, if it sent anything (taken once).
    pub(super) fn receiver(&self) -> Option<mpsc::Receiver<Bytes>> {
        let outbox = self.outbox.get()?;
        outbox
            .receiver
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// What the call sends, from now on (taken once).
    pub(super) fn receiver_or_open(&self) -> mpsc::Receiver<Bytes> {
        let outbox = self.outbox();
        let taken = outbox
            .receiver
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        // Taken only here or by `receiver`, once per request.
        taken.unwrap_or_else(|| mpsc::channel(1).1)
    }

    /// A sender into the outbox (made now if need be).
    pub(super) fn sender(&self) -> mpsc::Sender<Bytes> {
        self.outbox().sender.clone()
    }
}

impl ClientLink for Link {
    fn progress(&self, note: ProgressNotificationParam) -> Sent<'_> {
        let message = notification("notifications/progress", &note);
        Box::pin(async move {
            // A client that went away just misses it.
            let _ = self.outbox().sender.send(message).await;
        })
    }

    fn log(&self, note: LoggingMessageNotificationParam) -> Sent<'_> {
        let message = notification("notifications/message", &note);
        Box::pin(async move {
            let _ = self.outbox().sender.send(message).await;
        })
    }

    /// Questions go by rounds from 2026-07-28 on (`mrtr.rs`), and are
    /// refused at once before it (a second POST would answer them, which
    /// nothing waits for); any other request of the server has nowhere to go.
    fn peer(&self, _stateless: bool) -> Arc<dyn Peer> {
        Arc::new(NoSession)
    }

    fn session_version(&self) -> Option<ProtocolVersion> {
        Some(self.version.clone())
    }
}

#[derive(Serialize)]
struct Notification<'a, P> {
    jsonrpc: &'static str,
    method: &'a str,
    params: &'a P,
}

#[derive(Serialize)]
struct Answered<'a, R> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    result: &'a R,
}

#[derive(Serialize)]
struct Failed<'a> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    error: &'a McpError,
}

/// A JSON-RPC notification.
pub(super) fn notification<P: Serialize>(method: &str, params: &P) -> Bytes {
    encode(&Notification {
        jsonrpc: "2.0",
        method,
        params,
    })
}

/// A JSON-RPC result answering the request `id`.
pub(super) fn answer<R: Serialize>(id: &RequestId, result: &R) -> Bytes {
    encode(&Answered {
        jsonrpc: "2.0",
        id,
        result,
    })
}

/// A request's last message, and the HTTP status it is answered with on its
/// own: a JSON-RPC error of the request's shape (revision, capabilities,
/// headers) is `400`, an unknown method `404`, anything else `200`. A
/// result carries the caching hints the revision asks of it.
pub(super) fn reply(
    id: &RequestId,
    answered: Result<ServerResult, McpError>,
) -> (StatusCode, Bytes) {
    match answered {
        Ok(mut result) => {
            result.fill_missing_cache_hints();
            (StatusCode::OK, answer(id, &result))
        }
        Err(error) => {
            let status = match error.code {
                ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
                | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
                | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
                ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
                _ => StatusCode::OK,
            };
            (status, error_message(id, &error))
        }
    }
}

/// The JSON-RPC error answering the request `id`.
pub(super) fn error_message(id: &RequestId, error: &McpError) -> Bytes {
    encode(&Failed {
        jsonrpc: "2.0",
        id,
        error,
    })
}

/// A message as JSON.
pub(super) fn encode<T: Serialize>(message: &T) -> Bytes {
    // Room for a small answer at once, not grown from a few bytes.
    let mut out = Vec::with_capacity(256);
    // The messages are maps of strings and JSON values: they always encode.
    match serde_json::to_writer(&mut out, message) {
        Ok(()) => Bytes::from(out),
        Err(_) => Bytes::new(),
    }
}

/// One JSON-RPC message as the whole answer.
pub(super) fn json(status: StatusCode, message: &Bytes) -> Response<Body> {
    let mut response = Response::new(Full::new(message.clone()).boxed_unsync());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The answer as an SSE stream: `first`, then what `rest` brings until
/// its senders are gone, then `last` (the call's result, when it came
/// before the stream was made). Dropped before then (its client gone), it
/// cancels the call; the server's shutdown ends it.
fn stream(
    first: Bytes,
    rest: mpsc::Receiver<Bytes>,
    last: Option<Bytes>,
    cancelled: CancellationToken,
    shutdown: CancellationToken,
) -> Response<Body> {
    struct State {
        first: Option<Bytes>,
        rest: mpsc::Receiver<Bytes>,
        last: Option<Bytes>,
        shutdown: CancellationToken,
        _cancel_on_drop: tokio_util::sync::DropGuard,
    }
    let state = State {
        first: Some(first),
        rest,
        last,
        shutdown,
        _cancel_on_drop: cancelled.drop_guard(),
    };
    let events = futures_util::stream::unfold(state, |mut state| async move {
        let message = match state.first.take() {
            Some(first) => first,
            None => tokio::select! {
                message = state.rest.recv() => match message {
                    Some(message) => message,
                    None => state.last.take()?,
                },
                () = state.shutdown.cancelled() => return None,
                () = tokio::time::sleep(KEEP_ALIVE) => {
                    let comment = Frame::data(Bytes::from_static(b":\n\n"));
                    return Some((Ok(comment), state));
                }
            },
        };
        let mut event = BytesMut::with_capacity(message.len() + 8);
        event.extend_from_slice(b"data: ");
        event.extend_from_slice(&message);
        event.extend_from_slice(b"\n\n");
        Some((Ok::<_, Infallible>(Frame::data(event.freeze())), state))
    });
    sse(StreamBody::new(events).boxed_unsync())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A request's headers, `pairs` in order (names may repeat).
    pub(in crate::mcp::export) fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    const CALL: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;

    const GOOD: [(&str, &str); 3] = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "echo"),
    ];

    #[test]
    fn a_request_whose_headers_agree_with_its_body_is_served_here() {
        let direct = route(&headers(&GOOD), CALL.as_bytes(), |_| false).expect("served here");
        assert_eq!(direct.id, RequestId::Number(7));
        assert!(matches!(&direct.method, Method::Call(p) if p.name == "echo"));
        // What the door reads of `_meta` is typed; nothing else is in it.
        assert!(direct.meta.is_empty());
        assert_eq!(direct.capabilities, ClientCapabilities::default());
    }

    /// `_meta` is read in the message's one pass: the revision and the
    /// capabilities typed (however the JSON spells them), every other key
    /// kept for what reads it later; a revision that is not text, or
    /// capabilities that are not capabilities, send the request on.
    #[test]
    fn meta_is_read_typed_and_the_rest_kept() {
        let call = |meta: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"echo","_meta":{meta}}}}}"#
            )
        };
        let served = |meta: &str| route(&headers(&GOOD), call(meta).as_bytes(), |_| false);
        let version = r#""io.modelcontextprotocol/protocolVersion""#;
        let capabilities = r#""io.modelcontextprotocol/clientCapabilities""#;

        // Escapes in a key or in the revision: read as the text they spell.
        let escaped = format!(
            r#"{{"io.modelcontextprotocol\/protocolVersion":"2026\u002d07-28",{capabilities}:{{"elicitation":{{}}}},"progressToken":"p1","traceparent":"00-ab-cd-01"}}"#
        );
        let direct = served(&escaped).expect("served here");
        assert!(direct.capabilities.elicitation.is_some());
        assert_eq!(direct.meta.get("progressToken"), Some(&Value::from("p1")));
        assert_eq!(
            direct.meta.get("traceparent"),
            Some(&Value::from("00-ab-cd-01"))
        );
        assert_eq!(direct.meta.len(), 2);

        // A key given twice: its last value counts, as anywhere in JSON here.
        let twice =
            format!(r#"{{{version}:"2025-11-25",{version}:"2026-07-28",{capabilities}:{{}}}}"#);
        assert!(served(&twice).is_some());
        let twice =
            format!(r#"{{{version}:"2026-07-28",{version}:"2025-11-25",{capabilities}:{{}}}}"#);
        assert!(served(&twice).is_none());

        // Not this revision, not text, missing, or capabilities that are not.
        for meta in [
            format!(r#"{{{version}:"2025-11-25",{capabilities}:{{}}}}"#),
            format!(r#"{{{version}:20260728,{capabilities}:{{}}}}"#),
            format!(r#"{{{capabilities}:{{}}}}"#),
            format!(r#"{{{version}:"2026-07-28"}}"#),
            format!(r#"{{{version}:"2026-07-28",{capabilities}:[]}}"#),
            "[]".to_owned(),
        ] {
            assert!(served(&meta).is_none(), "{meta}");
        }
    }

    #[test]
    fn anything_else_goes_on_to_the_stateless_door() {
        let body = CALL.as_bytes();
        // A header missing, repeated, disagreeing, or Base64-wrapped.
        for skip in 0..GOOD.len() {
            let partial: Vec<_> = GOOD
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != skip)
                .map(|(_, h)| *h)
                .collect();
            assert!(route(&headers(&partial), body, |_| false).is_none());
        }
        let mut twice = GOOD.to_vec();
        twice.push(("mcp-method", "tools/call"));
        assert!(route(&headers(&twice), body, |_| false).is_none());
        let mut other = GOOD.to_vec();
        other[2] = ("mcp-name", "other");
        assert!(route(&headers(&other), body, |_| false).is_none());
        other[2] = ("mcp-name", "=?base64?ZWNobw==?=");
        assert!(route(&headers(&other), body, |_| false).is_none());
        // A tool with `x-mcp-header` parameters.
        assert!(route(&headers(&GOOD), body, |_| true).is_none());
        // Another revision, or no capabilities in `_meta`.
        let older = CALL.replace("2026-07-28", "2025-11-25");
        assert!(route(&headers(&GOOD), older.as_bytes(), |_| false).is_none());
        let bare = CALL.replace(r#","io.modelcontextprotocol/clientCapabilities":{}"#, "");
        assert!(route(&headers(&GOOD), bare.as_bytes(), |_| false).is_none());
        // A method not served here, a long progress token, a long id.
        let other = CALL.replace("tools/call", "tasks/get");
        assert!(route(&headers(&GOOD), other.as_bytes(), |_| false).is_none());
        let long = "x".repeat(MAX_TOKEN_BYTES + 1);
        let token = CALL.replace(
            "\"_meta\":{",
            &format!("\"_meta\":{{\"progressToken\":\"{long}\","),
        );
        assert!(route(&headers(&GOOD), token.as_bytes(), |_| false).is_none());
        let id = CALL.replace("\"id\":7", &format!("\"id\":\"{long}\""));
        assert!(route(&headers(&GOOD), id.as_bytes(), |_| false).is_none());
        // Not JSON-RPC 2.0; arguments that are not an object.
        let old = CALL.replace("\"2.0\"", "\"1.0\"");
        assert!(route(&headers(&GOOD), old.as_bytes(), |_| false).is_none());
        let args = CALL.replace("{\"message\":\"hi\"}", "[1]");
        assert!(route(&headers(&GOOD), args.as_bytes(), |_| false).is_none());
        // `null` answers or state: the check refuses them.
        for field in ["inputResponses", "requestState"] {
            let null = CALL.replace("\"arguments\"", &format!("\"{field}\":null,\"arguments\""));
            assert!(route(&headers(&GOOD), null.as_bytes(), |_| false).is_none());
        }
    }

    #[test]
    fn discovery_and_tasks_are_served_here_too() {
        let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;
        let with = |method: &'static str, params: &str| {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":3,"method":"{method}","params":{{{params}{meta}}}}}"#
            );
            let mut headers = headers(&[("mcp-protocol-version", "2026-07-28")]);
            headers.insert("mcp-method", HeaderValue::from_static(method));
            if method.starts_with("tasks/") {
                headers.insert("mcp-name", HeaderValue::from_static("t1"));
            }
            (headers, body)
        };
        let (h, body) = with("server/discover", "");
        let direct = route(&h, body.as_bytes(), |_| false).expect("served here");
        assert_eq!(direct.method(), "server/discover");
        let (h, body) = with("tasks/get", r#""taskId":"t1","#);
        let direct = route(&h, body.as_bytes(), |_| false).expect("served here");
        assert!(matches!(&direct.method, Method::Task(TaskMethod::Get, id, None) if id == "t1"));
        let (h, body) = with(
            "tasks/update",
            r#""taskId":"t1","inputResponses":{"k":{}},"#,
        );
        assert!(route(&h, body.as_bytes(), |_| false).is_some());
        // Without what they need, or another task in `Mcp-Name`:
        // `stateless.rs` says why.
        let (h, body) = with("tasks/update", r#""taskId":"t1","#);
        assert!(route(&h, body.as_bytes(), |_| false).is_none());
        let (h, body) = with("tasks/cancel", "");
        assert!(route(&h, body.as_bytes(), |_| false).is_none());
        let (mut h, body) = with("tasks/get", r#""taskId":"t1","#);
        h.insert("mcp-name", HeaderValue::from_static("t2"));
        assert!(route(&h, body.as_bytes(), |_| false).is_none());
    }

    #[test]
    fn a_failed_request_is_answered_with_the_status_its_error_names() {
        let id = RequestId::Number(1);
        let header = McpError::new(ErrorCode::HEADER_MISMATCH, "mismatch", None);
        assert_eq!(reply(&id, Err(header)).0, StatusCode::BAD_REQUEST);
        let unknown = McpError::new(ErrorCode::METHOD_NOT_FOUND, "no", None);
        assert_eq!(reply(&id, Err(unknown)).0, StatusCode::NOT_FOUND);
        let params = McpError::invalid_params("bad", None);
        let (status, body) = reply(&id, Err(params));
        assert_eq!(status, StatusCode::OK);
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["jsonrpc"], "2.0");
        assert_eq!(body["id"], 1);
        assert_eq!(body["error"]["code"], -32602);
    }

    #[tokio::test]
    async fn a_result_that_came_with_a_full_outbox_still_ends_the_stream() {
        let (outbox, rest) = mpsc::channel(OUTBOX);
        for n in 0..OUTBOX {
            outbox
                .try_send(Bytes::from(format!("{{\"n\":{n}}}")))
                .unwrap();
        }
        drop(outbox);
        let first = Bytes::from_static(b"{\"first\":true}");
        let last = Bytes::from_static(b"{\"last\":true}");
        let response = stream(
            first,
            rest,
            Some(last),
            CancellationToken::new(),
            CancellationToken::new(),
        );
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let events: Vec<_> = std::str::from_utf8(&body)
            .unwrap()
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .collect();
        assert_eq!(events.len(), OUTBOX + 2, "{events:?}");
        assert_eq!(events[0], "data: {\"first\":true}");
        assert_eq!(events[OUTBOX], format!("data: {{\"n\":{}}}", OUTBOX - 1));
        assert_eq!(events[OUTBOX + 1], "data: {\"last\":true}");
    }
}

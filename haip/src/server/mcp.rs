//! `/mcp` (feature `mcp`): the door most MCP hosts take, held to the same
//! budgets as HAIP's (docs/protocol.md §18.1) before a request is served
//! (`mcp/export/`: `direct.rs`, `session.rs`, `stateless.rs`):
//!
//! - **Origin and `Host`**: checked before any route, `/mcp` included, by
//!   the server's front door (`guard.rs`): a browser `Origin` that is not
//!   allowed, or a `Host` the server does not answer to, gets `403` with a
//!   JSON-RPC error (the MCP rule against DNS rebinding).
//! - **Bodies**: one JSON-RPC message, at most `max_message_bytes`; a longer
//!   `Content-Length` gets `413` before anything is read. The body is read
//!   under `body_read_timeout` and its minimum rate (`408`), and counted in
//!   `max_inflight_body_bytes` (`503` + `Retry-After`) from its first byte
//!   until its answer has gone, at what its parsed form costs
//!   ([`inbound::check`]: at most 17 times its length).
//! - **Parsing**: the message is checked once here (a walk that builds
//!   nothing) and refused with its JSON-RPC error (`-32700`, `-32600`,
//!   `-32601`, `-32602`). One over 64 KiB is checked on the blocking pool,
//!   with one of `max(1, cores / 2)` permits; a `tools/call`'s arguments
//!   are parsed there too and handed to the call beside the message, so the
//!   export parses only what is left (the method, the name, small
//!   scalars, and values that travel in `Mcp-Param-*` headers too). Any
//!   other large message is parsed under the permit, held until it is:
//!   few at once, whatever arrives.
//! - **Pools**: a request's place among the MCP sessions or the stateless
//!   requests being served, each bounded by `max_sessions`, and its
//!   caller's share of it (`max_sessions_per_caller`; the caller is its
//!   subject, or its peer address when unauthenticated: `access.rs`), is
//!   taken once its method is known, as is a `subscriptions/listen`
//!   stream's place; beyond one, `503` + `Retry-After` and a JSON-RPC error
//!   naming the limit (`mcp/export/http.rs`, `mcp/listen.rs`). A request
//!   naming an MCP session that its caller did not open is answered as one
//!   naming no session (`404`).
//! - **Answers**: counted until the client takes them (`answer.rs`). Only
//!   bytes held and not taken count against the write deadline: a
//!   `subscriptions/listen` stream may be silent for hours (haip sends an SSE
//!   comment every 15 s, which a reading client takes at once), and one
//!   over the server's limit is refused here (`mcp/listen.rs`).

use std::sync::Arc;

use crate::transport::body::RequestBody;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::HeaderMap;
use hyper::header::{self, HeaderValue};
use hyper::http::Extensions;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::Map;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::access::{authenticate, caller_key, unauthorized};
use super::answer::Outflow;
use super::answer::counted::AnswerBody;
use super::body::{Reader, Refused, Reservation, Stopped};
use super::hub::Hub;
use super::reply::{Body, not_found};
use super::with_mcp::McpDoor;
use crate::auth::{Caller, query_param};
use crate::context::share::CallerKey;
use crate::exec::admit::{Arrival, Check};
use crate::mcp::export::session::{self, Incoming};
use crate::mcp::export::{McpProfile, direct, stateless};
use crate::mcp::inbound::{self, Checked, INVALID_REQUEST, Refusal};
use crate::schema::SchemaProfile;
use crate::session::LARGE_PARAMS;
use crate::stats::Door;

use crate::protocol::jsonrpc::SERVER_BUSY;

/// A message as checked once: its method and id (or the JSON-RPC error
/// refusing it), a large call's arguments split off from the rest, and the
/// called tool's name when its scopes matter.
type Examined = (
    Result<Checked, Refusal>,
    Option<(Vec<u8>, Map<String, Value>)>,
    Option<String>,
);

/// Serves one `/mcp` request.
pub(super) async fn endpoint(req: Request<RequestBody>, hub: &Arc<Hub>) -> Response<Body> {
    let Some(mcp) = &hub.mcp else {
        return not_found();
    };
    let caller = match authenticate(hub, &req).await {
        Ok(caller) => caller,
        Err(e) => return unauthorized(hub, &e),
    };
    // Whom the pools count the request against, and the most one may hold.
    let key = caller_key(hub, &req, caller.as_deref());
    let mut req = req;
    if let Some(refused) = choose_profile(&mut req) {
        return refused;
    }
    let outflow = req.extensions().get::<Arc<Outflow>>().cloned();
    if req.method() != Method::POST {
        // `GET` (a session's stream) and `DELETE`: no body to read.
        let Some(sessions) = mcp.http.sessions() else {
            return method_not_allowed("POST");
        };
        if !session::takes(req.headers()) {
            // A revision without sessions has nothing to get or delete.
            return method_not_allowed("POST");
        }
        let subject = caller.as_ref().map(|c| c.subject());
        let response = match *req.method() {
            Method::GET => sessions.get(req.headers(), subject).await,
            Method::DELETE => sessions.delete(req.headers(), subject).await,
            _ => return method_not_allowed("GET, POST, DELETE"),
        };
        return answered(response, hub, outflow, None);
    }
    if let Some(refused) = unacceptable(&req) {
        return refused;
    }
    post(req, hub, mcp, caller, key, outflow).await
}

/// `?schema_profile=`: the profile `tools/list` answers in (docs/protocol.md
/// §6.14), put in the request's extensions; the refusal of a name no
/// profile has.
fn choose_profile(req: &mut Request<RequestBody>) -> Option<Response<Body>> {
    let name = query_param(req.uri().query(), "schema_profile")?;
    match name.parse::<SchemaProfile>() {
        Ok(profile) => {
            req.extensions_mut().insert(McpProfile(profile));
            None
        }
        Err(_) => {
            let message = format!(
                "Unknown schema profile {:?} in ?schema_profile=; expected one of: {}",
                inbound::quote(&name),
                SchemaProfile::ALL.map(SchemaProfile::name).join(", ")
            );
            Some(rpc_error(
                StatusCode::BAD_REQUEST,
                &Refusal::new(400, INVALID_REQUEST, message),
            ))
        }
    }
}

/// Serves a `POST`: its body read within the budgets, checked once, the
/// caller's scopes and the pools applied, then served.
async fn post(
    req: Request<RequestBody>,
    hub: &Arc<Hub>,
    mcp: &McpDoor,
    caller: Option<Arc<Caller>>,
    key: CallerKey,
    outflow: Option<Arc<Outflow>>,
) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let (bytes, mut reservation) = match read(&parts.headers, body, hub).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let at = Direct {
        hub,
        mcp,
        caller: &caller,
        key: &key,
        profile: parts.extensions.get::<McpProfile>().map(|p| p.0),
    };
    // A small 2026-07-28 request, or one of a session, served here is read
    // once, and counted at the most its parsed form can cost
    // (`mcp/export/direct.rs`, `mcp/export/session.rs`).
    if bytes.len() <= DIRECT_UNCHECKED {
        let cost = bytes.len() * inbound::MAX_COST_MULTIPLE;
        if let Some(direct) = at.route(&parts.headers, &bytes) {
            return at.serve(direct, cost, reservation, outflow).await;
        }
        if let Some(sessions) = mcp.http.sessions()
            && let Some(message) = session::route(&parts.headers, &bytes)
        {
            let session = Session {
                message,
                arguments: None,
                large: false,
                checked: false,
            };
            return at
                .serve_session(
                    sessions,
                    &parts.headers,
                    session,
                    cost,
                    reservation,
                    outflow,
                )
                .await;
        }
    }
    // A large message is checked off the workers, and parsed by the MCP
    // server with a permit, so that few are parsed at once.
    let large = bytes.len() > LARGE_PARAMS;
    let permit = if large {
        Some(parse_permit(&mcp.parsers).await)
    } else {
        None
    };
    let scoped = caller.is_some() && scopes_matter(hub);
    let (checked, split, name) = examine(&bytes, large, scoped, hub, &parts.extensions).await;
    let checked = match checked {
        Ok(checked) => checked,
        Err(refusal) => {
            tracing::debug!(code = refusal.code, "/mcp: request refused");
            return rpc_error(status_of(refusal.status), &refusal);
        }
    };
    if !large
        && checked.id.is_some()
        && let Some(direct) = at.route(&parts.headers, &bytes)
    {
        return at.serve(direct, checked.cost, reservation, outflow).await;
    }
    // A call the caller's scopes do not allow: `403` and the scopes to step
    // up to (docs/protocol.md §17.1), before it is served.
    if let (Some(caller), Some(name)) = (&caller, &name)
        && let Some(refused) = forbidden_call(hub, caller, checked.id.as_ref(), name)
    {
        return refused;
    }
    // Held from now until the answer has gone: what the request costs parsed.
    if checked.cost > reservation.bytes() && !reservation.grow(checked.cost - reservation.bytes()) {
        return busy("Too many request bodies in flight; retry shortly");
    }
    if let Some(method) = checked.method.as_deref() {
        hub.shared.stats.mcp_request(method);
    }
    let (bytes, arguments) = match split {
        Some((stub, arguments)) => (Bytes::from(stub), Some(arguments)),
        None => (bytes, None),
    };
    // A message of a session's revision: served by the sessions.
    if let Some(sessions) = mcp.http.sessions()
        && let Some(message) = session::route(&parts.headers, &bytes)
    {
        drop(permit);
        let session = Session {
            message,
            arguments,
            large,
            checked: true,
        };
        return at
            .serve_session(
                sessions,
                &parts.headers,
                session,
                checked.cost,
                reservation,
                outflow,
            )
            .await;
    }
    // Anything else is served on its own (`mcp/export/stateless.rs`).
    let message: session::Message = match serde_json::from_slice(&bytes) {
        Ok(message) => message,
        Err(e) => {
            let why = format!("Invalid Request: not a JSON-RPC 2.0 message ({e})");
            return rpc_error(
                StatusCode::BAD_REQUEST,
                &Refusal::new(400, INVALID_REQUEST, why),
            );
        }
    };
    drop(permit);
    if let Err(refused) = stateless::check(&parts.headers, &message, |name| at.shown(name)) {
        tracing::debug!(?refused, "/mcp: request refused for its headers");
        return refused.response();
    }
    // A listen stream's place is taken (and the registry watched) now,
    // before it is acknowledged: one over the limit is refused before
    // anything is sent (`mcp/listen.rs`).
    let listening = match checked.method.as_deref() {
        Some("subscriptions/listen") if checked.id.is_some() => {
            match mcp.http.listen(&hub.shared.registry, &key) {
                Ok(listening) => Some(listening),
                Err(why) => return busy_answering(why, checked.id.clone()),
            }
        }
        _ => None,
    };
    let id = message.id();
    let incoming = Incoming {
        caller: caller.clone(),
        key: key.clone(),
        profile: at.profile,
        arguments,
        large,
        door: Door::McpHttp,
    };
    let served = mcp
        .http
        .serve_stateless(&parts.headers, message, incoming, listening)
        .await;
    match served {
        Ok(response) => answered(response, hub, outflow, Some(reservation)),
        Err(why) => busy_answering(why, id),
    }
}

/// Reads a `POST`'s body whole (one JSON-RPC message, at most
/// `max_message_bytes`), with its place in the body budget; `Err` is the
/// JSON-RPC error that refuses it.
async fn read(
    headers: &HeaderMap,
    body: RequestBody,
    hub: &Hub,
) -> Result<(Bytes, Reservation), Response<Body>> {
    let max = hub
        .config
        .max_body_bytes
        .min(hub.shared.config.max_message_bytes);
    let mut reader = match Reader::start(
        headers,
        body,
        &hub.bodies,
        hub.config.body_read_timeout,
        max,
    ) {
        Ok(reader) => reader,
        Err(Refused::BadLength) => {
            return Err(closing(rpc_error(
                StatusCode::BAD_REQUEST,
                &Refusal::new(400, INVALID_REQUEST, "Content-Length is not a number"),
            )));
        }
        Err(Refused::Stopped(stopped)) => return Err(stopped_response(stopped, hub, max)),
    };
    match reader.read_rest().await {
        Ok(bytes) => Ok((bytes, reader.into_reservation())),
        Err(stopped) => Err(stopped_response(stopped, hub, max)),
    }
}

/// Checks the message once. A `large` call's arguments are parsed here
/// too, off the workers, and left out of what is parsed on them later; so is its tool's name when its scopes matter (`scoped`).
async fn examine(
    bytes: &Bytes,
    large: bool,
    scoped: bool,
    hub: &Hub,
    extensions: &Extensions,
) -> Examined {
    if !large {
        let checked = inbound::check(bytes);
        let call = matches!(&checked, Ok(c) if c.method.as_deref() == Some("tools/call"));
        let name = (scoped && call).then(|| call_name(bytes)).flatten();
        return (checked, None, name);
    }
    let owned = bytes.clone();
    // What of the arguments travels in `Mcp-Param-*` headers too (the
    // `x-mcp-header` properties of the schema the client was shown)
    // stays in the message the headers are checked against.
    let registry = hub.shared.registry.clone();
    let profile = extensions
        .get::<McpProfile>()
        .map_or(hub.shared.config.schema_profile, |p| p.0);
    tokio::task::spawn_blocking(move || {
        let checked = inbound::check(&owned);
        let call = matches!(&checked, Ok(c) if c.method.as_deref() == Some("tools/call"));
        let name = (scoped && call).then(|| call_name(&owned)).flatten();
        let split = match &checked {
            Ok(c) if c.method.as_deref() == Some("tools/call") => {
                inbound::split_arguments(&owned, |name| {
                    registry
                        .get(name)
                        .and_then(|tool| {
                            tool.advertised_input_schema(profile)
                                .map(inbound::header_paths)
                        })
                        .unwrap_or_default()
                })
            }
            _ => None,
        };
        (checked, split, name)
    })
    .await
    .unwrap_or_else(|_| {
        let broken = Refusal::new(
            400,
            inbound::PARSE_ERROR,
            "Parse error: the body could not be read",
        );
        (Err(broken), None, None)
    })
}

/// The longest body a request served by the fast paths is taken in
/// unchecked (`mcp/export/direct.rs`): counted at the most its parsed form
/// can cost, at most 17 times this. Longer ones are checked first.
const DIRECT_UNCHECKED: usize = 4 * 1024;

/// What serving a `POST` needs of it beside its message.
struct Direct<'a> {
    hub: &'a Arc<Hub>,
    mcp: &'a McpDoor,
    caller: &'a Option<Arc<Caller>>,
    key: &'a CallerKey,
    /// The schema profile its URL asks for, if any.
    profile: Option<SchemaProfile>,
}

impl Direct<'_> {
    /// The request in `body`, when it is one for the fast path (`direct.rs`).
    fn route(&self, headers: &HeaderMap, body: &[u8]) -> Option<direct::Direct> {
        direct::route(headers, body, |name| self.annotated(name))
    }

    /// The input schema of tool `name`, as the request is shown it, has
    /// parameters that travel in `Mcp-Param-*` headers too.
    fn annotated(&self, name: &str) -> bool {
        let hub = self.hub;
        let profile = self.profile.unwrap_or(hub.shared.config.schema_profile);
        hub.shared.registry.get(name).is_some_and(|tool| {
            tool.advertised_input_schema(profile)
                .is_some_and(inbound::has_header_params)
        })
    }

    /// The input schema of tool `name` as the request is shown it (its
    /// schema profile), if there is such a tool.
    fn shown(&self, name: &str) -> Option<Value> {
        let hub = self.hub;
        let profile = self.profile.unwrap_or(hub.shared.config.schema_profile);
        hub.shared
            .registry
            .get(name)?
            .advertised_input_schema(profile)
            .cloned()
    }

    /// Serves `direct`: the caller's scopes, the
    /// body budget for what the request holds parsed (`cost`), the pools.
    async fn serve(
        &self,
        mut direct: direct::Direct,
        cost: usize,
        mut reservation: Reservation,
        outflow: Option<Arc<Outflow>>,
    ) -> Response<Body> {
        let hub = self.hub;
        if let (Some(caller), Some(name)) = (self.caller, direct.tool())
            && scopes_matter(hub)
            && let Some(refused) = forbidden_call(hub, caller, Some(&direct.id()), name)
        {
            return refused;
        }
        if cost > reservation.bytes() && !reservation.grow(cost - reservation.bytes()) {
            return busy("Too many request bodies in flight; retry shortly");
        }
        hub.shared.stats.mcp_request(direct.method());
        let id = direct.id();
        // A listen stream's place is taken (and the registry watched) before
        // anything is sent: one over the limit is refused at once.
        if direct.listens() {
            match self.mcp.http.listen(&hub.shared.registry, self.key) {
                Ok(listening) => direct.give(listening),
                Err(why) => return busy_answering(why, Some(id)),
            }
        }
        let caller = self.caller.clone();
        let http = &self.mcp.http;
        match http
            .serve_direct(direct, caller, self.key.clone(), self.profile)
            .await
        {
            Ok(response) => answered(response, hub, outflow, Some(reservation)),
            Err(why) => busy_answering(why, Some(id)),
        }
    }
}

/// A message of an MCP session, as the front door hands it over.
struct Session {
    message: session::Message,
    /// A large call's arguments, parsed off the workers.
    arguments: Option<Map<String, Value>>,
    large: bool,
    /// It passed the front door's check (its scopes, its method counted).
    checked: bool,
}

impl Direct<'_> {
    /// Serves a message of an MCP session (`mcp/export/session.rs`): the
    /// caller's scopes and the body budget for what it holds parsed
    /// (`cost`) unless `checked` already, then the sessions.
    async fn serve_session(
        &self,
        sessions: &Arc<session::Sessions>,
        headers: &HeaderMap,
        session: Session,
        cost: usize,
        mut reservation: Reservation,
        outflow: Option<Arc<Outflow>>,
    ) -> Response<Body> {
        let hub = self.hub;
        let Session {
            message,
            arguments,
            large,
            checked,
        } = session;
        if !checked {
            if let (Some(caller), Some(name)) = (self.caller, message.tool())
                && scopes_matter(hub)
                && let Some(refused) = forbidden_call(hub, caller, message.id().as_ref(), name)
            {
                return refused;
            }
            if cost > reservation.bytes() && !reservation.grow(cost - reservation.bytes()) {
                return busy("Too many request bodies in flight; retry shortly");
            }
            if let Some(method) = message.method() {
                hub.shared.stats.mcp_request(method);
            }
        }
        let id = message.id();
        let incoming = Incoming {
            caller: self.caller.clone(),
            key: self.key.clone(),
            profile: self.profile,
            arguments,
            large,
            door: Door::McpHttp,
        };
        match sessions.post(headers, message, incoming).await {
            Ok(response) => answered(response, hub, outflow, Some(reservation)),
            Err(why) => busy_answering(why, id),
        }
    }
}

/// Whether a call's tool must be looked up for its scopes
/// (docs/protocol.md §17.1): the server requires some, or a tool does.
fn scopes_matter(hub: &Hub) -> bool {
    !hub.shared.config.required_scopes.is_empty() || hub.shared.registry.snapshot().scoped()
}

/// A permit to parse one large message (`max(1, cores / 2)` server-wide).
async fn parse_permit(parsers: &Arc<Semaphore>) -> OwnedSemaphorePermit {
    // The semaphore is never closed.
    Arc::clone(parsers)
        .acquire_owned()
        .await
        .expect("the parsers' semaphore is never closed")
}

/// The answer, counted until its client takes it.
fn answered(
    response: Response<Body>,
    hub: &Hub,
    outflow: Option<Arc<Outflow>>,
    request: Option<Reservation>,
) -> Response<Body> {
    let budget = Arc::clone(&hub.answers);
    let shared = Arc::clone(&hub.shared);
    response.map(|body| AnswerBody::new(body, outflow, budget, shared, request).boxed_unsync())
}

/// `405`: `/mcp` takes `POST`, and `GET` and `DELETE` of a session
/// (`allowed`).
fn method_not_allowed(allowed: &'static str) -> Response<Body> {
    let mut response =
        Response::new(Full::new(Bytes::from_static(b"Method Not Allowed")).boxed_unsync());
    *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allowed));
    response
}

/// `415` or `406` as a JSON-RPC error, for a POST that is not JSON or whose
/// client does not take both answers `/mcp` may give.
fn unacceptable(req: &Request<RequestBody>) -> Option<Response<Body>> {
    if plainly_acceptable(req.headers()) {
        return None;
    }
    let json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let essence = v.split(';').next().unwrap_or_default().trim();
            essence.eq_ignore_ascii_case("application/json")
        });
    if !json {
        return Some(rpc_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            &Refusal::new(
                415,
                INVALID_REQUEST,
                "Unsupported media type: Content-Type must be application/json",
            ),
        ));
    }
    let mut accepts = (false, false);
    for range in req
        .headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
    {
        let mut params = range.split(';');
        let essence = params.next().unwrap_or_default().trim();
        let refused = params.any(|p| {
            p.trim()
                .strip_prefix("q=")
                .is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0))
        });
        if refused {
            continue;
        }
        accepts.0 |= essence.eq_ignore_ascii_case("application/json");
        accepts.1 |= essence.eq_ignore_ascii_case("text/event-stream");
    }
    if accepts != (true, true) {
        return Some(rpc_error(
            StatusCode::NOT_ACCEPTABLE,
            &Refusal::new(
                406,
                INVALID_REQUEST,
                "Not acceptable: Accept must list both application/json and text/event-stream",
            ),
        ));
    }
    None
}

/// The headers nearly every client sends, recognised without taking them
/// apart: one `Content-Type: application/json`, and one `Accept` of exactly
/// the two types `/mcp` answers with. Anything else is read in full.
fn plainly_acceptable(headers: &HeaderMap) -> bool {
    let single = |name| {
        let mut values = headers.get_all(name).iter();
        values
            .next()
            .filter(|_| values.next().is_none())
            .map(HeaderValue::as_bytes)
    };
    single(header::CONTENT_TYPE) == Some(b"application/json")
        && matches!(
            single(header::ACCEPT),
            Some(b"application/json, text/event-stream" | b"text/event-stream, application/json")
        )
}

fn status_of(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST)
}

/// A JSON-RPC error response under `status`.
fn rpc_error(status: StatusCode, refusal: &Refusal) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(refusal.body())).boxed_unsync());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// `params.name` of a `tools/call`, read without building the rest.
fn call_name(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Named<'a> {
        #[serde(borrow)]
        params: Option<Name<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Name<'a> {
        #[serde(borrow)]
        name: std::borrow::Cow<'a, str>,
    }
    let named: Named<'_> = serde_json::from_slice(body).ok()?;
    Some(named.params?.name.into_owned())
}

/// `403` with `WWW-Authenticate: Bearer error="insufficient_scope"` for a
/// `tools/call` of tool `name` whose scopes `caller` lacks; `None` when it
/// may.
fn forbidden_call(
    hub: &Hub,
    caller: &Caller,
    id: Option<&Value>,
    name: &str,
) -> Option<Response<Body>> {
    // Refused here, the call is counted here: admission's scopes step.
    let clock = &hub.shared.clock;
    let now = || clock.now();
    let no_id = Value::Null;
    let forbidden = hub.shared.gate(&now).screen(Arrival {
        tool: Some(name),
        call_id: id.unwrap_or(&no_id),
        session: None,
        door: Door::McpHttp,
        meta: None,
        caller: Some(caller),
        received: now(),
        check: Check::Later,
    })?;
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id.cloned().unwrap_or_default(),
        "error": {
            "code": INVALID_REQUEST,
            "message": forbidden.message(),
            "data": forbidden.details(),
        },
    });
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed_unsync());
    *response.status_mut() = StatusCode::FORBIDDEN;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let mut challenge = format!(
        "Bearer error=\"insufficient_scope\", scope=\"{}\"",
        forbidden.missing.join(" ")
    );
    if let Some(url) = &hub.resource_metadata {
        challenge.push_str(&format!(", resource_metadata=\"{url}\""));
    }
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        headers.insert(header::WWW_AUTHENTICATE, value);
    }
    Some(response)
}

/// `Connection: close`: the rest of the request will not be read.
fn closing(mut response: Response<Body>) -> Response<Body> {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// `503` with `Retry-After`.
fn busy(why: &str) -> Response<Body> {
    with_retry_after(rpc_error(
        StatusCode::SERVICE_UNAVAILABLE,
        &Refusal::new(503, SERVER_BUSY, why),
    ))
}

/// `503` with `Retry-After`, answering the request `id` (if it has one).
fn busy_answering(why: String, id: Option<Value>) -> Response<Body> {
    let mut refusal = Refusal::new(503, SERVER_BUSY, why);
    refusal.id = id.unwrap_or_default();
    with_retry_after(rpc_error(StatusCode::SERVICE_UNAVAILABLE, &refusal))
}

/// `Retry-After: 1`.
fn with_retry_after(mut response: Response<Body>) -> Response<Body> {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

fn stopped_response(stopped: Stopped, hub: &Hub, max: usize) -> Response<Body> {
    use std::sync::atomic::Ordering::Relaxed;
    let (status, message) = match stopped {
        Stopped::Timeout => {
            hub.shared.stats.closed_body_timeout.fetch_add(1, Relaxed);
            let timeout = hub.config.body_read_timeout;
            (
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "Request timeout: the body did not arrive in time ({} s in all, and at least 1 KiB/s after the first 10 s)",
                    timeout.as_secs_f64()
                ),
            )
        }
        Stopped::TooLarge => (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "Request too large: one JSON-RPC message of at most {max} bytes (max_message_bytes)"
            ),
        ),
        Stopped::Busy => {
            return closing(busy("Too many request bodies in flight; retry shortly"));
        }
        Stopped::Broken => (
            StatusCode::BAD_REQUEST,
            "The request body could not be read".to_owned(),
        ),
    };
    closing(rpc_error(
        status,
        &Refusal::new(status.as_u16(), INVALID_REQUEST, message),
    ))
}

//! HTTP routing: WebSocket upgrades, SSE and HTTP-streaming sessions, upstream
//! POSTs, `/health`, `/stats`, CORS and authentication (docs/protocol.md §15–§17).

use std::convert::Infallible;
use std::sync::Arc;

use crate::transport::body::RequestBody;
use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::access::{authenticate, caller_key, subject_of, unauthorized};
use super::driver;
use super::guard;
use super::hub::{Crowded, Hub, PeerGuard};
use super::reply::{Body, error_response, full, is_true_header, json_response, not_found};
use super::with_mcp::{self, CORS_EXPOSED_HEADERS, CORS_METHODS, CORS_REQUEST_HEADERS};
use crate::auth::{AuthError, Caller, redact_uri};
use crate::protocol::{Channel, EventType, Outgoing, now_millis};
use crate::session::Session;
use crate::stats::Door;
use crate::transport::frame::{Unit, WriteMeter, Writer};
use crate::transport::queue::frame_queue;
use crate::transport::stream::{self, Framing};
use crate::transport::ws;

/// Routes one request. `over_peer_limit`: the connection is beyond
/// `max_connections_per_peer`, so only `/health` is served; WebSocket upgrades
/// complete and close with 1013, everything else gets `503` (docs/protocol.md §18.1).
pub(crate) async fn route(
    req: Request<RequestBody>,
    hub: Arc<Hub>,
    over_peer_limit: bool,
) -> Result<Response<Body>, Infallible> {
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    tracing::debug!(method = %req.method(), uri = %redact_uri(req.uri()), "request");
    let Some(path) = local_path(&hub.prefix, hub.own_listener, req.uri().path()) else {
        return Ok(not_found());
    };
    // Shutting down: nothing new starts (a host application's router may
    // still hand requests over after haip's handover began).
    if hub.shared.shutdown.is_cancelled() && path != "/health" {
        let mut response = shutting_down(&path);
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return Ok(response);
    }
    // Browsers' rules first, on every route (`guard.rs`).
    if let Err(refusal) = guard::check(
        req.method(),
        &path,
        req.uri(),
        req.headers(),
        &hub.hosts,
        &hub.cors,
    ) {
        tracing::debug!(code = refusal.code(), reason = %refusal.message(), "request refused at the front door");
        return Ok(with_cors(refused(&refusal, &path), &hub, origin.as_deref()));
    }
    let response = dispatch(req, &path, &hub, over_peer_limit).await;
    Ok(with_cors(response, &hub, origin.as_deref()))
}

/// The route of a request the front door let in, by method and `path`.
async fn dispatch(
    req: Request<RequestBody>,
    path: &str,
    hub: &Arc<Hub>,
    over_peer_limit: bool,
) -> Response<Body> {
    match (req.method().clone(), path) {
        (Method::GET, "/health") => {
            let mut health = hub.shared.stats.health();
            health["instance"] = Value::from(&*hub.instance);
            json_response(StatusCode::OK, &health)
        }
        (Method::GET, "/" | "/haip" | "/haip/websocket")
            if over_peer_limit && is_websocket_upgrade(&req) =>
        {
            upgrade(req, hub, true).await
        }
        _ if over_peer_limit => {
            let mut response = error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                "Too many connections from this address",
                "TOO_MANY_SESSIONS",
            );
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            response
        }
        (Method::OPTIONS, _) => preflight(),
        // Public like `/health`: the page holds no data, and every connection
        // it opens is authenticated as any other client's.
        #[cfg(feature = "inspector")]
        (Method::GET, "/inspector") if hub.config.inspector => inspector_page(),
        // Public like `/health`: how to get a token (RFC 9728, docs/protocol.md §17.1).
        (Method::GET, path) if hub.oauth.serves(path) => hub.oauth.metadata(&hub.shared),
        (Method::GET, "/stats") => stats(authenticate(hub, &req).await, hub).await,
        (Method::GET, "/metrics") if hub.config.metrics_addr.on_main_port() => {
            metrics(authenticate(hub, &req).await, hub)
        }
        (Method::GET, "/" | "/haip" | "/haip/websocket") if is_websocket_upgrade(&req) => {
            upgrade(req, hub, false).await
        }
        // Only the paths above speak WebSocket (docs/protocol.md §15.5): an upgrade
        // anywhere else must not open an SSE or HTTP-streaming session.
        _ if is_websocket_upgrade(&req) => not_found(),
        (Method::GET, "/" | "/haip" | "/haip/websocket") => json_response(
            StatusCode::UPGRADE_REQUIRED,
            &json!({"error": "This endpoint speaks HAIP over WebSocket; send a WebSocket upgrade", "code": "UPGRADE_REQUIRED"}),
        ),
        (Method::GET, "/haip/sse") => {
            open_stream(req, hub, Framing::Sse { done_marker: false }).await
        }
        (Method::GET, "/haip/stream") => {
            let framing = if accepts_event_stream(&req) {
                Framing::Sse { done_marker: true }
            } else {
                Framing::Ndjson
            };
            open_stream(req, hub, framing).await
        }
        (Method::POST, "/haip/stream") if !is_upstream_post(&req) => {
            open_stream(req, hub, Framing::Ndjson).await
        }
        (Method::POST, "/haip/sse" | "/haip/message" | "/haip/handshake" | "/haip/stream") => {
            super::upstream::upstream(req, hub).await
        }
        (_, "/mcp") if hub.mcp.is_some() => mcp_endpoint(req, hub).await,
        _ => not_found(),
    }
}

/// `GET /stats`: the server's counters, for a request `authenticated`
/// (when authentication is on).
async fn stats(authenticated: Result<Option<Arc<Caller>>, AuthError>, hub: &Hub) -> Response<Body> {
    if let Err(e) = authenticated {
        return unauthorized(hub, &e);
    }
    let replay_bytes = hub.shared.replay.used();
    let mut stats = hub.shared.stats.stats(replay_bytes);
    stats["instance"] = Value::from(&*hub.instance);
    hub.oauth.stats(&mut stats);
    hub.cluster.stats(&hub.shared, &mut stats).await;
    json_response(StatusCode::OK, &stats)
}

/// `GET /metrics` on the server's own port: the same rule as `/stats`,
/// for a request `authenticated` when authentication is on.
fn metrics(authenticated: Result<Option<Arc<Caller>>, AuthError>, hub: &Hub) -> Response<Body> {
    match authenticated {
        // The series name every tool: only a caller shown them all
        // may read them here (`metrics_addr` serves them apart).
        Ok(caller) if hides_tools_from(hub, caller.as_deref()) => error_response(
            StatusCode::FORBIDDEN,
            "/metrics names every tool, and this token is not allowed to see them all: use a token with every tool's scopes, or serve /metrics on its own port (metrics_addr / HAIP_METRICS_ADDR)",
            "FORBIDDEN",
        ),
        Ok(_) => hub.metrics.response(),
        Err(e) => unauthorized(hub, &e),
    }
}

// `/mcp`, when it is served.
#[cfg(feature = "mcp")]
use super::mcp::endpoint as mcp_endpoint;

/// Without the `mcp` feature, `/mcp` is never served (`hub.mcp` is `None`).
#[cfg(not(feature = "mcp"))]
async fn mcp_endpoint(_req: Request<RequestBody>, _hub: &Arc<Hub>) -> Response<Body> {
    not_found()
}

/// The path a route is chosen by. haip's own listener serves its routes
/// under the prefix (`path_prefix`) and the OAuth metadata's well-known path
/// at the root too; a host application has taken the prefix off already.
fn local_path(prefix: &str, own_listener: bool, path: &str) -> Option<String> {
    if prefix.is_empty() || !own_listener {
        return Some(path.to_owned());
    }
    match path.strip_prefix(prefix) {
        Some("") => Some("/".to_owned()),
        Some(rest) if rest.starts_with('/') => Some(rest.to_owned()),
        _ if path.starts_with("/.well-known/oauth-protected-resource") => Some(path.to_owned()),
        _ => None,
    }
}

/// Whether some tool is hidden from `caller` in lists (its scopes).
fn hides_tools_from(hub: &Hub, caller: Option<&crate::auth::Caller>) -> bool {
    caller.is_some()
        && hub
            .shared
            .registry
            .snapshot()
            .tools()
            .iter()
            .any(|tool| !hub.shared.config.shows(caller, tool))
}

/// What a request the front door refused gets: `{"error", "code"}`, or on
/// `/mcp` a JSON-RPC error (`-32600`), as MCP clients expect.
fn refused(refusal: &guard::Refusal, path: &str) -> Response<Body> {
    if path == "/mcp" {
        let body = json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": crate::protocol::jsonrpc::INVALID_REQUEST, "message": refusal.message()},
        });
        return json_response(refusal.status(), &body);
    }
    error_response(refusal.status(), &refusal.message(), refusal.code())
}

/// `503` for a request that comes once the server is shutting down: on
/// `/mcp` a JSON-RPC error, as MCP clients expect.
fn shutting_down(path: &str) -> Response<Body> {
    const MESSAGE: &str = "The server is shutting down";
    if let Some(response) = with_mcp::shutting_down(path, MESSAGE) {
        return response;
    }
    error_response(StatusCode::SERVICE_UNAVAILABLE, MESSAGE, "SHUTTING_DOWN")
}

/// The inspector's page (feature `inspector`).
#[cfg(feature = "inspector")]
fn inspector_page() -> Response<Body> {
    let mut response = Response::new(full(super::inspector::page()));
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(super::inspector::CONTENT_SECURITY_POLICY),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

fn preflight() -> Response<Body> {
    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = StatusCode::NO_CONTENT;
    let h = response.headers_mut();
    h.insert(
        "access-control-allow-methods",
        HeaderValue::from_static(CORS_METHODS),
    );
    h.insert(
        "access-control-allow-headers",
        HeaderValue::from_static(CORS_REQUEST_HEADERS),
    );
    h.insert("access-control-max-age", HeaderValue::from_static("600"));
    response
}

/// CORS headers for allowed origins only (none are allowed unless configured).
fn with_cors(mut response: Response<Body>, hub: &Hub, origin: Option<&str>) -> Response<Body> {
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        return response;
    }
    if let Some(allowed) = hub
        .cors
        .allow(origin)
        .and_then(|o| HeaderValue::from_str(&o).ok())
    {
        let h = response.headers_mut();
        h.insert("access-control-allow-origin", allowed);
        h.insert(
            "access-control-expose-headers",
            HeaderValue::from_static(CORS_EXPOSED_HEADERS),
        );
        h.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    response
}

// ----- WebSocket ----------------------------------------------------------------

fn header_has_token(req: &Request<RequestBody>, name: header::HeaderName, token: &str) -> bool {
    req.headers()
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

fn is_websocket_upgrade(req: &Request<RequestBody>) -> bool {
    header_has_token(req, header::UPGRADE, "websocket")
        && header_has_token(req, header::CONNECTION, "upgrade")
}

/// The subprotocol to select: `haip` when offered, else the first `token.` entry
/// (browsers fail a handshake that selects none of several offered), else none.
fn select_subprotocol(req: &Request<RequestBody>) -> Option<String> {
    let offered: Vec<&str> = req
        .headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    if offered.contains(&"haip") {
        return Some("haip".to_owned());
    }
    offered
        .iter()
        .find(|p| p.starts_with("token."))
        .map(|p| (*p).to_owned())
}

/// Completes a WebSocket upgrade and runs the session on it; with `refuse`
/// (the peer is over its connection limit) the socket closes with 1013 at once.
async fn upgrade(mut req: Request<RequestBody>, hub: &Arc<Hub>, refuse: bool) -> Response<Body> {
    let version_ok = req
        .headers()
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_some_and(|v| v.as_bytes() == b"13");
    let Some(key) = req
        .headers()
        .get(header::SEC_WEBSOCKET_KEY)
        .filter(|_| version_ok)
    else {
        return error_response(
            StatusCode::BAD_REQUEST,
            "WebSocket upgrade needs Sec-WebSocket-Key and Sec-WebSocket-Version: 13",
            "BAD_REQUEST",
        );
    };
    let accept = ws::accept_key(key.as_bytes());
    let protocol = select_subprotocol(&req);

    // Authentication failures still complete the upgrade, then send one ERROR
    // and close 1008 (docs/protocol.md §17); no session is created or counted.
    let admission = match authenticate(hub, &req).await {
        _ if refuse => Err(Crowded::Server),
        Err(e) => Ok(driver::Admission::Refuse {
            envelope: auth_error_envelope(&e, hub.resource_metadata.as_deref()),
            code: 1008,
            reason: e.message(),
        }),
        // Registered before the response goes out, so `activeConnections`
        // already counts it when the client sees `open` (docs/protocol.md §15.1).
        Ok(caller) => {
            let key = caller_key(hub, &req, caller.as_deref());
            hub.admit(&key).map(|guard| {
                let guard = guard.on(Door::WebSocket);
                let session = Session::new(Arc::clone(&hub.shared), Door::WebSocket, caller);
                driver::Admission::Session(Box::new(session), guard)
            })
        }
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    // The connection stays counted against its peer while the socket lives.
    let counted = req.extensions_mut().remove::<Arc<PeerGuard>>();
    let shared = Arc::clone(&hub.shared);
    let handshake_timeout = hub.config.handshake_timeout;
    hub.tracker.spawn(async move {
        let _counted = counted;
        // A client that never takes the `101` does not hold a session for ever.
        let Ok(upgraded) = tokio::time::timeout(handshake_timeout, on_upgrade).await else {
            tracing::debug!("websocket upgrade not completed in time");
            return;
        };
        match upgraded {
            Ok(upgraded) => match admission {
                Ok(admission) => driver::serve_ws(upgraded, shared, admission).await,
                Err(crowded) => {
                    tracing::debug!(reason = %crowded.message(), "websocket session refused");
                    ws::refuse(
                        upgraded,
                        shared.config.max_message_bytes,
                        None,
                        1013,
                        crowded.close_reason(),
                    )
                    .await
                }
            },
            Err(e) => tracing::debug!(error = %e, "websocket upgrade failed"),
        }
    });

    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = response.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    if let Some(protocol) = protocol.and_then(|p| HeaderValue::from_str(&p).ok()) {
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, protocol);
    }
    response
}

/// The one envelope an unauthenticated WebSocket gets: an `ERROR` on a fresh
/// session id, `seq` 1, no `HAI`.
fn auth_error_envelope(error: &AuthError, resource_metadata: Option<&str>) -> String {
    let session = uuid::Uuid::new_v4().hyphenated().to_string();
    let mut payload = json!({ "code": error.code().as_str(), "message": error.message() });
    // In OAuth mode: where a client finds how to get a token (§17.1).
    if let Some(url) = resource_metadata {
        payload["detail"] = json!({ "resource_metadata": url });
    }
    let text =
        Outgoing::new(Channel::System, EventType::Error, payload).encode(&session, 1, now_millis());
    // Written from `&str`s and a `Value`: always UTF-8.
    String::from_utf8(text).unwrap_or_default()
}

// ----- SSE and HTTP streaming ---------------------------------------------------

fn accepts_event_stream(req: &Request<RequestBody>) -> bool {
    req.headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

fn is_upstream_post(req: &Request<RequestBody>) -> bool {
    is_true_header(req, "x-haip-message") || is_true_header(req, "x-haip-binary")
}

impl Hub {
    /// What a stream connection is told when its client resumes another
    /// session: upstream POSTs naming that session reach `inbound` too, for
    /// as long as the returned callback lives.
    pub(crate) fn stream_alias(
        self: &Arc<Self>,
        subject: Option<String>,
        inbound: mpsc::Sender<Unit>,
    ) -> driver::OnResumed {
        let hub = Arc::clone(self);
        let mut alias = None;
        Box::new(move |id: &str| {
            let entry = hub.sessions.insert(id, subject.clone(), inbound.clone());
            drop(alias.replace(entry));
        })
    }
}

/// Opens an SSE or HTTP-streaming session; for `POST /haip/stream` the request
/// body is read as NDJSON envelopes while the response streams.
async fn open_stream(
    req: Request<RequestBody>,
    hub: &Arc<Hub>,
    framing: Framing,
) -> Response<Body> {
    let caller = match authenticate(hub, &req).await {
        Ok(caller) => caller,
        Err(e) => return unauthorized(hub, &e),
    };
    let subject = subject_of(caller.as_ref());
    let key = caller_key(hub, &req, caller.as_deref());
    let guard = match hub.admit(&key) {
        Ok(guard) => guard,
        Err(crowded) => {
            let mut response = error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &crowded.message(),
                "TOO_MANY_SESSIONS",
            );
            // Sessions end as their clients go: a hint, not a promise.
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            return response;
        }
    };
    // `/haip/sse`, or `/haip/stream` in either framing.
    let door = match framing {
        Framing::Sse { done_marker: false } => Door::Sse,
        _ => Door::Stream,
    };
    let guard = guard.on(door);
    let session = Session::new(Arc::clone(&hub.shared), door, caller);
    let session_id = session.id().to_owned();
    let (inbound_tx, inbound_rx) = mpsc::channel(stream::INBOUND_QUEUE);
    let (frames, frames_rx) = frame_queue();
    let meter = WriteMeter::new(Arc::clone(&hub.shared));
    let out = Writer {
        frames,
        meter: Arc::clone(&meter),
    };
    let entry = hub
        .sessions
        .insert(&session_id, subject.clone(), inbound_tx.clone());

    if req.method() == Method::POST {
        let max_line = hub.shared.config.max_message_bytes;
        let body = req.into_body();
        hub.tracker
            .spawn(stream::read_ndjson(body, max_line, inbound_tx.clone()));
    }
    // After a resumption, upstream POSTs naming the resumed session reach
    // this stream too (the alias lives as long as the stream's driver).
    let on_resumed = hub.stream_alias(subject, inbound_tx);
    let shared = Arc::clone(&hub.shared);
    hub.tracker.spawn(async move {
        let _guards = (guard, entry);
        driver::run_stream(session, inbound_rx, out, &shared, on_resumed).await;
    });

    let body = StreamBody::new(stream::body(frames_rx, framing, meter));
    let mut response = Response::new(BodyExt::boxed_unsync(body));
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(framing.content_type()),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if let Ok(id) = HeaderValue::from_str(&session_id) {
        h.insert("x-haip-session", id);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::local_path;

    #[test]
    fn own_listeners_serve_under_the_prefix_and_nested_services_as_handed() {
        let own = |path| local_path("/agent", true, path);
        assert_eq!(own("/agent/haip").as_deref(), Some("/haip"));
        assert_eq!(own("/agent").as_deref(), Some("/"));
        assert_eq!(own("/agent/").as_deref(), Some("/"));
        assert_eq!(own("/agentx/haip"), None);
        assert_eq!(own("/haip"), None);
        assert_eq!(own("/health"), None);
        assert_eq!(
            own("/.well-known/oauth-protected-resource/agent/mcp").as_deref(),
            Some("/.well-known/oauth-protected-resource/agent/mcp")
        );
        // A host application has taken the prefix off already.
        assert_eq!(
            local_path("/agent", false, "/haip").as_deref(),
            Some("/haip")
        );
        assert_eq!(local_path("", true, "/haip").as_deref(), Some("/haip"));
    }
}

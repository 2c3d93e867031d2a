//! HTTP routing: WebSocket upgrades, `/health`, `/stats`, CORS pre-flight, 404s.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_util::task::TaskTracker;

use crate::session::{Session, Shared, TransportKind};
use crate::transport::ws;

pub(crate) type Body = Full<Bytes>;

/// Routes one request.
pub(crate) async fn route(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    tracker: TaskTracker,
) -> Result<Response<Body>, Infallible> {
    let response = match (req.method(), req.uri().path()) {
        (&Method::OPTIONS, _) => preflight(),
        (&Method::GET, "/health") => json_response(StatusCode::OK, &shared.stats.health()),
        (&Method::GET, "/stats") => json_response(StatusCode::OK, &shared.stats.stats()),
        (&Method::GET, "/" | "/haip" | "/haip/websocket") if is_websocket_upgrade(&req) => {
            upgrade(req, shared, &tracker)
        }
        (&Method::GET, "/" | "/haip" | "/haip/websocket") => json_response(
            StatusCode::UPGRADE_REQUIRED,
            &json!({"error": "This endpoint speaks HAIP over WebSocket; send a WebSocket upgrade", "code": "UPGRADE_REQUIRED"}),
        ),
        _ => not_found(),
    };
    Ok(with_cors(response))
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn not_found() -> Response<Body> {
    json_response(
        StatusCode::NOT_FOUND,
        &json!({"error": "Not found", "code": "NOT_FOUND"}),
    )
}

fn preflight() -> Response<Body> {
    let mut response = Response::new(Body::default());
    *response.status_mut() = StatusCode::NO_CONTENT;
    let h = response.headers_mut();
    h.insert(
        "access-control-allow-methods",
        HeaderValue::from_static("GET, POST, OPTIONS"),
    );
    h.insert(
        "access-control-allow-headers",
        HeaderValue::from_static(
            "Authorization, Content-Type, Cache-Control, X-HAIP-Message, X-HAIP-Binary, X-HAIP-Session",
        ),
    );
    response
}

fn with_cors(mut response: Response<Body>) -> Response<Body> {
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        let h = response.headers_mut();
        h.insert("access-control-allow-origin", HeaderValue::from_static("*"));
        h.insert(
            "access-control-expose-headers",
            HeaderValue::from_static("X-HAIP-Session"),
        );
    }
    response
}

fn header_has_token(req: &Request<Incoming>, name: header::HeaderName, token: &str) -> bool {
    req.headers()
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

fn is_websocket_upgrade(req: &Request<Incoming>) -> bool {
    header_has_token(req, header::UPGRADE, "websocket")
        && header_has_token(req, header::CONNECTION, "upgrade")
}

/// The subprotocol to select: `haip` when offered, else the first `token.` entry
/// (browsers fail a handshake that selects none of several offered), else none.
fn select_subprotocol(req: &Request<Incoming>) -> Option<String> {
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

fn upgrade(
    mut req: Request<Incoming>,
    shared: Arc<Shared>,
    tracker: &TaskTracker,
) -> Response<Body> {
    let version_ok = req
        .headers()
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_some_and(|v| v.as_bytes() == b"13");
    let Some(key) = req
        .headers()
        .get(header::SEC_WEBSOCKET_KEY)
        .filter(|_| version_ok)
    else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": "WebSocket upgrade needs Sec-WebSocket-Key and Sec-WebSocket-Version: 13", "code": "BAD_REQUEST"}),
        );
    };
    let accept = derive_accept_key(key.as_bytes());
    let protocol = select_subprotocol(&req);

    // Register the session before the response goes out, so `activeConnections`
    // already counts it when the client sees `open` (HAIP.md §15.1).
    let admitted =
        shared.stats.active_connections.fetch_add(1, Relaxed) < shared.config.max_sessions as u64;
    let session = if admitted {
        shared.stats.total_connections.fetch_add(1, Relaxed);
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        Some((
            Session::new(Arc::clone(&shared), TransportKind::WebSocket, events_tx),
            events_rx,
        ))
    } else {
        shared.stats.active_connections.fetch_sub(1, Relaxed);
        None
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    tracker.spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => ws::serve(upgraded, shared, session).await,
            Err(e) => {
                tracing::debug!(error = %e, "websocket upgrade failed");
                if session.is_some() {
                    drop(session);
                    shared.stats.active_connections.fetch_sub(1, Relaxed);
                }
            }
        }
    });

    let mut response = Response::new(Body::default());
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

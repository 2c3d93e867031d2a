//! Who is calling: authenticating a request, and the `401` that refuses one
//! (docs/protocol.md §17).

use std::sync::Arc;

use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};

use super::hub::Hub;
use super::reply::{Body, error_response};
use crate::auth::{AuthError, AuthErrorKind, Caller, token_from_parts};
use crate::context::share::CallerKey;

/// The verified caller (`None` when authentication is off). What the
/// request holds is read before the returned future is, which borrows only
/// the hub: a request body need not be `Sync` (axum's is not).
pub(super) fn authenticate<'h, B>(
    hub: &'h Hub,
    req: &Request<B>,
) -> impl Future<Output = Result<Option<Arc<Caller>>, AuthError>> + Send + use<'h, B> {
    let token = hub
        .auth
        .as_ref()
        .and_then(|_| token_from_parts(req.headers(), req.uri()));
    let peer = req.extensions().get::<PeerAddr>().map(|p| p.0);
    async move {
        let Some(auth) = &hub.auth else {
            return Ok(None);
        };
        // OAuth counts what a token it does not know yet costs against the
        // request's peer, which the `Authenticator` trait does not carry.
        let identified = hub
            .oauth
            .identify(auth.as_ref(), token.as_deref(), peer)
            .await;
        match identified {
            Ok(caller) => Ok(Some(Arc::new(caller))),
            Err(e) => {
                tracing::debug!(reason = e.reason(), code = %e.code(), "authentication failed");
                Err(e)
            }
        }
    }
}

/// The address of the peer a request came from: put it in a request's
/// extensions when a host application serves [`HaipService`](crate::HaipService), so that an
/// unauthenticated caller is counted by its address in the server's
/// per-caller shares (`max_sessions_per_caller`) and OAuth's introspection
/// budgets, as it is when haip accepts the connection itself.
///
/// Without it, every unauthenticated caller the host hands over is counted
/// as one caller. With axum, take it from `ConnectInfo`:
///
/// ```
/// # use std::net::SocketAddr;
/// // In a layer in front of the service:
/// fn tag<B>(mut req: http::Request<B>, peer: SocketAddr) -> http::Request<B> {
///     req.extensions_mut().insert(haip::PeerAddr(peer.ip()));
///     req
/// }
/// # let _ = tag::<()>;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub std::net::IpAddr);

/// Who the server's shared pools count `req` against: `caller`'s subject
/// when authenticated, else the request's peer address (`context/share.rs`).
pub(crate) fn caller_key<B>(hub: &Hub, req: &Request<B>, caller: Option<&Caller>) -> CallerKey {
    let peer = req.extensions().get::<PeerAddr>().map(|p| p.0);
    // Only a host application hands over requests without their peer.
    if peer.is_none() && caller.is_none() && !hub.own_listener {
        return CallerKey::Unknown;
    }
    CallerKey::of(caller, peer, hub.config.limit_loopback_peers)
}

/// The subject of a verified caller.
pub(super) fn subject_of(caller: Option<&Arc<Caller>>) -> Option<String> {
    caller.map(|c| c.subject().to_owned())
}

/// `401` with `WWW-Authenticate: Bearer` (docs/protocol.md §17), naming the protected
/// resource metadata in OAuth mode (§17.1).
pub(super) fn unauthorized(hub: &Hub, error: &AuthError) -> Response<Body> {
    let mut response = error_response(
        StatusCode::UNAUTHORIZED,
        error.message(),
        error.code().as_str(),
    );
    let mut challenge = String::from("Bearer");
    let mut params = Vec::new();
    if !matches!(error.kind(), AuthErrorKind::MissingToken) {
        params.push("error=\"invalid_token\"".to_owned());
    }
    if let Some(url) = &hub.resource_metadata {
        params.push(format!("resource_metadata=\"{url}\""));
    }
    if !params.is_empty() {
        challenge.push(' ');
        challenge.push_str(&params.join(", "));
    }
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

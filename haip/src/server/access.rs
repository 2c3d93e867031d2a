//! Who is calling: authenticating a request, and the `401` that refuses one
//! (HAIP.md §17).

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};

use super::hub::Hub;
use super::reply::{Body, error_response};
use crate::auth::{AuthError, AuthErrorKind, Caller, token_from_parts};
use crate::context::share::CallerKey;

/// The verified caller (`None` when authentication is off).
pub(super) async fn authenticate(
    hub: &Hub,
    req: &Request<Incoming>,
) -> Result<Option<Arc<Caller>>, AuthError> {
    let Some(auth) = &hub.auth else {
        return Ok(None);
    };
    let token = token_from_parts(req.headers(), req.uri());
    // OAuth counts what a token it does not know yet costs against the
    // request's peer, which the `Authenticator` trait does not carry.
    #[cfg(feature = "oauth")]
    let identified = match &hub.oauth {
        Some(oauth) => {
            let peer = req.extensions().get::<PeerAddr>().map(|p| p.0);
            oauth.identify_from(token.as_deref(), peer).await
        }
        None => auth.identify(token.as_deref()).await,
    };
    #[cfg(not(feature = "oauth"))]
    let identified = auth.identify(token.as_deref()).await;
    match identified {
        Ok(caller) => Ok(Some(Arc::new(caller))),
        Err(e) => {
            tracing::debug!(reason = e.reason(), code = %e.code(), "authentication failed");
            Err(e)
        }
    }
}

/// The address of the peer a request came from (set by the accept loop).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerAddr(pub(crate) std::net::IpAddr);

/// Who the server's shared pools count `req` against: `caller`'s subject
/// when authenticated, else the request's peer address (`context/share.rs`).
pub(crate) fn caller_key<B>(hub: &Hub, req: &Request<B>, caller: Option<&Caller>) -> CallerKey {
    let peer = req.extensions().get::<PeerAddr>().map(|p| p.0);
    CallerKey::of(caller, peer, hub.config.limit_loopback_peers)
}

/// The subject of a verified caller.
pub(super) fn subject_of(caller: Option<&Arc<Caller>>) -> Option<String> {
    caller.map(|c| c.subject().to_owned())
}

/// `401` with `WWW-Authenticate: Bearer` (HAIP.md §17), naming the protected
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

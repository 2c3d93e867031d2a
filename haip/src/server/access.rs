//! Who is calling: authenticating a request, and the `401` that refuses one
//! (HAIP.md §17).

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};

use super::hub::Hub;
use super::reply::{Body, error_response};
use crate::auth::{AuthError, AuthErrorKind, Caller, token_from_parts};

/// The verified caller (`None` when authentication is off).
pub(super) async fn authenticate(
    hub: &Hub,
    req: &Request<Incoming>,
) -> Result<Option<Arc<Caller>>, AuthError> {
    let Some(auth) = &hub.auth else {
        return Ok(None);
    };
    let token = token_from_parts(req.headers(), req.uri());
    match auth.identify(token.as_deref()).await {
        Ok(caller) => Ok(Some(Arc::new(caller))),
        Err(e) => {
            tracing::debug!(reason = e.reason(), code = %e.code(), "authentication failed");
            Err(e)
        }
    }
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

//! What every route answers with: the response body, JSON and error replies,
//! and reading a yes-or-no request header.

use std::convert::Infallible;

use crate::transport::body::RequestBody;
use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};

/// The body of every response.
pub(crate) type Body = UnsyncBoxBody<Bytes, Infallible>;

/// A whole body of `bytes`.
pub(super) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

/// `body` as JSON with `status`.
pub(super) fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(full(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// `{"error", "code"}` with `status`.
pub(super) fn error_response(status: StatusCode, error: &str, code: &str) -> Response<Body> {
    json_response(status, &json!({ "error": error, "code": code }))
}

/// `404`.
pub(super) fn not_found() -> Response<Body> {
    error_response(StatusCode::NOT_FOUND, "Not found", "NOT_FOUND")
}

/// Whether header `name` says `true` (any case).
pub(super) fn is_true_header(req: &Request<RequestBody>, name: &str) -> bool {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

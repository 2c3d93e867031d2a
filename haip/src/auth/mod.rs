//! Authentication (docs/protocol.md §17).
//!
//! Authentication is off by default: tokens are ignored and every client shares
//! one anonymous subject. It is turned on by configuring one verification key,
//! which is what [`Jwt`] holds (feature `jwt`): an HS256 secret, or an RS256
//! or ES256 public key. Once on, every transport connection, every upstream POST and `/stats`
//! present a token, which must verify; `/health` never needs one.
//!
//! ```
//! # #[cfg(feature = "jwt")] {
//! use haip::auth::Jwt;
//!
//! let jwt = Jwt::hs256("a-long-random-secret-of-32-bytes-or-more")?
//!     .issuer("https://auth.example.com")
//!     .audience("haip");
//! assert_eq!(jwt.algorithm_name(), "HS256");
//! # }
//! # Ok::<(), haip::Error>(())
//! ```
//!
//! Other schemes (API keys, sessions, ...) implement [`Authenticator`]; a
//! failure is an [`AuthError`], whose [`code`](AuthError::code) and
//! [`message`](AuthError::message) are what the client sees.

// `Jwt` is named above; built without `jwt`, the name is shown as plain
// text rather than warned about.
#![cfg_attr(not(feature = "jwt"), allow(rustdoc::broken_intra_doc_links))]

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use crate::protocol::ErrorCode;

#[cfg(feature = "jwt")]
mod jwt;
#[cfg(feature = "oauth")]
mod oauth;
mod source;

pub use crate::context::Caller;
#[cfg(feature = "jwt")]
#[cfg_attr(docsrs, doc(cfg(feature = "jwt")))]
pub use jwt::Jwt;
#[cfg(feature = "oauth")]
pub use oauth::OAuth;
// Used by the server's HTTP and WebSocket front ends.
pub(crate) use source::{query_param, redact_uri, token_from_parts};

/// Who a verified request belongs to.
///
/// A session belongs to the subject that opened it; upstream POSTs and
/// resumption must present the same subject (docs/protocol.md §17).
pub type Subject = String;

/// The future an [`Authenticator`] returns.
pub type AuthFuture<'a> = Pin<Box<dyn Future<Output = Result<Subject, AuthError>> + Send + 'a>>;

/// The future [`Authenticator::identify`] returns.
pub type IdentifyFuture<'a> = Pin<Box<dyn Future<Output = Result<Caller, AuthError>> + Send + 'a>>;

/// A pluggable check: users bring their own (API keys, sessions, ...).
///
/// [`Jwt`] is the implementation docs/protocol.md §17 describes. Another scheme
/// implements this trait and answers with the request's [`Subject`], or with
/// an [`AuthError`] saying why the request is refused.
///
/// ```
/// use haip::auth::{AuthError, AuthFuture, Authenticator};
///
/// /// API keys, each belonging to one subject.
/// struct ApiKeys(Vec<(String, String)>);
///
/// impl Authenticator for ApiKeys {
///     fn authenticate<'a>(&'a self, token: Option<&'a str>) -> AuthFuture<'a> {
///         Box::pin(async move {
///             let token = token.ok_or_else(AuthError::missing_token)?;
///             self.0
///                 .iter()
///                 .find(|(key, _)| key == token)
///                 .map(|(_, subject)| subject.clone())
///                 .ok_or_else(|| AuthError::invalid_token("unknown API key"))
///         })
///     }
/// }
///
/// let keys = ApiKeys(vec![("k-123".into(), "alice".into())]);
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// assert_eq!(keys.authenticate(Some("k-123")).await.unwrap(), "alice");
/// assert_eq!(keys.authenticate(None).await.unwrap_err(), AuthError::missing_token());
/// # });
/// ```
pub trait Authenticator: Send + Sync + 'static {
    /// Verifies the token presented with a connection or request (`None` when
    /// none was presented).
    ///
    /// The token comes from the first present source of docs/protocol.md §17:
    /// `Authorization: Bearer <token>`, the query parameter `token`, or a
    /// `Sec-WebSocket-Protocol` entry `token.<token>`.
    fn authenticate<'a>(&'a self, token: Option<&'a str>) -> AuthFuture<'a>;

    /// Verifies the token as [`authenticate`](Self::authenticate) does, and
    /// answers with the whole [`Caller`]: its subject, the scopes its token
    /// grants and its claims. This is what the server calls.
    ///
    /// The default answers with the subject alone (no scopes, no claims):
    /// override it when the scheme knows more. A caller without a scope a
    /// tool requires (`#[haip_tool(scopes = [..])]`) may not call it.
    fn identify<'a>(&'a self, token: Option<&'a str>) -> IdentifyFuture<'a> {
        Box::pin(async move { self.authenticate(token).await.map(Caller::new) })
    }
}

/// Why a request was not authenticated.
///
/// The client sees only the [`code`](AuthError::code) and the fixed
/// [`message`](AuthError::message); the [`reason`](AuthError::reason) is for
/// the server's logs.
///
/// ```
/// use haip::auth::{AuthError, AuthErrorKind};
/// use haip::protocol::ErrorCode;
///
/// let err = AuthError::invalid_token("signature does not verify");
/// assert_eq!(err.kind(), AuthErrorKind::InvalidToken);
/// assert_eq!(err.code(), ErrorCode::INVALID_TOKEN);
/// assert_eq!(err.message(), "Invalid token");
/// assert_eq!(err.reason(), "signature does not verify");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthError {
    kind: AuthErrorKind,
    reason: String,
}

/// The kind of an [`AuthError`], one per error code of docs/protocol.md §17.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthErrorKind {
    /// No token was presented (`MISSING_TOKEN`).
    MissingToken,
    /// The token failed verification (`INVALID_TOKEN`).
    InvalidToken,
    /// The token is past its expiry, leeway included (`TOKEN_EXPIRED`).
    TokenExpired,
}

impl AuthError {
    /// No token was presented.
    pub fn missing_token() -> Self {
        AuthError {
            kind: AuthErrorKind::MissingToken,
            reason: "no token presented".to_owned(),
        }
    }

    /// The token failed verification; `reason` says why (for logs only).
    pub fn invalid_token(reason: impl Into<String>) -> Self {
        AuthError {
            kind: AuthErrorKind::InvalidToken,
            reason: reason.into(),
        }
    }

    /// The token is past its expiry.
    pub fn token_expired() -> Self {
        Self::token_expired_because("the token is past its expiry")
    }

    pub(crate) fn token_expired_because(reason: impl Into<String>) -> Self {
        AuthError {
            kind: AuthErrorKind::TokenExpired,
            reason: reason.into(),
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> AuthErrorKind {
        self.kind
    }

    /// The code sent to the client: `MISSING_TOKEN`, `INVALID_TOKEN` or
    /// `TOKEN_EXPIRED`.
    pub fn code(&self) -> ErrorCode {
        match self.kind {
            AuthErrorKind::MissingToken => ErrorCode::MISSING_TOKEN,
            AuthErrorKind::InvalidToken => ErrorCode::INVALID_TOKEN,
            AuthErrorKind::TokenExpired => ErrorCode::TOKEN_EXPIRED,
        }
    }

    /// The message sent to the client: `"Missing token"`, `"Invalid token"` or
    /// `"Token expired"` (docs/protocol.md §17).
    pub fn message(&self) -> &'static str {
        match self.kind {
            AuthErrorKind::MissingToken => "Missing token",
            AuthErrorKind::InvalidToken => "Invalid token",
            AuthErrorKind::TokenExpired => "Token expired",
        }
    }

    /// Why, in detail: for the server's logs, never sent to the client.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())?;
        if !self.reason.is_empty() {
            write!(f, ": {}", self.reason)?;
        }
        Ok(())
    }
}

impl std::error::Error for AuthError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_messages_are_the_wire_ones() {
        let cases = [
            (
                AuthError::missing_token(),
                AuthErrorKind::MissingToken,
                "MISSING_TOKEN",
                "Missing token",
            ),
            (
                AuthError::invalid_token("bad"),
                AuthErrorKind::InvalidToken,
                "INVALID_TOKEN",
                "Invalid token",
            ),
            (
                AuthError::token_expired(),
                AuthErrorKind::TokenExpired,
                "TOKEN_EXPIRED",
                "Token expired",
            ),
        ];
        for (err, kind, code, message) in cases {
            assert_eq!(err.kind(), kind);
            assert_eq!(err.code().as_str(), code);
            assert_eq!(err.message(), message);
            assert!(!err.reason().is_empty());
        }
    }

    #[test]
    fn display_has_the_message_then_the_reason() {
        let err = AuthError::invalid_token("signature does not verify");
        assert_eq!(err.to_string(), "Invalid token: signature does not verify");
        assert_eq!(AuthError::invalid_token("").to_string(), "Invalid token");
        let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(err);
        assert!(boxed.to_string().starts_with("Invalid token"));
    }
}

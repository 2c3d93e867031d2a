//! An OAuth 2.1 resource server (docs/protocol.md §17.1; feature `oauth`).
//!
//! The authorization server (the issuer) is found through its metadata
//! (RFC 8414, else OpenID discovery), its signing keys through its JWKS,
//! cached and refetched at once when a token names a key the cache lacks,
//! within a budget of refetches per minute (a token bucket). Opaque tokens
//! are checked by token introspection (RFC 7662) when it is configured,
//! each answer cached until the token expires (a refusal: briefly).
//!
//! Introspecting a token nobody has shown before costs a request to the
//! issuer, so what unknown tokens may cost is bounded (`Gate`): each peer
//! may have only a few introspected at once and a minute's budget of them;
//! the requests to the issuer run a few at a time behind a bounded FIFO
//! queue; what finds no room is refused at once, never queued. A token
//! already known never meets any of it.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use reqwest::Url;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::jwt::check_times;
use super::{AuthError, AuthFuture, Authenticator, Caller, IdentifyFuture};
use crate::Error;
use crate::context::share::CallerKey;

/// The longest token looked at; a longer one is refused unread.
const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// The largest metadata, JWKS or introspection answer read from the issuer.
const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;
/// How long an inactive or refused introspection answer is remembered.
const NEGATIVE_TTL: Duration = Duration::from_secs(30);
/// How long an active introspection answer without `exp` is remembered.
const UNDATED_TTL: Duration = Duration::from_secs(300);
/// How many JWKS refetches tokens naming unknown keys may cause in a
/// minute, by default ([`OAuth::jwks_refetches_per_minute`]).
const JWKS_REFETCHES_PER_MINUTE: u32 = 10;
/// The window of a peer's introspection budget
/// ([`OAuth::introspections_per_peer`]'s `per_minute`).
const BUDGET_WINDOW: Duration = Duration::from_secs(60);
/// How many peers' introspection budgets are kept before idle ones are
/// forgotten (each then starts afresh).
const MAX_BUDGETED_PEERS: usize = 10_000;

/// An OAuth 2.1 resource server: tokens issued for this server by an
/// authorization server (RFC 9728, RFC 8707), checked against the issuer's
/// published keys.
///
/// Turned on with [`ServerBuilder::oauth`](crate::ServerBuilder::oauth) or
/// the environment (`HAIP_OAUTH_ISSUER`, `HAIP_OAUTH_RESOURCE`,
/// `HAIP_OAUTH_AUDIENCE`). The server then
///
/// - serves its protected resource metadata at
///   `/.well-known/oauth-protected-resource` and
///   `/.well-known/oauth-protected-resource/mcp` (RFC 9728): the
///   [resource](OAuth::resource), the issuer, every scope its tools require;
/// - answers a request without a valid token `401` with
///   `WWW-Authenticate: Bearer resource_metadata="…"`, so an MCP host finds
///   the authorization server by itself;
/// - finds the issuer's keys through its metadata (RFC 8414
///   `/.well-known/oauth-authorization-server`, else OpenID discovery),
///   caches them, fetches them again at once when a token names a key it
///   does not know (a key just rotated in passes on its first token), within
///   a budget of [refetches per minute](OAuth::jwks_refetches_per_minute)
///   (10 by default, whatever arrives; requests naming unknown keys while a
///   fetch is under way share it), and keeps serving with the keys it has
///   while the issuer cannot be reached;
/// - accepts a JWT when its `alg` is that of the issuer's key named by
///   `kid` (never a symmetric one), its signature verifies, `iss` is the
///   issuer, `aud` names the resource (or another
///   [audience](OAuth::audience)), and `exp` / `nbf` hold (60 s leeway);
/// - reads the caller's scopes from `scope` (space-separated) or `scp`, and
///   its subject from `sub` (else `client_id`);
/// - with [introspection](OAuth::introspection), checks tokens that are not
///   JWTs at the issuer (RFC 7662), remembering each answer until the token
///   expires, a refusal for 30 s (at most
///   [`max_cached_tokens`](OAuth::max_cached_tokens) of each); a token
///   already known is answered from memory, at once;
/// - bounds what tokens it does not know yet may cost: one peer (its
///   address; an IPv6 peer, its /64) may have at most a few introspected at
///   once and a budget of them per minute
///   ([`introspections_per_peer`](OAuth::introspections_per_peer)); the
///   requests to the issuer run a few at a time behind a short FIFO queue
///   ([`introspection_queue`](OAuth::introspection_queue)). A token that
///   finds no room is refused at once (`401 invalid_token`) without the
///   issuer being asked, so a flood of made-up tokens neither reaches the
///   issuer nor delays anyone else's; the same token shown by several
///   requests at once is introspected once.
///
/// The issuer and everything its metadata points to are fetched over
/// `https`, or `http` on a loopback address only (tests, development).
///
/// ```
/// use haip::auth::OAuth;
///
/// let oauth = OAuth::issuer("https://idp.example.com")
///     .resource("https://tools.example.com/mcp");
/// assert_eq!(
///     oauth.metadata_url().as_deref(),
///     Some("https://tools.example.com/.well-known/oauth-protected-resource/mcp")
/// );
/// ```
#[derive(Clone)]
pub struct OAuth {
    inner: Arc<Inner>,
}

struct Inner {
    issuer: String,
    resource: OnceLock<String>,
    audiences: Vec<String>,
    introspection: Option<(String, String)>,
    /// The JWKS refetch budget: at most this many a minute, refilled
    /// evenly, at most this many saved up.
    refetches_per_minute: u32,
    key_lifetime: Duration,
    fetch_timeout: Duration,
    max_cached_tokens: usize,
    client: OnceLock<reqwest::Client>,
    keys: Mutex<Keys>,
    /// One fetch of the issuer's documents at a time.
    fetching: tokio::sync::Mutex<()>,
    /// Who may have a token introspected now.
    gate: Gate,
    /// Active tokens the issuer vouched for.
    tokens: Mutex<TokenCache>,
    /// Tokens refused, remembered briefly.
    refused: Mutex<TokenCache>,
    /// Introspections under way, by token digest: a request for a token
    /// already being introspected waits for that answer.
    flights: Mutex<HashMap<[u8; 32], Flight>>,
    jwks_fetches: AtomicU64,
    introspections: AtomicU64,
}

impl Inner {
    /// Settings, with nothing fetched, cached or counted yet.
    fn fresh(
        issuer: String,
        resource: OnceLock<String>,
        audiences: Vec<String>,
        introspection: Option<(String, String)>,
        refetches_per_minute: u32,
        max_cached_tokens: usize,
        limits: Limits,
    ) -> Inner {
        Inner {
            issuer,
            resource,
            audiences,
            introspection,
            refetches_per_minute,
            key_lifetime: Duration::from_secs(3600),
            fetch_timeout: Duration::from_secs(5),
            max_cached_tokens,
            client: OnceLock::new(),
            keys: Mutex::new(Keys::default()),
            fetching: tokio::sync::Mutex::new(()),
            gate: Gate::new(limits),
            tokens: Mutex::new(TokenCache::default()),
            refused: Mutex::new(TokenCache::default()),
            flights: Mutex::new(HashMap::new()),
            jwks_fetches: AtomicU64::new(0),
            introspections: AtomicU64::new(0),
        }
    }
}

/// What is known of the issuer.
#[derive(Default)]
struct Keys {
    jwks_uri: Option<Url>,
    introspection_endpoint: Option<Url>,
    by_kid: HashMap<String, Arc<Key>>,
    /// Keys without a `kid`.
    unnamed: Vec<Arc<Key>>,
    /// When the keys were last fetched.
    fetched: Option<Instant>,
    /// When a fetch was last tried.
    attempted: Option<Instant>,
    /// What fetches may still be tried (the rate limit).
    budget: Budget,
    /// Bumped by every fetch that succeeds.
    generation: u64,
    /// Bumped by every fetch tried.
    attempts: u64,
}

impl Keys {
    /// Which fetches have been and gone, as a request that found no key
    /// saw them.
    fn seen(&self) -> Seen {
        Seen {
            generation: self.generation,
            attempts: self.attempts,
        }
    }
}

/// [`Keys::seen`]: a refresh asked for after a fetch that has since ended
/// takes that fetch's outcome instead of fetching again.
#[derive(Clone, Copy)]
struct Seen {
    generation: u64,
    attempts: u64,
}

/// A token bucket of JWKS refetches (as node's jwks-rsa limits them): it
/// holds at most `per_minute`, starts full, and gains `per_minute` evenly
/// over a minute; each fetch takes one.
#[derive(Default)]
struct Budget {
    tokens: f64,
    /// When `tokens` was last brought up to date; none: full.
    at: Option<Instant>,
}

impl Budget {
    /// Takes one fetch from the bucket, if it holds one at `now`.
    fn take(&mut self, per_minute: u32, now: Instant) -> bool {
        let capacity = f64::from(per_minute.max(1));
        self.tokens = match self.at {
            None => capacity,
            Some(at) => {
                let gained = now.saturating_duration_since(at).as_secs_f64() * capacity / 60.0;
                (self.tokens + gained).min(capacity)
            }
        };
        self.at = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// One verification key of the issuer's JWKS.
struct Key {
    key: DecodingKey,
    /// The algorithms it verifies: the JWK's `alg`, else every one its type
    /// allows.
    algorithms: Vec<Algorithm>,
}

impl OAuth {
    /// A resource server for tokens of `issuer` (its issuer identifier, as
    /// its metadata and its tokens' `iss` say it: `https://idp.example.com`).
    pub fn issuer(issuer: impl Into<String>) -> OAuth {
        OAuth {
            inner: Arc::new(Inner::fresh(
                issuer.into(),
                OnceLock::new(),
                Vec::new(),
                None,
                JWKS_REFETCHES_PER_MINUTE,
                10_000,
                Limits::default(),
            )),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut Inner)) -> OAuth {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => f(inner),
            None => {
                // Cloned before configuration ended: configure a copy (with
                // nothing fetched yet).
                let old = &self.inner;
                let mut copy = Inner::fresh(
                    old.issuer.clone(),
                    old.resource.clone(),
                    old.audiences.clone(),
                    old.introspection.clone(),
                    old.refetches_per_minute,
                    old.max_cached_tokens,
                    old.gate.limits,
                );
                f(&mut copy);
                self.inner = Arc::new(copy);
            }
        }
        self
    }

    /// This server's resource identifier (RFC 8707): the URL clients reach
    /// its MCP endpoint at, `https://tools.example.com/mcp`. Tokens must name
    /// it in `aud`. Without it, a server on a loopback address takes
    /// `http://<its address>/mcp`; any other must be told.
    pub fn resource(self, resource: impl Into<String>) -> OAuth {
        let resource = resource.into();
        self.edit(|inner| {
            inner.resource = OnceLock::from(resource);
        })
    }

    /// Accepts tokens whose `aud` names `audience` too (an identity provider
    /// that sets its own audience names, beside the resource).
    pub fn audience(self, audience: impl Into<String>) -> OAuth {
        let audience = audience.into();
        self.edit(|inner| inner.audiences.push(audience))
    }

    /// Checks tokens that are not JWTs at the issuer's introspection
    /// endpoint (RFC 7662), as the client `client_id` with `client_secret`
    /// (HTTP Basic). Each answer is remembered until the token expires.
    pub fn introspection(
        self,
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
    ) -> OAuth {
        let credentials = (client_id.into(), client_secret.into());
        self.edit(|inner| inner.introspection = Some(credentials))
    }

    /// How many times a minute tokens naming keys the server does not hold
    /// may have it fetch the issuer's keys again (default 10, at least 1).
    ///
    /// A token whose `kid` is unknown (the issuer rotated its keys and
    /// signs with the new one at once) has the keys fetched again at once,
    /// and passes on that first request. What such tokens may cost is a
    /// token bucket, as node's jwks-rsa bounds it: it holds `per_minute`
    /// fetches, starts full and refills evenly (one every `60 s /
    /// per_minute`); a token that finds it empty is refused (`401
    /// invalid_token`) without the issuer being asked. Requests naming
    /// unknown keys while a fetch is under way wait for it and share it,
    /// so a flood of made-up `kid`s costs the issuer at most `per_minute`
    /// fetches a minute (plus the bucket's first `per_minute`), and a key
    /// rotated in during such a flood waits at most `60 s / per_minute`.
    /// A failed fetch is spent too: an issuer that is down is tried at most
    /// that often, and the keys held go on serving meanwhile.
    pub fn jwks_refetches_per_minute(self, per_minute: u32) -> OAuth {
        self.edit(|inner| inner.refetches_per_minute = per_minute.max(1))
    }

    /// Formerly the least time between two fetches of the issuer's keys
    /// caused by tokens naming unknown keys, which left a token of a key
    /// rotated in within that time refused until it passed.
    ///
    /// Now read as a budget of the same average rate:
    /// [`jwks_refetches_per_minute`](OAuth::jwks_refetches_per_minute) of
    /// `60 s / interval`, rounded up (30 s: 2 a minute; 100 ms: 600), the
    /// first of which is taken at once.
    #[deprecated(
        note = "use `jwks_refetches_per_minute`: unknown keys are now fetched at once, within \
                a per-minute budget; the interval is read as `60 s / interval` a minute"
    )]
    pub fn jwks_refresh_interval(self, interval: Duration) -> OAuth {
        let per_minute = (60.0 / interval.as_secs_f64()).ceil();
        // `as` saturates: a zero interval (infinite) is u32::MAX a minute.
        self.jwks_refetches_per_minute(per_minute as u32)
    }

    /// How many introspection answers are remembered at most (default
    /// 10 000): that many active tokens, and that many refusals besides (a
    /// refusal is remembered 30 s; refusals never push out active tokens).
    pub fn max_cached_tokens(self, max: usize) -> OAuth {
        self.edit(|inner| inner.max_cached_tokens = max.max(1))
    }

    /// What tokens this server does not know yet may cost one peer (its
    /// address; an IPv6 peer is its /64): at most `at_once` of them being
    /// introspected (or waiting to be) at once (default 4), and at most
    /// `per_minute` introspections started in any minute, as a budget that
    /// refills evenly (default 60). Beyond either, a request with a token
    /// not known yet is refused at once with `401 invalid_token`, and the
    /// issuer is not asked. Tokens already known (answered from memory) and
    /// JWTs are never counted; a token several requests show at once counts
    /// once. Each is at least 1.
    ///
    /// Loopback peers are counted too: behind a reverse proxy on the same
    /// host every client is one peer, whose budget must then be that of all
    /// of them together.
    pub fn introspections_per_peer(self, at_once: usize, per_minute: u32) -> OAuth {
        self.edit(|inner| {
            let mut limits = inner.gate.limits;
            limits.per_peer_at_once = at_once.max(1);
            limits.per_peer_per_minute = per_minute.max(1);
            inner.gate = Gate::new(limits);
        })
    }

    /// How many introspection requests go to the issuer at once, all peers
    /// together (default 8), and how many more may wait their turn, in the
    /// order they came (default 32). A token that finds the queue full is
    /// refused at once with `401 invalid_token`, and the issuer is not
    /// asked. As no peer holds more than its
    /// [`at_once`](OAuth::introspections_per_peer) of them, one peer alone
    /// cannot fill the queue. `at_once` is at least 1.
    pub fn introspection_queue(self, at_once: usize, waiting: usize) -> OAuth {
        self.edit(|inner| {
            let mut limits = inner.gate.limits;
            limits.at_once = at_once.max(1);
            limits.waiting = waiting;
            inner.gate = Gate::new(limits);
        })
    }

    /// The issuer tokens must come from.
    pub fn issuer_url(&self) -> &str {
        &self.inner.issuer
    }

    /// The resource tokens must be meant for, once known (configured, or
    /// taken from the server's address when it starts).
    pub fn resource_url(&self) -> Option<&str> {
        self.inner.resource.get().map(String::as_str)
    }

    /// Where this server's protected resource metadata is (RFC 9728: the
    /// well-known path put between the resource's host and its path), once
    /// the resource is known.
    pub fn metadata_url(&self) -> Option<String> {
        let resource = Url::parse(self.resource_url()?).ok()?;
        let path = resource.path().trim_end_matches('/');
        let mut url = resource.clone();
        url.set_path(&format!("/.well-known/oauth-protected-resource{path}"));
        url.set_query(None);
        url.set_fragment(None);
        Some(url.to_string())
    }

    /// What `/stats` shows of it: the issuer, the keys it holds, how often
    /// they were fetched, tokens introspected (and being introspected, and
    /// waiting to be), tokens refused without the issuer being asked (over
    /// a peer's budget, or the queue full), and answers remembered (active
    /// tokens, refusals).
    pub(crate) fn stats(&self) -> Value {
        let cached = lock(&self.inner.tokens).entries.len();
        let refused = lock(&self.inner.refused).entries.len();
        let gate = &self.inner.gate;
        let (running, waiting) = gate.load();
        let shed_peer = gate.shed_peer.load(Relaxed);
        let shed_queue = gate.shed_queue.load(Relaxed);
        serde_json::json!({
            "issuer": self.inner.issuer,
            "resource": self.resource_url(),
            "keys": self.key_count(),
            "jwksFetches": self.jwks_fetches(),
            "introspections": self.introspections(),
            "introspecting": running,
            "introspectionsWaiting": waiting,
            "introspectionsShed": shed_peer + shed_queue,
            "introspectionsShedPerPeer": shed_peer,
            "introspectionsShedQueueFull": shed_queue,
            "cachedTokens": cached,
            "refusedTokens": refused,
        })
    }

    /// How often the issuer's keys were fetched (for tests and stats).
    pub fn jwks_fetches(&self) -> u64 {
        self.inner.jwks_fetches.load(Relaxed)
    }

    /// How many tokens were sent to the issuer's introspection endpoint.
    pub fn introspections(&self) -> u64 {
        self.inner.introspections.load(Relaxed)
    }

    /// How many requests with a token not known yet were refused without
    /// the issuer being asked: their peer over its
    /// [budget](OAuth::introspections_per_peer), or the
    /// [queue](OAuth::introspection_queue) full.
    pub fn introspections_shed(&self) -> u64 {
        let gate = &self.inner.gate;
        gate.shed_peer.load(Relaxed) + gate.shed_queue.load(Relaxed)
    }

    /// Checks the settings (the URLs' schemes), builds the HTTP client, and
    /// settles the resource: the configured one, else `default` (the
    /// server's own `/mcp` URL, on a loopback address only).
    pub(crate) fn prepare(&self, default: Option<String>) -> Result<(), Error> {
        let invalid =
            |setting: &'static str, reason: String| Error::InvalidConfig { setting, reason };
        let issuer = Url::parse(&self.inner.issuer).map_err(|e| {
            invalid(
                "oauth_issuer",
                format!("{:?} is not a URL ({e})", self.inner.issuer),
            )
        })?;
        fetchable(&issuer).map_err(|why| invalid("oauth_issuer", why.to_string()))?;
        if issuer.query().is_some() || issuer.fragment().is_some() {
            return Err(invalid(
                "oauth_issuer",
                "an issuer identifier has no query or fragment (RFC 8414)".to_owned(),
            ));
        }
        if self.inner.resource.get().is_none() {
            match default {
                Some(url) => {
                    let _ = self.inner.resource.set(url);
                }
                None => {
                    return Err(invalid(
                        "oauth_resource",
                        "a server on a non-loopback address must be told the URL clients reach \
                         its /mcp at (OAuth::resource, HAIP_OAUTH_RESOURCE), e.g. \
                         https://tools.example.com/mcp: tokens must name it"
                            .to_owned(),
                    ));
                }
            }
        }
        let resource = self.resource_url().unwrap_or_default();
        let parsed = Url::parse(resource)
            .map_err(|e| invalid("oauth_resource", format!("{resource:?} is not a URL ({e})")))?;
        if !matches!(parsed.scheme(), "https" | "http") || parsed.fragment().is_some() {
            return Err(invalid(
                "oauth_resource",
                format!("{resource:?} must be an http(s) URL without a fragment (RFC 8707)"),
            ));
        }
        self.client()
            .map_err(|e| invalid("oauth_issuer", e.to_string()))?;
        Ok(())
    }

    /// Fetches the issuer's keys ahead of the first request, saying in the
    /// log when it cannot (requests try again).
    pub(crate) async fn warm_up(&self) {
        match self.refresh().await {
            Refresh::Fetched => tracing::info!(
                issuer = %self.inner.issuer,
                keys = self.key_count(),
                "oauth: the issuer's keys are fetched"
            ),
            Refresh::Failed(why) => tracing::warn!(
                issuer = %self.inner.issuer,
                %why,
                "oauth: the issuer's keys could not be fetched; tried again when a token comes"
            ),
            Refresh::Limited | Refresh::Shared => {}
        }
    }

    fn key_count(&self) -> usize {
        let keys = self.lock_keys();
        keys.by_kid.len() + keys.unnamed.len()
    }

    fn lock_keys(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.inner
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The protected resource metadata (RFC 9728) for `scopes`.
    pub(crate) fn metadata(&self, scopes: &[String]) -> Value {
        serde_json::json!({
            "resource": self.resource_url().unwrap_or_default(),
            "authorization_servers": [self.inner.issuer],
            "scopes_supported": scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": "haip",
        })
    }

    /// Verifies `token` (see the type's docs): what a server does with each
    /// request's token, for use outside one (the [resource](OAuth::resource)
    /// must then be configured). No peer is known here: an unknown token
    /// meets only the [queue](OAuth::introspection_queue), no peer's budget.
    pub async fn verify(&self, token: &str) -> Result<Caller, AuthError> {
        self.verify_from(token, None).await
    }

    /// [`Authenticator::identify`] for a request from `peer` (the server's
    /// path: an unknown token is counted against its peer's budget).
    pub(crate) async fn identify_from(
        &self,
        token: Option<&str>,
        peer: Option<IpAddr>,
    ) -> Result<Caller, AuthError> {
        match token {
            Some(token) if !token.is_empty() => self.verify_from(token, peer).await,
            _ => Err(AuthError::missing_token()),
        }
    }

    async fn verify_from(&self, token: &str, peer: Option<IpAddr>) -> Result<Caller, AuthError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(AuthError::invalid_token(format!(
                "the token is over {MAX_TOKEN_BYTES} bytes"
            )));
        }
        match jsonwebtoken::decode_header(token) {
            Ok(header) => self.verify_jwt(token, header).await,
            Err(_) if self.inner.introspection.is_some() => {
                // Loopback peers are counted too: the cost lands on the
                // issuer, whoever the peer speaks for.
                let peer = CallerKey::of(None, peer, true);
                self.introspect(token, &peer).await
            }
            Err(_) => Err(AuthError::invalid_token(
                "not a JWT, and token introspection is not configured",
            )),
        }
    }

    async fn verify_jwt(
        &self,
        token: &str,
        header: jsonwebtoken::Header,
    ) -> Result<Caller, AuthError> {
        if matches!(
            header.alg,
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512
        ) {
            return Err(AuthError::invalid_token(format!(
                "`alg` is {:?}: an issuer's tokens are verified with its public keys, \
                 never with a shared secret",
                header.alg
            )));
        }
        let kid = header.kid.as_deref();
        let key = self.key_for(kid, header.alg).await?;
        if !key.algorithms.contains(&header.alg) {
            return Err(AuthError::invalid_token(format!(
                "`alg` is {:?}, but the issuer's key {} is for {:?}",
                header.alg,
                kid.map_or_else(|| "without a kid".to_owned(), |k| format!("{k:?}")),
                key.algorithms
            )));
        }
        let mut validation = Validation::new(header.alg);
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.required_spec_claims.clear();
        let claims = jsonwebtoken::decode::<Value>(token, &key.key, &validation)
            .map_err(|e| match e.kind() {
                jsonwebtoken::errors::ErrorKind::InvalidSignature => {
                    AuthError::invalid_token("the signature does not verify with the issuer's key")
                }
                _ => AuthError::invalid_token(format!("malformed token ({e})")),
            })?
            .claims;
        let Value::Object(claims) = claims else {
            return Err(AuthError::invalid_token("the claims are not a JSON object"));
        };
        check_times(&claims, unix_now())?;
        self.check_issuer_and_audience(&claims, true)?;
        caller_of(claims)
    }

    /// `iss` is the issuer (`required`: it must be there), `aud` names the
    /// resource or another accepted audience.
    fn check_issuer_and_audience(
        &self,
        claims: &Map<String, Value>,
        issuer_required: bool,
    ) -> Result<(), AuthError> {
        match claims.get("iss").and_then(Value::as_str) {
            Some(iss) if iss == self.inner.issuer => {}
            None if !issuer_required => {}
            Some(iss) => {
                return Err(AuthError::invalid_token(format!(
                    "`iss` is {:?}, not the issuer {:?}",
                    quote(iss),
                    self.inner.issuer
                )));
            }
            None => return Err(AuthError::invalid_token("no `iss` claim")),
        }
        let resource = self.resource_url().unwrap_or_default();
        let accepted = |aud: &str| {
            (!resource.is_empty() && aud == resource)
                || self.inner.audiences.iter().any(|a| a == aud)
        };
        let ok = match claims.get("aud") {
            Some(Value::String(aud)) => accepted(aud),
            Some(Value::Array(auds)) => auds.iter().filter_map(Value::as_str).any(accepted),
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(AuthError::invalid_token(format!(
                "`aud` does not name this resource ({resource:?}): the token is meant for \
                 another one (RFC 8707)"
            )))
        }
    }

    /// The issuer's key named `kid` (or, without one, its only key for
    /// `alg`), fetching the keys again at once when none is known, within
    /// the refetch budget.
    async fn key_for(&self, kid: Option<&str>, alg: Algorithm) -> Result<Arc<Key>, AuthError> {
        for attempt in 0..2 {
            let (found, stale, seen) = {
                let keys = self.lock_keys();
                let found = match kid {
                    Some(kid) => keys.by_kid.get(kid).cloned(),
                    None => {
                        let mut fitting = keys
                            .unnamed
                            .iter()
                            .chain(keys.by_kid.values())
                            .filter(|k| k.algorithms.contains(&alg));
                        match (fitting.next(), fitting.next()) {
                            (Some(only), None) => Some(Arc::clone(only)),
                            _ => None,
                        }
                    }
                };
                // Old, and not tried lately: one request starts a refresh
                // (the others within one refill of the budget do not spawn
                // one each).
                let refill = Duration::from_secs(60) / self.inner.refetches_per_minute.max(1);
                let stale = keys
                    .fetched
                    .is_some_and(|at| at.elapsed() > self.inner.key_lifetime)
                    && keys.attempted.is_none_or(|at| at.elapsed() >= refill);
                (found, stale, keys.seen())
            };
            if let Some(key) = found {
                if stale {
                    // Old keys go on serving while fresh ones are fetched.
                    let this = self.clone();
                    tokio::spawn(async move {
                        this.refresh().await;
                    });
                }
                return Ok(key);
            }
            if attempt == 1 {
                break;
            }
            match self.refresh_after(seen).await {
                Refresh::Fetched => {}
                Refresh::Limited | Refresh::Shared => break,
                Refresh::Failed(why) => {
                    tracing::warn!(issuer = %self.inner.issuer, %why, "oauth: the issuer's keys could not be fetched");
                    break;
                }
            }
        }
        Err(AuthError::invalid_token(match kid {
            Some(kid) => format!("the issuer's keys have no key {:?}", quote(kid)),
            None => "the token names no `kid`, and the issuer has not exactly one key for its alg"
                .to_owned(),
        }))
    }

    /// Fetches the issuer's metadata (once) and keys, unless another fetch
    /// ended since this one was asked for, or the refetch budget is spent.
    async fn refresh(&self) -> Refresh {
        let seen = self.lock_keys().seen();
        self.refresh_after(seen).await
    }

    /// [`refresh`](OAuth::refresh), asked for by a request that saw `seen`:
    /// a fetch that ended since (it waited for it: one fetch at a time) is
    /// its answer, so requests that name an unknown key together share one.
    async fn refresh_after(&self, seen: Seen) -> Refresh {
        let _one = self.inner.fetching.lock().await;
        {
            let mut keys = self.lock_keys();
            if keys.generation != seen.generation {
                return Refresh::Fetched;
            }
            if keys.attempts != seen.attempts {
                return Refresh::Shared;
            }
            let now = Instant::now();
            if !keys.budget.take(self.inner.refetches_per_minute, now) {
                return Refresh::Limited;
            }
            keys.attempted = Some(now);
            keys.attempts += 1;
        }
        match self.fetch_keys().await {
            Ok((jwks_uri, introspection, by_kid, unnamed)) => {
                let mut keys = self.lock_keys();
                keys.jwks_uri = Some(jwks_uri);
                keys.introspection_endpoint = introspection;
                keys.by_kid = by_kid;
                keys.unnamed = unnamed;
                keys.fetched = Some(Instant::now());
                keys.generation += 1;
                Refresh::Fetched
            }
            Err(why) => Refresh::Failed(why),
        }
    }

    #[allow(clippy::type_complexity)]
    async fn fetch_keys(
        &self,
    ) -> Result<(Url, Option<Url>, HashMap<String, Arc<Key>>, Vec<Arc<Key>>), FetchError> {
        let known = {
            let keys = self.lock_keys();
            keys.jwks_uri
                .clone()
                .map(|uri| (uri, keys.introspection_endpoint.clone()))
        };
        let (jwks_uri, introspection) = match known {
            Some(known) => known,
            None => self.discover().await?,
        };
        self.inner.jwks_fetches.fetch_add(1, Relaxed);
        let jwks = self.get(&jwks_uri).await?;
        let Some(list) = jwks.get("keys").and_then(Value::as_array) else {
            return Err(FetchError::NoKeysArray { jwks_uri });
        };
        let mut by_kid = HashMap::new();
        let mut unnamed = Vec::new();
        for value in list {
            let Some(key) = key_of(value) else { continue };
            match value.get("kid").and_then(Value::as_str) {
                Some(kid) => {
                    by_kid.insert(kid.to_owned(), Arc::new(key));
                }
                None => unnamed.push(Arc::new(key)),
            }
        }
        if by_kid.is_empty() && unnamed.is_empty() {
            return Err(FetchError::NoUsableKey { jwks_uri });
        }
        Ok((jwks_uri, introspection, by_kid, unnamed))
    }

    /// The issuer's `jwks_uri` and `introspection_endpoint`, from its RFC 8414
    /// metadata, else its OpenID discovery document.
    async fn discover(&self) -> Result<(Url, Option<Url>), FetchError> {
        let issuer = Url::parse(&self.inner.issuer).map_err(FetchError::IssuerUrl)?;
        let path = issuer.path().trim_end_matches('/');
        let mut rfc8414 = issuer.clone();
        rfc8414.set_path(&format!("/.well-known/oauth-authorization-server{path}"));
        let mut openid = issuer.clone();
        openid.set_path(&format!("{path}/.well-known/openid-configuration"));
        let mut why = Vec::new();
        for url in [rfc8414, openid] {
            let document = match self.get(&url).await {
                Ok(document) => document,
                Err(e) => {
                    why.push(e);
                    continue;
                }
            };
            if document.get("issuer").and_then(Value::as_str) != Some(self.inner.issuer.as_str()) {
                return Err(FetchError::OtherIssuer(Box::new(OtherIssuer {
                    url,
                    named: document.get("issuer").cloned().unwrap_or(Value::Null),
                    expected: self.inner.issuer.clone(),
                })));
            }
            let endpoint = |name: &'static str| -> Result<Option<Url>, FetchError> {
                let Some(text) = document.get(name).and_then(Value::as_str) else {
                    return Ok(None);
                };
                let url = Url::parse(text).map_err(|source| FetchError::EndpointUrl {
                    name,
                    text: text.to_owned(),
                    source,
                })?;
                fetchable(&url).map_err(|source| FetchError::EndpointUnfetchable {
                    name,
                    source: Box::new(source),
                })?;
                Ok(Some(url))
            };
            let Some(jwks_uri) = endpoint("jwks_uri")? else {
                return Err(FetchError::NoJwksUri { url });
            };
            return Ok((jwks_uri, endpoint("introspection_endpoint")?));
        }
        Err(FetchError::NoMetadata(why))
    }

    fn client(&self) -> Result<&reqwest::Client, FetchError> {
        if let Some(client) = self.inner.client.get() {
            return Ok(client);
        }
        let client = build_client(self.inner.fetch_timeout).map_err(FetchError::NoClient)?;
        Ok(self.inner.client.get_or_init(|| client))
    }

    /// GET `url` as JSON (`200` only, at most `MAX_DOCUMENT_BYTES`).
    async fn get(&self, url: &Url) -> Result<Value, FetchError> {
        fetchable(url)?;
        let response = self
            .client()?
            .get(url.clone())
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|source| FetchError::Request {
                url: url.clone(),
                source,
            })?;
        json_of(url, response).await
    }

    /// RFC 7662: the issuer's word on an opaque token, remembered; asked
    /// only within `peer`'s budget and the queue's room (else refused at
    /// once), and once for requests that show the same token together.
    async fn introspect(&self, token: &str, peer: &CallerKey) -> Result<Caller, AuthError> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        loop {
            if let Some(known) = self.cached(&digest) {
                return known;
            }
            let mut flight = match lock(&self.inner.flights).entry(digest) {
                Entry::Occupied(under_way) => Err(under_way.get().0.clone()),
                Entry::Vacant(free) => {
                    let (tx, rx) = tokio::sync::watch::channel(None);
                    free.insert(Flight(rx));
                    Ok(Leading {
                        oauth: self,
                        digest,
                        tx,
                    })
                }
            };
            match &mut flight {
                Err(answer) => match answer.wait_for(Option::is_some).await {
                    Ok(answer) => {
                        if let Some(answer) = answer.as_ref() {
                            return answer.clone();
                        }
                    }
                    // The request asking for it went away, or was refused
                    // its turn: try again (perhaps asking for it here).
                    Err(_) => continue,
                },
                Ok(leading) => {
                    // A refusal of this request's turn is its own: those
                    // waiting for the answer try again for themselves.
                    let answer = self.lead(token, &digest, peer).await?;
                    leading.tx.send_replace(Some(answer.clone()));
                    return answer;
                }
            }
        }
    }

    /// The introspection of a token not known yet, through the gate: the
    /// answer, or (the outer error) why `peer` may not have it asked now.
    async fn lead(
        &self,
        token: &str,
        digest: &[u8; 32],
        peer: &CallerKey,
    ) -> Result<Result<Caller, AuthError>, AuthError> {
        let gate = &self.inner.gate;
        let mut pass = match gate.enter(peer).await {
            Ok(pass) => pass,
            Err(shed) => {
                let counter = match shed {
                    Shed::AtOnce(_) | Shed::PerMinute(_) => &gate.shed_peer,
                    Shed::QueueFull { .. } => &gate.shed_queue,
                };
                counter.fetch_add(1, Relaxed);
                let why = shed.reason(peer);
                tracing::debug!(%why, "oauth: a token not known yet is refused unasked");
                return Err(AuthError::invalid_token(why));
            }
        };
        // Another request may have asked while this one waited.
        if let Some(known) = self.cached(digest) {
            return Ok(known);
        }
        pass.asked = true;
        let (result, until) = self.ask_issuer(token).await;
        self.remember(*digest, &result, until);
        Ok(result)
    }

    /// Keeps the issuer's answer: an active token until `until`, a refusal
    /// until then or for `NEGATIVE_TTL`, whichever ends first.
    fn remember(&self, digest: [u8; 32], result: &Result<Caller, AuthError>, until: Instant) {
        let max = self.inner.max_cached_tokens;
        match result {
            Ok(_) => lock(&self.inner.tokens).insert(digest, result.clone(), until, max),
            Err(_) => {
                let until = until.min(Instant::now() + NEGATIVE_TTL);
                lock(&self.inner.refused).insert(digest, result.clone(), until, max);
            }
        }
    }

    fn cached(&self, digest: &[u8; 32]) -> Option<Result<Caller, AuthError>> {
        lock(&self.inner.tokens)
            .get(digest)
            .or_else(|| lock(&self.inner.refused).get(digest))
    }

    /// What the issuer says of `token`, and until when to believe it.
    async fn ask_issuer(&self, token: &str) -> (Result<Caller, AuthError>, Instant) {
        let refused = |why: String| {
            (
                Err(AuthError::invalid_token(why)),
                Instant::now() + NEGATIVE_TTL,
            )
        };
        let Some((client_id, secret)) = &self.inner.introspection else {
            return refused("token introspection is not configured".to_owned());
        };
        let mut endpoint = self.lock_keys().introspection_endpoint.clone();
        if endpoint.is_none() && self.lock_keys().jwks_uri.is_none() {
            self.refresh().await;
            endpoint = self.lock_keys().introspection_endpoint.clone();
        }
        let Some(endpoint) = endpoint else {
            // Not remembered: the issuer may be reachable next time.
            return (
                Err(AuthError::invalid_token(
                    "the issuer's metadata names no introspection endpoint (or could not be fetched)",
                )),
                Instant::now(),
            );
        };
        self.inner.introspections.fetch_add(1, Relaxed);
        let client = match self.client() {
            Ok(client) => client,
            Err(why) => {
                return (
                    Err(AuthError::invalid_token(why.to_string())),
                    Instant::now(),
                );
            }
        };
        let sent = client
            .post(endpoint.clone())
            .basic_auth(client_id, Some(secret))
            .header("accept", "application/json")
            .form(&[("token", token), ("token_type_hint", "access_token")])
            .send()
            .await;
        let answer = match sent {
            Ok(response) => json_of(&endpoint, response).await,
            Err(source) => Err(FetchError::Request {
                url: endpoint.clone(),
                source,
            }),
        };
        let answer = match answer {
            Ok(Value::Object(answer)) => answer,
            // The issuer could not say: not remembered.
            Ok(_) => {
                return (
                    Err(AuthError::invalid_token(
                        "the introspection answer is not an object",
                    )),
                    Instant::now(),
                );
            }
            Err(why) => {
                tracing::warn!(%why, "oauth: token introspection failed");
                return (
                    Err(AuthError::invalid_token(format!(
                        "token introspection failed: {why}"
                    ))),
                    Instant::now(),
                );
            }
        };
        if answer.get("active") != Some(&Value::Bool(true)) {
            return refused("the issuer says the token is not active".to_owned());
        }
        let now = unix_now();
        let until = match answer.get("exp").and_then(Value::as_u64) {
            Some(exp) => {
                if exp <= now {
                    return (
                        Err(AuthError::token_expired()),
                        Instant::now() + NEGATIVE_TTL,
                    );
                }
                Instant::now() + Duration::from_secs(exp - now).min(UNDATED_TTL * 12)
            }
            None => Instant::now() + UNDATED_TTL,
        };
        if let Err(e) = check_nbf(&answer, now) {
            return (Err(e), Instant::now() + NEGATIVE_TTL);
        }
        if let Err(e) = self.check_issuer_and_audience(&answer, false) {
            return (Err(e), until);
        }
        (caller_of(answer), until)
    }
}

/// The client the issuer is fetched with: bounded in time, no redirects
/// (a redirect could lead off `https` or off loopback).
fn build_client(timeout: Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
}

enum Refresh {
    /// Fetched, by this request or one it waited for.
    Fetched,
    /// Not tried: the refetch budget is spent.
    Limited,
    /// Not tried: a fetch tried since the request asked failed.
    Shared,
    /// Tried, and failed.
    Failed(FetchError),
}

/// The error of [`Url::parse`].
type UrlError = <Url as std::str::FromStr>::Err;

/// Why the issuer's metadata, its keys or an introspection answer could not
/// be had (or a URL may not be fetched); its text is what the log, the
/// `INVALID_TOKEN` message or the configuration error says.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchError {
    /// Plain `http` to a host that is not loopback.
    #[error("{url}: plain http is allowed to loopback addresses only; use https")]
    PlainHttp {
        /// The URL refused.
        url: Url,
    },
    /// A scheme other than `http(s)`.
    #[error("{url}: the scheme {scheme:?} is not http(s)")]
    Scheme {
        /// The URL refused.
        url: Url,
        /// Its scheme.
        scheme: String,
    },
    /// The HTTP client could not be built.
    #[error("no HTTP client: {0}")]
    NoClient(#[source] reqwest::Error),
    /// The request failed, or its answer could not be read.
    #[error("{url}: {source}")]
    Request {
        /// The URL asked.
        url: Url,
        /// What failed.
        #[source]
        source: reqwest::Error,
    },
    /// An answer other than a success.
    #[error("{url}: HTTP {status}")]
    Status {
        /// The URL asked.
        url: Url,
        /// The answer's status.
        status: reqwest::StatusCode,
    },
    /// An answer over `MAX_DOCUMENT_BYTES`.
    #[error("{url}: the answer is over {MAX_DOCUMENT_BYTES} bytes")]
    TooLarge {
        /// The URL asked.
        url: Url,
    },
    /// An answer that is not JSON.
    #[error("{url}: not JSON ({source})")]
    NotJson {
        /// The URL asked.
        url: Url,
        /// Why it does not parse.
        #[source]
        source: serde_json::Error,
    },
    /// The configured issuer is not a URL.
    #[error("{0}")]
    IssuerUrl(#[source] UrlError),
    /// The metadata names another issuer.
    #[error(
        "the metadata at {} names issuer {}, not {:?} (RFC 8414 §3.3)",
        .0.url, .0.named, .0.expected
    )]
    OtherIssuer(Box<OtherIssuer>),
    /// An endpoint of the metadata is not a URL.
    #[error("`{name}` {text:?}: {source}")]
    EndpointUrl {
        /// The metadata's field.
        name: &'static str,
        /// What it holds.
        text: String,
        /// Why it does not parse.
        #[source]
        source: UrlError,
    },
    /// An endpoint of the metadata may not be fetched.
    #[error("`{name}`: {source}")]
    EndpointUnfetchable {
        /// The metadata's field.
        name: &'static str,
        /// Why not ([`FetchError::PlainHttp`] or [`FetchError::Scheme`]).
        #[source]
        source: Box<FetchError>,
    },
    /// The metadata names no `jwks_uri`.
    #[error("the metadata at {url} has no `jwks_uri`")]
    NoJwksUri {
        /// The metadata's URL.
        url: Url,
    },
    /// Neither metadata document could be fetched: why not, for each.
    #[error("no issuer metadata: {}", joined(.0))]
    NoMetadata(Vec<FetchError>),
    /// The JWKS has no `keys` array.
    #[error("the JWKS at {jwks_uri} has no `keys` array")]
    NoKeysArray {
        /// The JWKS's URL.
        jwks_uri: Url,
    },
    /// The JWKS has no key haip can verify signatures with.
    #[error("the JWKS at {jwks_uri} has no signature key haip can use")]
    NoUsableKey {
        /// The JWKS's URL.
        jwks_uri: Url,
    },
}

/// The metadata at `url` names the issuer `named`, not `expected`.
#[derive(Debug)]
pub(crate) struct OtherIssuer {
    url: Url,
    named: Value,
    expected: String,
}

/// `errors`' texts, separated by `; `.
fn joined(errors: &[FetchError]) -> String {
    let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
    texts.join("; ")
}

/// `https`, or `http` to a loopback host.
fn fetchable(url: &Url) -> Result<(), FetchError> {
    match url.scheme() {
        "https" => Ok(()),
        "http" if url.host_str().is_some_and(is_loopback) => Ok(()),
        "http" => Err(FetchError::PlainHttp { url: url.clone() }),
        other => Err(FetchError::Scheme {
            url: url.clone(),
            scheme: other.to_owned(),
        }),
    }
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// At most 64 characters of what a client sent, for the logs.
fn quote(text: &str) -> String {
    match text.char_indices().nth(64) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// A `200` JSON answer, at most `MAX_DOCUMENT_BYTES`.
async fn json_of(url: &Url, mut response: reqwest::Response) -> Result<Value, FetchError> {
    if !response.status().is_success() {
        return Err(FetchError::Status {
            url: url.clone(),
            status: response.status(),
        });
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|source| FetchError::Request {
            url: url.clone(),
            source,
        })?
    {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(FetchError::TooLarge { url: url.clone() });
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|source| FetchError::NotJson {
        url: url.clone(),
        source,
    })
}

/// A signature key of a JWKS, with the algorithms it verifies; `None` for
/// one haip cannot use (an encryption key, a symmetric one, an unknown type).
fn key_of(value: &Value) -> Option<Key> {
    let jwk: Jwk = serde_json::from_value(value.clone()).ok()?;
    if matches!(
        jwk.common.public_key_use,
        Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
    ) {
        return None;
    }
    let allowed: Vec<Algorithm> = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => vec![
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ],
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => vec![Algorithm::ES256],
            EllipticCurve::P384 => vec![Algorithm::ES384],
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(okp) => match okp.curve {
            EllipticCurve::Ed25519 => vec![Algorithm::EdDSA],
            _ => return None,
        },
        // Symmetric keys are never taken from an issuer.
        _ => return None,
    };
    let algorithms = match jwk.common.key_algorithm {
        None => allowed,
        Some(declared) => {
            let declared = Algorithm::try_from(declared).ok()?;
            if !allowed.contains(&declared) {
                return None;
            }
            vec![declared]
        }
    };
    super::jwt::crypto_provider();
    let key = DecodingKey::from_jwk(&jwk).ok()?;
    Some(Key { key, algorithms })
}

/// The caller of verified claims: `sub`, else `client_id` (a token a client
/// got for itself), with the claims' scopes.
fn caller_of(claims: Map<String, Value>) -> Result<Caller, AuthError> {
    let subject = ["sub", "client_id"]
        .iter()
        .find_map(|name| claims.get(*name)?.as_str().filter(|s| !s.is_empty()))
        .map(str::to_owned)
        .ok_or_else(|| {
            AuthError::invalid_token("neither `sub` nor `client_id` names the caller")
        })?;
    Ok(Caller::from_claims(subject, claims))
}

fn check_nbf(claims: &Map<String, Value>, now: u64) -> Result<(), AuthError> {
    if let Some(nbf) = claims.get("nbf").and_then(Value::as_u64)
        && nbf > now + 60
    {
        return Err(AuthError::invalid_token("`nbf` is in the future"));
    }
    Ok(())
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Introspection answers by the SHA-256 of their token, each until its time.
#[derive(Default)]
struct TokenCache {
    entries: HashMap<[u8; 32], (Result<Caller, AuthError>, Instant)>,
}

impl TokenCache {
    fn get(&self, digest: &[u8; 32]) -> Option<Result<Caller, AuthError>> {
        let (result, until) = self.entries.get(digest)?;
        (Instant::now() < *until).then(|| result.clone())
    }

    fn insert(
        &mut self,
        digest: [u8; 32],
        result: Result<Caller, AuthError>,
        until: Instant,
        max: usize,
    ) {
        let now = Instant::now();
        if until <= now {
            return;
        }
        if self.entries.len() >= max {
            self.entries.retain(|_, (_, until)| *until > now);
        }
        if self.entries.len() >= max {
            // Still full of live answers: forget the ones that end first.
            let mut ends: Vec<Instant> = self.entries.values().map(|(_, u)| *u).collect();
            ends.sort_unstable();
            let cut = ends[ends.len() / 4];
            self.entries.retain(|_, (_, until)| *until > cut);
        }
        self.entries.insert(digest, (result, until));
    }
}

/// Locks `mutex`; what the locks here guard stays whole if a holder panics.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An introspection's answer, as the requests waiting for it get it.
type Answer = Option<Result<Caller, AuthError>>;

/// An introspection under way: the answer, once there (closed without one
/// when the request asking went away or was refused its turn).
struct Flight(tokio::sync::watch::Receiver<Answer>);

/// The request that asks the issuer about a token, for every request
/// showing it meanwhile; its flight ends when it is dropped.
struct Leading<'a> {
    oauth: &'a OAuth,
    digest: [u8; 32],
    tx: tokio::sync::watch::Sender<Answer>,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let mut flights = lock(&self.oauth.inner.flights);
        if flights
            .get(&self.digest)
            .is_some_and(|flight| flight.0.same_channel(&self.tx.subscribe()))
        {
            flights.remove(&self.digest);
        }
    }
}

/// What introspecting tokens not known yet may cost
/// ([`OAuth::introspections_per_peer`], [`OAuth::introspection_queue`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Limits {
    /// Introspections one peer may have waiting or running at once.
    per_peer_at_once: usize,
    /// Introspections one peer may start in any minute.
    per_peer_per_minute: u32,
    /// Requests to the issuer at once, all peers together.
    at_once: usize,
    /// Introspections that may wait for one of those, all peers together.
    waiting: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            per_peer_at_once: 4,
            per_peer_per_minute: 60,
            at_once: 8,
            waiting: 32,
        }
    }
}

/// Why a token not known yet is refused without the issuer being asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shed {
    /// Its peer already has this many being introspected.
    AtOnce(usize),
    /// Its peer has started this many within the last minute.
    PerMinute(u32),
    /// This many requests to the issuer run, and this many more wait.
    QueueFull { running: usize, waiting: usize },
}

impl Shed {
    /// The reason, for the logs.
    fn reason(self, peer: &CallerKey) -> String {
        let peer = match peer {
            CallerKey::Peer(_) => peer.describe(),
            _ => "the peer".to_owned(),
        };
        match self {
            Shed::AtOnce(n) => format!(
                "not introspected: {peer} already has {n} tokens not known yet being checked \
                 (OAuth::introspections_per_peer)"
            ),
            Shed::PerMinute(n) => format!(
                "not introspected: {peer} has had {n} tokens not known yet checked in the last \
                 minute (OAuth::introspections_per_peer)"
            ),
            Shed::QueueFull { running, waiting } => format!(
                "not introspected: {running} introspections run and {waiting} more wait \
                 (OAuth::introspection_queue)"
            ),
        }
    }
}

/// The way to the issuer's introspection endpoint: each peer's budget, then
/// `at_once` requests at a time behind a FIFO queue of at most `waiting`.
/// Nothing waits for room in a budget or in the queue: what finds none is
/// shed.
struct Gate {
    limits: Limits,
    /// The requests to the issuer (tokio's semaphore serves waiters in
    /// order: the queue is FIFO).
    permits: tokio::sync::Semaphore,
    state: Mutex<GateState>,
    shed_peer: AtomicU64,
    shed_queue: AtomicU64,
}

struct GateState {
    peers: PeerBudgets,
    /// Introspections waiting for a permit.
    waiting: usize,
}

impl Gate {
    fn new(limits: Limits) -> Gate {
        Gate {
            limits,
            permits: tokio::sync::Semaphore::new(limits.at_once),
            state: Mutex::new(GateState {
                peers: PeerBudgets::new(
                    limits.per_peer_at_once,
                    limits.per_peer_per_minute,
                    MAX_BUDGETED_PEERS,
                ),
                waiting: 0,
            }),
            shed_peer: AtomicU64::new(0),
            shed_queue: AtomicU64::new(0),
        }
    }

    /// Requests to the issuer running, and introspections waiting.
    fn load(&self) -> (usize, usize) {
        let running = self.limits.at_once - self.permits.available_permits();
        (running, lock(&self.state).waiting)
    }

    /// A turn to ask the issuer, for `peer`: within its budget, at once or
    /// after those queued before it; else the reason it is shed (at once).
    async fn enter(&self, peer: &CallerKey) -> Result<Pass<'_>, Shed> {
        lock(&self.state).peers.take(peer, Instant::now())?;
        let mut pass = Pass {
            gate: self,
            peer: peer.clone(),
            _permit: None,
            asked: false,
        };
        let permit = match self.permits.try_acquire() {
            Ok(permit) => permit,
            Err(_) => {
                {
                    let mut state = lock(&self.state);
                    if state.waiting >= self.limits.waiting {
                        let running = self.limits.at_once - self.permits.available_permits();
                        return Err(Shed::QueueFull {
                            running,
                            waiting: state.waiting,
                        });
                    }
                    state.waiting += 1;
                }
                let queued = Queued(self);
                let permit = self.permits.acquire().await;
                drop(queued);
                // The semaphore is never closed.
                permit.map_err(|_| Shed::QueueFull {
                    running: self.limits.at_once,
                    waiting: self.limits.waiting,
                })?
            }
        };
        pass._permit = Some(permit);
        Ok(pass)
    }
}

/// One introspection waiting for a permit; counted until dropped.
struct Queued<'a>(&'a Gate);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.0.state);
        state.waiting = state.waiting.saturating_sub(1);
    }
}

/// A turn at the issuer: gives its peer's share back when dropped (and the
/// minute's budget too, when the issuer was not asked after all).
struct Pass<'a> {
    gate: &'a Gate,
    peer: CallerKey,
    _permit: Option<tokio::sync::SemaphorePermit<'a>>,
    asked: bool,
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        lock(&self.gate.state)
            .peers
            .give_back(&self.peer, !self.asked, Instant::now());
    }
}

/// Each peer's introspections: how many it has under way (at most
/// `at_once`), and its minute's budget of them, a bucket of `per_minute`
/// refilled evenly (kept as the time it is full again, `full_at`: each
/// introspection moves it on by `interval`, and it may not get more than a
/// minute ahead). A peer with nothing under way and a full bucket has no
/// entry.
struct PeerBudgets {
    at_once: usize,
    per_minute: u32,
    /// A minute divided by `per_minute`.
    interval: Duration,
    /// Entries kept before idle ones are forgotten.
    max_peers: usize,
    entries: HashMap<CallerKey, PeerBudget>,
}

struct PeerBudget {
    under_way: usize,
    full_at: Instant,
}

impl PeerBudgets {
    fn new(at_once: usize, per_minute: u32, max_peers: usize) -> PeerBudgets {
        let per_minute = per_minute.max(1);
        PeerBudgets {
            at_once: at_once.max(1),
            per_minute,
            interval: BUDGET_WINDOW / per_minute,
            max_peers,
            entries: HashMap::new(),
        }
    }

    /// Counts one introspection for `peer`, if it has room. An unknown peer
    /// ([`CallerKey::Unlimited`]) always has.
    fn take(&mut self, peer: &CallerKey, now: Instant) -> Result<(), Shed> {
        if !matches!(peer, CallerKey::Peer(_)) {
            return Ok(());
        }
        if !self.entries.contains_key(peer) && self.entries.len() >= self.max_peers {
            self.entries
                .retain(|_, budget| budget.under_way > 0 || budget.full_at > now);
            if self.entries.len() >= self.max_peers {
                // Still too many (a flood from very many addresses): forget
                // the budgets of those with nothing under way, which start
                // afresh. Those under way are few: each holds a turn.
                self.entries.retain(|_, budget| budget.under_way > 0);
            }
        }
        let budget = self.entries.entry(peer.clone()).or_insert(PeerBudget {
            under_way: 0,
            full_at: now,
        });
        if budget.under_way >= self.at_once {
            return Err(Shed::AtOnce(budget.under_way));
        }
        let full_at = budget.full_at.max(now) + self.interval;
        if full_at > now + BUDGET_WINDOW {
            return Err(Shed::PerMinute(self.per_minute));
        }
        budget.under_way += 1;
        budget.full_at = full_at;
        Ok(())
    }

    /// Gives back what [`take`](Self::take) counted for `peer`; `refund`:
    /// the minute's budget too (the issuer was not asked).
    fn give_back(&mut self, peer: &CallerKey, refund: bool, now: Instant) {
        let Some(budget) = self.entries.get_mut(peer) else {
            return;
        };
        budget.under_way = budget.under_way.saturating_sub(1);
        if refund {
            // Anything at or before `now` is a full bucket.
            budget.full_at = budget.full_at.checked_sub(self.interval).unwrap_or(now);
        }
        if budget.under_way == 0 && budget.full_at <= now {
            self.entries.remove(peer);
        }
    }
}

impl Authenticator for OAuth {
    fn authenticate<'a>(&'a self, token: Option<&'a str>) -> AuthFuture<'a> {
        Box::pin(async move {
            self.identify(token)
                .await
                .map(|caller| caller.subject().to_owned())
        })
    }

    fn identify<'a>(&'a self, token: Option<&'a str>) -> IdentifyFuture<'a> {
        Box::pin(self.identify_from(token, None))
    }
}

impl fmt::Debug for OAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuth")
            .field("issuer", &self.inner.issuer)
            .field("resource", &self.resource_url())
            .field("audiences", &self.inner.audiences)
            .field(
                "introspection",
                &self.inner.introspection.as_ref().map(|(id, _)| id),
            )
            .field(
                "jwks_refetches_per_minute",
                &self.inner.refetches_per_minute,
            )
            .field("max_cached_tokens", &self.inner.max_cached_tokens)
            .field("introspection_limits", &self.inner.gate.limits)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_metadata_url_puts_the_well_known_path_before_the_resource_path() {
        let at = |resource: &str| {
            OAuth::issuer("https://i.example")
                .resource(resource)
                .metadata_url()
        };
        assert_eq!(
            at("https://t.example/mcp").as_deref(),
            Some("https://t.example/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(
            at("https://t.example/").as_deref(),
            Some("https://t.example/.well-known/oauth-protected-resource")
        );
        assert_eq!(
            at("http://127.0.0.1:8080/a/mcp").as_deref(),
            Some("http://127.0.0.1:8080/.well-known/oauth-protected-resource/a/mcp")
        );
    }

    #[test]
    fn the_refetch_budget_starts_full_and_refills_evenly() {
        let start = Instant::now();
        let at = |secs: f64| start + Duration::from_secs_f64(secs);
        let mut budget = Budget::default();
        // Full: ten at once, then none.
        for _ in 0..10 {
            assert!(budget.take(10, start));
        }
        assert!(!budget.take(10, start));
        // One comes back every 6 s, and no more than ten are saved.
        assert!(!budget.take(10, at(3.0)));
        assert!(budget.take(10, at(6.0)));
        assert!(!budget.take(10, at(6.1)));
        let later = at(3600.0);
        assert_eq!((0..20).filter(|_| budget.take(10, later)).count(), 10);
        // At least one a minute.
        let mut one = Budget::default();
        assert!(one.take(0, start));
        assert!(!one.take(0, at(30.0)));
        assert!(one.take(0, at(60.0)));
    }

    #[test]
    #[allow(deprecated)]
    fn the_old_refresh_interval_is_read_as_a_budget_of_the_same_rate() {
        let per_minute = |interval: Duration| {
            OAuth::issuer("https://i.example")
                .jwks_refresh_interval(interval)
                .inner
                .refetches_per_minute
        };
        assert_eq!(per_minute(Duration::from_secs(30)), 2);
        assert_eq!(per_minute(Duration::from_millis(100)), 600);
        assert_eq!(per_minute(Duration::from_secs(3600)), 1);
        assert_eq!(per_minute(Duration::ZERO), u32::MAX);
        assert_eq!(
            OAuth::issuer("https://i.example")
                .inner
                .refetches_per_minute,
            10
        );
    }

    #[test]
    fn issuers_are_fetched_over_https_or_loopback_http_only() {
        let ok = |u: &str| fetchable(&Url::parse(u).unwrap()).is_ok();
        assert!(ok("https://idp.example.com"));
        assert!(ok("http://127.0.0.1:9000"));
        assert!(ok("http://[::1]:9000/x"));
        assert!(ok("http://localhost:9000"));
        assert!(!ok("http://idp.example.com"));
        assert!(!ok("http://10.0.0.1"));
        assert!(!ok("ftp://127.0.0.1"));
    }

    #[test]
    fn fetch_errors_say_what_failed_and_where() {
        let url = |u: &str| Url::parse(u).unwrap();
        let plain = fetchable(&url("http://idp.example.com/m")).unwrap_err();
        assert_eq!(
            plain.to_string(),
            "http://idp.example.com/m: plain http is allowed to loopback addresses only; use https"
        );
        let scheme = fetchable(&url("ftp://127.0.0.1/")).unwrap_err();
        assert_eq!(
            scheme.to_string(),
            "ftp://127.0.0.1/: the scheme \"ftp\" is not http(s)"
        );
        let endpoint = FetchError::EndpointUnfetchable {
            name: "jwks_uri",
            source: Box::new(scheme),
        };
        assert_eq!(
            endpoint.to_string(),
            "`jwks_uri`: ftp://127.0.0.1/: the scheme \"ftp\" is not http(s)"
        );
        assert!(
            std::error::Error::source(&endpoint).is_some(),
            "the cause is kept"
        );
        let other = FetchError::OtherIssuer(Box::new(OtherIssuer {
            url: url("https://i.example/.well-known/openid-configuration"),
            named: json!("https://other.example"),
            expected: "https://i.example".to_owned(),
        }));
        assert_eq!(
            other.to_string(),
            "the metadata at https://i.example/.well-known/openid-configuration names issuer \
             \"https://other.example\", not \"https://i.example\" (RFC 8414 §3.3)"
        );
        let none = FetchError::NoMetadata(vec![
            FetchError::TooLarge {
                url: url("https://i.example/a"),
            },
            FetchError::NoJwksUri {
                url: url("https://i.example/b"),
            },
        ]);
        assert_eq!(
            none.to_string(),
            format!(
                "no issuer metadata: https://i.example/a: the answer is over {MAX_DOCUMENT_BYTES} \
                 bytes; the metadata at https://i.example/b has no `jwks_uri`"
            )
        );
    }

    #[test]
    fn prepare_needs_a_resource_off_loopback_and_refuses_plain_http_issuers() {
        let oauth = OAuth::issuer("https://idp.example.com");
        assert!(matches!(
            oauth.prepare(None),
            Err(Error::InvalidConfig {
                setting: "oauth_resource",
                ..
            })
        ));
        oauth
            .prepare(Some("http://127.0.0.1:1/mcp".to_owned()))
            .unwrap();
        assert_eq!(oauth.resource_url(), Some("http://127.0.0.1:1/mcp"));
        let plain = OAuth::issuer("http://idp.example.com").resource("https://t.example/mcp");
        assert!(matches!(
            plain.prepare(None),
            Err(Error::InvalidConfig {
                setting: "oauth_issuer",
                ..
            })
        ));
    }

    #[test]
    fn only_signature_keys_of_known_types_are_kept() {
        let rsa = json!({"kty": "RSA", "kid": "r", "n": "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw", "e": "AQAB"});
        let key = key_of(&rsa).unwrap();
        assert!(key.algorithms.contains(&Algorithm::RS256));
        let mut declared = rsa.clone();
        declared["alg"] = json!("PS256");
        assert_eq!(key_of(&declared).unwrap().algorithms, [Algorithm::PS256]);
        let mut mismatched = rsa.clone();
        mismatched["alg"] = json!("ES256");
        assert!(key_of(&mismatched).is_none());
        let mut encryption = rsa.clone();
        encryption["use"] = json!("enc");
        assert!(key_of(&encryption).is_none());
        assert!(key_of(&json!({"kty": "oct", "k": "c2VjcmV0"})).is_none());
        assert!(key_of(&json!({"kty": "nope"})).is_none());
    }

    /// The key of a request from `ip`, as the server counts it.
    fn peer(ip: &str) -> CallerKey {
        CallerKey::of(None, Some(ip.parse().unwrap()), true)
    }

    /// `fut` polled once: its output, if it is ready.
    fn poll_once<F: std::future::Future>(fut: std::pin::Pin<&mut F>) -> Option<F::Output> {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match fut.poll(&mut cx) {
            std::task::Poll::Ready(out) => Some(out),
            std::task::Poll::Pending => None,
        }
    }

    #[test]
    fn each_peer_has_a_few_under_way_at_once_and_its_ipv6_64_is_one_peer() {
        let now = Instant::now();
        let mut budgets = PeerBudgets::new(2, 1000, 100);
        let a = peer("203.0.113.1");
        budgets.take(&a, now).unwrap();
        budgets.take(&a, now).unwrap();
        assert_eq!(budgets.take(&a, now), Err(Shed::AtOnce(2)));
        budgets
            .take(&peer("203.0.113.2"), now)
            .expect("another peer has its own");
        budgets.give_back(&a, false, now);
        budgets.take(&a, now).expect("room again");
        let v6 = peer("2001:db8:1:2::1");
        budgets.take(&v6, now).unwrap();
        budgets.take(&peer("2001:db8:1:2:ffff::9"), now).unwrap();
        assert_eq!(
            budgets.take(&peer("2001:db8:1:2:abcd::5"), now),
            Err(Shed::AtOnce(2)),
            "one /64 is one peer"
        );
        budgets
            .take(&peer("2001:db8:1:3::1"), now)
            .expect("another /64");
        // Loopback is counted too; no peer known: never counted.
        budgets.take(&peer("127.0.0.1"), now).unwrap();
        budgets.take(&peer("127.0.0.1"), now).unwrap();
        assert!(budgets.take(&peer("127.0.0.1"), now).is_err());
        for _ in 0..10 {
            budgets.take(&CallerKey::Unlimited, now).unwrap();
        }
    }

    #[test]
    fn each_peer_has_a_minutes_budget_refilled_evenly_and_refunded_when_unasked() {
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        // 3 a minute: one every 20 s.
        let mut budgets = PeerBudgets::new(10, 3, 100);
        let a = peer("198.51.100.7");
        for _ in 0..3 {
            budgets.take(&a, at(0)).unwrap();
            budgets.give_back(&a, false, at(0));
        }
        assert_eq!(budgets.take(&a, at(0)), Err(Shed::PerMinute(3)));
        assert_eq!(budgets.take(&a, at(19)), Err(Shed::PerMinute(3)));
        budgets.take(&a, at(20)).expect("one more 20 s later");
        // Not asked after all (its queue was full, say): given back whole.
        budgets.give_back(&a, true, at(20));
        budgets.take(&a, at(20)).expect("the refund is there");
        budgets.give_back(&a, false, at(20));
        assert_eq!(budgets.take(&a, at(20)), Err(Shed::PerMinute(3)));
        // A minute after, full again, and forgotten once nothing is under way.
        budgets.take(&a, at(80)).unwrap();
        budgets.give_back(&a, true, at(80));
        assert!(budgets.entries.is_empty());
    }

    #[test]
    fn the_table_of_peers_is_bounded() {
        let now = Instant::now();
        let mut budgets = PeerBudgets::new(1, 60, 8);
        let busy = peer("192.0.2.200");
        budgets.take(&busy, now).unwrap();
        for i in 0..100 {
            let p = peer(&format!("192.0.2.{i}"));
            budgets.take(&p, now).unwrap();
            budgets.give_back(&p, false, now);
            assert!(budgets.entries.len() <= 8);
        }
        // Forgetting idle peers keeps those with something under way.
        assert_eq!(budgets.take(&busy, now), Err(Shed::AtOnce(1)));
    }

    #[test]
    fn the_queue_is_bounded_and_fifo_and_one_peer_cannot_fill_it() {
        let gate = Gate::new(Limits {
            per_peer_at_once: 2,
            per_peer_per_minute: 1000,
            at_once: 1,
            waiting: 2,
        });
        let (a, b, c) = (
            peer("203.0.113.1"),
            peer("203.0.113.2"),
            peer("203.0.113.3"),
        );
        let first = poll_once(std::pin::pin!(gate.enter(&a))).unwrap().unwrap();
        let mut second = std::pin::pin!(gate.enter(&a));
        assert!(poll_once(second.as_mut()).is_none(), "waits its turn");
        // `a` holds two: a third is shed, leaving the queue to others.
        assert_eq!(
            poll_once(std::pin::pin!(gate.enter(&a))).unwrap().err(),
            Some(Shed::AtOnce(2))
        );
        let mut third = std::pin::pin!(gate.enter(&b));
        assert!(poll_once(third.as_mut()).is_none());
        assert_eq!(gate.load(), (1, 2));
        // The queue is full: shed at once.
        assert_eq!(
            poll_once(std::pin::pin!(gate.enter(&c))).unwrap().err(),
            Some(Shed::QueueFull {
                running: 1,
                waiting: 2
            })
        );
        // In the order they came.
        drop(first);
        let second = poll_once(second.as_mut()).unwrap().unwrap();
        assert!(poll_once(third.as_mut()).is_none());
        assert_eq!(gate.load(), (1, 1));
        drop(second);
        let third = poll_once(third.as_mut()).unwrap().unwrap();
        assert_eq!(gate.load(), (1, 0));
        drop(third);
        assert_eq!(gate.load(), (0, 0));
        // Every turn was given back to its peer, unasked: nothing is left.
        assert!(lock(&gate.state).peers.entries.is_empty());
    }

    #[test]
    fn a_request_that_goes_away_while_queued_leaves_the_queue() {
        let gate = Gate::new(Limits {
            per_peer_at_once: 1,
            per_peer_per_minute: 1000,
            at_once: 1,
            waiting: 1,
        });
        let (a, b) = (peer("203.0.113.1"), peer("203.0.113.2"));
        let first = poll_once(std::pin::pin!(gate.enter(&a))).unwrap().unwrap();
        {
            let mut queued = std::pin::pin!(gate.enter(&b));
            assert!(poll_once(queued.as_mut()).is_none());
            assert_eq!(gate.load(), (1, 1));
        }
        assert_eq!(gate.load(), (1, 0));
        let mut again = std::pin::pin!(gate.enter(&b));
        assert!(
            poll_once(again.as_mut()).is_none(),
            "b's share was given back"
        );
        drop(first);
        assert!(poll_once(again.as_mut()).unwrap().is_ok());
    }

    #[test]
    fn refusals_are_remembered_briefly_apart_and_never_push_out_active_tokens() {
        let oauth = OAuth::issuer("https://i.example").max_cached_tokens(10);
        let digest = |i: u32| {
            let mut d = [0; 32];
            d[..4].copy_from_slice(&i.to_be_bytes());
            d
        };
        let far = Instant::now() + Duration::from_secs(3600);
        oauth.remember(digest(0), &Ok(Caller::new("alice")), far);
        for i in 1..200 {
            oauth.remember(digest(i), &Err(AuthError::invalid_token("no")), far);
        }
        assert_eq!(
            oauth.cached(&digest(0)).unwrap().unwrap().subject(),
            "alice"
        );
        assert!(lock(&oauth.inner.refused).entries.len() <= 10);
        assert!(matches!(oauth.cached(&digest(199)), Some(Err(_))));
        // A refusal is kept NEGATIVE_TTL at most, whatever `until` said.
        let (_, until) = lock(&oauth.inner.refused).entries[&digest(199)].clone();
        assert!(until <= Instant::now() + NEGATIVE_TTL);
        let stats = oauth.stats();
        assert_eq!(stats["cachedTokens"], 1);
        assert_eq!(stats["introspectionsShed"], 0);
    }

    #[test]
    fn the_limits_are_settings_with_their_defaults() {
        let oauth = OAuth::issuer("https://i.example");
        assert_eq!(oauth.inner.gate.limits, Limits::default());
        let set = oauth
            .introspections_per_peer(0, 0)
            .introspection_queue(3, 5);
        assert_eq!(
            set.inner.gate.limits,
            Limits {
                per_peer_at_once: 1,
                per_peer_per_minute: 1,
                at_once: 3,
                waiting: 5,
            }
        );
        assert_eq!(set.inner.gate.permits.available_permits(), 3);
        let reason = Shed::AtOnce(4).reason(&peer("203.0.113.9"));
        assert!(reason.contains("peer 203.0.113.9"), "{reason}");
        assert!(reason.contains("introspections_per_peer"), "{reason}");
    }

    #[test]
    fn the_token_cache_is_bounded_and_forgets_what_ends_first() {
        let mut cache = TokenCache::default();
        let now = Instant::now();
        for i in 0..100u8 {
            let mut digest = [0; 32];
            digest[0] = i;
            let until = now + Duration::from_secs(60 + u64::from(i));
            cache.insert(digest, Ok(Caller::new("a")), until, 10);
            assert!(cache.entries.len() <= 10);
        }
        let mut last = [0; 32];
        last[0] = 99;
        assert!(cache.get(&last).is_some());
        // An answer already past its time is not kept.
        let mut past = [0; 32];
        past[1] = 1;
        cache.insert(past, Ok(Caller::new("b")), now, 10);
        assert!(cache.get(&past).is_none());
    }
}

//! An OAuth 2.1 resource server (HAIP.md §17.1; feature `oauth`).
//!
//! The authorization server (the issuer) is found through its metadata
//! (RFC 8414, else OpenID discovery), its signing keys through its JWKS,
//! cached and refetched when a token names a key the cache lacks, at most
//! once per refresh interval. Opaque tokens are checked by token
//! introspection (RFC 7662) when it is configured, each answer cached until
//! the token expires.

use std::collections::HashMap;
use std::fmt;
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

/// The longest token looked at; a longer one is refused unread.
const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// The largest metadata, JWKS or introspection answer read from the issuer.
const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;
/// How long an inactive or refused introspection answer is remembered.
const NEGATIVE_TTL: Duration = Duration::from_secs(30);
/// How long an active introspection answer without `exp` is remembered.
const UNDATED_TTL: Duration = Duration::from_secs(300);
/// Introspection requests to the issuer at once.
const INTROSPECTIONS_AT_ONCE: usize = 8;

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
///   caches them, fetches them again when a token names a key it does not
///   know (at most once per [refresh interval](OAuth::jwks_refresh_interval),
///   whatever arrives), and keeps serving with the keys it has while the
///   issuer cannot be reached;
/// - accepts a JWT when its `alg` is that of the issuer's key named by
///   `kid` (never a symmetric one), its signature verifies, `iss` is the
///   issuer, `aud` names the resource (or another
///   [audience](OAuth::audience)), and `exp` / `nbf` hold (60 s leeway);
/// - reads the caller's scopes from `scope` (space-separated) or `scp`, and
///   its subject from `sub` (else `client_id`);
/// - with [introspection](OAuth::introspection), checks tokens that are not
///   JWTs at the issuer (RFC 7662), remembering each answer until the token
///   expires (at most [`max_cached_tokens`](OAuth::max_cached_tokens)).
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
    refresh_interval: Duration,
    key_lifetime: Duration,
    fetch_timeout: Duration,
    max_cached_tokens: usize,
    client: OnceLock<reqwest::Client>,
    keys: Mutex<Keys>,
    /// One fetch of the issuer's documents at a time.
    fetching: tokio::sync::Mutex<()>,
    introspecting: tokio::sync::Semaphore,
    tokens: Mutex<TokenCache>,
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
        refresh_interval: Duration,
        max_cached_tokens: usize,
    ) -> Inner {
        Inner {
            issuer,
            resource,
            audiences,
            introspection,
            refresh_interval,
            key_lifetime: Duration::from_secs(3600),
            fetch_timeout: Duration::from_secs(5),
            max_cached_tokens,
            client: OnceLock::new(),
            keys: Mutex::new(Keys::default()),
            fetching: tokio::sync::Mutex::new(()),
            introspecting: tokio::sync::Semaphore::new(INTROSPECTIONS_AT_ONCE),
            tokens: Mutex::new(TokenCache::default()),
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
    /// When a fetch was last tried (the rate limit).
    attempted: Option<Instant>,
    /// Bumped by every fetch that succeeds.
    generation: u64,
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
                Duration::from_secs(30),
                10_000,
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
                    old.refresh_interval,
                    old.max_cached_tokens,
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

    /// The least time between two fetches of the issuer's keys caused by
    /// tokens naming unknown keys (default 30 s): a flood of made-up `kid`s
    /// costs one fetch per interval.
    pub fn jwks_refresh_interval(self, interval: Duration) -> OAuth {
        self.edit(|inner| inner.refresh_interval = interval)
    }

    /// How many introspection answers are remembered at most (default
    /// 10 000).
    pub fn max_cached_tokens(self, max: usize) -> OAuth {
        self.edit(|inner| inner.max_cached_tokens = max.max(1))
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
    /// they were fetched, tokens introspected and answers remembered.
    pub(crate) fn stats(&self) -> Value {
        let cached = self
            .inner
            .tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entries
            .len();
        serde_json::json!({
            "issuer": self.inner.issuer,
            "resource": self.resource_url(),
            "keys": self.key_count(),
            "jwksFetches": self.jwks_fetches(),
            "introspections": self.introspections(),
            "cachedTokens": cached,
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
        fetchable(&issuer).map_err(|why| invalid("oauth_issuer", why))?;
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
        self.client().map_err(|e| invalid("oauth_issuer", e))?;
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
            Refresh::Limited => {}
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
    /// must then be configured).
    pub async fn verify(&self, token: &str) -> Result<Caller, AuthError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(AuthError::invalid_token(format!(
                "the token is over {MAX_TOKEN_BYTES} bytes"
            )));
        }
        match jsonwebtoken::decode_header(token) {
            Ok(header) => self.verify_jwt(token, header).await,
            Err(_) if self.inner.introspection.is_some() => self.introspect(token).await,
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
    /// `alg`), fetching the keys again when none is known, at most once per
    /// refresh interval.
    async fn key_for(&self, kid: Option<&str>, alg: Algorithm) -> Result<Arc<Key>, AuthError> {
        for attempt in 0..2 {
            let (found, stale) = {
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
                // (the others within the interval do not spawn one each).
                let stale = keys
                    .fetched
                    .is_some_and(|at| at.elapsed() > self.inner.key_lifetime)
                    && keys
                        .attempted
                        .is_none_or(|at| at.elapsed() >= self.inner.refresh_interval);
                (found, stale)
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
            match self.refresh().await {
                Refresh::Fetched => {}
                Refresh::Limited => break,
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
    /// ended since this one was asked for, or one was tried within the
    /// refresh interval.
    async fn refresh(&self) -> Refresh {
        let generation = self.lock_keys().generation;
        let _one = self.inner.fetching.lock().await;
        {
            let mut keys = self.lock_keys();
            if keys.generation != generation {
                return Refresh::Fetched;
            }
            // Until the keys were fetched once (the issuer down when the
            // server started, say), tried again every second at most.
            let interval = if keys.fetched.is_some() {
                self.inner.refresh_interval
            } else {
                self.inner.refresh_interval.min(Duration::from_secs(1))
            };
            if keys.attempted.is_some_and(|at| at.elapsed() < interval) {
                return Refresh::Limited;
            }
            keys.attempted = Some(Instant::now());
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
    ) -> Result<(Url, Option<Url>, HashMap<String, Arc<Key>>, Vec<Arc<Key>>), String> {
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
            return Err(format!("the JWKS at {jwks_uri} has no `keys` array"));
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
            return Err(format!(
                "the JWKS at {jwks_uri} has no signature key haip can use"
            ));
        }
        Ok((jwks_uri, introspection, by_kid, unnamed))
    }

    /// The issuer's `jwks_uri` and `introspection_endpoint`, from its RFC 8414
    /// metadata, else its OpenID discovery document.
    async fn discover(&self) -> Result<(Url, Option<Url>), String> {
        let issuer = Url::parse(&self.inner.issuer).map_err(|e| e.to_string())?;
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
                return Err(format!(
                    "the metadata at {url} names issuer {}, not {:?} (RFC 8414 §3.3)",
                    document.get("issuer").unwrap_or(&Value::Null),
                    self.inner.issuer
                ));
            }
            let endpoint = |name: &str| -> Result<Option<Url>, String> {
                let Some(text) = document.get(name).and_then(Value::as_str) else {
                    return Ok(None);
                };
                let url = Url::parse(text).map_err(|e| format!("`{name}` {text:?}: {e}"))?;
                fetchable(&url).map_err(|e| format!("`{name}`: {e}"))?;
                Ok(Some(url))
            };
            let Some(jwks_uri) = endpoint("jwks_uri")? else {
                return Err(format!("the metadata at {url} has no `jwks_uri`"));
            };
            return Ok((jwks_uri, endpoint("introspection_endpoint")?));
        }
        Err(format!("no issuer metadata: {}", why.join("; ")))
    }

    fn client(&self) -> Result<&reqwest::Client, String> {
        if let Some(client) = self.inner.client.get() {
            return Ok(client);
        }
        let client =
            build_client(self.inner.fetch_timeout).map_err(|e| format!("no HTTP client: {e}"))?;
        Ok(self.inner.client.get_or_init(|| client))
    }

    /// GET `url` as JSON (`200` only, at most `MAX_DOCUMENT_BYTES`).
    async fn get(&self, url: &Url) -> Result<Value, String> {
        fetchable(url)?;
        let response = self
            .client()?
            .get(url.clone())
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        json_of(url, response).await
    }

    /// RFC 7662: the issuer's word on an opaque token, remembered.
    async fn introspect(&self, token: &str) -> Result<Caller, AuthError> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(known) = self.cached(&digest) {
            return known;
        }
        let _permit = self
            .inner
            .introspecting
            .acquire()
            .await
            .map_err(|_| AuthError::invalid_token("shutting down"))?;
        // Another request may have asked while this one waited.
        if let Some(known) = self.cached(&digest) {
            return known;
        }
        let (result, until) = self.ask_issuer(token).await;
        let mut cache = self
            .inner
            .tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cache.insert(digest, result.clone(), until, self.inner.max_cached_tokens);
        result
    }

    fn cached(&self, digest: &[u8; 32]) -> Option<Result<Caller, AuthError>> {
        self.inner
            .tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(digest)
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
            Err(why) => return (Err(AuthError::invalid_token(why)), Instant::now()),
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
            Err(e) => Err(format!("{endpoint}: {e}")),
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
    Fetched,
    Limited,
    Failed(String),
}

/// `https`, or `http` to a loopback host.
fn fetchable(url: &Url) -> Result<(), String> {
    match url.scheme() {
        "https" => Ok(()),
        "http" if url.host_str().is_some_and(is_loopback) => Ok(()),
        "http" => Err(format!(
            "{url}: plain http is allowed to loopback addresses only; use https"
        )),
        other => Err(format!("{url}: the scheme {other:?} is not http(s)")),
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
async fn json_of(url: &Url, mut response: reqwest::Response) -> Result<Value, String> {
    if !response.status().is_success() {
        return Err(format!("{url}: HTTP {}", response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| format!("{url}: {e}"))? {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(format!(
                "{url}: the answer is over {MAX_DOCUMENT_BYTES} bytes"
            ));
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| format!("{url}: not JSON ({e})"))
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

impl Authenticator for OAuth {
    fn authenticate<'a>(&'a self, token: Option<&'a str>) -> AuthFuture<'a> {
        Box::pin(async move {
            self.identify(token)
                .await
                .map(|caller| caller.subject().to_owned())
        })
    }

    fn identify<'a>(&'a self, token: Option<&'a str>) -> IdentifyFuture<'a> {
        Box::pin(async move {
            match token {
                Some(token) if !token.is_empty() => self.verify(token).await,
                _ => Err(AuthError::missing_token()),
            }
        })
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
            .field("jwks_refresh_interval", &self.inner.refresh_interval)
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

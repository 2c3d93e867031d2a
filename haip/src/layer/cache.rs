//! [`Cache`]: results of idempotent tools (not destructive ones), bounded in
//! bytes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Call, Layer, Next};
use crate::context::Caller;
use crate::hash::FastMap;
use crate::tool::ToolError;

/// What one entry costs beside its key and its value's JSON.
const ENTRY_OVERHEAD: usize = 96;

/// Keeps the results of tools marked idempotent
/// ([`ToolAnnotations::idempotent`](crate::ToolAnnotations::idempotent), or
/// `#[haip_tool(idempotent)]`) and answers the same call again from them.
///
/// - **The same call** is the same tool with the same params (compared as
///   canonical JSON: keys sorted, so `{"a":1,"b":2}` and `{"b":2,"a":1}`
///   are one), by the same authorization: a caller never gets a result
///   computed for another authorization, unless the cache is
///   [`shared`](Self::shared). See [The key](#the-key).
/// - **Bounded:** entries cost their key's and their result's JSON bytes;
///   beyond `max_bytes` the least recently used go. A result larger than a
///   quarter of `max_bytes` is not kept.
/// - **Fresh:** an entry is used for [`ttl`](Self::ttl) (5 minutes by
///   default).
/// - Only successful results are kept; calls of other tools pass through.
///   The params are the ones the client sent (before later layers rewrite
///   them), checked by the tool's schema before a result is kept.
/// - **Never a destructive tool**: a tool that also
///   [declares itself destructive](crate::ToolAnnotations::declares_destructive)
///   (`#[haip_tool(idempotent, destructive)]`, such as `delete_bucket`)
///   runs every time. Idempotent means a second call changes nothing more,
///   not that it need not run: the bucket made again since must be deleted
///   again, and the caller must hear whether it was.
///
/// A `Cache` is a handle: clone it to keep counting its hits after giving it
/// to the builder.
///
/// ```
/// use std::time::Duration;
/// use haip::layer::Cache;
///
/// let cache = Cache::new(16 << 20).ttl(Duration::from_secs(60));
/// let builder = haip::Server::builder().layer(cache.clone());
/// # drop(builder);
/// assert_eq!(cache.hits(), 0);
/// ```
///
/// A tool that asks its user questions, or whose result depends on the time,
/// should not be marked idempotent.
///
/// # The key
///
/// A tool reads its caller from [`Context::caller`](crate::Context::caller):
/// the subject, the scopes, the token's claims. Whatever of these the key
/// leaves out, two callers differing only there would share a result, so by
/// default the key holds all of it:
///
/// - the **subject**;
/// - the **scopes**, sorted (the same set in any order is one key);
/// - **every claim** of the token, compared as canonical JSON, but for those
///   in [`PER_TOKEN_CLAIMS`](Self::PER_TOKEN_CLAIMS): `exp`, `iat`, `nbf`,
///   `jti` (RFC 7519: when the token ends, was issued, starts; its own id),
///   `auth_time`, `nonce`, `at_hash`, `c_hash`, `s_hash` (OpenID Connect:
///   when the user signed in, the value of the request that asked for the
///   token, hashes of other tokens). These change with every token issued to
///   the same caller and say nothing of what it may do: kept, they would make
///   every new token miss. A tool whose result depends on one of them should
///   not be cached.
///
/// Every part is length-prefixed, so no two authorizations (or a subject
/// posing as part of a tool name) can share a key. The cost: each entry's key
/// holds the caller's claims (counted in `max_bytes`), and a claim that
/// changes per token beyond those above (a vendor's token id, a session id)
/// makes every new token miss. [`key_claims`](Self::key_claims) names the
/// claims that matter instead:
///
/// ```
/// use haip::layer::Cache;
///
/// // Results depend on the subject, its scopes and its `tenant`, nothing else.
/// let cache = Cache::new(16 << 20).key_claims(["tenant"]);
/// let builder = haip::Server::builder().layer(cache);
/// # drop(builder);
/// ```
///
/// [`shared`](Self::shared) keys on nothing of the caller at all.
#[derive(Clone)]
pub struct Cache {
    inner: Arc<Inner>,
}

struct Inner {
    max_bytes: usize,
    ttl: Duration,
    shared: bool,
    /// The claims in the key (sorted, no duplicates); `None`: every claim
    /// but [`Cache::PER_TOKEN_CLAIMS`].
    key_claims: Option<Arc<[String]>>,
    entries: Mutex<Entries>,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// The entries, and their order of use (oldest first).
#[derive(Default)]
struct Entries {
    by_key: FastMap<String, Entry>,
    by_use: BTreeMap<u64, String>,
    bytes: usize,
    clock: u64,
}

struct Entry {
    value: Value,
    bytes: usize,
    used: u64,
    until: Instant,
}

impl Cache {
    /// The claims a key leaves out unless [`key_claims`](Self::key_claims)
    /// names them: they change with every token issued to the same caller,
    /// not with what it may do. See [The key](Self#the-key).
    pub const PER_TOKEN_CLAIMS: &'static [&'static str] = &[
        "exp",
        "iat",
        "nbf",
        "jti",
        "auth_time",
        "nonce",
        "at_hash",
        "c_hash",
        "s_hash",
    ];

    /// A cache of at most `max_bytes` (keys and results as JSON).
    pub fn new(max_bytes: usize) -> Cache {
        Cache {
            inner: Arc::new(Inner {
                max_bytes,
                ttl: Duration::from_secs(300),
                shared: false,
                key_claims: None,
                entries: Mutex::new(Entries::default()),
                hits: AtomicU64::new(0),
                misses: AtomicU64::new(0),
            }),
        }
    }

    /// How long a result is used (5 minutes by default).
    pub fn ttl(self, ttl: Duration) -> Cache {
        self.rebuilt(|inner| inner.ttl = ttl)
    }

    /// One entry per call for every caller: for tools whose results do not
    /// depend on who asks. Nothing of the caller is in the key, whatever
    /// [`key_claims`](Self::key_claims) says.
    pub fn shared(self) -> Cache {
        self.rebuilt(|inner| inner.shared = true)
    }

    /// Keys results on the caller's subject, its scopes and only these claims
    /// of its token (absent and `null` told apart), instead of every claim
    /// but [`PER_TOKEN_CLAIMS`](Self::PER_TOKEN_CLAIMS): for servers whose
    /// tools read a known few (a tenant, an organisation), when other claims
    /// change from one token to the next. No claims at all (`[]`): the
    /// subject and the scopes. A claim left out here must not change what a
    /// cached tool returns: callers differing only there share results.
    pub fn key_claims<I, S>(self, claims: I) -> Cache
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut claims: Vec<String> = claims.into_iter().map(Into::into).collect();
        claims.sort_unstable();
        claims.dedup();
        self.rebuilt(|inner| inner.key_claims = Some(claims.into()))
    }

    fn rebuilt(self, change: impl FnOnce(&mut Inner)) -> Cache {
        let mut inner = Inner {
            max_bytes: self.inner.max_bytes,
            ttl: self.inner.ttl,
            shared: self.inner.shared,
            key_claims: self.inner.key_claims.clone(),
            entries: Mutex::new(Entries::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        };
        change(&mut inner);
        Cache {
            inner: Arc::new(inner),
        }
    }

    /// Calls answered from the cache.
    pub fn hits(&self) -> u64 {
        self.inner.hits.load(Relaxed)
    }

    /// Calls of idempotent tools that ran.
    pub fn misses(&self) -> u64 {
        self.inner.misses.load(Relaxed)
    }

    /// The bytes its entries cost now.
    pub fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }

    /// The entries kept now.
    pub fn len(&self) -> usize {
        self.inner.lock().by_key.len()
    }

    /// Whether it keeps no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("max_bytes", &self.inner.max_bytes)
            .field("ttl", &self.inner.ttl)
            .field("shared", &self.inner.shared)
            .field("key_claims", &self.inner.key_claims)
            .finish_non_exhaustive()
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, key: &str, now: Instant) -> Option<Value> {
        let mut entries = self.lock();
        let entries = &mut *entries;
        let entry = entries.by_key.get_mut(key)?;
        if entry.until <= now {
            entries.remove(key);
            return None;
        }
        entries.clock += 1;
        let used = std::mem::replace(&mut entry.used, entries.clock);
        let value = entry.value.clone();
        if let Some(k) = entries.by_use.remove(&used) {
            entries.by_use.insert(entries.clock, k);
        }
        Some(value)
    }

    fn put(&self, key: String, value: Value, value_bytes: usize, now: Instant) {
        let bytes = key.len() + value_bytes + ENTRY_OVERHEAD;
        if bytes > self.max_bytes / 4 {
            return;
        }
        let mut entries = self.lock();
        entries.remove(&key);
        while entries.bytes + bytes > self.max_bytes {
            let Some((_, oldest)) = entries.by_use.pop_first() else {
                break;
            };
            if let Some(gone) = entries.by_key.remove(&oldest) {
                entries.bytes -= gone.bytes;
            }
        }
        entries.clock += 1;
        let used = entries.clock;
        entries.by_use.insert(used, key.clone());
        entries.bytes += bytes;
        entries.by_key.insert(
            key,
            Entry {
                value,
                bytes,
                used,
                until: now + self.ttl,
            },
        );
    }
}

impl Entries {
    fn remove(&mut self, key: &str) {
        if let Some(gone) = self.by_key.remove(key) {
            self.by_use.remove(&gone.used);
            self.bytes -= gone.bytes;
        }
    }
}

impl Layer for Cache {
    async fn call(&self, call: Call, next: Next) -> Result<Value, ToolError> {
        let hints = call.tool().annotations();
        if hints.idempotent_hint != Some(true) || hints.declares_destructive() {
            return next.run(call).await;
        }
        let inner = &self.inner;
        let caller = if inner.shared { None } else { call.caller() };
        let key = key_of(
            call.name(),
            caller,
            inner.key_claims.as_deref(),
            call.params(),
        );
        if let Some(value) = inner.get(&key, Instant::now()) {
            inner.hits.fetch_add(1, Relaxed);
            return Ok(value);
        }
        inner.misses.fetch_add(1, Relaxed);
        let value = next.run(call).await?;
        let value_bytes = crate::protocol::json_len(&value);
        inner.put(key, value.clone(), value_bytes, Instant::now());
        Ok(value)
    }
}

/// The key of a call: the tool, the caller's authorization (see
/// [The key](Cache#the-key); `None`: a shared cache, or no authentication)
/// and the params as canonical JSON. `claims`: the claims to key on (`None`:
/// every one but [`Cache::PER_TOKEN_CLAIMS`]).
///
/// Every part but the last is length-prefixed (`#len\nbytes\n`), and every
/// list is preceded by its count (`#n\n`), so the key decodes back into its
/// parts: no two calls share one.
pub(super) fn key_of(
    tool: &str,
    caller: Option<&Caller>,
    claims: Option<&[String]>,
    params: &Value,
) -> String {
    let mut key = String::with_capacity(64);
    part(&mut key, tool);
    match caller {
        None => key.push_str("-\n"),
        Some(caller) => {
            key.push_str("+\n");
            part(&mut key, caller.subject());
            count(&mut key, caller.scopes().len());
            for scope in caller.scopes() {
                part(&mut key, scope);
            }
            let all = caller.claims();
            let mut names: Vec<&str> = match claims {
                Some(named) => named
                    .iter()
                    .map(String::as_str)
                    .filter(|name| all.contains_key(*name))
                    .collect(),
                None => all
                    .keys()
                    .map(String::as_str)
                    .filter(|name| !Cache::PER_TOKEN_CLAIMS.contains(name))
                    .collect(),
            };
            // The claims' map keeps its keys in order only without serde_json's
            // `preserve_order`, which another crate may turn on.
            names.sort_unstable();
            count(&mut key, names.len());
            let mut value = String::new();
            for name in names {
                part(&mut key, name);
                value.clear();
                canonical(&all[name], &mut value);
                part(&mut key, &value);
            }
        }
    }
    canonical(params, &mut key);
    key
}

/// `text` as `#len\ntext\n`.
fn part(key: &mut String, text: &str) {
    count(key, text.len());
    key.push_str(text);
    key.push('\n');
}

/// `n` as `#n\n`.
fn count(key: &mut String, n: usize) {
    key.push('#');
    key.push_str(itoa::Buffer::new().format(n));
    key.push('\n');
}

/// `value` as JSON with every object's keys in order.
pub(super) fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(key.as_str()).unwrap_or_default());
                out.push(':');
                canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

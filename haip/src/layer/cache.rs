//! [`Cache`]: results of idempotent tools, bounded in bytes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Call, Layer, Next};
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
///   are one), from the same subject: a caller never gets a result computed
///   for another, unless the cache is [`shared`](Self::shared).
/// - **Bounded:** entries cost their key's and their result's JSON bytes;
///   beyond `max_bytes` the least recently used go. A result larger than a
///   quarter of `max_bytes` is not kept.
/// - **Fresh:** an entry is used for [`ttl`](Self::ttl) (5 minutes by
///   default).
/// - Only successful results are kept; calls of other tools pass through.
///   The params are the ones the client sent (before later layers rewrite
///   them), checked by the tool's schema before a result is kept.
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
#[derive(Clone)]
pub struct Cache {
    inner: Arc<Inner>,
}

struct Inner {
    max_bytes: usize,
    ttl: Duration,
    shared: bool,
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
    /// A cache of at most `max_bytes` (keys and results as JSON).
    pub fn new(max_bytes: usize) -> Cache {
        Cache {
            inner: Arc::new(Inner {
                max_bytes,
                ttl: Duration::from_secs(300),
                shared: false,
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
    /// depend on who asks.
    pub fn shared(self) -> Cache {
        self.rebuilt(|inner| inner.shared = true)
    }

    fn rebuilt(self, change: impl FnOnce(&mut Inner)) -> Cache {
        let mut inner = Inner {
            max_bytes: self.inner.max_bytes,
            ttl: self.inner.ttl,
            shared: self.inner.shared,
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
        if call.tool().annotations().idempotent_hint != Some(true) {
            return next.run(call).await;
        }
        let inner = &self.inner;
        let subject = if inner.shared { None } else { call.subject() };
        let key = key_of(call.name(), subject, call.params());
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

/// The key of a call: the tool, the subject (if any) and the params as
/// canonical JSON, each part length-prefixed so that no two calls share one.
pub(super) fn key_of(tool: &str, subject: Option<&str>, params: &Value) -> String {
    let mut key = String::with_capacity(64);
    for part in [Some(tool), subject] {
        match part {
            Some(part) => {
                key.push_str(itoa::Buffer::new().format(part.len()));
                key.push(':');
                key.push_str(part);
            }
            None => key.push('-'),
        }
        key.push('\n');
    }
    canonical(params, &mut key);
    key
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

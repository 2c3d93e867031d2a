//! This instance's lease: taken and refreshed every [`LEASE_REFRESH`] with
//! the counts `/stats` sums over the live instances, given up on a clean
//! stop, and read to tell whether another instance lives.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use redis::AsyncCommands;
use tokio_util::sync::CancellationToken;

use super::conn::Conn;
use super::keys::{INSTANCES, lease_key};
use super::{IO_TIMEOUT, LEASE_REFRESH, LEASE_TTL, RedisSessionStore};
use crate::session::ResumeRefused;

impl RedisSessionStore {
    /// How long the lease of instance `peer` lasts without a refresh:
    /// `None` once it has expired (the instance is taken for dead). `Err`
    /// when Redis cannot say.
    pub(crate) async fn lease_left(&self, peer: &str) -> Result<Option<Duration>, ResumeRefused> {
        let Some(mut conn) = self.conn.get().cloned().filter(|_| self.is_healthy()) else {
            return Err(ResumeRefused::StoreUnavailable);
        };
        let read = tokio::time::timeout(
            IO_TIMEOUT,
            redis::cmd("PTTL")
                .arg(lease_key(peer))
                .query_async::<i64>(&mut conn),
        )
        .await;
        match read {
            // -2: no such key; -1 (no expiry) cannot happen to a lease.
            Ok(Ok(ms)) if ms >= 0 => Ok(Some(Duration::from_millis(ms as u64))),
            Ok(Ok(_)) => Ok(None),
            _ => Err(ResumeRefused::StoreUnavailable),
        }
    }

    /// What this instance publishes with its lease, summed over the live
    /// instances in `/stats`.
    fn counts(&self) -> serde_json::Value {
        let Some(shared) = self.shared.get() else {
            return serde_json::json!({});
        };
        let stats = &shared.stats;
        let total = stats.calls_total.load(Relaxed);
        let ended = stats.calls_ok.load(Relaxed)
            + stats.calls_failed.load(Relaxed)
            + stats.calls_cancelled.load(Relaxed);
        // A relayed connection is counted where its client is connected,
        // not again where its session runs.
        let active = stats.active_connections.load(Relaxed);
        let relayed = stats.relayed_now();
        let opened = stats.total_connections.load(Relaxed);
        let relayed_total = stats.relayed_total();
        serde_json::json!({
            "activeConnections": active.saturating_sub(relayed),
            "detachedSessions": stats.detached_sessions.load(Relaxed),
            "activeCalls": total.saturating_sub(ended),
            "totalConnections": opened.saturating_sub(relayed_total),
        })
    }

    pub(super) async fn lease(&self, conn: &mut Conn) -> redis::RedisResult<()> {
        let key = lease_key(&self.instance);
        let ms = LEASE_TTL.as_millis() as u64;
        let stats = self.counts().to_string();
        // One slot (`{haip}`): one pipeline, in a cluster too.
        redis::pipe()
            .pset_ex(key, stats, ms)
            .ignore()
            .sadd(INSTANCES, &*self.instance)
            .ignore()
            .query_async(conn)
            .await
    }

    /// The `cluster` object of `/stats`: this store's state, the instances
    /// alive, and the sums of their counts, read from Redis.
    pub(crate) async fn stats(&self) -> serde_json::Value {
        let mut out = serde_json::json!({
            "redis": redact(&self.url),
            "reachable": self.is_healthy(),
            "droppedRecords": self.dropped(),
            "unreplicatedRecords": self.unreplicated(),
        });
        let Some(mut conn) = self.conn.get().cloned() else {
            return out;
        };
        let read = tokio::time::timeout(IO_TIMEOUT, async {
            let ids: Vec<String> = conn.smembers(INSTANCES).await?;
            let mut alive = Vec::new();
            let mut sums: BTreeMap<String, u64> = BTreeMap::new();
            for id in ids {
                let lease: Option<String> = conn.get(lease_key(&id)).await?;
                let Some(lease) = lease else {
                    // Gone: forget it.
                    let _: () = conn.srem(INSTANCES, &id).await?;
                    continue;
                };
                if let Ok(serde_json::Value::Object(counts)) = serde_json::from_str(&lease) {
                    for (k, v) in counts {
                        *sums.entry(k).or_default() += v.as_u64().unwrap_or(0);
                    }
                }
                alive.push(id);
            }
            Ok::<_, redis::RedisError>((alive, sums))
        })
        .await;
        if let Ok(Ok((alive, sums))) = read {
            out["instances"] = serde_json::json!(alive);
            out["totals"] = serde_json::json!(sums);
        }
        out
    }

    pub(super) async fn refresh_lease(
        self: Arc<Self>,
        mut conn: Conn,
        shutdown: CancellationToken,
    ) {
        let mut next = LEASE_REFRESH;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(next) => {}
            }
            let refreshed = tokio::time::timeout(IO_TIMEOUT, self.lease(&mut conn)).await;
            let ok = matches!(refreshed, Ok(Ok(())));
            // After a failure, again soon: the lease must not lapse for want
            // of a refresh once Redis is back (another instance would then
            // restore this one's sessions, and they would end here).
            next = if ok { LEASE_REFRESH } else { RETRY };
            if self.healthy.swap(ok, Relaxed) != ok {
                if ok {
                    tracing::info!(url = %self.redacted_url(), "Redis is reachable again");
                } else {
                    tracing::warn!(url = %self.redacted_url(), "Redis is unreachable: sessions go on here, but cannot be resumed on other instances meanwhile");
                }
            }
        }
        // A clean stop gives the lease up at once: this instance's sessions
        // may be restored elsewhere without waiting for it to expire.
        let key = lease_key(&self.instance);
        let _ = tokio::time::timeout(IO_TIMEOUT, conn.del::<_, ()>(key)).await;
    }
}

/// How soon a refresh of the lease that failed is tried again.
const RETRY: Duration = Duration::from_millis(250);

/// A URL without its password, for `/stats`.
pub(super) fn redact(url: &str) -> String {
    // A cluster's seed list is several URLs: each loses its password.
    url.split(',').map(redact_one).collect::<Vec<_>>().join(",")
}

fn redact_one(url: &str) -> String {
    match url.split_once('@') {
        Some((auth, host)) => match auth.rsplit_once(':') {
            Some((scheme_user, _password)) if scheme_user.contains("//") => {
                format!("{scheme_user}:***@{host}")
            }
            _ => format!("{auth}@{host}"),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_redacted_from_every_url() {
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(
            redact("redis://:secret@10.0.0.1:6379/0"),
            "redis://:***@10.0.0.1:6379/0"
        );
        assert_eq!(
            redact("redis://ada:one@10.0.0.1:7000,redis://ada:two@10.0.0.2:7000"),
            "redis://ada:***@10.0.0.1:7000,redis://ada:***@10.0.0.2:7000"
        );
    }
}

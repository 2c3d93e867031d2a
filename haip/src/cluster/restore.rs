//! Restoring a session whose instance died: its records read back under a
//! claim (so that one instance restores it), and the snapshot they make.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use super::keys::{calls_key, claim_key, lease_key, session_key, window_key};
use super::scripts::CLAIM;
use super::{IO_TIMEOUT, RedisSessionStore};
use crate::session::{NotRestored, ResumeRefused, Snapshot};

impl RedisSessionStore {
    /// Restores session `id` for a client of `subject`: claims it (it is
    /// this instance's from then on, and records of it from any other
    /// instance are refused), then reads back what was recorded of it.
    pub(super) async fn restore_from_redis(
        store: Arc<RedisSessionStore>,
        id: String,
        subject: Option<String>,
    ) -> Result<Snapshot, NotRestored> {
        let Some(mut conn) = store.conn.get().cloned() else {
            return Err(NotRestored::Refused(ResumeRefused::StoreUnavailable));
        };
        // Once claimed, other instances relay to this one, whose restoring
        // may not be done: a second restoring of it here waits for the first.
        if !store.begin_restoring(&id) {
            return Err(NotRestored::Refused(ResumeRefused::BeingResumed));
        }
        let fetched = tokio::time::timeout(IO_TIMEOUT, async {
            // Read first, so that a client of another subject claims nothing.
            let (exists, recorded): (bool, Option<String>) = redis::pipe()
                .exists(session_key(&id))
                .hget(session_key(&id), "subject")
                .query_async(&mut conn)
                .await?;
            if !exists {
                return Ok(Err(NotRestored::Refused(ResumeRefused::UnknownSession)));
            }
            if recorded != subject {
                return Ok(Err(NotRestored::Refused(ResumeRefused::SubjectMismatch)));
            }
            // A claim whose instance died with it (restored there, then
            // killed within the claim's life) does not hold the session.
            let mut dead: Vec<String> = Vec::new();
            loop {
                let claimed: redis::Value = redis::cmd("EVAL")
                    .arg(CLAIM)
                    .arg(2)
                    .arg(claim_key(&id))
                    .arg(session_key(&id))
                    .arg(&*store.instance)
                    .arg(CLAIM_MS)
                    .arg(&dead)
                    .query_async(&mut conn)
                    .await?;
                match claimed {
                    redis::Value::Int(1) => break,
                    // What was recorded misses what happened while Redis was
                    // away: restoring it would end calls that ended, and send
                    // again `seq`s the client has seen with other contents.
                    redis::Value::Int(-1) => {
                        return Ok(Err(NotRestored::Refused(ResumeRefused::RecordsLost)));
                    }
                    redis::Value::Int(_) => {
                        return Ok(Err(NotRestored::Refused(ResumeRefused::UnknownSession)));
                    }
                    other => {
                        // Another instance owns it, or holds its claim: the
                        // session is there while its lease lives.
                        let (role, instance): (String, String) = redis::from_redis_value(other)?;
                        let alive: bool = redis::cmd("EXISTS")
                            .arg(lease_key(&instance))
                            .query_async(&mut conn)
                            .await?;
                        if alive {
                            return Ok(Err(if role == "o" {
                                NotRestored::Elsewhere(instance)
                            } else {
                                NotRestored::Refused(ResumeRefused::BeingResumed)
                            }));
                        }
                        // Each answer names an instance not named before:
                        // at most the owner and the holder.
                        if dead.contains(&instance) || dead.len() >= 2 {
                            return Ok(Err(NotRestored::Refused(ResumeRefused::BeingResumed)));
                        }
                        dead.push(instance);
                    }
                }
            }
            let (meta, window, calls): (BTreeMap<String, String>, Vec<Vec<u8>>, Vec<String>) =
                redis::pipe()
                    .hgetall(session_key(&id))
                    .lrange(window_key(&id), 0, -1)
                    .smembers(calls_key(&id))
                    .query_async(&mut conn)
                    .await?;
            Ok::<_, redis::RedisError>(Ok((meta, window, calls)))
        })
        .await;
        let (meta, window, calls) = match fetched {
            Ok(Ok(Ok(found))) => found,
            Ok(Ok(Err(reason))) => {
                store.end_restoring(&id);
                return Err(reason);
            }
            Ok(Err(_)) | Err(_) => {
                store.end_restoring(&id);
                return Err(NotRestored::Refused(ResumeRefused::StoreUnavailable));
            }
        };
        // Restoring ends when the session is registered here (or after
        // `RESTORING_LIMIT`, when it was refused after all).
        Ok(snapshot(&meta, window, calls))
    }

    /// Notes that session `id` is being restored here; `false` if it
    /// already is.
    fn begin_restoring(&self, id: &str) -> bool {
        let now = std::time::Instant::now();
        let mut restoring = self.restoring.lock().unwrap_or_else(|e| e.into_inner());
        if restoring.len() >= RESTORING_SWEEP {
            restoring.retain(|_, since| now.duration_since(*since) < RESTORING_LIMIT);
        }
        match restoring.get(id) {
            Some(since) if now.duration_since(*since) < RESTORING_LIMIT => false,
            _ => {
                restoring.insert(id.to_owned(), now);
                true
            }
        }
    }

    /// Session `id` is no longer being restored here (registered, or not
    /// restored).
    pub(super) fn end_restoring(&self, id: &str) {
        let mut restoring = self.restoring.lock().unwrap_or_else(|e| e.into_inner());
        restoring.remove(id);
    }
}

/// How long a restoring here holds off another of the same session, at
/// most: the round trips of a restoring take at most `IO_TIMEOUT`.
const RESTORING_LIMIT: std::time::Duration = IO_TIMEOUT.saturating_mul(2);

/// How many restorings are remembered before those past their limit (never
/// registered: refused after the snapshot) are swept.
const RESTORING_SWEEP: usize = 1024;

/// The snapshot of what was fetched: the window's envelopes by `seq`, only
/// the run that ends at the newest (a gap, from records lost while Redis was
/// away, cuts off everything older).
fn snapshot(meta: &BTreeMap<String, String>, window: Vec<Vec<u8>>, calls: Vec<String>) -> Snapshot {
    let number = |k: &str| meta.get(k).and_then(|v| v.parse::<u64>().ok());
    let mut by_seq = BTreeMap::new();
    for envelope in window {
        if let Some(seq) = seq_of(&envelope) {
            by_seq.insert(seq, Bytes::from(envelope));
        }
    }
    let newest = by_seq.keys().next_back().copied().unwrap_or(0);
    let next_seq = number("next_seq").unwrap_or(newest + 1).max(newest + 1);
    let mut window: Vec<(u64, Bytes)> = Vec::new();
    let mut expect = newest;
    for (seq, text) in by_seq.into_iter().rev() {
        if seq != expect {
            break;
        }
        window.push((seq, text));
        expect = expect.saturating_sub(1);
    }
    window.reverse();
    Snapshot {
        subject: meta.get("subject").cloned(),
        window,
        next_seq,
        last_rx_seq: number("last_rx").unwrap_or(0),
        open_calls: calls,
        owed: meta.get("owed").cloned().unwrap_or_default(),
        paused: meta
            .get("paused")
            .map(|names| {
                names
                    .split(',')
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// The `seq` of a committed envelope (`"seq":"N"`).
fn seq_of(envelope: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Seq {
        seq: String,
    }
    serde_json::from_slice::<Seq>(envelope)
        .ok()?
        .seq
        .parse()
        .ok()
}

/// How long a claim to restore a session holds it (others answer
/// `session being resumed elsewhere` meanwhile).
const CLAIM_MS: u64 = 10_000;

#[cfg(test)]
mod tests {
    use super::*;

    fn env(seq: u64) -> Vec<u8> {
        format!(r#"{{"id":"x","session":"s","seq":"{seq}","ts":"1","channel":"SYSTEM","type":"PONG","payload":{{}}}}"#).into_bytes()
    }

    #[test]
    fn a_snapshot_keeps_the_run_of_envelopes_ending_at_the_newest() {
        let meta: BTreeMap<String, String> = [
            ("owner", "a"),
            ("subject", "alice"),
            ("next_seq", "8"),
            ("last_rx", "3"),
            ("paused", "AGENT,USER"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        // 1 and 2, then a gap (3 lost), then 4..=7, out of order and repeated.
        let window = [1, 2, 4, 6, 5, 7, 6].into_iter().map(env).collect();
        let snap = snapshot(&meta, window, vec!["c1".into()]);
        let seqs: Vec<u64> = snap.window.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, [4, 5, 6, 7]);
        assert_eq!(snap.paused, ["AGENT", "USER"]);
        assert_eq!(snap.next_seq, 8);
        assert_eq!(snap.last_rx_seq, 3);
        assert_eq!(snap.subject.as_deref(), Some("alice"));
        assert_eq!(snap.open_calls, ["c1"]);
        // Records lost at the end: the newest kept is 7 but 9 was next.
        let mut meta = meta;
        meta.insert("next_seq".into(), "10".into());
        let snap = snapshot(&meta, (1..=7).map(env).collect(), vec![]);
        assert_eq!(snap.next_seq, 10);
        assert_eq!(snap.window.last().map(|(s, _)| *s), Some(7));
    }
}

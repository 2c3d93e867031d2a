//! What every request handler shares: the session core's state, the open
//! stream sessions (targets of upstream POSTs), authentication and CORS.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use super::metrics::Metrics;
use super::with_mcp::McpDoor;
use super::with_oauth::ResourceServer;
use super::with_redis::{Cluster, Published};
use crate::auth::Authenticator;
use crate::context::share::{CallerKey, ShareGuard, Shares};
use crate::session::Shared;
use crate::stats::Door;
use crate::transport::frame::Unit;

pub(crate) struct Hub {
    /// The server's own settings; what sessions read is in `shared.config`.
    pub(crate) config: Arc<super::Config>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) sessions: Sessions,
    /// Bytes of upstream POST bodies being read, and of `/mcp` requests
    /// until answered (`max_inflight_body_bytes`).
    pub(crate) bodies: super::body::BodyBudget,
    /// Bytes of `/mcp` answers not yet taken (`max_inflight_answer_bytes`).
    pub(crate) answers: Arc<super::answer::AnswerBudget>,
    /// Open connections per peer address (`max_connections_per_peer`).
    pub(crate) peers: Peers,
    /// Connected sessions per caller (`max_sessions_per_caller`).
    pub(crate) session_shares: Arc<Shares>,
    pub(crate) auth: Option<Arc<dyn Authenticator>>,
    /// The protected resource metadata's URL, in OAuth mode (docs/protocol.md §17.1).
    pub(crate) resource_metadata: Option<String>,
    /// The OAuth resource server, when on.
    pub(crate) oauth: ResourceServer,
    pub(crate) cors: super::guard::Cors,
    /// The `Host` names the server answers to (`guard.rs`).
    pub(crate) hosts: super::guard::Hosts,
    /// Where the server's routes are on its host (`ServerBuilder::path_prefix`;
    /// empty at the root): the URLs it writes carry it.
    pub(crate) prefix: Arc<str>,
    /// Connections are haip's own (`start`, `serve`): requests carry the
    /// prefix, which is taken off before routing, and their peer address.
    /// A host application (`into_service`) takes the prefix off itself.
    pub(crate) own_listener: bool,
    pub(crate) tracker: TaskTracker,
    /// This instance's name.
    pub(crate) instance: Arc<str>,
    /// The shared session store, when sessions are shared through Redis.
    pub(crate) cluster: Cluster,
    /// The Streamable HTTP MCP endpoint at `/mcp`, when enabled.
    pub(crate) mcp: Option<McpDoor>,
    /// What `GET /metrics` shows.
    pub(crate) metrics: Arc<Metrics>,
}

impl Hub {
    /// Counts a new connection of the caller `key` if `max_sessions` allows
    /// it and the caller's share (`max_sessions_per_caller`) has room; the
    /// guard uncounts it.
    pub(crate) fn admit(&self, key: &CallerKey) -> Result<ConnectionGuard, Crowded> {
        let share = self
            .session_shares
            .take(key)
            .map_err(|over| Crowded::Caller {
                who: key.describe(),
                share: over.share,
            })?;
        let stats = &self.shared.stats;
        if stats.active_connections.fetch_add(1, Relaxed) < self.shared.config.max_sessions as u64 {
            stats.total_connections.fetch_add(1, Relaxed);
            Ok(ConnectionGuard {
                shared: Arc::clone(&self.shared),
                door: None,
                _share: share,
            })
        } else {
            stats.active_connections.fetch_sub(1, Relaxed);
            Err(Crowded::Server)
        }
    }
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Crowded {
    /// `max_sessions` connections are open.
    Server,
    /// The caller holds its whole share of them.
    Caller {
        /// The caller, as [`CallerKey::describe`] names it.
        who: String,
        /// `max_sessions_per_caller`.
        share: usize,
    },
}

impl Crowded {
    /// What the client is told (HTTP).
    pub(crate) fn message(&self) -> String {
        match self {
            Crowded::Server => "Too many sessions".to_owned(),
            Crowded::Caller { who, share } => format!(
                "Too many sessions: {who} already holds {share} (max_sessions_per_caller = {share})"
            ),
        }
    }

    /// The reason of a WebSocket close (at most 123 bytes).
    pub(crate) fn close_reason(&self) -> &'static str {
        match self {
            Crowded::Server => "too many sessions",
            Crowded::Caller { .. } => "too many sessions for this caller (max_sessions_per_caller)",
        }
    }
}

/// One counted connection (`activeConnections`), uncounted when dropped.
pub(crate) struct ConnectionGuard {
    shared: Arc<Shared>,
    /// The door it came in by, once told ([`ConnectionGuard::on`]).
    door: Option<Door>,
    /// Its place in its caller's share.
    _share: ShareGuard,
}

impl ConnectionGuard {
    /// Counts the connection by `door` too (`/metrics`).
    pub(crate) fn on(mut self, door: Door) -> ConnectionGuard {
        self.shared.stats.connected(door);
        self.door = Some(door);
        self
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.shared.stats.active_connections.fetch_sub(1, Relaxed);
        if let Some(door) = self.door {
            self.shared.stats.disconnected(door);
        }
    }
}

/// Open SSE and HTTP-stream sessions, by id, with the subject that opened them.
#[derive(Default)]
pub(crate) struct Sessions {
    open: Arc<Mutex<HashMap<String, Entry>>>,
    /// Where they are published for the other instances (`with_redis.rs`).
    cluster: Cluster,
}

struct Entry {
    subject: Option<String>,
    inbound: mpsc::Sender<Unit>,
}

impl Sessions {
    /// An empty table whose sessions are published through `cluster`.
    pub(crate) fn shared_through(cluster: Cluster) -> Sessions {
        Sessions {
            open: Arc::default(),
            cluster,
        }
    }

    /// Registers a stream session; it is removed when the guard drops.
    pub(crate) fn insert(
        &self,
        id: &str,
        subject: Option<String>,
        inbound: mpsc::Sender<Unit>,
    ) -> SessionEntryGuard {
        let published = self.cluster.publish(id, subject.as_deref());
        self.lock()
            .insert(id.to_owned(), Entry { subject, inbound });
        SessionEntryGuard {
            open: Arc::clone(&self.open),
            id: id.to_owned(),
            published,
        }
    }

    /// How many open sessions `subject` has here.
    pub(crate) fn count_of(&self, subject: Option<&str>) -> usize {
        let open = self.lock();
        open.values()
            .filter(|e| e.subject.as_deref() == subject)
            .count()
    }

    /// The first of `candidates` naming an open session of `subject`, else the
    /// only open session of `subject` (docs/protocol.md §15.4).
    pub(crate) fn target<'a>(
        &self,
        subject: Option<&str>,
        candidates: impl IntoIterator<Item = &'a str>,
    ) -> Option<mpsc::Sender<Unit>> {
        let open = self.lock();
        let mine = |e: &&Entry| e.subject.as_deref() == subject;
        for id in candidates {
            if let Some(entry) = open.get(id).filter(mine) {
                return Some(entry.inbound.clone());
            }
        }
        let mut of_subject = open.values().filter(mine);
        match (of_subject.next(), of_subject.next()) {
            (Some(only), None) => Some(only.inbound.clone()),
            _ => None,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // Entries are whole values; a panic elsewhere cannot leave one half-written.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What the links other instances open here ask of the table (`links.rs`).
#[cfg(feature = "redis")]
impl Sessions {
    /// Open session `id`, if `subject` opened it.
    pub(crate) fn exact(&self, subject: Option<&str>, id: &str) -> Option<mpsc::Sender<Unit>> {
        let open = self.lock();
        let entry = open.get(id)?;
        (entry.subject.as_deref() == subject).then(|| entry.inbound.clone())
    }
}

/// Removes a stream session from [`Sessions`] when its connection ends.
pub(crate) struct SessionEntryGuard {
    open: Arc<Mutex<HashMap<String, Entry>>>,
    id: String,
    /// Its publication for the other instances.
    published: Published,
}

impl Drop for SessionEntryGuard {
    fn drop(&mut self) {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
        self.published.withdraw(&self.id);
    }
}

/// Open connections per peer IP address (docs/protocol.md §18.1).
#[derive(Default)]
pub(crate) struct Peers {
    open: PeerTable,
}

type PeerTable = Arc<Mutex<HashMap<IpAddr, usize>>>;

impl Peers {
    /// Counts a connection from `ip` if the peer has room under `limit`
    /// (`None`: no limit); the guard uncounts it. Loopback peers are not
    /// limited unless `limit_loopback`.
    pub(crate) fn admit(
        &self,
        ip: IpAddr,
        limit: Option<usize>,
        limit_loopback: bool,
    ) -> Option<PeerGuard> {
        let ip = ip.to_canonical();
        let Some(limit) = limit.filter(|_| limit_loopback || !ip.is_loopback()) else {
            return Some(PeerGuard { entry: None });
        };
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(ip).or_insert(0);
        if *count >= limit {
            return None;
        }
        *count += 1;
        Some(PeerGuard {
            entry: Some((Arc::clone(&self.open), ip)),
        })
    }
}

/// One connection counted against its peer, uncounted when dropped.
pub(crate) struct PeerGuard {
    entry: Option<(PeerTable, IpAddr)>,
}

impl Drop for PeerGuard {
    fn drop(&mut self) {
        if let Some((open, ip)) = self.entry.take() {
            let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(count) = open.get_mut(&ip) {
                *count -= 1;
                if *count == 0 {
                    open.remove(&ip);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_limited_per_address_and_loopback_is_exempt_by_default() {
        let peers = Peers::default();
        let far: IpAddr = "203.0.113.7".parse().unwrap();
        let other: IpAddr = "203.0.113.8".parse().unwrap();
        let a = peers.admit(far, Some(2), false).expect("first");
        let b = peers.admit(far, Some(2), false).expect("second");
        assert!(peers.admit(far, Some(2), false).is_none(), "third is over");
        assert!(peers.admit(other, Some(2), false).is_some(), "per address");
        drop(a);
        let c = peers.admit(far, Some(2), false).expect("room again");
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let held: Vec<_> = (0..5)
            .map(|_| {
                peers
                    .admit(local, Some(2), false)
                    .expect("loopback is exempt")
            })
            .collect();
        drop(held);
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        let limited = peers.admit(mapped, Some(1), true).expect("room");
        assert!(
            peers.admit(local, Some(1), true).is_none(),
            "counted, and a mapped address is the same peer"
        );
        assert!(peers.admit(far, None, false).is_some(), "no limit");
        drop((b, c, limited));
        assert!(
            peers.open.lock().unwrap().is_empty(),
            "entries go with their last guard"
        );
    }

    #[test]
    fn upstream_targets_follow_candidates_then_the_only_session() {
        let sessions = Sessions::default();
        let (a_tx, _a) = mpsc::channel(1);
        let (b_tx, _b) = mpsc::channel(1);
        let _ga = sessions.insert("a", Some("alice".into()), a_tx);
        assert!(
            sessions.target(Some("alice"), ["nope"]).is_some(),
            "the only session of alice"
        );
        assert!(
            sessions.target(Some("bob"), ["a"]).is_none(),
            "another subject's session"
        );
        {
            let _gb = sessions.insert("b", Some("alice".into()), b_tx);
            assert!(
                sessions.target(Some("alice"), ["nope"]).is_none(),
                "ambiguous"
            );
            assert!(sessions.target(Some("alice"), ["nope", "b"]).is_some());
        }
        assert!(
            sessions.target(Some("alice"), []).is_some(),
            "b was removed with its guard"
        );
    }
}

//! Sessions shared through Redis (feature `redis`): the [`SessionStore`] of
//! servers that run as several instances.
//!
//! Every instance keeps its live sessions in memory as always, and records in
//! Redis what resuming one elsewhere takes: its committed envelopes (the
//! replay window), its subject and inbound `seq`, and the calls it owes a
//! `TOOL_DONE`. Each instance holds a lease, a key it refreshes every
//! [`LEASE_REFRESH`]; a session whose instance's lease has expired can be
//! restored by any other, its missed envelopes replayed, and each of its calls
//! ended with `TOOL_DONE ERROR INTERNAL_ERROR` "instance lost".
//!
//! Restoring makes the restoring instance the session's `owner` at once
//! (`CLAIM`, one script), and from then on Redis refuses records of it from
//! any other instance (`RECORD` answers which sessions it refused): the
//! fence. A lease can lapse while its instance lives (Redis away or slow
//! for longer than [`LEASE_TTL`]); a session restored elsewhere meanwhile
//! then has a stale copy here, whose next record is refused. Envelopes reach
//! a client only once recorded, so nothing the stale copy makes reaches
//! anyone: it is ended here (see `writer.rs`), and its client, resuming, is
//! relayed to the copy that runs.
//!
//! Redis is one server or a Redis Cluster (`conn.rs`). A session's keys
//! carry its id as their hash tag, so a cluster keeps them in one slot,
//! where one script changes them together; every command and script touches
//! keys of one slot only.
//!
//! Keys (all expire `replay_window_time` after the session's last change;
//! the braces of `haip:s:{session}` are there, the hash tag around the id,
//! and so are those of `{haip}`, the tag of the keys that share one slot;
//! elsewhere `{…}` stands for the value):
//!
//! | key | type | holds |
//! |---|---|---|
//! | `haip:s:{session}` | hash | `owner` (the instance running it; records from any other are refused), `subject`, `next_seq`, `last_rx`, `paused` (channels), `owed` (flow-control credit owed to the client), `lost` (records of it were lost) |
//! | `haip:s:{session}:w` | list | committed envelopes, oldest first (at most 10 × `replay_window_messages`) |
//! | `haip:s:{session}:c` | set | call ids owed a `TOOL_DONE` |
//! | `haip:s:{session}:claim` | string | the instance restoring it (10 s) |
//! | `{haip}:i:{instance}` | string | the instance's lease ([`LEASE_TTL`]) |
//! | `{haip}:open:{subject}` | set | `{session} {instance}` of each open stream session (upstream POST targets) |
//!
//! MCP task records (`{haip}:t:{task}`, `{haip}:t:{task}:q`) are kept by the
//! task store of [`tasks`], on the same connection and lease.
//!
//! Instances talk to each other through one pub/sub channel each,
//! `haip:to:{instance}` (sharded, `SSUBSCRIBE` / `SPUBLISH`, in a cluster): links ([`crate::session::link`]) that relay a client
//! connection to the instance running its session, or forward an upstream
//! POST to the instance holding its stream, and the signals of tasks (kind
//! `S`: answers and cancellations for the instance running a task). Every
//! message is one byte of kind, the link id in 16 hex digits (0 for a task
//! signal), and the body. Each end of a link sends a heartbeat every
//! [`LEASE_REFRESH`]; a link silent for [`LEASE_TTL`] is lost.
//!
//! Recording never blocks a session: records go through a bounded queue to
//! one writer task that sends them in batches, each batch one call of a
//! Lua script (`RECORD`) that applies every session's records in it: one
//! round trip per batch, however many sessions it carries (in a cluster,
//! one call per slot the batch touches, sent at once). When Redis is away,
//! sessions go on working on their instance; records made meanwhile are lost,
//! and restoring answers `session store unavailable` until Redis is back (the
//! connection reconnects by itself, and the writer tries again every
//! `PROBE` in `writer.rs`). Once it is, each session whose records were
//! lost is marked (`lost`, and its `owner` set again if it runs here): while
//! its instance lives it is relayed there as any other, but it is never
//! restored from what was recorded, which misses what happened meanwhile
//! (calls that ended, `seq`s the client saw): restoring it answers
//! `records lost` (`ResumeRefused::RecordsLost`). An instance killed before Redis came back cannot
//! mark its sessions: what it recorded before Redis went away is what another
//! restores.
//!
//! Here: the store, how it connects, and its face as a [`SessionStore`].
//! `writer.rs` queues records and writes them in batches, `links.rs` carries
//! links over the channels (`messages.rs` frames what they carry), `lease.rs`
//! keeps this instance's lease, `restore.rs` restores a session recorded by
//! an instance that died; `scripts.rs` holds the Lua scripts, `keys.rs` the
//! names of the keys above; `tasks/` is the task store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::session::link::{IncomingLink, Link, LinkOpen};
use crate::session::{
    InMemorySessionStore, NotRestored, Record, ResumeRefused, SessionStore, Shared, Snapshot,
    StoreFuture,
};
use crate::session::{TakeoverAddress, Takeovers};

mod conn;
mod keys;
mod lease;
mod links;
mod messages;
mod restore;
mod scripts;
#[cfg_attr(not(feature = "mcp"), path = "without_tasks.rs")]
pub(crate) mod tasks;
mod writer;

use self::conn::{Conn, Target};
use self::links::{INCOMING_QUEUE, LinkEnd};
use self::writer::{Entry, QUEUE};

/// How often an instance refreshes its lease.
pub(crate) const LEASE_REFRESH: Duration = Duration::from_secs(2);
/// How long a lease lasts without a refresh: an instance silent for this
/// long is taken for dead, and its sessions may be restored elsewhere.
pub(crate) const LEASE_TTL: Duration = Duration::from_secs(6);
/// How long one Redis round trip may take before it counts as failed.
const IO_TIMEOUT: Duration = Duration::from_secs(3);

/// The Redis-backed [`SessionStore`].
pub(crate) struct RedisSessionStore {
    local: InMemorySessionStore,
    url: String,
    /// The server, or the cluster's nodes.
    target: Target,
    instance: Arc<str>,
    conn: OnceLock<Conn>,
    queue: mpsc::Sender<Entry>,
    queue_rx: std::sync::Mutex<Option<mpsc::Receiver<Entry>>>,
    /// How long records are kept after a session's last change.
    ttl: Duration,
    /// Envelopes kept per session, at most.
    window_cap: usize,
    /// Records dropped (queue full, or Redis unavailable).
    dropped: AtomicU64,
    /// Replicas each batch waits for (`WAIT`), and how long, when the
    /// operator asks for it (`ServerBuilder::redis_wait`).
    wait: Option<(u32, Duration)>,
    /// Records written that fewer replicas acknowledged in time (counted
    /// as lost).
    unreplicated: AtomicU64,
    /// Sessions whose records were lost (dropped while Redis was away, or
    /// the queue was full), to mark in Redis when it answers again.
    lost: std::sync::Mutex<crate::hash::FastSet<Arc<str>>>,
    /// Sessions here whose records Redis refused (another instance restored
    /// them), until they have ended here; and how many there are, so that
    /// asking costs nothing while there are none.
    fenced: std::sync::Mutex<crate::hash::FastSet<Arc<str>>>,
    fenced_count: std::sync::atomic::AtomicUsize,
    /// Sessions being restored here, since when (see `restore.rs`).
    restoring: std::sync::Mutex<crate::hash::FastMap<String, std::time::Instant>>,
    /// Round trips of the writer, and those that failed (for `/metrics`).
    trips: AtomicU64,
    failed_trips: AtomicU64,
    /// The last round trip to Redis worked.
    healthy: AtomicBool,
    /// The last session id seen, so that a stream of records for one session
    /// does not allocate its id each time.
    last_id: std::sync::Mutex<Option<Arc<str>>>,
    /// The server's counters, published with the lease.
    shared: OnceLock<Arc<Shared>>,
    /// Cancelled when the server shuts down.
    shutdown: OnceLock<CancellationToken>,
    /// Told when the last session here has gone during shutdown.
    emptied: tokio::sync::Notify,
    /// Records queued so far.
    recorded: AtomicU64,
    /// Held while queueing, so that the count and the queue agree.
    recorded_lock: std::sync::Mutex<u64>,
    /// Records written, or given up on, so far (in queue order).
    written: tokio::sync::watch::Sender<u64>,
    /// This instance's ends of open links, by link id.
    links: std::sync::Mutex<HashMap<u64, LinkEnd>>,
    /// Links other instances opened to this one, for the server to serve.
    incoming: mpsc::Sender<IncomingLink>,
    incoming_rx: std::sync::Mutex<Option<mpsc::Receiver<IncomingLink>>>,
    /// When this store was made: link clocks count from it.
    epoch: std::time::Instant,
    /// The task store sharing this connection, if any (its signals come
    /// through this instance's channel).
    tasks: tasks::Attached,
}

impl RedisSessionStore {
    /// A store for the server at `url` (not connected yet: see
    /// [`RedisSessionStore::connect`]); `Err` says what is wrong with the URL.
    pub(crate) fn new(
        url: &str,
        instance: &str,
        ttl: Duration,
        window_cap: usize,
    ) -> Result<RedisSessionStore, redis::RedisError> {
        let target = Target::parse(url)?;
        let (queue, queue_rx) = mpsc::channel(QUEUE);
        let (incoming, incoming_rx) = mpsc::channel(INCOMING_QUEUE);
        Ok(RedisSessionStore {
            local: InMemorySessionStore::default(),
            url: url.to_owned(),
            target,
            instance: Arc::from(instance),
            conn: OnceLock::new(),
            queue,
            queue_rx: std::sync::Mutex::new(Some(queue_rx)),
            ttl,
            window_cap: window_cap.max(1),
            dropped: AtomicU64::new(0),
            wait: None,
            unreplicated: AtomicU64::new(0),
            lost: std::sync::Mutex::new(Default::default()),
            fenced: std::sync::Mutex::new(Default::default()),
            fenced_count: std::sync::atomic::AtomicUsize::new(0),
            restoring: std::sync::Mutex::new(Default::default()),
            trips: AtomicU64::new(0),
            failed_trips: AtomicU64::new(0),
            healthy: AtomicBool::new(false),
            last_id: std::sync::Mutex::new(None),
            shared: OnceLock::new(),
            shutdown: OnceLock::new(),
            emptied: tokio::sync::Notify::new(),
            recorded: AtomicU64::new(0),
            recorded_lock: std::sync::Mutex::new(0),
            written: tokio::sync::watch::Sender::new(0),
            links: std::sync::Mutex::new(HashMap::new()),
            incoming,
            incoming_rx: std::sync::Mutex::new(Some(incoming_rx)),
            epoch: std::time::Instant::now(),
            tasks: Default::default(),
        })
    }

    /// The store, each batch of records waiting for `wait`'s replicas
    /// (`None`: for none, replication being asynchronous).
    pub(crate) fn waiting_for(mut self, wait: Option<(u32, Duration)>) -> RedisSessionStore {
        self.wait = wait;
        self
    }

    /// Records written that fewer replicas than asked acknowledged in time.
    pub(crate) fn unreplicated(&self) -> u64 {
        self.unreplicated.load(Relaxed)
    }

    /// The instance id.
    pub(crate) fn instance(&self) -> &str {
        &self.instance
    }

    /// Whether the store is a Redis Cluster (not one server).
    pub(crate) fn is_cluster(&self) -> bool {
        self.target.is_cluster()
    }

    /// The Redis URL, its passwords hidden (for logs).
    pub(crate) fn redacted_url(&self) -> String {
        lease::redact(&self.url)
    }

    /// The Redis URL.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Whether the server has begun shutting down.
    fn shutting_down(&self) -> bool {
        self.shutdown
            .get()
            .is_some_and(CancellationToken::is_cancelled)
    }

    /// A session left this instance during shutdown: once none is left, the
    /// writer, draining their last records, may stop.
    fn left_at_shutdown(&self) {
        if self.local.is_empty() {
            self.emptied.notify_one();
        }
    }

    /// Whether the last round trip to Redis worked.
    pub(crate) fn is_healthy(&self) -> bool {
        self.healthy.load(Relaxed)
    }

    /// Records dropped so far (queue full or Redis unavailable).
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed)
    }

    /// The writer's round trips to Redis so far, and those that failed.
    #[cfg(feature = "metrics")]
    pub(crate) fn round_trips(&self) -> (u64, u64) {
        (self.trips.load(Relaxed), self.failed_trips.load(Relaxed))
    }

    /// Connects (failing with the reason when Redis does not answer within a
    /// few seconds), takes the lease, and starts the writer and the lease
    /// refresher on `tasks`, until `shutdown`.
    pub(crate) async fn connect(
        self: &Arc<Self>,
        shared: &Arc<Shared>,
        shutdown: CancellationToken,
    ) -> Result<(), ConnectError> {
        let _ = self.shared.set(Arc::clone(shared));
        let _ = self.shutdown.set(shutdown.clone());
        let tasks = shared.runner.tasks();
        let connect = self.target.connect();
        let mut conn = tokio::time::timeout(IO_TIMEOUT * 2, connect)
            .await
            .map_err(|_| ConnectError::NoAnswer)??;
        let _: () = redis::cmd("PING").query_async(&mut conn).await?;
        self.lease(&mut conn).await?;
        self.healthy.store(true, Relaxed);
        let _ = self.conn.set(conn.clone());
        let rx = self
            .queue_rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(rx) = rx {
            tasks.spawn(Arc::clone(self).write(rx, conn.clone(), shutdown.clone()));
        }
        // Subscribed before anyone may open a link here.
        let pubsub = self.subscribe().await?;
        tasks.spawn(Arc::clone(self).listen(pubsub, shutdown.clone()));
        self.tasks.start(tasks, shutdown.clone());
        tasks.spawn(Arc::clone(self).refresh_lease(conn, shutdown));
        Ok(())
    }

    /// The links other instances open to this one (taken once, by the server).
    pub(crate) fn take_incoming(&self) -> Option<mpsc::Receiver<IncomingLink>> {
        self.incoming_rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

/// Why [`RedisSessionStore::connect`] failed; its text is the reason
/// [`Error::Redis`](crate::Error::Redis) gives.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// Redis did not answer within a few seconds.
    #[error("no answer")]
    NoAnswer,
    /// Redis answered with an error (connecting, `PING`, the lease, the
    /// subscription).
    #[error("{0}")]
    Redis(#[from] redis::RedisError),
}

/// A `SessionStore` around the shared `Arc` (the server keeps the typed one).
pub(crate) struct SharedRedisStore(pub(crate) Arc<RedisSessionStore>);

impl SessionStore for SharedRedisStore {
    fn register(&self, id: &str) -> Takeovers {
        // Restored here again (the instance that had it is gone since).
        self.0.unfence(id);
        let takeovers = self.0.local.register(id);
        self.0.end_restoring(id);
        takeovers
    }

    fn find(&self, id: &str) -> Option<TakeoverAddress> {
        self.0.local.find(id)
    }

    fn remove(&self, id: &str) {
        self.0.local.remove(id);
        self.0.unfence(id);
        // Sessions ended by this instance's shutdown stay recorded: their
        // clients resume them on another instance.
        if self.0.shutting_down() {
            self.0.left_at_shutdown();
        } else {
            self.0.enqueue(Entry::Ended {
                id: self.0.id_arc(id),
            });
        }
    }

    fn hand_off(&self, id: &str) {
        self.0.local.remove(id);
        self.0.unfence(id);
        // Or a restoring here refused after all.
        self.0.end_restoring(id);
        if self.0.shutting_down() {
            self.0.left_at_shutdown();
        }
    }

    fn records(&self) -> bool {
        true
    }

    fn recorded(&self) -> u64 {
        self.0.recorded.load(Relaxed)
    }

    fn written(&self) -> u64 {
        *self.0.written.borrow()
    }

    fn wait_written(&self, ticket: u64) -> StoreFuture<()> {
        let mut written = self.0.written.subscribe();
        Box::pin(async move {
            // The sender lives as long as the store.
            let _ = written.wait_for(|w| *w >= ticket).await;
        })
    }

    fn record(&self, id: &str, record: Record<'_>) {
        let store = &self.0;
        let id = store.id_arc(id);
        let entry = match record {
            Record::Opened { subject } => Entry::Opened {
                id,
                subject: subject.map(str::to_owned),
                adopted: false,
            },
            Record::Adopted { subject } => Entry::Opened {
                id,
                subject: subject.map(str::to_owned),
                adopted: true,
            },
            Record::Committed {
                seq,
                envelope,
                last_rx_seq,
            } => Entry::Committed {
                id,
                seq,
                envelope: envelope.clone(),
                last_rx_seq,
            },
            Record::CallOpened {
                call_id,
                last_rx_seq,
            } => Entry::CallOpened {
                id,
                call_id: call_id.to_owned(),
                last_rx_seq,
            },
            Record::CallClosed { call_id } => Entry::CallClosed {
                id,
                call_id: call_id.to_owned(),
            },
            Record::Paused { channels } => Entry::Paused {
                id,
                channels: channels.to_owned(),
            },
            Record::Owed { owed } => Entry::Owed {
                id,
                owed: owed.to_owned(),
            },
        };
        store.enqueue(entry);
    }

    fn restore(
        &self,
        id: &str,
        subject: Option<&str>,
    ) -> StoreFuture<Result<Snapshot, NotRestored>> {
        Box::pin(RedisSessionStore::restore_from_redis(
            Arc::clone(&self.0),
            id.to_owned(),
            subject.map(str::to_owned),
        ))
    }

    fn fenced(&self, id: &str) -> bool {
        self.0.is_fenced(id)
    }

    fn link(&self, owner: &str, open: LinkOpen) -> StoreFuture<Result<Link, ResumeRefused>> {
        Box::pin(Arc::clone(&self.0).open_link(owner.to_owned(), open))
    }

    fn lease_left(&self, owner: &str) -> StoreFuture<Result<Option<Duration>, ResumeRefused>> {
        let store = Arc::clone(&self.0);
        let owner = owner.to_owned();
        Box::pin(async move { store.lease_left(&owner).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_when_the_store_is_made() {
        let err = RedisSessionStore::new("not a url", "a", Duration::from_secs(1), 10)
            .err()
            .expect("refused");
        assert!(!err.to_string().is_empty());
        assert!(
            RedisSessionStore::new("redis://127.0.0.1:1", "a", Duration::from_secs(1), 10).is_ok()
        );
    }
}

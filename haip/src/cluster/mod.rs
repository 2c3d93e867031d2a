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
//! Keys (all expire `replay_window_time` after the session's last change):
//!
//! | key | type | holds |
//! |---|---|---|
//! | `haip:s:{session}` | hash | `owner` (instance id), `subject`, `next_seq`, `last_rx`, `paused` (channels), `owed` (flow-control credit owed to the client), `lost` (records of it were lost) |
//! | `haip:s:{session}:w` | list | committed envelopes, oldest first (at most 10 × `replay_window_messages`) |
//! | `haip:s:{session}:c` | set | call ids owed a `TOOL_DONE` |
//! | `haip:s:{session}:claim` | string | the instance restoring it (10 s) |
//! | `haip:i:{instance}` | string | the instance's lease ([`LEASE_TTL`]) |
//! | `haip:open:{subject}` | set | `{session} {instance}` of each open stream session (upstream POST targets) |
//!
//! MCP task records (`haip:t:{task}`, `haip:t:{task}:q`) are kept by the
//! task store of [`tasks`], on the same connection and lease.
//!
//! Instances talk to each other through one pub/sub channel each,
//! `haip:to:{instance}`: links ([`crate::session::link`]) that relay a client
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
//! round trip per batch, however many sessions it carries. When Redis is away,
//! sessions go on working on their instance; records made meanwhile are lost,
//! and restoring answers `session store unavailable` until Redis is back (the
//! connection reconnects by itself, and the writer tries again every
//! [`PROBE`]). Once it is, each session whose records were lost is marked
//! (`lost`, and its `owner` set again if it runs here): while its instance
//! lives it is relayed there as any other, but it is never restored from
//! what was recorded, which misses what happened meanwhile (calls that ended,
//! `seq`s the client saw): restoring it answers [`LOST`]. An instance killed
//! before Redis came back cannot mark its sessions: what it recorded before
//! Redis went away is what another restores.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::hash::FastMap;
use crate::session::link::{
    IncomingLink, Link, LinkMessage, LinkOpen, LinkPurpose, LinkReceiver, LinkSender,
};
use crate::session::{
    InMemorySessionStore, NotRestored, Record, SessionStore, Shared, Snapshot, StoreFuture,
    TransportKind,
};
use crate::session::{TakeoverAddress, Takeovers};

pub(crate) mod tasks;

/// How often an instance refreshes its lease.
pub(crate) const LEASE_REFRESH: Duration = Duration::from_secs(2);
/// How long a lease lasts without a refresh: an instance silent for this
/// long is taken for dead, and its sessions may be restored elsewhere.
pub(crate) const LEASE_TTL: Duration = Duration::from_secs(6);
/// Records waiting for the writer, at most; more are dropped (and counted).
const QUEUE: usize = 65_536;
/// Records sent in one batch, at most.
const BATCH: usize = 512;
/// How long one Redis round trip may take before it counts as failed.
const IO_TIMEOUT: Duration = Duration::from_secs(3);

/// One record, owned, on its way to the writer.
enum Entry {
    Opened {
        id: Arc<str>,
        subject: Option<String>,
    },
    Committed {
        id: Arc<str>,
        seq: u64,
        envelope: Bytes,
        last_rx_seq: u64,
    },
    CallOpened {
        id: Arc<str>,
        call_id: String,
    },
    CallClosed {
        id: Arc<str>,
        call_id: String,
    },
    Ended {
        id: Arc<str>,
    },
    Paused {
        id: Arc<str>,
        channels: String,
    },
    Owed {
        id: Arc<str>,
        owed: String,
    },
    StreamOpened {
        id: String,
        subject: Option<String>,
    },
    StreamClosed {
        id: String,
        subject: Option<String>,
    },
}

impl Entry {
    /// The session a record is about (a stream's entry is about the set of
    /// open streams, which the next opening or closing puts right).
    fn session(&self) -> Option<&Arc<str>> {
        match self {
            Entry::Opened { id, .. }
            | Entry::Committed { id, .. }
            | Entry::CallOpened { id, .. }
            | Entry::CallClosed { id, .. }
            | Entry::Ended { id }
            | Entry::Paused { id, .. }
            | Entry::Owed { id, .. } => Some(id),
            Entry::StreamOpened { .. } | Entry::StreamClosed { .. } => None,
        }
    }
}

/// The Redis-backed [`SessionStore`].
pub(crate) struct RedisSessionStore {
    local: InMemorySessionStore,
    url: String,
    client: redis::Client,
    instance: Arc<str>,
    conn: OnceLock<ConnectionManager>,
    queue: mpsc::Sender<Entry>,
    queue_rx: std::sync::Mutex<Option<mpsc::Receiver<Entry>>>,
    /// How long records are kept after a session's last change.
    ttl: Duration,
    /// Envelopes kept per session, at most.
    window_cap: usize,
    /// Records dropped (queue full, or Redis unavailable).
    dropped: AtomicU64,
    /// Sessions whose records were lost (dropped while Redis was away, or
    /// the queue was full), to mark in Redis when it answers again.
    lost: std::sync::Mutex<crate::hash::FastSet<Arc<str>>>,
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
    tasks: OnceLock<Weak<tasks::RedisTaskStore>>,
}

/// One session's records in a batch, as [`RECORD`] takes them.
struct Group<'a> {
    id: &'a Arc<str>,
    ops: Vec<Op<'a>>,
    /// Where in `ops` the session's envelopes gather (none before its first,
    /// nor past its `Opened` or `Ended`).
    window: Option<usize>,
}

/// One change to a session in a batch.
enum Op<'a> {
    /// Committed envelopes, oldest first; the newest's `seq`, and the
    /// inbound `seq` then.
    Window {
        envelopes: Vec<&'a [u8]>,
        seq: u64,
        last_rx_seq: u64,
    },
    Opened(Option<&'a str>),
    CallOpened(&'a str),
    CallClosed(&'a str),
    Paused(&'a str),
    /// The flow-control credit owed to the client.
    Owed(&'a str),
    Ended,
    /// A call opened and closed within the batch: nothing to write.
    Gone,
}

impl<'a> Group<'a> {
    fn add(&mut self, op: Op<'a>) {
        match &op {
            Op::Window {
                envelopes,
                seq,
                last_rx_seq,
            } => {
                if let Some(Op::Window {
                    envelopes: kept,
                    seq: newest,
                    last_rx_seq: rx,
                }) = self.window.and_then(|at| self.ops.get_mut(at))
                {
                    kept.extend_from_slice(envelopes);
                    *newest = *seq;
                    *rx = *last_rx_seq;
                    return;
                }
                self.window = Some(self.ops.len());
            }
            Op::CallClosed(call_id) => {
                // A call that ends at once was opened a record or two ago.
                let opened = self
                    .ops
                    .iter_mut()
                    .rev()
                    .take_while(|op| !matches!(op, Op::Opened(_) | Op::Ended))
                    .find(|op| matches!(op, Op::CallOpened(c) if c == call_id));
                if let Some(opened) = opened {
                    *opened = Op::Gone;
                    return;
                }
            }
            Op::Opened(_) | Op::Ended => self.window = None,
            Op::CallOpened(_) | Op::Paused(_) | Op::Owed(_) | Op::Gone => {}
        }
        self.ops.push(op);
    }
}

/// Where the messages of one link go on this instance.
struct LinkEnd {
    tx: LinkSender,
    /// When the other end was last heard (ms since the epoch).
    heard: Arc<AtomicU64>,
}

/// Links other instances may have waiting for the server, at most.
const INCOMING_QUEUE: usize = 256;

/// How long an instance waits before subscribing again after losing Redis.
const RESUBSCRIBE: Duration = Duration::from_secs(1);

impl RedisSessionStore {
    /// A store for the server at `url` (not connected yet: see
    /// [`RedisSessionStore::connect`]); `Err` says what is wrong with the URL.
    pub(crate) fn new(
        url: &str,
        instance: &str,
        ttl: Duration,
        window_cap: usize,
    ) -> Result<RedisSessionStore, String> {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        let (queue, queue_rx) = mpsc::channel(QUEUE);
        let (incoming, incoming_rx) = mpsc::channel(INCOMING_QUEUE);
        Ok(RedisSessionStore {
            local: InMemorySessionStore::default(),
            url: url.to_owned(),
            client,
            instance: Arc::from(instance),
            conn: OnceLock::new(),
            queue,
            queue_rx: std::sync::Mutex::new(Some(queue_rx)),
            ttl,
            window_cap: window_cap.max(1),
            dropped: AtomicU64::new(0),
            lost: std::sync::Mutex::new(Default::default()),
            trips: AtomicU64::new(0),
            failed_trips: AtomicU64::new(0),
            healthy: AtomicBool::new(false),
            last_id: std::sync::Mutex::new(None),
            shared: OnceLock::new(),
            shutdown: OnceLock::new(),
            recorded: AtomicU64::new(0),
            recorded_lock: std::sync::Mutex::new(0),
            written: tokio::sync::watch::Sender::new(0),
            links: std::sync::Mutex::new(HashMap::new()),
            incoming,
            incoming_rx: std::sync::Mutex::new(Some(incoming_rx)),
            epoch: std::time::Instant::now(),
            tasks: OnceLock::new(),
        })
    }

    /// The instance id.
    pub(crate) fn instance(&self) -> &str {
        &self.instance
    }

    /// The Redis URL.
    pub(crate) fn url(&self) -> &str {
        &self.url
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
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
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
    ) -> Result<(), String> {
        let _ = self.shared.set(Arc::clone(shared));
        let _ = self.shutdown.set(shutdown.clone());
        let tasks = shared.runner.tasks();
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(IO_TIMEOUT))
            .set_response_timeout(Some(IO_TIMEOUT))
            .set_number_of_retries(2);
        let connect = self.client.get_connection_manager_with_config(config);
        let mut conn = tokio::time::timeout(IO_TIMEOUT * 2, connect)
            .await
            .map_err(|_| "no answer".to_owned())?
            .map_err(|e| e.to_string())?;
        let _: () = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        self.lease(&mut conn).await.map_err(|e| e.to_string())?;
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
        let pubsub = self.subscribe().await.map_err(|e| e.to_string())?;
        tasks.spawn(Arc::clone(self).listen(pubsub, shutdown.clone()));
        if let Some(task_store) = self.tasks.get().and_then(Weak::upgrade) {
            tasks.spawn(task_store.refresh(shutdown.clone()));
        }
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

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    async fn subscribe(&self) -> redis::RedisResult<redis::aio::PubSub> {
        let subscribe = async {
            let mut pubsub = self.client.get_async_pubsub().await?;
            pubsub.subscribe(inbox_key(&self.instance)).await?;
            Ok(pubsub)
        };
        tokio::time::timeout(IO_TIMEOUT, subscribe)
            .await
            .unwrap_or_else(|_| {
                Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "subscribing timed out",
                )))
            })
    }

    /// Takes the messages of this instance's channel to its link ends, and
    /// subscribes again whenever the subscription is lost (every open link
    /// is lost with it), until `shutdown`.
    async fn listen(self: Arc<Self>, pubsub: redis::aio::PubSub, shutdown: CancellationToken) {
        use futures_util::StreamExt;
        let mut pubsub = Some(pubsub);
        loop {
            if let Some(subscribed) = pubsub.take() {
                let mut messages = subscribed.into_on_message();
                loop {
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        message = messages.next() => match message {
                            Some(message) => self.dispatch(message.get_payload_bytes()),
                            None => break,
                        },
                    }
                }
                tracing::warn!(url = %self.url, "lost the subscription to other instances' messages");
                // Their other ends learn it from the silence.
                self.lock_links().clear();
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(RESUBSCRIBE) => {}
            }
            pubsub = self.subscribe().await.ok();
        }
    }

    fn lock_links(&self) -> std::sync::MutexGuard<'_, HashMap<u64, LinkEnd>> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One message from another instance, to the link end it is for (or,
    /// a task signal, to the task store).
    fn dispatch(self: &Arc<Self>, payload: &[u8]) {
        let Some((kind, id, body)) = split_message(payload) else {
            tracing::debug!("malformed message between instances dropped");
            return;
        };
        if kind == tasks::SIGNAL {
            tasks::deliver(&self.tasks, body);
            return;
        }
        if kind == b'O' {
            let Some((from, open)) = decode_open(body) else {
                tracing::debug!("malformed link opening dropped");
                return;
            };
            let link = self.open_end(id, from);
            if self.incoming.try_send(IncomingLink { link, open }).is_err() {
                // Dropping the link ends it, which the other end hears.
                tracing::warn!("too many links waiting to be served; one refused");
            }
            return;
        }
        let Some(message) = decode_message(kind, body) else {
            tracing::debug!(kind, "unknown message between instances dropped");
            return;
        };
        let mut links = self.lock_links();
        let Some(end) = links.get(&id) else { return };
        end.heard.store(self.now_ms(), Relaxed);
        let closing = matches!(message, LinkMessage::Close { .. });
        if !end.tx.try_send(message) || closing {
            // Full: the reader fell too far behind, and loses the link.
            links.remove(&id);
        }
    }

    /// Makes this instance's end of link `id` with instance `peer`; its
    /// messages are published by a task of their own.
    fn open_end(self: &Arc<Self>, id: u64, peer: String) -> Link {
        let (in_tx, in_rx) = crate::session::link::channel();
        let (out_tx, out_rx) = crate::session::link::channel();
        let heard = Arc::new(AtomicU64::new(self.now_ms()));
        self.lock_links().insert(
            id,
            LinkEnd {
                tx: in_tx,
                heard: Arc::clone(&heard),
            },
        );
        if let Some(shared) = self.shared.get() {
            shared
                .runner
                .tasks()
                .spawn(Arc::clone(self).publish(id, peer, out_rx, heard));
        }
        Link {
            out: out_tx,
            inbound: in_rx,
        }
    }

    /// Publishes what this end of link `id` sends, in order, with a
    /// heartbeat every [`LEASE_REFRESH`]; ends the link when its other end
    /// has been silent for [`LEASE_TTL`] or Redis refuses a message.
    async fn publish(
        self: Arc<Self>,
        id: u64,
        peer: String,
        mut out: LinkReceiver,
        heard: Arc<AtomicU64>,
    ) {
        let channel = inbox_key(&peer);
        let Some(mut conn) = self.conn.get().cloned() else {
            return;
        };
        let mut pending: Vec<Vec<u8>> = Vec::new();
        let mut beat = tokio::time::interval(LEASE_REFRESH);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut closed = false;
        loop {
            if !pending.is_empty() {
                let mut pipe = redis::pipe();
                for message in pending.drain(..) {
                    pipe.publish(&channel, message).ignore();
                }
                let sent =
                    tokio::time::timeout(IO_TIMEOUT, pipe.query_async::<()>(&mut conn)).await;
                if !matches!(sent, Ok(Ok(()))) || closed {
                    break;
                }
            }
            tokio::select! {
                message = out.recv() => match message {
                    Some(message) => {
                        let mut next = Some(message);
                        while let Some(message) = next.take() {
                            closed |= matches!(message, LinkMessage::Close { .. });
                            pending.push(encode_message(id, &message));
                            if pending.len() < 64 && !closed {
                                next = out.try_recv();
                            }
                        }
                    }
                    None => {
                        // This end let go: say so.
                        closed = true;
                        pending.push(encode_message(id, &LinkMessage::Close { code: 0, reason: String::new() }));
                    }
                },
                _ = beat.tick() => {
                    let silent = self.now_ms().saturating_sub(heard.load(Relaxed));
                    if silent > LEASE_TTL.as_millis() as u64 {
                        tracing::debug!(peer, "link lost: the other instance went silent");
                        break;
                    }
                    pending.push(encode_message(id, &LinkMessage::Heartbeat));
                }
            }
        }
        // Dropping the sender ends this end's inbound: lost, or closed.
        self.lock_links().remove(&id);
    }

    /// Publishes that stream session `id` of `subject` is open here (a
    /// target of upstream POSTs sent to any instance).
    pub(crate) fn stream_opened(&self, id: &str, subject: Option<&str>) {
        self.enqueue(Entry::StreamOpened {
            id: id.to_owned(),
            subject: subject.map(str::to_owned),
        });
    }

    /// Stream session `id` is no longer open here.
    pub(crate) fn stream_closed(&self, id: &str, subject: Option<&str>) {
        self.enqueue(Entry::StreamClosed {
            id: id.to_owned(),
            subject: subject.map(str::to_owned),
        });
    }

    /// The open stream session on another live instance that an upstream
    /// POST of `subject` goes to (HAIP.md §15.4, across the cluster): the
    /// first of `candidates` open elsewhere, else the subject's only open
    /// stream session when it has none here (`local` counts those). Gives
    /// `(session, instance)`; `Err` when Redis cannot say.
    pub(crate) async fn locate(
        &self,
        subject: Option<&str>,
        candidates: &[&str],
        local: usize,
    ) -> Result<Option<(String, String)>, &'static str> {
        let Some(mut conn) = self.conn.get().cloned().filter(|_| self.is_healthy()) else {
            return Err("session store unavailable");
        };
        let key = open_key(subject);
        let read = tokio::time::timeout(IO_TIMEOUT, async {
            let members: Vec<String> = conn.smembers(&key).await?;
            let mut open = Vec::new();
            let mut alive: HashMap<String, bool> = HashMap::new();
            for member in members {
                let Some((session, instance)) = member.split_once(' ') else {
                    continue;
                };
                if instance == &*self.instance {
                    // This instance's own are in its table.
                    continue;
                }
                let live = match alive.get(instance) {
                    Some(live) => *live,
                    None => {
                        let live: bool = conn.exists(lease_key(instance)).await?;
                        alive.insert(instance.to_owned(), live);
                        live
                    }
                };
                if live {
                    open.push((session.to_owned(), instance.to_owned()));
                } else {
                    // Its instance is gone: forget it.
                    let _: () = conn.srem(&key, &member).await?;
                }
            }
            Ok::<_, redis::RedisError>(open)
        })
        .await;
        let open = match read {
            Ok(Ok(open)) => open,
            _ => return Err("session store unavailable"),
        };
        for candidate in candidates {
            if let Some(found) = open.iter().find(|(session, _)| session == candidate) {
                return Ok(Some(found.clone()));
            }
        }
        Ok(match (local, open.as_slice()) {
            (0, [only]) => Some(only.clone()),
            _ => None,
        })
    }

    /// Opens a link to instance `peer`, once `peer` has the opening (it is
    /// subscribed: alive, and connected to Redis); `Err` says why not.
    pub(crate) async fn open_link(
        self: Arc<Self>,
        peer: String,
        open: LinkOpen,
    ) -> Result<Link, &'static str> {
        let Some(mut conn) = self.conn.get().cloned().filter(|_| self.is_healthy()) else {
            return Err("session store unavailable");
        };
        let id = uuid::Uuid::new_v4().as_u64_pair().0;
        // The end first: the answer may come at once.
        let link = self.open_end(id, peer.clone());
        let opening = encode_open(id, &self.instance, &open);
        let published = tokio::time::timeout(
            IO_TIMEOUT,
            conn.publish::<_, _, u64>(inbox_key(&peer), opening),
        )
        .await;
        match published {
            Ok(Ok(receivers)) if receivers > 0 => Ok(link),
            Ok(Ok(_)) => {
                self.lock_links().remove(&id);
                Err(crate::session::link::UNREACHABLE)
            }
            _ => {
                self.lock_links().remove(&id);
                Err("session store unavailable")
            }
        }
    }

    /// How long the lease of instance `peer` lasts without a refresh:
    /// `None` once it has expired (the instance is taken for dead). `Err`
    /// when Redis cannot say.
    pub(crate) async fn lease_left(&self, peer: &str) -> Result<Option<Duration>, &'static str> {
        let Some(mut conn) = self.conn.get().cloned().filter(|_| self.is_healthy()) else {
            return Err("session store unavailable");
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
            _ => Err("session store unavailable"),
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
        let relayed = stats.relayed_connections.load(Relaxed);
        let opened = stats.total_connections.load(Relaxed);
        let relayed_total = stats.relayed_total.load(Relaxed);
        serde_json::json!({
            "activeConnections": active.saturating_sub(relayed),
            "detachedSessions": stats.detached_sessions.load(Relaxed),
            "activeCalls": total.saturating_sub(ended),
            "totalConnections": opened.saturating_sub(relayed_total),
        })
    }

    async fn lease(&self, conn: &mut ConnectionManager) -> redis::RedisResult<()> {
        let key = lease_key(&self.instance);
        let ms = LEASE_TTL.as_millis() as u64;
        let stats = self.counts();
        redis::pipe()
            .pset_ex(key, stats.to_string(), ms)
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

    async fn refresh_lease(
        self: Arc<Self>,
        mut conn: ConnectionManager,
        shutdown: CancellationToken,
    ) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(LEASE_REFRESH) => {}
            }
            let refreshed = tokio::time::timeout(IO_TIMEOUT, self.lease(&mut conn)).await;
            let ok = matches!(refreshed, Ok(Ok(())));
            if self.healthy.swap(ok, Relaxed) != ok {
                if ok {
                    tracing::info!(url = %self.url, "Redis is reachable again");
                } else {
                    tracing::warn!(url = %self.url, "Redis is unreachable: sessions go on here, but cannot be resumed on other instances meanwhile");
                }
            }
        }
        // A clean stop gives the lease up at once: this instance's sessions
        // may be restored elsewhere without waiting for it to expire.
        let key = lease_key(&self.instance);
        let _ = tokio::time::timeout(IO_TIMEOUT, conn.del::<_, ()>(key)).await;
    }

    /// The writer: records, in batches, in order. Each batch is one call of
    /// the [`RECORD`] script: one round trip and one reply, whatever number
    /// of sessions and records it carries. Records made while a batch is on
    /// its way wait in the queue and make up the next one, so a busy
    /// instance sends larger batches rather than more of them.
    async fn write(
        self: Arc<Self>,
        mut rx: mpsc::Receiver<Entry>,
        mut conn: ConnectionManager,
        shutdown: CancellationToken,
    ) {
        let mut batch = Vec::with_capacity(BATCH);
        // The script's SHA1 once Redis has it.
        let mut sha = None;
        let mut last_failure = std::time::Instant::now();
        loop {
            let first = tokio::select! {
                entry = rx.recv() => entry,
                () = shutdown.cancelled() => None,
            };
            let Some(first) = first else { break };
            batch.push(first);
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(entry) => batch.push(entry),
                    Err(_) => break,
                }
            }
            // While Redis is known to be away, records are dropped at once
            // (sessions go on without waiting for it), and Redis is tried
            // again every `PROBE`.
            let try_now = self.healthy.load(Relaxed) || last_failure.elapsed() >= PROBE;
            let sent = if try_now {
                // Sessions whose records were lost are marked first.
                let marks: Vec<(Arc<str>, bool)> = {
                    let lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
                    lost.iter()
                        .take(MARKS_PER_BATCH)
                        .map(|id| (Arc::clone(id), self.local.find(id).is_some()))
                        .collect()
                };
                let send = self.send(&mut conn, &mut sha, &marks, &batch);
                let sent = tokio::time::timeout(IO_TIMEOUT, send).await;
                self.trips.fetch_add(1, Relaxed);
                let sent = matches!(sent, Ok(Ok(())));
                if sent {
                    let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
                    for (id, _) in &marks {
                        lost.remove(id);
                    }
                    drop(lost);
                    if !self.healthy.swap(true, Relaxed) {
                        tracing::info!(url = %self.url, "Redis is reachable again");
                    }
                } else {
                    self.failed_trips.fetch_add(1, Relaxed);
                    // The next try is a probe's time from this one.
                    last_failure = std::time::Instant::now();
                }
                sent
            } else {
                false
            };
            if !sent {
                self.dropped.fetch_add(batch.len() as u64, Relaxed);
                self.lost(batch.iter().map(Entry::session));
                if self.healthy.swap(false, Relaxed) {
                    tracing::warn!(url = %self.url, "Redis is unreachable: session records are being dropped");
                }
            }
            let n = batch.len() as u64;
            self.written.send_modify(|w| *w += n);
            batch.clear();
        }
    }

    /// Sends a batch of records: one `EVALSHA` of [`RECORD`], the script
    /// loaded first when Redis does not have it (the first batch, or Redis
    /// restarted since).
    async fn send(
        &self,
        conn: &mut ConnectionManager,
        sha: &mut Option<String>,
        marks: &[(Arc<str>, bool)],
        batch: &[Entry],
    ) -> redis::RedisResult<()> {
        if let Some(known) = sha.as_deref() {
            match self
                .record_call(known, marks, batch)
                .query_async(conn)
                .await
            {
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {}
                done => return done,
            }
        }
        let loaded: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(RECORD)
            .query_async(conn)
            .await?;
        let call = self.record_call(&loaded, marks, batch);
        *sha = Some(loaded);
        call.query_async(conn).await
    }

    /// The [`RECORD`] call for a batch of records.
    ///
    /// Records are grouped by session, in the order sessions first appear: a
    /// session's committed envelopes become one append with one update of
    /// its counters (most of a busy session's records are envelopes), and a
    /// call opened and closed within the batch (a call that ends at once) is
    /// left out: the set of calls owed a `TOOL_DONE` ends the same either
    /// way. A session's other records keep their order around its envelopes,
    /// which is what matters: it is only ever ended after them. `marks`
    /// come first: sessions whose records were lost (and whether each runs
    /// here), marked so that no instance restores them from what is missing.
    fn record_call(&self, sha: &str, marks: &[(Arc<str>, bool)], batch: &[Entry]) -> redis::Cmd {
        let mut index: FastMap<&str, usize> = FastMap::default();
        let mut groups: Vec<Group<'_>> = Vec::new();
        // Stream sessions opened and closed (`+`/`-`, key, member), in order.
        let mut streams: Vec<(&str, String, String)> = Vec::new();
        for entry in batch {
            let (id, op) = match entry {
                Entry::Committed {
                    id,
                    seq,
                    envelope,
                    last_rx_seq,
                } => (
                    id,
                    Op::Window {
                        envelopes: vec![envelope.as_ref()],
                        seq: *seq,
                        last_rx_seq: *last_rx_seq,
                    },
                ),
                Entry::Opened { id, subject } => (id, Op::Opened(subject.as_deref())),
                Entry::CallOpened { id, call_id } => (id, Op::CallOpened(call_id)),
                Entry::CallClosed { id, call_id } => (id, Op::CallClosed(call_id)),
                Entry::Paused { id, channels } => (id, Op::Paused(channels)),
                Entry::Owed { id, owed } => (id, Op::Owed(owed)),
                Entry::Ended { id } => (id, Op::Ended),
                Entry::StreamOpened { id, subject } => {
                    let member = format!("{id} {}", self.instance);
                    streams.push(("+", open_key(subject.as_deref()), member));
                    continue;
                }
                Entry::StreamClosed { id, subject } => {
                    let member = format!("{id} {}", self.instance);
                    streams.push(("-", open_key(subject.as_deref()), member));
                    continue;
                }
            };
            let at = *index.entry(&**id).or_insert_with(|| {
                groups.push(Group {
                    id,
                    ops: Vec::new(),
                    window: None,
                });
                groups.len() - 1
            });
            groups[at].add(op);
        }
        let mut call = redis::cmd("EVALSHA");
        call.arg(sha)
            .arg(0)
            .arg(&*self.instance)
            .arg(self.ttl.as_millis() as u64)
            .arg(self.window_cap);
        for (id, here) in marks {
            call.arg("S")
                .arg(&**id)
                .arg("L")
                .arg(if *here { "1" } else { "0" });
        }
        for group in &groups {
            call.arg("S").arg(&**group.id);
            for op in &group.ops {
                match op {
                    Op::Window {
                        envelopes,
                        seq,
                        last_rx_seq,
                    } => {
                        call.arg("W")
                            .arg(seq + 1)
                            .arg(*last_rx_seq)
                            .arg(envelopes.len())
                            .arg(envelopes.as_slice());
                    }
                    Op::Opened(None) => {
                        call.arg("O");
                    }
                    Op::Opened(Some(subject)) => {
                        call.arg("U").arg(*subject);
                    }
                    Op::CallOpened(call_id) => {
                        call.arg("A").arg(*call_id);
                    }
                    Op::CallClosed(call_id) => {
                        call.arg("D").arg(*call_id);
                    }
                    Op::Owed(owed) => {
                        call.arg("C").arg(*owed);
                    }
                    Op::Paused(channels) => {
                        call.arg("P").arg(*channels);
                    }
                    Op::Ended => {
                        call.arg("E");
                    }
                    Op::Gone => {}
                }
            }
        }
        for (kind, key, member) in &streams {
            call.arg(*kind).arg(key).arg(member);
        }
        call
    }

    fn id_arc(&self, id: &str) -> Arc<str> {
        let mut last = self.last_id.lock().unwrap_or_else(|e| e.into_inner());
        match &*last {
            Some(arc) if &**arc == id => Arc::clone(arc),
            _ => {
                let arc: Arc<str> = Arc::from(id);
                *last = Some(Arc::clone(&arc));
                arc
            }
        }
    }

    fn enqueue(&self, entry: Entry) {
        // The counter moves with the queue: tickets follow the writer's order.
        let mut recorded = self.recorded_lock.lock().unwrap_or_else(|e| e.into_inner());
        match self.queue.try_send(entry) {
            Ok(()) => {
                *recorded += 1;
                self.recorded.store(*recorded, Relaxed);
            }
            Err(full) => {
                self.dropped.fetch_add(1, Relaxed);
                self.lost(std::iter::once(full.into_inner().session()));
            }
        }
    }

    /// Notes that records of these sessions were lost: each is marked so
    /// in Redis once it answers again ([`LOST`]).
    fn lost<'a>(&self, ids: impl Iterator<Item = Option<&'a Arc<str>>>) {
        let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        for id in ids.flatten() {
            if lost.len() >= MAX_LOST {
                static FULL: crate::stats::Throttle = crate::stats::Throttle::new();
                if let Some(suppressed) = FULL.allow() {
                    tracing::warn!(
                        suppressed,
                        "too many sessions with lost records to mark them all"
                    );
                }
                break;
            }
            lost.insert(Arc::clone(id));
        }
    }

    async fn restore_from_redis(
        store: Arc<RedisSessionStore>,
        id: String,
    ) -> Result<Snapshot, NotRestored> {
        let Some(mut conn) = store.conn.get().cloned() else {
            return Err(NotRestored::Refused("session store unavailable"));
        };
        let fetched = tokio::time::timeout(IO_TIMEOUT, async {
            let meta: BTreeMap<String, String> = conn.hgetall(session_key(&id)).await?;
            if meta.is_empty() {
                return Ok(Err(NotRestored::Refused("unknown session")));
            }
            let owner = meta.get("owner").cloned().unwrap_or_default();
            if owner != *store.instance {
                let alive: bool = conn.exists(lease_key(&owner)).await?;
                if alive {
                    return Ok(Err(NotRestored::Elsewhere(owner)));
                }
            }
            // What was recorded misses what happened while Redis was away:
            // restoring it would end calls that ended, and send again `seq`s
            // the client has seen with other contents.
            if meta.contains_key("lost") {
                return Ok(Err(NotRestored::Refused(LOST)));
            }
            // A claim whose instance died with it (restored there, then
            // killed within the claim's life) does not hold the session.
            let claimed: i64 = redis::cmd("EVAL")
                .arg(CLAIM)
                .arg(1)
                .arg(claim_key(&id))
                .arg(&*store.instance)
                .arg(CLAIM_MS)
                .query_async(&mut conn)
                .await?;
            if claimed == 0 {
                return Ok(Err(NotRestored::Refused(
                    crate::session::link::BEING_RESUMED,
                )));
            }
            let window: Vec<Vec<u8>> = conn.lrange(window_key(&id), 0, -1).await?;
            let calls: Vec<String> = conn.smembers(calls_key(&id)).await?;
            Ok::<_, redis::RedisError>(Ok((meta, window, calls)))
        })
        .await;
        let (meta, window, calls) = match fetched {
            Ok(Ok(Ok(found))) => found,
            Ok(Ok(Err(reason))) => return Err(reason),
            Ok(Err(_)) | Err(_) => return Err(NotRestored::Refused("session store unavailable")),
        };
        Ok(snapshot(&meta, window, calls))
    }
}

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

/// Why a session cannot be restored after records of it were lost.
pub(crate) const LOST: &str = "records lost while the session store was away";

/// Sessions with lost records waiting to be marked, at most.
const MAX_LOST: usize = 100_000;

/// Sessions marked lost in one batch, at most.
const MARKS_PER_BATCH: usize = 1024;

/// How often the writer tries Redis again while it is away.
const PROBE: Duration = Duration::from_millis(250);

/// How long a claim to restore a session holds it (others answer
/// `session being resumed elsewhere` meanwhile).
const CLAIM_MS: u64 = 10_000;

/// Claims `KEYS[1]` for instance `ARGV[1]` for `ARGV[2]` ms, unless another
/// instance whose lease is alive holds it: 1 if claimed, else 0.
const CLAIM: &str = r"
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] and redis.call('EXISTS', 'haip:i:' .. holder) == 1 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
";

/// Writes a batch of session records. ARGV: this instance, the keys' time to
/// live (ms), the envelopes kept per session; then records, each a kind and
/// its fields: `S` session (the records that follow are its), `W` next `seq`,
/// inbound `seq`, count, envelopes (appended to the window, trimmed), `O`
/// opened without subject, `U` subject (opened), `A` / `D` call id (owed a
/// `TOOL_DONE`, or no longer), `P` paused channels, `C` the credit owed to
/// the client, `L` and `1` or `0`: records of the session were lost (and it
/// runs on this instance), `E` ended (its keys
/// deleted), `+` / `-` key member (a stream session opened, closed). A
/// session's keys get their expiry once, after its records, as they would
/// after each.
const RECORD: &str = r"
local owner, ttl, keep = ARGV[1], ARGV[2], -tonumber(ARGV[3])
local s, w, c
local es, ew, ec = false, false, false
local function expire()
  if es then redis.call('PEXPIRE', s, ttl) end
  if ew then redis.call('PEXPIRE', w, ttl) end
  if ec then redis.call('PEXPIRE', c, ttl) end
  es, ew, ec = false, false, false
end
local i, n = 4, #ARGV
while i <= n do
  local kind = ARGV[i]
  if kind == 'S' then
    expire()
    s = 'haip:s:' .. ARGV[i + 1]
    w, c = s .. ':w', s .. ':c'
    i = i + 2
  elseif kind == 'W' then
    local first, last = i + 4, i + 3 + tonumber(ARGV[i + 3])
    while first <= last do
      local upto = math.min(first + 199, last)
      redis.call('RPUSH', w, unpack(ARGV, first, upto))
      first = upto + 1
    end
    redis.call('LTRIM', w, keep, -1)
    redis.call('HSET', s, 'owner', owner, 'next_seq', ARGV[i + 1], 'last_rx', ARGV[i + 2])
    es, ew, ec = true, true, true
    i = last + 1
  elseif kind == 'A' then
    redis.call('SADD', c, ARGV[i + 1])
    ec = true
    i = i + 2
  elseif kind == 'D' then
    redis.call('SREM', c, ARGV[i + 1])
    i = i + 2
  elseif kind == 'O' then
    redis.call('HSET', s, 'owner', owner)
    redis.call('HDEL', s, 'subject')
    es = true
    i = i + 1
  elseif kind == 'U' then
    redis.call('HSET', s, 'owner', owner, 'subject', ARGV[i + 1])
    es = true
    i = i + 2
  elseif kind == 'P' then
    redis.call('HSET', s, 'paused', ARGV[i + 1])
    i = i + 2
  elseif kind == 'C' then
    redis.call('HSET', s, 'owed', ARGV[i + 1])
    i = i + 2
  elseif kind == 'L' then
    redis.call('HSET', s, 'lost', '1')
    if ARGV[i + 1] == '1' then redis.call('HSET', s, 'owner', owner) end
    es = true
    i = i + 2
  elseif kind == 'E' then
    redis.call('DEL', s, w, c)
    es, ew, ec = false, false, false
    i = i + 1
  elseif kind == '+' then
    redis.call('SADD', ARGV[i + 1], ARGV[i + 2])
    i = i + 3
  elseif kind == '-' then
    redis.call('SREM', ARGV[i + 1], ARGV[i + 2])
    i = i + 3
  else
    return redis.error_reply('unknown record ' .. kind)
  end
end
expire()
return 0
";

/// The set of instance ids that took a lease (the dead ones are dropped when
/// `/stats` finds their lease gone).
const INSTANCES: &str = "haip:instances";

/// A URL without its password, for `/stats`.
fn redact(url: &str) -> String {
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

fn session_key(id: &str) -> String {
    format!("haip:s:{id}")
}

fn window_key(id: &str) -> String {
    format!("haip:s:{id}:w")
}

fn calls_key(id: &str) -> String {
    format!("haip:s:{id}:c")
}

fn claim_key(id: &str) -> String {
    format!("haip:s:{id}:claim")
}

fn lease_key(instance: &str) -> String {
    format!("haip:i:{instance}")
}

fn open_key(subject: Option<&str>) -> String {
    format!("haip:open:{}", subject.unwrap_or(""))
}

fn inbox_key(instance: &str) -> String {
    format!("haip:to:{instance}")
}

/// Kind, link id and body of a message between instances.
fn split_message(payload: &[u8]) -> Option<(u8, u64, &[u8])> {
    let (&kind, rest) = payload.split_first()?;
    let hex = rest.get(..16)?;
    let id = u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
    Some((kind, id, &rest[16..]))
}

fn frame(kind: u8, id: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(17 + body.len());
    out.push(kind);
    out.extend_from_slice(format!("{id:016x}").as_bytes());
    out.extend_from_slice(body);
    out
}

fn encode_open(id: u64, from: &str, open: &LinkOpen) -> Vec<u8> {
    let mut body = serde_json::json!({ "from": from, "subject": open.subject });
    if let Some(caller) = &open.caller {
        body["scopes"] = serde_json::json!(caller.scopes());
        body["claims"] = serde_json::Value::Object(caller.claims().clone());
    }
    match &open.purpose {
        LinkPurpose::Connection { transport, hai } => {
            body["transport"] = match transport {
                TransportKind::WebSocket => "ws",
                TransportKind::Stream => "stream",
            }
            .into();
            body["hai"] = hai.as_str().into();
            if let Some((session, next_seq)) = &open.greeted {
                body["greeted"] = serde_json::json!([session, next_seq]);
            }
        }
        LinkPurpose::Post { session } => body["post"] = session.as_str().into(),
    }
    frame(b'O', id, body.to_string().as_bytes())
}

fn decode_open(body: &[u8]) -> Option<(String, LinkOpen)> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let from = value["from"].as_str()?.to_owned();
    let subject = value["subject"].as_str().map(str::to_owned);
    let purpose = if let Some(session) = value["post"].as_str() {
        LinkPurpose::Post {
            session: session.to_owned(),
        }
    } else {
        let transport = match value["transport"].as_str()? {
            "ws" => TransportKind::WebSocket,
            "stream" => TransportKind::Stream,
            _ => return None,
        };
        LinkPurpose::Connection {
            transport,
            hai: value["hai"].as_str()?.to_owned(),
        }
    };
    let caller = subject.as_ref().map(|subject| {
        let scopes: Vec<String> = value["scopes"]
            .as_array()
            .map(|s| {
                s.iter()
                    .filter_map(|s| s.as_str())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let claims = value["claims"].as_object().cloned().unwrap_or_default();
        std::sync::Arc::new(
            crate::context::Caller::new(subject.clone())
                .with_scopes(scopes)
                .with_claims(claims),
        )
    });
    let greeted = match &value["greeted"] {
        serde_json::Value::Array(pair) => match pair.as_slice() {
            [session, next_seq] => Some((session.as_str()?.to_owned(), next_seq.as_u64()?)),
            _ => return None,
        },
        _ => None,
    };
    Some((
        from,
        LinkOpen {
            subject,
            caller,
            purpose,
            greeted,
        },
    ))
}

fn encode_message(id: u64, message: &LinkMessage) -> Vec<u8> {
    match message {
        LinkMessage::Text(text) => frame(b'T', id, text),
        LinkMessage::Binary(bytes) => frame(b'B', id, bytes),
        LinkMessage::TooLarge => frame(b'L', id, b""),
        LinkMessage::Activity => frame(b'A', id, b""),
        LinkMessage::KeepAlive => frame(b'K', id, b""),
        LinkMessage::Close { code, reason } => {
            frame(b'C', id, format!("{code} {reason}").as_bytes())
        }
        LinkMessage::Done(status) => frame(b'D', id, status.to_string().as_bytes()),
        LinkMessage::Heartbeat => frame(b'H', id, b""),
    }
}

fn decode_message(kind: u8, body: &[u8]) -> Option<LinkMessage> {
    Some(match kind {
        b'T' => LinkMessage::Text(Bytes::copy_from_slice(body)),
        b'B' => LinkMessage::Binary(Bytes::copy_from_slice(body)),
        b'L' => LinkMessage::TooLarge,
        b'A' => LinkMessage::Activity,
        b'K' => LinkMessage::KeepAlive,
        b'C' => {
            let text = std::str::from_utf8(body).ok()?;
            let (code, reason) = text.split_once(' ').unwrap_or((text, ""));
            LinkMessage::Close {
                code: code.parse().ok()?,
                reason: reason.to_owned(),
            }
        }
        b'D' => LinkMessage::Done(std::str::from_utf8(body).ok()?.parse().ok()?),
        b'H' => LinkMessage::Heartbeat,
        _ => return None,
    })
}

/// A `SessionStore` around the shared `Arc` (the server keeps the typed one).
pub(crate) struct SharedRedisStore(pub(crate) Arc<RedisSessionStore>);

impl SessionStore for SharedRedisStore {
    fn register(&self, id: &str) -> Takeovers {
        self.0.local.register(id)
    }

    fn find(&self, id: &str) -> Option<TakeoverAddress> {
        self.0.local.find(id)
    }

    fn remove(&self, id: &str) {
        self.0.local.remove(id);
        // Sessions ended by this instance's shutdown stay recorded: their
        // clients resume them on another instance.
        let shutting_down = self.0.shutdown.get().is_some_and(|s| s.is_cancelled());
        if !shutting_down {
            self.0.enqueue(Entry::Ended {
                id: self.0.id_arc(id),
            });
        }
    }

    fn hand_off(&self, id: &str) {
        self.0.local.remove(id);
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
            Record::CallOpened { call_id } => Entry::CallOpened {
                id,
                call_id: call_id.to_owned(),
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

    fn restore(&self, id: &str) -> StoreFuture<Result<Snapshot, NotRestored>> {
        Box::pin(RedisSessionStore::restore_from_redis(
            Arc::clone(&self.0),
            id.to_owned(),
        ))
    }

    fn link(&self, owner: &str, open: LinkOpen) -> StoreFuture<Result<Link, &'static str>> {
        Box::pin(Arc::clone(&self.0).open_link(owner.to_owned(), open))
    }

    fn lease_left(&self, owner: &str) -> StoreFuture<Result<Option<Duration>, &'static str>> {
        let store = Arc::clone(&self.0);
        let owner = owner.to_owned();
        Box::pin(async move { store.lease_left(&owner).await })
    }
}

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

    #[test]
    fn urls_are_checked_when_the_store_is_made() {
        let err = RedisSessionStore::new("not a url", "a", Duration::from_secs(1), 10)
            .err()
            .expect("refused");
        assert!(!err.is_empty());
        assert!(
            RedisSessionStore::new("redis://127.0.0.1:1", "a", Duration::from_secs(1), 10).is_ok()
        );
    }
}

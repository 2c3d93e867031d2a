//! Recording: sessions' records queued without blocking them, and one
//! writer task that sends them to Redis in batches, one [`RECORD`] call each;
//! sessions whose records were lost are marked once Redis is back.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::conn::{Conn, slot};
use super::keys::{open_key, session_key};
use super::scripts::RECORD;
use super::{IO_TIMEOUT, RedisSessionStore};
use crate::hash::FastMap;
use crate::session::{SessionStore, Takeover};

/// Records waiting for the writer, at most; more are dropped (and counted).
pub(super) const QUEUE: usize = 65_536;
/// Records sent in one batch, at most.
const BATCH: usize = 512;

/// One record, owned, on its way to the writer.
pub(super) enum Entry {
    Opened {
        id: Arc<str>,
        subject: Option<String>,
        /// Begun on another instance, which handed it to this one.
        adopted: bool,
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
        last_rx_seq: u64,
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

/// One session's records in a batch, as [`RECORD`] takes them.
struct Group<'a> {
    id: &'a Arc<str>,
    ops: Vec<Op<'a>>,
    /// Where in `ops` the session's envelopes gather (none before its first,
    /// nor past its `Opened` or `Ended`).
    window: Option<usize>,
}

/// A stream session opened or closed in a batch: `+` or `-`, the key of
/// its subject's set, and its member.
type StreamChange = (&'static str, String, String);

/// One change to a session in a batch.
enum Op<'a> {
    /// Committed envelopes, oldest first; the newest's `seq`, and the
    /// inbound `seq` then.
    Window {
        envelopes: Vec<&'a [u8]>,
        seq: u64,
        last_rx_seq: u64,
    },
    /// The subject, and whether the session was adopted from another
    /// instance (it is this one's from now on, whatever Redis says).
    Opened(Option<&'a str>, bool),
    /// A call owed a `TOOL_DONE`, and the inbound `seq` then.
    CallOpened(&'a str, u64),
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
                    .take_while(|op| !matches!(op, Op::Opened(..) | Op::Ended))
                    .find(|op| matches!(op, Op::CallOpened(c, _) if c == call_id));
                if let Some(opened) = opened {
                    *opened = Op::Gone;
                    return;
                }
            }
            Op::Opened(..) | Op::Ended => self.window = None,
            Op::CallOpened(..) | Op::Paused(_) | Op::Owed(_) | Op::Gone => {}
        }
        self.ops.push(op);
    }
}

impl Op<'_> {
    /// Appends this change to the [`RECORD`] call, as the script reads it.
    fn push_args(&self, call: &mut redis::Cmd) {
        match self {
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
            Op::Opened(subject, adopted) => {
                if *adopted {
                    call.arg("T");
                }
                match subject {
                    None => call.arg("O"),
                    Some(subject) => call.arg("U").arg(*subject),
                };
            }
            Op::CallOpened(call_id, last_rx_seq) => {
                call.arg("A").arg(*call_id).arg(*last_rx_seq);
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

impl RedisSessionStore {
    /// The writer: records, in batches, in order. Each batch is one call of
    /// the [`RECORD`] script: one round trip and one reply, whatever number
    /// of sessions and records it carries. Records made while a batch is on
    /// its way wait in the queue and make up the next one, so a busy
    /// instance sends larger batches rather than more of them.
    ///
    /// Shutdown does not stop it at once: the sessions' last records (the
    /// `TOOL_DONE`s of the calls shutdown cancels) are made after it, and
    /// their clients see them only once they are written, then resume on
    /// another instance, which restores what was written. So it drains: it
    /// goes on until no session is left here and the queue is empty, or
    /// [`drain_limit`](Self::drain_limit) has passed.
    pub(super) async fn write(
        self: Arc<Self>,
        mut rx: mpsc::Receiver<Entry>,
        mut conn: Conn,
        shutdown: CancellationToken,
    ) {
        let mut batch = Vec::with_capacity(BATCH);
        // The script's SHA1 once Redis has it.
        let mut sha = None;
        let mut last_failure = std::time::Instant::now();
        // Set once shutdown has begun: how long the writer may still drain.
        let mut draining: Option<tokio::time::Instant> = None;
        loop {
            let first = match draining {
                None => tokio::select! {
                    entry = rx.recv() => entry,
                    () = shutdown.cancelled() => {
                        draining = Some(tokio::time::Instant::now() + self.drain_limit());
                        continue;
                    }
                },
                Some(until) => match rx.try_recv() {
                    Ok(entry) => Some(entry),
                    Err(_) if self.local.is_empty() || tokio::time::Instant::now() >= until => {
                        break;
                    }
                    Err(_) => tokio::select! {
                        entry = rx.recv() => entry,
                        // The last session here has ended: look again.
                        () = self.emptied.notified() => continue,
                        () = tokio::time::sleep_until(until) => continue,
                    },
                },
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
                let sent = match sent {
                    Ok(Ok(fenced)) => {
                        // Before the batch counts as written: the gate asks.
                        self.fence(fenced);
                        true
                    }
                    _ => false,
                };
                // Asked for: written only once enough replicas have it.
                let replicated = match self.wait {
                    Some((replicas, timeout)) if sent => {
                        replicated(&mut conn, replicas, timeout).await
                    }
                    _ => true,
                };
                if sent && replicated {
                    let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
                    for (id, _) in &marks {
                        lost.remove(id);
                    }
                } else if sent {
                    // What a failover could cut short is never restored
                    // from: the batch's sessions are marked (and the marks
                    // just written are written again).
                    self.unreplicated.fetch_add(batch.len() as u64, Relaxed);
                    self.lost(batch.iter().map(Entry::session));
                    static UNREPLICATED: crate::stats::Throttle = crate::stats::Throttle::new();
                    if let Some(suppressed) = UNREPLICATED.allow() {
                        tracing::warn!(
                            ?self.wait,
                            suppressed,
                            "session records not acknowledged by the replicas in time: their sessions are marked lost"
                        );
                    }
                }
                if sent {
                    if !self.healthy.swap(true, Relaxed) {
                        tracing::info!(url = %self.redacted_url(), "Redis is reachable again");
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
                    tracing::warn!(url = %self.redacted_url(), "Redis is unreachable: session records are being dropped");
                }
            }
            let n = batch.len() as u64;
            self.written.send_modify(|w| *w += n);
            batch.clear();
        }
        if draining.is_some() {
            self.mark_lost_at_exit(&mut conn, &mut sha).await;
        }
    }

    /// How long the writer may drain after shutdown: as long as sessions may
    /// take to end (calls get `cancel_grace`, their last frames
    /// [`CLOSE_TIMEOUT`] more), and a little for the last round trip.
    fn drain_limit(&self) -> Duration {
        let grace = self
            .shared
            .get()
            .map_or(Duration::from_secs(5), |shared| shared.config.cancel_grace);
        grace + CLOSE_TIMEOUT + IO_TIMEOUT
    }

    /// Before the writer stops: sessions whose records were lost and were
    /// not marked yet are marked, so that no other instance restores them
    /// from what is missing. Best effort: Redis may still be away.
    async fn mark_lost_at_exit(&self, conn: &mut Conn, sha: &mut Option<String>) {
        loop {
            let marks: Vec<(Arc<str>, bool)> = {
                let lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
                lost.iter()
                    .take(MARKS_PER_BATCH)
                    .map(|id| (Arc::clone(id), false))
                    .collect()
            };
            if marks.is_empty() {
                return;
            }
            let send = self.send(conn, sha, &marks, &[]);
            if !matches!(tokio::time::timeout(IO_TIMEOUT, send).await, Ok(Ok(_))) {
                return;
            }
            let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
            for (id, _) in &marks {
                lost.remove(id);
            }
        }
    }

    /// Sends a batch of records: one `EVALSHA` of [`RECORD`], the script
    /// loaded first when Redis does not have it (the first batch, or Redis
    /// restarted since); in a Redis Cluster, one per hash slot of the
    /// batch's sessions, all at once (see [`send_by_slot`](Self::send_by_slot)).
    /// Answers the sessions whose records were refused (another instance
    /// restored them).
    async fn send(
        &self,
        conn: &mut Conn,
        sha: &mut Option<String>,
        marks: &[(Arc<str>, bool)],
        batch: &[Entry],
    ) -> redis::RedisResult<Vec<String>> {
        if conn.is_cluster() {
            return self.send_by_slot(conn, sha, marks, batch).await;
        }
        let (groups, streams) = self.grouped(batch);
        let groups: Vec<&Group<'_>> = groups.iter().collect();
        let marks: Vec<&(Arc<str>, bool)> = marks.iter().collect();
        let record = |sha: &str| self.record_call(sha, None, &marks, &groups, &streams);
        if let Some(known) = sha.as_deref() {
            match record(known).query_async(conn).await {
                Err(e) if is_no_script(&e) => {}
                done => return done,
            }
        }
        let loaded = load(conn).await?;
        let call = record(&loaded);
        *sha = Some(loaded);
        call.query_async(conn).await
    }

    /// [`send`](Self::send) to a Redis Cluster: a script may only touch
    /// keys its node holds, so the batch is split by the node that holds
    /// each session's slot (a session's keys share it: see `keys.rs`), as
    /// the cluster said last (`CLUSTER SLOTS`), each part one `EVALSHA`
    /// routed by its first session's key; and the stream sessions opened
    /// and closed are each one `SADD` / `SREM`. The parts go at once: a
    /// batch costs one script and one round trip per node it touches.
    /// Within a session, records keep their order (they are in one part);
    /// across sessions no order was ever promised.
    ///
    /// Any part failing fails the batch: its sessions are marked as having
    /// lost records, as when Redis is away, and the slots are asked again
    /// for the next batch. That covers slots that moved since they were
    /// asked: the part's node refuses the keys it no longer holds, some of
    /// the part's records may have been applied before, and what Redis
    /// holds of those sessions is no longer trusted, whatever it is.
    async fn send_by_slot(
        &self,
        conn: &mut Conn,
        sha: &mut Option<String>,
        marks: &[(Arc<str>, bool)],
        batch: &[Entry],
    ) -> redis::RedisResult<Vec<String>> {
        use futures_util::future::join_all;
        let (groups, streams) = self.grouped(batch);
        let nodes = conn.slot_nodes().await?;
        // By node (a slot no node is known to hold: a part of its own):
        // the key that routes the part, its marks, its sessions.
        type Part<'p, 'a> = (String, Vec<&'p (Arc<str>, bool)>, Vec<&'p Group<'a>>);
        let mut parts: std::collections::BTreeMap<usize, Part<'_, '_>> = Default::default();
        let node_of = |key: &str| {
            let slot = slot(key.as_bytes());
            let node = nodes.as_ref().and_then(|n| n.node(slot));
            node.unwrap_or(usize::from(u16::MAX) + usize::from(slot))
        };
        for mark in marks {
            let key = session_key(&mark.0);
            let at = node_of(&key);
            let part = parts
                .entry(at)
                .or_insert_with(|| (key, Vec::new(), Vec::new()));
            part.1.push(mark);
        }
        for group in &groups {
            let key = session_key(group.id);
            let at = node_of(&key);
            let part = parts
                .entry(at)
                .or_insert_with(|| (key, Vec::new(), Vec::new()));
            part.2.push(group);
        }
        let sha = match sha.as_deref() {
            Some(known) => known.to_owned(),
            None => {
                let loaded = load(conn).await?;
                *sha = Some(loaded.clone());
                loaded
            }
        };
        let calls: Vec<redis::Cmd> = parts
            .values()
            .map(|(key, marks, groups)| self.record_call(&sha, Some(key), marks, groups, &[]))
            .collect();
        let shared = conn.clone();
        let run = |call: &redis::Cmd| {
            let mut conn = shared.clone();
            let call = call.clone();
            async move { call.query_async::<Vec<String>>(&mut conn).await }
        };
        let mut answers = join_all(calls.iter().map(run)).await;
        // A node that restarted since has lost the script: load it (on
        // every primary) and send again what it refused, nothing else.
        if answers
            .iter()
            .any(|a| matches!(a, Err(e) if is_no_script(e)))
        {
            load(conn).await?;
            for (answer, call) in answers.iter_mut().zip(&calls) {
                if matches!(answer, Err(e) if is_no_script(e)) {
                    *answer = run(call).await;
                }
            }
        }
        let streams = streams.iter().map(|(kind, key, member)| {
            let mut conn = conn.clone();
            let mut call = redis::cmd(if *kind == "+" { "SADD" } else { "SREM" });
            call.arg(key).arg(member);
            async move { call.query_async::<()>(&mut conn).await }
        });
        for changed in join_all(streams).await {
            changed?;
        }
        let mut fenced = Vec::new();
        for answer in answers {
            let answer = answer.inspect_err(|_| conn.forget_slots())?;
            fenced.extend(answer);
        }
        Ok(fenced)
    }

    /// The [`RECORD`] call for a batch of records, with `key` as its one key
    /// (in a Redis Cluster, the key that routes it), or none.
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
    fn record_call(
        &self,
        sha: &str,
        key: Option<&str>,
        marks: &[&(Arc<str>, bool)],
        groups: &[&Group<'_>],
        streams: &[StreamChange],
    ) -> redis::Cmd {
        let mut call = redis::cmd("EVALSHA");
        call.arg(sha);
        match key {
            Some(key) => call.arg(1).arg(key),
            None => call.arg(0),
        };
        call.arg(&*self.instance)
            .arg(self.ttl.as_millis() as u64)
            .arg(self.window_cap);
        for (id, here) in marks {
            call.arg("S")
                .arg(&**id)
                .arg("L")
                .arg(if *here { "1" } else { "0" });
        }
        for group in groups {
            call.arg("S").arg(&**group.id);
            for op in &group.ops {
                op.push_args(&mut call);
            }
        }
        for (kind, key, member) in streams {
            call.arg(*kind).arg(key).arg(member);
        }
        call
    }

    /// A batch's records grouped by session, in the order sessions first
    /// appear; and apart, the stream sessions opened and closed (`+`/`-`,
    /// key, member), in order.
    fn grouped<'a>(&self, batch: &'a [Entry]) -> (Vec<Group<'a>>, Vec<StreamChange>) {
        let mut index: FastMap<&str, usize> = FastMap::default();
        let mut groups: Vec<Group<'_>> = Vec::new();
        let mut streams: Vec<StreamChange> = Vec::new();
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
                Entry::Opened {
                    id,
                    subject,
                    adopted,
                } => (id, Op::Opened(subject.as_deref(), *adopted)),
                Entry::CallOpened {
                    id,
                    call_id,
                    last_rx_seq,
                } => (id, Op::CallOpened(call_id, *last_rx_seq)),
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
        (groups, streams)
    }

    /// Sessions whose records Redis refused: another instance restored
    /// them (this one's lease had lapsed, Redis being away or slow), and
    /// runs them now. The copy here is stale: it must not reach its client,
    /// and it ends, its calls cancelled. A connection on it is closed, and
    /// its client, resuming, is relayed to the instance that has it.
    fn fence(self: &Arc<Self>, ids: Vec<String>) {
        for id in ids {
            let Some(address) = self.local.find(&id) else {
                continue;
            };
            let id: Arc<str> = Arc::from(id);
            {
                let mut fenced = self.fenced.lock().unwrap_or_else(|e| e.into_inner());
                if fenced.len() < MAX_LOST && fenced.insert(Arc::clone(&id)) {
                    self.fenced_count.store(fenced.len(), Relaxed);
                }
            }
            tracing::warn!(
                session = %id,
                "another instance restored this session (this instance's lease lapsed): it ends here"
            );
            let Some(shared) = self.shared.get() else {
                continue;
            };
            let store = Arc::clone(self);
            shared.runner.tasks().spawn(async move {
                let (reply, answer) = tokio::sync::oneshot::channel();
                let request = Box::new(Takeover {
                    subject: None,
                    caller: None,
                    last_rx_seq: 0,
                    reply,
                    evict: true,
                });
                let evicted = tokio::time::timeout(EVICT_LIMIT, async {
                    address.send(request).await.ok()?;
                    answer.await.ok()?.ok()
                })
                .await;
                // Dropping the session cancels its calls.
                drop(evicted);
                store.local.remove_if(&id, &address);
                store.unfence(&id);
                if store.shutting_down() {
                    store.left_at_shutdown();
                }
            });
        }
    }

    /// Whether Redis refused records of session `id` (see [`Self::fence`]).
    pub(super) fn is_fenced(&self, id: &str) -> bool {
        if self.fenced_count.load(Relaxed) == 0 {
            return false;
        }
        let fenced = self.fenced.lock().unwrap_or_else(|e| e.into_inner());
        fenced.contains(id)
    }

    /// Session `id` has ended here, or runs here again.
    pub(super) fn unfence(&self, id: &str) {
        if self.fenced_count.load(Relaxed) == 0 {
            return;
        }
        let mut fenced = self.fenced.lock().unwrap_or_else(|e| e.into_inner());
        if fenced.remove(id) {
            self.fenced_count.store(fenced.len(), Relaxed);
        }
    }

    pub(super) fn id_arc(&self, id: &str) -> Arc<str> {
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

    pub(super) fn enqueue(&self, entry: Entry) {
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
    /// in Redis once it answers again (`ResumeRefused::RecordsLost`).
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
}

/// Whether `replicas` replicas acknowledged everything written on `conn`
/// so far, within `timeout` (`WAIT`; on a Redis Cluster, every primary's
/// replicas, the least of them).
async fn replicated(conn: &mut Conn, replicas: u32, timeout: Duration) -> bool {
    let mut wait = redis::cmd("WAIT");
    wait.arg(replicas).arg(timeout.as_millis() as u64);
    let acknowledged = tokio::time::timeout(timeout + IO_TIMEOUT, wait.query_async::<i64>(conn));
    matches!(acknowledged.await, Ok(Ok(n)) if n >= i64::from(replicas))
}

/// Sessions with lost records waiting to be marked, at most.
const MAX_LOST: usize = 100_000;

/// Sessions marked lost in one batch, at most.
const MARKS_PER_BATCH: usize = 1024;

/// How long a fenced session's copy here has to give itself up; past it,
/// it is forgotten here all the same (and its envelopes stay held back).
const EVICT_LIMIT: Duration = Duration::from_secs(5);

/// How often the writer tries Redis again while it is away.
const PROBE: Duration = Duration::from_millis(250);

/// How long a session's last frames may take after its calls were cancelled
/// at shutdown (as the connection driver allows them).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether Redis answered that it does not have the script.
fn is_no_script(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// Loads [`RECORD`] (on every primary, in a Redis Cluster): its SHA1.
async fn load(conn: &mut Conn) -> redis::RedisResult<String> {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(RECORD)
        .query_async(conn)
        .await
}

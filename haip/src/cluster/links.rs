//! Links between instances over Redis pub/sub: this instance's channel and
//! the link ends it feeds, links opened to other instances, and which
//! instance holds a stream session (where an upstream POST is forwarded).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use redis::AsyncCommands;
use tokio_util::sync::CancellationToken;

use super::conn::{Heard, Subscription};
use super::keys::{inbox_key, lease_key, open_key};
use super::messages::{decode_message, decode_open, encode_message, encode_open, split_message};
use super::tasks;
use super::writer::Entry;
use super::{IO_TIMEOUT, LEASE_REFRESH, LEASE_TTL, RedisSessionStore};
use crate::session::ResumeRefused;
use crate::session::link::{IncomingLink, Link, LinkMessage, LinkOpen, LinkReceiver, LinkSender};

/// Where the messages of one link go on this instance.
pub(super) struct LinkEnd {
    tx: LinkSender,
    /// When the other end was last heard (ms since the epoch).
    heard: Arc<AtomicU64>,
}

/// Links other instances may have waiting for the server, at most.
pub(super) const INCOMING_QUEUE: usize = 256;

/// How long an instance waits before subscribing again after losing Redis.
const RESUBSCRIBE: Duration = Duration::from_secs(1);

impl RedisSessionStore {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Subscribes to this instance's channel (see [`Target::subscribe`](super::conn::Target::subscribe)).
    pub(super) async fn subscribe(&self) -> redis::RedisResult<Subscription> {
        let channel = inbox_key(&self.instance);
        tokio::time::timeout(IO_TIMEOUT, self.target.subscribe(&channel))
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
    pub(super) async fn listen(
        self: Arc<Self>,
        subscribed: Subscription,
        shutdown: CancellationToken,
    ) {
        use futures_util::StreamExt;
        let mut subscribed = Some(subscribed);
        loop {
            match subscribed.take() {
                Some(Subscription::Single(pubsub)) => {
                    let mut messages = pubsub.into_on_message();
                    loop {
                        tokio::select! {
                            () = shutdown.cancelled() => return,
                            message = messages.next() => match message {
                                Some(message) => self.dispatch(message.get_payload_bytes()),
                                None => break,
                            },
                        }
                    }
                    self.subscription_lost();
                }
                Some(Subscription::Cluster {
                    _conn,
                    mut rx,
                    queued,
                }) => loop {
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        heard = rx.recv() => match heard {
                            Some(Heard::Message(payload)) => {
                                queued.fetch_sub(payload.len(), Relaxed);
                                self.dispatch(&payload);
                            }
                            // A node gone, or the channel's slot moved: a
                            // fresh subscription, on the node that has the
                            // slot now, rather than trusting the old one.
                            Some(Heard::Lost) | None => {
                                self.subscription_lost();
                                break;
                            }
                        },
                    }
                },
                None => {}
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(RESUBSCRIBE) => {}
            }
            subscribed = self.subscribe().await.ok();
        }
    }

    /// The subscription was lost: so are the links it fed (their other ends
    /// learn it from the silence).
    fn subscription_lost(&self) {
        tracing::warn!(url = %self.redacted_url(), "lost the subscription to other instances' messages");
        self.lock_links().clear();
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
            self.tasks.deliver(body);
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
                    pipe.add_command(self.target.publish(&channel, message))
                        .ignore();
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
    /// POST of `subject` goes to (docs/protocol.md §15.4, across the cluster): the
    /// first of `candidates` open elsewhere, else the subject's only open
    /// stream session when it has none here (`local` counts those). Gives
    /// `(session, instance)`; `Err` ([`ResumeRefused::StoreUnavailable`])
    /// when Redis cannot say.
    pub(crate) async fn locate(
        &self,
        subject: Option<&str>,
        candidates: &[&str],
        local: usize,
    ) -> Result<Option<(String, String)>, ResumeRefused> {
        let Some(mut conn) = self.conn.get().cloned().filter(|_| self.is_healthy()) else {
            return Err(ResumeRefused::StoreUnavailable);
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
            _ => return Err(ResumeRefused::StoreUnavailable),
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
    ) -> Result<Link, ResumeRefused> {
        let Some(mut conn) = self.conn.get().cloned().filter(|_| self.is_healthy()) else {
            return Err(ResumeRefused::StoreUnavailable);
        };
        let id = uuid::Uuid::new_v4().as_u64_pair().0;
        // The end first: the answer may come at once.
        let link = self.open_end(id, peer.clone());
        let opening = encode_open(id, &self.instance, &open);
        let published = tokio::time::timeout(
            IO_TIMEOUT,
            self.target
                .publish(&inbox_key(&peer), opening)
                .query_async::<u64>(&mut conn),
        )
        .await;
        match published {
            Ok(Ok(receivers)) if receivers > 0 => Ok(link),
            Ok(Ok(_)) => {
                self.lock_links().remove(&id);
                Err(ResumeRefused::Unreachable)
            }
            _ => {
                self.lock_links().remove(&id);
                Err(ResumeRefused::StoreUnavailable)
            }
        }
    }
}

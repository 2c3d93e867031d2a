//! Links other instances open to this one (feature `redis`, [`crate::session::link`]):
//! a client connection relayed here because this instance runs its session,
//! and upstream POSTs forwarded here because this instance holds the stream
//! they are for. Either is served as if the client had come here itself.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::driver;
use super::hub::Hub;
use crate::context::share::CallerKey;
use crate::session::Session;
use crate::session::link::{
    IncomingLink, Link, LinkMessage, LinkPurpose, LinkReceiver, LinkSender,
};
use crate::stats::Door;
use crate::transport::frame::{Batch, Element, Frame, Unit, WriteMeter, Writer};
use crate::transport::queue::frame_queue;
use crate::transport::stream;

/// How long the last frames of a relayed session may take to leave.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves the links other instances open to this one, until shutdown.
pub(crate) async fn serve(hub: Arc<Hub>, mut incoming: mpsc::Receiver<IncomingLink>) {
    let shutdown = hub.shared.shutdown.clone();
    loop {
        let next = tokio::select! {
            () = shutdown.cancelled() => return,
            next = incoming.recv() => next,
        };
        let Some(IncomingLink { link, open }) = next else {
            return;
        };
        let served = Arc::clone(&hub);
        match open.purpose {
            LinkPurpose::Connection { door, hai } => {
                let relayed = Relayed {
                    caller: open.caller,
                    door,
                    hai,
                    greeted: open.greeted,
                };
                hub.tracker.spawn(connection(served, link, relayed));
            }
            LinkPurpose::Post { session } => {
                hub.tracker.spawn(post(served, link, open.subject, session));
            }
        }
    }
}

/// What a relaying instance says of the connection it relays.
struct Relayed {
    caller: Option<Arc<crate::context::Caller>>,
    door: Door,
    /// The client's resumption `HAI`.
    hai: String,
    /// The fresh session the client was greeted with there, and its next `seq`.
    greeted: Option<(String, u64)>,
}

/// Runs a relayed connection: a fresh session here (the one its client was
/// greeted with on the relaying instance) whose first envelope is the
/// client's resumption `HAI`, so it takes over the session this instance
/// runs; its frames go back over the link.
async fn connection(hub: Arc<Hub>, link: Link, relayed: Relayed) {
    let Relayed {
        caller,
        door,
        hai,
        greeted,
    } = relayed;
    let subject = caller.as_ref().map(|c| c.subject().to_owned());
    let Link { out, inbound } = link;
    // The relaying instance counted the client's peer; here it is its
    // subject's session like any other.
    let key = CallerKey::of(caller.as_deref(), None, false);
    let guard = match hub.admit(&key) {
        Ok(guard) => guard,
        Err(crowded) => {
            let _ = out
                .send(LinkMessage::Close {
                    code: 1013,
                    reason: crowded.close_reason().into(),
                })
                .await;
            return;
        }
    };
    let _relayed = RelayedCount::new(&hub.shared.stats);
    let session = Session::relayed(Arc::clone(&hub.shared), door, caller, greeted);
    let (inbound_tx, inbound_rx) = mpsc::channel(stream::INBOUND_QUEUE);
    let (frames, frames_rx) = frame_queue();
    let meter = WriteMeter::new(Arc::clone(&hub.shared));
    let writer = Writer {
        frames,
        meter: Arc::clone(&meter),
    };
    // Upstream POSTs reach a relayed stream as they reach one whose client
    // is here, also once it resumed another session; a WebSocket session
    // takes none (its client sends on the socket), and is no candidate for
    // a POST that names no session (the subject's one open stream).
    let streams = door != Door::WebSocket;
    let entry = streams.then(|| {
        hub.sessions
            .insert(session.id(), subject.clone(), inbound_tx.clone())
    });
    let on_resumed: driver::OnResumed = if streams {
        hub.stream_alias(subject, inbound_tx.clone())
    } else {
        Box::new(|_: &str| {})
    };
    let feed = hub
        .tracker
        .spawn(feed(hai, inbound, inbound_tx, out.clone()));
    let pump = hub.tracker.spawn(pump(frames_rx, meter, out));
    driver::run_stream(session, inbound_rx, writer, &hub.shared, on_resumed).await;
    drop((guard, entry));
    // The writer is gone with the session: the pump ends once it has sent
    // what was left (the close, above all).
    let _ = tokio::time::timeout(FLUSH_TIMEOUT, pump).await;
    feed.abort();
}

/// What the client sends, from the link to the session, starting with its
/// `HAI`; the link's end (the client left, or its instance went silent) is
/// the connection's. The end of an upstream POST (`Done`) is answered over
/// `out` once the session has handled everything before it: the relaying
/// instance answers the POST then.
async fn feed(hai: String, mut link: LinkReceiver, session: mpsc::Sender<Unit>, out: LinkSender) {
    if session.send(Unit::Text(hai)).await.is_err() {
        return;
    }
    while let Some(message) = link.recv().await {
        let unit = match message {
            LinkMessage::Text(text) => match String::from_utf8(text.to_vec()) {
                Ok(text) => Unit::Text(text),
                Err(_) => Unit::ProtocolError {
                    code: 1007,
                    reason: "invalid utf-8",
                },
            },
            LinkMessage::Binary(bytes) => Unit::Binary(bytes),
            LinkMessage::TooLarge => Unit::TooLarge,
            LinkMessage::Activity => Unit::Activity,
            LinkMessage::Close { .. } => break,
            LinkMessage::Done(_) => {
                // An empty batch: the session finishes it after the units
                // before it.
                let status = match Batch::open(&session).await {
                    Some((envelopes, handled)) => {
                        drop(envelopes);
                        if handled.await.is_ok() { 200 } else { 404 }
                    }
                    None => 404,
                };
                if !out.send(LinkMessage::Done(status)).await || status != 200 {
                    return;
                }
                continue;
            }
            LinkMessage::KeepAlive | LinkMessage::Heartbeat => continue,
        };
        if session.send(unit).await.is_err() {
            return;
        }
    }
    let _ = session.send(Unit::Lost).await;
}

/// What the session writes, from its writer to the link. Waiting on the
/// link holds frames in the writer, where the session's back-pressure sees
/// them.
async fn pump(
    mut frames: crate::transport::queue::FrameReceiver,
    meter: Arc<WriteMeter>,
    out: LinkSender,
) {
    while let Some(frame) = frames.recv().await {
        let (message, last) = match frame {
            Frame::Envelope(text) => {
                let len = text.len();
                let sent = out.send(LinkMessage::Text(text)).await;
                meter.written(len);
                if !sent {
                    return;
                }
                continue;
            }
            Frame::KeepAlive => (LinkMessage::KeepAlive, false),
            Frame::Close { code, reason } => (
                LinkMessage::Close {
                    code,
                    reason: reason.to_owned(),
                },
                true,
            ),
        };
        if !out.send(message).await || last {
            return;
        }
    }
}

/// Delivers a forwarded upstream POST to stream `session` here, answering
/// the forwarding instance with the status this instance would have given.
async fn post(hub: Arc<Hub>, link: Link, subject: Option<String>, session: String) {
    let Link { out, mut inbound } = link;
    let Some(target) = hub.sessions.exact(subject.as_deref(), &session) else {
        let _ = out.send(LinkMessage::Done(404)).await;
        return;
    };
    let Some((envelopes, done_rx)) = Batch::open(&target).await else {
        let _ = out.send(LinkMessage::Done(404)).await;
        return;
    };
    loop {
        let element = match inbound.recv().await {
            Some(LinkMessage::Text(text)) => Element::Envelope(text_of(text)),
            Some(LinkMessage::TooLarge) => Element::TooLarge,
            Some(LinkMessage::Done(_)) => break,
            Some(LinkMessage::Heartbeat | LinkMessage::Activity | LinkMessage::KeepAlive) => {
                continue;
            }
            // The forwarding instance gave up: what was handed over stays handled.
            Some(LinkMessage::Close { .. } | LinkMessage::Binary(_)) | None => return,
        };
        if envelopes.send(element).await.is_err() {
            let _ = out.send(LinkMessage::Done(404)).await;
            return;
        }
    }
    drop(envelopes);
    let status = if done_rx.await.is_ok() { 200 } else { 404 };
    let _ = out.send(LinkMessage::Done(status)).await;
}

/// An envelope's text; one that is not UTF-8 is passed on as the session
/// would see it (and reports as invalid).
fn text_of(bytes: Bytes) -> String {
    String::from_utf8(bytes.to_vec())
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// A relayed connection, counted apart from the connections clients make
/// here (the cluster's totals count it once, where its client is).
struct RelayedCount<'a>(&'a crate::stats::Stats);

impl<'a> RelayedCount<'a> {
    fn new(stats: &'a crate::stats::Stats) -> RelayedCount<'a> {
        stats.relay_opened();
        RelayedCount(stats)
    }
}

impl Drop for RelayedCount<'_> {
    fn drop(&mut self) {
        self.0.relay_closed();
    }
}

//! Links between instances: what one instance sends another about a client
//! connection it relays, or an upstream POST it forwards, to the instance
//! that runs the session. The messages are plain values; a store shared by
//! several instances (Redis, feature `redis`) carries them.
//!
//! A relayed connection: the client is connected to instance B, its session
//! runs on A (its calls are A's tasks). B opens a link to A with the client's
//! resumption `HAI`; A runs the session as if the client were connected to it
//! (the replay, the confirming `HAI`, every later envelope), and B copies
//! what the client sends to A and what A sends to the client. Either side
//! ends the link with [`LinkMessage::Close`]; a side silent for longer than a
//! lease ends it too, as lost.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// Bytes a link holds in one direction before its reader takes them (a
/// single larger message is taken alone). A writer waits for room; the
/// instance delivering another's messages cannot wait, and ends a link whose
/// reader fell this far behind.
pub(crate) const LINK_BYTES: u32 = 4 << 20;

/// What a message weighs beyond its bytes, so that small ones are bounded
/// in number too.
const MESSAGE_OVERHEAD: usize = 64;

/// What a link is opened for.
#[cfg(feature = "redis")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LinkPurpose {
    /// Relay a client connection whose first envelope, `hai`, resumes a
    /// session the other instance runs.
    Connection {
        /// The door the client came in by, on the relaying instance.
        door: crate::stats::Door,
        hai: String,
    },
    /// Deliver the envelopes of an upstream POST to stream `session`.
    Post { session: String },
}

/// The first message of a link.
#[cfg(feature = "redis")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LinkOpen {
    /// The subject the client authenticated as.
    pub(crate) subject: Option<String>,
    /// The relayed client's caller: its scopes and claims come along, so the
    /// session it resumes there knows what it may call (docs/protocol.md §17.1).
    pub(crate) caller: Option<std::sync::Arc<crate::context::Caller>>,
    pub(crate) purpose: LinkPurpose,
    /// A relayed connection's fresh session, which its client was greeted
    /// with on the relaying instance, and the next `seq` it would commit:
    /// if the resumption is refused, the connection stays on it (docs/protocol.md
    /// §11.3), run from then on by the instance the link reaches.
    pub(crate) greeted: Option<(String, u64)>,
}

/// One message on an open link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LinkMessage {
    /// An envelope's text: from the client (relayed or posted) or to it.
    Text(Bytes),
    /// A binary frame from the client.
    Binary(Bytes),
    /// The client sent a message over `max_message_bytes` (dropped).
    TooLarge,
    /// The client showed it is there without sending an envelope.
    Activity,
    /// A keep-alive frame for the client.
    #[cfg(feature = "redis")]
    KeepAlive,
    /// The end of the link. To the relaying side: close the client's
    /// connection with `code` and `reason`; to the running side: the client
    /// has gone (`code` 0) or the relaying instance is stopping.
    Close { code: u16, reason: String },
    /// An upstream POST's body has ended (to the running side), or was
    /// handled with this HTTP status (to the forwarding or relaying side):
    /// on a forwarded POST's link, and on a relayed connection's after each
    /// POST's envelopes.
    Done(u16),
    /// Nothing to say but that the sender is alive.
    #[cfg(feature = "redis")]
    Heartbeat,
}

/// A link another instance opened to this one, for the server to serve.
#[cfg(feature = "redis")]
pub(crate) struct IncomingLink {
    pub(crate) link: Link,
    pub(crate) open: LinkOpen,
}

impl LinkMessage {
    /// What the message counts against a link's [`LINK_BYTES`].
    fn weight(&self) -> u32 {
        let bytes = match self {
            LinkMessage::Text(bytes) | LinkMessage::Binary(bytes) => bytes.len(),
            LinkMessage::Close { reason, .. } => reason.len(),
            _ => 0,
        };
        (bytes + MESSAGE_OVERHEAD).min(LINK_BYTES as usize) as u32
    }
}

/// One direction of a link: in order, bounded by bytes ([`LINK_BYTES`]).
#[cfg(any(test, feature = "redis"))]
pub(crate) fn channel() -> (LinkSender, LinkReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let room = Arc::new(Semaphore::new(LINK_BYTES as usize));
    (LinkSender { tx, room }, LinkReceiver { rx })
}

/// The writing side of [`channel`]. Dropping every sender ends it.
#[derive(Clone)]
pub(crate) struct LinkSender {
    // Each message holds its bytes of room until its reader takes it (or
    // the reader goes, dropping what it never took).
    tx: mpsc::UnboundedSender<(LinkMessage, OwnedSemaphorePermit)>,
    room: Arc<Semaphore>,
}

impl LinkSender {
    /// Sends once there is room; false once the reader has gone.
    pub(crate) async fn send(&self, message: LinkMessage) -> bool {
        let weight = message.weight();
        match Arc::clone(&self.room).acquire_many_owned(weight).await {
            Ok(room) => self.tx.send((message, room)).is_ok(),
            Err(_) => false,
        }
    }

    /// Sends if there is room now; false if not, or the reader has gone.
    #[cfg(feature = "redis")]
    pub(crate) fn try_send(&self, message: LinkMessage) -> bool {
        let weight = message.weight();
        match Arc::clone(&self.room).try_acquire_many_owned(weight) {
            Ok(room) => self.tx.send((message, room)).is_ok(),
            Err(_) => false,
        }
    }
}

/// The reading side of [`channel`].
pub(crate) struct LinkReceiver {
    rx: mpsc::UnboundedReceiver<(LinkMessage, OwnedSemaphorePermit)>,
}

impl LinkReceiver {
    /// The next message; `None` once every sender has gone.
    pub(crate) async fn recv(&mut self) -> Option<LinkMessage> {
        self.rx.recv().await.map(|(message, _room)| message)
    }

    /// The next message if one is waiting.
    #[cfg(feature = "redis")]
    pub(crate) fn try_recv(&mut self) -> Option<LinkMessage> {
        self.rx.try_recv().ok().map(|(message, _room)| message)
    }
}

/// One end of an open link.
pub(crate) struct Link {
    /// To the other instance, in order. Dropping it ends the link.
    pub(crate) out: LinkSender,
    /// From the other instance, in order; ends (`None`) when the link is
    /// lost: the other instance went silent, or the shared store did.
    pub(crate) inbound: LinkReceiver,
}

impl Link {
    /// Sends one message; false once the link is gone.
    pub(crate) async fn send(&self, message: LinkMessage) -> bool {
        self.out.send(message).await
    }
}

/// The reason of a close frame that came over a link, as one of the
/// reasons this server closes with (a frame's reason is static).
pub(crate) fn close_reason(reason: &str) -> &'static str {
    const KNOWN: [&str; 10] = [
        "server shutdown",
        "too slow",
        "outbound queue overflow",
        "session resumed elsewhere",
        "idle",
        "message too large",
        "protocol error",
        "invalid utf-8",
        "version incompatible",
        "too many sessions",
    ];
    KNOWN
        .into_iter()
        .find(|known| *known == reason)
        .unwrap_or("closed by the instance running the session")
}

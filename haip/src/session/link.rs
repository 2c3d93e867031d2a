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

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::session::TransportKind;

/// Messages a link holds in either direction before its reader takes them;
/// a reader that falls further behind loses the link.
pub(crate) const LINK_QUEUE: usize = 256;

/// What a link is opened for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LinkPurpose {
    /// Relay a client connection whose first envelope, `hai`, resumes a
    /// session the other instance runs.
    Connection {
        transport: TransportKind,
        hai: String,
    },
    /// Deliver the envelopes of an upstream POST to stream `session`.
    Post { session: String },
}

/// The first message of a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LinkOpen {
    /// The subject the client authenticated as.
    pub(crate) subject: Option<String>,
    pub(crate) purpose: LinkPurpose,
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
    KeepAlive,
    /// The end of the link. To the relaying side: close the client's
    /// connection with `code` and `reason`; to the running side: the client
    /// has gone (`code` 0) or the relaying instance is stopping.
    Close { code: u16, reason: String },
    /// An upstream POST's body has ended (to the running side), or was
    /// handled with this HTTP status (to the forwarding side).
    Done(u16),
    /// Nothing to say but that the sender is alive.
    Heartbeat,
}

/// A link another instance opened to this one, for the server to serve.
pub(crate) struct IncomingLink {
    pub(crate) link: Link,
    pub(crate) open: LinkOpen,
}

/// One end of an open link.
pub(crate) struct Link {
    /// To the other instance, in order. Dropping it ends the link.
    pub(crate) out: mpsc::Sender<LinkMessage>,
    /// From the other instance, in order; ends (`None`) when the link is
    /// lost: the other instance went silent, or the shared store did.
    pub(crate) inbound: mpsc::Receiver<LinkMessage>,
}

impl Link {
    /// Sends one message; false once the link is gone.
    pub(crate) async fn send(&self, message: LinkMessage) -> bool {
        self.out.send(message).await.is_ok()
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

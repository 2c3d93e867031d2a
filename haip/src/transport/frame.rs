//! What a transport exchanges with the connection driver: inbound units,
//! already framed, and outbound frames for the transport's writer, with the
//! meter that counts what the writer holds (docs/protocol.md §18.1).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use bytes::Bytes;
use tokio::sync::{Notify, mpsc, oneshot};

pub(crate) use super::queue::Frame;
use super::queue::FrameSender;

use crate::session::Shared;

/// One inbound unit, already framed by the transport.
pub(crate) enum Unit {
    /// One envelope's text (a WebSocket text message, an NDJSON line, ...).
    Text(String),
    /// The envelopes of one upstream POST, handled in order as they arrive
    /// and as the connection drains.
    Batch(Batch),
    /// A unit over `max_message_bytes`: reported, then the connection closes.
    TooLarge,
    /// A binary WebSocket message (docs/protocol.md §13).
    Binary(Bytes),
    /// Inbound traffic with nothing to handle (a WebSocket ping or pong): it
    /// only shows the client is there (`idle_timeout`).
    Activity,
    /// The client broke the transport's protocol: close with this code
    /// (WebSocket 1007 for invalid UTF-8, 1002 otherwise); nothing more is read.
    ProtocolError { code: u16, reason: &'static str },
    /// The client's side of the connection failed (a request body that broke
    /// off): the connection is lost.
    Lost,
}

/// The envelopes of one upstream POST (docs/protocol.md §15.4), decoded from its body
/// as it arrives.
pub(crate) struct Batch {
    /// Each envelope, in order; closed after the last.
    pub(crate) envelopes: mpsc::Receiver<Element>,
    /// Told when every envelope has been handled.
    pub(crate) done: oneshot::Sender<()>,
}

/// Envelopes of an upstream POST decoded ahead of the session handling them.
const BATCH_QUEUE: usize = 16;

impl Batch {
    /// Opens a batch on the stream session at `target`: where its envelopes
    /// go, and what says they were all handled; `None` if the session has
    /// gone.
    pub(crate) async fn open(
        target: &mpsc::Sender<Unit>,
    ) -> Option<(mpsc::Sender<Element>, oneshot::Receiver<()>)> {
        let (done_tx, done_rx) = oneshot::channel();
        let (envelopes, envelopes_rx) = mpsc::channel(BATCH_QUEUE);
        let batch = Batch {
            envelopes: envelopes_rx,
            done: done_tx,
        };
        target.send(Unit::Batch(batch)).await.ok()?;
        Some((envelopes, done_rx))
    }
}

/// One element of an upstream POST body.
#[derive(Debug)]
pub(crate) enum Element {
    /// An envelope's text.
    Envelope(String),
    /// An element over `max_message_bytes`: reported (`MESSAGE_TOO_LARGE`)
    /// and skipped; the rest of the body is handled.
    TooLarge,
}

/// Bytes of committed envelopes a writer may hold that it has not written
/// yet; beyond them, envelopes wait uncommitted in the session's outbox
/// (where progress can still be merged and bytes are counted). A single
/// larger envelope is handed over when the writer holds nothing.
pub(crate) const WRITER_BUDGET: usize = 256 * 1024;

/// The bytes a connection's writer holds but has not written yet, shared by
/// the driver (which adds) and the writer (which takes away and wakes the
/// driver). Counted in the server's `outboundBytes` too.
pub(crate) struct WriteMeter {
    bytes: AtomicUsize,
    drained: Notify,
    shared: Arc<Shared>,
}

impl WriteMeter {
    pub(crate) fn new(shared: Arc<Shared>) -> Arc<WriteMeter> {
        Arc::new(WriteMeter {
            bytes: AtomicUsize::new(0),
            drained: Notify::new(),
            shared,
        })
    }

    /// Bytes handed to the writer and not yet written.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Relaxed)
    }

    fn handed(&self, bytes: usize) {
        self.bytes.fetch_add(bytes, Relaxed);
        let gauge = &self.shared.stats.outbound_bytes;
        gauge.fetch_add(bytes as u64, Relaxed);
    }

    /// Resolves once the writer has written something since the last call.
    pub(crate) async fn drained(&self) {
        self.drained.notified().await;
    }

    /// The writer wrote `bytes`: count them out and wake the driver.
    pub(crate) fn written(&self, bytes: usize) {
        self.bytes.fetch_sub(bytes, Relaxed);
        let gauge = &self.shared.stats.outbound_bytes;
        gauge.fetch_sub(bytes as u64, Relaxed);
        #[cfg(feature = "metrics")]
        self.shared
            .stats
            .traffic
            .bytes_out
            .fetch_add(bytes as u64, Relaxed);
        self.drained.notify_one();
    }
}

impl Drop for WriteMeter {
    fn drop(&mut self) {
        // Frames the writer never wrote leave the server's count with it.
        let unwritten = *self.bytes.get_mut() as u64;
        self.shared
            .stats
            .outbound_bytes
            .fetch_sub(unwritten, Relaxed);
    }
}

/// The writer's end of a connection: frames go out through `frames`, and
/// `meter` counts what has not been written yet.
pub(crate) struct Writer {
    pub(crate) frames: FrameSender,
    pub(crate) meter: Arc<WriteMeter>,
}

impl Writer {
    /// Hands over one frame; false when the writer has gone.
    pub(crate) fn send(&self, frame: Frame) -> bool {
        if let Frame::Envelope(text) = &frame {
            self.meter.handed(text.len());
        }
        match self.frames.send(frame) {
            Ok(()) => true,
            Err(frame) => {
                if let Frame::Envelope(text) = &frame {
                    self.meter.written(text.len());
                }
                false
            }
        }
    }
}

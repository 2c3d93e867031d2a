//! A client connection relayed to the instance running its session, after it
//! resumed a session another instance runs (`resume.rs`): what the client
//! sends goes over the link, what comes back goes to the client.

use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::sync::oneshot;
use tokio::time::{Instant, Sleep};

use crate::session::Shared;
use crate::session::link::{Link, LinkMessage, close_reason};
use crate::transport::frame::{Batch, Element, Frame, Unit, Writer};

use super::connection::recv_batch;

/// How long a relayed upstream POST waits for the running side to say its
/// session has handled it, before it is answered anyway.
const ACK_LIMIT: Duration = Duration::from_secs(10);

/// A relayed connection: the link to the running side, and the POST under
/// way on it.
struct Relayed<'a> {
    link: Link,
    /// The upstream POST whose envelopes go over the link, one by one.
    batch: Option<Batch>,
    /// An upstream POST whose envelopes are all on the link: it is answered
    /// once the running side says the session has handled them (docs/protocol.md
    /// §15.4), not when they leave here. Its client sends nothing more
    /// meanwhile; an instance that never says so (an older haip) is taken
    /// at its word after `ACK_LIMIT`.
    posted: Option<oneshot::Sender<()>>,
    writer: &'a Writer,
    shared: &'a Shared,
}

/// Relays a client connection to the instance running its session (which
/// the link reaches) until either ends: what the client sends goes over the
/// link, what comes back goes to the client. A link that goes silent (its
/// instance died) closes the connection 1011, so the client resumes again,
/// and then wherever the session can be restored. A client that does not
/// read closes it `too slow`, as any other.
pub(super) async fn relay<S>(
    link: Link,
    batch: Option<Batch>,
    inbound: S,
    writer: &Writer,
    shared: &Shared,
) where
    S: Stream<Item = Unit>,
{
    tokio::pin!(inbound);
    let shutdown = shared.shutdown.clone().cancelled_owned();
    tokio::pin!(shutdown);
    let closed = writer.frames.closed();
    tokio::pin!(closed);
    let ack_limit = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(ack_limit);
    let mut relayed = Relayed {
        link,
        batch,
        posted: None,
        writer,
        shared,
    };
    loop {
        let posting = relayed.batch.is_some();
        let waiting = relayed.posted.is_some();
        let to_send = tokio::select! {
            biased;
            () = &mut shutdown => {
                relayed.shut_down().await;
                return;
            }
            message = relayed.link.inbound.recv() => match relayed.on_running(message).await {
                ControlFlow::Continue(()) => None,
                ControlFlow::Break(()) => return,
            },
            () = &mut closed => Some(LinkMessage::Close { code: 0, reason: String::new() }),
            () = &mut ack_limit, if waiting => {
                relayed.answer_posted();
                None
            }
            element = recv_batch(&mut relayed.batch), if posting => {
                relayed.on_post_element(element, ack_limit.as_mut())
            }
            unit = inbound.next(), if !posting && !waiting => relayed.on_client_unit(unit),
        };
        if let Some(message) = to_send {
            let last = matches!(message, LinkMessage::Close { .. });
            if !relayed.link.send(message).await || last {
                return;
            }
        }
    }
}

impl Relayed<'_> {
    /// The server shuts down: the session goes on there, parked, and the
    /// client resumes it.
    async fn shut_down(&mut self) {
        self.close(1001, 1001, "server shutdown").await;
    }

    /// Ends the relay from this side, for `reason`: the link closes with
    /// `link_code`, the client's connection with `code`.
    async fn close(&mut self, link_code: u16, code: u16, reason: &'static str) {
        let _ = self
            .link
            .send(LinkMessage::Close {
                code: link_code,
                reason: reason.into(),
            })
            .await;
        self.writer.send(Frame::Close { code, reason });
    }

    /// What the running side sent (`None`: the link is lost); `Break` when
    /// the relay ends.
    async fn on_running(&mut self, message: Option<LinkMessage>) -> ControlFlow<()> {
        match message {
            Some(LinkMessage::Text(text)) => {
                if !self.writer.send(Frame::Envelope(text)) {
                    return ControlFlow::Break(());
                }
                if self.too_slow() {
                    self.close_too_slow().await;
                    return ControlFlow::Break(());
                }
            }
            #[cfg(feature = "redis")]
            Some(LinkMessage::KeepAlive) => {
                self.writer.send(Frame::KeepAlive);
            }
            Some(LinkMessage::Close { code, reason }) => {
                if let Some(done) = self.batch.take() {
                    let _ = done.done.send(());
                }
                self.answer_posted();
                self.writer.send(Frame::Close {
                    code,
                    reason: close_reason(&reason),
                });
                return ControlFlow::Break(());
            }
            // The session has handled the POST (a 404: it has gone,
            // and the POST is answered so).
            Some(LinkMessage::Done(status)) => {
                if let Some(done) = self.posted.take()
                    && status == 200
                {
                    let _ = done.send(());
                }
            }
            Some(_) => {}
            None => {
                tracing::debug!("relay link lost");
                self.writer.send(Frame::Close {
                    code: 1011,
                    reason: "instance lost",
                });
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }

    /// The client is not reading (the session's own back-pressure runs on
    /// the other instance, which cannot see this writer).
    fn too_slow(&self) -> bool {
        self.writer.meter.bytes() > self.shared.config.max_outbound_bytes
    }

    async fn close_too_slow(&mut self) {
        self.shared.stats.closed_too_slow.fetch_add(1, Relaxed);
        self.close(0, 1008, "too slow").await;
    }

    /// Answers the POST whose envelopes are all on the link, if any.
    fn answer_posted(&mut self) {
        if let Some(done) = self.posted.take() {
            let _ = done.send(());
        }
    }

    /// The next envelope of the POST under way for the link, or its end
    /// (`None`), after which the POST waits for the running side (at most
    /// until `ack_limit`).
    fn on_post_element(
        &mut self,
        element: Option<Element>,
        ack_limit: Pin<&mut Sleep>,
    ) -> Option<LinkMessage> {
        match element {
            Some(Element::Envelope(text)) => Some(LinkMessage::Text(Bytes::from(text))),
            Some(Element::TooLarge) => Some(LinkMessage::TooLarge),
            None => {
                // The body has ended: the running side answers `Done`.
                self.posted = self.batch.take().map(|done| done.done);
                ack_limit.reset(Instant::now() + ACK_LIMIT);
                Some(LinkMessage::Done(0))
            }
        }
    }

    /// What the client sent, for the link (`None`: nothing to send yet).
    fn on_client_unit(&mut self, unit: Option<Unit>) -> Option<LinkMessage> {
        match unit {
            Some(Unit::Text(text)) => Some(LinkMessage::Text(Bytes::from(text))),
            Some(Unit::Binary(bytes)) => Some(LinkMessage::Binary(bytes)),
            Some(Unit::TooLarge) => Some(LinkMessage::TooLarge),
            Some(Unit::Activity) => Some(LinkMessage::Activity),
            Some(Unit::Batch(next)) => {
                self.batch = Some(next);
                None
            }
            Some(Unit::ProtocolError { code, reason }) => {
                self.writer.send(Frame::Close { code, reason });
                Some(LinkMessage::Close {
                    code: 0,
                    reason: reason.into(),
                })
            }
            Some(Unit::Lost) | None => Some(LinkMessage::Close {
                code: 0,
                reason: String::new(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::mpsc;

    use super::*;
    use crate::session::SessionConfig;
    use crate::session::link::channel;
    use crate::tool::Registry;
    use crate::transport::frame::WriteMeter;
    use crate::transport::queue::frame_queue;

    /// A relay with its link's other end, and the client's side of it.
    struct Relaying {
        /// What the relay sends to the running side.
        to_running: crate::session::link::LinkReceiver,
        /// What the running side sends to the relay.
        from_running: crate::session::link::LinkSender,
        /// The client's inbound units.
        client: mpsc::Sender<Unit>,
    }

    async fn with_relay(test: impl AsyncFnOnce(Relaying)) {
        let shared = Arc::new(Shared::new(
            SessionConfig::default(),
            Registry::default(),
            Default::default(),
        ));
        let (out, to_running) = channel();
        let (from_running, inbound) = channel();
        let link = Link { out, inbound };
        let (frames, _frames) = frame_queue();
        let writer = Writer {
            frames,
            meter: WriteMeter::new(Arc::clone(&shared)),
        };
        let (client, mut units) = mpsc::channel(4);
        let units = futures_util::stream::poll_fn(move |cx| units.poll_recv(cx));
        let relaying = Relaying {
            to_running,
            from_running,
            client,
        };
        tokio::select! {
            () = relay(link, None, units, &writer, &shared) => {}
            () = test(relaying) => {}
        }
    }

    /// A POST of one envelope through the relay; its `done`.
    async fn post(client: &mpsc::Sender<Unit>, text: &str) -> oneshot::Receiver<()> {
        let (batch, done) = {
            let (done_tx, done_rx) = oneshot::channel();
            let (envelopes, envelopes_rx) = mpsc::channel(4);
            let batch = Batch {
                envelopes: envelopes_rx,
                done: done_tx,
            };
            envelopes
                .send(Element::Envelope(text.to_owned()))
                .await
                .unwrap();
            (batch, done_rx)
        };
        client.send(Unit::Batch(batch)).await.unwrap();
        done
    }

    #[tokio::test(start_paused = true)]
    async fn a_relayed_post_is_answered_once_the_running_side_has_handled_it() {
        with_relay(async |mut r: Relaying| {
            let mut done = post(&r.client, "{}").await;
            assert_eq!(
                r.to_running.recv().await,
                Some(LinkMessage::Text(Bytes::from("{}")))
            );
            assert_eq!(r.to_running.recv().await, Some(LinkMessage::Done(0)));
            // Not answered while the running side has not said so.
            tokio::time::sleep(ACK_LIMIT / 2).await;
            assert!(done.try_recv().is_err());
            assert!(r.from_running.send(LinkMessage::Done(200)).await);
            tokio::time::timeout(Duration::from_secs(1), done)
                .await
                .expect("answered")
                .expect("handled");
            // A session gone there: the POST is not answered as handled.
            let done = post(&r.client, "{}").await;
            r.to_running.recv().await;
            r.to_running.recv().await;
            assert!(r.from_running.send(LinkMessage::Done(404)).await);
            assert!(done.await.is_err(), "answered 404");
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_instance_that_never_answers_a_relayed_post_is_taken_at_its_word() {
        with_relay(async |mut r: Relaying| {
            let done = post(&r.client, "{}").await;
            r.to_running.recv().await;
            assert_eq!(r.to_running.recv().await, Some(LinkMessage::Done(0)));
            // An older instance ignores `Done`: the POST is answered after
            // ACK_LIMIT all the same, and the next one goes through.
            tokio::time::timeout(ACK_LIMIT * 2, done)
                .await
                .expect("answered after the limit")
                .expect("as handled");
            let _next = post(&r.client, "[]").await;
            assert_eq!(
                r.to_running.recv().await,
                Some(LinkMessage::Text(Bytes::from("[]")))
            );
        })
        .await;
    }
}

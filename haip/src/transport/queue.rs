//! The queue between a connection's driver and its writer: frames in order,
//! unbounded in number (the driver bounds it in bytes, see `WriteMeter`), and
//! each end told when the other has gone.
//!
//! A mutex around a `VecDeque` and two notifications instead of a channel: a
//! channel allocates a block of slots up front, which an idle session would
//! carry for nothing (about 1.8 KiB of each idle session's memory).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use tokio::sync::Notify;

/// One outbound frame for the transport's writer.
#[derive(Debug)]
pub(crate) enum Frame {
    /// A committed envelope's JSON text (UTF-8).
    Envelope(Bytes),
    /// A keep-alive with no envelope (an SSE comment), for clients that filter `PING`.
    KeepAlive,
    /// The last frame: close with this code and reason (WebSocket) or end the stream.
    Close { code: u16, reason: &'static str },
}

#[derive(Default)]
struct Queue {
    state: Mutex<State>,
    /// Frames were queued, or the sending end went.
    queued: Notify,
    /// The receiving end went.
    gone: Notify,
}

#[derive(Default)]
struct State {
    frames: VecDeque<Frame>,
    sender_gone: bool,
    receiver_gone: bool,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is whole values: a panic elsewhere cannot leave it half-written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The driver's end: queues frames.
pub(crate) struct FrameSender(Arc<Queue>);

/// The writer's end: takes them, in order.
pub(crate) struct FrameReceiver(Arc<Queue>);

/// A new, empty queue (nothing allocated until the first frame).
pub(crate) fn frame_queue() -> (FrameSender, FrameReceiver) {
    let queue = Arc::new(Queue::default());
    (FrameSender(Arc::clone(&queue)), FrameReceiver(queue))
}

impl FrameSender {
    /// Queues a frame; gives it back when the receiver has gone. A keep-alive
    /// right behind another is dropped: it would say nothing more, and a
    /// writer that is stuck must not collect them.
    pub(crate) fn send(&self, frame: Frame) -> Result<(), Frame> {
        let mut state = self.0.lock();
        if state.receiver_gone {
            return Err(frame);
        }
        let was_empty = state.frames.is_empty();
        let repeated = matches!(state.frames.back(), Some(Frame::KeepAlive));
        if matches!(frame, Frame::KeepAlive) && repeated {
            return Ok(());
        }
        state.frames.push_back(frame);
        drop(state);
        // The receiver waits only on an empty queue.
        if was_empty {
            self.0.queued.notify_one();
        }
        Ok(())
    }

    /// Resolves once the receiver has gone.
    pub(crate) async fn closed(&self) {
        loop {
            let gone = self.0.gone.notified();
            tokio::pin!(gone);
            gone.as_mut().enable();
            if self.0.lock().receiver_gone {
                return;
            }
            gone.await;
        }
    }
}

impl Drop for FrameSender {
    fn drop(&mut self) {
        self.0.lock().sender_gone = true;
        self.0.queued.notify_one();
    }
}

impl FrameReceiver {
    /// The next frame; `None` once the sender has gone and every frame it
    /// queued has been taken.
    pub(crate) async fn recv(&mut self) -> Option<Frame> {
        loop {
            let queued = self.0.queued.notified();
            tokio::pin!(queued);
            queued.as_mut().enable();
            {
                let mut state = self.0.lock();
                if let Some(frame) = state.frames.pop_front() {
                    return Some(frame);
                }
                if state.sender_gone {
                    return None;
                }
            }
            queued.await;
        }
    }

    /// The next frame if one is queued.
    pub(crate) fn try_recv(&mut self) -> Option<Frame> {
        self.0.lock().frames.pop_front()
    }
}

impl Drop for FrameReceiver {
    fn drop(&mut self) {
        let unsent = {
            let mut state = self.0.lock();
            state.receiver_gone = true;
            std::mem::take(&mut state.frames)
        };
        drop(unsent);
        self.0.gone.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;

    fn text(frame: Option<Frame>) -> Option<Bytes> {
        match frame {
            Some(Frame::Envelope(text)) => Some(text),
            _ => None,
        }
    }

    #[tokio::test]
    async fn frames_arrive_in_order_and_each_end_hears_when_the_other_goes() {
        let (tx, mut rx) = frame_queue();
        for i in 0..3 {
            tx.send(Frame::Envelope(Bytes::from(format!("e{i}"))))
                .unwrap();
        }
        assert_eq!(text(rx.recv().await).as_deref(), Some(&b"e0"[..]));
        assert_eq!(text(rx.try_recv()).as_deref(), Some(&b"e1"[..]));
        assert_eq!(text(rx.recv().await).as_deref(), Some(&b"e2"[..]));
        assert!(rx.try_recv().is_none());
        // A receiver waiting on an empty queue wakes for the next frame.
        let waiting = tokio::spawn(async move {
            let frame = rx.recv().await;
            (text(frame), rx)
        });
        tokio::task::yield_now().await;
        tx.send(Frame::Envelope(Bytes::from_static(b"late")))
            .unwrap();
        let (frame, mut rx) = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken")
            .unwrap();
        assert_eq!(frame.as_deref(), Some(&b"late"[..]));
        // What was queued before the sender went is still delivered, then None.
        tx.send(Frame::KeepAlive).unwrap();
        drop(tx);
        assert!(matches!(rx.recv().await, Some(Frame::KeepAlive)));
        assert!(rx.recv().await.is_none());

        // Keep-alives do not pile up while the writer takes nothing.
        let (tx, mut rx) = frame_queue();
        tx.send(Frame::Envelope(Bytes::from_static(b"x"))).unwrap();
        for _ in 0..3 {
            tx.send(Frame::KeepAlive).unwrap();
        }
        assert!(matches!(rx.try_recv(), Some(Frame::Envelope(_))));
        assert!(matches!(rx.try_recv(), Some(Frame::KeepAlive)));
        assert!(rx.try_recv().is_none(), "one keep-alive, not three");

        // The receiver going: `closed` resolves and sends are refused.
        let (tx, rx) = frame_queue();
        let closed = tokio::spawn(async move {
            tx.closed().await;
            tx.send(Frame::KeepAlive).is_err()
        });
        tokio::task::yield_now().await;
        drop(rx);
        let refused = tokio::time::timeout(Duration::from_secs(5), closed)
            .await
            .expect("closed resolves")
            .unwrap();
        assert!(refused);
    }
}

//! Answers waiting for a client that does not read them (docs/protocol.md §18.1, for
//! `/mcp`): every byte of an answer from the moment it exists until hyper
//! takes it for the socket is counted, per connection ([`Outflow`]) and
//! server-wide ([`AnswerBudget`], `max_inflight_answer_bytes`), and shows in
//! `/stats` `outboundBytes`. The connection's task closes a connection whose
//! client takes nothing of what it holds for `write_timeout`, or for a second
//! while the connection holds more than `max_outbound_bytes` or the server
//! more than its budget. A client that reads is never closed for receiving a
//! lot: only time without progress counts.
//!
//! Hyper takes an answer in slices of [`SLICE`] bytes, and buffers at most
//! 64 KiB of them (`max_buf_size`) before the socket must drain: what it has
//! taken is bounded, what it has not is counted here.

// Only `/mcp` answers are counted here yet: without the `mcp` feature the
// connections' watch stays, never holding anything.
#![cfg_attr(not(feature = "mcp"), allow(dead_code))]

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::body::Reservation;
use super::reply::Body;
use crate::session::Shared;

/// What hyper is handed at a time.
const SLICE: usize = 16 * 1024;

/// How long a connection over a budget may go without its client taking
/// anything before it is closed.
const STALL_GRACE: Duration = Duration::from_secs(1);

/// How often a connection holding bytes looks at its clock and the budgets.
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// Bytes of answers produced and not yet taken, server-wide.
pub(crate) struct AnswerBudget {
    used: AtomicUsize,
    limit: usize,
}

impl AnswerBudget {
    pub(crate) fn new(limit: usize) -> AnswerBudget {
        AnswerBudget {
            used: AtomicUsize::new(0),
            limit,
        }
    }

    fn over(&self) -> bool {
        self.used.load(Relaxed) > self.limit
    }
}

/// One connection's answer bytes not yet taken by its client, and when it
/// last took some. Made per connection by the accept loop, handed to its
/// requests as an extension; the connection's task watches it
/// ([`Outflow::stalled`]).
pub(crate) struct Outflow {
    held: AtomicUsize,
    /// Milliseconds since `epoch` of the last progress: bytes taken, or new
    /// bytes held when there were none.
    progress: AtomicU64,
    epoch: Instant,
    /// Told when the connection starts holding bytes.
    holding: Notify,
}

/// Why a connection was closed for its answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stall {
    /// Nothing taken for `write_timeout`.
    WriteTimeout,
    /// Nothing taken for a second while over a budget.
    OverBudget,
}

impl Outflow {
    pub(crate) fn new() -> Arc<Outflow> {
        Arc::new(Outflow {
            held: AtomicUsize::new(0),
            progress: AtomicU64::new(0),
            epoch: Instant::now(),
            holding: Notify::new(),
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn hold(&self, bytes: usize) {
        if self.held.fetch_add(bytes, Relaxed) == 0 {
            // The clock starts when there is something to take.
            self.progress.store(self.now_ms(), Relaxed);
            self.holding.notify_one();
        }
    }

    fn taken(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Relaxed);
        self.progress.store(self.now_ms(), Relaxed);
    }

    fn dropped(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Relaxed);
    }

    /// Completes when the connection must be closed: its client has taken
    /// nothing of what it holds for `write_timeout`, or for a second while
    /// it holds more than `per_connection` bytes or the server more than
    /// its budget. Never while it holds nothing.
    pub(crate) async fn stalled(
        &self,
        budget: &AnswerBudget,
        per_connection: usize,
        write_timeout: Duration,
    ) -> Stall {
        loop {
            let held = self.held.load(Relaxed);
            if held == 0 {
                self.holding.notified().await;
                continue;
            }
            let idle =
                Duration::from_millis(self.now_ms().saturating_sub(self.progress.load(Relaxed)));
            if idle >= write_timeout {
                return Stall::WriteTimeout;
            }
            if idle >= STALL_GRACE && (held > per_connection || budget.over()) {
                return Stall::OverBudget;
            }
            tokio::time::sleep(CHECK_EVERY.min(write_timeout - idle)).await;
        }
    }
}

/// An answer's body, counted until hyper takes it, in slices.
pub(crate) struct AnswerBody {
    inner: Body,
    pending: Bytes,
    outflow: Option<Arc<Outflow>>,
    budget: Arc<AnswerBudget>,
    shared: Arc<Shared>,
    /// What the request holds in the body budget (its parsed form), until
    /// its answer is complete (what is left of it then is the answer, which
    /// the answer budget counts).
    request: Option<Reservation>,
}

impl AnswerBody {
    pub(crate) fn new(
        inner: Body,
        outflow: Option<Arc<Outflow>>,
        budget: Arc<AnswerBudget>,
        shared: Arc<Shared>,
        request: Option<Reservation>,
    ) -> AnswerBody {
        AnswerBody {
            inner,
            pending: Bytes::new(),
            outflow,
            budget,
            shared,
            request,
        }
    }

    fn hold(&self, bytes: usize) {
        self.budget.used.fetch_add(bytes, Relaxed);
        self.shared
            .stats
            .outbound_bytes
            .fetch_add(bytes as u64, Relaxed);
        if let Some(outflow) = &self.outflow {
            outflow.hold(bytes);
        }
    }

    fn release(&self, bytes: usize, taken: bool) {
        self.budget.used.fetch_sub(bytes, Relaxed);
        self.shared
            .stats
            .outbound_bytes
            .fetch_sub(bytes as u64, Relaxed);
        if let Some(outflow) = &self.outflow {
            if taken {
                outflow.taken(bytes);
            } else {
                outflow.dropped(bytes);
            }
        }
    }
}

impl HttpBody for AnswerBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        loop {
            if this.pending.has_remaining() {
                let n = this.pending.len().min(SLICE);
                let slice = this.pending.split_to(n);
                this.release(n, true);
                return Poll::Ready(Some(Ok(Frame::data(slice))));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        if !data.is_empty() {
                            this.hold(data.len());
                            this.pending = data;
                        }
                        // The whole answer exists now: the request's own
                        // data is gone, what is held is counted as answer.
                        if this.inner.is_end_stream() {
                            this.request = None;
                        }
                    }
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Poll::Ready(None) => {
                    this.request = None;
                    return Poll::Ready(None);
                }
                other => return other,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.inner.size_hint();
        let pending = self.pending.len() as u64;
        hint.set_lower(hint.lower() + pending);
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper + pending);
        }
        hint
    }
}

impl Drop for AnswerBody {
    fn drop(&mut self) {
        let left = self.pending.len();
        if left > 0 {
            self.release(left, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    fn body(bytes: usize, outflow: &Arc<Outflow>, budget: &Arc<AnswerBudget>) -> AnswerBody {
        let inner = Full::new(Bytes::from(vec![b'x'; bytes])).boxed_unsync();
        AnswerBody::new(
            inner,
            Some(Arc::clone(outflow)),
            Arc::clone(budget),
            Shared::for_tests(Default::default()),
            None,
        )
    }

    #[tokio::test]
    async fn answers_are_counted_until_taken_and_handed_out_in_slices() {
        let outflow = Outflow::new();
        let budget = Arc::new(AnswerBudget::new(1 << 20));
        let mut answer = body(40_000, &outflow, &budget);
        let first = answer.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first.len(), SLICE);
        assert_eq!(outflow.held.load(Relaxed), 40_000 - SLICE);
        assert_eq!(budget.used.load(Relaxed), 40_000 - SLICE);
        assert_eq!(
            answer.shared.stats.outbound_bytes.load(Relaxed),
            40_000 - SLICE as u64
        );
        let mut total = first.len();
        while let Some(frame) = answer.frame().await {
            total += frame.unwrap().into_data().unwrap().len();
        }
        assert_eq!(total, 40_000);
        assert_eq!(outflow.held.load(Relaxed), 0);
        assert_eq!(budget.used.load(Relaxed), 0);
    }

    #[tokio::test]
    async fn an_answer_dropped_unread_gives_its_bytes_back() {
        let outflow = Outflow::new();
        let budget = Arc::new(AnswerBudget::new(1 << 20));
        let mut answer = body(100_000, &outflow, &budget);
        answer.frame().await.unwrap().unwrap();
        assert!(budget.used.load(Relaxed) > 0);
        drop(answer);
        assert_eq!(budget.used.load(Relaxed), 0);
        assert_eq!(outflow.held.load(Relaxed), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_stalls_after_the_write_timeout_or_a_second_over_budget() {
        let outflow = Outflow::new();
        let budget = Arc::new(AnswerBudget::new(1 << 20));
        let timeout = Duration::from_secs(30);
        // Holding nothing: never stalled.
        let idle = tokio::time::timeout(
            Duration::from_secs(60),
            outflow.stalled(&budget, 1 << 20, timeout),
        );
        assert!(idle.await.is_err());

        let mut answer = body(100_000, &outflow, &budget);
        answer.frame().await.unwrap().unwrap();
        let started = Instant::now();
        let stall = outflow.stalled(&budget, 1 << 20, timeout).await;
        assert_eq!(stall, Stall::WriteTimeout);
        assert!(started.elapsed() >= timeout && started.elapsed() < timeout + CHECK_EVERY * 2);

        // Over the connection's share: a second without progress.
        let small = Outflow::new();
        let mut answer = body(100_000, &small, &budget);
        answer.frame().await.unwrap().unwrap();
        let started = Instant::now();
        assert_eq!(
            small.stalled(&budget, 1024, timeout).await,
            Stall::OverBudget
        );
        assert!(started.elapsed() < STALL_GRACE + CHECK_EVERY * 2);

        // Over the server's budget.
        let tight = Arc::new(AnswerBudget::new(10));
        let other = Outflow::new();
        let mut answer = body(100_000, &other, &tight);
        answer.frame().await.unwrap().unwrap();
        assert!(tight.over());
        assert_eq!(
            other.stalled(&tight, 1 << 20, timeout).await,
            Stall::OverBudget
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_takes_slices_is_never_closed() {
        let outflow = Outflow::new();
        let budget = Arc::new(AnswerBudget::new(10));
        let mut answer = body(SLICE * 100, &outflow, &budget);
        let reader = async {
            while let Some(frame) = answer.frame().await {
                frame.unwrap();
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        };
        tokio::select! {
            () = reader => {}
            stall = outflow.stalled(&budget, 1024, Duration::from_secs(30)) => {
                panic!("a reading client was closed: {stall:?}")
            }
        }
    }
}

//! An answer's body, counted from the moment it exists until hyper takes it
//! (feature `mcp`: `/mcp` answers are the ones counted): what it holds is
//! charged to its connection's [`Outflow`], to the server's
//! [`AnswerBudget`] and to `/stats` `outboundBytes`.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use hyper::body::{Body as HttpBody, Frame, SizeHint};

use super::{AnswerBudget, Outflow};
use crate::server::body::Reservation;
use crate::server::reply::Body;
use crate::session::Shared;

/// What hyper is handed at a time.
const SLICE: usize = 16 * 1024;

impl Outflow {
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
    use std::time::Duration;

    use http_body_util::{BodyExt, Full};
    use tokio::time::Instant;

    use super::super::{CHECK_EVERY, STALL_GRACE, Stall};
    use super::*;

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

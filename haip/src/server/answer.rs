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
//! Hyper takes an answer in slices of 16 KiB, and buffers at most 64 KiB of
//! them (`max_buf_size`) before the socket must drain: what it has taken is
//! bounded, what it has not is counted here.
//!
//! Only `/mcp` answers are counted yet: the body that counts them
//! (`AnswerBody`, in `counted.rs`) is the `mcp` feature's. Without it the
//! connections' watch stays, never holding anything.

#[cfg(feature = "mcp")]
pub(super) mod counted;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

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

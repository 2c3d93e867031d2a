//! A session whose connection is gone, kept running (parked) for the replay
//! window: its calls run on and their envelopes are kept for replay, until a
//! new connection takes it over or it expires.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::session::{Attached, SessionStore, Shared, next_event};

use super::actions::{Alarm, perform};

struct DetachedGuard(Arc<Shared>);

impl Drop for DetachedGuard {
    fn drop(&mut self) {
        self.0.stats.detached_sessions.fetch_sub(1, Relaxed);
    }
}

/// Keeps a disconnected session running for `keep`: its calls run on and
/// their envelopes are committed to it (kept in the replay window), until a
/// new connection takes it over or it expires. On expiry its calls are
/// cancelled with nothing sent (and counted as cancelled).
pub(super) fn park(mut attached: Attached, store: Arc<dyn SessionStore>, shared: &Shared) {
    let keep = shared.config.replay_window_time;
    attached.session.handle_disconnect();
    let shutdown = shared.shutdown.clone();
    let shared = Arc::clone(attached.session.shared());
    shared.stats.detached_sessions.fetch_add(1, Relaxed);
    let tasks = shared.runner.tasks().clone();
    tasks.spawn(async move {
        // Uncounted however the task ends.
        let _counted = DetachedGuard(Arc::clone(&shared));
        // First to go when the server's replay windows hold too much.
        let evict = CancellationToken::new();
        let ticket = shared
            .replay
            .detach(attached.session.window_cost(), evict.clone());
        let expiry = tokio::time::sleep(keep);
        tokio::pin!(expiry);
        // The session's own deadlines: its calls' timeouts and grace periods.
        let timer = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(timer);
        let mut alarm = Alarm { at: None };
        loop {
            perform(&mut attached, &shared, None);
            // Commit whatever is due, so it is kept for replay.
            while attached.session.poll_transmit().is_some() {}
            alarm.arm(&attached.session, timer.as_mut());
            tokio::select! {
                request = attached.takeovers.recv() => match (*request).answer(attached) {
                    Some(kept) => attached = kept,
                    None => {
                        ticket.close();
                        return;
                    }
                },
                Some(event) = next_event(&mut attached.events) => attached.session.handle_event(event),
                () = &mut timer, if alarm.at.is_some() => {
                    alarm.fired();
                    // A parked session has no connection to close.
                    let _ = attached.session.handle_timeout(shared.clock.now());
                }
                () = &mut expiry => break,
                () = evict.cancelled() => {
                    tracing::debug!(session = %attached.session.id(), "parked session evicted (replay budget)");
                    break;
                }
                () = shutdown.cancelled() => break,
            }
        }
        store.remove(attached.session.id());
        tracing::debug!(session = %attached.session.id(), "parked session ended");
        // Dropping the session cancels its calls and releases its window.
        drop(attached);
        ticket.close();
    });
}

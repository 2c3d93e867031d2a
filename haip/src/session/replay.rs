//! The replay window: every committed envelope, kept unchanged for re-sending
//! (`REPLAY_REQUEST`, resumption; docs/protocol.md §11), and the server-wide budget
//! all windows share (docs/protocol.md §18.1 `replay_budget_bytes`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

/// What one kept envelope costs besides its text (its place in the window).
const ENTRY_OVERHEAD: usize = 64;

/// Bounds of the window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Envelopes always kept, whatever their age (`replay_window_messages`).
    pub(crate) messages: usize,
    /// Envelopes younger than this are kept beyond `messages` (`replay_window_time`).
    pub(crate) age: Duration,
    /// Hard cap on the number kept: 10 × `messages`.
    pub(crate) hard_messages: usize,
    /// Hard cap on the bytes kept (`replay_window_bytes`).
    pub(crate) bytes: usize,
}

impl From<&super::SessionConfig> for Limits {
    fn from(config: &super::SessionConfig) -> Limits {
        Limits {
            messages: config.replay_window_messages,
            age: config.replay_window_time,
            hard_messages: config
                .replay_window_messages
                .saturating_mul(REPLAY_HARD_CAP_FACTOR),
            bytes: config.replay_window_bytes,
        }
    }
}

/// The hard cap on a window's envelopes, in `replay_window_messages` (docs/protocol.md §11.1).
pub(crate) const REPLAY_HARD_CAP_FACTOR: usize = 10;

struct Kept {
    seq: u64,
    text: Bytes,
    at: Instant,
}

/// The kept envelopes, oldest first, with consecutive `seq`s.
pub(crate) struct ReplayWindow {
    kept: VecDeque<Kept>,
    bytes: usize,
    limits: Limits,
}

/// A requested range that is no longer (fully) kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooOld {
    /// The oldest `seq` still kept (the next one to be committed when none is).
    pub(crate) oldest_seq: u64,
}

impl ReplayWindow {
    pub(crate) fn new(limits: Limits) -> ReplayWindow {
        ReplayWindow {
            kept: VecDeque::new(),
            bytes: 0,
            limits,
        }
    }

    /// Keeps a just-committed envelope, then evicts what the limits allow:
    /// envelopes both outside the newest `messages` and older than `age`, and
    /// whatever exceeds the hard caps (oldest first). While the server is over
    /// its replay budget, detached sessions are evicted first; when none is
    /// left, this window gives up its own oldest envelopes.
    pub(crate) fn keep(&mut self, seq: u64, text: Bytes, now: Instant, budget: &ReplayBudget) {
        let cost = text.len() + ENTRY_OVERHEAD;
        self.bytes += text.len();
        budget.add(cost);
        self.kept.push_back(Kept { seq, text, at: now });
        self.evict(now, budget);
        if budget.over() && !budget.evict_detached() {
            // Never the envelope just kept: resumption needs the newest.
            while budget.over() && self.kept.len() > 1 {
                self.pop_oldest(budget);
            }
        }
    }

    fn evict(&mut self, now: Instant, budget: &ReplayBudget) {
        while let Some(front) = self.kept.front() {
            let over_hard_cap =
                self.kept.len() > self.limits.hard_messages || self.bytes > self.limits.bytes;
            let expired = self.kept.len() > self.limits.messages
                && now.saturating_duration_since(front.at) > self.limits.age;
            if !(over_hard_cap || expired) {
                break;
            }
            self.pop_oldest(budget);
        }
    }

    fn pop_oldest(&mut self, budget: &ReplayBudget) {
        if let Some(oldest) = self.kept.pop_front() {
            self.bytes -= oldest.text.len();
            budget.sub(oldest.text.len() + ENTRY_OVERHEAD);
        }
    }

    /// What this window counts against the server's replay budget.
    pub(crate) fn cost(&self) -> usize {
        self.bytes + self.kept.len() * ENTRY_OVERHEAD
    }

    /// The kept envelopes with `from <= seq <= to`, ascending; `next_seq` is the
    /// seq the next committed envelope will get. Fails when some seq ≥ 1 of the
    /// range (capped at the newest) is no longer kept.
    pub(crate) fn range(
        &self,
        from: u64,
        to: Option<u64>,
        next_seq: u64,
    ) -> Result<Vec<Bytes>, TooOld> {
        let newest = next_seq.saturating_sub(1);
        let from = from.max(1);
        let to = to.unwrap_or(newest).min(newest);
        if from > to {
            return Ok(Vec::new());
        }
        let oldest = self.kept.front().map_or(next_seq, |k| k.seq);
        if from < oldest {
            return Err(TooOld { oldest_seq: oldest });
        }
        let start = (from - oldest) as usize;
        let len = (to - from + 1) as usize;
        Ok(self
            .kept
            .iter()
            .skip(start)
            .take(len)
            .map(|k| k.text.clone())
            .collect())
    }

    /// Bytes held, for the memory bound.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

/// The bytes all replay windows hold together, and the detached sessions that
/// give theirs up first when that is too much (docs/protocol.md §18.1).
#[derive(Debug)]
pub(crate) struct ReplayBudget {
    limit: usize,
    /// Bytes of all windows (text plus bookkeeping).
    used: AtomicU64,
    /// Bytes of detached sessions already told to go, not yet gone.
    leaving: AtomicU64,
    /// Detached sessions, oldest first.
    detached: Mutex<Detached>,
}

#[derive(Debug, Default)]
struct Detached {
    next: u64,
    by_age: BTreeMap<u64, Parked>,
}

#[derive(Debug)]
struct Parked {
    /// What its window held when it was detached.
    cost: usize,
    evict: CancellationToken,
}

impl ReplayBudget {
    pub(crate) fn new(limit: usize) -> ReplayBudget {
        ReplayBudget {
            limit,
            used: AtomicU64::new(0),
            leaving: AtomicU64::new(0),
            detached: Mutex::new(Detached::default()),
        }
    }

    /// Bytes held by all windows.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Relaxed)
    }

    fn add(&self, bytes: usize) {
        self.used.fetch_add(bytes as u64, Relaxed);
    }

    pub(crate) fn sub(&self, bytes: usize) {
        self.used.fetch_sub(bytes as u64, Relaxed);
    }

    /// Over budget, not counting what detached sessions told to go still hold.
    fn over(&self) -> bool {
        let used = self.used.load(Relaxed);
        used.saturating_sub(self.leaving.load(Relaxed)) > self.limit as u64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Detached> {
        // Entries are whole values; a panic elsewhere cannot leave one half-written.
        self.detached.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a detached session whose window costs `cost`; it ends when
    /// `evict` is cancelled. The ticket takes it off the list again.
    pub(crate) fn detach(&self, cost: usize, evict: CancellationToken) -> DetachedTicket<'_> {
        let mut detached = self.lock();
        let key = detached.next;
        detached.next += 1;
        detached.by_age.insert(key, Parked { cost, evict });
        DetachedTicket {
            budget: self,
            key,
            cost,
        }
    }

    /// Tells the oldest detached session to go; false when there is none.
    fn evict_detached(&self) -> bool {
        let mut detached = self.lock();
        let Some((_, oldest)) = detached.by_age.pop_first() else {
            return false;
        };
        drop(detached);
        self.leaving.fetch_add(oldest.cost as u64, Relaxed);
        tracing::debug!(
            bytes = oldest.cost,
            "replay budget exceeded: evicting a detached session"
        );
        // Its window is released when the session is dropped: `gone` then.
        oldest.evict.cancel();
        true
    }

    /// An evicted session's window was released.
    fn gone(&self, cost_at_detach: usize) {
        self.leaving.fetch_sub(cost_at_detach as u64, Relaxed);
    }
}

/// A detached session's place on the eviction list; dropping it (the session
/// was resumed, expired or evicted) takes it off.
pub(crate) struct DetachedTicket<'a> {
    budget: &'a ReplayBudget,
    key: u64,
    cost: usize,
}

impl DetachedTicket<'_> {
    /// Call once the session is dropped: if the budget evicted it, what it
    /// was expected to free has now been freed.
    pub(crate) fn close(self) {
        let evicted = self.budget.lock().by_age.remove(&self.key).is_none();
        if evicted {
            self.budget.gone(self.cost);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(messages: usize, bytes: usize) -> ReplayWindow {
        ReplayWindow::new(Limits {
            messages,
            age: Duration::from_secs(300),
            hard_messages: messages * 10,
            bytes,
        })
    }

    fn text(seq: u64) -> Bytes {
        Bytes::from(format!("envelope {seq}"))
    }

    #[test]
    fn ranges_are_inclusive_capped_at_newest_and_too_old_says_the_oldest() {
        let unlimited = ReplayBudget::new(usize::MAX);
        let mut w = window(3, 1 << 20);
        for seq in 1..=5 {
            w.keep(seq, text(seq), Instant::now(), &unlimited);
        }
        // Young envelopes stay beyond `messages` until the hard cap.
        assert_eq!(w.range(1, None, 6).unwrap().len(), 5);
        assert_eq!(w.range(2, Some(3), 6).unwrap(), [text(2), text(3)]);
        assert_eq!(w.range(4, Some(99), 6).unwrap(), [text(4), text(5)]);
        assert!(
            w.range(6, None, 6).unwrap().is_empty(),
            "nothing newer than the newest"
        );
        assert_eq!(
            w.range(0, Some(1), 6).unwrap(),
            [text(1)],
            "seq 0 is never kept nor needed"
        );
        for seq in 6..=31 {
            w.keep(seq, text(seq), Instant::now(), &unlimited);
        }
        assert_eq!(
            w.range(1, None, 32),
            Err(TooOld { oldest_seq: 2 }),
            "hard cap is 30"
        );
    }

    #[test]
    fn old_envelopes_beyond_the_message_count_expire_and_bytes_are_capped() {
        let unlimited = ReplayBudget::new(usize::MAX);
        let mut w = ReplayWindow::new(Limits {
            messages: 2,
            age: Duration::ZERO,
            hard_messages: 20,
            bytes: 1 << 20,
        });
        for seq in 1..=5 {
            w.keep(seq, text(seq), Instant::now(), &unlimited);
        }
        w.evict(Instant::now() + Duration::from_millis(1), &unlimited);
        assert_eq!(w.range(4, None, 6).unwrap().len(), 2);
        assert!(w.range(3, None, 6).is_err());

        let mut w = window(100, 30);
        for seq in 1..=5 {
            w.keep(seq, text(seq), Instant::now(), &unlimited); // 10 bytes each
        }
        assert!(w.bytes() <= 30);
        assert_eq!(w.range(3, None, 6).unwrap().len(), 3);
    }

    #[test]
    fn windows_share_the_budget_and_a_live_one_trims_itself_but_keeps_its_newest() {
        let budget = ReplayBudget::new(3 * (10 + ENTRY_OVERHEAD));
        let mut a = window(100, 1 << 20);
        let mut b = window(100, 1 << 20);
        a.keep(1, text(1), Instant::now(), &budget);
        a.keep(2, text(2), Instant::now(), &budget);
        b.keep(1, text(1), Instant::now(), &budget);
        assert_eq!(budget.used(), 3 * 74);
        assert_eq!(a.cost() + b.cost(), 3 * 74);
        // Over budget with no detached session: the committing window gives
        // up its oldest.
        b.keep(2, text(2), Instant::now(), &budget);
        assert_eq!(budget.used(), 3 * 74);
        assert!(b.range(1, None, 3).is_err());
        assert_eq!(b.range(2, None, 3).unwrap(), [text(2)]);
        // Never its newest, even far over budget.
        let tiny = ReplayBudget::new(1);
        let mut c = window(100, 1 << 20);
        c.keep(1, text(1), Instant::now(), &tiny);
        c.keep(2, text(2), Instant::now(), &tiny);
        assert_eq!(c.range(2, None, 3).unwrap(), [text(2)]);
        assert!(c.range(1, None, 3).is_err());
    }

    #[test]
    fn detached_sessions_are_evicted_oldest_first_before_live_windows_trim() {
        let budget = ReplayBudget::new(2 * 74);
        let mut parked = window(100, 1 << 20);
        parked.keep(1, text(1), Instant::now(), &budget);
        let first = CancellationToken::new();
        let second = CancellationToken::new();
        let old_ticket = budget.detach(parked.cost(), first.clone());
        let new_ticket = budget.detach(0, second.clone());
        let mut live = window(100, 1 << 20);
        live.keep(1, text(1), Instant::now(), &budget);
        assert!(!first.is_cancelled(), "within budget");
        live.keep(2, text(2), Instant::now(), &budget);
        assert!(
            first.is_cancelled(),
            "the oldest detached session is told to go"
        );
        assert!(!second.is_cancelled());
        assert_eq!(
            live.range(1, None, 3).unwrap().len(),
            2,
            "the live window kept all"
        );
        // What the evicted one holds is not counted again meanwhile.
        live.keep(3, text(3), Instant::now(), &budget);
        assert!(second.is_cancelled(), "still over: the next oldest goes");
        // The evicted session drops its window, then closes its ticket.
        budget.sub(parked.cost());
        old_ticket.close();
        new_ticket.close();
        assert_eq!(budget.used(), 3 * 74);
        assert_eq!(budget.leaving.load(Relaxed), 0);
    }
}

//! The replay window: every committed envelope, kept unchanged for re-sending
//! (`REPLAY_REQUEST`, resumption; HAIP.md §11).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;

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

impl From<&crate::server::Config> for Limits {
    fn from(config: &crate::server::Config) -> Limits {
        Limits {
            messages: config.replay_window_messages,
            age: config.replay_window_time,
            hard_messages: config.replay_window_messages.saturating_mul(10),
            bytes: config.replay_window_bytes,
        }
    }
}

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
    /// whatever exceeds the hard caps (oldest first).
    pub(crate) fn keep(&mut self, seq: u64, text: Bytes) {
        self.bytes += text.len();
        self.kept.push_back(Kept {
            seq,
            text,
            at: Instant::now(),
        });
        self.evict(Instant::now());
    }

    fn evict(&mut self, now: Instant) {
        while let Some(front) = self.kept.front() {
            let over_hard_cap =
                self.kept.len() > self.limits.hard_messages || self.bytes > self.limits.bytes;
            let expired = self.kept.len() > self.limits.messages
                && now.saturating_duration_since(front.at) > self.limits.age;
            if !(over_hard_cap || expired) {
                break;
            }
            self.bytes -= front.text.len();
            self.kept.pop_front();
        }
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
        let mut w = window(3, 1 << 20);
        for seq in 1..=5 {
            w.keep(seq, text(seq));
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
            w.keep(seq, text(seq));
        }
        assert_eq!(
            w.range(1, None, 32),
            Err(TooOld { oldest_seq: 2 }),
            "hard cap is 30"
        );
    }

    #[test]
    fn old_envelopes_beyond_the_message_count_expire_and_bytes_are_capped() {
        let mut w = ReplayWindow::new(Limits {
            messages: 2,
            age: Duration::ZERO,
            hard_messages: 20,
            bytes: 1 << 20,
        });
        for seq in 1..=5 {
            w.keep(seq, text(seq));
        }
        w.evict(Instant::now() + Duration::from_millis(1));
        assert_eq!(w.range(4, None, 6).unwrap().len(), 2);
        assert!(w.range(3, None, 6).is_err());

        let mut w = window(100, 30);
        for seq in 1..=5 {
            w.keep(seq, text(seq)); // 10 bytes each
        }
        assert!(w.bytes() <= 30);
        assert_eq!(w.range(3, None, 6).unwrap().len(), 3);
    }
}

//! [`RateLimit`]: calls per subject, with a retry hint.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Call, Layer, Next, rate_limited, retry_ms};
use crate::protocol::ErrorCode;
use crate::tool::ToolError;

/// Buckets looked at for forgetting on each check, beyond what a new caller
/// needs: each check makes at most one bucket to look at later, so the
/// backlog never grows, and no one check pays for many.
const FORGET_PER_CHECK: usize = 4;

/// At most this many calls per subject in a period, refused beyond with
/// `RATE_LIMITED` and `details.retry_after_ms`: how long until the next call
/// would be let through.
///
/// The limit is a token bucket (GCRA): a subject may spend `calls` at once
/// (or its [`burst`](Self::burst)), then one more every `period / calls`.
/// Calls with no authenticated subject share one bucket. The refusal comes
/// before the params are checked, and costs the tool nothing.
///
/// ```
/// use std::time::Duration;
/// use haip::layer::RateLimit;
///
/// // 100 calls a minute per subject, at most 20 of them at once.
/// let limit = RateLimit::per_subject(100, Duration::from_secs(60)).burst(20);
/// let builder = haip::Server::builder().layer(limit);
/// # drop(builder);
/// ```
///
/// # The callers it holds
///
/// Only partly used buckets are held: a bucket full again says nothing a
/// new one would not, and is forgotten as calls come (a few at each check,
/// and as many as a new caller needs for a place; no check scans the table,
/// the work is amortized over the calls that made it), at the latest when a
/// new caller needs its place. At most [`max_subjects`](Self::max_subjects)
/// are held (10 000 by default; 40 to 80 bytes each). When that many callers
/// all have partly used buckets, the callers held are still limited by their
/// own buckets, but a caller not held is refused: `RATE_LIMITED`, with
/// `details.reason` `"too_many_callers"`, `details.max_subjects`, and
/// `details.retry_after_ms` the time until the first held bucket is full
/// again and its place frees. A full table never keeps a new caller out
/// longer than that: once the callers held stop, their buckets refill within
/// `burst × period / calls`, and the next new caller takes a place at once.
pub struct RateLimit {
    /// Hashes subjects into the buckets' keys: no allocation per call. Seeded
    /// per process, so subjects cannot be chosen to share a bucket; two that
    /// did by chance (one in 2⁶⁴) would only share their limit.
    seed: foldhash::fast::RandomState,
    /// Time zero of the buckets' times.
    origin: Instant,
    calls: u32,
    period: Duration,
    burst: u32,
    max_subjects: usize,
    buckets: Mutex<Buckets>,
}

impl RateLimit {
    /// `calls` per `period` for each subject (a `calls` of 0 is taken as 1, a
    /// `period / calls` under a microsecond as one), all of them at once if
    /// need be.
    pub fn per_subject(calls: u32, period: Duration) -> RateLimit {
        RateLimit::build(calls, period, calls, 10_000)
    }

    /// Lets a subject make at most `burst` calls at once (0 is taken as 1);
    /// the rate stays `calls` per `period`.
    pub fn burst(self, burst: u32) -> RateLimit {
        RateLimit::build(self.calls, self.period, burst, self.max_subjects)
    }

    /// Holds at most this many callers whose bucket is not full again (10 000
    /// by default; 0 is taken as 1). See [The callers it
    /// holds](Self#the-callers-it-holds).
    pub fn max_subjects(self, max: usize) -> RateLimit {
        RateLimit::build(self.calls, self.period, self.burst, max)
    }

    fn build(calls: u32, period: Duration, burst: u32, max_subjects: usize) -> RateLimit {
        let calls = calls.max(1);
        let burst = burst.max(1);
        let max_subjects = max_subjects.max(1);
        RateLimit {
            seed: foldhash::fast::RandomState::default(),
            origin: Instant::now(),
            calls,
            period,
            burst,
            max_subjects,
            buckets: Mutex::new(Buckets::new(
                nanos(period / calls).max(1_000),
                burst,
                max_subjects,
            )),
        }
    }

    /// Whether `subject` may call now.
    fn check(&self, subject: Option<&str>) -> Verdict {
        let key = subject.map_or(0, |subject| self.seed.hash_one(subject) | 1);
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        // Read under the lock: the checks' times never go back.
        let now = nanos(self.origin.elapsed());
        buckets.check(key, now)
    }
}

impl std::fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("calls", &self.calls)
            .field("period", &self.period)
            .field("burst", &self.burst)
            .field("max_subjects", &self.max_subjects)
            .finish_non_exhaustive()
    }
}

impl Layer for RateLimit {
    async fn call(&self, call: Call, next: Next) -> Result<Value, ToolError> {
        match self.check(call.subject()) {
            Verdict::Pass => next.run(call).await,
            Verdict::Wait(wait) => {
                let wait = Duration::from_nanos(wait);
                Err(rate_limited(
                    format!(
                        "Rate limit of {} calls per {:?} reached; try again in {} ms",
                        self.calls,
                        self.period,
                        retry_ms(wait)
                    ),
                    wait,
                ))
            }
            Verdict::Full { wait, first } => {
                let ms = retry_ms(Duration::from_nanos(wait));
                if first {
                    tracing::warn!(
                        max_subjects = self.max_subjects,
                        retry_after_ms = ms,
                        "rate limit: as many callers as it holds have partly used buckets; \
                         new callers refused until one is full again"
                    );
                }
                Err(ToolError::new(
                    ErrorCode::RATE_LIMITED,
                    format!(
                        "Rate limit: {} callers already have partly used buckets, the most it \
                         holds; a new caller is refused until one of them is full again; try \
                         again in {ms} ms",
                        self.max_subjects
                    ),
                )
                .with_details(json!({
                    "retry_after_ms": ms,
                    "reason": "too_many_callers",
                    "max_subjects": self.max_subjects,
                })))
            }
        }
    }
}

/// `d` in nanoseconds, at most `u64::MAX` (584 years).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// What a check decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// The call passes, and is counted.
    Pass,
    /// The caller's bucket is empty: the next call passes in this many ns.
    Wait(u64),
    /// A new caller, and every place is held by a partly used bucket: the
    /// first is full again in `wait` ns. `first`: the first refusal since a
    /// new caller last found a place (to log once).
    Full { wait: u64, first: bool },
}

/// The buckets of the callers held, as GCRA keeps them: each one's
/// theoretical arrival time, the time its bucket is full again. Times are
/// nanoseconds since the limit's origin.
///
/// Bounded: at most `max` buckets, and one entry of `due` for each. A bucket
/// full again is forgotten (a fresh one behaves the same); `due` finds them
/// without a scan: it holds, for each bucket, a time at or before which it
/// is not full again (the time it had when last looked at; calls since then
/// only moved it later). When that time comes, the bucket is forgotten if
/// it is full again, else looked at again at its present time. Each check
/// adds at most one look (a new bucket, or a bucket moved later), so looking
/// at [`FORGET_PER_CHECK`] per check keeps up, and a new caller that needs a
/// place takes as many looks as it needs: its cost is paid by the checks
/// that made them.
struct Buckets {
    /// One call's worth of time (GCRA's emission interval): `period / calls`.
    interval: u64,
    /// How far ahead of now a bucket's time may be for a call to pass:
    /// `interval × (burst − 1)`.
    tolerance: u64,
    max: usize,
    /// By key (a hash of the subject; 0 for calls without one): when the
    /// bucket is full again.
    full_at: HashMap<u64, u64, BuildHasherDefault<PassThrough>>,
    /// `(a time at or before the bucket's, key)`, earliest first; exactly one
    /// per bucket.
    due: BinaryHeap<Reverse<(u64, u64)>>,
    /// New callers were refused since one last found a place.
    refusing: bool,
}

impl Buckets {
    fn new(interval: u64, burst: u32, max: usize) -> Buckets {
        Buckets {
            interval,
            tolerance: interval.saturating_mul(u64::from(burst - 1)),
            max,
            full_at: HashMap::default(),
            due: BinaryHeap::new(),
            refusing: false,
        }
    }

    /// Whether the caller of `key` may call at `now`; counts the call if so.
    fn check(&mut self, key: u64, now: u64) -> Verdict {
        self.forget(now, FORGET_PER_CHECK, false);
        if let Some(full_at) = self.full_at.get_mut(&key) {
            // GCRA: a call passes while the bucket's time is at most
            // `tolerance` ahead of now, and moves it one interval later.
            if *full_at <= now.saturating_add(self.tolerance) {
                *full_at = (*full_at).max(now).saturating_add(self.interval);
                return Verdict::Pass;
            }
            return Verdict::Wait(*full_at - self.tolerance - now);
        }
        if self.full_at.len() >= self.max {
            self.forget(now, usize::MAX, true);
        }
        if self.full_at.len() >= self.max {
            let wait = self.first_full_at().map_or(self.interval, |at| at - now);
            let first = !std::mem::replace(&mut self.refusing, true);
            return Verdict::Full { wait, first };
        }
        self.refusing = false;
        let full_at = now.saturating_add(self.interval);
        self.full_at.insert(key, full_at);
        self.due.push(Reverse((full_at, key)));
        Verdict::Pass
    }

    /// Looks at up to `looks` buckets whose time has come: forgets those full
    /// again, looks at the others again later. `one`: stop at the first
    /// forgotten.
    fn forget(&mut self, now: u64, mut looks: usize, one: bool) {
        while looks > 0
            && let Some(&Reverse((at, key))) = self.due.peek()
            && at <= now
        {
            looks -= 1;
            self.due.pop();
            match self.full_at.get(&key) {
                Some(&full_at) if full_at > now => self.due.push(Reverse((full_at, key))),
                Some(_) => {
                    self.full_at.remove(&key);
                    self.shrink();
                    if one {
                        return;
                    }
                }
                None => {}
            }
        }
    }

    /// When the first bucket held is full again (at least one is held). Each
    /// entry of `due` made exact here is one a call moved later.
    fn first_full_at(&mut self) -> Option<u64> {
        while let Some(&Reverse((at, key))) = self.due.peek() {
            match self.full_at.get(&key) {
                Some(&full_at) if full_at == at => return Some(at),
                Some(&full_at) => {
                    self.due.pop();
                    self.due.push(Reverse((full_at, key)));
                }
                None => {
                    self.due.pop();
                }
            }
        }
        None
    }

    /// Gives memory back once most of the buckets a crowd left are forgotten
    /// (each time after at least 3/4 of what is kept went: amortized).
    fn shrink(&mut self) {
        let len = self.full_at.len();
        if self.full_at.capacity() > 1024 && len < self.full_at.capacity() / 8 {
            self.full_at.shrink_to(len * 2);
            self.due.shrink_to(len * 2);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        assert_eq!(self.full_at.len(), self.due.len(), "one look per bucket");
        self.full_at.len()
    }
}

/// The hasher of the buckets' map, whose keys are hashes already.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64`s are hashed here; any other input is still folded in.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_bucket_passes_its_burst_then_says_when_the_next_call_passes() {
        // One call every 10 ms, 3 at once.
        let mut b = Buckets::new(10 * MS, 3, 100);
        for _ in 0..3 {
            assert_eq!(b.check(7, 0), Verdict::Pass);
        }
        assert_eq!(b.check(7, 0), Verdict::Wait(10 * MS));
        assert_eq!(b.check(7, 4 * MS), Verdict::Wait(6 * MS));
        assert_eq!(b.check(7, 10 * MS), Verdict::Pass);
        // Another key has its own bucket.
        assert_eq!(b.check(8, 10 * MS), Verdict::Pass);
        // Full again 30 ms after the last call: forgotten, as good as new.
        assert_eq!(b.check(9, 41 * MS), Verdict::Pass);
        assert_eq!(b.len(), 1, "only key 9's bucket is partly used");
        for _ in 0..3 {
            assert_eq!(b.check(7, 41 * MS), Verdict::Pass);
        }
    }

    #[test]
    fn a_full_table_refuses_new_callers_until_the_first_bucket_refills() {
        // One call every second, 2 at once, 4 callers held.
        let mut b = Buckets::new(1_000 * MS, 2, 4);
        for key in 1..=4 {
            assert_eq!(b.check(key, key * MS), Verdict::Pass);
        }
        // Key 1 spends its second call: its bucket is full at 2 001 ms now.
        assert_eq!(b.check(1, 10 * MS), Verdict::Pass);
        assert_eq!(
            b.check(5, 100 * MS),
            Verdict::Full {
                wait: 902 * MS,
                first: true
            },
            "key 2's bucket is the first full again, at 1 002 ms"
        );
        assert_eq!(
            b.check(6, 200 * MS),
            Verdict::Full {
                wait: 802 * MS,
                first: false
            }
        );
        // The callers held keep their own buckets.
        assert_eq!(b.check(3, 300 * MS), Verdict::Pass);
        assert_eq!(b.check(3, 300 * MS), Verdict::Wait(1_003 * MS - 300 * MS));
        assert_eq!(b.len(), 4);
        // Key 2's bucket refills at 1 002 ms: a new caller takes its place.
        assert!(matches!(b.check(5, 1_001 * MS), Verdict::Full { wait, .. } if wait == MS));
        assert_eq!(b.check(5, 1_002 * MS), Verdict::Pass);
        assert_eq!(b.len(), 4);
        assert!(matches!(
            b.check(6, 1_002 * MS),
            Verdict::Full { first: true, .. }
        ));
    }

    /// The issue's case: 10 300 subjects use a little of their buckets; once
    /// every bucket has refilled, a new subject passes at once, and every
    /// check on the way costs a few looks.
    #[test]
    fn new_callers_pass_once_old_buckets_have_refilled() {
        // 100 calls a minute, 20 at once: a bucket with one call spent is
        // full again 600 ms later.
        let interval = 600 * MS;
        let mut b = Buckets::new(interval, 20, 10_000);
        let mut refused = 0;
        for key in 1..=10_300u64 {
            match b.check(key, key * 1_000) {
                Verdict::Pass => {}
                Verdict::Full { wait, .. } => {
                    refused += 1;
                    // The first bucket is full again 600 ms after its call.
                    assert_eq!(wait, interval + 1_000 - key * 1_000);
                }
                Verdict::Wait(_) => unreachable!("each key calls once"),
            }
        }
        assert_eq!(refused, 300);
        assert_eq!(b.len(), 10_000);
        // 20 s later every bucket is full again: a new subject passes at once.
        let later = 20_000 * MS;
        assert_eq!(b.check(99_999, later), Verdict::Pass);
        assert_eq!(b.check(99_998, later), Verdict::Pass);
        // Those full again are forgotten as calls come, a few per call.
        for _ in 0..3_000 {
            b.check(99_999, later);
        }
        assert_eq!(b.len(), 2);
        assert!(
            b.full_at.capacity() < 10_000,
            "memory given back: {}",
            b.full_at.capacity()
        );
    }

    #[test]
    fn the_table_stays_bounded_with_one_look_per_bucket_under_any_mix_of_calls() {
        // A random walk: half the calls by 5 busy keys, half by keys from a
        // pool larger than the table, times moving forward by random steps.
        let mut b = Buckets::new(5 * MS, 3, 50);
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut now = 0;
        let (mut passed, mut waited, mut full) = (0, 0, 0);
        for _ in 0..200_000 {
            now += next() % (MS / 20);
            let key = match next() % 2 {
                0 => next() % 5,
                _ => 5 + next() % 200,
            };
            match b.check(key, now) {
                Verdict::Pass => passed += 1,
                Verdict::Wait(wait) => {
                    assert!(wait > 0 && wait <= 15 * MS);
                    waited += 1;
                }
                Verdict::Full { wait, .. } => {
                    assert!(wait > 0 && wait <= 15 * MS, "{wait}");
                    full += 1;
                }
            }
            assert!(b.len() <= 50);
        }
        assert!(
            passed > 0 && waited > 0 && full > 0,
            "{passed} {waited} {full}"
        );
    }
}

//! [`RateLimit`]: calls per subject, with a retry hint.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use governor::clock::{Clock, DefaultClock};
use governor::state::keyed::HashMapStateStore;
use governor::{Quota, RateLimiter};
use serde_json::Value;

use super::{Call, Layer, Next, rate_limited, retry_ms};
use crate::tool::ToolError;

/// Calls the same subjects may make between two looks at how many are kept.
const SWEEP_EVERY: u64 = 1024;

/// At most this many calls per subject in a period, refused beyond with
/// `RATE_LIMITED` and `details.retry_after_ms`: how long until the next call
/// would be let through.
///
/// The limit is a token bucket (GCRA, by `governor`): a subject may spend
/// `calls` at once, then one more every `period / calls`. Calls with no
/// authenticated subject share one bucket. The refusal comes before the
/// params are checked, and costs the tool nothing.
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
/// The subjects remembered are bounded: those whose bucket is full again are
/// forgotten as calls come, and beyond [`max_subjects`](Self::max_subjects)
/// still not forgotten, calls are refused (`RATE_LIMITED`) until some are.
pub struct RateLimit {
    /// Buckets by a hash of the subject (0 for calls without one): no
    /// allocation per call. The hasher is seeded per process, so subjects
    /// cannot be chosen to share a bucket; two that did by chance (one in
    /// 2⁶⁴) would only share their limit.
    limiter:
        RateLimiter<u64, HashMapStateStore<u64, BuildHasherDefault<PassThrough>>, DefaultClock>,
    seed: foldhash::fast::RandomState,
    clock: DefaultClock,
    calls: u32,
    period: Duration,
    max_subjects: usize,
    /// Calls checked, to sweep the forgotten subjects now and then.
    checked: AtomicU64,
    /// More subjects than `max_subjects` were remembered at the last sweep.
    full: AtomicBool,
}

impl RateLimit {
    /// `calls` per `period` for each subject (a `calls` of 0 is taken as 1, a
    /// `period` under a microsecond as one), all of them at once if need be.
    pub fn per_subject(calls: u32, period: Duration) -> RateLimit {
        RateLimit::build(calls, period, calls, 10_000)
    }

    /// Lets a subject make at most `burst` calls at once (0 is taken as 1);
    /// the rate stays `calls` per `period`.
    pub fn burst(self, burst: u32) -> RateLimit {
        RateLimit::build(self.calls, self.period, burst, self.max_subjects)
    }

    /// Remembers at most this many subjects (10 000 by default) whose bucket
    /// is not full again.
    pub fn max_subjects(mut self, max: usize) -> RateLimit {
        self.max_subjects = max.max(1);
        self
    }

    fn build(calls: u32, period: Duration, burst: u32, max_subjects: usize) -> RateLimit {
        let calls = calls.max(1);
        let each = (period / calls).max(Duration::from_micros(1));
        let quota = Quota::with_period(each)
            .expect("the period is not zero")
            .allow_burst(NonZeroU32::new(burst.max(1)).expect("at least one"));
        RateLimit {
            limiter: RateLimiter::hashmap_with_hasher(quota, BuildHasherDefault::default()),
            seed: foldhash::fast::RandomState::default(),
            clock: DefaultClock::default(),
            calls,
            period,
            max_subjects,
            checked: AtomicU64::new(0),
            full: AtomicBool::new(false),
        }
    }

    /// Whether `subject` may call now; how long to wait if not.
    fn check(&self, subject: Option<&str>) -> Result<(), Refusal> {
        if self.checked.fetch_add(1, Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.sweep();
        }
        if self.full.load(Relaxed) {
            return Err(Refusal::Full);
        }
        let key = subject.map_or(0, |subject| self.seed.hash_one(subject) | 1);
        self.limiter
            .check_key(&key)
            .map_err(|not_until| Refusal::Wait(not_until.wait_time_from(self.clock.now())))
    }

    /// Forgets the subjects whose bucket is full again, and decides whether
    /// there are too many left.
    fn sweep(&self) {
        self.limiter.retain_recent();
        let kept = self.limiter.len();
        self.full.store(kept > self.max_subjects, Relaxed);
        if kept > self.max_subjects {
            tracing::warn!(
                kept,
                max_subjects = self.max_subjects,
                "rate limit: too many subjects at once, calls refused"
            );
        }
    }
}

enum Refusal {
    Wait(Duration),
    Full,
}

impl std::fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("calls", &self.calls)
            .field("period", &self.period)
            .field("max_subjects", &self.max_subjects)
            .finish_non_exhaustive()
    }
}

impl Layer for RateLimit {
    async fn call(&self, call: Call, next: Next) -> Result<Value, ToolError> {
        match self.check(call.subject()) {
            Ok(()) => next.run(call).await,
            Err(Refusal::Wait(wait)) => Err(rate_limited(
                format!(
                    "Rate limit of {} calls per {:?} reached; try again in {} ms",
                    self.calls,
                    self.period,
                    retry_ms(wait)
                ),
                wait,
            )),
            Err(Refusal::Full) => Err(rate_limited(
                "Rate limit: too many callers at once".to_owned(),
                self.period / self.calls,
            )),
        }
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

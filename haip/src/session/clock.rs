//! Time and identifiers, injected: the session core never reads the system
//! clock or the random-number generator itself, so a test can drive it on a
//! fake clock with predictable ids.

#[cfg(test)]
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
#[cfg(test)]
use std::time::Duration;
use std::time::Instant;

/// Where the session core gets the time.
pub(crate) trait Clock: Send + Sync + 'static {
    /// Monotonic time, for ages and deadlines.
    fn now(&self) -> Instant;
    /// Milliseconds since the Unix epoch, for the envelopes' `ts`.
    fn unix_millis(&self) -> u64;
}

/// Where the session core gets fresh identifiers: session ids, run ids, call
/// ids the client left out, heartbeat nonces.
pub(crate) trait IdSource: Send + Sync + 'static {
    /// Writes a new identifier, a hyphenated lowercase UUID (docs/protocol.md §2), into
    /// `buf` and returns it (no allocation: every envelope gets one).
    fn write<'b>(&self, buf: &'b mut [u8; ID_LEN]) -> &'b str;

    /// A new identifier, owned.
    fn fresh(&self) -> String {
        let mut buf = [0u8; ID_LEN];
        self.write(&mut buf).to_owned()
    }
}

/// The length of a hyphenated UUID.
pub(crate) const ID_LEN: usize = 36;

/// The system's clocks. Monotonic time is read through the runtime, so that
/// the session's deadlines and the driver's sleeps agree (also on a runtime
/// whose clock a test paused).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn unix_millis(&self) -> u64 {
        crate::protocol::now_millis()
    }
}

/// Random version 4 UUIDs.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct RandomIds;

impl IdSource for RandomIds {
    fn write<'b>(&self, buf: &'b mut [u8; ID_LEN]) -> &'b str {
        uuid::Uuid::new_v4().hyphenated().encode_lower(buf)
    }
}

/// A clock that moves only when told to.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct FakeClock {
    origin: Instant,
    unix_origin: u64,
    elapsed_ms: AtomicU64,
}

#[cfg(test)]
impl FakeClock {
    /// A clock at 2026-01-01T00:00:00Z that stands still.
    pub(crate) fn new() -> FakeClock {
        FakeClock {
            origin: Instant::now(),
            unix_origin: 1_767_225_600_000,
            elapsed_ms: AtomicU64::new(0),
        }
    }

    /// Moves the clock forward.
    pub(crate) fn advance(&self, by: Duration) {
        self.elapsed_ms.fetch_add(by.as_millis() as u64, Relaxed);
    }
}

#[cfg(test)]
impl Clock for FakeClock {
    fn now(&self) -> Instant {
        self.origin + Duration::from_millis(self.elapsed_ms.load(Relaxed))
    }

    fn unix_millis(&self) -> u64 {
        self.unix_origin + self.elapsed_ms.load(Relaxed)
    }
}

/// Ids counting up, shaped like version 4 UUIDs:
/// `00000000-0000-4000-8000-000000000001`, `…002`, …
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct CountingIds {
    next: AtomicU64,
}

#[cfg(test)]
impl IdSource for CountingIds {
    fn write<'b>(&self, buf: &'b mut [u8; ID_LEN]) -> &'b str {
        let n = self.next.fetch_add(1, Relaxed) + 1;
        let id = format!("00000000-0000-4000-8000-{:012x}", n & 0xffff_ffff_ffff);
        buf.copy_from_slice(id.as_bytes());
        std::str::from_utf8(buf).expect("ASCII")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fake_clock_moves_only_when_told_and_ids_count() {
        let clock = FakeClock::new();
        let (t0, u0) = (clock.now(), clock.unix_millis());
        assert_eq!(clock.now(), t0);
        clock.advance(Duration::from_millis(1500));
        assert_eq!(clock.now() - t0, Duration::from_millis(1500));
        assert_eq!(clock.unix_millis() - u0, 1500);
        let ids = CountingIds::default();
        assert_eq!(ids.fresh(), "00000000-0000-4000-8000-000000000001");
        assert_eq!(ids.fresh(), "00000000-0000-4000-8000-000000000002");
        assert!(uuid::Uuid::parse_str(&RandomIds.fresh()).is_ok());
    }
}

//! Reading one-shot request bodies within the limits of docs/protocol.md §18.1: a
//! declared length over the limit is refused before anything is read
//! (`413`), the bytes of all bodies being read share `max_inflight_body_bytes`
//! (`503`), and a body must arrive within `body_read_timeout`, at 1 KiB/s or
//! better after its first 10 s (`408`), also after a `100 Continue`. Upstream
//! POSTs (`upstream.rs`) and `/mcp` (`mcp.rs`) read their bodies here; each
//! renders a [`Stopped`] in its own protocol's words.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use crate::transport::body::RequestBody;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::HeaderMap;
use hyper::header;
use tokio::time::Instant;

/// A body may take this long before its average rate is checked.
const RATE_GRACE: Duration = Duration::from_secs(10);

/// The slowest average rate a body may arrive at after [`RATE_GRACE`].
const MIN_BYTES_PER_SECOND: f64 = 1024.0;

/// The bytes of upstream POST bodies being read, server-wide.
#[derive(Debug)]
pub(crate) struct BodyBudget {
    used: Arc<AtomicUsize>,
    limit: usize,
}

impl BodyBudget {
    pub(crate) fn new(limit: usize) -> BodyBudget {
        BodyBudget {
            used: Arc::new(AtomicUsize::new(0)),
            limit,
        }
    }

    /// Reserves `bytes`, unless that would exceed the budget.
    pub(super) fn reserve(&self, bytes: usize) -> Option<Reservation> {
        let mut reservation = Reservation {
            used: Arc::clone(&self.used),
            limit: self.limit,
            bytes: 0,
        };
        reservation.grow(bytes).then_some(reservation)
    }
}

/// Bytes of one body counted in the [`BodyBudget`], given back when dropped.
pub(super) struct Reservation {
    used: Arc<AtomicUsize>,
    limit: usize,
    bytes: usize,
}

impl Reservation {
    /// Counts `more` bytes too, unless that would exceed the budget.
    pub(super) fn grow(&mut self, more: usize) -> bool {
        let limit = self.limit;
        let grown = self
            .used
            .fetch_update(Relaxed, Relaxed, |used| {
                used.checked_add(more).filter(|&total| total <= limit)
            })
            .is_ok();
        if grown {
            self.bytes += more;
        }
        grown
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.used.fetch_sub(self.bytes, Relaxed);
    }
}

/// Why reading a body stopped early.
pub(super) enum Stopped {
    /// Too slow: `408`.
    Timeout,
    /// Longer than `max_body_bytes`: `413`.
    TooLarge,
    /// Over the server-wide budget: `503`.
    Busy,
    /// The body broke off: `400`.
    Broken,
}

/// Reads one body within its deadline, its size limit and the budget.
pub(super) struct Reader {
    body: RequestBody,
    started: Instant,
    /// Time spent waiting for the session to take envelopes, which is not
    /// the client's delay.
    pub(super) paused: Duration,
    read: usize,
    timeout: Duration,
    max: usize,
    reservation: Reservation,
    /// The declared length was reserved up front.
    reserved_up_front: bool,
}

impl Reader {
    /// The next chunk of data (`None` at the end).
    pub(super) async fn chunk(&mut self) -> Result<Option<Bytes>, Stopped> {
        loop {
            // The rate check fails once the bytes read fall behind 1 KiB per
            // second of the client's own time; the total deadline holds anyway.
            let at_rate = Duration::from_secs_f64(self.read as f64 / MIN_BYTES_PER_SECOND);
            let client_time = RATE_GRACE.max(at_rate).min(self.timeout);
            let deadline = self.started + self.paused + client_time;
            let frame = match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Err(_) => return Err(Stopped::Timeout),
                Ok(None) => return Ok(None),
                Ok(Some(Err(_))) => return Err(Stopped::Broken),
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            self.read = self.read.saturating_add(data.len());
            if self.read > self.max {
                return Err(Stopped::TooLarge);
            }
            if !self.reserved_up_front && !self.reservation.grow(data.len()) {
                return Err(Stopped::Busy);
            }
            return Ok(Some(data));
        }
    }
}

/// Why a body could not be read, before its first byte or after.
pub(super) enum Refused {
    /// The declared length is not a number: `400`.
    BadLength,
    /// Reading stopped.
    Stopped(Stopped),
}

impl Reader {
    /// Starts reading a one-shot body of at most `max` bytes: refuses at once
    /// a declared length over `max` (or not a number), and a body `budget`
    /// cannot take; the declared length is reserved up front.
    pub(super) fn start(
        headers: &HeaderMap,
        body: RequestBody,
        budget: &BodyBudget,
        timeout: Duration,
        max: usize,
    ) -> Result<Reader, Refused> {
        let declared = match headers.get(header::CONTENT_LENGTH) {
            None => None,
            Some(value) => match value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
            {
                Some(length) => Some(length),
                None => return Err(Refused::BadLength),
            },
        };
        if declared.is_some_and(|length| length > max as u64) {
            return Err(Refused::Stopped(Stopped::TooLarge));
        }
        // Checked above: the declared length fits in `max`.
        let declared = declared.map(|length| length as usize);
        let Some(reservation) = budget.reserve(declared.unwrap_or(0)) else {
            return Err(Refused::Stopped(Stopped::Busy));
        };
        Ok(Reader {
            body,
            started: Instant::now(),
            paused: Duration::ZERO,
            read: 0,
            timeout,
            max,
            reservation,
            reserved_up_front: declared.is_some(),
        })
    }
}

/// A body read whole and held while its request runs, as `/mcp` reads its
/// bodies (feature `mcp`).
#[cfg(feature = "mcp")]
mod whole {
    use bytes::Bytes;

    use super::{Reader, Reservation, Stopped};

    impl Reservation {
        /// The bytes counted.
        pub(in crate::server) fn bytes(&self) -> usize {
            self.bytes
        }
    }

    impl Reader {
        /// Reads the rest of the body into one buffer (at most `max` bytes).
        pub(in crate::server) async fn read_rest(&mut self) -> Result<Bytes, Stopped> {
            // A declared length is allocated once (it fits the limit): a body
            // held while its request runs takes its own size, not up to twice.
            let declared = if self.reserved_up_front {
                self.reservation.bytes()
            } else {
                0
            };
            let mut whole = bytes::BytesMut::new();
            let mut first: Option<Bytes> = None;
            while let Some(chunk) = self.chunk().await? {
                // A body in one frame is not copied.
                match first.take() {
                    None if whole.is_empty() => first = Some(chunk),
                    None => whole.extend_from_slice(&chunk),
                    Some(earlier) => {
                        whole.reserve(declared.max(earlier.len() + chunk.len()));
                        whole.extend_from_slice(&earlier);
                        whole.extend_from_slice(&chunk);
                    }
                }
            }
            Ok(first.unwrap_or_else(|| whole.freeze()))
        }

        /// The body budget's reservation for this body, to be held on while
        /// what was read is in use.
        pub(in crate::server) fn into_reservation(self) -> Reservation {
            self.reservation
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_budget_is_shared_and_given_back() {
        let budget = BodyBudget::new(100);
        let a = budget.reserve(60).expect("fits");
        assert!(budget.reserve(41).is_none(), "60 + 41 > 100");
        let mut b = budget.reserve(40).expect("fits exactly");
        assert!(!b.grow(1));
        drop(a);
        assert!(b.grow(60));
        assert!(budget.reserve(usize::MAX).is_none(), "no overflow");
        drop(b);
        assert!(budget.reserve(100).is_some());
    }
}

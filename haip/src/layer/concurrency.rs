//! [`ConcurrencyLimit`]: calls of one tool at once.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Semaphore;

use super::{Call, Layer, Next, rate_limited};
use crate::hash::FastMap;
use crate::protocol::ErrorCode;
use crate::tool::ToolError;

/// At most this many calls of each tool run at once, server-wide; the others
/// wait for a place, in the order they came.
///
/// A waiting call can be cancelled (or time out) like a running one. With
/// [`max_waiting`](Self::max_waiting), a call that would wait behind that many
/// others is refused at once with `RATE_LIMITED` instead.
///
/// ```
/// use haip::layer::ConcurrencyLimit;
///
/// // Each tool runs at most 4 calls at once; 16 more may wait, then refused.
/// let limit = ConcurrencyLimit::per_tool(4).max_waiting(16);
/// let builder = haip::Server::builder().layer(limit);
/// # drop(builder);
/// ```
pub struct ConcurrencyLimit {
    per_tool: usize,
    max_waiting: Option<usize>,
    /// Each tool's places, made at its first call; those of tools no call
    /// holds are forgotten as the map grows (tools removed at run time).
    tools: Mutex<Tools>,
}

struct Tools {
    places: FastMap<String, Arc<Places>>,
    /// The size at which idle tools are next forgotten.
    sweep_at: usize,
}

/// Tools remembered before idle ones are first forgotten.
const SWEEP_AT: usize = 1024;

struct Places {
    running: Arc<Semaphore>,
    waiting: AtomicUsize,
}

impl ConcurrencyLimit {
    /// At most `calls` calls of each tool at once (0 is taken as 1).
    pub fn per_tool(calls: usize) -> ConcurrencyLimit {
        ConcurrencyLimit {
            per_tool: calls.clamp(1, Semaphore::MAX_PERMITS),
            max_waiting: None,
            tools: Mutex::new(Tools {
                places: FastMap::default(),
                sweep_at: SWEEP_AT,
            }),
        }
    }

    /// Refuses a call (`RATE_LIMITED`) that would wait behind `max` others
    /// of its tool. Without it, calls wait (their number is bounded by the
    /// server's limits on calls in flight).
    pub fn max_waiting(mut self, max: usize) -> ConcurrencyLimit {
        self.max_waiting = Some(max);
        self
    }

    fn places(&self, tool: &str) -> Arc<Places> {
        let mut tools = self.tools.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(places) = tools.places.get(tool) {
            return Arc::clone(places);
        }
        if tools.places.len() >= tools.sweep_at {
            // A tool's places that no call holds (none runs, none waits)
            // carry nothing: made again at its next call. Amortised: the
            // next sweep waits until the map doubles.
            tools
                .places
                .retain(|_, places| Arc::strong_count(places) > 1);
            tools.sweep_at = (tools.places.len() * 2).max(SWEEP_AT);
        }
        let places = Arc::new(Places {
            running: Arc::new(Semaphore::new(self.per_tool)),
            waiting: AtomicUsize::new(0),
        });
        tools.places.insert(tool.to_owned(), Arc::clone(&places));
        places
    }
}

impl std::fmt::Debug for ConcurrencyLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConcurrencyLimit")
            .field("per_tool", &self.per_tool)
            .field("max_waiting", &self.max_waiting)
            .finish_non_exhaustive()
    }
}

/// One call waiting, counted while it does.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

impl Layer for ConcurrencyLimit {
    async fn call(&self, call: Call, next: Next) -> Result<Value, ToolError> {
        let places = self.places(call.name());
        let permit = match Arc::clone(&places.running).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                let ahead = places.waiting.fetch_add(1, Relaxed);
                let waiting = Waiting(&places.waiting);
                if self.max_waiting.is_some_and(|max| ahead >= max) {
                    drop(waiting);
                    return Err(rate_limited(
                        format!(
                            "Tool {} already runs {} calls and {ahead} wait",
                            call.name(),
                            self.per_tool
                        ),
                        Duration::from_secs(1),
                    ));
                }
                let acquired = tokio::select! {
                    permit = Arc::clone(&places.running).acquire_owned() => permit,
                    () = call.context().cancelled() => return Err(ToolError::cancelled()),
                };
                drop(waiting);
                // The semaphore is never closed.
                acquired.map_err(|_| ToolError::new(ErrorCode::INTERNAL_ERROR, "limit closed"))?
            }
        };
        let outcome = next.run(call).await;
        drop(permit);
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_no_call_holds_are_forgotten_as_the_map_grows() {
        let limit = ConcurrencyLimit::per_tool(2);
        // A call of "kept" is running: its places stay whatever happens.
        let held = limit.places("kept");
        let _permit = Arc::clone(&held.running).try_acquire_owned().unwrap();
        for n in 0..10 * SWEEP_AT {
            drop(limit.places(&format!("tool{n}")));
        }
        let tools = limit.tools.lock().unwrap();
        assert!(tools.places.len() <= SWEEP_AT, "{}", tools.places.len());
        let kept = tools.places.get("kept").expect("a held tool is kept");
        assert!(Arc::ptr_eq(kept, &held));
        assert_eq!(kept.running.available_permits(), 1);
    }
}

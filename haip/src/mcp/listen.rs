//! `subscriptions/listen` (MCP 2026-07-28, SEP-2575): how a client without
//! an MCP session hears of registry changes.
//!
//! A client opens a listen stream with the notifications it wants; haip has
//! tools only, so it accepts `toolsListChanged` and nothing else, and
//! acknowledges the accepted part first (`notifications/subscriptions/
//! acknowledged`). `/mcp` serves a listen stream ([`relay`], from
//! `export/direct.rs` or `export/stateless.rs`). From then on, every change
//! of the registry (tools added,
//! replaced or removed, by the application or by an imported MCP server
//! whose tools changed) sends `notifications/tools/list_changed`, tagged
//! with the subscription's id, until the client goes away (its request is
//! cancelled or its connection closes), the server shuts down (`/mcp` closes
//! its response streams then), or the registry is gone; a stream that ends
//! while its client is there ends with its final result. Changes
//! that come faster than the client takes them are coalesced: a client is
//! told that the list changed, never how often. A stream that accepted
//! nothing (the client asked only for prompts or resources) ends at once.
//!
//! An authenticated caller's stream also carries `notifications/tasks` for
//! its own MCP tasks (`tasks.rs`) as their status changes on this instance:
//! the task as `tasks/get` would show it then. Tasks are their caller's own,
//! so a stream without a subject hears of none; the notifications are a
//! convenience, and `tasks/get` stays the truth (a stream that falls behind,
//! or listens on another instance than the one running the task, misses
//! some).
//!
//! **Bounded.** A listen stream costs one small task and one place among
//! [`Listens`]: at most half of `max_sessions`
//! (at least one) are open at once server-wide, so that listeners never take
//! every request slot from calls, and one caller holds at most its share of
//! them (`max_sessions_per_caller`; a caller is its subject, or its peer
//! address when unauthenticated: `context/share.rs`), so that one caller
//! cannot take every place from the others. The `/mcp` front door takes the
//! place when the request arrives ([`Listens::open`], which also starts
//! watching the registry, so that no change after the acknowledgment is
//! missed) and refuses one more with `503` and a JSON-RPC error naming the
//! limit that is reached. (A listen stream is also one of the stateless
//! requests being served while it is open: `export/http.rs`.) A listen
//! stream is a 2026-07-28 request, which has no stdio form in haip (stdio is
//! one session of an earlier revision). An idle stream is kept alive by an
//! SSE comment every 15 s, which is also how a client that went away
//! without closing is noticed.

use std::sync::Arc;

use crate::mcp::model::{RequestId, SUBSCRIPTION_ID, SubscriptionFilter};
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::tasks::TaskEvent;
use crate::context::share::{CallerKey, ShareGuard, Shares};
use crate::tool::Registry;

/// What haip accepts of a requested filter: tool list changes (it has no
/// prompts or resources), of what was requested and what the server's
/// capabilities advertise.
pub(crate) fn accepted() -> SubscriptionFilter {
    SubscriptionFilter::tools_list_changed()
}

/// The places for listen streams, server-wide, and each caller's share of
/// them.
pub(crate) struct Listens {
    open: Arc<Semaphore>,
    max: usize,
    shares: Arc<Shares>,
}

impl Listens {
    /// Half of `max_sessions` (at least one) listen streams at once, at most
    /// `per_caller` of them by one caller.
    pub(crate) fn new(max_sessions: usize, per_caller: usize) -> Listens {
        let max = (max_sessions / 2).max(1);
        Listens {
            open: Arc::new(Semaphore::new(max)),
            max,
            shares: Shares::new(per_caller),
        }
    }

    /// A place for one listen stream of the caller `key`, watching the
    /// registry from now on; or why not, for the client.
    pub(crate) fn open(&self, registry: &Registry, key: &CallerKey) -> Result<Listening, String> {
        let share = self.shares.take(key).map_err(|over| {
            format!(
                "{} already holds {} subscriptions/listen streams \
                 (max_sessions_per_caller = {}); close one or retry later",
                key.describe(),
                over.share,
                over.share
            )
        })?;
        let Ok(place) = Arc::clone(&self.open).try_acquire_owned() else {
            return Err(format!(
                "Too many subscriptions/listen streams open (at most {}, half of max_sessions); retry later",
                self.max
            ));
        };
        Ok(Listening {
            _place: place,
            _share: share,
            changes: registry.subscribe(),
        })
    }
}

/// One listen stream's place (and its caller's share of them), and the
/// registry's changes since it was taken.
pub(crate) struct Listening {
    _place: OwnedSemaphorePermit,
    _share: ShareGuard,
    changes: watch::Receiver<u64>,
}

/// The acknowledgment that opens a listen stream of the request `id` served
/// by haip itself (`export/direct.rs`): what of the filter is `accepted`.
pub(crate) fn acknowledgment(id: &RequestId, accepted: &SubscriptionFilter) -> Bytes {
    let params = serde_json::json!({ "notifications": accepted });
    encode(id, "notifications/subscriptions/acknowledged", params)
}

/// A listen stream of the request `id` served by haip itself
/// (`export/direct.rs`, `export/stateless.rs`), run by [`relay`].
pub(crate) struct Relay {
    pub(crate) listening: Listening,
    pub(crate) accepted: SubscriptionFilter,
    pub(crate) id: RequestId,
    /// Where its messages go.
    pub(crate) outbox: mpsc::Sender<Bytes>,
    /// Its final result, sent when the registry is gone or it accepted
    /// nothing.
    pub(crate) last: Bytes,
    /// Its client went away.
    pub(crate) cancelled: CancellationToken,
    pub(crate) shutdown: CancellationToken,
    /// The authenticated caller, told of its own tasks.
    pub(crate) subject: Option<Arc<str>>,
    pub(crate) tasks: broadcast::Receiver<TaskEvent>,
}

/// Runs `relay` until its client goes away (`cancelled`, or `outbox`
/// closed), the server shuts down, or the registry is gone.
pub(crate) async fn relay(relay: Relay) {
    let Relay {
        listening,
        accepted,
        id,
        outbox,
        last,
        cancelled,
        shutdown,
        subject,
        tasks,
    } = relay;
    if accepted.tools_list_changed != Some(true) {
        // Nothing it asked for is ever sent: it holds nothing open.
        let _ = outbox.send(last).await;
        return;
    }
    let Listening {
        _place,
        _share,
        mut changes,
    } = listening;
    let changed_note = encode(
        &id,
        "notifications/tools/list_changed",
        Value::Object(Default::default()),
    );
    // Tasks are their caller's own: an unauthenticated stream hears of none.
    let mut tasks = subject.is_some().then_some(tasks);
    loop {
        let message = tokio::select! {
            () = cancelled.cancelled() => return,
            () = shutdown.cancelled() => return,
            event = next_task_event(&mut tasks) => {
                if event.subject.as_deref() != subject.as_deref() {
                    continue;
                }
                // The task's fields are the params (an object: they encode).
                let params = serde_json::to_value(&event.task).unwrap_or_default();
                encode(&id, "notifications/tasks", params)
            }
            changed = changes.changed() => {
                if changed.is_err() {
                    let _ = outbox.send(last).await;
                    return;
                }
                // The change is seen; any number of changes while this is
                // sent make one more notification.
                changed_note.clone()
            }
        };
        if outbox.send(message).await.is_err() {
            return;
        }
    }
}

/// The notification `method` of the listen stream `id` as one JSON-RPC
/// message: `params` (an object) with the stream's id in their `_meta`.
fn encode(id: &RequestId, method: &str, mut params: Value) -> Bytes {
    if let Value::Object(params) = &mut params {
        let mut meta = serde_json::Map::new();
        meta.insert(SUBSCRIPTION_ID.to_owned(), id.to_value());
        params.insert("_meta".to_owned(), Value::Object(meta));
    }
    let message = serde_json::json!({"jsonrpc": "2.0", "method": method, "params": params});
    // Notifications are maps of strings and JSON values: they always encode.
    Bytes::from(serde_json::to_vec(&message).unwrap_or_default())
}

/// The next change of a task's status; never when there are none to hear
/// (the stream hears of no tasks, or the server's tasks are gone). A stream
/// that fell behind skips what it missed.
async fn next_task_event(tasks: &mut Option<broadcast::Receiver<TaskEvent>>) -> TaskEvent {
    loop {
        let Some(receiver) = tasks.as_mut() else {
            return std::future::pending().await;
        };
        match receiver.recv().await {
            Ok(event) => return event,
            Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => *tasks = None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_of_max_sessions_and_at_least_one_may_listen() {
        let registry = Registry::default();
        let anyone = CallerKey::Unlimited;
        let listens = Listens::new(4, 1000);
        let a = listens.open(&registry, &anyone).unwrap();
        let _b = listens.open(&registry, &anyone).unwrap();
        let refused = listens.open(&registry, &anyone).err().unwrap();
        assert!(refused.contains("at most 2"), "{refused}");
        drop(a);
        assert!(
            listens.open(&registry, &anyone).is_ok(),
            "a closed stream's place is free"
        );
        let one = Listens::new(1, 1000);
        let _only = one.open(&registry, &anyone).unwrap();
        assert!(one.open(&registry, &anyone).is_err());
    }

    #[test]
    fn one_caller_holds_at_most_its_share_of_the_streams() {
        let registry = Registry::default();
        let alice = CallerKey::Subject(Arc::from("alice"));
        let bob = CallerKey::Subject(Arc::from("bob"));
        let listens = Listens::new(100, 2);
        let a1 = listens.open(&registry, &alice).unwrap();
        let _a2 = listens.open(&registry, &alice).unwrap();
        let refused = listens.open(&registry, &alice).err().unwrap();
        assert!(
            refused.contains(r#"subject "alice" already holds 2"#)
                && refused.contains("max_sessions_per_caller = 2"),
            "{refused}"
        );
        let _b = listens
            .open(&registry, &bob)
            .expect("bob has his own share");
        drop(a1);
        assert!(
            listens.open(&registry, &alice).is_ok(),
            "a closed stream gives its share back"
        );
    }

    #[test]
    fn a_listen_watches_the_registry_from_when_it_was_opened() {
        let registry = Registry::default();
        let listens = Listens::new(10, 10);
        let mut listening = listens.open(&registry, &CallerKey::Unlimited).unwrap();
        assert!(!listening.changes.has_changed().unwrap());
        registry.unregister("nothing"); // no such tool: no change
        assert!(!listening.changes.has_changed().unwrap());
        registry.register(
            crate::tool::Tool::builder("t")
                .handler(|_: serde_json::Value, _: crate::Context| async {
                    Ok(serde_json::Value::Null)
                })
                .build()
                .unwrap(),
        );
        assert!(listening.changes.has_changed().unwrap());
        listening.changes.mark_unchanged();
    }
}

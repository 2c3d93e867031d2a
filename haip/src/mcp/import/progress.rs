//! Progress of imported calls: the MCP server's `notifications/progress`
//! routed to the call whose request carried the token, as `TOOL_UPDATE`
//! progress (`progress/total` as the percentage, `message` as `partial`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use serde_json::Value;

use crate::Context;

/// Routes `notifications/progress` to the call whose request carried the token.
#[derive(Default)]
pub(super) struct ProgressRouter {
    state: Mutex<RouterState>,
}

#[derive(Default)]
struct RouterState {
    calls: HashMap<ProgressToken, Context>,
    /// Notifications for tokens not (yet) registered: the request is sent
    /// before its call can register the token, so a fast server's first
    /// report may arrive first. The newest few are kept for that moment.
    early: std::collections::VecDeque<ProgressNotificationParam>,
}

/// Unclaimed notifications kept for calls about to register.
const EARLY: usize = 16;

impl ProgressRouter {
    pub(super) fn register(self: &Arc<Self>, token: ProgressToken, ctx: Context) -> ProgressGuard {
        let early = {
            let mut state = self.lock();
            let mut early = Vec::new();
            state.early.retain(|p| {
                let mine = p.progress_token == token;
                if mine {
                    early.push(p.clone());
                }
                !mine
            });
            state.calls.insert(token.clone(), ctx.clone());
            early
        };
        for p in early {
            report(&ctx, p);
        }
        ProgressGuard {
            router: Arc::clone(self),
            token,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RouterState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Relays one notification to its call's context, or keeps it briefly
    /// when no call holds its token yet.
    pub(super) fn deliver(&self, p: ProgressNotificationParam) {
        let ctx = {
            let mut state = self.lock();
            match state.calls.get(&p.progress_token) {
                Some(ctx) => ctx.clone(),
                None => {
                    if state.early.len() == EARLY {
                        state.early.pop_front();
                    }
                    state.early.push_back(p);
                    return;
                }
            }
        };
        report(&ctx, p);
    }
}

/// `progress/total` becomes the percentage (none without a total), the
/// message becomes `partial`.
fn report(ctx: &Context, p: ProgressNotificationParam) {
    let percent = match p.total {
        Some(total) if total > 0.0 => Some(p.progress / total * 100.0),
        _ => None,
    };
    ctx.report_progress(percent, p.message.map(Value::String));
}

pub(super) struct ProgressGuard {
    router: Arc<ProgressRouter>,
    token: ProgressToken,
}

impl Drop for ProgressGuard {
    fn drop(&mut self) {
        self.router.lock().calls.remove(&self.token);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::context::{CallSlot, Parts, ProgressSink};
    use crate::exec::CallKey;

    #[test]
    fn progress_is_routed_by_token_as_percent_and_partial() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let slot = Arc::new(CallSlot::default());
        let ctx = Context::new(Parts {
            call_id: "c".into(),
            session_id: Arc::from("s"),
            cancel: CancellationToken::new(),
            progress: Some(ProgressSink {
                key: CallKey(1),
                slot: Arc::clone(&slot),
                events: Some(tx),
            }),
            state: None,
            caller: None,
            peer: None,
        });
        let router = Arc::new(ProgressRouter::default());
        let token = ProgressToken(rmcp::model::NumberOrString::Number(7));
        // A report that beats the registration is kept and handed over.
        router.deliver(ProgressNotificationParam::new(token.clone(), 1.0).with_total(2.0));
        let guard = router.register(token.clone(), ctx);
        assert_eq!(
            slot.take().unwrap().percent,
            Some(serde_json::Number::from(50))
        );

        router.deliver(ProgressNotificationParam::new(token.clone(), 1.0).with_total(4.0));
        let p = slot.take().unwrap();
        assert_eq!(p.percent, Some(serde_json::Number::from(25)));
        assert_eq!(p.partial, None);

        let note = ProgressNotificationParam::new(token.clone(), 3.0).with_message("three");
        router.deliver(note);
        let p = slot.take().unwrap();
        assert_eq!(p.percent, None, "no total, no percentage");
        assert_eq!(p.partial, Some(json!("three")));

        let other = ProgressToken(rmcp::model::NumberOrString::Number(8));
        router.deliver(ProgressNotificationParam::new(other, 1.0).with_total(2.0));
        assert!(slot.take().is_none(), "another call's token is not ours");

        drop(guard);
        router.deliver(ProgressNotificationParam::new(token, 2.0).with_total(4.0));
        assert!(slot.take().is_none(), "a finished call gets nothing");

        // Unclaimed reports are bounded.
        for i in 0..100 {
            let stray = ProgressToken(rmcp::model::NumberOrString::Number(1000 + i));
            router.deliver(ProgressNotificationParam::new(stray, 1.0));
        }
        assert_eq!(router.lock().early.len(), EARLY);
    }
}

//! Session-core tests: text in, envelopes out, no sockets.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::*;
use crate::Context;
use crate::exec::{self, CallEvent, CallKey};
use crate::session::SessionConfig as Config;
use crate::session::timers::STREAM_HEARTBEAT_CAP;
use crate::tool::{Registry, Tool, ToolError, builtin};

struct Harness {
    session: Session,
    events_tx: mpsc::UnboundedSender<CallEvent>,
    events: mpsc::UnboundedReceiver<CallEvent>,
    seq: u64,
    /// Start the calls the session asks for on the call runner (a runtime is
    /// needed), or keep them in `actions` (the fake-clock tests).
    run_calls: bool,
    actions: Vec<Action>,
}

impl Harness {
    fn new(config: Config, tools: Vec<Tool>) -> Harness {
        let registry = Registry::default();
        for tool in builtin::tools().into_iter().chain(tools) {
            registry.register(tool);
        }
        let shared = Arc::new(Shared::new(config, registry, Default::default()));
        let mut h = Harness::on(Session::new(shared, Door::WebSocket, None), true);
        let hai = h.out();
        assert_eq!(hai.len(), 1);
        assert_eq!(hai[0]["type"], "HAI");
        h
    }

    /// A harness with one tool of its own, `gate`, whose calls run until
    /// the gate it gives is notified (or they are cancelled).
    fn gated(config: Config) -> (Harness, Arc<tokio::sync::Notify>) {
        let gate = Arc::new(tokio::sync::Notify::new());
        let h = Harness::new(config, vec![gate_tool("gate", Arc::clone(&gate))]);
        (h, gate)
    }

    fn on(session: Session, run_calls: bool) -> Harness {
        let (events_tx, events) = mpsc::unbounded_channel();
        Harness {
            session,
            events_tx,
            events,
            seq: 0,
            run_calls,
            actions: Vec::new(),
        }
    }

    fn send(&mut self, v: Value) -> Control {
        let control = self.session.handle_text(&v.to_string());
        self.act();
        control
    }

    /// Does what the session asked, as the driver would.
    fn act(&mut self) {
        while let Some(action) = self.session.poll_action() {
            let runner = &self.session.shared().runner;
            match action {
                Action::Start(start) if self.run_calls => {
                    if let Some((key, outcome)) = runner.start(*start, &self.events_tx) {
                        self.session.handle_event(CallEvent::Finished(key, outcome));
                    }
                }
                Action::Validate(validate) if self.run_calls => {
                    runner.start_validation(*validate, &self.events_tx);
                }
                action => self.actions.push(action),
            }
        }
    }

    /// Commits and returns everything in the outbox, checking `seq` continuity.
    fn out(&mut self) -> Vec<Value> {
        self.act();
        let mut all = Vec::new();
        while let Some(text) = self.session.poll_transmit() {
            let v: Value = serde_json::from_slice(&text).unwrap();
            self.seq += 1;
            assert_eq!(v["seq"], self.seq.to_string(), "seq gap at {v}");
            assert_eq!(v["session"], self.session.id());
            all.push(v);
        }
        all
    }

    /// Drains a replay: re-sent envelopes keep their old `seq`.
    fn session_replay(&mut self) -> Vec<Value> {
        std::iter::from_fn(|| self.session.poll_transmit())
            .map(|text| serde_json::from_slice(&text).unwrap())
            .collect()
    }

    /// Feeds call events until `done` TOOL_DONEs have been committed.
    async fn run_until_done(&mut self, done: usize) -> Vec<Value> {
        let count = |all: &[Value]| all.iter().filter(|v| v["type"] == "TOOL_DONE").count();
        self.run_until(|all| count(all) >= done).await
    }

    /// Feeds call events until what has been committed is `enough`.
    async fn run_until(&mut self, enough: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let mut all = self.out();
        while !enough(&all) {
            let event = tokio::time::timeout(Duration::from_secs(10), self.events.recv())
                .await
                .expect("timed out waiting for a call event")
                .expect("event channel closed");
            self.session.handle_event(event);
            all.extend(self.out());
        }
        all
    }

    /// Lets time pass on the fake clock and handles the deadlines due.
    fn advance(&mut self, clock: &FakeClock, by: Duration) -> Control {
        clock.advance(by);
        let control = self.session.handle_timeout(clock.now());
        self.act();
        control
    }
}

fn call(call_id: &str, tool: &str, params: Value) -> Value {
    json!({"id": format!("req-{call_id}"), "type": "TOOL_CALL", "payload": {"call_id": call_id, "tool": tool, "params": params}})
}

fn gate_tool(name: &str, gate: Arc<tokio::sync::Notify>) -> Tool {
    Tool::builder(name)
        .handler(move |_: Value, ctx: Context| {
            let gate = gate.clone();
            async move {
                tokio::select! {
                    () = gate.notified() => Ok(json!({"released": true})),
                    () = ctx.cancelled() => Err(ToolError::cancelled()),
                }
            }
        })
        .build()
        .unwrap()
}

mod calls;
mod clock;
mod delivery;
mod input;
mod questions;
#[cfg(feature = "redis")]
mod restore;

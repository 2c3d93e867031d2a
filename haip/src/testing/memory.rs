//! The in-memory connection: a session made as the WebSocket route makes
//! one, run by the server's connection driver over a queue of inbound units
//! and a queue of outbound frames, and the two ends of that carrier as the
//! client's WebSocket halves. What crosses it is recorded and checked
//! against the rules a client can see (`seq` from 1 without gaps, one
//! `TOOL_DONE` per call, nothing of a call after it).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::{Sink, Stream};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::Utf8Bytes;

use crate::auth::Caller;
use crate::server::driver;
use crate::session::{Session, Shared};
use crate::stats::Door;
use crate::transport::frame::{Frame, Unit, WriteMeter, Writer};
use crate::transport::queue::{FrameReceiver, frame_queue};

/// Envelopes a [`Wire`] keeps (the oldest go first beyond it).
const KEPT: usize = 10_000;

/// Inbound units queued for the session, as for a stream session.
const INBOUND: usize = 4;

/// What crossed one in-memory connection, and what was wrong with it.
#[derive(Debug, Default)]
pub(super) struct Wire {
    state: Mutex<WireState>,
    /// Told when the connection closes.
    closing: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct WireState {
    /// Server → client envelopes, in order, at most [`KEPT`].
    envelopes: std::collections::VecDeque<Value>,
    /// The `seq` the next committed envelope must carry.
    next_seq: u64,
    /// Call ids of the `TOOL_CALL`s the client sent, in order.
    calls: Vec<String>,
    /// `TOOL_DONE`s seen, by call id.
    done: HashMap<String, usize>,
    /// Broken rules, in the order they were seen.
    violations: Vec<String>,
    /// The connection's `Close` frame, once it came.
    closed: Option<(u16, &'static str)>,
}

impl Wire {
    fn state(&self) -> MutexGuard<'_, WireState> {
        // Whole values only: a panic elsewhere cannot leave it half-written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A client envelope on its way to the session.
    fn sent(&self, text: &str) {
        let Ok(v) = serde_json::from_str::<Value>(text) else {
            return;
        };
        if v["type"] == "TOOL_CALL"
            && let Some(call_id) = v["payload"]["call_id"].as_str()
        {
            self.state().calls.push(call_id.to_owned());
        }
    }

    /// A server envelope on its way to the client.
    pub(super) fn received(&self, text: &[u8]) {
        let mut state = self.state();
        let Ok(v) = serde_json::from_slice::<Value>(text) else {
            let shown = String::from_utf8_lossy(text);
            state.violations.push(format!(
                "the server sent something that is not JSON: {shown}"
            ));
            return;
        };
        state.check(&v);
        if state.envelopes.len() == KEPT {
            state.envelopes.pop_front();
        }
        state.envelopes.push_back(v);
    }

    fn closed(&self, code: u16, reason: &'static str) {
        self.state().closed.get_or_insert((code, reason));
        self.closing.notify_waiters();
    }

    /// Resolves once the connection has closed.
    pub(super) async fn wait_closed(&self) {
        loop {
            let closing = self.closing.notified();
            tokio::pin!(closing);
            closing.as_mut().enable();
            if self.state().closed.is_some() {
                return;
            }
            closing.await;
        }
    }

    /// Every server envelope kept so far, in order.
    pub(super) fn envelopes(&self) -> Vec<Value> {
        self.state().envelopes.iter().cloned().collect()
    }

    /// How many `TOOL_DONE`s `call_id` got so far.
    pub(super) fn completions(&self, call_id: &str) -> usize {
        self.state().done.get(call_id).copied().unwrap_or(0)
    }

    /// The rules broken so far.
    pub(super) fn violations(&self) -> Vec<String> {
        self.state().violations.clone()
    }

    /// Whether the server closed the connection with a `Close` frame (not:
    /// the client went first, or the driver went without one).
    pub(super) fn closed_by_server(&self) -> bool {
        matches!(self.state().closed, Some((code, _)) if code != 0)
    }

    /// The calls sent that have no `TOOL_DONE` yet.
    pub(super) fn unfinished(&self) -> Vec<String> {
        let state = self.state();
        state
            .calls
            .iter()
            .filter(|id| !state.done.contains_key(*id))
            .cloned()
            .collect()
    }
}

impl WireState {
    fn check(&mut self, v: &Value) {
        let ty = v["type"].as_str().unwrap_or_default();
        // A resumed session's replay re-sends old envelopes; nothing here
        // resumes, so every envelope is new and numbered in turn.
        let seq = v["seq"].as_str().and_then(|s| s.parse::<u64>().ok());
        self.next_seq = self.next_seq.max(1);
        match seq {
            Some(seq) if seq == self.next_seq => self.next_seq += 1,
            Some(seq) => {
                self.violations.push(format!(
                    "{ty} has seq {seq}, expected {}: {v}",
                    self.next_seq
                ));
                self.next_seq = seq.saturating_add(1);
            }
            None => self.violations.push(format!("{ty} without a seq: {v}")),
        }
        let call_id = v["payload"]["call_id"].as_str();
        match (ty, call_id) {
            ("TOOL_DONE", Some(id)) => {
                let count = self.done.entry(id.to_owned()).or_default();
                *count += 1;
                if *count > 1 {
                    self.violations
                        .push(format!("TOOL_DONE number {count} for call {id}: {v}"));
                }
            }
            ("TOOL_UPDATE", Some(id)) if self.done.contains_key(id) => {
                self.violations
                    .push(format!("TOOL_UPDATE after the TOOL_DONE of call {id}: {v}"));
            }
            _ => {}
        }
    }
}

/// The client's halves of an in-memory connection.
pub(super) type ClientSink = std::pin::Pin<Box<dyn Sink<Message, Error = Closed> + Send>>;
pub(super) type ClientStream =
    std::pin::Pin<Box<dyn Stream<Item = Result<Message, Infallible>> + Send>>;

/// The session's side of the connection has gone.
#[derive(Debug)]
pub(super) struct Closed;

/// Opens a session for `caller` (`None`: as with authentication off), runs
/// it with the connection driver on the server's task tracker, and gives the
/// client's halves of its connection.
pub(super) fn connect(
    shared: &Arc<Shared>,
    caller: Option<Caller>,
    wire: &Arc<Wire>,
) -> (ClientSink, ClientStream) {
    let (units, inbound) = mpsc::channel::<Unit>(INBOUND);
    let (frames, outbound) = frame_queue();
    let meter = WriteMeter::new(Arc::clone(shared));
    let writer = Writer {
        frames,
        meter: Arc::clone(&meter),
    };
    // As the WebSocket route makes it: the caller is who its token named.
    let session = Session::new(Arc::clone(shared), Door::WebSocket, caller.map(Arc::new));
    let driven = Arc::clone(shared);
    shared.runner.tasks().spawn(async move {
        driver::run_stream(session, inbound, writer, &driven, Box::new(|_| {})).await;
    });
    (
        sink(units, Arc::clone(wire)),
        stream(outbound, meter, Arc::clone(wire)),
    )
}

/// What the client writes, as the units a WebSocket reader would make.
fn sink(units: mpsc::Sender<Unit>, wire: Arc<Wire>) -> ClientSink {
    let sink = futures_util::sink::unfold(
        (units, wire),
        |(units, wire), message: Message| async move {
            let unit = match message {
                Message::Text(text) => {
                    wire.sent(&text);
                    Unit::Text(text.as_str().to_owned())
                }
                Message::Binary(bytes) => Unit::Binary(bytes),
                Message::Ping(_) | Message::Pong(_) => Unit::Activity,
                Message::Close(_) | Message::Frame(_) => return Err(Closed),
            };
            units.send(unit).await.map_err(|_| Closed)?;
            Ok((units, wire))
        },
    );
    Box::pin(sink)
}

/// What the driver hands its writer, as the messages a WebSocket would
/// carry; ends at the `Close` frame. Each envelope counts as written once
/// taken, as a socket writer counts it.
fn stream(frames: FrameReceiver, meter: Arc<WriteMeter>, wire: Arc<Wire>) -> ClientStream {
    let reading = Reading {
        frames,
        meter,
        _closes: Closes(Arc::clone(&wire)),
        wire,
    };
    let stream = futures_util::stream::unfold(Some(reading), |state| async move {
        let mut reading = state?;
        loop {
            let Some(frame) = reading.frames.recv().await else {
                reading.wire.closed(0, "");
                return None;
            };
            match frame {
                Frame::Envelope(bytes) => {
                    reading.meter.written(bytes.len());
                    reading.wire.received(&bytes);
                    // The session commits UTF-8 JSON only.
                    let Ok(text) = Utf8Bytes::try_from(bytes) else {
                        continue;
                    };
                    return Some((Ok(Message::Text(text)), Some(reading)));
                }
                Frame::KeepAlive => continue,
                Frame::Close { code, reason } => {
                    reading.wire.closed(code, reason);
                    return None;
                }
            }
        }
    });
    Box::pin(stream)
}

/// The reading end of the connection, for the client's reader task.
struct Reading {
    frames: FrameReceiver,
    meter: Arc<WriteMeter>,
    wire: Arc<Wire>,
    _closes: Closes,
}

/// Marks the connection closed when its reader goes without a `Close`
/// frame (a client dropped before the server closed).
struct Closes(Arc<Wire>);

impl Drop for Closes {
    fn drop(&mut self) {
        self.0.closed(0, "");
    }
}

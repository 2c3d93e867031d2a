//! The client's connection: a writer task, a reader task routing envelopes to
//! whoever waits for them (requests in order, calls by `call_id`, answers to
//! questions by the id of their `TOOL_INPUT`).
//!
//! Envelopes are read with the protocol's own decoder and payloads through
//! the typed payloads of [`crate::protocol::payload`], written the same way.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::{
    CallEvent, ClientError, ClientOptions, LogLine, Outcome, Question, Response, Update, Violation,
};
use crate::protocol::payload::{
    self, Capabilities, Hai, Payload, Ping, ToolDone, ToolInput, ToolUpdate, UpdateStatus,
};
use crate::protocol::{Channel, EventType, Inbound, decode};

mod route;
#[cfg(test)]
mod tests;

use route::{close_all, route, server_error};

/// Where a call's envelopes go.
pub(super) struct Waiter {
    pub(super) inbox: Arc<Inbox>,
    pub(super) done: oneshot::Sender<Result<Outcome, ClientError>>,
}

/// Where the payload of a request's reply goes.
type Reply = oneshot::Sender<Result<Map<String, Value>, ClientError>>;

/// A `TOOL_INPUT` waiting for the server's verdict.
struct PendingAnswer {
    /// The `TOOL_INPUT` envelope's id: an `ERROR` about it has this `related_id`.
    id: String,
    call_id: String,
    request_id: String,
    reply: oneshot::Sender<Result<(), ClientError>>,
}

#[derive(Default)]
struct Routes {
    /// `TOOL_LIST` / `TOOL_SCHEMA` requests, answered in request order.
    requests: VecDeque<(String, Reply)>,
    calls: HashMap<String, Waiter>,
    /// Answers to questions, in the order they were sent: the server handles
    /// them in that order, so a call's next `RUNNING` is the verdict of its
    /// oldest one.
    answers: VecDeque<PendingAnswer>,
    closed: bool,
}

/// Unread events beyond which progress updates are dropped: the server
/// already merges progress under back-pressure, and a slow reader loses
/// intermediate progress only.
const PROGRESS_BUFFER: usize = 64;

/// Unread events beyond which everything but questions is dropped (a reader
/// this far behind is not reading).
const EVENT_BUFFER: usize = 4096;

/// A call's events, queued by the reader task until the [`super::Call`] reads them.
#[derive(Debug, Default)]
pub(super) struct Inbox {
    state: Mutex<InboxState>,
    /// Wakes the one reader; `notify_one` keeps a permit when it is not waiting.
    notify: Notify,
}

#[derive(Debug, Default)]
struct InboxState {
    events: VecDeque<CallEvent>,
    /// The call ended: once `events` is empty, there is nothing more.
    ended: bool,
    /// Nobody will read: queue nothing.
    reader_gone: bool,
}

impl Inbox {
    fn state(&self) -> std::sync::MutexGuard<'_, InboxState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, event: CallEvent) {
        {
            let mut state = self.state();
            if state.ended || state.reader_gone {
                return;
            }
            let unread = state.events.len();
            let keep = match &event {
                CallEvent::Question(_) | CallEvent::UnreadableQuestion(_) => true,
                CallEvent::Update(u) if u.progress.is_some() || u.partial.is_some() => {
                    unread < PROGRESS_BUFFER
                }
                _ => unread < EVENT_BUFFER,
            };
            if !keep {
                return;
            }
            state.events.push_back(event);
        }
        self.notify.notify_one();
    }

    fn end(&self) {
        self.state().ended = true;
        self.notify.notify_one();
    }
}

/// The reading side of a call's [`Inbox`]; dropping it stops the queueing.
#[derive(Debug)]
pub(super) struct EventReader(Arc<Inbox>);

impl EventReader {
    pub(super) fn new(inbox: Arc<Inbox>) -> EventReader {
        EventReader(inbox)
    }

    /// The next event; `None` once the call ended and everything was read.
    /// Cancel-safe: events are taken only when returned.
    pub(super) async fn next(&self) -> Option<CallEvent> {
        loop {
            {
                let mut state = self.0.state();
                if let Some(event) = state.events.pop_front() {
                    return Some(event);
                }
                if state.ended {
                    return None;
                }
            }
            // A push between the check and here left a permit: no wake-up is lost.
            self.0.notify.notified().await;
        }
    }
}

impl Drop for EventReader {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.reader_gone = true;
        state.events.clear();
    }
}

pub(super) struct Connection {
    session_id: String,
    /// The server's `HAI` payload, as sent and typed.
    hai: Value,
    hai_typed: Hai,
    outgoing: mpsc::Sender<Message>,
    routes: Arc<Mutex<Routes>>,
    /// Serialises "queue the waiter, then send", so replies match requests.
    send_order: tokio::sync::Mutex<()>,
    /// How long an answer waits for its verdict.
    answer_timeout: Duration,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Connection {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Messages queued for the writer.
const OUTGOING: usize = 256;

fn lock(routes: &Mutex<Routes>) -> std::sync::MutexGuard<'_, Routes> {
    routes.lock().unwrap_or_else(|e| e.into_inner())
}

/// A client envelope: `id`, `type`, `channel` and the payload. The server
/// needs nothing else (docs/protocol.md §2.1).
#[derive(Serialize)]
struct Envelope<'a, P> {
    id: &'a str,
    #[serde(rename = "type")]
    event: &'static str,
    channel: &'static str,
    payload: &'a P,
}

/// A text message carrying `payload`, encoded strictly, without building a `Value`.
fn message<P: Payload>(id: &str, channel: Channel, payload: &P) -> Message {
    let envelope = Envelope {
        id,
        event: P::EVENT.as_str(),
        channel: channel.as_str(),
        payload,
    };
    // The payload types serialise only string-keyed maps: this cannot fail.
    Message::text(serde_json::to_string(&envelope).unwrap_or_default())
}

/// The client's `HAI`: the capabilities of the options, and every event
/// type but `TOOL_LIST` in `accept_events`, so that a server with
/// `advertise_tools` on pushes no unsolicited `TOOL_LIST` that would be
/// taken for the reply to a request (docs/protocol.md §3.3, §6.2).
fn client_hai(options: &ClientOptions) -> Hai {
    let capabilities = Capabilities {
        tool_input: options.tool_input.then_some(true),
        log_level: Some(options.log_level.as_str().to_owned()),
        ..Capabilities::default()
    };
    Hai {
        accept_events: Some(
            EventType::ALL
                .iter()
                .filter(|e| **e != EventType::ToolList)
                .map(|e| e.as_str().to_owned())
                .collect(),
        ),
        capabilities: Some(capabilities),
        ..Hai::new()
    }
}

fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A reply the client cannot read.
fn protocol_error(e: payload::PayloadError) -> ClientError {
    ClientError::Protocol(e.to_string())
}

impl Connection {
    pub(super) async fn open(url: &str, options: ClientOptions) -> Result<Connection, ClientError> {
        let invalid = |reason: &str| ClientError::InvalidUrl {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        if !(url.starts_with("ws://") || url.starts_with("wss://")) {
            return Err(invalid("expected ws://host:port/path"));
        }
        let mut request = url
            .into_client_request()
            .map_err(|e| invalid(&e.to_string()))?;
        if let Some(token) = &options.token {
            let value = format!("Bearer {token}")
                .parse()
                .map_err(|_| invalid("the token is not a valid header value"))?;
            request.headers_mut().insert("authorization", value);
        }
        let (ws, _) = tokio_tungstenite::connect_async(request)
            .await
            .map_err(|e| ClientError::Connect {
                url: url.to_owned(),
                reason: e.to_string(),
            })?;
        let (sink, stream) = ws.split();
        Connection::over(sink, stream, url, options).await
    }

    /// A connection over any carrier of WebSocket messages: a socket's two
    /// halves, or an in-memory pair (`haip::testing`). `url` names the
    /// carrier in errors.
    pub(super) async fn over<Si, St, E>(
        mut sink: Si,
        mut stream: St,
        url: &str,
        options: ClientOptions,
    ) -> Result<Connection, ClientError>
    where
        Si: futures_util::Sink<Message> + Unpin + Send + 'static,
        St: futures_util::Stream<Item = Result<Message, E>> + Unpin + Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        // The server speaks first: its HAI, or an ERROR (authentication) and close.
        let hai = loop {
            match stream.next().await {
                Some(Ok(Message::Text(text))) => {
                    let inbound = decode(&text).map_err(|e| {
                        ClientError::Protocol(format!("first message is not an envelope: {e}"))
                    })?;
                    match inbound.event {
                        EventType::Hai => break inbound,
                        EventType::Error => {
                            return Err(payload::Error::from_payload(inbound.payload)
                                .map_or_else(protocol_error, server_error));
                        }
                        _ => {
                            return Err(ClientError::Protocol(format!(
                                "expected HAI first, got {}",
                                text.as_str()
                            )));
                        }
                    }
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    return Err(ClientError::Connect {
                        url: url.to_owned(),
                        reason: e.to_string(),
                    });
                }
                None => return Err(ClientError::Closed),
            }
        };
        let Inbound {
            session, payload, ..
        } = hai;
        let hai = Value::Object(payload.clone());
        let hai_typed = Hai::from_payload(payload).map_err(protocol_error)?;
        let routes = Arc::new(Mutex::new(Routes::default()));
        let (outgoing, mut queued) = mpsc::channel::<Message>(OUTGOING);
        let writer = tokio::spawn(async move {
            while let Some(message) = queued.recv().await {
                if sink.feed(message).await.is_err() {
                    return;
                }
                while let Ok(more) = queued.try_recv() {
                    if sink.feed(more).await.is_err() {
                        return;
                    }
                }
                if sink.flush().await.is_err() {
                    return;
                }
            }
        });
        let reader = {
            let routes = Arc::clone(&routes);
            let outgoing = outgoing.clone();
            tokio::spawn(async move {
                while let Some(Ok(message)) = stream.next().await {
                    // Anything that is not a HAIP envelope is not for us.
                    if let Message::Text(text) = message
                        && let Ok(inbound) = decode(&text)
                    {
                        route(&routes, &outgoing, inbound);
                    }
                }
                close_all(&routes);
            })
        };
        let connection = Connection {
            session_id: session.unwrap_or_default(),
            hai,
            hai_typed,
            outgoing,
            routes,
            send_order: tokio::sync::Mutex::new(()),
            answer_timeout: options.answer_timeout,
            tasks: [writer, reader],
        };
        // Queued before anything else the client sends, so the server knows
        // the capabilities before the first call (docs/protocol.md §3.2).
        connection
            .send(Channel::System, &client_hai(&options))
            .await?;
        Ok(connection)
    }

    pub(super) fn session_id(&self) -> &str {
        &self.session_id
    }

    pub(super) fn hai(&self) -> &Value {
        &self.hai
    }

    pub(super) fn hai_typed(&self) -> &Hai {
        &self.hai_typed
    }

    /// Sends an envelope nobody waits a reply for.
    pub(super) async fn send<P: Payload>(
        &self,
        channel: Channel,
        payload: &P,
    ) -> Result<(), ClientError> {
        self.outgoing
            .send(message(&new_id(), channel, payload))
            .await
            .map_err(|_| ClientError::Closed)
    }

    /// Sends a request answered in order (`TOOL_LIST`, `TOOL_SCHEMA`);
    /// returns the reply's payload.
    pub(super) async fn request<P: Payload>(
        &self,
        payload: &P,
    ) -> Result<Map<String, Value>, ClientError> {
        let id = new_id();
        let text = message(&id, Channel::User, payload);
        let (reply, answer) = oneshot::channel();
        {
            let _order = self.send_order.lock().await;
            {
                let mut routes = lock(&self.routes);
                if routes.closed {
                    return Err(ClientError::Closed);
                }
                routes.requests.push_back((id, reply));
            }
            self.outgoing
                .send(text)
                .await
                .map_err(|_| ClientError::Closed)?;
        }
        answer.await.unwrap_or(Err(ClientError::Closed))
    }

    pub(super) fn register_call(&self, call_id: &str, waiter: Waiter) {
        let mut routes = lock(&self.routes);
        if routes.closed {
            let _ = waiter.done.send(Err(ClientError::Closed));
        } else {
            routes.calls.insert(call_id.to_owned(), waiter);
        }
    }

    pub(super) fn forget_call(&self, call_id: &str) {
        lock(&self.routes).calls.remove(call_id);
    }

    /// Sends a `TOOL_INPUT` and waits for its verdict (see
    /// [`super::Call::respond`]), at most the answer timeout.
    pub(super) async fn respond(
        &self,
        call_id: &str,
        request_id: &str,
        response: Response,
    ) -> Result<(), ClientError> {
        let id = new_id();
        let action = response.action();
        let payload = ToolInput {
            call_id: call_id.to_owned(),
            request_id: request_id.to_owned(),
            action,
            content: match response {
                Response::Accept(content) => Some(content),
                Response::Decline | Response::Cancel => None,
            },
        };
        let text = message(&id, Channel::User, &payload);
        let (reply, verdict) = oneshot::channel();
        // However this ends (verdict, timeout, the caller giving up), the
        // pending answer goes.
        let _pending = Forget {
            routes: &self.routes,
            id: &id,
        };
        let exchange = async {
            {
                let _order = self.send_order.lock().await;
                {
                    let mut routes = lock(&self.routes);
                    if routes.closed {
                        return Err(ClientError::Closed);
                    }
                    routes.answers.push_back(PendingAnswer {
                        id: id.clone(),
                        call_id: call_id.to_owned(),
                        request_id: request_id.to_owned(),
                        reply,
                    });
                }
                self.outgoing
                    .send(text)
                    .await
                    .map_err(|_| ClientError::Closed)?;
            }
            verdict.await.unwrap_or(Err(ClientError::Closed))
        };
        match tokio::time::timeout(self.answer_timeout, exchange).await {
            Ok(verdict) => verdict,
            Err(_) => Err(ClientError::Timeout {
                what: format!("the verdict on the answer to question {request_id}"),
                after: self.answer_timeout,
            }),
        }
    }
}

/// Removes a pending answer when dropped.
struct Forget<'a> {
    routes: &'a Mutex<Routes>,
    id: &'a str,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        let mut routes = lock(self.routes);
        if let Some(at) = routes.answers.iter().position(|a| a.id == self.id) {
            routes.answers.remove(at);
        }
    }
}

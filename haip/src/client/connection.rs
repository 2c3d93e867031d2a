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
/// needs nothing else (HAIP.md §2.1).
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
/// taken for the reply to a request (HAIP.md §3.3, §6.2).
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
        let (mut sink, mut stream) = ws.split();
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
        // the capabilities before the first call (HAIP.md §3.2).
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

fn server_error(error: payload::Error) -> ClientError {
    ClientError::Server {
        code: error.code.as_str().to_owned(),
        message: error.message,
    }
}

/// The error an `ERROR` about a `TOOL_INPUT` means.
fn answer_error(error: payload::Error, pending: &PendingAnswer) -> ClientError {
    match error.code.as_str() {
        "INVALID_PARAMS" => ClientError::InvalidAnswer {
            violations: error
                .detail
                .as_ref()
                .and_then(|d| d.get("violations"))
                .and_then(Value::as_array)
                .map(|list| list.iter().map(violation).collect())
                .unwrap_or_default(),
            message: error.message,
        },
        "REQUEST_NOT_FOUND" => ClientError::QuestionNotFound {
            call_id: pending.call_id.clone(),
            request_id: pending.request_id.clone(),
        },
        _ => server_error(error),
    }
}

/// One `detail.violations` element, read leniently.
fn violation(entry: &Value) -> Violation {
    let text = |key: &str| match entry.get(key) {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    Violation {
        path: text("path").unwrap_or_default(),
        message: text("message").unwrap_or_else(|| entry.to_string()),
    }
}

/// A `log` object as a [`LogLine`], read leniently: a missing level is
/// `info`, a message that is not text is shown as JSON.
fn log_line(log: Value) -> LogLine {
    let Value::Object(mut log) = log else {
        return LogLine {
            level: "info".to_owned(),
            message: log.to_string(),
            data: None,
        };
    };
    LogLine {
        level: match log.remove("level") {
            Some(Value::String(level)) => level,
            _ => "info".to_owned(),
        },
        message: match log.remove("message") {
            Some(Value::String(message)) => message,
            None | Some(Value::Null) => String::new(),
            Some(other) => other.to_string(),
        },
        data: log.remove("data").filter(|d| !d.is_null()),
    }
}

/// An `input_request` as a question; one that cannot be answered (no
/// `request_id`) says why. The schema is kept as sent: reading its fields is
/// [`Question::fields`]'s job, and its error.
fn question(request: Value) -> CallEvent {
    let Value::Object(mut request) = request else {
        return CallEvent::UnreadableQuestion(format!("input_request is not an object: {request}"));
    };
    let request_id = match request.remove("request_id") {
        Some(Value::String(id)) => id,
        Some(Value::Number(n)) => n.to_string(),
        _ => {
            return CallEvent::UnreadableQuestion(
                "input_request has no request_id: it cannot be answered".to_owned(),
            );
        }
    };
    CallEvent::Question(Question {
        request_id,
        message: match request.remove("message") {
            Some(Value::String(message)) => message,
            None | Some(Value::Null) => String::new(),
            Some(other) => other.to_string(),
        },
        schema: request.remove("schema").unwrap_or(Value::Null),
    })
}

/// Takes the oldest pending answer of `call_id`: the server handles answers
/// in the order they were sent, and follows each it takes with a `RUNNING`.
fn answer_taken(routes: &mut Routes, call_id: &str) {
    if let Some(at) = routes.answers.iter().position(|a| a.call_id == call_id)
        && let Some(pending) = routes.answers.remove(at)
    {
        let _ = pending.reply.send(Ok(()));
    }
}

/// Hands one envelope to whoever waits for it.
fn route(routes: &Mutex<Routes>, outgoing: &mpsc::Sender<Message>, inbound: Inbound) {
    let Inbound { event, payload, .. } = inbound;
    match event {
        EventType::ToolUpdate => {
            // `log` and `input_request` are taken as sent, before the typed
            // decoder (which keeps only objects): a malformed question must
            // still reach its call, as an UnreadableQuestion.
            let mut payload = payload;
            let log = payload.remove("log");
            let input_request = payload.remove("input_request");
            let talks = log.is_some() || input_request.is_some();
            // An update that cannot be read is progress lost, nothing more:
            // the call still ends with its TOOL_DONE. A log line or a
            // question needs only its call id.
            let (call_id, update) = match ToolUpdate::from_payload(payload) {
                Ok(update) => (update.call_id.clone(), Some(update)),
                Err(e) => match e.call_id {
                    Some(call_id) if talks => (call_id, None),
                    _ => return,
                },
            };
            let mut verdict = false;
            let event = match (input_request, log, update) {
                (Some(request), _, _) => question(request),
                (None, Some(log), _) => CallEvent::Log(log_line(log)),
                (None, None, Some(update)) => {
                    if update.status == UpdateStatus::WaitingInput {
                        CallEvent::UnreadableQuestion(
                            "WAITING_INPUT without an input_request".to_owned(),
                        )
                    } else {
                        // A plain RUNNING (not progress) is what the server
                        // sends after taking an answer (HAIP.md §6.11).
                        verdict = update.status == UpdateStatus::Running
                            && update.progress.is_none()
                            && update.partial.is_none();
                        CallEvent::Update(Update {
                            status: update.status.as_str().to_owned(),
                            progress: update.progress.and_then(|p| p.as_f64()),
                            partial: update.partial,
                        })
                    }
                }
                (None, None, None) => return,
            };
            let mut routes = lock(routes);
            if verdict {
                answer_taken(&mut routes, &call_id);
            }
            if let Some(waiter) = routes.calls.get(&call_id) {
                waiter.inbox.push(event);
            }
        }
        EventType::ToolDone => {
            // A TOOL_DONE that cannot be read still ends its call, as an error.
            let (call_id, outcome) = match ToolDone::from_payload(payload) {
                Ok(done) => (done.call_id, Ok(Outcome::from(done.outcome))),
                Err(e) => match e.call_id.clone() {
                    Some(call_id) => (call_id, Err(protocol_error(e))),
                    None => return,
                },
            };
            // Answers still pending are not settled here: an answer the
            // server took had its RUNNING before this TOOL_DONE (HAIP.md
            // §6.9), so a pending one was sent after the call ended, or is
            // not handled yet; either way its verdict is an ERROR
            // (REQUEST_NOT_FOUND) still on its way.
            let mut routes = lock(routes);
            if let Some(waiter) = routes.calls.remove(&call_id) {
                waiter.inbox.end();
                let _ = waiter.done.send(outcome);
            }
        }
        EventType::ToolList | EventType::ToolSchema => {
            if let Some((_, reply)) = lock(routes).requests.pop_front() {
                let _ = reply.send(Ok(payload));
            }
        }
        EventType::Error => {
            let Ok(error) = payload::Error::from_payload(payload) else {
                return;
            };
            let mut routes = lock(routes);
            if let Some(related) = &error.related_id
                && let Some(at) = routes.answers.iter().position(|a| a.id == *related)
                && let Some(pending) = routes.answers.remove(at)
            {
                let err = answer_error(error, &pending);
                let _ = pending.reply.send(Err(err));
                return;
            }
            let front = routes.requests.front().map(|(id, _)| id.as_str());
            if error.related_id.is_some()
                && error.related_id.as_deref() == front
                && let Some((_, reply)) = routes.requests.pop_front()
            {
                let _ = reply.send(Err(server_error(error)));
            }
        }
        EventType::Ping => {
            if let Ok(ping) = Ping::from_payload(payload) {
                let _ = outgoing.try_send(message(&new_id(), Channel::System, &ping.pong()));
            }
        }
        _ => {}
    }
}

/// The connection is gone: everyone still waiting learns it.
fn close_all(routes: &Mutex<Routes>) {
    let mut routes = lock(routes);
    routes.closed = true;
    for (_, reply) in routes.requests.drain(..) {
        let _ = reply.send(Err(ClientError::Closed));
    }
    for (_, waiter) in routes.calls.drain() {
        waiter.inbox.end();
        let _ = waiter.done.send(Err(ClientError::Closed));
    }
    for pending in routes.answers.drain(..) {
        let _ = pending.reply.send(Err(ClientError::Closed));
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;
    use serde_json::json;

    use super::*;
    use crate::protocol::payload::ToolCall;

    /// The next event, if one is queued (or `Some(None)` once ended).
    fn try_next(events: &EventReader) -> Option<Option<CallEvent>> {
        events.next().now_or_never()
    }

    fn next_update(events: &EventReader) -> Option<Update> {
        match try_next(events) {
            Some(Some(CallEvent::Update(update))) => Some(update),
            _ => None,
        }
    }

    struct Harness {
        routes: Mutex<Routes>,
        outgoing: mpsc::Sender<Message>,
        sent: mpsc::Receiver<Message>,
    }

    impl Harness {
        fn new() -> Harness {
            let (outgoing, sent) = mpsc::channel(8);
            Harness {
                routes: Mutex::new(Routes::default()),
                outgoing,
                sent,
            }
        }

        fn receive(&self, envelope: Value) {
            route(
                &self.routes,
                &self.outgoing,
                decode(&envelope.to_string()).unwrap(),
            );
        }

        fn call(
            &self,
            call_id: &str,
        ) -> (EventReader, oneshot::Receiver<Result<Outcome, ClientError>>) {
            let inbox = Arc::new(Inbox::default());
            let (done, done_rx) = oneshot::channel();
            lock(&self.routes).calls.insert(
                call_id.to_owned(),
                Waiter {
                    inbox: Arc::clone(&inbox),
                    done,
                },
            );
            (EventReader::new(inbox), done_rx)
        }

        /// An answer sent with envelope id `id`, waiting for its verdict.
        fn answer(&self, id: &str, call_id: &str) -> oneshot::Receiver<Result<(), ClientError>> {
            let (reply, verdict) = oneshot::channel();
            lock(&self.routes).answers.push_back(PendingAnswer {
                id: id.to_owned(),
                call_id: call_id.to_owned(),
                request_id: format!("r-{id}"),
                reply,
            });
            verdict
        }

        fn request(&self, id: &str) -> oneshot::Receiver<Result<Map<String, Value>, ClientError>> {
            let (reply, answer) = oneshot::channel();
            lock(&self.routes)
                .requests
                .push_back((id.to_owned(), reply));
            answer
        }
    }

    #[test]
    fn updates_and_outcomes_reach_their_call() {
        let h = Harness::new();
        let (updates, mut done) = h.call("c-1");
        h.receive(json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-1", "status": "RUNNING", "progress": 40, "partial": {"rows": 4}}}));
        // Unreadable updates are dropped; updates of other calls are not ours.
        h.receive(json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-1"}}));
        h.receive(
            json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-2", "status": "RUNNING"}}),
        );
        assert_eq!(
            next_update(&updates).unwrap(),
            Update {
                status: "RUNNING".into(),
                progress: Some(40.0),
                partial: Some(json!({"rows": 4})),
            }
        );
        assert!(try_next(&updates).is_none(), "nothing more yet");
        h.receive(json!({"type": "TOOL_DONE", "payload": {"call_id": "c-1", "status": "ERROR",
            "result": {"error": "Invalid params for tool add", "code": "INVALID_PARAMS", "details": [{"path": "/a"}], "total": 1}}}));
        assert_eq!(
            done.try_recv().unwrap().unwrap(),
            Outcome::Error {
                code: "INVALID_PARAMS".into(),
                message: "Invalid params for tool add".into(),
                details: Some(json!([{"path": "/a"}])),
            }
        );
        assert_eq!(try_next(&updates), Some(None), "the call's events end");
        let (_, mut done) = h.call("7");
        // No status: OK; a numeric call id is its text.
        h.receive(json!({"type": "TOOL_DONE", "payload": {"call_id": 7, "result": 3}}));
        assert_eq!(
            done.try_recv().unwrap().unwrap(),
            Outcome::Ok(Some(json!(3)))
        );
        let (_, mut done) = h.call("c-3");
        h.receive(json!({"type": "TOOL_DONE", "payload": {"call_id": "c-3", "status": "CANCELLED", "result": {"reason": "enough"}}}));
        assert_eq!(
            done.try_recv().unwrap().unwrap(),
            Outcome::Cancelled(Some("enough".into()))
        );
    }

    #[test]
    fn an_unreadable_tool_done_still_ends_its_call() {
        let h = Harness::new();
        let (_, mut done) = h.call("c-1");
        h.receive(json!({"type": "TOOL_DONE", "payload": {"call_id": "c-1", "status": "FAILED"}}));
        let err = done.try_recv().unwrap().unwrap_err();
        assert!(
            matches!(&err, ClientError::Protocol(text) if text.contains("payload.status")),
            "{err}"
        );
        assert!(lock(&h.routes).calls.is_empty());
    }

    #[test]
    fn replies_and_errors_answer_requests_in_order() {
        let h = Harness::new();
        let mut first = h.request("r-1");
        let mut second = h.request("r-2");
        // An ERROR about something else is not an answer.
        h.receive(json!({"type": "ERROR", "payload": {"code": "X", "message": "m", "related_id": "other"}}));
        h.receive(json!({"type": "TOOL_LIST", "payload": {"tools": []}}));
        assert_eq!(
            Value::Object(first.try_recv().unwrap().unwrap()),
            json!({"tools": []})
        );
        h.receive(json!({"type": "ERROR", "payload": {"code": "TOOL_NOT_FOUND", "message": "Tool nope not found", "related_id": "r-2"}}));
        let err = second.try_recv().unwrap().unwrap_err();
        assert!(
            matches!(&err, ClientError::Server { code, message } if code == "TOOL_NOT_FOUND" && message == "Tool nope not found"),
            "{err}"
        );
    }

    #[test]
    fn pings_are_answered_with_the_same_nonce() {
        let mut h = Harness::new();
        h.receive(json!({"type": "PING", "payload": {"nonce": "n-1"}}));
        h.receive(json!({"type": "PING", "payload": {}}));
        for expected in [json!({"nonce": "n-1"}), json!({})] {
            let Message::Text(text) = h.sent.try_recv().unwrap() else {
                panic!("a text message")
            };
            let pong: Value = serde_json::from_str(text.as_str()).unwrap();
            assert_eq!(
                (&pong["type"], &pong["channel"], &pong["payload"]),
                (&json!("PONG"), &json!("SYSTEM"), &expected)
            );
            assert!(uuid::Uuid::parse_str(pong["id"].as_str().unwrap()).is_ok());
        }
    }

    #[test]
    fn requests_are_written_strictly() {
        let call = ToolCall::new("c-1", "echo", json!({"message": "hi"}));
        let Message::Text(text) = message("e-1", Channel::User, &call) else {
            panic!("a text message")
        };
        assert_eq!(
            text.as_str(),
            r#"{"id":"e-1","type":"TOOL_CALL","channel":"USER","payload":{"call_id":"c-1","tool":"echo","params":{"message":"hi"}}}"#
        );
    }

    #[test]
    fn log_lines_and_questions_reach_their_call_in_order() {
        let h = Harness::new();
        let (events, _done) = h.call("c-1");
        h.receive(
            json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-1", "status": "RUNNING",
            "log": {"level": "info", "message": "checking availability at Luigi"}}}),
        );
        h.receive(json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-1", "status": "WAITING_INPUT",
            "input_request": {"request_id": "q-1", "message": "How many?", "schema": {"type": "object"}}}}));
        // Lenient: a log line with data and no level, a question without a
        // message or a readable status.
        h.receive(
            json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-1", "status": "RUNNING",
            "log": {"message": {"n": 1}, "data": [1]}}}),
        );
        h.receive(
            json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-1", "status": 5,
            "input_request": {"request_id": 7}}}),
        );
        assert_eq!(
            try_next(&events),
            Some(Some(CallEvent::Log(LogLine {
                level: "info".into(),
                message: "checking availability at Luigi".into(),
                data: None,
            })))
        );
        assert_eq!(
            try_next(&events),
            Some(Some(CallEvent::Question(Question {
                request_id: "q-1".into(),
                message: "How many?".into(),
                schema: json!({"type": "object"}),
            })))
        );
        assert_eq!(
            try_next(&events),
            Some(Some(CallEvent::Log(LogLine {
                level: "info".into(),
                message: r#"{"n":1}"#.into(),
                data: Some(json!([1])),
            })))
        );
        assert_eq!(
            try_next(&events),
            Some(Some(CallEvent::Question(Question {
                request_id: "7".into(),
                message: String::new(),
                schema: Value::Null,
            })))
        );
        // Questions that cannot be answered say why, and never panic.
        for bad in [
            json!({"call_id": "c-1", "status": "WAITING_INPUT", "input_request": {"message": "m"}}),
            json!({"call_id": "c-1", "status": "WAITING_INPUT", "input_request": "what?"}),
            json!({"call_id": "c-1", "status": "WAITING_INPUT"}),
        ] {
            h.receive(json!({"type": "TOOL_UPDATE", "payload": bad}));
            assert!(
                matches!(
                    try_next(&events),
                    Some(Some(CallEvent::UnreadableQuestion(_)))
                ),
                "{bad}"
            );
        }
        // Without a call id nothing can be routed.
        h.receive(json!({"type": "TOOL_UPDATE", "payload": {"log": {"message": "m"}}}));
        assert!(try_next(&events).is_none());
    }

    #[test]
    fn a_slow_reader_loses_progress_first_and_never_questions() {
        let h = Harness::new();
        let (events, _done) = h.call("c-1");
        for n in 0..100 {
            h.receive(json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-1", "status": "RUNNING", "progress": n}}));
        }
        h.receive(json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-1", "status": "RUNNING", "log": {"message": "kept"}}}));
        h.receive(
            json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-1", "status": "WAITING_INPUT",
            "input_request": {"request_id": "q", "message": "m", "schema": {}}}}),
        );
        let mut read = Vec::new();
        while let Some(Some(event)) = try_next(&events) {
            read.push(event);
        }
        assert_eq!(read.len(), PROGRESS_BUFFER + 2);
        assert!(matches!(&read[PROGRESS_BUFFER], CallEvent::Log(l) if l.message == "kept"));
        assert!(matches!(&read[PROGRESS_BUFFER + 1], CallEvent::Question(_)));
        // A reader that is gone gets nothing queued.
        drop(events);
        h.receive(json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-1", "status": "RUNNING", "log": {"message": "m"}}}));
        let routes = lock(&h.routes);
        assert!(routes.calls["c-1"].inbox.state().events.is_empty());
    }

    #[test]
    fn answers_get_their_verdicts() {
        let h = Harness::new();
        let (events, mut done) = h.call("c-1");
        // Taken: the next plain RUNNING of the call settles its oldest answer;
        // progress and log lines do not.
        let mut first = h.answer("a-1", "c-1");
        let mut second = h.answer("a-2", "c-1");
        let mut other = h.answer("a-3", "c-2");
        h.receive(json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-1", "status": "RUNNING", "progress": 5}}));
        h.receive(json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-1", "status": "RUNNING", "log": {"message": "m"}}}));
        assert!(first.try_recv().is_err(), "no verdict yet");
        h.receive(
            json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-1", "status": "RUNNING"}}),
        );
        assert!(first.try_recv().unwrap().is_ok());
        assert!(second.try_recv().is_err() && other.try_recv().is_err());
        // The verdict's RUNNING is an event of the call too, after the others.
        let mut kinds = Vec::new();
        while let Some(Some(event)) = try_next(&events) {
            kinds.push(match event {
                CallEvent::Update(u) if u.progress.is_some() => "progress",
                CallEvent::Update(_) => "running",
                CallEvent::Log(_) => "log",
                _ => "other",
            });
        }
        assert_eq!(kinds, ["progress", "log", "running"]);
        // Refused: the violations, for the answer the ERROR is about.
        h.receive(json!({"type": "ERROR", "payload": {"code": "INVALID_PARAMS",
            "message": "Answer does not match the question's schema", "related_id": "a-2",
            "detail": {"call_id": "c-1", "request_id": "r-a-2", "violations": [
                {"path": "/party_size", "message": "13 is greater than the maximum of 12"}, "odd"], "total": 2}}}));
        let err = second.try_recv().unwrap().unwrap_err();
        let ClientError::InvalidAnswer {
            message,
            violations,
        } = &err
        else {
            panic!("{err}")
        };
        assert_eq!(message, "Answer does not match the question's schema");
        assert_eq!(
            violations,
            &[
                Violation {
                    path: "/party_size".into(),
                    message: "13 is greater than the maximum of 12".into()
                },
                Violation {
                    path: String::new(),
                    message: "\"odd\"".into()
                },
            ]
        );
        assert_eq!(
            err.to_string(),
            "the answer does not fit the question: /party_size: 13 is greater than the maximum of 12; (answer): \"odd\""
        );
        // Not open, and any other ERROR.
        let mut gone = h.answer("a-4", "c-1");
        let mut unsupported = h.answer("a-5", "c-1");
        h.receive(json!({"type": "ERROR", "payload": {"code": "REQUEST_NOT_FOUND", "message": "No open input request r-a-4", "related_id": "a-4"}}));
        h.receive(json!({"type": "ERROR", "payload": {"code": "UNSUPPORTED_TYPE", "message": "Unknown message type: TOOL_INPUT", "related_id": "a-5"}}));
        assert!(matches!(
            gone.try_recv().unwrap().unwrap_err(),
            ClientError::QuestionNotFound { call_id, request_id } if call_id == "c-1" && request_id == "r-a-4"
        ));
        assert!(matches!(
            unsupported.try_recv().unwrap().unwrap_err(),
            ClientError::Server { code, .. } if code == "UNSUPPORTED_TYPE"
        ));
        // The call's end is no verdict: an answer sent as the call ended
        // waits for its REQUEST_NOT_FOUND.
        let mut late = h.answer("a-6", "c-1");
        h.receive(json!({"type": "TOOL_DONE", "payload": {"call_id": "c-1", "status": "OK", "result": {"booked": true}}}));
        assert!(done.try_recv().unwrap().is_ok());
        assert!(late.try_recv().is_err(), "still waiting");
        h.receive(json!({"type": "ERROR", "payload": {"code": "REQUEST_NOT_FOUND", "message": "No open input request r-a-6", "related_id": "a-6"}}));
        assert!(matches!(
            late.try_recv().unwrap().unwrap_err(),
            ClientError::QuestionNotFound { .. }
        ));
        // The connection's end settles the rest.
        close_all(&h.routes);
        assert!(matches!(
            other.try_recv().unwrap().unwrap_err(),
            ClientError::Closed
        ));
        assert!(lock(&h.routes).answers.is_empty());
    }

    #[test]
    fn the_client_hai_declares_its_capabilities() {
        let hai = client_hai(&ClientOptions::default()).to_value();
        assert_eq!(hai["capabilities"], json!({"log_level": "info"}));
        let answering = client_hai(&ClientOptions::new().tool_input(true)).to_value();
        assert_eq!(
            answering["capabilities"],
            json!({"tool_input": true, "log_level": "info"})
        );
        assert_eq!(hai["haip_version"], "1.1.2");
        assert_eq!(hai["accept_major"], json!([1]));
        let events = hai["accept_events"].as_array().unwrap();
        assert_eq!(events.len(), EventType::ALL.len() - 1);
        assert!(
            !events.contains(&json!("TOOL_LIST")),
            "no unsolicited TOOL_LIST"
        );
        assert!(events.contains(&json!("TOOL_UPDATE")) && events.contains(&json!("PING")));
        let quiet = ClientOptions::new()
            .tool_input(false)
            .log_level(crate::LogLevel::Warning);
        assert_eq!(
            client_hai(&quiet).to_value()["capabilities"],
            json!({"log_level": "warning"})
        );
    }

    #[test]
    fn replies_to_questions_are_written_strictly() {
        let input = ToolInput {
            call_id: "c-1".into(),
            request_id: "q-1".into(),
            action: Response::Accept(Value::Null).action(),
            content: Some(json!({"party_size": 4})),
        };
        let Message::Text(text) = message("e-1", Channel::User, &input) else {
            panic!("a text message")
        };
        assert_eq!(
            text.as_str(),
            r#"{"id":"e-1","type":"TOOL_INPUT","channel":"USER","payload":{"call_id":"c-1","request_id":"q-1","action":"accept","content":{"party_size":4}}}"#
        );
        let decline = ToolInput {
            action: Response::Decline.action(),
            content: None,
            ..input
        };
        let Message::Text(text) = message("e-2", Channel::User, &decline) else {
            panic!("a text message")
        };
        assert!(
            text.as_str()
                .ends_with(r#""payload":{"call_id":"c-1","request_id":"q-1","action":"decline"}}"#)
        );
        assert_eq!(Response::Cancel.action().as_str(), "cancel");
    }
}

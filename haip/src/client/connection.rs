//! The client's connection: a writer task, a reader task routing envelopes to
//! whoever waits for them (requests in order, calls by `call_id`).
//!
//! Envelopes are read with the protocol's own decoder and payloads through
//! the typed payloads of [`crate::protocol::payload`], written the same way.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::{ClientError, ClientOptions, Outcome, Update};
use crate::protocol::payload::{self, Hai, Payload, Ping, ToolDone, ToolUpdate};
use crate::protocol::{Channel, EventType, Inbound, decode};

/// Where a call's envelopes go.
pub(super) struct Waiter {
    pub(super) updates: mpsc::Sender<Update>,
    pub(super) done: oneshot::Sender<Result<Outcome, ClientError>>,
}

/// Where the payload of a request's reply goes.
type Reply = oneshot::Sender<Result<Map<String, Value>, ClientError>>;

#[derive(Default)]
struct Routes {
    /// `TOOL_LIST` / `TOOL_SCHEMA` requests, answered in request order.
    requests: VecDeque<(String, Reply)>,
    calls: HashMap<String, Waiter>,
    closed: bool,
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
        Ok(Connection {
            session_id: session.unwrap_or_default(),
            hai,
            hai_typed,
            outgoing,
            routes,
            send_order: tokio::sync::Mutex::new(()),
            tasks: [writer, reader],
        })
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
}

fn server_error(error: payload::Error) -> ClientError {
    ClientError::Server {
        code: error.code.as_str().to_owned(),
        message: error.message,
    }
}

/// Hands one envelope to whoever waits for it.
fn route(routes: &Mutex<Routes>, outgoing: &mpsc::Sender<Message>, inbound: Inbound) {
    let Inbound { event, payload, .. } = inbound;
    match event {
        EventType::ToolUpdate => {
            // An update that cannot be read is progress lost, nothing more:
            // the call still ends with its TOOL_DONE.
            let Ok(update) = ToolUpdate::from_payload(payload) else {
                return;
            };
            if let Some(waiter) = lock(routes).calls.get(&update.call_id) {
                // A reader that falls behind loses intermediate updates only.
                let _ = waiter.updates.try_send(Update {
                    status: update.status.as_str().to_owned(),
                    progress: update.progress.and_then(|p| p.as_f64()),
                    partial: update.partial,
                });
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
            if let Some(waiter) = lock(routes).calls.remove(&call_id) {
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
        let _ = waiter.done.send(Err(ClientError::Closed));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::protocol::payload::ToolCall;

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
        ) -> (
            mpsc::Receiver<Update>,
            oneshot::Receiver<Result<Outcome, ClientError>>,
        ) {
            let (updates, updates_rx) = mpsc::channel(8);
            let (done, done_rx) = oneshot::channel();
            lock(&self.routes)
                .calls
                .insert(call_id.to_owned(), Waiter { updates, done });
            (updates_rx, done_rx)
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
        let (mut updates, mut done) = h.call("c-1");
        h.receive(json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-1", "status": "RUNNING", "progress": 40, "partial": {"rows": 4}}}));
        // Unreadable updates are dropped; updates of other calls are not ours.
        h.receive(json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-1"}}));
        h.receive(
            json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-2", "status": "RUNNING"}}),
        );
        assert_eq!(
            updates.try_recv().unwrap(),
            Update {
                status: "RUNNING".into(),
                progress: Some(40.0),
                partial: Some(json!({"rows": 4})),
            }
        );
        assert!(updates.try_recv().is_err());
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
}

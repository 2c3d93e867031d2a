//! The client's connection: a writer task, a reader task routing envelopes to
//! whoever waits for them (requests in order, calls by `call_id`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::{ClientError, ClientOptions, Outcome, Update};

/// Where a call's envelopes go.
pub(super) struct Waiter {
    pub(super) updates: mpsc::Sender<Update>,
    pub(super) done: oneshot::Sender<Result<Outcome, ClientError>>,
}

type Reply = oneshot::Sender<Result<Value, ClientError>>;

#[derive(Default)]
struct Routes {
    /// `TOOL_LIST` / `TOOL_SCHEMA` requests, answered in request order.
    requests: VecDeque<(String, Reply)>,
    calls: HashMap<String, Waiter>,
    closed: bool,
}

pub(super) struct Connection {
    session_id: String,
    hai: Value,
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
                    let envelope: Value = serde_json::from_str(&text).map_err(|e| {
                        ClientError::Protocol(format!("first message is not JSON: {e}"))
                    })?;
                    match envelope["type"].as_str() {
                        Some("HAI") => break envelope,
                        Some("ERROR") => return Err(server_error(&envelope["payload"])),
                        _ => {
                            return Err(ClientError::Protocol(format!(
                                "expected HAI first, got {envelope}"
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
        let session_id = hai["session"].as_str().unwrap_or_default().to_owned();
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
                    if let Message::Text(text) = message
                        && let Ok(envelope) = serde_json::from_str::<Value>(&text)
                    {
                        route(&routes, &outgoing, envelope);
                    }
                }
                close_all(&routes);
            })
        };
        Ok(Connection {
            session_id,
            hai: hai["payload"].clone(),
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

    fn envelope(id: &str, event: &str, channel: &str, payload: Value) -> Message {
        Message::text(
            json!({ "id": id, "type": event, "channel": channel, "payload": payload }).to_string(),
        )
    }

    /// Sends an envelope nobody waits a reply for.
    pub(super) async fn send(
        &self,
        event: &str,
        channel: &str,
        payload: Value,
    ) -> Result<(), ClientError> {
        let id = uuid::Uuid::new_v4().to_string();
        self.outgoing
            .send(Connection::envelope(&id, event, channel, payload))
            .await
            .map_err(|_| ClientError::Closed)
    }

    /// Sends a request answered in order (`TOOL_LIST`, `TOOL_SCHEMA`).
    pub(super) async fn request(&self, event: &str, payload: Value) -> Result<Value, ClientError> {
        let id = uuid::Uuid::new_v4().to_string();
        let (reply, answer) = oneshot::channel();
        {
            let _order = self.send_order.lock().await;
            {
                let mut routes = lock(&self.routes);
                if routes.closed {
                    return Err(ClientError::Closed);
                }
                routes.requests.push_back((id.clone(), reply));
            }
            self.outgoing
                .send(Connection::envelope(&id, event, "USER", payload))
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

fn server_error(payload: &Value) -> ClientError {
    ClientError::Server {
        code: payload["code"].as_str().unwrap_or("ERROR").to_owned(),
        message: payload["message"].as_str().unwrap_or_default().to_owned(),
    }
}

/// Hands one envelope to whoever waits for it.
fn route(routes: &Mutex<Routes>, outgoing: &mpsc::Sender<Message>, envelope: Value) {
    let payload = &envelope["payload"];
    let call_id = payload["call_id"].as_str();
    let mut routes = lock(routes);
    match envelope["type"].as_str().unwrap_or_default() {
        "TOOL_UPDATE" => {
            if let Some(waiter) = call_id.and_then(|id| routes.calls.get(id)) {
                // A reader that falls behind loses intermediate updates only.
                let _ = waiter.updates.try_send(Update {
                    status: payload["status"].as_str().unwrap_or_default().to_owned(),
                    progress: payload["progress"].as_f64(),
                    partial: payload.get("partial").cloned(),
                });
            }
        }
        "TOOL_DONE" => {
            if let Some(waiter) = call_id.and_then(|id| routes.calls.remove(id)) {
                let _ = waiter.done.send(Ok(Outcome::from_done(payload)));
            }
        }
        "TOOL_LIST" | "TOOL_SCHEMA" => {
            if let Some((_, reply)) = routes.requests.pop_front() {
                let _ = reply.send(Ok(payload.clone()));
            }
        }
        "ERROR" => {
            let related = payload["related_id"].as_str();
            let front = routes.requests.front().map(|(id, _)| id.as_str());
            if related.is_some()
                && related == front
                && let Some((_, reply)) = routes.requests.pop_front()
            {
                let _ = reply.send(Err(server_error(payload)));
            }
        }
        "PING" => {
            let pong = json!({ "type": "PONG", "channel": "SYSTEM", "payload": payload });
            let _ = outgoing.try_send(Message::text(pong.to_string()));
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

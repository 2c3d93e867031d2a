//! The reader side: each envelope from the server routed to whoever waits
//! for it (a request, a call, a question's answer), and everyone told when
//! the connection ends.

use super::*;

pub(super) fn server_error(error: payload::Error) -> ClientError {
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
pub(super) fn route(routes: &Mutex<Routes>, outgoing: &mpsc::Sender<Message>, inbound: Inbound) {
    let Inbound { event, payload, .. } = inbound;
    match event {
        EventType::ToolUpdate => tool_update(routes, payload),
        EventType::ToolDone => tool_done(routes, payload),
        EventType::ToolList | EventType::ToolSchema => {
            if let Some((_, reply)) = lock(routes).requests.pop_front() {
                let _ = reply.send(Ok(payload));
            }
        }
        EventType::Error => error(routes, payload),
        EventType::Ping => {
            if let Ok(ping) = Ping::from_payload(payload) {
                let _ = outgoing.try_send(message(&new_id(), Channel::System, &ping.pong()));
            }
        }
        _ => {}
    }
}

/// A `TOOL_UPDATE`: progress, a log line or a question, to its call; a
/// plain `RUNNING` also settles the answer the server took.
fn tool_update(routes: &Mutex<Routes>, mut payload: Map<String, Value>) {
    // `log` and `input_request` are taken as sent, before the typed
    // decoder (which keeps only objects): a malformed question must
    // still reach its call, as an UnreadableQuestion.
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
            // A plain RUNNING (not progress) is what the server
            // sends after taking an answer (docs/protocol.md §6.11).
            verdict = update.status == UpdateStatus::Running
                && update.progress.is_none()
                && update.partial.is_none();
            progress_event(update)
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

/// What an update with neither a log line nor a question means to its call.
fn progress_event(update: ToolUpdate) -> CallEvent {
    if update.status == UpdateStatus::WaitingInput {
        return CallEvent::UnreadableQuestion("WAITING_INPUT without an input_request".to_owned());
    }
    CallEvent::Update(Update {
        status: update.status.as_str().to_owned(),
        progress: update.progress.and_then(|p| p.as_f64()),
        partial: update.partial,
    })
}

/// A `TOOL_DONE` ends its call; one that cannot be read, as an error.
fn tool_done(routes: &Mutex<Routes>, payload: Map<String, Value>) {
    let (call_id, outcome) = match ToolDone::from_payload(payload) {
        Ok(done) => (done.call_id, Ok(Outcome::from(done.outcome))),
        Err(e) => match e.call_id.clone() {
            Some(call_id) => (call_id, Err(protocol_error(e))),
            None => return,
        },
    };
    // Answers still pending are not settled here: an answer the
    // server took had its RUNNING before this TOOL_DONE (docs/protocol.md
    // §6.9), so a pending one was sent after the call ended, or is
    // not handled yet; either way its verdict is an ERROR
    // (REQUEST_NOT_FOUND) still on its way.
    let mut routes = lock(routes);
    if let Some(waiter) = routes.calls.remove(&call_id) {
        waiter.inbox.end();
        let _ = waiter.done.send(outcome);
    }
}

/// An `ERROR` about a pending answer or the oldest pending request goes
/// to it; any other is dropped.
fn error(routes: &Mutex<Routes>, payload: Map<String, Value>) {
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

/// The connection is gone: everyone still waiting learns it.
pub(super) fn close_all(routes: &Mutex<Routes>) {
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

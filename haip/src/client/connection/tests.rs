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
    h.receive(json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-2", "status": "RUNNING"}}));
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
    h.receive(
        json!({"type": "ERROR", "payload": {"code": "X", "message": "m", "related_id": "other"}}),
    );
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
    h.receive(json!({"type": "TOOL_UPDATE", "payload": {"call_id": "c-1", "status": "RUNNING"}}));
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

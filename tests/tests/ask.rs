//! Tools that talk to people (docs/protocol.md §6.11, §6.12), over WebSocket, SSE and
//! HTTP streaming: the quickstart's `book_table` logs a line and asks a
//! question; it is answered, declined, answered wrongly then rightly,
//! cancelled and timed out while it waits, and asked of a client that cannot
//! answer. Log lines arrive in order, at the client's level, before the
//! `TOOL_DONE`; content blocks come back as `{"content": [...]}`.

use crate::conn;
use crate::support;

use std::time::Duration;

use conn::{Conn, Kind, per_transport};
use haip::{Content, Context, Limits, LogLevel, Rich, haip_tool};
use serde_json::{Value, json};
use support::{base_limits, demo_builder, resume_hai, start};

per_transport!(
    accepted_answer_books_the_table,
    declined_question_books_nothing,
    invalid_answer_is_refused_and_asked_again,
    cancel_while_waiting,
    timeout_while_waiting,
    client_without_the_capability_is_told,
    log_lines_in_order_at_the_clients_level,
    content_blocks_come_back_as_content,
);

/// Connects and declares `capabilities` in the client `HAI`.
async fn connect(kind: Kind, addr: std::net::SocketAddr, capabilities: Value) -> Conn {
    let mut conn = Conn::connect(kind, addr, None).await;
    conn.request(
        "HAI",
        json!({"haip_version": "1.1.2", "capabilities": capabilities}),
    )
    .await;
    conn
}

/// Calls `book_table` at Luigi's and reads up to its question: the log line,
/// then `WAITING_INPUT`. Returns the question's `request_id`.
async fn ask_for_a_table(conn: &mut Conn, call_id: &str) -> String {
    conn.call(call_id, "book_table", json!({"restaurant": "Luigi"}))
        .await;
    let log = conn.expect_update(call_id).await;
    assert_eq!(log["status"], "RUNNING", "{log}");
    assert_eq!(
        log["log"],
        json!({"level": "info", "message": "checking availability at Luigi"})
    );
    let asked = conn.expect_update(call_id).await;
    assert_eq!(asked["status"], "WAITING_INPUT", "{asked}");
    let request = &asked["input_request"];
    assert_eq!(request["message"], "How many people, and when?");
    let schema = &request["schema"];
    assert_eq!(schema["type"], "object");
    assert_eq!(
        schema["properties"]["party_size"],
        json!({"type": "integer", "description": "How many people.", "minimum": 1, "maximum": 12})
    );
    assert_eq!(
        schema["properties"]["time"],
        json!({"type": "string", "description": "When.", "enum": ["18:00", "19:00", "20:00"]})
    );
    request["request_id"]
        .as_str()
        .expect("a request id")
        .to_owned()
}

/// Sends a `TOOL_INPUT`; returns its envelope id.
async fn answer(
    conn: &mut Conn,
    call_id: &str,
    request_id: &str,
    action: &str,
    content: Option<Value>,
) -> String {
    let mut payload = json!({"call_id": call_id, "request_id": request_id, "action": action});
    if let Some(content) = content {
        payload["content"] = content;
    }
    conn.request("TOOL_INPUT", payload).await
}

async fn accepted_answer_books_the_table(kind: Kind) {
    let (handle, _) = start(demo_builder()).await;
    let mut conn = connect(kind, handle.local_addr(), json!({"tool_input": true})).await;
    let request_id = ask_for_a_table(&mut conn, "b1").await;
    let content = json!({"party_size": 4, "time": "19:00"});
    answer(&mut conn, "b1", &request_id, "accept", Some(content)).await;
    assert_eq!(conn.expect_update("b1").await["status"], "RUNNING");
    let done = conn.expect_done("b1").await;
    assert_eq!(done["status"], "OK", "{done}");
    assert_eq!(
        done["result"],
        json!({"booked": true, "restaurant": "Luigi", "party_size": 4, "time": "19:00"})
    );
    // Answered: the question is closed.
    let late = answer(&mut conn, "b1", &request_id, "decline", None).await;
    let error = conn.expect_error().await;
    assert_eq!(error["code"], "REQUEST_NOT_FOUND", "{error}");
    assert_eq!(error["related_id"], late);
    assert_eq!(
        error["detail"],
        json!({"call_id": "b1", "request_id": request_id})
    );
}

async fn declined_question_books_nothing(kind: Kind) {
    let (handle, _) = start(demo_builder()).await;
    let mut conn = connect(kind, handle.local_addr(), json!({"tool_input": true})).await;
    for (call_id, action) in [("d1", "decline"), ("d2", "cancel")] {
        let request_id = ask_for_a_table(&mut conn, call_id).await;
        answer(&mut conn, call_id, &request_id, action, None).await;
        assert_eq!(conn.expect_update(call_id).await["status"], "RUNNING");
        let done = conn.expect_done(call_id).await;
        assert_eq!(
            (&done["status"], &done["result"]),
            (
                &json!("OK"),
                &json!({"booked": false, "restaurant": "Luigi"})
            ),
            "{action}: {done}"
        );
    }
}

async fn invalid_answer_is_refused_and_asked_again(kind: Kind) {
    let (handle, _) = start(demo_builder()).await;
    let mut conn = connect(kind, handle.local_addr(), json!({"tool_input": true})).await;
    let request_id = ask_for_a_table(&mut conn, "i1").await;
    let wrong = json!({"party_size": 13, "time": "21:00"});
    let sent = answer(&mut conn, "i1", &request_id, "accept", Some(wrong)).await;
    let error = conn.expect_error().await;
    assert_eq!(error["code"], "INVALID_PARAMS", "{error}");
    assert_eq!(error["related_id"], sent);
    let violations = error["detail"]["violations"]
        .as_array()
        .expect("violations");
    let mut paths: Vec<&str> = violations
        .iter()
        .map(|v| v["path"].as_str().unwrap())
        .collect();
    paths.sort();
    assert_eq!(paths, ["/party_size", "/time"], "{error}");
    assert_eq!(error["detail"]["total"], 2);
    // Still open: a good answer now goes through.
    let right = json!({"party_size": 12, "time": "20:00"});
    answer(&mut conn, "i1", &request_id, "accept", Some(right)).await;
    assert_eq!(conn.expect_update("i1").await["status"], "RUNNING");
    let done = conn.expect_done("i1").await;
    assert_eq!(done["result"]["party_size"], 12, "{done}");
}

async fn cancel_while_waiting(kind: Kind) {
    let (handle, _) = start(demo_builder()).await;
    let mut conn = connect(kind, handle.local_addr(), json!({"tool_input": true})).await;
    let request_id = ask_for_a_table(&mut conn, "c1").await;
    conn.request(
        "TOOL_CANCEL",
        json!({"call_id": "c1", "reason": "changed my mind"}),
    )
    .await;
    assert_eq!(conn.expect_update("c1").await["status"], "CANCELLING");
    let done = conn.expect_done("c1").await;
    assert_eq!(done["status"], "CANCELLED", "{done}");
    answer(&mut conn, "c1", &request_id, "accept", Some(json!({}))).await;
    assert_eq!(conn.expect_error().await["code"], "REQUEST_NOT_FOUND");
}

async fn timeout_while_waiting(kind: Kind) {
    let builder = demo_builder().limits(Limits {
        tool_timeout: Some(Duration::from_millis(300)),
        ..base_limits()
    });
    let (handle, _) = start(builder).await;
    let mut conn = connect(kind, handle.local_addr(), json!({"tool_input": true})).await;
    let request_id = ask_for_a_table(&mut conn, "t1").await;
    let done = conn.expect_done("t1").await;
    assert_eq!(done["status"], "ERROR", "{done}");
    assert_eq!(done["result"]["code"], "TIMEOUT", "{done}");
    answer(&mut conn, "t1", &request_id, "decline", None).await;
    assert_eq!(conn.expect_error().await["code"], "REQUEST_NOT_FOUND");
}

async fn client_without_the_capability_is_told(kind: Kind) {
    let (handle, _) = start(demo_builder()).await;
    let mut conn = Conn::connect(kind, handle.local_addr(), None).await;
    conn.call("n1", "book_table", json!({"restaurant": "Luigi"}))
        .await;
    let log = conn.expect_update("n1").await;
    assert_eq!(log["log"]["message"], "checking availability at Luigi");
    let done = conn.expect_done("n1").await;
    assert_eq!(done["status"], "ERROR", "{done}");
    assert_eq!(done["result"]["code"], "TOOL_EXECUTION_ERROR", "{done}");
    let message = done["result"]["error"].as_str().unwrap();
    assert!(message.contains("cannot answer questions"), "{done}");
    // A TOOL_INPUT for no question.
    answer(&mut conn, "n1", "nope", "accept", Some(json!({}))).await;
    assert_eq!(conn.expect_error().await["code"], "REQUEST_NOT_FOUND");
}

/// §6.11, §11.3: a question waits with its session while the connection is
/// lost; resuming replays it (the same `request_id`), and the answer given
/// on the new connection reaches the tool.
#[tokio::test]
async fn a_question_survives_a_lost_connection() {
    let (handle, _) = start(demo_builder()).await;
    let addr = handle.local_addr();
    let mut conn = connect(Kind::Ws, addr, json!({"tool_input": true})).await;
    let old = conn.session.clone();
    let request_id = ask_for_a_table(&mut conn, "r1").await; // seqs 2 (log), 3 (question)
    drop(conn);

    let mut conn = Conn::connect(Kind::Ws, addr, None).await;
    let mut hai = resume_hai("again", &old, "2");
    hai["payload"]["capabilities"] = json!({"tool_input": true});
    conn.send(&hai).await;
    conn.follow(&old, 2);
    let asked = conn.expect_update("r1").await;
    assert_eq!(asked["status"], "WAITING_INPUT", "{asked}");
    assert_eq!(asked["input_request"]["request_id"], request_id.as_str());
    let confirm = conn.recv().await;
    assert_eq!(confirm["type"], "HAI", "{confirm}");
    let content = json!({"party_size": 2, "time": "18:00"});
    answer(&mut conn, "r1", &request_id, "accept", Some(content)).await;
    assert_eq!(conn.expect_update("r1").await["status"], "RUNNING");
    let done = conn.expect_done("r1").await;
    assert_eq!(done["result"]["booked"], true, "{done}");
}

/// Logs one line at each level, then with data.
#[haip_tool]
async fn chatty(ctx: Context) -> u32 {
    for level in [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Error,
    ] {
        ctx.log(level, format!("a {level} line"));
    }
    ctx.log_with(LogLevel::Warning, "with data", json!({"rows": 3}));
    7
}

async fn log_lines_in_order_at_the_clients_level(kind: Kind) {
    let (handle, _) = start(demo_builder().tool(chatty::tool())).await;
    let addr = handle.local_addr();
    for (level, expected) in [
        (
            "debug",
            vec![
                "a debug line",
                "a info line",
                "a notice line",
                "a warning line",
                "a error line",
                "with data",
            ],
        ),
        (
            "warning",
            vec!["a warning line", "a error line", "with data"],
        ),
    ] {
        let mut conn = connect(kind, addr, json!({"log_level": level})).await;
        conn.call("l1", "chatty", json!({})).await;
        let mut seen = Vec::new();
        loop {
            let env = conn.recv().await;
            match env["type"].as_str() {
                Some("TOOL_UPDATE") => {
                    let log = &env["payload"]["log"];
                    seen.push(log["message"].as_str().unwrap().to_owned());
                    if log["message"] == "with data" {
                        assert_eq!(log["data"], json!({"rows": 3}));
                        assert_eq!(log["level"], "warning");
                    }
                }
                Some("TOOL_DONE") => {
                    assert_eq!(env["payload"]["result"], 7);
                    break;
                }
                other => panic!("unexpected {other:?}: {env}"),
            }
        }
        assert_eq!(seen, expected, "log_level {level}");
    }
    // Clients whose accept_events leave out TOOL_UPDATE get no log lines.
    let mut conn = Conn::connect(kind, addr, None).await;
    conn.request(
        "HAI",
        json!({"accept_events": ["TOOL_DONE", "PONG", "ERROR"]}),
    )
    .await;
    conn.call("l2", "chatty", json!({})).await;
    assert_eq!(conn.expect_done("l2").await["result"], 7);
}

/// A red pixel and a caption.
#[haip_tool]
async fn picture() -> Vec<Content> {
    vec![
        Content::text("one red pixel"),
        Content::image([0x89, b'P', b'N', b'G'], "image/png"),
    ]
}

/// A count, and a sentence about it.
#[haip_tool]
async fn counted() -> Rich<u32> {
    Rich::new(3).with(Content::text("three"))
}

async fn content_blocks_come_back_as_content(kind: Kind) {
    let builder = demo_builder().tool(picture::tool()).tool(counted::tool());
    let (handle, _) = start(builder).await;
    let mut conn = Conn::connect(kind, handle.local_addr(), None).await;
    let done = conn.call_done("p1", "picture", json!({})).await;
    assert_eq!(
        done["result"],
        json!({"content": [
            {"type": "text", "text": "one red pixel"},
            {"type": "image", "data": "iVBORw==", "mimeType": "image/png"},
        ]})
    );
    let done = conn.call_done("p2", "counted", json!({})).await;
    assert_eq!(
        done["result"],
        json!({"content": [{"type": "text", "text": "three"}], "structured": 3})
    );
    // The advertised output schema describes the wire shape.
    conn.request("TOOL_SCHEMA", json!({"tool": "picture"}))
        .await;
    let schema = conn.recv().await;
    let output = &schema["payload"]["outputSchema"];
    assert_eq!(output["required"], json!(["content"]), "{schema}");
    assert!(!output.to_string().contains("x-haip"), "{output}");
}

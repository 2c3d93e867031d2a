//! `haip::testing` itself: what a test sees of progress, log lines,
//! questions, cancellation, timeouts, invalid params, panics and the one
//! end of every call, over the real session and driver.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Notify;

use super::*;
use crate::{Context, Tool, ToolError};

fn tool<F, Fut>(name: &str, handler: F) -> Tool
where
    F: Fn(Value, Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    Tool::builder(name)
        .input_schema(json!({"type": "object"}))
        .handler(handler)
        .build()
        .unwrap()
}

/// Fails unless a call of `tool` (params `{}`) fails with `code`.
async fn assert_fails(server: &TestServer, tool: &str, code: &str) {
    let err = server.call(tool, json!({})).await.unwrap_err();
    assert_eq!(err.code(), Some(code), "{err}");
}

/// Fails unless less than `limit` has passed since `started`.
#[track_caller]
fn assert_within(started: Instant, limit: Duration) {
    let elapsed = started.elapsed();
    assert!(elapsed < limit, "{elapsed:?}");
}

/// `add`, `steps` (progress, logs), `ask` (a question), `wait` (until
/// cancelled or released), `panics`, `slow` (past its 50 ms timeout).
fn server(gate: Arc<Notify>) -> TestServer {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Pick {
        #[schemars(range(min = 1, max = 3))]
        n: u8,
    }
    impl crate::QuestionForm for Pick {}
    let add = Tool::builder("add")
        .description("Add two numbers.")
        .input_schema(json!({
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        }))
        .output_schema(json!({"type": "number"}))
        .handler(|p: Value, _: Context| async move {
            Ok(json!(
                p["a"].as_f64().unwrap_or(0.0) + p["b"].as_f64().unwrap_or(0.0)
            ))
        })
        .build()
        .unwrap();
    let steps = tool("steps", |_, ctx| async move {
        ctx.debug("starting");
        for step in 1..=4 {
            ctx.progress(f64::from(step) * 25.0);
            // Each report waits for the session to take it: none is merged.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        ctx.warning("almost done");
        Ok(json!("done"))
    });
    let ask = tool("ask", |_, ctx| async move {
        match ctx.ask::<Pick>("Pick one").await? {
            crate::Answer::Accepted(pick) => Ok(json!({"n": pick.n})),
            crate::Answer::Declined => Ok(json!("declined")),
            crate::Answer::Cancelled => Ok(json!("dismissed")),
        }
    });
    let wait = tool("wait", move |_, ctx| {
        let gate = Arc::clone(&gate);
        async move {
            ctx.progress(1.0);
            tokio::select! {
                () = gate.notified() => Ok(json!("released")),
                () = ctx.cancelled() => Err(ToolError::cancelled()),
            }
        }
    });
    let panics = tool("panics", |_, _| async move {
        tokio::task::yield_now().await;
        panic!("the tool broke")
    });
    let slow = Tool::builder("slow")
        .timeout(Duration::from_millis(50))
        .handler(|_: Value, _: Context| async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(json!("late"))
        })
        .build()
        .unwrap();
    let whoami = tool("whoami", |_, ctx| async move {
        Ok(json!(ctx.caller().map(|c| c.subject().to_owned())))
    });
    TestServer::new(
        Server::builder()
            // `slow` ignores cancellation: it is aborted after this.
            .limits(crate::Limits {
                cancel_grace: Duration::from_millis(100),
                ..crate::Limits::default()
            })
            .tools([add, steps, ask, wait, panics, slow, whoami])
            .tool(
                Tool::builder("admin")
                    .scopes(["admin"])
                    .handler(|_: Value, _: Context| async move { Ok(json!("ok")) })
                    .build()
                    .unwrap(),
            ),
    )
    .unwrap()
}

#[tokio::test]
async fn a_call_gives_its_result_and_a_failure_its_code() {
    let server = server(Arc::default());
    let started = Instant::now();
    assert_eq!(
        server.call("add", json!({"a": 1, "b": 2})).await.unwrap(),
        json!(3.0)
    );
    let sum: f64 = server
        .call_typed("add", json!({"a": 2, "b": 2}))
        .await
        .unwrap();
    assert_eq!(sum, 4.0);
    // Validated against the schema before the tool runs, as on the wire.
    let err = server.call("add", json!({"a": "one"})).await.unwrap_err();
    assert_eq!(err.code(), Some("INVALID_PARAMS"), "{err}");
    let violations = err.details().unwrap().as_array().unwrap();
    let paths: Vec<&Value> = violations.iter().map(|v| &v["path"]).collect();
    assert_eq!(paths, [&json!("/a"), &json!("/b")], "{violations:?}");
    assert_fails(&server, "nope", "TOOL_NOT_FOUND").await;
    assert_within(started, Duration::from_secs(1));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn progress_and_log_lines_arrive_in_order() {
    let server = server(Arc::default());
    let mut call = server.start("steps", json!({})).await.unwrap();
    let line = call.log().await.unwrap();
    assert_eq!(
        (line.level.as_str(), line.message.as_str()),
        ("debug", "starting")
    );
    assert_eq!(call.progress().await.unwrap(), 25.0);
    assert_eq!(call.progress().await.unwrap(), 50.0);
    let done = call.done().await.unwrap();
    assert_eq!(done.progress(), [25.0, 50.0, 75.0, 100.0]);
    done.assert_progress_rises()
        .assert_logged(LogLevel::Warning, "almost")
        .assert_logged(LogLevel::Debug, "starting");
    assert!(!done.logged(LogLevel::Error, "almost"));
    assert_eq!(done.into_result().unwrap(), json!("done"));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn every_event_can_be_read_in_order() {
    let server = server(Arc::default());
    let mut call = server.start("steps", json!({})).await.unwrap();
    let mut kinds = Vec::new();
    while let Some(event) = call.next_event().await.unwrap() {
        kinds.push(match event {
            CallEvent::Log(line) => line.level,
            CallEvent::Update(update) => format!("{:?}", update.progress),
            other => format!("{other:?}"),
        });
    }
    assert_eq!(
        kinds,
        [
            "debug",
            "Some(25.0)",
            "Some(50.0)",
            "Some(75.0)",
            "Some(100.0)",
            "warning"
        ]
    );
    assert_eq!(
        call.done().await.unwrap().outcome,
        Outcome::Ok(Some(json!("done")))
    );
}

#[tokio::test]
async fn questions_are_answered_checked_and_declined() {
    let server = server(Arc::default());
    let mut call = server.start("ask", json!({})).await.unwrap();
    let question = call.question().await.unwrap();
    assert_eq!(question.message, "Pick one");
    assert_eq!(question.fields().unwrap()[0].name, "n");
    // An answer that does not fit: refused, the question stays open.
    let err = call
        .answer(&question.request_id, json!({"n": 9}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("INVALID_PARAMS"), "{err}");
    call.answer(&question.request_id, json!({"n": 2}))
        .await
        .unwrap();
    // Answered once: not open any more.
    let err = call
        .answer(&question.request_id, json!({"n": 1}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("REQUEST_NOT_FOUND"), "{err}");
    let done = call.done().await.unwrap();
    assert_eq!(done.questions().len(), 1);
    assert_eq!(done.into_result().unwrap(), json!({"n": 2}));

    let mut call = server.start("ask", json!({})).await.unwrap();
    let question = call.question().await.unwrap();
    call.decline(&question.request_id).await.unwrap();
    assert_eq!(call.result().await.unwrap(), json!("declined"));

    let mut call = server.start("ask", json!({})).await.unwrap();
    let question = call.question().await.unwrap();
    call.cancel_question(&question.request_id).await.unwrap();
    assert_eq!(call.result().await.unwrap(), json!("dismissed"));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_client_that_does_not_answer_gets_no_question() {
    let server = server(Arc::default());
    let options = ClientOptions::new().tool_input(false);
    let client = server.client_with(options, None).await.unwrap();
    // The question fails at once in the tool: `?` makes it an error.
    let err = client.call("ask", json!({})).await.unwrap_err();
    assert!(err.code().is_some(), "{err}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_unanswered_question_times_out_and_says_so() {
    let server = server(Arc::default()).timeout(Duration::from_millis(100));
    let call = server.start("ask", json!({})).await.unwrap();
    let err = call.done().await.unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(
        err.to_string()
            .contains("waits for an answer to \"Pick one\""),
        "{err}"
    );
    // Shutdown still ends the waiting call with its one TOOL_DONE.
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_cancelled_call_ends_cancelled_once() {
    let server = server(Arc::default());
    let mut call = server.start("wait", json!({})).await.unwrap();
    assert_eq!(call.progress().await.unwrap(), 1.0);
    call.cancel(Some("enough")).await.unwrap();
    let done = call.done().await.unwrap();
    assert!(
        matches!(done.outcome, Outcome::Cancelled(_)),
        "{:?}",
        done.outcome
    );
    let err = done.into_result().unwrap_err();
    assert!(err.is_cancelled(), "{err}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_released_call_ends_with_its_result() {
    let gate = Arc::new(Notify::new());
    let server = server(Arc::clone(&gate));
    let mut call = server.start("wait", json!({})).await.unwrap();
    call.progress().await.unwrap(); // running: it waits on the gate
    gate.notify_one();
    assert_eq!(call.result().await.unwrap(), json!("released"));
}

#[tokio::test]
async fn a_tool_past_its_timeout_ends_timeout() {
    let server = server(Arc::default());
    let started = Instant::now();
    assert_fails(&server, "slow", "TIMEOUT").await;
    assert_within(started, Duration::from_secs(2));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_wait_past_the_tests_limit_fails_instead_of_hanging() {
    let server = server(Arc::default()).timeout(Duration::from_millis(50));
    let mut call = server.start("wait", json!({})).await.unwrap();
    call.progress().await.unwrap();
    let err = call.log().await.unwrap_err();
    assert!(err.is_timeout(), "{err}");
    let err = call.done().await.unwrap_err();
    assert!(err.to_string().starts_with("no TOOL_DONE of call"), "{err}");
}

#[tokio::test]
async fn waiting_for_what_never_comes_ends_with_the_call() {
    let server = server(Arc::default());
    let mut call = server.start("add", json!({"a": 1, "b": 1})).await.unwrap();
    let err = call.question().await.unwrap_err();
    assert!(
        matches!(&err, TestError::Ended { outcome, .. } if **outcome == Outcome::Ok(Some(json!(2.0)))),
        "{err}"
    );
    // The end read on the way is still there.
    assert_eq!(call.result().await.unwrap(), json!(2.0));
}

#[tokio::test]
async fn a_panic_is_an_error_and_the_session_goes_on() {
    let server = server(Arc::default());
    assert_fails(&server, "panics", "INTERNAL_ERROR").await;
    assert_eq!(
        server.call("add", json!({"a": 1, "b": 1})).await.unwrap(),
        json!(2.0)
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn every_call_ends_exactly_once_even_at_shutdown() {
    let server = server(Arc::default());
    let client = server.client().await.unwrap();
    let mut running = Vec::new();
    for _ in 0..3 {
        let mut call = client.start("wait", json!({})).await.unwrap();
        call.progress().await.unwrap();
        running.push(call);
    }
    server.call("panics", json!({})).await.unwrap_err();
    server.call("slow", json!({})).await.unwrap_err();
    let mut cancelled = client.start("wait", json!({})).await.unwrap();
    cancelled.progress().await.unwrap();
    cancelled.cancel(None).await.unwrap();
    cancelled.done().await.unwrap();
    // Shutdown cancels the three still running; each gets its TOOL_DONE.
    server.shutdown().await.unwrap();
    let dones: Vec<String> = client
        .envelopes()
        .iter()
        .filter(|e| e["type"] == "TOOL_DONE")
        .map(|e| e["payload"]["call_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(dones.len(), 4, "{dones:?}");
    for call in running {
        assert_eq!(dones.iter().filter(|id| *id == call.call_id()).count(), 1);
        let done = call.done().await.unwrap();
        assert!(
            matches!(done.outcome, Outcome::Cancelled(_)),
            "{:?}",
            done.outcome
        );
    }
    client.check().unwrap();
}

#[tokio::test]
async fn a_client_dropped_mid_call_does_not_hold_the_shutdown() {
    let server = server(Arc::default());
    let client = server.client().await.unwrap();
    let mut call = client.start("wait", json!({})).await.unwrap();
    call.progress().await.unwrap();
    drop((call, client));
    let started = Instant::now();
    server.shutdown().await.unwrap();
    assert_within(started, Duration::from_secs(1));
}

#[tokio::test]
async fn broken_rules_are_reported() {
    let wire = Wire::default();
    let envelope = |seq: u64, ty: &str| {
        json!({"seq": seq.to_string(), "type": ty, "payload": {"call_id": "c1", "status": "OK"}})
            .to_string()
    };
    wire.received(envelope(1, "TOOL_DONE").as_bytes());
    wire.received(envelope(3, "TOOL_UPDATE").as_bytes());
    wire.received(envelope(4, "TOOL_DONE").as_bytes());
    let broken = wire.violations();
    assert_eq!(broken.len(), 3, "{broken:?}");
    assert!(broken[0].starts_with("TOOL_UPDATE has seq 3, expected 2"));
    assert!(broken[1].starts_with("TOOL_UPDATE after the TOOL_DONE of call c1"));
    assert!(broken[2].starts_with("TOOL_DONE number 2 for call c1"));
    assert_eq!(wire.completions("c1"), 2);
}

#[tokio::test]
async fn a_caller_is_who_the_tools_see_and_its_scopes_count() {
    let server = server(Arc::default()).as_caller(Caller::new("alice"));
    assert_eq!(
        server.call("whoami", json!({})).await.unwrap(),
        json!("alice")
    );
    assert_fails(&server, "admin", "FORBIDDEN").await;
    let admin = server
        .client_as(Caller::new("root").with_scopes(["admin"]))
        .await
        .unwrap();
    assert_eq!(admin.call("admin", json!({})).await.unwrap(), json!("ok"));
    assert_eq!(
        admin.call("whoami", json!({})).await.unwrap(),
        json!("root")
    );
    // Nobody (authentication off): no caller, no scopes enforced.
    let nobody = server.client().await.unwrap();
    assert_eq!(nobody.call("whoami", json!({})).await.unwrap(), Value::Null);
    assert_ne!(nobody.session_id(), admin.session_id());
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn schemas_are_a_stable_snapshot() {
    let server = server(Arc::default());
    let schemas = server.schemas().await.unwrap();
    assert!(schemas.ends_with("}\n"));
    let value: Value = serde_json::from_str(&schemas).unwrap();
    assert_eq!(value["add"]["description"], "Add two numbers.");
    assert_eq!(value["add"]["output_schema"], json!({"type": "number"}));
    assert_eq!(value["add"]["input_schema"]["required"], json!(["a", "b"]));
    // Keys sorted at every level: the text is the same however maps are kept.
    let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
    let mut sorted_keys = keys.clone();
    sorted_keys.sort();
    assert_eq!(keys, sorted_keys);
    assert_eq!(server.schemas().await.unwrap(), schemas);
    let add = server.schema("add").await.unwrap();
    assert_eq!(add.output_schema, Some(json!({"type": "number"})));
    let full = server
        .default_client()
        .await
        .unwrap()
        .schemas_in("full")
        .await
        .unwrap();
    assert!(full.contains("\"add\""));
    assert_eq!(server.list_tools().await.unwrap().len(), 8);
}

#[tokio::test]
async fn a_server_that_needs_the_network_is_refused() {
    #[cfg(feature = "redis")]
    {
        let err = TestServer::new(Server::builder().redis("redis://127.0.0.1:1")).unwrap_err();
        assert!(err.to_string().contains("in memory"), "{err}");
    }
    let err = TestServer::new(
        Server::builder()
            .tool(tool("a", |_, _| async { Ok(json!(1)) }))
            .tool(tool("a", |_, _| async { Ok(json!(2)) })),
    )
    .unwrap_err();
    assert!(matches!(err, Error::DuplicateTool { .. }), "{err}");
}

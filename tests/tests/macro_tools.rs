//! `#[haip_tool]` functions served and called end to end, in memory
//! (`haip::testing`: the real session core and connection driver, no
//! socket): progress, cancellation, state, sync functions, error mapping,
//! validation. How their envelopes travel over each transport is
//! `wire.rs`'s, `transports.rs`'s and `errors.rs`'s.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use haip::testing::{CallEvent, Outcome, TestServer, Update};
use haip::{Context, State, ToolError, haip_tool};
use serde_json::json;
use support::{builder, start, within};

/// Counts how often `guarded` actually ran.
static GUARDED_RUNS: AtomicUsize = AtomicUsize::new(0);

/// Only runs with valid params.
#[haip_tool]
async fn guarded(
    /// Between 1 and 10.
    #[schemars(range(min = 1, max = 10))]
    n: u8,
) -> u8 {
    GUARDED_RUNS.fetch_add(1, Ordering::SeqCst);
    n
}

/// Reports progress with partial results.
#[haip_tool]
async fn stepper(steps: u32, ctx: Context) -> u32 {
    for i in 1..=steps {
        ctx.progress_with(
            f64::from(i) * 100.0 / f64::from(steps),
            json!({ "step": i }),
        );
    }
    steps
}

/// Runs until cancelled, then says it saw the cancellation.
#[haip_tool]
async fn wait_for_cancel(ctx: Context, seen: State<CancelSeen>) -> Result<(), ToolError> {
    ctx.progress(1.0);
    ctx.cancelled().await;
    seen.0.fetch_add(1, Ordering::SeqCst);
    Err(ToolError::cancelled())
}

/// Counts cancellations observed by `wait_for_cancel`.
#[derive(Default)]
struct CancelSeen(Arc<AtomicUsize>);

/// Greets with the configured greeting.
#[haip_tool]
async fn greet(name: String, greeting: State<Greeting>) -> String {
    format!("{}, {name}!", greeting.0)
}

struct Greeting(&'static str);

/// A synchronous function: runs on the blocking pool.
#[haip_tool]
fn checksum(data: Vec<u8>) -> u64 {
    data.iter().map(|&b| u64::from(b)).sum()
}

/// Any `Display` error becomes TOOL_EXECUTION_ERROR with its message.
#[haip_tool]
async fn parse_number(text: String) -> Result<i64, std::num::ParseIntError> {
    text.parse()
}

/// A ToolError chooses its code and details.
#[haip_tool]
async fn quota(#[haip(default = 0)] used: u32) -> Result<(), ToolError> {
    Err(ToolError::new("QUOTA_EXCEEDED", "Daily quota used up")
        .with_details(json!({ "used": used })))
}

/// A panicking function still gets exactly one TOOL_DONE.
#[haip_tool]
fn explode() -> u8 {
    panic!("boom")
}

fn served() -> TestServer {
    served_with(CancelSeen::default())
}

fn served_with(seen: CancelSeen) -> TestServer {
    TestServer::new(
        haip::Server::builder()
            .state(Greeting("Hello"))
            .state(seen)
            .limits(haip::Limits {
                cancel_grace: Duration::from_secs(2),
                ..haip::Limits::default()
            })
            .tool(guarded::tool())
            .tool(stepper::tool())
            .tool(wait_for_cancel::tool())
            .tool(greet::tool())
            .tool(checksum::tool())
            .tool(parse_number::tool())
            .tool(quota::tool())
            .tool(explode::tool()),
    )
    .unwrap()
}

#[tokio::test]
async fn invalid_params_are_rejected_before_the_function_runs() {
    let server = served();
    let err = server
        .call("guarded", json!({"n": 11, "extra": true}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("INVALID_PARAMS"), "{err}");
    let paths: Vec<&str> = err
        .details()
        .and_then(|d| d.as_array())
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/extra", "/n"]);
    assert_eq!(
        GUARDED_RUNS.load(Ordering::SeqCst),
        0,
        "the function must not run"
    );
    assert_eq!(server.call("guarded", json!({"n": 7})).await.unwrap(), 7);
    assert_eq!(GUARDED_RUNS.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn progress_arrives_in_order_before_the_result() {
    let server = served();
    let call = server.start("stepper", json!({"steps": 4})).await.unwrap();
    let done = call.done().await.unwrap();
    let mut last = -1.0;
    for event in &done.events {
        let CallEvent::Update(Update {
            status,
            progress: Some(progress),
            partial,
        }) = event
        else {
            panic!("only progress before the result: {event:?}");
        };
        assert_eq!(status, "RUNNING");
        assert!(*progress > last, "progress goes forward: {event:?}");
        let step = partial.as_ref().unwrap()["step"].as_f64().unwrap();
        assert_eq!(step * 25.0, *progress);
        last = *progress;
    }
    assert_eq!(last, 100.0, "the latest report always arrives");
    assert_eq!(done.outcome, Outcome::Ok(Some(json!(4))));
}

#[tokio::test]
async fn cancellation_reaches_the_function() {
    let server = served();
    let mut call = server.start("wait_for_cancel", json!({})).await.unwrap();
    assert_eq!(call.progress().await.unwrap(), 1.0, "the tool is running");
    call.cancel(Some("stop")).await.unwrap();
    assert_eq!(call.update().await.unwrap().status, "CANCELLING");
    let done = call.done().await.unwrap();
    assert_eq!(done.outcome, Outcome::Cancelled(Some("stop".into())));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn state_sync_functions_and_error_mapping() {
    let server = served();
    let greeting = server.call("greet", json!({"name": "Ada"})).await.unwrap();
    assert_eq!(greeting, "Hello, Ada!");
    let sum = server
        .call("checksum", json!({"data": [1, 2, 250]}))
        .await
        .unwrap();
    assert_eq!(sum, 253);
    let err = server
        .call("parse_number", json!({"text": "x1"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("TOOL_EXECUTION_ERROR"));
    assert!(
        err.to_string().ends_with(": invalid digit found in string"),
        "{err}"
    );
    let err = server.call("quota", json!({})).await.unwrap_err();
    assert_eq!(err.code(), Some("QUOTA_EXCEEDED"));
    assert_eq!(
        err.details(),
        Some(&json!({"used": 0})),
        "the default applies when the param is absent"
    );
    // As the wire carries it.
    let client = server.default_client().await.unwrap();
    let quota_done = client
        .envelopes()
        .into_iter()
        .rfind(|e| e["type"] == "TOOL_DONE")
        .unwrap();
    assert_eq!(
        quota_done["payload"]["result"],
        json!({"error": "Daily quota used up", "code": "QUOTA_EXCEEDED", "details": {"used": 0}})
    );
    let err = server.call("explode", json!({})).await.unwrap_err();
    assert_eq!(err.code(), Some("INTERNAL_ERROR"));
    assert!(
        err.to_string()
            .ends_with(": Internal error in tool explode"),
        "{err}"
    );
    // The session is still fine, and every call ended once.
    assert_eq!(server.call("guarded", json!({"n": 1})).await.unwrap(), 1);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn cancelled_tools_observe_it() {
    let seen = Arc::new(AtomicUsize::new(0));
    let server = served_with(CancelSeen(Arc::clone(&seen)));
    let mut calls = Vec::new();
    for _ in 0..2 {
        let mut call = server.start("wait_for_cancel", json!({})).await.unwrap();
        call.progress().await.unwrap();
        calls.push(call);
    }
    for mut call in calls {
        call.cancel(None).await.unwrap();
        assert_eq!(call.update().await.unwrap().status, "CANCELLING");
        assert!(call.result().await.unwrap_err().is_cancelled());
    }
    // TOOL_DONE CANCELLED follows the tool's own return, so both saw it.
    assert_eq!(seen.load(Ordering::SeqCst), 2);
}

#[test]
fn missing_state_is_a_start_up_error() {
    let err = haip::Server::builder()
        .tool(greet::tool())
        .build()
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("`greet`") && text.contains("Greeting"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registering_a_tool_that_needs_missing_state_fails() {
    let (handle, _url) = start(builder()).await;
    let err = within("register", async { handle.register_tool(greet::tool()) })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("Greeting"), "{err}");
    assert!(handle.tools().is_empty());
}

#[test]
fn annotated_functions_stay_callable() {
    assert_eq!(checksum(vec![1, 2, 3]), 6);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_eq!(
        rt.block_on(greet("Bo".into(), State::new(Greeting("Hey")))),
        "Hey, Bo!"
    );
}

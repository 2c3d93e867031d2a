//! `#[haip_tool]` functions served and called end to end over WebSocket:
//! progress, cancellation, state, sync functions, error mapping, validation.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use haip::{Context, State, ToolError, haip_tool};
use serde_json::json;
use support::{Client, builder, start, within};

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

async fn served() -> (haip::ServerHandle, Client) {
    let (handle, url) = start(
        builder()
            .state(Greeting("Hello"))
            .state(CancelSeen::default())
            .cancel_grace(Duration::from_secs(2))
            .tool(guarded::tool())
            .tool(stepper::tool())
            .tool(wait_for_cancel::tool())
            .tool(greet::tool())
            .tool(checksum::tool())
            .tool(parse_number::tool())
            .tool(quota::tool())
            .tool(explode::tool()),
    )
    .await;
    (handle, Client::connect(&url).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_params_are_rejected_before_the_function_runs() {
    let (_handle, mut client) = served().await;
    let done = client
        .call_done("c1", "guarded", json!({"n": 11, "extra": true}))
        .await;
    assert_eq!(done["status"], "ERROR");
    assert_eq!(done["result"]["code"], "INVALID_PARAMS");
    let paths: Vec<&str> = done["result"]["details"]
        .as_array()
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
    let done = client.call_done("c2", "guarded", json!({"n": 7})).await;
    assert_eq!(done, json!({"call_id": "c2", "status": "OK", "result": 7}));
    assert_eq!(GUARDED_RUNS.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_arrives_in_order_before_the_result() {
    let (_handle, mut client) = served().await;
    client.call("p", "stepper", json!({"steps": 4})).await;
    let mut last = -1.0;
    loop {
        let env = client.recv().await;
        let payload = &env["payload"];
        if env["type"] == "TOOL_DONE" {
            assert_eq!(
                payload,
                &json!({"call_id": "p", "status": "OK", "result": 4})
            );
            break;
        }
        assert_eq!(payload["status"], "RUNNING");
        let progress = payload["progress"].as_f64().unwrap();
        assert!(progress > last, "progress goes forward: {payload}");
        assert_eq!(
            payload["partial"]["step"].as_f64().unwrap() * 25.0,
            progress
        );
        last = progress;
    }
    assert_eq!(last, 100.0, "the latest report always arrives");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_reaches_the_function() {
    let (handle, mut client) = served().await;
    client.call("w", "wait_for_cancel", json!({})).await;
    let update = client.expect_update("w").await;
    assert_eq!(update["progress"], 1, "the tool is running");
    client
        .request("TOOL_CANCEL", json!({"call_id": "w", "reason": "stop"}))
        .await;
    assert_eq!(client.expect_update("w").await["status"], "CANCELLING");
    let done = client.expect_done("w").await;
    assert_eq!(
        done,
        json!({"call_id": "w", "status": "CANCELLED", "result": {"reason": "stop"}})
    );
    let _ = handle;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_sync_functions_and_error_mapping() {
    let (_handle, mut client) = served().await;
    let done = client.call_done("g", "greet", json!({"name": "Ada"})).await;
    assert_eq!(done["result"], "Hello, Ada!");
    let done = client
        .call_done("s", "checksum", json!({"data": [1, 2, 250]}))
        .await;
    assert_eq!(done["result"], 253);
    let done = client
        .call_done("n", "parse_number", json!({"text": "x1"}))
        .await;
    assert_eq!(
        done["result"],
        json!({"error": "invalid digit found in string", "code": "TOOL_EXECUTION_ERROR"})
    );
    let done = client.call_done("q", "quota", json!({})).await;
    assert_eq!(
        done["result"],
        json!({"error": "Daily quota used up", "code": "QUOTA_EXCEEDED", "details": {"used": 0}}),
        "the default applies when the param is absent"
    );
    let done = client.call_done("e", "explode", json!({})).await;
    assert_eq!(
        done["result"],
        json!({"error": "Internal error in tool explode", "code": "INTERNAL_ERROR"})
    );
    // The session is still fine.
    client.ping_marker().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_tools_observe_it() {
    let seen = Arc::new(AtomicUsize::new(0));
    let (_handle, url) = start(
        builder()
            .state(CancelSeen(Arc::clone(&seen)))
            .tool(wait_for_cancel::tool()),
    )
    .await;
    let mut client = Client::connect(&url).await;
    for id in ["a", "b"] {
        client.call(id, "wait_for_cancel", json!({})).await;
        client.expect_update(id).await;
    }
    for id in ["a", "b"] {
        client.request("TOOL_CANCEL", json!({"call_id": id})).await;
        assert_eq!(client.expect_update(id).await["status"], "CANCELLING");
        assert_eq!(client.expect_done(id).await["status"], "CANCELLED");
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

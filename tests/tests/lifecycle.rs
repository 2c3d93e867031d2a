//! The life of a running call over a real WebSocket (docs/protocol.md §6.5–§6.7):
//! progress, cancellation (including the grace-period abort and `RUN_CANCEL`),
//! panics, `debug_errors`, timeouts and runs.
//!
//! Every envelope a test receives is also checked by the support client
//! against the outbound rules (seven fields, UUID v4 ids, `seq` +1 from `"1"`
//! with no gaps, one session id).

use crate::support;

use std::time::{Duration, Instant};

use haip::{Context, Limits, Tool, ToolError};
use serde_json::{Value, json};
use support::{Client, DropGuard, base_limits, builder, demo_builder, gated_tool, start, within};
use tokio::sync::mpsc;

// ----- §6.5 progress ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_file_reports_progress_then_done() {
    let (_handle, url) = start(demo_builder()).await;
    let mut client = Client::connect(&url).await;
    client
        .call(
            "f1",
            "process_file",
            json!({"filename": "data.csv", "operation": "analyze"}),
        )
        .await;
    for expected in [0, 20, 40, 60, 80, 100] {
        let update = client.expect_update("f1").await;
        assert_eq!(
            update,
            json!({"call_id": "f1", "status": "RUNNING", "progress": expected})
        );
        assert!(
            update["progress"].is_u64(),
            "progress stays an integer: {update}"
        );
    }
    let done = client.expect_done("f1").await;
    assert_eq!(
        done,
        json!({"call_id": "f1", "status": "OK", "result": {"processed": true, "lines": 150}})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_is_clamped_and_carries_partial() {
    let tool = Tool::builder("reporter")
        .handler(|_: Value, ctx: Context| async move {
            ctx.progress(f64::NAN); // discarded
            ctx.progress_with(12.5, json!({"rows": 1}));
            Ok::<_, ToolError>(Value::Null)
        })
        .build()
        .unwrap();
    let clamp = Tool::builder("clamp")
        .handler(|_: Value, ctx: Context| async move {
            ctx.progress(250.0);
            Ok::<_, ToolError>(json!("done"))
        })
        .build()
        .unwrap();
    let (_handle, url) = start(builder().tool(tool).tool(clamp)).await;
    let mut client = Client::connect(&url).await;
    client.call("r1", "reporter", json!({})).await;
    assert_eq!(
        client.expect_update("r1").await,
        json!({"call_id": "r1", "status": "RUNNING", "progress": 12.5, "partial": {"rows": 1}})
    );
    // A null result is omitted.
    assert_eq!(
        client.expect_done("r1").await,
        json!({"call_id": "r1", "status": "OK"})
    );
    client.call("r2", "clamp", json!({})).await;
    assert_eq!(client.expect_update("r2").await["progress"], json!(100));
    assert_eq!(client.expect_done("r2").await["result"], "done");
}

// ----- §6.7 cancellation --------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_run_sends_cancelling_then_cancelled_with_reason() {
    let (gated, mut gate) = gated_tool("gated");
    let (_handle, url) = start(demo_builder().tool(gated)).await;
    let mut client = Client::connect(&url).await;

    client.call("g1", "gated", json!({})).await;
    assert_eq!(gate.started().await, "g1");
    client
        .request(
            "TOOL_CANCEL",
            json!({"call_id": "g1", "reason": "user closed panel"}),
        )
        .await;
    assert_eq!(
        client.expect_update("g1").await,
        json!({"call_id": "g1", "status": "CANCELLING"})
    );
    assert_eq!(gate.cancelled().await, "g1", "the tool saw ctx.cancelled()");
    // The tool's late progress report and its return value are discarded.
    assert_eq!(
        client.expect_done("g1").await,
        json!({"call_id": "g1", "status": "CANCELLED", "result": {"reason": "user closed panel"}})
    );
    client.ping_marker().await;

    // Without a reason: no result.
    client.call("g2", "gated", json!({})).await;
    assert_eq!(gate.started().await, "g2");
    client
        .request("TOOL_CANCEL", json!({"call_id": "g2"}))
        .await;
    assert_eq!(client.expect_update("g2").await["status"], "CANCELLING");
    assert_eq!(
        client.expect_done("g2").await,
        json!({"call_id": "g2", "status": "CANCELLED"})
    );

    // Unknown, finished, missing or non-string call ids are ignored silently.
    for payload in [
        json!({"call_id": "never-existed", "reason": "x"}),
        json!({"call_id": "g1"}),
        json!({}),
        json!({"call_id": 5}),
    ] {
        client.request("TOOL_CANCEL", payload).await;
    }
    client.ping_marker().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_call_twice_is_ignored() {
    let (gated, mut gate) = gated_tool("gated");
    let (_handle, url) = start(builder().tool(gated)).await;
    let mut client = Client::connect(&url).await;
    client.call("g1", "gated", json!({})).await;
    gate.started().await;
    client
        .request("TOOL_CANCEL", json!({"call_id": "g1", "reason": "first"}))
        .await;
    client
        .request("TOOL_CANCEL", json!({"call_id": "g1", "reason": "second"}))
        .await;
    assert_eq!(client.expect_update("g1").await["status"], "CANCELLING");
    assert_eq!(
        client.expect_done("g1").await["result"],
        json!({"reason": "first"})
    );
    client.ping_marker().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_ignoring_cancellation_is_aborted_after_the_grace_period() {
    let grace = Duration::from_millis(200);
    let (started_tx, mut started_rx) = mpsc::unbounded_channel::<()>();
    let (dropped_tx, mut dropped_rx) = mpsc::unbounded_channel::<()>();
    let stubborn = Tool::builder("stubborn")
        .handler(move |_: Value, _ctx: Context| {
            let started = started_tx.clone();
            let guard = DropGuard(dropped_tx.clone());
            async move {
                let _guard = guard;
                let _ = started.send(());
                let mut ticks = 0u64;
                // Never looks at ctx: only an abort stops this.
                loop {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    ticks += 1;
                    if ticks == u64::MAX {
                        break;
                    }
                }
                Ok::<_, ToolError>(json!({ "ticks": ticks }))
            }
        })
        .build()
        .unwrap();
    let (_handle, url) = start(
        builder()
            .limits(Limits {
                cancel_grace: grace,
                ..base_limits()
            })
            .tool(stubborn),
    )
    .await;
    let mut client = Client::connect(&url).await;
    client.call("s1", "stubborn", json!({})).await;
    within("the stubborn tool to start", started_rx.recv()).await;

    let sent = Instant::now();
    client
        .request("TOOL_CANCEL", json!({"call_id": "s1", "reason": "stop"}))
        .await;
    assert_eq!(client.expect_update("s1").await["status"], "CANCELLING");
    let done = client.expect_done("s1").await;
    let elapsed = sent.elapsed();
    assert_eq!(
        done,
        json!({"call_id": "s1", "status": "CANCELLED", "result": {"reason": "stop"}})
    );
    assert!(
        elapsed >= grace - Duration::from_millis(10),
        "TOOL_DONE came after {elapsed:?}, before the {grace:?} grace period"
    );
    assert!(
        elapsed < Duration::from_secs(3),
        "TOOL_DONE took {elapsed:?}"
    );
    // The future is dropped (aborted) at the end of the grace period too: the
    // session's deadline and the task's are the same instant, so it may be
    // gone just before or just after the TOOL_DONE went out.
    within(
        "the stubborn tool's future to be dropped (aborted)",
        dropped_rx.recv(),
    )
    .await;
    client.ping_marker().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_cancel_cancels_the_calls_of_that_run() {
    let (gated, mut gate) = gated_tool("gated");
    let (_handle, url) = start(builder().tool(gated)).await;
    let mut client = Client::connect(&url).await;

    client
        .send(&json!({"id": "x1", "run_id": "run-9", "type": "TOOL_CALL",
                      "payload": {"call_id": "g1", "tool": "gated"}}))
        .await;
    client
        .send(&json!({"id": "x2", "type": "TOOL_CALL",
                      "payload": {"call_id": "g2", "tool": "gated", "run_id": "run-9"}}))
        .await;
    client
        .send(&json!({"id": "x3", "run_id": "other", "type": "TOOL_CALL",
                      "payload": {"call_id": "g3", "tool": "gated"}}))
        .await;
    let mut started: Vec<String> = Vec::new();
    for _ in 0..3 {
        started.push(gate.started().await);
    }
    started.sort();
    assert_eq!(started, ["g1", "g2", "g3"]);

    client
        .request("RUN_CANCEL", json!({"run_id": "run-9"}))
        .await;
    let mut per_call: std::collections::HashMap<String, Vec<Value>> = Default::default();
    for _ in 0..4 {
        let env = client.recv().await;
        assert_eq!(
            env["run_id"], "run-9",
            "envelopes about the call carry its run id: {env}"
        );
        let call_id = env["payload"]["call_id"].as_str().unwrap().to_owned();
        per_call
            .entry(call_id)
            .or_default()
            .push(env["payload"].clone());
    }
    for call_id in ["g1", "g2"] {
        assert_eq!(
            per_call[call_id],
            [
                json!({"call_id": call_id, "status": "CANCELLING"}),
                json!({"call_id": call_id, "status": "CANCELLED", "result": {"reason": "run cancelled"}})
            ]
        );
    }

    let id = client.request("RUN_CANCEL", json!({})).await;
    assert_eq!(
        client.expect_error().await["payload"],
        json!({"code": "MISSING_RUN_ID", "message": "Run ID is required", "related_id": id})
    );
    let id = client
        .request("RUN_CANCEL", json!({"run_id": "run-9"}))
        .await;
    assert_eq!(
        client.expect_error().await["payload"],
        json!({"code": "RUN_NOT_FOUND", "message": "Run not found", "related_id": id, "detail": {"run_id": "run-9"}})
    );

    gate.open(1);
    let env = client.recv().await;
    assert_eq!(
        (env["payload"].clone(), env["run_id"].clone()),
        (
            json!({"call_id": "g3", "status": "OK", "result": {"released": "g3"}}),
            json!("other")
        )
    );
}

// ----- §6.6 panics and timeouts -----------------------------------------------------------------

fn panicking_tool() -> Tool {
    Tool::builder("boom")
        .handler(|_: Value, _: Context| async move {
            if std::hint::black_box(true) {
                panic!("secret panic text 42");
            }
            Ok::<_, ToolError>(Value::Null)
        })
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_tool_ends_with_internal_error_without_leaking_the_panic() {
    let (_handle, url) = start(demo_builder().tool(panicking_tool())).await;
    let mut client = Client::connect(&url).await;
    client.call("p1", "boom", json!({})).await;
    let (raw, env) = client.recv_raw().await;
    assert_eq!(
        env["payload"],
        json!({"call_id": "p1", "status": "ERROR", "result": {"error": "Internal error in tool boom", "code": "INTERNAL_ERROR"}})
    );
    assert!(!raw.contains("secret"), "panic text on the wire: {raw}");
    // The session and the server survive.
    let done = client
        .call_done("e1", "echo", json!({"message": "after"}))
        .await;
    assert_eq!(done["status"], "OK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_errors_puts_the_panic_text_in_the_message() {
    let (_handle, url) = start(builder().debug_errors(true).tool(panicking_tool())).await;
    let mut client = Client::connect(&url).await;
    let done = client.call_done("p1", "boom", json!({})).await;
    assert_eq!(
        done["result"],
        json!({"error": "Tool boom panicked: secret panic text 42", "code": "INTERNAL_ERROR"})
    );
}

/// A tool that would take 30 s but stops (and says so) when cancelled.
fn slow_tool(
    name: &str,
    timeout: Option<Duration>,
    saw_cancel: mpsc::UnboundedSender<String>,
) -> Tool {
    let mut b = Tool::builder(name);
    if let Some(t) = timeout {
        b = b.timeout(t);
    }
    b.handler(move |_: Value, ctx: Context| {
        let saw_cancel = saw_cancel.clone();
        async move {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(30)) => Ok::<_, ToolError>(json!("finished")),
                () = ctx.cancelled() => {
                    let _ = saw_cancel.send(ctx.call_id().to_owned());
                    Ok(json!("late"))
                }
            }
        }
    })
    .build()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_ends_the_call_with_timeout_and_no_cancelling() {
    let (tx, mut saw_cancel) = mpsc::unbounded_channel();
    let (_handle, url) = start(
        builder()
            .limits(Limits {
                tool_timeout: Some(Duration::from_millis(150)),
                ..base_limits()
            })
            .tool(slow_tool(
                "slow",
                Some(Duration::from_millis(100)),
                tx.clone(),
            ))
            .tool(slow_tool("slow2", None, tx)),
    )
    .await;
    let mut client = Client::connect(&url).await;

    let sent = Instant::now();
    client.call("t1", "slow", json!({})).await;
    // The very next envelope is the TOOL_DONE: no CANCELLING before it.
    let done = client.expect_done("t1").await;
    assert!(
        sent.elapsed() >= Duration::from_millis(100),
        "timed out early"
    );
    assert_eq!(
        done,
        json!({"call_id": "t1", "status": "ERROR", "result": {"error": "Tool slow timed out after 100 ms", "code": "TIMEOUT"}})
    );
    assert_eq!(
        within("the tool to see the cancellation", saw_cancel.recv()).await,
        Some("t1".to_owned()),
        "a timed-out tool is signalled to stop"
    );
    // Its late return value is discarded: nothing more for t1.
    client.ping_marker().await;

    // The server-wide tool_timeout applies to tools without their own.
    let done = client.call_done("t2", "slow2", json!({})).await;
    assert_eq!(
        done["result"],
        json!({"error": "Tool slow2 timed out after 150 ms", "code": "TIMEOUT"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_declared_finished_and_limited_per_session() {
    let (_handle, url) = start(builder().limits(Limits {
        max_concurrent_runs: 2,
        ..base_limits()
    }))
    .await;
    let mut a = Client::connect(&url).await;
    let mut b = Client::connect(&url).await;

    // Declaring runs gets no reply, up to the limit.
    a.request("RUN_STARTED", json!({"run_id": "r1"})).await;
    a.request("RUN_STARTED", json!({"run_id": "r2"})).await;
    a.request("RUN_STARTED", json!({"run_id": "r1"})).await; // already active: ignored
    a.ping_marker().await;
    let id = a.request("RUN_STARTED", json!({"run_id": "r3"})).await;
    assert_eq!(
        a.expect_error().await["payload"],
        json!({"code": "RUN_LIMIT_EXCEEDED", "message": "Too many concurrent runs", "related_id": id,
               "detail": {"max_concurrent_runs": 2}})
    );

    // Another session cannot finish this session's run.
    let id = b.request("RUN_FINISHED", json!({"run_id": "r1"})).await;
    assert_eq!(
        b.expect_error().await["payload"],
        json!({"code": "RUN_NOT_FOUND", "message": "Run not found", "related_id": id, "detail": {"run_id": "r1"}})
    );

    // Finishing (payload or envelope run id) is silent; a second time is RUN_NOT_FOUND.
    a.request("RUN_FINISHED", json!({"run_id": "r1", "status": "OK"}))
        .await;
    a.send(&json!({"id": "f2", "run_id": "r2", "type": "RUN_FINISHED", "payload": {}}))
        .await;
    a.ping_marker().await;
    a.request("RUN_FINISHED", json!({"run_id": "r1"})).await;
    assert_eq!(a.expect_error().await["payload"]["code"], "RUN_NOT_FOUND");
    let id = a.request("RUN_FINISHED", json!({})).await;
    assert_eq!(
        a.expect_error().await["payload"],
        json!({"code": "MISSING_RUN_ID", "message": "Run ID is required", "related_id": id})
    );
    // RUN_ERROR is never answered, known run or not.
    a.request("RUN_STARTED", json!({"run_id": "r4"})).await;
    a.request(
        "RUN_ERROR",
        json!({"code": "X", "message": "m", "run_id": "r4"}),
    )
    .await;
    a.request("RUN_ERROR", json!({"code": "X", "message": "m"}))
        .await;
    a.ping_marker().await;
}

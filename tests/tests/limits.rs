//! Limits over a real WebSocket (docs/protocol.md §6.4 step 5, §12.2, §14.3, §15, §18):
//! many concurrent calls, queueing and rate limiting, a client that never
//! reads, oversized messages, `max_sessions`, and graceful shutdown.

use crate::support;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use haip::{Context, Limits, Tool, ToolError};
use serde_json::{Value, json};
use support::{
    Client, DropGuard, Ended, base_limits, builder, gated_tool, get_json, start, stats_until,
    within,
};
use tokio::sync::mpsc;
use tokio_tungstenite::connect_async;
use tokio_tungstenite::tungstenite::Message;

// ----- §6.4 step 5: admission ----------------------------------------------------------

/// Sends `n` echo calls at once, then reads until each has its one `TOOL_DONE`.
/// Returns (OK count, RATE_LIMITED count, QUEUED count).
async fn flood_echo(client: &mut Client, n: usize) -> (usize, usize, usize) {
    for i in 0..n {
        client
            .call(
                &format!("c{i}"),
                "echo",
                json!({ "message": format!("m{i}") }),
            )
            .await;
    }
    let expected: HashSet<String> = (0..n).map(|i| format!("c{i}")).collect();
    let mut done: HashMap<String, Value> = HashMap::new();
    let mut queued: HashSet<String> = HashSet::new();
    while done.len() < n {
        let env = client.recv().await;
        let call_id = env["payload"]["call_id"]
            .as_str()
            .unwrap_or_else(|| panic!("only call traffic expected: {env}"))
            .to_owned();
        assert!(expected.contains(&call_id), "unknown call id: {env}");
        match env["type"].as_str() {
            Some("TOOL_UPDATE") => {
                assert_eq!(
                    env["payload"],
                    json!({"call_id": call_id, "status": "QUEUED"}),
                    "only QUEUED updates are expected"
                );
                assert!(
                    !done.contains_key(&call_id),
                    "update after TOOL_DONE: {env}"
                );
                assert!(queued.insert(call_id), "QUEUED twice: {env}");
            }
            Some("TOOL_DONE") => {
                let payload = env["payload"].clone();
                assert!(
                    done.insert(call_id, payload).is_none(),
                    "a second TOOL_DONE for one call: {env}"
                );
            }
            _ => panic!("unexpected envelope: {env}"),
        }
    }
    assert_eq!(
        done.keys().cloned().collect::<HashSet<_>>(),
        expected,
        "every call gets a TOOL_DONE"
    );
    let (mut ok, mut limited) = (0, 0);
    for (call_id, payload) in &done {
        let i = &call_id[1..];
        match payload["status"].as_str() {
            Some("OK") => {
                assert_eq!(payload["result"], json!({ "echoed": format!("m{i}") }));
                ok += 1;
            }
            Some("ERROR") => {
                assert_eq!(
                    payload["result"],
                    json!({"error": "Too many tool calls in flight", "code": "RATE_LIMITED"}),
                    "{payload}"
                );
                assert!(
                    !queued.contains(call_id),
                    "a queued call is not rate limited"
                );
                limited += 1;
            }
            _ => panic!("unexpected TOOL_DONE: {payload}"),
        }
    }
    // Nothing more is owed.
    client.ping_marker().await;
    (ok, limited, queued.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_concurrent_calls_each_get_exactly_one_tool_done() {
    let (handle, url) = start(builder().builtin_tools()).await;
    let mut client = Client::connect(&url).await;
    let (ok, limited, queued) = flood_echo(&mut client, 500).await;
    eprintln!("default limits: {ok} OK, {limited} RATE_LIMITED, {queued} QUEUED");
    assert_eq!(ok + limited, 500);
    // With 64 executing and 256 waiting at most, at least 320 are admitted.
    assert!(ok >= 320, "{ok} OK");
    let stats = get_json(handle.local_addr(), "/stats").await;
    assert_eq!(stats["toolExecutions"]["total"], 500, "{stats}");
    assert_eq!(stats["toolExecutions"]["active"], 0, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_concurrent_calls_all_succeed_with_a_large_queue() {
    let (_handle, url) = start(builder().builtin_tools().limits(Limits {
        max_queued_calls: 1000,
        ..base_limits()
    }))
    .await;
    let mut client = Client::connect(&url).await;
    let (ok, limited, _queued) = flood_echo(&mut client, 500).await;
    assert_eq!((ok, limited), (500, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_beyond_inflight_are_queued_fifo_and_beyond_the_queue_rate_limited() {
    let (gated, mut gate) = gated_tool("gated");
    let (_handle, url) = start(
        builder()
            .builtin_tools()
            .limits(Limits {
                max_inflight_calls: 1,
                max_queued_calls: 2,
                ..base_limits()
            })
            .tool(gated),
    )
    .await;
    let mut client = Client::connect(&url).await;

    client.call("q1", "gated", json!({})).await;
    assert_eq!(gate.started().await, "q1");
    for id in ["q2", "q3"] {
        client.call(id, "gated", json!({})).await;
        assert_eq!(
            client.expect_update(id).await,
            json!({"call_id": id, "status": "QUEUED"})
        );
    }
    // Queue full: even a fast tool is rate limited.
    client.call("q4", "echo", json!({"message": "x"})).await;
    assert_eq!(
        client.expect_done("q4").await,
        json!({"call_id": "q4", "status": "ERROR", "result": {"error": "Too many tool calls in flight", "code": "RATE_LIMITED"}})
    );
    assert_eq!(gate.try_started(), None, "queued calls wait for a slot");

    // First in, first out, one slot at a time.
    gate.open(1);
    assert_eq!(
        client.expect_done("q1").await["result"],
        json!({"released": "q1"})
    );
    assert_eq!(gate.started().await, "q2");
    gate.open(1);
    assert_eq!(
        client.expect_done("q2").await["result"],
        json!({"released": "q2"})
    );
    assert_eq!(gate.started().await, "q3");

    // A queued call that is cancelled just leaves the queue and never runs.
    client.call("q5", "gated", json!({})).await;
    assert_eq!(client.expect_update("q5").await["status"], "QUEUED");
    client
        .request(
            "TOOL_CANCEL",
            json!({"call_id": "q5", "reason": "changed my mind"}),
        )
        .await;
    assert_eq!(
        client.expect_update("q5").await,
        json!({"call_id": "q5", "status": "CANCELLING"})
    );
    assert_eq!(
        client.expect_done("q5").await,
        json!({"call_id": "q5", "status": "CANCELLED", "result": {"reason": "changed my mind"}})
    );
    gate.open(1);
    assert_eq!(
        client.expect_done("q3").await["result"],
        json!({"released": "q3"})
    );
    client.ping_marker().await;
    assert_eq!(gate.runs(), 3, "q1, q2, q3 ran; q4 and q5 never did");
    assert_eq!(gate.try_started(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn announce_running_sends_running_when_a_queued_call_starts() {
    let (gated, mut gate) = gated_tool("gated");
    let (_handle, url) = start(
        builder()
            .announce_running(true)
            .limits(Limits {
                max_inflight_calls: 1,
                ..base_limits()
            })
            .tool(gated),
    )
    .await;
    let mut client = Client::connect(&url).await;
    client.call("a1", "gated", json!({})).await;
    assert_eq!(
        client.expect_update("a1").await,
        json!({"call_id": "a1", "status": "RUNNING"})
    );
    client.call("a2", "gated", json!({})).await;
    assert_eq!(client.expect_update("a2").await["status"], "QUEUED");
    gate.started().await;
    gate.open(1);
    assert_eq!(client.expect_done("a1").await["status"], "OK");
    assert_eq!(
        client.expect_update("a2").await,
        json!({"call_id": "a2", "status": "RUNNING"})
    );
    gate.open(1);
    assert_eq!(client.expect_done("a2").await["status"], "OK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_call_keeps_its_slot_until_it_stops() {
    let (dropped_tx, mut dropped_rx) = mpsc::unbounded_channel::<()>();
    let stubborn = Tool::builder("stubborn")
        .timeout(Duration::from_millis(100))
        .handler(move |_: Value, _ctx: Context| {
            let guard = DropGuard(dropped_tx.clone());
            async move {
                let _guard = guard;
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok::<_, ToolError>(json!("finished"))
            }
        })
        .build()
        .unwrap();
    let (_handle, url) = start(
        builder()
            .builtin_tools()
            .limits(Limits {
                max_inflight_calls: 1,
                cancel_grace: Duration::from_secs(1),
                ..base_limits()
            })
            .tool(stubborn),
    )
    .await;
    let mut client = Client::connect(&url).await;
    client.call("t1", "stubborn", json!({})).await;
    assert_eq!(client.expect_done("t1").await["result"]["code"], "TIMEOUT");
    // TOOL_DONE TIMEOUT is sent at the deadline, but the task keeps its slot
    // during the grace period: the next call has to wait.
    client.call("e1", "echo", json!({"message": "x"})).await;
    assert_eq!(
        client.expect_update("e1").await,
        json!({"call_id": "e1", "status": "QUEUED"})
    );
    assert_eq!(client.expect_done("e1").await["status"], "OK");
    assert!(
        dropped_rx.try_recv().is_ok(),
        "the timed-out task was aborted before the slot was freed"
    );
}

// ----- §12.2 a client that never reads ----------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_throttled_then_closed_and_the_server_stays_healthy() {
    let budget = 512 * 1024;
    let (handle, url) = start(builder().builtin_tools().limits(Limits {
        max_outbound_bytes: budget,
        idle_timeout: Duration::from_secs(2),
        ..base_limits()
    }))
    .await;
    let addr = handle.local_addr();
    let mut flooder = Client::connect(&url).await;

    // §18.1: above half the budget the server stops reading the flooder, so
    // its sends stall (TCP back-pressure) instead of piling up in memory.
    let message = "x".repeat(16 * 1024);
    let mut sent = 0usize;
    loop {
        let text = json!({"type": "TOOL_CALL", "payload": {
            "call_id": format!("f{sent}"), "tool": "echo", "params": {"message": message}
        }})
        .to_string();
        match tokio::time::timeout(Duration::from_secs(1), flooder.ws.send(Message::text(text)))
            .await
        {
            Ok(Ok(())) => sent += 1,
            Ok(Err(e)) => panic!("the connection failed after {sent} calls: {e}"),
            Err(_) => break, // stalled: the server stopped reading
        }
        assert!(
            sent < 5000,
            "80 MB sent and the server still reads a client that never reads"
        );
    }
    let stats = get_json(addr, "/stats").await;
    let outbound = stats["outboundBytes"].as_u64().unwrap();
    assert!(
        outbound <= budget as u64 + 64 * 1024,
        "outbound bytes within the budget: {outbound} after {sent} calls"
    );
    // Everyone else is served meanwhile (a client connected now: one
    // connected before would have been idle as long as the flood took).
    let mut canary = Client::connect(&url).await;
    let done = canary
        .call_done("ok", "echo", json!({"message": "still here"}))
        .await;
    assert_eq!(done["result"], json!({"echoed": "still here"}));

    // Reading now drains what was buffered, then the close: either the
    // flooder sent nothing the server read for `idle_timeout` (1001), or the
    // calls read before the pause produced more than the budget behind the
    // envelope being written (1008; how many were read before the pause
    // depends on how fast the tools ran meanwhile).
    let (texts, ended) = flooder.read_to_end().await;
    eprintln!(
        "flooder: {sent} calls sent; read {} messages, then {ended:?}",
        texts.len()
    );
    assert!(!texts.is_empty());
    let counter = match &ended {
        Ended::Closed(Some((1001, reason))) if reason == "idle" => "idle",
        Ended::Closed(Some((1008, reason))) if reason == "too slow" => "tooSlow",
        other => panic!("expected close 1001 idle or 1008 too slow, got {other:?}"),
    };
    stats_until(addr, "the close counted", |s| {
        s["connectionsClosed"][counter].as_u64() >= Some(1)
    })
    .await;
    let mut client = Client::connect(&url).await;
    let done = client
        .call_done("after", "echo", json!({"message": "fine"}))
        .await;
    assert_eq!(done["status"], "OK");
}

// ----- §2.2 step 1: oversized messages ----------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_gets_message_too_large_then_close_1009() {
    let (handle, url) = start(builder().builtin_tools().limits(Limits {
        max_message_bytes: 1024,
        ..base_limits()
    }))
    .await;
    let mut client = Client::connect(&url).await;

    // Exactly at the limit is fine.
    let frame = |pad: usize| {
        json!({"type": "TOOL_CALL", "payload": {"call_id": "big", "tool": "echo",
               "params": {"message": "x".repeat(pad)}}})
        .to_string()
    };
    let base = frame(0).len();
    let at_limit = frame(1024 - base);
    assert_eq!(at_limit.len(), 1024);
    client.send_text(&at_limit).await;
    assert_eq!(client.expect_done("big").await["status"], "OK");

    let over = frame(1025 - base);
    assert_eq!(over.len(), 1025);
    client.send_text(&over).await;
    let err = client.expect_error().await;
    assert_eq!(
        err["payload"],
        json!({"code": "MESSAGE_TOO_LARGE", "message": "Message exceeds 1024 bytes", "detail": {"limit": 1024}})
    );
    let (code, reason) = client.expect_close().await;
    assert_eq!((code, reason.as_str()), (1009, "message too large"));

    // Others are unaffected.
    let mut other = Client::connect(&url).await;
    other.ping_marker().await;
    assert_eq!(
        get_json(handle.local_addr(), "/health").await["status"],
        "ok"
    );
}

// ----- §18 max_sessions ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_max_sessions_the_upgrade_completes_then_closes_1013() {
    let (handle, url) = start(builder().limits(Limits {
        max_sessions: 1,
        ..base_limits()
    }))
    .await;
    let first = Client::connect(&url).await;

    let (mut ws, _) = within("the second upgrade", connect_async(&url))
        .await
        .expect("the upgrade completes even over max_sessions");
    match within("the close frame", ws.next()).await {
        Some(Ok(Message::Close(Some(frame)))) => {
            assert_eq!(
                (u16::from(frame.code), frame.reason.as_str()),
                (1013, "too many sessions")
            );
        }
        other => panic!("expected close 1013 and no HAI, got {other:?}"),
    }
    let stats = get_json(handle.local_addr(), "/stats").await;
    assert_eq!(stats["activeConnections"], 1, "{stats}");
    assert_eq!(stats["totalConnections"], 1, "{stats}");

    // Once the first session is gone, a new one is admitted.
    first.close().await;
    stats_until(handle.local_addr(), "the first session gone", |s| {
        s["activeConnections"] == 0
    })
    .await;
    let mut again = Client::connect(&url).await;
    again.ping_marker().await;
}

// ----- §15 graceful shutdown ----------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_cancels_calls_then_closes_1001() {
    let (gated, mut gate) = gated_tool("gated");
    let (handle, url) = start(
        builder()
            .limits(Limits {
                max_inflight_calls: 1,
                ..base_limits()
            })
            .tool(gated),
    )
    .await;
    let mut client = Client::connect(&url).await;
    let mut idle = Client::connect(&url).await;

    client.call("long", "gated", json!({})).await;
    assert_eq!(gate.started().await, "long");
    client.call("waiting", "gated", json!({})).await;
    assert_eq!(client.expect_update("waiting").await["status"], "QUEUED");

    let h = handle.clone();
    let shutdown = tokio::spawn(async move { h.shutdown().await });

    // Per call: CANCELLING, then TOOL_DONE CANCELLED "server shutdown".
    let mut per_call: HashMap<String, Vec<Value>> = HashMap::new();
    for _ in 0..4 {
        let env = client.recv().await;
        let call_id = env["payload"]["call_id"].as_str().unwrap().to_owned();
        per_call.entry(call_id).or_default().push(env);
    }
    for call_id in ["long", "waiting"] {
        let envs = &per_call[call_id];
        assert_eq!(envs.len(), 2, "{envs:?}");
        assert_eq!(envs[0]["type"], "TOOL_UPDATE");
        assert_eq!(
            envs[0]["payload"],
            json!({"call_id": call_id, "status": "CANCELLING"})
        );
        assert_eq!(envs[1]["type"], "TOOL_DONE");
        assert_eq!(
            envs[1]["payload"],
            json!({"call_id": call_id, "status": "CANCELLED", "result": {"reason": "server shutdown"}})
        );
    }
    assert_eq!(
        gate.cancelled().await,
        "long",
        "the running tool saw the cancel"
    );
    let (code, reason) = client.expect_close().await;
    assert_eq!((code, reason.as_str()), (1001, "server shutdown"));
    let (code, reason) = idle.expect_close().await;
    assert_eq!((code, reason.as_str()), (1001, "server shutdown"));

    within("shutdown() to resolve", shutdown)
        .await
        .expect("shutdown task");
    assert_eq!(gate.runs(), 1, "the queued call never ran");

    // New connections are refused.
    let refused = within("a connection attempt after shutdown", connect_async(&url)).await;
    assert!(
        refused.is_err(),
        "the server must refuse connections after shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_no_connections_resolves_and_frees_the_port() {
    let (handle, url) = start(builder()).await;
    within("shutdown() to resolve", handle.shutdown()).await;
    assert!(
        within("a connection attempt", connect_async(&url))
            .await
            .is_err()
    );
}

// ----- §6.5 progress under back-pressure ------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_progress_is_merged_latest_wins_and_never_overflows() {
    const REPORTS: u64 = 20_000;
    let (reported_tx, mut reported_rx) = mpsc::unbounded_channel::<()>();
    let chatty = Tool::builder("chatty")
        .handler(move |_: Value, ctx: Context| {
            let reported = reported_tx.clone();
            async move {
                for i in 1..=REPORTS {
                    ctx.progress_with(i as f64 * 100.0 / REPORTS as f64, json!({ "i": i }));
                    if i % 16 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                let _ = reported.send(());
                Ok::<_, ToolError>(json!({ "reports": REPORTS }))
            }
        })
        .build()
        .unwrap();
    // The smallest outbound bound: without merging, 20 000 updates to a client
    // that is not reading would overflow it.
    let (_handle, url) = start(
        builder()
            .limits(Limits {
                max_outbound_queue: 16,
                ..base_limits()
            })
            .tool(chatty),
    )
    .await;
    let mut client = Client::connect(&url).await;
    client.call("p1", "chatty", json!({})).await;
    // Not reading while the tool reports.
    within("the tool to finish reporting", reported_rx.recv()).await;

    let mut updates = 0u64;
    let mut last_i = 0u64;
    let mut last_update = Value::Null;
    loop {
        let env = client.recv().await;
        assert_eq!(env["payload"]["call_id"], "p1", "{env}");
        match env["type"].as_str() {
            Some("TOOL_UPDATE") => {
                let i = env["payload"]["partial"]["i"].as_u64().unwrap();
                assert!(i > last_i, "progress goes forward only: {i} after {last_i}");
                assert_eq!(env["payload"]["status"], "RUNNING");
                last_i = i;
                updates += 1;
                last_update = env["payload"].clone();
            }
            Some("TOOL_DONE") => {
                assert_eq!(env["payload"]["result"], json!({ "reports": REPORTS }));
                break;
            }
            _ => panic!("unexpected envelope: {env}"),
        }
    }
    eprintln!("{REPORTS} progress reports arrived as {updates} updates");
    assert!(updates <= REPORTS);
    // The latest report is never lost: it is flushed before TOOL_DONE.
    assert_eq!(
        last_update,
        json!({"call_id": "p1", "status": "RUNNING", "progress": 100, "partial": {"i": REPORTS}})
    );
    client.ping_marker().await;
}

/// Graceful shutdown is bounded even when a client has stopped reading and
/// its socket is full: the server gives up on it instead of waiting for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_does_not_wait_for_a_client_that_stopped_reading() {
    let (handle, url) = start(builder().builtin_tools().limits(Limits {
        cancel_grace: Duration::from_millis(100),
        max_outbound_bytes: 64 * 1024 * 1024,
        ..base_limits()
    }))
    .await;
    let mut stuck = Client::connect(&url).await;
    // About 16 MiB of replies: more than loopback socket buffers hold, far
    // less than the outbound budget, so the session keeps reading and waits
    // to write.
    let message = "x".repeat(16 * 1024);
    for i in 0..1000 {
        let text = json!({"type": "TOOL_CALL", "payload": {
            "call_id": format!("s{i}"), "tool": "echo", "params": {"message": message}
        }})
        .to_string();
        within("sending", stuck.ws.send(Message::text(text)))
            .await
            .unwrap();
    }
    let started = Instant::now();
    within("shutdown", handle.shutdown()).await;
    eprintln!("shutdown with a stuck client took {:?}", started.elapsed());
    drop(stuck);
}

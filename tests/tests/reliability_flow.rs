//! Flow control and runs on the real wire (docs/protocol.md §8, §12, §14.2): a client
//! that honours its 10-message credit never stalls; paused channels hold their
//! traffic (also across a resumption); strict mode drops envelopes beyond
//! credit; run limits, `RUN_FINISHED`, `RUN_CANCEL` and their errors.

use crate::support;

use std::collections::{BTreeSet, HashMap};

use haip::Limits;
use serde_json::{Value, json};
use support::{
    Client, base_limits, builder, executions, gated_tool, get_json, resume_hai, seq_of, start,
    stats_until,
};

/// The `HAI` of a client that asks for credit returns: flow control with 10
/// messages per channel, `FLOW_UPDATE` accepted.
fn credit_hai() -> Value {
    json!({"id": "hai", "channel": "SYSTEM", "type": "HAI", "payload": {
        "haip_version": "1.1.2", "accept_major": [1],
        "accept_events": ["HAI", "PING", "PONG", "ERROR", "TOOL_UPDATE", "TOOL_DONE", "FLOW_UPDATE"],
        "capabilities": {"flow_control": {"initial_credit_messages": 10, "initial_credit_bytes": 65536}}
    }})
}

/// §12.1: a client modelled on the upstream SDK — 10 credits per channel,
/// sending only while it has credit and waiting for `FLOW_UPDATE`s otherwise —
/// gets all of 1000 calls done without ever stalling.
#[tokio::test]
async fn credit_limited_client_never_stalls() {
    credit_limited_client(false).await;
}

/// [`credit_limited_client_never_stalls`] against a server in strict mode:
/// strict mode enforces inbound credit (§12.3) and honours the credit the
/// client advertised for outbound traffic, so this client also grants the
/// server more (`FLOW_UPDATE` on AGENT) as it consumes replies.
#[tokio::test]
async fn credit_limited_client_never_stalls_in_strict_mode() {
    credit_limited_client(true).await;
}

async fn credit_limited_client(strict: bool) {
    const CALLS: usize = 1000;
    let server = builder().builtin_tools().strict_flow_control(strict);
    let (handle, url) = start(server).await;
    let mut c = Client::connect(&url).await;
    let mut credit: HashMap<String, i64> = HashMap::new();
    let spend = |credit: &mut HashMap<String, i64>, channel: &str| {
        let left = credit.entry(channel.to_owned()).or_insert(10);
        assert!(
            *left > 0,
            "the client never sends without credit on {channel}"
        );
        *left -= 1;
    };
    c.send(&credit_hai()).await;
    spend(&mut credit, "SYSTEM");
    let (mut next, mut dones, mut returned) = (0, BTreeSet::new(), 0);
    // Strict mode: AGENT replies spend the 10 credits this client advertised;
    // it grants 10 more for every 10 it has consumed.
    let mut consumed_unreturned = 0;
    while dones.len() < CALLS {
        while next < CALLS && credit.get("USER").copied().unwrap_or(10) > 0 {
            c.call(
                &format!("c{next}"),
                "echo",
                json!({"message": next.to_string()}),
            )
            .await;
            spend(&mut credit, "USER");
            next += 1;
        }
        let env = c.recv().await;
        let p = &env["payload"];
        match env["type"].as_str() {
            Some("FLOW_UPDATE") => {
                let channel = p["channel"].as_str().expect("a channel").to_owned();
                let add = p["add_messages"].as_i64().expect("add_messages");
                assert!(add >= 1 && p["add_bytes"].as_i64() >= Some(1), "{env}");
                assert_eq!(env["channel"], "SYSTEM", "{env}");
                if channel == "USER" {
                    returned += add;
                }
                *credit.entry(channel).or_insert(10) += add;
            }
            Some("TOOL_DONE") => {
                assert_eq!(p["status"], "OK", "{env}");
                let id = p["call_id"].as_str().expect("a call_id").to_owned();
                assert!(dones.insert(id), "one TOOL_DONE per call: {env}");
                consumed_unreturned += 1;
            }
            _ => panic!("unexpected envelope {env}"),
        }
        if strict && consumed_unreturned >= 10 && credit.get("SYSTEM").copied().unwrap_or(10) > 0 {
            c.send(&json!({"channel": "SYSTEM", "type": "FLOW_UPDATE",
                "payload": {"channel": "AGENT", "add_messages": consumed_unreturned, "add_bytes": 65536}}))
                .await;
            spend(&mut credit, "SYSTEM");
            consumed_unreturned = 0;
        }
    }
    assert_eq!(
        returned, CALLS as i64,
        "every handled call's credit came back"
    );
    // Nothing else is owed, except maybe the return of the SYSTEM credit the
    // client's last FLOW_UPDATEs spent (it follows them, so it may come after
    // the last TOOL_DONE).
    c.request("PING", json!({ "nonce": "end" })).await;
    loop {
        let env = c.recv().await;
        match env["type"].as_str() {
            Some("PONG") => break,
            Some("FLOW_UPDATE") if env["payload"]["channel"] == "SYSTEM" => {}
            _ => panic!("expected nothing but SYSTEM credit before the PONG, got {env}"),
        }
    }
    c.close().await;
    handle.shutdown().await;
}

/// §12.2: `PAUSE_CHANNEL AGENT` holds replies and `TOOL_DONE`s while `SYSTEM`
/// traffic flows (pausing `SYSTEM` has no effect); `RESUME_CHANNEL` releases
/// them in order, with consecutive `seq`s.
#[tokio::test]
async fn paused_channel_holds_traffic_until_resumed() {
    let (handle, url) = start(builder().builtin_tools()).await;
    let addr = handle.local_addr();
    let mut c = Client::connect(&url).await;
    c.request("PAUSE_CHANNEL", json!({"channel": "SYSTEM"}))
        .await;
    c.request("PAUSE_CHANNEL", json!({"channel": "AGENT"}))
        .await;
    c.request("TOOL_SCHEMA", json!({"tool": "echo"})).await;
    c.request("TOOL_SCHEMA", json!({"tool": "add"})).await;
    c.request("TOOL_LIST", json!({})).await;
    for i in 0..3 {
        c.call(&format!("p{i}"), "echo", json!({"message": i.to_string()}))
            .await;
    }
    c.ping_marker().await;
    stats_until(addr, "the held calls finished", |s| executions(s)[1] == 3).await;
    c.ping_marker().await; // still only SYSTEM traffic
    c.request("RESUME_CHANNEL", json!({"channel": "AGENT"}))
        .await;
    let schema = c.recv().await;
    assert_eq!(
        (&schema["type"], &schema["payload"]["tool"]),
        (&json!("TOOL_SCHEMA"), &json!("echo"))
    );
    assert_eq!(c.recv().await["payload"]["tool"], "add");
    assert_eq!(c.recv().await["type"], "TOOL_LIST");
    let mut done = BTreeSet::new();
    for _ in 0..3 {
        let env = c.recv().await;
        assert_eq!(env["type"], "TOOL_DONE", "{env}");
        done.insert(env["payload"]["call_id"].as_str().unwrap_or("").to_owned());
    }
    assert_eq!(done, BTreeSet::from(["p0", "p1", "p2"].map(String::from)));
    c.ping_marker().await;
    c.close().await;
    handle.shutdown().await;
}

/// §12.2, §11.3: pause state belongs to the session: a `TOOL_DONE` held by a
/// paused channel stays held across a lost connection and a resumption (it
/// is not replayed: it was never committed), and comes after the confirming
/// `HAI` once the channel is resumed.
#[tokio::test]
async fn pause_state_survives_resumption() {
    let (handle, url) = start(builder().builtin_tools()).await;
    let addr = handle.local_addr();
    let mut a = Client::connect(&url).await;
    let old = a.session.clone();
    a.request("PAUSE_CHANNEL", json!({"channel": "AGENT"}))
        .await;
    a.call("held", "echo", json!({"message": "wait"})).await;
    a.ping_marker().await; // seq 2
    stats_until(addr, "the held call finished", |s| executions(s)[1] == 1).await;
    drop(a);
    stats_until(addr, "the session kept", |s| s["detachedSessions"] == 1).await;

    let mut b = Client::connect_raw(&url).await;
    b.send(&resume_hai("r", &old, "2")).await;
    let hai = b.recv().await;
    assert_eq!(
        (&hai["type"], &hai["session"], seq_of(&hai)),
        (&json!("HAI"), &json!(old), 3),
        "nothing was committed while paused: {hai}"
    );
    b.follow(&old, 3);
    b.ping_marker().await; // seq 4: AGENT still paused
    b.request("RESUME_CHANNEL", json!({"channel": "AGENT"}))
        .await;
    let done = b.expect_done("held").await;
    assert_eq!(done["result"], json!({"echoed": "wait"}));
    assert_eq!(b.last_seq(), 5);
    b.close().await;
    handle.shutdown().await;
}

/// §12.3: with `strict_flow_control` and 3 credits, the 4th envelope on a
/// channel is dropped with `FLOW_CONTROL_VIOLATION` (a dropped `TOOL_CALL` is
/// never accepted: no `TOOL_DONE`); each channel has its own credit, and a
/// client not asking for `FLOW_UPDATE` gets none back.
#[tokio::test]
async fn strict_mode_drops_envelopes_beyond_credit() {
    let server = builder()
        .builtin_tools()
        .strict_flow_control(true)
        .limits(Limits {
            initial_credit_messages: 3,
            ..base_limits()
        });
    let (handle, url) = start(server).await;
    let addr = handle.local_addr();
    let mut c = Client::connect(&url).await;
    assert_eq!(
        c.hai["payload"]["capabilities"]["flow_control"]["initial_credit_messages"],
        3
    );
    c.request(
        "HAI",
        json!({"accept_events": ["HAI", "PONG", "ERROR", "TOOL_DONE"]}),
    )
    .await; // SYSTEM: 2 left
    for i in 1..=3 {
        let done = c
            .call_done(&format!("c{i}"), "echo", json!({"message": "x"}))
            .await;
        assert_eq!(done["status"], "OK");
    }
    let violation = |id: &str, channel: &str| {
        json!({"code": "FLOW_CONTROL_VIOLATION", "message": "Insufficient credits for channel",
               "related_id": id, "detail": {"channel": channel, "reason": "INSUFFICIENT_CREDITS"}})
    };
    let id = c.call("c4", "echo", json!({"message": "dropped"})).await;
    assert_eq!(c.expect_error().await["payload"], violation(&id, "USER"));
    // AGENT has credit of its own.
    c.send(
        &json!({"id": "on-agent", "channel": "AGENT", "type": "TOOL_CALL",
                   "payload": {"call_id": "c5", "tool": "echo", "params": {"message": "y"}}}),
    )
    .await;
    c.expect_done("c5").await;
    c.ping_marker().await; // SYSTEM: 1 left; no TOOL_DONE for c4 came first
    c.ping_marker().await; // SYSTEM: 0 left
    let id = c.request("PING", json!({"nonce": "over"})).await;
    assert_eq!(c.expect_error().await["payload"], violation(&id, "SYSTEM"));
    let stats = get_json(addr, "/stats").await;
    assert_eq!(
        executions(&stats),
        [4, 4, 0, 0, 0],
        "c4 was not accepted: {stats}"
    );
    c.close().await;
    handle.shutdown().await;
}

fn error(code: &str, message: &str, related_id: &str, detail: Option<Value>) -> Value {
    let mut e = json!({"code": code, "message": message, "related_id": related_id});
    if let Some(detail) = detail {
        e["detail"] = detail;
    }
    e
}

/// §8: `max_concurrent_runs` is advertised and enforced; finishing (or
/// `RUN_ERROR`) frees a slot; restarting an active run is ignored; unknown
/// and missing run ids are errors.
#[tokio::test]
async fn run_limit_and_run_errors() {
    let (handle, url) = start(builder().limits(Limits {
        max_concurrent_runs: 2,
        ..base_limits()
    }))
    .await;
    let mut c = Client::connect(&url).await;
    assert_eq!(c.hai["payload"]["capabilities"]["max_concurrent_runs"], 2);
    let limit = |id: &str| {
        error(
            "RUN_LIMIT_EXCEEDED",
            "Too many concurrent runs",
            id,
            Some(json!({"max_concurrent_runs": 2})),
        )
    };
    c.request("RUN_STARTED", json!({"run_id": "r1"})).await;
    c.send(&json!({"id": "s2", "run_id": "r2", "type": "RUN_STARTED", "payload": {}}))
        .await;
    c.request("RUN_STARTED", json!({"run_id": "r1"})).await; // already active: ignored
    c.ping_marker().await;
    let id = c.request("RUN_STARTED", json!({"run_id": "r3"})).await;
    assert_eq!(c.expect_error().await["payload"], limit(&id));
    let id = c.request("RUN_STARTED", json!({})).await; // a new id, still over
    assert_eq!(c.expect_error().await["payload"], limit(&id));

    c.request("RUN_FINISHED", json!({"run_id": "r1", "status": "OK"}))
        .await;
    c.request("RUN_STARTED", json!({"run_id": "r3"})).await;
    c.request(
        "RUN_ERROR",
        json!({"code": "X", "message": "m", "run_id": "r2"}),
    )
    .await;
    c.request("RUN_STARTED", json!({"run_id": "r4"})).await;
    c.ping_marker().await;
    let id = c.request("RUN_STARTED", json!({"run_id": "r5"})).await;
    assert_eq!(c.expect_error().await["payload"], limit(&id));

    for (ty, payload) in [
        ("RUN_FINISHED", json!({"run_id": "r1"})),
        ("RUN_CANCEL", json!({"run_id": "nope"})),
    ] {
        let run = payload["run_id"].clone();
        let id = c.request(ty, payload).await;
        let expected = error(
            "RUN_NOT_FOUND",
            "Run not found",
            &id,
            Some(json!({"run_id": run})),
        );
        assert_eq!(c.expect_error().await["payload"], expected, "{ty}");
    }
    for ty in ["RUN_FINISHED", "RUN_CANCEL"] {
        let id = c.request(ty, json!({"status": "OK"})).await;
        let expected = error("MISSING_RUN_ID", "Run ID is required", &id, None);
        assert_eq!(c.expect_error().await["payload"], expected, "{ty}");
    }
    c.ping_marker().await;
    c.close().await;
    handle.shutdown().await;
}

/// §8, §6.7, §6.9: `RUN_CANCEL` cancels every active call carrying the run id
/// (envelope `run_id` or `payload.run_id`): `CANCELLING` for each, then
/// `TOOL_DONE CANCELLED` `{"reason":"run cancelled"}`, with the run id (and
/// thread id) copied onto those envelopes; other runs' calls go on.
#[tokio::test]
async fn run_cancel_cancels_the_runs_calls() {
    let (tool, mut gate) = gated_tool("gated");
    let (handle, url) = start(builder().tool(tool)).await;
    let addr = handle.local_addr();
    let mut c = Client::connect(&url).await;
    let call = |call_id: &str| json!({"call_id": call_id, "tool": "gated"});
    let mut g2 = call("g2");
    g2["run_id"] = json!("rx");
    for env in [
        json!({"id": "g1", "run_id": "rx", "thread_id": "t1", "type": "TOOL_CALL", "payload": call("g1")}),
        json!({"id": "g2", "type": "TOOL_CALL", "payload": g2}),
        json!({"id": "g3", "run_id": "rx", "type": "TOOL_CALL", "payload": call("g3")}),
        json!({"id": "g4", "run_id": "ry", "type": "TOOL_CALL", "payload": call("g4")}),
    ] {
        c.send(&env).await;
    }
    let mut started = BTreeSet::new();
    for _ in 0..4 {
        started.insert(gate.started().await);
    }
    assert_eq!(started.len(), 4);
    c.request("RUN_CANCEL", json!({"run_id": "rx"})).await;
    for call_id in ["g1", "g2", "g3"] {
        let env = c.recv().await;
        assert_eq!(
            (&env["type"], &env["payload"], &env["run_id"]),
            (
                &json!("TOOL_UPDATE"),
                &json!({"call_id": call_id, "status": "CANCELLING"}),
                &json!("rx")
            ),
            "{env}"
        );
        let thread = if call_id == "g1" {
            json!("t1")
        } else {
            Value::Null
        };
        assert_eq!(env["thread_id"], thread, "{env}");
    }
    let mut cancelled = BTreeSet::new();
    for _ in 0..3 {
        let env = c.recv().await;
        assert_eq!(
            (
                &env["type"],
                &env["payload"]["status"],
                &env["payload"]["result"],
                &env["run_id"]
            ),
            (
                &json!("TOOL_DONE"),
                &json!("CANCELLED"),
                &json!({"reason": "run cancelled"}),
                &json!("rx")
            ),
            "{env}"
        );
        cancelled.insert(env["payload"]["call_id"].as_str().unwrap_or("").to_owned());
    }
    assert_eq!(
        cancelled,
        BTreeSet::from(["g1", "g2", "g3"].map(String::from))
    );
    for _ in 0..3 {
        assert_ne!(gate.cancelled().await, "g4");
    }
    c.ping_marker().await; // no late progress, no second TOOL_DONE
    let id = c.request("RUN_CANCEL", json!({"run_id": "rx"})).await;
    assert_eq!(
        c.expect_error().await["payload"],
        error(
            "RUN_NOT_FOUND",
            "Run not found",
            &id,
            Some(json!({"run_id": "rx"}))
        )
    );
    gate.open(1);
    let done = c.recv().await;
    assert_eq!(
        (&done["type"], &done["payload"], &done["run_id"]),
        (
            &json!("TOOL_DONE"),
            &json!({"call_id": "g4", "status": "OK", "result": {"released": "g4"}}),
            &json!("ry")
        ),
        "{done}"
    );
    let stats = get_json(addr, "/stats").await;
    assert_eq!(executions(&stats), [4, 1, 0, 3, 0], "{stats}");
    c.close().await;
    handle.shutdown().await;
}

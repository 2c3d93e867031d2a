//! Sessions shared through Redis (feature `redis`): a real `redis-server`
//! (installed and started by the test support on a free loopback port) and
//! haip instances on loopback.
//!
//! - An instance killed with `kill -9` mid-call, its client resuming on
//!   another instance at once (WebSocket and SSE): the resumption is held
//!   until the dead instance's lease expires, never refused; the session is
//!   restored there, which replays what the client missed (the finished
//!   call's `TOOL_DONE` among it) and ends the running call with `TOOL_DONE
//!   ERROR INTERNAL_ERROR` "instance lost": still exactly one `TOOL_DONE`
//!   per call.
//! - A client that moves to another instance while the first is alive: the
//!   session goes on running where its calls are, relayed through the
//!   instance the client is on: the replay has no gap and no duplicate, a
//!   call finishes through it, and a cancel sent to it stops the call.
//! - A resumption relayed to the instance running the session and refused
//!   there leaves the client on the fresh session it was greeted with, which
//!   works on; the relayed connection counts once in the cluster's totals.
//! - An SSE stream on one instance, its upstream POSTs sent to another: they
//!   are forwarded, and the replies arrive on the stream.
//! - With authentication on, the caller moves with the client: relayed to
//!   the instance its session runs on, the resuming connection's token (and
//!   its scopes) is what counts there, for the tools listed and called.
//! - Redis absent at start: the server does not start, and says where it
//!   looked.
//! - Redis stopped and restarted while running: sessions go on working,
//!   resumption elsewhere answers `RESUME_FAILED` with the reason, `/stats`
//!   says Redis is unreachable, then reachable again; a session whose
//!   records were lost meanwhile is marked, and is not restored from them
//!   once its instance stops.

use crate::conn;
use crate::mcp_support;
use crate::redis_support;
use crate::support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use conn::{Conn, Kind, assert_ok, http, post};
use haip::{Context, haip_tool};
use redis_support::RedisServer;
use serde_json::{Value, json};
use support::{demo_builder, resume_hai, start};
use tokio::sync::Notify;

/// Gates by name, opened by the tests that wait on them (tests run side by
/// side in this process: each has its own).
static GATES: LazyLock<Mutex<HashMap<String, Arc<Notify>>>> = LazyLock::new(Default::default);

pub(crate) fn gate(name: &str) -> Arc<Notify> {
    let mut gates = GATES.lock().unwrap();
    Arc::clone(gates.entry(name.to_owned()).or_default())
}

/// Returns once the test opens gate `name`.
#[haip_tool]
async fn gated(name: String) -> String {
    gate(&name).notified().await;
    "released".to_owned()
}

/// Reports that it started, then runs until cancelled.
#[haip_tool(timeout = "60s")]
async fn hold(ctx: Context) -> Result<String, haip::ToolError> {
    ctx.progress(1.0);
    ctx.cancelled().await;
    Err(haip::ToolError::cancelled())
}

/// Two in-process instances, `a` and `b`, sharing `redis`.
async fn pair(redis: &RedisServer) -> (haip::ServerHandle, haip::ServerHandle) {
    pair_at(&redis.url()).await
}

/// Two in-process instances, `a` and `b`, sharing the Redis at `url`, with
/// the tools [`gated`] (opened by [`gate`]) and [`hold`] beside the demo's.
pub(crate) async fn pair_at(url: &str) -> (haip::ServerHandle, haip::ServerHandle) {
    let builder = |id: &str| {
        demo_builder()
            .tool(gated::tool())
            .tool(hold::tool())
            .redis(url)
            .instance_id(id)
    };
    let (a, _) = start(builder("a")).await;
    let (b, _) = start(builder("b")).await;
    (a, b)
}

async fn a_client_moves_to_a_live_instance_and_its_calls_follow(kind: Kind) {
    let redis = RedisServer::start();
    let (a, b) = pair(&redis).await;
    let mut conn = Conn::connect(kind, a.local_addr(), None).await;
    let session = conn.session.clone();
    let done = conn
        .call_done("e1", "echo", json!({"message": "on a"}))
        .await;
    assert_eq!(done["status"], "OK");
    // What the client will say it saw; the rest is replayed.
    let seen = conn.last_seq();
    conn.call("h1", "hold", json!({})).await;
    let update = conn.expect_update("h1").await;
    assert_eq!(update["status"], "RUNNING", "{update}");
    let gate_name = format!("{kind:?}");
    conn.call("g1", "gated", json!({ "name": gate_name })).await;
    drop(conn);

    let mut conn = Conn::connect(kind, b.local_addr(), None).await;
    conn.send(&resume_hai("r", &session, &seen.to_string()))
        .await;
    // From here every envelope is checked: on the session, each `seq` one
    // more than the last.
    conn.follow(&session, seen);
    let mut confirmed = false;
    while !confirmed {
        let env = conn.recv().await;
        match env["type"].as_str() {
            Some("HAI") => confirmed = true,
            Some("TOOL_UPDATE") => assert_eq!(env["payload"]["call_id"], "h1", "{env}"),
            other => panic!("unexpected {other:?}: {env}"),
        }
    }
    // Calls made through b run where the session is.
    let done = conn
        .call_done("e2", "echo", json!({"message": "through b"}))
        .await;
    assert_eq!(done["result"], json!({"echoed": "through b"}));
    // A call that started on a finishes through b.
    gate(&gate_name).notify_one();
    let done = conn.expect_done("g1").await;
    assert_eq!(done["result"], "released", "{done}");
    // A cancel sent to b stops the call on a.
    conn.request("TOOL_CANCEL", json!({"call_id": "h1"})).await;
    let update = conn.expect_update("h1").await;
    assert_eq!(update["status"], "CANCELLING", "{update}");
    let done = conn.expect_done("h1").await;
    assert_eq!(done["status"], "CANCELLED", "{done}");
    // Exactly one TOOL_DONE each: nothing else is owed.
    conn.ping_marker().await;
    let a_stats = http(a.local_addr(), "GET", "/stats", &[], "").await;
    let a_stats: Value = serde_json::from_str(&a_stats.body).unwrap();
    assert_eq!(a_stats["instance"], "a");
}

/// An HS256 token of `alice` with `scope`.
fn token_with(scope: &str) -> String {
    use jsonwebtoken::{EncodingKey, Header, encode};
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 300;
    let claims = json!({"sub": "alice", "scope": scope, "exp": exp});
    encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
    )
    .unwrap()
}

const SECRET: &str = "a cluster secret of a reasonable length";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resuming_connections_scopes_count_where_the_session_runs() {
    let redis = RedisServer::start();
    let builder = |id: &str| {
        demo_builder()
            .tool(hold::tool())
            .jwt_hs256(SECRET)
            .redis(redis.url())
            .instance_id(id)
    };
    let (a, _) = start(builder("a")).await;
    let (b, _) = start(builder("b")).await;
    let names = |list: &Value| -> Vec<String> {
        list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };

    // On a, without `users:write`: no `create_user`, and a call that keeps
    // the session there.
    let plain = token_with("");
    let mut conn = Conn::connect(Kind::Ws, a.local_addr(), Some(&plain)).await;
    let session = conn.session.clone();
    conn.request("TOOL_LIST", json!({})).await;
    let list = conn.recv().await;
    assert!(!names(&list["payload"]).contains(&"create_user".to_owned()));
    conn.call("h1", "hold", json!({})).await;
    conn.expect_update("h1").await;
    let seen = conn.last_seq();
    drop(conn);

    // Back through b with `users:write`: relayed to a, where the new scopes
    // count.
    let writer = token_with("users:write");
    let mut conn = Conn::connect(Kind::Ws, b.local_addr(), Some(&writer)).await;
    conn.send(&resume_hai("r", &session, &seen.to_string()))
        .await;
    conn.follow(&session, seen);
    loop {
        let env = conn.recv().await;
        if env["type"] == "HAI" {
            break;
        }
    }
    conn.request("TOOL_LIST", json!({})).await;
    let list = loop {
        let env = conn.recv().await;
        if env["type"] == "TOOL_LIST" {
            break env;
        }
    };
    assert!(
        names(&list["payload"]).contains(&"create_user".to_owned()),
        "{list}"
    );
    let done = conn
        .call_done(
            "c1",
            "create_user",
            json!({"username": "alice_1", "email": "a@example.com", "age": 30}),
        )
        .await;
    assert_eq!(done["status"], "OK", "{done}");
    conn.request("TOOL_CANCEL", json!({"call_id": "h1"})).await;
    let update = conn.expect_update("h1").await;
    assert_eq!(update["status"], "CANCELLING", "{update}");
    let done = conn.expect_done("h1").await;
    assert_eq!(done["status"], "CANCELLED", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_moves_to_a_live_instance_and_its_calls_follow_ws() {
    a_client_moves_to_a_live_instance_and_its_calls_follow(Kind::Ws).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_moves_to_a_live_instance_and_its_calls_follow_sse() {
    a_client_moves_to_a_live_instance_and_its_calls_follow(Kind::Sse).await;
}

/// A resumption relayed to the live instance running the session, and
/// refused there: the client stays on the fresh session it was greeted with
/// (docs/protocol.md §11.3), whose next `seq` the refusal carries, and works on it;
/// the relayed connection counts once in the cluster's totals.
async fn a_refused_relayed_resumption_stays_on_the_greeted_session(kind: Kind) {
    let redis = RedisServer::start();
    let (a, b) = pair(&redis).await;
    let mut on_a = Conn::connect(kind, a.local_addr(), None).await;
    let session = on_a.session.clone();
    let done = on_a
        .call_done("e1", "echo", json!({"message": "on a"}))
        .await;
    assert_eq!(done["status"], "OK");

    let mut conn = Conn::connect(kind, b.local_addr(), None).await;
    let greeted = conn.session.clone();
    assert_ne!(greeted, session);
    // More than the session ever sent: refused by a, which runs it.
    conn.send(&resume_hai("r", &session, "999")).await;
    let error = conn.recv().await;
    assert_eq!(error["session"], greeted.as_str(), "{error}");
    assert_eq!(error["payload"]["code"], "RESUME_FAILED", "{error}");
    assert_eq!(
        error["payload"]["detail"]["reason"], "invalid last_rx_seq",
        "{error}"
    );
    // The connection works on, on the session it knows.
    let done = conn
        .call_done("e2", "echo", json!({"message": "fresh"}))
        .await;
    assert_eq!(done["result"], json!({"echoed": "fresh"}));
    conn.ping_marker().await;

    // a serves two connections, one of them relayed for b; what a publishes
    // for the cluster counts only its own.
    let stats = http(a.local_addr(), "GET", "/stats", &[], "").await;
    let stats: Value = serde_json::from_str(&stats.body).unwrap();
    assert_eq!(stats["activeConnections"], 2, "{stats}");
    assert_eq!(stats["cluster"]["relayedConnections"], 1, "{stats}");
    // Wait for a refresh of a's lease made after the relay was counted.
    next_refresh(&redis, "a").await;
    let lease: Value = serde_json::from_str(&redis.get("{haip}:i:a").unwrap().unwrap()).unwrap();
    assert_eq!(lease["activeConnections"], 1, "{lease}");
    drop(on_a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_relayed_resumption_stays_on_the_greeted_session_ws() {
    a_refused_relayed_resumption_stays_on_the_greeted_session(Kind::Ws).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_relayed_resumption_stays_on_the_greeted_session_sse() {
    a_refused_relayed_resumption_stays_on_the_greeted_session(Kind::Sse).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_sent_to_another_instance_reach_the_stream() {
    let redis = RedisServer::start();
    let (a, b) = pair(&redis).await;
    let mut conn = Conn::connect(Kind::Sse, a.local_addr(), None).await;
    let session = conn.session.clone();
    // Once a reply arrives, the stream is known to the other instances (its
    // record was written before any envelope left).
    let done = conn
        .call_done("e1", "echo", json!({"message": "on a"}))
        .await;
    assert_eq!(done["status"], "OK");

    // Named by the header.
    echo_through(b.local_addr(), &mut conn, true, "e2", "via b").await;

    // Named by nobody: the subject's only open stream, across the instances.
    echo_through(b.local_addr(), &mut conn, false, "e3", "anywhere").await;

    // A session no instance holds is not found, as on one instance.
    let call = json!({"id": "c3", "channel": "USER", "type": "TOOL_CALL",
        "payload": {"call_id": "e3", "tool": "echo", "params": {"message": "anywhere"}}});
    let response = post(
        b.local_addr(),
        "/haip/message",
        None,
        &[("x-haip-session", "no-such-session")],
        &call.to_string(),
    )
    .await;
    // The only open stream is still the fallback target (docs/protocol.md §15.4).
    assert_ok(&response);
    let done = conn.expect_done("e3").await;
    assert_eq!(done["call_id"], "e3");
    conn.ping_marker().await;

    // With Redis gone, b cannot ask: 503, saying why.
    let mut redis = redis;
    redis.stop();
    wait_reachable(b.local_addr(), false).await;
    let response = post(
        b.local_addr(),
        "/haip/message",
        None,
        &[("x-haip-session", session.as_str())],
        &call.to_string(),
    )
    .await;
    assert_eq!(response.status, 503, "{}", response.body);
    assert!(
        response.body.contains("session store unavailable"),
        "{}",
        response.body
    );
}

/// Sends `echo` of `message` as call `call_id` to `addr` in an upstream
/// POST for `stream`, `named` in `x-haip-session` or not (then it is its
/// subject's one open stream), and checks that `stream` gets its result.
pub(crate) async fn echo_through(
    addr: SocketAddr,
    stream: &mut Conn,
    named: bool,
    call_id: &str,
    message: &str,
) {
    let call = json!({"id": format!("c-{call_id}"), "channel": "USER", "type": "TOOL_CALL",
        "payload": {"call_id": call_id, "tool": "echo", "params": {"message": message}}});
    let session = stream.session.clone();
    let headers: Vec<(&str, &str)> = named
        .then_some(("x-haip-session", session.as_str()))
        .into_iter()
        .collect();
    let response = post(addr, "/haip/message", None, &headers, &call.to_string()).await;
    assert_ok(&response);
    let done = stream.expect_done(call_id).await;
    assert_eq!(done["result"], json!({ "echoed": message }), "{done}");
}

/// A quickstart process sharing sessions through Redis.
pub(crate) struct Instance {
    child: Child,
    pub(crate) addr: SocketAddr,
}

impl Instance {
    /// Starts the quickstart as instance `id` of the Redis at `redis`, and
    /// waits until it answers `/health`.
    pub(crate) async fn spawn(redis: &str, id: &str) -> Instance {
        let binary = mcp_support::example_binary("quickstart");
        let port = mcp_support::free_port();
        let child = Command::new(binary)
            .env("HAIP_ADDR", format!("127.0.0.1:{port}"))
            .env("HAIP_REDIS_URL", redis)
            .env("HAIP_INSTANCE_ID", id)
            .env(
                "HAIP_LOG",
                std::env::var("CLUSTER_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .env_remove("HAIP_JWT_SECRET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the quickstart starts");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let instance = Instance { child, addr };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // Listening yet? (An HTTP request to a closed port would panic.)
            let listening = tokio::net::TcpStream::connect(addr).await.is_ok();
            if listening
                && let Ok(response) = tokio::time::timeout(
                    Duration::from_secs(2),
                    http(addr, "GET", "/health", &[], ""),
                )
                .await
                && response.status == 200
            {
                let health: Value = serde_json::from_str(&response.body).unwrap();
                assert_eq!(health["instance"], id, "{health}");
                break;
            }
            assert!(Instant::now() < deadline, "instance {id} did not come up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        instance
    }

    /// `kill -9`.
    pub(crate) fn kill(&mut self) {
        self.child.kill().expect("the instance can be killed");
        self.child.wait().expect("the instance is reaped");
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An instance killed with `kill -9` mid-call, its client resuming on
/// another instance at once, as clients do: the dead instance's lease lives
/// on for a few seconds, and the resumption is held meanwhile (never
/// refused), then the session is restored there.
async fn a_killed_instances_session_resumes_elsewhere_at_once(kind: Kind) {
    let redis = RedisServer::start();
    let mut a = Instance::spawn(&redis.url(), "a").await;
    let b = Instance::spawn(&redis.url(), "b").await;

    let mut conn = Conn::connect(kind, a.addr, None).await;
    let session = conn.session.clone();
    let done = conn
        .call_done("e1", "echo", json!({"message": "before"}))
        .await;
    assert_eq!(done["status"], "OK");
    // A five-step call, killed in its first steps.
    conn.call(
        "p1",
        "process_file",
        json!({"filename": "a.txt", "operation": "read"}),
    )
    .await;
    let update = conn.expect_update("p1").await;
    assert_eq!(update["status"], "RUNNING", "{update}");
    a.kill();
    drop(conn);
    // The lease of a is still there: the session is taken for running on a.
    assert!(
        redis.get("{haip}:i:a").expect("Redis answers").is_some(),
        "the lease outlives the instance"
    );

    // The client saw only the HAI (seq 1): everything else is replayed,
    // on the first try.
    let mut conn = Conn::connect(kind, b.addr, None).await;
    conn.send(&resume_hai("resume", &session, "1")).await;
    conn.follow(&session, 1);
    let mut dones = Vec::new();
    let mut confirmed = false;
    while dones.len() < 2 {
        let env = conn.recv().await;
        match env["type"].as_str() {
            Some("TOOL_DONE") => dones.push(env["payload"].clone()),
            Some("HAI") => {
                assert_eq!(env["payload"]["last_rx_seq"], "0", "{env}");
                confirmed = true;
            }
            Some("TOOL_UPDATE") => assert_eq!(env["payload"]["call_id"], "p1"),
            other => panic!("unexpected {other:?}: {env}"),
        }
    }
    assert!(
        confirmed,
        "the resumption was confirmed before the lost call's end"
    );
    assert_eq!(
        dones[0],
        json!({"call_id": "e1", "status": "OK", "result": {"echoed": "before"}})
    );
    assert_eq!(dones[1]["call_id"], "p1");
    assert_eq!(dones[1]["status"], "ERROR");
    assert_eq!(dones[1]["result"]["code"], "INTERNAL_ERROR");
    let message = dones[1]["result"]["error"].as_str().unwrap();
    assert!(message.contains("instance lost"), "{message}");
    // Exactly one TOOL_DONE each: nothing else is owed, and the session
    // lives on, on b.
    conn.ping_marker().await;
    let done = conn
        .call_done("e2", "echo", json!({"message": "after"}))
        .await;
    assert_eq!(done["result"], json!({"echoed": "after"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instances_session_resumes_elsewhere_at_once_ws() {
    a_killed_instances_session_resumes_elsewhere_at_once(Kind::Ws).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instances_session_resumes_elsewhere_at_once_sse() {
    a_killed_instances_session_resumes_elsewhere_at_once(Kind::Sse).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_shutting_down_hands_its_sessions_over() {
    let redis = RedisServer::start();
    let (a, _) = start(demo_builder().redis(redis.url()).instance_id("a")).await;
    let (b, _) = start(demo_builder().redis(redis.url()).instance_id("b")).await;
    let mut conn = Conn::connect(Kind::Ws, a.local_addr(), None).await;
    let session = conn.session.clone();
    let done = conn.call_done("e1", "echo", json!({"message": "hi"})).await;
    assert_eq!(done["status"], "OK");
    let seen = conn.last_seq();
    // A graceful stop gives its lease up: no waiting for it to expire.
    a.shutdown().await;
    drop(conn);
    let mut conn = Conn::connect(Kind::Ws, b.local_addr(), None).await;
    conn.send(&resume_hai("r", &session, "1")).await;
    conn.follow(&session, 1);
    let done = conn.expect_done("e1").await;
    assert_eq!(done["result"], json!({"echoed": "hi"}));
    let mut seq = 2;
    loop {
        let env = conn.recv().await;
        seq += 1;
        if env["type"] == "HAI" {
            assert_eq!(env["seq"], seq.to_string(), "{env}");
            break;
        }
    }
    assert!(seq > seen, "the counter continues past what the client saw");
    let done = conn
        .call_done("e2", "echo", json!({"message": "on b"}))
        .await;
    assert_eq!(done["result"], json!({"echoed": "on b"}));
}

/// A POST to the instance relaying a client's stream is answered once the
/// session, running on the other instance, has handled its envelopes
/// (docs/protocol.md §15.4): a client that resumes on that instance at once is told
/// they were all taken, and sends none of them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_through_a_relaying_instance_is_answered_once_the_session_has_it() {
    let redis = RedisServer::start();
    let (a, b) = pair(&redis).await;
    let mut conn = Conn::connect(Kind::Sse, a.local_addr(), None).await;
    let session = conn.session.clone();
    let done = conn
        .call_done("e1", "echo", json!({"message": "on a"}))
        .await;
    assert_eq!(done["status"], "OK");
    let seen = conn.last_seq();
    drop(conn);
    // The stream on b, relayed to the session on a. Each resumption claims
    // everything read so far, so the first `HAI` of the session after it
    // is the one confirming it.
    let confirm = async |conn: &mut Conn, known: u64, id: &str| -> Value {
        conn.send(&resume_hai(id, &session, &known.to_string()))
            .await;
        conn.relax();
        let (hai, _) = conn
            .recv_until(|env| env["type"] == "HAI" && env["session"] == session.as_str())
            .await;
        hai
    };
    let mut relayed = Conn::connect(Kind::Sse, b.local_addr(), None).await;
    let hai = confirm(&mut relayed, seen, "r1").await;
    assert!(hai["payload"]["last_rx_seq"].is_string(), "{hai}");
    relayed.follow(&session, relayed.last_seq());
    for round in 0..3u64 {
        let first = 100 + round * 100;
        let pings: Vec<Value> = (first..first + 40)
            .map(|seq| {
                json!({"id": format!("p{seq}"), "session": session, "seq": seq.to_string(),
                       "channel": "SYSTEM", "type": "PING", "payload": {}})
            })
            .collect();
        let reply = relayed.post(&Value::Array(pings).to_string()).await;
        assert_ok(&reply);
        // At once, on a itself: the session is taken from the relayed
        // connection, and says what it has handled.
        let known = relayed.last_seq();
        let mut direct = Conn::connect(Kind::Sse, a.local_addr(), None).await;
        let hai = confirm(&mut direct, known, "r2").await;
        assert_eq!(
            hai["payload"]["last_rx_seq"],
            (first + 39).to_string(),
            "every envelope of the answered POST was handled: {hai}"
        );
        // Back to a relayed stream for the next round.
        let known = direct.last_seq();
        drop(direct);
        relayed = Conn::connect(Kind::Sse, b.local_addr(), None).await;
        confirm(&mut relayed, known, "r3").await;
        relayed.follow(&session, relayed.last_seq());
    }
}

/// The calls a shutdown cancels end with envelopes made after it began;
/// the client sees them only once they are recorded, so the instance it
/// resumes on has them too (and `last_rx_seq` is never past what it has).
async fn calls_cancelled_by_a_shutdown_are_recorded_before_their_client_sees_them(kind: Kind) {
    let redis = RedisServer::start();
    let (a, b) = pair(&redis).await;
    let mut conn = Conn::connect(kind, a.local_addr(), None).await;
    let session = conn.session.clone();
    let calls = ["h1", "h2", "h3"];
    for id in calls {
        conn.call(id, "hold", json!({})).await;
        let update = conn.expect_update(id).await;
        assert_eq!(update["status"], "RUNNING", "{update}");
    }
    let stopping = tokio::spawn(async move { a.shutdown().await });
    // Everything a sends before it closes: each call's CANCELLING and
    // CANCELLED, whatever their order.
    let (envelopes, _, end) = conn.read_to_end().await;
    let dones: Vec<&Value> = envelopes
        .iter()
        .filter(|env| env["type"] == "TOOL_DONE")
        .collect();
    assert_eq!(dones.len(), calls.len(), "{envelopes:?} then {end:?}");
    for done in dones {
        assert_eq!(done["payload"]["status"], "CANCELLED", "{done}");
    }
    let seen = conn.last_seq();
    drop(conn);
    tokio::time::timeout(Duration::from_secs(30), stopping)
        .await
        .expect("a stops")
        .expect("a's shutdown does not panic");

    let mut conn = Conn::connect(kind, b.local_addr(), None).await;
    conn.send(&resume_hai("r", &session, &seen.to_string()))
        .await;
    conn.follow(&session, seen);
    let hai = conn.recv().await;
    assert_eq!(hai["type"], "HAI", "the session resumes on b: {hai}");
    // Nothing is owed: every call has had its one TOOL_DONE.
    let done = conn
        .call_done("e1", "echo", json!({"message": "on b"}))
        .await;
    assert_eq!(done["result"], json!({"echoed": "on b"}));
    conn.ping_marker().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_cancelled_by_a_shutdown_are_recorded_before_their_client_sees_them_ws() {
    calls_cancelled_by_a_shutdown_are_recorded_before_their_client_sees_them(Kind::Ws).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_cancelled_by_a_shutdown_are_recorded_before_their_client_sees_them_sse() {
    calls_cancelled_by_a_shutdown_are_recorded_before_their_client_sees_them(Kind::Sse).await;
}

#[tokio::test]
async fn redis_absent_at_start_is_an_error_naming_the_url() {
    let url = format!("redis://127.0.0.1:{}", mcp_support::free_port());
    let server = demo_builder()
        .redis(url.clone())
        .addr("127.0.0.1:0")
        .build()
        .expect("the settings are valid");
    let Err(err) = server.start().await else {
        panic!("no Redis: no server")
    };
    let text = err.to_string();
    assert!(text.contains(&url), "{text}");
    assert!(matches!(err, haip::Error::Redis { .. }), "{err:?}");
    // A URL that is not one fails when building.
    let Err(err) = demo_builder().redis("not a url").build() else {
        panic!("a URL that is not one is refused")
    };
    assert!(err.to_string().contains("not a url"), "{err}");
}

/// `/stats`' `cluster.reachable`, once it is `want` (within 15 s).
async fn wait_reachable(addr: SocketAddr, want: bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let response = http(addr, "GET", "/stats", &[], "").await;
        let stats: Value = serde_json::from_str(&response.body).unwrap();
        if stats["cluster"]["reachable"] == want {
            return stats;
        }
        assert!(
            Instant::now() < deadline,
            "cluster.reachable never became {want}: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_redis_keeps_sessions_working_and_it_recovers() {
    let mut redis = RedisServer::start();
    let (a, _) = start(demo_builder().redis(redis.url()).instance_id("a")).await;
    let (b, _) = start(demo_builder().redis(redis.url()).instance_id("b")).await;
    let stats = wait_reachable(a.local_addr(), true).await;
    assert_eq!(stats["instance"], "a");
    let mut instances: Vec<String> = stats["cluster"]["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    instances.sort();
    assert_eq!(instances, ["a", "b"], "{stats}");

    let mut conn = Conn::connect(Kind::Ws, a.local_addr(), None).await;
    let session = conn.session.clone();
    redis.stop();
    // Sessions go on working on their instance.
    let done = conn
        .call_done("e1", "echo", json!({"message": "no redis"}))
        .await;
    assert_eq!(done["status"], "OK");
    wait_reachable(a.local_addr(), false).await;
    // Resuming elsewhere cannot work meanwhile, and says why.
    let mut other = Conn::connect(Kind::Ws, b.local_addr(), None).await;
    other.send(&resume_hai("r1", &session, "1")).await;
    let error = other.expect_error().await;
    assert_eq!(error["code"], "RESUME_FAILED", "{error}");
    assert_eq!(error["detail"]["reason"], "session store unavailable");

    redis.restart();
    wait_reachable(a.local_addr(), true).await;
    let done = conn
        .call_done("e2", "echo", json!({"message": "redis back"}))
        .await;
    assert_eq!(done["status"], "OK");
    conn.ping_marker().await;

    // Moving to b works again, relayed to a: a resumption that finds a not
    // subscribed again yet is held until it is, not refused.
    wait_reachable(b.local_addr(), true).await;
    let seen = conn.last_seq();
    let mut moved = Conn::connect(Kind::Ws, b.local_addr(), None).await;
    moved
        .send(&resume_hai("r2", &session, &seen.to_string()))
        .await;
    moved.follow(&session, seen);
    let confirm = moved.recv().await;
    assert_eq!(confirm["type"], "HAI", "{confirm}");
    let done = moved
        .call_done("e3", "echo", json!({"message": "through b"}))
        .await;
    assert_eq!(done["result"], json!({"echoed": "through b"}));
    moved.ping_marker().await;

    // What was recorded misses the call made while Redis was away: once Redis
    // is back the session is marked so, and when a stops it is not restored
    // from that (it would end e1 again, and reuse seqs), but refused.
    let key = format!("haip:s:{{{session}}}");
    let deadline = Instant::now() + Duration::from_secs(15);
    while redis.command(&["HEXISTS", &key, "lost"]).unwrap() != ":1" {
        assert!(
            Instant::now() < deadline,
            "the session was never marked lost"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = moved.last_seq();
    drop(moved);
    a.shutdown().await;
    let mut other = Conn::connect(Kind::Ws, b.local_addr(), None).await;
    other
        .send(&resume_hai("r3", &session, &seen.to_string()))
        .await;
    let error = other.expect_error().await;
    assert_eq!(error["code"], "RESUME_FAILED", "{error}");
    assert_eq!(
        error["detail"]["reason"], "records lost while the session store was away",
        "{error}"
    );
}

/// Makes instance `id`'s lease lapse while it lives, as when Redis is away
/// or slow for longer than a lease lasts: deleted just after a refresh, so
/// that the next is a couple of seconds away.
async fn lapse(redis: &RedisServer, id: &str) {
    next_refresh(redis, id).await;
    assert_eq!(
        redis
            .command(&["DEL", &format!("{{haip}}:i:{id}")])
            .unwrap(),
        ":1"
    );
}

/// Returns once instance `id` has refreshed its lease (seen as its time to
/// live growing), within a bound.
async fn next_refresh(redis: &RedisServer, id: &str) {
    let key = format!("{{haip}}:i:{id}");
    let left = || -> i64 {
        redis
            .command(&["PTTL", &key])
            .expect("Redis answers")
            .trim_start_matches(':')
            .parse()
            .expect("a lease")
    };
    let before = left();
    let deadline = Instant::now() + Duration::from_secs(15);
    while left() <= before {
        assert!(
            Instant::now() < deadline,
            "the lease of {id} was never refreshed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An instance whose lease lapsed while it lived may see another instance
/// restore one of its sessions. From then on Redis refuses what its stale
/// copy records: none of it reaches the client (a call ended `instance
/// lost` on the restoring instance is not ended again), the stale copy's
/// connection closes, and the client, resuming there, is relayed to the
/// instance that runs the session now.
async fn a_session_restored_while_its_instance_lives_ends_there(kind: Kind) {
    let redis = RedisServer::start();
    let (a, b) = pair(&redis).await;
    let mut on_a = Conn::connect(kind, a.local_addr(), None).await;
    let session = on_a.session.clone();
    on_a.call("h1", "hold", json!({})).await;
    let update = on_a.expect_update("h1").await;
    assert_eq!(update["status"], "RUNNING", "{update}");
    let gate_name = format!("restored while alive {kind:?}");
    on_a.call("g1", "gated", json!({ "name": gate_name })).await;
    // Its answer comes once everything before it is recorded.
    on_a.ping_marker().await;
    let seen = on_a.last_seq();

    lapse(&redis, "a").await;
    // The same session from another connection, on b: restored there.
    let mut on_b = Conn::connect(kind, b.local_addr(), None).await;
    on_b.send(&resume_hai("r", &session, &seen.to_string()))
        .await;
    on_b.follow(&session, seen);
    let hai = on_b.recv().await;
    assert_eq!(hai["type"], "HAI", "{hai}");
    let mut lost = Vec::new();
    while lost.len() < 2 {
        let env = on_b.recv().await;
        assert_eq!(env["type"], "TOOL_DONE", "{env}");
        let done = &env["payload"];
        assert_eq!(done["status"], "ERROR", "{done}");
        let message = done["result"]["error"].as_str().unwrap_or_default();
        assert!(message.contains("instance lost"), "{done}");
        lost.push(done["call_id"].as_str().unwrap().to_owned());
    }
    lost.sort();
    assert_eq!(lost, ["g1", "h1"]);

    // The copy on a goes on until it records something: g1 ends there now.
    gate(&gate_name).notify_one();
    let end = loop {
        match on_a.next_item().await {
            conn::Item::Envelope(text) => {
                panic!("what the stale copy made reached its client: {text}")
            }
            conn::Item::Comment(_) | conn::Item::Done => {}
            end => break end,
        }
    };
    if kind == Kind::Ws {
        let expected = Some((1011, "session moved to another instance".to_owned()));
        assert!(
            matches!(&end, conn::Item::Closed(close) if *close == expected),
            "{end:?}"
        );
    }
    drop(on_a);

    // The client resumes on a, and is relayed to b.
    let seen = on_b.last_seq();
    drop(on_b);
    let mut again = Conn::connect(kind, a.local_addr(), None).await;
    again
        .send(&resume_hai("r2", &session, &seen.to_string()))
        .await;
    again.follow(&session, seen);
    let hai = again.recv().await;
    assert_eq!(hai["type"], "HAI", "{hai}");
    let done = again
        .call_done("e1", "echo", json!({"message": "relayed to b"}))
        .await;
    assert_eq!(done["result"], json!({"echoed": "relayed to b"}));
    // Nothing else is owed, and a runs nothing of the session any more.
    again.ping_marker().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = http(a.local_addr(), "GET", "/stats", &[], "").await;
        let stats: Value = serde_json::from_str(&stats.body).unwrap();
        if stats["toolExecutions"]["active"] == 0 && stats["detachedSessions"] == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a still runs the stale copy: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_restored_while_its_instance_lives_ends_there_ws() {
    a_session_restored_while_its_instance_lives_ends_there(Kind::Ws).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_restored_while_its_instance_lives_ends_there_sse() {
    a_session_restored_while_its_instance_lives_ends_there(Kind::Sse).await;
}

/// A call a session took is recorded with the inbound `seq` that brought
/// it. Restored elsewhere before the session sent anything after taking it,
/// the confirming `HAI` says the call was taken, and its one `TOOL_DONE` is
/// `instance lost`: a client told otherwise would send it again, and it
/// would end twice.
async fn a_restored_session_knows_the_calls_it_took_before_it_answered(kind: Kind) {
    let redis = RedisServer::start();
    let (a, b) = pair(&redis).await;
    let mut on_a = Conn::connect(kind, a.local_addr(), None).await;
    let session = on_a.session.clone();
    let gate_name = format!("taken, not answered {kind:?}");
    on_a.send(&json!({
        "id": "c1", "seq": "1", "session": session, "channel": "USER", "type": "TOOL_CALL",
        "payload": {"call_id": "g1", "tool": "gated", "params": {"name": gate_name}},
    }))
    .await;
    // Nothing goes out for the call until it ends: wait for its record.
    let calls = format!("haip:s:{{{session}}}:c");
    let deadline = Instant::now() + Duration::from_secs(10);
    while redis.command(&["SISMEMBER", &calls, "g1"]).unwrap() != ":1" {
        assert!(Instant::now() < deadline, "the call was never recorded");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let seen = on_a.last_seq();

    lapse(&redis, "a").await;
    let mut on_b = Conn::connect(kind, b.local_addr(), None).await;
    on_b.send(&resume_hai("r", &session, &seen.to_string()))
        .await;
    on_b.follow(&session, seen);
    let hai = on_b.recv().await;
    assert_eq!(hai["type"], "HAI", "{hai}");
    assert_eq!(
        hai["payload"]["last_rx_seq"], "1",
        "the call was taken: {hai}"
    );
    let done = on_b.expect_done("g1").await;
    assert_eq!(done["status"], "ERROR", "{done}");
    on_b.ping_marker().await;
    gate(&gate_name).notify_one();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_session_knows_the_calls_it_took_before_it_answered_ws() {
    a_restored_session_knows_the_calls_it_took_before_it_answered(Kind::Ws).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_session_knows_the_calls_it_took_before_it_answered_sse() {
    a_restored_session_knows_the_calls_it_took_before_it_answered(Kind::Sse).await;
}

/// An instance that begins to shut down while it holds a resumption (the
/// session's instance was killed, its lease not yet expired) does not
/// refuse it: its client would give its session up. The connection ends as
/// the others do, and the client resumes on another instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumption_held_by_an_instance_that_stops_is_not_refused() {
    let redis = RedisServer::start();
    let mut a = Instance::spawn(&redis.url(), "a").await;
    let builder = |id: &str| demo_builder().redis(redis.url()).instance_id(id);
    let (b, _) = start(builder("b")).await;
    let conn = Conn::connect(Kind::Sse, a.addr, None).await;
    let session = conn.session.clone();
    a.kill();
    drop(conn);

    let mut conn = Conn::connect(Kind::Sse, b.local_addr(), None).await;
    // Its POST is answered once the resumption is: sent on the side.
    let resume = resume_hai("resume", &session, "1").to_string();
    let fresh = conn.session.clone();
    let addr = b.local_addr();
    let posted = tokio::spawn(async move {
        post(
            addr,
            "/haip/message",
            None,
            &[("x-haip-session", &fresh)],
            &resume,
        )
        .await
    });
    // Held, and kept alive, while a's lease runs out.
    loop {
        match conn.next_item().await {
            conn::Item::Comment(_) if !posted.is_finished() => break,
            conn::Item::Comment(_) => {}
            other => panic!("expected the resumption to be held: {other:?}"),
        }
    }
    let stopping = tokio::spawn(async move { b.shutdown().await });
    let (envelopes, _, _) = conn.read_to_end().await;
    assert!(
        envelopes.is_empty(),
        "the held resumption was answered: {envelopes:?}"
    );
    let posted = tokio::time::timeout(Duration::from_secs(30), posted)
        .await
        .expect("the POST is answered")
        .unwrap();
    // Answered, the session it was sent to having ended with the server.
    assert!(matches!(posted.status, 200 | 404), "{}", posted.body);
    tokio::time::timeout(Duration::from_secs(30), stopping)
        .await
        .expect("b stops")
        .expect("b's shutdown does not panic");

    // The session is whole: restored on another instance once a's lease
    // has run out.
    let (c, _) = start(builder("c")).await;
    let mut conn = Conn::connect(Kind::Sse, c.local_addr(), None).await;
    conn.send(&resume_hai("again", &session, "1")).await;
    conn.follow(&session, 1);
    let hai = conn.recv().await;
    assert_eq!(hai["type"], "HAI", "{hai}");
    let done = conn
        .call_done("e1", "echo", json!({"message": "on c"}))
        .await;
    assert_eq!(done["result"], json!({"echoed": "on c"}));
}

/// A restoring refused once the records are read (a `last_rx_seq` past
/// what the session sent) holds nothing back: a good resumption right after
/// it is restored at once, not held as if a restoring were under way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_restoring_holds_nothing_back() {
    let redis = RedisServer::start();
    let (a, b) = pair(&redis).await;
    let on_a = Conn::connect(Kind::Sse, a.local_addr(), None).await;
    let session = on_a.session.clone();
    let seen = on_a.last_seq();
    lapse(&redis, "a").await;

    let mut refused = Conn::connect(Kind::Sse, b.local_addr(), None).await;
    refused.send(&resume_hai("r1", &session, "999")).await;
    let error = refused.recv().await;
    assert_eq!(error["payload"]["code"], "RESUME_FAILED", "{error}");
    assert_eq!(
        error["payload"]["detail"]["reason"], "invalid last_rx_seq",
        "{error}"
    );

    let mut good = Conn::connect(Kind::Sse, b.local_addr(), None).await;
    good.send(&resume_hai("r2", &session, &seen.to_string()))
        .await;
    good.follow(&session, seen);
    // A held resumption is kept alive with comments; this one is not held.
    match good.next_item().await {
        conn::Item::Envelope(text) => {
            let hai: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(hai["type"], "HAI", "{hai}");
            assert_eq!(hai["session"], session.as_str(), "{hai}");
        }
        other => panic!("the resumption was held: {other:?}"),
    }
    drop(on_a);
}

/// Upstream POSTs sent to b reach an SSE stream on a also when another
/// client of a has moved to b first (its WebSocket session relayed from a),
/// named by the header or by nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_reach_a_stream_after_another_client_moved() {
    let redis = RedisServer::start();
    posts_reach_a_stream_after_another_client_moved_at(&redis.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_reach_a_stream_after_another_client_moved_over_a_redis_cluster() {
    let cluster = crate::redis_support::RedisCluster::start();
    posts_reach_a_stream_after_another_client_moved_at(&cluster.seed_list()).await;
}

async fn posts_reach_a_stream_after_another_client_moved_at(url: &str) {
    let (a, b) = pair_at(url).await;
    // A client of a moves to b, and stays there (relayed to a).
    let mut conn = Conn::connect(Kind::Ws, a.local_addr(), None).await;
    let session = conn.session.clone();
    let done = conn
        .call_done("e1", "echo", json!({"message": "on a"}))
        .await;
    assert_eq!(done["status"], "OK");
    let seen = conn.last_seq();
    conn.call("h1", "hold", json!({})).await;
    let update = conn.expect_update("h1").await;
    assert_eq!(update["status"], "RUNNING", "{update}");
    drop(conn);
    let mut moved = Conn::connect(Kind::Ws, b.local_addr(), None).await;
    moved
        .send(&resume_hai("r", &session, &seen.to_string()))
        .await;
    moved.follow(&session, seen);
    loop {
        let env = moved.recv().await;
        match env["type"].as_str() {
            Some("HAI") => break,
            Some("TOOL_UPDATE") => assert_eq!(env["payload"]["call_id"], "h1", "{env}"),
            other => panic!("unexpected {other:?}: {env}"),
        }
    }
    // Then an SSE stream on a, its upstream POSTs sent to b.
    let mut stream = Conn::connect(Kind::Sse, a.local_addr(), None).await;
    let done = stream
        .call_done("s1", "echo", json!({"message": "stream"}))
        .await;
    assert_eq!(done["status"], "OK");
    echo_through(b.local_addr(), &mut stream, true, "s2", "via b").await;
    // Named by nobody: the subject's one open stream. The WebSocket session
    // relayed from a is none (it was taken for one, and the POST refused
    // as naming no single stream).
    echo_through(b.local_addr(), &mut stream, false, "s3", "anywhere").await;
    // The moved client's session goes on through b.
    let done = moved
        .call_done("e2", "echo", json!({"message": "through b"}))
        .await;
    assert_eq!(done["result"], json!({"echoed": "through b"}));
}

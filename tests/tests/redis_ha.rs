//! Sessions shared through a Redis Cluster or a Sentinel-watched primary
//! (feature `redis`). A real three-primary cluster (three `redis-server`s in
//! cluster mode joined by `redis-cli --cluster create`, started by the test
//! support on loopback), named to haip by its seed list
//! (`HAIP_REDIS_URL=redis://…,redis://…`); and a real Sentinel setup (a
//! primary, a replica, three sentinels), named by
//! `redis+sentinel://s1,s2,s3/haip`.
//!
//! - Each session's keys live on the node that holds its slot (its id is
//!   their hash tag), and sessions spread over the nodes; an instance killed
//!   with `kill -9` mid-call: every one of its sessions resumes on another
//!   instance, restored from the nodes its records were written to (the
//!   writer sends each batch's slots apart), the running call ended with
//!   "instance lost".
//! - A client that moves to another live instance: relayed over pub/sub,
//!   whichever node each instance subscribed on; its calls follow, a cancel
//!   reaches the call. An SSE stream's upstream POSTs sent to the other
//!   instance are forwarded (the open-streams set is written apart from the
//!   sessions' records).
//! - Sentinel: the primary killed (SIGKILL); the sentinels promote the
//!   replica, and the instances follow: a session opened before the
//!   failover and one opened after it resume on another instance once the
//!   instance that ran them is killed.
//! - `redis_wait`: with the Sentinel's replica acknowledging each batch, a
//!   session resumes on another instance as ever, nothing counted
//!   unreplicated; on a Redis without replicas, every batch is counted
//!   unreplicated, its sessions marked, and resuming one elsewhere is
//!   refused (its records could have been cut short by a failover).

use crate::cluster::{Instance, echo_through, gate, pair_at};
use crate::conn;
use crate::redis_support;
use crate::support;

use std::collections::HashSet;

use conn::{Conn, Kind};
use redis_support::{RedisCluster, RedisSentinels};
use serde_json::json;
use std::time::{Duration, Instant};
use support::resume_hai;

/// Sessions opened on one instance: enough for their slots to span the
/// cluster's nodes (all twelve on one node: about one chance in 60 000).
const SESSIONS: usize = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instances_sessions_resume_elsewhere_over_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_list();
    let mut a = Instance::spawn(&seeds, "a").await;
    let b = Instance::spawn(&seeds, "b").await;

    // All at once, so that the writer's batches carry several sessions,
    // of several slots on one node, and of several nodes.
    let mut opening = tokio::task::JoinSet::new();
    for i in 0..SESSIONS {
        let addr = a.addr;
        opening.spawn(async move {
            let mut conn = Conn::connect(Kind::Ws, addr, None).await;
            let done = conn
                .call_done("e1", "echo", json!({ "message": format!("before {i}") }))
                .await;
            assert_eq!(done["status"], "OK", "{done}");
            (i, conn)
        });
    }
    let mut conns: Vec<(usize, Conn)> = opening.join_all().await;
    conns.sort_by_key(|(i, _)| *i);
    let mut conns: Vec<Conn> = conns.into_iter().map(|(_, conn)| conn).collect();
    // A reply reaches its client only once its records are written: each
    // session's keys are on the node of its slot, in one slot.
    let mut nodes = HashSet::new();
    for conn in &conns {
        let session = &conn.session;
        let keys = [
            format!("haip:s:{{{session}}}"),
            format!("haip:s:{{{session}}}:w"),
        ];
        let node = cluster.node_for_key(&keys[0]);
        assert_eq!(cluster.node_for_key(&keys[1]), node, "{keys:?}");
        for key in &keys {
            cluster.check_keyslot(key).expect("the slot Redis computes");
            let exists = cluster.nodes()[node].command(&["EXISTS", key]);
            assert_eq!(exists.as_deref(), Ok(":1"), "{key} on node {node}");
        }
        nodes.insert(node);
    }
    assert!(
        nodes.len() >= 2,
        "{SESSIONS} sessions on one node: {nodes:?}"
    );

    // A five-step call on the first session, killed in its first steps.
    conns[0]
        .call(
            "p1",
            "process_file",
            json!({"filename": "a.txt", "operation": "read"}),
        )
        .await;
    let update = conns[0].expect_update("p1").await;
    assert_eq!(update["status"], "RUNNING", "{update}");
    a.kill();
    let sessions: Vec<String> = conns.drain(..).map(|c| c.session.clone()).collect();

    for (i, session) in sessions.iter().enumerate() {
        // Each client saw only its HAI (seq 1): the rest is replayed.
        let mut conn = Conn::connect(Kind::Ws, b.addr, None).await;
        conn.send(&resume_hai("resume", session, "1")).await;
        conn.follow(session, 1);
        let want = if i == 0 { 2 } else { 1 };
        let mut dones = Vec::new();
        let mut confirmed = false;
        while dones.len() < want || !confirmed {
            let env = conn.recv().await;
            match env["type"].as_str() {
                Some("TOOL_DONE") => dones.push(env["payload"].clone()),
                Some("HAI") => {
                    assert_eq!(env["payload"]["last_rx_seq"], "0", "{env}");
                    confirmed = true;
                }
                Some("TOOL_UPDATE") if i == 0 => assert_eq!(env["payload"]["call_id"], "p1"),
                other => panic!("session {i}: unexpected {other:?}: {env}"),
            }
        }
        assert_eq!(
            dones[0],
            json!({"call_id": "e1", "status": "OK", "result": {"echoed": format!("before {i}")}}),
            "session {i}"
        );
        if i == 0 {
            assert_eq!(dones[1]["call_id"], "p1");
            assert_eq!(dones[1]["status"], "ERROR");
            let message = dones[1]["result"]["error"].as_str().unwrap();
            assert!(message.contains("instance lost"), "{message}");
        }
        // Nothing else is owed, and the session lives on, on b.
        conn.ping_marker().await;
        let done = conn
            .call_done("e2", "echo", json!({"message": "after"}))
            .await;
        assert_eq!(done["result"], json!({"echoed": "after"}), "session {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_move_between_live_instances_over_a_redis_cluster() {
    let cluster = RedisCluster::start();
    clients_move_between_live_instances(&cluster.seed_list()).await;
}

async fn clients_move_between_live_instances(url: &str) {
    let (a, b) = pair_at(url).await;

    // An SSE stream on a; its upstream POSTs sent to b.
    let mut stream = Conn::connect(Kind::Sse, a.local_addr(), None).await;
    let done = stream
        .call_done("s1", "echo", json!({"message": "stream"}))
        .await;
    assert_eq!(done["status"], "OK");
    echo_through(b.local_addr(), &mut stream, true, "s2", "via b").await;
    // Named by nobody: the subject's one open stream, found in the set of
    // open streams (a key of its own slot).
    echo_through(b.local_addr(), &mut stream, false, "s3", "anywhere").await;

    // A session that stays on a while its client moves to b.
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
    let gate_name = format!("move over {url}");
    conn.call("g1", "gated", json!({ "name": gate_name })).await;
    drop(conn);

    let mut conn = Conn::connect(Kind::Ws, b.local_addr(), None).await;
    conn.send(&resume_hai("r", &session, &seen.to_string()))
        .await;
    conn.follow(&session, seen);
    loop {
        let env = conn.recv().await;
        match env["type"].as_str() {
            Some("HAI") => break,
            Some("TOOL_UPDATE") => assert_eq!(env["payload"]["call_id"], "h1", "{env}"),
            other => panic!("unexpected {other:?}: {env}"),
        }
    }
    let done = conn
        .call_done("e2", "echo", json!({"message": "through b"}))
        .await;
    assert_eq!(done["result"], json!({"echoed": "through b"}));
    gate(&gate_name).notify_one();
    let done = conn.expect_done("g1").await;
    assert_eq!(done["result"], "released", "{done}");
    conn.request("TOOL_CANCEL", json!({"call_id": "h1"})).await;
    let update = conn.expect_update("h1").await;
    assert_eq!(update["status"], "CANCELLING", "{update}");
    let done = conn.expect_done("h1").await;
    assert_eq!(done["status"], "CANCELLED", "{done}");
    conn.ping_marker().await;
}

/// Resumes `session` (whose client saw only its HAI) on `addr`: its call
/// `e1` answered `echoed`, nothing else owed, and it goes on there.
async fn resumes_with(addr: std::net::SocketAddr, session: &str, echoed: &str) {
    let mut conn = Conn::connect(Kind::Ws, addr, None).await;
    conn.send(&resume_hai("resume", session, "1")).await;
    conn.follow(session, 1);
    let (mut confirmed, mut done) = (false, None);
    while !confirmed || done.is_none() {
        let env = conn.recv().await;
        match env["type"].as_str() {
            Some("HAI") => confirmed = true,
            Some("TOOL_DONE") => done = Some(env["payload"].clone()),
            other => panic!("{session}: unexpected {other:?}: {env}"),
        }
    }
    assert_eq!(
        done.unwrap(),
        json!({"call_id": "e1", "status": "OK", "result": {"echoed": echoed}})
    );
    conn.ping_marker().await;
    let done = conn
        .call_done("e2", "echo", json!({"message": "after"}))
        .await;
    assert_eq!(done["result"], json!({"echoed": "after"}), "{session}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_resume_elsewhere_across_a_sentinel_failover() {
    let mut sentinels = RedisSentinels::start();
    let url = sentinels.url();
    let mut a = Instance::spawn(&url, "a").await;
    let b = Instance::spawn(&url, "b").await;

    let mut before = Conn::connect(Kind::Ws, a.addr, None).await;
    let done = before
        .call_done("e1", "echo", json!({"message": "before"}))
        .await;
    assert_eq!(done["status"], "OK", "{done}");
    let key = format!("haip:s:{{{}}}", before.session);
    // On the replica too before its primary goes.
    let deadline = Instant::now() + Duration::from_secs(10);
    while sentinels.replica().command(&["EXISTS", &key]).as_deref() != Ok(":1") {
        assert!(Instant::now() < deadline, "{key} never reached the replica");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The primary dies; the sentinels promote the replica.
    let old = sentinels
        .current_primary_port()
        .expect("the sentinels agree");
    sentinels.primary().stop();
    let new = sentinels
        .wait_for_failover(old, Duration::from_secs(30))
        .expect("the sentinels fail over");
    assert_eq!(new, sentinels.replica().port());

    // a follows: its lease is written on the new primary.
    let deadline = Instant::now() + Duration::from_secs(30);
    while sentinels
        .replica()
        .command(&["EXISTS", "{haip}:i:a"])
        .as_deref()
        != Ok(":1")
    {
        assert!(
            Instant::now() < deadline,
            "a never wrote its lease on the new primary"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A session opened after the failover is recorded there.
    let mut after = Conn::connect(Kind::Ws, a.addr, None).await;
    let done = after
        .call_done("e1", "echo", json!({"message": "after the failover"}))
        .await;
    assert_eq!(done["status"], "OK", "{done}");
    let key = format!("haip:s:{{{}}}", after.session);
    assert_eq!(
        sentinels.replica().command(&["EXISTS", &key]).as_deref(),
        Ok(":1"),
        "a reply reaches its client once its records are written"
    );

    // a dies: both sessions are restored on b from the new primary.
    a.kill();
    let sessions = [before.session.clone(), after.session.clone()];
    drop((before, after));
    resumes_with(b.addr, &sessions[1], "after the failover").await;
    resumes_with(b.addr, &sessions[0], "before").await;
}

/// The `unreplicatedRecords` of an instance's `/stats`.
async fn unreplicated(addr: std::net::SocketAddr) -> u64 {
    let response = conn::http(addr, "GET", "/stats", &[], "").await;
    let stats: serde_json::Value = serde_json::from_str(&response.body).unwrap();
    stats["cluster"]["unreplicatedRecords"]
        .as_u64()
        .unwrap_or_else(|| panic!("no unreplicatedRecords in {stats}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_a_session_its_replica_has_resumes_elsewhere() {
    let sentinels = RedisSentinels::start();
    let url = sentinels.url();
    let waiting = support::demo_builder()
        .redis(&url)
        .redis_wait(1, Duration::from_millis(500))
        .instance_id("a");
    let (a, _) = support::start(waiting).await;
    let (b, _) = support::start(support::demo_builder().redis(&url).instance_id("b")).await;
    let mut conn = Conn::connect(Kind::Ws, a.local_addr(), None).await;
    let session = conn.session.clone();
    for i in 0..5 {
        let done = conn
            .call_done(
                &format!("e{i}"),
                "echo",
                json!({"message": format!("m{i}")}),
            )
            .await;
        assert_eq!(done["status"], "OK", "{done}");
    }
    conn.ping_marker().await;
    assert_eq!(unreplicated(a.local_addr()).await, 0);
    let seen = conn.last_seq();
    drop(conn);
    a.shutdown().await;
    let mut moved = Conn::connect(Kind::Ws, b.local_addr(), None).await;
    moved
        .send(&resume_hai("r1", &session, &seen.to_string()))
        .await;
    moved.follow(&session, seen);
    let confirm = moved.recv().await;
    assert_eq!(confirm["type"], "HAI", "{confirm}");
    let done = moved
        .call_done("e9", "echo", json!({"message": "on b"}))
        .await;
    assert_eq!(done["result"], json!({"echoed": "on b"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_and_no_replica_a_session_is_not_restored_elsewhere() {
    let redis = redis_support::RedisServer::start();
    let waiting = support::demo_builder()
        .redis(redis.url())
        .redis_wait(1, Duration::from_millis(20))
        .instance_id("a");
    let (a, _) = support::start(waiting).await;
    let (b, _) = support::start(support::demo_builder().redis(redis.url()).instance_id("b")).await;
    let mut conn = Conn::connect(Kind::Ws, a.local_addr(), None).await;
    let session = conn.session.clone();
    let done = conn
        .call_done("e1", "echo", json!({"message": "one"}))
        .await;
    assert_eq!(done["status"], "OK", "{done}");
    // No replica acknowledges anything: the session is marked.
    let key = format!("haip:s:{{{session}}}");
    let deadline = Instant::now() + Duration::from_secs(15);
    while redis.command(&["HEXISTS", &key, "lost"]).unwrap() != ":1" {
        assert!(Instant::now() < deadline, "the session was never marked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(unreplicated(a.local_addr()).await > 0);
    let seen = conn.last_seq();
    drop(conn);
    a.shutdown().await;
    let mut other = Conn::connect(Kind::Ws, b.local_addr(), None).await;
    other
        .send(&resume_hai("r1", &session, &seen.to_string()))
        .await;
    let error = other.expect_error().await;
    assert_eq!(error["code"], "RESUME_FAILED", "{error}");
}

#[test]
fn redis_wait_is_checked_at_build() {
    use haip::Server;
    let refused = |builder: haip::ServerBuilder| match builder.build() {
        Err(haip::Error::InvalidConfig { setting, reason }) => format!("{setting}: {reason}"),
        other => panic!("built: {:?}", other.map(|_| ())),
    };
    let no_redis = refused(Server::builder().redis_wait(1, Duration::from_millis(100)));
    assert!(no_redis.contains("no Redis is set"), "{no_redis}");
    let url = "redis://127.0.0.1:1";
    let none = refused(
        Server::builder()
            .redis(url)
            .redis_wait(0, Duration::from_millis(100)),
    );
    assert!(none.contains("at least one replica"), "{none}");
    let long = refused(
        Server::builder()
            .redis(url)
            .redis_wait(1, Duration::from_secs(5)),
    );
    assert!(long.contains("1 ms to 2000 ms"), "{long}");
}

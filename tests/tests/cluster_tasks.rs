//! MCP tasks shared through Redis (feature `redis`): a real `redis-server`
//! and several instances sharing it (and their `request_state_key`), each
//! serving stateless `/mcp`; a task runs on the instance that started it,
//! and any instance answers `tasks/get`, `tasks/update` and `tasks/cancel`.
//! Each test runs three times: on one Redis server, on a real
//! three-primary Redis Cluster (`…_over_a_redis_cluster`), where the task
//! store's keys share one slot, and on a primary watched by three sentinels
//! (`…_with_sentinels`, named `redis+sentinel://…/haip`).
//!
//! - A task started on A is followed to its result with `tasks/get` on B.
//! - A task on A asks two questions: `tasks/update` sent to B answers them,
//!   `tasks/get` on B right after a partial answer shows only the key left,
//!   and the task completes with both answers.
//! - `tasks/cancel` sent to B cancels a task running on A: the record says
//!   `cancelled` at once, and the tool on A really stops.
//! - A dies (its runtime dropped, its lease left to expire) while a task
//!   runs: `tasks/get` on B and C, at once, both say `failed` with "instance
//!   lost", written once (the same `lastUpdatedAt`), and it never changes.
//! - A call asks its question on A (MRTR, `input_required`), and its retry
//!   with the answer is served by B, which reads the `requestState` signed
//!   with the key they share.
//! - A lives but its lease is gone (taken for dead): the task is failed as
//!   lost, A stops the call when it sees that, and A's own late end does not
//!   overwrite the failure.
//! - A task of a tool marked idempotent (`again`) whose instance dies is
//!   taken over by one other instance and runs again from the start: its
//!   question gets the answer its client gave the first run, `tasks/get`
//!   says which attempt it is on, and it completes once, with the second
//!   run's result; its caller's listen streams hear of both on the instance
//!   that took it over. With `task_attempts` 2, its second instance dying
//!   too fails it as lost, saying it was the last attempt.

use crate::conn;
use crate::mcp_http;
use crate::redis_support;
use crate::support;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use haip::{
    Answer, Context, Limits, ServerBuilder, ServerHandle, TaskSupport, Tool, ToolAnnotations,
    ToolError,
};
use mcp_http::mcp_request;
use redis_support::{RedisCluster, RedisSentinels, RedisServer};
use serde_json::{Value, json};
use support::{base_limits, builder, start, within};

const TASKS: &str = "io.modelcontextprotocol/tasks";

/// The `requestState` key the instances share (as behind a load balancer).
const STATE_KEY: &str = "a request state key the instances share, 32+ bytes";

/// How long an ended task is kept in these tests (a running one: 40 s, four
/// refresh periods).
const TTL: Duration = Duration::from_secs(20);

/// How long an instance's death may take to be noticed (its lease lasts 6 s).
const LEASE_WAIT: Duration = Duration::from_secs(20);

/// Labels of the `hold` calls that started, and of those that stopped (the
/// value the tool held was dropped).
static STARTED: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Default::default);
static STOPPED: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Default::default);

/// How many times each `again` call ran (by label), and the labels whose
/// run may finish.
static RUNS: LazyLock<Mutex<HashMap<String, u32>>> = LazyLock::new(Default::default);
static RELEASED: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Default::default);

fn started(label: &str) -> bool {
    STARTED.lock().unwrap().contains(label)
}

fn stopped(label: &str) -> bool {
    STOPPED.lock().unwrap().contains(label)
}

/// What a `hold` call holds while it runs.
struct Held(String);

impl Drop for Held {
    fn drop(&mut self) {
        STOPPED.lock().unwrap().insert(self.0.clone());
    }
}

#[haip::data]
struct Name {
    name: String,
}

/// `report` (sleeps `ms`, then says its label), `two` (asks two questions
/// at once), `hold` (runs until cancelled): all optionally tasks.
fn tools() -> Vec<Tool> {
    let report = Tool::builder("report")
        .task_support(TaskSupport::Optional)
        .handler(|params: Value, ctx: Context| async move {
            let ms = params["ms"].as_u64().unwrap_or(0);
            ctx.progress_with(50.0, "halfway");
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, ToolError>(json!({"label": params["label"]}))
        })
        .build()
        .unwrap();
    let two = Tool::builder("two")
        .task_support(TaskSupport::Optional)
        .handler(|_: Value, ctx: Context| async move {
            // Looking something up first: the call waits, and becomes a task.
            tokio::task::yield_now().await;
            let (a, b) = tokio::join!(
                ctx.ask::<Name>("First?").key("first").into_future(),
                ctx.ask::<Name>("Second?").key("second").into_future()
            );
            let name = |a: Answer<Name>| match a {
                Answer::Accepted(n) => n.name,
                _ => "-".to_owned(),
            };
            Ok::<_, ToolError>(json!(format!("{} and {}", name(a?), name(b?))))
        })
        .build()
        .unwrap();
    let hold = Tool::builder("hold")
        .task_support(TaskSupport::Optional)
        .handler(|params: Value, ctx: Context| async move {
            let label = params["label"].as_str().unwrap_or_default().to_owned();
            let _held = Held(label.clone());
            STARTED.lock().unwrap().insert(label);
            ctx.cancelled().await;
            Ok::<_, ToolError>(json!("stopped"))
        })
        .build()
        .unwrap();
    // Marked idempotent: its task runs again when its instance dies.
    let again = Tool::builder("again")
        .task_support(TaskSupport::Optional)
        .annotations(ToolAnnotations::new().idempotent(true))
        .handler(|params: Value, ctx: Context| async move {
            let label = params["label"].as_str().unwrap_or_default().to_owned();
            // Looking something up first: the call waits, and becomes a task.
            tokio::task::yield_now().await;
            let run = {
                let mut runs = RUNS.lock().unwrap();
                let run = runs.entry(label.clone()).or_insert(0);
                *run += 1;
                *run
            };
            let name = match ctx.ask::<Name>("Name?").key("name").await? {
                Answer::Accepted(n) => n.name,
                _ => "-".to_owned(),
            };
            STARTED.lock().unwrap().insert(format!("{label} run {run}"));
            // Until the test lets it finish (or it is stopped).
            while !RELEASED.lock().unwrap().contains(&label) {
                tokio::select! {
                    () = ctx.cancelled() => return Ok(json!("stopped")),
                    () = tokio::time::sleep(Duration::from_millis(10)) => {}
                }
            }
            Ok::<_, ToolError>(json!({"label": label, "name": name, "run": run}))
        })
        .build()
        .unwrap();
    // Not a task: asks at once, so its client answers on a retry (MRTR).
    let greet = Tool::builder("greet")
        .handler(|_: Value, ctx: Context| async move {
            let name = match ctx.ask::<Name>("Name?").key("name").await? {
                Answer::Accepted(n) => n.name,
                _ => "-".to_owned(),
            };
            Ok::<_, ToolError>(json!(format!("Hello, {name}")))
        })
        .build()
        .unwrap();
    vec![report, two, hold, again, greet]
}

/// The Redis the instances share: one server, or a three-primary cluster.
enum Store {
    One(RedisServer),
    Cluster(RedisCluster),
    /// A primary, its replica and three sentinels (no failover here:
    /// `redis_ha.rs` has one).
    Sentinels(Box<std::sync::Mutex<RedisSentinels>>),
}

impl Store {
    fn one() -> Store {
        Store::One(RedisServer::start())
    }

    fn cluster() -> Store {
        Store::Cluster(RedisCluster::start())
    }

    fn sentinels() -> Store {
        Store::Sentinels(Box::new(std::sync::Mutex::new(RedisSentinels::start())))
    }

    /// `base`, made this store's own: the variants of a test run side by
    /// side, and `hold`'s labels are seen by all of them.
    fn label(&self, base: &str) -> String {
        let kind = match self {
            Store::One(_) => "one",
            Store::Cluster(_) => "cluster",
            Store::Sentinels(_) => "sentinels",
        };
        format!("{base} ({kind})")
    }

    /// What `HAIP_REDIS_URL` would say.
    fn url(&self) -> String {
        match self {
            Store::One(redis) => redis.url(),
            Store::Cluster(cluster) => cluster.seed_list(),
            Store::Sentinels(sentinels) => sentinels.lock().unwrap().url(),
        }
    }

    /// One command about the key `args[1]`, sent to the node that holds it;
    /// the first line of the reply.
    fn command(&self, args: &[&str]) -> String {
        let answer = match self {
            Store::One(redis) => redis.command(args),
            Store::Cluster(cluster) => cluster.nodes()[cluster.node_for_key(args[1])].command(args),
            Store::Sentinels(sentinels) => sentinels.lock().unwrap().primary().command(args),
        };
        answer.unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }
}

/// An instance's builder: the test tools, sessions and tasks in `store`.
fn instance(store: &Store, id: &str) -> ServerBuilder {
    instance_with(store, id, 3)
}

/// An instance whose re-runnable tasks run at most `attempts` times.
fn instance_with(store: &Store, id: &str, attempts: u32) -> ServerBuilder {
    let mut builder = builder()
        .redis(store.url())
        .instance_id(id)
        .request_state_key(STATE_KEY)
        .limits(Limits {
            task_ttl: TTL,
            task_attempts: attempts,
            ..base_limits()
        });
    for tool in tools() {
        builder = builder.tool(tool);
    }
    builder
}

async fn serve(store: &Store, id: &str) -> ServerHandle {
    start(instance(store, id)).await.0
}

// ----- MCP requests, as tests/tests/mcp_tasks.rs sends them ------------------------

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "elicitation": {},
            "extensions": {TASKS: {}},
        },
    })
}

/// Sends one 2026-07-28 request; the JSON-RPC response.
async fn rpc(addr: SocketAddr, method: &str, params: Value) -> Value {
    rpc_as(addr, None, method, params).await
}

/// Sends one 2026-07-28 request with the bearer `token`, if any; the
/// JSON-RPC response.
async fn rpc_as(addr: SocketAddr, token: Option<&str>, method: &str, mut params: Value) -> Value {
    params["_meta"] = meta();
    let name = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let mut headers = vec![
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ];
    if !name.is_empty() {
        headers.push(("Mcp-Name", name.as_str()));
    }
    let bearer = token.map(|t| format!("Bearer {t}"));
    if let Some(bearer) = &bearer {
        headers.push(("Authorization", bearer.as_str()));
    }
    within(
        &format!("{method} on {addr}"),
        mcp_request(addr, "POST", Some(&body), &headers),
    )
    .await
    .response()
}

fn result(response: &Value) -> &Value {
    assert!(response.get("error").is_none(), "an error: {response}");
    &response["result"]
}

/// Calls `tool`, which becomes a task: its id.
async fn task(addr: SocketAddr, tool: &str, arguments: Value) -> String {
    let created = rpc(
        addr,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
    .await;
    let created = result(&created);
    assert_eq!(created["resultType"], "task", "not a task: {created}");
    created["taskId"].as_str().expect("a taskId").to_owned()
}

async fn get(addr: SocketAddr, id: &str) -> Value {
    rpc(addr, "tasks/get", json!({"taskId": id})).await
}

fn status(got: &Value) -> String {
    result(got)["status"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Polls `tasks/get` on `addr` until the status is one of `statuses`.
async fn until(addr: SocketAddr, id: &str, statuses: &[&str]) -> Value {
    within(
        &format!("task {id} to reach {statuses:?} on {addr}"),
        async {
            loop {
                let got = get(addr, id).await;
                if statuses.contains(&status(&got).as_str()) {
                    return got;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        },
    )
    .await
}

/// Waits (polling, within `limit`) until `done` says so.
async fn poll(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The keys of the open questions a `tasks/get` shows.
fn open_keys(got: &Value) -> Vec<String> {
    result(got)["inputRequests"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// The calls running on `addr` (its `/stats`).
async fn active_calls(addr: SocketAddr) -> u64 {
    let response = conn::http(addr, "GET", "/stats", &[], "").await;
    let stats: Value = serde_json::from_str(&response.body).unwrap();
    stats["toolExecutions"]["active"]
        .as_u64()
        .unwrap_or_else(|| panic!("no active calls in {stats}"))
}

/// The milliseconds Redis keeps `key` (`PTTL`: -2 gone, -1 forever).
fn pttl(store: &Store, key: &str) -> i64 {
    let reply = store.command(&["PTTL", key]);
    reply
        .strip_prefix(':')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("PTTL {key}: {reply}"))
}

/// Whether instance `id`'s lease is in Redis.
fn leased(store: &Store, id: &str) -> bool {
    store.command(&["EXISTS", &format!("{{haip}}:i:{id}")]) == ":1"
}

fn assert_lost(got: &Value) {
    let got = result(got);
    assert_eq!(got["status"], "failed", "{got}");
    assert_eq!(got["error"]["code"], -32603, "{got}");
    let message = got["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("instance lost"), "{got}");
    assert!(got.get("result").is_none(), "{got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_started_on_one_instance_is_followed_on_another() {
    a_task_started_on_one_instance_is_followed_on_another_in(Store::one()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_started_on_one_instance_is_followed_on_another_over_a_redis_cluster() {
    a_task_started_on_one_instance_is_followed_on_another_in(Store::cluster()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_started_on_one_instance_is_followed_on_another_with_sentinels() {
    a_task_started_on_one_instance_is_followed_on_another_in(Store::sentinels()).await;
}

async fn a_task_started_on_one_instance_is_followed_on_another_in(store: Store) {
    let a = serve(&store, "a").await;
    let b = serve(&store, "b").await;
    let id = task(a.local_addr(), "report", json!({"ms": 400, "label": "q3"})).await;
    // Known everywhere at once: written before the call answered.
    let now = get(b.local_addr(), &id).await;
    assert_eq!(result(&now)["taskId"], id.as_str(), "{now}");
    assert!(
        ["working", "completed"].contains(&status(&now).as_str()),
        "{now}"
    );
    let done = until(b.local_addr(), &id, &["completed", "failed", "cancelled"]).await;
    let done = result(&done);
    assert_eq!(done["status"], "completed", "{done}");
    let text = done["result"]["content"][0]["text"].as_str().unwrap();
    let label: Value = serde_json::from_str(text).unwrap();
    assert_eq!(label, json!({"label": "q3"}), "{done}");
    // The same on the instance that ran it; an unknown task is unknown on both.
    let on_a = get(a.local_addr(), &id).await;
    assert_eq!(result(&on_a)["result"], done["result"], "{on_a}");
    for addr in [a.local_addr(), b.local_addr()] {
        let unknown = get(addr, "no-such-task").await;
        assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    }
    // An ended task's records expire `task_ttl` after its end.
    let kept = pttl(&store, &format!("{{haip}}:t:{id}"));
    assert!(kept > 0 && kept <= TTL.as_millis() as i64, "PTTL {kept}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_of_a_task_on_one_instance_are_answered_through_another() {
    questions_of_a_task_on_one_instance_are_answered_through_another_in(Store::one()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_of_a_task_on_one_instance_are_answered_through_another_over_a_redis_cluster() {
    questions_of_a_task_on_one_instance_are_answered_through_another_in(Store::cluster()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_of_a_task_on_one_instance_are_answered_through_another_with_sentinels() {
    questions_of_a_task_on_one_instance_are_answered_through_another_in(Store::sentinels()).await;
}

async fn questions_of_a_task_on_one_instance_are_answered_through_another_in(store: Store) {
    let a = serve(&store, "a").await;
    let b = serve(&store, "b").await;
    let id = task(a.local_addr(), "two", json!({})).await;
    within("both questions, seen on b", async {
        loop {
            let got = until(b.local_addr(), &id, &["input_required"]).await;
            if open_keys(&got).len() == 2 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let answer = |key: &str, name: &str| json!({"taskId": id, "inputResponses": {key: {"action": "accept", "content": {"name": name}}}});
    let ack = rpc(b.local_addr(), "tasks/update", answer("first", "Ada")).await;
    assert_eq!(result(&ack), &json!({"resultType": "complete"}), "{ack}");
    // Right after, on b and on a: only the unanswered question is open.
    for addr in [b.local_addr(), a.local_addr()] {
        let one = get(addr, &id).await;
        assert_eq!(status(&one), "input_required", "{one}");
        assert_eq!(open_keys(&one), ["second"], "{one}");
    }
    // Answered again: ignored (it is no longer open).
    let again = rpc(b.local_addr(), "tasks/update", answer("first", "Eve")).await;
    assert_eq!(
        result(&again),
        &json!({"resultType": "complete"}),
        "{again}"
    );
    let ack = rpc(b.local_addr(), "tasks/update", answer("second", "Grace")).await;
    assert_eq!(result(&ack), &json!({"resultType": "complete"}), "{ack}");
    let done = until(b.local_addr(), &id, &["completed", "failed", "cancelled"]).await;
    assert_eq!(
        result(&done)["result"]["content"][0]["text"],
        "Ada and Grace",
        "{done}"
    );
    // No question is left behind.
    assert_eq!(pttl(&store, &format!("{{haip}}:t:{id}:q")), -2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_on_one_instance_is_cancelled_through_another() {
    a_task_on_one_instance_is_cancelled_through_another_in(Store::one()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_on_one_instance_is_cancelled_through_another_over_a_redis_cluster() {
    a_task_on_one_instance_is_cancelled_through_another_in(Store::cluster()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_on_one_instance_is_cancelled_through_another_with_sentinels() {
    a_task_on_one_instance_is_cancelled_through_another_in(Store::sentinels()).await;
}

async fn a_task_on_one_instance_is_cancelled_through_another_in(store: Store) {
    let a = serve(&store, "a").await;
    let b = serve(&store, "b").await;
    let label = store.label("cancel-me");
    let id = task(a.local_addr(), "hold", json!({"label": label})).await;
    poll("the call to start", Duration::from_secs(10), || {
        started(&label)
    })
    .await;
    assert_eq!(status(&get(b.local_addr(), &id).await), "working");
    let ack = rpc(b.local_addr(), "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(result(&ack), &json!({"resultType": "complete"}), "{ack}");
    // Recorded before the answer: cancelled wherever it is asked.
    for addr in [b.local_addr(), a.local_addr()] {
        let got = get(addr, &id).await;
        assert_eq!(status(&got), "cancelled", "{got}");
    }
    // The tool on a really stopped, and its end did not change the record.
    poll("the call on a to stop", Duration::from_secs(10), || {
        stopped(&label)
    })
    .await;
    within("a's call to end", async {
        while active_calls(a.local_addr()).await > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let got = get(b.local_addr(), &id).await;
    assert_eq!(status(&got), "cancelled", "{got}");
    // Cancelling again is acknowledged, and changes nothing.
    let ack = rpc(a.local_addr(), "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(result(&ack), &json!({"resultType": "complete"}), "{ack}");
    assert_eq!(status(&get(a.local_addr(), &id).await), "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_instance_died_fails_once_as_lost() {
    a_task_whose_instance_died_fails_once_as_lost_in(Store::one()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_instance_died_fails_once_as_lost_over_a_redis_cluster() {
    a_task_whose_instance_died_fails_once_as_lost_in(Store::cluster()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_instance_died_fails_once_as_lost_with_sentinels() {
    a_task_whose_instance_died_fails_once_as_lost_in(Store::sentinels()).await;
}

async fn a_task_whose_instance_died_fails_once_as_lost_in(store: Store) {
    // A runs on a runtime of its own: dropping that runtime is A dying
    // mid-task (no shutdown, its lease left to expire).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let a = runtime.spawn(start(instance(&store, "a"))).await.unwrap().0;
    let b = serve(&store, "b").await;
    let c = serve(&store, "c").await;
    let label = store.label("dies");
    let id = task(a.local_addr(), "hold", json!({"label": label})).await;
    poll("the call to start", Duration::from_secs(10), || {
        started(&label)
    })
    .await;
    assert_eq!(status(&get(b.local_addr(), &id).await), "working");
    // A running task's record outlives `task_ttl` while its owner lives.
    let running = pttl(&store, &format!("{{haip}}:t:{id}"));
    assert!(running > TTL.as_millis() as i64, "PTTL {running}");

    runtime.shutdown_background();
    drop(a);
    poll("a's lease to expire", LEASE_WAIT, || !leased(&store, "a")).await;
    // B and C at once: both see it failed, and it was written once.
    let (on_b, on_c) = tokio::join!(get(b.local_addr(), &id), get(c.local_addr(), &id));
    assert_lost(&on_b);
    assert_lost(&on_c);
    assert_eq!(result(&on_b), result(&on_c), "b and c agree");
    let first = result(&on_b).clone();
    // It stays so, wherever it is asked, and now expires as an ended task.
    for round in 0..5 {
        let addr = [b.local_addr(), c.local_addr()][round % 2];
        let got = get(addr, &id).await;
        assert_eq!(result(&got), &first, "round {round}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let kept = pttl(&store, &format!("{{haip}}:t:{id}"));
    assert!(kept > 0 && kept <= TTL.as_millis() as i64, "PTTL {kept}");
    let cancel = rpc(c.local_addr(), "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(
        result(&cancel),
        &json!({"resultType": "complete"}),
        "{cancel}"
    );
    assert_eq!(result(&get(b.local_addr(), &id).await), &first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_taken_for_dead_does_not_overwrite_its_lost_task() {
    an_owner_taken_for_dead_does_not_overwrite_its_lost_task_in(Store::one()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_taken_for_dead_does_not_overwrite_its_lost_task_over_a_redis_cluster() {
    an_owner_taken_for_dead_does_not_overwrite_its_lost_task_in(Store::cluster()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_taken_for_dead_does_not_overwrite_its_lost_task_with_sentinels() {
    an_owner_taken_for_dead_does_not_overwrite_its_lost_task_in(Store::sentinels()).await;
}

async fn an_owner_taken_for_dead_does_not_overwrite_its_lost_task_in(store: Store) {
    let a = serve(&store, "a").await;
    let b = serve(&store, "b").await;
    let label = store.label("presumed-dead");
    let id = task(a.local_addr(), "hold", json!({"label": label})).await;
    poll("the call to start", Duration::from_secs(10), || {
        started(&label)
    })
    .await;
    // A's lease disappears (as when A cannot reach Redis for a while): B
    // takes A for dead. A puts its lease back every 2 s: tried until B
    // asks in between.
    let lost = within("b to take a for dead", async {
        loop {
            store.command(&["DEL", "{haip}:i:a"]);
            let got = get(b.local_addr(), &id).await;
            if status(&got) != "working" {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_lost(&lost);
    // A, alive, finds the task ended when it refreshes its records, and
    // stops the call; its own end of the call is refused.
    poll(
        "a to stop the call of its lost task",
        Duration::from_secs(30),
        || stopped(&label),
    )
    .await;
    within("a's call to end", async {
        while active_calls(a.local_addr()).await > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    for addr in [a.local_addr(), b.local_addr()] {
        let got = get(addr, &id).await;
        assert_eq!(result(&got), result(&lost), "{got}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerunnable_task_whose_instance_died_runs_again_on_another() {
    a_rerunnable_task_whose_instance_died_runs_again_on_another_in(Store::one()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerunnable_task_whose_instance_died_runs_again_on_another_over_a_redis_cluster() {
    a_rerunnable_task_whose_instance_died_runs_again_on_another_in(Store::cluster()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerunnable_task_whose_instance_died_runs_again_on_another_with_sentinels() {
    a_rerunnable_task_whose_instance_died_runs_again_on_another_in(Store::sentinels()).await;
}

/// An instance on a runtime of its own, and that runtime: dropping it is
/// the instance dying mid-task (no shutdown, its lease left to expire).
async fn mortal(builder: ServerBuilder) -> (ServerHandle, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let handle = runtime.spawn(start(builder)).await.unwrap().0;
    (handle, runtime)
}

/// Answers the task's `name` question with `name`, through `addr`.
async fn answer_name(addr: SocketAddr, id: &str, name: &str) {
    let update = json!({"taskId": id, "inputResponses": {"name": {"action": "accept", "content": {"name": name}}}});
    let ack = rpc(addr, "tasks/update", update).await;
    assert_eq!(result(&ack), &json!({"resultType": "complete"}), "{ack}");
}

async fn a_rerunnable_task_whose_instance_died_runs_again_on_another_in(store: Store) {
    let (a, runtime) = mortal(instance(&store, "a")).await;
    let b = serve(&store, "b").await;
    let c = serve(&store, "c").await;
    let label = store.label("again");
    let id = task(a.local_addr(), "again", json!({"label": label})).await;
    // Its question, answered through B; then it runs on A.
    until(b.local_addr(), &id, &["input_required"]).await;
    answer_name(b.local_addr(), &id, "Ada").await;
    poll("the first run to go on", Duration::from_secs(10), || {
        started(&format!("{label} run 1"))
    })
    .await;

    runtime.shutdown_background();
    drop(a);
    // B or C takes it over once A's lease is gone, and runs it again from
    // the start: its question gets the answer given before, at once.
    poll("the task to run again", LEASE_WAIT, || {
        started(&format!("{label} run 2"))
    })
    .await;
    let running = get(c.local_addr(), &id).await;
    assert_eq!(status(&running), "working", "{running}");
    let message = result(&running)["statusMessage"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("attempt 2 of 3"), "{running}");
    assert!(
        open_keys(&running).is_empty(),
        "no question asked again: {running}"
    );

    RELEASED.lock().unwrap().insert(label.clone());
    let done = until(b.local_addr(), &id, &["completed", "failed", "cancelled"]).await;
    let done = result(&done).clone();
    assert_eq!(done["status"], "completed", "{done}");
    let text = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    let value: Value = serde_json::from_str(text).unwrap_or_default();
    assert_eq!(value["name"], "Ada", "{done}");
    assert_eq!(value["run"], 2, "{done}");
    // One run again, by one instance, and one end, the same wherever asked.
    for round in 0..6 {
        let addr = [b.local_addr(), c.local_addr()][round % 2];
        assert_eq!(result(&get(addr, &id).await), &done, "round {round}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(RUNS.lock().unwrap()[&label], 2);
    // It left the index of re-runnable tasks, whichever instance ran it.
    for owner in ["a", "b", "c"] {
        let set = format!("{{haip}}:rr:{owner}");
        assert_eq!(store.command(&["SISMEMBER", &set, &id]), ":0", "in {set}");
    }
}

/// A re-runnable task runs `task_attempts` times at most: its instance
/// dies each time, and after the last it fails as lost, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerunnable_task_out_of_attempts_fails_as_lost() {
    let store = Store::one();
    let (a, first) = mortal(instance_with(&store, "a", 2)).await;
    let (b, second) = mortal(instance_with(&store, "b", 2)).await;
    let label = store.label("out of attempts");
    let id = task(a.local_addr(), "again", json!({"label": label})).await;
    until(b.local_addr(), &id, &["input_required"]).await;
    answer_name(b.local_addr(), &id, "Grace").await;
    poll("the first run to go on", Duration::from_secs(10), || {
        started(&format!("{label} run 1"))
    })
    .await;
    first.shutdown_background();
    drop(a);
    // B, the only instance left, runs it again: then B dies too.
    poll("the task to run again", LEASE_WAIT, || {
        started(&format!("{label} run 2"))
    })
    .await;
    let c = serve_with(&store, "c", 2).await;
    second.shutdown_background();
    drop(b);
    poll("b's lease to expire", LEASE_WAIT, || !leased(&store, "b")).await;
    let lost = until(c.local_addr(), &id, &["failed", "completed", "cancelled"]).await;
    assert_lost(&lost);
    let message = result(&lost)["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("the last of its 2 attempts"), "{lost}");
    assert_eq!(RUNS.lock().unwrap()[&label], 2, "no third run");
}

async fn serve_with(store: &Store, id: &str, attempts: u32) -> ServerHandle {
    start(instance_with(store, id, attempts)).await.0
}

/// A caller's `subscriptions/listen` stream (its tasks' changes).
async fn listen_as(addr: SocketAddr, token: &str) -> mcp_http::Streaming {
    let body = json!({
        "jsonrpc": "2.0", "id": 99, "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": true}, "_meta": meta()},
    });
    let bearer = format!("Bearer {token}");
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "subscriptions/listen"),
        ("Authorization", bearer.as_str()),
    ];
    let mut stream = within(
        "a listen stream",
        mcp_http::mcp_stream(addr, &body, &headers),
    )
    .await;
    assert_eq!(stream.status, 200);
    let ack = within("its acknowledgment", stream.next()).await;
    assert_eq!(
        ack.expect("an acknowledgment")["method"],
        "notifications/subscriptions/acknowledged"
    );
    stream
}

/// The next `notifications/tasks` of task `id` on `stream` whose status
/// message or status `matches`.
async fn heard(
    stream: &mut mcp_http::Streaming,
    id: &str,
    matches: impl Fn(&Value) -> bool,
) -> Value {
    loop {
        let note = stream.next().await.expect("the stream goes on");
        if note["method"] == "notifications/tasks"
            && note["params"]["taskId"] == id
            && matches(&note["params"])
        {
            return note["params"].clone();
        }
    }
}

/// The listen streams of the task's caller hear that it runs again, on the
/// instance that took it over, and then that it completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_running_again_is_heard_on_its_callers_listen_streams() {
    const SECRET: &str = "a test secret for tasks that run again";
    let store = Store::one();
    let ada = support::hs256_token(SECRET, "ada", None);
    let (a, runtime) = mortal(instance(&store, "a").jwt_hs256(SECRET)).await;
    let b = start(instance(&store, "b").jwt_hs256(SECRET)).await.0;
    let c = start(instance(&store, "c").jwt_hs256(SECRET)).await.0;
    // Which of B and C takes the task over is not known: Ada listens on both.
    let mut on_b = listen_as(b.local_addr(), &ada).await;
    let mut on_c = listen_as(c.local_addr(), &ada).await;
    let label = store.label("heard again");
    let call = json!({"name": "again", "arguments": {"label": label}});
    let created = rpc_as(a.local_addr(), Some(&ada), "tools/call", call).await;
    let id = result(&created)["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    let update = json!({"taskId": id, "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}}});
    within("the question, answered", async {
        loop {
            let got = rpc_as(b.local_addr(), Some(&ada), "tasks/update", update.clone()).await;
            assert_eq!(result(&got), &json!({"resultType": "complete"}), "{got}");
            if started(&format!("{label} run 1")) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    runtime.shutdown_background();
    drop(a);
    let again = |task: &Value| {
        task["statusMessage"]
            .as_str()
            .is_some_and(|m| m.contains("attempt 2 of 3"))
    };
    let (stream, note) = within("notifications/tasks of the run again", async {
        tokio::select! {
            note = heard(&mut on_b, &id, again) => (&mut on_b, note),
            note = heard(&mut on_c, &id, again) => (&mut on_c, note),
        }
    })
    .await;
    assert_eq!(note["status"], "working", "{note}");
    RELEASED.lock().unwrap().insert(label.clone());
    let done = within(
        "notifications/tasks of its end",
        heard(stream, &id, |task| task["status"] == "completed"),
    )
    .await;
    let text = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains(r#""run":2"#), "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_asks_on_one_instance_and_is_retried_on_another() {
    a_call_asks_on_one_instance_and_is_retried_on_another_in(Store::one()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_asks_on_one_instance_and_is_retried_on_another_over_a_redis_cluster() {
    a_call_asks_on_one_instance_and_is_retried_on_another_in(Store::cluster()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_asks_on_one_instance_and_is_retried_on_another_with_sentinels() {
    a_call_asks_on_one_instance_and_is_retried_on_another_in(Store::sentinels()).await;
}

/// MRTR with the shared `request_state_key`: a call's question asked on A
/// (`input_required`, its `requestState` signed with the shared key), the
/// retry with the answer served by B.
async fn a_call_asks_on_one_instance_and_is_retried_on_another_in(store: Store) {
    let a = serve(&store, "a").await;
    let b = serve(&store, "b").await;
    let asked = rpc(
        a.local_addr(),
        "tools/call",
        json!({"name": "greet", "arguments": {}}),
    )
    .await;
    let asked = result(&asked);
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    assert!(asked["inputRequests"].get("name").is_some(), "{asked}");
    let state = asked["requestState"].as_str().expect("a requestState");
    let retry = json!({
        "name": "greet",
        "arguments": {},
        "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}},
        "requestState": state,
    });
    let done = rpc(b.local_addr(), "tools/call", retry).await;
    let done = result(&done);
    assert_eq!(done["isError"], false, "{done}");
    assert_eq!(done["content"][0]["text"], "Hello, Ada", "{done}");
}

//! Security: one caller cannot fill the task store (issue 37, item 6). The
//! records of MCP tasks are a pool all callers share; each caller holds at
//! most its share of it (`max_task_bytes_per_client`), running and ended
//! tasks alike until their records expire (`task_ttl`).
//!
//! - In memory: Alice (a JWT subject) makes short tasks with large results
//!   until a call is refused, naming `max_task_bytes_per_client` (the
//!   results that did not fit her share failed, saying so); Bob's task is
//!   then accepted and completes with its whole result; once Alice's ended
//!   tasks expire she has room again.
//! - The same with two instances sharing Redis: the share is counted in
//!   Redis, so Alice filling hers through one instance is refused on the
//!   other too, while Bob is served on both; her share's count goes as her
//!   records expire.
//!
//! Each server keeps four shares in all (`max_task_bytes`): without the
//! per-caller share Alice fills the server, is refused naming
//! `max_task_bytes`, and Bob's task is refused or fails.

use crate::mcp_http;
use crate::redis_support;
use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use haip::{Limits, ServerBuilder, ServerHandle, TaskSupport, Tool, ToolError};
use mcp_http::mcp_request;
use redis_support::RedisServer;
use serde_json::{Value, json};
use support::{base_limits, builder, hs256_token, start, within};

const TASKS: &str = "io.modelcontextprotocol/tasks";

/// The JWT secret (32 bytes or more).
const SECRET: &str = "a secret for the task share tests, long enough";

/// One caller's share of the task records' bytes.
const SHARE: usize = 64 * 1024;

/// The size of a `big` task's result: three fit a share.
const RESULT: usize = 20 * 1024;

/// How long an ended task is kept: longer than Alice takes to fill her
/// share, short enough to wait for.
const TTL: Duration = Duration::from_secs(5);

/// Calls Alice makes at most before she must have been refused.
const MOST: usize = 200;

/// `big`: becomes a task (it waits once), then answers `bytes` characters.
fn big() -> Tool {
    Tool::builder("big")
        .task_support(TaskSupport::Optional)
        .handler(|params: Value, _ctx: haip::Context| async move {
            tokio::task::yield_now().await;
            let bytes = params["bytes"].as_u64().unwrap_or(0) as usize;
            Ok::<_, ToolError>(json!("x".repeat(bytes)))
        })
        .build()
        .unwrap()
}

/// A server's builder: JWT callers, the `big` tool, small shares and a
/// short `task_ttl`.
fn server() -> ServerBuilder {
    builder()
        .jwt_hs256(SECRET)
        .limits(Limits {
            task_ttl: TTL,
            max_task_bytes: 4 * SHARE,
            max_task_bytes_per_client: SHARE,
            ..base_limits()
        })
        .tool(big())
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
    })
}

/// Sends one 2026-07-28 request as the holder of `token`; the JSON-RPC
/// response.
async fn rpc(addr: SocketAddr, token: &str, method: &str, mut params: Value) -> Value {
    params["_meta"] = meta();
    let name = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let bearer = format!("Bearer {token}");
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
        ("Mcp-Name", name.as_str()),
        ("Authorization", bearer.as_str()),
    ];
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

/// How a call of `big` was answered.
enum Called {
    /// It became a task: its id.
    Task(String),
    /// It was refused with a tool error: its text.
    Refused(String),
}

async fn call_big(addr: SocketAddr, token: &str) -> Called {
    let params = json!({"name": "big", "arguments": {"bytes": RESULT}});
    let response = rpc(addr, token, "tools/call", params).await;
    let answered = result(&response);
    if answered["resultType"] == "task" {
        return Called::Task(answered["taskId"].as_str().expect("a taskId").to_owned());
    }
    assert_eq!(
        answered["isError"], true,
        "neither task nor refusal: {response}"
    );
    let text = answered["content"][0]["text"].as_str().unwrap_or_default();
    Called::Refused(text.to_owned())
}

/// Polls `tasks/get` until the task has ended; its last `tasks/get` result.
async fn ended(addr: SocketAddr, token: &str, id: &str) -> Value {
    within(&format!("task {id} to end"), async {
        loop {
            let got = rpc(addr, token, "tasks/get", json!({"taskId": id})).await;
            let got = result(&got).clone();
            if ["completed", "failed", "cancelled"].contains(&got["status"].as_str().unwrap_or(""))
            {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// Asserts the task ended completed with `big`'s whole result.
fn assert_whole(got: &Value) {
    assert_eq!(got["status"], "completed", "{got}");
    let text = got["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(text.len(), RESULT, "the whole result");
}

/// Alice's calls on `addrs` (in turn) until one is refused while none of
/// her tasks runs (a running task is counted with room for its end, which
/// it gives back if it fails): from then on she stays refused until her
/// records expire. Each refusal names her share's setting, and each of her
/// tasks ended with its whole result or failed saying it did not fit her
/// share (at least one did).
async fn fill(addrs: &[SocketAddr], alice: &str) -> Vec<String> {
    let (mut whole, mut not_kept, mut n) = (0, 0, 0);
    let mut all = Vec::new();
    loop {
        let (ids, refusal) = within("Alice to be refused", async {
            let mut ids = Vec::new();
            while n < MOST {
                let addr = addrs[n % addrs.len()];
                n += 1;
                match call_big(addr, alice).await {
                    Called::Task(id) => ids.push((addr, id)),
                    Called::Refused(why) => return (ids, why),
                }
            }
            panic!("{MOST} tasks of Alice's accepted, and no refusal that holds");
        })
        .await;
        assert!(
            refusal.contains("max_task_bytes_per_client"),
            "the refusal names the caller's share: {refusal}"
        );
        if ids.is_empty() {
            break;
        }
        for (addr, id) in &ids {
            let got = ended(*addr, alice, id).await;
            if got["status"] == "completed" {
                assert_whole(&got);
                whole += 1;
            } else {
                assert_eq!(got["status"], "failed", "{got}");
                let message = got["error"]["message"].as_str().unwrap_or_default();
                assert!(
                    message.contains("not kept") && message.contains("max_task_bytes_per_client"),
                    "{got}"
                );
                not_kept += 1;
            }
            all.push(id.clone());
        }
    }
    assert!(
        (1..=SHARE / RESULT).contains(&whole) && not_kept > 0,
        "{whole} results kept, {not_kept} not"
    );
    all
}

/// Alice's calls on `addr` until one is accepted again (her ended tasks
/// expired), which completes with its whole result.
async fn room_again(addr: SocketAddr, alice: &str) {
    let id = within("Alice's share to have room again", async {
        loop {
            if let Called::Task(id) = call_big(addr, alice).await {
                return id;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_whole(&ended(addr, alice, &id).await);
}

/// Bob's call on `addr`: accepted, and completed with its whole result.
async fn served(addr: SocketAddr, bob: &str) {
    match call_big(addr, bob).await {
        Called::Task(id) => assert_whole(&ended(addr, bob, &id).await),
        Called::Refused(why) => panic!("Bob was refused: {why}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_caller_fills_only_its_own_share_of_the_task_store() {
    let (server, _) = start(server()).await;
    let addr = server.local_addr();
    let alice = hs256_token(SECRET, "alice", None);
    let bob = hs256_token(SECRET, "bob", None);
    let (before, ()) = support::timed(served(addr, &bob)).await;
    fill(&[addr], &alice).await;
    // Still refused: what she left is kept until it expires.
    assert!(matches!(call_big(addr, &alice).await, Called::Refused(_)));
    let (during, ()) = support::timed(served(addr, &bob)).await;
    support::security_row(
        6,
        "One subject makes short tasks with large results until the task store is full (shown with a 64 KiB share of 256 KiB); ended tasks are kept 30 min by default",
        "beyond its share (running and ended tasks until they expire): a tool error naming `max_task_bytes_per_client`; a result that does not fit fails its task saying so",
        "another subject's task with a 20 KiB result, to its end",
        Some(before),
        Some(during),
    );
    room_again(addr, &alice).await;
}

/// An instance of a server sharing `redis`.
async fn instance(redis: &RedisServer, id: &str) -> ServerHandle {
    start(server().redis(redis.url()).instance_id(id)).await.0
}

/// An integer reply of `redis` (`:n`).
fn integer(redis: &RedisServer, command: &[&str]) -> i64 {
    let reply = redis.command(command).unwrap();
    reply
        .strip_prefix(':')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{command:?}: {reply:?}"))
}

/// The bytes the share of `caller` holds in `redis` (-1: none).
fn held(redis: &RedisServer, caller: &str) -> i64 {
    let sum = "return tonumber(redis.call('HGET', KEYS[1], '=') or '-1')";
    integer(redis, &["EVAL", sum, "1", &format!("{{haip}}:tb:{caller}")])
}

/// The records of `caller`'s share that are still in `redis`, and the sum
/// of the bytes the share counts them for (`-1`: the share's keys do not
/// agree on its tasks).
fn counted(redis: &RedisServer, caller: &str) -> (i64, i64) {
    let sum = r"
local ids = redis.call('ZRANGE', KEYS[2], 0, -1)
if #ids ~= redis.call('HLEN', KEYS[1]) - 1 then return -1 end
local n, bytes = 0, 0
for _, id in ipairs(ids) do
  if redis.call('EXISTS', '{haip}:t:' .. id) == 1 then
    n = n + 1
    bytes = bytes + tonumber(redis.call('HGET', KEYS[1], id))
  end
end
return n * 1000000000 + bytes
";
    let (bytes, expiry) = (
        format!("{{haip}}:tb:{caller}"),
        format!("{{haip}}:te:{caller}"),
    );
    let both = integer(redis, &["EVAL", sum, "2", &bytes, &expiry]);
    (both / 1_000_000_000, both % 1_000_000_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_caller_fills_only_its_own_share_of_the_task_store_in_redis() {
    let redis = RedisServer::start();
    let a = instance(&redis, "a").await;
    let b = instance(&redis, "b").await;
    let (a, b) = (a.local_addr(), b.local_addr());
    let alice = hs256_token(SECRET, "alice", None);
    let bob = hs256_token(SECRET, "bob", None);
    let filled = fill(&[a], &alice).await;
    // Her share is counted in Redis: refused on the other instance too.
    match call_big(b, &alice).await {
        Called::Refused(why) => assert!(why.contains("max_task_bytes_per_client"), "{why}"),
        Called::Task(id) => panic!("Alice's task {id} accepted on b"),
    }
    let alices = r#"subject "alice""#;
    let holds = held(&redis, alices);
    assert!(
        holds > (SHARE - 2048) as i64 && holds <= SHARE as i64,
        "{holds}"
    );
    for key in ["tb", "te"] {
        let kept = integer(&redis, &["PTTL", &format!("{{haip}}:{key}:{alices}")]);
        assert!(kept > 0, "her share's keys expire: PTTL {kept}");
    }
    for addr in [a, b] {
        served(addr, &bob).await;
    }
    room_again(b, &alice).await;
    // Once all her first records are gone, none of them is counted: her
    // share holds her two last tasks, as their records are now.
    within("Alice's first records to expire", async {
        let gone = |id: &String| integer(&redis, &["EXISTS", &format!("{{haip}}:t:{id}")]) == 0;
        while !filled.iter().all(gone) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let last = match call_big(a, &alice).await {
        Called::Task(id) => id,
        Called::Refused(why) => panic!("Alice refused with two tasks kept: {why}"),
    };
    assert_whole(&ended(a, &alice, &last).await);
    let holds = held(&redis, alices);
    assert_eq!(counted(&redis, alices), (2, holds));
    assert!(
        holds > 2 * RESULT as i64 && holds < 2 * (RESULT as i64 + 1024),
        "{holds}"
    );
}

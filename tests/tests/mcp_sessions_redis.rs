//! MCP sessions shared through Redis (issue 38, item 1): two instances
//! behind a round-robin proxy, each request to the other instance than the
//! one before, so that a session opened on one is served by both:
//!
//! - the official Python MCP SDK with its `initialize` handshake
//!   (`tests/mcp/http_session.py`): the quickstart's tools listed, calls with
//!   progress, `book_table`'s question answered (the answer reaches the
//!   instance that asked, whichever instance it is posted to), a call
//!   cancelled (the cancellation reaches the instance that runs it), the
//!   `DELETE`;
//! - raw HTTP: a `DELETE` on one instance ends the session on the other,
//!   its running call cancelled.

use crate::mcp_http;
use crate::redis_support;
use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use haip::{Context, ServerBuilder, ServerHandle, Tool, ToolError};
use mcp_http::{Proxy, mcp_request, run_script};
use redis_support::RedisServer;
use serde_json::{Value, json};
use support::{demo_builder, executions, get_json, start, within};
use tokio::sync::mpsc;

const REVISION: &str = "2025-11-25";

/// An instance named `id` sharing `redis`, with MCP sessions (the default).
fn instance(redis: &RedisServer, id: &str) -> ServerBuilder {
    demo_builder().redis(redis.url()).instance_id(id)
}

async fn serve(builder: ServerBuilder) -> (ServerHandle, SocketAddr) {
    let (handle, _) = start(builder).await;
    let addr = handle.local_addr();
    (handle, addr)
}

/// The sum of both instances' `toolExecutions`, once `done` holds of it.
async fn executions_of(addrs: [SocketAddr; 2], done: impl Fn([u64; 5]) -> bool) -> [u64; 5] {
    within("both instances' calls to end", async {
        loop {
            let mut sum = [0; 5];
            for addr in addrs {
                let one = executions(&get_json(addr, "/stats").await);
                for (total, n) in sum.iter_mut().zip(one) {
                    *total += n;
                }
            }
            if done(sum) {
                return sum;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_session_is_served_by_two_instances_sharing_redis() {
    let redis = RedisServer::start();
    let (a, a_addr) = serve(instance(&redis, "mcp-a")).await;
    let (b, b_addr) = serve(instance(&redis, "mcp-b")).await;
    let proxy = Proxy::start([a_addr, b_addr]).await;
    let url = format!("http://{}/mcp", proxy.addr);
    let summary = run_script("http_session.py", &[&url]).await;
    println!("{summary}");

    let routed = proxy.routed();
    let report = format!("{routed:#?}");
    let opened_on: Vec<usize> = routed
        .iter()
        .filter(|r| r.method == "initialize")
        .map(|r| r.instance)
        .collect();
    assert_eq!(opened_on.len(), 1, "one session: {report}");
    let other = 1 - opened_on[0];
    assert!(
        routed
            .iter()
            .any(|r| r.instance == other && r.method == "tools/call" && r.status == 200),
        "the instance that did not open the session served calls in it: {report}"
    );
    assert!(
        routed
            .iter()
            .filter(|r| r.http == "POST" && !r.request)
            .all(|r| r.status == 202),
        "notifications and answers were accepted on either instance: {report}"
    );
    // echo, process_file, book_table (its question answered), the cancelled
    // process_file, add: wherever they ran.
    let sum = executions_of([a_addr, b_addr], |e| e[0] == 5 && e[4] == 0).await;
    assert_eq!(sum, [5, 4, 0, 1, 0], "{report}");
    a.shutdown().await;
    b.shutdown().await;
}

/// `wait_for_cancel`: reports its start and its cancellation.
fn cancel_probe() -> (Tool, mpsc::UnboundedReceiver<&'static str>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let tool = Tool::builder("wait_for_cancel")
        .description("Waits until cancelled")
        .handler(move |_params: Value, ctx: Context| {
            let tx = tx.clone();
            async move {
                let _ = tx.send("started");
                ctx.cancelled().await;
                let _ = tx.send("cancelled");
                Err::<Value, _>(ToolError::cancelled())
            }
        })
        .build()
        .expect("the probe is a valid tool");
    (tool, rx)
}

async fn in_session(addr: SocketAddr, id: &str, method: &str, body: Option<&Value>) -> u16 {
    let headers = [("mcp-session-id", id), ("mcp-protocol-version", REVISION)];
    mcp_request(addr, method, body, &headers).await.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_on_one_instance_ends_the_session_on_both() {
    let redis = RedisServer::start();
    let (probe, mut events) = cancel_probe();
    let (a, a_addr) = serve(instance(&redis, "del-a").tool(probe)).await;
    let (b, b_addr) = serve(instance(&redis, "del-b")).await;

    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": REVISION, "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}}
    });
    let init = mcp_request(a_addr, "POST", Some(&initialize), &[]).await;
    assert_eq!(init.status, 200, "{init:?}");
    let session = init.headers["mcp-session-id"]
        .to_str()
        .expect("a text id")
        .to_owned();
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    assert_eq!(in_session(b_addr, &session, "POST", Some(&list)).await, 200);

    // A call on A, running until cancelled.
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "wait_for_cancel", "arguments": {}}});
    let headers = [
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", REVISION),
    ];
    let streaming = mcp_http::mcp_stream(a_addr, &call, &headers).await;
    assert_eq!(streaming.status, 200);
    assert_eq!(
        within("the probe to start", events.recv()).await,
        Some("started")
    );

    // Ended on B: the call on A is cancelled, and neither knows the session.
    assert_eq!(in_session(b_addr, &session, "DELETE", None).await, 204);
    assert_eq!(
        within("the probe to see its cancellation", events.recv()).await,
        Some("cancelled")
    );
    assert_eq!(in_session(a_addr, &session, "POST", Some(&list)).await, 404);
    assert_eq!(in_session(b_addr, &session, "POST", Some(&list)).await, 404);
    drop(streaming);
    a.shutdown().await;
    b.shutdown().await;
}

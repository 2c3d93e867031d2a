//! Layers around calls (issue 29), through the real wire: one stack, seen by
//! HAIP (`TOOL_CALL` over WebSocket) and MCP (`tools/call` on `/mcp`) alike.
//!
//! - The rate limit counts a subject's calls over both protocols together,
//!   refuses beyond with `RATE_LIMITED` and `retry_after_ms`, and holds under
//!   a bounded load of pipelined calls from several connections, each call
//!   still ending with exactly one `TOOL_DONE`.
//! - A layer rewrites params before they are checked; masked errors carry a
//!   reference instead of their text; a tool limited to one call at once
//!   refuses a second; an idempotent tool's result is answered again from
//!   the cache, per subject.
//! - A tool both idempotent and destructive (`delete_bucket`) is never
//!   answered from the cache: it runs every time.

use crate::mcp_http;
use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use haip::auth::{AuthError, AuthFuture, Authenticator};
use haip::layer::{Cache, Call, ConcurrencyLimit, MaskErrors, Next, RateLimit, from_fn};
use haip::{Context, ServerHandle, Tool, ToolAnnotations, ToolError};
use mcp_http::mcp_request;
use serde_json::{Value, json};
use support::{Client, builder, within};
use tokio::sync::Notify;

/// Token `user-X` is subject `X`.
struct Users;

impl Authenticator for Users {
    fn authenticate<'a>(&'a self, token: Option<&'a str>) -> AuthFuture<'a> {
        Box::pin(async move {
            match token.and_then(|t| t.strip_prefix("user-")) {
                Some(subject) => Ok(subject.to_owned()),
                None => Err(AuthError::invalid_token("not a user-")),
            }
        })
    }
}

/// `greet {name}`, idempotent, counting its runs.
fn greet(runs: &Arc<AtomicUsize>) -> Tool {
    let runs = Arc::clone(runs);
    Tool::builder("greet")
        .description("Greets someone.")
        .input_schema(json!({
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
            "additionalProperties": false
        }))
        .annotations(ToolAnnotations::new().idempotent(true))
        .handler(move |params: Value, _: Context| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, SeqCst);
                Ok(json!({"greeting": format!("hello {}", params["name"].as_str().unwrap_or("?"))}))
            }
        })
        .build()
        .expect("greet builds")
}

/// `fails`: an internal error with a secret in it.
fn fails() -> Tool {
    Tool::builder("fails")
        .description("Fails.")
        .handler(|_: Value, _: Context| async move {
            Err(ToolError::execution(
                "connect to db:5432 as admin/hunter2 refused",
            ))
        })
        .build()
        .expect("fails builds")
}

/// `hold`: says it started, then waits until released (or cancelled).
fn hold(release: &Arc<Notify>, started: &Arc<Notify>) -> Tool {
    let (release, started) = (Arc::clone(release), Arc::clone(started));
    Tool::builder("hold")
        .description("Waits.")
        .handler(move |_: Value, ctx: Context| {
            let (release, started) = (Arc::clone(&release), Arc::clone(&started));
            async move {
                started.notify_one();
                tokio::select! {
                    () = release.notified() => Ok(json!("released")),
                    () = ctx.cancelled() => Err(ToolError::cancelled()),
                }
            }
        })
        .build()
        .expect("hold builds")
}

/// A layer that accepts `who` for `name`, before the params are checked.
fn who_is_name() -> impl haip::layer::Layer {
    from_fn(|mut call: Call, next: Next| async move {
        if let Some(params) = call.params_mut().as_object_mut()
            && let Some(who) = params.remove("who")
        {
            params.insert("name".to_owned(), who);
        }
        next.run(call).await
    })
}

struct Served {
    handle: ServerHandle,
    addr: SocketAddr,
    runs: Arc<AtomicUsize>,
    release: Arc<Notify>,
    started: Arc<Notify>,
    cache: Cache,
}

async fn serve(rate: RateLimit) -> Served {
    let runs = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(Notify::new());
    let started = Arc::new(Notify::new());
    let cache = Cache::new(1 << 20);
    let builder = builder()
        // Stateless `/mcp`: each MCP call here is one POST, no `initialize`.
        .mcp_sessions(false)
        .authenticator(Users)
        .tool(greet(&runs))
        .tool(fails())
        .tool(hold(&release, &started))
        .layer(rate)
        .layer(MaskErrors::new())
        .layer(ConcurrencyLimit::per_tool(1).max_waiting(0))
        .layer(who_is_name())
        .layer(cache.clone());
    let (handle, _) = support::start(builder).await;
    let addr = handle.local_addr();
    Served {
        handle,
        addr,
        runs,
        release,
        started,
        cache,
    }
}

async fn haip_client(addr: SocketAddr, subject: &str) -> Client {
    Client::connect(&format!("ws://{addr}/haip?token=user-{subject}")).await
}

/// An MCP `tools/call` by `subject`: its `result`.
async fn mcp_call(addr: SocketAddr, subject: &str, name: &str, arguments: Value) -> Value {
    let body = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}
    });
    let auth = format!("Bearer user-{subject}");
    let reply = mcp_request(addr, "POST", Some(&body), &[("authorization", &auth)]).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let response = reply.response();
    response["result"].clone()
}

/// The texts of an MCP result's content.
fn texts(result: &Value) -> Vec<String> {
    result["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The value of a successful MCP result (its one text block, as JSON).
fn value_of(result: &Value) -> Value {
    assert_eq!(result["isError"], false, "{result}");
    serde_json::from_str(&texts(result)[0]).expect("a JSON text")
}

fn retry_after(result: &Value) -> u64 {
    result["details"]["retry_after_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("no retry hint: {result}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_counts_a_subject_over_haip_and_mcp_together() {
    let served = serve(RateLimit::per_subject(4, Duration::from_secs(3600))).await;
    let addr = served.addr;
    let mut ada = haip_client(addr, "ada").await;
    for i in 0..2 {
        let done = ada
            .call_done(&format!("c{i}"), "greet", json!({"name": "a"}))
            .await;
        assert_eq!(done["status"], "OK", "{done}");
    }
    for _ in 0..2 {
        let result = mcp_call(addr, "ada", "greet", json!({"name": "a"})).await;
        assert_eq!(result["isError"], false, "{result}");
    }
    // Four spent, over two protocols: the fifth is refused on either.
    let done = ada.call_done("c9", "greet", json!({"name": "a"})).await;
    assert_eq!(done["status"], "ERROR", "{done}");
    assert_eq!(done["result"]["code"], "RATE_LIMITED", "{done}");
    let wait = retry_after(&done["result"]);
    assert!(
        (890_000..=900_000).contains(&wait),
        "one call back every 15 minutes: {wait}"
    );
    let refused = mcp_call(addr, "ada", "greet", json!({"name": "a"})).await;
    assert_eq!(refused["isError"], true, "{refused}");
    let text = texts(&refused);
    assert!(text[0].contains("(RATE_LIMITED)"), "{refused}");
    let details: Value = serde_json::from_str(&text[1]).expect("details as JSON");
    assert!(details["retry_after_ms"].as_u64().is_some(), "{refused}");
    // Another subject is not held back.
    let result = mcp_call(addr, "bob", "greet", json!({"name": "b"})).await;
    assert_eq!(result["isError"], false, "{result}");
    ada.close().await;
    served.handle.shutdown().await;
}

/// Several connections of one subject pipeline more calls than the limit
/// allows: at most the burst plus what the rate refills in the time taken
/// are let through, every other call is refused with a retry hint, and every
/// call gets exactly one `TOOL_DONE`. Bounded: 4 × 150 calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_holds_under_a_bounded_load() {
    const CONNECTIONS: usize = 4;
    const CALLS: usize = 150;
    const RATE: u32 = 100; // per second, burst 20
    let served = serve(RateLimit::per_subject(RATE, Duration::from_secs(1)).burst(20)).await;
    let addr = served.addr;
    let started = Instant::now();
    let mut loads = Vec::new();
    for c in 0..CONNECTIONS {
        loads.push(tokio::spawn(async move {
            let mut client = haip_client(addr, "load").await;
            for i in 0..CALLS {
                // Distinct names: no answer comes from the cache.
                let params = json!({"name": format!("{c}-{i}")});
                client.call(&format!("c{i}"), "greet", params).await;
            }
            let (mut ok, mut limited) = (0usize, 0usize);
            let mut seen = std::collections::HashSet::new();
            while seen.len() < CALLS {
                let env = client.recv().await;
                assert_eq!(env["type"], "TOOL_DONE", "{env}");
                let payload = &env["payload"];
                assert!(
                    seen.insert(payload["call_id"].as_str().unwrap().to_owned()),
                    "one TOOL_DONE per call: {env}"
                );
                match payload["status"].as_str() {
                    Some("OK") => ok += 1,
                    _ => {
                        assert_eq!(payload["result"]["code"], "RATE_LIMITED", "{env}");
                        assert!(retry_after(&payload["result"]) >= 1, "{env}");
                        limited += 1;
                    }
                }
            }
            client.ping_marker().await;
            client.close().await;
            (ok, limited)
        }));
    }
    let (mut ok, mut limited) = (0, 0);
    for load in loads {
        let (o, l) = within("the load to end", load).await.expect("no panic");
        ok += o;
        limited += l;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let allowed = 20.0 + f64::from(RATE) * elapsed + 1.0;
    assert_eq!(ok + limited, CONNECTIONS * CALLS);
    // The burst goes through, but for a few of its cells: each check reads
    // the clock before it takes the subject's bucket, and a check whose
    // thread was held up between the two (the CI machine is busy) is judged
    // at a time the calls after it have passed already.
    assert!(ok >= 10, "the burst is let through: {ok}");
    assert!(
        ok as f64 <= allowed,
        "{ok} calls let through in {elapsed:.2} s, at most {allowed:.0} allowed"
    );
    assert_eq!(served.runs.load(SeqCst), ok, "refused calls never ran");
    eprintln!("{ok} let through, {limited} refused, in {elapsed:.2} s");
    served.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layers_rewrite_params_mask_errors_limit_and_cache_over_haip_and_mcp() {
    let served = serve(RateLimit::per_subject(1000, Duration::from_secs(1))).await;
    let addr = served.addr;
    let mut ada = haip_client(addr, "ada").await;

    // `who` is rewritten to `name` before the params are checked.
    let done = ada.call_done("r1", "greet", json!({"who": "ada"})).await;
    assert_eq!(done["result"], json!({"greeting": "hello ada"}), "{done}");
    let result = mcp_call(addr, "ada", "greet", json!({"who": "mcp"})).await;
    assert_eq!(
        value_of(&result),
        json!({"greeting": "hello mcp"}),
        "{result}"
    );
    // Still invalid after the layers: INVALID_PARAMS, as without layers.
    let done = ada.call_done("r2", "greet", json!({"name": 5})).await;
    assert_eq!(done["result"]["code"], "INVALID_PARAMS", "{done}");
    assert_eq!(done["result"]["details"][0]["path"], "/name", "{done}");
    assert_eq!(done["result"]["total"], 1, "{done}");
    let result = mcp_call(addr, "ada", "greet", json!({"name": 5})).await;
    assert_eq!(result["isError"], true, "{result}");
    assert!(
        texts(&result)[0].starts_with("Invalid params for tool greet:"),
        "{result}"
    );

    // Masked: the code stays, the secret goes, a reference comes.
    let done = ada.call_done("m1", "fails", json!({})).await;
    let failure = &done["result"];
    assert_eq!(failure["code"], "TOOL_EXECUTION_ERROR", "{done}");
    assert!(!done.to_string().contains("hunter2"), "{done}");
    let reference = failure["details"]["reference"]
        .as_str()
        .expect("a reference");
    assert!(
        failure["error"].as_str().unwrap().contains(reference),
        "{done}"
    );
    let result = mcp_call(addr, "ada", "fails", json!({})).await;
    assert_eq!(result["isError"], true);
    assert!(!result.to_string().contains("hunter2"), "{result}");
    assert!(result.to_string().contains("reference"), "{result}");

    // One `hold` at once: a second, over MCP, is refused while it runs.
    ada.call("h1", "hold", json!({})).await;
    within("hold to start", served.started.notified()).await;
    let refused = mcp_call(addr, "bob", "hold", json!({})).await;
    assert_eq!(refused["isError"], true, "{refused}");
    let mut bob = haip_client(addr, "bob").await;
    let done = bob.call_done("h2", "hold", json!({})).await;
    assert_eq!(done["result"]["code"], "RATE_LIMITED", "{done}");
    assert!(retry_after(&done["result"]) >= 1, "{done}");
    bob.close().await;
    assert!(texts(&refused)[0].contains("(RATE_LIMITED)"), "{refused}");
    served.release.notify_one();
    let done = ada.expect_done("h1").await;
    assert_eq!(done["result"], "released", "{done}");

    // Idempotent: the same call again is answered from the cache, per subject.
    let runs = served.runs.load(SeqCst);
    for i in 0..3 {
        let done = ada
            .call_done(&format!("k{i}"), "greet", json!({"name": "kay"}))
            .await;
        assert_eq!(done["result"], json!({"greeting": "hello kay"}), "{done}");
    }
    let result = mcp_call(addr, "ada", "greet", json!({"name": "kay"})).await;
    assert_eq!(
        value_of(&result),
        json!({"greeting": "hello kay"}),
        "{result}"
    );
    assert_eq!(served.runs.load(SeqCst), runs + 1, "ran once for ada");
    mcp_call(addr, "bob", "greet", json!({"name": "kay"})).await;
    assert_eq!(served.runs.load(SeqCst), runs + 2, "bob's call ran");
    assert_eq!(served.cache.hits(), 3);
    ada.close().await;
    served.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destructive_idempotent_tool_runs_every_time_under_the_cache() {
    let deletes = Arc::new(AtomicUsize::new(0));
    let greets = Arc::new(AtomicUsize::new(0));
    let delete_bucket = {
        let deletes = Arc::clone(&deletes);
        Tool::builder("delete_bucket")
            .description("Deletes a bucket.")
            .annotations(ToolAnnotations::new().idempotent(true).destructive(true))
            .handler(move |params: Value, _: Context| {
                let deletes = Arc::clone(&deletes);
                async move {
                    let n = deletes.fetch_add(1, SeqCst) + 1;
                    Ok(json!({"deleted": params["bucket"], "run": n}))
                }
            })
            .build()
            .expect("delete_bucket builds")
    };
    let cache = Cache::new(1 << 20);
    let builder = builder()
        .authenticator(Users)
        .tool(delete_bucket)
        .tool(greet(&greets))
        .layer(cache.clone());
    let (handle, _) = support::start(builder).await;
    let mut ada = haip_client(handle.local_addr(), "ada").await;

    // The same call twice: it runs twice, each answer its own.
    for run in 1..=2 {
        let done = ada
            .call_done(
                &format!("d{run}"),
                "delete_bucket",
                json!({"bucket": "logs"}),
            )
            .await;
        assert_eq!(done["status"], "OK", "{done}");
        assert_eq!(
            done["result"],
            json!({"deleted": "logs", "run": run}),
            "{done}"
        );
    }
    assert_eq!(deletes.load(SeqCst), 2, "delete_bucket ran twice");
    assert_eq!(cache.hits(), 0);
    assert_eq!(cache.bytes(), 0, "nothing of it kept");

    // The cache is on: an idempotent tool that is not destructive is
    // answered again from it.
    for i in 0..2 {
        let done = ada
            .call_done(&format!("g{i}"), "greet", json!({"name": "kay"}))
            .await;
        assert_eq!(done["result"], json!({"greeting": "hello kay"}), "{done}");
    }
    assert_eq!(greets.load(SeqCst), 1);
    assert_eq!(cache.hits(), 1);
    ada.close().await;
    handle.shutdown().await;
}

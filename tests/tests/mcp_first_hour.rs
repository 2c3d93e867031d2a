//! The first hour with `/mcp` as it is by default (issue 38, item 1): each
//! MCP revision served as it expects on one endpoint. A client that sends
//! `initialize` (MCP 2025-11-25, what most hosts still speak) gets a session,
//! in which the server can ask it questions; a 2026-07-28 request is served
//! on its own. Through the real wire, against a server with the default
//! settings and a tool that calls `ctx.confirm(...)`:
//!
//! - the official Python MCP SDK (`tests/mcp/first_hour.py`, its
//!   `initialize` handshake) answers the confirmation, the tool sees `true`,
//!   and its `DELETE` at the end succeeds (no "Session termination failed"
//!   on its stderr);
//! - the official TypeScript SDK (`@modelcontextprotocol/sdk` 1.32.2,
//!   `tests/mcp/ts_client.mjs`) answers it too, gets a call's progress, and
//!   cancels a call (the tool sees the cancellation);
//! - both SDKs' tests run again against the server nested at `/agent` in
//!   an axum application (`Server::into_service`), and there the Python
//!   SDK also goes through a whole session of the quickstart's tools
//!   (`tests/mcp/http_session.py`) and MCP 2026-07-28's rounds
//!   (`tests/mcp/rounds.py`);
//! - raw HTTP: a session's `DELETE` is `204` and the session is gone after
//!   it; a 2026-07-28 request gets no session; with `mcp_sessions(false)` an
//!   older client's confirmation fails naming `mcp_sessions`, and in a
//!   session a client that did not declare elicitation is told that.

use crate::conformance_support;
use crate::mcp_http;
use crate::mcp_support;
use crate::support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::embedded_support::{At, Running, start_at};
use haip::{Context, ServerBuilder, ServerHandle, Tool, ToolError};
use mcp_http::{Reply, mcp_request};
use serde_json::{Value, json};
use support::{builder, demo_builder, executions, poll_until, start};
use tokio::io::{AsyncRead, AsyncReadExt};

/// A script's time limit: each step of its own is bounded by 10 s.
const LIMIT: Duration = Duration::from_secs(60);

/// What the tools saw: the confirmations' answers, and whether `wait` was
/// cancelled.
#[derive(Default)]
struct Seen {
    answers: Mutex<Vec<bool>>,
    cancelled: AtomicBool,
}

/// `delete_files` (asks `ctx.confirm("Delete 3 files?")`, answers
/// `{"confirmed": yes}`; a question that could not be asked fails the call
/// with its reason), `steps` (progress 25, 50, 75, 100, then
/// `{"done": true}`) and `wait` (progress 1, then waits to be cancelled).
fn tools(seen: &Arc<Seen>) -> ServerBuilder {
    let confirm_seen = Arc::clone(seen);
    let delete_files = Tool::builder("delete_files")
        .description("Deletes 3 files once the user confirms")
        .output_schema(json!({
            "type": "object",
            "properties": {"confirmed": {"type": "boolean"}},
            "required": ["confirmed"]
        }))
        .handler(move |_: Value, ctx: Context| {
            let seen = Arc::clone(&confirm_seen);
            async move {
                let yes = ctx.confirm("Delete 3 files?").await?;
                seen.answers.lock().unwrap().push(yes);
                Ok::<_, ToolError>(json!({ "confirmed": yes }))
            }
        })
        .build()
        .expect("delete_files is a valid tool");
    let steps = Tool::builder("steps")
        .description("Reports progress in four steps")
        .output_schema(json!({
            "type": "object",
            "properties": {"done": {"type": "boolean"}},
            "required": ["done"]
        }))
        .handler(|_: Value, ctx: Context| async move {
            for percent in [25.0, 50.0, 75.0, 100.0] {
                ctx.progress(percent);
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            Ok::<_, ToolError>(json!({ "done": true }))
        })
        .build()
        .expect("steps is a valid tool");
    let wait_seen = Arc::clone(seen);
    let wait = Tool::builder("wait")
        .description("Waits to be cancelled")
        .handler(move |_: Value, ctx: Context| {
            let seen = Arc::clone(&wait_seen);
            async move {
                ctx.progress(1.0);
                tokio::select! {
                    () = ctx.cancelled() => {
                        seen.cancelled.store(true, Ordering::SeqCst);
                        Err(ToolError::execution("cancelled"))
                    }
                    () = tokio::time::sleep(Duration::from_secs(20)) => {
                        Err(ToolError::execution("never cancelled"))
                    }
                }
            }
        })
        .build()
        .expect("wait is a valid tool");
    builder().tool(delete_files).tool(steps).tool(wait)
}

async fn serve(builder: ServerBuilder) -> (ServerHandle, SocketAddr) {
    let (handle, _) = start(builder).await;
    let addr = handle.local_addr();
    (handle, addr)
}

/// `GET {prefix}/stats` of `server` until `pred` holds of it.
async fn stats_at(server: &Running, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let path = format!("{}/stats", server.prefix());
    poll_until(server.addr(), &path, what, pred).await
}

// ----- the official SDKs --------------------------------------------------------------

/// What a script printed, once it succeeded within [`LIMIT`] and its stdout
/// starts with `ok:`.
struct Ran {
    stdout: String,
    stderr: String,
}

async fn run(program: &Path, script: &Path, url: &str, env: &[(&str, &Path)]) -> Ran {
    let mut command = tokio::process::Command::new(program);
    command
        .arg(script)
        .arg(url)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("{} does not start: {e}", program.display()));
    let stdout = tokio::spawn(read_all(child.stdout.take().expect("stdout is piped")));
    let stderr = tokio::spawn(read_all(child.stderr.take().expect("stderr is piped")));
    let status = match tokio::time::timeout(LIMIT, child.wait()).await {
        Ok(status) => Some(status.expect("waiting for the script works")),
        Err(_) => {
            child.kill().await.expect("the script can be killed");
            None
        }
    };
    let ran = Ran {
        stdout: stdout.await.expect("the pipe reader does not panic"),
        stderr: stderr.await.expect("the pipe reader does not panic"),
    };
    let report = format!(
        "--- stdout ---\n{}\n--- stderr ---\n{}",
        ran.stdout, ran.stderr
    );
    let name = script.display();
    let Some(status) = status else {
        panic!("{name} did not finish within {LIMIT:?}\n{report}");
    };
    assert!(status.success(), "{name} failed ({status})\n{report}");
    assert!(
        ran.stdout.starts_with("ok:"),
        "{name} succeeded without its summary\n{report}"
    );
    ran
}

async fn read_all(mut pipe: impl AsyncRead + Unpin) -> String {
    let mut bytes = Vec::new();
    let _ = pipe.read_to_end(&mut bytes).await;
    String::from_utf8_lossy(&bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_with_the_older_handshake_answers_a_confirmation() {
    older_handshake_answers_a_confirmation(At::Own).await;
}

/// The same at `/agent/mcp`, nested in an axum application.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_with_the_older_handshake_answers_a_confirmation_nested() {
    older_handshake_answers_a_confirmation(At::Nested).await;
}

async fn older_handshake_answers_a_confirmation(at: At) {
    let seen = Arc::new(Seen::default());
    let server = start_at(at, tools(&seen)).await;
    let url = server.url("/mcp");
    let python = mcp_support::python();
    let script = mcp_support::script("first_hour.py");
    let ran = run(&python, &script, &url, &[]).await;
    println!("{}", ran.stdout.trim_end());
    assert_eq!(*seen.answers.lock().unwrap(), [true], "the tool saw yes");
    assert!(
        !ran.stderr.contains("Session termination failed"),
        "the SDK took the DELETE for a failure:\n{}",
        ran.stderr
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_answers_a_confirmation_gets_progress_and_cancels() {
    typescript_sdk_confirms_and_cancels(At::Own).await;
}

/// The same at `/agent/mcp`, nested in an axum application.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_answers_a_confirmation_gets_progress_and_cancels_nested() {
    typescript_sdk_confirms_and_cancels(At::Nested).await;
}

async fn typescript_sdk_confirms_and_cancels(at: At) {
    let seen = Arc::new(Seen::default());
    let server = start_at(at, tools(&seen)).await;
    let url = server.url("/mcp");
    let node = conformance_support::node();
    let modules = conformance_support::ts_sdk_modules();
    let script = mcp_support::script("ts_client.mjs");
    let ran = run(&node, &script, &url, &[("HAIP_TS_SDK", &modules)]).await;
    println!("{}", ran.stdout.trim_end());
    assert_eq!(*seen.answers.lock().unwrap(), [true], "the tool saw yes");
    // The cancellation reaches the tool as the client's promise settles; the
    // tool sees it at once after.
    let deadline = tokio::time::Instant::now() + support::WAIT;
    while !seen.cancelled.load(Ordering::SeqCst) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "`wait` never saw its cancellation\n{}",
            ran.stderr
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.stop().await;
}

/// Nested at `/agent` (`tests/mcp/http_session.py`, the SDK's `initialize`
/// handshake): the quickstart's tools listed, `echo` called,
/// `process_file`'s progress, `book_table`'s question answered, a
/// `process_file` cancelled (the server ends it as cancelled), the
/// `DELETE`; every request the SDK sends at `/agent/mcp`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_lists_calls_answers_and_cancels_nested() {
    let server = start_at(At::Nested, demo_builder()).await;
    let url = server.url("/mcp");
    let python = mcp_support::python();
    let script = mcp_support::script("http_session.py");
    let ran = run(&python, &script, &url, &[]).await;
    println!("{}", ran.stdout.trim_end());
    // echo, process_file, book_table, the cancelled process_file, add.
    let stats = stats_at(&server, "the cancelled process_file", |s| {
        executions(s)[3] == 1 && executions(s)[4] == 0
    })
    .await;
    assert_eq!(executions(&stats), [5, 4, 0, 1, 0], "{stats}");
    server.stop().await;
}

/// Nested at `/agent`, the SDK's `Client` pinned to MCP 2026-07-28
/// (`tests/mcp/rounds.py`): no session, `book_table`'s question comes back
/// as `input_required`, and the retry with the answer and the
/// `requestState` books the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_speaking_2026_gets_its_question_in_rounds_nested() {
    let server = start_at(At::Nested, demo_builder()).await;
    let url = server.url("/mcp");
    let python = mcp_support::python();
    let script = mcp_support::script("rounds.py");
    let ran = run(&python, &script, &url, &[]).await;
    println!("{}", ran.stdout.trim_end());
    let stats = stats_at(&server, "book_table done", |s| executions(s)[4] == 0).await;
    let [_, ok, failed, ..] = executions(&stats);
    assert!(ok >= 1 && failed == 0, "{stats}");
    server.stop().await;
}

// ----- raw HTTP -----------------------------------------------------------------------

/// `initialize` of MCP 2025-11-25, declaring elicitation or not.
fn initialize(elicitation: bool) -> Value {
    let capabilities = if elicitation {
        json!({"elicitation": {}})
    } else {
        json!({})
    };
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": capabilities,
            "clientInfo": {"name": "raw", "version": "0"}
        }
    })
}

fn call(id: u64, name: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": {}}
    })
}

/// A session opened with `initialize` and `notifications/initialized`: its id.
async fn open_session(addr: SocketAddr, elicitation: bool) -> String {
    let init = mcp_request(addr, "POST", Some(&initialize(elicitation)), &[]).await;
    assert_eq!(init.status, 200, "{init:?}");
    let id = init
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("the default /mcp opened no session: {init:?}"))
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let reply = in_session(addr, "POST", Some(&initialized), &id).await;
    assert_eq!(reply.status, 202, "{reply:?}");
    id
}

async fn in_session(addr: SocketAddr, method: &str, body: Option<&Value>, id: &str) -> Reply {
    mcp_request(
        addr,
        method,
        body,
        &[
            ("mcp-session-id", id),
            ("mcp-protocol-version", "2025-11-25"),
        ],
    )
    .await
}

/// The text of a `tools/call` result that is an error.
fn error_text(reply: &Reply) -> String {
    let response = reply.response();
    let result = &response["result"];
    assert_eq!(result["isError"], true, "{reply:?}");
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {reply:?}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_delete_is_204_and_ends_it() {
    let seen = Arc::new(Seen::default());
    let (_server, addr) = serve(tools(&seen)).await;
    let id = open_session(addr, true).await;
    let reply = in_session(addr, "POST", Some(&call(2, "steps")), &id).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(
        reply.response()["result"]["structuredContent"],
        json!({"done": true}),
        "{reply:?}"
    );
    let deleted = in_session(addr, "DELETE", None, &id).await;
    assert_eq!(deleted.status, 204, "{deleted:?}");
    assert!(deleted.body.is_empty(), "{deleted:?}");
    // Gone: its id names nothing now.
    let reply = in_session(addr, "POST", Some(&call(3, "steps")), &id).await;
    assert_eq!(reply.status, 404, "{reply:?}");
    let again = in_session(addr, "DELETE", None, &id).await;
    assert_eq!(again.status, 404, "{again:?}");
}

/// A 2026-07-28 request on the default `/mcp` is served on its own: no
/// session, and its question goes in a round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_request_gets_no_session_on_the_default_endpoint() {
    let seen = Arc::new(Seen::default());
    let (_server, addr) = serve(tools(&seen)).await;
    let mut body = call(1, "delete_files");
    body["params"]["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    });
    let reply = mcp_request(
        addr,
        "POST",
        Some(&body),
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "delete_files"),
        ],
    )
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(reply.headers.get("mcp-session-id").is_none(), "{reply:?}");
    assert_eq!(reply.content_type(), "application/json", "{reply:?}");
    let response = reply.response();
    assert_eq!(
        response["result"]["resultType"], "input_required",
        "{reply:?}"
    );
}

/// Where a question cannot be asked, the error says why and what to change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_that_cannot_be_asked_says_why() {
    // An older client without sessions (`mcp_sessions(false)`): it declared
    // elicitation, but has no session to be asked in.
    let seen = Arc::new(Seen::default());
    let (_stateless, addr) = serve(tools(&seen).mcp_sessions(false)).await;
    let init = mcp_request(addr, "POST", Some(&initialize(true)), &[]).await;
    assert_eq!(init.status, 200, "{init:?}");
    assert!(init.headers.get("mcp-session-id").is_none(), "{init:?}");
    let reply = mcp_request(
        addr,
        "POST",
        Some(&call(2, "delete_files")),
        &[("mcp-protocol-version", "2025-11-25")],
    )
    .await;
    let text = error_text(&reply);
    assert!(text.contains("mcp_sessions"), "names the setting: {text}");
    assert!(text.contains("no session"), "names the cause: {text}");
    assert!(
        !text.contains("did not declare"),
        "the client did declare elicitation: {text}"
    );

    // In a session, a client that did not declare elicitation is told so.
    let (_sessions, addr) = serve(tools(&seen)).await;
    let id = open_session(addr, false).await;
    let reply = in_session(addr, "POST", Some(&call(2, "delete_files")), &id).await;
    let text = error_text(&reply);
    assert!(
        text.contains("cannot answer questions (it did not declare that it can)"),
        "{text}"
    );
    assert!(seen.answers.lock().unwrap().is_empty(), "nobody answered");
}

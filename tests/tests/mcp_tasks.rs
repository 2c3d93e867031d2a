//! MCP tasks (the `io.modelcontextprotocol/tasks` extension) on stateless
//! `/mcp`: a call of a tool that supports tasks, from a client that declares
//! the extension, becomes a task once it waits; `tasks/get` follows it to
//! its end, `tasks/update` answers its questions, `tasks/cancel` stops it.
//!
//! - Server-directed creation: a task only for tools that support tasks and
//!   clients that take them; a `Required` tool refuses other clients with
//!   `-32021`; a call that finishes at once answers at once (`Optional`).
//! - Questions inside a task: `input_required` with the open questions,
//!   answered one at a time; a question asked before the call first waits
//!   goes to the client's rounds, and the task starts with its answer.
//! - Ends: a tool error completes the task with `isError`, a panic fails it
//!   with a JSON-RPC error, `tasks/cancel` cancels it (idempotently), and an
//!   ended task stays ended.
//! - Tasks are the caller's own: another subject is told the task does not
//!   exist; and per-client limits refuse more tasks with a readable error.

use crate::mcp_http;
use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use haip::{Answer, Context, Limits, ServerBuilder, ServerHandle, TaskSupport, Tool, ToolError};
use mcp_http::mcp_request;
use serde_json::{Value, json};
use support::{base_limits, builder, hs256_token, start, within};

const TASKS: &str = "io.modelcontextprotocol/tasks";

/// What a 2026-07-28 client declares.
#[derive(Clone, Copy)]
struct Client<'a> {
    tasks: bool,
    can: &'a [&'a str],
    token: Option<&'a str>,
}

const TASKER: Client<'static> = Client {
    tasks: true,
    can: &["elicitation"],
    token: None,
};

fn meta(client: Client<'_>) -> Value {
    let mut caps: serde_json::Map<String, Value> = client
        .can
        .iter()
        .map(|c| ((*c).to_owned(), json!({})))
        .collect();
    if client.tasks {
        caps.insert("extensions".into(), json!({TASKS: {}}));
    }
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

/// Sends one 2026-07-28 request; the JSON-RPC response.
async fn rpc(addr: SocketAddr, client: Client<'_>, method: &str, mut params: Value) -> Value {
    params["_meta"] = meta(client);
    let name = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let bearer = client.token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ];
    if !name.is_empty() {
        headers.push(("Mcp-Name", name.as_str()));
    }
    if let Some(bearer) = &bearer {
        headers.push(("Authorization", bearer.as_str()));
    }
    mcp_request(addr, "POST", Some(&body), &headers)
        .await
        .response()
}

/// Opens a `subscriptions/listen` stream of `client` for tool list changes.
async fn listen(addr: SocketAddr, client: Client<'_>) -> mcp_http::Streaming {
    let body = json!({
        "jsonrpc": "2.0", "id": 99, "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": true}, "_meta": meta(client)},
    });
    let bearer = client.token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "subscriptions/listen"),
    ];
    if let Some(bearer) = &bearer {
        headers.push(("Authorization", bearer.as_str()));
    }
    let mut stream = mcp_http::mcp_stream(addr, &body, &headers).await;
    assert_eq!(stream.status, 200);
    let ack = stream.next().await.expect("an acknowledgment");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    stream
}

async fn call(addr: SocketAddr, client: Client<'_>, tool: &str, arguments: Value) -> Value {
    rpc(
        addr,
        client,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
    .await
}

/// The JSON in the first text block of a `CallToolResult`.
fn text_json(result: &Value) -> Value {
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    serde_json::from_str(text).unwrap_or(Value::Null)
}

fn result(response: &Value) -> &Value {
    assert!(response.get("error").is_none(), "an error: {response}");
    &response["result"]
}

fn task_id(response: &Value) -> String {
    let result = result(response);
    assert_eq!(result["resultType"], "task", "not a task: {response}");
    for absent in ["task", "result", "error", "inputRequests", "requestState"] {
        assert!(result.get(absent).is_none(), "{absent} in {response}");
    }
    assert!(
        result["ttlMs"].as_u64().is_some_and(|t| t > 0),
        "{response}"
    );
    assert!(result["pollIntervalMs"].as_u64().is_some(), "{response}");
    for time in ["createdAt", "lastUpdatedAt"] {
        let at = result[time].as_str().unwrap_or_default();
        assert!(at.len() >= 20 && at.ends_with('Z'), "{time}: {response}");
    }
    result["taskId"].as_str().expect("a taskId").to_owned()
}

async fn get(addr: SocketAddr, client: Client<'_>, id: &str) -> Value {
    rpc(addr, client, "tasks/get", json!({"taskId": id})).await
}

/// Polls `tasks/get` until the status is one of `statuses`.
async fn until(addr: SocketAddr, client: Client<'_>, id: &str, statuses: &[&str]) -> Value {
    within(&format!("task {id} to reach {statuses:?}"), async {
        loop {
            let got = get(addr, client, id).await;
            let status = result(&got)["status"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if statuses.contains(&status.as_str()) {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

#[haip::data]
struct Confirmation {
    confirm: bool,
}

#[haip::data]
struct Name {
    name: String,
}

/// The tools: `report` (optional; sleeps `ms`, then says its label),
/// `confirm_delete` (optional; looks the file up, then asks), `two` (optional;
/// asks two questions at once), `greet_later` (required; asks first, then
/// answers), `always` (required; answers at once), `failing` (optional; a
/// tool error), `boom` (optional; panics), `plain` (no tasks).
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
    let confirm = Tool::builder("confirm_delete")
        .task_support(TaskSupport::Optional)
        .handler(|params: Value, ctx: Context| async move {
            // Looking the file up: the call waits, and becomes a task.
            tokio::task::yield_now().await;
            let answer = ctx
                .ask::<Confirmation>(format!("Delete {}?", params["filename"]))
                .key("confirm")
                .await?;
            Ok::<_, ToolError>(match answer {
                Answer::Accepted(Confirmation { confirm: true }) => json!("deleted"),
                _ => json!("kept"),
            })
        })
        .build()
        .unwrap();
    let two = Tool::builder("two")
        .task_support(TaskSupport::Optional)
        .handler(|_: Value, ctx: Context| async move {
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
    let greet_later = Tool::builder("greet_later")
        .task_support(TaskSupport::Required)
        .handler(|_: Value, ctx: Context| async move {
            let name = match ctx
                .ask::<Name>("What is your name?")
                .key("user_name")
                .await?
            {
                Answer::Accepted(n) => n.name,
                _ => "nobody".to_owned(),
            };
            Ok::<_, ToolError>(json!(format!("Hello, {name}!")))
        })
        .build()
        .unwrap();
    let always = Tool::builder("always")
        .task_support(TaskSupport::Required)
        .handler(|_: Value, _| async { Ok::<_, ToolError>(json!("done")) })
        .build()
        .unwrap();
    let failing = Tool::builder("failing")
        .task_support(TaskSupport::Optional)
        .handler(|_: Value, _| async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Err::<Value, _>(ToolError::execution("the job failed"))
        })
        .build()
        .unwrap();
    let boom = Tool::builder("boom")
        .task_support(TaskSupport::Optional)
        .handler(|_: Value, _| async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if true {
                panic!("kaboom");
            }
            Ok::<_, ToolError>(json!(null))
        })
        .build()
        .unwrap();
    let plain = Tool::builder("plain")
        .handler(|_: Value, _| async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok::<_, ToolError>(json!("plain"))
        })
        .build()
        .unwrap();
    vec![
        report,
        confirm,
        two,
        greet_later,
        always,
        failing,
        boom,
        plain,
    ]
}

async fn server(builder: ServerBuilder) -> (ServerHandle, SocketAddr) {
    let mut builder = builder;
    for tool in tools() {
        builder = builder.tool(tool);
    }
    let (handle, _) = start(builder).await;
    let addr = handle.local_addr();
    (handle, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_call_becomes_a_task_that_tasks_get_follows_to_its_result() {
    let (_server, addr) = server(builder()).await;
    let created = call(addr, TASKER, "report", json!({"ms": 300, "label": "q3"})).await;
    let id = task_id(&created);
    assert_eq!(result(&created)["status"], "working");
    // Known at once (durably created before the answer).
    let now = get(addr, TASKER, &id).await;
    assert_eq!(result(&now)["taskId"], id.as_str());
    assert_eq!(result(&now)["resultType"], "complete");
    let done = until(addr, TASKER, &id, &["completed", "failed", "cancelled"]).await;
    let done = result(&done);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(text_json(&done["result"])["label"], "q3", "{done}");
    assert!(done.get("error").is_none());
    // Kept after the end, and an unknown task is -32602.
    let again = get(addr, TASKER, &id).await;
    assert_eq!(result(&again)["status"], "completed");
    let unknown = get(addr, TASKER, "no-such-task").await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_only_for_clients_that_take_them_and_tools_that_support_them() {
    let (_server, addr) = server(builder()).await;
    let plain_client = Client {
        tasks: false,
        ..TASKER
    };
    // A client without the extension gets the plain result.
    let plain = call(
        addr,
        plain_client,
        "report",
        json!({"ms": 50, "label": "x"}),
    )
    .await;
    assert_eq!(result(&plain)["resultType"], "complete", "{plain}");
    assert_eq!(text_json(result(&plain))["label"], "x", "{plain}");
    // A tool without task support answers as always.
    let not = call(addr, TASKER, "plain", json!({})).await;
    assert_eq!(result(&not)["resultType"], "complete", "{not}");
    // A required tool refuses a client that takes no tasks, naming the extension.
    let refused = call(addr, plain_client, "always", json!({})).await;
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    assert!(
        refused["error"]["data"]["requiredCapabilities"]["extensions"][TASKS].is_object(),
        "{refused}"
    );
    // tasks/* of a client that did not declare the extension: -32021 too.
    let gated = get(addr, plain_client, "whatever").await;
    assert_eq!(gated["error"]["code"], -32021, "{gated}");
    // Done at once: optional answers at once, required is a task holding it.
    let at_once = call(addr, TASKER, "report", json!({"ms": 0, "label": "now"})).await;
    let at_once = result(&at_once);
    assert!(
        at_once["resultType"] == "complete" || at_once["resultType"] == "task",
        "{at_once}"
    );
    let always = call(addr, TASKER, "always", json!({})).await;
    let id = task_id(&always);
    assert_eq!(result(&always)["status"], "completed");
    let got = get(addr, TASKER, &id).await;
    assert_eq!(
        result(&got)["result"]["content"][0]["text"],
        "done",
        "{got}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_in_a_task_are_answered_with_tasks_update() {
    let (_server, addr) = server(builder()).await;
    let created = call(addr, TASKER, "confirm_delete", json!({"filename": "a.txt"})).await;
    let id = task_id(&created);
    let waiting = until(addr, TASKER, &id, &["input_required"]).await;
    let requests = &result(&waiting)["inputRequests"];
    assert_eq!(
        requests["confirm"]["method"], "elicitation/create",
        "{waiting}"
    );
    assert_eq!(
        requests["confirm"]["params"]["message"], "Delete \"a.txt\"?",
        "{waiting}"
    );
    // Unknown keys are ignored, and acknowledged like any update.
    let ack = rpc(
        addr,
        TASKER,
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"nope": {"action": "accept"}}}),
    )
    .await;
    assert_eq!(result(&ack), &json!({"resultType": "complete"}), "{ack}");
    let ack = rpc(
        addr,
        TASKER,
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": true}}}}),
    )
    .await;
    assert_eq!(result(&ack), &json!({"resultType": "complete"}), "{ack}");
    let done = until(addr, TASKER, &id, &["completed", "failed", "cancelled"]).await;
    assert_eq!(result(&done)["status"], "completed", "{done}");
    assert_eq!(
        result(&done)["result"]["content"][0]["text"],
        "deleted",
        "{done}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_open_questions_are_answered_one_at_a_time() {
    let (_server, addr) = server(builder()).await;
    let id = task_id(&call(addr, TASKER, "two", json!({})).await);
    let both = within("both questions", async {
        loop {
            let got = until(addr, TASKER, &id, &["input_required"]).await;
            if result(&got)["inputRequests"]
                .as_object()
                .map_or(0, |m| m.len())
                == 2
            {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        result(&both)["inputRequests"]["first"].is_object(),
        "{both}"
    );
    let answer = |key: &str, name: &str| json!({"taskId": id, "inputResponses": {key: {"action": "accept", "content": {"name": name}}}});
    rpc(addr, TASKER, "tasks/update", answer("first", "Ada")).await;
    let one = get(addr, TASKER, &id).await;
    assert_eq!(result(&one)["status"], "input_required", "{one}");
    let open: Vec<&String> = result(&one)["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(open, ["second"], "only the unanswered one is left");
    rpc(addr, TASKER, "tasks/update", answer("second", "Grace")).await;
    let done = until(addr, TASKER, &id, &["completed"]).await;
    assert_eq!(
        result(&done)["result"]["content"][0]["text"],
        "Ada and Grace",
        "{done}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_asked_before_waiting_goes_to_rounds_then_the_task_starts() {
    let (_server, addr) = server(builder()).await;
    let first = call(addr, TASKER, "greet_later", json!({})).await;
    let first = result(&first);
    assert_eq!(first["resultType"], "input_required", "{first}");
    assert!(first.get("taskId").is_none(), "{first}");
    assert_eq!(
        first["inputRequests"]["user_name"]["method"], "elicitation/create",
        "{first}"
    );
    let state = first["requestState"].as_str().expect("a requestState");
    let retry = rpc(
        addr,
        TASKER,
        "tools/call",
        json!({
            "name": "greet_later",
            "arguments": {},
            "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Alice"}}},
            "requestState": state,
        }),
    )
    .await;
    let id = task_id(&retry);
    let done = until(addr, TASKER, &id, &["completed", "failed"]).await;
    assert_eq!(
        result(&done)["result"]["content"][0]["text"],
        "Hello, Alice!",
        "{done}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_errors_complete_panics_fail_and_cancels_cancel() {
    let (_server, addr) = server(builder()).await;
    let failing = task_id(&call(addr, TASKER, "failing", json!({})).await);
    let done = until(addr, TASKER, &failing, &["completed", "failed"]).await;
    let done = result(&done);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], true, "{done}");

    let boom = task_id(&call(addr, TASKER, "boom", json!({})).await);
    let done = until(addr, TASKER, &boom, &["completed", "failed"]).await;
    let done = result(&done);
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], -32603, "{done}");
    assert!(done["error"]["message"].is_string(), "{done}");
    assert!(done.get("result").is_none(), "{done}");

    let long = task_id(&call(addr, TASKER, "report", json!({"ms": 60_000, "label": "l"})).await);
    let ack = rpc(addr, TASKER, "tasks/cancel", json!({"taskId": long})).await;
    assert_eq!(result(&ack), &json!({"resultType": "complete"}), "{ack}");
    let done = until(addr, TASKER, &long, &["completed", "failed", "cancelled"]).await;
    assert_eq!(result(&done)["status"], "cancelled", "{done}");
    // Idempotent, and the end stays.
    let ack = rpc(addr, TASKER, "tasks/cancel", json!({"taskId": long})).await;
    assert_eq!(result(&ack), &json!({"resultType": "complete"}), "{ack}");
    let unknown = rpc(addr, TASKER, "tasks/cancel", json!({"taskId": "nope"})).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    for removed in ["tasks/list", "tasks/result"] {
        let gone = rpc(addr, TASKER, removed, json!({"taskId": long})).await;
        assert_eq!(gone["error"]["code"], -32601, "{removed}: {gone}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_their_callers_own_and_bounded_per_client() {
    const SECRET: &str = "a test secret for tasks, long enough";
    let (_server, addr) = server(builder().jwt_hs256(SECRET).limits(Limits {
        max_tasks_per_client: 2,
        ..base_limits()
    }))
    .await;
    let ada = hs256_token(SECRET, "ada", None);
    let bob = hs256_token(SECRET, "bob", None);
    let as_ada = Client {
        token: Some(&ada),
        ..TASKER
    };
    let as_bob = Client {
        token: Some(&bob),
        ..TASKER
    };
    let id = task_id(&call(addr, as_ada, "report", json!({"ms": 60_000, "label": "a"})).await);
    let theirs = get(addr, as_bob, &id).await;
    assert_eq!(theirs["error"]["code"], -32602, "{theirs}");
    let cancel = rpc(addr, as_bob, "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(cancel["error"]["code"], -32602, "{cancel}");
    assert_eq!(result(&get(addr, as_ada, &id).await)["status"], "working");

    task_id(&call(addr, as_ada, "report", json!({"ms": 60_000, "label": "b"})).await);
    let third = call(addr, as_ada, "report", json!({"ms": 60_000, "label": "c"})).await;
    let third = result(&third);
    assert_eq!(third["isError"], true, "{third}");
    assert!(
        third["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("max_tasks_per_client = 2")),
        "{third}"
    );
    // Bob has his own budget; and a cancelled task gives Ada's back.
    task_id(&call(addr, as_bob, "report", json!({"ms": 60_000, "label": "d"})).await);
    rpc(addr, as_ada, "tasks/cancel", json!({"taskId": id})).await;
    within("Ada's budget back", async {
        loop {
            let again = call(addr, as_ada, "report", json!({"ms": 60_000, "label": "e"})).await;
            if result(&again)["resultType"] == "task" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_listen_stream_hears_its_own_tasks_change() {
    const SECRET: &str = "a test secret for tasks, long enough";
    let (_server, addr) = server(builder().jwt_hs256(SECRET)).await;
    let ada = hs256_token(SECRET, "ada", None);
    let bob = hs256_token(SECRET, "bob", None);
    let as_ada = Client {
        token: Some(&ada),
        ..TASKER
    };
    let as_bob = Client {
        token: Some(&bob),
        ..TASKER
    };
    let mut adas = listen(addr, as_ada).await;
    let mut bobs = listen(addr, as_bob).await;
    let id = task_id(&call(addr, as_ada, "confirm_delete", json!({"filename": "b.txt"})).await);
    // Created, then waiting for the answer, then (answered) completed. Each
    // notification shows the task as it is when sent: one sent as the task
    // is created may already show it waiting.
    let mut seen = Vec::new();
    while seen.last().map(String::as_str) != Some("input_required") {
        let note = adas.next().await.expect("a notification");
        assert_eq!(note["method"], "notifications/tasks", "{note}");
        assert_eq!(note["params"]["taskId"], id.as_str(), "{note}");
        assert_eq!(
            note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            99
        );
        seen.push(note["params"]["status"].as_str().unwrap().to_owned());
    }
    assert!(
        seen[..seen.len() - 1]
            .iter()
            .all(|status| status == "working"),
        "{seen:?}"
    );
    rpc(
        addr,
        as_ada,
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": false}}}}),
    )
    .await;
    let done = within("the completed notification", async {
        loop {
            let note = adas.next().await.expect("a notification");
            if note["params"]["status"] == "completed" {
                return note;
            }
        }
    })
    .await;
    assert_eq!(
        done["params"]["result"]["content"][0]["text"], "kept",
        "{done}"
    );
    // Bob heard nothing of Ada's task.
    assert!(
        bobs.quiet_for(Duration::from_millis(200)).await,
        "Bob heard of Ada's task"
    );
}

//! The MCP import bridge end to end, through the HAIP wire with the Rust client:
//! the reference `server-everything` imported over stdio (with a prefix) and
//! over Streamable HTTP, a Python MCP server whose tool list changes at run
//! time (`tests/mcp/dynamic_server.py`), and an MCP server that cannot be
//! started. Covered: the imported tools and their schemas in `TOOL_LIST` /
//! `TOOL_SCHEMA`, results (content blocks, structured content), `INVALID_PARAMS`
//! from the imported schema, progress as `TOOL_UPDATE`s, cancellation,
//! `isError` as `TOOL_EXECUTION_ERROR`, `tools/list_changed`, a child killed
//! mid-call (its call fails, its tools leave, it is restarted), and the
//! start-up and configuration errors.
//!
//! Needs the MCP implementations `tests/mcp/setup.sh` installs, and `node`.

use crate::mcp_support;
use crate::support;

use std::ffi::OsStr;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use haip::client::{Client, ClientError, Outcome, Update};
use haip::mcp::McpImport;
use haip::{Error, ServerHandle};
use mcp_support::{everything, free_port, python, script};
use serde_json::{Value, json};
use support::{builder, start, within};

/// How often registry changes are polled for (there is no change notification).
const POLL: Duration = Duration::from_millis(5);

/// `server-everything`'s tools that are there from the start, in its order,
/// under the `ev.` prefix. (`simulate-research-query` follows once it is
/// registered, after initialization.)
const EVERYTHING_TOOLS: [&str; 12] = [
    "ev.echo",
    "ev.get-annotated-message",
    "ev.get-env",
    "ev.get-resource-links",
    "ev.get-resource-reference",
    "ev.get-structured-content",
    "ev.get-sum",
    "ev.get-tiny-image",
    "ev.gzip-file-as-resource",
    "ev.toggle-simulated-logging",
    "ev.toggle-subscriber-updates",
    "ev.trigger-long-running-operation",
];

/// `server-everything` over stdio, under the `ev.` prefix.
fn everything_stdio() -> McpImport {
    McpImport::stdio("node", [everything()]).prefix("ev.")
}

/// Connects a client to the server at `url`.
async fn connect(url: &str) -> Client {
    within("connecting the client", Client::connect(url))
        .await
        .expect("the client connects")
}

/// The tool names `TOOL_LIST` returns.
async fn listed(client: &Client) -> Vec<String> {
    within("TOOL_LIST", client.list_tools())
        .await
        .expect("TOOL_LIST answers")
        .into_iter()
        .map(|t| t.name)
        .collect()
}

/// The names in the server's registry.
fn registered(handle: &ServerHandle) -> Vec<String> {
    handle.tools().iter().map(|t| t.name().to_owned()).collect()
}

/// Calls `tool` and waits for its outcome.
async fn call_tool(client: &Client, tool: &str, params: Value) -> Outcome {
    let call = within("sending TOOL_CALL", client.call(tool, params))
        .await
        .expect("the call is sent");
    within(&format!("the outcome of {tool}"), call.outcome())
        .await
        .expect("the call ends with a TOOL_DONE")
}

/// `ev.get-sum` of 2 and 3.
async fn call_sum(client: &Client) -> Outcome {
    call_tool(client, "ev.get-sum", json!({"a": 2, "b": 3})).await
}

/// The `{"content": [...]}` result of an MCP tool that returned one text block.
fn text_result(text: &str) -> Outcome {
    Outcome::Ok(Some(json!({"content": [{"type": "text", "text": text}]})))
}

/// Polls `check` every [`POLL`] until it holds (failing after the usual wait).
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    within(what, async {
        while !check().await {
            tokio::time::sleep(POLL).await;
        }
    })
    .await;
}

/// Reads a call's updates until its `TOOL_DONE`, then its outcome.
async fn drain(mut call: haip::client::Call) -> (Vec<Update>, Outcome) {
    let mut updates = Vec::new();
    while let Some(update) = within("the next TOOL_UPDATE", call.next_update()).await {
        updates.push(update);
    }
    let outcome = within("the outcome", call.outcome())
        .await
        .expect("the call ends with a TOOL_DONE");
    (updates, outcome)
}

/// Runs `trigger-long-running-operation` for 1 s in 4 steps and checks its
/// progress stream (25, 50, 75, 100 percent; some may be merged away) and result.
async fn long_running_reports_progress(client: &Client, tool: &str) {
    let call = within(
        "sending TOOL_CALL",
        client.call(tool, json!({"duration": 1, "steps": 4})),
    )
    .await
    .expect("the call is sent");
    let (updates, outcome) = drain(call).await;
    assert!(!updates.is_empty(), "no TOOL_UPDATE before the TOOL_DONE");
    let percents: Vec<f64> = updates
        .iter()
        .map(|u| {
            assert_eq!(u.status, "RUNNING", "{u:?}");
            assert_eq!(u.partial, None, "the MCP progress had no message: {u:?}");
            u.progress
                .unwrap_or_else(|| panic!("the MCP progress had a total: {u:?}"))
        })
        .collect();
    assert!(
        percents
            .iter()
            .all(|p| [25.0, 50.0, 75.0, 100.0].contains(p)),
        "progress/total as percent: {percents:?}"
    );
    assert!(
        percents.windows(2).all(|w| w[0] < w[1]),
        "progress only grows: {percents:?}"
    );
    assert_eq!(
        outcome,
        text_result("Long running operation completed. Duration: 1 seconds, Steps: 4.")
    );
}

/// Where the killed-child test's MCP server writes its pid (unique to this test process).
fn pid_file() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("haip-mcp-import-{}.pid", std::process::id()))
}

/// The pid written to `path`, once the file holds one.
fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_import_lists_prefixed_tools_with_their_schemas() {
    let (handle, url) = start(builder().mcp(everything_stdio())).await;
    // `start` returned after the first listing: the tools are registered already.
    let names = registered(&handle);
    assert!(
        names.len() >= EVERYTHING_TOOLS.len()
            && names[..EVERYTHING_TOOLS.len()] == EVERYTHING_TOOLS,
        "{names:?}"
    );
    let client = connect(&url).await;
    let tools = within("TOOL_LIST", client.list_tools()).await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names[..EVERYTHING_TOOLS.len()],
        EVERYTHING_TOOLS,
        "{names:?}"
    );
    assert!(
        names.iter().all(|n| n.starts_with("ev.")),
        "every imported tool has the prefix: {names:?}"
    );
    let sum = tools.iter().find(|t| t.name == "ev.get-sum").unwrap();
    assert_eq!(sum.description, "Returns the sum of two numbers");
    // Its title and hints come along, as the MCP server declared them.
    assert_eq!(sum.title.as_deref(), Some("Get Sum Tool"));
    assert_eq!(
        sum.annotations,
        haip::ToolAnnotations::new()
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false)
    );

    // As the MCP server wrote it (`full`: imported schemas pass as they are).
    let schema = within(
        "TOOL_SCHEMA",
        client.schema_in("ev.get-structured-content", Some("full")),
    )
    .await
    .unwrap();
    assert_eq!(schema.tool, "ev.get-structured-content");
    assert_eq!(
        schema.input_schema,
        json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "enum": ["New York", "Chicago", "Los Angeles"],
                    "description": "Choose city"
                }
            },
            "required": ["location"]
        })
    );
    assert_eq!(
        schema.output_schema,
        Some(json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "temperature": {"type": "number", "description": "Temperature in celsius"},
                "conditions": {"type": "string", "description": "Weather conditions description"},
                "humidity": {"type": "number", "description": "Humidity percentage"}
            },
            "required": ["temperature", "conditions", "humidity"],
            "additionalProperties": false
        }))
    );
    // A tool without an output schema has none over HAIP either.
    let schema = within("TOOL_SCHEMA", client.schema("ev.get-sum"))
        .await
        .unwrap();
    assert_eq!(schema.input_schema["required"], json!(["a", "b"]));
    assert_eq!(schema.output_schema, None);
    assert_eq!(schema.title.as_deref(), Some("Get Sum Tool"));
    assert_eq!(schema.annotations.read_only_hint, Some(true));
    // The prefix is only a HAIP name: the unprefixed name is unknown.
    let err = within("TOOL_SCHEMA", client.schema("get-sum"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ClientError::Server { code, .. } if code == "TOOL_NOT_FOUND"),
        "{err}"
    );
    within("shutdown", handle.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_tools_return_content_or_structured_content() {
    let (handle, url) = start(builder().mcp(everything_stdio())).await;
    let client = connect(&url).await;
    assert_eq!(
        call_tool(&client, "ev.get-sum", json!({"a": 2, "b": 3})).await,
        text_result("The sum of 2 and 3 is 5.")
    );
    assert_eq!(
        call_tool(&client, "ev.echo", json!({"message": "hi"})).await,
        text_result("Echo: hi")
    );
    // With structuredContent, the result is that object (it matches the output schema).
    assert_eq!(
        call_tool(
            &client,
            "ev.get-structured-content",
            json!({"location": "Chicago"})
        )
        .await,
        Outcome::Ok(Some(json!({
            "temperature": 36,
            "conditions": "Light rain / drizzle",
            "humidity": 82
        })))
    );
    within("shutdown", handle.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_are_checked_against_the_imported_schema() {
    let (handle, url) = start(builder().mcp(everything_stdio())).await;
    let client = connect(&url).await;
    // haip's own validation answers, with every violation by path: the MCP
    // server would have answered `isError` (TOOL_EXECUTION_ERROR) instead.
    for (tool, params, path) in [
        ("ev.get-sum", json!({"a": "two", "b": 3}), "/a"),
        (
            "ev.get-structured-content",
            json!({"location": "Paris"}),
            "/location",
        ),
    ] {
        let outcome = call_tool(&client, tool, params.clone()).await;
        let Outcome::Error { code, details, .. } = &outcome else {
            panic!("{tool} {params}: expected an error, got {outcome:?}")
        };
        assert_eq!(code, "INVALID_PARAMS", "{outcome:?}");
        let details = details.as_ref().expect("INVALID_PARAMS has details");
        assert_eq!(details[0]["path"], path, "{outcome:?}");
    }
    let outcome = call_tool(&client, "ev.get-sum", json!({"a": 1})).await;
    assert!(
        matches!(&outcome, Outcome::Error { code, .. } if code == "INVALID_PARAMS"),
        "a missing required param: {outcome:?}"
    );
    // The server is still fine afterwards.
    assert_eq!(
        call_tool(&client, "ev.get-sum", json!({"a": 1, "b": 1})).await,
        text_result("The sum of 1 and 1 is 2.")
    );
    within("shutdown", handle.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_notifications_become_tool_updates() {
    let (handle, url) = start(builder().mcp(everything_stdio())).await;
    let client = connect(&url).await;
    long_running_reports_progress(&client, "ev.trigger-long-running-operation").await;
    within("shutdown", handle.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_an_imported_call_promptly() {
    let (handle, url) = start(builder().mcp(everything_stdio())).await;
    let client = connect(&url).await;
    // 30 s in 60 steps: the first progress comes after 0.5 s.
    let mut call = within(
        "sending TOOL_CALL",
        client.call(
            "ev.trigger-long-running-operation",
            json!({"duration": 30, "steps": 60}),
        ),
    )
    .await
    .unwrap();
    let first = within("the first update", call.next_update())
        .await
        .expect("an update before the call ends");
    let percent = first.progress.expect("the MCP progress had a total");
    assert!((percent - 100.0 / 60.0).abs() < 1e-9, "{first:?}");
    let cancelled = Instant::now();
    within("TOOL_CANCEL", call.cancel(Some("enough")))
        .await
        .unwrap();
    let outcome = within("the outcome", call.outcome()).await.unwrap();
    assert_eq!(outcome, Outcome::Cancelled(Some("enough".into())));
    assert!(
        cancelled.elapsed() < Duration::from_secs(2),
        "cancelled after {:?}",
        cancelled.elapsed()
    );
    // The MCP server goes on serving.
    assert_eq!(
        call_sum(&client).await,
        text_result("The sum of 2 and 3 is 5.")
    );
    // The cancelled operation's timers keep node alive after its stdin closes,
    // so the child is only stopped by rmcp's SIGTERM, 3 s into the shutdown.
    within("shutdown", handle.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_child_fails_its_calls_leaves_and_is_restarted() {
    let pid_file = pid_file();
    let _ = std::fs::remove_file(&pid_file);
    // `sh` writes its pid, then becomes node: the pid is the MCP server's.
    let import = McpImport::stdio(
        "sh",
        [
            OsStr::new("-c"),
            OsStr::new(r#"echo $$ > "$0"; exec node "$1""#),
            pid_file.as_os_str(),
            everything().as_os_str(),
        ],
    )
    .prefix("ev.")
    .restart_backoff(Duration::from_millis(100), Duration::from_secs(1));
    let (handle, url) = start(builder().mcp(import)).await;
    let client = connect(&url).await;
    assert!(registered(&handle).contains(&"ev.get-sum".to_owned()));
    let pid = read_pid(&pid_file).expect("the child wrote its pid before initializing");

    let mut call = within(
        "sending TOOL_CALL",
        client.call(
            "ev.trigger-long-running-operation",
            json!({"duration": 20, "steps": 40}),
        ),
    )
    .await
    .unwrap();
    within("the first update", call.next_update())
        .await
        .expect("the call is running in the child");
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -9 {pid}: {status}");

    // The call in flight fails...
    let outcome = within("the outcome", call.outcome()).await.unwrap();
    let Outcome::Error { code, message, .. } = &outcome else {
        panic!("expected an error, got {outcome:?}")
    };
    assert_eq!(code, "TOOL_EXECUTION_ERROR", "{outcome:?}");
    assert!(!message.is_empty(), "{outcome:?}");
    // ... the tools leave the registry (and TOOL_LIST: the restart waits at
    // least the 100 ms back-off) ...
    eventually("the tools to leave the registry", async || {
        registered(&handle).is_empty()
    })
    .await;
    assert_eq!(listed(&client).await, Vec::<String>::new());
    // ... and a new child brings them back.
    eventually("the child to be restarted", async || {
        read_pid(&pid_file).is_some_and(|p| p != pid)
    })
    .await;
    eventually("the tools to come back", async || {
        registered(&handle).len() >= EVERYTHING_TOOLS.len()
    })
    .await;
    let names = listed(&client).await;
    assert_eq!(
        names[..EVERYTHING_TOOLS.len()],
        EVERYTHING_TOOLS,
        "{names:?}"
    );
    assert_eq!(
        call_sum(&client).await,
        text_result("The sum of 2 and 3 is 5.")
    );
    within("shutdown", handle.shutdown()).await;
    let _ = std::fs::remove_file(&pid_file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_import_lists_calls_and_streams_progress() {
    let port = free_port();
    let _server = tokio::process::Command::new("node")
        .arg(everything())
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("node starts");
    eventually("server-everything to listen", async || {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;

    let (handle, url) =
        start(builder().mcp(McpImport::http(format!("http://127.0.0.1:{port}/mcp")).prefix("ev.")))
            .await;
    let client = connect(&url).await;
    let names = listed(&client).await;
    assert!(
        names.len() >= EVERYTHING_TOOLS.len()
            && names[..EVERYTHING_TOOLS.len()] == EVERYTHING_TOOLS,
        "{names:?}"
    );
    assert_eq!(
        call_sum(&client).await,
        text_result("The sum of 2 and 3 is 5.")
    );
    long_running_reports_progress(&client, "ev.trigger-long-running-operation").await;
    within("shutdown", handle.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changes_errors_progress_and_cancels_with_a_python_server() {
    let import = McpImport::stdio(python(), [script("dynamic_server.py")]).prefix("dyn.");
    let (handle, url) = start(builder().mcp(import)).await;
    let client = connect(&url).await;
    let initial = [
        "dyn.add_tool",
        "dyn.remove_tool",
        "dyn.fail",
        "dyn.progress",
        "dyn.wait",
        "dyn.cancelled",
    ];
    assert_eq!(listed(&client).await, initial);

    // A tool added at run time appears (tools/list_changed) and can be called
    // (under its MCP name: the prefix is haip's).
    assert_eq!(
        call_tool(&client, "dyn.add_tool", json!({"name": "greet"})).await,
        Outcome::Ok(Some(json!({"result": "added greet"})))
    );
    eventually("dyn.greet to be listed", async || {
        listed(&client).await.contains(&"dyn.greet".to_owned())
    })
    .await;
    let mut with_greet = initial.to_vec();
    with_greet.push("dyn.greet");
    assert_eq!(listed(&client).await, with_greet, "appended at the end");
    let schema = within("TOOL_SCHEMA", client.schema("dyn.greet"))
        .await
        .unwrap();
    assert_eq!(schema.input_schema["properties"]["text"]["type"], "string");
    assert_eq!(
        call_tool(&client, "dyn.greet", json!({"text": "hi"})).await,
        Outcome::Ok(Some(json!({"tool": "greet", "text": "hi"})))
    );

    // Removed: it leaves the list, and calls find no such tool.
    assert_eq!(
        call_tool(&client, "dyn.remove_tool", json!({"name": "greet"})).await,
        Outcome::Ok(Some(json!({"result": "removed greet"})))
    );
    eventually("dyn.greet to leave the list", async || {
        listed(&client).await == initial
    })
    .await;
    let outcome = call_tool(&client, "dyn.greet", json!({})).await;
    assert!(
        matches!(&outcome, Outcome::Error { code, .. } if code == "TOOL_NOT_FOUND"),
        "{outcome:?}"
    );

    // isError: TOOL_EXECUTION_ERROR with the tool's text as the message and
    // its content blocks as the details.
    let outcome = call_tool(&client, "dyn.fail", json!({"message": "boom"})).await;
    let Outcome::Error {
        code,
        message,
        details,
    } = &outcome
    else {
        panic!("expected an error, got {outcome:?}")
    };
    assert_eq!(code, "TOOL_EXECUTION_ERROR", "{outcome:?}");
    // The SDK words it "Error executing tool fail: boom".
    assert!(message.ends_with("boom"), "{outcome:?}");
    let details = details.as_ref().expect("the content blocks as details");
    assert_eq!(details["content"][0]["type"], "text", "{outcome:?}");
    assert_eq!(
        details["content"][0]["text"],
        message.as_str(),
        "{outcome:?}"
    );

    // Progress messages become `partial`; a progress without a total has no percentage.
    let call = within("sending TOOL_CALL", client.call("dyn.progress", json!({})))
        .await
        .unwrap();
    let (updates, outcome) = drain(call).await;
    assert_eq!(outcome, Outcome::Ok(Some(json!({"result": "done"}))));
    let seen: Vec<(Option<f64>, Option<Value>)> = updates
        .into_iter()
        .map(|u| (u.progress, u.partial))
        .collect();
    let expected = [
        (Some(25.0), Some(json!("step 1"))),
        (None, Some(json!("total unknown"))),
        (Some(75.0), Some(json!("step 3"))),
        (Some(100.0), Some(json!("step 4"))),
    ];
    // 50 ms apart, none is merged away; the last may race the result.
    assert!(
        seen.len() >= 3 && seen[..] == expected[..seen.len()],
        "{seen:?}"
    );

    // TOOL_CANCEL reaches the MCP server as notifications/cancelled: the
    // server's handler is interrupted (and counts it).
    let mut waiting = within("sending TOOL_CALL", client.call("dyn.wait", json!({})))
        .await
        .unwrap();
    let first = within("the first update", waiting.next_update())
        .await
        .expect("an update before the call ends");
    assert_eq!(first.partial, Some(json!("waiting")), "{first:?}");
    within("TOOL_CANCEL", waiting.cancel(None)).await.unwrap();
    let outcome = within("the outcome", waiting.outcome()).await.unwrap();
    assert!(matches!(outcome, Outcome::Cancelled(_)), "{outcome:?}");
    eventually("the MCP server to see the cancellation", async || {
        call_tool(&client, "dyn.cancelled", json!({})).await
            == Outcome::Ok(Some(json!({"result": 1})))
    })
    .await;
    within("shutdown", handle.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_servers_do_not_stop_the_start_and_bad_settings_are_rejected() {
    // A command that does not exist, and an HTTP server that is not there.
    let started = Instant::now();
    let (handle, url) = start(
        builder()
            .mcp(
                McpImport::stdio("haip-test-no-such-mcp-server", ["--stdio"])
                    .connect_timeout(Duration::from_secs(3)),
            )
            .mcp(
                McpImport::http(format!("http://127.0.0.1:{}/mcp", free_port()))
                    .connect_timeout(Duration::from_secs(3)),
            ),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "start waited {:?}",
        started.elapsed()
    );
    assert!(registered(&handle).is_empty());
    let client = connect(&url).await;
    assert_eq!(listed(&client).await, Vec::<String>::new());
    let outcome = call_tool(&client, "get-sum", json!({"a": 1, "b": 2})).await;
    assert!(
        matches!(&outcome, Outcome::Error { code, .. } if code == "TOOL_NOT_FOUND"),
        "{outcome:?}"
    );
    within("shutdown", handle.shutdown()).await;

    // Settings that can never work fail the build. (haip-tests builds haip
    // without `mcp-tls`, so https:// is one of them.)
    let rejected = |import: McpImport, why: &str| {
        let err = builder().mcp(import).build().map(|_| ()).expect_err(why);
        assert!(
            matches!(&err, Error::InvalidConfig { setting: "mcp", .. }),
            "{why}: {err}"
        );
        err.to_string()
    };
    let err = rejected(
        McpImport::http("https://127.0.0.1:1/mcp"),
        "https without mcp-tls",
    );
    assert!(err.contains("mcp-tls"), "{err}");
    rejected(McpImport::http("ftp://127.0.0.1/mcp"), "an ftp:// URL");
    rejected(
        McpImport::stdio("", Vec::<String>::new()),
        "an empty command",
    );
    rejected(everything_stdio().prefix("not a prefix!"), "a bad prefix");
    rejected(
        everything_stdio().restart_backoff(Duration::ZERO, Duration::from_secs(1)),
        "a zero back-off",
    );
    rejected(
        everything_stdio().connect_timeout(Duration::ZERO),
        "a zero connect timeout",
    );
    // The shorthand validates the same way.
    let err = builder()
        .mcp_http("ftp://127.0.0.1/mcp")
        .build()
        .map(|_| ())
        .expect_err("an ftp:// URL");
    assert!(
        matches!(err, Error::InvalidConfig { setting: "mcp", .. }),
        "{err}"
    );
}

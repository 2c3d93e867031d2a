//! Failed and checked call outcomes over a real WebSocket (docs/protocol.md §6.4):
//! invalid params listing every violation, tool errors with details,
//! self-reported cancellation and output schema validation.
//!
//! Every envelope a test receives is also checked by the support client
//! against the outbound rules (seven fields, UUID v4 ids, `seq` +1 from `"1"`
//! with no gaps, one session id).

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use haip::{Context, Tool, ToolError};
use serde_json::{Value, json};
use support::{Client, builder, demo_builder, executions, get_json, start};

// ----- §6.4 call outcomes ------------------------------------------------------------

/// A tool with a closed schema that counts its runs.
fn counted_tool(runs: Arc<AtomicUsize>) -> Tool {
    Tool::builder("counted")
        .description("Counts its runs")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 0},
                "tag": {"type": "string", "maxLength": 3}
            },
            "required": ["n", "tag"],
            "additionalProperties": false
        }))
        .handler(move |params: Value, _ctx: Context| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, ToolError>(json!({ "n": params["n"] })) }
        })
        .build()
        .unwrap()
}

fn detail_paths(done: &Value) -> Vec<String> {
    done["result"]["details"]
        .as_array()
        .unwrap_or_else(|| panic!("no details array: {done}"))
        .iter()
        .map(|d| {
            assert!(
                d["message"].as_str().is_some_and(|m| !m.is_empty()),
                "each violation has a message: {d}"
            );
            assert_eq!(
                d.as_object().map(|o| o.len()),
                Some(2),
                "only path and message: {d}"
            );
            d["path"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_params_list_every_violation_and_the_tool_does_not_run() {
    let runs = Arc::new(AtomicUsize::new(0));
    let (_handle, url) = start(demo_builder().tool(counted_tool(Arc::clone(&runs)))).await;
    let mut client = Client::connect(&url).await;

    let done = client.call_done("p1", "add", json!({"a": "5"})).await;
    assert_eq!(done["status"], "ERROR");
    assert_eq!(done["result"]["code"], "INVALID_PARAMS");
    assert_eq!(done["result"]["error"], "Invalid params for tool add");
    assert_eq!(detail_paths(&done), ["/a", "/b"]);

    let done = client
        .call_done(
            "p2",
            "create_user",
            json!({"username": "a!", "email": "not-an-email", "age": 5, "extra": 1}),
        )
        .await;
    assert_eq!(done["result"]["code"], "INVALID_PARAMS", "{done}");
    assert_eq!(
        done["result"]["error"],
        "Invalid params for tool create_user"
    );
    // "a!" is both too short and off-pattern: two entries for /username.
    assert_eq!(
        detail_paths(&done),
        ["/age", "/email", "/extra", "/username", "/username"],
        "{done}"
    );

    let done = client
        .call_done(
            "p3",
            "counted",
            json!({"n": -1, "tag": "toolong", "x": 1, "y": 2}),
        )
        .await;
    assert_eq!(done["result"]["code"], "INVALID_PARAMS", "{done}");
    assert_eq!(detail_paths(&done), ["/n", "/tag", "/x", "/y"]);
    let done = client
        .call_done("p4", "counted", json!("not an object"))
        .await;
    assert_eq!(detail_paths(&done), [""], "{done}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "an invalid call never runs");

    let done = client
        .call_done("p5", "counted", json!({"n": 3, "tag": "ok"}))
        .await;
    assert_eq!(done["result"], json!({"n": 3}));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_errors_details_and_self_reported_cancellation() {
    let fails =
        Tool::builder("fails")
            .handler(|params: Value, _ctx: Context| async move {
                match params["mode"].as_str().unwrap_or_default() {
                    "exec" => Err(ToolError::execution("disk full")
                        .with_details(json!({"device": "/dev/sda"}))),
                    "params" => Err(ToolError::invalid_params("n too big")
                        .with_details(json!([{"path": "/n", "message": "too big"}]))),
                    "custom" => Err(ToolError::new("QUOTA_EXCEEDED", "Daily quota used up")),
                    "cancel" => Err(ToolError::cancelled()),
                    _ => Ok(json!({ "parsed": "x12".parse::<i64>()? })),
                }
            })
            .build()
            .unwrap();
    let (handle, url) = start(builder().tool(fails)).await;
    let mut client = Client::connect(&url).await;

    let done = client
        .call_done("f1", "fails", json!({"mode": "exec"}))
        .await;
    assert_eq!(
        done,
        json!({"call_id": "f1", "status": "ERROR", "result":
               {"error": "disk full", "code": "TOOL_EXECUTION_ERROR", "details": {"device": "/dev/sda"}}})
    );
    let done = client
        .call_done("f2", "fails", json!({"mode": "params"}))
        .await;
    assert_eq!(
        done["result"],
        json!({"error": "n too big", "code": "INVALID_PARAMS", "details": [{"path": "/n", "message": "too big"}]})
    );
    let done = client
        .call_done("f3", "fails", json!({"mode": "custom"}))
        .await;
    assert_eq!(
        done["result"],
        json!({"error": "Daily quota used up", "code": "QUOTA_EXCEEDED"})
    );
    // `?` on any std error: TOOL_EXECUTION_ERROR with its text.
    let done = client.call_done("f4", "fails", json!({})).await;
    assert_eq!(done["result"]["code"], "TOOL_EXECUTION_ERROR", "{done}");
    assert_eq!(done["result"]["error"], "invalid digit found in string");
    // A tool reporting cancellation nobody asked for: CANCELLED, no result, no CANCELLING.
    let done = client
        .call_done("f5", "fails", json!({"mode": "cancel"}))
        .await;
    assert_eq!(done, json!({"call_id": "f5", "status": "CANCELLED"}));

    let stats = get_json(handle.local_addr(), "/stats").await;
    assert_eq!(executions(&stats), [5, 0, 4, 1, 0], "{stats}");
}

fn shaped_tool() -> Tool {
    Tool::builder("shaped")
        .output_schema(json!({
            "type": "object",
            "properties": {"x": {"type": "integer"}},
            "required": ["x"]
        }))
        .handler(|params: Value, _: Context| async move { Ok::<_, ToolError>(params) })
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_schema_violations_are_counted_and_sent_unless_strict() {
    let (handle, url) = start(builder().tool(shaped_tool())).await;
    let mut client = Client::connect(&url).await;
    let done = client.call_done("o1", "shaped", json!({"x": 1})).await;
    assert_eq!(done["result"], json!({"x": 1}));
    assert_eq!(
        get_json(handle.local_addr(), "/health").await["warnings"],
        0
    );
    let done = client.call_done("o2", "shaped", json!({"y": "two"})).await;
    assert_eq!(
        done,
        json!({"call_id": "o2", "status": "OK", "result": {"y": "two"}})
    );
    assert_eq!(
        get_json(handle.local_addr(), "/health").await["warnings"],
        1,
        "an output schema violation counts as a warning"
    );

    let (_strict_handle, strict_url) =
        start(builder().strict_output_validation(true).tool(shaped_tool())).await;
    let mut strict = Client::connect(&strict_url).await;
    let done = strict.call_done("o3", "shaped", json!({"x": "one"})).await;
    assert_eq!(done["status"], "ERROR", "{done}");
    assert_eq!(done["result"]["code"], "TOOL_EXECUTION_ERROR", "{done}");
    assert_eq!(detail_paths(&done), ["/x"]);
    let done = strict.call_done("o4", "shaped", json!({"x": 4})).await;
    assert_eq!(done["status"], "OK");
}

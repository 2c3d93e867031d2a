//! Tool discovery over a real WebSocket (docs/protocol.md §6.1–§6.3): `TOOL_LIST`,
//! `TOOL_SCHEMA` (including the legacy `schema` field), tools registered,
//! replaced and unregistered while clients are connected, `TOOL_LIST`
//! pushed on registry changes with `advertise_tools`, and tools' titles,
//! annotations and icons (§6.13).
//!
//! Every envelope a test receives is also checked by the support client
//! against the outbound rules (seven fields, UUID v4 ids, `seq` +1 from `"1"`
//! with no gaps, one session id).

use crate::support;

use haip::{Context, Tool, ToolError};
use serde_json::{Value, json};
use support::{Client, builder, demo_builder, gated_tool, keys, start};

// ----- §6.2 TOOL_LIST, §6.3 TOOL_SCHEMA -----------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_list_has_builtins_then_demo_tools_and_adverts_get_no_reply() {
    let (_handle, url) = start(demo_builder()).await;
    let mut client = Client::connect(&url).await;
    client.request("TOOL_LIST", json!({})).await;
    let env = client.recv().await;
    assert_eq!(
        (env["type"].as_str(), env["channel"].as_str()),
        (Some("TOOL_LIST"), Some("AGENT"))
    );
    // Built-ins first with §7's fixed descriptions, then the demo tools in
    // registration order, each with its own (non-empty) description.
    let mut expected = vec![
        json!({"name": "echo", "description": "Echo back the input"}),
        json!({"name": "add", "description": "Add two numbers"}),
        json!({"name": "weather", "description": "Get weather information"}),
    ];
    for tool in haip_examples::demo::tools() {
        assert!(!tool.description().is_empty(), "{tool:?}");
        let mut item = json!({"name": tool.name(), "description": tool.description()});
        // The calculator says what it is (§6.13); the others declare nothing.
        if tool.name() == "calculator" {
            item["title"] = json!("Calculator");
            item["annotations"] = json!({"readOnlyHint": true, "idempotentHint": true});
        }
        expected.push(item);
    }
    let names: Vec<&str> = expected
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, support::QUICKSTART_TOOLS);
    assert_eq!(env["payload"], json!({ "tools": expected }));

    // A client advertising its own tools (upstream SDK listTools) gets nothing.
    client
        .request(
            "TOOL_LIST",
            json!({"tools": [{"name": "client_tool", "description": "mine"}]}),
        )
        .await;
    client.ping_marker().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_list_omits_empty_descriptions() {
    let bare = Tool::builder("bare")
        .handler(|_: Value, _: Context| async { Ok::<_, ToolError>(Value::Null) })
        .build()
        .unwrap();
    let (_handle, url) = start(builder().builtin_tools().tool(bare)).await;
    let mut client = Client::connect(&url).await;
    client.request("TOOL_LIST", json!({})).await;
    let env = client.recv().await;
    assert_eq!(env["payload"]["tools"][3], json!({"name": "bare"}));
}

/// Deletes a repository.
#[haip::haip_tool(
    title = "Delete a repository",
    destructive,
    idempotent = true,
    icon(src = "https://example.com/trash.svg", mime_type = "image/svg+xml", sizes = ["any"], theme = "dark"),
    icon = "https://example.com/trash.png"
)]
async fn delete_repo(name: String) -> bool {
    !name.is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn titles_annotations_and_icons_are_listed_only_when_declared() {
    let (_handle, url) = start(builder().builtin_tools().tool(delete_repo::tool())).await;
    let mut client = Client::connect(&url).await;
    // docs/protocol.md §6.13: beside name and description, in MCP's spelling, only
    // the hints declared; the built-ins declare nothing and carry none of it.
    let declared = json!({
        "title": "Delete a repository",
        "annotations": {"destructiveHint": true, "idempotentHint": true},
        "icons": [
            {"src": "https://example.com/trash.svg", "mimeType": "image/svg+xml",
             "sizes": ["any"], "theme": "dark"},
            {"src": "https://example.com/trash.png"}
        ]
    });
    client.request("TOOL_LIST", json!({})).await;
    let env = client.recv().await;
    let tools = env["payload"]["tools"].as_array().unwrap();
    assert_eq!(
        tools[0],
        json!({"name": "echo", "description": "Echo back the input"})
    );
    let mut expected = json!({"name": "delete_repo", "description": "Deletes a repository."});
    expected
        .as_object_mut()
        .unwrap()
        .extend(declared.as_object().unwrap().clone());
    assert_eq!(tools[3], expected);

    client
        .request("TOOL_SCHEMA", json!({"tool": "delete_repo"}))
        .await;
    let payload = client.recv().await["payload"].clone();
    for key in ["title", "annotations", "icons"] {
        assert_eq!(payload[key], declared[key], "{key}: {payload}");
    }
    client.request("TOOL_SCHEMA", json!({"tool": "echo"})).await;
    let payload = client.recv().await["payload"].clone();
    for key in ["title", "annotations", "icons"] {
        assert!(payload.get(key).is_none(), "{key}: {payload}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_schema_replies_and_errors() {
    let (gated, _gate) = gated_tool("gated");
    let (_handle, url) = start(demo_builder().tool(gated)).await;
    let mut client = Client::connect(&url).await;

    client.request("TOOL_SCHEMA", json!({"tool": "echo"})).await;
    let env = client.recv().await;
    assert_eq!(
        (env["type"].as_str(), env["channel"].as_str()),
        (Some("TOOL_SCHEMA"), Some("AGENT"))
    );
    assert_eq!(
        env["payload"],
        json!({
            "tool": "echo",
            "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
            "outputSchema": {"type": "object", "properties": {"echoed": {"type": "string"}}}
        })
    );

    // Built-in add and weather schemas are exactly §7's.
    client.request("TOOL_SCHEMA", json!({"tool": "add"})).await;
    assert_eq!(
        client.recv().await["payload"],
        json!({
            "tool": "add",
            "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
            "outputSchema": {"type": "object", "properties": {"result": {"type": "number"}}}
        })
    );
    client
        .request("TOOL_SCHEMA", json!({"tool": "weather"}))
        .await;
    assert_eq!(
        client.recv().await["payload"],
        json!({
            "tool": "weather",
            "inputSchema": {"type": "object", "properties": {"location": {"type": "string"}}},
            "outputSchema": {"type": "object", "properties": {"temperature": {"type": "string"}, "condition": {"type": "string"}, "location": {"type": "string"}}}
        })
    );

    // A tool without an output schema: no outputSchema key; the default
    // input schema as written (`full`), and as the portable profile shows it.
    client
        .request("TOOL_SCHEMA", json!({"tool": "gated", "profile": "full"}))
        .await;
    assert_eq!(
        client.recv().await["payload"],
        json!({"tool": "gated", "inputSchema": {"type": "object"}})
    );
    client
        .request("TOOL_SCHEMA", json!({"tool": "gated"}))
        .await;
    assert_eq!(
        client.recv().await["payload"],
        json!({"tool": "gated", "inputSchema": {"type": "object", "properties": {}}})
    );

    // Unknown tool.
    let id = client.request("TOOL_SCHEMA", json!({"tool": "nope"})).await;
    let err = client.expect_error().await;
    assert_eq!(
        err["payload"],
        json!({"code": "TOOL_NOT_FOUND", "message": "Tool nope not found", "related_id": id, "detail": {"tool": "nope"}})
    );

    // Missing or non-string tool.
    for payload in [json!({}), json!({"tool": 5})] {
        let id = client.request("TOOL_SCHEMA", payload).await;
        let err = client.expect_error().await;
        assert_eq!(
            err["payload"],
            json!({"code": "INVALID_MESSAGE", "message": "Invalid message format", "related_id": id, "detail": {"reason": "missing tool"}})
        );
    }

    // A client advertising a schema gets nothing.
    client
        .request(
            "TOOL_SCHEMA",
            json!({"tool": "client_tool", "inputSchema": {"type": "object"}}),
        )
        .await;
    client.ping_marker().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_schema_legacy_field_adds_schema() {
    let (_handle, url) = start(builder().builtin_tools().tool_schema_legacy_field(true)).await;
    let mut client = Client::connect(&url).await;
    client.request("TOOL_SCHEMA", json!({"tool": "echo"})).await;
    let payload = client.recv().await["payload"].clone();
    assert_eq!(
        keys(&payload),
        ["inputSchema", "outputSchema", "schema", "tool"]
    );
    assert_eq!(payload["schema"], payload["inputSchema"]);
}

// ----- §6.1 live registry ------------------------------------------------------------------

fn versioned_tool(description: &str, version: u32) -> Tool {
    Tool::builder("dynamic")
        .description(description)
        .handler(move |_: Value, _: Context| async move {
            Ok::<_, ToolError>(json!({ "version": version }))
        })
        .build()
        .unwrap()
}

async fn listed(client: &mut Client) -> Vec<(String, String)> {
    client.request("TOOL_LIST", json!({})).await;
    let env = client.recv().await;
    assert_eq!(env["type"], "TOOL_LIST", "{env}");
    env["payload"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_owned(),
                t["description"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_registered_replaced_and_unregistered_while_connected() {
    let (handle, url) = start(demo_builder()).await;
    let mut client = Client::connect(&url).await;
    let before = listed(&mut client).await;
    assert_eq!(before.len(), support::QUICKSTART_TOOLS.len());

    assert!(
        handle
            .register_tool(versioned_tool("First version", 1))
            .expect("registering a stateless tool succeeds")
            .is_none()
    );
    let names: Vec<String> = handle.tools().iter().map(|t| t.name().to_owned()).collect();
    assert_eq!(
        names,
        [&support::QUICKSTART_TOOLS[..], &["dynamic"]].concat()
    );
    let n = before.len();
    let after = listed(&mut client).await;
    assert_eq!(after[..n], before[..]);
    assert_eq!(after[n], ("dynamic".to_owned(), "First version".to_owned()));
    let done = client.call_done("d1", "dynamic", json!({})).await;
    assert_eq!(done["result"], json!({"version": 1}));

    // Replacing keeps the position.
    let replaced = handle
        .register_tool(versioned_tool("Second version", 2))
        .expect("replacing a stateless tool succeeds");
    assert_eq!(
        replaced.map(|t| t.description().to_owned()),
        Some("First version".to_owned())
    );
    let list = listed(&mut client).await;
    assert_eq!(list.len(), n + 1);
    assert_eq!(list[n], ("dynamic".to_owned(), "Second version".to_owned()));
    let done = client.call_done("d2", "dynamic", json!({})).await;
    assert_eq!(done["result"], json!({"version": 2}));

    // A second connection sees the same registry.
    let mut other = Client::connect(&url).await;
    assert_eq!(listed(&mut other).await, list);

    assert_eq!(
        handle
            .unregister_tool("dynamic")
            .map(|t| t.name().to_owned()),
        Some("dynamic".to_owned())
    );
    assert!(handle.unregister_tool("dynamic").is_none());
    assert_eq!(listed(&mut client).await, before);
    let id = client.call("d3", "dynamic", json!({})).await;
    let err = client.expect_error().await;
    assert_eq!(err["payload"]["code"], "TOOL_NOT_FOUND");
    assert_eq!(err["payload"]["related_id"], id);
    let done = client.expect_done("d3").await;
    assert_eq!(done["result"]["code"], "TOOL_NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unregistering_a_tool_does_not_affect_its_running_call() {
    let (gated, mut gate) = gated_tool("gated");
    let (handle, url) = start(builder().tool(gated)).await;
    let mut client = Client::connect(&url).await;
    client.call("g1", "gated", json!({})).await;
    gate.started().await;
    assert!(handle.unregister_tool("gated").is_some());
    gate.open(1);
    assert_eq!(
        client.expect_done("g1").await["result"],
        json!({"released": "g1"})
    );
}

// ----- §6.2 advertise_tools ----------------------------------------------------------

/// The tool names of a `TOOL_LIST` envelope.
fn names_of(env: &Value) -> Vec<String> {
    assert_eq!(env["type"], "TOOL_LIST", "{env}");
    assert_eq!(env["channel"], "AGENT", "{env}");
    env["payload"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advertise_tools_pushes_the_list_after_hai_and_on_every_change() {
    let (handle, url) = start(builder().builtin_tools().advertise_tools(true)).await;
    // A client that asks for TOOL_LIST gets it after its HAI, unrequested.
    let mut wants = Client::connect(&url).await;
    wants
        .request(
            "HAI",
            json!({"accept_major": [1], "accept_events": ["PONG", "TOOL_LIST", "TOOL_DONE"]}),
        )
        .await;
    assert_eq!(names_of(&wants.recv().await), ["echo", "add", "weather"]);
    // A client whose accept_events leaves TOOL_LIST out, and one that sent no
    // HAI, get nothing unsolicited.
    let mut declines = Client::connect(&url).await;
    declines
        .request(
            "HAI",
            json!({"accept_major": [1], "accept_events": ["PONG"]}),
        )
        .await;
    let mut silent = Client::connect(&url).await;
    declines.ping_marker().await;
    silent.ping_marker().await;

    handle
        .register_tool(versioned_tool("First version", 1))
        .unwrap();
    assert_eq!(
        names_of(&wants.recv().await),
        ["echo", "add", "weather", "dynamic"]
    );
    handle.unregister_tool("add");
    assert_eq!(
        names_of(&wants.recv().await),
        ["echo", "weather", "dynamic"]
    );
    // Asking still works, and the others saw no push.
    assert_eq!(
        listed(&mut wants).await.len(),
        3,
        "a requested TOOL_LIST is answered as usual"
    );
    // Two markers: a push woken by the change would have been sent by the
    // second at the latest.
    for _ in 0..2 {
        declines.ping_marker().await;
        silent.ping_marker().await;
    }
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_advertise_tools_nothing_is_pushed() {
    let (handle, url) = start(builder().builtin_tools()).await;
    let mut client = Client::connect(&url).await;
    client
        .request(
            "HAI",
            json!({"accept_major": [1], "accept_events": ["PONG", "TOOL_LIST"]}),
        )
        .await;
    client.ping_marker().await;
    handle
        .register_tool(versioned_tool("First version", 1))
        .unwrap();
    client.ping_marker().await;
    client.ping_marker().await;
    handle.shutdown().await;
}

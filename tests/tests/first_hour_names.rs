//! Issue 38, the first hour with haip: a call to a tool by a name no tool
//! has says which one was likely meant. `crunch`, served mounted as
//! `ops_crunch`, gets `TOOL_NOT_FOUND` with `did you mean "ops_crunch"?`
//! (and `did_you_mean` in the details), over the wire (WebSocket) and
//! through `haip::testing`: at most three names, each quoted in at most 64
//! characters, and only tools the caller may see.

use crate::support;

use haip::auth::Caller;
use haip::testing::TestServer;
use haip::{Context, Tool, ToolError, json};
use serde_json::Value;
use support::{Client, builder, start};

fn tool(name: &str) -> Tool {
    Tool::builder(name)
        .description("Crunches numbers.")
        .handler(|params: Value, _: Context| async move { Ok::<_, ToolError>(params) })
        .build()
        .expect("the tool builds")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_name_names_the_mounted_tool_on_the_wire() {
    let (_handle, url) = start(builder().mount("ops", [tool("crunch")]).tool(tool("echo"))).await;
    let mut client = Client::connect(&url).await;

    // The name without its mount's prefix: the ERROR, then the TOOL_DONE.
    let id = client.call("c-1", "crunch", json!({})).await;
    let err = client.expect_error().await;
    let message = "Tool crunch not found; did you mean \"ops_crunch\"?";
    assert_eq!(
        err["payload"],
        json!({"code": "TOOL_NOT_FOUND", "message": message, "related_id": id,
               "detail": {"call_id": "c-1", "tool": "crunch", "did_you_mean": ["ops_crunch"]}})
    );
    let done = client.expect_done("c-1").await;
    assert_eq!(
        done,
        json!({"call_id": "c-1", "status": "ERROR", "result": {
            "error": message, "code": "TOOL_NOT_FOUND",
            "details": {"did_you_mean": ["ops_crunch"]}}})
    );

    // A typo, and a prefix the server does not have.
    for (call_id, name) in [("c-2", "ops_crnch"), ("c-3", "v2_ops_crunch")] {
        client.call(call_id, name, json!({})).await;
        client.expect_error().await;
        let done = client.expect_done(call_id).await;
        assert_eq!(
            done["result"]["error"],
            format!("Tool {name} not found; did you mean \"ops_crunch\"?"),
            "{done}"
        );
    }

    // Nothing close: the message as it always was, no details.
    client.call("c-4", "zzzzzzzz", json!({})).await;
    client.expect_error().await;
    let done = client.expect_done("c-4").await;
    assert_eq!(
        done["result"],
        json!({"error": "Tool zzzzzzzz not found", "code": "TOOL_NOT_FOUND"})
    );

    // TOOL_SCHEMA of a name no tool has says it too.
    client
        .request("TOOL_SCHEMA", json!({"tool": "crunch"}))
        .await;
    let err = client.expect_error().await;
    assert_eq!(err["payload"]["message"], message, "{err}");
    client.ping_marker().await;
}

#[tokio::test]
async fn at_most_three_names_each_quoted_short_and_only_visible_ones() {
    let long = format!("{}_crunch", "p".repeat(90));
    let server = TestServer::new(
        haip::Server::builder()
            .mount("ops", [tool("crunch")])
            .mount("billing", [tool("crunch")])
            .mount("stats", [tool("crunch")])
            .mount("extra", [tool("crunch")])
            .tool(tool(&long))
            .tool(
                Tool::builder("admin_crunch")
                    .description("Crunches everything.")
                    .scopes(["admin"])
                    .handler(|_: Value, _: Context| async { Ok::<_, ToolError>(json!(null)) })
                    .build()
                    .unwrap(),
            ),
    )
    .expect("the tools build");

    // Four mounted `crunch`es (and more): three are named, in order.
    let ada = server.client_as(Caller::new("ada")).await.unwrap();
    let err = ada.call("crunch", json!({})).await.unwrap_err();
    assert_eq!(err.code(), Some("TOOL_NOT_FOUND"));
    assert!(
        err.to_string().contains(
            "Tool crunch not found; did you mean \"ops_crunch\", \"billing_crunch\" or \
             \"stats_crunch\"?"
        ),
        "{err}"
    );

    // A long name is quoted in 64 characters at most in the message; the
    // details hold it whole.
    let typo = &long[..long.len() - 1];
    let err = ada.call(typo, json!({})).await.unwrap_err();
    let shown = err.to_string();
    let quoted = format!("\"{}…\"", &long[..63]);
    assert_eq!(quoted.chars().count(), 64 + 2);
    assert!(
        shown.contains(&format!("did you mean {quoted}?")),
        "{shown}"
    );
    assert_eq!(
        err.details(),
        Some(&json!({"did_you_mean": [long]})),
        "{shown}"
    );

    // A tool the caller may not see is never suggested; one that may, is.
    let err = ada.call("admin_crunchh", json!({})).await.unwrap_err();
    assert!(!err.to_string().contains("did you mean"), "{err}");
    let root = server
        .client_as(Caller::new("root").with_scopes(["admin"]))
        .await
        .unwrap();
    let err = root.call("admin_crunchh", json!({})).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("Tool admin_crunchh not found; did you mean \"admin_crunch\"?"),
        "{err}"
    );
}

/// The same over MCP: `tools/call` of the bare name answers `-32602` naming
/// the mounted tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_name_names_the_mounted_tool_over_mcp() {
    let (handle, _) = start(builder().mount("ops", [tool("crunch")]).mcp_sessions(false)).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "crunch", "arguments": {}}});
    let reply = crate::mcp_http::mcp_request(handle.local_addr(), "POST", Some(&body), &[]).await;
    let error = &reply.response()["error"];
    assert_eq!(error["code"], -32602, "{reply:?}");
    assert_eq!(
        error["message"], "Tool crunch not found; did you mean \"ops_crunch\"?",
        "{reply:?}"
    );
}

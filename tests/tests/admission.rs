//! One way for a call to start (issue 40): a call refused at each step of
//! admission (unknown tool, scopes, a layer, params) ends once, with the same
//! code, whether it came over HAIP (`TOOL_CALL` on a WebSocket) or MCP
//! (`tools/call` on `/mcp`).
//!
//! "Ends once" is read from the server's own counters: each refused call
//! adds exactly one to `/stats`' executions (failed, nothing left active)
//! and exactly one to `haip_tool_calls_finished_total` under its tool and
//! code in `/metrics`. Each step runs on a server with and without layers
//! (with layers, params are checked after them, in the call's task).

use crate::mcp_http;
use crate::support;

use std::net::SocketAddr;

use haip::auth::{AuthError, AuthFuture, Authenticator, Caller, IdentifyFuture};
use haip::layer::{Call, Next, from_fn};
use haip::{Context, Tool, ToolError};
use mcp_http::mcp_request;
use serde_json::{Value, json};
use support::{Client, HttpResponse, builder, executions, http_request_with};

/// Token `user-X` is subject `X` with no scopes; `admin-X` has `admin`.
struct Users;

impl Authenticator for Users {
    fn authenticate<'a>(&'a self, token: Option<&'a str>) -> AuthFuture<'a> {
        Box::pin(async move {
            let token = token.unwrap_or_default();
            match token.split_once('-') {
                Some(("user" | "admin", subject)) => Ok(subject.to_owned()),
                _ => Err(AuthError::invalid_token("not a user- or admin- token")),
            }
        })
    }

    fn identify<'a>(&'a self, token: Option<&'a str>) -> IdentifyFuture<'a> {
        Box::pin(async move {
            let subject = self.authenticate(token).await?;
            let caller = Caller::new(subject);
            Ok(match token.is_some_and(|t| t.starts_with("admin-")) {
                true => caller.with_scopes(["admin"]),
                false => caller,
            })
        })
    }
}

/// `greet {name}`: `name` is required.
fn greet() -> Tool {
    Tool::builder("greet")
        .description("Greets someone.")
        .input_schema(json!({
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
            "additionalProperties": false
        }))
        .handler(|params: Value, _: Context| async move { Ok(json!({"hello": params["name"]})) })
        .build()
        .expect("greet builds")
}

/// `secret`: for callers with the `admin` scope.
fn secret() -> Tool {
    Tool::builder("secret")
        .description("Tells a secret.")
        .scopes(["admin"])
        .handler(|_: Value, _: Context| async move { Ok(json!("42")) })
        .build()
        .expect("secret builds")
}

/// `guarded`: every call refused by the layer below.
fn guarded() -> Tool {
    Tool::builder("guarded")
        .description("Never runs.")
        .handler(|_: Value, _: Context| async move { Ok(json!("ran")) })
        .build()
        .expect("guarded builds")
}

/// Refuses every call of `guarded` with `NOT_TODAY`, before it runs.
fn gatekeeper() -> impl haip::layer::Layer {
    from_fn(|call: Call, next: Next| async move {
        if call.name() == "guarded" {
            return Err(ToolError::new("NOT_TODAY", "refused by a layer"));
        }
        next.run(call).await
    })
}

/// One refused call: the tool, its params, and the code it ends with.
struct Step {
    what: &'static str,
    tool: &'static str,
    params: Value,
    code: &'static str,
    /// Only a server with layers refuses it.
    layered_only: bool,
}

fn steps() -> Vec<Step> {
    let step = |what, tool, params, code, layered_only| Step {
        what,
        tool,
        params,
        code,
        layered_only,
    };
    vec![
        step("unknown tool", "nope", json!({}), "TOOL_NOT_FOUND", false),
        step("scopes", "secret", json!({}), "FORBIDDEN", false),
        step("layer", "guarded", json!({}), "NOT_TODAY", true),
        step(
            "params",
            "greet",
            json!({"name": 7}),
            "INVALID_PARAMS",
            false,
        ),
    ]
}

/// The tool label a refused call is counted under.
fn label(step: &Step) -> &'static str {
    if step.code == "TOOL_NOT_FOUND" {
        "unknown"
    } else {
        step.tool
    }
}

/// `GET path` as an operator, who may see every tool: `200` and the body.
async fn operator_get(addr: SocketAddr, path: &str) -> HttpResponse {
    let auth = [("authorization", "Bearer admin-ops")];
    let response = http_request_with(addr, "GET", path, &auth, b"").await;
    assert_eq!(response.status, 200, "GET {path}: {response:?}");
    response
}

/// `haip_tool_calls_finished_total` of `tool` ended with `code`.
async fn finished(addr: SocketAddr, tool: &str, code: &str) -> f64 {
    let metrics = operator_get(addr, "/metrics").await;
    let (tool, code) = (format!("tool=\"{tool}\""), format!("code=\"{code}\""));
    metrics
        .body
        .lines()
        .filter(|l| l.starts_with("haip_tool_calls_finished_total{"))
        .filter(|l| l.contains(&tool) && l.contains(&code))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `[total, ok, failed, cancelled, active]` of `/stats`.
async fn counts(addr: SocketAddr) -> [u64; 5] {
    executions(&operator_get(addr, "/stats").await.json())
}

/// The code a HAIP `TOOL_CALL` of `step` ends with (its one `TOOL_DONE`).
async fn over_haip(client: &mut Client, call_id: &str, step: &Step) -> String {
    client.call(call_id, step.tool, step.params.clone()).await;
    let mut env = client.recv().await;
    if env["type"] == "ERROR" {
        // An unknown tool is also an `ERROR`, before its `TOOL_DONE`.
        assert_eq!(env["payload"]["code"], "TOOL_NOT_FOUND", "{env}");
        env = client.recv().await;
    }
    assert_eq!(env["type"], "TOOL_DONE", "{env}");
    let done = &env["payload"];
    assert_eq!(done["call_id"], call_id, "{done}");
    assert_eq!(done["status"], "ERROR", "{done}");
    client.ping_marker().await;
    done["result"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// An MCP `tools/call` of `step`: the HTTP status and the JSON-RPC response.
async fn over_mcp(addr: SocketAddr, step: &Step) -> (u16, Value) {
    let body = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": step.tool, "arguments": step.params}
    });
    let auth = [("authorization", "Bearer user-ada")];
    let reply = mcp_request(addr, "POST", Some(&body), &auth).await;
    let status = reply.status;
    (status, reply.response())
}

/// How MCP says each refusal: a JSON-RPC error for a request that was
/// wrong (and `403` for scopes, at the front door), a result with
/// `isError` for a call that was refused as a call.
fn check_mcp(step: &Step, status: u16, response: &Value) {
    let what = step.what;
    match step.code {
        "TOOL_NOT_FOUND" => {
            assert_eq!(status, 200, "{what}: {response}");
            assert_eq!(response["error"]["code"], -32602, "{what}: {response}");
        }
        "FORBIDDEN" => {
            assert_eq!(status, 403, "{what}: {response}");
            assert_eq!(response["error"]["data"]["missing"], json!(["admin"]));
        }
        _ => {
            assert_eq!(status, 200, "{what}: {response}");
            assert_eq!(response["result"]["isError"], true, "{what}: {response}");
        }
    }
}

async fn refusals_end_once(layered: bool) {
    let mut b = builder()
        .mcp_sessions(false)
        .authenticator(Users)
        .tool(greet())
        .tool(secret())
        .tool(guarded());
    if layered {
        b = b.layer(gatekeeper());
    }
    let (handle, _) = support::start(b).await;
    let addr = handle.local_addr();
    let mut client = Client::connect(&format!("ws://{addr}/haip?token=user-ada")).await;
    for (i, step) in steps().iter().enumerate() {
        if step.layered_only && !layered {
            continue;
        }
        let (what, code) = (step.what, step.code);
        for door in ["HAIP", "MCP"] {
            let before = finished(addr, label(step), code).await;
            let [total, _, failed, _, _] = counts(addr).await;
            if door == "HAIP" {
                let got = over_haip(&mut client, &format!("c{i}"), step).await;
                assert_eq!(got, code, "{what} over HAIP (layered: {layered})");
            } else {
                let (status, response) = over_mcp(addr, step).await;
                check_mcp(step, status, &response);
            }
            let after = finished(addr, label(step), code).await;
            assert_eq!(
                after - before,
                1.0,
                "{what} over {door} (layered: {layered}) ends once with {code}"
            );
            let [total_now, _, failed_now, _, active] = counts(addr).await;
            assert_eq!(total_now, total + 1, "{what} over {door}: one call counted");
            assert_eq!(failed_now, failed + 1, "{what} over {door}: it failed");
            assert_eq!(active, 0, "{what} over {door}: nothing left in flight");
        }
    }
    // An admin may call `secret`, over both doors.
    let mut admin = Client::connect(&format!("ws://{addr}/haip?token=admin-root")).await;
    let done = admin.call_done("s", "secret", json!({})).await;
    assert_eq!(done["status"], "OK", "{done}");
    client.close().await;
    admin.close().await;
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refusal_ends_once_with_the_same_code_on_both_doors() {
    refusals_end_once(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_layers_each_refusal_ends_once_with_the_same_code_on_both_doors() {
    refusals_end_once(true).await;
}

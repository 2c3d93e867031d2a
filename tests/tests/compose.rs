//! Composing tool sets (issue 29), through the real wire: what HAIP and MCP
//! clients are shown and can call.
//!
//! - A `ToolSet` mounted under a prefix is listed (`TOOL_LIST`, MCP
//!   `tools/list`) and called (`TOOL_CALL`, MCP `tools/call`) by its prefixed
//!   names only; the separator is `_` unless a mount chooses another.
//! - A mount's edits (a new name and description, a renamed parameter) are
//!   what clients see, and calls reach the original handler.
//! - `only_tags` / `exclude_tags` decide what is served; MCP clients see a
//!   tool's tags in its `_meta`.
//! - `annotated_tools()` leaves out the `#[haip_tool]`s the builder was given
//!   explicitly (mounted, or with `.tool()`), however they were edited.
//! - Name clashes after prefixing, and a separator no tool name may hold,
//!   fail `build()` saying where each tool came from.

#[path = "support/mcp_http.rs"]
mod mcp_http;
#[path = "support/mcp.rs"]
mod mcp_support;
mod support;

use std::net::SocketAddr;

use haip::{Error, Mount, ServerBuilder, ServerHandle, haip_tool};
use mcp_http::mcp_request;
use serde_json::{Value, json};
use support::{Client, builder};

/// What a library crate of tools would be.
mod files {
    use haip::{ToolSet, haip_tool};

    #[haip::data]
    pub(crate) struct Contents {
        pub(crate) text: String,
    }

    #[haip::data]
    pub(crate) struct Written {
        pub(crate) bytes: usize,
    }

    /// Read a file.
    #[haip_tool(tags = ["read"])]
    pub(crate) async fn read(
        /// Which file.
        path: String,
    ) -> Contents {
        Contents {
            text: format!("contents of {path}"),
        }
    }

    /// Write a file.
    #[haip_tool(tags = ["write", "admin"])]
    pub(crate) async fn write(path: String, text: String) -> Written {
        Written {
            bytes: path.len() + text.len(),
        }
    }

    /// Every tool of this module, as a crate of tools exports them.
    pub(crate) fn tools() -> ToolSet {
        ToolSet::annotated(module_path!()).expect("the file tools build")
    }
}

#[haip::data]
struct Status {
    up: bool,
}

/// Say whether the server is up.
#[haip_tool(tags = ["public"])]
async fn status() -> Status {
    Status { up: true }
}

/// The file tools under `files_`, `read` again as `v2.cat` (its `path`
/// shown as `file`), and `status` on its own.
fn composed() -> ServerBuilder {
    builder()
        .mount("files", files::tools())
        .mount_with(
            Mount::new("v2", [files::read::tool()])
                .separator('.')
                .edit("read", |e| {
                    e.name("cat")
                        .description("Print a file")
                        .rename_param("path", "file")
                }),
        )
        .tool(status::tool())
}

/// Starts `builder` with `/mcp` stateless: the MCP requests here are single
/// POSTs, no `initialize`.
async fn start(builder: ServerBuilder) -> (ServerHandle, SocketAddr, String) {
    let (handle, url) = support::start(builder.mcp_sessions(false)).await;
    let addr = handle.local_addr();
    (handle, addr, url)
}

/// `(name, description)` of every tool of a HAIP `TOOL_LIST`.
async fn haip_list(client: &mut Client) -> Vec<(String, String)> {
    client.request("TOOL_LIST", json!({})).await;
    let env = client.recv().await;
    assert_eq!(env["type"], "TOOL_LIST", "{env}");
    env["payload"]["tools"]
        .as_array()
        .expect("a tools array")
        .iter()
        .map(|t| {
            let text = |key: &str| t[key].as_str().unwrap_or_default().to_owned();
            (text("name"), text("description"))
        })
        .collect()
}

/// The tools of an MCP `tools/list` on a stateless `/mcp` (no `initialize`).
async fn mcp_list(addr: SocketAddr) -> Vec<Value> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let reply = mcp_request(addr, "POST", Some(&body), &[]).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    reply.response()["result"]["tools"]
        .as_array()
        .expect("a tools array")
        .clone()
}

/// An MCP `tools/call`'s JSON-RPC response.
async fn mcp_call(addr: SocketAddr, name: &str, arguments: Value) -> Value {
    let body = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}
    });
    let reply = mcp_request(addr, "POST", Some(&body), &[]).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    reply.response()
}

fn names(tools: &[Value]) -> Vec<&str> {
    tools.iter().filter_map(|t| t["name"].as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounted_tools_are_listed_and_called_by_their_prefixed_names_over_haip() {
    let (handle, _, url) = start(composed()).await;
    let mut client = Client::connect(&url).await;
    let listed = haip_list(&mut client).await;
    let expected = [
        ("files_read", "Read a file."),
        ("files_write", "Write a file."),
        ("v2.cat", "Print a file"),
        ("status", "Say whether the server is up."),
    ];
    assert_eq!(
        listed,
        expected.map(|(n, d)| (n.to_owned(), d.to_owned())),
        "mounted tools in the order given, prefixed"
    );
    let done = client
        .call_done("c1", "files_read", json!({"path": "a.txt"}))
        .await;
    assert_eq!(
        done,
        json!({"call_id": "c1", "status": "OK", "result": {"text": "contents of a.txt"}})
    );
    // The edited copy: its parameter is `file` on the wire, `path` in the function.
    let done = client
        .call_done("c2", "v2.cat", json!({"file": "b.txt"}))
        .await;
    assert_eq!(
        done["result"],
        json!({"text": "contents of b.txt"}),
        "{done}"
    );
    client
        .request("TOOL_SCHEMA", json!({"tool": "v2.cat"}))
        .await;
    let schema = client.recv().await;
    let properties = &schema["payload"]["inputSchema"]["properties"];
    assert_eq!(properties["file"]["description"], "Which file.", "{schema}");
    assert!(properties.get("path").is_none(), "{schema}");
    let done = client
        .call_done("c3", "v2.cat", json!({"path": "b.txt"}))
        .await;
    assert_eq!(
        done["status"], "ERROR",
        "the old name is not accepted: {done}"
    );
    assert_eq!(done["result"]["code"], "INVALID_PARAMS", "{done}");
    // The unprefixed name is nobody's.
    client.call("c4", "read", json!({"path": "a.txt"})).await;
    let err = client.expect_error().await;
    assert_eq!(err["payload"]["code"], "TOOL_NOT_FOUND", "{err}");
    let done = client.expect_done("c4").await;
    assert_eq!(done["result"]["code"], "TOOL_NOT_FOUND", "{done}");
    client.close().await;
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounted_tools_are_listed_and_called_by_their_prefixed_names_over_mcp() {
    let (handle, addr, _) = start(composed()).await;
    let tools = mcp_list(addr).await;
    assert_eq!(
        names(&tools),
        ["files_read", "files_write", "v2.cat", "status"]
    );
    let tags = |i: usize| tools[i]["_meta"]["haip/tags"].clone();
    assert_eq!(tags(0), json!(["read"]));
    assert_eq!(tags(1), json!(["admin", "write"]), "sorted");
    assert_eq!(tags(2), json!(["read"]), "an edit keeps the tags");
    assert_eq!(tools[2]["description"], "Print a file");
    assert!(
        tools[2]["inputSchema"]["properties"].get("file").is_some(),
        "{}",
        tools[2]
    );
    let response = mcp_call(addr, "files_write", json!({"path": "a", "text": "hello"})).await;
    assert_eq!(
        response["result"]["structuredContent"],
        json!({"bytes": 6}),
        "{response}"
    );
    let response = mcp_call(addr, "v2.cat", json!({"file": "c.txt"})).await;
    assert_eq!(
        response["result"]["structuredContent"],
        json!({"text": "contents of c.txt"}),
        "{response}"
    );
    // The bare name is not served; the error names the mounted one.
    let response = mcp_call(addr, "write", json!({"path": "a", "text": "b"})).await;
    assert_eq!(
        response["error"]["message"], "Tool write not found; did you mean \"files_write\"?",
        "{response}"
    );
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tag_filters_decide_what_haip_and_mcp_clients_see_and_call() {
    let (handle, addr, url) = start(
        composed()
            .builtin_tools()
            .only_tags(["read", "public"])
            .exclude_tags(["admin"]),
    )
    .await;
    let expected = ["files_read", "v2.cat", "status"];
    let mut client = Client::connect(&url).await;
    let listed: Vec<String> = haip_list(&mut client)
        .await
        .into_iter()
        .map(|t| t.0)
        .collect();
    assert_eq!(listed, expected, "no built-ins (untagged), no admin tool");
    assert_eq!(names(&mcp_list(addr).await), expected);
    // Left out means not served at all.
    client
        .call("c1", "files_write", json!({"path": "a", "text": "b"}))
        .await;
    assert_eq!(
        client.expect_error().await["payload"]["code"],
        "TOOL_NOT_FOUND"
    );
    client.expect_done("c1").await;
    let response = mcp_call(addr, "echo", json!({"message": "hi"})).await;
    assert!(response.get("error").is_some(), "{response}");
    let done = client.call_done("c2", "status", json!({})).await;
    assert_eq!(done["result"], json!({"up": true}), "{done}");
    client.close().await;
    handle.shutdown().await;
}

/// The names `annotated_tools()` serves from this file (the binary may link
/// other crates' tools too).
async fn annotated_names(builder: ServerBuilder) -> Vec<String> {
    let (handle, _, _) = start(builder.annotated_tools()).await;
    let mine = [
        "read",
        "write",
        "status",
        "files_read",
        "files_write",
        "v2.cat",
        "mine_read",
    ];
    let names = handle
        .tools()
        .iter()
        .map(|t| t.name().to_owned())
        .filter(|n| mine.contains(&n.as_str()))
        .collect();
    handle.shutdown().await;
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotated_tools_leave_out_the_tools_given_explicitly() {
    // Linked in, nothing else said: each under its own name.
    assert_eq!(
        annotated_names(builder()).await,
        ["read", "write", "status"]
    );
    // Mounted (and edited): only where mounted.
    assert_eq!(
        annotated_names(composed()).await,
        ["files_read", "files_write", "v2.cat", "status"]
    );
    // Only `read` mounted, renamed: `write` still served as linked.
    assert_eq!(
        annotated_names(builder().mount_with(
            Mount::new("mine", [files::read::tool()]).edit("read", |e| e.description("Mine")),
        ))
        .await,
        ["write", "status", "mine_read"]
    );
    // Given with `.tool()`: once, not a clash with itself.
    assert_eq!(
        annotated_names(builder().tool(status::tool())).await,
        ["read", "write", "status"]
    );
}

#[test]
fn clashes_after_prefixing_and_bad_separators_fail_build() {
    let clash = builder()
        .tool(
            files::read::tool()
                .edit()
                .name("files_write")
                .build()
                .expect("a valid edit"),
        )
        .mount("files", files::tools())
        .build()
        .unwrap_err();
    let Error::DuplicateTool {
        name,
        first,
        second,
    } = &clash
    else {
        panic!("expected DuplicateTool, got {clash}");
    };
    assert_eq!(name, "files_write");
    assert_eq!(first, "`files_write` added with .tool()");
    assert!(
        second.starts_with("`write` mounted under `files` (#[haip_tool] at ")
            && second.contains("compose.rs:"),
        "{second}"
    );
    let bad = builder()
        .mount_separator('/')
        .mount("files", files::tools())
        .build()
        .unwrap_err();
    assert!(
        bad.to_string()
            .starts_with("invalid setting `mount_separator`: '/' cannot join a prefix"),
        "{bad}"
    );
    let bad = builder()
        .mount("files", files::tools())
        .only_tags(["read only"])
        .build()
        .unwrap_err();
    assert!(
        bad.to_string()
            .starts_with("invalid setting `only_tags`: \"read only\" is not a tag"),
        "{bad}"
    );
}

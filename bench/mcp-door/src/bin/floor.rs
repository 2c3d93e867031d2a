//! The floor of the MCP door: the least an MCP Streamable HTTP server must do
//! to answer one `tools/call` of `echo` per POST. Bare hyper 1 (HTTP/1.1,
//! keep-alive) and serde_json: the body is parsed, nothing else is checked.
//!
//! ```text
//! floor            # on HAIP_ADDR (default 127.0.0.1:8080), POST on any path
//! ```
//!
//! - `initialize` → the result, with an `Mcp-Session-Id` header (2025-11-25);
//! - a notification (no `id`) → `202 Accepted`, no body;
//! - `tools/call` → the `CallToolResult` haip's built-in `echo` gives: the
//!   value `{"echoed": message}` as text in `content` and as
//!   `structuredContent`, `isError: false`, and `resultType: "complete"`
//!   when the request carries 2026-07-28's `_meta` protocol version;
//! - anything else → a JSON-RPC "method not found" error.
//!
//! Every answer is `application/json` with a `Content-Length`.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// The `_meta` key of a 2026-07-28 request's protocol version.
const VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

static SESSIONS: AtomicU64 = AtomicU64::new(0);

/// The allocator of haip's examples, embed_bench among them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("HAIP_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service_fn(answer))
                .await;
        });
    }
}

async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return Ok(status(StatusCode::BAD_REQUEST)),
    };
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        return Ok(json_response(
            json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}),
        ));
    };
    let Some(id) = message.get("id").cloned() else {
        // A notification (`notifications/initialized` and the like).
        return Ok(status(StatusCode::ACCEPTED));
    };
    let params = message.get("params");
    let response = match message.get("method").and_then(Value::as_str) {
        Some("tools/call") => {
            let message = params
                .and_then(|p| p.get("arguments"))
                .and_then(|a| a.get("message"))
                .cloned()
                .unwrap_or(Value::Null);
            let stateless = params
                .and_then(|p| p.get("_meta"))
                .and_then(|m| m.get(VERSION_META))
                .is_some();
            return Ok(json_body(echo_result(&id, message, stateless)));
        }
        Some("initialize") => {
            let version = params
                .and_then(|p| p.get("protocolVersion"))
                .cloned()
                .unwrap_or_else(|| json!("2025-11-25"));
            let result = json!({
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "floor", "version": "0.1.0"},
            });
            let mut response = json_response(json!({"jsonrpc": "2.0", "id": id, "result": result}));
            let session = format!("floor-{}", SESSIONS.fetch_add(1, Ordering::Relaxed));
            if let Ok(value) = HeaderValue::from_str(&session) {
                response.headers_mut().insert("mcp-session-id", value);
            }
            return Ok(response);
        }
        _ => json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": -32601, "message": "Method not found"},
        }),
    };
    Ok(json_response(response))
}

/// The answer to a `tools/call` of `echo`, byte for byte the one haip gives:
/// its fields in the order of MCP's `CallToolResult` (a `serde_json::Value`
/// would sort them), `resultType` only for 2026-07-28.
fn echo_result(id: &Value, message: Value, stateless: bool) -> String {
    let value = json!({ "echoed": message }).to_string();
    let text = Value::String(value.clone()).to_string();
    let result_type = if stateless {
        r#""resultType":"complete","#
    } else {
        ""
    };
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{{result_type}"content":[{{"type":"text","text":{text}}}],"structuredContent":{value},"isError":false}}}}"#
    )
}

fn json_response(value: Value) -> Response<Full<Bytes>> {
    json_body(value.to_string())
}

fn json_body(body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = code;
    response
}

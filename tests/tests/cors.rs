//! CORS for browser clients: no cross-origin access unless configured;
//! configured origins get pre-flight and response headers; WebSocket upgrades
//! from other origins are refused when a list is set.

use crate::support;

use support::{builder, http_request_with, start};

// These tests build haip with the `mcp` feature, so the `/mcp` endpoint's
// Streamable HTTP method and headers are allowed beside HAIP's.
const PREFLIGHT_METHODS: &str = "GET, POST, DELETE, OPTIONS";
const PREFLIGHT_HEADERS: &str = "Authorization, Content-Type, Cache-Control, Accept, X-HAIP-Message, X-HAIP-Binary, X-HAIP-Session, Mcp-Session-Id, Mcp-Protocol-Version, Last-Event-ID";
const EXPOSED_HEADERS: &str = "X-HAIP-Session, Mcp-Session-Id";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_origin_is_allowed_by_default() {
    let (handle, _url) = start(builder()).await;
    let addr = handle.local_addr();
    let origin = [("Origin", "https://app.example")];
    let response = http_request_with(addr, "OPTIONS", "/haip/message", &origin, b"").await;
    assert_eq!(response.status, 204);
    assert_eq!(response.header("access-control-allow-origin"), None);
    let response = http_request_with(addr, "GET", "/health", &origin, b"").await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("access-control-allow-origin"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_origins_get_preflight_and_response_headers() {
    let (handle, _url) = start(builder().cors_allowed_origins(["https://app.example"])).await;
    let addr = handle.local_addr();
    let allowed = [("Origin", "https://app.example")];
    let response = http_request_with(addr, "OPTIONS", "/haip/sse", &allowed, b"").await;
    assert_eq!(response.status, 204, "{response:?}");
    assert_eq!(
        response.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    assert_eq!(
        response.header("access-control-allow-methods"),
        Some(PREFLIGHT_METHODS)
    );
    assert_eq!(
        response.header("access-control-allow-headers"),
        Some(PREFLIGHT_HEADERS)
    );
    let response = http_request_with(addr, "GET", "/stats", &allowed, b"").await;
    assert_eq!(
        response.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    assert_eq!(
        response.header("access-control-expose-headers"),
        Some(EXPOSED_HEADERS)
    );
    let other = [("Origin", "https://evil.example")];
    let response = http_request_with(addr, "GET", "/stats", &other, b"").await;
    assert_eq!(response.header("access-control-allow-origin"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_allows_any_origin() {
    let (handle, _url) = start(builder().cors_allowed_origins(["*"])).await;
    let response = http_request_with(
        handle.local_addr(),
        "GET",
        "/health",
        &[("Origin", "https://any.example")],
        b"",
    )
    .await;
    assert_eq!(
        response.header("access-control-allow-origin"),
        Some("https://any.example")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_upgrades_check_the_origin_when_a_list_is_set() {
    let (handle, _url) = start(builder().cors_allowed_origins(["https://app.example"])).await;
    let upgrade = |origin: &'static str| {
        [
            ("Origin", origin),
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ]
    };
    let refused = http_request_with(
        handle.local_addr(),
        "GET",
        "/haip",
        &upgrade("https://evil.example"),
        b"",
    )
    .await;
    assert_eq!(refused.status, 403);
    assert_eq!(refused.json()["code"], "ORIGIN_NOT_ALLOWED");
    // A listed origin upgrades (the tiny HTTP client stops at the 101 headers).
    let addr = handle.local_addr();
    let url = format!("ws://{addr}/haip");
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(url)
            .unwrap();
    request
        .headers_mut()
        .insert("origin", "https://app.example".parse().unwrap());
    let (client, _) = support::Client::connect_with(request).await;
    assert_eq!(client.hai["type"], "HAI");
}

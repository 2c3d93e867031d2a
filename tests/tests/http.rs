//! The HTTP side endpoints (docs/protocol.md §16): `/health` and `/stats` with live
//! counters, and CORS preflight and headers.

use crate::support;

use serde_json::json;
use support::{
    Client, demo_builder, executions, gated_tool, get_json, http_get, http_request_with, keys,
    start, stats_until,
};

// ----- §16 HTTP side endpoints -------------------------------------------------------------

fn is_iso8601_millis(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 24
        && b.iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b'-',
            10 => c == b'T',
            13 | 16 => c == b':',
            19 => c == b'.',
            23 => c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_stats_report_live_counters() {
    let (gated, mut gate) = gated_tool("gated");
    let (handle, url) = start(demo_builder().tool(gated)).await;
    let addr = handle.local_addr();

    let response = http_get(addr, "/health").await;
    assert_eq!(response.status, 200);
    let health = response.json();
    assert_eq!(
        keys(&health),
        [
            "activeConnections",
            "errors",
            "instance",
            "status",
            "timestamp",
            "totalConnections",
            "uptime",
            "version",
            "warnings"
        ]
    );
    assert_eq!(health["status"], "ok");
    assert_eq!(health["version"], "1.1.2");
    // Named by HAIP_INSTANCE_ID, else generated.
    let instance = health["instance"].as_str().unwrap_or_default();
    assert!(
        instance.starts_with("haip-") || std::env::var("HAIP_INSTANCE_ID").is_ok(),
        "{health}"
    );
    assert!(health["uptime"].is_u64(), "{health}");
    assert!(
        is_iso8601_millis(health["timestamp"].as_str().unwrap_or_default()),
        "{health}"
    );
    assert_eq!(
        (&health["activeConnections"], &health["totalConnections"]),
        (&json!(0), &json!(0))
    );
    assert_eq!(
        (&health["errors"], &health["warnings"]),
        (&json!(0), &json!(0))
    );

    let stats = get_json(addr, "/stats").await;
    assert_eq!(executions(&stats), [0, 0, 0, 0, 0]);
    assert_eq!(stats["totalMessages"], 0);
    assert_eq!(stats["averageLatency"].as_f64(), Some(0.0));
    assert_eq!(stats["errorRate"].as_f64(), Some(0.0));

    // The session counts as soon as the client sees the socket open.
    let mut client = Client::connect(&url).await;
    let stats = get_json(addr, "/stats").await;
    assert_eq!(
        (&stats["activeConnections"], &stats["totalConnections"]),
        (&json!(1), &json!(1)),
        "{stats}"
    );

    // 2 OK, 2 failed (one of them with an ERROR envelope), 1 cancelled, 1 active.
    assert_eq!(
        client
            .call_done("s1", "echo", json!({"message": "x"}))
            .await["status"],
        "OK"
    );
    assert_eq!(
        client.call_done("s2", "weather", json!({})).await["status"],
        "OK"
    );
    assert_eq!(
        client
            .call_done("s3", "add", json!({"a": 1e308, "b": 1e308}))
            .await["status"],
        "ERROR"
    );
    client.call("s4", "nope", json!({})).await;
    client.expect_error().await;
    client.expect_done("s4").await;
    client.call("s5", "gated", json!({})).await;
    gate.started().await;
    client
        .request("TOOL_CANCEL", json!({"call_id": "s5"}))
        .await;
    client.expect_update("s5").await;
    assert_eq!(client.expect_done("s5").await["status"], "CANCELLED");
    client.call("s6", "gated", json!({})).await;
    gate.started().await;
    client.send_text("{not json").await; // an ERROR, but not a message
    client.expect_error().await;

    let stats = get_json(addr, "/stats").await;
    assert_eq!(
        keys(&stats),
        [
            "activeConnections",
            "averageLatency",
            "connectionsClosed",
            "detachedSessions",
            "errorRate",
            "instance",
            "memoryUsage",
            "messagesPerSecond",
            "outboundBytes",
            "replayBytes",
            "toolExecutions",
            "totalConnections",
            "totalMessages",
            "uptime"
        ],
        "{stats}"
    );
    assert_eq!(
        stats["connectionsClosed"],
        json!({"tooSlow": 0, "idle": 0, "bodyTimeout": 0, "perPeerCap": 0}),
        "{stats}"
    );
    assert!(stats["outboundBytes"].is_u64(), "{stats}");
    assert_eq!(executions(&stats), [6, 2, 2, 1, 1], "{stats}");
    assert_eq!(
        keys(&stats["toolExecutions"]),
        ["active", "cancelled", "failed", "successful", "total"]
    );
    // Six calls and one cancel passed step 3; the malformed text did not.
    assert_eq!(stats["totalMessages"], 7, "{stats}");
    let error_rate = stats["errorRate"].as_f64().unwrap();
    assert!((error_rate - 2.0 / 7.0).abs() < 1e-9, "{stats}");
    assert!(stats["averageLatency"].as_f64().unwrap() > 0.0, "{stats}");
    assert!(stats["messagesPerSecond"].as_f64().is_some(), "{stats}");
    assert!(stats["uptime"].is_u64(), "{stats}");
    assert!(stats["memoryUsage"]["rss"].as_u64().unwrap() > 0, "{stats}");
    let health = get_json(addr, "/health").await;
    assert_eq!(health["errors"], 2, "ERROR envelopes sent: {health}");

    // A second socket is counted, and uncounted once it closes.
    let other = Client::connect(&url).await;
    let stats = get_json(addr, "/stats").await;
    assert_eq!(
        (&stats["activeConnections"], &stats["totalConnections"]),
        (&json!(2), &json!(2))
    );
    other.close().await;
    stats_until(addr, "activeConnections back to 1", |s| {
        s["activeConnections"] == 1
    })
    .await;

    gate.open(1);
    assert_eq!(client.expect_done("s6").await["status"], "OK");
    let stats = get_json(addr, "/stats").await;
    assert_eq!(executions(&stats), [6, 3, 2, 1, 0], "{stats}");

    // Unknown routes are 404 JSON.
    let response = http_get(addr, "/nope").await;
    assert_eq!(response.status, 404);
    assert_eq!(
        response.json(),
        json!({"error": "Not found", "code": "NOT_FOUND"})
    );
}

// ----- §15.5 WebSocket upgrades only on WebSocket paths -----------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_upgrades_elsewhere_are_404_and_open_no_session() {
    let (handle, _url) = start(demo_builder()).await;
    let addr = handle.local_addr();
    let upgrade = [
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Version", "13"),
        // A POST without it is refused before routing (a "simple" POST).
        ("Content-Type", "application/json"),
    ];
    for (method, path) in [
        ("GET", "/haip/sse"),
        ("GET", "/haip/stream"),
        ("POST", "/haip/stream"),
        ("POST", "/haip/message"),
        ("GET", "/nope"),
    ] {
        let response = http_request_with(addr, method, path, &upgrade, b"").await;
        assert_eq!(response.status, 404, "{method} {path}: {response:?}");
        assert_eq!(
            response.json(),
            json!({"error": "Not found", "code": "NOT_FOUND"}),
            "{method} {path}"
        );
        assert_eq!(response.header("x-haip-session"), None, "{method} {path}");
    }
    let stats = get_json(addr, "/stats").await;
    assert_eq!(
        stats["totalConnections"], 0,
        "no session was opened: {stats}"
    );
    // `/health` answers 200 whatever the request (§16).
    let health = http_request_with(addr, "GET", "/health", &upgrade, b"").await;
    assert_eq!(health.status, 200, "{health:?}");
}

//! `GET /metrics` (feature `metrics`) read by a real Prometheus server:
//! Debian's `prometheus` (installed by the test support when missing) on a
//! free loopback port scrapes a server every second while the test makes
//! calls of every outcome; the series are then read back through
//! Prometheus's HTTP query API, and must count exactly what the test did.

use crate::conn;
use crate::mcp_support;
use crate::redis_support::system;
use crate::support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use haip::{Context, ToolError, haip_tool};
use serde_json::{Value, json};
use support::{Client, demo_builder, start};

/// Panics: the call ends `TOOL_DONE ERROR INTERNAL_ERROR`, counted as `panic`.
#[haip_tool]
async fn boom() -> String {
    panic!("boom (a test tool panicking on purpose)")
}

/// Outlives its timeout.
#[haip_tool(timeout = "100ms")]
async fn sleepy(ctx: Context) -> Result<String, ToolError> {
    ctx.cancelled().await;
    Err(ToolError::cancelled())
}

/// Runs until cancelled.
#[haip_tool]
async fn hold(ctx: Context) -> Result<String, ToolError> {
    ctx.progress(1.0);
    ctx.cancelled().await;
    Err(ToolError::cancelled())
}

/// A `prometheus` server scraping one target, killed when dropped.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Prometheus {
    async fn start(target: SocketAddr) -> Prometheus {
        let binary = system::Program {
            binary: "prometheus",
            package: "prometheus",
            env: "HAIP_PROMETHEUS",
        }
        .path();
        let dir = std::env::temp_dir().join(format!("haip-prometheus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: haip\n    scrape_interval: 1s\n    \
                 static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = mcp_support::free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts");
        let prometheus = Prometheus { child, addr, dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if tokio::net::TcpStream::connect(addr).await.is_ok()
                && let Ok(response) = tokio::time::timeout(
                    Duration::from_secs(2),
                    conn::http(addr, "GET", "/-/ready", &[], ""),
                )
                .await
                && response.status == 200
            {
                break;
            }
            assert!(Instant::now() < deadline, "prometheus never became ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        prometheus
    }

    /// The series of an instant query: each one's labels and value.
    async fn query(&self, query: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let path = format!("/api/v1/query?query={query}");
        let response = conn::http(self.addr, "GET", &path, &[], "").await;
        assert_eq!(response.status, 200, "{}", response.body);
        let body: Value = serde_json::from_str(&response.body).unwrap();
        assert_eq!(body["status"], "success", "{body}");
        body["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|series| {
                let labels = series["metric"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect();
                let value = series["value"][1].as_str().unwrap().parse().unwrap();
                (labels, value)
            })
            .collect()
    }

    /// Waits until `query` gives what `want` accepts (Prometheus has
    /// scraped since the calls ended); returns the series.
    async fn until(
        &self,
        query: &str,
        want: impl Fn(&[(BTreeMap<String, String>, f64)]) -> bool,
    ) -> Vec<(BTreeMap<String, String>, f64)> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let series = self.query(query).await;
            if want(&series) {
                return series;
            }
            assert!(
                Instant::now() < deadline,
                "{query} never showed what the test did: {series:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The value of the series whose labels include all of `labels`, if any.
fn value(series: &[(BTreeMap<String, String>, f64)], labels: &[(&str, &str)]) -> Option<f64> {
    series
        .iter()
        .find(|(have, _)| {
            labels
                .iter()
                .all(|(k, v)| have.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| *v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_calls_of_every_outcome() {
    let builder = demo_builder()
        .tool(boom::tool())
        .tool(sleepy::tool())
        .tool(hold::tool());
    let (handle, url) = start(builder).await;
    let prometheus = Prometheus::start(handle.local_addr()).await;

    let mut client = Client::connect(&url).await;
    for i in 0..3 {
        let done = client
            .call_done(&format!("e{i}"), "echo", json!({"message": "hi"}))
            .await;
        assert_eq!(done["status"], "OK", "{done}");
    }
    let done = client
        .call_done(
            "d",
            "calculator",
            json!({"operation": "divide", "a": 1, "b": 0}),
        )
        .await;
    assert_eq!(done["status"], "ERROR", "{done}");
    let execution_code = done["result"]["code"].as_str().unwrap().to_owned();
    // An ERROR, then the call's TOOL_DONE.
    client.call("u", "no_such_tool", json!({})).await;
    let error = client.expect_error().await;
    assert_eq!(error["payload"]["code"], "TOOL_NOT_FOUND", "{error}");
    let done = client.expect_done("u").await;
    assert_eq!(done["result"]["code"], "TOOL_NOT_FOUND", "{done}");
    let done = client.call_done("i", "echo", json!({"message": 5})).await;
    assert_eq!(done["result"]["code"], "INVALID_PARAMS", "{done}");
    let done = client.call_done("b", "boom", json!({})).await;
    assert_eq!(done["result"]["code"], "INTERNAL_ERROR", "{done}");
    let done = client.call_done("s", "sleepy", json!({})).await;
    assert_eq!(done["result"]["code"], "TIMEOUT", "{done}");
    client.call("h", "hold", json!({})).await;
    client.expect_update("h").await;
    client.request("TOOL_CANCEL", json!({"call_id": "h"})).await;
    let cancelling = client.expect_update("h").await;
    assert_eq!(cancelling["status"], "CANCELLING", "{cancelling}");
    let done = client.expect_done("h").await;
    assert_eq!(done["status"], "CANCELLED", "{done}");

    let finished = prometheus
        .until("haip_tool_calls_finished_total", |s| {
            value(s, &[("tool", "hold"), ("outcome", "cancelled")]) == Some(1.0)
        })
        .await;
    let expect = [
        (("echo", "ok", ""), 3.0),
        (("calculator", "error", execution_code.as_str()), 1.0),
        (("unknown", "error", "TOOL_NOT_FOUND"), 1.0),
        (("echo", "error", "INVALID_PARAMS"), 1.0),
        (("boom", "panic", ""), 1.0),
        (("sleepy", "timeout", ""), 1.0),
        (("hold", "cancelled", ""), 1.0),
    ];
    for ((tool, outcome, code), count) in expect {
        let labels = [("tool", tool), ("outcome", outcome), ("code", code)];
        let found = finished.iter().find(|(have, _)| {
            labels
                .iter()
                .all(|(k, v)| have.get(*k).map_or(v.is_empty(), |h| h == v))
        });
        assert_eq!(
            found.map(|(_, v)| *v),
            Some(count),
            "{tool} {outcome} {code}: {finished:?}"
        );
    }
    // Nothing else was counted (a tool's `ok` series exists, at 0, once it
    // was called).
    let counted = finished.iter().filter(|(_, v)| *v > 0.0).count();
    assert_eq!(counted, expect.len(), "nothing else: {finished:?}");

    let started = prometheus.query("haip_tool_calls_started_total").await;
    assert_eq!(
        value(&started, &[("tool", "echo")]),
        Some(4.0),
        "{started:?}"
    );
    assert_eq!(
        value(&started, &[("tool", "unknown")]),
        Some(1.0),
        "{started:?}"
    );
    // Every call that ended has its duration in the histogram.
    let durations = prometheus
        .query("haip_tool_call_duration_seconds_count")
        .await;
    assert_eq!(
        value(&durations, &[("tool", "echo")]),
        Some(4.0),
        "{durations:?}"
    );
    assert_eq!(
        value(&durations, &[("tool", "sleepy")]),
        Some(1.0),
        "{durations:?}"
    );
    let slow = prometheus
        .query("haip_tool_call_duration_seconds_sum")
        .await;
    let sleepy = value(&slow, &[("tool", "sleepy")]).unwrap();
    assert!(
        sleepy >= 0.1,
        "the timed-out call took its timeout: {sleepy}"
    );
    // The connection is counted on its transport, and nothing is in flight.
    let connections = prometheus.query("haip_connections").await;
    assert_eq!(
        value(&connections, &[("transport", "websocket")]),
        Some(1.0),
        "{connections:?}"
    );
    let in_flight = prometheus.query("haip_calls_in_flight").await;
    assert_eq!(value(&in_flight, &[]), Some(0.0), "{in_flight:?}");
    let bytes = prometheus.query("haip_bytes_total").await;
    assert!(
        value(&bytes, &[("direction", "in")]).unwrap() > 0.0,
        "{bytes:?}"
    );
    assert!(
        value(&bytes, &[("direction", "out")]).unwrap() > 0.0,
        "{bytes:?}"
    );
    client.close().await;
    handle.shutdown().await;
}

/// `/metrics` follows the rule of `/stats`: a token when authentication is on.
#[tokio::test]
async fn metrics_need_a_token_when_authentication_is_on() {
    let (handle, _) = start(demo_builder().jwt_hs256("a-test-secret-of-enough-length!!")).await;
    let response = conn::http(handle.local_addr(), "GET", "/metrics", &[], "").await;
    assert_eq!(response.status, 401, "{}", response.body);
    handle.shutdown().await;
    let (handle, _) = start(demo_builder()).await;
    let response = conn::http(handle.local_addr(), "GET", "/metrics", &[], "").await;
    assert_eq!(response.status, 200);
    assert!(
        response.body.contains("\nhaip_calls_in_flight 0\n"),
        "{}",
        response.body
    );
    assert!(response.body.ends_with("# EOF\n"), "{}", response.body);
    handle.shutdown().await;
}

/// `metrics_addr`: `/metrics` on a port of its own, without a token (an
/// internal port), and nothing else there; the server's port answers `404`.
#[tokio::test]
async fn metrics_can_have_a_port_of_their_own() {
    let builder = demo_builder()
        .jwt_hs256("a-test-secret-of-enough-length!!")
        .metrics_addr("127.0.0.1:0");
    let (handle, _) = start(builder).await;
    let own = handle.metrics_addr().expect("a metrics port");
    assert_ne!(own, handle.local_addr());
    let response = conn::http(own, "GET", "/metrics", &[], "").await;
    assert_eq!(response.status, 200, "{}", response.body);
    assert!(
        response.body.contains("\nhaip_calls_in_flight 0\n"),
        "{}",
        response.body
    );
    for path in ["/stats", "/haip", "/metrics/x"] {
        let response = conn::http(own, "GET", path, &[], "").await;
        assert_eq!(response.status, 404, "{path}: {}", response.body);
    }
    let response = conn::http(handle.local_addr(), "GET", "/metrics", &[], "").await;
    assert_eq!(response.status, 404, "{}", response.body);
    handle.shutdown().await;
    let (handle, _) = start(demo_builder()).await;
    assert_eq!(handle.metrics_addr(), None);
    handle.shutdown().await;
}

/// The access log: one JSON line per finished call on stderr (the
/// quickstart with `HAIP_LOG_FORMAT=json`, the `haip::access` target on),
/// saying who called what and how it ended, never the params or result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_has_a_json_line_per_call() {
    use std::io::BufRead;
    let port = mcp_support::free_port();
    let mut child = Command::new(mcp_support::example_binary("quickstart"))
        .env("HAIP_ADDR", format!("127.0.0.1:{port}"))
        .env("HAIP_LOG", "warn,haip::access=info")
        .env("HAIP_LOG_FORMAT", "json")
        .env_remove("HAIP_JWT_SECRET")
        .env_remove("HAIP_REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the quickstart starts");
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines_tx.send(line);
        }
    });
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "the quickstart never listened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut client = Client::connect(&format!("ws://{addr}/haip")).await;
    let secret = "a secret the log must not show";
    let done = client
        .call_done("c1", "echo", json!({ "message": secret }))
        .await;
    assert_eq!(done["status"], "OK");
    let line = support::within("the access log line", async {
        loop {
            let line = lines.recv().await.expect("the quickstart's stderr is open");
            if line.contains("haip::access") {
                return line;
            }
        }
    })
    .await;
    assert!(!line.contains(secret), "params are never logged: {line}");
    let entry: Value = serde_json::from_str(&line).expect("one JSON object per line");
    let fields = &entry["fields"];
    assert_eq!(entry["target"], "haip::access", "{entry}");
    assert_eq!(fields["tool"], "echo", "{entry}");
    assert_eq!(fields["call_id"], "c1", "{entry}");
    assert_eq!(fields["outcome"], "ok", "{entry}");
    assert_eq!(fields["over"], "haip", "{entry}");
    assert!(fields["duration_ms"].as_f64().unwrap() >= 0.0, "{entry}");
    assert!(fields["bytes"].as_u64().unwrap() > 0, "{entry}");
    client.close().await;
    let _ = child.kill();
    let _ = child.wait();
}

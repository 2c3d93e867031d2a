//! The `haip` command line, end to end against a server on 127.0.0.1:0.
#![cfg(feature = "cli")]

use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

async fn server() -> haip::ServerHandle {
    haip::Server::builder()
        .addr("127.0.0.1:0")
        .heartbeat_interval(Duration::ZERO)
        .builtin_tools()
        .build()
        .unwrap()
        .start()
        .await
        .unwrap()
}

/// Runs `haip <args>` off the async runtime, with a timeout.
async fn haip(args: Vec<String>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        Command::cargo_bin("haip")
            .unwrap()
            .args(&args)
            .timeout(Duration::from_secs(30))
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_prints_the_result_and_exits_zero() {
    let handle = server().await;
    let url = format!("ws://{}/haip", handle.local_addr());
    let out = haip(args(&["call", &url, "add", "a=5", "b=3", "--json"])).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        printed,
        serde_json::json!({"status": "OK", "result": {"result": 8}})
    );
    let out = haip(args(&[
        "call",
        &url,
        "echo",
        "--params",
        r#"{"message":"hi"}"#,
    ]))
    .await;
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"echoed\": \"hi\""));
    let out = haip(args(&["tools", &url])).await;
    assert!(String::from_utf8_lossy(&out.stdout).contains("weather"));
    let out = haip(args(&["health", &url, "--json"])).await;
    let health: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(health["status"], "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_params_exit_one_with_the_violations() {
    let handle = server().await;
    let url = format!("ws://{}/haip", handle.local_addr());
    let out = haip(args(&["call", &url, "add", "a=five"])).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("INVALID_PARAMS"), "{stderr}");
    assert!(
        stderr.contains("/a") && stderr.contains("/b"),
        "every violation is listed: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_urls_and_usage_errors_exit_two() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let out = haip(args(&["call", &format!("ws://{addr}/haip"), "echo"])).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect"));
    let out = haip(args(&["call"])).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "missing arguments are usage errors"
    );
    let out = haip(args(&[
        "bench",
        "ws://10.0.0.1:9/haip",
        "--tool",
        "echo",
        "--calls",
        "1",
    ]))
    .await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "no load leaves loopback without --allow-remote"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_bench_reports_zero_errors() {
    let handle = server().await;
    let url = format!("ws://{}/haip", handle.local_addr());
    let pid = std::process::id().to_string();
    let out = haip(args(&[
        "bench",
        &url,
        "--tool",
        "echo",
        "--params",
        r#"{"message":"x"}"#,
        "--connections",
        "2",
        "--in-flight",
        "4",
        "--calls",
        "400",
        "--server-pid",
        &pid,
        "--json",
    ]))
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["calls"], 400);
    assert_eq!(report["errors"], 0);
    assert!(report["calls_per_second"].as_f64().unwrap() > 0.0);
    assert!(
        report["latency_ms"]["p99"].as_f64().unwrap()
            >= report["latency_ms"]["p50"].as_f64().unwrap()
    );
    assert!(report["server_cpu_us_per_call"].is_number());
    assert!(report["server_peak_rss_bytes"].as_u64().unwrap() > 0);
}

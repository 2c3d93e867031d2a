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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lint_is_clean_on_the_quickstart_tools_and_names_what_providers_refuse() {
    let handle = server().await;
    let url = format!("ws://{}/haip", handle.local_addr());
    let out = haip(args(&["lint", &url])).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // A tool no strict profile can take, with a name OpenAI refuses.
    let anything = haip::Tool::builder("files.read")
        .input_schema(serde_json::json!({
            "type": "object",
            "properties": {"options": {"description": "Anything at all"}}
        }))
        .handler(|_, _| async { Ok(Value::Null) })
        .build()
        .unwrap();
    handle.register_tool(anything).unwrap();
    let out = haip(args(&["lint", &url])).await;
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("files.read  openai-strict  /properties/options  (not served)"),
        "{stdout}"
    );
    assert!(stdout.contains("fix: give it a concrete type"), "{stdout}");
    assert!(stdout.contains("files.read  every profile  /"), "{stdout}");
    assert!(stdout.contains("^[a-zA-Z0-9_-]{1,64}$"), "{stdout}");
    let out = haip(args(&["lint", &url, "--json"])).await;
    let findings: Value = serde_json::from_slice(&out.stdout).unwrap();
    let profiles: Vec<&str> = findings
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["profile"].as_str())
        .collect();
    assert!(profiles.contains(&"portable"), "{findings}");
    assert!(profiles.contains(&"openai-strict"), "{findings}");
    let out = haip(args(&["schema", &url, "echo", "--profile", "nope"])).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("openai-strict"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destructive_tools_are_called_only_with_yes_when_nobody_can_be_asked() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let handle = server().await;
    let url = format!("ws://{}/haip", handle.local_addr());
    // Counts its calls: "not called" is read here, not guessed from output.
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let wipe = haip::Tool::builder("wipe")
        .title("Wipe everything")
        .annotations(haip::ToolAnnotations::new().destructive(true))
        .handler(move |_, _| {
            let counted = Arc::clone(&counted);
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(serde_json::json!({"wiped": true}))
            }
        })
        .build()
        .unwrap();
    handle.register_tool(wipe).unwrap();

    // stdin is not a terminal here: nobody to ask, so it refuses.
    let out = haip(args(&["call", &url, "wipe"])).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("pass --yes"), "{stderr}");
    assert!(stderr.contains("Wipe everything"), "the title: {stderr}");
    assert!(out.stdout.is_empty());

    let out = haip(args(&["call", &url, "wipe", "--yes", "--json"])).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        printed,
        serde_json::json!({"status": "OK", "result": {"wiped": true}})
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "called once: with --yes, and not when refused"
    );

    // Read-only, where destructiveHint means nothing (MCP): called without
    // a question, as tools that declare nothing are (above).
    let keep = haip::Tool::builder("keep")
        .annotations(
            haip::ToolAnnotations::new()
                .read_only(true)
                .destructive(true),
        )
        .handler(|_, _| async { Ok(serde_json::json!("kept")) })
        .build()
        .unwrap();
    handle.register_tool(keep).unwrap();
    let out = haip(args(&["call", &url, "keep", "--json"])).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

//! The `haip` command line, end to end against a server on 127.0.0.1:0.
#![cfg(feature = "cli")]

use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

async fn server() -> haip::ServerHandle {
    haip::Server::builder()
        .addr("127.0.0.1:0")
        .limits(haip::Limits {
            heartbeat_interval: Duration::ZERO,
            ..haip::Limits::default()
        })
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

/// Runs `haip <args>` with `stdin` piped in (not a terminal).
async fn haip_typing(args: Vec<String>, stdin: &str) -> std::process::Output {
    let stdin = stdin.to_owned();
    tokio::task::spawn_blocking(move || {
        Command::cargo_bin("haip")
            .unwrap()
            .args(&args)
            .write_stdin(stdin)
            .env("NO_COLOR", "1")
            .timeout(Duration::from_secs(30))
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

/// A tool asking `ctx.confirm`, and the result it gives for each answer.
fn confirming() -> haip::Tool {
    haip::Tool::builder("wipe_cache")
        .description("Wipe the cache, once confirmed.")
        .handler(|_, ctx: haip::Context| async move {
            Ok(serde_json::json!({"wiped": ctx.confirm("Wipe the cache?").await?}))
        })
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmation_defaults_to_no() {
    let handle = server().await;
    handle.register_tool(confirming()).unwrap();
    let url = format!("ws://{}/haip", handle.local_addr());
    let call = args(&["call", &url, "wipe_cache", "--json"]);
    // Enter: the default, no.
    let out = haip_typing(call.clone(), "\n").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("? Wipe the cache?\n"), "{stderr}");
    assert!(
        stderr.contains("  confirm \"Confirm\" (y/n; default no): "),
        "{stderr}"
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["result"], serde_json::json!({"wiped": false}));
    // `y`: yes.
    let out = haip_typing(call.clone(), "y\n").await;
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["result"], serde_json::json!({"wiped": true}));
    // The input ended: declined, which is no.
    let out = haip_typing(call, "").await;
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["result"], serde_json::json!({"wiped": false}));
    handle.shutdown().await;
}

/// What `plan_trip` asks: declared out of alphabetical order, with an
/// optional field between required ones.
#[haip::data]
struct Trip {
    /// Where to.
    destination: String,
    /// A note for the driver.
    note: Option<String>,
    /// How many nights.
    nights: u8,
    /// Arriving when (HH:MM).
    arrival: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_asks_required_fields_in_declared_order() {
    let handle = server().await;
    let trip = haip::Tool::builder("plan_trip")
        .description("Plan a trip.")
        .handler(|_, ctx: haip::Context| async move {
            match ctx.ask::<Trip>("Where, and for how long?").await? {
                haip::Answer::Accepted(trip) => Ok(serde_json::json!({
                    "destination": trip.destination,
                    "nights": trip.nights,
                    "arrival": trip.arrival,
                    "note": trip.note,
                })),
                _ => Ok(Value::Null),
            }
        })
        .build()
        .unwrap();
    handle.register_tool(trip).unwrap();
    let url = format!("ws://{}/haip", handle.local_addr());
    let out = haip_typing(
        args(&["call", &url, "plan_trip", "--json"]),
        "Lisbon\n3\n18:30\n\n",
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        printed["result"],
        serde_json::json!({"destination": "Lisbon", "nights": 3, "arrival": "18:30", "note": null})
    );
    let at = |prompt: &str| {
        stderr
            .find(prompt)
            .unwrap_or_else(|| panic!("{prompt:?} in:\n{stderr}"))
    };
    let order = [
        at("  destination (text; required): "),
        at("  nights (integer, 0 to 255; required): "),
        at("  arrival (text; required): "),
        at("  note (text; optional): "),
    ];
    assert!(order.is_sorted(), "asked out of order:\n{stderr}");
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_are_shown_as_their_type_and_size() {
    let handle = server().await;
    let chart = haip::Tool::builder("chart")
        .description("A chart.")
        .handler(|_, _| async move {
            let png = vec![0x89u8; 2048];
            let content = vec![
                haip::Content::text("sales"),
                haip::Content::image(&png, "image/png"),
            ];
            Ok(serde_json::json!({"content": content}))
        })
        .build()
        .unwrap();
    handle.register_tool(chart).unwrap();
    let url = format!("ws://{}/haip", handle.local_addr());
    let out = haip(args(&["call", &url, "chart"])).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let printed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        printed,
        serde_json::json!({"content": [
            {"type": "text", "text": "sales"},
            {"type": "image", "data": "<image/png, 2.0 KiB>", "mimeType": "image/png"}
        ]})
    );
    // `--json` keeps the data, for scripts.
    let out = haip(args(&["call", &url, "chart", "--json"])).await;
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        printed["result"]["content"][1]["data"]
            .as_str()
            .map(str::len),
        Some(2732)
    );
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lint_warns_about_missing_descriptions_and_still_exits_zero() {
    let handle = server().await;
    let bare = haip::Tool::builder("bare")
        .input_schema(serde_json::json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": false
        }))
        .handler(|_, _| async { Ok(Value::Null) })
        .build()
        .unwrap();
    handle.register_tool(bare).unwrap();
    let url = format!("ws://{}/haip", handle.local_addr());
    let out = haip(args(&["lint", &url])).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("bare  every profile  /  (warning)\n    the tool has no description"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "bare  every profile  /properties/path  (warning)\n    parameter `path` has no description"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("warnings above)"), "{stdout}");
    let out = haip(args(&["lint", &url, "--json"])).await;
    let findings: Value = serde_json::from_slice(&out.stdout).unwrap();
    let bare: Vec<&Value> = findings
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["tool"] == "bare")
        .collect();
    assert_eq!(bare.len(), 2, "{findings}");
    assert!(
        bare.iter().all(|f| f["severity"] == "warning"),
        "{findings}"
    );
    handle.shutdown().await;
}

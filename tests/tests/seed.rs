//! The quickstart keeps the contracts of the HAIP server documentation its
//! tools come from ("HAIP Server – Tools"): each tool accepts what that page's
//! input schema accepts and answers in the shape of its output schema. One test
//! per tool sends the page's own example params (for `calculator`,
//! `process_file` and `create_user`, which the page defines without an example
//! call, params its schemas accept) over a real WebSocket.
//!
//! The last test runs the real quickstart binary with
//! `HAIP_TOOL_SCHEMA_LEGACY=1`.

use crate::mcp_support;
use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};
use support::{Client, QUICKSTART_TOOLS, demo_builder, start, within};

/// Checks that `value` is an object with exactly these keys, each holding a
/// JSON value of the named type (`"string"`, `"number"`, `"boolean"`).
fn assert_shape(value: &Value, shape: &[(&str, &str)]) {
    let object = value
        .as_object()
        .unwrap_or_else(|| panic!("result is not an object: {value}"));
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut expected: Vec<&str> = shape.iter().map(|(k, _)| *k).collect();
    expected.sort_unstable();
    assert_eq!(keys, expected, "result keys: {value}");
    for (key, ty) in shape {
        let field = &object[*key];
        let ok = match *ty {
            "string" => field.is_string(),
            "number" => field.is_number(),
            "boolean" => field.is_boolean(),
            other => panic!("unknown type {other}"),
        };
        assert!(ok, "`{key}` should be a {ty}: {value}");
    }
}

/// Connects to a fresh quickstart server.
async fn quickstart() -> (haip::ServerHandle, Client) {
    let (handle, url) = start(demo_builder()).await;
    let client = Client::connect(&url).await;
    (handle, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_answers_the_seed_example() {
    let (_handle, mut client) = quickstart().await;
    let done = client
        .call_done("echo-1", "echo", json!({"message": "Hello, HAIP Server!"}))
        .await;
    assert_eq!(
        done,
        json!({"call_id": "echo-1", "status": "OK", "result": {"echoed": "Hello, HAIP Server!"}})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_answers_the_seed_example() {
    let (_handle, mut client) = quickstart().await;
    let done = client
        .call_done("add-1", "add", json!({"a": 5, "b": 3}))
        .await;
    assert_eq!(
        done,
        json!({"call_id": "add-1", "status": "OK", "result": {"result": 8}})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weather_answers_the_seed_example() {
    let (_handle, mut client) = quickstart().await;
    let done = client
        .call_done("weather-1", "weather", json!({"location": "London"}))
        .await;
    assert_eq!(
        done["result"],
        json!({"temperature": "22°C", "condition": "Sunny", "location": "London"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calculator_returns_result_and_operation() {
    let (_handle, mut client) = quickstart().await;
    for (op, a, b, expected) in [
        ("add", 5, 3, 8.0),
        ("subtract", 5, 3, 2.0),
        ("multiply", 6, 7, 42.0),
        ("divide", 9, 2, 4.5),
    ] {
        let done = client
            .call_done(op, "calculator", json!({"operation": op, "a": a, "b": b}))
            .await;
        assert_eq!(done["status"], "OK", "{done}");
        assert_shape(
            &done["result"],
            &[("result", "number"), ("operation", "string")],
        );
        assert_eq!(done["result"]["result"].as_f64(), Some(expected), "{done}");
        assert_eq!(done["result"]["operation"], op, "{done}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_file_accepts_any_operation_and_reports_progress() {
    let (_handle, mut client) = quickstart().await;
    client
        .request("TOOL_SCHEMA", json!({"tool": "process_file"}))
        .await;
    let schema = client.recv().await;
    assert_eq!(
        schema["payload"]["inputSchema"]["properties"]["operation"]["type"], "string",
        "{schema}"
    );
    assert!(
        schema["payload"]["inputSchema"]["properties"]["operation"]
            .get("enum")
            .is_none(),
        "operation is any string, not an enum: {schema}"
    );
    for (call_id, operation) in [("p-count", "count"), ("p-read", "read"), ("p-any", "")] {
        client
            .call(
                call_id,
                "process_file",
                json!({"filename": "a.txt", "operation": operation}),
            )
            .await;
        for expected in [0, 20, 40, 60, 80, 100] {
            let update = client.expect_update(call_id).await;
            assert_eq!(update["progress"], expected, "{update}");
        }
        let done = client.expect_done(call_id).await;
        assert_eq!(done["status"], "OK", "{done}");
        assert_shape(
            &done["result"],
            &[("processed", "boolean"), ("lines", "number")],
        );
        assert_eq!(done["result"], json!({"processed": true, "lines": 150}));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_user_takes_age_as_a_number_from_13_to_120() {
    let (_handle, mut client) = quickstart().await;
    client
        .request("TOOL_SCHEMA", json!({"tool": "create_user"}))
        .await;
    let schema = client.recv().await;
    let age = &schema["payload"]["inputSchema"]["properties"]["age"];
    assert_eq!(age["type"], "number", "{schema}");
    assert_eq!(
        (age["minimum"].as_f64(), age["maximum"].as_f64()),
        (Some(13.0), Some(120.0))
    );
    for (call_id, age) in [
        ("u-int", json!(30)),
        ("u-float", json!(30.0)),
        ("u-frac", json!(30.5)),
        ("u-min", json!(13)),
        ("u-max", json!(120)),
    ] {
        let done = client
            .call_done(
                call_id,
                "create_user",
                json!({"username": "john_doe", "email": "john@example.com", "age": age}),
            )
            .await;
        assert_eq!(done["status"], "OK", "age {age}: {done}");
        assert_shape(
            &done["result"],
            &[("user_id", "string"), ("created", "boolean")],
        );
        assert_eq!(done["result"]["created"], true);
    }
    for age in [json!(12.9), json!(120.5), json!("30")] {
        let done = client
            .call_done(
                "u-bad",
                "create_user",
                json!({"username": "john_doe", "email": "john@example.com", "age": age}),
            )
            .await;
        assert_eq!(
            done["result"]["code"], "INVALID_PARAMS",
            "age {age}: {done}"
        );
        assert_eq!(done["result"]["details"][0]["path"], "/age", "{done}");
    }
}

/// Kills the quickstart when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_sends_the_legacy_schema_field_when_asked() {
    let binary = mcp_support::example_binary("quickstart");
    let mut child = Command::new(binary)
        .env("HAIP_ADDR", "127.0.0.1:0")
        .env("HAIP_TOOL_SCHEMA_LEGACY", "1")
        .env("NO_COLOR", "1")
        .env_remove("HAIP_JWT_SECRET")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the quickstart starts");
    let stderr = child.stderr.take().expect("stderr is piped");
    let _running = Running(child);
    let (url_tx, url_rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut url_tx = Some(url_tx);
        // Keep reading (and discarding) so the quickstart never blocks on stderr.
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("ws://").nth(1) {
                let addr: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '/'))
                    .collect();
                if let Some(tx) = url_tx.take() {
                    let _ = tx.send(format!("ws://{addr}"));
                }
            }
        }
    });
    let url = within("the quickstart to log its URL", url_rx)
        .await
        .expect("the quickstart logs the URL it listens on");
    let mut client = Client::connect(&url).await;

    client.request("TOOL_LIST", json!({})).await;
    let list = client.recv().await;
    let names: Vec<&str> = list["payload"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, QUICKSTART_TOOLS);

    client
        .request("TOOL_SCHEMA", json!({"tool": "create_user"}))
        .await;
    let schema = client.recv().await;
    let payload = &schema["payload"];
    assert!(payload["inputSchema"].is_object(), "{schema}");
    assert_eq!(payload["schema"], payload["inputSchema"], "{schema}");
}

//! The Rust client against the quickstart's tools: discovery, calls with a
//! progress stream, cancellation, typed calls, many calls on one connection,
//! and errors.

use crate::support;

use std::collections::HashSet;

use haip::client::{Client, ClientError, ClientOptions, Outcome};
use serde_json::json;
use support::{builder, demo_builder, start, within};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_tools_and_reads_schemas() {
    let (_handle, url) = start(demo_builder()).await;
    let client = within("connect", Client::connect(&url)).await.unwrap();
    assert!(!client.session_id().is_empty());
    assert_eq!(client.server_hai()["haip_version"], "1.1.2");
    // The same HAI, typed.
    let hai = client.hai();
    assert_eq!(hai.haip_version.as_deref(), Some("1.1.2"));
    assert!(hai.is_compatible());
    assert_eq!(hai.accepted_events().map(|e| e.len()), Some(22));
    let capabilities = hai.capabilities.as_ref().unwrap();
    assert_eq!(capabilities.binary_frames, Some(true));
    assert!(capabilities.flow_control.is_some());
    let names: Vec<String> = within("list", client.list_tools())
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, support::QUICKSTART_TOOLS);
    let schema = within("schema", client.schema("echo")).await.unwrap();
    assert_eq!(schema.input_schema["required"], json!(["message"]));
    assert!(schema.output_schema.is_some());
    let err = within("schema", client.schema("nope")).await.unwrap_err();
    assert!(
        matches!(&err, ClientError::Server { code, .. } if code == "TOOL_NOT_FOUND"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_stream_progress_then_the_outcome() {
    let (_handle, url) = start(demo_builder()).await;
    let client = Client::connect(&url).await.unwrap();
    let mut call = client
        .call(
            "process_file",
            json!({"filename": "a.txt", "operation": "read"}),
        )
        .await
        .unwrap();
    let mut progress = Vec::new();
    while let Some(update) = within("update", call.next_update()).await {
        assert_eq!(update.status, "RUNNING");
        progress.push(update.progress.unwrap());
    }
    assert_eq!(progress, [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
    let outcome = within("outcome", call.outcome()).await.unwrap();
    assert_eq!(
        outcome,
        Outcome::Ok(Some(json!({"processed": true, "lines": 150})))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_the_call_cancelled() {
    let (_handle, url) = start(demo_builder()).await;
    let client = Client::connect(&url).await.unwrap();
    let mut call = client
        .call(
            "process_file",
            json!({"filename": "a.txt", "operation": "read"}),
        )
        .await
        .unwrap();
    let first = within("first update", call.next_update()).await.unwrap();
    assert_eq!(first.progress, Some(0.0));
    call.cancel(Some("enough")).await.unwrap();
    let cancelling = within("cancelling", call.next_update()).await.unwrap();
    assert_eq!(cancelling.status, "CANCELLING");
    assert_eq!(
        within("outcome", call.outcome()).await.unwrap(),
        Outcome::Cancelled(Some("enough".into()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_calls_and_errors() {
    let (_handle, url) = start(demo_builder()).await;
    let client = Client::connect(&url).await.unwrap();
    #[haip::data]
    #[derive(Debug)]
    struct Sum {
        result: i64,
    }
    let sum: Sum = client
        .call_typed("add", json!({"a": 5, "b": 3}))
        .await
        .unwrap();
    assert_eq!(sum.result, 8);
    let err = client
        .call_typed::<Sum>("add", json!({"a": "5"}))
        .await
        .unwrap_err();
    let ClientError::Call(outcome) = err else {
        panic!("expected a call error, got {err}")
    };
    let Outcome::Error { code, details, .. } = *outcome else {
        panic!("expected an error outcome")
    };
    assert_eq!(code, "INVALID_PARAMS");
    assert_eq!(details.unwrap()[0]["path"], "/a");
    let outcome = client
        .call("nope", json!({}))
        .await
        .unwrap()
        .outcome()
        .await
        .unwrap();
    assert!(
        matches!(outcome, Outcome::Error { ref code, .. } if code == "TOOL_NOT_FOUND"),
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_calls_share_one_connection() {
    let (_handle, url) = start(demo_builder()).await;
    let client = Client::connect(&url).await.unwrap();
    let calls = (0..200).map(|i| {
        let client = client.clone();
        tokio::spawn(async move {
            let call = client
                .call("echo", json!({"message": format!("m{i}")}))
                .await
                .unwrap();
            call.outcome().await.unwrap()
        })
    });
    let mut echoed = HashSet::new();
    for call in calls {
        let Outcome::Ok(Some(result)) = within("call", call).await.unwrap() else {
            panic!("not OK")
        };
        echoed.insert(result["echoed"].as_str().unwrap().to_owned());
    }
    assert_eq!(echoed.len(), 200, "every call answered with its own result");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_problems_are_errors() {
    let err = Client::connect("http://127.0.0.1:1/haip")
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::InvalidUrl { .. }), "{err}");
    // A port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let err = within("connect", Client::connect(&format!("ws://{addr}/haip")))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Connect { .. }), "{err}");
    // Authentication: refused without a token, accepted with one.
    let (_handle, url) = start(builder().jwt_hs256("secret-of-at-least-32-bytes-for-hs256")).await;
    let err = within("connect", Client::connect(&url)).await.unwrap_err();
    assert!(
        matches!(&err, ClientError::Server { code, .. } if code == "MISSING_TOKEN"),
        "{err}"
    );
    let options = ClientOptions::new().token("not-a-jwt");
    let err = within("connect", Client::connect_with(&url, options))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ClientError::Server { code, .. } if code == "INVALID_TOKEN"),
        "{err}"
    );
}

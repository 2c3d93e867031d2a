//! The application's tools, tested in memory: no socket, no port, each
//! test a few lines.

use haip::LogLevel;
use haip::testing::TestServer;
use serde_json::json;

fn server() -> TestServer {
    TestServer::new(toolset_user::server()).expect("the server builds")
}

#[tokio::test]
async fn shout_upper_cases_and_checks_its_input() {
    let server = server();
    let out = server.call("text_shout", json!({"text": "hi"})).await.unwrap();
    assert_eq!(out, json!({"text": "HI", "chars": 2}));
    let changed: toolset_lib::Changed = server
        .call_typed("text_shout", json!({"text": "ok"}))
        .await
        .unwrap();
    assert_eq!(changed.text, "OK");
    let err = server.call("text_shout", json!({"text": ""})).await.unwrap_err();
    assert_eq!(err.code(), Some("INVALID_PARAMS"));
}

#[tokio::test]
async fn count_words_reports_progress_and_logs_the_count() {
    let server = server();
    let call = server
        .start(
            "text_count_words",
            json!({"text": "one two\nthree\nfour five six"}),
        )
        .await
        .unwrap();
    let done = call.done().await.unwrap();
    done.assert_progress_rises()
        .assert_logged(LogLevel::Info, "6 words in 3 lines");
    assert_eq!(done.progress().last(), Some(&100.0));
    assert_eq!(done.into_result().unwrap(), json!(6));
}

#[tokio::test]
async fn replace_asks_first() {
    let server = server();
    let mut call = server
        .start("text_replace", json!({"old": "a", "new": "b"}))
        .await
        .unwrap();
    let question = call.question().await.unwrap();
    assert_eq!(question.message, r#"Replace "a" with "b"?"#);
    call.answer(&question.request_id, json!({"confirm": true}))
        .await
        .unwrap();
    assert_eq!(call.result().await.unwrap()["text"], "b");

    let mut call = server
        .start("text_replace", json!({"old": "a", "new": "b"}))
        .await
        .unwrap();
    let question = call.question().await.unwrap();
    call.decline(&question.request_id).await.unwrap();
    assert_eq!(call.result().await.unwrap_err().code(), Some("DECLINED"));
}

#[tokio::test]
async fn every_tool_is_listed_with_its_schemas() {
    let server = server();
    let names: Vec<String> = server
        .list_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["text_shout", "text_count_words", "text_replace"]);
    let schemas: serde_json::Value =
        serde_json::from_str(&server.schemas().await.unwrap()).unwrap();
    assert_eq!(
        schemas["text_shout"]["input_schema"]["properties"]["text"]["maxLength"],
        100
    );
    assert_eq!(schemas["text_replace"]["annotations"]["destructiveHint"], true);
    server.shutdown().await.unwrap();
}

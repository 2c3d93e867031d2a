//! Issue 38, the first hour with haip: `ctx.confirm`'s form defaults to no,
//! on the wire as in memory, and `haip::testing` answers it in one line
//! (`TestCall::confirm`), as it answers any question by the `Question`
//! itself with a typed value (`TestCall::answer`).

use crate::support;

use haip::client::{CallEvent, Client, ClientOptions, Outcome};
use haip::testing::{TestError, TestServer};
use haip::{Answer, Context, ToolError, haip_tool, json};
use support::{start, within};

/// Delete a file, once the person says yes.
#[haip_tool]
async fn delete_file(
    /// The file.
    path: String,
    ctx: Context,
) -> Result<String, ToolError> {
    if ctx.confirm(format!("Delete {path}?")).await? {
        Ok(format!("deleted {path}"))
    } else {
        Ok(format!("kept {path}"))
    }
}

/// What `rename_file` asks.
#[haip::data]
struct NewName {
    /// The new name.
    name: String,
}

/// Rename a file, asking for the new name.
#[haip_tool]
async fn rename_file(
    /// The file.
    path: String,
    ctx: Context,
) -> Result<String, ToolError> {
    match ctx.ask::<NewName>(format!("Rename {path} to?")).await? {
        Answer::Accepted(new) => Ok(format!("{path} -> {}", new.name)),
        Answer::Declined | Answer::Cancelled => Ok(format!("{path} kept its name")),
    }
}

fn server() -> TestServer {
    TestServer::new(
        haip::Server::builder()
            .tool(delete_file::tool())
            .tool(rename_file::tool()),
    )
    .expect("the tools build")
}

#[tokio::test]
async fn a_test_confirms_yes_or_no_in_one_line() {
    let server = server();
    let mut call = server
        .start("delete_file", json!({"path": "a.txt"}))
        .await
        .unwrap();
    let question = call.confirm(true).await.unwrap();
    assert_eq!(question.message, "Delete a.txt?");
    assert_eq!(call.result().await.unwrap(), json!("deleted a.txt"));

    let mut call = server
        .start("delete_file", json!({"path": "b.txt"}))
        .await
        .unwrap();
    call.confirm(false).await.unwrap();
    assert_eq!(call.result().await.unwrap(), json!("kept b.txt"));

    // Declining is no too.
    let mut call = server
        .start("delete_file", json!({"path": "c.txt"}))
        .await
        .unwrap();
    let question = call.question().await.unwrap();
    call.decline(&question).await.unwrap();
    assert_eq!(call.result().await.unwrap(), json!("kept c.txt"));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn questions_are_answered_by_the_question_with_a_typed_value() {
    let server = server();
    let mut call = server
        .start("rename_file", json!({"path": "a.txt"}))
        .await
        .unwrap();
    let question = call.question().await.unwrap();
    call.answer(
        &question,
        NewName {
            name: "b.txt".into(),
        },
    )
    .await
    .unwrap();
    assert_eq!(call.result().await.unwrap(), json!("a.txt -> b.txt"));

    // By its request id, with JSON, as before.
    let mut call = server
        .start("rename_file", json!({"path": "c.txt"}))
        .await
        .unwrap();
    let question = call.question().await.unwrap();
    call.answer(&question.request_id, json!({"name": "d.txt"}))
        .await
        .unwrap();
    assert_eq!(call.result().await.unwrap(), json!("c.txt -> d.txt"));

    // `confirm` on a question that is not a confirmation says so, and
    // leaves it to be answered.
    let mut call = server
        .start("rename_file", json!({"path": "e.txt"}))
        .await
        .unwrap();
    let err = call.confirm(true).await.unwrap_err();
    assert!(matches!(err, TestError::Unexpected(_)), "{err:?}");
    assert!(
        err.to_string().contains("\"Rename e.txt to?\"") && err.to_string().contains("ctx.confirm"),
        "{err}"
    );
    let question = call.question().await.unwrap();
    assert_eq!(question.message, "Rename e.txt to?");
    call.answer(&question, json!({"name": "f.txt"}))
        .await
        .unwrap();
    assert_eq!(call.result().await.unwrap(), json!("e.txt -> f.txt"));
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_confirm_form_on_the_wire_says_no_unless_told_yes() {
    let (handle, url) = start(haip::Server::builder().tool(delete_file::tool())).await;
    let client = within(
        "connect",
        Client::connect_with(&url, ClientOptions::new().tool_input(true)),
    )
    .await
    .unwrap();
    let mut call = within(
        "the call",
        client.call("delete_file", json!({"path": "a.txt"})),
    )
    .await
    .unwrap();
    let question = loop {
        match within("the question", call.next_event()).await {
            Some(CallEvent::Question(question)) => break question,
            Some(_) => continue,
            None => panic!("the call ended without asking"),
        }
    };
    assert_eq!(
        question.schema,
        json!({
            "type": "object",
            "properties": {"confirm": {"type": "boolean", "title": "Confirm", "default": false}},
            "required": ["confirm"]
        })
    );
    let fields = question.fields().unwrap();
    assert_eq!(fields.len(), 1);
    assert_eq!(fields[0].default, Some(json!(false)));
    // A client that takes the form's default (Enter, an unticked box) says no.
    let content = json!({"confirm": fields[0].default.clone().unwrap()});
    within("the verdict", call.answer(&question.request_id, content))
        .await
        .unwrap();
    while within("an event", call.next_event()).await.is_some() {}
    assert_eq!(
        within("the outcome", call.outcome()).await.unwrap(),
        Outcome::Ok(Some(json!("kept a.txt")))
    );
    handle.shutdown().await;
}

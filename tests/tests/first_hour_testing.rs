//! Issue 38, the first hour with haip: what a failing test says
//! (`TestError`'s message lists the violations), the schema snapshot
//! `haip::testing` keeps, and `haip lint`'s warnings about tools and
//! parameters without a description. Written with `haip::json!` and
//! `haip::Value`, as a crate depending on `haip` alone would be.

use haip::testing::{TestError, TestServer};
use haip::{ToolError, Value, haip_tool, json};

/// Add two numbers.
#[haip_tool]
async fn add_two(
    /// First operand.
    a: f64,
    /// Second operand.
    b: f64,
) -> f64 {
    a + b
}

/// Store any JSON value under a key; refuses empty keys with details.
#[haip_tool]
async fn store(
    /// The key.
    key: String,
    /// The value, any JSON.
    value: Value,
) -> Result<Value, ToolError> {
    if key.is_empty() {
        return Err(ToolError::invalid_params("an empty key")
            .with_details(json!({"key": key, "allowed": "1 to 64 characters"})));
    }
    Ok(json!({ "stored": key, "value": value }))
}

#[haip_tool]
async fn undocumented(path: String, count: u32) -> String {
    path.repeat(count as usize)
}

fn server() -> TestServer {
    TestServer::new(
        haip::Server::builder()
            .tool(add_two::tool())
            .tool(store::tool()),
    )
    .expect("the tools build")
}

#[tokio::test]
async fn a_failed_call_says_which_params_are_wrong() {
    let server = server();
    let err = server
        .call("add_two", json!({"a": "one"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("INVALID_PARAMS"));
    let shown = err.to_string();
    // What `?` or `unwrap()` in a test prints: the violations, not only
    // "Invalid params".
    assert!(
        shown.starts_with("the call failed with INVALID_PARAMS: "),
        "{shown}"
    );
    assert!(shown.contains(" (/a: \"one\" "), "the wrong param: {shown}");
    assert!(
        shown.contains("; /b: \"b\" is a required property)"),
        "the missing one: {shown}"
    );

    // A tool's own details are shown too.
    let err = server
        .call("store", json!({"key": "", "value": [1, 2]}))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the call failed with INVALID_PARAMS: an empty key \
         (details: {\"allowed\":\"1 to 64 characters\",\"key\":\"\"})"
    );
    assert_eq!(
        server
            .call("store", json!({"key": "k", "value": {"any": null}}))
            .await
            .unwrap(),
        json!({"stored": "k", "value": {"any": null}})
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_schemas_are_checked_against_a_snapshot_file() {
    let server = server();
    let dir = std::env::temp_dir().join(format!("haip-first-hour-{}", std::process::id()));
    let path = dir.join("schemas.json");
    // No snapshot yet: the error says how to write one.
    let err = server.check_schemas_snapshot(&path).await.unwrap_err();
    assert!(
        matches!(&err, TestError::Snapshot { diff: None, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("HAIP_UPDATE_SNAPSHOTS=1"), "{err}");
    // What `HAIP_UPDATE_SNAPSHOTS=1` writes is `schemas()`.
    std::fs::create_dir_all(&dir).unwrap();
    let schemas = server.schemas().await.unwrap();
    std::fs::write(&path, &schemas).unwrap();
    server.check_schemas_snapshot(&path).await.unwrap();
    // A changed description fails, naming the line.
    std::fs::write(
        &path,
        schemas.replace("First operand.", "The first operand."),
    )
    .unwrap();
    let err = server.check_schemas_snapshot(&path).await.unwrap_err();
    let shown = err.to_string();
    assert!(shown.contains("differ from the snapshot"), "{shown}");
    assert!(
        shown.contains("-          \"description\": \"The first operand.\",")
            && shown.contains("+          \"description\": \"First operand.\","),
        "{shown}"
    );
    assert!(shown.contains("@@ line "), "{shown}");
    assert!(shown.contains("HAIP_UPDATE_SNAPSHOTS=1"), "{shown}");
    server.shutdown().await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn lint_warns_about_tools_and_params_without_a_description() {
    let tool = undocumented::tool();
    let findings = haip::lint::check_tool(&tool);
    let warnings: Vec<String> = findings
        .iter()
        .filter(|f| f.severity == haip::lint::Severity::Warning)
        .map(ToString::to_string)
        .collect();
    assert_eq!(warnings.len(), 3, "{warnings:#?}");
    assert!(
        warnings[0]
            .starts_with("undocumented [every profile]: warning: the tool has no description"),
        "{warnings:#?}"
    );
    assert!(warnings[1].contains("at /properties/count: warning: parameter `count`"));
    assert!(warnings[2].contains("at /properties/path: warning: parameter `path`"));
    // Warnings fail nothing: the tool is clean of errors.
    haip::lint::assert_clean([&tool]);
    // Documented tools have no warnings.
    assert!(haip::lint::check_tool(&add_two::tool()).is_empty());
}

//! Tests of the export: tools and results as MCP shows them, and the
//! services `/mcp` makes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use serde_json::{Value, json};

use super::ExportService;
use super::render::{failure_result, mcp_tool, success_result};
use crate::Context;
use crate::mcp::tasks::Tasks;
use crate::schema::SchemaProfile;
use crate::session::Shared;
use crate::tool::{Tool, ToolError};

fn tool(output: Option<Value>) -> Tool {
    let mut b = Tool::builder("t")
        .description("A tool")
        .input_schema(json!({"type": "object", "properties": {"x": {"type": "integer"}}}))
        .handler(|_: Value, _: Context| async { Ok(Value::Null) });
    if let Some(output) = output {
        b = b.output_schema(output);
    }
    b.build().unwrap()
}

#[test]
fn only_object_output_schemas_are_advertised() {
    let object = json!({"type": "object", "properties": {"r": {"type": "number"}}});
    let t = mcp_tool(&tool(Some(object.clone())), SchemaProfile::Full).unwrap();
    assert_eq!(t.name, "t");
    assert_eq!(t.description.as_deref(), Some("A tool"));
    assert_eq!(
        Value::Object((*t.input_schema).clone())["properties"]["x"]["type"],
        "integer"
    );
    assert_eq!(Value::Object((*t.output_schema.unwrap()).clone()), object);
    assert!(
        mcp_tool(&tool(Some(json!({"type": "string"}))), SchemaProfile::Full)
            .unwrap()
            .output_schema
            .is_none()
    );
    assert!(
        mcp_tool(&tool(None), SchemaProfile::Full)
            .unwrap()
            .output_schema
            .is_none()
    );
}

#[test]
fn results_carry_text_and_structured_content_when_advertised() {
    let object = json!({"type": "object"});
    let (r, _) = success_result(&tool(Some(object)), json!({"r": 1}));
    assert_eq!(r.is_error, Some(false));
    assert_eq!(r.structured_content, Some(json!({"r": 1})));
    assert_eq!(r.content[0].as_text().unwrap(), "{\"r\":1}");

    let (r, _) = success_result(&tool(Some(json!({"type": "string"}))), json!("plain"));
    assert_eq!(r.structured_content, None);
    assert_eq!(r.content[0].as_text().unwrap(), "plain");

    assert!(
        success_result(&tool(None), Value::Null)
            .0
            .content
            .is_empty()
    );
}

/// A result is measured byte by byte only when it might be too large: what
/// `success_result` says it takes at most must never be less than it takes.
#[test]
fn a_results_most_is_never_less_than_its_size() {
    let object = tool(Some(json!({"type": "object"})));
    let plain = tool(None);
    let escaped: String = (0u8..32).map(char::from).chain("\"\\é😀".chars()).collect();
    let values = [
        Value::Null,
        json!(""),
        json!("plain"),
        json!(escaped.clone()),
        json!({"r": 1}),
        json!({"nested": {"list": [1, 2.5, null, true], "s": escaped}}),
        json!([escaped.repeat(3)]),
        json!(-12.5e300),
    ];
    for value in values {
        for tool in [&object, &plain] {
            let (result, most) = success_result(tool, value.clone());
            let most = most.expect("a plain result's most is known");
            let size = crate::protocol::json_len(&result);
            assert!(size <= most, "{value}: {size} bytes, said at most {most}");
        }
    }
}

#[cfg(feature = "mcp-import")]
#[test]
fn imported_content_blocks_pass_through() {
    let imported = Tool::builder("img")
        .mark(crate::mcp::McpContent)
        .handler(|_: Value, _: Context| async { Ok(Value::Null) })
        .build()
        .unwrap();
    let value = json!({"content": [
        {"type": "text", "text": "a logo"},
        {"type": "image", "data": "iVBORw0=", "mimeType": "image/png"}
    ]});
    let (r, _) = success_result(&imported, value.clone());
    assert_eq!(r.content.len(), 2);
    assert_eq!(r.content[0].as_text().unwrap(), "a logo");
    assert_eq!(
        serde_json::to_value(&r.content[1]).unwrap(),
        json!({"type": "image", "data": "iVBORw0=", "mimeType": "image/png"})
    );
    // A haip tool returning the same shape is not reinterpreted.
    let (r, _) = success_result(&tool(None), value);
    assert_eq!(r.content.len(), 1);
    assert!(r.content[0].as_text().unwrap().starts_with("{\"content\""));
}

/// Every service promises `listChanged` (a session's stream, or without
/// one a `subscriptions/listen` stream, carries it); each counts against
/// `max_sessions` while it lives.
#[tokio::test]
async fn http_services_count_and_all_promise_list_changed() {
    let config = crate::session::SessionConfig {
        max_sessions: 2,
        ..Default::default()
    };
    let shared = Shared::for_tests(config);
    let live = Arc::new(AtomicUsize::new(0));
    let tasks = Tasks::new(&shared, crate::mcp::tasks::TaskSettings::default());
    let session = ExportService::for_http(&shared, &live, false, None, &tasks).unwrap();
    let stateless = ExportService::for_http(&shared, &live, true, None, &tasks).unwrap();
    assert_eq!(live.load(Relaxed), 2);
    let full = ExportService::for_http(&shared, &live, true, None, &tasks);
    assert!(full.is_err(), "a third service with max_sessions = 2");
    let tools = |s: &ExportService| s.get_info().capabilities.tools.clone().unwrap();
    assert_eq!(tools(&session).list_changed, Some(true));
    assert_eq!(tools(&stateless).list_changed, Some(true));
    assert!(stateless.get_info().capabilities.logging.is_some());
    drop(stateless);
    assert_eq!(live.load(Relaxed), 1);
    drop(session);
    assert_eq!(live.load(Relaxed), 0);
}

#[test]
fn tool_errors_are_readable_text() {
    let e = ToolError::execution("no such user").with_details(json!({"id": 3}));
    let r = failure_result(e.into_failure());
    assert_eq!(r.is_error, Some(true));
    assert_eq!(
        r.content[0].as_text().unwrap(),
        "no such user (TOOL_EXECUTION_ERROR)"
    );
    assert_eq!(r.content[1].as_text().unwrap(), "{\"id\":3}");
}

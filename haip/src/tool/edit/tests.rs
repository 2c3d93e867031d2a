use serde_json::json;

use super::*;
use crate::SchemaProfile;

/// `read(path, encoding?)`: returns the params its handler got.
fn read() -> Tool {
    Tool::builder("read")
        .description("Read a file")
        .title("Read")
        .tags(["files"])
        .input_schema(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Which file"},
                "encoding": {"type": "string", "enum": ["utf8", "latin1"]},
                "limit": {"type": "integer"}
            },
            "required": ["path", "encoding"],
            "additionalProperties": false
        }))
        .handler(|params: Value, _: Context| async move { Ok(params) })
        .build()
        .unwrap()
}

async fn call(tool: &Tool, params: Value) -> Value {
    let (ctx, _cancel) = Context::detached("c1");
    tool.call(params, ctx).await.unwrap()
}

fn names(schema: &Value) -> Vec<&str> {
    schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

#[tokio::test]
async fn descriptions_titles_names_and_tags_change_only_what_is_shown() {
    let original = read();
    let cat = original
        .edit()
        .name("cat")
        .description("Print a file")
        .title("")
        .tags(["admin", "files"])
        .param_description("path", "Relative to the root")
        .param_title("limit", "Most bytes")
        .build()
        .unwrap();
    assert_eq!(
        (cat.name(), cat.description(), cat.title()),
        ("cat", "Print a file", None)
    );
    assert_eq!(cat.tags(), ["admin", "files"]);
    let portable = cat
        .advertised_input_schema(SchemaProfile::Portable)
        .unwrap();
    assert_eq!(
        portable["properties"]["path"]["description"],
        "Relative to the root"
    );
    assert_eq!(
        cat.input_schema()["properties"]["limit"]["title"],
        "Most bytes"
    );
    // The original is as it was.
    assert_eq!((original.name(), original.title()), ("read", Some("Read")));
    assert_eq!(
        original.input_schema()["properties"]["path"]["description"],
        "Which file"
    );
    // The same handler, not a wrapper around it: nothing more per call.
    assert!(Arc::ptr_eq(&cat.inner.handler, &original.inner.handler));
    let params = json!({"path": "a", "encoding": "utf8"});
    assert!(cat.validate_params(&params).is_empty());
    assert_eq!(call(&cat, params.clone()).await, params);
}

#[tokio::test]
async fn renamed_parameters_are_shown_by_the_new_name_and_handed_over_by_the_old() {
    let tool = read()
        .edit()
        .rename_param("path", "file")
        .param_description("file", "The file")
        .build()
        .unwrap();
    let schema = tool.input_schema();
    assert_eq!(names(schema), ["encoding", "file", "limit"]);
    assert_eq!(schema["required"], json!(["file", "encoding"]));
    assert_eq!(schema["properties"]["file"]["description"], "The file");
    let sent = json!({"file": "a.txt", "encoding": "utf8"});
    assert!(tool.validate_params(&sent).is_empty());
    assert_eq!(
        tool.validate_params(&json!({"path": "a.txt", "encoding": "utf8"}))[0].message,
        "\"file\" is a required property"
    );
    assert_eq!(
        call(&tool, sent).await,
        json!({"path": "a.txt", "encoding": "utf8"})
    );
    // Renamed again, and back: one step each, whatever the chain.
    let mut reshape = Reshape::default();
    reshape.rename("path".into(), "file".into());
    reshape.rename("file".into(), "f".into());
    assert_eq!(reshape.renames, [("f".to_owned(), "path".to_owned())]);
    reshape.rename("f".into(), "path".into());
    assert!(reshape.is_empty());
    // An edit of an edit renames through both.
    let twice = tool.edit().rename_param("file", "source").build().unwrap();
    assert_eq!(
        call(&twice, json!({"source": "b", "encoding": "latin1"})).await,
        json!({"path": "b", "encoding": "latin1"})
    );
}

#[tokio::test]
async fn fixed_parameters_are_hidden_and_always_passed() {
    let tool = read()
        .edit()
        .rename_param("path", "file")
        .fix_param("encoding", json!("latin1"))
        .build()
        .unwrap();
    let schema = tool.input_schema();
    assert_eq!(names(schema), ["file", "limit"]);
    assert_eq!(schema["required"], json!(["file"]));
    assert_eq!(
        tool.validate_params(&json!({"file": "a", "encoding": "utf8"}))[0].message,
        "unexpected property \"encoding\"; known properties: \"file\", \"limit\"",
        "a closed schema refuses the hidden parameter"
    );
    assert_eq!(
        call(&tool, json!({"file": "a"})).await,
        json!({"path": "a", "encoding": "latin1"})
    );
    // Fixing a renamed parameter fixes it under the handler's name.
    let tool = read()
        .edit()
        .rename_param("limit", "max")
        .fix_param("max", json!(10))
        .build()
        .unwrap();
    assert_eq!(
        call(&tool, json!({"path": "a", "encoding": "utf8"})).await,
        json!({"path": "a", "encoding": "utf8", "limit": 10})
    );
}

#[test]
fn impossible_edits_are_refused_naming_the_tool() {
    let err = |edit: ToolEdit| edit.build().unwrap_err().to_string();
    assert_eq!(
        err(read().edit().param_description("pth", "x")),
        "invalid tool `read`: cannot edit: it has no parameter `pth`; its parameters: encoding, \
         limit, path"
    );
    assert!(err(read().edit().rename_param("path", "limit")).contains("a parameter has that name"));
    assert!(err(read().edit().rename_param("path", "")).contains("the name is empty"));
    assert_eq!(
        err(read().edit().fix_param("encoding", json!("utf16"))),
        "invalid tool `read`: cannot edit: the value fixed for parameter `encoding` does not \
         fit its schema: \"utf16\" is not one of \"utf8\" or \"latin1\""
    );
    assert!(err(read().edit().tags(["no spaces"])).contains("tag \"no spaces\" is not valid"));
    assert!(err(read().edit().name("a/b")).contains("invalid tool name `a/b`"));
    let combined = Tool::builder("either")
        .input_schema(json!({
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "anyOf": [{"required": ["a"]}, {"required": ["b"]}]
        }))
        .handler(|_: Value, _: Context| async { Ok(Value::Null) })
        .build()
        .unwrap();
    assert_eq!(
        err(combined.edit().rename_param("a", "c")),
        "invalid tool `either`: cannot edit: cannot rename a parameter: the input schema names \
         parameters in `anyOf` too"
    );
    // Describing is fine there: it changes nothing a value must be.
    assert!(combined.edit().param_description("a", "A").build().is_ok());
}

#[test]
fn a_fixed_value_may_follow_a_reference() {
    let tool = Tool::builder("t")
        .input_schema(json!({
            "type": "object",
            "properties": {"mode": {"$ref": "#/$defs/Mode"}},
            "$defs": {"Mode": {"type": "string", "enum": ["fast", "safe"]}}
        }))
        .handler(|_: Value, _: Context| async { Ok(Value::Null) })
        .build()
        .unwrap();
    assert!(tool.edit().fix_param("mode", json!("safe")).build().is_ok());
    assert!(
        tool.edit()
            .fix_param("mode", json!("slow"))
            .build()
            .is_err()
    );
}

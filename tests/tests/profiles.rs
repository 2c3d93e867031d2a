//! Schema profiles (docs/protocol.md §6.14) against the model providers' rules, for
//! every quickstart tool and every tool of the everyday-types crate
//! (`tests/everyday`), as a client gets them through the wire:
//!
//! - `portable`, the default: Gemini's own `types.Schema` (the Python
//!   `google-genai` package, which refuses unknown fields) plus the Gemini
//!   API's rules, and the JSON Schema 2020-12 meta-schema (`jsonschema`:
//!   what Anthropic checks `input_schema` against and Gemini's
//!   `parametersJsonSchema` takes; OpenAI's plain function calling takes any
//!   valid schema with an object root);
//! - `openai-strict`: OpenAI's documented strict-mode rules, written out
//!   below as a checker, and the meta-schema;
//! - `anthropic-strict`: Anthropic's documented strict tool use rules, and
//!   the meta-schema.
//!
//! Then calls shaped by the strict profile (a `null` for every optional
//! field, maps as `{key, value}` pairs) behave exactly like ordinary ones,
//! over HAIP and MCP; profiles are chosen per server, per session, per
//! request and per MCP URL; unknown names get an error listing the valid ones.

use crate::mcp_support;
use crate::support;

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use haip::client::{Client, Outcome};
use haip::{Context, SchemaProfile, ServerBuilder, Tool, ToolError};
use serde_json::{Map, Value, json};
use support::{QUICKSTART_TOOLS, demo_builder, http_request_with, start, within};

/// The quickstart's tools, the everyday-types crate's, and [`invite`];
/// `/mcp` stateless (the MCP calls here are single POSTs, no `initialize`).
fn builder_with_everything() -> ServerBuilder {
    demo_builder()
        .tools(haip_everyday::tools())
        .tool(invite())
        .mcp_sessions(false)
}

fn all_names() -> Vec<String> {
    QUICKSTART_TOOLS
        .iter()
        .map(|n| (*n).to_owned())
        .chain(haip_everyday::tools().iter().map(|t| t.name().to_owned()))
        .chain(["invite".to_owned()])
        .collect()
}

/// A hand-written schema with string formats: `email` and `uuid` (which
/// Gemini's `parameters` refuse), `date-time` (which it takes).
fn invite() -> Tool {
    Tool::builder("invite")
        .description("Invite someone")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "email": {"type": "string", "format": "email", "description": "Their address."},
                "team": {"type": "string", "format": "uuid"},
                "until": {"type": "string", "format": "date-time"},
                "cc": {"type": "array", "items": {"type": "string", "format": "email"}}
            },
            "required": ["email"]
        }))
        .handler(|params, _: Context| async move { Ok::<_, ToolError>(params) })
        .build()
        .expect("invite builds")
}

/// Every tool's input schema under `profile`, through `TOOL_SCHEMA`.
async fn schemas(client: &Client, profile: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for name in all_names() {
        let schema = within("TOOL_SCHEMA", client.schema_in(&name, Some(profile)))
            .await
            .unwrap_or_else(|e| panic!("{name} in {profile}: {e}"));
        out.push((name, schema.input_schema));
    }
    out
}

// ----- OpenAI strict mode, as documented --------------------------------------------------

/// The keywords OpenAI's strict mode takes, and the formats.
const OPENAI_KEYWORDS: [&str; 20] = [
    "type",
    "description",
    "title",
    "enum",
    "const",
    "anyOf",
    "$ref",
    "$defs",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
];
const OPENAI_FORMATS: [&str; 9] = [
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Every way `schema` breaks OpenAI's strict-mode rules: the root an object
/// (not `anyOf`); every object closed with every property required; only the
/// supported keywords and formats; `$ref` without siblings; at most 10 levels
/// of nesting and 5000 properties; enums of at most 1000 values.
fn openai_strict_violations(schema: &Value) -> Vec<String> {
    fn walk(s: &Value, path: &str, depth: usize, found: &mut Vec<String>, props: &mut usize) {
        let Some(map) = s.as_object() else {
            found.push(format!("{path}: not a schema object"));
            return;
        };
        for key in map.keys() {
            let allowed = OPENAI_KEYWORDS.contains(&key.as_str()) || key == "multipleOf";
            if !allowed {
                found.push(format!("{path}: `{key}` is not supported in strict mode"));
            }
        }
        if map.contains_key("$ref") && map.len() > 1 {
            found.push(format!("{path}: `$ref` with siblings"));
        }
        if let Some(f) = map.get("format").and_then(Value::as_str)
            && !OPENAI_FORMATS.contains(&f)
        {
            found.push(format!("{path}: format `{f}`"));
        }
        if let Some(Value::Array(values)) = map.get("enum")
            && values.len() > 1000
        {
            found.push(format!("{path}: enum of {} values", values.len()));
        }
        let is_object = match map.get("type") {
            Some(Value::String(t)) => t == "object",
            Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
            _ => false,
        };
        if is_object {
            if depth > 10 {
                found.push(format!("{path}: nested deeper than 10"));
            }
            if map.get("additionalProperties") != Some(&json!(false)) {
                found.push(format!("{path}: additionalProperties is not false"));
            }
            let props_map = map.get("properties").and_then(Value::as_object);
            let required: Vec<&str> = map
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            match props_map {
                None => found.push(format!("{path}: an object without properties")),
                Some(p) => {
                    *props += p.len();
                    for name in p.keys() {
                        if !required.contains(&name.as_str()) {
                            found.push(format!("{path}: `{name}` is not required"));
                        }
                    }
                    for (name, sub) in p {
                        walk(
                            sub,
                            &format!("{path}/properties/{name}"),
                            depth + 1,
                            found,
                            props,
                        );
                    }
                }
            }
        }
        if let Some(items) = map.get("items") {
            walk(items, &format!("{path}/items"), depth, found, props);
        }
        if let Some(Value::Array(branches)) = map.get("anyOf") {
            for (i, b) in branches.iter().enumerate() {
                walk(b, &format!("{path}/anyOf/{i}"), depth, found, props);
            }
        }
        if let Some(Value::Object(defs)) = map.get("$defs") {
            for (name, d) in defs {
                walk(d, &format!("{path}/$defs/{name}"), 1, found, props);
            }
        }
    }
    let mut found = Vec::new();
    if schema.get("type") != Some(&json!("object")) || schema.get("anyOf").is_some() {
        found.push("root: must be `type: object`, not anyOf".to_owned());
    }
    let mut props = 0;
    walk(schema, "", 1, &mut found, &mut props);
    if props > 5000 {
        found.push(format!("{props} properties"));
    }
    found
}

// ----- Anthropic strict tool use, as documented ---------------------------------------------

const ANTHROPIC_KEYWORDS: [&str; 14] = [
    "type",
    "description",
    "title",
    "enum",
    "const",
    "anyOf",
    "allOf",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "format",
    "pattern",
];
const ANTHROPIC_FORMATS: [&str; 10] = [
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "uri",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Every way `schema` breaks Anthropic's strict tool use rules: objects
/// closed; no numeric or length constraints; `minItems` 0 or 1 only; the
/// supported formats; no `$ref` (so no recursion); at most 24 optional and
/// 16 union-typed properties.
fn anthropic_strict_violations(schema: &Value) -> Vec<String> {
    struct Count {
        optional: usize,
        unions: usize,
    }
    fn walk(s: &Value, path: &str, found: &mut Vec<String>, count: &mut Count) {
        let Some(map) = s.as_object() else {
            found.push(format!("{path}: not a schema object"));
            return;
        };
        for key in map.keys() {
            if !ANTHROPIC_KEYWORDS.contains(&key.as_str()) && key != "default" {
                found.push(format!("{path}: `{key}` is not supported"));
            }
        }
        if let Some(f) = map.get("format").and_then(Value::as_str)
            && !ANTHROPIC_FORMATS.contains(&f)
        {
            found.push(format!("{path}: format `{f}`"));
        }
        if let Some(n) = map.get("minItems").and_then(Value::as_u64)
            && n > 1
        {
            found.push(format!("{path}: minItems {n}"));
        }
        if map.get("type").is_some_and(Value::is_array) || map.contains_key("anyOf") {
            count.unions += 1;
        }
        if map.get("type") == Some(&json!("object")) {
            if map.get("additionalProperties") != Some(&json!(false)) {
                found.push(format!("{path}: additionalProperties is not false"));
            }
            let required: Vec<&str> = map
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if let Some(props) = map.get("properties").and_then(Value::as_object) {
                count.optional += props
                    .keys()
                    .filter(|k| !required.contains(&k.as_str()))
                    .count();
                for (name, sub) in props {
                    walk(sub, &format!("{path}/properties/{name}"), found, count);
                }
            }
        }
        if let Some(items) = map.get("items") {
            walk(items, &format!("{path}/items"), found, count);
        }
        for key in ["anyOf", "allOf"] {
            if let Some(Value::Array(branches)) = map.get(key) {
                for (i, b) in branches.iter().enumerate() {
                    walk(b, &format!("{path}/{key}/{i}"), found, count);
                }
            }
        }
    }
    let mut found = Vec::new();
    let mut count = Count {
        optional: 0,
        unions: 0,
    };
    walk(schema, "", &mut found, &mut count);
    if count.optional > 24 {
        found.push(format!("{} optional properties", count.optional));
    }
    if count.unions > 16 {
        found.push(format!("{} unions", count.unions));
    }
    found
}

/// Runs the providers' own validators (`tests/schema/check_profiles.py`).
fn python_check(by_profile: &Map<String, Value>) -> Value {
    let script = mcp_support::workspace().join("tests/schema/check_profiles.py");
    let mut child = Command::new(mcp_support::python())
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs check_profiles.py");
    let input = Value::Object(by_profile.clone()).to_string();
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write the schemas");
    let out = child.wait_with_output().expect("check_profiles.py ends");
    assert!(
        out.status.success(),
        "check_profiles.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("check_profiles.py prints JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_is_accepted_by_every_provider_in_its_profile() {
    let (_handle, url) = start(builder_with_everything()).await;
    let client = within("connect", Client::connect(&url)).await.unwrap();
    let mut by_profile = Map::new();
    let mut failures = Vec::new();
    for profile in ["portable", "openai-strict", "anthropic-strict", "full"] {
        let listed = schemas(&client, profile).await;
        for (tool, schema) in &listed {
            let broken = match profile {
                "openai-strict" => openai_strict_violations(schema),
                "anthropic-strict" => anthropic_strict_violations(schema),
                _ => Vec::new(),
            };
            failures.extend(
                broken
                    .into_iter()
                    .map(|b| format!("{tool} [{profile}] {b}")),
            );
        }
        let entries: Vec<Value> = listed
            .into_iter()
            .map(|(tool, schema)| json!({"tool": tool, "schema": schema}))
            .collect();
        by_profile.insert(profile.to_owned(), Value::Array(entries));
    }
    let checked = python_check(&by_profile);
    assert_eq!(
        checked["checked"],
        4 * all_names().len(),
        "every schema of every profile checked"
    );
    failures.extend(
        checked["failures"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().to_owned()),
    );
    assert!(failures.is_empty(), "refused:\n{}", failures.join("\n"));
    // Formats Gemini refuses are said in the description; `date-time` stays.
    let invite = client.schema_in("invite", Some("portable")).await.unwrap();
    let props = &invite.input_schema["properties"];
    assert_eq!(
        props["email"],
        json!({"type": "string", "description": "Their address. Format: email."})
    );
    assert_eq!(props["until"]["format"], "date-time");
    // The checkers are not empty promises: today's derived schema (`full`)
    // breaks them, as it did before profiles.
    let full = client.schema_in("create_task", Some("full")).await.unwrap();
    assert!(!openai_strict_violations(&full.input_schema).is_empty());
    assert!(!anthropic_strict_violations(&full.input_schema).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checkers_refuse_what_the_providers_refuse() {
    // Gemini: type lists, additionalProperties, const, string formats other
    // than date-time; Ajv-style unknown formats.
    let mut by_profile = Map::new();
    by_profile.insert(
        "portable".into(),
        json!([
            {"tool": "types", "schema": {"type": "object", "properties": {"a": {"type": ["string", "null"]}}}},
            {"tool": "closed", "schema": {"type": "object", "properties": {}, "additionalProperties": false}},
            {"tool": "const", "schema": {"type": "object", "properties": {"k": {"const": "x"}}}},
            {"tool": "bad", "schema": {"type": "object", "properties": {"n": {"type": 5}}}},
            {"tool": "email", "schema": {"type": "object", "properties": {"to": {"type": "string", "format": "email"}}}},
            {"tool": "dated", "schema": {"type": "object", "properties": {"at": {"type": "string", "format": "date-time"}}}}
        ]),
    );
    let checked = python_check(&by_profile);
    let failures: Vec<&str> = checked["failures"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for tool in ["types", "closed", "const", "bad", "email"] {
        assert!(
            failures.iter().any(|f| f.starts_with(tool)),
            "{tool} passed: {failures:?}"
        );
    }
    assert!(
        !failures.iter().any(|f| f.starts_with("dated")),
        "date-time refused: {failures:?}"
    );
    assert!(
        !openai_strict_violations(
            &json!({"type": "object", "properties": {"a": {"type": "string"}}})
        )
        .is_empty()
    );
    assert!(!anthropic_strict_violations(&json!({"type": "object", "properties": {"a": {"type": "integer", "minimum": 1}}, "additionalProperties": false})).is_empty());
}

// ----- calls shaped by a profile ----------------------------------------------------------------

/// Pairs of calls that must give the same result: one shaped by openai-strict
/// (a `null` for every optional field, maps as pairs), one written by hand.
fn shaped_and_plain() -> Vec<(&'static str, Value, Value)> {
    vec![
        (
            "create_task",
            json!({"title": "t", "priority": "Low", "due": null, "estimate_hours": null}),
            json!({"title": "t", "priority": "Low"}),
        ),
        (
            "rename",
            json!({"name": null, "suffix": null, "copies": null}),
            json!({}),
        ),
        (
            "resize",
            json!({"width": 4, "height": 3, "quality": null, "scale": 0.5}),
            json!({"width": 4, "height": 3, "scale": 0.5}),
        ),
        (
            "schedule",
            json!({"meeting": {"title": "m", "day": "2026-12-01", "at": null, "attendees": [
                {"name": "ada", "age": 36, "address": null, "tags": []},
                {"name": "bob", "age": 40, "address": {"street": "s", "city": "c", "zip": null}, "tags": ["x"]}
            ]}}),
            json!({"meeting": {"title": "m", "day": "2026-12-01", "attendees": [
                {"name": "ada", "age": 36, "tags": []},
                {"name": "bob", "age": 40, "address": {"street": "s", "city": "c"}, "tags": ["x"]}
            ]}}),
        ),
        ("store_addresses", json!({"addresses": null}), json!({})),
        (
            "average",
            json!({"scores": [{"key": "a", "value": 1}, {"key": "b", "value": 3}]}),
            json!({"scores": {"a": 1, "b": 3}}),
        ),
        (
            "folder_size",
            json!({"root": {"name": "r", "bytes": 1, "children": [{"name": "c", "bytes": 2, "children": []}]}}),
            json!({"root": {"name": "r", "bytes": 1, "children": [{"name": "c", "bytes": 2, "children": []}]}}),
        ),
        ("weather", json!({"location": null}), json!({})),
    ]
}

fn ok_value(outcome: Outcome, what: &str) -> Value {
    match outcome {
        Outcome::Ok(value) => value.unwrap_or(Value::Null),
        other => panic!("{what}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_shaped_by_a_profile_behave_like_plain_ones_over_haip() {
    let (_handle, url) = start(builder_with_everything()).await;
    let client = within("connect", Client::connect(&url)).await.unwrap();
    for (tool, shaped, plain) in shaped_and_plain() {
        let a = client.call(tool, shaped).await.unwrap();
        let a = ok_value(within("shaped", a.outcome()).await.unwrap(), tool);
        let b = client.call(tool, plain).await.unwrap();
        let b = ok_value(within("plain", b.outcome()).await.unwrap(), tool);
        assert_eq!(a, b, "{tool}");
    }
    // Nulls where they mean nothing are still refused.
    let call = client
        .call("create_task", json!({"title": null, "priority": "Low"}))
        .await
        .unwrap();
    match within("outcome", call.outcome()).await.unwrap() {
        Outcome::Error { code, .. } => assert_eq!(code, "INVALID_PARAMS"),
        other => panic!("a null for a required field: {other:?}"),
    }
}

/// One `tools/call` over stateless `/mcp`; its `structuredContent` or text.
async fn mcp_call(addr: SocketAddr, tool: &str, arguments: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": tool, "arguments": arguments}});
    let answer = mcp_post(addr, "/mcp", &body).await;
    let result = &answer["result"];
    assert_eq!(result["isError"], false, "{tool}: {answer}");
    result
        .get("structuredContent")
        .cloned()
        .unwrap_or_else(|| result["content"][0]["text"].clone())
}

async fn mcp_post(addr: SocketAddr, path: &str, body: &Value) -> Value {
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let response =
        http_request_with(addr, "POST", path, &headers, body.to_string().as_bytes()).await;
    assert_eq!(response.status, 200, "{response:?}");
    response.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_shaped_by_a_profile_behave_like_plain_ones_over_mcp() {
    // `allow_unauthenticated`: the raw HTTP client's `Host` is not a loopback name.
    let (handle, _) = start(builder_with_everything().allow_unauthenticated(true)).await;
    let addr = handle.local_addr();
    for (tool, shaped, plain) in shaped_and_plain() {
        let a = mcp_call(addr, tool, shaped).await;
        let b = mcp_call(addr, tool, plain).await;
        assert_eq!(a, b, "{tool}");
    }
}

// ----- choosing a profile -------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_are_chosen_per_server_session_request_and_mcp_url() {
    let (handle, url) = start(
        builder_with_everything()
            .schema_profile(SchemaProfile::OpenAiStrict)
            // The raw HTTP client's `Host` is not a loopback name.
            .allow_unauthenticated(true),
    )
    .await;
    let addr = handle.local_addr();
    let client = within("connect", Client::connect(&url)).await.unwrap();
    // The server's default.
    let strict = client.schema("create_task").await.unwrap().input_schema;
    assert_eq!(strict["additionalProperties"], false);
    assert_eq!(
        strict["properties"]["due"]["type"],
        json!(["string", "null"])
    );
    // Per request.
    let full = client.schema_in("create_task", Some("full")).await.unwrap();
    assert_eq!(
        full.input_schema["properties"]["estimate_hours"]["format"],
        "uint32"
    );
    // Unknown names: an error listing the valid ones.
    let err = client
        .schema_in("create_task", Some("gemini"))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("portable, openai-strict, anthropic-strict, full"),
        "{text}"
    );

    // Per session: the client's HAI.
    let mut raw = support::Client::connect(&url).await;
    raw.send(&json!({"type": "HAI", "payload": {"capabilities": {"schema_profile": "anthropic-strict"}}}))
        .await;
    raw.send(&json!({"id": "s1", "type": "TOOL_SCHEMA", "payload": {"tool": "resize"}}))
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["type"], "TOOL_SCHEMA", "{reply}");
    let quality = &reply["payload"]["inputSchema"]["properties"]["quality"];
    assert!(
        quality.get("maximum").is_none(),
        "anthropic-strict: {quality}"
    );
    assert!(
        quality["description"]
            .as_str()
            .unwrap()
            .contains("Between 0 and 255."),
        "{quality}"
    );
    raw.send(&json!({"id": "h2", "type": "HAI", "payload": {"capabilities": {"schema_profile": "loose"}}}))
        .await;
    let error = raw.expect_error().await;
    assert_eq!(error["payload"]["code"], "INVALID_MESSAGE");
    assert_eq!(error["payload"]["related_id"], "h2");
    assert_eq!(error["payload"]["detail"]["reason"], "unknown profile");
    assert_eq!(
        error["payload"]["detail"]["profiles"],
        json!(["portable", "openai-strict", "anthropic-strict", "full"])
    );

    // Per MCP client: `?schema_profile=` on the URL.
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let tools = mcp_post(addr, "/mcp?schema_profile=portable", &list).await;
    let task = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "create_task")
        .expect("create_task listed")
        .clone();
    assert!(
        task["inputSchema"].get("additionalProperties").is_none(),
        "{task}"
    );
    let tools = mcp_post(addr, "/mcp", &list).await;
    let task = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "create_task")
        .unwrap()
        .clone();
    assert_eq!(
        task["inputSchema"]["additionalProperties"], false,
        "the server's default"
    );
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let refused = http_request_with(
        addr,
        "POST",
        "/mcp?schema_profile=gemini",
        &headers,
        list.to_string().as_bytes(),
    )
    .await;
    assert_eq!(refused.status, 400, "{refused:?}");
    assert!(
        refused
            .body
            .contains("portable, openai-strict, anthropic-strict, full"),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_a_profile_cannot_serve_is_left_out_of_it_and_said_why() {
    let mut props = Map::new();
    for i in 0..30 {
        props.insert(format!("option_{i}"), json!({"type": "string"}));
    }
    let wide = haip::Tool::builder("wide")
        .input_schema(json!({"type": "object", "properties": props}))
        .handler(|_, _| async { Ok(Value::Null) })
        .build()
        .unwrap();
    let (handle, url) = start(
        demo_builder()
            .tool(wide)
            .allow_unauthenticated(true)
            .mcp_sessions(false),
    )
    .await;
    let client = within("connect", Client::connect(&url)).await.unwrap();
    let err = client
        .schema_in("wide", Some("anthropic-strict"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("30 optional properties"), "{err}");
    assert!(client.schema_in("wide", Some("portable")).await.is_ok());
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let tools = mcp_post(
        handle.local_addr(),
        "/mcp?schema_profile=anthropic-strict",
        &list,
    )
    .await;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(!names.contains(&"wide"), "{names:?}");
    assert!(names.contains(&"echo"), "{names:?}");
}

#[test]
fn the_quickstart_and_everyday_tools_lint_clean() {
    let tools: Vec<haip::Tool> = haip_examples::demo::tools()
        .into_iter()
        .chain(haip_everyday::tools())
        .collect();
    haip::lint::assert_clean(&tools);
}

//! The model's wire shapes, pinned as JSON; and, with the import's MCP SDK
//! at hand (feature `mcp-import`), read back by an MCP client's own types
//! and compared with what that SDK writes for the same message.

use serde_json::{Value, json};

use super::*;

fn wire<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap()
}

fn capabilities() -> ServerCapabilities {
    let mut extensions = BTreeMap::new();
    extensions.insert(TASKS_EXTENSION_ID.to_owned(), JsonObject::new());
    ServerCapabilities {
        extensions: Some(extensions),
        logging: Some(JsonObject::new()),
        tools: Some(ToolsCapability {
            list_changed: Some(true),
        }),
    }
}

fn info() -> InitializeResult {
    InitializeResult {
        protocol_version: ProtocolVersion::V_2025_11_25,
        capabilities: capabilities(),
        server_info: Implementation {
            name: "haip".to_owned(),
            version: "1.2.3".to_owned(),
        },
    }
}

fn task() -> Task {
    Task::new(
        "t-1".to_owned(),
        TaskStatus::Working,
        "2026-12-05T00:00:00Z".to_owned(),
        "2026-12-05T00:00:01Z".to_owned(),
    )
}

#[test]
fn request_ids_are_integers_or_strings() {
    let id = |v: Value| serde_json::from_value::<RequestId>(v);
    assert_eq!(id(json!(7)).unwrap(), RequestId::Number(7));
    assert_eq!(id(json!(-7)).unwrap(), RequestId::Number(-7));
    assert_eq!(id(json!("a")).unwrap(), RequestId::String("a".into()));
    assert_eq!(id(json!(1.0)).unwrap(), RequestId::Number(1));
    assert_eq!(id(json!(1e2)).unwrap(), RequestId::Number(100));
    assert!(id(json!(1.5)).is_err());
    assert!(id(json!(u64::MAX)).is_err());
    assert!(id(json!(null)).is_err());
    assert!(id(json!({})).is_err());
    assert_eq!(wire(&RequestId::Number(3)), json!(3));
    assert_eq!(wire(&RequestId::String("x".into())), json!("x"));
    assert_eq!(RequestId::String("x".into()).to_string(), "x");
}

#[test]
fn revisions_read_as_known_or_as_they_are() {
    let v: ProtocolVersion = serde_json::from_value(json!("2025-06-18")).unwrap();
    assert_eq!(v, ProtocolVersion::V_2025_06_18);
    let v: ProtocolVersion = serde_json::from_value(json!("2099-01-01")).unwrap();
    assert_eq!(v.as_str(), "2099-01-01");
    assert!(!v.has_initialize());
    assert!(ProtocolVersion::V_2025_11_25.has_initialize());
    assert!(!ProtocolVersion::V_2026_07_28.has_initialize());
    assert!(ProtocolVersion::V_2024_11_05 < ProtocolVersion::V_2026_07_28);
}

#[test]
fn errors_say_what_is_missing_or_unsupported() {
    let e = McpError::missing_required_client_capability(ClientCapabilities::tasks());
    assert_eq!(
        wire(&e),
        json!({"code": -32021, "message": "Missing required client capability",
               "data": {"requiredCapabilities": {"extensions": {TASKS_EXTENSION_ID: {}}}}})
    );
    let e = McpError::unsupported_protocol_version(
        ProtocolVersion::V_2024_11_05,
        &[ProtocolVersion::V_2026_07_28],
    );
    assert_eq!(
        wire(&e),
        json!({"code": -32022, "message": "Unsupported protocol version",
               "data": {"requested": "2024-11-05", "supported": ["2026-07-28"]}})
    );
    assert_eq!(
        wire(&McpError::invalid_params("bad", None)),
        json!({"code": -32602, "message": "bad"})
    );
}

#[test]
fn client_capabilities_read_as_declared() {
    let caps: ClientCapabilities = serde_json::from_value(json!({
        "elicitation": {}, "sampling": {"tools": {}}, "roots": {"listChanged": true},
        "extensions": {TASKS_EXTENSION_ID: {}}, "somethingNew": 1
    }))
    .unwrap();
    assert!(caps.supports_tasks());
    assert!(caps.elicitation.as_ref().unwrap().form.is_none());
    assert_eq!(caps.roots.as_ref().unwrap().list_changed, Some(true));
    assert!(!ClientCapabilities::default().supports_tasks());
    // An extension's settings are an object.
    let bad = serde_json::from_value::<ClientCapabilities>(json!({"extensions": {"x": 1}}));
    assert!(bad.is_err());
}

#[test]
fn initialize_and_discover_say_what_the_server_is() {
    assert_eq!(
        wire(&ServerResult::Initialize(info())),
        json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {
                "extensions": {TASKS_EXTENSION_ID: {}},
                "logging": {},
                "tools": {"listChanged": true}
            },
            "serverInfo": {"name": "haip", "version": "1.2.3"}
        })
    );
    let versions = vec![ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28];
    let discovered = DiscoverResult::from_server_info(versions, &info());
    assert_eq!(
        wire(&ServerResult::Discover(discovered)),
        json!({
            "resultType": "complete",
            "supportedVersions": ["2025-11-25", "2026-07-28"],
            "capabilities": wire(&capabilities()),
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "haip", "version": "1.2.3"}}
        })
    );
    let params: InitializeRequestParams = serde_json::from_value(json!({
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "c", "version": "1", "title": "C"}
    }))
    .unwrap();
    assert_eq!(params.protocol_version, ProtocolVersion::V_2025_06_18);
    let no_info = json!({"protocolVersion": "2025-06-18", "capabilities": {}});
    assert!(serde_json::from_value::<InitializeRequestParams>(no_info).is_err());
}

fn tool_list(output: Value) -> ServerResult {
    let Value::Object(output) = output else {
        unreachable!()
    };
    let mut tool = Tool::new(
        "t".to_owned(),
        "does".to_owned(),
        Arc::new(JsonObject::new()),
    );
    tool.output_schema = Some(Arc::new(output));
    ServerResult::ListTools(ListToolsResult::with_all_items(vec![Arc::new(tool)]))
}

#[test]
fn tool_lists_carry_cache_hints_for_2026_and_no_result_type_before() {
    let mut modern = tool_list(json!({"type": "array"}));
    modern.fill_missing_cache_hints();
    assert_eq!(
        wire(&modern),
        json!({"resultType": "complete", "ttlMs": 0, "cacheScope": "private",
               "tools": [{"name": "t", "description": "does", "inputSchema": {},
                          "outputSchema": {"type": "array"}}]})
    );
    let mut legacy = tool_list(json!({"type": "array"}));
    legacy.strip_result_type_for_legacy_peer();
    legacy.strip_non_object_output_for_legacy_peer();
    assert_eq!(
        wire(&legacy),
        json!({"tools": [{"name": "t", "description": "does", "inputSchema": {}}]})
    );
    let mut kept = tool_list(json!({"type": "object"}));
    kept.strip_non_object_output_for_legacy_peer();
    assert_eq!(
        wire(&kept)["tools"][0]["outputSchema"],
        json!({"type": "object"})
    );
}

#[test]
fn call_results_for_each_revision() {
    let mut result = CallToolResult::success(vec![ContentBlock::text("hi")]);
    result.structured_content = Some(json!(["a"]));
    let modern = ServerResult::CallTool(result.clone());
    assert_eq!(
        wire(&modern),
        json!({"resultType": "complete", "content": [{"type": "text", "text": "hi"}],
               "structuredContent": ["a"], "isError": false})
    );
    let mut legacy = ServerResult::CallTool(result);
    legacy.strip_result_type_for_legacy_peer();
    legacy.strip_non_object_output_for_legacy_peer();
    assert_eq!(
        wire(&legacy),
        json!({"content": [{"type": "text", "text": "[\"a\"]"}, {"type": "text", "text": "hi"}],
               "isError": false})
    );
    // The value already the first block's text is not added twice.
    let mut same = CallToolResult::error(vec![ContentBlock::text("[1]")]);
    same.structured_content = Some(json!([1]));
    let mut same = ServerResult::CallTool(same);
    same.strip_non_object_output_for_legacy_peer();
    assert_eq!(
        wire(&same),
        json!({"resultType": "complete", "content": [{"type": "text", "text": "[1]"}],
               "isError": true})
    );
    let rounds = InputRequiredResult::new(
        Some(BTreeMap::from([(
            "q".to_owned(),
            json!({"method": "roots/list"}),
        )])),
        Some("state".to_owned()),
    );
    assert_eq!(
        wire(&ServerResult::from(CallToolResponse::InputRequired(rounds))),
        json!({"resultType": "input_required", "inputRequests": {"q": {"method": "roots/list"}},
               "requestState": "state"})
    );
    assert_eq!(wire(&ServerResult::empty(())), json!({}));
    assert_eq!(
        wire(&ServerResult::task_ack(())),
        json!({"resultType": "complete"})
    );
}

#[test]
fn content_blocks_are_of_a_known_kind_with_their_fields() {
    let block = |v: Value| serde_json::from_value::<ContentBlock>(v);
    let image = json!({"type": "image", "data": "AA==", "mimeType": "image/png", "_meta": {}});
    assert_eq!(wire(&block(image.clone()).unwrap()), image);
    assert_eq!(
        block(json!({"type": "text", "text": "x"}))
            .unwrap()
            .as_text(),
        Some("x")
    );
    assert!(block(json!({"type": "resource", "resource": {"uri": "a", "text": "b"}})).is_ok());
    assert!(block(json!({"type": "resource_link", "uri": "a", "name": "b"})).is_ok());
    assert!(block(json!({"type": "text"})).is_err());
    assert!(block(json!({"type": "text", "text": 1})).is_err());
    assert!(block(json!({"type": "video", "data": ""})).is_err());
    assert!(block(json!({"text": "x"})).is_err());
    assert!(block(json!("x")).is_err());
}

#[test]
fn tasks_show_their_fields_then_what_their_status_carries() {
    let created = CreateTaskResult::new(task().with_ttl_ms(60_000).with_poll_interval_ms(1000));
    assert_eq!(
        wire(&ServerResult::from(CallToolResponse::Task(created))),
        json!({"resultType": "task", "taskId": "t-1", "status": "working",
               "createdAt": "2026-12-05T00:00:00Z", "lastUpdatedAt": "2026-12-05T00:00:01Z",
               "ttlMs": 60000, "pollIntervalMs": 1000})
    );
    let result = JsonObject::from_iter([("content".to_owned(), json!([]))]);
    let done = DetailedTask::new(
        task().with_status_message("done".to_owned()),
        TaskPayload::Completed { result },
    );
    assert_eq!(
        wire(&ServerResult::GetTask(GetTaskResult::new(done))),
        json!({"resultType": "complete", "taskId": "t-1", "status": "completed",
               "statusMessage": "done", "createdAt": "2026-12-05T00:00:00Z",
               "lastUpdatedAt": "2026-12-05T00:00:01Z", "ttlMs": null,
               "result": {"content": []}})
    );
    let asking = DetailedTask::new(
        task(),
        TaskPayload::InputRequired {
            input_requests: BTreeMap::from([("q".to_owned(), json!({"method": "roots/list"}))]),
        },
    );
    assert_eq!(wire(&asking)["status"], "input_required");
    assert_eq!(wire(&asking)["inputRequests"]["q"]["method"], "roots/list");
    let failed = DetailedTask::new(
        task(),
        TaskPayload::Failed {
            error: JsonObject::new(),
        },
    );
    assert_eq!(wire(&failed)["error"], json!({}));
    assert_eq!(
        wire(&DetailedTask::new(task(), TaskPayload::Cancelled))["status"],
        "cancelled"
    );
}

#[test]
fn notifications_params() {
    let progress = ProgressNotificationParam::new(ProgressToken(RequestId::Number(1)), 50.0)
        .with_total(100.0)
        .with_message("half".to_owned());
    assert_eq!(
        wire(&progress),
        json!({"progressToken": 1, "progress": 50.0, "total": 100.0, "message": "half"})
    );
    let log =
        LoggingMessageNotificationParam::new(LoggingLevel::Warning, json!("x")).with_logger("echo");
    assert_eq!(
        wire(&log),
        json!({"level": "warning", "logger": "echo", "data": "x"})
    );
    let level: SetLevelRequestParams = serde_json::from_value(json!({"level": "debug"})).unwrap();
    assert_eq!(level.level, LoggingLevel::Debug);
    assert!(serde_json::from_value::<SetLevelRequestParams>(json!({"level": "loud"})).is_err());
}

#[test]
fn subscription_filters_accept_what_both_sides_and_the_server_can() {
    let asked: SubscriptionFilter = serde_json::from_value(json!({
        "toolsListChanged": true, "promptsListChanged": true, "resourceSubscriptions": ["a"]
    }))
    .unwrap();
    let supported = asked.supported_by(&capabilities());
    assert_eq!(supported, SubscriptionFilter::tools_list_changed());
    let accepted = asked
        .intersection(&SubscriptionFilter::tools_list_changed())
        .intersection(&supported);
    assert_eq!(wire(&accepted), json!({"toolsListChanged": true}));
    let none = SubscriptionFilter::default().intersection(&supported);
    assert_eq!(wire(&none), json!({}));
    let ended = SubscriptionsListenResult::complete(&RequestId::Number(4), &info().server_info);
    assert_eq!(
        wire(&ServerResult::SubscriptionsListen(ended)),
        json!({"resultType": "complete", "_meta": {
            "io.modelcontextprotocol/subscriptionId": 4,
            "io.modelcontextprotocol/serverInfo": {"name": "haip", "version": "1.2.3"}
        }})
    );
}

#[test]
fn elicitation_forms_are_flat() {
    let form = |schema: Value| {
        check_elicitation(&json!({"mode": "form", "message": "?", "requestedSchema": schema}))
    };
    assert!(
        form(json!({"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"}, "ok": {"type": "boolean"},
        "pick": {"type": "string", "enum": ["a", "b"]},
        "many": {"type": "array", "items": {"type": "string", "enum": ["a"]}}
    }, "required": ["name"]}))
        .is_ok()
    );
    let nested = form(json!({"type": "object", "properties": {"inner": {"type": "object"}}}));
    assert!(nested.unwrap_err().contains("\"inner\""));
    assert!(form(json!({"type": "array"})).is_err());
    assert!(form(json!({"type": "object", "properties": {}, "required": [1]})).is_err());
    assert!(
        check_elicitation(&json!({"requestedSchema": {"type": "object", "properties": {}}}))
            .is_err()
    );
}

#[test]
fn sampling_requests_have_messages_and_a_limit() {
    let ok = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                    "maxTokens": 10});
    assert!(check_sampling(&ok).is_ok());
    let no_limit = json!({"messages": []});
    assert!(check_sampling(&no_limit).unwrap_err().contains("maxTokens"));
    let bad_role = json!({"messages": [{"role": "system", "content": {}}], "maxTokens": 1});
    assert!(check_sampling(&bad_role).unwrap_err().contains("role"));
}

/// An MCP client's own types read what haip writes, and the MCP SDK writes
/// the same JSON for the same message.
#[cfg(feature = "mcp-import")]
mod read_by_the_sdk {
    use rmcp::model as sdk;

    use super::*;

    fn read<T: serde::de::DeserializeOwned>(value: Value) -> T {
        match serde_json::from_value(value.clone()) {
            Ok(read) => read,
            Err(e) => panic!("the SDK cannot read {value}: {e}"),
        }
    }

    #[test]
    fn results_read_and_match() {
        let ours = ServerResult::Initialize(info());
        let theirs: sdk::InitializeResult = read(wire(&ours));
        assert_eq!(wire(&theirs), wire(&ours));

        let mut list = tool_list(json!({"type": "object"}));
        list.fill_missing_cache_hints();
        let theirs: sdk::ListToolsResult = read(wire(&list));
        assert_eq!(wire(&theirs), wire(&list));

        let mut result = CallToolResult::success(vec![ContentBlock::text("hi")]);
        result.structured_content = Some(json!({"a": 1}));
        let ours = ServerResult::CallTool(result);
        let theirs: sdk::CallToolResult = read(wire(&ours));
        assert_eq!(wire(&theirs), wire(&ours));

        let created = CreateTaskResult::new(task().with_ttl_ms(1));
        let theirs: sdk::CreateTaskResult = read(wire(&created));
        assert_eq!(wire(&theirs), wire(&created));

        let result = JsonObject::from_iter([("content".to_owned(), json!([]))]);
        let got = GetTaskResult::new(DetailedTask::new(task(), TaskPayload::Completed { result }));
        let theirs: sdk::GetTaskResult = read(wire(&got));
        assert_eq!(wire(&theirs), wire(&got));

        let versions = vec![ProtocolVersion::V_2026_07_28];
        let discovered = DiscoverResult::from_server_info(versions, &info());
        let theirs: sdk::DiscoverResult = read(wire(&discovered));
        assert_eq!(wire(&theirs), wire(&discovered));

        let ended = SubscriptionsListenResult::complete(
            &RequestId::String("s".into()),
            &info().server_info,
        );
        let theirs: sdk::SubscriptionsListenResult = read(wire(&ended));
        assert_eq!(wire(&theirs), wire(&ended));

        let e = McpError::missing_required_client_capability(ClientCapabilities::tasks());
        let theirs: sdk::ErrorData = read(wire(&e));
        assert_eq!(wire(&theirs), wire(&e));
        let mut tasks = sdk::ClientCapabilities::default();
        tasks.extensions = Some(BTreeMap::from([(
            sdk::TASKS_EXTENSION_ID.to_owned(),
            JsonObject::new(),
        )]));
        let theirs = sdk::ErrorData::missing_required_client_capability(tasks);
        assert_eq!(wire(&theirs), wire(&e));
    }

    #[test]
    fn a_tool_reads_and_matches() {
        let mut tool = Tool::new("t".to_owned(), "d".to_owned(), Arc::new(JsonObject::new()));
        tool.title = Some("T".to_owned());
        tool.annotations = Some(ToolAnnotations {
            read_only_hint: Some(true),
            ..ToolAnnotations::default()
        });
        tool.icons = Some(vec![Icon {
            src: "https://example.com/i.png".to_owned(),
            mime_type: Some("image/png".to_owned()),
            sizes: Some(vec!["48x48".to_owned()]),
            theme: Some(IconTheme::Dark),
        }]);
        tool.meta = Some(JsonObject::from_iter([(
            "haip/tags".to_owned(),
            json!(["a"]),
        )]));
        let theirs: sdk::Tool = read(wire(&tool));
        assert_eq!(wire(&theirs), wire(&tool));
    }

    #[test]
    fn notifications_read() {
        let progress =
            ProgressNotificationParam::new(ProgressToken(RequestId::String("p".into())), 1.0)
                .with_total(2.0);
        let theirs: sdk::ProgressNotificationParam = read(wire(&progress));
        assert_eq!(wire(&theirs), wire(&progress));
        #[allow(deprecated)]
        let theirs: sdk::LoggingMessageNotificationParam = read(wire(
            &LoggingMessageNotificationParam::new(LoggingLevel::Error, json!({"a": 1})),
        ));
        assert_eq!(wire(&theirs)["level"], "error");
        let task = DetailedTask::new(task(), TaskPayload::Working);
        let theirs: sdk::TaskStatusNotificationParams = read(wire(&task));
        assert_eq!(wire(&theirs), wire(&task));
    }

    #[test]
    fn what_a_client_sends_reads_alike() {
        let caps = json!({"elicitation": {"form": {}}, "sampling": {}, "roots": {},
                          "extensions": {TASKS_EXTENSION_ID: {}}});
        let ours: ClientCapabilities = read(caps.clone());
        let theirs: sdk::ClientCapabilities = read(caps);
        assert_eq!(wire(&ours), wire(&theirs));
        let call = json!({"name": "t", "arguments": {"a": 1}, "inputResponses": {"q": {}},
                          "requestState": "s", "_meta": {"progressToken": 1}});
        let ours: CallToolRequestParams = read(call.clone());
        let theirs: sdk::CallToolRequestParams = read(call);
        assert_eq!(ours.name, theirs.name);
        assert_eq!(ours.arguments, theirs.arguments);
        assert_eq!(ours.request_state, theirs.request_state);
    }
}

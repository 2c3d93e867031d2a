use proptest::prelude::*;
use serde_json::json;

use super::runs::RunStatus;
use super::*;
use crate::protocol::decode;

fn map(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

/// Encodes with both encoders, checks they agree, and decodes again.
fn round_trip<P: Payload + fmt::Debug + PartialEq>(p: &P) -> P {
    let value = p.to_value();
    let text = p.to_json();
    let parsed: Value = serde_json::from_slice(&text).unwrap();
    assert_eq!(parsed, value, "to_json and to_value agree");
    P::from_payload(map(value)).unwrap()
}

/// Decodes one envelope text into its event.
fn event(text: &str) -> (Result<InboundEvent, PayloadError>, Inbound) {
    let mut inbound = decode(text).unwrap();
    let event = InboundEvent::decode(&mut inbound);
    (event, inbound)
}

fn envelope(ty: &str, payload: Value) -> String {
    json!({"id": "e-1", "type": ty, "payload": payload}).to_string()
}

/// The capabilities of the `HAI` docs/protocol.md §3.1 shows.
fn spec_capabilities() -> Capabilities {
    Capabilities {
        binary_frames: Some(true),
        flow_control: Some(FlowControl {
            initial_credit_messages: Some(1000),
            initial_credit_bytes: Some(1_048_576),
        }),
        max_concurrent_runs: Some(10),
        signed_envelopes: Some(false),
        ..Capabilities::default()
    }
}

/// A `TOOL_LIST` of `echo` (with a description), `bare` (nothing but its
/// name), and `last`.
fn echo_bare_and(last: ToolListItem) -> ToolList {
    ToolList {
        tools: vec![
            ToolListItem {
                name: "echo".into(),
                description: "Echo back the input".into(),
                ..ToolListItem::default()
            },
            ToolListItem {
                name: "bare".into(),
                ..ToolListItem::default()
            },
            last,
        ],
    }
}

#[test]
fn every_payload_round_trips() {
    hai_round_trips();
    tool_discovery_round_trips();
    call_payloads_round_trip();
    run_payloads_round_trip();
    system_payloads_round_trip();
}

/// `HAI`, with every capability.
fn hai_round_trips() {
    let mut caps = Capabilities {
        tool_input: Some(true),
        log_level: Some("debug".into()),
        schema_profile: Some("openai-strict".into()),
        ..spec_capabilities()
    };
    caps.other.insert("x_custom".into(), json!({"a": [1]}));
    let hai = Hai {
        capabilities: Some(caps),
        last_rx_seq: Some(LastRxSeq::Seq(12)),
        binary_frames: Some(false),
        max_concurrent_runs: Some(3),
        ..Hai::new()
    };
    assert_eq!(round_trip(&hai), hai);
}

/// `TOOL_LIST` and `TOOL_SCHEMA`, requests and answers.
fn tool_discovery_round_trips() {
    assert_eq!(round_trip(&ToolListRequest {}), ToolListRequest {});
    let list = echo_bare_and(ToolListItem {
        name: "delete_repo".into(),
        description: "Delete a repository".into(),
        title: Some("Delete a repository".into()),
        annotations: ToolAnnotations::new().destructive(true).open_world(false),
        icons: vec![
            Icon::new("https://example.com/trash.svg")
                .with_mime_type("image/svg+xml")
                .with_sizes(["48x48", "any"])
                .with_theme(crate::protocol::IconTheme::Dark),
            Icon::new("data:image/png;base64,AAAA"),
        ],
    });
    assert_eq!(round_trip(&list), list);
    for profile in [None, Some("full".into())] {
        let request = ToolSchemaRequest {
            tool: "echo".into(),
            profile,
        };
        assert_eq!(round_trip(&request), request);
    }
    let schema = ToolSchema {
        tool: "echo".into(),
        input_schema: json!({"type": "object"}),
        output_schema: Some(json!({"type": "object", "properties": {}})),
        schema: Some(json!({"type": "object"})),
        title: None,
        annotations: ToolAnnotations::default(),
        icons: Vec::new(),
    };
    assert_eq!(round_trip(&schema), schema);
    let schema = ToolSchema {
        title: Some("Echo".into()),
        annotations: ToolAnnotations::new().read_only(true),
        icons: vec![Icon::new("https://example.com/echo.png")],
        ..schema
    };
    assert_eq!(round_trip(&schema), schema);
}

/// A call's payloads: `TOOL_CALL`, `TOOL_CANCEL`, `TOOL_UPDATE`, `TOOL_DONE`.
fn call_payloads_round_trip() {
    let call = ToolCall {
        run_id: Some("r-1".into()),
        ..ToolCall::new("c-1", "echo", json!({"message": "hi"}))
    };
    assert_eq!(round_trip(&call), call);
    let cancel = ToolCancel {
        call_id: "c-1".into(),
        reason: Some("user closed panel".into()),
    };
    assert_eq!(round_trip(&cancel), cancel);
    let update = ToolUpdate {
        progress: Some(40.into()),
        partial: Some(json!({"rows_done": 400})),
        ..ToolUpdate::new("c-4", UpdateStatus::Running)
    };
    assert_eq!(round_trip(&update), update);
    assert_eq!(update.clone().into_value(), update.to_value());
    for done in [
        ToolDone::ok("c-1", Some(json!({"echoed": "hi"}))),
        ToolDone::ok("c-1", None),
        ToolDone::cancelled("c-1", Some("enough".into())),
        ToolDone::cancelled("c-1", None),
        ToolDone::failed(
            "c-3",
            ToolFailure {
                total: Some(2),
                ..ToolFailure::new(ErrorCode::INVALID_PARAMS, "Invalid params for tool add")
                    .with_details(json!([{"path": "/a", "message": "m"}]))
            },
        ),
    ] {
        assert_eq!(round_trip(&done), done);
    }
}

/// `RUN_STARTED`, `RUN_FINISHED`, `RUN_CANCEL`, `RUN_ERROR`.
fn run_payloads_round_trip() {
    let started = RunStarted {
        run_id: Some("r".into()),
        thread_id: Some("t".into()),
        metadata: Some(map(json!({"k": 1}))),
        other: map(json!({"anything": [true]})),
    };
    assert_eq!(round_trip(&started), started);
    let finished = RunFinished {
        run_id: "r".into(),
        status: RunStatus::Cancelled,
        summary: Some("s".into()),
    };
    assert_eq!(round_trip(&finished), finished);
    let cancel = RunCancel { run_id: "r".into() };
    assert_eq!(round_trip(&cancel), cancel);
    let run_error = RunError {
        code: "E".into(),
        message: "m".into(),
        run_id: Some("r".into()),
        related_id: Some("x".into()),
        detail: Some(map(json!({"k": "v"}))),
    };
    assert_eq!(round_trip(&run_error), run_error);
}

/// `PING`/`PONG`, `REPLAY_REQUEST`, `ERROR` and flow control.
fn system_payloads_round_trip() {
    assert_eq!(round_trip(&Ping::new("n")), Ping::new("n"));
    assert_eq!(round_trip(&Ping::new("n").pong()), Ping::new("n").pong());
    for replay in [
        ReplayRequest {
            from_seq: 3,
            to_seq: Some(u64::MAX),
        },
        ReplayRequest {
            from_seq: 0,
            to_seq: None,
        },
    ] {
        assert_eq!(round_trip(&replay), replay);
    }
    let error = Error {
        related_id: Some("call-2".into()),
        detail: Some(map(json!({"call_id": "c-2", "tool": "nope"}))),
        ..Error::new(ErrorCode::TOOL_NOT_FOUND, "Tool nope not found")
    };
    assert_eq!(round_trip(&error), error);
    let flow = FlowUpdate {
        channel: "USER".into(),
        add_messages: NonZeroU64::new(5),
        add_bytes: NonZeroU64::new(900),
    };
    assert_eq!(round_trip(&flow), flow);
    let pause = PauseChannel {
        channel: "AGENT".into(),
    };
    assert_eq!(round_trip(&pause), pause);
    let resume = ResumeChannel {
        channel: "AGENT".into(),
    };
    assert_eq!(round_trip(&resume), resume);
}

/// What the server writes is exactly what docs/protocol.md §3.1 and §6.10 show.
#[test]
fn encoding_matches_the_spec_examples() {
    hai_encoding_matches_the_spec();
    tool_done_encoding_matches_the_spec();
    update_and_list_encoding_match_the_spec();
    other_encodings_match_the_spec();
}

/// `HAI` as docs/protocol.md §3.1 shows it.
fn hai_encoding_matches_the_spec() {
    let hai = Hai {
        capabilities: Some(spec_capabilities()),
        ..Hai::new()
    };
    assert_eq!(
        hai.to_value(),
        json!({"haip_version":"1.1.2","accept_major":[1],
           "accept_events":["HAI","RUN_STARTED","RUN_FINISHED","RUN_CANCEL","RUN_ERROR","PING","PONG","REPLAY_REQUEST",
             "TEXT_MESSAGE_START","TEXT_MESSAGE_PART","TEXT_MESSAGE_END","AUDIO_CHUNK","TOOL_CALL","TOOL_UPDATE",
             "TOOL_DONE","TOOL_CANCEL","TOOL_LIST","TOOL_SCHEMA","ERROR","FLOW_UPDATE","PAUSE_CHANNEL","RESUME_CHANNEL"],
           "capabilities":{"binary_frames":true,"flow_control":{"initial_credit_messages":1000,"initial_credit_bytes":1048576},
             "max_concurrent_runs":10,"signed_envelopes":false}})
    );
    // A HAI missing its required fields is still written complete.
    assert_eq!(Hai::default().to_value(), Hai::new().to_value());
    let confirm = Hai {
        last_rx_seq: Some(LastRxSeq::Seq(7)),
        ..Hai::new()
    };
    assert_eq!(confirm.to_value()["last_rx_seq"], "7");
    let invalid = Hai {
        last_rx_seq: Some(LastRxSeq::Invalid),
        ..Hai::new()
    };
    assert!(invalid.to_value().get("last_rx_seq").is_none());
}

/// `TOOL_DONE` of each status, with and without a result.
fn tool_done_encoding_matches_the_spec() {
    let text = |json: Vec<u8>| String::from_utf8(json).unwrap();
    let done = ToolDone::ok("c-1", Some(json!({"echoed": "Hello, HAIP Server!"})));
    assert_eq!(
        text(done.to_json()),
        r#"{"call_id":"c-1","status":"OK","result":{"echoed":"Hello, HAIP Server!"}}"#
    );
    let done = ToolDone::failed(
        "c-2",
        ToolFailure::new(ErrorCode::TOOL_NOT_FOUND, "Tool nope not found"),
    );
    assert_eq!(
        text(done.to_json()),
        r#"{"call_id":"c-2","status":"ERROR","result":{"error":"Tool nope not found","code":"TOOL_NOT_FOUND"}}"#
    );
    let done = ToolDone::cancelled("c-4", Some("user closed panel".into()));
    assert_eq!(
        text(done.to_json()),
        r#"{"call_id":"c-4","status":"CANCELLED","result":{"reason":"user closed panel"}}"#
    );
    // A null value is no result; no reason is no result.
    let done = ToolDone::ok("c", Some(Value::Null));
    assert_eq!(text(done.to_json()), r#"{"call_id":"c","status":"OK"}"#);
    let done = ToolDone::cancelled("c", None);
    assert_eq!(
        text(done.to_json()),
        r#"{"call_id":"c","status":"CANCELLED"}"#
    );
}

/// `TOOL_UPDATE` and `TOOL_LIST`.
fn update_and_list_encoding_match_the_spec() {
    let text = |json: Vec<u8>| String::from_utf8(json).unwrap();
    let update = ToolUpdate {
        progress: Some(40.into()),
        partial: Some(json!({"rows_done": 400})),
        ..ToolUpdate::new("c-4", UpdateStatus::Running)
    };
    assert_eq!(
        text(update.to_json()),
        r#"{"call_id":"c-4","status":"RUNNING","progress":40,"partial":{"rows_done":400}}"#
    );
    let queued = ToolUpdate::new("c-65", UpdateStatus::Queued);
    assert_eq!(
        text(queued.to_json()),
        r#"{"call_id":"c-65","status":"QUEUED"}"#
    );
    let list = echo_bare_and(ToolListItem {
        name: "wipe".into(),
        title: Some("Wipe".into()),
        annotations: ToolAnnotations::new().destructive(true),
        icons: vec![Icon::new("w.svg")],
        ..ToolListItem::default()
    });
    // Only what is there; a tool that declares nothing has no
    // `title`, `annotations` or `icons` (docs/protocol.md §6.2, §6.13).
    assert_eq!(
        text(list.to_json()),
        concat!(
            r#"{"tools":[{"name":"echo","description":"Echo back the input"},{"name":"bare"},"#,
            r#"{"name":"wipe","title":"Wipe","annotations":{"destructiveHint":true},"icons":[{"src":"w.svg"}]}]}"#
        )
    );
}

/// `PONG`, `REPLAY_REQUEST`, `ERROR`, `TOOL_CALL`, and non-ASCII text.
fn other_encodings_match_the_spec() {
    let text = |json: Vec<u8>| String::from_utf8(json).unwrap();
    assert_eq!(text(Ping::default().pong().to_json()), "{}");
    assert_eq!(
        text(
            ReplayRequest {
                from_seq: 1,
                to_seq: Some(20)
            }
            .to_json()
        ),
        r#"{"from_seq":"1","to_seq":"20"}"#
    );
    let error = Error {
        related_id: Some("call-2".into()),
        detail: Some(map(json!({"call_id": "c-2", "tool": "nope"}))),
        ..Error::new(ErrorCode::TOOL_NOT_FOUND, "Tool nope not found")
    };
    assert_eq!(
        error.to_value(),
        json!({"code":"TOOL_NOT_FOUND","message":"Tool nope not found","related_id":"call-2","detail":{"call_id":"c-2","tool":"nope"}})
    );
    let call = ToolCall::new("c-1", "echo", json!({"message": "hi"}));
    assert_eq!(
        text(call.to_json()),
        r#"{"call_id":"c-1","tool":"echo","params":{"message":"hi"}}"#
    );
    // Non-ASCII stays raw UTF-8 (docs/protocol.md §2.4).
    let done = ToolDone::ok("c", Some(json!({"temperature": "22°C"})));
    assert!(text(done.to_json()).contains("22°C"));
}

#[test]
fn tool_done_from_parts_is_the_serde_encoding() {
    for (call_id, status, result) in [
        ("c-1", ToolStatus::Ok, Some(&br#"{"a":[1,2]}"#[..])),
        (
            "c\"2\n",
            ToolStatus::Error,
            Some(&br#"{"error":"e","code":"X"}"#[..]),
        ),
        ("c-3", ToolStatus::Cancelled, None),
    ] {
        let parts = ToolDone::json_from_parts(call_id, status, result);
        let mut expected = json!({"call_id": call_id, "status": status.as_str()});
        if let Some(result) = result {
            expected["result"] = serde_json::from_slice(result).unwrap();
        }
        assert_eq!(serde_json::from_slice::<Value>(&parts).unwrap(), expected);
    }
}

#[test]
fn tool_calls_are_read_leniently() {
    // Numeric call id, no params, unknown fields.
    let (call, _) = event(&envelope(
        "TOOL_CALL",
        json!({"call_id": 7, "tool": "echo", "extra": {"x": 1}}),
    ));
    assert_eq!(
        call.unwrap(),
        InboundEvent::ToolCall(ToolCall {
            call_id: "7".into(),
            tool: Some("echo".into()),
            params: json!({}),
            run_id: None,
            meta: None,
        })
    );
    // A `_meta` object is kept (trace context, docs/protocol.md §6.15); anything else
    // is ignored.
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let (call, _) = event(&envelope(
        "TOOL_CALL",
        json!({"call_id": "m", "tool": "echo", "_meta": {"traceparent": traceparent}}),
    ));
    let InboundEvent::ToolCall(call) = call.unwrap() else {
        panic!("a call")
    };
    assert_eq!(call.meta.unwrap()["traceparent"], traceparent);
    let (call, _) = event(&envelope(
        "TOOL_CALL",
        json!({"call_id": "m", "tool": "echo", "_meta": "no"}),
    ));
    let InboundEvent::ToolCall(call) = call.unwrap() else {
        panic!("a call")
    };
    assert_eq!(call.meta, None);
    // No call id: the envelope id; params null is {}; payload run_id kept.
    let (call, inbound) = event(&envelope(
        "TOOL_CALL",
        json!({"call_id": true, "tool": 5, "params": null, "run_id": "r"}),
    ));
    let InboundEvent::ToolCall(call) = call.unwrap() else {
        panic!("a call")
    };
    assert_eq!(
        (call.call_id.as_str(), call.tool, &call.params),
        ("e-1", None, &json!({}))
    );
    assert_eq!(call.run_id.as_deref(), Some("r"));
    // The payload moved out; the envelope stays.
    assert!(inbound.payload.is_empty());
    assert_eq!(inbound.id.as_deref(), Some("e-1"));
    // Neither: a new UUID.
    let (call, _) = event(r#"{"type":"TOOL_CALL","payload":{"tool":"echo","params":[1]}}"#);
    let InboundEvent::ToolCall(call) = call.unwrap() else {
        panic!("a call")
    };
    assert!(
        uuid::Uuid::parse_str(&call.call_id).is_ok(),
        "{}",
        call.call_id
    );
    assert_eq!(
        call.params,
        json!([1]),
        "params other than null are as sent"
    );
    // Standalone, with no envelope to fall back on, the call id is missing.
    let err = ToolCall::from_payload(map(json!({"tool": "echo"}))).unwrap_err();
    assert_eq!(
        (err.field.as_str(), &err.problem),
        ("call_id", &Problem::Missing)
    );
}

#[test]
fn seq_like_fields_take_integers_and_decimal_strings() {
    let replay = ReplayRequest::from_payload(map(json!({"from_seq": "3", "to_seq": 9}))).unwrap();
    assert_eq!(
        replay,
        ReplayRequest {
            from_seq: 3,
            to_seq: Some(9)
        }
    );
    let hai = Hai::from_payload(map(
        json!({"last_rx_seq": "12", "accept_major": ["1", 2, "x", 1.5]}),
    ))
    .unwrap();
    assert_eq!(hai.last_rx_seq, Some(LastRxSeq::Seq(12)));
    assert_eq!(hai.accept_major, Some(vec![1, 2]));
    assert!(hai.is_compatible());
    let hai = Hai::from_payload(map(json!({"last_rx_seq": -1, "accept_major": [2, "2"]}))).unwrap();
    assert_eq!(hai.last_rx_seq, Some(LastRxSeq::Invalid));
    assert!(!hai.is_compatible());
}

#[test]
fn missing_and_odd_optional_fields_take_their_defaults() {
    // A bare client HAI: compatible, every event, no resumption.
    let hai = Hai::from_payload(Map::new()).unwrap();
    assert_eq!(hai, Hai::default());
    assert!(hai.is_compatible());
    assert_eq!(hai.accepted_events(), None);
    let hai = Hai::from_payload(map(json!({
        "accept_major": 1,
        "accept_events": ["PING", 3, "NOPE", "TOOL_LIST"],
        "capabilities": {"flow_control": {"initial_credit_messages": "10"}, "binary_frames": "yes", "z": 1},
        "binary_frames": true,
        "unknown": {}
    })))
    .unwrap();
    assert_eq!(hai.accept_major, None, "not an array: compatible");
    assert_eq!(
        hai.accept_events.as_deref(),
        Some(&["PING".to_owned(), "NOPE".to_owned(), "TOOL_LIST".to_owned()][..])
    );
    assert_eq!(
        hai.accepted_events(),
        Some(vec![EventType::Ping, EventType::ToolList])
    );
    let caps = hai.capabilities.unwrap();
    assert_eq!(caps.flow_control, Some(FlowControl::default()));
    assert_eq!(caps.binary_frames, None);
    assert_eq!(caps.other, map(json!({"z": 1})));
    assert_eq!(hai.binary_frames, Some(true));
    // TOOL_DONE: status defaults to OK; null result is none.
    let done = ToolDone::from_payload(map(json!({"call_id": "c", "result": null}))).unwrap();
    assert_eq!(done, ToolDone::ok("c", None));
    // A cancellation with an odd result is one without a reason.
    let done = ToolDone::from_payload(map(
        json!({"call_id": "c", "status": "CANCELLED", "result": {"reason": 5}}),
    ))
    .unwrap();
    assert_eq!(done, ToolDone::cancelled("c", None));
    // TOOL_CANCEL: a non-string reason is no reason.
    let cancel = ToolCancel::from_payload(map(json!({"call_id": "c", "reason": 1}))).unwrap();
    assert_eq!(cancel.reason, None);
    // FLOW_UPDATE: non-positive or non-integer credit is none.
    let flow = FlowUpdate::from_payload(map(
        json!({"channel": "X", "add_messages": 0, "add_bytes": "5"}),
    ))
    .unwrap();
    assert_eq!((flow.add_messages, flow.add_bytes), (None, None));
    // RUN_FINISHED: an unknown status is OK.
    let finished =
        RunFinished::from_payload(map(json!({"run_id": "r", "status": "DONE"}))).unwrap();
    assert_eq!(finished.status, RunStatus::Ok);
    // RUN_ERROR, ERROR: nothing is required.
    let run_error = RunError::from_payload(Map::new()).unwrap();
    assert_eq!(
        (run_error.code.as_str(), run_error.message.as_str()),
        ("", "")
    );
    let error = Error::from_payload(map(json!({"code": 5, "related_id": "r"}))).unwrap();
    assert_eq!(
        (
            error.code.as_str(),
            error.message.as_str(),
            error.related_id.as_deref()
        ),
        ("", "", Some("r"))
    );
    // TOOL_UPDATE: unknown statuses are kept, a non-number progress is none.
    let update = ToolUpdate::from_payload(map(
        json!({"call_id": 4, "status": "WAITING_INPUT", "progress": "50"}),
    ))
    .unwrap();
    assert_eq!(
        (update.call_id.as_str(), &update.status, update.progress),
        ("4", &UpdateStatus::WaitingInput, None)
    );
    let update = ToolUpdate::from_payload(map(json!({"call_id": "c", "status": "LATER"}))).unwrap();
    assert_eq!(update.status, UpdateStatus::Other("LATER".into()));
    assert_eq!(update.to_value()["status"], "LATER");
    // TOOL_SCHEMA reply: the legacy `schema` stands in for `inputSchema`.
    let schema =
        ToolSchema::from_payload(map(json!({"tool": "t", "schema": {"type": "object"}}))).unwrap();
    assert_eq!(schema.input_schema, json!({"type": "object"}));
    // Annotations and icons of the wrong type are absent, not errors.
    let schema = ToolSchema::from_payload(map(json!({
        "tool": "t", "inputSchema": {}, "title": 5, "annotations": [true],
        "icons": [{"src": "i.png", "theme": "sepia"}, {"src": 1}]
    })))
    .unwrap();
    assert_eq!(schema.title, None);
    assert!(schema.annotations.is_empty());
    assert_eq!(schema.icons, [Icon::new("i.png")]);
    let list = ToolList::from_payload(map(json!({"tools": [
        {"name": "a", "annotations": {"readOnlyHint": 1, "openWorldHint": false}, "icons": "x.png"}
    ]})))
    .unwrap();
    assert_eq!(
        list.tools[0].annotations,
        ToolAnnotations::new().open_world(false)
    );
    assert!(list.tools[0].icons.is_empty());
    // PING: any nonce is copied unchanged, even a number.
    let ping = Ping::from_payload(map(json!({"nonce": 5}))).unwrap();
    assert_eq!(ping.pong().to_value(), json!({"nonce": 5}));
}

#[test]
fn accept_major_takes_1_or_its_decimal_string_only() {
    let majors = |v: Value| {
        let hai = Hai::from_payload(map(json!({ "accept_major": v }))).unwrap();
        (hai.accept_major.clone(), hai.is_compatible())
    };
    assert_eq!(majors(json!([1])), (Some(vec![1]), true));
    assert_eq!(majors(json!(["1", 2])), (Some(vec![1, 2]), true));
    // docs/protocol.md §3.2: an array containing neither `1` nor `"1"`.
    assert_eq!(majors(json!(["01", 1.0, "x"])), (Some(vec![]), false));
    assert_eq!(majors(json!(["2"])), (Some(vec![2]), false));
    assert_eq!(majors(json!("1")), (None, true));
}

#[test]
fn wrong_types_are_clear_errors() {
    let err = |r: Result<(), PayloadError>| r.unwrap_err().to_string();
    let check = |text: String, expected: &str| assert_eq!(text, expected);
    check(
        err(ToolSchemaRequest::from_payload(map(json!({"tool": 5}))).map(drop)),
        "TOOL_SCHEMA payload.tool: expected a string, found a number",
    );
    check(
        err(ToolSchemaRequest::from_payload(Map::new()).map(drop)),
        "TOOL_SCHEMA payload.tool: missing",
    );
    check(
        err(ReplayRequest::from_payload(map(json!({"from_seq": "-1"}))).map(drop)),
        r#"REPLAY_REQUEST payload.from_seq: expected a non-negative integer, found "-1""#,
    );
    check(
        err(ReplayRequest::from_payload(map(json!({"from_seq": 1, "to_seq": [2]}))).map(drop)),
        "REPLAY_REQUEST payload.to_seq: expected an integer or a decimal string, found an array",
    );
    check(
        err(ToolCancel::from_payload(map(json!({"call_id": 5}))).map(drop)),
        "TOOL_CANCEL payload.call_id: expected a string, found a number",
    );
    check(
        err(
            ToolList::from_payload(map(json!({"tools": [{"name": "a"}, {"description": "d"}]})))
                .map(drop),
        ),
        "TOOL_LIST payload.tools[1].name: missing",
    );
    check(
        err(ToolList::from_payload(map(json!({"tools": ["a"]}))).map(drop)),
        "TOOL_LIST payload.tools[0]: expected an object, found a string",
    );
    check(
        err(FlowUpdate::from_payload(map(json!({"add_messages": 5}))).map(drop)),
        "FLOW_UPDATE payload.channel: missing",
    );
    // A TOOL_DONE whose outcome cannot be read names its call.
    let done = |v: Value| ToolDone::from_payload(map(v)).unwrap_err();
    let e = done(json!({"call_id": "c-9", "status": "FAILED"}));
    assert_eq!(
        (e.to_string().as_str(), e.call_id.as_deref()),
        (
            r#"TOOL_DONE payload.status: expected OK, ERROR or CANCELLED, found "FAILED""#,
            Some("c-9")
        )
    );
    let e = done(json!({"call_id": "c-9", "status": "ERROR", "result": {"error": "boom"}}));
    assert_eq!(e.field, "result.code");
    assert_eq!(e.call_id.as_deref(), Some("c-9"));
    let e = done(json!({"call_id": "c-9", "status": "ERROR"}));
    assert_eq!(
        (e.field.as_str(), &e.problem),
        ("result", &Problem::Missing)
    );
    let e = done(json!({"status": "OK"}));
    assert_eq!((e.field.as_str(), e.call_id), ("call_id", None));
    let e = ToolUpdate::from_payload(map(json!({"call_id": "u", "status": 3}))).unwrap_err();
    assert_eq!(
        (e.field.as_str(), e.call_id.as_deref()),
        ("status", Some("u"))
    );
}

#[test]
fn inbound_errors_carry_the_reply_haip_prescribes() {
    let reply = |text: &str| {
        let (event, _) = event(text);
        event.unwrap_err().reply().map(|e| e.to_value())
    };
    assert_eq!(
        reply(&envelope("TOOL_SCHEMA", json!({}))),
        Some(
            json!({"code": "INVALID_MESSAGE", "message": "Invalid message format", "related_id": "e-1", "detail": {"reason": "missing tool"}})
        )
    );
    assert_eq!(
        reply(&envelope(
            "REPLAY_REQUEST",
            json!({"from_seq": 1, "to_seq": "x"})
        )),
        Some(
            json!({"code": "INVALID_MESSAGE", "message": "Invalid message format", "related_id": "e-1", "detail": {"reason": "invalid to_seq"}})
        )
    );
    assert_eq!(
        reply(r#"{"type":"REPLAY_REQUEST","payload":{}}"#),
        Some(
            json!({"code": "INVALID_MESSAGE", "message": "Invalid message format", "detail": {"reason": "invalid from_seq"}})
        )
    );
    for ty in ["RUN_FINISHED", "RUN_CANCEL"] {
        assert_eq!(
            reply(&envelope(ty, json!({"run_id": 5}))),
            Some(
                json!({"code": "MISSING_RUN_ID", "message": "Run ID is required", "related_id": "e-1"})
            )
        );
    }
    // Ignored silently (docs/protocol.md §6.7, §12.2).
    assert_eq!(reply(&envelope("TOOL_CANCEL", json!({"call_id": 1}))), None);
    assert_eq!(reply(&envelope("FLOW_UPDATE", json!({}))), None);
    assert_eq!(
        reply(&envelope("PAUSE_CHANNEL", json!({"channel": 1}))),
        None
    );
    assert_eq!(reply(&envelope("RESUME_CHANNEL", json!({}))), None);
}

#[test]
fn run_ids_fall_back_on_the_envelope() {
    let text = |ty: &str, payload: Value| {
        json!({"type": ty, "run_id": "env", "payload": payload}).to_string()
    };
    let (e, _) = event(&text("RUN_CANCEL", json!({})));
    assert_eq!(
        e.unwrap(),
        InboundEvent::RunCancel(RunCancel {
            run_id: "env".into()
        })
    );
    let (e, _) = event(&text(
        "RUN_FINISHED",
        json!({"run_id": "own", "status": "ERROR"}),
    ));
    assert_eq!(
        e.unwrap(),
        InboundEvent::RunFinished(RunFinished {
            run_id: "own".into(),
            status: RunStatus::Error,
            summary: None
        })
    );
    let (e, _) = event(&text("RUN_STARTED", json!({"x": 1})));
    let InboundEvent::RunStarted(run) = e.unwrap() else {
        panic!("a run")
    };
    assert_eq!(
        (run.run_id.as_deref(), &run.other),
        (Some("env"), &map(json!({"x": 1})))
    );
    let (e, _) = event(&text("RUN_ERROR", json!({"code": "X"})));
    let InboundEvent::RunError(run) = e.unwrap() else {
        panic!("a run error")
    };
    assert_eq!(run.run_id.as_deref(), Some("env"));
    let (e, _) = event(r#"{"type":"RUN_STARTED","payload":{}}"#);
    assert_eq!(e.unwrap(), InboundEvent::RunStarted(RunStarted::default()));
}

#[test]
fn what_the_server_does_not_act_on_passes_through_untouched() {
    for (ty, payload) in [
        ("TOOL_LIST", json!({"tools": [{"name": "mine"}]})),
        ("TOOL_SCHEMA", json!({"tool": "mine", "inputSchema": {}})),
        ("TOOL_SCHEMA", json!({"tool": "mine", "schema": {}})),
        ("TOOL_DONE", json!({"call_id": "c", "status": "WHATEVER"})),
        ("TOOL_UPDATE", json!({})),
        ("ERROR", json!({"code": 5})),
        ("PONG", json!({"nonce": "n"})),
        ("TEXT_MESSAGE_PART", json!({"content": "hi"})),
        ("AUDIO_CHUNK", json!({})),
    ] {
        let (e, inbound) = event(&envelope(ty, payload.clone()));
        assert_eq!(e.unwrap(), InboundEvent::Other, "{ty}");
        assert_eq!(Value::Object(inbound.payload), payload, "{ty}");
    }
    // A TOOL_LIST whose `tools` is no array is a request.
    let (e, _) = event(&envelope("TOOL_LIST", json!({"tools": "no"})));
    assert_eq!(e.unwrap(), InboundEvent::ToolList(ToolListRequest {}));
}

#[test]
fn every_acted_on_event_decodes() {
    let cases = [
        ("HAI", json!({}), "Hai"),
        ("TOOL_LIST", json!({}), "ToolList"),
        ("TOOL_SCHEMA", json!({"tool": "echo"}), "ToolSchema"),
        ("TOOL_CALL", json!({}), "ToolCall"),
        ("TOOL_CANCEL", json!({"call_id": "c"}), "ToolCancel"),
        ("RUN_STARTED", json!({}), "RunStarted"),
        ("RUN_FINISHED", json!({"run_id": "r"}), "RunFinished"),
        ("RUN_CANCEL", json!({"run_id": "r"}), "RunCancel"),
        ("RUN_ERROR", json!({}), "RunError"),
        ("PING", json!({}), "Ping"),
        ("REPLAY_REQUEST", json!({"from_seq": 0}), "ReplayRequest"),
        ("FLOW_UPDATE", json!({"channel": "USER"}), "FlowUpdate"),
        ("PAUSE_CHANNEL", json!({"channel": "AGENT"}), "PauseChannel"),
        (
            "RESUME_CHANNEL",
            json!({"channel": "AGENT"}),
            "ResumeChannel",
        ),
    ];
    for (ty, payload, variant) in cases {
        let (e, _) = event(&envelope(ty, payload));
        let debug = format!("{:?}", e.unwrap());
        assert!(debug.starts_with(&format!("{variant}(")), "{ty}: {debug}");
    }
}

#[test]
fn decode_errors_become_error_payloads() {
    let err = decode(r#"{"id":"x","type":"NOPE","payload":{}}"#).unwrap_err();
    assert_eq!(
        Error::from(err).to_value(),
        json!({"code": "UNSUPPORTED_TYPE", "message": "Unknown message type: NOPE", "related_id": "x", "detail": {"type": "NOPE"}})
    );
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9_-]{0,12}",
        any::<String>(),
        Just("22°C \"q\" \\ \u{1}".to_owned()),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // Quarters: exact in binary, so they survive the text round trip.
        (-4000i32..4000).prop_map(|n| Value::from(f64::from(n) / 4.0)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(text(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn tool_done() -> impl Strategy<Value = ToolDone> {
    let outcome = prop_oneof![
        proptest::option::of(json_value())
            .prop_map(|v| ToolOutcome::Ok(v.filter(|v| !v.is_null()))),
        (
            text(),
            text(),
            proptest::option::of(json_value()),
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(|(code, message, details, total, total_at_least)| {
                ToolOutcome::Error(ToolFailure {
                    message,
                    code: ErrorCode::new(code),
                    details: details.filter(|v| !v.is_null()),
                    total,
                    total_at_least,
                })
            }),
        proptest::option::of(text()).prop_map(ToolOutcome::Cancelled),
    ];
    (text(), outcome).prop_map(|(call_id, outcome)| ToolDone { call_id, outcome })
}

fn tool_call() -> impl Strategy<Value = ToolCall> {
    (text(), text(), json_value(), proptest::option::of(text())).prop_map(
        |(call_id, tool, params, run_id)| ToolCall {
            run_id,
            // `null` params are read as `{}`.
            ..ToolCall::new(
                call_id,
                tool,
                if params.is_null() { json!({}) } else { params },
            )
        },
    )
}

fn flow_update() -> impl Strategy<Value = FlowUpdate> {
    (
        text(),
        proptest::option::of(1..=u64::MAX),
        proptest::option::of(1..=u64::MAX),
    )
        .prop_map(|(channel, m, b)| FlowUpdate {
            channel,
            add_messages: m.and_then(NonZeroU64::new),
            add_bytes: b.and_then(NonZeroU64::new),
        })
}

/// Through JSON text, as on the wire.
fn through_text<P: Payload>(p: &P) -> Result<P, PayloadError> {
    let text = p.to_json();
    let value: Value = serde_json::from_slice(&text).unwrap();
    P::from_payload(map(value))
}

proptest! {
    #[test]
    fn tool_done_round_trips(done in tool_done()) {
        prop_assert_eq!(through_text(&done).unwrap(), done.clone());
        let value: Value = serde_json::from_slice(&done.to_json()).unwrap();
        prop_assert_eq!(value, done.to_value());
        prop_assert_eq!(done.clone().into_value(), done.to_value());
    }

    #[test]
    fn tool_call_round_trips(call in tool_call()) {
        prop_assert_eq!(through_text(&call).unwrap(), call);
    }

    #[test]
    fn flow_update_round_trips(flow in flow_update()) {
        prop_assert_eq!(through_text(&flow).unwrap(), flow);
    }
}

/// The module's example: a call decoded with the envelope's id, answered strictly.
#[test]
fn a_call_without_call_id_takes_the_envelope_id_and_is_answered_strictly() {
    let mut inbound =
        decode(r#"{"id":"call-1","type":"TOOL_CALL","payload":{"tool":"echo"}}"#).unwrap();
    let InboundEvent::ToolCall(call) = InboundEvent::decode(&mut inbound).unwrap() else {
        panic!()
    };
    assert_eq!(call.call_id, "call-1"); // no call_id: the envelope id (docs/protocol.md §6.4)
    assert_eq!(call.params, json!({}));

    let done = ToolDone::ok(call.call_id, Some(json!({"echoed": "hi"})));
    assert_eq!(done.status(), ToolStatus::Ok);
    assert_eq!(
        done.to_value(),
        json!({"call_id": "call-1", "status": "OK", "result": {"echoed": "hi"}})
    );
}

#[test]
fn a_failed_tool_done_round_trips() {
    let done = ToolDone::failed(
        "c-2",
        ToolFailure::new(ErrorCode::TOOL_NOT_FOUND, "Tool nope not found"),
    );
    assert_eq!(
        done.to_value(),
        json!({"call_id": "c-2", "status": "ERROR", "result": {"error": "Tool nope not found", "code": "TOOL_NOT_FOUND"}})
    );
    let back = ToolDone::from_payload(done.to_value().as_object().unwrap().clone()).unwrap();
    assert_eq!(back, done);
}

#[test]
fn a_payload_error_names_the_field_and_its_reply() {
    let payload = json!({"tool": 5}).as_object().unwrap().clone();
    let err = ToolSchemaRequest::from_payload(payload).unwrap_err();
    assert_eq!(err.field, "tool");
    assert_eq!(
        err.to_string(),
        "TOOL_SCHEMA payload.tool: expected a string, found a number"
    );
    // The ERROR a server answers it with (docs/protocol.md §6.3).
    assert_eq!(
        err.reply().unwrap().detail.unwrap()["reason"],
        "missing tool"
    );
}

#[test]
fn a_bad_replay_request_earns_invalid_message() {
    let mut inbound =
        decode(r#"{"id":"r-1","type":"REPLAY_REQUEST","payload":{"from_seq":"x"}}"#).unwrap();
    let err = InboundEvent::decode(&mut inbound).unwrap_err();
    let reply = err.reply().unwrap();
    assert_eq!(reply.code.as_str(), "INVALID_MESSAGE");
    assert_eq!(reply.related_id.as_deref(), Some("r-1"));
    assert_eq!(reply.detail.unwrap()["reason"], "invalid from_seq");
}

#[test]
fn decode_with_takes_the_callers_id() {
    let mut inbound = decode(r#"{"type":"TOOL_CALL","payload":{"tool":"echo"}}"#).unwrap();
    let event = InboundEvent::decode_with(&mut inbound, || "call-7".to_owned()).unwrap();
    let InboundEvent::ToolCall(call) = event else {
        panic!()
    };
    assert_eq!(call.call_id, "call-7");
}

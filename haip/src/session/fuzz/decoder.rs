//! The decoder against a plain JSON reading, and sessions fed arbitrary
//! bytes, strings and mutated envelopes.

use super::*;
use crate::protocol::DecodeError;

/// `decode(text)` agrees with reading `text` as a `serde_json::Value`, where
/// that reading succeeds (docs/protocol.md §2.2 steps 2–5, §2.1 leniency). (The
/// decoder skips ignored fields without converting them, so it may accept
/// texts a `Value` cannot hold, like `"ack": 1e999`: nothing is said then.)
pub(super) fn check_decode(text: &str) -> Result<(), String> {
    let decoded = decode(text);
    if let Err(err) = &decoded {
        check_refusal(err, text)?;
    }
    let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(text) else {
        if let Ok(v) = serde_json::from_str::<Value>(text) {
            // JSON, but not an object: step 2.
            ensure!(
                decoded.as_ref().is_err_and(|e| e.related_id.is_none()),
                "decode accepted a non-object {}",
                clip(&v.to_string(), 200)
            );
        }
        return Ok(());
    };
    let id = match obj.get("id") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let shown = || clip(text, 200);
    let (Some(Value::String(type_name)), Some(Value::Object(payload))) =
        (obj.get("type"), obj.get("payload"))
    else {
        // Step 3.
        let err = decoded.err().ok_or_else(|| {
            format!(
                "decode accepted an envelope without type or payload: {}",
                shown()
            )
        })?;
        ensure!(
            err.code == ErrorCode::INVALID_MESSAGE && err.related_id == id,
            "step 3 failure reported as {err} (related_id {:?}): {}",
            err.related_id,
            shown()
        );
        return Ok(());
    };
    let Some(event) = EventType::parse(type_name) else {
        let err = decoded
            .err()
            .ok_or_else(|| format!("decode accepted an unknown type: {}", shown()))?;
        ensure!(
            err.code == ErrorCode::UNSUPPORTED_TYPE && err.related_id == id,
            "an unknown type reported as {err}: {}",
            shown()
        );
        return Ok(());
    };
    if obj.get("crit") == Some(&Value::Bool(true))
        && let Err(err) = &decoded
    {
        // Step 5: unknown fields under `crit`.
        ensure!(
            err.code == ErrorCode::UNSUPPORTED_TYPE
                && err.detail["fields"]
                    .as_array()
                    .is_some_and(|f| !f.is_empty()),
            "a crit envelope refused with {err}: {}",
            shown()
        );
        return Ok(());
    }
    let inbound =
        decoded.map_err(|e| format!("decode refused ({e}) a valid envelope: {}", shown()))?;
    check_fields(&inbound, &obj, event, payload, id, text)
}

/// Any refusal: a code of the decoder's, and a detail object.
fn check_refusal(err: &DecodeError, text: &str) -> Result<(), String> {
    ensure!(
        err.code == ErrorCode::INVALID_MESSAGE || err.code == ErrorCode::UNSUPPORTED_TYPE,
        "decode failed with {}: {:?}",
        err.code,
        clip(text, 200)
    );
    ensure!(
        err.detail.is_object(),
        "an error detail that is no object: {err}"
    );
    Ok(())
}

/// A decoded envelope holds what a plain reading of it (`obj`) finds:
/// its event, payload, id, channel (or the event's default) and the other
/// envelope fields.
fn check_fields(
    inbound: &Inbound,
    obj: &Map<String, Value>,
    event: EventType,
    payload: &Map<String, Value>,
    id: Option<String>,
    text: &str,
) -> Result<(), String> {
    let shown = || clip(text, 200);
    let string = |key: &str| match obj.get(key) {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    let channel = match obj.get("channel") {
        Some(Value::String(c)) if Channel::is_valid_name(c) => c.clone(),
        _ => event.default_channel().as_str().to_owned(),
    };
    ensure!(
        inbound.event == event,
        "decoded event {:?}: {}",
        inbound.event,
        shown()
    );
    ensure!(
        inbound.payload == *payload,
        "decoded payload differs: {}",
        shown()
    );
    ensure!(inbound.id == id, "decoded id {:?}: {}", inbound.id, shown());
    ensure!(
        inbound.channel == channel,
        "decoded channel {:?}: {}",
        inbound.channel,
        shown()
    );
    ensure!(
        inbound.session == string("session")
            && inbound.run_id == string("run_id")
            && inbound.thread_id == string("thread_id"),
        "decoded session/run_id/thread_id differ: {}",
        shown()
    );
    ensure!(
        inbound.bin_len == obj.get("bin_len").and_then(Value::as_u64),
        "decoded bin_len {:?}: {}",
        inbound.bin_len,
        shown()
    );
    Ok(())
}

/// Valid envelopes, the seeds of mutation.
pub(super) const TEMPLATES: [&str; 16] = [
    r#"{"id":"t1","type":"TOOL_CALL","payload":{"call_id":"c1","tool":"echo","params":{"message":"hi"}}}"#,
    r#"{"type":"TOOL_CALL","channel":"AGENT","run_id":"r1","payload":{"call_id":7,"tool":"add","params":{"a":1,"b":2}}}"#,
    r#"{"id":"t3","type":"TOOL_CALL","payload":{"call_id":"c1","tool":"gate"}}"#,
    r#"{"id":9,"seq":"3","ts":"2026-01-01T00:00:00Z","session":"s","type":"PING","payload":{"nonce":"n"}}"#,
    r#"{"type":"HAI","payload":{"haip_version":"1.1.2","accept_major":[1],"accept_events":["PING","PONG"],"capabilities":{"flow_control":{"initial_credit_messages":10,"initial_credit_bytes":1000}}}}"#,
    r#"{"type":"REPLAY_REQUEST","payload":{"from_seq":"1","to_seq":2}}"#,
    r#"{"type":"TOOL_CANCEL","payload":{"call_id":"c1","reason":"r"}}"#,
    r#"{"type":"RUN_STARTED","payload":{"run_id":"r1"}}"#,
    r#"{"type":"RUN_CANCEL","run_id":"r1","payload":{}}"#,
    r#"{"type":"FLOW_UPDATE","payload":{"channel":"AGENT","add_messages":18446744073709551615,"add_bytes":1}}"#,
    r#"{"type":"PAUSE_CHANNEL","payload":{"channel":"AGENT"}}"#,
    r#"{"type":"AUDIO_CHUNK","bin_len":3,"bin_mime":"audio/wav","payload":{"message_id":"a","mime":"audio/wav"}}"#,
    r#"{"crit":true,"type":"TEXT_MESSAGE_START","xtra":1,"payload":{"message_id":"m","text":"h\u00e9llo \u2603 \u0000 \ud83d\ude00 ☃"}}"#,
    r#"{"type":"TOOL_SCHEMA","payload":{"tool":"add"}}"#,
    r#"{"type":"TOOL_LIST","payload":{}}"#,
    r#"{"type":"TOOL_CALL","bin_len":0,"payload":{"call_id":"c2","tool":"weather","params":{"location":"P"}}}"#,
];

/// Bytes that matter to a JSON reader.
pub(super) const INTERESTING: [u8; 18] = [
    b'"', b'{', b'}', b'[', b']', b':', b',', b'\\', b'0', b'9', b'-', b'e', b'.', b' ', 0x00,
    0xff, 0xc3, 0x80,
];

#[derive(Debug, Clone)]
pub(super) enum Mutation {
    Flip(Index, u8),
    Insert(Index, u8),
    Delete(Index, u8),
    Repeat(Index, u8),
    Truncate(Index),
}

pub(super) fn mutation() -> impl Strategy<Value = Mutation> {
    let byte = prop_oneof![3 => select(INTERESTING.to_vec()), 1 => any::<u8>()];
    prop_oneof![
        (any::<Index>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip(at, bit)),
        (any::<Index>(), byte).prop_map(|(at, b)| Mutation::Insert(at, b)),
        (any::<Index>(), 1u8..8).prop_map(|(at, n)| Mutation::Delete(at, n)),
        (any::<Index>(), 1u8..16).prop_map(|(at, n)| Mutation::Repeat(at, n)),
        any::<Index>().prop_map(Mutation::Truncate),
    ]
}

pub(super) fn mutate(template: &str, mutations: &[Mutation]) -> Vec<u8> {
    let mut bytes = template.as_bytes().to_vec();
    for m in mutations {
        let len = bytes.len();
        match m {
            Mutation::Flip(at, bit) if len > 0 => bytes[at.index(len)] ^= 1 << (bit % 8),
            Mutation::Insert(at, b) => bytes.insert(at.index(len + 1), *b),
            Mutation::Delete(at, n) if len > 0 => {
                let from = at.index(len);
                bytes.drain(from..(from + usize::from(*n)).min(len));
            }
            Mutation::Repeat(at, n) if len > 0 => {
                let from = at.index(len);
                let to = (from + usize::from(*n)).min(len);
                let chunk = bytes[from..to].to_vec();
                bytes.splice(to..to, chunk);
            }
            Mutation::Truncate(at) => bytes.truncate(at.index(len + 1)),
            _ => {}
        }
    }
    bytes
}

#[derive(Debug, Clone)]
pub(super) enum Input {
    Bytes(Vec<u8>),
    Text(String),
    Mutated(usize, Vec<Mutation>),
}

impl Input {
    pub(super) fn bytes(&self) -> Vec<u8> {
        match self {
            Input::Bytes(b) => b.clone(),
            Input::Text(t) => t.clone().into_bytes(),
            Input::Mutated(t, m) => mutate(TEMPLATES[*t], m),
        }
    }
}

pub(super) fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        2 => vec(any::<u8>(), 0..128).prop_map(Input::Bytes),
        2 => any::<String>().prop_map(Input::Text),
        3 => r#"[{}\[\]":,. a-zA-Z0-9_\\-]{0,64}"#.prop_map(Input::Text),
        8 => (0..TEMPLATES.len(), vec(mutation(), 1..6)).prop_map(|(t, m)| Input::Mutated(t, m)),
    ]
}

/// Feeds `inputs` to a fresh WebSocket session (`true`: as a binary message)
/// after checking the decoder on each, then winds the session down.
pub(super) fn run_inputs(inputs: &[(Input, bool)]) -> Result<(), String> {
    runtime().block_on(async {
        let mut run = Run::new(Config::default(), true)?;
        for (input, as_binary) in inputs {
            let bytes = input.bytes();
            match std::str::from_utf8(&bytes) {
                Ok(text) => {
                    check_decode(text)?;
                    if *as_binary {
                        run.binary(&bytes)?;
                    } else {
                        run.text(text)?;
                    }
                }
                Err(_) => run.binary(&bytes)?,
            }
            run.drain()?;
        }
        run.finish(true).await
    })
}

proptest! {
    #![proptest_config(proptest_config(DECODE_CASES))]

    /// The decoder never panics and agrees with a plain JSON reading.
    #[test]
    fn decode_agrees_with_a_plain_json_reading(input in input()) {
        let bytes = input.bytes();
        if let Ok(text) = std::str::from_utf8(&bytes) {
            check_decode(text).map_err(TestCaseError::fail)?;
        }
    }
}

proptest! {
    #![proptest_config(proptest_config(INPUT_CASES))]

    /// Arbitrary text and binary messages: no panic, only valid envelopes
    /// out, and whatever calls they make end exactly once.
    #[test]
    fn a_session_survives_arbitrary_messages(inputs in vec((input(), any::<bool>()), 1..8)) {
        run_inputs(&inputs).map_err(TestCaseError::fail)?;
    }
}

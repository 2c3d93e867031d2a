use std::fmt;

use serde_json::{Map, Value, json};

use super::{Channel, ErrorCode, EventType};

/// Envelope keys of HAIP.md §2.1; anything else is unknown (matters only under `crit`).
const ENVELOPE_KEYS: [&str; 14] = [
    "id",
    "session",
    "seq",
    "ts",
    "channel",
    "type",
    "payload",
    "ack",
    "pv",
    "crit",
    "bin_len",
    "bin_mime",
    "run_id",
    "thread_id",
];

/// An inbound envelope that passed decoding (HAIP.md §2.2 steps 2–5).
///
/// Every field but `type` and `payload` is optional and loosely typed on the wire;
/// here each is normalised: a numeric `id` becomes its decimal text, a missing or
/// invalid `channel` becomes the type's default.
#[derive(Debug, Clone, PartialEq)]
pub struct Inbound {
    /// The envelope `id`, if it was a string or a number.
    pub id: Option<String>,
    /// The envelope `session`, if it was a string.
    pub session: Option<String>,
    /// The envelope `seq`, if it was a decimal string or a non-negative integer.
    pub seq: Option<u64>,
    /// The channel name (validated, or the type's default).
    pub channel: String,
    /// The event type.
    pub event: EventType,
    /// The payload object.
    pub payload: Map<String, Value>,
    /// The envelope `run_id`, if a string.
    pub run_id: Option<String>,
    /// The envelope `thread_id`, if a string.
    pub thread_id: Option<String>,
    /// The envelope `bin_len`, if a non-negative integer.
    pub bin_len: Option<u64>,
}

/// Why an inbound text was not accepted, with the `ERROR` it earns (HAIP.md §2.2, §14.2).
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeError {
    /// The error code (`INVALID_MESSAGE` or `UNSUPPORTED_TYPE`).
    pub code: ErrorCode,
    /// The fixed, human-readable message.
    pub message: String,
    /// The offending envelope's `id`, when it had a usable one.
    pub related_id: Option<String>,
    /// The `detail` object.
    pub detail: Value,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({})", self.code, self.message, self.detail)
    }
}

impl std::error::Error for DecodeError {}

impl DecodeError {
    fn invalid(reason: &str, related_id: Option<String>) -> DecodeError {
        DecodeError {
            code: ErrorCode::INVALID_MESSAGE,
            message: "Invalid message format".to_owned(),
            related_id,
            detail: json!({ "reason": reason }),
        }
    }
}

/// Decodes one inbound unit (a WebSocket text message, an NDJSON line) leniently.
///
/// ```
/// use haip::protocol::{decode, ErrorCode};
///
/// let call = decode(r#"{"id":7,"type":"TOOL_CALL","channel":"AGENT","payload":{"tool":"echo"}}"#).unwrap();
/// assert_eq!(call.id.as_deref(), Some("7"));
/// assert_eq!(call.channel, "AGENT");
///
/// let err = decode(r#"{"id":"x","type":"MESSAGE","payload":{}}"#).unwrap_err();
/// assert_eq!(err.code, ErrorCode::UNSUPPORTED_TYPE);
/// assert_eq!(err.related_id.as_deref(), Some("x"));
/// ```
pub fn decode(text: &str) -> Result<Inbound, DecodeError> {
    let value: Value =
        serde_json::from_str(text).map_err(|_| DecodeError::invalid("invalid JSON", None))?;
    let Value::Object(mut obj) = value else {
        return Err(DecodeError::invalid("not an object", None));
    };
    decode_object(&mut obj)
}

/// Decodes an already-parsed JSON object (one element of a JSON array body).
pub(crate) fn decode_object(obj: &mut Map<String, Value>) -> Result<Inbound, DecodeError> {
    let id = match obj.get("id") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let type_name = match obj.get("type") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err(DecodeError::invalid("missing type", id)),
    };
    let payload = match obj.remove("payload") {
        Some(Value::Object(p)) => p,
        _ => return Err(DecodeError::invalid("payload must be an object", id)),
    };
    let Some(event) = EventType::parse(&type_name) else {
        return Err(DecodeError {
            code: ErrorCode::UNSUPPORTED_TYPE,
            message: format!("Unknown message type: {type_name}"),
            related_id: id,
            detail: json!({ "type": type_name }),
        });
    };
    if obj.get("crit") == Some(&Value::Bool(true)) {
        let mut fields: Vec<String> = obj
            .keys()
            .filter(|k| !ENVELOPE_KEYS.contains(&k.as_str()))
            .cloned()
            .collect();
        if let Some(known) = event.known_payload_fields() {
            fields.extend(
                payload
                    .keys()
                    .filter(|k| !known.contains(&k.as_str()))
                    .map(|k| format!("payload.{k}")),
            );
        }
        if !fields.is_empty() {
            return Err(DecodeError {
                code: ErrorCode::UNSUPPORTED_TYPE,
                message: "Unknown critical fields".to_owned(),
                related_id: id,
                detail: json!({ "fields": fields }),
            });
        }
    }
    let channel = match obj.get("channel") {
        Some(Value::String(c)) if Channel::is_valid_name(c) => c.clone(),
        _ => event.default_channel().as_str().to_owned(),
    };
    Ok(Inbound {
        id,
        session: string_field(obj, "session"),
        seq: obj.get("seq").and_then(u64_loose),
        channel,
        event,
        payload,
        run_id: string_field(obj, "run_id"),
        thread_id: string_field(obj, "thread_id"),
        bin_len: obj.get("bin_len").and_then(Value::as_u64),
    })
}

/// Whether a binary WebSocket message with no envelope waiting for it is itself
/// an envelope: a JSON object with a string `type` (HAIP.md §13). Anything else
/// is binary data for the application, never an error.
pub fn is_binary_envelope(bytes: &[u8]) -> bool {
    matches!(
        serde_json::from_slice::<Value>(bytes),
        Ok(Value::Object(obj)) if obj.get("type").is_some_and(Value::is_string)
    )
}

fn string_field(obj: &Map<String, Value>, key: &str) -> Option<String> {
    match obj.get(key) {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    }
}

/// A non-negative integer given as a JSON integer or a decimal string
/// (how `seq`, `from_seq`, `to_seq` and `last_rx_seq` arrive).
pub(crate) fn u64_loose(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(err: &DecodeError) -> &str {
        err.detail["reason"].as_str().unwrap_or_default()
    }

    #[test]
    fn steps_two_and_three_give_invalid_message_with_reasons() {
        let e = decode("{not json").unwrap_err();
        assert_eq!(
            (e.code.as_str(), reason(&e)),
            ("INVALID_MESSAGE", "invalid JSON")
        );
        assert_eq!(e.related_id, None);
        let e = decode("[1,2]").unwrap_err();
        assert_eq!(reason(&e), "not an object");
        let e = decode(r#"{"id":"a","payload":{}}"#).unwrap_err();
        assert_eq!(
            (reason(&e), e.related_id.as_deref()),
            ("missing type", Some("a"))
        );
        let e = decode(r#"{"id":"a","type":5,"payload":{}}"#).unwrap_err();
        assert_eq!(reason(&e), "missing type");
        let e = decode(r#"{"id":"a","type":"PING","payload":null}"#).unwrap_err();
        assert_eq!(reason(&e), "payload must be an object");
        let e = decode(r#"{"id":{},"type":"PING","payload":[]}"#).unwrap_err();
        assert_eq!(e.related_id, None);
    }

    #[test]
    fn unknown_types_are_unsupported() {
        let e = decode(r#"{"type":"TOOL_ERROR","payload":{}}"#).unwrap_err();
        assert_eq!(e.code, ErrorCode::UNSUPPORTED_TYPE);
        assert_eq!(e.message, "Unknown message type: TOOL_ERROR");
        assert_eq!(e.detail, json!({"type": "TOOL_ERROR"}));
    }

    #[test]
    fn crit_lists_unknown_envelope_and_payload_fields() {
        let e = decode(r#"{"type":"PING","crit":true,"x":1,"payload":{"nonce":"n","content":2}}"#)
            .unwrap_err();
        assert_eq!(e.message, "Unknown critical fields");
        assert_eq!(e.detail, json!({"fields": ["x", "payload.content"]}));
        // Without crit the same envelope is fine.
        assert!(decode(r#"{"type":"PING","x":1,"payload":{"content":2}}"#).is_ok());
        // RUN_STARTED payloads are open.
        assert!(decode(r#"{"type":"RUN_STARTED","crit":true,"payload":{"anything":1}}"#).is_ok());
    }

    #[test]
    fn binary_envelopes_need_an_object_with_a_string_type() {
        assert!(is_binary_envelope(br#"{"type":"PING","payload":{}}"#));
        assert!(!is_binary_envelope(br#"{"type":5,"payload":{}}"#));
        assert!(!is_binary_envelope(br#"{"type":"PING","payload":{"#));
        assert!(!is_binary_envelope(br#"{"no":"type"}"#));
        assert!(!is_binary_envelope(&[0xff, 0x00, 0x12]));
    }

    #[test]
    fn loose_fields_are_normalised() {
        let i = decode(
            r#"{"id":12,"session":"s","seq":"0","ts":"2026-01-01","channel":"bad channel","type":"TOOL_CALL","payload":{},"run_id":"r","ack":"x"}"#,
        )
        .unwrap();
        assert_eq!(i.id.as_deref(), Some("12"));
        assert_eq!(i.seq, Some(0));
        assert_eq!(i.channel, "USER");
        assert_eq!(i.run_id.as_deref(), Some("r"));
        let i = decode(r#"{"seq":17,"channel":"custom-1","type":"HAI","payload":{}}"#).unwrap();
        assert_eq!((i.seq, i.channel.as_str()), (Some(17), "custom-1"));
        let i = decode(r#"{"seq":"abc","type":"HAI","payload":{}}"#).unwrap();
        assert_eq!(i.seq, None);
    }
}

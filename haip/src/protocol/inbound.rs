use std::fmt;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value, json};

use super::{Channel, ErrorCode, EventType};

/// Envelope keys of docs/protocol.md §2.1; anything else is unknown (matters only under `crit`).
#[cfg(test)]
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

/// An inbound envelope that passed decoding (docs/protocol.md §2.2 steps 2–5).
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

/// Why an inbound text was not accepted, with the `ERROR` it earns (docs/protocol.md §2.2, §14.2).
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
    // The envelope's own fields are read straight off the text; only the
    // payload becomes a `Value`. Duplicate keys keep the last value, as in a
    // parsed object (the tests compare with such a reference decoder).
    let mut de = serde_json::Deserializer::from_str(text);
    let top = match Top::deserialize(&mut de).and_then(|top| de.end().map(|()| top)) {
        Ok(top) => top,
        Err(_) => return Err(DecodeError::invalid("invalid JSON", None)),
    };
    let Top::Object(raw) = top else {
        return Err(DecodeError::invalid("not an object", None));
    };
    raw.into_inbound()
}

/// A decoded top-level JSON value: an envelope's fields, or anything else.
enum Top {
    Object(Box<RawEnvelope>),
    Other,
}

/// The envelope fields as they came, loosely typed.
#[derive(Default)]
struct RawEnvelope {
    id: Option<Scalar>,
    session: Option<Scalar>,
    seq: Option<Scalar>,
    channel: Option<Scalar>,
    event: Option<Scalar>,
    payload: Option<Value>,
    crit: Option<Scalar>,
    run_id: Option<Scalar>,
    thread_id: Option<Scalar>,
    bin_len: Option<Scalar>,
    /// Keys outside docs/protocol.md §2.1 (only reported under `crit`).
    unknown: Vec<String>,
}

/// A field's value, kept only as far as some field can use it.
enum Scalar {
    Str(String),
    U64(u64),
    Num(serde_json::Number),
    Bool(bool),
    Other,
}

impl Scalar {
    fn into_string(self) -> Option<String> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }
}

impl RawEnvelope {
    /// docs/protocol.md §2.2 steps 3–5, in order.
    fn into_inbound(self) -> Result<Inbound, DecodeError> {
        let id = match self.id {
            Some(Scalar::Str(s)) => Some(s),
            Some(Scalar::U64(n)) => Some(n.to_string()),
            Some(Scalar::Num(n)) => Some(n.to_string()),
            _ => None,
        };
        let Some(type_name) = self.event.and_then(Scalar::into_string) else {
            return Err(DecodeError::invalid("missing type", id));
        };
        let payload = match self.payload {
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
        if matches!(self.crit, Some(Scalar::Bool(true))) {
            let mut fields = self.unknown;
            // As an object's keys: sorted, each once.
            fields.sort_unstable();
            fields.dedup();
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
        let channel = match self.channel {
            Some(Scalar::Str(c)) if Channel::is_valid_name(&c) => c,
            _ => event.default_channel().as_str().to_owned(),
        };
        let seq = match self.seq {
            Some(Scalar::U64(n)) => Some(n),
            Some(Scalar::Str(s)) => u64_loose(&Value::String(s)),
            _ => None,
        };
        Ok(Inbound {
            id,
            session: self.session.and_then(Scalar::into_string),
            seq,
            channel,
            event,
            payload,
            run_id: self.run_id.and_then(Scalar::into_string),
            thread_id: self.thread_id.and_then(Scalar::into_string),
            bin_len: match self.bin_len {
                Some(Scalar::U64(n)) => Some(n),
                _ => None,
            },
        })
    }
}

impl<'de> Deserialize<'de> for Top {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Top, D::Error> {
        struct TopVisitor;
        impl<'de> Visitor<'de> for TopVisitor {
            type Value = Top;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Top, E> {
                Ok(Top::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Top, E> {
                Ok(Top::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Top, E> {
                Ok(Top::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Top, E> {
                Ok(Top::Other)
            }
            fn visit_str<E>(self, _: &str) -> Result<Top, E> {
                Ok(Top::Other)
            }
            fn visit_unit<E>(self) -> Result<Top, E> {
                Ok(Top::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Top, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Top::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
                let mut raw = RawEnvelope::default();
                while let Some(key) = map.next_key::<Key>()? {
                    let slot = match key {
                        Key::Id => &mut raw.id,
                        Key::Session => &mut raw.session,
                        Key::Seq => &mut raw.seq,
                        Key::Channel => &mut raw.channel,
                        Key::Type => &mut raw.event,
                        Key::Crit => &mut raw.crit,
                        Key::RunId => &mut raw.run_id,
                        Key::ThreadId => &mut raw.thread_id,
                        Key::BinLen => &mut raw.bin_len,
                        Key::Payload => {
                            raw.payload = Some(map.next_value()?);
                            continue;
                        }
                        Key::Ignored => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                        Key::Unknown(name) => {
                            map.next_value::<IgnoredAny>()?;
                            raw.unknown.push(name);
                            continue;
                        }
                    };
                    *slot = Some(map.next_value()?);
                }
                Ok(Top::Object(Box::new(raw)))
            }
        }
        deserializer.deserialize_any(TopVisitor)
    }
}

/// An envelope key: one of docs/protocol.md §2.1's (those the decoder does not read
/// are `Ignored`), or an unknown one by name.
enum Key {
    Id,
    Session,
    Seq,
    Channel,
    Type,
    Payload,
    Crit,
    RunId,
    ThreadId,
    BinLen,
    Ignored,
    Unknown(String),
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Key, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an envelope key")
            }
            fn visit_str<E>(self, key: &str) -> Result<Key, E> {
                Ok(match key {
                    "id" => Key::Id,
                    "session" => Key::Session,
                    "seq" => Key::Seq,
                    "channel" => Key::Channel,
                    "type" => Key::Type,
                    "payload" => Key::Payload,
                    "crit" => Key::Crit,
                    "run_id" => Key::RunId,
                    "thread_id" => Key::ThreadId,
                    "bin_len" => Key::BinLen,
                    "ts" | "ack" | "pv" | "bin_mime" => Key::Ignored,
                    other => Key::Unknown(other.to_owned()),
                })
            }
        }
        deserializer.deserialize_identifier(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Scalar, D::Error> {
        struct ScalarVisitor;
        impl<'de> Visitor<'de> for ScalarVisitor {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, b: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(b))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Scalar, E> {
                Ok(Scalar::Num(n.into()))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Scalar, E> {
                Ok(Scalar::U64(n))
            }
            fn visit_f64<E>(self, n: f64) -> Result<Scalar, E> {
                Ok(serde_json::Number::from_f64(n).map_or(Scalar::Other, Scalar::Num))
            }
            fn visit_str<E>(self, s: &str) -> Result<Scalar, E> {
                Ok(Scalar::Str(s.to_owned()))
            }
            fn visit_string<E>(self, s: String) -> Result<Scalar, E> {
                Ok(Scalar::Str(s))
            }
            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
        }
        deserializer.deserialize_any(ScalarVisitor)
    }
}

/// Decodes an already-parsed JSON object: the plain statement of the rules
/// that [`decode`] implements without building the envelope as a `Value`,
/// kept as the reference its tests compare against.
#[cfg(test)]
fn decode_object(obj: &mut Map<String, Value>) -> Result<Inbound, DecodeError> {
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

/// Under `strict_envelope` (docs/protocol.md §2.2 step 3): for a text that is a JSON
/// object with a string `type` and an object `payload` (else the ordinary
/// decoding reports it) but lacks the full envelope schema, the
/// `INVALID_MESSAGE` to send, reason `schema`.
pub(crate) fn strict_schema_error(text: &str) -> Option<DecodeError> {
    let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    if !obj.get("type").is_some_and(Value::is_string)
        || !obj.get("payload").is_some_and(Value::is_object)
    {
        return None;
    }
    let string = |key: &str| obj.get(key).and_then(Value::as_str);
    let decimal = |key: &str| {
        string(key).is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
    };
    let ok = string("id").is_some_and(is_uuid)
        && string("session").is_some_and(is_uuid)
        && decimal("seq")
        && decimal("ts")
        && string("channel").is_some();
    if ok {
        return None;
    }
    let related_id = match obj.get("id") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    Some(DecodeError::invalid("schema", related_id))
}

/// A hyphenated UUID (`8-4-4-4-12` hex digits, either case).
fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// Whether a binary WebSocket message with no envelope waiting for it is itself
/// an envelope: a JSON object with a string `type` (docs/protocol.md §13). Anything else
/// is binary data for the application, never an error.
pub(crate) fn is_binary_envelope(bytes: &[u8]) -> bool {
    matches!(
        serde_json::from_slice::<Value>(bytes),
        Ok(Value::Object(obj)) if obj.get("type").is_some_and(Value::is_string)
    )
}

#[cfg(test)]
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

    /// The streaming decoder agrees with decoding a parsed object, field by
    /// field and error by error.
    #[test]
    fn streaming_decode_matches_object_decode() {
        let samples = [
            r#"{"id":"a","type":"PING","payload":{"nonce":"n"}}"#,
            r#"{"id":7,"type":"TOOL_CALL","channel":"AGENT","payload":{"tool":"echo","params":{"m":[1,{"x":null}]}}}"#,
            r#"{"id":-3,"type":"PING","payload":{}}"#,
            r#"{"id":2.5,"type":"PING","payload":{}}"#,
            r#"{"id":1e3,"type":"PING","payload":{}}"#,
            r#"{"id":true,"type":"PING","payload":{}}"#,
            r#"{"id":[1],"type":"PING","payload":{}}"#,
            r#"{"id":"a","type":"PING","type":"PONG","payload":{"x":1},"payload":{"nonce":"n"}}"#,
            r#"{"type":"PING","payload":{},"seq":"12","session":"s","run_id":"r","thread_id":"t","bin_len":5}"#,
            r#"{"type":"PING","payload":{},"seq":-1,"session":5,"run_id":null,"thread_id":{},"bin_len":5.0}"#,
            r#"{"type":"PING","payload":{},"seq":"1x","channel":"AUDIO_IN"}"#,
            r#"{"type":"PING","payload":{},"seq":1.0,"channel":7}"#,
            r#"{"type":"PING","crit":true,"z":1,"a":[],"z":2,"payload":{"nonce":"n","extra":1}}"#,
            r#"{"type":"PING","crit":"yes","z":1,"payload":{}}"#,
            r#"{"type":"PING","crit":true,"ts":"1","ack":1,"pv":1,"bin_mime":"x","payload":{}}"#,
            r#"{"type":"NOPE","id":"q","payload":{}}"#,
            r#"{"type":"NOPE","payload":[]}"#,
            r#"{"payload":{}}"#,
            r#"{"type":"PING"}"#,
            r#"{"type":"PING","payload":"x"}"#,
            r#"{"type":"PING","payload":{"s":"\u00e9\ud83d\ude00 \"q\""},"id":"\u0041"}"#,
            r#"{}"#,
        ];
        for text in samples {
            let mut obj = match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(obj)) => obj,
                other => panic!("{text} is an object: {other:?}"),
            };
            assert_eq!(decode(text), decode_object(&mut obj), "{text}");
        }
        for text in [
            "", "{", "[1,2]", "[1,2", "3", "\"s\"", "null", "{} x", "{\"a\":}",
        ] {
            let e = decode(text).unwrap_err();
            let expected = match serde_json::from_str::<Value>(text) {
                Ok(_) => "not an object",
                Err(_) => "invalid JSON",
            };
            assert_eq!(reason(&e), expected, "{text}");
        }
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

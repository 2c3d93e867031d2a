//! Messages between instances on their pub/sub channels: each one byte of
//! kind, the link id in 16 hex digits and the body; a link's opening and
//! its messages as bytes and back.

use bytes::Bytes;

use crate::session::link::{LinkMessage, LinkOpen, LinkPurpose};
use crate::stats::Door;

/// Kind, link id and body of a message between instances.
pub(super) fn split_message(payload: &[u8]) -> Option<(u8, u64, &[u8])> {
    let (&kind, rest) = payload.split_first()?;
    let hex = rest.get(..16)?;
    let id = u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
    Some((kind, id, &rest[16..]))
}

pub(super) fn frame(kind: u8, id: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(17 + body.len());
    out.push(kind);
    out.extend_from_slice(format!("{id:016x}").as_bytes());
    out.extend_from_slice(body);
    out
}

pub(super) fn encode_open(id: u64, from: &str, open: &LinkOpen) -> Vec<u8> {
    let mut body = serde_json::json!({ "from": from, "subject": open.subject });
    if let Some(caller) = &open.caller {
        body["scopes"] = serde_json::json!(caller.scopes());
        body["claims"] = serde_json::Value::Object(caller.claims().clone());
    }
    match &open.purpose {
        LinkPurpose::Connection { door, hai } => {
            // SSE goes as `stream`: a session treats the two alike, and the
            // connections by door are counted where the client is.
            body["transport"] = match door {
                Door::WebSocket => "ws",
                _ => "stream",
            }
            .into();
            body["hai"] = hai.as_str().into();
            if let Some((session, next_seq)) = &open.greeted {
                body["greeted"] = serde_json::json!([session, next_seq]);
            }
        }
        LinkPurpose::Post { session } => body["post"] = session.as_str().into(),
    }
    frame(b'O', id, body.to_string().as_bytes())
}

pub(super) fn decode_open(body: &[u8]) -> Option<(String, LinkOpen)> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let from = value["from"].as_str()?.to_owned();
    let subject = value["subject"].as_str().map(str::to_owned);
    let purpose = if let Some(session) = value["post"].as_str() {
        LinkPurpose::Post {
            session: session.to_owned(),
        }
    } else {
        let door = match value["transport"].as_str()? {
            "ws" => Door::WebSocket,
            "stream" => Door::Stream,
            _ => return None,
        };
        LinkPurpose::Connection {
            door,
            hai: value["hai"].as_str()?.to_owned(),
        }
    };
    let caller = subject.as_ref().map(|subject| {
        let scopes: Vec<String> = value["scopes"]
            .as_array()
            .map(|s| {
                s.iter()
                    .filter_map(|s| s.as_str())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let claims = value["claims"].as_object().cloned().unwrap_or_default();
        std::sync::Arc::new(
            crate::context::Caller::new(subject.clone())
                .with_scopes(scopes)
                .with_claims(claims),
        )
    });
    let greeted = match &value["greeted"] {
        serde_json::Value::Array(pair) => match pair.as_slice() {
            [session, next_seq] => Some((session.as_str()?.to_owned(), next_seq.as_u64()?)),
            _ => return None,
        },
        _ => None,
    };
    Some((
        from,
        LinkOpen {
            subject,
            caller,
            purpose,
            greeted,
        },
    ))
}

pub(super) fn encode_message(id: u64, message: &LinkMessage) -> Vec<u8> {
    match message {
        LinkMessage::Text(text) => frame(b'T', id, text),
        LinkMessage::Binary(bytes) => frame(b'B', id, bytes),
        LinkMessage::TooLarge => frame(b'L', id, b""),
        LinkMessage::Activity => frame(b'A', id, b""),
        LinkMessage::KeepAlive => frame(b'K', id, b""),
        LinkMessage::Close { code, reason } => {
            frame(b'C', id, format!("{code} {reason}").as_bytes())
        }
        LinkMessage::Done(status) => frame(b'D', id, status.to_string().as_bytes()),
        LinkMessage::Heartbeat => frame(b'H', id, b""),
    }
}

pub(super) fn decode_message(kind: u8, body: &[u8]) -> Option<LinkMessage> {
    Some(match kind {
        b'T' => LinkMessage::Text(Bytes::copy_from_slice(body)),
        b'B' => LinkMessage::Binary(Bytes::copy_from_slice(body)),
        b'L' => LinkMessage::TooLarge,
        b'A' => LinkMessage::Activity,
        b'K' => LinkMessage::KeepAlive,
        b'C' => {
            let text = std::str::from_utf8(body).ok()?;
            let (code, reason) = text.split_once(' ').unwrap_or((text, ""));
            LinkMessage::Close {
                code: code.parse().ok()?,
                reason: reason.to_owned(),
            }
        }
        b'D' => LinkMessage::Done(std::str::from_utf8(body).ok()?.parse().ok()?),
        b'H' => LinkMessage::Heartbeat,
        _ => return None,
    })
}

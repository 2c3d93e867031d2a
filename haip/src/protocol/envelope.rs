use serde_json::Value;

use super::{Channel, EventType};

/// An outbound envelope before it is committed: it has no `id`, `seq` or `ts` yet.
///
/// The session keeps uncommitted envelopes in its outbox so that progress updates
/// can still be merged under back-pressure (docs/protocol.md §6.5) without leaving gaps in
/// the sequence.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Outgoing {
    /// The channel it goes out on.
    pub(crate) channel: Channel,
    /// Its event type.
    pub(crate) event: EventType,
    /// Its payload (always a JSON object).
    pub(crate) payload: Value,
    /// The run id of the request it is about, copied unchanged.
    pub(crate) run_id: Option<String>,
    /// The thread id of the request it is about, copied unchanged.
    pub(crate) thread_id: Option<String>,
}

impl Outgoing {
    /// An envelope with no run or thread id.
    pub(crate) fn new(channel: Channel, event: EventType, payload: Value) -> Outgoing {
        Outgoing {
            channel,
            event,
            payload,
            run_id: None,
            thread_id: None,
        }
    }

    /// Commits it straight to its JSON text: gives it its identity (a new
    /// UUID), sequence number and timestamp. What the session sends goes
    /// through a [`Prepared`] instead; this is for an envelope sent alone
    /// (an `ERROR` before any session exists), and what the tests compare
    /// [`Prepared`] with.
    pub(crate) fn encode(&self, session: &str, seq: u64, ts: u64) -> Vec<u8> {
        let mut id = uuid::Uuid::encode_buffer();
        let id = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut id);
        let fields = Fields {
            id,
            session,
            seq,
            ts,
            channel: self.channel,
            event: self.event,
            payload: &self.payload,
            run_id: self.run_id.as_deref(),
            thread_id: self.thread_id.as_deref(),
        };
        let mut text = Vec::with_capacity(160 + 64 * payload_size_hint(&self.payload));
        fields.write_to(&mut text);
        text
    }
}

/// The fields of a committed envelope, borrowed, encoded strictly
/// (docs/protocol.md §2.4): all seven required fields, `seq` and `ts` as
/// decimal strings, never `ack`, `pv` or `crit`.
struct Fields<'a> {
    id: &'a str,
    session: &'a str,
    seq: u64,
    ts: u64,
    channel: Channel,
    event: EventType,
    payload: &'a Value,
    run_id: Option<&'a str>,
    thread_id: Option<&'a str>,
}

/// The reference encoding through serde, which the tests compare the direct
/// one with.
#[cfg(test)]
impl serde::Serialize for Fields<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let extra = usize::from(self.run_id.is_some()) + usize::from(self.thread_id.is_some());
        let mut map = serializer.serialize_map(Some(7 + extra))?;
        map.serialize_entry("id", self.id)?;
        map.serialize_entry("session", self.session)?;
        // Decimal strings, formatted without allocating.
        map.serialize_entry("seq", itoa::Buffer::new().format(self.seq))?;
        map.serialize_entry("ts", itoa::Buffer::new().format(self.ts))?;
        map.serialize_entry("channel", self.channel.as_str())?;
        map.serialize_entry("type", self.event.as_str())?;
        map.serialize_entry("payload", self.payload)?;
        if let Some(run_id) = self.run_id {
            map.serialize_entry("run_id", run_id)?;
        }
        if let Some(thread_id) = self.thread_id {
            map.serialize_entry("thread_id", thread_id)?;
        }
        map.end()
    }
}

impl Fields<'_> {
    /// Writes the same JSON as serde would (the tests check it), but copies the fields that
    /// need no escaping (the id, digits, names; checked, not assumed) instead
    /// of running them through the escaper byte by byte.
    fn write_to(&self, out: &mut Vec<u8>) {
        write_head(out, self.id, self.session, self.seq, self.ts);
        write_tail(
            out,
            self.channel,
            self.event,
            Payload::Value(self.payload),
            self.run_id,
            self.thread_id,
        );
    }
}

/// `{"id":…,"session":…,"seq":…,"ts":…`: the part of an envelope fixed at commit.
fn write_head(out: &mut Vec<u8>, id: &str, session: &str, seq: u64, ts: u64) {
    out.extend_from_slice(b"{\"id\":");
    write_str(out, id);
    out.extend_from_slice(b",\"session\":");
    write_str(out, session);
    out.extend_from_slice(b",\"seq\":\"");
    out.extend_from_slice(itoa::Buffer::new().format(seq).as_bytes());
    out.extend_from_slice(b"\",\"ts\":\"");
    out.extend_from_slice(itoa::Buffer::new().format(ts).as_bytes());
    out.push(b'"');
}

/// A payload to write: a value, or JSON text already encoded.
enum Payload<'a> {
    Value(&'a Value),
    Json(&'a [u8]),
}

/// `,"channel":…,"type":…,"payload":…[,"run_id":…][,"thread_id":…]}`: the
/// part of an envelope known before it is committed.
fn write_tail(
    out: &mut Vec<u8>,
    channel: Channel,
    event: EventType,
    payload: Payload<'_>,
    run_id: Option<&str>,
    thread_id: Option<&str>,
) {
    out.extend_from_slice(b",\"channel\":");
    write_str(out, channel.as_str());
    out.extend_from_slice(b",\"type\":");
    write_str(out, event.as_str());
    out.extend_from_slice(b",\"payload\":");
    match payload {
        // Writing a `Value` into a Vec cannot fail.
        Payload::Value(value) => {
            let _ = serde_json::to_writer(&mut *out, value);
        }
        Payload::Json(json) => out.extend_from_slice(json),
    }
    if let Some(run_id) = run_id {
        out.extend_from_slice(b",\"run_id\":");
        write_str(out, run_id);
    }
    if let Some(thread_id) = thread_id {
        out.extend_from_slice(b",\"thread_id\":");
        write_str(out, thread_id);
    }
    out.push(b'}');
}

/// The longest head [`write_head`] writes for a server session id (a UUID):
/// `{"id":"<36>","session":"<36>","seq":"<20 digits>","ts":"<20 digits>"`.
const HEAD_MAX: usize = 6 + 38 + 11 + 38 + 8 + 20 + 8 + 20 + 1;

/// An outbound envelope whose payload is already JSON text: what a session
/// queues, so that the bytes waiting for a socket are known before they are
/// committed (docs/protocol.md §18.1). Only the head (`id`, `session`, `seq`, `ts`) is
/// written at commit.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Prepared {
    channel: Channel,
    event: EventType,
    /// Everything after the head, closing brace included.
    tail: Vec<u8>,
}

impl Prepared {
    /// Encodes `out`'s payload now.
    pub(crate) fn new(out: &Outgoing) -> Prepared {
        let mut tail = Vec::with_capacity(96 + 64 * payload_size_hint(&out.payload));
        write_tail(
            &mut tail,
            out.channel,
            out.event,
            Payload::Value(&out.payload),
            out.run_id.as_deref(),
            out.thread_id.as_deref(),
        );
        Prepared {
            channel: out.channel,
            event: out.event,
            tail,
        }
    }

    /// Encodes `out`'s payload now, unless the committed envelope would be
    /// longer than `limit` bytes: then nothing more than `limit` is buffered,
    /// and the error is the length it would have had.
    pub(crate) fn within(out: &Outgoing, limit: usize) -> Result<Prepared, usize> {
        // Room for the payload: the limit less the head and what surrounds the payload.
        let mut frame = Vec::new();
        write_tail(
            &mut frame,
            out.channel,
            out.event,
            Payload::Json(b""),
            out.run_id.as_deref(),
            out.thread_id.as_deref(),
        );
        let overhead = HEAD_MAX + frame.len();
        match to_json_within(&out.payload, limit.saturating_sub(overhead)) {
            Ok(payload) => Ok(Prepared::from_json(
                out.channel,
                out.event,
                &payload,
                out.run_id.as_deref(),
                out.thread_id.as_deref(),
            )),
            Err(size) => Err(overhead.saturating_add(size)),
        }
    }

    /// An envelope whose payload is the JSON text `payload` (an object).
    pub(crate) fn from_json(
        channel: Channel,
        event: EventType,
        payload: &[u8],
        run_id: Option<&str>,
        thread_id: Option<&str>,
    ) -> Prepared {
        let mut tail = Vec::with_capacity(96 + payload.len());
        write_tail(
            &mut tail,
            channel,
            event,
            Payload::Json(payload),
            run_id,
            thread_id,
        );
        Prepared {
            channel,
            event,
            tail,
        }
    }

    /// The channel it goes out on.
    pub(crate) fn channel(&self) -> Channel {
        self.channel
    }

    /// Its event type.
    pub(crate) fn event(&self) -> EventType {
        self.event
    }

    /// The length of its committed text, at most (exact but for the digits of
    /// `seq` and `ts`, counted at their widest, on a server session id).
    pub(crate) fn len(&self) -> usize {
        HEAD_MAX + self.tail.len()
    }

    /// Commits it: the full JSON text with its identity (`id`, a UUID, and
    /// `session`), `seq` and `ts`.
    pub(crate) fn encode(&self, id: &str, session: &str, seq: u64, ts: u64) -> Vec<u8> {
        let mut text = Vec::with_capacity(HEAD_MAX + self.tail.len());
        write_head(&mut text, id, session, seq, ts);
        text.extend_from_slice(&self.tail);
        text
    }
}

/// A JSON string: copied as it is when nothing in it needs escaping.
fn write_str(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

/// `value` as JSON text, unless that is longer than `limit` bytes: then no
/// more than `limit` is ever buffered, and the error is the length it has.
pub(crate) fn to_json_within<T: serde::Serialize + ?Sized>(
    value: &T,
    limit: usize,
) -> Result<Vec<u8>, usize> {
    let mut json = Capped {
        buf: Vec::new(),
        cap: limit,
    };
    if serde_json::to_writer(&mut json, value).is_ok() {
        return Ok(json.buf);
    }
    drop(json);
    let mut counted = Counter(0);
    let _ = serde_json::to_writer(&mut counted, value);
    Err(counted.0)
}

/// The length of `value`'s JSON, counted without building it.
pub(crate) fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    let mut counted = Counter(0);
    let _ = serde_json::to_writer(&mut counted, value);
    counted.0
}

/// A writer that refuses to grow past `cap` bytes.
struct Capped {
    buf: Vec<u8>,
    cap: usize,
}

impl std::io::Write for Capped {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.buf.len().saturating_add(bytes.len()) > self.cap {
            return Err(std::io::ErrorKind::FileTooLarge.into());
        }
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A writer that only counts.
struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 = self.0.saturating_add(bytes.len());
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A rough size class of a payload, to size the output buffer once.
fn payload_size_hint(payload: &Value) -> usize {
    match payload {
        Value::Object(map) => map.len(),
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn direct_writing_matches_serde() {
        let payloads = [
            json!({}),
            json!({"call_id": "c\"1", "status": "OK", "result": {"t": "22°C\n"}}),
        ];
        let odd = "a\"b\\c\u{1}é";
        for payload in &payloads {
            for (session, run_id, thread_id) in [
                ("5f0c9d2e-8a41-4c3b-9e57-1d2f3a4b5c6d", None, None),
                (odd, Some("r-1"), Some(odd)),
                ("s", Some(odd), None),
            ] {
                let fields = Fields {
                    id: "0b7e4b1c-8c2e-4f7a-9d3e-2a1b0c9d8e7f",
                    session,
                    seq: u64::MAX,
                    ts: 0,
                    channel: Channel::Agent,
                    event: EventType::ToolDone,
                    payload,
                    run_id,
                    thread_id,
                };
                let mut direct = Vec::new();
                fields.write_to(&mut direct);
                assert_eq!(
                    String::from_utf8(direct).unwrap(),
                    serde_json::to_string(&fields).unwrap()
                );
            }
        }
    }

    const ID: &str = "0b7e3c1a-2d4f-4a6b-8c9d-0e1f2a3b4c5d";

    #[test]
    fn prepared_envelopes_encode_like_outgoing_ones_within_their_length() {
        let out = Outgoing {
            channel: Channel::Agent,
            event: EventType::ToolDone,
            payload: json!({"call_id": "c-1", "status": "OK", "result": {"t": "22°C"}}),
            run_id: Some("r\"1".into()),
            thread_id: Some("t-1".into()),
        };
        let session = "5f0c9d2e-8a41-4c3b-9e57-1d2f3a4b5c6d";
        let prepared = Prepared::new(&out);
        for (seq, ts) in [(1, 0), (u64::MAX, u64::MAX)] {
            let text = prepared.encode(ID, session, seq, ts);
            assert!(
                text.len() <= prepared.len(),
                "{} > {}",
                text.len(),
                prepared.len()
            );
            let mut direct: Value = serde_json::from_slice(&out.encode(session, seq, ts)).unwrap();
            let mut prepared: Value = serde_json::from_slice(&text).unwrap();
            direct["id"] = Value::Null;
            prepared["id"] = Value::Null;
            assert_eq!(direct, prepared);
        }
        assert_eq!(
            prepared.len() - prepared.encode(ID, session, u64::MAX, u64::MAX).len(),
            0
        );
        // Within a limit: the same envelope, or the length it would have had.
        assert_eq!(Prepared::within(&out, prepared.len()), Ok(prepared.clone()));
        assert_eq!(
            Prepared::within(&out, prepared.len() - 1),
            Err(prepared.len())
        );
        assert_eq!(Prepared::within(&out, 0), Err(prepared.len()));
        let raw = Prepared::from_json(
            Channel::System,
            EventType::Pong,
            br#"{"nonce":"n"}"#,
            None,
            None,
        );
        let v: Value = serde_json::from_slice(&raw.encode(ID, session, 2, 3)).unwrap();
        assert_eq!(
            (v["type"].as_str(), &v["payload"]),
            (Some("PONG"), &json!({"nonce": "n"}))
        );
    }

    #[test]
    fn committed_seq_and_ts_are_decimal_strings() {
        let text = Outgoing::new(Channel::System, EventType::Pong, json!({"nonce": "n-1"})).encode(
            "5f0c9d2e-8a41-4c3b-9e57-1d2f3a4b5c6d",
            12,
            1767225600000,
        );
        let v: Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(v["seq"], "12");
        assert_eq!(v["ts"], "1767225600000");
        assert_eq!(v["type"], "PONG");
    }

    #[test]
    fn committed_envelope_has_all_seven_fields_and_raw_utf8() {
        let env = Outgoing {
            channel: Channel::Agent,
            event: EventType::ToolDone,
            payload: json!({"call_id": "c-1", "status": "OK", "result": {"temperature": "22°C"}}),
            run_id: Some("r-1".into()),
            thread_id: None,
        }
        .encode("s", 3, 42);
        let text = String::from_utf8(env).unwrap();
        assert!(text.contains("22°C"), "{text}");
        // The direct encoding writes the same fields.
        let out = Outgoing::new(Channel::System, EventType::Pong, json!({"nonce": "n"}));
        let direct: Value = serde_json::from_slice(&out.encode("s", 9, 7)).unwrap();
        assert_eq!(
            (direct["seq"].as_str(), direct["ts"].as_str()),
            (Some("9"), Some("7"))
        );
        assert!(uuid::Uuid::parse_str(direct["id"].as_str().unwrap()).is_ok());
        let v: Value = serde_json::from_str(&text).unwrap();
        let obj = v.as_object().unwrap();
        for key in ["id", "session", "seq", "ts", "channel", "type", "payload"] {
            assert!(obj.contains_key(key), "missing {key}");
        }
        assert_eq!(v["run_id"], "r-1");
        assert!(!obj.contains_key("thread_id"));
        assert!(uuid::Uuid::parse_str(v["id"].as_str().unwrap()).is_ok());
        assert_eq!(v["seq"], "3");
    }
}

//! The handshake: `HAI` and its capabilities (docs/protocol.md §3).

use super::*;

/// `HAI` (docs/protocol.md §3): the handshake, sent by the server first on every
/// connection and optionally by the client.
///
/// `haip_version`, `accept_major` and `accept_events` are required by the
/// protocol but `None` after decoding a client `HAI` without them, because
/// docs/protocol.md §3.2 gives their absence a meaning (compatible; every event
/// accepted). Encoding writes a `None` one as this implementation's own value
/// ([`HAIP_VERSION`], `[1]`, all 22 event types), so every encoded `HAI` is
/// complete.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Hai {
    /// `haip_version`, e.g. `"1.1.2"`.
    pub haip_version: Option<String>,
    /// `accept_major`: the protocol majors the sender speaks; `None` when
    /// absent or not an array. Elements that are not a non-negative integer
    /// or its decimal string (`"1"`; not `"01"`, docs/protocol.md §3.2) are dropped.
    pub accept_major: Option<Vec<u64>>,
    /// `accept_events`: the types the sender wants unsolicited (docs/protocol.md §3.3);
    /// `None` when absent or not an array. Non-string elements are dropped;
    /// names are kept as sent (see [`Hai::accepted_events`]).
    pub accept_events: Option<Vec<String>>,
    /// `capabilities`, when an object.
    pub capabilities: Option<Capabilities>,
    /// `last_rx_seq`, when present: a client asking to resume (docs/protocol.md §11.3),
    /// or a server confirming a resumption.
    pub last_rx_seq: Option<LastRxSeq>,
    /// Top-level `binary_frames` (the protocol's own schema puts it here too).
    pub binary_frames: Option<bool>,
    /// Top-level `max_concurrent_runs`.
    pub max_concurrent_runs: Option<u64>,
}

/// A `HAI`'s `last_rx_seq` as it arrived: present is what makes a client
/// `HAI` a resumption attempt, even when the value is unusable (docs/protocol.md §11.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastRxSeq {
    /// A non-negative integer (a JSON integer or a decimal string).
    Seq(u64),
    /// Present, but not a non-negative integer: the attempt fails with
    /// `invalid last_rx_seq`. Encoding writes nothing for it.
    Invalid,
}

/// The `capabilities` object of a `HAI` (docs/protocol.md §3.1, §3.2, §6.11, §12.1).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Capabilities {
    /// `binary_frames`: two-frame binary is possible (server) / wanted (client).
    pub binary_frames: Option<bool>,
    /// `flow_control`, when an object: the client wants credit returned.
    pub flow_control: Option<FlowControl>,
    /// `max_concurrent_runs`.
    pub max_concurrent_runs: Option<u64>,
    /// `signed_envelopes`.
    pub signed_envelopes: Option<bool>,
    /// `tool_input`: the client can answer a tool's questions (docs/protocol.md §6.11).
    pub tool_input: Option<bool>,
    /// `log_level`: the least severe tool log line the client wants (docs/protocol.md §6.11).
    pub log_level: Option<String>,
    /// `schema_profile`: the profile the client wants tool schemas in
    /// (docs/protocol.md §6.14), as sent.
    pub schema_profile: Option<String>,
    /// Every other capability, as sent.
    pub other: Map<String, Value>,
}

/// `capabilities.flow_control` (docs/protocol.md §3.1, §12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct FlowControl {
    /// `initial_credit_messages`, when a non-negative integer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_credit_messages: Option<u64>,
    /// `initial_credit_bytes`, when a non-negative integer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_credit_bytes: Option<u64>,
}

impl Hai {
    /// A `HAI` with this implementation's version, majors and every event
    /// type, and nothing else.
    pub fn new() -> Hai {
        Hai {
            haip_version: Some(HAIP_VERSION.to_owned()),
            accept_major: Some(ACCEPT_MAJOR.to_vec()),
            accept_events: Some(all_event_names()),
            ..Hai::default()
        }
    }

    /// Whether it is compatible with major `1` (docs/protocol.md §3.2): `accept_major`
    /// absent, not an array, or containing `1` or `"1"`.
    pub fn is_compatible(&self) -> bool {
        self.accept_major
            .as_ref()
            .is_none_or(|majors| majors.iter().any(|m| ACCEPT_MAJOR.contains(m)))
    }

    /// `accept_events` as event types (unknown names dropped); `None` when
    /// every event is accepted.
    pub fn accepted_events(&self) -> Option<Vec<EventType>> {
        self.accept_events
            .as_ref()
            .map(|names| names.iter().filter_map(|n| EventType::parse(n)).collect())
    }
}

/// One `accept_major` element: a non-negative integer, or its canonical
/// decimal string (docs/protocol.md §3.2 names `1` and `"1"`; `"01"` is neither).
pub(super) fn major(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => u64_loose(value).filter(|n| itoa::Buffer::new().format(*n) == s),
        _ => None,
    }
}

pub(super) fn all_event_names() -> Vec<String> {
    EventType::ALL
        .iter()
        .map(|e| e.as_str().to_owned())
        .collect()
}

impl Payload for Hai {
    const EVENT: EventType = EventType::Hai;

    fn from_payload(payload: Map<String, Value>) -> Result<Hai, PayloadError> {
        let mut r = Reader::new(EventType::Hai, payload);
        let accept_major = match r.take("accept_major") {
            Some(Value::Array(majors)) => Some(majors.iter().filter_map(major).collect()),
            _ => None,
        };
        let accept_events = match r.take("accept_events") {
            Some(Value::Array(names)) => Some(
                names
                    .into_iter()
                    .filter_map(|n| match n {
                        Value::String(s) => Some(s),
                        _ => None,
                    })
                    .collect(),
            ),
            _ => None,
        };
        Ok(Hai {
            haip_version: r.opt_string("haip_version"),
            accept_major,
            accept_events,
            capabilities: r.opt_object("capabilities").map(Capabilities::from_map),
            last_rx_seq: r
                .take("last_rx_seq")
                .map(|v| u64_loose(&v).map_or(LastRxSeq::Invalid, LastRxSeq::Seq)),
            binary_frames: r.opt_bool("binary_frames"),
            max_concurrent_runs: r.opt_u64("max_concurrent_runs"),
        })
    }
}

impl Serialize for Hai {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        match &self.haip_version {
            Some(v) => map.serialize_entry("haip_version", v)?,
            None => map.serialize_entry("haip_version", HAIP_VERSION)?,
        }
        match &self.accept_major {
            Some(v) => map.serialize_entry("accept_major", v)?,
            None => map.serialize_entry("accept_major", &ACCEPT_MAJOR)?,
        }
        match &self.accept_events {
            Some(v) => map.serialize_entry("accept_events", v)?,
            None => map.serialize_entry("accept_events", &all_event_names())?,
        }
        put(&mut map, "capabilities", self.capabilities.as_ref())?;
        if let Some(LastRxSeq::Seq(n)) = self.last_rx_seq {
            map.serialize_entry("last_rx_seq", itoa::Buffer::new().format(n))?;
        }
        put(&mut map, "binary_frames", self.binary_frames.as_ref())?;
        put(
            &mut map,
            "max_concurrent_runs",
            self.max_concurrent_runs.as_ref(),
        )?;
        map.end()
    }
}

impl Capabilities {
    pub(super) const KNOWN: [&'static str; 7] = [
        "binary_frames",
        "flow_control",
        "max_concurrent_runs",
        "signed_envelopes",
        "tool_input",
        "log_level",
        "schema_profile",
    ];

    pub(super) fn from_map(map: Map<String, Value>) -> Capabilities {
        let mut r = Reader::new(EventType::Hai, map);
        let flow_control = r.opt_object("flow_control").map(|flow| {
            let mut f = Reader::new(EventType::Hai, flow);
            FlowControl {
                initial_credit_messages: f.opt_u64("initial_credit_messages"),
                initial_credit_bytes: f.opt_u64("initial_credit_bytes"),
            }
        });
        Capabilities {
            binary_frames: r.opt_bool("binary_frames"),
            flow_control,
            max_concurrent_runs: r.opt_u64("max_concurrent_runs"),
            signed_envelopes: r.opt_bool("signed_envelopes"),
            tool_input: r.opt_bool("tool_input"),
            log_level: r.opt_string("log_level"),
            schema_profile: r.opt_string("schema_profile"),
            other: r.map,
        }
    }
}

impl Serialize for Capabilities {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        put(&mut map, "binary_frames", self.binary_frames.as_ref())?;
        put(&mut map, "flow_control", self.flow_control.as_ref())?;
        put(
            &mut map,
            "max_concurrent_runs",
            self.max_concurrent_runs.as_ref(),
        )?;
        put(&mut map, "signed_envelopes", self.signed_envelopes.as_ref())?;
        put(&mut map, "tool_input", self.tool_input.as_ref())?;
        put(&mut map, "log_level", self.log_level.as_ref())?;
        put(&mut map, "schema_profile", self.schema_profile.as_ref())?;
        put_other(&mut map, &self.other, &Capabilities::KNOWN)?;
        map.end()
    }
}

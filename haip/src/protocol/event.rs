use std::fmt;

/// The 22 HAIP 1 event types (docs/protocol.md §5). Names are case-sensitive on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventType {
    /// `HAI`: the handshake.
    Hai,
    /// `RUN_STARTED`.
    RunStarted,
    /// `RUN_FINISHED`.
    RunFinished,
    /// `RUN_CANCEL`.
    RunCancel,
    /// `RUN_ERROR`.
    RunError,
    /// `PING`.
    Ping,
    /// `PONG`.
    Pong,
    /// `REPLAY_REQUEST`.
    ReplayRequest,
    /// `TEXT_MESSAGE_START`.
    TextMessageStart,
    /// `TEXT_MESSAGE_PART`.
    TextMessagePart,
    /// `TEXT_MESSAGE_END`.
    TextMessageEnd,
    /// `AUDIO_CHUNK`.
    AudioChunk,
    /// `TOOL_CALL`.
    ToolCall,
    /// `TOOL_UPDATE`.
    ToolUpdate,
    /// `TOOL_DONE`.
    ToolDone,
    /// `TOOL_CANCEL`.
    ToolCancel,
    /// `TOOL_LIST`.
    ToolList,
    /// `TOOL_SCHEMA`.
    ToolSchema,
    /// `ERROR`.
    Error,
    /// `FLOW_UPDATE`.
    FlowUpdate,
    /// `PAUSE_CHANNEL`.
    PauseChannel,
    /// `RESUME_CHANNEL`.
    ResumeChannel,
    /// `TOOL_INPUT`: a client's answer to a tool's question, from the
    /// `tool_input` extension (docs/protocol.md §6.11). Not one of the 22 types of
    /// [`EventType::ALL`]: the server's `HAI` does not list it.
    ToolInput,
}

impl EventType {
    /// Every event type, in the order the server's `HAI` lists them in `accept_events`.
    pub const ALL: [EventType; 22] = [
        EventType::Hai,
        EventType::RunStarted,
        EventType::RunFinished,
        EventType::RunCancel,
        EventType::RunError,
        EventType::Ping,
        EventType::Pong,
        EventType::ReplayRequest,
        EventType::TextMessageStart,
        EventType::TextMessagePart,
        EventType::TextMessageEnd,
        EventType::AudioChunk,
        EventType::ToolCall,
        EventType::ToolUpdate,
        EventType::ToolDone,
        EventType::ToolCancel,
        EventType::ToolList,
        EventType::ToolSchema,
        EventType::Error,
        EventType::FlowUpdate,
        EventType::PauseChannel,
        EventType::ResumeChannel,
    ];

    /// The wire name, e.g. `"TOOL_CALL"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            EventType::Hai => "HAI",
            EventType::RunStarted => "RUN_STARTED",
            EventType::RunFinished => "RUN_FINISHED",
            EventType::RunCancel => "RUN_CANCEL",
            EventType::RunError => "RUN_ERROR",
            EventType::Ping => "PING",
            EventType::Pong => "PONG",
            EventType::ReplayRequest => "REPLAY_REQUEST",
            EventType::TextMessageStart => "TEXT_MESSAGE_START",
            EventType::TextMessagePart => "TEXT_MESSAGE_PART",
            EventType::TextMessageEnd => "TEXT_MESSAGE_END",
            EventType::AudioChunk => "AUDIO_CHUNK",
            EventType::ToolCall => "TOOL_CALL",
            EventType::ToolUpdate => "TOOL_UPDATE",
            EventType::ToolDone => "TOOL_DONE",
            EventType::ToolCancel => "TOOL_CANCEL",
            EventType::ToolList => "TOOL_LIST",
            EventType::ToolSchema => "TOOL_SCHEMA",
            EventType::Error => "ERROR",
            EventType::FlowUpdate => "FLOW_UPDATE",
            EventType::PauseChannel => "PAUSE_CHANNEL",
            EventType::ResumeChannel => "RESUME_CHANNEL",
            EventType::ToolInput => "TOOL_INPUT",
        }
    }

    /// Parses a wire name (case-sensitive). Names from other drafts return `None`.
    pub fn parse(name: &str) -> Option<EventType> {
        EventType::ALL
            .into_iter()
            .chain(EventType::EXTENSIONS)
            .find(|e| e.as_str() == name)
    }

    /// The event types of the extensions this implementation speaks
    /// (docs/protocol.md §6.11), beyond [`EventType::ALL`].
    pub const EXTENSIONS: [EventType; 1] = [EventType::ToolInput];

    /// The payload keys the protocol defines for this type (the "known fields" of
    /// docs/protocol.md §2.3). `None` means the payload is open (`RUN_STARTED`).
    pub(crate) fn known_payload_fields(self) -> Option<&'static [&'static str]> {
        Some(match self {
            EventType::Hai => &[
                "haip_version",
                "accept_major",
                "accept_events",
                "capabilities",
                "last_rx_seq",
                "binary_frames",
                "max_concurrent_runs",
            ],
            EventType::RunStarted => return None,
            EventType::RunFinished => &["run_id", "status", "summary"],
            EventType::RunCancel => &["run_id"],
            EventType::RunError => &["code", "message", "run_id", "related_id", "detail"],
            EventType::Ping | EventType::Pong => &["nonce"],
            EventType::ReplayRequest => &["from_seq", "to_seq"],
            EventType::TextMessageStart => &["message_id", "author", "text"],
            EventType::TextMessagePart => &["message_id", "text"],
            EventType::TextMessageEnd => &["message_id", "tokens"],
            EventType::AudioChunk => &["message_id", "mime", "data", "duration_ms"],
            EventType::ToolCall => &["call_id", "tool", "params", "run_id"],
            EventType::ToolUpdate => &[
                "call_id",
                "status",
                "progress",
                "partial",
                "log",
                "input_request",
            ],
            EventType::ToolDone => &["call_id", "status", "result"],
            EventType::ToolCancel => &["call_id", "reason"],
            EventType::ToolList => &["tools"],
            EventType::ToolSchema => &[
                "tool",
                "inputSchema",
                "outputSchema",
                "schema",
                "profile",
                "title",
                "annotations",
                "icons",
            ],
            EventType::Error => &["code", "message", "related_id", "detail"],
            EventType::FlowUpdate => &["channel", "add_messages", "add_bytes"],
            EventType::PauseChannel | EventType::ResumeChannel => &["channel"],
            EventType::ToolInput => &["call_id", "request_id", "action", "content"],
        })
    }

    /// The channel an inbound envelope of this type is on when it names none (docs/protocol.md §4).
    pub const fn default_channel(self) -> Channel {
        match self {
            EventType::TextMessageStart
            | EventType::TextMessagePart
            | EventType::TextMessageEnd
            | EventType::ToolCall
            | EventType::ToolUpdate
            | EventType::ToolDone
            | EventType::ToolCancel
            | EventType::ToolInput
            | EventType::ToolList
            | EventType::ToolSchema => Channel::User,
            EventType::AudioChunk => Channel::AudioIn,
            _ => Channel::System,
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The five standard HAIP channels (docs/protocol.md §4). The server only sends on these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    /// `USER`: user-side content and requests.
    User,
    /// `AGENT`: agent-side content and tool traffic.
    Agent,
    /// `SYSTEM`: the control plane.
    System,
    /// `AUDIO_IN`: audio towards the agent.
    AudioIn,
    /// `AUDIO_OUT`: audio towards the user.
    AudioOut,
}

impl Channel {
    /// The wire name, e.g. `"AGENT"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Channel::User => "USER",
            Channel::Agent => "AGENT",
            Channel::System => "SYSTEM",
            Channel::AudioIn => "AUDIO_IN",
            Channel::AudioOut => "AUDIO_OUT",
        }
    }

    /// Parses one of the five standard names.
    pub fn parse(name: &str) -> Option<Channel> {
        [
            Channel::User,
            Channel::Agent,
            Channel::System,
            Channel::AudioIn,
            Channel::AudioOut,
        ]
        .into_iter()
        .find(|c| c.as_str() == name)
    }

    /// Whether `name` is acceptable as an inbound channel name
    /// (`^[A-Za-z0-9_\-]{1,128}$`, docs/protocol.md §2.1).
    pub(crate) fn is_valid_name(name: &str) -> bool {
        (1..=128).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_round_trips_and_names_are_case_sensitive() {
        for ty in EventType::ALL {
            assert_eq!(EventType::parse(ty.as_str()), Some(ty));
        }
        assert_eq!(EventType::parse("tool_call"), None);
        assert_eq!(EventType::parse("MESSAGE"), None);
        assert_eq!(EventType::parse("TOOL_ERROR"), None);
    }

    #[test]
    fn default_channels_follow_the_table() {
        assert_eq!(EventType::ToolCall.default_channel(), Channel::User);
        assert_eq!(EventType::AudioChunk.default_channel(), Channel::AudioIn);
        assert_eq!(EventType::Ping.default_channel(), Channel::System);
        assert_eq!(EventType::RunCancel.default_channel(), Channel::System);
    }

    #[test]
    fn channel_names() {
        assert!(Channel::is_valid_name("my-channel_1"));
        assert!(!Channel::is_valid_name(""));
        assert!(!Channel::is_valid_name("bad channel"));
        assert!(!Channel::is_valid_name(&"x".repeat(129)));
        assert_eq!(Channel::parse("AUDIO_OUT"), Some(Channel::AudioOut));
    }
}

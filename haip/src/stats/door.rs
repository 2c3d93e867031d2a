//! The door a client came in by: what the counters count connections by,
//! what a call's span names, and what a HAIP session's heartbeat and binary
//! frames depend on.

/// Which door a client came in by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Door {
    /// A HAIP session over WebSocket.
    WebSocket,
    /// A HAIP session over SSE (`/haip/sse`).
    Sse,
    /// A HAIP session over HTTP streaming (`/haip/stream`: newline-delimited
    /// JSON, or SSE framing).
    Stream,
    /// MCP over `/mcp` (Streamable HTTP).
    #[cfg(feature = "mcp")]
    McpHttp,
    /// MCP over stdio.
    #[cfg(feature = "mcp")]
    McpStdio,
}

impl Door {
    /// How many doors carry HAIP sessions: [`Door::haip_index`] is below it.
    pub(crate) const HAIP_DOORS: usize = 3;

    /// The door's place among those that carry HAIP sessions (`None`: an MCP
    /// door), for what is kept per door.
    pub(crate) fn haip_index(self) -> Option<usize> {
        match self {
            Door::WebSocket => Some(0),
            Door::Sse => Some(1),
            Door::Stream => Some(2),
            #[cfg(feature = "mcp")]
            Door::McpHttp | Door::McpStdio => None,
        }
    }

    /// A HAIP session over SSE or HTTP streaming: its heartbeats come at
    /// least every 15 s, and a transport keep-alive stands in for a `PING`
    /// the client filters (docs/protocol.md §9).
    pub(crate) fn is_stream(self) -> bool {
        matches!(self, Door::Sse | Door::Stream)
    }
}

#[cfg(test)]
mod tests {
    use super::Door;

    #[test]
    fn each_haip_door_has_its_own_counter() {
        let doors = [Door::WebSocket, Door::Sse, Door::Stream];
        let indexes: Vec<usize> = doors.iter().filter_map(|d| d.haip_index()).collect();
        assert_eq!(indexes, [0, 1, 2]);
        assert!(indexes.iter().all(|&i| i < Door::HAIP_DOORS));
        #[cfg(feature = "mcp")]
        assert_eq!(Door::McpHttp.haip_index(), None);
    }
}

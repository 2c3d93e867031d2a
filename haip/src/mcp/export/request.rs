//! What an exported call needs of the request that carries it and of the
//! client that sent it, whichever way it came in: its id and `_meta`, who
//! sent it, what its client speaks and declared, how to reach that client
//! (notifications for the request, and the server's own requests: questions,
//! sampling, roots), and when the client gave up on it.
//!
//! The call's code (`calls.rs`, `as_task.rs`, `logs.rs`) reads only this;
//! each door makes one [`CallRequest`] per `tools/call` and one
//! [`ClientLink`] per client: a request's own answer stream (`direct.rs`,
//! for `stateless.rs` too), a session's streams (`session/link.rs`), or
//! stdout (`session/stdio.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::mcp::model::{
    ClientCapabilities, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
    ProtocolVersion, RequestId,
};
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::context::share::CallerKey;
use crate::context::{Caller, Peer};
use crate::mcp::peer::Can;
use crate::stats::Door;

/// A notification's delivery: done once it is handed to the transport.
pub(crate) type Sent<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// How an exported call reaches the client of its request.
pub(crate) trait ClientLink: Send + Sync {
    /// `notifications/progress` for the request. A client that went away
    /// just misses it.
    fn progress(&self, note: ProgressNotificationParam) -> Sent<'_>;
    /// `notifications/message`: a log line of the call's tool.
    fn log(&self, note: LoggingMessageNotificationParam) -> Sent<'_>;
    /// Whom the call's questions, sampling and roots requests go to when
    /// the client is asked directly (in an MCP session, or over stdio);
    /// `stateless`: a request that cannot take a second round, whose every
    /// question is refused at once.
    fn peer(&self, stateless: bool) -> Arc<dyn Peer>;
    /// The revision the client's session agreed on, for a request that
    /// names none of its own.
    fn session_version(&self) -> Option<ProtocolVersion>;
}

/// One `tools/call` as the export sees it.
pub(crate) struct CallRequest<'a> {
    /// Its JSON-RPC id.
    pub(crate) id: &'a RequestId,
    /// Its `_meta` (progress token, per-request log level, trace context,
    /// and in MCP 2026-07-28 the client's revision and capabilities).
    pub(crate) meta: &'a Map<String, Value>,
    /// The revision it is served in: its own `_meta`'s, else its session's.
    pub(crate) version: Option<ProtocolVersion>,
    /// What its client declared: in the request's `_meta`, else in its
    /// session's `initialize`.
    pub(crate) capabilities: ClientCapabilities,
    /// The authenticated caller, if any.
    pub(crate) caller: Option<Arc<Caller>>,
    /// Whom its tasks count against (`/mcp`'s key for the request; over
    /// stdio the one client, unlimited).
    pub(crate) key: Option<CallerKey>,
    /// The way it came in.
    pub(crate) door: Door,
    /// A large call's arguments, parsed beside the message by the front door.
    pub(crate) arguments: Option<Map<String, Value>>,
    /// Its message is large: its params are checked off the runtime's workers.
    pub(crate) large: bool,
    /// Cancelled when the client gives up on it (`notifications/cancelled`,
    /// or the request's connection gone).
    pub(crate) cancelled: CancellationToken,
    /// How to reach its client.
    pub(crate) link: Arc<dyn ClientLink>,
}

impl CallRequest<'_> {
    /// The progress token the client gave, if any.
    pub(crate) fn progress_token(&self) -> Option<ProgressToken> {
        ProgressToken::deserialize(self.meta.get("progressToken")?).ok()
    }

    /// Which of the server's requests its client can be sent.
    pub(crate) fn can(&self) -> Can {
        let caps = &self.capabilities;
        Can {
            elicit: caps.elicitation.is_some(),
            sample: caps.sampling.is_some(),
            roots: caps.roots.is_some(),
        }
    }

    /// Its client takes tasks.
    pub(crate) fn takes_tasks(&self) -> bool {
        self.capabilities.supports_tasks()
    }
}

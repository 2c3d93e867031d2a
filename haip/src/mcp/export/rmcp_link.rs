//! A `tools/call` that rmcp's MCP server hands over, as the export's call
//! code sees it ([`from_rmcp`]), and its client ([`RmcpLink`]).

use std::sync::Arc;

use rmcp::model::{LoggingMessageNotificationParam, ProgressNotificationParam, ProtocolVersion};
use rmcp::service::{Peer as McpPeer, RequestContext, RoleServer};

use super::http::{LargeArguments, LargeRequest, McpCaller};
use super::request::{CallRequest, ClientLink, Sent};
use crate::context::Peer;
use crate::context::share::CallerKey;
use crate::mcp::peer::NoSession;
use crate::stats::Door;

/// The client of a request rmcp's MCP server serves.
pub(crate) struct RmcpLink(pub(crate) McpPeer<RoleServer>);

impl ClientLink for RmcpLink {
    fn progress(&self, note: ProgressNotificationParam) -> Sent<'_> {
        Box::pin(async move {
            let _ = self.0.notify_progress(note).await;
        })
    }

    fn log(&self, note: LoggingMessageNotificationParam) -> Sent<'_> {
        Box::pin(async move {
            let _ = self.0.notify_logging_message(note).await;
        })
    }

    /// rmcp serves only requests without an MCP session (haip serves the
    /// sessions, `session.rs`): the server's requests have nowhere to go.
    fn peer(&self, _stateless: bool) -> Arc<dyn Peer> {
        Arc::new(NoSession)
    }

    fn session_version(&self) -> Option<ProtocolVersion> {
        self.0.peer_info().map(|info| info.protocol_version.clone())
    }
}

/// The `tools/call` rmcp hands over as `context`, with what `/mcp`'s front
/// door put in the HTTP request's extensions.
pub(crate) fn from_rmcp(context: &RequestContext<RoleServer>) -> CallRequest<'_> {
    let parts = context.extensions.get::<hyper::http::request::Parts>();
    let ext = parts.map(|parts| &parts.extensions);
    CallRequest {
        id: &context.id,
        meta: &context.meta.0.0,
        version: context.protocol_version(),
        capabilities: context.client_capabilities().unwrap_or_default(),
        caller: ext
            .and_then(|ext| ext.get::<McpCaller>())
            .and_then(|c| c.0.clone()),
        key: match ext {
            Some(ext) => ext.get::<CallerKey>().cloned(),
            None => Some(CallerKey::Unlimited),
        },
        door: if parts.is_some() {
            Door::McpHttp
        } else {
            Door::McpStdio
        },
        arguments: ext
            .and_then(|ext| ext.get::<LargeArguments>())
            .and_then(LargeArguments::take),
        large: ext.is_some_and(|ext| ext.get::<LargeRequest>().is_some()),
        cancelled: context.ct.clone(),
        link: Arc::new(RmcpLink(context.peer.clone())),
    }
}

//! Without the `mcp` feature, in `with_mcp.rs`'s place: the same names,
//! holding nothing. Nothing is imported, and nothing is served at `/mcp`.

use std::sync::Arc;

use hyper::Response;
use tokio_util::task::TaskTracker;

use super::config::Config;
use super::reply::Body;
use super::with_redis::Cluster;
use crate::Error;
use crate::session::Shared;

// CORS methods, request headers and exposed response headers: HAIP's.
pub(super) const CORS_METHODS: &str = "GET, POST, OPTIONS";
pub(super) const CORS_REQUEST_HEADERS: &str =
    "Authorization, Content-Type, Cache-Control, X-HAIP-Message, X-HAIP-Binary, X-HAIP-Session";
pub(super) const CORS_EXPOSED_HEADERS: &str = "X-HAIP-Session";

/// Nothing the builder can be told of MCP.
#[derive(Default)]
pub(crate) struct McpGiven;

impl McpGiven {
    /// `HAIP_MCP_SESSIONS` means nothing here.
    pub(super) fn read_env(&mut self) {}

    /// Nothing to check.
    pub(super) fn validate(&self) -> Result<(), Error> {
        Ok(())
    }

    /// Nothing to keep.
    pub(super) fn settings(self) -> McpSettings {
        McpSettings
    }
}

/// No MCP bridge.
#[derive(Debug, Clone)]
pub(crate) struct McpSettings;

impl McpSettings {
    /// `/mcp` is not served.
    pub(super) fn door(&self, _config: &Config, _shared: &Arc<Shared>) -> Option<McpDoor> {
        None
    }

    /// Nothing to import.
    pub(super) async fn start_imports(&self, _shared: &Arc<Shared>, _tracker: &TaskTracker) {}

    /// `/mcp` is not served.
    pub(super) fn url(&self, _base: &str) -> Option<String> {
        None
    }
}

/// No MCP tasks, and no records of them to keep.
pub(super) fn keep_tasks(
    _instance: &str,
    _config: &Config,
    _cluster: &Cluster,
    _shared: &mut Shared,
) {
}

/// There is no `/mcp` to reach: `Hub::mcp` is always `None`.
pub(crate) enum McpDoor {}

/// `/mcp` is a path like any other.
pub(super) fn shutting_down(_path: &str, _message: &str) -> Option<Response<Body>> {
    None
}

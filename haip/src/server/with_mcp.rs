//! The MCP bridge, as the server holds it (feature `mcp`; `without_mcp.rs`
//! takes this file's place without it): what the builder was told (servers
//! to import, whether `/mcp` is served and holds sessions), the endpoint
//! `/mcp` is served by, starting the imports, serving the registry over
//! MCP stdio ([`Server::run_mcp_stdio`]), and what `/mcp` adds to the
//! routes' CORS lists and to their answers during shutdown. The requests
//! of `/mcp` themselves go through `mcp.rs`, its front door.

use std::sync::Arc;
use std::time::Duration;

use hyper::{Response, StatusCode};
use serde_json::json;
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

use super::config::Config;
use super::reply::{Body, json_response};
use super::with_redis::Cluster;
use super::{Server, ShutdownSignal};
use crate::Error;
#[cfg(feature = "mcp-import")]
use crate::mcp::McpImport;
use crate::mcp::export::McpHttp;
use crate::mcp::export::session::{self, Sessions};
use crate::mcp::tasks::{TaskSettings, Tasks};
use crate::protocol::jsonrpc::SERVER_BUSY;
use crate::session::Shared;
use crate::session::tasks::{InMemoryTaskStore, MAX_TASKS, TaskLimits};

/// The polling interval MCP task clients are advised.
const TASK_POLL_INTERVAL: Duration = Duration::from_millis(500);

// CORS methods, request headers and exposed response headers: HAIP's, plus
// Streamable HTTP MCP's (for `/mcp`).
pub(super) const CORS_METHODS: &str = "GET, POST, DELETE, OPTIONS";
pub(super) const CORS_REQUEST_HEADERS: &str = "Authorization, Content-Type, Cache-Control, Accept, X-HAIP-Message, X-HAIP-Binary, X-HAIP-Session, Mcp-Session-Id, Mcp-Protocol-Version, Last-Event-ID";
pub(super) const CORS_EXPOSED_HEADERS: &str = "X-HAIP-Session, Mcp-Session-Id";

/// What the builder was told of MCP.
#[derive(Default)]
pub(crate) struct McpGiven {
    /// `mcp`, `mcp_stdio`, `mcp_http`.
    #[cfg(feature = "mcp-import")]
    pub(super) imports: Vec<McpImport>,
    /// `mcp_endpoint` (default on).
    pub(super) endpoint: Option<bool>,
    /// `mcp_sessions` / `HAIP_MCP_SESSIONS` (default on).
    pub(super) sessions: Option<bool>,
}

impl McpGiven {
    /// `HAIP_MCP_SESSIONS=0` turns `mcp_sessions` off, `1` on.
    pub(super) fn read_env(&mut self) {
        match std::env::var("HAIP_MCP_SESSIONS").as_deref().map(str::trim) {
            Ok("1") => self.sessions = Some(true),
            Ok("0") => self.sessions = Some(false),
            _ => {}
        }
    }

    /// Refuses an import that cannot work, naming it.
    pub(super) fn validate(&self) -> Result<(), Error> {
        #[cfg(feature = "mcp-import")]
        for import in &self.imports {
            import.validate()?;
        }
        Ok(())
    }

    /// The settings the built server keeps.
    pub(super) fn settings(self) -> McpSettings {
        McpSettings {
            #[cfg(feature = "mcp-import")]
            imports: self.imports.into_iter().map(Arc::new).collect(),
            endpoint: self.endpoint.unwrap_or(true),
            sessions: self.sessions.unwrap_or(true),
        }
    }
}

/// The MCP bridge's settings: servers to import, and whether `/mcp` is served.
#[derive(Debug, Clone)]
pub(crate) struct McpSettings {
    #[cfg(feature = "mcp-import")]
    pub(super) imports: Vec<Arc<McpImport>>,
    endpoint: bool,
    /// `/mcp` holds MCP sessions instead of serving each request on its own.
    sessions: bool,
}

impl McpSettings {
    /// `/mcp`, when it is served: the endpoint, its `requestState` signed
    /// with `request_state_key` (a random key when none is set).
    pub(super) fn door(&self, config: &Config, shared: &Arc<Shared>) -> Option<McpDoor> {
        if !self.endpoint {
            return None;
        }
        let key = config.request_state_key.clone().unwrap_or_else(|| {
            // Random: no other instance can read this one's states.
            let mut key = uuid::Uuid::new_v4().as_bytes().to_vec();
            key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
            key
        });
        // The key's length was checked by `build`.
        let rounds = crate::mcp::mrtr::Rounds::new(&key, config.request_state_ttl)
            .expect("request_state_key was checked when the server was built");
        let http = McpHttp::new(
            shared,
            self.sessions,
            config.max_sessions_per_caller,
            Arc::new(rounds),
            Tasks::new(shared, task_settings(config)),
        );
        Some(McpDoor {
            http,
            parsers: Arc::new(Semaphore::new(
                (std::thread::available_parallelism().map_or(1, usize::from) / 2).max(1),
            )),
        })
    }

    /// Starts the imports: their tools are in the registry when this
    /// returns (or their first connection attempt has failed and is being
    /// retried).
    pub(super) async fn start_imports(&self, shared: &Arc<Shared>, tracker: &TaskTracker) {
        #[cfg(feature = "mcp-import")]
        crate::mcp::start_imports(&self.imports, shared, tracker).await;
        #[cfg(not(feature = "mcp-import"))]
        let _ = (shared, tracker);
    }

    /// Where `/mcp` is, on a server whose routes are at `base`
    /// (`host:port` and prefix), when it is served.
    pub(super) fn url(&self, base: &str) -> Option<String> {
        self.endpoint.then(|| format!("http://{base}/mcp"))
    }
}

/// `/mcp` as the routes reach it.
pub(crate) struct McpDoor {
    /// The Streamable HTTP endpoint.
    pub(super) http: McpHttp,
    /// Large requests being parsed: `max(1, cores / 2)` at once.
    pub(super) parsers: Arc<Semaphore>,
}

/// `503` for a request to `/mcp` once the server is shutting down: a
/// JSON-RPC error, as MCP clients expect. `None` on other paths.
pub(super) fn shutting_down(path: &str, message: &str) -> Option<Response<Body>> {
    (path == "/mcp").then(|| {
        let body = json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": SERVER_BUSY, "message": message},
        });
        json_response(StatusCode::SERVICE_UNAVAILABLE, &body)
    })
}

/// Keeps the records of MCP tasks where the sessions are: in the shared
/// store when there is one (`cluster`), else in memory.
pub(super) fn keep_tasks(instance: &str, config: &Config, cluster: &Cluster, shared: &mut Shared) {
    let limits = task_limits(config);
    let clock = Arc::clone(&shared.clock);
    shared.tasks = match cluster.task_store(limits, Arc::clone(&clock)) {
        Some(store) => store,
        None => Arc::new(InMemoryTaskStore::new(instance, limits, clock)),
    };
}

/// The records of MCP tasks' limits: the server's, and each caller's
/// share of them (its bytes, and as large a share of the records).
fn task_limits(config: &Config) -> TaskLimits {
    TaskLimits {
        ttl: config.task_ttl,
        max_tasks: MAX_TASKS,
        max_bytes: config.max_task_bytes,
        max_tasks_per_caller: TaskLimits::tasks_per_caller(
            config.max_task_bytes,
            config.max_task_bytes_per_client,
            config.max_tasks_per_client,
        ),
        max_bytes_per_caller: config.max_task_bytes_per_client,
    }
}

/// The MCP tasks settings. The tasks running on one instance are bounded
/// as the calls of its sessions are: at most `max_sessions` ×
/// `max_inflight_calls`, and never over 65 536.
fn task_settings(config: &Config) -> TaskSettings {
    TaskSettings {
        ttl: config.task_ttl,
        poll_interval: TASK_POLL_INTERVAL,
        max_per_client: config.max_tasks_per_client,
        attempts: config.task_attempts,
        max_running: config
            .session
            .max_sessions
            .saturating_mul(config.session.max_inflight_calls)
            .clamp(1, 65_536),
    }
}

impl Server {
    /// Serves the registry to an MCP client on stdin and stdout (imported MCP
    /// servers included) until stdin closes, or Ctrl-C / SIGTERM; then cancels
    /// running calls and stops imported servers. No HAIP listener is opened.
    /// Messages are newline-delimited JSON-RPC; a line over
    /// `max_message_bytes` is refused and skipped, and a request before
    /// `initialize` is answered with an error saying to send it first.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), haip::Error> {
    /// haip::Server::builder()
    ///     .annotated_tools()
    ///     .builtin_tools()
    ///     .build()?
    ///     .run_mcp_stdio()
    ///     .await
    /// # }
    /// ```
    pub async fn run_mcp_stdio(self) -> Result<(), Error> {
        // Tasks live in Redis when sessions would.
        self.cluster.connect(&self.shared).await?;
        let tracker = self.shared.runner.tasks().clone();
        self.shared
            .tracer
            .start_export(&tracker, self.shared.shutdown.child_token());
        self.mcp.start_imports(&self.shared, &tracker).await;
        let tasks = Tasks::new(&self.shared, task_settings(&self.config));
        // One client, the process that started this one: no pools.
        let sessions = Sessions::new(&self.shared, &tasks, usize::MAX);
        let serving = session::serve_stdio(sessions, tokio::io::stdin(), tokio::io::stdout());
        tokio::select! {
            () = serving => {}
            () = ShutdownSignal::new().recv() => {}
        }
        self.shared.shutdown.cancel();
        tracker.close();
        tracker.wait().await;
        Ok(())
    }
}

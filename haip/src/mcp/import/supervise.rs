//! The supervisor of an import: one task per [`McpImport`] connects
//! (spawning the child process or opening the Streamable HTTP session),
//! lists the server's tools and registers them, re-lists them on
//! `notifications/tools/list_changed`, and when the connection ends removes
//! them and reconnects with back-off.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::{ClientHandler, ServiceExt};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use crate::session::Shared;
use crate::tool::{Registry, Tool};

use super::builder::{McpImport, Source};
use super::convert::imported_tool;
use super::forward::Upstream;
use super::progress::ProgressRouter;

/// Starts one supervisor per import and waits (each at most its connect
/// timeout) until every first attempt has either registered its tools or failed.
pub(crate) async fn start(
    imports: &[Arc<McpImport>],
    shared: &Arc<Shared>,
    tracker: &tokio_util::task::TaskTracker,
) {
    let mut ready = Vec::new();
    for import in imports {
        let (tx, rx) = oneshot::channel();
        tracker.spawn(supervise(Arc::clone(import), Arc::clone(shared), tx));
        ready.push((import.connect_timeout, rx));
    }
    for (timeout, rx) in ready {
        let _ = tokio::time::timeout(timeout + Duration::from_secs(1), rx).await;
    }
}

/// A connection lasting this long resets the back-off.
const STABLE: Duration = Duration::from_secs(60);

async fn supervise(import: Arc<McpImport>, shared: Arc<Shared>, ready: oneshot::Sender<()>) {
    let shutdown = shared.shutdown.clone();
    let label = import.label();
    let mut ready = Some(ready);
    let mut delay = import.backoff.0;
    while !shutdown.is_cancelled() {
        let started = Instant::now();
        connection(&import, &shared, &label, &mut ready).await;
        if let Some(ready) = ready.take() {
            let _ = ready.send(());
        }
        if shutdown.is_cancelled() {
            break;
        }
        if started.elapsed() >= STABLE {
            delay = import.backoff.0;
        }
        tracing::info!(mcp = %label, delay_ms = delay.as_millis() as u64, "reconnecting to the MCP server after a delay");
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(import.backoff.1);
    }
}

/// One connection's life: connect, register, follow list changes, and on the
/// way out (the server gone, or our shutdown) remove the tools again.
async fn connection(
    import: &McpImport,
    shared: &Arc<Shared>,
    label: &str,
    ready: &mut Option<oneshot::Sender<()>>,
) {
    let client = ImportClient {
        progress: Arc::new(ProgressRouter::default()),
        changed: Arc::new(Notify::new()),
    };
    // Server shutdown ends the connection (and kills the child) through this token.
    let stop = shared.shutdown.child_token();
    let _stop_on_drop = stop.clone().drop_guard();
    let connecting = tokio::time::timeout(
        import.connect_timeout,
        connect(import, client.clone(), stop.clone()),
    );
    let service = tokio::select! {
        () = stop.cancelled() => return,
        connected = connecting => match connected {
            Ok(Ok(service)) => service,
            Ok(Err(reason)) => {
                tracing::warn!(mcp = %label, %reason, "could not connect to the MCP server");
                return;
            }
            Err(_) => {
                tracing::warn!(mcp = %label, timeout_ms = import.connect_timeout.as_millis() as u64, "the MCP server did not finish connecting in time");
                return;
            }
        },
    };
    let link = Arc::new(Upstream {
        peer: service.peer().clone(),
        progress: Arc::clone(&client.progress),
        label: label.to_owned(),
    });
    let mut ended = tokio::spawn(service.waiting());
    let mut owned = Owned::default();
    tracing::info!(mcp = %label, "connected to the MCP server");
    let mut listed = false;
    loop {
        // A change notice that arrives while listing is kept by `Notify`
        // and answered by the next round.
        let listing = tokio::select! {
            _ = &mut ended => break,
            listing = list_tools(&link, import) => listing,
        };
        match listing {
            Ok(tools) => {
                owned.sync(&shared.registry, import, &link, tools);
                listed = true;
            }
            Err(reason) => {
                tracing::warn!(mcp = %label, %reason, "listing the MCP server's tools failed");
                if !listed {
                    break;
                }
            }
        }
        if let Some(ready) = ready.take() {
            let _ = ready.send(());
        }
        tokio::select! {
            _ = &mut ended => break,
            () = client.changed.notified() => {
                tracing::debug!(mcp = %label, "the MCP server's tool list changed");
            }
        }
    }
    if !stop.is_cancelled() {
        tracing::warn!(mcp = %label, "the MCP server connection ended");
    }
    stop.cancel();
    // Calls still waiting get their error from the closed connection.
    owned.clear(&shared.registry, label);
    if !ended.is_finished() {
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut ended).await;
    }
}

async fn connect(
    import: &McpImport,
    client: ImportClient,
    stop: CancellationToken,
) -> Result<RunningService<RoleClient, ImportClient>, String> {
    match &import.source {
        Source::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).kill_on_drop(true);
            for (k, v) in env {
                cmd.env(k, v);
            }
            if let Some(dir) = cwd {
                cmd.current_dir(dir);
            }
            let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::inherit())
                .spawn()
                .map_err(|e| format!("cannot start `{}`: {e}", command.to_string_lossy()))?;
            client
                .serve_with_ct(transport, stop)
                .await
                .map_err(|e| e.to_string())
        }
        Source::Http { url, bearer } => {
            use rmcp::transport::StreamableHttpClientTransport;
            use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            if let Some(token) = bearer {
                config = config.auth_header(token.clone());
            }
            let transport = StreamableHttpClientTransport::from_config(config);
            client
                .serve_with_ct(transport, stop)
                .await
                .map_err(|e| e.to_string())
        }
    }
}

async fn list_tools(link: &Upstream, import: &McpImport) -> Result<Vec<rmcp::model::Tool>, String> {
    match tokio::time::timeout(import.connect_timeout, link.peer.list_all_tools()).await {
        Ok(Ok(tools)) => Ok(tools),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("tools/list timed out".into()),
    }
}

/// The tools one connection registered, by haip name.
#[derive(Default)]
struct Owned(HashMap<String, Tool>);

impl Owned {
    /// Makes the registry hold exactly `listed` for this connection: new tools
    /// are appended, changed ones replaced in place, vanished ones removed.
    /// A name held by another tool (not ours) is skipped with a warning.
    fn sync(
        &mut self,
        registry: &Registry,
        import: &McpImport,
        link: &Arc<Upstream>,
        listed: Vec<rmcp::model::Tool>,
    ) {
        let label = &link.label;
        let mut built = Vec::new();
        for remote in listed {
            match imported_tool(import, link, remote) {
                Ok(tool) => built.push(tool),
                Err(reason) => {
                    tracing::warn!(mcp = %label, %reason, "skipping an MCP tool");
                }
            }
        }
        let owned = &mut self.0;
        registry.edit(|tools| {
            let ours = |t: &Tool| owned.get(t.name()).is_some_and(|o| o.same(t));
            tools.retain(|t| !ours(t) || built.iter().any(|b| b.name() == t.name()));
            let mut now = HashMap::new();
            for tool in built {
                match tools.iter().position(|t| t.name() == tool.name()) {
                    Some(i) if ours(&tools[i]) => tools[i] = tool.clone(),
                    Some(_) => {
                        tracing::warn!(mcp = %label, tool = tool.name(), "an MCP tool has the name of a tool already served; skipping it (set a prefix)");
                        continue;
                    }
                    None => tools.push(tool.clone()),
                }
                now.insert(tool.name().to_owned(), tool);
            }
            tracing::info!(mcp = %label, tools = now.len(), "MCP tools registered");
            *owned = now;
        });
    }

    /// Removes every tool this connection registered (and still owns).
    fn clear(&mut self, registry: &Registry, label: &str) {
        if self.0.is_empty() {
            return;
        }
        let owned = std::mem::take(&mut self.0);
        registry.edit(|tools| {
            tools.retain(|t| !owned.get(t.name()).is_some_and(|o| o.same(t)));
        });
        tracing::info!(mcp = %label, tools = owned.len(), "MCP tools removed");
    }
}

/// The MCP client side of an import: relays progress and list changes.
#[derive(Clone)]
struct ImportClient {
    progress: Arc<ProgressRouter>,
    changed: Arc<Notify>,
}

impl ClientHandler for ImportClient {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.deliver(params);
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("haip", env!("CARGO_PKG_VERSION")),
        )
    }
}

//! Import: an MCP server's tools, served as haip tools.
//!
//! One supervisor task per [`McpImport`] connects (spawning the child or
//! opening the Streamable HTTP session), lists the server's tools and registers
//! them, re-lists them on `notifications/tools/list_changed`, and when the
//! connection ends removes them and reconnects with back-off.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientCapabilities, ClientConfig, ClientNotification,
    ClientRequest, ContentBlock, Implementation, MetaObject, ProgressNotificationParam,
    ProgressToken, RequestMetaObject, ServerResult,
};
use rmcp::service::{NotificationContext, Peer, PeerRequestOptions, RoleClient, RunningService};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Map, Value};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use crate::protocol::{Icon, IconTheme, ToolAnnotations};
use crate::session::Shared;
use crate::tool::Registry;
use crate::tool::{Tool, ToolError};
use crate::{Context, Error};

/// The mark of a tool imported from an MCP server: a `{"content": [...]}`
/// result holds MCP content blocks, which the MCP export passes on as they are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct McpContent;

/// An MCP server whose tools a haip server serves as its own.
///
/// Added with [`ServerBuilder::mcp`](crate::ServerBuilder::mcp), or the
/// shorthands [`mcp_stdio`](crate::ServerBuilder::mcp_stdio) and
/// [`mcp_http`](crate::ServerBuilder::mcp_http).
///
/// ```no_run
/// use haip::mcp::McpImport;
/// use std::time::Duration;
///
/// # async fn demo() -> Result<(), haip::Error> {
/// let server = haip::Server::builder()
///     .mcp(
///         McpImport::stdio("npx", ["-y", "@modelcontextprotocol/server-everything"])
///             .prefix("everything.")
///             .restart_backoff(Duration::from_millis(500), Duration::from_secs(30)),
///     )
///     .mcp(McpImport::http("http://127.0.0.1:3001/mcp").prefix("remote."))
///     .build()?;
/// server.run().await
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct McpImport {
    pub(crate) source: Source,
    pub(crate) prefix: String,
    pub(crate) backoff: (Duration, Duration),
    pub(crate) connect_timeout: Duration,
    /// A setter that does not apply to this kind of import (reported by `build`).
    misapplied: Option<&'static str>,
}

#[derive(Clone)]
pub(crate) enum Source {
    Stdio {
        command: OsString,
        args: Vec<OsString>,
        env: Vec<(OsString, OsString)>,
        cwd: Option<PathBuf>,
    },
    Http {
        url: String,
        bearer: Option<String>,
    },
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Stdio {
                command,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                // Environment values may be secrets: names only.
                .field("env", &env.iter().map(|(k, _)| k).collect::<Vec<_>>())
                .field("cwd", cwd)
                .finish(),
            Source::Http { url, bearer } => f
                .debug_struct("Http")
                .field("url", url)
                .field("bearer", &bearer.as_ref().map(|_| "<redacted>"))
                .finish(),
        }
    }
}

impl McpImport {
    /// An MCP server run as a child process, speaking MCP on its stdin and
    /// stdout (its stderr is passed through). The child is started when the
    /// haip server starts, restarted with back-off when it exits, and killed
    /// when the haip server shuts down.
    pub fn stdio<C, I, A>(command: C, args: I) -> McpImport
    where
        C: Into<OsString>,
        I: IntoIterator<Item = A>,
        A: Into<OsString>,
    {
        McpImport::new(Source::Stdio {
            command: command.into(),
            args: args.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            cwd: None,
        })
    }

    /// An MCP server reached over Streamable HTTP at `url` (`http://`; `https://`
    /// needs the `mcp-tls` feature).
    pub fn http(url: impl Into<String>) -> McpImport {
        McpImport::new(Source::Http {
            url: url.into(),
            bearer: None,
        })
    }

    fn new(source: Source) -> McpImport {
        McpImport {
            source,
            prefix: String::new(),
            backoff: (Duration::from_millis(250), Duration::from_secs(30)),
            connect_timeout: Duration::from_secs(30),
            misapplied: None,
        }
    }

    /// Prepends `prefix` to every imported tool's name (`"fs."` turns
    /// `read_file` into `fs.read_file`), to keep apart tools of the same name.
    /// Calls still reach the MCP server under the original name.
    pub fn prefix(mut self, prefix: impl Into<String>) -> McpImport {
        self.prefix = prefix.into();
        self
    }

    /// Sets an environment variable for the child process (stdio only; on an
    /// HTTP import, `build` fails).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> McpImport {
        match &mut self.source {
            Source::Stdio { env, .. } => env.push((key.into(), value.into())),
            Source::Http { .. } => self.misapplied = Some("env"),
        }
        self
    }

    /// Sets the child's working directory (stdio only; on an HTTP import,
    /// `build` fails).
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> McpImport {
        match &mut self.source {
            Source::Stdio { cwd, .. } => *cwd = Some(dir.into()),
            Source::Http { .. } => self.misapplied = Some("current_dir"),
        }
        self
    }

    /// Sends `Authorization: Bearer <token>` with every request (HTTP only; on
    /// a stdio import, `build` fails).
    pub fn bearer_token(mut self, token: impl Into<String>) -> McpImport {
        match &mut self.source {
            Source::Http { bearer, .. } => *bearer = Some(token.into()),
            Source::Stdio { .. } => self.misapplied = Some("bearer_token"),
        }
        self
    }

    /// The delay before reconnecting after the connection ends or fails:
    /// `initial`, doubling on each failure up to `max` (defaults 250 ms and 30 s).
    /// A connection that stayed up for a minute starts again from `initial`.
    pub fn restart_backoff(mut self, initial: Duration, max: Duration) -> McpImport {
        self.backoff = (initial, max.max(initial));
        self
    }

    /// How long connecting (spawning and the MCP `initialize` exchange, or the
    /// HTTP handshake) and each `tools/list` may take (default 30 s). The
    /// server's start waits for the first attempt at most this long.
    pub fn connect_timeout(mut self, timeout: Duration) -> McpImport {
        self.connect_timeout = timeout;
        self
    }

    /// A short name for logs and error messages: the command or the URL.
    pub(crate) fn label(&self) -> String {
        match &self.source {
            Source::Stdio { command, .. } => command.to_string_lossy().into_owned(),
            Source::Http { url, .. } => url.clone(),
        }
    }

    /// Rejects settings that can never work, at build time.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        let invalid = |reason: String| Error::InvalidConfig {
            setting: "mcp",
            reason,
        };
        if let Some(setter) = self.misapplied {
            let kind = match self.source {
                Source::Stdio { .. } => "a stdio",
                Source::Http { .. } => "an HTTP",
            };
            return Err(invalid(format!(
                "`{setter}` does not apply to {kind} import ({})",
                self.label()
            )));
        }
        if !self.prefix.is_empty() {
            crate::tool::validate_name(&self.prefix).map_err(|_| {
                invalid(format!(
                    "prefix `{}` may only contain ASCII letters, digits, `_`, `.` and `-`",
                    self.prefix
                ))
            })?;
        }
        if self.backoff.0.is_zero() {
            return Err(invalid(
                "the restart back-off must be longer than zero".into(),
            ));
        }
        if self.connect_timeout.is_zero() {
            return Err(invalid(
                "the connect timeout must be longer than zero".into(),
            ));
        }
        match &self.source {
            Source::Stdio { command, .. } if command.is_empty() => {
                Err(invalid("the MCP server command is empty".into()))
            }
            Source::Http { url, .. } => {
                if url.starts_with("http://") {
                    Ok(())
                } else if url.starts_with("https://") {
                    if cfg!(feature = "mcp-tls") {
                        Ok(())
                    } else {
                        Err(invalid(format!(
                            "`{url}` needs TLS: enable haip's `mcp-tls` feature"
                        )))
                    }
                } else {
                    Err(invalid(format!(
                        "`{url}` is not an http:// or https:// URL"
                    )))
                }
            }
            Source::Stdio { .. } => Ok(()),
        }
    }
}

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
    let link = Arc::new(Link {
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

async fn list_tools(link: &Link, import: &McpImport) -> Result<Vec<rmcp::model::Tool>, String> {
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
        link: &Arc<Link>,
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

/// What an imported tool's handler needs to reach its server.
struct Link {
    peer: Peer<RoleClient>,
    progress: Arc<ProgressRouter>,
    label: String,
}

/// Builds the haip tool for one MCP tool.
fn imported_tool(
    import: &McpImport,
    link: &Arc<Link>,
    remote: rmcp::model::Tool,
) -> Result<Tool, String> {
    let remote_name = remote.name.to_string();
    let name = format!("{}{}", import.prefix, remote_name);
    let description = remote
        .description
        .as_deref()
        .filter(|d| !d.trim().is_empty())
        .map(str::to_owned)
        .or_else(|| remote.title.clone())
        .unwrap_or_else(|| format!("`{remote_name}` from the MCP server {}", link.label));
    let mut builder = Tool::builder(name.clone())
        .mark(McpContent)
        .description(description)
        .input_schema(Value::Object((*remote.input_schema).clone()))
        .annotations(annotations_of(&remote));
    if let Some(title) = title_of(&remote) {
        builder = builder.title(title);
    }
    for icon in remote.icons.iter().flatten() {
        builder = builder.icon(icon_of(icon));
    }
    if let Some(output) = &remote.output_schema {
        builder = builder.output_schema(Value::Object((**output).clone()));
    }
    let link = Arc::clone(link);
    let has_output_schema = remote.output_schema.is_some();
    builder
        .handler(move |params: Value, ctx: Context| {
            let link = Arc::clone(&link);
            let remote_name = remote_name.clone();
            async move {
                // The call's trace goes on to the server called (in the
                // request's `_meta`), under a span of this call to it.
                let (upstream, trace) = ctx.trace().upstream(&remote_name, &link.label);
                let result = call(&link, remote_name, params, ctx, has_output_schema, trace).await;
                upstream.end(result.as_ref().err().map(ToolError::message));
                result
            }
        })
        .build()
        .map_err(|e| format!("MCP tool `{name}`: {e}"))
}

/// An MCP tool's title: `title`, else the older `annotations.title` (MCP's
/// order for a display name).
fn title_of(remote: &rmcp::model::Tool) -> Option<String> {
    remote
        .title
        .clone()
        .or_else(|| remote.annotations.as_ref()?.title.clone())
}

/// An MCP tool's hints, as declared (docs/protocol.md §6.13 keeps MCP's meaning).
fn annotations_of(remote: &rmcp::model::Tool) -> ToolAnnotations {
    let Some(a) = &remote.annotations else {
        return ToolAnnotations::default();
    };
    ToolAnnotations {
        read_only_hint: a.read_only_hint,
        destructive_hint: a.destructive_hint,
        idempotent_hint: a.idempotent_hint,
        open_world_hint: a.open_world_hint,
    }
}

/// An MCP icon as ours.
fn icon_of(icon: &rmcp::model::Icon) -> Icon {
    Icon {
        src: icon.src.clone(),
        mime_type: icon.mime_type.clone(),
        sizes: icon.sizes.clone().unwrap_or_default(),
        theme: match icon.theme {
            Some(rmcp::model::IconTheme::Light) => Some(IconTheme::Light),
            Some(rmcp::model::IconTheme::Dark) => Some(IconTheme::Dark),
            // A theme a later MCP names: for any background, as far as we know.
            _ => None,
        },
    }
}

/// One call: `tools/call` with a progress token, progress relayed to the
/// context, cancellation relayed as `notifications/cancelled`.
async fn call(
    link: &Link,
    remote_name: String,
    params: Value,
    ctx: Context,
    has_output_schema: bool,
    trace: Map<String, Value>,
) -> Result<Value, ToolError> {
    let arguments = match params {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => {
            return Err(ToolError::invalid_params(format!(
                "MCP tools take an object of arguments, not {other}"
            )));
        }
    };
    let mut params = CallToolRequestParams::new(remote_name.clone()).with_arguments(arguments);
    if !trace.is_empty() {
        params.meta = Some(RequestMetaObject(MetaObject(trace)));
    }
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let gone = |e: &dyn std::fmt::Display| {
        ToolError::execution(format!(
            "the MCP server {} is not reachable: {e}",
            link.label
        ))
    };
    let mut handle = link
        .peer
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .map_err(|e| gone(&e))?;
    let _progress = link
        .progress
        .register(handle.progress_token.clone(), ctx.clone());
    let response = tokio::select! {
        response = &mut handle.rx => response,
        () = ctx.cancelled() => {
            let notice = CancelledNotification::new(CancelledNotificationParam::new(
                Some(handle.id.clone()),
                Some("cancelled by the HAIP client".into()),
            ));
            let _ = link
                .peer
                .send_notification(ClientNotification::CancelledNotification(notice))
                .await;
            return Err(ToolError::cancelled());
        }
    };
    let result = match response {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => return Err(mcp_error(link, &remote_name, e)),
        Err(_) => return Err(went_away(link, &remote_name)),
    };
    match result {
        ServerResult::CallToolResult(result) => tool_result(result, has_output_schema),
        other => Err(ToolError::execution(format!(
            "the MCP server {} answered `{remote_name}` with something other than a tool result: {}",
            link.label,
            serde_json::to_string(&other).unwrap_or_default()
        ))),
    }
}

/// The connection ended while the call waited for its answer.
fn went_away(link: &Link, remote_name: &str) -> ToolError {
    ToolError::execution(format!(
        "the MCP server {} went away during the call to `{remote_name}`",
        link.label
    ))
}

fn mcp_error(link: &Link, remote_name: &str, e: rmcp::ServiceError) -> ToolError {
    match e {
        rmcp::ServiceError::McpError(data) => {
            let message = format!(
                "the MCP server {} rejected the call to `{remote_name}`: {}",
                link.label, data.message
            );
            let details = serde_json::json!({ "mcp_code": data.code.0, "data": data.data });
            if data.code.0 == crate::protocol::jsonrpc::INVALID_PARAMS {
                ToolError::invalid_params(message).with_details(details)
            } else {
                ToolError::execution(message).with_details(details)
            }
        }
        rmcp::ServiceError::TransportClosed => went_away(link, remote_name),
        other => ToolError::execution(format!(
            "the call to `{remote_name}` on the MCP server {} failed: {other}",
            link.label
        )),
    }
}

/// A `CallToolResult` as a haip result: `isError` becomes
/// `TOOL_EXECUTION_ERROR` (its text as the message, the blocks as details);
/// otherwise the structured content when present, else `{"content": [...]}`.
pub(crate) fn tool_result(
    result: CallToolResult,
    has_output_schema: bool,
) -> Result<Value, ToolError> {
    let content = serde_json::to_value(&result.content).unwrap_or(Value::Array(Vec::new()));
    if result.is_error == Some(true) {
        let text = text_of(&result.content);
        let message = if text.is_empty() {
            "the MCP tool reported an error".to_owned()
        } else {
            text
        };
        return Err(
            ToolError::execution(message).with_details(serde_json::json!({ "content": content }))
        );
    }
    match result.structured_content {
        Some(structured) => Ok(structured),
        None if has_output_schema => Err(ToolError::execution(
            "the MCP tool declares an output schema but returned no structured content",
        )
        .with_details(serde_json::json!({ "content": content }))),
        None => Ok(serde_json::json!({ "content": content })),
    }
}

/// The text blocks, joined by newlines.
fn text_of(content: &[ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Routes `notifications/progress` to the call whose request carried the token.
#[derive(Default)]
struct ProgressRouter {
    state: Mutex<RouterState>,
}

#[derive(Default)]
struct RouterState {
    calls: HashMap<ProgressToken, Context>,
    /// Notifications for tokens not (yet) registered: the request is sent
    /// before its call can register the token, so a fast server's first
    /// report may arrive first. The newest few are kept for that moment.
    early: std::collections::VecDeque<ProgressNotificationParam>,
}

/// Unclaimed notifications kept for calls about to register.
const EARLY: usize = 16;

impl ProgressRouter {
    fn register(self: &Arc<Self>, token: ProgressToken, ctx: Context) -> ProgressGuard {
        let early = {
            let mut state = self.lock();
            let mut early = Vec::new();
            state.early.retain(|p| {
                let mine = p.progress_token == token;
                if mine {
                    early.push(p.clone());
                }
                !mine
            });
            state.calls.insert(token.clone(), ctx.clone());
            early
        };
        for p in early {
            report(&ctx, p);
        }
        ProgressGuard {
            router: Arc::clone(self),
            token,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RouterState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Relays one notification to its call's context, or keeps it briefly
    /// when no call holds its token yet.
    fn deliver(&self, p: ProgressNotificationParam) {
        let ctx = {
            let mut state = self.lock();
            match state.calls.get(&p.progress_token) {
                Some(ctx) => ctx.clone(),
                None => {
                    if state.early.len() == EARLY {
                        state.early.pop_front();
                    }
                    state.early.push_back(p);
                    return;
                }
            }
        };
        report(&ctx, p);
    }
}

/// `progress/total` becomes the percentage (none without a total), the
/// message becomes `partial`.
fn report(ctx: &Context, p: ProgressNotificationParam) {
    let percent = match p.total {
        Some(total) if total > 0.0 => Some(p.progress / total * 100.0),
        _ => None,
    };
    ctx.report_progress(percent, p.message.map(Value::String));
}

struct ProgressGuard {
    router: Arc<ProgressRouter>,
    token: ProgressToken,
}

impl Drop for ProgressGuard {
    fn drop(&mut self) {
        self.router.lock().calls.remove(&self.token);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{ProgressSink, ProgressSlot};
    use crate::exec::CallKey;
    use serde_json::json;

    fn text_result(text: &str, is_error: bool) -> CallToolResult {
        let blocks = vec![ContentBlock::text(text)];
        if is_error {
            CallToolResult::error(blocks)
        } else {
            CallToolResult::success(blocks)
        }
    }

    /// What the MCP export sets on a tool (the code its `mcp_tool` uses):
    /// title, annotations only when declared, icons only when there are any.
    fn exported(tool: &Tool) -> rmcp::model::Tool {
        let mut out = rmcp::model::Tool::new(tool.name().to_owned(), "", Arc::new(Map::new()));
        out.title = tool.title().map(str::to_owned);
        let hints = tool.annotations();
        if !hints.is_empty() {
            out.annotations = Some(rmcp::model::ToolAnnotations::from_raw(
                None,
                hints.read_only_hint,
                hints.destructive_hint,
                hints.idempotent_hint,
                hints.open_world_hint,
            ));
        }
        if !tool.icons().is_empty() {
            out.icons = Some(tool.icons().iter().map(mcp_icon).collect());
        }
        out
    }

    fn mcp_icon(icon: &Icon) -> rmcp::model::Icon {
        let mut out = rmcp::model::Icon::new(icon.src.clone());
        out.mime_type = icon.mime_type.clone();
        if !icon.sizes.is_empty() {
            out.sizes = Some(icon.sizes.clone());
        }
        out.theme = icon.theme.map(|theme| match theme {
            IconTheme::Light => rmcp::model::IconTheme::Light,
            IconTheme::Dark => rmcp::model::IconTheme::Dark,
        });
        out
    }

    #[test]
    fn titles_hints_and_icons_survive_export_and_import() {
        let noop = |_: Value, _: Context| async { Ok(Value::Null) };
        let declared = Tool::builder("wipe")
            .title("Wipe the disk")
            .annotations(ToolAnnotations::new().destructive(true).open_world(false))
            .icon(
                Icon::new("https://example.com/wipe.svg")
                    .with_mime_type("image/svg+xml")
                    .with_sizes(["any"])
                    .with_theme(IconTheme::Dark),
            )
            .icon(Icon::new("data:image/png;base64,AAAA"))
            .handler(noop)
            .build()
            .unwrap();
        let remote = exported(&declared);
        assert_eq!(
            serde_json::to_value(&remote).unwrap(),
            json!({
                "name": "wipe", "description": "", "inputSchema": {},
                "title": "Wipe the disk",
                "annotations": {"destructiveHint": true, "openWorldHint": false},
                "icons": [
                    {"src": "https://example.com/wipe.svg", "mimeType": "image/svg+xml",
                     "sizes": ["any"], "theme": "dark"},
                    {"src": "data:image/png;base64,AAAA"}
                ]
            }),
            "MCP's field names, only what was declared"
        );
        assert_eq!(title_of(&remote).as_deref(), declared.title());
        assert_eq!(&annotations_of(&remote), declared.annotations());
        let icons: Vec<Icon> = remote.icons.iter().flatten().map(icon_of).collect();
        assert_eq!(icons, declared.icons());

        // Nothing declared: nothing sent, nothing imported.
        let plain = Tool::builder("plain").handler(noop).build().unwrap();
        let remote = exported(&plain);
        let sent = serde_json::to_value(&remote).unwrap();
        for key in ["title", "annotations", "icons"] {
            assert!(sent.get(key).is_none(), "{key}: {sent}");
        }
        assert_eq!(title_of(&remote), None);
        assert!(annotations_of(&remote).is_empty());

        // The older place for a title is read too.
        let mut old = rmcp::model::Tool::new("old", "", Arc::new(Map::new()));
        old.annotations =
            Some(rmcp::model::ToolAnnotations::with_title("Old style").read_only(true));
        assert_eq!(title_of(&old).as_deref(), Some("Old style"));
        assert_eq!(annotations_of(&old), ToolAnnotations::new().read_only(true));
    }

    #[test]
    fn results_map_to_structured_content_or_content_blocks() {
        let plain = tool_result(text_result("hi", false), false).unwrap();
        assert_eq!(plain, json!({"content": [{"type": "text", "text": "hi"}]}));

        let mut structured = text_result("{\"a\":1}", false);
        structured.structured_content = Some(json!({"a": 1}));
        assert_eq!(tool_result(structured, true).unwrap(), json!({"a": 1}));

        let missing = tool_result(text_result("no structure", false), true).unwrap_err();
        assert_eq!(missing.code().as_str(), "TOOL_EXECUTION_ERROR");
        assert!(missing.message().contains("no structured content"));
    }

    #[test]
    fn is_error_becomes_a_tool_execution_error_with_the_text() {
        let mut result = text_result("disk full", true);
        result.content.push(ContentBlock::text("try again later"));
        let e = tool_result(result, false).unwrap_err();
        assert_eq!(e.code().as_str(), "TOOL_EXECUTION_ERROR");
        assert_eq!(e.message(), "disk full\ntry again later");
        assert_eq!(e.details().unwrap()["content"][0]["text"], "disk full");

        let silent = tool_result(CallToolResult::error(Vec::new()), false).unwrap_err();
        assert_eq!(silent.message(), "the MCP tool reported an error");
    }

    #[test]
    fn debug_output_hides_secrets() {
        let http = format!(
            "{:?}",
            McpImport::http("http://h/mcp").bearer_token("s3cret")
        );
        assert!(
            http.contains("<redacted>") && !http.contains("s3cret"),
            "{http}"
        );
        let stdio = format!(
            "{:?}",
            McpImport::stdio("srv", ["-v"]).env("API_KEY", "s3cret")
        );
        assert!(
            stdio.contains("API_KEY") && !stdio.contains("s3cret"),
            "{stdio}"
        );
    }

    #[test]
    fn settings_that_can_never_work_are_rejected() {
        let reason = |i: McpImport| match i.validate() {
            Err(Error::InvalidConfig { setting, reason }) => {
                assert_eq!(setting, "mcp");
                reason
            }
            other => panic!("expected InvalidConfig, got {other:?}"),
        };
        assert!(McpImport::stdio("node", ["x.js"]).validate().is_ok());
        assert!(McpImport::http("http://127.0.0.1:1/mcp").validate().is_ok());
        assert!(reason(McpImport::stdio("", Vec::<String>::new())).contains("empty"));
        assert!(reason(McpImport::stdio("x", ["y"]).prefix("a b")).contains("prefix"));
        assert!(reason(McpImport::http("ftp://h/mcp")).contains("not an http"));
        if !cfg!(feature = "mcp-tls") {
            assert!(reason(McpImport::http("https://h/mcp")).contains("mcp-tls"));
        }
        let zero = McpImport::stdio("x", ["y"]).restart_backoff(Duration::ZERO, Duration::ZERO);
        assert!(reason(zero).contains("back-off"));
        let zero = McpImport::http("http://h/").connect_timeout(Duration::ZERO);
        assert!(reason(zero).contains("timeout"));
        let misplaced = McpImport::http("http://h/").env("K", "v");
        assert!(reason(misplaced).contains("`env` does not apply to an HTTP import"));
        let misplaced = McpImport::http("http://h/").current_dir("/tmp");
        assert!(reason(misplaced).contains("`current_dir`"));
        let misplaced = McpImport::stdio("srv", ["-v"]).bearer_token("t");
        assert!(reason(misplaced).contains("`bearer_token` does not apply to a stdio import"));
    }

    #[test]
    fn progress_is_routed_by_token_as_percent_and_partial() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let slot = Arc::new(ProgressSlot::default());
        let ctx = Context::new(
            "c".into(),
            Arc::from("s"),
            CancellationToken::new(),
            Some(ProgressSink {
                key: CallKey(1),
                slot: Arc::clone(&slot),
                events: tx,
            }),
            None,
            None,
            None,
        );
        let router = Arc::new(ProgressRouter::default());
        let token = ProgressToken(rmcp::model::NumberOrString::Number(7));
        // A report that beats the registration is kept and handed over.
        router.deliver(ProgressNotificationParam::new(token.clone(), 1.0).with_total(2.0));
        let guard = router.register(token.clone(), ctx);
        assert_eq!(
            slot.take().unwrap().percent,
            Some(serde_json::Number::from(50))
        );

        router.deliver(ProgressNotificationParam::new(token.clone(), 1.0).with_total(4.0));
        let p = slot.take().unwrap();
        assert_eq!(p.percent, Some(serde_json::Number::from(25)));
        assert_eq!(p.partial, None);

        let note = ProgressNotificationParam::new(token.clone(), 3.0).with_message("three");
        router.deliver(note);
        let p = slot.take().unwrap();
        assert_eq!(p.percent, None, "no total, no percentage");
        assert_eq!(p.partial, Some(json!("three")));

        let other = ProgressToken(rmcp::model::NumberOrString::Number(8));
        router.deliver(ProgressNotificationParam::new(other, 1.0).with_total(2.0));
        assert!(slot.take().is_none(), "another call's token is not ours");

        drop(guard);
        router.deliver(ProgressNotificationParam::new(token, 2.0).with_total(4.0));
        assert!(slot.take().is_none(), "a finished call gets nothing");

        // Unclaimed reports are bounded.
        for i in 0..100 {
            let stray = ProgressToken(rmcp::model::NumberOrString::Number(1000 + i));
            router.deliver(ProgressNotificationParam::new(stray, 1.0));
        }
        assert_eq!(router.lock().early.len(), EARLY);
    }
}

//! The server: builder, listener, graceful shutdown, and [`serve`].

mod config;
mod http;
mod stats;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub(crate) use config::Config;
pub(crate) use stats::{Ended, Stats};

use crate::Error;
use crate::session::Shared;
use crate::tool::{Registry, StateMap, Tool, builtin};

/// Serves every `#[haip_tool]` function linked into the binary on `HAIP_ADDR`
/// (default `127.0.0.1:8080`) until Ctrl-C or SIGTERM, then shuts down gracefully.
///
/// This is [`Server::builder`] with the environment applied
/// ([`ServerBuilder::from_env`]) and the annotated tools
/// ([`ServerBuilder::annotated_tools`]), built and [`run`](Server::run).
///
/// ```no_run
/// #[tokio::main]
/// async fn main() -> Result<(), haip::Error> {
///     haip::serve().await
/// }
/// ```
pub async fn serve() -> Result<(), Error> {
    Server::builder()
        .from_env()
        .annotated_tools()
        .build()?
        .run()
        .await
}

/// A configured HAIP server, ready to [`start`](Server::start) or [`run`](Server::run).
///
/// ```no_run
/// # async fn demo() -> Result<(), haip::Error> {
/// let server = haip::Server::builder()
///     .addr("127.0.0.1:9000")
///     .builtin_tools()
///     .max_inflight_calls(16)
///     .build()?;
/// let handle = server.start().await?;
/// println!("listening on {}", handle.local_addr());
/// handle.shutdown().await;
/// # Ok(()) }
/// ```
pub struct Server {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.shared.config.addr)
            .finish_non_exhaustive()
    }
}

/// Configures a [`Server`]. Every limit of the protocol's settings table has a
/// setter; unset ones keep their defaults. [`build`](ServerBuilder::build)
/// rejects nonsensical values, naming the setting.
#[derive(Default)]
#[must_use = "a ServerBuilder does nothing until .build() is called"]
pub struct ServerBuilder {
    config: Config,
    builtins: bool,
    annotated: bool,
    /// Tools with where they came from, for duplicate-name errors.
    tools: Vec<(Tool, String)>,
    state: StateMap,
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("config", &self.config)
            .field("builtins", &self.builtins)
            .field("annotated", &self.annotated)
            .field(
                "tools",
                &self.tools.iter().map(|(t, _)| t.name()).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty),* $(,)?) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, value: $ty) -> Self {
                self.config.$name = value;
                self
            }
        )*
    };
}

impl ServerBuilder {
    /// The listen address (`host:port`; default `127.0.0.1:8080`). Port 0 picks a free port.
    pub fn addr(mut self, addr: impl Into<String>) -> Self {
        self.config.addr = addr.into();
        self
    }

    /// Applies the environment: `HAIP_ADDR` sets the listen address.
    pub fn from_env(mut self) -> Self {
        if let Ok(addr) = std::env::var("HAIP_ADDR")
            && !addr.trim().is_empty()
        {
            self.config.addr = addr.trim().to_owned();
        }
        self
    }

    /// Serves the demo tools `echo`, `add` and `weather` (first, in that order).
    pub fn builtin_tools(mut self) -> Self {
        self.builtins = true;
        self
    }

    /// Adds a tool. Two tools with the same name make [`build`](Self::build) fail.
    ///
    /// For a `#[haip_tool]` function `add`, pass `add::tool()`.
    pub fn tool(mut self, tool: Tool) -> Self {
        let origin = format!("`{}` added with .tool()", tool.name());
        self.tools.push((tool, origin));
        self
    }

    /// Adds several tools.
    pub fn tools(mut self, tools: impl IntoIterator<Item = Tool>) -> Self {
        for tool in tools {
            self = self.tool(tool);
        }
        self
    }

    /// Serves every `#[haip_tool]` function linked into the binary, ordered by
    /// source file and line. [`serve`] does this; use it with a builder to add
    /// settings or state.
    pub fn annotated_tools(mut self) -> Self {
        self.annotated = true;
        self
    }

    /// Registers application state, handed to tools that take a
    /// [`State<T>`](crate::State) parameter (or call [`Context::state`](crate::Context::state)).
    /// One value per type; a later one replaces an earlier one.
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.state.insert(value);
        self
    }

    setters! {
        /// Largest WebSocket message accepted, in bytes (default 1 MiB). Larger ones
        /// get `MESSAGE_TOO_LARGE` and close 1009.
        max_message_bytes: usize,
        /// Most connected sessions (default 10 000); more are closed with 1013.
        max_sessions: usize,
        /// Calls of one session executing at once (default 64).
        max_inflight_calls: usize,
        /// Calls of one session waiting for a slot (default 256); beyond, `RATE_LIMITED`.
        max_queued_calls: usize,
        /// Maximum concurrent runs per session, advertised in `HAI` (default 10).
        max_concurrent_runs: usize,
        /// Messages of credit advertised per channel (default 1000).
        initial_credit_messages: u64,
        /// Bytes of credit advertised per channel (default 1 MiB).
        initial_credit_bytes: u64,
        /// Envelopes waiting to be written per session (default 4096); a client that
        /// lets more pile up is disconnected.
        max_outbound_queue: usize,
        /// How long a cancelled or timed-out tool may take to stop before it is aborted (default 5 s).
        cancel_grace: Duration,
        /// Send `TOOL_UPDATE RUNNING` when a call starts executing (default off).
        announce_running: bool,
        /// Add the legacy `schema` field to `TOOL_SCHEMA` replies (default off).
        tool_schema_legacy_field: bool,
        /// Turn results that violate the output schema into errors (default off: logged and counted).
        strict_output_validation: bool,
        /// Put panic texts in `INTERNAL_ERROR` messages (default off; for development only).
        debug_errors: bool,
    }

    /// Timeout for tools that set none themselves (default: none).
    pub fn tool_timeout(mut self, timeout: Duration) -> Self {
        self.config.tool_timeout = Some(timeout);
        self
    }

    /// Interval of the server's heartbeat `PING` (default 30 s; `Duration::ZERO` disables it).
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.config.heartbeat_interval = (!interval.is_zero()).then_some(interval);
        self
    }

    /// Close connections with no inbound data for this long (default: never).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.config.idle_timeout = Some(timeout);
        self
    }

    /// Checks the settings and assembles the tool registry.
    pub fn build(self) -> Result<Server, Error> {
        self.config.validate()?;
        let registry = Registry::default();
        let mut tools: Vec<(Tool, String)> = Vec::new();
        if self.builtins {
            tools.extend(builtin::tools().into_iter().map(|t| {
                let origin = format!("built-in `{}`", t.name());
                (t, origin)
            }));
        }
        if self.annotated {
            tools.extend(crate::__private::annotated_tools()?);
        }
        tools.extend(self.tools);
        let mut seen: std::collections::HashMap<String, String> = std::collections::HashMap::new();
        for (tool, origin) in tools {
            if let Some(first) = seen.get(tool.name()) {
                return Err(Error::DuplicateTool {
                    name: tool.name().to_owned(),
                    first: first.clone(),
                    second: origin,
                });
            }
            check_state(&tool, &self.state)?;
            seen.insert(tool.name().to_owned(), origin);
            registry.register(tool);
        }
        Ok(Server {
            shared: Arc::new(Shared {
                config: self.config,
                registry,
                state: Arc::new(self.state),
                stats: Stats::new(),
                shutdown: CancellationToken::new(),
            }),
        })
    }
}

/// A tool that needs state the server lacks is refused.
fn check_state(tool: &Tool, state: &StateMap) -> Result<(), Error> {
    match tool.required_state().iter().find(|r| !state.contains(r.id)) {
        Some(missing) => Err(Error::MissingState {
            tool: tool.name().to_owned(),
            state: missing.name,
        }),
        None => Ok(()),
    }
}

impl Server {
    /// Starts configuring a server.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// Binds the listen address and serves in the background.
    pub async fn start(self) -> Result<ServerHandle, Error> {
        let addr = self.shared.config.addr.clone();
        let listener = TcpListener::bind(&addr)
            .await
            .map_err(|source| Error::Bind {
                addr: addr.clone(),
                source,
            })?;
        let local_addr = listener.local_addr()?;
        let log_url = format!("ws://{local_addr}/haip");
        if tracing::dispatcher::has_been_set() {
            tracing::info!(url = %log_url, "haip listening");
        } else {
            eprintln!("haip listening on {log_url}");
        }
        let tracker = TaskTracker::new();
        let accept = tokio::spawn(accept_loop(
            listener,
            Arc::clone(&self.shared),
            tracker.clone(),
        ));
        Ok(ServerHandle {
            inner: Arc::new(HandleInner {
                shared: self.shared,
                local_addr,
                tracker,
                accept: tokio::sync::Mutex::new(Some(accept)),
            }),
        })
    }

    /// Binds and serves until Ctrl-C or SIGTERM, then shuts down gracefully:
    /// stops accepting, cancels running calls (each still gets its `TOOL_DONE`),
    /// closes WebSockets with 1001.
    pub async fn run(self) -> Result<(), Error> {
        let handle = self.start().await?;
        shutdown_signal().await;
        tracing::info!("shutting down");
        handle.shutdown().await;
        Ok(())
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// How long a client may take to send its request headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Cap on hyper's per-connection read buffer (request line and headers).
const MAX_HTTP_BUF: usize = 64 * 1024;

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, tracker: TaskTracker) {
    loop {
        let (stream, _peer) = tokio::select! {
            () = shared.shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Usually out of file descriptors: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&shared);
        let conn_tracker = tracker.clone();
        tracker.spawn(async move {
            let service = {
                let shared = Arc::clone(&shared);
                service_fn(move |req| http::route(req, Arc::clone(&shared), conn_tracker.clone()))
            };
            // A client that never finishes its request headers is dropped
            // instead of holding a connection open for ever.
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .max_buf_size(MAX_HTTP_BUF)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "http connection ended with an error");
                    }
                }
                () = shared.shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
                }
            }
        });
    }
}

/// A running server: its address, its live tool registry, and shutdown. Cheap to clone.
#[derive(Clone)]
pub struct ServerHandle {
    inner: Arc<HandleInner>,
}

struct HandleInner {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    tracker: TaskTracker,
    accept: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("local_addr", &self.inner.local_addr)
            .finish_non_exhaustive()
    }
}

impl ServerHandle {
    /// The address the server listens on (with the real port when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr
    }

    /// Adds a tool, or replaces the tool of the same name in place; returns the
    /// replaced tool. Visible to the next `TOOL_LIST` of every session.
    ///
    /// Fails (and changes nothing) when the tool needs state the server was not given.
    pub fn register_tool(&self, tool: Tool) -> Result<Option<Tool>, Error> {
        check_state(&tool, &self.inner.shared.state)?;
        Ok(self.inner.shared.registry.register(tool))
    }

    /// Removes a tool; calls already running keep running. Returns the removed tool.
    pub fn unregister_tool(&self, name: &str) -> Option<Tool> {
        self.inner.shared.registry.unregister(name)
    }

    /// The registered tools, in registry order.
    pub fn tools(&self) -> Vec<Tool> {
        self.inner.shared.registry.snapshot().tools().to_vec()
    }

    /// Shuts down gracefully and waits until every connection has closed:
    /// stops accepting, cancels running calls (each still gets its `TOOL_DONE`),
    /// closes WebSockets with 1001.
    pub async fn shutdown(&self) {
        self.inner.shared.shutdown.cancel();
        if let Some(accept) = self.inner.accept.lock().await.take() {
            let _ = accept.await;
        }
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }
}

//! The server: builder, listener, graceful shutdown, and [`serve`].

mod access;
mod answer;
mod body;
mod builder;
mod compose;
mod config;
pub(crate) mod driver;
mod guard;
mod http;
mod hub;
#[cfg(feature = "inspector")]
mod inspector;
mod limits;
#[cfg(feature = "redis")]
mod links;
#[cfg(feature = "mcp")]
mod mcp;
mod reply;
mod service;
mod upstream;

// Each optional subsystem's server side is one module, chosen whole by its
// feature: the subsystem's file, or in its place one with the same names
// holding nothing (and saying, where the builder was told to use it, that
// the feature is missing). The rest of the server names them alike.
#[cfg_attr(not(feature = "metrics"), path = "without_metrics.rs")]
mod metrics;
#[cfg_attr(not(feature = "mcp"), path = "without_mcp.rs")]
mod with_mcp;
#[cfg_attr(not(feature = "oauth"), path = "without_oauth.rs")]
mod with_oauth;
#[cfg_attr(not(feature = "redis"), path = "without_redis.rs")]
mod with_redis;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;

pub use access::PeerAddr;
pub use builder::ServerBuilder;
pub use compose::{Mount, ToolSet};
pub(crate) use config::Config;
pub use limits::Limits;
pub use service::{HaipService, ServiceBody};

use crate::Error;
use crate::auth::Authenticator;
use crate::session::Shared;
use crate::tool::Tool;
use builder::check_state;
use guard::Cors;
use hub::{Hub, Peers, Sessions};
use with_mcp::McpSettings;
use with_oauth::ResourceServer;
use with_redis::Cluster;

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
///     .limits(haip::Limits {
///         max_inflight_calls: 16,
///         ..haip::Limits::default()
///     })
///     .build()?;
/// let handle = server.start().await?;
/// println!("listening on {}", handle.local_addr());
/// handle.shutdown().await;
/// # Ok(()) }
/// ```
pub struct Server {
    /// The server's own settings (listener, HTTP, authentication).
    config: Arc<Config>,
    shared: Arc<Shared>,
    /// This instance's name (`/health`, `/stats`, the shared session store).
    instance: Arc<str>,
    /// The shared session store, when sessions are shared through Redis.
    cluster: Cluster,
    auth: Option<Arc<dyn Authenticator>>,
    /// The OAuth resource server, when it is how clients authenticate.
    oauth: ResourceServer,
    cors: Cors,
    /// The MCP bridge: servers to import, and whether `/mcp` is served.
    mcp: McpSettings,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.config.addr)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Starts configuring a server.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// Binds the listen address and serves in the background.
    pub async fn start(self) -> Result<ServerHandle, Error> {
        let addr = self.config.addr.clone();
        let listener = TcpListener::bind(&addr)
            .await
            .map_err(|source| Error::Bind {
                addr: addr.clone(),
                source,
            })?;
        self.serve_on(listener.into(), Some(addr)).await
    }

    /// Serves in the background on a listener the caller bound: a
    /// `tokio::net::TcpListener` (one on `127.0.0.1:0` in a test, or one
    /// handed over by systemd's socket activation through
    /// `std::net::TcpListener` and `TcpListener::from_std`), or on Unix a
    /// `tokio::net::UnixListener`. The listener's own address replaces
    /// [`addr`](ServerBuilder::addr). Everything [`start`](Self::start)
    /// does holds: the header read timeout, `max_connections_per_peer`
    /// (a Unix socket's peers count as one loopback peer), closing a
    /// connection whose client stops taking its answers, and the refusal to
    /// serve a non-loopback TCP address without authentication.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), haip::Error> {
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// let handle = haip::Server::builder()
    ///     .builtin_tools()
    ///     .build()?
    ///     .serve(listener)
    ///     .await?;
    /// println!("listening on {}", handle.local_addr());
    /// handle.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn serve(self, listener: impl Into<Listener>) -> Result<ServerHandle, Error> {
        self.serve_on(listener.into(), None).await
    }

    /// [`serve`](Self::serve); `named`: the address as configured.
    async fn serve_on(
        self,
        listener: Listener,
        named: Option<String>,
    ) -> Result<ServerHandle, Error> {
        let bound = listener.bound()?;
        let (hub, handle) = self.launch(bound, named).await?;
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&hub)));
        *handle.inner.accept.lock().await = Some(accept);
        Ok(handle)
    }

    /// The server as a tower `Service` for a host application's router or
    /// listener ([`HaipService`]): every route it has, nested under a prefix
    /// or not, with its budgets, deadlines, authentication, browser rules,
    /// metrics and traces. Connects to Redis and starts imported MCP servers
    /// as [`start`](Self::start) does; binds nothing.
    ///
    /// The server does not know the address the host listens on, so: `Host`
    /// headers are held to loopback names unless
    /// [`allowed_hosts`](ServerBuilder::allowed_hosts) names others (`"*"`
    /// for any), a server whose allowed hosts are not all loopback names
    /// needs authentication (or `allow_unauthenticated`), and OAuth
    /// (feature `oauth`) needs its resource URL (`OAuth::resource`).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), haip::Error> {
    /// let haip = haip::Server::builder()
    ///     .builtin_tools()
    ///     .build()?
    ///     .into_service()
    ///     .await?;
    /// // axum: Router::new().nest_service("/agent", haip.clone())
    /// haip.handle().shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn into_service(self) -> Result<HaipService, Error> {
        let (hub, handle) = self.launch(Bound::Embedded, None).await?;
        Ok(HaipService::new(hub, handle))
    }

    /// What serving needs, wherever the connections come from: Redis, the
    /// checks of how the server may be reached, OAuth, the hub, links,
    /// metrics, traces and imports. `named`: the address as configured,
    /// which errors name (else the listener's own).
    async fn launch(
        self,
        bound: Bound,
        named: Option<String>,
    ) -> Result<(Arc<Hub>, ServerHandle), Error> {
        self.cluster.connect(&self.shared).await?;
        self.cluster.announce();
        let prefix: Arc<str> = Arc::from(self.config.path_prefix.as_str());
        // `/metrics` on a port of its own (`metrics_addr`).
        let metrics_port = metrics::Port::bind(&self.config.metrics_addr).await?;
        let metrics_addr = metrics_port.addr()?;
        let hosts = guard::Hosts::new(&self.config.allowed_hosts, bound.is_local());
        self.check_reach(&bound, named, &hosts)?;
        self.oauth.prepare(&bound, &prefix)?;
        if self.auth.is_none() {
            let scoped = self.shared.registry.snapshot().scoped();
            if scoped || !self.shared.config.required_scopes.is_empty() {
                tracing::info!("authentication is off: tool scopes are not enforced");
            }
        }
        announce(&self, &bound, &prefix);
        let tracker = self.shared.runner.tasks().clone();
        let mcp = self.mcp.door(&self.config, &self.shared);
        let metrics = Arc::new(metrics::Metrics::new(&self.shared, &self.cluster));
        let hub = Arc::new(Hub {
            metrics,
            config: Arc::clone(&self.config),
            shared: Arc::clone(&self.shared),
            sessions: Sessions::shared_through(self.cluster.clone()),
            bodies: body::BodyBudget::new(self.config.max_inflight_body_bytes),
            answers: Arc::new(answer::AnswerBudget::new(
                self.config.max_inflight_answer_bytes,
            )),
            peers: Peers::default(),
            session_shares: crate::context::share::Shares::new(self.config.max_sessions_per_caller),
            auth: self.auth,
            resource_metadata: self.oauth.metadata_url(&prefix),
            oauth: self.oauth,
            cors: self.cors,
            hosts,
            prefix,
            own_listener: !matches!(bound, Bound::Embedded),
            tracker: tracker.clone(),
            instance: self.instance,
            cluster: self.cluster,
            mcp,
        });
        // Links other instances open to this one are served from now on.
        #[cfg(feature = "redis")]
        if let Some(incoming) = hub.cluster.take_incoming() {
            tracker.spawn(links::serve(Arc::clone(&hub), incoming));
        }
        metrics_port.serve(
            &hub.metrics,
            self.config.handshake_timeout,
            &tracker,
            self.shared.shutdown.child_token(),
        )?;
        // Spans of calls go to the collector from now on (feature `otel`).
        self.shared
            .tracer
            .start_export(&tracker, self.shared.shutdown.child_token());
        // Imported MCP tools are in the registry when serving starts (or their
        // first connection attempt has failed and is being retried).
        self.mcp.start_imports(&self.shared, &tracker).await;
        let local_addr = match bound {
            Bound::Tcp(addr) => Some(addr),
            _ => None,
        };
        let handle = ServerHandle {
            inner: Arc::new(HandleInner {
                shared: self.shared,
                local_addr,
                metrics_addr,
                tracker,
                accept: tokio::sync::Mutex::new(None),
            }),
        };
        Ok((hub, handle))
    }

    /// Refuses to serve without authentication where others than this
    /// machine may reach the server (a TCP address that is not loopback, or
    /// a host application whose allowed hosts are not all loopback names),
    /// unless `allow_unauthenticated`. `named`: the address as configured.
    fn check_reach(
        &self,
        bound: &Bound,
        named: Option<String>,
        hosts: &guard::Hosts,
    ) -> Result<(), Error> {
        if self.auth.is_some() || self.config.allow_unauthenticated {
            return Ok(());
        }
        match bound {
            Bound::Tcp(addr) if !addr.ip().is_loopback() => Err(Error::UnauthenticatedBind {
                addr: named.unwrap_or_else(|| addr.to_string()),
            }),
            Bound::Embedded if !hosts.only_loopback() => Err(Error::UnauthenticatedBind {
                addr: format!(
                    "the hosts of allowed_hosts ({})",
                    self.config.allowed_hosts.join(", ")
                ),
            }),
            _ => Ok(()),
        }
    }

    /// Binds and serves until Ctrl-C or SIGTERM, then shuts down gracefully:
    /// stops accepting, cancels running calls (each still gets its `TOOL_DONE`),
    /// closes WebSockets with 1001.
    pub async fn run(self) -> Result<(), Error> {
        // Caught before the address is announced.
        let signal = ShutdownSignal::new();
        let handle = self.start().await?;
        signal.recv().await;
        tracing::info!("shutting down");
        handle.shutdown().await;
        Ok(())
    }
}

#[cfg(feature = "testing")]
impl Server {
    /// What an in-memory connection runs its sessions on (`haip::testing`):
    /// the server's shared state, with no listener. Refused for what needs
    /// the network: sessions shared through Redis, imported MCP servers.
    pub(crate) fn into_shared(self) -> Result<Arc<Shared>, Error> {
        #[cfg(feature = "redis")]
        if self.cluster.0.is_some() {
            return Err(Error::InvalidConfig {
                setting: "redis",
                reason: "haip::testing runs sessions in memory: build the server without Redis"
                    .to_owned(),
            });
        }
        #[cfg(feature = "mcp-import")]
        if !self.mcp.imports.is_empty() {
            return Err(Error::InvalidConfig {
                setting: "mcp",
                reason: "haip::testing does not start imported MCP servers".to_owned(),
            });
        }
        Ok(self.shared)
    }
}

/// Ctrl-C or SIGTERM. SIGTERM is caught from when this is made, so a server
/// that makes it before it announces its address shuts down gracefully
/// however soon the signal comes.
struct ShutdownSignal {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

impl ShutdownSignal {
    fn new() -> ShutdownSignal {
        ShutdownSignal {
            #[cfg(unix)]
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok(),
        }
    }

    async fn recv(self) {
        #[cfg(unix)]
        if let Some(mut term) = self.term {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Cap on hyper's per-connection read buffer (request line and headers).
pub(super) const MAX_HTTP_BUF: usize = 64 * 1024;

/// Where a server listens: what [`Server::serve`] accepts connections on.
/// Made from a `tokio::net::TcpListener`, or on Unix a
/// `tokio::net::UnixListener`.
#[derive(Debug)]
pub struct Listener(ListenerKind);

#[derive(Debug)]
enum ListenerKind {
    Tcp(TcpListener),
    #[cfg(unix)]
    Unix(tokio::net::UnixListener),
}

impl From<TcpListener> for Listener {
    fn from(listener: TcpListener) -> Listener {
        Listener(ListenerKind::Tcp(listener))
    }
}

#[cfg(unix)]
impl From<tokio::net::UnixListener> for Listener {
    fn from(listener: tokio::net::UnixListener) -> Listener {
        Listener(ListenerKind::Unix(listener))
    }
}

impl Listener {
    fn bound(&self) -> Result<Bound, Error> {
        Ok(match &self.0 {
            ListenerKind::Tcp(listener) => Bound::Tcp(listener.local_addr()?),
            #[cfg(unix)]
            ListenerKind::Unix(listener) => {
                let addr = listener.local_addr()?;
                Bound::Unix(
                    addr.as_pathname()
                        .map_or_else(|| "(unnamed)".to_owned(), |path| path.display().to_string()),
                )
            }
        })
    }
}

/// Where connections come from, as far as the server knows.
enum Bound {
    /// Its own TCP listener, at this address.
    Tcp(SocketAddr),
    /// Its own Unix socket listener, at this path: only this machine's
    /// processes reach it.
    #[cfg_attr(not(unix), allow(dead_code))]
    Unix(String),
    /// A host application's ([`Server::into_service`]).
    Embedded,
}

impl Bound {
    /// Only this machine can reach the server, as far as it knows (the
    /// rule for `Host` names).
    fn is_local(&self) -> bool {
        match self {
            Bound::Tcp(addr) => addr.ip().is_loopback(),
            Bound::Unix(_) | Bound::Embedded => true,
        }
    }
}

/// The lines a person reads when the server starts: where to connect.
fn announce(server: &Server, bound: &Bound, prefix: &str) {
    let base = match bound {
        Bound::Tcp(addr) => format!("{addr}{prefix}"),
        Bound::Unix(path) => {
            let line = format!("haip listening on the Unix socket {path}");
            if tracing::dispatcher::has_been_set() {
                tracing::info!("{line}");
            } else {
                eprintln!("{line}");
            }
            return;
        }
        Bound::Embedded => {
            tracing::debug!(prefix, "haip serving as a service");
            return;
        }
    };
    let log_url = format!("ws://{base}/haip");
    let mcp_url = server.mcp.url(&base);
    if tracing::dispatcher::has_been_set() {
        let mcp = mcp_url.as_deref().map(tracing::field::display);
        tracing::info!(url = %log_url, mcp, "haip listening");
    } else {
        // The MCP URL on a line of its own: scripts read the first.
        eprintln!("haip listening on {log_url}");
        if let Some(mcp_url) = &mcp_url {
            eprintln!("haip MCP endpoint at {mcp_url}");
        }
    }
    // Never on without the `inspector` feature.
    if server.config.inspector {
        let inspector_url = format!("http://{base}/inspector");
        if tracing::dispatcher::has_been_set() {
            tracing::info!(url = %inspector_url, "haip inspector");
        } else {
            eprintln!("haip inspector at {inspector_url}");
        }
    }
}

async fn accept_loop(listener: Listener, hub: Arc<Hub>) {
    let shutdown = hub.shared.shutdown.clone();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = accept(&listener) => accepted,
        };
        match accepted {
            Ok(Accepted::Tcp(stream, peer)) => {
                let _ = stream.set_nodelay(true);
                serve_connection(TokioIo::new(stream), peer.ip(), &hub);
            }
            // A Unix socket's peers are this machine's processes: counted
            // as a loopback peer.
            #[cfg(unix)]
            Ok(Accepted::Unix(stream)) => serve_connection(
                TokioIo::new(stream),
                IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
                &hub,
            ),
            Err(e) => {
                // Usually out of file descriptors: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

enum Accepted {
    Tcp(tokio::net::TcpStream, SocketAddr),
    #[cfg(unix)]
    Unix(tokio::net::UnixStream),
}

async fn accept(listener: &Listener) -> std::io::Result<Accepted> {
    match &listener.0 {
        ListenerKind::Tcp(listener) => {
            let (stream, peer) = listener.accept().await?;
            Ok(Accepted::Tcp(stream, peer))
        }
        #[cfg(unix)]
        ListenerKind::Unix(listener) => {
            let (stream, _) = listener.accept().await?;
            Ok(Accepted::Unix(stream))
        }
    }
}

/// Serves one accepted connection on the server's task tracker: what only
/// the listener can enforce (the header read timeout, connections per peer,
/// a client that stops taking its answers) around the routes every
/// connection shares with [`HaipService`].
fn serve_connection<IO>(io: TokioIo<IO>, peer: IpAddr, hub: &Arc<Hub>)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let config = &hub.config;
    let counted = hub.peers.admit(
        peer,
        config.max_connections_per_peer,
        config.limit_loopback_peers,
    );
    if counted.is_none() {
        hub.shared.stats.refused_per_peer.fetch_add(1, Relaxed);
        tracing::debug!(peer = %peer, "connection beyond max_connections_per_peer");
    }
    let over_peer_limit = counted.is_none();
    let header_timeout = config.handshake_timeout;
    let hub_for_conn = Arc::clone(hub);
    let shutdown = hub.shared.shutdown.clone();
    // Shared with each request, so that a WebSocket upgrade (which
    // outlives this HTTP connection's task) keeps the connection counted.
    let counted = counted.map(Arc::new);
    // What this connection's answers hold until its client takes them.
    let outflow = answer::Outflow::new();
    let watched = Arc::clone(&outflow);
    let watch_hub = Arc::clone(hub);
    hub.tracker.spawn(async move {
        let service = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            if let Some(counted) = &counted {
                req.extensions_mut().insert(Arc::clone(counted));
            }
            req.extensions_mut().insert(Arc::clone(&outflow));
            req.extensions_mut().insert(PeerAddr(peer));
            http::route(
                req.map(crate::transport::body::request_body),
                Arc::clone(&hub_for_conn),
                over_peer_limit,
            )
        });
        // A client that never finishes its request headers is dropped
        // instead of holding a connection open for ever.
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            .max_buf_size(MAX_HTTP_BUF)
            .serve_connection(io, service)
            .with_upgrades();
        tokio::pin!(conn);
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "http connection ended with an error");
                }
            }
            () = shutdown.cancelled() => {
                conn.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
            }
            // A client that does not take its answers: the connection
            // goes, and what it held with it.
            stall = watched.stalled(
                &watch_hub.answers,
                watch_hub.shared.config.max_outbound_bytes,
                watch_hub.config.write_timeout,
            ) => {
                watch_hub.shared.stats.closed_too_slow.fetch_add(1, Relaxed);
                tracing::debug!(?stall, "client not taking its answers; closing the connection");
            }
        }
    });
}

/// A running server: its address, its live tool registry, and shutdown. Cheap to clone.
#[derive(Clone)]
pub struct ServerHandle {
    inner: Arc<HandleInner>,
}

struct HandleInner {
    shared: Arc<Shared>,
    /// The TCP address served, when the server has a TCP listener.
    local_addr: Option<SocketAddr>,
    /// Where `/metrics` is served when not on `local_addr`.
    metrics_addr: Option<SocketAddr>,
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
    ///
    /// # Panics
    ///
    /// When the server has no TCP listener of its own: it serves a Unix
    /// socket, or a host application ([`Server::into_service`]). See
    /// [`tcp_addr`](Self::tcp_addr).
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr.expect(
            "ServerHandle::local_addr: this server has no TCP listener (a Unix socket, or embedded as a service)",
        )
    }

    /// The TCP address the server listens on, if it has a TCP listener of
    /// its own.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.inner.local_addr
    }

    /// Where `GET /metrics` is served when it has a port of its own
    /// ([`ServerBuilder::metrics_addr`](crate::ServerBuilder)); `None` when it
    /// is served on [`local_addr`](Self::local_addr), or not at all.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.inner.metrics_addr
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

    /// Shuts down gracefully and waits until every connection has closed and
    /// every call's task has stopped: stops accepting, cancels running calls
    /// (each still gets its `TOOL_DONE`; a tool that ignores cancellation is
    /// aborted after `cancel_grace`), closes WebSockets with 1001.
    ///
    /// Embedded in a host application ([`HaipService`]), the service answers
    /// `503` from then on and its streams end; run this from the host's own
    /// graceful shutdown (axum: inside the future given to
    /// `with_graceful_shutdown`, so that haip's sessions are handed over
    /// before the host stops accepting and waits for its connections).
    pub async fn shutdown(&self) {
        self.inner.shared.shutdown.cancel();
        if let Some(accept) = self.inner.accept.lock().await.take() {
            let _ = accept.await;
        }
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }
}

//! # Inside your service
//!
//! haip serves on a port of its own ([`Server::start`], [`Server::run`]),
//! or inside your application: [`Server::into_service`] makes the server a
//! tower `Service` ([`HaipService`]) that your router nests beside its own
//! routes. One process, one port, one TLS setup; your router and your
//! layers; haip's routes under a prefix such as `/agent`: the WebSocket, SSE
//! and HTTP streaming, `/mcp`, `/health`, `/stats`, `/metrics`, the OAuth
//! metadata and the inspector. Every route keeps its budgets, deadlines,
//! authentication and browser rules: haip's own listener serves the same
//! routes. `examples/axum_app.rs` nests the quickstart's tools in an
//! axum application (`cargo run -p haip-examples --example axum_app`,
//! [below](#the-example)); `tests/tests/embedded.rs` drives it with haip's
//! own clients, and the Python and TypeScript MCP SDKs
//! (`mcp_first_hour.rs`), MCP's conformance suite
//! (`mcp_conformance_2026.rs`) and the inspector in Chromium
//! (`inspector.rs`) drive it nested as they drive the standalone server.
//!
//! haip does not depend on axum, so the axum lines of this chapter are not
//! compiled here: they are `examples/axum_app.rs`'s and
//! `examples/src/axum_app.rs`'s, which are.
//!
//! ## The service
//!
//! [`into_service`](crate::Server::into_service) does what
//! [`start`](crate::Server::start) does but bind: it connects to Redis,
//! starts the MCP imports, fetches the OAuth issuer's keys (and binds
//! [`metrics_addr`](crate::ServerBuilder::metrics_addr) when one is given).
//! The [`HaipService`] it returns takes any `http::Request<B>` whose `B` is
//! an `http_body::Body` (axum's and hyper's included), is cheap to clone
//! (every clone serves the same server), and its
//! [`handle`](crate::HaipService::handle) is the server's
//! [`ServerHandle`]: its tools, and its shutdown.
//!
//! ```
//! use tower_service::Service; // `tower::Service` is the same trait
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), haip::Error> {
//! let mut haip = haip::Server::builder()
//!     .builtin_tools()
//!     .path_prefix("/agent")
//!     .build()?
//!     .into_service()
//!     .await?;
//! // What a router nesting it at `/agent` hands it for `GET /agent/stats`:
//! // the path with the prefix taken off.
//! let stats = || {
//!     http::Request::get("/stats")
//!         .header("host", "localhost:8080")
//!         .body(http_body_util::Empty::<bytes::Bytes>::new())
//!         .unwrap()
//! };
//! let Ok(answer) = haip.call(stats()).await;
//! assert_eq!(answer.status(), 200);
//!
//! let handle = haip.handle();
//! assert_eq!(handle.tcp_addr(), None); // no listener of its own
//! handle.shutdown().await;
//! let Ok(late) = haip.call(stats()).await;
//! assert_eq!(late.status(), 503); // SHUTTING_DOWN
//! # Ok(()) }
//! ```
//!
//! The server has no TCP listener of its own, so
//! [`ServerHandle::tcp_addr`] is `None` and [`ServerHandle::local_addr`]
//! panics.
//!
//! ## Nested in axum, under a prefix
//!
//! <!-- excerpt of examples/axum_app.rs -->
//! ```rust,ignore
//! let haip = haip::Server::builder()
//!     .from_env()
//!     .builtin_tools()
//!     .annotated_tools()
//!     .inspector(true)
//!     .path_prefix(&prefix)
//!     .build()?
//!     .into_service()
//!     .await?;
//! let shutdown = haip.handle();
//! let app = haip_examples::axum_app::app(haip, &prefix);
//! ```
//!
//! where `app` (in `examples/src/axum_app.rs`) is the host's router with
//! haip nested in it:
//!
//! <!-- excerpt of examples/src/axum_app.rs -->
//! ```rust,ignore
//! pub fn app(haip: haip::HaipService, prefix: &str) -> Router {
//!     let hello = Router::new()
//!         .route(
//!             "/hello",
//!             get(|| async { "Hello from the host application\n" }),
//!         )
//!         .layer(CorsLayer::permissive());
//!     let mut app = hello;
//!     if let Some(path) = haip.well_known_path()
//!         && !prefix.is_empty()
//!     {
//!         app = app.route_service(&path, haip.clone());
//!     }
//!     let app = if prefix.is_empty() {
//!         app.fallback_service(haip)
//!     } else {
//!         app.nest_service(prefix, haip)
//!     };
//!     app.layer(middleware::from_fn(peer_addr))
//!         .layer(TraceLayer::new_for_http())
//! }
//! ```
//!
//! - **The prefix, twice.** `nest_service("/agent", …)` hands haip each
//!   request under `/agent` with `/agent` taken off;
//!   [`path_prefix`](crate::ServerBuilder::path_prefix)`("/agent")` tells
//!   the server where it is, so that the URLs it writes carry it: the OAuth
//!   resource and the metadata its `401`s name
//!   ([below](#oauth-behind-a-prefix)), the addresses it prints. The
//!   inspector (`/agent/inspector`) finds its routes beside its own page
//!   (`/agent/haip`) whatever the prefix. A prefix starts with `/` and does
//!   not end with one; `build` says so otherwise.
//! - **At the root**: `Router::new().route("/hello", …).fallback_service(haip)`,
//!   without `path_prefix`: haip answers every path your routes do not
//!   (its `404` for those it has not either).
//! - **The same prefix behind a reverse proxy.** haip's own listener with
//!   `path_prefix("/agent")` serves its routes under `/agent` only (and the
//!   OAuth metadata's well-known path at the root), for a proxy that
//!   forwards `/agent/…` unchanged.
//! - **Layers.** A layer around the whole router (the example's
//!   tower-http `TraceLayer`) sees haip's requests too. Keep a CORS layer on
//!   your own routes (the example's `CorsLayer::permissive()` is on `/hello`
//!   alone): haip decides about browser origins on its routes itself
//!   ([below](#security)), and a CORS layer in front would answer
//!   preflights for requests haip then refuses.
//!
//! ## Who is calling: `PeerAddr`
//!
//! Each caller holds at most its share of the server's pools
//! ([`max_sessions_per_caller`](crate::Limits::max_sessions_per_caller)),
//! and each peer its share of OAuth's introspections; a caller is its
//! subject when it authenticated, else its peer address. haip's own
//! listener knows that address; inside your service, put a [`PeerAddr`] in
//! each request's extensions. Without it, every unauthenticated caller the
//! host hands over is counted as one. With axum, take it from
//! `ConnectInfo`, and serve with `into_make_service_with_connect_info`:
//!
//! <!-- excerpt of examples/src/axum_app.rs -->
//! ```rust,ignore
//! use axum::extract::{ConnectInfo, Request};
//! use axum::middleware::{self, Next};
//! use axum::response::Response;
//! #
//! async fn peer_addr(mut req: Request, next: Next) -> Response {
//!     if let Some(ConnectInfo(addr)) = req.extensions().get::<ConnectInfo<SocketAddr>>().copied() {
//!         req.extensions_mut().insert(haip::PeerAddr(addr.ip()));
//!     }
//!     next.run(req).await
//! }
//! ```
//!
//! Behind a reverse proxy every peer is the proxy: a host that trusts its
//! proxy may put the address the proxy forwards (`X-Forwarded-For`) in
//! `PeerAddr` instead. Unauthenticated loopback peers are one caller, not
//! limited, unless [`limit_loopback_peers`](crate::ServerBuilder::limit_loopback_peers).
//!
//! ## Stopping: haip first, then axum
//!
//! <!-- excerpt of examples/axum_app.rs -->
//! ```rust,ignore
//! axum::serve(
//!     listener,
//!     app.into_make_service_with_connect_info::<SocketAddr>(),
//! )
//! .with_graceful_shutdown(async move {
//!     stop_signal().await;
//!     tracing::info!("shutting down");
//!     // haip first: its calls end and its streams close, so that axum's
//!     // own graceful shutdown does not wait on them.
//!     shutdown.shutdown().await;
//! })
//! .await?;
//! ```
//!
//! axum's graceful shutdown stops accepting, then waits for every
//! connection to end. haip's WebSockets, SSE and HTTP streams and `/mcp`
//! streams end only when their clients leave: started first, axum's would
//! wait on them, and the calls still running would be cut off without their
//! `TOOL_DONE` when the process exits. So [`ServerHandle::shutdown`] runs
//! first, inside the future given to `with_graceful_shutdown`: running
//! calls end, each with its one `TOOL_DONE` (`CANCELLED`, reason `server
//! shutdown`), WebSockets close with 1001, every streaming answer ends (at
//! the latest 5 s after the shutdown began), and with Redis the sessions
//! are handed over, to resume on another instance. Meanwhile the service
//! answers anything new with `503` `SHUTTING_DOWN` and `Connection: close`
//! (`/health` still answers). When it returns, axum's own shutdown finds
//! only its own requests to wait for.
//!
//! ## Your own listener: `Server::serve`
//!
//! To keep haip's own HTTP server but bind the socket yourself, give
//! [`Server::serve`] a `tokio::net::TcpListener` or, on Unix, a
//! `tokio::net::UnixListener` (a [`Listener`]). The listener's address
//! replaces [`addr`](crate::ServerBuilder::addr), and everything
//! [`start`](crate::Server::start) does holds, including the refusal to
//! serve a non-loopback TCP address without authentication.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), haip::Error> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let handle = haip::Server::builder()
//!     .builtin_tools()
//!     .build()?
//!     .serve(listener)
//!     .await?;
//! assert_ne!(handle.local_addr().port(), 0); // the port the system chose
//! handle.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! **systemd's socket activation**: systemd binds the port and passes the
//! socket as file descriptor 3 (check that `LISTEN_PID` is this process
//! and `LISTEN_FDS` is `1`):
//!
//! ```ini
//! # my-tools.socket
//! [Socket]
//! ListenStream=127.0.0.1:8080
//!
//! # my-tools.service
//! [Service]
//! ExecStart=/usr/local/bin/my-tools
//! ```
//!
//! ```no_run
//! # #[cfg(unix)]
//! # async fn demo() -> Result<(), haip::Error> {
//! use std::os::fd::FromRawFd;
//!
//! // SAFETY: systemd passed this process fd 3, a listening TCP socket that
//! // nothing else in the process owns.
//! let std_listener = unsafe { std::net::TcpListener::from_raw_fd(3) };
//! std_listener.set_nonblocking(true)?; // tokio needs it
//! let listener = tokio::net::TcpListener::from_std(std_listener)?;
//! let handle = haip::Server::builder()
//!     .from_env()
//!     .annotated_tools()
//!     .build()?
//!     .serve(listener)
//!     .await?;
//! let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
//! term.recv().await; // systemd stops a service with SIGTERM
//! handle.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! **A Unix socket** is reached by this machine's processes only, and
//! those the socket file's permissions let in, so the server needs no
//! authentication to serve it. `Host` is held to loopback names (clients
//! send `localhost`) unless
//! [`allowed_hosts`](crate::ServerBuilder::allowed_hosts) names others; its
//! peers count as one loopback peer, not limited unless
//! [`limit_loopback_peers`](crate::ServerBuilder::limit_loopback_peers)
//! ([`max_connections_per_peer`](crate::Limits::max_connections_per_peer),
//! per-caller shares); OAuth needs its
//! [`resource`](crate::auth::OAuth::resource) URL; and
//! [`ServerHandle::local_addr`] panics ([`ServerHandle::tcp_addr`] is
//! `None`). `bind` fails while the file of an earlier run is there: remove
//! it first.
//!
//! ```no_run
//! # #[cfg(unix)]
//! # async fn demo() -> Result<(), haip::Error> {
//! let _ = std::fs::remove_file("/run/my-tools/haip.sock");
//! let listener = tokio::net::UnixListener::bind("/run/my-tools/haip.sock")?;
//! let handle = haip::Server::builder()
//!     .annotated_tools()
//!     .build()?
//!     .serve(listener)
//!     .await?;
//! # handle.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! ```sh
//! curl --unix-socket /run/my-tools/haip.sock http://localhost/health
//! ```
//!
//! ## What the service enforces, and what stays the host's
//!
//! Three bounds need the connection itself, which only a listener has:
//! haip's own does all three, a host keeps them itself.
//!
//! | bound | haip's own listener (`start`, `run`, `serve`) | inside your service |
//! |---|---|---|
//! | the time a client may take to send its request headers ([`handshake_timeout`](crate::Limits::handshake_timeout), 10 s) | the connection is closed | the host's: hyper's `header_read_timeout` with a timer (below; `axum::serve` sets none), or a reverse proxy's (nginx: `client_header_timeout`) |
//! | connections per peer address ([`max_connections_per_peer`](crate::Limits::max_connections_per_peer), 1024) | beyond it only `/health` is served; WebSockets close with 1013, the rest get `503` | the host's: a reverse proxy (nginx: `limit_conn`) or a tower layer counting connections by peer address |
//! | a client that takes nothing of its `/mcp` answer ([`write_timeout`](crate::Limits::write_timeout), 30 s) | the connection is closed | its bytes still count in [`max_inflight_answer_bytes`](crate::Limits::max_inflight_answer_bytes); closing the connection is the host's (nginx: `send_timeout`) |
//! | bodies' deadlines and sizes, the body budget, sessions per caller, every session's deadlines and bounds ([Settings, limits and budgets](super::limits)), authentication, `Host` and `Origin` | held | held, the same |
//!
//! With hyper, serving the service (or an axum `Router`, a tower `Service`
//! too, through hyper-util's `TowerToHyperService`) with a header read
//! timeout and the peer's address looks like this; `with_upgrades` lets
//! WebSocket upgrades through:
//!
//! ```no_run
//! use std::time::Duration;
//! use hyper::server::conn::http1;
//! use hyper::service::service_fn;
//! use hyper_util::rt::{TokioIo, TokioTimer};
//! use tower_service::Service;
//!
//! # async fn demo() -> Result<(), haip::Error> {
//! let haip = haip::Server::builder().builtin_tools().build()?.into_service().await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! loop {
//!     let (stream, peer) = listener.accept().await?;
//!     let haip = haip.clone();
//!     let service = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
//!         req.extensions_mut().insert(haip::PeerAddr(peer.ip()));
//!         haip.clone().call(req)
//!     });
//!     tokio::spawn(
//!         http1::Builder::new()
//!             .timer(TokioTimer::new())
//!             .header_read_timeout(Duration::from_secs(10))
//!             .serve_connection(TokioIo::new(stream), service)
//!             .with_upgrades(),
//!     );
//! }
//! # }
//! ```
//!
//! ## Security
//!
//! The browser rules of [Authentication](super::authentication#what-the-defaults-protect-against)
//! hold inside the service as they do on haip's own port:
//!
//! - **`Host`**: the server cannot know where its host listens, so it
//!   answers to loopback names only (`localhost`, `*.localhost`,
//!   127.0.0.0/8, `[::1]`), as a server bound to loopback does, against DNS
//!   rebinding; any other name gets `403 HOST_NOT_ALLOWED` (`/health`
//!   always answers). Name your public host in
//!   [`allowed_hosts`](crate::ServerBuilder::allowed_hosts)
//!   (`HAIP_ALLOWED_HOSTS`), or `"*"` for any name (a proxy in front checks
//!   it). A server whose allowed names are not all loopback ones needs
//!   authentication, or
//!   [`allow_unauthenticated`](crate::ServerBuilder::allow_unauthenticated)`(true)`:
//!   `into_service` fails otherwise, as `start` does on a public address.
//! - **`Origin`**: a browser's must be the request's own `Host` (a page
//!   your application serves on its own origin calls haip's routes), a
//!   loopback page on a loopback `Host`, or listed in
//!   [`cors_allowed_origins`](crate::ServerBuilder::cors_allowed_origins);
//!   else `403 ORIGIN_NOT_ALLOWED`, before anything runs.
//! - **Tokens** are haip's to check, on its routes: your application's own
//!   login does not reach them unless an
//!   [`Authenticator`](crate::auth::Authenticator) of yours reads it.
//!
//! ```
//! let server = haip::Server::builder()
//!     .builtin_tools()
//!     .path_prefix("/agent")
//!     .allowed_hosts(["tools.example.com"])
//!     .jwt_hs256("a-long-random-secret-from-your-vault")
//!     .build()?;
//! # Ok::<(), haip::Error>(())
//! ```
//!
//! ## OAuth behind a prefix
//!
//! Inside a service (or on a Unix socket) the server cannot tell the URL
//! clients reach its `/mcp` at, which tokens must name: give it,
//! prefix included, with [`OAuth::resource`](crate::auth::OAuth::resource)
//! (`HAIP_OAUTH_RESOURCE`); `into_service` fails otherwise, naming the
//! setting. Its `401`s name the protected resource metadata under the
//! prefix (`https://tools.example.com/agent/.well-known/oauth-protected-resource/mcp`),
//! which the nested service always serves. Clients that look for it where
//! RFC 9728 puts it instead, at the root of the host
//! (`/.well-known/oauth-protected-resource/agent/mcp`), need that path
//! routed to the service too: [`HaipService::well_known_path`] says which.
//!
//! ```no_run
//! # #[cfg(feature = "oauth")]
//! # async fn demo() -> Result<(), haip::Error> {
//! use haip::auth::OAuth;
//!
//! let haip = haip::Server::builder()
//!     .annotated_tools()
//!     .path_prefix("/agent")
//!     .allowed_hosts(["tools.example.com"])
//!     .oauth(OAuth::issuer("https://idp.example.com").resource("https://tools.example.com/agent/mcp"))
//!     .build()?
//!     .into_service()
//!     .await?;
//! let well_known = haip.well_known_path(); // None without OAuth
//! assert_eq!(well_known.as_deref(), Some("/.well-known/oauth-protected-resource/agent/mcp"));
//! # Ok(()) }
//! ```
//!
//! ```rust,ignore
//! let mut app = Router::new().route("/hello", get(|| async { "Hello\n" }));
//! if let Some(path) = haip.well_known_path() {
//!     app = app.route_service(&path, haip.clone()); // at the root
//! }
//! let app = app.nest_service("/agent", haip);
//! ```
//!
//! ## The example
//!
//! `examples/axum_app.rs` (the application itself in
//! `examples/src/axum_app.rs`, which the tests share): `GET /hello` with
//! tower-http's CORS layer, the quickstart's tools nested at `HAIP_PREFIX`
//! (default `/agent`; `HAIP_PREFIX=` serves them at the root, beside
//! `/hello`), the OAuth metadata's well-known path at the root when OAuth is
//! configured, tower-http's `TraceLayer` around everything, [`PeerAddr`]
//! from `ConnectInfo`, and on Ctrl-C or SIGTERM haip's shutdown first,
//! inside axum's `with_graceful_shutdown`. The rest of the environment is
//! read as the quickstart reads it (`HAIP_JWT_SECRET`,
//! `HAIP_ALLOWED_HOSTS`, …).
//!
//! ```sh
//! cargo run -p haip-examples --example axum_app
//! curl http://127.0.0.1:8080/hello
//! curl http://127.0.0.1:8080/agent/health
//! haip tools ws://127.0.0.1:8080/agent/haip      # the CLI (feature `cli`)
//! HAIP_PREFIX= cargo run -p haip-examples --example axum_app   # haip at the root
//! ```
//!
//! The inspector is at `http://127.0.0.1:8080/agent/inspector`, MCP at
//! `http://127.0.0.1:8080/agent/mcp`.
//!
//! [`Server::start`]: crate::Server::start
//! [`Server::run`]: crate::Server::run
//! [`Server::serve`]: crate::Server::serve
//! [`Server::into_service`]: crate::Server::into_service
//! [`HaipService`]: crate::HaipService
//! [`HaipService::well_known_path`]: crate::HaipService::well_known_path
//! [`ServerHandle`]: crate::ServerHandle
//! [`ServerHandle::shutdown`]: crate::ServerHandle::shutdown
//! [`ServerHandle::tcp_addr`]: crate::ServerHandle::tcp_addr
//! [`ServerHandle::local_addr`]: crate::ServerHandle::local_addr
//! [`PeerAddr`]: crate::PeerAddr
//! [`Listener`]: crate::Listener
//!
//! ---
//!
//! Previous: [Composing tools](super::compose) · Back to [the guide](super)

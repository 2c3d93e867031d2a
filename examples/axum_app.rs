//! haip inside an axum application: the application's own `GET /hello`,
//! and the quickstart's tools (the built-in demo tools and the
//! `#[haip_tool]` functions of `src/demo.rs`) nested at `HAIP_PREFIX`
//! (default `/agent`; `HAIP_PREFIX=` mounts them at the root), on
//! `HAIP_ADDR` or `127.0.0.1:8080`. The rest of the environment is read as
//! the quickstart reads it (`HAIP_JWT_SECRET`, `HAIP_ALLOWED_HOSTS`, …).
//!
//! ```text
//! cargo run --example axum_app
//! curl http://127.0.0.1:8080/hello
//! curl http://127.0.0.1:8080/agent/health
//! ```
//!
//! The HAIP WebSocket is `ws://127.0.0.1:8080/agent/haip`, MCP is at
//! `http://127.0.0.1:8080/agent/mcp`, the inspector at
//! `http://127.0.0.1:8080/agent/inspector`. Ctrl-C or SIGTERM stops haip
//! first (every open call ends with its `TOOL_DONE`, WebSockets close with
//! 1001), then axum (the guide's chapter "Inside your service").

use std::net::SocketAddr;

// Links the annotated tools into this binary.
use haip_examples as _;

#[tokio::main]
async fn main() -> Result<(), haip::Error> {
    haip_examples::init_logging("info");
    let prefix = std::env::var("HAIP_PREFIX").unwrap_or_else(|_| "/agent".to_owned());
    let addr = std::env::var("HAIP_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    let haip = haip::Server::builder()
        .from_env()
        .builtin_tools()
        .annotated_tools()
        .inspector(true)
        .path_prefix(&prefix)
        .build()?
        .into_service()
        .await?;
    let shutdown = haip.handle();
    let app = haip_examples::axum_app::app(haip, &prefix);

    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|source| haip::Error::Bind { addr, source })?;
    let local = listener.local_addr()?;
    eprintln!("haip listening on ws://{local}{prefix}/haip");
    eprintln!("haip MCP endpoint at http://{local}{prefix}/mcp");
    eprintln!("haip inspector at http://{local}{prefix}/inspector");
    eprintln!("the application's own route at http://{local}/hello");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async move {
        stop_signal().await;
        tracing::info!("shutting down");
        // haip first: its calls end and its streams close, so that axum's
        // own graceful shutdown does not wait on them.
        shutdown.shutdown().await;
    })
    .await?;
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn stop_signal() {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM can be caught");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

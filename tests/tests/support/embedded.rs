//! A haip server embedded in the axum application of `examples/axum_app.rs`
//! (`haip_examples::axum_app::app`), served by axum on `127.0.0.1:0` with
//! each request's peer address, as the example serves it.
#![allow(dead_code)]

use std::net::SocketAddr;

use haip::{ServerBuilder, ServerHandle};

use crate::support::within;

/// A running axum application with haip nested at its prefix.
pub(crate) struct Embedded {
    /// The axum listener's address.
    pub(crate) addr: SocketAddr,
    /// The prefix haip is nested at (`""`: the root).
    pub(crate) prefix: String,
    /// haip's handle (its graceful shutdown).
    pub(crate) haip: ServerHandle,
    /// Starts axum's own graceful shutdown, after haip's (as the example does).
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// axum's serving task; done when axum has stopped.
    pub(crate) served: tokio::task::JoinHandle<()>,
}

impl Embedded {
    /// `ws://ADDR{prefix}/haip`.
    pub(crate) fn ws_url(&self) -> String {
        format!("ws://{}{}/haip", self.addr, self.prefix)
    }

    /// `http://ADDR{prefix}{path}`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{}{}", self.addr, self.prefix, path)
    }

    /// Stops the application as `examples/axum_app.rs` does on SIGTERM:
    /// haip's graceful shutdown, then axum's; waits for both.
    pub(crate) async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        within("the axum application to stop", &mut self.served)
            .await
            .expect("axum's task ends cleanly");
    }
}

/// Binds `127.0.0.1:0`, builds `builder` with `path_prefix(prefix)` (the
/// caller may have set OAuth's resource to this address: see
/// [`bind_then_start`]), and serves it nested in the example's axum app.
pub(crate) async fn start_embedded(builder: ServerBuilder, prefix: &str) -> Embedded {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    serve_embedded(listener, builder, prefix).await
}

/// Binds first, so that `make` can name the address (an OAuth resource URL).
pub(crate) async fn bind_then_start(
    prefix: &str,
    make: impl FnOnce(SocketAddr) -> ServerBuilder,
) -> Embedded {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("a bound address");
    serve_embedded(listener, make(addr), prefix).await
}

async fn serve_embedded(
    listener: tokio::net::TcpListener,
    builder: ServerBuilder,
    prefix: &str,
) -> Embedded {
    let addr = listener.local_addr().expect("a bound address");
    let service = within(
        "haip's service to start",
        builder
            .path_prefix(prefix)
            .build()
            .expect("the test server configuration is valid")
            .into_service(),
    )
    .await
    .expect("haip's service starts");
    let haip = service.handle();
    let app = haip_examples::axum_app::app(service, prefix);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = haip.clone();
    let served = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move {
            let _ = stopped.await;
            shutdown.shutdown().await;
        })
        .await
        .expect("axum serves");
    });
    Embedded {
        addr,
        prefix: prefix.to_owned(),
        haip,
        stop: Some(stop),
        served,
    }
}

/// Where a test's server runs: on haip's own listener, or nested at the root
/// of the example's axum application. The hostile and browser-rule tests run
/// at both, with the same settings and the same budgets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum At {
    /// `Server::start` on `127.0.0.1:0` ([`crate::support::start`]).
    Own,
    /// `Server::into_service` nested at the root (prefix `""`) of
    /// `examples/axum_app.rs`, served by axum ([`start_embedded`]).
    App,
    /// The same, nested at `/agent`.
    Nested,
}

/// A server started by [`start_at`].
pub(crate) enum Running {
    Own(ServerHandle),
    App(Embedded),
}

impl Running {
    /// The address clients connect to: haip's listener, or axum's.
    pub(crate) fn addr(&self) -> SocketAddr {
        match self {
            Running::Own(handle) => handle.local_addr(),
            Running::App(app) => app.addr,
        }
    }

    /// `ws://ADDR/haip`.
    pub(crate) fn ws_url(&self) -> String {
        format!("ws://{}/haip", self.addr())
    }

    /// Where haip's routes are (`""`, or `/agent` when [`At::Nested`]).
    pub(crate) fn prefix(&self) -> &str {
        match self {
            Running::Own(_) => "",
            Running::App(app) => &app.prefix,
        }
    }

    /// `http://ADDR{prefix}{path}`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{}{path}", self.addr(), self.prefix())
    }

    /// haip's handle.
    pub(crate) fn handle(&self) -> &ServerHandle {
        match self {
            Running::Own(handle) => handle,
            Running::App(app) => &app.haip,
        }
    }

    /// haip's graceful shutdown; in the app, then axum's (see
    /// [`Embedded::stop`]).
    pub(crate) async fn stop(self) {
        match self {
            Running::Own(handle) => handle.shutdown().await,
            Running::App(app) => app.stop().await,
        }
    }
}

/// Starts `builder` [`At`] `at`.
pub(crate) async fn start_at(at: At, builder: ServerBuilder) -> Running {
    match at {
        At::Own => Running::Own(crate::support::start(builder).await.0),
        At::App => Running::App(start_embedded(builder, "").await),
        At::Nested => Running::App(start_embedded(builder, "/agent").await),
    }
}

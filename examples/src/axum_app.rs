//! The axum application of `examples/axum_app.rs`, shared with the tests
//! that drive it: the host's own routes, and a haip server nested in it.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use tower_http::cors::CorsLayer;
use tower_http::trace::TraceLayer;

/// The application: `GET /hello` (the host's own route, with tower-http's
/// CORS layer), and `haip` at `prefix` (`""`: at the root, beside
/// `/hello`), with the OAuth metadata's well-known path at the root when
/// there is one, every request traced by tower-http, and each request's
/// peer address handed to haip ([`haip::PeerAddr`]) when the app is served
/// with `into_make_service_with_connect_info::<SocketAddr>()`.
pub fn app(haip: haip::HaipService, prefix: &str) -> Router {
    let hello = Router::new()
        .route(
            "/hello",
            get(|| async { "Hello from the host application\n" }),
        )
        .layer(CorsLayer::permissive());
    let mut app = hello;
    if let Some(path) = haip.well_known_path()
        && !prefix.is_empty()
    {
        app = app.route_service(&path, haip.clone());
    }
    let app = if prefix.is_empty() {
        app.fallback_service(haip)
    } else {
        app.nest_service(prefix, haip)
    };
    app.layer(middleware::from_fn(peer_addr))
        .layer(TraceLayer::new_for_http())
}

/// Hands haip the address of the request's peer, which pools count an
/// unauthenticated caller by.
async fn peer_addr(mut req: Request, next: Next) -> Response {
    if let Some(ConnectInfo(addr)) = req.extensions().get::<ConnectInfo<SocketAddr>>().copied() {
        req.extensions_mut().insert(haip::PeerAddr(addr.ip()));
    }
    next.run(req).await
}

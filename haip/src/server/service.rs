//! The server as a tower `Service` ([`HaipService`]): every route haip
//! serves, for a host application's router (axum's `nest_service`, hyper's
//! `serve_connection`, tower's layers), with the same budgets, deadlines,
//! authentication and browser rules as haip's own listener, which serves
//! through the same code.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::ServerHandle;
use super::hub::Hub;
use super::reply::Body;
use crate::transport::body::{BoxError, request_body};

/// How long a streaming answer (an SSE or HTTP stream, an MCP session's
/// `GET`) may still run once the server shuts down: what the session sends
/// as it closes goes out, then the body ends, so that the host's graceful
/// shutdown is not held by a stream that never ends.
const STREAM_GRACE: Duration = Duration::from_secs(5);

/// A built server as a [`tower_service::Service`] over `http::Request<B>`,
/// for any `B: http_body::Body` (axum's `Body` included): the HAIP
/// WebSocket (through hyper's upgrade, which axum passes on), SSE and HTTP
/// streaming, `/mcp`, `/health`, `/stats`, `/metrics`, the OAuth protected
/// resource metadata and `/inspector`. Cheap to clone; every clone serves
/// the same server. Made by [`Server::into_service`](super::Server::into_service).
///
/// Nest it under a prefix with axum's `Router::nest_service`, and tell the
/// server the prefix ([`ServerBuilder::path_prefix`](super::ServerBuilder::path_prefix)),
/// so that the URLs it writes (the OAuth resource and its metadata, the
/// inspector's connections) carry it:
///
/// ```no_run
/// # async fn demo() -> Result<(), haip::Error> {
/// let haip = haip::Server::builder()
///     .builtin_tools()
///     .path_prefix("/agent")
///     .build()?
///     .into_service()
///     .await?;
/// let shutdown = haip.handle();
/// // axum: Router::new().nest_service("/agent", haip)
/// //   served with .with_graceful_shutdown(async move { signal.await; shutdown.shutdown().await })
/// # drop(shutdown); Ok(()) }
/// ```
///
/// What only the host's listener can enforce stays the host's: the time a
/// client may take to send its request headers, connections per peer
/// address, and closing a connection whose client stops reading its
/// `/mcp` answers (haip's own listener, [`Server::serve`](super::Server::serve),
/// does all three; inside a host, such answers stay counted in `/stats`
/// `outboundBytes` until their client reads them or goes, and
/// `write_timeout`, `max_outbound_bytes` and `max_inflight_answer_bytes`
/// do not close its connection). Bodies' deadlines and sizes, the body
/// budget, sessions per caller, and every session's deadlines and outbound
/// budget are enforced here. See the guide's chapter "Inside your service".
#[derive(Clone)]
pub struct HaipService {
    hub: Arc<Hub>,
    handle: ServerHandle,
}

impl std::fmt::Debug for HaipService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HaipService")
            .field("prefix", &&*self.hub.prefix)
            .finish_non_exhaustive()
    }
}

impl HaipService {
    pub(super) fn new(hub: Arc<Hub>, handle: ServerHandle) -> HaipService {
        HaipService { hub, handle }
    }

    /// The server's handle: its tools, and [`shutdown`](ServerHandle::shutdown),
    /// the graceful handover (calls ended, each with one `TOOL_DONE`;
    /// WebSockets closed with 1001; streams ended) to run when the host
    /// application stops.
    pub fn handle(&self) -> ServerHandle {
        self.handle.clone()
    }

    /// Where the server's OAuth protected resource metadata is expected by
    /// clients that look for it at the well-known path (RFC 9728):
    /// `/.well-known/oauth-protected-resource` followed by the resource's
    /// path, at the root of the host. Route that path to this service too
    /// when it is nested under a prefix (the `WWW-Authenticate` header names
    /// the copy under the prefix, which the service always serves). `None`
    /// without OAuth.
    pub fn well_known_path(&self) -> Option<String> {
        self.hub.oauth.well_known_path()
    }
}

impl<B> tower_service::Service<http::Request<B>> for HaipService
where
    B: HttpBody + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Response = http::Response<ServiceBody>;
    type Error = Infallible;
    type Future =
        Pin<Box<dyn Future<Output = Result<http::Response<ServiceBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let hub = Arc::clone(&self.hub);
        let req = req.map(request_body);
        Box::pin(async move {
            let Ok(response) = super::http::route(req, Arc::clone(&hub), false).await;
            Ok(response.map(|body| ServiceBody::new(body, &hub)))
        })
    }
}

/// The body of every answer [`HaipService`] gives. A streaming one ends at
/// the latest a few seconds after the server starts shutting down.
pub struct ServiceBody {
    inner: Body,
    /// For a body of unknown length: the server's shutdown, then the grace.
    ending: Option<Box<Ending>>,
}

struct Ending {
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    grace: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl ServiceBody {
    fn new(inner: Body, hub: &Hub) -> ServiceBody {
        let ending = inner.size_hint().exact().is_none().then(|| {
            Box::new(Ending {
                shutdown: Box::pin(hub.shared.shutdown.clone().cancelled_owned()),
                grace: None,
            })
        });
        ServiceBody { inner, ending }
    }
}

impl std::fmt::Debug for ServiceBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceBody").finish_non_exhaustive()
    }
}

impl HttpBody for ServiceBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        if let Some(ending) = &mut this.ending {
            if ending.grace.is_none() && ending.shutdown.as_mut().poll(cx).is_ready() {
                ending.grace = Some(Box::pin(tokio::time::sleep(STREAM_GRACE)));
            }
            if let Some(grace) = &mut ending.grace
                && grace.as_mut().poll(cx).is_ready()
            {
                return Poll::Ready(None);
            }
        }
        Pin::new(&mut this.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

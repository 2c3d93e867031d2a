//! The Streamable HTTP endpoint at `/mcp` ([`McpHttp`]), and what the
//! server's front door tells the MCP server of each request it hands over:
//! its caller, its schema profile, whether it is large or opens a session.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use serde_json::{Map, Value};
use tokio::sync::OwnedSemaphorePermit;

use super::ExportService;
use crate::context::Caller;
use crate::mcp::mrtr::Rounds;
use crate::mcp::tasks::Tasks;
use crate::schema::SchemaProfile;
use crate::session::Shared;

/// The Streamable HTTP MCP endpoint at `/mcp`.
///
/// **Stateless** (the default): every POST is served on its own by a fresh
/// [`ExportService`], with no `Mcp-Session-Id`, so any instance behind a load
/// balancer answers any request. A plain request-response is answered with
/// `application/json`; a call that reports progress or log lines first gets
/// them on its response's SSE stream. `GET` and `DELETE` are `405`. An MCP
/// 2026-07-28 client takes a call's questions in rounds (`mrtr.rs`) and
/// hears of registry changes on a `subscriptions/listen` stream
/// (`listen.rs`); for a client of an earlier revision, requests of the
/// server (elicitation, sampling) are refused at once
/// (`AskError::Unsupported`, `SampleError::Unsupported`): the answer would
/// be a new POST that nothing waits for. `max_sessions` bounds the requests
/// being served at once (a listen stream is one while it is open; at most
/// half of them may be listen streams).
///
/// **Sessions** (`ServerBuilder::mcp_sessions(true)`): `initialize` opens an
/// MCP session held by this instance (`Mcp-Session-Id`), which serves the
/// client's later requests, its answers to elicitation and sampling, and the
/// `GET` stream that carries `notifications/tools/list_changed`.
/// `max_sessions` bounds the live sessions and the requests served on their
/// own: those of protocol revisions without `initialize`, 2026-07-28 and
/// later, are stateless either way (rounds, listen streams).
pub(crate) struct McpHttp {
    service: rmcp::transport::StreamableHttpService<
        ExportService,
        rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
    >,
    live: Arc<AtomicUsize>,
    max_sessions: usize,
    sessions: bool,
    /// The places for `subscriptions/listen` streams (`listen.rs`).
    listens: crate::mcp::listen::Listens,
}

impl McpHttp {
    /// `open_host`: accept any `Host` header (authentication is on, or the
    /// operator allowed unauthenticated non-loopback serving). Otherwise only
    /// loopback hosts are accepted, against DNS rebinding. `max_body_bytes`:
    /// the largest request body. `sessions`: MCP sessions held by this
    /// instance instead of stateless requests. `rounds`: how stateless calls
    /// ask questions. `tasks`: the server's tasks.
    pub(crate) fn new(
        shared: &Arc<Shared>,
        open_host: bool,
        max_body_bytes: usize,
        sessions: bool,
        rounds: Arc<Rounds>,
        tasks: Arc<Tasks>,
    ) -> McpHttp {
        use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
        let mut config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(sessions)
            // Stateless: a result with nothing before it is plain JSON.
            .with_json_response(!sessions)
            .with_cancellation_token(shared.shutdown.child_token())
            // An SSE comment every 15 s on an idle response stream (a listen
            // stream, a session's `GET`): proxies keep it open, and a client
            // that went away is noticed.
            .with_sse_keep_alive(Some(std::time::Duration::from_secs(15)))
            .with_max_request_body_bytes(max_body_bytes);
        if open_host {
            config = config.disable_allowed_hosts();
        }
        let live = Arc::new(AtomicUsize::new(0));
        let factory_shared = Arc::clone(shared);
        let factory_live = Arc::clone(&live);
        let service = rmcp::transport::StreamableHttpService::new(
            move || {
                // Asked for once the request is parsed: a large one's permit
                // is not needed any more.
                let stateless = SERVING
                    .try_with(|serving| {
                        serving.parsing.borrow_mut().take();
                        serving.stateless
                    })
                    .unwrap_or(!sessions);
                let rounds = stateless.then(|| Arc::clone(&rounds));
                ExportService::for_http(&factory_shared, &factory_live, stateless, rounds, &tasks)
            },
            Arc::default(),
            config,
        );
        McpHttp {
            service,
            live,
            max_sessions: shared.config.max_sessions,
            sessions,
            listens: crate::mcp::listen::Listens::new(shared.config.max_sessions),
        }
    }

    /// The places for `subscriptions/listen` streams, taken by the front
    /// door when a listen request arrives.
    pub(crate) fn listens(&self) -> &crate::mcp::listen::Listens {
        &self.listens
    }

    /// Whether `req` would need a service while `max_sessions` are live: a
    /// POST opening a session, or in stateless mode any POST. (The service
    /// factory's own check, which rmcp answers with a 500, stays as the
    /// race-free backstop.)
    pub(crate) fn is_full_for(&self, req: &hyper::Request<hyper::body::Incoming>) -> bool {
        let needs_service = req.method() == hyper::Method::POST
            && (!self.sessions || !req.headers().contains_key("mcp-session-id"));
        needs_service && self.live.load(Relaxed) >= self.max_sessions
    }

    /// Serves one request; `caller` is the authenticated caller, if any.
    /// `parsing`: the permit a large request was let in with, given back once
    /// the MCP server has parsed it (when it asks for its service), or with
    /// the request's response at the latest; its calls validate their params
    /// off the runtime's workers.
    pub(crate) async fn handle<B>(
        &self,
        mut req: hyper::Request<B>,
        caller: Option<Arc<Caller>>,
        parsing: Option<OwnedSemaphorePermit>,
    ) -> hyper::Response<
        http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, std::convert::Infallible>,
    >
    where
        B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: std::fmt::Display,
    {
        use http_body_util::BodyExt;
        req.extensions_mut().insert(McpCaller(caller));
        if parsing.is_some() {
            req.extensions_mut().insert(LargeRequest);
        }
        // In session mode, a POST without `Mcp-Session-Id` that is not an
        // `initialize` is of a revision without sessions (2026-07-28 and
        // later): rmcp serves it on its own, and so must its service.
        let stateless = !self.sessions
            || (req.method() == hyper::Method::POST
                && !req.headers().contains_key("mcp-session-id")
                && req.extensions().get::<Handshake>().is_none());
        let serving = Serving {
            parsing: std::cell::RefCell::new(parsing),
            stateless,
            profile: req.extensions().get::<McpProfile>().map(|p| p.0),
        };
        let served = self.service.handle(req);
        SERVING
            .scope(serving, served)
            .await
            .map(|b| b.boxed_unsync())
    }
}

tokio::task_local! {
    /// The request being handed to the MCP server, while it is.
    pub(super) static SERVING: Serving;
}

/// What the front door knows of the request being handed to the MCP
/// server, for what the MCP server asks of it meanwhile: the service for
/// the request (its factory takes no arguments), a tool's input schema.
pub(super) struct Serving {
    /// The permit of a large request: given back once the MCP server has
    /// parsed it (when it asks for its service).
    parsing: std::cell::RefCell<Option<OwnedSemaphorePermit>>,
    /// Served on its own, no MCP session holding it: in stateless mode any
    /// request; in session mode one of a revision without `initialize`.
    stateless: bool,
    /// The schema profile its URL asks for (`?schema_profile=`), if any.
    pub(super) profile: Option<SchemaProfile>,
}

/// Marks an `initialize` request (the front door has read its method): in
/// session mode it opens a session, and is not served on its own.
#[derive(Clone, Copy)]
pub(crate) struct Handshake;

/// Marks a request over 64 KiB: its params are validated on the blocking pool.
#[derive(Clone, Copy)]
pub(crate) struct LargeRequest;

/// The arguments of a large `tools/call`, parsed by the server's front door
/// off the runtime's workers and left out of the message the MCP server
/// parses (which keeps only their small scalars, and the values that travel
/// in `Mcp-Param-*` headers too). Taken once, by the call.
#[derive(Clone, Default)]
pub(crate) struct LargeArguments(pub(crate) Arc<std::sync::Mutex<Option<Map<String, Value>>>>);

impl LargeArguments {
    pub(crate) fn new(arguments: Map<String, Value>) -> LargeArguments {
        LargeArguments(Arc::new(std::sync::Mutex::new(Some(arguments))))
    }

    pub(super) fn take(&self) -> Option<Map<String, Value>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// The caller an authenticated `/mcp` request carries into its calls.
#[derive(Clone)]
pub(crate) struct McpCaller(pub(crate) Option<Arc<Caller>>);

/// The schema profile of an `/mcp` request (`?schema_profile=` on its URL),
/// set by the server's front door.
#[derive(Clone, Copy)]
pub(crate) struct McpProfile(pub(crate) SchemaProfile);

//! The Streamable HTTP endpoint at `/mcp` ([`McpHttp`]), and what the
//! server's front door tells the MCP server of each request it hands over:
//! its caller, its schema profile, whether it is large,
//! and the place it was given in the endpoint's pools ([`Admission`]).

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use serde_json::{Map, Value};
use tokio::sync::OwnedSemaphorePermit;

use super::ExportService;
use super::direct::Direct;
use super::session::Sessions;
use crate::context::Caller;
use crate::context::share::{CallerKey, OverShare, ShareGuard, Shares};
use crate::mcp::listen::{Listening, Listens};
use crate::mcp::mrtr::Rounds;
use crate::mcp::tasks::Tasks;
use crate::schema::SchemaProfile;
use crate::session::Shared;
use crate::tool::Registry;

/// The Streamable HTTP MCP endpoint at `/mcp`: each protocol revision
/// served as it expects.
///
/// **Sessions** (`ServerBuilder::mcp_sessions(true)`, the default):
/// `initialize` (revisions before 2026-07-28) opens an MCP session held by
/// this instance, served by haip itself (`session.rs`): its id
/// (`Mcp-Session-Id`), its requests, its answers to elicitation and
/// sampling, its `GET` stream, resumption with `Last-Event-ID`, its
/// `DELETE` (`204`). A session is its opener's. Requests of protocol
/// revisions without `initialize` (2026-07-28 and later) are stateless
/// either way (rounds, listen streams). With Redis, sessions are kept there
/// too, and any instance serves any of their requests.
///
/// **Stateless** (`mcp_sessions(false)`): every POST is served on its own by
/// a fresh [`ExportService`], with no `Mcp-Session-Id`, so any instance
/// behind a load balancer answers any request. A plain request-response is
/// answered with `application/json`; a call that reports progress or log
/// lines first gets them on its response's SSE stream. `GET` and `DELETE`
/// are `405`. An MCP 2026-07-28 client takes a call's questions in rounds
/// (`mrtr.rs`) and hears of registry changes on a `subscriptions/listen`
/// stream (`listen.rs`); for a client of an earlier revision, requests of
/// the server (elicitation, sampling, roots) are refused at once with an
/// error naming `mcp_sessions` (`mcp/peer.rs`, `no_session`): the answer
/// would be a new POST that nothing waits for.
///
/// **Pools.** Two pools of `max_sessions` each: the live MCP sessions, and
/// the stateless requests being served (a listen stream is one while it is
/// open; at most half of `max_sessions` may be listen streams, `listen.rs`),
/// so that neither starves the other. In each, and among listen streams, one
/// caller holds at most its share, `max_sessions_per_caller` (a caller is
/// its subject, or its peer address when unauthenticated: `context/share.rs`).
/// The front door takes a request's place before handing it over
/// ([`McpHttp::admit`]), and refuses one beyond a pool or a share with `503`
/// naming which; the request's service holds the place until it is dropped
/// (the session ended, the request was answered). The service factory's own
/// count of the pool, which rmcp answers with a `500`, stays as the
/// race-free backstop.
pub(crate) struct McpHttp {
    service: rmcp::transport::StreamableHttpService<
        ExportService,
        rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
    >,
    max_sessions: usize,
    /// The MCP sessions, when `/mcp` has them (`session.rs`).
    sessions: Option<Arc<Sessions>>,
    /// Stateless requests being served (`max_sessions`).
    live_requests: Arc<AtomicUsize>,
    /// Each caller's shares of the pools (`max_sessions_per_caller`).
    shares: CallerShares,
    /// What the services of requests served without the MCP server are
    /// copied from (`direct.rs`).
    direct: ExportService,
}

/// Each caller's shares of `/mcp`'s pools.
struct CallerShares {
    requests: Arc<Shares>,
    /// The places for `subscriptions/listen` streams (`listen.rs`).
    listens: Listens,
}

impl McpHttp {
    /// `max_body_bytes`: the largest request body. `sessions`: MCP sessions
    /// held by this instance instead of stateless requests. `per_caller`:
    /// what one caller may hold of each pool (`max_sessions_per_caller`).
    /// `rounds`: how stateless calls ask questions. `tasks`: the server's
    /// tasks. Which `Host` and `Origin` may reach `/mcp` is the server's
    /// front door's to say (`server/guard.rs`, for every route alike).
    pub(crate) fn new(
        shared: &Arc<Shared>,
        max_body_bytes: usize,
        sessions: bool,
        per_caller: usize,
        rounds: Arc<Rounds>,
        tasks: Arc<Tasks>,
    ) -> McpHttp {
        use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
        // Sessions are served by haip itself (`session.rs`): whatever the
        // MCP server is handed, it serves on its own.
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            // A request served on its own (a 2026-07-28 one, or any with
            // sessions off): a result with nothing before it is plain JSON.
            .with_json_response(true)
            .with_cancellation_token(shared.shutdown.child_token())
            // An SSE comment every 15 s on an idle response stream (a listen
            // stream, a session's `GET`): proxies keep it open, and a client
            // that went away is noticed.
            .with_sse_keep_alive(Some(std::time::Duration::from_secs(15)))
            .with_max_request_body_bytes(max_body_bytes)
            .disable_allowed_hosts();
        let live_requests = Arc::new(AtomicUsize::new(0));
        let factory_shared = Arc::clone(shared);
        let factory_requests = Arc::clone(&live_requests);
        let direct = ExportService::stateless(shared, &rounds, &tasks);
        let service = rmcp::transport::StreamableHttpService::new(
            move || {
                // Asked for once the request is parsed: a large one's permit
                // is not needed any more.
                let Ok((held, fallback)) = SERVING.try_with(|serving| {
                    serving.parsing.borrow_mut().take();
                    let held = serving.held.borrow_mut().take();
                    (held, serving.fallback.clone())
                }) else {
                    return Err(std::io::Error::other(
                        "an MCP service is made only for an /mcp request",
                    ));
                };
                let held = match held {
                    Some(held) => held,
                    // Nothing was taken for it (a `GET` or `DELETE`): its
                    // place is taken now.
                    None => {
                        let (shares, key) = fallback;
                        let share = shares
                            .take(&key)
                            .map_err(|over| std::io::Error::other(over_requests(&key, &over)))?;
                        Held::new(share)
                    }
                };
                let rounds = Some(Arc::clone(&rounds));
                let mut service = ExportService::for_http(
                    &factory_shared,
                    &factory_requests,
                    true,
                    rounds,
                    &tasks,
                )?;
                service.held = Some(Arc::new(held));
                Ok(service)
            },
            Arc::default(),
            config,
        );
        let sessions = sessions.then(|| Sessions::new(shared, &direct.tasks, per_caller));
        McpHttp {
            service,
            max_sessions: shared.config.max_sessions,
            sessions,
            live_requests,
            shares: CallerShares {
                requests: Shares::new(per_caller),
                listens: Listens::new(shared.config.max_sessions, per_caller),
            },
            direct,
        }
    }

    /// The MCP sessions, when `/mcp` has them.
    pub(crate) fn sessions(&self) -> Option<&Arc<Sessions>> {
        self.sessions.as_ref()
    }

    /// The place `req` of the caller `key` needs in the pools, taken; or why
    /// there is none, for the client. A POST needs one among the stateless
    /// requests being served; `GET` and `DELETE` need none.
    pub(crate) fn admit<B>(
        &self,
        req: &hyper::Request<B>,
        key: CallerKey,
    ) -> Result<Admission, String> {
        let mut admission = Admission {
            key,
            share: None,
            fallback: Arc::clone(&self.shares.requests),
        };
        if req.method() == hyper::Method::POST {
            admission.share = Some(self.take_request(&admission.key)?);
        }
        Ok(admission)
    }

    /// The caller `key`'s place among the stateless requests being served.
    fn take_request(&self, key: &CallerKey) -> Result<ShareGuard, String> {
        let share = self
            .shares
            .requests
            .take(key)
            .map_err(|over| over_requests(key, &over))?;
        if self.live_requests.load(Relaxed) >= self.max_sessions {
            return Err(format!(
                "Too many MCP requests in flight (max_sessions = {})",
                self.max_sessions
            ));
        }
        Ok(share)
    }

    /// Serves a request the front door routed here (`direct.rs`) with a
    /// service of its own, counted among the stateless requests; or why it
    /// has no place there, for the client.
    pub(crate) async fn serve_direct(
        &self,
        direct: Direct,
        caller: Option<Arc<Caller>>,
        key: CallerKey,
        profile: Option<SchemaProfile>,
    ) -> Result<hyper::Response<super::direct::Body>, String> {
        let share = self.take_request(&key)?;
        let mut service = self
            .direct
            .for_request(&self.live_requests)
            .map_err(|e| e.to_string())?;
        service.held = Some(Arc::new(Held::new(share)));
        Ok(service.serve_direct(direct, caller, key, profile).await)
    }

    /// A place for one `subscriptions/listen` stream of the caller `key`,
    /// watching the registry from now on; or why not, for the client.
    pub(crate) fn listen(&self, registry: &Registry, key: &CallerKey) -> Result<Listening, String> {
        self.shares.listens.open(registry, key)
    }

    /// Serves one request; `caller` is the authenticated caller, if any, and
    /// `admission` the place [`admit`](Self::admit) took for it.
    /// `parsing`: the permit a large request was let in with, given back once
    /// the MCP server has parsed it (when it asks for its service), or with
    /// the request's response at the latest; its calls validate their params
    /// off the runtime's workers.
    pub(crate) async fn handle<B>(
        &self,
        mut req: hyper::Request<B>,
        caller: Option<Arc<Caller>>,
        admission: Admission,
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
        // Whom the calls' tasks are counted against (`mcp/tasks.rs`).
        req.extensions_mut().insert(admission.key.clone());
        if parsing.is_some() {
            req.extensions_mut().insert(LargeRequest);
        }
        let Admission {
            key,
            share,
            fallback,
        } = admission;
        let serving = Serving {
            parsing: RefCell::new(parsing),
            held: RefCell::new(share.map(Held::new)),
            fallback: (fallback, key),
            profile: req.extensions().get::<McpProfile>().map(|p| p.0),
        };
        let served = self.service.handle(req);
        let response = SERVING.scope(serving, served).await;
        response.map(|b| b.boxed_unsync())
    }
}

/// The refusal of one more request in flight to the caller `key`.
fn over_requests(key: &CallerKey, over: &OverShare) -> String {
    format!(
        "{} already has {} MCP requests in flight (max_sessions_per_caller = {}); retry later",
        key.describe(),
        over.share,
        over.share
    )
}

/// What the front door took of `/mcp`'s pools for one request
/// ([`McpHttp::admit`]), handed to [`McpHttp::handle`] with it.
pub(crate) struct Admission {
    /// Whom the request is counted against.
    key: CallerKey,
    /// The caller's share of the pool the request's service counts in; none
    /// for a `GET` or `DELETE`.
    share: Option<ShareGuard>,
    /// The requests' shares, for a request rmcp serves on its own although
    /// none was taken for it.
    fallback: Arc<Shares>,
}

/// What a service made for an `/mcp` request or session holds while it
/// lives, beside its place among `max_sessions`
/// ([`ExportService::for_http`]): its caller's share of the pool.
pub(crate) struct Held {
    _share: ShareGuard,
}

impl Held {
    pub(super) fn new(share: ShareGuard) -> Held {
        Held { _share: share }
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
    parsing: RefCell<Option<OwnedSemaphorePermit>>,
    /// What the request's own service is to hold: taken by the first
    /// service made for it.
    held: RefCell<Option<Held>>,
    /// The requests' shares and the caller: a service made for the request
    /// with nothing taken for it takes its place among the requests then.
    fallback: (Arc<Shares>, CallerKey),
    /// The schema profile its URL asks for (`?schema_profile=`), if any.
    pub(super) profile: Option<SchemaProfile>,
}

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

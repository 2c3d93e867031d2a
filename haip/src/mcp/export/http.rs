//! The Streamable HTTP endpoint at `/mcp` ([`McpHttp`]): its pools, and
//! which of haip's servers of MCP serves each request the front door hands
//! over (`server/mcp.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use super::ExportService;
use super::direct::Direct;
use super::session::{Incoming, Message, Sessions};
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
/// Every request is served by haip's own code: a small 2026-07-28 request
/// whose headers agree with its body by `direct.rs`, a session's by
/// `session.rs`, any other by `stateless.rs`.
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
/// A request's place is taken before it is served, and one beyond a pool
/// or a share is refused with `503` naming which; the request's service
/// holds the place until it is dropped (the session ended, the request was
/// answered).
pub(crate) struct McpHttp {
    max_sessions: usize,
    /// The MCP sessions, when `/mcp` has them (`session.rs`).
    sessions: Option<Arc<Sessions>>,
    /// Stateless requests being served (`max_sessions`).
    live_requests: Arc<AtomicUsize>,
    /// Each caller's shares of the pools (`max_sessions_per_caller`).
    shares: CallerShares,
    /// What the services of stateless requests are copied from
    /// (`direct.rs`, `stateless.rs`).
    direct: ExportService,
}

/// Each caller's shares of `/mcp`'s pools.
struct CallerShares {
    requests: Arc<Shares>,
    /// The places for `subscriptions/listen` streams (`listen.rs`).
    listens: Listens,
}

impl McpHttp {
    /// `sessions`: MCP sessions held by this instance for clients of
    /// revisions before 2026-07-28. `per_caller`: what one caller may hold
    /// of each pool (`max_sessions_per_caller`). `rounds`: how stateless
    /// calls ask questions. `tasks`: the server's tasks. Which `Host` and
    /// `Origin` may reach `/mcp` is the server's front door's to say
    /// (`server/guard.rs`, for every route alike).
    pub(crate) fn new(
        shared: &Arc<Shared>,
        sessions: bool,
        per_caller: usize,
        rounds: Arc<Rounds>,
        tasks: Arc<Tasks>,
    ) -> McpHttp {
        let direct = ExportService::stateless(shared, &rounds, &tasks);
        // Tasks of instances that died, taken over here, run again here.
        let (again_shared, again_tasks) = (Arc::clone(shared), Arc::downgrade(&tasks));
        tasks.on_taken_over(move |record| {
            if let Some(tasks) = again_tasks.upgrade() {
                super::as_task::run_again(&again_shared, &tasks, record);
            }
        });
        let sessions = sessions.then(|| Sessions::new(shared, &direct.tasks, per_caller));
        McpHttp {
            max_sessions: shared.config.max_sessions,
            sessions,
            live_requests: Arc::new(AtomicUsize::new(0)),
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

    /// A service of its own for one stateless request of the caller `key`,
    /// counted among the stateless requests being served; or why it has no
    /// place there, for the client.
    fn service_for(&self, key: &CallerKey) -> Result<ExportService, String> {
        let share = self.take_request(key)?;
        let mut service = self
            .direct
            .for_request(&self.live_requests)
            .map_err(|e| e.to_string())?;
        service.held = Some(Arc::new(Held::new(share)));
        Ok(service)
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
        let service = self.service_for(&key)?;
        Ok(service.serve_direct(direct, caller, key, profile).await)
    }

    /// Serves any other message without a session (`stateless.rs`), checked
    /// already against its `headers`; `listening`: the place taken for a
    /// `subscriptions/listen` stream. `Err`: why it has no place among the
    /// stateless requests, for the client.
    pub(crate) async fn serve_stateless(
        &self,
        headers: &hyper::HeaderMap,
        message: Message,
        incoming: Incoming,
        listening: Option<Listening>,
    ) -> Result<hyper::Response<super::direct::Body>, String> {
        let service = self.service_for(&incoming.key)?;
        Ok(service
            .serve_stateless(headers, message, incoming, listening)
            .await)
    }

    /// A place for one `subscriptions/listen` stream of the caller `key`,
    /// watching the registry from now on; or why not, for the client.
    pub(crate) fn listen(&self, registry: &Registry, key: &CallerKey) -> Result<Listening, String> {
        self.shares.listens.open(registry, key)
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

/// The schema profile of an `/mcp` request (`?schema_profile=` on its URL),
/// set by the server's front door.
#[derive(Clone, Copy)]
pub(crate) struct McpProfile(pub(crate) SchemaProfile);

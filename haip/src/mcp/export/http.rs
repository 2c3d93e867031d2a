//! The Streamable HTTP endpoint at `/mcp` ([`McpHttp`]), and what the
//! server's front door tells the MCP server of each request it hands over:
//! its caller, its schema profile, whether it is large or opens a session,
//! and the place it was given in the endpoint's pools ([`Admission`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Map, Value};
use tokio::sync::OwnedSemaphorePermit;

use super::ExportService;
use super::direct::Direct;
use crate::context::Caller;
use crate::context::share::{CallerKey, OverShare, ShareGuard, Shares};
use crate::mcp::listen::{Listening, Listens};
use crate::mcp::mrtr::Rounds;
use crate::mcp::tasks::Tasks;
use crate::schema::SchemaProfile;
use crate::session::Shared;
use crate::tool::Registry;

/// The header that names an MCP session.
const SESSION_ID: &str = "mcp-session-id";

/// What a request carrying the id of a session its caller did not open
/// carries instead when it is handed to the MCP server: an id no session
/// has (rmcp's are UUIDs), so that it is answered as an unknown session's.
const NO_SUCH_SESSION: &str = "none";

/// The Streamable HTTP MCP endpoint at `/mcp`: each protocol revision
/// served as it expects.
///
/// **Sessions** (`ServerBuilder::mcp_sessions(true)`, the default):
/// `initialize` (revisions before 2026-07-28) opens an MCP session held by
/// this instance (`Mcp-Session-Id`), which serves the client's later
/// requests, its answers to elicitation and sampling, and the `GET` stream
/// that carries `notifications/tools/list_changed`; its `DELETE` ends it
/// (`204`: rmcp's `202` reads as a failure to clients). Requests of protocol
/// revisions without `initialize` (2026-07-28 and later) are stateless
/// either way (rounds, listen streams). A session is its opener's:
/// the subject that sent its `initialize` (with authentication off, every
/// client is one anonymous subject). A request of any other subject that
/// names it is answered as if it did not exist: `404` for a `DELETE`, and a
/// `POST` or `GET` is handed to the MCP server with an id no session has.
/// The record of who opened a session goes with its service, when the
/// session ends (`DELETE`, idle expiry, shutdown). Sessions are this
/// instance's alone, with Redis too: a load balancer keeps a client on one.
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
/// race-free backstop; it also takes the place of a request rmcp serves on
/// its own although the front door expected its session to serve it (a
/// 2026-07-28 request that carries an `Mcp-Session-Id`).
pub(crate) struct McpHttp {
    service: rmcp::transport::StreamableHttpService<
        ExportService,
        rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
    >,
    max_sessions: usize,
    sessions: bool,
    /// Live MCP sessions (`max_sessions`).
    live_sessions: Arc<AtomicUsize>,
    /// Stateless requests being served (`max_sessions`).
    live_requests: Arc<AtomicUsize>,
    /// Each caller's shares of the pools (`max_sessions_per_caller`).
    shares: CallerShares,
    /// Who opened each live MCP session.
    owners: Arc<Owners>,
    /// What the services of requests served without the MCP server are
    /// copied from (`direct.rs`).
    direct: ExportService,
}

/// Each caller's shares of `/mcp`'s pools.
struct CallerShares {
    sessions: Arc<Shares>,
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
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(sessions)
            // A request served on its own (a 2026-07-28 one, or any with
            // sessions off): a result with nothing before it is plain JSON.
            // A session's answers are SSE whatever this says.
            .with_json_response(true)
            .with_cancellation_token(shared.shutdown.child_token())
            // An SSE comment every 15 s on an idle response stream (a listen
            // stream, a session's `GET`): proxies keep it open, and a client
            // that went away is noticed.
            .with_sse_keep_alive(Some(std::time::Duration::from_secs(15)))
            .with_max_request_body_bytes(max_body_bytes)
            .disable_allowed_hosts();
        let live_sessions = Arc::new(AtomicUsize::new(0));
        let live_requests = Arc::new(AtomicUsize::new(0));
        let factory_shared = Arc::clone(shared);
        let factory_sessions = Arc::clone(&live_sessions);
        let factory_requests = Arc::clone(&live_requests);
        let direct = ExportService::stateless(shared, &rounds, &tasks);
        let service = rmcp::transport::StreamableHttpService::new(
            move || {
                // Asked for once the request is parsed: a large one's permit
                // is not needed any more.
                let Ok((session, held, fallback)) = SERVING.try_with(|serving| {
                    serving.parsing.borrow_mut().take();
                    let held = serving.held.borrow_mut().take();
                    (serving.session, held, serving.fallback.clone())
                }) else {
                    return Err(std::io::Error::other(
                        "an MCP service is made only for an /mcp request",
                    ));
                };
                let held = match held {
                    Some(held) => held,
                    // Served on its own although the front door expected
                    // its session to serve it: its place is taken now.
                    None => {
                        let (shares, key) = fallback;
                        let share = shares
                            .take(&key)
                            .map_err(|over| std::io::Error::other(over_requests(&key, &over)))?;
                        Held::new(share, None)
                    }
                };
                let live = if session {
                    &factory_sessions
                } else {
                    &factory_requests
                };
                let stateless = !session;
                let rounds = stateless.then(|| Arc::clone(&rounds));
                let mut service =
                    ExportService::for_http(&factory_shared, live, stateless, rounds, &tasks)?;
                service.held = Some(Arc::new(held));
                Ok(service)
            },
            Arc::default(),
            config,
        );
        McpHttp {
            service,
            max_sessions: shared.config.max_sessions,
            sessions,
            live_sessions,
            live_requests,
            shares: CallerShares {
                sessions: Shares::new(per_caller),
                requests: Shares::new(per_caller),
                listens: Listens::new(shared.config.max_sessions, per_caller),
            },
            owners: Arc::default(),
            direct,
        }
    }

    /// The place `req` of the caller `key` needs in the pools, taken; or why
    /// there is none, for the client. A POST opening a session (in session
    /// mode) needs one among the sessions, any other POST not served by a
    /// session one among the requests; `GET` and `DELETE` need none.
    pub(crate) fn admit<B>(
        &self,
        req: &hyper::Request<B>,
        key: CallerKey,
    ) -> Result<Admission, String> {
        let shares = &self.shares;
        let mut admission = Admission {
            key,
            share: None,
            session: false,
            fallback: Arc::clone(&shares.requests),
        };
        if req.method() != hyper::Method::POST
            || (self.sessions && req.headers().contains_key(SESSION_ID))
        {
            return Ok(admission);
        }
        let session = self.sessions && req.extensions().get::<Handshake>().is_some();
        let key = &admission.key;
        let share = if session {
            let share = shares.sessions.take(key).map_err(|over| {
                format!(
                    "{} already holds {} MCP sessions (max_sessions_per_caller = {}); \
                     end one (DELETE) or retry later",
                    key.describe(),
                    over.share,
                    over.share
                )
            })?;
            if self.live_sessions.load(Relaxed) >= self.max_sessions {
                return Err(format!(
                    "Too many MCP sessions (max_sessions = {})",
                    self.max_sessions
                ));
            }
            share
        } else {
            self.take_request(key)?
        };
        admission.share = Some(share);
        admission.session = session;
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
        service.held = Some(Arc::new(Held::new(share, None)));
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
        let subject: Option<Arc<str>> = caller.as_ref().map(|c| Arc::from(c.subject()));
        if self.sessions
            && let Some(refused) = self.owners.hide_others(&mut req, subject.as_deref())
        {
            return refused;
        }
        req.extensions_mut().insert(McpCaller(caller));
        // Whom the calls' tasks are counted against (`mcp/tasks.rs`).
        req.extensions_mut().insert(admission.key.clone());
        if parsing.is_some() {
            req.extensions_mut().insert(LargeRequest);
        }
        let Admission {
            key,
            share,
            session,
            fallback,
        } = admission;
        // A session opened now is its caller's from its first answer on.
        let owner = session.then(|| Arc::new(Owner::new(&self.owners, subject)));
        let held = share.map(|share| Held::new(share, owner.clone()));
        let serving = Serving {
            parsing: RefCell::new(parsing),
            held: RefCell::new(held),
            fallback: (fallback, key),
            session,
            profile: req.extensions().get::<McpProfile>().map(|p| p.0),
        };
        let delete = req.method() == hyper::Method::DELETE;
        let served = self.service.handle(req);
        let mut response = SERVING.scope(serving, served).await;
        // A session ended by its `DELETE`: rmcp answers `202 Accepted`,
        // which clients read as a failure (the MCP Python SDK logs "Session
        // termination failed: 202"); it is done, so `204 No Content`.
        if delete && response.status() == hyper::StatusCode::ACCEPTED {
            *response.status_mut() = hyper::StatusCode::NO_CONTENT;
        }
        if let Some(owner) = owner
            && let Some(id) = response
                .headers()
                .get(SESSION_ID)
                .and_then(|v| v.to_str().ok())
        {
            owner.record(id);
        }
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
    /// when it needs no service of its own (`GET`, `DELETE`, a request a
    /// session serves).
    share: Option<ShareGuard>,
    /// It opens an MCP session: its service counts among the sessions.
    session: bool,
    /// The requests' shares, for a request rmcp serves on its own although
    /// none was taken for it.
    fallback: Arc<Shares>,
}

/// What a service made for an `/mcp` request holds while it lives, beside
/// its place among `max_sessions` ([`ExportService::for_http`]): its
/// caller's share of the pool, and for an MCP session the record of who
/// opened it.
pub(crate) struct Held {
    _share: ShareGuard,
    _owner: Option<Arc<Owner>>,
}

impl Held {
    fn new(share: ShareGuard, owner: Option<Arc<Owner>>) -> Held {
        Held {
            _share: share,
            _owner: owner,
        }
    }
}

/// Who opened each live MCP session of this instance: its subject (`None`
/// with authentication off). An entry lives as long as its [`Owner`].
#[derive(Default)]
struct Owners(Mutex<HashMap<Arc<str>, Option<Arc<str>>>>);

impl Owners {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Option<Arc<str>>>> {
        // Inserts and removals are whole; a panic cannot leave one half-done.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// For a request of `subject` naming a session it did not open: a
    /// `DELETE` is refused (`404`, as an unknown session's, which rmcp
    /// would answer `202`), any other request names instead a session that
    /// does not exist, and is answered as such. `None`: hand it over.
    fn hide_others<B>(
        &self,
        req: &mut hyper::Request<B>,
        subject: Option<&str>,
    ) -> Option<
        hyper::Response<
            http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, std::convert::Infallible>,
        >,
    > {
        use http_body_util::BodyExt;
        let id = req.headers().get(SESSION_ID)?.to_str().ok()?;
        let owner = self.lock().get(id).cloned();
        match owner {
            Some(owner) if owner.as_deref() == subject => None,
            _ if req.method() == hyper::Method::DELETE => {
                let body = http_body_util::Full::new(bytes::Bytes::from_static(
                    b"Not Found: Session not found",
                ));
                let mut response = hyper::Response::new(body.boxed_unsync());
                *response.status_mut() = hyper::StatusCode::NOT_FOUND;
                Some(response)
            }
            Some(_) => {
                req.headers_mut().insert(
                    SESSION_ID,
                    hyper::header::HeaderValue::from_static(NO_SUCH_SESSION),
                );
                None
            }
            None => None,
        }
    }
}

/// One MCP session's entry in [`Owners`], made when its `initialize`
/// arrives, recorded once its id is known, and removed when dropped: with
/// the session's service, when the session ends.
struct Owner {
    owners: Arc<Owners>,
    subject: Option<Arc<str>>,
    id: OnceLock<Arc<str>>,
}

impl Owner {
    fn new(owners: &Arc<Owners>, subject: Option<Arc<str>>) -> Owner {
        Owner {
            owners: Arc::clone(owners),
            subject,
            id: OnceLock::new(),
        }
    }

    /// The session's id is `id`: from now on only its subject may use it.
    fn record(&self, id: &str) {
        let id: Arc<str> = Arc::from(id);
        if self.id.set(Arc::clone(&id)).is_ok() {
            self.owners.lock().insert(id, self.subject.clone());
        }
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        if let Some(id) = self.id.get() {
            self.owners.lock().remove(id);
        }
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
    /// It opens an MCP session (in session mode, an `initialize`); any
    /// other service made for it serves it on its own.
    session: bool,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn naming(method: &str, id: &str) -> hyper::Request<()> {
        hyper::Request::builder()
            .method(method)
            .header(SESSION_ID, id)
            .body(())
            .unwrap()
    }

    #[test]
    fn a_session_is_its_openers_until_its_record_is_dropped() {
        let owners = Arc::new(Owners::default());
        let alice = Arc::new(Owner::new(&owners, Some(Arc::from("alice"))));
        alice.record("s1");
        // Alice's requests pass as they are.
        for method in ["POST", "GET", "DELETE"] {
            let mut req = naming(method, "s1");
            assert!(owners.hide_others(&mut req, Some("alice")).is_none());
            assert_eq!(req.headers()[SESSION_ID], "s1");
        }
        // Bob's name no session, and his DELETE is not found.
        for method in ["POST", "GET"] {
            let mut req = naming(method, "s1");
            assert!(owners.hide_others(&mut req, Some("bob")).is_none());
            assert_eq!(req.headers()[SESSION_ID], NO_SUCH_SESSION);
        }
        let refused = owners.hide_others(&mut naming("DELETE", "s1"), Some("bob"));
        assert_eq!(
            refused.map(|r| r.status()),
            Some(hyper::StatusCode::NOT_FOUND)
        );
        // With authentication off, a session is everyone's who has none.
        let anonymous = Owner::new(&owners, None);
        anonymous.record("s2");
        assert!(
            owners
                .hide_others(&mut naming("DELETE", "s2"), None)
                .is_none()
        );
        assert!(
            owners
                .hide_others(&mut naming("DELETE", "s2"), Some("alice"))
                .is_some()
        );
        // An unknown session: rmcp answers; a DELETE is not found here.
        let mut req = naming("POST", "s3");
        assert!(owners.hide_others(&mut req, Some("bob")).is_none());
        assert_eq!(req.headers()[SESSION_ID], "s3");
        assert!(
            owners
                .hide_others(&mut naming("DELETE", "s3"), None)
                .is_some()
        );
        // The record goes with the session's service.
        drop((alice, anonymous));
        assert!(owners.lock().is_empty());
    }
}

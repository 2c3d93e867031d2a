//! Security: tokens the server does not know cannot starve token
//! introspection (issue 37, item 4).
//!
//! The attack, as the review reproduced it: against an OAuth server that
//! introspects opaque tokens (RFC 7662) at an issuer taking 1 s per answer,
//! one peer sends 96 made-up opaque tokens at once. Before, every one of them
//! was sent to the issuer (97 calls, 8 at a time, in one unbounded queue) and
//! a real user's token, new to the server, waited 12.6 s behind them.
//!
//! Now each peer may have only a few tokens not known yet introspected at
//! once (`OAuth::introspections_per_peer`, default 4 at once and 60 a
//! minute), and the requests to the issuer run behind a short FIFO queue
//! (`OAuth::introspection_queue`, default 8 at once, 32 waiting): the
//! flood's excess is refused at once (`401 invalid_token`) without the
//! issuer being asked, so the issuer sees a handful of calls and the real
//! user, from another address, waits one introspection. A token the server
//! already knows is answered from memory at once, even from the flooding
//! peer itself; a new token from that very peer is, during its own flood,
//! indistinguishable from the flood and shed with it.
//!
//! All of it runs on loopback: the attacker is `127.0.0.1`, the real user
//! `127.0.0.2` (another peer; Linux routes all of `127.0.0.0/8` to `lo`).
//! The issuer is a small one written here, whose introspection endpoint
//! takes [`SLOW`] per answer and counts its calls.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use haip::auth::OAuth;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::support::{self, get_json, within};

/// How long the issuer takes to answer one introspection.
const SLOW: Duration = Duration::from_secs(1);
/// The audience the issuer's active tokens name (the server accepts it).
const AUDIENCE: &str = "haip-security-oauth";
/// The real user's opaque token, which the issuer says is active.
const REAL: &str = "the-real-users-opaque-token";
/// Another active token, shown (and so known to the server) before the flood.
const KNOWN: &str = "a-token-the-server-already-knows";
/// The attacker's address, and the real user's.
const ATTACKER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const USER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
/// How many made-up tokens the attacker sends at once.
const FLOOD: usize = 96;
/// What one peer may have introspected at once (the default).
const PER_PEER: u64 = 4;
/// How long the flood's requests and the real user's may take before the
/// test fails: longer than [`support::WAIT`], so that a server that queues
/// the whole flood (12 s) is measured, and fails on its numbers.
const LONG: Duration = Duration::from_secs(30);

/// A public RSA key of the issuer's JWKS: haip needs one usable key before it
/// trusts the issuer's metadata (and so its introspection endpoint). No
/// token here is a JWT.
const RSA_N: &str = "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw";

/// An authorization server on loopback: RFC 8414 metadata, a JWKS, and an
/// introspection endpoint that takes [`SLOW`] per answer.
struct Issuer {
    /// Its issuer identifier, `http://127.0.0.1:<port>`.
    url: String,
    /// How many introspections it was asked for (counted as they arrive).
    calls: watch::Receiver<u64>,
    _server: tokio::task::JoinHandle<()>,
}

impl Issuer {
    async fn start() -> Issuer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (count, calls) = watch::channel(0u64);
        let count = Arc::new(count);
        let issuer = url.clone();
        let server = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let issuer = issuer.clone();
                let count = Arc::clone(&count);
                tokio::spawn(async move {
                    let service =
                        service_fn(move |req| answer(req, issuer.clone(), Arc::clone(&count)));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Issuer {
            url,
            calls,
            _server: server,
        }
    }

    fn calls(&self) -> u64 {
        *self.calls.borrow()
    }
}

/// What the issuer answers `req`.
async fn answer(
    req: Request<Incoming>,
    issuer: String,
    count: Arc<watch::Sender<u64>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = match (req.method().as_str(), req.uri().path()) {
        ("GET", "/.well-known/oauth-authorization-server") => json!({
            "issuer": issuer,
            "jwks_uri": format!("{issuer}/jwks"),
            "introspection_endpoint": format!("{issuer}/introspect"),
        }),
        ("GET", "/jwks") => json!({"keys": [
            {"kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256", "n": RSA_N, "e": "AQAB"}
        ]}),
        ("POST", "/introspect") => {
            count.send_modify(|n| *n += 1);
            let form = req.into_body().collect().await.map(|b| b.to_bytes());
            let form = String::from_utf8_lossy(form.as_deref().unwrap_or_default()).into_owned();
            let token = form
                .split('&')
                .find_map(|pair| pair.strip_prefix("token="))
                .unwrap_or_default()
                .to_owned();
            // The issuer's own latency, which is what the attack exploits
            // (not a synchronisation: nothing here waits for it to pass).
            tokio::time::sleep(SLOW).await;
            if token == REAL || token == KNOWN {
                json!({
                    "active": true,
                    "sub": if token == REAL { "the-real-user" } else { "a-known-user" },
                    "aud": AUDIENCE,
                    "iss": issuer,
                    "scope": "tools:read",
                    "exp": unix_now() + 3600,
                })
            } else {
                json!({"active": false})
            }
        }
        _ => {
            return Ok(Response::builder()
                .status(404)
                .body(Full::new(Bytes::new()))
                .unwrap());
        }
    };
    Ok(Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap())
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// One answer of `/mcp`: its status, `WWW-Authenticate`, and how long it
/// took.
#[derive(Debug)]
struct Answer {
    status: u16,
    challenge: String,
    took: Duration,
}

/// A `tools/list` to `/mcp` with `token`, over a new connection from the
/// address `from`.
async fn list_tools(from: IpAddr, addr: SocketAddr, token: &str) -> Answer {
    let started = Instant::now();
    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .bind(SocketAddr::new(from, 0))
        .unwrap_or_else(|e| panic!("cannot bind {from} (Linux routes 127/8 to lo): {e}"));
    let stream = socket.connect(addr).await.expect("connect to the server");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("HTTP handshake");
    tokio::spawn(connection);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let request = Request::post("/mcp")
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = sender.send_request(request).await.expect("an answer");
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    response.into_body().collect().await.expect("the body");
    Answer {
        status,
        challenge,
        took: started.elapsed(),
    }
}

/// The server's OAuth stats, read with `token`.
async fn oauth_stats(addr: SocketAddr, token: &str) -> Value {
    get_json(addr, &format!("/stats?token={token}")).await["oauth"].clone()
}

/// A server introspecting opaque tokens at `issuer`, and its address.
/// Stateless `/mcp`: each `tools/list` is one POST, no `initialize`.
async fn serve(issuer: &Issuer) -> (haip::ServerHandle, SocketAddr) {
    let server = support::builder()
        .mcp_sessions(false)
        .oauth(
            OAuth::issuer(&issuer.url)
                .audience(AUDIENCE)
                .introspection("haip", "haip-secret"),
        )
        .addr("127.0.0.1:0")
        .build()
        .expect("the OAuth server builds");
    let handle = within("the server to start", server.start())
        .await
        .expect("the OAuth server starts");
    let addr = handle.local_addr();
    (handle, addr)
}

/// (4, Medium) 96 made-up opaque tokens from one peer no longer cost the
/// issuer 96 introspections nor hold a real user's token 12 s: the peer's
/// share of introspections is a few at once, its excess is refused at once,
/// and the real user's token is checked in about one introspection's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unknown_tokens_neither_reaches_the_issuer_nor_delays_a_real_user() {
    let issuer = Issuer::start().await;
    let (_handle, addr) = serve(&issuer).await;

    // A token the server comes to know before the flood (this also settles
    // the issuer's metadata).
    let known = within(
        "the known token's first use",
        list_tools(ATTACKER, addr, KNOWN),
    )
    .await;
    assert_eq!(known.status, 200, "{known:?}");
    assert_eq!(issuer.calls(), 1);

    // The flood: 96 made-up opaque tokens from the attacker, all at once.
    let mut flood = JoinSet::new();
    for i in 0..FLOOD {
        flood.spawn(async move {
            let token = format!("made-up-opaque-token-{i}");
            tokio::time::timeout(LONG, list_tools(ATTACKER, addr, &token))
                .await
                .expect("a flood request is answered within 30 s")
        });
    }
    // Once the flood has reached the issuer, the real user, from another
    // address, shows its token, new to the server.
    let mut calls = issuer.calls.clone();
    within("the flood to reach the issuer", calls.wait_for(|n| *n > 1))
        .await
        .expect("the issuer runs");
    // Meanwhile the attacker's own known token, from memory, at once.
    let (user, again) = tokio::join!(
        tokio::time::timeout(LONG, list_tools(USER, addr, REAL)),
        within(
            "the known token during the flood",
            list_tools(ATTACKER, addr, KNOWN)
        ),
    );
    let user = user.expect("the real user is answered within 30 s");

    let mut answers = Vec::new();
    while let Some(answer) = tokio::time::timeout(LONG, flood.join_next())
        .await
        .expect("the flood is answered within 30 s")
    {
        answers.push(answer.expect("a flood request task"));
    }
    let flood_calls = issuer.calls() - 2; // the known token's, the user's
    let quick = answers.iter().filter(|a| a.took < SLOW).count();
    let slowest = answers.iter().map(|a| a.took).max().unwrap();
    eprintln!(
        "issuer calls for {FLOOD} made-up tokens: {flood_calls}; real user answered in {:?}; \
         known token in {:?}; {quick} of {FLOOD} refused in under {SLOW:?}, slowest {slowest:?}",
        user.took, again.took
    );

    assert_eq!(user.status, 200, "the real user's token is valid: {user:?}");
    assert!(
        user.took < Duration::from_secs(3),
        "the real user waited {:?}, not about one introspection ({SLOW:?})",
        user.took
    );
    assert_eq!(again.status, 200, "{again:?}");
    assert!(
        again.took < SLOW,
        "a known token waited {:?}, as if behind introspections",
        again.took
    );
    for answer in &answers {
        assert_eq!(answer.status, 401, "{answer:?}");
        assert!(
            answer.challenge.contains("error=\"invalid_token\""),
            "{answer:?}"
        );
    }
    // The peer's share (4 at once), with room for a slow machine whose
    // flood outlasts the first answers; never the whole flood.
    assert!(
        flood_calls <= 2 * PER_PEER,
        "the flood cost the issuer {flood_calls} introspections"
    );
    assert!(
        quick >= FLOOD - 2 * PER_PEER as usize,
        "only {quick} of the flood's {FLOOD} were refused before an introspection's time"
    );

    let stats = oauth_stats(addr, REAL).await;
    assert_eq!(stats["introspections"], issuer.calls(), "{stats}");
    assert!(
        stats["introspectionsShedPerPeer"].as_u64().unwrap() >= FLOOD as u64 - 2 * PER_PEER,
        "{stats}"
    );
    assert_eq!(
        stats["introspectionsShed"],
        stats["introspectionsShedPerPeer"]
    );
    assert_eq!(stats["introspecting"], 0, "{stats}");
    assert_eq!(stats["introspectionsWaiting"], 0, "{stats}");
    support::security_row(
        4,
        &format!(
            "{FLOOD} made-up opaque tokens at once from one peer against an issuer whose introspection takes {SLOW:?}"
        ),
        &format!(
            "beyond the peer's budget (4 at once): `401 invalid_token` without asking the issuer; {flood_calls} of {FLOOD} reached it (before: {FLOOD})"
        ),
        "a real user's new token from another address (one introspection)",
        Some(known.took),
        Some(user.took),
    );
}

/// The same bad token costs one introspection: shown by several requests at
/// once, it is asked about once (and none of them counts twice against the
/// peer); shown again, its refusal is remembered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_bad_token_costs_one_introspection() {
    let issuer = Issuer::start().await;
    let (_handle, addr) = serve(&issuer).await;

    // More at once than the peer's share: they share one introspection.
    let mut together = JoinSet::new();
    for _ in 0..3 * PER_PEER {
        together.spawn(async move {
            within(
                "a bad token",
                list_tools(ATTACKER, addr, "the-same-bad-token"),
            )
            .await
        });
    }
    while let Some(answer) = within("the answers", together.join_next()).await {
        let answer = answer.expect("a request task");
        assert_eq!(answer.status, 401, "{answer:?}");
    }
    let after_together = issuer.calls();
    assert_eq!(
        after_together,
        1,
        "introspections for one token shown {} times at once",
        3 * PER_PEER
    );
    // Remembered: answered without the issuer, before it could answer.
    for _ in 0..5 {
        let answer = within(
            "the bad token again",
            list_tools(ATTACKER, addr, "the-same-bad-token"),
        )
        .await;
        assert_eq!(answer.status, 401, "{answer:?}");
        assert!(answer.took < SLOW, "{answer:?}");
    }
    assert_eq!(issuer.calls(), after_together);

    let valid = within("a valid token", list_tools(USER, addr, REAL)).await;
    assert_eq!(valid.status, 200, "{valid:?}");
    let stats = oauth_stats(addr, REAL).await;
    assert_eq!(stats["introspectionsShed"], 0, "{stats}");
    assert_eq!(stats["refusedTokens"], 1, "{stats}");
    assert_eq!(stats["cachedTokens"], 1, "{stats}");
}

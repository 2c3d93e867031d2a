//! Authentication over every transport (docs/protocol.md §17): token sources, every
//! refusal code on WebSocket (ERROR + close 1008, no HAI) and HTTP (401 +
//! `WWW-Authenticate`), the subject seen by tools and owning sessions,
//! `/health` and `/stats`, unsafe binding, custom authenticators, RS256/ES256.

use crate::conn;
use crate::support;

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use conn::{Conn, Item, Kind, Refused, assert_ok, http, per_transport, post};
use haip::ServerBuilder;
use haip::auth::{AuthError, AuthFuture, Authenticator};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};
use support::{HttpResponse, builder, get_json, start, whoami};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

per_transport!(
    valid_token_is_accepted,
    bad_tokens_are_refused,
    subject_reaches_tools,
);

const SECRET: &str = "test-secret-of-at-least-32-bytes-long";
const AUDIENCE: &str = "haip-tests";

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs() as i64
}

fn sign(alg: Algorithm, key: &EncodingKey, claims: &Value) -> String {
    encode(&Header::new(alg), claims, key).expect("the token encodes")
}

fn hs256(secret: &str, claims: &Value) -> String {
    let key = EncodingKey::from_secret(secret.as_bytes()).expect("a non-empty secret");
    sign(Algorithm::HS256, &key, claims)
}

/// A valid token of `sub` for the server of [`jwt_builder`].
fn token(sub: &str) -> String {
    hs256(
        SECRET,
        &json!({"sub": sub, "aud": AUDIENCE, "exp": now() + 300}),
    )
}

fn base64url(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, &b| n << 8 | u32::from(b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(char::from(ABC[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

/// An unsigned token: header `{"alg":"none","typ":"JWT"}`, empty signature.
fn alg_none(claims: &Value) -> String {
    let header = base64url(br#"{"alg":"none","typ":"JWT"}"#);
    format!("{header}.{}.", base64url(claims.to_string().as_bytes()))
}

/// HS256 with [`SECRET`] and audience [`AUDIENCE`], serving [`whoami`].
fn jwt_builder() -> ServerBuilder {
    builder()
        .jwt_hs256(SECRET)
        .jwt_audience(AUDIENCE)
        .tool(whoami())
}

/// The refusal must be the §17 one for `code`/`message` on this transport.
fn assert_refused(refused: Result<Conn, Refused>, code: &str, message: &str, what: &str) {
    match refused {
        Ok(conn) => panic!("{what}: accepted ({:?}), HAI {}", conn.kind, conn.hai),
        Err(Refused::Ws { error, end }) => {
            // `Conn` checked the envelope shape and seq "1"; no HAI came first.
            assert_eq!(
                (&error["type"], &error["channel"], &error["seq"]),
                (&json!("ERROR"), &json!("SYSTEM"), &json!("1")),
                "{what}: {error}"
            );
            assert_eq!(
                error["payload"],
                json!({"code": code, "message": message}),
                "{what}"
            );
            assert_eq!(
                end,
                Item::Closed(Some((1008, message.to_owned()))),
                "{what}"
            );
        }
        Err(Refused::Http(response)) => assert_unauthorized(&response, code, message, what),
    }
}

fn assert_unauthorized(response: &HttpResponse, code: &str, message: &str, what: &str) {
    assert_eq!(response.status, 401, "{what}: {response:?}");
    assert_eq!(response.header("content-type"), Some("application/json"));
    let challenge = if code == "MISSING_TOKEN" {
        "Bearer"
    } else {
        "Bearer error=\"invalid_token\""
    };
    assert_eq!(
        response.header("www-authenticate"),
        Some(challenge),
        "{what}: {response:?}"
    );
    assert_eq!(
        response.json(),
        json!({"error": message, "code": code}),
        "{what}"
    );
}

/// An upstream POST carrying `token` to the transport's upstream path.
async fn upstream(
    kind: Kind,
    addr: SocketAddr,
    token: Option<&str>,
    session: &str,
) -> HttpResponse {
    let body = json!({"type": "PING", "payload": {"nonce": "up"}}).to_string();
    let (path, headers) = match kind {
        Kind::Stream => ("/haip/stream", vec![("x-haip-message", "true")]),
        _ => ("/haip/message", vec![]),
    };
    let mut headers = headers;
    headers.push(("x-haip-session", session));
    post(addr, path, token, &headers, &body).await
}

/// A valid Bearer token opens the connection; upstream POSTs with it reach
/// the session, without it they are refused (401).
async fn valid_token_is_accepted(kind: Kind) {
    let (handle, _) = start(jwt_builder()).await;
    let addr = handle.local_addr();
    // Within the 60 s leeway: expired 30 s ago, not before / issued 30 s ahead.
    let lenient = json!({"sub": "a", "aud": AUDIENCE, "exp": now() - 30, "nbf": now() + 30, "iat": now() + 30});
    Conn::connect(kind, addr, Some(&hs256(SECRET, &lenient)))
        .await
        .ping_marker()
        .await;
    let token = token("alice");
    let mut conn = Conn::connect(kind, addr, Some(&token)).await;
    conn.ping_marker().await;
    if kind != Kind::Ws {
        let response = upstream(kind, addr, None, &conn.session).await;
        assert_unauthorized(
            &response,
            "MISSING_TOKEN",
            "Missing token",
            "POST without a token",
        );
        assert_ok(&upstream(kind, addr, Some(&token), &conn.session).await);
        assert_eq!(conn.recv().await["payload"], json!({"nonce": "up"}));
    }
    conn.ping_marker().await;
}

/// Each bad token is refused with its code, on connect and on upstream POSTs;
/// no session is created or counted.
async fn bad_tokens_are_refused(kind: Kind) {
    let (handle, _) = start(jwt_builder()).await;
    let addr = handle.local_addr();
    let valid = json!({"sub": "alice", "aud": AUDIENCE, "exp": now() + 300});
    let expired = json!({"sub": "alice", "aud": AUDIENCE, "exp": now() - 120});
    let other_aud = json!({"sub": "alice", "aud": "someone-else", "exp": now() + 300});
    let no_aud = json!({"sub": "alice", "exp": now() + 300});
    let no_exp = json!({"sub": "alice", "aud": AUDIENCE});
    let no_subject = json!({"aud": AUDIENCE, "exp": now() + 300});
    let future_nbf = json!({"sub": "a", "aud": AUDIENCE, "exp": now() + 900, "nbf": now() + 300});
    let future_iat = json!({"sub": "a", "aud": AUDIENCE, "exp": now() + 900, "iat": now() + 300});
    let invalid = ("INVALID_TOKEN", "Invalid token");
    let hs_key = EncodingKey::from_secret(SECRET.as_bytes()).unwrap();
    let cases = [
        ("missing", None, ("MISSING_TOKEN", "Missing token")),
        (
            "wrong signature",
            Some(hs256("wrong-secret", &valid)),
            invalid,
        ),
        ("alg none", Some(alg_none(&valid)), invalid),
        (
            "HS512",
            Some(sign(Algorithm::HS512, &hs_key, &valid)),
            invalid,
        ),
        (
            "expired",
            Some(hs256(SECRET, &expired)),
            ("TOKEN_EXPIRED", "Token expired"),
        ),
        ("wrong audience", Some(hs256(SECRET, &other_aud)), invalid),
        ("no audience", Some(hs256(SECRET, &no_aud)), invalid),
        ("no exp", Some(hs256(SECRET, &no_exp)), invalid),
        ("no subject", Some(hs256(SECRET, &no_subject)), invalid),
        ("nbf ahead", Some(hs256(SECRET, &future_nbf)), invalid),
        ("iat ahead", Some(hs256(SECRET, &future_iat)), invalid),
        ("not a JWT", Some("not-a-jwt".to_owned()), invalid),
    ];
    for (what, token, (code, message)) in &cases {
        let refused = Conn::open(kind, addr, token.as_deref()).await;
        assert_refused(refused, code, message, &format!("{kind:?} {what}"));
    }
    if kind != Kind::Ws {
        let valid = token("alice");
        let conn = Conn::connect(kind, addr, Some(&valid)).await;
        for (what, token, (code, message)) in &cases {
            let response = upstream(kind, addr, token.as_deref(), &conn.session).await;
            assert_unauthorized(&response, code, message, &format!("upstream {what}"));
        }
        drop(conn);
    }
    let stats = stats(addr).await;
    assert_eq!(
        stats["totalConnections"],
        if kind == Kind::Ws { 0 } else { 1 },
        "refused connections are not counted: {stats}"
    );
}

async fn stats(addr: SocketAddr) -> Value {
    let bearer = format!("Bearer {}", token("stats-reader"));
    let response = http(addr, "GET", "/stats", &[("authorization", &bearer)], "").await;
    assert_eq!(response.status, 200, "{response:?}");
    response.json()
}

/// Tools see the verified subject: the token's `sub`, else its `userId`.
async fn subject_reaches_tools(kind: Kind) {
    let (handle, _) = start(jwt_builder()).await;
    let addr = handle.local_addr();
    let by_user_id = hs256(
        SECRET,
        &json!({"userId": "u-42", "aud": AUDIENCE, "exp": now() + 300}),
    );
    for (token, subject) in [(token("alice"), "alice"), (by_user_id, "u-42")] {
        let mut conn = Conn::connect(kind, addr, Some(&token)).await;
        let done = conn.call_done("w1", "whoami", json!({})).await;
        assert_eq!(
            done["result"],
            json!({ "subject": subject }),
            "{kind:?} {done}"
        );
    }
}

/// All three token sources open a WebSocket; with `token.<JWT>` and `haip`
/// offered the server selects `haip`, with only `token.<JWT>` that entry.
#[tokio::test]
async fn websocket_token_sources() {
    let (handle, _) = start(jwt_builder()).await;
    let addr = handle.local_addr();
    let jwt = token("alice");
    let query = format!("ws://{addr}/haip?token={jwt}")
        .into_client_request()
        .unwrap();
    let mut conn = Conn::open_ws(addr, query).await.expect("?token= accepted");
    conn.ping_marker().await;
    for (offered, selected) in [
        (format!("haip, token.{jwt}"), "haip".to_owned()),
        (format!("token.{jwt}"), format!("token.{jwt}")),
    ] {
        let mut request = format!("ws://{addr}/haip").into_client_request().unwrap();
        let value = offered.parse().unwrap();
        request
            .headers_mut()
            .insert("sec-websocket-protocol", value);
        let mut conn = Conn::open_ws(addr, request)
            .await
            .unwrap_or_else(|r| panic!("subprotocol {offered}: refused {r:?}"));
        assert_eq!(
            conn.header("sec-websocket-protocol"),
            Some(selected.as_str())
        );
        let done = conn.call_done("w1", "whoami", json!({})).await;
        assert_eq!(done["result"], json!({"subject": "alice"}));
    }
    // A bad query token is refused like a bad header token.
    let bad = format!("ws://{addr}/haip?token=nope")
        .into_client_request()
        .unwrap();
    assert_refused(
        Conn::open_ws(addr, bad).await,
        "INVALID_TOKEN",
        "Invalid token",
        "?token=nope",
    );
    // First present source wins: Bearer, then the query, then the subprotocol.
    for (bearer, query, protocol, accepted) in [
        (
            jwt.clone(),
            "nope".to_owned(),
            "token.nope".to_owned(),
            true,
        ),
        ("nope".to_owned(), jwt.clone(), "haip".to_owned(), false),
        (String::new(), jwt.clone(), "token.nope".to_owned(), true),
        (String::new(), String::new(), format!("token.{jwt}"), true),
    ] {
        let url = format!("ws://{addr}/haip?token={query}");
        let mut request = url.into_client_request().unwrap();
        let headers = request.headers_mut();
        if !bearer.is_empty() {
            headers.insert("authorization", format!("Bearer {bearer}").parse().unwrap());
        }
        headers.insert(
            "sec-websocket-protocol",
            format!("haip, {protocol}").parse().unwrap(),
        );
        let what = format!("bearer {bearer:.8} query {query:.8} protocol {protocol:.14}");
        match Conn::open_ws(addr, request).await {
            Ok(mut conn) if accepted => conn.ping_marker().await,
            result if !accepted => assert_refused(result, "INVALID_TOKEN", "Invalid token", &what),
            Ok(_) => unreachable!(),
            Err(refused) => panic!("{what}: refused {refused:?}"),
        }
    }
}

/// §16, §17: `/health` never needs a token; `/stats` does.
#[tokio::test]
async fn health_is_open_and_stats_needs_a_token() {
    let (handle, _) = start(jwt_builder()).await;
    let addr = handle.local_addr();
    assert_eq!(get_json(addr, "/health").await["status"], "ok");
    let missing = http(addr, "GET", "/stats", &[], "").await;
    assert_unauthorized(
        &missing,
        "MISSING_TOKEN",
        "Missing token",
        "/stats without a token",
    );
    let bad = http(
        addr,
        "GET",
        "/stats",
        &[("authorization", "Bearer nope")],
        "",
    )
    .await;
    assert_unauthorized(
        &bad,
        "INVALID_TOKEN",
        "Invalid token",
        "/stats with a bad token",
    );
    let by_query = http(
        addr,
        "GET",
        &format!("/stats?token={}", token("a")),
        &[],
        "",
    )
    .await;
    assert_eq!(by_query.status, 200, "{by_query:?}");
    assert!(stats(addr).await["toolExecutions"].is_object());
}

/// §17: a session belongs to its subject; another subject's upstream POST
/// never reaches it, whatever it names.
#[tokio::test]
async fn upstream_post_cannot_reach_another_subjects_session() {
    let (handle, _) = start(jwt_builder()).await;
    let addr = handle.local_addr();
    let (alice, bob) = (token("alice"), token("bob"));
    let mut a = Conn::connect(Kind::Sse, addr, Some(&alice)).await;
    let ping = |nonce: &str| json!({"type": "PING", "payload": {"nonce": nonce}});
    let named = [("x-haip-session", a.session.as_str())];
    let not_found = json!({"error": "Session not found", "code": "SESSION_NOT_FOUND"});
    let by_header = post(
        addr,
        "/haip/message",
        Some(&bob),
        &named,
        &ping("b").to_string(),
    )
    .await;
    assert_eq!(
        (by_header.status, by_header.json()),
        (404, not_found.clone())
    );
    let mut in_envelope = ping("b");
    in_envelope["session"] = json!(a.session);
    let by_envelope = post(
        addr,
        "/haip/message",
        Some(&bob),
        &[],
        &in_envelope.to_string(),
    )
    .await;
    assert_eq!(
        (by_envelope.status, by_envelope.json()),
        (404, not_found.clone())
    );
    let by_query = format!("/haip/sse?session={}", a.session);
    let by_query = post(addr, &by_query, Some(&bob), &[], &ping("b").to_string()).await;
    assert_eq!((by_query.status, by_query.json()), (404, not_found));
    // With a session of his own, bob's POST naming alice's lands in his own.
    let mut b = Conn::connect(Kind::Sse, addr, Some(&bob)).await;
    assert_ok(
        &post(
            addr,
            "/haip/message",
            Some(&bob),
            &named,
            &ping("mine").to_string(),
        )
        .await,
    );
    assert_eq!(b.recv().await["payload"], json!({"nonce": "mine"}));
    // Alice's untargeted POST reaches her only session.
    assert_ok(
        &post(
            addr,
            "/haip/message",
            Some(&alice),
            &[],
            &ping("a").to_string(),
        )
        .await,
    );
    assert_eq!(a.recv().await["payload"], json!({"nonce": "a"}));
    a.ping_marker().await;
    b.ping_marker().await;
}

/// §17: a non-loopback address without auth is refused at start, unless
/// allowed explicitly or authentication is on. (Bound, never connected to.)
#[tokio::test]
async fn non_loopback_start_needs_auth_or_opt_in() {
    let refused = builder().addr("0.0.0.0:0").build().unwrap().start().await;
    match refused {
        Err(haip::Error::UnauthenticatedBind { addr }) => assert_eq!(addr, "0.0.0.0:0"),
        Err(other) => panic!("expected UnauthenticatedBind, got {other:?}"),
        Ok(handle) => {
            handle.shutdown().await;
            panic!("a non-loopback server without auth started");
        }
    }
    for allowed in [
        builder().addr("0.0.0.0:0").allow_unauthenticated(true),
        builder().addr("0.0.0.0:0").jwt_hs256(SECRET),
    ] {
        let handle = allowed
            .build()
            .unwrap()
            .start()
            .await
            .expect("start is allowed");
        assert!(handle.local_addr().ip().is_unspecified());
        handle.shutdown().await;
    }
}

/// Accepts the token `letmein` as subject `custom`.
struct LetMeIn;

impl Authenticator for LetMeIn {
    fn authenticate<'a>(&'a self, token: Option<&'a str>) -> AuthFuture<'a> {
        Box::pin(async move {
            match token {
                None => Err(AuthError::missing_token()),
                Some("letmein") => Ok("custom".to_owned()),
                Some(_) => Err(AuthError::invalid_token("not letmein")),
            }
        })
    }
}

/// A custom [`Authenticator`] decides on every transport; its subject reaches tools.
#[tokio::test]
async fn custom_authenticator_decides() {
    let (handle, _) = start(builder().authenticator(LetMeIn).tool(whoami())).await;
    let addr = handle.local_addr();
    for kind in [Kind::Ws, Kind::Sse, Kind::Stream] {
        let mut conn = Conn::connect(kind, addr, Some("letmein")).await;
        let done = conn.call_done("w1", "whoami", json!({})).await;
        assert_eq!(done["result"], json!({"subject": "custom"}), "{kind:?}");
        let wrong = Conn::open(kind, addr, Some("nope")).await;
        assert_refused(
            wrong,
            "INVALID_TOKEN",
            "Invalid token",
            &format!("{kind:?} nope"),
        );
        let missing = Conn::open(kind, addr, None).await;
        assert_refused(
            missing,
            "MISSING_TOKEN",
            "Missing token",
            &format!("{kind:?} none"),
        );
    }
}

/// RS256 and ES256 public keys: a token signed with the private half is
/// accepted; another algorithm (HS256 keyed with the public PEM, or the other
/// key type) is `INVALID_TOKEN`.
#[tokio::test]
async fn public_key_algorithms() {
    const RSA_PUBLIC: &str = include_str!("../../haip/tests/fixtures/rsa_public.pem");
    const RSA_PRIVATE: &str = include_str!("../../haip/tests/fixtures/rsa_private.pem");
    const EC_PUBLIC: &str = include_str!("../../haip/tests/fixtures/ec_p256_public.pem");
    const EC_PRIVATE: &str = include_str!("../../haip/tests/fixtures/ec_p256_private.pem");
    let claims = json!({"sub": "pk-user", "exp": now() + 300});
    let rsa = EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap();
    let ec = EncodingKey::from_ec_pem(EC_PRIVATE.as_bytes()).unwrap();
    let rs256 = sign(Algorithm::RS256, &rsa, &claims);
    let es256 = sign(Algorithm::ES256, &ec, &claims);
    for (public, good, others) in [
        (RSA_PUBLIC, &rs256, [&es256, &hs256(RSA_PUBLIC, &claims)]),
        (EC_PUBLIC, &es256, [&rs256, &hs256(EC_PUBLIC, &claims)]),
    ] {
        let (handle, _) = start(builder().jwt_public_key(public).tool(whoami())).await;
        let addr = handle.local_addr();
        for kind in [Kind::Ws, Kind::Sse] {
            let mut conn = Conn::connect(kind, addr, Some(good)).await;
            let done = conn.call_done("w1", "whoami", json!({})).await;
            assert_eq!(done["result"], json!({"subject": "pk-user"}));
            for other in others {
                let refused = Conn::open(kind, addr, Some(other)).await;
                assert_refused(refused, "INVALID_TOKEN", "Invalid token", "wrong algorithm");
            }
        }
    }
}

/// A configured issuer must match `iss`.
#[tokio::test]
async fn issuer_is_checked() {
    let (handle, _) = start(
        builder()
            .jwt_hs256(SECRET)
            .jwt_issuer("https://issuer.test"),
    )
    .await;
    let addr = handle.local_addr();
    let good = hs256(
        SECRET,
        &json!({"sub": "i", "iss": "https://issuer.test", "exp": now() + 300}),
    );
    let bad = hs256(
        SECRET,
        &json!({"sub": "i", "iss": "https://other.test", "exp": now() + 300}),
    );
    let none = hs256(SECRET, &json!({"sub": "i", "exp": now() + 300}));
    for kind in [Kind::Ws, Kind::Stream] {
        Conn::connect(kind, addr, Some(&good))
            .await
            .ping_marker()
            .await;
        for token in [&bad, &none] {
            let refused = Conn::open(kind, addr, Some(token)).await;
            assert_refused(refused, "INVALID_TOKEN", "Invalid token", "issuer");
        }
    }
}

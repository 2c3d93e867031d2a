//! Security: `Cache` keyed on the whole authorization, and `RateLimit` never locking out new callers.
//!
//! Issue 37, items 3 and 7, through the real wire (a server on
//! `127.0.0.1:0`, real clients):
//!
//! - An idempotent tool behind `Cache` that answers with what it sees of its
//!   caller (scopes, a tenant claim) gives each authorization its own result:
//!   the same subject with fewer scopes, or with another tenant, never gets
//!   the result computed for the other token; the same authorization again,
//!   in a new token (new `jti`, `iat`, `exp`), over HAIP or MCP, is answered
//!   from the cache.
//! - `RateLimit`'s table of callers stays bounded: while it is full of
//!   callers whose buckets are partly used, a new caller is refused with a
//!   message saying so and a retry hint that holds; callers it holds are
//!   still served from their own buckets; and once the old buckets have
//!   refilled (even after a thousand checks of a full table), a brand-new
//!   caller is served at once.

use crate::mcp_http::mcp_request;
use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use haip::auth::{AuthError, AuthFuture, Authenticator};
use haip::layer::{Cache, RateLimit};
use haip::{Context, Tool, ToolAnnotations, ToolError};
use serde_json::{Value, json};
use support::{Client, builder, within};

/// An HS256 secret of at least 32 bytes.
const SECRET: &str = "security-layers: a secret of well over 32 bytes";

/// A token of `sub` granting `scope` (space-separated), with a `tenant`
/// claim; `n` makes its `jti`, `iat` and `exp` its own.
fn token(sub: &str, scope: &str, tenant: &str, n: u64) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs();
    let claims = json!({
        "sub": sub,
        "scope": scope,
        "tenant": tenant,
        "jti": format!("token-{n}"),
        "iat": now - n,
        "exp": now + 300 + n,
    });
    let key = EncodingKey::from_secret(SECRET.as_bytes()).expect("a non-empty secret");
    encode(&Header::new(Algorithm::HS256), &claims, &key).expect("the token encodes")
}

/// `profile`, idempotent: what it sees of its caller, and which run this is.
fn profile(runs: &Arc<AtomicUsize>) -> Tool {
    let runs = Arc::clone(runs);
    Tool::builder("profile")
        .description("What the tool sees of its caller.")
        .annotations(ToolAnnotations::new().idempotent(true))
        .handler(move |_: Value, ctx: Context| {
            let run = runs.fetch_add(1, SeqCst) + 1;
            async move {
                let caller = ctx.caller().expect("authentication is on");
                Ok::<_, ToolError>(json!({
                    "subject": caller.subject(),
                    "scopes": caller.scopes(),
                    "tenant": caller.claim("tenant"),
                    "run": run,
                }))
            }
        })
        .build()
        .expect("profile builds")
}

/// One `profile` call over HAIP on a connection of its own, opened with `token`.
async fn profile_over_haip(url: &str, token: &str) -> Value {
    let mut client = Client::connect(&format!("{url}?token={token}")).await;
    let done = client.call_done("p", "profile", json!({})).await;
    client.close().await;
    assert_eq!(done["status"], "OK", "{done}");
    done["result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_keys_results_on_the_whole_authorization() {
    let runs = Arc::new(AtomicUsize::new(0));
    let cache = Cache::new(1 << 20);
    let builder = builder()
        .jwt_hs256(SECRET)
        .tool(profile(&runs))
        .layer(cache.clone())
        // Stateless `/mcp`: the MCP call is one POST, no `initialize`.
        .mcp_sessions(false);
    let (handle, url) = support::start(builder).await;
    let addr = handle.local_addr();

    let privileged = profile_over_haip(&url, &token("alice", "a b", "acme", 1)).await;
    assert_eq!(
        privileged,
        json!({"subject": "alice", "scopes": ["a", "b"], "tenant": "acme", "run": 1})
    );
    // The same subject with fewer scopes: its own result, not the privileged one.
    let fewer = profile_over_haip(&url, &token("alice", "a", "acme", 2)).await;
    assert_eq!(
        fewer,
        json!({"subject": "alice", "scopes": ["a"], "tenant": "acme", "run": 2}),
        "a token with fewer scopes got another token's result"
    );
    // Another tenant: its own result too.
    let other = profile_over_haip(&url, &token("alice", "a b", "globex", 3)).await;
    assert_eq!(
        other,
        json!({"subject": "alice", "scopes": ["a", "b"], "tenant": "globex", "run": 3}),
        "a token of another tenant got another token's result"
    );
    assert_eq!(runs.load(SeqCst), 3);

    // The same authorization in a new token (its own jti, iat, exp): cached.
    let again = profile_over_haip(&url, &token("alice", "a b", "acme", 4)).await;
    assert_eq!(
        again, privileged,
        "the same authorization is answered again"
    );
    // Over MCP too: one cache for both protocols.
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "profile", "arguments": {}}
    });
    let auth = format!("Bearer {}", token("alice", "a", "acme", 5));
    let reply = mcp_request(addr, "POST", Some(&body), &[("authorization", &auth)]).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let result = reply.response()["result"].clone();
    assert_eq!(result["isError"], false, "{result}");
    let text = result["content"][0]["text"].as_str().expect("a text block");
    let value: Value = serde_json::from_str(text).expect("the result as JSON");
    assert_eq!(value, fewer, "{result}");
    assert_eq!(runs.load(SeqCst), 3, "the tool ran once per authorization");
    assert_eq!((cache.hits(), cache.misses()), (2, 3));
    support::security_row(
        3,
        "The same subject with fewer scopes, or another tenant claim, calls a tool behind `Cache` after a more privileged token",
        "nothing: each authorization gets the result computed for it (the key holds subject, scopes and claims)",
        "—",
        None,
        None,
    );
    handle.shutdown().await;
}

/// Token `user-X` is subject `X`.
struct Users;

impl Authenticator for Users {
    fn authenticate<'a>(&'a self, token: Option<&'a str>) -> AuthFuture<'a> {
        Box::pin(async move {
            match token.and_then(|t| t.strip_prefix("user-")) {
                Some(subject) => Ok(subject.to_owned()),
                None => Err(AuthError::invalid_token("not a user-")),
            }
        })
    }
}

fn ping() -> Tool {
    Tool::builder("ping")
        .description("Answers pong.")
        .handler(|_: Value, _: Context| async move { Ok::<_, ToolError>(json!("pong")) })
        .build()
        .expect("ping builds")
}

async fn user(url: &str, subject: &str) -> Client {
    Client::connect(&format!("{url}?token=user-{subject}")).await
}

/// One `ping` by `subject` on a connection of its own: its `TOOL_DONE` payload.
async fn ping_as(url: &str, subject: &str) -> Value {
    let mut client = user(url, subject).await;
    let done = client.call_done("p", "ping", json!({})).await;
    client.close().await;
    done
}

fn retry_after(done: &Value) -> u64 {
    done["result"]["details"]["retry_after_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("no retry hint: {done}"))
}

/// Whether `done` is the refusal of a caller the full table cannot hold.
fn refused_as_full(done: &Value) -> bool {
    done["status"] == "ERROR"
        && done["result"]["code"] == "RATE_LIMITED"
        && done["result"]["details"]["reason"] == "too_many_callers"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_full_of_partly_used_buckets_refuses_new_callers_saying_when_to_retry() {
    // Two calls an hour, four callers: each spends one, so none refills
    // during the test.
    let limit = RateLimit::per_subject(2, Duration::from_secs(3600)).max_subjects(4);
    let (handle, url) =
        support::start(builder().authenticator(Users).tool(ping()).layer(limit)).await;
    for i in 0..4 {
        let done = ping_as(&url, &format!("s{i}")).await;
        assert_eq!(done["status"], "OK", "{done}");
    }
    let done = ping_as(&url, "newcomer").await;
    assert!(refused_as_full(&done), "a fifth caller is refused: {done}");
    let message = done["result"]["error"].as_str().unwrap_or_default();
    assert!(
        message.contains("4 callers") && message.contains("new caller"),
        "the refusal says what happened: {done}"
    );
    assert_eq!(done["result"]["details"]["max_subjects"], 4, "{done}");
    // The first bucket refills one call (30 minutes) after it was used.
    let wait = retry_after(&done);
    assert!(
        (1_790_000..=1_800_000).contains(&wait),
        "retry when the first bucket is full again: {wait}"
    );
    assert!(
        message.contains(&format!("{wait} ms")),
        "the message says when: {done}"
    );
    // The callers it holds are still served from their own buckets.
    let done = ping_as(&url, "s0").await;
    assert_eq!(done["status"], "OK", "{done}");
    let done = ping_as(&url, "s0").await;
    assert_eq!(done["result"]["code"], "RATE_LIMITED", "{done}");
    assert!(!refused_as_full(&done), "s0's own bucket is empty: {done}");
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_serves_a_new_caller_once_old_buckets_have_refilled() {
    const PERIOD: Duration = Duration::from_secs(1);
    // One call a second per caller, at most 8 callers held.
    let limit = RateLimit::per_subject(1, PERIOD).max_subjects(8);
    let (handle, url) =
        support::start(builder().authenticator(Users).tool(ping()).layer(limit)).await;

    // 12 callers use their bucket: beyond the 8th, those the table cannot
    // hold are refused (unless the first buckets have refilled already).
    let (before, first) = support::timed(ping_as(&url, "first")).await;
    assert_eq!(first["status"], "OK", "{first}");
    let mut last_served = Instant::now();
    for i in 0..12 {
        let done = ping_as(&url, &format!("s{i}")).await;
        if done["status"] == "OK" {
            last_served = Instant::now();
        } else {
            assert!(refused_as_full(&done), "{done}");
            assert!(retry_after(&done) <= 1000, "{done}");
        }
    }
    // A caller the table holds checks a thousand times more: its own bucket
    // answers.
    let mut s0 = user(&url, "s0").await;
    for batch in 0..8 {
        for i in 0..128 {
            s0.call(&format!("b{batch}-{i}"), "ping", json!({})).await;
        }
        for _ in 0..128 {
            let env = s0.recv().await;
            assert_eq!(env["type"], "TOOL_DONE", "{env}");
            let done = &env["payload"];
            if done["status"] == "OK" {
                last_served = Instant::now();
            } else {
                assert_eq!(done["result"]["code"], "RATE_LIMITED", "{env}");
                assert!(!refused_as_full(done), "s0 is held: {env}");
            }
        }
    }
    s0.close().await;

    // A new caller refused now is told when to come back, and is served then.
    let done = ping_as(&url, "early").await;
    if done["status"] != "OK" {
        assert!(refused_as_full(&done), "{done}");
        let wait = retry_after(&done);
        assert!(
            wait <= 1000,
            "an old bucket refills within a second: {done}"
        );
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let done = ping_as(&url, "early").await;
        assert_eq!(
            done["status"], "OK",
            "served at the time the hint gave: {done}"
        );
        last_served = Instant::now();
    }

    // Every bucket has refilled one period after the last call it let
    // through: a brand-new caller is served at once.
    within(
        "the buckets to refill",
        tokio::time::sleep_until((last_served + PERIOD + Duration::from_millis(50)).into()),
    )
    .await;
    let mut during = None;
    for fresh in ["fresh-1", "fresh-2", "fresh-3"] {
        let (took, done) = support::timed(ping_as(&url, fresh)).await;
        during.get_or_insert(took);
        assert_eq!(
            done["status"], "OK",
            "a new caller after the refill: {done}"
        );
    }
    support::security_row(
        7,
        "More callers than `RateLimit::max_subjects` use a little of their buckets (shown with 8 and 12 callers, one of them checking 1 024 times)",
        "while the table is truly full of partly used buckets: only a new caller, `RATE_LIMITED` with `reason: too_many_callers` and the time to retry; held callers keep their own buckets",
        "a brand-new subject once the old buckets refilled (connect and call)",
        Some(before),
        during,
    );
    handle.shutdown().await;
}

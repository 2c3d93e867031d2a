//! haip as an OAuth 2.1 resource server (docs/protocol.md §17.1), against a real
//! authorization server: `oidc-provider` (tests/oauth/provider.mjs, on
//! loopback), with real tokens from its token endpoint.
//!
//! - The protected resource metadata is served, public; `401`s name it
//!   (`WWW-Authenticate: Bearer resource_metadata=…`) and so do WebSocket
//!   refusals.
//! - Tokens call tools over HAIP and MCP; each caller lists only the tools
//!   its scopes allow, and a call without a tool's scopes is refused:
//!   `TOOL_DONE ERROR FORBIDDEN` with `details {required, missing}` on HAIP,
//!   `403` with `error="insufficient_scope"` and every missing scope on MCP.
//! - Refused, each with its reason: a token for another audience, from
//!   another issuer, signed with a key the issuer does not publish, with `alg`
//!   switched to HS256 (the public key as the secret) or `none`, expired.
//! - 10 000 tokens naming random `kid`s cost at most the per-minute budget
//!   of JWKS refetches, and the server keeps only the issuer's keys.
//! - A key the issuer rotates in and signs with at once passes on its first
//!   token (the keys are fetched again at once, not after an interval);
//!   requests naming it together share one fetch; a flood of unknown `kid`s
//!   costs at most the budget.
//! - Keys rotated at the issuer are fetched when a token names the new one;
//!   the cached keys go on serving while the issuer is down.
//! - Opaque tokens are introspected once and remembered; the memory of
//!   answers is bounded.
//! - The official Python MCP SDK does the whole dance (401, metadata,
//!   discovery, registration, authorization code with PKCE) and calls a tool.

#[path = "support/mcp_http.rs"]
mod mcp_http;
#[path = "support/mcp.rs"]
mod mcp_support;
#[path = "support/oauth.rs"]
mod oauth_support;
mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use haip::auth::OAuth;
use haip::{Context, ServerBuilder, ServerHandle, Tool, ToolError};
use oauth_support::{INTROSPECTOR, OTHER_RESOURCE, Provider, base64url, request};
use serde_json::{Value, json};
use support::{Client, builder, get_json, http_get};

/// A server with an unscoped tool, two scoped ones and one that says who
/// called it.
fn tools(builder: ServerBuilder) -> ServerBuilder {
    let echo = |name: &str, scopes: &[&str]| {
        Tool::builder(name)
            .description("Echo")
            .scopes(scopes.iter().copied())
            .handler(|params, _: Context| async move { Ok::<_, ToolError>(params) })
            .build()
            .expect("the tool builds")
    };
    let whoami = Tool::builder("whoami")
        .description("Who is calling")
        .handler(|_, ctx: Context| async move {
            let caller = ctx.caller().expect("authentication is on");
            Ok::<_, ToolError>(json!({
                "subject": caller.subject(),
                "scopes": caller.scopes(),
                "iss": caller.claim("iss"),
            }))
        })
        .build()
        .expect("whoami builds");
    builder
        .builtin_tools()
        .tool(whoami)
        .tool(echo("create_user", &["users:write"]))
        .tool(echo("close_ticket", &["tickets:write"]))
}

/// An OAuth server for `provider` on `127.0.0.1:0`, its resource (its
/// `/mcp` URL) known to the provider.
async fn serve(
    provider: &Provider,
    oauth: impl FnOnce(OAuth) -> OAuth,
    more: impl FnOnce(ServerBuilder) -> ServerBuilder,
) -> (ServerHandle, SocketAddr, String) {
    // Stateless `/mcp`: each request here is one POST without `initialize`.
    let server = more(tools(builder()).mcp_sessions(false))
        .oauth(oauth(OAuth::issuer(&provider.issuer)))
        .addr("127.0.0.1:0")
        .build()
        .expect("the OAuth server builds");
    let handle = support::within("the server to start", server.start())
        .await
        .expect("the OAuth server starts");
    let addr = handle.local_addr();
    let resource = format!("http://{addr}/mcp");
    provider.add_resource(&resource).await;
    (handle, addr, resource)
}

/// A `tools/call` or `tools/list` to `/mcp` with `token`: status, headers,
/// JSON body.
async fn mcp(
    addr: SocketAddr,
    token: Option<&str>,
    body: &Value,
) -> (u16, hyper::HeaderMap, Value) {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    if let Some(bearer) = &bearer {
        headers.push(("authorization", bearer));
    }
    let (status, headers, body) = request(
        addr,
        "POST",
        "/mcp",
        &headers,
        body.to_string().into_bytes(),
    )
    .await;
    let text = String::from_utf8_lossy(&body).into_owned();
    // A JSON answer, or the last `data:` of an event stream.
    let json = serde_json::from_str(&text).unwrap_or_else(|_| {
        text.lines()
            .rev()
            .filter_map(|l| l.strip_prefix("data:"))
            .find_map(|d| serde_json::from_str(d.trim()).ok())
            .unwrap_or(Value::Null)
    });
    (status, headers, json)
}

fn call(tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments}})
}

fn list() -> Value {
    json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {}})
}

fn challenge(headers: &hyper::HeaderMap) -> String {
    headers
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

fn names(tools: &Value) -> Vec<String> {
    tools
        .as_array()
        .expect("a list of tools")
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_and_challenges_tell_a_client_where_to_get_a_token() {
    let provider = Provider::start(&[], &["--no-oauth-metadata"]).await;
    let (_server, addr, resource) = serve(&provider, |o| o, |b| b).await;
    let metadata_url = format!("http://{addr}/.well-known/oauth-protected-resource/mcp");

    // RFC 9728, public, on both paths.
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let metadata = get_json(addr, path).await;
        assert_eq!(metadata["resource"], json!(resource), "{metadata}");
        assert_eq!(metadata["authorization_servers"], json!([provider.issuer]));
        assert_eq!(
            metadata["scopes_supported"],
            json!(["tickets:write", "users:write"])
        );
        assert_eq!(metadata["bearer_methods_supported"], json!(["header"]));
    }
    assert_eq!(http_get(addr, "/health").await.status, 200);

    // No token, then a bad one: 401 naming the metadata.
    let (status, headers, body) = mcp(addr, None, &list()).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        challenge(&headers),
        format!("Bearer resource_metadata=\"{metadata_url}\"")
    );
    let (status, headers, _) = mcp(addr, Some("not-a-token"), &list()).await;
    assert_eq!(status, 401);
    assert_eq!(
        challenge(&headers),
        format!("Bearer error=\"invalid_token\", resource_metadata=\"{metadata_url}\"")
    );

    // WebSocket: ERROR naming the metadata, then close 1008.
    let (error, close) = ws_refusal(&format!("ws://{addr}/haip")).await;
    assert_eq!(error["type"], "ERROR", "{error}");
    assert_eq!(error["payload"]["code"], "MISSING_TOKEN");
    assert_eq!(
        error["payload"]["detail"]["resource_metadata"],
        json!(metadata_url)
    );
    assert_eq!(close, 1008);

    // The issuer was found through OpenID discovery (its RFC 8414 document
    // is switched off here), its keys fetched once.
    let token = provider.token("", &resource).await;
    let (status, _, body) = mcp(addr, Some(&token), &list()).await;
    assert_eq!(status, 200, "{body}");
    let stats = provider.stats().await;
    assert_eq!(stats["jwks_fetches"], 1, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_caller_sees_and_calls_only_what_its_scopes_allow() {
    let provider = Provider::start(&[], &[]).await;
    let (_server, addr, resource) = serve(&provider, |o| o, |b| b).await;
    let writer = provider.token("users:write", &resource).await;

    // HAIP: the list, a hidden tool's schema, an allowed and a refused call.
    let mut ws = Client::connect(&format!("ws://{addr}/haip?token={writer}")).await;
    ws.request("TOOL_LIST", json!({})).await;
    let listed = ws.recv().await;
    assert_eq!(
        names(&listed["payload"]["tools"]),
        ["echo", "add", "weather", "whoami", "create_user"]
    );
    ws.request("TOOL_SCHEMA", json!({"tool": "close_ticket"}))
        .await;
    assert_eq!(ws.expect_error().await["payload"]["code"], "TOOL_NOT_FOUND");
    let done = ws.call_done("c1", "whoami", json!({})).await;
    assert_eq!(done["status"], "OK", "{done}");
    assert_eq!(
        done["result"],
        json!({"subject": "haip-test", "scopes": ["users:write"], "iss": provider.issuer})
    );
    let done = ws
        .call_done("c2", "create_user", json!({"name": "ada"}))
        .await;
    assert_eq!(done["status"], "OK", "{done}");
    let done = ws.call_done("c3", "close_ticket", json!({"id": 1})).await;
    assert_eq!(done["status"], "ERROR", "{done}");
    let error = &done["result"];
    assert_eq!(error["code"], "FORBIDDEN", "{done}");
    assert_eq!(error["error"], "Missing scope: tickets:write");
    assert_eq!(
        error["details"],
        json!({"required": ["tickets:write"], "missing": ["tickets:write"]})
    );

    // MCP: the same caller's list; a refused call is a 403 with the scope to
    // step up to.
    let (status, _, body) = mcp(addr, Some(&writer), &list()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        names(&body["result"]["tools"]),
        ["echo", "add", "weather", "whoami", "create_user"]
    );
    let (status, headers, body) = mcp(addr, Some(&writer), &call("close_ticket", json!({}))).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        challenge(&headers),
        format!(
            "Bearer error=\"insufficient_scope\", scope=\"tickets:write\", \
             resource_metadata=\"http://{addr}/.well-known/oauth-protected-resource/mcp\""
        )
    );
    assert_eq!(body["id"], 7);
    assert_eq!(
        body["error"]["data"],
        json!({"required": ["tickets:write"], "missing": ["tickets:write"]})
    );
    let (status, _, body) = mcp(addr, Some(&writer), &call("create_user", json!({"a": 1}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["isError"], false, "{body}");
    assert_eq!(body["result"]["content"][0]["text"], r#"{"a":1}"#, "{body}");

    // A token with every scope sees everything; one with none, the rest.
    let all = provider.token("users:write tickets:write", &resource).await;
    let (_, _, body) = mcp(addr, Some(&all), &list()).await;
    assert_eq!(names(&body["result"]["tools"]).len(), 6, "{body}");
    let none = provider.token("", &resource).await;
    let (_, _, body) = mcp(addr, Some(&none), &list()).await;
    assert_eq!(
        names(&body["result"]["tools"]),
        ["echo", "add", "weather", "whoami"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_wide_scopes_add_to_each_tools_and_shown_tools_are_refused_at_call_time() {
    let provider = Provider::start(&[], &[]).await;
    let (_server, addr, resource) = serve(
        &provider,
        |o| o,
        |b| b.require_scopes(["tools:read"]).hide_forbidden_tools(false),
    )
    .await;
    let writer = provider.token("users:write", &resource).await;
    // Every tool is listed...
    let (_, _, body) = mcp(addr, Some(&writer), &list()).await;
    assert_eq!(names(&body["result"]["tools"]).len(), 6, "{body}");
    // ... and a call lacking scopes lists every one it lacks.
    let (status, headers, body) = mcp(addr, Some(&writer), &call("close_ticket", json!({}))).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        challenge(&headers).contains("scope=\"tickets:write tools:read\""),
        "{}",
        challenge(&headers)
    );
    assert_eq!(
        body["error"]["data"],
        json!({"required": ["tickets:write", "tools:read"], "missing": ["tickets:write", "tools:read"]})
    );
    let reader = provider.token("tools:read", &resource).await;
    let (status, _, body) = mcp(addr, Some(&reader), &call("echo", json!({"text": "hi"}))).await;
    assert_eq!(status, 200, "{body}");
    let mut ws = Client::connect(&format!("ws://{addr}/haip?token={writer}")).await;
    let done = ws.call_done("c1", "echo", json!({"text": "hi"})).await;
    assert_eq!(done["result"]["code"], "FORBIDDEN", "{done}");
    assert_eq!(done["result"]["details"]["missing"], json!(["tools:read"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_not_meant_for_this_server_are_refused() {
    let provider = Provider::start(&[], &[]).await;
    let stranger = Provider::start(&[], &[]).await;
    let (_server, addr, resource) = serve(&provider, |o| o, |b| b).await;
    stranger.add_resource(&resource).await;
    let kid = provider.started["kid"].as_str().unwrap().to_owned();

    let refused = |what: &'static str, code: &'static str| (what, code);
    let mut cases: Vec<((&str, &str), String)> = Vec::new();
    cases.push((
        refused("another audience", "INVALID_TOKEN"),
        provider.token("users:write", OTHER_RESOURCE).await,
    ));
    cases.push((
        refused("another issuer", "INVALID_TOKEN"),
        stranger.token("users:write", &resource).await,
    ));
    cases.push((
        refused("a key the issuer does not publish", "INVALID_TOKEN"),
        provider
            .sign(
                provider.claims(&resource, "users:write"),
                json!({}),
                "foreign",
            )
            .await,
    ));
    let mut expired = provider.claims(&resource, "users:write");
    expired["exp"] = json!(expired["iat"].as_u64().unwrap() - 3600);
    cases.push((
        refused("expired", "TOKEN_EXPIRED"),
        provider.sign(expired, json!({}), "rsa").await,
    ));
    // RS256 switched to HS256, the issuer's public key as the HMAC secret.
    let jwk = provider.admin("GET", "/public-jwk", Value::Null).await;
    for secret in [jwk.to_string(), jwk["n"].as_str().unwrap().to_owned()] {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        header.kid = Some(kid.clone());
        let key = jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()).unwrap();
        let token = jsonwebtoken::encode(&header, &provider.claims(&resource, "users:write"), &key)
            .unwrap();
        cases.push((refused("alg switched to HS256", "INVALID_TOKEN"), token));
    }
    // `alg: none`, unsigned.
    let b64 = |v: &Value| base64url(v.to_string().as_bytes());
    let none = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "at+jwt", "kid": kid})),
        b64(&provider.claims(&resource, "users:write"))
    );
    cases.push((refused("alg none", "INVALID_TOKEN"), none));

    for ((what, code), token) in &cases {
        let (status, headers, body) = mcp(addr, Some(token), &list()).await;
        assert_eq!(status, 401, "{what}: {body}");
        assert_eq!(body["code"], *code, "{what}: {body}");
        assert!(
            challenge(&headers).contains("error=\"invalid_token\""),
            "{what}"
        );
        let (error, close) = ws_refusal(&format!("ws://{addr}/haip?token={token}")).await;
        assert_eq!(error["payload"]["code"], *code, "{what} over HAIP: {error}");
        assert_eq!(close, 1008);
    }

    // The control: the same way of signing, with the real key and valid
    // claims, is accepted.
    let good = provider
        .sign(provider.claims(&resource, "users:write"), json!({}), "rsa")
        .await;
    let (status, _, body) = mcp(addr, Some(&good), &list()).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_unknown_kids_cost_at_most_the_per_minute_budget() {
    let provider = Provider::start(&[], &[]).await;
    let (_server, addr, resource) = serve(&provider, |o| o, |b| b).await;
    let good = provider.token("", &resource).await;
    assert_eq!(mcp(addr, Some(&good), &list()).await.0, 200);
    let before = provider.stats().await["jwks_fetches"].as_u64().unwrap();
    let rss_before = rss_kib();

    // 10 000 tokens, each signed by a key the issuer does not publish and
    // naming a made-up kid, over 8 keep-alive connections at once.
    let claims = provider.claims(&resource, "");
    let template = provider
        .sign(claims, json!({"kid": "made-up"}), "foreign")
        .await;
    let (_, rest) = template.split_once('.').unwrap();
    let started = Instant::now();
    let mut senders = Vec::new();
    for worker in 0..8u32 {
        let rest = rest.to_owned();
        senders.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                    .await
                    .unwrap();
            tokio::spawn(conn);
            let mut refused = 0;
            for i in 0..1250u32 {
                let header = json!({"alg": "RS256", "kid": format!("kid-{worker}-{i}")});
                let header = base64url(header.to_string().as_bytes());
                let token = format!("{header}.{rest}");
                let req = hyper::Request::post("/mcp")
                    .header("host", addr.to_string())
                    .header("authorization", format!("Bearer {token}"))
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .body(http_body_util::Full::new(bytes::Bytes::from(
                        list().to_string(),
                    )))
                    .unwrap();
                sender.ready().await.unwrap();
                let response = sender.send_request(req).await.unwrap();
                if response.status() == 401 {
                    refused += 1;
                }
                use http_body_util::BodyExt;
                let _ = response.into_body().collect().await;
            }
            refused
        }));
    }
    let mut refused = 0;
    for sender in senders {
        refused += support::within("the flood", sender).await.unwrap();
    }
    let took = started.elapsed();
    assert_eq!(refused, 10_000);
    let fetched = provider.stats().await["jwks_fetches"].as_u64().unwrap() - before;
    // The default budget is 10 a minute: the 10 the bucket holds (the
    // warm-up took one of them), and one more per 6 s of the flood.
    let allowed = 10 + took.as_secs() / 6;
    assert!(
        fetched <= allowed,
        "{fetched} JWKS fetches in {took:?} (at most {allowed})"
    );
    let stats = get_json(addr, &format!("/stats?token={good}")).await;
    assert_eq!(stats["oauth"]["keys"], 2, "only the issuer's keys: {stats}");
    let grown = rss_kib().saturating_sub(rss_before);
    eprintln!("10 000 unknown kids in {took:?}: {fetched} JWKS fetch(es), RSS +{grown} KiB");
    assert!(grown < 64 * 1024, "RSS grew {grown} KiB");
    // The real token still works.
    assert_eq!(mcp(addr, Some(&good), &list()).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_rotated_in_passes_on_its_first_token_and_a_flood_costs_at_most_the_budget() {
    let provider = Provider::start(&[], &[]).await;
    let budget = 4;
    let (_server, addr, resource) =
        serve(&provider, |o| o.jwks_refetches_per_minute(budget), |b| b).await;
    let old = provider.token("", &resource).await;
    assert_eq!(mcp(addr, Some(&old), &list()).await.0, 200);
    let issuer = &provider;
    let fetches = move || async move { issuer.stats().await["jwks_fetches"].as_u64().unwrap() };
    let first = fetches().await;

    // The issuer rotates its key and signs with the new one at once: its
    // first token passes, at once (it used to wait out a 30 s interval).
    let rotated = provider
        .admin("POST", "/rotate", json!({"keep_old": true}))
        .await;
    assert_ne!(rotated["kid"], rotated["old_kid"]);
    let new = provider.token("", &resource).await;
    let started = Instant::now();
    let (status, _, body) = mcp(addr, Some(&new), &list()).await;
    assert_eq!(
        status, 200,
        "the first token of a key just rotated in: {body}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(fetches().await - first, 1, "one JWKS fetch for the new key");
    // The old key is still published (keep_old): its tokens still pass.
    assert_eq!(mcp(addr, Some(&old), &list()).await.0, 200);

    // Rotated again, and 16 requests naming the newest key at once: they
    // share one fetch.
    provider
        .admin("POST", "/rotate", json!({"keep_old": true}))
        .await;
    let newest = provider.token("", &resource).await;
    let before = fetches().await;
    let mut together = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let token = newest.clone();
        together.spawn(async move { mcp(addr, Some(&token), &list()).await.0 });
    }
    let statuses = support::within("16 requests at once", together.join_all()).await;
    assert_eq!(statuses, vec![200; 16]);
    assert_eq!(fetches().await - before, 1, "16 requests, one JWKS fetch");

    // A flood of tokens naming made-up kids (3 of the 4 fetches the bucket
    // held are spent: the warm-up and the two rotations): at most the
    // budget, however many come.
    let claims = provider.claims(&resource, "");
    let template = provider
        .sign(claims, json!({"kid": "made-up"}), "foreign")
        .await;
    let (_, rest) = template.split_once('.').unwrap();
    let before = fetches().await;
    let started = Instant::now();
    let mut flood = tokio::task::JoinSet::new();
    for worker in 0..8 {
        let rest = rest.to_owned();
        flood.spawn(async move {
            let mut refused = 0;
            for i in 0..25 {
                let header = json!({"alg": "RS256", "kid": format!("flood-{worker}-{i}")});
                let token = format!("{}.{rest}", base64url(header.to_string().as_bytes()));
                if mcp(addr, Some(&token), &list()).await.0 == 401 {
                    refused += 1;
                }
            }
            refused
        });
    }
    let refused: u32 = support::within("the flood", flood.join_all())
        .await
        .into_iter()
        .sum();
    assert_eq!(refused, 200);
    let fetched = fetches().await - before;
    let took = started.elapsed();
    eprintln!("200 unknown kids in {took:?}: {fetched} JWKS fetch(es)");
    // One fetch left in the bucket, and one more per 15 s of the flood.
    assert!(
        (1..=1 + took.as_secs() / 15).contains(&fetched),
        "{fetched} JWKS fetches in {took:?}"
    );
    assert!(fetched <= u64::from(budget));
    // The keys it holds go on serving.
    assert_eq!(mcp(addr, Some(&newest), &list()).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_keys_are_fetched_and_cached_ones_serve_while_the_issuer_is_down() {
    let provider = Provider::start(&[], &[]).await;
    let (_server, addr, resource) = serve(&provider, |o| o, |b| b).await;
    let old = provider.token("users:write", &resource).await;
    assert_eq!(mcp(addr, Some(&old), &list()).await.0, 200);

    let rotated = provider.admin("POST", "/rotate", json!({})).await;
    assert_ne!(rotated["kid"], rotated["old_kid"]);
    let new = provider.token("users:write", &resource).await;
    let (status, _, body) = mcp(addr, Some(&new), &list()).await;
    assert_eq!(status, 200, "a token of the new key: {body}");
    // The issuer no longer publishes the old key: its tokens no longer pass.
    assert_eq!(mcp(addr, Some(&old), &list()).await.0, 401);

    // The issuer goes away: the cached key goes on serving, and a token
    // naming a key nobody has is refused at once (no hang).
    let issuer = provider.addr;
    drop(provider);
    support::within("the issuer to go away", async {
        while tokio::net::TcpStream::connect(issuer).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let fetches = get_json(addr, &format!("/stats?token={new}")).await["oauth"]["jwksFetches"]
        .as_u64()
        .unwrap();
    let (status, _, body) = mcp(addr, Some(&new), &call("create_user", json!({}))).await;
    assert_eq!(status, 200, "{body}");
    // The budget is not spent, so the unknown kid tries the issuer.
    let started = Instant::now();
    assert_eq!(mcp(addr, Some(&old), &list()).await.0, 401);
    assert!(started.elapsed() < Duration::from_secs(10));
    // The unknown kid made it try the issuer, which failed: the keys it had
    // are still the ones it serves with.
    let stats = get_json(addr, &format!("/stats?token={new}")).await;
    assert_eq!(
        stats["oauth"]["jwksFetches"].as_u64().unwrap(),
        fetches + 1,
        "{stats}"
    );
    assert_eq!(mcp(addr, Some(&new), &list()).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opaque_tokens_are_introspected_once_and_remembered_within_a_bound() {
    let provider = Provider::start(&[], &[]).await;
    let (_server, addr, resource) = serve(
        &provider,
        |o| {
            o.introspection(INTROSPECTOR.0, INTROSPECTOR.1)
                .max_cached_tokens(50)
        },
        |b| b,
    )
    .await;
    let opaque = provider
        .token("tickets:write", &format!("{resource}?opaque"))
        .await;
    assert_eq!(opaque.matches('.').count(), 0, "an opaque token: {opaque}");
    let before = provider.stats().await["introspections"].as_u64().unwrap();
    for _ in 0..5 {
        let (status, _, body) = mcp(addr, Some(&opaque), &call("close_ticket", json!({}))).await;
        assert_eq!(status, 200, "{body}");
    }
    let stats = provider.stats().await;
    assert_eq!(
        stats["introspections"].as_u64().unwrap() - before,
        1,
        "{stats}"
    );
    // Without the scope: 403; with no audience at all: refused.
    let (status, _, _) = mcp(addr, Some(&opaque), &call("create_user", json!({}))).await;
    assert_eq!(status, 403);
    let (status, body) = provider
        .http(
            "POST",
            "/token",
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                (
                    "authorization",
                    &oauth_support::basic(oauth_support::CLIENT.0, oauth_support::CLIENT.1),
                ),
            ],
            b"grant_type=client_credentials&scope=tickets%3Awrite".to_vec(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let no_audience = body["access_token"].as_str().unwrap();
    assert_eq!(mcp(addr, Some(no_audience), &list()).await.0, 401);

    // Made-up opaque tokens: each asked about at most once (past the
    // peer's budget of unknown tokens, refused without asking), remembered
    // as refused, and no more remembered than the bound.
    for i in 0..200 {
        let (status, _, _) = mcp(addr, Some(&format!("made-up-{i}")), &list()).await;
        assert_eq!(status, 401);
    }
    let (status, _, _) = mcp(addr, Some("made-up-199"), &list()).await;
    assert_eq!(status, 401);
    let stats = get_json(addr, &format!("/stats?token={opaque}")).await;
    assert!(
        stats["oauth"]["cachedTokens"].as_u64().unwrap() <= 50,
        "{stats}"
    );
    assert!(
        stats["oauth"]["refusedTokens"].as_u64().unwrap() <= 50,
        "{stats}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_does_the_whole_dance_and_calls_a_tool() {
    let provider = Provider::start(&[], &["--no-oauth-metadata"]).await;
    let (_server, addr, _) = serve(&provider, |o| o, |b| b).await;
    let python = oauth_support::python();
    let script = mcp_support::workspace().join("tests/oauth/mcp_oauth.py");
    let out = support::within(
        "mcp_oauth.py",
        tokio::process::Command::new(python)
            .arg(script)
            .arg(format!("http://{addr}/mcp"))
            .args([
                "--expect-tool",
                "create_user",
                "--expect-tool",
                "close_ticket",
            ])
            .args(["--call", "create_user", r#"{"name": "ada"}"#])
            .args(["--timeout", "50"])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("python runs mcp_oauth.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "mcp_oauth.py failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("a JSON summary ({e}): {stdout}"));
    assert_eq!(summary["ok"], true, "{summary}");
    assert!(summary["unauthorized"].as_u64().unwrap() >= 1, "{summary}");
    assert_eq!(summary["call"]["is_error"], false, "{summary}");
    let text = summary["call"]["text"].as_str().unwrap_or_default();
    assert_eq!(
        serde_json::from_str::<Value>(text).ok(),
        Some(json!({"name": "ada"})),
        "{summary}"
    );
    // What the SDK asked for: every scope the metadata offers, for this
    // resource; what it got: a token of a person (`sub`), not of a client.
    assert_eq!(
        summary["token"]["jwt"]["claims"]["sub"], "alice",
        "{summary}"
    );
    assert_eq!(
        summary["token"]["jwt"]["claims"]["aud"],
        json!(format!("http://{addr}/mcp"))
    );
}

/// A refused WebSocket connection: its one envelope, and its close code.
async fn ws_refusal(url: &str) -> (Value, u16) {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    let (mut ws, _) = support::within("the upgrade", tokio_tungstenite::connect_async(url))
        .await
        .expect("the upgrade completes");
    let mut envelope = Value::Null;
    loop {
        match support::within("the refusal", ws.next()).await {
            Some(Ok(Message::Text(text))) => envelope = serde_json::from_str(&text).unwrap(),
            Some(Ok(Message::Close(Some(frame)))) => return (envelope, frame.code.into()),
            Some(Ok(_)) => {}
            other => panic!("no close frame: {other:?}"),
        }
    }
}

/// This process's resident memory.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

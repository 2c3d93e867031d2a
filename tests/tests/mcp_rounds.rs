//! Questions without sessions (MCP 2026-07-28, SEP-2322) on stateless
//! `/mcp`: a call that asks ends its round with `input_required`, the client
//! retries with the answers and the signed `requestState`, and the tool runs
//! again from the start, finding each answer by its question's key.
//!
//! - `book_table` asks and books over two rounds, also when the retry goes
//!   to another instance sharing the key (and the official Python SDK does it
//!   through a round-robin proxy); between rounds nothing of the call is
//!   left on the server.
//! - A tampered, expired, foreign (another key) or misapplied (another
//!   caller, tool or arguments) `requestState` is refused with `-32602`.
//! - Questions awaited together go out in one round, later ones in the next;
//!   only what the client declared is asked (a call that fails for want of a
//!   capability is answered `-32021`, naming it); a missing or unfitting
//!   answer is asked for again.

use crate::mcp_http;
use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use haip::{Answer, Context, Limits, SampleRequest, ServerBuilder, ServerHandle, Tool, ToolError};
use mcp_http::{Proxy, mcp_request, run_script};
use serde_json::{Value, json};
use support::{base_limits, demo_builder, get_json, hs256_token, start};

/// The key two instances share.
const KEY: &str = "a shared secret of at least thirty-two bytes";

/// A request of MCP 2026-07-28: `_meta` with the version and what the
/// client can answer (`can`: elicitation, sampling, roots).
fn modern_call(tool: &str, arguments: Value, can: &[&str], retry: Option<(Value, &str)>) -> Value {
    let caps: serde_json::Map<String, Value> =
        can.iter().map(|c| ((*c).to_owned(), json!({}))).collect();
    let mut params = json!({
        "name": tool,
        "arguments": arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": caps,
        }
    });
    if let Some((responses, state)) = retry {
        params["inputResponses"] = responses;
        if !state.is_empty() {
            params["requestState"] = json!(state);
        }
    }
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
}

/// Posts a 2026-07-28 request; the JSON-RPC response.
async fn post(addr: SocketAddr, body: &Value, token: Option<&str>) -> Value {
    let name = body["params"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", name.as_str()),
    ];
    if let Some(bearer) = &bearer {
        headers.push(("Authorization", bearer.as_str()));
    }
    mcp_request(addr, "POST", Some(body), &headers)
        .await
        .response()
}

fn input_required(response: &Value) -> (&serde_json::Map<String, Value>, &str) {
    let result = &response["result"];
    assert_eq!(result["resultType"], "input_required", "{response}");
    (
        result["inputRequests"]
            .as_object()
            .unwrap_or_else(|| panic!("no inputRequests: {response}")),
        result["requestState"]
            .as_str()
            .unwrap_or_else(|| panic!("no requestState: {response}")),
    )
}

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

/// `haip_questions_total{outcome}` in `addr`'s `/metrics`.
async fn questions(addr: SocketAddr, outcome: &str) -> u64 {
    let metrics = support::http_get(addr, "/metrics").await;
    let series = format!("haip_questions_total{{outcome=\"{outcome}\"}} ");
    metrics
        .body
        .lines()
        .find_map(|line| line.strip_prefix(series.as_str()))
        .map_or(0, |n| n.trim().parse().unwrap())
}

async fn instance(builder: ServerBuilder) -> (ServerHandle, SocketAddr) {
    let (handle, _) = start(builder).await;
    let addr = handle.local_addr();
    (handle, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn book_table_asks_and_books_over_rounds_on_either_instance() {
    let (_a, a) = instance(demo_builder().request_state_key(KEY)).await;
    let (_b, b) = instance(demo_builder().request_state_key(KEY)).await;
    let arguments = json!({"restaurant": "Luigi"});
    let first = post(
        a,
        &modern_call("book_table", arguments.clone(), &["elicitation"], None),
        None,
    )
    .await;
    let (requests, state) = input_required(&first);
    assert_eq!(requests.len(), 1, "{first}");
    let (key, question) = requests.iter().next().unwrap();
    assert_eq!(key, "ask-1");
    assert_eq!(question["method"], "elicitation/create");
    assert_eq!(question["params"]["message"], "How many people, and when?");
    assert_eq!(question["params"]["mode"], "form");
    let form = &question["params"]["requestedSchema"];
    assert_eq!(
        form["properties"]["time"]["enum"],
        json!(["18:00", "19:00", "20:00"])
    );
    assert!(!state.contains("19:00") && state.len() < 2048, "{state}");
    // The question was put to the client: counted once, where it was asked.
    assert_eq!(questions(a, "asked").await, 1);
    // Between rounds the server holds nothing of the call.
    let stats = get_json(a, "/stats").await;
    assert_eq!(stats["toolExecutions"]["active"], 0, "{stats}");
    assert_eq!(
        stats["toolExecutions"]["total"], 0,
        "a round is not a call: {stats}"
    );

    // The retry, on the other instance.
    let answer = json!({ key: accept(json!({"party_size": 4, "time": "19:00"})) });
    let done = post(
        b,
        &modern_call(
            "book_table",
            arguments.clone(),
            &["elicitation"],
            Some((answer.clone(), state)),
        ),
        None,
    )
    .await;
    let result = &done["result"];
    assert_eq!(result["resultType"], "complete", "{done}");
    assert_eq!(
        result["structuredContent"],
        json!({"booked": true, "restaurant": "Luigi", "party_size": 4, "time": "19:00"})
    );
    let stats = get_json(b, "/stats").await;
    assert_eq!(stats["toolExecutions"]["successful"], 1, "{stats}");
    // The retry brought the answer: answered, and not asked again.
    assert_eq!(questions(b, "answered").await, 1);
    assert_eq!(questions(b, "asked").await, 0);

    // An instance with another key cannot read the state.
    let (_c, c) = instance(demo_builder().request_state_key("x".repeat(40))).await;
    let refused = post(
        c,
        &modern_call(
            "book_table",
            arguments,
            &["elicitation"],
            Some((answer, state)),
        ),
        None,
    )
    .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("verification"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_expired_and_misapplied_states_are_refused() {
    let secret = "a token secret of at least 32 bytes";
    let builder = demo_builder()
        .request_state_key(KEY)
        .jwt_hs256(secret)
        .allow_unauthenticated(false);
    let (_s, addr) = instance(builder).await;
    let ada = hs256_token(secret, "ada", None);
    let bob = hs256_token(secret, "bob", None);
    let arguments = json!({"restaurant": "Luigi"});
    let first = post(
        addr,
        &modern_call("book_table", arguments.clone(), &["elicitation"], None),
        Some(&ada),
    )
    .await;
    let (_, state) = input_required(&first);
    let answer = json!({"ask-1": accept(json!({"party_size": 2, "time": "18:00"}))});
    let refused = |response: &Value, why: &str| {
        assert_eq!(response["error"]["code"], -32602, "{why}: {response}");
        let message = response["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(why), "{why}: {message}");
    };
    let tampered = format!("{state}-TAMPERED");
    let call = modern_call(
        "book_table",
        arguments.clone(),
        &["elicitation"],
        Some((answer.clone(), &tampered)),
    );
    refused(&post(addr, &call, Some(&ada)).await, "verification");
    // Another caller.
    let call = modern_call(
        "book_table",
        arguments.clone(),
        &["elicitation"],
        Some((answer.clone(), state)),
    );
    refused(&post(addr, &call, Some(&bob)).await, "verification");
    // Other arguments.
    let call = modern_call(
        "book_table",
        json!({"restaurant": "Chez"}),
        &["elicitation"],
        Some((answer.clone(), state)),
    );
    refused(&post(addr, &call, Some(&ada)).await, "another call");
    // The right caller, call and state: booked.
    let call = modern_call(
        "book_table",
        arguments.clone(),
        &["elicitation"],
        Some((answer.clone(), state)),
    );
    let done = post(addr, &call, Some(&ada)).await;
    assert_eq!(
        done["result"]["structuredContent"]["booked"], true,
        "{done}"
    );

    // Expired: a state that lives a millisecond, used after it.
    let (_e, short) = instance(demo_builder().request_state_key(KEY).limits(Limits {
        request_state_ttl: Duration::from_millis(1),
        ..base_limits()
    }))
    .await;
    let first = post(
        short,
        &modern_call("book_table", arguments.clone(), &["elicitation"], None),
        None,
    )
    .await;
    let (_, state) = input_required(&first);
    // Time passes: the state's life is what is being tested.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let call = modern_call(
        "book_table",
        arguments,
        &["elicitation"],
        Some((answer, state)),
    );
    refused(&post(short, &call, None).await, "expired");
}

/// A tool asking three things at once, then one more, counting its runs.
fn several(runs: Arc<AtomicUsize>) -> Tool {
    Tool::builder("several")
        .handler(move |_: Value, ctx: Context| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                #[haip::data]
                #[derive(Debug)]
                struct Name {
                    name: String,
                }
                let (name, greeting, roots) = tokio::join!(
                    ctx.ask::<Name>("What is your name?").key("user_name"),
                    ctx.sample(
                        SampleRequest::new("Say hello")
                            .max_tokens(5)
                            .key("greeting")
                    ),
                    ctx.roots(),
                );
                let name = match name {
                    Ok(Answer::Accepted(n)) => n.name,
                    other => format!("{other:?}"),
                };
                let greeting = match greeting {
                    Ok(s) => s.text().unwrap_or_default().to_owned(),
                    Err(e) => format!("({e})"),
                };
                let roots = match roots {
                    Ok(r) => r.into_iter().map(|r| r.uri).collect::<Vec<_>>().join(","),
                    Err(e) => format!("({e})"),
                };
                let sure = ctx.confirm("Sure?").await?;
                Ok::<_, ToolError>(
                    json!({"name": name, "greeting": greeting, "roots": roots, "sure": sure}),
                )
            }
        })
        .build()
        .expect("several is a valid tool")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_asked_together_go_in_one_round_and_later_ones_in_the_next() {
    let runs = Arc::new(AtomicUsize::new(0));
    let (_s, addr) = instance(demo_builder().tool(several(Arc::clone(&runs)))).await;
    let all = ["elicitation", "sampling", "roots"];
    let first = post(addr, &modern_call("several", json!({}), &all, None), None).await;
    let (requests, state) = input_required(&first);
    let methods: Vec<(&str, &str)> = requests
        .iter()
        .map(|(k, r)| (k.as_str(), r["method"].as_str().unwrap()))
        .collect();
    assert_eq!(
        methods,
        [
            ("greeting", "sampling/createMessage"),
            ("roots-1", "roots/list"),
            ("user_name", "elicitation/create")
        ],
        "{first}"
    );
    let answers = json!({
        "user_name": accept(json!({"name": "Ada"})),
        "greeting": {"role": "assistant", "content": {"type": "text", "text": "Hello!"}, "model": "m"},
        "roots-1": {"roots": [{"uri": "file:///work", "name": "work"}]},
    });
    let second = post(
        addr,
        &modern_call("several", json!({}), &all, Some((answers, state))),
        None,
    )
    .await;
    let (requests, state) = input_required(&second);
    assert_eq!(
        requests.keys().collect::<Vec<_>>(),
        ["confirm-2"],
        "{second}"
    );
    // Only the new answer: the earlier ones ride in the state.
    let answers = json!({"confirm-2": accept(json!({"confirm": true}))});
    let done = post(
        addr,
        &modern_call("several", json!({}), &all, Some((answers, state))),
        None,
    )
    .await;
    assert_eq!(
        done["result"]["content"][0]["text"]
            .as_str()
            .map(|t| serde_json::from_str::<Value>(t).unwrap()),
        Some(json!({"name": "Ada", "greeting": "Hello!", "roots": "file:///work", "sure": true})),
        "{done}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 3, "one run per round");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_what_the_client_declared_is_asked_and_missing_answers_are_asked_again() {
    let runs = Arc::new(AtomicUsize::new(0));
    let (_s, addr) = instance(demo_builder().tool(several(runs))).await;
    // Sampling only: the question and the roots fail at once, in the tool.
    let first = post(
        addr,
        &modern_call("several", json!({}), &["sampling"], None),
        None,
    )
    .await;
    let (requests, state) = input_required(&first);
    assert_eq!(requests.keys().collect::<Vec<_>>(), ["greeting"], "{first}");
    let answers = json!({"greeting": {"role": "assistant", "content": {"type": "text", "text": "Hi"}, "model": "m"}});
    let done = post(
        addr,
        &modern_call("several", json!({}), &["sampling"], Some((answers, state))),
        None,
    )
    .await;
    // `confirm` cannot be asked either: the tool's `?` ends the call, which
    // is answered `-32021` naming what the client lacked (MCP 2026-07-28).
    assert_eq!(done["error"]["code"], -32021, "{done}");
    assert_eq!(
        done["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {}, "roots": {}}),
        "{done}"
    );

    // A retry answering the wrong key, or with an answer that does not fit,
    // is asked again.
    let arguments = json!({"restaurant": "Luigi"});
    let wrong = json!({"wrong_key": accept(json!({"x": 1}))});
    let again = post(
        addr,
        &modern_call(
            "book_table",
            arguments.clone(),
            &["elicitation"],
            Some((wrong, "")),
        ),
        None,
    )
    .await;
    let (requests, state) = input_required(&again);
    assert!(requests.contains_key("ask-1"), "{again}");
    let unfitting = json!({"ask-1": accept(json!({"party_size": 99, "time": "19:00"}))});
    let again = post(
        addr,
        &modern_call(
            "book_table",
            arguments,
            &["elicitation"],
            Some((unfitting, state)),
        ),
        None,
    )
    .await;
    let (requests, _) = input_required(&again);
    assert!(requests.contains_key("ask-1"), "{again}");
    // Not an object at all: a JSON-RPC error before anything runs.
    let mut call = modern_call(
        "book_table",
        json!({"restaurant": "L"}),
        &["elicitation"],
        None,
    );
    call["params"]["inputResponses"] = Value::Null;
    let refused = post(addr, &call, None).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_client_books_a_table_across_two_instances() {
    let (_a, a) = instance(
        demo_builder()
            .request_state_key(KEY)
            .allow_unauthenticated(true),
    )
    .await;
    let (_b, b) = instance(
        demo_builder()
            .request_state_key(KEY)
            .allow_unauthenticated(true),
    )
    .await;
    let proxy = Proxy::start([a, b]).await;
    let url = format!("http://{}/mcp", proxy.addr);
    let summary = run_script("rounds.py", &[&url]).await;
    assert!(summary.contains("booked 4 at 19:00"), "{summary}");
    // Both instances served a `tools/call` of it.
    let calls: Vec<usize> = proxy
        .routed()
        .iter()
        .filter(|r| r.method == "tools/call")
        .map(|r| r.instance)
        .collect();
    assert!(calls.contains(&0) && calls.contains(&1), "{calls:?}");
}

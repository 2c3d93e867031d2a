use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use super::cache::{canonical, key_of};
use super::*;
use crate::ToolAnnotations;
use crate::context::{Caller, Parts};

const WAIT: Duration = Duration::from_secs(10);

fn stack(layers: Vec<Arc<dyn DynLayer>>) -> Arc<Stack> {
    Arc::new(Stack::new(layers, Arc::new(Semaphore::new(1))))
}

/// `greet`: `{name: string}` in, `"hello {name}"` out, counting its runs.
fn greet(runs: &Arc<AtomicUsize>, idempotent: bool) -> Tool {
    let runs = Arc::clone(runs);
    Tool::builder("greet")
        .input_schema(json!({
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
            "additionalProperties": false
        }))
        .annotations(ToolAnnotations::new().idempotent(idempotent))
        .handler(move |params: Value, _ctx: Context| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, SeqCst);
                Ok(json!(format!(
                    "hello {}",
                    params["name"].as_str().unwrap_or("?")
                )))
            }
        })
        .build()
        .unwrap()
}

fn failing(code: &'static str) -> Tool {
    Tool::builder("fails")
        .handler(move |_: Value, _: Context| async move {
            Err(ToolError::new(code, "db password=hunter2 refused")
                .with_details(json!({"host": "db-7"})))
        })
        .build()
        .unwrap()
}

fn context(subject: Option<&str>, cancel: CancellationToken) -> Context {
    context_of(subject.map(Caller::new), cancel)
}

fn context_of(caller: Option<Caller>, cancel: CancellationToken) -> Context {
    Context::new(Parts {
        call_id: "call-1".to_owned(),
        session_id: Arc::from("session-1"),
        cancel,
        progress: None,
        state: None,
        caller: caller.map(Arc::new),
        peer: None,
    })
}

async fn run(
    stack: &Arc<Stack>,
    tool: &Tool,
    params: Value,
    subject: Option<&str>,
) -> Result<Value, ToolError> {
    run_as(stack, tool, params, subject.map(Caller::new)).await
}

async fn run_as(
    stack: &Arc<Stack>,
    tool: &Tool,
    params: Value,
    caller: Option<Caller>,
) -> Result<Value, ToolError> {
    let ctx = context_of(caller, CancellationToken::new());
    let unchecked = Some(Unchecked {
        max_violations: 10,
        large: false,
    });
    let call = Arc::clone(stack).call(tool.clone(), params, ctx, unchecked);
    tokio::time::timeout(WAIT, call)
        .await
        .expect("the call ends")
}

fn retry_after(error: &ToolError) -> u64 {
    error
        .details()
        .and_then(|d| d["retry_after_ms"].as_u64())
        .expect("a retry hint")
}

#[test]
fn canonical_json_sorts_keys_at_every_depth() {
    let mut a = String::new();
    let mut b = String::new();
    canonical(&json!({"b": [1, {"y": 2, "x": "q\""}], "a": null}), &mut a);
    canonical(&json!({"a": null, "b": [1, {"x": "q\"", "y": 2}]}), &mut b);
    assert_eq!(a, b);
    assert_eq!(a, r#"{"a":null,"b":[1,{"x":"q\"","y":2}]}"#);
}

/// A caller of `subject`, granted `scopes`, with `claims` (and its scopes
/// as a `scope` claim, as a token has them).
fn caller(subject: &str, scopes: &str, claims: Value) -> Caller {
    let mut claims = claims.as_object().cloned().unwrap_or_default();
    claims.insert("sub".to_owned(), json!(subject));
    claims.insert("scope".to_owned(), json!(scopes));
    Caller::from_claims(subject, claims)
}

fn key(caller: &Caller, claims: Option<&[String]>) -> String {
    key_of("t", Some(caller), claims, &json!({"n": 1}))
}

#[test]
fn keys_differ_by_tool_subject_and_params() {
    let params = json!({"n": 1});
    let alice = Caller::new("alice");
    let base = key_of("t", Some(&alice), None, &params);
    assert_eq!(base, key_of("t", Some(&alice), None, &json!({"n": 1})));
    assert_ne!(base, key_of("t", Some(&Caller::new("bob")), None, &params));
    assert_ne!(base, key_of("t", None, None, &params));
    assert_ne!(base, key_of("u", Some(&alice), None, &params));
    assert_ne!(base, key_of("t", Some(&alice), None, &json!({"n": 2})));
    // A subject cannot pose as a tool name and a shorter subject.
    assert_ne!(
        key_of("t\n#5\nalice", None, None, &params),
        key_of("t", Some(&alice), None, &params)
    );
}

#[test]
fn keys_hold_the_scopes_and_the_claims_but_those_of_one_token() {
    let acme = json!({"tenant": "acme", "exp": 100, "iat": 40, "jti": "t-1"});
    let base = key(&caller("alice", "a b", acme.clone()), None);
    // The same authorization in another token: one key.
    let renewed = json!({
        "tenant": "acme", "exp": 200, "iat": 140, "nbf": 140, "jti": "t-2",
        "auth_time": 130, "nonce": "n", "at_hash": "h", "c_hash": "c", "s_hash": "s"
    });
    assert_eq!(base, key(&caller("alice", "a b", renewed), None));
    // Fewer scopes, another tenant, another claim: keys of their own.
    assert_ne!(base, key(&caller("alice", "a", acme.clone()), None));
    assert_ne!(
        base,
        key(&caller("alice", "a b", json!({"tenant": "globex"})), None)
    );
    let extra = json!({"tenant": "acme", "role": "admin"});
    assert_ne!(base, key(&caller("alice", "a b", extra), None));
    assert_ne!(base, key(&caller("alice", "a b", json!({})), None));
    assert_ne!(
        key(&caller("alice", "a b", json!({"tenant": null})), None),
        key(&caller("alice", "a b", json!({})), None),
        "null and absent are told apart"
    );
    // Scopes without a `scope` claim (a custom authenticator's caller).
    let bare = Caller::new("alice").with_scopes(["a", "b"]);
    assert_ne!(
        key(&bare, None),
        key(&Caller::new("alice").with_scopes(["a"]), None)
    );
    assert_eq!(
        key(&bare, None),
        key(&Caller::new("alice").with_scopes(["b", "a", "a"]), None)
    );
    // Claims' values compare as canonical JSON.
    let nested = |v: Value| key(&caller("alice", "a", json!({"org": v})), None);
    assert_eq!(
        nested(json!({"x": 1, "y": 2})),
        nested(json!({"y": 2, "x": 1}))
    );
    assert_ne!(nested(json!({"x": 1})), nested(json!({"x": "1"})));
}

#[test]
fn keys_cannot_be_forged_by_moving_text_between_parts() {
    // Scopes, claim names and claim values whose concatenations agree.
    let pairs = [
        (
            Caller::new("alice").with_scopes(["ab"]),
            Caller::new("alice").with_scopes(["a", "b"]),
        ),
        (
            Caller::new("alice").with_scopes(["a\n#1\nb"]),
            Caller::new("alice").with_scopes(["a", "b"]),
        ),
        (
            Caller::new("alice\n#0").with_scopes(Vec::<String>::new()),
            Caller::new("alice"),
        ),
        (
            caller("alice", "", json!({"ab": "c"})),
            caller("alice", "", json!({"a": "bc"})),
        ),
        (
            caller("alice", "", json!({"a": "b", "c": "d"})),
            caller("alice", "", json!({"a": "b\n#1\nc\n#3\n\"d\""})),
        ),
    ];
    for (one, other) in pairs {
        assert_ne!(key(&one, None), key(&other, None), "{one:?} / {other:?}");
    }
}

#[test]
fn named_key_claims_leave_the_others_out() {
    let tenant = ["tenant".to_owned()];
    let named = |claims: Value| key(&caller("alice", "a", claims), Some(&tenant));
    let base = named(json!({"tenant": "acme", "session": "s-1"}));
    assert_eq!(base, named(json!({"tenant": "acme", "session": "s-2"})));
    assert_ne!(base, named(json!({"tenant": "globex", "session": "s-1"})));
    assert_ne!(base, named(json!({"session": "s-1"})));
    // Scopes stay in the key.
    assert_ne!(
        base,
        key(
            &caller("alice", "a b", json!({"tenant": "acme"})),
            Some(&tenant)
        )
    );
    // Named per-token claims are in it.
    let exp = ["exp".to_owned()];
    assert_ne!(
        key(&caller("alice", "a", json!({"exp": 1})), Some(&exp)),
        key(&caller("alice", "a", json!({"exp": 2})), Some(&exp))
    );
    // No claims at all: the subject and the scopes.
    assert_eq!(
        key(&caller("alice", "a", json!({"tenant": "acme"})), Some(&[])),
        key(
            &caller("alice", "a", json!({"tenant": "globex"})),
            Some(&[])
        )
    );
}

#[tokio::test]
async fn layers_run_outermost_first_and_see_the_outcome_last() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let layer = |name: &'static str| {
        let seen = Arc::clone(&seen);
        Arc::new(from_fn(move |call: Call, next: Next| {
            let seen = Arc::clone(&seen);
            async move {
                seen.lock().unwrap().push(format!("{name} in"));
                let out = next.run(call).await;
                seen.lock().unwrap().push(format!("{name} out"));
                out
            }
        })) as Arc<dyn DynLayer>
    };
    let stack = stack(vec![layer("a"), layer("b")]);
    let runs = Arc::new(AtomicUsize::new(0));
    let out = run(&stack, &greet(&runs, false), json!({"name": "x"}), None).await;
    assert_eq!(out.unwrap(), json!("hello x"));
    assert_eq!(*seen.lock().unwrap(), ["a in", "b in", "b out", "a out"]);
}

#[tokio::test]
async fn params_are_checked_after_the_layers_rewrite_them() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tool = greet(&runs, false);
    // `who` is not a param of the tool: a layer renames it.
    let rename = Arc::new(from_fn(|mut call: Call, next: Next| async move {
        if let Some(map) = call.params_mut().as_object_mut()
            && let Some(who) = map.remove("who")
        {
            map.insert("name".to_owned(), who);
        }
        next.run(call).await
    })) as Arc<dyn DynLayer>;
    let stack = stack(vec![rename]);
    let out = run(&stack, &tool, json!({"who": "ada"}), None).await;
    assert_eq!(out.unwrap(), json!("hello ada"));
    // Still invalid after the layers: refused before the tool runs.
    let refused = run(&stack, &tool, json!({"name": 7}), None)
        .await
        .unwrap_err();
    assert_eq!(refused.code().as_str(), "INVALID_PARAMS");
    assert_eq!(refused.violations().map(|v| v.total), Some(1));
    assert_eq!(runs.load(SeqCst), 1);
}

#[tokio::test]
async fn a_layer_refuses_without_running_the_tool() {
    let runs = Arc::new(AtomicUsize::new(0));
    let deny = Arc::new(from_fn(|_: Call, _: Next| async move {
        Err(ToolError::new("FORBIDDEN", "not today"))
    })) as Arc<dyn DynLayer>;
    let out = run(
        &stack(vec![deny]),
        &greet(&runs, false),
        json!({"name": "x"}),
        None,
    )
    .await;
    assert_eq!(out.unwrap_err().code().as_str(), "FORBIDDEN");
    assert_eq!(runs.load(SeqCst), 0);
}

#[tokio::test]
async fn rate_limit_counts_per_subject_and_says_when_to_retry() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tool = greet(&runs, false);
    let stack = stack(vec![Arc::new(RateLimit::per_subject(
        3,
        Duration::from_secs(3600),
    ))]);
    for _ in 0..3 {
        run(&stack, &tool, json!({"name": "a"}), Some("alice"))
            .await
            .unwrap();
    }
    let refused = run(&stack, &tool, json!({"name": "a"}), Some("alice"))
        .await
        .unwrap_err();
    assert_eq!(refused.code().as_str(), "RATE_LIMITED");
    // One call back every 20 minutes.
    let wait = retry_after(&refused);
    assert!((1_190_000..=1_200_000).contains(&wait), "{wait}");
    assert!(
        refused.message().contains("3 calls"),
        "{}",
        refused.message()
    );
    // Another subject has a bucket of its own; anonymous calls share one.
    run(&stack, &tool, json!({"name": "b"}), Some("bob"))
        .await
        .unwrap();
    for _ in 0..3 {
        run(&stack, &tool, json!({"name": "c"}), None)
            .await
            .unwrap();
    }
    assert!(
        run(&stack, &tool, json!({"name": "c"}), None)
            .await
            .is_err()
    );
    assert_eq!(runs.load(SeqCst), 7);
}

#[tokio::test]
async fn rate_limit_burst_and_refill() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tool = greet(&runs, false);
    // 1 000 a second, 2 at once: the third at once is refused, and a call
    // is let through again within a few milliseconds.
    let limit = RateLimit::per_subject(1000, Duration::from_secs(1)).burst(2);
    let stack = stack(vec![Arc::new(limit)]);
    run(&stack, &tool, json!({"name": "a"}), Some("s"))
        .await
        .unwrap();
    run(&stack, &tool, json!({"name": "a"}), Some("s"))
        .await
        .unwrap();
    let refused = run(&stack, &tool, json!({"name": "a"}), Some("s"))
        .await
        .unwrap_err();
    assert!(retry_after(&refused) <= 2, "{refused:?}");
    let start = Instant::now();
    loop {
        match run(&stack, &tool, json!({"name": "a"}), Some("s")).await {
            Ok(_) => break,
            Err(e) => {
                assert!(start.elapsed() < WAIT, "never let through again: {e:?}");
                tokio::time::sleep(Duration::from_micros(retry_after(&e) * 1000)).await;
            }
        }
    }
}

#[tokio::test]
async fn rate_limit_full_of_callers_refuses_new_ones_saying_when_to_retry() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tool = greet(&runs, false);
    let limit = RateLimit::per_subject(2, Duration::from_secs(3600)).max_subjects(100);
    let stack = stack(vec![Arc::new(limit)]);
    for i in 0..100 {
        let subject = format!("s{i}");
        run(&stack, &tool, json!({"name": "a"}), Some(&subject))
            .await
            .unwrap();
    }
    let refused = run(&stack, &tool, json!({"name": "a"}), Some("new"))
        .await
        .unwrap_err();
    assert_eq!(refused.code().as_str(), "RATE_LIMITED");
    let details = refused.details().unwrap();
    assert_eq!(details["reason"], "too_many_callers", "{refused:?}");
    assert_eq!(details["max_subjects"], 100, "{refused:?}");
    // The first bucket is full again 30 minutes after its call.
    let wait = retry_after(&refused);
    assert!((1_790_000..=1_800_000).contains(&wait), "{wait}");
    assert!(
        refused.message().contains("100 callers")
            && refused.message().contains(&format!("{wait} ms")),
        "{}",
        refused.message()
    );
    // The callers held are still served from their own buckets.
    run(&stack, &tool, json!({"name": "a"}), Some("s7"))
        .await
        .unwrap();
    let own = run(&stack, &tool, json!({"name": "a"}), Some("s7"))
        .await
        .unwrap_err();
    assert!(own.message().contains("2 calls"), "{own:?}");
    assert_eq!(runs.load(SeqCst), 101);
}

#[tokio::test]
async fn rate_limit_forgets_refilled_buckets_for_new_callers() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tool = greet(&runs, false);
    // One call every 2 ms: a bucket is full again 2 ms after its call.
    let limit = RateLimit::per_subject(1, Duration::from_millis(2)).max_subjects(100);
    let stack = stack(vec![Arc::new(limit)]);
    for i in 0..2100 {
        let subject = format!("s{i}");
        let out = run(&stack, &tool, json!({"name": "a"}), Some(&subject)).await;
        if let Err(e) = out {
            assert_eq!(e.details().unwrap()["reason"], "too_many_callers", "{e:?}");
            assert!(retry_after(&e) <= 2, "{e:?}");
        }
    }
    let refilled = Instant::now() + Duration::from_millis(3);
    while Instant::now() < refilled {
        tokio::task::yield_now().await;
    }
    for i in 0..100 {
        let subject = format!("fresh{i}");
        run(&stack, &tool, json!({"name": "a"}), Some(&subject))
            .await
            .expect("a new caller passes once the old buckets are full again");
    }
}

#[tokio::test]
async fn concurrency_limit_queues_then_refuses() {
    let release = Arc::new(Notify::new());
    let started = Arc::new(AtomicUsize::new(0));
    let tool = {
        let (release, started) = (Arc::clone(&release), Arc::clone(&started));
        Tool::builder("slow")
            .handler(move |_: Value, _: Context| {
                let (release, started) = (Arc::clone(&release), Arc::clone(&started));
                async move {
                    started.fetch_add(1, SeqCst);
                    release.notified().await;
                    Ok(json!("done"))
                }
            })
            .build()
            .unwrap()
    };
    let stack = stack(vec![Arc::new(ConcurrencyLimit::per_tool(1).max_waiting(1))]);
    let first = tokio::spawn({
        let (stack, tool) = (Arc::clone(&stack), tool.clone());
        async move { run(&stack, &tool, json!({}), None).await }
    });
    while started.load(SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    // The second waits; the third would wait behind it: refused.
    let cancel = CancellationToken::new();
    let second =
        Arc::clone(&stack).call(tool.clone(), json!({}), context(None, cancel.clone()), None);
    let second = tokio::spawn(second);
    // On this one-thread runtime, the second call's task runs (and starts
    // waiting) when this one yields.
    tokio::task::yield_now().await;
    let third = run(&stack, &tool, json!({}), None).await.unwrap_err();
    assert_eq!(third.code().as_str(), "RATE_LIMITED", "{third:?}");
    // The waiting call can be cancelled.
    cancel.cancel();
    let second = tokio::time::timeout(WAIT, second).await.unwrap().unwrap();
    assert!(second.unwrap_err().is_cancelled());
    release.notify_one();
    assert_eq!(
        tokio::time::timeout(WAIT, first)
            .await
            .unwrap()
            .unwrap()
            .unwrap(),
        json!("done")
    );
    assert_eq!(started.load(SeqCst), 1);
}

#[tokio::test]
async fn cache_answers_idempotent_tools_again_per_subject() {
    let runs = Arc::new(AtomicUsize::new(0));
    let cache = Cache::new(1 << 20);
    let stack = stack(vec![Arc::new(cache.clone())]);
    let tool = greet(&runs, true);
    for _ in 0..3 {
        let out = run(&stack, &tool, json!({"name": "ada"}), Some("alice")).await;
        assert_eq!(out.unwrap(), json!("hello ada"));
    }
    assert_eq!((runs.load(SeqCst), cache.hits(), cache.misses()), (1, 2, 1));
    // Another caller, other params: runs.
    run(&stack, &tool, json!({"name": "ada"}), Some("bob"))
        .await
        .unwrap();
    run(&stack, &tool, json!({"name": "bea"}), Some("alice"))
        .await
        .unwrap();
    assert_eq!(runs.load(SeqCst), 3);
    // Errors are not kept; tools not marked idempotent pass through.
    run(&stack, &tool, json!({"name": 1}), Some("alice"))
        .await
        .unwrap_err();
    run(&stack, &tool, json!({"name": 1}), Some("alice"))
        .await
        .unwrap_err();
    let plain = greet(&runs, false);
    run(&stack, &plain, json!({"name": "ada"}), Some("alice"))
        .await
        .unwrap();
    run(&stack, &plain, json!({"name": "ada"}), Some("alice"))
        .await
        .unwrap();
    assert_eq!(runs.load(SeqCst), 5);
    assert_eq!(cache.len(), 3);
}

#[tokio::test]
async fn cache_answers_again_only_the_same_authorization() {
    let runs = Arc::new(AtomicUsize::new(0));
    let cache = Cache::new(1 << 20);
    let stack = stack(vec![Arc::new(cache.clone())]);
    let tool = greet(&runs, true);
    let ada = json!({"name": "ada"});
    let acme = || caller("alice", "a b", json!({"tenant": "acme", "jti": "1"}));
    run_as(&stack, &tool, ada.clone(), Some(acme()))
        .await
        .unwrap();
    let fewer = caller("alice", "a", json!({"tenant": "acme"}));
    run_as(&stack, &tool, ada.clone(), Some(fewer))
        .await
        .unwrap();
    let globex = caller("alice", "a b", json!({"tenant": "globex"}));
    run_as(&stack, &tool, ada.clone(), Some(globex))
        .await
        .unwrap();
    assert_eq!(runs.load(SeqCst), 3);
    let renewed = caller("alice", "a b", json!({"tenant": "acme", "jti": "2"}));
    run_as(&stack, &tool, ada.clone(), Some(renewed))
        .await
        .unwrap();
    assert_eq!((runs.load(SeqCst), cache.hits()), (3, 1));

    // Keyed on the tenant only: other claims share results; shared: all do.
    let runs = Arc::new(AtomicUsize::new(0));
    let tool = greet(&runs, true);
    let tenant = Cache::new(1 << 20).key_claims(["tenant"]);
    let shared = Cache::new(1 << 20).key_claims(["tenant"]).shared();
    for cache in [tenant, shared] {
        let stack = super::tests::stack(vec![Arc::new(cache)]);
        let one = caller("alice", "a", json!({"tenant": "acme", "session": "1"}));
        let two = caller("alice", "a", json!({"tenant": "acme", "session": "2"}));
        run_as(&stack, &tool, ada.clone(), Some(one)).await.unwrap();
        run_as(&stack, &tool, ada.clone(), Some(two)).await.unwrap();
    }
    assert_eq!(runs.load(SeqCst), 2);
}

#[tokio::test]
async fn cache_stays_within_its_bytes_dropping_the_least_recently_used() {
    let runs = Arc::new(AtomicUsize::new(0));
    let cache = Cache::new(2_000).shared();
    let stack = stack(vec![Arc::new(cache.clone())]);
    let tool = greet(&runs, true);
    let name = |i: usize| json!({"name": format!("{i:0>60}")});
    for i in 0..40 {
        run(&stack, &tool, name(i), None).await.unwrap();
        assert!(cache.bytes() <= 2_000, "{} bytes", cache.bytes());
        // The first stays the most recently used: it is never dropped.
        run(&stack, &tool, name(0), None).await.unwrap();
    }
    assert!(
        cache.len() < 40 && cache.len() > 5,
        "{} entries",
        cache.len()
    );
    assert_eq!(runs.load(SeqCst), 40);
    // A result over a quarter of the budget is not kept.
    let big = json!({"name": "x".repeat(600)});
    run(&stack, &tool, big.clone(), None).await.unwrap();
    run(&stack, &tool, big, None).await.unwrap();
    assert_eq!(runs.load(SeqCst), 42);
}

#[tokio::test]
async fn cache_entries_expire() {
    let runs = Arc::new(AtomicUsize::new(0));
    let cache = Cache::new(1 << 20).ttl(Duration::from_millis(1));
    let stack = stack(vec![Arc::new(cache.clone())]);
    let tool = greet(&runs, true);
    run(&stack, &tool, json!({"name": "a"}), None)
        .await
        .unwrap();
    let expired = Instant::now() + Duration::from_millis(2);
    while Instant::now() < expired {
        tokio::task::yield_now().await;
    }
    run(&stack, &tool, json!({"name": "a"}), None)
        .await
        .unwrap();
    assert_eq!((runs.load(SeqCst), cache.hits()), (2, 0));
}

#[tokio::test]
async fn masked_errors_keep_their_code_and_lose_their_text() {
    let stack = stack(vec![Arc::new(MaskErrors::new())]);
    let masked = run(&stack, &failing("TOOL_EXECUTION_ERROR"), json!({}), None)
        .await
        .unwrap_err();
    assert_eq!(masked.code().as_str(), "TOOL_EXECUTION_ERROR");
    assert!(!masked.message().contains("hunter2"), "{masked:?}");
    let reference = masked.details().unwrap()["reference"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(reference.len(), 16);
    assert!(masked.message().contains(&reference));
    // A tool's own code passes as it is, unless named.
    let own = run(&stack, &failing("QUOTA"), json!({}), None)
        .await
        .unwrap_err();
    assert!(own.message().contains("hunter2"));
    let stack = super::tests::stack(vec![Arc::new(MaskErrors::only().code("QUOTA"))]);
    let own = run(&stack, &failing("QUOTA"), json!({}), None)
        .await
        .unwrap_err();
    assert!(!own.message().contains("hunter2"));
    let plain = run(&stack, &failing("TOOL_EXECUTION_ERROR"), json!({}), None)
        .await
        .unwrap_err();
    assert!(plain.message().contains("hunter2"));
}

#[tokio::test]
async fn large_params_are_checked_on_the_blocking_pool_after_the_layers() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tool = greet(&runs, false);
    let stack = stack(vec![Arc::new(from_fn(|call: Call, next: Next| {
        next.run(call)
    }))]);
    let large = Some(Unchecked {
        max_violations: 10,
        large: true,
    });
    let name = "n".repeat(100_000);
    let ctx = context(None, CancellationToken::new());
    let call = Arc::clone(&stack).call(tool.clone(), json!({"name": name}), ctx, large);
    let out = tokio::time::timeout(WAIT, call)
        .await
        .expect("the call ends");
    assert_eq!(out.unwrap(), json!(format!("hello {name}")));
    let ctx = context(None, CancellationToken::new());
    let call = Arc::clone(&stack).call(tool.clone(), json!({"name": name, "x": 1}), ctx, large);
    let refused = tokio::time::timeout(WAIT, call)
        .await
        .expect("the call ends")
        .unwrap_err();
    assert_eq!(refused.code().as_str(), "INVALID_PARAMS");
    assert_eq!(runs.load(SeqCst), 1);
}

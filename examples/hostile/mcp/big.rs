//! Big requests on `/mcp` (mode `mcp-big-params`): `tools/call`s whose
//! arguments hold arrays of millions of zeros, the worst case of parsed
//! size per byte.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::TcpStream;

use super::{Answer, Tally, Target, call_body, exchange, post_once, request, zeros};
use crate::http::tcp_connect;
use crate::wire::{percentile, round3};

/// An `echo` call whose open arguments carry `n` zeros beside the message.
fn zeros_call(id: u64, n: usize) -> String {
    call_body(
        id,
        "echo",
        &format!(r#"{{"message":"x","junk":{}}}"#, zeros(n)),
    )
}

/// `count` requests of `body` at once, each on a connection of its own.
async fn at_once(t: &Target, body: &std::sync::Arc<Vec<u8>>, count: usize) -> Vec<Answer> {
    let tasks: Vec<_> = (0..count)
        .map(|_| {
            let t = t.clone();
            let body = std::sync::Arc::clone(body);
            tokio::spawn(async move { post_once(&t, &body, "", Duration::from_secs(30)).await })
        })
        .collect();
    let mut out = Vec::new();
    for task in tasks {
        if let Ok(Ok(a)) = task.await {
            out.push(a);
        }
    }
    out
}

fn tally_of(answers: &[Answer]) -> Tally {
    let mut tally = Tally::default();
    for a in answers {
        tally.add(&a.label(), a.ms);
    }
    tally
}

/// One keep-alive connection sending `body` again and again until
/// `deadline`, reading every answer: the answers and the failures.
async fn continuously(
    t: Target,
    body: std::sync::Arc<Vec<u8>>,
    deadline: Instant,
) -> (Tally, Vec<f64>, Vec<String>) {
    let mut tally = Tally::default();
    let mut times = Vec::new();
    let mut failures = Vec::new();
    let bytes = request(&t, &body, "");
    let mut conn: Option<(TcpStream, Vec<u8>)> = None;
    while Instant::now() < deadline {
        if conn.is_none() {
            match tcp_connect(&t.addr).await {
                Ok(s) => conn = Some((s, Vec::new())),
                Err(e) => {
                    failures.push(e);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let Some((s, buf)) = conn.as_mut() else {
            continue;
        };
        match exchange(s, buf, &bytes, Duration::from_secs(30)).await {
            Ok(a) => {
                tally.add(&a.label(), a.ms);
                times.push(a.ms);
                if a.closing {
                    conn = None;
                }
            }
            Err(e) => {
                tally.add("no answer", 0.0);
                if failures.len() < 5 {
                    failures.push(e);
                }
                conn = None;
            }
        }
    }
    (tally, times, failures)
}

/// Mode `mcp-big-params`.
pub(crate) async fn big_params(t: &Target, duration: Duration) -> Result<Value, String> {
    // (1) and (2): 10 MB of `[0,0,…]`, once, then 4 at once.
    let huge = std::sync::Arc::new(zeros_call(1, 5_000_000).into_bytes());
    let huge_bytes = huge.len();
    let one = at_once(t, &huge, 1).await;
    let four = at_once(t, &huge, 4).await;
    drop(huge);
    // (3): just under 1 MiB, 4 at once, then from 4 connections continuously.
    let near = std::sync::Arc::new(zeros_call(2, 500_000).into_bytes());
    let near_bytes = near.len();
    let near_four = at_once(t, &near, 4).await;
    let deadline = Instant::now() + duration;
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            tokio::spawn(continuously(
                t.clone(),
                std::sync::Arc::clone(&near),
                deadline,
            ))
        })
        .collect();
    let mut tally = Tally::default();
    let mut times = Vec::new();
    let mut failures = Vec::new();
    for task in tasks {
        if let Ok((part, ms_list, errors)) = task.await {
            tally.merge(&part);
            times.extend(ms_list);
            failures.extend(errors);
        }
    }
    times.sort_by(f64::total_cmp);
    let continuous_count = times.len();
    let refused: Vec<&Answer> = one.iter().chain(&four).collect();
    let summary = format!(
        "10 MB ({huge_bytes} B) call: {}; 4 at once: {}; {near_bytes} B calls 4 at once: {}; then {continuous_count} from 4 connections in {} s: {} (p50 {} / p99 {} ms)",
        tally_of(&one).summary(),
        tally_of(&four).summary(),
        tally_of(&near_four).summary(),
        duration.as_secs(),
        tally.summary(),
        percentile(&times, 50.0).map_or("—".to_owned(), |v| format!("{v:.1}")),
        percentile(&times, 99.0).map_or("—".to_owned(), |v| format!("{v:.1}")),
    );
    Ok(json!({
        "attack": "mcp-big-params",
        "name": "arrays of millions of zeros in tools/call arguments",
        "attacker_got": summary,
        "refused_requests": 5,
        "refused_answered": refused.iter().filter(|a| a.refused_clearly()).count(),
        "unanswered": 5 - refused.len(),
        "over_limit": {
            "request_bytes": huge_bytes,
            "one": one.iter().map(Answer::to_json).collect::<Vec<_>>(),
            "four_at_once": four.iter().map(Answer::to_json).collect::<Vec<_>>(),
        },
        "under_limit": {
            "request_bytes": near_bytes,
            "four_at_once": near_four.iter().map(Answer::to_json).collect::<Vec<_>>(),
            "continuous": {
                "seconds": duration.as_secs(),
                "connections": 4,
                "answers": continuous_count,
                "statuses": tally.to_json(),
                "p50_ms": percentile(&times, 50.0).map(round3),
                "p99_ms": percentile(&times, 99.0).map(round3),
                "max_ms": times.last().copied().map(round3),
                "failures": failures,
            },
        },
    }))
}

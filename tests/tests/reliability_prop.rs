//! The resumption property (docs/protocol.md §6.4, §11.3), randomised: N calls whose
//! tools finish at random moments, a connection dropped after a random number
//! of envelopes, several times, with random gaps; a client that always
//! resumes with its true `last_rx_seq` sees one gapless sequence on the
//! session and every call's `TOOL_UPDATE` and `TOOL_DONE` exactly once.

use crate::conn;
use crate::support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use conn::{Conn, Kind};
use haip::{Context, Tool, ToolError};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Value, json};
use support::{builder, executions, get_json, resume_hai, seq_of, start, stats_until};

/// Reports progress 50, sleeps `params.ms`, returns `{"napped": <call_id>}`.
fn nap() -> Tool {
    Tool::builder("nap")
        .description("Sleeps a little")
        .handler(|params: Value, ctx: Context| async move {
            ctx.progress(50.0);
            let ms = params["ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, ToolError>(json!({ "napped": ctx.call_id() }))
        })
        .build()
        .expect("nap is a valid tool")
}

/// What the client has seen of its session across all its connections.
struct Seen {
    session: String,
    calls: usize,
    last: u64,
    updates: HashMap<String, u32>,
    dones: HashMap<String, u32>,
}

impl Seen {
    /// Reads `n` envelopes: each must be on the session with the next `seq`.
    async fn read(&mut self, conn: &mut Conn, n: u64) {
        for _ in 0..n {
            let env = conn.recv().await;
            assert_eq!(
                (env["session"].as_str(), seq_of(&env)),
                (Some(self.session.as_str()), self.last + 1),
                "one gapless sequence on the session across connections: {env}"
            );
            self.last += 1;
            let p = &env["payload"];
            let call_id = p["call_id"].as_str().unwrap_or_default().to_owned();
            match env["type"].as_str() {
                Some("TOOL_UPDATE") => {
                    assert_eq!(p["progress"], 50, "{env}");
                    *self.updates.entry(call_id).or_default() += 1;
                }
                Some("TOOL_DONE") => {
                    assert_eq!(
                        (&p["status"], &p["result"]),
                        (&json!("OK"), &json!({ "napped": call_id })),
                        "{env}"
                    );
                    *self.dones.entry(call_id).or_default() += 1;
                }
                Some("HAI") => assert_eq!(
                    p["last_rx_seq"],
                    json!(self.calls.to_string()),
                    "the highest client seq: {env}"
                ),
                _ => panic!("unexpected envelope {env}"),
            }
        }
    }
}

/// One case: `naps[i]` is call i's sleep; `drops[j]` = (envelopes to read on
/// connection j before dropping it, gap before reconnecting). Returns the
/// longest time from a drop to the resumed session's first envelope.
async fn scenario(kind: Kind, naps: Vec<u64>, drops: Vec<(u64, u64)>) -> Duration {
    let (handle, _) = start(builder().tool(nap())).await;
    let addr = handle.local_addr();
    let n = naps.len();
    let mut conn = Conn::connect(kind, addr, None).await;
    conn.relax();
    let mut seen = Seen {
        session: conn.session.clone(),
        calls: n,
        last: 1,
        updates: HashMap::new(),
        dones: HashMap::new(),
    };
    for (i, ms) in naps.iter().enumerate() {
        let call = json!({"id": format!("call-{i}"), "seq": (i + 1).to_string(), "channel": "USER",
            "type": "TOOL_CALL", "payload": {"call_id": format!("n{i}"), "tool": "nap", "params": {"ms": ms}}});
        conn.send(&call).await;
    }
    stats_until(addr, "every call accepted", |s| {
        executions(s)[0] == n as u64
    })
    .await;
    // Everything the session will ever commit: its HAI, one update and one
    // TOOL_DONE per call, one HAI per resumption.
    let total = |resumes: u64| 1 + 2 * n as u64 + resumes;
    let mut max_gap = Duration::ZERO;
    let mut resumes = 0;
    for (j, &(reads, gap)) in drops.iter().enumerate() {
        // After a resumption read at least one envelope, so that the server
        // has handled the resuming HAI before this connection goes away.
        let reads = if j == 0 { reads } else { reads.max(1) };
        seen.read(&mut conn, reads.min(total(resumes) - seen.last))
            .await;
        drop(conn);
        let dropped_at = Instant::now();
        tokio::time::sleep(Duration::from_millis(gap)).await;
        conn = Conn::connect(kind, addr, None).await;
        conn.relax();
        let hai = resume_hai(
            &format!("resume-{j}"),
            &seen.session,
            &seen.last.to_string(),
        );
        conn.send(&hai).await;
        resumes += 1;
        seen.read(&mut conn, 1).await;
        max_gap = max_gap.max(dropped_at.elapsed());
    }
    seen.read(&mut conn, total(resumes) - seen.last).await;
    for i in 0..n {
        let id = format!("n{i}");
        let counts = (seen.updates.get(&id), seen.dones.get(&id));
        assert_eq!(
            counts,
            (Some(&1), Some(&1)),
            "call {id}: update and TOOL_DONE once each"
        );
    }
    conn.follow(&seen.session.clone(), seen.last);
    conn.ping_marker().await;
    let stats = get_json(addr, "/stats").await;
    let n = n as u64;
    assert_eq!(executions(&stats), [n, n, 0, 0, 0], "{stats}");
    drop(conn);
    handle.shutdown().await;
    max_gap
}

/// Runs [`scenario`] on a fresh runtime; prints the longest gap.
fn run(kind: Kind, naps: Vec<u64>, drops: Vec<(u64, u64)>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let gap = runtime.block_on(scenario(kind, naps, drops));
    eprintln!("{kind:?}: longest drop-to-resume gap {gap:?}");
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        max_shrink_iters: 16,
        failure_persistence: None,
        ..Config::default()
    }
}

fn naps() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(0u64..30, 1..=6)
}

fn drops() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..8, 0u64..40), 1..=4)
}

proptest! {
    #![proptest_config(config(16))]

    #[test]
    fn ws_every_call_done_exactly_once_across_reconnects(naps in naps(), drops in drops()) {
        run(Kind::Ws, naps, drops);
    }
}

proptest! {
    #![proptest_config(config(6))]

    #[test]
    fn sse_every_call_done_exactly_once_across_reconnects(naps in naps(), drops in drops()) {
        run(Kind::Sse, naps, drops);
    }

    #[test]
    fn stream_every_call_done_exactly_once_across_reconnects(naps in naps(), drops in drops()) {
        run(Kind::Stream, naps, drops);
    }
}

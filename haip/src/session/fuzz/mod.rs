//! Fuzzing the decoder and the session core on stable Rust, driven by proptest.
//!
//! Two families of properties, both fed through the same socket-less harness
//! ([`Run`]) that plays the transport (docs/protocol.md §2.2 step 1, §13) and the client:
//!
//! 1. **Decoder.** Arbitrary bytes, arbitrary strings and mutated valid
//!    envelopes (bytes flipped, inserted, deleted, repeated, cut off) go through
//!    [`decode`] and through a session's `handle_text` / `handle_binary`. Nothing
//!    panics; the decoder agrees with a plain `serde_json::Value` reading of the
//!    same text (§2.2 steps 2–5); every envelope the session commits is JSON
//!    with the seven required fields (§2.1, §2.4).
//! 2. **Envelope sequences.** Random sequences of inbound units — `TOOL_CALL`s
//!    whose call ids collide (string, numeric, absent), aimed at fast, slow,
//!    gated, panicking, failing, timing-out and unknown tools with valid,
//!    invalid, absent and large params; `TOOL_CANCEL`, runs, `PING`,
//!    `REPLAY_REQUEST`, pauses, `FLOW_UPDATE`s with extreme numbers, `HAI`s,
//!    two-frame binary (right, wrong and missing frames), junk — interleaved with
//!    draining the outbox, letting tool tasks run and letting time pass (the
//!    runtime's paused clock and the session's injected one together, up to
//!    400 s at a step, past `replay_window_time`), under a
//!    handful of configurations (small slot and queue limits, strict flow
//!    control, a tight outbox, small outbound messages, short timeouts). At the
//!    end the harness resumes every channel, winds the calls down (server
//!    shutdown, or releasing the gated tools) and runs the event loop until the
//!    session is idle. Checked: no panic; committed `seq`s run 1, 2, 3, … with no
//!    gap, and replays are byte-identical (§11); exactly one `TOOL_DONE` per
//!    accepted `TOOL_CALL`, after every `TOOL_UPDATE` of that call (§6.4–§6.7,
//!    §6.9); a duplicate `call_id` is refused exactly while the call holding it
//!    is active; byte accounting back to zero (§18.1).
//!
//! Tool tasks run on a current-thread tokio runtime whose clock is paused: tool
//! timeouts and the cancel grace period elapse as soon as nothing else can run,
//! so a call that never ends fails an assertion instead of hanging the test.
//!
//! By default the module runs 2048 decoder cases, 256 arbitrary-input sessions
//! and 256 envelope sequences: about 5 s in a debug build on 2 cores. Ask for
//! more with proptest's own variable (it sets every test's case count here;
//! `PROPTEST_RNG_SEED=<n>` replays a run):
//!
//! ```text
//! PROPTEST_CASES=20000 cargo test -p haip --lib session::fuzz --release
//! ```
//!
//! No regression files are written: a case found failing is shrunk and kept
//! below as a test of its own.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::Bytes;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{Index, select};
use proptest::strategy::Union;
use serde_json::{Map, Value, json};
use tokio::sync::{Semaphore, mpsc};

use super::{Action, Backlog, Clock, Control, FakeClock, Overflow, RandomIds, Session, Shared};
use crate::Context;
use crate::exec::CallEvent;
use crate::protocol::{Channel, ErrorCode, EventType, Inbound, decode, is_binary_envelope};
use crate::session::SessionConfig as Config;
use crate::stats::Door;
use crate::tool::{Registry, Tool, ToolError, builtin};

/// Cases of the decoder-only property (cheap: no session).
const DECODE_CASES: u32 = 2048;
/// Cases of the arbitrary-input-into-a-session property.
const INPUT_CASES: u32 = 256;
/// Cases of the envelope-sequence property (a runtime and a session each).
const SEQUENCE_CASES: u32 = 256;

/// How long (on the paused clock) the wind-down may wait for a call event
/// before the calls count as never ending: far beyond any timeout or grace.
const HANG: Duration = Duration::from_secs(3600);

/// The channel names the server sends on (docs/protocol.md §4).
const CHANNELS: [&str; 5] = ["USER", "AGENT", "SYSTEM", "AUDIO_IN", "AUDIO_OUT"];

/// Returns `Err(message)` from the enclosing function unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// `default_cases`, unless `PROPTEST_CASES` asks for another count. No
/// failure-persistence files: they would land in the source tree.
fn proptest_config(default_cases: u32) -> ProptestConfig {
    let base = ProptestConfig::default();
    let cases = if std::env::var_os("PROPTEST_CASES").is_some() {
        base.cases
    } else {
        default_cases
    };
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..base
    }
}

/// A runtime per case: tool tasks interleave with the harness only where it
/// yields, and the paused clock makes timeouts and grace periods instant.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
}

/// At most `max` characters of `text`, for failure messages.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        format!("{}…", text.chars().take(max).collect::<String>())
    }
}

mod decoder;
mod harness;
mod sequences;
mod tools;

use decoder::*;
use harness::*;
use tools::*;

// ----- regressions ---------------------------------------------------------------------

/// Sends `units` (text messages) to a fresh WebSocket session under `config`,
/// then winds it down with a shutdown, checking everything the fuzzer does.
fn replay_units(config: Config, units: &[String]) -> Result<(), String> {
    runtime().block_on(async {
        let mut run = Run::new(config, true)?;
        for unit in units {
            run.text(unit)?;
            run.drain()?;
        }
        run.finish(true).await
    })
}

/// Every envelope the server builds from one message must fit in one
/// outbound message, or a call could end without its `TOOL_DONE` (found by
/// this harness: an unknown tool's name or a call id longer than
/// `max_outbound_message_bytes` made both the `ERROR` and the `TOOL_DONE`
/// too large to send). So `build()` refuses an outbound limit under three
/// times the inbound one...
#[test]
fn an_outbound_limit_too_small_for_the_replies_is_refused() {
    let config = Config {
        max_outbound_message_bytes: 4096,
        ..Config::default()
    };
    let error = config.validate().expect_err("4096 is less than 3 MiB");
    assert!(
        error.to_string().contains("max_outbound_message_bytes"),
        "{error}"
    );
}

/// ... and under the smallest valid limits, the longest tool name and call
/// id a message can carry still get their `ERROR` and `TOOL_DONE`.
#[test]
fn the_longest_names_a_message_can_carry_still_get_their_tool_done() {
    let config = Config {
        max_outbound_message_bytes: 4096,
        max_message_bytes: 4096 / 3,
        ..Config::default()
    };
    assert!(config.validate().is_ok());
    let room = config.max_message_bytes;
    let fill = |call: Value, field: &str| {
        let short = call.to_string().len();
        let mut call = call;
        call["payload"][field] = json!("x".repeat(room - short));
        assert_eq!(call.to_string().len(), room);
        call.to_string()
    };
    let unknown = fill(
        json!({"id": "m0", "type": "TOOL_CALL", "payload": {"call_id": "c1", "tool": ""}}),
        "tool",
    );
    let long_id = fill(
        json!({"id": "m1", "type": "TOOL_CALL",
            "payload": {"call_id": "", "tool": "echo", "params": {"message": "hi"}}}),
        "call_id",
    );
    if let Err(e) = replay_units(config, &[unknown, long_id]) {
        panic!("{}", clip(&e, 400));
    }
}

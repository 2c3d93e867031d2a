//! Hostile: how a HAIP server holds up against hostile and slow clients.
//!
//! A measurement helper for `bench/reliability.sh`, not an example of using
//! `haip`. Two halves:
//!
//! - `hostile serve` runs the quickstart's server (built-in and annotated
//!   tools, default settings, `HAIP_ADDR`) plus one extra tool, `blob`
//!   (`{"bytes": n}` ⇒ `{"data": "<n × 'x'>"}`, n ≤ 64 MiB), so results of any
//!   size can be asked for.
//! - `hostile ATTACK ws://127.0.0.1:PORT/haip [--duration SECS] [--count N]`
//!   runs one attack against such a server with raw WebSocket and raw TCP
//!   clients (every byte under control), while a separate *canary* client,
//!   connected before the attack starts, calls `echo` about 50 times a second
//!   and times each call from send to its `TOOL_DONE`.
//!
//! | Attack | What it does |
//! |---|---|
//! | `1` | three clients send 900 KB `echo` calls as fast as they can and never read |
//! | `2` | upstream POSTs: a body trickling 1 byte/s; 200 stalled 10 MiB bodies; an absurd `Content-Length` |
//! | `3` | `create_user` with 125 000 unknown params; `blob` results of 3, 10 and 20 MiB |
//! | `4` | a reader: 5000 PINGs then `REPLAY_REQUEST`; resumption after 5000 PINGs; 5000 PINGs in one SSE upstream POST |
//! | `5` | four clients send ~1 MB `create_user` params continuously, reading the replies |
//! | `6` | 10 000 silent WebSocket connections (more with `--count`) |
//! | `7` | 400 sessions each fill ~1 MiB of replay window, then vanish without a close |
//! | `8` | small ones: huge and missing binary frames, overflowing lengths and credits, invalid UTF-8, reserved opcodes and bits, a spike of 900 KB calls that are read |
//! | `soak` | calls at `--rate` per second mixing `echo`, `process_file` (some cancelled), abrupt disconnects every 9 s and resumptions, a walk-away on every tenth disconnect (the clients in turn), for `--duration` seconds |
//! | `canary` | nothing but the canary, for `--duration` seconds (the script's check that a server still answers after an attack) |
//!
//! And the `/mcp` door (MCP Streamable HTTP on the same port), against
//! `http://127.0.0.1:PORT/mcp` of a server serving it statelessly
//! (`HAIP_MCP_SESSIONS=0`: the attacks and the canary send plain POSTs, no
//! `initialize`), with an MCP canary calling `echo` on `/mcp` every 100 ms
//! (see `mcp/`):
//!
//! | Attack | What it does |
//! |---|---|
//! | `mcp-stalled-bodies` | `--count` (600) POSTs announcing 10 MiB, then as many announcing 1 048 000 bytes that send all but 100 and trickle 1 byte/s |
//! | `mcp-stall` | one body each: trickling 1 byte/s, nothing after the headers, `Expect: 100-continue` then nothing, chunked with no chunk |
//! | `mcp-big-params` | 10 MB `tools/call`s holding 5 million zeros (1, then 4 at once); ~1 MB ones (4 at once, then from 4 connections for `--duration` s, 15) |
//! | `mcp-unread-answers` | `--count` (100) connections pipeline `echo` calls with ~2 MiB answers and never read them |
//! | `mcp-progress-token` | progress tokens of 9 MB, 300 bytes, and 200 bytes (on `process_file`, unread while it runs) |
//! | `mcp-origin` | `echo` with `Origin` `http://evil.example`, `null`, `http://localhost:6274`, none |
//! | `mcp-log-flood` | `--count` (100) each: a 1 MB method name, a 1 MB tool name, `initialize` with a 1 MB client name |
//! | `mcp-errors` | malformed JSON-RPC (invalid JSON, batch, non-object, no `jsonrpc`, bad `arguments`, bad level) and HTTP |
//! | `mcp-canary` | nothing but the MCP canary, for `--duration` seconds |
//!
//! ```text
//! cargo run --release --example hostile -- serve                 # HAIP_ADDR=127.0.0.1:PORT
//! cargo run --release --example hostile -- 1 ws://127.0.0.1:PORT/haip --duration 30
//! cargo run --release --example hostile -- mcp-stall http://127.0.0.1:PORT/mcp
//! ```
//!
//! Each run prints one JSON object on standard output: `attack`,
//! `attacker_got` (a short summary of the statuses, errors and close codes
//! seen), `accepted_calls`, `tool_dones`, `lost_tool_dones` (accepted calls
//! that got no `TOOL_DONE`, where the attacker reads), the attack's own
//! fields, and `canary` (`p50_ms`, `p99_ms`, `failed`). Only 127.0.0.1 is ever
//! contacted; every loop is bounded in count and time.
//!
//! The code: `main.rs` (arguments, dispatch, `serve`), `wire.rs` (raw
//! WebSocket clients and shared helpers), `http.rs` (raw TCP and HTTP/1.1),
//! `canary.rs`, `attacks/` (attacks 1–8), `soak.rs`, and `mcp/` (the
//! `/mcp` attacks and their canary).

use std::net::ToSocketAddrs;
use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

// Links the annotated tools (and the mimalloc allocator) into this binary.
use haip_examples as _;

mod attacks;
mod canary;
mod http;
mod mcp;
mod soak;
mod wire;

use crate::attacks::{crowd, flood, oversize, replay, small, upstream, validation};
use crate::canary::Canary;
use crate::http::{active_connections, stats};
use crate::wire::round3;

/// Longest attack or soak this tool agrees to run.
const MAX_DURATION_SECS: u64 = 900;
/// Most connections attack 6 opens.
const MAX_COUNT: usize = 12_000;

/// When this process started; the `at_s` times in reports count from here.
static T0: OnceLock<Instant> = OnceLock::new();

/// Seconds since [`T0`].
fn clock() -> f64 {
    round3(T0.get_or_init(Instant::now).elapsed().as_secs_f64())
}

// ---------------------------------------------------------------------------
// Arguments

struct Args {
    mode: String,
    url: String,
    /// `127.0.0.1:PORT`, for raw HTTP.
    addr: String,
    duration: Option<Duration>,
    count: Option<usize>,
    rate: Option<f64>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().ok_or(USAGE)?;
    let mut url = None;
    let mut duration = None;
    let mut count = None;
    let mut rate = None;
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--duration" => {
                let secs: u64 = value("--duration")?
                    .parse()
                    .map_err(|e| format!("--duration: {e}"))?;
                if secs == 0 || secs > MAX_DURATION_SECS {
                    return Err(format!(
                        "--duration must be between 1 and {MAX_DURATION_SECS} seconds"
                    ));
                }
                duration = Some(Duration::from_secs(secs));
            }
            "--count" => {
                let n: usize = value("--count")?
                    .parse()
                    .map_err(|e| format!("--count: {e}"))?;
                if n == 0 || n > MAX_COUNT {
                    return Err(format!("--count must be between 1 and {MAX_COUNT}"));
                }
                count = Some(n);
            }
            "--rate" => {
                let r: f64 = value("--rate")?
                    .parse()
                    .map_err(|e| format!("--rate: {e}"))?;
                if !(1.0..=200_000.0).contains(&r) {
                    return Err("--rate must be between 1 and 200000 calls/s".to_owned());
                }
                rate = Some(r);
            }
            _ if (arg.starts_with("ws://") || arg.starts_with("http://")) && url.is_none() => {
                url = Some(arg);
            }
            _ => return Err(format!("unexpected argument `{arg}`\n{USAGE}")),
        }
    }
    if mode == "serve" {
        return Ok(Args {
            mode,
            url: String::new(),
            addr: String::new(),
            duration,
            count,
            rate,
        });
    }
    let url = url.ok_or(USAGE)?;
    // The `/mcp` door is plain HTTP; the HAIP attacks speak WebSocket.
    let scheme = if mode.starts_with("mcp-") {
        "http://"
    } else {
        "ws://"
    };
    let addr = check_loopback(&url, scheme)?;
    Ok(Args {
        mode,
        url,
        addr,
        duration,
        count,
        rate,
    })
}

pub(crate) const USAGE: &str = "usage: hostile serve | hostile (1|2|3|4|5|6|7|8|soak|canary) ws://127.0.0.1:PORT/haip [--duration SECS] [--count N] [--rate CALLS_PER_S]
       hostile (mcp-stalled-bodies|mcp-stall|mcp-big-params|mcp-unread-answers|mcp-progress-token|mcp-origin|mcp-log-flood|mcp-errors|mcp-canary) http://127.0.0.1:PORT/mcp [--duration SECS] [--count N]";

/// Refuses anything but this machine's loopback, and a URL not of
/// `scheme`; returns `host:port`.
fn check_loopback(url: &str, scheme: &str) -> Result<String, String> {
    let rest = url
        .strip_prefix(scheme)
        .ok_or_else(|| format!("the URL must start with {scheme}"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    let addrs: Vec<_> = authority
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve `{authority}`: {e}"))?
        .collect();
    if addrs.is_empty() || !addrs.iter().all(|a| a.ip().is_loopback()) {
        return Err(format!("`{authority}` is not a loopback address"));
    }
    Ok(authority.to_owned())
}

// ---------------------------------------------------------------------------
// The server under test

fn blob_tool() -> Result<haip::Tool, haip::Error> {
    haip::Tool::builder("blob")
        .description("Return a string of `bytes` letters x")
        .input_schema(json!({
            "type": "object",
            "properties": {"bytes": {"type": "integer", "minimum": 0, "maximum": 67_108_864}},
            "required": ["bytes"],
            "additionalProperties": false
        }))
        .handler(|params: Value, _ctx: haip::Context| async move {
            let n = params["bytes"].as_u64().unwrap_or(0).min(67_108_864) as usize;
            Ok(json!({ "data": "x".repeat(n) }))
        })
        .build()
}

async fn serve() -> Result<(), haip::Error> {
    haip_examples::init_logging("warn");
    haip::Server::builder()
        .from_env()
        .builtin_tools()
        .annotated_tools()
        .tool(blob_tool()?)
        .build()?
        .run()
        .await
}

// ---------------------------------------------------------------------------

async fn run(args: Args) -> Value {
    let canary = match Canary::start(&args.url) {
        Ok(c) => c,
        Err(e) => return json!({"attack": args.mode, "error": e}),
    };
    let started = Instant::now();
    let attack_started_at = clock();
    let result = match args.mode.as_str() {
        "1" | "flood" => flood::attack_flood(&args).await,
        "2" | "upstream" => upstream::attack_upstream(&args).await,
        "3" | "oversize" => oversize::attack_oversize(&args).await,
        "4" | "replay" => replay::attack_replay(&args).await,
        "5" | "validation" => validation::attack_validation(&args).await,
        "6" | "connections" => crowd::attack_connections(&args).await,
        "7" | "replay-budget" => crowd::attack_replay_budget(&args).await,
        "8" | "small" => small::attack_small(&args).await,
        "soak" => soak::soak(&args).await,
        "canary" => {
            tokio::time::sleep(args.duration.unwrap_or(Duration::from_secs(10))).await;
            Ok(
                json!({"attack": "canary", "attacker_got": "nothing (canary only)", "accepted_calls": 0, "tool_dones": 0, "lost_tool_dones": 0}),
            )
        }
        other => Err(format!("unknown attack `{other}`\n{USAGE}")),
    };
    let mut report = result.unwrap_or_else(|e| json!({"attack": args.mode, "error": e}));
    report["attack_seconds"] = json!(round3(started.elapsed().as_secs_f64()));
    report["attack_started_at_s"] = json!(attack_started_at);
    tokio::time::sleep(Duration::from_secs(1)).await;
    report["active_connections_after"] = active_connections(&args.addr).await;
    if let Some(after) = stats(&args.addr).await {
        report["stats_after"] = json!({
            "replayBytes": after["replayBytes"],
            "detachedSessions": after["detachedSessions"],
            "outboundBytes": after["outboundBytes"],
            "connectionsClosed": after["connectionsClosed"],
            "toolExecutions": after["toolExecutions"],
        });
    }
    report["canary"] = canary.finish();
    report
}

fn main() -> ExitCode {
    T0.get_or_init(Instant::now);
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    if args.mode == "serve" {
        return match runtime.block_on(serve()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let report = if args.mode.starts_with("mcp-") {
        runtime.block_on(mcp::run(&args))
    } else {
        runtime.block_on(run(args))
    };
    println!("{report}");
    // Sockets still held by aborted tasks go with the process.
    runtime.shutdown_timeout(Duration::from_secs(1));
    ExitCode::SUCCESS
}

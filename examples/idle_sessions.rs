//! Idle sessions: the memory a HAIP server spends per connected, idle client.
//!
//! A benchmark helper for `bench/run.sh`, not an example of using `haip`. It
//! opens `--count` WebSocket connections (at most 10 000) to a loopback URL,
//! waits until every one has received the server's first message (which must be
//! a `HAI` with a `session`), then holds them, sending nothing, for `--hold`
//! seconds (at most 60) and closes them. With `--server-pid` it reads the
//! server's `VmRSS` from `/proc/PID/status` after one warm-up connection and
//! again once all sessions are open, and reports the difference per session.
//! Everything is bounded: each connection gets 10 s, the whole opening phase 60 s.
//!
//! ```text
//! cargo run --release --example idle_sessions -- ws://127.0.0.1:8080/haip --count 1000 --server-pid 1234
//! ```
//!
//! Prints one JSON object on standard output: `sessions`, `seconds_to_open`,
//! and with `--server-pid` `rss_before_bytes`, `rss_after_bytes`,
//! `rss_per_session_bytes`.

use std::net::ToSocketAddrs;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use futures_util::{StreamExt, stream};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

const MAX_COUNT: usize = 10_000;
const MAX_HOLD_SECS: u64 = 60;
const PER_CONNECTION: Duration = Duration::from_secs(10);
const OPENING_DEADLINE: Duration = Duration::from_secs(60);
const CONCURRENT_OPENS: usize = 64;
/// Lets the server finish whatever it does after sending `HAI` before the RSS is read.
const SETTLE: Duration = Duration::from_millis(500);

struct Args {
    url: String,
    count: usize,
    hold: Duration,
    server_pid: Option<u32>,
}

fn parse_args() -> Result<Args, String> {
    let mut url = None;
    let mut count = 1000;
    let mut hold = 3;
    let mut server_pid = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--count" => {
                count = value("--count")?
                    .parse()
                    .map_err(|e| format!("--count: {e}"))?
            }
            "--hold" => {
                hold = value("--hold")?
                    .parse()
                    .map_err(|e| format!("--hold: {e}"))?
            }
            "--server-pid" => {
                server_pid = Some(
                    value("--server-pid")?
                        .parse()
                        .map_err(|e| format!("--server-pid: {e}"))?,
                )
            }
            _ if arg.starts_with("ws://") && url.is_none() => url = Some(arg),
            _ => return Err(format!("unexpected argument `{arg}`")),
        }
    }
    let url = url.ok_or("usage: idle_sessions ws://127.0.0.1:PORT/haip [--count N] [--hold SECS] [--server-pid PID]")?;
    if count == 0 || count > MAX_COUNT {
        return Err(format!("--count must be between 1 and {MAX_COUNT}"));
    }
    if hold > MAX_HOLD_SECS {
        return Err(format!("--hold must be at most {MAX_HOLD_SECS}"));
    }
    check_loopback(&url)?;
    Ok(Args {
        url,
        count,
        hold: Duration::from_secs(hold),
        server_pid,
    })
}

/// Refuses anything but this machine's loopback: this is load.
fn check_loopback(url: &str) -> Result<(), String> {
    let rest = url.strip_prefix("ws://").unwrap_or(url);
    let authority = rest.split('/').next().unwrap_or_default();
    let addrs: Vec<_> = authority
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve `{authority}`: {e}"))?
        .collect();
    if addrs.is_empty() || !addrs.iter().all(|a| a.ip().is_loopback()) {
        return Err(format!("`{authority}` is not a loopback address"));
    }
    Ok(())
}

/// `VmRSS` of a process, in bytes.
fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Connects and waits for the server's `HAI`.
async fn open(url: &str) -> Result<Socket, String> {
    let attempt = async {
        let (mut ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(text))) => {
                    let envelope: Value =
                        serde_json::from_str(&text).map_err(|e| format!("first message: {e}"))?;
                    if envelope["type"] == "HAI" && envelope["session"].is_string() {
                        return Ok(ws);
                    }
                    return Err(format!("expected HAI first, got {text}"));
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(format!("read: {e}")),
                None => return Err("closed before HAI".to_owned()),
            }
        }
    };
    tokio::time::timeout(PER_CONNECTION, attempt)
        .await
        .unwrap_or_else(|_| Err("no HAI within 10 s".to_owned()))
}

async fn close(mut ws: Socket) {
    let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(None)).await;
}

async fn run(args: Args) -> Result<Value, String> {
    // One warm-up session, so one-time costs are not charged to the others.
    let warm_up = open(&args.url).await?;
    tokio::time::sleep(SETTLE).await;
    let before = args.server_pid.and_then(rss_bytes);

    let started = Instant::now();
    let opening = stream::iter(0..args.count)
        .map(|_| open(&args.url))
        .buffer_unordered(CONCURRENT_OPENS)
        .collect::<Vec<_>>();
    let results = tokio::time::timeout(OPENING_DEADLINE, opening)
        .await
        .map_err(|_| format!("not all sessions open within {OPENING_DEADLINE:?}"))?;
    let seconds_to_open = started.elapsed().as_secs_f64();
    let mut sockets = Vec::with_capacity(args.count);
    let mut failures = Vec::new();
    for result in results {
        match result {
            Ok(ws) => sockets.push(ws),
            Err(e) => failures.push(e),
        }
    }
    tokio::time::sleep(SETTLE).await;
    let after = args.server_pid.and_then(rss_bytes);
    let opened = sockets.len();

    tokio::time::sleep(args.hold).await;
    sockets.push(warm_up);
    stream::iter(sockets)
        .for_each_concurrent(CONCURRENT_OPENS, close)
        .await;

    if let Some(first) = failures.first() {
        return Err(format!(
            "{} of {} sessions failed; first: {first}",
            failures.len(),
            args.count
        ));
    }
    let mut report = json!({"sessions": opened, "seconds_to_open": seconds_to_open});
    if let (Some(before), Some(after)) = (before, after) {
        report["rss_before_bytes"] = json!(before);
        report["rss_after_bytes"] = json!(after);
        report["rss_per_session_bytes"] =
            json!((after as f64 - before as f64) / opened.max(1) as f64);
    } else if let Some(pid) = args.server_pid {
        return Err(format!("cannot read /proc/{pid}/status"));
    }
    Ok(report)
}

fn main() -> ExitCode {
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
    match runtime.block_on(run(args)) {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

//! Several instances: what sharing sessions through Redis costs.
//!
//! A benchmark helper for `bench/cluster.sh`, not an example of using `haip`.
//! Given two instances sharing one Redis server (`--a`, `--b`: their
//! WebSocket URLs on loopback) and that Redis server (`--redis`, loopback):
//!
//! - `--resumptions N` (at most 5000): N times, a session is opened on `a`,
//!   one `echo` call made, the connection closed; then the session is resumed
//!   on `b` (relayed to `a`, which still runs it). Reported: the time from
//!   sending the resuming `HAI` to receiving the confirming one, p50 and p99.
//! - `--detached M` (at most 10 000): M sessions opened on `a`, one `echo`
//!   call each, closed (detached: resumable for `replay_window_time`);
//!   Redis's `used_memory` is read before and after. Reported: the
//!   difference per session.
//!
//! Every wait is bounded (10 s per step); only the given loopback addresses
//! are contacted. Prints one JSON object on standard output.
//!
//! ```text
//! cargo run --release --example cluster_bench -- --a ws://127.0.0.1:8081/haip \
//!     --b ws://127.0.0.1:8082/haip --redis 127.0.0.1:6379 --resumptions 1000 --detached 1000
//! ```

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Socket = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

const STEP: Duration = Duration::from_secs(10);
const MAX_RESUMPTIONS: usize = 5_000;
const MAX_DETACHED: usize = 10_000;
/// Lets the instances write their last records before Redis is measured.
const SETTLE: Duration = Duration::from_secs(1);

struct Args {
    a: String,
    b: String,
    redis: SocketAddr,
    resumptions: usize,
    detached: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut a = None;
    let mut b = None;
    let mut redis = None;
    let mut resumptions = 1000;
    let mut detached = 1000;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--a" => a = Some(value),
            "--b" => b = Some(value),
            "--redis" => {
                let addr: SocketAddr = value
                    .parse()
                    .map_err(|_| format!("--redis {value}: not host:port"))?;
                if !addr.ip().is_loopback() {
                    return Err(format!("--redis {value}: only loopback is measured"));
                }
                redis = Some(addr);
            }
            "--resumptions" => resumptions = number(&flag, &value, MAX_RESUMPTIONS)?,
            "--detached" => detached = number(&flag, &value, MAX_DETACHED)?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    let loopback =
        |url: &String| url.starts_with("ws://127.0.0.1:") || url.starts_with("ws://[::1]:");
    let a = a
        .filter(loopback)
        .ok_or("--a ws://127.0.0.1:PORT/haip is required")?;
    let b = b
        .filter(loopback)
        .ok_or("--b ws://127.0.0.1:PORT/haip is required")?;
    let redis = redis.ok_or("--redis 127.0.0.1:PORT is required")?;
    Ok(Args {
        a,
        b,
        redis,
        resumptions,
        detached,
    })
}

fn number(flag: &str, value: &str, max: usize) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("{flag} must be a whole number from 1 to {max}")),
    }
}

async fn connect(url: &str) -> Result<Socket, String> {
    let (socket, _) = tokio::time::timeout(STEP, tokio_tungstenite::connect_async(url))
        .await
        .map_err(|_| format!("connecting to {url} timed out"))?
        .map_err(|e| format!("connecting to {url}: {e}"))?;
    Ok(socket)
}

/// The next envelope.
async fn next(socket: &mut Socket) -> Result<Value, String> {
    loop {
        let message = tokio::time::timeout(STEP, socket.next())
            .await
            .map_err(|_| "no envelope within 10 s".to_owned())?
            .ok_or("the connection closed")?
            .map_err(|e| e.to_string())?;
        if let Message::Text(text) = message {
            return serde_json::from_str(&text).map_err(|e| e.to_string());
        }
    }
}

async fn send(socket: &mut Socket, value: Value) -> Result<(), String> {
    socket
        .send(Message::text(value.to_string()))
        .await
        .map_err(|e| e.to_string())
}

/// Opens a session on `url`, makes one `echo` call, closes the connection;
/// returns the session id and the last `seq` received.
async fn detached_session(url: &str) -> Result<(String, String), String> {
    let mut socket = connect(url).await?;
    let hai = next(&mut socket).await?;
    let session = hai["session"]
        .as_str()
        .ok_or("HAI without a session")?
        .to_owned();
    send(
        &mut socket,
        json!({"id": "c1", "channel": "USER", "type": "TOOL_CALL",
            "payload": {"call_id": "e1", "tool": "echo", "params": {"message": "hello"}}}),
    )
    .await?;
    let seq = loop {
        let env = next(&mut socket).await?;
        if env["type"] == "TOOL_DONE" {
            break env["seq"].as_str().unwrap_or("0").to_owned();
        }
    };
    let _ = socket.close(None).await;
    Ok((session, seq))
}

/// Resumes `session` on `url`; the time from sending the `HAI` to the
/// confirming one.
async fn resume(url: &str, session: &str, last_rx_seq: &str) -> Result<Duration, String> {
    let mut socket = connect(url).await?;
    next(&mut socket).await?; // the fresh session's HAI
    let started = Instant::now();
    send(
        &mut socket,
        json!({"id": "r1", "session": session, "channel": "SYSTEM", "type": "HAI",
            "payload": {"haip_version": "1.1.2", "accept_major": [1], "last_rx_seq": last_rx_seq}}),
    )
    .await?;
    loop {
        let env = next(&mut socket).await?;
        match env["type"].as_str() {
            Some("HAI") if env["session"] == session => break,
            Some("ERROR") => return Err(format!("resumption refused: {env}")),
            _ => {}
        }
    }
    let took = started.elapsed();
    let _ = socket.close(None).await;
    Ok(took)
}

/// Redis's `used_memory`, by `INFO memory` on a plain connection.
fn redis_used_memory(addr: SocketAddr) -> Result<u64, String> {
    let mut stream = TcpStream::connect_timeout(&addr, STEP).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(STEP))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"INFO memory\r\n")
        .map_err(|e| e.to_string())?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    // A bulk string: `$LEN\r\n` then the text; read until `used_memory:` is in.
    while !String::from_utf8_lossy(&reply).contains("used_memory_human") {
        let n = stream.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&reply)
        .lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "no used_memory in INFO memory".to_owned())
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

async fn run(args: Args) -> Result<Value, String> {
    // Resumption on the other instance.
    let mut times = Vec::with_capacity(args.resumptions);
    for _ in 0..args.resumptions {
        let (session, seq) = detached_session(&args.a).await?;
        times.push(resume(&args.b, &session, &seq).await?);
    }
    times.sort();
    // Redis memory per detached session.
    tokio::time::sleep(SETTLE).await;
    let before = redis_used_memory(args.redis)?;
    for _ in 0..args.detached {
        detached_session(&args.a).await?;
    }
    tokio::time::sleep(SETTLE).await;
    let after = redis_used_memory(args.redis)?;
    Ok(json!({
        "resumptions": times.len(),
        "resume_p50_ms": percentile(&times, 0.50),
        "resume_p99_ms": percentile(&times, 0.99),
        "detached": args.detached,
        "redis_used_before_bytes": before,
        "redis_used_after_bytes": after,
        "redis_bytes_per_detached_session": (after as f64 - before as f64) / args.detached as f64,
    }))
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("cluster_bench: {e}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cluster_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

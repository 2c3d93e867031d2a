//! What embedding costs: the same server standalone (haip's own listener)
//! and nested in an axum application (`src/axum_app.rs`, at `/agent`), and
//! a load generator for the MCP door. `bench/embedded.sh` runs them; the
//! HAIP door is loaded by `haip bench`.
//!
//! ```text
//! embed_bench serve standalone|embedded        # on HAIP_ADDR, built-in tools
//! embed_bench mcp-load URL CONNECTIONS SECONDS SERVER_PID
//! ```
//!
//! `mcp-load` keeps CONNECTIONS HTTP/1.1 keep-alive connections to URL
//! (loopback only), each with one MCP 2026-07-28 `tools/call` of `echo` in
//! flight, for SECONDS, and prints one JSON object: calls/s, latency
//! percentiles, and the server's CPU per call (from `/proc/PID/stat`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["serve", mode] => serve(mode).await,
        ["mcp-load", url, connections, seconds, pid] => {
            mcp_load(url, connections.parse()?, seconds.parse()?, pid.parse()?).await
        }
        _ => Err("usage: embed_bench serve standalone|embedded | embed_bench mcp-load URL CONNECTIONS SECONDS SERVER_PID".into()),
    }
}

async fn serve(mode: &str) -> Result<(), Box<dyn std::error::Error>> {
    haip_examples::init_logging("warn");
    let addr = std::env::var("HAIP_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    let builder = haip::Server::builder().builtin_tools();
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    match mode {
        "standalone" => {
            let handle = builder.build()?.serve(listener).await?;
            let _ = tokio::signal::ctrl_c().await;
            handle.shutdown().await;
        }
        "embedded" => {
            let haip = builder
                .path_prefix("/agent")
                .build()?
                .into_service()
                .await?;
            let app = haip_examples::axum_app::app(haip, "/agent");
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await?;
        }
        other => return Err(format!("unknown mode {other:?}: standalone or embedded").into()),
    }
    Ok(())
}

/// `http://HOST:PORT/PATH` → the address and the path.
fn split_url(url: &str) -> Result<(SocketAddr, String), Box<dyn std::error::Error>> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("mcp-load takes an http:// URL")?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let addr: SocketAddr = authority.parse()?;
    if !addr.ip().is_loopback() {
        return Err("mcp-load only loads loopback servers".into());
    }
    Ok((
        addr,
        if path.is_empty() {
            "/".to_owned()
        } else {
            path.to_owned()
        },
    ))
}

async fn mcp_load(
    url: &str,
    connections: usize,
    seconds: u64,
    pid: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    if !(1..=1000).contains(&connections) || !(1..=120).contains(&seconds) {
        return Err("1 to 1000 connections, 1 to 120 seconds".into());
    }
    let (addr, path) = split_url(url)?;
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: echo\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    // One call first, so that a server that does not answer fails loudly.
    let mut probe = TcpStream::connect(addr).await?;
    let answer = call(&mut probe, request.as_bytes()).await?;
    if !answer.contains("\"echoed\"") {
        return Err(format!("the server did not echo: {answer}").into());
    }
    let cpu_before = cpu_seconds(pid)?;
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let request = request.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            while Instant::now() < until {
                let sent = Instant::now();
                call(&mut stream, request.as_bytes()).await?;
                latencies.push(sent.elapsed());
            }
            Ok::<_, std::io::Error>(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid)? - cpu_before;
    latencies.sort_unstable();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let calls = latencies.len();
    let report = serde_json::json!({
        "calls": calls,
        "calls_per_second": calls as f64 / elapsed,
        "latency_ms": {"p50": pct(0.50), "p99": pct(0.99)},
        "server_cpu_us_per_call": if calls > 0 { cpu * 1e6 / calls as f64 } else { 0.0 },
    });
    println!("{report}");
    Ok(())
}

/// Sends one request and reads its answer (a `Content-Length` body).
async fn call(stream: &mut TcpStream, request: &[u8]) -> std::io::Result<String> {
    stream.write_all(request).await?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .map_err(|_| std::io::Error::other("no answer within 10 s"))??;
        if n == 0 {
            return Err(std::io::Error::other("the server closed the connection"));
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        if !head.starts_with("http/1.1 200") {
            return Err(std::io::Error::other(format!("answered {head}")));
        }
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| std::io::Error::other("an answer without Content-Length"))?;
        if buf.len() >= end + 4 + length {
            return Ok(String::from_utf8_lossy(&buf[end + 4..end + 4 + length]).into_owned());
        }
    }
}

/// User + system CPU seconds of a process, from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32) -> std::io::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command's closing parenthesis; utime and stime are
    // the 14th and 15th fields of the whole line.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // `sysconf(_SC_CLK_TCK)` is 100 on every Linux the project runs on.
    Ok((ticks(11) + ticks(12)) / 100.0)
}

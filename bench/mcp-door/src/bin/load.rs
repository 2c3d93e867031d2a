//! The load of the MCP door benchmark: CONNECTIONS HTTP/1.1 keep-alive
//! connections to one MCP Streamable HTTP endpoint, each with one
//! `tools/call` of `echo` `{"message":"hello"}` in flight, and one JSON
//! object on stdout: calls/s, latency percentiles, and the server's CPU per
//! call (utime + stime of SERVER_PID from `/proc/PID/stat`).
//!
//! ```text
//! load --url http://127.0.0.1:PORT/mcp --revision 2025-11-25|2026-07-28 \
//!      --connections N --seconds S --pid SERVER_PID [--warmup W]
//! ```
//!
//! - 2025-11-25: each connection first sends `initialize`, keeps the
//!   `Mcp-Session-Id` of its answer, sends `notifications/initialized`, then
//!   calls with `Mcp-Session-Id` and `MCP-Protocol-Version: 2025-11-25`.
//! - 2026-07-28: no handshake; each call is stateless and carries the
//!   revision in its headers (`MCP-Protocol-Version`, `Mcp-Method`,
//!   `Mcp-Name`) and in `params._meta` with the client's capabilities.
//!
//! An answer is `application/json` or `text/event-stream` (with a
//! `Content-Length` or chunked); the JSON-RPC response with the call's id
//! must be `echo`'s result, `{"echoed":"hello"}` as `structuredContent` and
//! as text. Anything else, a call not answered within 10 s, or a connection
//! the server closes is an error; a run with an error is reported with
//! `"failed": true` and the exit status 1.
//!
//! W seconds of warm-up (default 1) come first; the CPU and the calls are
//! counted over the S seconds after it. Loopback addresses only.
//!
//! With `--idle N` (2025-11-25 only) it measures memory instead: it opens
//! one session, waits 0.5 s and reads the server's `VmRSS`
//! (`/proc/PID/status`), opens N more sessions (each on a connection of its
//! own, closed once the session is initialized: an idle session holds no
//! connection), waits 0.5 s, reads `VmRSS` again, reports the difference
//! per session, and ends every session (`DELETE`).
//!
//! ```text
//! load --url http://127.0.0.1:PORT/mcp --revision 2025-11-25 --idle N --pid SERVER_PID
//! ```

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long one exchange (request and its whole answer) may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The protocol revision the load speaks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Revision {
    /// 2025-11-25: a session per connection.
    Sessions,
    /// 2026-07-28: every request stands alone.
    Stateless,
}

impl Revision {
    fn as_str(self) -> &'static str {
        match self {
            Self::Sessions => "2025-11-25",
            Self::Stateless => "2026-07-28",
        }
    }
}

struct Args {
    url: String,
    revision: Revision,
    connections: usize,
    seconds: u64,
    warmup: u64,
    pid: u32,
    /// Sessions to open and hold idle, instead of calls.
    idle: Option<usize>,
}

type Error = Box<dyn std::error::Error + Send + Sync>;

const USAGE: &str = "usage: load --url http://127.0.0.1:PORT/PATH --revision 2025-11-25|2026-07-28 \
                     (--connections N --seconds S | --idle N) --pid SERVER_PID [--warmup W]";

fn parse_args() -> Result<Args, Error> {
    let mut url = None;
    let mut revision = None;
    let mut connections = None;
    let mut seconds = None;
    let mut pid = None;
    let mut warmup = 1;
    let mut idle = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(USAGE)?;
        match flag.as_str() {
            "--url" => url = Some(value),
            "--revision" => {
                revision = Some(match value.as_str() {
                    "2025-11-25" => Revision::Sessions,
                    "2026-07-28" => Revision::Stateless,
                    _ => return Err("--revision: 2025-11-25 or 2026-07-28".into()),
                })
            }
            "--connections" => connections = Some(value.parse()?),
            "--seconds" => seconds = Some(value.parse()?),
            "--warmup" => warmup = value.parse()?,
            "--pid" => pid = Some(value.parse()?),
            "--idle" => idle = Some(value.parse()?),
            _ => return Err(USAGE.into()),
        }
    }
    if let Some(n) = idle {
        if !(1..=20_000).contains(&n) {
            return Err("--idle: 1 to 20000".into());
        }
        if revision != Some(Revision::Sessions) {
            return Err("--idle needs --revision 2025-11-25".into());
        }
        connections = connections.or(Some(1));
        seconds = seconds.or(Some(1));
    }
    let args = Args {
        url: url.ok_or(USAGE)?,
        revision: revision.ok_or(USAGE)?,
        connections: connections.ok_or(USAGE)?,
        seconds: seconds.ok_or(USAGE)?,
        warmup,
        pid: pid.ok_or(USAGE)?,
        idle,
    };
    if !(1..=1000).contains(&args.connections) {
        return Err("--connections: 1 to 1000".into());
    }
    if !(1..=60).contains(&args.seconds) {
        return Err("--seconds: 1 to 60".into());
    }
    if args.warmup > 10 {
        return Err("--warmup: 0 to 10".into());
    }
    Ok(args)
}

/// Where the requests go: a loopback address, the `Host` header, the path.
struct Target {
    addr: SocketAddr,
    host: String,
    path: String,
}

fn target(url: &str) -> Result<Target, Error> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("the load takes an http:// URL")?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let addr = if let Ok(addr) = authority.parse::<SocketAddr>() {
        addr
    } else if let Some(port) = authority.strip_prefix("localhost:") {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port.parse()?)
    } else {
        return Err(format!("{authority:?}: a loopback IP address and a port").into());
    };
    if !addr.ip().is_loopback() {
        return Err("the load only goes to loopback addresses".into());
    }
    Ok(Target {
        addr,
        host: authority.to_owned(),
        path: if path.is_empty() { "/" } else { path }.to_owned(),
    })
}

/// One HTTP/1.1 answer.
struct Reply {
    status: u16,
    content_type: String,
    session: Option<String>,
    body: Vec<u8>,
}

/// One keep-alive connection and the bytes read from it but not yet used.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Result<Self, Error> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            buf: Vec::with_capacity(8192),
        })
    }

    /// Sends `request` and reads its whole answer, within [`CALL_TIMEOUT`].
    async fn exchange(&mut self, request: &[u8]) -> Result<Reply, Error> {
        tokio::time::timeout(CALL_TIMEOUT, async {
            self.stream.write_all(request).await?;
            self.reply().await
        })
        .await
        .map_err(|_| format!("no answer within {} s", CALL_TIMEOUT.as_secs()))?
    }

    async fn fill(&mut self) -> Result<(), Error> {
        self.buf.reserve(4096);
        if self.stream.read_buf(&mut self.buf).await? == 0 {
            return Err("the server closed the connection".into());
        }
        Ok(())
    }

    /// The next line (without its CRLF), taken from the buffer.
    async fn line(&mut self) -> Result<Vec<u8>, Error> {
        loop {
            if let Some(end) = find(&self.buf, b"\r\n") {
                let line = self.buf[..end].to_vec();
                self.buf.drain(..end + 2);
                return Ok(line);
            }
            self.fill().await?;
        }
    }

    async fn take(&mut self, n: usize) -> Result<Vec<u8>, Error> {
        while self.buf.len() < n {
            self.fill().await?;
        }
        Ok(self.buf.drain(..n).collect())
    }

    async fn reply(&mut self) -> Result<Reply, Error> {
        let end = loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                break end;
            }
            if self.buf.len() > 64 * 1024 {
                return Err("an answer's head over 64 KiB".into());
            }
            self.fill().await?;
        };
        let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        self.buf.drain(..end + 4);
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("not an HTTP answer: {status_line:?}"))?;
        let mut length = None;
        let mut chunked = false;
        let mut close = false;
        let mut content_type = String::new();
        let mut session = None;
        for line in lines {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = Some(value.parse::<usize>()?),
                "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
                "connection" => close = value.eq_ignore_ascii_case("close"),
                "content-type" => content_type = value.to_ascii_lowercase(),
                "mcp-session-id" => session = Some(value.to_owned()),
                _ => {}
            }
        }
        let body = if chunked {
            let mut body = Vec::new();
            loop {
                let line = self.line().await?;
                let size = String::from_utf8_lossy(&line);
                let size = size.split(';').next().unwrap_or_default().trim();
                let size = usize::from_str_radix(size, 16)
                    .map_err(|_| format!("a bad chunk size {size:?}"))?;
                if size == 0 {
                    // Trailers, if any, up to an empty line.
                    while !self.line().await?.is_empty() {}
                    break;
                }
                body.extend(self.take(size).await?);
                if !self.line().await?.is_empty() {
                    return Err("a chunk longer than its size".into());
                }
            }
            body
        } else if let Some(length) = length {
            self.take(length).await?
        } else if status < 200 || status == 204 || status == 304 {
            Vec::new()
        } else {
            return Err(format!("an answer ({status}) with neither length nor chunks").into());
        };
        if close {
            return Err("the server closes the connection (Connection: close)".into());
        }
        Ok(Reply {
            status,
            content_type,
            session,
            body,
        })
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The JSON-RPC messages of an answer's body: one JSON value (or a batch),
/// or the `data` of each event of a stream.
fn messages(reply: &Reply) -> Result<Vec<Value>, Error> {
    let mut out = Vec::new();
    let mut push = |value: Value| match value {
        Value::Array(batch) => out.extend(batch),
        other => out.push(other),
    };
    if reply.content_type.starts_with("application/json") {
        push(serde_json::from_slice(&reply.body)?);
    } else if reply.content_type.starts_with("text/event-stream") {
        let text = std::str::from_utf8(&reply.body)?.replace("\r\n", "\n");
        for event in text.split("\n\n") {
            let mut data = String::new();
            for line in event.lines() {
                if let Some(rest) = line.strip_prefix("data:") {
                    if !data.is_empty() {
                        data.push('\n');
                    }
                    data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
                }
            }
            if !data.trim().is_empty() {
                push(serde_json::from_str(&data)?);
            }
        }
    } else {
        return Err(format!("an answer of type {:?}", reply.content_type).into());
    }
    Ok(out)
}

/// The response to request `id` in `reply`, or why there is none.
fn response(reply: &Reply, id: u64) -> Result<Value, Error> {
    if reply.status != 200 {
        let body = String::from_utf8_lossy(&reply.body);
        return Err(format!("answered {}: {body}", reply.status).into());
    }
    messages(reply)?
        .into_iter()
        .find(|m| m.get("id") == Some(&json!(id)))
        .ok_or_else(|| format!("no response with id {id}").into())
}

/// Whether `message` is a successful `echo` of "hello".
fn check_echo(message: &Value) -> Result<(), Error> {
    let expected = json!({"echoed": "hello"});
    let result = message.get("result");
    let ok = message.get("error").is_none()
        && result.and_then(|r| r.get("isError")) != Some(&Value::Bool(true))
        && result.and_then(|r| r.get("structuredContent")) == Some(&expected)
        && result
            .and_then(|r| r.pointer("/content/0/text"))
            .and_then(Value::as_str)
            .and_then(|text| serde_json::from_str::<Value>(text).ok())
            == Some(expected);
    if ok {
        Ok(())
    } else {
        Err(format!("not echo's result: {message}").into())
    }
}

/// The requests of one connection.
struct Requests {
    prefix: String,
    revision: Revision,
    /// For 2025-11-25, the `DELETE` that ends the session.
    end: Option<Vec<u8>>,
}

impl Requests {
    fn post(target: &Target, extra_headers: &str) -> String {
        format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\n{extra_headers}",
            target.path, target.host
        )
    }

    fn with_body(prefix: &str, body: &str) -> Vec<u8> {
        format!("{prefix}Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }

    fn call(&self, id: u64) -> Vec<u8> {
        let meta = match self.revision {
            Revision::Sessions => "",
            Revision::Stateless => {
                r#","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#
            }
        };
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"message":"hello"}}{meta}}}}}"#
        );
        Self::with_body(&self.prefix, &body)
    }
}

/// Opens a connection ready for calls: for 2025-11-25, its session is
/// initialized.
async fn connect(target: &Target, revision: Revision) -> Result<(Conn, Requests), Error> {
    let mut conn = Conn::open(target.addr).await?;
    let mut end = None;
    let prefix = match revision {
        Revision::Stateless => Requests::post(
            target,
            "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n",
        ),
        Revision::Sessions => {
            let initialize = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcp-door-load","version":"0.1.0"}}}"#;
            let reply = conn
                .exchange(&Requests::with_body(
                    &Requests::post(target, ""),
                    initialize,
                ))
                .await?;
            let answer = response(&reply, 0)?;
            if answer.get("result").is_none() {
                return Err(format!("initialize failed: {answer}").into());
            }
            let session = reply
                .session
                .ok_or("the answer to initialize has no Mcp-Session-Id")?;
            let prefix = Requests::post(
                target,
                &format!("Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n"),
            );
            let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
            let reply = conn
                .exchange(&Requests::with_body(&prefix, initialized))
                .await?;
            if !(200..300).contains(&reply.status) {
                return Err(format!("notifications/initialized answered {}", reply.status).into());
            }
            end = Some(
                format!(
                    "DELETE {} HTTP/1.1\r\nHost: {}\r\nMcp-Session-Id: {session}\r\n\
                     MCP-Protocol-Version: 2025-11-25\r\nContent-Length: 0\r\n\r\n",
                    target.path, target.host
                )
                .into_bytes(),
            );
            prefix
        }
    };
    Ok((
        conn,
        Requests {
            prefix,
            revision,
            end,
        },
    ))
}

/// What one connection did.
#[derive(Default)]
struct Tally {
    /// Latencies (µs) of the calls completed within the measured window.
    latencies: Vec<u32>,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    fn error(&mut self, error: &Error) {
        self.errors += 1;
        self.first_error.get_or_insert_with(|| error.to_string());
    }
}

/// Calls until `until`, one at a time; gives the connection back unless it
/// failed.
async fn drive(
    mut conn: Conn,
    requests: Requests,
    from: Instant,
    until: Instant,
) -> (Tally, Option<(Conn, Requests)>) {
    let mut tally = Tally::default();
    let mut id = 1u64;
    while Instant::now() < until {
        let request = requests.call(id);
        let sent = Instant::now();
        let reply = match conn.exchange(&request).await {
            Ok(reply) => reply,
            Err(error) => {
                // The connection's state is unknown: this connection stops.
                tally.error(&error);
                return (tally, None);
            }
        };
        let done = Instant::now();
        match response(&reply, id).and_then(|m| check_echo(&m)) {
            Ok(()) if done >= from && done < until => {
                let micros = done.duration_since(sent).as_micros();
                tally
                    .latencies
                    .push(u32::try_from(micros).unwrap_or(u32::MAX));
            }
            Ok(()) => {}
            Err(error) => tally.error(&error),
        }
        id += 1;
    }
    (tally, Some((conn, requests)))
}

/// User + system CPU seconds of a process, from `/proc/<pid>/stat`.
fn cpu_seconds(pid: &str) -> std::io::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // After the command's closing parenthesis, utime and stime are the
    // 12th and 13th fields (the 14th and 15th of the whole line).
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        // `sysconf(_SC_CLK_TCK)` is 100 on every Linux the project runs on.
        (Some(user), Some(system)) => Ok((user + system) / 100.0),
        _ => Err(std::io::Error::other(format!(
            "/proc/{pid}/stat unreadable"
        ))),
    }
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    f64::from(sorted[rank - 1]) / 1000.0
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    match run().await {
        Ok(report) => {
            println!("{report}");
            if report["failed"] == json!(true) {
                std::process::exit(1);
            }
        }
        Err(error) => {
            eprintln!("load: {error}");
            std::process::exit(2);
        }
    }
}

/// `VmRSS` of a process, in bytes.
fn rss_bytes(pid: u32) -> Result<u64, Error> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
        .ok_or_else(|| format!("no VmRSS in /proc/{pid}/status"))?;
    Ok(kib * 1024)
}

/// `--idle N`: the server's memory per idle session.
async fn idle(args: &Args, target: &Target, count: usize) -> Result<Value, Error> {
    let settle = Duration::from_millis(500);
    let mut ends = Vec::with_capacity(count + 1);
    let (_, warm_up) = connect(target, Revision::Sessions).await?;
    ends.extend(warm_up.end);
    tokio::time::sleep(settle).await;
    let before = rss_bytes(args.pid)?;
    let started = Instant::now();
    for _ in 0..count {
        // The connection closes here: the session stays.
        let (_, requests) = connect(target, Revision::Sessions).await?;
        ends.extend(requests.end);
    }
    let seconds_to_open = started.elapsed().as_secs_f64();
    tokio::time::sleep(settle).await;
    let after = rss_bytes(args.pid)?;
    let mut conn = Conn::open(target.addr).await?;
    let mut ended = 0;
    for end in &ends {
        if conn.exchange(end).await.is_ok_and(|r| (200..300).contains(&r.status)) {
            ended += 1;
        }
    }
    Ok(json!({
        "url": args.url,
        "revision": args.revision.as_str(),
        "sessions": count,
        "seconds_to_open": seconds_to_open,
        "rss_before_bytes": before,
        "rss_after_bytes": after,
        "rss_per_session_bytes": (after as f64 - before as f64) / count as f64,
        "ended": ended,
        "failed": false,
    }))
}

async fn run() -> Result<Value, Error> {
    let args = parse_args()?;
    let target = target(&args.url)?;
    if let Some(count) = args.idle {
        return idle(&args, &target, count).await;
    }
    let pid = args.pid.to_string();
    cpu_seconds(&pid)?;
    let mut setup_error = None;
    let mut ready = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        match connect(&target, args.revision).await {
            Ok(conn) => ready.push(conn),
            Err(error) => {
                setup_error = Some(error.to_string());
                break;
            }
        }
    }
    if let Some(error) = setup_error {
        return Ok(json!({
            "url": args.url,
            "revision": args.revision.as_str(),
            "connections": args.connections,
            "failed": true,
            "errors": 1,
            "first_error": format!("setting up a connection: {error}"),
        }));
    }
    let start = Instant::now();
    let from = start + Duration::from_secs(args.warmup);
    let until = from + Duration::from_secs(args.seconds);
    let tasks: Vec<_> = ready
        .into_iter()
        .map(|(conn, requests)| tokio::spawn(drive(conn, requests, from, until)))
        .collect();
    tokio::time::sleep_until(from.into()).await;
    let (cpu_before, load_before) = (cpu_seconds(&pid)?, cpu_seconds("self")?);
    let measured_from = Instant::now();
    tokio::time::sleep_until(until.into()).await;
    let (cpu_after, load_after) = (cpu_seconds(&pid)?, cpu_seconds("self")?);
    let window = measured_from.elapsed().as_secs_f64();
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut first_error = None;
    let mut open = Vec::new();
    for task in tasks {
        let (tally, conn) = task.await?;
        latencies.extend(tally.latencies);
        errors += tally.errors;
        first_error = first_error.or(tally.first_error);
        open.extend(conn);
    }
    // The sessions end (outside the measured window), so that a server
    // does not keep them through the runs after this one; a server may
    // refuse (the floor keeps no sessions), which is no error.
    for (mut conn, requests) in open {
        if let Some(end) = &requests.end {
            let _ = conn.exchange(end).await;
        }
    }
    latencies.sort_unstable();
    let calls = latencies.len();
    let per_call = |seconds: f64| (calls > 0).then(|| seconds * 1e6 / calls as f64);
    Ok(json!({
        "url": args.url,
        "revision": args.revision.as_str(),
        "connections": args.connections,
        "seconds": window,
        "warmup_seconds": args.warmup,
        "calls": calls,
        "errors": errors,
        "first_error": first_error,
        "failed": errors > 0 || calls == 0,
        "calls_per_second": calls as f64 / window,
        "latency_ms": {
            "p50": percentile(&latencies, 0.50),
            "p99": percentile(&latencies, 0.99),
            "max": percentile(&latencies, 1.0),
        },
        "server_cpu_seconds": cpu_after - cpu_before,
        "server_cpu_us_per_call": per_call(cpu_after - cpu_before),
        "load_cpu_us_per_call": per_call(load_after - load_before),
    }))
}

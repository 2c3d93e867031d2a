//! MCP over HTTP as a test sees it: a round-robin proxy in front of two
//! instances (each POST to the other instance than the one before), raw
//! requests to `/mcp` and their answers (read whole, or as they come), and
//! the Python SDK's scripts of
//! `tests/mcp/` run against a URL.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::{TcpListener, TcpStream};

use super::mcp_support;
use super::support::within;

/// A script's time limit (they take a few seconds).
pub(crate) const SCRIPT_LIMIT: Duration = Duration::from_secs(60);

// ----- the round-robin proxy --------------------------------------------------------

/// What the proxy did with one HTTP request.
#[derive(Debug, Clone)]
pub(crate) struct Routed {
    /// 0 for instance A, 1 for B.
    pub(crate) instance: usize,
    /// The HTTP method.
    pub(crate) http: String,
    /// The JSON-RPC method of the body (`-` for none).
    pub(crate) method: String,
    /// Whether the body was a JSON-RPC request (it has an `id`).
    pub(crate) request: bool,
    /// The status the instance answered.
    pub(crate) status: u16,
    /// Whether the answer carried `Mcp-Session-Id`.
    pub(crate) session_id: bool,
}

/// A loopback HTTP proxy in front of two instances: each request goes to the
/// other instance than the request before it, over a new connection.
pub(crate) struct Proxy {
    pub(crate) addr: SocketAddr,
    routed: Arc<Mutex<Vec<Routed>>>,
    task: tokio::task::JoinHandle<()>,
}

struct ProxyState {
    backends: [SocketAddr; 2],
    /// The next instance, and the log.
    next: Mutex<usize>,
    routed: Arc<Mutex<Vec<Routed>>>,
}

impl Proxy {
    pub(crate) async fn start(backends: [SocketAddr; 2]) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port for the proxy");
        let addr = listener.local_addr().expect("the proxy has an address");
        let routed = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new(ProxyState {
            backends,
            next: Mutex::new(0),
            routed: Arc::clone(&routed),
        });
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let state = Arc::clone(&state);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let state = Arc::clone(&state);
                        async move { Ok::<_, Infallible>(forward(req, &state).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Proxy { addr, routed, task }
    }

    pub(crate) fn routed(&self) -> Vec<Routed> {
        self.routed.lock().unwrap().clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// Sends `req` to the next instance and streams its answer back.
async fn forward(req: Request<Incoming>, state: &ProxyState) -> Response<ProxyBody> {
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return plain(StatusCode::BAD_REQUEST, "the proxy could not read the body");
    };
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let instance = {
        let mut next = state.next.lock().unwrap();
        let this = *next;
        *next = 1 - this;
        this
    };
    let mut routed = Routed {
        instance,
        http: parts.method.to_string(),
        method: message["method"].as_str().unwrap_or("-").to_owned(),
        request: message.get("id").is_some() && message.get("method").is_some(),
        status: 502,
        session_id: false,
    };
    let response = match send(state.backends[instance], Request::from_parts(parts, body)).await {
        Ok(response) => response,
        Err(why) => {
            state.routed.lock().unwrap().push(routed);
            return plain(StatusCode::BAD_GATEWAY, &why);
        }
    };
    routed.status = response.status().as_u16();
    routed.session_id = response.headers().contains_key("mcp-session-id");
    state.routed.lock().unwrap().push(routed);
    response.map(BodyExt::boxed)
}

fn plain(status: StatusCode, text: &str) -> Response<ProxyBody> {
    let body = Full::new(Bytes::from(text.to_owned()))
        .map_err(|never| match never {})
        .boxed();
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
}

/// One request over a new connection to `addr`; the answer's body streams.
pub(crate) async fn send(
    addr: SocketAddr,
    req: Request<Bytes>,
) -> Result<Response<Incoming>, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake with {addr}: {e}"))?;
    tokio::spawn(connection);
    sender
        .send_request(req.map(Full::new))
        .await
        .map_err(|e| format!("request to {addr}: {e}"))
}

// ----- raw MCP over HTTP ------------------------------------------------------------

/// An answer of `/mcp`, its body read to the end.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: hyper::HeaderMap,
    pub(crate) body: String,
}

impl Reply {
    pub(crate) fn content_type(&self) -> &str {
        self.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// The JSON-RPC messages of the body: the JSON body itself, or the `data`
    /// of each SSE event.
    pub(crate) fn messages(&self) -> Vec<Value> {
        if self.content_type().starts_with("text/event-stream") {
            self.body
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
                .collect()
        } else {
            vec![serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {self:?}"))]
        }
    }

    /// The last message, which must be the response to the request.
    pub(crate) fn response(&self) -> Value {
        let messages = self.messages();
        let last = messages.last().cloned().unwrap_or(Value::Null);
        assert!(
            last.get("result").is_some() || last.get("error").is_some(),
            "no JSON-RPC response last: {self:?}"
        );
        last
    }
}

/// A request to `/mcp` of `addr` as an MCP client sends it, with `extra`
/// headers; the answer read to its end.
pub(crate) async fn mcp_request(
    addr: SocketAddr,
    method: &str,
    body: Option<&Value>,
    extra: &[(&str, &str)],
) -> Reply {
    mcp_request_to(addr, "/mcp", method, body, extra).await
}

/// [`mcp_request`] to `path` (`/mcp?schema_profile=full`, say).
pub(crate) async fn mcp_request_to(
    addr: SocketAddr,
    path: &str,
    method: &str,
    body: Option<&Value>,
    extra: &[(&str, &str)],
) -> Reply {
    let request = mcp_http_request(addr, path, method, body, extra);
    within(&format!("{method} {path}"), async {
        let response = send(addr, request).await.unwrap_or_else(|e| panic!("{e}"));
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("the body arrives").to_bytes();
        Reply {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    })
    .await
}

/// The HTTP request an MCP client sends to `path` of `addr`.
fn mcp_http_request(
    addr: SocketAddr,
    path: &str,
    method: &str,
    body: Option<&Value>,
    extra: &[(&str, &str)],
) -> Request<Bytes> {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", format!("127.0.0.1:{}", addr.port()))
        .header("accept", "application/json, text/event-stream");
    if body.is_some() {
        request = request.header("content-type", "application/json");
    }
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    request.body(body).expect("a valid request")
}

/// An answer of `/mcp` read as it comes (a `subscriptions/listen` stream,
/// say): its status and headers at once, then its JSON-RPC messages one by
/// one. Dropping it closes the connection.
pub(crate) struct Streaming {
    pub(crate) status: u16,
    pub(crate) headers: hyper::HeaderMap,
    body: Incoming,
    /// What has arrived of the body and not been read as messages.
    pending: String,
    /// The body is plain JSON (one message), not an SSE stream.
    json: bool,
}

/// POSTs `body` to `/mcp` of `addr` with `extra` headers, and hands back
/// the answer as it comes.
pub(crate) async fn mcp_stream(
    addr: SocketAddr,
    body: &Value,
    extra: &[(&str, &str)],
) -> Streaming {
    let request = mcp_http_request(addr, "/mcp", "POST", Some(body), extra);
    let response = within("the answer to start", send(addr, request))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (parts, body) = response.into_parts();
    let json = !parts
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .starts_with("text/event-stream");
    Streaming {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
        pending: String::new(),
        json,
    }
}

impl Streaming {
    /// The next JSON-RPC message, or `None` once the answer has ended;
    /// fails the test when none comes within [`WAIT`](super::support::WAIT).
    pub(crate) async fn next(&mut self) -> Option<Value> {
        within("the next message of the answer", self.next_message()).await
    }

    /// Whether no message (SSE comments aside) comes, nor the answer ends,
    /// within `quiet`.
    pub(crate) async fn quiet_for(&mut self, quiet: Duration) -> bool {
        tokio::time::timeout(quiet, self.next_message())
            .await
            .is_err()
    }

    /// Cancel-safe: what arrived stays in `pending`.
    async fn next_message(&mut self) -> Option<Value> {
        loop {
            if self.json {
                if let Some(Ok(frame)) = self.body.frame().await {
                    if let Ok(data) = frame.into_data() {
                        self.pending.push_str(&String::from_utf8_lossy(&data));
                    }
                    continue;
                }
                let text = std::mem::take(&mut self.pending);
                return (!text.trim().is_empty()).then(|| {
                    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
                });
            }
            while let Some(end) = self.pending.find('\n') {
                let line: String = self.pending.drain(..=end).collect();
                if let Some(data) = line.trim_end().strip_prefix("data:") {
                    let data = data.trim();
                    if !data.is_empty() {
                        return Some(
                            serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {data}")),
                        );
                    }
                }
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.pending.push_str(&String::from_utf8_lossy(&data));
                    }
                }
                Some(Err(_)) | None => return None,
            }
        }
    }
}

/// Runs a script of `tests/mcp/` with the SDK's Python and `args`; fails the
/// test unless it succeeds within [`SCRIPT_LIMIT`] and prints its `ok:`
/// summary, which it returns.
pub(crate) async fn run_script(name: &str, args: &[&str]) -> String {
    let python = mcp_support::python();
    let script = mcp_support::script(name);
    let mut child = tokio::process::Command::new(&python)
        .arg(&script)
        .args(args)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{} does not start: {e}", python.display()));
    let stdout = tokio::spawn(read_all(child.stdout.take().expect("stdout is piped")));
    let stderr = tokio::spawn(read_all(child.stderr.take().expect("stderr is piped")));
    let status = match tokio::time::timeout(SCRIPT_LIMIT, child.wait()).await {
        Ok(status) => Some(status.expect("waiting for the script works")),
        Err(_) => {
            child.kill().await.expect("the script can be killed");
            None
        }
    };
    let stdout = collect(stdout).await;
    let stderr = collect(stderr).await;
    let report = format!("--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}");
    let Some(status) = status else {
        panic!("{name} did not finish within {SCRIPT_LIMIT:?}\n{report}");
    };
    assert!(status.success(), "{name} failed ({status})\n{report}");
    assert!(
        stdout.starts_with("ok:"),
        "{name} succeeded without its summary\n{report}"
    );
    stdout.trim_end().to_owned()
}

async fn collect(reader: tokio::task::JoinHandle<String>) -> String {
    match tokio::time::timeout(Duration::from_secs(10), reader).await {
        Ok(text) => text.expect("the pipe reader does not panic"),
        Err(_) => "<the pipe stayed open after the script ended>".to_owned(),
    }
}

async fn read_all(mut pipe: impl AsyncRead + Unpin) -> String {
    let mut bytes = Vec::new();
    let _ = pipe.read_to_end(&mut bytes).await;
    String::from_utf8_lossy(&bytes).into_owned()
}

//! Traces of tool calls (feature `otel`) received by a real OTLP/HTTP
//! endpoint: a receiver in this test on a free loopback port decodes each
//! export with the official protobuf definitions (`opentelemetry-proto`).
//!
//! - A HAIP call and an MCP call, each with a `traceparent` in its `_meta`,
//!   make `tool.call` spans in the caller's trace, children of the caller's
//!   span, with their validation, queue and question spans as children.
//! - Through an MCP import into a second haip server: one trace across both
//!   servers (the importer's call, its upstream `tools/call` span, and the
//!   other server's `tool.call` under it).
//! - A call that waited for a slot has a `tool.queue` span.
//! - A collector that is gone costs the calls nothing; the spans it missed
//!   are counted in `/metrics`.
//! - The quickstart exports when `HAIP_OTLP_ENDPOINT` is set, under the
//!   `OTEL_SERVICE_NAME` it is given.

use crate::mcp_http;
use crate::mcp_support;
use crate::support;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use haip::mcp::McpImport;
use haip::{Context, Limits, ToolError, haip_tool};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use serde_json::{Value, json};
use support::{Client, base_limits, builder, demo_builder, start, within};

/// Runs until cancelled.
#[haip_tool]
async fn hold(ctx: Context) -> Result<String, ToolError> {
    ctx.progress(1.0);
    ctx.cancelled().await;
    Err(ToolError::cancelled())
}

/// The caller's trace and span, as an agent would send them.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

fn traceparent() -> String {
    format!("00-{TRACE}-{PARENT}-01")
}

/// A span as received, with what the tests look at.
#[derive(Debug, Clone)]
struct Got {
    trace: String,
    id: String,
    parent: String,
    name: String,
    kind: i32,
    attributes: Vec<(String, String)>,
    service: String,
    error: bool,
}

impl Got {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An OTLP/HTTP traces receiver on a free loopback port.
struct Receiver {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<Got>>>,
    news: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let news = Arc::new(tokio::sync::Notify::new());
        let (kept, told) = (Arc::clone(&spans), Arc::clone(&news));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (kept, told) = (Arc::clone(&kept), Arc::clone(&told));
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let (kept, told) = (Arc::clone(&kept), Arc::clone(&told));
                        async move { receive(req, &kept, &told).await }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Receiver {
            addr,
            spans,
            news,
            task,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Waits (at most 20 s) until the spans received satisfy `done`.
    async fn until(&self, what: &str, done: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let notified = self.news.notified();
            {
                let spans = self.spans.lock().unwrap();
                if done(&spans) {
                    return spans.clone();
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(left, notified).await.is_err() {
                let spans = self.spans.lock().unwrap();
                panic!("{what}: not received within 20 s; got {spans:#?}");
            }
        }
    }
}

async fn receive(
    req: Request<hyper::body::Incoming>,
    kept: &Mutex<Vec<Got>>,
    told: &tokio::sync::Notify,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    assert_eq!(req.uri().path(), "/v1/traces");
    assert_eq!(
        req.headers()["content-type"],
        "application/x-protobuf",
        "OTLP/HTTP with protobuf"
    );
    let body = req.into_body().collect().await?.to_bytes();
    let export = ExportTraceServiceRequest::decode(body).expect("an OTLP trace export");
    let mut got = Vec::new();
    for resource in export.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| text(kv.value.as_ref()?.value.as_ref()?))
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                got.push(Got {
                    trace: hex(&span.trace_id),
                    id: hex(&span.span_id),
                    parent: hex(&span.parent_span_id),
                    name: span.name.clone(),
                    kind: span.kind,
                    attributes: span
                        .attributes
                        .iter()
                        .filter_map(|kv| {
                            Some((kv.key.clone(), text(kv.value.as_ref()?.value.as_ref()?)?))
                        })
                        .collect(),
                    service: service.clone(),
                    error: span.status.as_ref().is_some_and(|s| s.code == 2),
                });
            }
        }
    }
    kept.lock().unwrap().extend(got);
    told.notify_waiters();
    let answer = ExportTraceServiceResponse::default().encode_to_vec();
    Ok(Response::builder()
        .header("content-type", "application/x-protobuf")
        .body(Full::new(Bytes::from(answer)))
        .unwrap())
}

fn text(value: &any_value::Value) -> Option<String> {
    match value {
        any_value::Value::StringValue(s) => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        any_value::Value::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

fn named<'a>(spans: &'a [Got], name: &str, tool: &str) -> Option<&'a Got> {
    spans
        .iter()
        .find(|s| s.name == name && s.attr("gen_ai.tool.name") == Some(tool))
}

fn children<'a>(spans: &'a [Got], of: &Got, name: &str) -> Vec<&'a Got> {
    spans
        .iter()
        .filter(|s| s.parent == of.id && s.name == name)
        .collect()
}

/// A HAIP `TOOL_CALL` with `_meta.traceparent`; its `TOOL_DONE`.
async fn traced_call(client: &mut Client, call_id: &str, tool: &str, params: Value) -> Value {
    client
        .request(
            "TOOL_CALL",
            json!({"call_id": call_id, "tool": tool, "params": params,
                   "_meta": {"traceparent": traceparent()}}),
        )
        .await;
    client.expect_done(call_id).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haip_and_mcp_calls_join_the_callers_trace() {
    let receiver = Receiver::start().await;
    // Stateless `/mcp`: the MCP call is one POST, no `initialize`.
    let builder = demo_builder()
        .otlp_endpoint(receiver.endpoint())
        .mcp_sessions(false);
    let (handle, url) = start(builder).await;
    let mut client = Client::connect(&url).await;
    // HAIP: a call that succeeds, one whose params are invalid, and one that
    // asks its caller a question.
    let done = traced_call(&mut client, "h1", "echo", json!({"message": "hi"})).await;
    assert_eq!(done["status"], "OK", "{done}");
    let done = traced_call(&mut client, "h2", "add", json!({"a": "one"})).await;
    assert_eq!(done["result"]["code"], "INVALID_PARAMS", "{done}");
    client
        .request(
            "HAI",
            json!({"haip_version": "1.1.2", "capabilities": {"tool_input": true}}),
        )
        .await;
    client
        .request(
            "TOOL_CALL",
            json!({"call_id": "h3", "tool": "book_table", "params": {"restaurant": "Luigi"},
                   "_meta": {"traceparent": traceparent()}}),
        )
        .await;
    let (asked, _) = client
        .recv_until(|env| env["payload"]["status"] == "WAITING_INPUT")
        .await;
    let request_id = asked["payload"]["input_request"]["request_id"]
        .as_str()
        .unwrap()
        .to_owned();
    client
        .request(
            "TOOL_INPUT",
            json!({"call_id": "h3", "request_id": request_id, "action": "decline"}),
        )
        .await;
    let (done, _) = client.recv_until(|env| env["type"] == "TOOL_DONE").await;
    assert_eq!(done["payload"]["status"], "OK", "{done}");
    // MCP: `_meta.traceparent` on the request.
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "over MCP"},
                   "_meta": {"traceparent": traceparent()}}});
    let reply = mcp_http::mcp_request(handle.local_addr(), "POST", Some(&body), &[]).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    // Four calls, and the question's span.
    let spans = receiver
        .until("four tool.call spans and a question", |spans| {
            spans.iter().filter(|s| s.name == "tool.call").count() >= 4
                && spans.iter().any(|s| s.name == "tool.question")
        })
        .await;
    for span in spans.iter().filter(|s| s.name == "tool.call") {
        assert_eq!(span.trace, TRACE, "in the caller's trace: {span:?}");
        assert_eq!(
            span.parent, PARENT,
            "the caller's span is the parent: {span:?}"
        );
        assert_eq!(span.kind, SpanKind::Server as i32, "{span:?}");
        assert_eq!(span.attr("gen_ai.operation.name"), Some("execute_tool"));
        assert_eq!(span.service, "haip");
    }
    let echo = spans
        .iter()
        .find(|s| s.name == "tool.call" && s.attr("gen_ai.tool.call.id") == Some("h1"))
        .expect("the HAIP echo call's span");
    assert_eq!(echo.attr("gen_ai.tool.name"), Some("echo"));
    assert_eq!(echo.attr("network.protocol.name"), Some("haip"));
    assert_eq!(echo.attr("haip.transport"), Some("websocket"));
    assert_eq!(echo.attr("haip.call.outcome"), Some("ok"));
    assert!(echo.attr("haip.session.id").is_some(), "{echo:?}");
    assert!(!echo.error);
    assert_eq!(
        children(&spans, echo, "tool.validate").len(),
        1,
        "{spans:#?}"
    );
    let invalid = spans
        .iter()
        .find(|s| s.name == "tool.call" && s.attr("gen_ai.tool.call.id") == Some("h2"))
        .expect("the invalid call's span");
    assert_eq!(invalid.attr("haip.call.outcome"), Some("error"));
    assert_eq!(invalid.attr("error.type"), Some("INVALID_PARAMS"));
    assert!(invalid.error, "{invalid:?}");
    let booking = named(&spans, "tool.call", "book_table").expect("book_table's span");
    let questions = children(&spans, booking, "tool.question");
    assert_eq!(questions.len(), 1, "{spans:#?}");
    assert_eq!(questions[0].attr("haip.question.outcome"), Some("declined"));
    let mcp = spans
        .iter()
        .find(|s| s.name == "tool.call" && s.attr("network.protocol.name") == Some("mcp"))
        .expect("the MCP call's span");
    assert_eq!(mcp.attr("gen_ai.tool.name"), Some("echo"));
    assert_eq!(mcp.attr("mcp.method.name"), Some("tools/call"));
    assert_eq!(mcp.attr("gen_ai.tool.call.id"), Some("7"));
    assert_eq!(
        children(&spans, mcp, "tool.validate").len(),
        1,
        "{spans:#?}"
    );
    handle.shutdown().await;
}

/// With layers, params are checked after them, in the call's task: the
/// check is still a `tool.validate` child of the call's span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_layers_the_check_of_params_is_still_a_validate_span() {
    use haip::layer::{Call, Next, from_fn};
    let receiver = Receiver::start().await;
    let pass = from_fn(|call: Call, next: Next| async move { next.run(call).await });
    let builder = demo_builder()
        .layer(pass)
        .otlp_endpoint(receiver.endpoint())
        .mcp_sessions(false);
    let (handle, url) = start(builder).await;
    let mut client = Client::connect(&url).await;
    let done = traced_call(&mut client, "l1", "echo", json!({"message": "hi"})).await;
    assert_eq!(done["status"], "OK", "{done}");
    let done = traced_call(&mut client, "l2", "add", json!({"a": "one"})).await;
    assert_eq!(done["result"]["code"], "INVALID_PARAMS", "{done}");
    let body = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "over MCP"},
                   "_meta": {"traceparent": traceparent()}}});
    let reply = mcp_http::mcp_request(handle.local_addr(), "POST", Some(&body), &[]).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let spans = receiver
        .until("three tool.call spans and their checks", |spans| {
            spans.iter().filter(|s| s.name == "tool.call").count() >= 3
                && spans.iter().filter(|s| s.name == "tool.validate").count() >= 3
        })
        .await;
    for call in spans.iter().filter(|s| s.name == "tool.call") {
        assert_eq!(call.trace, TRACE, "{call:?}");
        assert_eq!(
            children(&spans, call, "tool.validate").len(),
            1,
            "{spans:#?}"
        );
    }
    let invalid = spans
        .iter()
        .find(|s| s.name == "tool.call" && s.attr("gen_ai.tool.call.id") == Some("l2"))
        .expect("the invalid call's span");
    assert_eq!(invalid.attr("error.type"), Some("INVALID_PARAMS"));
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_across_an_mcp_import() {
    let receiver = Receiver::start().await;
    let (upstream, _) = start(builder().builtin_tools().otlp_endpoint(receiver.endpoint())).await;
    let import = McpImport::http(format!("http://{}/mcp", upstream.local_addr())).prefix("up.");
    let (importer, url) = start(builder().mcp(import).otlp_endpoint(receiver.endpoint())).await;
    let mut client = Client::connect(&url).await;
    let done = traced_call(&mut client, "i1", "up.echo", json!({"message": "across"})).await;
    assert_eq!(done["status"], "OK", "{done}");
    assert_eq!(done["result"]["echoed"], "across", "{done}");
    let spans = receiver
        .until("both servers' spans", |spans| {
            named(spans, "tool.call", "up.echo").is_some()
                && named(spans, "tool.call", "echo").is_some()
                && named(spans, "tools/call echo", "echo").is_some()
        })
        .await;
    let here = named(&spans, "tool.call", "up.echo").unwrap();
    let out = named(&spans, "tools/call echo", "echo").unwrap();
    let there = named(&spans, "tool.call", "echo").unwrap();
    for span in [here, out, there] {
        assert_eq!(span.trace, TRACE, "one trace: {spans:#?}");
    }
    assert_eq!(here.parent, PARENT, "{here:?}");
    assert_eq!(out.parent, here.id, "the upstream call is the call's child");
    assert_eq!(out.kind, SpanKind::Client as i32, "{out:?}");
    assert_eq!(there.parent, out.id, "the other server's call is its child");
    assert_eq!(there.attr("network.protocol.name"), Some("mcp"));
    importer.shutdown().await;
    upstream.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_waited_for_a_slot_has_a_queue_span() {
    let receiver = Receiver::start().await;
    let builder = builder()
        .builtin_tools()
        .tool(hold::tool())
        .limits(Limits {
            max_inflight_calls: 1,
            ..base_limits()
        })
        .otlp_endpoint(receiver.endpoint());
    let (handle, url) = start(builder).await;
    let mut client = Client::connect(&url).await;
    client.call("w1", "hold", json!({})).await;
    assert_eq!(client.expect_update("w1").await["progress"], 1.0);
    // One slot, held: this call waits.
    client
        .request(
            "TOOL_CALL",
            json!({"call_id": "w2", "tool": "echo", "params": {"message": "later"},
                   "_meta": {"traceparent": traceparent()}}),
        )
        .await;
    assert_eq!(client.expect_update("w2").await["status"], "QUEUED");
    client
        .request("TOOL_CANCEL", json!({"call_id": "w1"}))
        .await;
    let (done, _) = client
        .recv_until(|env| env["type"] == "TOOL_DONE" && env["payload"]["call_id"] == "w2")
        .await;
    assert_eq!(done["payload"]["status"], "OK", "{done}");
    let spans = receiver
        .until("the queued call's span", |spans| {
            named(spans, "tool.call", "echo").is_some()
        })
        .await;
    let echo = named(&spans, "tool.call", "echo").unwrap();
    assert_eq!(children(&spans, echo, "tool.queue").len(), 1, "{spans:#?}");
    let hold = named(&spans, "tool.call", "hold").expect("the held call's span");
    assert_eq!(hold.attr("haip.call.outcome"), Some("cancelled"));
    assert!(children(&spans, hold, "tool.queue").is_empty());
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_gone_costs_calls_nothing_and_drops_are_counted() {
    // A loopback port nothing listens on.
    let gone = format!("http://127.0.0.1:{}", mcp_support::free_port());
    let (handle, url) = start(builder().builtin_tools().otlp_endpoint(gone)).await;
    let mut client = Client::connect(&url).await;
    for i in 0..20 {
        let done = traced_call(
            &mut client,
            &format!("g{i}"),
            "echo",
            json!({"message": "x"}),
        )
        .await;
        assert_eq!(done["status"], "OK", "{done}");
    }
    // The export fails (after its retries): the spans are counted as dropped.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = support::http_get(handle.local_addr(), "/metrics").await;
        let dropped = metrics
            .body
            .lines()
            .find_map(|l| l.strip_prefix("haip_trace_spans_dropped_total "))
            .map(|v| v.trim().parse::<u64>().unwrap());
        if dropped.is_some_and(|n| n >= 20) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no drops counted within 30 s: {dropped:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_exports_when_an_endpoint_is_set() {
    let receiver = Receiver::start().await;
    let port = mcp_support::free_port();
    let mut child = Command::new(mcp_support::example_binary("quickstart"))
        .env("HAIP_ADDR", format!("127.0.0.1:{port}"))
        .env("HAIP_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_SERVICE_NAME", "quickstart-under-test")
        .env("HAIP_LOG", "warn")
        .env_remove("HAIP_JWT_SECRET")
        .env_remove("HAIP_REDIS_URL")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the quickstart starts");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    within("the quickstart to listen", async {
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let mut client = Client::connect(&format!("ws://{addr}/haip")).await;
    let done = traced_call(&mut client, "q1", "echo", json!({"message": "hi"})).await;
    assert_eq!(done["status"], "OK", "{done}");
    let spans = receiver
        .until("the quickstart's span", |spans| {
            named(spans, "tool.call", "echo").is_some()
        })
        .await;
    let span = named(&spans, "tool.call", "echo").unwrap();
    assert_eq!(span.trace, TRACE);
    assert_eq!(span.service, "quickstart-under-test");
    let _ = child.kill();
    let _ = child.wait();
}

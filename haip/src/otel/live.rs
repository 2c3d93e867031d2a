//! The tracer when the `otel` feature is on: spans made with the
//! OpenTelemetry SDK, queued without waiting, and exported over OTLP/HTTP in
//! batches by [`Exporter::run`].

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

#[cfg(feature = "mcp-import")]
use opentelemetry::propagation::Injector;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt, Tracer as _,
};
use opentelemetry::{Context as OtelContext, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    Sampler, SdkTracer, SdkTracerProvider, Span, SpanData, SpanExporter, SpanProcessor,
};
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::stats::{Brief, Door, Ended, Throttle};

impl Door {
    /// `network.protocol.name` and the transport, as the span says them.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Door::WebSocket => ("haip", "websocket"),
            Door::Sse | Door::Stream => ("haip", "http"),
            #[cfg(feature = "mcp")]
            Door::McpHttp => ("mcp", "http"),
            #[cfg(feature = "mcp")]
            Door::McpStdio => ("mcp", "pipe"),
        }
    }
}

/// Finished spans waiting for the exporter; more are dropped (and counted).
const QUEUE: usize = 4096;
/// Spans per export request, at most.
const BATCH: usize = 512;
/// How long a span waits for others to fill its batch.
const DELAY: Duration = Duration::from_millis(500);
/// How long one export (with the exporter's retries) may take before its
/// spans are counted as dropped.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for the last spans to be exported.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(3);

/// Where spans go and how many are kept, as the builder was told.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The collector's base URL (`…/v1/traces` is added unless it is there).
    pub(crate) endpoint: String,
    /// The share of calls without a sampled parent that are traced.
    pub(crate) sampling: f64,
    /// `service.name` of the spans.
    pub(crate) service: String,
}

/// The server's tracer, on. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Tracing(Arc<Inner>);

struct Inner {
    tracer: SdkTracer,
    /// Which calls without a parent are traced, decided before any span is
    /// made: a call left out costs nothing more.
    roots: Roots,
    /// Kept alive with the tracer (dropping it shuts the tracer down).
    _provider: SdkTracerProvider,
    /// Spans dropped so far (`/metrics`).
    #[cfg(feature = "metrics")]
    dropped: Arc<AtomicU64>,
    exporter: Mutex<Option<Exporter>>,
}

impl Tracing {
    /// A tracer sending spans to `settings.endpoint`; fails on an endpoint
    /// that is not a URL, or a sampling ratio outside 0..=1.
    pub(crate) fn new(settings: &Settings) -> Result<Tracing, String> {
        if !(0.0..=1.0).contains(&settings.sampling) {
            return Err(format!(
                "the trace sampling ratio must be between 0 and 1, not {}",
                settings.sampling
            ));
        }
        let endpoint = traces_url(&settings.endpoint)?;
        let client = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot build the OTLP HTTP client: {e}"))?;
        let resource = Resource::builder_empty()
            .with_service_name(settings.service.clone())
            .build();
        let mut otlp = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_endpoint(endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot export traces to {endpoint}: {e}"))?;
        otlp.set_resource(&resource);
        let (queue, spans) = mpsc::channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Queue {
                spans: queue,
                dropped: Arc::clone(&dropped),
            })
            // Roots were sampled already (`Roots`); a parent's flag decides
            // for the others.
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
            .with_resource(resource)
            .build();
        let tracer = opentelemetry::trace::TracerProvider::tracer_with_scope(
            &provider,
            opentelemetry::InstrumentationScope::builder("haip")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        );
        Ok(Tracing(Arc::new(Inner {
            tracer,
            roots: Roots::new(settings.sampling),
            _provider: provider,
            exporter: Mutex::new(Some(Exporter {
                spans,
                otlp,
                #[cfg(feature = "metrics")]
                dropped: Arc::clone(&dropped),
                #[cfg(not(feature = "metrics"))]
                dropped,
                endpoint,
            })),
            #[cfg(feature = "metrics")]
            dropped,
        })))
    }

    /// The exporter, once: the server runs it while it serves.
    pub(crate) fn exporter(&self) -> Option<Exporter> {
        self.0
            .exporter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Spans dropped so far.
    #[cfg(feature = "metrics")]
    pub(crate) fn dropped(&self) -> u64 {
        self.0.dropped.load(Relaxed)
    }

    pub(super) fn call(
        &self,
        tool: &str,
        call_id: &dyn std::fmt::Display,
        session: Option<&str>,
        door: Door,
        meta: Option<&Map<String, Value>>,
    ) -> Option<Box<CallLive>> {
        let parent = match meta {
            Some(meta) if meta.contains_key("traceparent") => {
                TraceContextPropagator::new().extract(&MetaReader(meta))
            }
            // A root call the ratio leaves out gets no span at all.
            _ if !self.0.roots.traced() => return None,
            _ => OtelContext::new(),
        };
        let tracer = &self.0.tracer;
        let started = SystemTime::now();
        let mut span = tracer
            .span_builder("tool.call")
            .with_kind(SpanKind::Server)
            .with_start_time(started)
            .start_with_context(tracer, &parent);
        if span.is_recording() {
            let (protocol, transport) = door.names();
            let mut attributes = Vec::with_capacity(7);
            attributes.extend([
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", tool.to_owned()),
                // The client's id, cut as in the access log: a span
                // waiting for export holds it.
                KeyValue::new("gen_ai.tool.call.id", Brief(call_id).to_string()),
                KeyValue::new("network.protocol.name", protocol),
                KeyValue::new("haip.transport", transport),
            ]);
            if protocol == "mcp" {
                attributes.push(KeyValue::new("mcp.method.name", "tools/call"));
            }
            if let Some(session) = session {
                let key = if protocol == "mcp" {
                    "mcp.session.id"
                } else {
                    "haip.session.id"
                };
                attributes.push(KeyValue::new(key, session.to_owned()));
            }
            span.set_attributes(attributes);
        }
        Some(Box::new(CallLive {
            span,
            tracer: tracer.clone(),
            started,
        }))
    }
}

/// The share of root calls traced, drawn with a cheap per-thread generator
/// before any span is made (the SDK's ratio sampler runs after it has made
/// the span's ids, about a microsecond for every call it then drops).
#[derive(Debug, Clone, Copy)]
struct Roots {
    /// Traced when a draw from `0..u64::MAX` is below this.
    below: u64,
    all: bool,
}

impl Roots {
    fn new(ratio: f64) -> Roots {
        Roots {
            // Exact at 0; within one part in 2⁶⁴ elsewhere.
            below: (ratio.clamp(0.0, 1.0) * u64::MAX as f64) as u64,
            all: ratio >= 1.0,
        }
    }

    fn traced(self) -> bool {
        self.all || self.below > 0 && draw() < self.below
    }
}

/// A random `u64` from this thread's xorshift64* generator, seeded once per
/// thread from the process's random hasher keys.
fn draw() -> u64 {
    use std::cell::Cell;
    use std::hash::BuildHasher;
    thread_local! {
        static STATE: Cell<u64> = Cell::new(
            std::collections::hash_map::RandomState::new().hash_one(std::thread::current().id()) | 1,
        );
    }
    STATE.with(|state| {
        let mut x = state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

/// A child span `name` of `parent`, from `since` to now.
fn finished_child(tracer: &SdkTracer, parent: &OtelContext, name: &'static str, since: SystemTime) {
    let mut child = tracer
        .span_builder(name)
        .with_kind(SpanKind::Internal)
        .with_start_time(since)
        .start_with_context(tracer, parent);
    child.end();
}

/// `endpoint` as the URL spans are posted to.
fn traces_url(endpoint: &str) -> Result<String, String> {
    let endpoint = endpoint.trim();
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        return Err(format!(
            "the OTLP endpoint must be an http:// or https:// URL, not {endpoint:?}"
        ));
    }
    if endpoint.ends_with("/v1/traces") {
        Ok(endpoint.to_owned())
    } else {
        Ok(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
    }
}

/// Reads `traceparent` and `tracestate` from a `_meta` object.
struct MetaReader<'a>(&'a Map<String, Value>);

/// The longest `tracestate` kept; a longer one is dropped whole, as W3C
/// Trace Context allows (spans waiting for export carry it).
const MAX_TRACESTATE: usize = 512;

impl Extractor for MetaReader<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let value = self.0.get(key).and_then(Value::as_str)?;
        (key != "tracestate" || value.len() <= MAX_TRACESTATE).then_some(value)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// Writes `traceparent` and `tracestate` into a `_meta` object.
#[cfg(feature = "mcp-import")]
struct MetaWriter<'a>(&'a mut Map<String, Value>);

#[cfg(feature = "mcp-import")]
impl Injector for MetaWriter<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), Value::String(value));
    }
}

/// A call's span, on.
pub(crate) struct CallLive {
    span: Span,
    tracer: SdkTracer,
    started: SystemTime,
}

impl CallLive {
    pub(super) fn recording(&self) -> bool {
        self.span.is_recording()
    }

    fn parent(&self) -> OtelContext {
        OtelContext::new().with_remote_span_context(self.span.span_context().clone())
    }

    pub(super) fn child(&self, name: &'static str, since: SystemTime) {
        if self.span.is_recording() {
            finished_child(&self.tracer, &self.parent(), name, since);
        }
    }

    pub(super) fn since_start(&self, name: &'static str) {
        self.child(name, self.started);
    }

    pub(super) fn question(&self) -> Option<QuestionLive> {
        if !self.span.is_recording() {
            return None;
        }
        let span = self
            .tracer
            .span_builder("tool.question")
            .with_kind(SpanKind::Internal)
            .start_with_context(&self.tracer, &self.parent());
        Some(QuestionLive(span))
    }

    pub(super) fn link(&self) -> LinkLive {
        LinkLive {
            parent: self.span.span_context().clone(),
            tracer: self.tracer.clone(),
        }
    }

    pub(super) fn end(mut self, ended: Ended) {
        if !self.span.is_recording() {
            return;
        }
        self.span
            .set_attribute(KeyValue::new("haip.call.outcome", ended.outcome()));
        let code = match ended {
            Ended::Ok | Ended::Cancelled => None,
            Ended::Failed(code) => Some(code),
            Ended::TimedOut => Some("TIMEOUT"),
            Ended::Panicked => Some("INTERNAL_ERROR"),
        };
        if let Some(code) = code {
            self.span.set_attribute(KeyValue::new("error.type", code));
            self.span.set_status(Status::Error {
                description: Cow::Borrowed(code),
            });
        }
        self.span.end();
    }
}

/// A question's span, on.
pub(crate) struct QuestionLive(Span);

impl QuestionLive {
    pub(super) fn end(mut self, outcome: &'static str) {
        self.0
            .set_attribute(KeyValue::new("haip.question.outcome", outcome));
        self.0.end();
    }
}

/// The trace a tool's context carries.
#[derive(Clone)]
pub(crate) struct LinkLive {
    parent: SpanContext,
    tracer: SdkTracer,
}

impl LinkLive {
    pub(super) fn recording(&self) -> bool {
        self.parent.is_sampled()
    }

    pub(super) fn child(&self, name: &'static str, since: SystemTime) {
        if self.parent.is_sampled() {
            let parent = OtelContext::new().with_remote_span_context(self.parent.clone());
            finished_child(&self.tracer, &parent, name, since);
        }
    }

    #[cfg(feature = "mcp")]
    pub(super) fn question(&self) -> Option<QuestionLive> {
        if !self.parent.is_sampled() {
            return None;
        }
        let parent = OtelContext::new().with_remote_span_context(self.parent.clone());
        let span = self
            .tracer
            .span_builder("tool.question")
            .with_kind(SpanKind::Internal)
            .start_with_context(&self.tracer, &parent);
        Some(QuestionLive(span))
    }

    #[cfg(feature = "mcp-import")]
    pub(super) fn upstream(&self, tool: &str, server: &str) -> (UpstreamLive, Map<String, Value>) {
        let parent = OtelContext::new().with_remote_span_context(self.parent.clone());
        let mut span = self
            .tracer
            .span_builder(format!("tools/call {tool}"))
            .with_kind(SpanKind::Client)
            .start_with_context(&self.tracer, &parent);
        if span.is_recording() {
            span.set_attributes([
                KeyValue::new("mcp.method.name", "tools/call"),
                KeyValue::new("gen_ai.tool.name", tool.to_owned()),
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("server.address", server.to_owned()),
            ]);
        }
        let mut meta = Map::new();
        let cx = OtelContext::new().with_remote_span_context(span.span_context().clone());
        TraceContextPropagator::new().inject_context(&cx, &mut MetaWriter(&mut meta));
        (UpstreamLive(span), meta)
    }
}

/// An upstream call's span, on.
#[cfg(feature = "mcp-import")]
pub(crate) struct UpstreamLive(Span);

#[cfg(feature = "mcp-import")]
impl UpstreamLive {
    pub(super) fn end(mut self, error: Option<&str>) {
        if let Some(error) = error {
            self.0
                .set_attribute(KeyValue::new("error.type", "tool_error"));
            self.0.set_status(Status::Error {
                description: Cow::Owned(Brief(&error).to_string()),
            });
        }
        self.0.end();
    }
}

/// The span processor: finished, sampled spans go to the exporter's queue
/// without waiting; a full queue drops them (counted).
#[derive(Debug)]
struct Queue {
    spans: mpsc::Sender<SpanData>,
    dropped: Arc<AtomicU64>,
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut Span, _cx: &OtelContext) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.spans.try_send(span).is_err() {
            self.dropped.fetch_add(1, Relaxed);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// Sends queued spans to the collector, in batches, one export at a time.
pub(crate) struct Exporter {
    spans: mpsc::Receiver<SpanData>,
    otlp: opentelemetry_otlp::SpanExporter,
    dropped: Arc<AtomicU64>,
    endpoint: String,
}

impl Exporter {
    /// Exports until `shutdown`, then what is queued (for at most
    /// [`FLUSH_TIMEOUT`]).
    pub(crate) async fn run(mut self, shutdown: CancellationToken) {
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            let first = tokio::select! {
                span = self.spans.recv() => span,
                () = shutdown.cancelled() => None,
            };
            let Some(first) = first else { break };
            batch.push(first);
            let deadline = tokio::time::Instant::now() + DELAY;
            while batch.len() < BATCH {
                tokio::select! {
                    span = self.spans.recv() => match span {
                        Some(span) => batch.push(span),
                        None => break,
                    },
                    () = tokio::time::sleep_until(deadline) => break,
                    () = shutdown.cancelled() => break,
                }
            }
            self.export(&mut batch, EXPORT_TIMEOUT).await;
        }
        // Shutting down: what is queued, in batches, within the flush time.
        let flush = async {
            loop {
                while batch.len() < BATCH {
                    match self.spans.try_recv() {
                        Ok(span) => batch.push(span),
                        Err(_) => break,
                    }
                }
                if batch.is_empty() {
                    break;
                }
                self.export(&mut batch, FLUSH_TIMEOUT).await;
            }
        };
        let _ = tokio::time::timeout(FLUSH_TIMEOUT, flush).await;
    }

    async fn export(&self, batch: &mut Vec<SpanData>, within: Duration) {
        let count = batch.len() as u64;
        let spans = std::mem::replace(batch, Vec::with_capacity(BATCH));
        let failed = match tokio::time::timeout(within, self.otlp.export(spans)).await {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {within:?}"),
        };
        self.dropped.fetch_add(count, Relaxed);
        static FAILED: Throttle = Throttle::new();
        if let Some(suppressed) = FAILED.allow() {
            tracing::warn!(
                endpoint = %self.endpoint,
                spans = count,
                error = %failed,
                suppressed,
                "could not export spans; they are dropped"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_added_once() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://127.0.0.1:4318/").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://c.example/v1/traces").unwrap(),
            "https://c.example/v1/traces"
        );
        assert!(traces_url("127.0.0.1:4318").is_err());
    }

    /// Settings that keep `sampling` of the root calls.
    fn settings(sampling: f64) -> Settings {
        Settings {
            endpoint: "http://127.0.0.1:4318".into(),
            sampling,
            service: "haip".into(),
        }
    }

    /// A caller's `_meta` whose `traceparent` names trace
    /// `0af7651916cd43dd8448eb211c80319c` with these flags (`01`: sampled).
    fn caller(flags: &str) -> Map<String, Value> {
        let mut meta = Map::new();
        meta.insert(
            "traceparent".into(),
            format!("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-{flags}").into(),
        );
        meta
    }

    #[test]
    fn a_bad_sampling_ratio_is_refused() {
        let Err(refused) = Tracing::new(&settings(1.5)) else {
            panic!("a ratio of 1.5 is refused")
        };
        assert!(refused.contains("between 0 and 1"), "{refused}");
    }

    #[cfg(feature = "mcp-import")]
    #[test]
    fn a_caller_s_traceparent_is_the_parent_and_is_passed_on() {
        let tracing = Tracing::new(&settings(1.0)).unwrap();
        let meta = caller("01");
        let call = tracing
            .call("echo", &"c1", Some("s"), Door::WebSocket, Some(&meta))
            .unwrap();
        assert!(call.recording());
        let context = call.span.span_context().clone();
        assert_eq!(
            context.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        let (upstream, out) = call.link().upstream("remote", "upstream");
        let sent = out["traceparent"].as_str().unwrap();
        assert!(
            sent.starts_with("00-0af7651916cd43dd8448eb211c80319c-"),
            "{sent}"
        );
        assert!(!sent.contains("b7ad6b7169203331"), "{sent}");
        upstream.end(None);
        call.end(Ended::Ok);
    }

    #[test]
    fn client_values_a_span_keeps_are_cut() {
        let tracing = Tracing::new(&settings(1.0)).unwrap();
        let mut meta = caller("01");
        meta.insert("tracestate".into(), format!("k={}", "v".repeat(600)).into());
        let long_id = "c".repeat(10_000);
        let call = tracing
            .call("echo", &long_id, None, Door::WebSocket, Some(&meta))
            .unwrap();
        let context = call.span.span_context().clone();
        // The parent is kept; its oversized tracestate is not.
        assert_eq!(
            context.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(context.trace_state().header(), "");
        call.end(Ended::Ok);
        assert_eq!(Brief(&long_id).to_string().chars().count(), 65);
    }

    #[test]
    fn without_a_sampled_parent_the_ratio_decides() {
        let tracing = Tracing::new(&settings(0.0)).unwrap();
        // Left out before any span is made.
        assert!(
            tracing
                .call("echo", &"c1", None, Door::Stream, None)
                .is_none()
        );
        // A caller that samples its trace wins over the ratio.
        let call = tracing
            .call("echo", &"c2", None, Door::Stream, Some(&caller("01")))
            .unwrap();
        assert!(call.recording());
        // A caller that does not sample its trace is not traced either.
        let call = tracing
            .call("echo", &"c3", None, Door::Stream, Some(&caller("00")))
            .unwrap();
        assert!(!call.recording());
    }

    #[test]
    fn sse_and_http_streaming_are_both_http_to_a_span() {
        assert_eq!(Door::WebSocket.names(), ("haip", "websocket"));
        assert_eq!(Door::Sse.names(), ("haip", "http"));
        assert_eq!(Door::Stream.names(), ("haip", "http"));
    }

    #[test]
    fn the_ratio_of_roots_traced_is_the_one_asked() {
        assert!(!Roots::new(0.0).traced());
        assert!(Roots::new(1.0).traced());
        for ratio in [0.01, 0.25, 0.5] {
            let roots = Roots::new(ratio);
            let traced = (0..100_000).filter(|_| roots.traced()).count();
            let expected = ratio * 100_000.0;
            // Five standard deviations either way.
            let slack = 5.0 * (expected * (1.0 - ratio)).sqrt();
            assert!(
                (traced as f64 - expected).abs() <= slack,
                "{ratio}: {traced} of 100 000"
            );
        }
    }
}

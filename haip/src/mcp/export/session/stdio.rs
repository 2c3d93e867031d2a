//! One MCP session over a pair of byte streams (stdio): newline-delimited
//! JSON-RPC messages in, the same out, served like an `/mcp` session
//! (`session.rs`) on haip's own code.
//!
//! The client is trusted as the process that started the server: no
//! authentication, no pools; one session, from its `initialize` until its
//! input closes. Bounded: a line over `max_message_bytes` is refused (and
//! skipped to its end) without being held; messages to the client wait in
//! an outbox of [`OUTBOX`], so a client that does not read slows the calls
//! that write to it; each call's stream keeps at most `events::WINDOW`.

use std::sync::Arc;

use crate::mcp::model::McpError;
use crate::mcp::model::{InitializeRequestParams, RequestId, ServerResult};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::{ExportService, Incoming, McpSession, Message, Sessions, shaped};
use crate::context::share::CallerKey;
use crate::mcp::export::direct::{error_message, notification};
use crate::mcp::inbound::{INVALID_REQUEST, PARSE_ERROR};
use crate::stats::Door;

/// Frames to the client waiting to be written (each at most about a
/// stream's window, `events::WINDOW_BYTES`).
const OUTBOX: usize = 16;

/// Serves one MCP session on `input` and `output` until `input` closes or
/// the server shuts down; its calls still running then are cancelled.
pub(crate) async fn serve<R, W>(sessions: Arc<Sessions>, input: R, output: W)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let shared = Arc::clone(&sessions.shared);
    let shutdown = shared.shutdown.clone();
    let max = shared.config.max_message_bytes;
    let (outbox, mut outgoing) = mpsc::channel::<Bytes>(OUTBOX);
    let writer = tokio::spawn(async move {
        let mut output = output;
        while let Some(bytes) = outgoing.recv().await {
            if output.write_all(&bytes).await.is_err() {
                return;
            }
            if outgoing.is_empty() && output.flush().await.is_err() {
                return;
            }
        }
        let _ = output.flush().await;
    });
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    let mut session: Option<Arc<McpSession>> = None;
    let mut relaying = false;
    loop {
        line.clear();
        let read = tokio::select! {
            read = read_line(&mut input, &mut line, max) => read,
            () = shutdown.cancelled() => break,
        };
        match read {
            Line::End => break,
            Line::TooLong => {
                let message = format!(
                    "Invalid Request: a message over max_message_bytes ({max} bytes) was dropped"
                );
                let _ = outbox.send(refusal(INVALID_REQUEST, &message)).await;
                continue;
            }
            Line::Read => {}
        }
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        let message = match serde_json::from_slice::<Message>(text) {
            Ok(message) if shaped(&message) => message,
            Ok(_) => {
                let why = "Invalid Request: not a JSON-RPC 2.0 request, notification or response";
                let _ = outbox.send(refusal(INVALID_REQUEST, why)).await;
                continue;
            }
            Err(e) => {
                let why = format!("Parse error: {e}");
                let _ = outbox.send(refusal(PARSE_ERROR, &why)).await;
                continue;
            }
        };
        if let Some(method) = message.method() {
            shared.stats.mcp_request(method);
        }
        let Message {
            id,
            method,
            params,
            result,
            error,
            ..
        } = message;
        match (id, method.as_deref(), &session) {
            (Some(id), Some("initialize"), None) => {
                let (opened, answer) = open(&sessions, &id, params);
                session = opened;
                let _ = outbox.send(line_of(answer)).await;
            }
            (Some(id), Some(method), Some(session)) => {
                let incoming = Incoming {
                    caller: None,
                    key: CallerKey::Unlimited,
                    profile: None,
                    arguments: None,
                    large: false,
                    door: Door::McpStdio,
                };
                let params = params.unwrap_or_default();
                let stream = sessions.start(session, id, method, params, incoming).await;
                tokio::spawn(stream.forward(outbox.clone(), shutdown.clone()));
            }
            (Some(id), Some(_), None) => {
                let error = McpError::invalid_request(
                    "the session is not initialized: send `initialize` first",
                    None,
                );
                let _ = outbox.send(line_of(error_message(&id, &error))).await;
            }
            // Once: a repeated `initialized` starts no second relay.
            (None, Some("notifications/initialized"), Some(session)) if !relaying => {
                relaying = true;
                relay_changes(&sessions, session, &outbox);
            }
            (None, Some("notifications/initialized"), Some(_)) => {}
            (None, Some(method), Some(session)) => {
                sessions.notified(session, method, params).await;
            }
            (Some(id), None, Some(session)) => {
                sessions.answered(session, &id, result, error).await;
            }
            // Before `initialize`, nothing else means anything.
            _ => {}
        }
    }
    if let Some(session) = session {
        session.close();
    }
    drop(outbox);
    let _ = writer.await;
}

/// How reading a line went.
enum Line {
    /// A line (or the last bytes before the end) is in the buffer.
    Read,
    /// A line over the limit was skipped to its end.
    TooLong,
    /// The input closed (or broke).
    End,
}

/// Reads one line into `line` (without holding more than `max` bytes of
/// it).
async fn read_line<R: AsyncRead + Unpin>(
    input: &mut BufReader<R>,
    line: &mut Vec<u8>,
    max: usize,
) -> Line {
    let mut too_long = false;
    loop {
        let available = match input.fill_buf().await {
            Ok([]) if line.is_empty() && !too_long => return Line::End,
            Ok([]) => break,
            Ok(available) => available,
            Err(_) => return Line::End,
        };
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(end) => (&available[..=end], true),
            None => (available, false),
        };
        let taken = chunk.len();
        if !too_long && line.len() + taken <= max.saturating_add(1) {
            line.extend_from_slice(chunk);
        } else {
            too_long = true;
            line.clear();
        }
        input.consume(taken);
        if done {
            break;
        }
    }
    if too_long { Line::TooLong } else { Line::Read }
}

/// A JSON-RPC error answering no request (it could not be read).
fn refusal(code: i32, message: &str) -> Bytes {
    let refusal = json!({
        "jsonrpc": "2.0", "id": null,
        "error": {"code": code, "message": message},
    });
    line_of(Bytes::from(refusal.to_string()))
}

/// `message` on a line of its own.
fn line_of(message: Bytes) -> Bytes {
    let mut line = Vec::with_capacity(message.len() + 1);
    line.extend_from_slice(&message);
    line.push(b'\n');
    Bytes::from(line)
}

/// The session an `initialize` opens (`None` when it is refused), and the
/// answer.
fn open(
    sessions: &Sessions,
    id: &RequestId,
    params: Option<Map<String, Value>>,
) -> (Option<Arc<McpSession>>, Bytes) {
    let params = Value::Object(params.unwrap_or_default());
    let params = match InitializeRequestParams::deserialize(params) {
        Ok(params) => params,
        Err(e) => {
            let error = McpError::invalid_params(format!("Invalid initialize params: {e}"), None);
            return (None, error_message(id, &error));
        }
    };
    let shared = &sessions.shared;
    let service = ExportService::new(Arc::clone(shared), None, Arc::clone(&sessions.tasks));
    let info = service.negotiate_initialize(&params);
    let version = info.protocol_version.clone();
    // One client: its questions' ids need name no instance.
    let session = sessions.session(service, None, version, params.capabilities, None);
    let answer = session.reply(id, Ok(ServerResult::Initialize(info)));
    (Some(session), answer)
}

/// From now on, tells the client of every registry change
/// (`notifications/tools/list_changed`) until its session or the server
/// ends.
fn relay_changes(sessions: &Sessions, session: &McpSession, outbox: &mpsc::Sender<Bytes>) {
    let mut changes = sessions.shared.registry.subscribe();
    let ended = session.closed.clone();
    let outbox = outbox.clone();
    let note = line_of(notification("notifications/tools/list_changed", &json!({})));
    sessions.shared.runner.tasks().spawn(async move {
        loop {
            tokio::select! {
                () = ended.cancelled() => return,
                changed = changes.changed() => {
                    if changed.is_err() || outbox.send(note.clone()).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
}

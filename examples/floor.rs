//! The FLOOR: the least a HAIP server must do, as a baseline for `bench/run.sh`.
//!
//! This is **not a product** and not a way to write a server. It exists so the
//! benchmarks can say how much the `haip` runtime costs over the bare minimum:
//! a plain `TcpListener`, `tokio_tungstenite::accept_async`, `serde_json`, and
//! per connection one task that
//!
//! - sends the `HAI` of docs/protocol.md §3.1 first (fresh UUIDs, `seq` `"1"`),
//! - answers every `TOOL_CALL` with `TOOL_DONE` `OK`, result
//!   `{"echoed": params.message}` (whatever the tool name: no registry, no
//!   schema validation, no concurrency limits, no queues),
//! - answers `PING` with `PONG` (nonce copied),
//! - ignores everything else (no replay window, no flow control, no heartbeat,
//!   no auth, no path routing, no sessions that outlive their connection).
//!
//! Every envelope it sends carries all seven fields, `seq` counting up. Replies
//! are written as they are produced and flushed once no further inbound message
//! is already waiting, so pipelined calls share a write.
//!
//! ```text
//! HAIP_ADDR=127.0.0.1:9090 cargo run --release --example floor
//! haip bench ws://127.0.0.1:9090/haip --tool echo --params '{"message":"hi"}' --duration 5s
//! ```

use std::time::{SystemTime, UNIX_EPOCH};

use futures_util::{FutureExt, SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::var("HAIP_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    let listener = TcpListener::bind(&addr).await?;
    eprintln!("floor: listening on {}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(async move {
            // A failed handshake or a broken connection just ends that connection.
            let _ = serve(stream).await;
        });
    }
}

/// One connection: HAI first, then answer TOOL_CALL and PING until it closes.
async fn serve(stream: TcpStream) -> Result<(), tokio_tungstenite::tungstenite::Error> {
    stream.set_nodelay(true)?;
    let mut ws = tokio_tungstenite::accept_async(stream).await?;
    let mut out = Outbound {
        session: uuid::Uuid::new_v4().to_string(),
        seq: 0,
    };
    ws.send(out.envelope("SYSTEM", "HAI", hai_payload()))
        .await?;
    loop {
        // Flush only when nothing else is already waiting to be read.
        let next = match ws.next().now_or_never() {
            Some(next) => next,
            None => {
                ws.flush().await?;
                ws.next().await
            }
        };
        let text = match next {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Close(_))) | None => return Ok(()),
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e),
        };
        let Ok(inbound) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        let payload = &inbound["payload"];
        let reply = match inbound["type"].as_str() {
            Some("TOOL_CALL") => {
                let call_id = payload["call_id"]
                    .as_str()
                    .or_else(|| inbound["id"].as_str())
                    .unwrap_or_default();
                out.envelope(
                    "AGENT",
                    "TOOL_DONE",
                    json!({
                        "call_id": call_id,
                        "status": "OK",
                        "result": {"echoed": payload["params"]["message"]},
                    }),
                )
            }
            Some("PING") => match payload.get("nonce") {
                Some(nonce) => out.envelope("SYSTEM", "PONG", json!({ "nonce": nonce })),
                None => out.envelope("SYSTEM", "PONG", json!({})),
            },
            _ => continue,
        };
        ws.feed(reply).await?;
    }
}

/// The per-connection outbound state: session id and sequence counter.
struct Outbound {
    session: String,
    seq: u64,
}

impl Outbound {
    /// A complete envelope (all seven fields), as a text message.
    fn envelope(&mut self, channel: &str, kind: &str, payload: Value) -> Message {
        self.seq += 1;
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        Message::text(
            json!({
                "id": uuid::Uuid::new_v4().to_string(),
                "session": self.session,
                "seq": self.seq.to_string(),
                "ts": ts.to_string(),
                "channel": channel,
                "type": kind,
                "payload": payload,
            })
            .to_string(),
        )
    }
}

/// The `HAI` payload of docs/protocol.md §3.1, verbatim.
fn hai_payload() -> Value {
    json!({
        "haip_version": "1.1.2",
        "accept_major": [1],
        "accept_events": [
            "HAI", "RUN_STARTED", "RUN_FINISHED", "RUN_CANCEL", "RUN_ERROR", "PING", "PONG",
            "REPLAY_REQUEST", "TEXT_MESSAGE_START", "TEXT_MESSAGE_PART", "TEXT_MESSAGE_END",
            "AUDIO_CHUNK", "TOOL_CALL", "TOOL_UPDATE", "TOOL_DONE", "TOOL_CANCEL", "TOOL_LIST",
            "TOOL_SCHEMA", "ERROR", "FLOW_UPDATE", "PAUSE_CHANNEL", "RESUME_CHANNEL"
        ],
        "capabilities": {
            "binary_frames": true,
            "flow_control": {"initial_credit_messages": 1000, "initial_credit_bytes": 1048576},
            "max_concurrent_runs": 10,
            "signed_envelopes": false
        }
    })
}

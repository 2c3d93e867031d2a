//! Attack 4: a client that reads everything asks for a lot at once: a
//! `REPLAY_REQUEST` after 5000 PINGs, a resumption after 5000 PINGs (while the
//! old connection is still open, then after it vanished), and 5000 PINGs in one
//! SSE upstream POST.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, Stream, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use crate::Args;
use crate::http::{open_sse, post_message};
use crate::wire::{
    Got, Ws, close, describe, kind, ms, open, ping_pong, ping_text, recv, round3, seq_of,
};

/// Sends `count` PINGs one by one, each after the previous PONG; returns the
/// texts received by seq.
async fn ping_serially(
    ws: &mut Ws,
    prefix: &str,
    count: usize,
    kept: &mut HashMap<u64, String>,
) -> Result<u64, String> {
    let mut newest = 0;
    for i in 1..=count {
        let nonce = format!("{prefix}{i}");
        ws.send(Message::text(ping_text(&nonce)))
            .await
            .map_err(|e| format!("send: {e}"))?;
        loop {
            match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
                Err(_) => return Err(format!("no PONG for PING {i} within 10 s")),
                Ok(None) => return Err("connection ended".to_owned()),
                Ok(Some(Err(e))) => return Err(e.to_string()),
                Ok(Some(Ok(Message::Text(t)))) => {
                    let v: Value = serde_json::from_str(t.as_str()).map_err(|e| e.to_string())?;
                    if let Some(seq) = seq_of(&v) {
                        newest = newest.max(seq);
                        kept.insert(seq, t.as_str().to_owned());
                    }
                    if kind(&v) == "PONG" && v["payload"]["nonce"] == nonce.as_str() {
                        break;
                    }
                }
                Ok(Some(Ok(Message::Close(f)))) => {
                    return Err(format!("closed: {:?}", f.map(|f| u16::from(f.code))));
                }
                Ok(Some(Ok(_))) => {}
            }
        }
    }
    Ok(newest)
}

/// Receives replayed envelopes (seq ≤ `newest`) until the envelope with seq
/// `newest` or `end` is seen; checks order and content against `kept`.
async fn collect_replay<S>(
    ws: &mut S,
    session: &str,
    newest: u64,
    kept: &HashMap<u64, String>,
    stop: impl Fn(&Value) -> bool,
) -> (Value, Option<Value>)
where
    S: Stream<Item = Result<Message, WsError>> + Unpin,
{
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
    let mut count = 0u64;
    let mut first = None;
    let mut last = 0u64;
    let mut ascending = true;
    let mut contiguous = true;
    let mut identical = true;
    let mut stopper = None;
    let mut ended = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let next = match tokio::time::timeout(left, ws.next()).await {
            Err(_) => {
                ended = Some("timeout".to_owned());
                break;
            }
            Ok(next) => next,
        };
        let text = match next {
            Some(Ok(Message::Text(t))) => t.as_str().to_owned(),
            Some(Ok(Message::Close(f))) => {
                ended = Some(format!("close {:?}", f.map(|f| u16::from(f.code))));
                break;
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => {
                ended = Some(e.to_string());
                break;
            }
            None => {
                ended = Some("end".to_owned());
                break;
            }
        };
        let Ok(v) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        if stop(&v) {
            stopper = Some(v);
            break;
        }
        if v["session"] != session {
            continue;
        }
        let Some(seq) = seq_of(&v) else { continue };
        if seq > newest {
            continue;
        }
        count += 1;
        first.get_or_insert(seq);
        if seq <= last {
            ascending = false;
        }
        if last != 0 && seq != last + 1 {
            contiguous = false;
        }
        last = seq;
        if kept.get(&seq).is_some_and(|k| *k != text) {
            identical = false;
        }
        if seq == newest {
            break;
        }
    }
    (
        json!({
            "received": count,
            "first_seq": first,
            "last_seq": last,
            "ascending": ascending,
            "contiguous": contiguous,
            "byte_identical": identical,
            "seconds": round3(started.elapsed().as_secs_f64()),
            "ended": ended,
        }),
        stopper,
    )
}

async fn replay_request(args: &Args) -> Result<Value, String> {
    let (mut ws, hai) = open(&args.url).await?;
    let session = hai["session"].as_str().unwrap_or("").to_owned();
    let mut kept = HashMap::new();
    if let Some(seq) = seq_of(&hai) {
        kept.insert(seq, hai.to_string());
    }
    let newest = ping_serially(&mut ws, "p", 5000, &mut kept).await?;
    // HAI text as sent is not kept verbatim by serde; compare PONGs only.
    kept.remove(&1);
    let mut from = 1u64;
    let mut too_old = None;
    let mut result = Value::Null;
    for _ in 0..2 {
        let request = json!({"type": "REPLAY_REQUEST", "payload": {"from_seq": from.to_string()}})
            .to_string();
        ws.send(Message::text(request))
            .await
            .map_err(|e| format!("send: {e}"))?;
        let (r, stopper) =
            collect_replay(&mut ws, &session, newest, &kept, |v| kind(v) == "ERROR").await;
        match stopper {
            Some(err) if err["payload"]["code"] == "REPLAY_TOO_OLD" => {
                too_old = Some(err["payload"]["detail"].clone());
                from = err["payload"]["detail"]["oldest_seq"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(newest);
            }
            Some(err) => {
                result = json!({"error": describe(&err)});
                break;
            }
            None => {
                result = r;
                break;
            }
        }
    }
    let usable = ping_pong(&mut ws, "after-replay").await;
    close(ws).await;
    Ok(json!({
        "pings": 5000,
        "newest_seq": newest,
        "requested_from": from,
        "replay_too_old": too_old,
        "expected": newest + 1 - from,
        "replay": result,
        "usable_after": usable.err().unwrap_or_else(|| "yes".to_owned()),
    }))
}

async fn resume_once(
    url: &str,
    session: &str,
    newest: u64,
    kept: &HashMap<u64, String>,
) -> (Value, Option<Ws>) {
    let (mut ws, _) = match open(url).await {
        Ok(x) => x,
        Err(e) => return (json!({"error": e}), None),
    };
    let hai =
        json!({"type": "HAI", "session": session, "payload": {"last_rx_seq": "1"}}).to_string();
    if let Err(e) = ws.send(Message::text(hai)).await {
        return (json!({"error": format!("send: {e}")}), None);
    }
    // The confirming HAI is new (seq above `newest`); an older one may be replayed.
    let is_end = |v: &Value| {
        (kind(v) == "HAI"
            && v["payload"]["last_rx_seq"].is_string()
            && seq_of(v).is_some_and(|seq| seq > newest))
            || (kind(v) == "ERROR" && v["payload"]["code"] == "RESUME_FAILED")
    };
    let (mut r, stopper) = collect_replay(&mut ws, session, newest, kept, is_end).await;
    // The replay ends with seq `newest`; the confirming HAI comes next.
    let stopper = match stopper {
        Some(v) => Some(v),
        None => loop {
            match recv(&mut ws, Duration::from_secs(10)).await {
                Got::Envelope(v, _) if is_end(&v) => break Some(v),
                Got::Envelope(..) => {}
                _ => break None,
            }
        },
    };
    r["confirm_seq"] = json!(stopper.as_ref().and_then(seq_of));
    r["ended_with"] = match &stopper {
        Some(v) if kind(v) == "HAI" => {
            json!(format!("HAI last_rx_seq {}", v["payload"]["last_rx_seq"]))
        }
        Some(v) => json!(describe(v)),
        None => json!("nothing"),
    };
    (r, Some(ws))
}

async fn resumption(args: &Args) -> Result<Value, String> {
    let (mut a, hai) = open(&args.url).await?;
    let session = hai["session"].as_str().unwrap_or("").to_owned();
    let mut kept = HashMap::new();
    let newest = ping_serially(&mut a, "r", 5000, &mut kept).await?;
    // B resumes while A is still connected: A must be closed 1000.
    let watch_a = tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match recv(&mut a, left).await {
                Got::Envelope(..) => {}
                other => return other.describe_end(),
            }
        }
    });
    let (b_result, b) = resume_once(&args.url, &session, newest, &kept).await;
    let a_got = watch_a.await.unwrap_or_else(|e| format!("task: {e}"));
    // B vanishes without a close; C resumes the detached session.
    drop(b);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // C misses everything B was sent too: the replay and B's confirming HAI.
    let newest_c = b_result["confirm_seq"].as_u64().unwrap_or(newest);
    let (c_result, c) = resume_once(&args.url, &session, newest_c, &kept).await;
    if let Some(c) = c {
        close(c).await;
    }
    Ok(json!({
        "pings": 5000,
        "newest_seq": newest,
        "expected_missed": newest - 1,
        "expected_missed_after_disconnect": newest_c - 1,
        "while_connected": b_result,
        "old_connection_got": a_got,
        "after_disconnect": c_result,
    }))
}

async fn sse_batch(args: &Args) -> Result<Value, String> {
    let mut sse = open_sse(&args.addr).await?;
    let n = 5000;
    let body = format!(
        "[{}]",
        (1..=n)
            .map(|i| ping_text(&format!("s{i}")))
            .collect::<Vec<_>>()
            .join(",")
    );
    let started = Instant::now();
    let post = post_message(&args.addr, &sse.session, &body).await;
    let post_ms = ms(started.elapsed());
    let mut pongs = 0u64;
    let mut in_order = true;
    let deadline = Instant::now() + Duration::from_secs(30);
    while pongs < n {
        match tokio::time::timeout_at(deadline.into(), sse.events.recv()).await {
            Ok(Some(v)) if kind(&v) == "PONG" => {
                pongs += 1;
                if v["payload"]["nonce"] != format!("s{pongs}").as_str() {
                    in_order = false;
                }
            }
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    let stream_seconds = round3(started.elapsed().as_secs_f64());
    sse.reader.abort();
    Ok(json!({
        "pings": n,
        "body_bytes": body.len(),
        "post_status": post.as_ref().map(|r| r.head.status).ok(),
        "post_body": post.as_ref().map(|r| String::from_utf8_lossy(&r.body).into_owned()).unwrap_or_else(|e| e.clone()),
        "post_ms": post_ms,
        "pongs": pongs,
        "in_order": in_order,
        "seconds": stream_seconds,
    }))
}

pub(crate) async fn attack_replay(args: &Args) -> Result<Value, String> {
    let a = replay_request(args)
        .await
        .unwrap_or_else(|e| json!({"error": e}));
    let b = resumption(args)
        .await
        .unwrap_or_else(|e| json!({"error": e}));
    let c = sse_batch(args)
        .await
        .unwrap_or_else(|e| json!({"error": e}));
    let replay = &a["replay"];
    let a_sum = if let Some(e) = a["error"].as_str().or(replay["error"].as_str()) {
        format!("failed: {e}")
    } else {
        format!(
            "{} of {} envelopes replayed (seq {}–{}){}{}",
            replay["received"],
            a["expected"],
            replay["first_seq"],
            replay["last_seq"],
            if replay["ascending"] == true && replay["contiguous"] == true {
                ", ascending, no gap"
            } else {
                ", OUT OF ORDER or gaps"
            },
            if a["replay_too_old"].is_null() {
                String::new()
            } else {
                format!(", REPLAY_TOO_OLD from 1 ({})", a["replay_too_old"])
            }
        )
    };
    let res_sum = |r: &Value| -> String {
        if let Some(e) = r["error"].as_str() {
            return format!("failed: {e}");
        }
        format!(
            "{} missed envelopes, then {}",
            r["received"],
            r["ended_with"].as_str().unwrap_or("?")
        )
    };
    let summary = format!(
        "(a) {a_sum}; (b) resume while connected: {} (old connection: {}); after a disconnect: {} (expected {}); (c) SSE POST of 5000 PINGs: {} {}, {} PONGs{}",
        res_sum(&b["while_connected"]),
        b["old_connection_got"].as_str().unwrap_or("?"),
        res_sum(&b["after_disconnect"]),
        b["expected_missed_after_disconnect"],
        c["post_status"],
        c["post_body"].as_str().unwrap_or(""),
        c["pongs"],
        if c["in_order"] == true {
            " in order"
        } else {
            " OUT OF ORDER"
        },
    );
    Ok(json!({
        "attack": "4",
        "name": "replay, resumption and batched POST for a reading client",
        "attacker_got": summary,
        "accepted_calls": 0,
        "tool_dones": 0,
        "lost_tool_dones": 0,
        "replay_request": a,
        "resumption": b,
        "sse_batch": c,
    }))
}

//! Attack 3: huge violation lists (`create_user` with 125 000 unknown params)
//! and huge results (`blob` of 3, 10 and 20 MiB) on one connection.

use std::time::{Duration, Instant};

use futures_util::SinkExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::wire::{Ws, call_text, close, ms, open, ping_pong, unknown_members, wait_done};
use crate::{Args, clock};

async fn one_call(ws: &mut Ws, call_id: &str, tool: &str, params: &str, others: &mut u64) -> Value {
    let at = clock();
    let text = call_text(call_id, tool, params);
    let started = Instant::now();
    let request_bytes = text.len();
    if let Err(e) = ws.send(Message::text(text)).await {
        return json!({"call_id": call_id, "error": format!("send: {e}")});
    }
    match wait_done(ws, call_id, Duration::from_secs(60), others).await {
        Ok((v, size)) => {
            let result = &v["payload"]["result"];
            json!({
                "call_id": call_id,
                "request_bytes": request_bytes,
                "status": v["payload"]["status"],
                "code": result["code"],
                "details_len": result["details"].as_array().map(Vec::len),
                "details": if result["details"].is_object() { result["details"].clone() } else { Value::Null },
                "total": result["total"],
                "total_at_least": result["total_at_least"],
                "data_len": result["data"].as_str().map(str::len),
                "reply_bytes": size,
                "at_s": at,
                "ms": ms(started.elapsed()),
            })
        }
        Err(e) => {
            json!({"call_id": call_id, "request_bytes": request_bytes, "error": e, "ms": ms(started.elapsed())})
        }
    }
}

pub(crate) async fn attack_oversize(args: &Args) -> Result<Value, String> {
    let (mut ws, _) = open(&args.url).await?;
    let mut others = 0u64;
    let members = unknown_members(125_000, "0");
    let with_valid =
        format!(r#"{{"username":"alice","email":"alice@example.com","age":30,{members}}}"#);
    let only_unknown = format!("{{{members}}}");
    drop(members);
    let mut calls = Vec::new();
    calls.push(one_call(&mut ws, "v-1", "create_user", &with_valid, &mut others).await);
    calls.push(one_call(&mut ws, "v-2", "create_user", &only_unknown, &mut others).await);
    drop((with_valid, only_unknown));
    let open_after_validation = ping_pong(&mut ws, "after-validation").await;
    let mut blobs = Vec::new();
    for (id, bytes) in [
        ("b-3MiB", 3u64 << 20),
        ("b-10MiB", 10 << 20),
        ("b-20MiB", 20 << 20),
    ] {
        if ws_is_dead(&calls, &blobs) {
            break;
        }
        blobs.push(
            one_call(
                &mut ws,
                id,
                "blob",
                &format!(r#"{{"bytes":{bytes}}}"#),
                &mut others,
            )
            .await,
        );
    }
    // Any second TOOL_DONE would arrive before this PONG.
    let open_at_end = ping_pong(&mut ws, "after-blobs").await;
    close(ws).await;
    let all: Vec<&Value> = calls.iter().chain(blobs.iter()).collect();
    let dones = all.iter().filter(|c| c["status"].is_string()).count() as u64;
    let accepted = all
        .iter()
        .filter(|c| !c["error"].as_str().is_some_and(|e| e.starts_with("send")))
        .count() as u64;
    let short = |c: &Value| -> String {
        if let Some(e) = c["error"].as_str() {
            return format!("no TOOL_DONE ({e})");
        }
        let mut s = c["status"].as_str().unwrap_or("?").to_owned();
        if let Some(code) = c["code"].as_str() {
            s.push(' ');
            s.push_str(code);
        }
        if let Some(n) = c["details_len"].as_u64() {
            s.push_str(&format!(", {n} details"));
        }
        if !c["total"].is_null() {
            s.push_str(&format!(", total {}", c["total"]));
        }
        if !c["total_at_least"].is_null() {
            s.push_str(&format!(", total_at_least {}", c["total_at_least"]));
        }
        if c["details"].is_object() {
            s.push_str(&format!(" {}", c["details"]));
        }
        s.push_str(&format!(", {} B reply", c["reply_bytes"]));
        s
    };
    let summary = format!(
        "(a) 125 000 unknown keys + valid fields: {}; unknown keys only: {}; (b) blob 3 MiB: {}; 10 MiB: {}; 20 MiB: {}; connection {}",
        calls.first().map(short).unwrap_or_default(),
        calls.get(1).map(short).unwrap_or_default(),
        blobs
            .first()
            .map(short)
            .unwrap_or_else(|| "not sent".to_owned()),
        blobs
            .get(1)
            .map(short)
            .unwrap_or_else(|| "not sent".to_owned()),
        blobs
            .get(2)
            .map(short)
            .unwrap_or_else(|| "not sent".to_owned()),
        match &open_at_end {
            Ok(()) => "still open (PING→PONG)".to_owned(),
            Err(e) => format!("not usable: {e}"),
        }
    );
    Ok(json!({
        "attack": "3",
        "name": "huge violation lists, huge results",
        "attacker_got": summary,
        "accepted_calls": accepted,
        "tool_dones": dones + others,
        "lost_tool_dones": accepted.saturating_sub(dones),
        "unexpected_tool_dones": others,
        "validation": calls,
        "blobs": blobs,
        "open_after_validation": open_after_validation.err().unwrap_or_else(|| "yes".to_owned()),
        "open_at_end": open_at_end.err().unwrap_or_else(|| "yes".to_owned()),
    }))
}

/// Whether an earlier call found the connection gone.
fn ws_is_dead(calls: &[Value], blobs: &[Value]) -> bool {
    calls.iter().chain(blobs).any(|c| {
        c["error"].as_str().is_some_and(|e| {
            e.starts_with("close") || e.starts_with("connection ended") || e.starts_with("send")
        })
    })
}

//! Attack 5: ~1 MB `create_user` params, continuously, from four clients that
//! read the replies.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::Args;
use crate::attacks::flood::{merge_pipes, pipelined_client};
use crate::attacks::merge_into;
use crate::wire::{call_text, unknown_members};

pub(crate) async fn attack_validation(args: &Args) -> Result<Value, String> {
    let duration = args.duration.unwrap_or(Duration::from_secs(20));
    let deadline = Instant::now() + duration;
    let long_name: Arc<str> = Arc::from(format!(
        r#"{{"username":"{}","email":"alice@example.com","age":30}}"#,
        "a".repeat(1_000_000)
    ));
    let many_keys: Arc<str> = Arc::from(format!("{{{}}}", unknown_members(60_000, "1234567890")));
    let mut tasks = Vec::new();
    for client in 0..4 {
        let params = if client % 2 == 0 {
            Arc::clone(&long_name)
        } else {
            Arc::clone(&many_keys)
        };
        let make: Arc<dyn Fn(u64) -> String + Send + Sync> =
            Arc::new(move |n| call_text(&format!("v{client}-{n}"), "create_user", &params));
        tasks.push(tokio::spawn(pipelined_client(
            args.url.clone(),
            make,
            4,
            deadline,
            Duration::from_secs(20),
        )));
    }
    let mut pipes = Vec::new();
    for t in tasks {
        pipes.push(t.await.map_err(|e| format!("client task: {e}"))?);
    }
    let merged = merge_pipes(&pipes);
    let summary = format!(
        "{} calls of ~1 MB ({} B username / {} B of 60 000 keys): {}{}",
        merged["accepted_calls"],
        long_name.len(),
        many_keys.len(),
        merged["statuses"]
            .as_object()
            .map(|m| m
                .iter()
                .map(|(k, v)| format!("{v}× {k}"))
                .collect::<Vec<_>>()
                .join(", "))
            .unwrap_or_default(),
        if merged["connections_ended"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
        {
            format!("; connections ended: {}", merged["connections_ended"])
        } else {
            String::new()
        }
    );
    let mut report = json!({
        "attack": "5",
        "name": "~1 MB params continuously from four clients",
        "attacker_got": summary,
        "seconds_sending": duration.as_secs(),
        "params_bytes": [long_name.len(), many_keys.len()],
    });
    merge_into(&mut report, merged);
    Ok(report)
}

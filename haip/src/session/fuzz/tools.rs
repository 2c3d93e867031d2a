//! The tools the fuzzed sessions call: fast, slow, gated, panicking, failing,
//! timing out.

use super::*;

/// Tools covering every way a call can end (docs/protocol.md §6.4 outcome table).
/// `gate` and `stubborn` wait for a permit of `gate`; the harness adds
/// permits as a step and closes it to let them all finish.
pub(super) fn fuzz_tools(gate: &Arc<Semaphore>) -> Vec<Tool> {
    vec![
        gate_tool(Arc::clone(gate)),
        stubborn_tool(Arc::clone(gate)),
        boom_tool(),
        fail_tool(),
        steps_tool(),
        quitter_tool(),
        slowpoke_tool(),
        closed_tool(),
        big_tool(),
        nullish_tool(),
        liar_tool(),
    ]
}

fn built(tool: Result<Tool, crate::Error>) -> Tool {
    tool.expect("fuzz tool definitions are valid")
}

/// Ends when released, or promptly when cancelled.
fn gate_tool(gate: Arc<Semaphore>) -> Tool {
    built(
        Tool::builder("gate")
            .handler(move |_: Value, ctx: Context| {
                let gate = Arc::clone(&gate);
                async move {
                    tokio::select! {
                        permit = gate.acquire() => {
                            if let Ok(permit) = permit {
                                permit.forget();
                            }
                            Ok(json!({"released": true}))
                        }
                        () = ctx.cancelled() => Err(ToolError::cancelled()),
                    }
                }
            })
            .build(),
    )
}

/// Ignores cancellation: stopped by the abort after the grace period.
fn stubborn_tool(gate: Arc<Semaphore>) -> Tool {
    built(
        Tool::builder("stubborn")
            .handler(move |_: Value, _ctx: Context| {
                let gate = Arc::clone(&gate);
                async move {
                    if let Ok(permit) = gate.acquire().await {
                        permit.forget();
                    }
                    Ok::<_, ToolError>(json!("finally"))
                }
            })
            .build(),
    )
}

/// Panics when its params are an object; echoes anything else.
fn boom_tool() -> Tool {
    built(
        Tool::builder("boom")
            .handler(|params: Value, _ctx: Context| async move {
                if params.is_object() {
                    panic!("the boom tool panics on purpose");
                }
                Ok::<_, ToolError>(params)
            })
            .build(),
    )
}

/// Fails, with details.
fn fail_tool() -> Tool {
    built(
        Tool::builder("fail")
            .handler(|_: Value, _ctx: Context| async move {
                Err::<Value, _>(
                    ToolError::execution("the fail tool fails")
                        .with_details(json!({"why": "on purpose"})),
                )
            })
            .build(),
    )
}

/// Progress, merged while unsent, clamped, NaN dropped (docs/protocol.md §6.5).
fn steps_tool() -> Tool {
    built(
        Tool::builder("steps")
            .handler(|_: Value, ctx: Context| async move {
                for step in 0..4u8 {
                    ctx.progress_with(f64::from(step) * 40.0, json!({"step": step}));
                    tokio::task::yield_now().await;
                }
                ctx.progress(f64::NAN);
                Ok::<_, ToolError>(json!({"steps": 4}))
            })
            .build(),
    )
}

/// Reports a cancellation nobody asked for.
fn quitter_tool() -> Tool {
    built(
        Tool::builder("quitter")
            .handler(
                |_: Value, _ctx: Context| async move { Err::<Value, _>(ToolError::cancelled()) },
            )
            .build(),
    )
}

/// Times out, then ignores the cancel until aborted.
fn slowpoke_tool() -> Tool {
    built(
        Tool::builder("slowpoke")
            .timeout(Duration::from_millis(50))
            .handler(|_: Value, _ctx: Context| async move {
                tokio::time::sleep(Duration::from_secs(600)).await;
                Ok::<_, ToolError>(json!("late"))
            })
            .build(),
    )
}

/// A closed schema: unknown params are violations.
fn closed_tool() -> Tool {
    built(
        Tool::builder("closed")
            .input_schema(json!({
                "type": "object",
                "properties": {"s": {"type": "string"}},
                "required": ["s"],
                "additionalProperties": false
            }))
            .handler(|params: Value, _ctx: Context| async move {
                Ok::<_, ToolError>(json!({"len": params["s"].as_str().map_or(0, str::len)}))
            })
            .build(),
    )
}

/// Progress and a result over a small `max_outbound_message_bytes`.
fn big_tool() -> Tool {
    built(
        Tool::builder("big")
            .handler(|_: Value, ctx: Context| async move {
                ctx.progress_with(50.0, "p".repeat(6000));
                tokio::task::yield_now().await;
                Ok::<_, ToolError>(json!({"blob": "b".repeat(6000)}))
            })
            .build(),
    )
}

/// Returns `null`.
fn nullish_tool() -> Tool {
    built(
        Tool::builder("nullish")
            .handler(|_: Value, _ctx: Context| async move { Ok::<_, ToolError>(Value::Null) })
            .build(),
    )
}

/// A result violating its output schema (`strict_output_validation`).
fn liar_tool() -> Tool {
    built(
        Tool::builder("liar")
            .output_schema(json!({
                "type": "object",
                "properties": {"n": {"type": "number"}},
                "required": ["n"]
            }))
            .handler(|_: Value, _ctx: Context| async move {
                Ok::<_, ToolError>(json!({"n": "not a number"}))
            })
            .build(),
    )
}

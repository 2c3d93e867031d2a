//! The tools the fuzzed sessions call: fast, slow, gated, panicking, failing,
//! timing out.

use super::*;
use crate::tool::{ToolBuilder, ToolHandler};

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

/// The tool `builder` describes, running `handler`.
fn built(builder: ToolBuilder, handler: impl ToolHandler) -> Tool {
    builder
        .handler(handler)
        .build()
        .expect("fuzz tool definitions are valid")
}

/// Waits for a permit of `gate`, and keeps it.
async fn pass(gate: &Semaphore) {
    if let Ok(permit) = gate.acquire().await {
        permit.forget();
    }
}

/// Ends when released, or promptly when cancelled.
fn gate_tool(gate: Arc<Semaphore>) -> Tool {
    built(Tool::builder("gate"), move |_: Value, ctx: Context| {
        let gate = Arc::clone(&gate);
        async move {
            tokio::select! {
                () = pass(&gate) => Ok(json!({"released": true})),
                () = ctx.cancelled() => Err(ToolError::cancelled()),
            }
        }
    })
}

/// Ignores cancellation: stopped by the abort after the grace period.
fn stubborn_tool(gate: Arc<Semaphore>) -> Tool {
    built(Tool::builder("stubborn"), move |_: Value, _ctx: Context| {
        let gate = Arc::clone(&gate);
        async move {
            pass(&gate).await;
            Ok::<_, ToolError>(json!("finally"))
        }
    })
}

/// Panics when its params are an object; echoes anything else.
fn boom_tool() -> Tool {
    built(
        Tool::builder("boom"),
        |params: Value, _ctx: Context| async move {
            if params.is_object() {
                panic!("the boom tool panics on purpose");
            }
            Ok::<_, ToolError>(params)
        },
    )
}

/// Fails, with details.
fn fail_tool() -> Tool {
    built(
        Tool::builder("fail"),
        |_: Value, _ctx: Context| async move {
            Err::<Value, _>(
                ToolError::execution("the fail tool fails")
                    .with_details(json!({"why": "on purpose"})),
            )
        },
    )
}

/// Progress, merged while unsent, clamped, NaN dropped (docs/protocol.md §6.5).
fn steps_tool() -> Tool {
    built(
        Tool::builder("steps"),
        |_: Value, ctx: Context| async move {
            for step in 0..4u8 {
                ctx.progress_with(f64::from(step) * 40.0, json!({"step": step}));
                tokio::task::yield_now().await;
            }
            ctx.progress(f64::NAN);
            Ok::<_, ToolError>(json!({"steps": 4}))
        },
    )
}

/// Reports a cancellation nobody asked for.
fn quitter_tool() -> Tool {
    built(
        Tool::builder("quitter"),
        |_: Value, _ctx: Context| async move { Err::<Value, _>(ToolError::cancelled()) },
    )
}

/// Times out, then ignores the cancel until aborted.
fn slowpoke_tool() -> Tool {
    built(
        Tool::builder("slowpoke").timeout(Duration::from_millis(50)),
        |_: Value, _ctx: Context| async move {
            tokio::time::sleep(Duration::from_secs(600)).await;
            Ok::<_, ToolError>(json!("late"))
        },
    )
}

/// A closed schema: unknown params are violations.
fn closed_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {"s": {"type": "string"}},
        "required": ["s"],
        "additionalProperties": false
    });
    built(
        Tool::builder("closed").input_schema(schema),
        |params: Value, _ctx: Context| async move {
            Ok::<_, ToolError>(json!({"len": params["s"].as_str().map_or(0, str::len)}))
        },
    )
}

/// Progress and a result over a small `max_outbound_message_bytes`.
fn big_tool() -> Tool {
    built(Tool::builder("big"), |_: Value, ctx: Context| async move {
        ctx.progress_with(50.0, "p".repeat(6000));
        tokio::task::yield_now().await;
        Ok::<_, ToolError>(json!({"blob": "b".repeat(6000)}))
    })
}

/// Returns `null`.
fn nullish_tool() -> Tool {
    built(
        Tool::builder("nullish"),
        |_: Value, _ctx: Context| async move { Ok::<_, ToolError>(Value::Null) },
    )
}

/// A result violating its output schema (`strict_output_validation`).
fn liar_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {"n": {"type": "number"}},
        "required": ["n"]
    });
    built(
        Tool::builder("liar").output_schema(schema),
        |_: Value, _ctx: Context| async move { Ok::<_, ToolError>(json!({"n": "not a number"})) },
    )
}

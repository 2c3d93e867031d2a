//! The demo tools of docs/protocol.md §7: `echo`, `add`, `weather`. Their schemas are
//! fixed by the protocol docs (open objects), and they return fixed data by design.

use serde_json::{Value, json};

use super::{Tool, ToolError};
use crate::Context;

/// `echo`, `add` and `weather`, in that order.
pub(crate) fn tools() -> Vec<Tool> {
    vec![echo(), add(), weather()]
}

fn build(
    name: &str,
    description: &str,
    input: Value,
    output: Value,
    f: fn(Value) -> Result<Value, ToolError>,
) -> Tool {
    Tool::builder(name)
        .description(description)
        .input_schema(input)
        .output_schema(output)
        .handler(move |params: Value, _ctx: Context| async move { f(params) })
        .build()
        .expect("built-in tool definitions are valid")
}

fn echo() -> Tool {
    build(
        "echo",
        "Echo back the input",
        json!({"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}),
        json!({"type":"object","properties":{"echoed":{"type":"string"}}}),
        |params| Ok(json!({ "echoed": params["message"] })),
    )
}

fn add() -> Tool {
    build(
        "add",
        "Add two numbers",
        json!({"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}),
        json!({"type":"object","properties":{"result":{"type":"number"}}}),
        |params| {
            let (a, b) = (&params["a"], &params["b"]);
            if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64())
                && let Some(sum) = x.checked_add(y)
            {
                return Ok(json!({ "result": sum }));
            }
            let sum = a.as_f64().unwrap_or(f64::NAN) + b.as_f64().unwrap_or(f64::NAN);
            if !sum.is_finite() {
                return Err(ToolError::execution("The sum is not a finite number"));
            }
            Ok(json!({ "result": sum }))
        },
    )
}

fn weather() -> Tool {
    build(
        "weather",
        "Get weather information",
        json!({"type":"object","properties":{"location":{"type":"string"}}}),
        json!({"type":"object","properties":{"temperature":{"type":"string"},"condition":{"type":"string"},"location":{"type":"string"}}}),
        |params| {
            let location = params["location"].as_str().unwrap_or("Unknown");
            Ok(json!({"temperature": "22°C", "condition": "Sunny", "location": location}))
        },
    )
}

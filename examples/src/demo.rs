//! The quickstart's application tools: `calculator`, `process_file`, `create_user`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use haip::{Context, Tool, ToolError};
use serde_json::{Value, json};

/// The three quickstart tools, in the order they are served (after the built-ins).
pub fn tools() -> Vec<Tool> {
    vec![calculator(), process_file(), create_user()]
}

/// `calculator`: add, subtract, multiply or divide two numbers. Division by zero
/// is a tool error.
pub fn calculator() -> Tool {
    Tool::builder("calculator")
        .description("Perform a basic arithmetic operation on two numbers")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "operation": {
                    "type": "string",
                    "enum": ["add", "subtract", "multiply", "divide"],
                    "description": "The operation to perform"
                },
                "a": {"type": "number", "description": "First operand"},
                "b": {"type": "number", "description": "Second operand"}
            },
            "required": ["operation", "a", "b"],
            "additionalProperties": false
        }))
        .output_schema(json!({
            "type": "object",
            "properties": {"result": {"type": "number"}},
            "required": ["result"]
        }))
        .handler(|params: Value, _ctx: Context| async move {
            // The schema guarantees the shape; these defaults are never used.
            let a = params["a"].as_f64().unwrap_or_default();
            let b = params["b"].as_f64().unwrap_or_default();
            let result = match params["operation"].as_str().unwrap_or_default() {
                "add" => a + b,
                "subtract" => a - b,
                "multiply" => a * b,
                _ if b == 0.0 => return Err(ToolError::execution("Division by zero")),
                _ => a / b,
            };
            if !result.is_finite() {
                return Err(ToolError::execution("The result is not a finite number"));
            }
            Ok(json!({ "result": result }))
        })
        .build()
        .expect("calculator is a valid tool")
}

/// `process_file`: pretends to process a file in five 200 ms steps, reporting
/// progress 0, 20, ..., 100, and stops promptly when cancelled.
pub fn process_file() -> Tool {
    Tool::builder("process_file")
        .description("Process a file, reporting progress as it goes")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "filename": {"type": "string", "minLength": 1, "description": "The file to process"},
                "operation": {
                    "type": "string",
                    "enum": ["read", "analyze", "convert"],
                    "description": "What to do with it"
                }
            },
            "required": ["filename", "operation"],
            "additionalProperties": false
        }))
        .output_schema(json!({
            "type": "object",
            "properties": {"processed": {"type": "boolean"}, "lines": {"type": "integer"}},
            "required": ["processed", "lines"]
        }))
        .timeout(Duration::from_secs(60))
        .handler(|_params: Value, ctx: Context| async move {
            for step in 0..=5u32 {
                ctx.progress(f64::from(step) * 20.0);
                if step == 5 {
                    break;
                }
                tokio::select! {
                    () = ctx.cancelled() => return Err(ToolError::cancelled()),
                    () = tokio::time::sleep(Duration::from_millis(200)) => {}
                }
            }
            Ok(json!({ "processed": true, "lines": 150 }))
        })
        .build()
        .expect("process_file is a valid tool")
}

/// `create_user`: validates a new user (the schema does all the checking) and
/// assigns it an id.
pub fn create_user() -> Tool {
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    Tool::builder("create_user")
        .description("Create a user account")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "username": {
                    "type": "string",
                    "minLength": 3,
                    "maxLength": 20,
                    "pattern": "^[a-zA-Z0-9_]+$",
                    "description": "3 to 20 letters, digits or underscores"
                },
                "email": {"type": "string", "format": "email", "description": "Contact address"},
                "age": {"type": "integer", "minimum": 13, "maximum": 120, "description": "Age in years"}
            },
            "required": ["username", "email", "age"],
            "additionalProperties": false
        }))
        .output_schema(json!({
            "type": "object",
            "properties": {"user_id": {"type": "string"}, "created": {"type": "boolean"}},
            "required": ["user_id", "created"]
        }))
        .handler(|_params: Value, _ctx: Context| async move {
            let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
            Ok(json!({ "user_id": format!("user_{id}"), "created": true }))
        })
        .build()
        .expect("create_user is a valid tool")
}

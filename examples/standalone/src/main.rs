//! A tool server that depends on `haip` (and tokio for `main`) alone.
//!
//! ```text
//! cargo run -p haip-example-standalone
//! ```

use haip::{Context, ToolError, haip_tool};

/// The sum of two numbers.
#[haip::data]
struct Sum {
    /// `a + b`.
    result: f64,
}

/// Add two numbers.
#[haip_tool]
async fn add(
    /// First operand.
    a: f64,
    /// Second operand.
    b: f64,
) -> Sum {
    Sum { result: a + b }
}

/// Count down from `from`, one progress report per step.
#[haip_tool(timeout = "10s")]
async fn countdown(
    /// Where to start (at most 1000).
    #[schemars(range(max = 1000))]
    from: u32,
    ctx: Context,
) -> Result<String, ToolError> {
    for left in (0..=from).rev() {
        if ctx.is_cancelled() {
            return Err(ToolError::cancelled());
        }
        ctx.progress(f64::from(from - left) * 100.0 / f64::from(from.max(1)));
    }
    Ok("liftoff".to_owned())
}

/// Keep a JSON value under a key: any JSON, through `haip::Value`.
#[haip_tool]
async fn keep(
    /// The key, 1 to 64 characters.
    key: String,
    /// Any JSON value.
    value: haip::Value,
) -> Result<haip::Value, ToolError> {
    if key.is_empty() || key.len() > 64 {
        // Details are JSON too: `haip::json!`, no `serde_json` needed.
        return Err(ToolError::invalid_params("the key is 1 to 64 characters")
            .with_details(haip::json!({"key": key, "length": key.len()})));
    }
    Ok(haip::json!({"kept": key, "value": value}))
}

#[tokio::main]
async fn main() -> Result<(), haip::Error> {
    haip::serve().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tools_are_plain_functions_and_build() {
        assert_eq!(add(2.0, 3.0).await.result, 5.0);
        let (ctx, _cancel) = Context::detached("test");
        assert_eq!(countdown(3, ctx).await.unwrap(), "liftoff");
        assert_eq!(add::tool().name(), "add");
        assert!(countdown::tool().input_schema()["properties"]["from"]["maximum"] == 1000);
        let kept = keep("k".into(), haip::json!([1, 2])).await.unwrap();
        assert_eq!(kept, haip::json!({"kept": "k", "value": [1, 2]}));
        let refused = keep(String::new(), haip::Value::Null).await.unwrap_err();
        assert_eq!(
            refused.details(),
            Some(&haip::json!({"key": "", "length": 0}))
        );
    }
}

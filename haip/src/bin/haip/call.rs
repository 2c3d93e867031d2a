//! `haip call`: params from JSON or `key=value` pairs, a live progress bar,
//! Ctrl-C to cancel.

use clap::Args;
use haip::client::Outcome;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Map, Value};

use crate::{Common, Failure, connect, print_json};

#[derive(Args)]
pub(crate) struct CallArgs {
    #[command(flatten)]
    common: Common,
    /// The tool's name.
    tool: String,
    /// Params as a JSON object.
    #[arg(long, conflicts_with = "pairs")]
    params: Option<String>,
    /// Params as key=value pairs, typed by the tool's input schema
    /// (numbers, booleans, JSON for arrays and objects).
    pairs: Vec<String>,
}

pub(crate) async fn run(args: CallArgs) -> Result<(), Failure> {
    let client = connect(&args.common).await?;
    let params = match &args.params {
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(value @ Value::Object(_)) => value,
            Ok(_) => return Err(Failure::usage("--params must be a JSON object")),
            Err(e) => return Err(Failure::usage(format!("--params is not valid JSON: {e}"))),
        },
        None if args.pairs.is_empty() => Value::Object(Map::new()),
        None => {
            let schema = client.schema(&args.tool).await?;
            Value::Object(coerce_pairs(&args.pairs, &schema.input_schema)?)
        }
    };
    let mut call = client.call(&args.tool, params).await?;
    let bar = progress_bar(args.common.json);
    let mut cancelled = false;
    loop {
        tokio::select! {
            update = call.next_update() => match update {
                Some(update) => {
                    if let Some(progress) = update.progress {
                        bar.set_position(progress.round() as u64);
                    }
                    bar.set_message(update.status);
                }
                None => break,
            },
            _ = tokio::signal::ctrl_c(), if !cancelled => {
                cancelled = true;
                bar.set_message("cancelling");
                call.cancel(Some("cancelled from the command line")).await?;
            }
        }
    }
    bar.finish_and_clear();
    let outcome = call.outcome().await?;
    report(&outcome, args.common.json)
}

fn progress_bar(json: bool) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(100), ProgressDrawTarget::stderr());
    if json {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos:>3}% {msg}") {
        bar.set_style(style);
    }
    bar
}

fn report(outcome: &Outcome, json: bool) -> Result<(), Failure> {
    match outcome {
        Outcome::Ok(result) => {
            let result = result.clone().unwrap_or(Value::Null);
            if json {
                println!("{}", serde_json::json!({"status": "OK", "result": result}));
            } else if !result.is_null() {
                print_json(&result, false);
            }
            Ok(())
        }
        Outcome::Error {
            code,
            message,
            details,
        } => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({"status": "ERROR", "code": code, "error": message, "details": details})
                );
                return Err(Failure::tool(""));
            }
            let mut text = format!("{code}: {message}");
            for detail in details
                .iter()
                .flat_map(|d| d.as_array().into_iter().flatten())
            {
                let path = detail["path"].as_str().unwrap_or("");
                let path = if path.is_empty() { "(params)" } else { path };
                text.push_str(&format!(
                    "\n  {path}: {}",
                    detail["message"].as_str().unwrap_or("")
                ));
            }
            if let Some(other) = details.as_ref().filter(|d| !d.is_array()) {
                text.push_str(&format!("\n  {other}"));
            }
            Err(Failure::tool(text))
        }
        Outcome::Cancelled(reason) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({"status": "CANCELLED", "reason": reason})
                );
                return Err(Failure::tool(""));
            }
            Err(Failure::tool(match reason {
                Some(reason) => format!("cancelled: {reason}"),
                None => "cancelled".to_owned(),
            }))
        }
    }
}

/// `key=value` pairs into params, each value typed by its property's schema.
fn coerce_pairs(pairs: &[String], schema: &Value) -> Result<Map<String, Value>, Failure> {
    let mut params = Map::new();
    for pair in pairs {
        let Some((key, raw)) = pair.split_once('=') else {
            return Err(Failure::usage(format!("`{pair}` is not key=value")));
        };
        let property = &schema["properties"][key];
        params.insert(
            key.to_owned(),
            coerce(raw, property).map_err(|e| Failure::usage(format!("{key}: {e}")))?,
        );
    }
    Ok(params)
}

fn coerce(raw: &str, property: &Value) -> Result<Value, String> {
    let types: Vec<&str> = match &property["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let has = |t: &str| types.contains(&t);
    // Whole numbers stay integers, for "number" too (`5`, not `5.0`).
    if (has("integer") || has("number"))
        && let Ok(n) = raw.parse::<i64>()
    {
        return Ok(Value::from(n));
    }
    if has("number")
        && let Ok(n) = raw.parse::<f64>()
    {
        return serde_json::Number::from_f64(n)
            .map(Value::Number)
            .ok_or_else(|| format!("`{raw}` is not finite"));
    }
    if has("boolean") {
        match raw {
            "true" => return Ok(Value::Bool(true)),
            "false" => return Ok(Value::Bool(false)),
            _ => {}
        }
    }
    if has("string") || (types.is_empty() && property.get("enum").is_some()) {
        return Ok(Value::String(raw.to_owned()));
    }
    if has("array") || has("object") || types.is_empty() {
        // JSON when it parses, else the text itself (the server validates).
        return Ok(serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned())));
    }
    // A type the value does not fit: send it as text and let validation say so.
    Ok(Value::String(raw.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pairs_are_typed_by_the_schema() {
        let schema = json!({"properties": {
            "a": {"type": "number"}, "n": {"type": "integer"}, "ok": {"type": "boolean"},
            "s": {"type": "string"}, "tags": {"type": "array"}, "opt": {"type": ["integer", "null"]}
        }});
        let pairs: Vec<String> = [
            "a=1.5",
            "n=7",
            "ok=true",
            "s=42",
            "tags=[1,2]",
            "opt=3",
            "free={\"x\":1}",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let params = coerce_pairs(&pairs, &schema).ok().unwrap();
        assert_eq!(
            Value::Object(params),
            json!({"a": 1.5, "n": 7, "ok": true, "s": "42", "tags": [1, 2], "opt": 3, "free": {"x": 1}})
        );
        assert_eq!(coerce("5", &json!({"type": "number"})).unwrap(), json!(5));
        // A value that does not fit is sent as text: the server's validation reports it.
        assert_eq!(
            coerce("five", &json!({"type": "number"})).unwrap(),
            json!("five")
        );
        assert!(coerce_pairs(&["novalue".to_string()], &schema).is_err());
    }
}

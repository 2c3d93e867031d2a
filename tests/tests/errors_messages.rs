//! Invalid params a model can act on, on the wire: each violation says what
//! to send instead. A bad enum value lists the values there are, for an enum
//! with and without documented variants and for an `Option` of one, and a
//! number out of range says the range: in the `details` of HAIP's
//! `INVALID_PARAMS` and in the text of the tool error MCP's `/mcp` answers
//! with, the same words.

use crate::mcp_http;
use crate::support;

use haip::haip_tool;
use serde_json::{Value, json};
use support::{Client, builder, start};

/// How often to report.
#[haip::data]
#[serde(rename_all = "lowercase")]
enum Period {
    Day,
    Week,
    Year,
}

/// What to measure in.
#[haip::data]
#[serde(rename_all = "lowercase")]
enum Unit {
    /// Metres.
    Metre,
    /// Feet.
    Foot,
}

/// Summarises a period.
#[haip_tool]
async fn report(
    period: Period,
    unit: Option<Unit>,
    /// How many entries.
    #[schemars(range(min = 1, max = 10))]
    top: u8,
) -> String {
    let _ = (period, unit);
    format!("top {top}")
}

/// Params with three mistakes, and what each violation says.
fn mistakes() -> (Value, [(&'static str, &'static str); 3]) {
    (
        json!({"period": "meh", "unit": "inch", "top": 11}),
        [
            ("/period", r#""meh" is not one of "day", "week" or "year""#),
            ("/top", "11 is too large; expected 1 to 10"),
            ("/unit", r#""inch" is not one of "metre", "foot" or null"#),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haip_details_say_what_to_send() {
    let (_handle, url) = start(builder().tool(report::tool())).await;
    let mut client = Client::connect(&url).await;
    let (params, expected) = mistakes();
    let done = client.call_done("c1", "report", params).await;
    assert_eq!(done["status"], "ERROR", "{done}");
    assert_eq!(done["result"]["code"], "INVALID_PARAMS", "{done}");
    let details: Vec<(String, String)> = done["result"]["details"]
        .as_array()
        .unwrap_or_else(|| panic!("no details: {done}"))
        .iter()
        .map(|d| {
            (
                d["path"].as_str().unwrap().to_owned(),
                d["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(p, m)| ((*p).to_owned(), (*m).to_owned()))
        .collect();
    assert_eq!(details, expected);
    // A valid call still runs.
    let done = client
        .call_done("c2", "report", json!({"period": "week", "top": 3}))
        .await;
    assert_eq!(done["status"], "OK", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tool_errors_say_the_same() {
    // Stateless `/mcp`: the call is one POST, no `initialize`.
    let (handle, _) = start(builder().tool(report::tool()).mcp_sessions(false)).await;
    let (params, expected) = mistakes();
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "report", "arguments": params}
    });
    let reply = mcp_http::mcp_request(handle.local_addr(), "POST", Some(&body), &[]).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let result = &reply.response()["result"];
    assert_eq!(result["isError"], true, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("Invalid params for tool report:"),
        "{text}"
    );
    for (path, message) in expected {
        let line = format!("\n- {path}: {message}");
        assert!(text.contains(&line), "{line:?} in {text}");
    }
}

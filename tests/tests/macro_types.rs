//! `#[haip_tool]` classifies parameters and results by their types, not their
//! names, checked through the real wire with `haip::client`: a user type named
//! `State` is a property of the params, a `Result` alias under another name
//! ends the call with an error, a user type named `Result` is a plain value,
//! and the injected forms work under other names.

use crate::support;

use haip::client::{Client, Outcome};
use haip::haip_tool;
use serde_json::json;
use support::{builder, start, within};

/// A plain data type that happens to be called `State`.
#[haip::data]
struct State<T> {
    /// The stored value.
    value: T,
}

/// The injected state, under another name.
type Shared = haip::State<Prefix>;

/// The injected context, renamed on import.
use haip::Context as Ctx;

struct Prefix(&'static str);

/// Reads the caller's own `State`, plus the server's injected one.
#[haip_tool]
async fn describe(
    /// Caller-supplied state (data, despite the name).
    state: State<u32>,
    prefix: Shared,
    ctx: Ctx,
) -> String {
    ctx.progress(50.0);
    format!("{}{}", prefix.0, state.value)
}

/// An error type of the application.
#[derive(Debug)]
struct NotEven(u32);

impl std::fmt::Display for NotEven {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is not even", self.0)
    }
}

/// `Result` under another name.
type Res<T> = std::result::Result<T, NotEven>;

/// Halves even numbers; odd ones are an error.
#[haip_tool]
fn halve(n: u32) -> Res<u32> {
    if n.is_multiple_of(2) {
        Ok(n / 2)
    } else {
        Err(NotEven(n))
    }
}

/// A `ToolError` keeps its code under an alias too.
type Checked<T> = Result<T, haip::ToolError>;

/// Always refuses, with its own code.
#[haip_tool]
async fn refuse() -> Checked<u8> {
    Err(haip::ToolError::new("REFUSED", "no"))
}

mod own {
    /// A type of the application that is called `Result`: an ordinary value.
    #[haip::data]
    pub(crate) struct Result<T> {
        pub(crate) ok: bool,
        pub(crate) value: T,
    }

    /// Returns the application's `Result` as a value.
    #[haip::haip_tool]
    pub(crate) async fn wrapped(n: u32) -> Result<u32> {
        Result {
            ok: false,
            value: n,
        }
    }
}

async fn served() -> (haip::ServerHandle, Client) {
    let (handle, url) = start(
        builder()
            .state(Prefix("n="))
            .tool(describe::tool())
            .tool(halve::tool())
            .tool(refuse::tool())
            .tool(own::wrapped::tool()),
    )
    .await;
    let client = within("connect", Client::connect(&url)).await.unwrap();
    (handle, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_named_state_is_data_and_injected_forms_work_under_other_names() {
    let (_handle, client) = served().await;
    let schema = within("schema", client.schema("describe")).await.unwrap();
    let input = schema.input_schema;
    assert_eq!(input["required"], json!(["state"]), "{input}");
    assert_eq!(
        input["properties"]["state"]["properties"]["value"]["type"], "integer",
        "{input}"
    );
    assert_eq!(
        input["properties"]["state"]["description"],
        "Caller-supplied state (data, despite the name)."
    );
    let properties = input["properties"].as_object().unwrap();
    assert_eq!(
        properties.keys().collect::<Vec<_>>(),
        ["state"],
        "injected parameters are not properties: {input}"
    );
    let call = client
        .call("describe", json!({"state": {"value": 7}}))
        .await
        .unwrap();
    let outcome = within("outcome", call.outcome()).await.unwrap();
    assert_eq!(outcome, Outcome::Ok(Some(json!("n=7"))));
    // Injected parameters cannot be passed.
    let call = client
        .call("describe", json!({"state": {"value": 7}, "prefix": 1}))
        .await
        .unwrap();
    let outcome = within("outcome", call.outcome()).await.unwrap();
    assert!(
        matches!(&outcome, Outcome::Error { code, .. } if code == "INVALID_PARAMS"),
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_alias_is_fallible() {
    let (_handle, client) = served().await;
    let schema = within("schema", client.schema_in("halve", Some("full")))
        .await
        .unwrap();
    assert_eq!(
        schema.output_schema,
        Some(json!({"type": "integer", "format": "uint32", "minimum": 0})),
        "the output schema is T's, not Result's"
    );
    let call = client.call("halve", json!({"n": 8})).await.unwrap();
    assert_eq!(
        within("outcome", call.outcome()).await.unwrap(),
        Outcome::Ok(Some(json!(4))),
        "Ok(T) is the bare result"
    );
    let call = client.call("halve", json!({"n": 7})).await.unwrap();
    assert_eq!(
        within("outcome", call.outcome()).await.unwrap(),
        Outcome::Error {
            code: "TOOL_EXECUTION_ERROR".into(),
            message: "7 is not even".into(),
            details: None,
        },
        "Err(E) ends the call with status ERROR"
    );
    let call = client.call("refuse", json!({})).await.unwrap();
    let outcome = within("outcome", call.outcome()).await.unwrap();
    assert!(
        matches!(&outcome, Outcome::Error { code, message, .. } if code == "REFUSED" && message == "no"),
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_named_result_is_a_plain_value() {
    let (_handle, client) = served().await;
    let schema = within("schema", client.schema("wrapped")).await.unwrap();
    let output = schema.output_schema.unwrap();
    assert_eq!(output["required"], json!(["ok", "value"]), "{output}");
    let call = client.call("wrapped", json!({"n": 3})).await.unwrap();
    assert_eq!(
        within("outcome", call.outcome()).await.unwrap(),
        Outcome::Ok(Some(json!({"ok": false, "value": 3}))),
        "returned as a value, not read as Ok/Err"
    );
}

#[test]
fn the_functions_stay_callable() {
    assert_eq!(halve(4).unwrap(), 2);
    assert_eq!(halve(3).unwrap_err().to_string(), "3 is not even");
}

//! The tools the official MCP conformance suite expects of a server, written
//! as ordinary `#[haip_tool]` functions and served over MCP at `/mcp` (and
//! over HAIP) on `HAIP_ADDR` or `127.0.0.1:8080`. Each tool has the name and
//! behaviour its scenario asks for. `tests/tests/mcp_conformance.rs` runs the
//! suite against this binary (see `tests/conformance/README.md`).
//!
//! ```text
//! HAIP_ADDR=127.0.0.1:3001 cargo run -p haip-examples --example conformance
//! ```
//!
//! With `--stdio` it serves MCP on stdin and stdout instead. With
//! `HAIP_PREFIX=/agent` it serves the same server nested at `/agent` in an
//! axum application (`Server::into_service`), MCP at `/agent/mcp`.
//!
//! Only the `#[haip_tool]` functions of this file are served: the example does
//! not link `haip_examples`, so the quickstart's tools stay out of it.

use std::borrow::Cow;
use std::future::IntoFuture;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

// serde and schemars through haip (the example crate does not depend on them).
use haip::__private::schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use haip::__private::serde::{Deserialize, Serialize};
use haip::{
    Answer, AskError, Content, Context, Params, SampleError, SampleRequest, ServerHandle, State,
    Tool, ToolError, haip_tool,
};

// ----- content ------------------------------------------------------------------

/// A 1×1 red PNG.
const RED_PIXEL: [u8; 69] = [
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53,
    0xde, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0x00,
    0x00, 0x03, 0x01, 0x01, 0x00, 0xc9, 0xfe, 0x92, 0xef, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e,
    0x44, 0xae, 0x42, 0x60, 0x82,
];

/// A tenth of a second of silence: 8 kHz, 8-bit mono PCM in a WAV container.
fn silence_wav() -> Vec<u8> {
    let samples = vec![0x80u8; 800];
    let mut wav = Vec::with_capacity(44 + samples.len());
    let len = |n: usize| u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes();
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&len(36 + samples.len()));
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes()); // fmt chunk size
    wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
    wav.extend_from_slice(&1u16.to_le_bytes()); // mono
    wav.extend_from_slice(&8000u32.to_le_bytes()); // sample rate
    wav.extend_from_slice(&8000u32.to_le_bytes()); // byte rate
    wav.extend_from_slice(&1u16.to_le_bytes()); // block align
    wav.extend_from_slice(&8u16.to_le_bytes()); // bits per sample
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&len(samples.len()));
    wav.extend_from_slice(&samples);
    wav
}

/// Returns a simple text response.
#[haip_tool]
async fn test_simple_text() -> Content {
    Content::text("This is a simple text response for testing.")
}

/// Returns an image: one red pixel.
#[haip_tool]
async fn test_image_content() -> Content {
    Content::image(RED_PIXEL, "image/png")
}

/// Returns audio: a tenth of a second of silence.
#[haip_tool]
async fn test_audio_content() -> Content {
    Content::audio(silence_wav(), "audio/wav")
}

/// Returns an embedded text resource.
#[haip_tool]
async fn test_embedded_resource() -> Content {
    Content::resource_text(
        "test://embedded-resource",
        "text/plain",
        "This is an embedded resource content.",
    )
}

/// Returns text, an image and an embedded resource.
#[haip_tool]
async fn test_multiple_content_types() -> Vec<Content> {
    vec![
        Content::text("Multiple content types test:"),
        Content::image(RED_PIXEL, "image/png"),
        Content::resource_text(
            "test://mixed-content-resource",
            "application/json",
            r#"{"test":"data","value":123}"#,
        ),
    ]
}

/// Always fails.
#[haip_tool]
async fn test_error_handling() -> Result<Content, ToolError> {
    Err(ToolError::execution(
        "This tool intentionally returns an error for testing",
    ))
}

/// Answers at once (the suite's SSE polling scenario calls it).
#[haip_tool]
async fn test_reconnection() -> Content {
    Content::text("Reconnection test completed successfully")
}

// ----- logging and progress ------------------------------------------------------

/// Logs three lines, 50 ms apart.
#[haip_tool]
async fn test_tool_with_logging(ctx: Context) -> Content {
    ctx.info("Tool execution started");
    tokio::time::sleep(Duration::from_millis(50)).await;
    ctx.info("Tool processing data");
    tokio::time::sleep(Duration::from_millis(50)).await;
    ctx.info("Tool execution completed");
    Content::text("Tool with logging executed successfully")
}

/// Reports 0, 50 and 100 percent, 50 ms apart.
#[haip_tool]
async fn test_tool_with_progress(ctx: Context) -> Content {
    ctx.progress(0.0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    ctx.progress(50.0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    ctx.progress(100.0);
    Content::text("Tool with progress executed successfully")
}

// ----- sampling and questions ---------------------------------------------------

/// Asks the client's model.
#[haip_tool]
async fn test_sampling(
    /// The prompt to send to the model.
    prompt: String,
    ctx: Context,
) -> Result<Content, ToolError> {
    let reply = ctx
        .sample(SampleRequest::new(prompt).max_tokens(100))
        .await?;
    let text = reply.text().unwrap_or_default();
    Ok(Content::text(format!("LLM response: {text}")))
}

/// The person's details.
#[haip::data]
struct UserInfo {
    /// User's response
    username: String,
    /// User's email address
    email: String,
}

/// "action=..., content=..." for an answer.
fn described<T: Serialize>(answer: &Answer<T>) -> String {
    match answer {
        Answer::Accepted(content) => {
            let content = serde_json::to_string(content).unwrap_or_default();
            format!("action=accept, content={content}")
        }
        Answer::Declined => "action=decline, content={}".to_owned(),
        Answer::Cancelled => "action=cancel, content={}".to_owned(),
    }
}

/// Asks the person for a username and an email address.
#[haip_tool]
async fn test_elicitation(
    /// The message to show the person.
    message: String,
    ctx: Context,
) -> Result<Content, ToolError> {
    let answer = ctx.ask::<UserInfo>(message).await?;
    Ok(Content::text(format!(
        "User response: {}",
        described(&answer)
    )))
}

/// A user status.
#[haip::data]
#[allow(missing_docs)] // the wire names say it; doc comments would become titles
#[serde(rename_all = "lowercase")]
enum Status {
    Active,
    Inactive,
    Pending,
}

fn default_name() -> String {
    "John Doe".to_owned()
}
fn default_age() -> i64 {
    30
}
fn default_score() -> f64 {
    95.5
}
fn default_status() -> Status {
    Status::Active
}
fn default_verified() -> bool {
    true
}

/// A form whose every field has a default (SEP-1034).
#[haip::data]
struct WithDefaults {
    /// User name
    #[serde(default = "default_name")]
    name: String,
    /// User age
    #[serde(default = "default_age")]
    age: i64,
    /// User score
    #[serde(default = "default_score")]
    score: f64,
    /// User status
    #[serde(default = "default_status")]
    status: Status,
    /// Verification status
    #[serde(default = "default_verified")]
    verified: bool,
}

/// Asks with a default for every field.
#[haip_tool]
async fn test_elicitation_sep1034_defaults(ctx: Context) -> Result<Content, ToolError> {
    let answer = ctx
        .ask::<WithDefaults>("Please review and update the form fields with defaults")
        .await?;
    Ok(Content::text(format!(
        "Elicitation completed: {}",
        described(&answer)
    )))
}

/// Choices without titles.
#[haip::data]
#[allow(missing_docs, clippy::enum_variant_names)] // the wire names say it
#[serde(rename_all = "lowercase")]
enum Untitled {
    Option1,
    Option2,
    Option3,
}

/// Choices with titles, for a single choice.
#[haip::data]
enum TitledSingle {
    #[schemars(title = "First Option")]
    #[serde(rename = "value1")]
    First,
    #[schemars(title = "Second Option")]
    #[serde(rename = "value2")]
    Second,
    #[schemars(title = "Third Option")]
    #[serde(rename = "value3")]
    Third,
}

/// Choices with titles, for multiple choice.
#[haip::data]
enum TitledMulti {
    #[schemars(title = "First Choice")]
    #[serde(rename = "value1")]
    First,
    #[schemars(title = "Second Choice")]
    #[serde(rename = "value2")]
    Second,
    #[schemars(title = "Third Choice")]
    #[serde(rename = "value3")]
    Third,
}

/// Choices titled the old way, with `enumNames`.
#[haip::data]
#[allow(missing_docs, clippy::enum_variant_names)] // the wire names say it
#[serde(rename_all = "lowercase")]
enum Legacy {
    Opt1,
    Opt2,
    Opt3,
}

/// Every kind of enum a form may hold (SEP-1330).
#[haip::data]
#[serde(rename_all = "camelCase")]
struct Enums {
    /// Pick one
    untitled_single: Untitled,
    /// Pick one
    titled_single: TitledSingle,
    /// Pick one
    #[schemars(extend("enumNames" = ["Option One", "Option Two", "Option Three"]))]
    legacy_enum: Legacy,
    /// Pick any
    untitled_multi: Vec<Untitled>,
    /// Pick any
    titled_multi: Vec<TitledMulti>,
}

/// Asks with every kind of enum.
#[haip_tool]
async fn test_elicitation_sep1330_enums(ctx: Context) -> Result<Content, ToolError> {
    let answer = ctx.ask::<Enums>("Please select options").await?;
    Ok(Content::text(format!(
        "Elicitation completed: {}",
        described(&answer)
    )))
}

// ----- JSON Schema 2020-12 -------------------------------------------------------

/// Tool with JSON Schema 2020-12 features
#[haip_tool]
async fn json_schema_2020_12_tool(params: Params<Person>) -> String {
    let Person {
        name,
        address,
        contact_method,
        phone,
        email,
    } = params.0;
    let name = name.as_deref().unwrap_or("someone");
    let home = match address.and_then(|a| a.city) {
        Some(city) => format!("{name} lives in {city}"),
        None => format!("{name} has no known address"),
    };
    // The schema makes sure the chosen way of contact is given.
    let contact = match (contact_method, phone, email) {
        (Some(ContactMethod::Phone), Some(phone), _) => format!("call {phone}"),
        (Some(ContactMethod::Email), _, Some(email)) | (None, None, Some(email)) => {
            format!("write to {email}")
        }
        (None, Some(phone), _) => format!("call {phone}"),
        _ => "no way of contact".to_owned(),
    };
    format!("{home}; {contact}")
}

/// The params of `json_schema_2020_12_tool`. Their schema is written by hand:
/// the scenario checks that `$schema`, `$defs` (with an `$anchor`),
/// `additionalProperties`, composition (`allOf`/`anyOf`) and conditionals
/// (`if`/`then`/`else`) reach `tools/list` as written (SEP-1613, SEP-2106).
#[derive(Deserialize)]
#[serde(crate = "haip::__private::serde", deny_unknown_fields)]
struct Person {
    name: Option<String>,
    address: Option<Address>,
    #[serde(rename = "contactMethod")]
    contact_method: Option<ContactMethod>,
    phone: Option<String>,
    email: Option<String>,
}

/// `#/$defs/address`.
#[derive(Deserialize)]
#[serde(crate = "haip::__private::serde")]
struct Address {
    #[allow(dead_code)]
    street: Option<String>,
    city: Option<String>,
}

/// How to get in touch.
#[derive(Deserialize)]
#[serde(crate = "haip::__private::serde", rename_all = "lowercase")]
enum ContactMethod {
    Phone,
    Email,
}

impl JsonSchema for Person {
    fn schema_name() -> Cow<'static, str> {
        "Person".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {
                    "$anchor": "addressDef",
                    "type": "object",
                    "properties": {
                        "street": { "type": "string" },
                        "city": { "type": "string" }
                    }
                }
            },
            "properties": {
                "name": { "type": "string" },
                "address": { "$ref": "#/$defs/address" },
                "contactMethod": { "type": "string", "enum": ["phone", "email"] },
                "phone": { "type": "string" },
                "email": { "type": "string" }
            },
            "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
            "if": {
                "properties": { "contactMethod": { "const": "phone" } },
                "required": ["contactMethod"]
            },
            "then": { "required": ["phone"] },
            "else": { "required": ["email"] },
            "additionalProperties": false
        })
    }
}

// ----- questions in rounds (MCP 2026-07-28, SEP-2322) ---------------------------
//
// Without a session, a call that asks ends its round with the questions it
// waits for (`input_required`, keyed as below), and runs again from the start
// when the client retries with the answers and the signed `requestState`.

/// A person's name.
#[haip::data]
struct Name {
    /// Their name.
    name: String,
}

/// A confirmation.
#[haip::data]
struct Confirmation {
    /// Whether to go on.
    ok: bool,
}

/// A favourite colour.
#[haip::data]
struct Color {
    /// Their favourite colour.
    color: String,
}

/// The name in an answer, if one was given.
fn name_of(answer: Answer<Name>) -> Option<String> {
    answer.accepted().map(|n| n.name)
}

/// Asks the person's name (question `user_name`), then greets them.
#[haip_tool]
async fn test_input_required_result_elicitation(ctx: Context) -> Result<String, ToolError> {
    let answer = ctx
        .ask::<Name>("What is your name?")
        .key("user_name")
        .await?;
    Ok(match name_of(answer) {
        Some(name) => format!("Hello, {name}!"),
        None => "Hello, whoever you are!".to_owned(),
    })
}

/// Asks the client's model for the capital of France (`capital_question`).
#[haip_tool]
async fn test_input_required_result_sampling(ctx: Context) -> Result<String, ToolError> {
    let reply = ctx
        .sample(
            SampleRequest::new("What is the capital of France?")
                .max_tokens(100)
                .key("capital_question"),
        )
        .await?;
    Ok(format!(
        "The model answered: {}",
        reply.text().unwrap_or("(no text)")
    ))
}

/// Lists the roots the client shares (`client_roots`).
#[haip_tool]
async fn test_input_required_result_list_roots(ctx: Context) -> Result<String, ToolError> {
    let roots = ctx.roots().key("client_roots").await?;
    let uris: Vec<&str> = roots.iter().map(|r| r.uri.as_str()).collect();
    Ok(format!(
        "The client shares {} root(s): {}",
        roots.len(),
        uris.join(", ")
    ))
}

/// Asks for a confirmation (`confirm`); the retry's `requestState` is
/// verified by the server before the tool runs again.
#[haip_tool]
async fn test_input_required_result_request_state(ctx: Context) -> Result<String, ToolError> {
    let answer = ctx
        .ask::<Confirmation>("Please confirm")
        .key("confirm")
        .await?;
    let confirmed = matches!(answer, Answer::Accepted(Confirmation { ok: true }));
    // The tool runs again only once the server has verified the state the
    // retry brought (signed with its key, not expired, for this very call):
    // a tampered one is refused with -32602 before anything runs.
    Ok(format!(
        "state-ok: the request state was verified; confirmed: {confirmed}"
    ))
}

/// Asks a name, the client's model and its roots at once: one round with
/// three questions (`user_name`, `greeting`, `client_roots`).
#[haip_tool]
async fn test_input_required_result_multiple_inputs(ctx: Context) -> Result<String, ToolError> {
    let (name, greeting, roots) = tokio::join!(
        ctx.ask::<Name>("What is your name?")
            .key("user_name")
            .into_future(),
        ctx.sample(
            SampleRequest::new("Generate a greeting")
                .max_tokens(50)
                .key("greeting")
        ),
        ctx.roots().key("client_roots").into_future(),
    );
    let name = name_of(name?).unwrap_or_else(|| "stranger".to_owned());
    let greeting = greeting?;
    let roots = roots?;
    Ok(format!(
        "{} {name} ({} root(s) shared)",
        greeting.text().unwrap_or("Hello,"),
        roots.len()
    ))
}

/// Asks one question, then another: two rounds (`step1`, then `step2`).
#[haip_tool]
async fn test_input_required_result_multi_round(ctx: Context) -> Result<String, ToolError> {
    let name = ctx
        .ask::<Name>("Step 1: What is your name?")
        .key("step1")
        .await?;
    let name = name_of(name).unwrap_or_else(|| "someone".to_owned());
    let color = ctx
        .ask::<Color>("Step 2: What is your favorite color?")
        .key("step2")
        .await?;
    Ok(match color.accepted() {
        Some(Color { color }) => format!("{name} likes {color}"),
        None => format!("{name} keeps their favourite colour to themselves"),
    })
}

/// Asks for a confirmation (`confirm`): a retry whose `requestState` was
/// tampered with is refused (-32602) before the tool runs again.
#[haip_tool]
async fn test_input_required_result_tampered_state(ctx: Context) -> Result<String, ToolError> {
    let answer = ctx
        .ask::<Confirmation>("Please confirm")
        .key("confirm")
        .await?;
    let confirmed = matches!(answer, Answer::Accepted(Confirmation { ok: true }));
    Ok(format!("confirmed: {confirmed}"))
}

/// Asks a name (`user_name`) and the client's model (`greeting`) at once,
/// each only of a client that declared it can answer it; what the client
/// cannot answer is done without.
#[haip_tool]
async fn test_input_required_result_capabilities(ctx: Context) -> Result<String, ToolError> {
    let (name, greeting) = tokio::join!(
        ctx.ask::<Name>("What is your name?")
            .key("user_name")
            .into_future(),
        ctx.sample(
            SampleRequest::new("Generate a greeting")
                .max_tokens(50)
                .key("greeting")
        ),
    );
    let name = match name {
        Ok(answer) => name_of(answer),
        Err(AskError::Unsupported) => None,
        Err(e) => return Err(e.into()),
    };
    let greeting = match greeting {
        Ok(reply) => reply.text().map(str::to_owned),
        Err(SampleError::Unsupported) => None,
        Err(e) => return Err(e.into()),
    };
    Ok(format!(
        "{} {}",
        greeting.as_deref().unwrap_or("Hello,"),
        name.as_deref().unwrap_or("whoever you are")
    ))
}

// ----- requests without sessions (MCP 2026-07-28, SEP-2575) ----------------------

/// Needs the client's model: a client that did not declare `sampling` is
/// refused with `MissingRequiredClientCapability` (-32021).
#[haip_tool]
async fn test_missing_capability(ctx: Context) -> Result<String, ToolError> {
    let reply = ctx
        .sample(SampleRequest::new("Say hello").max_tokens(20).key("hello"))
        .await?;
    Ok(format!(
        "The model said: {}",
        reply.text().unwrap_or("(no text)")
    ))
}

/// Asks the person a question. Without a session the question goes back in
/// the call's own response (`input_required`), never as a request of the
/// server on the response stream.
#[haip_tool]
async fn test_streaming_elicitation(ctx: Context) -> Result<String, ToolError> {
    let answer = ctx.ask::<Name>("What is your name?").await?;
    Ok(match name_of(answer) {
        Some(name) => format!("Nice to meet you, {name}"),
        None => "No name given".to_owned(),
    })
}

/// Logs a line at three levels. A client without a session gets log lines
/// only at the level its request names (`_meta` `io.modelcontextprotocol/logLevel`).
#[haip_tool]
async fn test_logging_tool(ctx: Context) -> String {
    ctx.debug("test_logging_tool: a debug line");
    ctx.info("test_logging_tool: an info line");
    ctx.warning("test_logging_tool: a warning line");
    "Logged a debug, an info and a warning line".to_owned()
}

/// The name of the tool `test_trigger_tool_change` takes out and puts back.
const DYNAMIC_TOOL: &str = "test_dynamic_tool";

/// In the tool list, or not: `test_trigger_tool_change` takes it out of the
/// registry and puts it back.
#[haip_tool]
async fn test_dynamic_tool() -> String {
    "test_dynamic_tool is in the tool list".to_owned()
}

/// The running server, for `test_trigger_tool_change`: its handle once it
/// has started (never over stdio), and `test_dynamic_tool` while it is out.
#[derive(Clone, Default)]
struct Running {
    handle: Arc<OnceLock<ServerHandle>>,
    parked: Arc<Mutex<Option<Tool>>>,
}

/// Changes the tool list: takes `test_dynamic_tool` out of the registry, or
/// puts it back. Every client listening for changes (an MCP session's
/// stream, a `subscriptions/listen` stream) is told
/// `notifications/tools/list_changed`.
#[haip_tool]
async fn test_trigger_tool_change(running: State<Running>) -> Result<String, ToolError> {
    let Some(handle) = running.handle.get() else {
        return Err(ToolError::execution(
            "the tool list cannot change here: the server serves MCP over stdio",
        ));
    };
    let mut parked = running.parked.lock().unwrap_or_else(|e| e.into_inner());
    match parked.take() {
        Some(tool) => {
            handle
                .register_tool(tool)
                .map_err(|e| ToolError::execution(e.to_string()))?;
            Ok(format!("{DYNAMIC_TOOL} is back in the tool list"))
        }
        None => {
            let tool = handle.unregister_tool(DYNAMIC_TOOL).ok_or_else(|| {
                ToolError::execution(format!("{DYNAMIC_TOOL} is not in the tool list"))
            })?;
            *parked = Some(tool);
            Ok(format!("{DYNAMIC_TOOL} is out of the tool list"))
        }
    }
}

// ----- HTTP headers (SEP-2243) -----------------------------------------------------

/// Names the region it is called for. `region` travels in the
/// `Mcp-Param-Region` header as well (its `x-mcp-header`), which the server
/// checks against the body: one that is missing or differs is refused.
#[haip_tool]
async fn test_mcp_param_header(
    /// The region, also sent as the `Mcp-Param-Region` header.
    #[schemars(extend("x-mcp-header" = "Region"))]
    region: String,
) -> String {
    format!("Called for region {region}")
}

// ----- tasks (the io.modelcontextprotocol/tasks extension) ----------------------

/// Greets by name (never a task).
#[haip_tool]
async fn greet(
    /// Who to greet.
    name: Option<String>,
) -> String {
    format!("Hello, {}!", name.as_deref().unwrap_or("world"))
}

/// Computes for `seconds` seconds, then says its label: a task for clients
/// that take them (one that takes no time answers at once). Stops when
/// cancelled.
#[haip_tool(task)]
async fn slow_compute(
    /// How long to compute.
    seconds: Option<f64>,
    /// What to call the result.
    label: Option<String>,
    ctx: Context,
) -> Result<String, ToolError> {
    let seconds = seconds.unwrap_or(0.0).clamp(0.0, 3600.0);
    if seconds > 0.0 {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs_f64(seconds)) => {}
            () = ctx.cancelled() => return Err(ToolError::cancelled()),
        }
    }
    Ok(format!(
        "computed {} in {seconds} s",
        label.as_deref().unwrap_or("result")
    ))
}

/// Always runs as a task, and fails as a tool after a second: the task
/// completes with `isError`.
#[haip_tool(task = "required")]
async fn failing_job() -> Result<String, ToolError> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    Err(ToolError::execution("the job failed"))
}

/// Runs as a task and panics after a moment: the task fails with a
/// JSON-RPC error (a fault of the server, not a result of the tool).
#[haip_tool(task)]
async fn protocol_error_job() -> String {
    tokio::time::sleep(Duration::from_millis(100)).await;
    panic!("protocol_error_job breaks, as the scenario asks")
}

/// What `confirm_delete` and `multi_input` ask.
#[haip::data]
struct TaskAnswer {
    /// A name.
    name: Option<String>,
    /// Whether to go on.
    confirm: Option<bool>,
}

/// Deletes a file once the person confirms: it looks the file up first (so
/// the call is a task by then), then asks inside the task.
#[haip_tool(task)]
async fn confirm_delete(
    /// The file.
    filename: String,
    ctx: Context,
) -> Result<String, ToolError> {
    // Looking the file up.
    tokio::task::yield_now().await;
    let answer = ctx
        .ask::<TaskAnswer>(format!("Delete {filename}?"))
        .key("confirm")
        .await?;
    Ok(match answer {
        Answer::Accepted(TaskAnswer {
            confirm: Some(true),
            ..
        }) => format!("deleted {filename}"),
        _ => format!("kept {filename}"),
    })
}

/// Asks two questions at once inside its task.
#[haip_tool(task)]
async fn multi_input(ctx: Context) -> Result<String, ToolError> {
    tokio::task::yield_now().await;
    let (first, second) = tokio::join!(
        ctx.ask::<TaskAnswer>("First value?")
            .key("first")
            .into_future(),
        ctx.ask::<TaskAnswer>("Second value?")
            .key("second")
            .into_future()
    );
    let name = |answer: Answer<TaskAnswer>| match answer {
        Answer::Accepted(TaskAnswer { name: Some(n), .. }) => n,
        _ => "-".to_owned(),
    };
    Ok(format!("got {} and {}", name(first?), name(second?)))
}

/// The name `test_tool_with_task` asks for.
#[haip::data]
struct UserName {
    /// Your name.
    name: String,
}

/// Always a task: asks the person's name first (before the task exists, by
/// rounds), then greets as a task.
#[haip_tool(task = "required")]
async fn test_tool_with_task(ctx: Context) -> Result<String, ToolError> {
    let name = match ctx
        .ask::<UserName>("What is your name?")
        .key("user_name")
        .await?
    {
        Answer::Accepted(UserName { name }) => name,
        Answer::Declined | Answer::Cancelled => "stranger".to_owned(),
    };
    Ok(format!("Hello, {name}! (from a task)"))
}

#[tokio::main]
async fn main() -> Result<(), haip::Error> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HAIP_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let running = Running::default();
    let prefix = std::env::var("HAIP_PREFIX").unwrap_or_default();
    let server = haip::Server::builder()
        .from_env()
        .path_prefix(&prefix)
        // MCP sessions at `/mcp` (the default, said here because the
        // suite depends on it): the 2025-11-25 elicitation and sampling
        // scenarios need the client to answer the server's requests, which
        // a client without a session cannot (its answer would be a new POST
        // nothing waits for), and the SSE scenarios open the session's `GET`
        // stream. Requests of MCP 2026-07-28, which has no sessions, are
        // served on their own all the same.
        .mcp_sessions(true)
        // The suite checks that hand-written schemas (`allOf`, `if`/`then`,
        // `$anchor`, `$defs`) and `x-mcp-header` annotations reach the
        // client exactly as written.
        .schema_profile(haip::SchemaProfile::Full)
        .state(running.clone())
        .annotated_tools()
        .build()?;
    // `--stdio`: MCP on stdin and stdout instead of a listening server.
    if std::env::args().any(|a| a == "--stdio") {
        return server.run_mcp_stdio().await;
    }
    if !prefix.is_empty() {
        return serve_nested(server, &prefix, &running).await;
    }
    let handle = server.start().await?;
    // Set once, here: the handle of the server just started.
    let _ = running.handle.set(handle);
    // Serves until Ctrl-C or SIGTERM, then stops as any haip server does.
    stopped().await;
    if let Some(handle) = running.handle.get() {
        handle.shutdown().await;
    }
    Ok(())
}

/// The server nested at `prefix` in an axum application on `HAIP_ADDR`:
/// what the suite checks at `/mcp` holds at `{prefix}/mcp`.
async fn serve_nested(
    server: haip::Server,
    prefix: &str,
    running: &Running,
) -> Result<(), haip::Error> {
    let addr = std::env::var("HAIP_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    let service = server.into_service().await?;
    let handle = service.handle();
    let _ = running.handle.set(handle.clone());
    let app = axum::Router::new().nest_service(prefix, service);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|source| haip::Error::Bind { addr, source })?;
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            stopped().await;
            handle.shutdown().await;
        })
        .await?;
    Ok(())
}

/// Completes on Ctrl-C or (on Unix) SIGTERM.
async fn stopped() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

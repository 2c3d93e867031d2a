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
//! With `--stdio` it serves MCP on stdin and stdout instead.
//!
//! Only the `#[haip_tool]` functions of this file are served: the example does
//! not link `haip_examples`, so the quickstart's tools stay out of it.

use std::borrow::Cow;
use std::time::Duration;

// serde and schemars through haip (the example crate does not depend on them).
use haip::__private::schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use haip::__private::serde::{Deserialize, Serialize};
use haip::{Answer, Content, Context, Params, SampleRequest, ToolError, haip_tool};

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
    let Person { name, address } = params.0;
    let name = name.as_deref().unwrap_or("someone");
    match address.and_then(|a| a.city) {
        Some(city) => format!("{name} lives in {city}"),
        None => format!("{name} has no known address"),
    }
}

/// The params of `json_schema_2020_12_tool`. Their schema is written by hand:
/// the scenario checks that `$schema`, `$defs` and `additionalProperties`
/// reach `tools/list` as written.
#[derive(Deserialize)]
#[serde(crate = "haip::__private::serde", deny_unknown_fields)]
struct Person {
    name: Option<String>,
    address: Option<Address>,
}

/// `#/$defs/address`.
#[derive(Deserialize)]
#[serde(crate = "haip::__private::serde")]
struct Address {
    #[allow(dead_code)]
    street: Option<String>,
    city: Option<String>,
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
                    "type": "object",
                    "properties": {
                        "street": { "type": "string" },
                        "city": { "type": "string" }
                    }
                }
            },
            "properties": {
                "name": { "type": "string" },
                "address": { "$ref": "#/$defs/address" }
            },
            "additionalProperties": false
        })
    }
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
    let server = haip::Server::builder()
        .from_env()
        // MCP sessions at `/mcp`: the elicitation and sampling scenarios need
        // the client to answer the server's requests, which a stateless
        // server cannot receive (the answer is a new POST no request waits
        // for), and the SSE scenarios open the session's `GET` stream.
        .mcp_sessions(true)
        // The suite checks that hand-written schemas (`allOf`, `if`/`then`,
        // `$anchor`, `$defs`) reach the client exactly as written.
        .schema_profile(haip::SchemaProfile::Full)
        .annotated_tools()
        .build()?;
    // `--stdio`: MCP on stdin and stdout instead of a listening server.
    if std::env::args().any(|a| a == "--stdio") {
        server.run_mcp_stdio().await
    } else {
        server.run().await
    }
}

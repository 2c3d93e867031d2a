//! # Schemas and profiles
//!
//! The schema a tool's params are validated against is exact JSON Schema
//! 2020-12. The model providers that agents put in front of your tools each
//! take a different subset of it, and refuse the rest ("Invalid schema for
//! function"). So what a tool *advertises* is its schema under a
//! **profile** ([`SchemaProfile`]), computed once when the tool is built;
//! validation never changes.
//!
//! Try it on the quickstart (`cargo run --example quickstart`):
//! `haip schema ws://127.0.0.1:8080/haip create_user --profile openai-strict`.
//!
//! | profile | for | what changes |
//! |---|---|---|
//! | `portable` (default) | OpenAI function calling, Anthropic `input_schema`, Gemini `parameters` and `parametersJsonSchema`, Ajv-based MCP clients: all at once | optional fields simply not required (no `null`), one `type` per node, no `$ref` (recursive types described four levels deep), no `additionalProperties` (maps as lists of `{key, value}` pairs), `oneOf` as `anyOf`, `const` as a one-value `enum`, documented unit variants as one string enum, string enums only, no string format but `date-time` (what Gemini's `parameters` take; others are said in the description: "Format: email.") |
//! | `openai-strict` | OpenAI with `strict: true` | every object closed, every property required (optional ones nullable), no `default`, the nine formats OpenAI knows, `$ref` only for recursion |
//! | `anthropic-strict` | Anthropic strict tool use | closed objects, no numeric or length bounds, no recursion; a tool over 24 optional or 16 union properties is not served in it |
//! | `full` | clients that validate themselves, the inspector | the schema as validated, hand-written schemas exactly as written |
//!
//! Nothing a profile cannot express is lost: it is said in the property's
//! `description` ("Between 0 and 255.", "Default: 20.", "Format: uri.").
//! Output schemas are only loosened (no `$schema`, common formats only), so
//! they still accept every result.
//!
//! ```
//! use haip::{SchemaProfile, haip_tool};
//! use serde_json::json;
//!
//! /// Greet someone.
//! #[haip_tool]
//! async fn greet(
//!     /// Who to greet; everyone when left out.
//!     name: Option<String>,
//! ) -> String {
//!     format!("Hello, {}!", name.as_deref().unwrap_or("everyone"))
//! }
//!
//! let tool = greet::tool();
//! let portable = tool.advertised_input_schema(SchemaProfile::Portable).unwrap();
//! assert_eq!(portable["properties"]["name"]["type"], json!("string"));
//! assert!(portable.get("required").is_none()); // optional: not required
//! let strict = tool.advertised_input_schema(SchemaProfile::OpenAiStrict).unwrap();
//! assert_eq!(strict["required"], json!(["name"])); // required, and nullable
//! ```
//!
//! ## Which profile a client gets
//!
//! Most specific first:
//!
//! 1. `"profile"` in a `TOOL_SCHEMA` request;
//! 2. `HAI.capabilities.schema_profile` for a HAIP session;
//! 3. `?schema_profile=openai-strict` on the `/mcp` URL (MCP hosts let
//!    people set the URL);
//! 4. the server's default: [`ServerBuilder::schema_profile`], or
//!    `HAIP_SCHEMA_PROFILE` with [`ServerBuilder::from_env`] (an unknown name
//!    there is a start-up error).
//!
//! An unknown name in a request gets `ERROR INVALID_MESSAGE` listing the
//! valid ones. A tool that the server's default profile cannot serve is
//! logged once at start ("its clients will not see it"), and left out of
//! that profile's listings.
//!
//! ## Calls shaped by any profile are accepted
//!
//! Whichever profile a model was shown, its call is taken as the schema
//! means it, over HAIP and MCP alike: a `null` for an optional field is that
//! field left out (`Option` → `None`, `#[haip(default = ..)]` → the default),
//! and `{key, value}` pairs where the tool takes a map are the map.
//!
//! ## Found before deploy, not at runtime
//!
//! [`crate::lint`] lists, for every tool, each profile that cannot serve it
//! or serves it with less than it says (tool, profile, JSON pointer, reason,
//! fix), names OpenAI and Anthropic refuse (they take
//! `^[a-zA-Z0-9_-]{1,64}$`; MCP allows more), and descriptions over 1024
//! characters: errors. It also warns ([`Severity::Warning`](crate::lint::Severity))
//! about a tool or a parameter without a description (a doc comment on the
//! function or the parameter): it is served, but a model has only its name
//! to go on. One line in a test of your crate checks every `#[haip_tool]`
//! in it for errors, without a server:
//!
//! ```
//! // In a #[test] of your crate:
//! haip::lint::assert_annotated_clean(); // every #[haip_tool] of this crate
//! ```
//!
//! [`lint::check_tool`](crate::lint::check_tool) gives the findings of one
//! tool, to print or to filter:
//!
//! ```
//! use serde_json::json;
//!
//! let tagged = haip::Tool::builder("tagged")
//!     .input_schema(json!({
//!         "type": "object",
//!         "properties": {"tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}}
//!     }))
//!     .handler(|_, _| async { Ok(json!(null)) })
//!     .build()?;
//! for finding in haip::lint::check_tool(&tagged) {
//!     println!("{finding}"); // tool [profile] at pointer: reason; fix: ...
//! }
//! # Ok::<(), haip::Error>(())
//! ```
//!
//! `haip lint ws://127.0.0.1:8080/haip` runs the same checks against a
//! running server (see [the CLI](super::cli_and_inspector)), and exits 1
//! when it finds an error (warnings are listed, and exit 0).
//!
//! The project's own tests check every profile of every example tool, and of
//! a crate of everyday Rust types (`tests/everyday`), with Gemini's own
//! schema model, the JSON Schema 2020-12 meta-schema, and OpenAI's and
//! Anthropic's documented strict rules.
//!
//! ## Older clients
//!
//! `TOOL_SCHEMA` replies carry `inputSchema` and `outputSchema`. Clients
//! that read `payload.schema` instead get the input schema there too with
//! [`ServerBuilder::tool_schema_legacy_field`] (`HAIP_TOOL_SCHEMA_LEGACY=1`
//! with [`ServerBuilder::from_env`]).
//!
//! [`SchemaProfile`]: crate::SchemaProfile
//! [`ServerBuilder::schema_profile`]: crate::ServerBuilder::schema_profile
//! [`ServerBuilder::from_env`]: crate::ServerBuilder::from_env
//! [`ServerBuilder::tool_schema_legacy_field`]: crate::ServerBuilder::tool_schema_legacy_field
//!
//! ---
//!
//! Previous: [Writing tools](super::writing_tools) · Next: [Talking to people](super::talking_to_people)

//! # Writing tools
//!
//! A tool is an async function with `#[haip_tool]` on it. Its name, its
//! description and its JSON Schemas come from the signature and the doc
//! comments; calls are validated against the input schema before the
//! function runs; every call ends with exactly one answer.
//!
//! Here is `examples/standalone` (a crate whose only dependencies are `haip`
//! and tokio: `cargo run -p haip-example-standalone`); more are at work in
//! `examples/src/demo.rs` (the quickstart's tools: `cargo run --example
//! quickstart`) and in `examples/conformance.rs` (every shape of tool MCP's
//! conformance suite asks for).
//!
//! <!-- excerpt of examples/standalone/src/main.rs -->
//! ```no_run
//! use haip::{Context, ToolError, haip_tool};
//!
//! /// The sum of two numbers.
//! #[haip::data]
//! struct Sum {
//!     /// `a + b`.
//!     result: f64,
//! }
//!
//! /// Add two numbers.
//! #[haip_tool]
//! async fn add(
//!     /// First operand.
//!     a: f64,
//!     /// Second operand.
//!     b: f64,
//! ) -> Sum {
//!     Sum { result: a + b }
//! }
//!
//! /// Count down from `from`, one progress report per step.
//! #[haip_tool(timeout = "10s")]
//! async fn countdown(
//!     /// Where to start (at most 1000).
//!     #[schemars(range(max = 1000))]
//!     from: u32,
//!     ctx: Context,
//! ) -> Result<String, ToolError> {
//!     for left in (0..=from).rev() {
//!         if ctx.is_cancelled() {
//!             return Err(ToolError::cancelled());
//!         }
//!         ctx.progress(f64::from(from - left) * 100.0 / f64::from(from.max(1)));
//!     }
//!     Ok("liftoff".to_owned())
//! }
//! #
//! #[tokio::main]
//! async fn main() -> Result<(), haip::Error> {
//!     haip::serve().await
//! }
//! ```
//!
//! ## What `#[haip_tool]` derives
//!
//! - **Name**: the function's, or `name = "..."`: 1 to 128 letters, digits,
//!   `_`, `-` or `.` (MCP's rule), checked at compile time.
//! - **Description**: the doc comment, or `description = "..."`.
//! - **Input schema**: one property per data parameter, described by the
//!   parameter's doc comment. `Option<T>` is optional;
//!   `#[haip(default = 20)]` makes a parameter optional with that default, a
//!   value of the parameter's type or of one that converts into it
//!   (`#[haip(default = "OPS")] team: String`; for an `Option<T>`, a `T`:
//!   `#[haip(default = 3)] limit: Option<u32>` is `Some(3)`), and
//!   `#[haip(default)]` with `Default::default()`;
//!   schemars attributes add validation (`#[schemars(range(min = 1))]`,
//!   `#[schemars(length(max = 20))]`, `#[schemars(email)]`,
//!   `#[schemars(regex(pattern = r"^\w+$"))]`). The schema is closed: unknown
//!   params are refused. What clients are *shown* is this schema under a
//!   [profile](super::schemas) their model provider accepts.
//! - **Output schema**: from the return type `T`, or the `T` of
//!   `Result<T, E>`; none for `()`.
//!
//! The full rules, every option and every compile error are on
//! [`haip_tool`]. Mistakes in a signature are compile errors at the
//! offending token, all of them in one build.
//!
//! [`#[haip::data]`](crate::data) derives serde's and schemars' traits for
//! your own types through haip, so `haip` is the only dependency a tool crate
//! adds (tokio aside, for `main`). serde and schemars attributes work on them
//! as usual. The JSON a tool crate writes itself (an error's details with
//! [`ToolError::with_details`](crate::ToolError::with_details), a parameter
//! of any JSON, a hand-written tool's schema, params in tests) is written
//! with [`haip::json!`](crate::json) and [`haip::Value`](crate::Value):
//! `serde_json`'s own, re-exported, so no `serde_json` in `Cargo.toml`
//! either.
//!
//! ## Parameters
//!
//! Parameters are classified by their type, never by their name:
//!
//! - [`Context`] (progress, cancellation, log lines, questions, the caller)
//!   and [`State<T>`] (application state) are **injected**: not in the schema.
//! - [`Params<T>`] alone is the **whole params object**: the input schema is
//!   `T`'s, and the function gets a `T`.
//! - Anything else is **data**, a property of the params object, and needs
//!   `Deserialize + JsonSchema`.
//!
//! ```
//! use haip::{Params, State, haip_tool};
//!
//! /// One search.
//! #[haip::data]
//! struct Search {
//!     /// What to look for.
//!     query: String,
//!     /// How many results at most (default 10).
//!     #[serde(default = "ten")]
//!     #[schemars(range(min = 1, max = 100))]
//!     limit: u32,
//! }
//!
//! fn ten() -> u32 {
//!     10
//! }
//!
//! struct Catalogue(Vec<String>);
//!
//! /// Search the catalogue.
//! #[haip_tool(read_only)]
//! async fn search(Params(search): Params<Search>, catalogue: State<Catalogue>) -> Vec<String> {
//!     let hits = catalogue.0.iter().filter(|item| item.contains(&search.query));
//!     hits.take(search.limit as usize).cloned().collect()
//! }
//!
//! let server = haip::Server::builder()
//!     .state(Catalogue(vec!["tea".into(), "teapot".into()]))
//!     .tool(search::tool())
//!     .build();
//! assert!(server.is_ok());
//! ```
//!
//! State is registered by type with [`ServerBuilder::state`] (one value per
//! type) and shared by every call; a tool that needs a state the server was
//! not given is a start-up error, never a failed call. [`Context::state`]
//! reads it too.
//!
//! ## Results and errors
//!
//! A tool returns any `Serialize + JsonSchema` value, or `Result<T, E>`.
//! Content blocks (text, images, audio, resources, links) are results too:
//! see [Talking to people](super::talking_to_people).
//!
//! - `Err(e)` with any `E: Display` ends the call with `TOOL_EXECUTION_ERROR`
//!   and `e`'s message. `?` converts any `std::error::Error`.
//! - [`ToolError`] chooses the code and adds details:
//!   [`ToolError::execution`], [`ToolError::invalid_params`],
//!   [`ToolError::new`]`("QUOTA_EXCEEDED", "...")` with
//!   [`with_details`](crate::ToolError::with_details). [`ToolError::cancelled`]
//!   ends the call `CANCELLED` instead of failed.
//!
//! Whatever happens, the call ends with exactly one `TOOL_DONE`:
//!
//! | the tool | the client gets |
//! |---|---|
//! | returns `T` / `Ok(T)` | `TOOL_DONE OK`, the value as `result` |
//! | returns `Err(e)` | `TOOL_DONE ERROR`, `{"error": <message>, "code": <code>, "details"?}` |
//! | is called with params its schema refuses | `TOOL_DONE ERROR` `INVALID_PARAMS`, every violation with its JSON pointer; the function never runs |
//! | panics, or returns a value that cannot be serialised | `INTERNAL_ERROR` (the panic's text only with the `debug_errors` setting) |
//! | outlives its timeout | `TIMEOUT` at the deadline; the task is cancelled, then aborted after `cancel_grace` |
//! | is cancelled (`TOOL_CANCEL`, its run cancelled, server shutdown) | `TOOL_UPDATE CANCELLING`, then `TOOL_DONE CANCELLED` |
//! | returns a result over `max_outbound_message_bytes` | `RESULT_TOO_LARGE` |
//!
//! The wire side of each is in [the wire chapter](super::the_wire#tool-calls).
//!
//! ## Progress, cancellation and timeouts
//!
//! [`Context::progress`] reports a percentage, [`Context::progress_with`] a
//! percentage and a partial result. Neither ever blocks: when the client
//! reads slower than the tool reports, a newer report replaces an older
//! unsent one (latest wins). [`Context::cancelled`] completes when the call
//! is cancelled, for `tokio::select!`; [`Context::is_cancelled`] is for
//! loops. A cancelled tool has `cancel_grace` (5 s) to stop before its task
//! is aborted.
//!
//! `#[haip_tool(timeout = "30s")]` (`ms`, `s`, `min`, `h`) or
//! [`ToolBuilder::timeout`] bounds one tool; [`Limits::tool_timeout`]
//! bounds every tool that sets none. There is no timeout unless one is set.
//!
//! ## Sync functions
//!
//! A plain `fn` (not `async`) runs on tokio's blocking thread pool, so a
//! long computation never stalls the runtime; [`ToolBuilder::blocking_handler`]
//! is the same for hand-written tools. Cancellation cannot interrupt it:
//! take a [`Context`] and check [`Context::is_cancelled`] in long loops.
//!
//! ```
//! /// The sum of the bytes.
//! #[haip::haip_tool]
//! fn checksum(data: Vec<u8>) -> u64 {
//!     data.iter().map(|&b| u64::from(b)).sum()
//! }
//! # assert_eq!(checksum(vec![1, 2]), 3);
//! ```
//!
//! An `async fn` is first polled where its session is driven: one that
//! finishes without waiting ends right there, one that waits goes on as a
//! task of its own. An `async fn` that computes for long without awaiting
//! holds up its session; make it a plain `fn`.
//!
//! ## What people see: titles, hints and icons
//!
//! `#[haip_tool(title = "Delete a repository", destructive, idempotent,
//! icon = "https://example.com/trash.svg")]` tells clients what the tool is,
//! over HAIP and MCP alike: a `title` for people, MCP's hints `read_only`,
//! `destructive`, `idempotent` and `open_world` (alone, or `= false`), and
//! any number of icons (`icon(src = "...", mime_type = "...", sizes =
//! ["48x48"], theme = "dark")`). Only what is written is sent. `haip call`
//! and the inspector ask before calling a tool that declares itself
//! destructive. By hand: [`ToolBuilder::title`], [`ToolBuilder::annotations`]
//! with [`ToolAnnotations`], [`ToolBuilder::icon`] with [`Icon`].
//!
//! Two more options belong to other chapters: `task` (MCP tasks, in
//! [MCP both ways](super::mcp_both_ways#tasks)) and `scopes = [..]` (who may
//! call, in [Authentication](super::authentication#scopes)).
//!
//! ## Tools by hand
//!
//! A tool can also be a name, a JSON Schema and a closure, for tools made at
//! run time:
//!
//! ```
//! use haip::{Context, Tool, ToolError, Value, json};
//!
//! let greet = Tool::builder("greet")
//!     .description("Say hello")
//!     .input_schema(json!({
//!         "type": "object",
//!         "properties": {"name": {"type": "string"}},
//!         "required": ["name"]
//!     }))
//!     .handler(|params: Value, _ctx: Context| async move {
//!         let name = params["name"].as_str().unwrap_or_default();
//!         Ok::<_, ToolError>(json!({ "greeting": format!("Hello, {name}!") }))
//!     })
//!     .build()?;
//! assert!(greet.validate_params(&json!({"name": 5})).len() == 1);
//! # Ok::<(), haip::Error>(())
//! ```
//!
//! [`ToolBuilder::build`] checks the name and compiles the schemas; a
//! handler that reads state through [`Context::state`] declares it with
//! [`ToolBuilder::requires_state`].
//!
//! ## Choosing what to serve
//!
//! [`serve`] serves every `#[haip_tool]` linked into the binary, with the
//! settings of the environment. It is short for:
//!
//! ```no_run
//! # async fn run() -> Result<(), haip::Error> {
//! haip::Server::builder().from_env().annotated_tools().build()?.run().await
//! # }
//! ```
//!
//! To choose the tools instead, add each with
//! [`ServerBuilder::tool`]: for a `#[haip_tool]` function `add`, `add::tool()`.
//! [`ServerBuilder::builtin_tools`] adds the demo tools `echo`, `add` and
//! `weather` (the quickstart serves them; a production server usually should
//! not). Two tools with one name fail [`ServerBuilder::build`], naming both.
//!
//! While the server runs, [`Server::start`]'s [`ServerHandle`] changes the
//! registry: [`register_tool`](crate::ServerHandle::register_tool) (replacing a
//! tool of the same name in place), [`unregister_tool`](crate::ServerHandle::unregister_tool)
//! (calls already running go on) and [`tools`](crate::ServerHandle::tools). Clients
//! see the change in their next `TOOL_LIST`; with
//! [`advertise_tools`](crate::ServerBuilder::advertise_tools) on, those that ask
//! for it are sent the new list at once.
//!
//! [`haip_tool`]: crate::haip_tool
//! [`Context`]: crate::Context
//! [`Context::state`]: crate::Context::state
//! [`Context::progress`]: crate::Context::progress
//! [`Context::progress_with`]: crate::Context::progress_with
//! [`Context::cancelled`]: crate::Context::cancelled
//! [`Context::is_cancelled`]: crate::Context::is_cancelled
//! [`State<T>`]: crate::State
//! [`Params<T>`]: crate::Params
//! [`ToolError`]: crate::ToolError
//! [`ToolError::execution`]: crate::ToolError::execution
//! [`ToolError::invalid_params`]: crate::ToolError::invalid_params
//! [`ToolError::new`]: crate::ToolError::new
//! [`ToolError::cancelled`]: crate::ToolError::cancelled
//! [`ToolAnnotations`]: crate::ToolAnnotations
//! [`Icon`]: crate::Icon
//! [`ToolBuilder::timeout`]: crate::ToolBuilder::timeout
//! [`ToolBuilder::blocking_handler`]: crate::ToolBuilder::blocking_handler
//! [`ToolBuilder::title`]: crate::ToolBuilder::title
//! [`ToolBuilder::annotations`]: crate::ToolBuilder::annotations
//! [`ToolBuilder::icon`]: crate::ToolBuilder::icon
//! [`ToolBuilder::build`]: crate::ToolBuilder::build
//! [`ToolBuilder::requires_state`]: crate::ToolBuilder::requires_state
//! [`serve`]: crate::serve
//! [`Server::start`]: crate::Server::start
//! [`ServerHandle`]: crate::ServerHandle
//! [`ServerBuilder::state`]: crate::ServerBuilder::state
//! [`ServerBuilder::tool`]: crate::ServerBuilder::tool
//! [`Limits::tool_timeout`]: crate::Limits::tool_timeout
//! [`ServerBuilder::builtin_tools`]: crate::ServerBuilder::builtin_tools
//! [`ServerBuilder::build`]: crate::ServerBuilder::build
//!
//! ---
//!
//! Previous: [The guide](super) · Next: [Schemas and profiles](super::schemas)

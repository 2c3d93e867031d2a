//! # Testing your tools
//!
//! Four levels: the function alone, the tool (its schemas), the tool called
//! in memory through the real session core with `haip::testing`, and the
//! tool served on `127.0.0.1:0` and called through the real wire with
//! [`crate::client`]. The project's own end-to-end tests
//! (`tests/tests/`, helpers in `tests/tests/support/mod.rs`) are written the
//! third way; `tests/tests/client.rs` calls the quickstart's tools so.
//!
//! ## The function alone
//!
//! `#[haip_tool]` leaves the function as it is: a test calls it directly.
//! [`Context::detached`] makes a context attached to no session (progress
//! goes nowhere, questions fail with `Unsupported`) with a handle that
//! cancels it, and [`State::new`] wraps a state value.
//!
//! ```
//! use haip::{Context, State, ToolError, haip_tool};
//!
//! struct Greeting(&'static str);
//!
//! /// Greet someone, unless the call is cancelled first.
//! #[haip_tool]
//! async fn greet(
//!     name: String,
//!     greeting: State<Greeting>,
//!     ctx: Context,
//! ) -> Result<String, ToolError> {
//!     if ctx.is_cancelled() {
//!         return Err(ToolError::cancelled());
//!     }
//!     Ok(format!("{}, {name}!", greeting.0))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let (ctx, cancel) = Context::detached("test-call");
//! let hello = greet("Ada".into(), State::new(Greeting("Hello")), ctx.clone()).await;
//! assert_eq!(hello.unwrap(), "Hello, Ada!");
//!
//! cancel.cancel();
//! let cancelled = greet("Ada".into(), State::new(Greeting("Hello")), ctx).await;
//! assert!(cancelled.unwrap_err().is_cancelled());
//! # }
//! ```
//!
//! ## The tool: its schemas
//!
//! `name::tool()` builds the tool as the server will serve it. Its input
//! schema is what params are validated against:
//! [`Tool::validate_params`] lists every violation, with its JSON pointer,
//! without running anything. And one line checks every `#[haip_tool]` of
//! the crate against the model providers' rules ([Schemas and
//! profiles](super::schemas)).
//!
//! ```
//! use haip::haip_tool;
//! use serde_json::json;
//!
//! /// Repeat a word.
//! #[haip_tool]
//! async fn repeat(
//!     /// The word.
//!     word: String,
//!     /// How many times.
//!     times: u8,
//! ) -> String {
//!     word.repeat(times.into())
//! }
//!
//! let tool = repeat::tool();
//! assert!(tool.validate_params(&json!({"word": "ha", "times": 3})).is_empty());
//! let violations = tool.validate_params(&json!({"word": "ha", "times": "3", "extra": true}));
//! assert_eq!(violations.len(), 2); // `/times` not a number, `/extra` unknown
//! ```
//!
//! ```
//! // In a #[test]: every #[haip_tool] of the crate, every provider's rules.
//! haip::lint::assert_annotated_clean();
//! ```
//!
//! ## In memory: `haip::testing`
//!
//! With the `testing` feature (a dev-dependency:
//! `haip = { version = "0.1", features = ["testing"] }`),
//! `haip::testing::TestServer` builds a server from a `ServerBuilder` and
//! calls its tools as a client would, with no socket: each session runs
//! through the same session core and driver as a WebSocket connection, and
//! the real client talks to it over an in-memory carrier. Params are
//! validated, progress and log lines arrive as `TOOL_UPDATE`s, questions
//! wait for the test's answer, and cancellation, timeouts, panics and the
//! one `TOOL_DONE` of every call behave as on the wire. Every wait is
//! bounded (10 s unless `.timeout(..)` says otherwise), and `shutdown()`
//! checks that every call ended exactly once.
//!
//! ```no_run
//! # #[cfg(feature = "testing")]
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use haip::testing::TestServer;
//! use haip::{haip_tool, json, Context, ToolError};
//!
//! /// Ask before deleting.
//! #[haip_tool]
//! async fn remove(path: String, ctx: Context) -> Result<String, ToolError> {
//!     ctx.progress(10.0);
//!     if !ctx.confirm(format!("Delete {path}?")).await? {
//!         return Err(ToolError::execution("kept"));
//!     }
//!     ctx.info(format!("deleted {path}"));
//!     Ok(path)
//! }
//!
//! let server = TestServer::new(haip::Server::builder().tool(remove::tool()))?;
//! let mut call = server.start("remove", json!({"path": "a.txt"})).await?;
//! assert_eq!(call.progress().await?, 10.0);
//! let question = call.confirm(true).await?; // answers the ctx.confirm: yes
//! assert_eq!(question.message, "Delete a.txt?");
//! let done = call.done().await?;
//! done.assert_logged(haip::LogLevel::Info, "deleted a.txt");
//! assert_eq!(done.into_result()?, json!("a.txt"));
//! // What clients are shown, against a committed file.
//! server.check_schemas_snapshot("tests/schemas.json").await?;
//! server.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! - **Questions**: [`TestCall::question`] waits for the next one;
//!   [`TestCall::answer`] takes the question and anything that serialises
//!   to its form (`json!({..})`, or the `#[haip::data]` struct the tool
//!   asks for); [`TestCall::confirm`]`(true)` or `(false)` answers a
//!   `ctx.confirm` in one line; [`TestCall::decline`] declines.
//! - **Failures** are a [`TestError`] whose message says what went wrong
//!   (for `INVALID_PARAMS`, every violation: `/a: "one" is a string;
//!   expected a number`) and whose [`code`](crate::testing::TestError::code) is the protocol's.
//! - **Schemas**: [`TestServer::schemas`] is every tool's advertised
//!   schemas as stable, pretty JSON; [`TestServer::check_schemas_snapshot`]
//!   compares it with a committed file and lists the lines that changed.
//!   Run the test with `HAIP_UPDATE_SNAPSHOTS=1` to write the file the
//!   first time, and to accept a change.
//! - **Params and answers** are written with `haip::json!` (serde_json's
//!   `json!`, re-exported): no `serde_json` dev-dependency needed.
//!
//! **What the feature costs to build.** With `haip` in `[dependencies]`
//! and again, with `features = ["testing"]`, in `[dev-dependencies]`,
//! `cargo build` builds haip without the feature and `cargo test` with it:
//! two feature sets, so haip is compiled twice (each build is kept: once
//! each, not at every switch). The second, with the WebSocket client the
//! feature adds, took 12 s here (a debug build on 2 shared cores; more in
//! release or on a slower machine). To build haip
//! once, turn `testing` on in `[dependencies]` too: it only adds
//! `haip::testing` and the client, and none of it runs unless a test calls
//! it.
//!
//! `examples/testing.rs` tests the quickstart's tools this way (run
//! `cargo test -p haip-examples --example testing`), its schemas against a
//! committed snapshot; here is its test of `book_table`, which asks a
//! question (the tool is in [Talking to people](super::talking_to_people)):
//!
//! <!-- excerpt of examples/testing.rs -->
//! ```ignore
//! use haip::LogLevel;
//! use haip::json;
//! use haip::testing::{Caller, TestServer};
//! use haip_examples::demo;
//!
//! /// The demo tools, served by nothing: called in memory.
//! fn server() -> TestServer {
//!     TestServer::new(haip::Server::builder().tools(demo::tools())).expect("the demo tools build")
//! }
//! #
//! #[tokio::test]
//! async fn book_table_asks_and_books_what_it_is_told() {
//!     let server = server();
//!     let mut call = server
//!         .start("book_table", json!({"restaurant": "Luigi"}))
//!         .await
//!         .unwrap();
//!     let question = call.question().await.unwrap();
//!     assert_eq!(question.message, "How many people, and when?");
//!     // A party too large does not fit the question: asked again.
//!     let err = call
//!         .answer(&question, json!({"party_size": 40, "time": "19:00"}))
//!         .await
//!         .unwrap_err();
//!     assert_eq!(err.code(), Some("INVALID_PARAMS"));
//!     call.answer(&question, json!({"party_size": 4, "time": "19:00"}))
//!         .await
//!         .unwrap();
//!     let done = call.done().await.unwrap();
//!     done.assert_logged(LogLevel::Info, "checking availability at Luigi");
//!     assert_eq!(
//!         done.into_result().unwrap(),
//!         json!({"booked": true, "restaurant": "Luigi", "party_size": 4, "time": "19:00"})
//!     );
//!
//!     // Declined: nothing booked.
//!     let mut call = server
//!         .start("book_table", json!({"restaurant": "Luigi"}))
//!         .await
//!         .unwrap();
//!     let question = call.question().await.unwrap();
//!     call.decline(&question).await.unwrap();
//!     assert_eq!(call.result().await.unwrap()["booked"], false);
//! }
//! ```
//!
//! `tests/external/` is a crate outside the workspace, as a user's, testing
//! the tools of another crate so.
//!
//! ## Through the wire
//!
//! Build the server your binary builds, bind it to `127.0.0.1:0` (a free
//! port), and call it with [`crate::client`] (feature `client`, in your
//! `[dev-dependencies]`: `haip = { version = "0.1", features = ["client"] }`).
//! Bound every wait, so that a broken server fails the test instead of
//! hanging it, and shut the server down at the end.
//!
//! ```no_run
//! # #[cfg(feature = "client")]
//! # mod tests {
//! use std::time::Duration;
//!
//! use haip::client::{Client, Outcome};
//! use haip::{Context, ToolError, haip_tool};
//! use serde_json::json;
//!
//! /// Count to `to`, reporting progress.
//! #[haip_tool]
//! async fn count(to: u32, ctx: Context) -> Result<u32, ToolError> {
//!     for i in 1..=to {
//!         ctx.progress(f64::from(i) * 100.0 / f64::from(to));
//!     }
//!     Ok(to)
//! }
//!
//! #[tokio::test]
//! async fn count_reports_progress_then_answers() {
//!     let handle = haip::Server::builder()
//!         .addr("127.0.0.1:0")
//!         .tool(count::tool())
//!         .build()
//!         .unwrap()
//!         .start()
//!         .await
//!         .unwrap();
//!     let url = format!("ws://{}/haip", handle.local_addr());
//!     let within = Duration::from_secs(10);
//!
//!     let client = tokio::time::timeout(within, Client::connect(&url)).await.unwrap().unwrap();
//!     let mut call = client.call("count", json!({"to": 4})).await.unwrap();
//!     let mut last = None;
//!     while let Some(update) = tokio::time::timeout(within, call.next_update()).await.unwrap() {
//!         last = update.progress;
//!     }
//!     assert_eq!(last, Some(100.0)); // the latest report always arrives
//!     let outcome = tokio::time::timeout(within, call.outcome()).await.unwrap().unwrap();
//!     assert_eq!(outcome, Outcome::Ok(Some(json!(4))));
//!
//!     // Refused params never reach the function.
//!     let refused = client.call("count", json!({"to": "four"})).await.unwrap();
//!     let outcome = tokio::time::timeout(within, refused.outcome()).await.unwrap().unwrap();
//!     assert!(matches!(outcome, Outcome::Error { code, .. } if code == "INVALID_PARAMS"));
//!
//!     handle.shutdown().await;
//! }
//! # }
//! ```
//!
//! - [`Client::call_typed`](crate::client::Client::call_typed) calls and
//!   deserialises the result in one step.
//! - A tool that asks questions needs a client that answers them:
//!   [`ClientOptions::tool_input`](crate::client::ClientOptions::tool_input)`(true)`
//!   with [`Client::connect_with`](crate::client::Client::connect_with), then
//!   [`Call::next_event`](crate::client::Call::next_event) and
//!   [`Call::answer`](crate::client::Call::answer) ([Talking to
//!   people](super::talking_to_people)).
//! - With authentication on, mint a token in the test and pass it with
//!   [`ClientOptions::token`](crate::client::ClientOptions::token).
//! - [`ServerHandle::register_tool`](crate::ServerHandle::register_tool)
//!   swaps a tool while the server runs, for tests about registry changes.
//!
//! [`TestCall::question`]: crate::testing::TestCall::question
//! [`TestCall::answer`]: crate::testing::TestCall::answer
//! [`TestCall::confirm`]: crate::testing::TestCall::confirm
//! [`TestCall::decline`]: crate::testing::TestCall::decline
//! [`TestError`]: crate::testing::TestError
//! [`TestServer::schemas`]: crate::testing::TestServer::schemas
//! [`TestServer::check_schemas_snapshot`]: crate::testing::TestServer::check_schemas_snapshot
//! [`Context::detached`]: crate::Context::detached
//! [`State::new`]: crate::State::new
//! [`Tool::validate_params`]: crate::Tool::validate_params
//!
//! ---
//!
//! Previous: [Operating haip](super::operating) · Next: [The CLI and the inspector](super::cli_and_inspector)

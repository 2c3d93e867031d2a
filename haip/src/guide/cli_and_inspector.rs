//! # The CLI and the inspector
//!
//! Two ways to try tools by hand before an agent uses them: the `haip`
//! command in a terminal, and a page in a browser. Both speak HAIP to any
//! server; the quickstart (`cargo run --example quickstart`) turns the
//! inspector on and prints its address.
//!
//! ## The `haip` command
//!
//! Feature `cli`: `cargo install --path haip --features cli`, or
//! `cargo run -p haip --features cli --bin haip -- ...` from the repository.
//!
//! ```sh
//! haip tools  ws://127.0.0.1:8080/haip
//! haip schema ws://127.0.0.1:8080/haip create_user --profile openai-strict
//! haip lint   ws://127.0.0.1:8080/haip
//! haip call   ws://127.0.0.1:8080/haip calculator operation=add a=5 b=3   # key=value typed by the schema
//! haip call   ws://127.0.0.1:8080/haip process_file --params '{"filename":"a.txt","operation":"read"}'
//! haip call   ws://127.0.0.1:8080/haip book_table restaurant=Luigi --answer '{"party_size":4,"time":"19:00"}'
//! haip health ws://127.0.0.1:8080/haip
//! haip bench  ws://127.0.0.1:8080/haip --tool echo --params '{"message":"hi"}' \
//!             --connections 50 --in-flight 8 --duration 10s --server-pid "$(pgrep quickstart)"
//! ```
//!
//! | command | what it does |
//! |---|---|
//! | `tools` | lists the tools |
//! | `schema TOOL [--profile P]` | a tool's input and output schemas, in a [profile](super::schemas) (default: the server's) |
//! | `lint` | every tool against the model providers' rules: each profile that cannot serve it and why, names OpenAI and Anthropic refuse, descriptions over 1024 characters (errors); tools and parameters without a description (warnings, which do not change the exit code) |
//! | `call TOOL [key=value ... \| --params JSON]` | calls a tool: a progress bar once the tool reports progress, log lines above it (`--log-level`), the tool's questions asked in the terminal one field at a time, the required fields first in the order the tool declares them (empty input takes the default, or declines; a `ctx.confirm` defaults to no) or answered by `--answer JSON` (repeated for successive questions) or `--decline`; Ctrl-C cancels. The result is printed as JSON, images, audio and binary resources as their type and size (`--json` keeps their data). A tool that declares itself destructive is confirmed first (`--yes` skips that; needed without a terminal) |
//! | `health` | the server's `/health` |
//! | `bench` | loads a server with calls for `--duration` or `--calls`, over `--connections` × `--in-flight`, and reports throughput and latency (with `--server-pid`, the server's CPU time per call and peak RSS). Bounded in count and time, and only against loopback unless given `--allow-remote` |
//!
//! Exit codes: 0 success, 1 the tool failed or was cancelled (or `lint`
//! found an error), 2 a usage or connection error. `--json` prints
//! machine-readable output; `--token` (or `HAIP_TOKEN`) authenticates.
//! `key=value` pairs are typed by the tool's input schema (numbers,
//! booleans, JSON for arrays and objects). `bench` is what produced
//! `BENCHMARKS.md` (`bash bench/run.sh`).
//!
//! ## The inspector
//!
//! A page to try tools by hand, served by the server itself (feature
//! `inspector`, on in the quickstart), at `/inspector`:
//!
//! ```no_run
//! # #[cfg(feature = "inspector")]
//! # async fn run() -> Result<(), haip::Error> {
//! haip::Server::builder().annotated_tools().inspector(true).build()?.run().await
//! # }
//! ```
//!
//! Open `http://127.0.0.1:8080/inspector` (the server logs the address it
//! bound). The page lists the tools with a filter, builds a form from each
//! input schema (required fields marked, defaults filled in, limits and
//! descriptions beside the fields, enums as selects, lists, nested objects,
//! or plain JSON), calls the tool with a live progress bar, its log lines
//! and a Cancel button, asks the tool's questions (`ctx.ask`) as forms with
//! Accept / Decline, and shows the result (images from content blocks as
//! images) or the error, with each `INVALID_PARAMS` violation under the
//! field it names. It asks before calling a tool that declares itself
//! destructive. A collapsible log shows every envelope both ways.
//!
//! It is one HTML file compiled into the binary: nothing to install,
//! nothing fetched from elsewhere, light and dark themes, usable on a
//! phone. It speaks HAIP to the server that served it over WebSocket, or
//! SSE when the WebSocket upgrade fails (`/inspector?transport=sse` forces
//! it).
//!
//! The page itself is public, like `/health`; with authentication on it
//! says "This server needs a token" and sends the one you paste with each
//! connection, as a `token.<JWT>` WebSocket subprotocol entry (browsers
//! cannot set headers there) or an `Authorization` header on SSE. Without
//! [`inspector`](crate::ServerBuilder::inspector)`(true)`, `/inspector` is
//! `404`. With `cors_allowed_origins` set and the server's own origin not
//! listed, the WebSocket upgrade is refused like any other origin's, and the
//! page uses SSE.
//!
//! `cargo test -p haip-tests --test suite inspector::` drives the page in headless
//! Chromium (installed with `apt-get` on first use, or taken from
//! `HAIP_CHROMIUM` / `HAIP_CHROMEDRIVER`) and saves a screenshot of each
//! state under `target/inspector-screenshots/`.
//!
//! ## From Rust
//!
//! [`crate::client`] (feature `client`) is what the CLI is built on: it
//! connects over WebSocket, lists tools, reads schemas, and calls tools with
//! a progress stream, log lines, questions and cancellation; one connection
//! carries many concurrent calls.
//!
//! ```no_run
//! # #[cfg(feature = "client")]
//! # async fn run() -> Result<(), haip::client::ClientError> {
//! use haip::client::Client;
//! use serde_json::json;
//!
//! let client = Client::connect("ws://127.0.0.1:8080/haip").await?;
//! let mut call = client.call("process_file", json!({"filename": "a.txt", "operation": "read"})).await?;
//! while let Some(update) = call.next_update().await {
//!     println!("{:?}%", update.progress);
//! }
//! println!("{:?}", call.outcome().await?);
//! # Ok(()) }
//! ```
//!
//! ---
//!
//! Previous: [Testing your tools](super::testing) · Next: [Middleware](super::middleware)

//! # Talking to people
//!
//! A tool can log, ask the person at the other end a question, and return
//! rich content, over HAIP and MCP alike, with the same code. The
//! quickstart's `book_table` (`examples/src/demo.rs`; run
//! `cargo run --example quickstart`, then
//! `haip call ws://127.0.0.1:8080/haip book_table restaurant=Luigi`) does all
//! three; `examples/conformance.rs` also samples and lists roots. Here it is:
//!
//! <!-- excerpt of examples/src/demo.rs -->
//! ```
//! use haip::{Answer, Context, ToolError, haip_tool};
//! #
//! /// A dinner time `book_table` offers.
//! #[allow(missing_docs)] // the wire names say it; doc comments would become titles
//! #[haip::data]
//! #[derive(Debug, Clone, Copy, PartialEq, Eq)]
//! pub enum DinnerTime {
//!     #[serde(rename = "18:00")]
//!     Six,
//!     #[serde(rename = "19:00")]
//!     Seven,
//!     #[serde(rename = "20:00")]
//!     Eight,
//! }
//!
//! /// What `book_table` asks: how many, and when.
//! #[haip::data]
//! #[derive(Debug, Clone, Copy, PartialEq, Eq)]
//! pub struct Booking {
//!     /// How many people.
//!     #[schemars(range(min = 1, max = 12))]
//!     pub party_size: u8,
//!     /// When.
//!     pub time: DinnerTime,
//! }
//!
//! /// What `book_table` did.
//! #[haip::data]
//! #[derive(Debug, Clone, PartialEq, Eq)]
//! pub struct Booked {
//!     /// Whether a table is booked.
//!     pub booked: bool,
//!     /// Where.
//!     pub restaurant: String,
//!     /// For how many (when booked).
//!     #[serde(skip_serializing_if = "Option::is_none")]
//!     pub party_size: Option<u8>,
//!     /// At what time (when booked).
//!     #[serde(skip_serializing_if = "Option::is_none")]
//!     pub time: Option<DinnerTime>,
//! }
//!
//! /// Book a table at a restaurant, asking how many people and when.
//! #[haip_tool]
//! pub async fn book_table(
//!     /// The restaurant.
//!     restaurant: String,
//!     ctx: Context,
//! ) -> Result<Booked, ToolError> {
//!     ctx.info(format!("checking availability at {restaurant}"));
//!     let answer = ctx.ask::<Booking>("How many people, and when?").await?;
//!     Ok(match answer {
//!         Answer::Accepted(Booking { party_size, time }) => Booked {
//!             booked: true,
//!             restaurant,
//!             party_size: Some(party_size),
//!             time: Some(time),
//!         },
//!         Answer::Declined | Answer::Cancelled => Booked {
//!             booked: false,
//!             restaurant,
//!             party_size: None,
//!             time: None,
//!         },
//!     })
//! }
//! ```
//!
//! ## Log lines
//!
//! [`Context::log`]`(level, message)`, or [`Context::debug`], [`info`],
//! [`notice`], [`warning`] and [`error`]; [`Context::log_with`] adds
//! structured data. HAIP clients get `TOOL_UPDATE {log: {level, message}}`
//! at or above the level their `HAI` asks for (`capabilities.log_level`,
//! default `info`); MCP clients get `notifications/message`, filtered by
//! `logging/setLevel`. Lines never block, arrive in order before the call's
//! `TOOL_DONE` and are never merged away; a tool that logs faster than its
//! client reads is bounded all the same: past 256 unsent lines, new ones
//! are dropped and a `warning` line says how many. An `error` line does not
//! end the call: return an error for that.
//!
//! ## Questions
//!
//! [`Context::ask::<T>`](crate::Context::ask)`(message)` sends a form built
//! from `T`'s fields and waits for [`Answer::Accepted(T)`](crate::Answer),
//! `Declined` or `Cancelled`. `T` is always a struct (a form is an object
//! of named fields: `ctx.ask::<String>` does not compile, "a question's
//! form must be a struct with `#[haip::data]`"; ask for one value with a
//! struct of one field; a struct deriving its traits itself says
//! `impl haip::QuestionForm for MyForm {}`) whose fields are strings,
//! numbers, integers, booleans, enums of unit variants or lists of such
//! enums (multiple choice); `Option` fields are optional, defaults, ranges,
//! lengths, `email` and doc comments are part of the form. Another shape
//! fails with [`AskError::InvalidForm`], naming the field.
//! [`Context::confirm`]`(message)` asks yes or no: a form of one required
//! boolean, `confirm`, whose default is `false`, so a person who only
//! presses Enter in `haip call`, or leaves the inspector's box unticked,
//! says no. Declining or dismissing it is no too.
//!
//! | client | the question | the answer |
//! |---|---|---|
//! | HAIP, its `HAI` declares `capabilities.tool_input` | `TOOL_UPDATE WAITING_INPUT` with `input_request {request_id, message, schema}` | `TOOL_INPUT {call_id, request_id, action, content}`; one that does not fit gets `ERROR INVALID_PARAMS` and the question stays open |
//! | MCP, declares elicitation (in its session, or in a 2026-07-28 request) | `elicitation/create` (form mode) | its result, `accept`/`decline`/`cancel` one to one |
//! | MCP before 2026-07-28 on a server with `mcp_sessions(false)` | none: it has no session to be asked in | [`AskError::Failed`] at once, saying so and naming `mcp_sessions` |
//! | anyone else | none | [`AskError::Unsupported`] at once; `?` turns it into a `TOOL_EXECUTION_ERROR` saying so |
//!
//! The call's timeout and `TOOL_CANCEL` keep working while it waits
//! ([`AskError::CallEnded`]). Questions awaited together (`tokio::join!`)
//! are put to the client together. A session that loses its connection
//! keeps its open questions; on resumption the replayed `TOOL_UPDATE` asks
//! again.
//!
//! Over MCP 2026-07-28 (no sessions), questions go by rounds and **the tool runs
//! again from the start** with the answers: keep what comes before a
//! question free of side effects, and ask the same questions in the same
//! order ([`Ask::key`](crate::Ask::key) names one). See
//! [MCP both ways](super::mcp_both_ways#questions-without-sessions).
//!
//! On the wire (HAIP, ids and envelope fields left out):
//!
//! ```text
//! → {"type":"HAI","payload":{"capabilities":{"tool_input":true}}}
//! → {"type":"TOOL_CALL","payload":{"call_id":"b-1","tool":"book_table","params":{"restaurant":"Luigi"}}}
//! ← TOOL_UPDATE {"call_id":"b-1","status":"RUNNING","log":{"level":"info","message":"checking availability at Luigi"}}
//! ← TOOL_UPDATE {"call_id":"b-1","status":"WAITING_INPUT","input_request":{"request_id":"…","message":"How many people, and when?",
//!                "schema":{"type":"object","properties":{"party_size":{"type":"integer","minimum":1,"maximum":12,…},"time":{"type":"string","enum":["18:00","19:00","20:00"],…}},…}}}
//! → {"type":"TOOL_INPUT","payload":{"call_id":"b-1","request_id":"…","action":"accept","content":{"party_size":4,"time":"19:00"}}}
//! ← TOOL_UPDATE {"call_id":"b-1","status":"RUNNING"}
//! ← TOOL_DONE   {"call_id":"b-1","status":"OK","result":{"booked":true,"restaurant":"Luigi","party_size":4,"time":"19:00"}}
//! ```
//!
//! A `TOOL_INPUT` for a question that is not open (answered already, or its
//! call ended) gets `ERROR REQUEST_NOT_FOUND`.
//!
//! ## Answering: the Rust client and the CLI
//!
//! The Rust client answers when its options say so:
//! [`ClientOptions::tool_input`]`(true)`, then [`Call::next_event`] yields
//! progress, log lines and questions in order, and [`Call::answer`],
//! [`Call::decline`] or [`Call::cancel_question`] replies. Each
//! [`Question`]'s [`fields`](crate::client::Question::fields) describe the
//! form (kinds, choices, defaults). The module page of [`crate::client`]
//! has the whole loop.
//!
//! `haip call ws://127.0.0.1:8080/haip book_table restaurant=Luigi` prints
//! log lines above its progress bar and asks the questions in the terminal,
//! one prompt per field with its type, choices and default, the required
//! fields first in the order `T` declares them (empty input takes the
//! default, or declines); scripts answer with
//! `--answer '{"party_size":2,"time":"18:00"}'` (repeated for successive
//! questions) or `--decline`.
//!
//! ## Rich results
//!
//! Return [`Content`] ([`Content::text`], [`Content::image`]`(bytes, mime)`,
//! [`Content::audio`], [`Content::resource_text`], [`Content::resource_blob`],
//! [`Content::link`]), a `Vec<Content>`, or [`Rich<T>`] (blocks beside a
//! structured value). HAIP results are `{"content": [...]}` (plus
//! `"structured"`), each block shaped as MCP's, binary data base64; MCP
//! clients get the blocks one to one (and `structuredContent`).
//!
//! ```
//! use haip::{Content, Rich, haip_tool};
//!
//! /// Count the words of a text, with a summary people can read.
//! #[haip_tool]
//! async fn count_words(text: String) -> Rich<usize> {
//!     let n = text.split_whitespace().count();
//!     Rich::new(n).with(Content::text(format!("{n} words")))
//! }
//! ```
//!
//! ## Sampling and roots (MCP)
//!
//! [`Context::sample`]`(`[`SampleRequest::new`]`(prompt))` asks an MCP
//! client's model for a completion (`sampling/createMessage`), and
//! [`Context::roots`] the directories the client shares (`roots/list`). HAIP
//! has neither: [`SampleError::Unsupported`] and
//! [`RootsError::Unsupported`], at once.
//!
//! [`Context::log`]: crate::Context::log
//! [`Context::log_with`]: crate::Context::log_with
//! [`Context::debug`]: crate::Context::debug
//! [`info`]: crate::Context::info
//! [`notice`]: crate::Context::notice
//! [`warning`]: crate::Context::warning
//! [`error`]: crate::Context::error
//! [`Context::confirm`]: crate::Context::confirm
//! [`Context::sample`]: crate::Context::sample
//! [`Context::roots`]: crate::Context::roots
//! [`AskError::InvalidForm`]: crate::AskError::InvalidForm
//! [`AskError::Unsupported`]: crate::AskError::Unsupported
//! [`AskError::Failed`]: crate::AskError::Failed
//! [`AskError::CallEnded`]: crate::AskError::CallEnded
//! [`SampleRequest::new`]: crate::SampleRequest::new
//! [`SampleError::Unsupported`]: crate::SampleError::Unsupported
//! [`RootsError::Unsupported`]: crate::RootsError::Unsupported
//! [`Content`]: crate::Content
//! [`Content::text`]: crate::Content::text
//! [`Content::image`]: crate::Content::image
//! [`Content::audio`]: crate::Content::audio
//! [`Content::resource_text`]: crate::Content::resource_text
//! [`Content::resource_blob`]: crate::Content::resource_blob
//! [`Content::link`]: crate::Content::link
//! [`Rich<T>`]: crate::Rich
//! [`ClientOptions::tool_input`]: crate::client::ClientOptions::tool_input
//! [`Call::next_event`]: crate::client::Call::next_event
//! [`Call::answer`]: crate::client::Call::answer
//! [`Call::decline`]: crate::client::Call::decline
//! [`Call::cancel_question`]: crate::client::Call::cancel_question
//! [`Question`]: crate::client::Question
//!
//! ---
//!
//! Previous: [Schemas and profiles](super::schemas) · Next: [Transports and the wire](super::the_wire)

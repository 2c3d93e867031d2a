//! # Composing tools
//!
//! A crate of tools is written once and served by many applications, each
//! choosing which of its tools to serve, under which names, described how.
//! Four pieces do it: a [`ToolSet`] (what a crate exports), a mount (a set
//! served under a name prefix), tags (which tools to leave out) and edits
//! ([`ToolEdit`]: a tool renamed, described anew, a parameter renamed or
//! fixed). All of it happens once, when the server is built: a served tool
//! is an ordinary tool, and its calls cost what they would otherwise.
//! `examples/compose.rs` puts the four together
//! (`cargo run -p haip-examples --example compose`; its tests check what it
//! serves).
//!
//! ## A crate's tools: `ToolSet`
//!
//! A library builds a [`ToolSet`] from its tools, by hand
//! ([`ToolSet::new`]`().tool(..)`, or collected from an iterator of
//! [`Tool`]s), or from every `#[haip_tool]` of a module and the modules in
//! it, in source order: [`ToolSet::annotated`]`(module_path!())` (at the
//! crate's root: the whole crate).
//!
//! <!-- excerpt of examples/compose.rs -->
//! ```
//! mod files {
//!     use haip::{Context, ToolError, ToolSet, haip_tool, json};
//!
//!     /// The files of the example's sandbox, in memory.
//!     const FILES: [(&str, &str); 2] = [("readme.txt", "Hello!"), ("todo.txt", "milk, eggs")];
//!
//!     /// Read a file of the sandbox.
//!     #[haip_tool(tags = ["read"], read_only)]
//!     pub(crate) async fn read(
//!         /// The file's name, as `list` gives it.
//!         path: String,
//!     ) -> Result<String, ToolError> {
//!         match FILES.iter().find(|(name, _)| *name == path) {
//!             Some((_, text)) => Ok((*text).to_owned()),
//!             None => Err(ToolError::new("NOT_FOUND", format!("no file {path}"))
//!                 .with_details(json!({"files": FILES.map(|(name, _)| name)}))),
//!         }
//!     }
//!
//!     /// List the files of the sandbox.
//!     #[haip_tool(tags = ["read"], read_only)]
//!     pub(crate) async fn list() -> Vec<String> {
//!         FILES.iter().map(|(name, _)| (*name).to_owned()).collect()
//!     }
//!
//!     /// Delete a file of the sandbox, once confirmed.
//!     #[haip_tool(tags = ["admin"], destructive)]
//!     pub(crate) async fn delete(
//!         /// The file's name.
//!         path: String,
//!         ctx: Context,
//!     ) -> Result<String, ToolError> {
//!         if !ctx.confirm(format!("Delete {path}?")).await? {
//!             return Ok(format!("kept {path}"));
//!         }
//!         Err(ToolError::execution("the sandbox is read-only"))
//!     }
//!
//!     /// Every `#[haip_tool]` of this module, in source order.
//!     pub(crate) fn tools() -> Result<ToolSet, haip::Error> {
//!         ToolSet::annotated(module_path!())
//!     }
//! }
//! # let set = files::tools()?;
//! # let names: Vec<&str> = set.iter().map(|t| t.name()).collect();
//! # assert_eq!(names, ["read", "list", "delete"]);
//! # Ok::<(), haip::Error>(())
//! ```
//!
//! ## Mounting a set under a prefix
//!
//! [`ServerBuilder::mount`]`(prefix, set)` serves each tool as
//! `<prefix>_<name>`: `files_read`, `files_delete`. The **separator** is
//! `_` unless [`ServerBuilder::mount_separator`] (for every mount) or
//! [`Mount::separator`] (for one) says otherwise; `_` is the one every MCP
//! host takes in tool names (`.` and `-` are the others MCP allows, and some
//! hosts refuse `.`). A prefix is the start of a tool name: 1 to 126
//! characters of `A-Z`, `a-z`, `0-9`, `_`, `.` and `-`. The same set may be
//! mounted twice, under two prefixes.
//!
//! The registry lists the built-in tools first, then the annotated ones,
//! then what was given with [`tool`](crate::ServerBuilder::tool) and
//! `mount`, in the order given. [`annotated_tools`](crate::ServerBuilder::annotated_tools)
//! leaves out every `#[haip_tool]` that is also given explicitly, mounted
//! or not: a tool is served where it was placed, not a second time under
//! its own name because it is linked into the binary (they are matched by
//! the function they come from, not by name).
//!
//! ## Tags: choosing what to serve
//!
//! A tool's tags come from `#[haip_tool(tags = ["admin"])]`,
//! [`ToolBuilder::tags`](crate::ToolBuilder::tags) or an edit
//! ([`ToolEdit::tags`], which adds to them). Each tag is 1 to 64
//! characters, ASCII letters, digits, `_`, `-`, `.`, `:` or `/`.
//! [`ServerBuilder::only_tags`] serves only the tools with one of the tags
//! given, and [`ServerBuilder::exclude_tags`] leaves out the tools with any
//! of its tags, whatever `only_tags` says. Both apply to every tool the
//! builder was given (built-in, annotated, added, mounted), once, in
//! `build()`: what is left out is not registered at all, and a call of it
//! is `TOOL_NOT_FOUND`. Tools registered while the server runs
//! ([`ServerHandle::register_tool`](crate::ServerHandle::register_tool),
//! MCP imports) are not filtered. A filter naming a tag no tool has is
//! logged as a warning when the server is built. Layers see the tags too
//! (`call.tool().tags()`, see [Middleware](super::middleware)).
//!
//! ```
//! # mod files {
//! #     use haip::{ToolSet, haip_tool};
//! #     /// Read a file.
//! #     #[haip_tool(tags = ["read"])]
//! #     pub async fn read(
//! #         /// The file's path.
//! #         path: String,
//! #     ) -> String {
//! #         path
//! #     }
//! #     /// Delete a file.
//! #     #[haip_tool(tags = ["admin"])]
//! #     pub async fn delete(
//! #         /// The file's path.
//! #         path: String,
//! #     ) -> bool {
//! #         path.is_empty()
//! #     }
//! #     pub fn tools() -> Result<ToolSet, haip::Error> {
//! #         ToolSet::annotated(module_path!())
//! #     }
//! # }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), haip::Error> {
//! let handle = haip::Server::builder()
//!     .addr("127.0.0.1:0")
//!     .mount("files", files::tools()?) // files_read, files_delete
//!     .mount_with(haip::Mount::new("backup", files::tools()?).separator('-'))
//!     .exclude_tags(["admin"]) // neither `delete`
//!     .build()?
//!     .start()
//!     .await?;
//! let names: Vec<String> = handle.tools().iter().map(|t| t.name().to_owned()).collect();
//! assert_eq!(names, ["files_read", "backup-read"]);
//! # handle.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! ## Edits: a tool made from another
//!
//! [`Tool::edit`] starts a [`ToolEdit`] of any tool; [`Mount::edit`]`(name,
//! |edit| ..)` edits a tool as it is mounted (by its own name, before the
//! prefix; a new name is prefixed too). An edit changes what clients are
//! shown, never what runs: the edited tool calls the same handler, with the
//! same timeout, scopes, state and hints.
//!
//! | edit | what clients see |
//! |---|---|
//! | [`name`](crate::ToolEdit::name), [`title`](crate::ToolEdit::title), [`description`](crate::ToolEdit::description) | the tool under another name, title, description |
//! | [`tags`](crate::ToolEdit::tags) | more tags (for the filters above, and layers) |
//! | [`param_description`](crate::ToolEdit::param_description), [`param_title`](crate::ToolEdit::param_title) | a parameter described anew, in every schema profile |
//! | [`rename_param`](crate::ToolEdit::rename_param)`(from, to)` | the parameter called `to`; the handler still gets `from` |
//! | [`fix_param`](crate::ToolEdit::fix_param)`(param, value)` | no such parameter: every call gets `value` for it (checked against its schema when the edit is built) |
//!
//! Renaming and fixing parameters are the only edits that cost anything per
//! call: the params object is rewritten before the handler runs (one map
//! removal and insertion per renamed parameter, one insertion per fixed
//! one); a tool that renames and fixes nothing is not wrapped at all.
//!
//! <!-- excerpt of examples/compose.rs -->
//! ```
//! # use haip::{Mount, json};
//! mod notes {
//!     use haip::{ToolSet, haip_tool};
//!
//!     const NOTES: [&str; 3] = ["buy milk", "call Ada", "milk the idea"];
//!
//!     /// Find the notes that contain a word.
//!     #[haip_tool(read_only)]
//!     pub(crate) async fn find(
//!         /// The word.
//!         q: String,
//!         /// At most this many notes.
//!         limit: u32,
//!     ) -> Vec<String> {
//!         NOTES
//!             .iter()
//!             .filter(|note| note.contains(q.as_str()))
//!             .take(limit as usize)
//!             .map(|note| (*note).to_owned())
//!             .collect()
//!     }
//!
//!     pub(crate) fn tools() -> ToolSet {
//!         ToolSet::new().tool(find::tool())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), haip::Error> {
//! # let handle = haip::Server::builder()
//! #     .addr("127.0.0.1:0")
//!     .mount_with(Mount::new("notes", notes::tools()).edit("find", |find| {
//!         find.name("search")
//!             .description("Search the notes for a word; at most 2 come back.")
//!             .rename_param("q", "query")
//!             .param_description("query", "A word, e.g. `milk`.")
//!             .fix_param("limit", json!(2))
//!     }))
//! #     .build()?
//! #     .start()
//! #     .await?;
//! # let tools = handle.tools();
//! # assert_eq!(tools[0].name(), "notes_search");
//! # let properties = &tools[0].input_schema()["properties"];
//! # assert!(properties.get("query").is_some() && properties.get("limit").is_none());
//! # handle.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! ## Mistakes fail `build()`
//!
//! Nothing about composing is left to the first call: two tools with one
//! name (the error says where each came from), a prefix or separator a tool
//! name cannot hold, a name over 128 characters once prefixed, an edit of
//! a tool the mount does not have (listing those it has), a parameter an
//! edit names that the tool does not have, a fixed value its schema
//! refuses, a tag filter that is not a tag: each makes
//! [`ServerBuilder::build`](crate::ServerBuilder::build) fail with an
//! [`Error::InvalidConfig`](crate::Error::InvalidConfig) or
//! [`Error::InvalidTool`](crate::Error::InvalidTool) that says which.
//!
//! [`ToolSet`]: crate::ToolSet
//! [`ToolSet::new`]: crate::ToolSet::new
//! [`ToolSet::annotated`]: crate::ToolSet::annotated
//! [`Tool`]: crate::Tool
//! [`Tool::edit`]: crate::Tool::edit
//! [`ToolEdit`]: crate::ToolEdit
//! [`ToolEdit::tags`]: crate::ToolEdit::tags
//! [`Mount::separator`]: crate::Mount::separator
//! [`Mount::edit`]: crate::Mount::edit
//! [`ServerBuilder::mount`]: crate::ServerBuilder::mount
//! [`ServerBuilder::mount_separator`]: crate::ServerBuilder::mount_separator
//! [`ServerBuilder::only_tags`]: crate::ServerBuilder::only_tags
//! [`ServerBuilder::exclude_tags`]: crate::ServerBuilder::exclude_tags
//!
//! ---
//!
//! Previous: [Middleware](super::middleware) · Next: [Inside your service](super::inside_your_service)

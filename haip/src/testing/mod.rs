//! Test your tools without sockets (feature `testing`): a server built from
//! a [`ServerBuilder`], called as a client would call it, over the real
//! session core and connection driver.
//!
//! [`TestServer`] runs each session exactly as a WebSocket connection does
//! (the same session, the same driver loop, the same call runner), over an
//! in-memory carrier instead of a socket, and talks to it with the real
//! [`haip::client`](crate::client). So params are validated against the
//! tool's schema, progress and log lines travel as `TOOL_UPDATE`s,
//! questions wait for the test to answer them, cancellation, timeouts,
//! panics and the one `TOOL_DONE` of every call behave as on the wire. A
//! test is a few lines and runs in milliseconds.
//!
//! Every wait is bounded by the test's limit (10 s unless
//! [`TestServer::timeout`] says otherwise): a tool that hangs fails the
//! test with [`TestError::Timeout`] instead of hanging it.
//!
//! ```
//! use haip::testing::TestServer;
//! use haip::{haip_tool, Context, ToolError};
//! use serde_json::json;
//!
//! /// Add two numbers.
//! #[haip_tool]
//! async fn add(a: f64, b: f64) -> f64 {
//!     a + b
//! }
//!
//! /// Ask before deleting.
//! #[haip_tool]
//! async fn delete(path: String, ctx: Context) -> Result<String, ToolError> {
//!     ctx.progress(10.0);
//!     if !ctx.confirm(format!("Delete {path}?")).await? {
//!         return Err(ToolError::execution("kept"));
//!     }
//!     ctx.info(format!("deleted {path}"));
//!     Ok(path)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = TestServer::new(
//!     haip::Server::builder().tool(add::tool()).tool(delete::tool()),
//! )?;
//!
//! // A call and its result.
//! assert_eq!(server.call("add", json!({"a": 1, "b": 2})).await?, json!(3.0));
//!
//! // Params are validated against the tool's schema, as on the wire.
//! let err = server.call("add", json!({"a": "one"})).await.unwrap_err();
//! assert_eq!(err.code(), Some("INVALID_PARAMS"));
//!
//! // A call that reports and asks: the test answers.
//! let mut call = server.start("delete", json!({"path": "a.txt"})).await?;
//! assert_eq!(call.progress().await?, 10.0);
//! let question = call.confirm(true).await?; // answers the ctx.confirm: yes
//! assert_eq!(question.message, "Delete a.txt?");
//! let done = call.done().await?;
//! done.assert_logged(haip::LogLevel::Info, "deleted a.txt");
//! assert_eq!(done.into_result()?, json!("a.txt"));
//!
//! // The advertised schemas, as a stable text to compare with a snapshot.
//! let schemas = server.schemas().await?;
//! assert!(schemas.contains("\"add\""));
//! # Ok(()) }
//! ```

mod call;
mod error;
mod memory;
mod snapshot;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

pub use call::{Finished, QuestionId, TestCall};
pub use error::TestError;

/// Who calls: an authenticated caller, as its token named it.
pub use crate::auth::Caller;
/// The client's types a test reads: re-exported from [`crate::client`].
pub use crate::client::{
    CallEvent, ClientOptions, LogLine, Outcome, Question, Response, ToolInfo, ToolSchema, Update,
};

use crate::client::{Client, ClientError};
use crate::session::Shared;
use crate::{Error, LogLevel, Server, ServerBuilder};
use memory::Wire;

/// How long a test waits for anything unless told otherwise.
const DEFAULT_LIMIT: Duration = Duration::from_secs(10);

/// A server with no listener, called in memory: each client is a session
/// on the real session core, run by the real connection driver. See the
/// [module docs](self).
///
/// Its own methods ([`call`](TestServer::call), [`start`](TestServer::start),
/// [`schemas`](TestServer::schemas), ...) use one session, opened at the
/// first of them; [`client`](TestServer::client) and
/// [`client_as`](TestServer::client_as) open more, for tests of several
/// sessions or callers. Dropping the server stops every session and call.
///
/// Build it inside a Tokio runtime (`#[tokio::test]`); a runtime whose
/// time is paused is not supported (the session's deadlines read the
/// system clock).
pub struct TestServer {
    shared: Arc<Shared>,
    limit: Duration,
    /// Who the default session's client is (`None`: as with authentication off).
    caller: Option<Caller>,
    default: tokio::sync::OnceCell<TestClient>,
    /// Every client's connection, for the checks at shutdown.
    wires: Mutex<Vec<Weak<Wire>>>,
}

impl TestServer {
    /// Builds the server; nothing listens. Fails as
    /// [`ServerBuilder::build`] does, and for what needs the network
    /// (sessions shared through Redis, imported MCP servers).
    ///
    /// The builder's authentication is not used: a test's client calls as
    /// nobody (as with authentication off), or as the caller it names
    /// ([`TestServer::as_caller`], [`TestServer::client_as`]).
    pub fn new(builder: ServerBuilder) -> Result<TestServer, Error> {
        TestServer::from_server(builder.build()?)
    }

    /// A built server, called in memory instead of started.
    pub fn from_server(server: Server) -> Result<TestServer, Error> {
        Ok(TestServer {
            shared: server.into_shared()?,
            limit: DEFAULT_LIMIT,
            caller: None,
            default: tokio::sync::OnceCell::new(),
            wires: Mutex::new(Vec::new()),
        })
    }

    /// Sets how long any wait of the test may last (default 10 s): a reply,
    /// an event, a call's end, the shutdown.
    pub fn timeout(mut self, limit: Duration) -> TestServer {
        self.limit = limit;
        self
    }

    /// Makes the server's own session that of `caller`, as if its token
    /// had named it: tools see it in [`Context::caller`](crate::Context::caller),
    /// and tools it lacks the scopes for are refused (`FORBIDDEN`).
    pub fn as_caller(mut self, caller: Caller) -> TestServer {
        self.caller = Some(caller);
        self
    }

    /// Opens another session, with the test client's defaults: it answers
    /// questions (`tool_input`), takes log lines of every level, and waits
    /// for answers' verdicts as long as the test's limit.
    pub async fn client(&self) -> Result<TestClient, TestError> {
        self.client_with(self.options(), None).await
    }

    /// Opens another session, as `caller`.
    pub async fn client_as(&self, caller: Caller) -> Result<TestClient, TestError> {
        self.client_with(self.options(), Some(caller)).await
    }

    /// Opens another session with these client options (a client that does
    /// not answer questions, say), as `caller` when given.
    pub async fn client_with(
        &self,
        options: ClientOptions,
        caller: Option<Caller>,
    ) -> Result<TestClient, TestError> {
        let wire = Arc::new(Wire::default());
        let (sink, stream) = memory::connect(&self.shared, caller, &wire);
        let opened = Client::over(sink, stream, "memory://haip", options);
        let client = match tokio::time::timeout(self.limit, opened).await {
            Ok(client) => client?,
            Err(_) => return Err(timeout("the server's HAI", self.limit)),
        };
        lock(&self.wires).push(Arc::downgrade(&wire));
        Ok(TestClient {
            client,
            wire,
            limit: self.limit,
        })
    }

    fn options(&self) -> ClientOptions {
        ClientOptions::new()
            .tool_input(true)
            .log_level(LogLevel::Debug)
            .answer_timeout(self.limit)
    }

    /// The server's own session's client, opened at first use.
    pub async fn default_client(&self) -> Result<&TestClient, TestError> {
        self.default
            .get_or_try_init(|| self.client_with(self.options(), self.caller.clone()))
            .await
    }

    /// Calls a tool and waits for its result ([`Value::Null`] when it
    /// returned nothing); any other end is the error, with its code
    /// ([`TestError::code`]).
    pub async fn call(&self, tool: &str, params: Value) -> Result<Value, TestError> {
        self.default_client().await?.call(tool, params).await
    }

    /// Calls a tool and deserialises its result into `T`.
    pub async fn call_typed<T: DeserializeOwned>(
        &self,
        tool: &str,
        params: impl Serialize,
    ) -> Result<T, TestError> {
        self.default_client().await?.call_typed(tool, params).await
    }

    /// Starts a call: read its progress, log lines and questions, answer,
    /// cancel, then wait for its end ([`TestCall`]).
    pub async fn start(&self, tool: &str, params: Value) -> Result<TestCall, TestError> {
        self.default_client().await?.start(tool, params).await
    }

    /// The tools the session lists (`TOOL_LIST`), in the server's order.
    pub async fn list_tools(&self) -> Result<Vec<ToolInfo>, TestError> {
        self.default_client().await?.list_tools().await
    }

    /// A tool's schemas as `TOOL_SCHEMA` gives them, in the server's
    /// default schema profile.
    pub async fn schema(&self, tool: &str) -> Result<ToolSchema, TestError> {
        self.default_client().await?.schema(tool).await
    }

    /// Every listed tool's advertised schemas, as pretty JSON with sorted
    /// keys: stable text for a snapshot test (`assert_eq!` with
    /// `include_str!`, or [`check_schemas_snapshot`](TestServer::check_schemas_snapshot)).
    /// See [`TestClient::schemas`].
    pub async fn schemas(&self) -> Result<String, TestError> {
        self.default_client().await?.schemas().await
    }

    /// Compares [`schemas`](TestServer::schemas) with the snapshot file at
    /// `path` (relative paths start at the crate's root, where `cargo test`
    /// runs a crate's tests): a change to a tool's signature, doc comments
    /// or attributes that changes what clients are shown fails the test
    /// with a [`TestError::Snapshot`] listing the lines that changed, until
    /// it is accepted. Run the test with `HAIP_UPDATE_SNAPSHOTS=1` to write
    /// the file (the first time, and to accept a change), then commit it.
    ///
    /// ```no_run
    /// # async fn demo(server: haip::testing::TestServer) -> Result<(), haip::testing::TestError> {
    /// // In a #[tokio::test]:
    /// server.check_schemas_snapshot("tests/schemas.json").await?;
    /// # Ok(()) }
    /// ```
    pub async fn check_schemas_snapshot(&self, path: impl AsRef<Path>) -> Result<(), TestError> {
        self.default_client()
            .await?
            .check_schemas_snapshot(path)
            .await
    }

    /// Shuts the server down as [`ServerHandle::shutdown`](crate::ServerHandle::shutdown)
    /// does (running calls are cancelled, each still gets its `TOOL_DONE`,
    /// sessions close), waits for it within the test's limit, then checks
    /// every client's connection: each call it sent got exactly one
    /// `TOOL_DONE` (on a connection the server closed: a client dropped
    /// first is owed nothing), `seq` ran from 1 without a gap, and nothing
    /// of a call came after its end. Broken rules are a [`TestError::Protocol`].
    ///
    /// A tool that ignores cancellation holds the shutdown until it is
    /// aborted, `cancel_grace` after (5 s unless
    /// [`Limits::cancel_grace`](crate::Limits::cancel_grace) says otherwise), as on a real server.
    pub async fn shutdown(self) -> Result<(), TestError> {
        self.shared.shutdown.cancel();
        let tasks = self.shared.runner.tasks().clone();
        tasks.close();
        if tokio::time::timeout(self.limit, tasks.wait())
            .await
            .is_err()
        {
            return Err(timeout("the end of every session and call", self.limit));
        }
        let wires: Vec<Arc<Wire>> = lock(&self.wires).iter().filter_map(Weak::upgrade).collect();
        let mut broken = Vec::new();
        for wire in wires {
            if tokio::time::timeout(self.limit, wire.wait_closed())
                .await
                .is_err()
            {
                return Err(timeout("the close of every connection", self.limit));
            }
            broken.extend(wire.violations());
            // A client that went first could not be sent its calls' ends.
            if wire.closed_by_server() {
                broken.extend(
                    wire.unfinished()
                        .into_iter()
                        .map(|id| format!("call {id} got no TOOL_DONE")),
                );
            }
        }
        if broken.is_empty() {
            Ok(())
        } else {
            Err(TestError::Protocol(broken))
        }
    }
}

impl std::fmt::Debug for TestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestServer")
            .field("tools", &self.shared.registry.snapshot().tools().len())
            .field("timeout", &self.limit)
            .field("caller", &self.caller)
            .finish_non_exhaustive()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // Sessions, parked ones and calls stop with the server.
        self.shared.shutdown.cancel();
    }
}

/// One session of a [`TestServer`], with a client on it. Cheap to clone;
/// the session stays open while a clone lives (and its server).
#[derive(Debug, Clone)]
pub struct TestClient {
    client: Client,
    wire: Arc<Wire>,
    limit: Duration,
}

impl TestClient {
    /// The session's id.
    pub fn session_id(&self) -> &str {
        self.client.session_id()
    }

    /// The real client on the session, for what this type does not wrap
    /// (its waits are not bounded by the test's limit).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Calls a tool and waits for its result: see [`TestServer::call`].
    pub async fn call(&self, tool: &str, params: Value) -> Result<Value, TestError> {
        self.start(tool, params).await?.result().await
    }

    /// Calls a tool and deserialises its result into `T`.
    pub async fn call_typed<T: DeserializeOwned>(
        &self,
        tool: &str,
        params: impl Serialize,
    ) -> Result<T, TestError> {
        let params = serde_json::to_value(params)
            .map_err(|e| TestError::Client(ClientError::Protocol(e.to_string())))?;
        let result = self.call(tool, params).await?;
        serde_json::from_value(result)
            .map_err(|e| TestError::Client(ClientError::Decode(e.to_string())))
    }

    /// Starts a call ([`TestCall`]).
    pub async fn start(&self, tool: &str, params: Value) -> Result<TestCall, TestError> {
        let call = self
            .bounded("the call sent", self.client.call(tool, params))
            .await?;
        Ok(TestCall::new(
            call,
            self.client.clone(),
            self.limit,
            Arc::clone(&self.wire),
        ))
    }

    /// The tools the session lists (`TOOL_LIST`).
    pub async fn list_tools(&self) -> Result<Vec<ToolInfo>, TestError> {
        self.bounded("TOOL_LIST", self.client.list_tools()).await
    }

    /// A tool's schemas in the session's schema profile (`TOOL_SCHEMA`).
    pub async fn schema(&self, tool: &str) -> Result<ToolSchema, TestError> {
        self.bounded("TOOL_SCHEMA", self.client.schema(tool)).await
    }

    /// A tool's schemas in `profile` (`"full"`, `"portable"`,
    /// `"openai-strict"`, `"anthropic-strict"`).
    pub async fn schema_in(&self, tool: &str, profile: &str) -> Result<ToolSchema, TestError> {
        self.bounded("TOOL_SCHEMA", self.client.schema_in(tool, Some(profile)))
            .await
    }

    /// What every listed tool advertises, as the session's `TOOL_LIST`
    /// and `TOOL_SCHEMA` replies give it: an object keyed by tool name,
    /// each with its `description`, its `input_schema`, and its
    /// `output_schema`, `title` and `annotations` when it has them. Pretty
    /// JSON with sorted keys and a final newline, so that it compares
    /// equal to a committed snapshot until a tool's advertised shape
    /// changes.
    pub async fn schemas(&self) -> Result<String, TestError> {
        self.schemas_of(None).await
    }

    /// [`TestClient::schemas`] in `profile`.
    pub async fn schemas_in(&self, profile: &str) -> Result<String, TestError> {
        self.schemas_of(Some(profile)).await
    }

    /// Compares [`schemas`](TestClient::schemas) with a snapshot file: see
    /// [`TestServer::check_schemas_snapshot`].
    pub async fn check_schemas_snapshot(&self, path: impl AsRef<Path>) -> Result<(), TestError> {
        let now = self.schemas().await?;
        snapshot::check(path.as_ref(), &now, snapshot::update_asked())
    }

    async fn schemas_of(&self, profile: Option<&str>) -> Result<String, TestError> {
        let mut all = Map::new();
        for tool in self.list_tools().await? {
            let schema = self
                .bounded("TOOL_SCHEMA", self.client.schema_in(&tool.name, profile))
                .await?;
            let mut entry = Map::new();
            entry.insert("description".into(), json!(tool.description));
            entry.insert("input_schema".into(), schema.input_schema);
            if let Some(output) = schema.output_schema {
                entry.insert("output_schema".into(), output);
            }
            if let Some(title) = schema.title {
                entry.insert("title".into(), json!(title));
            }
            let annotations = serde_json::to_value(&schema.annotations).unwrap_or_default();
            if annotations.as_object().is_some_and(|a| !a.is_empty()) {
                entry.insert("annotations".into(), annotations);
            }
            all.insert(tool.name, Value::Object(entry));
        }
        let mut text = serde_json::to_string_pretty(&sorted(Value::Object(all)))
            .map_err(|e| TestError::Client(ClientError::Protocol(e.to_string())))?;
        text.push('\n');
        Ok(text)
    }

    /// Every envelope the server sent on this session so far, in order (the
    /// last 10 000): the transcript to assert on what the client API does
    /// not show.
    pub fn envelopes(&self) -> Vec<Value> {
        self.wire.envelopes()
    }

    /// The rules of the protocol the server broke on this session so far
    /// (see [`TestServer::shutdown`]).
    pub fn check(&self) -> Result<(), TestError> {
        let broken = self.wire.violations();
        if broken.is_empty() {
            Ok(())
        } else {
            Err(TestError::Protocol(broken))
        }
    }

    async fn bounded<T>(
        &self,
        what: &str,
        request: impl Future<Output = Result<T, ClientError>>,
    ) -> Result<T, TestError> {
        match tokio::time::timeout(self.limit, request).await {
            Ok(reply) => Ok(reply?),
            Err(_) => Err(timeout(what, self.limit)),
        }
    }
}

fn timeout(what: &str, after: Duration) -> TestError {
    TestError::Timeout {
        what: what.to_owned(),
        after,
        waiting: None,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The value with every object's keys in order, whichever way `serde_json`
/// keeps maps.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

//! A HAIP client over WebSocket: discover tools, call them with a progress
//! stream, cancel them, and read the log lines and answer the questions of
//! tools that talk to people (docs/protocol.md §6.11). One connection carries many
//! concurrent calls.
//!
//! ```no_run
//! # async fn demo() -> Result<(), haip::client::ClientError> {
//! use haip::client::Client;
//! use serde_json::json;
//!
//! let client = Client::connect("ws://127.0.0.1:8080/haip").await?;
//! for tool in client.list_tools().await? {
//!     println!("{}: {}", tool.name, tool.description);
//! }
//! let mut call = client.call("process_file", json!({"filename": "a.txt", "operation": "read"})).await?;
//! while let Some(update) = call.next_update().await {
//!     println!("{:?}%", update.progress);
//! }
//! println!("{:?}", call.outcome().await?);
//! # Ok(()) }
//! ```
//!
//! # Tools that log and ask
//!
//! The client's `HAI` declares a `log_level` and, when asked to with
//! [`ClientOptions::tool_input`], `capabilities.tool_input`: tools may then
//! ask it questions. [`Call::next_event`] yields log lines and questions in
//! order, beside the progress updates; a question waits until it is answered
//! ([`Call::answer`], [`Call::decline`], [`Call::cancel_question`]):
//!
//! ```no_run
//! # async fn demo() -> Result<(), haip::client::ClientError> {
//! use haip::client::{CallEvent, Client, ClientOptions};
//! use serde_json::json;
//!
//! let options = ClientOptions::new().tool_input(true); // this code answers questions
//! let client = Client::connect_with("ws://127.0.0.1:8080/haip", options).await?;
//! let mut call = client.call("book_table", json!({"restaurant": "Luigi"})).await?;
//! while let Some(event) = call.next_event().await {
//!     match event {
//!         CallEvent::Log(line) => println!("[{}] {}", line.level, line.message),
//!         CallEvent::Question(question) => {
//!             println!("{}", question.message);
//!             for field in question.fields().map_err(|e| haip::client::ClientError::Protocol(e.to_string()))? {
//!                 println!("  {} ({})", field.name, field.kind.name());
//!             }
//!             call.answer(&question.request_id, json!({"party_size": 4, "time": "19:00"})).await?;
//!         }
//!         _ => {}
//!     }
//! }
//! println!("{:?}", call.outcome().await?);
//! # Ok(()) }
//! ```

mod connection;
mod question;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::oneshot;

/// The level of a tool's log line: the server's own type, re-exported here
/// for [`ClientOptions::log_level`] and [`LogLine::severity`].
pub use crate::LogLevel;
use crate::Violation;
use crate::protocol::Channel;
use crate::protocol::payload::{
    self, Hai, InputAction, Payload, ToolCall, ToolCancel, ToolListRequest, ToolOutcome,
    ToolSchemaRequest,
};
/// A tool's hints and icons: the protocol's types, as the server's
/// [`Tool`](crate::Tool) has them.
pub use crate::protocol::{Icon, IconTheme, ToolAnnotations};
use connection::{Connection, EventReader, Inbox, Waiter};
pub use question::{Choice, Field, FieldKind, InputError, Question, SchemaError};

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The URL is not a `ws://` or `wss://` URL the client can use.
    #[error("invalid URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The connection could not be opened.
    #[error("cannot connect to {url}: {reason}")]
    Connect {
        /// The URL.
        url: String,
        /// The underlying failure.
        reason: String,
    },
    /// The server refused the connection or request with an `ERROR`.
    #[error("server error {code}: {message}")]
    Server {
        /// The error code (e.g. `INVALID_TOKEN`, `TOOL_NOT_FOUND`).
        code: String,
        /// The server's message.
        message: String,
    },
    /// The connection closed before the answer arrived.
    #[error("the connection closed")]
    Closed,
    /// The server's answer did not have the expected shape.
    #[error("unexpected reply: {0}")]
    Protocol(String),
    /// A typed call's result could not be deserialised.
    #[error("the result does not match the expected type: {0}")]
    Decode(String),
    /// A typed call ended without a result.
    #[error("call ended {0}")]
    Call(Box<Outcome>),
    /// The server refused an answer to a question (`ERROR INVALID_PARAMS`):
    /// it does not fit the question's schema. The question stays open: it
    /// may be answered again.
    #[error("the answer does not fit the question: {}", violations_text(.violations, .message))]
    InvalidAnswer {
        /// The server's message.
        message: String,
        /// What is wrong, field by field (`detail.violations`): paths are
        /// JSON pointers into the answer.
        violations: Vec<Violation>,
    },
    /// The server has no such open question (`ERROR REQUEST_NOT_FOUND`): it
    /// was answered already, or its call ended.
    #[error("no open question {request_id} in call {call_id}")]
    QuestionNotFound {
        /// The call.
        call_id: String,
        /// The question.
        request_id: String,
    },
    /// The server did not reply in time.
    #[error("no reply within {} ms waiting for {what}", .after.as_millis())]
    Timeout {
        /// What the client waited for.
        what: String,
        /// How long it waited.
        after: Duration,
    },
}

/// `path: message; ...`, or `fallback` when there are none: how
/// [`ClientError::InvalidAnswer`] shows its violations.
fn violations_text(violations: &[Violation], fallback: &str) -> String {
    if violations.is_empty() {
        return fallback.to_owned();
    }
    let parts: Vec<String> = violations.iter().map(Violation::to_string).collect();
    parts.join("; ")
}

/// A tool as `TOOL_LIST` lists it.
///
/// ```no_run
/// # async fn demo(client: &haip::client::Client) -> Result<(), haip::client::ClientError> {
/// for tool in client.list_tools().await? {
///     let shown = tool.title.as_deref().unwrap_or(&tool.name);
///     let warning = if tool.annotations.declares_destructive() { " (destructive)" } else { "" };
///     println!("{shown}{warning}");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolInfo {
    /// Its name.
    pub name: String,
    /// Its description (empty when it has none).
    pub description: String,
    /// Its title, a name for people, when it has one (docs/protocol.md §6.13).
    pub title: Option<String>,
    /// The hints it declares (empty when none; MCP's defaults apply to the
    /// others).
    pub annotations: ToolAnnotations,
    /// Its icons.
    pub icons: Vec<Icon>,
}

/// A tool's schemas, as `TOOL_SCHEMA` returns them, with its title,
/// annotations and icons.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSchema {
    /// The tool's name.
    pub tool: String,
    /// The JSON Schema of its params.
    pub input_schema: Value,
    /// The JSON Schema of its result, if it declares one.
    pub output_schema: Option<Value>,
    /// Its title, when it has one.
    pub title: Option<String>,
    /// The hints it declares.
    pub annotations: ToolAnnotations,
    /// Its icons.
    pub icons: Vec<Icon>,
}

/// One `TOOL_UPDATE` of a call: its status, or its progress.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    /// `QUEUED`, `RUNNING` or `CANCELLING` (log lines and questions are
    /// [`CallEvent::Log`] and [`CallEvent::Question`]).
    pub status: String,
    /// Percent done, when the tool reported it.
    pub progress: Option<f64>,
    /// A partial result, when the tool sent one.
    pub partial: Option<Value>,
}

/// Something that happened during a call, in the order the server sent it
/// ([`Call::next_event`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CallEvent {
    /// Its status changed, or the tool reported progress.
    Update(Update),
    /// The tool logged a line.
    Log(LogLine),
    /// The tool asks a question; the call waits for the answer.
    Question(Question),
    /// The tool asked something the client cannot read (an
    /// `input_request` without a `request_id`, or a `WAITING_INPUT` without
    /// an `input_request`): it cannot be answered, and the call waits until
    /// it is cancelled or times out. Says what was wrong.
    UnreadableQuestion(String),
}

/// A log line of a tool (`TOOL_UPDATE` with `log`, docs/protocol.md §6.11).
#[derive(Debug, Clone, PartialEq)]
pub struct LogLine {
    /// The level as sent: `debug`, `info`, `notice`, `warning` or `error`
    /// (`info` when the server sent none).
    pub level: String,
    /// The text.
    pub message: String,
    /// Structured data beside the text, when the tool gave some.
    pub data: Option<Value>,
}

impl LogLine {
    /// The level, when it is one of HAIP's five (MCP's `critical`, `alert`
    /// and `emergency` count as [`LogLevel::Error`]).
    pub fn severity(&self) -> Option<LogLevel> {
        LogLevel::parse(&self.level)
    }
}

/// What a person did with a question: the `action` (and `content`) of a
/// `TOOL_INPUT` ([`Call::respond`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    /// `accept`: the answer, an object matching the question's schema.
    Accept(Value),
    /// `decline`: they chose not to answer.
    Decline,
    /// `cancel`: they dismissed the question without choosing.
    Cancel,
}

impl Response {
    /// Its `action`.
    pub fn action(&self) -> InputAction {
        match self {
            Response::Accept(_) => InputAction::Accept,
            Response::Decline => InputAction::Decline,
            Response::Cancel => InputAction::Cancel,
        }
    }
}

/// How a call ended (its `TOOL_DONE`).
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `OK`, with the result (`None` when the tool returned nothing).
    Ok(Option<Value>),
    /// `ERROR`.
    Error {
        /// The error code (`INVALID_PARAMS`, `TOOL_EXECUTION_ERROR`, ...).
        code: String,
        /// The human-readable message.
        message: String,
        /// Details (for `INVALID_PARAMS`: every violation with its path).
        details: Option<Value>,
    },
    /// `CANCELLED`, with the reason when one was given.
    Cancelled(Option<String>),
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Ok(_) => f.write_str("OK"),
            Outcome::Error { code, message, .. } => write!(f, "with {code}: {message}"),
            Outcome::Cancelled(Some(reason)) => write!(f, "cancelled: {reason}"),
            Outcome::Cancelled(None) => f.write_str("cancelled"),
        }
    }
}

impl From<ToolOutcome> for Outcome {
    /// A decoded `TOOL_DONE`'s outcome, as the client reports it.
    fn from(outcome: ToolOutcome) -> Outcome {
        match outcome {
            ToolOutcome::Ok(result) => Outcome::Ok(result),
            ToolOutcome::Error(failure) => Outcome::Error {
                code: failure.code.as_str().to_owned(),
                message: failure.message,
                details: failure.details,
            },
            ToolOutcome::Cancelled(reason) => Outcome::Cancelled(reason),
        }
    }
}

/// Connection settings.
///
/// The client's `HAI` carries `capabilities: {"log_level": "info"}` by
/// default: log lines at `info` and above reach it, and a tool's question
/// fails at once on the server (the tool decides what to return). Code that
/// answers questions ([`Call::next_event`], [`Call::answer`]) sets
/// [`ClientOptions::tool_input`]: the `HAI` then declares
/// `"tool_input": true`, and every question waits for an answer. (Declared
/// by a client that never answers, a question would wait until the call's
/// timeout, if it has one.)
///
/// ```
/// use haip::client::{ClientOptions, LogLevel};
///
/// let options = ClientOptions::new()
///     .token("secret")
///     .log_level(LogLevel::Debug)
///     .tool_input(true);
/// assert_eq!(options.token.as_deref(), Some("secret"));
/// ```
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// A bearer token, sent as `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Whether the `HAI` declares `capabilities.tool_input`: this client
    /// answers tools' questions (default `false`).
    pub tool_input: bool,
    /// The least severe log line wanted, `capabilities.log_level` (default
    /// [`LogLevel::Info`]).
    pub log_level: LogLevel,
    /// How long [`Call::answer`] (and the other replies to a question)
    /// waits for the server's verdict (default 30 s).
    pub answer_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            token: None,
            tool_input: false,
            log_level: LogLevel::Info,
            answer_timeout: Duration::from_secs(30),
        }
    }
}

impl ClientOptions {
    /// The defaults: no token, `tool_input` not declared, `info` logs,
    /// answers waited for 30 s.
    pub fn new() -> ClientOptions {
        ClientOptions::default()
    }

    /// Sets the bearer token.
    pub fn token(mut self, token: impl Into<String>) -> ClientOptions {
        self.token = Some(token.into());
        self
    }

    /// Sets whether the client declares that it answers tools' questions.
    pub fn tool_input(mut self, tool_input: bool) -> ClientOptions {
        self.tool_input = tool_input;
        self
    }

    /// Sets the least severe log line wanted.
    pub fn log_level(mut self, level: LogLevel) -> ClientOptions {
        self.log_level = level;
        self
    }

    /// Sets how long an answer waits for the server's verdict.
    pub fn answer_timeout(mut self, timeout: Duration) -> ClientOptions {
        self.answer_timeout = timeout;
        self
    }
}

/// A client on one WebSocket connection. Cheap to clone; clones share the
/// connection, which closes when the last clone is dropped.
#[derive(Clone)]
pub struct Client {
    conn: Arc<Connection>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("session", &self.conn.session_id())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to a HAIP server (`ws://host:port/haip`) and waits for its `HAI`.
    pub async fn connect(url: &str) -> Result<Client, ClientError> {
        Client::connect_with(url, ClientOptions::default()).await
    }

    /// [`Client::connect`] with options (a token, the capabilities to declare).
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<Client, ClientError> {
        Ok(Client {
            conn: Arc::new(Connection::open(url, options).await?),
        })
    }

    /// A client over an in-memory carrier of WebSocket messages instead of a
    /// socket (`haip::testing`): everything past the socket is the same.
    #[cfg(feature = "testing")]
    pub(crate) async fn over<Si, St, E>(
        sink: Si,
        stream: St,
        url: &str,
        options: ClientOptions,
    ) -> Result<Client, ClientError>
    where
        Si: futures_util::Sink<tokio_tungstenite::tungstenite::Message> + Unpin + Send + 'static,
        St: futures_util::Stream<Item = Result<tokio_tungstenite::tungstenite::Message, E>>
            + Unpin
            + Send
            + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        Ok(Client {
            conn: Arc::new(Connection::over(sink, stream, url, options).await?),
        })
    }

    /// The session id the server announced.
    pub fn session_id(&self) -> &str {
        self.conn.session_id()
    }

    /// The server's `HAI` payload (version, capabilities), as JSON.
    pub fn server_hai(&self) -> &Value {
        self.conn.hai()
    }

    /// The server's `HAI` payload, typed.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), haip::client::ClientError> {
    /// let client = haip::client::Client::connect("ws://127.0.0.1:8080/haip").await?;
    /// let binary = client.hai().capabilities.as_ref().and_then(|c| c.binary_frames);
    /// # Ok(()) }
    /// ```
    pub fn hai(&self) -> &Hai {
        self.conn.hai_typed()
    }

    /// The server's tools, in its order.
    pub async fn list_tools(&self) -> Result<Vec<ToolInfo>, ClientError> {
        let reply = self.conn.request(&ToolListRequest {}).await?;
        let list = payload::ToolList::from_payload(reply)
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok(list
            .tools
            .into_iter()
            .map(|t| ToolInfo {
                name: t.name,
                description: t.description,
                title: t.title,
                annotations: t.annotations,
                icons: t.icons,
            })
            .collect())
    }

    /// A tool's schemas, in the session's schema profile (the server's
    /// default unless the client's `HAI` chose one).
    pub async fn schema(&self, tool: &str) -> Result<ToolSchema, ClientError> {
        self.schema_in(tool, None).await
    }

    /// A tool's schemas in `profile` (docs/protocol.md §6.14): `"full"` for the
    /// schema params are validated against, `"portable"`, `"openai-strict"`
    /// or `"anthropic-strict"`; `None` for the session's.
    ///
    /// ```no_run
    /// # async fn demo(client: &haip::client::Client) -> Result<(), haip::client::ClientError> {
    /// let exact = client.schema_in("create_user", Some("full")).await?;
    /// println!("{}", exact.input_schema);
    /// # Ok(()) }
    /// ```
    pub async fn schema_in(
        &self,
        tool: &str,
        profile: Option<&str>,
    ) -> Result<ToolSchema, ClientError> {
        let request = ToolSchemaRequest {
            tool: tool.to_owned(),
            profile: profile.map(str::to_owned),
        };
        let reply = self.conn.request(&request).await?;
        let schema = payload::ToolSchema::from_payload(reply)
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok(ToolSchema {
            tool: schema.tool,
            input_schema: schema.input_schema,
            output_schema: schema.output_schema,
            title: schema.title,
            annotations: schema.annotations,
            icons: schema.icons,
        })
    }

    /// Starts a call; the returned [`Call`] yields its events and outcome.
    pub async fn call(&self, tool: &str, params: Value) -> Result<Call, ClientError> {
        let call_id = uuid::Uuid::new_v4().to_string();
        let inbox = Arc::new(Inbox::default());
        let (done_tx, done) = oneshot::channel();
        self.conn.register_call(
            &call_id,
            Waiter {
                inbox: Arc::clone(&inbox),
                done: done_tx,
            },
        );
        let request = ToolCall::new(call_id.clone(), tool, params);
        if let Err(e) = self.conn.send(Channel::User, &request).await {
            self.conn.forget_call(&call_id);
            return Err(e);
        }
        Ok(Call {
            call_id,
            events: EventReader::new(inbox),
            done,
            client: self.clone(),
        })
    }

    /// Calls a tool and deserialises its result into `T`.
    pub async fn call_typed<T: DeserializeOwned>(
        &self,
        tool: &str,
        params: impl Serialize,
    ) -> Result<T, ClientError> {
        let params =
            serde_json::to_value(params).map_err(|e| ClientError::Protocol(e.to_string()))?;
        match self.call(tool, params).await?.outcome().await? {
            Outcome::Ok(result) => serde_json::from_value(result.unwrap_or(Value::Null))
                .map_err(|e| ClientError::Decode(e.to_string())),
            other => Err(ClientError::Call(Box::new(other))),
        }
    }

    /// Asks the server to cancel a call.
    pub async fn cancel(&self, call_id: &str, reason: Option<&str>) -> Result<(), ClientError> {
        let request = ToolCancel {
            call_id: call_id.to_owned(),
            reason: reason.map(str::to_owned),
        };
        self.conn.send(Channel::User, &request).await
    }

    /// Replies to a question of a call (a `TOOL_INPUT`) and waits for the
    /// server's verdict, at most [`ClientOptions::answer_timeout`]. What
    /// [`Call::respond`] does, for a caller that holds the ids rather than
    /// the [`Call`] (another task, say).
    ///
    /// `Ok(())` once the call goes on (its `RUNNING` update);
    /// [`ClientError::InvalidAnswer`] when the answer does not fit the
    /// question (which stays open); [`ClientError::QuestionNotFound`] when
    /// there is no such open question; [`ClientError::Server`] for any other
    /// `ERROR` (`UNSUPPORTED_TYPE` from a server without the extension).
    pub async fn respond(
        &self,
        call_id: &str,
        request_id: &str,
        response: Response,
    ) -> Result<(), ClientError> {
        self.conn.respond(call_id, request_id, response).await
    }
}

/// One call in flight.
///
/// Read its events with [`Call::next_event`] (or only its updates with
/// [`Call::next_update`]), then its outcome with [`Call::outcome`].
#[derive(Debug)]
pub struct Call {
    call_id: String,
    events: EventReader,
    done: oneshot::Receiver<Result<Outcome, ClientError>>,
    client: Client,
}

impl Call {
    /// The call's id.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// The next event of the call (progress, a log line, a question), in
    /// the order the server sent them; `None` once the call has ended and
    /// every event was read. Then [`Call::outcome`] says how it ended.
    ///
    /// A question must be answered ([`Call::answer`], [`Call::decline`],
    /// [`Call::cancel_question`]): the tool waits for it, up to its own
    /// timeout. Events wait here until read; when the reader falls far
    /// behind, progress updates are dropped first (the last ones are kept),
    /// then everything but questions beyond 4096 unread events.
    ///
    /// There is no timeout here (a tool may run as long as it likes): wrap
    /// the call in `tokio::time::timeout` if needed. Cancel-safe: an event
    /// is never lost when the future is dropped.
    pub async fn next_event(&mut self) -> Option<CallEvent> {
        self.events.next().await
    }

    /// The next status or progress update, skipping log lines and
    /// questions; `None` once the call has ended.
    ///
    /// A caller that reads only updates never sees questions: a client that
    /// declared [`ClientOptions::tool_input`] should read
    /// [`Call::next_event`] instead, and answer them.
    pub async fn next_update(&mut self) -> Option<Update> {
        loop {
            match self.next_event().await? {
                CallEvent::Update(update) => return Some(update),
                _ => continue,
            }
        }
    }

    /// Answers a question with `content`, an object matching its schema
    /// (action `accept`), and waits for the server's verdict: see
    /// [`Call::respond`].
    ///
    /// ```no_run
    /// # async fn demo(call: haip::client::Call, question: haip::client::Question) -> Result<(), haip::client::ClientError> {
    /// use haip::client::ClientError;
    /// use serde_json::json;
    ///
    /// match call.answer(&question.request_id, json!({"party_size": 40})).await {
    ///     Ok(()) => {}
    ///     Err(ClientError::InvalidAnswer { violations, .. }) => {
    ///         for v in violations {
    ///             eprintln!("{}: {}", v.path, v.message); // the question is still open
    ///         }
    ///     }
    ///     Err(other) => return Err(other),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn answer(&self, request_id: &str, content: Value) -> Result<(), ClientError> {
        self.respond(request_id, Response::Accept(content)).await
    }

    /// Declines a question (action `decline`: the person chose not to
    /// answer); waits for the verdict as [`Call::respond`] does.
    pub async fn decline(&self, request_id: &str) -> Result<(), ClientError> {
        self.respond(request_id, Response::Decline).await
    }

    /// Dismisses a question (action `cancel`: closed without choosing);
    /// waits for the verdict as [`Call::respond`] does. The call itself goes
    /// on: to stop it, use [`Call::cancel`].
    pub async fn cancel_question(&self, request_id: &str) -> Result<(), ClientError> {
        self.respond(request_id, Response::Cancel).await
    }

    /// Replies to a question of this call (a `TOOL_INPUT` on `USER`) and
    /// waits for the server's verdict, at most
    /// [`ClientOptions::answer_timeout`] ([`ClientError::Timeout`]):
    ///
    /// * `Ok(())` once the server took the reply: the call goes on (the
    ///   `RUNNING` update it sends for that; the call's end alone is no
    ///   verdict, as the server sends that `RUNNING` before its
    ///   `TOOL_DONE`);
    /// * [`ClientError::InvalidAnswer`], with the violations, when the
    ///   content does not fit the question: it stays open, answer again;
    /// * [`ClientError::QuestionNotFound`] when the question is not open
    ///   (answered already, or the call ended or is being cancelled);
    /// * [`ClientError::Server`] for any other `ERROR` about the reply
    ///   (`UNSUPPORTED_TYPE` from a server without the extension).
    ///
    /// The verdict's `RUNNING` update is also an event of the call
    /// ([`Call::next_event`]).
    pub async fn respond(&self, request_id: &str, response: Response) -> Result<(), ClientError> {
        self.client
            .respond(&self.call_id, request_id, response)
            .await
    }

    /// Asks the server to cancel this call; its outcome follows as usual.
    pub async fn cancel(&self, reason: Option<&str>) -> Result<(), ClientError> {
        self.client.cancel(&self.call_id, reason).await
    }

    /// Waits for the call's `TOOL_DONE`, skipping any unread events. A
    /// question left unanswered keeps the call waiting (until it times out
    /// or is cancelled), so read the events first when the tool may ask.
    pub async fn outcome(self) -> Result<Outcome, ClientError> {
        let Call { events, done, .. } = self;
        // Unread events are dropped, and later ones are not queued.
        drop(events);
        done.await.unwrap_or(Err(ClientError::Closed))
    }
}

//! What a tool says to and asks of the person at the other end: log lines,
//! questions and their answers, sampling requests (docs/protocol.md §6.11).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::sync::oneshot;

use crate::content::Content;
use crate::schema::Form;

/// How severe a log line is (docs/protocol.md §6.11), least severe first. A client
/// gets the lines at or above the level it asked for (`info` by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// `debug`: detail for whoever debugs the tool.
    Debug,
    /// `info`: what the tool is doing.
    Info,
    /// `notice`: worth noticing.
    Notice,
    /// `warning`: something looks wrong, the call goes on.
    Warning,
    /// `error`: something failed.
    Error,
}

impl LogLevel {
    /// The wire name: `"debug"`, `"info"`, `"notice"`, `"warning"` or `"error"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
        }
    }

    /// Parses a wire name. MCP's `critical`, `alert` and `emergency` are
    /// `Error` here (the most severe level HAIP has).
    pub fn parse(name: &str) -> Option<LogLevel> {
        Some(match name {
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "notice" => LogLevel::Notice,
            "warning" => LogLevel::Warning,
            "error" | "critical" | "alert" | "emergency" => LogLevel::Error,
            _ => return None,
        })
    }
}

impl std::fmt::Display for LogLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One log line of a call, on its way to the client.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LogLine {
    pub(crate) level: LogLevel,
    pub(crate) message: String,
    pub(crate) data: Option<Value>,
}

impl LogLine {
    /// The `log` object of a `TOOL_UPDATE`: `{level, message, data?}`.
    pub(crate) fn to_json(&self) -> Value {
        let mut log = Map::new();
        log.insert("level".into(), self.level.as_str().into());
        log.insert("message".into(), self.message.clone().into());
        if let Some(data) = &self.data {
            log.insert("data".into(), data.clone());
        }
        Value::Object(log)
    }

    /// The line saying that `n` lines were dropped.
    pub(crate) fn dropped(n: u64) -> LogLine {
        LogLine {
            level: LogLevel::Warning,
            message: format!(
                "{n} log line(s) dropped: the tool logged faster than they could be sent"
            ),
            data: None,
        }
    }
}

/// A question on its way to the session that runs the call.
pub(crate) struct PendingQuestion {
    pub(crate) message: String,
    pub(crate) form: Arc<Form>,
    pub(crate) reply: oneshot::Sender<Result<Answer<Value>, AskError>>,
}

/// What the person did with a question ([`Context::ask`](crate::Context::ask)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<T> {
    /// They answered: the form, filled in and checked.
    Accepted(T),
    /// They chose not to answer.
    Declined,
    /// They dismissed the question without choosing.
    Cancelled,
}

impl<T> Answer<T> {
    /// The answer, if they gave one.
    pub fn accepted(self) -> Option<T> {
        match self {
            Answer::Accepted(value) => Some(value),
            Answer::Declined | Answer::Cancelled => None,
        }
    }
}

/// Why a question got no answer ([`Context::ask`](crate::Context::ask)).
///
/// Like any error, it converts into a [`ToolError`](crate::ToolError)
/// (`TOOL_EXECUTION_ERROR` with this text), so `?` in a tool returning
/// `Result<_, ToolError>` ends the call with a message that says what
/// happened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AskError {
    /// The client cannot answer questions: a HAIP client whose `HAI` did not
    /// declare `capabilities.tool_input`, an MCP client without elicitation,
    /// or a context with no client at all.
    #[error("the client cannot answer questions (it did not declare that it can)")]
    Unsupported,
    /// The answer type is not a form (see [`Context::ask`](crate::Context::ask)); says why.
    #[error("{0}")]
    InvalidForm(String),
    /// The call was cancelled or timed out, or its client went away, while
    /// the question waited.
    #[error("the call ended before the question was answered")]
    CallEnded,
    /// The client's answer does not fit the form (MCP clients; a HAIP
    /// client is asked again instead).
    #[error("the answer does not fit the question's form: {0}")]
    InvalidAnswer(String),
    /// The question could not be put to the client.
    #[error("the question could not be asked: {0}")]
    Failed(String),
}

/// Who a sampling message is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The user.
    User,
    /// The model.
    Assistant,
}

impl Role {
    /// `"user"` or `"assistant"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// A request for the client's language model ([`Context::sample`](crate::Context::sample)).
///
/// ```
/// use haip::{Content, Role, SampleRequest};
///
/// let request = SampleRequest::new("What is in this picture?")
///     .message(Role::User, Content::image(&[0u8; 4], "image/png"))
///     .system("Answer in one sentence.")
///     .max_tokens(100);
/// assert_eq!(request.messages().len(), 2);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct SampleRequest {
    messages: Vec<(Role, Content)>,
    max_tokens: u32,
    system: Option<String>,
    temperature: Option<f32>,
    /// The request's key among the call's questions.
    pub(crate) key: Option<String>,
}

impl SampleRequest {
    /// One user message with `prompt`, at most 1000 tokens back.
    pub fn new(prompt: impl Into<String>) -> SampleRequest {
        SampleRequest {
            messages: vec![(Role::User, Content::text(prompt))],
            max_tokens: 1000,
            system: None,
            temperature: None,
            key: None,
        }
    }

    /// Adds a message (text, image or audio) after the others.
    pub fn message(mut self, role: Role, content: Content) -> SampleRequest {
        self.messages.push((role, content));
        self
    }

    /// The most tokens the model may produce.
    pub fn max_tokens(mut self, max_tokens: u32) -> SampleRequest {
        self.max_tokens = max_tokens;
        self
    }

    /// A system prompt.
    pub fn system(mut self, prompt: impl Into<String>) -> SampleRequest {
        self.system = Some(prompt.into());
        self
    }

    /// The sampling temperature.
    pub fn temperature(mut self, temperature: f32) -> SampleRequest {
        self.temperature = Some(temperature);
        self
    }

    /// Names the request among the call's questions (default:
    /// `sample-<n>`); see [`Ask::key`](crate::Ask::key).
    pub fn key(mut self, key: impl Into<String>) -> SampleRequest {
        self.key = Some(key.into());
        self
    }

    /// The messages, in order.
    pub fn messages(&self) -> &[(Role, Content)] {
        &self.messages
    }

    /// The MCP `sampling/createMessage` params (camelCase, as on the wire).
    #[cfg(feature = "mcp")]
    pub(crate) fn to_mcp_params(&self) -> Value {
        let messages: Vec<Value> = self
            .messages
            .iter()
            .map(|(role, content)| serde_json::json!({"role": role.as_str(), "content": content}))
            .collect();
        let mut params = Map::new();
        params.insert("messages".into(), Value::Array(messages));
        params.insert("maxTokens".into(), self.max_tokens.into());
        if let Some(system) = &self.system {
            params.insert("systemPrompt".into(), system.clone().into());
        }
        if let Some(t) = self.temperature {
            params.insert("temperature".into(), f64::from(t).into());
        }
        Value::Object(params)
    }
}

/// The model's reply to a [`SampleRequest`].
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    /// Who it is from (the model: `Assistant`).
    pub role: Role,
    /// What it said.
    pub content: Vec<Content>,
    /// The model that answered, as the client names it.
    pub model: String,
    /// Why it stopped (`endTurn`, `maxTokens`, ...), if the client said.
    pub stop_reason: Option<String>,
}

impl Sampled {
    /// The text of the reply (its first text block).
    pub fn text(&self) -> Option<&str> {
        self.content.iter().find_map(Content::as_text)
    }
}

/// Why a [`SampleRequest`] got no reply.
///
/// Like any error, it converts into a [`ToolError`](crate::ToolError)
/// (`TOOL_EXECUTION_ERROR` with this text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SampleError {
    /// The client offers no sampling (HAIP clients never do).
    #[error("the client offers no sampling")]
    Unsupported,
    /// The call was cancelled or timed out, or its client went away, first.
    #[error("the call ended before the model replied")]
    CallEnded,
    /// The client refused or failed; says why.
    #[error("sampling failed: {0}")]
    Failed(String),
}

/// A boxed future of a [`Peer`].
pub(crate) type PeerFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The client of a call that answers its questions and sampling requests
/// itself, rather than through a HAIP session (the MCP export's client).
pub(crate) trait Peer: Send + Sync {
    /// Puts a question with this form to the client; `key` names it among
    /// the call's questions.
    fn ask(
        &self,
        key: String,
        message: String,
        form: Arc<Form>,
    ) -> PeerFuture<Result<Answer<Value>, AskError>>;
    /// Asks the client's model.
    fn sample(
        &self,
        key: String,
        request: SampleRequest,
    ) -> PeerFuture<Result<Sampled, SampleError>>;
    /// Asks for the client's roots.
    fn roots(&self, key: String) -> PeerFuture<Result<Vec<Root>, RootsError>>;
}

/// A root the client shares: a directory or a file tree it lets tools work
/// in (MCP `roots/list`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Root {
    /// Where it is (`file:///home/ada/project`).
    pub uri: String,
    /// What the client calls it, if anything.
    pub name: Option<String>,
}

impl Root {
    /// A root at `uri`.
    pub fn new(uri: impl Into<String>, name: Option<String>) -> Root {
        Root {
            uri: uri.into(),
            name,
        }
    }
}

/// Why the client's roots could not be had ([`Context::roots`](crate::Context::roots)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RootsError {
    /// The client shares no roots (HAIP clients never do; MCP clients that
    /// did not declare `roots`).
    #[error("the client shares no roots")]
    Unsupported,
    /// The call was cancelled or timed out, or its client went away, first.
    #[error("the call ended before the client listed its roots")]
    CallEnded,
    /// The client refused or failed; says why.
    #[error("listing the client's roots failed: {0}")]
    Failed(String),
}

//! A HAIP client over WebSocket: discover tools, call them with a progress
//! stream, cancel them. One connection carries many concurrent calls.
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

mod connection;

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::protocol::Channel;
use crate::protocol::payload::{
    self, Hai, Payload, ToolCall, ToolCancel, ToolListRequest, ToolOutcome, ToolSchemaRequest,
};
use connection::{Connection, Waiter};

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
}

/// A tool as `TOOL_LIST` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolInfo {
    /// Its name.
    pub name: String,
    /// Its description (empty when it has none).
    pub description: String,
}

/// A tool's schemas, as `TOOL_SCHEMA` returns them.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSchema {
    /// The tool's name.
    pub tool: String,
    /// The JSON Schema of its params.
    pub input_schema: Value,
    /// The JSON Schema of its result, if it declares one.
    pub output_schema: Option<Value>,
}

/// One `TOOL_UPDATE` of a call.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    /// `QUEUED`, `RUNNING` or `CANCELLING`.
    pub status: String,
    /// Percent done, when the tool reported it.
    pub progress: Option<f64>,
    /// A partial result, when the tool sent one.
    pub partial: Option<Value>,
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
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// A bearer token, sent as `Authorization: Bearer <token>`.
    pub token: Option<String>,
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

    /// [`Client::connect`] with options (a token).
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<Client, ClientError> {
        Ok(Client {
            conn: Arc::new(Connection::open(url, options).await?),
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
            })
            .collect())
    }

    /// A tool's schemas.
    pub async fn schema(&self, tool: &str) -> Result<ToolSchema, ClientError> {
        let request = ToolSchemaRequest {
            tool: tool.to_owned(),
        };
        let reply = self.conn.request(&request).await?;
        let schema = payload::ToolSchema::from_payload(reply)
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok(ToolSchema {
            tool: schema.tool,
            input_schema: schema.input_schema,
            output_schema: schema.output_schema,
        })
    }

    /// Starts a call; the returned [`Call`] yields its updates and outcome.
    pub async fn call(&self, tool: &str, params: Value) -> Result<Call, ClientError> {
        let call_id = uuid::Uuid::new_v4().to_string();
        let (updates_tx, updates) = mpsc::channel(UPDATE_BUFFER);
        let (done_tx, done) = oneshot::channel();
        self.conn.register_call(
            &call_id,
            Waiter {
                updates: updates_tx,
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
            updates,
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
}

/// Updates buffered per call; the server already merges progress under
/// back-pressure, and a slow reader here loses intermediate updates only.
const UPDATE_BUFFER: usize = 64;

/// One call in flight.
#[derive(Debug)]
pub struct Call {
    call_id: String,
    updates: mpsc::Receiver<Update>,
    done: oneshot::Receiver<Result<Outcome, ClientError>>,
    client: Client,
}

impl Call {
    /// The call's id.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// The next `TOOL_UPDATE`, or `None` once the call has ended.
    pub async fn next_update(&mut self) -> Option<Update> {
        self.updates.recv().await
    }

    /// Asks the server to cancel this call; its outcome follows as usual.
    pub async fn cancel(&self, reason: Option<&str>) -> Result<(), ClientError> {
        self.client.cancel(&self.call_id, reason).await
    }

    /// Waits for the call's `TOOL_DONE` (skipping any unread updates).
    pub async fn outcome(self) -> Result<Outcome, ClientError> {
        self.done.await.unwrap_or(Err(ClientError::Closed))
    }
}

//! The MCP client of a call, answering its questions: in an MCP session (or
//! over stdio) it is asked directly (`elicitation/create` in form mode,
//! `sampling/createMessage`, `roots/list`: `export/session.rs`, with what
//! this module reads of the answers); without a session, it is sent
//! them as requests under their keys ([`Keyed`]): on the call's next round
//! (`mrtr.rs`) or in its task (`tasks.rs`). The answers are read the same
//! way wherever they come from.

// Sampling and roots are deprecated upstream (SEP-2577), and still what
// today's MCP clients speak.
#![allow(deprecated)]

use std::future::Future;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use crate::content::Content;
use crate::context::{
    Answer, AskError, Peer, PeerFuture, Role, Root, RootsError, SampleError, SampleRequest, Sampled,
};
use crate::schema::Form;
use crate::session::tasks::TaskStoreError;

/// The `elicitation/create` params of a question (form mode).
pub(crate) fn elicitation_params(message: &str, form: &Form) -> Value {
    json!({"mode": "form", "message": message, "requestedSchema": form.schema()})
}

/// An elicitation result (`{action, content?}`) as the answer to a question
/// with `form`: accepted content is checked against the form.
pub(crate) fn answer_of(result: &Value, form: &Form) -> Result<Answer<Value>, AskError> {
    let Some(action) = result.get("action").and_then(Value::as_str) else {
        return Err(AskError::InvalidAnswer(
            "an elicitation result needs an `action`".into(),
        ));
    };
    match action {
        "accept" => {
            let content = result
                .get("content")
                .cloned()
                .unwrap_or_else(|| Value::Object(Map::new()));
            let found = form.check(&content, 5);
            if found.is_empty() {
                return Ok(Answer::Accepted(content));
            }
            let why: Vec<String> = found
                .listed
                .iter()
                .map(|v| {
                    let path = if v.path.is_empty() {
                        "(answer)"
                    } else {
                        &v.path
                    };
                    format!("{path}: {}", v.message)
                })
                .collect();
            Err(AskError::InvalidAnswer(why.join("; ")))
        }
        "decline" => Ok(Answer::Declined),
        // `cancel`, and whatever a newer client may send.
        _ => Ok(Answer::Cancelled),
    }
}

/// A `sampling/createMessage` result as a [`Sampled`].
pub(crate) fn sampled_of(reply: &Value) -> Result<Sampled, SampleError> {
    // `{role, content, model, stopReason}` on the wire (some clients nest
    // the message).
    let message = reply.get("message").unwrap_or(reply);
    let content = match message.get("content") {
        Some(Value::Array(blocks)) => blocks.clone(),
        Some(block) => vec![block.clone()],
        None => return Err(SampleError::Failed("a reply with no content".into())),
    };
    Ok(Sampled {
        role: if message["role"] == "user" {
            Role::User
        } else {
            Role::Assistant
        },
        content: content
            .into_iter()
            .filter_map(|b| serde_json::from_value::<Content>(b).ok())
            .collect(),
        model: reply
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        stop_reason: reply
            .get("stopReason")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

/// A `roots/list` result as the roots.
pub(crate) fn roots_of(reply: &Value) -> Result<Vec<Root>, RootsError> {
    let Some(list) = reply.get("roots").and_then(Value::as_array) else {
        return Err(RootsError::Failed("a reply with no `roots` list".into()));
    };
    Ok(list
        .iter()
        .filter_map(|r| {
            let uri = r.get("uri")?.as_str()?.to_owned();
            let name = r.get("name").and_then(Value::as_str).map(str::to_owned);
            Some(Root::new(uri, name))
        })
        .collect())
}

/// Why a question of a call on a stateless `/mcp` request of a client of a
/// revision before 2026-07-28 is refused: the client may well have declared
/// that it answers (elicitation, sampling, roots), but it takes a server's
/// requests only in an MCP session, and this server gave it none
/// (`mcp_sessions(false)`). Says so, and what to change.
pub(crate) fn no_session(what: &str) -> String {
    format!(
        "this MCP client has no session for {what}: it speaks an MCP revision before \
         2026-07-28, which takes the server's requests only in an MCP session, and this \
         server serves /mcp without sessions (ServerBuilder::mcp_sessions(false) or \
         HAIP_MCP_SESSIONS=0); turn them on (mcp_sessions(true), the default) for it to \
         be asked"
    )
}

/// The client of a stateless request that cannot go another round (a
/// client of a revision before 2026-07-28, `mcp_sessions(false)`): every
/// question is refused at once, with [`no_session`]'s reason (`Failed`: the
/// client may have declared that it answers).
pub(crate) struct NoSession;

impl Peer for NoSession {
    fn ask(
        &self,
        _: String,
        _: String,
        _: Arc<Form>,
    ) -> PeerFuture<Result<Answer<Value>, AskError>> {
        Box::pin(async { Err(AskError::Failed(no_session("its questions (elicitation)"))) })
    }

    fn sample(&self, _: String, _: SampleRequest) -> PeerFuture<Result<Sampled, SampleError>> {
        Box::pin(async { Err(SampleError::Failed(no_session("sampling requests"))) })
    }

    fn roots(&self, _: String) -> PeerFuture<Result<Vec<Root>, RootsError>> {
        Box::pin(async { Err(RootsError::Failed(no_session("a request for its roots"))) })
    }
}

/// The client of an MCP call as the call's tool sees it: its questions
/// counted (`haip_questions_total`) and traced (`tool.question`) as a HAIP
/// session's are. A question is asked when its answer is not there at once
/// (a round's retry that brings the answer counts only the answer).
pub(crate) struct Counted {
    pub(crate) inner: Arc<dyn Peer>,
    pub(crate) stats: Arc<crate::session::Shared>,
    pub(crate) trace: crate::otel::TraceLink,
}

impl Peer for Counted {
    fn ask(
        &self,
        key: String,
        message: String,
        form: Arc<Form>,
    ) -> PeerFuture<Result<Answer<Value>, AskError>> {
        let mut asking = self.inner.ask(key, message, form);
        let shared = Arc::clone(&self.stats);
        let trace = self.trace.clone();
        let mut span = None;
        Box::pin(std::future::poll_fn(move |cx| {
            let poll = asking.as_mut().poll(cx);
            match &poll {
                std::task::Poll::Pending if span.is_none() => {
                    shared.stats.question("asked");
                    span = Some(trace.question());
                }
                std::task::Poll::Pending => {}
                std::task::Poll::Ready(answer) => {
                    let outcome = match answer {
                        Ok(Answer::Accepted(_)) => "answered",
                        Ok(Answer::Declined) => "declined",
                        Ok(Answer::Cancelled) => "cancelled",
                        // Asked, and never answered (the call ended, the
                        // client went away).
                        Err(_) if span.is_some() => "cancelled",
                        Err(_) => return poll,
                    };
                    shared.stats.question(outcome);
                    if let Some(span) = span.take() {
                        span.end(outcome);
                    }
                }
            }
            poll
        }))
    }

    fn sample(
        &self,
        key: String,
        request: SampleRequest,
    ) -> PeerFuture<Result<Sampled, SampleError>> {
        self.inner.sample(key, request)
    }

    fn roots(&self, key: String) -> PeerFuture<Result<Vec<Root>, RootsError>> {
        self.inner.roots(key)
    }
}

/// Which questions the client can be sent (its declared capabilities).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Can {
    pub(crate) elicit: bool,
    pub(crate) sample: bool,
    pub(crate) roots: bool,
}

/// A future that never completes: the tool waits for the next round.
fn next_round<T>() -> impl Future<Output = T> + Send {
    std::future::pending()
}

/// How a question was taken.
pub(crate) enum Taken {
    /// Answered at once (by the client's earlier round).
    Now(Value),
    /// Waiting for the client's next round: the call will be stopped.
    NextRound,
    /// Waiting for an answer to come (a task's `tasks/update`).
    Later(oneshot::Receiver<Value>),
}

/// Why a question cannot be put to a [`Keyed`] client (or was never
/// answered); its text is the reason the tool's `Failed` error gives.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TakeError {
    /// The task the question would belong to has ended.
    #[error("the task has ended")]
    Ended,
    /// The task already has `max` questions open.
    #[error("a task may have at most {max} questions open at once")]
    TooManyOpen {
        /// The most a task may have open at once.
        max: usize,
    },
    /// A question with this key is open already.
    #[error("a question with key {0:?} is already open in this task")]
    AlreadyOpen(String),
    /// The task store did not take the question.
    #[error("the question could not be recorded: {0}")]
    NotRecorded(TaskStoreError),
    /// The question was taken, and the task went away before its answer.
    #[error("the task was cancelled")]
    Cancelled,
}

/// The client of a call that has no MCP session to be asked in, and takes
/// its questions as requests (`{method, params}`) under the questions'
/// keys: by rounds (`mrtr.rs`), or in a task (`tasks.rs`).
/// Its [`Peer`] is the same either way: a question of a kind the client did
/// not declare is noted and `Unsupported`; any other is asked until an
/// answer reads.
pub(crate) trait Keyed: Send + Sync + 'static {
    /// Which questions the client can be sent.
    fn can(&self) -> Can;

    /// Notes a question refused for want of a capability the client did
    /// not declare (for `-32021`).
    fn refuse(&self, what: impl FnOnce(&mut Can));

    /// Takes question `key` (`request`: `{method, params}`); `Err` says why
    /// it cannot be asked.
    fn take(
        &self,
        key: &str,
        request: Value,
    ) -> impl Future<Output = Result<Taken, TakeError>> + Send;

    /// After an answer to question `key` that does not fit: whether the
    /// question waits for the next round (asked again there) rather than
    /// being taken again now.
    fn misfit(&self, key: &str, request: &Value) -> bool;
}

/// Asks `request` under `key` until an answer `read` accepts.
async fn ask_until<T>(
    peer: &impl Keyed,
    key: &str,
    request: Value,
    read: impl Fn(&Value) -> Option<T>,
) -> Result<T, TakeError> {
    loop {
        let answer = match peer.take(key, request.clone()).await? {
            Taken::Now(answer) => answer,
            Taken::NextRound => return next_round().await,
            Taken::Later(rx) => rx.await.map_err(|_| TakeError::Cancelled)?,
        };
        if let Some(read) = read(&answer) {
            return Ok(read);
        }
        // An answer that does not fit: asked again.
        if peer.misfit(key, &request) {
            return next_round().await;
        }
    }
}

/// A kind of question a client can be sent: its method, the capability
/// that lets it be sent, and the errors of its [`Peer`] method.
struct Kind<E> {
    method: &'static str,
    declared: fn(&mut Can) -> &mut bool,
    unsupported: E,
    failed: fn(String) -> E,
}

const ELICIT: Kind<AskError> = Kind {
    method: "elicitation/create",
    declared: |can| &mut can.elicit,
    unsupported: AskError::Unsupported,
    failed: AskError::Failed,
};

const SAMPLE: Kind<SampleError> = Kind {
    method: "sampling/createMessage",
    declared: |can| &mut can.sample,
    unsupported: SampleError::Unsupported,
    failed: SampleError::Failed,
};

const ROOTS: Kind<RootsError> = Kind {
    method: "roots/list",
    declared: |can| &mut can.roots,
    unsupported: RootsError::Unsupported,
    failed: RootsError::Failed,
};

/// Puts a question of `kind` with `params` to a [`Keyed`] client, if it
/// declared the kind (else the refusal is noted): the answer `read`
/// accepts, or why there is none.
fn put<T: Send, E: Send + 'static>(
    peer: &Arc<impl Keyed>,
    kind: Kind<E>,
    key: String,
    params: Value,
    read: impl Fn(&Value) -> Option<T> + Send + 'static,
) -> PeerFuture<Result<T, E>> {
    let peer = Arc::clone(peer);
    Box::pin(async move {
        if !*(kind.declared)(&mut peer.can()) {
            peer.refuse(|can| *(kind.declared)(can) = true);
            return Err(kind.unsupported);
        }
        let request = json!({"method": kind.method, "params": params});
        ask_until(&*peer, &key, request, read)
            .await
            .map_err(|e| (kind.failed)(e.to_string()))
    })
}

impl<P: Keyed> Peer for Arc<P> {
    fn ask(
        &self,
        key: String,
        message: String,
        form: Arc<Form>,
    ) -> PeerFuture<Result<Answer<Value>, AskError>> {
        let params = elicitation_params(&message, &form);
        put(self, ELICIT, key, params, move |answer| {
            answer_of(answer, &form).ok()
        })
    }

    fn sample(
        &self,
        key: String,
        request: SampleRequest,
    ) -> PeerFuture<Result<Sampled, SampleError>> {
        put(self, SAMPLE, key, request.to_mcp_params(), |reply| {
            sampled_of(reply).ok()
        })
    }

    fn roots(&self, key: String) -> PeerFuture<Result<Vec<Root>, RootsError>> {
        put(self, ROOTS, key, json!({}), |reply| roots_of(reply).ok())
    }
}

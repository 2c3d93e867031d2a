//! How a call of an MCP session reaches its client (`session.rs`): its
//! notifications and the server's requests (elicitation, sampling, roots)
//! go on the call's own stream, and the answers come back matched by id.

use std::sync::Arc;

use crate::mcp::model::{
    LoggingMessageNotificationParam, ProgressNotificationParam, ProtocolVersion, check_elicitation,
    check_sampling,
};
use serde_json::{Value, json};

use super::McpSession;
use crate::context::{
    Answer, AskError, Peer, PeerFuture, Root, RootsError, SampleError, SampleRequest, Sampled,
};
use crate::mcp::export::direct::notification;
use crate::mcp::export::events::Stream;
use crate::mcp::export::request::{ClientLink, Sent};
use crate::mcp::peer::{answer_of, elicitation_params, roots_of, sampled_of};
use crate::schema::Form;

/// How a call of a session reaches its client: on its request's stream.
pub(super) struct SessionLink {
    pub(super) session: Arc<McpSession>,
    pub(super) stream: Arc<Stream>,
}

impl ClientLink for SessionLink {
    fn progress(&self, note: ProgressNotificationParam) -> Sent<'_> {
        let message = notification("notifications/progress", &note);
        Box::pin(async move {
            self.stream.send(message, false).await;
        })
    }

    fn log(&self, note: LoggingMessageNotificationParam) -> Sent<'_> {
        let message = notification("notifications/message", &note);
        Box::pin(async move {
            self.stream.send(message, false).await;
        })
    }

    fn peer(&self, _stateless: bool) -> Arc<dyn Peer> {
        Arc::new(Asker {
            session: Arc::clone(&self.session),
            stream: Arc::clone(&self.stream),
        })
    }

    fn session_version(&self) -> Option<ProtocolVersion> {
        Some(self.session.version.clone())
    }
}

/// The client of a session's call, asked directly on the call's stream. A
/// client that did not declare what it is asked for gets `Unsupported`.
struct Asker {
    session: Arc<McpSession>,
    stream: Arc<Stream>,
}

impl Peer for Asker {
    fn ask(
        &self,
        _key: String,
        message: String,
        form: Arc<Form>,
    ) -> PeerFuture<Result<Answer<Value>, AskError>> {
        let session = Arc::clone(&self.session);
        let stream = Arc::clone(&self.stream);
        Box::pin(async move {
            // Form mode: declared as such, or by an `elicitation` that names no mode.
            let forms = session
                .capabilities
                .elicitation
                .as_ref()
                .is_some_and(|e| e.form.is_some() || e.url.is_none());
            if !forms {
                return Err(AskError::Unsupported);
            }
            let params = elicitation_params(&message, &form);
            if let Err(e) = check_elicitation(&params) {
                return Err(AskError::InvalidForm(format!(
                    "not an MCP elicitation form: {e}"
                )));
            }
            let reply = session
                .ask_client(&stream, "elicitation/create", params)
                .await
                .map_err(AskError::Failed)?;
            answer_of(&reply, &form)
        })
    }

    fn sample(
        &self,
        _key: String,
        request: SampleRequest,
    ) -> PeerFuture<Result<Sampled, SampleError>> {
        let session = Arc::clone(&self.session);
        let stream = Arc::clone(&self.stream);
        Box::pin(async move {
            if session.capabilities.sampling.is_none() {
                return Err(SampleError::Unsupported);
            }
            let params = request.to_mcp_params();
            if let Err(e) = check_sampling(&params) {
                return Err(SampleError::Failed(format!("invalid request: {e}")));
            }
            let reply = session
                .ask_client(&stream, "sampling/createMessage", params)
                .await
                .map_err(SampleError::Failed)?;
            sampled_of(&reply)
        })
    }

    fn roots(&self, _key: String) -> PeerFuture<Result<Vec<Root>, RootsError>> {
        let session = Arc::clone(&self.session);
        let stream = Arc::clone(&self.stream);
        Box::pin(async move {
            if session.capabilities.roots.is_none() {
                return Err(RootsError::Unsupported);
            }
            let reply = session
                .ask_client(&stream, "roots/list", json!({}))
                .await
                .map_err(RootsError::Failed)?;
            roots_of(&reply)
        })
    }
}

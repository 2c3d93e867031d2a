//! Upstream delivery (docs/protocol.md §15.4): the envelopes of a POST body go to one
//! open stream session of the caller's subject. The body is decoded envelope
//! by envelope as it arrives and handed to the session as the session takes
//! it (an envelope over `max_message_bytes` is reported, `MESSAGE_TOO_LARGE`,
//! and skipped), within the limits of docs/protocol.md §18.1: a declared length over
//! `max_body_bytes` is refused at once (`413`), the bytes of all bodies being
//! read share `max_inflight_body_bytes` (`503`), and a body must arrive within
//! `body_read_timeout` and at 1 KiB/s or better after its first 10 s (`408`).

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use crate::transport::body::RequestBody;
use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::access::{authenticate, subject_of, unauthorized};
use super::body::{Reader, Refused, Stopped};
use super::hub::Hub;
use super::reply::{Body, error_response, is_true_header, json_response};
use crate::auth::query_param;
use crate::transport::body::Splitter;
use crate::transport::frame::{Batch, Element, Unit};

/// Handles an upstream POST: `200 {"status":"ok"}` once its envelopes have
/// been handled (not when the tools they call finish).
pub(super) async fn upstream(req: Request<RequestBody>, hub: &Arc<Hub>) -> Response<Body> {
    let subject = match authenticate(hub, &req).await {
        Ok(caller) => subject_of(caller.as_ref()),
        Err(e) => return unauthorized(hub, &e),
    };
    let config = &hub.config;
    let binary = is_true_header(&req, "x-haip-binary");
    let header_session = req
        .headers()
        .get("x-haip-session")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let query_session = query_param(req.uri().query(), "session");
    let (parts, body) = req.into_parts();
    let reader = match Reader::start(
        &parts.headers,
        body,
        &hub.bodies,
        hub.config.body_read_timeout,
        config.max_body_bytes,
    ) {
        Ok(reader) => reader,
        Err(Refused::BadLength) => {
            return closing(error_response(
                StatusCode::BAD_REQUEST,
                "Content-Length is not a number",
                "BAD_REQUEST",
            ));
        }
        Err(Refused::Stopped(stopped)) => return stopped_response(stopped, hub),
    };

    // The first envelope may name the target session: read up to it.
    let mut envelopes = Envelopes {
        reader,
        splitter: Splitter::default(),
        ready: Vec::new(),
        ended: false,
        binary,
    };
    while envelopes.ready.is_empty() && !envelopes.ended {
        if let Err(stopped) = envelopes.read().await {
            return stopped_response(stopped, hub);
        }
    }
    let envelope_session = envelopes.ready.first().and_then(|t| envelope_session(t));
    let candidates = [
        envelope_session.as_deref(),
        header_session.as_deref(),
        query_session.as_deref(),
    ];
    let target = match target(hub, subject.as_deref(), &candidates).await {
        Ok(target) => target,
        // The rest of the body was not read: the connection cannot be reused.
        Err(response) if envelopes.ended => return response,
        Err(response) => return closing(response),
    };
    if envelopes.ready.is_empty() && envelopes.ended {
        return ok();
    }
    let sink = match target {
        Target::Here(target) => match Batch::open(&target).await {
            Some((envelopes, done)) => Sink::Here(envelopes, done),
            None => return gone(),
        },
        Target::There(link) => Sink::There(link),
    };
    deliver(envelopes, sink, hub).await
}

/// The envelopes of an upstream POST body, as they arrive.
struct Envelopes {
    reader: Reader,
    splitter: Splitter,
    /// Envelopes read and not handed over yet.
    ready: Vec<String>,
    /// The body has been read to its end.
    ended: bool,
    /// Binary bodies have no consumer (no application hook): read, dropped.
    binary: bool,
}

impl Envelopes {
    /// Reads one more chunk of the body, its envelopes to `ready`.
    async fn read(&mut self) -> Result<(), Stopped> {
        match self.reader.chunk().await? {
            Some(_) if self.binary => {}
            Some(data) => self.splitter.push(&data, &mut self.ready),
            None => {
                self.ended = true;
                if !self.binary {
                    std::mem::take(&mut self.splitter).finish(&mut self.ready);
                }
            }
        }
        Ok(())
    }
}

/// The session the envelopes go to: the first of `candidates` open here
/// for `subject`, else its only one here, else one on another instance;
/// else the answer saying why there is none.
async fn target(
    hub: &Hub,
    subject: Option<&str>,
    candidates: &[Option<&str>; 3],
) -> Result<Target, Response<Body>> {
    if let Some(target) = hub
        .sessions
        .target(subject, candidates.iter().copied().flatten())
    {
        return Ok(Target::Here(target));
    }
    let local = || hub.sessions.count_of(subject);
    match hub.cluster.elsewhere(subject, candidates, local).await {
        Ok(Some(link)) => Ok(Target::There(link)),
        Ok(None) => Err(error_response(
            StatusCode::NOT_FOUND,
            "Session not found",
            "SESSION_NOT_FOUND",
        )),
        Err(refused) => Err(unavailable(refused.reason())),
    }
}

/// Hands the envelopes to `sink` as they arrive, each held to the same size
/// as any other message; answers once they have all been handled.
async fn deliver(mut envelopes: Envelopes, mut sink: Sink, hub: &Hub) -> Response<Body> {
    let max_message = hub.config.session.max_message_bytes;
    loop {
        for text in envelopes.ready.drain(..) {
            let element = if text.len() > max_message {
                Element::TooLarge
            } else {
                Element::Envelope(text)
            };
            let waited = Instant::now();
            if !sink.send(element).await {
                return gone();
            }
            envelopes.reader.paused += waited.elapsed();
        }
        if envelopes.ended {
            break;
        }
        // What was handed over stays handled; the rest is refused.
        if let Err(stopped) = envelopes.read().await {
            return stopped_response(stopped, hub);
        }
    }
    sink.finish().await
}

/// Where an upstream POST goes.
enum Target {
    /// A stream session on this instance.
    Here(mpsc::Sender<Unit>),
    /// One on another instance, through this link (feature `redis`).
    There(crate::session::link::Link),
}

/// Where the envelopes of an upstream POST are handed, as they arrive.
enum Sink {
    Here(mpsc::Sender<Element>, oneshot::Receiver<()>),
    There(crate::session::link::Link),
}

impl Sink {
    /// Hands one element over; false once the session has gone.
    async fn send(&mut self, element: Element) -> bool {
        use crate::session::link::LinkMessage;
        match self {
            Sink::Here(envelopes, _) => envelopes.send(element).await.is_ok(),
            Sink::There(link) => {
                let message = match element {
                    Element::Envelope(text) => LinkMessage::Text(Bytes::from(text)),
                    Element::TooLarge => LinkMessage::TooLarge,
                };
                link.send(message).await
            }
        }
    }

    /// The answer, once every envelope has been handled (by the session
    /// here, or as the instance holding it answered).
    async fn finish(self) -> Response<Body> {
        use crate::session::link::LinkMessage;
        match self {
            Sink::Here(envelopes, done) => {
                drop(envelopes);
                if done.await.is_err() {
                    return gone();
                }
                ok()
            }
            Sink::There(mut link) => {
                if !link.send(LinkMessage::Done(0)).await {
                    return unavailable(crate::session::ResumeRefused::Unreachable.reason());
                }
                loop {
                    match link.inbound.recv().await {
                        Some(LinkMessage::Done(200)) => return ok(),
                        Some(LinkMessage::Done(_)) => return gone(),
                        Some(LinkMessage::Close { .. }) | None => {
                            return unavailable(
                                "the instance holding the session stopped answering",
                            );
                        }
                        Some(_) => {}
                    }
                }
            }
        }
    }
}

/// `503`: the session may be on another instance, which cannot be reached.
fn unavailable(reason: &'static str) -> Response<Body> {
    let mut response = error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!("Cannot reach the other instances: {reason}"),
        "SERVICE_UNAVAILABLE",
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

fn ok() -> Response<Body> {
    json_response(StatusCode::OK, &json!({ "status": "ok" }))
}

fn gone() -> Response<Body> {
    error_response(
        StatusCode::NOT_FOUND,
        "Session not found",
        "SESSION_NOT_FOUND",
    )
}

/// `Connection: close`: the rest of the request will not be read.
fn closing(mut response: Response<Body>) -> Response<Body> {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

fn too_large() -> Response<Body> {
    closing(error_response(
        StatusCode::PAYLOAD_TOO_LARGE,
        "Request body too large",
        "MESSAGE_TOO_LARGE",
    ))
}

fn busy() -> Response<Body> {
    let mut response = closing(error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        "Too many request bodies in flight; retry shortly",
        "SERVICE_UNAVAILABLE",
    ));
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

fn stopped_response(stopped: Stopped, hub: &Hub) -> Response<Body> {
    match stopped {
        Stopped::Timeout => {
            hub.shared.stats.closed_body_timeout.fetch_add(1, Relaxed);
            closing(error_response(
                StatusCode::REQUEST_TIMEOUT,
                "Request body did not arrive in time",
                "REQUEST_TIMEOUT",
            ))
        }
        Stopped::TooLarge => too_large(),
        Stopped::Busy => busy(),
        Stopped::Broken => closing(error_response(
            StatusCode::BAD_REQUEST,
            "Request body could not be read",
            "BAD_REQUEST",
        )),
    }
}

/// The envelope `session` of an upstream element, unless it is a resumption
/// `HAI` (docs/protocol.md §15.4 rule 1).
fn envelope_session(text: &str) -> Option<String> {
    let value: Value = serde_json::from_str(text).ok()?;
    let resumption = value["type"] == "HAI" && value["payload"].get("last_rx_seq").is_some();
    (!resumption)
        .then(|| value["session"].as_str().map(str::to_owned))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resumption_hai_does_not_name_the_target() {
        assert_eq!(
            envelope_session(r#"{"type":"PING","session":"s","payload":{}}"#).as_deref(),
            Some("s")
        );
        assert_eq!(
            envelope_session(r#"{"type":"HAI","session":"s","payload":{"last_rx_seq":"3"}}"#),
            None
        );
        assert_eq!(envelope_session("not json"), None);
    }
}

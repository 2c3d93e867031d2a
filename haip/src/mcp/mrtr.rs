//! Questions without sessions: MCP 2026-07-28's multi round-trip requests
//! (SEP-2322) for calls of stateless `/mcp`.
//!
//! A call that asks ends its round with the questions it waits for: the
//! answer is `resultType: "input_required"` with `inputRequests` (keyed by
//! the questions' keys) and a `requestState`. The client retries the call
//! with `inputResponses` and that state, and the tool **runs again from the
//! start**: each question it asks finds its answer by key, at once, and the
//! tool goes on (the rule a tool author needs is on `Context::ask`). So the
//! server keeps nothing between rounds, and any instance sharing the
//! signing key takes the retry.
//!
//! `requestState` holds the answers of earlier rounds and a digest of each
//! question they answer (an answer is used only for the same question),
//! bound to the tool, a digest of the call's arguments and the caller; it is
//! signed (HMAC-SHA-256, the server's key), carries nothing of the server's
//! in clear, and expires. A state that fails verification, has expired or
//! belongs to another call is refused (`-32602`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::mcp::model::InputRequests;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use super::peer::Can;
use super::peer::{Keyed, TakeError, Taken};

mod seal;

use self::seal::{Seal, Unsealed};

/// The server's side of rounds: the key `requestState` is signed with, and
/// how long a state lives.
pub(crate) struct Rounds {
    seal: Seal,
    ttl: Duration,
}

impl std::fmt::Debug for Rounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rounds")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// Why a retry's `requestState` is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadState(pub(crate) String);

/// What a `requestState` carries.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct State {
    /// The tool.
    tool: String,
    /// A digest of the call's arguments.
    args: String,
    /// The answers so far, by question key.
    answers: Map<String, Value>,
    /// A digest of each answered question, by key.
    asked: BTreeMap<String, String>,
}

impl Rounds {
    /// With `key` (at least 32 bytes) to sign states, which live for `ttl`.
    pub(crate) fn new(key: &[u8], ttl: Duration) -> Result<Rounds, String> {
        let seal = Seal::new(key)?;
        Ok(Rounds { seal, ttl })
    }

    /// The answers a retry brings: those its `requestState` holds (checked:
    /// signed by this server's key, not expired, for this tool, arguments
    /// and caller), then its `inputResponses` over them.
    pub(crate) fn answers(
        &self,
        tool: &str,
        arguments: &Value,
        subject: Option<&str>,
        request_state: Option<&str>,
        input_responses: Option<Map<String, Value>>,
    ) -> Result<Answers, BadState> {
        let mut answers = Answers::default();
        if let Some(sealed) = request_state {
            let opened = self
                .seal
                .open(sealed, subject.unwrap_or_default().as_bytes())
                .map_err(|e| match e {
                    Unsealed::Expired => {
                        BadState("requestState has expired: start the call again without it".into())
                    }
                    Unsealed::Invalid => BadState(
                        "requestState failed verification (tampered with, or not this server's)"
                            .into(),
                    ),
                })?;
            let state: State = serde_json::from_slice(&opened)
                .map_err(|_| BadState("requestState is not one this server wrote".into()))?;
            if state.tool != tool || state.args != digest_args(arguments) {
                return Err(BadState(
                    "requestState belongs to another call (another tool or other arguments)".into(),
                ));
            }
            for (key, answer) in state.answers {
                let asked = state.asked.get(&key).cloned();
                answers.given.insert(key, (answer, asked));
            }
        }
        for (key, answer) in input_responses.unwrap_or_default() {
            answers.given.insert(key, (answer, None));
        }
        Ok(answers)
    }

    /// The `requestState` for the next round of a call: the answers used so
    /// far (of questions asked on this run), signed.
    fn seal(&self, tool: &str, arguments: &Value, subject: Option<&str>, round: &Round) -> String {
        let mut answers = Map::new();
        let mut asked = BTreeMap::new();
        for (key, (answer, digest)) in &round.used {
            answers.insert(key.clone(), answer.clone());
            asked.insert(key.clone(), digest.clone());
        }
        let state = State {
            tool: tool.to_owned(),
            args: digest_args(arguments),
            answers,
            asked,
        };
        // A `State` is plain JSON: it always serializes.
        let payload = serde_json::to_vec(&state).unwrap_or_default();
        self.seal
            .seal(&payload, subject.unwrap_or_default().as_bytes(), self.ttl)
    }
}

/// A retry's answers, by question key: each with the digest of the question
/// it answered on an earlier round (none for one just given).
#[derive(Debug, Default)]
pub(crate) struct Answers {
    given: BTreeMap<String, (Value, Option<String>)>,
}

/// One round of a call: the answers it may use, and the questions it asked
/// that have none.
#[derive(Debug, Default)]
struct Round {
    answers: BTreeMap<String, (Value, Option<String>)>,
    /// Answers used on this run, with their question's digest.
    used: BTreeMap<String, (Value, String)>,
    /// Questions without an answer: `{method, params}` by key.
    pending: BTreeMap<String, Value>,
    /// The round has ended: what the stopping tool asks now is not sent.
    closed: bool,
}

/// The client of a call on stateless `/mcp` that takes questions by rounds.
pub(crate) struct RoundPeer {
    can: Can,
    round: Mutex<Round>,
    /// Told when a question without an answer is asked.
    asked: Notify,
    /// The kinds of question refused because the client did not declare
    /// them: a call that fails after one is answered `-32021`, naming them.
    refused: Mutex<Can>,
}

impl RoundPeer {
    pub(crate) fn new(can: Can, answers: Answers) -> Arc<RoundPeer> {
        Arc::new(RoundPeer {
            can,
            round: Mutex::new(Round {
                answers: answers.given,
                ..Round::default()
            }),
            asked: Notify::new(),
            refused: Mutex::new(Can::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Round> {
        self.round.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Completes once the call has asked a question without an answer.
    pub(crate) async fn waiting(&self) {
        self.asked.notified().await;
    }

    /// The capabilities the call's refused questions needed, if any.
    pub(crate) fn refused(&self) -> Option<crate::mcp::model::ClientCapabilities> {
        let refused = *self.refused.lock().unwrap_or_else(|e| e.into_inner());
        if !(refused.elicit || refused.sample || refused.roots) {
            return None;
        }
        let mut caps = crate::mcp::model::ClientCapabilities::default();
        if refused.elicit {
            caps.elicitation = Some(Default::default());
        }
        if refused.sample {
            caps.sampling = Some(Default::default());
        }
        if refused.roots {
            caps.roots = Some(Default::default());
        }
        Some(caps)
    }

    /// How many questions wait for an answer.
    pub(crate) fn pending(&self) -> usize {
        self.lock().pending.len()
    }

    /// Ends the round: the questions asked so far are the ones sent; the
    /// tool, being stopped, may ask more, which go nowhere.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
    }

    /// Ends the round: the questions that wait, and the state to retry with.
    pub(crate) fn input_required(
        &self,
        rounds: &Rounds,
        tool: &str,
        arguments: &Value,
        subject: Option<&str>,
    ) -> (InputRequests, String) {
        let round = self.lock();
        let mut requests = InputRequests::new();
        for (key, request) in &round.pending {
            // Built from the same params the SDK reads back: they parse.
            if let Ok(request) = serde_json::from_value(request.clone()) {
                requests.insert(key.clone(), request);
            }
        }
        let state = rounds.seal(tool, arguments, subject, &round);
        (requests, state)
    }

    /// The answer to question `key` (asked as `request`), if this round has
    /// one for this very question; else the question waits for the next
    /// round, and so does the tool.
    pub(crate) fn answer(&self, key: &str, request: Value) -> Option<Value> {
        let digest = digest_question(&request);
        let mut round = self.lock();
        let found = round.answers.get(key).and_then(|(answer, asked)| {
            // An answer of an earlier round is for the question it answered.
            asked
                .as_ref()
                .is_none_or(|a| *a == digest)
                .then(|| answer.clone())
        });
        match found {
            Some(answer) => {
                round.used.insert(key.to_owned(), (answer.clone(), digest));
                Some(answer)
            }
            None if round.closed => None,
            None => {
                round.pending.insert(key.to_owned(), request);
                drop(round);
                self.asked.notify_one();
                None
            }
        }
    }

    /// Asks again: an answer that did not fit goes, and the question waits.
    pub(crate) fn reask(&self, key: &str, request: Value) {
        let mut round = self.lock();
        if round.closed {
            return;
        }
        round.used.remove(key);
        round.answers.remove(key);
        round.pending.insert(key.to_owned(), request);
        drop(round);
        self.asked.notify_one();
    }
}

impl Keyed for RoundPeer {
    fn can(&self) -> Can {
        self.can
    }

    fn refuse(&self, what: impl FnOnce(&mut Can)) {
        what(&mut self.refused.lock().unwrap_or_else(|e| e.into_inner()));
    }

    async fn take(&self, key: &str, request: Value) -> Result<Taken, TakeError> {
        Ok(self
            .answer(key, request)
            .map_or(Taken::NextRound, Taken::Now))
    }

    fn misfit(&self, key: &str, request: &Value) -> bool {
        self.reask(key, request.clone());
        true
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A digest of the call's arguments (their JSON, keys in order).
fn digest_args(arguments: &Value) -> String {
    hex(&Sha256::digest(arguments.to_string().as_bytes()))
}

/// A short digest of a question (its method and params).
fn digest_question(request: &Value) -> String {
    hex(&Sha256::digest(request.to_string().as_bytes())[..12])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rounds() -> Rounds {
        Rounds::new(&[7u8; 32], Duration::from_secs(600)).unwrap()
    }

    fn all() -> Can {
        Can {
            elicit: true,
            sample: true,
            roots: true,
        }
    }

    #[test]
    fn short_keys_are_refused() {
        assert!(Rounds::new(b"short", Duration::from_secs(1)).is_err());
    }

    #[test]
    fn states_round_trip_and_bind_to_the_call_and_caller() {
        let rounds = rounds();
        let args = json!({"restaurant": "Luigi"});
        let peer = RoundPeer::new(all(), Answers::default());
        let question = json!({"method": "elicitation/create", "params": {"message": "n?"}});
        assert!(peer.answer("ask-1", question.clone()).is_none());
        assert_eq!(peer.pending(), 1);
        let (requests, state) = peer.input_required(&rounds, "book", &args, Some("ada"));
        assert!(requests.is_empty() || requests.contains_key("ask-1"));

        // The retry: the answer given now, with the state.
        let mut given = Map::new();
        given.insert(
            "ask-1".into(),
            json!({"action": "accept", "content": {"n": 2}}),
        );
        let answers = rounds
            .answers("book", &args, Some("ada"), Some(&state), Some(given))
            .unwrap();
        let peer = RoundPeer::new(all(), answers);
        assert_eq!(
            peer.answer("ask-1", question.clone()),
            Some(json!({"action": "accept", "content": {"n": 2}}))
        );
        // The next round's state carries it, for the same question only.
        let other = json!({"method": "elicitation/create", "params": {"message": "when?"}});
        assert!(peer.answer("ask-2", other.clone()).is_none());
        let (_, state) = peer.input_required(&rounds, "book", &args, Some("ada"));
        let answers = rounds
            .answers("book", &args, Some("ada"), Some(&state), None)
            .unwrap();
        let peer = RoundPeer::new(all(), answers);
        assert!(peer.answer("ask-1", question).is_some());
        let changed = json!({"method": "elicitation/create", "params": {"message": "n now?"}});
        let peer2 = RoundPeer::new(
            all(),
            rounds
                .answers("book", &args, Some("ada"), Some(&state), None)
                .unwrap(),
        );
        assert!(
            peer2.answer("ask-1", changed).is_none(),
            "another question under the same key is asked again"
        );

        // Another caller, tool or arguments: refused.
        assert!(
            rounds
                .answers("book", &args, Some("bob"), Some(&state), None)
                .is_err()
        );
        assert!(
            rounds
                .answers("other", &args, Some("ada"), Some(&state), None)
                .is_err()
        );
        let moved = json!({"restaurant": "Chez"});
        let err = rounds
            .answers("book", &moved, Some("ada"), Some(&state), None)
            .unwrap_err();
        assert!(err.0.contains("another call"), "{err:?}");
        // Tampered with, or another server's.
        let tampered = format!("{state}x");
        assert!(
            rounds
                .answers("book", &args, Some("ada"), Some(&tampered), None)
                .is_err()
        );
        let other = Rounds::new(&[8u8; 32], Duration::from_secs(600)).unwrap();
        assert!(
            other
                .answers("book", &args, Some("ada"), Some(&state), None)
                .is_err()
        );
    }

    #[test]
    fn expired_states_are_refused() {
        let rounds = Rounds::new(&[7u8; 32], Duration::from_millis(1)).unwrap();
        let peer = RoundPeer::new(all(), Answers::default());
        peer.answer("k", json!({"method": "roots/list", "params": {}}));
        let (_, state) = peer.input_required(&rounds, "t", &json!({}), None);
        std::thread::sleep(Duration::from_millis(20));
        let err = rounds
            .answers("t", &json!({}), None, Some(&state), None)
            .unwrap_err();
        assert!(err.0.contains("expired"), "{err:?}");
    }

    #[test]
    fn the_state_carries_no_answer_of_a_question_not_asked_on_this_run() {
        let rounds = rounds();
        let mut given = Map::new();
        given.insert("junk".into(), json!("x".repeat(100)));
        let answers = rounds
            .answers("t", &json!({}), None, None, Some(given))
            .unwrap();
        let peer = RoundPeer::new(all(), answers);
        peer.answer("k", json!({"method": "roots/list", "params": {}}));
        let (_, state) = peer.input_required(&rounds, "t", &json!({}), None);
        assert!(state.len() < 300, "{state}");
    }
}

//! One chaos client: keeps one session and makes calls of every kind on it,
//! several at once, drops its connection now and then and resumes, follows
//! its session to another instance when its instance dies, and writes
//! everything it sends and receives to its history file.
//!
//! Resumption (docs/protocol.md §11.3): a fresh connection, then a `HAI` naming the
//! old session with `last_rx_seq` = the highest contiguous `seq` received
//! (after a drop the client chose, sometimes a little less, so that the
//! replay repeats envelopes the checker compares byte for byte). The
//! client numbers what it sends (`seq`); the confirming `HAI`'s
//! `last_rx_seq` says what the server took, and calls, cancels and answers
//! sent after that are sent again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::wire::{Incoming, Link, Recorder, Rng, Transport, hash};

/// Calls a client keeps outstanding at most.
const MAX_OUTSTANDING: usize = 4;
/// How long a client waits for the answer to a resuming `HAI`.
const RESUME_ANSWER: Duration = Duration::from_secs(20);
/// How long a client keeps trying to resume its session after a failure
/// that may pass (Redis down, the holding instance not answering, another
/// instance restoring it).
const RESUME_PERSIST: Duration = Duration::from_secs(15);

/// An instance as the clients see it.
#[derive(Debug, Clone)]
pub(crate) struct Instance {
    pub(crate) id: String,
    pub(crate) addr: String,
    pub(crate) up: bool,
}

/// What the orchestrator shares with the clients.
pub(crate) struct Shared {
    pub(crate) start: Instant,
    pub(crate) instances: Mutex<Vec<Instance>>,
    /// No new calls (and no more chaos drops) from here.
    pub(crate) calls_until: Instant,
    /// Clients give up waiting for outstanding calls here.
    pub(crate) drain_until: Instant,
}

impl Shared {
    pub(crate) fn ms(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1000.0
    }

    fn instances(&self) -> Vec<Instance> {
        self.instances
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Quick,
    Slow,
    Cancelled,
    Asking,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Quick => "quick",
            Kind::Slow => "slow",
            Kind::Cancelled => "cancelled",
            Kind::Asking => "asking",
        }
    }
}

struct Call {
    kind: Kind,
    /// The `seq` of the latest `TOOL_CALL` sent for it.
    call_seq: u64,
    tool: &'static str,
    params: Value,
    cancel_seq: Option<u64>,
    /// The question answered, and the `seq` of the answer.
    answered: Option<(String, u64)>,
}

/// Why a connection is being replaced.
#[derive(Clone, Copy)]
enum Cause {
    /// The client dropped it (chaos).
    Chaos,
    /// It ended under the client.
    Lost,
}

pub(crate) struct Client {
    id: usize,
    transport: Transport,
    rng: Rng,
    rec: Recorder,
    shared: Arc<Shared>,
    session: String,
    /// The highest `seq` received in order on `session`.
    last_seq: u64,
    /// The highest `seq` ever received on `session`, whatever a resumption
    /// claimed since: a `HAI` of the session at or below it is a replay of
    /// an earlier resumption's confirmation, not the answer to this one.
    highest_seq: u64,
    /// The `seq` of the last envelope sent on `session`.
    out_seq: u64,
    instance: String,
    link: Option<Link>,
    conn_no: u64,
    /// The highest `seq` received on the current connection's fresh session.
    last_seq_seen_on_fresh: u64,
    calls: BTreeMap<String, Call>,
    next_call: u64,
}

impl Client {
    pub(crate) fn new(
        id: usize,
        transport: Transport,
        seed: u64,
        rec: Recorder,
        shared: Arc<Shared>,
    ) -> Client {
        Client {
            id,
            transport,
            rng: Rng::new(seed),
            rec,
            shared,
            session: String::new(),
            last_seq: 0,
            highest_seq: 0,
            out_seq: 0,
            instance: String::new(),
            link: None,
            conn_no: 0,
            last_seq_seen_on_fresh: 0,
            calls: BTreeMap::new(),
            next_call: 0,
        }
    }

    fn note(&mut self, t: &str, mut fields: Value) {
        fields["t"] = json!(t);
        fields["client"] = json!(self.id);
        fields["conn"] = json!(self.conn_no);
        fields["at_ms"] = json!(self.shared.ms());
        self.rec.write(&fields);
    }

    /// Runs until the drain ends or nothing is outstanding after the calls
    /// stopped.
    pub(crate) async fn run(mut self) {
        if let Err(e) = self.start_fresh().await {
            self.note("note", json!({"detail": format!("could not start: {e}")}));
            return;
        }
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        let mut next_call_at = Instant::now();
        let mut next_drop_at = Instant::now() + self.rng.ms(2000, 8000);
        loop {
            let now = Instant::now();
            if now >= self.shared.drain_until
                || (now >= self.shared.calls_until && self.calls.is_empty())
            {
                break;
            }
            let Some(link) = self.link.as_mut() else {
                self.reconnect(Cause::Lost).await;
                continue;
            };
            tokio::select! {
                incoming = link.rx.recv() => match incoming {
                    Some(Incoming::Text(text)) => self.handle(&text).await,
                    Some(Incoming::Closed(why)) => {
                        self.note("drop", json!({"cause": "closed", "detail": why}));
                        self.reconnect(Cause::Lost).await;
                    }
                    None => {
                        self.note("drop", json!({"cause": "closed", "detail": "reader gone"}));
                        self.reconnect(Cause::Lost).await;
                    }
                },
                _ = tick.tick() => {
                    self.rec.flush();
                    let now = Instant::now();
                    if now >= next_drop_at && now < self.shared.calls_until {
                        next_drop_at = now + self.rng.ms(3000, 10_000);
                        self.note("drop", json!({"cause": "chaos"}));
                        self.reconnect(Cause::Chaos).await;
                        continue;
                    }
                    while now >= next_call_at
                        && now < self.shared.calls_until
                        && self.calls.len() < MAX_OUTSTANDING
                        && self.link.is_some()
                    {
                        next_call_at = now + self.rng.ms(50, 500);
                        self.start_call().await;
                    }
                }
            }
        }
        let outstanding: Vec<&String> = self.calls.keys().collect();
        let outstanding = json!(outstanding);
        self.note(
            "end",
            json!({"session": self.session, "outstanding": outstanding}),
        );
        self.rec.flush();
    }

    /// Up instances, except `except` when another is up.
    fn pick(&mut self, except: Option<&str>) -> Option<Instance> {
        let all = self.shared.instances();
        let up: Vec<&Instance> = all.iter().filter(|i| i.up).collect();
        let others: Vec<&Instance> = up
            .iter()
            .copied()
            .filter(|i| Some(i.id.as_str()) != except)
            .collect();
        let from = if others.is_empty() { up } else { others };
        if from.is_empty() {
            return None;
        }
        let i = self.rng.below(from.len() as u64) as usize;
        Some(from[i].clone())
    }

    /// Opens a connection to `instance`; records it; reads its `HAI`.
    /// Returns the fresh session.
    async fn open(
        &mut self,
        instance: &Instance,
        resume: Option<(&str, u64)>,
    ) -> Result<String, String> {
        let link = match Link::open(self.transport, &instance.addr).await {
            Ok(link) => link,
            Err(e) => {
                let at = self.shared.ms();
                self.rec
                    .write(&json!({"t": "conn_failed", "client": self.id, "at_ms": at,
                    "instance": instance.id, "detail": e}));
                return Err(e);
            }
        };
        self.conn_no += 1;
        self.note(
            "conn",
            json!({"instance": instance.id, "transport": self.transport.name(),
                   "resume": resume.map(|r| r.0), "last_rx_seq": resume.map(|r| r.1)}),
        );
        self.link = Some(link);
        let first = self.next_text(crate::wire::STEP).await?;
        let env = self.record(&first);
        if env["type"] != "HAI" {
            return Err(format!("the first envelope is not HAI: {first}"));
        }
        self.last_seq_seen_on_fresh = 1;
        Ok(env["session"].as_str().unwrap_or_default().to_owned())
    }

    /// The next envelope's text on the current link, within `limit`.
    async fn next_text(&mut self, limit: Duration) -> Result<String, String> {
        let link = self.link.as_mut().ok_or("no connection")?;
        match tokio::time::timeout(limit, link.rx.recv()).await {
            Err(_) => Err(format!("nothing within {limit:?}")),
            Ok(Some(Incoming::Text(text))) => Ok(text),
            Ok(Some(Incoming::Closed(why))) => Err(format!("connection ended: {why}")),
            Ok(None) => Err("connection ended".to_owned()),
        }
    }

    /// Records one received envelope; returns it parsed (`Null` if not JSON).
    fn record(&mut self, text: &str) -> Value {
        let env: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        let payload = &env["payload"];
        let seq = env["seq"].as_str().and_then(|s| s.parse::<u64>().ok());
        let result = &payload["result"];
        let line = json!({
            "session": env["session"],
            "seq": seq,
            "type": env["type"],
            "call_id": payload["call_id"],
            "status": payload["status"],
            "code": if env["type"] == "ERROR" { payload["code"].clone() } else { result["code"].clone() },
            "reason": payload["detail"]["reason"],
            "error": result["error"],
            "request_id": payload["input_request"]["request_id"],
            "hash": hash(text),
            "len": text.len(),
        });
        self.note("recv", line);
        if env["session"].as_str() == Some(self.session.as_str())
            && let Some(seq) = seq
            && seq > self.last_seq
        {
            // A gap is the checker's business; follow what came.
            self.last_seq = seq;
            self.highest_seq = self.highest_seq.max(seq);
        }
        env
    }

    /// Sends an envelope on the session, numbered; returns its `seq`.
    async fn send(&mut self, ty: &str, payload: Value) -> Result<u64, String> {
        self.out_seq += 1;
        let seq = self.out_seq;
        let channel = if ty.starts_with("TOOL_") {
            "USER"
        } else {
            "SYSTEM"
        };
        let env = json!({"id": format!("c{}-{seq}", self.id), "session": self.session,
            "seq": seq.to_string(), "channel": channel, "type": ty, "payload": payload});
        let session = self.session.clone();
        let link = self.link.as_mut().ok_or("no connection")?;
        link.send(&env.to_string(), &session).await.map(|()| seq)
    }

    /// A send that failed ends the connection: the caller resumes.
    async fn send_or_drop(&mut self, ty: &str, payload: Value) -> Option<u64> {
        match self.send(ty, payload).await {
            Ok(seq) => Some(seq),
            Err(e) => {
                self.note("drop", json!({"cause": "send failed", "detail": e}));
                self.link = None;
                None
            }
        }
    }

    async fn start_fresh(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(instance) = self.pick(None) {
                match self.open(&instance, None).await {
                    Ok(session) => {
                        self.adopt(session, &instance.id, "start").await;
                        return Ok(());
                    }
                    Err(e) if Instant::now() >= deadline => return Err(e),
                    Err(_) => {}
                }
            }
            if Instant::now() >= deadline {
                return Err("no instance up".to_owned());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Takes the current connection's fresh session as the client's own;
    /// calls of the old session that are outstanding are abandoned.
    async fn adopt(&mut self, session: String, instance: &str, reason: &str) {
        if !self.calls.is_empty() {
            let ids: Vec<String> = std::mem::take(&mut self.calls).into_keys().collect();
            self.note("abandon", json!({"session": self.session, "calls": ids}));
        }
        self.note(
            "adopt",
            json!({"old": self.session, "new": session, "reason": reason}),
        );
        self.session = session;
        self.instance = instance.to_owned();
        self.out_seq = 0;
        // What arrived on the fresh session so far is in order from 1.
        self.last_seq = self.last_seq_seen_on_fresh;
        self.highest_seq = self.last_seq;
        let hai = json!({"haip_version": "1.1.2", "accept_major": [1],
            "capabilities": {"tool_input": true}});
        self.send_or_drop("HAI", hai).await;
    }

    async fn start_call(&mut self) {
        self.next_call += 1;
        let call_id = format!("c{}-{}", self.id, self.next_call);
        let kind = match self.rng.below(100) {
            0..40 => Kind::Quick,
            40..65 => Kind::Slow,
            65..80 => Kind::Cancelled,
            _ => Kind::Asking,
        };
        let (tool, params) = match kind {
            Kind::Quick => ("echo", json!({"message": call_id})),
            Kind::Slow | Kind::Cancelled => (
                "process_file",
                json!({"filename": format!("{call_id}.txt"), "operation": "read"}),
            ),
            Kind::Asking => ("book_table", json!({"restaurant": "Chez Chaos"})),
        };
        self.calls.insert(
            call_id.clone(),
            Call {
                kind,
                call_seq: self.out_seq + 1,
                tool,
                params: params.clone(),
                cancel_seq: None,
                answered: None,
            },
        );
        self.note(
            "call",
            json!({"session": self.session, "call_id": call_id, "kind": kind.name(),
                   "resend": false, "in_seq": self.out_seq + 1}),
        );
        let payload = json!({"call_id": call_id, "tool": tool, "params": params});
        self.send_or_drop("TOOL_CALL", payload).await;
    }

    /// Records one envelope of the connection and acts on it.
    async fn handle(&mut self, text: &str) {
        let env = self.record(text);
        self.act(&env).await;
    }

    /// Acts on an envelope of the session: a `TOOL_DONE` ends its call; the
    /// first progress of a call to cancel is cancelled; a question is
    /// answered.
    async fn act(&mut self, env: &Value) {
        if env["session"].as_str() != Some(self.session.as_str()) {
            return;
        }
        let payload = &env["payload"];
        let Some(call_id) = payload["call_id"].as_str().map(str::to_owned) else {
            return;
        };
        match env["type"].as_str() {
            Some("TOOL_DONE") => {
                self.calls.remove(&call_id);
            }
            Some("TOOL_UPDATE") => {
                let Some(call) = self.calls.get(&call_id) else {
                    return;
                };
                let status = payload["status"].as_str().unwrap_or_default();
                if call.kind == Kind::Cancelled && call.cancel_seq.is_none() && status == "RUNNING"
                {
                    self.cancel(&call_id).await;
                } else if status == "WAITING_INPUT"
                    && let Some(request_id) = payload["input_request"]["request_id"].as_str()
                {
                    let fresh = call
                        .answered
                        .as_ref()
                        .is_none_or(|(answered, _)| answered != request_id);
                    if fresh {
                        self.answer(&call_id, request_id.to_owned()).await;
                    }
                }
            }
            _ => {}
        }
    }

    async fn cancel(&mut self, call_id: &str) {
        let payload = json!({"call_id": call_id, "reason": "chaos"});
        if let Some(seq) = self.send_or_drop("TOOL_CANCEL", payload).await
            && let Some(call) = self.calls.get_mut(call_id)
        {
            call.cancel_seq = Some(seq);
        }
    }

    async fn answer(&mut self, call_id: &str, request_id: String) {
        let payload = json!({"call_id": call_id, "request_id": request_id, "action": "accept",
            "content": {"party_size": 2, "time": "19:00"}});
        // Marked answered before sending: if the send fails, the resumption
        // sends it again (its seq is then past what the server took).
        let seq = self.out_seq + 1;
        if let Some(call) = self.calls.get_mut(call_id) {
            call.answered = Some((request_id, seq));
        }
        self.send_or_drop("TOOL_INPUT", payload).await;
    }

    /// Replaces the connection, resuming the session; persists through
    /// failures that may pass, then takes a fresh session if it must.
    async fn reconnect(&mut self, cause: Cause) {
        let from = self.instance.clone();
        self.link = None;
        let persist_until = Instant::now() + RESUME_PERSIST;
        let hard_stop = self.shared.drain_until;
        let mut except = match cause {
            Cause::Chaos => None,
            Cause::Lost => Some(from.clone()),
        };
        let mut cause_name = match cause {
            Cause::Chaos => "chaos",
            Cause::Lost => "lost",
        };
        loop {
            let Some(instance) = self.pick(except.as_deref()) else {
                if Instant::now() >= hard_stop {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            // After a drop it chose, the client may claim a little less than
            // it has, to see the replay repeat envelopes exactly.
            let mut last = self.last_seq;
            if cause_name == "chaos" && last > 3 && self.rng.chance(25) {
                last -= 1 + self.rng.below(3);
            }
            let session = self.session.clone();
            let fresh = match self.open(&instance, Some((&session, last))).await {
                Ok(fresh) => fresh,
                Err(_) => {
                    except = Some(instance.id.clone());
                    if Instant::now() >= hard_stop {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            match self
                .resume(&instance, &fresh, last, &from, cause_name)
                .await
            {
                Resumed::Yes => {
                    self.instance = instance.id.clone();
                    return;
                }
                Resumed::Retry => {
                    // The connection broke or did not answer: another.
                    except = Some(instance.id.clone());
                }
                Resumed::Refused { may_pass } => {
                    let now = Instant::now();
                    if !may_pass || now >= persist_until || now >= hard_stop {
                        self.adopt(fresh, &instance.id, "resume failed").await;
                        return;
                    }
                    except = None;
                    tokio::time::sleep(self.rng.ms(500, 1000)).await;
                }
            }
            cause_name = "retry";
            self.link = None;
        }
    }

    /// Sends the resuming `HAI` on the fresh connection and reads until it
    /// is confirmed or refused.
    async fn resume(
        &mut self,
        instance: &Instance,
        fresh: &str,
        last: u64,
        from: &str,
        cause: &str,
    ) -> Resumed {
        let session = self.session.clone();
        let seen = self.highest_seq.max(self.last_seq);
        let hai = json!({"id": format!("resume-{}-{}", self.id, self.conn_no),
            "session": session, "channel": "SYSTEM", "type": "HAI",
            "payload": {"haip_version": "1.1.2", "accept_major": [1],
                "last_rx_seq": last.to_string(), "capabilities": {"tool_input": true}}});
        let sent_at = self.shared.ms();
        let started = Instant::now();
        let outcome = |ok: bool, reason: Option<String>, latency: Option<f64>| {
            json!({"session": session, "instance": instance.id, "from_instance": from,
                   "cause": cause, "ok": ok, "reason": reason, "latency_ms": latency,
                   "last_rx_seq": last})
        };
        let sent = match self.link.as_mut() {
            Some(link) => link.send(&hai.to_string(), fresh).await,
            None => Err("no connection".to_owned()),
        };
        if let Err(e) = sent {
            self.note("drop", json!({"cause": "resume send failed", "detail": e}));
            return Resumed::Retry;
        }
        // The replay continues from what the client claimed.
        self.last_seq = last;
        let mut replayed = Vec::new();
        loop {
            let left = RESUME_ANSWER.saturating_sub(started.elapsed());
            let text = match self.next_text(left).await {
                Ok(text) => text,
                Err(e) => {
                    let reason = if e.starts_with("nothing within") {
                        // Silence is no answer: a violation.
                        format!("no answer within {RESUME_ANSWER:?}")
                    } else {
                        self.note(
                            "drop",
                            json!({"cause": "closed while resuming", "detail": e}),
                        );
                        return Resumed::Retry;
                    };
                    let mut line = outcome(false, Some(reason), None);
                    line["at_ms"] = json!(sent_at);
                    line["answered_ms"] = json!(self.shared.ms());
                    line["t"] = json!("resume");
                    line["client"] = json!(self.id);
                    line["conn"] = json!(self.conn_no);
                    self.rec.write(&line);
                    return Resumed::Retry;
                }
            };
            let env: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let on_fresh = env["session"].as_str() == Some(fresh);
            if on_fresh && env["type"] == "ERROR" && env["payload"]["code"] == "RESUME_FAILED" {
                self.record(&text);
                if let Some(seq) = env["seq"].as_str().and_then(|s| s.parse().ok()) {
                    self.last_seq_seen_on_fresh = seq;
                }
                let reason = env["payload"]["detail"]["reason"]
                    .as_str()
                    .unwrap_or("(no reason)")
                    .to_owned();
                let may_pass = matches!(
                    reason.as_str(),
                    "session store unavailable"
                        | "session being resumed elsewhere"
                        | haip_examples::chaos_check::UNREACHABLE
                );
                let mut line = outcome(false, Some(reason), None);
                line["at_ms"] = json!(sent_at);
                line["answered_ms"] = json!(self.shared.ms());
                line["t"] = json!("resume");
                line["client"] = json!(self.id);
                line["conn"] = json!(self.conn_no);
                self.rec.write(&line);
                return Resumed::Refused { may_pass };
            }
            if on_fresh {
                if let Some(seq) = env["seq"].as_str().and_then(|s| s.parse().ok()) {
                    self.last_seq_seen_on_fresh = seq;
                }
                self.record(&text);
                continue;
            }
            // The confirmation comes after the replay, which may hold an
            // earlier resumption's confirming `HAI`: one the client has seen
            // before is part of the replay (its `last_rx_seq` is stale).
            let seq = env["seq"].as_str().and_then(|s| s.parse::<u64>().ok());
            let confirmed = env["type"] == "HAI"
                && env["session"].as_str() == Some(&session)
                && seq.is_some_and(|seq| seq > seen);
            if confirmed {
                let latency = started.elapsed().as_secs_f64() * 1000.0;
                self.record(&text);
                let mut line = outcome(true, None, Some(latency));
                line["at_ms"] = json!(sent_at);
                line["t"] = json!("resume");
                line["client"] = json!(self.id);
                line["conn"] = json!(self.conn_no);
                self.rec.write(&line);
                let taken = env["payload"]["last_rx_seq"]
                    .as_str()
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or(0);
                self.send_again(taken).await;
                for env in replayed {
                    if self.link.is_none() {
                        break;
                    }
                    self.act(&env).await;
                }
                return Resumed::Yes;
            }
            // A replayed envelope of the session: acted on once the
            // resumption is confirmed (only a `TOOL_DONE` counts at once).
            let env = self.record(&text);
            if env["type"] == "TOOL_DONE" {
                self.act(&env).await;
            } else {
                replayed.push(env);
            }
        }
    }

    /// After a resumption the server took everything up to `taken`: sends
    /// again what came after it.
    async fn send_again(&mut self, taken: u64) {
        // The numbering continues past what was sent before.
        self.out_seq = self.out_seq.max(taken);
        let ids: Vec<String> = self.calls.keys().cloned().collect();
        for call_id in ids {
            let Some(call) = self.calls.get(&call_id) else {
                continue;
            };
            if call.call_seq > taken {
                let payload = json!({"call_id": call_id, "tool": call.tool, "params": call.params});
                let kind = call.kind.name();
                self.note(
                    "call",
                    json!({"session": self.session, "call_id": call_id, "kind": kind,
                           "resend": true, "in_seq": self.out_seq + 1}),
                );
                let seq = self.out_seq + 1;
                if let Some(call) = self.calls.get_mut(&call_id) {
                    call.call_seq = seq;
                    call.cancel_seq = None;
                    call.answered = None;
                }
                if self.send_or_drop("TOOL_CALL", payload).await.is_none() {
                    return;
                }
            } else if call.cancel_seq.is_some_and(|s| s > taken) {
                self.cancel(&call_id).await;
            } else if let Some((request_id, seq)) = call.answered.clone()
                && seq > taken
            {
                self.answer(&call_id, request_id).await;
            }
            if self.link.is_none() {
                return;
            }
        }
    }
}

enum Resumed {
    Yes,
    /// The connection broke or stayed silent: try another.
    Retry,
    /// `RESUME_FAILED`; `may_pass` when trying again later may work.
    Refused {
        may_pass: bool,
    },
}

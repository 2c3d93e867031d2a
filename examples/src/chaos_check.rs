//! The checker behind `chaos check` (the `chaos` example): reads the history
//! a `chaos run` wrote (JSON lines, one file per client plus the
//! orchestrator's `events.jsonl`) and judges what the haip instances did.
//!
//! # What is checked
//!
//! Per session (docs/protocol.md §11):
//!
//! - On each connection, the envelopes of a session arrive with `seq` +1 each:
//!   the first of a fresh session is `1`, the first of a resumed session is
//!   the `last_rx_seq` the client sent, plus one (everything after it is
//!   replayed). No gap, on a connection or across connections.
//! - An envelope received again (a replay after the client sent a lower
//!   `last_rx_seq`) is byte-identical to the first one with that `seq`
//!   (compared by hash of the raw text).
//! - Every call sent ends in exactly one `TOOL_DONE` (an "instance lost"
//!   error counts; silence does not), and nothing about a call comes after
//!   its `TOOL_DONE`.
//! - Every `RESUME_FAILED` is explained by a cause listed below; anything
//!   else is a violation, notably "the instance holding the session is
//!   unreachable" (the resuming client should be held until the dead
//!   instance's lease expires, then the session restored).
//!
//! # Accepted causes of `RESUME_FAILED`
//!
//! - `session store unavailable`: while Redis was stopped, or within
//!   [`STORE_GRACE_MS`] after it answered again (instances reconnect and
//!   subscribe again): the time between the resuming `HAI` and its answer
//!   (a resuming client may be held for seconds) overlaps that period.
//! - `unknown session`, `window exceeded`, `invalid last_rx_seq`, `records
//!   lost while the session store was away`: answered at or after a Redis
//!   stop, for a session that received envelopes between
//!   [`STORE_GRACE_MS`] before that stop and [`STORE_GRACE_MS`] after Redis
//!   answered again: records made while Redis was going or gone may be lost.
//!
//! Calls of a session that was lost for an accepted cause (its last
//! resumption attempt failed for one, and it was never resumed after) and
//! that got no `TOOL_DONE` are excused: counted apart, not violations.
//!
//! # The history (one JSON object per line, field `t` says which)
//!
//! | `t` | fields |
//! |---|---|
//! | `conn` | `client`, `conn`, `at_ms`, `instance`, `transport`, `resume` (session or null), `last_rx_seq` (or null) |
//! | `recv` | `client`, `conn`, `at_ms`, `session`, `seq`, `type`, `call_id`?, `status`?, `code`?, `reason`?, `error`?, `hash` |
//! | `call` | `client`, `conn`, `at_ms`, `session`, `call_id`, `kind`, `resend` |
//! | `resume` | `client`, `conn`, `at_ms` (when the resuming `HAI` was sent), `answered_ms`?, `session`, `instance`, `from_instance`, `cause`, `ok`, `latency_ms`?, `reason`? |
//! | `event` | `at_ms`, `what` (`kill`, `restart`, `handover`, `handover_done`, `redis_stop`, `redis_start`, …), `instance`? |
//! | anything else (`drop`, `adopt`, `abandon`, `end`, `note`, `conn_failed`) | informational |
//!
//! [`check_dir`] reads a directory, [`check`] judges parsed lines, and
//! [`Report`] says what was found (as text and as JSON).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use serde_json::{Value, json};

/// How long after Redis answers again (and before it stops) store trouble
/// is still put down to the restart, in ms.
pub const STORE_GRACE_MS: f64 = 15_000.0;

/// How long after an instance is killed or handed over a resumption on
/// another instance counts as a failover, in ms.
pub const FAILOVER_WINDOW_MS: f64 = 60_000.0;

/// The `RESUME_FAILED` reason that reports the bug: the instance holding
/// the session died and its lease has not expired yet.
pub const UNREACHABLE: &str = "the instance holding the session is unreachable";

/// One thing wrong, with the session it concerns (empty when none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The session, or `""`.
    pub session: String,
    /// What went wrong.
    pub detail: String,
}

/// Resume latency percentiles in ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Slowest.
    pub max: f64,
}

/// Counts of one `RESUME_FAILED` reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Failures {
    /// Put down to an accepted cause.
    pub explained: u64,
    /// Violations.
    pub unexplained: u64,
}

/// What the checker found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Sessions clients made calls on.
    pub sessions: usize,
    /// Connections opened.
    pub connections: u64,
    /// Envelopes received (replays included).
    pub envelopes: u64,
    /// Envelopes received a second time (replays of a rewound `last_rx_seq`).
    pub replayed_again: u64,
    /// Calls sent (first sends), by kind.
    pub calls: BTreeMap<String, u64>,
    /// Calls sent again after a resumption said the server had not seen them.
    pub resent: u64,
    /// `TOOL_DONE`s (one per call), by outcome.
    pub dones: BTreeMap<String, u64>,
    /// Calls without a `TOOL_DONE` in sessions lost for an accepted cause.
    pub excused: u64,
    /// Resumptions confirmed.
    pub resumes_ok: u64,
    /// Resumptions on another instance after the session's instance was
    /// killed or handed over.
    pub failovers: u64,
    /// Resume latency, from the resuming `HAI` to the confirming one.
    pub resume_latency: Option<Latency>,
    /// `RESUME_FAILED` (and unanswered resumptions) by reason.
    pub resume_failed: BTreeMap<String, Failures>,
    /// Orchestrator events by kind.
    pub events: BTreeMap<String, u64>,
    /// Everything wrong.
    pub violations: Vec<Violation>,
}

#[derive(Debug, Clone)]
struct Conn {
    instance: String,
    resume: Option<String>,
    last_rx_seq: Option<u64>,
}

#[derive(Debug, Clone)]
struct Recv {
    key: (u64, u64),
    at_ms: f64,
    session: String,
    seq: u64,
    ty: String,
    call_id: Option<String>,
    status: Option<String>,
    code: Option<String>,
    error: Option<String>,
    hash: String,
}

#[derive(Debug, Clone)]
struct CallSent {
    session: String,
    call_id: String,
    kind: String,
    resend: bool,
}

#[derive(Debug, Clone)]
struct Resume {
    at_ms: f64,
    /// When the answer came (a refusal may come seconds after the request).
    answered_ms: f64,
    session: String,
    instance: String,
    from_instance: String,
    ok: bool,
    latency_ms: Option<f64>,
    reason: Option<String>,
}

#[derive(Debug, Clone)]
struct Event {
    at_ms: f64,
    what: String,
    instance: Option<String>,
}

/// Parsed history.
#[derive(Debug, Default)]
struct History {
    conns: HashMap<(u64, u64), Conn>,
    recvs: Vec<Recv>,
    calls: Vec<CallSent>,
    resumes: Vec<Resume>,
    events: Vec<Event>,
    malformed: Vec<String>,
}

fn text(v: &Value, key: &str) -> Result<String, String> {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("no string `{key}`"))
}

fn opt_text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn number(v: &Value, key: &str) -> Result<u64, String> {
    v.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("no whole number `{key}`"))
}

fn time(v: &Value) -> Result<f64, String> {
    v.get("at_ms")
        .and_then(Value::as_f64)
        .ok_or_else(|| "no number `at_ms`".to_owned())
}

impl History {
    fn add(&mut self, v: &Value) -> Result<(), String> {
        let t = text(v, "t")?;
        match t.as_str() {
            "conn" => {
                let key = (number(v, "client")?, number(v, "conn")?);
                let conn = Conn {
                    instance: text(v, "instance")?,
                    resume: opt_text(v, "resume"),
                    last_rx_seq: v.get("last_rx_seq").and_then(Value::as_u64),
                };
                if self.conns.insert(key, conn).is_some() {
                    return Err(format!("connection {key:?} opened twice"));
                }
            }
            "recv" => self.recvs.push(Recv {
                key: (number(v, "client")?, number(v, "conn")?),
                at_ms: time(v)?,
                session: text(v, "session")?,
                seq: number(v, "seq")?,
                ty: text(v, "type")?,
                call_id: opt_text(v, "call_id"),
                status: opt_text(v, "status"),
                code: opt_text(v, "code"),
                error: opt_text(v, "error"),
                hash: text(v, "hash")?,
            }),
            "call" => {
                number(v, "client")?;
                self.calls.push(CallSent {
                    session: text(v, "session")?,
                    call_id: text(v, "call_id")?,
                    kind: text(v, "kind")?,
                    resend: v.get("resend").and_then(Value::as_bool).unwrap_or(false),
                });
            }
            "resume" => {
                let ok = v
                    .get("ok")
                    .and_then(Value::as_bool)
                    .ok_or("no boolean `ok`")?;
                let at_ms = time(v)?;
                self.resumes.push(Resume {
                    at_ms,
                    answered_ms: v
                        .get("answered_ms")
                        .and_then(Value::as_f64)
                        .unwrap_or(at_ms),
                    session: text(v, "session")?,
                    instance: text(v, "instance")?,
                    from_instance: opt_text(v, "from_instance").unwrap_or_default(),
                    ok,
                    latency_ms: v.get("latency_ms").and_then(Value::as_f64),
                    reason: opt_text(v, "reason"),
                });
                if !ok && opt_text(v, "reason").is_none() {
                    return Err("a failed resumption without `reason`".to_owned());
                }
            }
            "event" => self.events.push(Event {
                at_ms: time(v)?,
                what: text(v, "what")?,
                instance: opt_text(v, "instance"),
            }),
            "drop" | "adopt" | "abandon" | "end" | "note" | "conn_failed" => {}
            other => return Err(format!("unknown record type `{other}`")),
        }
        Ok(())
    }
}

/// Judges a history given as `(source, line)` pairs (the source names the
/// file and line for messages). Malformed lines are violations.
pub fn check<'a>(lines: impl IntoIterator<Item = (String, &'a str)>) -> Report {
    let mut history = History::default();
    for (source, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let parsed = serde_json::from_str::<Value>(line)
            .map_err(|e| format!("not JSON ({e})"))
            .and_then(|v| history.add(&v));
        if let Err(why) = parsed {
            let shown: String = line.chars().take(160).collect();
            history
                .malformed
                .push(format!("malformed history line {source}: {why}: {shown}"));
        }
    }
    judge(&history)
}

/// Reads every `*.jsonl` file of `dir` (in name order) and judges them.
pub fn check_dir(dir: &Path) -> Result<Report, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("{} holds no history (*.jsonl)", dir.display()));
    }
    let mut texts = Vec::new();
    for file in &files {
        let body = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        texts.push((name, body));
    }
    let lines = texts.iter().flat_map(|(name, body)| {
        body.lines()
            .enumerate()
            .map(move |(i, line)| (format!("{name}:{}", i + 1), line))
    });
    Ok(check(lines))
}

/// The `p`-th percentile (nearest rank) of sorted `values`.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Redis outages: (stopped at, answered again at or +inf).
fn outages(events: &[Event]) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut stopped: Option<f64> = None;
    for e in events {
        match e.what.as_str() {
            "redis_stop" => stopped = Some(e.at_ms),
            "redis_start" => {
                if let Some(at) = stopped.take() {
                    out.push((at, e.at_ms));
                }
            }
            _ => {}
        }
    }
    if let Some(at) = stopped {
        out.push((at, f64::INFINITY));
    }
    out
}

/// The latest instance event at or before `at_ms`, described.
fn context(events: &[Event], at_ms: f64) -> String {
    events
        .iter()
        .rfind(|e| e.at_ms <= at_ms)
        .map(|e| {
            let whom = e.instance.as_deref().unwrap_or("");
            format!(
                "; {:.1} s after {} {whom}",
                (at_ms - e.at_ms) / 1000.0,
                e.what
            )
        })
        .unwrap_or_default()
}

fn judge(h: &History) -> Report {
    let mut report = Report {
        connections: h.conns.len() as u64,
        envelopes: h.recvs.len() as u64,
        ..Report::default()
    };
    let mut violations: Vec<Violation> = h
        .malformed
        .iter()
        .map(|m| Violation {
            session: String::new(),
            detail: m.clone(),
        })
        .collect();
    let mut events = h.events.clone();
    events.sort_by(|a, b| a.at_ms.total_cmp(&b.at_ms));
    for e in &events {
        *report.events.entry(e.what.clone()).or_default() += 1;
    }
    let outages = outages(&events);

    // Sequence, per connection and session, in the order received.
    let mut next: HashMap<((u64, u64), &str), u64> = HashMap::new();
    let mut first_on_conn: HashMap<(u64, u64), &str> = HashMap::new();
    for r in &h.recvs {
        let Some(conn) = h.conns.get(&r.key) else {
            violations.push(Violation {
                session: r.session.clone(),
                detail: format!(
                    "envelope seq {} on connection {:?} that was never opened",
                    r.seq, r.key
                ),
            });
            continue;
        };
        let fresh = *first_on_conn.entry(r.key).or_insert(&r.session);
        let expected = match next.get(&(r.key, r.session.as_str())) {
            Some(&n) => n,
            None if fresh == r.session => 1,
            None if conn.resume.as_deref() == Some(r.session.as_str()) => {
                conn.last_rx_seq.unwrap_or(0) + 1
            }
            None => {
                violations.push(Violation {
                    session: r.session.clone(),
                    detail: format!(
                        "envelope seq {} ({}) on connection {:?} of {}, which neither opened nor resumed this session",
                        r.seq, r.ty, r.key, conn.instance
                    ),
                });
                r.seq
            }
        };
        if r.seq != expected {
            let what = if r.seq > expected {
                "gap"
            } else {
                "out of order"
            };
            violations.push(Violation {
                session: r.session.clone(),
                detail: format!(
                    "{what}: expected seq {expected}, got {} ({}) on connection {:?} of {}",
                    r.seq, r.ty, r.key, conn.instance
                ),
            });
        }
        next.insert((r.key, r.session.as_str()), r.seq + 1);
    }

    // Per session: seq -> first envelope, replays byte-identical.
    let mut by_session: BTreeMap<&str, BTreeMap<u64, &Recv>> = BTreeMap::new();
    for r in &h.recvs {
        let seqs = by_session.entry(r.session.as_str()).or_default();
        match seqs.get(&r.seq) {
            None => {
                seqs.insert(r.seq, r);
            }
            Some(first) => {
                report.replayed_again += 1;
                if first.hash != r.hash {
                    violations.push(Violation {
                        session: r.session.clone(),
                        detail: format!(
                            "seq {} received again with different bytes ({} then {}; hash {} then {})",
                            r.seq, first.ty, r.ty, first.hash, r.hash
                        ),
                    });
                }
            }
        }
    }

    // Sessions lost: the last resumption attempt failed, none succeeded after.
    let mut last_attempt: HashMap<&str, &Resume> = HashMap::new();
    for r in &h.resumes {
        let keep = last_attempt
            .get(r.session.as_str())
            .is_none_or(|prev| prev.at_ms <= r.at_ms);
        if keep {
            last_attempt.insert(r.session.as_str(), r);
        }
    }
    let received_in = |session: &str, from: f64, to: f64| {
        by_session
            .get(session)
            .is_some_and(|seqs| seqs.values().any(|r| r.at_ms >= from && r.at_ms <= to))
    };
    let explained = |r: &Resume| -> bool {
        let Some(reason) = r.reason.as_deref() else {
            return false;
        };
        match reason {
            "session store unavailable" => outages
                .iter()
                .any(|&(stop, start)| r.answered_ms >= stop && r.at_ms <= start + STORE_GRACE_MS),
            "unknown session"
            | "window exceeded"
            | "invalid last_rx_seq"
            | "records lost while the session store was away" => {
                outages.iter().any(|&(stop, start)| {
                    r.answered_ms >= stop
                        && received_in(&r.session, stop - STORE_GRACE_MS, start + STORE_GRACE_MS)
                })
            }
            _ => false,
        }
    };

    // Resumptions.
    let mut latencies = Vec::new();
    for r in &h.resumes {
        if r.ok {
            report.resumes_ok += 1;
            if let Some(ms) = r.latency_ms {
                latencies.push(ms);
            }
            let failover = r.instance != r.from_instance
                && events.iter().any(|e| {
                    matches!(e.what.as_str(), "kill" | "handover")
                        && e.instance.as_deref() == Some(r.from_instance.as_str())
                        && e.at_ms <= r.at_ms
                        && r.at_ms - e.at_ms <= FAILOVER_WINDOW_MS
                });
            if failover {
                report.failovers += 1;
            }
            continue;
        }
        let reason = r.reason.clone().unwrap_or_default();
        let counts = report.resume_failed.entry(reason.clone()).or_default();
        if explained(r) {
            counts.explained += 1;
        } else {
            counts.unexplained += 1;
            let bug = if reason == UNREACHABLE {
                " (the resuming client should be held until the lease expires, then the session restored)"
            } else {
                ""
            };
            violations.push(Violation {
                session: r.session.clone(),
                detail: format!(
                    "RESUME_FAILED \"{reason}\" on {} (session was on {}), answered {:.1} s after the resuming HAI{bug}{}",
                    r.instance,
                    r.from_instance,
                    (r.answered_ms - r.at_ms) / 1000.0,
                    context(&events, r.at_ms)
                ),
            });
        }
    }
    latencies.sort_by(f64::total_cmp);
    if !latencies.is_empty() {
        report.resume_latency = Some(Latency {
            p50: percentile(&latencies, 50.0),
            p99: percentile(&latencies, 99.0),
            max: *latencies.last().unwrap_or(&0.0),
        });
    }

    // Calls: exactly one TOOL_DONE each, nothing after it.
    let mut sent: BTreeMap<(&str, &str), &CallSent> = BTreeMap::new();
    let mut sessions: BTreeSet<&str> = BTreeSet::new();
    for c in &h.calls {
        sessions.insert(c.session.as_str());
        if c.resend {
            report.resent += 1;
        }
        if let std::collections::btree_map::Entry::Vacant(slot) =
            sent.entry((c.session.as_str(), c.call_id.as_str()))
        {
            slot.insert(c);
            *report.calls.entry(c.kind.clone()).or_default() += 1;
        }
    }
    report.sessions = sessions.len();
    let resent: BTreeSet<(&str, &str)> = h
        .calls
        .iter()
        .filter(|c| c.resend)
        .map(|c| (c.session.as_str(), c.call_id.as_str()))
        .collect();
    // (session, call_id) -> (done seqs, other seqs with their status)
    type Seen<'a> = (Vec<&'a Recv>, Vec<&'a Recv>);
    let mut seen: BTreeMap<(&str, &str), Seen<'_>> = BTreeMap::new();
    for (session, seqs) in &by_session {
        for r in seqs.values() {
            let Some(call_id) = r.call_id.as_deref() else {
                continue;
            };
            let entry = seen.entry((session, call_id)).or_default();
            match r.ty.as_str() {
                "TOOL_DONE" => entry.0.push(r),
                "TOOL_UPDATE" => entry.1.push(r),
                _ => {}
            }
        }
    }
    for (&(session, call_id), call) in &sent {
        let (dones, updates) = seen.get(&(session, call_id)).cloned().unwrap_or_default();
        match dones.len() {
            0 => {
                let lost = last_attempt.get(session).filter(|r| !r.ok);
                match lost {
                    Some(r) if explained(r) => report.excused += 1,
                    _ => {
                        let why = lost
                            .map(|r| {
                                format!(
                                    " (session lost: RESUME_FAILED \"{}\")",
                                    r.reason.as_deref().unwrap_or("")
                                )
                            })
                            .unwrap_or_default();
                        violations.push(Violation {
                            session: session.to_owned(),
                            detail: format!("call {call_id} ({}) got no TOOL_DONE{why}", call.kind),
                        });
                    }
                }
            }
            1 => {}
            n => violations.push(Violation {
                session: session.to_owned(),
                detail: format!(
                    "call {call_id} ({}) got {n} TOOL_DONEs: {}{}",
                    call.kind,
                    dones
                        .iter()
                        .map(|d| format!(
                            "seq {} {} at {:.1} s{}",
                            d.seq,
                            outcome(d),
                            d.at_ms / 1000.0,
                            if outages.iter().any(|&(stop, start)| d.at_ms >= stop && d.at_ms <= start) {
                                " (while Redis was stopped)"
                            } else {
                                ""
                            }
                        ))
                        .collect::<Vec<_>>()
                        .join(", "),
                    if resent.contains(&(session, call_id)) {
                        "; it was sent again after a resumption whose HAI said the server had not taken it"
                    } else {
                        ""
                    }
                ),
            }),
        }
        if let Some(done) = dones.first() {
            *report.dones.entry(outcome(done)).or_default() += 1;
            for u in updates.iter().filter(|u| u.seq > done.seq) {
                violations.push(Violation {
                    session: session.to_owned(),
                    detail: format!(
                        "call {call_id}: TOOL_UPDATE {} (seq {}) after its TOOL_DONE (seq {})",
                        u.status.as_deref().unwrap_or("?"),
                        u.seq,
                        done.seq
                    ),
                });
            }
        }
    }
    for (&(session, call_id), (dones, _)) in &seen {
        if !dones.is_empty() && !sent.contains_key(&(session, call_id)) {
            violations.push(Violation {
                session: session.to_owned(),
                detail: format!("TOOL_DONE for call {call_id}, which was never sent"),
            });
        }
    }
    report.violations = violations;
    report
}

/// How a `TOOL_DONE` ended its call: `OK`, `CANCELLED`, `ERROR instance
/// lost`, or `ERROR <code>`.
fn outcome(done: &Recv) -> String {
    match done.status.as_deref() {
        Some("ERROR") => {
            let lost = done.code.as_deref() == Some("INTERNAL_ERROR")
                && done
                    .error
                    .as_deref()
                    .is_some_and(|e| e.contains("instance lost"));
            if lost {
                "ERROR instance lost".to_owned()
            } else {
                format!("ERROR {}", done.code.as_deref().unwrap_or("?"))
            }
        }
        Some(status) => status.to_owned(),
        None => "?".to_owned(),
    }
}

impl Report {
    /// Total calls sent.
    pub fn total_calls(&self) -> u64 {
        self.calls.values().sum()
    }

    /// The report as JSON (what `DIR/report.json` holds).
    pub fn to_json(&self) -> Value {
        let latency = self
            .resume_latency
            .map(|l| json!({"p50_ms": l.p50, "p99_ms": l.p99, "max_ms": l.max}));
        let failed: serde_json::Map<String, Value> = self
            .resume_failed
            .iter()
            .map(|(k, f)| {
                (
                    k.clone(),
                    json!({"explained": f.explained, "unexplained": f.unexplained}),
                )
            })
            .collect();
        json!({
            "sessions": self.sessions,
            "connections": self.connections,
            "envelopes": self.envelopes,
            "replayed_again": self.replayed_again,
            "calls": self.total_calls(),
            "calls_by_kind": self.calls,
            "resent": self.resent,
            "dones_by_outcome": self.dones,
            "excused_calls": self.excused,
            "resumes_ok": self.resumes_ok,
            "failovers": self.failovers,
            "resume_latency": latency,
            "resume_failed": failed,
            "events": self.events,
            "violations": self.violations.iter()
                .map(|v| json!({"session": v.session, "detail": v.detail}))
                .collect::<Vec<_>>(),
        })
    }

    /// The report as text, for people.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(out, "sessions:      {}", self.sessions);
        let _ = writeln!(
            out,
            "connections:   {} ({} envelopes, {} received again)",
            self.connections, self.envelopes, self.replayed_again
        );
        let kinds: Vec<String> = self.calls.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(
            out,
            "calls:         {} ({}); {} resent after a resumption",
            self.total_calls(),
            kinds.join(", "),
            self.resent
        );
        let dones: Vec<String> = self.dones.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(out, "TOOL_DONEs:    {}", dones.join(", "));
        let _ = writeln!(
            out,
            "excused:       {} calls of sessions lost for an accepted cause",
            self.excused
        );
        let events: Vec<String> = self
            .events
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(out, "chaos:         {}", events.join(", "));
        let _ = writeln!(
            out,
            "resumptions:   {} confirmed, {} failovers",
            self.resumes_ok, self.failovers
        );
        if let Some(l) = self.resume_latency {
            let _ = writeln!(
                out,
                "resume ms:     p50 {:.1}, p99 {:.1}, max {:.1}",
                l.p50, l.p99, l.max
            );
        }
        for (reason, f) in &self.resume_failed {
            let _ = writeln!(
                out,
                "RESUME_FAILED: \"{reason}\": {} explained, {} unexplained",
                f.explained, f.unexplained
            );
        }
        let _ = writeln!(out, "violations:    {}", self.violations.len());
        for v in &self.violations {
            let _ = writeln!(out, "  - [{}] {}", v.session, v.detail);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(lines: &[Value]) -> Report {
        let texts: Vec<String> = lines.iter().map(Value::to_string).collect();
        check(
            texts
                .iter()
                .enumerate()
                .map(|(i, t)| (format!("t:{}", i + 1), t.as_str())),
        )
    }

    fn conn(conn: u64, instance: &str, resume: Option<&str>, last: Option<u64>) -> Value {
        json!({"t": "conn", "client": 0, "conn": conn, "at_ms": 0.0, "instance": instance,
               "transport": "ws", "resume": resume, "last_rx_seq": last})
    }

    fn recv(conn: u64, at: f64, session: &str, seq: u64, ty: &str, call: Option<&str>) -> Value {
        json!({"t": "recv", "client": 0, "conn": conn, "at_ms": at, "session": session,
               "seq": seq, "type": ty, "call_id": call, "status": if ty == "TOOL_DONE" { "OK" } else { "RUNNING" },
               "hash": format!("{session}-{seq}")})
    }

    fn call(session: &str, id: &str) -> Value {
        json!({"t": "call", "client": 0, "conn": 1, "at_ms": 0.0, "session": session,
               "call_id": id, "kind": "quick", "resend": false})
    }

    fn resume(at: f64, session: &str, ok: bool, reason: Option<&str>) -> Value {
        json!({"t": "resume", "client": 0, "conn": 2, "at_ms": at, "session": session,
               "instance": "i2", "from_instance": "i1", "cause": "lost", "ok": ok,
               "latency_ms": if ok { json!(5.0) } else { Value::Null }, "reason": reason})
    }

    fn event(at: f64, what: &str, instance: Option<&str>) -> Value {
        json!({"t": "event", "at_ms": at, "what": what, "instance": instance})
    }

    /// A session `s` on connection 1 with call `c1` done, then resumed on
    /// connection 2 from `last`.
    fn base(last: u64) -> Vec<Value> {
        vec![
            conn(1, "i1", None, None),
            recv(1, 1.0, "s", 1, "HAI", None),
            call("s", "c1"),
            recv(1, 2.0, "s", 2, "TOOL_UPDATE", Some("c1")),
            recv(1, 3.0, "s", 3, "TOOL_DONE", Some("c1")),
            conn(2, "i2", Some("s"), Some(last)),
            recv(2, 4.0, "f", 1, "HAI", None),
        ]
    }

    #[test]
    fn a_clean_resumption_passes() {
        let mut lines = base(3);
        lines.push(resume(4.0, "s", true, None));
        lines.push(recv(2, 5.0, "s", 4, "HAI", None));
        lines.push(event(3.5, "kill", Some("i1")));
        let report = run(&lines);
        assert_eq!(report.violations, vec![]);
        assert_eq!(report.failovers, 1);
        assert_eq!(report.dones.get("OK"), Some(&1));
        assert_eq!(report.calls.get("quick"), Some(&1));
        assert_eq!(report.resume_latency.map(|l| l.p50), Some(5.0));
    }

    #[test]
    fn a_replay_must_start_after_last_rx_seq_and_be_identical() {
        let mut lines = base(1);
        // Replays 2 with other bytes, skips 3.
        let mut changed = recv(2, 5.0, "s", 2, "TOOL_UPDATE", Some("c1"));
        changed["hash"] = json!("other");
        lines.push(changed);
        lines.push(recv(2, 5.0, "s", 4, "HAI", None));
        let report = run(&lines);
        let details: Vec<_> = report.violations.iter().map(|v| v.detail.clone()).collect();
        assert_eq!(details.len(), 2, "{details:?}");
        assert!(
            details[0].contains("gap: expected seq 3, got 4"),
            "{details:?}"
        );
        assert!(details[1].contains("different bytes"), "{details:?}");
        assert_eq!(report.replayed_again, 1);
    }

    #[test]
    fn a_missing_or_doubled_done_and_updates_after_it_are_violations() {
        let mut lines = base(3);
        lines.push(call("s", "c2"));
        lines.push(call("s", "c3"));
        lines.push(recv(2, 5.0, "s", 4, "TOOL_DONE", Some("c3")));
        lines.push(recv(2, 5.0, "s", 5, "TOOL_DONE", Some("c3")));
        lines.push(recv(2, 5.0, "s", 6, "TOOL_UPDATE", Some("c3")));
        lines.push(recv(2, 5.0, "s", 7, "TOOL_DONE", Some("zz")));
        let report = run(&lines);
        let details: Vec<_> = report.violations.iter().map(|v| v.detail.clone()).collect();
        assert!(
            details
                .iter()
                .any(|d| d.contains("c2 (quick) got no TOOL_DONE")),
            "{details:?}"
        );
        assert!(
            details
                .iter()
                .any(|d| d.contains("c3 (quick) got 2 TOOL_DONEs")),
            "{details:?}"
        );
        assert!(
            details
                .iter()
                .any(|d| d.contains("after its TOOL_DONE (seq 4)")),
            "{details:?}"
        );
        assert!(
            details
                .iter()
                .any(|d| d.contains("zz, which was never sent")),
            "{details:?}"
        );
    }

    #[test]
    fn unreachable_is_a_violation_and_store_trouble_during_a_restart_is_not() {
        let mut lines = base(3);
        lines.push(call("s", "c2"));
        lines.push(event(3.5, "kill", Some("i1")));
        lines.push(resume(4.0, "s", false, Some(UNREACHABLE)));
        let report = run(&lines);
        assert_eq!(report.violations.len(), 2, "{:?}", report.violations);
        assert!(report.violations[0].detail.contains("after kill i1"));
        assert!(report.violations[1].detail.contains("session lost"));
        assert_eq!(report.resume_failed[UNREACHABLE].unexplained, 1);

        let mut lines = base(3);
        lines.push(call("s", "c2"));
        lines.push(event(3.5, "redis_stop", None));
        lines.push(event(20.0, "redis_start", None));
        lines.push(resume(4.0, "s", false, Some("session store unavailable")));
        lines.push(resume(30.0, "s", false, Some("unknown session")));
        let report = run(&lines);
        assert_eq!(report.violations, vec![]);
        assert_eq!(report.excused, 1);
        assert_eq!(report.resume_failed["unknown session"].explained, 1);
        // Long after the restart, store trouble is not explained.
        let mut lines = base(3);
        lines.push(event(3.5, "redis_stop", None));
        lines.push(event(20.0, "redis_start", None));
        lines.push(resume(
            60_000.0,
            "s",
            false,
            Some("session store unavailable"),
        ));
        assert_eq!(run(&lines).violations.len(), 1);
    }

    #[test]
    fn a_refusal_answered_during_the_outage_is_explained() {
        let mut lines = base(3);
        lines.push(event(3.5, "kill", Some("i1")));
        lines.push(event(8_000.0, "redis_stop", None));
        lines.push(event(10_000.0, "redis_start", None));
        // Held from 4 ms until 9 s, then refused: Redis was gone by then.
        let mut held = resume(4.0, "s", false, Some("session store unavailable"));
        held["answered_ms"] = json!(9_000.0);
        lines.push(held);
        let report = run(&lines);
        assert_eq!(report.violations, vec![]);
        // Refused at once, before the outage: not explained.
        let mut lines = base(3);
        lines.push(event(8_000.0, "redis_stop", None));
        lines.push(event(10_000.0, "redis_start", None));
        lines.push(resume(4.0, "s", false, Some("session store unavailable")));
        assert_eq!(run(&lines).violations.len(), 1);
    }

    #[test]
    fn a_session_resumed_after_a_failure_is_not_lost() {
        let mut lines = base(3);
        lines.push(call("s", "c2"));
        lines.push(resume(4.0, "s", false, Some(UNREACHABLE)));
        lines.push(resume(9.0, "s", true, None));
        lines.push(recv(2, 9.5, "s", 4, "HAI", None));
        lines.push(recv(2, 9.6, "s", 5, "TOOL_DONE", Some("c2")));
        let report = run(&lines);
        assert_eq!(report.violations.len(), 1, "{:?}", report.violations);
        assert_eq!(report.dones.get("OK"), Some(&2));
    }

    #[test]
    fn malformed_lines_are_reported_not_fatal() {
        let report = check(vec![
            ("a:1".to_owned(), "{not json"),
            ("a:2".to_owned(), r#"{"t":"recv"}"#),
            ("a:3".to_owned(), r#"{"t":"mystery"}"#),
            ("a:4".to_owned(), ""),
        ]);
        assert_eq!(report.violations.len(), 3, "{:?}", report.violations);
        assert!(
            report.violations[0]
                .detail
                .starts_with("malformed history line a:1")
        );
        let json = report.to_json();
        assert_eq!(json["violations"].as_array().map(Vec::len), Some(3));
        assert!(report.render().contains("violations:    3"));
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), 50.0);
        assert_eq!(percentile(&values, 99.0), 99.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}

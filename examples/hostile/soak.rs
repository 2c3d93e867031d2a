//! The soak: calls at `--rate` per second for `--duration` seconds from
//! `--count` client sessions (16 by default), mixing `echo`, `process_file`
//! (some cancelled), abrupt disconnects and resumptions, and counting every
//! `TOOL_DONE` that does not come back.
//!
//! The disconnects are regular, not random: every client vanishes (no close
//! frame) every 9 s ± 1 s on a schedule fixed from the start, reconnects after
//! up to 0.5 s and resumes its session, except on every tenth disconnect, when
//! it walks away and starts a new session. The clients are staggered so that
//! they walk away in turn, one every 90 s / `--count`. A walked-away session
//! stays parked on the server, holding its replay window, for
//! `replay_window_time` (5 min); with regular walk-aways the number of parked
//! sessions, and so the server's retained memory, holds steady once the first
//! of them expire, instead of wandering with the luck of the draw.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::Args;
use crate::http::stats;
use crate::wire::{Got, Rng, close, describe, kind, open, recv, round3, seq_of};

#[derive(Default, Clone)]
struct SoakTotals {
    sent: u64,
    dones: u64,
    undelivered: u64,
    abandoned_calls: u64,
    lost: u64,
    lost_to_failed_resume: u64,
    duplicate_dones: u64,
    slow_calls: u64,
    cancels_sent: u64,
    disconnects: u64,
    resumptions: u64,
    resume_failures: u64,
    abandons: u64,
    unexpected_closes: u64,
    connect_failures: u64,
    replayed: u64,
    dones_replayed: u64,
    outstanding_at_disconnect: u64,
    statuses: BTreeMap<String, u64>,
    first_problems: Vec<String>,
}

impl SoakTotals {
    fn add(&mut self, o: &SoakTotals) {
        self.sent += o.sent;
        self.dones += o.dones;
        self.undelivered += o.undelivered;
        self.abandoned_calls += o.abandoned_calls;
        self.lost += o.lost;
        self.lost_to_failed_resume += o.lost_to_failed_resume;
        self.duplicate_dones += o.duplicate_dones;
        self.slow_calls += o.slow_calls;
        self.cancels_sent += o.cancels_sent;
        self.disconnects += o.disconnects;
        self.resumptions += o.resumptions;
        self.resume_failures += o.resume_failures;
        self.abandons += o.abandons;
        self.unexpected_closes += o.unexpected_closes;
        self.connect_failures += o.connect_failures;
        self.replayed += o.replayed;
        self.dones_replayed += o.dones_replayed;
        self.outstanding_at_disconnect += o.outstanding_at_disconnect;
        for (k, v) in &o.statuses {
            *self.statuses.entry(k.clone()).or_default() += v;
        }
        for p in &o.first_problems {
            if self.first_problems.len() < 8 {
                self.first_problems.push(p.clone());
            }
        }
    }

    fn problem(&mut self, p: String) {
        if self.first_problems.len() < 8 {
            self.first_problems.push(p);
        }
    }
}

struct Pending {
    seq: u64,
    cancel_at: Option<Instant>,
}

/// Most calls a soak worker keeps outstanding (below `max_inflight_calls`).
const SOAK_MAX_PENDING: usize = 48;

/// How often each soak client disconnects, and by how much either way a
/// disconnect may come early or late.
const SOAK_DISCONNECT_PERIOD_MS: u64 = 9000;
const SOAK_DISCONNECT_JITTER_MS: u64 = 1000;
/// Each soak client walks away on every this many disconnects (and resumes on
/// the others).
const SOAK_WALK_AWAY_EVERY: u64 = 10;
/// Shortest connection, when a slow reconnection put a client behind its schedule.
const SOAK_MIN_CONNECTED: Duration = Duration::from_secs(1);

/// When a soak client disconnects, and which of its disconnects are walk-aways.
///
/// Disconnect `i` (from 1) of a client is due at `phase + i` periods after the
/// soak started (± the jitter), however long its reconnections took, and is
/// a walk-away when `i` modulo [`SOAK_WALK_AWAY_EVERY`] is `walk_away_at`.
/// Client `w` of `W` is offset by `w / W` of the walk-away cycle (ten
/// periods): its walk-aways come about `(w / W + k) × 90 s` after the start
/// (the first at least one period in), so the clients take turns and, from
/// the first turn on, one session is walked away from every 90 s / `W`.
#[derive(Clone, Copy)]
struct Schedule {
    started: Instant,
    /// Where in the period this client's disconnects fall, in ms.
    phase_ms: u64,
    /// Which of each [`SOAK_WALK_AWAY_EVERY`] disconnects is a walk-away.
    walk_away_at: u64,
}

impl Schedule {
    fn new(started: Instant, worker: usize, workers: usize) -> Schedule {
        let cycle_ms = SOAK_DISCONNECT_PERIOD_MS * SOAK_WALK_AWAY_EVERY;
        let offset_ms = cycle_ms * worker as u64 / workers.max(1) as u64;
        Schedule {
            started,
            phase_ms: offset_ms % SOAK_DISCONNECT_PERIOD_MS,
            walk_away_at: offset_ms / SOAK_DISCONNECT_PERIOD_MS,
        }
    }

    /// When disconnect `i` (from 1) is due, with a fresh jitter.
    fn disconnect_at(&self, i: u64, rng: &mut Rng) -> Instant {
        // i ≥ 1, so the period covers the jitter taken off.
        let ms = self.phase_ms + SOAK_DISCONNECT_PERIOD_MS * i.max(1) - SOAK_DISCONNECT_JITTER_MS
            + rng.below(2 * SOAK_DISCONNECT_JITTER_MS + 1);
        self.started + Duration::from_millis(ms)
    }

    /// Whether disconnect `i` (from 1) is a walk-away.
    fn walks_away(&self, i: u64) -> bool {
        i % SOAK_WALK_AWAY_EVERY == self.walk_away_at
    }
}

/// Handles one envelope of the current session: seq bookkeeping and `TOOL_DONE`s.
fn soak_receive(
    v: &Value,
    session: &str,
    last_rx: &mut u64,
    pending: &mut HashMap<String, Pending>,
    t: &mut SoakTotals,
) -> bool {
    if v["session"] != session {
        return false;
    }
    let Some(seq) = seq_of(v) else { return false };
    if seq <= *last_rx {
        return false;
    }
    *last_rx = seq;
    if kind(v) == "TOOL_DONE" {
        let id = v["payload"]["call_id"].as_str().unwrap_or("");
        if pending.remove(id).is_some() {
            t.dones += 1;
            *t.statuses.entry(describe(v)).or_default() += 1;
        } else {
            t.duplicate_dones += 1;
            t.problem(format!("TOOL_DONE for unknown or finished call {id}"));
        }
    }
    true
}

async fn soak_worker(
    url: String,
    worker: usize,
    rate: f64,
    slow_every: u64,
    schedule: Schedule,
    deadline: Instant,
) -> SoakTotals {
    let mut t = SoakTotals::default();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((worker as u64 + 1) * 0x1000_0000_01b3));
    let mut session: Option<String> = None;
    let mut next_seq = 0u64;
    let mut last_rx = 0u64;
    let mut pending: HashMap<String, Pending> = HashMap::new();
    let mut n = 0u64;
    let mut tokens = 0.0f64;
    let mut draining = false;
    'connections: loop {
        if Instant::now() >= deadline && (session.is_none() || pending.is_empty()) {
            break;
        }
        let (ws, hai) = match open(&url).await {
            Ok(x) => x,
            Err(e) => {
                t.connect_failures += 1;
                t.problem(format!("connect: {e}"));
                if t.connect_failures > 50 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let fresh = hai["session"].as_str().unwrap_or("").to_owned();
        let (mut sink, mut stream) = ws.split();
        if let Some(old) = session.clone() {
            next_seq += 1;
            let resume = json!({
                "type": "HAI", "session": old, "seq": next_seq.to_string(),
                "payload": {"last_rx_seq": last_rx.to_string()}
            })
            .to_string();
            if sink.send(Message::text(resume)).await.is_err() {
                t.unexpected_closes += 1;
                continue;
            }
            let until = Instant::now() + Duration::from_secs(15);
            let outcome = loop {
                let left = until.saturating_duration_since(Instant::now());
                match recv(&mut stream, left).await {
                    Got::Envelope(v, _)
                        if kind(&v) == "HAI"
                            && v["session"] == old.as_str()
                            && v["payload"]["last_rx_seq"].is_string() =>
                    {
                        break Ok(v["payload"]["last_rx_seq"]
                            .as_str()
                            .and_then(|s| s.parse::<u64>().ok())
                            .unwrap_or(0));
                    }
                    Got::Envelope(v, _)
                        if kind(&v) == "ERROR" && v["payload"]["code"] == "RESUME_FAILED" =>
                    {
                        break Err(describe(&v));
                    }
                    Got::Envelope(v, _) => {
                        let dones = t.dones;
                        if soak_receive(&v, &old, &mut last_rx, &mut pending, &mut t) {
                            t.replayed += 1;
                            t.dones_replayed += t.dones - dones;
                        }
                    }
                    other => break Err(other.describe_end()),
                }
            };
            match outcome {
                Ok(processed) => {
                    t.resumptions += 1;
                    // Calls the server never processed were never accepted.
                    let before = pending.len();
                    pending.retain(|_, p| p.seq <= processed);
                    t.undelivered += (before - pending.len()) as u64;
                }
                Err(e) => {
                    t.resume_failures += 1;
                    t.problem(format!("resume failed: {e}"));
                    t.lost_to_failed_resume += pending.len() as u64;
                    pending.clear();
                    session = Some(fresh.clone());
                    last_rx = 1;
                }
            }
        } else {
            session = Some(fresh.clone());
            last_rx = seq_of(&hai).unwrap_or(1);
            next_seq = 0;
        }
        let current = session.clone().unwrap_or_default();
        // The next disconnect on the schedule (a connection that broke keeps its turn).
        let disconnect_at = schedule
            .disconnect_at(t.disconnects + 1, &mut rng)
            .max(Instant::now() + SOAK_MIN_CONNECTED)
            .min(deadline);
        let mut tick = tokio::time::interval(Duration::from_millis(5));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut last_tick = Instant::now();
        // Run until it is time to disconnect (or, at the end, until drained).
        let broken = loop {
            tokio::select! {
                _ = tick.tick() => {
                    let now = Instant::now();
                    if !draining && now >= deadline {
                        draining = true;
                    }
                    if draining {
                        if pending.is_empty() || now >= deadline + Duration::from_secs(15) {
                            break None;
                        }
                    } else if now >= disconnect_at {
                        break None;
                    }
                    let dt = now.duration_since(last_tick).as_secs_f64();
                    last_tick = now;
                    let mut wrote = false;
                    if !draining {
                        tokens = (tokens + rate * dt).min(rate * 0.05 + 1.0);
                        while tokens >= 1.0 && pending.len() < SOAK_MAX_PENDING {
                            tokens -= 1.0;
                            n += 1;
                            next_seq += 1;
                            let call_id = format!("w{worker}-{n}");
                            let slow = n.is_multiple_of(slow_every);
                            let (tool, params) = if slow {
                                ("process_file", r#"{"filename":"soak.txt","operation":"count"}"#)
                            } else {
                                ("echo", r#"{"message":"soak"}"#)
                            };
                            let text = format!(
                                r#"{{"seq":"{next_seq}","type":"TOOL_CALL","payload":{{"call_id":"{call_id}","tool":"{tool}","params":{params}}}}}"#
                            );
                            let cancel_at = (slow && rng.below(2) == 0).then(|| now + Duration::from_millis(rng.below(1200)));
                            if sink.feed(Message::text(text)).await.is_err() {
                                break;
                            }
                            wrote = true;
                            t.sent += 1;
                            t.slow_calls += u64::from(slow);
                            pending.insert(call_id, Pending { seq: next_seq, cancel_at });
                        }
                    }
                    let due: Vec<String> = pending
                        .iter()
                        .filter(|(_, p)| p.cancel_at.is_some_and(|at| at <= now))
                        .map(|(id, _)| id.clone())
                        .collect();
                    for id in due {
                        if let Some(p) = pending.get_mut(&id) {
                            p.cancel_at = None;
                        }
                        next_seq += 1;
                        let text = format!(
                            r#"{{"seq":"{next_seq}","type":"TOOL_CANCEL","payload":{{"call_id":"{id}","reason":"soak"}}}}"#
                        );
                        if sink.feed(Message::text(text)).await.is_err() {
                            break;
                        }
                        wrote = true;
                        t.cancels_sent += 1;
                    }
                    if wrote && let Err(e) = sink.flush().await {
                        break Some(format!("flush: {e}"));
                    }
                }
                got = recv(&mut stream, Duration::from_secs(3600)) => match got {
                    Got::Envelope(v, _) => {
                        soak_receive(&v, &current, &mut last_rx, &mut pending, &mut t);
                    }
                    Got::Timeout => {}
                    other => break Some(other.describe_end()),
                }
            }
        };
        if let Some(e) = broken {
            t.unexpected_closes += 1;
            t.problem(format!("connection ended unexpectedly: {e}"));
            continue 'connections;
        }
        if draining {
            t.lost += pending.len() as u64;
            for id in pending.keys().take(3) {
                let id = id.clone();
                t.problem(format!("no TOOL_DONE for {id} by the end"));
            }
            pending.clear();
            if let Ok(ws) = sink.reunite(stream) {
                close(ws).await;
            }
            break;
        }
        // Vanish mid-call: no close frame; the session is parked.
        drop(sink);
        drop(stream);
        t.disconnects += 1;
        t.outstanding_at_disconnect += pending.len() as u64;
        if schedule.walks_away(t.disconnects) {
            // Walk away for good: those calls' TOOL_DONEs go to the parked session.
            t.abandons += 1;
            t.abandoned_calls += pending.len() as u64;
            pending.clear();
            session = None;
        }
        tokio::time::sleep(Duration::from_millis(rng.below(500))).await;
    }
    t
}

pub(crate) async fn soak(args: &Args) -> Result<Value, String> {
    let duration = args.duration.unwrap_or(Duration::from_secs(600));
    let rate = args.rate.unwrap_or(1000.0);
    let workers = args.count.unwrap_or(16).clamp(1, 256);
    // About 20 slow (1 s) calls a second in all, half of them cancelled.
    let slow_every = ((rate / 20.0).round() as u64).max(2);
    let started = Instant::now();
    let deadline = started + duration;
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let addr = args.addr.clone();
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let mut samples = Vec::new();
            while !stop.load(Ordering::Relaxed) && samples.len() < 400 {
                if let Some(s) = stats(&addr).await {
                    samples.push(json!({
                        "t": round3(started.elapsed().as_secs_f64()),
                        "replayBytes": s["replayBytes"],
                        "detachedSessions": s["detachedSessions"],
                        "activeConnections": s["activeConnections"],
                        "outboundBytes": s["outboundBytes"],
                        "activeCalls": s["toolExecutions"]["active"],
                    }));
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            samples
        })
    };
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            tokio::spawn(soak_worker(
                args.url.clone(),
                w,
                rate / workers as f64,
                slow_every,
                Schedule::new(started, w, workers),
                deadline,
            ))
        })
        .collect();
    let mut totals = SoakTotals::default();
    for task in tasks {
        match task.await {
            Ok(t) => totals.add(&t),
            Err(e) => totals.problem(format!("worker task: {e}")),
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let samples = sampler.await.unwrap_or_default();
    let end = stats(&args.addr).await.unwrap_or(Value::Null);
    let accepted = totals.sent - totals.undelivered;
    let lost = totals.lost + totals.lost_to_failed_resume;
    let summary = format!(
        "{accepted} calls accepted at {:.0}/s ({} slow, {} cancels), {} TOOL_DONEs, {lost} lost; {} disconnects: {} resumed, {} resume failures, {} walked away ({} calls left to parked sessions); {} unexpected closes",
        totals.sent as f64 / duration.as_secs_f64(),
        totals.slow_calls,
        totals.cancels_sent,
        totals.dones,
        totals.disconnects,
        totals.resumptions,
        totals.resume_failures,
        totals.abandons,
        totals.abandoned_calls,
        totals.unexpected_closes,
    );
    Ok(json!({
        "attack": "soak",
        "name": "soak",
        "attacker_got": summary,
        "seconds": round3(seconds),
        "target_rate": rate,
        "achieved_rate": round3(totals.sent as f64 / duration.as_secs_f64()),
        "workers": workers,
        "accepted_calls": accepted,
        "tool_dones": totals.dones,
        "lost_tool_dones": lost,
        "lost_at_end": totals.lost,
        "lost_to_failed_resume": totals.lost_to_failed_resume,
        "sent_calls": totals.sent,
        "undelivered_calls": totals.undelivered,
        "abandoned_calls": totals.abandoned_calls,
        "duplicate_tool_dones": totals.duplicate_dones,
        "slow_calls": totals.slow_calls,
        "cancels_sent": totals.cancels_sent,
        "statuses": totals.statuses,
        "disconnects": totals.disconnects,
        "resumptions": totals.resumptions,
        "resume_failures": totals.resume_failures,
        "abandons": totals.abandons,
        "replayed_envelopes": totals.replayed,
        "tool_dones_replayed": totals.dones_replayed,
        "outstanding_at_disconnect": totals.outstanding_at_disconnect,
        "unexpected_closes": totals.unexpected_closes,
        "connect_failures": totals.connect_failures,
        "first_problems": totals.first_problems,
        "stats_samples": samples,
        "stats_end": end,
    }))
}

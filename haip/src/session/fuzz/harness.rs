//! The harness: one session played through its transport and its client,
//! and the checks of what it commits.

use super::*;

/// A `TOOL_CALL` that reached dispatch (docs/protocol.md §2.2 step 6 onwards), as the
/// oracle sees it.
#[derive(Debug)]
pub(super) struct CallUnit {
    /// Its call id (§6.4 step 1); `None` when the server makes one up.
    pub(super) call_id: Option<String>,
    /// The `run_id` / `thread_id` every envelope about it carries (§6.9).
    pub(super) run_id: Option<String>,
    pub(super) thread_id: Option<String>,
    /// Whether `tool` names a registered tool.
    pub(super) registered: bool,
    /// What it was refused with, if anything.
    pub(super) duplicate: bool,
    pub(super) dropped: bool,
    /// Whether it must be refused as a duplicate, when the harness could tell
    /// (everything the session said so far was committed and seen).
    pub(super) expect_duplicate: Option<bool>,
    /// The unit, for failure messages.
    pub(super) text: String,
}

impl CallUnit {
    /// Accepted: neither a duplicate (§6.4 step 2) nor dropped by strict flow
    /// control (§12.3). Every accepted call is owed exactly one `TOOL_DONE`.
    pub(super) fn accepted(&self) -> bool {
        !self.duplicate && !self.dropped
    }
}

/// An envelope waiting for its binary frame (docs/protocol.md §13), as modelled.
pub(super) struct Awaiting {
    pub(super) inbound: Inbound,
    pub(super) expected: u64,
    /// Whether its id was fresh when it arrived.
    pub(super) fresh: bool,
    /// When it arrived (the session's clock): the frame is due 10 s later.
    pub(super) since: std::time::Instant,
}

/// A session with no socket, the transport and client around it, and the
/// oracle: a model of which `TOOL_CALL`s are accepted, checked against what
/// the session commits.
///
/// Which unit an `ERROR` is about: the one whose envelope id is its
/// `related_id`, when that id was fresh. A unit without a fresh id is
/// bracketed by draining the outbox before and after it: `ERROR`s go out on
/// `SYSTEM`, which is never paused or held for credit, so everything such a
/// unit causes on `SYSTEM` is committed in between.
pub(super) struct Run {
    pub(super) session: Session,
    pub(super) events_tx: mpsc::UnboundedSender<CallEvent>,
    pub(super) events: mpsc::UnboundedReceiver<CallEvent>,
    pub(super) shared: Arc<Shared>,
    /// The session's clock: moved with the runtime's paused one.
    pub(super) clock: Arc<FakeClock>,
    pub(super) gate: Arc<Semaphore>,
    pub(super) websocket: bool,
    /// Fresh committed envelopes, in `seq` order.
    pub(super) out: Vec<Value>,
    /// Every committed text by `seq`, to check replays byte for byte.
    pub(super) texts: HashMap<u64, Bytes>,
    pub(super) newest: u64,
    pub(super) awaiting: Option<Awaiting>,
    /// Envelope ids of every unit sent.
    pub(super) seen_ids: HashSet<String>,
    pub(super) calls: Vec<CallUnit>,
    /// Fresh envelope id → the call it names.
    pub(super) by_related: HashMap<String, usize>,
    /// The call being bracketed by drains.
    pub(super) window: Option<usize>,
    /// Committed `TOOL_DONE`s per call id.
    pub(super) dones: HashMap<String, usize>,
    /// `BINARY_FRAME_ERROR`s owed: one per awaited envelope discarded.
    pub(super) frame_errors: usize,
}

impl Run {
    pub(super) fn new(config: Config, websocket: bool) -> Result<Run, String> {
        config
            .validate()
            .map_err(|e| format!("the fuzzed configuration is invalid: {e}"))?;
        let gate = Arc::new(Semaphore::new(0));
        let registry = Registry::default();
        for tool in builtin::tools().into_iter().chain(fuzz_tools(&gate)) {
            registry.register(tool);
        }
        let clock = Arc::new(FakeClock::new());
        let shared = Shared::new(config, registry, Default::default())
            .with_time(clock.clone(), Arc::new(RandomIds));
        let shared = Arc::new(shared);
        let (tx, events) = mpsc::unbounded_channel();
        let door = if websocket {
            Door::WebSocket
        } else {
            Door::Stream
        };
        let session = Session::new(Arc::clone(&shared), door, None);
        let mut run = Run {
            session,
            events_tx: tx,
            events,
            shared,
            clock,
            gate,
            websocket,
            out: Vec::new(),
            texts: HashMap::new(),
            newest: 0,
            awaiting: None,
            seen_ids: HashSet::new(),
            calls: Vec::new(),
            by_related: HashMap::new(),
            window: None,
            dones: HashMap::new(),
            frame_errors: 0,
        };
        run.drain()?;
        ensure!(
            run.out.len() == 1 && run.out[0]["type"] == "HAI",
            "the server does not speak first with HAI: {:?}",
            run.out
        );
        Ok(run)
    }

    pub(super) fn config(&self) -> &Config {
        &self.shared.config
    }

    // ----- inbound ----------------------------------------------------------

    /// One inbound text message.
    pub(super) fn text(&mut self, text: &str) -> Result<(), String> {
        self.unit(text, None)
    }

    /// One inbound binary message (WebSocket only: streams have none).
    pub(super) fn binary(&mut self, bytes: &[u8]) -> Result<(), String> {
        if !self.websocket {
            return Ok(());
        }
        if bytes.len() > self.config().max_message_bytes {
            let control = self.session.handle_oversized_message();
            return self.after(control);
        }
        if let Some(awaiting) = self.awaiting.take() {
            // The frame an envelope waits for: handled if the length
            // matches, else both are discarded with an error.
            let matches = bytes.len() as u64 == awaiting.expected;
            if !matches {
                self.frame_errors += 1;
            }
            let control = if matches && awaiting.inbound.event == EventType::ToolCall {
                self.dispatch(awaiting.inbound, awaiting.fresh, |s| s.handle_binary(bytes))?
            } else {
                self.session.handle_binary(bytes)
            };
            return self.after(control);
        }
        // Nothing awaited: an envelope sent as binary is handled as text.
        if is_binary_envelope(bytes)
            && let Ok(text) = std::str::from_utf8(bytes)
        {
            return self.unit(text, Some(bytes));
        }
        let control = self.session.handle_binary(bytes);
        self.after(control)
    }

    /// A text unit, arrived as text or (`frame`) as a binary message.
    pub(super) fn unit(&mut self, text: &str, frame: Option<&[u8]>) -> Result<(), String> {
        let limit = self.config().max_message_bytes;
        if text.len() > limit {
            // docs/protocol.md §2.2 step 1 is the transport's.
            let control = self.session.handle_oversized_message();
            return self.after(control);
        }
        // Text where a frame was due ends the wait (docs/protocol.md §13).
        self.frame_missing();
        let mut call = None;
        if let Ok(inbound) = decode(text) {
            let fresh = self.fresh_id(inbound.id.as_deref())?;
            if self.websocket
                && let Some(expected) = inbound.bin_len
                && !inbound.payload.contains_key("data")
            {
                // Larger than any message may be: MESSAGE_TOO_LARGE, not awaited.
                if expected <= limit as u64 {
                    self.awaiting = Some(Awaiting {
                        inbound,
                        expected,
                        fresh,
                        since: self.clock.now(),
                    });
                }
            } else if inbound.event == EventType::ToolCall {
                call = Some((inbound, fresh));
            }
        }
        let control = match call {
            Some((inbound, fresh)) => self.dispatch(inbound, fresh, |s| match frame {
                Some(bytes) => s.handle_binary(bytes),
                None => s.handle_text(text),
            })?,
            None => match frame {
                Some(bytes) => self.session.handle_binary(bytes),
                None => self.session.handle_text(text),
            },
        };
        self.after(control)
    }

    /// The awaited envelope, if any, is discarded for want of its frame.
    pub(super) fn frame_missing(&mut self) {
        if self.awaiting.take().is_some() {
            self.frame_errors += 1;
        }
    }

    /// Whether `id` tells this unit's `ERROR`s apart from every other unit's.
    /// Reusing the id of a call first settles what that call caused.
    pub(super) fn fresh_id(&mut self, id: Option<&str>) -> Result<bool, String> {
        let Some(id) = id else {
            return Ok(false);
        };
        if self.by_related.contains_key(id) {
            self.drain()?;
            self.by_related.remove(id);
        }
        Ok(self.seen_ids.insert(id.to_owned()))
    }

    /// Hands a `TOOL_CALL` to the session through `handle`, recording what
    /// the oracle needs about it.
    pub(super) fn dispatch(
        &mut self,
        inbound: Inbound,
        fresh: bool,
        handle: impl FnOnce(&mut Session) -> Control,
    ) -> Result<Control, String> {
        let index = self.calls.len();
        match inbound.id.as_deref() {
            Some(id) if fresh => {
                self.by_related.insert(id.to_owned(), index);
            }
            _ => {
                self.drain()?;
                self.window = Some(index);
            }
        }
        let payload = &inbound.payload;
        // docs/protocol.md §6.4 step 1.
        let call_id = match payload.get("call_id") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => inbound.id.clone(),
        };
        // Nothing uncommitted: every TOOL_DONE issued so far has been seen,
        // so whether the call id is held by an active call is known.
        let expect_duplicate = match &call_id {
            None => Some(false),
            Some(id) if self.session.backlog() == Backlog::default() => Some(self.active(id)),
            Some(_) => None,
        };
        let run_id = match payload.get("run_id") {
            Some(Value::String(r)) if inbound.run_id.is_none() => Some(r.clone()),
            _ => inbound.run_id.clone(),
        };
        let registered = match payload.get("tool") {
            Some(Value::String(name)) => self.shared.registry.get(name).is_some(),
            _ => false,
        };
        let text = clip(&Value::Object(payload.clone()).to_string(), 200);
        self.calls.push(CallUnit {
            call_id,
            run_id,
            thread_id: inbound.thread_id.clone(),
            registered,
            duplicate: false,
            dropped: false,
            expect_duplicate,
            text,
        });
        let control = handle(&mut self.session);
        if self.window.is_some() {
            self.drain()?;
            self.window = None;
        }
        Ok(control)
    }

    /// Whether an accepted call with this id has no committed `TOOL_DONE` yet.
    pub(super) fn active(&self, call_id: &str) -> bool {
        let accepted = self
            .calls
            .iter()
            .filter(|c| c.call_id.as_deref() == Some(call_id) && c.accepted())
            .count();
        accepted > self.dones.get(call_id).copied().unwrap_or(0)
    }

    /// What the transport does with a `Control`. A resumption finds no such
    /// session, so the connection stays (docs/protocol.md §11.3). A `Close` is left
    /// alone: the session must keep its promises whatever its transport does
    /// (a kept session is resumed and fed again), so feeding continues.
    pub(super) fn after(&mut self, control: Control) -> Result<(), String> {
        if let Control::Resume(request) = control {
            self.session.handle_resume_refused(
                crate::session::ResumeRefused::UnknownSession,
                request.related_id.as_deref(),
                &request.hai,
            );
        }
        self.check()
    }

    /// Invariants that hold between any two steps.
    pub(super) fn check(&self) -> Result<(), String> {
        let backlog = self.session.backlog();
        let gauge = self.shared.stats.outbound_bytes.load(Relaxed);
        ensure!(
            gauge <= backlog.bytes as u64,
            "outboundBytes {gauge} exceeds the session's backlog {backlog:?}"
        );
        match self.session.overflow() {
            Some(Overflow::Queue) => ensure!(
                backlog.envelopes > self.config().max_outbound_queue,
                "queue overflow reported with {backlog:?}"
            ),
            Some(Overflow::Bytes) => ensure!(
                backlog.bytes > self.config().max_outbound_bytes,
                "byte overflow reported with {backlog:?}"
            ),
            None => {}
        }
        ensure!(
            self.session.is_awaiting_binary() == self.awaiting.is_some(),
            "the session {} a binary frame, the model says otherwise",
            if self.session.is_awaiting_binary() {
                "awaits"
            } else {
                "does not await"
            }
        );
        Ok(())
    }

    /// Does what the session asked, as the driver would: its calls and
    /// validations go to the call runner (keep-alives go nowhere).
    pub(super) fn act(&mut self) {
        let runner = self.shared.runner.clone();
        while let Some(action) = self.session.poll_action() {
            match action {
                Action::Start(start) => {
                    if let Some((key, outcome)) = runner.start(*start, &self.events_tx) {
                        self.session.handle_event(CallEvent::Finished(key, outcome));
                    }
                }
                Action::Validate(validate) => runner.start_validation(*validate, &self.events_tx),
                Action::KeepAlive => {}
            }
        }
    }

    /// Feeds every call event that is ready.
    pub(super) fn pump(&mut self) {
        self.act();
        while let Ok(event) = self.events.try_recv() {
            self.session.handle_event(event);
            self.act();
        }
    }

    /// Lets `by` pass on the session's clock (the runtime's has already)
    /// and handles the deadlines due: timeouts, grace periods, the binary
    /// frame wait, heartbeats.
    pub(super) fn elapse(&mut self, by: Duration) -> Result<(), String> {
        self.clock.advance(by);
        let now = self.clock.now();
        let control = self.session.handle_timeout(now);
        if self
            .awaiting
            .as_ref()
            .is_some_and(|a| now >= a.since + crate::session::timers::BINARY_FRAME_WAIT)
        {
            self.frame_missing();
        }
        self.act();
        self.after(control)
    }

    // ----- outbound ---------------------------------------------------------

    /// Commits and checks everything that may go out.
    pub(super) fn drain(&mut self) -> Result<(), String> {
        self.act();
        while let Some(text) = self.session.poll_transmit() {
            self.observe(text)?;
        }
        Ok(())
    }

    pub(super) fn observe(&mut self, text: Bytes) -> Result<(), String> {
        let v = check_envelope(&text, self.session.id())?;
        let seq: u64 = v["seq"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("unreadable seq in {v}"))?;
        if seq <= self.newest {
            // A replay (docs/protocol.md §11.2): the very bytes committed before.
            ensure!(
                self.texts.get(&seq) == Some(&text),
                "re-sent envelope {seq} differs from the one committed"
            );
            return Ok(());
        }
        ensure!(
            seq == self.newest + 1,
            "seq gap: {seq} committed after {}",
            self.newest
        );
        let limit = self.config().max_outbound_message_bytes;
        ensure!(
            text.len() <= limit,
            "a {}-byte envelope exceeds max_outbound_message_bytes {limit}",
            text.len()
        );
        self.newest = seq;
        self.texts.insert(seq, text);
        match v["type"].as_str() {
            Some("ERROR") => self.attribute(&v)?,
            Some("TOOL_DONE") => {
                if let Some(id) = v["payload"]["call_id"].as_str() {
                    *self.dones.entry(id.to_owned()).or_default() += 1;
                }
            }
            _ => {}
        }
        self.out.push(v);
        Ok(())
    }

    /// Notes a duplicate or flow-control refusal on the call it is about.
    pub(super) fn attribute(&mut self, v: &Value) -> Result<(), String> {
        let p = &v["payload"];
        let duplicate =
            p["code"] == "INVALID_MESSAGE" && p["detail"]["reason"] == "duplicate call_id";
        let dropped = p["code"] == ErrorCode::FLOW_CONTROL_VIOLATION.as_str();
        if !duplicate && !dropped {
            return Ok(());
        }
        let about = self.window.or_else(|| {
            p["related_id"]
                .as_str()
                .and_then(|id| self.by_related.get(id).copied())
        });
        let Some(index) = about else {
            // Strict flow control drops other envelopes too.
            ensure!(
                !duplicate,
                "a duplicate-call_id ERROR about no TOOL_CALL: {v}"
            );
            return Ok(());
        };
        let call = &mut self.calls[index];
        if duplicate {
            ensure!(
                !call.duplicate && !call.dropped,
                "a second refusal for TOOL_CALL {}: {v}",
                call.text
            );
            ensure!(
                p["detail"]["call_id"].as_str() == call.call_id.as_deref(),
                "duplicate ERROR names another call id than TOOL_CALL {}: {v}",
                call.text
            );
            call.duplicate = true;
        } else {
            ensure!(
                !call.duplicate && !call.dropped,
                "a second refusal for TOOL_CALL {}: {v}",
                call.text
            );
            call.dropped = true;
        }
        Ok(())
    }

    // ----- the end ----------------------------------------------------------

    /// Winds everything down and checks the whole conversation.
    pub(super) async fn finish(mut self, shutdown: bool) -> Result<(), String> {
        // The transport's wait for a frame runs out.
        self.session.handle_missing_binary();
        self.frame_missing();
        if shutdown {
            self.session.handle_shutdown();
        } else {
            self.gate.close();
        }
        // The client resumes every channel and, since strict flow control
        // holds outbound envelopes for want of client credit (a client HAI
        // may advertise none), grants plenty. Each on a fresh channel name,
        // so that its own inbound credit cannot be short.
        for (i, channel) in ["AGENT", "USER", "AUDIO_IN", "AUDIO_OUT"]
            .into_iter()
            .enumerate()
        {
            let resume = json!({"channel": format!("fin-r{i}"), "type": "RESUME_CHANNEL",
                "payload": {"channel": channel}});
            let grant = json!({"channel": format!("fin-g{i}"), "type": "FLOW_UPDATE",
                "payload": {"channel": channel, "add_messages": u64::MAX, "add_bytes": u64::MAX}});
            self.text(&resume.to_string())?;
            self.text(&grant.to_string())?;
        }
        let mut waited = Duration::ZERO;
        loop {
            self.pump();
            self.drain()?;
            if self.session.is_idle() {
                break;
            }
            // A call event, or else the session's next deadline (its calls'
            // timeouts and grace periods), the two clocks moving together.
            let until = self
                .session
                .poll_timeout()
                .map_or(HANG, |at| at.saturating_duration_since(self.clock.now()))
                .min(HANG.saturating_sub(waited));
            let started = tokio::time::Instant::now();
            let event = tokio::time::timeout(until, self.events.recv()).await;
            let passed = started.elapsed();
            waited += passed;
            match event {
                Ok(Some(event)) => self.session.handle_event(event),
                Ok(None) => return Err("the call event channel closed".into()),
                Err(_) if waited < HANG => {}
                Err(_) => {
                    let owed: Vec<&str> = self
                        .calls
                        .iter()
                        .filter(|c| c.accepted())
                        .map(|c| c.text.as_str())
                        .collect();
                    return Err(format!(
                        "calls never end: not idle an hour (paused clock) after the wind-down; accepted: {owed:?}"
                    ));
                }
            }
            self.elapse(passed)?;
        }
        // No call is active now, and the client resumed every channel: this
        // changes nothing, unless a resume was lost (then the check below
        // would blame the wind-down, not the session).
        self.session.handle_shutdown();
        self.drain()?;
        let backlog = self.session.backlog();
        ensure!(
            backlog == Backlog::default() && !self.session.has_outbound(),
            "envelopes left in the outbox after the wind-down: {backlog:?}"
        );
        let gauge = self.shared.stats.outbound_bytes.load(Relaxed);
        ensure!(gauge == 0, "outboundBytes is {gauge} with nothing waiting");
        self.verify()?;
        let Run {
            session, shared, ..
        } = self;
        drop(session);
        let gauge = shared.stats.outbound_bytes.load(Relaxed);
        ensure!(
            gauge == 0,
            "outboundBytes is {gauge} after the session is gone"
        );
        let replay = shared.replay.used();
        ensure!(
            replay == 0,
            "the replay budget still counts {replay} bytes after the session is gone"
        );
        Ok(())
    }

    /// Exactly one `TOOL_DONE` per accepted call, after its updates; the
    /// duplicate refusals where they were predictable; one
    /// `BINARY_FRAME_ERROR` per envelope whose frame did not come.
    pub(super) fn verify(&self) -> Result<(), String> {
        let frame_errors = self
            .out
            .iter()
            .filter(|v| v["type"] == "ERROR" && v["payload"]["code"] == "BINARY_FRAME_ERROR")
            .count();
        ensure!(
            frame_errors == self.frame_errors,
            "{frame_errors} BINARY_FRAME_ERRORs for {} envelopes whose frame did not come",
            self.frame_errors
        );
        for call in &self.calls {
            ensure!(
                call.call_id.is_some() || !call.duplicate,
                "a call with a server-made call id refused as a duplicate: {}",
                call.text
            );
            if let (false, Some(expected)) = (call.dropped, call.expect_duplicate) {
                ensure!(
                    call.duplicate == expected,
                    "TOOL_CALL {}: {} as a duplicate, but call id {:?} {} held by an active call",
                    call.text,
                    if call.duplicate {
                        "refused"
                    } else {
                        "not refused"
                    },
                    call.call_id,
                    if expected { "was" } else { "was not" }
                );
            }
        }
        // Tool traffic per call id, in commit order (all of it on AGENT).
        let mut traffic: HashMap<&str, Vec<&Value>> = HashMap::new();
        for v in &self.out {
            if matches!(v["type"].as_str(), Some("TOOL_UPDATE" | "TOOL_DONE")) {
                let id = v["payload"]["call_id"]
                    .as_str()
                    .ok_or_else(|| format!("tool traffic without a string call_id: {v}"))?;
                traffic.entry(id).or_default().push(v);
            }
        }
        let mut accepted: HashMap<&str, Vec<&CallUnit>> = HashMap::new();
        let mut anonymous = 0;
        for call in &self.calls {
            match call.call_id.as_deref() {
                Some(id) => {
                    let calls = accepted.entry(id).or_default();
                    if call.accepted() {
                        calls.push(call);
                    }
                }
                None if call.accepted() => anonymous += 1,
                None => {}
            }
        }
        // A call id may be reused once its TOOL_DONE is out, so the k-th
        // TOOL_DONE with an id ends the k-th accepted call with it.
        for (id, calls) in &accepted {
            let envs = traffic.remove(id).unwrap_or_default();
            let segments = segments(id, &envs)?;
            ensure!(
                segments.len() == calls.len(),
                "call id {:?}: {} accepted TOOL_CALLs but {} TOOL_DONEs; calls {:?}; traffic {:?}",
                clip(id, 40),
                calls.len(),
                segments.len(),
                calls.iter().map(|c| &c.text).collect::<Vec<_>>(),
                envs.iter()
                    .map(|v| clip(&v["payload"].to_string(), 200))
                    .collect::<Vec<_>>()
            );
            for (segment, call) in segments.iter().zip(calls) {
                check_segment(segment, Some(call))?;
            }
        }
        // What is left are call ids the server made up (a new UUID each).
        ensure!(
            traffic.len() == anonymous,
            "{anonymous} accepted calls without a call id, but traffic for {} other ids: {:?}",
            traffic.len(),
            traffic.keys().map(|k| clip(k, 40)).collect::<Vec<_>>()
        );
        for (id, envs) in &traffic {
            let segments = segments(id, envs)?;
            ensure!(
                segments.len() == 1,
                "server-made call id {id}: {} TOOL_DONEs",
                segments.len()
            );
            check_segment(&segments[0], None)?;
        }
        Ok(())
    }
}

/// Splits one call id's traffic at each `TOOL_DONE`; updates after the last
/// `TOOL_DONE` belong to no call.
pub(super) fn segments<'a>(id: &str, envs: &[&'a Value]) -> Result<Vec<Vec<&'a Value>>, String> {
    let mut segments = Vec::new();
    let mut current = Vec::new();
    for v in envs {
        current.push(*v);
        if v["type"] == "TOOL_DONE" {
            segments.push(std::mem::take(&mut current));
        }
    }
    ensure!(
        current.is_empty(),
        "call id {:?}: TOOL_UPDATEs after its last TOOL_DONE: {:?}",
        clip(id, 40),
        current
            .iter()
            .map(|v| clip(&v["payload"].to_string(), 200))
            .collect::<Vec<_>>()
    );
    Ok(segments)
}

/// One call's updates and its `TOOL_DONE` (docs/protocol.md §6.5, §6.6, §6.9).
pub(super) fn check_segment(segment: &[&Value], call: Option<&CallUnit>) -> Result<(), String> {
    let Some((done, updates)) = segment.split_last() else {
        return Err("an empty segment".into());
    };
    let shown = || {
        segment
            .iter()
            .map(|v| clip(&v["payload"].to_string(), 200))
            .collect::<Vec<_>>()
    };
    let mut cancelling = false;
    for (k, update) in updates.iter().enumerate() {
        let p = &update["payload"];
        match p["status"].as_str() {
            Some("QUEUED") => ensure!(k == 0, "QUEUED is not the first update: {:?}", shown()),
            Some("RUNNING") => ensure!(!cancelling, "an update after CANCELLING: {:?}", shown()),
            Some("CANCELLING") => {
                ensure!(!cancelling, "CANCELLING twice: {:?}", shown());
                cancelling = true;
            }
            _ => return Err(format!("a TOOL_UPDATE with a bad status: {p}")),
        }
        if let Some(progress) = p.get("progress") {
            ensure!(
                progress
                    .as_f64()
                    .is_some_and(|n| (0.0..=100.0).contains(&n)),
                "progress out of 0..=100: {p}"
            );
        }
    }
    let p = &done["payload"];
    match p["status"].as_str() {
        Some("OK") => {}
        Some("CANCELLED") => {}
        Some("ERROR") => ensure!(
            p["result"]["code"].is_string() && p["result"]["error"].is_string(),
            "TOOL_DONE ERROR without result.code and result.error: {p}"
        ),
        _ => return Err(format!("a TOOL_DONE with a bad status: {p}")),
    }
    // After CANCELLING, the cancel decides (unless the TOOL_DONE is too large).
    ensure!(
        !cancelling || p["status"] == "CANCELLED" || p["result"]["code"] == "RESULT_TOO_LARGE",
        "CANCELLING but not ended CANCELLED: {:?}",
        shown()
    );
    let Some(call) = call else {
        return Ok(());
    };
    for v in segment {
        ensure!(
            v.get("run_id").and_then(Value::as_str) == call.run_id.as_deref()
                && v.get("thread_id").and_then(Value::as_str) == call.thread_id.as_deref(),
            "tool traffic of TOOL_CALL {} does not carry its run_id {:?} / thread_id {:?}: {v}",
            call.text,
            call.run_id,
            call.thread_id
        );
    }
    if !call.registered {
        ensure!(
            updates.is_empty()
                && p["status"] == "ERROR"
                && p["result"]["code"] == ErrorCode::TOOL_NOT_FOUND.as_str(),
            "a call to no registered tool did not end TOOL_NOT_FOUND: {} → {:?}",
            call.text,
            shown()
        );
    }
    Ok(())
}

/// A committed envelope: JSON with the seven required fields and nothing the
/// server never sends (docs/protocol.md §2.1, §2.4).
pub(super) fn check_envelope(text: &[u8], session: &str) -> Result<Value, String> {
    let shown = || clip(&String::from_utf8_lossy(text), 300);
    let v: Value = serde_json::from_slice(text)
        .map_err(|e| format!("a committed envelope is not JSON ({e}): {}", shown()))?;
    let Value::Object(obj) = &v else {
        return Err(format!(
            "a committed envelope is not an object: {}",
            shown()
        ));
    };
    for key in ["id", "session", "seq", "ts", "channel", "type"] {
        ensure!(
            obj.get(key).is_some_and(Value::is_string),
            "a committed envelope without a string {key}: {}",
            shown()
        );
    }
    ensure!(
        obj.get("payload").is_some_and(Value::is_object),
        "a committed envelope whose payload is not an object: {}",
        shown()
    );
    for key in ["ack", "pv", "crit", "related_id"] {
        ensure!(
            !obj.contains_key(key),
            "a committed envelope with {key}: {}",
            shown()
        );
    }
    let field = |key: &str| obj[key].as_str().unwrap_or_default();
    let id = field("id");
    ensure!(
        id.len() == 36
            && !id.bytes().any(|b| b.is_ascii_uppercase())
            && uuid::Uuid::parse_str(id).is_ok_and(|u| u.get_version_num() == 4),
        "an envelope id that is no lower-case UUID v4: {}",
        shown()
    );
    ensure!(
        field("session") == session,
        "another session's id: {}",
        shown()
    );
    let decimal = |s: &str| {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
    };
    ensure!(
        decimal(field("seq")) && field("seq") != "0" && decimal(field("ts")),
        "seq or ts not decimal: {}",
        shown()
    );
    ensure!(
        CHANNELS.contains(&field("channel")),
        "a non-standard channel: {}",
        shown()
    );
    ensure!(
        EventType::parse(field("type")).is_some(),
        "an unknown type: {}",
        shown()
    );
    Ok(v)
}

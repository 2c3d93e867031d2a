//! The session's deadlines, kept in the core and driven from outside: the
//! driver asks [`Session::poll_timeout`] when to wake and calls
//! [`Session::handle_timeout`] then, with the time. Heartbeat (docs/protocol.md §9),
//! idle timeout, the wait for a binary frame (§13), tool timeouts (§6.4) and
//! the cancel grace period (§6.7); replay expiry is checked as envelopes are
//! committed and resumed (§11).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::{Action, Control, Session};
use crate::exec::CallKey;

/// How long an envelope waits for the binary frame it announced (docs/protocol.md §13).
pub(crate) const BINARY_FRAME_WAIT: Duration = Duration::from_secs(10);

/// Streams never wait longer than this between heartbeats (docs/protocol.md §9): stream
/// clients and proxies give up on silent connections.
pub(crate) const STREAM_HEARTBEAT_CAP: Duration = Duration::from_secs(15);

/// The connection-bound deadlines, armed while a connection carries the session.
#[derive(Debug, Default)]
pub(super) struct Timers {
    /// A connection carries the session (a parked one sends no heartbeat and
    /// cannot be idle).
    connected: bool,
    /// When the next heartbeat is due.
    heartbeat_at: Option<Instant>,
    /// When the idle timeout is checked next: the last input plus
    /// `idle_timeout`, moved forward lazily (input only notes its time).
    idle_check_at: Option<Instant>,
    /// When the connection last delivered input.
    last_input: Option<Instant>,
    /// When the awaited binary frame is due.
    binary_due: Option<Instant>,
}

/// Call deadlines, soonest first: a call's timeout, or the end of its cancel
/// grace period. Entries are not removed when a call moves on: one that no
/// longer matches its call's deadline is skipped when it comes up.
pub(super) type Deadlines = BinaryHeap<Reverse<(Instant, CallKey)>>;

impl Session {
    /// The heartbeat interval by this session's door (`None`: off).
    fn heartbeat_interval(&self) -> Option<Duration> {
        let interval = self.config().heartbeat_interval?;
        Some(if self.door.is_stream() {
            interval.min(STREAM_HEARTBEAT_CAP)
        } else {
            interval
        })
    }

    /// A connection carries the session from `now` on (a new one, or one that
    /// resumed it): heartbeat and idle timeout run from here.
    pub(crate) fn handle_connect(&mut self, now: Instant) {
        let heartbeat_at = self.heartbeat_interval().map(|every| now + every);
        let idle_check_at = self.config().idle_timeout.map(|idle| now + idle);
        let binary_due = self.awaited.as_ref().map(|_| now + BINARY_FRAME_WAIT);
        self.timers = Timers {
            connected: true,
            heartbeat_at,
            idle_check_at,
            last_input: Some(now),
            binary_due,
        };
    }

    /// The connection is gone: the session runs on, parked, with only its
    /// calls' deadlines.
    pub(crate) fn handle_disconnect(&mut self) {
        self.timers = Timers::default();
    }

    /// The connection delivered input at `now` (anything: a message, a
    /// frame, a keep-alive), which puts the idle timeout off.
    pub(crate) fn handle_traffic(&mut self, now: Instant) {
        if self.timers.connected {
            self.timers.last_input = Some(now);
        }
    }

    /// An envelope now waits for its binary frame, due by `now` plus the wait.
    pub(super) fn arm_binary(&mut self, now: Instant) {
        if self.timers.connected {
            self.timers.binary_due = Some(now + BINARY_FRAME_WAIT);
        }
    }

    /// Keeps a call's deadline (its timeout, or the end of its grace period).
    pub(super) fn arm_call(&mut self, key: CallKey, at: Instant) {
        let Some(call) = self.calls.get_mut(&key) else {
            return;
        };
        call.deadline = Some(at);
        self.deadlines.push(Reverse((at, key)));
        // Calls that ended before their deadline leave entries behind: keep
        // them bounded by the calls there are (amortised, one sweep per
        // doubling).
        if self.deadlines.len() > 2 * self.calls.len() + 64 {
            let calls = &self.calls;
            self.deadlines.retain(|Reverse((at, key))| {
                calls.get(key).is_some_and(|c| c.deadline == Some(*at))
            });
        }
    }

    /// When [`Session::handle_timeout`] is due next (`None`: nothing is timed).
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let timers = &self.timers;
        let call = self.deadlines.peek().map(|Reverse((at, _))| *at);
        let binary = timers.binary_due.filter(|_| self.awaited.is_some());
        [call, binary, timers.heartbeat_at, timers.idle_check_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// Acts on every deadline that passed by `now`: calls that timed out end
    /// with `TOOL_DONE ERROR TIMEOUT` (and are cancelled), cancelled calls
    /// whose grace ran out end `CANCELLED` (their task is being aborted and
    /// keeps its slot until it stops), a missing binary frame is reported,
    /// a heartbeat `PING` goes out (or [`Action::KeepAlive`], on a stream
    /// whose client filters `PING`s), and a connection idle for
    /// `idle_timeout` is closed (1001 `idle`, the session kept).
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> Control {
        while let Some(&Reverse((at, key))) = self.deadlines.peek() {
            if at > now {
                break;
            }
            self.deadlines.pop();
            self.call_deadline(key, at);
        }
        if !self.timers.connected {
            return Control::Continue;
        }
        if self.timers.binary_due.is_some_and(|due| due <= now) {
            self.timers.binary_due = None;
            self.handle_missing_binary();
        }
        if let Some(at) = self.timers.heartbeat_at
            && at <= now
        {
            // The next one a full interval after this one went out.
            self.timers.heartbeat_at = self.heartbeat_interval().map(|every| now + every);
            if !self.handle_heartbeat() && self.door.is_stream() {
                self.actions.push_back(Action::KeepAlive);
            }
        }
        if let Some(at) = self.timers.idle_check_at
            && at <= now
            && let Some(idle) = self.config().idle_timeout
        {
            let due = self.timers.last_input.unwrap_or(now) + idle;
            if due > now {
                self.timers.idle_check_at = Some(due);
            } else {
                self.timers.idle_check_at = None;
                tracing::debug!("no inbound data for idle_timeout; closing");
                self.shared.stats.closed_idle.fetch_add(1, Relaxed);
                return Control::Close {
                    code: 1001,
                    reason: "idle",
                    keep_session: true,
                };
            }
        }
        Control::Continue
    }
}

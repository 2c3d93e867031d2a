//! Admission: the one way a call starts, whichever door it came in by (a
//! HAIP session, which `haip::testing` drives too, or MCP over HTTP or
//! stdio).
//!
//! A door hands [`Gate::admit`] what it received. The call is counted and
//! its span opened at once, in a [`CallBook`]; then, in this order:
//!
//! 1. **lookup**: the tool, by name (`TOOL_NOT_FOUND`);
//! 2. **scopes**: the caller's, against the tool's and the server's
//!    (`FORBIDDEN`, docs/protocol.md §17.1), before the params are looked at;
//! 3. the door's own rules (an MCP tool that runs only as a task, the
//!    answers an MCP retry brings);
//! 4. **layers**, then **params**: with layers, the params are checked
//!    after them, in the call's task (the layers may refuse the call, or
//!    rewrite its params: [`crate::layer`]); without, they are checked here
//!    ([`Check::Now`]), or off the door's task when large ([`Check::Later`],
//!    docs/protocol.md §18.1), and an invalid call is refused with
//!    `INVALID_PARAMS`.
//!
//! A refusal comes back as [`Refused`], already counted: the door only says
//! it in its own words. An admitted call carries its book to its end, which
//! is [`CallBook::finish`]; nothing else counts a call's end.

use std::convert::Infallible;
use std::fmt::Display;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::Validation;
use crate::context::Caller;
use crate::otel::{CallSpan, Tracer};
use crate::protocol::ErrorCode;
use crate::schema::Violations;
use crate::stats::{Door, Ended, Stats, UNKNOWN_TOOL};
use crate::tool::{Registry, Tool};

/// What a call is admitted against: the server's tools, rules and counters.
pub(crate) struct Gate<'a> {
    /// The tools.
    pub(crate) registry: &'a Registry,
    /// Where calls are counted.
    pub(crate) stats: &'a Arc<Stats>,
    /// Where their spans go.
    pub(crate) tracer: &'a Tracer,
    /// Scopes every call needs, beside its tool's own.
    pub(crate) required_scopes: &'a [String],
    /// Violations listed at most.
    pub(crate) max_violations: usize,
    /// The door's clock (a session's is injected).
    pub(crate) now: &'a dyn Fn() -> Instant,
}

/// A call as its door received it.
pub(crate) struct Arrival<'a> {
    /// The tool named, if any.
    pub(crate) tool: Option<&'a str>,
    /// The call's id, for its span.
    pub(crate) call_id: &'a dyn Display,
    /// The session it came in, if any.
    pub(crate) session: Option<&'a str>,
    /// The door.
    pub(crate) door: Door,
    /// Trace context the caller sent (`_meta`).
    pub(crate) meta: Option<&'a Map<String, Value>>,
    /// Who called, when authentication is on.
    pub(crate) caller: Option<&'a Caller>,
    /// When it was received, on the door's clock.
    pub(crate) received: Instant,
    /// When its params are checked.
    pub(crate) check: Check,
}

/// When a call's params are checked against its tool's input schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// At admission, on the door's task.
    Now,
    /// After admission: after the layers, in the call's task; or, for large
    /// params, off the door's task (see [`Admitted::checked`]).
    Later,
}

/// A call let in: its tool, its params (checked, unless [`Check::Later`]),
/// its book, and what the door's rules made of it.
pub(crate) struct Admitted<T> {
    /// The tool called.
    pub(crate) tool: Tool,
    /// The params.
    pub(crate) params: Value,
    /// The call's bookkeeping, until its end.
    pub(crate) book: CallBook,
    /// What the door's own rules returned.
    pub(crate) door: T,
}

/// Why a call was refused; the refusal is counted already.
#[derive(Debug)]
pub(crate) enum Refused<D = Infallible> {
    /// No tool of the name the call gave (or none given).
    UnknownTool,
    /// The caller lacks scopes the tool needs.
    Forbidden(Forbidden),
    /// The params do not match the tool's input schema.
    InvalidParams(Tool, Violations),
    /// The params could not be checked (the check panicked).
    CheckFailed(Tool),
    /// Too many calls in flight or waiting.
    Busy,
    /// One of the door's own rules.
    Door(D),
}

/// A refusal by one of a door's own rules: the code it is counted with.
pub(crate) trait DoorRule {
    /// The code the refused call is counted with.
    fn code(&self) -> ErrorCode;
}

impl DoorRule for Infallible {
    fn code(&self) -> ErrorCode {
        match *self {}
    }
}

impl<D: DoorRule> Refused<D> {
    /// The code the refused call is counted with (and, on a HAIP door, sent).
    pub(crate) fn code(&self) -> ErrorCode {
        match self {
            Refused::UnknownTool => ErrorCode::TOOL_NOT_FOUND,
            Refused::Forbidden(_) => ErrorCode::FORBIDDEN,
            Refused::InvalidParams(..) => ErrorCode::INVALID_PARAMS,
            Refused::CheckFailed(_) => ErrorCode::INTERNAL_ERROR,
            Refused::Busy => ErrorCode::RATE_LIMITED,
            Refused::Door(rule) => rule.code(),
        }
    }
}

impl Gate<'_> {
    /// Admits a call, or refuses it (counted). `params` absent or `null`
    /// should be `{}` already. `door_rules` runs after the scopes and before
    /// the params are checked.
    pub(crate) fn admit<T, D: DoorRule>(
        &self,
        arrival: Arrival<'_>,
        mut params: Value,
        door_rules: impl FnOnce(&Tool, &Value) -> Result<T, D>,
    ) -> Result<Admitted<T>, Refused<D>> {
        let tool = arrival.tool.and_then(|name| self.registry.get(name));
        let book = self.book(&arrival, tool.clone());
        let Some(tool) = tool else {
            return Err(book.refuse(Refused::UnknownTool, (self.now)()));
        };
        let refuse = |book: CallBook, reason: Refused<D>| Err(book.refuse(reason, (self.now)()));
        if let Some(forbidden) = forbidden(self.required_scopes, arrival.caller, &tool) {
            return refuse(book, Refused::Forbidden(forbidden));
        }
        let door = match door_rules(&tool, &params) {
            Ok(door) => door,
            Err(rule) => return refuse(book, Refused::Door(rule)),
        };
        if arrival.check == Check::Now {
            let validating = book.span().mark();
            let verdict = check(&tool, params, self.max_violations);
            book.span().child("tool.validate", validating);
            params = match verdict {
                Validation::Valid(params) => params,
                Validation::Invalid(found) => {
                    return refuse(book, Refused::InvalidParams(tool, found));
                }
                Validation::Failed => return refuse(book, Refused::CheckFailed(tool)),
            };
        }
        Ok(Admitted {
            tool,
            params,
            book,
            door,
        })
    }
}

impl Gate<'_> {
    /// The scopes step alone, ahead of admission, for a door that answers
    /// a call the caller's scopes do not allow before it hands the call on
    /// (`/mcp` answers `403` with the scopes to step up to): the call is
    /// counted as refused here, as admission would. `None` when the caller
    /// may call the tool, or there is no such tool (admission says so).
    #[cfg(feature = "mcp")]
    pub(crate) fn screen(&self, arrival: Arrival<'_>) -> Option<Forbidden> {
        let tool = self.registry.get(arrival.tool?)?;
        let forbidden = forbidden(self.required_scopes, arrival.caller, &tool)?;
        let book = self.book(&arrival, Some(tool));
        match book.refuse(Refused::<Infallible>::Forbidden(forbidden), (self.now)()) {
            Refused::Forbidden(forbidden) => Some(forbidden),
            _ => unreachable!("refuse hands back its reason"),
        }
    }

    /// A book for a call of `tool` (`None`: unknown), its span opened.
    fn book(&self, arrival: &Arrival<'_>, tool: Option<Tool>) -> CallBook {
        let span = self.tracer.call(
            tool.as_ref().map_or(UNKNOWN_TOOL, Tool::name),
            arrival.call_id,
            arrival.session,
            arrival.door,
            arrival.meta,
        );
        CallBook::open(self.stats, tool, arrival.received, span)
    }
}

impl<T> Admitted<T> {
    /// The call, its params checked after admission ([`Check::Later`]) with
    /// `verdict`; refused (counted) when they are not valid.
    #[cfg(feature = "mcp")]
    pub(crate) fn checked<D: DoorRule>(
        mut self,
        verdict: Validation,
        now: Instant,
    ) -> Result<Admitted<T>, Refused<D>> {
        match verdict {
            Validation::Valid(params) => {
                self.params = params;
                Ok(self)
            }
            Validation::Invalid(found) => Err(self
                .book
                .refuse(Refused::InvalidParams(self.tool, found), now)),
            Validation::Failed => Err(self.book.refuse(Refused::CheckFailed(self.tool), now)),
        }
    }
}

/// Checks `params` against `tool`'s input schema, on this thread.
pub(crate) fn check(tool: &Tool, mut params: Value, max_violations: usize) -> Validation {
    let found = tool.check_params(&mut params, max_violations);
    if found.is_empty() {
        Validation::Valid(params)
    } else {
        Validation::Invalid(found)
    }
}

/// Whether `caller` may call `tool`: `None` when it may (or when
/// authentication is off: no caller), else the scopes it needs and the ones
/// it lacks (docs/protocol.md §17.1). `required` are the server's own.
pub(crate) fn forbidden(
    required: &[String],
    caller: Option<&Caller>,
    tool: &Tool,
) -> Option<Forbidden> {
    let caller = caller?;
    if tool.scopes().is_empty() && required.is_empty() {
        return None;
    }
    let mut required: Vec<String> = required.iter().chain(tool.scopes()).cloned().collect();
    required.sort_unstable();
    required.dedup();
    let missing: Vec<String> = caller
        .missing(&required)
        .into_iter()
        .map(str::to_owned)
        .collect();
    (!missing.is_empty()).then_some(Forbidden { required, missing })
}

/// A call refused for want of scopes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Forbidden {
    /// Every scope the tool requires (its own and the server's), sorted.
    pub(crate) required: Vec<String>,
    /// Those the caller lacks.
    pub(crate) missing: Vec<String>,
}

impl Forbidden {
    /// `Missing scope(s): a b`.
    pub(crate) fn message(&self) -> String {
        let noun = if self.missing.len() == 1 {
            "scope"
        } else {
            "scopes"
        };
        format!("Missing {noun}: {}", self.missing.join(" "))
    }

    /// `{"required": [..], "missing": [..]}`.
    pub(crate) fn details(&self) -> Value {
        serde_json::json!({ "required": self.required, "missing": self.missing })
    }
}

/// One call's bookkeeping, from its arrival to its one end: its tool (for
/// the counters' label), when it was received, its span, and the counters.
///
/// Opening a book counts the call as started; it ends by exactly one of
/// [`refuse`](Self::refuse) (at admission), [`finish`](Self::finish) (it ran,
/// or was cancelled, or failed) or [`suspend`](Self::suspend) (not over: it
/// goes on in another request). Each takes the book, so no call ends twice.
/// A book dropped unended was the call of a future that was dropped (its
/// client went away): it counts as cancelled. In this crate's own tests
/// that panics instead, since every path there ends its calls.
#[must_use = "a call's book must be ended"]
pub(crate) struct CallBook {
    open: Option<Open>,
}

struct Open {
    stats: Arc<Stats>,
    /// `None`: no such tool.
    tool: Option<Tool>,
    received: Instant,
    span: CallSpan,
}

impl CallBook {
    /// Counts a call of `tool` (`None`: unknown) as started.
    pub(crate) fn open(
        stats: &Arc<Stats>,
        tool: Option<Tool>,
        received: Instant,
        span: CallSpan,
    ) -> CallBook {
        stats.call_started(tool.as_ref().map_or(UNKNOWN_TOOL, Tool::name));
        CallBook {
            open: Some(Open {
                stats: Arc::clone(stats),
                tool,
                received,
                span,
            }),
        }
    }

    /// When the call was received.
    #[cfg(feature = "metrics")]
    pub(crate) fn received(&self) -> Instant {
        self.live().received
    }

    /// The call's span (feature `otel`).
    pub(crate) fn span(&self) -> &CallSpan {
        &self.live().span
    }

    fn live(&self) -> &Open {
        // Every method that empties it takes the book.
        self.open
            .as_ref()
            .expect("a call's book is open until it ends")
    }

    /// Refused at admission, `now`: counted with `reason`'s code.
    pub(crate) fn refuse<D: DoorRule>(self, reason: Refused<D>, now: Instant) -> Refused<D> {
        self.finish(Ended::failed(&reason.code()), now);
        reason
    }

    /// The call ended so, `now`: counted, its span ended. Returns its latency.
    pub(crate) fn finish(mut self, ended: Ended, now: Instant) -> Duration {
        let Open {
            stats,
            tool,
            received,
            span,
        } = self
            .open
            .take()
            .expect("a call's book is open until it ends");
        let latency = now.saturating_duration_since(received);
        let name = tool.as_ref().map_or(UNKNOWN_TOOL, Tool::name);
        stats.call_ended(name, ended, Some(latency));
        span.end(ended);
        latency
    }

    /// The call's owner is gone before its end (its session closed): counted
    /// as cancelled, with no latency.
    pub(crate) fn abandon(self) {
        self.finish_untimed(Ended::Cancelled);
    }

    /// The call ended so, with no latency to report: it ran on an instance
    /// that was lost, or its owner is gone.
    pub(crate) fn finish_untimed(mut self, ended: Ended) {
        if let Some(open) = self.open.take() {
            open.finish_untimed(ended);
        }
    }

    /// Not an end: the call goes on in a later request, which is counted as
    /// a call of its own (an MCP retry that brings answers). Its start is
    /// taken back; its span ends without an outcome.
    #[cfg(feature = "mcp")]
    pub(crate) fn suspend(mut self) {
        if let Some(open) = self.open.take() {
            open.stats
                .calls_total
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Open {
    fn finish_untimed(self, ended: Ended) {
        let name = self.tool.as_ref().map_or(UNKNOWN_TOOL, Tool::name);
        self.stats.call_ended(name, ended, None);
        self.span.end(ended);
    }
}

impl Drop for CallBook {
    fn drop(&mut self) {
        if let Some(open) = self.open.take() {
            #[cfg(test)]
            if !std::thread::panicking() {
                panic!("a call's book was dropped without an end");
            }
            open.finish_untimed(Ended::Cancelled);
        }
    }
}

impl std::fmt::Debug for CallBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tool = self
            .open
            .as_ref()
            .map(|open| open.tool.as_ref().map(Tool::name));
        f.debug_struct("CallBook").field("tool", &tool).finish()
    }
}

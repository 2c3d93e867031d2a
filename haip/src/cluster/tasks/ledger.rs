//! The ledger of the task records this instance wrote as their owner, with
//! their bytes, until they expire: what bounds its share of Redis
//! (`max_tasks`, `max_bytes`), and what the refresher retries or stops.
//! (Each caller's share is counted in Redis, by the scripts: a caller's
//! tasks may be owned by several instances.)

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::session::tasks::{
    END_RESERVE, TaskEnd, TaskLimits, TaskRecord, TaskStoreError, too_many_bytes, too_many_tasks,
};

pub(super) fn lock(ledger: &Mutex<Ledger>) -> std::sync::MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(|e| e.into_inner())
}

/// A record being created: forgotten by the ledger unless it was written.
pub(super) struct Creating {
    pub(super) ledger: Arc<Mutex<Ledger>>,
    pub(super) id: String,
    pub(super) written: bool,
}

impl Creating {
    pub(super) fn written(mut self) {
        lock(&self.ledger).written(&self.id);
        self.written = true;
    }
}

impl Drop for Creating {
    fn drop(&mut self) {
        if !self.written {
            lock(&self.ledger).remove(&self.id);
        }
    }
}

/// The bytes of a record, in the parts its writes change (as
/// [`TaskRecord::charge`] counts them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Parts {
    /// The id, owner, subject and the rest.
    fixed: usize,
    pub(super) message: usize,
    pub(super) questions: usize,
    /// Result and error.
    pub(super) end: usize,
    /// Room for its end while it runs ([`END_RESERVE`]; 0 once ended).
    pub(super) reserve: usize,
}

impl Parts {
    pub(super) fn of(record: &TaskRecord) -> Parts {
        let json = |v: &Option<Value>| v.as_ref().map_or(0, crate::protocol::json_len);
        let message = record.message.as_ref().map_or(0, String::len);
        let questions = record
            .questions
            .iter()
            .map(|(k, v)| k.len() + crate::protocol::json_len(v))
            .sum();
        let end = json(&record.result) + json(&record.error);
        Parts {
            fixed: record.weight() - message - questions - end,
            message,
            questions,
            end,
            reserve: if record.status.is_terminal() {
                0
            } else {
                END_RESERVE
            },
        }
    }

    fn total(&self) -> usize {
        self.fixed + self.message + self.questions + self.end + self.reserve
    }

    /// The parts of the record with `bytes` more of its own (answers kept
    /// for a run again).
    pub(super) fn grow_fixed(&mut self, bytes: usize) {
        self.fixed += bytes;
    }

    /// The parts of the record once it ended as `end`.
    pub(super) fn ended(&mut self, end: &TaskEnd) {
        let json = |v: &Option<Value>| v.as_ref().map_or(0, crate::protocol::json_len);
        self.message = end.message.as_ref().map_or(0, String::len);
        self.questions = 0;
        self.end = json(&end.result) + json(&end.error);
        self.reserve = 0;
    }
}

/// Where one of this instance's records is.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum State {
    /// Its task runs here (`stopped`: it was found ended elsewhere, and its
    /// call told to stop).
    Running { stopped: bool },
    /// It ended here, but Redis did not take the end: retried.
    Ending(TaskEnd),
    /// It ended; its record expires at `expires` (ms since the epoch).
    Ended { expires: u64 },
}

#[derive(Debug)]
struct Entry {
    parts: Parts,
    state: State,
    /// Its creation was written (until then the refresher leaves it be: a
    /// record not written yet is not a record gone).
    written: bool,
}

/// The records one instance wrote as their owner, with their bytes, until
/// they expire: what bounds its share of Redis.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    by_id: HashMap<String, Entry>,
    bytes: usize,
    /// The ended ones, by when their records expire (oldest first).
    expiring: VecDeque<(u64, String)>,
}

impl Ledger {
    /// Forgets the records that expired by `now`.
    pub(super) fn expire(&mut self, now: u64) {
        while let Some((at, _)) = self.expiring.front() {
            if *at > now {
                break;
            }
            let Some((at, id)) = self.expiring.pop_front() else {
                break;
            };
            if self
                .by_id
                .get(&id)
                .is_some_and(|e| e.state == State::Ended { expires: at })
            {
                self.remove(&id);
            }
        }
    }

    /// Takes in the record of a task this instance took over from one that
    /// died (it was written; it runs here now). Taken in even beyond the
    /// bounds: its bytes were counted when it was created, and a task taken
    /// over must be kept alive until it ends.
    pub(super) fn take_over(&mut self, id: &str, parts: Parts, now: u64) {
        self.expire(now);
        self.remove(id);
        self.bytes += parts.total();
        self.by_id.insert(
            id.to_owned(),
            Entry {
                parts,
                state: State::Running { stopped: false },
                written: true,
            },
        );
    }

    /// Takes a new record in, if it fits.
    pub(super) fn admit(
        &mut self,
        id: &str,
        parts: Parts,
        state: State,
        now: u64,
        limits: &TaskLimits,
    ) -> Result<(), TaskStoreError> {
        self.expire(now);
        let old = self.by_id.get(id).map_or(0, |e| e.parts.total());
        if self.by_id.len() >= limits.max_tasks && old == 0 {
            return Err(too_many_tasks(limits));
        }
        if self.bytes - old + parts.total() > limits.max_bytes {
            return Err(too_many_bytes(limits));
        }
        self.remove(id);
        if let State::Ended { expires } = state {
            self.expiring.push_back((expires, id.to_owned()));
        }
        self.bytes += parts.total();
        self.by_id.insert(
            id.to_owned(),
            Entry {
                parts,
                state,
                written: false,
            },
        );
        Ok(())
    }

    /// Changes the bytes of record `id`, if it is this instance's and the
    /// change fits (only growth is refused); gives its parts before (`None`:
    /// not this instance's).
    pub(super) fn resize(
        &mut self,
        id: &str,
        now: u64,
        limits: &TaskLimits,
        change: impl FnOnce(&mut Parts),
    ) -> Result<Option<Parts>, TaskStoreError> {
        self.expire(now);
        let Some(entry) = self.by_id.get_mut(id) else {
            return Ok(None);
        };
        let before = entry.parts;
        let mut parts = before;
        change(&mut parts);
        let (old, new) = (before.total(), parts.total());
        if new > old && self.bytes - old + new > limits.max_bytes {
            return Err(too_many_bytes(limits));
        }
        entry.parts = parts;
        self.bytes = self.bytes - old + new;
        Ok(Some(before))
    }

    /// Puts back the parts of record `id` as they were before a change
    /// Redis refused.
    pub(super) fn restore(&mut self, id: &str, before: Option<Parts>) {
        if let (Some(entry), Some(before)) = (self.by_id.get_mut(id), before) {
            self.bytes = self.bytes - entry.parts.total() + before.total();
            entry.parts = before;
        }
    }

    /// The open questions of `id` take `bytes` now (as Redis counted them).
    pub(super) fn set_questions(&mut self, id: &str, bytes: usize) {
        if let Some(entry) = self.by_id.get_mut(id) {
            self.bytes = self.bytes - entry.parts.questions + bytes;
            entry.parts.questions = bytes;
        }
    }

    /// Task `id` ended (at `now`): its record expires `ttl` ms later.
    pub(super) fn ended(&mut self, id: &str, now: u64, ttl: u64) {
        if let Some(entry) = self.by_id.get_mut(id)
            && !matches!(entry.state, State::Ended { .. })
        {
            let expires = now + ttl;
            entry.state = State::Ended { expires };
            self.expiring.push_back((expires, id.to_owned()));
        }
    }

    /// Task `id` ended here as `end`, which Redis did not take (the latest
    /// such end is retried).
    pub(super) fn ending(&mut self, id: &str, end: TaskEnd) {
        if let Some(entry) = self.by_id.get_mut(id)
            && !matches!(entry.state, State::Ended { .. })
        {
            entry.state = State::Ending(end);
        }
    }

    /// Record `id` was created.
    fn written(&mut self, id: &str) {
        if let Some(entry) = self.by_id.get_mut(id) {
            entry.written = true;
        }
    }

    /// Marks running task `id` told to stop; `true` the first time.
    pub(super) fn stop(&mut self, id: &str) -> bool {
        match self.by_id.get_mut(id) {
            Some(Entry {
                state: State::Running { stopped },
                ..
            }) if !*stopped => {
                *stopped = true;
                true
            }
            _ => false,
        }
    }

    pub(super) fn remove(&mut self, id: &str) {
        if let Some(entry) = self.by_id.remove(id) {
            self.bytes -= entry.parts.total();
        }
    }

    /// Whether task `id` runs here (its end not recorded yet).
    pub(super) fn runs(&self, id: &str) -> bool {
        self.by_id
            .get(id)
            .is_some_and(|e| !matches!(e.state, State::Ended { .. }))
    }

    /// The tasks running here, and the ends to record again.
    pub(super) fn live(&self) -> (Vec<String>, Vec<(String, TaskEnd)>) {
        let mut running = Vec::new();
        let mut ending = Vec::new();
        for (id, entry) in self.by_id.iter().filter(|(_, e)| e.written) {
            match &entry.state {
                State::Running { .. } => running.push(id.clone()),
                State::Ending(end) => ending.push((id.clone(), end.clone())),
                State::Ended { .. } => {}
            }
        }
        (running, ending)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::cluster::tasks::tests::record;
    use crate::session::tasks::TaskStatus;

    fn limits(max_tasks: usize, max_bytes: usize) -> TaskLimits {
        TaskLimits {
            ttl: Duration::from_secs(60),
            max_tasks,
            max_bytes,
            max_tasks_per_caller: max_tasks,
            max_bytes_per_caller: max_bytes,
        }
    }

    #[test]
    fn a_record_not_written_is_forgotten() {
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let limits = limits(10, 1 << 20);
        let creating = |id: &str| {
            let running = State::Running { stopped: false };
            lock(&ledger)
                .admit(id, Parts::of(&record(id)), running, 0, &limits)
                .unwrap();
            Creating {
                ledger: Arc::clone(&ledger),
                id: id.to_owned(),
                written: false,
            }
        };
        drop(creating("dropped"));
        creating("written").written();
        let ledger = lock(&ledger);
        assert!(!ledger.runs("dropped") && ledger.runs("written"));
        assert_eq!(ledger.live().0, ["written"]);
        assert_eq!(ledger.bytes, record("written").charge());
    }

    #[test]
    fn the_ledger_bounds_records_and_bytes_until_they_expire() {
        let limits = limits(2, 4096);
        let mut ledger = Ledger::default();
        let parts = Parts::of(&record("a"));
        assert_eq!(parts.total(), record("a").charge());
        assert_eq!(parts.reserve, END_RESERVE, "room for its end while it runs");
        let running = State::Running { stopped: false };
        ledger
            .admit("a", parts, running.clone(), 0, &limits)
            .unwrap();
        ledger
            .admit("b", parts, State::Ended { expires: 1000 }, 0, &limits)
            .unwrap();
        let full = ledger.admit("c", parts, running.clone(), 0, &limits);
        assert!(matches!(full, Err(TaskStoreError::Full(ref m)) if m.contains("max_tasks")));
        assert!(ledger.runs("a") && !ledger.runs("b"));
        // `b`'s record expires at 1000: room again.
        ledger
            .admit("c", parts, running.clone(), 1000, &limits)
            .unwrap();
        assert!(!ledger.by_id.contains_key("b"));
        // A result that would take it over its bytes is refused, unchanged.
        let before = ledger.bytes;
        let big = ledger.resize("c", 1000, &limits, |p| p.end = 8192);
        assert!(matches!(big, Err(TaskStoreError::Full(ref m)) if m.contains("max_task_bytes")));
        assert_eq!(ledger.bytes, before);
        ledger.resize("c", 1000, &limits, |p| p.end = 100).unwrap();
        assert_eq!(ledger.bytes, before + 100);
        // Shrinking always fits; other instances' records are not counted.
        ledger.resize("c", 1000, &limits, |p| p.end = 0).unwrap();
        ledger
            .resize("elsewhere", 1000, &limits, |p| p.end = 1 << 30)
            .unwrap();
        assert_eq!(ledger.bytes, before);
        ledger.set_questions("c", 0);
        assert_eq!(ledger.bytes, before - parts.questions);
        // An end Redis did not take is retried; the task still runs here.
        let end = TaskEnd {
            status: TaskStatus::Completed,
            message: None,
            result: Some(json!({})),
            error: None,
        };
        let cancelled = TaskEnd {
            status: TaskStatus::Cancelled,
            message: None,
            result: None,
            error: None,
        };
        ledger.ending("c", cancelled);
        ledger.ending("c", end.clone());
        assert!(ledger.runs("c"));
        assert_eq!(ledger.live(), (vec![], vec![]), "nothing written yet");
        ledger.written("a");
        ledger.written("c");
        let (running_ids, ending) = ledger.live();
        assert_eq!(running_ids, ["a"]);
        assert_eq!(ending, [("c".to_owned(), end.clone())]);
        // Ended: kept until its record expires, then forgotten.
        ledger.ended("c", 2000, 500);
        ledger.ended("c", 2100, 500);
        ledger.ending("c", end);
        assert!(!ledger.runs("c"), "an ended task stays ended");
        ledger.expire(2499);
        assert!(ledger.by_id.contains_key("c"));
        ledger.expire(2500);
        assert!(!ledger.by_id.contains_key("c"));
        // A running task found ended elsewhere is stopped once.
        assert!(ledger.stop("a"));
        assert!(!ledger.stop("a"));
        assert!(!ledger.stop("c"));
        ledger.remove("a");
        assert_eq!(ledger.bytes, 0);
        assert!(ledger.by_id.is_empty());
    }
}

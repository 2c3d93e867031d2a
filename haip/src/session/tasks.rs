//! The records of MCP tasks (the `io.modelcontextprotocol/tasks`
//! extension, served by `mcp/tasks.rs`): kept where sessions are kept, so
//! that with a store shared by several instances any instance answers
//! `tasks/get`, and a task whose instance died says so (once).
//!
//! A record holds what `tasks/get` shows: the status, the questions the
//! task waits on (it is `input_required` while there is one), and its end
//! (a result or an error). The instance running the task writes it; the
//! one serving a client's `tasks/update` or `tasks/cancel` removes the
//! questions it answers or ends the task itself, then tells the running
//! instance ([`TaskStore::signal`]), so that a `tasks/get` right after
//! sees the change wherever it lands. An ended task stays ended: a later
//! end is refused, whoever writes it.
//!
//! # Limits
//!
//! What the store keeps is bounded ([`TaskLimits`]), for the server and for
//! each caller, since the records are a pool all callers share:
//!
//! - at most `max_tasks` records (`MAX_TASKS`) and `max_bytes` bytes
//!   (`max_task_bytes`) in all;
//! - of those, at most `max_tasks_per_caller` records and
//!   `max_bytes_per_caller` bytes (`max_task_bytes_per_client`) for one
//!   caller: the [`TaskRecord::caller`] a record counts against, the caller's
//!   subject when authenticated, else its peer address (`context/share.rs`).
//!   Running and ended tasks count alike until their records expire (`ttl`
//!   after the end), so a caller that makes many short tasks with large
//!   results fills only its own share, and has room again as they expire.
//!
//! A record is counted at its [`charge`](TaskRecord::charge): its bytes,
//! plus, while the task runs, [`END_RESERVE`] for the end the server may
//! have to write itself (a failure or a cancellation): only growth is
//! refused, so such an end always fits and every task ends. A new task that
//! does not fit is refused (`create`, [`TaskStoreError::Full`] naming the
//! setting: the call that would start it answers with a tool error); so is
//! an end whose result does not fit (`finish`: the task then fails, saying
//! why), a question or a status message.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::store::StoreFuture;

/// A task's status, as MCP names it (on the wire too: `mcp/model.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TaskStatus {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

/// A status as the shared store (feature `redis`) writes and reads it: the
/// name MCP gives it.
#[cfg(feature = "redis")]
impl TaskStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<TaskStatus> {
        Some(match text {
            "working" => TaskStatus::Working,
            "input_required" => TaskStatus::InputRequired,
            "completed" => TaskStatus::Completed,
            "failed" => TaskStatus::Failed,
            "cancelled" => TaskStatus::Cancelled,
            _ => return None,
        })
    }
}

impl TaskStatus {
    /// Completed, failed or cancelled: nothing changes it any more.
    pub(crate) fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }
}

/// One task as recorded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TaskRecord {
    pub(crate) id: String,
    /// The instance running it.
    pub(crate) owner: String,
    /// The authenticated caller that started it (only that caller sees it).
    pub(crate) subject: Option<String>,
    /// Whose share of the store it counts against (a `CallerKey` as it
    /// describes itself: `subject "ada"`, `peer 203.0.113.7`); `None`: no
    /// caller's (an unauthenticated loopback caller's, say).
    pub(crate) caller: Option<String>,
    /// `Working` or terminal as written; read back as `InputRequired` while
    /// a question is open.
    pub(crate) status: TaskStatus,
    pub(crate) message: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub(crate) created_ms: u64,
    pub(crate) updated_ms: u64,
    /// The open questions, `{method, params}` by key.
    pub(crate) questions: BTreeMap<String, Value>,
    /// The `CallToolResult` of a completed task.
    pub(crate) result: Option<Value>,
    /// The JSON-RPC error (`{code, message}`) of a failed one.
    pub(crate) error: Option<Value>,
    /// What running it again needs, for a task that may run again on
    /// another instance when its own dies ([`Rerun`]); `None`: it fails
    /// with its instance.
    pub(crate) rerun: Option<Rerun>,
}

/// A task that runs again from the start on another instance when the one
/// running it dies (a shared store's task of a tool marked idempotent): what
/// the call needs, the attempt it is on, and the answers its client gave,
/// which a run again is given when it asks the same questions.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Rerun {
    /// The tool called.
    pub(crate) tool: String,
    /// Its arguments, as first checked.
    pub(crate) arguments: Value,
    /// Who called it: `{subject, scopes, claims}` (`None`: unauthenticated).
    pub(crate) caller: Option<Value>,
    /// Which of the server's requests its client takes: elicitation,
    /// sampling, roots.
    pub(crate) can: [bool; 3],
    /// The attempt running now, from 1 (not in the JSON: a field of its own).
    #[serde(skip)]
    pub(crate) attempt: u32,
    /// Attempts at most (not in the JSON: a field of its own).
    #[serde(skip)]
    pub(crate) attempts: u32,
    /// The answers its client gave, by question key (not in the JSON:
    /// fields of their own).
    #[serde(skip)]
    pub(crate) answers: Map<String, Value>,
}

/// The start of the name of the field a shared store keeps an answer in.
pub(crate) const ANSWER_FIELD: &str = "a:";

/// Answers a re-runnable task keeps for a run again, at most.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) const MAX_KEPT_ANSWERS: usize = 64;

impl TaskRecord {
    /// The status a client is shown.
    pub(crate) fn shown_status(&self) -> TaskStatus {
        if !self.status.is_terminal() && !self.questions.is_empty() {
            TaskStatus::InputRequired
        } else {
            self.status
        }
    }

    /// Roughly the bytes it holds (its JSON parts).
    pub(crate) fn weight(&self) -> usize {
        let json = |v: &Value| crate::protocol::json_len(v);
        256 + self.id.len()
            + self.owner.len()
            + self.subject.as_ref().map_or(0, String::len)
            + self.caller.as_ref().map_or(0, String::len)
            + self.message.as_ref().map_or(0, String::len)
            + self
                .questions
                .iter()
                .map(|(k, v)| k.len() + json(v))
                .sum::<usize>()
            + self.result.as_ref().map_or(0, json)
            + self.error.as_ref().map_or(0, json)
            + self.rerun.as_ref().map_or(0, Rerun::weight)
    }

    /// The bytes it is counted for: its weight, and while the task runs
    /// room for the end the server may write itself ([`END_RESERVE`]).
    pub(crate) fn charge(&self) -> usize {
        self.weight()
            + if self.status.is_terminal() {
                0
            } else {
                END_RESERVE
            }
    }
}

impl Rerun {
    /// The bytes it adds to its record: its JSON and its answers' fields,
    /// as the shared store counts them.
    fn weight(&self) -> usize {
        let json = serde_json::to_string(self).map_or(0, |j| j.len());
        json + self
            .answers
            .iter()
            .map(|(k, v)| ANSWER_FIELD.len() + k.len() + crate::protocol::json_len(v))
            .sum::<usize>()
    }
}

/// Bytes a running task's record is counted for beyond its own: an end of
/// at most this much more (the failure or cancellation the server writes
/// when a result does not fit, or a task is cancelled or lost) always fits.
pub(crate) const END_RESERVE: usize = 1024;

/// How a task ends.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TaskEnd {
    /// Completed, failed or cancelled.
    pub(crate) status: TaskStatus,
    pub(crate) message: Option<String>,
    pub(crate) result: Option<Value>,
    pub(crate) error: Option<Value>,
}

impl TaskEnd {
    /// The end of a task whose own end was refused as `why` (its result does
    /// not fit): a failure saying so, which always fits ([`END_RESERVE`]).
    pub(crate) fn not_kept(why: &str) -> TaskEnd {
        TaskEnd {
            status: TaskStatus::Failed,
            message: None,
            result: None,
            error: Some(serde_json::json!({
                "code": crate::protocol::jsonrpc::INTERNAL_ERROR,
                "message": format!("the task's result was not kept: {why}"),
            })),
        }
    }
}

/// What the instance serving a client's request tells the instance running
/// the task.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TaskSignal {
    /// Answers to open questions, by key (already removed from the record).
    Answers(Map<String, Value>),
    /// The task was cancelled (already ended in the record): stop it.
    Cancel,
}

/// Why the store could not do what it was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TaskStoreError {
    /// The store is unreachable (a shared store's server is away).
    #[cfg(feature = "redis")]
    Unavailable,
    /// Full: too many tasks, or too many bytes kept (the message says which).
    Full(String),
    /// No such task (unknown, expired).
    Unknown,
}

impl std::fmt::Display for TaskStoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            #[cfg(feature = "redis")]
            TaskStoreError::Unavailable => f.write_str("the task store is unavailable"),
            TaskStoreError::Full(why) => f.write_str(why),
            TaskStoreError::Unknown => f.write_str("no such task"),
        }
    }
}

impl std::error::Error for TaskStoreError {}

/// An MCP session's record in a shared store, and the instances that hold it.
pub(crate) type HeldSession = (Value, Vec<String>);

/// A signal for a task of this instance: the task's id and the signal.
pub(crate) type Signal = (String, TaskSignal);

/// Where task records live. A running task's record is kept while its
/// instance lives; an ended one, `ttl` after it ended.
pub(crate) trait TaskStore: Send + Sync + 'static {
    /// The id of this instance (a record's `owner`).
    fn instance(&self) -> &str;
    /// Records a new task; completes once every instance can read it.
    fn create(&self, record: TaskRecord) -> StoreFuture<Result<(), TaskStoreError>>;
    /// The task as last recorded (`None`: unknown or expired). A task whose
    /// instance is gone is failed here, once, with `lost` as its error.
    fn get(&self, id: &str, lost: Value)
    -> StoreFuture<Result<Option<TaskRecord>, TaskStoreError>>;
    /// Adds an open question.
    fn ask(&self, id: &str, key: &str, request: Value) -> StoreFuture<Result<(), TaskStoreError>>;
    /// Removes those of `keys` that are open questions of a task that has
    /// not ended; gives the ones it removed.
    fn answered(
        &self,
        id: &str,
        keys: Vec<String>,
    ) -> StoreFuture<Result<Vec<String>, TaskStoreError>>;
    /// Keeps `answers` (by question key) for a run again of re-runnable
    /// task `id` ([`Rerun::answers`]), up to [`MAX_KEPT_ANSWERS`].
    fn keep_answers(
        &self,
        _id: &str,
        _answers: &Map<String, Value>,
    ) -> StoreFuture<Result<(), TaskStoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }
    /// Sets the status message of a task that has not ended.
    fn note(&self, id: &str, message: String) -> StoreFuture<Result<(), TaskStoreError>>;
    /// Ends the task unless it has ended already; `true` if this ended it.
    fn finish(&self, id: &str, end: TaskEnd) -> StoreFuture<Result<bool, TaskStoreError>>;
    /// Ends the task as its run here ended: as [`finish`](Self::finish),
    /// unless another instance took the task over (then `false`).
    fn finish_run(&self, id: &str, end: TaskEnd) -> StoreFuture<Result<bool, TaskStoreError>> {
        self.finish(id, end)
    }
    /// Tells instance `owner` about its task `id`.
    fn signal(
        &self,
        owner: &str,
        id: &str,
        signal: TaskSignal,
    ) -> StoreFuture<Result<(), TaskStoreError>>;
    /// The signals for this instance's tasks (taken once, by the MCP export).
    fn take_signals(&self) -> Option<mpsc::Receiver<Signal>>;
    /// The re-runnable tasks ([`Rerun`]) this instance took over from
    /// instances that died, each to run again here (taken once, by the MCP
    /// export; until then this instance takes over none). `None`: a store
    /// no other instance shares, whose tasks die with it.
    fn take_claims(&self) -> Option<mpsc::Receiver<TaskRecord>> {
        None
    }

    /// Whether other instances read this store: MCP sessions are then kept
    /// in it too, so that any instance serves any of them.
    fn shared(&self) -> bool {
        false
    }
    /// Records MCP session `id` (`record`: what serving it needs), held by
    /// this instance, for `ttl` from its last use.
    fn put_session(
        &self,
        _id: &str,
        _record: Value,
        _ttl: std::time::Duration,
    ) -> StoreFuture<Result<(), TaskStoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }
    /// MCP session `id`'s record and the instances that hold it (this one
    /// added), its time to live renewed to `ttl`; `None`: unknown or ended.
    fn touch_session(
        &self,
        _id: &str,
        _ttl: std::time::Duration,
    ) -> StoreFuture<Result<Option<HeldSession>, TaskStoreError>> {
        Box::pin(std::future::ready(Ok(None)))
    }
    /// Ends MCP session `id`; gives the instances that held it.
    fn end_session(&self, _id: &str) -> StoreFuture<Result<Vec<String>, TaskStoreError>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }
}

/// Signals waiting for the MCP export, at most; more are dropped (a task
/// that misses its cancellation still ends at its timeout).
pub(crate) const SIGNAL_QUEUE: usize = 1024;

/// Limits of a task store (see [the module](self)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskLimits {
    /// How long a record is kept after the task ended.
    pub(crate) ttl: Duration,
    /// Records kept at most.
    pub(crate) max_tasks: usize,
    /// Bytes kept at most (records' JSON, roughly).
    pub(crate) max_bytes: usize,
    /// Records one caller may hold at most, running and ended.
    pub(crate) max_tasks_per_caller: usize,
    /// Bytes one caller's records may hold at most, running and ended
    /// (`max_task_bytes_per_client`).
    pub(crate) max_bytes_per_caller: usize,
}

/// Records one instance keeps at most (its bytes bound it first, normally).
pub(crate) const MAX_TASKS: usize = 100_000;

impl Default for TaskLimits {
    fn default() -> Self {
        TaskLimits {
            ttl: Duration::from_secs(30 * 60),
            max_tasks: MAX_TASKS,
            max_bytes: 64 * 1024 * 1024,
            max_tasks_per_caller: MAX_TASKS / 8,
            max_bytes_per_caller: 8 * 1024 * 1024,
        }
    }
}

impl TaskLimits {
    /// The records one caller may hold: the same share of `MAX_TASKS` as
    /// its bytes are of the server's, so that many tiny tasks fill only
    /// their caller's share of the records too; never fewer than the tasks
    /// it may run at once (`running`), nor more than `MAX_TASKS`.
    pub(crate) fn tasks_per_caller(max_bytes: usize, per_caller: usize, running: usize) -> usize {
        let share = (MAX_TASKS as u128 * per_caller as u128 / max_bytes.max(1) as u128) as usize;
        share.clamp(running.clamp(1, MAX_TASKS), MAX_TASKS)
    }
}

/// The store holds `max_tasks` records.
pub(crate) fn too_many_tasks(limits: &TaskLimits) -> TaskStoreError {
    TaskStoreError::Full(format!(
        "the server keeps at most {} tasks (max_tasks)",
        limits.max_tasks
    ))
}

/// The store holds `max_bytes`.
pub(crate) fn too_many_bytes(limits: &TaskLimits) -> TaskStoreError {
    TaskStoreError::Full(format!(
        "the server keeps at most {} bytes of tasks (max_task_bytes)",
        limits.max_bytes
    ))
}

/// The caller holds its share of the records.
pub(crate) fn too_many_tasks_of_caller(limits: &TaskLimits) -> TaskStoreError {
    TaskStoreError::Full(format!(
        "one caller keeps at most {} tasks, running and ended ones until they expire \
         (its share of the server's {}, as max_task_bytes_per_client is of max_task_bytes)",
        limits.max_tasks_per_caller, limits.max_tasks
    ))
}

/// The caller holds its share of the bytes.
pub(crate) fn too_many_bytes_of_caller(limits: &TaskLimits) -> TaskStoreError {
    TaskStoreError::Full(format!(
        "one caller's tasks, running and ended ones until they expire, hold at most {} bytes \
         (max_task_bytes_per_client)",
        limits.max_bytes_per_caller
    ))
}

/// The store of a single instance: records in memory, on the session's
/// clock.
pub(crate) struct InMemoryTaskStore {
    instance: String,
    limits: TaskLimits,
    clock: std::sync::Arc<dyn super::Clock>,
    inner: Mutex<Records>,
    signals: mpsc::Sender<Signal>,
    signals_rx: Mutex<Option<mpsc::Receiver<Signal>>>,
}

/// One record, with what it is counted for.
struct Entry {
    record: TaskRecord,
    /// Its [`TaskRecord::charge`].
    charge: usize,
    /// When it expires (ms since the epoch; set when the task ends).
    expires: Option<u64>,
}

/// What one caller holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Held {
    tasks: usize,
    bytes: usize,
}

#[derive(Default)]
struct Records {
    by_id: HashMap<String, Entry>,
    bytes: usize,
    /// By caller, while it holds a record.
    held: HashMap<String, Held>,
    /// The ended tasks, by when their records expire (oldest first).
    expiring: VecDeque<(u64, String)>,
}

impl Records {
    /// What `caller` holds (nothing: no caller's share).
    fn held_by(&self, caller: Option<&String>) -> Held {
        caller
            .and_then(|c| self.held.get(c))
            .copied()
            .unwrap_or_default()
    }

    /// Keeps `record`, replacing the one of its id; an ended one expires
    /// `ttl` ms after it ended (`now`).
    fn put(&mut self, record: TaskRecord, now: u64, ttl: u64) {
        let old_expiry = self.by_id.get(&record.id).and_then(|e| e.expires);
        self.remove(&record.id);
        let expires = match old_expiry {
            Some(at) => Some(at),
            None if record.status.is_terminal() => {
                let at = now.saturating_add(ttl);
                self.expiring.push_back((at, record.id.clone()));
                Some(at)
            }
            None => None,
        };
        let charge = record.charge();
        self.bytes += charge;
        if let Some(caller) = &record.caller {
            let held = self.held.entry(caller.clone()).or_default();
            held.tasks += 1;
            held.bytes += charge;
        }
        self.by_id.insert(
            record.id.clone(),
            Entry {
                record,
                charge,
                expires,
            },
        );
    }

    fn remove(&mut self, id: &str) {
        let Some(entry) = self.by_id.remove(id) else {
            return;
        };
        self.bytes -= entry.charge;
        if let Some(caller) = &entry.record.caller
            && let Some(held) = self.held.get_mut(caller)
        {
            held.tasks -= 1;
            held.bytes -= entry.charge;
            if held.tasks == 0 {
                self.held.remove(caller);
            }
        }
    }

    /// Drops the records of tasks that ended `ttl` or longer before `now` (a
    /// running task's record is kept while it runs: this instance runs it).
    fn expire(&mut self, now: u64) {
        while let Some((at, _)) = self.expiring.front() {
            if *at > now {
                break;
            }
            let Some((at, id)) = self.expiring.pop_front() else {
                break;
            };
            if self.by_id.get(&id).is_some_and(|e| e.expires == Some(at)) {
                self.remove(&id);
            }
        }
    }

    /// Why `record` may not replace what its id holds now (`old`: the
    /// charge it holds; 0 for a new one): only growth is refused, its
    /// caller's share first.
    fn refuse(
        &self,
        record: &TaskRecord,
        old: usize,
        limits: &TaskLimits,
    ) -> Option<TaskStoreError> {
        let charge = record.charge();
        if charge <= old {
            return None;
        }
        let held = self.held_by(record.caller.as_ref());
        if record.caller.is_some() && held.bytes - old + charge > limits.max_bytes_per_caller {
            return Some(too_many_bytes_of_caller(limits));
        }
        if self.bytes - old + charge > limits.max_bytes {
            return Some(too_many_bytes(limits));
        }
        None
    }
}

impl InMemoryTaskStore {
    pub(crate) fn new(
        instance: &str,
        limits: TaskLimits,
        clock: std::sync::Arc<dyn super::Clock>,
    ) -> InMemoryTaskStore {
        let (signals, signals_rx) = mpsc::channel(SIGNAL_QUEUE);
        InMemoryTaskStore {
            instance: instance.to_owned(),
            limits,
            clock,
            inner: Mutex::new(Records::default()),
            signals,
            signals_rx: Mutex::new(Some(signals_rx)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Records> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> u64 {
        self.clock.unix_millis()
    }

    fn ttl_ms(&self) -> u64 {
        self.limits.ttl.as_millis() as u64
    }

    /// The records, expired ones dropped first.
    fn records(&self) -> std::sync::MutexGuard<'_, Records> {
        let now = self.now();
        let mut records = self.lock();
        records.expire(now);
        records
    }

    /// Changes the record `id` of a task that has not ended with `change`
    /// (a task that has ended is not changed: `change` runs on a copy);
    /// refuses a change that would take its caller or the store over
    /// their bytes.
    fn change<T>(
        &self,
        id: &str,
        change: impl FnOnce(&mut TaskRecord) -> T,
    ) -> Result<T, TaskStoreError> {
        let now = self.now();
        let mut records = self.records();
        let Some(entry) = records.by_id.get(id) else {
            return Err(TaskStoreError::Unknown);
        };
        let mut record = entry.record.clone();
        let old = entry.charge;
        let out = change(&mut record);
        if entry.record.status.is_terminal() {
            return Ok(out);
        }
        record.updated_ms = now;
        if let Some(refused) = records.refuse(&record, old, &self.limits) {
            return Err(refused);
        }
        records.put(record, now, self.ttl_ms());
        Ok(out)
    }
}

impl TaskStore for InMemoryTaskStore {
    fn instance(&self) -> &str {
        &self.instance
    }

    fn create(&self, record: TaskRecord) -> StoreFuture<Result<(), TaskStoreError>> {
        let now = self.now();
        let mut records = self.records();
        let limits = &self.limits;
        let held = records.held_by(record.caller.as_ref());
        let out = if record.caller.is_some() && held.tasks >= limits.max_tasks_per_caller {
            Err(too_many_tasks_of_caller(limits))
        } else if records.by_id.len() >= limits.max_tasks {
            Err(too_many_tasks(limits))
        } else if let Some(refused) = records.refuse(&record, 0, limits) {
            Err(refused)
        } else {
            records.put(record, now, self.ttl_ms());
            Ok(())
        };
        Box::pin(std::future::ready(out))
    }

    fn get(
        &self,
        id: &str,
        _lost: Value,
    ) -> StoreFuture<Result<Option<TaskRecord>, TaskStoreError>> {
        // A single instance is never lost while it answers.
        let found = self.records().by_id.get(id).map(|e| e.record.clone());
        Box::pin(std::future::ready(Ok(found)))
    }

    fn ask(&self, id: &str, key: &str, request: Value) -> StoreFuture<Result<(), TaskStoreError>> {
        let out = self.change(id, |record| {
            if !record.status.is_terminal() {
                record.questions.insert(key.to_owned(), request);
            }
        });
        Box::pin(std::future::ready(out))
    }

    fn answered(
        &self,
        id: &str,
        keys: Vec<String>,
    ) -> StoreFuture<Result<Vec<String>, TaskStoreError>> {
        let out = self.change(id, |record| {
            if record.status.is_terminal() {
                return Vec::new();
            }
            keys.into_iter()
                .filter(|key| record.questions.remove(key).is_some())
                .collect()
        });
        Box::pin(std::future::ready(out))
    }

    fn note(&self, id: &str, message: String) -> StoreFuture<Result<(), TaskStoreError>> {
        let out = self.change(id, |record| {
            if !record.status.is_terminal() {
                record.message = Some(message);
            }
        });
        Box::pin(std::future::ready(out))
    }

    fn finish(&self, id: &str, end: TaskEnd) -> StoreFuture<Result<bool, TaskStoreError>> {
        let out = self.change(id, |record| {
            if record.status.is_terminal() {
                return false;
            }
            record.status = end.status;
            record.message = end.message;
            record.result = end.result;
            record.error = end.error;
            record.questions.clear();
            true
        });
        Box::pin(std::future::ready(out))
    }

    fn signal(
        &self,
        _owner: &str,
        id: &str,
        signal: TaskSignal,
    ) -> StoreFuture<Result<(), TaskStoreError>> {
        if self.signals.try_send((id.to_owned(), signal)).is_err() {
            tracing::warn!(task = %id, "too many task signals waiting; one dropped");
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn take_signals(&self) -> Option<mpsc::Receiver<Signal>> {
        self.signals_rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{Clock as _, FakeClock};
    use serde_json::json;
    use std::sync::Arc;

    fn store(clock: Arc<FakeClock>, max_tasks: usize, max_bytes: usize) -> InMemoryTaskStore {
        let limits = TaskLimits {
            ttl: Duration::from_secs(60),
            max_tasks,
            max_bytes,
            max_tasks_per_caller: max_tasks,
            max_bytes_per_caller: max_bytes,
        };
        InMemoryTaskStore::new("i1", limits, clock)
    }

    fn record(id: &str, now: u64) -> TaskRecord {
        TaskRecord {
            id: id.into(),
            owner: "i1".into(),
            subject: None,
            caller: None,
            status: TaskStatus::Working,
            message: None,
            created_ms: now,
            updated_ms: now,
            questions: BTreeMap::new(),
            result: None,
            error: None,
            rerun: None,
        }
    }

    fn end(status: TaskStatus) -> TaskEnd {
        TaskEnd {
            status,
            message: None,
            result: Some(json!({"content": []})),
            error: None,
        }
    }

    async fn get(store: &InMemoryTaskStore, id: &str) -> Option<TaskRecord> {
        store.get(id, json!(null)).await.unwrap()
    }

    /// A store of 10 tasks and 1 MiB on a fake clock, holding task `t`,
    /// created now.
    async fn with_task() -> (Arc<FakeClock>, InMemoryTaskStore) {
        let clock = Arc::new(FakeClock::new());
        let store = store(Arc::clone(&clock), 10, 1 << 20);
        store
            .create(record("t", clock.unix_millis()))
            .await
            .unwrap();
        (clock, store)
    }

    #[tokio::test]
    async fn questions_make_a_task_input_required_until_answered() {
        let (_clock, store) = with_task().await;
        store.ask("t", "a", json!({"method": "m"})).await.unwrap();
        store.ask("t", "b", json!({"method": "m"})).await.unwrap();
        let t = get(&store, "t").await.unwrap();
        assert_eq!(t.shown_status(), TaskStatus::InputRequired);
        let removed = store
            .answered("t", vec!["a".into(), "zzz".into()])
            .await
            .unwrap();
        assert_eq!(removed, vec!["a".to_owned()], "unknown keys are ignored");
        let again = store.answered("t", vec!["a".into()]).await.unwrap();
        assert!(again.is_empty(), "an answered key is answered once");
        let t = get(&store, "t").await.unwrap();
        assert_eq!(t.shown_status(), TaskStatus::InputRequired);
        assert_eq!(t.questions.keys().collect::<Vec<_>>(), ["b"]);
        store.answered("t", vec!["b".into()]).await.unwrap();
        assert_eq!(
            get(&store, "t").await.unwrap().shown_status(),
            TaskStatus::Working
        );
    }

    #[tokio::test]
    async fn an_ended_task_stays_ended() {
        let (_clock, store) = with_task().await;
        store.ask("t", "a", json!({})).await.unwrap();
        assert!(store.finish("t", end(TaskStatus::Cancelled)).await.unwrap());
        assert!(!store.finish("t", end(TaskStatus::Completed)).await.unwrap());
        let t = get(&store, "t").await.unwrap();
        assert_eq!(t.shown_status(), TaskStatus::Cancelled);
        assert!(t.questions.is_empty());
        store.ask("t", "late", json!({})).await.unwrap();
        assert!(get(&store, "t").await.unwrap().questions.is_empty());
        assert!(
            store
                .answered("t", vec!["a".into()])
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn ended_tasks_expire_after_the_ttl_and_records_are_bounded() {
        let clock = Arc::new(FakeClock::new());
        let store = store(Arc::clone(&clock), 2, 4096);
        store
            .create(record("a", clock.unix_millis()))
            .await
            .unwrap();
        store
            .create(record("b", clock.unix_millis()))
            .await
            .unwrap();
        let full = store.create(record("c", clock.unix_millis())).await;
        assert!(matches!(full, Err(TaskStoreError::Full(ref m)) if m.contains("max_tasks")));
        store.finish("b", end(TaskStatus::Completed)).await.unwrap();
        clock.advance(Duration::from_secs(40));
        store.finish("a", end(TaskStatus::Completed)).await.unwrap();
        clock.advance(Duration::from_secs(30));
        assert!(get(&store, "a").await.is_some(), "ended 30 s ago");
        assert!(get(&store, "b").await.is_none(), "ended 70 s ago");
        store
            .create(record("c", clock.unix_millis()))
            .await
            .unwrap();
        clock.advance(Duration::from_secs(3600));
        assert!(
            get(&store, "c").await.is_some(),
            "a running task is kept while it runs"
        );
        store
            .create(record("c", clock.unix_millis()))
            .await
            .unwrap();
        // A result that would take the store over its bytes is refused.
        let big = TaskEnd {
            result: Some(json!("x".repeat(8192))),
            ..end(TaskStatus::Completed)
        };
        let refused = store.finish("c", big).await;
        assert!(
            matches!(refused, Err(TaskStoreError::Full(ref m)) if m.contains("max_task_bytes")),
            "{refused:?}"
        );
        assert_eq!(
            get(&store, "c").await.unwrap().shown_status(),
            TaskStatus::Working
        );
        assert_eq!(
            store.note("nope", String::new()).await,
            Err(TaskStoreError::Unknown)
        );
    }

    fn shared_store(clock: Arc<FakeClock>, per_caller_tasks: usize) -> InMemoryTaskStore {
        let limits = TaskLimits {
            ttl: Duration::from_secs(60),
            max_tasks: 1000,
            max_bytes: 1 << 20,
            max_tasks_per_caller: per_caller_tasks,
            max_bytes_per_caller: 8192,
        };
        InMemoryTaskStore::new("i1", limits, clock)
    }

    fn of(caller: &str, id: &str, now: u64) -> TaskRecord {
        TaskRecord {
            caller: Some(caller.into()),
            ..record(id, now)
        }
    }

    fn completed(bytes: usize) -> TaskEnd {
        TaskEnd {
            result: Some(json!("x".repeat(bytes))),
            ..end(TaskStatus::Completed)
        }
    }

    fn held(store: &InMemoryTaskStore, caller: &str) -> Held {
        store
            .records()
            .held
            .get(caller)
            .copied()
            .unwrap_or_default()
    }

    fn names(refused: &Result<impl std::fmt::Debug, TaskStoreError>, setting: &str) -> bool {
        matches!(refused, Err(TaskStoreError::Full(m)) if m.contains(setting))
    }

    #[tokio::test]
    async fn a_caller_holds_its_share_of_bytes_running_and_ended_until_they_expire() {
        let clock = Arc::new(FakeClock::new());
        let store = shared_store(Arc::clone(&clock), 100);
        let now = || clock.unix_millis();
        // A running task is counted with room for its end.
        store.create(of("ada", "a1", now())).await.unwrap();
        let running = of("ada", "a1", now()).charge();
        assert_eq!(running, of("ada", "a1", 0).weight() + END_RESERVE);
        assert_eq!(
            held(&store, "ada"),
            Held {
                tasks: 1,
                bytes: running
            }
        );
        // Its result counts once it ended, and goes on counting.
        assert!(store.finish("a1", completed(5000)).await.unwrap());
        let a1 = get(&store, "a1").await.unwrap().charge();
        assert!(a1 > 5000 && held(&store, "ada").bytes == a1);
        // A result over the share is refused, naming the setting, and the
        // task still ends: its failure fits in what it was counted for.
        store.create(of("ada", "a2", now())).await.unwrap();
        let refused = store.finish("a2", completed(5000)).await;
        assert!(names(&refused, "max_task_bytes_per_client"), "{refused:?}");
        assert_eq!(get(&store, "a2").await.unwrap().status, TaskStatus::Working);
        let failed = TaskEnd {
            status: TaskStatus::Failed,
            message: None,
            result: None,
            error: Some(
                json!({"code": crate::protocol::jsonrpc::INTERNAL_ERROR, "message": "the task's result was not kept"}),
            ),
        };
        assert!(store.finish("a2", failed).await.unwrap());
        // New tasks until the share is full, then refused, naming it.
        let mut n = 0;
        let refused = loop {
            n += 1;
            match store.create(of("ada", &format!("more{n}"), now())).await {
                Ok(()) => assert!(n < 10, "the share never filled"),
                Err(e) => break Err::<(), _>(e),
            }
        };
        assert!(names(&refused, "max_task_bytes_per_client"), "{refused:?}");
        assert!(held(&store, "ada").bytes <= 8192);
        // Every running task can still end, even at the share.
        for i in 1..n {
            let cancelled = end(TaskStatus::Cancelled);
            let cancelled = TaskEnd {
                result: None,
                ..cancelled
            };
            assert!(store.finish(&format!("more{i}"), cancelled).await.unwrap());
        }
        // Others have shares of their own; a record of no caller counts
        // for the store only.
        store.create(of("bob", "b1", now())).await.unwrap();
        assert!(store.finish("b1", completed(5000)).await.unwrap());
        store.create(record("local", now())).await.unwrap();
        store.finish("local", completed(20_000)).await.unwrap();
        assert_eq!(held(&store, "bob").tasks, 1);
        // Ada's ended tasks expire: room again, and nothing left of hers.
        clock.advance(Duration::from_secs(61));
        assert_eq!(held(&store, "ada"), Held::default());
        store.create(of("ada", "again", now())).await.unwrap();
        assert!(store.finish("again", completed(5000)).await.unwrap());
        assert_eq!(held(&store, "ada").tasks, 1);
        assert!(
            !store.lock().held.contains_key("bob"),
            "{:?}",
            store.lock().held
        );
        let records = store.lock();
        let total: usize = records.by_id.values().map(|e| e.charge).sum();
        assert_eq!(records.bytes, total);
    }

    #[tokio::test]
    async fn a_caller_holds_its_share_of_records_ended_ones_too() {
        let clock = Arc::new(FakeClock::new());
        let store = shared_store(Arc::clone(&clock), 3);
        let now = clock.unix_millis();
        for id in ["a1", "a2", "a3"] {
            store.create(of("ada", id, now)).await.unwrap();
            store.finish(id, end(TaskStatus::Completed)).await.unwrap();
        }
        let refused = store.create(of("ada", "a4", now)).await;
        assert!(names(&refused, "max_task_bytes_per_client"), "{refused:?}");
        assert!(
            matches!(&refused, Err(TaskStoreError::Full(m)) if m.contains("at most 3 tasks")),
            "{refused:?}"
        );
        store.create(of("bob", "b1", now)).await.unwrap();
        store.create(record("local", now)).await.unwrap();
        clock.advance(Duration::from_secs(60));
        store
            .create(of("ada", "a4", clock.unix_millis()))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn an_ended_task_is_not_changed_nor_kept_longer() {
        let (clock, store) = with_task().await;
        store.finish("t", end(TaskStatus::Completed)).await.unwrap();
        let ended = get(&store, "t").await.unwrap();
        clock.advance(Duration::from_secs(50));
        store.note("t", "late".into()).await.unwrap();
        assert!(!store.finish("t", end(TaskStatus::Failed)).await.unwrap());
        assert_eq!(get(&store, "t").await.unwrap(), ended);
        clock.advance(Duration::from_secs(10));
        assert!(
            get(&store, "t").await.is_none(),
            "expired 60 s after its end"
        );
    }

    #[test]
    fn a_callers_share_of_records_follows_its_share_of_bytes() {
        let mib = 1024 * 1024;
        assert_eq!(TaskLimits::tasks_per_caller(64 * mib, 8 * mib, 100), 12_500);
        assert_eq!(TaskLimits::default().max_tasks_per_caller, 12_500);
        assert_eq!(TaskLimits::tasks_per_caller(64 * mib, 1024, 100), 100);
        assert_eq!(TaskLimits::tasks_per_caller(mib, 2 * mib, 100), MAX_TASKS);
        assert_eq!(TaskLimits::tasks_per_caller(mib, 1, 0), 1);
    }

    #[tokio::test]
    async fn signals_reach_the_taker() {
        let clock = Arc::new(FakeClock::new());
        let store = store(clock, 10, 1 << 20);
        let mut rx = store.take_signals().unwrap();
        assert!(store.take_signals().is_none(), "taken once");
        store.signal("i1", "t", TaskSignal::Cancel).await.unwrap();
        assert_eq!(rx.recv().await, Some(("t".to_owned(), TaskSignal::Cancel)));
    }
}

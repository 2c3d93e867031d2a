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

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::StoreFuture;

/// A task's status, as MCP names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskStatus {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

#[cfg_attr(not(feature = "redis"), allow(dead_code))] // the shared store's
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
}

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
            + self.message.as_ref().map_or(0, String::len)
            + self
                .questions
                .iter()
                .map(|(k, v)| k.len() + json(v))
                .sum::<usize>()
            + self.result.as_ref().map_or(0, json)
            + self.error.as_ref().map_or(0, json)
    }
}

/// How a task ends.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TaskEnd {
    /// Completed, failed or cancelled.
    pub(crate) status: TaskStatus,
    pub(crate) message: Option<String>,
    pub(crate) result: Option<Value>,
    pub(crate) error: Option<Value>,
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
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    Unavailable,
    /// Full: too many tasks, or too many bytes kept (the message says which).
    Full(String),
    /// No such task (unknown, expired).
    Unknown,
}

impl std::fmt::Display for TaskStoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TaskStoreError::Unavailable => f.write_str("the task store is unavailable"),
            TaskStoreError::Full(why) => f.write_str(why),
            TaskStoreError::Unknown => f.write_str("no such task"),
        }
    }
}

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
    /// Sets the status message of a task that has not ended.
    fn note(&self, id: &str, message: String) -> StoreFuture<Result<(), TaskStoreError>>;
    /// Ends the task unless it has ended already; `true` if this ended it.
    fn finish(&self, id: &str, end: TaskEnd) -> StoreFuture<Result<bool, TaskStoreError>>;
    /// Tells instance `owner` about its task `id`.
    fn signal(
        &self,
        owner: &str,
        id: &str,
        signal: TaskSignal,
    ) -> StoreFuture<Result<(), TaskStoreError>>;
    /// The signals for this instance's tasks (taken once, by the MCP export).
    fn take_signals(&self) -> Option<mpsc::Receiver<Signal>>;
}

/// Signals waiting for the MCP export, at most; more are dropped (a task
/// that misses its cancellation still ends at its timeout).
pub(crate) const SIGNAL_QUEUE: usize = 1024;

/// Limits of an in-memory task store.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskLimits {
    /// How long a record is kept after the task ended.
    pub(crate) ttl: Duration,
    /// Records kept at most.
    pub(crate) max_tasks: usize,
    /// Bytes kept at most (records' JSON, roughly).
    pub(crate) max_bytes: usize,
}

/// Records one instance keeps at most (its bytes bound it first, normally).
pub(crate) const MAX_TASKS: usize = 100_000;

impl Default for TaskLimits {
    fn default() -> Self {
        TaskLimits {
            ttl: Duration::from_secs(30 * 60),
            max_tasks: MAX_TASKS,
            max_bytes: 64 * 1024 * 1024,
        }
    }
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

#[derive(Default)]
struct Records {
    by_id: HashMap<String, (TaskRecord, usize)>,
    bytes: usize,
}

impl Records {
    fn put(&mut self, record: TaskRecord) {
        let weight = record.weight();
        self.bytes += weight;
        if let Some((_, old)) = self.by_id.insert(record.id.clone(), (record, weight)) {
            self.bytes -= old;
        }
    }

    fn remove(&mut self, id: &str) {
        if let Some((_, weight)) = self.by_id.remove(id) {
            self.bytes -= weight;
        }
    }

    /// Drops the records of tasks that ended before `before` (a running
    /// task's record is kept while it runs: this instance runs it).
    fn expire(&mut self, before: u64) {
        let old: Vec<String> = self
            .by_id
            .values()
            .filter(|(r, _)| r.status.is_terminal() && r.updated_ms < before)
            .map(|(r, _)| r.id.clone())
            .collect();
        for id in old {
            self.remove(&id);
        }
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

    /// The records, expired ones dropped first.
    fn records(&self) -> std::sync::MutexGuard<'_, Records> {
        let ttl = self.limits.ttl.as_millis() as u64;
        let now = self.now();
        let mut records = self.lock();
        records.expire(now.saturating_sub(ttl));
        records
    }

    /// Changes the record `id` with `change`, which says whether it changed
    /// it; refuses one that would take the store over its bytes.
    fn change<T>(
        &self,
        id: &str,
        change: impl FnOnce(&mut TaskRecord) -> T,
    ) -> Result<T, TaskStoreError> {
        let now = self.now();
        let mut records = self.records();
        let Some((record, _)) = records.by_id.get(id) else {
            return Err(TaskStoreError::Unknown);
        };
        let mut record = record.clone();
        let out = change(&mut record);
        record.updated_ms = now;
        let old = records.by_id.get(id).map_or(0, |(_, w)| *w);
        if records.bytes - old + record.weight() > self.limits.max_bytes {
            return Err(TaskStoreError::Full(format!(
                "the server keeps at most {} bytes of tasks (max_task_bytes)",
                self.limits.max_bytes
            )));
        }
        records.put(record);
        Ok(out)
    }
}

impl TaskStore for InMemoryTaskStore {
    fn instance(&self) -> &str {
        &self.instance
    }

    fn create(&self, record: TaskRecord) -> StoreFuture<Result<(), TaskStoreError>> {
        let mut records = self.records();
        let out = if records.by_id.len() >= self.limits.max_tasks {
            Err(TaskStoreError::Full(format!(
                "the server keeps at most {} tasks (max_tasks)",
                self.limits.max_tasks
            )))
        } else if records.bytes + record.weight() > self.limits.max_bytes {
            Err(TaskStoreError::Full(format!(
                "the server keeps at most {} bytes of tasks (max_task_bytes)",
                self.limits.max_bytes
            )))
        } else {
            records.put(record);
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
        let found = self.records().by_id.get(id).map(|(r, _)| r.clone());
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
        };
        InMemoryTaskStore::new("i1", limits, clock)
    }

    fn record(id: &str, now: u64) -> TaskRecord {
        TaskRecord {
            id: id.into(),
            owner: "i1".into(),
            subject: None,
            status: TaskStatus::Working,
            message: None,
            created_ms: now,
            updated_ms: now,
            questions: BTreeMap::new(),
            result: None,
            error: None,
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

    #[tokio::test]
    async fn questions_make_a_task_input_required_until_answered() {
        let clock = Arc::new(FakeClock::new());
        let store = store(Arc::clone(&clock), 10, 1 << 20);
        let now = clock.unix_millis();
        store.create(record("t", now)).await.unwrap();
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
        let clock = Arc::new(FakeClock::new());
        let store = store(Arc::clone(&clock), 10, 1 << 20);
        store
            .create(record("t", clock.unix_millis()))
            .await
            .unwrap();
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

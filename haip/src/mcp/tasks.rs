//! MCP tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663): a
//! call of a tool that supports tasks ([`TaskSupport`]), from a client that
//! declares the extension, becomes a task once it has to wait for something
//! other than a question asked before it did any waiting; the client follows
//! it with `tasks/get`, answers its questions with `tasks/update`, and may
//! stop it with `tasks/cancel`.
//!
//! The task's call runs on the instance that started it; its record (status,
//! open questions, result) is in the server's task store (`session::tasks`),
//! which a Redis-backed server shares with its other instances. Whichever
//! instance serves `tasks/update` or `tasks/cancel` changes the record
//! first, then tells the running instance, which hands the answers to the
//! waiting `ctx.ask` (or cancels the call).
//!
//! Bounds, each per caller so that one caller exhausts only its own share
//! ([`share_of`]: the [`CallerKey`] the `/mcp` front door put in the
//! request, else the authenticated subject, else one share for all
//! unauthenticated callers; an unauthenticated loopback caller, and the one
//! client of stdio, is [`CallerKey::Unlimited`], counted only in the
//! server's totals):
//!
//! - tasks running on this instance: `max_tasks_per_client` per caller
//!   (concurrency: ended tasks do not count), and all callers' at most
//!   `max_running`; a call beyond them answers with a tool error naming the
//!   limit;
//! - task records, running and ended until they expire (`task_ttl` after
//!   the end): `max_task_bytes_per_client` bytes per caller, and a share of
//!   the records as large, in the store (`session::tasks`, which says how
//!   they are counted). A task that would start beyond them answers with a
//!   tool error naming the setting; a result that would go beyond them is
//!   not kept: the task fails, saying why.
//!
//! With a store shared by several instances, a task of a tool marked
//! idempotent outlives its instance: when that instance dies, another takes
//! the task over and runs it again from the start
//! ([`Tasks::on_taken_over`], `export/as_task.rs`'s `run_again`), giving its
//! questions the answers its client gave before, up to `task_attempts`
//! runs (`session::tasks::Rerun`).
//!
//! [`TaskSupport`]: crate::TaskSupport

// Sampling and roots are deprecated upstream (SEP-2577), and still what
// today's MCP clients speak.
#![allow(deprecated)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::mcp::model::McpError;
use crate::mcp::model::{
    CreateTaskResult, DetailedTask, GetTaskResult, InputRequests, JsonObject, Task, TaskPayload,
};
use serde_json::{Map, Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, oneshot};
use tokio_util::sync::CancellationToken;

use super::mrtr::RoundPeer;
use super::peer::{Can, Keyed, TakeError, Taken};
use crate::context::share::CallerKey;
use crate::protocol::iso8601_millis;
use crate::session::Shared;
use crate::session::tasks::{
    Rerun, TaskEnd, TaskRecord, TaskSignal, TaskStatus, TaskStore, TaskStoreError,
};

/// Questions one task may have open at once.
const MAX_OPEN_QUESTIONS: usize = 64;

/// How often a task's progress may change its status message, at most.
pub(crate) const NOTE_EVERY: Duration = Duration::from_millis(500);

/// The error a task whose instance died fails with.
fn lost_error() -> Value {
    json!({
        "code": crate::protocol::jsonrpc::INTERNAL_ERROR,
        "message": "instance lost: the server instance running this task stopped before it ended",
    })
}

/// What `tasks/*` answer for a task that is not the caller's to see.
fn invalid_task() -> McpError {
    McpError::invalid_params("Invalid task: unknown, expired, or not yours", None)
}

fn unavailable(e: &TaskStoreError) -> McpError {
    McpError::internal_error(format!("tasks are unavailable: {e}"), None)
}

/// The server's tasks settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskSettings {
    /// How long an ended task is kept (`ttlMs`).
    pub(crate) ttl: Duration,
    /// The polling interval clients are advised (`pollIntervalMs`).
    pub(crate) poll_interval: Duration,
    /// Tasks one caller may have running on this instance (ended ones do
    /// not count: their records are bounded by the store's shares).
    pub(crate) max_per_client: usize,
    /// Tasks running on this instance, at most.
    pub(crate) max_running: usize,
    /// How many times a task of a tool marked idempotent runs at most, with
    /// a store shared by several instances: when the instance running it
    /// dies, another takes it over and runs it again from the start, until
    /// this many runs have been lost (`task_attempts`; 1: never again).
    pub(crate) attempts: u32,
}

impl Default for TaskSettings {
    fn default() -> Self {
        TaskSettings {
            ttl: Duration::from_secs(30 * 60),
            poll_interval: Duration::from_secs(1),
            max_per_client: 100,
            max_running: 1024,
            attempts: 3,
        }
    }
}

/// Who a task counts against, as the task store names it: the `/mcp`
/// front door's `key` for the request when it gave one (the one client of
/// stdio is [`CallerKey::Unlimited`]), else the authenticated `subject`,
/// else the one share of all unauthenticated callers; `None` (no caller's
/// share: the server's totals only) for [`CallerKey::Unlimited`].
pub(crate) fn share_of(key: Option<&CallerKey>, subject: Option<&str>) -> Option<String> {
    match (key, subject) {
        (Some(CallerKey::Unlimited), _) => None,
        (Some(key), _) => Some(key.describe()),
        (None, Some(subject)) => Some(CallerKey::Subject(Arc::from(subject)).describe()),
        (None, None) => Some("unauthenticated callers".to_owned()),
    }
}

/// A task's change of status, for the listen streams of its caller.
#[derive(Debug, Clone)]
pub(crate) struct TaskEvent {
    /// The authenticated caller that started it.
    pub(crate) subject: Option<String>,
    /// The task as `tasks/get` would show it then.
    pub(crate) task: DetailedTask,
}

/// Status changes waiting for slow listen streams, at most (a stream that
/// falls further behind misses some: `tasks/get` has the truth).
const EVENTS: usize = 256;

/// What the tasks and their calls share: the records, the settings, and the
/// announcement of changes.
pub(crate) struct Board {
    store: Arc<dyn TaskStore>,
    settings: TaskSettings,
    events: broadcast::Sender<TaskEvent>,
}

impl Board {
    /// The task fields of `record` as MCP shows them.
    fn task_of(&self, record: &TaskRecord) -> Task {
        let mut task = Task::new(
            record.id.clone(),
            record.shown_status(),
            iso8601_millis(record.created_ms),
            iso8601_millis(record.updated_ms),
        )
        .with_ttl_ms(self.settings.ttl.as_millis() as u64)
        .with_poll_interval_ms(self.settings.poll_interval.as_millis().max(1) as u64);
        if let Some(message) = &record.message {
            task = task.with_status_message(message.clone());
        }
        task
    }

    /// `record` as `tasks/get` shows it.
    fn detailed(&self, record: &TaskRecord) -> DetailedTask {
        let payload = match record.shown_status() {
            TaskStatus::Working => TaskPayload::Working,
            TaskStatus::Cancelled => TaskPayload::Cancelled,
            TaskStatus::InputRequired => TaskPayload::InputRequired {
                input_requests: input_requests(&record.questions),
            },
            TaskStatus::Completed => TaskPayload::Completed {
                result: object(record.result.clone()),
            },
            TaskStatus::Failed => TaskPayload::Failed {
                error: object(
                    record
                        .error
                        .clone()
                        .or_else(|| Some(json!({"code": crate::protocol::jsonrpc::INTERNAL_ERROR, "message": "the task failed"}))),
                ),
            },
        };
        DetailedTask::new(self.task_of(record), payload)
    }

    /// Announces task `id` as it is now, to the listen streams there are.
    async fn changed(&self, id: &str) {
        if self.events.receiver_count() == 0 {
            return;
        }
        if let Ok(Some(record)) = self.store.get(id, lost_error()).await {
            let task = self.detailed(&record);
            let _ = self.events.send(TaskEvent {
                subject: record.subject,
                task,
            });
        }
    }
}

/// This instance's tasks: the ones it runs, and the way to the records of
/// all of them.
pub(crate) struct Tasks {
    shared: Arc<Shared>,
    board: Arc<Board>,
    running: Mutex<HashMap<String, Arc<TaskPeer>>>,
    /// Tasks running here, by caller ([`share_of`]).
    per_client: Mutex<HashMap<String, usize>>,
    slots: Arc<Semaphore>,
    /// Where the signals for MCP sessions go (`export/session.rs`), once
    /// there are sessions: those whose id starts with [`SESSION_SIGNAL`].
    session_signals: std::sync::OnceLock<SessionSignals>,
}

/// The start of the ids of the signals for MCP sessions (a question's
/// answer, a cancellation, a session's end), which the task store carries
/// between instances as it does tasks' signals.
pub(crate) const SESSION_SIGNAL: &str = "mcp-session/";

/// What takes the signals for MCP sessions: the rest of the signal's id
/// after [`SESSION_SIGNAL`], and the signal.
pub(crate) type SessionSignals = Box<dyn Fn(&str, TaskSignal) + Send + Sync>;

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks")
            .field("settings", &self.board.settings)
            .finish_non_exhaustive()
    }
}

/// A task's hold on the instance's and its caller's budgets; given back
/// when the task's call has stopped.
pub(crate) struct Admission {
    tasks: Arc<Tasks>,
    /// Who it counts against ([`share_of`]).
    caller: Option<String>,
    _slot: OwnedSemaphorePermit,
}

impl Admission {
    /// Who the task counts against ([`share_of`]).
    pub(crate) fn caller(&self) -> Option<&str> {
        self.caller.as_deref()
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let Some(caller) = &self.caller else {
            return;
        };
        let mut counts = self.tasks.lock_counts();
        if let Some(n) = counts.get_mut(caller) {
            *n -= 1;
            if *n == 0 {
                counts.remove(caller);
            }
        }
    }
}

impl Tasks {
    /// The tasks of the server sharing `shared`; takes the store's signals
    /// (answers and cancellations other instances pass on) until shutdown.
    pub(crate) fn new(shared: &Arc<Shared>, settings: TaskSettings) -> Arc<Tasks> {
        let tasks = Arc::new(Tasks {
            shared: Arc::clone(shared),
            board: Arc::new(Board {
                store: Arc::clone(&shared.tasks),
                settings,
                events: broadcast::channel(EVENTS).0,
            }),
            running: Mutex::new(HashMap::new()),
            per_client: Mutex::new(HashMap::new()),
            slots: Arc::new(Semaphore::new(settings.max_running.max(1))),
            session_signals: std::sync::OnceLock::new(),
        });
        if let Some(mut signals) = shared.tasks.take_signals() {
            let weak = Arc::downgrade(&tasks);
            let shutdown = shared.shutdown.clone();
            shared.runner.tasks().spawn(async move {
                loop {
                    let signal = tokio::select! {
                        () = shutdown.cancelled() => return,
                        signal = signals.recv() => signal,
                    };
                    let (Some((id, signal)), Some(tasks)) = (signal, weak.upgrade()) else {
                        return;
                    };
                    tasks.deliver(&id, signal);
                }
            });
        }
        tasks
    }

    fn store(&self) -> &Arc<dyn TaskStore> {
        &self.shared.tasks
    }

    /// The status changes of tasks, from now on (for listen streams).
    pub(crate) fn watch(&self) -> broadcast::Receiver<TaskEvent> {
        self.board.events.subscribe()
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<TaskPeer>>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_counts(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.per_client.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Room for one more task of `caller` ([`share_of`]), or why not.
    pub(crate) fn admit(self: &Arc<Self>, caller: Option<String>) -> Result<Admission, String> {
        let max = self.board.settings.max_per_client;
        let mut counts = self.lock_counts();
        if let Some(caller) = &caller
            && counts.get(caller).is_some_and(|n| *n >= max)
        {
            return Err(format!(
                "Too many tasks running for this client (max_tasks_per_client = {max})"
            ));
        }
        let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() else {
            return Err(format!(
                "Too many tasks running on this server ({} at most)",
                self.board.settings.max_running
            ));
        };
        if let Some(caller) = &caller {
            *counts.entry(caller.clone()).or_insert(0) += 1;
        }
        Ok(Admission {
            tasks: Arc::clone(self),
            caller,
            _slot: slot,
        })
    }

    /// The peer of a call that may become a task: `round` answers the
    /// questions it asks before (for a client that takes rounds).
    pub(crate) fn peer(&self, can: Can, round: Option<Arc<RoundPeer>>) -> Arc<TaskPeer> {
        Arc::new(TaskPeer {
            id: uuid::Uuid::new_v4().to_string(),
            store: Arc::clone(self.store()),
            board: Arc::clone(&self.board),
            can,
            round,
            state: Mutex::new(PeerState::default()),
            order: tokio::sync::Mutex::new(()),
            cancel: CancellationToken::new(),
            kept: Mutex::new(Map::new()),
        })
    }

    /// The peer of a task taken over from an instance that died, to run
    /// again here (`record`, this instance's now): a task already, among
    /// this instance's running ones, given the answers its client gave.
    pub(crate) fn taken_over(&self, record: &TaskRecord) -> Arc<TaskPeer> {
        let (can, kept) = match &record.rerun {
            Some(rerun) => {
                let [elicit, sample, roots] = rerun.can;
                let can = Can {
                    elicit,
                    sample,
                    roots,
                };
                (can, rerun.answers.clone())
            }
            None => (Can::default(), Map::new()),
        };
        let peer = Arc::new(TaskPeer {
            id: record.id.clone(),
            store: Arc::clone(self.store()),
            board: Arc::clone(&self.board),
            can,
            round: None,
            state: Mutex::new(PeerState {
                mode: Mode::Task,
                waiting: HashMap::new(),
                created: true,
            }),
            order: tokio::sync::Mutex::new(()),
            cancel: CancellationToken::new(),
            kept: Mutex::new(kept),
        });
        self.lock_running()
            .insert(record.id.clone(), Arc::clone(&peer));
        peer
    }

    /// Announces task `id` as it is now to the listen streams.
    pub(crate) async fn changed(&self, id: &str) {
        self.board.changed(id).await;
    }

    /// How many times a re-runnable task runs at most.
    pub(crate) fn attempts(&self) -> u32 {
        self.board.settings.attempts
    }

    /// Whether tasks may run again on another instance: the store is
    /// shared, and a task may run more than once.
    pub(crate) fn reruns(&self) -> bool {
        self.store().shared() && self.board.settings.attempts > 1
    }

    /// Runs `run` for each task this instance takes over from instances
    /// that died ([`TaskStore::take_claims`]), until shutdown; from now on
    /// this instance takes such tasks over. Once: later calls do nothing.
    pub(crate) fn on_taken_over(&self, run: impl Fn(TaskRecord) + Send + 'static) {
        let Some(mut claims) = self.store().take_claims() else {
            return;
        };
        let shutdown = self.shared.shutdown.clone();
        self.shared.runner.tasks().spawn(async move {
            loop {
                let record = tokio::select! {
                    () = shutdown.cancelled() => return,
                    record = claims.recv() => record,
                };
                let Some(record) = record else { return };
                run(record);
            }
        });
    }

    /// Whether the call of `peer`, still running after its first poll,
    /// becomes a task now: not while it waits for answers of the client's
    /// next round (those go first, as `input_required`).
    pub(crate) fn hand_over(&self, peer: &TaskPeer) -> bool {
        let mut state = peer.lock();
        if peer.round.as_ref().is_some_and(|round| round.pending() > 0) {
            return false;
        }
        state.mode = Mode::Task;
        true
    }

    /// Records the task of `peer` (its call handed over, or ended as `end`)
    /// for `subject`, counted against `caller` ([`share_of`]), and keeps it
    /// among this instance's running tasks unless it ended. Answers once
    /// any instance can read it.
    pub(crate) async fn create(
        &self,
        peer: &Arc<TaskPeer>,
        subject: Option<&str>,
        caller: Option<&str>,
        end: Option<TaskEnd>,
        rerun: Option<Rerun>,
    ) -> Result<CreateTaskResult, TaskStoreError> {
        let now = self.shared.clock.unix_millis();
        let _order = peer.order.lock().await;
        let questions: BTreeMap<String, Value> = {
            let mut state = peer.lock();
            state.mode = Mode::Task;
            state
                .waiting
                .iter()
                .map(|(k, w)| (k.clone(), w.request.clone()))
                .collect()
        };
        let mut record = TaskRecord {
            id: peer.id.clone(),
            owner: self.store().instance().to_owned(),
            subject: subject.map(str::to_owned),
            caller: caller.map(str::to_owned),
            status: TaskStatus::Working,
            message: None,
            created_ms: now,
            updated_ms: now,
            questions,
            result: None,
            error: None,
            rerun,
        };
        if let Some(end) = end {
            record.status = end.status;
            record.message = end.message;
            record.result = end.result;
            record.error = end.error;
        }
        let ended = record.status.is_terminal();
        if !ended {
            self.lock_running()
                .insert(peer.id.clone(), Arc::clone(peer));
        }
        let shown = self.board.task_of(&record);
        if let Err(e) = self.store().create(record).await {
            self.lock_running().remove(&peer.id);
            return Err(e);
        }
        peer.lock().created = true;
        self.board.changed(&peer.id).await;
        Ok(CreateTaskResult::new(shown))
    }

    /// Ends the task of `peer` as `end` (unless it ended already, e.g.
    /// cancelled), and forgets it here.
    pub(crate) async fn finish(&self, peer: &TaskPeer, end: TaskEnd) {
        let _order = peer.order.lock().await;
        peer.lock().mode = Mode::Ended;
        self.lock_running().remove(&peer.id);
        // Refused if another instance took the task over (this one was
        // taken for dead): that one's run ends it.
        match self.store().finish_run(&peer.id, end).await {
            Ok(_) => {}
            Err(TaskStoreError::Full(why)) => {
                // The result does not fit (the server's bytes, or its
                // caller's share): the task still ends, saying why (an end
                // this small always fits: `session::tasks::END_RESERVE`).
                let end = TaskEnd::not_kept(&why);
                if let Err(e) = self.store().finish_run(&peer.id, end).await {
                    tracing::warn!(task = %peer.id, error = %e, "a task's end was not recorded");
                }
            }
            Err(e) => tracing::warn!(task = %peer.id, error = %e, "a task's end was not recorded"),
        }
        self.board.changed(&peer.id).await;
    }

    /// Puts the task's progress in its status message.
    pub(crate) async fn note(&self, peer: &TaskPeer, message: String) {
        let _order = peer.order.lock().await;
        if let Err(e) = self.store().note(&peer.id, message).await {
            tracing::debug!(task = %peer.id, error = %e, "a task's status message was not recorded");
        }
    }

    /// `tasks/get`: the task of `subject` with id `id`.
    pub(crate) async fn get(
        &self,
        id: &str,
        subject: Option<&str>,
    ) -> Result<GetTaskResult, McpError> {
        let record = self.record(id, subject).await?;
        Ok(GetTaskResult::new(self.board.detailed(&record)))
    }

    /// `tasks/update`: answers to the task's open questions (others are
    /// ignored, as the extension says).
    pub(crate) async fn update(
        &self,
        id: &str,
        subject: Option<&str>,
        responses: BTreeMap<String, Value>,
    ) -> Result<(), McpError> {
        let record = self.record(id, subject).await?;
        let keys: Vec<String> = responses
            .keys()
            .filter(|k| record.questions.contains_key(*k))
            .cloned()
            .collect();
        if keys.is_empty() || record.status.is_terminal() {
            return Ok(());
        }
        let taken = self
            .store()
            .answered(id, keys)
            .await
            .map_err(|e| unavailable(&e))?;
        if taken.is_empty() {
            return Ok(());
        }
        let mut answers = Map::new();
        let mut responses = responses;
        for key in &taken {
            if let Some(answer) = responses.remove(key) {
                answers.insert(key.clone(), answer);
            }
        }
        // A task that may run again keeps its answers once delivered, each
        // with the question it answers, for the run again to be given.
        let kept: Option<Map<String, Value>> = record.rerun.as_ref().map(|_| {
            answers
                .iter()
                .filter_map(|(key, answer)| {
                    let question = record.questions.get(key)?;
                    Some((key.clone(), json!({"q": question, "a": answer})))
                })
                .collect()
        });
        if let Err(e) = self
            .tell(&record.owner, id, TaskSignal::Answers(answers))
            .await
        {
            // Not delivered: the questions stay open, for the client to
            // answer again.
            for key in taken {
                if let Some(request) = record.questions.get(&key) {
                    let _ = self.store().ask(id, &key, request.clone()).await;
                }
            }
            return Err(e);
        }
        if let Some(kept) = kept
            && let Err(e) = self.store().keep_answers(id, &kept).await
        {
            tracing::debug!(task = %id, error = %e, "a task's answers were not kept for a run again");
        }
        self.board.changed(id).await;
        Ok(())
    }

    /// `tasks/cancel`: ends the task as cancelled (if it has not ended) and
    /// stops its call.
    pub(crate) async fn cancel(&self, id: &str, subject: Option<&str>) -> Result<(), McpError> {
        let record = self.record(id, subject).await?;
        if record.status.is_terminal() {
            return Ok(());
        }
        let end = TaskEnd {
            status: TaskStatus::Cancelled,
            message: Some("Cancelled by the client".to_owned()),
            result: None,
            error: None,
        };
        let ended = self
            .store()
            .finish(id, end)
            .await
            .map_err(|e| unavailable(&e))?;
        // The record says cancelled already; an instance that misses the
        // signal stops the call when it next checks its tasks' records.
        if ended && let Err(e) = self.tell(&record.owner, id, TaskSignal::Cancel).await {
            tracing::debug!(task = %id, error = %e.message, "a task's cancellation was not passed on");
        }
        if ended {
            self.board.changed(id).await;
        }
        Ok(())
    }

    /// Passes `signal` to the instance running task `id`: here, at once.
    async fn tell(&self, owner: &str, id: &str, signal: TaskSignal) -> Result<(), McpError> {
        if owner == self.store().instance() {
            self.deliver(id, signal);
            return Ok(());
        }
        self.store()
            .signal(owner, id, signal)
            .await
            .map_err(|e| unavailable(&e))
    }

    /// Signals for MCP sessions go to `sink` from now on (set once).
    pub(crate) fn on_session_signals(&self, sink: SessionSignals) {
        let _ = self.session_signals.set(sink);
    }

    /// Passes `signal` (for an MCP session: its id starts with
    /// [`SESSION_SIGNAL`]) to `instance`: here, at once.
    pub(crate) async fn tell_instance(
        &self,
        instance: &str,
        id: &str,
        signal: TaskSignal,
    ) -> Result<(), TaskStoreError> {
        if instance == self.store().instance() {
            self.deliver(id, signal);
            return Ok(());
        }
        self.store().signal(instance, id, signal).await
    }

    /// A signal for task `id`, running here (or for an MCP session).
    fn deliver(&self, id: &str, signal: TaskSignal) {
        if let Some(rest) = id.strip_prefix(SESSION_SIGNAL) {
            if let Some(sink) = self.session_signals.get() {
                sink(rest, signal);
            }
            return;
        }
        let Some(peer) = self.lock_running().get(id).cloned() else {
            return;
        };
        match signal {
            TaskSignal::Answers(answers) => peer.answered(answers),
            TaskSignal::Cancel => peer.cancel.cancel(),
        }
    }

    /// The record of task `id` if `subject` started it.
    async fn record(&self, id: &str, subject: Option<&str>) -> Result<TaskRecord, McpError> {
        let record = self
            .store()
            .get(id, lost_error())
            .await
            .map_err(|e| unavailable(&e))?;
        match record {
            Some(record) if record.subject.as_deref() == subject => Ok(record),
            _ => Err(invalid_task()),
        }
    }
}

/// `value` as a JSON object (an empty one if it is not).
fn object(value: Option<Value>) -> JsonObject {
    match value {
        Some(Value::Object(map)) => map,
        _ => JsonObject::new(),
    }
}

/// The open questions as MCP input requests.
fn input_requests(questions: &BTreeMap<String, Value>) -> InputRequests {
    let mut out = InputRequests::new();
    for (key, request) in questions {
        // Built by this module from the same params the SDK reads back.
        if let Ok(request) = serde_json::from_value(request.clone()) {
            out.insert(key.clone(), request);
        }
    }
    out
}

/// Where a call's questions go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Mode {
    /// Not a task yet: to the client's rounds (if it takes them), else kept
    /// for the task.
    #[default]
    Before,
    /// A task: to its record, answered by `tasks/update`.
    Task,
    /// The task has ended: nowhere.
    Ended,
}

/// A question waiting for its answer.
struct Waiter {
    request: Value,
    reply: oneshot::Sender<Value>,
}

#[derive(Default)]
struct PeerState {
    mode: Mode,
    waiting: HashMap<String, Waiter>,
    /// The task's record exists: questions are written to it (before, the
    /// record is created with the open ones).
    created: bool,
}

/// The client of a call that may become a task.
pub(crate) struct TaskPeer {
    id: String,
    store: Arc<dyn TaskStore>,
    board: Arc<Board>,
    can: Can,
    /// The client's rounds, for questions asked before the task.
    round: Option<Arc<RoundPeer>>,
    state: Mutex<PeerState>,
    /// Held while writing the record, so that writes land in order.
    order: tokio::sync::Mutex<()>,
    /// Cancelled by `tasks/cancel`.
    pub(crate) cancel: CancellationToken,
    /// Answers an earlier run of the task was given, `{q, a}` by question
    /// key: a run again asking the same question gets its answer at once.
    kept: Mutex<Map<String, Value>>,
}

impl TaskPeer {
    fn lock(&self) -> std::sync::MutexGuard<'_, PeerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Answers from `tasks/update`, to the questions waiting for them.
    /// The answer an earlier run was given to this very question (once).
    fn kept_answer(&self, key: &str, request: &Value) -> Option<Value> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let same = kept.get(key).is_some_and(|k| k.get("q") == Some(request));
        let mut found = kept.remove(key).filter(|_| same)?;
        found.get_mut("a").map(Value::take)
    }

    fn answered(&self, answers: Map<String, Value>) {
        let mut state = self.lock();
        for (key, answer) in answers {
            if let Some(waiter) = state.waiting.remove(&key) {
                let _ = waiter.reply.send(answer);
            }
        }
    }
}

impl Keyed for TaskPeer {
    fn can(&self) -> Can {
        self.can
    }

    fn refuse(&self, what: impl FnOnce(&mut Can)) {
        if let Some(round) = &self.round {
            round.refuse(what);
        }
    }

    async fn take(&self, key: &str, request: Value) -> Result<Taken, TakeError> {
        let (rx, write) = {
            let mut state = self.lock();
            match state.mode {
                Mode::Before if self.round.is_some() => {
                    let round = self.round.as_ref().expect("checked");
                    return Ok(match round.answer(key, request) {
                        Some(answer) => Taken::Now(answer),
                        None => Taken::NextRound,
                    });
                }
                Mode::Ended => return Err(TakeError::Ended),
                _ => {}
            }
            if let Some(answer) = self.kept_answer(key, &request) {
                return Ok(Taken::Now(answer));
            }
            if state.waiting.len() >= MAX_OPEN_QUESTIONS {
                return Err(TakeError::TooManyOpen {
                    max: MAX_OPEN_QUESTIONS,
                });
            }
            if state.waiting.contains_key(key) {
                return Err(TakeError::AlreadyOpen(key.to_owned()));
            }
            let (tx, rx) = oneshot::channel();
            state.waiting.insert(
                key.to_owned(),
                Waiter {
                    request: request.clone(),
                    reply: tx,
                },
            );
            (rx, state.mode == Mode::Task)
        };
        if write {
            let _order = self.order.lock().await;
            // Still open (not answered or ended meanwhile), and the record
            // exists (else it is created with this question)?
            let open = {
                let state = self.lock();
                state.created && state.waiting.contains_key(key)
            };
            if open {
                if let Err(e) = self.store.ask(&self.id, key, request).await {
                    self.lock().waiting.remove(key);
                    return Err(TakeError::NotRecorded(e));
                }
                self.board.changed(&self.id).await;
            }
        }
        Ok(Taken::Later(rx))
    }

    fn misfit(&self, key: &str, request: &Value) -> bool {
        // Before the task, the client's rounds ask it again.
        let Some(round) = self
            .round
            .as_ref()
            .filter(|_| self.lock().mode == Mode::Before)
        else {
            return false;
        };
        round.reask(key, request.clone());
        true
    }
}

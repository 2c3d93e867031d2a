//! MCP task records shared through Redis (feature `redis`): the
//! [`TaskStore`] of servers that run as several instances, so that any
//! instance answers `tasks/get`, `tasks/update` and `tasks/cancel` for any
//! task (`mcp/tasks.rs` is the runtime that uses it).
//!
//! Keys:
//!
//! | key | type | holds | expires |
//! |---|---|---|---|
//! | `{haip}:t:{task}` | hash | `owner` (the instance running it), `subject` (absent: none), `caller` (whose share it counts against, `TaskRecord::caller`; absent: no caller's), `status` (`working`, `completed`, `failed` or `cancelled`), `message` (absent: none), `created`, `updated` (ms since the Unix epoch), `result` (JSON `CallToolResult`), `error` (JSON `{code, message}`); a re-runnable task's ([`Rerun`]) also `rerun` (JSON: tool, arguments, caller, what its client takes), `attempt` (the run now, from 1), `attempts` (runs at most), and its client's answers kept for a run again: `a:{key}` (JSON `{q, a}`: question and answer), `acount`, `abytes` (their number and bytes) | running: [`running_ttl`] after its owner last refreshed it; ended: `ttl` (`TaskLimits::ttl`) after it ended |
//! | `{haip}:rr` | set | the instances that own re-runnable tasks still running, which [`CLAIM`] looks through | never (an owner leaves once its tasks are gone) |
//! | `{haip}:rr:{instance}` | set | the ids of the re-runnable tasks it owns still running | never (members leave as their tasks end or are taken over) |
//! | `{haip}:t:{task}:q` | hash | the open questions: key → `{method, params}` JSON | with its record; deleted when the task ends |
//! | `{haip}:i:{instance}` | string | the owner's lease ([`super`]): a task whose owner's lease is gone is lost | [`LEASE_TTL`](super::LEASE_TTL) |
//! | `{haip}:tb:{caller}` | hash | a caller's share: task id → the bytes its record is counted for; `=` → their sum | a minute after the last of its records, extended as they are |
//! | `{haip}:te:{caller}` | sorted set | the same tasks, scored by when their records expire (ms since the Unix epoch, as last seen) | with `{haip}:tb:{caller}` |
//! | `{haip}:mcp:{session}` | hash | an MCP session (`mcp/export/session.rs`): `record` (JSON: who opened it, its revision, its client's capabilities, its log level), `held-by:{instance}` for each instance that holds it | `idle_timeout` after its last use on any instance; deleted by its `DELETE` |
//!
//! A record's `status` is `working` or an end as written; `tasks/get` shows
//! `input_required` while its `:q` hash has a question (read in the same
//! script as the record, so the status shown is consistent whichever
//! instance wrote last).
//!
//! Every change is one server-side Lua script (`EVAL`: one round trip,
//! atomic, under [`IO_TIMEOUT`]; a failure or a timeout is
//! `TaskStoreError::Unavailable`), and none changes a task that has ended:
//! [`FINISH`] ends a task only if it has not ended and clears its questions,
//! [`ASK`] adds a question only to a task that has not ended, [`ANSWERED`]
//! removes the keys present of a task that has not ended and gives those it
//! removed. [`GET`] reads the record and its questions, and fails a task that
//! has not ended whose owner is gone (its lease expired; or it is this
//! instance, which does not run it: a previous life of the same instance id)
//! with the `lost` error, in the same script: several instances reading it
//! at once write it once, and the owner's late end is refused like any
//! other. [`CREATE`] writes a new record (and completes once it is written).
//!
//! Tasks that run again ([`Rerun`]: a shared store's task of a tool marked
//! idempotent, `Limits::task_attempts` runs at most): [`CREATE`] adds one to
//! its owner's set `{haip}:rr:{owner}` (and the owner to `{haip}:rr`), and
//! [`GET`] does not fail it as lost while it has attempts left. Instead
//! every instance, each [`CLAIM_EVERY`] once its MCP export takes them
//! ([`TaskStore::take_claims`]), runs [`CLAIM`]: of the owners whose lease
//! is gone, their tasks (as many as it has room for), each with attempts
//! left becomes
//! this instance's on its next attempt (its open questions dropped, its
//! status message saying so), atomically, so one instance takes each over;
//! one without fails as lost, saying so. (A task whose owner is this very
//! instance in an earlier life, which `CLAIM` leaves alone, is taken over by
//! the next `GET` here.) The owner's own end is then written with
//! [`TaskStore::finish_run`], which [`FINISH`] refuses once another
//! instance owns the task, and [`REFRESH`] tells a former owner, which
//! stops its call. [`KEEP_ANSWERS`] keeps the answers its client gives.
//!
//! Signals (answers and cancellations for the owner) go through the owner's
//! channel `haip:to:{owner}` as messages of kind [`SIGNAL`] (`S`), link id 0,
//! body `{"task": id, "answers": {...}}` or `{"task": id, "cancel": true}`;
//! the owner's subscription (`RedisSessionStore::listen`) hands them to
//! [`RedisTaskStore::receive`], into the queue `take_signals` gives
//! ([`SIGNAL_QUEUE`] at most; more are dropped, with a warning).
//!
//! Expiry: the owner refreshes its running tasks' records every
//! [`TASK_REFRESH`] (a script that extends only records that have not ended,
//! [`REFRESH`]), so a running task's record lasts while its owner lives, and
//! [`running_ttl`] (at least `ttl`) after it died: long enough for a client
//! polling it to learn it was lost. That refresh also stops a call whose task
//! another instance ended (a cancellation whose signal was lost), and retries
//! an end the owner could not record while Redis was away.
//!
//! Bounds, as the in-memory store keeps them (`TaskLimits`; records counted
//! at their charge, a running one with room for its end; the same `Full`
//! messages):
//!
//! - Each instance keeps a ledger of the records it wrote as the owner
//!   (created, asked, noted, ended), with their bytes as of its last write,
//!   until they expire: at most `max_tasks` records and `max_bytes` bytes. A
//!   task that would take its owner over them is refused, and so is an end
//!   whose result does not fit. So Redis holds at most about `max_bytes` of
//!   records per live instance, plus what dead instances left (their
//!   ledgers died with them; their records expire). Not bounded by the
//!   ledger: the small writes of other instances (a cancellation's end, the
//!   `lost` error) and, for a moment, the questions a client answered on
//!   another instance (counted by the owner until its next question).
//!   Redis's own `maxmemory` bounds the rest.
//! - Each caller's share (`max_tasks_per_caller` records and
//!   `max_bytes_per_caller` bytes, running and ended until they expire) is
//!   counted in Redis, across all the instances, by the scripts that change
//!   records (`scripts.rs` says how): a new record beyond it is refused by
//!   [`CREATE`], and a question, a status message or an end that would
//!   grow a record beyond it by [`ASK`], [`NOTE`] and [`FINISH`]
//!   (`Full`, naming `max_task_bytes_per_client`). The instance serving the
//!   write gives the share's size (instances are meant to share their
//!   settings).
//!
//! The lease check names the lease key inside the script (from the record's
//! owner), and the share keys are named there too (from the record's
//! caller): all these keys carry the hash tag `{haip}`, so that on a Redis
//! Cluster they are on the node the script runs on.
//!
//! Here: the store and its operations. `scripts.rs` holds the Lua scripts,
//! `encoding.rs` how records, the scripts' replies and signals are written
//! and read, `ledger.rs` this instance's ledger of its records.

mod encoding;
mod ledger;
mod scripts;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use super::conn::Conn;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use self::encoding::{
    ANSWER_FIELD, decode_claimed, decode_get, decode_signal, encode_signal, fields_of,
    questions_of, strings,
};
use self::ledger::{Creating, Ledger, Parts, State, lock};
use self::scripts::{
    ANSWERED, ASK, CLAIM, CREATE, END_SESSION, FINISH, GET, KEEP_ANSWERS, NOTE, PUT_SESSION,
    REFRESH, TOUCH_SESSION,
};
use super::keys::{inbox_key, lease_key};
use super::{IO_TIMEOUT, RedisSessionStore};
#[cfg(doc)]
use crate::session::tasks::Rerun;
use crate::session::tasks::{
    HeldSession, MAX_KEPT_ANSWERS, SIGNAL_QUEUE, Signal, TaskEnd, TaskLimits, TaskRecord,
    TaskSignal, TaskStore, TaskStoreError, too_many_bytes_of_caller, too_many_tasks_of_caller,
};
use crate::session::{Clock, StoreFuture};

/// The kind of a message between instances that carries a task signal.
pub(super) const SIGNAL: u8 = b'S';

/// How often an instance refreshes the records of the tasks it runs (five
/// lease periods).
pub(crate) const TASK_REFRESH: Duration = Duration::from_secs(10);

/// Records refreshed by one script, at most.
const REFRESH_BATCH: usize = 256;

/// How long a running task's record lasts after its owner's last refresh:
/// `ttl`, and at least four refresh periods.
pub(crate) fn running_ttl(ttl: Duration) -> Duration {
    ttl.max(TASK_REFRESH * 4)
}

/// An MCP session's record and the instances that hold it.
fn mcp_session_key(id: &str) -> String {
    format!("{{haip}}:mcp:{id}")
}

fn task_key(id: &str) -> String {
    format!("{{haip}}:t:{id}")
}

fn questions_key(id: &str) -> String {
    format!("{{haip}}:t:{id}:q")
}

/// The owners of re-runnable tasks still running, which `CLAIM` looks
/// through; each owner's tasks are in the set of this name, `:`, and the
/// owner.
const RERUN_KEY: &str = "{haip}:rr";

/// A caller's share: the bytes each of its records is counted for, and
/// their sum (field `=`).
#[cfg(test)]
fn share_bytes_key(caller: &str) -> String {
    format!("{{haip}}:tb:{caller}")
}

/// A caller's share: its records by when they expire.
#[cfg(test)]
fn share_expiry_key(caller: &str) -> String {
    format!("{{haip}}:te:{caller}")
}

/// What the scripts answer for a change beyond the caller's share of bytes.
const OVER_SHARE: i64 = -3;

/// What `CREATE` answers for a record beyond the caller's share of records.
const OVER_SHARE_RECORDS: i64 = -4;

/// The Redis-backed [`TaskStore`]: records in Redis, through the session
/// store's connection, as its instance.
pub(crate) struct RedisTaskStore {
    cluster: Arc<RedisSessionStore>,
    limits: TaskLimits,
    clock: Arc<dyn Clock>,
    /// The records this instance wrote as their owner, until they expire.
    ledger: Arc<Mutex<Ledger>>,
    signals: mpsc::Sender<Signal>,
    signals_rx: Mutex<Option<mpsc::Receiver<Signal>>>,
    /// The re-runnable tasks taken over, on their way to the MCP export.
    claims: mpsc::Sender<TaskRecord>,
    claims_rx: Mutex<Option<mpsc::Receiver<TaskRecord>>>,
}

/// How often an instance looks for re-runnable tasks whose owner is gone.
pub(crate) const CLAIM_EVERY: Duration = Duration::from_secs(1);

/// Tasks taken over at once, at most (and waiting to run again here).
const CLAIM_BATCH: usize = 16;

/// The error of a re-runnable task that ran out of attempts.
fn out_of_attempts() -> Value {
    serde_json::json!({
        "code": crate::protocol::jsonrpc::INTERNAL_ERROR,
        "message": "instance lost: the server instance running this task stopped before it \
                    ended, on the last of its {attempts} attempts",
    })
}

impl RedisTaskStore {
    /// The task store of `cluster`'s instance, usable once `cluster` is
    /// connected (until then every operation is `Unavailable`); `cluster`
    /// hands it the signals it receives, and starts its refresher when it
    /// connects.
    pub(crate) fn attach(
        cluster: &Arc<RedisSessionStore>,
        limits: TaskLimits,
        clock: Arc<dyn Clock>,
    ) -> Arc<RedisTaskStore> {
        let (signals, signals_rx) = mpsc::channel(SIGNAL_QUEUE);
        let (claims, claims_rx) = mpsc::channel(CLAIM_BATCH);
        let store = Arc::new(RedisTaskStore {
            cluster: Arc::clone(cluster),
            limits,
            clock,
            ledger: Arc::new(Mutex::new(Ledger::default())),
            signals,
            signals_rx: Mutex::new(Some(signals_rx)),
            claims,
            claims_rx: Mutex::new(Some(claims_rx)),
        });
        let _ = cluster.tasks.0.set(Arc::downgrade(&store));
        store
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        lock(&self.ledger)
    }

    fn ttl_ms(&self) -> u64 {
        self.limits.ttl.as_millis() as u64
    }

    fn running_ttl_ms(&self) -> u64 {
        running_ttl(self.limits.ttl).as_millis() as u64
    }

    /// The connection, while Redis is known to answer.
    fn conn(&self) -> Option<Conn> {
        self.cluster
            .conn
            .get()
            .cloned()
            .filter(|_| self.cluster.is_healthy())
    }

    /// The script ending task `id` as `end`; `own`: the end of this
    /// instance's run, refused if another instance took the task over.
    fn finish_cmd(&self, id: &str, end: &TaskEnd, now: u64, own: bool) -> redis::Cmd {
        let mut cmd = eval(
            FINISH,
            &[task_key(id), questions_key(id), RERUN_KEY.to_owned()],
        );
        cmd.arg(now)
            .arg(self.ttl_ms())
            .arg(end.status.as_str())
            .arg(self.limits.max_bytes_per_caller)
            .arg(if own { self.instance() } else { "" });
        if let Some(message) = &end.message {
            cmd.arg("message").arg(message);
        }
        if let Some(result) = &end.result {
            cmd.arg("result").arg(result.to_string());
        }
        if let Some(error) = &end.error {
            cmd.arg("error").arg(error.to_string());
        }
        cmd
    }

    /// Runs `cmd`, a script that changes record `id` as the ledger was just
    /// changed (`reserved`: what [`Ledger::resize`] gave, refused or the
    /// parts before). A script that finds the record's caller's share full
    /// (`OVER_SHARE`) has changed nothing: the ledger's change is put back,
    /// and the answer is [`too_many_bytes_of_caller`]. `answer` reads the
    /// other answers.
    fn resizing<T: Send + 'static>(
        &self,
        id: &str,
        reserved: Result<Option<Parts>, TaskStoreError>,
        cmd: redis::Cmd,
        answer: impl FnOnce(
            Result<redis::Value, TaskStoreError>,
            &Mutex<Ledger>,
            &str,
        ) -> Result<T, TaskStoreError>
        + Send
        + 'static,
    ) -> StoreFuture<Result<T, TaskStoreError>> {
        let conn = self.conn();
        let ledger = Arc::clone(&self.ledger);
        let limits = self.limits;
        let id = id.to_owned();
        Box::pin(async move {
            let before = reserved?;
            match query(conn, cmd).await {
                Ok(redis::Value::Int(OVER_SHARE)) => {
                    lock(&ledger).restore(&id, before);
                    Err(too_many_bytes_of_caller(&limits))
                }
                other => answer(other, &ledger, &id),
            }
        })
    }

    /// Ends task `id` as `end` (`own`: as [`TaskStore::finish_run`]).
    fn end(&self, id: &str, end: TaskEnd, own: bool) -> StoreFuture<Result<bool, TaskStoreError>> {
        let now = self.clock.unix_millis();
        let reserved = self
            .ledger()
            .resize(id, now, &self.limits, |parts| parts.ended(&end));
        let cmd = self.finish_cmd(id, &end, now, own);
        let ttl = self.ttl_ms();
        self.resizing(id, reserved, cmd, move |answer, ledger, id| match answer {
            Ok(redis::Value::Int(-1)) => {
                lock(ledger).remove(id);
                Err(TaskStoreError::Unknown)
            }
            Ok(redis::Value::Int(n)) => {
                lock(ledger).ended(id, now, ttl);
                Ok(n == 1)
            }
            Ok(other) => Err(odd("finish", &other)),
            Err(e) => {
                // Retried by the refresher until it lands.
                lock(ledger).ending(id, end);
                Err(e)
            }
        })
    }

    /// A message of kind [`SIGNAL`] from another instance.
    pub(super) fn receive(&self, body: &[u8]) {
        match decode_signal(body) {
            Some(signal) => self.push(signal),
            None => tracing::debug!("malformed task signal dropped"),
        }
    }

    fn push(&self, signal: Signal) {
        if self.signals.try_send(signal).is_err() {
            tracing::warn!("too many task signals waiting; one dropped");
        }
    }

    /// Takes over, every [`CLAIM_EVERY`] until `shutdown`, the re-runnable
    /// tasks whose owner is gone, once the MCP export takes them
    /// ([`TaskStore::take_claims`]): as many as it has room to take.
    pub(super) async fn claim(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(CLAIM_EVERY) => {}
            }
            // Nobody runs them here yet, or there is no room to take more.
            let room = self.claims.capacity();
            if self.claims_rx_taken() && room > 0 {
                self.claim_once(room).await;
            }
        }
    }

    fn claims_rx_taken(&self) -> bool {
        lock_opt(&self.claims_rx).is_none()
    }

    /// Takes over at most `room` tasks, and hands them on.
    async fn claim_once(&self, room: usize) {
        let now = self.clock.unix_millis();
        let mut cmd = eval(CLAIM, &[RERUN_KEY.to_owned()]);
        cmd.arg(self.instance())
            .arg(lease_key(""))
            .arg(now)
            .arg(self.running_ttl_ms())
            .arg(self.ttl_ms())
            .arg(out_of_attempts().to_string())
            .arg(room);
        let Ok(redis::Value::Array(taken)) = query(self.conn(), cmd).await else {
            return;
        };
        for taken in &taken {
            let Some(record) = decode_claimed(taken) else {
                tracing::warn!(
                    ?taken,
                    "unexpected answer from the task store's claim script"
                );
                continue;
            };
            tracing::info!(
                task = %record.id,
                attempt = record.rerun.as_ref().map_or(0, |r| r.attempt),
                "took over a task whose instance is gone; running it again"
            );
            self.run_here(record, now);
        }
    }

    /// Hands a task this instance took over to the MCP export, to run again
    /// here; this instance refreshes its record from then on, and owns its
    /// end. Not handed (no room: never more than asked for), it is left
    /// to this instance's next `tasks/get` of it, which takes it over again.
    fn run_here(&self, record: TaskRecord, now: u64) {
        let (id, parts) = (record.id.clone(), Parts::of(&record));
        match self.claims.try_send(record) {
            Ok(()) => self.ledger().take_over(&id, parts, now),
            Err(_) => {
                tracing::warn!(task = %id, "a task taken over found no room to run again here")
            }
        }
    }

    /// Refreshes this instance's running tasks every [`TASK_REFRESH`] until
    /// `shutdown`.
    pub(super) async fn refresh(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(TASK_REFRESH) => {}
            }
            self.refresh_once().await;
        }
    }

    /// Retries the ends not recorded yet, extends the running tasks'
    /// records, forgets those gone, and stops the calls of those another
    /// instance ended.
    async fn refresh_once(&self) {
        let now = self.clock.unix_millis();
        let (running, ending) = {
            let mut ledger = self.ledger();
            ledger.expire(now);
            ledger.live()
        };
        let Some(conn) = self.conn() else { return };
        for (id, end) in ending {
            match query(Some(conn.clone()), self.finish_cmd(&id, &end, now, true)).await {
                Ok(redis::Value::Int(-1)) => self.ledger().remove(&id),
                // Its result does not fit its caller's share (any more): it
                // fails, saying so, at the next refresh.
                Ok(redis::Value::Int(OVER_SHARE)) => {
                    let why = too_many_bytes_of_caller(&self.limits).to_string();
                    self.ledger().ending(&id, TaskEnd::not_kept(&why));
                }
                Ok(redis::Value::Int(_)) => {
                    self.ledger().ended(&id, now, self.ttl_ms());
                    // The end may be a cancellation served here, whose call
                    // was never told: it is now (a call that stopped
                    // already ignores it).
                    self.push((id, TaskSignal::Cancel));
                }
                _ => {}
            }
        }
        for batch in running.chunks(REFRESH_BATCH) {
            let keys: Vec<String> = batch
                .iter()
                .flat_map(|id| [task_key(id), questions_key(id)])
                .collect();
            let mut cmd = eval(REFRESH, &keys);
            cmd.arg(self.running_ttl_ms()).arg(now).arg(self.instance());
            let Ok(redis::Value::Array(found)) = query(Some(conn.clone()), cmd).await else {
                return;
            };
            for (id, found) in batch.iter().zip(found) {
                match found {
                    redis::Value::Int(-1) => self.ledger().remove(id),
                    // Ended elsewhere (cancelled, or taken for lost) while
                    // it runs here: stop it.
                    redis::Value::Int(0) if self.ledger().stop(id) => {
                        self.push((id.clone(), TaskSignal::Cancel));
                    }
                    _ => {}
                }
            }
        }
    }
}

/// `EVAL script` with `keys`.
fn eval(script: &str, keys: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script).arg(keys.len()).arg(keys);
    cmd
}

/// The field of an MCP session's hash that says an instance holds it.
const HOLDER: &str = "held-by:";

fn holder_field(instance: &str) -> String {
    format!("{HOLDER}{instance}")
}

/// A time to live as Redis takes it: whole milliseconds, at least one.
fn ttl_arg(ttl: Duration) -> u64 {
    (ttl.as_millis() as u64).max(1)
}

/// One round trip, within [`IO_TIMEOUT`]; any failure is `Unavailable`.
async fn query(conn: Option<Conn>, cmd: redis::Cmd) -> Result<redis::Value, TaskStoreError> {
    let Some(mut conn) = conn else {
        return Err(TaskStoreError::Unavailable);
    };
    match tokio::time::timeout(IO_TIMEOUT, cmd.query_async::<redis::Value>(&mut conn)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => {
            if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
                tracing::debug!(error = %e, "the task store is unavailable");
            } else {
                tracing::warn!(error = %e, "Redis refused a task store command");
            }
            Err(TaskStoreError::Unavailable)
        }
        Err(_) => Err(TaskStoreError::Unavailable),
    }
}

/// An answer the scripts never give.
fn odd(what: &str, value: &redis::Value) -> TaskStoreError {
    tracing::warn!(
        ?value,
        "unexpected answer from the task store's {what} script"
    );
    TaskStoreError::Unavailable
}

impl TaskStore for RedisTaskStore {
    fn instance(&self) -> &str {
        self.cluster.instance()
    }

    fn create(&self, record: TaskRecord) -> StoreFuture<Result<(), TaskStoreError>> {
        let now = self.clock.unix_millis();
        let ended = record.status.is_terminal();
        let state = if ended {
            State::Ended {
                expires: now + self.ttl_ms(),
            }
        } else {
            State::Running { stopped: false }
        };
        let admitted =
            self.ledger()
                .admit(&record.id, Parts::of(&record), state, now, &self.limits);
        let expires = if ended {
            self.ttl_ms()
        } else {
            self.running_ttl_ms()
        };
        let keys = [
            task_key(&record.id),
            questions_key(&record.id),
            RERUN_KEY.to_owned(),
        ];
        let mut cmd = eval(CREATE, &keys);
        let fields = fields_of(&record);
        cmd.arg(now)
            .arg(expires)
            .arg(self.limits.max_bytes_per_caller)
            .arg(self.limits.max_tasks_per_caller)
            .arg(fields.len());
        for (field, value) in &fields {
            cmd.arg(*field).arg(value);
        }
        for (key, question) in questions_of(&record) {
            cmd.arg(key).arg(question);
        }
        let conn = self.conn();
        let limits = self.limits;
        // Forgotten unless written, even if this future is dropped.
        let pending = admitted.map(|()| Creating {
            ledger: Arc::clone(&self.ledger),
            id: record.id,
            written: false,
        });
        Box::pin(async move {
            let pending = pending?;
            match query(conn, cmd).await? {
                redis::Value::Int(1) => {
                    pending.written();
                    Ok(())
                }
                redis::Value::Int(OVER_SHARE) => Err(too_many_bytes_of_caller(&limits)),
                redis::Value::Int(OVER_SHARE_RECORDS) => Err(too_many_tasks_of_caller(&limits)),
                other => Err(odd("create", &other)),
            }
        })
    }

    fn get(
        &self,
        id: &str,
        lost: Value,
    ) -> StoreFuture<Result<Option<TaskRecord>, TaskStoreError>> {
        let here = self.ledger().runs(id);
        let now = self.clock.unix_millis();
        let mut cmd = eval(
            GET,
            &[task_key(id), questions_key(id), RERUN_KEY.to_owned()],
        );
        cmd.arg(self.instance())
            .arg(if here { "1" } else { "0" })
            .arg(lease_key(""))
            .arg(lost.to_string())
            .arg(now)
            .arg(self.ttl_ms())
            .arg(if self.claims_rx_taken() && self.claims.capacity() > 0 {
                "1"
            } else {
                "0"
            })
            .arg(self.running_ttl_ms())
            .arg(out_of_attempts().to_string());
        let conn = self.conn();
        let id = id.to_owned();
        let store = self.cluster.tasks.store();
        Box::pin(async move {
            let value = query(conn, cmd).await?;
            let got = decode_get(&id, &value).ok_or_else(|| odd("get", &value))?;
            Ok(got.map(|(record, taken)| {
                // An earlier life of this instance ran it: it runs again.
                if taken && let Some(store) = &store {
                    store.run_here(record.clone(), now);
                }
                record
            }))
        })
    }

    fn ask(&self, id: &str, key: &str, request: Value) -> StoreFuture<Result<(), TaskStoreError>> {
        let now = self.clock.unix_millis();
        let asked = key.len() + crate::protocol::json_len(&request);
        let reserved = self
            .ledger()
            .resize(id, now, &self.limits, |parts| parts.questions += asked);
        let mut cmd = eval(ASK, &[task_key(id), questions_key(id)]);
        cmd.arg(key)
            .arg(request.to_string())
            .arg(now)
            .arg(self.running_ttl_ms())
            .arg(self.limits.max_bytes_per_caller);
        self.resizing(id, reserved, cmd, |answer, ledger, id| match answer? {
            redis::Value::Int(-1) => {
                lock(ledger).remove(id);
                Err(TaskStoreError::Unknown)
            }
            redis::Value::Int(-2) => Ok(()),
            redis::Value::Int(n) if n >= 0 => {
                lock(ledger).set_questions(id, n as usize);
                Ok(())
            }
            other => Err(odd("ask", &other)),
        })
    }

    fn answered(
        &self,
        id: &str,
        keys: Vec<String>,
    ) -> StoreFuture<Result<Vec<String>, TaskStoreError>> {
        let mut cmd = eval(ANSWERED, &[task_key(id), questions_key(id)]);
        cmd.arg(self.clock.unix_millis()).arg(keys);
        let conn = self.conn();
        Box::pin(async move {
            match query(conn, cmd).await? {
                redis::Value::Nil => Err(TaskStoreError::Unknown),
                value => strings(&value).ok_or_else(|| odd("answered", &value)),
            }
        })
    }

    fn note(&self, id: &str, message: String) -> StoreFuture<Result<(), TaskStoreError>> {
        let now = self.clock.unix_millis();
        let size = message.len();
        let reserved = self
            .ledger()
            .resize(id, now, &self.limits, |parts| parts.message = size);
        let mut cmd = eval(NOTE, &[task_key(id), questions_key(id)]);
        cmd.arg(message)
            .arg(now)
            .arg(self.limits.max_bytes_per_caller);
        self.resizing(id, reserved, cmd, |answer, _, _| match answer? {
            redis::Value::Int(-1) => Err(TaskStoreError::Unknown),
            redis::Value::Int(_) => Ok(()),
            other => Err(odd("note", &other)),
        })
    }

    fn finish(&self, id: &str, end: TaskEnd) -> StoreFuture<Result<bool, TaskStoreError>> {
        self.end(id, end, false)
    }

    fn finish_run(&self, id: &str, end: TaskEnd) -> StoreFuture<Result<bool, TaskStoreError>> {
        self.end(id, end, true)
    }

    fn signal(
        &self,
        owner: &str,
        id: &str,
        signal: TaskSignal,
    ) -> StoreFuture<Result<(), TaskStoreError>> {
        let message = encode_signal(id, &signal);
        let channel = inbox_key(owner);
        let conn = self.conn();
        let publish = self.cluster.target.publish(&channel, message);
        Box::pin(async move {
            let Some(mut conn) = conn else {
                return Err(TaskStoreError::Unavailable);
            };
            let published =
                tokio::time::timeout(IO_TIMEOUT, publish.query_async::<u64>(&mut conn)).await;
            match published {
                // Somebody listens: the owner (its only subscriber).
                Ok(Ok(receivers)) if receivers > 0 => Ok(()),
                _ => Err(TaskStoreError::Unavailable),
            }
        })
    }

    fn shared(&self) -> bool {
        true
    }

    fn put_session(
        &self,
        id: &str,
        record: Value,
        ttl: Duration,
    ) -> StoreFuture<Result<(), TaskStoreError>> {
        let mut cmd = eval(PUT_SESSION, &[mcp_session_key(id)]);
        cmd.arg(record.to_string())
            .arg(holder_field(self.instance()))
            .arg(ttl_arg(ttl));
        let conn = self.conn();
        Box::pin(async move { query(conn, cmd).await.map(drop) })
    }

    fn touch_session(
        &self,
        id: &str,
        ttl: Duration,
    ) -> StoreFuture<Result<Option<HeldSession>, TaskStoreError>> {
        let mut cmd = eval(TOUCH_SESSION, &[mcp_session_key(id)]);
        cmd.arg(holder_field(self.instance())).arg(ttl_arg(ttl));
        let conn = self.conn();
        Box::pin(async move {
            let value = query(conn, cmd).await?;
            if value == redis::Value::Nil {
                return Ok(None);
            }
            let fields = encoding::pairs(&value).ok_or_else(|| odd("touch_session", &value))?;
            let mut record = None;
            let mut holders = Vec::new();
            for (field, value) in fields {
                match field.strip_prefix(HOLDER) {
                    Some(instance) => holders.push(instance.to_owned()),
                    None if field == "record" => record = serde_json::from_str(&value).ok(),
                    None => {}
                }
            }
            Ok(record.map(|record| (record, holders)))
        })
    }

    fn end_session(&self, id: &str) -> StoreFuture<Result<Vec<String>, TaskStoreError>> {
        let cmd = eval(END_SESSION, &[mcp_session_key(id)]);
        let conn = self.conn();
        Box::pin(async move {
            let value = query(conn, cmd).await?;
            let fields = strings(&value).ok_or_else(|| odd("end_session", &value))?;
            Ok(fields
                .iter()
                .filter_map(|f| f.strip_prefix(HOLDER).map(str::to_owned))
                .collect())
        })
    }

    fn take_signals(&self) -> Option<mpsc::Receiver<Signal>> {
        lock_opt(&self.signals_rx).take()
    }

    fn take_claims(&self) -> Option<mpsc::Receiver<TaskRecord>> {
        lock_opt(&self.claims_rx).take()
    }

    fn keep_answers(
        &self,
        id: &str,
        answers: &Map<String, Value>,
    ) -> StoreFuture<Result<(), TaskStoreError>> {
        let now = self.clock.unix_millis();
        let mut cmd = eval(KEEP_ANSWERS, &[task_key(id), questions_key(id)]);
        cmd.arg(now)
            .arg(MAX_KEPT_ANSWERS)
            .arg(self.limits.max_bytes_per_caller);
        let mut kept = 0;
        for (key, answer) in answers {
            cmd.arg(key).arg(answer.to_string());
            kept += ANSWER_FIELD.len() + key.len() + crate::protocol::json_len(answer);
        }
        let reserved = self
            .ledger()
            .resize(id, now, &self.limits, |parts| parts.grow_fixed(kept));
        self.resizing(id, reserved, cmd, |answer, _, _| match answer? {
            redis::Value::Int(-1) => Err(TaskStoreError::Unknown),
            redis::Value::Int(_) => Ok(()),
            other => Err(odd("keep_answers", &other)),
        })
    }
}

/// The value behind `mutex`, even if a thread panicked holding it.
fn lock_opt<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The task store attached to a session store ([`RedisTaskStore::attach`]),
/// if any: its signals come through the session store's channel, and its
/// refresher starts when the session store connects.
#[derive(Default)]
pub(super) struct Attached(OnceLock<Weak<RedisTaskStore>>);

impl Attached {
    fn store(&self) -> Option<Arc<RedisTaskStore>> {
        self.0.get().and_then(Weak::upgrade)
    }

    /// Starts the attached store's refresher and its taking over of
    /// re-runnable tasks on `tasks`, until `shutdown`.
    pub(super) fn start(&self, tasks: &TaskTracker, shutdown: CancellationToken) {
        if let Some(store) = self.store() {
            tasks.spawn(Arc::clone(&store).claim(shutdown.clone()));
            tasks.spawn(store.refresh(shutdown));
        }
    }

    /// Hands a task signal's message body to the attached store (none: the
    /// server serves no tasks through it).
    pub(super) fn deliver(&self, body: &[u8]) {
        match self.store() {
            Some(tasks) => tasks.receive(body),
            None => tracing::debug!("a task signal for a server without tasks dropped"),
        }
    }
}

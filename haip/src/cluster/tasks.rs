//! MCP task records shared through Redis (feature `redis`): the
//! [`TaskStore`] of servers that run as several instances, so that any
//! instance answers `tasks/get`, `tasks/update` and `tasks/cancel` for any
//! task (`mcp/tasks.rs` is the runtime that uses it).
//!
//! Keys:
//!
//! | key | type | holds | expires |
//! |---|---|---|---|
//! | `haip:t:{task}` | hash | `owner` (the instance running it), `subject` (absent: none), `status` (`working`, `completed`, `failed` or `cancelled`), `message` (absent: none), `created`, `updated` (ms since the Unix epoch), `result` (JSON `CallToolResult`), `error` (JSON `{code, message}`) | running: [`running_ttl`] after its owner last refreshed it; ended: `ttl` (`TaskLimits::ttl`) after it ended |
//! | `haip:t:{task}:q` | hash | the open questions: key → `{method, params}` JSON | with its record; deleted when the task ends |
//! | `haip:i:{instance}` | string | the owner's lease ([`super`]): a task whose owner's lease is gone is lost | [`LEASE_TTL`](super::LEASE_TTL) |
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
//! other. `create` is one `MULTI` that completes once the record is written.
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
//! Bounds: each instance keeps a ledger of the records it wrote as the owner
//! (created, asked, noted, ended), with their bytes as of its last write,
//! until they expire: at most `max_tasks` records and `max_bytes` bytes
//! (`TaskLimits`), as the in-memory store keeps. A task that would take its
//! owner over them is refused (`Full`, the same messages), and so is an end
//! whose result does not fit. So Redis holds at most about `max_bytes` of
//! records per live instance, plus what dead instances left (their ledgers
//! died with them; their records expire). Not bounded by the ledger: the
//! small writes of other instances (a cancellation's end, the `lost` error)
//! and, for a moment, the questions a client answered on another instance
//! (counted by the owner until its next question). Redis's own `maxmemory`
//! bounds the rest.
//!
//! The lease check names the lease key inside the script (from the record's
//! owner), which a Redis Cluster would refuse; the session store talks to a
//! single Redis server.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{IO_TIMEOUT, RedisSessionStore, frame, inbox_key, lease_key};
use crate::session::tasks::{
    SIGNAL_QUEUE, Signal, TaskEnd, TaskLimits, TaskRecord, TaskSignal, TaskStatus, TaskStore,
    TaskStoreError,
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

fn task_key(id: &str) -> String {
    format!("haip:t:{id}")
}

fn questions_key(id: &str) -> String {
    format!("haip:t:{id}:q")
}

/// Reads a task and its questions; fails it, once, if its owner is gone.
///
/// KEYS: record, questions. ARGV: this instance, `1` if the task runs here,
/// the lease key prefix, the `lost` error (JSON), now (ms), `ttl` (ms).
/// Gives `false` (unknown), or `{record fields, question fields}`.
pub(crate) const GET: &str = r"
local owner = redis.call('HGET', KEYS[1], 'owner')
if not owner then return false end
local s = redis.call('HGET', KEYS[1], 'status')
if s ~= 'completed' and s ~= 'failed' and s ~= 'cancelled' then
  local lost
  if owner == ARGV[1] then
    lost = ARGV[2] ~= '1'
  else
    lost = redis.call('EXISTS', ARGV[3] .. owner) == 0
  end
  if lost then
    redis.call('HDEL', KEYS[1], 'message', 'result')
    redis.call('HSET', KEYS[1], 'status', 'failed', 'error', ARGV[4], 'updated', ARGV[5])
    redis.call('DEL', KEYS[2])
    redis.call('PEXPIRE', KEYS[1], ARGV[6])
  end
end
return {redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}
";

/// Adds an open question to a task that has not ended.
///
/// KEYS: record, questions. ARGV: key, request (JSON), now (ms), the running
/// ttl (ms). Gives -1 (unknown), -2 (ended: nothing added), or the bytes of
/// the open questions now.
pub(crate) const ASK: &str = r"
local s = redis.call('HGET', KEYS[1], 'status')
if not s then return -1 end
if s == 'completed' or s == 'failed' or s == 'cancelled' then return -2 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[1], 'updated', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
local n = 0
for _, v in ipairs(redis.call('HGETALL', KEYS[2])) do n = n + #v end
return n
";

/// Removes the given keys that are open questions of a task that has not
/// ended.
///
/// KEYS: record, questions. ARGV: now (ms), then the keys. Gives `false`
/// (unknown), or the keys it removed.
pub(crate) const ANSWERED: &str = r"
local s = redis.call('HGET', KEYS[1], 'status')
if not s then return false end
local out = {}
if s == 'completed' or s == 'failed' or s == 'cancelled' then return out end
for i = 2, #ARGV do
  if redis.call('HDEL', KEYS[2], ARGV[i]) == 1 then out[#out + 1] = ARGV[i] end
end
if #out > 0 then redis.call('HSET', KEYS[1], 'updated', ARGV[1]) end
return out
";

/// Sets the status message of a task that has not ended.
///
/// KEYS: record. ARGV: message, now (ms). Gives -1 (unknown), 0 (ended), 1.
pub(crate) const NOTE: &str = r"
local s = redis.call('HGET', KEYS[1], 'status')
if not s then return -1 end
if s == 'completed' or s == 'failed' or s == 'cancelled' then return 0 end
redis.call('HSET', KEYS[1], 'message', ARGV[1], 'updated', ARGV[2])
return 1
";

/// Ends a task unless it has ended: its status, message, result and error
/// replaced, its questions removed, kept `ttl` from now.
///
/// KEYS: record, questions. ARGV: now (ms), `ttl` (ms), the status, then
/// field, value pairs (`message`, `result`, `error`, those it has). Gives -1
/// (unknown), 0 (it had ended), 1 (this ended it).
pub(crate) const FINISH: &str = r"
local s = redis.call('HGET', KEYS[1], 'status')
if not s then return -1 end
if s == 'completed' or s == 'failed' or s == 'cancelled' then return 0 end
redis.call('HDEL', KEYS[1], 'message', 'result', 'error')
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'updated', ARGV[1])
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('DEL', KEYS[2])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";

/// Extends the records of running tasks (not those that ended).
///
/// KEYS: record, questions of each task. ARGV: the running ttl (ms). Gives,
/// per task, -1 (unknown), 0 (ended), 1 (extended).
pub(crate) const REFRESH: &str = r"
local out = {}
for i = 1, #KEYS, 2 do
  local s = redis.call('HGET', KEYS[i], 'status')
  if not s then
    out[#out + 1] = -1
  elseif s == 'completed' or s == 'failed' or s == 'cancelled' then
    out[#out + 1] = 0
  else
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
    redis.call('PEXPIRE', KEYS[i + 1], ARGV[1])
    out[#out + 1] = 1
  end
end
return out
";

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
        let store = Arc::new(RedisTaskStore {
            cluster: Arc::clone(cluster),
            limits,
            clock,
            ledger: Arc::new(Mutex::new(Ledger::default())),
            signals,
            signals_rx: Mutex::new(Some(signals_rx)),
        });
        let _ = cluster.tasks.set(Arc::downgrade(&store));
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
    fn conn(&self) -> Option<ConnectionManager> {
        self.cluster
            .conn
            .get()
            .cloned()
            .filter(|_| self.cluster.is_healthy())
    }

    /// The script ending task `id` as `end`.
    fn finish_cmd(&self, id: &str, end: &TaskEnd, now: u64) -> redis::Cmd {
        let mut cmd = eval(FINISH, &[task_key(id), questions_key(id)]);
        cmd.arg(now).arg(self.ttl_ms()).arg(end.status.as_str());
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
            match query(Some(conn.clone()), self.finish_cmd(&id, &end, now)).await {
                Ok(redis::Value::Int(-1)) => self.ledger().remove(&id),
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
            cmd.arg(self.running_ttl_ms());
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

fn lock(ledger: &Mutex<Ledger>) -> std::sync::MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(|e| e.into_inner())
}

/// `EVAL script` with `keys`.
fn eval(script: &str, keys: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script).arg(keys.len()).arg(keys);
    cmd
}

/// One round trip, within [`IO_TIMEOUT`]; any failure is `Unavailable`.
async fn query(
    conn: Option<ConnectionManager>,
    cmd: redis::Cmd,
) -> Result<redis::Value, TaskStoreError> {
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
        let pipe = create_pipeline(&record, expires);
        let conn = self.conn();
        // Forgotten unless written, even if this future is dropped.
        let pending = admitted.map(|()| Creating {
            ledger: Arc::clone(&self.ledger),
            id: record.id,
            written: false,
        });
        Box::pin(async move {
            let pending = pending?;
            let Some(mut conn) = conn else {
                return Err(TaskStoreError::Unavailable);
            };
            let written = tokio::time::timeout(IO_TIMEOUT, pipe.query_async::<()>(&mut conn)).await;
            if matches!(written, Ok(Ok(()))) {
                pending.written();
                Ok(())
            } else {
                Err(TaskStoreError::Unavailable)
            }
        })
    }

    fn get(
        &self,
        id: &str,
        lost: Value,
    ) -> StoreFuture<Result<Option<TaskRecord>, TaskStoreError>> {
        let here = self.ledger().runs(id);
        let mut cmd = eval(GET, &[task_key(id), questions_key(id)]);
        cmd.arg(self.instance())
            .arg(if here { "1" } else { "0" })
            .arg(lease_key(""))
            .arg(lost.to_string())
            .arg(self.clock.unix_millis())
            .arg(self.ttl_ms());
        let conn = self.conn();
        let id = id.to_owned();
        Box::pin(async move {
            let value = query(conn, cmd).await?;
            decode_get(&id, &value).ok_or_else(|| odd("get", &value))
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
            .arg(self.running_ttl_ms());
        let conn = self.conn();
        let ledger = Arc::clone(&self.ledger);
        let id = id.to_owned();
        Box::pin(async move {
            reserved?;
            match query(conn, cmd).await? {
                redis::Value::Int(-1) => {
                    lock(&ledger).remove(&id);
                    Err(TaskStoreError::Unknown)
                }
                redis::Value::Int(-2) => Ok(()),
                redis::Value::Int(n) if n >= 0 => {
                    lock(&ledger).set_questions(&id, n as usize);
                    Ok(())
                }
                other => Err(odd("ask", &other)),
            }
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
        let mut cmd = eval(NOTE, &[task_key(id)]);
        cmd.arg(message).arg(now);
        let conn = self.conn();
        Box::pin(async move {
            reserved?;
            match query(conn, cmd).await? {
                redis::Value::Int(-1) => Err(TaskStoreError::Unknown),
                redis::Value::Int(_) => Ok(()),
                other => Err(odd("note", &other)),
            }
        })
    }

    fn finish(&self, id: &str, end: TaskEnd) -> StoreFuture<Result<bool, TaskStoreError>> {
        let now = self.clock.unix_millis();
        let json = |v: &Option<Value>| v.as_ref().map_or(0, crate::protocol::json_len);
        let (message, ended) = (
            end.message.as_ref().map_or(0, String::len),
            json(&end.result) + json(&end.error),
        );
        let reserved = self.ledger().resize(id, now, &self.limits, |parts| {
            parts.message = message;
            parts.questions = 0;
            parts.end = ended;
        });
        let cmd = self.finish_cmd(id, &end, now);
        let conn = self.conn();
        let ledger = Arc::clone(&self.ledger);
        let ttl = self.ttl_ms();
        let id = id.to_owned();
        Box::pin(async move {
            reserved?;
            match query(conn, cmd).await {
                Ok(redis::Value::Int(-1)) => {
                    lock(&ledger).remove(&id);
                    Err(TaskStoreError::Unknown)
                }
                Ok(redis::Value::Int(n)) => {
                    lock(&ledger).ended(&id, now, ttl);
                    Ok(n == 1)
                }
                Ok(other) => Err(odd("finish", &other)),
                Err(e) => {
                    // Retried by the refresher until it lands.
                    lock(&ledger).ending(&id, end);
                    Err(e)
                }
            }
        })
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
        Box::pin(async move {
            let Some(mut conn) = conn else {
                return Err(TaskStoreError::Unavailable);
            };
            let published =
                tokio::time::timeout(IO_TIMEOUT, conn.publish::<_, _, u64>(channel, message)).await;
            match published {
                // Somebody listens: the owner (its only subscriber).
                Ok(Ok(receivers)) if receivers > 0 => Ok(()),
                _ => Err(TaskStoreError::Unavailable),
            }
        })
    }

    fn take_signals(&self) -> Option<mpsc::Receiver<Signal>> {
        self.signals_rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

/// A record being created: forgotten by the ledger unless it was written.
struct Creating {
    ledger: Arc<Mutex<Ledger>>,
    id: String,
    written: bool,
}

impl Creating {
    fn written(mut self) {
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

/// The `MULTI` that writes a new record (an ended one without questions),
/// expiring in `expires_ms`.
fn create_pipeline(record: &TaskRecord, expires_ms: u64) -> redis::Pipeline {
    let key = task_key(&record.id);
    let questions = questions_key(&record.id);
    let expires = expires_ms as i64;
    let mut pipe = redis::pipe();
    pipe.atomic();
    pipe.del(&[&key, &questions]).ignore();
    pipe.hset_multiple(&key, &fields_of(record)).ignore();
    pipe.pexpire(&key, expires).ignore();
    if !record.status.is_terminal() && !record.questions.is_empty() {
        let asked: Vec<(&str, String)> = record
            .questions
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_string()))
            .collect();
        pipe.hset_multiple(&questions, &asked).ignore();
        pipe.pexpire(&questions, expires).ignore();
    }
    pipe
}

/// A record's fields as its hash holds them (its questions aside).
fn fields_of(record: &TaskRecord) -> Vec<(&'static str, String)> {
    let mut fields = vec![
        ("owner", record.owner.clone()),
        ("status", record.status.as_str().to_owned()),
        ("created", record.created_ms.to_string()),
        ("updated", record.updated_ms.to_string()),
    ];
    if let Some(subject) = &record.subject {
        fields.push(("subject", subject.clone()));
    }
    if let Some(message) = &record.message {
        fields.push(("message", message.clone()));
    }
    if let Some(result) = &record.result {
        fields.push(("result", result.to_string()));
    }
    if let Some(error) = &record.error {
        fields.push(("error", error.to_string()));
    }
    fields
}

/// The record of task `id` from its hash's fields and its questions' (`None`:
/// not a record).
fn record_of(
    id: &str,
    fields: Vec<(String, String)>,
    questions: Vec<(String, String)>,
) -> Option<TaskRecord> {
    let mut fields: HashMap<String, String> = fields.into_iter().collect();
    let number = |v: Option<&String>| v.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let json = |v: Option<String>| v.and_then(|v| serde_json::from_str::<Value>(&v).ok());
    let status = TaskStatus::parse(fields.get("status")?)?;
    Some(TaskRecord {
        id: id.to_owned(),
        owner: fields.remove("owner")?,
        subject: fields.remove("subject"),
        status,
        message: fields.remove("message"),
        created_ms: number(fields.get("created")),
        updated_ms: number(fields.get("updated")),
        questions: questions
            .into_iter()
            .filter_map(|(k, v)| Some((k, serde_json::from_str(&v).ok()?)))
            .collect::<BTreeMap<String, Value>>(),
        result: json(fields.remove("result")),
        error: json(fields.remove("error")),
    })
}

/// The `GET` script's answer: `Some(None)` for an unknown task (or one that
/// is not a record), `None` for an answer it never gives.
fn decode_get(id: &str, value: &redis::Value) -> Option<Option<TaskRecord>> {
    match value {
        redis::Value::Nil => Some(None),
        redis::Value::Array(parts) => match parts.as_slice() {
            [fields, questions] => Some(record_of(id, pairs(fields)?, pairs(questions)?)),
            _ => None,
        },
        _ => None,
    }
}

/// A string of a reply.
fn string(value: &redis::Value) -> Option<String> {
    match value {
        redis::Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        redis::Value::SimpleString(text) => Some(text.clone()),
        redis::Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// An array of strings.
fn strings(value: &redis::Value) -> Option<Vec<String>> {
    match value {
        redis::Value::Array(items) | redis::Value::Set(items) => items.iter().map(string).collect(),
        _ => None,
    }
}

/// `HGETALL`'s answer: a flat array of fields and values (or a map).
fn pairs(value: &redis::Value) -> Option<Vec<(String, String)>> {
    match value {
        redis::Value::Map(map) => map
            .iter()
            .map(|(k, v)| Some((string(k)?, string(v)?)))
            .collect(),
        _ => {
            let flat = strings(value)?;
            if flat.len() % 2 != 0 {
                return None;
            }
            let mut out = Vec::with_capacity(flat.len() / 2);
            let mut items = flat.into_iter();
            while let (Some(k), Some(v)) = (items.next(), items.next()) {
                out.push((k, v));
            }
            Some(out)
        }
    }
}

/// The message that carries `signal` for task `id` to its owner.
fn encode_signal(id: &str, signal: &TaskSignal) -> Vec<u8> {
    let body = match signal {
        TaskSignal::Answers(answers) => json!({"task": id, "answers": answers}),
        TaskSignal::Cancel => json!({"task": id, "cancel": true}),
    };
    frame(SIGNAL, 0, body.to_string().as_bytes())
}

/// The signal in a message's body.
fn decode_signal(body: &[u8]) -> Option<Signal> {
    let mut value: Map<String, Value> = serde_json::from_slice(body).ok()?;
    let id = match value.remove("task")? {
        Value::String(id) => id,
        _ => return None,
    };
    let signal = match (value.remove("answers"), value.get("cancel")) {
        (Some(Value::Object(answers)), None) => TaskSignal::Answers(answers),
        (None, Some(Value::Bool(true))) => TaskSignal::Cancel,
        _ => return None,
    };
    Some((id, signal))
}

/// The bytes of a record, in the parts its writes change (as
/// [`TaskRecord::weight`] counts them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Parts {
    /// The id, owner, subject and the rest.
    fixed: usize,
    message: usize,
    questions: usize,
    /// Result and error.
    end: usize,
}

impl Parts {
    fn of(record: &TaskRecord) -> Parts {
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
        }
    }

    fn total(&self) -> usize {
        self.fixed + self.message + self.questions + self.end
    }
}

/// Where one of this instance's records is.
#[derive(Debug, Clone, PartialEq)]
enum State {
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
struct Ledger {
    by_id: HashMap<String, Entry>,
    bytes: usize,
    /// The ended ones, by when their records expire (oldest first).
    expiring: VecDeque<(u64, String)>,
}

fn too_many_tasks(limits: &TaskLimits) -> TaskStoreError {
    TaskStoreError::Full(format!(
        "the server keeps at most {} tasks (max_tasks)",
        limits.max_tasks
    ))
}

fn too_many_bytes(limits: &TaskLimits) -> TaskStoreError {
    TaskStoreError::Full(format!(
        "the server keeps at most {} bytes of tasks (max_task_bytes)",
        limits.max_bytes
    ))
}

impl Ledger {
    /// Forgets the records that expired by `now`.
    fn expire(&mut self, now: u64) {
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

    /// Takes a new record in, if it fits.
    fn admit(
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
    /// change fits.
    fn resize(
        &mut self,
        id: &str,
        now: u64,
        limits: &TaskLimits,
        change: impl FnOnce(&mut Parts),
    ) -> Result<(), TaskStoreError> {
        self.expire(now);
        let Some(entry) = self.by_id.get_mut(id) else {
            return Ok(());
        };
        let mut parts = entry.parts;
        change(&mut parts);
        let (old, new) = (entry.parts.total(), parts.total());
        if new > old && self.bytes - old + new > limits.max_bytes {
            return Err(too_many_bytes(limits));
        }
        entry.parts = parts;
        self.bytes = self.bytes - old + new;
        Ok(())
    }

    /// The open questions of `id` take `bytes` now (as Redis counted them).
    fn set_questions(&mut self, id: &str, bytes: usize) {
        if let Some(entry) = self.by_id.get_mut(id) {
            self.bytes = self.bytes - entry.parts.questions + bytes;
            entry.parts.questions = bytes;
        }
    }

    /// Task `id` ended (at `now`): its record expires `ttl` ms later.
    fn ended(&mut self, id: &str, now: u64, ttl: u64) {
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
    fn ending(&mut self, id: &str, end: TaskEnd) {
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
    fn stop(&mut self, id: &str) -> bool {
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

    fn remove(&mut self, id: &str) {
        if let Some(entry) = self.by_id.remove(id) {
            self.bytes -= entry.parts.total();
        }
    }

    /// Whether task `id` runs here (its end not recorded yet).
    fn runs(&self, id: &str) -> bool {
        self.by_id
            .get(id)
            .is_some_and(|e| !matches!(e.state, State::Ended { .. }))
    }

    /// The tasks running here, and the ends to record again.
    fn live(&self) -> (Vec<String>, Vec<(String, TaskEnd)>) {
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

/// Hands a task signal's message body to the task store attached to a
/// session store (none: the server serves no tasks through it).
pub(super) fn deliver(tasks: &std::sync::OnceLock<Weak<RedisTaskStore>>, body: &[u8]) {
    match tasks.get().and_then(Weak::upgrade) {
        Some(tasks) => tasks.receive(body),
        None => tracing::debug!("a task signal for a server without tasks dropped"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_tasks: usize, max_bytes: usize) -> TaskLimits {
        TaskLimits {
            ttl: Duration::from_secs(60),
            max_tasks,
            max_bytes,
        }
    }

    fn record(id: &str) -> TaskRecord {
        TaskRecord {
            id: id.into(),
            owner: "a".into(),
            subject: Some("ada".into()),
            status: TaskStatus::Working,
            message: Some("halfway".into()),
            created_ms: 1_700_000_000_000,
            updated_ms: 1_700_000_000_500,
            questions: [(
                "k".to_owned(),
                json!({"method": "elicitation/create", "params": {}}),
            )]
            .into_iter()
            .collect(),
            result: None,
            error: None,
        }
    }

    fn bulk(text: &str) -> redis::Value {
        redis::Value::BulkString(text.as_bytes().to_vec())
    }

    fn flat(pairs: &[(&str, String)]) -> redis::Value {
        redis::Value::Array(pairs.iter().flat_map(|(k, v)| [bulk(k), bulk(v)]).collect())
    }

    #[test]
    fn keys_are_named_by_the_task() {
        assert_eq!(task_key("t1"), "haip:t:t1");
        assert_eq!(questions_key("t1"), "haip:t:t1:q");
        assert_eq!(lease_key(""), "haip:i:", "the prefix GET names leases with");
        assert_eq!(
            running_ttl(Duration::from_secs(1)),
            TASK_REFRESH * 4,
            "a running record outlives several refreshes"
        );
        assert_eq!(
            running_ttl(Duration::from_secs(3600)),
            Duration::from_secs(3600)
        );
    }

    #[test]
    fn the_scripts_know_the_statuses_that_end_a_task() {
        let ended: Vec<&str> = [
            TaskStatus::Working,
            TaskStatus::InputRequired,
            TaskStatus::Completed,
            TaskStatus::Failed,
            TaskStatus::Cancelled,
        ]
        .into_iter()
        .filter(|s| s.is_terminal())
        .map(TaskStatus::as_str)
        .collect();
        for script in [GET, ASK, ANSWERED, NOTE, FINISH, REFRESH] {
            for status in &ended {
                assert!(
                    script.contains(&format!("'{status}'")),
                    "{status} in {script}"
                );
            }
            assert!(!script.contains("'working'") && !script.contains("'input_required'"));
        }
        assert!(GET.contains("'failed'") && GET.contains("'error', ARGV[4]"));
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let mut written = record("t1");
        let value = redis::Value::Array(vec![
            flat(&fields_of(&written)),
            flat(&[("k", written.questions["k"].to_string())]),
        ]);
        assert_eq!(decode_get("t1", &value), Some(Some(written.clone())));
        // Ended, without subject or message, with a result.
        written.subject = None;
        written.message = None;
        written.questions.clear();
        written.status = TaskStatus::Completed;
        written.result = Some(json!({"content": [{"type": "text", "text": "done"}]}));
        let value = redis::Value::Array(vec![flat(&fields_of(&written)), flat(&[])]);
        assert_eq!(decode_get("t1", &value), Some(Some(written)));
        // Unknown; and what the script never answers.
        assert_eq!(decode_get("t1", &redis::Value::Nil), Some(None));
        assert_eq!(decode_get("t1", &redis::Value::Int(1)), None);
        let odd_fields =
            redis::Value::Array(vec![redis::Value::Array(vec![bulk("owner")]), flat(&[])]);
        assert_eq!(decode_get("t1", &odd_fields), None);
        // A hash that is not a record (no status) reads as unknown.
        let no_status = redis::Value::Array(vec![flat(&[("owner", "a".into())]), flat(&[])]);
        assert_eq!(decode_get("t1", &no_status), Some(None));
        // A map (RESP3) is read as well.
        let map = redis::Value::Map(vec![(bulk("k"), bulk("v"))]);
        assert_eq!(pairs(&map), Some(vec![("k".into(), "v".into())]));
    }

    #[test]
    fn signals_are_framed_for_the_owner_and_read_back() {
        let mut answers = Map::new();
        answers.insert(
            "confirm".into(),
            json!({"action": "accept", "content": {"confirm": true}}),
        );
        for signal in [TaskSignal::Answers(answers), TaskSignal::Cancel] {
            let message = encode_signal("task-1", &signal);
            let (kind, link, body) = super::super::split_message(&message).expect("framed");
            assert_eq!((kind, link), (SIGNAL, 0));
            assert_eq!(decode_signal(body), Some(("task-1".to_owned(), signal)));
        }
        for bad in [
            &b"not json"[..],
            br#"{"cancel": true}"#,
            br#"{"task": 1, "cancel": true}"#,
            br#"{"task": "t"}"#,
            br#"{"task": "t", "cancel": false}"#,
            br#"{"task": "t", "answers": [1]}"#,
            br#"{"task": "t", "answers": {}, "cancel": true}"#,
        ] {
            assert_eq!(decode_signal(bad), None, "{}", String::from_utf8_lossy(bad));
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
        assert_eq!(ledger.bytes, record("written").weight());
    }

    #[test]
    fn the_ledger_bounds_records_and_bytes_until_they_expire() {
        let limits = limits(2, 4096);
        let mut ledger = Ledger::default();
        let parts = Parts::of(&record("a"));
        assert_eq!(parts.total(), record("a").weight());
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

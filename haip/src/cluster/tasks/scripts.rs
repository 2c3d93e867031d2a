//! The Lua scripts that read and change task records, each one atomic round
//! trip: none changes a task that has ended.
//!
//! Each that changes a record also counts it for its caller (the record's
//! `caller` field; a record without one is no caller's), in the same script:
//! the caller's share keys (`{haip}:tb:{caller}`: bytes by task, and `=` their
//! sum; `{haip}:te:{caller}`: tasks by when their records expire) hold the
//! [charge](crate::session::tasks::TaskRecord::charge) of each of its
//! records, computed here from what Redis holds, until the record is gone.
//! Redis runs no script when a record expires: the tasks of a share whose
//! expiry passed are looked at whenever the share is (`purge`), and those
//! whose records are gone forgotten (those still there, extended, looked at
//! again when they would expire now). Expiry times are the writing
//! instance's `now` plus what Redis says is left (`PTTL`), so an instance
//! whose clock is ahead of Redis's only looks a little late. A share's keys
//! outlive its records (by a minute), and go with the last. `CREATE`, `ASK`, `NOTE` and `FINISH` refuse to
//! grow a record beyond its caller's share (growth only: an end within
//! what a running record is counted for always fits).

/// What the scripts that count records for their callers share: the
/// statuses that end a task, the reserve of a running record, a record's
/// charge, and a caller's share keys.
macro_rules! shares {
    () => {
        r"
local RESERVE = 1024
local function ended(s)
  return s == 'completed' or s == 'failed' or s == 'cancelled'
end
local function id_of(rec) return string.sub(rec, 10) end
-- The error of a re-runnable task out of attempts: `template` with its
-- number of attempts in place of `{attempts}`.
local function out_of_attempts(rec, template)
  local attempts = redis.call('HGET', rec, 'attempts') or '1'
  return (string.gsub(template, '{attempts}', attempts))
end
-- A re-runnable task with attempts left (an instance takes it over: CLAIM).
local function again(rec)
  local attempts = redis.call('HGET', rec, 'attempts')
  if not attempts then return false end
  return tonumber(redis.call('HGET', rec, 'attempt') or '1') < tonumber(attempts)
end
-- A record's caller's share keys (nil: no caller's).
local function share_keys(rec)
  local caller = redis.call('HGET', rec, 'caller')
  if not caller then return nil end
  return '{haip}:tb:' .. caller, '{haip}:te:' .. caller
end
-- The bytes of a record but its message, result, error and questions.
local function base(rec)
  local n = 256 + #id_of(rec)
  for _, f in ipairs({'owner', 'subject', 'caller', 'rerun'}) do
    n = n + redis.call('HSTRLEN', rec, f)
  end
  return n + tonumber(redis.call('HGET', rec, 'abytes') or '0')
end
-- What a record is counted for, as Redis holds it now.
local function charge(rec, q)
  local n = base(rec)
  for _, f in ipairs({'message', 'result', 'error'}) do
    n = n + redis.call('HSTRLEN', rec, f)
  end
  for _, v in ipairs(redis.call('HGETALL', q)) do n = n + #v end
  if not ended(redis.call('HGET', rec, 'status')) then n = n + RESERVE end
  return n
end
local function forget(b, e, id)
  local n = tonumber(redis.call('HGET', b, id) or '0')
  redis.call('HDEL', b, id)
  redis.call('ZREM', e, id)
  redis.call('HINCRBY', b, '=', -n)
end
-- Forgets the tasks of a share whose records are gone by `now`.
local function purge(b, e, now)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', e, '-inf', now)) do
    local left = redis.call('PTTL', '{haip}:t:' .. id)
    if left == -2 then
      forget(b, e, id)
    else
      redis.call('ZADD', e, now + math.max(left, 0), id)
    end
  end
  if redis.call('ZCARD', e) == 0 then redis.call('DEL', b, e) end
end
-- The bytes the share of `rec` holds but for `rec` (nil: no caller's).
local function others(rec, now)
  local b, e = share_keys(rec)
  if not b then return nil end
  purge(b, e, now)
  local all = tonumber(redis.call('HGET', b, '=') or '0')
  return all - tonumber(redis.call('HGET', b, id_of(rec)) or '0')
end
-- Whether `rec` may be counted for `new` bytes: not more than now unless
-- its caller's share (`max` bytes) has room.
local function fits(rec, q, new, now, max)
  if new <= charge(rec, q) then return true end
  local held = others(rec, now)
  return held == nil or held + new <= tonumber(max)
end
-- Counts `rec` for its caller as it is now, until it expires.
local function account(rec, q, now)
  local b, e = share_keys(rec)
  if not b then return end
  local id = id_of(rec)
  local left = redis.call('PTTL', rec)
  if left == -2 then
    forget(b, e, id)
    return
  end
  if left < 0 then left = 0 end
  local new = charge(rec, q)
  local old = tonumber(redis.call('HGET', b, id) or '0')
  redis.call('HSET', b, id, new)
  redis.call('HINCRBY', b, '=', new - old)
  redis.call('ZADD', e, now + left, id)
  local keep = left + 60000
  for _, k in ipairs({b, e}) do
    if redis.call('PTTL', k) < keep then redis.call('PEXPIRE', k, keep) end
  end
end
"
    };
}

/// Writes a new record (its questions too, unless it has ended), if its
/// caller's share has room for it.
///
/// KEYS: record, questions, the index of re-runnable running tasks (which
/// a record with `attempts` joins). ARGV: now (ms), expires in (ms), the
/// caller's share in bytes, in records, the number of record field-value pairs, then
/// those pairs, then the questions' key-question pairs. Gives 1 (written),
/// -3 (over the caller's bytes), -4 (over its records): nothing written.
pub(crate) const CREATE: &str = concat!(
    shares!(),
    r"
local now = tonumber(ARGV[1])
redis.call('DEL', KEYS[1], KEYS[2])
local fields = 5 + 2 * tonumber(ARGV[5])
for i = 6, fields, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if not ended(redis.call('HGET', KEYS[1], 'status')) and #ARGV > fields then
  for i = fields + 1, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
local rerun = not ended(redis.call('HGET', KEYS[1], 'status'))
  and redis.call('HEXISTS', KEYS[1], 'attempts') == 1
local b, e = share_keys(KEYS[1])
if b then
  local held = others(KEYS[1], now)
  local refused
  if redis.call('ZCARD', e) >= tonumber(ARGV[4]) then
    refused = -4
  elseif held + charge(KEYS[1], KEYS[2]) > tonumber(ARGV[3]) then
    refused = -3
  end
  if refused then
    redis.call('DEL', KEYS[1], KEYS[2])
    return refused
  end
end
account(KEYS[1], KEYS[2], now)
if rerun then
  local owner = redis.call('HGET', KEYS[1], 'owner')
  redis.call('SADD', KEYS[3], owner)
  redis.call('SADD', KEYS[3] .. ':' .. owner, id_of(KEYS[1]))
end
return 1
"
);

/// Reads a task and its questions; fails it, once, if its owner is gone
/// (unless it runs again: a re-runnable task with attempts left, which an
/// instance takes over, `CLAIM`; or, when its owner is this instance in an
/// earlier life, this instance takes it over here, if it takes tasks over).
///
/// KEYS: record, questions, the index of re-runnable running tasks. ARGV:
/// this instance, `1` if the task runs here, the lease key prefix, the
/// `lost` error (JSON), now (ms), `ttl` (ms), `1` if this instance takes
/// tasks over, the running ttl (ms), the `lost` error of a re-runnable task
/// out of attempts (JSON, `{attempts}` standing for their number). Gives
/// `false` (unknown), or `{record fields, question fields, 1 if taken over
/// here}`.
pub(crate) const GET: &str = concat!(
    shares!(),
    r"
local owner = redis.call('HGET', KEYS[1], 'owner')
if not owner then return false end
local s = redis.call('HGET', KEYS[1], 'status')
local taken = 0
if s ~= 'completed' and s ~= 'failed' and s ~= 'cancelled' then
  local lost
  if owner == ARGV[1] then
    lost = ARGV[2] ~= '1'
  else
    lost = redis.call('EXISTS', ARGV[3] .. owner) == 0
  end
  if lost and again(KEYS[1]) then
    lost = false
    -- Its owner is this instance, which does not run it: an earlier life
    -- of it, which `CLAIM` leaves to it. Taken over here, run again here.
    if owner == ARGV[1] and ARGV[7] == '1' then
      local attempt = tonumber(redis.call('HGET', KEYS[1], 'attempt') or '1') + 1
      local message = 'The server instance running it stopped; running again (attempt '
        .. attempt .. ' of ' .. redis.call('HGET', KEYS[1], 'attempts') .. ')'
      redis.call('HSET', KEYS[1], 'attempt', attempt, 'message', message, 'updated', ARGV[5])
      redis.call('DEL', KEYS[2])
      redis.call('PEXPIRE', KEYS[1], ARGV[8])
      account(KEYS[1], KEYS[2], tonumber(ARGV[5]))
      taken = 1
    end
  end
  if lost then
    local error = ARGV[4]
    if redis.call('HEXISTS', KEYS[1], 'attempts') == 1 then
      error = out_of_attempts(KEYS[1], ARGV[9])
    end
    redis.call('SREM', KEYS[3] .. ':' .. owner, id_of(KEYS[1]))
    redis.call('HDEL', KEYS[1], 'message', 'result')
    redis.call('HSET', KEYS[1], 'status', 'failed', 'error', error, 'updated', ARGV[5])
    redis.call('DEL', KEYS[2])
    redis.call('PEXPIRE', KEYS[1], ARGV[6])
    account(KEYS[1], KEYS[2], tonumber(ARGV[5]))
  end
end
return {redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2]), taken}
"
);

/// Adds an open question to a task that has not ended.
///
/// KEYS: record, questions. ARGV: key, request (JSON), now (ms), the running
/// ttl (ms), the caller's share in bytes. Gives -1 (unknown), -2 (ended:
/// nothing added), -3 (over the caller's share: nothing added), or the
/// bytes of the open questions now.
pub(crate) const ASK: &str = concat!(
    shares!(),
    r"
local s = redis.call('HGET', KEYS[1], 'status')
if not s then return -1 end
if s == 'completed' or s == 'failed' or s == 'cancelled' then return -2 end
local now = tonumber(ARGV[3])
local new = charge(KEYS[1], KEYS[2]) + #ARGV[1] + #ARGV[2]
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  new = new - #ARGV[1] - redis.call('HSTRLEN', KEYS[2], ARGV[1])
end
if not fits(KEYS[1], KEYS[2], new, now, ARGV[5]) then return -3 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[1], 'updated', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
account(KEYS[1], KEYS[2], now)
local n = 0
for _, v in ipairs(redis.call('HGETALL', KEYS[2])) do n = n + #v end
return n
"
);

/// Removes the given keys that are open questions of a task that has not
/// ended.
///
/// KEYS: record, questions. ARGV: now (ms), then the keys. Gives `false`
/// (unknown), or the keys it removed.
pub(crate) const ANSWERED: &str = concat!(
    shares!(),
    r"
local s = redis.call('HGET', KEYS[1], 'status')
if not s then return false end
local out = {}
if s == 'completed' or s == 'failed' or s == 'cancelled' then return out end
for i = 2, #ARGV do
  if redis.call('HDEL', KEYS[2], ARGV[i]) == 1 then out[#out + 1] = ARGV[i] end
end
if #out > 0 then
  redis.call('HSET', KEYS[1], 'updated', ARGV[1])
  account(KEYS[1], KEYS[2], tonumber(ARGV[1]))
end
return out
"
);

/// Sets the status message of a task that has not ended.
///
/// KEYS: record, questions. ARGV: message, now (ms), the caller's share in
/// bytes. Gives -1 (unknown), 0 (ended), -3 (over the caller's share:
/// unchanged), 1.
pub(crate) const NOTE: &str = concat!(
    shares!(),
    r"
local s = redis.call('HGET', KEYS[1], 'status')
if not s then return -1 end
if s == 'completed' or s == 'failed' or s == 'cancelled' then return 0 end
local now = tonumber(ARGV[2])
local new = charge(KEYS[1], KEYS[2]) - redis.call('HSTRLEN', KEYS[1], 'message') + #ARGV[1]
if not fits(KEYS[1], KEYS[2], new, now, ARGV[3]) then return -3 end
redis.call('HSET', KEYS[1], 'message', ARGV[1], 'updated', ARGV[2])
account(KEYS[1], KEYS[2], now)
return 1
"
);

/// Ends a task unless it has ended: its status, message, result and error
/// replaced, its questions removed, kept `ttl` from now; unless that would
/// grow it beyond its caller's share.
///
/// KEYS: record, questions, the index of re-runnable running tasks (which
/// it leaves). ARGV: now (ms), `ttl` (ms), the status, the
/// caller's share in bytes, the instance whose run this ends (empty: an end
/// any instance may write, such as a client's cancellation; else refused
/// unless that instance owns the task, which another may have taken over),
/// then field, value pairs (`message`, `result`, `error`, those it has).
/// Gives -1 (unknown), 0 (it had ended, or is another's now), -3 (over
/// the caller's share: unchanged), 1 (this ended it).
pub(crate) const FINISH: &str = concat!(
    shares!(),
    r"
local s = redis.call('HGET', KEYS[1], 'status')
if not s then return -1 end
if s == 'completed' or s == 'failed' or s == 'cancelled' then return 0 end
if ARGV[5] ~= '' and redis.call('HGET', KEYS[1], 'owner') ~= ARGV[5] then return 0 end
local now = tonumber(ARGV[1])
local new = base(KEYS[1])
for i = 6, #ARGV, 2 do new = new + #ARGV[i + 1] end
if not fits(KEYS[1], KEYS[2], new, now, ARGV[4]) then return -3 end
redis.call('HDEL', KEYS[1], 'message', 'result', 'error')
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'updated', ARGV[1])
for i = 6, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[3] .. ':' .. redis.call('HGET', KEYS[1], 'owner'), id_of(KEYS[1]))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
account(KEYS[1], KEYS[2], now)
return 1
"
);

/// Keeps a re-runnable task's answers for a run again: each with the
/// question it answers, while it has not ended, as many as fit
/// ([`MAX_KEPT_ANSWERS`](crate::session::tasks::MAX_KEPT_ANSWERS) and its
/// caller's share).
///
/// KEYS: record, questions. ARGV: now (ms), the most answers kept, the
/// caller's share in bytes, then key, `{q, a}` (JSON) pairs. Gives -1
/// (unknown), 0 (ended, or not re-runnable), -3 (over the caller's share),
/// or how many it kept.
pub(crate) const KEEP_ANSWERS: &str = concat!(
    shares!(),
    r"
local s = redis.call('HGET', KEYS[1], 'status')
if not s then return -1 end
if ended(s) or redis.call('HEXISTS', KEYS[1], 'rerun') == 0 then return 0 end
local now = tonumber(ARGV[1])
local kept = 0
for i = 4, #ARGV, 2 do
  local field = 'a:' .. ARGV[i]
  local count = tonumber(redis.call('HGET', KEYS[1], 'acount') or '0')
  if redis.call('HEXISTS', KEYS[1], field) == 0 and count < tonumber(ARGV[2]) then
    local grows = #field + #ARGV[i + 1]
    if not fits(KEYS[1], KEYS[2], charge(KEYS[1], KEYS[2]) + grows, now, ARGV[3]) then
      if kept == 0 then return -3 end
      break
    end
    redis.call('HSET', KEYS[1], field, ARGV[i + 1])
    redis.call('HINCRBY', KEYS[1], 'acount', 1)
    redis.call('HINCRBY', KEYS[1], 'abytes', grows)
    kept = kept + 1
  end
end
if kept > 0 then account(KEYS[1], KEYS[2], now) end
return kept
"
);

/// Takes over re-runnable tasks whose owner is gone (its lease expired):
/// those of each such owner, as many as asked for. One with attempts left
/// becomes this instance's, on its next attempt (its open questions
/// dropped, its status message saying so), and is given back to run again;
/// one without fails as lost, saying how many times it ran. Atomic, so
/// each task is taken over by one instance. The work is the instances that
/// own re-runnable tasks, and the tasks taken over: not all the tasks.
///
/// KEYS: the index of re-runnable running tasks: the set of their owners,
/// each owner's tasks in the set named after it (`KEYS[1] .. ':' ..
/// owner`). ARGV: this instance, the lease key prefix, now (ms), the
/// running ttl (ms), `ttl` (ms), the `lost` error (JSON, `{attempts}`
/// standing for their number) of a task out of attempts, how many to take
/// at most. Gives `{id, record fields}` for each task taken over.
pub(crate) const CLAIM: &str = concat!(
    shares!(),
    r"
local now = tonumber(ARGV[3])
local room = tonumber(ARGV[7])
local mine = KEYS[1] .. ':' .. ARGV[1]
local out = {}
for _, owner in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local set = KEYS[1] .. ':' .. owner
  if owner ~= ARGV[1] and #out < room and redis.call('EXISTS', ARGV[2] .. owner) == 0 then
    for _, id in ipairs(redis.call('SRANDMEMBER', set, room - #out)) do
      local rec = '{haip}:t:' .. id
      local q = rec .. ':q'
      local s = redis.call('HGET', rec, 'status')
      redis.call('SREM', set, id)
      if s and not ended(s) and redis.call('HGET', rec, 'owner') == owner then
        local attempt = tonumber(redis.call('HGET', rec, 'attempt') or '1')
        local attempts = tonumber(redis.call('HGET', rec, 'attempts') or '1')
        redis.call('DEL', q)
        if attempt >= attempts then
          redis.call('HDEL', rec, 'message', 'result')
          local error = out_of_attempts(rec, ARGV[6])
          redis.call('HSET', rec, 'status', 'failed', 'error', error, 'updated', ARGV[3])
          redis.call('PEXPIRE', rec, ARGV[5])
        else
          attempt = attempt + 1
          local message = 'The server instance running it stopped; running again (attempt '
            .. attempt .. ' of ' .. attempts .. ')'
          redis.call('HSET', rec, 'owner', ARGV[1], 'attempt', attempt, 'message', message,
            'updated', ARGV[3])
          redis.call('PEXPIRE', rec, ARGV[4])
          redis.call('SADD', KEYS[1], ARGV[1])
          redis.call('SADD', mine, id)
          out[#out + 1] = {id, redis.call('HGETALL', rec)}
        end
        account(rec, q, now)
      end
    end
  end
  if redis.call('SCARD', set) == 0 then redis.call('SREM', KEYS[1], owner) end
end
return out
"
);

/// Extends the records of running tasks (not those that ended), and their
/// callers' count of them.
///
/// KEYS: record, questions of each task. ARGV: the running ttl (ms), now
/// (ms), this instance. Gives, per task, -1 (unknown), 0 (ended, or taken
/// over by another instance), 1 (extended).
pub(crate) const REFRESH: &str = concat!(
    shares!(),
    r"
local out = {}
for i = 1, #KEYS, 2 do
  local s = redis.call('HGET', KEYS[i], 'status')
  if not s then
    out[#out + 1] = -1
  elseif ended(s) or redis.call('HGET', KEYS[i], 'owner') ~= ARGV[3] then
    out[#out + 1] = 0
  else
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
    redis.call('PEXPIRE', KEYS[i + 1], ARGV[1])
    account(KEYS[i], KEYS[i + 1], tonumber(ARGV[2]))
    out[#out + 1] = 1
  end
end
return out
"
);

/// Records an MCP session, held by one instance.
///
/// KEYS: the session's hash. ARGV: the record (JSON), the holder's field,
/// the ttl (ms).
pub(crate) const PUT_SESSION: &str = r"
redis.call('HSET', KEYS[1], 'record', ARGV[1], ARGV[2], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
";

/// An MCP session's record and holders, this instance added and its ttl
/// renewed; nil when there is none.
///
/// KEYS: the session's hash. ARGV: the holder's field, the ttl (ms).
pub(crate) const TOUCH_SESSION: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  return false
end
redis.call('HSET', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return redis.call('HGETALL', KEYS[1])
";

/// Ends an MCP session; gives its fields (the record and its holders).
///
/// KEYS: the session's hash.
pub(crate) const END_SESSION: &str = r"
local fields = redis.call('HKEYS', KEYS[1])
redis.call('DEL', KEYS[1])
return fields
";

//! The Lua scripts that read and change task records, each one atomic round
//! trip: none changes a task that has ended.

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

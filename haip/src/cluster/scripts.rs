//! The Lua scripts the session store runs in Redis, each one atomic round
//! trip: [`RECORD`] writes a batch of records, [`CLAIM`] claims a session
//! to restore it.

/// Claims `KEYS[1]` for instance `ARGV[1]` for `ARGV[2]` ms, unless another
/// instance whose lease is alive holds it: 1 if claimed, else 0.
pub(super) const CLAIM: &str = r"
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] and redis.call('EXISTS', 'haip:i:' .. holder) == 1 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
";

/// Writes a batch of session records. ARGV: this instance, the keys' time to
/// live (ms), the envelopes kept per session; then records, each a kind and
/// its fields: `S` session (the records that follow are its), `W` next `seq`,
/// inbound `seq`, count, envelopes (appended to the window, trimmed), `O`
/// opened without subject, `U` subject (opened), `A` / `D` call id (owed a
/// `TOOL_DONE`, or no longer), `P` paused channels, `C` the credit owed to
/// the client, `L` and `1` or `0`: records of the session were lost (and it
/// runs on this instance), `E` ended (its keys
/// deleted), `+` / `-` key member (a stream session opened, closed). A
/// session's keys get their expiry once, after its records, as they would
/// after each.
pub(super) const RECORD: &str = r"
local owner, ttl, keep = ARGV[1], ARGV[2], -tonumber(ARGV[3])
local s, w, c
local es, ew, ec = false, false, false
local function expire()
  if es then redis.call('PEXPIRE', s, ttl) end
  if ew then redis.call('PEXPIRE', w, ttl) end
  if ec then redis.call('PEXPIRE', c, ttl) end
  es, ew, ec = false, false, false
end
local i, n = 4, #ARGV
while i <= n do
  local kind = ARGV[i]
  if kind == 'S' then
    expire()
    s = 'haip:s:' .. ARGV[i + 1]
    w, c = s .. ':w', s .. ':c'
    i = i + 2
  elseif kind == 'W' then
    local first, last = i + 4, i + 3 + tonumber(ARGV[i + 3])
    while first <= last do
      local upto = math.min(first + 199, last)
      redis.call('RPUSH', w, unpack(ARGV, first, upto))
      first = upto + 1
    end
    redis.call('LTRIM', w, keep, -1)
    redis.call('HSET', s, 'owner', owner, 'next_seq', ARGV[i + 1], 'last_rx', ARGV[i + 2])
    es, ew, ec = true, true, true
    i = last + 1
  elseif kind == 'A' then
    redis.call('SADD', c, ARGV[i + 1])
    ec = true
    i = i + 2
  elseif kind == 'D' then
    redis.call('SREM', c, ARGV[i + 1])
    i = i + 2
  elseif kind == 'O' then
    redis.call('HSET', s, 'owner', owner)
    redis.call('HDEL', s, 'subject')
    es = true
    i = i + 1
  elseif kind == 'U' then
    redis.call('HSET', s, 'owner', owner, 'subject', ARGV[i + 1])
    es = true
    i = i + 2
  elseif kind == 'P' then
    redis.call('HSET', s, 'paused', ARGV[i + 1])
    i = i + 2
  elseif kind == 'C' then
    redis.call('HSET', s, 'owed', ARGV[i + 1])
    i = i + 2
  elseif kind == 'L' then
    redis.call('HSET', s, 'lost', '1')
    if ARGV[i + 1] == '1' then redis.call('HSET', s, 'owner', owner) end
    es = true
    i = i + 2
  elseif kind == 'E' then
    redis.call('DEL', s, w, c)
    es, ew, ec = false, false, false
    i = i + 1
  elseif kind == '+' then
    redis.call('SADD', ARGV[i + 1], ARGV[i + 2])
    i = i + 3
  elseif kind == '-' then
    redis.call('SREM', ARGV[i + 1], ARGV[i + 2])
    i = i + 3
  else
    return redis.error_reply('unknown record ' .. kind)
  end
end
expire()
return 0
";

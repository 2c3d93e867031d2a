//! The Lua scripts the session store runs in Redis, each one atomic round
//! trip: [`RECORD`] writes a batch of records, [`CLAIM`] claims a session
//! to restore it.

/// Claims session `KEYS[2]` (its claim key `KEYS[1]`) for instance
/// `ARGV[1]` for `ARGV[2]` ms, and makes that instance its owner, so that
/// records of it from any other instance are refused from then on (see
/// [`RECORD`]). `ARGV[3]…`: instances known dead (their leases are gone).
///
/// Answers 1 when claimed; `{'o', owner}` when another instance owns it
/// and `{'h', holder}` when another holds the claim, neither known dead (the
/// caller reads that instance's lease: alive, the session is there or being
/// restored there; gone, it asks again with the instance among the dead);
/// -1 when records of it were lost; -2 when there is no such session. The
/// leases are read by the caller, not here: in a Redis Cluster they live in
/// other slots than the session's keys, which a script may not touch.
pub(super) const CLAIM: &str = r"
if redis.call('EXISTS', KEYS[2]) == 0 then
  return -2
end
local dead = {}
for i = 3, #ARGV do dead[ARGV[i]] = true end
local owner = redis.call('HGET', KEYS[2], 'owner')
if owner and owner ~= ARGV[1] and not dead[owner] then
  return {'o', owner}
end
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] and not dead[holder] then
  return {'h', holder}
end
if redis.call('HEXISTS', KEYS[2], 'lost') == 1 then
  return -1
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[2], 'owner', ARGV[1])
return 1
";

/// Writes a batch of session records. ARGV: this instance, the keys' time to
/// live (ms), the envelopes kept per session; then records, each a kind and
/// its fields: `S` session (the records that follow are its), `W` next `seq`,
/// inbound `seq`, count, envelopes (appended to the window, trimmed), `O`
/// opened without subject, `U` subject (opened), `T` taken over (adopted
/// from the instance that greeted its client: this one owns it now), `A`
/// call id and inbound `seq` (owed a `TOOL_DONE`, taken at that `seq`), `D`
/// call id (no longer owed), `P` paused channels, `C` the credit owed to the
/// client, `L` and `1` or `0`: records of the session were lost (and it runs
/// on this instance), `E` ended (its keys deleted), `+` / `-` key member (a
/// stream session opened, closed). A session's keys get their expiry once,
/// after its records, as they would after each.
///
/// `KEYS[1]`: the key of the batch's first session. In a Redis Cluster it
/// routes the script to the node of its slot: every session of the batch
/// is then on that node (a script without flags may touch keys of several
/// slots, if its node holds them all), and the batch has no `+` / `-`
/// records (the writer sends those apart).
///
/// Fencing: the records of a session whose `owner` is another instance
/// (which restored it: see [`CLAIM`]) are refused, and the script answers
/// the ids of those sessions. The copy here is stale: it is ended, and what
/// it made never reaches its client.
pub(super) const RECORD: &str = r"
local owner, ttl, keep = ARGV[1], ARGV[2], -tonumber(ARGV[3])
local s, w, c
local es, ew, ec = false, false, false
local fenced, skip = {}, false
local function expire()
  if es then redis.call('PEXPIRE', s, ttl) end
  if ew then redis.call('PEXPIRE', w, ttl) end
  if ec then redis.call('PEXPIRE', c, ttl) end
  es, ew, ec = false, false, false
end
local i, n = 4, #ARGV
while i <= n do
  local kind = ARGV[i]
  local run = not skip
  if kind == 'S' then
    expire()
    s = 'haip:s:{' .. ARGV[i + 1] .. '}'
    w, c = s .. ':w', s .. ':c'
    local held = redis.call('HGET', s, 'owner')
    skip = held and held ~= owner or false
    if skip then fenced[#fenced + 1] = ARGV[i + 1] end
    i = i + 2
  elseif kind == 'W' then
    local first, last = i + 4, i + 3 + tonumber(ARGV[i + 3])
    if run then
      while first <= last do
        local upto = math.min(first + 199, last)
        redis.call('RPUSH', w, unpack(ARGV, first, upto))
        first = upto + 1
      end
      redis.call('LTRIM', w, keep, -1)
      redis.call('HSET', s, 'owner', owner, 'next_seq', ARGV[i + 1], 'last_rx', ARGV[i + 2])
      es, ew, ec = true, true, true
    end
    i = last + 1
  elseif kind == 'A' then
    if run then
      redis.call('SADD', c, ARGV[i + 1])
      local rx = tonumber(redis.call('HGET', s, 'last_rx') or '0')
      if tonumber(ARGV[i + 2]) > rx then
        redis.call('HSET', s, 'last_rx', ARGV[i + 2])
        es = true
      end
      ec = true
    end
    i = i + 3
  elseif kind == 'D' then
    if run then redis.call('SREM', c, ARGV[i + 1]) end
    i = i + 2
  elseif kind == 'T' then
    -- Adopted: handed here by the instance that greeted its client.
    if skip then
      fenced[#fenced] = nil
      skip = false
    end
    redis.call('HSET', s, 'owner', owner)
    es = true
    i = i + 1
  elseif kind == 'O' then
    if run then
      redis.call('HSET', s, 'owner', owner)
      redis.call('HDEL', s, 'subject')
      es = true
    end
    i = i + 1
  elseif kind == 'U' then
    if run then
      redis.call('HSET', s, 'owner', owner, 'subject', ARGV[i + 1])
      es = true
    end
    i = i + 2
  elseif kind == 'P' then
    if run then redis.call('HSET', s, 'paused', ARGV[i + 1]) end
    i = i + 2
  elseif kind == 'C' then
    if run then redis.call('HSET', s, 'owed', ARGV[i + 1]) end
    i = i + 2
  elseif kind == 'L' then
    if run then
      redis.call('HSET', s, 'lost', '1')
      if ARGV[i + 1] == '1' then redis.call('HSET', s, 'owner', owner) end
      es = true
    end
    i = i + 2
  elseif kind == 'E' then
    if run then
      redis.call('DEL', s, w, c)
      es, ew, ec = false, false, false
    end
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
return fenced
";

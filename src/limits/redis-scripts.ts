/**
 * The Lua scripts of the Redis limiter. Each runs atomically on the server, reads the server's clock
 * (TIME), and touches only keys of one account, which all carry the same hash tag and so live in one
 * Redis Cluster slot. The lease sets are declared in KEYS (they route the call in a cluster); window
 * keys embed the window index, which only the server's clock can give, so the script builds them from
 * the prefix in ARGV.
 *
 * Key layout (P = `gantry:rl:{<accountId>}:`, B = bucket key, W = window length in ms, N = window index):
 *   P c:B        zset lease id → expiry (ms); expired members purged on admission
 *   P w:W:N:B    hash r (requests), i (input tokens), o (output tokens) of fixed window N
 * A window hash expires one second after window N+1 ends (it no longer counts then); a lease set one
 * second after its longest lease would expire.
 */

// Numbers go to Redis as integer strings: a Lua number argument could be rendered in exponent form.
const prelude = `
local function int(x) return string.format('%.0f', x) end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
`;

/**
 * KEYS[b]: lease set of bucket b.
 * ARGV: prefix, leaseId, leaseMs, inputTokens, outputTokens, then per bucket:
 *   name, windowMs, concurrency, requests, inputTokens, outputTokens (limits: -1 = unlimited).
 * Reply: admitted (1|0), now, then per bucket: leases, oldest lease expiry (0 unless refused on
 *   concurrency), current requests/input/output, previous requests/input/output, after consumption
 *   when admitted.
 */
export const ADMIT_LUA = `${prelude}
local prefix = ARGV[1]
local leaseId = ARGV[2]
local leaseMs = tonumber(ARGV[3])
local amount = { 1, tonumber(ARGV[4]), tonumber(ARGV[5]) }
local fields = { 'r', 'i', 'o' }
local admitted = 1
local state = {}

for b = 1, #KEYS do
  local base = 5 + (b - 1) * 6
  local s = { base = base, leases = 0, oldest = 0, cur = { 0, 0, 0 }, prev = { 0, 0, 0 }, limits = {} }
  s.concurrency = tonumber(ARGV[base + 3])
  if s.concurrency >= 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[b], '-inf', int(now))
    s.leases = redis.call('ZCARD', KEYS[b])
    if s.leases >= s.concurrency then
      admitted = 0
      local first = redis.call('ZRANGE', KEYS[b], 0, 0, 'WITHSCORES')
      if first[2] then s.oldest = tonumber(first[2]) end
    end
  end
  local windowed = false
  for m = 1, 3 do
    s.limits[m] = tonumber(ARGV[base + 3 + m])
    if s.limits[m] >= 0 then windowed = true end
  end
  if windowed then
    local windowMs = tonumber(ARGV[base + 2])
    local index = math.floor(now / windowMs)
    local elapsed = now - index * windowMs
    local stem = prefix .. 'w:' .. ARGV[base + 2] .. ':'
    s.key = stem .. int(index) .. ':' .. ARGV[base + 1]
    s.expireAt = (index + 2) * windowMs + 1000
    local c = redis.call('HMGET', s.key, 'r', 'i', 'o')
    local p = redis.call('HMGET', stem .. int(index - 1) .. ':' .. ARGV[base + 1], 'r', 'i', 'o')
    for m = 1, 3 do
      s.cur[m] = tonumber(c[m]) or 0
      s.prev[m] = tonumber(p[m]) or 0
      -- Same expression, same order as fits() in window.ts.
      if s.limits[m] >= 0 and s.prev[m] * (windowMs - elapsed) / windowMs + s.cur[m] + amount[m] > s.limits[m] then
        admitted = 0
      end
    end
  end
  state[b] = s
end

local reply = { admitted, now }
for b = 1, #KEYS do
  local s = state[b]
  if admitted == 1 then
    if s.concurrency >= 0 then
      redis.call('ZADD', KEYS[b], int(now + leaseMs), leaseId)
      s.leases = s.leases + 1
      if redis.call('PTTL', KEYS[b]) < leaseMs + 1000 then redis.call('PEXPIRE', KEYS[b], int(leaseMs + 1000)) end
    end
    if s.key then
      for m = 1, 3 do
        if s.limits[m] >= 0 then s.cur[m] = redis.call('HINCRBY', s.key, fields[m], int(amount[m])) end
      end
      redis.call('PEXPIREAT', s.key, int(s.expireAt))
    end
  end
  local at = #reply
  reply[at + 1] = s.leases
  reply[at + 2] = s.oldest
  for m = 1, 3 do
    reply[at + 2 + m] = s.cur[m]
    reply[at + 5 + m] = s.prev[m]
  end
end
return reply
`;

/**
 * KEYS[b]: lease set of bucket b.
 * ARGV: prefix, leaseId, admittedAt, deltaInput, deltaOutput, then per bucket:
 *   name, windowMs, input limited (1|0), output limited (1|0).
 * The token differences go to the window the reservation was counted in while it still counts; once it
 * no longer does, a refund is moot and an overage lands in the current window.
 */
export const RELEASE_LUA = `${prelude}
local prefix = ARGV[1]
local leaseId = ARGV[2]
local admittedAt = tonumber(ARGV[3])
local delta = { tonumber(ARGV[4]), tonumber(ARGV[5]) }
local fields = { 'i', 'o' }
for b = 1, #KEYS do
  redis.call('ZREM', KEYS[b], leaseId)
  local base = 5 + (b - 1) * 4
  local windowMs = tonumber(ARGV[base + 2])
  local current = math.floor(now / windowMs)
  local reserved = math.floor(admittedAt / windowMs)
  local target = reserved
  if reserved < current - 1 then target = current end
  local key = prefix .. 'w:' .. ARGV[base + 2] .. ':' .. int(target) .. ':' .. ARGV[base + 1]
  local touched = false
  for m = 1, 2 do
    local d = delta[m]
    if ARGV[base + 2 + m] == '1' and d ~= 0 and (target == reserved or d > 0) then
      if redis.call('HINCRBY', key, fields[m], int(d)) < 0 then redis.call('HSET', key, fields[m], 0) end
      touched = true
    end
  end
  if touched then redis.call('PEXPIREAT', key, int((target + 2) * windowMs + 1000)) end
end
return 1
`;

/**
 * KEYS: lease sets of the buckets where the lease holds a slot. ARGV: leaseId, leaseMs.
 * Reply: how many still held it. An expired lease is not revived: its slot may have been taken since.
 */
export const EXTEND_LUA = `${prelude}
local leaseMs = tonumber(ARGV[2])
local held = 0
for b = 1, #KEYS do
  local expiry = redis.call('ZSCORE', KEYS[b], ARGV[1])
  if expiry and tonumber(expiry) > now then
    redis.call('ZADD', KEYS[b], 'XX', int(now + leaseMs), ARGV[1])
    if redis.call('PTTL', KEYS[b]) < leaseMs + 1000 then redis.call('PEXPIRE', KEYS[b], int(leaseMs + 1000)) end
    held = held + 1
  end
end
return held
`;

-- One shard's confirmation of the release in flight, its suppressed rows linked to the union
-- of every shard's (release_vote.lua); the last confirmation decides.
--
-- KEYS[1]  {prefix:release}:current             HASH  the release in flight
-- KEYS[2]  {prefix:release}:confirms:<hex label> HASH  shard -> confirmation (JSON)
-- ARGV[1]  the label, ARGV[2] the shard, ARGV[3] its confirmation, ARGV[4] the number of shards
--
-- A confirmation is {"ok": true} (every member's breach stays within the bound with the
-- union's linkages) or {"refused": ...}. When every shard has confirmed, ``current`` gets
-- ``outcome``: "ok", or "refused" with ``refusal`` (the first refusing shard's).
--
-- Returns -1 if ARGV[1] is not in flight or not yet voted, 0 while confirmations are missing,
-- 1 once decided.
if redis.call('HGET', KEYS[1], 'label') ~= ARGV[1] then return -1 end
if redis.call('HEXISTS', KEYS[1], 'union') == 0 then return -1 end
redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[3])
local shards = tonumber(ARGV[4])
if redis.call('HLEN', KEYS[2]) < shards then return 0 end
if redis.call('HEXISTS', KEYS[1], 'outcome') == 1 then return 1 end
for shard = 0, shards - 1 do
  local raw = redis.call('HGET', KEYS[2], tostring(shard))
  if not raw then return 0 end
  if cjson.decode(raw)['refused'] ~= nil then
    redis.call('HSET', KEYS[1], 'outcome', 'refused', 'refusal', raw)
    return 1
  end
end
redis.call('HSET', KEYS[1], 'outcome', 'ok')
return 1

-- One shard's vote on the release in flight; the last vote decides it.
--
-- KEYS[1]  {prefix:release}:current          HASH  the release in flight (release_begin.lua)
-- KEYS[2]  {prefix:release}:votes:<hex label> HASH  shard -> vote (JSON)
-- ARGV[1]  the label, ARGV[2] the shard, ARGV[3] its vote, ARGV[4] the number of shards
--
-- A vote is {"groups": g} (the part is planned: g groups) or {"refused": ...} (the part
-- cannot be made: the release is refused). The first vote of a shard stands (a shard planned
-- again after a crash votes the same: planning is deterministic). When every shard has voted,
-- ``current`` gets ``outcome`` ("ok": every part is planned, ``offsets``: the first group
-- number of each shard's part, shard 0 first; "refused": ``refusal`` is the first refusing
-- shard's vote).
--
-- Returns -1 if ARGV[1] is not in flight, 0 while votes are missing, 1 once decided.
if redis.call('HGET', KEYS[1], 'label') ~= ARGV[1] then return -1 end
redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[3])
local shards = tonumber(ARGV[4])
if redis.call('HLEN', KEYS[2]) < shards then return 0 end
if redis.call('HEXISTS', KEYS[1], 'outcome') == 1 then return 1 end
local offsets = {}
local total = 0
for shard = 0, shards - 1 do
  local raw = redis.call('HGET', KEYS[2], tostring(shard))
  if not raw then return 0 end
  local vote = cjson.decode(raw)
  if vote['refused'] ~= nil then
    redis.call('HSET', KEYS[1], 'outcome', 'refused', 'refusal', raw)
    return 1
  end
  offsets[#offsets + 1] = total
  total = total + tonumber(vote['groups'])
end
redis.call('HSET', KEYS[1], 'outcome', 'ok', 'offsets', cjson.encode(offsets))
return 1

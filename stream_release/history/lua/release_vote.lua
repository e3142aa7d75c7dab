-- One shard's vote on the release in flight; the last vote decides it.
--
-- KEYS[1]  {prefix:release}:current          HASH  the release in flight (release_begin.lua)
-- KEYS[2]  {prefix:release}:votes:<hex label> HASH  shard -> vote (JSON)
-- ARGV[1]  the label, ARGV[2] the shard, ARGV[3] its vote, ARGV[4] the number of shards,
-- ARGV[5]  the round the part was planned in (``current``'s ``round``, 0 when absent),
-- ARGV[6]  the most rounds, ARGV[7] the refusal to record when the last round fails (JSON)
--
-- A vote is {"groups": g, "suppressed": {"size": n, "counts": {value: count}}, "ratio":
-- {value: R}, "base": b, "protected": [value, ...]} (the part is planned: g groups, n rows
-- suppressed, R the ratio its suppressed set holds or a member not withheld for its history
-- plans for each protected value, b what such a member plans for any other protected value,
-- 0 without one; "protected" absent when every value is protected) or {"refused": ...}
-- (the part cannot be made: the release is refused). The first vote of a shard in a round
-- stands (a shard planned again after a crash votes the same: planning is deterministic).
--
-- When every shard has voted, either ``current`` gets ``outcome`` "refused" and ``refusal``
-- (the first refusing shard's vote), or the union of the parts' suppressed rows is checked
-- against the largest ratio any part needs, value by value (an adversary sees the union as one
-- set: n(S,s) * R(s) <= |S|, Theorem 1 of Wong et al., ICDE 2010):
-- * it holds: ``current`` gets ``offsets`` (the first group number of each shard's part,
--   shard 0 first) and ``union`` (JSON); the parts then link their suppressed rows to the
--   union and confirm (release_confirm.lua);
-- * it does not (a value's count times its ratio above the union's size): another round,
--   every part planned again with ``floor`` (each value's largest ratio so far) as the least
--   its suppressed set must hold; after ARGV[6] rounds the release is refused with ARGV[7].
--
-- Returns -1 if ARGV[1] is not in flight, -2 for a vote of another round, 0 while votes are
-- missing, 1 once decided, 2 when another round starts.
if redis.call('HGET', KEYS[1], 'label') ~= ARGV[1] then return -1 end
local round = tonumber(redis.call('HGET', KEYS[1], 'round') or '0')
if round ~= tonumber(ARGV[5]) then return -2 end
redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[3])
local shards = tonumber(ARGV[4])
if redis.call('HLEN', KEYS[2]) < shards then return 0 end
if redis.call('HEXISTS', KEYS[1], 'outcome') == 1 or redis.call('HEXISTS', KEYS[1], 'union') == 1 then
  return 1
end
local offsets = {}
local total = 0
local size = 0
local counts = {}
local names = {}
local floor = cjson.decode(redis.call('HGET', KEYS[1], 'floor') or '{}')
local needed = {}
local base = 0
local protected = nil
for value, ratio in pairs(floor) do needed[value] = tonumber(ratio) end
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
  size = size + tonumber(vote['suppressed']['size'])
  for value, count in pairs(vote['suppressed']['counts']) do
    if counts[value] == nil then
      counts[value] = 0
      names[#names + 1] = value
    end
    counts[value] = counts[value] + tonumber(count)
  end
  for value, ratio in pairs(vote['ratio']) do
    if needed[value] == nil or tonumber(ratio) > needed[value] then needed[value] = tonumber(ratio) end
  end
  if tonumber(vote['base'] or 0) > base then base = tonumber(vote['base']) end
  if vote['protected'] ~= nil then
    protected = {}
    for _, value in ipairs(vote['protected']) do protected[value] = true end
  end
end
local holds = true
for value, count in pairs(counts) do
  -- a member not withheld plans at least the base for a protected value its part's set lacks
  if protected == nil or protected[value] then
    if needed[value] == nil or needed[value] < base then needed[value] = base end
  end
  if needed[value] ~= nil and count * needed[value] > size then holds = false end
end
if not holds then
  if round + 1 >= tonumber(ARGV[6]) then
    redis.call('HSET', KEYS[1], 'outcome', 'refused', 'refusal', ARGV[7])
    return 1
  end
  redis.call('HSET', KEYS[1], 'round', round + 1, 'floor', cjson.encode(needed))
  redis.call('DEL', KEYS[2])
  return 2
end
-- the union as a list of [value, count] sorted by value: one encoding for every caller
table.sort(names)
local held = {}
for _, value in ipairs(names) do held[#held + 1] = {value, counts[value]} end
local union = cjson.encode({size = size, counts = held})
redis.call('HSET', KEYS[1], 'offsets', cjson.encode(offsets), 'union', union)
return 1

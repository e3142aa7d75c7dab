-- Make a release the one in flight on the shards (ShardedCut), unless one already is.
--
-- KEYS[1]  {prefix:release}:current  HASH    label, sequence (and, once every shard voted,
--                                            outcome, offsets, refusal) of the release in flight
-- KEYS[2]  {prefix:release}:labels   HASH    label -> sequence (0: refused): decided releases
-- KEYS[3]  {prefix:release}:seq      STRING  the last release sequence
-- ARGV[1]  the label of a release whose every part is complete
--
-- Returns the label in flight after the call (ARGV[1], or the one already in flight), or
-- false when ARGV[1] is already decided and nothing is in flight.
local current = redis.call('HGET', KEYS[1], 'label')
if current then return current end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return false end
local sequence = tonumber(redis.call('GET', KEYS[3]) or '0') + 1
redis.call('HSET', KEYS[1], 'label', ARGV[1], 'sequence', sequence)
return ARGV[1]

-- Mark one shard's part of the release in flight done (committed, or closed unpublished).
--
-- KEYS[1]  {prefix:release}:current            HASH  the release in flight
-- KEYS[2]  {prefix:release}:parts:<hex label>  SET   shards whose part is done
-- ARGV[1]  the label, ARGV[2] the shard
--
-- Only while ARGV[1] is in flight: a part marked after the release was finished (by a worker
-- that committed it before a crash, or twice) leaves no key behind. Returns the parts done,
-- or -1 when ARGV[1] is not in flight.
if redis.call('HGET', KEYS[1], 'label') ~= ARGV[1] then return -1 end
redis.call('SADD', KEYS[2], ARGV[2])
return redis.call('SCARD', KEYS[2])

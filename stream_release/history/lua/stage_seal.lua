-- Record the seal of one release, idempotently.
--
-- KEYS[1]  {prefix}:labels                  HASH    label -> committed sequence
-- KEYS[2]  {prefix}:stage:<hex label>:seal  STRING  sealed record count
-- KEYS[3]  {prefix}:stage:open              SET     labels being staged
-- ARGV[1]  the release label
-- ARGV[2]  the sealed number of distinct ids (decimal)
--
-- Returns:
--   0  sealed (new)
--   1  the same seal was already recorded (a re-delivery): nothing changes
--   2  a seal with another count is recorded: this one conflicts and is refused
--   3  the release is already cut: the seal is a no-op
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 3 end
local current = redis.call('GET', KEYS[2])
if not current then
  redis.call('SET', KEYS[2], ARGV[2])
  redis.call('SADD', KEYS[3], ARGV[1])
  return 0
end
if current == ARGV[2] then return 1 end
return 2

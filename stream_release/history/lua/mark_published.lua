-- Record that a release was sent to Kafka; the published sequence never moves backwards.
--
-- KEYS[1]  {prefix}:published  STRING  last sequence sent
-- ARGV[1]  the sequence just sent (decimal)
--
-- Returns the published sequence after the call.
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local sent = tonumber(ARGV[1])
if sent > current then
  redis.call('SET', KEYS[1], ARGV[1])
  return sent
end
return current

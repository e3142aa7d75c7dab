-- Raise a sequence that never moves backwards: the last release sent to Kafka
-- ({prefix}:published), or the first release whose record is kept ({prefix}:records:from).
--
-- KEYS[1]  {prefix}:published or {prefix}:records:from  STRING  the sequence
-- ARGV[1]  the new sequence (decimal)
--
-- Returns the sequence after the call: the larger of the two.
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local sent = tonumber(ARGV[1])
if sent > current then
  redis.call('SET', KEYS[1], ARGV[1])
  return sent
end
return current

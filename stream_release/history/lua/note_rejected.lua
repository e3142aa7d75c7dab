-- Count rejected records of an open release (RedisStaging.note_rejected).
-- KEYS[1] the set of open labels, KEYS[2] the release's set of rejected coordinates.
-- ARGV[1] the label, ARGV[2..] "topic:partition:offset" of each rejected record.
-- Adds them only while the label is open (rows staged or a seal, not cut), so a label never
-- staged or already cut keeps no count; returns how many were new.
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then
  return 0
end
local added = 0
for i = 2, #ARGV do
  added = added + redis.call('SADD', KEYS[2], ARGV[i])
end
return added

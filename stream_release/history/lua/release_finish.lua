-- Close the release in flight once every shard has committed (or refused) its part.
--
-- KEYS[1]  {prefix:release}:current            HASH    the release in flight
-- KEYS[2]  {prefix:release}:parts:<hex label>  SET     shards whose part is done
-- KEYS[3]  {prefix:release}:labels             HASH    label -> sequence (0: refused)
-- KEYS[4]  {prefix:release}:seq                STRING  the last release sequence
-- KEYS[5]  {prefix:release}:release:<seq>      STRING  the release record (manifest)
-- KEYS[6]  {prefix:release}:stage:open         SET     sealed labels not decided
-- KEYS[7]  {prefix:release}:votes:<hex label>  HASH    the votes
-- KEYS[8]  {prefix:release}:stage:<hex>:seal   STRING  the seal
-- KEYS[9]  {prefix:release}:status:outbox      LIST    status messages to send
-- KEYS[10] {prefix:release}:confirms:<hex label> HASH   the confirmations
-- KEYS[11] {prefix:release}:breach:<hex label>  HASH    the parts' breach probabilities
-- ARGV[1]  the label, ARGV[2] the number of shards, ARGV[3] the record ("ok") or the status
--          message ("refused")
--
-- Returns 1 when closed now (by this call), 0 when ARGV[1] is not in flight (closed already),
-- -1 while a part is not done or the release is not decided.
if redis.call('HGET', KEYS[1], 'label') ~= ARGV[1] then return 0 end
local outcome = redis.call('HGET', KEYS[1], 'outcome')
if not outcome or redis.call('SCARD', KEYS[2]) < tonumber(ARGV[2]) then return -1 end
if outcome == 'ok' then
  local sequence = redis.call('HGET', KEYS[1], 'sequence')
  redis.call('SET', KEYS[5], ARGV[3])
  redis.call('SET', KEYS[4], sequence)
  redis.call('HSET', KEYS[3], ARGV[1], sequence)
else
  redis.call('HSET', KEYS[3], ARGV[1], 0)
  redis.call('RPUSH', KEYS[9], ARGV[3])
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[7], KEYS[8], KEYS[10], KEYS[11])
redis.call('SREM', KEYS[6], ARGV[1])
return 1

-- Stage a batch of snapshot rows of one release, idempotently.
--
-- KEYS[1]  {prefix}:labels                  HASH  label -> committed sequence
-- KEYS[2]  {prefix}:stage:<hex label>:rows  HASH  pseudonym -> row
-- KEYS[3]  {prefix}:stage:open              SET   labels being staged
-- KEYS[4]  {prefix}:stage:<hex label>:seal  STRING  sealed record count, if sealed
-- ARGV[1]  the release label
-- ARGV[2]  the most ids a release may hold (service.max_release_rows; 0: no limit)
-- ARGV[2k+1], ARGV[2k+2]  (k = 1..n) a pseudonym and its row
--
-- Returns one code per row, then one more element: 1 if the release is now complete (sealed,
-- and holding exactly the sealed number of ids), else 0. Codes:
--   0  staged (new)
--   1  the same row was already staged (a re-delivery): nothing changes
--   2  a different row is staged for this pseudonym: a duplicate id in the snapshot
--   3  the release is already cut (its label is committed): the row is late
--   4  the release already holds as many ids as its seal announced: a new id is refused, so
--      the staged rows of a complete release never change before it is cut
--   5  the release already holds ARGV[2] ids: a new id is refused (the release is too large)
local out = {}
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  for i = 3, #ARGV, 2 do out[#out + 1] = 3 end
  out[#out + 1] = 0
  return out
end
local sealed = tonumber(redis.call('GET', KEYS[4]) or '-1')
local staged = redis.call('HLEN', KEYS[2])
local limit = tonumber(ARGV[2])
if limit <= 0 then limit = math.huge end
local added = false
local open = (sealed < 0 or staged < sealed) and staged < limit
for i = 3, #ARGV, 2 do
  -- while the release can take new ids, HSETNX stages a new one in a single call
  if open and redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1]) == 1 then
    staged = staged + 1
    open = (sealed < 0 or staged < sealed) and staged < limit
    out[#out + 1] = 0
    added = true
  else
    local current = redis.call('HGET', KEYS[2], ARGV[i])
    if not current then
      out[#out + 1] = (sealed >= 0 and staged >= sealed) and 4 or 5
    elseif current == ARGV[i + 1] then
      out[#out + 1] = 1
    else
      out[#out + 1] = 2
    end
  end
end
if added then redis.call('SADD', KEYS[3], ARGV[1]) end
out[#out + 1] = (sealed >= 0 and staged == sealed) and 1 or 0
return out

-- KEYS[1] a shard stream, KEYS[2] its seal marker; ARGV: the entry's fields and values, in
-- pairs (docs/protocol.md M5: `key` unless keyless, `value`, then one `h:<name>` per header).
-- Returns the new entry id, or an error reply SEALED (the version is being drained) or
-- MISSING (retired, or not this coordinator's Redis: XADD would recreate it) (R5).
if redis.call('EXISTS', KEYS[2]) == 1 then
  return redis.error_reply('SEALED ' .. KEYS[1])
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('MISSING ' .. KEYS[1])
end
return redis.call('XADD', KEYS[1], '*', unpack(ARGV))

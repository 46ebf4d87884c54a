-- GET /api/v1/timers/{queue}[/{key}]: the pending timer of key $2, or a page of $4 after key
-- $3, with times in Queen's shape.
SELECT t.timer_key, t.partition, t.payload::text AS payload, t.transaction_id, t.message_id,
       t.attempts, t.last_error,
       to_char(t.deliver_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS deliver_at,
       to_char(t.scheduled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS scheduled_at
  FROM queen_timers($1::text, $2::text, $3::text, $4::int) AS t

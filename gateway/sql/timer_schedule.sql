-- POST /api/v1/timers and a transaction's timers part: queen_schedule, due the server's now +
-- $4 milliseconds (Queen's wire carries only the relative delay: one clock decides), in
-- Queen's shape.
SELECT t.status, t.transaction_id, t.message_id,
       to_char(t.deliver_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS deliver_at
  FROM queen_schedule($1::text, $2::text, $3::jsonb,
                      pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => ($4::bigint)::float8 / 1000),
                      COALESCE($5::text, 'Default'), $6::text) AS t

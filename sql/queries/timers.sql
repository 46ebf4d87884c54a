-- Queries of timers (src/timers.rs). Sections are prepared once per backend.

-- name: timer_upsert
-- Schedule (or reschedule) the timer of key $3 in queue $1 ($2 its name) for role $10: a new
-- row, or the row of that key rewritten whole (a rescheduled timer is a new timer under an
-- old key: its attempts start again, and it is the rescheduling role's). The message id $7 is
-- the one the message will have; the transaction id defaults to it. `inserted`: no row of that
-- key was pending.
INSERT INTO queen.timers AS t (queue_id, queue, timer_key, partition, payload, transaction_id, message_id,
                               trace_id, deliver_at, scheduled_at, attempts, last_error, scheduled_by)
VALUES ($1, $2, $3, $4, $5, COALESCE($6, $7::text), $7, $8, $9, clock_timestamp(), 0, NULL, $10::oid::regrole)
    ON CONFLICT (queue_id, timer_key) DO UPDATE
   SET queue = EXCLUDED.queue, partition = EXCLUDED.partition, payload = EXCLUDED.payload,
       transaction_id = EXCLUDED.transaction_id, message_id = EXCLUDED.message_id,
       trace_id = EXCLUDED.trace_id, deliver_at = EXCLUDED.deliver_at,
       scheduled_at = EXCLUDED.scheduled_at, attempts = 0, last_error = NULL,
       scheduled_by = EXCLUDED.scheduled_by
RETURNING (t.xmax::text = '0') AS inserted, t.transaction_id, t.deliver_at;

-- name: timer_cancel
-- The pending timer of key $2 in queue $1, removed; its transaction id, or no row.
DELETE FROM queen.timers WHERE queue_id = $1 AND timer_key = $2 RETURNING transaction_id;

-- name: timer_get
-- The pending timer of key $2 in queue $1.
SELECT queue, timer_key, partition, payload, transaction_id, message_id, trace_id, deliver_at,
       scheduled_at, attempts, last_error
  FROM queen.timers WHERE queue_id = $1 AND timer_key = $2;

-- name: timer_page
-- Pending timers of queue $1 after key $2 ('' for the first page: keys are not empty), in key
-- order, at most $3: a range of the primary key.
SELECT queue, timer_key, partition, payload, transaction_id, message_id, trace_id, deliver_at,
       scheduled_at, attempts, last_error
  FROM queen.timers WHERE queue_id = $1 AND timer_key > $2
 ORDER BY timer_key
 LIMIT $3;

-- name: timers_due_queues
-- The queues of the first $2 timers due at $1, earliest first, leaving out the queues $3,
-- with the roles that scheduled them (0: none kept), read without locking anything: a firing
-- takes each queue's shared lock (locks.rs) before it takes a timer of it, leaves out the
-- queues whose lock it could not take, and checks that each role may still push there.
SELECT DISTINCT queue_id, queue, COALESCE(scheduled_by::oid, 0::oid) AS scheduled_by FROM (
    SELECT queue_id, queue, scheduled_by FROM queen.timers
     WHERE deliver_at <= $1 AND NOT (queue_id = ANY ($3::uuid[]))
     ORDER BY deliver_at
     LIMIT $2) AS d;

-- name: timers_refused
-- The timers due at $1 of queue $2[i] scheduled by role $3[i] (a role that may no longer push
-- there), removed without their message; skipping rows another transaction holds (as
-- timers_take). Each as "queue/key (role)", for the server's log.
WITH gone AS (
    DELETE FROM queen.timers t
     WHERE t.ctid IN (
           SELECT x.ctid FROM queen.timers x
             JOIN unnest($2::uuid[], $3::bigint[]) AS r(q, o) ON r.q = x.queue_id AND r.o = x.scheduled_by::oid::bigint
            WHERE x.deliver_at <= $1
              FOR UPDATE OF x SKIP LOCKED)
    RETURNING t.queue || '/' || t.timer_key || ' (' || t.scheduled_by::text || ')' AS what
)
SELECT what FROM gone;

-- name: timers_take
-- Up to $2 timers of the queues $3 due at $1, earliest first, removed: the rows a transaction
-- that is changing them (a reschedule, a cancel, another firing) holds are left for later. As
-- one batch of queen_push items (Queen's wire shape), with their message ids, keys and
-- attempts in the same order.
WITH due AS (
    SELECT queue_id, timer_key FROM queen.timers
     WHERE deliver_at <= $1 AND queue_id = ANY ($3::uuid[])
     ORDER BY deliver_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), taken AS (
    DELETE FROM queen.timers t USING due
     WHERE t.queue_id = due.queue_id AND t.timer_key = due.timer_key
    RETURNING t.*
)
SELECT count(*) AS taken,
       COALESCE(jsonb_agg(jsonb_build_object('queue', queue, 'partition', partition, 'payload', payload,
                                             'transactionId', transaction_id, 'traceId', trace_id)
                          ORDER BY deliver_at, queue_id, timer_key), '[]') AS items,
       COALESCE(array_agg(message_id ORDER BY deliver_at, queue_id, timer_key), '{}') AS message_ids,
       COALESCE(array_agg(queue_id ORDER BY deliver_at, queue_id, timer_key), '{}') AS queue_ids,
       COALESCE(array_agg(timer_key ORDER BY deliver_at, queue_id, timer_key), '{}') AS timer_keys,
       COALESCE(array_agg(attempts ORDER BY deliver_at, queue_id, timer_key), '{}') AS attempts
  FROM taken;

-- name: timer_take_one
-- The timer of key $2 in queue $1 if it still is the one with message id $3, removed, as a
-- batch of one queen_push item.
WITH taken AS (
    DELETE FROM queen.timers WHERE queue_id = $1 AND timer_key = $2 AND message_id = $3
    RETURNING *
)
SELECT jsonb_build_array(jsonb_build_object('queue', queue, 'partition', partition, 'payload', payload,
                                            'transactionId', transaction_id, 'traceId', trace_id)) AS items
  FROM taken;

-- name: timer_failed
-- A timer whose message could not be pushed ($4 why): tried again at $5 (a backoff), its
-- attempts counted. Only if it still is the one with message id $3.
UPDATE queen.timers
   SET attempts = attempts + 1, last_error = $4, deliver_at = $5
 WHERE queue_id = $1 AND timer_key = $2 AND message_id = $3
RETURNING attempts;

-- name: timers_next
-- When the earliest pending timer is due (NULL: none).
SELECT min(deliver_at) AS next_due FROM queen.timers;

-- name: timers_of_queue_delete
-- A deleted queue's pending timers.
DELETE FROM queen.timers WHERE queue_id = $1;

-- Queries of a group's subscription to a queue (src/subscription.rs): reading and creating
-- it, and where a 'from' subscription starts. Sections are prepared once per backend.
-- Snapshots: pg_current_snapshot() returns the snapshot of the statement that calls it, so a
-- query that reads messages and the snapshot together sees exactly what the snapshot says.

-- name: subscription_get
-- The group's effective subscription to the queue (queen.effective_subscriptions: the oldest
-- row's mode; for 'new', the earliest point of every committed first pop) and the queue's
-- stored options; no row when the group has none yet (then `subscribe` creates it).
SELECT sub.mode, sub.from_ts, sub.start_xmax, sub.start_xip, sub.sub_key,
       o.lease_time, o.retry_limit, o.retry_delay, o.dead_letter_queue, o.delayed_processing,
       o.window_buffer, o.max_size, o.retention_seconds, o.completed_retention_seconds,
       o.max_wait_time_seconds
  FROM queen.effective_subscriptions sub
  LEFT JOIN LATERAL (
        SELECT * FROM queen.queues q WHERE q.queue_id = $1
         ORDER BY q.options_updated_at DESC NULLS LAST, q.created_at LIMIT 1) AS o ON true
 WHERE sub.queue_id = $1 AND sub.consumer_group = $2 AND sub.shard = $3;

-- name: citus_subscription_get
-- subscription_get on Citus, in a worker's call: queen.effective_subscriptions (schema.sql)
-- for one (queue $1, group $2, shard $3), with the shard named in every subquery (Citus
-- routes a statement to one shard only when each of its reads names the key; it does not
-- carry the view's outer filter into the lateral subqueries). The options are read on their
-- own (configure.sql load_options): Citus routes no join of a shard with a reference table.
-- The same rules as the view; tests/integration/tests/citus.rs compares the two.
SELECT o.mode, c.from_ts, c.start_xmax, x.xip AS start_xip,
       o.mode || ':' || COALESCE(extract(epoch FROM c.from_ts)::text, '') || ':'
         || COALESCE(c.start_xmax::text, '') || ':' || array_to_string(x.xip, ',') || ':'
         || extract(epoch FROM o.since)::text || CASE WHEN o.seek THEN ':seek' ELSE '' END AS sub_key
  FROM (SELECT mode, seek, created_at AS since FROM queen.subscriptions
         WHERE queue_id = $1 AND consumer_group = $2 AND shard = $3
         ORDER BY seek DESC, CASE WHEN seek THEN created_at END DESC NULLS LAST, created_at
         LIMIT 1) AS o
  CROSS JOIN LATERAL (
        SELECT min(s.start_xmax) FILTER (WHERE s.mode = 'new') AS start_xmax,
               min(s.from_ts) FILTER (WHERE s.mode = 'from') AS from_ts
          FROM queen.subscriptions s
         WHERE s.queue_id = $1 AND s.consumer_group = $2 AND s.shard = $3 AND s.mode = o.mode
           AND s.seek = o.seek AND (NOT o.seek OR s.created_at = o.since)) AS c
  CROSS JOIN LATERAL (
        SELECT COALESCE(array_agg(DISTINCT u.x ORDER BY u.x), '{}'::bigint[]) AS xip
          FROM queen.subscriptions s CROSS JOIN LATERAL unnest(s.start_xip) AS u(x)
         WHERE o.mode = 'new' AND s.queue_id = $1 AND s.consumer_group = $2 AND s.shard = $3
           AND s.mode = 'new' AND s.seek = o.seek AND (NOT o.seek OR s.created_at = o.since)
           AND u.x < c.start_xmax) AS x;

-- name: subscribe
-- Subscribe the group to the queue (if the queue exists and the group has no subscription this
-- statement can see), with this statement's snapshot as the point of mode 'new': its xmax,
-- and its running transactions with the caller's own among them (semantics §3.1: the caller's own
-- pushes are new too). No unique index (schema.sql, rule 1): the first pops of a group never
-- wait on each other; effective_subscriptions merges their rows.
-- $1 queue id, $2 group, $3 mode, $4 from_ts, $5 shard
INSERT INTO queen.subscriptions (queue_id, consumer_group, mode, from_ts, start_xmax, start_xip, shard)
SELECT $1, $2, $3, $4, snap.xmax, snap.xip, $5
  FROM ({{stored_snapshot}}) AS snap
 WHERE NOT EXISTS (SELECT 1 FROM queen.subscriptions WHERE queue_id = $1 AND consumer_group = $2 AND shard = $5)
   AND EXISTS (SELECT 1 FROM queen.queues WHERE queue_id = $1);

-- The same on Citus, in a worker's call, a statement for each table: whether the queue exists
-- (a reference table), whether the group has a row in the shard, this statement's snapshot,
-- and the row.

-- name: citus_queue_exists
SELECT EXISTS (SELECT 1 FROM queen.queues WHERE queue_id = $1) AS exists;

-- name: citus_subscribed
SELECT EXISTS (SELECT 1 FROM queen.subscriptions WHERE queue_id = $1 AND consumer_group = $2 AND shard = $3) AS subscribed;

-- name: citus_subscription_point
SELECT xmax, xip FROM ({{stored_snapshot}}) AS snap;

-- name: citus_subscribe
INSERT INTO queen.subscriptions (queue_id, consumer_group, mode, from_ts, start_xmax, start_xip, shard)
VALUES ($1, $2, $3, $4, $5, $6, $7);

-- name: queue_from_position
-- Where a 'from' subscription starts reading the queue log (fragments.sql, from_position).
{{from_position key=queue_id}};

-- name: partition_from_position
-- The same for one partition: where a 'from' subscriber's cursor starts.
{{from_position key=partition_id}};

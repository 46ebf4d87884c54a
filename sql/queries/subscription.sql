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
 WHERE sub.queue_id = $1 AND sub.consumer_group = $2;

-- name: subscribe
-- Subscribe the group to the queue (if the queue exists and the group has no subscription this
-- statement can see), with this statement's snapshot as the point of mode 'new': its xmax,
-- and its running transactions with the caller's own among them (SPEC §3.1: the caller's own
-- pushes are new too). No unique index (schema.sql, rule 1): the first pops of a group never
-- wait on each other; effective_subscriptions merges their rows.
-- $1 queue id, $2 group, $3 mode, $4 from_ts
INSERT INTO queen.subscriptions (queue_id, consumer_group, mode, from_ts, start_xmax, start_xip)
SELECT $1, $2, $3, $4, snap.xmax, snap.xip
  FROM (SELECT pg_snapshot_xmax(z.s)::text::bigint + z.o AS xmax,
               ARRAY(SELECT x::text::bigint + z.o FROM pg_snapshot_xip(z.s) AS x)
                 || ARRAY(SELECT z.own WHERE z.own IS NOT NULL) AS xip
          FROM (SELECT pg_current_snapshot() AS s,
                       queen.own_txid() AS own, queen.xid_offset() AS o) AS z) AS snap
 WHERE NOT EXISTS (SELECT 1 FROM queen.subscriptions WHERE queue_id = $1 AND consumer_group = $2)
   AND EXISTS (SELECT 1 FROM queen.queues WHERE queue_id = $1);

-- name: queue_from_position
-- Where a 'from' subscription starts reading the queue log: just before the first message
-- created at or after $2, or after the last one; with the transactions running now below it.
-- The caller's own messages are not stored yet as far as positions go (SPEC §3.1), and its
-- transaction is among the running ones kept below the position.
WITH snap AS MATERIALIZED (
    SELECT ARRAY(SELECT x::text::bigint + z.o FROM pg_snapshot_xip(z.s) AS x)
             || ARRAY(SELECT z.own WHERE z.own IS NOT NULL) AS xip,
           z.own
      FROM (SELECT pg_current_snapshot() AS s, queen.own_txid() AS own, queen.xid_offset() AS o) AS z
),
f AS (SELECT m.txid, m.seq - 1 AS seq FROM queen.messages m, snap
       WHERE m.queue_id = $1 AND m.created_at >= $2 AND m.txid IS DISTINCT FROM snap.own
       ORDER BY m.txid, m.seq LIMIT 1),
l AS (SELECT m.txid, m.seq FROM queen.messages m, snap
       WHERE m.queue_id = $1 AND m.txid IS DISTINCT FROM snap.own
       ORDER BY m.txid DESC, m.seq DESC LIMIT 1),
pos AS (SELECT * FROM f
        UNION ALL SELECT * FROM l WHERE NOT EXISTS (SELECT 1 FROM f)
        UNION ALL SELECT 0::bigint, 0::bigint WHERE NOT EXISTS (SELECT 1 FROM f) AND NOT EXISTS (SELECT 1 FROM l))
SELECT pos.txid, pos.seq, ARRAY(SELECT x FROM unnest(snap.xip) AS x WHERE x < pos.txid ORDER BY x) AS xip
  FROM pos, snap;

-- name: partition_from_position
-- The same for one partition: where a 'from' subscriber's cursor starts.
-- The caller's own messages are not stored yet as far as positions go (SPEC §3.1), and its
-- transaction is among the running ones kept below the position.
WITH snap AS MATERIALIZED (
    SELECT ARRAY(SELECT x::text::bigint + z.o FROM pg_snapshot_xip(z.s) AS x)
             || ARRAY(SELECT z.own WHERE z.own IS NOT NULL) AS xip,
           z.own
      FROM (SELECT pg_current_snapshot() AS s, queen.own_txid() AS own, queen.xid_offset() AS o) AS z
),
f AS (SELECT m.txid, m.seq - 1 AS seq FROM queen.messages m, snap
       WHERE m.partition_id = $1 AND m.created_at >= $2 AND m.txid IS DISTINCT FROM snap.own
       ORDER BY m.txid, m.seq LIMIT 1),
l AS (SELECT m.txid, m.seq FROM queen.messages m, snap
       WHERE m.partition_id = $1 AND m.txid IS DISTINCT FROM snap.own
       ORDER BY m.txid DESC, m.seq DESC LIMIT 1),
pos AS (SELECT * FROM f
        UNION ALL SELECT * FROM l WHERE NOT EXISTS (SELECT 1 FROM f)
        UNION ALL SELECT 0::bigint, 0::bigint WHERE NOT EXISTS (SELECT 1 FROM f) AND NOT EXISTS (SELECT 1 FROM l))
SELECT pos.txid, pos.seq, ARRAY(SELECT x FROM unnest(snap.xip) AS x WHERE x < pos.txid ORDER BY x) AS xip
  FROM pos, snap;

-- Pieces that several of queen's queries share, written once (issue 25, item 5). A query names
-- one as {{name}}, or {{name key=value ...}} for a piece that says {key}; src/spi.rs expands it
-- where the query is prepared, so a kept plan is the plan of the text written out (the plans
-- test reads the expanded text too). Not queries of their own.

-- name: stored_snapshot
-- The calling statement's snapshot in stored ids (this cluster's xids moved by
-- queen.xid_offset(): src/cluster.rs), its own transaction counted as running — its pushes are
-- not stored yet (semantics §3.1): xmin (the own id if lower), xmax, xip (the running ones as
-- the snapshot lists them, then the own one), own (NULL without an xid).
-- pg_current_snapshot() returns the snapshot of the statement that calls it, so a query that
-- reads rows and this together sees exactly what the snapshot says.
SELECT least(pg_snapshot_xmin(z.s)::text::bigint + z.o, z.own) AS xmin,
       pg_snapshot_xmax(z.s)::text::bigint + z.o AS xmax,
       ARRAY(SELECT x::text::bigint + z.o FROM pg_snapshot_xip(z.s) AS x)
         || ARRAY(SELECT z.own WHERE z.own IS NOT NULL) AS xip,
       z.own
  FROM (SELECT pg_current_snapshot() AS s, queen.own_txid() AS own, queen.xid_offset() AS o) AS z

-- name: from_position
-- Where a 'from' subscription starts reading the log of a queue or a partition (messages with
-- {key} = $1): just before the first message created at or after $2, or after the last one;
-- with the transactions running now below it. The caller's own messages are not stored yet as
-- far as positions go (semantics §3.1), and its transaction is among the running ones kept
-- below the position. $3 shard.
WITH snap AS MATERIALIZED ({{stored_snapshot}}),
f AS (SELECT m.txid, m.seq - 1 AS seq FROM queen.messages m, snap
       WHERE m.{key} = $1 AND m.shard = $3 AND m.created_at >= $2 AND m.txid IS DISTINCT FROM snap.own
       ORDER BY m.txid, m.seq LIMIT 1),
l AS (SELECT m.txid, m.seq FROM queen.messages m, snap
       WHERE m.{key} = $1 AND m.shard = $3 AND m.txid IS DISTINCT FROM snap.own
       ORDER BY m.txid DESC, m.seq DESC LIMIT 1),
pos AS (SELECT * FROM f
        UNION ALL SELECT * FROM l WHERE NOT EXISTS (SELECT 1 FROM f)
        UNION ALL SELECT 0::bigint, 0::bigint WHERE NOT EXISTS (SELECT 1 FROM f) AND NOT EXISTS (SELECT 1 FROM l))
SELECT pos.txid, pos.seq, ARRAY(SELECT x FROM unnest(snap.xip) AS x WHERE x < pos.txid ORDER BY x) AS xip
  FROM pos, snap

-- name: deleted_and_counted
-- The tail of the retention deletes (maintain.sql): of the rows `gone` returned, how many, and
-- how many of them queue $1's count had counted (at or before its point, not of a transaction
-- it kept pending). $4 shard.
c AS MATERIALIZED (
    SELECT upto_txid, upto_seq, pending_txid FROM queen.queue_counts WHERE queue_id = $1 AND shard = $4
)
SELECT count(*) AS deleted,
       count(*) FILTER (WHERE EXISTS (SELECT 1 FROM c WHERE (gone.txid, gone.seq) <= (c.upto_txid, c.upto_seq)
                                                        AND NOT gone.txid = ANY (c.pending_txid)))
         AS counted
  FROM gone

-- name: hints_of
-- The hints of partition {p} for group {g} (table alias {r}), through ready_partition and no
-- other index: the partition and the group bound its scan, so a probe reads that pair's hints
-- alone, not every group's hints of the partition (with 9 groups' hints, discovery's scan of
-- 3 200 log entries took 5.4 ms when a probe read them all, 3.6 with the group in the
-- bounds). Written as row comparisons, which only an index that starts (partition_id,
-- consumer_group) can serve: with the plain `consumer_group = {g}`, the dense ready_next
-- served it too, without its first column, and when hint churn had grown ready_partition the
-- planner took it, reading every hint of the group for each partition (72 ms a discovery scan
-- over 1 000 partitions in the bench's drain; plans.rs).
{r}.partition_id = {p}
AND ({r}.partition_id, {r}.consumer_group) >= ({p}, {g}) AND ({r}.partition_id, {r}.consumer_group) <= ({p}, {g})

-- name: cursor_columns
-- A cursor row's columns (table alias {c}) as state::parse reads them, its version included.
{c}.done_txid, {c}.done_seq, {c}.pending_txid, {c}.pending_seq, {c}.ahead_txid, {c}.ahead_seq,
{c}.fail_txid, {c}.fail_seq, {c}.failures, {c}.retry_at, {c}.lease_id, {c}.lease_expires_at,
{c}.lease_keys, {c}.lease_xip, {c}.xmin::text AS version

-- name: lease_rows
-- Cursor rows (alias c) as the statements that lock a lease's rows read them (ack.sql
-- ack_lease_rows, ack_lease_lock_rows): partition, group, queue, the cursor columns, the
-- queue's stored options (on one server) and the clock; the statement adds its WHERE.
SELECT c.partition_id, c.consumer_group, c.queue_id, {{cursor_columns c=c}},
       o.lease_time, o.retry_limit, o.retry_delay, o.dead_letter_queue, o.delayed_processing, -- [one server]
       o.window_buffer, o.max_size, o.retention_seconds, o.completed_retention_seconds,       -- [one server]
       o.max_wait_time_seconds,                                                               -- [one server]
       clock_timestamp() AS now
  FROM queen.cursors c
  LEFT JOIN LATERAL (                                                      -- [one server]
        SELECT * FROM queen.queues q WHERE q.queue_id = c.queue_id         -- [one server]
         ORDER BY q.options_updated_at DESC NULLS LAST, q.created_at LIMIT 1) o ON true -- [one server]

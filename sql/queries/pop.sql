-- Queries of queen_pop (src/pop.rs, src/discovery.rs). Sections are prepared once per backend.
-- Snapshots: pg_current_snapshot() returns the snapshot of the statement that calls it, so a
-- query that reads messages and the snapshot together sees exactly what the snapshot says.

-- name: subscribe
-- The group's subscription to the queue: the oldest row, or a new one taken now (with this
-- statement's snapshot, for mode 'new') if the queue exists and the group has none. No
-- unique index (schema.sql, rule 1): the first pops of a group never wait on each other.
-- $1 queue id, $2 group, $3 mode, $4 from_ts
WITH existing AS (
    SELECT mode, from_ts, start_xmax, start_xip FROM queen.subscriptions
     WHERE queue_id = $1 AND consumer_group = $2
     ORDER BY created_at LIMIT 1
), snap AS (
    SELECT pg_current_snapshot() AS s
), created AS (
    INSERT INTO queen.subscriptions (queue_id, consumer_group, mode, from_ts, start_xmax, start_xip)
    SELECT $1, $2, $3, $4, pg_snapshot_xmax(s)::text::bigint,
           ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(s) AS x)
      FROM snap
     WHERE NOT EXISTS (SELECT 1 FROM existing)
       AND EXISTS (SELECT 1 FROM queen.queues WHERE queue_id = $1)
    RETURNING mode, from_ts, start_xmax, start_xip
)
SELECT * FROM existing
UNION ALL
SELECT * FROM created;

-- name: discovery_point
SELECT upto_txid, upto_seq, pending_txid FROM queen.discovery
 WHERE queue_id = $1 AND consumer_group = $2
 ORDER BY upto_txid DESC, upto_seq DESC
 LIMIT 1;

-- name: queue_from_position
-- Where a 'from' subscription starts reading the queue log: just before the first message
-- created at or after $2, or after the last one; with the transactions running now below it.
WITH snap AS MATERIALIZED (SELECT pg_current_snapshot() AS s),
f AS (SELECT txid, seq - 1 AS seq FROM queen.messages
       WHERE queue_id = $1 AND created_at >= $2 ORDER BY txid, seq LIMIT 1),
l AS (SELECT txid, seq FROM queen.messages WHERE queue_id = $1 ORDER BY txid DESC, seq DESC LIMIT 1),
pos AS (SELECT * FROM f
        UNION ALL SELECT * FROM l WHERE NOT EXISTS (SELECT 1 FROM f)
        UNION ALL SELECT 0::bigint, 0::bigint WHERE NOT EXISTS (SELECT 1 FROM f) AND NOT EXISTS (SELECT 1 FROM l))
SELECT pos.txid, pos.seq,
       ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(snap.s) AS x WHERE x::text::bigint < pos.txid)
  FROM pos, snap;

-- name: partition_from_position
-- The same for one partition: where a 'from' subscriber's cursor starts.
WITH snap AS MATERIALIZED (SELECT pg_current_snapshot() AS s),
f AS (SELECT txid, seq - 1 AS seq FROM queen.messages
       WHERE partition_id = $1 AND created_at >= $2 ORDER BY txid, seq LIMIT 1),
l AS (SELECT txid, seq FROM queen.messages WHERE partition_id = $1 ORDER BY txid DESC, seq DESC LIMIT 1),
pos AS (SELECT * FROM f
        UNION ALL SELECT * FROM l WHERE NOT EXISTS (SELECT 1 FROM f)
        UNION ALL SELECT 0::bigint, 0::bigint WHERE NOT EXISTS (SELECT 1 FROM f) AND NOT EXISTS (SELECT 1 FROM l))
SELECT pos.txid, pos.seq,
       ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(snap.s) AS x WHERE x::text::bigint < pos.txid)
  FROM pos, snap;

-- name: discovery_scan
-- The queue log after the group's discovery point (at most $5 entries), and the partitions
-- of pending transactions that have committed since. $1 queue id, $2/$3 the point,
-- $4 pending txids, $5 limit.
WITH snap AS MATERIALIZED (SELECT pg_current_snapshot() AS s),
log AS MATERIALIZED (
    SELECT txid, seq, partition_id FROM queen.messages
     WHERE queue_id = $1 AND (txid, seq) > ($2, $3)
     ORDER BY txid, seq LIMIT $5
),
pend AS MATERIALIZED (
    SELECT p.x, p.ord, pg_visible_in_snapshot(p.x::text::xid8, snap.s) AS vis
      FROM unnest($4::bigint[]) WITH ORDINALITY AS p(x, ord), snap
),
last AS (SELECT txid, seq FROM log ORDER BY txid DESC, seq DESC LIMIT 1)
SELECT pg_snapshot_xmin(snap.s)::text::bigint AS xmin,
       ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(snap.s) AS x) AS xip,
       ARRAY(SELECT vis FROM pend ORDER BY ord) AS pending_visible,
       (SELECT txid FROM last) AS last_txid,
       (SELECT seq FROM last) AS last_seq,
       ARRAY(SELECT partition_id FROM log
             UNION
             SELECT m.partition_id FROM pend
               JOIN queen.messages m ON m.queue_id = $1 AND m.txid = pend.x
              WHERE pend.vis) AS partitions
  FROM snap;

-- name: discovery_save
-- A new discovery point. Insert-only (concurrent pops never wait on each other); points
-- behind it are pruned, skipping any row another transaction is pruning.
WITH pruned AS (
    DELETE FROM queen.discovery WHERE ctid IN (
        SELECT ctid FROM queen.discovery
         WHERE queue_id = $1 AND consumer_group = $2 AND (upto_txid, upto_seq) < ($3, $4)
           FOR UPDATE SKIP LOCKED)
)
INSERT INTO queen.discovery (queue_id, consumer_group, upto_txid, upto_seq, pending_txid)
VALUES ($1, $2, $3, $4, $5);

-- name: hints_add
-- "These partitions may have work for the group": always a new row, never a check for an
-- existing one (a hint seen now may be deleted by a transaction that did not see our message).
INSERT INTO queen.ready (queue_id, consumer_group, partition_id, ready_at)
SELECT $1, $2, p, clock_timestamp() FROM unnest($3::uuid[]) AS p;

-- name: candidates
-- The partitions whose hints are due, oldest first (no partition starves), except those
-- this pop already looked at.
SELECT partition_id FROM queen.ready
 WHERE queue_id = $1 AND consumer_group = $2 AND ready_at <= clock_timestamp()
   AND partition_id <> ALL ($3)
 ORDER BY ready_at
 LIMIT $4;

-- name: hints_set
-- Move the partition's hints to $4 (a lease's expiry, a retry delay's end, now), or add one
-- if it has none: a partition with work must always have a hint. Rows another transaction
-- holds are skipped, never waited for.
WITH moved AS (
    UPDATE queen.ready SET ready_at = $4 WHERE ctid IN (
        SELECT ctid FROM queen.ready WHERE partition_id = $2 AND consumer_group = $3
           FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
INSERT INTO queen.ready (queue_id, consumer_group, partition_id, ready_at)
SELECT $1, $3, $2, $4 WHERE NOT EXISTS (SELECT 1 FROM moved);

-- name: hints_delete
-- The partition has no work for the group as of this snapshot: its visible hints go. A hint
-- for a message this snapshot cannot see was inserted by a transaction this one cannot see
-- either, so it is not among them.
DELETE FROM queen.ready WHERE ctid IN (
    SELECT ctid FROM queen.ready WHERE partition_id = $1 AND consumer_group = $2
       FOR UPDATE SKIP LOCKED);

-- name: cursor_get
SELECT done_txid, done_seq, pending_txid, pending_seq, ahead_txid, ahead_seq, fail_txid,
       fail_seq, failures, retry_at, lease_id, lease_expires_at, lease_txid, lease_seq,
       lease_xip, xmin::text, clock_timestamp()
  FROM queen.cursors WHERE partition_id = $1 AND consumer_group = $2;

-- name: cursor_lock
SELECT done_txid, done_seq, pending_txid, pending_seq, ahead_txid, ahead_seq, fail_txid,
       fail_seq, failures, retry_at, lease_id, lease_expires_at, lease_txid, lease_seq,
       lease_xip, xmin::text, clock_timestamp()
  FROM queen.cursors WHERE partition_id = $1 AND consumer_group = $2
   FOR UPDATE SKIP LOCKED;

-- name: cursor_claim_new
-- Create a cursor row for a (partition, group) that has none. The caller holds the
-- transaction-level advisory lock of that pair (taken with a try-lock, never waited for), so
-- no other uncommitted insert of the key can exist and ON CONFLICT cannot wait.
INSERT INTO queen.cursors (partition_id, consumer_group, queue_id, done_txid, done_seq, pending_txid, pending_seq)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (partition_id, consumer_group) DO NOTHING
RETURNING xmin::text;

-- name: try_lock_pair
SELECT pg_try_advisory_xact_lock($1, $2);

-- name: cursor_save
UPDATE queen.cursors
   SET done_txid = $3, done_seq = $4, pending_txid = $5, pending_seq = $6, ahead_txid = $7,
       ahead_seq = $8, fail_txid = $9, fail_seq = $10, failures = $11, retry_at = $12,
       lease_id = $13, lease_expires_at = $14, lease_txid = $15, lease_seq = $16,
       lease_xip = $17, updated_at = clock_timestamp()
 WHERE partition_id = $1 AND consumer_group = $2;

-- name: read_partition
-- The next messages of a partition for a group, in delivery order: first those of pending
-- transactions that have committed, then those after the frontier; finished ones (ahead)
-- left out. With them, in every row (and in one row when there is no message), what the
-- reading snapshot says: its xmin, its running transactions, which pending transactions
-- are visible and which still have messages left, and the partition's newest message time.
-- $1 partition, $2/$3 frontier, $4/$5 pending, $6/$7 ahead, $8 limit, $9 lease seconds.
WITH snap AS MATERIALIZED (SELECT pg_current_snapshot() AS s),
pend AS MATERIALIZED (
    SELECT p.x, p.ps, p.ord FROM unnest($4::bigint[], $5::bigint[]) WITH ORDINALITY AS p(x, ps, ord)
),
ahead AS MATERIALIZED (SELECT a.x, a.s FROM unnest($6::bigint[], $7::bigint[]) AS a(x, s)),
msgs AS MATERIALIZED (
    SELECT * FROM (
        SELECT 0 AS src, m.* FROM pend CROSS JOIN LATERAL (
            SELECT m.txid, m.seq, m.message_id, COALESCE(m.transaction_id, m.message_id::text) AS transaction_id,
                   m.partition, m.payload, m.trace_id, m.created_at
              FROM queen.messages m
             WHERE m.partition_id = $1 AND m.txid = pend.x AND m.seq > pend.ps
               AND NOT EXISTS (SELECT 1 FROM ahead WHERE ahead.x = m.txid AND ahead.s = m.seq)
             ORDER BY m.seq LIMIT $8) m
        UNION ALL
        (SELECT 1 AS src, m.txid, m.seq, m.message_id, COALESCE(m.transaction_id, m.message_id::text),
                m.partition, m.payload, m.trace_id, m.created_at
           FROM queen.messages m
          WHERE m.partition_id = $1 AND (m.txid, m.seq) > ($2, $3)
            AND NOT EXISTS (SELECT 1 FROM ahead WHERE ahead.x = m.txid AND ahead.s = m.seq)
          ORDER BY m.txid, m.seq LIMIT $8)
    ) u
    ORDER BY src, txid, seq
    LIMIT $8
),
meta AS (
    SELECT pg_snapshot_xmin(s)::text::bigint AS xmin,
           ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(s) AS x) AS xip,
           ARRAY(SELECT pg_visible_in_snapshot(pend.x::text::xid8, s) FROM pend ORDER BY ord) AS pending_visible,
           ARRAY(SELECT EXISTS (
                     SELECT 1 FROM queen.messages m
                      WHERE m.partition_id = $1 AND m.txid = pend.x AND m.seq > pend.ps
                        AND NOT EXISTS (SELECT 1 FROM ahead WHERE ahead.x = m.txid AND ahead.s = m.seq))
                   FROM pend ORDER BY ord) AS pending_left,
           (SELECT created_at FROM queen.messages WHERE partition_id = $1
             ORDER BY txid DESC, seq DESC LIMIT 1) AS newest_at,
           clock_timestamp() AS now,
           clock_timestamp() + make_interval(secs => $9) AS lease_expires_at
      FROM snap
)
SELECT meta.*, msgs.src, msgs.txid, msgs.seq, msgs.message_id, msgs.transaction_id,
       msgs.partition, msgs.payload, msgs.trace_id, msgs.created_at
  FROM meta LEFT JOIN msgs ON true
 ORDER BY msgs.src, msgs.txid, msgs.seq;

-- name: lease_insert
INSERT INTO queen.leases (lease_id, queue_id, consumer_group, partition_ids, expires_at)
VALUES ($1, $2, $3, $4, $5);

-- name: dead_letter
-- File a message as a dead letter of a group; the message itself stays.
INSERT INTO queen.dead_letters (queue_id, partition_id, consumer_group, message_id, txid, seq, error, attempts)
SELECT m.queue_id, m.partition_id, $2, m.message_id, m.txid, m.seq, $5, $6
  FROM queen.messages m
 WHERE m.partition_id = $1 AND m.txid = $3 AND m.seq = $4
ON CONFLICT DO NOTHING;

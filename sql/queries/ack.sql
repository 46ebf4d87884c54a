-- Queries of queen_ack and the functions that operate on consumer state (src/ack.rs,
-- src/admin.rs). Sections are prepared once per backend.

-- name: ack_find
-- The messages an ack batch names, by message id ($1), or by partition id ($2) and
-- transaction id ($3); a keyless message's transaction id is its message id ($4, the
-- transaction id read as a uuid when it is one). One row per entry found: its ordinal.
SELECT k.ord, m.partition_id, m.txid, m.seq, m.queue_id, m.message_id
  FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::uuid[]) WITH ORDINALITY AS k(mid, pid, tid, tid_uuid, ord)
  CROSS JOIN LATERAL (
        SELECT m.* FROM queen.messages m WHERE k.mid IS NOT NULL AND m.message_id = k.mid
        UNION ALL
        SELECT m.* FROM queen.messages m
         WHERE k.mid IS NULL AND m.partition_id = k.pid AND m.transaction_id = k.tid
        UNION ALL
        SELECT m.* FROM queen.messages m
         WHERE k.mid IS NULL AND k.tid_uuid IS NOT NULL AND m.message_id = k.tid_uuid
           AND m.partition_id = k.pid AND m.transaction_id IS NULL
        LIMIT 1) AS m;

-- name: ack_lock
-- The cursor row of (partition, group), locked for this transaction. An ack waits for a
-- transaction that holds the row (the pop that leased it, still open): the ack must apply to
-- what that transaction commits.
SELECT done_txid, done_seq, pending_txid, pending_seq, ahead_txid, ahead_seq, fail_txid,
       fail_seq, failures, retry_at, lease_id, lease_expires_at, lease_txid, lease_seq,
       lease_xip, xmin::text, clock_timestamp()
  FROM queen.cursors WHERE partition_id = $1 AND consumer_group = $2
   FOR UPDATE;

-- name: ack_cursor_new
-- A cursor row for a (partition, group) that an ack without a lease names before the group
-- ever popped it, in the state its subscription starts it with.
INSERT INTO queen.cursors (partition_id, consumer_group, queue_id, done_txid, done_seq, pending_txid, pending_seq)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (partition_id, consumer_group) DO NOTHING;

-- name: lease_expiry
-- When a lease ends, if it still has a row (a released lease has none).
SELECT expires_at FROM queen.leases WHERE lease_id = $1;

-- name: lease_release
-- Take partition $2 out of lease $1; the lease row goes with its last partition.
WITH gone AS (
    DELETE FROM queen.leases WHERE lease_id = $1 AND partition_ids <@ ARRAY[$2]::uuid[]
    RETURNING 1
)
UPDATE queen.leases SET partition_ids = array_remove(partition_ids, $2)
 WHERE lease_id = $1 AND NOT EXISTS (SELECT 1 FROM gone);

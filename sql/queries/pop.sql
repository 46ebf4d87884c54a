-- Queries of queen_pop (src/pop.rs): the candidates a pop looks at, what it does with a
-- partition's hints, and how long a waiting pop may sleep. Sections are prepared once per
-- backend.

-- name: candidates
-- The partitions whose hints are due, oldest first (no partition starves), from $6 on (where
-- the pop's page before ended: a pop that goes through many pages reads each hint once, not
-- every page before it again), except those this pop already looked at. One total order, due
-- time then partition, ready_next's, which the read by hand (src/direct.rs candidates) keeps
-- too: hints of equal due times are common (one discovery's, one batch push's), and a page may
-- end among them. The clock is an InitPlan: a bound of the index scan, not a filter over every
-- hint.
SELECT partition_id, ready_at FROM queen.ready
 WHERE queue_id = $1 AND consumer_group = $2 AND shard = $5 AND ready_at <= (SELECT clock_timestamp())
   AND ready_at >= $6
   AND partition_id <> ALL ($3)
 ORDER BY ready_at, partition_id
 LIMIT $4;

-- name: hints_set
-- (Statements that find hints by partition and group say so with the piece hints_of
-- (fragments.sql), which only ready_partition serves.)
-- Move the partition's hints to $4 (a lease's expiry, a retry delay's end, now), or add one
-- if it has none: a partition with work must always have a hint. Only hints written by
-- transactions that the look's snapshot ($5 xmin, $6 xmax, $7 running) sees, or by this
-- transaction before the look, are moved, as in hints_delete: a lease released after the look
-- left a hint due now, which must not be pushed to the expiry of the lease the look saw. Rows
-- another transaction holds are skipped, never waited for. What a moved hint accounts for
-- stays accounted for: every message the look saw waits for $4 (the lease, the retry delay
-- and the delays hold the whole partition, in order). $8 shard, $9 the caller's stored id
-- (queen.txid()), $10 its own id if it has one (queen.own_txid()): Citus takes no volatile
-- function in an UPDATE.
WITH moved AS (
    UPDATE queen.ready SET ready_at = $4, txid = $9, seen_xmin = greatest(seen_xmin, $5)
     WHERE shard = $8 AND ctid IN (
        SELECT ctid FROM queen.ready r WHERE {{hints_of r=r p=$2 g=$3}} AND shard = $8
           AND (txid < $5 OR (txid < $6 AND txid <> ALL ($7))
                OR txid = $10)
           FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
INSERT INTO queen.ready (queue_id, consumer_group, partition_id, ready_at, txid, seen_xmin, shard)
SELECT $1, $3, $2, $4, $9, $5, $8 WHERE NOT EXISTS (SELECT 1 FROM moved);

-- name: hints_delete
-- The partition had no work for the group as of the look's snapshot ($3 xmin, $4 xmax, $5
-- running): the hints written by transactions that snapshot sees, or by this transaction
-- before the look, go. A hint for a message the look could not see was written by a
-- transaction that saw the message committed, after the look's snapshot, so it stays. (This
-- statement's own snapshot is newer than the look's: deleting every hint it sees could delete
-- one for a message that committed in between, and strand that message.) $6 shard, $7 the
-- caller's own id if it has one (queen.own_txid(): no volatile function in a DELETE on Citus).
DELETE FROM queen.ready WHERE shard = $6 AND ctid IN (
    SELECT ctid FROM queen.ready r WHERE {{hints_of r=r p=$1 g=$2}} AND shard = $6
       AND (txid < $3 OR (txid < $4 AND txid <> ALL ($5))
            OR txid = $7)
       FOR UPDATE SKIP LOCKED);

-- name: next_due
-- When the group's earliest hint that is not due yet comes due ($3: of that partition only):
-- a lease's end, a retry delay's, a delayed message's. A waiting pop sleeps no longer.
SELECT min(ready_at) FROM queen.ready
 WHERE queue_id = $1 AND consumer_group = $2 AND shard = $4 AND ready_at > (SELECT clock_timestamp())
   AND ($3::uuid IS NULL OR partition_id = $3);

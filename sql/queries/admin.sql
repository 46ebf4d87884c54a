-- Queries of the functions that operate on consumer state (src/admin.rs): queen_renew,
-- queen_seek, queen_delete_group, queen_delete_queue. Sections are prepared once per backend.

-- name: lease_queues
-- The queues lease $1 covers (its cursor rows'), with the lease's group: what queen_renew
-- checks the caller's privilege on, and whose shared locks (locks.rs) it takes, before it
-- extends anything ($2 shard).
SELECT DISTINCT queue_id, consumer_group FROM queen.cursors WHERE lease_id = $1 AND shard = $2;

-- name: renew
-- Extend lease $1 to now + $2 seconds (NULL: the queue's leaseTime), never shortening it, if
-- that is at most $3 seconds (queen.max_lease_seconds). One row: the new expiry (NULL when the
-- lease is no longer active, or the length is over the bound: nothing changed), the length
-- asked for, and whether the lease is active. The lease is its cursor rows' (one per partition
-- it covers, found through cursors_lease), locked as an ack locks them. Hint rows another
-- transaction holds are skipped (the next pop that looks moves them). The rows are locked in
-- partition order, as acks lock them: a renew and a batch ack of one lease over several
-- partitions never wait for each other crosswise (0.3.0 locked them in the index's order: a
-- deadlock, 40P01, that rolled back one of the two). $4 shard, $5 the clock, $6 the caller's
-- stored id (queen.txid(); NULL when the caller found no row of the lease before), $7 the queue's leaseTime when the caller read it (on Citus, where
-- the options, a reference table, are read apart: the line marked `-- [one server]` is left
-- out there).
WITH c AS MATERIALIZED (
    SELECT partition_id, consumer_group, queue_id, lease_expires_at FROM queen.cursors
     WHERE lease_id = $1 AND shard = $4 AND lease_expires_at > $5
     ORDER BY partition_id
       FOR UPDATE
), secs AS MATERIALIZED (
    SELECT COALESCE($2, $7,
        (SELECT q.lease_time FROM queen.queues q WHERE q.queue_id = (SELECT queue_id FROM c LIMIT 1) -- [one server]
          ORDER BY q.options_updated_at DESC NULLS LAST, q.created_at LIMIT 1),                       -- [one server]
        300) AS s
), new AS MATERIALIZED (
    SELECT greatest((SELECT max(lease_expires_at) FROM c), $5 + make_interval(secs => secs.s)) AS e
      FROM secs WHERE EXISTS (SELECT 1 FROM c) AND secs.s <= $3
), cursors AS (
    UPDATE queen.cursors u SET lease_expires_at = new.e FROM c, new
     WHERE u.partition_id = c.partition_id AND u.consumer_group = c.consumer_group AND u.lease_id = $1
       AND u.shard = $4
), hints AS (
    UPDATE queen.ready r SET ready_at = new.e, txid = COALESCE($6, r.txid) FROM new WHERE r.shard = $4 AND r.ctid IN (
        SELECT r2.ctid FROM queen.ready r2, c
         WHERE r2.partition_id = c.partition_id AND r2.consumer_group = c.consumer_group AND r2.shard = $4
           FOR UPDATE OF r2 SKIP LOCKED)
)
SELECT (SELECT e FROM new) AS expires_at, secs.s AS seconds, EXISTS (SELECT 1 FROM c) AS active FROM secs;

-- name: seek
-- Move group $2's cursor in every partition of queue $1 to just before the first message
-- created at or after $3 (NULL: after the last stored message), keeping as pending the
-- transactions running now below that point (the caller's own among them, whose messages do
-- not count as stored: semantics §3.1); release the group's leases on the queue; make the position
-- the group's subscription (for partitions created later): a seek's row, which replaces every
-- subscription of the group that began before it (effective_subscriptions) — also the row of
-- a first pop still open now, which this statement cannot delete; restart its discovery there,
-- and hint every partition. Returns the number of partitions set. $4 shard, $5 the clock.
WITH snap AS MATERIALIZED (
    SELECT z.xmin, z.xmax, ARRAY(SELECT x FROM unnest(z.xip) AS x ORDER BY x) AS xip, z.own FROM ({{stored_snapshot}}) AS z
),
parts AS MATERIALIZED (SELECT DISTINCT partition_id FROM queen.partitions WHERE queue_id = $1 AND shard = $4),
-- The cursor rows it creates are created under their pairs' locks (locks.rs, state.rs
-- try_lock_pair), waited for, in partition order: a pop never waits on the uncommitted insert.
pairs_locked AS MATERIALIZED (
    SELECT count(queen.lock_pair(o.partition_id, $2)) AS n
      FROM (SELECT partition_id FROM parts ORDER BY partition_id) AS o
),
pos AS MATERIALIZED (
    SELECT p.partition_id, COALESCE(f.txid, l.txid, 0) AS txid, COALESCE(f.seq, l.seq, 0) AS seq
      FROM parts p CROSS JOIN snap
      LEFT JOIN LATERAL (
            SELECT m.txid, m.seq - 1 AS seq FROM queen.messages m
             WHERE m.partition_id = p.partition_id AND m.shard = $4 AND $3::timestamptz IS NOT NULL AND m.created_at >= $3
               AND m.txid IS DISTINCT FROM snap.own
             ORDER BY m.txid, m.seq LIMIT 1) f ON true
      LEFT JOIN LATERAL (
            SELECT m.txid, m.seq FROM queen.messages m
             WHERE m.partition_id = p.partition_id AND m.shard = $4 AND m.txid IS DISTINCT FROM snap.own
             ORDER BY m.txid DESC, m.seq DESC LIMIT 1) l ON true
),
subs AS (
    DELETE FROM queen.subscriptions WHERE queue_id = $1 AND consumer_group = $2 AND shard = $4
),
-- After the pairs' locks (a seek that waited for another's comes later, and its row wins).
sub AS (
    INSERT INTO queen.subscriptions (queue_id, consumer_group, mode, from_ts, start_xmax, start_xip, seek, shard)
    SELECT $1, $2, CASE WHEN $3::timestamptz IS NULL THEN 'new' ELSE 'from' END, $3, snap.xmax, snap.xip, true, $4
      FROM snap CROSS JOIN pairs_locked
),
disc AS (
    DELETE FROM queen.discovery WHERE queue_id = $1 AND consumer_group = $2 AND shard = $4
),
-- The group's dead letters stay; those after the new position are owed again (reopened), and
-- those before it stand as filed (semantics §3.4).
reopen AS (
    UPDATE queen.dead_letters d SET reopened = (d.txid, d.seq) > (pos.txid, pos.seq)
      FROM pos
     WHERE d.queue_id = $1 AND d.consumer_group = $2 AND d.shard = $4 AND d.partition_id = pos.partition_id
       AND d.reopened IS DISTINCT FROM ((d.txid, d.seq) > (pos.txid, pos.seq))
),
-- The group's hints give way to one due now per partition (rows another transaction holds
-- are skipped and stay): a seek does not add to them. Each accounts for what this statement's
-- snapshot sees (seen_xmin, as discovery_record's): whoever deletes or moves it sees the seek
-- committed, and so every message below that xmin. Discovery, which reads the log again from
-- the new position, then rewrites none of them (with seen_xmin 0 it rewrote the hint of every
-- partition of a backlog: 10 000 row locks and updates after a seek over 10 000 partitions).
unhinted AS (
    -- (In ready_next's order: the group's hints are a range of it, which a plan then reads
    -- rather than all of ready_partition for one group's.)
    DELETE FROM queen.ready WHERE shard = $4 AND ctid IN (
        SELECT ctid FROM queen.ready WHERE queue_id = $1 AND consumer_group = $2 AND shard = $4
         ORDER BY ready_at, partition_id
           FOR UPDATE SKIP LOCKED)
),
hints AS (
    INSERT INTO queen.ready (queue_id, consumer_group, partition_id, ready_at, txid, seen_xmin, shard)
    SELECT $1, $2, pos.partition_id, $5, queen.txid(), snap.xmin, $4 FROM pos, snap
),
set AS (
    INSERT INTO queen.cursors AS c (partition_id, consumer_group, queue_id, done_txid, done_seq,
                                    pending_txid, pending_seq, shard)
    SELECT pos.partition_id, $2, $1, pos.txid, pos.seq, pend.x, array_fill(0::bigint, ARRAY[cardinality(pend.x)]), $4
      FROM pos CROSS JOIN snap CROSS JOIN pairs_locked CROSS JOIN LATERAL (
            SELECT ARRAY(SELECT x FROM unnest(snap.xip) AS x WHERE x < pos.txid ORDER BY x) AS x) pend
    ON CONFLICT (partition_id, consumer_group, shard) DO UPDATE
       SET done_txid = EXCLUDED.done_txid, done_seq = EXCLUDED.done_seq,
           pending_txid = EXCLUDED.pending_txid, pending_seq = EXCLUDED.pending_seq,
           ahead_txid = '{}', ahead_seq = '{}', fail_txid = NULL, fail_seq = NULL, failures = 0,
           retry_at = NULL, lease_id = NULL, lease_expires_at = NULL, lease_keys = NULL,
           lease_xip = NULL, updated_at = $5
    RETURNING 1
)
SELECT count(*) AS partitions_set FROM set;

-- name: seek_lock
-- Group $2's cursor rows of queue $1, locked in partition order without waiting (55P03 when
-- another transaction holds one): a seek takes them all or none (locks.rs all_or_none), and its
-- statement then waits for none of them. $3 shard.
SELECT c.partition_id
  FROM (SELECT DISTINCT partition_id FROM queen.partitions WHERE queue_id = $1 AND shard = $3) AS p
  JOIN queen.cursors c ON c.partition_id = p.partition_id AND c.consumer_group = $2 AND c.shard = $3
 ORDER BY c.partition_id
   FOR UPDATE OF c NOWAIT;

-- name: seek_point
-- After `seek`, in the same transaction: the group's discovery starts where the seek's snapshot
-- ended (its xmax, with the transactions it saw running pending), not at the seek's position.
-- Every partition with a message the seek saw has a hint that accounts for it (seek's
-- `hints`), and keeps one until a pop that sees the seek committed finds it empty, so a read of
-- the log below that point would find nothing that needs a hint (after a seek to the start, a
-- read of the whole log). The point is recorded under the group's subscription now: the seek's
-- own row (a later seek waits for this one's pair locks; with no partition to lock, the queue
-- held no message the point passes). $1 queue id, $2 group, $3 shard.
INSERT INTO queen.discovery (queue_id, consumer_group, upto_txid, upto_seq, pending_txid, sub_key, shard)
SELECT $1, $2, s.start_xmax, 0, s.start_xip, e.sub_key, $3
  FROM queen.subscriptions s, queen.effective_subscriptions e
 WHERE s.queue_id = $1 AND s.consumer_group = $2 AND s.shard = $3 AND s.seek
   AND queen.written_here(s.xmin::text::bigint)
   AND e.queue_id = $1 AND e.consumer_group = $2 AND e.shard = $3
 ORDER BY s.created_at DESC LIMIT 1;

-- name: delete_group_lock
-- The group's cursor rows on queue $2 (NULL: every queue), locked: waits for the open acks that
-- hold them (pops are kept out by the group's lock, locks.rs), so that delete_group, a
-- statement of its own, sees what they commit (a dead letter, a hint). $3 shard.
SELECT count(*) AS n FROM (
    SELECT 1 FROM queen.cursors WHERE consumer_group = $1 AND ($2::uuid IS NULL OR queue_id = $2) AND shard = $3
       FOR UPDATE
) AS l;

-- name: delete_group
-- Forget group $1 on queue $2 (NULL: every queue): cursors (and their leases), subscriptions, dead
-- letters, hints, discovery points. Returns the number of (logical) cursors removed: one per
-- partition of each queue the group was subscribed to. $3 shard.
WITH subs AS MATERIALIZED (
    SELECT DISTINCT queue_id FROM queen.subscriptions
     WHERE consumer_group = $1 AND ($2::uuid IS NULL OR queue_id = $2) AND shard = $3
), counted AS (
    SELECT count(DISTINCT p.partition_id) AS n FROM queen.partitions p JOIN subs USING (queue_id) WHERE p.shard = $3
), c AS (DELETE FROM queen.cursors WHERE consumer_group = $1 AND ($2::uuid IS NULL OR queue_id = $2) AND shard = $3
), s AS (DELETE FROM queen.subscriptions WHERE consumer_group = $1 AND ($2::uuid IS NULL OR queue_id = $2) AND shard = $3
), d AS (DELETE FROM queen.dead_letters WHERE consumer_group = $1 AND ($2::uuid IS NULL OR queue_id = $2) AND shard = $3
), r AS (DELETE FROM queen.ready WHERE consumer_group = $1 AND ($2::uuid IS NULL OR queue_id = $2) AND shard = $3
), x AS (DELETE FROM queen.discovery WHERE consumer_group = $1 AND ($2::uuid IS NULL OR queue_id = $2) AND shard = $3
)
SELECT n AS cursors_removed FROM counted;

-- name: delete_queue_lock
-- The queue's cursor rows, locked: waits for the open acks that hold them (as
-- delete_group_lock). $2 shard.
SELECT count(*) AS n FROM (SELECT 1 FROM queen.cursors WHERE queue_id = $1 AND shard = $2 FOR UPDATE) AS l;

-- name: delete_queue
-- Drop queue $1 with everything in it, maintenance's count of it included; whether it
-- existed. $2 shard: on Citus, a worker's call deletes its shard's rows, and the coordinator the
-- registry row (a reference table) after (delete_queue_registry); the lines marked
-- `-- [one server]` are left out there.
WITH existed AS MATERIALIZED (
    SELECT
           EXISTS (SELECT 1 FROM queen.queues WHERE queue_id = $1) OR -- [one server]
           EXISTS (SELECT 1 FROM queen.partitions WHERE queue_id = $1 AND shard = $2) AS e
), m AS (DELETE FROM queen.messages WHERE queue_id = $1 AND shard = $2
), p AS (DELETE FROM queen.partitions WHERE queue_id = $1 AND shard = $2
), q AS (DELETE FROM queen.queues WHERE queue_id = $1 -- [one server]
), tm AS (DELETE FROM queen.timers WHERE queue_id = $1 -- [one server]
), c AS (DELETE FROM queen.cursors WHERE queue_id = $1 AND shard = $2
), s AS (DELETE FROM queen.subscriptions WHERE queue_id = $1 AND shard = $2
), d AS (DELETE FROM queen.dead_letters WHERE queue_id = $1 AND shard = $2
), r AS (DELETE FROM queen.ready WHERE queue_id = $1 AND shard = $2
), x AS (DELETE FROM queen.discovery WHERE queue_id = $1 AND shard = $2
), n AS (DELETE FROM queen.queue_counts WHERE queue_id = $1 AND shard = $2
), t AS (DELETE FROM queen.retired_partitions WHERE queue_id = $1 AND shard = $2
)
SELECT e AS existed FROM existed;

-- name: delete_queue_registry
-- On Citus, after every shard's part: the queue's registry rows (a reference table, written by
-- the coordinator), and its pending timers (a table of the coordinator's); whether there were
-- any registry rows.
WITH q AS (DELETE FROM queen.queues WHERE queue_id = $1 RETURNING 1),
     tm AS (DELETE FROM queen.timers WHERE queue_id = $1)
SELECT EXISTS (SELECT 1 FROM q) AS existed;

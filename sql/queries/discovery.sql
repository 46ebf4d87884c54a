-- Queries of discovery (src/discovery.rs): a group's point in the queue log, and the hints it
-- leaves for the partitions it finds there. Sections are prepared once per backend.
-- Snapshots: pg_current_snapshot() returns the snapshot of the statement that calls it, so a
-- query that reads messages and the snapshot together sees exactly what the snapshot says.

-- name: discovery_scan
-- The group's discovery point (or $3/$4/$5 when it has none yet for its subscription $7), the
-- queue log after it (at most $6 entries), and the partitions found there and in pending
-- transactions that have committed since. $1 queue id, $2 group, $11 shard (src/shards.rs).
-- $8/$9/$10: the point this backend carried out of a transaction that rolled back
-- (discovery.rs), used when it is ahead of the stored one (carried = true).
-- The snapshot as queen reads it (every query that reads one does the same): the caller's own
-- transaction counts as running — in xip, and xmin no later than it — because
-- pg_current_snapshot() leaves it out (semantics §3.1); so its own messages are neither read nor
-- passed, and its xid becomes pending like any other running transaction's.
WITH snap AS MATERIALIZED ({{stored_snapshot}}),
stored AS MATERIALIZED (
    SELECT upto_txid, upto_seq, pending_txid, queen.written_here(xmin::text::bigint) AS own FROM queen.discovery
     WHERE queue_id = $1 AND consumer_group = $2 AND shard = $11 AND sub_key = $7
     ORDER BY upto_txid DESC, upto_seq DESC LIMIT 1
),
base AS MATERIALIZED (
    SELECT upto_txid, upto_seq, pending_txid, true AS stored, own FROM stored
    UNION ALL
    SELECT $3::bigint, $4::bigint, $5::bigint[], false, false WHERE NOT EXISTS (SELECT 1 FROM stored)
),
point AS MATERIALIZED (
    SELECT $8::bigint AS upto_txid, $9::bigint AS upto_seq, $10::bigint[] AS pending_txid, false AS stored,
           false AS own, true AS carried
      FROM base WHERE $8::bigint IS NOT NULL AND ($8::bigint, $9::bigint) > (base.upto_txid, base.upto_seq)
    UNION ALL
    SELECT base.*, false FROM base
     WHERE NOT COALESCE($8::bigint IS NOT NULL AND ($8::bigint, $9::bigint) > (base.upto_txid, base.upto_seq), false)
),
log AS MATERIALIZED (
    SELECT m.txid, m.seq, m.partition_id FROM point, snap CROSS JOIN LATERAL (
        SELECT txid, seq, partition_id FROM queen.messages
         WHERE queue_id = $1 AND shard = $11 AND (txid, seq) > (point.upto_txid, point.upto_seq)
           AND txid IS DISTINCT FROM snap.own
         ORDER BY txid, seq LIMIT $6) AS m
),
pend AS MATERIALIZED (
    SELECT p.x, p.ord, (p.x < snap.xmin OR (p.x < snap.xmax AND p.x <> ALL (snap.xip))) AS vis
      FROM point CROSS JOIN LATERAL unnest(point.pending_txid) WITH ORDINALITY AS p(x, ord), snap
),
last AS (SELECT txid, seq FROM log ORDER BY txid DESC, seq DESC LIMIT 1),
-- What was found: the log after the point, then the messages of the committed pending
-- transactions (one index scan over them: a join here is planned as a scan of every message,
-- run whenever a pushing transaction was open at the last pop). Not materialized: `found`
-- reads it once (a scan of 3 200 entries 2.60-2.92 -> 2.33-2.79 ms).
entries AS (
    SELECT partition_id, txid, seq, 0 AS ord FROM log
    UNION ALL
    SELECT m.partition_id, m.txid, m.seq, 1 FROM queen.messages m
     WHERE m.queue_id = $1 AND m.shard = $11 AND m.txid = ANY (ARRAY(SELECT x FROM pend WHERE vis))
),
-- The partitions found, each once (in the order first found), with the newest transaction
-- found there; less those that need no hint: a hint committed by another transaction
-- accounts for every message found there (its seen_xmin is above the newest: see
-- discovery_record; looked at first, as the cheaper test that holds for most partitions of a
-- backlog), or every message found is finished for the group already: its cursor row (as
-- committed — not one this transaction wrote, which a rollback may take back) is past the last
-- of them, and keeps none of their transactions pending. (Messages consumed by pops of a
-- partition by name are met here again, long after: they need no hint.) Neither test counts
-- rows this transaction wrote: a partition left out is not carried out of a rollback.
found AS MATERIALIZED (
    SELECT f.partition_id, f.txid, f.ord FROM (
        SELECT e.partition_id, max(e.txid) AS txid, min(e.txid) AS min_txid,
               max(ARRAY[e.txid, e.seq]) AS last, min(e.ord) AS ord
          FROM entries e GROUP BY e.partition_id) AS f
     WHERE NOT EXISTS (
        SELECT 1 FROM queen.ready r
         WHERE {{hints_of r=r p=f.partition_id g=$2}} AND r.shard = $11
           AND r.seen_xmin > f.txid AND NOT queen.written_here(r.xmin::text::bigint))
       AND NOT EXISTS (
        SELECT 1 FROM queen.cursors c
         WHERE c.partition_id = f.partition_id AND c.consumer_group = $2 AND c.shard = $11
           AND ARRAY[c.done_txid, c.done_seq] >= f.last
           AND NOT EXISTS (SELECT 1 FROM unnest(c.pending_txid) AS p(x) WHERE p.x BETWEEN f.min_txid AND f.txid)
           AND NOT queen.written_here(c.xmin::text::bigint))
)
SELECT snap.xip,
       ARRAY(SELECT vis FROM pend ORDER BY ord) AS pending_visible,
       (SELECT txid FROM last) AS last_txid,
       (SELECT seq FROM last) AS last_seq,
       ARRAY(SELECT partition_id FROM found ORDER BY ord, txid, partition_id) AS found_partitions,
       ARRAY(SELECT txid FROM found ORDER BY ord, txid, partition_id) AS found_txids,
       point.upto_txid, point.upto_seq, point.pending_txid, point.stored, point.own, point.carried, snap.xmin,
       (SELECT count(*) FROM log) AS log_read
  FROM snap, point;

-- name: discovery_record
-- Hint the partitions found ($3, with the newest transaction found in each, $9), as of the
-- scan whose snapshot's xmin was $10 ("they may have work for the group"), and, when $4,
-- record the new point of subscription $8.
-- A partition whose hint accounts for what was found (seen_xmin above its newest
-- transaction: whoever deletes or moves that hint sees these messages) needs nothing. Others
-- get a hint due now that accounts for the scan: an existing one updated in place (one no
-- other transaction holds: never waited for), or a new one. Never "a hint exists, so nothing
-- to do": a hint seen now may be deleted by a transaction that did not see our message.
-- The point is insert-only, so concurrent pops never wait on each other; points behind it or
-- at it (a point at the same position differs only in transactions that a visible point's
-- writer has hinted since, or that are still in the new one), and points of another
-- subscription, are pruned, skipping rows others are pruning.
-- $1 queue id, $2 group, $5/$6/$7 the new point, $11 shard, $12 the caller's stored id
-- (queen.txid()), $13 the clock: Citus takes no volatile function in an UPDATE.
-- Each partition's hints are found by their partition, whatever the statistics said when the
-- plan was made (`OFFSET 0` keeps the test a probe per partition, `= ANY` an index scan over
-- the list; the group test as hints_set in pop.sql says): planned while ready was empty, the
-- test became a join that compared every hint of the group with every partition found (28 ms
-- for 800 partitions and 200 hints).
WITH found AS MATERIALIZED (
    SELECT f.p, f.t FROM unnest($3::uuid[], $9::bigint[]) AS f(p, t)
     WHERE NOT EXISTS (SELECT 1 FROM queen.ready r
                        WHERE {{hints_of r=r p=f.p g=$2}} AND r.shard = $11
                          AND r.seen_xmin > f.t OFFSET 0)
), updated AS (
    UPDATE queen.ready r SET ready_at = least(r.ready_at, $13), txid = $12,
                             seen_xmin = greatest(r.seen_xmin, $10)
     WHERE r.shard = $11 AND r.ctid IN (SELECT r2.ctid FROM queen.ready r2
                       WHERE r2.partition_id = ANY (ARRAY(SELECT p FROM found)) AND (r2.consumer_group = $2) IS TRUE
                         AND r2.shard = $11
                         FOR UPDATE SKIP LOCKED)
    RETURNING r.partition_id
), hinted AS (
    INSERT INTO queen.ready (queue_id, consumer_group, partition_id, ready_at, txid, seen_xmin, shard)
    SELECT $1, $2, f.p, $13, $12, $10, $11 FROM found f
     WHERE f.p NOT IN (SELECT partition_id FROM updated)
), pruned AS (
    DELETE FROM queen.discovery WHERE $4 AND shard = $11 AND ctid IN (
        SELECT ctid FROM queen.discovery
         WHERE queue_id = $1 AND consumer_group = $2 AND shard = $11
           AND ((upto_txid, upto_seq) <= ($5, $6) OR sub_key <> $8)
           FOR UPDATE SKIP LOCKED)
)
INSERT INTO queen.discovery (queue_id, consumer_group, upto_txid, upto_seq, pending_txid, sub_key, shard)
SELECT $1, $2, $5, $6, $7, $8, $11 WHERE $4;

-- discovery_record on Citus, a statement for each step: Citus plans no modification by ctid
-- that reads a CTE (the single statement's `found`). The same steps, the same rules.

-- name: citus_hints_needed
-- The partitions found ($2, newest transaction $3 in each) whose hint does not account for it.
SELECT f.p AS partition_id FROM unnest($2::uuid[], $3::bigint[]) AS f(p, t)
 WHERE NOT EXISTS (SELECT 1 FROM queen.ready r
                    WHERE {{hints_of r=r p=f.p g=$1}} AND r.shard = $4 AND r.seen_xmin > f.t);

-- name: citus_hints_update
-- Their hints that no other transaction holds, due now at the latest, accounting for the scan
-- ($3 its xmin). $4 shard, $5 the caller's stored id, $6 the clock.
UPDATE queen.ready r SET ready_at = least(r.ready_at, $6), txid = $5, seen_xmin = greatest(r.seen_xmin, $3)
 WHERE r.shard = $4 AND r.ctid IN (SELECT r2.ctid FROM queen.ready r2
                   WHERE r2.partition_id = ANY ($2::uuid[]) AND (r2.consumer_group = $1) IS TRUE AND r2.shard = $4
                     FOR UPDATE SKIP LOCKED)
RETURNING r.partition_id;

-- name: citus_hints_insert
-- A hint due now for each of the partitions $3 (of queue $1, group $2) that has none updated.
INSERT INTO queen.ready (queue_id, consumer_group, partition_id, ready_at, txid, seen_xmin, shard)
SELECT $1, $2, p, $7, $6, $4, $5 FROM unnest($3::uuid[]) AS p;

-- name: citus_discovery_prune
DELETE FROM queen.discovery WHERE shard = $6 AND ctid IN (
    SELECT ctid FROM queen.discovery
     WHERE queue_id = $1 AND consumer_group = $2 AND shard = $6
       AND ((upto_txid, upto_seq) <= ($3, $4) OR sub_key <> $5)
       FOR UPDATE SKIP LOCKED);

-- name: citus_discovery_point
INSERT INTO queen.discovery (queue_id, consumer_group, upto_txid, upto_seq, pending_txid, sub_key, shard)
VALUES ($1, $2, $3, $4, $5, $6, $7);

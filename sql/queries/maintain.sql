-- Queries of queen_maintain (src/maintain.rs). Sections are prepared once per backend.
-- The queries of a queue's rows work in one shard (the parameter named shard: 0 on one server;
-- on Citus, each of the node's shards in turn) and take the clock as a parameter where Citus
-- takes no volatile function (in UPDATE, DELETE and ON CONFLICT).

-- name: maintain_queues
-- Every queue, with the options maintenance applies (NULL = default = off).
SELECT DISTINCT ON (queue_id) queue_id, retention_seconds, completed_retention_seconds,
       max_wait_time_seconds, dead_letter_queue, retry_limit
  FROM queen.queues
 ORDER BY queue_id, options_updated_at DESC NULLS LAST, created_at;

-- name: count_scan
-- The queue's count point (or the start), how many messages came after it (at most $2, read
-- in log order through the queue-log index: the next pass counts on from the last), the last of them,
-- how many messages pending transactions that committed since added, and what the snapshot
-- (as discovery_scan in discovery.sql reads it) says of those transactions. $1 queue id, $3
-- shard.
WITH snap AS MATERIALIZED ({{stored_snapshot}}),
cur AS MATERIALIZED (
    SELECT upto_txid, upto_seq, pending_txid, counted FROM queen.queue_counts WHERE queue_id = $1 AND shard = $3
    UNION ALL
    SELECT 0, 0, '{}'::bigint[], 0
     WHERE NOT EXISTS (SELECT 1 FROM queen.queue_counts WHERE queue_id = $1 AND shard = $3)
),
tail AS MATERIALIZED (
    SELECT m.txid, m.seq FROM cur, snap CROSS JOIN LATERAL (
        SELECT txid, seq FROM queen.messages
         WHERE queue_id = $1 AND shard = $3 AND (txid, seq) > (cur.upto_txid, cur.upto_seq)
           AND txid IS DISTINCT FROM snap.own
         ORDER BY txid, seq LIMIT $2) m
),
pend AS MATERIALIZED (
    SELECT p.x, p.ord, (p.x < snap.xmin OR (p.x < snap.xmax AND p.x <> ALL (snap.xip))) AS vis
      FROM cur CROSS JOIN LATERAL unnest(cur.pending_txid) WITH ORDINALITY AS p(x, ord), snap
)
SELECT cur.upto_txid, cur.upto_seq, cur.pending_txid, cur.counted,
       (SELECT count(*) FROM tail) AS tail_count,
       (SELECT txid FROM tail ORDER BY txid DESC, seq DESC LIMIT 1) AS last_txid,
       (SELECT seq FROM tail ORDER BY txid DESC, seq DESC LIMIT 1) AS last_seq,
       (SELECT count(*) FROM queen.messages m
         WHERE m.queue_id = $1 AND m.shard = $3 AND m.txid = ANY (ARRAY(SELECT x FROM pend WHERE vis))) AS committed,
       ARRAY(SELECT vis FROM pend ORDER BY ord) AS pending_visible,
       snap.xip
  FROM cur, snap;

-- name: count_save
-- $6 shard, $7 the clock.
INSERT INTO queen.queue_counts (queue_id, upto_txid, upto_seq, pending_txid, counted, shard)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (queue_id, shard) DO UPDATE
   SET upto_txid = EXCLUDED.upto_txid, upto_seq = EXCLUDED.upto_seq,
       pending_txid = EXCLUDED.pending_txid, counted = EXCLUDED.counted, updated_at = $7;

-- name: retention
-- Delete the queue's messages created before $2, oldest first in the queue log, at most $3 of
-- those looked at; returns how many were deleted and how many of them the queue's count had
-- counted. Stops early when the head of the log is younger than the cutoff.
-- A message in the batch of an active lease is left to its holder until the lease ends (as
-- max wait leaves it): deleted under the lease, its ack would find nothing and the batch would
-- never finish — the partition stalled until the lease ran out (issue 21, item 12).
-- The rows go by their ctids (a TID scan): a join on ctid is planned, in the generic plan
-- queen keeps, as a hash join over a sequential scan of the whole table, whose cost grows with
-- the table (docs/benchmarks.md, "Measurements behind the design").
-- $4 shard, $5 the clock.
WITH head AS MATERIALIZED (
    SELECT ctid, partition_id, txid, seq, created_at FROM queen.messages WHERE queue_id = $1 AND shard = $4
     ORDER BY txid, seq LIMIT $3
), leased AS MATERIALIZED (
    SELECT c.partition_id, l.t, l.s
      FROM queen.cursors c CROSS JOIN LATERAL queen.batch_keys(c.lease_keys) AS l(t, s)
     WHERE c.partition_id IN (SELECT DISTINCT partition_id FROM head WHERE created_at < $2)
       AND c.shard = $4 AND c.lease_expires_at > $5
), gone AS (
    DELETE FROM queen.messages m
     WHERE m.shard = $4 AND m.ctid = ANY (ARRAY(
            SELECT h.ctid FROM head h
             WHERE h.created_at < $2
               AND NOT EXISTS (SELECT 1 FROM leased l
                                WHERE l.partition_id = h.partition_id AND l.t = h.txid AND l.s = h.seq)))
    RETURNING m.txid, m.seq
), {{deleted_and_counted}};

-- name: completed_retention
-- Delete the queue's messages created before $2 that every group subscribed to the queue has
-- finished (at or before its frontier and not of one of its pending transactions; a group that
-- never popped a partition counts from where its subscription starts, running transactions
-- included), at most $3 of them.
-- Partitions of a queue no group is subscribed to keep their messages. Returns deleted and
-- counted-deleted.
-- Each partition is read through its primary key, from its oldest message up to the first
-- one created at or after $2 (messages are roughly in time order; one pushed late by a long
-- transaction waits until the younger message in front of it is old enough): the cost is what
-- is deleted plus a probe per partition, never the table (a join here is planned as a
-- sequential scan of all messages).
-- $4 shard; $5–$9 the queue's subscriptions in the shard, as completed_subscriptions read them
-- (a statement of its own: Citus routes no statement that reads the view to one shard; the
-- queue's Subscribe lock, held, keeps new ones out between the two): groups, modes, start
-- points, and their running transactions as (index into the groups, 1-based; id).
WITH subs AS MATERIALIZED (
    SELECT g.consumer_group, g.mode, g.start_xmax,
           ARRAY(SELECT x.v FROM unnest($8::int[], $9::bigint[]) AS x(i, v) WHERE x.i = g.i) AS start_xip
      FROM unnest($5::text[], $6::text[], $7::bigint[]) WITH ORDINALITY AS g(consumer_group, mode, start_xmax, i)
), parts AS MATERIALIZED (
    SELECT DISTINCT partition_id FROM queen.partitions WHERE queue_id = $1 AND shard = $4
), bound AS MATERIALIZED (
    -- Per partition: the lowest frontier among the groups, and every transaction some group
    -- has yet to finish below it: its cursor's pending ones, or, for a 'new' group that never
    -- popped the partition, the ones its subscription saw running.
    SELECT p.partition_id, f.t, f.s,
           ARRAY(SELECT unnest(c.pending_txid) FROM queen.cursors c JOIN subs USING (consumer_group)
                  WHERE c.partition_id = p.partition_id AND c.shard = $4
                 UNION ALL
                 SELECT unnest(subs.start_xip) FROM subs
                  WHERE subs.mode = 'new'
                    AND NOT EXISTS (SELECT 1 FROM queen.cursors c
                                     WHERE c.partition_id = p.partition_id AND c.consumer_group = subs.consumer_group
                                       AND c.shard = $4)
           ) AS pend
      FROM parts p
      CROSS JOIN LATERAL (
            SELECT t, s FROM (
                SELECT c.done_txid AS t, c.done_seq AS s FROM subs
                  JOIN queen.cursors c ON c.partition_id = p.partition_id AND c.consumer_group = subs.consumer_group
                                      AND c.shard = $4
                UNION ALL
                SELECT CASE WHEN subs.mode = 'new' THEN subs.start_xmax ELSE 0 END, 0 FROM subs
                 WHERE NOT EXISTS (SELECT 1 FROM queen.cursors c
                                    WHERE c.partition_id = p.partition_id AND c.consumer_group = subs.consumer_group
                                      AND c.shard = $4)
            ) u ORDER BY t, s LIMIT 1) f
), lim AS MATERIALIZED (
    SELECT b.partition_id, b.pend, COALESCE(y.t, b.t) AS t, COALESCE(y.s, b.s) AS s
      FROM bound b LEFT JOIN LATERAL (
            SELECT m.txid AS t, m.seq AS s FROM queen.messages m
             WHERE m.partition_id = b.partition_id AND m.shard = $4 AND (m.txid, m.seq) <= (b.t, b.s)
               AND m.created_at >= $2
             ORDER BY m.txid, m.seq LIMIT 1) y ON true
), doomed AS MATERIALIZED (
    SELECT x.ctid FROM lim CROSS JOIN LATERAL (
        SELECT m.ctid FROM queen.messages m
         WHERE m.partition_id = lim.partition_id AND m.shard = $4 AND (m.txid, m.seq) <= (lim.t, lim.s)
           AND m.created_at < $2 AND NOT m.txid = ANY (lim.pend)
         ORDER BY m.txid, m.seq LIMIT $3) x
     LIMIT $3
), gone AS (
    DELETE FROM queen.messages m WHERE m.shard = $4 AND m.ctid = ANY (ARRAY(SELECT ctid FROM doomed))
    RETURNING m.txid, m.seq
), {{deleted_and_counted}};

-- name: completed_subscriptions
-- The subscriptions of queue $1 in shard $2 that completed retention waits for (as
-- queen.effective_subscriptions says them).
SELECT consumer_group, mode, start_xmax, start_xip FROM queen.effective_subscriptions
 WHERE queue_id = $1 AND shard = $2;

-- name: citus_completed_subscriptions
-- completed_subscriptions on Citus, in a worker's pass over its shard $2: the same rules as
-- queen.effective_subscriptions (schema.sql) with the queue and the shard named in every
-- subquery, so that Citus runs it in that shard alone (through the view, it reads every shard
-- of every node and ships the results between them). tests/integration/tests/citus.rs compares
-- the two.
SELECT o.consumer_group, o.mode, c.start_xmax, x.xip AS start_xip
  FROM (SELECT DISTINCT ON (consumer_group) consumer_group, mode, seek, created_at AS since
          FROM queen.subscriptions
         WHERE queue_id = $1 AND shard = $2
         ORDER BY consumer_group, seek DESC, CASE WHEN seek THEN created_at END DESC NULLS LAST, created_at) AS o
  CROSS JOIN LATERAL (
        SELECT min(s.start_xmax) FILTER (WHERE s.mode = 'new') AS start_xmax
          FROM queen.subscriptions s
         WHERE s.queue_id = $1 AND s.shard = $2 AND s.consumer_group = o.consumer_group
           AND s.mode = o.mode AND s.seek = o.seek AND (NOT o.seek OR s.created_at = o.since)) AS c
  CROSS JOIN LATERAL (
        SELECT COALESCE(array_agg(DISTINCT u.x ORDER BY u.x), '{}'::bigint[]) AS xip
          FROM queen.subscriptions s CROSS JOIN LATERAL unnest(s.start_xip) AS u(x)
         WHERE o.mode = 'new' AND s.queue_id = $1 AND s.shard = $2 AND s.consumer_group = o.consumer_group
           AND s.mode = 'new' AND s.seek = o.seek AND (NOT o.seek OR s.created_at = o.since)
           AND u.x < c.start_xmax) AS x;

-- name: subtract_counted
-- $3 shard.
UPDATE queen.queue_counts SET counted = greatest(counted - $2, 0) WHERE queue_id = $1 AND shard = $3;

-- name: record_point
-- The pass's visibility point (src/max_wait.rs): its snapshot in stored ids — the caller's
-- own transaction counted as running (queen_maintain() inside a transaction that pushed) —
-- taken before the clock is read. Then the points no queue can need go: those older than
-- a point older than the longest max wait ($1 seconds; the newest such serves every queue), and those with
-- a newer point in the same bucket, buckets being 2^k seconds wide for the largest 2^k under
-- a thirty-second of their age (1 s at least): about 32 points per doubling of age.
WITH snap AS MATERIALIZED ({{stored_snapshot}}), added AS (
    INSERT INTO queen.visibility_points (taken_at, seen_xmax, seen_xip)
    SELECT clock_timestamp(), xmax, xip FROM snap
        ON CONFLICT (taken_at) DO NOTHING
), enough AS MATERIALIZED (
    SELECT max(v.taken_at) AS taken_at FROM queen.visibility_points v
     WHERE v.taken_at <= clock_timestamp() - make_interval(secs => $1)
), gone AS (
    DELETE FROM queen.visibility_points v
     WHERE v.taken_at < (SELECT taken_at FROM enough)
        OR EXISTS (
            SELECT 1 FROM (SELECT power(2, floor(log(2, greatest(
                                extract(epoch FROM clock_timestamp() - v.taken_at) / 32, 1)::numeric))) AS w) AS b,
                   queen.visibility_points r
             WHERE r.taken_at > v.taken_at
               AND r.taken_at < to_timestamp((floor(extract(epoch FROM v.taken_at) / b.w) + 1) * b.w))
    RETURNING 1
)
SELECT count(*) AS thinned FROM gone;

-- name: max_wait_point
-- The newest visibility point taken $1 seconds ago or earlier (none: nothing has waited yet).
SELECT taken_at, seen_xmax, seen_xip FROM queen.visibility_points
 WHERE taken_at <= clock_timestamp() - make_interval(secs => $1)
 ORDER BY taken_at DESC LIMIT 1;

-- name: max_wait_candidates
-- (partition, group) pairs of queue $1 that hold no active lease and have an unfinished
-- message that the visibility point ($2 xmax, $3 xip) saw: a pending one, or one past the
-- frontier (read in log order from the frontier up to the point's xmax: it stops at the
-- first). For groups that never popped a partition, from its start. Not a pair whose dead
-- letters were replayed after the point was taken ($5): a replayed message waits afresh.
-- $4 shard.
SELECT p.partition_id, subs.consumer_group
  FROM (SELECT DISTINCT ON (consumer_group) consumer_group FROM queen.subscriptions
         WHERE queue_id = $1 AND shard = $4 ORDER BY consumer_group, created_at) subs
 CROSS JOIN (SELECT DISTINCT partition_id FROM queen.partitions WHERE queue_id = $1 AND shard = $4) p
  LEFT JOIN queen.cursors c
         ON c.partition_id = p.partition_id AND c.consumer_group = subs.consumer_group AND c.shard = $4
 WHERE NOT coalesce(c.lease_expires_at > clock_timestamp(), false)
   AND NOT coalesce(c.replayed_at > $5, false)
   AND (EXISTS (SELECT 1 FROM unnest(c.pending_txid, c.pending_seq) AS x(t, s)
                  JOIN queen.messages m
                    ON m.partition_id = p.partition_id AND m.shard = $4 AND m.txid = x.t AND m.seq > x.s
                 WHERE m.txid < $2 AND NOT m.txid = ANY ($3))
        OR EXISTS (SELECT 1 FROM queen.messages m
                    WHERE m.partition_id = p.partition_id AND m.shard = $4
                      AND (m.txid, m.seq) > (coalesce(c.done_txid, 0), coalesce(c.done_seq, 0))
                      AND m.txid < $2 AND NOT m.txid = ANY ($3)));

-- name: replayed_since
-- Whether group $2 had dead letters replayed in partition $1 after $4 (max_wait_file, with the
-- row locked: a replay that committed after the candidates were read). $3 shard.
SELECT EXISTS (SELECT 1 FROM queen.cursors WHERE partition_id = $1 AND consumer_group = $2 AND shard = $3
                  AND replayed_at > $4) AS replayed;

-- name: fold_partitions
-- Duplicate registry rows (two transactions created the same partition or subscription at
-- once; schema.sql, rule 1) in shard $1: keep the oldest partition row. (The three folds are
-- statements of their own: on Citus the queues' registry is a reference table, which the
-- coordinator folds, and a subscription's fold reads a view Citus routes to no one shard.)
-- Rows another transaction holds (a delete of their queue) are left to a later pass; of the
-- queues $2 only (those whose shared lock the pass holds: src/maintain.rs). One row per row
-- deleted (Citus routes no modification by ctid that reads a CTE).
DELETE FROM queen.partitions x WHERE x.shard = $1 AND x.ctid IN (
    SELECT y.ctid FROM queen.partitions y WHERE y.shard = $1 AND y.queue_id = ANY ($2::uuid[]) AND EXISTS (
        SELECT 1 FROM queen.partitions o WHERE o.partition_id = y.partition_id AND o.shard = $1
           AND (o.created_at, o.ctid) < (y.created_at, y.ctid))
       FOR UPDATE SKIP LOCKED)
RETURNING 1;

-- name: fold_subscriptions
-- A group's subscriptions in shard $1 (first pops at once, a seek beside first pops that began
-- before it) become one: the row that heads them in effective_subscriptions (the latest seek's,
-- or the oldest) takes what they add up to, so folding changes no group's point (nor its
-- sub_key, which names the head row's time); the others go. (Heads before: a seek's row before a
-- first pop's; among seeks' rows the later first, among first pops' the older; then by ctid.)
-- On one server only (src/maintain.rs): on Citus the rows stay, and the view adds them up. Of
-- the (queue, group) pairs ($2[i], $3[i]) only, whose shared locks the pass holds.
WITH merged AS (
    UPDATE queen.subscriptions x
       SET start_xmax = e.start_xmax, start_xip = e.start_xip, from_ts = e.from_ts
      FROM queen.effective_subscriptions e
     WHERE e.queue_id = x.queue_id AND e.consumer_group = x.consumer_group AND e.shard = $1 AND x.shard = $1
       AND (x.queue_id, x.consumer_group) IN (SELECT q, g FROM unnest($2::uuid[], $3::text[]) AS a(q, g))
       AND NOT EXISTS (SELECT 1 FROM queen.subscriptions o
                        WHERE o.queue_id = x.queue_id AND o.consumer_group = x.consumer_group AND o.shard = $1
                          AND (o.seek AND NOT x.seek
                               OR o.seek AND x.seek AND (o.created_at > x.created_at
                                                         OR o.created_at = x.created_at AND o.ctid < x.ctid)
                               OR NOT o.seek AND NOT x.seek AND (o.created_at, o.ctid) < (x.created_at, x.ctid)))
       AND EXISTS (SELECT 1 FROM queen.subscriptions o
                    WHERE o.queue_id = x.queue_id AND o.consumer_group = x.consumer_group AND o.shard = $1
                      AND o.ctid <> x.ctid)
), s AS (
    DELETE FROM queen.subscriptions x WHERE x.shard = $1
       AND (x.queue_id, x.consumer_group) IN (SELECT q, g FROM unnest($2::uuid[], $3::text[]) AS a(q, g))
       AND EXISTS (
        SELECT 1 FROM queen.subscriptions o
         WHERE o.queue_id = x.queue_id AND o.consumer_group = x.consumer_group AND o.shard = $1
           AND (o.seek AND NOT x.seek
                               OR o.seek AND x.seek AND (o.created_at > x.created_at
                                                         OR o.created_at = x.created_at AND o.ctid < x.ctid)
                               OR NOT o.seek AND NOT x.seek AND (o.created_at, o.ctid) < (x.created_at, x.ctid)))
    RETURNING 1
)
SELECT count(*) AS folded FROM s;

-- name: fold_queues
-- Duplicate registry rows of a queue: keep the configured one, else the oldest. Of the queues
-- $1 only, whose shared locks the pass holds.
WITH q AS (
    DELETE FROM queen.queues x WHERE x.queue_id = ANY ($1::uuid[]) AND EXISTS (
        SELECT 1 FROM queen.queues o WHERE o.queue_id = x.queue_id
           AND (o.options_updated_at IS NOT NULL AND x.options_updated_at IS NULL
                OR (o.options_updated_at IS NOT DISTINCT FROM x.options_updated_at
                    AND (o.created_at, o.ctid) < (x.created_at, x.ctid))))
    RETURNING 1
)
SELECT count(*) AS folded FROM q;

-- name: idle_partitions
-- Remove partitions that hold no message, whose registry row and cursors have not changed for
-- $1 seconds, and that no lease holds; remember them (retired_partitions). Partitions retired
-- earlier that have messages again are registered again (a push that saw the row just before
-- it went), and retired entries older than a day are forgotten — of the queues $2 only, those
-- no push had open when the pass looked (src/maintain.rs): a push that saw the row before it
-- went has committed by then, and this statement's snapshot sees its message. $3 shard, $4 the
-- clock. The rows of the idle partitions are found through the list of them (`= ANY`): a plan
-- made while the tables were small joined by reading them whole.
--
-- It waits for no one: a partition whose registry row or cursor rows another transaction
-- holds (a pop that took its cursor in a long transaction, a delete of its queue) is left to a
-- later pass, so that one client's open transaction never holds back the others' partitions.
-- Of the queues $5 only (idle_queues', whose shared locks the pass holds: a delete of one then
-- waits for the pass, never the pass's transaction for the delete).
WITH cand AS MATERIALIZED (
    SELECT DISTINCT ON (p.partition_id) p.partition_id, p.queue_id, p.name FROM queen.partitions p
     WHERE p.shard = $3 AND p.created_at < $4 - make_interval(secs => $1) AND p.queue_id = ANY ($5::uuid[])
       AND NOT EXISTS (SELECT 1 FROM queen.messages m WHERE m.partition_id = p.partition_id AND m.shard = $3)
       AND NOT EXISTS (SELECT 1 FROM queen.cursors c WHERE c.partition_id = p.partition_id AND c.shard = $3
                          AND (c.updated_at > $4 - make_interval(secs => $1)
                               OR c.lease_expires_at > $4))
), seen AS MATERIALIZED (
    -- The cursor rows as this snapshot judged them idle. A pop may hold one now and move it
    -- after this snapshot (delivering a message that committed after it): such a row is
    -- skipped below, and so is its partition; one moved and committed since has another
    -- version (xmin), and deleting it would put the group back at the partition's start and
    -- deliver that message again.
    SELECT c.partition_id, c.consumer_group, c.xmin AS version FROM queen.cursors c
     WHERE c.shard = $3 AND c.partition_id = ANY (ARRAY(SELECT partition_id FROM cand))
), held AS MATERIALIZED (
    SELECT c.partition_id, c.consumer_group, c.xmin AS version FROM queen.cursors c
     WHERE c.shard = $3 AND c.partition_id = ANY (ARRAY(SELECT partition_id FROM cand))
       FOR UPDATE SKIP LOCKED
), registered AS MATERIALIZED (
    -- Registry rows and hints as seen, and as locked (rows another transaction holds are
    -- skipped): by their counts per partition, rows having no key.
    SELECT p.partition_id, count(*) AS n FROM queen.partitions p
     WHERE p.shard = $3 AND p.partition_id = ANY (ARRAY(SELECT partition_id FROM cand)) GROUP BY p.partition_id
), registered_locked AS MATERIALIZED (
    SELECT l.partition_id FROM (
        SELECT p.partition_id FROM queen.partitions p
         WHERE p.shard = $3 AND p.partition_id = ANY (ARRAY(SELECT partition_id FROM cand))
           FOR UPDATE SKIP LOCKED) AS l
), hinted AS MATERIALIZED (
    SELECT r.partition_id, count(*) AS n FROM queen.ready r
     WHERE r.shard = $3 AND r.partition_id = ANY (ARRAY(SELECT partition_id FROM cand)) GROUP BY r.partition_id
), hinted_locked AS MATERIALIZED (
    SELECT l.partition_id FROM (
        SELECT r.partition_id FROM queen.ready r
         WHERE r.shard = $3 AND r.partition_id = ANY (ARRAY(SELECT partition_id FROM cand))
           FOR UPDATE SKIP LOCKED) AS l
), idle AS MATERIALIZED (
    SELECT cand.* FROM cand
     WHERE NOT EXISTS (SELECT 1 FROM seen s WHERE s.partition_id = cand.partition_id
                          AND NOT EXISTS (SELECT 1 FROM held h WHERE h.partition_id = s.partition_id
                                             AND h.consumer_group = s.consumer_group AND h.version = s.version))
       AND COALESCE((SELECT n FROM registered r WHERE r.partition_id = cand.partition_id), 0)
           = (SELECT count(*) FROM registered_locked l WHERE l.partition_id = cand.partition_id)
       AND COALESCE((SELECT n FROM hinted h WHERE h.partition_id = cand.partition_id), 0)
           = (SELECT count(*) FROM hinted_locked l WHERE l.partition_id = cand.partition_id)
), retired AS (
    INSERT INTO queen.retired_partitions (partition_id, queue_id, name, shard)
    SELECT partition_id, queue_id, name, $3 FROM idle
), d1 AS (DELETE FROM queen.partitions WHERE shard = $3 AND partition_id = ANY (ARRAY(SELECT partition_id FROM idle))
), d2 AS (DELETE FROM queen.cursors c
           WHERE c.shard = $3 AND c.partition_id = ANY (ARRAY(SELECT partition_id FROM idle))
), d3 AS (DELETE FROM queen.ready WHERE shard = $3 AND partition_id = ANY (ARRAY(SELECT partition_id FROM idle))
), back AS (
    INSERT INTO queen.partitions (partition_id, queue_id, name, shard)
    SELECT DISTINCT r.partition_id, r.queue_id, r.name, $3 FROM queen.retired_partitions r
     WHERE r.shard = $3 AND r.queue_id = ANY ($5::uuid[])
       AND EXISTS (SELECT 1 FROM queen.messages m WHERE m.partition_id = r.partition_id AND m.shard = $3)
       AND NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.partition_id = r.partition_id AND p.shard = $3)
    RETURNING partition_id
), forget AS (
    DELETE FROM queen.retired_partitions
     WHERE shard = $3 AND (retired_at < $4 - interval '1 day' AND queue_id = ANY ($2)
                           OR partition_id IN (SELECT partition_id FROM back))
)
SELECT (SELECT count(*) FROM idle) AS removed, (SELECT count(*) FROM back) AS restored;

-- name: idle_queues
-- The queues (at most 256) with partitions idle_partitions may remove or register again, in
-- shard $2 ($1, $3: its idle time and clock), read without locking anything.
SELECT queue_id FROM (
    SELECT p.queue_id FROM queen.partitions p
     WHERE p.shard = $2 AND p.created_at < $3 - make_interval(secs => $1)
       AND NOT EXISTS (SELECT 1 FROM queen.messages m WHERE m.partition_id = p.partition_id AND m.shard = $2)
       AND NOT EXISTS (SELECT 1 FROM queen.cursors c WHERE c.partition_id = p.partition_id AND c.shard = $2
                          AND (c.updated_at > $3 - make_interval(secs => $1) OR c.lease_expires_at > $3))
    UNION
    SELECT r.queue_id FROM queen.retired_partitions r
     WHERE r.shard = $2
       AND EXISTS (SELECT 1 FROM queen.messages m WHERE m.partition_id = r.partition_id AND m.shard = $2)
       AND NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.partition_id = r.partition_id AND p.shard = $2)) AS q
 LIMIT 256;

-- name: folded_partitions
-- The queues (at most 256) with duplicate registry rows of a partition in shard $1, read
-- without locking anything.
SELECT DISTINCT queue_id FROM (
    SELECT queue_id FROM queen.partitions WHERE shard = $1 GROUP BY queue_id, partition_id HAVING count(*) > 1
     LIMIT 256) AS d;

-- name: folded_subscriptions
-- The (queue, group) pairs (at most 256) with several subscription rows in shard $1, read
-- without locking anything.
SELECT queue_id, consumer_group FROM queen.subscriptions WHERE shard = $1
 GROUP BY queue_id, consumer_group HAVING count(*) > 1
 LIMIT 256;

-- name: folded_registry
-- The queues (at most 256) with duplicate registry rows (fold_queues), read without locking.
SELECT queue_id FROM queen.queues GROUP BY queue_id HAVING count(*) > 1 LIMIT 256;

-- name: forgettable_queues
-- Queues (at most 256) with retired partitions older than a day in shard $1 (idle_partitions
-- forgets them).
SELECT DISTINCT queue_id FROM queen.retired_partitions
 WHERE shard = $1 AND retired_at < clock_timestamp() - interval '1 day'
 LIMIT 256;

-- name: stale_statistics
-- queen's tables whose size has outgrown what the planner last learned of it (pg_class.relpages,
-- which VACUUM and ANALYZE set): more than twice as many pages, and more than two. A kept plan
-- made while a table was empty or small stays until the table's statistics change, and for
-- ready, cursors and discovery such a plan joins by scanning: a queue drained (autovacuum
-- truncates its hints), then filled over 1 000 partitions, made each pop of 100 take seconds,
-- growing with every hint (15 s at the 5th pop) until the next ANALYZE of ready.
SELECT c.relname::text AS name FROM pg_catalog.pg_class c
 WHERE c.relnamespace = 'queen'::regnamespace AND c.relkind = 'r'
   AND c.relname = ANY (ARRAY['messages', 'partitions', 'subscriptions', 'cursors', 'ready', 'discovery'])
   AND pg_catalog.pg_relation_size(c.oid) / pg_catalog.current_setting('block_size')::bigint
       > 2 * greatest(c.relpages, 1)
 ORDER BY 1;

-- The statistics of one of them taken again (and its kept plans made again in every backend:
-- the new pg_class row invalidates them). SKIP_LOCKED: autovacuum may be at it already.
-- name: analyze_messages
ANALYZE (SKIP_LOCKED) queen.messages;
-- name: analyze_partitions
ANALYZE (SKIP_LOCKED) queen.partitions;
-- name: analyze_subscriptions
ANALYZE (SKIP_LOCKED) queen.subscriptions;
-- name: analyze_cursors
ANALYZE (SKIP_LOCKED) queen.cursors;
-- name: analyze_ready
ANALYZE (SKIP_LOCKED) queen.ready;
-- name: analyze_discovery
ANALYZE (SKIP_LOCKED) queen.discovery;

-- name: ago
SELECT clock_timestamp() - make_interval(secs => $1) AS cutoff;

-- name: record_pass
-- Add a finished pass's report ($1: what queen_maintain() returns) to the database's totals
-- (queen.maintenance_totals); $2 how long the pass took, in seconds.
INSERT INTO queen.maintenance_totals AS t
       (passes, retention_deleted, completed_retention_deleted, max_wait_dead_lettered,
        registry_rows_folded, partitions_removed, partitions_restored,
        last_pass_at, last_pass_seconds, last_report, timers_cancelled)
SELECT 1, (r->>'retention_deleted')::bigint, (r->>'completed_retention_deleted')::bigint,
       (r->>'max_wait_dead_lettered')::bigint, (r->>'registry_rows_folded')::bigint,
       (r->>'partitions_removed')::bigint, (r->>'partitions_restored')::bigint,
       clock_timestamp(), $2, r, coalesce((r->>'timers_cancelled')::bigint, 0)
  FROM (SELECT $1::jsonb AS r) AS report
    ON CONFLICT (singleton) DO UPDATE
   SET passes = t.passes + 1,
       timers_cancelled = t.timers_cancelled + excluded.timers_cancelled,
       retention_deleted = t.retention_deleted + excluded.retention_deleted,
       completed_retention_deleted = t.completed_retention_deleted + excluded.completed_retention_deleted,
       max_wait_dead_lettered = t.max_wait_dead_lettered + excluded.max_wait_dead_lettered,
       registry_rows_folded = t.registry_rows_folded + excluded.registry_rows_folded,
       partitions_removed = t.partitions_removed + excluded.partitions_removed,
       partitions_restored = t.partitions_restored + excluded.partitions_restored,
       last_pass_at = excluded.last_pass_at,
       last_pass_seconds = excluded.last_pass_seconds,
       last_report = excluded.last_report
RETURNING t.passes;

-- name: record_cancelled
-- Add $1 timers cancelled unfired by a firing of the worker's (between passes) to the totals.
INSERT INTO queen.maintenance_totals AS t (timers_cancelled) VALUES ($1)
    ON CONFLICT (singleton) DO UPDATE SET timers_cancelled = t.timers_cancelled + excluded.timers_cancelled
RETURNING t.timers_cancelled;

-- name: record_failure
-- Note a pass of the worker that failed ($1 the error's message), in a transaction of its own
-- after the failed one was rolled back.
INSERT INTO queen.maintenance_totals AS t (failed_passes, last_failure_at, last_error)
VALUES (1, clock_timestamp(), $1)
    ON CONFLICT (singleton) DO UPDATE
   SET failed_passes = t.failed_passes + 1,
       last_failure_at = excluded.last_failure_at,
       last_error = excluded.last_error
RETURNING t.failed_passes;

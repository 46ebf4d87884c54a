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

-- name: ack_find_ids
-- ack_find when every entry names its message by id (the common case): one index scan over
-- the ids ($1), ~2.5× quicker than ack_find's per-entry lateral for 100 entries. One row per
-- message found.
SELECT m.message_id, m.partition_id, m.txid, m.seq, m.queue_id
  FROM queen.messages m
 WHERE m.message_id = ANY ($1::uuid[]);

-- name: ack_message_lock
-- The message $1 and its partition's cursor row, locked for this transaction, of the group of
-- lease $3 if that lease is or was the lease of a row of that partition, else of group $2
-- (NULL: queue mode), with the clock, the queue's stored options (named as load_options in
-- configure.sql names them) and the lease as that row knows it (group; expiry, -infinity once
-- it ended; whether it was released); no row when the message or the cursor row does not
-- exist, or $2 is given and is not the lease's group (the ack is refused: nothing is locked
-- for it). An ack waits for a transaction that holds the row (the pop that leased it, still
-- open): the ack must apply to what that transaction commits.
WITH m AS MATERIALIZED (
    SELECT partition_id, txid, seq, queue_id, message_id FROM queen.messages WHERE message_id = $1
), l AS MATERIALIZED (
    SELECT c.consumer_group,
           CASE WHEN c.lease_id = $3 THEN c.lease_expires_at ELSE '-infinity' END AS expires_at,
           c.lease_id IS DISTINCT FROM $3 AND NOT c.last_lease_expired AS released
      FROM m JOIN queen.cursors c ON c.partition_id = m.partition_id
     WHERE $3::uuid IS NOT NULL AND (c.lease_id = $3 OR c.last_lease_id = $3)
     ORDER BY c.lease_id IS NOT DISTINCT FROM $3 DESC
     LIMIT 1
)
SELECT m.partition_id, m.txid, m.seq, m.queue_id, m.message_id,
       c.done_txid, c.done_seq, c.pending_txid, c.pending_seq, c.ahead_txid, c.ahead_seq,
       c.fail_txid, c.fail_seq, c.failures, c.retry_at, c.lease_id, c.lease_expires_at,
       c.lease_txid, c.lease_seq, c.lease_xip, c.sub_xmax, c.sub_xip, c.xmin::text AS version,
       clock_timestamp() AS now,
       o.lease_time, o.retry_limit, o.retry_delay, o.dead_letter_queue, o.delayed_processing,
       o.window_buffer, o.max_size, o.retention_seconds, o.completed_retention_seconds,
       o.max_wait_time_seconds,
       l.consumer_group, l.expires_at, l.released
  FROM m
  LEFT JOIN l ON true
  JOIN queen.cursors c ON c.partition_id = m.partition_id
                      AND c.consumer_group = COALESCE(l.consumer_group, $2, '__QUEUE_MODE__')
  LEFT JOIN LATERAL (
        SELECT * FROM queen.queues q WHERE q.queue_id = m.queue_id
         ORDER BY q.options_updated_at DESC NULLS LAST, q.created_at LIMIT 1) o ON true
 WHERE ($2 IS NULL OR l.consumer_group IS NULL OR l.consumer_group = $2)
   FOR UPDATE OF c;

-- name: ack_batch_lock
-- A batch ack whose entries all name their message by id ($1) and one lease ($2), and the same
-- group or none ($3): in one statement, the lease as the rows of the messages' partitions know
-- it (its group; expiry, -infinity once it ended; whether it was released) and, locked in
-- partition order, that group's cursor rows of those partitions, each with the messages found
-- there, the clock (read after the locks: an ack may wait for the popping transaction) and the
-- queue's stored options. No row when no row of those partitions knows the lease, or $3 is
-- given and is not its group: nothing is locked then, and the caller takes the general path.
-- `messages_found` and `partitions_found` let the caller check that every message was found
-- and every partition has a row. Waiting for a row is as in ack_message_lock.
WITH m AS MATERIALIZED (
    SELECT message_id, partition_id, txid, seq, queue_id FROM queen.messages WHERE message_id = ANY ($1::uuid[])
), p AS MATERIALIZED (
    -- The messages found per partition, in partition order: three aligned arrays (one pass).
    SELECT partition_id, array_agg(message_id) AS found_ids, array_agg(txid) AS found_txids,
           array_agg(seq) AS found_seqs
      FROM m GROUP BY partition_id ORDER BY partition_id
), l AS MATERIALIZED (
    -- Per partition through the primary key's prefix (a LATERAL with LIMIT: never a scan of
    -- every cursor row, which a kept generic plan chose for an = ANY over them).
    SELECT x.consumer_group, x.expires_at, x.released FROM p CROSS JOIN LATERAL (
        SELECT c.consumer_group,
               CASE WHEN c.lease_id = $2 THEN c.lease_expires_at ELSE '-infinity' END AS expires_at,
               c.lease_id IS DISTINCT FROM $2 AND NOT c.last_lease_expired AS released,
               c.lease_id IS NOT DISTINCT FROM $2 AS holds
          FROM queen.cursors c
         WHERE c.partition_id = p.partition_id AND (c.lease_id = $2 OR c.last_lease_id = $2)
         ORDER BY c.lease_id IS NOT DISTINCT FROM $2 DESC
         LIMIT 1) AS x
     ORDER BY x.holds DESC
     LIMIT 1
), c AS MATERIALIZED (
    -- Locked one by one in partition order (p's), as the general path locks them.
    SELECT x.* FROM p CROSS JOIN LATERAL (
        SELECT c.partition_id, c.queue_id, c.consumer_group, c.done_txid, c.done_seq, c.pending_txid,
               c.pending_seq, c.ahead_txid, c.ahead_seq, c.fail_txid, c.fail_seq, c.failures, c.retry_at,
               c.lease_id, c.lease_expires_at, c.lease_txid, c.lease_seq, c.lease_xip, c.sub_xmax, c.sub_xip,
               c.xmin::text AS version
          FROM queen.cursors c
         WHERE c.partition_id = p.partition_id AND c.consumer_group = (SELECT consumer_group FROM l)
           AND ($3::text IS NULL OR $3 = (SELECT consumer_group FROM l))
           FOR UPDATE) AS x
)
SELECT c.*, l.expires_at, l.released, clock_timestamp() AS now,
       p.found_ids, p.found_txids, p.found_seqs,
       (SELECT count(*) FROM m) AS messages_found,
       (SELECT count(*) FROM p) AS partitions_found,
       o.lease_time, o.retry_limit, o.retry_delay, o.dead_letter_queue, o.delayed_processing,
       o.window_buffer, o.max_size, o.retention_seconds, o.completed_retention_seconds,
       o.max_wait_time_seconds
  FROM c JOIN p ON p.partition_id = c.partition_id CROSS JOIN l
  LEFT JOIN LATERAL (
        SELECT * FROM queen.queues q WHERE q.queue_id = c.queue_id
         ORDER BY q.options_updated_at DESC NULLS LAST, q.created_at LIMIT 1) o ON true
 ORDER BY c.partition_id;

-- name: ack_leases
-- The leases an ack batch names ($1), as the cursor rows of the acked messages' partitions
-- ($2) know them (the lease a row holds, or the last one that ended there): group, expiry
-- (-infinity once it ended), whether it was released; a row that holds it is preferred to one
-- where it ended (IS NOT DISTINCT FROM: a NULL lease_id must not sort first). Found through the
-- primary key's partition prefix: no index on leases is needed for acks.
SELECT DISTINCT ON (ls.l) ls.l AS lease_id, c.consumer_group,
       CASE WHEN c.lease_id = ls.l THEN c.lease_expires_at ELSE '-infinity' END AS expires_at,
       c.lease_id IS DISTINCT FROM ls.l AND NOT c.last_lease_expired AS released
  FROM (SELECT DISTINCT x AS l FROM unnest($1::uuid[]) AS x) AS ls
  JOIN queen.cursors c ON c.partition_id = ANY ($2::uuid[])
                      AND (c.lease_id = ls.l OR c.last_lease_id = ls.l)
 ORDER BY ls.l, c.lease_id IS NOT DISTINCT FROM ls.l DESC;

-- name: lock_pair
-- The advisory lock of (partition $1, group $2) (state.sql try_lock_pair), waited for: an ack
-- that creates a cursor row holds it, so that a pop never waits on the uncommitted insert
-- (pops take it with a try-lock and move on).
SELECT pg_advisory_xact_lock(1364542798, hashtext($1::text || '/' || $2));

-- name: renew
-- Extend lease $1 to now + $2 seconds (NULL: the queue's leaseTime), never shortening it; the
-- new expiry, or no row when the lease is no longer active. The lease is its cursor rows' (one
-- per partition it covers, found through cursors_lease), locked as an ack locks them. Hint
-- rows another transaction holds are skipped (the next pop that looks moves them).
WITH c AS MATERIALIZED (
    SELECT partition_id, consumer_group, queue_id, lease_expires_at FROM queen.cursors
     WHERE lease_id = $1 AND lease_expires_at > clock_timestamp()
       FOR UPDATE
), secs AS MATERIALIZED (
    SELECT COALESCE($2, (SELECT q.lease_time FROM queen.queues q WHERE q.queue_id = (SELECT queue_id FROM c LIMIT 1)
                          ORDER BY q.options_updated_at DESC NULLS LAST, q.created_at LIMIT 1), 300) AS s
), new AS MATERIALIZED (
    SELECT greatest((SELECT max(lease_expires_at) FROM c), clock_timestamp() + make_interval(secs => secs.s)) AS e
      FROM secs WHERE EXISTS (SELECT 1 FROM c)
), cursors AS (
    UPDATE queen.cursors u SET lease_expires_at = new.e FROM c, new
     WHERE u.partition_id = c.partition_id AND u.consumer_group = c.consumer_group AND u.lease_id = $1
), hints AS (
    UPDATE queen.ready r SET ready_at = new.e, txid = queen.txid() FROM new WHERE r.ctid IN (
        SELECT r2.ctid FROM queen.ready r2, c
         WHERE r2.partition_id = c.partition_id AND r2.consumer_group = c.consumer_group
           FOR UPDATE OF r2 SKIP LOCKED)
)
SELECT e AS expires_at FROM new;

-- name: seek
-- Move group $2's cursor in every partition of queue $1 to just before the first message
-- created at or after $3 (NULL: after the last stored message), keeping as pending the
-- transactions running now below that point (the caller's own among them, whose messages do
-- not count as stored: SPEC §3.1); release the group's leases on the queue; make the position
-- the group's subscription (for partitions created later); restart its discovery there, and
-- hint every partition. Returns the number of partitions set.
WITH snap AS MATERIALIZED (
    SELECT pg_snapshot_xmax(z.s)::text::bigint + z.o AS xmax,
           ARRAY(SELECT x FROM (SELECT x::text::bigint + z.o FROM pg_snapshot_xip(z.s) AS x
                                UNION SELECT z.own WHERE z.own IS NOT NULL) AS u(x) ORDER BY x) AS xip,
           z.own
      FROM (SELECT pg_current_snapshot() AS s, queen.own_txid() AS own, queen.xid_offset() AS o) AS z
),
parts AS MATERIALIZED (SELECT DISTINCT partition_id FROM queen.partitions WHERE queue_id = $1),
-- The cursor rows it creates are created under their pairs' advisory locks (state.sql
-- try_lock_pair), waited for, in partition order: a pop never waits on the uncommitted insert.
pairs_locked AS MATERIALIZED (
    SELECT count(pg_advisory_xact_lock(1364542798, hashtext(o.partition_id::text || '/' || $2))) AS n
      FROM (SELECT partition_id FROM parts ORDER BY partition_id) AS o
),
pos AS MATERIALIZED (
    SELECT p.partition_id, COALESCE(f.txid, l.txid, 0) AS txid, COALESCE(f.seq, l.seq, 0) AS seq
      FROM parts p CROSS JOIN snap
      LEFT JOIN LATERAL (
            SELECT m.txid, m.seq - 1 AS seq FROM queen.messages m
             WHERE m.partition_id = p.partition_id AND $3::timestamptz IS NOT NULL AND m.created_at >= $3
               AND m.txid IS DISTINCT FROM snap.own
             ORDER BY m.txid, m.seq LIMIT 1) f ON true
      LEFT JOIN LATERAL (
            SELECT m.txid, m.seq FROM queen.messages m
             WHERE m.partition_id = p.partition_id AND m.txid IS DISTINCT FROM snap.own
             ORDER BY m.txid DESC, m.seq DESC LIMIT 1) l ON true
),
-- The point of the 'new' subscription a seek to the end makes, as effective_subscriptions
-- reads it (the running transactions below its xmax), which the cursors record.
point AS MATERIALIZED (
    SELECT CASE WHEN $3::timestamptz IS NULL THEN snap.xmax END AS xmax,
           CASE WHEN $3::timestamptz IS NULL THEN ARRAY(SELECT x FROM unnest(snap.xip) AS x WHERE x < snap.xmax) END AS xip
      FROM snap
),
subs AS (
    DELETE FROM queen.subscriptions WHERE queue_id = $1 AND consumer_group = $2
),
sub AS (
    INSERT INTO queen.subscriptions (queue_id, consumer_group, mode, from_ts, start_xmax, start_xip)
    SELECT $1, $2, CASE WHEN $3::timestamptz IS NULL THEN 'new' ELSE 'from' END, $3, snap.xmax, snap.xip
      FROM snap
),
disc AS (
    DELETE FROM queen.discovery WHERE queue_id = $1 AND consumer_group = $2
),
-- The group's hints give way to one due now per partition (rows another transaction holds
-- are skipped and stay): a seek does not add to them.
unhinted AS (
    DELETE FROM queen.ready WHERE ctid IN (
        SELECT ctid FROM queen.ready WHERE queue_id = $1 AND consumer_group = $2 FOR UPDATE SKIP LOCKED)
),
hints AS (
    INSERT INTO queen.ready (queue_id, consumer_group, partition_id, ready_at, txid)
    SELECT $1, $2, partition_id, clock_timestamp(), queen.txid() FROM pos
),
set AS (
    INSERT INTO queen.cursors AS c (partition_id, consumer_group, queue_id, done_txid, done_seq,
                                    pending_txid, pending_seq, sub_xmax, sub_xip)
    SELECT pos.partition_id, $2, $1, pos.txid, pos.seq, pend.x, array_fill(0::bigint, ARRAY[cardinality(pend.x)]),
           point.xmax, point.xip
      FROM pos CROSS JOIN point CROSS JOIN snap CROSS JOIN pairs_locked CROSS JOIN LATERAL (
            SELECT ARRAY(SELECT x FROM unnest(snap.xip) AS x WHERE x < pos.txid ORDER BY x) AS x) pend
    ON CONFLICT (partition_id, consumer_group) DO UPDATE
       SET done_txid = EXCLUDED.done_txid, done_seq = EXCLUDED.done_seq,
           pending_txid = EXCLUDED.pending_txid, pending_seq = EXCLUDED.pending_seq,
           ahead_txid = '{}', ahead_seq = '{}', fail_txid = NULL, fail_seq = NULL, failures = 0,
           retry_at = NULL, lease_id = NULL, lease_expires_at = NULL, lease_txid = NULL,
           lease_seq = NULL, lease_xip = NULL, sub_xmax = EXCLUDED.sub_xmax,
           sub_xip = EXCLUDED.sub_xip, updated_at = clock_timestamp()
    RETURNING 1
)
SELECT count(*) AS partitions_set FROM set;

-- name: delete_group
-- Forget group $1 on queue $2 (NULL: every queue): cursors (and their leases), subscriptions, dead
-- letters, hints, discovery points. Returns the number of (logical) cursors removed: one per
-- partition of each queue the group was subscribed to.
WITH subs AS MATERIALIZED (
    SELECT DISTINCT queue_id FROM queen.subscriptions
     WHERE consumer_group = $1 AND ($2::uuid IS NULL OR queue_id = $2)
), counted AS (
    SELECT count(DISTINCT p.partition_id) AS n FROM queen.partitions p JOIN subs USING (queue_id)
), c AS (DELETE FROM queen.cursors WHERE consumer_group = $1 AND ($2::uuid IS NULL OR queue_id = $2)
), s AS (DELETE FROM queen.subscriptions WHERE consumer_group = $1 AND ($2::uuid IS NULL OR queue_id = $2)
), d AS (DELETE FROM queen.dead_letters WHERE consumer_group = $1 AND ($2::uuid IS NULL OR queue_id = $2)
), r AS (DELETE FROM queen.ready WHERE consumer_group = $1 AND ($2::uuid IS NULL OR queue_id = $2)
), x AS (DELETE FROM queen.discovery WHERE consumer_group = $1 AND ($2::uuid IS NULL OR queue_id = $2)
)
SELECT n AS cursors_removed FROM counted;

-- name: delete_queue
-- Drop queue $1 with everything in it; whether it existed.
WITH existed AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM queen.queues WHERE queue_id = $1)
        OR EXISTS (SELECT 1 FROM queen.partitions WHERE queue_id = $1) AS e
), m AS (DELETE FROM queen.messages WHERE queue_id = $1
), p AS (DELETE FROM queen.partitions WHERE queue_id = $1
), q AS (DELETE FROM queen.queues WHERE queue_id = $1
), c AS (DELETE FROM queen.cursors WHERE queue_id = $1
), s AS (DELETE FROM queen.subscriptions WHERE queue_id = $1
), d AS (DELETE FROM queen.dead_letters WHERE queue_id = $1
), r AS (DELETE FROM queen.ready WHERE queue_id = $1
), x AS (DELETE FROM queen.discovery WHERE queue_id = $1
)
SELECT e AS existed FROM existed;

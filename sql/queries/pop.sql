-- Queries of queen_pop (src/pop.rs, src/discovery.rs, src/state.rs). Sections are prepared
-- once per backend. Snapshots: pg_current_snapshot() returns the snapshot of the statement
-- that calls it, so a query that reads messages and the snapshot together sees exactly what
-- the snapshot says.

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

-- name: discovery_scan
-- The group's discovery point (or $3/$4/$5 when it has none yet for its subscription $7), the
-- queue log after it (at most $6 entries), and the partitions found there and in pending
-- transactions that have committed since. $1 queue id, $2 group.
-- The snapshot as queen reads it (every query that reads one does the same): the caller's own
-- transaction counts as running — in xip, and xmin no later than it — because
-- pg_current_snapshot() leaves it out (SPEC §3.1); so its own messages are neither read nor
-- passed, and its xid becomes pending like any other running transaction's.
WITH snap AS MATERIALIZED (
    SELECT least(pg_snapshot_xmin(z.s)::text::bigint + z.o, z.own) AS xmin,
           pg_snapshot_xmax(z.s)::text::bigint + z.o AS xmax,
           ARRAY(SELECT x::text::bigint + z.o FROM pg_snapshot_xip(z.s) AS x)
             || ARRAY(SELECT z.own WHERE z.own IS NOT NULL) AS xip,
           z.own
      FROM (SELECT pg_current_snapshot() AS s, queen.own_txid() AS own, queen.xid_offset() AS o) AS z
),
stored AS MATERIALIZED (
    SELECT upto_txid, upto_seq, pending_txid FROM queen.discovery
     WHERE queue_id = $1 AND consumer_group = $2 AND sub_key = $7
     ORDER BY upto_txid DESC, upto_seq DESC LIMIT 1
),
point AS MATERIALIZED (
    SELECT upto_txid, upto_seq, pending_txid, true AS stored FROM stored
    UNION ALL
    SELECT $3::bigint, $4::bigint, $5::bigint[], false WHERE NOT EXISTS (SELECT 1 FROM stored)
),
log AS MATERIALIZED (
    SELECT m.txid, m.seq, m.partition_id FROM point, snap CROSS JOIN LATERAL (
        SELECT txid, seq, partition_id FROM queen.messages
         WHERE queue_id = $1 AND (txid, seq) > (point.upto_txid, point.upto_seq)
           AND txid IS DISTINCT FROM snap.own
         ORDER BY txid, seq LIMIT $6) AS m
),
pend AS MATERIALIZED (
    SELECT p.x, p.ord, (p.x < snap.xmin OR (p.x < snap.xmax AND p.x <> ALL (snap.xip))) AS vis
      FROM point CROSS JOIN LATERAL unnest(point.pending_txid) WITH ORDINALITY AS p(x, ord), snap
),
last AS (SELECT txid, seq FROM log ORDER BY txid DESC, seq DESC LIMIT 1),
-- The partitions found, each once (in the order first found), with the newest transaction
-- found there: the log after the point, then the committed pending transactions (one index
-- scan over them: a join here is planned as a scan of every message, run whenever a pushing
-- transaction was open at the last pop).
found AS MATERIALIZED (
    SELECT partition_id, max(txid) AS txid, min(ord) AS ord FROM (
        SELECT partition_id, txid, 0 AS ord FROM log
        UNION ALL
        SELECT m.partition_id, m.txid, 1 FROM queen.messages m
         WHERE m.queue_id = $1 AND m.txid = ANY (ARRAY(SELECT x FROM pend WHERE vis))) AS f
     GROUP BY partition_id
)
SELECT snap.xip,
       ARRAY(SELECT vis FROM pend ORDER BY ord) AS pending_visible,
       (SELECT txid FROM last) AS last_txid,
       (SELECT seq FROM last) AS last_seq,
       ARRAY(SELECT partition_id FROM found ORDER BY ord, txid, partition_id) AS found_partitions,
       ARRAY(SELECT txid FROM found ORDER BY ord, txid, partition_id) AS found_txids,
       point.upto_txid, point.upto_seq, point.pending_txid, point.stored, snap.xmin
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
-- $1 queue id, $2 group, $5/$6/$7 the new point.
WITH found AS MATERIALIZED (
    SELECT f.p, f.t FROM unnest($3::uuid[], $9::bigint[]) AS f(p, t)
     WHERE NOT EXISTS (SELECT 1 FROM queen.ready r
                        WHERE r.partition_id = f.p AND r.consumer_group = $2 AND r.seen_xmin > f.t)
), updated AS (
    UPDATE queen.ready r SET ready_at = least(r.ready_at, clock_timestamp()), txid = queen.txid(),
                             seen_xmin = greatest(r.seen_xmin, $10)
     WHERE r.ctid IN (SELECT r2.ctid FROM queen.ready r2
                       WHERE r2.partition_id IN (SELECT p FROM found) AND r2.consumer_group = $2
                         FOR UPDATE SKIP LOCKED)
    RETURNING r.partition_id
), hinted AS (
    INSERT INTO queen.ready (queue_id, consumer_group, partition_id, ready_at, txid, seen_xmin)
    SELECT $1, $2, f.p, clock_timestamp(), queen.txid(), $10 FROM found f
     WHERE f.p NOT IN (SELECT partition_id FROM updated)
), pruned AS (
    DELETE FROM queen.discovery WHERE $4 AND ctid IN (
        SELECT ctid FROM queen.discovery
         WHERE queue_id = $1 AND consumer_group = $2
           AND ((upto_txid, upto_seq) <= ($5, $6) OR sub_key <> $8)
           FOR UPDATE SKIP LOCKED)
)
INSERT INTO queen.discovery (queue_id, consumer_group, upto_txid, upto_seq, pending_txid, sub_key)
SELECT $1, $2, $5, $6, $7, $8 WHERE $4;

-- name: look
-- A look at a partition for a group, without locking anything: the cursor row as committed
-- (or $3..$6, the state a group starts with, when it has none: stored = false), and unless
-- the row shows a lease or a retry delay, the next messages in delivery order: first those
-- of pending transactions that have committed, then those after the frontier; finished ones
-- (ahead) left out. With them, what the reading snapshot says (own transaction as running,
-- see discovery_scan): its running transactions, which pending transactions are visible and
-- which still have messages left, and the partition's newest message time.
-- $9/$10: the point of the group's 'new' subscription (NULL otherwise). A row written under
-- another point (a concurrent first pop that subscribed earlier committed later, SPEC §3.2)
-- is stale: the transactions new by $9/$10 but old by the row's point, with messages here,
-- become pending, and the row takes the new point.
-- $1 partition, $2 group, $7 limit, $8 lease seconds.
WITH snap AS MATERIALIZED (
    SELECT least(pg_snapshot_xmin(z.s)::text::bigint + z.o, z.own) AS xmin,
           pg_snapshot_xmax(z.s)::text::bigint + z.o AS xmax,
           ARRAY(SELECT x::text::bigint + z.o FROM pg_snapshot_xip(z.s) AS x)
             || ARRAY(SELECT z.own WHERE z.own IS NOT NULL) AS xip,
           z.own, clock_timestamp() AS now
      FROM (SELECT pg_current_snapshot() AS s, queen.own_txid() AS own, queen.xid_offset() AS o) AS z
),
stored AS MATERIALIZED (
    SELECT done_txid, done_seq, pending_txid, pending_seq, ahead_txid, ahead_seq, fail_txid,
           fail_seq, failures, retry_at, lease_id, lease_expires_at, lease_txid, lease_seq,
           lease_xip, sub_xmax, sub_xip, xmin::text AS version,
           ($9::bigint IS NOT NULL AND sub_xmax IS NOT NULL
            AND (sub_xmax, sub_xip) IS DISTINCT FROM ($9::bigint, $10::bigint[])) AS stale
      FROM queen.cursors WHERE partition_id = $1 AND consumer_group = $2
),
fix AS MATERIALIZED (
    SELECT ARRAY(SELECT DISTINCT m.txid FROM queen.messages m
                  WHERE s.stale AND m.partition_id = $1
                    AND m.txid >= least($9, (SELECT min(x) FROM unnest($10::bigint[]) AS x))
                    AND m.txid < least(s.done_txid, s.sub_xmax)
                    AND m.txid <> ALL (s.sub_xip) AND m.txid <> ALL (s.pending_txid)
                    AND (m.txid >= $9 OR m.txid = ANY ($10))
                  ORDER BY 1) AS x
      FROM stored s
),
c AS MATERIALIZED (
    SELECT s.done_txid, s.done_seq,
           CASE WHEN cardinality(fix.x) = 0 THEN s.pending_txid
                ELSE ARRAY(SELECT t FROM (SELECT unnest(s.pending_txid) UNION ALL SELECT unnest(fix.x)) AS u(t)
                            ORDER BY t) END AS pending_txid,
           CASE WHEN cardinality(fix.x) = 0 THEN s.pending_seq
                ELSE ARRAY(SELECT q FROM (SELECT * FROM unnest(s.pending_txid, s.pending_seq)
                                          UNION ALL SELECT x, 0 FROM unnest(fix.x) AS x) AS u(t, q)
                            ORDER BY t) END AS pending_seq,
           s.ahead_txid, s.ahead_seq, s.fail_txid, s.fail_seq, s.failures, s.retry_at, s.lease_id,
           s.lease_expires_at, s.lease_txid, s.lease_seq, s.lease_xip,
           CASE WHEN s.stale THEN $9 ELSE s.sub_xmax END AS sub_xmax,
           CASE WHEN s.stale THEN $10 ELSE s.sub_xip END AS sub_xip,
           s.version, true AS stored, s.stale
      FROM stored s, fix
    UNION ALL
    SELECT $3::bigint, $4::bigint, $5::bigint[], $6::bigint[], '{}'::bigint[], '{}'::bigint[],
           NULL::bigint, NULL::bigint, 0, NULL::timestamptz, NULL::uuid, NULL::timestamptz,
           NULL::bigint[], NULL::bigint[], NULL::bigint[], $9::bigint, $10::bigint[], NULL::text,
           false, false
     WHERE NOT EXISTS (SELECT 1 FROM stored)
),
busy AS MATERIALIZED (
    SELECT (c.lease_id IS NOT NULL OR COALESCE(c.retry_at > snap.now, false)) AS busy FROM c, snap
),
pend AS MATERIALIZED (
    SELECT p.x, p.ps, p.ord, (p.x < snap.xmin OR (p.x < snap.xmax AND p.x <> ALL (snap.xip))) AS vis
      FROM c CROSS JOIN LATERAL unnest(c.pending_txid, c.pending_seq) WITH ORDINALITY AS p(x, ps, ord), snap
),
ahead AS MATERIALIZED (
    SELECT a.x, a.s FROM c CROSS JOIN LATERAL unnest(c.ahead_txid, c.ahead_seq) AS a(x, s)
),
msgs AS MATERIALIZED (
    -- No ORDER BY: the pending branch comes first (pend is in txid order, each LATERAL read
    -- in seq order), then the frontier branch in index order; Append keeps branch order, and
    -- queen's plans are never parallel. Only committed pending transactions are read (the
    -- caller's own is not visible: its rows are, to itself, but are not to be delivered).
    SELECT * FROM (
        SELECT 0 AS src, m.* FROM pend CROSS JOIN LATERAL (
            SELECT m.txid, m.seq, m.message_id, COALESCE(m.transaction_id, m.message_id::text) AS transaction_id,
                   m.partition, m.payload, m.trace_id, m.created_at
              FROM queen.messages m
             WHERE pend.vis AND m.partition_id = $1 AND m.txid = pend.x AND m.seq > pend.ps
               AND NOT EXISTS (SELECT 1 FROM ahead WHERE ahead.x = m.txid AND ahead.s = m.seq)
             ORDER BY m.seq LIMIT $7) m
        UNION ALL
        SELECT 1 AS src, m.* FROM c, snap CROSS JOIN LATERAL (
            SELECT m.txid, m.seq, m.message_id, COALESCE(m.transaction_id, m.message_id::text),
                   m.partition, m.payload, m.trace_id, m.created_at
              FROM queen.messages m
             WHERE m.partition_id = $1 AND (m.txid, m.seq) > (c.done_txid, c.done_seq)
               AND m.txid IS DISTINCT FROM snap.own
               AND NOT EXISTS (SELECT 1 FROM ahead WHERE ahead.x = m.txid AND ahead.s = m.seq)
             ORDER BY m.txid, m.seq LIMIT $7) m
    ) u
    WHERE NOT (SELECT busy FROM busy)
    LIMIT $7
)
-- First row: the cursor and what the snapshot says (message columns NULL); then one row per
-- message (the rest NULL). Message columns come first, so reading them is cheap.
SELECT NULL::bigint AS txid, NULL::bigint AS seq, NULL::uuid AS message_id,
       NULL::text AS transaction_id, NULL::text AS partition, NULL::jsonb AS payload,
       NULL::uuid AS trace_id, NULL::timestamptz AS created_at,
       c.*,
       snap.xip,
       ARRAY(SELECT vis FROM pend ORDER BY ord) AS pending_visible,
       ARRAY(SELECT EXISTS (
                 SELECT 1 FROM queen.messages m
                  WHERE m.partition_id = $1 AND m.txid = pend.x AND m.seq > pend.ps
                    AND NOT EXISTS (SELECT 1 FROM ahead WHERE ahead.x = m.txid AND ahead.s = m.seq))
               FROM pend ORDER BY ord) AS pending_left,
       (SELECT created_at FROM queen.messages WHERE partition_id = $1 AND txid IS DISTINCT FROM snap.own
         ORDER BY txid DESC, seq DESC LIMIT 1) AS newest_at,
       snap.now,
       snap.now + make_interval(secs => $8) AS lease_expires_at,
       snap.xmin, snap.xmax
  FROM c, snap
UNION ALL
SELECT txid, seq, message_id, transaction_id, partition, payload, trace_id, created_at,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,  -- the cursor
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,  -- ... row
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL               -- the snapshot
  FROM msgs;

-- name: cursor_lock
-- Lock the row for this transaction if it is still in version $3 (the xmin a look read),
-- never waiting: no row when it changed or another transaction holds it. The version is
-- checked on the row this statement's snapshot sees, before locking, so a changed row is not
-- locked. (One window remains: a change committed between this statement's snapshot and its
-- lock is locked, then re-checked and skipped; that is microseconds wide.)
SELECT xmin::text FROM queen.cursors WHERE partition_id = $1 AND consumer_group = $2 AND xmin::text = $3
   FOR UPDATE SKIP LOCKED;

-- name: cursor_save
-- Write a (partition, group) row back (its lease included: the lease lives in the row); when
-- $21 is not NULL, replace the partition's visible hints by one due at $21 (a lease's expiry;
-- now, after an auto_ack pop or a release): a partition with work always has a hint, and the
-- duplicates discovery leaves are folded here, by the holder of the cursor row (rows another
-- transaction holds are skipped, never waited for); when $22 is not NULL, record it as the
-- last lease that ended here, run out ($23) or released. $20 queue id.
WITH folded AS (
    DELETE FROM queen.ready WHERE $21 IS NOT NULL AND ctid IN (
        SELECT ctid FROM queen.ready WHERE partition_id = $1 AND consumer_group = $2
           FOR UPDATE SKIP LOCKED)
), hinted AS (
    -- Accounts for every message this statement's snapshot sees: each is in the batch, or
    -- after it (behind the lease: due at $21 or when the lease is released), or finished.
    INSERT INTO queen.ready (queue_id, consumer_group, partition_id, ready_at, txid, seen_xmin)
    SELECT $20, $2, $1, $21, queen.txid(),
           least(pg_snapshot_xmin(pg_current_snapshot())::text::bigint + queen.xid_offset(), queen.own_txid())
     WHERE $21 IS NOT NULL
)
UPDATE queen.cursors
   SET done_txid = $3, done_seq = $4, pending_txid = $5, pending_seq = $6, ahead_txid = $7,
       ahead_seq = $8, fail_txid = $9, fail_seq = $10, failures = $11, retry_at = $12,
       lease_id = $13, lease_expires_at = $14, lease_txid = $15, lease_seq = $16,
       lease_xip = $17, sub_xmax = $18, sub_xip = $19, updated_at = clock_timestamp(),
       last_lease_id = COALESCE($22, last_lease_id),
       last_lease_expired = CASE WHEN $22 IS NULL THEN last_lease_expired ELSE $23 END
 WHERE partition_id = $1 AND consumer_group = $2;

-- name: cursor_update
-- cursor_save when nothing but the row changes (an ack inside a batch, say): a plain update.
UPDATE queen.cursors
   SET done_txid = $3, done_seq = $4, pending_txid = $5, pending_seq = $6, ahead_txid = $7,
       ahead_seq = $8, fail_txid = $9, fail_seq = $10, failures = $11, retry_at = $12,
       lease_id = $13, lease_expires_at = $14, lease_txid = $15, lease_seq = $16,
       lease_xip = $17, sub_xmax = $18, sub_xip = $19, updated_at = clock_timestamp()
 WHERE partition_id = $1 AND consumer_group = $2;

-- name: next_due
-- When the group's earliest hint that is not due yet comes due ($3: of that partition only):
-- a lease's end, a retry delay's, a delayed message's. A waiting pop sleeps no longer.
SELECT min(ready_at) FROM queen.ready
 WHERE queue_id = $1 AND consumer_group = $2 AND ready_at > (SELECT clock_timestamp())
   AND ($3::uuid IS NULL OR partition_id = $3);

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
SELECT pos.txid, pos.seq, ARRAY(SELECT x FROM unnest(snap.xip) AS x WHERE x < pos.txid ORDER BY x)
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
SELECT pos.txid, pos.seq, ARRAY(SELECT x FROM unnest(snap.xip) AS x WHERE x < pos.txid ORDER BY x)
  FROM pos, snap;

-- name: candidates
-- The partitions whose hints are due, oldest first (no partition starves), except those this
-- pop already looked at. The clock is an InitPlan: a bound of the index scan, not a filter
-- over every hint.
SELECT partition_id FROM queen.ready
 WHERE queue_id = $1 AND consumer_group = $2 AND ready_at <= (SELECT clock_timestamp())
   AND partition_id <> ALL ($3)
 ORDER BY ready_at
 LIMIT $4;

-- name: hints_set
-- Move the partition's hints to $4 (a lease's expiry, a retry delay's end, now), or add one
-- if it has none: a partition with work must always have a hint. Only hints written by
-- transactions that the look's snapshot ($5 xmin, $6 xmax, $7 running) sees, or by this
-- transaction before the look, are moved, as in hints_delete: a lease released after the look
-- left a hint due now, which must not be pushed to the expiry of the lease the look saw. Rows
-- another transaction holds are skipped, never waited for. What a moved hint accounts for
-- stays accounted for: every message the look saw waits for $4 (the lease, the retry delay
-- and the delays hold the whole partition, in order).
WITH moved AS (
    UPDATE queen.ready SET ready_at = $4, txid = queen.txid(), seen_xmin = greatest(seen_xmin, $5) WHERE ctid IN (
        SELECT ctid FROM queen.ready WHERE partition_id = $2 AND consumer_group = $3
           AND (txid < $5 OR (txid < $6 AND txid <> ALL ($7))
                OR txid = queen.own_txid())
           FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
INSERT INTO queen.ready (queue_id, consumer_group, partition_id, ready_at, txid, seen_xmin)
SELECT $1, $3, $2, $4, queen.txid(), $5 WHERE NOT EXISTS (SELECT 1 FROM moved);

-- name: hints_delete
-- The partition had no work for the group as of the look's snapshot ($3 xmin, $4 xmax, $5
-- running): the hints written by transactions that snapshot sees, or by this transaction
-- before the look, go. A hint for a message the look could not see was written by a
-- transaction that saw the message committed, after the look's snapshot, so it stays. (This
-- statement's own snapshot is newer than the look's: deleting every hint it sees could delete
-- one for a message that committed in between, and strand that message.)
DELETE FROM queen.ready WHERE ctid IN (
    SELECT ctid FROM queen.ready WHERE partition_id = $1 AND consumer_group = $2
       AND (txid < $3 OR (txid < $4 AND txid <> ALL ($5))
            OR txid = queen.own_txid())
       FOR UPDATE SKIP LOCKED);

-- name: cursor_create
-- Create a cursor row for a (partition, group) that has none, in the state the group's
-- subscription starts it with ($8/$9: the point of a 'new' subscription); no row back when one
-- exists already. The caller holds the pair's transaction-level advisory lock (a pop takes it
-- with a try-lock, never waiting), so no other uncommitted insert of the key can exist and
-- ON CONFLICT cannot wait.
INSERT INTO queen.cursors (partition_id, consumer_group, queue_id, done_txid, done_seq, pending_txid,
                           pending_seq, sub_xmax, sub_xip)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (partition_id, consumer_group) DO NOTHING
RETURNING xmin::text;

-- name: try_lock_pair
-- The advisory lock of (partition $1, group $2), never waited for: whoever creates a cursor row
-- holds it (a pop, an ack, maintenance, a seek), so that a pop never waits on an uncommitted
-- insert. Its first key is the pairs' own (1364542798, "QUEN"); queen's other advisory locks use
-- 1364542799 (a maintenance pass, maintain.sql) and 1902474318 (a queue's configuration).
SELECT pg_try_advisory_xact_lock(1364542798, hashtext($1::text || '/' || $2));

-- name: dead_letter
-- File a message as a dead letter of a group; the message itself stays.
INSERT INTO queen.dead_letters (queue_id, partition_id, consumer_group, message_id, txid, seq, error, attempts)
SELECT m.queue_id, m.partition_id, $2, m.message_id, m.txid, m.seq, $5, $6
  FROM queen.messages m
 WHERE m.partition_id = $1 AND m.txid = $3 AND m.seq = $4
ON CONFLICT DO NOTHING;

-- name: now
SELECT clock_timestamp();

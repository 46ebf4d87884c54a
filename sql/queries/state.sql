-- Queries of consumer state (src/state.rs): a look at a (partition, group) and its messages,
-- and claiming, creating and saving its cursor row (the lease included), dead letters. Shared
-- by pop, ack and maintenance. Sections are prepared once per backend.
-- Snapshots: pg_current_snapshot() returns the snapshot of the statement that calls it, so a
-- query that reads messages and the snapshot together sees exactly what the snapshot says.

-- name: look
-- A look at a partition for a group, without locking anything: the cursor row as committed
-- (or $3..$6, the state a group starts with, when it has none: stored = false), and unless
-- the row shows a lease or a retry delay, the next messages in delivery order: first those
-- of pending transactions that have committed, then those after the frontier; finished ones
-- (ahead) left out. With them, what the reading snapshot says (own transaction as running,
-- see discovery_scan): its running transactions, which pending transactions are visible and
-- which still have messages left, and the partition's newest message time.
-- A row keeps the start it was made with, whatever the group's subscription reads now (semantics
-- §3.2: order wins over a first pop that commits later with an earlier point; a seek rewrote
-- the rows it replaced).
-- $1 partition, $2 group, $7 limit, $8 lease seconds, $9 shard (src/shards.rs: 0 on one server).
WITH snap AS MATERIALIZED (SELECT z.*, clock_timestamp() AS now FROM ({{stored_snapshot}}) AS z),
c AS MATERIALIZED (
    SELECT done_txid, done_seq, pending_txid, pending_seq, ahead_txid, ahead_seq, fail_txid,
           fail_seq, failures, retry_at, lease_id, lease_expires_at, lease_keys,
           lease_xip, xmin::text AS version, true AS stored
      FROM queen.cursors WHERE partition_id = $1 AND consumer_group = $2 AND shard = $9
    UNION ALL
    SELECT $3::bigint, $4::bigint, $5::bigint[], $6::bigint[], '{}'::bigint[], '{}'::bigint[],
           NULL::bigint, NULL::bigint, 0, NULL::timestamptz, NULL::uuid, NULL::timestamptz,
           NULL::bytea, NULL::bigint[], NULL::text, false
     WHERE NOT EXISTS (SELECT 1 FROM queen.cursors WHERE partition_id = $1 AND consumer_group = $2 AND shard = $9)
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
msgs AS (
    -- Not materialized: read once, by the last branch below, so its rows go out as they are
    -- read rather than through a copy (the look 0.133 -> 0.115 ms a pop of 100, 1 client).
    -- No ORDER BY: the pending branch comes first (pend is in txid order, each LATERAL read
    -- in seq order), then the frontier branch in index order; Append keeps branch order, and
    -- queen's plans are never parallel. Only committed pending transactions are read (the
    -- caller's own is not visible: its rows are, to itself, but are not to be delivered).
    SELECT * FROM (
        SELECT 0 AS src, m.* FROM pend CROSS JOIN LATERAL (
            SELECT m.txid, m.seq, m.message_id, COALESCE(m.transaction_id, m.message_id::text) AS transaction_id,
                   m.partition, m.payload, m.trace_id, m.created_at
              FROM queen.messages m
             WHERE pend.vis AND m.partition_id = $1 AND m.shard = $9 AND m.txid = pend.x AND m.seq > pend.ps
               AND NOT EXISTS (SELECT 1 FROM ahead WHERE ahead.x = m.txid AND ahead.s = m.seq)
             ORDER BY m.seq LIMIT $7) m
        UNION ALL
        SELECT 1 AS src, m.* FROM c, snap CROSS JOIN LATERAL (
            SELECT m.txid, m.seq, m.message_id, COALESCE(m.transaction_id, m.message_id::text),
                   m.partition, m.payload, m.trace_id, m.created_at
              FROM queen.messages m
             WHERE m.partition_id = $1 AND m.shard = $9 AND (m.txid, m.seq) > (c.done_txid, c.done_seq)
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
                  WHERE m.partition_id = $1 AND m.shard = $9 AND m.txid = pend.x AND m.seq > pend.ps
                    AND NOT EXISTS (SELECT 1 FROM ahead WHERE ahead.x = m.txid AND ahead.s = m.seq))
               FROM pend ORDER BY ord) AS pending_left,
       (SELECT created_at FROM queen.messages WHERE partition_id = $1 AND shard = $9 AND txid IS DISTINCT FROM snap.own
         ORDER BY txid DESC, seq DESC LIMIT 1) AS newest_at,
       snap.now,
       snap.now + make_interval(secs => $8) AS new_lease_expires_at,
       snap.xmin, snap.xmax
  FROM c, snap
UNION ALL
SELECT txid, seq, message_id, transaction_id, partition, payload, trace_id, created_at,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,  -- the cursor
       NULL, NULL, NULL, NULL, NULL, NULL,                          -- ... row
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL               -- the snapshot
  FROM msgs;

-- name: cursor_lock
-- Lock the row for this transaction if it is still in version $3 (the xmin a look read),
-- never waiting: no row when it changed or another transaction holds it. The version is
-- checked on the row this statement's snapshot sees, before locking, so a changed row is not
-- locked. (One window remains: a change committed between this statement's snapshot and its
-- lock is locked, then re-checked and skipped; that is microseconds wide.)
SELECT xmin::text FROM queen.cursors WHERE partition_id = $1 AND consumer_group = $2 AND shard = $4
   AND xmin::text = $3
   FOR UPDATE SKIP LOCKED;

-- name: cursor_save
-- Write a (partition, group) row back (its lease included: the lease lives in the row); when
-- $18 is not NULL, replace the partition's visible hints by one due at $18 (a lease's expiry;
-- now, after an auto_ack pop or a release): a partition with work always has a hint, and the
-- duplicates discovery leaves are folded here, by the holder of the cursor row (rows another
-- transaction holds are skipped, never waited for); when $19 is not NULL, record it as the
-- last lease that ended here, run out ($20) or released. $17 queue id, $21 shard, $22 the
-- clock, $23 the caller's stored id (queen.txid(); Citus takes no volatile function in an
-- UPDATE).
-- $24: the row leaves nothing behind its frontier (no lease, no pending transaction, no retry
-- delay), so that the partition has work now only if a message after the frontier is visible.
-- When this statement's snapshot sees none (the caller's own left out, as a look leaves them),
-- no hint is written, and only the hints written by transactions the snapshot sees go (the
-- rule of hints_delete in pop.sql, with this statement's snapshot as the look's; a hint updated
-- since, which FOR UPDATE follows, is checked in its new version): a message the snapshot
-- cannot see is discovery's to hint when it commits. Otherwise the next pop looked at the
-- emptied partition only to delete the hint.
-- (On Citus the lines marked [one server] go, and with them the probe: a worker plans no
-- modification by ctid whose subquery reads a CTE. There the hint is written as before.)
WITH
snap AS MATERIALIZED (                                                                          -- [one server]
    SELECT pg_snapshot_xmin(z.s)::text::bigint + z.o AS xmin,                                   -- [one server]
           pg_snapshot_xmax(z.s)::text::bigint + z.o AS xmax,                                   -- [one server]
           ARRAY(SELECT x::text::bigint + z.o FROM pg_snapshot_xip(z.s) AS x) AS xip,           -- [one server]
           $24 AND NOT EXISTS (                                                                 -- [one server]
               SELECT 1 FROM queen.messages m                                                   -- [one server]
                WHERE m.partition_id = $1 AND m.shard = $21 AND (m.txid, m.seq) > ($3, $4)      -- [one server]
                  AND m.txid IS DISTINCT FROM $23) AS empty                                     -- [one server]
      FROM (SELECT pg_current_snapshot() AS s, queen.xid_offset() AS o) AS z                    -- [one server]
),                                                                                              -- [one server]
folded AS (
    DELETE FROM queen.ready WHERE $18 IS NOT NULL AND shard = $21 AND ctid IN (
        SELECT r.ctid FROM queen.ready r
         WHERE {{hints_of r=r p=$1 g=$2}} AND r.shard = $21
           AND (NOT (SELECT empty FROM snap) OR r.txid < (SELECT xmin FROM snap)                -- [one server]
                OR (r.txid < (SELECT xmax FROM snap) AND r.txid <> ALL ((SELECT xip FROM snap)::bigint[])) -- [one server]
                OR r.txid = $23)                                                                -- [one server]
           FOR UPDATE OF r SKIP LOCKED)
), hinted AS (
    -- Accounts for every message this statement's snapshot sees: each is in the batch, or
    -- after it (behind the lease: due at $18 or when the lease is released), or finished.
    INSERT INTO queen.ready (queue_id, consumer_group, partition_id, ready_at, txid, seen_xmin, shard)
    SELECT $17, $2, $1, $18, $23,
           least(pg_snapshot_xmin(pg_current_snapshot())::text::bigint + queen.xid_offset(), $23), $21
     WHERE $18 IS NOT NULL
       AND NOT (SELECT empty FROM snap)                                                         -- [one server]
)
UPDATE queen.cursors
   SET done_txid = $3, done_seq = $4, pending_txid = $5, pending_seq = $6, ahead_txid = $7,
       ahead_seq = $8, fail_txid = $9, fail_seq = $10, failures = $11, retry_at = $12,
       lease_id = $13, lease_expires_at = $14, lease_keys = $15, lease_xip = $16,
       updated_at = $22,
       last_lease_id = COALESCE($19, last_lease_id),
       last_lease_expired = CASE WHEN $19 IS NULL THEN last_lease_expired ELSE $20 END
 WHERE partition_id = $1 AND consumer_group = $2 AND shard = $21;

-- name: cursor_update
-- cursor_save when nothing but the row changes (an ack inside a batch, say): a plain update.
-- $17 shard, $18 the clock.
UPDATE queen.cursors
   SET done_txid = $3, done_seq = $4, pending_txid = $5, pending_seq = $6, ahead_txid = $7,
       ahead_seq = $8, fail_txid = $9, fail_seq = $10, failures = $11, retry_at = $12,
       lease_id = $13, lease_expires_at = $14, lease_keys = $15, lease_xip = $16,
       updated_at = $18
 WHERE partition_id = $1 AND consumer_group = $2 AND shard = $17;

-- name: cursor_create
-- Create a cursor row for a (partition, group) that has none, in the state the group's
-- subscription starts it with; no row back when one exists already. The caller holds the pair's transaction-level lock (locks.rs) (a pop takes it
-- with a try-lock, never waiting), so no other uncommitted insert of the key can exist and
-- ON CONFLICT cannot wait.
INSERT INTO queen.cursors (partition_id, consumer_group, queue_id, done_txid, done_seq, pending_txid,
                           pending_seq, shard)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (partition_id, consumer_group, shard) DO NOTHING
RETURNING xmin::text;

-- name: missing
-- Which of the keys ($2, $3) of partition $1 no longer exist: messages of a lease's batch that
-- retention deleted (src/ack/apply.rs forget_vanished). Through the primary key.
SELECT k.t AS txid, k.s AS seq FROM unnest($2::bigint[], $3::bigint[]) AS k(t, s)
 WHERE NOT EXISTS (SELECT 1 FROM queen.messages m WHERE m.partition_id = $1 AND m.shard = $4 AND m.txid = k.t AND m.seq = k.s);

-- name: dead_letter_again
-- A message filed again as a dead letter of a group (the group was owed it again after a seek
-- back, and gave up on it again): the dead letter is the new one. One row if there was one.
-- (Under the cursor row's lock: no other filing of it runs at once.) $8 the clock (Citus
-- takes no volatile function in an UPDATE).
UPDATE queen.dead_letters d SET error = $5, attempts = $6, failed_at = $8, reopened = false
 WHERE d.partition_id = $1 AND d.consumer_group = $2 AND d.txid = $3 AND d.seq = $4 AND d.shard = $7
RETURNING 1;

-- name: dead_letter
-- File a message as a dead letter of a group; the message itself stays (dead_letter_again
-- first: one filed before is rewritten).
INSERT INTO queen.dead_letters (queue_id, partition_id, consumer_group, message_id, txid, seq, error, attempts,
                                shard)
SELECT m.queue_id, m.partition_id, $2, m.message_id, m.txid, m.seq, $5, $6, m.shard
  FROM queen.messages m
 WHERE m.partition_id = $1 AND m.shard = $7 AND m.txid = $3 AND m.seq = $4
ON CONFLICT DO NOTHING;

-- name: now
SELECT clock_timestamp();

-- Queries of src/cluster.rs: which transaction counter the stored ids belong to, and the
-- rebase after a restore. Run with the latest snapshot (cluster.rs reads the committed
-- mapping whatever the caller's isolation level).

-- name: cluster_state
-- The mapping as committed: how many rows there are, whether every one is verified, the
-- offset. One verified row is a settled mapping; anything else (a restored row beside the one
-- CREATE EXTENSION inserted, rows a restore marked unverified, no row) needs a rebase.
SELECT count(*) AS rows, coalesce(bool_and(verified), false) AS verified,
       coalesce(max(xid_offset), 0) AS xid_offset
  FROM queen.cluster;

-- name: cluster_unverify
-- Rows arrived in queen's tables from outside queen (a restore, in this transaction): the
-- mapping is to be decided again once it commits.
UPDATE queen.cluster SET verified = false WHERE verified;

-- name: cluster_lock
-- The rebase, one at a time, and after every transaction that was committing with the old
-- mapping (they hold ROW SHARE from their pre-commit check to the end of their commit).
LOCK TABLE queen.cluster IN EXCLUSIVE MODE;

-- name: cluster_rebase
-- Rebase the database onto this cluster's transaction counter ($1: its system identifier,
-- recorded for people): the new offset puts every transaction id this cluster assigns from
-- now on (none running is older than the snapshot's xmin) above every stored id
-- (queen.messages, the cursors' positions, pending lists and batches, subscription points,
-- discovery points, hints, dead letters, counts), and never goes back. Stored ids stay as
-- they are: to every snapshot of this cluster they are transactions that ended long ago.
-- Visibility points go.
-- Returns the offset.
WITH hi AS MATERIALIZED (
    SELECT greatest(
        -- Per queue through the queue log's index, newest first: never a scan of every message.
        (SELECT max(m.txid) FROM (SELECT DISTINCT queue_id FROM queen.queues
                                  UNION SELECT DISTINCT queue_id FROM queen.partitions) AS q
           CROSS JOIN LATERAL (SELECT txid FROM queen.messages WHERE queue_id = q.queue_id
                                ORDER BY txid DESC, seq DESC LIMIT 1) AS m),
        (SELECT max(greatest(done_txid, fail_txid,
                             (SELECT max(x) FROM unnest(pending_txid || ahead_txid || COALESCE(lease_txid, '{}')
                                                        || COALESCE(lease_xip, '{}')) AS x)))
           FROM queen.cursors),
        (SELECT max(greatest(start_xmax, (SELECT max(x) FROM unnest(start_xip) AS x))) FROM queen.subscriptions),
        (SELECT max(greatest(upto_txid, (SELECT max(x) FROM unnest(pending_txid) AS x))) FROM queen.discovery),
        (SELECT max(greatest(upto_txid, (SELECT max(x) FROM unnest(pending_txid) AS x))) FROM queen.queue_counts),
        (SELECT max(greatest(txid, seen_xmin)) FROM queen.ready),
        (SELECT max(txid) FROM queen.dead_letters),
        0) AS h
), off AS MATERIALIZED (
    -- (The rebasing transaction's own id is left out of its snapshot's xmin: it counts too.)
    SELECT greatest((SELECT max(xid_offset) FROM queen.cluster),
                    hi.h + 1 - least(pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
                                     pg_current_xact_id()::text::bigint),
                    0) AS o FROM hi
), gone AS (
    DELETE FROM queen.cluster
), points AS (
    -- Visibility points (src/max_wait.rs) taken before ids of another counter arrived say
    -- nothing of those: max wait counts from the passes after the rebase.
    DELETE FROM queen.visibility_points
)
INSERT INTO queen.cluster (system_identifier, xid_offset, rebased_at, verified)
SELECT $1, off.o, clock_timestamp(), true FROM off
RETURNING xid_offset;

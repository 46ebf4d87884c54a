-- Queries of src/cluster.rs: which cluster the stored transaction ids belong to.

-- name: cluster_rows
-- How many rows name another cluster than $1 (a restore from there), and the offset of the
-- row that names this one (NULL if none does).
SELECT count(*) FILTER (WHERE system_identifier <> $1) AS foreign_rows,
       max(xid_offset) FILTER (WHERE system_identifier = $1) AS xid_offset
  FROM queen.cluster;

-- name: cluster_claim
-- A database whose queen.cluster is empty (it always has a row; this is a belt for braces):
-- its ids are this cluster's, with no offset.
INSERT INTO queen.cluster (system_identifier, xid_offset)
SELECT $1, 0 WHERE NOT EXISTS (SELECT 1 FROM queen.cluster);

-- name: cluster_lock
-- One rebase at a time; the first queen calls after a restore wait here, once.
LOCK TABLE queen.cluster IN SHARE ROW EXCLUSIVE MODE;

-- name: cluster_rebase
-- Rebase the database onto cluster $1: the new offset puts every transaction id this cluster
-- assigns from now on (none running is older than the snapshot's xmin) above every stored id
-- (queen.messages, the cursors' positions, pending lists and batches, subscription points,
-- discovery points, hints, dead letters, counts). Stored ids stay as they are: to every
-- snapshot of this cluster they are transactions that ended long ago. Returns the offset.
WITH hi AS MATERIALIZED (
    SELECT greatest(
        -- Per queue through the queue log's index, newest first: never a scan of every message.
        (SELECT max(m.txid) FROM (SELECT DISTINCT queue_id FROM queen.queues) AS q
           CROSS JOIN LATERAL (SELECT txid FROM queen.messages WHERE queue_id = q.queue_id
                                ORDER BY txid DESC, seq DESC LIMIT 1) AS m),
        (SELECT max(greatest(done_txid, fail_txid, sub_xmax,
                             (SELECT max(x) FROM unnest(pending_txid || ahead_txid || COALESCE(lease_txid, '{}')
                                                        || COALESCE(lease_xip, '{}') || COALESCE(sub_xip, '{}')) AS x)))
           FROM queen.cursors),
        (SELECT max(greatest(start_xmax, (SELECT max(x) FROM unnest(start_xip) AS x))) FROM queen.subscriptions),
        (SELECT max(greatest(upto_txid, (SELECT max(x) FROM unnest(pending_txid) AS x))) FROM queen.discovery),
        (SELECT max(greatest(upto_txid, (SELECT max(x) FROM unnest(pending_txid) AS x))) FROM queen.queue_counts),
        (SELECT max(txid) FROM queen.ready),
        (SELECT max(txid) FROM queen.dead_letters),
        0) AS h
), off AS MATERIALIZED (
    -- (The rebasing transaction's own id is left out of its snapshot's xmin, and it goes on
    -- to push: it counts too.)
    SELECT greatest(hi.h + 1 - least(pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
                                     pg_current_xact_id()::text::bigint), 0) AS o FROM hi
), gone AS (
    DELETE FROM queen.cluster
)
INSERT INTO queen.cluster (system_identifier, xid_offset, rebased_at)
SELECT $1, off.o, clock_timestamp() FROM off
RETURNING xid_offset;

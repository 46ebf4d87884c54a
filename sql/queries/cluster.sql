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

-- name: cluster_hi
-- The highest stored id in shard $1 (0 on one server; on Citus, one of the node's shards):
-- queen.messages, the cursors' positions, pending lists and batches, subscription points,
-- discovery points, hints, dead letters, counts.
SELECT greatest(
    -- Per queue through the queue log's index, newest first: never a scan of every message.
    (SELECT max(m.txid) FROM (SELECT DISTINCT queue_id FROM queen.queues
                              UNION SELECT DISTINCT queue_id FROM queen.partitions WHERE shard = $1) AS q
       CROSS JOIN LATERAL (SELECT txid FROM queen.messages WHERE queue_id = q.queue_id AND shard = $1
                            ORDER BY txid DESC, seq DESC LIMIT 1) AS m),
    (SELECT max(greatest(done_txid, fail_txid,
                         (SELECT max(x) FROM unnest(pending_txid || ahead_txid || COALESCE(lease_xip, '{}')) AS x),
                         (SELECT max(k.txid) FROM queen.batch_keys(lease_keys) AS k)))
       FROM queen.cursors WHERE shard = $1),
    (SELECT max(greatest(start_xmax, (SELECT max(x) FROM unnest(start_xip) AS x)))
       FROM queen.subscriptions WHERE shard = $1),
    (SELECT max(greatest(upto_txid, (SELECT max(x) FROM unnest(pending_txid) AS x)))
       FROM queen.discovery WHERE shard = $1),
    (SELECT max(greatest(upto_txid, (SELECT max(x) FROM unnest(pending_txid) AS x)))
       FROM queen.queue_counts WHERE shard = $1),
    (SELECT max(greatest(txid, seen_xmin)) FROM queen.ready WHERE shard = $1),
    (SELECT max(txid) FROM queen.dead_letters WHERE shard = $1),
    0) AS h;

-- name: cluster_rebase
-- Rebase the database onto this cluster's transaction counter ($1: its system identifier,
-- recorded for people): the new offset puts every transaction id this cluster assigns from
-- now on (none running is older than the snapshot's xmin) above every stored id ($2, the
-- highest, cluster_hi over every shard the node holds), and never goes back. Stored ids stay
-- as they are: to every snapshot of this cluster they are transactions that ended long ago.
-- Visibility points go.
-- Returns the offset.
WITH off AS MATERIALIZED (
    -- (The rebasing transaction's own id is left out of its snapshot's xmin: it counts too.)
    SELECT greatest((SELECT max(xid_offset) FROM queen.cluster),
                    $2 + 1 - least(pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
                                   pg_current_xact_id()::text::bigint),
                    0) AS o
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

-- The shards on Citus (pg_dist_* are Citus's catalogs, on every node with its metadata:
-- prepared only where queen is distributed).

-- name: citus_shards_arrived
-- Whether this node holds a shard of queen's tables its mapping does not cover yet: one it
-- never settled, or one in another local table than the one it settled (the shard left and
-- came back: Citus created its table again). (A placement whose table is not here yet is
-- settled with none, and arrives when the table does.)
SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_dist_shard sh
      JOIN pg_catalog.pg_dist_placement pl USING (shardid)
     WHERE sh.logicalrelid = 'queen.messages'::regclass
       AND pl.groupid = (SELECT groupid FROM pg_catalog.pg_dist_local_group)
       AND NOT EXISTS (
           SELECT 1 FROM queen.settled_shards s
            WHERE s.shardid = pl.shardid
              AND s.relation IS NOT DISTINCT FROM
                  pg_catalog.to_regclass(pg_catalog.shard_name('queen.messages', pl.shardid))::oid)
) AS arrived;

-- name: citus_settle_shards
-- The shards this node holds, now covered (a rebase settled the mapping above their ids), each
-- with the local table that holds it; the shards it no longer holds are forgotten.
WITH here AS MATERIALIZED (
    SELECT pl.shardid,
           pg_catalog.to_regclass(pg_catalog.shard_name('queen.messages', pl.shardid))::oid AS relation
      FROM pg_catalog.pg_dist_shard sh
      JOIN pg_catalog.pg_dist_placement pl USING (shardid)
     WHERE sh.logicalrelid = 'queen.messages'::regclass
       AND pl.groupid = (SELECT groupid FROM pg_catalog.pg_dist_local_group)
), gone AS (
    DELETE FROM queen.settled_shards s WHERE s.shardid NOT IN (SELECT shardid FROM here)
)
INSERT INTO queen.settled_shards (shardid, relation)
SELECT shardid, relation FROM here
    ON CONFLICT (shardid) DO UPDATE SET relation = EXCLUDED.relation, settled_at = clock_timestamp();

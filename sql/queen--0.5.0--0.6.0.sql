-- queen 0.5.0 → 0.6.0.
-- - A timer keeps the role that scheduled it: the firing pushes only while that role may still
--   push to the queue, and cancels it otherwise (docs/api.md, queen_schedule); the totals count
--   such cancels (maintenance_stats.timers_cancelled). Timers pending from before have no such
--   role and fire as they would have.
-- - A dead letter whose message a seek put back before the group's position is marked
--   `reopened`; once the group finishes the message again it no longer stands (the view leaves
--   it out, a replay delivers nothing for it). Dead letters filed before stand as they were.
-- - A page of candidates for a pop is in one total order, due time then partition, which the
--   index of hints now holds: pages that end among equal due times read the same hints by
--   hand and by statement.
-- - queen_lock keeps locks in lock namespaces granted as key/value namespaces (docs/api.md,
--   queen_lock): the default one, `queen-locks`, keeps its permits where they were and is granted
--   as before, so nothing moves. A permit records the role that took it, and only that role
--   (or one with its privileges) renews or releases it; permits taken before record none, so
--   only superusers and the extension's owner act on them until they expire. (No table
--   changes for it: the rules are the library's.)

-- Candidates in one total order, due time then partition (pop.sql candidates, direct.rs).
DROP INDEX queen.ready_next;
CREATE INDEX ready_next ON queen.ready (queue_id, consumer_group, ready_at, partition_id);

ALTER TABLE queen.timers ADD COLUMN scheduled_by regrole;
ALTER TABLE queen.dead_letters ADD COLUMN reopened boolean NOT NULL DEFAULT false;
ALTER TABLE queen.maintenance_totals ADD COLUMN timers_cancelled bigint NOT NULL DEFAULT 0;

CREATE OR REPLACE VIEW queen.maintenance_stats WITH (security_barrier) AS
SELECT coalesce(t.passes, 0) AS passes, coalesce(t.failed_passes, 0) + u.failed_passes AS failed_passes,
       coalesce(t.retention_deleted, 0) AS retention_deleted,
       coalesce(t.completed_retention_deleted, 0) AS completed_retention_deleted,
       coalesce(t.max_wait_dead_lettered, 0) AS max_wait_dead_lettered,
       coalesce(t.registry_rows_folded, 0) AS registry_rows_folded,
       coalesce(t.partitions_removed, 0) AS partitions_removed,
       coalesce(t.partitions_restored, 0) AS partitions_restored,
       t.last_pass_at, t.last_pass_seconds, t.last_report, t.last_failure_at, t.last_error,
       u.skipped_passes, coalesce(t.timers_cancelled, 0) AS timers_cancelled
  FROM queen_worker_unrecorded() u
  LEFT JOIN queen.maintenance_totals t ON true
 WHERE t.singleton OR u.failed_passes > 0 OR u.skipped_passes > 0;

CREATE OR REPLACE VIEW queen.dead_letters_view WITH (security_barrier) AS
SELECT q.name AS queue,
       COALESCE(m.partition, p.name) AS partition,
       NULLIF(d.consumer_group, '__QUEUE_MODE__') AS consumer_group,
       d.message_id,
       COALESCE(m.transaction_id, d.message_id::text) AS transaction_id,
       m.payload,
       d.error,
       d.attempts,
       m.created_at,
       d.failed_at,
       d.partition_id,
       m.trace_id
  FROM queen.dead_letters d
  LEFT JOIN queen.messages m ON m.partition_id = d.partition_id AND m.txid = d.txid AND m.seq = d.seq
  LEFT JOIN LATERAL (SELECT name FROM queen.queues WHERE queue_id = d.queue_id ORDER BY created_at LIMIT 1) q ON true
  LEFT JOIN LATERAL (SELECT name FROM queen.partitions WHERE partition_id = d.partition_id ORDER BY created_at LIMIT 1) p ON true
 WHERE queen.allowed(q.name, 'read')
   AND NOT (d.reopened AND EXISTS (
        -- A dead letter whose message the group finished again since a seek put it back
        -- (completed it: filed anew, it would not be reopened): it no longer stands.
        SELECT 1 FROM queen.cursors c
         WHERE c.partition_id = d.partition_id AND c.consumer_group = d.consumer_group AND c.shard = d.shard
           AND (EXISTS (SELECT FROM unnest(c.ahead_txid, c.ahead_seq) AS a(t, s) WHERE a.t = d.txid AND a.s = d.seq)
                OR CASE WHEN d.txid = ANY (c.pending_txid)
                        THEN d.seq <= (SELECT x.s FROM unnest(c.pending_txid, c.pending_seq) AS x(t, s)
                                        WHERE x.t = d.txid LIMIT 1)
                        ELSE (d.txid, d.seq) <= (c.done_txid, c.done_seq) END)));

-- A shard that left this node and came back is an arrival again (src/cluster.rs): known by the
-- local table that holds it. Rows from before name none, and are settled again at the next
-- check (a rebase that moves nothing when the mapping already covers them).
ALTER TABLE queen.settled_shards ADD COLUMN relation oid;

-- A group's subscription owed to a shard its first pop could not reach (src/route.rs).
CREATE TABLE queen.subscriptions_owed (
    queue_id       uuid        NOT NULL,
    consumer_group text        NOT NULL,
    shard          integer     NOT NULL,
    mode           text        NOT NULL,
    from_at        timestamptz,
    owed_since     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (queue_id, consumer_group, shard)
);

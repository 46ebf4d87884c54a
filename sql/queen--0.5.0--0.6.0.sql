-- queen 0.5.0 → 0.6.0.
-- - A timer keeps the role that scheduled it: the firing pushes only while that role may still
--   push to the queue, and cancels it otherwise (docs/api.md, queen_schedule); the totals count
--   such cancels (maintenance_stats.timers_cancelled). Timers pending from before have no such
--   role and fire as they would have.
-- - queen_lock keeps locks in lock namespaces granted as key/value namespaces (docs/api.md,
--   queen_lock): the default one, `queen-locks`, keeps its permits where they were and is granted
--   as before, so nothing moves. A permit records the role that took it, and only that role
--   (or one with its privileges) renews or releases it; permits taken before record none, so
--   only superusers and the extension's owner act on them until they expire. No table
--   changes: the rules are the library's.

ALTER TABLE queen.timers ADD COLUMN scheduled_by regrole;
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

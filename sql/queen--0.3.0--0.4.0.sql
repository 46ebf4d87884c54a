-- queen 0.3.0 → 0.4.0 (issue 21): no role reads or blocks what it was not granted, and
-- maintenance and deletes lose nothing to an open transaction.
-- - Every view is a security barrier: a caller's own conditions run only on the rows the view
--   lets through.
-- - queen's locks are its own (src/locks.rs), which no SQL can take: queen.lock_pair(uuid,
--   text) for the seek's query, closed to PUBLIC.
-- - queen.maintenance_stats adds what the worker could not record (queen_worker_unrecorded():
--   failures, and passes skipped because another was running).
-- The library refuses a schema of another version until this script has run.
--
-- Written by hand from the difference between the two versions' generated install scripts
-- (docs/development.md, "Cutting a release"); scripts/upgrade-test checks it against every
-- release.

\echo Use "ALTER EXTENSION queen UPDATE TO '0.4.0'" to load this file. \quit

ALTER VIEW queen.queue_stats SET (security_barrier = true);
ALTER VIEW queen.group_lag SET (security_barrier = true);
ALTER VIEW queen.dead_letters_view SET (security_barrier = true);
ALTER VIEW queen.grants SET (security_barrier = true);
ALTER VIEW queen.waiting_pops SET (security_barrier = true);

-- queen::api::locks::queen::lock_pair
CREATE  FUNCTION queen."lock_pair"(
	"partition" uuid, /* pgrx :: Uuid */
	"consumer_group" TEXT /* &str */
) RETURNS bool /* bool */
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'lock_pair_wrapper';
REVOKE EXECUTE ON FUNCTION queen.lock_pair(uuid, text) FROM PUBLIC;

-- queen::api::maintain::queen_worker_unrecorded
CREATE  FUNCTION "queen_worker_unrecorded"() RETURNS TABLE (
	"failed_passes" bigint,  /* i64 */
	"skipped_passes" bigint  /* i64 */
)
STRICT VOLATILE PARALLEL SAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queen_worker_unrecorded_wrapper';

CREATE OR REPLACE VIEW queen.maintenance_stats WITH (security_barrier) AS
SELECT coalesce(t.passes, 0) AS passes, coalesce(t.failed_passes, 0) + u.failed_passes AS failed_passes,
       coalesce(t.retention_deleted, 0) AS retention_deleted,
       coalesce(t.completed_retention_deleted, 0) AS completed_retention_deleted,
       coalesce(t.max_wait_dead_lettered, 0) AS max_wait_dead_lettered,
       coalesce(t.registry_rows_folded, 0) AS registry_rows_folded,
       coalesce(t.partitions_removed, 0) AS partitions_removed,
       coalesce(t.partitions_restored, 0) AS partitions_restored,
       t.last_pass_at, t.last_pass_seconds, t.last_report, t.last_failure_at, t.last_error,
       u.skipped_passes
  FROM queen_worker_unrecorded() u
  LEFT JOIN queen.maintenance_totals t ON true
 WHERE t.singleton OR u.failed_passes > 0 OR u.skipped_passes > 0;

-- Max wait counts from a push's commit (src/max_wait.rs).
-- Visibility points (src/max_wait.rs): what a maintenance pass's snapshot saw, in stored ids
-- (transactions below seen_xmax and not in seen_xip had ended), and when. A message has waited
-- maxWaitTimeSeconds once the newest point older than that saw it. Thinned by every pass;
-- not dumped (a restored database counts waits from its own passes).
CREATE TABLE queen.visibility_points (
    taken_at timestamptz PRIMARY KEY,
    seen_xmax bigint     NOT NULL,
    seen_xip  bigint[]   NOT NULL
);

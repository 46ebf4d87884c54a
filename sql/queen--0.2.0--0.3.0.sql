-- queen 0.2.0 → 0.3.0 (issue 20): positions that no seek, late first pop, rollback or restore
-- loses.
-- - A seek's subscription row replaces every subscription of the group that began before it
--   (queen.subscriptions.seek, queen.effective_subscriptions), also a first pop's that commits
--   after it; sub_key names the row that heads a group's subscription.
-- - A cursor row keeps the start it was made with (SPEC §3.2: order wins): the 'new' point
--   rows recorded (cursors.sub_xmax, sub_xip) is gone, and so is what group_lag counted for it.
-- - queen.written_here(xmin): discovery leaves out cursor rows a rollback may take back.
-- - The mapping of stored transaction ids is settled by the counter, not the system
--   identifier (queen.cluster.verified), and rows that arrive in queen's tables from outside
--   queen (a restore) unsettle it (queen.rows_arrived(), statement triggers: sql/restore.sql).
-- The library refuses a schema of another version until this script has run.
--
-- Written by hand from the difference between the two versions' generated install scripts
-- (docs/development.md, "Cutting a release"); scripts/upgrade-test checks it against 0.2.0 and
-- 0.1.0 databases.

\echo Use "ALTER EXTENSION queen UPDATE TO '0.3.0'" to load this file. \quit

ALTER TABLE queen.subscriptions ADD COLUMN seek boolean NOT NULL DEFAULT false;

CREATE OR REPLACE VIEW queen.effective_subscriptions AS
SELECT o.queue_id, o.consumer_group, o.mode, c.from_ts, c.start_xmax, x.xip AS start_xip,
       o.mode || ':' || COALESCE(extract(epoch FROM c.from_ts)::text, '') || ':'
         || COALESCE(c.start_xmax::text, '') || ':' || array_to_string(x.xip, ',') || ':'
         || extract(epoch FROM o.since)::text || CASE WHEN o.seek THEN ':seek' ELSE '' END AS sub_key
  FROM (SELECT DISTINCT ON (queue_id, consumer_group) queue_id, consumer_group, mode, seek, created_at AS since
          FROM queen.subscriptions
         ORDER BY queue_id, consumer_group, seek DESC, CASE WHEN seek THEN created_at END DESC NULLS LAST,
                  created_at) AS o
  CROSS JOIN LATERAL (
        SELECT min(s.start_xmax) FILTER (WHERE s.mode = 'new') AS start_xmax,
               min(s.from_ts) FILTER (WHERE s.mode = 'from') AS from_ts
          FROM queen.subscriptions s
         WHERE s.queue_id = o.queue_id AND s.consumer_group = o.consumer_group AND s.mode = o.mode
           AND s.seek = o.seek AND (NOT o.seek OR s.created_at = o.since)) AS c
  CROSS JOIN LATERAL (
        SELECT CASE WHEN o.mode = 'new' THEN ARRAY(
                    SELECT DISTINCT u.x FROM queen.subscriptions s CROSS JOIN LATERAL unnest(s.start_xip) AS u(x)
                     WHERE s.queue_id = o.queue_id AND s.consumer_group = o.consumer_group AND s.mode = 'new'
                       AND s.seek = o.seek AND (NOT o.seek OR s.created_at = o.since)
                       AND u.x < c.start_xmax ORDER BY u.x)
                    ELSE '{}'::bigint[] END AS xip) AS x;

CREATE OR REPLACE VIEW queen.group_lag AS
SELECT q.name AS queue,
       NULLIF(s.consumer_group, '__QUEUE_MODE__') AS consumer_group,
       p.name AS partition,
       greatest(after.n + behind.n + by_time.n - pos.ahead, 0) AS pending,
       -- The head of the line: the first message in delivery order the group has yet to finish
       -- there (messages finished ahead of the frontier skipped). Read as one row per piece, not
       -- as min(created_at) over every pending message, which read each pending row: 42 s for
       -- 10 M pending instead of an index-only count (examples/monitoring/README.md).
       least((SELECT m.created_at FROM queen.messages m
               WHERE m.partition_id = p.partition_id AND (m.txid, m.seq) > (pos.t, pos.q)
                 AND NOT pos.from_time
                 AND NOT EXISTS (SELECT FROM unnest(c.ahead_txid, c.ahead_seq) AS a(t, s)
                                  WHERE a.t = m.txid AND a.s = m.seq)
               ORDER BY m.txid, m.seq LIMIT 1),
             (SELECT min(h.created_at) FROM unnest(pos.pt, pos.ps) AS x(t, s)
               CROSS JOIN LATERAL (
                     SELECT m.created_at FROM queen.messages m
                      WHERE m.partition_id = p.partition_id AND m.txid = x.t AND m.seq > x.s
                        AND NOT pos.from_time
                        AND NOT EXISTS (SELECT FROM unnest(c.ahead_txid, c.ahead_seq) AS a(t, s)
                                         WHERE a.t = m.txid AND a.s = m.seq)
                      ORDER BY m.seq LIMIT 1) h),
             by_time.oldest) AS oldest_pending,
       CASE WHEN c.lease_expires_at > clock_timestamp() THEN c.lease_id END AS lease_id,
       CASE WHEN c.lease_expires_at > clock_timestamp() THEN c.lease_expires_at END AS lease_expires_at
  FROM queen.effective_subscriptions s
  JOIN (SELECT DISTINCT ON (queue_id) queue_id, name FROM queen.queues
         ORDER BY queue_id, created_at) q USING (queue_id)
  JOIN (SELECT DISTINCT ON (partition_id) partition_id, queue_id, name FROM queen.partitions
         ORDER BY partition_id, created_at) p USING (queue_id)
  LEFT JOIN queen.cursors c ON c.partition_id = p.partition_id AND c.consumer_group = s.consumer_group
  CROSS JOIN LATERAL (
        SELECT coalesce(c.done_txid, CASE WHEN s.mode = 'new' THEN s.start_xmax ELSE 0 END) AS t,
               coalesce(c.done_seq, 0) AS q,
               coalesce(c.pending_txid, CASE WHEN s.mode = 'new' THEN s.start_xip ELSE '{}' END) AS pt,
               coalesce(c.pending_seq, CASE WHEN s.mode = 'new'
                                            THEN array_fill(0::bigint, ARRAY[cardinality(s.start_xip)])
                                            ELSE '{}' END) AS ps,
               coalesce(cardinality(c.ahead_txid), 0) AS ahead,
               (c.partition_id IS NULL AND s.mode = 'from') AS from_time) pos
  CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM queen.messages m
         WHERE m.partition_id = p.partition_id AND (m.txid, m.seq) > (pos.t, pos.q) AND NOT pos.from_time) after
  CROSS JOIN LATERAL (
        SELECT count(*) AS n
          FROM unnest(pos.pt, pos.ps) AS x(t, s)
          JOIN queen.messages m ON m.partition_id = p.partition_id AND m.txid = x.t AND m.seq > x.s
         WHERE NOT pos.from_time) behind
  CROSS JOIN LATERAL (
        SELECT count(*) AS n, min(m.created_at) AS oldest FROM queen.messages m
         WHERE pos.from_time AND m.partition_id = p.partition_id AND m.created_at >= s.from_ts) by_time
 WHERE queen.allowed(q.name, 'read');

ALTER TABLE queen.cursors DROP COLUMN sub_xmax, DROP COLUMN sub_xip;

-- queen::api::cluster::queen::written_here
CREATE  FUNCTION queen."written_here"(
	"xmin" bigint /* i64 */
) RETURNS bool /* bool */
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'written_here_wrapper';
REVOKE EXECUTE ON FUNCTION queen.written_here(bigint) FROM PUBLIC;

-- The mapping of stored ids (src/cluster.rs): one verified row is a settled one. A 0.2.0
-- database whose one row names this cluster is settled; anything else (a restore 0.2.0 had not
-- rebased yet) is settled by the first call.
ALTER TABLE queen.cluster ADD COLUMN verified boolean NOT NULL DEFAULT false;
UPDATE queen.cluster SET verified = true
 WHERE (SELECT count(*) FROM queen.cluster) = 1
   AND system_identifier = (SELECT system_identifier FROM pg_catalog.pg_control_system());

-- queen::api::cluster::queen::rows_arrived
CREATE FUNCTION queen."rows_arrived"()
	RETURNS TRIGGER
	LANGUAGE c
	AS 'MODULE_PATHNAME', 'rows_arrived_wrapper';

-- Noticing a restore (src/cluster.rs): rows that reach a table holding transaction ids from
-- outside queen — a restore's COPY, or an INSERT someone runs — unsettle the mapping of stored
-- ids, which is settled again (rebased onto this cluster's counter if it is behind) before any
-- queen call uses it. Statement triggers: one call per statement, which returns at once for
-- queen's own inserts. Created after CREATE EXTENSION's own row of queen.cluster.
CREATE TRIGGER rows_arrived BEFORE INSERT ON queen.cluster FOR EACH STATEMENT EXECUTE FUNCTION queen.rows_arrived();
CREATE TRIGGER rows_arrived BEFORE INSERT ON queen.messages FOR EACH STATEMENT EXECUTE FUNCTION queen.rows_arrived();
CREATE TRIGGER rows_arrived BEFORE INSERT ON queen.cursors FOR EACH STATEMENT EXECUTE FUNCTION queen.rows_arrived();
CREATE TRIGGER rows_arrived BEFORE INSERT ON queen.subscriptions FOR EACH STATEMENT EXECUTE FUNCTION queen.rows_arrived();
CREATE TRIGGER rows_arrived BEFORE INSERT ON queen.ready FOR EACH STATEMENT EXECUTE FUNCTION queen.rows_arrived();
CREATE TRIGGER rows_arrived BEFORE INSERT ON queen.discovery FOR EACH STATEMENT EXECUTE FUNCTION queen.rows_arrived();
CREATE TRIGGER rows_arrived BEFORE INSERT ON queen.dead_letters FOR EACH STATEMENT EXECUTE FUNCTION queen.rows_arrived();
CREATE TRIGGER rows_arrived BEFORE INSERT ON queen.queue_counts FOR EACH STATEMENT EXECUTE FUNCTION queen.rows_arrived();

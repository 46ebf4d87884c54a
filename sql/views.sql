-- queen's views and what other roles may use (semantics §9, §11). Created after the functions
-- (the views call queen.allowed): the last part of the install script.
--
-- The views read the tables as their owner, the extension's owner, and show a role only the
-- queues it may read (queen.allowed: `read`, or superuser, or the owner's privileges). The
-- tables themselves stay closed: no privilege on them is granted to anyone.
--
-- Every view is a security barrier: the planner runs a caller's own conditions only on the
-- rows the view lets through (a leakproof comparison, `queue = 'orders'`, still reaches the
-- index), so no function or cast in a caller's WHERE sees another queue's rows — a payload
-- that fails a cast would otherwise be printed in the error.

-- One row per queue. `messages` is maintenance's count (queue_counts) plus the messages
-- pushed since, counted through the queue-log index: cheap on any queue that maintenance runs on.
CREATE VIEW queen.queue_stats WITH (security_barrier) AS
SELECT q.name AS queue,
       (SELECT count(DISTINCT p.partition_id) FROM queen.partitions p WHERE p.queue_id = q.queue_id) AS partitions,
       pt.counted
         + (SELECT count(*) FROM queen.messages m
             WHERE m.queue_id = q.queue_id AND (m.txid, m.seq) > (pt.upto_txid, pt.upto_seq))
         + (SELECT count(*) FROM unnest(pt.pending_txid) AS x
              JOIN queen.messages m ON m.queue_id = q.queue_id AND m.txid = x) AS messages,
       (SELECT count(DISTINCT s.consumer_group) FROM queen.subscriptions s WHERE s.queue_id = q.queue_id) AS consumer_groups,
       (SELECT count(*) FROM queen.dead_letters d WHERE d.queue_id = q.queue_id) AS dead_letters,
       (SELECT m.created_at FROM queen.messages m WHERE m.queue_id = q.queue_id
         ORDER BY m.txid, m.seq LIMIT 1) AS oldest_message,
       (SELECT m.created_at FROM queen.messages m WHERE m.queue_id = q.queue_id
         ORDER BY m.txid DESC, m.seq DESC LIMIT 1) AS newest_message
  FROM (SELECT DISTINCT ON (queue_id) queue_id, name FROM queen.queues
         ORDER BY queue_id, created_at) q
  CROSS JOIN LATERAL (
        SELECT coalesce(c.counted, 0) AS counted, coalesce(c.upto_txid, 0) AS upto_txid,
               coalesce(c.upto_seq, 0) AS upto_seq, coalesce(c.pending_txid, '{}') AS pending_txid
          FROM (SELECT 1) AS one LEFT JOIN queen.queue_counts c ON c.queue_id = q.queue_id) pt
 WHERE queen.allowed(q.name, 'read');

-- One row per partition of a queue for each group subscribed to it (queue mode as NULL),
-- partitions the group has not popped yet included. `pending` counts, through the partition
-- index, the messages after the group's frontier plus those of its pending transactions after
-- their positions, less those finished out of order: its cost is that of the pending
-- messages, never of the partition's history. A group that never popped a partition counts
-- from where its subscription starts there.
CREATE VIEW queen.group_lag WITH (security_barrier) AS
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

-- Dead letters with their messages (a message retention removed shows NULL payload), but those
-- the group has finished again since a seek moved it back before them (semantics §3.4).
CREATE VIEW queen.dead_letters_view WITH (security_barrier) AS
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

-- Who may use which queue: an admin sees every grant, another role those of the roles whose
-- privileges it has.
CREATE VIEW queen.grants WITH (security_barrier) AS
SELECT g.role, g.queue, g.privilege, g.granted_at
  FROM queen.privileges g
 WHERE queen.is_admin() OR pg_catalog.pg_has_role(g.role::oid, 'USAGE');

-- What maintenance has done in this database (queen.maintenance_totals), with what the
-- background worker could not write there (queen_worker_unrecorded(): failures it could not
-- record, passes skipped because another was running): no row before the first pass. Totals
-- over every queue: for pg_monitor, superusers and the owner, as the waiting pops are.
CREATE VIEW queen.maintenance_stats WITH (security_barrier) AS
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

GRANT USAGE ON SCHEMA queen TO PUBLIC;
GRANT SELECT ON queen.queue_stats, queen.group_lag, queen.dead_letters_view, queen.grants TO PUBLIC;
-- queen's own id functions are for its queries, which run as the owner.
REVOKE EXECUTE ON FUNCTION queen.txid(), queen.own_txid(), queen.xid_offset(), queen.written_here(bigint),
                           queen.lock_pair(uuid, text), queen.batch_keys(bytea),
                           queen.pack_keys(bigint[], bigint[]) FROM PUBLIC;
-- A batch's keys are joined to their messages by the primary key, one probe each: estimated
-- as unnest() of an array column is (10 rows), not as a function's default 1 000, which made
-- the generic plan of ack_lease_lock hash every message of the partition.
ALTER FUNCTION queen.batch_keys(bytea) ROWS 10;
-- Distributing queen is the superuser's (sql/distribute.sql).
REVOKE EXECUTE ON FUNCTION queen_distribute(integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION queen.citus_views() FROM PUBLIC;
-- The waiting pops show backend pids: for superusers, the owner and pg_monitor
-- (queen_waiting_pops checks it too).
GRANT SELECT ON queen.waiting_pops TO pg_monitor;
GRANT SELECT ON queen.maintenance_stats TO pg_monitor;

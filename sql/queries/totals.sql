-- Queries of src/totals.rs: on Citus, the views' answers for the whole cluster, read one shard
-- at a time (each statement names shard $1 in every read, so Citus runs it on that shard's
-- worker alone) and added up by the coordinator. Each is the view of sql/views.sql of the same
-- name, for one shard; the_views_read_per_shard_are_the_views (tests/integration/tests/citus.rs)
-- holds them equal on one server. Sections named `per_shard_…` are planned per call (spi.rs).

-- name: queue_names
-- Every queue's name (the registry, a reference table): the earliest row's, as the views take it.
SELECT DISTINCT ON (queue_id) queue_id, name FROM queen.queues ORDER BY queue_id, created_at;

-- name: per_shard_queue_stats
-- queue_stats in shard $1: per queue with partitions or subscriptions there, its partitions,
-- messages (maintenance's count of the shard plus what came since), the groups subscribed
-- there (the coordinator counts them once over every shard), dead letters, and its oldest and
-- newest message there.
SELECT pq.queue_id,
       (SELECT count(DISTINCT p.partition_id) FROM queen.partitions p
         WHERE p.queue_id = pq.queue_id AND p.shard = $1) AS partitions,
       coalesce(pt.counted, 0)
         + (SELECT count(*) FROM queen.messages m
             WHERE m.queue_id = pq.queue_id AND m.shard = $1
               AND (m.txid, m.seq) > (coalesce(pt.upto_txid, 0), coalesce(pt.upto_seq, 0)))
         + (SELECT count(*) FROM unnest(coalesce(pt.pending_txid, '{}')) AS x
              JOIN queen.messages m ON m.queue_id = pq.queue_id AND m.shard = $1 AND m.txid = x) AS messages,
       (SELECT coalesce(array_agg(DISTINCT s.consumer_group), '{}') FROM queen.subscriptions s
         WHERE s.queue_id = pq.queue_id AND s.shard = $1) AS groups,
       (SELECT count(*) FROM queen.dead_letters d WHERE d.queue_id = pq.queue_id AND d.shard = $1) AS dead_letters,
       (SELECT m.created_at FROM queen.messages m WHERE m.queue_id = pq.queue_id AND m.shard = $1
         ORDER BY m.txid, m.seq LIMIT 1) AS oldest_message,
       (SELECT m.created_at FROM queen.messages m WHERE m.queue_id = pq.queue_id AND m.shard = $1
         ORDER BY m.txid DESC, m.seq DESC LIMIT 1) AS newest_message
  FROM (SELECT queue_id FROM queen.partitions WHERE shard = $1
        UNION SELECT queue_id FROM queen.subscriptions WHERE shard = $1) AS pq
  LEFT JOIN queen.queue_counts pt ON pt.queue_id = pq.queue_id AND pt.shard = $1;

-- name: per_shard_group_lag
-- group_lag in shard $1: one row per partition there for each group subscribed there (with the
-- group's subscription in the shard read as queen.effective_subscriptions reads it).
SELECT s.queue_id,
       NULLIF(s.consumer_group, '__QUEUE_MODE__') AS consumer_group,
       p.name AS partition,
       greatest(after.n + behind.n + by_time.n - pos.ahead, 0) AS pending,
       least((SELECT m.created_at FROM queen.messages m
               WHERE m.partition_id = p.partition_id AND m.shard = $1 AND (m.txid, m.seq) > (pos.t, pos.q)
                 AND NOT pos.from_time
                 AND NOT EXISTS (SELECT FROM unnest(c.ahead_txid, c.ahead_seq) AS a(t, s)
                                  WHERE a.t = m.txid AND a.s = m.seq)
               ORDER BY m.txid, m.seq LIMIT 1),
             (SELECT min(h.created_at) FROM unnest(pos.pt, pos.ps) AS x(t, s)
               CROSS JOIN LATERAL (
                     SELECT m.created_at FROM queen.messages m
                      WHERE m.partition_id = p.partition_id AND m.shard = $1 AND m.txid = x.t AND m.seq > x.s
                        AND NOT pos.from_time
                        AND NOT EXISTS (SELECT FROM unnest(c.ahead_txid, c.ahead_seq) AS a(t, s)
                                         WHERE a.t = m.txid AND a.s = m.seq)
                      ORDER BY m.seq LIMIT 1) h),
             by_time.oldest) AS oldest_pending,
       CASE WHEN c.lease_expires_at > clock_timestamp() THEN c.lease_id END AS lease_id,
       CASE WHEN c.lease_expires_at > clock_timestamp() THEN c.lease_expires_at END AS lease_expires_at
  FROM (
     SELECT o.queue_id, o.consumer_group, o.mode, c.from_ts, c.start_xmax, x.xip AS start_xip
       FROM (SELECT DISTINCT ON (queue_id, consumer_group) queue_id, consumer_group, mode, seek, created_at AS since
               FROM queen.subscriptions WHERE shard = $1
              ORDER BY queue_id, consumer_group, seek DESC, CASE WHEN seek THEN created_at END DESC NULLS LAST,
                       created_at) AS o
       CROSS JOIN LATERAL (
             SELECT min(s.start_xmax) FILTER (WHERE s.mode = 'new') AS start_xmax,
                    min(s.from_ts) FILTER (WHERE s.mode = 'from') AS from_ts
               FROM queen.subscriptions s
              WHERE s.queue_id = o.queue_id AND s.consumer_group = o.consumer_group AND s.shard = $1
                AND s.mode = o.mode AND s.seek = o.seek AND (NOT o.seek OR s.created_at = o.since)) AS c
       CROSS JOIN LATERAL (
             SELECT COALESCE(array_agg(DISTINCT u.x ORDER BY u.x), '{}'::bigint[]) AS xip
               FROM queen.subscriptions s CROSS JOIN LATERAL unnest(s.start_xip) AS u(x)
              WHERE o.mode = 'new'
                AND s.queue_id = o.queue_id AND s.consumer_group = o.consumer_group AND s.shard = $1
                AND s.mode = 'new'
                AND s.seek = o.seek AND (NOT o.seek OR s.created_at = o.since)
                AND u.x < c.start_xmax) AS x) s
  JOIN (SELECT DISTINCT ON (partition_id) partition_id, queue_id, name FROM queen.partitions WHERE shard = $1
         ORDER BY partition_id, created_at) p USING (queue_id)
  LEFT JOIN queen.cursors c ON c.partition_id = p.partition_id AND c.consumer_group = s.consumer_group AND c.shard = $1
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
         WHERE m.partition_id = p.partition_id AND m.shard = $1 AND (m.txid, m.seq) > (pos.t, pos.q) AND NOT pos.from_time) after
  CROSS JOIN LATERAL (
        SELECT count(*) AS n
          FROM unnest(pos.pt, pos.ps) AS x(t, s)
          JOIN queen.messages m ON m.partition_id = p.partition_id AND m.shard = $1 AND m.txid = x.t AND m.seq > x.s
         WHERE NOT pos.from_time) behind
  CROSS JOIN LATERAL (
        SELECT count(*) AS n, min(m.created_at) AS oldest FROM queen.messages m
         WHERE pos.from_time AND m.partition_id = p.partition_id AND m.shard = $1 AND m.created_at >= s.from_ts) by_time;

-- name: per_shard_dead_letters
-- dead_letters_view in shard $1.
SELECT d.queue_id,
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
  LEFT JOIN queen.messages m
         ON m.partition_id = d.partition_id AND m.txid = d.txid AND m.seq = d.seq AND m.shard = $1
  LEFT JOIN LATERAL (SELECT name FROM queen.partitions
                      WHERE partition_id = d.partition_id AND shard = $1 ORDER BY created_at LIMIT 1) p ON true
 WHERE d.shard = $1
   AND NOT (d.reopened AND EXISTS (
        -- A dead letter whose message the group finished again since a seek put it back
        -- (completed it: filed anew, it would not be reopened): it no longer stands.
        SELECT 1 FROM queen.cursors c
         WHERE c.partition_id = d.partition_id AND c.consumer_group = d.consumer_group AND c.shard = $1
           AND (EXISTS (SELECT FROM unnest(c.ahead_txid, c.ahead_seq) AS a(t, s) WHERE a.t = d.txid AND a.s = d.seq)
                OR CASE WHEN d.txid = ANY (c.pending_txid)
                        THEN d.seq <= (SELECT x.s FROM unnest(c.pending_txid, c.pending_seq) AS x(t, s)
                                        WHERE x.t = d.txid LIMIT 1)
                        ELSE (d.txid, d.seq) <= (c.done_txid, c.done_seq) END)));

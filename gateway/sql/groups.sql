-- GET /api/v1/consumer-groups: one row per (group, queue), summed over the partitions.
SELECT COALESCE(consumer_group, '__QUEUE_MODE__') AS consumer_group, queue,
       count(*) AS partitions, sum(pending)::bigint AS pending, min(oldest_pending) AS oldest_pending,
       count(lease_id) AS leases
  FROM queen.group_lag
 GROUP BY consumer_group, queue
 ORDER BY 1, 2

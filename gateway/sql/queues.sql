-- GET /api/v1/resources/queues[/{queue}]: NULL = every queue the role may read.
SELECT queue, partitions::bigint, messages::bigint, consumer_groups::bigint, dead_letters::bigint,
       oldest_message, newest_message
  FROM queen.queue_stats
 WHERE $1::text IS NULL OR queue = $1
 ORDER BY queue

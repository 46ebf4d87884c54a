-- GET /api/v1/dlq: a page of a queue's dead letters, newest first, with the number of all that
-- match. The view shows only queues the connecting role may read. $3 = true filters on the
-- group in $2 (NULL there meaning queue mode).
SELECT queue, partition, partition_id, consumer_group, message_id, transaction_id, payload,
       trace_id, error, attempts::int, created_at, failed_at, count(*) OVER () AS total
  FROM queen.dead_letters_view
 WHERE ($1::text IS NULL OR queue = $1)
   AND (NOT $3::bool OR consumer_group IS NOT DISTINCT FROM $2::text)
   AND ($4::text IS NULL OR partition = $4)
   AND ($5::timestamptz IS NULL OR failed_at >= $5)
   AND ($6::timestamptz IS NULL OR failed_at < $6)
 ORDER BY failed_at DESC, message_id
 LIMIT $7::bigint OFFSET $8::bigint

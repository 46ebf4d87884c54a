-- GET /api/v1/pop/queue/{queue}[/partition/{partition}]; lease_seconds ($10) NULL: the queue's leaseTime.
SELECT message_id, transaction_id, queue, partition, partition_id, payload, trace_id, created_at,
       consumer_group, lease_id, lease_expires_at, attempt
  FROM queen_pop($1::text, $2::text, $3::int, $4::text, $5::int, $6::int, $10::int, $7::bool,
                 $8::text, $9::timestamptz)

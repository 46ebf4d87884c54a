-- POST /api/v1/push and a transaction's push operations: the batch form, one statement for every
-- item of the request (all or nothing).
SELECT idx, message_id, transaction_id, queue, partition, partition_id, status
  FROM queen_push($1::jsonb)

-- POST /api/v1/ack, /api/v1/ack/batch and a transaction's ack operations: the batch form, which
-- addresses each message by transactionId + partitionId (one probe of the unique index
-- messages_transaction_id).
SELECT idx, message_id, success, error, lease_released, dead_lettered
  FROM queen_ack($1::jsonb)

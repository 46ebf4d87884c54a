-- GET /api/v1/messages/{partitionId}/{transactionId}: the message and its groups (NULL: none
-- the role may read).
SELECT queen_message($1::uuid, $2::text)

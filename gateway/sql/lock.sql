-- POST /api/v1/locks: queen_lock, one result per operation.
SELECT r FROM queen_lock($1::jsonb) AS r

-- DELETE /api/v1/consumer-groups/{group}[/queues/{queue}]: the group's cursors, leases,
-- subscription and dead letters, on one queue or (NULL) all.
SELECT queen_delete_group($1::text, $2::text)

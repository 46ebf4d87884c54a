-- DELETE /api/v1/resources/queues/{queue}: false when there was no such queue.
SELECT queen_delete_queue($1::text)

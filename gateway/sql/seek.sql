-- POST /api/v1/consumer-groups/{group}/queues/{queue}/seek: NULL time = to the end.
SELECT queen_seek($1::text, $2::text, $3::timestamptz)

-- DELETE /api/v1/timers/{queue}/{key} and a transaction's timer cancel: true when a timer of
-- the key was pending.
SELECT queen_cancel_timer($1::text, $2::text)

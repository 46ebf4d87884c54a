-- Queries of queen_configure (src/configure.rs). Sections are prepared once per backend.

-- name: load_options
-- The effective row of a queue: the one configured last, then the oldest (schema.sql, rule 1).
SELECT lease_time, retry_limit, retry_delay, dead_letter_queue, delayed_processing,
       window_buffer, max_size, retention_seconds, completed_retention_seconds,
       max_wait_time_seconds
  FROM queen.queues
 WHERE queue_id = $1
 ORDER BY options_updated_at DESC NULLS LAST, created_at
 LIMIT 1;

-- name: update_options
-- Every row of the queue gets the options, so duplicates never disagree. $13: the clock (Citus
-- takes no volatile function in an UPDATE of its tables).
UPDATE queen.queues
   SET options_updated_at = $13,
       lease_time = $2, retry_limit = $3, retry_delay = $4, dead_letter_queue = $5,
       delayed_processing = $6, window_buffer = $7, max_size = $8, retention_seconds = $9,
       completed_retention_seconds = $10, max_wait_time_seconds = $11
 WHERE queue_id = $1;

-- name: insert_queue
INSERT INTO queen.queues (queue_id, name, options_updated_at, lease_time, retry_limit,
                          retry_delay, dead_letter_queue, delayed_processing, window_buffer,
                          max_size, retention_seconds, completed_retention_seconds,
                          max_wait_time_seconds)
VALUES ($1, $12, $13, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11);

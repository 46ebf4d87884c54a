-- queen 0.4.0 → 0.5.0 (issue 23).
-- - A lease's batch is packed in format 2 (src/packed_keys.rs), which the 0.4.0 library cannot
--   read: the version changes so that a backend still running it refuses the database.
-- - The one-message push and ack run under queen's search_path without a SET clause, fixed
--   only once they run SQL (gucs::with_fixed_search_path): a push into a known partition runs
--   none, and the SET clause was 12 k of its 243 k instructions.

ALTER FUNCTION queen_push(text, jsonb, text, text, uuid) RESET search_path;
ALTER FUNCTION queen_ack(uuid, uuid, text, text, text) RESET search_path;

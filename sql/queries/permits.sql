-- Queries of locks and semaphores (src/permits.rs), besides the key/value queries they write
-- their rows with. Sections are prepared once per backend.

-- name: permit_clock_text
-- The clock $1 in Queen's text shape (UTC, milliseconds): when a permit was first taken.
SELECT to_char($1 AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS t;

-- POST /api/v1/kv and a transaction's kv part: queen_kv without raising on a required
-- operation that does not apply (its results end there; the route rolls back and answers
-- Queen's kv_precondition).
SELECT r FROM queen_kv($1::jsonb, false) AS r

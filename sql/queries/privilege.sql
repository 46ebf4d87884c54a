-- Queries of privileges (src/privilege.rs): the grants on a queue, and granting and
-- revoking. Sections are prepared once per backend.

-- name: grants_of
-- The grants on queue $1 and on every queue ('*').
SELECT role::oid AS role, queue, privilege FROM queen.privileges WHERE queue = $1 OR queue = '*';

-- name: grants_held
-- The grants whose privileges role $1 holds (pg_has_role USAGE: has_privs_of_role), on a
-- Citus coordinator for a worker's call (src/privilege.rs caller_grants).
SELECT queue, privilege FROM queen.privileges WHERE pg_catalog.pg_has_role($1, role::oid, 'USAGE');

-- name: grant
-- Grant privileges $3 on queue $1 ('*': every queue, present and future) to role $2; how many
-- were not granted before. A grant already there is locked all the same (an update that
-- changes nothing), as PostgreSQL's GRANT locks the catalog row it touches: a revoke that
-- comes while this transaction is open waits for it, so that whichever commits last decides.
-- (With DO NOTHING, a grant that found the privilege held changed nothing, a concurrent revoke
-- committed first, and the grant, committed last, did not hold: the explorer found it.)
WITH added AS (
    INSERT INTO queen.privileges AS g (role, queue, privilege)
    SELECT DISTINCT $2::regrole, $1, p FROM unnest($3::text[]) AS p
    ON CONFLICT (role, queue, privilege) DO UPDATE SET granted_at = g.granted_at
    RETURNING g.xmax = 0 AS inserted
)
SELECT count(*) FILTER (WHERE inserted) AS changed FROM added;

-- name: revoke
-- Revoke privileges $3 on queue $1 from role $2; how many there were.
WITH removed AS (
    DELETE FROM queen.privileges WHERE role = $2::regrole AND queue = $1 AND privilege = ANY ($3::text[])
    RETURNING 1
)
SELECT count(*) AS changed FROM removed;

-- name: queue_name
-- A queue's name, by id (for the message of a refused ack).
SELECT name FROM queen.queues WHERE queue_id = $1 ORDER BY created_at LIMIT 1;

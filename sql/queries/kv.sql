-- Queries of key/value state (src/kv.rs). Sections are prepared once per backend. $3 (or the
-- last parameter named so) is the clock of the call: a row whose expires_at is not after it
-- is gone. Times are returned as text in Queen's shape (UTC, milliseconds).

-- name: kv_lock
-- The row of key $2 in namespace $1, locked for this transaction (a write is decided on the
-- row as it is now: under READ COMMITTED a row changed since the snapshot is read again).
SELECT value::text AS value_text, version, (expires_at IS NULL OR expires_at > $3) AS live, expires_at,
       to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS expires_text
  FROM queen.kv WHERE namespace = $1 AND key = $2
   FOR UPDATE;

-- name: kv_lock_share
-- The same, locked against writers only: a `check` of a lock's permit (src/permits.rs), whose
-- guards of one holder's work do not wait for each other (the permit's lock of queen's own,
-- taken before, keeps its writers out).
SELECT value::text AS value_text, version, (expires_at IS NULL OR expires_at > $3) AS live, expires_at,
       to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS expires_text
  FROM queen.kv WHERE namespace = $1 AND key = $2
   FOR SHARE;

-- name: kv_lock_skip
-- The same, never waiting: nothing when another transaction holds the row (then kv_exists
-- tells that from a missing row).
SELECT value::text AS value_text, version, (expires_at IS NULL OR expires_at > $3) AS live, expires_at,
       to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS expires_text
  FROM queen.kv WHERE namespace = $1 AND key = $2
   FOR UPDATE SKIP LOCKED;

-- name: kv_exists
SELECT EXISTS (SELECT FROM queen.kv WHERE namespace = $1 AND key = $2) AS found;

-- name: kv_insert
-- A new key; nothing when another transaction has created it meanwhile (the caller decides
-- again on that row). $4 the expiry (NULL: never), $5 the clock.
INSERT INTO queen.kv (namespace, key, value, version, expires_at, updated_at)
VALUES ($1, $2, $3, pg_catalog.nextval('queen.kv_versions'), $4, $5)
    ON CONFLICT (namespace, key) DO NOTHING
RETURNING version, to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS expires_text;

-- name: kv_update
-- The locked row rewritten (an expired one starts a new lineage: its version is new all the
-- same).
UPDATE queen.kv SET value = $3, version = pg_catalog.nextval('queen.kv_versions'), expires_at = $4, updated_at = $5
 WHERE namespace = $1 AND key = $2
RETURNING version, to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS expires_text;

-- name: kv_delete
DELETE FROM queen.kv WHERE namespace = $1 AND key = $2;

-- name: kv_get_many
-- The live rows of keys $2 in namespace $1.
SELECT key, value::text AS value_text, version,
       to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS expires_text,
       to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS updated_text
  FROM queen.kv
 WHERE namespace = $1 AND key = ANY ($2::text[]) AND (expires_at IS NULL OR expires_at > $3);

-- name: kv_prefix
-- Live keys of namespace $1 from $2 (the prefix, or the page's last key when after it) below
-- $4 (the first string past every key with the prefix), in key order, at most $5 rows. $6: the
-- page starts after $2 (exclusive) rather than at it. Both bounds are conditions of the primary
-- key's scan: a prefix with few keys reads those, not the rest of the namespace.
SELECT key, value::text AS value_text, version,
       to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS expires_text,
       to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS updated_text
  FROM queen.kv
 WHERE namespace = $1 AND key >= $2 AND key < $4 AND (NOT $6 OR key > $2)
   AND (expires_at IS NULL OR expires_at > $3)
 ORDER BY key
 LIMIT $5;

-- name: kv_prefix_open
-- The same for a prefix of U+10FFFF only, which no string bounds from above.
SELECT key, value::text AS value_text, version,
       to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS expires_text,
       to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS updated_text
  FROM queen.kv
 WHERE namespace = $1 AND key >= $2 AND (NOT $5 OR key > $2)
   AND (expires_at IS NULL OR expires_at > $3)
 ORDER BY key
 LIMIT $4;

-- name: kv_expire
-- Maintenance: at most $2 rows whose expiry passed before $1, skipping rows a writer holds.
WITH gone AS (
    DELETE FROM queen.kv WHERE ctid IN (
        SELECT ctid FROM queen.kv WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone;

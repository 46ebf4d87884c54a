-- Run once on every new connection: functions resolve in pg_catalog first, then in the schema the
-- extension was created in, and nowhere else, so no object a user creates (in public, in a schema
-- of their own, or in pg_temp) can stand in for a queen function the gateway calls. The schema's
-- name comes from the catalog and is quoted by the server; the gateway builds no SQL text.
SELECT pg_catalog.set_config('search_path', 'pg_catalog, ' || pg_catalog.quote_ident(n.nspname), false),
       e.extversion
  FROM pg_catalog.pg_extension e
  JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
 WHERE e.extname = 'queen'

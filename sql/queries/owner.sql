-- Queries of src/owner.rs: who queen's queries run as. Sections are prepared once per backend.

-- name: owner
-- The role that owns the extension (queen's queries run as it) and the installed schema's
-- version (the library refuses a schema it was not built for). Read as the caller:
-- pg_extension is readable by every role.
SELECT extowner AS owner, extversion AS version FROM pg_catalog.pg_extension WHERE extname = 'queen';

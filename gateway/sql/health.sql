-- GET /health: the database answers and queen is installed (its version).
SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'queen'

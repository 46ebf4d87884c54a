-- Queries of src/shards.rs: where a partition lives when queen is distributed on Citus
-- (docs/design.md, "Distributed on Citus"). Sections are prepared once per backend.
-- Sections named `delegate_…` are planned for every call (spi.rs): Citus sends a call to the
-- worker that holds its shard only when it plans it with the shard key as a constant.

-- name: shard_keys
-- The shard keys, in shard order.
SELECT shard FROM queen.shard_keys ORDER BY idx;

-- name: citus_installed
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus') AS installed,
       'queen.messages'::regclass::oid AS messages;

-- name: queen_distributed
-- (Prepared only where Citus is installed: pg_dist_partition is its catalog.)
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition
                WHERE logicalrelid = 'queen.messages'::regclass) AS distributed;

-- name: delegate_push_one
-- One message, on the worker that holds shard $1 (queen.shard_push_one, sql/distribute.sql
-- makes it a distributed function).
SELECT * FROM queen.shard_push_one($1, $2, $3, $4, $5, $6);

-- name: delegate_push
-- Items $2 (Queen's wire shape), all of shard $1, on the worker that holds it.
SELECT * FROM queen.shard_push($1, $2);

-- name: items_subset
-- The items of a batch at indexes $2 (0-based), in that order.
SELECT jsonb_agg($1::jsonb -> u.i ORDER BY u.o) AS items
  FROM unnest($2::int[]) WITH ORDINALITY AS u(i, o);

-- name: queues_registered
-- Which of the queues $1 have a registry row (a reference table on Citus: read on the node).
SELECT array_agg(DISTINCT queue_id) AS registered FROM queen.queues WHERE queue_id = ANY ($1::uuid[]);

-- name: register_queue
-- A registry row for queue $1 named $2, written by the coordinator before it delegates (a call
-- on a worker cannot write a reference table inside the caller's transaction). No unique index:
-- two first pushes each insert one, and readers take the earliest (schema.sql, rule 1).
INSERT INTO queen.queues (queue_id, name) VALUES ($1, $2);

-- name: delegate_pop
-- A pop of one partition of shard $1, on the worker that holds it (queen.shard_pop).
SELECT * FROM queen.shard_pop($1, $2, $3, $4, $5, $6, $7, $8, $9, $10);

-- name: delegate_ack_one
-- One ack by message id, on the worker of the shard the id carries (queen.shard_ack_one).
SELECT * FROM queen.shard_ack_one($1, $2, $3, $4, $5, $6);

-- name: delegate_ack
-- The entries $2 of an ack batch whose messages are in shard $1 (queen.shard_ack).
SELECT * FROM queen.shard_ack($1, $2);

-- name: delegate_subscribe
-- The group's subscription in shard $1, made if it has none (queen.shard_subscribe).
SELECT * FROM queen.shard_subscribe($1, $2, $3, $4, $5);

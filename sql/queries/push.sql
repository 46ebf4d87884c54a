-- Queries of queen_push (src/push.rs). Sections are prepared once per backend.

-- name: register
-- Registry rows for the partitions (and queues) of a push that have none visible yet; returns
-- the partitions that had one committed by another transaction (src/push.rs keeps them). The
-- registry has no unique index (schema.sql,
-- rule 1): two transactions creating the same partition each insert a row, and neither waits
-- for the other, however long it stays open. $1 queue ids, $2 queue names, $3 partition ids,
-- $4 partition names (parallel arrays, one entry per distinct partition of the push).
WITH want AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::text[]) AS w(queue_id, queue, partition_id, partition)
), missing AS (
    SELECT w.* FROM want w
     WHERE NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.partition_id = w.partition_id)
), new_queues AS (
    INSERT INTO queen.queues (queue_id, name)
    SELECT DISTINCT m.queue_id, m.queue FROM missing m
     WHERE NOT EXISTS (SELECT 1 FROM queen.queues q WHERE q.queue_id = m.queue_id)
), new_partitions AS (
    INSERT INTO queen.partitions (partition_id, queue_id, name)
    SELECT m.partition_id, m.queue_id, m.partition FROM missing m
)
SELECT w.partition_id FROM want w
 WHERE EXISTS (SELECT 1 FROM queen.partitions p
                WHERE p.partition_id = w.partition_id AND NOT queen.written_here(p.xmin::text::bigint));

-- name: push_known
-- push_one for a partition known to be registered.
INSERT INTO queen.messages (partition_id, txid, seq, queue_id, message_id, transaction_id,
                            partition, payload, trace_id, created_at)
VALUES ($1, queen.txid(), $2, $3, $4, $5, $6, $7, $8, clock_timestamp())
    ON CONFLICT (partition_id, transaction_id, shard) WHERE transaction_id IS NOT NULL DO NOTHING
RETURNING message_id;

-- name: push_known_keyless
-- push_one_keyless for a partition known to be registered.
INSERT INTO queen.messages (partition_id, txid, seq, queue_id, message_id, transaction_id,
                            partition, payload, trace_id, created_at)
VALUES ($1, queen.txid(), $2, $3, $4, $5, $6, $7, $8, clock_timestamp())
RETURNING message_id;

-- name: queue_cap
-- The queue's maxSize (0: none), as its registry rows say (the configured one first: schema.sql,
-- rule 1); no row when the queue has none. Kept per backend (src/push.rs, cache.rs).
SELECT q.max_size FROM queen.queues q WHERE q.queue_id = $1
 ORDER BY q.options_updated_at DESC NULLS LAST, q.created_at LIMIT 1;

-- name: count_queue
-- How many messages a capped queue holds, counting no further than $2 (its maxSize): the
-- cost is bounded by the cap, not by the table.
SELECT count(*) AS messages FROM (SELECT 1 FROM queen.messages WHERE queue_id = $1 ORDER BY txid, seq LIMIT $2) s;

-- name: push_one
-- One message (the common case, in one statement): inserted unless its transaction_id is
-- already held in the partition (earlier, or by a concurrent push, which ON CONFLICT waits
-- for); the caller then reads the holder. With it, whether the partition has a registry row
-- (`settled`: NULL none visible, true one committed by another transaction, false only this
-- one's). The queue's maxSize and settled partitions are kept per backend (src/push.rs),
-- which then pushes with push_known. $1 partition id, $2 seq, $3 queue id, $4 message id,
-- $5 transaction id (NULL = none given), $6 partition name, $7 payload, $8 trace id.
INSERT INTO queen.messages (partition_id, txid, seq, queue_id, message_id, transaction_id,
                            partition, payload, trace_id, created_at)
VALUES ($1, queen.txid(), $2, $3, $4, $5, $6, $7, $8, clock_timestamp())
    ON CONFLICT (partition_id, transaction_id, shard) WHERE transaction_id IS NOT NULL DO NOTHING
RETURNING message_id,
          (SELECT bool_or(NOT queen.written_here(p.xmin::text::bigint))
             FROM queen.partitions p WHERE p.partition_id = $1) AS settled;

-- name: push_one_keyless
-- push_one for a message without a transaction id: it cannot conflict (its message id is
-- new, its key (partition, txid, seq) unique by construction), so a plain INSERT, without the
-- speculative insertion ON CONFLICT costs on every row (a lock-table entry and a WAL record).
INSERT INTO queen.messages (partition_id, txid, seq, queue_id, message_id, transaction_id,
                            partition, payload, trace_id, created_at)
VALUES ($1, queen.txid(), $2, $3, $4, $5, $6, $7, $8, clock_timestamp())
RETURNING message_id,
          (SELECT bool_or(NOT queen.written_here(p.xmin::text::bigint))
             FROM queen.partitions p WHERE p.partition_id = $1) AS settled;

-- name: insert_messages
-- A batch, in push order (seq is assigned by the caller in input order); duplicates as in
-- push_one. Payloads are taken from the items argument itself ($7 -> idx -> 'payload'), so
-- they go from the caller's jsonb to the table without a round trip through text. Parallel
-- arrays: $1 partition ids, $2 seq, $3 queue ids, $4 message ids, $5 transaction ids,
-- $6 partition names, $8 item indexes, $9 trace ids; $10 the caller's stored id
-- (queen.txid(), taken once: a call per row was 1% of a batch push).
INSERT INTO queen.messages (partition_id, txid, seq, queue_id, message_id, transaction_id,
                            partition, payload, trace_id, created_at)
SELECT u.partition_id, $10::bigint, u.seq, u.queue_id, u.message_id,
       u.transaction_id, u.partition, COALESCE($7::jsonb -> u.idx -> 'payload', 'null'::jsonb),
       u.trace_id, clock_timestamp()
  FROM unnest($1::uuid[], $2::bigint[], $3::uuid[], $4::uuid[], $5::text[], $6::text[],
              $8::int[], $9::uuid[])
       AS u(partition_id, seq, queue_id, message_id, transaction_id, partition, idx, trace_id)
    ON CONFLICT (partition_id, transaction_id, shard) WHERE transaction_id IS NOT NULL DO NOTHING
RETURNING message_id;

-- name: insert_messages_keyless
-- insert_messages for a batch without transaction ids: a plain INSERT (see push_one_keyless),
-- which inserts every row or raises, so it returns nothing (the ids are the caller's).
INSERT INTO queen.messages (partition_id, txid, seq, queue_id, message_id, transaction_id,
                            partition, payload, trace_id, created_at)
SELECT u.partition_id, $10::bigint, u.seq, u.queue_id, u.message_id,
       u.transaction_id, u.partition, COALESCE($7::jsonb -> u.idx -> 'payload', 'null'::jsonb),
       u.trace_id, clock_timestamp()
  FROM unnest($1::uuid[], $2::bigint[], $3::uuid[], $4::uuid[], $5::text[], $6::text[],
              $8::int[], $9::uuid[])
       AS u(partition_id, seq, queue_id, message_id, transaction_id, partition, idx, trace_id);

-- name: holders
-- The messages that hold the given (partition, transaction_id) keys.
SELECT m.partition_id, m.transaction_id, m.message_id
  FROM unnest($1::uuid[], $2::text[]) AS k(partition_id, transaction_id)
  JOIN queen.messages m ON m.partition_id = k.partition_id AND m.transaction_id = k.transaction_id;

-- On Citus (src/shards.rs), in the shard's worker: the same writes, each a statement on one
-- table of shard $… (the last parameter), which Citus routes to the shard without a join; the
-- registry row of the queue is the coordinator's to write (a reference table).

-- name: citus_push_one
INSERT INTO queen.messages (partition_id, txid, seq, queue_id, message_id, transaction_id,
                            partition, payload, trace_id, created_at, shard)
VALUES ($1, queen.txid(), $2, $3, $4, $5, $6, $7, $8, clock_timestamp(), $9)
    ON CONFLICT (partition_id, transaction_id, shard) WHERE transaction_id IS NOT NULL DO NOTHING
RETURNING message_id;

-- name: citus_push_one_keyless
INSERT INTO queen.messages (partition_id, txid, seq, queue_id, message_id, transaction_id,
                            partition, payload, trace_id, created_at, shard)
VALUES ($1, queen.txid(), $2, $3, $4, $5, $6, $7, $8, clock_timestamp(), $9)
RETURNING message_id;

-- name: citus_insert_messages
INSERT INTO queen.messages (partition_id, txid, seq, queue_id, message_id, transaction_id,
                            partition, payload, trace_id, created_at, shard)
SELECT u.partition_id, queen.txid(), u.seq, u.queue_id, u.message_id,
       u.transaction_id, u.partition, COALESCE($7::jsonb -> u.idx -> 'payload', 'null'::jsonb),
       u.trace_id, clock_timestamp(), $10
  FROM unnest($1::uuid[], $2::bigint[], $3::uuid[], $4::uuid[], $5::text[], $6::text[],
              $8::int[], $9::uuid[])
       AS u(partition_id, seq, queue_id, message_id, transaction_id, partition, idx, trace_id)
    ON CONFLICT (partition_id, transaction_id, shard) WHERE transaction_id IS NOT NULL DO NOTHING;
-- (No RETURNING: Citus 13.2 fails an INSERT ... SELECT whose ON CONFLICT skipped rows and
-- that returns the others, "consistency check on SPI tuple count failed"; the caller reads
-- the holders of the keys instead.)

-- name: citus_insert_messages_keyless
INSERT INTO queen.messages (partition_id, txid, seq, queue_id, message_id, transaction_id,
                            partition, payload, trace_id, created_at, shard)
SELECT u.partition_id, queen.txid(), u.seq, u.queue_id, u.message_id,
       u.transaction_id, u.partition, COALESCE($7::jsonb -> u.idx -> 'payload', 'null'::jsonb),
       u.trace_id, clock_timestamp(), $10
  FROM unnest($1::uuid[], $2::bigint[], $3::uuid[], $4::uuid[], $5::text[], $6::text[],
              $8::int[], $9::uuid[])
       AS u(partition_id, seq, queue_id, message_id, transaction_id, partition, idx, trace_id)
RETURNING message_id;

-- name: citus_partitions_registered
-- Which of the partitions $2 of shard $1 have a registry row.
SELECT partition_id FROM queen.partitions WHERE shard = $1 AND partition_id = ANY ($2::uuid[]);

-- name: citus_register_partition
INSERT INTO queen.partitions (partition_id, queue_id, name, shard) VALUES ($1, $2, $3, $4);

-- name: citus_holders
-- The messages of shard $3 that hold the given (partition, transaction_id) keys.
SELECT m.partition_id, m.transaction_id, m.message_id
  FROM queen.messages m
 WHERE m.shard = $3 AND m.partition_id = ANY ($1::uuid[]) AND m.transaction_id = ANY ($2::text[]);

-- Queries of queen_ack and the functions that operate on consumer state (src/ack/,
-- src/admin.rs). Sections are prepared once per backend.
-- The last parameter of each is the shard key of the call (src/shards.rs: 0 on one server).
-- Lines marked `-- [one server]` read the queue's options with the rows; on Citus, where no
-- statement of a shard may join a reference table, spi.rs leaves them out and ack/find.rs reads the
-- options apart.

-- name: ack_find
-- The messages an ack batch names, by message id ($1), or by partition id ($2) and
-- transaction id ($3); a keyless message's transaction id is its message id ($4, the
-- transaction id read as a uuid when it is one). One row per entry found: its ordinal.
SELECT k.ord, m.partition_id, m.txid, m.seq, m.queue_id, m.message_id
  FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::uuid[]) WITH ORDINALITY AS k(mid, pid, tid, tid_uuid, ord)
  CROSS JOIN LATERAL (
        SELECT m.* FROM queen.messages m WHERE k.mid IS NOT NULL AND m.message_id = k.mid AND m.shard = $5
        UNION ALL
        SELECT m.* FROM queen.messages m
         WHERE k.mid IS NULL AND m.partition_id = k.pid AND m.transaction_id = k.tid AND m.shard = $5
        UNION ALL
        SELECT m.* FROM queen.messages m
         WHERE k.mid IS NULL AND k.tid_uuid IS NOT NULL AND m.message_id = k.tid_uuid
           AND m.partition_id = k.pid AND m.transaction_id IS NULL AND m.shard = $5
        LIMIT 1) AS m;

-- name: ack_find_ids
-- ack_find when every entry names its message by id (the common case): one index scan over
-- the ids ($1), quicker than ack_find's per-entry lateral (docs/benchmarks.md, "Measurements
-- behind the design"). One row per message found.
SELECT m.message_id, m.partition_id, m.txid, m.seq, m.queue_id
  FROM queen.messages m
 WHERE m.message_id = ANY ($1::uuid[]) AND m.shard = $2;

-- name: ack_scope
-- What an ack of the messages $1 under the leases $2 may lock, read without locking anything
-- ($3 shard): the queues of the messages, and the groups of the leases as the cursor rows of
-- the messages' partitions know them (the lease a row holds, or the last one that ended
-- there). The ack takes their shared locks (locks.rs) before it locks any row.
WITH m AS MATERIALIZED (
    SELECT DISTINCT partition_id, queue_id FROM queen.messages WHERE message_id = ANY ($1::uuid[]) AND shard = $3
)
SELECT (SELECT COALESCE(array_agg(DISTINCT queue_id), '{}') FROM m) AS queue_ids,
       -- By the list of the partitions (`= ANY`), through the primary key's prefix: never a
       -- scan of every cursor row, which a kept generic plan chose for a join.
       (SELECT COALESCE(array_agg(DISTINCT c.consumer_group), '{}') FROM queen.cursors c
         WHERE c.partition_id = ANY (ARRAY(SELECT partition_id FROM m)) AND c.shard = $3
           AND (c.lease_id = ANY ($2::uuid[]) OR c.last_lease_id = ANY ($2::uuid[]))) AS lease_groups;

-- name: ack_message_lock
-- The message $1 and its partition's cursor row, locked for this transaction, of the group of
-- lease $3 if that lease is or was the lease of a row of that partition, else of group $2
-- (NULL: queue mode), with the clock, the queue's stored options (named as load_options in
-- configure.sql names them) and the lease as that row knows it (group; expiry, -infinity once
-- it ended; whether it was released); no row when the message or the cursor row does not
-- exist, or $2 is given and is not the lease's group (the ack is refused: nothing is locked
-- for it), or the group is none of $5 or the queue none of $6 (the groups and queues whose
-- locks the caller took, locks.rs: it finds otherwise). An ack waits for a transaction that holds the row (the pop that leased it, still
-- open): the ack must apply to what that transaction commits. The cursor rows are found by
-- the message's partition as a value (a subquery), so that a plan made while cursors was
-- empty does not read all of them and join.
WITH m AS MATERIALIZED (
    SELECT partition_id, txid, seq, queue_id, message_id FROM queen.messages WHERE message_id = $1 AND shard = $4
), l AS MATERIALIZED (
    SELECT c.consumer_group,
           CASE WHEN c.lease_id = $3 THEN c.lease_expires_at ELSE '-infinity' END AS expires_at,
           c.lease_id IS DISTINCT FROM $3 AND NOT c.last_lease_expired AS released
      FROM queen.cursors c
     WHERE c.partition_id = (SELECT partition_id FROM m) AND c.shard = $4
       AND $3::uuid IS NOT NULL AND (c.lease_id = $3 OR c.last_lease_id = $3)
     ORDER BY c.lease_id IS NOT DISTINCT FROM $3 DESC
     LIMIT 1
)
SELECT m.partition_id, m.txid, m.seq, m.queue_id, m.message_id,
       c.done_txid, c.done_seq, c.pending_txid, c.pending_seq, c.ahead_txid, c.ahead_seq,
       c.fail_txid, c.fail_seq, c.failures, c.retry_at, c.lease_id, c.lease_expires_at,
       c.lease_keys, c.lease_xip, c.xmin::text AS version,
       clock_timestamp() AS now,
       o.lease_time, o.retry_limit, o.retry_delay, o.dead_letter_queue, o.delayed_processing, -- [one server]
       o.window_buffer, o.max_size, o.retention_seconds, o.completed_retention_seconds,       -- [one server]
       o.max_wait_time_seconds,                                                               -- [one server]
       l.consumer_group, l.expires_at, l.released
  FROM m
  LEFT JOIN l ON true
  JOIN queen.cursors c ON c.partition_id = (SELECT partition_id FROM m) AND c.shard = $4
                      AND c.consumer_group = COALESCE((SELECT consumer_group FROM l), $2, '__QUEUE_MODE__')
                      AND c.consumer_group = ANY ($5::text[])
  LEFT JOIN LATERAL (                                                      -- [one server]
        SELECT * FROM queen.queues q WHERE q.queue_id = m.queue_id         -- [one server]
         ORDER BY q.options_updated_at DESC NULLS LAST, q.created_at LIMIT 1) o ON true -- [one server]
 WHERE ($2 IS NULL OR l.consumer_group IS NULL OR l.consumer_group = $2)
   AND m.queue_id = ANY ($6::uuid[])
   FOR UPDATE OF c;

-- name: ack_lease_rows
-- The active rows of lease $1 (through cursors_lease), locked, with the clock and their
-- queue's stored options: for an ack under the lease whose message retention deleted
-- (src/ack/apply.rs sweep_vanished). In partition order (see ack_lease_lock).
{{lease_rows}}
 WHERE c.lease_id = $1 AND c.shard = $2 AND c.lease_expires_at > clock_timestamp()
 ORDER BY c.partition_id::text COLLATE "C", c.consumer_group
   FOR UPDATE OF c;

-- name: ack_batch_lock
-- A batch ack whose entries all name their message by id ($1) and one lease ($2), and the same
-- group or none ($3): in one statement, the lease's group as the rows of the messages'
-- partitions know it, and, per partition, the lease as that partition's row knows it (expiry,
-- -infinity once it ended; whether it was released) and, locked in
-- partition order, that group's cursor rows of those partitions, each with the messages found
-- there, the clock (read after the locks: an ack may wait for the popping transaction) and the
-- queue's stored options. No row when no row of those partitions knows the lease, or $3 is
-- given and is not its group: nothing is locked then, and the caller takes the general path.
-- `messages_found` and `partitions_found` let the caller check that every message was found
-- and every partition has a row. Waiting for a row is as in ack_message_lock.
WITH m AS MATERIALIZED (
    SELECT message_id, partition_id, txid, seq, queue_id FROM queen.messages
     WHERE message_id = ANY ($1::uuid[]) AND shard = $4
), p AS MATERIALIZED (
    -- The messages found per partition, in partition order: three aligned arrays (one pass).
    SELECT partition_id, array_agg(message_id) AS found_ids, array_agg(txid) AS found_txids,
           array_agg(seq) AS found_seqs
      FROM m GROUP BY partition_id ORDER BY partition_id
), l AS MATERIALIZED (
    -- Per partition through the primary key's prefix (a LATERAL with LIMIT: never a scan of
    -- every cursor row, which a kept generic plan chose for an = ANY over them).
    SELECT x.consumer_group, x.expires_at, x.released FROM p CROSS JOIN LATERAL (
        SELECT c.consumer_group,
               CASE WHEN c.lease_id = $2 THEN c.lease_expires_at ELSE '-infinity' END AS expires_at,
               c.lease_id IS DISTINCT FROM $2 AND NOT c.last_lease_expired AS released,
               c.lease_id IS NOT DISTINCT FROM $2 AS holds
          FROM queen.cursors c
         WHERE c.partition_id = p.partition_id AND c.shard = $4 AND (c.lease_id = $2 OR c.last_lease_id = $2)
         ORDER BY c.lease_id IS NOT DISTINCT FROM $2 DESC
         LIMIT 1) AS x
     ORDER BY x.holds DESC
     LIMIT 1
), c AS MATERIALIZED (
    -- Locked one by one in partition order (p's), as the general path locks them.
    SELECT x.* FROM p CROSS JOIN LATERAL (
        SELECT c.partition_id, c.queue_id, c.consumer_group, c.done_txid, c.done_seq, c.pending_txid,
               c.pending_seq, c.ahead_txid, c.ahead_seq, c.fail_txid, c.fail_seq, c.failures, c.retry_at,
               c.lease_id, c.lease_expires_at, c.lease_keys, c.lease_xip,
               c.xmin::text AS version,
               -- The lease as this partition's row knows it (a lease over two partitions may
               -- be released in one and run out in the other: each entry hears its own).
               CASE WHEN c.lease_id = $2 THEN c.lease_expires_at ELSE '-infinity' END AS expires_at,
               CASE WHEN c.lease_id = $2 THEN false
                    WHEN c.last_lease_id = $2 THEN NOT c.last_lease_expired
                    ELSE true END AS released
          FROM queen.cursors c
         WHERE c.partition_id = p.partition_id AND c.shard = $4 AND c.consumer_group = (SELECT consumer_group FROM l)
           AND ($3::text IS NULL OR $3 = (SELECT consumer_group FROM l))
           FOR UPDATE) AS x
)
SELECT c.*, clock_timestamp() AS now,
       p.found_ids, p.found_txids, p.found_seqs,
       (SELECT count(*) FROM m) AS messages_found,
       o.lease_time, o.retry_limit, o.retry_delay, o.dead_letter_queue, o.delayed_processing, -- [one server]
       o.window_buffer, o.max_size, o.retention_seconds, o.completed_retention_seconds,       -- [one server]
       o.max_wait_time_seconds,                                                               -- [one server]
       (SELECT count(*) FROM p) AS partitions_found
  FROM c JOIN p ON p.partition_id = c.partition_id CROSS JOIN l
  LEFT JOIN LATERAL (                                                      -- [one server]
        SELECT * FROM queen.queues q WHERE q.queue_id = c.queue_id         -- [one server]
         ORDER BY q.options_updated_at DESC NULLS LAST, q.created_at LIMIT 1) o ON true -- [one server]
 ORDER BY c.partition_id;

-- name: ack_leases
-- The leases an ack batch names ($1), as the cursor rows of the acked messages' partitions
-- ($2) know them, one row per (lease, partition) (the lease a row holds, or the last one that
-- ended there; a lease is one group's, so one row of a partition at most): group, expiry
-- (-infinity once it ended), whether it was released. Found through the primary key's
-- partition prefix: no index on leases is needed for acks.
SELECT ls.l AS lease_id, c.partition_id, c.consumer_group,
       CASE WHEN c.lease_id = ls.l THEN c.lease_expires_at ELSE '-infinity' END AS expires_at,
       c.lease_id IS DISTINCT FROM ls.l AND NOT c.last_lease_expired AS released
  FROM (SELECT DISTINCT x AS l FROM unnest($1::uuid[]) AS x) AS ls
  JOIN queen.cursors c ON c.partition_id = ANY ($2::uuid[]) AND c.shard = $3
                      AND (c.lease_id = ls.l OR c.last_lease_id = ls.l);

-- name: ack_lease_queues
-- The queues and the group of the rows holding lease $1 in shard $2, read without locking
-- anything: what a role that may not pop every queue is checked against, and whose shared
-- locks (locks.rs) are taken, before queen_ack_lease locks a row.
SELECT DISTINCT c.queue_id, c.consumer_group FROM queen.cursors c WHERE c.lease_id = $1 AND c.shard = $2;

-- name: ack_lease_lock
-- queen_ack_lease: the rows holding lease $1 in shard $2 (active or run out, while no pop
-- took the partition since), locked in partition order as every ack locks them, each with
-- the ids of its batch's messages in delivery order (NULL where retention deleted one), the
-- clock (read after the locks) and the queue's stored options. Through cursors_lease, and the
-- primary key of messages: O(1) statements whatever the batch size. A batch is its
-- partition's messages in key order from its first key, but for those finished or running
-- when it was popped, so the ids come from one read of that span, no more rows than the batch
-- has keys, and a probe for each key it did not reach (a key within it that it did not find
-- was deleted: the probe finds nothing either). 100 probes, one a key, took 0.126 ms a call,
-- the span 0.092 (docs/benchmarks.md). (Sorted by
-- the partition's text, which orders as the uuid does: sorted by the uuid itself, a plan could
-- read the whole primary key in its order instead, every cursor row, to spare the sort.)
SELECT c.partition_id, c.consumer_group, c.queue_id, {{cursor_columns c=c}},
       b.ids AS batch_ids,
       o.lease_time, o.retry_limit, o.retry_delay, o.dead_letter_queue, o.delayed_processing, -- [one server]
       o.window_buffer, o.max_size, o.retention_seconds, o.completed_retention_seconds,       -- [one server]
       o.max_wait_time_seconds,                                                               -- [one server]
       clock_timestamp() AS now
  FROM queen.cursors c
  CROSS JOIN LATERAL (
        -- The span's start and length: the batch's first key (in delivery order, which is key
        -- order), and how many keys it has.
        SELECT max(k.txid) FILTER (WHERE k.ord = 1) AS txid, max(k.seq) FILTER (WHERE k.ord = 1) AS seq,
               count(*) AS n
          FROM queen.batch_keys(c.lease_keys) WITH ORDINALITY AS k(txid, seq, ord)) f
  CROSS JOIN LATERAL (
        SELECT array_agg(COALESCE(r.message_id,
                   (SELECT m.message_id FROM queen.messages m
                     WHERE m.partition_id = c.partition_id AND m.txid = k.txid AND m.seq = k.seq AND m.shard = $2))
                   ORDER BY k.ord) AS ids
          FROM queen.batch_keys(c.lease_keys) WITH ORDINALITY AS k(txid, seq, ord)
          LEFT JOIN (SELECT m.txid, m.seq, m.message_id FROM queen.messages m
                      WHERE m.partition_id = c.partition_id AND m.shard = $2 AND (m.txid, m.seq) >= (f.txid, f.seq)
                      ORDER BY m.txid, m.seq LIMIT f.n) r ON r.txid = k.txid AND r.seq = k.seq) b
  LEFT JOIN LATERAL (                                                      -- [one server]
        SELECT * FROM queen.queues q WHERE q.queue_id = c.queue_id         -- [one server]
         ORDER BY q.options_updated_at DESC NULLS LAST, q.created_at LIMIT 1) o ON true -- [one server]
 WHERE c.lease_id = $1 AND c.shard = $2
 ORDER BY c.partition_id::text COLLATE "C", c.consumer_group
   FOR UPDATE OF c;

-- name: ack_lease_lock_rows
-- ack_lease_lock without the batches' message ids: on one server lease_rows (src/ack/find.rs)
-- reads those straight from messages_pkey after the lock (direct.rs batch_ids).
{{lease_rows}}
 WHERE c.lease_id = $1 AND c.shard = $2
 ORDER BY c.partition_id::text COLLATE "C", c.consumer_group
   FOR UPDATE OF c;

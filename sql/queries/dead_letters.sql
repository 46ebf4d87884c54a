-- Queries of dead-letter replay and purge (src/dead_letters.rs). Sections are prepared once per
-- backend. $shard arguments: src/shards.rs (0 on one server).

-- name: replay_rows
-- The cursor rows of group $2 on queue $1 that hold dead letters of it to replay (every one, or
-- that of message $3), locked for this transaction in partition order (as acks lock them),
-- without waiting: 55P03 when another transaction holds one, and the replay takes them all or
-- none (locks.rs all_or_none), never holding some while it waits for others; with the clock.
-- $4 shard.
SELECT c.partition_id, c.done_txid, c.done_seq, c.pending_txid, c.pending_seq, c.ahead_txid, c.ahead_seq,
       c.fail_txid, c.fail_seq, c.failures, c.retry_at, c.lease_id, c.lease_expires_at, c.lease_keys,
       c.lease_xip, c.xmin::text AS version, clock_timestamp() AS now
  FROM queen.cursors c
 WHERE c.consumer_group = $2 AND c.shard = $4 AND c.partition_id IN (
        SELECT d.partition_id FROM queen.dead_letters d
         WHERE d.queue_id = $1 AND d.consumer_group = $2 AND d.shard = $4
           AND ($3::uuid IS NULL OR d.message_id = $3))
 ORDER BY c.partition_id
   FOR UPDATE OF c NOWAIT;

-- name: replay_take
-- Group $2's dead letters on queue $1 in partitions $5 (every one, or that of message $3) whose
-- messages still exist (retention may have deleted them: those stay, for a purge), deleted: one
-- row per (partition, transaction), its dead letters' seqs in order (those a seek reopened
-- apart: src/dead_letters.rs), and the seqs of that
-- transaction's messages after the first of them in the partition — read once per transaction,
-- not per dead letter (a batch of 10 000 filed together is replayed in linear work). $4 shard.
WITH d AS (
    DELETE FROM queen.dead_letters d
     WHERE d.partition_id = ANY ($5) AND d.consumer_group = $2 AND d.shard = $4 AND d.queue_id = $1
       AND ($3::uuid IS NULL OR d.message_id = $3)
       AND EXISTS (SELECT 1 FROM queen.messages m
                    WHERE m.partition_id = d.partition_id AND m.shard = $4 AND m.txid = d.txid AND m.seq = d.seq)
    RETURNING d.partition_id, d.txid, d.seq, d.reopened
), t AS (
    SELECT partition_id, txid, array_agg(seq ORDER BY seq) AS seqs, min(seq) AS first,
           COALESCE(array_agg(seq ORDER BY seq) FILTER (WHERE reopened), '{}') AS reopened
      FROM d
     GROUP BY partition_id, txid
)
SELECT t.partition_id, t.txid, t.seqs, t.reopened,
       ARRAY(SELECT m.seq FROM queen.messages m
              WHERE m.partition_id = t.partition_id AND m.shard = $4 AND m.txid = t.txid AND m.seq > t.first
              ORDER BY m.seq) AS later
  FROM t ORDER BY t.partition_id, t.txid;

-- name: replay_mark
-- When group $2 last had dead letters replayed in partitions $1 ($3): max wait counts afresh
-- from then (src/maintain.rs max_wait_file). $4 shard.
UPDATE queen.cursors SET replayed_at = $3 WHERE partition_id = ANY ($1) AND consumer_group = $2 AND shard = $4;

-- name: purge_lock
-- Group $2's cursor rows of the partitions holding its dead letters on queue $1 that purge
-- deletes (every one, that of message $3, those filed before $4), locked in partition order
-- without waiting (55P03: all or none, locks.rs all_or_none). A dead letter row is written only
-- under its cursor row's lock (an ack files it, a replay or purge deletes it): a purge and a
-- replay of the same partition never wait for each other's dead letters crosswise. $5 shard.
SELECT c.partition_id FROM queen.cursors c
 WHERE c.consumer_group = $2 AND c.shard = $5 AND c.partition_id IN (
        SELECT d.partition_id FROM queen.dead_letters d
         WHERE d.queue_id = $1 AND d.consumer_group = $2 AND d.shard = $5
           AND ($3::uuid IS NULL OR d.message_id = $3) AND ($4::timestamptz IS NULL OR d.failed_at < $4))
 ORDER BY c.partition_id
   FOR UPDATE OF c NOWAIT;

-- name: purge
-- Group $2's dead letters on queue $1 (every one, that of message $3, those filed before $4),
-- deleted; how many. The messages stay. $5 shard.
WITH d AS (
    DELETE FROM queen.dead_letters
     WHERE queue_id = $1 AND consumer_group = $2 AND shard = $5
       AND ($3::uuid IS NULL OR message_id = $3) AND ($4::timestamptz IS NULL OR failed_at < $4)
    RETURNING 1
)
SELECT count(*) AS purged FROM d;

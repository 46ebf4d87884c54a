-- Queries of one message's state (src/message.rs, queen_message). Sections are prepared once
-- per backend.

-- name: message_by_transaction
-- The message of transaction id $2 in partition $1, with its queue's name (the registry's
-- first row) and its key.
SELECT m.message_id, m.transaction_id, m.queue_id, m.partition, m.payload::text AS payload_text, m.trace_id, m.created_at,
       m.txid, m.seq, to_char(m.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_text,
       (SELECT q.name FROM queen.queues q WHERE q.queue_id = m.queue_id LIMIT 1) AS queue
  FROM queen.messages m
 WHERE m.partition_id = $1 AND m.transaction_id = $2 AND m.shard = 0;

-- name: message_by_id
-- The message of id $2 in partition $1 (a message pushed without a transaction id is known by
-- its message id).
SELECT m.message_id, m.transaction_id, m.queue_id, m.partition, m.payload::text AS payload_text, m.trace_id, m.created_at,
       m.txid, m.seq, to_char(m.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_text,
       (SELECT q.name FROM queen.queues q WHERE q.queue_id = m.queue_id LIMIT 1) AS queue
  FROM queen.messages m
 WHERE m.message_id = $2 AND m.partition_id = $1;

-- name: message_jsonb
-- The message's JSON text $1 as jsonb: built by splicing its payload's text in, so that no
-- payload is parsed into a tree on the way (a payload nested deeper than serde_json reads is
-- valid jsonb, and comes back as it went in, semantics §10).
SELECT $1::text::jsonb AS detail;

-- name: message_groups
-- The cursor rows of partition $1: every group that has read it, in name order.
SELECT consumer_group, done_txid, done_seq, pending_txid, pending_seq, ahead_txid, ahead_seq, fail_txid,
       fail_seq, failures, retry_at, lease_id, lease_expires_at, lease_keys, lease_xip,
       xmin::text AS version, clock_timestamp() AS now,
       to_char(lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS lease_expires_text
  FROM queen.cursors WHERE partition_id = $1 AND shard = 0
 ORDER BY consumer_group;

-- queen quickstart: paste into psql connected to a database where `CREATE EXTENSION queen`
-- has run (`make run` does both).

-- A queue with options: a 60 s lease, 2 retries, 500 ms between them. Options not given keep
-- their value; the result is every option's effective value.
SELECT queen_configure('emails', '{"leaseTime": 60, "retryLimit": 2, "retryDelay": 500}') -> 'options' AS options;

-- Push: one message, into the partition of a customer (messages of one partition are
-- delivered in order; partitions never block each other).
SELECT message_id, status FROM queen_push('emails', '{"to": "ada@example.com", "invoice": 41}', 'customer-7');

-- A batch in Queen's wire shape; a transactionId makes the push idempotent per partition.
SELECT idx, partition, status
  FROM queen_push('[{"queue": "emails", "partition": "customer-7", "payload": {"invoice": 42}, "transactionId": "inv-42"},
                    {"queue": "emails", "partition": "customer-9", "payload": {"invoice": 43}},
                    {"queue": "emails", "partition": "customer-7", "payload": {"invoice": 42}, "transactionId": "inv-42"}]');

-- The point of an in-database broker: consuming a message commits or rolls back with your
-- own writes. Here the pop (auto_ack: at-most-once, the cursor moves in this transaction)
-- and the business write commit together, or not at all.
CREATE TABLE IF NOT EXISTS sent_emails (invoice int PRIMARY KEY, sent_at timestamptz DEFAULT now());
BEGIN;
INSERT INTO sent_emails (invoice)
SELECT (payload ->> 'invoice')::int
  FROM queen_pop('emails', consumer_group => 'mailer', batch => 10, partitions => 10, auto_ack => true)
    ON CONFLICT (invoice) DO NOTHING;  -- pasted twice, the same invoices come again
COMMIT;
SELECT * FROM sent_emails ORDER BY invoice;

-- Another consumer group reads every message too (fan-out), with its own cursor and a lease:
-- nobody else in 'audit' gets partition customer-7 until the lease ends.
SELECT partition, payload, lease_id IS NOT NULL AS leased, attempt
  FROM queen_pop('emails', consumer_group => 'audit', batch => 10, partition => 'customer-7');

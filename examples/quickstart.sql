-- queen quickstart: paste into psql connected to a database where `CREATE EXTENSION queen`
-- has run (`make run` does both).

-- A queue with options: a 60 s lease, 2 retries, 500 ms between them. Options not given keep
-- their value; the result is every option's effective value.
SELECT queen_configure('emails', '{"leaseTime": 60, "retryLimit": 2, "retryDelay": 500}');

-- Change one option later; the others stay as they were.
SELECT queen_configure('emails', '{"deadLetterQueue": false}') -> 'options' AS options;

-- Bad options are refused with SQLSTATE 22023 and a message naming them:
--   SELECT queen_configure('emails', '{"leaseTme": 60}');
--   ERROR:  queen: option "leaseTme": unknown option; the options are leaseTime, ...

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
-- Which of the queues $1 have a registry row (a reference table on Citus: read on the node),
-- and those with a maxSize (their ids and caps, in parallel arrays).
SELECT array_agg(o.queue_id) AS registered,
       array_agg(o.queue_id) FILTER (WHERE o.max_size > 0) AS capped,
       array_agg(o.max_size) FILTER (WHERE o.max_size > 0) AS caps
  FROM (SELECT DISTINCT ON (queue_id) queue_id, max_size FROM queen.queues WHERE queue_id = ANY ($1::uuid[])
         ORDER BY queue_id, options_updated_at DESC NULLS LAST, created_at) AS o;

-- name: count_queue_everywhere
-- How many messages capped queue $1 holds in every shard, counting no further than $2 (its
-- maxSize + 1), from the coordinator after the push's calls (which it sees, in its
-- transaction): push.rs check_cap on one server.
SELECT count(*) AS messages FROM (SELECT 1 FROM queen.messages WHERE queue_id = $1 LIMIT $2) AS s;

-- name: register_queue
-- A registry row for queue $1 named $2, written by the coordinator before it delegates (a call
-- on a worker cannot write a reference table inside the caller's transaction). No unique index:
-- two first pushes each insert one, and readers take the earliest (schema.sql, rule 1).
INSERT INTO queen.queues (queue_id, name) VALUES ($1, $2);

-- name: delegate_pop
-- A pop in shard $1, on the worker that holds it (queen.shard_pop); $11 the lease id to use.
SELECT * FROM queen.shard_pop($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11);

-- name: delegate_ack_one
-- One ack by message id, on the worker of the shard the id carries (queen.shard_ack_one),
-- checked against $7, the caller's grants (the coordinator delegates as the extension's owner).
SELECT * FROM queen.shard_ack_one($1, $2, $3, $4, $5, $6, $7);

-- name: delegate_ack
-- The entries $2 of an ack batch whose messages are in shard $1 (queen.shard_ack), checked
-- against $3, the caller's grants.
SELECT * FROM queen.shard_ack($1, $2, $3);

-- name: delegate_ack_lease
-- Lease $2's rows in shard $1 acknowledged with status $3 and error $4 (queen.shard_ack_lease),
-- checked against $5, the caller's grants.
SELECT * FROM queen.shard_ack_lease($1, $2, $3, $4, $5);

-- name: delegate_subscribe
-- The group's subscription in shard $1, made if it has none (queen.shard_subscribe).
SELECT * FROM queen.shard_subscribe($1, $2, $3, $4, $5);

-- name: delegate_renew
-- A renew of lease $2 by $3 seconds, on the worker of the shard the lease id carries
-- (queen.shard_renew). Each of these returns one column, read by position.
SELECT * FROM queen.shard_renew($1, $2, $3, $4);

-- name: delegate_seek
-- Queue $2's group $3 sought to $4 in shard $1 (queen.shard_seek): the partitions set there.
SELECT * FROM queen.shard_seek($1, $2, $3, $4);

-- name: delegate_replay_dead_letters
-- Group $3's dead letters on queue $2 (every one, or that of message $4) replayed in shard $1
-- (queen.shard_replay_dead_letters): how many.
SELECT * FROM queen.shard_replay_dead_letters($1, $2, $3, $4);

-- name: delegate_purge_dead_letters
-- Group $3's dead letters on queue $2 (every one, that of message $4, those filed before $5)
-- deleted in shard $1 (queen.shard_purge_dead_letters): how many.
SELECT * FROM queen.shard_purge_dead_letters($1, $2, $3, $4, $5);

-- name: delegate_delete_group
-- Group $2 forgotten on queue $3 (NULL: every queue) in shard $1 (queen.shard_delete_group).
SELECT * FROM queen.shard_delete_group($1, $2, $3);

-- name: delegate_delete_queue
-- Queue $2's rows of shard $1 deleted (queen.shard_delete_queue): whether there were any.
SELECT * FROM queen.shard_delete_queue($1, $2);

-- name: local_shard_keys
-- The shard keys whose shards this node holds (Citus's placements; the coordinator's group is
-- 0): the shards a maintenance pass on this node works in (src/maintain.rs). Prepared only
-- where queen is distributed.
SELECT k.shard FROM queen.shard_keys k
 WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_dist_placement pl
                WHERE pl.shardid = pg_catalog.get_shard_id_for_distribution_column('queen.messages', k.shard)
                  AND pl.groupid = (SELECT groupid FROM pg_catalog.pg_dist_local_group))
 ORDER BY k.idx;

-- name: local_shard_tables
-- For shard key $1: every table of queen's that Citus keeps, with the name of the shard that
-- holds the key (distributed tables: 'h'; reference tables, whose one shard holds every key,
-- have none: 'n'), and queen's views ('v', none: they read the distributed tables by their
-- names, Citus's to plan), `queen.messages` first. Prepared only where queen is distributed.
-- With each distributed table's shard: its colocation group and the shard's index among the
-- table's shards in hash order, which name Citus's metadata lock of colocated shards
-- (src/shards.rs).
SELECT t.name, t.method, t.shard_name, t.shardid, t.colocationid, t.shard_index FROM (
    -- (queen's tables first, on their own: the shard of key $1 is asked of those only — another
    -- distributed table of the database may be distributed by a column of another type.)
    SELECT 'queen.' || q.relname AS name, 'h' AS method,
           pg_catalog.shard_name(q.logicalrelid, sh.shardid) AS shard_name, sh.shardid,
           q.colocationid::bigint AS colocationid,
           (SELECT count(*) FROM pg_catalog.pg_dist_shard o
             WHERE o.logicalrelid = q.logicalrelid AND o.shardminvalue::integer < sh.shardminvalue::integer) AS shard_index
      FROM (SELECT p.logicalrelid, p.colocationid, c.relname
              FROM pg_catalog.pg_dist_partition p
              JOIN pg_catalog.pg_class c ON c.oid = p.logicalrelid
             WHERE c.relnamespace = 'queen'::regnamespace AND p.partmethod = 'h'
            OFFSET 0) AS q
     CROSS JOIN LATERAL (SELECT pg_catalog.get_shard_id_for_distribution_column(q.logicalrelid, $1) AS shardid) AS g
      JOIN pg_catalog.pg_dist_shard sh ON sh.shardid = g.shardid
    UNION ALL
    SELECT 'queen.' || c.relname, p.partmethod::text, NULL, NULL, NULL, NULL
      FROM pg_catalog.pg_dist_partition p
      JOIN pg_catalog.pg_class c ON c.oid = p.logicalrelid
     WHERE c.relnamespace = 'queen'::regnamespace AND p.partmethod <> 'h'
    UNION ALL
    SELECT 'queen.' || c.relname, 'v', NULL, NULL, NULL, NULL FROM pg_catalog.pg_class c
     WHERE c.relnamespace = 'queen'::regnamespace AND c.relkind = 'v'
) AS t
 ORDER BY t.name <> 'queen.messages', t.name;

-- name: shard_here
-- Whether shard $1 is placed on this node now (read after its metadata lock is held), and
-- whether this node's id mapping covers it (queen.settled_shards, src/cluster.rs): a shard
-- that has just arrived is settled before anything is written in it.
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_placement pl
                WHERE pl.shardid = $1
                  AND pl.groupid = (SELECT groupid FROM pg_catalog.pg_dist_local_group)) AS here,
       EXISTS (SELECT 1 FROM queen.settled_shards s
                WHERE s.shardid = $1
                  AND s.relation = pg_catalog.to_regclass(pg_catalog.shard_name('queen.messages', $1))::oid) AS settled;

-- name: is_coordinator
-- Whether this node is the Citus coordinator (group 0), which folds the queues' registry.
SELECT groupid = 0 AS coordinator FROM pg_catalog.pg_dist_local_group;

-- name: subscriptions_owed
-- Queue $1's group $2: the shards its first pop could not reach, each with the mode and start
-- the group is to have there (queen.subscriptions_owed, node-local on the coordinator).
SELECT shard, mode, from_at FROM queen.subscriptions_owed WHERE queue_id = $1 AND consumer_group = $2;

-- name: owe_subscription
-- Queue $1's group $2 is to be subscribed in shard $3 with mode $4 from $5 (the first such
-- record stays: it is the group's first pop's). 'new' cannot take its point in the order of a
-- shard that is down: it starts there at this time instead ('from' now), so that what reaches
-- the shard after this pop is new.
INSERT INTO queen.subscriptions_owed (queue_id, consumer_group, shard, mode, from_at)
VALUES ($1, $2, $3,
        CASE WHEN $4 = 'new' THEN 'from' ELSE $4 END,
        CASE WHEN $4 = 'new' THEN pg_catalog.clock_timestamp() ELSE $5 END)
    ON CONFLICT DO NOTHING;

-- name: subscription_paid
-- Queue $1's group $2 is subscribed in shard $3 now.
DELETE FROM queen.subscriptions_owed WHERE queue_id = $1 AND consumer_group = $2 AND shard = $3;

-- name: forget_owed_subscriptions
-- Group $1 (NULL: every group) of queue $2 (NULL: every queue) deleted: what its first pops
-- owed goes with it.
DELETE FROM queen.subscriptions_owed
 WHERE ($1::text IS NULL OR consumer_group = $1) AND ($2::uuid IS NULL OR queue_id = $2);

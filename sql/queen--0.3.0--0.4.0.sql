-- queen 0.3.0 → 0.4.0 (issue 21): no role reads or blocks what it was not granted, and
-- maintenance and deletes lose nothing to an open transaction.
-- - Every view is a security barrier: a caller's own conditions run only on the rows the view
--   lets through.
-- - queen's locks are its own (src/locks.rs), which no SQL can take: queen.lock_pair(uuid,
--   text) for the seek's query, closed to PUBLIC.
-- - queen.maintenance_stats adds what the worker could not record (queen_worker_unrecorded():
--   failures, and passes skipped because another was running).
-- - queen_ack_lease(lease_id, status, error) (issue 23, semantics §3.4): a whole lease acked in one
--   call, and its worker's side on Citus, queen.shard_ack_lease.
-- - queen_kv(operations, required_raises) (issue 24): key/value state in the caller's
--   transaction (queen.kv, queen.kv_versions); grants kv_read and kv_write on namespaces.
-- - Timers (issue 24): queen_schedule, queen_cancel_timer, queen_timers and queen.timers.
-- - Locks and semaphores (issue 24): queen_lock, over key/value rows.
-- - queen_message(partition_id, transaction_id) (issue 24): one message and its groups' state.
-- - queen_waiting_pops() returns the queue's name (issue 25): queen.waiting_pops shows it for a
--   queue that does not exist yet.
-- The library refuses a schema of another version until this script has run.
--
-- Written by hand from the difference between the two versions' generated install scripts
-- (docs/development.md, "Cutting a release"); scripts/upgrade-test checks it against every
-- release.

\echo Use "ALTER EXTENSION queen UPDATE TO '0.4.0'" to load this file. \quit

ALTER VIEW queen.queue_stats SET (security_barrier = true);
ALTER VIEW queen.group_lag SET (security_barrier = true);
ALTER VIEW queen.dead_letters_view SET (security_barrier = true);
ALTER VIEW queen.grants SET (security_barrier = true);
-- queen.waiting_pops shows the queue's name also for a queue that does not exist yet (the
-- waiting pop keeps it): queen_waiting_pops() returns it.
DROP VIEW queen.waiting_pops;
DROP FUNCTION queen_waiting_pops();
CREATE  FUNCTION "queen_waiting_pops"() RETURNS TABLE (
	"pid" INT,  /* i32 */
	"queue_id" uuid,  /* Uuid */
	"queue" TEXT,  /* String */
	"since" timestamp with time zone,  /* TimestampWithTimeZone */
	"wakeups" bigint  /* i64 */
)
STRICT VOLATILE PARALLEL SAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queen_waiting_pops_wrapper';
CREATE VIEW queen.waiting_pops WITH (security_barrier) AS
SELECT w.pid, w.queue, w.since, w.wakeups FROM queen_waiting_pops() w;
GRANT SELECT ON queen.waiting_pops TO pg_monitor;

-- queen::api::locks::queen::lock_pair
CREATE  FUNCTION queen."lock_pair"(
	"partition" uuid, /* pgrx :: Uuid */
	"consumer_group" TEXT /* &str */
) RETURNS bool /* bool */
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'lock_pair_wrapper';
REVOKE EXECUTE ON FUNCTION queen.lock_pair(uuid, text) FROM PUBLIC;

-- queen::api::maintain::queen_worker_unrecorded
CREATE  FUNCTION "queen_worker_unrecorded"() RETURNS TABLE (
	"failed_passes" bigint,  /* i64 */
	"skipped_passes" bigint  /* i64 */
)
STRICT VOLATILE PARALLEL SAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queen_worker_unrecorded_wrapper';

CREATE OR REPLACE VIEW queen.maintenance_stats WITH (security_barrier) AS
SELECT coalesce(t.passes, 0) AS passes, coalesce(t.failed_passes, 0) + u.failed_passes AS failed_passes,
       coalesce(t.retention_deleted, 0) AS retention_deleted,
       coalesce(t.completed_retention_deleted, 0) AS completed_retention_deleted,
       coalesce(t.max_wait_dead_lettered, 0) AS max_wait_dead_lettered,
       coalesce(t.registry_rows_folded, 0) AS registry_rows_folded,
       coalesce(t.partitions_removed, 0) AS partitions_removed,
       coalesce(t.partitions_restored, 0) AS partitions_restored,
       t.last_pass_at, t.last_pass_seconds, t.last_report, t.last_failure_at, t.last_error,
       u.skipped_passes
  FROM queen_worker_unrecorded() u
  LEFT JOIN queen.maintenance_totals t ON true
 WHERE t.singleton OR u.failed_passes > 0 OR u.skipped_passes > 0;

-- Max wait counts from a push's commit (src/max_wait.rs).
-- Visibility points (src/max_wait.rs): what a maintenance pass's snapshot saw, in stored ids
-- (transactions below seen_xmax and not in seen_xip had ended), and when. A message has waited
-- maxWaitTimeSeconds once the newest point older than that saw it. Thinned by every pass;
-- not dumped (a restored database counts waits from its own passes).
CREATE TABLE queen.visibility_points (
    taken_at timestamptz PRIMARY KEY,
    seen_xmax bigint     NOT NULL,
    seen_xip  bigint[]   NOT NULL
);

-- The shard key of every table a call writes (issue 22, docs/design.md "Distributed on
-- Citus"): 0 on one server. A constant default: no table is rewritten.
ALTER TABLE queen.messages ADD COLUMN shard integer NOT NULL DEFAULT 0;
ALTER TABLE queen.partitions ADD COLUMN shard integer NOT NULL DEFAULT 0;
ALTER TABLE queen.subscriptions ADD COLUMN shard integer NOT NULL DEFAULT 0;
ALTER TABLE queen.cursors ADD COLUMN shard integer NOT NULL DEFAULT 0;
-- Dead letters replayed (queen_replay_dead_letters): max wait counts afresh from then.
ALTER TABLE queen.cursors ADD COLUMN replayed_at timestamptz;
ALTER TABLE queen.ready ADD COLUMN shard integer NOT NULL DEFAULT 0;
ALTER TABLE queen.discovery ADD COLUMN shard integer NOT NULL DEFAULT 0;
ALTER TABLE queen.dead_letters ADD COLUMN shard integer NOT NULL DEFAULT 0;
ALTER TABLE queen.queue_counts ADD COLUMN shard integer NOT NULL DEFAULT 0;
ALTER TABLE queen.retired_partitions ADD COLUMN shard integer NOT NULL DEFAULT 0;
-- No statistics on txid (schema.sql says why); those gathered before are dropped.
ALTER TABLE queen.messages ALTER COLUMN txid SET STATISTICS 0;
DELETE FROM pg_catalog.pg_statistic
 WHERE starelid = 'queen.messages'::regclass
   AND staattnum = (SELECT attnum FROM pg_catalog.pg_attribute
                     WHERE attrelid = 'queen.messages'::regclass AND attname = 'txid');
-- The unique keys that calls name in ON CONFLICT include it.
DROP INDEX queen.messages_transaction_id;
CREATE UNIQUE INDEX messages_transaction_id ON queen.messages (partition_id, transaction_id, shard)
    WHERE transaction_id IS NOT NULL;
ALTER TABLE queen.cursors DROP CONSTRAINT cursors_pkey, ADD PRIMARY KEY (partition_id, consumer_group, shard);
ALTER TABLE queen.queue_counts DROP CONSTRAINT queue_counts_pkey, ADD PRIMARY KEY (queue_id, shard);
CREATE TABLE queen.shard_keys (
    idx   integer PRIMARY KEY,
    shard integer NOT NULL
);
INSERT INTO queen.shard_keys VALUES (0, 0);

-- On Citus, the shards of queen's tables whose rows this node's mapping covers (src/cluster.rs):
-- a shard that reaches the node (queen_distribute() moving a server's rows out, a shard move,
-- the rebalancer) brings ids of another node's counter, and the node settles its mapping above
-- them before any call uses it. Node-local, like queen.cluster; empty on one server.
CREATE TABLE queen.settled_shards (
    shardid    bigint      PRIMARY KEY,
    settled_at timestamptz NOT NULL DEFAULT clock_timestamp()
);


-- The worker's side of a push on Citus (src/api/push.rs, src/route.rs).
-- queen::api::push::queen::shard_push_one
CREATE  FUNCTION queen."shard_push_one"(
	"shard" INT, /* i32 */
	"queue" TEXT, /* Option < & str > */
	"payload" jsonb, /* Option < Jsonb > */
	"partition" TEXT, /* Option < & str > */
	"transaction_id" TEXT, /* Option < & str > */
	"trace_id" uuid /* Option < Uuid > */
) RETURNS queen.push_result /* PushRow */
VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'shard_push_one_wrapper';

-- queen::api::push::queen::shard_push
CREATE  FUNCTION queen."shard_push"(
	"shard" INT, /* i32 */
	"items" jsonb /* Option < Jsonb > */
) RETURNS SETOF queen.push_result /* PushRow */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'shard_push_wrapper';

-- The worker's side of a pop on Citus (src/api/pop.rs, src/route.rs).
-- queen::api::pop::queen::shard_pop
CREATE  FUNCTION queen."shard_pop"(
	"shard" INT, /* i32 */
	"queue" TEXT, /* Option < & str > */
	"consumer_group" TEXT, /* Option < & str > */
	"batch" INT, /* Option < i32 > */
	"partition" TEXT, /* Option < & str > */
	"partitions" INT, /* Option < i32 > */
	"lease_seconds" INT, /* Option < i32 > */
	"auto_ack" bool, /* Option < bool > */
	"subscription_mode" TEXT, /* Option < & str > */
	"subscription_from" timestamp with time zone, /* Option < TimestampWithTimeZone > */
	"lease_id" uuid /* Option < pgrx :: Uuid > */
) RETURNS SETOF queen.message /* MessageRow */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'shard_pop_wrapper';

-- The worker's side of an ack on Citus (src/api/ack.rs, src/route.rs).
-- queen::api::ack::queen::shard_ack_one
CREATE  FUNCTION queen."shard_ack_one"(
	"shard" INT, /* i32 */
	"message_id" uuid, /* Option < Uuid > */
	"lease_id" uuid, /* Option < Uuid > */
	"status" TEXT, /* Option < & str > */
	"error" TEXT, /* Option < & str > */
	"consumer_group" TEXT, /* Option < & str > */
	"grants" TEXT[] /* :: std :: option :: Option < Vec < String > > */
) RETURNS queen.ack_result /* AckRow */
VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'shard_ack_one_wrapper';

-- queen::api::ack::queen::shard_ack
CREATE  FUNCTION queen."shard_ack"(
	"shard" INT, /* i32 */
	"acks" jsonb, /* Option < Jsonb > */
	"grants" TEXT[] /* :: std :: option :: Option < Vec < String > > */
) RETURNS SETOF queen.ack_result /* AckRow */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'shard_ack_wrapper';

-- queen::api::ack::queen::shard_ack_lease
CREATE  FUNCTION queen."shard_ack_lease"(
	"shard" INT, /* i32 */
	"lease_id" uuid, /* Option < Uuid > */
	"status" TEXT, /* Option < & str > */
	"error" TEXT, /* Option < & str > */
	"grants" TEXT[] /* :: std :: option :: Option < Vec < String > > */
) RETURNS SETOF queen.ack_result /* AckRow */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'shard_ack_lease_wrapper';

-- queen::api::ack::queen_ack_lease (semantics §3.4)
CREATE  FUNCTION "queen_ack_lease"(
	"lease_id" uuid, /* Option < Uuid > */
	"status" TEXT DEFAULT 'completed', /* Option < & str > */
	"error" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS SETOF queen.ack_result /* AckRow */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queen_ack_lease_wrapper';

-- queen::api::admin::queen::shard_renew
CREATE  FUNCTION queen."shard_renew"(
	"shard" INT, /* i32 */
	"lease_id" uuid, /* Option < Uuid > */
	"seconds" INT, /* Option < i32 > */
	"grants" TEXT[] /* :: std :: option :: Option < Vec < String > > */
) RETURNS timestamp with time zone /* Option < TimestampWithTimeZone > */
VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'shard_renew_wrapper';

-- queen::api::admin::queen::shard_seek
CREATE  FUNCTION queen."shard_seek"(
	"shard" INT, /* i32 */
	"queue" TEXT, /* Option < & str > */
	"consumer_group" TEXT, /* Option < & str > */
	"to_time" timestamp with time zone /* Option < TimestampWithTimeZone > */
) RETURNS INT /* i32 */
VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'shard_seek_wrapper';

-- queen::api::admin::queen::shard_delete_group
CREATE  FUNCTION queen."shard_delete_group"(
	"shard" INT, /* i32 */
	"consumer_group" TEXT, /* Option < & str > */
	"queue" TEXT /* Option < & str > */
) RETURNS INT /* i32 */
VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'shard_delete_group_wrapper';

-- queen::api::admin::queen::shard_delete_queue
CREATE  FUNCTION queen."shard_delete_queue"(
	"shard" INT, /* i32 */
	"queue" TEXT /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'shard_delete_queue_wrapper';

-- queen::api::totals::queen::queue_stats_everywhere
CREATE  FUNCTION queen."queue_stats_everywhere"() RETURNS TABLE (
	"queue" TEXT,  /* String */
	"partitions" bigint,  /* i64 */
	"messages" bigint,  /* i64 */
	"consumer_groups" bigint,  /* i64 */
	"dead_letters" bigint,  /* i64 */
	"oldest_message" timestamp with time zone,  /* Ts */
	"newest_message" timestamp with time zone  /* Ts */
)
STRICT VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queue_stats_everywhere_wrapper';

-- queen::api::totals::queen::group_lag_everywhere
CREATE  FUNCTION queen."group_lag_everywhere"() RETURNS TABLE (
	"queue" TEXT,  /* String */
	"consumer_group" TEXT,  /* Option < String > */
	"partition" TEXT,  /* String */
	"pending" bigint,  /* i64 */
	"oldest_pending" timestamp with time zone,  /* Ts */
	"lease_id" uuid,  /* Option < Uuid > */
	"lease_expires_at" timestamp with time zone  /* Ts */
)
STRICT VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'group_lag_everywhere_wrapper';

-- queen::api::totals::queen::dead_letters_everywhere
CREATE  FUNCTION queen."dead_letters_everywhere"() RETURNS TABLE (
	"queue" TEXT,  /* String */
	"partition" TEXT,  /* Option < String > */
	"consumer_group" TEXT,  /* Option < String > */
	"message_id" uuid,  /* Uuid */
	"transaction_id" TEXT,  /* String */
	"payload" jsonb,  /* Option < Jsonb > */
	"error" TEXT,  /* Option < String > */
	"attempts" INT,  /* i32 */
	"created_at" timestamp with time zone,  /* Ts */
	"failed_at" timestamp with time zone,  /* TimestampWithTimeZone */
	"partition_id" uuid,  /* Uuid */
	"trace_id" uuid  /* Option < Uuid > */
)
STRICT VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'dead_letters_everywhere_wrapper';

-- queen::api::pop::queen::shard_subscribe
CREATE  FUNCTION queen."shard_subscribe"(
	"shard" INT, /* i32 */
	"queue" TEXT, /* Option < & str > */
	"consumer_group" TEXT, /* Option < & str > */
	"subscription_mode" TEXT, /* Option < & str > */
	"subscription_from" timestamp with time zone /* Option < TimestampWithTimeZone > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'shard_subscribe_wrapper';

-- A group's subscription per shard (on Citus, a group has rows in every shard).
CREATE OR REPLACE VIEW queen.effective_subscriptions AS
SELECT o.queue_id, o.consumer_group, o.mode, c.from_ts, c.start_xmax, x.xip AS start_xip,
       o.mode || ':' || COALESCE(extract(epoch FROM c.from_ts)::text, '') || ':'
         || COALESCE(c.start_xmax::text, '') || ':' || array_to_string(x.xip, ',') || ':'
         || extract(epoch FROM o.since)::text || CASE WHEN o.seek THEN ':seek' ELSE '' END AS sub_key,
       o.shard
  FROM (SELECT DISTINCT ON (queue_id, consumer_group, shard) queue_id, consumer_group, shard, mode, seek,
               created_at AS since
          FROM queen.subscriptions
         ORDER BY queue_id, consumer_group, shard, seek DESC, CASE WHEN seek THEN created_at END DESC NULLS LAST,
                  created_at) AS o
  CROSS JOIN LATERAL (
        SELECT min(s.start_xmax) FILTER (WHERE s.mode = 'new') AS start_xmax,
               min(s.from_ts) FILTER (WHERE s.mode = 'from') AS from_ts
          FROM queen.subscriptions s
         WHERE s.queue_id = o.queue_id AND s.consumer_group = o.consumer_group AND s.shard = o.shard
           AND s.mode = o.mode AND s.seek = o.seek AND (NOT o.seek OR s.created_at = o.since)) AS c
  CROSS JOIN LATERAL (
        -- (An aggregate over the rows rather than ARRAY(subquery) in a SELECT without FROM:
        -- Citus routes no correlated subquery beside a subquery without FROM.)
        SELECT COALESCE(array_agg(DISTINCT u.x ORDER BY u.x), '{}'::bigint[]) AS xip
          FROM queen.subscriptions s CROSS JOIN LATERAL unnest(s.start_xip) AS u(x)
         WHERE o.mode = 'new'
           AND s.queue_id = o.queue_id AND s.consumer_group = o.consumer_group AND s.shard = o.shard
           AND s.mode = 'new'
           AND s.seek = o.seek AND (NOT o.seek OR s.created_at = o.since)
           AND u.x < c.start_xmax) AS x;

-- queen on Citus (sql/distribute.sql, as a fresh install creates it).

-- Which shard key a partition has among `keys` shard keys: the partition id's first four bytes
-- as an unsigned number, modulo the number of keys (src/shards.rs computes the same).
CREATE FUNCTION queen.shard_index(partition_id uuid, keys integer) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (('x' || substr(replace(partition_id::text, '-', ''), 1, 8))::bit(32)::bigint % keys)::integer;

-- queen_distribute(shard_count): run once on a Citus coordinator where every node has queen
-- installed and preloaded. Picks one shard key per Citus shard, gives every existing row its
-- partition's shard (a queue's subscriptions go to every shard; discovery points and counts,
-- which each shard rebuilds, are dropped), makes the tables that calls write distributed by
-- `shard` and colocated, the registry of queues, the grants and the shard keys reference
-- tables. The nodes' id mappings and queen's maintenance stay each node's own. Returns what it
-- did. A superuser's function (REVOKEd from PUBLIC in views.sql).
CREATE FUNCTION queen_distribute(shard_count integer DEFAULT NULL) RETURNS jsonb
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $fn$
DECLARE
    n integer;
    step bigint;
    lo bigint;
    hi bigint;
    v integer;
    keys integer[] := '{}';
    t text;
    w record;
    had_rows boolean;
    placed integer;
    per_shard text[] := ARRAY['messages', 'partitions', 'subscriptions', 'cursors', 'ready',
                              'discovery', 'dead_letters', 'queue_counts', 'retired_partitions'];
    reference text[] := ARRAY['queues', 'privileges', 'shard_keys'];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        RAISE EXCEPTION 'queen_distribute: Citus is not installed in database "%"', current_database()
            USING ERRCODE = '55000', HINT = 'Install Citus, preload it before queen on every node, and CREATE EXTENSION citus (docs/scale-out.md).';
    END IF;
    IF NOT citus_is_coordinator() THEN
        RAISE EXCEPTION 'queen_distribute: this node is not the Citus coordinator'
            USING ERRCODE = '55000', HINT = 'Run it on the coordinator.';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'queen.messages'::regclass) THEN
        RAISE EXCEPTION 'queen_distribute: queen is already distributed (% shards)',
            (SELECT count(*) FROM queen.shard_keys) USING ERRCODE = '55000';
    END IF;
    n := COALESCE(shard_count, current_setting('citus.shard_count')::integer);
    IF n < 1 OR n > 1024 THEN
        RAISE EXCEPTION 'queen_distribute: argument "shard_count" must be between 1 and 1024, got %', n
            USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_dist_node WHERE noderole = 'primary' AND isactive AND groupid <> 0) THEN
        RAISE EXCEPTION 'queen_distribute: the cluster has no worker'
            USING ERRCODE = '55000', HINT = 'Add workers with citus_add_node first.';
    END IF;
    FOR w IN SELECT * FROM run_command_on_workers($$SELECT COALESCE((SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'queen'), '-') || ' ' || current_setting('shared_preload_libraries')$$) LOOP
        IF NOT w.success OR split_part(w.result, ' ', 1) <> (SELECT extversion FROM pg_extension WHERE extname = 'queen')
           OR position('queen' IN substr(w.result, position(' ' IN w.result))) = 0 THEN
            RAISE EXCEPTION 'queen_distribute: worker %:% does not have queen % installed and preloaded (it says: %)',
                w.nodename, w.nodeport, (SELECT extversion FROM pg_extension WHERE extname = 'queen'), w.result
                USING ERRCODE = '55000', HINT = 'shared_preload_libraries = ''citus,queen'' on every node (docs/scale-out.md).';
        END IF;
    END LOOP;
    -- One key per shard: Citus splits the int4 hash space into n equal ranges, shard i taking
    -- the i-th; the key of shard i is the least non-negative integer whose hash falls in it.
    step := 4294967296 / n;
    FOR i IN 0 .. n - 1 LOOP
        lo := -2147483648 + i * step;
        hi := CASE WHEN i = n - 1 THEN 2147483647 ELSE lo + step - 1 END;
        v := 0;
        WHILE NOT (hashint4(v)::bigint BETWEEN lo AND hi) LOOP
            v := v + 1;
        END LOOP;
        keys := keys || v;
    END LOOP;
    DELETE FROM queen.shard_keys;
    INSERT INTO queen.shard_keys (idx, shard) SELECT i - 1, keys[i] FROM generate_subscripts(keys, 1) AS i;

    had_rows := EXISTS (SELECT 1 FROM queen.messages) OR EXISTS (SELECT 1 FROM queen.cursors);
    -- Citus distributes no table with triggers. The ones that notice rows arriving from
    -- outside queen (a restore) go first, so that this function's own moves are not taken for
    -- one: on Citus a node notices the shards that reach it instead.
    FOR t IN SELECT c.relname FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
              WHERE c.relnamespace = 'queen'::regnamespace AND g.tgname = 'rows_arrived' AND c.relname <> 'cluster' LOOP
        EXECUTE format('DROP TRIGGER rows_arrived ON queen.%I', t);
    END LOOP;
    -- Every row to its partition's shard.
    FOREACH t IN ARRAY ARRAY['messages', 'partitions', 'cursors', 'ready', 'dead_letters', 'retired_partitions'] LOOP
        EXECUTE format('UPDATE queen.%I x SET shard = k.shard FROM queen.shard_keys k WHERE k.idx = queen.shard_index(x.partition_id, $1)', t) USING n;
    END LOOP;
    -- A queue's subscriptions in every shard; the points each shard rebuilds, dropped.
    INSERT INTO queen.subscriptions (queue_id, consumer_group, mode, from_ts, start_xmax, start_xip, created_at, seek, shard)
    SELECT s.queue_id, s.consumer_group, s.mode, s.from_ts, s.start_xmax, s.start_xip, s.created_at, s.seek, k.shard
      FROM queen.subscriptions s CROSS JOIN queen.shard_keys k WHERE s.shard = 0 AND k.shard <> 0;
    IF NOT (0 = ANY (keys)) THEN
        DELETE FROM queen.subscriptions WHERE shard = 0;
    END IF;
    DELETE FROM queen.discovery;
    DELETE FROM queen.queue_counts;

    -- Citus wants the distribution key in every unique index.
    ALTER TABLE queen.messages DROP CONSTRAINT messages_pkey, ADD PRIMARY KEY (partition_id, txid, seq, shard);
    DROP INDEX queen.messages_message_id;
    CREATE UNIQUE INDEX messages_message_id ON queen.messages (message_id, shard);
    ALTER TABLE queen.dead_letters DROP CONSTRAINT dead_letters_pkey,
        ADD PRIMARY KEY (partition_id, consumer_group, txid, seq, shard);

    -- The rebalancer moves a shard (and copies the reference tables to a new node) by logical
    -- replication, which needs every table to say how its rows are told apart: those without
    -- a primary key name the whole row.
    FOREACH t IN ARRAY ARRAY['partitions', 'subscriptions', 'ready', 'discovery', 'retired_partitions', 'queues'] LOOP
        EXECUTE format('ALTER TABLE queen.%I REPLICA IDENTITY FULL', t);
    END LOOP;
    PERFORM set_config('citus.shard_replication_factor', '1', true);
    PERFORM create_distributed_table('queen.messages', 'shard', shard_count => n, colocate_with => 'none');
    FOREACH t IN ARRAY per_shard[2:] LOOP
        PERFORM create_distributed_table(format('queen.%I', t)::regclass, 'shard', colocate_with => 'queen.messages');
    END LOOP;
    FOREACH t IN ARRAY reference LOOP
        PERFORM create_reference_table(format('queen.%I', t)::regclass);
    END LOOP;
    -- The worker's side of each call, run where its shard lives (src/route.rs).
    PERFORM create_distributed_function('queen.shard_push_one(integer,text,jsonb,text,text,uuid)', 'shard',
                                        colocate_with => 'queen.messages', force_delegation => true);
    PERFORM create_distributed_function('queen.shard_push(integer,jsonb)', 'shard',
                                        colocate_with => 'queen.messages', force_delegation => true);
    PERFORM create_distributed_function(
        'queen.shard_pop(integer,text,text,integer,text,integer,integer,boolean,text,timestamptz,uuid)', 'shard',
        colocate_with => 'queen.messages', force_delegation => true);
    PERFORM create_distributed_function('queen.shard_subscribe(integer,text,text,text,timestamptz)', 'shard',
                                        colocate_with => 'queen.messages', force_delegation => true);
    PERFORM create_distributed_function('queen.shard_ack_one(integer,uuid,uuid,text,text,text,text[])', 'shard',
                                        colocate_with => 'queen.messages', force_delegation => true);
    PERFORM create_distributed_function('queen.shard_ack(integer,jsonb,text[])', 'shard',
                                        colocate_with => 'queen.messages', force_delegation => true);
    PERFORM create_distributed_function('queen.shard_ack_lease(integer,uuid,text,text,text[])', 'shard',
                                        colocate_with => 'queen.messages', force_delegation => true);
    PERFORM create_distributed_function('queen.shard_renew(integer,uuid,integer,text[])', 'shard',
                                        colocate_with => 'queen.messages', force_delegation => true);
    PERFORM create_distributed_function('queen.shard_seek(integer,text,text,timestamptz)', 'shard',
                                        colocate_with => 'queen.messages', force_delegation => true);
    PERFORM create_distributed_function('queen.shard_delete_group(integer,text,text)', 'shard',
                                        colocate_with => 'queen.messages', force_delegation => true);
    PERFORM create_distributed_function('queen.shard_delete_queue(integer,text)', 'shard',
                                        colocate_with => 'queen.messages', force_delegation => true);
    PERFORM create_distributed_function('queen.shard_replay_dead_letters(integer,text,text,uuid)', 'shard',
                                        colocate_with => 'queen.messages', force_delegation => true);
    PERFORM create_distributed_function('queen.shard_purge_dead_letters(integer,text,text,uuid,timestamptz)',
                                        'shard', colocate_with => 'queen.messages', force_delegation => true);
    -- The views answer for the whole cluster: each shard read on its worker by the
    -- coordinator, as the extension's owner, and added up there (src/totals.rs).
    CREATE OR REPLACE VIEW queen.queue_stats WITH (security_barrier) AS
        SELECT * FROM queen.queue_stats_everywhere();
    CREATE OR REPLACE VIEW queen.group_lag WITH (security_barrier) AS
        SELECT * FROM queen.group_lag_everywhere();
    CREATE OR REPLACE VIEW queen.dead_letters_view WITH (security_barrier) AS
        SELECT * FROM queen.dead_letters_everywhere();
    -- The coordinator's own copies of the rows, now in the shards, are not kept beside them.
    FOREACH t IN ARRAY per_shard || reference LOOP
        PERFORM truncate_local_data_after_distributing_table(format('queen.%I', t)::regclass);
    END LOOP;
    SELECT count(DISTINCT get_shard_id_for_distribution_column('queen.messages', k.shard)) INTO placed FROM queen.shard_keys k;
    IF placed <> n THEN
        RAISE EXCEPTION 'queen_distribute: the % shard keys fall into % shards, not one each', n, placed
            USING ERRCODE = 'XX000';
    END IF;
    RETURN jsonb_build_object('shards', n, 'keys', to_jsonb(keys), 'distributed', to_jsonb(per_shard),
                              'reference', to_jsonb(reference), 'moved_rows', had_rows);
END
$fn$;
REVOKE EXECUTE ON FUNCTION queen_distribute(integer) FROM PUBLIC;

-- The set-returning functions run under queen's search_path without a SET clause
-- (gucs::with_fixed_search_path): a SET clause was applied at each of the calls that hand out
-- their rows, 100 times for a pop of 100.
ALTER FUNCTION queen_pop(text, text, integer, text, integer, integer, integer, boolean, text, timestamp with time zone)
    RESET search_path;
ALTER FUNCTION queen_push(jsonb) RESET search_path;
ALTER FUNCTION queen_ack(jsonb) RESET search_path;

-- Key/value state (issue 24, src/kv.rs): queen_kv, its table and version sequence, dumped
-- with the data; kv_read and kv_write grants name namespaces.
CREATE SEQUENCE queen.kv_versions;
CREATE TABLE queen.kv (
    namespace  text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    value      jsonb       NOT NULL,
    version    bigint      NOT NULL,
    expires_at timestamptz,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, key)
);
CREATE INDEX kv_expiry ON queen.kv (expires_at) WHERE expires_at IS NOT NULL;
SELECT pg_catalog.pg_extension_config_dump('queen.kv', '');
SELECT pg_catalog.pg_extension_config_dump('queen.kv_versions', '');
ALTER TABLE queen.privileges DROP CONSTRAINT privileges_privilege_check,
    ADD CONSTRAINT privileges_privilege_check
        CHECK (privilege IN ('push', 'pop', 'configure', 'read', 'kv_read', 'kv_write'));

-- queen::api::kv::queen_kv
CREATE  FUNCTION "queen_kv"(
	"operations" jsonb, /* Option < Jsonb > */
	"required_raises" bool DEFAULT true /* bool */
) RETURNS SETOF jsonb /* JsonB */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queen_kv_wrapper';

-- Timers (src/timers.rs, queen_schedule): one row per pending timer, removed when it fires
-- (its message pushed in the same transaction) or is cancelled. Kept by (queue, key); the
-- queue by id, derived from its name, as everywhere. message_id is the id its message will
-- have. timers_due serves the firing, earliest first.
CREATE TABLE queen.timers (
    queue_id       uuid        NOT NULL,
    queue          text        NOT NULL,
    timer_key      text COLLATE "C" NOT NULL,
    partition      text        NOT NULL,
    payload        jsonb       NOT NULL,
    transaction_id text        NOT NULL,
    message_id     uuid        NOT NULL,
    trace_id       uuid,
    deliver_at     timestamptz NOT NULL,
    scheduled_at   timestamptz NOT NULL,
    attempts       integer     NOT NULL DEFAULT 0,
    last_error     text,
    PRIMARY KEY (queue_id, timer_key)
);
CREATE INDEX timers_due ON queen.timers (deliver_at);
SELECT pg_catalog.pg_extension_config_dump('queen.timers', '');
-- Their result shapes (src/api/rows.rs).
CREATE TYPE queen.timer_result AS (queue text, timer_key text, partition text, message_id uuid,
                                  transaction_id text, deliver_at timestamptz, status text);
CREATE TYPE queen.timer AS (queue text, timer_key text, partition text, payload jsonb, transaction_id text,
                            message_id uuid, trace_id uuid, deliver_at timestamptz,
                            scheduled_at timestamptz, attempts int, last_error text);

-- queen::api::permits::queen_lock
CREATE  FUNCTION "queen_lock"(
	"operations" jsonb /* Option < Jsonb > */
) RETURNS SETOF jsonb /* JsonB */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queen_lock_wrapper';

-- queen::api::timers::queen_schedule
CREATE  FUNCTION "queen_schedule"(
	"queue" TEXT, /* Option < & str > */
	"timer_key" TEXT, /* Option < & str > */
	"payload" jsonb, /* Option < Jsonb > */
	"deliver_at" timestamp with time zone, /* Option < TimestampWithTimeZone > */
	"partition" TEXT DEFAULT 'Default', /* Option < & str > */
	"transaction_id" TEXT DEFAULT NULL, /* Option < & str > */
	"trace_id" uuid DEFAULT NULL /* Option < Uuid > */
) RETURNS queen.timer_result /* TimerResultRow */
VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queen_schedule_wrapper';

-- queen::api::timers::queen_cancel_timer
CREATE  FUNCTION "queen_cancel_timer"(
	"queue" TEXT, /* Option < & str > */
	"timer_key" TEXT /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queen_cancel_timer_wrapper';

-- queen::api::timers::queen_timers
CREATE  FUNCTION "queen_timers"(
	"queue" TEXT, /* Option < & str > */
	"timer_key" TEXT DEFAULT NULL, /* Option < & str > */
	"after_key" TEXT DEFAULT NULL, /* Option < & str > */
	"page" INT DEFAULT NULL /* Option < i32 > */
) RETURNS SETOF queen.timer /* TimerRow */
VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queen_timers_wrapper';

-- queen::api::admin::queen_message
CREATE  FUNCTION "queen_message"(
	"partition_id" uuid, /* Option < Uuid > */
	"transaction_id" TEXT /* Option < & str > */
) RETURNS jsonb /* Option < pgrx :: JsonB > */
VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queen_message_wrapper';

-- Dead letters replayed and purged (src/dead_letters.rs).
-- queen::api::dead_letters::queen_replay_dead_letters
CREATE  FUNCTION "queen_replay_dead_letters"(
	"queue" TEXT, /* Option < & str > */
	"consumer_group" TEXT DEFAULT NULL, /* Option < & str > */
	"message_id" uuid DEFAULT NULL /* Option < Uuid > */
) RETURNS INT /* i32 */
VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queen_replay_dead_letters_wrapper';

-- queen::api::dead_letters::queen_purge_dead_letters
CREATE  FUNCTION "queen_purge_dead_letters"(
	"queue" TEXT, /* Option < & str > */
	"consumer_group" TEXT DEFAULT NULL, /* Option < & str > */
	"message_id" uuid DEFAULT NULL, /* Option < Uuid > */
	"failed_before" timestamp with time zone DEFAULT NULL /* Option < TimestampWithTimeZone > */
) RETURNS INT /* i32 */
VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'queen_purge_dead_letters_wrapper';

-- queen::api::dead_letters::queen::shard_replay_dead_letters
CREATE  FUNCTION queen."shard_replay_dead_letters"(
	"shard" INT, /* i32 */
	"queue" TEXT, /* Option < & str > */
	"consumer_group" TEXT, /* Option < & str > */
	"message_id" uuid /* Option < Uuid > */
) RETURNS INT /* i32 */
VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'shard_replay_dead_letters_wrapper';

-- queen::api::dead_letters::queen::shard_purge_dead_letters
CREATE  FUNCTION queen."shard_purge_dead_letters"(
	"shard" INT, /* i32 */
	"queue" TEXT, /* Option < & str > */
	"consumer_group" TEXT, /* Option < & str > */
	"message_id" uuid, /* Option < Uuid > */
	"failed_before" timestamp with time zone /* Option < TimestampWithTimeZone > */
) RETURNS INT /* i32 */
VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'shard_purge_dead_letters_wrapper';

-- A lease's batch stored packed (src/packed_keys.rs): a few bytes a key where two bigint[] took
-- sixteen. The batches of leases open at the update are packed as they are.
CREATE  FUNCTION queen."batch_keys"(
	"packed" bytea /* & [u8] */
) RETURNS TABLE (
	"txid" bigint,  /* i64 */
	"seq" bigint  /* i64 */
)
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'batch_keys_wrapper';
CREATE  FUNCTION queen."pack_keys"(
	"txids" bigint[], /* Vec < Option < i64 > > */
	"seqs" bigint[] /* Vec < Option < i64 > > */
) RETURNS bytea /* Vec < u8 > */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'pack_keys_wrapper';
REVOKE EXECUTE ON FUNCTION queen.batch_keys(bytea), queen.pack_keys(bigint[], bigint[]) FROM PUBLIC;
ALTER FUNCTION queen.batch_keys(bytea) ROWS 10;
ALTER TABLE queen.cursors ADD COLUMN lease_keys bytea;
UPDATE queen.cursors SET lease_keys = queen.pack_keys(lease_txid, lease_seq) WHERE lease_txid IS NOT NULL;
ALTER TABLE queen.cursors DROP COLUMN lease_txid, DROP COLUMN lease_seq;

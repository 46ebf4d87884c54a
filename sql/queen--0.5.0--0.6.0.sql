-- queen 0.5.0 → 0.6.0.
-- - A timer keeps the role that scheduled it: the firing pushes only while that role may still
--   push to the queue, and cancels it otherwise (docs/api.md, queen_schedule); the totals count
--   such cancels (maintenance_stats.timers_cancelled). Timers pending from before have no such
--   role and fire as they would have.
-- - A dead letter whose message a seek put back before the group's position is marked
--   `reopened`; once the group finishes the message again it no longer stands (the view leaves
--   it out, a replay delivers nothing for it). Dead letters filed before stand as they were.
-- - A page of candidates for a pop is in one total order, due time then partition, which the
--   index of hints now holds: pages that end among equal due times read the same hints by
--   hand and by statement.
-- - queen_lock keeps locks in lock namespaces granted as key/value namespaces (docs/api.md,
--   queen_lock): the default one, `queen-locks`, keeps its permits where they were and is granted
--   as before, so nothing moves. A permit records the role that took it, and only that role
--   (or one with its privileges) renews or releases it; permits taken before record none, so
--   only superusers and the extension's owner act on them until they expire. (No table
--   changes for it: the rules are the library's.)

-- Candidates in one total order, due time then partition (pop.sql candidates, direct.rs).
DROP INDEX queen.ready_next;
CREATE INDEX ready_next ON queen.ready (queue_id, consumer_group, ready_at, partition_id);

ALTER TABLE queen.timers ADD COLUMN scheduled_by regrole;
ALTER TABLE queen.dead_letters ADD COLUMN reopened boolean NOT NULL DEFAULT false;
ALTER TABLE queen.maintenance_totals ADD COLUMN timers_cancelled bigint NOT NULL DEFAULT 0;

CREATE OR REPLACE VIEW queen.maintenance_stats WITH (security_barrier) AS
SELECT coalesce(t.passes, 0) AS passes, coalesce(t.failed_passes, 0) + u.failed_passes AS failed_passes,
       coalesce(t.retention_deleted, 0) AS retention_deleted,
       coalesce(t.completed_retention_deleted, 0) AS completed_retention_deleted,
       coalesce(t.max_wait_dead_lettered, 0) AS max_wait_dead_lettered,
       coalesce(t.registry_rows_folded, 0) AS registry_rows_folded,
       coalesce(t.partitions_removed, 0) AS partitions_removed,
       coalesce(t.partitions_restored, 0) AS partitions_restored,
       t.last_pass_at, t.last_pass_seconds, t.last_report, t.last_failure_at, t.last_error,
       u.skipped_passes, coalesce(t.timers_cancelled, 0) AS timers_cancelled
  FROM queen_worker_unrecorded() u
  LEFT JOIN queen.maintenance_totals t ON true
 WHERE t.singleton OR u.failed_passes > 0 OR u.skipped_passes > 0;

CREATE OR REPLACE VIEW queen.dead_letters_view WITH (security_barrier) AS
SELECT q.name AS queue,
       COALESCE(m.partition, p.name) AS partition,
       NULLIF(d.consumer_group, '__QUEUE_MODE__') AS consumer_group,
       d.message_id,
       COALESCE(m.transaction_id, d.message_id::text) AS transaction_id,
       m.payload,
       d.error,
       d.attempts,
       m.created_at,
       d.failed_at,
       d.partition_id,
       m.trace_id
  FROM queen.dead_letters d
  LEFT JOIN queen.messages m ON m.partition_id = d.partition_id AND m.txid = d.txid AND m.seq = d.seq
  LEFT JOIN LATERAL (SELECT name FROM queen.queues WHERE queue_id = d.queue_id ORDER BY created_at LIMIT 1) q ON true
  LEFT JOIN LATERAL (SELECT name FROM queen.partitions WHERE partition_id = d.partition_id ORDER BY created_at LIMIT 1) p ON true
 WHERE queen.allowed(q.name, 'read')
   AND NOT (d.reopened AND EXISTS (
        -- A dead letter whose message the group finished again since a seek put it back
        -- (completed it: filed anew, it would not be reopened): it no longer stands.
        SELECT 1 FROM queen.cursors c
         WHERE c.partition_id = d.partition_id AND c.consumer_group = d.consumer_group AND c.shard = d.shard
           AND (EXISTS (SELECT FROM unnest(c.ahead_txid, c.ahead_seq) AS a(t, s) WHERE a.t = d.txid AND a.s = d.seq)
                OR CASE WHEN d.txid = ANY (c.pending_txid)
                        THEN d.seq <= (SELECT x.s FROM unnest(c.pending_txid, c.pending_seq) AS x(t, s)
                                        WHERE x.t = d.txid LIMIT 1)
                        ELSE (d.txid, d.seq) <= (c.done_txid, c.done_seq) END)));

-- A shard that left this node and came back is an arrival again (src/cluster.rs): known by the
-- local table that holds it. Rows from before name none, and are settled again at the next
-- check (a rebase that moves nothing when the mapping already covers them).
ALTER TABLE queen.settled_shards ADD COLUMN relation oid;

-- A group's subscription owed to a shard its first pop could not reach (src/route.rs).
CREATE TABLE queen.subscriptions_owed (
    queue_id       uuid        NOT NULL,
    consumer_group text        NOT NULL,
    shard          integer     NOT NULL,
    mode           text        NOT NULL,
    from_at        timestamptz,
    owed_since     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (queue_id, consumer_group, shard)
);

-- On a node of a Citus cluster where queen is distributed, the views answer for the whole
-- cluster: each shard read by the node that holds it, as the extension's owner, and added up
-- on the node asked (src/totals.rs). queen_distribute() runs it on every node, an update of
-- the extension on a distributed node runs it there, and a worker added later runs it once
-- (docs/scale-out.md). Only on this node (Citus carries none of it elsewhere). A superuser's
-- function (REVOKEd from PUBLIC in views.sql).
CREATE FUNCTION queen.citus_views() RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $fn$
BEGIN
    PERFORM set_config('citus.enable_ddl_propagation', 'off', true);
    CREATE OR REPLACE VIEW queen.queue_stats WITH (security_barrier) AS
        SELECT * FROM queen.queue_stats_everywhere();
    CREATE OR REPLACE VIEW queen.group_lag WITH (security_barrier) AS
        SELECT * FROM queen.group_lag_everywhere();
    CREATE OR REPLACE VIEW queen.dead_letters_view WITH (security_barrier) AS
        SELECT * FROM queen.dead_letters_everywhere();
END
$fn$;
REVOKE EXECUTE ON FUNCTION queen.citus_views() FROM PUBLIC;

-- queen_distribute() itself now makes the views through queen.citus_views(), on every node.
CREATE OR REPLACE FUNCTION queen_distribute(shard_count integer DEFAULT NULL) RETURNS jsonb
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
    PERFORM queen.citus_views();
    -- The coordinator's own copies of the rows, now in the shards, are not kept beside them.
    FOREACH t IN ARRAY per_shard || reference LOOP
        PERFORM truncate_local_data_after_distributing_table(format('queen.%I', t)::regclass);
    END LOOP;
    SELECT count(DISTINCT get_shard_id_for_distribution_column('queen.messages', k.shard)) INTO placed FROM queen.shard_keys k;
    IF placed <> n THEN
        RAISE EXCEPTION 'queen_distribute: the % shard keys fall into % shards, not one each', n, placed
            USING ERRCODE = 'XX000';
    END IF;
    -- The workers' views too (Citus carries no DDL of an extension's objects to them).
    FOR w IN SELECT * FROM run_command_on_workers($$SELECT queen.citus_views()$$) LOOP
        IF NOT w.success THEN
            RAISE EXCEPTION 'queen_distribute: the views of worker %:% could not be made: %', w.nodename, w.nodeport, w.result
                USING ERRCODE = '55000';
        END IF;
    END LOOP;
    RETURN jsonb_build_object('shards', n, 'keys', to_jsonb(keys), 'distributed', to_jsonb(per_shard),
                              'reference', to_jsonb(reference), 'moved_rows', had_rows);
END
$fn$;

-- A distributed node's views read every shard (the one-server views above do not run there).
DO $do$
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = 'queen.messages'::regclass) THEN
            PERFORM queen.citus_views();
        END IF;
    END IF;
END
$do$;
